'use strict';
// The unmodified `e2b` SDK from npm (pinned by package-lock.json), pointed at a real
// `moat serve` with nothing but E2B's own environment variables (E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY), doing what a user does (docs/E2B.md). Run by
// tests/e2b/run.sh: once as root, once as uid 65534 (MOAT_E2B_MODE says which).
// Without the SDK (npm ci in tests/e2b failed: no npm, no registry) every case reports
// itself skipped.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '../..');
const MOAT = process.env.MOAT_BIN || path.join(ROOT, 'build/moat');
const MODE = process.env.MOAT_E2B_MODE || (process.getuid() === 0 ? 'root' : 'rootless');
let e2b = null;
let skip = false;
try {
  e2b = require(path.join(__dirname, 'node_modules/e2b'));
} catch (e) {
  skip = `the e2b SDK is not installed (npm ci in tests/e2b): ${e.code || e.message}`;
}
if (!skip && MODE === 'root' && process.getuid() !== 0) skip = 'root mode needs root';
if (!skip && !fs.existsSync(MOAT)) throw new Error(`moat binary not found at ${MOAT}`);
const T = (name, fn) => test(`[${MODE}] ${name}`, { skip, timeout: 180000 }, fn);

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-e2b-test-'));
const KEY = `e2b_${crypto.randomBytes(20).toString('hex')}`;
// two more keys of the operator's (serve.e2b.keys): each its own credential
const KEY_A = `e2b_${crypto.randomBytes(16).toString('hex')}`;
const KEY_B = `e2b_${crypto.randomBytes(16).toString('hex')}`;
let srv = null;
let port = 0;

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// method path [body] [headers] on the server: {status, headers, body (Buffer)}.
function request(method, p, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers,
        body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// A prepared root of the test's own (a template, serve.e2b.templates): the
// directories a root needs, bash with the libraries ldd names, and a marker file
// the default root does not have.
function markedRoot() {
  const r = path.join(tmp, 'marked-root');
  fs.chmodSync(tmp, 0o711); // the sandbox's setup reaches the root through it
  for (const d of ['proc', 'dev', 'tmp', 'sandbox', 'opt/moat/runtime', 'etc', 'bin']) {
    fs.mkdirSync(path.join(r, d), { recursive: true });
  }
  fs.copyFileSync('/bin/bash', path.join(r, 'bin/bash'));
  fs.chmodSync(path.join(r, 'bin/bash'), 0o755);
  const ldd = require('node:child_process').execFileSync('ldd', ['/bin/bash']).toString();
  for (const m of ldd.matchAll(/(\/\S+) \(0x/g)) {
    fs.mkdirSync(path.join(r, path.dirname(m[1])), { recursive: true });
    fs.copyFileSync(m[1], path.join(r, m[1]));
  }
  fs.writeFileSync(path.join(r, 'marker'), 'marked root\n');
  return r;
}

test.before(async () => {
  if (skip) return;
  const tokenFile = path.join(tmp, 'token');
  fs.writeFileSync(tokenFile, `${KEY}\n`, { mode: 0o600 });
  const config = path.join(tmp, 'config.json');
  // open egress allowed (allowInternetAccess: true), with one sandbox of that shape kept
  // made ahead in both modes (the pool's network shape, docs/SANDBOXES.md "The pool")
  fs.writeFileSync(config, JSON.stringify({ serve: { allowOpenNetwork: true,
    sandboxes: { networkPool: 1 },
    e2b: { keys: [KEY_A, KEY_B], templates: { marked: markedRoot() } } } }));
  port = await freePort();
  const child = spawn(MOAT, ['serve', '--listen', `127.0.0.1:${port}`, '--token-file', tokenFile, '--no-kv',
    '--config', config,
    '--runtime', path.join(ROOT, 'runtime')], { stdio: ['ignore', 'ignore', 'pipe'] });
  srv = { child, log: '', exit: null };
  child.stderr.on('data', (d) => { srv.log += d; });
  srv.exited = new Promise((r) => child.on('exit', (code, sig) => { srv.exit = { code, sig }; r(); }));
  const t0 = Date.now();
  for (;;) {
    if (srv.exit) throw new Error(`moat serve exited: ${srv.log.slice(-2000)}`);
    try {
      if ((await request('GET', '/healthz')).status === 200) break;
    } catch { /* not yet */ }
    if (Date.now() - t0 > 20000) throw new Error(`moat serve did not start: ${srv.log.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  // the SDK's own configuration: nothing but its environment variables
  process.env.E2B_API_URL = `http://127.0.0.1:${port}/e2b`;
  process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${port}/e2b/envd`;
  process.env.E2B_API_KEY = KEY;
});

test.after(async () => {
  if (srv && !srv.exit) {
    srv.child.kill('SIGTERM');
    const t = setTimeout(() => srv.child.kill('SIGKILL'), 20000);
    await srv.exited;
    clearTimeout(t);
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function withSandbox(opts, fn) {
  const sbx = await e2b.Sandbox.create(opts);
  try {
    return await fn(sbx);
  } finally {
    await sbx.kill().catch(() => {});
  }
}

T('create, commands.run(echo hi), kill; the killed sandbox is E2B\'s NotFound', async () => {
  const sbx = await e2b.Sandbox.create();
  assert.match(sbx.sandboxId, /^sbx_[a-z0-9-]+_[0-9a-f]{32}$/);
  const r = await sbx.commands.run('echo hi');
  assert.equal(r.stdout, 'hi\n');
  assert.equal(r.exitCode, 0);
  const who = await sbx.commands.run('id -u');
  assert.equal(who.stdout, '65534\n'); // moat's identity, whoever asks
  assert.equal(await sbx.kill(), true);
  assert.equal(await e2b.Sandbox.kill(sbx.sandboxId), false);
  await assert.rejects(e2b.Sandbox.getInfo(sbx.sandboxId), e2b.NotFoundError);
  await assert.rejects(sbx.commands.run('true'));
});

T('a failing command raises CommandExitError with its exit code and stderr', async () => {
  await withSandbox({}, async (sbx) => {
    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (e) => {
      assert.ok(e instanceof e2b.CommandExitError, String(e));
      assert.equal(e.exitCode, 3);
      assert.equal(e.stderr, 'oops\n');
      return true;
    });
  });
});

T('env vars: the sandbox\'s (create) and a command\'s own', async () => {
  await withSandbox({ envs: { FOO: 'from-create' } }, async (sbx) => {
    assert.equal((await sbx.commands.run('echo $FOO')).stdout, 'from-create\n');
    const r = await sbx.commands.run('echo $BAR', { envs: { BAR: 'per-command' } });
    assert.equal(r.stdout, 'per-command\n');
  });
});

T('a background command: stdin, list, kill', async () => {
  await withSandbox({}, async (sbx) => {
    const out = [];
    const h = await sbx.commands.run('cat', { background: true, stdin: true,
      onStdout: (d) => out.push(d) });
    await sbx.commands.sendStdin(h.pid, 'hello stdin\n');
    const procs = await sbx.commands.list();
    assert.ok(procs.some((p) => p.pid === h.pid && p.cmd === '/bin/bash'), JSON.stringify(procs));
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.stdout, 'hello stdin\n');
    assert.deepEqual(out, ['hello stdin\n']);
    const sleeper = await sbx.commands.run('sleep 600', { background: true });
    assert.equal(await sbx.commands.kill(sleeper.pid), true);
    await assert.rejects(sleeper.wait(), e2b.CommandExitError);
    assert.equal(await sbx.commands.kill(sleeper.pid), false);
  });
});

T('a command past its timeoutMs raises TimeoutError', async () => {
  await withSandbox({}, async (sbx) => {
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), e2b.TimeoutError);
  });
});

T('files: write, read, list, exists, rename, remove, makeDir; relative and /home/user paths', async () => {
  await withSandbox({}, async (sbx) => {
    const info = await sbx.files.write('notes/a.txt', 'alpha');
    assert.equal(info.path, '/sandbox/notes/a.txt');
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'alpha');
    assert.equal(await sbx.files.read('/sandbox/notes/a.txt'), 'alpha');
    assert.equal(await sbx.files.exists('notes/a.txt'), true);
    assert.equal(await sbx.files.exists('notes/none.txt'), false);
    assert.equal(await sbx.files.makeDir('notes/sub'), true);
    assert.equal(await sbx.files.makeDir('notes/sub'), false); // E2B: it existed
    const entries = await sbx.files.list('notes');
    assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(),
      [['a.txt', 'file'], ['sub', 'dir']]);
    const moved = await sbx.files.rename('notes/a.txt', 'notes/b.txt');
    assert.equal(moved.path, '/sandbox/notes/b.txt');
    assert.equal(await sbx.files.exists('notes/a.txt'), false);
    const st = await sbx.files.getInfo('notes/b.txt');
    assert.equal(st.size, 5);
    assert.equal(st.type, 'file');
    await sbx.files.remove('notes');
    assert.equal(await sbx.files.exists('notes'), false);
    await assert.rejects(sbx.files.read('notes/b.txt'), e2b.FileNotFoundError ?? e2b.NotFoundError);
    // several files in one multipart upload
    const many = await sbx.files.write([{ path: 'm/1.txt', data: 'one' }, { path: 'm/2.txt', data: 'two' }]);
    assert.deepEqual(many.map((f) => f.path), ['/sandbox/m/1.txt', '/sandbox/m/2.txt']);
    assert.equal((await sbx.commands.run('cat m/1.txt m/2.txt')).stdout, 'onetwo');
  });
});

T('a path outside /sandbox and /tmp is refused (InvalidArgument), never resolved', async () => {
  await withSandbox({}, async (sbx) => {
    await assert.rejects(sbx.files.read('/etc/passwd'), e2b.InvalidArgumentError);
    await assert.rejects(sbx.files.write('/etc/evil', 'x'), e2b.InvalidArgumentError);
    await assert.rejects(sbx.files.list('/'), e2b.InvalidArgumentError);
    await assert.rejects(sbx.files.read('../../etc/passwd'), e2b.InvalidArgumentError);
  });
});

T('a 20 MiB binary up (multipart) and down keeps its hash', async () => {
  await withSandbox({}, async (sbx) => {
    const data = crypto.randomBytes(20 << 20);
    const want = crypto.createHash('sha256').update(data).digest('hex');
    await sbx.files.write('big.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.length));
    const inside = await sbx.commands.run('sha256sum big.bin');
    assert.equal(inside.stdout.split(' ')[0], want);
    const back = await sbx.files.read('big.bin', { format: 'bytes' });
    assert.equal(back.length, data.length);
    assert.equal(crypto.createHash('sha256').update(back).digest('hex'), want);
  });
});

T('gzip uploads: files.write({gzip: true}) is inflated into the file; gzip members in a row; not gzip is a 400', async () => {
  await withSandbox({}, async (sbx) => {
    const data = crypto.randomBytes(3 << 20);
    const want = crypto.createHash('sha256').update(data).digest('hex');
    await sbx.files.write('up.gz.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.length),
      { gzip: true });
    assert.equal((await sbx.commands.run('sha256sum up.gz.bin')).stdout.split(' ')[0], want);
    // Accept-Encoding: gzip (the SDK's read option) is answered uncompressed
    const back = await sbx.files.read('up.gz.bin', { format: 'bytes', gzip: true });
    assert.equal(crypto.createHash('sha256').update(back).digest('hex'), want);
    const zlib = require('node:zlib');
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983',
      'X-Access-Token': sbx.envdAccessToken, 'Content-Type': 'application/octet-stream',
      'Content-Encoding': 'gzip' };
    const two = Buffer.concat([zlib.gzipSync('one,'), zlib.gzipSync('two')]);
    const r = await request('POST', '/e2b/envd/files?path=two.txt', two, h);
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(await sbx.files.read('two.txt'), 'one,two');
    const bad = await request('POST', '/e2b/envd/files?path=bad.txt', Buffer.from('not gzip at all'), h);
    assert.equal(bad.status, 400);
    assert.match(JSON.parse(bad.body).message, /not gzip/);
    const cut = zlib.gzipSync(Buffer.alloc(1 << 16, 7));
    const short = await request('POST', '/e2b/envd/files?path=cut.txt', cut.subarray(0, cut.length - 9), h);
    assert.equal(short.status, 400);
    assert.match(JSON.parse(short.body).message, /ends early/);
  });
});

T('file metadata (X-Metadata-*): written with the file, in getInfo, list and rename; each write replaces it; keys lowercased; user.e2b.* set inside shown, other xattrs not', async () => {
  await withSandbox({}, async (sbx) => {
    const want = { owner: 'Ann', 'build-id': 'x y "42"' };
    const w = await sbx.files.write('meta/a.txt', 'alpha', { metadata: { Owner: 'Ann', 'build-id': 'x y "42"' } });
    assert.deepEqual(w.metadata, want); // the write's answer; the key lowercased
    assert.deepEqual((await sbx.files.getInfo('meta/a.txt')).metadata, want);
    const ls = await sbx.files.list('meta');
    assert.deepEqual(ls.find((e) => e.name === 'a.txt').metadata, want);
    const moved = await sbx.files.rename('meta/a.txt', 'meta/b.txt');
    assert.deepEqual(moved.metadata, want); // a rename keeps it
    // the octet-stream upload takes it too, and replaces: keys not in this write go
    const o = await sbx.files.write('meta/b.txt', 'beta', { metadata: { only: '1' }, useOctetStream: true });
    assert.deepEqual(o.metadata, { only: '1' });
    assert.deepEqual((await sbx.files.getInfo('meta/b.txt')).metadata, { only: '1' });
    assert.equal(await sbx.files.read('meta/b.txt'), 'beta');
    // a write without metadata clears it
    const plain = await sbx.files.write('meta/b.txt', 'gamma');
    assert.equal(plain.metadata, undefined);
    assert.equal((await sbx.files.getInfo('meta/b.txt')).metadata, undefined);
    assert.equal((await sbx.commands.run('python3 -c "import os; print(os.listxattr(\'meta/b.txt\'))"')).stdout, '[]\n');
    // several files in one multipart upload: each gets it
    const many = await sbx.files.write([{ path: 'meta/m1', data: '1' }, { path: 'meta/m2', data: '2' }],
      { metadata: { batch: 'q7' } });
    assert.deepEqual(many.map((f) => f.metadata), [{ batch: 'q7' }, { batch: 'q7' }]);
    for (const f of ['meta/m1', 'meta/m2'])
      assert.deepEqual((await sbx.files.getInfo(f)).metadata, { batch: 'q7' });
    // set by a program inside: user.e2b.* shown (directories too), user.other not
    await sbx.commands.run('mkdir -p meta/d && touch meta/p && python3 -c "import os; ' +
      'os.setxattr(\'meta/p\', \'user.e2b.x\', b\'y\'); os.setxattr(\'meta/p\', \'user.other\', b\'z\'); ' +
      'os.setxattr(\'meta/d\', \'user.e2b.kind\', b\'dir\')"');
    assert.deepEqual((await sbx.files.getInfo('meta/p')).metadata, { x: 'y' });
    const all = await sbx.files.list('meta');
    assert.deepEqual(all.find((e) => e.name === 'p').metadata, { x: 'y' });
    assert.deepEqual(all.find((e) => e.name === 'd').metadata, { kind: 'dir' });
    assert.equal(all.find((e) => e.name === 'b.txt').metadata, undefined);
  });
});

T('file metadata refused whole (400, the file not made or left as it was): a value outside 0x20-0x7E, an empty key, more than 4096 bytes; a key given twice: its first value', async () => {
  await withSandbox({}, async (sbx) => {
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983',
      'X-Access-Token': sbx.envdAccessToken, 'Content-Type': 'application/octet-stream' };
    // extra: an object, or raw [name, value, ...] (a header given twice)
    const post = (p, body, extra) => request('POST', `/e2b/envd/files?path=${p}`, body,
      Array.isArray(extra) ? [...Object.entries(h).flat(), ...extra] : { ...h, ...extra });
    // the SDK checks values first: a raw request, as another client could send it
    let r = await post('meta/new.txt', 'x', { 'X-Metadata-k': 'caf\u00e9' });
    assert.equal(r.status, 400, r.body.toString());
    assert.match(JSON.parse(r.body).message, /printable US-ASCII/);
    assert.equal(await sbx.files.exists('meta/new.txt'), false);
    await sbx.files.write('meta/old.txt', 'kept', { metadata: { was: 'here' } });
    r = await post('meta/old.txt', 'x', { 'X-Metadata-k': 'tab\there' });
    assert.equal(r.status, 400, r.body.toString());
    r = await post('meta/old.txt', 'x', { 'X-Metadata-': 'v' });
    assert.equal(r.status, 400, r.body.toString());
    assert.match(JSON.parse(r.body).message, /key is empty/);
    // 4096 bytes in all: "user.e2b." (9) + key + value per pair
    const fits = { 'X-Metadata-a': 'v'.repeat(4096 - 9 - 1) };
    r = await post('meta/fits.txt', 'x', fits);
    assert.equal(r.status, 200, r.body.toString());
    assert.equal((await sbx.files.getInfo('meta/fits.txt')).metadata.a.length, 4086);
    r = await post('meta/old.txt', 'x', { 'X-Metadata-a': 'v'.repeat(4096 - 9), 'X-Metadata-b': '' });
    assert.equal(r.status, 400, r.body.toString());
    assert.match(JSON.parse(r.body).message, /4096 bytes/);
    r = await post('meta/old.txt', 'x', { ['X-Metadata-' + 'k'.repeat(247)]: 'v' });
    assert.equal(r.status, 400, r.body.toString());
    assert.equal(await sbx.files.read('meta/old.txt'), 'kept');
    assert.deepEqual((await sbx.files.getInfo('meta/old.txt')).metadata, { was: 'here' });
    // a key twice (any case): the first value wins
    r = await post('meta/twice.txt', 'x', ['X-Metadata-Dup', 'first', 'x-metadata-dup', 'second']);
    assert.equal(r.status, 200, r.body.toString());
    assert.deepEqual(JSON.parse(r.body)[0].metadata, { dup: 'first' });
    assert.deepEqual((await sbx.files.getInfo('meta/twice.txt')).metadata, { dup: 'first' });
  });
});

T('file metadata where the filesystem keeps no user xattrs (fsetxattr EOPNOTSUPP, as tmpfs before Linux 6.6): a 400 saying so, no file made, an existing one untouched; a write without metadata works', async () => {
  // a second moat serve whose seccomp policy answers fsetxattr EOPNOTSUPP: the agent
  // (under the sandbox's filter) sees what an old kernel's tmpfs gives
  const pol = JSON.parse(fs.readFileSync(path.join(ROOT, 'policies/default.json'), 'utf8'));
  for (const e of pol.syscalls) e.names = e.names.filter((n) => n !== 'fsetxattr');
  pol.syscalls.push({ names: ['fsetxattr'], action: 'SCMP_ACT_ERRNO', errnoRet: 95 });
  const polFile = path.join(tmp, 'no-xattr-policy.json');
  fs.writeFileSync(polFile, JSON.stringify(pol));
  const config = path.join(tmp, 'no-xattr-config.json');
  fs.writeFileSync(config, JSON.stringify({ policy: polFile }));
  const tokenFile = path.join(tmp, 'token');
  const p2 = await freePort();
  const child = spawn(MOAT, ['serve', '--listen', `127.0.0.1:${p2}`, '--token-file', tokenFile, '--no-kv',
    '--config', config, '--runtime', path.join(ROOT, 'runtime')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((r) => child.on('exit', r));
  try {
    const t0 = Date.now();
    for (;;) {
      const ok = await new Promise((resolve) => {
        http.get({ host: '127.0.0.1', port: p2, path: '/healthz' }, (res) => { res.resume(); resolve(res.statusCode === 200); })
          .on('error', () => resolve(false));
      });
      if (ok) break;
      if (Date.now() - t0 > 20000) throw new Error(`the second moat serve did not start: ${log.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const conn = { apiUrl: `http://127.0.0.1:${p2}/e2b`, sandboxUrl: `http://127.0.0.1:${p2}/e2b/envd` };
    const sbx = await e2b.Sandbox.create(conn);
    try {
      await assert.rejects(sbx.files.write('new.txt', 'x', { metadata: { k: 'v' } }), (e) => {
        assert.ok(e instanceof e2b.InvalidArgumentError, `${e.constructor.name}: ${e.message}`);
        assert.match(e.message, /user extended attributes.*Linux 6\.6/);
        return true;
      });
      assert.equal(await sbx.files.exists('new.txt'), false); // the file it made, removed
      await sbx.files.write('old.txt', 'kept'); // no metadata: nothing to clear, a success
      await assert.rejects(sbx.files.write('old.txt', 'other', { metadata: { k: 'v' }, useOctetStream: true }),
        e2b.InvalidArgumentError);
      await assert.rejects(sbx.files.write([{ path: 'm1', data: '1' }], { metadata: { k: 'v' } }),
        e2b.InvalidArgumentError); // multipart: the same
      assert.equal(await sbx.files.read('old.txt'), 'kept'); // not truncated
      assert.equal(await sbx.files.exists('m1'), false);
    } finally {
      await sbx.kill().catch(() => {});
    }
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
});

T('a gzip bomb (1.5 GiB inflated from 1.5 MB) stops at the upload\'s bound with an error, the service\'s memory unchanged', async () => {
  await withSandbox({}, async (sbx) => {
    const zlib = require('node:zlib');
    const member = zlib.gzipSync(Buffer.alloc(64 << 20), { level: 9 });
    const bomb = Buffer.concat(Array(24).fill(member)); // 24 x 64 MiB of zeros
    const hwm = () => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${srv.child.pid}/status`, 'utf8'))[1]);
    const before = hwm();
    const r = await request('POST', '/e2b/envd/files?path=bomb.bin', bomb, {
      'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken,
      'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' });
    // the sandbox's disk (its 64 MiB tmpfs) or the 1 GiB file bound, whichever first
    assert.ok(r.status === 507 || r.status === 413, `${r.status} ${r.body}`);
    assert.match(JSON.parse(r.body).message, /space|larger than 1 GiB/);
    const grew = hwm() - before; // kB
    assert.ok(grew < 48 * 1024, `moat serve's peak RSS grew ${grew} kB`);
    const size = Number((await sbx.commands.run('stat -c %s bomb.bin')).stdout);
    assert.ok(size <= 1 << 30, `${size}`);
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
  });
});

T('Sandbox.list: metadata filter, paging; getInfo; setTimeout', async () => {
  const tag = crypto.randomBytes(4).toString('hex');
  const a = await e2b.Sandbox.create({ metadata: { run: tag, who: 'a' } });
  const b = await e2b.Sandbox.create({ metadata: { run: tag, who: 'b' } });
  try {
    const only = await e2b.Sandbox.list({ query: { metadata: { run: tag, who: 'b' } } }).nextItems();
    assert.deepEqual(only.map((s) => s.sandboxId), [b.sandboxId]);
    assert.deepEqual(only[0].metadata, { run: tag, who: 'b' });
    // nothing is paused: a state filter without "running" is empty
    assert.deepEqual(await e2b.Sandbox.list({ query: { metadata: { run: tag }, state: ['paused'] } }).nextItems(), []);
    assert.equal((await e2b.Sandbox.list({ query: { metadata: { run: tag }, state: ['running'] } }).nextItems()).length, 2);
    const pager = e2b.Sandbox.list({ query: { metadata: { run: tag } }, limit: 1 });
    const seen = [];
    while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId));
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort());
    // a value with a '%' that is no escape: taken as it is, never read past its end
    const c = await e2b.Sandbox.create({ metadata: { run: tag, odd: 'v%a' } });
    try {
      const raw = await request('GET', `/e2b/v2/sandboxes?metadata=${encodeURIComponent(`run=${tag}&odd=v%a`)}`,
        undefined, { 'X-API-KEY': KEY });
      assert.equal(raw.status, 200, raw.body.toString());
      assert.deepEqual(JSON.parse(raw.body).map((s) => s.sandboxID), [c.sandboxId]);
    } finally {
      await c.kill();
    }
    const info = await a.getInfo();
    assert.equal(info.state, 'running');
    assert.equal(info.templateId, 'base');
    await a.setTimeout(10000);
    const after = await a.getInfo();
    assert.ok(after.endAt.getTime() - Date.now() <= 11000, String(after.endAt));
  } finally {
    await a.kill();
    await b.kill();
  }
});

T('Sandbox.connect gives back a working sandbox (its access token)', async () => {
  await withSandbox({}, async (sbx) => {
    await sbx.files.write('x.txt', 'kept');
    const again = await e2b.Sandbox.connect(sbx.sandboxId);
    assert.equal(await again.files.read('x.txt'), 'kept');
  });
});

T('templates: Sandbox.create(\'marked\') runs on the operator\'s root for it; Sandbox.create() does not', async () => {
  await withSandbox('marked', async (sbx) => {
    const r = await sbx.commands.run('read -r m < /marker; echo "$m"');
    assert.equal(r.stdout, 'marked root\n');
    assert.equal((await sbx.commands.run('echo $UID')).stdout, '65534\n'); // the same identity
    assert.equal((await e2b.Sandbox.getInfo(sbx.sandboxId)).templateId, 'marked');
    const listed = await e2b.Sandbox.list().nextItems();
    assert.equal(listed.find((x) => x.sandboxId === sbx.sandboxId).templateId, 'marked');
    // one sandbox's root is not another's, made while this one lives
    await withSandbox({}, async (plain) => {
      const p = await plain.commands.run('test -e /marker && echo yes || echo no');
      assert.equal(p.stdout, 'no\n');
      assert.equal((await e2b.Sandbox.getInfo(plain.sandboxId)).templateId, 'base');
    });
  });
});

T('errors: a wrong API key is AuthenticationError; an unknown template 404', async () => {
  await assert.rejects(e2b.Sandbox.create({ apiKey: `e2b_${'0'.repeat(40)}` }), e2b.AuthenticationError);
  await assert.rejects(e2b.Sandbox.list({ apiKey: 'e2b_wrong' }).nextItems(), e2b.AuthenticationError);
  // E2B's 404, which the SDK raises as a SandboxError with that status (as against E2B's cloud)
  await assert.rejects(e2b.Sandbox.create('no-such-template'), (e) => e instanceof e2b.SandboxError &&
    e.statusCode === 404 && /template 'no-such-template' not found/.test(e.message));
});

T('pause and connect: paused (listed as such, a second pause false), connect resumes it with its files and processes', async () => {
  const tag = crypto.randomBytes(4).toString('hex');
  await withSandbox({ metadata: { run: tag } }, async (sbx) => {
    await sbx.files.write('kept.txt', 'before the pause');
    const bg = await sbx.commands.run('sleep 300', { background: true });
    // its handle's stream is a request in flight: refused, saying so, never a silent false
    await assert.rejects(sbx.pause(), (e) => /in flight/.test(String(e.message)));
    await bg.disconnect();
    assert.equal(await sbx.pause(), true);
    assert.equal((await e2b.Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
    assert.equal(await sbx.pause(), false); // already paused: E2B's 409
    const paused = await e2b.Sandbox.list({ query: { metadata: { run: tag }, state: ['paused'] } }).nextItems();
    assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId]);
    assert.deepEqual(await e2b.Sandbox.list({ query: { metadata: { run: tag }, state: ['running'] } }).nextItems(), []);
    const again = await e2b.Sandbox.connect(sbx.sandboxId);
    assert.equal((await e2b.Sandbox.getInfo(sbx.sandboxId)).state, 'running');
    assert.equal(await again.files.read('kept.txt'), 'before the pause');
    const procs = await again.commands.list();
    assert.ok(procs.some((p) => p.pid === bg.pid), `the background process lives on: ${JSON.stringify(procs)}`);
  });
});

T('envd needs the sandbox\'s own access token: none, a wrong one, another sandbox\'s: 401 alike', async () => {
  const a = await e2b.Sandbox.create();
  const b = await e2b.Sandbox.create();
  try {
    const url = '/e2b/envd/files?path=%2Fsandbox';
    const h = (id, tok) => ({ 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983',
      ...(tok === undefined ? {} : { 'X-Access-Token': tok }) });
    const right = await request('GET', '/e2b/envd/health', undefined, h(a.sandboxId, a.envdAccessToken));
    assert.equal(right.status, 204);
    for (const hd of [h(a.sandboxId), h(a.sandboxId, 'f'.repeat(32)), h(a.sandboxId, b.envdAccessToken),
      h('sbx_' + '0'.repeat(32), a.envdAccessToken)]) {
      const r = await request('GET', url, undefined, hd);
      assert.equal(r.status, 401, JSON.stringify(hd));
      assert.equal(JSON.parse(r.body).code, 401);
    }
    // a Connect call is refused alike, in Connect's own shape
    const rpc = await request('POST', '/e2b/envd/filesystem.Filesystem/Stat', '{"path":"/sandbox"}',
      { ...h(a.sandboxId, b.envdAccessToken), 'Content-Type': 'application/json' });
    assert.equal(rpc.status, 401);
    assert.equal(JSON.parse(rpc.body).code, 'unauthenticated');
  } finally {
    await a.kill();
    await b.kill();
  }
});

T('Connect framing and multipart are strict: bad envelopes and parts are refused', async () => {
  await withSandbox({}, async (sbx) => {
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken };
    const msg = Buffer.from('{"process":{"cmd":"/bin/true"}}');
    const env = (flags, len, body) => {
      const b = Buffer.alloc(5);
      b[0] = flags;
      b.writeUInt32BE(len, 1);
      return Buffer.concat([b, body]);
    };
    const start = (body) => request('POST', '/e2b/envd/process.Process/Start', body,
      { ...h, 'Content-Type': 'application/connect+json' });
    // the well-formed one runs: its start, its end, the end of the stream
    const ok = await start(env(0, msg.length, msg));
    assert.equal(ok.status, 200);
    assert.match(ok.body.toString(), /"start":\{"pid":\d+\}.*"end":\{"exitCode":0/s);
    assert.equal(ok.body[ok.body.length - 2 - 5], 2); // the last frame: end-of-stream, {}
    for (const bad of [env(1, msg.length, msg), env(0, msg.length + 1, msg), env(0, 2, msg),
      Buffer.from('{}'), env(0, 4, Buffer.from('[1,2'))]) {
      const r = await start(bad);
      assert.equal(r.status, 200);
      assert.match(r.body.toString(), /"code":"invalid_argument"/);
      assert.doesNotMatch(r.body.toString(), /"start"/);
    }
    // a process's tag is bounded (kept with the process for List and selectors)
    const tagged = Buffer.from(JSON.stringify({ process: { cmd: '/bin/true' }, tag: 't'.repeat(257) }));
    const longTag = await start(env(0, tagged.length, tagged));
    assert.match(longTag.body.toString(), /"code":"invalid_argument".*tag/);
    // a multipart part's headers past 8 KiB, and a body cut short
    const bnd = 'xBOUNDARYx';
    const long = `--${bnd}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nX: ${'y'.repeat(9000)}\r\n\r\ndata\r\n--${bnd}--\r\n`;
    const cut = `--${bnd}\r\nContent-Disposition: form-data; name="file"; filename="c.txt"\r\n\r\npartial`;
    for (const body of [long, cut]) {
      const r = await request('POST', '/e2b/envd/files?path=x.txt', body,
        { ...h, 'Content-Type': `multipart/form-data; boundary=${bnd}` });
      assert.equal(r.status, 400, body.slice(0, 80));
    }
    const gz = await request('POST', '/e2b/envd/files?path=x.txt', 'x',
      { ...h, 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' });
    assert.equal(gz.status, 400);
    assert.equal(await sbx.files.exists('a.txt'), false);
  });
});

T('no allow_internet_access: the sandbox has no network but its loopback', async () => {
  await withSandbox({}, async (sbx) => {
    const r = await sbx.commands.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert.equal(r.stdout, 'lo\n');
  });
});

// moat_serve_sandbox_pool_<name>{shape="network"} of /metrics
async function netPool(name) {
  const r = await request('GET', '/metrics', undefined, { Authorization: `Bearer ${KEY}` });
  const m = r.body.toString().match(new RegExp(`^moat_serve_sandbox_pool_${name}\\{shape="network"\\} (\\d+)$`, 'm'));
  assert.ok(m, r.body.toString().slice(0, 2000));
  return Number(m[1]);
}

T('allowInternetAccess: true is answered from the pool\'s network shape, with its egress; with envs it is made cold', async () => {
  const t0 = Date.now();
  while (await netPool('ready') < 1) {
    assert.ok(Date.now() - t0 < 30000, 'the network pool never filled');
    await new Promise((r) => setTimeout(r, 50));
  }
  const egress = "grep -q '^lo[[:space:]]*00000000' /proc/net/route && echo route";
  const used = await netPool('used_total');
  await withSandbox({ allowInternetAccess: true, metadata: { k: 'v' } }, async (sbx) => {
    assert.equal(await netPool('used_total'), used + 1);
    assert.equal((await sbx.commands.run(egress)).stdout, 'route\n');
    assert.equal((await sbx.commands.run('ls -A /sandbox /tmp | grep -v : | grep -c . || true')).stdout, '0\n');
    assert.deepEqual((await sbx.getInfo()).metadata, { k: 'v' });
  });
  await withSandbox({ allowInternetAccess: true, envs: { A: 'b' } }, async (sbx) => {
    assert.equal(await netPool('used_total'), used + 1, 'a create with envs took the pool');
    assert.equal((await sbx.commands.run(egress)).stdout, 'route\n');
    assert.equal((await sbx.commands.run('echo $A')).stdout, 'b\n');
  });
});

T('create refuses what moat cannot give instead of dropping it', async () => {
  const r = await request('POST', '/e2b/v2/sandboxes',
    JSON.stringify({ templateID: 'base', network: { denyOut: ['0.0.0.0/0'] } }),
    { 'X-API-KEY': KEY, 'Content-Type': 'application/json' });
  assert.equal(r.status, 400);
  assert.match(JSON.parse(r.body).message, /"network" is not supported/);
});

T('metrics: a sample, or none where unmeasured', async () => {
  await withSandbox({}, async (sbx) => {
    // one sample where its cgroup measures it; none (never a made-up 0) where nothing does
    const m = await sbx.getMetrics();
    if (MODE === 'root') assert.equal(m.length, 1);
    assert.ok(m.length === 0 || (m.length === 1 && m[0].memUsed > 0), JSON.stringify(m));
  });
});

// A server answering every request 3 s late, many at once in one thread (no
// thread each: rootless, the sandbox's processes share uid 65534's limits).
const SLOW_SERVER = `
import asyncio, sys
async def answer(r, w):
    await r.readuntil(b'\\r\\n\\r\\n')
    await asyncio.sleep(3)
    w.write(b'HTTP/1.0 200 OK\\r\\nContent-Length: 4\\r\\n\\r\\nslow')
    await w.drain()
    w.close()
async def main():
    s = await asyncio.start_server(answer, '127.0.0.1', int(sys.argv[1]), backlog=128)
    await s.serve_forever()
asyncio.run(main())
`;

// A server of the sandbox's own (docs/E2B.md, "The sandbox's own servers"): it
// answers every request with what it got (method, target, headers, body), /big
// with 3 MiB, and records every header name it ever saw in /tmp/seen.
const ECHO_SERVER = `
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n).decode() if n else ''
        with open('/tmp/seen', 'a') as f:
            for k, v in self.headers.items():
                f.write(k.lower() + ': ' + v + '\\n')
        if self.path == '/big':
            data = b'x' * (3 << 20)
            ctype = 'application/octet-stream'
        else:
            data = json.dumps({'method': self.command, 'path': self.path, 'body': body,
                               'headers': {k.lower(): v for k, v in self.headers.items()}}).encode()
            ctype = 'application/json'
        self.send_response(201 if self.command == 'POST' else 200)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('X-Inner', 'yes')
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(data)
    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = answer
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
`;

T('a sandbox\'s own server: requests forwarded to its loopback, bodies both ways, moat\'s and E2B\'s credentials never reach it', async () => {
  await withSandbox({}, async (sbx) => {
    await sbx.files.write('/home/user/srv.py', ECHO_SERVER);
    await sbx.files.write('/home/user/slow.py', SLOW_SERVER);
    await sbx.commands.run('python3 /sandbox/srv.py 8000', { background: true });
    await sbx.commands.run('python3 /sandbox/slow.py 8002', { background: true });
    const id = sbx.sandboxId;
    const tok = sbx.envdAccessToken;
    const base = { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8000' };
    let r;
    for (let i = 0; i < 100; i++) { // until it listens: E2B's 502 before
      r = await request('GET', '/e2b/envd/hello?a=1&b=x%20y', undefined, { ...base, 'X-Access-Token': tok });
      if (r.status !== 502) break;
      assert.equal(JSON.parse(r.body).code, 502);
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(r.headers['x-inner'], 'yes');
    let got = JSON.parse(r.body);
    assert.equal(got.method, 'GET');
    assert.equal(got.path, '/hello?a=1&b=x%20y');
    // a POST with the traffic token (E2B's header for a port), every credential
    // of the service's sent along: the server gets the body, none of them
    const body = JSON.stringify({ ping: 'pong', n: [1, 2, 3] });
    r = await request('POST', '/e2b/envd/echo', body, { ...base, 'E2B-Traffic-Access-Token': tok,
      'X-API-KEY': KEY, Authorization: `Bearer ${KEY}`, 'X-Mine': 'kept', 'X-Copy': tok,
      'X-Key-A': KEY_A, 'Content-Type': 'application/json', Connection: 'keep-alive, X-Hop', 'X-Hop': 'dropped' });
    assert.equal(r.status, 201, r.body.toString());
    got = JSON.parse(r.body);
    assert.equal(got.method, 'POST');
    assert.equal(got.body, body);
    assert.equal(got.headers['x-mine'], 'kept');
    assert.equal(got.headers['content-type'], 'application/json');
    for (const k of ['e2b-sandbox-id', 'e2b-sandbox-port', 'x-access-token', 'e2b-traffic-access-token',
      'x-api-key', 'authorization', 'x-copy', 'x-key-a', 'x-hop']) assert.equal(got.headers[k], undefined, k);
    // an Authorization of the program's own goes through
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'X-Access-Token': tok, Authorization: 'Bearer app-own' });
    assert.equal(JSON.parse(r.body).headers.authorization, 'Bearer app-own');
    // a large answer streamed whole
    r = await request('GET', '/e2b/envd/big', undefined, { ...base, 'X-Access-Token': tok });
    assert.equal(r.status, 200);
    assert.equal(r.body.length, 3 << 20);
    r = await request('HEAD', '/e2b/envd/x', undefined, { ...base, 'X-Access-Token': tok });
    assert.equal(r.status, 200);
    assert.equal(r.body.length, 0);
    // every header the server ever saw: no secret among them, by name or value
    const seen = await sbx.files.read('/tmp/seen');
    for (const secret of [KEY, KEY_A, tok]) assert.ok(!seen.includes(secret), 'a secret reached the sandbox');
    assert.ok(!/^(x-access-token|e2b-traffic-access-token|x-api-key|e2b-sandbox-id):/m.test(seen), seen);
    // a wrong token, none, another sandbox's id: 401 alike, nothing forwarded
    const before = seen.length;
    for (const h of [{ ...base, 'X-Access-Token': 'f'.repeat(32) }, base,
      { ...base, 'E2b-Sandbox-Id': 'sbx_' + '0'.repeat(32), 'X-Access-Token': tok }]) {
      r = await request('GET', '/e2b/envd/', undefined, h);
      assert.equal(r.status, 401);
      assert.equal(JSON.parse(r.body).code, 401);
    }
    assert.equal((await sbx.files.read('/tmp/seen')).length, before);
    // nothing listens there: E2B's 502
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'E2b-Sandbox-Port': '8001', 'X-Access-Token': tok });
    assert.equal(r.status, 502);
    assert.match(JSON.parse(r.body).message, /nothing listens on port 8001/);
    // upgrades (WebSocket) are refused, said
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'X-Access-Token': tok,
      Connection: 'Upgrade', Upgrade: 'websocket' });
    assert.equal(r.status, 501);
    assert.match(JSON.parse(r.body).message, /WebSocket/);
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'E2b-Sandbox-Port': '65536', 'X-Access-Token': tok });
    assert.equal(r.status, 400);
    // at most 32 forwards at once a sandbox: the rest 503 at once, the places
    // given back when they end
    const many = await Promise.all(Array.from({ length: 40 }, () =>
      request('GET', '/e2b/envd/', undefined, { ...base, 'E2b-Sandbox-Port': '8002', 'X-Access-Token': tok })));
    const st = many.map((x) => x.status);
    assert.equal(st.filter((x) => x === 200).length, 32,
      many.map((x) => `${x.status} ${x.body}`).join());
    assert.ok(many.every((x) => x.status !== 200 || x.body.toString() === 'slow'));
    assert.equal(st.filter((x) => x === 503).length, 8, st.join());
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'X-Access-Token': tok });
    assert.equal(r.status, 200);
    await sbx.kill();
    // killed: E2B's 502
    r = await request('GET', '/e2b/envd/', undefined, { ...base, 'X-Access-Token': tok });
    assert.equal(r.status, 502);
    assert.equal(JSON.parse(r.body).code, 502);
  });
});

// docs/E2B.md's examples, as written, with nothing but the SDK's environment variables
T('docs/E2B.md\'s examples run as written', async () => {
  const md = fs.readFileSync(path.join(ROOT, 'docs/E2B.md'), 'utf8');
  const blocks = [...md.matchAll(/<!-- e2b-example -->\n```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.equal(blocks.length, 3);
  const dir = fs.mkdtempSync(path.join(tmp, 'examples-'));
  fs.symlinkSync(path.join(__dirname, 'node_modules'), path.join(dir, 'node_modules'));
  for (const [i, code] of blocks.entries()) {
    const file = path.join(dir, `example${i}.mjs`);
    fs.writeFileSync(file, code);
    const env = { PATH: process.env.PATH, HOME: process.env.HOME || '/nonexistent' };
    for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) env[k] = process.env[k];
    const out = await new Promise((resolve, reject) => {
      const ch = spawn(process.execPath, [file], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let o = '';
      let e = '';
      ch.stdout.on('data', (d) => { o += d; });
      ch.stderr.on('data', (d) => { e += d; });
      ch.on('error', reject);
      ch.on('exit', (code) => (code === 0 ? resolve(o) : reject(new Error(`example ${i}: ${code}: ${e}`))));
    });
    if (i === 0) assert.equal(out, 'hello from moat\n\n');
    else if (i === 2) assert.equal(out, '2\n');
    else assert.match(out, /^buy milk\n\[ 'todo\.txt' \]\n.* says hi\n\n\[ 'sbx_[a-z0-9-]+_[0-9a-f]{32}' \]\n$/);
  }
});

// A multipart body that arrives a few bytes at a time: delimiters, part headers and
// look-alikes of the delimiter inside a file split across reads, written exactly.
T('multipart in 5-byte pieces: every file exact, look-alike delimiters kept', async () => {
  await withSandbox({}, async (sbx) => {
    const bnd = 'qqBOUNDqq';
    const files = { 'p/1.txt': `one\r\n--qqBOUNDq\r\n--qqBOUNDqx`, 'p/2.bin': '\r\n\r\n--', 'p/3.txt': '' };
    let body = 'preamble to skip\r\n';
    for (const [name, data] of Object.entries(files))
      body += `--${bnd}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\n` +
        `Content-Type: application/octet-stream\r\n\r\n${data}\r\n`;
    body += `--${bnd}--\r\nepilogue`;
    const buf = Buffer.from(body);
    const res = await new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/e2b/envd/files',
        headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken,
          'Content-Type': `multipart/form-data; boundary=${bnd}`, 'Content-Length': buf.length } },
      (r) => { let b = ''; r.on('data', (d) => { b += d; }); r.on('end', () => resolve({ status: r.statusCode, body: b })); });
      req.on('error', reject);
      req.on('socket', (s) => s.setNoDelay(true));
      (async () => {
        for (let i = 0; i < buf.length; i += 5) {
          req.write(buf.subarray(i, i + 5));
          await new Promise((r) => setTimeout(r, 2));
        }
        req.end();
      })();
    });
    assert.equal(res.status, 200, res.body);
    assert.deepEqual(JSON.parse(res.body).map((f) => f.path), Object.keys(files).map((f) => `/sandbox/${f}`));
    for (const [name, data] of Object.entries(files))
      assert.equal(await sbx.files.read(name), data, name);
  });
});

T('serve.e2b.keys: each key sees and reaches only the sandboxes it made', async () => {
  const a = await e2b.Sandbox.create({ apiKey: KEY_A, metadata: { owner: 'a' } });
  try {
    assert.equal((await a.commands.run('echo mine')).stdout, 'mine\n');
    const ids = async (apiKey) => (await e2b.Sandbox.list({ apiKey }).nextItems()).map((x) => x.sandboxId);
    assert.ok((await ids(KEY_A)).includes(a.sandboxId));
    for (const other of [KEY_B, KEY]) { // another key, and the service's token: another credential
      assert.ok(!(await ids(other)).includes(a.sandboxId));
      await assert.rejects(e2b.Sandbox.getInfo(a.sandboxId, { apiKey: other }), e2b.NotFoundError);
      await assert.rejects(e2b.Sandbox.connect(a.sandboxId, { apiKey: other }), e2b.NotFoundError);
      await assert.rejects(e2b.Sandbox.setTimeout(a.sandboxId, 5000, { apiKey: other }), e2b.NotFoundError);
      assert.equal(await e2b.Sandbox.kill(a.sandboxId, { apiKey: other }), false);
    }
    assert.equal((await a.commands.run('echo still')).stdout, 'still\n');
    // a key that is not listed is refused, even one of E2B's form
    await assert.rejects(e2b.Sandbox.list({ apiKey: `e2b_${crypto.randomBytes(16).toString('hex')}` }).nextItems(),
      e2b.AuthenticationError);
  } finally {
    await e2b.Sandbox.kill(a.sandboxId, { apiKey: KEY_A });
  }
});

// waits (up to 20 s) until pred(events) holds
async function until(events, pred, what, poll) {
  for (let i = 0; i < 200 && !pred(events); i++) {
    if (poll) await poll();
    if (!pred(events)) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(pred(events), `${what}: saw ${JSON.stringify(events)}`);
}

T('files.watchDir: a file written, renamed and removed, in order; recursive sees a subdirectory; the watch stops', async () => {
  const sbx = await e2b.Sandbox.create();
  try {
    await sbx.files.makeDir('w/sub');
    const events = [];
    const handle = await sbx.files.watchDir('w', (e) => events.push(`${e.type} ${e.name}`));
    await sbx.files.write('w/a.txt', 'hello');
    await until(events, (ev) => ev.includes('write a.txt'), 'a write');
    await sbx.files.rename('w/a.txt', 'w/b.txt');
    await sbx.files.remove('w/b.txt');
    await until(events, (ev) => ev.includes('remove b.txt'), 'a remove');
    const at = (x) => events.indexOf(x);
    assert.ok(at('create a.txt') >= 0 && at('create a.txt') < at('write a.txt'), events.join());
    assert.ok(at('write a.txt') < at('rename a.txt') && at('rename a.txt') < at('create b.txt') &&
      at('create b.txt') < at('remove b.txt'), events.join());
    // not recursive: nothing of w/sub's own files
    await sbx.files.write('w/sub/deep.txt', 'x');
    await sbx.files.write('w/marker', 'x');
    await until(events, (ev) => ev.includes('create marker'), 'the marker');
    assert.ok(!events.some((e) => e.includes('deep.txt')), events.join());
    await handle.stop();

    const deep = [];
    const rec = await sbx.files.watchDir('/home/user/w', (e) => deep.push(`${e.type} ${e.name}`), { recursive: true });
    await sbx.files.write('w/sub/deep2.txt', 'y');
    await until(deep, (ev) => ev.includes('create sub/deep2.txt'), 'a recursive create');
    await rec.stop();

    // the directory removed ends the watch with an error, never silently
    let gone;
    const exited = new Promise((resolve) => { gone = resolve; });
    await sbx.files.watchDir('w/sub', () => {}, { onExit: (e) => gone(e) });
    await sbx.files.remove('w/sub');
    const why = await exited;
    assert.match(String(why && why.message), /removed or moved/);

    // what is not a directory is refused with the SDK's own errors
    await assert.rejects(sbx.files.watchDir('nope', () => {}), e2b.FileNotFoundError);
    await assert.rejects(sbx.files.watchDir('/etc', () => {}), e2b.InvalidArgumentError);
  } finally {
    await sbx.kill();
  }
});

// filesystem.Filesystem's polling watchers (the Python SDK's synchronous watch_dir;
// the JS SDK does not call them): raw Connect JSON calls.
async function watcherRpc(sbx, method, msg, token = sbx.envdAccessToken) {
  const r = await request('POST', `/e2b/envd/filesystem.Filesystem/${method}`, JSON.stringify(msg),
    { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token, 'Content-Type': 'application/json' });
  return { status: r.status, body: JSON.parse(r.body.toString() || '{}') };
}

// moat serve's open unix sockets (its watches' among them; not the clients' TCP ones)
const serveFds = () => {
  const unix = new Set(fs.readFileSync(`/proc/${srv.child.pid}/net/unix`, 'utf8').split('\n')
    .slice(1).map((l) => l.trim().split(/\s+/)[6]).filter(Boolean));
  return fs.readdirSync(`/proc/${srv.child.pid}/fd`).filter((f) => {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${srv.child.pid}/fd/${f}`));
      return m && unix.has(m[1]);
    } catch { return false; } // closed meanwhile
  }).length;
};

T('polling watchers: create, events drained per call in order, remove then not_found; 8 a sandbox; only its own token', async () => {
  const a = await e2b.Sandbox.create();
  const b = await e2b.Sandbox.create();
  try {
    await a.files.makeDir('pw/sub');
    const c = await watcherRpc(a, 'CreateWatcher', { path: '/home/user/pw', recursive: false });
    assert.equal(c.status, 200, JSON.stringify(c.body));
    const id = c.body.watcherId;
    assert.match(id, /^wch_[0-9a-f]{32}$/);
    assert.deepEqual((await watcherRpc(a, 'GetWatcherEvents', { watcherId: id })).body, { events: [] });
    await a.files.write('pw/one.txt', 'hi');
    await a.files.rename('pw/one.txt', 'pw/two.txt');
    await a.files.write('pw/sub/deep.txt', 'x'); // not recursive: not seen
    await a.files.remove('pw/two.txt');
    const seen = [];
    await until(seen, () => seen.includes('EVENT_TYPE_REMOVE two.txt'), 'the remove', async () => {
      const g = await watcherRpc(a, 'GetWatcherEvents', { watcherId: id });
      assert.equal(g.status, 200, JSON.stringify(g.body));
      for (const e of g.body.events) seen.push(`${e.type} ${e.name}`);
    });
    const at = (x) => seen.indexOf(x);
    assert.ok(at('EVENT_TYPE_CREATE one.txt') >= 0, seen.join());
    assert.ok(at('EVENT_TYPE_CREATE one.txt') < at('EVENT_TYPE_WRITE one.txt') &&
      at('EVENT_TYPE_WRITE one.txt') < at('EVENT_TYPE_RENAME one.txt') &&
      at('EVENT_TYPE_RENAME one.txt') < at('EVENT_TYPE_CREATE two.txt') &&
      at('EVENT_TYPE_CREATE two.txt') < at('EVENT_TYPE_REMOVE two.txt'), seen.join());
    assert.ok(!seen.some((e) => e.includes('deep')), seen.join());
    // drained: what was answered is not answered again
    assert.deepEqual((await watcherRpc(a, 'GetWatcherEvents', { watcherId: id })).body, { events: [] });
    // only the sandbox's own token reaches its watchers: another sandbox's token on
    // this sandbox is a 401, and the watcher id on another sandbox is unknown there
    const cross = await watcherRpc(a, 'GetWatcherEvents', { watcherId: id }, b.envdAccessToken);
    assert.equal(cross.status, 401);
    assert.equal(cross.body.code, 'unauthenticated');
    const other = await watcherRpc(b, 'GetWatcherEvents', { watcherId: id });
    assert.equal(other.status, 404);
    assert.equal(other.body.code, 'not_found');
    assert.equal((await watcherRpc(b, 'RemoveWatcher', { watcherId: id })).status, 404);
    // at most 8 watches a sandbox, WatchDir streams and polling watchers together
    const more = [];
    for (let i = 0; i < 7; i++) {
      const m = await watcherRpc(a, 'CreateWatcher', { path: 'pw' });
      assert.equal(m.status, 200, JSON.stringify(m.body));
      more.push(m.body.watcherId);
    }
    const ninth = await watcherRpc(a, 'CreateWatcher', { path: 'pw' });
    assert.equal(ninth.status, 429);
    assert.equal(ninth.body.code, 'resource_exhausted');
    await assert.rejects(a.files.watchDir('pw', () => {}), /at most 8/);
    for (const m of more) assert.equal((await watcherRpc(a, 'RemoveWatcher', { watcherId: m })).status, 200);
    // removed: then not_found, for events and for a second remove
    assert.equal((await watcherRpc(a, 'RemoveWatcher', { watcherId: id })).status, 200);
    const gone = await watcherRpc(a, 'GetWatcherEvents', { watcherId: id });
    assert.equal(gone.status, 404);
    assert.equal(gone.body.code, 'not_found');
    assert.equal((await watcherRpc(a, 'RemoveWatcher', { watcherId: id })).status, 404);
    assert.equal((await watcherRpc(a, 'GetWatcherEvents', { watcherId: 'wch_x' })).status, 404);
    // what is not a directory is refused as WatchDir refuses it
    assert.equal((await watcherRpc(a, 'CreateWatcher', { path: 'nope' })).body.code, 'not_found');
    assert.equal((await watcherRpc(a, 'CreateWatcher', { path: '/etc' })).body.code, 'invalid_argument');
  } finally {
    await a.kill();
    await b.kill();
  }
});

T('polling watchers: the directory removed and events lost are errors, never silent; the sandbox\'s end closes them', async () => {
  const sbx = await e2b.Sandbox.create();
  try {
    await sbx.files.makeDir('pw/sub');
    // the directory watched removed: the call says so, then the watcher is gone
    const d = (await watcherRpc(sbx, 'CreateWatcher', { path: 'pw/sub' })).body.watcherId;
    await sbx.files.remove('pw/sub');
    let end = null;
    await until([], () => end, 'the end of the watch', async () => {
      const g = await watcherRpc(sbx, 'GetWatcherEvents', { watcherId: d });
      if (g.status !== 200) end = g;
    });
    assert.equal(end.status, 404);
    assert.match(end.body.message, /removed or moved/);
    assert.match((await watcherRpc(sbx, 'GetWatcherEvents', { watcherId: d })).body.message, /no such watcher/);
    // more events than the queue holds, unread: data_loss, then the watcher is gone
    const f = (await watcherRpc(sbx, 'CreateWatcher', { path: 'pw' })).body.watcherId;
    await sbx.commands.run('for i in $(seq 1 4000); do echo x > /sandbox/pw/f$i; done');
    // each call drains what the agent has passed on so far: a call may come
    // before the agent's next batch (an empty answer, not a loss), so poll on
    let lost = null;
    for (let i = 0; i < 200 && !lost; i++) {
      const g = await watcherRpc(sbx, 'GetWatcherEvents', { watcherId: f });
      if (g.status !== 200) lost = g;
      else if (!g.body.events.length) await new Promise((r) => setTimeout(r, 25));
    }
    assert.ok(lost, 'an overflow reported');
    assert.equal(lost.body.code, 'data_loss');
    assert.equal((await watcherRpc(sbx, 'GetWatcherEvents', { watcherId: f })).status, 404);
  } finally {
    await sbx.kill();
  }
  // a sandbox that ends (its timeout) closes its watchers then, not when it is
  // forgotten (its record stays): what an ended one leaves open in moat serve is the
  // same with 8 watchers as with none
  const left = async (watchers) => {
    const before = serveFds();
    const s = await e2b.Sandbox.create({ timeoutMs: 2000 });
    await s.files.makeDir('pw');
    for (let i = 0; i < watchers; i++) {
      assert.equal((await watcherRpc(s, 'CreateWatcher', { path: 'pw' })).status, 200);
    }
    if (watchers) assert.ok(serveFds() >= before + watchers);
    let code = null;
    await until([], () => code === 'unavailable', 'the sandbox\'s end', async () => {
      code = (await watcherRpc(s, 'GetWatcherEvents', { watcherId: 'wch_' + '0'.repeat(32) })).body.code;
    });
    await new Promise((r) => setTimeout(r, 500));
    return serveFds() - before;
  };
  const none = await left(0);
  const eight = await left(8);
  assert.ok(eight - none < 4, `an ended sandbox left ${none} descriptors open, with 8 watchers ${eight}`);
});

T('signed file URLs (downloadUrl, uploadUrl): no access token; a tampered, expired, other-path or read-for-write one is a 401', async () => {
  await withSandbox({ secure: true }, async (sbx) => {
    await sbx.files.write('signed/a b.txt', 'signed hello');
    // the SDK builds <E2B_SANDBOX_URL's origin>/files?...: pointed at moat's envd
    const atMoat = (u) => {
      const x = new URL(u);
      assert.equal(x.pathname, '/files');
      assert.match(x.searchParams.get('signature'), /^v1_[A-Za-z0-9+/]{43}$/);
      return `${process.env.E2B_SANDBOX_URL}/files${x.search}`;
    };
    const with_ = (u, k, v) => { const x = new URL(u); x.searchParams.set(k, v); return x.toString(); };
    const get = await fetch(atMoat(await sbx.downloadUrl('signed/a b.txt')));
    assert.equal(get.status, 200);
    assert.equal(await get.text(), 'signed hello');
    const timed = atMoat(await sbx.downloadUrl('signed/a b.txt', { useSignatureExpiration: 120 }));
    assert.match(timed, /signature_expiration=\d+/);
    assert.equal(await (await fetch(timed)).text(), 'signed hello');
    const up = atMoat(await sbx.uploadUrl('signed/up.txt'));
    const form = new FormData();
    form.append('file', new Blob(['uploaded signed']), 'signed/up.txt');
    const put = await fetch(up, { method: 'POST', body: form });
    assert.equal(put.status, 200, await put.clone().text());
    assert.equal(await sbx.files.read('signed/up.txt'), 'uploaded signed');
    const refused = async (u, init, why) => {
      const r = await fetch(u, init);
      assert.equal(r.status, 401, why);
      assert.equal((await r.json()).code, 401, why);
    };
    const dl = atMoat(await sbx.downloadUrl('signed/a b.txt'));
    const sig = new URL(dl).searchParams.get('signature');
    const flip = sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A');
    await refused(with_(dl, 'signature', flip), undefined, 'a tampered signature');
    await refused(with_(dl, 'path', 'signed/up.txt'), undefined, 'another path');
    await refused(with_(dl, 'username', 'root'), undefined, 'another user');
    await refused(with_(timed, 'signature_expiration', String(Math.floor(Date.now() / 1000) + 99999)),
      undefined, 'the expiration moved');
    const old = atMoat(await sbx.downloadUrl('signed/a b.txt', { useSignatureExpiration: -5 }));
    const r = await fetch(old);
    assert.equal(r.status, 401);
    assert.match((await r.json()).message, /expired/);
    const wform = new FormData();
    wform.append('file', new Blob(['not written']), 'signed/a b.txt');
    await refused(dl, { method: 'POST', body: wform }, 'a read signature used to write');
    assert.equal(await sbx.files.read('signed/a b.txt'), 'signed hello');
    await refused(with_(up, 'signature', 'v1_' + 'A'.repeat(43)), { method: 'POST', body: form }, 'a made-up one');
    // bound to the sandbox: another sandbox's id with this signature is refused
    await withSandbox({}, async (other) => {
      const r2 = await fetch(dl, { headers: { 'E2b-Sandbox-Id': other.sandboxId } });
      assert.equal(r2.status, 401);
    });
  });
});

T('pty: create runs a shell on a terminal (tty, stty size), sendInput, resize, kill', async () => {
  const sbx = await e2b.Sandbox.create();
  try {
    let out = '';
    const dec = new TextDecoder();
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }); } });
    const seen = (re) => until([], () => re.test(out), `${re} in the terminal's output ${JSON.stringify(out)}`);
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('tty; echo "size=$(stty size)"\n'));
    await seen(/^\/dev\/pts\/\d+\r?$/m);
    await seen(/size=24 80/);
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "size=$(stty size)"\n'));
    await seen(/size=30 100/);
    // a pty's input is the terminal's: a command without one is refused, not fed
    const bg = await sbx.commands.run('sleep 30', { background: true, stdin: true });
    await assert.rejects(sbx.pty.sendInput(bg.pid, new TextEncoder().encode('x')), /no PTY/);
    await assert.rejects(sbx.pty.resize(bg.pid, { cols: 10, rows: 10 }), /no PTY/);
    await bg.kill();
    assert.equal(await sbx.pty.kill(term.pid), true);
    const end = await term.wait().then(() => null, (e) => e);
    assert.ok(end === null || end instanceof e2b.CommandExitError, String(end));
  } finally {
    await sbx.kill();
  }
});

T('a killed sandbox is not running; envd then answers as E2B does', async () => {
  const sbx = await e2b.Sandbox.create();
  assert.equal(await sbx.isRunning(), true);
  await sbx.kill();
  assert.equal(await sbx.isRunning(), false);
  await assert.rejects(sbx.files.read('x'), e2b.TimeoutError); // envd's 502: E2B's "sandbox timeout"
});

// ---- the code interpreter: the unmodified @e2b/code-interpreter SDK (port 49999) on
// moat's code contexts (docs/E2B.md, "Code interpreter") ----
let ci = null;
let ciSkip = skip;
if (!ciSkip) {
  try {
    ci = require(path.join(__dirname, 'node_modules/@e2b/code-interpreter'));
  } catch (e) {
    ciSkip = `the @e2b/code-interpreter SDK is not installed (npm ci in tests/e2b): ${e.code || e.message}`;
  }
}
const TC = (name, fn) => test(`[${MODE}] code interpreter: ${name}`, { skip: ciSkip, timeout: 180000 }, fn);

async function withInterpreter(fn) {
  const sbx = await ci.Sandbox.create();
  try {
    return await fn(sbx);
  } finally {
    await sbx.kill().catch(() => {});
  }
}

TC('runCode keeps state between calls; print reaches onStdout; the count goes up', async () => {
  await withInterpreter(async (sbx) => {
    const first = await sbx.runCode('x = 1');
    assert.equal(first.error, undefined);
    const seen = [];
    const r = await sbx.runCode('print("hello", x)\nx + 1', { onStdout: (m) => seen.push(m.line) });
    assert.equal(r.error, undefined);
    assert.equal(r.text, '2');
    assert.equal(seen.join(''), 'hello 1\n');
    assert.deepEqual(r.logs.stdout, ['hello 1\n']);
    assert.equal(r.executionCount, 2);
    const err = [];
    await sbx.runCode('import sys; print("oops", file=sys.stderr)', { onStderr: (m) => err.push(m.line) });
    assert.equal(err.join(''), 'oops\n');
  });
});

TC('pause, then connect: the interpreter keeps its variables', async () => {
  await withInterpreter(async (sbx) => {
    assert.equal((await sbx.runCode('x = 41')).error, undefined);
    assert.equal(await sbx.pause(), true);
    assert.equal((await ci.Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
    const again = await ci.Sandbox.connect(sbx.sandboxId);
    assert.equal((await ci.Sandbox.getInfo(sbx.sandboxId)).state, 'running');
    const r = await again.runCode('x + 1');
    assert.equal(r.error, undefined);
    assert.equal(r.text, '42');
  });
});

TC('an exception gives name, value and traceback (onError too)', async () => {
  await withInterpreter(async (sbx) => {
    let seen = null;
    const r = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => { seen = e; } });
    assert.ok(r.error, 'an error');
    assert.equal(r.error.name, 'ZeroDivisionError');
    assert.match(r.error.value, /division by zero/);
    assert.equal(typeof r.error.traceback, 'string');
    assert.match(r.error.traceback, /ZeroDivisionError/);
    assert.match(r.error.traceback, /line 2/);
    assert.equal(seen && seen.name, 'ZeroDivisionError');
    assert.equal(r.results.length, 0);
  });
});

TC('a display() and the last expression are results with their MIME fields (text, html, png)', async () => {
  await withInterpreter(async (sbx) => {
    const got = [];
    const r = await sbx.runCode(
      'class H:\n    def _repr_html_(self): return "<b>hi</b>"\n    def __repr__(self): return "H()"\n' +
      'display(H())\n{"a": 1}', { onResult: (x) => got.push(x) });
    assert.equal(r.error, undefined);
    assert.equal(r.results.length, 2);
    assert.equal(got.length, 2);
    const [shown, last] = r.results;
    assert.equal(shown.isMainResult, false);
    assert.equal(shown.html, '<b>hi</b>');
    assert.equal(shown.text, 'H()');
    assert.ok(shown.formats().includes('html'));
    assert.equal(last.isMainResult, true);
    assert.equal(last.text, "{'a': 1}");
    assert.equal(r.text, "{'a': 1}");
    // an image (as a chart's figure is): png, base64, under E2B's name
    const png = await sbx.runCode('class P:\n    def _repr_png_(self): return b"\\x89PNG-ish"\nP()');
    assert.equal(png.error, undefined);
    assert.equal(png.results.length, 1);
    assert.equal(Buffer.from(png.results[0].png, 'base64').toString('latin1'), '\x89PNG-ish');
    assert.ok(png.results[0].formats().includes('png'));
  });
});

TC('a JavaScript context: create, state, list, restart, remove; language js by default context', async () => {
  await withInterpreter(async (sbx) => {
    const ctx = await sbx.createCodeContext({ language: 'javascript' });
    assert.match(ctx.id, /^ctx_[0-9a-f]{32}$/);
    assert.equal(ctx.language, 'javascript');
    assert.equal(ctx.cwd, '/sandbox');
    await sbx.runCode('let y = 40', { context: ctx });
    const r = await sbx.runCode('y + 2', { context: ctx });
    assert.equal(r.error, undefined);
    assert.equal(r.text, '42');
    // the language's default context is another one, made on first use
    const d = await sbx.runCode('typeof y', { language: 'javascript' });
    assert.equal(d.text, "'undefined'");
    const listed = await sbx.listCodeContexts();
    assert.ok(listed.some((c) => c.id === ctx.id && c.language === 'javascript'));
    assert.equal(listed.length, 2);
    await sbx.restartCodeContext(ctx);
    const gone = await sbx.runCode('y', { context: ctx });
    assert.equal(gone.error && gone.error.name, 'ReferenceError');
    await sbx.removeCodeContext(ctx.id);
    await assert.rejects(sbx.runCode('1', { context: ctx }), ci.NotFoundError);
    assert.equal((await sbx.listCodeContexts()).length, 1);
    // a language moat has no interpreter for: refused, not run as another
    await assert.rejects(sbx.runCode('1', { language: 'r' }), /400/);
    // a cell's own environment variables: refused, never dropped
    await assert.rejects(sbx.runCode('1', { envs: { A: 'b' } }), /400/);
  });
});

TC('a timed-out cell is interrupted, and the context keeps its state', async () => {
  await withInterpreter(async (sbx) => {
    await sbx.runCode('x = 5');
    const t0 = Date.now();
    await assert.rejects(sbx.runCode('import time\nwhile True:\n    time.sleep(0.05)', { timeoutMs: 1500 }),
      ci.TimeoutError);
    assert.ok(Date.now() - t0 < 10000);
    // the interrupt reaches the step within moments; the next cell then runs
    let r = null;
    for (let i = 0; i < 50; i++) {
      try {
        r = await sbx.runCode('x');
        break;
      } catch (e) {
        if (!/409/.test(String(e))) throw e; // busy while the interrupt lands
        await new Promise((res) => setTimeout(res, 100));
      }
    }
    assert.ok(r, 'the context answered again');
    assert.equal(r.error, undefined);
    assert.equal(r.text, '5');
  });
});

TC('the code interpreter needs the sandbox\'s access token', async () => {
  await withInterpreter(async (sbx) => {
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json' };
    const none = await request('POST', '/e2b/envd/execute', JSON.stringify({ code: '1' }), h);
    assert.equal(none.status, 401);
    const wrong = await request('GET', '/e2b/envd/contexts', undefined,
      { ...h, 'X-Access-Token': 'f'.repeat(32) });
    assert.equal(wrong.status, 401);
    const other = await ci.Sandbox.create();
    try {
      const cross = await request('GET', '/e2b/envd/contexts', undefined,
        { ...h, 'E2B-Traffic-Access-Token': other.envdAccessToken });
      assert.equal(cross.status, 401);
    } finally {
      await other.kill().catch(() => {});
    }
    const ok = await request('GET', '/e2b/envd/contexts', undefined,
      { ...h, 'E2B-Traffic-Access-Token': sbx.envdAccessToken });
    assert.equal(ok.status, 200);
    assert.deepEqual(JSON.parse(ok.body), []);
  });
});

TC('an interpreter killed mid-cell says so (ContextKilled); the default context is then made new', async () => {
  await withInterpreter(async (sbx) => {
    await sbx.runCode('x = 7');
    const r = await sbx.runCode('import os, signal\nos.kill(os.getpid(), signal.SIGKILL)');
    assert.ok(r.error, 'an error, never a clean-looking execution');
    assert.equal(r.error.name, 'ContextKilled');
    assert.match(r.error.value, /signal 9|killed/);
    const again = await sbx.runCode('1 + 1');
    assert.equal(again.error, undefined);
    assert.equal(again.text, '2');
    const fresh = await sbx.runCode('x');
    assert.equal(fresh.error && fresh.error.name, 'NameError'); // its state went with it
  });
});

TC('language typescript: its default context strips types and keeps state', async (t) => {
  await withInterpreter(async (sbx) => {
    const a = await sbx.runCode('const z: number = 21', { language: 'typescript' });
    if (a.error && /needs esbuild/.test(a.error.value)) {
      t.skip('no esbuild in the sandbox root: TypeScript cannot run here');
      return;
    }
    assert.equal(a.error, undefined);
    const r = await sbx.runCode('z * 2', { language: 'typescript' });
    assert.equal(r.error, undefined);
    assert.equal(r.text, '42');
    // its own context, not the javascript one
    const js = await sbx.runCode('typeof z', { language: 'javascript' });
    assert.equal(js.text, "'undefined'");
  });
});
