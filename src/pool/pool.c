/* The warm pool of moat serve (docs/SERVE.md, "The pool"): per language
 * (python, javascript, and typescript when the root has esbuild), up to
 * `want` sandboxes prewarmed by one refill
 * thread, each handed exactly one request and then released by the worker
 * that ran it. A request the pool cannot serve, or that finds it empty,
 * runs cold; a pool never shares a sandbox. The refill thread is the parent
 * of every pooled sandbox's pid 1 (its parent-death signal follows that
 * thread), so it lives until the last pooled sandbox is released. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sys.h"
#include "pool/internal.h"

#define POOL_LANGS 3
#define POOL_TS 2
#define POOL_MAX_IDLE_MS (10 * 60 * 1000) /* an idle sandbox is replaced after this */
/* the Python zygote's age bound (serve.poolZygoteMaxAge) comes from the
 * limits; MOAT_TEST_ZYGOTE_MAX_AGE_MS overrides it for tests */
/* while the pool is otherwise idle (one request running in a sandbox it
 * handed out at least this long after the one before), a refill of a kind
 * that still has one ready waits for that run to end, so that a request's
 * start does not share the CPUs with an interpreter's; at most this long
 * after the hand-over, so that a long run does not keep the pool short.
 * Under load (hand-overs closer than this, or two runs at once) the refill
 * goes at once, so that requests keep finding sandboxes made ahead.
 * MOAT_TEST_REFILL_DEFER_MS sets it for tests */
#define REFILL_DEFER_MS 200

/* What a request's language names; the typescript ones are warm nodes too
 * (their boot request is javascript) with esbuild already started and the
 * ES module loader and web globals loaded: pool.cjs, main({ts}). */
static const enum moat_language pool_lang[POOL_LANGS] = { MOAT_LANG_PYTHON, MOAT_LANG_JAVASCRIPT,
							  MOAT_LANG_TYPESCRIPT };
#define JS_BOOT "require(\"/opt/moat/runtime/js/pool.cjs\").main("

struct slot {
	struct moat_sandbox *sb;
	int64_t born;
	uint64_t gen; /* a child of that zygote (pool_zygote_create; dies with it); 0: not */
};

struct pool {
	/* finished sandboxes whose release (cgroup leaves: several ms of
	 * waiting for the kernel) the thread does after the answer went out */
	struct moat_sandbox **done;
	unsigned ndone, done_cap;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool started, stop;
	unsigned want;
	struct moat_run_options opts;
	struct moat_request *boot[POOL_LANGS];
	struct slot *ready[POOL_LANGS];
	unsigned nready[POOL_LANGS];
	unsigned in_use;
	/* true while every run slot of the service is taken: a prewarm then
	 * would only compete with the runs for the CPUs (requests find the
	 * pool empty under saturation anyway, and run cold) */
	bool (*saturated)(void *ctx);
	void *sat_ctx;
	uint64_t created, used, failed, expired, cold[POOL_LANGS], busy_refill_ms;
	/* requests running in a sandbox the pool handed out (made ahead, or
	 * made by the zygote for them), the latest hand-over (moat_mono_ms)
	 * and the time since the one before it, and the refills that waited
	 * for such a run (REFILL_DEFER_MS) */
	unsigned running;
	int64_t handed_at, handed_gap;
	uint64_t deferred;
	bool deferring;
	uint64_t held; /* spells of refills held while saturated (slots or CPUs) */
	bool holding;
	int64_t defer_ms;
	int64_t idle_bytes[POOL_LANGS]; /* an idle sandbox's memory when last handed out */
	char *last_error;
	bool ts_ok; /* the root has esbuild: the typescript kind is kept */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	/* the Python zygote (zygote.c), or NULL; started, restarted and
	 * released by the thread; zyg_in_use: its children running, made
	 * ahead or for their request (a zygote is not replaced under them) */
	struct pool_zygote *zyg;
	unsigned zyg_in_use, zyg_fails;
	/* a replaced zygote (pool_zygote_rotate) lives until the children
	 * it made are done: old_gen (0: none), old_in_use of them running;
	 * rotations counts the replacements, so a hold knows where it went */
	uint64_t old_gen;
	unsigned old_in_use, rotations;
	/* the replaced one's children made ahead stay to be used (it was
	 * replaced for the children it made, all within its bound) until it is
	 * as old as the age bound; else (replaced for its age) they go at once */
	bool old_keep;
	int64_t zyg_max_age_ms;
	uint64_t zyg_made_for; /* children made for a request that found none ready */
	int64_t zyg_retry_at;
	char *zyg_error;
};

/* A warning for the operator (cfg->warn). */
static void __attribute__((format(printf, 2, 3))) warn(struct pool *p, const char *fmt, ...)
{
	if (!p->warn)
		return;
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n >= 0) {
		p->warn(p->warn_ctx, msg);
		free(msg);
	}
}

/* Kind i is kept: all but typescript where the root has no esbuild. */
static bool kept(const struct pool *p, int i)
{
	return i != POOL_TS || p->ts_ok;
}

/* The pool a request may use. */
static int lang_index(const struct pool *p, enum moat_language l)
{
	for (int i = 0; i < POOL_LANGS; i++)
		if (pool_lang[i] == l)
			return kept(p, i) ? i : -1;
	return -1;
}

/* How many sandboxes of kind i the pool keeps (python ones: the zygote's
 * children while it runs). */
static unsigned want_of(const struct pool *p, int i)
{
	return kept(p, i) ? p->want : 0;
}

/* The boot code of kind i: moat_pool.py's main, or pool.cjs's, given the
 * transpiler's spec for a typescript one. */
static char *boot_code(int i)
{
	if (pool_lang[i] == MOAT_LANG_PYTHON)
		return strdup("import moat_pool\nmoat_pool.main()\n");
	if (i != POOL_TS)
		return strdup(JS_BOOT ");\n");
	char *spec = pool_typescript_spec(), *code = NULL;
	if (spec && asprintf(&code, JS_BOOT "{\"ts\":%s});\n", spec) < 0)
		code = NULL;
	free(spec);
	return code;
}

/* A failure is logged once per distinct message: true when msg is not
 * *last (which then becomes a copy of it). */
static bool new_error(char **last, const char *msg)
{
	if (*last && !strcmp(*last, msg ? msg : ""))
		return false;
	free(*last);
	*last = msg ? strdup(msg) : NULL;
	return true;
}

/* The zygote failed (what: to start, or to make a sandbox; why: its
 * error): the next start waits 1 s, doubling to 64 s; logged once per
 * distinct message. Under p->mu. */
static void zygote_backoff(struct pool *p, const char *why, const char *what)
{
	p->zyg_fails = p->zyg_fails < 6 ? p->zyg_fails + 1 : 6;
	p->zyg_retry_at = moat_mono_ms() + (1000L << (p->zyg_fails - 1));
	if (new_error(&p->zyg_error, why))
		warn(p, "%s: %s (Python requests use warm sandboxes until it is replaced)", what,
		     why ? why : "?");
}

/* A zygote's child running (under p->mu): counted against the running
 * zygote; the returned mark says, at zyg_unhold, whether that zygote has
 * been replaced since (the count then went to old_in_use: a hold spans at
 * most one replacement, since the next waits for old_in_use to be 0). */
static unsigned zyg_hold(struct pool *p)
{
	p->zyg_in_use++;
	return p->rotations;
}

static void zyg_unhold(struct pool *p, unsigned mark)
{
	if (mark != p->rotations)
		p->old_in_use--;
	else
		p->zyg_in_use--;
}

/* One sandbox for language i, outside the lock. */
static void refill_one(struct pool *p, int i)
{
	struct moat_sandbox *sb = NULL;
	struct moat_error err = { 0 };
	int64_t t0 = moat_mono_ms();
	/* python: a child of the zygote while it runs, made up to its
	 * request (cgroups joined, mounts built, pid 2 locked down and waiting
	 * on its stdin); else a warm interpreter */
	bool zyg = pool_lang[i] == MOAT_LANG_PYTHON && pool_zygote_up(p->zyg);
	uint64_t gen = 0;
	int rc = zyg ? pool_zygote_create(p->zyg, p->boot[i], &p->opts, RUN_ADOPT_AHEAD, &sb, &gen,
					  &err)
		     : run_sandbox_prewarm(p->boot[i], &p->opts, &sb, &err);
	pthread_mutex_lock(&p->mu);
	p->busy_refill_ms += (uint64_t)(moat_mono_ms() - t0);
	/* its bound, reached by a request's child meanwhile: no failure (the
	 * loop replaces it) */
	bool spent = rc < 0 && zyg && pool_zygote_spent(p->zyg);
	if (rc < 0 && zyg && !spent) {
		/* a zygote that runs but cannot make a sandbox here (a host that
		 * refuses nested namespaces, a limit) would send every Python
		 * request cold: it is replaced as one that failed to start
		 * (backing off), and Python uses warm interpreters meanwhile */
		pool_zygote_condemn(p->zyg);
		zygote_backoff(p, err.message, "the Python zygote could not make a sandbox");
	} else if (zyg) {
		p->zyg_fails = 0;
	}
	if (rc < 0 && !spent) {
		p->failed++;
		if (!zyg && new_error(&p->last_error, err.message))
			warn(p, "cannot prewarm a %s sandbox: %s (requests run cold)",
			     moat_lang_get(pool_lang[i])->name, err.message ? err.message : "?");
	} else if (rc == 0) {
		p->created++;
		p->ready[i][p->nready[i]++] = (struct slot){ sb, moat_mono_ms(), gen };
	}
	pthread_mutex_unlock(&p->mu);
	moat_error_clear(&err);
}

/* Releases sb with p->mu dropped for the time (the lock is held on entry
 * and on return). */
static void release_unlocked(struct pool *p, struct moat_sandbox *sb)
{
	pthread_mutex_unlock(&p->mu);
	moat_sandbox_release(sb);
	pthread_mutex_lock(&p->mu);
}

/* Waits on p->cv (p->mu held) for at most ms. */
static void wait_ms(struct pool *p, long ms)
{
	moat_cond_wait_ms(&p->cv, &p->mu, ms);
}

/* Starts (or replaces) the zygote, outside the lock; a failure backs off
 * (1 s doubling to 64 s, zygote_backoff). A start does not end the back-off:
 * its first sandbox does (refill_one). */
static void zygote_start(struct pool *p)
{
	struct moat_error err = { 0 };
	int rc = pool_zygote_start(p->zyg, &err);
	pthread_mutex_lock(&p->mu);
	if (rc < 0)
		zygote_backoff(p, err.message, "cannot start the Python zygote");
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	moat_error_clear(&err);
}

/* Replaces the running zygote with a new one (started first, so Python
 * requests never go without), outside the lock. The old one's children
 * made ahead are released by the thread's loop (a request may still take
 * one meanwhile); the ones running keep the old zygote alive (old_in_use)
 * until they are done. A new one that does not start leaves the old one
 * running, to be tried again after the back-off. */
static void zygote_rotate(struct pool *p, enum pool_zygote_reason why)
{
	struct moat_error err = { 0 };
	uint64_t gen = pool_zygote_rotate(p->zyg, why, &err);
	pthread_mutex_lock(&p->mu);
	if (!gen) {
		zygote_backoff(p, err.message, "cannot start the Python zygote that replaces one");
	} else {
		p->old_gen = gen;
		p->old_keep = why == POOL_ZYGOTE_CHILDREN;
		p->old_in_use = p->zyg_in_use;
		p->zyg_in_use = 0;
		p->rotations++;
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	moat_error_clear(&err);
}

/* Ready slot k of kind i taken out of the list (under p->mu). */
static struct moat_sandbox *take_at(struct pool *p, int i, unsigned k)
{
	struct moat_sandbox *sb = p->ready[i][k].sb;
	memmove(&p->ready[i][k], &p->ready[i][k + 1], (--p->nready[i] - k) * sizeof p->ready[i][0]);
	return sb;
}

/* Where in kind i's list a ready child of the zygote of gen is, -1: none;
 * take_gen: it, taken out of the list, or NULL (under p->mu). */
static int find_gen(const struct pool *p, int i, uint64_t gen)
{
	for (unsigned k = 0; k < p->nready[i]; k++)
		if (p->ready[i][k].gen == gen)
			return (int)k;
	return -1;
}

static struct moat_sandbox *take_gen(struct pool *p, int i, uint64_t gen)
{
	int k = find_gen(p, i, gen);
	return k < 0 ? NULL : take_at(p, i, (unsigned)k);
}

static void *refill_main(void *arg)
{
	struct pool *p = arg;
	unsigned fails = 0;
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		if (p->ndone) {
			release_unlocked(p, p->done[--p->ndone]);
			continue;
		}
		/* a zygote replaced earlier: its idle children go (once it is as
		 * old as the age bound, when it was replaced for its children),
		 * and it goes once none is left and its last running child is
		 * done; one that made its last child or is past its age is
		 * replaced (the new one first) */
		if (p->old_keep && pool_zygote_old_age_ms(p->zyg) >= p->zyg_max_age_ms)
			p->old_keep = false;
		struct moat_sandbox *old_child = NULL;
		bool old_ready = false;
		for (int i = 0; i < POOL_LANGS && p->old_gen && !old_child; i++) {
			old_ready = old_ready || find_gen(p, i, p->old_gen) >= 0;
			if (!p->old_keep)
				old_child = take_gen(p, i, p->old_gen);
		}
		if (old_child) {
			release_unlocked(p, old_child);
			continue;
		}
		if (p->old_gen && !p->old_in_use && !old_ready) {
			p->old_gen = 0;
			pthread_mutex_unlock(&p->mu);
			pool_zygote_release_old(p->zyg);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		enum pool_zygote_reason why =
			p->zyg && !p->old_gen && moat_mono_ms() >= p->zyg_retry_at
				? pool_zygote_due(p->zyg, p->zyg_max_age_ms)
				: POOL_ZYGOTE_NOT_DUE;
		if (why != POOL_ZYGOTE_NOT_DUE) {
			pthread_mutex_unlock(&p->mu);
			zygote_rotate(p, why);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		/* a zygote that is not running (yet, or any more) is started
		 * first: the python sandboxes below are its fallback */
		if (p->zyg && !p->zyg_in_use && pool_zygote_wanted(p->zyg) &&
		    moat_mono_ms() >= p->zyg_retry_at) {
			pthread_mutex_unlock(&p->mu);
			zygote_start(p);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		/* while every run slot is taken, only the zygote's children are
		 * made: a request needs one anyway, and made ahead it does not
		 * wait for its cgroup join (an interpreter's start would only
		 * compete with the runs for the CPUs) */
		bool sat = p->saturated && p->saturated(p->sat_ctx);
		/* one request, in a sandbox handed out just now after a quiet
		 * spell: a kind that still has one ready is made once it is done
		 * (or at the deadline) */
		int64_t defer_left = p->running == 1 && p->handed_gap >= p->defer_ms
					     ? p->handed_at + p->defer_ms - moat_mono_ms()
					     : 0;
		int need = -1;
		bool held = false, for_run = false, for_sat = false;
		for (int i = 0; i < POOL_LANGS && need < 0; i++) {
			if (p->nready[i] >= want_of(p, i))
				continue;
			if (sat && !(pool_lang[i] == MOAT_LANG_PYTHON && pool_zygote_up(p->zyg))) {
				held = true;
				for_sat = true;
			} else if (p->nready[i] && defer_left > 0) {
				held = true;
				for_run = true;
			} else {
				need = i;
			}
		}
		if (need < 0 && held) {
			/* a run's end wakes the thread (p->cv); saturation does not */
			if (for_run && !p->deferring)
				p->deferred++;
			p->deferring = for_run;
			if (for_sat && !p->holding)
				p->held++;
			p->holding = for_sat;
			wait_ms(p, for_sat ? 5 : defer_left);
			continue;
		}
		p->deferring = false;
		p->holding = false;
		/* the oldest idle sandbox past its age goes (a long-lived idle
		 * interpreter is not a leak, but the pool is meant to be fresh) */
		int64_t now = moat_mono_ms();
		struct moat_sandbox *old = NULL;
		for (int i = 0; i < POOL_LANGS && !old; i++)
			if (p->nready[i] && now - p->ready[i][0].born > POOL_MAX_IDLE_MS) {
				old = take_at(p, i, 0);
				p->expired++;
			}
		if (old) {
			release_unlocked(p, old);
			continue;
		}
		if (need >= 0) {
			uint64_t failed = p->failed;
			pthread_mutex_unlock(&p->mu);
			refill_one(p, need);
			pthread_mutex_lock(&p->mu);
			if (p->failed == failed) {
				fails = 0;
				continue;
			}
			/* a host that cannot prewarm: back off, requests run cold */
			fails = fails < 10 ? fails + 1 : 10;
		}
		wait_ms(p, need >= 0 ? 100L << fails : 1000);
	}
	/* stopping: the idle ones now, then wait for the ones in use (their
	 * pid 1 dies with this thread; a zygote's children die with the
	 * zygote, which dies with this thread) */
	for (int i = 0; i < POOL_LANGS; i++)
		while (p->nready[i])
			release_unlocked(p, p->ready[i][--p->nready[i]].sb);
	while (p->in_use || p->zyg_in_use || p->old_in_use || p->ndone) {
		if (p->ndone)
			release_unlocked(p, p->done[--p->ndone]);
		else
			pthread_cond_wait(&p->cv, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	pool_zygote_free(p->zyg); /* in this thread, its parent */
	p->zyg = NULL;
	return NULL;
}

/* A sandbox handed to a request now (under p->mu). */
static void handed(struct pool *p)
{
	int64_t now = moat_mono_ms();
	p->handed_gap = p->handed_at ? now - p->handed_at : INT64_MAX;
	p->handed_at = now;
	p->running++;
}

int pool_start(struct pool **out, const struct pool_config *cfg, struct moat_error *err)
{
	*out = NULL;
	const struct moat_run_options *opts = cfg->opts;
	unsigned want = cfg->want;
	if (want && !opts->runtime_dir)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "--pool needs the runtime shims (--runtime DIR)");
	struct pool *p = calloc(1, sizeof *p);
	if (!p)
		return moat_error_oom(err);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->want = want;
	p->zyg_max_age_ms = moat_test_ms("MOAT_TEST_ZYGOTE_MAX_AGE_MS", (int64_t)cfg->zygote_max_age_ms);
	p->defer_ms = moat_test_ms("MOAT_TEST_REFILL_DEFER_MS", REFILL_DEFER_MS);
	p->saturated = cfg->saturated;
	p->sat_ctx = cfg->sat_ctx;
	p->opts = *opts;
	p->warn = cfg->warn;
	p->warn_ctx = cfg->warn_ctx;
	/* else a warm node could only report a missing esbuild as status 127,
	 * where a cold run reports an error: TypeScript stays cold */
	p->ts_ok = pool_typescript_ready(opts);
	const struct moat_request *l = cfg->limits;
	for (int i = 0; i < POOL_LANGS; i++) {
		p->idle_bytes[i] = -1;
		struct moat_request *b = p->boot[i] = moat_request_new();
		if (!b || !(p->ready[i] = calloc(want ? want : 1, sizeof *p->ready[i])) ||
		    !(b->code = boot_code(i))) {
			pool_stop(p);
			return moat_error_oom(err);
		}
		b->code_len = strlen(b->code);
		b->language = i == POOL_TS ? MOAT_LANG_JAVASCRIPT : pool_lang[i];
		/* the limits the pool serves exactly */
		b->timeout_ms = l->timeout_ms;
		b->memory_mb = l->memory_mb;
		b->cpus = l->cpus;
		b->pids_limit = l->pids_limit;
		b->strict_limits = l->strict_limits;
		b->max_output_bytes = l->max_output_bytes;
	}
	if (cfg->zygote) {
		struct moat_error zerr = { 0 };
		if (pool_zygote_new(&p->zyg, opts, cfg->zygote_max_children, &zerr) < 0)
			warn(p, "no Python zygote: %s (Python requests use warm sandboxes)",
			     zerr.message ? zerr.message : "?");
		moat_error_clear(&zerr);
	}
	int e = pthread_create(&p->thread, NULL, refill_main, p);
	if (e) {
		pool_stop(p);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "pool thread: %s", strerror(e));
	}
	p->started = true;
	*out = p;
	return 0;
}

void pool_stop(struct pool *p)
{
	if (!p)
		return;
	if (p->started) {
		pthread_mutex_lock(&p->mu);
		p->stop = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		pthread_join(p->thread, NULL);
	}
	for (int i = 0; i < POOL_LANGS; i++) {
		moat_request_free(p->boot[i]);
		free(p->ready[i]);
	}
	pool_zygote_free(p->zyg); /* not started: the thread never ran */
	free(p->zyg_error);
	free(p->last_error);
	free(p->done);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* Room for one more finished sandbox (under p->mu). */
static bool grow_done(struct pool *p)
{
	unsigned cap = p->done_cap ? p->done_cap * 2 : 16;
	struct moat_sandbox **n = realloc(p->done, cap * sizeof *n);
	if (!n)
		return false;
	p->done = n;
	p->done_cap = cap;
	return true;
}

void pool_acquire(struct pool *p, const struct moat_request *req,
		  const struct moat_run_options *opts, struct pool_lease *l)
{
	*l = (struct pool_lease){ NULL, POOL_COLD, 0 };
	int i = p ? lang_index(p, req->language) : -1;
	if (i < 0)
		return;
	struct moat_error err = { 0 };
	if (!pool_refusal(p->boot[i], req)) {
		pthread_mutex_lock(&p->mu);
		if (p->nready[i] && !p->stop) {
			/* a replaced zygote's child first (it is kept for its
			 * children: the sooner they are used the sooner it goes),
			 * else the newest */
			int k = p->old_gen ? find_gen(p, i, p->old_gen) : -1;
			unsigned at = k >= 0 ? (unsigned)k : p->nready[i] - 1;
			struct slot sl = p->ready[i][at];
			take_at(p, i, at);
			l->sb = sl.sb;
			l->made = sl.gen ? POOL_AHEAD : POOL_WARM;
			if (sl.gen && sl.gen == p->old_gen) {
				/* made by the zygote replaced since: it keeps that one */
				p->old_in_use++;
				l->mark = p->rotations - 1;
			} else if (sl.gen) {
				l->mark = zyg_hold(p);
			}
			p->idle_bytes[i] = run_sandbox_memory(l->sb);
			p->in_use++;
			p->used++;
			handed(p);
			pthread_cond_broadcast(&p->cv);
		} else if (!(pool_lang[i] == MOAT_LANG_PYTHON && pool_zygote_up(p->zyg))) {
			p->cold[i]++; /* (a child the zygote makes now is not cold) */
		}
		pthread_mutex_unlock(&p->mu);
	}
	if (l->sb) {
		if (pool_deliver(l->sb, p->boot[i], req, opts, &err) == 0)
			return;
		/* it died while it waited (or cannot take this request after
		 * all): this request runs cold, never in a shared sandbox */
		moat_sandbox_release(l->sb);
		moat_error_clear(&err);
		pthread_mutex_lock(&p->mu);
		p->in_use--;
		p->running--;
		if (l->made == POOL_AHEAD)
			zyg_unhold(p, l->mark);
		p->failed++;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		*l = (struct pool_lease){ NULL, POOL_COLD, 0 };
		return;
	}
	/* Python to the zygote while it runs: any limits (the run's own
	 * cgroups, its rlimits passed on), no warm sandbox taken */
	if (req->language != MOAT_LANG_PYTHON || !pool_zygote_up(p->zyg))
		return;
	pthread_mutex_lock(&p->mu);
	bool zygote = !p->stop;
	if (zygote)
		l->mark = zyg_hold(p);
	pthread_mutex_unlock(&p->mu);
	if (!zygote)
		return;
	if (pool_zygote_create(p->zyg, req, opts, RUN_ADOPT_START, &l->sb, NULL, &err) == 0) {
		l->made = POOL_ADOPTED;
		/* made for this request: created and used at once */
		pthread_mutex_lock(&p->mu);
		p->created++;
		p->used++;
		p->zyg_made_for++;
		handed(p);
		pthread_mutex_unlock(&p->mu);
		return;
	}
	/* not made or not started (refused, or the zygote failed: then it is
	 * replaced): this request runs cold */
	moat_error_clear(&err);
	pthread_mutex_lock(&p->mu);
	zyg_unhold(p, l->mark);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	*l = (struct pool_lease){ NULL, POOL_COLD, 0 };
}

void pool_return(struct pool *p, struct pool_lease *l, int rc)
{
	/* a pid 1 that reported the program's status alone (the answer went
	 * out before its exit) is reaped here, before the caller frees its
	 * run slot; a pid 1 never started is killed by the release below, in
	 * its creating thread: what is left, the thread releases */
	run_sandbox_reap(l->sb);
	bool later = false;
	if (p && l->sb) {
		pthread_mutex_lock(&p->mu);
		if (rc == 0 && (p->ndone < p->done_cap || grow_done(p))) {
			p->done[p->ndone++] = l->sb;
			later = true;
		}
		if (l->made == POOL_AHEAD || l->made == POOL_ADOPTED)
			zyg_unhold(p, l->mark);
		if (l->made == POOL_WARM || l->made == POOL_AHEAD)
			p->in_use--;
		if (l->made != POOL_COLD)
			p->running--;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	if (!later)
		moat_sandbox_release(l->sb);
	l->sb = NULL;
}

void pool_render(struct pool *p, struct moat_buf *b)
{
	if (!p || !p->want)
		return;
	pthread_mutex_lock(&p->mu);
	moat_buf_appendf(b, "# HELP moat_pool_ready Warm sandboxes waiting for a request.\n"
			    "# TYPE moat_pool_ready gauge\n");
	for (int i = 0; i < POOL_LANGS; i++)
		moat_buf_appendf(b, "moat_pool_ready{language=\"%s\"} %u\n",
				 moat_lang_get(pool_lang[i])->name, p->nready[i]);
	moat_buf_appendf(b, "# HELP moat_pool_idle_memory_bytes Memory of an idle warm sandbox "
			    "(its cgroup), as last handed out; -1: unknown.\n"
			    "# TYPE moat_pool_idle_memory_bytes gauge\n");
	for (int i = 0; i < POOL_LANGS; i++)
		moat_buf_appendf(b, "moat_pool_idle_memory_bytes{language=\"%s\"} %lld\n",
				 moat_lang_get(pool_lang[i])->name,
				 (long long)p->idle_bytes[i]);
	moat_buf_appendf(b, "# HELP moat_pool_cold_total Requests the pool could have served "
			    "that found it empty.\n# TYPE moat_pool_cold_total counter\n");
	for (int i = 0; i < POOL_LANGS; i++)
		moat_buf_appendf(b, "moat_pool_cold_total{language=\"%s\"} %llu\n",
				 moat_lang_get(pool_lang[i])->name, (unsigned long long)p->cold[i]);
	moat_buf_appendf(b,
			 "# HELP moat_pool_in_use Warm sandboxes running a request.\n"
			 "# TYPE moat_pool_in_use gauge\nmoat_pool_in_use %u\n"
			 "# HELP moat_pool_created_total Warm sandboxes prewarmed.\n"
			 "# TYPE moat_pool_created_total counter\nmoat_pool_created_total %llu\n"
			 "# HELP moat_pool_used_total Warm sandboxes handed a request (each once).\n"
			 "# TYPE moat_pool_used_total counter\nmoat_pool_used_total %llu\n"
			 "# HELP moat_pool_failed_total Prewarms that failed, and warm sandboxes "
			 "found dead at hand-over (their request ran cold).\n"
			 "# TYPE moat_pool_failed_total counter\nmoat_pool_failed_total %llu\n"
			 "# HELP moat_pool_expired_total Idle sandboxes replaced for age.\n"
			 "# TYPE moat_pool_expired_total counter\nmoat_pool_expired_total %llu\n"
			 "# HELP moat_pool_refill_seconds_total Time spent prewarming.\n"
			 "# TYPE moat_pool_refill_seconds_total counter\n"
			 "moat_pool_refill_seconds_total %.3f\n"
			 "# HELP moat_pool_refill_deferred_total Refills that waited for the one "
			 "request running, handed a sandbox after a quiet spell, to end (for at most "
			 "0.2 s).\n"
			 "# TYPE moat_pool_refill_deferred_total counter\n"
			 "moat_pool_refill_deferred_total %llu\n"
			 "# HELP moat_pool_refill_held_total Times the pool stopped prewarming "
			 "interpreters while every run slot was taken or the service and its runs "
			 "used nearly every CPU over the last second (requests that found it empty "
			 "ran cold meanwhile).\n"
			 "# TYPE moat_pool_refill_held_total counter\n"
			 "moat_pool_refill_held_total %llu\n",
			 p->in_use, (unsigned long long)p->created, (unsigned long long)p->used,
			 (unsigned long long)p->failed, (unsigned long long)p->expired,
			 (double)p->busy_refill_ms / 1000.0, (unsigned long long)p->deferred,
			 (unsigned long long)p->held);
	if (p->zyg)
		moat_buf_appendf(b, "# HELP moat_pool_zygote_made_for_request_total Python requests "
				    "that found no child of the zygote made ahead and had one made "
				    "for them (other limits, or none ready).\n"
				    "# TYPE moat_pool_zygote_made_for_request_total counter\n"
				    "moat_pool_zygote_made_for_request_total %llu\n",
				 (unsigned long long)p->zyg_made_for);
	pthread_mutex_unlock(&p->mu);
	pool_zygote_render(p->zyg, b);
}
