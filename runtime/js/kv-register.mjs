// Makes `import ... from "@spinframework/spin-kv"` load spin-kv.mjs next to
// this file (the key-value store, docs/KV.md), and the Spin SDK packages moat
// does not offer fail with one sentence (kv-hooks.mjs). The runner loads it before the
// program with NODE_OPTIONS=--import=/opt/moat/runtime/js/kv-register.mjs.
// It prints nothing, except one line on stderr when this node has no loader
// hooks and the program may import the store.
//
// module.register (node >= 18.19) runs the hooks on a thread of their own,
// which costs 60-100 ms of start-up. So the hook is only installed when the
// program may import the store or another Spin SDK package: when a JS/TS
// source file next to the entry (its directory tree, outside node_modules and
// dot-directories) contains "@spinframework/spin-", or when that cannot be told (no entry file, too many files).
// The TypeScript bundle, where every local module is inlined, is one file.
import * as nodeModule from "node:module"; // a namespace: old nodes lack `register`
import fs from "node:fs";
import path from "node:path";

const SPECIFIER = "@spinframework/spin-"; // every Spin SDK package kv-hooks.mjs maps
const SOURCE = /\.(?:[cm]?[jt]s|[jt]sx)$/;
const MAX_FILES = 1000;
const MAX_BYTES = 8 << 20;
const MAX_DEPTH = 8;

function mentions(file, budget) {
  const data = fs.readFileSync(file);
  budget.bytes -= data.length;
  if (budget.bytes < 0) throw new RangeError("too much to read");
  return data.indexOf(SPECIFIER) >= 0;
}

function treeMentions(dir, depth, budget, skip) {
  for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
    if (--budget.files < 0) throw new RangeError("too many files");
    const p = path.join(dir, ent.name);
    if (ent.isDirectory()) {
      if (ent.name.startsWith(".") || ent.name === "node_modules") continue;
      if (depth >= MAX_DEPTH) throw new RangeError("too deep");
      if (treeMentions(p, depth + 1, budget, skip)) return true;
    } else if (ent.isFile() && SOURCE.test(ent.name) && p !== skip) {
      if (mentions(p, budget)) return true;
    }
  }
  return false;
}

function mayImportKv() {
  const entry = process.argv[1];
  if (!entry) return true; // -e, stdin, the REPL
  try {
    const file = fs.realpathSync(entry);
    const budget = { files: MAX_FILES, bytes: MAX_BYTES };
    return mentions(file, budget) || treeMentions(path.dirname(file), 0, budget, file);
  } catch {
    return true; // cannot tell: install the hook
  }
}

if (typeof nodeModule.register === "function") {
  if (mayImportKv()) nodeModule.register("./kv-hooks.mjs", import.meta.url);
} else if (mayImportKv()) {
  try {
    fs.writeSync(2, "moat: this node cannot load @spinframework/spin-kv (needs node >= 18.19)\n");
  } catch {}
}
