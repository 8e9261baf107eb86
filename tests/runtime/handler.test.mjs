// Host-side tests of runtime/js/handler.mjs (the JS/TS handler bootstrap).
//
// Each test writes a handler and an entry file shaped like the service's
// bootstrap to a temp dir, runs it with node (request JSON on stdin) and
// parses the protocol stream strictly (docs/SERVE.md, "The handler protocol").
//
// Run: node --test tests/runtime/
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const RUNTIME = path.join(ROOT, "runtime", "js", "handler.mjs");

function request(method = "GET", urlPath = "/", headers = [], body = "") {
  return { method, url: "http://localhost" + urlPath, headers, body };
}

// Parse the whole stream; any deviation from the protocol throws.
function parse(stream) {
  let pos = 0;
  let head = null;
  const chunks = [];
  const line = () => {
    const nl = stream.indexOf(0x0a, pos);
    if (nl < 0) throw new Error(`unterminated line at ${pos}: ${JSON.stringify(stream.subarray(pos, pos + 80).toString())}`);
    const text = stream.subarray(pos, nl).toString("utf8");
    pos = nl + 1;
    return text;
  };
  for (let first = true; ; first = false) {
    const text = line();
    if (first && text.startsWith("MOAT/1 ")) {
      head = JSON.parse(text.slice(7));
      assert.deepEqual(Object.keys(head).sort(), ["headers", "status"]);
      assert.ok(Number.isInteger(head.status));
      for (const p of head.headers)
        assert.ok(Array.isArray(p) && p.length === 2 && p.every((x) => typeof x === "string"), `bad pair ${p}`);
      continue;
    }
    if (text === "end" || text.startsWith("error ")) {
      if (pos !== stream.length) throw new Error(`bytes after the terminator: ${stream.subarray(pos, pos + 80)}`);
      if (text === "end" && head === null) throw new Error("end without a head");
      const error = text === "end" ? null : text.slice(6);
      return { head, chunks, ended: text === "end", error, body: Buffer.concat(chunks) };
    }
    if (head === null) throw new Error(`expected a head, end or error, got ${JSON.stringify(text.slice(0, 80))}`);
    if (!/^[1-9][0-9]*$/.test(text)) throw new Error(`bad frame length ${JSON.stringify(text.slice(0, 80))}`);
    const n = Number(text);
    if (pos + n > stream.length) throw new Error("frame runs past the end of the stream");
    chunks.push(stream.subarray(pos, pos + n));
    pos += n;
  }
}

function tempDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moat-rt-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function runHandler(t, code, req = request()) {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "handler.mjs"), code);
  fs.writeFileSync(path.join(dir, "entry.mjs"),
    `import { serve } from ${JSON.stringify(RUNTIME)}; import h from "./handler.mjs"; await serve(h);\n`);
  return run(["entry.mjs"], dir, req);
}

function run(args, cwd, req) {
  const proc = spawnSync(process.execPath, args, {
    cwd, input: typeof req === "string" ? req : JSON.stringify(req), timeout: 30000,
    env: { PATH: process.env.PATH, LANG: "C.UTF-8" },
  });
  return { code: proc.status, stdout: proc.stdout, stderr: proc.stderr.toString(), frames: parse(proc.stdout) };
}

function assertOk(r, status = 200) {
  assert.equal(r.code, 0, r.stderr);
  assert.ok(r.frames.ended);
  assert.equal(r.frames.head.status, status);
}

function assertFailed(r, errorPrefix, { head = false } = {}) {
  assert.equal(r.code, 1, r.stderr);
  assert.equal(r.frames.ended, false);
  assert.ok(r.frames.error.startsWith(errorPrefix), r.frames.error);
  assert.equal(r.frames.head !== null, head);
}

test("Response with a text body", (t) => {
  const r = runHandler(t, `export default { fetch() { return new Response("hello", { status: 201, headers: { "x-a": "b" } }); } };`);
  assertOk(r, 201);
  assert.deepEqual(r.frames.head.headers, [["content-type", "text/plain;charset=UTF-8"], ["x-a", "b"]]);
  assert.equal(r.frames.body.toString(), "hello");
});

test("request url ends with the path, method and headers arrive", (t) => {
  const r = runHandler(t, `export default { fetch(req) {
    return Response.json({ url: req.url, method: req.method, test: req.headers.get("x-test") });
  } };`, request("DELETE", "/ts/items/7?q=1", [["X-Test", "yes"]]));
  assertOk(r);
  const echo = JSON.parse(r.frames.body);
  assert.ok(echo.url.endsWith("/ts/items/7?q=1"), echo.url);
  assert.equal(echo.method, "DELETE");
  assert.equal(echo.test, "yes");
});

test("POST body is echoed", (t) => {
  const r = runHandler(t, `export default { async fetch(req) {
    return new Response(await req.text(), { headers: { "content-type": req.headers.get("content-type") } });
  } };`, request("POST", "/echo", [["Content-Type", "application/json"]], '{"x":"h\u00e9"}'));
  assertOk(r);
  assert.equal(r.frames.body.toString(), '{"x":"h\u00e9"}');
  assert.deepEqual(r.frames.head.headers, [["content-type", "application/json"]]);
});

test("GET with a body in the request JSON gets none", (t) => {
  const r = runHandler(t, `export default { async fetch(req) { return new Response(String(req.body)); } };`,
    request("GET", "/", [], "ignored"));
  assertOk(r);
  assert.equal(r.frames.body.toString(), "null");
});

test("ReadableStream body streams chunk by chunk", (t) => {
  const r = runHandler(t, `export default { fetch() {
    const enc = new TextEncoder();
    let n = 0;
    const body = new ReadableStream({
      async pull(c) {
        await new Promise((r) => setTimeout(r, 5));
        if (++n > 3) c.close(); else c.enqueue(enc.encode("part" + n));
      },
    });
    return new Response(body, { headers: { "content-type": "text/plain" } });
  } };`);
  assertOk(r);
  assert.deepEqual(r.frames.chunks.map(String), ["part1", "part2", "part3"]);
});

test("stream that errors after a chunk: head, chunk, error", (t) => {
  const r = runHandler(t, `export default { fetch() {
    let n = 0;
    const body = new ReadableStream({
      pull(c) { if (n++ === 0) c.enqueue(new Uint8Array([104, 105])); else c.error(new RangeError("stream broke")); },
    });
    return new Response(body);
  } };`);
  assertFailed(r, "RangeError: stream broke", { head: true });
  assert.deepEqual(r.frames.chunks.map(String), ["hi"]);
});

test("fetch throwing", (t) => {
  const r = runHandler(t, `export default { async fetch() { throw new Error("handler blew up"); } };`);
  assertFailed(r, "Error: handler blew up");
  assert.equal(r.frames.error, "Error: handler blew up");
  assert.match(r.stderr, /handler blew up\n\s+at /);
});

test("default export without fetch", (t) => {
  const r = runHandler(t, `export default { handle() {} };`);
  assertFailed(r, "TypeError: default export has no fetch(request) method");
});

test("default export that is not an object", (t) => {
  const r = runHandler(t, `export default 42;`);
  assertFailed(r, "TypeError: default export has no fetch(request) method");
});

test("console.log and process.stdout go to stderr", (t) => {
  const r = runHandler(t, `
    console.log("top-level log");
    process.stdout.write("top-level write\\n");
    export default { fetch() {
      console.log("fetch log");
      console.info("fetch info");
      console.debug("fetch debug");
      console.dir({ dir: "fetch dir" });
      return new Response("body");
    } };`);
  assertOk(r);
  assert.equal(r.frames.body.toString(), "body");
  for (const text of ["top-level log", "top-level write", "fetch log", "fetch info", "fetch debug", "fetch dir"]) {
    assert.ok(r.stderr.includes(text), text);
    assert.ok(!r.stdout.toString().includes(text), text);
  }
});

test("bad status type in a Response-shaped object", (t) => {
  const r = runHandler(t, `export default { fetch() { return { status: "200", headers: {}, body: "x" }; } };`);
  assertFailed(r, "TypeError: status must be an integer, not string");
});

test("a Response-shaped object is accepted", (t) => {
  const r = runHandler(t, `export default { fetch() { return { status: 202, headers: [["x-a", "1"]], body: "plain" }; } };`);
  assertOk(r, 202);
  assert.deepEqual(r.frames.head.headers, [["x-a", "1"]]);
  assert.equal(r.frames.body.toString(), "plain");
});

test("fetch returning something else", (t) => {
  const r = runHandler(t, `export default { fetch() { return "hello"; } };`);
  assertFailed(r, "TypeError: fetch() must return a Response, not string");
});

test("throw while the handler module is evaluated", (t) => {
  const r = runHandler(t, `throw new SyntaxError("bad module"); export default {};`);
  assert.notEqual(r.code, 0);
  assert.equal(r.frames.head, null);
  assert.equal(r.frames.error, "SyntaxError: bad module");
});

test("error line is one bounded line", (t) => {
  const r = runHandler(t, `export default { fetch() { throw new Error("one\\ntwo\\r\\u0000" + "\\u00e9".repeat(1000)); } };`);
  assertFailed(r, "Error: one two");
  assert.ok(Buffer.byteLength(r.frames.error) <= 500);
  assert.ok(r.frames.error.endsWith("..."));
});

test("large body is split into frames", (t) => {
  const r = runHandler(t, `export default { fetch() { return new Response(new Uint8Array(300000).fill(7)); } };`);
  assertOk(r);
  assert.equal(r.frames.body.length, 300000);
  assert.ok(r.frames.body.every((b) => b === 7));
  assert.ok(r.frames.chunks.every((c) => c.length <= 65536));
});

test("bad request JSON", (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "handler.mjs"), `export default { fetch() { return new Response("x"); } };`);
  fs.writeFileSync(path.join(dir, "entry.mjs"),
    `import { serve } from ${JSON.stringify(RUNTIME)}; import h from "./handler.mjs"; await serve(h);\n`);
  const r = run(["entry.mjs"], dir, "not json");
  assertFailed(r, "SyntaxError:");
});

// The service's own path: esbuild bundles the bootstrap and a .ts handler.
const esbuild = ["/usr/bin/esbuild", "/usr/local/bin/esbuild"].find((p) => fs.existsSync(p));
test("esbuild-bundled TypeScript handler", { skip: !esbuild && "esbuild not installed" }, (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "handler.ts"), `
    console.log("ts top-level");
    export default {
      async fetch(req: Request): Promise<Response> {
        const who: string = new URL(req.url).searchParams.get("who") ?? "nobody";
        console.log("ts fetch");
        return new Response(\`hi \${who}\`, { headers: { "x-lang": "ts" } });
      },
    };`);
  fs.writeFileSync(path.join(dir, "main.ts"),
    `import { serve } from ${JSON.stringify(RUNTIME)}; import h from "./handler.ts"; await serve(h);\n`);
  const b = spawnSync(esbuild, ["main.ts", "--bundle", "--platform=node", "--format=esm", "--packages=external",
    "--log-level=error", "--outfile=.moat-main.mjs"], { cwd: dir });
  assert.equal(b.status, 0, b.stderr.toString());
  const r = run([".moat-main.mjs"], dir, request("GET", "/ts/x?who=moat"));
  assertOk(r);
  assert.equal(r.frames.body.toString(), "hi moat");
  assert.deepEqual(r.frames.head.headers, [["content-type", "text/plain;charset=UTF-8"], ["x-lang", "ts"]]);
  assert.ok(r.stderr.includes("ts top-level") && r.stderr.includes("ts fetch"));
});

test("parser refuses malformed streams", () => {
  const head = 'MOAT/1 {"status":200,"headers":[]}\n';
  for (const bad of ["", head, "end\n", head + "0\n\nend\n", head + "5\nabend\n", head + "end\nextra", "3\nabcend\n"])
    assert.throws(() => parse(Buffer.from(bad)), undefined, JSON.stringify(bad));
  const f = parse(Buffer.from(head + "2\nhi3\n\n\n\nend\n"));
  assert.deepEqual(f.chunks.map(String), ["hi", "\n\n\n"]);
});
