// Host-side tests of runtime/js/pool.cjs's esbuild service client (the
// warm TypeScript sandbox's esbuild, docs/SERVE.md): the packet codec, the
// command line's wording of the service's hints, and which esbuild waits --
// the service where it is the version spoken, else the command line.
// The warm and cold results themselves are compared in the sandbox by
// serve/pool_typescript.
//
// Run: node --test tests/runtime/
"use strict";
const { test } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { spawnSync } = require("node:child_process");

const ROOT = path.resolve(__dirname, "..", "..");
const { forTests: pool } = require(path.join(ROOT, "runtime", "js", "pool.cjs"));

const b64 = (s) => Buffer.from(s).toString("base64");

test("packets round-trip every kind of value", () => {
  const value = { command: "build", key: 7, write: true, context: false, none: null,
    flags: ["--bundle", "é"], stdinContents: Buffer.from([0, 255, 10]), nested: { a: [1, { b: "c" }] } };
  const p = pool.encodePacket(3, value);
  assert.equal(p.readUInt32LE(0), p.length - 4);
  const d = pool.decodePacket(p.subarray(4));
  assert.equal(d.id, 3);
  assert.equal(d.response, false); // a request: the low bit clear
  assert.deepEqual({ ...d.value, nested: { ...d.value.nested, a: [1, { ...d.value.nested.a[1] }] } },
    { ...value, stdinContents: value.stdinContents });
  // a response has the low bit set
  const r = Buffer.from(p);
  r.writeUInt32LE(r.readUInt32LE(4) | 1, 4);
  assert.equal(pool.decodePacket(r.subarray(4)).response, true);
});

test("a malformed packet is refused, not half read", () => {
  const body = pool.encodePacket(1, { errors: [], warnings: ["w"] }).subarray(4);
  assert.throws(() => pool.decodePacket(body.subarray(0, body.length - 1)), /bad esbuild packet/);
  assert.throws(() => pool.decodePacket(Buffer.concat([body, Buffer.from([0])])), /bad esbuild packet/);
  const badTag = Buffer.from(body);
  badTag[4] = 9;
  assert.throws(() => pool.decodePacket(badTag), /bad esbuild packet/);
  // a length past the end
  assert.throws(() => pool.decodePacket(Buffer.from([2, 0, 0, 0, 3, 0xff, 0xff, 0, 0, 0x61])),
    /bad esbuild packet/);
});

// The service's wording (esbuild 0.17.0, logger.JSAPI) and the command
// line's (logger.CLIAPI), from esbuild's js_parser.go and resolver.go.
const JSX_API = `  The esbuild loader for this file is currently set to "js" but it must be set to "jsx" to be able to parse JSX syntax. You can use "loader: { '.js': 'jsx' }" to do that.`;
const JSX_CLI = `  The esbuild loader for this file is currently set to "js" but it must be set to "jsx" to be able to parse JSX syntax. You can use "--loader:.js=jsx" to do that.`;
const COND_API = `  Consider enabling the "my cond" condition if this package expects it to be enabled. You can use "conditions: ['my cond']" to do that:`;
const COND_CLI = `  Consider enabling the "my cond" condition if this package expects it to be enabled. You can use "--conditions=my cond" to do that:`;

test("the service's hints are given the command line's words", () => {
  const msg = (note) => Buffer.from(`✘ [ERROR] x\n\n    j.js:1:17:\n      1 │ <div/>\n\n${note}\n\n`);
  assert.equal(pool.cliWording(msg(JSX_API)).toString(), msg(JSX_CLI).toString());
  assert.equal(pool.cliWording(msg(COND_API)).toString(), msg(COND_CLI).toString());
});

test("nothing but a whole note line is reworded, and other bytes pass as they are", () => {
  // a code excerpt holding the words, a message line, a note with more after
  // it, and bytes that are not UTF-8 (a file's own, in an excerpt)
  const lines = [
    `      1 │ ${JSX_API.trim()}`,
    `✘ [ERROR] ${JSX_API.trim()}`,
    `${JSX_API} `,
    ` ${JSX_API}`,
  ];
  const text = Buffer.concat([Buffer.from(lines.join("\n") + "\n      2 │ "), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from("\n")]);
  assert.deepEqual(pool.cliWording(text), text);
  assert.deepEqual(pool.cliWording(Buffer.alloc(0)), Buffer.alloc(0));
});

// A spec as moat sends it (src/pool/warm.c): the files in dir, esbuild looked
// up in search.
function spec(dir, search = dir) {
  return {
    transpiler: b64("esbuild"), path: b64(search), code: b64(path.join(dir, "main.ts")),
    args: ["--bundle", "--platform=node", "--format=esm", "--packages=external", "--log-level=error",
      `--outfile=${path.join(dir, ".moat-main.mjs")}`].map(b64),
    run: b64(path.join(dir, ".moat-main.mjs")),
  };
}

function fakeEsbuild(dir, script) {
  const exe = path.join(dir, "esbuild");
  fs.writeFileSync(exe, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return exe;
}

function hostEsbuild() {
  for (const d of ["/usr/local/bin", "/usr/bin", "/bin"]) {
    const exe = path.join(d, "esbuild");
    if (fs.existsSync(exe)) return exe;
  }
  return null;
}

const host = hostEsbuild();
const hostVersion = host ? spawnSync(host, ["--version"], { encoding: "utf8" }).stdout.trim() : null;

test("the esbuild of the version spoken waits as the service, through its warm-up",
  { timeout: 30000, skip: hostVersion !== pool.SERVICE_VERSION && `no esbuild ${pool.SERVICE_VERSION} on this host (${hostVersion})` },
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moat-pool-"));
    try {
      const esb = await pool.prestart(spec(dir, path.dirname(host)), dir);
      assert.equal(esb.kind, "service");
      assert.equal(esb.version, pool.SERVICE_VERSION);
      assert.deepEqual(fs.readdirSync(dir), []); // the warm-up wrote nothing
      await pool.stop(esb);
    } finally {
      fs.rmSync(dir, { recursive: true });
    }
  });

test("another esbuild, or one that speaks nonsense, waits as a cold run's would",
  { timeout: 30000, skip: !host && "no esbuild on this host" },
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moat-pool-"));
    try {
      // what esbuild answers a host of another version, then the command line
      fakeEsbuild(dir, `case "$1" in --service=*) echo "Cannot start service: Host version" >&2; exit 1;; esac\nexec ${host} "$@"`);
      let esb = await pool.prestart(spec(dir), dir);
      assert.equal(esb.kind, "cli");
      await pool.stop(esb);
      // a version packet, then a packet with an unknown tag
      fakeEsbuild(dir, `case "$1" in --service=*) printf '\\006\\000\\000\\000${pool.SERVICE_VERSION}\\005\\000\\000\\000\\000\\000\\000\\000\\011'; exec sleep 60;; esac\nexec ${host} "$@"`);
      esb = await pool.prestart(spec(dir), dir);
      assert.equal(esb.kind, "cli");
      await pool.stop(esb);
      // a version packet, then silence: given up on after 5 s
      fakeEsbuild(dir, `case "$1" in --service=*) printf '\\006\\000\\000\\000${pool.SERVICE_VERSION}'; exec sleep 60;; esac\nexec ${host} "$@"`);
      const t0 = Date.now();
      esb = await pool.prestart(spec(dir), dir);
      assert.equal(esb.kind, "cli");
      assert.ok(Date.now() - t0 < 8000);
      await pool.stop(esb);
    } finally {
      fs.rmSync(dir, { recursive: true });
    }
  });

// A warm node's program that ends by itself ends at process.reallyExit once
// its 'exit' listeners have run (quickExit: node's teardown after them is of
// no use to a sandbox that dies with it), with the status node would give it,
// its output whole, and a wrapper the program put round process.emit run first.
test("a program that ends by itself ends after its exit listeners, with its status", () => {
  const prog = `
    const { forTests } = require(${JSON.stringify(path.join(ROOT, "runtime", "js", "pool.cjs"))});
    forTests.quickExit();
    const really = process.reallyExit;
    process.reallyExit = (code) => { process.stdout.write("reallyExit " + code + "\\n"); really(code); };
    const emit = process.emit;
    process.emit = function (ev, ...a) {
      const r = emit.call(this, ev, ...a);
      if (ev === "exit") process.stdout.write("wrapper after exit\\n");
      return r;
    };
    let n = 0;
    process.on("beforeExit", () => { if (n++ < 1) setTimeout(() => process.stdout.write("more work\\n"), 1); });
    process.on("exit", (code) => { process.stdout.write("exit listener " + code + "\\n"); process.exitCode = 7; });
    process.stdout.write("x".repeat(200000) + "\\n");
  `;
  const r = spawnSync(process.execPath, ["-e", prog], { encoding: "utf8", maxBuffer: 1 << 20 });
  assert.equal(r.stderr, "");
  assert.equal(r.status, 7);
  const lines = r.stdout.split("\n");
  assert.equal(lines[0].length, 200000);
  assert.deepEqual(lines.slice(1), ["more work", "exit listener 0", "wrapper after exit", "reallyExit 7", ""]);
});

test("process.exit() and an uncaught exception end as they did", () => {
  const req = JSON.stringify(path.join(ROOT, "runtime", "js", "pool.cjs"));
  const exit = spawnSync(process.execPath, ["-e",
    `require(${req}).forTests.quickExit(); process.on("exit", (c) => console.log("exit", c)); process.exit(3)`],
  { encoding: "utf8" });
  assert.equal(exit.status, 3);
  assert.equal(exit.stdout, "exit 3\n");
  const thrown = spawnSync(process.execPath, ["-e",
    `require(${req}).forTests.quickExit(); setTimeout(() => { throw new Error("boom") }, 1)`],
  { encoding: "utf8" });
  assert.equal(thrown.status, 1);
  assert.match(thrown.stderr, /Error: boom/);
});

test("output a slow reader has not taken yet is written whole before the program ends", () => {
  const req = JSON.stringify(path.join(ROOT, "runtime", "js", "pool.cjs"));
  const prog = `require(${req}).forTests.quickExit(); process.stdout.write("x".repeat(3000000) + "\\n");`;
  const r = spawnSync("sh", ["-c", `"$0" -e "$1" | (sleep 0.5; wc -c)`, process.execPath, prog], { encoding: "utf8" });
  assert.equal(r.status, 0);
  assert.equal(r.stdout.trim(), "3000001");
});
