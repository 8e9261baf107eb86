// Imported by pool.cjs while a warm TypeScript sandbox waits for its request
// (docs/SERVE.md, "The pool"): node's ES module loader is set up then, not
// when the program's module loads. Nothing here runs or exports anything.
export {};
