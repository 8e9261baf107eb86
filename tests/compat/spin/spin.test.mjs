// Conformance of moat's JS shims with Spin's JS SDK (spinframework/spin-js-sdk):
// the key-value store of "@spinframework/spin-kv" (runtime/js/spin-kv.mjs) and
// what importing the SDK's other packages does (runtime/js/kv-hooks.mjs).
// The broker and the child-node runner are tests/runtime/kv-fake.mjs.
//
// Run: node --test tests/compat/spin/
import { test } from "node:test";
import assert from "node:assert/strict";
import { REGISTER, runClient, assertOk, tempDir } from "../../runtime/kv-fake.mjs";

const HOOKED = `--import=${REGISTER}`;

// packages/spin-kv/src/index.ts, createKvStore: set() takes a Uint8Array, a
// string (UTF-8) or an object (JSON.stringify); get() is the bytes or null.
test("spin-kv Store.set: Uint8Array, string or object", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    store.set("bytes", new Uint8Array([1, 2]));
    store.set("text", "héllo");
    store.set("obj", { a: [1, "b"], n: null });
    store.set("arr", [1, 2]);
    store.set("nul", null);
    assert.deepEqual([...store.get("bytes")], [1, 2]);
    assert.equal(new TextDecoder().decode(store.get("text")), "héllo");
    assert.deepEqual(store.getJson("obj"), { a: [1, "b"], n: null });
    assert.deepEqual(store.getJson("arr"), [1, 2]);
    assert.equal(store.getJson("nul"), null);
    console.log("ok");
  `);
  assertOk(r);
  assert.equal(r.broker.get("obj").toString(), '{"a":[1,"b"],"n":null}');
  assert.equal(r.broker.get("arr").toString(), "[1,2]");
  assert.equal(r.broker.get("nul").toString(), "null");
});

// packages/spin-kv/src/index.ts: the Store interface's seven methods, open and openDefault
test("spin-kv: every method of the SDK's Store", async (t) => {
  const r = await runClient(t, `
    assert.equal(typeof kv.open, "function");
    assert.equal(typeof kv.openDefault, "function");
    const store = kv.open("default");
    for (const m of ["get", "set", "delete", "exists", "getKeys", "getJson", "setJson"])
      assert.equal(typeof store[m], "function", m);
    assert.equal(store.get("k"), null);
    assert.equal(store.exists("k"), false);
    store.setJson("k", { x: 1 });
    assert.equal(store.exists("k"), true);
    assert.deepEqual(store.getJson("k"), { x: 1 });
    assert.deepEqual(store.getKeys(), ["k"]);
    store.setJson("s", "str");                 // JSON of a string: quoted
    assert.equal(new TextDecoder().decode(store.get("s")), '"str"');
    store.delete("k");
    assert.equal(store.get("k"), null);
    // getJson parses get(key) || new Uint8Array(): an absent key is JSON.parse("")
    assert.throws(() => store.getJson("k"), SyntaxError);
    console.log("ok");
  `);
  assertOk(r);
});

// The packages of spinframework/spin-js-sdk packages/ that moat does not offer
const NOT_OFFERED = ["spin-variables", "spin-llm", "spin-sqlite", "spin-redis", "spin-mqtt",
  "spin-mysql", "spin-postgres", "spin-trigger-redis"];

test("the SDK's other packages fail at import with one sentence", async (t) => {
  const r = await runClient(t, `
    import assert from "node:assert/strict";
    for (const pkg of ${JSON.stringify(NOT_OFFERED.map((name) => `@spinframework/${name}`))}) {
      await assert.rejects(import(pkg), (e) =>
        e.code === "MOAT_SPIN_NOT_OFFERED" &&
        e.message === "moat does not offer " + pkg + ": a program run by moat cannot use it");
    }
    console.log("ok");
  `, { prelude: false, nodeOptions: HOOKED, noFd: true });
  assertOk(r);
});

test("a program importing an SDK package moat does not offer stops with that sentence", async (t) => {
  const dir = tempDir(t);
  const r = await runClient(t, `import { get } from "@spinframework/spin-variables";\nconsole.log(get("x"));\n`,
    { prelude: false, nodeOptions: HOOKED, noFd: true, dir });
  assert.equal(r.status, 1);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /^Error: moat does not offer @spinframework\/spin-variables: a program run by moat cannot use it$/m);
  assert.doesNotMatch(r.stderr, /ERR_MODULE_NOT_FOUND|Cannot find package/);
});
