// Live sandboxes (issue 45, docs/SANDBOXES.md) through moat serve on a unix socket,
// requests spaced as users send them (SANDBOX_GAP_MS between them, 1 client): create →
// ready (the 201: the agent answered), start `true` and read its exit (a streamed process),
// write then read back 1 MiB (PUT then GET of /sandbox/bench.bin). Median and spread
// (p10-p90, ms). Figures, not a test.
//
//   node bench/sandbox-load.mjs --socket MOAT.sock
// Environment: SANDBOX_ROUNDS (30), SANDBOX_GAP_MS (100).
import http from 'node:http';
import crypto from 'node:crypto';

const args = process.argv.slice(2);
const arg = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const SOCKET = arg('--socket');
const ROUNDS = Number(process.env.SANDBOX_ROUNDS || 30);
const GAP = Number(process.env.SANDBOX_GAP_MS || 100);
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

async function main() {
  const t = { create: [], exec: [], files: [] };
  const mib = crypto.randomBytes(1 << 20);
  for (let i = 0; i <= ROUNDS; i++) {
    const made = await call('POST', '/v1/sandboxes', {});
    const id = JSON.parse(made.buf.toString()).id;
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
    t.exec.push(ex.ms);
    t.files.push(put.ms + got.ms);
    await sleep(GAP);
  }
  console.log(`\n### Live sandboxes (${ROUNDS} rounds, ${GAP} ms between requests, 1 client)\n`);
  console.log('| what | median ms | p10 ms | p90 ms |');
  console.log('|---|---:|---:|---:|');
  const rows = [['create → ready (201)', t.create], ['start `true`, read its exit (streamed)', t.exec],
                ['write 1 MiB then read it back', t.files]];
  for (const [k, xs] of rows) console.log(`| ${k} | ${fmt(q(xs, 0.5))} | ${fmt(q(xs, 0.1))} | ${fmt(q(xs, 0.9))} |`);
}

main().catch((e) => { console.error(e.message); process.exit(1); });
