'use strict';
// A real `moat serve` for the client's tests (test/*.test.js): $MOAT_BIN, else this
// checkout's build/moat, with this checkout's runtime/. Not a test file itself.
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const MOAT = process.env.MOAT_BIN || path.resolve(__dirname, '../../../build/moat');
// $MOAT_RUNTIME_DIR as the Python client's tests take it (a binary built elsewhere), else this checkout's
const RUNTIME = process.env.MOAT_RUNTIME_DIR || path.resolve(__dirname, '../../../runtime');
// Why the real-service tests cannot run here (a string for node:test's skip), or false.
const skip = (() => {
  if (!fs.existsSync(MOAT)) return `no moat binary at ${MOAT} (set MOAT_BIN)`;
  const r = spawnSync(MOAT, ['serve', '--help'], { timeout: 10000, encoding: 'utf8' });
  if (r.status !== 0) return `\`${MOAT} serve --help\` fails (no moat serve in this build)`;
  return false;
})();

// GET path from where ({socketPath} or {host, port}): {status, body}.
function get(where, p) {
  return new Promise((resolve, reject) => {
    const req = http.get({ ...where, path: p, timeout: 2000 }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: b }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

// Starts `moat serve ARGS --runtime RUNTIME` and waits until GET /healthz on where answers
// {"status":"ok"}: {child, log (its stderr), exit, exited (a promise of {code, sig})}.
async function startServe(args, where) {
  const child = spawn(MOAT, ['serve', ...args, '--runtime', RUNTIME], { stdio: ['ignore', 'ignore', 'pipe'] });
  const srv = { child, log: '', exit: null };
  child.stderr.on('data', (d) => { srv.log += d; });
  srv.exited = new Promise((r) => child.on('exit', (code, sig) => { srv.exit = { code, sig }; r(srv.exit); }));
  const t0 = Date.now();
  for (;;) {
    if (srv.exit) throw new Error(`moat serve exited (${JSON.stringify(srv.exit)}): ${srv.log.slice(-2000)}`);
    try {
      const h = await get(where, '/healthz');
      if (h.status === 200) { assert.deepEqual(JSON.parse(h.body), { status: 'ok' }); return srv; }
    } catch { /* not up yet */ }
    if (Date.now() - t0 > 20000) {
      child.kill('SIGKILL');
      throw new Error(`moat serve did not answer /healthz within 20 s: ${srv.log.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

// SIGTERM (SIGKILL after 20 s): its exit, {code, sig}; NULL-safe.
async function stopServe(srv) {
  if (!srv || srv.exit) return srv && srv.exit;
  srv.child.kill('SIGTERM');
  const t = setTimeout(() => srv.child.kill('SIGKILL'), 20000);
  const e = await srv.exited;
  clearTimeout(t);
  return e;
}

module.exports = { MOAT, RUNTIME, skip, get, startServe, stopServe };
