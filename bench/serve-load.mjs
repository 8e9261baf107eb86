// Load generator for bench/serve.sh: latency percentiles and throughput of `moat serve`
// (over its unix socket, one keep-alive connection per client, or a fresh connection per
// request for the `-fresh` workloads) next to `moat exec`
// spawned per request. Node built-ins only. Figures, not a test: nothing is asserted.
//
//   node bench/serve-load.mjs --socket PATH --cold-socket PATH --moat PATH [--cpus N] [--queue N]
// --socket is a service with its warm pool, --cold-socket the same with --pool 0.
// Environment: REQUESTS per cell (200), WARMUP requests per cell, not timed (10),
// CLIENTS (1,2,8), WORKLOADS (the keys of `workloads` below, in that order), GAP_MS (0),
// ROUNDS (1): each cell's REQUESTS in that many parts, the workloads of one client count
// taking turns part by part, so that a busy moment of the host falls on all of them alike
// (a cell's figures are over all its parts; req/s is its requests over their time).
import http from 'node:http';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const SOCKET = args.socket;
const COLD_SOCKET = args['cold-socket'] || args.socket;
const MOAT = args.moat;
if (!SOCKET || !MOAT) {
  console.error('usage: node bench/serve-load.mjs --socket PATH --moat PATH [--cpus N] [--queue N]');
  process.exit(2);
}
const REQUESTS = Number(process.env.REQUESTS || 200);
const ROUNDS = Math.max(1, Math.min(REQUESTS, Number(process.env.ROUNDS || 1)));
const WARMUP = Number(process.env.WARMUP ?? 10);
// GAP_MS: each client waits this long after each answer (spaced requests, as an agent
// sends them: a warm pool has refilled in between); req/s then counts the gaps too
const GAP_MS = Number(process.env.GAP_MS || 0);
const CLIENTS = (process.env.CLIENTS || '1,2,8').split(',').map(Number).filter((n) => n > 0);
// SEED: the order of the cells in each round is shuffled with it (default: the time,
// printed with the tables). In a fixed order one workload always followed the same
// other one and paid for what that one left behind: the pool refilling the kinds it
// used (a node start, an esbuild), held while the service's CPUs were busy and made as
// soon as they were not (docs/benchmarks-latest.md, "The fresh-connection gap").
const SEED = Number(process.env.SEED || Date.now() % 1000000);
let rng = SEED >>> 0;
const random = () => { rng = (Math.imul(rng, 1664525) + 1013904223) >>> 0; return rng / 2 ** 32; };
const shuffled = (xs) => {
  const v = [...xs];
  for (let i = v.length - 1; i > 0; i--) { const j = Math.floor(random() * (i + 1)); [v[i], v[j]] = [v[j], v[i]]; }
  return v;
};
const WORKLOADS = (process.env.WORKLOADS ||
  'py-script,py-script-fresh,py-script-cold,py-script-cold-fresh,bare-py,js-script,js-script-fresh,js-script-cold,bare-node,ts-script,ts-script-fresh,ts-script-cold,py-handler,py-handler-cold,ts-handler,ts-handler-cold,exec-py').split(',');

// The service's built-in per-run defaults (docs/SERVE.md), given to `moat exec` too so both
// sides run under the same limits.
const LIMITS = { timeout: 10000, memoryMb: 256, cpus: 1, pidsLimit: 64 };

const PY_SCRIPT = 'print(6*7)';
const PY_HANDLER = `from spin_sdk.http import Response

def handle_request(request):
    return Response(200, {"content-type": "text/plain"}, "hello " + request.uri)
`;
const TS_HANDLER = `export default {
  async fetch(request: Request): Promise<Response> {
    const path: string = new URL(request.url).pathname;
    return new Response("hello " + path, { headers: { "content-type": "text/plain" } });
  },
};
`;

let seq = 0;
function post(agent, route, envelope, socketPath = SOCKET) {
  const body = Buffer.from(JSON.stringify(envelope));
  return new Promise((resolve) => {
    const req = http.request({
      socketPath, agent, method: 'POST', path: route,
      headers: { 'Content-Type': 'application/json', 'Content-Length': body.length },
    }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8'), complete: res.complete }));
      res.on('error', (e) => resolve({ status: 0, body: String(e.message) }));
    });
    req.on('error', (e) => resolve({ status: 0, body: String(e.message) }));
    req.end(body);
  });
}

// A process spawned bare (no sandbox), with the environment a sandbox gets (a host's
// NODE_EXTRA_CA_CERTS, pyenv shims or the like would make it slower than it is): its
// stdout must be want.
const BARE_ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/tmp', LANG: 'C.UTF-8', TMPDIR: '/tmp' };
function bare(argv, want) {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: BARE_ENV });
    const out = [];
    child.stdout.on('data', (d) => out.push(d));
    child.on('error', (e) => resolve(e.message));
    child.on('close', (code) => resolve(code === 0 && Buffer.concat(out).toString() === want ? null : `exit ${code}`));
  });
}

async function script(agent, route, envelope, socket, want) {
  const r = await post(agent, route, envelope, socket);
  if (r.status !== 200) return `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
  const j = JSON.parse(r.body);
  return j.stdout === want && j.exitCode === 0 ? null : `unexpected result ${r.body.slice(0, 200)}`;
}

const JS_SCRIPT = 'console.log(42)';
const TS_SCRIPT = 'const x: number = 42; console.log(x)';

// Each workload: one request → null when the answer is right, else a short reason.
const workloads = {
  'py-script': {
    what: 'POST /py/run, script `print(6*7)`, the service with its warm pool',
    once: (agent) => script(agent, '/py/run', { code: PY_SCRIPT, sandboxId: `bench-${++seq}` }, SOCKET, '42\n'),
  },
  'py-script-fresh': {
    what: 'the same as py-script, a fresh connection per request (as curl, shell scripts and most HTTP libraries call it)',
    once: (agent, cfgFile, fresh) => script(fresh, '/py/run', { code: PY_SCRIPT, sandboxId: `bench-${++seq}` }, SOCKET, '42\n'),
  },
  'py-script-cold-fresh': {
    what: 'the same on the service with --pool 0, a fresh connection per request',
    once: (agent, cfgFile, fresh) => script(fresh, '/py/run', { code: PY_SCRIPT, sandboxId: `bench-${++seq}` }, COLD_SOCKET, '42\n'),
  },
  'py-script-cold': {
    what: 'the same on the service with --pool 0',
    once: (agent) => script(agent, '/py/run', { code: PY_SCRIPT, sandboxId: `bench-${++seq}` }, COLD_SOCKET, '42\n'),
  },
  'bare-py': {
    what: "`/usr/bin/python3 -c 'print(6*7)'` spawned by the client, no sandbox (the sandbox's interpreter)",
    once: () => bare(['/usr/bin/python3', '-c', PY_SCRIPT], '42\n'),
  },
  'js-script': {
    what: 'POST /v1/run, JavaScript `console.log(42)`, with the warm pool',
    once: (agent) => script(agent, '/v1/run', { code: JS_SCRIPT, language: 'javascript' }, SOCKET, '42\n'),
  },
  'js-script-fresh': {
    what: 'the same as js-script, a fresh connection per request',
    once: (agent, cfgFile, fresh) => script(fresh, '/v1/run', { code: JS_SCRIPT, language: 'javascript' }, SOCKET, '42\n'),
  },
  'js-script-cold': {
    what: 'the same with --pool 0',
    once: (agent) => script(agent, '/v1/run', { code: JS_SCRIPT, language: 'javascript' }, COLD_SOCKET, '42\n'),
  },
  'bare-node': {
    what: "`/usr/bin/node -e 'console.log(42)'` spawned by the client, no sandbox",
    once: () => bare(['/usr/bin/node', '-e', JS_SCRIPT], '42\n'),
  },
  'py-handler': {
    what: 'POST /py/run, Python handle_request → Response, with the warm pool',
    async once(agent) {
      const r = await post(agent, '/py/run', { code: PY_HANDLER, sandboxId: `bench-${++seq}`, input: { path: '/x' } });
      return r.status === 200 && r.body === 'hello /x' ? null : `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
    },
  },
  'py-handler-cold': {
    what: 'the same with --pool 0',
    async once(agent) {
      const r = await post(agent, '/py/run', { code: PY_HANDLER, sandboxId: `bench-${++seq}`, input: { path: '/x' } }, COLD_SOCKET);
      return r.status === 200 && r.body === 'hello /x' ? null : `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
    },
  },
  'ts-script': {
    what: 'POST /v1/run, TypeScript `const x: number = 42; console.log(x)` (esbuild, then node), with the warm pool',
    once: (agent) => script(agent, '/v1/run', { code: TS_SCRIPT, language: 'typescript' }, SOCKET, '42\n'),
  },
  'ts-script-fresh': {
    what: 'the same as ts-script, a fresh connection per request',
    once: (agent, cfgFile, fresh) => script(fresh, '/v1/run', { code: TS_SCRIPT, language: 'typescript' }, SOCKET, '42\n'),
  },
  'ts-script-cold': {
    what: 'the same with --pool 0',
    once: (agent) => script(agent, '/v1/run', { code: TS_SCRIPT, language: 'typescript' }, COLD_SOCKET, '42\n'),
  },
  'ts-handler': {
    what: 'POST /ts/run, TS `export default { fetch }` (esbuild in the sandbox), with the warm pool',
    async once(agent) {
      const r = await post(agent, '/ts/run', { code: TS_HANDLER, sandboxId: `bench-${++seq}`, input: { path: '/x' } });
      return r.status === 200 && r.body === 'hello /x' ? null : `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
    },
  },
  'ts-handler-cold': {
    what: 'the same with --pool 0',
    async once(agent) {
      const r = await post(agent, '/ts/run', { code: TS_HANDLER, sandboxId: `bench-${++seq}`, input: { path: '/x' } }, COLD_SOCKET);
      return r.status === 200 && r.body === 'hello /x' ? null : `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
    },
  },
  'exec-py': {
    what: '`moat exec` spawned per request, script `print(6*7)`',
    once(agent, cfgFile) {
      return new Promise((resolve) => {
        const child = spawn(MOAT, ['exec', '--config', cfgFile], { stdio: ['pipe', 'pipe', 'pipe'] });
        const out = [];
        const err = [];
        child.stdout.on('data', (d) => out.push(d));
        child.stderr.on('data', (d) => err.push(d));
        child.on('error', (e) => resolve(e.message));
        child.on('close', (code) => {
          let j;
          try { j = JSON.parse(Buffer.concat(out).toString('utf8')); } catch { /* below */ }
          if (j && j.stdout === '42\n' && j.exitCode === 0) resolve(null);
          else resolve(`exit ${code}: ${Buffer.concat(out).toString().slice(0, 200)} ${Buffer.concat(err).toString().slice(0, 200)}`);
        });
        child.stdin.on('error', () => {});
        child.stdin.end(JSON.stringify({ code: PY_SCRIPT, language: 'python', ...LIMITS }));
      });
    },
  },
};

function pct(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

// `total` requests over `clients` workers pulling from one counter; latency of each.
async function drive(w, clients, total, cfgFile) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  // the `-fresh` workloads: a new connection per request, closed after its answer
  const fresh = new http.Agent({ keepAlive: false, maxSockets: clients });
  const lat = [];
  const errors = [];
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < total) {
      next++;
      const s = process.hrtime.bigint();
      let why;
      try { why = await w.once(agent, cfgFile, fresh); } catch (e) { why = String(e.message); }
      const ms = Number(process.hrtime.bigint() - s) / 1e6;
      if (why) errors.push(why); else lat.push(ms);
      if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
    }
  }));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  agent.destroy();
  fresh.destroy();
  return { lat: lat.sort((a, b) => a - b), errors, secs };
}

async function waitHealthy(socketPath) {
  const t0 = Date.now();
  for (;;) {
    const ok = await new Promise((resolve) => {
      const req = http.get({ socketPath, path: '/healthz', timeout: 1000 }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode === 200));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() - t0 > 20000) throw new Error(`moat serve did not answer GET /healthz on ${socketPath} within 20 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const fmt = (x) => (Number.isFinite(x) ? x.toFixed(1) : '-');

// The ratios users ask about, each against the baseline it replaces: served (warm pool,
// kept-alive or fresh connection; cold) against the bare interpreter, warm against cold.
const RATIOS = [
  ['py-script', 'bare-py'], ['py-script-fresh', 'bare-py'], ['py-script-cold', 'bare-py'],
  ['py-script-cold-fresh', 'bare-py'], ['py-script', 'py-script-cold'],
  ['py-script-fresh', 'py-script-cold-fresh'],
  ['js-script', 'bare-node'], ['js-script-fresh', 'bare-node'], ['js-script-cold', 'bare-node'],
  ['ts-script', 'bare-node'], ['ts-script-fresh', 'bare-node'], ['ts-script-cold', 'bare-node'],
  ['py-handler', 'py-handler-cold'], ['ts-handler', 'ts-handler-cold'], ['exec-py', 'bare-py'],
];
const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  return v.length ? (v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2) : NaN;
};
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : '-');

// One table: per pair and client count, the rate ratio as the median over the interleaved
// rounds (each round's two rates measured minutes apart at most) with its spread (min-max),
// the latency ratio (p50 against p50: below 1 is faster) and the served side's p99/p50.
function ratioTable(rows) {
  const cell = (name, clients) => rows.find((r) => r.name === name && r.clients === clients);
  const lines = [];
  for (const clients of CLIENTS)
    for (const [a, b] of RATIOS) {
      const x = cell(a, clients), y = cell(b, clients);
      if (!x || !y) continue;
      const per = x.rates.map((r, i) => r / y.rates[i]).filter(Number.isFinite);
      lines.push(`| ${a} | ${b} | ${clients} | ${f2(median(per))} | ${f2(Math.min(...per))}–${f2(Math.max(...per))} | ` +
        `${f2(pct(x.lat, 50) / pct(y.lat, 50))} | ${f2(pct(x.lat, 99) / pct(x.lat, 50))} |`);
    }
  if (!lines.length) return;
  console.log(`### Ratios (${ROUNDS} interleaved rounds)`);
  console.log('');
  console.log('| workload | against | clients | rate ratio (median) | spread (min–max) | p50 time ratio | p99/p50 |');
  console.log('|---|---|---:|---:|---:|---:|---:|');
  for (const l of lines) console.log(l);
}

async function main() {
  await waitHealthy(SOCKET);
  await waitHealthy(COLD_SOCKET);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-bench-exec-'));
  const cfgFile = path.join(dir, 'moat.json');
  fs.writeFileSync(cfgFile, JSON.stringify({ provider: 'native' }), { mode: 0o600 });
  const rows = [];
  const failures = [];
  try {
    for (const name of WORKLOADS)
      if (!workloads[name]) throw new Error(`unknown workload ${name} (${Object.keys(workloads).join(', ')})`);
    for (const clients of CLIENTS) {
      const cells = WORKLOADS.map((name) => ({ name, clients, lat: [], errors: [], secs: 0, rates: [] }));
      for (const c of cells)
        if (WARMUP > 0) await drive(workloads[c.name], clients, WARMUP, cfgFile);
      for (let round = 0; round < ROUNDS; round++) {
        // this round's part: the requests left over by the division go to the first rounds
        const part = Math.floor(REQUESTS / ROUNDS) + (round < REQUESTS % ROUNDS ? 1 : 0);
        for (const c of shuffled(cells)) {
          const r = await drive(workloads[c.name], clients, part, cfgFile);
          c.lat.push(...r.lat);
          c.errors.push(...r.errors);
          c.secs += r.secs;
          c.rates.push(r.lat.length / r.secs); // this round's rate, for the ratios' spread
        }
      }
      for (const c of cells) {
        c.lat.sort((a, b) => a - b);
        rows.push(c);
        if (c.errors.length) failures.push(`${c.name} ×${clients}: ${c.errors.length} failed, first: ${c.errors[0]}`);
        process.stderr.write(`bench-serve: ${c.name} ×${clients}: ${(REQUESTS / c.secs).toFixed(1)} req/s\n`);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }

  const load = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  console.log(`## moat serve vs moat exec — ${new Date().toISOString()}`);
  console.log('');
  console.log(`${os.cpus().length} CPUs (${os.cpus()[0]?.model?.trim() ?? '?'}), Linux ${os.release()}, ` +
    `node ${process.version}, load average after: ${load}. moat serve on a unix socket, ` +
    `--max-concurrent ${args.cpus ?? '?'} --queue ${args.queue ?? '?'}; ${REQUESTS} requests per cell` +
    `${ROUNDS > 1 ? ` in ${ROUNDS} interleaved rounds` : ''}, each round in its own random order (SEED=${SEED}), after ${WARMUP} not timed${GAP_MS > 0 ? `, each client pausing ${GAP_MS} ms after each answer` : ''}; one keep-alive connection per client (the \`-fresh\` workloads: a new connection per request); run limits ${JSON.stringify(LIMITS)} ` +
    '(the service\'s defaults, sent to moat exec as well). Latency from request to the whole answer.');
  console.log('');
  console.log('| workload | clients | ok | failed | p50 ms | p90 ms | p99 ms | req/s |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    console.log(`| ${r.name} | ${r.clients} | ${r.lat.length} | ${r.errors.length} | ${fmt(pct(r.lat, 50))} | ` +
      `${fmt(pct(r.lat, 90))} | ${fmt(pct(r.lat, 99))} | ${(r.lat.length / r.secs).toFixed(1)} |`);
  }
  console.log('');
  ratioTable(rows);
  console.log('');
  for (const name of WORKLOADS) console.log(`- \`${name}\`: ${workloads[name].what}`);
  if (failures.length) {
    console.log('');
    for (const f of failures) console.log(`- FAILED ${f}`);
    process.exitCode = 1;
  }
}

main().catch((e) => { console.error(`bench-serve: ${e.message}`); process.exit(1); });
