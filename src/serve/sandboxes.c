/* moat serve's live sandboxes (docs/SANDBOXES.md): the table of them, each
 * a struct live (src/live/) bound to the credential that made it, with its
 * metadata, lifetime and idle clock; and the reaper thread that ends the
 * expired ones and forgets the dead. The HTTP side is route_sandboxes.c's.
 *
 * Nothing of a tenant reaches the log from here: no id, no credential, no
 * metadata. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/sys.h"
#include "live/live.h"
#include "serve/contexts.h"
#include "serve/internal.h"

#define REAP_EVERY_MS 200
/* a dead sandbox answers 410 for this long, then 404; at most
 * TOMBSTONES_PER_SANDBOX x max of them are kept (the oldest dropped) */
#define TOMBSTONE_MS (10 * 60 * 1000)
#define TOMBSTONES_PER_SANDBOX 4
/* the sandbox's own backstop is a little past the most its lifetime may
 * be extended to: the reaper ends it first, with the right reason */
#define BACKSTOP_SLACK_MS 5000
/* the pool (docs/SANDBOXES.md, "The pool"): a pooled sandbox older than
 * this is replaced (its backstop counts from its making: a handed-out
 * one's lifetime from the handout must fit under it); a fill that failed
 * is retried after 1 s, doubling to 64 s */
#define POOL_MAX_AGE_MS (10 * 60 * 1000)
#define POOL_RETRY_MS 1000
#define POOL_RETRY_MAX_SHIFT 6
/* create's warning where no cgroup quota bounds the sandbox's CPU */
#define FREEZE_WARNING                                                                         \
	"cpus is not enforced (no cgroup): the sandbox is frozen whenever no request of yours is " \
	"in flight on it, so its processes (a background server too) run only while one is "      \
	"(docs/SANDBOXES.md, \"Pause, resume and CPU time\")"

struct serve_sbx {
	struct serve_sbx *next;
	char id[SERVE_SBX_ID_LEN + 1];
	uint8_t cred[MOAT_SHA256_LEN];
	struct live *lv;
	int refs;     /* the table's, and one per caller holding it */
	bool removed; /* out of the table */
	bool dead;
	char *reason; /* a dead one's sentence */
	unsigned busy; /* requests using it now: its idle clock stands still */
	int64_t created_wall_ms, created_ms, last_ms, end_ms, dead_ms;
	uint64_t idle_ms;
	char **meta; /* key, value, key, value... */
	size_t meta_count;
	uint64_t memory_mb, pids;
	double cpus;
	bool reserved; /* its memory_mb and cpus, in the budget */
	int64_t mem_peak, cpu_ms;
	/* pause, resume and the freeze (docs/SANDBOXES.md, "Pause, resume and
	 * CPU time"): fmu is held while its processes are frozen or thawed,
	 * and while its agent is asked something outside a request (a frozen
	 * agent answers nothing) */
	pthread_mutex_t fmu;
	bool frozen;        /* its processes stopped now (written under fmu and mu) */
	bool paused;        /* POST .../pause, or idle with onIdle "pause" */
	bool unbounded;     /* no cgroup quota bounds its CPU: frozen whenever no
			     * request is in flight on it */
	bool on_idle_pause; /* onIdle "pause" */
	uint64_t max_cpu_ms; /* maxCpuTimeMs (0: none) */
	int64_t disk_bytes; /* /sandbox and /tmp used, last sampled (-1: never) */
	struct serve_ctxs *ctxs; /* its code contexts (contexts.c) */
	/* its kept directory watches (E2B's polling watchers): id "" a free
	 * slot; lent: a request reads it now (closed on its return when it
	 * was removed or the sandbox ended meanwhile) */
	struct {
		char id[SERVE_LOCAL_ID_LEN + 1];
		struct live_watch *w;
		bool lent;
	} watches[LIVE_MAX_WATCHES];
	bool pooled; /* taken from the pool (made before its create) */
};

/* A sandbox of the pool: made with the pool's request, its agent answered,
 * never given to anyone; frozen while it waits where no cgroup quota
 * bounds its CPU. Its memoryMb and cpus are reserved in the budget. */
struct pooled {
	struct pooled *next;
	unsigned shape; /* its index in cfg.pools */
	struct live *lv;
	int64_t made_ms;
	uint64_t memory_mb;
	double cpus;
	bool unbounded;
};

struct serve_sbxs {
	struct serve_sbxs_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct serve_sbx *list; /* newest first */
	unsigned live, dead;
	bool stopping;
	pthread_t thread;
	bool have_thread;
	uint64_t created, ended;
	/* the pool: per shape (cfg.pools) its sandboxes (at most its
	 * target), its back-off and what /metrics and /healthz?detail=1 say
	 * of it; one thread fills them all */
	struct pool_shape {
		struct pooled *list;
		unsigned n;
		unsigned fill_fails; /* failures in a row: the back-off */
		int64_t fill_retry_ms;
		char *fill_error; /* the last failure's sentence, until a fill succeeds */
		uint64_t made, hits, misses, failed, expired;
	} shapes[SERVE_SBX_POOL_SHAPES];
	pthread_t filler;
	bool have_filler;
};

bool serve_sbx_id_valid(const char *id)
{
	return serve_id_valid(id, "sbx_");
}

/* Its reservation given back (mu held, or before it is in the table). */
static void unreserve(struct serve_sbxs *ss, struct serve_sbx *x)
{
	if (x->reserved && ss->cfg.budget)
		serve_budget_release(ss->cfg.budget, x->memory_mb, x->cpus);
	x->reserved = false;
}

/* Its kept watches closed but a lent one's (mu held, or x no one's else). */
static void watches_close(struct serve_sbx *x)
{
	for (size_t i = 0; i < LIVE_MAX_WATCHES; i++)
		if (x->watches[i].id[0] && !x->watches[i].lent) {
			live_watch_close(x->watches[i].w);
			memset(&x->watches[i], 0, sizeof x->watches[i]);
		}
}

static void sbx_free(struct serve_sbx *x)
{
	watches_close(x); /* none lent: a lender holds a reference */
	serve_ctxs_free(x->ctxs);
	live_destroy(x->lv);
	for (size_t i = 0; i < 2 * x->meta_count; i++)
		free(x->meta[i]);
	free(x->meta);
	free(x->reason);
	pthread_mutex_destroy(&x->fmu);
	free(x);
}

/* mu held */
static void unref(struct serve_sbx *x)
{
	if (--x->refs == 0)
		sbx_free(x);
}

/* A live one dies (mu held): why, and its processes killed. */
static void mark_dead(struct serve_sbxs *ss, struct serve_sbx *x, const char *sentence)
{
	if (x->dead)
		return;
	x->dead = true;
	x->dead_ms = moat_mono_ms();
	const char *g = live_gone(x->lv);
	x->reason = strdup(sentence ? sentence : g ? g : "the sandbox ended");
	int64_t c = live_cpu_ms(x->lv);
	if (c >= 0)
		x->cpu_ms = c;
	live_kill(x->lv);
	watches_close(x); /* its polling watchers end with it */
	unreserve(ss, x);
	ss->live--;
	ss->dead++;
	ss->ended++;
}

/* mu held: its state now (a dead agent seen) */
static void sync_state(struct serve_sbxs *ss, struct serve_sbx *x)
{
	if (!x->dead && live_gone(x->lv))
		mark_dead(ss, x, NULL);
	if (!x->dead) {
		int64_t m = live_memory(x->lv);
		if (m > x->mem_peak)
			x->mem_peak = m;
	}
}

/* mu held: its CPU cap reached (background work included) ends it */
static void check_cpu(struct serve_sbxs *ss, struct serve_sbx *x)
{
	if (x->dead || !x->max_cpu_ms)
		return;
	int64_t cpu = live_cpu_ms(x->lv);
	if (cpu < 0 || (uint64_t)cpu < x->max_cpu_ms)
		return;
	char why[160];
	snprintf(why, sizeof why, "the sandbox was killed: it used its CPU time (maxCpuTimeMs %llu)",
		 (unsigned long long)x->max_cpu_ms);
	mark_dead(ss, x, why);
}

/* Its disk use sampled from its agent (fmu held, the sandbox thawed). */
static void sample_disk(struct serve_sbxs *ss, struct serve_sbx *x)
{
	uint64_t d;
	struct moat_error e = { 0 };
	int rc = live_disk(x->lv, &d, &e);
	moat_error_clear(&e);
	if (rc < 0)
		return;
	pthread_mutex_lock(&ss->mu);
	x->disk_bytes = d > INT64_MAX ? INT64_MAX : (int64_t)d;
	pthread_mutex_unlock(&ss->mu);
}

/* Its processes frozen or thawed as its state wants (mu not held): frozen
 * while paused, and, where no cgroup quota bounds its CPU, whenever no
 * request is in flight on it. Serialized on fmu, each call acts on the
 * state of its time, so the last one leaves the sandbox as its state
 * says. Before a freeze its disk use is sampled when sample (it cannot
 * change while frozen; never from the reaper: an agent the tenant
 * stopped would hold it up to the agent's 30 s, and with it every other
 * sandbox's expiry and CPU cap). A freeze or thaw that fails ends it:
 * never left half-frozen, nor running unbounded. */
static void apply(struct serve_sbxs *ss, struct serve_sbx *x, bool sample)
{
	pthread_mutex_lock(&x->fmu);
	pthread_mutex_lock(&ss->mu);
	bool want = !x->dead && (x->paused || (x->unbounded && !x->busy));
	bool act = want != x->frozen && !x->dead;
	pthread_mutex_unlock(&ss->mu);
	if (act) {
		if (want && sample)
			sample_disk(ss, x);
		struct moat_error e = { 0 };
		int rc = live_freeze(x->lv, want, &e);
		moat_error_clear(&e);
		pthread_mutex_lock(&ss->mu);
		if (rc == 0) {
			x->frozen = want;
		} else {
			mark_dead(ss, x, live_gone(x->lv) ? NULL
				  : want ? "the sandbox was killed: its processes could not all be "
					   "stopped (a pause or the freeze between requests)"
					 : "the sandbox was killed: its processes could not be resumed");
			x->frozen = false;
		}
		pthread_mutex_unlock(&ss->mu);
	}
	pthread_mutex_unlock(&x->fmu);
}

static void drop(struct serve_sbxs *ss, struct serve_sbx **pp)
{
	struct serve_sbx *x = *pp;
	*pp = x->next;
	x->removed = true;
	if (x->dead)
		ss->dead--;
	unref(x);
}

static void *reaper(void *arg)
{
	struct serve_sbxs *ss = arg;
	pthread_mutex_lock(&ss->mu);
	while (!ss->stopping) {
		int64_t now = moat_mono_ms();
		unsigned tombs = 0;
		struct serve_sbx *pause[64];
		size_t npause = 0;
		for (struct serve_sbx **pp = &ss->list; *pp;) {
			struct serve_sbx *x = *pp;
			sync_state(ss, x);
			if (!x->frozen) /* a frozen one's CPU time stands still: its
					 * next request checks it (begin) */
				check_cpu(ss, x);
			bool idle = !x->dead && !x->busy && now - x->last_ms >= (int64_t)x->idle_ms;
			if (!x->dead && now >= x->end_ms)
				mark_dead(ss, x, "the sandbox expired: it reached the end of its "
					  "lifetime (lifetimeMs)");
			else if (idle && x->on_idle_pause) {
				/* onIdle "pause": paused, not ended (frozen below) */
				if (!x->paused && npause < 64) {
					x->paused = true;
					x->refs++;
					pause[npause++] = x;
				}
			} else if (idle)
				mark_dead(ss, x, "the sandbox expired: it was idle for its "
					  "idleTimeoutMs");
			if (x->dead && (now - x->dead_ms >= TOMBSTONE_MS ||
					++tombs > TOMBSTONES_PER_SANDBOX * (ss->cfg.max ? ss->cfg.max : 1))) {
				drop(ss, pp);
				continue;
			}
			pp = &x->next;
		}
		for (size_t i = 0; i < npause; i++) {
			pthread_mutex_unlock(&ss->mu);
			apply(ss, pause[i], false);
			pthread_mutex_lock(&ss->mu);
			unref(pause[i]);
		}
		moat_cond_wait_ms(&ss->cv, &ss->mu, REAP_EVERY_MS);
	}
	pthread_mutex_unlock(&ss->mu);
	return NULL;
}

/* ---- the pool ---- */

/* A pooled sandbox ends (not in the pool any more): killed, waited for
 * (nothing of it left), its reservation given back. */
static void pooled_end(struct serve_sbxs *ss, struct pooled *p)
{
	if (!p)
		return;
	live_destroy(p->lv); /* kills it and joins its thread: pid 1 reaped, cgroups gone */
	if (ss->cfg.budget)
		serve_budget_release(ss->cfg.budget, p->memory_mb, p->cpus);
	free(p);
}

/* One sandbox for the pool (mu not held): the pool's request prepared
 * afresh, its reservation made, the sandbox made and its agent's first
 * answer awaited (live_create), frozen where nothing bounds its CPU. */
static int pooled_make(struct serve_sbxs *ss, unsigned shape, struct pooled **out,
		       struct moat_error *err)
{
	*out = NULL;
	struct moat_request *req = NULL;
	const char *key = ss->cfg.pools[shape].key;
	if (moat_request_prepare(key, strlen(key), NULL, &ss->cfg.pool_defaults, &req, err) < 0)
		return -1;
	struct pooled *p = calloc(1, sizeof *p);
	if (!p) {
		moat_request_free(req);
		return moat_error_oom(err);
	}
	p->shape = shape;
	p->memory_mb = req->memory_mb;
	p->cpus = req->cpus;
	if (ss->cfg.budget) {
		char *why = NULL;
		if (serve_budget_reserve(ss->cfg.budget, p->memory_mb, p->cpus, &why) < 0) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "%s",
				       why ? why : "past this server's budget for live sandboxes");
			free(why);
			moat_request_free(req);
			free(p);
			return -1;
		}
	}
	/* its backstop: a handed-out one lives max_life_ms from its handout
	 * at most, and it is handed out before POOL_MAX_AGE_MS */
	struct live_config lc = { .req = req, .opts = ss->cfg.opts,
				  .backstop_ms = ss->cfg.max_life_ms + POOL_MAX_AGE_MS +
						 BACKSTOP_SLACK_MS };
	if (live_create(&lc, &p->lv, err) < 0) {
		if (ss->cfg.budget)
			serve_budget_release(ss->cfg.budget, p->memory_mb, p->cpus);
		free(p);
		return -1;
	}
	p->made_ms = moat_mono_ms();
	p->unbounded = !live_cpu_bounded(p->lv);
	if (p->unbounded && live_freeze(p->lv, true, err) < 0) {
		pooled_end(ss, p);
		return -1;
	}
	*out = p;
	return 0;
}

/* The shape the filler makes a sandbox for next (mu held): of those
 * short of their target and past their back-off, the one holding fewest
 * ready (so a run of one shape's creates does not starve the other), or
 * -1; *wait_ms: until the earliest back-off ends, when one holds every
 * short shape back. */
static int shape_to_fill(struct serve_sbxs *ss, int64_t now, int64_t *wait_ms)
{
	*wait_ms = REAP_EVERY_MS * 5;
	int best = -1;
	for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
		struct pool_shape *sh = &ss->shapes[i];
		if (sh->n >= ss->cfg.pools[i].target)
			continue;
		if (now < sh->fill_retry_ms) {
			if (sh->fill_retry_ms - now < *wait_ms)
				*wait_ms = sh->fill_retry_ms - now;
			continue;
		}
		if (best < 0 || sh->n < ss->shapes[best].n)
			best = (int)i;
	}
	return best;
}

/* The pool's thread: keeps each shape's target of sandboxes made, one at
 * a time, off every request's path; replaces a dead or old one; after a
 * failure waits (1 s doubling to 64 s, per shape) and says why once per
 * distinct sentence. */
static void *filler(void *arg)
{
	struct serve_sbxs *ss = arg;
	pthread_mutex_lock(&ss->mu);
	while (!ss->stopping) {
		int64_t now = moat_mono_ms();
		struct pooled *old = NULL;
		for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
			struct pool_shape *sh = &ss->shapes[i];
			for (struct pooled **pp = &sh->list; *pp;) {
				struct pooled *p = *pp;
				if (live_gone(p->lv) || now - p->made_ms >= POOL_MAX_AGE_MS) {
					*pp = p->next;
					sh->n--;
					sh->expired++;
					p->next = old;
					old = p;
					continue;
				}
				pp = &p->next;
			}
		}
		if (old) {
			pthread_mutex_unlock(&ss->mu);
			while (old) {
				struct pooled *p = old;
				old = p->next;
				pooled_end(ss, p);
			}
			pthread_mutex_lock(&ss->mu);
			continue;
		}
		int64_t wait;
		int i = shape_to_fill(ss, now, &wait);
		if (i >= 0) {
			struct pool_shape *sh = &ss->shapes[i];
			pthread_mutex_unlock(&ss->mu);
			struct pooled *p = NULL;
			struct moat_error e = { 0 };
			int rc = pooled_make(ss, (unsigned)i, &p, &e);
			pthread_mutex_lock(&ss->mu);
			if (rc == 0 && ss->stopping) {
				pthread_mutex_unlock(&ss->mu);
				pooled_end(ss, p);
				pthread_mutex_lock(&ss->mu);
			} else if (rc == 0) {
				p->next = sh->list;
				sh->list = p;
				sh->n++;
				sh->made++;
				sh->fill_fails = 0;
				free(sh->fill_error);
				sh->fill_error = NULL;
			} else {
				const char *why = e.message ? e.message : "the sandbox could not be made";
				sh->failed++;
				if (sh->fill_fails < POOL_RETRY_MAX_SHIFT + 1)
					sh->fill_fails++;
				sh->fill_retry_ms = moat_mono_ms() +
						    ((int64_t)POOL_RETRY_MS << (sh->fill_fails - 1));
				bool fresh = !sh->fill_error || strcmp(sh->fill_error, why);
				free(sh->fill_error);
				sh->fill_error = strdup(why);
				if (fresh && ss->cfg.log)
					serve_log_notice(ss->cfg.log, "warn", "pool",
							 "cannot make a live sandbox for the pool "
							 "(%s): %s (creates make their own meanwhile)",
							 ss->cfg.pools[i].name, why);
			}
			moat_error_clear(&e);
			continue;
		}
		moat_cond_wait_ms(&ss->cv, &ss->mu, wait > 0 ? wait : 1);
	}
	pthread_mutex_unlock(&ss->mu);
	return NULL;
}

/* A sandbox of the pool for a create whose request is exactly one of
 * the pool's shapes' (mu not held): taken out of the pool, so no other
 * create can have it; NULL when that shape is empty (a miss) or the
 * request is none of them. */
static struct pooled *pooled_take(struct serve_sbxs *ss, const char *key, const char *rootfs,
				  const struct moat_request *req)
{
	if (!key || rootfs)
		return NULL;
	unsigned i = 0;
	while (i < SERVE_SBX_POOL_SHAPES &&
	       (!ss->cfg.pools[i].target || !ss->cfg.pools[i].key || strcmp(key, ss->cfg.pools[i].key)))
		i++;
	if (i == SERVE_SBX_POOL_SHAPES)
		return NULL;
	struct pool_shape *sh = &ss->shapes[i];
	pthread_mutex_lock(&ss->mu);
	struct pooled *p = sh->list;
	if (p) {
		sh->list = p->next;
		sh->n--;
		sh->hits++;
	} else {
		sh->misses++;
	}
	pthread_cond_broadcast(&ss->cv); /* the filler makes its replacement */
	pthread_mutex_unlock(&ss->mu);
	if (p && (live_gone(p->lv) || p->memory_mb != req->memory_mb || p->cpus != req->cpus)) {
		pooled_end(ss, p); /* died while it waited: the create makes its own */
		p = NULL;
	}
	return p;
}

void serve_sbxs_pool_json(struct serve_sbxs *ss, unsigned shape, struct moat_buf *b)
{
	if (!ss || shape >= SERVE_SBX_POOL_SHAPES)
		return;
	pthread_mutex_lock(&ss->mu);
	struct pool_shape *sh = &ss->shapes[shape];
	moat_buf_appendf(b, "{\"target\":%u,\"ready\":%u,\"hits\":%llu,\"misses\":%llu,"
			 "\"fillFailures\":%llu,\"lastError\":", ss->cfg.pools[shape].target, sh->n,
			 (unsigned long long)sh->hits, (unsigned long long)sh->misses,
			 (unsigned long long)sh->failed);
	if (sh->fill_error)
		moat_buf_append_json_string(b, sh->fill_error, strlen(sh->fill_error));
	else
		moat_buf_append(b, "null", 4);
	moat_buf_append(b, "}", 1);
	pthread_mutex_unlock(&ss->mu);
}

int serve_sbxs_start(struct serve_sbxs **out, const struct serve_sbxs_config *cfg,
		     struct moat_error *err)
{
	*out = NULL;
	if (!cfg->max)
		return 0;
	struct serve_sbxs *ss = calloc(1, sizeof *ss);
	if (!ss)
		return moat_error_oom(err);
	ss->cfg = *cfg;
	pthread_mutex_init(&ss->mu, NULL);
	pthread_cond_init(&ss->cv, NULL);
	if ((errno = pthread_create(&ss->thread, NULL, reaper, ss)) != 0) {
		free(ss);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot start the sandboxes' thread: %s", strerror(errno));
	}
	ss->have_thread = true;
	bool any = false;
	for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
		if (!cfg->pools[i].key)
			ss->cfg.pools[i].target = 0;
		any |= ss->cfg.pools[i].target > 0;
	}
	if (any) {
		if ((errno = pthread_create(&ss->filler, NULL, filler, ss)) != 0) {
			int e = errno;
			serve_sbxs_stop(ss);
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
					      "cannot start the sandbox pool's thread: %s",
					      strerror(e));
		}
		ss->have_filler = true;
	}
	*out = ss;
	return 0;
}

void serve_sbxs_stop(struct serve_sbxs *ss)
{
	if (!ss)
		return;
	pthread_mutex_lock(&ss->mu);
	ss->stopping = true;
	pthread_cond_broadcast(&ss->cv);
	pthread_mutex_unlock(&ss->mu);
	if (ss->have_thread)
		pthread_join(ss->thread, NULL);
	if (ss->have_filler) /* a sandbox it was making ends there */
		pthread_join(ss->filler, NULL);
	/* every sandbox ends with the service: killed first, all at once;
	 * the pooled ones waited for (nothing of them left) */
	pthread_mutex_lock(&ss->mu);
	struct pooled *pool = NULL;
	for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
		struct pool_shape *sh = &ss->shapes[i];
		while (sh->list) {
			struct pooled *p = sh->list;
			sh->list = p->next;
			p->next = pool;
			pool = p;
		}
		sh->n = 0;
	}
	for (struct pooled *p = pool; p; p = p->next)
		live_kill(p->lv);
	for (struct serve_sbx *x = ss->list; x; x = x->next)
		live_kill(x->lv);
	while (ss->list)
		drop(ss, &ss->list);
	pthread_mutex_unlock(&ss->mu);
	while (pool) {
		struct pooled *p = pool;
		pool = p->next;
		pooled_end(ss, p);
	}
	for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
		free(ss->shapes[i].fill_error);
		ss->shapes[i].fill_error = NULL;
	}
	/* a request still holding one frees it with its last reference: the
	 * service waits for its requests before this (wait_idle) */
}

unsigned serve_sbxs_max(const struct serve_sbxs *ss)
{
	return ss ? ss->cfg.max : 0;
}

int serve_sbx_create(struct serve_sbxs *ss, const uint8_t cred[MOAT_SHA256_LEN],
		     struct moat_request *req, const char *key, uint64_t life_ms,
		     uint64_t idle_ms, char **meta, size_t meta_count, const char *rootfs,
		     struct serve_sbx **out, struct moat_error *err)
{
	*out = NULL;
	struct serve_sbx *x = calloc(1, sizeof *x);
	if (!x) {
		moat_request_free(req);
		for (size_t i = 0; i < 2 * meta_count; i++)
			free(meta[i]);
		free(meta);
		return moat_error_oom(err);
	}
	x->meta = meta;
	x->meta_count = meta_count;
	x->memory_mb = req->memory_mb;
	x->pids = req->pids_limit;
	x->cpus = req->cpus;
	x->idle_ms = idle_ms;
	x->cpu_ms = -1;
	x->mem_peak = -1;
	x->disk_bytes = -1;
	pthread_mutex_init(&x->fmu, NULL);
	x->ctxs = serve_ctxs_new();
	pthread_mutex_lock(&ss->mu);
	bool full = ss->stopping || ss->live >= ss->cfg.max;
	if (!full)
		ss->live++; /* held while it is made */
	pthread_mutex_unlock(&ss->mu);
	if (full) {
		moat_request_free(req);
		sbx_free(x);
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "%u live sandboxes at once is this server's most (--max-sandboxes); "
			       "retry later", ss->cfg.max);
		return -2;
	}
	/* one of the pool's, when the request is exactly the pool's: its
	 * reservation becomes this sandbox's */
	struct pooled *p = pooled_take(ss, key, rootfs, req);
	if (p) {
		x->lv = p->lv;
		x->pooled = true;
		x->frozen = p->unbounded; /* as the pool left it */
		x->reserved = ss->cfg.budget != NULL;
		free(p);
		moat_request_free(req);
		req = NULL;
	} else if (ss->cfg.budget) {
		char *why = NULL;
		if (serve_budget_reserve(ss->cfg.budget, x->memory_mb, x->cpus, &why) < 0) {
			pthread_mutex_lock(&ss->mu);
			ss->live--;
			pthread_mutex_unlock(&ss->mu);
			moat_request_free(req);
			sbx_free(x);
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "%s",
				       why ? why : "past this server's budget for live sandboxes");
			free(why);
			return -2;
		}
		x->reserved = true;
	}
	if (!x->ctxs || serve_new_id(x->id, "sbx_") < 0) {
		moat_request_free(req);
		goto fail;
	}
	memcpy(x->cred, cred, MOAT_SHA256_LEN);
	/* another root: the service's options with it, copied by live_create */
	struct moat_run_options own;
	if (rootfs) {
		own = *ss->cfg.opts;
		own.rootfs_dir = rootfs;
	}
	struct live_config lc = { .req = req, .opts = rootfs ? &own : ss->cfg.opts,
				  .backstop_ms = ss->cfg.max_life_ms + BACKSTOP_SLACK_MS };
	if (!x->lv && live_create(&lc, &x->lv, err) < 0)
		goto fail;
	/* id, lifetime and idle clock start here, at the handout for a
	 * pooled one */
	x->created_wall_ms = serve_wall_ms();
	x->created_ms = x->last_ms = moat_mono_ms();
	x->end_ms = x->created_ms + (int64_t)life_ms;
	x->refs = 2; /* the table's and the caller's */
	pthread_mutex_lock(&ss->mu);
	if (ss->stopping) {
		ss->live--;
		unreserve(ss, x);
		pthread_mutex_unlock(&ss->mu);
		sbx_free(x);
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the server is stopping");
		return -2;
	}
	x->unbounded = !live_cpu_bounded(x->lv);
	x->next = ss->list;
	ss->list = x;
	ss->created++;
	pthread_mutex_unlock(&ss->mu);
	apply(ss, x, true); /* no cgroup bounds it: frozen until a request */
	*out = x;
	return 0;
fail:
	pthread_mutex_lock(&ss->mu);
	ss->live--;
	unreserve(ss, x);
	pthread_mutex_unlock(&ss->mu);
	sbx_free(x);
	return -1;
}

struct serve_sbx *serve_sbx_get(struct serve_sbxs *ss, const char *id,
				const uint8_t cred[MOAT_SHA256_LEN])
{
	if (!ss || !serve_sbx_id_valid(id))
		return NULL;
	pthread_mutex_lock(&ss->mu);
	struct serve_sbx *x = ss->list;
	for (; x; x = x->next)
		if (serve_ct_equal(x->id, id, strlen(id) + 1) && /* this node's: one length */
		    serve_ct_equal(x->cred, cred, MOAT_SHA256_LEN))
			break;
	if (x)
		x->refs++;
	pthread_mutex_unlock(&ss->mu);
	return x;
}

void serve_sbx_put(struct serve_sbxs *ss, struct serve_sbx *x)
{
	if (!ss || !x)
		return;
	pthread_mutex_lock(&ss->mu);
	unref(x);
	pthread_mutex_unlock(&ss->mu);
}

struct live *serve_sbx_live(struct serve_sbx *x)
{
	return x->lv;
}

struct serve_ctxs *serve_sbx_ctxs(struct serve_sbx *x, uint64_t *memory_mb)
{
	*memory_mb = x->memory_mb;
	return x->ctxs;
}

const char *serve_sbx_id(const struct serve_sbx *x)
{
	return x->id;
}

char *serve_sbx_begin(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x);
	check_cpu(ss, x);
	char *gone = x->dead ? strdup(x->reason ? x->reason : "the sandbox ended") : NULL;
	if (!x->dead) {
		x->busy++;
		x->paused = false; /* any request on a paused sandbox resumes it */
		x->last_ms = moat_mono_ms();
	}
	pthread_mutex_unlock(&ss->mu);
	if (!gone)
		apply(ss, x, true); /* thawed before its agent is asked */
	return gone;
}

void serve_sbx_end(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	if (x->busy)
		x->busy--;
	x->last_ms = moat_mono_ms();
	pthread_mutex_unlock(&ss->mu);
	apply(ss, x, true); /* the last request on an unbounded one: frozen again */
}

void serve_sbx_set_accounting(struct serve_sbxs *ss, struct serve_sbx *x, bool on_idle_pause,
			      uint64_t max_cpu_ms)
{
	pthread_mutex_lock(&ss->mu);
	x->on_idle_pause = on_idle_pause;
	x->max_cpu_ms = max_cpu_ms;
	pthread_mutex_unlock(&ss->mu);
}

int serve_sbx_pause(struct serve_sbxs *ss, struct serve_sbx *x, bool pause, char **gone)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x);
	check_cpu(ss, x);
	int rc = 0;
	if (x->dead) {
		*gone = strdup(x->reason ? x->reason : "the sandbox ended");
		rc = -2;
	} else if (pause && x->busy) {
		rc = -1; /* its agent is answering a request: never stopped mid-answer */
	} else {
		x->paused = pause;
		x->last_ms = moat_mono_ms();
	}
	pthread_mutex_unlock(&ss->mu);
	if (rc == 0)
		apply(ss, x, true);
	return rc;
}

bool serve_sbx_paused(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	bool p = x->paused && !x->dead;
	pthread_mutex_unlock(&ss->mu);
	return p;
}

char *serve_sbx_gone(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x);
	char *g = x->dead ? strdup(x->reason ? x->reason : "the sandbox ended") : NULL;
	pthread_mutex_unlock(&ss->mu);
	return g;
}

int serve_sbx_extend(struct serve_sbxs *ss, struct serve_sbx *x, uint64_t ms, char **gone)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x);
	int rc = 0;
	if (x->dead) {
		*gone = strdup(x->reason ? x->reason : "the sandbox ended");
		rc = -1;
	} else {
		int64_t want = moat_mono_ms() + (int64_t)ms;
		int64_t most = x->created_ms + (int64_t)ss->cfg.max_life_ms;
		x->end_ms = want < most ? want : most;
		rc = want <= most ? 0 : 1;
	}
	pthread_mutex_unlock(&ss->mu);
	return rc;
}

int64_t serve_sbx_left_ms(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	int64_t left = x->dead ? 0 : x->end_ms - moat_mono_ms();
	pthread_mutex_unlock(&ss->mu);
	return left > 0 ? left : 0;
}

void serve_sbx_delete(struct serve_sbxs *ss, struct serve_sbx *x)
{
	pthread_mutex_lock(&ss->mu);
	mark_dead(ss, x, "the sandbox was deleted");
	for (struct serve_sbx **pp = &ss->list; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			drop(ss, pp);
			break;
		}
	pthread_mutex_unlock(&ss->mu);
	/* nothing of it left before the answer: its processes, cgroups, files */
	live_wait_ended(x->lv);
}

int serve_sbx_watch_keep(struct serve_sbxs *ss, struct serve_sbx *x, struct live_watch *w,
			 char id[SERVE_LOCAL_ID_LEN + 1])
{
	if (serve_new_local_id(id, "wch_") < 0) {
		live_watch_close(w);
		return -1;
	}
	int rc = -2;
	pthread_mutex_lock(&ss->mu);
	/* a free slot: live_watch_open counts every open watch, kept or not */
	for (size_t i = 0; i < LIVE_MAX_WATCHES && !x->dead && rc < 0; i++)
		if (!x->watches[i].id[0]) {
			memcpy(x->watches[i].id, id, SERVE_LOCAL_ID_LEN + 1);
			x->watches[i].w = w;
			x->watches[i].lent = false;
			rc = 0;
		}
	pthread_mutex_unlock(&ss->mu);
	if (rc < 0)
		live_watch_close(w);
	return rc;
}

/* mu held */
static int watch_slot(struct serve_sbx *x, const char *id)
{
	for (int i = 0; i < (int)LIVE_MAX_WATCHES; i++)
		if (x->watches[i].id[0] && !strcmp(x->watches[i].id, id))
			return i;
	return -1;
}

struct live_watch *serve_sbx_watch_lend(struct serve_sbxs *ss, struct serve_sbx *x,
					const char *id, int *why)
{
	struct live_watch *w = NULL;
	pthread_mutex_lock(&ss->mu);
	int i = watch_slot(x, id);
	*why = i < 0 ? ENOENT : x->watches[i].lent ? EBUSY : 0;
	if (!*why) {
		x->watches[i].lent = true;
		w = x->watches[i].w;
	}
	pthread_mutex_unlock(&ss->mu);
	return w;
}

void serve_sbx_watch_return(struct serve_sbxs *ss, struct serve_sbx *x, const char *id,
			    struct live_watch *w, bool keep)
{
	pthread_mutex_lock(&ss->mu);
	int i = watch_slot(x, id);
	bool kept = i >= 0 && x->watches[i].w == w && keep && !x->dead;
	if (kept)
		x->watches[i].lent = false;
	else if (i >= 0 && x->watches[i].w == w)
		memset(&x->watches[i], 0, sizeof x->watches[i]);
	pthread_mutex_unlock(&ss->mu);
	if (!kept)
		live_watch_close(w);
}

int serve_sbx_watch_drop(struct serve_sbxs *ss, struct serve_sbx *x, const char *id)
{
	struct live_watch *w = NULL;
	pthread_mutex_lock(&ss->mu);
	int i = watch_slot(x, id);
	if (i >= 0) {
		if (!x->watches[i].lent) /* a lent one: its lender closes it */
			w = x->watches[i].w;
		memset(&x->watches[i], 0, sizeof x->watches[i]);
	}
	pthread_mutex_unlock(&ss->mu);
	live_watch_close(w);
	return i < 0 ? -1 : 0;
}

/* x's JSON object into b (mu held). */
static void sbx_json(struct serve_sbx *x, struct moat_buf *b)
{
	int64_t now = moat_mono_ms();
	moat_buf_appendf(b, "{\"id\":\"%s\",\"state\":\"%s\",\"frozen\":%s,\"pool\":%s", x->id,
			 x->dead ? "ended" : x->paused ? "paused" : "running",
			 !x->dead && x->frozen ? "true" : "false", x->pooled ? "true" : "false");
	serve_put_time(b, "createdAt", x->created_wall_ms);
	serve_put_time(b, "expiresAt", x->created_wall_ms + (x->end_ms - x->created_ms));
	moat_buf_appendf(b, ",\"idleTimeoutMs\":%llu,\"onIdle\":\"%s\",\"maxCpuTimeMs\":",
			 (unsigned long long)x->idle_ms, x->on_idle_pause ? "pause" : "delete");
	if (x->max_cpu_ms)
		moat_buf_appendf(b, "%llu", (unsigned long long)x->max_cpu_ms);
	else
		moat_buf_appendf(b, "null");
	if (x->dead && x->reason) {
		moat_buf_append(b, ",\"reason\":", 10);
		moat_buf_append_json_string(b, x->reason, strlen(x->reason));
	}
	moat_buf_appendf(b, ",\"memoryMb\":%llu,\"cpus\":%g,\"pidsLimit\":%llu,",
			 (unsigned long long)x->memory_mb, x->cpus, (unsigned long long)x->pids);
	live_made_json(x->lv, b, x->unbounded ? FREEZE_WARNING : NULL);
	int64_t mem = x->dead ? -1 : live_memory(x->lv);
	int64_t cpu = x->dead ? x->cpu_ms : live_cpu_ms(x->lv);
	moat_buf_append(b, ",\"usage\":{", 10);
	moat_buf_appendf(b, "\"cpuTimeMs\":");
	if (cpu >= 0)
		moat_buf_appendf(b, "%lld", (long long)cpu);
	else
		moat_buf_appendf(b, "null");
	if (mem >= 0)
		moat_buf_appendf(b, ",\"memoryBytes\":%lld", (long long)mem);
	else
		moat_buf_appendf(b, ",\"memoryBytes\":null");
	if (x->mem_peak >= 0)
		moat_buf_appendf(b, ",\"memoryPeakBytes\":%lld", (long long)x->mem_peak);
	else
		moat_buf_appendf(b, ",\"memoryPeakBytes\":null");
	if (x->disk_bytes >= 0)
		moat_buf_appendf(b, ",\"diskBytes\":%lld", (long long)x->disk_bytes);
	else
		moat_buf_appendf(b, ",\"diskBytes\":null");
	moat_buf_appendf(b, ",\"processes\":%u,\"idleMs\":%lld}", x->dead ? 0 : live_running(x->lv),
			 (long long)(x->busy ? 0 : now - x->last_ms));
	moat_buf_append(b, ",\"metadata\":{", 13);
	for (size_t i = 0; i < x->meta_count; i++) {
		if (i)
			moat_buf_append(b, ",", 1);
		moat_buf_append_json_string(b, x->meta[2 * i], strlen(x->meta[2 * i]));
		moat_buf_append(b, ":", 1);
		moat_buf_append_json_string(b, x->meta[2 * i + 1], strlen(x->meta[2 * i + 1]));
	}
	moat_buf_append(b, "}}", 2);
}

void serve_sbx_json(struct serve_sbxs *ss, struct serve_sbx *x, struct moat_buf *b)
{
	/* its disk use now, when its agent runs (frozen, it is as sampled
	 * before the freeze: nothing in it writes) */
	pthread_mutex_lock(&x->fmu);
	pthread_mutex_lock(&ss->mu);
	bool ask = !x->dead && !x->frozen;
	pthread_mutex_unlock(&ss->mu);
	if (ask)
		sample_disk(ss, x);
	pthread_mutex_unlock(&x->fmu);
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x);
	check_cpu(ss, x);
	sbx_json(x, b);
	pthread_mutex_unlock(&ss->mu);
}

static bool meta_match(const struct serve_sbx *x, char *const *filter, size_t nfilter)
{
	for (size_t f = 0; f < nfilter; f++) {
		bool hit = false;
		for (size_t i = 0; i < x->meta_count && !hit; i++)
			hit = !strcmp(x->meta[2 * i], filter[2 * f]) &&
			      !strcmp(x->meta[2 * i + 1], filter[2 * f + 1]);
		if (!hit)
			return false;
	}
	return true;
}

void serve_sbx_list(struct serve_sbxs *ss, const uint8_t cred[MOAT_SHA256_LEN],
		    char *const *filter, size_t nfilter, unsigned limit, const char *after,
		    struct moat_buf *b)
{
	moat_buf_append(b, "{\"sandboxes\":[", 14);
	pthread_mutex_lock(&ss->mu);
	/* newest first; "next" is the id of the last one given */
	bool started = !after;
	unsigned n = 0;
	const char *last = NULL;
	bool more = false;
	for (struct serve_sbx *x = ss->list; x; x = x->next) {
		if (!serve_ct_equal(x->cred, cred, MOAT_SHA256_LEN))
			continue;
		if (!started) {
			started = !strcmp(x->id, after);
			continue;
		}
		sync_state(ss, x);
		if (x->dead || !meta_match(x, filter, nfilter))
			continue;
		if (n == limit) {
			more = true;
			break;
		}
		if (n++)
			moat_buf_append(b, ",", 1);
		sbx_json(x, b);
		last = x->id;
	}
	moat_buf_append(b, "]", 1);
	if (more && last)
		moat_buf_appendf(b, ",\"next\":\"%s\"", last);
	else
		moat_buf_appendf(b, ",\"next\":null");
	pthread_mutex_unlock(&ss->mu);
	moat_buf_append(b, "}\n", 2);
}

void serve_sbxs_metrics(struct serve_sbxs *ss, struct moat_buf *b)
{
	if (!ss)
		return;
	pthread_mutex_lock(&ss->mu);
	moat_buf_appendf(b,
			 "# HELP moat_serve_sandboxes Live sandboxes now.\n"
			 "# TYPE moat_serve_sandboxes gauge\nmoat_serve_sandboxes %u\n"
			 "# HELP moat_serve_sandboxes_max Live sandboxes at once, at most.\n"
			 "# TYPE moat_serve_sandboxes_max gauge\nmoat_serve_sandboxes_max %u\n"
			 "# HELP moat_serve_sandboxes_created_total Live sandboxes made.\n"
			 "# TYPE moat_serve_sandboxes_created_total counter\n"
			 "moat_serve_sandboxes_created_total %llu\n"
			 "# HELP moat_serve_sandboxes_ended_total Live sandboxes ended.\n"
			 "# TYPE moat_serve_sandboxes_ended_total counter\n"
			 "moat_serve_sandboxes_ended_total %llu\n",
			 ss->live, ss->cfg.max, (unsigned long long)ss->created,
			 (unsigned long long)ss->ended);
	/* the pool's, one series per shape */
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{ "target", "gauge", "Live sandboxes the pool keeps made of this shape "
				     "(--sandbox-pool; serve.sandboxes.networkPool)." },
		{ "ready", "gauge", "Live sandboxes made ahead, waiting for a create." },
		{ "created_total", "counter", "Live sandboxes the pool made." },
		{ "used_total", "counter", "Creates handed a sandbox of the pool (each once)." },
		{ "cold_total", "counter", "Creates the pool could have served that found it empty." },
		{ "failed_total", "counter", "Sandboxes the pool could not make." },
		{ "expired_total", "counter", "Pooled sandboxes replaced (dead, or for age)." },
	};
	for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
		moat_buf_appendf(b, "# HELP moat_serve_sandbox_pool_%s %s\n"
				 "# TYPE moat_serve_sandbox_pool_%s %s\n",
				 fam[f].name, fam[f].help, fam[f].name, fam[f].type);
		for (unsigned i = 0; i < SERVE_SBX_POOL_SHAPES; i++) {
			const struct pool_shape *sh = &ss->shapes[i];
			unsigned long long v[] = { ss->cfg.pools[i].target, sh->n, sh->made, sh->hits,
						   sh->misses, sh->failed, sh->expired };
			moat_buf_appendf(b, "moat_serve_sandbox_pool_%s{shape=\"%s\"} %llu\n",
					 fam[f].name, ss->cfg.pools[i].name ? ss->cfg.pools[i].name : "?",
					 v[f]);
		}
	}
	pthread_mutex_unlock(&ss->mu);
}
