// runtime/js/session.cjs, the node session driver, run as moat runs it
// (docs/SESSIONS.md, "The driver protocol"): a unix stream socket as fd 3 (node's
// stdio "pipe" is a socketpair), real pipes as fd 1 and 2 (FIFOs, read without
// waiting when `done` arrives), /dev/null as fd 0. No sandbox: the step's files
// go under a temporary directory (MOAT_SESSION_ROOT, for these tests only).
//
// Run: node --test tests/runtime/
"use strict";
const { test } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { spawn, execFileSync } = require("node:child_process");

const ROOT = path.resolve(__dirname, "..", "..");
const DRIVER = path.join(ROOT, "runtime", "js", "session.cjs");
const b64 = (s) => Buffer.from(s).toString("base64");

// A done frame's error as before issue 46 (Jupyter's name, value and
// traceback are checked on their own).
const typeAndMessage = (e) => e && { type: e.type, message: e.message };

class Driver {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "moat-session-test-"));
    // the read ends are their own open files, O_NONBLOCK: node makes the
    // write end it is given blocking (its stdio pipes are synchronous)
    const ends = ["out", "err"].map((n) => {
      const p = path.join(this.dir, `.${n}.fifo`);
      execFileSync("mkfifo", [p]);
      const r = fs.openSync(p, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      const w = fs.openSync(p, fs.constants.O_WRONLY);
      fs.unlinkSync(p);
      return [r, w];
    });
    this.fds = ends.map(([r]) => r);
    this.proc = spawn(process.execPath, [DRIVER], {
      stdio: ["ignore", ends[0][1], ends[1][1], "pipe"],
      env: { ...process.env, MOAT_SESSION_ROOT: this.dir, NODE_OPTIONS: "" },
      cwd: this.dir,
    });
    for (const [, w] of ends) fs.closeSync(w);
    this.ctl = this.proc.stdio[3];
    this.buf = Buffer.alloc(0);
    this.frames = [];
    this.waiting = null;
    this.ended = false;
    this.seq = 0;
    this.exited = new Promise((resolve) => this.proc.on("exit", (code) => resolve(code)));
    this.ctl.on("data", (d) => { this.buf = Buffer.concat([this.buf, d]); this.parse(); });
    this.ctl.on("end", () => { this.ended = true; this.parse(); });
    this.ctl.on("error", () => { this.ended = true; this.parse(); });
  }

  parse() {
    for (;;) {
      const nl = this.buf.indexOf(10);
      if (nl < 0) break;
      const head = this.buf.subarray(0, nl).toString();
      assert.match(head, /^MOATSESS1 \d+$/);
      const n = Number(head.slice(10));
      if (this.buf.length < nl + 1 + n) break;
      this.frames.push(JSON.parse(this.buf.subarray(nl + 1, nl + 1 + n).toString()));
      this.buf = this.buf.subarray(nl + 1 + n);
    }
    if (this.waiting && (this.frames.length || this.ended)) {
      const w = this.waiting;
      this.waiting = null;
      w(this.frames.length ? this.frames.shift() : null);
    }
  }

  // The next frame, or null at EOF.
  frame() {
    if (this.frames.length) return Promise.resolve(this.frames.shift());
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => { this.waiting = resolve; });
  }

  // What is in fd 1's and fd 2's pipes now, without waiting.
  drain() {
    return this.fds.map((fd) => {
      const parts = [];
      const b = Buffer.alloc(65536);
      for (;;) {
        let n;
        try {
          n = fs.readSync(fd, b, 0, b.length, null);
        } catch (e) {
          if (e.code === "EAGAIN") break;
          throw e;
        }
        if (n === 0) break;
        parts.push(Buffer.from(b.subarray(0, n)));
      }
      return Buffer.concat(parts).toString();
    });
  }

  send(obj) {
    const body = Buffer.from(JSON.stringify(obj));
    this.ctl.write(Buffer.concat([Buffer.from(`MOATSESS1 ${body.length}\n`), body]));
  }

  // One step: {done, out, err}.
  async run(code, { stdin = "", files = [] } = {}) {
    this.seq += 1; // what was written since the last step counts in this one, as the host does
    this.send({ type: "run", seq: this.seq, code, stdin: b64(stdin), files: files.map(([p, c]) => [p, b64(c)]) });
    const done = await this.frame();
    const [out, err] = this.drain();
    if (done) {
      assert.equal(done.type, "done");
      assert.equal(done.seq, this.seq);
    }
    return { done, out, err };
  }

  async ok(code, opts) {
    const r = await this.run(code, opts);
    assert.equal(r.done.exitCode, 0, r.err);
    assert.equal(r.done.error, null, r.err);
    return r;
  }

  close() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
    this.ctl.destroy();
    for (const fd of this.fds) fs.closeSync(fd);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function withDriver(t, fn) {
  const d = new Driver();
  t.after(() => d.close());
  const ready = await d.frame();
  assert.equal(ready.type, "ready");
  return fn(d, ready);
}

test("the ready frame", (t) => withDriver(t, (d, ready) => {
  assert.equal(ready.language, "javascript");
  assert.equal(ready.version, process.versions.node);
}));

test("state is kept across 50 steps: var, let, const, function, class, globals", (t) => withDriver(t, async (d) => {
  await d.ok("var n = 0; let calls = 0; const K = 1; function bump(k) { calls++; n += k * K; }\n" +
    "class C { static x = 5 }\nglobalThis.g = 'g'");
  for (let i = 1; i <= 50; i++) {
    const { out } = await d.ok(`bump(${i}); console.log(n)`);
    assert.equal(out, `${(i * (i + 1)) / 2}\n`);
  }
  const { done } = await d.ok("[n, calls, K, C.x, g]");
  assert.equal(done.value, "[ 1275, 50, 1, 5, 'g' ]");
}));

test("value is util.inspect of the completion value; undefined is null", (t) => withDriver(t, async (d) => {
  let r = await d.ok("let x = 41; x + 1");
  assert.equal(r.done.value, "42");
  assert.equal(r.done.valueTruncated, false);
  r = await d.ok("({a: 'b', n: null})");
  assert.equal(r.done.value, "{ a: 'b', n: null }");
  for (const code of ["undefined", "let y = 1", "console.log('hi')", "", "// comment", "function f() {}"]) {
    r = await d.ok(code);
    assert.equal(r.done.value, null, code);
  }
  r = await d.ok("null");
  assert.equal(r.done.value, "null");
  assert.deepEqual(r.done.display, []);
  assert.equal(r.done.displayDropped, 0);
}));

test("value is cut at 64 KiB at a character's edge", (t) => withDriver(t, async (d) => {
  let r = await d.ok("'é'.repeat(100000)");
  assert.equal(r.done.valueTruncated, true);
  const len = Buffer.byteLength(r.done.value);
  assert.ok(len <= 65536 && len > 65536 - 4, String(len));
  assert.ok(r.done.value.startsWith("'ééé"));
  assert.ok(!r.done.value.includes("\ufffd"));
  r = await d.ok("'x'.repeat(65534)");
  assert.equal(r.done.valueTruncated, false);
  assert.equal(r.done.value.length, 65536);
}));

test("an exception is an error with its stack on stderr, and the session goes on", (t) => withDriver(t, async (d) => {
  await d.ok("let kept = 1");
  let r = await d.run("function f() { throw new TypeError('bad thing') }\nconsole.log('before')\nf()");
  assert.equal(r.done.exitCode, 1);
  assert.deepEqual(typeAndMessage(r.done.error), { type: "TypeError", message: "bad thing" });
  assert.equal(r.done.value, null);
  assert.equal(r.out, "before\n");
  assert.match(r.err, /TypeError: bad thing/);
  assert.match(r.err, /at f \(cell-2\.js:1:22\)/);
  assert.match(r.err, /cell-2\.js:3:1/);
  assert.doesNotMatch(r.err, /session\.cjs|\(node:|at node:/);
  r = await d.run("let = ;");
  assert.equal(r.done.error.type, "SyntaxError");
  assert.doesNotMatch(r.err, /session\.cjs/);
  r = await d.run("throw 42");
  assert.equal(r.done.exitCode, 1);
  assert.deepEqual(typeAndMessage(r.done.error), { type: "Error", message: "42" });
  assert.match(r.err, /Uncaught 42/);
  r = await d.run("Promise.reject(new RangeError('later'))");
  assert.deepEqual(typeAndMessage(r.done.error), { type: "RangeError", message: "later" });
  r = await d.run("throw new Error('m'.repeat(30000))"); // cut at 8 KiB in done, whole on stderr
  assert.equal(r.done.error.message, "m".repeat(8192));
  assert.ok(r.err.includes("m".repeat(30000)));
  r = await d.ok("kept + 1");
  assert.equal(r.done.value, "2");
}));

test("process.exitCode is the step's exit code, then reset", (t) => withDriver(t, async (d) => {
  let r = await d.run("process.exitCode = 3");
  assert.equal(r.done.exitCode, 3);
  assert.equal(r.done.error, null);
  r = await d.ok("1");
  assert.equal(r.done.exitCode, 0);
}));

test("a promise is awaited; top-level await works", (t) => withDriver(t, async (d) => {
  let r = await d.ok("new Promise((res) => setTimeout(() => res({v: 7}), 50))");
  assert.equal(r.done.value, "{ v: 7 }");
  r = await d.ok("(async () => { await null; console.log('in'); return 'x' })()");
  assert.equal(r.out, "in\n");
  assert.equal(r.done.value, "'x'");
  r = await d.ok("const got = await new Promise((res) => setTimeout(() => res(5), 20));\nconsole.log(got * 2)");
  assert.equal(r.out, "10\n");
  assert.equal(r.done.value, null);
  r = await d.ok("var fromWrapped = 1; globalThis.tla = await Promise.resolve('kept')");
  r = await d.ok("[typeof fromWrapped, tla]"); // declarations in a wrapped step are local
  assert.equal(r.done.value, "[ 'undefined', 'kept' ]");
  r = await d.ok("globalThis.os = (await import('node:os')).EOL"); // an await the message does not name
  assert.equal(r.err, ""); // import() works, without a warning about how
  r = await d.ok("[os, typeof fromWrapped]");
  assert.equal(r.done.value, "[ '\\n', 'undefined' ]");
  r = await d.ok("import('./m.mjs').then((m) => m.v)", { files: [["m.mjs", "export const v = 3"]] });
  assert.equal(r.done.value, "3"); // import() from the session's root
  r = await d.run("await Promise.reject(new Error('no'))");
  assert.deepEqual(typeAndMessage(r.done.error), { type: "Error", message: "no" });
  r = await d.run("await 1; let = ;"); // another syntax error stays the original one
  assert.equal(r.done.error.type, "SyntaxError");
}));

test("async errors between steps are printed, never fatal; timers of earlier steps run", (t) => withDriver(t, async (d) => {
  // the rejection is reported when node gets to it: in this step or the next
  const first = await d.ok("setTimeout(() => { throw new Error('async boom') }, 300);\n" +
    "Promise.reject(new Error('unhandled'));\nglobalThis.ticks = 0; setInterval(() => ticks++, 5); 0");
  await new Promise((r) => setTimeout(r, 1000));
  const r = await d.ok("ticks > 5");
  assert.equal(r.done.value, "true");
  assert.match(r.err, /Error: async boom/); // after the first step's done: in the next one's
  assert.match(first.err + r.err, /Error: unhandled/);
}));

test("stdin per step", (t) => withDriver(t, async (d) => {
  let r = await d.ok("require('fs').readFileSync(0, 'utf8')", { stdin: "one\ntwo\n" });
  assert.equal(r.done.value, "'one\\ntwo\\n'");
  r = await d.ok("require('fs').readFileSync(0, 'utf8')");
  assert.equal(r.done.value, "''");
  r = await d.ok("require('fs').readFileSync(0)", { stdin: Buffer.from([0, 255]) });
  assert.equal(r.done.value, "<Buffer 00 ff>");
  r = await d.ok("new Promise((res) => { let s = ''; process.stdin.on('data', (c) => { s += c })" +
    ".on('end', () => res(s)) })", { stdin: "streamed" });
  assert.equal(r.done.value, "'streamed'"); // process.stdin reads the first step's; later steps read fd 0
  r = await d.ok("require('fs').readFileSync(0, 'utf8')", { stdin: "after the stream" });
  assert.equal(r.done.value, "'after the stream'");
  await d.ok("require('fs').closeSync(0)"); // a step that closed fd 0 leaves the next its stdin
  r = await d.ok("require('fs').readFileSync(0, 'utf8')", { stdin: "after a close" });
  assert.equal(r.done.value, "'after a close'");
  r = await d.ok("require('child_process').execFileSync('cat', {stdio: ['inherit', 'pipe', 'pipe']}).toString()",
    { stdin: "to cat" });
  assert.equal(r.done.value, "'to cat'");
}));

test("files are written; an absolute or .. path is refused, nothing written", (t) => withDriver(t, async (d) => {
  let r = await d.ok("const fs = require('fs'); fs.readFileSync('a/b/c.txt', 'utf8') + fs.readFileSync('top', 'utf8')",
    { files: [["a/b/c.txt", "deep "], ["top", "top"]] });
  assert.equal(r.done.value, "'deep top'");
  assert.equal(fs.statSync(path.join(d.dir, "a", "b", "c.txt")).mode & 0o777, 0o644);
  assert.equal(fs.statSync(path.join(d.dir, "a")).mode & 0o777, 0o755);
  r = await d.ok("require('./a/b/c.txt.js')", { files: [["a/b/c.txt.js", "module.exports = 'required'"]] });
  assert.equal(r.done.value, "'required'"); // require resolves from the session's root
  for (const bad of ["../moat-session-escape", "/tmp/moat-abs-js", "a/../../x", "", "a/"]) {
    r = await d.run("globalThis.ran = true", { files: [["ok.txt", "no"], [bad, "x"]] });
    assert.equal(r.done.exitCode, 1, bad);
    assert.equal(r.done.error.type, "Error");
    assert.ok(!fs.existsSync(path.join(d.dir, "ok.txt")));
    assert.ok(!fs.existsSync(path.join(path.dirname(d.dir), "moat-session-escape")));
    assert.ok(!fs.existsSync("/tmp/moat-abs-js"));
  }
  r = await d.ok("typeof ran");
  assert.equal(r.done.value, "'undefined'"); // the code did not run
}));

test("output written before done is in the pipe when done arrives", (t) => withDriver(t, async (d) => {
  const { out, err } = await d.ok("process.stdout.write('o'.repeat(50000)); console.error('e'.repeat(3000));" +
    "require('fs').writeSync(1, '|raw')");
  assert.equal(out, "o".repeat(50000) + "|raw");
  assert.equal(err, "e".repeat(3000) + "\n");
}));

test("process.exit ends the process", (t) => withDriver(t, async (d) => {
  await d.ok("let x = 1");
  d.seq += 1;
  d.send({ type: "run", seq: d.seq, code: "console.log('last'); process.exit(5)", stdin: "", files: [] });
  assert.equal(await d.frame(), null);
  assert.equal(await d.exited, 5);
  assert.equal(d.drain()[0], "last\n");
}));

test("EOF on the channel ends it quietly", (t) => withDriver(t, async (d) => {
  d.ctl.end();
  assert.equal(await d.exited, 0);
  assert.equal(d.drain()[1], "");
}));

test("a malformed frame: one line on stderr, exit 2", async (t) => {
  const bad = ["MOATSESS2 2\n{}", "MOATSESS1 x\n", "MOATSESS1 12345678901\n", "MOATSESS1 3\n{]}",
    "MOATSESS1 2\n[]", 'MOATSESS1 15\n{"type":"run"}',
    'MOATSESS1 43\n{"type":"run","seq":1,"code":"","stdin":"*"}',
    "garbage without a newline".repeat(3), "MOATSESS1 10\n{}"];
  for (const frame of bad) {
    const d = new Driver();
    t.after(() => d.close());
    assert.equal((await d.frame()).type, "ready");
    d.ctl.end(frame);
    assert.equal(await d.frame(), null);
    assert.equal(await d.exited, 2, frame);
    const err = d.drain()[1];
    assert.match(err, /^moat session driver: [^\n]*\n$/, frame);
  }
});

test("fd 3 is not inherited by a child process", (t) => withDriver(t, async (d) => {
  const r = await d.ok("require('child_process').execSync('readlink /proc/$$/fd/3 || echo none'," +
    " {stdio: ['ignore', 'pipe', 'ignore']}).toString()");
  assert.equal(r.done.value, "'none\\n'");
}));

test("the step does not see the driver's names", (t) => withDriver(t, async (d) => {
  for (const name of ["main", "step", "runCode", "MAGIC", "fs", "vm", "ROOT"]) {
    const r = await d.ok(`typeof ${name}`);
    assert.equal(r.done.value, "'undefined'", name);
  }
  const r = await d.ok("[typeof require, typeof module, process.argv.length]");
  assert.equal(r.done.value, "[ 'function', 'undefined', 2 ]");
}));

// issue 46: a notebook inside
test("SIGINT interrupts a step's code or its await, is dropped between steps", (t) => withDriver(t, async (d) => {
  await d.ok("var k = 7");
  d.proc.kill("SIGINT");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await d.ok("k * 6")).done.value, "42");
  for (const code of ["while (true) {}", "await new Promise((r) => setTimeout(r, 60000))"]) {
    d.seq += 1;
    d.send({ type: "run", seq: d.seq, code, stdin: "", files: [] });
    await new Promise((r) => setTimeout(r, 1000));
    d.proc.kill("SIGINT");
    const done = await d.frame();
    assert.equal(done.seq, d.seq);
    assert.match(done.error.message, /interrupted by `SIGINT`/, code);
    d.drain();
  }
  assert.equal((await d.ok("k * 6")).done.value, "42");
}));

test("results: display(), display.html() & co., the completion value main; Jupyter's error", (t) => withDriver(t, async (d) => {
  const { done } = await d.ok(
    "display.html('<b>h</b>'); display.png(Buffer.from([0x89, 0x50])); display.json({ a: [1] });\n" +
    "display({ _repr_markdown_() { return '# m'; }, toString() { return 'o'; } }, 'two');\n" +
    "({ v: 1 })");
  const r = done.results;
  assert.equal(r.length, 6, JSON.stringify(r));
  assert.deepEqual(r[0], { isMain: false, data: { "text/html": "<b>h</b>", "text/plain": "" } });
  assert.equal(r[1].data["image/png"], "iVA=");
  assert.deepEqual(r[2].data["application/json"], { a: [1] });
  assert.equal(r[3].data["text/markdown"], "# m");
  assert.equal(r[4].data["text/plain"], "'two'");
  assert.deepEqual(r[5], { isMain: true, data: { "text/plain": "{ v: 1 }" } });
  assert.equal(done.executionCount, 1);
  assert.equal(done.resultsTruncated, false);
  const e = (await d.run("function g() { throw new RangeError('rr'); }\ng()")).done.error;
  assert.equal(e.type, "RangeError");
  assert.equal(e.message, "rr");
  assert.equal(e.name, "RangeError");
  assert.equal(e.value, "rr");
  assert.ok(e.traceback.some((l) => l.includes("RangeError: rr")), JSON.stringify(e));
  assert.ok(!e.traceback.some((l) => l.includes("session.cjs") || l.includes("\n")), JSON.stringify(e));
  const many = (await d.ok("for (let i = 0; i < 70; i++) display(i)")).done;
  assert.equal(many.results.length, 64);
  assert.equal(many.resultsTruncated, true);
  assert.equal(many.executionCount, 3);
}));
