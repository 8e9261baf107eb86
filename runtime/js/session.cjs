// moat's session driver for JavaScript (docs/SESSIONS.md, "The driver protocol").
//
// moat starts this in a session's sandbox (locked down as any run: namespaces,
// mounts, cgroup, no capabilities, Landlock, seccomp, uid 65534) with the
// control channel, a unix stream socket, on fd 3. It writes a `ready` frame,
// then runs one step per `run` frame as a script in node's one global scope
// (vm.runInThisContext: top-level declarations persist from step to step) and
// answers each with a `done` frame. A frame is "MOATSESS1 <len>\n" and <len>
// bytes of UTF-8 JSON.
//
// fd 3 is read through a net.Socket (libuv opens it close-on-exec, so a child
// process never inherits it); the socket keeps the event loop alive between
// steps, so timers and promises of earlier steps run on. An error thrown by
// such async work is printed on stderr, never the driver's death.
//
// Nothing here is trusted by the host: the step's code shares this process and
// can write to fd 3 itself; it only lies about its own step. The driver never
// writes anything of the code or the files anywhere but the step's own output.
"use strict";
const fs = require("node:fs");
const net = require("node:net");
const path = require("node:path");
const util = require("node:util");
const vm = require("node:vm");
const { createRequire } = require("node:module");

const MAGIC = "MOATSESS1 ";
const CTL = 3;
const VALUE_MAX = 64 * 1024;
// an error's type and message in `done` (the whole message is in the stack)
const NAME_MAX = 256;
const MESSAGE_MAX = 8 * 1024;
// where the step's files go; MOAT_SESSION_ROOT is for the host-side tests only
const ROOT = process.env.MOAT_SESSION_ROOT || "/sandbox";
delete process.env.MOAT_SESSION_ROOT;
// a code context's driver (docs/CONTEXTS.md) sends each result as it is made
// (a `result` frame; stdout and stderr to pipes are synchronous, so what the
// step wrote before is in them first)
const EVENTS = process.env.MOAT_SESSION_EVENTS === "1";
delete process.env.MOAT_SESSION_EVENTS;
let eventCtl = null;
// a TypeScript context's driver: each cell goes through esbuild's transform
// (in the sandbox, as a cold run's TypeScript does) before it runs
const TS = process.env.MOAT_SESSION_TS === "1";
delete process.env.MOAT_SESSION_TS;
let stepSeq = 0;
const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
// results (docs/SESSIONS.md, "Results"): a MIME bundle's entry, one step's
// results in all; an error's traceback
const RESULT_MAX = 4 * 1024 * 1024;
const RESULTS_MAX = 6 * 1024 * 1024;
const RESULTS_ITEMS_MAX = 64;
const TRACEBACK_LINES_MAX = 500;
const TRACEBACK_MAX = 64 * 1024;
const REPR_METHODS = [
  ["text/html", "_repr_html_"], ["text/markdown", "_repr_markdown_"],
  ["image/svg+xml", "_repr_svg_"], ["image/png", "_repr_png_"], ["image/jpeg", "_repr_jpeg_"],
  ["text/latex", "_repr_latex_"], ["application/json", "_repr_json_"],
  ["application/javascript", "_repr_javascript_"],
];
const MIME_TYPES = new Set(["text/plain", ...REPR_METHODS.map(([m]) => m)]);
// what a step's stack trace does not show: the driver and node's own frames
const HIDDEN = [__filename, "(node:", "at node:"];

class ProtocolError extends Error {}

function die(msg) {
  try { fs.writeSync(2, `moat session driver: ${msg}\n`); } catch { /* nothing to tell */ }
  process.exit(2);
}

// The frames in buf: [objects], the rest. ProtocolError on a malformed one.
function parseFrames(buf) {
  const out = [];
  for (;;) {
    const nl = buf.indexOf(10);
    if (nl < 0) {
      if (buf.length > MAGIC.length + 11) throw new ProtocolError("bad frame header");
      return [out, buf];
    }
    const head = buf.subarray(0, nl).toString("latin1");
    const digits = head.slice(MAGIC.length);
    if (!head.startsWith(MAGIC) || !/^[0-9]{1,10}$/.test(digits)) throw new ProtocolError("bad frame header");
    const n = Number(digits);
    if (buf.length - nl - 1 < n) return [out, buf];
    const body = buf.subarray(nl + 1, nl + 1 + n);
    let obj;
    try {
      obj = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
    } catch {
      throw new ProtocolError("a frame is not UTF-8 JSON");
    }
    if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new ProtocolError("a frame is not a JSON object");
    out.push(obj);
    buf = buf.subarray(nl + 1 + n);
  }
}

function b64(s) {
  if (typeof s !== "string" || !B64.test(s)) throw new ProtocolError("a run frame holds bad base64");
  return Buffer.from(s, "base64");
}

// A run frame's {seq, code, stdin, files: [[path, Buffer]]}; ProtocolError if malformed.
function parseRun(obj) {
  if (obj.type !== "run") throw new ProtocolError("not a run frame");
  const { seq, code } = obj;
  const stdin = obj.stdin ?? "";
  const files = obj.files ?? [];
  if (!Number.isSafeInteger(seq) || typeof code !== "string" || typeof stdin !== "string" || !Array.isArray(files)) {
    throw new ProtocolError("a run frame's fields have the wrong types");
  }
  const out = files.map((f) => {
    if (!Array.isArray(f) || f.length !== 2 || typeof f[0] !== "string") {
      throw new ProtocolError("a run frame's file is not [path, base64]");
    }
    return [f[0], b64(f[1])];
  });
  return { seq, code, stdin: b64(stdin), files: out };
}

// Whether rel is a file path a step may write: relative, no `..`, no NUL.
function pathOk(rel) {
  if (!rel || rel.startsWith("/") || rel.includes("\0")) return false;
  const parts = rel.split("/");
  return !parts.includes("..") && parts[parts.length - 1] !== "" && parts[parts.length - 1] !== ".";
}

// Write every file under ROOT: an error {type, message}, or null.
function writeFiles(files) {
  if (!files.every(([p]) => pathOk(p))) {
    return { type: "Error", message: "a file's path is absolute or has a '..' component: nothing written" };
  }
  for (const [rel, content] of files) {
    const p = path.join(ROOT, rel);
    try {
      fs.mkdirSync(path.dirname(p), { recursive: true, mode: 0o755 });
      fs.writeFileSync(p, content, { mode: 0o644 });
    } catch (e) {
      return { type: "Error", message: `a file could not be written: ${e.code || "error"}` };
    }
  }
  return null;
}

// fd 0 becomes the step's stdin: the bytes in an unlinked file under /tmp, or
// /dev/null. node has no dup2: fd 0 is closed and the file opened at once, so
// it gets the lowest free fd, 0.
function setStdin(data, seq) {
  let fd;
  try {
    fs.closeSync(0);
  } catch (e) {
    if (e.code !== "EBADF") throw e; // the step closed it (process.stdin's end)
  }
  if (data.length) {
    const name = `/tmp/.moat-stdin-${process.pid}-${seq}-${Math.random().toString(36).slice(2)}`;
    fd = fs.openSync(name, "wx+", 0o600);
    fs.unlinkSync(name);
    let off = 0;
    while (off < data.length) off += fs.writeSync(fd, data, off, data.length - off, off);
  } else {
    fd = fs.openSync("/dev/null", "r");
  }
  if (fd !== 0) {
    fs.closeSync(fd);
    process.stderr.write("moat: the step's stdin could not be set\n");
  }
}

function safe(f, dflt) {
  try { return f(); } catch { return dflt; }
}

// s cut to at most limit bytes of UTF-8 at a character's edge: [text, was it cut].
function cut(s, limit) {
  const b = Buffer.from(s, "utf8");
  if (b.length <= limit) return [b.toString("utf8"), false];
  let end = limit;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--;
  return [b.subarray(0, end).toString("utf8"), true];
}

function isError(e) {
  return e !== null && typeof e === "object" && safe(() => typeof e.stack === "string", false);
}

// What stderr shows of an exception: its stack without the driver's frames.
function describe(e) {
  if (!isError(e)) return `Uncaught ${safe(() => util.inspect(e), "exception")}`;
  const lines = safe(() => e.stack, "").split("\n");
  return lines.filter((l) => !/^\s+at /.test(l) || !HIDDEN.some((h) => l.includes(h))).join("\n");
}

function errorOf(e) {
  let type = "Error";
  let message;
  if (!isError(e)) {
    message = cut(safe(() => util.inspect(e), "exception"), MESSAGE_MAX)[0];
  } else {
    type = cut(safe(() => String(e.name), "Error"), NAME_MAX)[0];
    message = cut(safe(() => String(e.message), ""), MESSAGE_MAX)[0];
  }
  // Jupyter's name, value and traceback (lines, as on stderr)
  const traceback = [];
  let total = 0;
  const lines = describe(e).split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = cut(lines[i], MESSAGE_MAX)[0];
    if (traceback.length >= TRACEBACK_LINES_MAX - 1 || total + line.length > TRACEBACK_MAX) {
      traceback.push(`... (${lines.length - i} more lines)`);
      break;
    }
    traceback.push(line);
    total += line.length;
  }
  return { type, message, name: type, value: message, traceback };
}

// A result's MIME bundle: the object's _repr_*_ methods (as in Python), a
// bundle display.html() & co. made, text/plain always; [data, was it cut].
const BUNDLE = Symbol("moat.bundle");
function mimeBundle(obj) {
  const data = {};
  let was = false;
  if (obj !== null && typeof obj === "object" && obj[BUNDLE]) {
    Object.assign(data, obj[BUNDLE]);
  } else if (obj !== null && (typeof obj === "object" || typeof obj === "function")) {
    for (const [mime, meth] of REPR_METHODS) {
      const f = safe(() => obj[meth], undefined);
      if (typeof f !== "function") continue;
      try {
        let v = f.call(obj);
        if (v === null || v === undefined) continue;
        if (Buffer.isBuffer(v) || v instanceof Uint8Array) v = Buffer.from(v).toString("base64");
        if (mime === "application/json" || typeof v === "string") data[mime] = v;
      } catch (e) {
        try { process.stderr.write(`moat: ${meth} failed: ${safe(() => String(e), "error")}\n`); } catch { /* */ }
      }
    }
  }
  for (const k of Object.keys(data)) {
    const n = safe(() => JSON.stringify(data[k]).length, Infinity);
    if (n > RESULT_MAX || (k !== "application/json" && typeof data[k] !== "string")) {
      delete data[k];
      was = true;
    }
  }
  if (typeof data["text/plain"] !== "string") {
    const text = obj && obj[BUNDLE] ? "" : safe(() => util.inspect(obj, { maxStringLength: VALUE_MAX }), "<inspect failed>");
    const [t, c] = cut(text, VALUE_MAX);
    data["text/plain"] = t;
    was = was || c;
  }
  return [data, was];
}

// One step's results, in order, within their bounds (null between steps).
let results = null;
function addResult(obj, main) {
  if (!results) return;
  const [data, c] = mimeBundle(obj);
  const n = safe(() => JSON.stringify(data).length, Infinity);
  if (results.items.length >= RESULTS_ITEMS_MAX || results.size + n > RESULTS_MAX) {
    results.truncated = true;
    return;
  }
  const item = { isMain: Boolean(main), data };
  results.items.push(item);
  results.size += n;
  results.truncated = results.truncated || c;
  if (EVENTS && eventCtl) sendEvent({ type: "result", seq: stepSeq, result: item });
}

// display(obj, ...): each object a result (its MIME bundle); display.html(s),
// .markdown, .svg, .png, .jpeg, .latex, .json, .javascript: one of that type.
function display(...objs) {
  for (const o of objs) addResult(o, false);
}
for (const [mime, name] of [["text/html", "html"], ["text/markdown", "markdown"], ["image/svg+xml", "svg"],
  ["image/png", "png"], ["image/jpeg", "jpeg"], ["text/latex", "latex"], ["application/json", "json"],
  ["application/javascript", "javascript"]]) {
  display[name] = (v) => {
    if (Buffer.isBuffer(v) || v instanceof Uint8Array) v = Buffer.from(v).toString("base64");
    addResult({ [BUNDLE]: { [mime]: mime === "application/json" ? v : String(v) } }, false);
  };
}

// The host's interrupt (SIGINT): a step's synchronous code is stopped by vm's
// breakOnSigint; a step awaiting a promise stops waiting (the promise's own
// work goes on). Between steps it is dropped.
let interruptStep = null;
function interrupted() {
  const e = new Error("Script execution was interrupted by `SIGINT`");
  e.code = "ERR_SCRIPT_EXECUTION_INTERRUPTED";
  return e;
}

function report(e) {
  try { process.stderr.write(describe(e) + "\n"); } catch { /* stderr gone */ }
}

// import() in a step loads as the main program's would; node 20 says once on
// stderr that the option doing it is experimental, which is the driver's
// business, not the step's output
const emitWarning = process.emitWarning;
process.emitWarning = function (warning, ...rest) {
  if (String(warning && warning.message !== undefined ? warning.message : warning).includes("USE_MAIN_CONTEXT_DEFAULT_LOADER")) return;
  return emitWarning.call(this, warning, ...rest);
};

const scriptOptions = (filename, extra) => {
  const o = { filename, ...extra };
  if (vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER) {
    o.importModuleDynamically = vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;
  }
  return o;
};

// The step's script; code with a top-level await that does not compile as a
// script is run wrapped in an async function (its declarations are then local).
const WRAP = "(async () => {";
function compile(code, filename) {
  try {
    return new vm.Script(code, scriptOptions(filename));
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
    try {
      return new vm.Script(`${WRAP}${code}\n})()`, scriptOptions(filename, { columnOffset: -WRAP.length }));
    } catch {
      throw e;
    }
  }
}

const isThenable = (v) =>
  v !== null && (typeof v === "object" || typeof v === "function") && typeof v.then === "function";

// A TypeScript cell as JavaScript (types stripped, statements kept as they
// are: declarations persist as a JavaScript cell's do); a SyntaxError with
// esbuild's message when it does not parse.
function transpile(code) {
  const r = require("node:child_process").spawnSync("esbuild", ["--loader=ts", "--log-level=error"],
    { input: code, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (r.error) {
    throw new Error(r.error.code === "ENOENT" ? "TypeScript needs esbuild (Debian package 'esbuild')"
      : `esbuild failed: ${r.error.code || "error"}`);
  }
  if (r.status !== 0) {
    const e = new SyntaxError(String(r.stderr || "").trim().slice(0, MESSAGE_MAX) || "esbuild refused the cell");
    e.stack = `SyntaxError: ${e.message}`;
    throw e;
  }
  return r.stdout;
}

async function runCode(seq, code) {
  let value = null;
  let error = null;
  try {
    if (TS) code = transpile(code);
    let v = compile(code, `cell-${seq}.${TS ? "ts" : "js"}`).runInThisContext({ breakOnSigint: true });
    if (isThenable(v)) {
      let stop;
      const stopped = new Promise((_, reject) => { stop = reject; });
      interruptStep = () => stop(interrupted());
      try {
        v = await Promise.race([v, stopped]);
      } finally {
        interruptStep = null;
      }
    }
    if (v !== undefined) {
      value = util.inspect(v, { maxStringLength: VALUE_MAX });
      addResult(v, true);
    }
  } catch (e) {
    report(e);
    error = errorOf(e);
  }
  const pc = process.exitCode;
  process.exitCode = undefined;
  let exitCode = 0;
  if (error) exitCode = 1;
  else if (pc !== undefined && pc !== null) exitCode = (Number(pc) | 0) & 0xff;
  return { exitCode, error, value };
}

const drain = (stream) =>
  new Promise((resolve) => {
    try {
      if (stream.destroyed || stream.writableEnded) return resolve();
      stream.write("", () => resolve());
    } catch {
      resolve();
    }
  });

let executionCount = 0;
async function step({ seq, code, stdin, files }) {
  let value = null;
  let truncated = false;
  let r;
  executionCount++;
  stepSeq = seq;
  results = { items: [], size: 0, truncated: false };
  const err = writeFiles(files);
  if (err) {
    process.stderr.write(`moat: ${err.message}\n`);
    r = { exitCode: 1, error: { ...err, name: err.type, value: err.message, traceback: [] }, value: null };
  } else {
    try {
      setStdin(stdin, seq);
    } catch (e) {
      process.stderr.write(`moat: the step's stdin could not be set: ${e.code || "error"}\n`);
    }
    r = await runCode(seq, code);
    if (r.value !== null) [value, truncated] = cut(r.value, VALUE_MAX);
  }
  const res = results;
  results = null;
  await Promise.all([drain(process.stdout), drain(process.stderr)]);
  return { type: "done", seq, exitCode: r.exitCode, error: r.error, value, valueTruncated: truncated,
    display: [], displayDropped: 0, results: res.items, resultsTruncated: res.truncated, executionCount };
}

const ACK = Buffer.from('MOATSESS1 14\n{"type":"ack"}', "latin1");
function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// An event frame mid-step (a code context's, docs/CONTEXTS.md): written
// whole and the host's ack awaited, synchronously (the fd is the socket's,
// non-blocking: EAGAIN waits a little), so that the host has read the
// output before the result and what the step writes next comes after it.
// The host sends nothing else during a step.
function sendEvent(obj) {
  const body = Buffer.from(JSON.stringify(obj), "utf8");
  let data = Buffer.concat([Buffer.from(`${MAGIC}${body.length}\n`, "latin1"), body]);
  while (data.length) {
    try {
      data = data.subarray(fs.writeSync(CTL, data));
    } catch (e) {
      if (e.code !== "EAGAIN") throw e;
      sleepMs(1);
    }
  }
  const ack = Buffer.alloc(ACK.length);
  let got = 0;
  while (got < ack.length) {
    try {
      const n = fs.readSync(CTL, ack, got, ack.length - got, null);
      if (n === 0) process.exit(0);
      got += n;
    } catch (e) {
      if (e.code !== "EAGAIN") throw e;
      sleepMs(1);
    }
  }
  if (!ack.equals(ACK)) die("not an ack frame");
}

function send(ctl, obj) {
  const body = Buffer.from(JSON.stringify(obj), "utf8");
  ctl.write(Buffer.concat([Buffer.from(`${MAGIC}${body.length}\n`, "latin1"), body]));
}

function main() {
  const ctl = new net.Socket({ fd: CTL, readable: true, writable: true });
  eventCtl = ctl;
  process.on("uncaughtException", report);
  process.on("unhandledRejection", report);
  process.on("SIGINT", () => { if (interruptStep) interruptStep(); });
  globalThis.display = display;
  globalThis.require = createRequire(ROOT + "/");
  try { process.chdir(ROOT); } catch { /* stays where it was started */ }

  let buf = Buffer.alloc(0);
  const queue = [];
  let busy = false;
  async function pump() {
    if (busy) return;
    busy = true;
    while (queue.length) {
      const run = queue.shift();
      send(ctl, await step(run));
    }
    busy = false;
  }
  ctl.on("data", (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    try {
      let frames;
      [frames, buf] = parseFrames(buf);
      // an ack an interrupt left unread (sendEvent's) is dropped
      for (const f of frames) if (f.type !== "ack") queue.push(parseRun(f));
    } catch (e) {
      die(e instanceof ProtocolError ? e.message : "bad frame");
    }
    pump();
  });
  ctl.on("end", () => {
    if (buf.length) die("the channel ended inside a frame");
    process.exit(0);
  });
  ctl.on("error", (e) => die(`the channel failed: ${e.code || "error"}`));
  send(ctl, { type: "ready", language: "javascript", version: process.versions.node });
}

if (require.main === module) main();
