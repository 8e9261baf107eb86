/* Private to src/kv: the backend table each store implements. */
#ifndef MOAT_KV_INTERNAL_H
#define MOAT_KV_INTERNAL_H

#include "kv/kv.h"

/* The longest an operation waits for a busy store. */
#define KV_OP_WAIT_MS 10000u

struct kv_backend {
	const char *name;
	int (*get)(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		   struct moat_kv_answer *a);
	int (*set)(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		   const char *val, size_t vlen, const struct moat_kv_quota *q,
		   struct moat_kv_answer *a);
	int (*del)(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		   struct moat_kv_answer *a);
	int (*exists)(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		      struct moat_kv_answer *a);
	/* keys in byte order, encoded as u32le len | bytes into a->data */
	int (*keys)(void *h, const char *id, size_t idlen, struct moat_kv_answer *a);
	int (*clear)(void *h, const char *id, size_t idlen, uint64_t *removed,
		     struct moat_kv_answer *a);
	void (*close)(void *h);
	/* How long the next operation may wait for the store (a busy SQLite
	 * file, a slow Redis); NULL when the backend has its own fixed bound. */
	void (*set_timeout)(void *h, unsigned ms);
};

struct moat_kv_store {
	const struct kv_backend *be;
	void *h;
};

/* Backend constructors: 0 and *h, or -1 with *err. */
int kv_sqlite_open(const char *path, void **h, struct moat_error *err);
extern const struct kv_backend kv_sqlite_backend;
/* host, port, db, password (NULL: no AUTH). */
int kv_redis_open(const char *host, unsigned port, unsigned db, const char *password, void **h,
		  struct moat_error *err);
extern const struct kv_backend kv_redis_backend;

/* Fills a as ERROR of kind with a formatted message; returns the given rc. */
int kv_fail(struct moat_kv_answer *a, int rc, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Sets a's operator detail (kv.h) to the formatted text, one line. */
void kv_detail(struct moat_kv_answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message a program gets when the store has no room. */
#define KV_MSG_FULL "the store is full: nothing was written"
/* The protocol's little-endian u32 (docs/KV.md). */
static inline uint32_t kv_le32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;
	return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}
static inline void kv_le32_put(char *p, uint32_t n)
{
	unsigned char *u = (unsigned char *)p;
	u[0] = n & 0xff;
	u[1] = (n >> 8) & 0xff;
	u[2] = (n >> 16) & 0xff;
	u[3] = (n >> 24) & 0xff;
}
/* Appends u32le len | bytes to b. */
void kv_put_item(struct moat_buf *b, const char *s, size_t len);

#endif
