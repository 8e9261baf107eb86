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
const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
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
  if (!isError(e)) return { type: "Error", message: cut(safe(() => util.inspect(e), "exception"), MESSAGE_MAX)[0] };
  return {
    type: cut(safe(() => String(e.name), "Error"), NAME_MAX)[0],
    message: cut(safe(() => String(e.message), ""), MESSAGE_MAX)[0],
  };
}

function report(e) {
  try { process.stderr.write(describe(e) + "\n"); } catch { /* stderr gone */ }
}

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
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code) || !/await/.test(e.message)) throw e;
    try {
      return new vm.Script(`${WRAP}${code}\n})()`, scriptOptions(filename, { columnOffset: -WRAP.length }));
    } catch {
      throw e;
    }
  }
}

const isThenable = (v) =>
  v !== null && (typeof v === "object" || typeof v === "function") && typeof v.then === "function";

async function runCode(seq, code) {
  let value = null;
  let error = null;
  try {
    let v = compile(code, `cell-${seq}.js`).runInThisContext();
    if (isThenable(v)) v = await v;
    if (v !== undefined) value = util.inspect(v, { maxStringLength: VALUE_MAX });
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

async function step({ seq, code, stdin, files }) {
  let value = null;
  let truncated = false;
  let r;
  const err = writeFiles(files);
  if (err) {
    process.stderr.write(`moat: ${err.message}\n`);
    r = { exitCode: 1, error: err, value: null };
  } else {
    try {
      setStdin(stdin, seq);
    } catch (e) {
      process.stderr.write(`moat: the step's stdin could not be set: ${e.code || "error"}\n`);
    }
    r = await runCode(seq, code);
    if (r.value !== null) [value, truncated] = cut(r.value, VALUE_MAX);
  }
  await Promise.all([drain(process.stdout), drain(process.stderr)]);
  return { type: "done", seq, exitCode: r.exitCode, error: r.error, value, valueTruncated: truncated,
    display: [], displayDropped: 0 };
}

function send(ctl, obj) {
  const body = Buffer.from(JSON.stringify(obj), "utf8");
  ctl.write(Buffer.concat([Buffer.from(`${MAGIC}${body.length}\n`, "latin1"), body]));
}

function main() {
  const ctl = new net.Socket({ fd: CTL, readable: true, writable: true });
  process.on("uncaughtException", report);
  process.on("unhandledRejection", report);
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
      for (const f of frames) queue.push(parseRun(f));
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
