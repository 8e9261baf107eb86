/* Private to src/pool/: the Python zygote of moat serve's pool
 * (zygote_host.c), as pool.c drives it. */
#ifndef MOAT_POOL_INTERNAL_H
#define MOAT_POOL_INTERNAL_H

#include "pool/pool.h"

/* ---- the Python zygote of the pool (zygote_host.c) ---- */
struct pool_zygote;
/* Why a zygote is replaced (pool_zygote_due, the metrics' reason). */
enum pool_zygote_reason {
	POOL_ZYGOTE_NOT_DUE,
	POOL_ZYGOTE_AGE,      /* it ran its time */
	POOL_ZYGOTE_CHILDREN, /* it made (nearly) its children */
	POOL_ZYGOTE_REASONS
};
/* Its program (moat-zygote.so read now, from beside the moat binary or
 * ../lib/moat/) and options (opts: the pool's; a rootfs or a policy
 * refuses it); each zygote started makes at most max_children children
 * (0: no bound). Not started yet. */
int pool_zygote_new(struct pool_zygote **out, const struct moat_run_options *opts,
		     unsigned max_children, struct moat_error *err);
/* Starts it (a dead one is released first). The calling thread must
 * outlive it, as for a prewarm. */
int pool_zygote_start(struct pool_zygote *z, struct moat_error *err);
/* It needs (re)starting; it is running and usable (not dead, and has not
 * made its last child). NULL-safe. */
bool pool_zygote_wanted(struct pool_zygote *z);
bool pool_zygote_up(struct pool_zygote *z);
/* It runs but has made its last child (a refusal then is no failure). */
bool pool_zygote_spent(struct pool_zygote *z);
/* Marks it dead (to be replaced): it runs but could not make a sandbox. */
void pool_zygote_condemn(struct pool_zygote *z);
/* Whether the running one is to be replaced, and why: it has made its
 * last child, or it is max_age_ms old. */
enum pool_zygote_reason pool_zygote_due(struct pool_zygote *z, int64_t max_age_ms);
/* How long the replaced one (still alive for its children) has lived since
 * its start; -1: there is none. */
int64_t pool_zygote_old_age_ms(struct pool_zygote *z);
/* A new zygote started and made the running one (the pool's thread);
 * the one it replaces takes no more records but lives on, with its
 * children, until pool_zygote_release_old. Returns the replaced one's
 * generation (what pool_zygote_create gave its children); 0 with *err
 * when none was up, one is replaced already, or the new one did not
 * start (the running one stays). */
uint64_t pool_zygote_rotate(struct pool_zygote *z, enum pool_zygote_reason why,
			     struct moat_error *err);
void pool_zygote_release_old(struct pool_zygote *z);
/* A started child of the zygote for req (pool_create_adopted, start); *gen (gen may be
 * NULL): which zygote made it (1, 2, ...: the count of starts then). */
int pool_zygote_create(struct pool_zygote *z, const struct moat_request *req,
		       const struct moat_run_options *opts, enum run_adopt_start start,
		       struct moat_sandbox **out, uint64_t *gen, struct moat_error *err);
/* Releases it and a retired one (with every child they made). */
void pool_zygote_free(struct pool_zygote *z);
void pool_zygote_render(struct pool_zygote *z, struct moat_buf *b);

#endif
