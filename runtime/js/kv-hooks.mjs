// The resolve hook kv-register.mjs installs with module.register (it runs on
// node's hooks thread): the specifier "@spinframework/spin-kv", and nothing
// else, becomes spin-kv.mjs next to this file; every other specifier goes to
// the next resolver unchanged.
const SPECIFIER = "@spinframework/spin-kv";
const TARGET = new URL("./spin-kv.mjs", import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if (specifier === SPECIFIER) return { url: TARGET, format: "module", shortCircuit: true };
  return nextResolve(specifier, context);
}
