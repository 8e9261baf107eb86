'use strict';
// aistack conformance: moat's node client (clients/node) against the contract of
// blackms/aistack's sandbox layer (src/sandbox/*.ts, tests/unit/sandbox/*.test.ts,
// docs/SANDBOX.md). Each case names the upstream file (and test) it comes from. Run by
// tests/compat/run.sh: once as root, once as uid 65534 (MOAT_COMPAT_MODE says which);
// the cases that need a real run use the built binary ($MOAT_BIN).
//
// Deliberate differences (clients/node/README.md, "Coming from aistack"): the default
// provider is 'native' (sandboxed), not 'none'; a name that does not resolve is a
// SandboxUnavailableError (DNS can fail for a while), not a SandboxConfigError.
const test = require('node:test');
const assert = require('node:assert/strict');
const dns = require('node:dns/promises');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const client = require('../../clients/node');

const {
  createSandbox, DEFAULT_SANDBOX_CONFIG, SandboxError, SandboxUnavailableError,
  SandboxPolicyError, SandboxConfigError,
} = client;
const MOAT = process.env.MOAT_BIN || path.resolve(__dirname, '../../build/moat');
if (!fs.existsSync(MOAT)) throw new Error(`moat binary not found at ${MOAT}; build it or set MOAT_BIN`);
const MODE = process.env.MOAT_COMPAT_MODE || (process.getuid() === 0 ? 'root' : 'rootless');
// The root mode needs root; as another user it reports itself skipped.
const needsMode = MODE === 'root' && process.getuid() !== 0
  ? 'root mode needs root (run tests/compat/run.sh as root)' : false;
const withEnv = async (vars, fn) => {
  const saved = {};
  for (const k of Object.keys(vars)) {
    saved[k] = process.env[k];
    if (vars[k] === undefined) delete process.env[k]; else process.env[k] = vars[k];
  }
  try { return await fn(); } finally {
    for (const k of Object.keys(saved)) {
      if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
    }
  }
};
const daytona = (url, extra = {}) => createSandbox({
  provider: 'daytona', daytonaApiUrl: url, daytonaApiKey: 'tok-secret-42', moatPath: MOAT, ...extra,
});

// ---- exports ------------------------------------------------------------------------

// upstream src/sandbox/index.ts (DEFAULT_SANDBOX_CONFIG) and tests/unit/sandbox/
// security.test.ts "exposes safe defaults"
test(`[${MODE}] DEFAULT_SANDBOX_CONFIG: aistack's values and key names`, () => {
  assert.equal(DEFAULT_SANDBOX_CONFIG.timeout, 30000);
  assert.equal(DEFAULT_SANDBOX_CONFIG.memoryMb, 512);
  assert.equal(DEFAULT_SANDBOX_CONFIG.cpus, 1);
  assert.equal(DEFAULT_SANDBOX_CONFIG.pidsLimit, 100);
  assert.equal(DEFAULT_SANDBOX_CONFIG.network, false);
  // the one deliberate difference: moat's default provider runs sandboxed
  assert.equal(DEFAULT_SANDBOX_CONFIG.provider, 'native');
  assert.ok(Object.isFrozen(DEFAULT_SANDBOX_CONFIG));
});

// upstream src/sandbox/index.ts: `export * from './types.js'` beside createSandbox
test(`[${MODE}] what aistack's users import beside createSandbox is exported`, () => {
  for (const name of ['createSandbox', 'DEFAULT_SANDBOX_CONFIG', 'SandboxError',
    'SandboxUnavailableError', 'SandboxPolicyError', 'SandboxConfigError']) {
    assert.ok(client[name] !== undefined, `${name} is not exported`);
  }
  const dts = fs.readFileSync(path.join(__dirname, '../../clients/node/index.d.ts'), 'utf8');
  for (const name of ['SandboxProvider', 'SandboxLanguage', 'SandboxOptions', 'SandboxResult',
    'SandboxAdapter', 'ResolvedSandboxConfig', 'DEFAULT_SANDBOX_CONFIG']) {
    assert.match(dts, new RegExp(`export (type|interface|const|declare const) ${name}\\b`),
      `index.d.ts does not export ${name}`);
  }
});

// ---- errors -------------------------------------------------------------------------

// upstream src/sandbox/types.ts: the constructors (provider, reason) and the messages
test(`[${MODE}] error classes: aistack's constructor form, messages, name, instanceof, provider`, () => {
  const cases = [
    [SandboxPolicyError, 'Sandbox policy violation: bad env'],
    [SandboxUnavailableError, 'Sandbox provider "docker" unavailable: bad env'],
    [SandboxConfigError, 'Sandbox configuration error: bad env'],
  ];
  for (const [Cls, message] of cases) {
    const e = new Cls('docker', 'bad env');
    assert.equal(e.message, message);
    assert.equal(e.name, Cls.name);
    assert.equal(e.provider, 'docker');
    assert.ok(e instanceof Cls && e instanceof SandboxError && e instanceof Error);
    const cause = new Error('root cause');
    assert.equal(new Cls('e2b', 'x', cause).cause, cause);
  }
  const base = new SandboxError('daytona request failed', 'daytona', 'why');
  assert.equal(base.message, 'daytona request failed');
  assert.equal(base.provider, 'daytona');
  assert.equal(base.cause, 'why');
  assert.equal(base.name, 'SandboxError');
});

test(`[${MODE}] error classes: moat's (message, { provider }) form keeps working, same prefixes`, () => {
  const e = new SandboxPolicyError('bad env', { provider: 'native' });
  assert.equal(e.message, 'Sandbox policy violation: bad env');
  assert.equal(e.provider, 'native');
  assert.equal(e.name, 'SandboxPolicyError');
  assert.ok(e instanceof SandboxPolicyError && e instanceof SandboxError);
  const u = new SandboxUnavailableError('no key', { provider: 'e2b' });
  assert.equal(u.message, 'Sandbox provider "e2b" unavailable: no key');
  // a message that already has the prefix does not get it twice
  assert.equal(new SandboxConfigError('Sandbox configuration error: x', { provider: 'native' }).message,
    'Sandbox configuration error: x');
});

// upstream src/sandbox/index.ts NoopSandbox, tests/unit/sandbox/security.test.ts
// "NoopSandbox refuses to execute"
test(`[${MODE}] provider none refuses with SandboxPolicyError`, async () => {
  const s = createSandbox({ provider: 'none', moatPath: MOAT });
  assert.equal(s.provider, 'none');
  await assert.rejects(s.run('print(1)', { language: 'python' }), (e) => {
    assert.ok(e instanceof SandboxPolicyError, `${e.name}: ${e.message}`);
    assert.match(e.message, /^Sandbox policy violation: /);
    assert.equal(e.provider, 'none');
    return true;
  });
  await s.dispose();
});

// upstream src/sandbox/docker.ts, e2b.ts, daytona.ts: an unknown language is a
// SandboxPolicyError ("unsupported language") in all three adapters
test(`[${MODE}] an unsupported language is a SandboxPolicyError for every provider`, async () => {
  for (const provider of ['native', 'docker', 'e2b', 'daytona']) {
    const s = createSandbox({ provider, moatPath: MOAT });
    try {
      await assert.rejects(s.run('x', { language: 'cobol' }), (e) => {
        assert.ok(e instanceof SandboxPolicyError, `${provider}: ${e.name}: ${e.message}`);
        assert.match(e.message, /^Sandbox policy violation: unsupported language: cobol/);
        assert.equal(e.provider, provider);
        return true;
      });
    } finally { await s.dispose(); }
  }
});

// upstream tests/unit/sandbox/integration.test.ts, E2BSandbox "throws
// SandboxUnavailableError when no API key"
test(`[${MODE}] e2b without a key: SandboxUnavailableError`, async () => {
  await withEnv({ E2B_API_KEY: undefined }, async () => {
    const s = createSandbox({ provider: 'e2b', moatPath: MOAT });
    try {
      await assert.rejects(s.run('print(1)', { language: 'python' }), (e) => {
        assert.ok(e instanceof SandboxUnavailableError, `${e.name}: ${e.message}`);
        assert.match(e.message, /^Sandbox provider "e2b" unavailable: /);
        assert.equal(e.provider, 'e2b');
        return true;
      });
    } finally { await s.dispose(); }
  });
});

// upstream tests/unit/sandbox/integration.test.ts, DaytonaSandbox "throws
// SandboxUnavailableError when API key missing"
test(`[${MODE}] daytona without a key: SandboxUnavailableError`, async () => {
  await withEnv({ DAYTONA_API_KEY: undefined }, async () => {
    const s = createSandbox({ provider: 'daytona', daytonaApiUrl: 'https://daytona.example.com',
      moatPath: MOAT });
    try {
      await assert.rejects(s.run('print(1)', { language: 'python' }), SandboxUnavailableError);
    } finally { await s.dispose(); }
  });
});

// ---- Daytona URL rules --------------------------------------------------------------

// upstream tests/unit/sandbox/integration.test.ts, "daytonaApiUrl SSRF allowlist":
// "rejects http:// scheme", "rejects file:// scheme", "rejects gopher:// and ftp://
// schemes", "rejects literal private IPs (RFC1918, loopback, link-local)", "rejects
// localhost-family hostnames" — all at construction
test(`[${MODE}] daytonaApiUrl: refused at createSandbox with SandboxConfigError`, () => {
  const bad = [
    'http://daytona.example.com', 'file:///etc/passwd', 'gopher://attacker.example.com/_GET',
    'ftp://example.com/',
    'https://127.0.0.1/', 'https://10.0.0.5/', 'https://172.16.0.1/', 'https://172.31.255.254/',
    'https://192.168.1.1/', 'https://169.254.169.254/', 'https://[::1]/', 'https://[fc00::1]/',
    'https://[fe80::1]/',
    'https://localhost/', 'https://app.localhost/',
  ];
  for (const url of bad) {
    assert.throws(() => daytona(url), (e) => {
      assert.ok(e instanceof SandboxConfigError, `${url}: ${e.name}: ${e.message}`);
      assert.match(e.message, /^Sandbox configuration error: daytonaApiUrl /);
      assert.equal(e.provider, 'daytona');
      assert.ok(!e.message.includes('tok-secret-42'));
      return true;
    }, `${url} was accepted`);
  }
});

// upstream tests/unit/sandbox/integration.test.ts, "accepts a public https URL"
test(`[${MODE}] daytonaApiUrl: a public https URL is accepted at createSandbox`, async () => {
  const s = daytona('https://daytona.example.com/api');
  assert.equal(s.provider, 'daytona');
  await s.dispose();
});

// upstream tests/unit/sandbox/integration.test.ts, "rejects hostnames that resolve to
// private IPs at first run": construction passes, the run is a SandboxConfigError and
// nothing reaches the API. The name is this machine's own when it resolves to loopback
// (/etc/hosts), else "localhost." (which the construction rule, an exact match, lets by).
test(`[${MODE}] daytonaApiUrl: a name resolving to a private address fails the first run`, async () => {
  let host = 'localhost.';
  try {
    const a = await dns.lookup(os.hostname());
    if (a.address.startsWith('127.') && !/localhost$/i.test(os.hostname())) host = os.hostname();
  } catch { /* keep localhost. */ }
  const s = daytona(`https://${host}/api`);
  try {
    await assert.rejects(s.run('print(1)', { language: 'python', timeout: 5000 }), (e) => {
      assert.ok(e instanceof SandboxConfigError, `${host}: ${e.name}: ${e.message}`);
      assert.equal(e.provider, 'daytona');
      assert.ok(!e.message.includes('tok-secret-42'));
      return true;
    });
  } finally { await s.dispose(); }
});

// ---- default limits -----------------------------------------------------------------

// upstream src/sandbox/index.ts (createSandbox merges DEFAULT_SANDBOX_CONFIG) and
// docs/SANDBOX.md "Resource exhaustion (CPU / RAM / fork)": a config that leaves the
// limits out still gets memoryMb 512 and pidsLimit 100; the result's limits say how.
test(`[${MODE}] {provider: 'native'} alone: a 700 MB allocation fails`, { skip: needsMode }, async () => {
  const s = createSandbox({ provider: 'native', moatPath: MOAT });
  try {
    const r = await s.run('try:\n    x = bytearray(700 * 1024 * 1024)\n    print("allocated")\n' +
      'except MemoryError:\n    print("MemoryError")\n', { language: 'python', timeout: 20000 });
    assert.ok(!r.stdout.includes('allocated'), JSON.stringify(r));
    assert.ok(r.oomKilled || r.stdout.includes('MemoryError'), JSON.stringify(r));
    assert.notEqual(r.limits.memory, 'none', JSON.stringify(r));
    assert.notEqual(r.limits.pids, 'none', JSON.stringify(r));
  } finally { await s.dispose(); }
});

test(`[${MODE}] {provider: 'native'} alone: 150 processes do not start`, { skip: needsMode }, async () => {
  const s = createSandbox({ provider: 'native', moatPath: MOAT });
  const code = 'import os, time\nkids = errs = 0\nfor i in range(150):\n    try:\n' +
    '        pid = os.fork()\n    except OSError:\n        errs += 1\n        continue\n' +
    '    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    kids += 1\n' +
    'print(kids, errs)\n';
  try {
    const r = await s.run(code, { language: 'python', timeout: 20000 });
    const [kids, errs] = r.stdout.trim().split(' ').map(Number);
    assert.ok(kids < 100 && errs > 0, JSON.stringify(r));
  } finally { await s.dispose(); }
});

// upstream src/sandbox/index.ts: what the config says wins over the default, key by key
test(`[${MODE}] a limit the config sets wins over the default`, { skip: needsMode }, async () => {
  const s = createSandbox({ provider: 'native', moatPath: MOAT, memoryMb: 900 });
  try {
    const r = await s.run('x = bytearray(700 * 1024 * 1024)\nprint("allocated")\n',
      { language: 'python', timeout: 20000 });
    assert.equal(r.stdout, 'allocated\n', JSON.stringify(r));
  } finally { await s.dispose(); }
});
