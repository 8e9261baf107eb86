/* `moat serve`'s admission: the run slots and their first-come queue, the
 * budget of results in flight, and what the service gives every run (its
 * sandbox's options, the request pipeline's defaults, the client watched). */
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include "serve/http.h"

/* Results (/v1/run, scripts) in flight: each reserves its worst case
 * before its run -- both streams captured, then their JSON (escaped within
 * the same cap: serve.max.maxOutputBytes) -- until its answer is sent;
 * past the budget a request is answered 503. One alone always fits. */
#define RESULT_BUDGET (256ull * 1024 * 1024)
#define RESULT_OVERHEAD (64u * 1024u)

static void gauges(struct server *s)
{
	pthread_mutex_lock(&s->metrics.mu);
	s->metrics.in_flight = s->running;
	s->metrics.queued = s->waiting;
	pthread_mutex_unlock(&s->metrics.mu);
}

/* 0: a slot is ours; -1: busy (queue full) or stopping. In the order of
 * arrival: a request arriving while others wait queues behind them, even
 * when a slot has just been freed (a woken waiter would otherwise race
 * every newcomer and every other waiter for it, and under load some lose
 * round after round: the tail latency). */
static int admit(struct server *s, bool *stopping)
{
	int rc = -1;
	pthread_mutex_lock(&s->mu);
	if (s->stopping)
		goto out;
	if (s->running >= s->o->max_concurrent || s->waiting > 0) {
		if (s->waiting >= s->o->queue)
			goto out;
		uint64_t ticket = s->ticket_next++;
		s->waiting++;
		gauges(s);
		while (!s->stopping &&
		       (s->running >= s->o->max_concurrent || ticket != s->ticket_head))
			pthread_cond_wait(&s->cv, &s->mu);
		s->waiting--;
		if (s->stopping) {
			gauges(s);
			goto out;
		}
		/* the next ticket may take another free slot now */
		s->ticket_head++;
		pthread_cond_broadcast(&s->cv);
	}
	s->running++;
	gauges(s);
	rc = 0;
out:
	*stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void srv_release_slot(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	s->running--;
	gauges(s);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Reserves a result's worst case (RESULT_BUDGET); false: the budget is full. */
bool srv_reserve_result(struct req *q, const struct moat_request *req)
{
	struct server *s = q->s;
	uint64_t cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	uint64_t want = 4 * cap + RESULT_OVERHEAD;
	if (want > RESULT_BUDGET)
		want = RESULT_BUDGET;
	pthread_mutex_lock(&s->mu);
	bool ok = s->result_bytes + want <= RESULT_BUDGET;
	if (ok) {
		s->result_bytes += want;
		q->result_budget = want;
	}
	pthread_mutex_unlock(&s->mu);
	if (!ok) {
		pthread_mutex_lock(&s->metrics.mu);
		s->metrics.result_rejected++;
		pthread_mutex_unlock(&s->metrics.mu);
	}
	return ok;
}

/* An admitted request whose answer would not fit the results' budget. */
enum MHD_Result srv_refuse_result(struct req *q, struct MHD_Connection *c)
{
	srv_release_slot(q->s);
	q->has_slot = false;
	return srv_fail(q, c, 503, "ServerBusy", O_REJECTED,
			"the results in flight fill this server's memory budget; retry later");
}

/* A run's line for the operator (the store's path behind a program's "the
 * store is full"): the service's log. */
static void kv_notice(void *ctx, const char *line)
{
	serve_log_notice(ctx, "warn", "kv", "%s", line);
}

/* The service's options for a sandbox: root, policy, runtime, store,
 * relay caps (a run's and a session's). */
void srv_service_options(struct server *s, struct moat_run_options *opts)
{
	const struct moat_serve_options *o = s->o;
	moat_run_options_init(opts);
	opts->rootfs_dir = o->rootfs_dir ? o->rootfs_dir : o->cfg->rootfs_dir;
	opts->policy_path = o->cfg->policy_path;
	opts->runtime_dir = o->runtime_dir;
	opts->strict_isolation = o->cfg->strict_isolation;
	opts->kv_store = o->kv_store;
	opts->kv_max_keys = o->kv_max_keys;
	opts->kv_max_bytes = o->kv_max_bytes;
	opts->kv_max_value = o->kv_max_value;
	opts->kv_min_free = o->kv_min_free;
	opts->on_notice = kv_notice;
	opts->notice_ctx = &s->log;
	opts->relay_caps = s->relay_caps;
}

void srv_run_options(struct req *q, struct moat_run_options *opts)
{
	srv_service_options(q->s, opts);
	opts->cancel_fd = q->s->cancel_fd;
	opts->hangup_fd = q->conn_fd;
}

/* The service's limits as the request pipeline's defaults. */
int srv_limits_fill(void *ctx, struct moat_request *req, unsigned given,
		    struct moat_error *err)
{
	return serve_limits_apply(ctx, req, given, err);
}

/* q->conn_fd: a dup of the client's socket, for a run's (or a session's
 * start's) hangup_fd. */
void srv_watch_client(struct req *q, struct MHD_Connection *c)
{
	if (q->conn_fd >= 0)
		return;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		q->conn_fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
}

enum MHD_Result srv_take_slot(struct req *q, struct MHD_Connection *c)
{
	bool stopping;
	if (admit(q->s, &stopping) < 0)
		return srv_fail(q, c, 503, "ServerBusy", O_REJECTED,
				stopping ? "the server is shutting down"
				     : "every run slot and the queue are full; retry later");
	q->has_slot = true;
	/* the run watches the client: a hang-up kills it */
	srv_watch_client(q, c);
	return MHD_YES;
}
