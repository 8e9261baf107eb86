// Live sandboxes (issue 45, docs/SANDBOXES.md) through moat serve on a unix socket,
// requests spaced as users send them (SANDBOX_GAP_MS between them, 1 client): create →
// ready (the 201: the agent answered), start `true` and read its exit (a streamed process),
// write then read back 1 MiB (PUT then GET of /sandbox/bench.bin). Median and spread
// (p10-p90, ms). Then an idle live sandbox's memory: SANDBOX_IDLE sandboxes made and left
// idle 2 s; the proportional set size (Pss, /proc/PID/smaps_rollup) of every process under
// the service (the sandboxes' pid 1, agent and anything else in them; --pid: the service,
// which must have no warm run pool; a sandbox pool's are there before and after) and the
// service's own Pss growth, each per sandbox, with the
// sandbox's cgroup memory (usage.memoryBytes) where there is one. Figures, not a test.
//
//   node bench/sandbox-load.mjs --socket MOAT.sock [--pid SERVICE_PID] [--label TEXT]
// Environment: SANDBOX_ROUNDS (30), SANDBOX_GAP_MS (100), SANDBOX_IDLE (6: the service's default --max-sandboxes is 8).
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';

const args = process.argv.slice(2);
const arg = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const SOCKET = arg('--socket');
const ROUNDS = Number(process.env.SANDBOX_ROUNDS || 30);
const GAP = Number(process.env.SANDBOX_GAP_MS || 100);
const IDLE = Number(process.env.SANDBOX_IDLE || 6);
const PID = Number(arg('--pid') || 0);
const LABEL = arg('--label') || '';
if (!SOCKET) {
  console.error('usage: node bench/sandbox-load.mjs --socket MOAT.sock');
  process.exit(2);
}

function call(method, path, body, type) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? Buffer.alloc(0)
      : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
    const t0 = process.hrtime.bigint();
    const req = http.request({ socketPath: SOCKET, method, path, headers: {
      'content-type': type || 'application/json', 'content-length': data.length } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        const buf = Buffer.concat(chunks);
        if (res.statusCode >= 300) reject(new Error(`${method} ${path}: ${res.statusCode} ${buf.toString().slice(0, 300)}`));
        else resolve({ ms, buf });
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))]; };
const fmt = (x) => x.toFixed(1);

// Pss (KiB) of a process; 0 when it is gone or unreadable
function pss(pid) {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch { return 0; }
}

// every process under pid (its children, theirs...)
function descendants(pid) {
  const kids = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* gone */ }
  }
  const out = [];
  const todo = [...(kids.get(pid) || [])];
  while (todo.length) { const p = todo.pop(); out.push(p); todo.push(...(kids.get(p) || [])); }
  return out;
}

async function idleMemory() {
  const sum = (ps) => ps.reduce((a, p) => a + pss(p), 0);
  const was = descendants(PID); // a sandbox pool's, made ahead, before and after
  const before = { service: pss(PID), under: sum(was), procs: was.length };
  const ids = [];
  for (let i = 0; i < IDLE; i++) {
    ids.push(JSON.parse((await call('POST', '/v1/sandboxes', {})).buf.toString()).id);
    await sleep(GAP);
  }
  await sleep(2000);
  const procs = descendants(PID);
  const after = { service: pss(PID), under: sum(procs), procs: procs.length };
  const cg = [];
  for (const id of ids) {
    const u = JSON.parse((await call('GET', `/v1/sandboxes/${id}`)).buf.toString());
    const b = (u.usage || {}).memoryBytes;
    if (typeof b === 'number') cg.push(b / 1024);
  }
  for (const id of ids) await call('DELETE', `/v1/sandboxes/${id}`);
  const per = (k) => (after[k] - before[k]) / IDLE / 1024;
  console.log(`\n### An idle live sandbox's memory${LABEL ? ` (${LABEL})` : ''}: ${IDLE} made, idle 2 s\n`);
  console.log('| what | MiB per sandbox |');
  console.log('|---|---:|');
  console.log(`| its processes (Pss: pid 1, the agent; ${(after.procs - before.procs) / IDLE} per sandbox) | ${fmt(per('under'))} |`);
  console.log(`| the service's growth (Pss) | ${fmt(per('service'))} |`);
  console.log(`| both | ${fmt(per('under') + per('service'))} |`);
  console.log(`| its cgroup's memory (usage.memoryBytes: its processes, its tmpfs, kernel memory) | ${cg.length ? fmt(q(cg, 0.5) / 1024) : 'none (no cgroup)'} |`);
}

async function main() {
  const t = { create: [], exec: [], files: [] };
  let pooled = 0; // creates a sandbox of the pool answered ("pool": true; --sandbox-pool)
  const mib = crypto.randomBytes(1 << 20);
  for (let i = 0; i <= ROUNDS; i++) {
    const made = await call('POST', '/v1/sandboxes', {});
    const answer = JSON.parse(made.buf.toString());
    const id = answer.id;
    await sleep(GAP);
    const ex = await call('POST', `/v1/sandboxes/${id}/processes?stream=1`, { argv: ['true'] });
    if (!ex.buf.toString().includes('"exitCode":0')) throw new Error(`true: ${ex.buf}`);
    await sleep(GAP);
    const put = await call('PUT', `/v1/sandboxes/${id}/files?path=/sandbox/bench.bin`, mib, 'application/octet-stream');
    const got = await call('GET', `/v1/sandboxes/${id}/files?path=/sandbox/bench.bin`);
    if (!got.buf.equals(mib)) throw new Error('1 MiB read back differs');
    await call('DELETE', `/v1/sandboxes/${id}`);
    if (i === 0) continue; // warm-up
    t.create.push(made.ms);
    if (answer.pool === true) pooled++;
    t.exec.push(ex.ms);
    t.files.push(put.ms + got.ms);
    await sleep(GAP);
  }
  console.log(`\n### Live sandboxes${LABEL ? ` (${LABEL})` : ''} (${ROUNDS} rounds, ${GAP} ms between requests, 1 client; ${pooled} of ${ROUNDS} creates from the sandbox pool)\n`);
  console.log('| what | median ms | p10 ms | p90 ms |');
  console.log('|---|---:|---:|---:|');
  const rows = [['create → ready (201)', t.create], ['start `true`, read its exit (streamed)', t.exec],
                ['write 1 MiB then read it back', t.files]];
  for (const [k, xs] of rows) console.log(`| ${k} | ${fmt(q(xs, 0.5))} | ${fmt(q(xs, 0.1))} | ${fmt(q(xs, 0.9))} |`);
  if (PID) await idleMemory();
}

main().catch((e) => { console.error(e.message); process.exit(1); });
