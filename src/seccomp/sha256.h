/* SHA-256 (FIPS 180-4) of the seccomp module. Self-contained (no moat or
 * libseccomp headers) so that the build-time embedder, tools/embed.c, links
 * the very same code to hash the embedded default policy once at build time. */
#ifndef MOAT_SECCOMP_SHA256_H
#define MOAT_SECCOMP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SC_SHA256_LEN 32
struct sc_sha256 {
	uint32_t h[8];
	uint64_t total;
	uint8_t buf[64];
	size_t used;
};
void sc_sha256_init(struct sc_sha256 *s);
void sc_sha256_update(struct sc_sha256 *s, const void *data, size_t len);
void sc_sha256_final(struct sc_sha256 *s, uint8_t out[SC_SHA256_LEN]);
void sc_sha256(const void *data, size_t len, uint8_t out[SC_SHA256_LEN]);

#endif
