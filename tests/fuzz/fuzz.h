/* Helpers shared by the libFuzzer harnesses (tests/fuzz/NAME.c, `make fuzz`).
 * Each harness hands a parser its input in a heap block of exactly the
 * input's size, so that AddressSanitizer reports a read one byte past it. */
#ifndef MOAT_TESTS_FUZZ_H
#define MOAT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An exact-size copy (malloc(0) may be NULL: then a 1-byte block). */
static inline char *fuzz_copy(const uint8_t *data, size_t size)
{
	char *b = malloc(size ? size : 1);
	if (!b)
		abort();
	if (size)
		memcpy(b, data, size);
	return b;
}

/* A NUL-terminated copy, for parsers of C strings. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *b = malloc(size + 1);
	if (!b)
		abort();
	if (size)
		memcpy(b, data, size);
	b[size] = '\0';
	return b;
}

#endif
