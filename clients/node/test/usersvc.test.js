'use strict';
// The user's service (moat.socket, docs/SERVE.md "Socket activation"): a sandbox without
// url/socketPath tries $MOAT_SOCKET (else $XDG_RUNTIME_DIR/moat.sock) first and falls back
// to `moat exec` with a warning when it does not answer, refuses the request or is busy;
// MOAT_SERVICE=off and { service: false } opt out. A real `moat serve --socket` made here.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { spawnSync } = require('node:child_process');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { createSandbox } = require('..');
const { skip, startServe, stopServe } = require('../test-support/serve');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-usersvc-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// process.env with vars set (undefined: removed) while fn runs
async function withEnv(vars, fn) {
  const old = {};
  for (const k of Object.keys(vars)) {
    old[k] = process.env[k];
    if (vars[k] === undefined) delete process.env[k]; else process.env[k] = vars[k];
  }
  try {
    return await fn();
  } finally {
    for (const k of Object.keys(old)) {
      if (old[k] === undefined) delete process.env[k]; else process.env[k] = old[k];
    }
  }
}

async function runOnce(cfg, code = 'print(1)', opts = {}) {
  const s = createSandbox(cfg);
  try {
    return await s.run(code, { language: 'python', ...opts });
  } finally {
    await s.dispose();
  }
}

const serviceWarnings = (r) => (r.warnings || []).filter((w) => w.includes('user service'));

describe('the user service', () => {
  const sock = path.join(tmp, 'moat.sock');
  let srv;
  before(async () => {
    if (skip) return;
    srv = await startServe(['--socket', sock, '--pool', '1'], { socketPath: sock });
    // until the pool is warm (a request before it is ready runs cold in the service)
    const s = createSandbox({ socketPath: sock });
    for (const end = Date.now() + 60000; Date.now() < end;) {
      if ((await s.run('print(1)', { language: 'python' })).pool === true) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    await s.dispose();
  });
  after(async () => { await stopServe(srv); });

  it('answers from the service (pool: true)', { skip }, async () => {
    const r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: undefined }, () => runOnce({}));
    assert.equal(r.stdout, '1\n');
    assert.equal(r.pool, true, JSON.stringify(r));
    assert.deepEqual(serviceWarnings(r), []);
  });

  it('finds $XDG_RUNTIME_DIR/moat.sock', { skip }, async () => {
    const r = await withEnv({ MOAT_SOCKET: undefined, XDG_RUNTIME_DIR: tmp, MOAT_SERVICE: undefined },
      () => runOnce({}));
    assert.equal(r.pool, true, JSON.stringify(r));
  });

  it('over the service limit: moat exec, saying so', { skip }, async () => {
    // the service's max memoryMb is 1024 (docs/SERVE.md): 403, then moat exec runs it
    const r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: undefined },
      () => runOnce({}, 'print(1)', { memoryMb: 1536 }));
    assert.equal(r.stdout, '1\n');
    assert.equal(r.pool, undefined, JSON.stringify(r));
    const w = serviceWarnings(r);
    assert.equal(w.length, 1, JSON.stringify(r));
    assert.match(w[0], /refused the request/);
    assert.match(w[0], /memoryMb/);
  });

  it("the run's own failure is not run again", { skip }, async () => {
    const r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: undefined },
      () => runOnce({}, "import sys; print('once'); sys.exit(3)"));
    assert.deepEqual([r.exitCode, r.stdout, r.pool], [3, 'once\n', true]);
  });

  it('MOAT_SERVICE=off and { service: false } opt out', { skip }, async () => {
    let r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: 'off' }, () => runOnce({}));
    assert.equal(r.stdout, '1\n');
    assert.equal(r.pool, undefined, JSON.stringify(r));
    assert.deepEqual(serviceWarnings(r), []);
    r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: undefined }, () => runOnce({ service: false }));
    assert.equal(r.pool, undefined, JSON.stringify(r));
    assert.deepEqual(serviceWarnings(r), []);
  });

  it("another user's socket: moat exec, saying so", { skip: skip || (process.getuid() !== 0 &&
      'only root gives a socket to another user') }, async () => {
    const p = path.join(tmp, 'other.sock');
    let accepted = 0;
    const l = net.createServer((c) => { accepted++; c.destroy(); });
    await new Promise((r) => l.listen(p, r));
    fs.chownSync(p, 65534, 65534);
    try {
      const r = await withEnv({ MOAT_SOCKET: p, MOAT_SERVICE: undefined }, () => runOnce({}));
      assert.equal(r.stdout, '1\n');
      assert.equal(r.pool, undefined, JSON.stringify(r));
      const w = serviceWarnings(r);
      assert.equal(w.length, 1, JSON.stringify(r));
      assert.match(w[0], /belongs to uid 65534/);
      assert.equal(accepted, 0, 'the client connected to it');
    } finally {
      await new Promise((r) => l.close(r));
    }
  });

  it('a config key only moat exec reads: moat exec, saying so', { skip }, async () => {
    const r = await withEnv({ MOAT_SOCKET: sock, MOAT_SERVICE: undefined },
      () => runOnce({ allowedHosts: ['example.com'] }));
    assert.equal(r.pool, undefined, JSON.stringify(r));
    const w = serviceWarnings(r);
    assert.equal(w.length, 1, JSON.stringify(r));
    assert.match(w[0], /allowedHosts/);
  });
});

describe('no user service', () => {
  it('no socket: moat exec, saying so', { skip }, async () => {
    const p = path.join(tmp, 'none.sock');
    const r = await withEnv({ MOAT_SOCKET: p, MOAT_SERVICE: undefined }, () => runOnce({}));
    assert.equal(r.stdout, '1\n');
    assert.equal(r.pool, undefined);
    const w = serviceWarnings(r);
    assert.equal(w.length, 1, JSON.stringify(r));
    assert.match(w[0], /did not answer/);
    assert.ok(w[0].includes(p));
  });

  it('a socket nobody listens on: moat exec, saying so', { skip }, async () => {
    // a socket bound by a process that then exited: the file stays, connect is refused
    const p = path.join(tmp, 'dead.sock');
    const b = spawnSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', p]);
    assert.equal(b.status, 0, String(b.stderr));
    const r = await withEnv({ MOAT_SOCKET: p, MOAT_SERVICE: undefined }, () => runOnce({}));
    assert.equal(r.stdout, '1\n');
    assert.equal(r.pool, undefined);
    const w = serviceWarnings(r);
    assert.equal(w.length, 1, JSON.stringify(r));
    assert.match(w[0], /did not answer/);
  });

  it('no XDG_RUNTIME_DIR: moat exec, saying so', { skip }, async () => {
    const r = await withEnv({ MOAT_SOCKET: undefined, XDG_RUNTIME_DIR: undefined, MOAT_SERVICE: undefined },
      () => runOnce({}));
    assert.equal(r.stdout, '1\n');
    assert.ok((r.warnings || []).some((w) => w.includes('XDG_RUNTIME_DIR')), JSON.stringify(r));
  });
});
