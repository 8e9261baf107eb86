// The MOATPOOL2 frame's shared vectors (tests/fixtures/frames/moatpool2.json),
// read by runtime/js/pool.cjs's parser: what the C side writes is what a warm
// node gets back, and every malformed body is refused. The same vectors are
// checked by tests/unit/test_pool.c and tests/runtime/test_frames.py.
//
// Run: node --test tests/runtime/
"use strict";
const { test } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..", "..");
const { forTests: pool } = require(path.join(ROOT, "runtime", "js", "pool.cjs"));
const vectors = JSON.parse(fs.readFileSync(path.join(ROOT, "tests", "fixtures", "frames", "moatpool2.json"), "utf8"));

const strs = (pairs) => pairs.map(([k, v]) => [k.toString("utf8"), v.toString("utf8")]);

test("MOATPOOL2 vectors: every valid frame reads back", () => {
  assert.ok(vectors.valid.length > 0);
  for (const v of vectors.valid) {
    const frame = Buffer.from(v.frame, "utf8");
    const nl = frame.indexOf(0x0a);
    const head = frame.toString("latin1", 0, nl);
    assert.match(head, /^MOATPOOL2 [0-9]+$/, v.name);
    const n = Number(head.slice("MOATPOOL2 ".length));
    const r = pool.parseRequest(frame.subarray(nl + 1, nl + 1 + n));
    assert.equal(r.code.toString("utf8"), v.code, v.name);
    assert.deepEqual(strs(r.files), v.files, v.name);
    assert.deepEqual(strs(r.env), v.env, v.name);
    assert.equal(r.ts, null, v.name);
    assert.equal(frame.subarray(nl + 1 + n).toString("utf8"), v.stdin, v.name);
  }
});

test("MOATPOOL2 vectors: every invalid body is refused", () => {
  assert.ok(vectors.invalid.length > 0);
  for (const v of vectors.invalid)
    assert.throws(() => pool.parseRequest(Buffer.from(v.body, "utf8")), /bad request/, v.name);
});
