// A session step's latency (issue 36, docs/SESSIONS.md) next to a cold run and a warm
// /v1/run of the same code, through moat serve on unix sockets: ROUNDS interleaved rounds
// (session step, cold run, warm run, one each per round, so that all three see the same
// host); median and spread (p10-p90, ms) and the step's ratio to the cold run (target:
// <= 0.25). Figures, not a test.
//
//   node bench/session-load.mjs --socket POOLED.sock --cold-socket COLD.sock
// Environment: SESSION_ROUNDS (60), SESSION_CODE (print(1)), SESSION_LANGUAGE (python).
import http from 'node:http';

const args = process.argv.slice(2);
const arg = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const SOCKET = arg('--socket');
const COLD = arg('--cold-socket');
const ROUNDS = Number(process.env.SESSION_ROUNDS || 60);
const CODE = process.env.SESSION_CODE || 'print(1)';
const LANGUAGE = process.env.SESSION_LANGUAGE || 'python';
if (!SOCKET || !COLD) {
  console.error('usage: node bench/session-load.mjs --socket POOLED.sock --cold-socket COLD.sock');
  process.exit(2);
}

function call(socketPath, method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : '';
    const t0 = process.hrtime.bigint();
    const req = http.request({ socketPath, method, path, headers: {
      'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        const text = Buffer.concat(chunks).toString();
        let json = null;
        try { json = JSON.parse(text); } catch { /* reported below */ }
        if (res.statusCode >= 300 || !json) reject(new Error(`${method} ${path}: ${res.statusCode} ${text.slice(0, 300)}`));
        else resolve({ ms, json });
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

async function waitHealthy(socketPath) {
  const t0 = Date.now();
  for (;;) {
    try { await new Promise((ok, no) => http.get({ socketPath, path: '/healthz' }, (r) => { r.resume(); r.statusCode === 200 ? ok() : no(); }).on('error', no)); return; }
    catch { if (Date.now() - t0 > 20000) throw new Error(`no /healthz on ${socketPath}`); await new Promise((r) => setTimeout(r, 100)); }
  }
}

const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))]; };
const fmt = (x) => x.toFixed(1);

async function main() {
  await waitHealthy(SOCKET);
  await waitHealthy(COLD);
  const made = await call(SOCKET, 'POST', '/v1/sessions', { language: LANGUAGE });
  const id = made.json.id;
  const run = { language: LANGUAGE, code: CODE };
  const want = (r, what) => { if (r.json.exitCode !== 0) throw new Error(`${what}: ${JSON.stringify(r.json).slice(0, 300)}`); };
  // warm-up: one of each, not timed
  want(await call(SOCKET, 'POST', `/v1/sessions/${id}/run`, { code: CODE }), 'session step');
  want(await call(COLD, 'POST', '/v1/run', run), 'cold run');
  want(await call(SOCKET, 'POST', '/v1/run', run), 'warm run');
  const t = { step: [], cold: [], warm: [] };
  for (let i = 0; i < ROUNDS; i++) {
    const order = [['step', SOCKET, `/v1/sessions/${id}/run`, { code: CODE }],
                   ['cold', COLD, '/v1/run', run], ['warm', SOCKET, '/v1/run', run]];
    for (const [k, sock, path, body] of order) {
      const r = await call(sock, 'POST', path, body);
      want(r, k);
      t[k].push(r.ms);
    }
  }
  await call(SOCKET, 'DELETE', `/v1/sessions/${id}`);
  console.log(`\n### A session step against a cold and a warm run (${LANGUAGE}, \`${CODE}\`, ${ROUNDS} interleaved rounds, 1 client)\n`);
  console.log('| what | median ms | p10 ms | p90 ms | / cold (median) |');
  console.log('|---|---:|---:|---:|---:|');
  const cold = q(t.cold, 0.5);
  for (const [k, name] of [['step', 'session step (`POST /v1/sessions/{id}/run`)'],
                           ['warm', 'warm `/v1/run` (pool)'], ['cold', 'cold `/v1/run` (`--pool 0`)']]) {
    const m = q(t[k], 0.5);
    console.log(`| ${name} | ${fmt(m)} | ${fmt(q(t[k], 0.1))} | ${fmt(q(t[k], 0.9))} | ${(m / cold).toFixed(3)} |`);
  }
  const ratio = q(t.step, 0.5) / cold;
  console.log(`\nsession step / cold run: ${ratio.toFixed(3)} (target <= 0.25: ${ratio <= 0.25 ? 'met' : 'NOT met'})`);
}

main().catch((e) => { console.error(`session-load: ${e.message}`); process.exit(1); });
