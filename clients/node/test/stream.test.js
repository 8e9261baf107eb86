'use strict';
// onStdout/onStderr (docs/SERVE.md, "Streaming"): the output as the program writes it, on
// the exec path (moat exec --stream) and the service path (a real moat serve, Accept:
// application/x-ndjson), the final result as without them. Drives $MOAT_BIN, else
// ../../../build/moat.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createSandbox, SandboxConfigError } = require('..');

const { MOAT, skip, startServe, stopServe } = require('../test-support/serve');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-stream-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The program prints, sleeps, prints bytes that are not UTF-8, then a line on stderr.
const CODE = 'import sys, time\n' +
  'print("first", flush=True)\n' +
  'time.sleep(1.5)\n' +
  'sys.stdout.buffer.write(b"\\xff-bin\\n"); sys.stdout.flush()\n' +
  'sys.stderr.write("err-line\\n")\n' +
  'sys.exit(5)\n';

// Runs CODE with callbacks that note when each chunk came.
async function streamed(sandbox) {
  const t0 = Date.now();
  const seen = { stdout: [], stderr: [], firstAt: -1 };
  const r = await sandbox.run(CODE, {
    language: 'python',
    onStdout: (s) => {
      assert.equal(typeof s, 'string');
      if (seen.firstAt < 0) seen.firstAt = Date.now() - t0;
      seen.stdout.push(s);
    },
    onStderr: (s) => { seen.stderr.push(s); },
  });
  seen.endAt = Date.now() - t0;
  return { r, seen };
}

function checkStreamed({ r, seen }) {
  assert.ok(seen.firstAt >= 0, 'onStdout was called');
  assert.ok(seen.endAt - seen.firstAt >= 1000,
    `the first chunk came at ${seen.firstAt} ms, the result at ${seen.endAt} ms`);
  assert.equal(seen.stdout.join(''), 'first\n\ufffd-bin\n');
  assert.equal(seen.stderr.join(''), 'err-line\n');
  // the result as without callbacks
  assert.equal(r.stdout, 'first\n\ufffd-bin\n');
  assert.equal(r.stderr, 'err-line\n');
  assert.equal(r.exitCode, 5);
  assert.equal(r.timedOut, false);
  assert.equal(r.provider, 'native');
  assert.equal(r.type, undefined);
  assert.equal(r.streamed, undefined);
}

// How the same program's result reads without callbacks (the comparison of "unchanged").
async function plain(sandbox) {
  const r = await sandbox.run(CODE, { language: 'python' });
  assert.equal(r.type, undefined);
  return r;
}

async function refusals(sandbox) {
  await assert.rejects(sandbox.run('print(1)', { onStdout: 'not a function' }),
    (e) => e instanceof SandboxConfigError && /onStdout must be a function/.test(e.message));
  // an error before the run: its class, not a stream
  await assert.rejects(sandbox.run('print(1)', { timeout: 'soon', onStdout: () => {} }),
    (e) => e instanceof SandboxConfigError && /timeout/.test(e.message));
  // a callback that throws ends the run with its error
  const boom = new Error('callback failed');
  await assert.rejects(sandbox.run('import time\nprint(1, flush=True)\ntime.sleep(20)',
    { onStdout: () => { throw boom; } }), (e) => e === boom);
}

describe('exec path: moat exec --stream', () => {
  let s;
  before(() => { s = createSandbox({ provider: 'native', moatPath: MOAT, timeout: 20000 }); });
  after(() => s.dispose());

  it('chunks as they come, the result unchanged', async () => {
    const x = await streamed(s);
    checkStreamed(x);
    const p = await plain(s);
    assert.equal(p.stdout, x.r.stdout);
    assert.equal(p.stderr, x.r.stderr);
  });

  it('refusals', async () => { await refusals(s); });
});


describe('service path: a real moat serve', () => {
  const sock = path.join(tmp, 'moat.sock');
  let srv;
  let s;
  before(async () => {
    if (skip) return;
    srv = await startServe(['--socket', sock, '--pool', '0'], { socketPath: sock });
    s = createSandbox({ provider: 'native', socketPath: sock, timeout: 20000 });
  });
  after(async () => {
    if (s) await s.dispose();
    if (srv) assert.deepEqual(await stopServe(srv), { code: 0, sig: null }, srv.log.slice(-2000));
  });

  it('chunks as they come, the result unchanged', { skip }, async () => {
    const x = await streamed(s);
    checkStreamed(x);
    const p = await plain(s);
    assert.equal(p.stdout, x.r.stdout);
    assert.equal(p.stderr, x.r.stderr);
  });

  it('refusals', { skip }, async () => { await refusals(s); });
});
