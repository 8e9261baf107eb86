/* The broker: the supervisor's side of the program's store fd (docs/KV.md,
 * "The broker protocol"). Pure over bytes: the pump reads and writes the
 * socket, this decodes requests, checks them, calls the store and encodes
 * the answers. One answer is pending at a time, so a program that sends
 * requests without reading the answers makes the broker stop reading: its
 * memory stays bounded by one request and one answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys.h"
#include "kv/internal.h"

enum { OP_GET = 1, OP_SET, OP_DELETE, OP_EXISTS, OP_KEYS, OP_OPEN };

struct moat_kv_broker {
	struct moat_kv_store *st;
	const struct moat_kv_quota *q;
	char *id;
	size_t idlen;
	struct moat_buf in;  /* bytes of requests not answered yet */
	size_t in_off;       /* where the next request starts in `in` */
	struct moat_buf out; /* the pending answer */
	size_t out_off;
	uint64_t skip; /* bytes still to drop of a request that was too large */
	int64_t deadline; /* moat_mono_ms; 0: none */
	uint64_t ops;
	struct moat_kv_answer a;
	void (*notice)(void *ctx, const char *line);
	void *notice_ctx;
	unsigned notices; /* sent so far */
};

struct moat_kv_broker *moat_kv_broker_new(struct moat_kv_store *st, const char *id, size_t idlen,
					  const struct moat_kv_quota *q)
{
	struct moat_kv_broker *b = calloc(1, sizeof *b);
	if (!b || !(b->id = malloc(idlen ? idlen : 1))) {
		free(b);
		return NULL;
	}
	memcpy(b->id, id, idlen);
	b->idlen = idlen;
	b->st = st;
	b->q = q;
	return b;
}

void moat_kv_broker_free(struct moat_kv_broker *b)
{
	if (!b)
		return;
	moat_buf_free(&b->in);
	moat_buf_free(&b->out);
	moat_kv_answer_reset(&b->a);
	free(b->id);
	free(b);
}

/* The answer: u32 len | status | payload. */
static void answer(struct moat_kv_broker *b, enum moat_kv_status status, const char *p1,
		   size_t n1, const char *p2, size_t n2)
{
	b->out.len = 0;
	b->out_off = 0;
	kv_put_item(&b->out, "", 0); /* the length, filled below */
	char s = (char)status;
	moat_buf_append(&b->out, &s, 1);
	moat_buf_append(&b->out, p1, n1);
	moat_buf_append(&b->out, p2, n2);
	if (b->out.oom) {
		/* the answer cannot be built: end the connection rather than lie */
		b->out.len = 0;
		return;
	}
	kv_le32_put(b->out.data, (uint32_t)(b->out.len - 4));
}

static void answer_error(struct moat_kv_broker *b, const char *kind, const char *msg,
			 size_t len)
{
	struct moat_buf m = { 0 };
	moat_buf_append(&m, kind, strlen(kind));
	moat_buf_append(&m, " ", 1);
	moat_buf_append(&m, msg, len);
	answer(b, MOAT_KV_ERROR, m.data ? m.data : "", m.oom ? 0 : m.len, NULL, 0);
	moat_buf_free(&m);
}

static void answer_from(struct moat_kv_broker *b, int op)
{
	struct moat_kv_answer *a = &b->a;
	if (a->status == MOAT_KV_ERROR)
		answer_error(b, a->kind ? a->kind : MOAT_KV_KIND_OTHER, a->msg.data ? a->msg.data : "",
			     a->msg.len);
	else if (a->status == MOAT_KV_NOT_FOUND)
		answer(b, MOAT_KV_NOT_FOUND, NULL, 0, NULL, 0);
	else if (op == OP_EXISTS)
		answer(b, MOAT_KV_OK, a->exists ? "\1" : "\0", 1, NULL, 0);
	else if (op == OP_GET || op == OP_KEYS)
		answer(b, MOAT_KV_OK, a->data.data ? a->data.data : "", a->data.len, NULL, 0);
	else
		answer(b, MOAT_KV_OK, NULL, 0, NULL, 0);
}

#define BAD_KEY "a key is 1 to 255 bytes of UTF-8 without NUL"

/* One whole request (p: op onward, len bytes). -1 when malformed. */
static int handle(struct moat_kv_broker *b, const char *p, uint32_t len)
{
	unsigned op = (unsigned char)p[0];
	uint32_t klen = kv_le32(p + 1);
	if (op < OP_GET || op > OP_OPEN || klen > len - 5)
		return -1;
	const char *key = p + 5, *val = key + klen;
	size_t vlen = len - 5 - klen;
	b->ops++;
	if (op == OP_OPEN) {
		if (klen == 7 && !memcmp(key, "default", 7) && vlen == 0) {
			answer(b, MOAT_KV_OK, NULL, 0, NULL, 0);
		} else {
			struct moat_buf m = { 0 };
			moat_buf_append(&m, "no store named ", 15);
			moat_buf_append_quoted(&m, key, klen, 64);
			moat_buf_append(&m, ": only \"default\" exists", 23);
			answer_error(b, MOAT_KV_KIND_NO_STORE, m.data ? m.data : "", m.oom ? 0 : m.len);
			moat_buf_free(&m);
		}
		return 0;
	}
	if (op == OP_KEYS ? klen != 0 || vlen != 0
			  : !moat_kv_key_valid(key, klen) || (op != OP_SET && vlen != 0)) {
		const char *m = op == OP_KEYS			? "KEYS takes no key and no value"
				: !moat_kv_key_valid(key, klen) ? BAD_KEY
								: "only SET takes a value";
		answer_error(b, MOAT_KV_KIND_INVALID, m, strlen(m));
		return 0;
	}
	struct moat_kv_answer *a = &b->a;
	if (b->deadline) {
		int64_t left = b->deadline - moat_mono_ms();
		if (left <= 0) {
			static const char m[] = "the run's time is up";
			answer_error(b, MOAT_KV_KIND_OTHER, m, sizeof m - 1);
			return 0;
		}
		if (b->st->be->set_timeout)
			b->st->be->set_timeout(b->st->h,
					       left < KV_OP_WAIT_MS ? (unsigned)left : KV_OP_WAIT_MS);
	}
	switch (op) {
	case OP_GET:
		moat_kv_get(b->st, b->id, b->idlen, key, klen, a);
		break;
	case OP_SET:
		moat_kv_set(b->st, b->id, b->idlen, key, klen, val, vlen, b->q, a);
		break;
	case OP_DELETE:
		moat_kv_delete(b->st, b->id, b->idlen, key, klen, a);
		break;
	case OP_EXISTS:
		moat_kv_exists(b->st, b->id, b->idlen, key, klen, a);
		break;
	default:
		moat_kv_keys(b->st, b->id, b->idlen, a);
		break;
	}
	if (a->status == MOAT_KV_ERROR && a->detail.len && !a->detail.oom && b->notice &&
	    b->notices <= MOAT_KV_BROKER_NOTICES) {
		/* the operator's: the path or address and the backend's words; a
		 * program looping on a full store gets a few lines, not one a call */
		if (b->notices++ < MOAT_KV_BROKER_NOTICES)
			b->notice(b->notice_ctx, a->detail.data);
		else
			b->notice(b->notice_ctx, "key-value store: more errors in this run are not "
						 "logged");
	}
	if (a->data.oom || a->msg.oom) {
		moat_kv_answer_reset(a);
		answer_error(b, MOAT_KV_KIND_OTHER, "out of memory", 13);
		return 0;
	}
	answer_from(b, (int)op);
	/* an answer may hold a whole value: give its memory back */
	moat_kv_answer_reset(a);
	return 0;
}

/* The largest request the broker buffers (op + key length + key + value). */
static uint64_t max_request(const struct moat_kv_broker *b)
{
	return 5u + MOAT_KV_MAX_KEY + b->q->max_value;
}

int moat_kv_broker_feed(struct moat_kv_broker *b, const char *data, size_t len)
{
	if (b->skip && len) {
		size_t drop = len < b->skip ? len : (size_t)b->skip;
		b->skip -= drop;
		data += drop;
		len -= drop;
	}
	if (len) {
		/* keep only what is not answered yet */
		moat_buf_drop_front(&b->in, b->in_off);
		b->in_off = 0;
		moat_buf_append(&b->in, data, len);
		if (b->in.oom)
			return -1;
	}
	while (b->out_off == b->out.len) {
		size_t have = b->in.len - b->in_off;
		if (have < 4)
			break;
		const char *p = b->in.data + b->in_off;
		uint32_t n = kv_le32(p);
		if (n < 5)
			return -1;
		if (n > max_request(b)) {
			/* answered now; its bytes are dropped as they come */
			size_t drop = have - 4 < n ? have - 4 : n;
			b->in_off += 4 + drop;
			b->skip = n - drop;
			char m[160];
			int ml = snprintf(m, sizeof m,
					  "value too large: the request has %u bytes, a value at most "
					  "%llu", n, (unsigned long long)b->q->max_value);
			b->ops++;
			answer_error(b, MOAT_KV_KIND_FULL, m, (size_t)ml);
			if (b->skip) {
				b->in.len = b->in_off = 0;
				break;
			}
			continue;
		}
		if (have - 4 < n)
			break;
		if (handle(b, p + 4, n) < 0)
			return -1;
		b->in_off += 4 + (size_t)n;
		if (b->out.len == 0) /* an answer that could not be built */
			return -1;
	}
	if (b->in_off == b->in.len)
		b->in.len = b->in_off = 0;
	return 0;
}

const char *moat_kv_broker_pending(const struct moat_kv_broker *b, size_t *len)
{
	*len = b->out.len - b->out_off;
	return *len ? b->out.data + b->out_off : "";
}

void moat_kv_broker_consume(struct moat_kv_broker *b, size_t n)
{
	b->out_off += n;
	if (b->out_off >= b->out.len)
		b->out.len = b->out_off = 0;
}

void moat_kv_broker_set_deadline(struct moat_kv_broker *b, int64_t deadline_ms)
{
	b->deadline = deadline_ms;
}

void moat_kv_broker_set_notice(struct moat_kv_broker *b, void (*fn)(void *ctx, const char *line),
			       void *ctx)
{
	b->notice = fn;
	b->notice_ctx = ctx;
}

uint64_t moat_kv_broker_ops(const struct moat_kv_broker *b)
{
	return b->ops;
}
