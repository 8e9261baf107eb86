'use strict';
// The client against `moat serve` (POST /v1/run): first a fake service made here, which
// checks each request and answers canned results and errors; then the real `moat serve`
// ($MOAT_BIN, else ../../../build/moat), skipped when that binary has no `serve`.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const {
  createSandbox, SandboxError, SandboxUnavailableError, SandboxPolicyError, SandboxConfigError,
} = require('..');

const TOKEN = 'tok-0123456789abcdef-secret';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-serve-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// A fake moat serve: records every request (method, url, headers, parsed body) and answers
// through `handler(req, body, res)`; counts connections.
function fakeServer(handler, listenArgs) {
  const seen = [];
  const sockets = new Set();
  let connections = 0;
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body;
      try { body = JSON.parse(raw); } catch { body = raw; }
      const rec = { method: req.method, url: req.url, headers: req.headers, body, closed: false };
      res.on('close', () => { rec.closed = true; });
      seen.push(rec);
      handler(req, body, res, rec);
    });
  });
  srv.on('connection', (s) => { connections++; sockets.add(s); s.on('close', () => sockets.delete(s)); });
  return new Promise((resolve) => {
    srv.listen(...listenArgs, () => resolve({
      seen,
      get connections() { return connections; },
      address: srv.address(),
      close: () => new Promise((r) => { for (const s of sockets) s.destroy(); srv.close(() => r()); }),
    }));
  });
}

const RESULT = {
  stdout: '42\n', stderr: '', exitCode: 0, timedOut: false, durationMs: 31, provider: 'native',
  signal: null, oomKilled: false, killedBy: null, memoryPeakBytes: null, cpuTimeMs: null,
  stdoutTruncated: false, stderrTruncated: false,
  limits: { memory: 'cgroup-v2', pids: 'cgroup-v2', cpu: 'cgroup-v2' }, warnings: [],
};
const json = (res, status, obj, headers = {}) => {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(obj));
};
const errBody = (type, message) => ({ error: { type, message, provider: 'native' } });

describe('fake service', () => {
  let unix;
  let tcp;
  let reply; // what the next request gets: (req, body, res) => void
  const handler = (req, body, res, rec) => reply(req, body, res, rec);
  const sock = path.join(tmp, 'fake.sock');
  before(async () => {
    unix = await fakeServer(handler, [sock]);
    tcp = await fakeServer(handler, [0, '127.0.0.1']);
  });
  after(async () => { await unix.close(); await tcp.close(); });
  const url = () => `http://127.0.0.1:${tcp.address.port}`;

  it('unix socket: POST /v1/run with the token, JSON body, config defaults folded in', async () => {
    reply = (req, body, res) => json(res, 200, RESULT);
    const s = createSandbox({ provider: 'native', socketPath: sock, token: TOKEN, memoryMb: 128,
      timeout: 9000, moatPath: '/nonexistent', images: { python: 'x' } });
    try {
      const n = unix.seen.length;
      const r = await s.run('print(6*7)', { language: 'python', env: { A: 'b' }, files: { 'f.txt': 'x' },
        stdin: 'in', allowedHosts: ['https://example.com'], outputs: ['*.txt'], timeout: 4000, bogus: 1 });
      assert.deepEqual(r, RESULT);
      const q = unix.seen[n];
      assert.equal(q.method, 'POST');
      assert.equal(q.url, '/v1/run');
      assert.equal(q.headers.authorization, `Bearer ${TOKEN}`);
      assert.match(q.headers['content-type'], /^application\/json/);
      assert.equal(Number(q.headers['content-length']), Buffer.byteLength(JSON.stringify(q.body)));
      assert.deepEqual(q.body, {
        code: 'print(6*7)', language: 'python', env: { A: 'b' }, files: { 'f.txt': 'x' }, stdin: 'in',
        allowedHosts: ['https://example.com'], outputs: ['*.txt'], timeout: 4000, memoryMb: 128,
      });
      assert.equal(s.provider, 'native');
    } finally { await s.dispose(); }
  });

  it('TCP url: no token → no Authorization; a base path is kept; provider/durationMs filled in', async () => {
    reply = (req, body, res) => json(res, 200, { stdout: '', stderr: '', exitCode: 0, timedOut: false });
    const s = createSandbox({ url: `${url()}/moat/` });
    try {
      const n = tcp.seen.length;
      const r = await s.run('pass');
      const q = tcp.seen[n];
      assert.equal(q.url, '/moat/v1/run');
      assert.equal(q.headers.authorization, undefined);
      // no aistack defaults through a service: its own serve.defaults apply
      assert.deepEqual(q.body, { code: 'pass' });
      assert.equal(r.provider, 'native');
      assert.equal(typeof r.durationMs, 'number');
    } finally { await s.dispose(); }
  });

  it('a timed-out run is a normal result', async () => {
    const timedOut = { ...RESULT, stdout: '', exitCode: null, timedOut: true, killedBy: 'timeout' };
    reply = (req, body, res) => json(res, 200, timedOut);
    const s = createSandbox({ socketPath: sock });
    try { assert.deepEqual(await s.run('while True: pass', { timeout: 100 }), timedOut); } finally { await s.dispose(); }
  });

  it('keep-alive: back-to-back runs share one connection', async () => {
    reply = (req, body, res) => json(res, 200, RESULT);
    const s = createSandbox({ url: url(), token: TOKEN });
    try {
      const before = tcp.connections;
      for (let i = 0; i < 3; i++) await s.run('print(6*7)');
      assert.equal(tcp.connections - before, 1);
    } finally { await s.dispose(); }
  });

  const cases = [
    [400, 'SandboxConfigError', SandboxConfigError, {}],
    [401, 'AuthenticationError', SandboxConfigError, { 'WWW-Authenticate': 'Bearer' }],
    [403, 'SandboxPolicyError', SandboxPolicyError, {}],
    [404, 'NotFound', SandboxConfigError, {}],
    [405, 'MethodNotAllowed', SandboxConfigError, { Allow: 'POST' }],
    [413, 'PayloadTooLarge', SandboxPolicyError, {}],
    [501, 'NotImplemented', SandboxUnavailableError, {}],
    [503, 'SandboxUnavailableError', SandboxUnavailableError, {}],
    [503, 'ServerBusy', SandboxUnavailableError, { 'Retry-After': '1' }],
    [500, 'Internal', SandboxUnavailableError, {}],
    [418, 'Teapot', SandboxError, {}],
  ];
  for (const [status, type, Cls, headers] of cases) {
    it(`HTTP ${status} ${type} → ${Cls.name}`, async () => {
      reply = (req, body, res) => json(res, status, errBody(type, `refused: ${type}`), headers);
      for (const cfg of [{ socketPath: sock, token: TOKEN }, { url: url(), token: TOKEN }]) {
        const s = createSandbox(cfg);
        try {
          await assert.rejects(s.run('print(1)'), (e) => {
            assert.ok(e instanceof Cls, `${e.name}: ${e.message}`);
            assert.ok(e instanceof SandboxError);
            if (Cls === SandboxError) assert.equal(e.constructor, SandboxError);
            assert.equal(e.provider, 'native');
            assert.equal(e.status, status);
            assert.equal(e.errorType, type);
            assert.match(e.message, new RegExp(`refused: ${type}`));
            assert.ok(!e.message.includes(TOKEN));
            assert.ok(!JSON.stringify(e).includes(TOKEN));
            if (headers['Retry-After']) assert.equal(e.retryAfterMs, 1000);
            else assert.equal(e.retryAfterMs, undefined);
            return true;
          });
        } finally { await s.dispose(); }
      }
    });
  }

  it('the service\'s type wins over the status; Retry-After as an HTTP date', async () => {
    reply = (req, body, res) => json(res, 400, errBody('SandboxPolicyError', 'bad env name'));
    const s = createSandbox({ socketPath: sock });
    try {
      await assert.rejects(s.run('print(1)'), SandboxPolicyError);
      const when = new Date(Date.now() + 5000).toUTCString();
      reply = (req, body, res) => json(res, 503, errBody('ServerBusy', 'queue full'), { 'Retry-After': when });
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SandboxUnavailableError);
        assert.ok(e.retryAfterMs > 2000 && e.retryAfterMs <= 5000, String(e.retryAfterMs));
        return true;
      });
    } finally { await s.dispose(); }
  });

  it('401 without a token says so', async () => {
    reply = (req, body, res) => json(res, 401, errBody('AuthenticationError', 'missing token'));
    const s = createSandbox({ socketPath: sock });
    try {
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SandboxConfigError);
        assert.match(e.message, /no token configured/);
        return true;
      });
    } finally { await s.dispose(); }
  });

  it('answers that are not JSON → SandboxUnavailableError / by status', async () => {
    const s = createSandbox({ socketPath: sock });
    try {
      reply = (req, body, res) => { res.writeHead(200); res.end('<html>hello</html>'); };
      await assert.rejects(s.run('print(1)'), SandboxUnavailableError);
      reply = (req, body, res) => { res.writeHead(200); res.end('[1,2]'); };
      await assert.rejects(s.run('print(1)'), SandboxUnavailableError);
      reply = (req, body, res) => { res.writeHead(502); res.end('Bad Gateway'); };
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SandboxUnavailableError);
        assert.equal(e.status, 502);
        assert.match(e.message, /HTTP 502/);
        return true;
      });
      reply = (req, body, res) => { res.writeHead(403); res.end(); };
      await assert.rejects(s.run('print(1)'), SandboxPolicyError);
    } finally { await s.dispose(); }
  });

  it('a cut answer → SandboxUnavailableError', async () => {
    reply = (req, body, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '1000' });
      res.write('{"stdout": "4');
      setTimeout(() => res.socket.destroy(), 20);
    };
    const s = createSandbox({ socketPath: sock });
    try {
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SandboxUnavailableError, e.message);
        assert.match(e.message, /before the whole answer/);
        return true;
      });
    } finally { await s.dispose(); }
  });

  it('client deadline: a silent service → the request is aborted, SandboxUnavailableError', async () => {
    let rec;
    reply = (req, body, res, r) => { rec = r; }; // never answers
    for (const cfg of [{ socketPath: sock }, { url: url() }]) {
      const s = createSandbox({ ...cfg, timeout: 200, deadlineGraceMs: 300 });
      const t0 = Date.now();
      try {
        await assert.rejects(s.run('print(1)'), (e) => {
          assert.ok(e instanceof SandboxUnavailableError);
          assert.match(e.message, /did not answer within 500 ms/);
          return true;
        });
        assert.ok(Date.now() - t0 < 3000);
        for (let i = 0; i < 50 && !rec.closed; i++) await new Promise((r) => setTimeout(r, 20));
        assert.ok(rec.closed, 'the service saw the request aborted');
      } finally { await s.dispose(); }
    }
  });

  it('dispose aborts in-flight runs and refuses later ones', async () => {
    const recs = [];
    reply = (req, body, res, r) => { recs.push(r); };
    const s = createSandbox({ socketPath: sock, token: TOKEN });
    const runs = [s.run('print(1)'), s.run('print(2)')];
    for (let i = 0; i < 100 && recs.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(recs.length, 2);
    await s.dispose();
    for (const p of runs) {
      await assert.rejects(p, (e) => {
        assert.ok(e instanceof SandboxError);
        assert.ok(!(e instanceof SandboxUnavailableError));
        assert.match(e.message, /disposed/);
        return true;
      });
    }
    for (let i = 0; i < 50 && !recs.every((r) => r.closed); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(recs.every((r) => r.closed), 'the service saw both requests aborted');
    await assert.rejects(s.run('print(1)'), /disposed/);
    await s.dispose(); // twice is fine
  });

  it('nobody listening → SandboxUnavailableError', async () => {
    const free = await freePort();
    for (const cfg of [{ socketPath: path.join(tmp, 'nothing.sock') }, { url: `http://127.0.0.1:${free}` }]) {
      const s = createSandbox({ ...cfg, token: TOKEN });
      try {
        await assert.rejects(s.run('print(1)'), (e) => {
          assert.ok(e instanceof SandboxUnavailableError);
          assert.match(e.message, /cannot reach moat serve/);
          assert.ok(!e.message.includes(TOKEN));
          return true;
        });
      } finally { await s.dispose(); }
    }
  });

  it('bad code and opts are refused before any request', async () => {
    const s = createSandbox({ socketPath: sock });
    try {
      await assert.rejects(s.run(42), SandboxConfigError);
      await assert.rejects(s.run('x', 'opts'), SandboxConfigError);
    } finally { await s.dispose(); }
  });
});

describe('service config is checked at createSandbox', () => {
  const bad = (cfg, re) => assert.throws(() => createSandbox(cfg), (e) => {
    assert.ok(e instanceof SandboxConfigError, e.message);
    if (re) assert.match(e.message, re);
    assert.ok(!e.message.includes(TOKEN) && !e.message.includes('hunter2'));
    return true;
  });
  it('url and socketPath are exclusive', () => bad({ url: 'http://127.0.0.1:1', socketPath: '/x.sock' }, /exclusive/));
  it('url must be http(s)', () => {
    bad({ url: 'ftp://127.0.0.1/' }, /http/);
    bad({ url: 'unix:/run/moat.sock' }, /http/);
    bad({ url: 'not a url' });
    bad({ url: 42 });
    bad({ url: 'http://user:hunter2@127.0.0.1:3000' }, /credentials/);
    bad({ url: 'http://127.0.0.1:3000/?x=1' });
  });
  it('socketPath must be a non-empty string', () => { bad({ socketPath: '' }); bad({ socketPath: 3 }); });
  it('token: a printable string, and only with a service', () => {
    bad({ token: TOKEN }, /url or socketPath/);
    bad({ socketPath: '/x.sock', token: `${TOKEN}\r\nX-Evil: 1` });
    bad({ socketPath: '/x.sock', token: '' });
  });
  it('the service runs the native provider only', () => bad({ provider: 'docker', url: 'http://127.0.0.1:1' }, /native/));
  it('https is accepted', async () => {
    const s = createSandbox({ url: 'https://127.0.0.1:1', deadlineGraceMs: 1000 });
    await assert.rejects(s.run('print(1)'), SandboxUnavailableError);
    await s.dispose();
  });
});

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// ---- the real moat serve ---------------------------------------------------------------

const { skip, startServe, stopServe } = require('../test-support/serve');

describe('real moat serve on a unix socket', () => {
  const sock = path.join(tmp, 'moat.sock');
  let srv;
  let s;
  before(async () => {
    if (skip) return;
    srv = await startServe(['--socket', sock], { socketPath: sock });
    s = createSandbox({ provider: 'native', socketPath: sock, timeout: 20000 });
  });
  after(async () => { if (s) await s.dispose(); await stopServe(srv); });

  it('print(6*7)', { skip }, async () => {
    const r = await s.run('print(6*7)', { language: 'python' });
    assert.equal(r.stdout, '42\n');
    assert.equal(r.stderr, '');
    assert.equal(r.exitCode, 0);
    assert.equal(r.timedOut, false);
    assert.equal(r.provider, 'native');
    assert.equal(typeof r.durationMs, 'number');
  });

  it('timeout: timedOut, exitCode null', { skip }, async () => {
    const t0 = Date.now();
    const r = await s.run('while True: pass', { timeout: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, null);
    assert.ok(Date.now() - t0 < 10000);
  });

  it('env, files, stdin and several runs at once', { skip }, async () => {
    const rs = await Promise.all([1, 2, 3].map((i) => s.run(
      'import os, sys; print(os.environ["N"], open("d/x.txt").read(), sys.stdin.read())',
      { env: { N: String(i) }, files: { 'd/x.txt': `f${i}` }, stdin: `s${i}` })));
    rs.forEach((r, i) => assert.equal(r.stdout, `${i + 1} f${i + 1} s${i + 1}\n`));
  });

  it('a limit above the service\'s max → SandboxPolicyError (403)', { skip }, async () => {
    await assert.rejects(s.run('print(1)', { memoryMb: 1 << 20 }), (e) => {
      assert.ok(e instanceof SandboxPolicyError, `${e.name}: ${e.message}`);
      assert.equal(e.status, 403);
      return true;
    });
  });

  it('a malformed request → SandboxConfigError (400)', { skip }, async () => {
    await assert.rejects(s.run('print(1)', { timeout: 'soon' }), (e) => {
      assert.ok(e instanceof SandboxConfigError, `${e.name}: ${e.message}`);
      assert.equal(e.status, 400);
      return true;
    });
  });

  it('SIGTERM: the service exits 0', { skip }, async () => {
    await s.dispose();
    s = null;
    const e = await stopServe(srv);
    assert.deepEqual(e, { code: 0, sig: null }, srv.log.slice(-2000));
  });
});

describe('real moat serve on 127.0.0.1 with a token', () => {
  const tokenFile = path.join(tmp, 'token');
  let srv;
  let port;
  before(async () => {
    if (skip) return;
    fs.writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    port = await freePort();
    srv = await startServe(['--listen', `127.0.0.1:${port}`, '--token-file', tokenFile],
      { host: '127.0.0.1', port });
  });
  after(async () => { await stopServe(srv); });

  it('the right token runs', { skip }, async () => {
    const s = createSandbox({ url: `http://127.0.0.1:${port}`, token: TOKEN });
    try {
      const r = await s.run('print(6*7)');
      assert.equal(r.stdout, '42\n');
      assert.equal(r.exitCode, 0);
      assert.equal(r.provider, 'native');
    } finally { await s.dispose(); }
  });

  it('a wrong or missing token → SandboxConfigError (401)', { skip }, async () => {
    for (const token of ['wrong-token-0123456789', undefined]) {
      const s = createSandbox({ url: `http://127.0.0.1:${port}`, token });
      try {
        await assert.rejects(s.run('print(6*7)'), (e) => {
          assert.ok(e instanceof SandboxConfigError, `${e.name}: ${e.message}`);
          assert.equal(e.status, 401);
          assert.equal(e.errorType, 'AuthenticationError');
          assert.ok(!e.message.includes('wrong-token') && !e.message.includes(TOKEN));
          return true;
        });
      } finally { await s.dispose(); }
    }
  });

  it('the token never reaches the access log', { skip }, async () => {
    await stopServe(srv);
    assert.ok(srv.log.length > 0, 'the access log is not empty');
    assert.ok(!srv.log.includes(TOKEN));
    assert.ok(!srv.log.includes('wrong-token'));
  });
});
