// node workload for the seccomp evidence (policies/evidence/README.md): what
// node's own fs, child_process, worker_threads, net and crypto tests exercise,
// in a small form. Prints "ok" at the end; any failure throws.
'use strict';
const assert = require('node:assert');
const fs = require('node:fs');
const fsp = require('node:fs/promises');
const path = require('node:path');
const os = require('node:os');
const cp = require('node:child_process');
const { Worker } = require('node:worker_threads');
const net = require('node:net');
const http = require('node:http');
const dns = require('node:dns');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const { pipeline } = require('node:stream/promises');

if (process.argv[2] === 'child') {
  process.on('message', (m) => { process.send({ echo: m }); process.disconnect(); });
  return;
}

async function fsPart() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'ev-'));
  const f = path.join(d, 'a.txt');
  fs.writeFileSync(f, 'hello\n');
  fs.appendFileSync(f, 'more\n');
  assert.strictEqual(fs.readFileSync(f, 'utf8'), 'hello\nmore\n');
  const st = fs.statSync(f);
  assert(st.isFile() && st.size === 11);
  fs.lstatSync(f);
  fs.chmodSync(f, 0o600);
  fs.utimesSync(f, new Date(0), new Date(0));
  fs.copyFileSync(f, f + '.copy');
  fs.renameSync(f + '.copy', f + '.moved');
  fs.symlinkSync(f, f + '.link');
  assert.strictEqual(fs.readlinkSync(f + '.link'), f);
  fs.realpathSync(f + '.link');
  fs.linkSync(f, f + '.hard');
  fs.truncateSync(f + '.hard', 3);
  fs.mkdirSync(path.join(d, 'x/y/z'), { recursive: true });
  assert(fs.readdirSync(d, { withFileTypes: true }).length >= 4);
  fs.accessSync(f, fs.constants.R_OK);
  const fd = fs.openSync(f, 'r+');
  const buf = Buffer.alloc(5);
  fs.readSync(fd, buf, 0, 5, 0);
  fs.writeSync(fd, 'H', 0);
  fs.fsyncSync(fd);
  fs.fdatasyncSync(fd);
  fs.ftruncateSync(fd, 11);
  fs.fstatSync(fd);
  fs.closeSync(fd);
  await fsp.writeFile(path.join(d, 'p.txt'), 'x'.repeat(100000));
  await fsp.readFile(path.join(d, 'p.txt'));
  await fsp.stat(d);
  for await (const _ of await fsp.opendir(d)) { /* iterate */ }
  await pipeline(fs.createReadStream(path.join(d, 'p.txt')), zlib.createGzip(),
    fs.createWriteStream(path.join(d, 'p.gz')));
  zlib.gunzipSync(fs.readFileSync(path.join(d, 'p.gz')));
  fs.rmSync(d, { recursive: true, force: true });
  os.cpus(); os.totalmem(); os.freemem(); os.uptime(); os.loadavg(); os.userInfo(); os.hostname();
}

async function cpPart() {
  assert.strictEqual(cp.execSync('echo hi').toString(), 'hi\n');
  assert.strictEqual(cp.spawnSync('sh', ['-c', 'exit 3']).status, 3);
  assert.strictEqual(cp.execFileSync('cat', { input: 'in' }).toString(), 'in');
  await new Promise((res, rej) => {
    const c = cp.spawn('sh', ['-c', 'cat; echo done >&2'], { stdio: 'pipe' });
    let out = '';
    c.stdout.on('data', (b) => { out += b; });
    c.on('close', (code) => (code === 0 && out === 'piped' ? res() : rej(new Error(out))));
    c.stdin.end('piped');
  });
  await new Promise((res, rej) => {
    const c = cp.fork(__filename, ['child']);
    c.on('message', (m) => (m.echo === 42 ? res() : rej(new Error('echo'))));
    c.send(42);
  });
  await new Promise((res) => {
    const c = cp.spawn('sleep', ['10']);
    c.on('exit', (code, sig) => { assert.strictEqual(sig, 'SIGTERM'); res(); });
    c.kill();
  });
}

async function workerPart() {
  const sab = new SharedArrayBuffer(8);
  const ia = new Int32Array(sab);
  const w = new Worker(`
    const { parentPort, workerData } = require('node:worker_threads');
    const ia = new Int32Array(workerData);
    parentPort.on('message', (n) => {
      let s = 0; for (let i = 0; i < n; i++) s += i;
      Atomics.store(ia, 0, 1); Atomics.notify(ia, 0);
      parentPort.postMessage(s);
    });`, { eval: true, workerData: sab });
  const r = await new Promise((res) => { w.once('message', res); w.postMessage(1000); });
  assert.strictEqual(r, 499500);
  Atomics.wait(ia, 0, 0, 1000);
  await w.terminate();
}

async function netPart() {
  const server = http.createServer((req, res) => res.end('pong ' + req.url));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  const body = await new Promise((res, rej) => {
    http.get({ host: '127.0.0.1', port, path: '/x' }, (r) => {
      let b = ''; r.on('data', (c) => { b += c; }); r.on('end', () => res(b));
    }).on('error', rej);
  });
  assert.strictEqual(body, 'pong /x');
  const resp = await fetch(`http://127.0.0.1:${port}/f`);
  assert.strictEqual(await resp.text(), 'pong /f');
  server.close();
  const sock = path.join(os.tmpdir(), `ev-${process.pid}.sock`);
  const us = net.createServer((c) => c.end('unix'));
  await new Promise((r) => us.listen(sock, r));
  const got = await new Promise((res) => {
    let b = ''; net.connect(sock).on('data', (c) => { b += c; }).on('end', () => res(b));
  });
  assert.strictEqual(got, 'unix');
  us.close();
  const s6 = net.createServer((c) => c.end());
  await new Promise((r) => s6.listen(0, '::1', r)).catch(() => {});
  s6.close();
  await new Promise((res) => dns.lookup('localhost', () => res()));
  const dgram = require('node:dgram');
  const u = dgram.createSocket('udp4');
  await new Promise((r) => u.bind(0, '127.0.0.1', r));
  await new Promise((r) => u.send('x', u.address().port, '127.0.0.1', r));
  await new Promise((r) => u.once('message', r));
  u.close();
}

async function cryptoPart() {
  crypto.randomBytes(32);
  crypto.createHash('sha256').update('x').digest('hex');
  crypto.createHmac('sha256', 'k').update('x').digest();
  await new Promise((r, j) => crypto.pbkdf2('p', 's', 1000, 32, 'sha256', (e) => (e ? j(e) : r())));
  await new Promise((r, j) => crypto.scrypt('p', 's', 32, (e) => (e ? j(e) : r())));
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const sig = crypto.sign('sha256', Buffer.from('m'), privateKey);
  assert(crypto.verify('sha256', Buffer.from('m'), publicKey, sig));
  const key = crypto.randomBytes(32), iv = crypto.randomBytes(12);
  const c = crypto.createCipheriv('aes-256-gcm', key, iv);
  c.update('secret'); c.final();
  await crypto.subtle.digest('SHA-256', new TextEncoder().encode('x'));
  crypto.randomUUID();
}

(async () => {
  await fsPart();
  await cpPart();
  await workerPart();
  await netPart();
  await cryptoPart();
  await new Promise((r) => setTimeout(r, 10));
  setImmediate(() => console.log('ok'));
})().catch((e) => { console.error(e); process.exit(1); });
