'use strict';
// Sessions (docs/SESSIONS.md, "Clients"): sandbox.session(opts) → run/info/close, first
// against a fake service made here (which checks each request and answers canned session
// answers and errors), then against the real `moat serve` ($MOAT_BIN, else
// ../../../build/moat), skipped when that binary has no `serve`.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const {
  createSandbox, SandboxError, SandboxConfigError, SandboxPolicyError, SandboxUnavailableError,
  SessionBusyError, SessionGoneError, SessionNotFoundError,
} = require('..');

const TOKEN = 'tok-0123456789abcdef-secret';
const SID = `ses_${'0123456789abcdef'.repeat(2)}`;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-session-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const STATUS = { id: SID, state: 'idle', runs: 1, cpuTimeMs: 3, memoryBytes: 1 << 20,
  expiresAt: '2026-12-05T05:00:00Z', idleExpiresAt: '2026-12-05T04:10:00Z' };
const STEP = {
  stdout: '', stderr: '', exitCode: 0, timedOut: false, killedBy: null, durationMs: 4, cpuTimeMs: 2,
  stdoutTruncated: false, stderrTruncated: false, warnings: [], provider: 'native',
  error: null, value: '42', display: [], session: STATUS,
};
const CREATED = { id: SID, language: 'python', expiresAt: STATUS.expiresAt,
  idleExpiresAt: STATUS.idleExpiresAt, limits: {}, warnings: [] };
const errBody = (type, message, extra = {}) => ({ error: { type, message, ...extra } });
const json = (res, status, obj) => {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(obj));
};

// A fake moat serve on a unix socket: records every request, answers through `reply`.
function fakeServer(sock) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body;
      try { body = raw ? JSON.parse(raw) : undefined; } catch { body = raw; }
      const rec = { method: req.method, url: req.url, headers: req.headers, body };
      seen.push(rec);
      fake.reply(req, body, res, rec);
    });
  });
  const sockets = new Set();
  srv.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  const fake = {
    seen,
    reply: null,
    listen: () => new Promise((r) => srv.listen(sock, r)),
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); srv.close(() => r()); }),
  };
  return fake;
}

// The fake's usual answers: create, run (value echoes the code), info, delete.
function sessionService(req, body, res) {
  if (req.method === 'POST' && req.url === '/v1/sessions') return json(res, 201, CREATED);
  if (req.method === 'POST' && req.url === `/v1/sessions/${SID}/run`) {
    return json(res, 200, { ...STEP, value: JSON.stringify(body.code) });
  }
  if (req.method === 'GET' && req.url === `/v1/sessions/${SID}`) {
    return json(res, 200, { ...STATUS, language: 'python', createdAt: 'x', reason: null });
  }
  if (req.method === 'DELETE' && req.url === `/v1/sessions/${SID}`) return json(res, 200, { id: SID, state: 'ended' });
  return json(res, 404, errBody('NotFound', 'no such route'));
}

describe('sessions: fake service', () => {
  const sock = path.join(tmp, 'fake.sock');
  const fake = fakeServer(sock);
  before(() => fake.listen());
  after(() => fake.close());

  it('rich results read by E2B\'s names, Jupyter\'s error (issue 46)', async () => {
    const RICH = { ...STEP, executionCount: 3, resultsTruncated: false, interrupted: false,
      error: { type: 'ValueError', message: 'm', name: 'ValueError', value: 'm',
        traceback: ['Traceback (most recent call last):', 'ValueError: m'] },
      results: [{ isMain: false, data: { 'text/plain': '<Figure>', 'image/png': 'iVBOR' } },
        { isMain: true, data: { 'text/plain': '42', 'text/html': '<b>42</b>', 'application/json': { a: 1 } } }] };
    fake.reply = (req, body, res) => (req.method === 'POST' && req.url === `/v1/sessions/${SID}/run`
      ? json(res, 200, RICH) : sessionService(req, body, res));
    const sb = createSandbox({ socketPath: sock, token: TOKEN });
    try {
      const s = await sb.session({ language: 'python' });
      const r = await s.run('x');
      const [fig, main] = r.results;
      assert.equal(fig.png, 'iVBOR');
      assert.equal(fig.text, '<Figure>');
      assert.equal(fig.html, undefined);
      assert.equal(fig.isMainResult, false);
      assert.deepEqual(fig.formats(), ['text', 'png']);
      assert.equal(r.mainResult, main);
      assert.equal(main.html, '<b>42</b>');
      assert.deepEqual(main.json, { a: 1 });
      assert.deepEqual(r.error.traceback, RICH.error.traceback);
      assert.equal(r.executionCount, 3);
      // the JSON is the service's as it was: the getters are not enumerable
      assert.deepEqual(JSON.parse(JSON.stringify(r)).results, RICH.results);
      await s.close();
    } finally {
      await sb.dispose();
    }
  });

  it('create, run, info, close: the requests and the answers', async () => {
    fake.reply = sessionService;
    const sb = createSandbox({ socketPath: sock, token: TOKEN, memoryMb: 256, timeout: 7000 });
    try {
      const n = fake.seen.length;
      const s = await sb.session({ language: 'python', idleTimeoutMs: 60000, kvEnabled: true, sandboxId: 'a' });
      assert.equal(s.id, SID);
      assert.equal(s.language, 'python');
      assert.equal(s.expiresAt, CREATED.expiresAt);
      let q = fake.seen[n];
      assert.equal(q.method, 'POST');
      assert.equal(q.url, '/v1/sessions');
      assert.equal(q.headers.authorization, `Bearer ${TOKEN}`);
      // the config's limits folded in; its timeout is a step's, not the session's
      assert.deepEqual(q.body, { language: 'python', idleTimeoutMs: 60000, kvEnabled: true, sandboxId: 'a',
        memoryMb: 256 });

      const r = await s.run('x = 41\nx + 1', { stdin: 'in', files: { 'a.txt': 'b' } });
      q = fake.seen[n + 1];
      assert.equal(q.method, 'POST');
      assert.equal(q.url, `/v1/sessions/${SID}/run`);
      assert.equal(q.headers.accept, 'application/json');
      assert.deepEqual(q.body, { code: 'x = 41\nx + 1', stdin: 'in', files: { 'a.txt': 'b' }, timeout: 7000 });
      assert.deepEqual(r, { ...STEP, value: JSON.stringify('x = 41\nx + 1') });

      await s.run('1', { timeout: 500 });
      assert.equal(fake.seen[n + 2].body.timeout, 500);

      const info = await s.info();
      q = fake.seen[n + 3];
      assert.equal(q.method, 'GET');
      assert.equal(q.url, `/v1/sessions/${SID}`);
      assert.equal(q.body, undefined);
      assert.equal(info.state, 'idle');
      assert.equal(info.runs, 1);

      await s.close();
      q = fake.seen[n + 4];
      assert.equal(q.method, 'DELETE');
      assert.equal(q.url, `/v1/sessions/${SID}`);
      assert.equal(q.headers.authorization, `Bearer ${TOKEN}`);
      // idempotent: no second DELETE, and concurrent closes share one
      await Promise.all([s.close(), s.close()]);
      assert.equal(fake.seen.length, n + 5);
      // run after close: SessionGoneError without a request
      await assert.rejects(s.run('1'), (e) => {
        assert.ok(e instanceof SessionGoneError && e instanceof SandboxError, e.name);
        assert.equal(e.sessionId, SID);
        assert.match(e.reason, /closed by this client/);
        return true;
      });
      assert.equal(fake.seen.length, n + 5);
    } finally { await sb.dispose(); }
  });

  it('a step that raised: error, value and display are the result, not a rejection', async () => {
    const raised = { ...STEP, exitCode: 1, stderr: 'Traceback...\nZeroDivisionError: division by zero\n',
      error: { type: 'ZeroDivisionError', message: 'division by zero' }, value: null,
      display: [{ type: 'image/png', data: 'iVBORw0KGgo=' }] };
    fake.reply = (req, body, res) => (req.url.endsWith('/run') ? json(res, 200, raised) : sessionService(req, body, res));
    const sb = createSandbox({ socketPath: sock });
    try {
      const s = await sb.session({ language: 'python' });
      const r = await s.run('1/0');
      assert.deepEqual(r.error, raised.error);
      assert.equal(r.exitCode, 1);
      assert.deepEqual(r.display, raised.display);
      assert.deepEqual(r.session, STATUS);
    } finally { await sb.dispose(); }
  });

  const mapped = [
    [409, 'SessionBusy', SessionBusyError],
    [410, 'SessionGone', SessionGoneError],
    [404, 'SessionNotFound', SessionNotFoundError],
    // by status alone on a session's route (no type)
    [409, undefined, SessionBusyError],
    [410, undefined, SessionGoneError],
    [404, undefined, SessionNotFoundError],
  ];
  for (const [status, type, Cls] of mapped) {
    it(`HTTP ${status} ${type || '(no type)'} on run and info → ${Cls.name}`, async () => {
      const why = 'the session was killed: memory limit exceeded (256 MiB)';
      fake.reply = (req, body, res) => {
        if (req.url === '/v1/sessions') return json(res, 201, CREATED);
        if (req.method === 'DELETE') return sessionService(req, body, res);
        if (!type) { res.writeHead(status); res.end(); return undefined; }
        return json(res, status, errBody(type, why));
      };
      const sb = createSandbox({ socketPath: sock });
      try {
        const s = await sb.session();
        for (const p of [s.run('1'), s.info()]) {
          await assert.rejects(p, (e) => {
            assert.ok(e instanceof Cls, `${e.name}: ${e.message}`);
            assert.ok(e instanceof SandboxError);
            assert.equal(e.status, status);
            assert.equal(e.errorType, type);
            assert.equal(e.sessionId, SID);
            assert.ok(!e.message.includes(SID), 'the id is not in the message');
            if (type) assert.equal(e.message, why);
            if (Cls === SessionGoneError && type) assert.equal(e.reason, why);
            return true;
          });
        }
      } finally { await sb.dispose(); }
    });
  }

  it('a 404 NotFound on POST /v1/sessions: a moat serve without sessions → SandboxConfigError', async () => {
    fake.reply = (req, body, res) => json(res, 404, errBody('NotFound', 'no such route'));
    const sb = createSandbox({ socketPath: sock });
    try {
      await assert.rejects(sb.session({ language: 'python' }), (e) => {
        assert.ok(e instanceof SandboxConfigError, e.name);
        assert.ok(!(e instanceof SessionNotFoundError));
        assert.match(e.message, /POST \/v1\/sessions .*sessions on/);
        return true;
      });
    } finally { await sb.dispose(); }
  });

  it('503 ServerBusy on create → SandboxUnavailableError with retryAfterMs; 400 → SandboxConfigError', async () => {
    const sb = createSandbox({ socketPath: sock });
    try {
      fake.reply = (req, body, res) => {
        res.writeHead(503, { 'Content-Type': 'application/json', 'Retry-After': '2' });
        res.end(JSON.stringify(errBody('ServerBusy', 'max sessions')));
      };
      await assert.rejects(sb.session(), (e) => e instanceof SandboxUnavailableError && e.retryAfterMs === 2000);
      fake.reply = (req, body, res) => json(res, 400, errBody('SandboxConfigError', 'sessions take Python or JavaScript'));
      await assert.rejects(sb.session(), (e) => e instanceof SandboxConfigError && e.status === 400);
    } finally { await sb.dispose(); }
  });

  it('an answer without a session id → SandboxUnavailableError', async () => {
    const sb = createSandbox({ socketPath: sock });
    try {
      for (const id of [undefined, 42, '../../v1/run', 'a/b', '']) {
        fake.reply = (req, body, res) => json(res, 201, { ...CREATED, id });
        await assert.rejects(sb.session(), (e) => e instanceof SandboxUnavailableError && /session id/.test(e.message));
      }
    } finally { await sb.dispose(); }
  });

  it('close: a session the service already ended (410, 404) is closed; an unreachable one can be retried', async () => {
    const sb = createSandbox({ socketPath: sock });
    try {
      for (const [status, type] of [[410, 'SessionGone'], [404, 'SessionNotFound']]) {
        fake.reply = (req, body, res) => (req.method === 'DELETE' ? json(res, status, errBody(type, 'gone'))
          : sessionService(req, body, res));
        const s = await sb.session();
        await s.close();
        await s.close();
      }
      fake.reply = (req, body, res) => (req.method === 'DELETE' ? json(res, 500, errBody('Internal', 'boom'))
        : sessionService(req, body, res));
      const s = await sb.session();
      await assert.rejects(s.close(), SandboxUnavailableError);
      const n = fake.seen.length;
      fake.reply = sessionService;
      await s.close();
      assert.equal(fake.seen.length, n + 1);
      assert.equal(fake.seen[n].method, 'DELETE');
    } finally { await sb.dispose(); }
  });

  it('dispose closes the sessions opened through the sandbox', async () => {
    fake.reply = sessionService;
    const sb = createSandbox({ socketPath: sock });
    const s = await sb.session();
    const n = fake.seen.length;
    await sb.dispose();
    assert.equal(fake.seen.length, n + 1);
    assert.equal(fake.seen[n].method, 'DELETE');
    await assert.rejects(s.run('1'), SessionGoneError);
    await assert.rejects(sb.session(), /disposed/);
  });

  it('streaming: onStdout/onStderr get the chunks, the result carries the whole text and the step\'s fields', async () => {
    fake.reply = (req, body, res) => {
      if (!req.url.endsWith('/run')) return sessionService(req, body, res);
      assert.equal(req.headers.accept, 'application/x-ndjson');
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"type":"stdout","data":"hel"}\n');
      res.write('{"type":"stderr","data":"warn\\n"}\n');
      res.write(`${JSON.stringify({ type: 'stdout', data: Buffer.from('lo\n\xff', 'latin1').toString('base64'), encoding: 'base64' })}\n`);
      res.end(`${JSON.stringify({ ...STEP, type: 'result', streamed: true, value: "'v'",
        error: { type: 'ValueError', message: 'x' } })}\n`);
      return undefined;
    };
    const sb = createSandbox({ socketPath: sock });
    try {
      const s = await sb.session();
      const out = [];
      const err = [];
      const r = await s.run('print("hello")', { onStdout: (t) => out.push(t), onStderr: (t) => err.push(t) });
      assert.deepEqual(out, ['hel', 'lo\n\ufffd']);
      assert.deepEqual(err, ['warn\n']);
      assert.equal(r.stdout, 'hello\n\ufffd');
      assert.equal(r.stderr, 'warn\n');
      assert.equal(r.value, "'v'");
      assert.deepEqual(r.error, { type: 'ValueError', message: 'x' });
      assert.deepEqual(r.session, STATUS);
      assert.equal(r.type, undefined);
      assert.equal(r.streamed, undefined);
    } finally { await sb.dispose(); }
  });

  it('bad arguments are refused before any request', async () => {
    fake.reply = sessionService;
    const sb = createSandbox({ socketPath: sock });
    try {
      const n = fake.seen.length;
      const refused = [
        [{ language: 'typescript' }, SandboxConfigError, /python or javascript/],
        [{ language: 'shell' }, SandboxConfigError, /python or javascript/],
        [{ language: 'cobol' }, SandboxPolicyError, /unsupported language/],
        [{ idleTimeoutMs: -1 }, SandboxConfigError, /idleTimeoutMs/],
        [{ maxLifetimeMs: 'long' }, SandboxConfigError, /maxLifetimeMs/],
        [{ idleTimeout: 5 }, SandboxConfigError, /unknown option "idleTimeout"/],
        ['python', SandboxConfigError, /opts must be an object/],
      ];
      for (const [opts, Cls, re] of refused) {
        await assert.rejects(sb.session(opts), (e) => e instanceof Cls && re.test(e.message));
      }
      assert.equal(fake.seen.length, n);
      const s = await sb.session();
      const m = fake.seen.length;
      const badRuns = [
        [42, undefined, /code must be a string/],
        ['1', 'opts', /opts must be an object/],
        ['1', { memoryMb: 64 }, /unknown option "memoryMb"/],
        ['1', { timeout: 0 }, /timeout/],
        ['1', { timeout: 'soon' }, /timeout/],
        ['1', { stdin: 5 }, /stdin/],
        ['1', { files: ['a'] }, /files/],
        ['1', { onStdout: 'no' }, /onStdout must be a function/],
      ];
      for (const [code, opts, re] of badRuns) {
        await assert.rejects(s.run(code, opts), (e) => e instanceof SandboxConfigError && re.test(e.message));
      }
      assert.equal(fake.seen.length, m);
    } finally { await sb.dispose(); }
  });
});

describe('sessions need a service', () => {
  it('createSandbox without url/socketPath: session() → SandboxConfigError naming moat serve', async () => {
    for (const cfg of [{}, { provider: 'native', moatPath: '/nonexistent' }, { provider: 'docker' }]) {
      const sb = createSandbox(cfg);
      try {
        await assert.rejects(sb.session({ language: 'python' }), (e) => {
          assert.ok(e instanceof SandboxConfigError, e.name);
          assert.match(e.message, /sessions need a moat serve.*url or socketPath/);
          return true;
        });
      } finally { await sb.dispose(); }
    }
  });
});

// ---- the real moat serve ---------------------------------------------------------------

const { skip, startServe, stopServe } = require('../test-support/serve');


describe('sessions: a real moat serve on a unix socket', () => {
  const sock = path.join(tmp, 'moat.sock');
  let srv;
  let sb;
  before(async () => {
    if (skip) return;
    srv = await startServe(['--socket', sock, '--pool', '0'], { socketPath: sock });
    sb = createSandbox({ socketPath: sock, timeout: 20000 });
  });
  after(async () => {
    if (sb) await sb.dispose();
    if (srv) assert.deepEqual(await stopServe(srv), { code: 0, sig: null }, srv.log.slice(-2000));
  });

  it('python: state kept across steps, value, error, info, close then run and info', { skip }, async () => {
    const s = await sb.session({ language: 'python' });
    assert.match(s.id, /^ses_[a-z0-9-]{1,32}_[0-9a-f]{32}$/);
    let r = await s.run('import os\nx = 41\nopen("/sandbox/f.txt", "w").write("kept")\nprint("set")');
    assert.equal(r.stdout, 'set\n');
    assert.equal(r.exitCode, 0);
    assert.equal(r.error, null);
    r = await s.run('x += 1\nx');
    assert.equal(r.value, '42');
    assert.equal(r.session.state, 'idle');
    assert.equal(r.session.runs, 2);
    r = await s.run('print(open("/sandbox/f.txt").read(), x)');
    assert.equal(r.stdout, 'kept 42\n');
    r = await s.run('1/0');
    assert.equal(r.error.type, 'ZeroDivisionError');
    assert.equal(r.exitCode, 1);
    assert.match(r.stderr, /ZeroDivisionError/);
    r = await s.run('x', { stdin: 'ignored' });
    assert.equal(r.value, '42', 'an exception does not lose the state');
    const info = await s.info();
    assert.equal(info.id, s.id);
    assert.equal(info.state, 'idle');
    assert.equal(info.runs, 5);
    await s.close();
    await s.close();
    await assert.rejects(s.run('x'), SessionGoneError); // refused here, no request
    // the service still describes it: ended (until its idle timeout, then 404)
    const after = await s.info();
    assert.equal(after.state, 'ended');
    assert.equal(after.runs, 5);
  });

  it('javascript: module-level state kept', { skip }, async () => {
    const s = await sb.session({ language: 'javascript' });
    try {
      await s.run('var n = 40; function inc() { return ++n; }');
      const r = await s.run('inc(); inc()');
      assert.equal(r.value, '42');
    } finally { await s.close(); }
  });

  it('a run while another runs → SessionBusyError (409)', { skip }, async () => {
    const s = await sb.session({ language: 'python' });
    try {
      const slow = s.run('import time\ntime.sleep(3)\nprint("slept")');
      await new Promise((r) => setTimeout(r, 800));
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SessionBusyError, `${e.name}: ${e.message}`);
        assert.equal(e.status, 409);
        return true;
      });
      assert.equal((await slow).stdout, 'slept\n');
    } finally { await s.close(); }
  });

  it('os._exit ends the session: later calls → SessionGoneError (410) with its reason', { skip }, async () => {
    const s = await sb.session({ language: 'python' });
    try {
      const r = await s.run('import os\nos._exit(3)');
      assert.equal(r.session.state, 'ended');
      await assert.rejects(s.run('print(1)'), (e) => {
        assert.ok(e instanceof SessionGoneError, `${e.name}: ${e.message}`);
        assert.equal(e.status, 410);
        assert.ok(e.reason.length > 0);
        return true;
      });
    } finally { await s.close(); }
  });

  it('a step that times out is interrupted; one that ignores it kills the session: timedOut, then SessionGoneError saying why', { skip }, async () => {
    const s = await sb.session({ language: 'python' });
    try {
      await s.run('x = 1');
      // interrupted (issue 46): KeyboardInterrupt, the state kept
      const i = await s.run('while True: pass', { timeout: 500 });
      assert.equal(i.timedOut, true);
      assert.equal(i.killedBy, null);
      assert.equal(i.session.state, 'idle');
      assert.equal(i.error.name, 'KeyboardInterrupt');
      assert.equal((await s.run('x + 1')).mainResult.text, '2');
      const r = await s.run('import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass', { timeout: 500 });
      assert.equal(r.timedOut, true);
      assert.equal(r.killedBy, 'timeout');
      assert.equal(r.session.state, 'killed');
      await assert.rejects(s.run('x'), (e) => {
        assert.ok(e instanceof SessionGoneError, `${e.name}: ${e.message}`);
        assert.match(e.reason, /time/);
        return true;
      });
      assert.equal((await s.info()).state, 'killed');
    } finally { await s.close(); }
  });

  it('streaming a step: chunks as they come, value in the result', { skip }, async () => {
    const s = await sb.session({ language: 'python' });
    try {
      const t0 = Date.now();
      let firstAt = -1;
      const out = [];
      const r = await s.run('import time\nprint("one", flush=True)\ntime.sleep(1.5)\nprint("two")\n6*7',
        { onStdout: (t) => { if (firstAt < 0) firstAt = Date.now() - t0; out.push(t); } });
      assert.equal(out.join(''), 'one\ntwo\n');
      assert.equal(r.stdout, 'one\ntwo\n');
      assert.equal(r.value, '42');
      assert.ok(Date.now() - t0 - firstAt >= 1000, `first chunk at ${firstAt} ms`);
    } finally { await s.close(); }
  });
});
