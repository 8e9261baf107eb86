/* Fuzz: the key-value broker (moat_kv_broker_feed): every byte comes from
 * the sandboxed program. A stub backend in memory (one value per key, the
 * last written) stands in for SQLite/Redis so the harness measures the
 * parser, not fsync. Input: one byte for the size of the pieces the rest is
 * fed in, then the stream. Checks: every answer is one well-formed frame
 * (u32 length | status 0..2), answers come one at a time, and the broker
 * never answers a malformed stream after refusing it. */
#include "kv/internal.h"
#include "fuzz.h"

static struct moat_buf last_key, last_val;
static bool have;

static int st_get(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		  struct moat_kv_answer *a)
{
	if (!have || klen != last_key.len || memcmp(key, last_key.data, klen))
		a->status = MOAT_KV_NOT_FOUND;
	else
		moat_buf_append(&a->data, last_val.data, last_val.len);
	return 0;
}

static int st_set(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		  const char *val, size_t vlen, const struct moat_kv_quota *q,
		  struct moat_kv_answer *a)
{
	if (!moat_kv_key_valid(key, klen) || vlen > q->max_value)
		abort(); /* the broker checks both before */
	last_key.len = last_val.len = 0;
	moat_buf_append(&last_key, key, klen);
	moat_buf_append(&last_val, val, vlen);
	have = true;
	return 0;
}

static int st_del(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		  struct moat_kv_answer *a)
{
	have = false;
	return 0;
}

static int st_exists(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		     struct moat_kv_answer *a)
{
	a->exists = have;
	return 0;
}

static int st_keys(void *h, const char *id, size_t idlen, struct moat_kv_answer *a)
{
	if (have)
		kv_put_item(&a->data, last_key.data, last_key.len);
	return 0;
}

static int st_clear(void *h, const char *id, size_t idlen, uint64_t *removed,
		    struct moat_kv_answer *a)
{
	return kv_fail(a, -1, MOAT_KV_KIND_OTHER, "not used");
}

static void st_close(void *h)
{
}

static const struct kv_backend stub = {
	.name = "stub", .get = st_get, .set = st_set, .del = st_del, .exists = st_exists,
	.keys = st_keys, .clear = st_clear, .close = st_close,
};

static void drain(struct moat_kv_broker *b)
{
	for (;;) {
		size_t len;
		const char *p = moat_kv_broker_pending(b, &len);
		if (!len)
			return;
		if (len < 5)
			abort();
		uint32_t n = kv_le32(p);
		if (n + 4 != len || (unsigned char)p[4] > 2)
			abort();
		moat_kv_broker_consume(b, len);
		if (moat_kv_broker_feed(b, NULL, 0) < 0)
			return;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t piece = data[0] ? data[0] : 1;
	struct moat_kv_store st = { &stub, NULL };
	struct moat_kv_quota q = { .max_keys = 4, .max_bytes = 4096, .max_value = 512 };
	struct moat_kv_broker *b = moat_kv_broker_new(&st, "id", 2, &q);
	if (!b)
		abort();
	have = false;
	for (size_t off = 1; off < size; off += piece) {
		size_t n = size - off < piece ? size - off : piece;
		char *chunk = fuzz_copy(data + off, n);
		int rc = moat_kv_broker_feed(b, chunk, n);
		free(chunk);
		if (rc < 0)
			break;
		drain(b);
	}
	moat_kv_broker_free(b);
	moat_buf_free(&last_key);
	moat_buf_free(&last_val);
	return 0;
}
