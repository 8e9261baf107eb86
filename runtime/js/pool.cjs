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
// esbuild while it waits, reading the code on its stdin in /sandbox with the
// same arguments, and loads node's ES module loader and web globals (Request,
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

// The TypeScript sandbox's esbuild, started before the request: the same
// arguments, the code on stdin named as the code file (its messages and the
// output are a file run's: bundle, imports and tsconfig.json resolved from
// /sandbox, read once stdin ends, after the request's files are written).
function prestart(ts) {
  const exe = findTranspiler(ts);
  if (!exe) return null; // the request then takes transpile()'s path and its message
  const args = ["--loader=ts", `--sourcefile=${b(ts.code).toString("utf8")}`,
    ...ts.args.map((a) => b(a).toString("utf8"))];
  const child = require("node:child_process").spawn(exe, args, {
    cwd: "/sandbox", stdio: ["pipe", "inherit", "inherit"], env: process.env,
  });
  const esb = { child, spec: JSON.stringify(ts), ended: false };
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
  esb.child.stdin.end(src);
  const r = await esb.done;
  if (r.error) return transpile(ts); // it could not start after all: as a cold run would
  exitLike(r.code, r.signal);
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
    esb = prestart(boot.ts);
    await import(require("node:url").pathToFileURL(path.join(__dirname, "esm-warm.mjs")).href);
    void [globalThis.Request, globalThis.Response, globalThis.Headers, globalThis.fetch];
    await warmWeb();
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
  // what `node /sandbox/main.js` does: this bootstrap was loaded as that
  // path, so its cache entry goes before the program takes the name
  const Module = require("node:module");
  delete require.cache[main];
  process.argv[1] = main;
  Module.runMain(main);
}

module.exports = { main };
