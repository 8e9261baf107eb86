/* moat serve's sessions (docs/SESSIONS.md): the table of sessions, each
 * one sandbox with a live interpreter (src/pool/session.c), bound to the
 * credential that made it; the session thread that creates every session's
 * sandbox (its pid 1's parent-death signal follows the thread that made
 * it, so that thread lives as long as the service) and reaps idle,
 * lifetime-expired and dead sessions. The HTTP side is server.c's.
 *
 * Nothing of a tenant reaches the log from here: no id, no credential, no
 * code; notices say counts and reasons only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/cleanup.h"
#include "core/sys.h"
#include "pool/session.h"
#include "serve/internal.h"

/* A dead session's 410 is kept for its idleTimeoutMs, then it is a 404;
 * at most TOMBSTONES_PER_SESSION x --max-sessions of them are kept (the
 * oldest dropped first, a 404 from then on): a client that creates and
 * deletes sessions in a loop cannot grow the table. */
#define TOMBSTONES_PER_SESSION 4
#define REAP_EVERY_MS 200
#define READY_TIMEOUT_MS 60000
/* the sandbox's own backstop is a little past the session's lifetime: the
 * reaper ends it first, with the right reason */
#define LIFETIME_SLACK_MS 5000

#define SENTENCE_LIFETIME "the session expired: it reached the end of its lifetime (maxLifetimeMs)"
#define SENTENCE_IDLE "the session expired: it was idle for its idleTimeoutMs"
#define WARN_FROZEN "no cgroup bounds this session's CPU here (rootless without a delegated " \
		    "cgroup): every process of it is frozen between its steps, and thawed " \
		    "for each step (docs/SESSIONS.md)"

enum ses_state { SES_LIVE, SES_KILLED, SES_ENDED, SES_EXPIRED };

struct serve_session {
	struct serve_session *next;
	char id[SERVE_SESSION_ID_LEN + 1];
	uint8_t cred[MOAT_SHA256_LEN];
	enum moat_language lang;
	struct pool_session *ps; /* NULL once stopped */
	enum ses_state state;
	bool busy;    /* a step holds it (serve_session_begin .. _end) */
	bool stepping; /* that step is in pool_session_run (ps is its); before,
			* it may wait for a run slot, and a DELETE, the reaper
			* or the stop need not wait for it */
	bool removed; /* out of the table: freed with the last reference */
	int refs;     /* the table's one, and one per caller holding it */
	const char *expire_reason; /* set by the reaper while busy: "lifetime" */
	char *reason;   /* a dead session's sentence */
	int64_t created_wall_ms; /* CLOCK_REALTIME */
	int64_t created_ms, last_ms, dead_ms; /* monotonic */
	uint64_t idle_ms, life_ms;
	uint64_t memory_mb, pids;
	double cpus;
	bool reserved;      /* memory_mb and cpus held in the budget while live */
	uint64_t max_cpu_ms; /* maxCpuTimeMs (0: none) */
	bool on_idle_pause;  /* onIdle "pause" */
	bool unbounded;      /* no cgroup bounds its CPU: frozen between steps */
	bool paused;         /* paused (POST .../pause, or idle with onIdle "pause") */
	bool freezing;       /* a pause or resume holds it (busy, stepping): a step
			      * or another pause waits for it, never a 409 */
	unsigned runs;
	int64_t cpu_ms, memory_bytes; /* the last known, kept after its sandbox is gone */
};

struct create_job {
	struct create_job *next;
	struct create_job *snext; /* in serve_sessions.starting while its driver starts */
	const struct moat_request *req;
	uint64_t life_ms;
	struct pool_session *ps;
	struct moat_error err;
	int rc;
	bool done;
};

struct serve_sessions {
	struct serve_sessions_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* jobs, busy ends, stop */
	struct serve_session *list;
	struct create_job *jobs, **jobs_tail;
	/* made, their drivers starting (pool_session_ready in the creator's
	 * thread): the stop kills them */
	struct create_job *starting;
	unsigned live;           /* live sessions and those being made */
	unsigned dead;           /* dead sessions still in the table (tombstones) */
	uint64_t dropped;        /* tombstones dropped for the cap before their time */
	bool stopping;
	pthread_t thread;
	bool have_thread;
	uint64_t created, ended, runs;
	uint64_t expired[2];    /* idle, lifetime */
	uint64_t killed[SERVE_SES_KILL__COUNT];
};

static const char *const kill_labels[SERVE_SES_KILL__COUNT] = {
	"timeout", "oom", "seccomp", "crash", "exit", "cancelled", "cpu-time",
};

static int kill_index(const char *reason)
{
	if (!reason)
		return 3;
	for (int i = 0; i < SERVE_SES_KILL__COUNT; i++)
		if (!strcmp(reason, kill_labels[i]))
			return i;
	if (!strcmp(reason, "pids"))
		return 3; /* a crash of the session: its process limit */
	return 3;
}

bool serve_session_id_valid(const char *id)
{
	return serve_id_valid(id, "ses_");
}

/* A live session dies (mu held): its state, reason and counters; its
 * sandbox is left for the caller to stop. */
static void mark_dead(struct serve_sessions *ss, struct serve_session *x, enum ses_state st,
		      const char *sentence, int64_t now)
{
	if (x->state != SES_LIVE)
		return;
	x->state = st;
	x->dead_ms = now;
	free(x->reason);
	x->reason = strdup(sentence ? sentence : "the session is gone");
	if (x->ps) {
		int64_t m = pool_session_cpu_ms(x->ps);
		if (m >= 0)
			x->cpu_ms = m;
	}
	if (x->memory_bytes > 0)
		x->memory_bytes = 0; /* measured: nothing is held now */
	if (x->reserved && ss->cfg.budget)
		serve_budget_release(ss->cfg.budget, x->memory_mb, x->cpus);
	x->reserved = false;
	x->paused = false;
	if (ss->live)
		ss->live--;
	ss->dead++;
	pthread_cond_broadcast(&ss->cv);
}

/* After a step or between steps (mu held): the sandbox's own state. A
 * sandbox that died while no step ran (pid 1 killed from outside, its
 * interpreter gone between runs) is collected here, at once: its pidfd is
 * polled on every call (each GET, step, DELETE, and the reaper's tick), and
 * only while no step is in pool_session_run (a step starts only under mu,
 * setting stepping first, so none starts meanwhile). */
static void sync_state(struct serve_sessions *ss, struct serve_session *x, int64_t now)
{
	if (x->state != SES_LIVE || !x->ps)
		return;
	if (!x->stepping)
		(void)pool_session_watch(x->ps);
	const char *reason = NULL, *sentence = NULL;
	enum pool_session_state st = pool_session_state(x->ps, &reason, &sentence);
	if (st == POOL_SESSION_LIVE)
		return;
	if (x->expire_reason && !strcmp(x->expire_reason, "cpu-time")) {
		ss->killed[SERVE_SES_KILL_CPU_TIME]++;
		char why[160];
		snprintf(why, sizeof why, "the session was killed: it used its CPU time "
					  "(maxCpuTimeMs %llu)", (unsigned long long)x->max_cpu_ms);
		mark_dead(ss, x, SES_KILLED, why, now);
		return;
	}
	if (x->expire_reason) {
		bool life = !strcmp(x->expire_reason, "lifetime");
		ss->expired[life]++;
		mark_dead(ss, x, SES_EXPIRED,
			  life ? SENTENCE_LIFETIME : SENTENCE_IDLE,
			  now);
		return;
	}
	if (st == POOL_SESSION_ENDED) {
		ss->killed[SERVE_SES_KILL_EXIT]++;
		mark_dead(ss, x, SES_ENDED, sentence ? sentence : "the session ended: its "
						     "interpreter exited", now);
	} else {
		ss->killed[kill_index(reason)]++;
		mark_dead(ss, x, SES_KILLED, sentence ? sentence : "the session was killed", now);
	}
}

static void unref_locked(struct serve_session *x)
{
	if (--x->refs > 0)
		return;
	free(x->reason);
	free(x);
}

/* A dead session leaves the table (mu held; *pp points at it): an unknown
 * id from now on, freed with its last reference. */
static void unlink_dead(struct serve_sessions *ss, struct serve_session **pp)
{
	struct serve_session *x = *pp;
	*pp = x->next;
	x->removed = true;
	if (ss->dead)
		ss->dead--;
	unref_locked(x);
}

/* Past the cap, the oldest tombstones whose sandbox is gone are dropped
 * (mu held). */
static void trim_tombstones(struct serve_sessions *ss)
{
	unsigned cap = ss->cfg.max * TOMBSTONES_PER_SESSION;
	while (ss->dead > cap) {
		struct serve_session **oldest = NULL;
		for (struct serve_session **pp = &ss->list; *pp; pp = &(*pp)->next) {
			struct serve_session *x = *pp;
			if (x->state != SES_LIVE && !x->ps && !x->stepping &&
			    (!oldest || x->dead_ms <= (*oldest)->dead_ms))
				oldest = pp;
		}
		if (!oldest)
			return; /* the rest still stop their sandbox: the reaper's */
		unlink_dead(ss, oldest);
		ss->dropped++;
	}
}

/* ---- the session thread ---- */

static void *session_thread(void *arg)
{
	struct serve_sessions *ss = arg;
	pthread_mutex_lock(&ss->mu);
	for (;;) {
		/* sandboxes made here, one at a time; each creator then waits
		 * for its own driver's ready, so a driver slow to start (a
		 * tenant's env, a tiny cpus) holds up neither other creates nor
		 * the reaping */
		while (ss->jobs) {
			struct create_job *j = ss->jobs;
			ss->jobs = j->next;
			if (!ss->jobs)
				ss->jobs_tail = &ss->jobs;
			bool stop = ss->stopping;
			pthread_mutex_unlock(&ss->mu);
			if (stop) {
				j->rc = moat_error_set(&j->err, MOAT_ERR_UNAVAILABLE, 0,
						       "the server is shutting down");
			} else {
				struct pool_session_config pc = {
					.req = j->req, .opts = ss->cfg.opts,
					.lifetime_ms = j->life_ms + LIFETIME_SLACK_MS,
					.ready_timeout_ms = READY_TIMEOUT_MS,
					.interrupt_grace_ms = ss->cfg.grace_ms,
					.hangup_finish = ss->cfg.hangup_finish,
				};
				j->rc = pool_session_spawn(&pc, &j->ps, &j->err);
			}
			pthread_mutex_lock(&ss->mu);
			j->done = true;
			pthread_cond_broadcast(&ss->cv);
		}
		if (ss->stopping)
			break;
		/* reaping */
		int64_t now = moat_mono_ms();
		struct pool_session *stop[64];
		size_t nstop = 0;
		struct serve_session *pause[64];
		size_t npause = 0;
		for (struct serve_session **pp = &ss->list; *pp;) {
			struct serve_session *x = *pp;
			if (x->state == SES_LIVE && !x->busy)
				sync_state(ss, x, now);
			/* the CPU cap, background work included: on every tick */
			bool spent = false;
			if (x->state == SES_LIVE && x->max_cpu_ms && x->ps) {
				int64_t cpu = pool_session_cpu_ms(x->ps);
				spent = cpu >= 0 && (uint64_t)cpu >= x->max_cpu_ms;
			}
			if (spent && !x->expire_reason) {
				/* a step ends with it, then sync_state says why; idle,
				 * it is over now (its sandbox is stopped below) */
				x->expire_reason = "cpu-time";
				pool_session_kill(x->ps);
				if (!x->busy)
					sync_state(ss, x, now);
			}
			if (x->state == SES_LIVE) {
				bool life = now - x->created_ms >= (int64_t)x->life_ms;
				bool idle = !x->busy && now - x->last_ms >= (int64_t)x->idle_ms;
				/* onIdle "pause": an idle session is paused, not ended */
				if (idle && !life && x->on_idle_pause) {
					if (!x->paused && npause < 64) {
						x->busy = x->stepping = x->freezing = true;
						x->refs++;
						pause[npause++] = x;
					}
					idle = false;
				}
				if (life && x->busy && !x->expire_reason) {
					x->expire_reason = "lifetime";
					pool_session_kill(x->ps); /* the step ends, then sync_state */
				} else if ((life || idle) && !x->busy) {
					ss->expired[life]++;
					mark_dead(ss, x, SES_EXPIRED,
						  life ? SENTENCE_LIFETIME : SENTENCE_IDLE,
						  now);
				}
			}
			if (x->state != SES_LIVE && !x->stepping && x->ps && nstop < 64) {
				stop[nstop++] = x->ps;
				x->ps = NULL;
			}
			if (x->state != SES_LIVE && !x->ps &&
			    now - x->dead_ms >= (int64_t)x->idle_ms) {
				unlink_dead(ss, pp);
				continue;
			}
			pp = &x->next;
		}
		trim_tombstones(ss);
		for (size_t i = 0; i < npause; i++) {
			struct serve_session *x = pause[i];
			struct pool_session *p = x->ps;
			pthread_mutex_unlock(&ss->mu);
			struct moat_error e = { 0 };
			int rc = pool_session_freeze(p, true, &e);
			moat_error_clear(&e);
			if (rc < 0)
				pool_session_kill(p); /* never left half-frozen */
			pthread_mutex_lock(&ss->mu);
			x->busy = x->stepping = x->freezing = false;
			x->paused = rc == 0;
			sync_state(ss, x, moat_mono_ms());
			unref_locked(x);
			pthread_cond_broadcast(&ss->cv);
		}
		if (nstop) {
			pthread_mutex_unlock(&ss->mu);
			for (size_t i = 0; i < nstop; i++)
				pool_session_stop(stop[i]);
			pthread_mutex_lock(&ss->mu);
		}
		if (!ss->jobs && !ss->stopping && !nstop && !npause)
			moat_cond_wait_ms(&ss->cv, &ss->mu, REAP_EVERY_MS);
	}
	pthread_mutex_unlock(&ss->mu);
	return NULL;
}

int serve_sessions_start(struct serve_sessions **out, const struct serve_sessions_config *cfg,
			 struct moat_error *err)
{
	*out = NULL;
	if (cfg->max == 0)
		return 0;
	struct serve_sessions *ss = calloc(1, sizeof *ss);
	if (!ss)
		return moat_error_oom(err);
	ss->cfg = *cfg;
	ss->jobs_tail = &ss->jobs;
	pthread_mutex_init(&ss->mu, NULL);
	pthread_cond_init(&ss->cv, NULL);
	if ((errno = pthread_create(&ss->thread, NULL, session_thread, ss)) != 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "moat serve: cannot start the session thread: %s", strerror(errno));
		pthread_mutex_destroy(&ss->mu);
		pthread_cond_destroy(&ss->cv);
		free(ss);
		return -1;
	}
	ss->have_thread = true;
	*out = ss;
	return 0;
}

unsigned serve_sessions_max(const struct serve_sessions *ss)
{
	return ss ? ss->cfg.max : 0;
}

void serve_sessions_stop(struct serve_sessions *ss)
{
	if (!ss)
		return;
	pthread_mutex_lock(&ss->mu);
	ss->stopping = true;
	/* running steps are cancelled; then every sandbox goes */
	for (struct serve_session *x = ss->list; x; x = x->next)
		if (x->ps)
			pool_session_kill(x->ps);
	for (struct create_job *j = ss->starting; j; j = j->snext)
		pool_session_kill(j->ps);
	pthread_cond_broadcast(&ss->cv);
	bool any_busy = true;
	int64_t until = moat_mono_ms() + 10000;
	while (any_busy && moat_mono_ms() < until) {
		any_busy = false;
		for (struct serve_session *x = ss->list; x; x = x->next)
			any_busy |= x->busy;
		any_busy |= ss->starting != NULL;
		if (any_busy)
			moat_cond_wait_ms(&ss->cv, &ss->mu, 100);
	}
	pthread_mutex_unlock(&ss->mu);
	if (ss->have_thread)
		pthread_join(ss->thread, NULL);
	pthread_mutex_lock(&ss->mu);
	for (struct serve_session *x = ss->list; x; x = x->next) {
		if (x->state == SES_LIVE) {
			ss->ended++;
			mark_dead(ss, x, SES_ENDED, "the session was ended: the server stopped",
				  moat_mono_ms());
		}
		if (x->ps && !x->stepping) {
			struct pool_session *p = x->ps;
			x->ps = NULL;
			pthread_mutex_unlock(&ss->mu);
			pool_session_stop(p);
			pthread_mutex_lock(&ss->mu);
		}
	}
	struct serve_session *x = ss->list;
	ss->list = NULL;
	while (x) {
		struct serve_session *n = x->next;
		x->removed = true;
		unref_locked(x); /* a step still running after 10 s keeps its own */
		x = n;
	}
	pthread_mutex_unlock(&ss->mu);
	/* the struct stays: a connection thread past its grace may still
	 * hold a session; the process is exiting */
}

/* ---- the calls of server.c ---- */

int serve_sessions_create(struct serve_sessions *ss, const uint8_t cred[MOAT_SHA256_LEN],
			  const struct moat_request *req, const struct serve_session_params *prm,
			  const struct moat_run_options *per, char **answer,
			  struct moat_error *err)
{
	uint64_t idle_ms = prm->idle_ms, life_ms = prm->life_ms;
	*answer = NULL;
	char id[SERVE_SESSION_ID_LEN + 1];
	if (serve_new_id(id, "ses_") < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot draw a session id: %s", strerror(errno));
	MOAT_AUTOFREE struct serve_session *x = calloc(1, sizeof *x);
	MOAT_AUTOFREE struct create_job *j = calloc(1, sizeof *j);
	if (!x || !j)
		return moat_error_oom(err);
	x->cpu_ms = x->memory_bytes = -1; /* not measured (yet) */
	pthread_mutex_lock(&ss->mu);
	if (ss->stopping || ss->live >= ss->cfg.max) {
		bool stopping = ss->stopping;
		pthread_mutex_unlock(&ss->mu);
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       stopping ? "the server is shutting down"
					: "the server holds its --max-sessions live sessions; close one "
					  "or retry later");
		return -2;
	}
	char *why = NULL;
	if (ss->cfg.budget &&
	    serve_budget_reserve(ss->cfg.budget, req->memory_mb, req->cpus, &why) < 0) {
		pthread_mutex_unlock(&ss->mu);
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "%s",
			       why ? why : "the live sandboxes' budget is spent; retry later");
		free(why);
		return -2;
	}
	ss->live++;
	j->req = req;
	j->life_ms = life_ms;
	*ss->jobs_tail = j;
	ss->jobs_tail = &j->next;
	pthread_cond_broadcast(&ss->cv);
	while (!j->done)
		pthread_cond_wait(&ss->cv, &ss->mu);
	if (j->rc == 0) {
		/* the driver starts on this thread: a slow one holds up only
		 * its own creator */
		j->snext = ss->starting;
		ss->starting = j;
		pthread_mutex_unlock(&ss->mu);
		j->rc = pool_session_ready(j->ps, READY_TIMEOUT_MS, per, &j->err);
		pthread_mutex_lock(&ss->mu);
		for (struct create_job **pp = &ss->starting; *pp; pp = &(*pp)->snext)
			if (*pp == j) {
				*pp = j->snext;
				break;
			}
		pthread_cond_broadcast(&ss->cv);
		if (j->rc == 0 && ss->stopping) {
			moat_error_clear(&j->err);
			j->rc = moat_error_set(&j->err, MOAT_ERR_UNAVAILABLE, 0,
					       "the server is shutting down");
		}
		/* nothing bounds its CPU: frozen from now on whenever no step
		 * runs, or not made at all */
		if (j->rc == 0 && !pool_session_cpu_bounded(j->ps)) {
			pthread_mutex_unlock(&ss->mu);
			j->rc = pool_session_freeze(j->ps, true, &j->err);
			pthread_mutex_lock(&ss->mu);
		}
		if (j->rc < 0) {
			struct pool_session *p = j->ps;
			j->ps = NULL;
			pthread_mutex_unlock(&ss->mu);
			pool_session_stop(p);
			pthread_mutex_lock(&ss->mu);
		}
	}
	if (j->rc < 0) {
		ss->live--;
		if (ss->cfg.budget)
			serve_budget_release(ss->cfg.budget, req->memory_mb, req->cpus);
		pthread_mutex_unlock(&ss->mu);
		*err = j->err;
		return -1;
	}
	memcpy(x->id, id, sizeof id);
	memcpy(x->cred, cred, MOAT_SHA256_LEN);
	x->lang = req->language;
	x->ps = j->ps;
	x->state = SES_LIVE;
	x->refs = 1;
	x->created_wall_ms = serve_wall_ms();
	x->created_ms = x->last_ms = moat_mono_ms();
	x->idle_ms = idle_ms;
	x->life_ms = life_ms;
	x->memory_mb = req->memory_mb;
	x->cpus = req->cpus;
	x->reserved = ss->cfg.budget != NULL;
	x->max_cpu_ms = prm->max_cpu_ms;
	x->on_idle_pause = prm->on_idle_pause;
	x->unbounded = !pool_session_cpu_bounded(x->ps);
	x->pids = req->pids_limit;
	x->next = ss->list;
	ss->list = x;
	ss->created++;
	const struct serve_session *made = MOAT_TAKE(x); /* the table's from here */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"id\":\"%s\",\"language\":\"%s\"", made->id,
			 moat_lang_get(made->lang)->name);
	serve_put_time(&b, "expiresAt", made->created_wall_ms + (int64_t)life_ms);
	serve_put_time(&b, "idleExpiresAt", made->created_wall_ms + (int64_t)idle_ms);
	moat_buf_appendf(&b, ",\"limits\":{\"memoryMb\":%llu,\"cpus\":%g,\"pidsLimit\":%llu,"
			     "\"idleTimeoutMs\":%llu,\"maxLifetimeMs\":%llu,\"maxCpuTimeMs\":%llu,"
			     "\"onIdle\":\"%s\"},\"warnings\":[%s]}\n",
			 (unsigned long long)made->memory_mb, made->cpus,
			 (unsigned long long)made->pids, (unsigned long long)idle_ms,
			 (unsigned long long)life_ms, (unsigned long long)made->max_cpu_ms,
			 made->on_idle_pause ? "pause" : "delete",
			 made->unbounded ? "\"" WARN_FROZEN "\"" : "");
	pthread_mutex_unlock(&ss->mu);
	*answer = moat_buf_take(&b);
	return *answer ? 0 : moat_error_oom(err);
}

struct serve_session *serve_sessions_get(struct serve_sessions *ss, const char *id,
					 const uint8_t cred[MOAT_SHA256_LEN])
{
	if (!ss || !serve_session_id_valid(id))
		return NULL;
	struct serve_session *found = NULL;
	pthread_mutex_lock(&ss->mu);
	for (struct serve_session *x = ss->list; x; x = x->next) {
		/* every entry is compared whole: the time says nothing */
		bool same = serve_ct_equal(x->id, id, strlen(id) + 1); /* ids of this node: one length */
		bool mine = serve_ct_equal(x->cred, cred, MOAT_SHA256_LEN);
		if (same && mine)
			found = x;
	}
	if (found)
		found->refs++;
	pthread_mutex_unlock(&ss->mu);
	return found;
}

void serve_session_put(struct serve_sessions *ss, struct serve_session *x)
{
	if (!x)
		return;
	pthread_mutex_lock(&ss->mu);
	unref_locked(x);
	pthread_mutex_unlock(&ss->mu);
}

char *serve_session_gone(struct serve_sessions *ss, struct serve_session *x)
{
	pthread_mutex_lock(&ss->mu);
	sync_state(ss, x, moat_mono_ms());
	char *r = x->state == SES_LIVE ? NULL
				       : strdup(x->reason ? x->reason : "the session is gone");
	pthread_mutex_unlock(&ss->mu);
	return r;
}

/* Under ss->mu: x's state brought up to date (not while a step or a pause
 * holds it, whose end does that), and whether it is live (with its pool
 * session, if need_ps); if not, *gone gets why (NULL out of memory). */
static bool live_locked(struct serve_sessions *ss, struct serve_session *x, bool need_ps,
			char **gone)
{
	if (!x->busy)
		sync_state(ss, x, moat_mono_ms());
	if (x->state == SES_LIVE && (!need_ps || x->ps))
		return true;
	*gone = strdup(x->reason ? x->reason : "the session is gone");
	return false;
}

/* Under ss->mu, the check before taking x as a step or a pause does: waits
 * out a pause or resume under way (never a 409 for it), then 0 when x is
 * live and free, -1 when a step holds it, -2 when it is gone (*gone set). */
static int free_locked(struct serve_sessions *ss, struct serve_session *x, char **gone)
{
	while (x->freezing)
		pthread_cond_wait(&ss->cv, &ss->mu);
	if (!live_locked(ss, x, true, gone))
		return -2;
	return x->busy ? -1 : 0;
}

int serve_session_begin(struct serve_sessions *ss, struct serve_session *x, char **gone)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	int rc = free_locked(ss, x, gone);
	if (rc == 0) {
		x->busy = true;
		x->paused = false; /* the step resumes it (pool_session_run thaws) */
		x->last_ms = moat_mono_ms();
	}
	pthread_mutex_unlock(&ss->mu);
	return rc;
}

void serve_session_end(struct serve_sessions *ss, struct serve_session *x)
{
	pthread_mutex_lock(&ss->mu);
	x->busy = false;
	x->last_ms = moat_mono_ms();
	sync_state(ss, x, x->last_ms);
	pthread_cond_broadcast(&ss->cv);
	pthread_mutex_unlock(&ss->mu);
}

int serve_session_step(struct serve_sessions *ss, struct serve_session *x,
		       const struct moat_request *step, const struct moat_run_options *per,
		       struct moat_result **res, char **extra, struct moat_error *err)
{
	/* stepping: the reaper and DELETE leave x->ps alone until it ends;
	 * one that ended the session while this step waited for its slot
	 * took ps already */
	pthread_mutex_lock(&ss->mu);
	struct pool_session *ps = x->state == SES_LIVE ? x->ps : NULL;
	if (!ps) {
		pthread_mutex_unlock(&ss->mu);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the session is gone");
	}
	x->stepping = true;
	pthread_mutex_unlock(&ss->mu);
	int rc = pool_session_run(ps, step, per, res, extra, err);
	/* no cgroup bounds it: frozen again before the answer, never left
	 * running between steps (a failure ends it) */
	if (x->unbounded && pool_session_state(ps, NULL, NULL) == POOL_SESSION_LIVE) {
		struct moat_error e = { 0 };
		if (pool_session_freeze(ps, true, &e) < 0)
			pool_session_kill(ps);
		moat_error_clear(&e);
	}
	pthread_mutex_lock(&ss->mu);
	x->stepping = false;
	if (rc == 0) {
		x->runs++;
		ss->runs++;
	}
	pthread_cond_broadcast(&ss->cv);
	pthread_mutex_unlock(&ss->mu);
	return rc;
}

enum moat_language serve_session_language(const struct serve_session *x)
{
	return x->lang;
}

/* The "session" object (mu held). */
static void session_object(struct serve_session *x, struct moat_buf *b, bool full)
{
	static const char *const names[] = { "idle", "killed", "ended", "expired" };
	/* a pause or resume under way is no step: "idle" until it is done */
	const char *state = x->state == SES_LIVE && x->busy && !x->freezing ? "running"
			    : x->state == SES_LIVE && x->paused		  ? "paused"
									  : names[x->state];
	if (x->ps) {
		int64_t m = pool_session_memory(x->ps), c = pool_session_cpu_ms(x->ps);
		if (m >= 0)
			x->memory_bytes = m;
		if (c >= 0)
			x->cpu_ms = c;
	}
	moat_buf_appendf(b, "{\"id\":\"%s\"", x->id);
	if (full)
		moat_buf_appendf(b, ",\"language\":\"%s\"", moat_lang_get(x->lang)->name);
	moat_buf_appendf(b, ",\"state\":\"%s\",\"runs\":%u", state, x->runs);
	/* a figure nothing measured (no cgroup: rootless without a delegated
	 * one) is absent, with a warning, never a 0 */
	if (x->cpu_ms >= 0)
		moat_buf_appendf(b, ",\"cpuTimeMs\":%lld", (long long)x->cpu_ms);
	if (x->memory_bytes >= 0)
		moat_buf_appendf(b, ",\"memoryBytes\":%lld", (long long)x->memory_bytes);
	if (x->cpu_ms < 0 || x->memory_bytes < 0) {
		bool both = x->cpu_ms < 0 && x->memory_bytes < 0;
		moat_buf_appendf(b, ",\"warnings\":[\"%s%s%s %s absent: this session's sandbox has "
				    "no cgroup to measure %s (rootless without a delegated "
				    "cgroup)\"]",
				 x->cpu_ms < 0 ? "cpuTimeMs" : "", both ? " and " : "",
				 x->memory_bytes < 0 ? "memoryBytes" : "", both ? "are" : "is",
				 both ? "them" : "it");
	}
	if (full)
		serve_put_time(b, "createdAt", x->created_wall_ms);
	serve_put_time(b, "expiresAt", x->created_wall_ms + (int64_t)x->life_ms);
	serve_put_time(b, "idleExpiresAt",
		 x->created_wall_ms + (x->last_ms - x->created_ms) + (int64_t)x->idle_ms);
	if (full) {
		moat_buf_appendf(b, ",\"limits\":{\"memoryMb\":%llu,\"cpus\":%g,\"pidsLimit\":%llu,"
				    "\"idleTimeoutMs\":%llu,\"maxLifetimeMs\":%llu,"
				    "\"maxCpuTimeMs\":%llu,\"onIdle\":\"%s\"},\"frozen\":%s,"
				    "\"reason\":",
				 (unsigned long long)x->memory_mb, x->cpus,
				 (unsigned long long)x->pids, (unsigned long long)x->idle_ms,
				 (unsigned long long)x->life_ms, (unsigned long long)x->max_cpu_ms,
				 x->on_idle_pause ? "pause" : "delete",
				 x->state == SES_LIVE && x->ps && !x->busy &&
						 pool_session_frozen(x->ps)
					 ? "true"
					 : "false");
		if (x->state == SES_LIVE || !x->reason)
			moat_buf_append(b, "null", 4);
		else
			moat_buf_append_json_string(b, x->reason, strlen(x->reason));
	}
	moat_buf_append(b, "}", 1);
}

void serve_session_json(struct serve_sessions *ss, struct serve_session *x, struct moat_buf *b,
			bool full)
{
	pthread_mutex_lock(&ss->mu);
	session_object(x, b, full);
	pthread_mutex_unlock(&ss->mu);
}

int serve_session_pause(struct serve_sessions *ss, struct serve_session *x, bool pause,
			struct moat_buf *b, char **gone, struct moat_error *err)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	int held = free_locked(ss, x, gone);
	if (held < 0) {
		pthread_mutex_unlock(&ss->mu);
		return held;
	}
	/* held as a step holds it: DELETE, the reaper and the stop wait */
	x->busy = x->stepping = x->freezing = true;
	struct pool_session *p = x->ps;
	pthread_mutex_unlock(&ss->mu);
	/* resumed, a session no cgroup bounds stays frozen between steps */
	int rc = pause || !x->unbounded ? pool_session_freeze(p, pause, err) : 0;
	if (rc < 0)
		pool_session_kill(p); /* never left half-frozen */
	pthread_mutex_lock(&ss->mu);
	x->busy = x->stepping = x->freezing = false;
	x->last_ms = moat_mono_ms();
	if (rc == 0)
		x->paused = pause;
	sync_state(ss, x, x->last_ms);
	pthread_cond_broadcast(&ss->cv);
	if (rc == 0)
		session_object(x, b, false);
	pthread_mutex_unlock(&ss->mu);
	return rc < 0 ? -3 : 0;
}

int serve_session_interrupt(struct serve_sessions *ss, struct serve_session *x, char **gone)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	if (!live_locked(ss, x, false, gone)) {
		pthread_mutex_unlock(&ss->mu);
		return -1;
	}
	int rc = x->ps && pool_session_interrupt(x->ps) ? 1 : 0;
	pthread_mutex_unlock(&ss->mu);
	return rc;
}

int serve_session_delete(struct serve_sessions *ss, struct serve_session *x, char **gone)
{
	*gone = NULL;
	pthread_mutex_lock(&ss->mu);
	if (!live_locked(ss, x, false, gone)) {
		pthread_mutex_unlock(&ss->mu);
		return -1;
	}
	ss->ended++;
	mark_dead(ss, x, SES_ENDED, "the session was ended (DELETE)", moat_mono_ms());
	if (x->ps)
		pool_session_kill(x->ps); /* a running step: killedBy "cancelled" */
	/* a step still waiting for a run slot is not waited for: it finds
	 * the session gone */
	while (x->stepping)
		pthread_cond_wait(&ss->cv, &ss->mu);
	struct pool_session *p = x->ps;
	x->ps = NULL;
	pthread_mutex_unlock(&ss->mu);
	pool_session_stop(p); /* gone before the answer */
	pthread_mutex_lock(&ss->mu);
	trim_tombstones(ss);
	pthread_mutex_unlock(&ss->mu);
	return 0;
}

void serve_sessions_metrics(struct serve_sessions *ss, struct moat_buf *b)
{
	if (!ss)
		return;
	pthread_mutex_lock(&ss->mu);
	int64_t mem = 0;
	for (struct serve_session *x = ss->list; x; x = x->next)
		if (x->state == SES_LIVE && x->ps) {
			int64_t m = pool_session_memory(x->ps);
			if (m > 0)
				mem += m;
		}
	moat_buf_appendf(b, "# HELP moat_serve_sessions_live Sessions live (and being made).\n"
			    "# TYPE moat_serve_sessions_live gauge\n"
			    "moat_serve_sessions_live %u\n"
			    "# HELP moat_serve_sessions_max The most sessions live at once "
			    "(--max-sessions).\n"
			    "# TYPE moat_serve_sessions_max gauge\n"
			    "moat_serve_sessions_max %u\n"
			    "# HELP moat_serve_sessions_created_total Sessions made.\n"
			    "# TYPE moat_serve_sessions_created_total counter\n"
			    "moat_serve_sessions_created_total %llu\n"
			    "# HELP moat_serve_sessions_expired_total Sessions reaped: idle or past "
			    "their lifetime.\n"
			    "# TYPE moat_serve_sessions_expired_total counter\n"
			    "moat_serve_sessions_expired_total{reason=\"idle\"} %llu\n"
			    "moat_serve_sessions_expired_total{reason=\"lifetime\"} %llu\n"
			    "# HELP moat_serve_sessions_killed_total Sessions whose sandbox died.\n"
			    "# TYPE moat_serve_sessions_killed_total counter\n",
			 ss->live, ss->cfg.max, (unsigned long long)ss->created,
			 (unsigned long long)ss->expired[0], (unsigned long long)ss->expired[1]);
	for (int i = 0; i < SERVE_SES_KILL__COUNT; i++)
		moat_buf_appendf(b, "moat_serve_sessions_killed_total{reason=\"%s\"} %llu\n",
				 kill_labels[i], (unsigned long long)ss->killed[i]);
	moat_buf_appendf(b, "# HELP moat_serve_sessions_ended_total Sessions ended by DELETE or "
			    "the service's stop.\n"
			    "# TYPE moat_serve_sessions_ended_total counter\n"
			    "moat_serve_sessions_ended_total %llu\n"
			    "# HELP moat_serve_sessions_runs_total Steps run in sessions.\n"
			    "# TYPE moat_serve_sessions_runs_total counter\n"
			    "moat_serve_sessions_runs_total %llu\n"
			    "# HELP moat_serve_sessions_tombstones Ended sessions kept to answer 410 "
			    "(at most 4 x --max-sessions).\n"
			    "# TYPE moat_serve_sessions_tombstones gauge\n"
			    "moat_serve_sessions_tombstones %u\n"
			    "# HELP moat_serve_sessions_tombstones_dropped_total Ended sessions "
			    "forgotten before their idleTimeoutMs, the oldest first, to keep that cap "
			    "(a 404 from then on).\n"
			    "# TYPE moat_serve_sessions_tombstones_dropped_total counter\n"
			    "moat_serve_sessions_tombstones_dropped_total %llu\n"
			    "# HELP moat_serve_sessions_memory_bytes The live sessions' memory "
			    "(their cgroups) in all.\n"
			    "# TYPE moat_serve_sessions_memory_bytes gauge\n"
			    "moat_serve_sessions_memory_bytes %lld\n",
			 (unsigned long long)ss->ended, (unsigned long long)ss->runs, ss->dead,
			 (unsigned long long)ss->dropped, (long long)mem);
	pthread_mutex_unlock(&ss->mu);
}
