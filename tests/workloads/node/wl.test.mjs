// node's test runner with fs.watch, child_process and worker_threads
// (tests/workloads/README.md); reporter.mjs prints the result lines.
import { test } from 'node:test';
import assert from 'node:assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile, spawn, fork, execFileSync } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import net from 'node:net';
import { fileURLToPath } from 'node:url';

const home = fs.mkdtempSync(path.join(process.env.HOME || os.tmpdir(), 'wl-node-'));

test('fs.watch sees a new file', async () => {
  const w = fs.watch(home);
  try {
    const seen = once(w, 'change');
    fs.writeFileSync(path.join(home, 'watched'), 'x');
    const [, name] = await seen;
    assert.strictEqual(name, 'watched');
  } finally { w.close(); }
});

test('fs.watchFile polls a file', async () => {
  const f = path.join(home, 'polled');
  fs.writeFileSync(f, 'a');
  const seen = new Promise((resolve) => fs.watchFile(f, { interval: 20 }, () => resolve()));
  setTimeout(() => fs.writeFileSync(f, 'bb'), 50);
  await seen;
  fs.unwatchFile(f);
});

test('fs.promises round trip', async () => {
  const f = path.join(home, 'p');
  await fs.promises.writeFile(f, 'hello');
  await fs.promises.appendFile(f, ' world');
  assert.strictEqual(await fs.promises.readFile(f, 'utf8'), 'hello world');
  await fs.promises.rm(f);
});

test('child_process.execFile', async () => {
  const out = await new Promise((resolve, reject) =>
    execFile('sh', ['-c', 'echo $((6*7))'], (err, stdout) => err ? reject(err) : resolve(stdout)));
  assert.strictEqual(out, '42\n');
});

test('child_process.spawn exit code and signal', async () => {
  const c = spawn('sh', ['-c', 'exit 3']);
  const [code] = await once(c, 'exit');
  assert.strictEqual(code, 3);
  const s = spawn('sleep', ['10']);
  s.kill('SIGTERM');
  const [, sig] = await once(s, 'exit');
  assert.strictEqual(sig, 'SIGTERM');
});

test('child_process.execFileSync', () => {
  assert.strictEqual(execFileSync('sh', ['-c', 'echo sync']).toString(), 'sync\n');
});

test('child_process.fork with IPC', async () => {
  const child = fork(fileURLToPath(new URL('./child.cjs', import.meta.url)));
  child.send({ n: 20 });
  const [msg] = await once(child, 'message');
  assert.strictEqual(msg.n, 21);
  await once(child, 'exit');
});

test('worker_threads message round trip', async () => {
  const w = new Worker('const { parentPort } = require("node:worker_threads");' +
    'parentPort.on("message", (n) => { parentPort.postMessage(n * 2); parentPort.close(); });',
  { eval: true });
  w.postMessage(21);
  const [n] = await once(w, 'message');
  assert.strictEqual(n, 42);
  await w.terminate();
});

test('net server on loopback', async () => {
  const srv = net.createServer((s) => s.end('pong'));
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const c = net.connect(srv.address().port, '127.0.0.1');
  let data = '';
  c.on('data', (d) => { data += d; });
  await once(c, 'end');
  srv.close();
  assert.strictEqual(data, 'pong');
});

test('timers and process.hrtime', async () => {
  const t0 = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(process.hrtime.bigint() - t0 >= 15_000_000n);
});

test('cleanup', () => { fs.rmSync(home, { recursive: true, force: true }); });
