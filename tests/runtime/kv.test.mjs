// Host-side tests of runtime/js/spin-kv.mjs (the key-value shim) and
// runtime/js/kv-register.mjs (the resolve hook for "@spinframework/spin-kv").
//
// The shim is synchronous, so it runs in a child node whose fd 3 is one end of
// a socketpair (node's "pipe" stdio); this process answers on the other end as
// a fake broker (kv-fake.mjs) (docs/KV.md, "The broker protocol") with an in-memory map and
// the quotas. Each child asserts with node:assert and prints "ok".
//
// Run: node --test tests/runtime/
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { SHIM_URL, REGISTER, MiB, TIMEOUT, frame, tempDir, runClient, assertOk } from "./kv-fake.mjs";

const DISABLED = "kvEnabled is false for this request: the key-value store is not available";
const EOF = "the key-value broker closed the connection";

test("every method, the wire requests and the broker's data", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    assert.equal(store.get("visits"), null);
    assert.equal(store.exists("visits"), false);
    assert.deepEqual(store.getKeys(), []);
    assert.equal(store.set("visits", "1"), undefined);
    const v = store.get("visits");
    assert.ok(v instanceof Uint8Array && !Buffer.isBuffer(v), "a plain Uint8Array");
    assert.deepEqual([...v], [0x31]);
    assert.equal(store.exists("visits"), true);
    store.set("visits", new Uint8Array([50, 50]));            // overwrite
    assert.equal(new TextDecoder().decode(store.get("visits")), "22");
    store.set("b", "x"); store.set("a", "y");
    assert.deepEqual(store.getKeys(), ["a", "b", "visits"]);
    assert.equal(store.delete("visits"), undefined);
    assert.equal(store.get("visits"), null);
    assert.equal(store.exists("visits"), false);
    store.delete("visits");                                   // absent is not an error
    store.setJson("cfg", { a: 1, list: [true, null, "é"] });
    assert.deepEqual(store.getJson("cfg"), { a: 1, list: [true, null, "é"] });
    assert.throws(() => store.getJson("missing"), SyntaxError); // as the SDK: JSON.parse("")
    store.setJson("n", 0);
    assert.equal(store.getJson("n"), 0);
    assert.throws(() => store.setJson("u", undefined), TypeError);
    store.set("notjson", "{");
    assert.throws(() => store.getJson("notjson"), SyntaxError);
    assert.equal(kv.open("default").get("a")[0], 0x79);       // stores share the connection
    assert.equal(store.label, "default");
    console.log("ok");
  `);
  assertOk(r);
  assert.deepEqual(r.broker.requests.slice(0, 6),
    [[6, "default", 0], [1, "visits", 0], [4, "visits", 0], [5, "", 0], [2, "visits", 1], [1, "visits", 0]]);
  assert.deepEqual([...r.broker.data.keys()].sort(), ["a", "b", "cfg", "n", "notjson"]);
  assert.equal(r.broker.get("cfg").toString(), '{"a":1,"list":[true,null,"é"]}');
});

test("binary values, empty values and value types", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    const every = Uint8Array.from({ length: 256 }, (_, i) => i);
    store.set("all", every);
    assert.deepEqual(store.get("all"), every);
    store.set("empty", new Uint8Array(0));
    const e = store.get("empty");
    assert.ok(e instanceof Uint8Array && e.length === 0, "empty, not null");
    assert.equal(store.exists("empty"), true);
    store.set("emptystr", "");
    assert.equal(store.get("emptystr").length, 0);
    store.set("buf", Buffer.from([0, 255]));
    assert.deepEqual([...store.get("buf")], [0, 255]);
    // as the SDK's set: only a Uint8Array is bytes, any other object is JSON
    store.set("view", new DataView(new Uint8Array([9, 8, 7, 6]).buffer, 1, 2));
    assert.equal(new TextDecoder().decode(store.get("view")), "{}");
    store.set("sub", every.subarray(250));
    assert.deepEqual([...store.get("sub")], [250, 251, 252, 253, 254, 255]);
    store.set("utf8", "ключ 😀");
    assert.equal(new TextDecoder().decode(store.get("utf8")), "ключ 😀");
    for (const bad of [1, undefined, true, 1n, Symbol("s"), () => 1])
      assert.throws(() => store.set("k", bad), TypeError);
    for (const bad of [1, null, undefined, new Uint8Array([1])])
      assert.throws(() => store.get(bad), TypeError);
    console.log("ok");
  `);
  assertOk(r);
  assert.deepEqual([...r.broker.get("all")], Array.from({ length: 256 }, (_, i) => i));
  assert.equal(r.broker.get("empty").length, 0);
  assert.ok(!r.broker.data.has("k"), "a bad value reached the broker");
});

test("unicode keys, byte order and invalid keys", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    const keys = ["ключ", "😀", "é".repeat(127) + "a", "a".repeat(255), "日本".repeat(42) + "abc", "z", "Z"];
    for (const k of keys) {
      assert.ok(Buffer.byteLength(k) <= 255);
      store.set(k, k);
    }
    for (const k of keys) assert.equal(new TextDecoder().decode(store.get(k)), k);
    const order = [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    assert.deepEqual(store.getKeys(), order);
    for (const bad of ["", "a".repeat(256), "é".repeat(128), "a\\0b", "\\ud800", "x\\udfffy", "\\udc00\\ud800"]) {
      for (const call of [(k) => store.get(k), (k) => store.delete(k), (k) => store.exists(k), (k) => store.set(k, "v")])
        assert.throws(() => call(bad), (e) => e instanceof kv.KvError && e.kind === "invalid", JSON.stringify(bad));
    }
    store.set("still-works", "1");
    console.log("ok");
  `);
  assertOk(r);
  // 7 sets, 7 gets, KEYS, the last set, OPEN: nothing invalid was sent
  assert.equal(r.broker.requests.length, 17);
});

test("2 MiB values through a blocking fd", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    const big = new Uint8Array(2 * 1024 * 1024 + 3);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 13)) & 255;
    store.set("big", big);
    const back = store.get("big");
    assert.equal(back.length, big.length);
    assert.ok(Buffer.from(back).equals(Buffer.from(big)));
    console.log("ok");
  `, { broker: { maxValue: 4 * MiB } });
  assertOk(r);
  assert.equal(r.broker.get("big").length, 2 * MiB + 3);
});

test("2 MiB values through a non-blocking fd: short writes, EAGAIN", async (t) => {
  if (spawnSync("python3", ["-c", ""]).status !== 0) return t.skip("no python3 to set O_NONBLOCK");
  const r = await runClient(t, `
    // count what the shim sees
    const seen = { eagain: 0, shortWrites: 0, shortReads: 0 };
    const { readSync, writeSync } = fs;
    fs.writeSync = (fd, buf, off, len, ...rest) => {
      try {
        const n = writeSync(fd, buf, off, len, ...rest);
        if (n < len) seen.shortWrites++;
        return n;
      } catch (e) { if (e.code === "EAGAIN") seen.eagain++; throw e; }
    };
    fs.readSync = (fd, buf, off, len, ...rest) => {
      try {
        const n = readSync(fd, buf, off, len, ...rest);
        if (n < len) seen.shortReads++;
        return n;
      } catch (e) { if (e.code === "EAGAIN") seen.eagain++; throw e; }
    };
    const store = kv.openDefault();
    const big = new Uint8Array(2 * 1024 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = i % 251;
    store.set("big", big);
    store.set("big2", big.subarray(1));
    assert.ok(Buffer.from(store.get("big")).equals(Buffer.from(big)));
    assert.ok(Buffer.from(store.get("big2")).equals(Buffer.from(big.subarray(1))));
    assert.deepEqual(store.getKeys(), ["big", "big2"]);
    assert.ok(seen.eagain > 0 && seen.shortWrites > 0 && seen.shortReads > 0, JSON.stringify(seen));
    console.log("ok");
  `, { nonblocking: true, broker: { maxValue: 4 * MiB, slow: true } });
  assertOk(r);
});

test("quota errors from the broker", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    const kind = (k) => (e) => e instanceof kv.KvError && e instanceof Error && e.kind === k && e.name === "KvError";
    store.set("a", "1"); store.set("b", "2");
    assert.throws(() => store.set("c", "3"), (e) => kind("store_table_full")(e) && /max_keys/.test(e.message));
    store.set("a", "x".repeat(40));                           // replacing is not a new key
    assert.throws(() => store.set("a", "x".repeat(41)), kind("store_table_full"));
    assert.equal(store.get("a").length, 40);                  // the refused write stored nothing
    store.delete("b");
    assert.throws(() => store.set("b".repeat(60), "y".repeat(40)), kind("store_table_full"));  // max_bytes
    assert.throws(() => store.set("k", "v".repeat(400)), (e) => kind("invalid")(e) && e.message.startsWith("value too large"));
    store.set("k", "ok");                                     // still in step
    assert.equal(new TextDecoder().decode(store.get("k")), "ok");
    assert.deepEqual(store.getKeys(), ["a", "k"]);
    console.log("ok");
  `, { broker: { maxKeys: 2, maxBytes: 100, maxValue: 40 } });
  assertOk(r);
});

test("open: only the default store; labels are checked", async (t) => {
  const r = await runClient(t, `
    assert.throws(() => kv.open("other"), (e) => e instanceof kv.KvError && e.kind === "no_such_store" && /other/.test(e.message));
    assert.throws(() => kv.open(""), (e) => e.kind === "no_such_store");
    assert.throws(() => kv.open("x".repeat(300)), (e) => e.kind === "no_such_store");
    assert.throws(() => kv.open(), TypeError);
    kv.open("default").set("k", "v");
    const e = new kv.KvError("other", "boom");
    assert.equal(String(e), "KvError: boom");
    console.log("ok");
  `);
  assertOk(r);
  assert.deepEqual(r.broker.requests, [[6, "other", 0], [6, "default", 0], [2, "k", 1]]);
});

test("without MOAT_KV_FD: the module imports, opening is access_denied", async (t) => {
  const r = await runClient(t, `
    for (const open of [() => kv.openDefault(), () => kv.open("default"), () => kv.open("other")])
      assert.throws(open, (e) => e instanceof kv.KvError && e.kind === "access_denied" && e.message === ${JSON.stringify(DISABLED)});
    console.log("ok");
  `, { noFd: true });
  assertOk(r);
});

test("MOAT_KV_FD that is not a number", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "main.mjs"), `import * as kv from ${JSON.stringify(SHIM_URL)};
    try { kv.openDefault(); } catch (e) { console.log(e.kind); }`);
  const p = spawnSync(process.execPath, ["main.mjs"], { cwd: dir, env: { PATH: process.env.PATH, MOAT_KV_FD: "x" }, timeout: TIMEOUT });
  assert.equal(p.stdout.toString(), "other\n");
});

test("broker EOF: the call and every later one fail with kind other", async (t) => {
  const r = await runClient(t, `
    const store = kv.openDefault();
    store.set("k", "v");
    const eof = (e) => e instanceof kv.KvError && e.kind === "other" && e.message === ${JSON.stringify(EOF)};
    assert.throws(() => store.get("k"), eof);
    assert.throws(() => store.getKeys(), eof);                // dead, not out of step
    assert.throws(() => kv.openDefault(), eof);
    console.log("ok");
  `, { broker: { closeAfter: 2 } });
  assertOk(r);
});

test("broker EOF mid-answer and while a big value is written", async (t) => {
  const cut = (op) => (op === 1 ? Buffer.concat([Buffer.from([100, 0, 0, 0, 0]), Buffer.from("partial")]) : null);
  const r1 = await runClient(t, `
    assert.throws(() => kv.openDefault().get("k"), (e) => e.kind === "other" && e.message === ${JSON.stringify(EOF)});
    console.log("ok");
  `, { broker: { answer: cut, closeAfter: 2 } });
  assertOk(r1);
  const r2 = await runClient(t, `
    const store = kv.openDefault();
    assert.throws(() => store.set("big", new Uint8Array(4 * 1024 * 1024)), (e) => e.kind === "other" && e.message === ${JSON.stringify(EOF)});
    console.log("ok");
  `, { broker: { closeAfter: 1, maxValue: 8 * MiB } });
  assertOk(r2);
});

test("malformed answers", async (t) => {
  const answers = { 1: frame(7), 4: frame(0, Buffer.from([5])) };
  const r = await runClient(t, `
    const store = kv.openDefault();
    assert.throws(() => store.exists("k"), (e) => e.kind === "other" && /malformed/.test(e.message));
    assert.throws(() => store.set("k", "v"), (e) => e.kind === "other" && /malformed/.test(e.message));
    console.log("ok");
  `, { broker: { answer: (op) => answers[op] } });
  assertOk(r);
  assert.equal(r.broker.requests.length, 2, "nothing was sent after the malformed answer");
});

// ---- kv-register.mjs: the resolve hook ----

const HOOKED = `--import=${REGISTER}`;

test("the hook resolves @spinframework/spin-kv, and nothing else changes", async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, "lib"));
  fs.writeFileSync(path.join(dir, "lib", "counter.mjs"), `
    import { openDefault } from "@spinframework/spin-kv";
    export function bump() {
      const s = openDefault();
      const n = Number(new TextDecoder().decode(s.get("visits") ?? new Uint8Array())) + 1;
      s.set("visits", String(n));
      return n;
    }`);
  const r = await runClient(t, `
    import * as kv from "@spinframework/spin-kv";
    import assert from "node:assert/strict";
    import path from "node:path";
    import { bump } from "./lib/counter.mjs";
    const direct = await import(${JSON.stringify(SHIM_URL)});
    assert.equal(kv.openDefault, direct.openDefault, "the same module instance");
    assert.equal(typeof kv.KvError, "function");
    assert.equal(path.basename("/a/b.c"), "b.c");
    assert.equal(bump(), 1);
    assert.equal(bump(), 2);
    await assert.rejects(import("@spinframework/spin-nope"), { code: "ERR_MODULE_NOT_FOUND" });
    await assert.rejects(import("./missing.mjs"), { code: "ERR_MODULE_NOT_FOUND" });
    const again = await import("@spinframework/spin-kv");
    assert.equal(again, kv);
    console.log("ok");
  `, { prelude: false, nodeOptions: HOOKED, dir });
  assertOk(r);
  assert.equal(r.broker.get("visits").toString(), "2");
});

test("the hook: a helper module alone naming the store is found", async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, "src", "deep"), { recursive: true });
  fs.writeFileSync(path.join(dir, "src", "deep", "store.ts.mjs"), `export * from "@spinframework/spin-kv";`);
  const r = await runClient(t, `
    const kv = await import("./src/deep/store.ts.mjs");
    kv.openDefault().set("k", "v");
    console.log("ok");
  `, { prelude: false, nodeOptions: HOOKED, dir });
  assertOk(r);
  assert.equal(r.broker.get("k").toString(), "v");
});

test("the hook: programs that do not name the store get no hooks thread", async (t) => {
  const r = await runClient(t, `
    // the specifier built at run time: the scan cannot see it, so no hook
    const name = ["@spinframework", "spin-kv"].join("/");
    let code = null;
    try { await import(name); } catch (e) { code = e.code; }
    if (code !== "ERR_MODULE_NOT_FOUND") throw new Error("resolved: " + code);
    console.log("ok");
  `, { prelude: false, nodeOptions: HOOKED, noFd: true });
  assertOk(r);
});

test("the hook: a node without module.register says so once and runs on", async (t) => {
  const dir = tempDir(t);
  const old = path.join(dir, "old-node.mjs");
  fs.writeFileSync(old, `import m from "node:module"; delete m.register; m.syncBuiltinESMExports();\n`);
  const r = await runClient(t, `// this program would use @spinframework/spin-kv\nconsole.log("ran");\n`,
    { prelude: false, noFd: true, nodeOptions: `--import=${old} ${HOOKED}`, dir });
  assert.equal(r.status, 0);
  assert.equal(r.stdout, "ran\n");
  assert.equal(r.stderr, "moat: this node cannot load @spinframework/spin-kv (needs node >= 18.19)\n");
  // and not a word when the program does not name the store
  fs.mkdirSync(path.join(dir, "plain"));
  const r2 = await runClient(t, `console.log("ran");\n`,
    { prelude: false, noFd: true, nodeOptions: `--import=${old} ${HOOKED}`, dir: path.join(dir, "plain") });
  assert.deepEqual([r2.status, r2.stdout, r2.stderr], [0, "ran\n", ""]);
});
