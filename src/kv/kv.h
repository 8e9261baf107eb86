/* The scoped key-value store (docs/KV.md): a backend opened from a spec,
 * every operation scoped to one sandboxId, and the broker that speaks the
 * sandbox's protocol. Used by the runner (one store per run), `moat kv` and
 * `moat serve` (DELETE /v1/kv/<id>). Nothing here exits or prints. */
#ifndef MOAT_KV_KV_H
#define MOAT_KV_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "moat.h"

#define MOAT_KV_MAX_KEY 255u
#define MOAT_KV_MAX_ID MOAT_MAX_SANDBOX_ID
#define MOAT_KV_DEFAULT_MAX_KEYS 1024u
#define MOAT_KV_DEFAULT_MAX_BYTES (64ull * 1024 * 1024)
#define MOAT_KV_DEFAULT_MAX_VALUE (1024u * 1024u)
#define MOAT_KV_LIMIT_MAX_VALUE (64u * 1024u * 1024u)
/* The free space a SQLite store's file system keeps (docs/KV.md, "A full
 * disk"): room for a delete and the WAL's checkpoint. */
#define MOAT_KV_DEFAULT_MIN_FREE (16ull * 1024 * 1024)

struct moat_kv_quota {
	uint64_t max_keys;  /* keys per sandboxId */
	uint64_t max_bytes; /* sum of key + value bytes per sandboxId */
	uint64_t max_value; /* bytes of one value, <= MOAT_KV_LIMIT_MAX_VALUE */
	/* Store-wide, not per id: a SQLite write is refused ("the store is
	 * full") when it would leave less free space than this on the store's
	 * file system; deletes are not. 0: no floor. Redis: not used. */
	uint64_t min_free;
};
/* The defaults above. */
void moat_kv_quota_default(struct moat_kv_quota *q);
/* "keys=N,bytes=N,value=N,free=N" (any subset; sizes with K/M/G; free=0
 * turns the floor off); starts from *q. */
int moat_kv_quota_parse(const char *s, struct moat_kv_quota *q, struct moat_error *err);

/* Outcome of one operation. */
enum moat_kv_status {
	MOAT_KV_OK = 0,
	MOAT_KV_NOT_FOUND = 1,
	MOAT_KV_ERROR = 2, /* *kind and the message say why */
};
/* The error kinds the program sees (docs/KV.md). */
#define MOAT_KV_KIND_NO_STORE "no_such_store"
#define MOAT_KV_KIND_DENIED "access_denied"
#define MOAT_KV_KIND_FULL "store_table_full"
#define MOAT_KV_KIND_INVALID "invalid"
#define MOAT_KV_KIND_OTHER "other"

/* An opened backend. Not shared between threads: each run opens its own. */
struct moat_kv_store;

/* The spec of --kv: NULL means the default SQLite path for this user
 * (moat_kv_default_path). Opens (and for SQLite creates) the store; 0 or -1
 * with *err (MOAT_ERR_CONFIG for a bad spec, MOAT_ERR_UNAVAILABLE when the
 * store cannot be reached). */
int moat_kv_open(const char *spec, struct moat_kv_store **out, struct moat_error *err);
void moat_kv_close(struct moat_kv_store *st);
/* "sqlite" or "redis". */
const char *moat_kv_backend_name(const struct moat_kv_store *st);
/* $STATE_DIRECTORY/kv.sqlite3 (systemd's StateDirectory=, first entry), else
 * $XDG_STATE_HOME/moat/kv.sqlite3, ~/.local/state/moat/kv.sqlite3, or as
 * root /var/lib/moat/kv.sqlite3; creates the directory (0700). Malloc'd. */
char *moat_kv_default_path(struct moat_error *err);

/* true when id is a valid sandboxId / key (docs/KV.md). */
bool moat_kv_id_valid(const char *id, size_t len);
bool moat_kv_key_valid(const char *key, size_t len);

/* The operations, each scoped to id (validated by the caller). An ERROR
 * sets *kind (a static MOAT_KV_KIND_*) and msg (one line). */
struct moat_kv_answer {
	enum moat_kv_status status;
	const char *kind;
	struct moat_buf msg;  /* ERROR: the message, the program's: no host path, no
			       * server address */
	struct moat_buf detail; /* ERROR: the operator's (the store's path or address
				 * and the backend's own error); empty when msg says
				 * it all. Never sent to the program. */
	struct moat_buf data; /* GET: the value; KEYS: u32le len | bytes, each key */
	bool exists;          /* EXISTS */
};
void moat_kv_answer_reset(struct moat_kv_answer *a); /* frees and zeroes */

int moat_kv_get(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		size_t klen, struct moat_kv_answer *a);
int moat_kv_set(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		size_t klen, const char *val, size_t vlen, const struct moat_kv_quota *q,
		struct moat_kv_answer *a);
int moat_kv_delete(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		   size_t klen, struct moat_kv_answer *a);
int moat_kv_exists(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		   size_t klen, struct moat_kv_answer *a);
int moat_kv_keys(struct moat_kv_store *st, const char *id, size_t idlen,
		 struct moat_kv_answer *a);
/* Removes every key of id; *removed (may be NULL) gets how many. */
int moat_kv_clear(struct moat_kv_store *st, const char *id, size_t idlen, uint64_t *removed,
		  struct moat_kv_answer *a);
/* Each operation returns 0 when a->status says the outcome (OK, NOT_FOUND
 * or a refusal like a quota), -1 when the backend failed (a->status ERROR,
 * kind "other", message filled). */

/* ---- the broker: the sandbox side's protocol (docs/KV.md) ---- */

struct moat_kv_broker;
/* id is copied. The store and quota are borrowed for the broker's life. */
struct moat_kv_broker *moat_kv_broker_new(struct moat_kv_store *st, const char *id, size_t idlen,
					  const struct moat_kv_quota *q);
void moat_kv_broker_free(struct moat_kv_broker *b);
/* Feeds bytes the program sent; answers every complete request into the
 * broker's output. Returns 0, or -1 when the stream is malformed (the
 * connection must end). */
int moat_kv_broker_feed(struct moat_kv_broker *b, const char *data, size_t len);
/* The bytes waiting to go to the program; consume n of them once written. */
const char *moat_kv_broker_pending(const struct moat_kv_broker *b, size_t *len);
void moat_kv_broker_consume(struct moat_kv_broker *b, size_t n);
/* The run's deadline (CLOCK_MONOTONIC ms, moat_mono_ms): an operation
 * never waits for the store past it, so the wall-clock timeout is not held
 * up by the broker. 0: none (each operation waits at most 10 s). */
void moat_kv_broker_set_deadline(struct moat_kv_broker *b, int64_t deadline_ms);
/* How many requests were answered. */
uint64_t moat_kv_broker_ops(const struct moat_kv_broker *b);
/* Where an answer's operator detail goes (its path, the backend's error):
 * fn(ctx, line), for the first MOAT_KV_BROKER_NOTICES of a run, then one
 * line saying the rest are not logged. None set: dropped. */
#define MOAT_KV_BROKER_NOTICES 5u
void moat_kv_broker_set_notice(struct moat_kv_broker *b, void (*fn)(void *ctx, const char *line),
			       void *ctx);

#endif
