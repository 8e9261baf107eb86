// The fake key-value broker and the child-node runner shared by the
// host-side tests of runtime/js/spin-kv.mjs (tests/runtime/kv.test.mjs) and
// the Spin SDK conformance cases (tests/compat/spin/). Not a test file itself.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const JS = path.join(ROOT, "runtime", "js");
export const SHIM_URL = pathToFileURL(path.join(JS, "spin-kv.mjs")).href;
export const REGISTER = path.join(JS, "kv-register.mjs");
export const MiB = 1024 * 1024;
export const TIMEOUT = 30000;

export const frame = (status, payload = Buffer.alloc(0)) => {
  const head = Buffer.alloc(5);
  head.writeUInt32LE(1 + payload.length, 0);
  head[4] = status;
  return Buffer.concat([head, payload]);
};
export const errorFrame = (kind, message) => frame(2, Buffer.from(`${kind} ${message}`));

function keyOk(key) {
  if (key.length < 1 || key.length > 255 || key.includes(0)) return false;
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(key);
    return true;
  } catch {
    return false;
  }
}

// The supervisor's side: answers each complete request, in order.
// opts: maxKeys, maxBytes, maxValue, closeAfter (hang up once that many
// requests were answered), slow (pause reading after every chunk, answer
// in 64 KiB pieces 1 ms apart),
// answer(op, key, value) -> a raw frame to send instead.
export function startBroker(sock, opts = {}) {
  const maxKeys = opts.maxKeys ?? 1024, maxBytes = opts.maxBytes ?? 64 * MiB, maxValue = opts.maxValue ?? MiB;
  const data = new Map(); // latin1 key -> Buffer
  const requests = []; // [op, key (utf8), value length]
  let chunks = [], have = 0, closed = false;

  // slow: each answer goes out in 64 KiB pieces 1 ms apart, so a client
  // reading a large value surely finds only part of it there (a short
  // read), whatever the socket's buffer and the scheduler do
  let out = Promise.resolve();
  const send = (buf) => {
    if (!opts.slow) return sock.write(buf);
    for (let o = 0; o < buf.length; o += 64 * 1024) {
      const part = buf.subarray(o, o + 64 * 1024);
      out = out.then(() => new Promise((done) => {
        if (!sock.destroyed) sock.write(part);
        setTimeout(done, 1);
      }));
    }
  };
  const hangup = () => { // after the answers already written went out
    closed = true;
    out.then(() => sock.end(() => sock.destroy()));
  };
  const take = (n) => {
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    chunks = all.length > n ? [all.subarray(n)] : [];
    have -= n;
    return all.subarray(0, n);
  };
  const peekSize = () => (chunks[0].length >= 4 ? chunks[0] : Buffer.concat(chunks)).readUInt32LE(0);

  function handle(op, key, value) {
    const k = key.toString("latin1");
    if (op === 6) return key.toString() === "default" ? frame(0) : errorFrame("no_such_store", `no store named "${key}"`);
    if (op === 5) {
      const keys = [...data.keys()].map((x) => Buffer.from(x, "latin1")).sort(Buffer.compare);
      return frame(0, Buffer.concat(keys.flatMap((x) => {
        const n = Buffer.alloc(4);
        n.writeUInt32LE(x.length);
        return [n, x];
      })));
    }
    if (op < 1 || op > 4) return errorFrame("invalid", `unknown op ${op}`);
    if (!keyOk(key)) return errorFrame("invalid", "bad key");
    if (op === 1) return data.has(k) ? frame(0, data.get(k)) : frame(1);
    if (op === 3) {
      data.delete(k);
      return frame(0);
    }
    if (op === 4) return frame(0, Buffer.from([data.has(k) ? 1 : 0]));
    if (value.length > maxValue) return errorFrame("store_table_full", `value over max_value ${maxValue}`);
    if (!data.has(k) && data.size >= maxKeys) return errorFrame("store_table_full", `max_keys ${maxKeys} reached`);
    let total = key.length + value.length;
    for (const [x, v] of data) if (x !== k) total += Buffer.byteLength(x, "latin1") + v.length;
    if (total > maxBytes) return errorFrame("store_table_full", `max_bytes ${maxBytes} would be exceeded`);
    data.set(k, Buffer.from(value));
    return frame(0);
  }

  function pump() {
    while (!closed) {
      if (opts.closeAfter !== undefined && requests.length >= opts.closeAfter) return hangup();
      if (have < 4) return;
      const size = peekSize();
      if (size < 5) return hangup(); // malformed: EOF
      if (have < 4 + size) return;
      const req = take(4 + size).subarray(4);
      if (size > 5 + 255 + maxValue) {
        requests.push([null, "", size]);
        send(errorFrame("invalid", `value too large (${size} bytes of request)`));
        continue;
      }
      const op = req[0], klen = req.readUInt32LE(1);
      if (klen > size - 5) return hangup();
      const key = req.subarray(5, 5 + klen), value = req.subarray(5 + klen);
      requests.push([op, key.toString(), value.length]);
      send((opts.answer && opts.answer(op, key, value)) || handle(op, key, value));
    }
  }

  sock.on("data", (chunk) => {
    chunks.push(chunk);
    have += chunk.length;
    pump();
    if (opts.slow && !closed) {
      sock.pause();
      setTimeout(() => sock.resume(), 1);
    }
  });
  sock.on("error", () => {});
  return { data, requests, get: (k) => data.get(Buffer.from(k).toString("latin1")) };
}

export function tempDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moat-kv-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// Runs `code` (an ES module body) in a child node. With a broker, its fd 3 is
// the socket and MOAT_KV_FD=3. `prelude` false: no import of the shim.
export function runClient(t, code, { broker = {}, noFd = false, nonblocking = false, nodeOptions, prelude = true, dir } = {}) {
  dir ??= tempDir(t);
  const head = prelude
    ? `import * as kv from ${JSON.stringify(SHIM_URL)};\nimport assert from "node:assert/strict";\nimport fs from "node:fs";\n`
    : "";
  const file = path.join(dir, "main.mjs");
  fs.writeFileSync(file, head + code);
  const env = { PATH: process.env.PATH, LANG: "C.UTF-8" };
  if (!noFd) env.MOAT_KV_FD = "3";
  if (nodeOptions) env.NODE_OPTIONS = nodeOptions;
  let cmd = process.execPath, args = [file];
  if (nonblocking) { // python sets O_NONBLOCK on fd 3, then becomes node
    cmd = "python3";
    args = ["-c", "import os, sys; os.set_blocking(3, False); os.execvp(sys.argv[1], sys.argv[1:])", process.execPath, file];
  }
  const child = spawn(cmd, args, { cwd: dir, env, stdio: ["ignore", "pipe", "pipe", noFd ? "ignore" : "pipe"] });
  const state = noFd ? null : startBroker(child.stdio[3], broker);
  const out = [], err = [];
  child.stdout.on("data", (d) => out.push(d));
  child.stderr.on("data", (d) => err.push(d));
  const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT);
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), broker: state });
    });
  });
}

export function assertOk(r) {
  assert.equal(r.stderr, "", `stderr: ${r.stderr}`);
  assert.equal(r.status, 0);
  assert.equal(r.stdout, "ok\n");
}
