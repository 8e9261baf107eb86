'use strict';
// Drives the real moat binary: $MOAT_BIN, else ../../build/moat.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  createSandbox, SandboxError, SandboxUnavailableError, SandboxPolicyError, SandboxConfigError,
} = require('..');

const MOAT = process.env.MOAT_BIN || path.resolve(__dirname, '../../../build/moat');
if (!fs.existsSync(MOAT)) throw new Error(`moat binary not found at ${MOAT}; build it or set MOAT_BIN`);

let sandbox;
test.before(() => { sandbox = createSandbox({ provider: 'native', moatPath: MOAT, timeout: 20000 }); });
test.after(() => sandbox.dispose());

test('python', async () => {
  const r = await sandbox.run('print(6*7)', { language: 'python' });
  assert.equal(r.stdout, '42\n');
  assert.equal(r.stderr, '');
  assert.equal(r.exitCode, 0);
  assert.equal(r.timedOut, false);
  assert.equal(r.provider, 'native');
  assert.equal(typeof r.durationMs, 'number');
});

test('python is the default language', async () => {
  const r = await sandbox.run('import sys; print(sys.version_info[0])');
  assert.equal(r.stdout, '3\n');
});

test('javascript', async () => {
  const r = await sandbox.run('console.log([1, 2, 3].map((x) => x * 2).join(","))', { language: 'javascript' });
  assert.equal(r.stdout, '2,4,6\n');
  assert.equal(r.exitCode, 0);
});

test('typescript', async () => {
  const r = await sandbox.run('const n: number = 41; console.log(n + 1);', { language: 'typescript' });
  assert.equal(r.stdout, '42\n');
  assert.equal(r.exitCode, 0);
});

test('bash, exit code and stderr', async () => {
  const r = await sandbox.run('echo out; echo err >&2; exit 7', { language: 'bash' });
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.exitCode, 7);
});

test('timeout: timedOut, exitCode null', async () => {
  const t0 = Date.now();
  const r = await sandbox.run('while True: pass', { timeout: 500 });
  assert.equal(r.timedOut, true);
  assert.equal(r.exitCode, null);
  assert.ok(Date.now() - t0 < 10000);
});

test('timeout from the sandbox config', async () => {
  const s = createSandbox({ moatPath: MOAT, timeout: 400 });
  try {
    const r = await s.run('import time; time.sleep(30)');
    assert.equal(r.timedOut, true);
  } finally { await s.dispose(); }
});

test('env: only what the caller passes', async () => {
  process.env.MOAT_CLIENT_HOST_SECRET = 'host-secret-xyz';
  const r = await sandbox.run('import os; print(os.environ.get("GREETING")); print(os.environ.get("MOAT_CLIENT_HOST_SECRET"))',
    { env: { GREETING: 'hello there' } });
  assert.equal(r.stdout, 'hello there\nNone\n');
});

test('files and stdin', async () => {
  const r = await sandbox.run('print(open("data/in.txt").read().upper()); import sys; print(sys.stdin.read())',
    { files: { 'data/in.txt': 'abc' }, stdin: 'from stdin' });
  assert.equal(r.stdout, 'ABC\nfrom stdin\n');
});

test('outputs: files written under /sandbox come back', async () => {
  const r = await sandbox.run("open('out.txt','w').write('made inside')\nopen('b.bin','wb').write(b'\\x00\\x01')",
    { outputs: ['*.txt', '*.bin'] });
  assert.equal(r.exitCode, 0);
  assert.deepEqual(r.files['out.txt'], { size: 11, truncated: false, encoding: 'utf8', content: 'made inside' });
  assert.equal(r.files['b.bin'].encoding, 'base64');
  assert.equal(Buffer.from(r.files['b.bin'].content, 'base64').toString('hex'), '0001');
});

test('bad env name: SandboxPolicyError', async () => {
  await assert.rejects(sandbox.run('print(1)', { env: { 'BAD;NAME': 'x' } }), (e) => {
    assert.ok(e instanceof SandboxPolicyError);
    assert.ok(e instanceof SandboxError);
    assert.equal(e.provider, 'native');
    return true;
  });
  // the names moat also accepts still run
  for (const language of ['py', 'python3']) {
    const r = await sandbox.run('print(1)', { language });
    assert.equal(r.stdout, '1\n', language);
  }
  const js = await sandbox.run('console.log(2)', { language: 'js' });
  assert.equal(js.stdout, '2\n');
});

test('file path escaping /sandbox: SandboxPolicyError', async () => {
  await assert.rejects(sandbox.run('print(1)', { files: { '../x': 'y' } }), SandboxPolicyError);
});

test('bad request: SandboxConfigError', async () => {
  await assert.rejects(sandbox.run(42), SandboxConfigError);
  await assert.rejects(sandbox.run('print(1)', { timeout: 'soon' }), SandboxConfigError);
});

test('unsupported language: SandboxPolicyError, as in every aistack adapter', async () => {
  await assert.rejects(sandbox.run('print(1)', { language: 'cobol' }), (e) => {
    assert.ok(e instanceof SandboxPolicyError, `${e.name}: ${e.message}`);
    assert.match(e.message, /^Sandbox policy violation: unsupported language: cobol/);
    assert.equal(e.provider, 'native');
    return true;
  });
});

test('provider none refuses', async () => {
  const s = createSandbox({ provider: 'none', moatPath: MOAT });
  await assert.rejects(s.run('print(1)'), SandboxPolicyError);
  await s.dispose();
});

test('unknown provider: SandboxConfigError at creation', () => {
  assert.throws(() => createSandbox({ provider: 'host' }), SandboxConfigError);
  assert.throws(() => createSandbox('docker'), SandboxConfigError);
});

test('e2b without a key: SandboxUnavailableError from moat', async () => {
  const saved = process.env.E2B_API_KEY;
  delete process.env.E2B_API_KEY;
  const s = createSandbox({ provider: 'e2b', moatPath: MOAT });
  try {
    await assert.rejects(s.run('print(1)'), (e) => {
      assert.ok(e instanceof SandboxUnavailableError);
      assert.equal(e.provider, 'e2b');
      assert.match(e.message, /E2B_API_KEY/);
      return true;
    });
  } finally {
    await s.dispose();
    if (saved !== undefined) process.env.E2B_API_KEY = saved;
  }
});

test('API keys never reach the config file', async () => {
  const s = createSandbox({ provider: 'daytona', moatPath: MOAT, daytonaApiKey: 'dk-secret-123',
    daytonaApiUrl: 'https://localhost./api' });
  try {
    await assert.rejects(s.run('print(1)'), (e) => {
      // a URL naming this machine is the caller's mistake: a config error (moat exits 2)
      assert.ok(e instanceof SandboxConfigError, `${e.name}: ${e.message}`);
      assert.match(e.message, /loopback/);
      assert.ok(!e.message.includes('dk-secret-123'));
      return true;
    });
    const dirs = fs.readdirSync(os.tmpdir()).filter((d) => d.startsWith('moat-client-'));
    for (const d of dirs) {
      const f = path.join(os.tmpdir(), d, 'moat.json');
      if (fs.existsSync(f)) assert.ok(!fs.readFileSync(f, 'utf8').includes('dk-secret-123'));
    }
  } finally { await s.dispose(); }
});

test('missing moat binary: SandboxUnavailableError', async () => {
  const s = createSandbox({ moatPath: '/nonexistent/moat' });
  await assert.rejects(s.run('print(1)'), SandboxUnavailableError);
  await s.dispose();
});

test('client deadline: a hung moat is killed → SandboxUnavailableError', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-hang-'));
  const fake = path.join(dir, 'moat');
  fs.writeFileSync(fake, '#!/bin/sh\nexec sleep 30\n', { mode: 0o755 });
  const s = createSandbox({ moatPath: fake, timeout: 200, deadlineGraceMs: 300 });
  const t0 = Date.now();
  try {
    await assert.rejects(s.run('print(1)'), (e) => {
      assert.ok(e instanceof SandboxUnavailableError);
      assert.match(e.message, /did not answer within 500 ms/);
      return true;
    });
    assert.ok(Date.now() - t0 < 5000);
  } finally {
    await s.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('dispose: later runs are refused and the temp config is gone', async () => {
  const s = createSandbox({ moatPath: MOAT });
  await s.dispose();
  await assert.rejects(s.run('print(1)'), SandboxError);
});

// issue 48: bytes where text is expected are the client's own error, named, before any run
test('bytes where text is expected: SandboxConfigError naming the field', async () => {
  const sb = createSandbox({ provider: 'native', moatPath: '/nonexistent/moat' });
  try {
    for (const [opts, where] of [
      [{ stdin: Buffer.from('x') }, 'stdin'],
      [{ files: { 'a.txt': Buffer.from('x') } }, 'files["a.txt"]'],
      [{ env: { A: new Uint8Array([120]) } }, 'env["A"]'],
      [{ outputs: [Buffer.from('*.txt')] }, 'outputs[0]'],
    ]) {
      await assert.rejects(sb.run('print(1)', opts), (e) => {
        assert.ok(e instanceof SandboxConfigError, `${where}: ${e}`);
        assert.ok(e.message.includes(`${where} must be text`), e.message);
        return true;
      });
    }
    await assert.rejects(sb.run(Buffer.from('print(1)')), SandboxConfigError);
  } finally {
    sb.dispose();
  }
});
