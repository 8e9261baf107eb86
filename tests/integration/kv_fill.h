/* The full-store program of the kv and serve_kv suites (a store on a small
 * tmpfs: docs/KV.md, "A full disk"), spelled once. */
#ifndef MOAT_TESTS_INTEGRATION_KV_FILL_H
#define MOAT_TESTS_INTEGRATION_KV_FILL_H

/* Python: writes 256 KiB values under fresh keys until the store refuses
 * one (at most 400); leaves n (the writes), kind and err (the refusal's
 * kind and words, '-' when none) for the caller's lines to print. */
#define KV_PY_FILL_WRITES                                                              \
	"from spin_sdk import key_value\n"                                              \
	"s = key_value.open_default()\n"                                                \
	"n, kind, err = 0, '-', '-'\n"                                                  \
	"try:\n"                                                                        \
	"    while n < 400:\n"                                                          \
	"        s.set('k%d' % n, b'x' * 262144)\n"                                     \
	"        n += 1\n"                                                              \
	"except key_value.Error as e:\n"                                                \
	"    kind, err = e.kind, repr(e) + ' ' + repr(getattr(e, 'value', None))\n"

#endif
