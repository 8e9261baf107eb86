// moat's warm-sandbox bootstrap for JavaScript (docs/SERVE.md, "The pool").
//
// moat starts this in a sandbox that is already locked down (namespaces,
// mounts, cgroup, no capabilities, no_new_privs, Landlock, seccomp, uid
// 65534) and keeps node waiting here, initialised. It reads exactly one
// request from fd 0 -- "MOATPOOL2 <n>\n", n bytes of netstrings
// ("<length>:<bytes>,": the code, the number of files and each path and
// content, the number of variables and each name and value, and for
// TypeScript the transpiler's spec as JSON), then the program's own stdin --
// writes the files, sets the environment and runs /sandbox/main.js as node's
// main module, as `node /sandbox/main.js` would; TypeScript ("ts" in the request)
// goes through esbuild first, as a cold run's does, and node runs the ESM
// result. Used once, then destroyed.
// A TypeScript sandbox (main({ts}): moat serve's typescript kind) starts
// esbuild while it waits -- as a service, through a throwaway build, or else
// reading the code on its stdin -- in /sandbox with the same arguments, and
// loads node's ES module loader and web globals (Request,
// Response: undici, most of a handler's start, and their first use) before
// the request; a request without "ts" has that esbuild killed and reaped
// before its program runs.
// fd 0 is read with readSync and exactly: process.stdin never sees the
// request, and the program reads its stdin from the first byte.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

function readExact(n) {
  const buf = Buffer.alloc(n);
  let off = 0;
  while (off < n) {
    let got;
    try {
      got = fs.readSync(0, buf, off, n - off, null);
    } catch (e) {
      if (e.code === "EAGAIN") { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); continue; }
      throw e;
    }
    if (got === 0) throw new Error("the request ended early");
    off += got;
  }
  return buf;
}

function readHeader() {
  const magic = "MOATPOOL2 ";
  let line = "";
  while (!line.endsWith("\n")) {
    line += readExact(1).toString("latin1");
    if (line.length > 32) throw new Error("bad request header");
  }
  if (!line.startsWith(magic)) throw new Error("bad request header");
  return parseInt(line.slice(magic.length, -1), 10);
}

const b = (s) => Buffer.from(s, "base64");

// The netstrings of body, as Buffers.
function fields(body) {
  const out = [];
  let i = 0;
  while (i < body.length) {
    const j = body.indexOf(0x3a, i);
    const len = j < 0 ? "" : body.toString("latin1", i, j);
    if (!/^[0-9]{1,20}$/.test(len)) throw new Error("bad request");
    const end = j + 1 + Number(len);
    if (end >= body.length || body[end] !== 0x2c) throw new Error("bad request");
    out.push(body.subarray(j + 1, end));
    i = end + 1;
  }
  return out;
}

// The count at f[at], then that many pairs: [pairs, next index].
function pairs(f, at) {
  const count = at < f.length ? Number(f[at].toString("latin1")) : NaN;
  const end = at + 1 + 2 * count;
  if (!Number.isSafeInteger(count) || end > f.length) throw new Error("bad request");
  const out = [];
  for (let k = at + 1; k < end; k += 2) out.push([f[k], f[k + 1]]);
  return [out, end];
}

function parseRequest(body) {
  const f = fields(body);
  if (!f.length) throw new Error("bad request");
  const [files, at] = pairs(f, 1);
  const [env, at2] = pairs(f, at);
  if (at2 < f.length - 1 || at2 > f.length) throw new Error("bad request");
  const ts = at2 === f.length - 1 ? JSON.parse(f[at2].toString("utf8")) : null;
  return { code: f[0], files, env, ts };
}

function findTranspiler(ts) {
  const name = b(ts.transpiler).toString("utf8");
  for (const dir of b(ts.path).toString("utf8").split(":")) {
    try {
      fs.accessSync(path.join(dir, name), fs.constants.X_OK);
      return path.join(dir, name);
    } catch (e) { /* not here */ }
  }
  return null;
}

// esbuild's status as the run's: its exit code, or 128 + the signal.
function exitLike(code, signal) {
  if (code !== 0) process.exit(code === null ? 128 + require("node:os").constants.signals[signal] : code);
}

// TypeScript: what a cold run's pid 2 does before node starts -- esbuild,
// looked up in the same directories, with the same arguments and the
// program's environment, its output on the program's stderr; a failure ends
// the run with esbuild's status (127 when it is not installed).
function transpile(ts) {
  const name = b(ts.transpiler).toString("utf8");
  const exe = findTranspiler(ts);
  if (!exe) {
    process.stderr.write(`moat: ${name} is not installed in the sandbox root (looked in ` +
      `${b(ts.path).toString("utf8")}); TypeScript needs esbuild (Debian package 'esbuild')\n`);
    process.exit(127);
  }
  const args = [b(ts.code).toString("utf8"), ...ts.args.map((a) => b(a).toString("utf8"))];
  const r = require("node:child_process").spawnSync(exe, args, {
    stdio: ["ignore", "inherit", "inherit"], env: process.env,
  });
  if (r.error) throw r.error;
  exitLike(r.status, r.signal);
  return b(ts.run).toString("utf8");
}

// esbuild's service mode: the protocol its own JS API speaks
// (cmd/esbuild/service.go and stdio_protocol.go in esbuild's source). A packet
// is a little-endian u32 length, a u32 id (shifted left; the low bit set on a
// response) and one value: 0 null, 1 bool, 2 u32, 3 string, 4 bytes, 5 array,
// 6 object. The service first writes its version, length-prefixed. It is
// spoken with the esbuild it was written against only (the service refuses
// another version); any other esbuild waits as a cold run's does (prestartCli).
const SERVICE_VERSION = "0.17.0";

function encodeValue(v, out) {
  const head = (tag, n) => {
    const h = Buffer.alloc(5);
    h[0] = tag;
    h.writeUInt32LE(n, 1);
    out.push(h);
  };
  if (v === null) out.push(Buffer.from([0]));
  else if (typeof v === "boolean") out.push(Buffer.from([1, v ? 1 : 0]));
  else if (Number.isInteger(v)) head(2, v);
  else if (typeof v === "string") {
    const s = Buffer.from(v, "utf8");
    head(3, s.length);
    out.push(s);
  } else if (Buffer.isBuffer(v)) {
    head(4, v.length);
    out.push(v);
  } else if (Array.isArray(v)) {
    head(5, v.length);
    for (const x of v) encodeValue(x, out);
  } else {
    const keys = Object.keys(v).sort();
    head(6, keys.length);
    for (const k of keys) {
      const kb = Buffer.from(k, "utf8");
      const n = Buffer.alloc(4);
      n.writeUInt32LE(kb.length);
      out.push(n, kb);
      encodeValue(v[k], out);
    }
  }
}

function encodePacket(id, value) {
  const out = [Buffer.alloc(8)];
  encodeValue(value, out);
  const buf = Buffer.concat(out);
  buf.writeUInt32LE(buf.length - 4, 0);
  buf.writeUInt32LE(id * 2, 4);
  return buf;
}

// One packet's body: { id, response, value }; throws on anything malformed.
function decodePacket(buf) {
  let i = 0;
  const take = (n) => {
    if (n > buf.length - i) throw new Error("bad esbuild packet");
    i += n;
    return i - n;
  };
  const u32 = () => buf.readUInt32LE(take(4));
  const value = () => {
    const tag = buf[take(1)];
    switch (tag) {
      case 0: return null;
      case 1: return buf[take(1)] !== 0;
      case 2: return u32();
      case 3: { const n = u32(); return buf.toString("utf8", take(n), i); }
      case 4: { const n = u32(); return buf.subarray(take(n), i); }
      case 5: { const n = u32(); const a = []; for (let k = 0; k < n; k++) a.push(value()); return a; }
      case 6: {
        const n = u32();
        const o = Object.create(null);
        for (let k = 0; k < n; k++) {
          const kn = u32();
          const key = buf.toString("utf8", take(kn), i);
          o[key] = value();
        }
        return o;
      }
      default: throw new Error("bad esbuild packet");
    }
  };
  const id = u32();
  const v = value();
  if (i !== buf.length) throw new Error("bad esbuild packet");
  return { id: id >>> 1, response: (id & 1) === 1, value: v };
}

// The service words some hints for esbuild's JS API where its command line
// words them for flags (logger.API in esbuild's source); a cold run's esbuild
// is the command line, so the service's messages are given its wording. Each
// rule matches a whole note line (two spaces, then esbuild's own text), never
// a code excerpt (a line number and a bar) or a location. The other two such
// hints cannot come from this build: "platform: 'node'" is for another
// platform, and "allowOverwrite: true" for an input at the output's path,
// which a request cannot write (names starting with .moat are reserved).
const CLI_WORDING = [
  [/^(  The esbuild loader for this file is currently set to "js" but it must be set to "jsx" to be able to parse JSX syntax\. You can use )"loader: \{ '\.js': 'jsx' \}"( to do that\.)$/,
    '$1"--loader:.js=jsx"$2'],
  [/^(  Consider enabling the ".*" condition if this package expects it to be enabled\. You can use )"conditions: \['(.*)'\]"( to do that:)$/,
    '$1"--conditions=$2"$3'],
];

// esbuild's messages (bytes: a code excerpt is the file's own) with those
// lines in the command line's words.
function cliWording(buf) {
  const out = [];
  let at = 0;
  while (at < buf.length) {
    let nl = buf.indexOf(0x0a, at);
    nl = nl < 0 ? buf.length : nl;
    const raw = buf.subarray(at, nl);
    const line = raw.toString("utf8");
    const rule = CLI_WORDING.find(([re]) => re.test(line));
    out.push(rule ? Buffer.from(line.replace(rule[0], rule[1]), "utf8") : raw);
    if (nl < buf.length) out.push(buf.subarray(nl, nl + 1));
    at = nl + 1;
  }
  return Buffer.concat(out);
}

// A waiting esbuild's arguments: the cold run's, the code as stdin named as
// the code file.
function stdinArgs(ts) {
  return ["--loader=ts", `--sourcefile=${b(ts.code).toString("utf8")}`,
    ...ts.args.map((a) => b(a).toString("utf8"))];
}

// The flags of a build through the service: those, and the command line's
// message limit (the service has none by default).
function serviceFlags(ts) {
  return [...stdinArgs(ts), "--log-limit=6"];
}

// A build's answer as the service gives it (not an error packet).
function isAnswer(r) {
  return !!r && r.error === undefined && Array.isArray(r.errors);
}

// A build through the service: its answer, or null when it ended first (or
// spoke nonsense: it is then killed). The last build also ends esbuild's
// stdin: the service then exits once its answer is written, so its death
// starts before node has woken for the answer (2.5-4 ms sooner here).
function serviceBuild(svc, flags, code, write, last = false) {
  const id = svc.next++;
  const answer = new Promise((resolve) => svc.waiting.set(id, resolve));
  svc.child.stdin[last ? "end" : "write"](encodePacket(id, {
    command: "build", key: id, entries: [], flags, write, context: false,
    stdinContents: code, stdinResolveDir: svc.dir, absWorkingDir: svc.dir, nodePaths: [],
  }));
  return Promise.race([answer, svc.done.then(() => null)]);
}

// Something of most of what a script takes esbuild through -- types, an enum,
// classes, async arrows, a template, a node import left external -- built
// once before the request (nothing written), so that the request's build
// finds esbuild's code and heap already paged in: about 8 ms of its first
// build's 11 on a 2-CPU host. esbuild keeps nothing from one build for the
// next (each has its own file system view and caches).
const WARM_UP = `import { readFileSync } from "node:fs";
enum Kind { A, B = "b" }
interface Point { x: number; y?: string }
abstract class Base<T> { constructor(protected readonly v: T) {} abstract get(): T }
class P extends Base<Point> { get(): Point { return { ...this.v, y: \`\${this.v.x}\` }; } }
const f = async (p: Point): Promise<number> => (await Promise.resolve(p.x)) ?? 0;
export default { async fetch(r: Request): Promise<Response> { return new Response(String(await f(new P({ x: 1 }).get()))); } };
console.log(Kind.B, readFileSync, [1, 2].map((n: number) => n * 2));
`;

const WARM_UP_MS = 5000;

// The service, started and through its warm-up build; null when this esbuild
// does not speak it (another version) or the warm-up did not go cleanly.
async function startService(exe, ts, dir) {
  const child = require("node:child_process").spawn(exe, [`--service=${SERVICE_VERSION}`], {
    cwd: dir, stdio: ["pipe", "pipe", "pipe"], env: process.env,
  });
  const svc = { kind: "service", child, dir, ended: false, broken: false,
    stderr: [], waiting: new Map(), next: 0, version: null };
  svc.done = new Promise((resolve) => {
    child.on("close", (code, signal) => { svc.ended = true; resolve({ code, signal }); });
    child.on("error", (error) => { svc.ended = true; resolve({ error }); });
  });
  let gotVersion;
  const version = new Promise((resolve) => { gotVersion = resolve; });
  let stream = Buffer.alloc(0);
  child.stdout.on("data", (d) => {
    stream = stream.length ? Buffer.concat([stream, d]) : d;
    try {
      while (stream.length >= 4 && stream.length - 4 >= stream.readUInt32LE(0)) {
        const body = stream.subarray(4, 4 + stream.readUInt32LE(0));
        stream = stream.subarray(4 + body.length);
        if (svc.version === null) {
          svc.version = body.toString("utf8");
          gotVersion(svc.version);
          continue;
        }
        const p = decodePacket(body);
        const w = p.response && svc.waiting.get(p.id);
        if (w) {
          svc.waiting.delete(p.id);
          w(p.value);
        }
      }
    } catch (e) {
      svc.broken = true;
      child.kill("SIGKILL");
    }
  });
  child.stderr.on("data", (d) => svc.stderr.push(d));
  child.stdin.on("error", () => { /* esbuild gone: svc.done says so */ });
  // an esbuild that says nothing, or does not answer the warm-up, in
  // WARM_UP_MS (it takes about 15 ms) is not waited for any longer
  const late = new Promise((resolve) => setTimeout(resolve, WARM_UP_MS, null).unref());
  const v = await Promise.race([version, svc.done.then(() => null), late]);
  const r = v === SERVICE_VERSION
    ? await Promise.race([serviceBuild(svc, serviceFlags(ts), Buffer.from(WARM_UP), false), late]) : null;
  if (!isAnswer(r) || r.errors.length || svc.stderr.length) {
    await stop(svc);
    return null;
  }
  return svc;
}

// The TypeScript sandbox's esbuild, started before the request: the service
// through its warm-up where it is the version spoken here, else the command
// line with the same arguments, the code on stdin named as the code file.
// Either way its messages and output are a file run's: bundle, imports and
// tsconfig.json resolved from /sandbox, read only when the code is given,
// after the request's files are written.
// (dir: the sandbox's /sandbox; another only in host-side tests)
async function prestart(ts, dir = "/sandbox") {
  const exe = findTranspiler(ts);
  if (!exe) return null; // the request then takes transpile()'s path and its message
  const esb = (await startService(exe, ts, dir)) || prestartCli(exe, ts, dir);
  esb.spec = JSON.stringify(ts);
  return esb;
}

function prestartCli(exe, ts, dir) {
  const child = require("node:child_process").spawn(exe, stdinArgs(ts), {
    cwd: dir, stdio: ["pipe", "inherit", "inherit"], env: process.env,
  });
  const esb = { kind: "cli", child, ended: false };
  esb.done = new Promise((resolve) => {
    child.on("exit", (code, signal) => { esb.ended = true; resolve({ code, signal }); });
    child.on("error", (error) => { esb.ended = true; resolve({ error }); });
  });
  child.stdin.on("error", () => { /* esbuild gone: its status says why */ });
  return esb;
}

// esbuild is still running (not a zombie): node sees its exit only when the
// event loop runs, which it has not while the request was read.
function alive(esb) {
  if (esb.ended) return false;
  try {
    const st = fs.readFileSync(`/proc/${esb.child.pid}/stat`, "latin1");
    return !/^[ZX]/.test(st.slice(st.lastIndexOf(")") + 2));
  } catch (e) {
    return false;
  }
}

async function stop(esb) {
  esb.child.kill("SIGKILL");
  await esb.done;
}

// The request's TypeScript through the waiting esbuild: the code file as
// the request's files left it (as a cold run's esbuild reads it).
async function feed(esb, ts) {
  let src;
  try {
    src = fs.readFileSync(b(ts.code).toString("utf8"));
  } catch (e) {
    await stop(esb);
    return transpile(ts); // as a cold run meets it
  }
  if (!alive(esb)) { // it died while it waited: as a cold run would
    await esb.done;
    return transpile(ts);
  }
  if (esb.kind === "service") return feedService(esb, ts, src);
  esb.child.stdin.end(src);
  const r = await esb.done;
  if (r.error) return transpile(ts); // it could not start after all: as a cold run would
  exitLike(r.code, r.signal);
  return b(ts.run).toString("utf8");
}

// The build through the service; once it answers, esbuild is gone (or
// killed) and reaped (a cold run's has exited before node starts), its
// messages go to the program's stderr in the command line's words, and a
// build with errors ends the run with the command line's status, 1. An esbuild that dies
// before it answers ends the run with its status, as a cold run's would;
// one that answered nonsense, or ended cleanly without an answer, is run
// again as a cold run's.
async function feedService(svc, ts, src) {
  const r = await serviceBuild(svc, serviceFlags(ts), src, true, true);
  // its death takes a few ms (6 threads); node's event loop, asleep while
  // it dies, wakes for it about as long again on a 2-CPU host: watched
  // without sleeping (20 ms at most), then reaped by the loop at once
  svc.child.kill("SIGKILL");
  for (const t = performance.now(); alive(svc) && performance.now() - t < 20;);
  const end = await svc.done;
  const answered = isAnswer(r);
  const died = !answered && !svc.broken && !end.error && end.code !== 0;
  if (!answered && !died) return transpile(ts);
  const msgs = Buffer.concat(svc.stderr);
  if (msgs.length) process.stderr.write(cliWording(msgs));
  if (died) exitLike(end.code, end.signal);
  if (r.errors.length) process.exit(1);
  return b(ts.run).toString("utf8");
}

// A fetch handler's first Request, body read, Response and body stream
// cost about 7 ms of lazy set-up in undici (node 18); done once here on
// throwaway objects, before any request byte is read.
async function warmWeb() {
  const req = new Request("http://localhost/", {
    method: "POST", headers: [["content-type", "text/plain"]], body: "x",
  });
  await req.text();
  const res = new Response("x", { status: 200, headers: { "content-type": "text/plain" } });
  void [...res.headers];
  const reader = res.body.getReader();
  while (!(await reader.read()).done);
}

// kv-register.mjs's hook: @spinframework/spin-kv, and the Spin SDK packages
// moat does not offer failing with one sentence (kv-hooks.mjs)
const SPIN_SDK = "@spinframework/spin-";
function spinHooks() {
  const { register } = require("node:module");
  if (typeof register === "function")
    register(require("node:url").pathToFileURL(path.join(__dirname, "kv-hooks.mjs")).href);
}

async function main(boot) {
  // what a program's first output and its start would load, loaded before
  // the request arrives: the stdout and stderr streams (fds 1 and 2 are
  // already the program's), the module loader, and child_process for
  // esbuild. Not stdin: its stream would start reading the request.
  void process.stdout;
  void process.stderr;
  require("node:module");
  require("node:child_process");
  let esb = null;
  if (boot && boot.ts) {
    const started = prestart(boot.ts);
    await import(require("node:url").pathToFileURL(path.join(__dirname, "esm-warm.mjs")).href);
    void [globalThis.Request, globalThis.Response, globalThis.Headers, globalThis.fetch];
    await warmWeb();
    esb = await started;
  }
  const req = parseRequest(readExact(readHeader()));
  let main = req.ts ? b(req.ts.code).toString("utf8") : "/sandbox/main.js";
  fs.writeFileSync(main, req.code);
  for (const [rel, content] of req.files) {
    const p = path.join("/sandbox", rel.toString("utf8"));
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
  }
  for (const [k, v] of req.env) process.env[k.toString("utf8")] = v.toString("utf8");
  process.chdir("/sandbox");
  if (req.ts && esb && esb.spec === JSON.stringify(req.ts)) main = await feed(esb, req.ts);
  else {
    if (esb) await stop(esb);
    if (req.ts) main = transpile(req.ts);
  }
  // a cold run of a program naming a Spin SDK package gets the resolve hook
  // from NODE_OPTIONS (src/runner/prepare.c); a warm node installs it now
  if ([req.code, ...req.files.map((f) => f[1])].some((t) => t.includes(SPIN_SDK)))
    spinHooks();
  // what `node /sandbox/main.js` does: this bootstrap was loaded as that
  // path, so its cache entry goes before the program takes the name
  const Module = require("node:module");
  delete require.cache[main];
  process.argv[1] = main;
  quickExit();
  Module.runMain(main);
}

// A program that ends by itself (its event loop empty, not process.exit())
// ends here once its 'exit' listeners have run: node's own teardown after
// them (the environment, the isolate and its heap, the platform's threads)
// only frees memory of a sandbox that dies with the process, and took 1-9 ms
// of a spaced warm request's time on a 2-CPU host. The wrapper is put on process.emit
// at 'beforeExit' (always before a natural 'exit', after the program's own
// start), so that it is the outermost: whatever the program wrapped round
// emit for 'exit' (signal-exit does) runs first. Nothing is left unwritten:
// a natural exit comes only once the event loop is empty, so every write to
// stdout or stderr queued for a slow reader has gone (what an 'exit' listener
// writes is as node's own exit leaves it). The status is what node's would
// be: process.exitCode, else 0.
function quickExit() {
  let armed = false;
  process.on("beforeExit", () => {
    if (armed) return;
    armed = true;
    const emit = process.emit;
    process.emit = function (ev, ...args) {
      const r = emit.call(this, ev, ...args);
      if (ev === "exit") process.reallyExit(process.exitCode ?? 0);
      return r;
    };
  });
}

module.exports = { main };
// for tests/runtime/pool.test.cjs only
module.exports.forTests = { encodePacket, decodePacket, cliWording, prestart, stop, SERVICE_VERSION,
  parseRequest, quickExit };
