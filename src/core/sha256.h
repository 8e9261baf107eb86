/* SHA-256 (FIPS 180-4). In core, self-contained (no other moat or library
 * header), so that both the seccomp module (the BPF cache) and the
 * build-time embedder, tools/embed.c, link the very same code: the default
 * policy's digest is taken once at build time by the code a run would use. */
#ifndef MOAT_CORE_SHA256_H
#define MOAT_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define MOAT_SHA256_LEN 32
struct moat_sha256_ctx {
	uint32_t h[8];
	uint64_t total;
	uint8_t buf[64];
	size_t used;
};
void moat_sha256_init(struct moat_sha256_ctx *s);
void moat_sha256_update(struct moat_sha256_ctx *s, const void *data, size_t len);
void moat_sha256_final(struct moat_sha256_ctx *s, uint8_t out[MOAT_SHA256_LEN]);
void moat_sha256(const void *data, size_t len, uint8_t out[MOAT_SHA256_LEN]);

#endif
