// The resolve hook kv-register.mjs installs with module.register (it runs on
// node's hooks thread). "@spinframework/spin-kv" becomes spin-kv.mjs next to
// this file; resolving a Spin SDK package moat does not offer (the list below,
// from spinframework/spin-js-sdk packages/) throws one sentence saying so
// (before linking, so whatever names the program imports from it); every
// other specifier goes to the next resolver unchanged.
const KV = "@spinframework/spin-kv";
const TARGET = new URL("./spin-kv.mjs", import.meta.url).href;
const NOT_OFFERED = new Set([
  "spin-variables", "spin-llm", "spin-sqlite", "spin-redis", "spin-mqtt", "spin-mysql",
  "spin-postgres", "spin-trigger-redis",
].map((name) => `@spinframework/${name}`));

export async function resolve(specifier, context, nextResolve) {
  if (specifier === KV) return { url: TARGET, format: "module", shortCircuit: true };
  if (NOT_OFFERED.has(specifier)) {
    const error = new Error(`moat does not offer ${specifier}: a program run by moat cannot use it`);
    error.code = "MOAT_SPIN_NOT_OFFERED";
    throw error;
  }
  return nextResolve(specifier, context);
}
