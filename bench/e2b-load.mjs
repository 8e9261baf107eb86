// E2B's SDK against moat serve's /e2b (docs/E2B.md), spaced, one at a time: Sandbox.create()
// until the SDK has its sandbox, commands.run('true') (the SDK's bash -l -c), files.write +
// read of 1 KiB; p50/p90 of each. Starts its own moat serve on 127.0.0.1 with a token (the
// SDK speaks TCP only). Skipped (exit 0) without the SDK (npm ci in tests/e2b). Also a second
// commands.run('true') on the same sandbox back to back and a third 100 ms later, bash -l -c
// true's own time inside it (bash's time),
// and the SDK's own floor: commands.run('true') against a fake envd that answers at once. Then, with
// @e2b/code-interpreter, N more rounds: its Sandbox.create(), the first runCode('1+1') (the
// context's interpreter started), a second one right after it and a third 100 ms later (warm).
// --internet: Sandbox.create({allowInternetAccess: true}) (the service allows open egress);
// --sandbox-pool N: live sandboxes made ahead of each shape (--sandbox-pool and
// serve.sandboxes.networkPool; default 1; 0: every create cold). Prints how many creates the
// pool answered (/metrics).
// Usage: node bench/e2b-load.mjs --moat BIN --runtime DIR [--n 30] [--internet] [--sandbox-pool N]
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const here = path.dirname(new URL(import.meta.url).pathname);
const arg = (k, d) => { const i = process.argv.indexOf(`--${k}`); return i > 0 ? process.argv[i + 1] : d; };
const MOAT = arg('moat', path.join(here, '../build/moat'));
const RUNTIME = arg('runtime', path.join(here, '../runtime'));
const N = Number(arg('n', '30'));
const INTERNET = process.argv.includes('--internet');
const POOL = Number(arg('sandbox-pool', '1'));
let e2b;
try {
  e2b = createRequire(path.join(here, '../tests/e2b/package.json'))('e2b');
} catch (e) {
  console.log(`e2b: skipped (the SDK is not installed: npm ci in tests/e2b): ${e.code || e.message}`);
  process.exit(0);
}
const port = await new Promise((r) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => r(p)); }); });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-e2b-bench-'));
const key = `e2b_${crypto.randomBytes(20).toString('hex')}`;
fs.writeFileSync(path.join(tmp, 'token'), key, { mode: 0o600 });
fs.writeFileSync(path.join(tmp, 'config.json'), JSON.stringify({ serve: {
  allowOpenNetwork: INTERNET, sandboxes: { networkPool: INTERNET ? POOL : 0 } } }));
const srv = spawn(MOAT, ['serve', '--listen', `127.0.0.1:${port}`, '--token-file', path.join(tmp, 'token'),
  '--no-kv', '--runtime', RUNTIME, '--sandbox-pool', String(POOL), '--config', path.join(tmp, 'config.json')],
{ stdio: ['ignore', 'ignore', 'ignore'] });
process.env.E2B_API_URL = `http://127.0.0.1:${port}/e2b`;
process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${port}/e2b/envd`;
process.env.E2B_API_KEY = key;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
for (let i = 0; ; i++) {
  try { await fetch(`http://127.0.0.1:${port}/healthz`); break; } catch { if (i > 200) throw new Error('moat serve did not start'); await sleep(50); }
}
const pct = (a, p) => a.slice().sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(a.length * p))].toFixed(1);
const t = { create: [], run: [], 'run again, back to back': [], 'run again, spaced': [], 'bash -l -c true inside': [], files: [] };
const data = 'x'.repeat(1024);
try {
  for (let i = 0; i < N; i++) {
    let t0 = performance.now();
    const sbx = await e2b.Sandbox.create(INTERNET ? { allowInternetAccess: true } : {});
    t.create.push(performance.now() - t0);
    t0 = performance.now();
    await sbx.commands.run('true');
    t.run.push(performance.now() - t0);
    t0 = performance.now();
    await sbx.commands.run('true');
    t['run again, back to back'].push(performance.now() - t0);
    await sleep(100);
    t0 = performance.now();
    await sbx.commands.run('true');
    t['run again, spaced'].push(performance.now() - t0);
    // bash -l -c true's own time inside the sandbox (bash's time, ms): the command's share
    const own = await sbx.commands.run("TIMEFORMAT=%3R; time bash -l -c true");
    t['bash -l -c true inside'].push(parseFloat(own.stderr.trim()) * 1000);
    t0 = performance.now();
    await sbx.files.write('b.txt', data);
    if ((await sbx.files.read('b.txt')) !== data) throw new Error('read back differs');
    t.files.push(performance.now() - t0);
    await sbx.kill();
    await sleep(100); // spaced
  }
  // The SDK's own floor: commands.run('true') against a fake envd in another process that
  // answers Process/Start at once with a canned start and end (nothing runs): what the SDK
  // costs by itself on this machine, below which no server can answer it.
  const fake = spawn(process.execPath, ['-e', `
    const http = require('node:http');
    const fr = (f, s) => { const m = Buffer.from(s); const b = Buffer.alloc(5); b[0] = f; b.writeUInt32BE(m.length, 1); return Buffer.concat([b, m]); };
    const srv = http.createServer((q, r) => { q.resume(); q.on('end', () => {
      r.writeHead(200, { 'Content-Type': 'application/connect+json' });
      r.write(fr(0, '{"event":{"start":{"pid":3}}}'));
      r.end(Buffer.concat([fr(0, '{"event":{"end":{"exitCode":0,"exited":true,"status":"exit status 0"}}}'), fr(2, '{}')]));
    }); });
    srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));`], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const fport = await new Promise((r) => fake.stdout.once('data', (d) => r(Number(String(d).trim()))));
    const floor = new e2b.Sandbox({ sandboxId: 'sbx_floor', envdVersion: '0.6.2', envdAccessToken: 't',
      sandboxUrl: `http://127.0.0.1:${fport}`, apiKey: key });
    await floor.commands.run('true');
    t["run: the SDK alone (an instant fake envd)"] = [];
    for (let i = 0; i < N; i++) {
      await sleep(100);
      const t0 = performance.now();
      await floor.commands.run('true');
      t["run: the SDK alone (an instant fake envd)"].push(performance.now() - t0);
    }
  } finally {
    fake.kill('SIGTERM');
  }
  let ci = null;
  try {
    ci = createRequire(path.join(here, '../tests/e2b/package.json'))('@e2b/code-interpreter');
  } catch (e) {
    console.log(`e2b code interpreter: skipped (not installed): ${e.code || e.message}`);
  }
  for (let i = 0; ci && i < N; i++) {
    let t0 = performance.now();
    const sbx = await ci.Sandbox.create(INTERNET ? { allowInternetAccess: true } : {});
    t['ci create'] = [...(t['ci create'] || []), performance.now() - t0];
    for (const k of ['runCode first', 'runCode, back to back', 'runCode, spaced']) {
      if (k === 'runCode, spaced') await sleep(100);
      t0 = performance.now();
      const r = await sbx.runCode('1+1');
      if (r.text !== '2') throw new Error(`runCode('1+1'): ${JSON.stringify(r)}`);
      t[k] = [...(t[k] || []), performance.now() - t0];
    }
    await sbx.kill();
    await sleep(100); // spaced
  }
  const m = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { Authorization: `Bearer ${key}` } })).text();
  const shape = INTERNET ? 'network' : 'default';
  const val = (n) => (m.match(new RegExp(`^moat_serve_sandbox_pool_${n}\\{shape="${shape}"\\} (\\d+)$`, 'm')) || [])[1];
  console.log(`e2b (${INTERNET ? 'allowInternetAccess: true' : 'no internet access'}, --sandbox-pool ${POOL}): ` +
    `${val('used_total')} of ${ci ? 2 * N : N} creates (both SDKs') from the pool, ${val('cold_total')} found it empty`);
  for (const [k, v] of Object.entries(t)) console.log(`e2b ${k}: p50 ${pct(v, 0.5)} ms, p90 ${pct(v, 0.9)} ms (n=${v.length})`);
} finally {
  srv.kill('SIGTERM');
  fs.rmSync(tmp, { recursive: true, force: true });
}
