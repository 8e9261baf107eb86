/* `moat serve`: libmicrohttpd with a thread per connection. Each request is
 * routed, authenticated and size-checked from its headers, its body is
 * buffered (capped), then it waits for a run slot (bounded queue) and runs
 * in a fresh sandbox: scripts and /v1/run in the connection's thread,
 * handlers in a worker thread that streams the response to the connection's
 * thread as it comes. docs/SERVE.md is the contract. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <cjson/cJSON.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/core.h"
#include "core/ndjson.h"
#include "core/sha256.h"
#include "core/sys.h"
#include "serve/internal.h"
#include "serve/mhd_dl.h"

#define READER_BLOCK (64u * 1024u)
#define PER_IP_LIMIT 64u
#define CONNECTION_LIMIT 512u
#define HEADER_MEMORY (32u * 1024u)
#define METRICS_CONNECTION_LIMIT 32u /* --metrics-listen: scrapers, not clients */
/* request bodies buffered at once, over all connections (512 × 6 MiB would
 * be 3 GiB): past it a request is answered 503 and its body dropped */
#define BODY_BUDGET (256ull * 1024 * 1024)
/* A handler's response bytes read from its sandbox and not yet taken by
 * the client: past STREAM_WINDOW the run's stdout is not read (the program
 * blocks on its pipe, inside its slot and its timeout); while all streams
 * together hold more than STREAM_BUDGET, a stream holding any waits too.
 * Each stream holds at most the window and one read (64 KiB). */
#define STREAM_WINDOW (256u * 1024u)
#define STREAM_BUDGET (64ull * 1024 * 1024)
/* Results (/v1/run, scripts) in flight: each reserves its worst case
 * before its run -- both streams captured, then their JSON (escaped within
 * the same cap: serve.max.maxOutputBytes) -- until its answer is sent;
 * past the budget a request is answered 503. One alone always fits. */
#define RESULT_BUDGET (256ull * 1024 * 1024)
#define RESULT_OVERHEAD (64u * 1024u)

/* A client connection, for the request deadline (below). */
struct conn {
	int fd;
	int64_t deadline; /* ms (monotonic) by which the request must be in; 0: none */
	bool target_nul; /* the request target being read decodes to a NUL (unescape) */
	struct conn *prev, *next;
};

struct server {
	const struct moat_serve_options *o;
	struct serve_limits limits;
	struct serve_metrics metrics;
	struct MHD_Daemon *d;
	pthread_mutex_t mu; /* running, waiting, tickets, stopping, body_bytes */
	pthread_cond_t cv;
	unsigned running, waiting;
	/* the queue is first come, first served: a request that must wait
	 * takes the next ticket and is admitted when a slot is free and its
	 * ticket is the oldest one still waiting (admit) */
	uint64_t ticket_next, ticket_head;
	unsigned active; /* requests not yet answered and logged (their response may
			  * still be on its way after the run's slot is free) */
	uint64_t body_bytes;
	uint64_t result_bytes; /* reserved by results in flight (RESULT_BUDGET) */
	uint64_t stream_bytes; /* __atomic: handler bytes waiting for clients (STREAM_BUDGET) */
	bool stopping;
	int cancel_fd; /* eventfd: written when the grace period is over */
	bool auth;
	uint8_t token_hash[MOAT_SHA256_LEN];
	const char *healthz; /* /healthz's body: says how clients are authenticated */
	struct MHD_Daemon *metrics_d; /* --metrics-listen, or NULL */
	struct serve_log log;
	/* the request deadline: MHD's timeout only counts idle time, so a client
	 * that trickles a byte now and then would hold its thread forever */
	pthread_mutex_t conns_mu;
	pthread_cond_t conns_cv;
	struct conn *conns;
	bool watchdog_stop;
	pthread_t watchdog;
	bool have_watchdog;
	struct pool *pool; /* warm sandboxes, or NULL (--pool 0) */
	/* the CPUs the service and its finished runs used, averaged over
	 * about a second (under mu; cpu_busy): a warm interpreter made while
	 * they fill the CPUs only moves a cold start's work onto the refill
	 * thread, competing with the runs, so the pool holds it and requests
	 * run cold (docs/SERVE.md, "The pool") */
	double cpu_rate, cpu_last;
	int64_t cpu_at;
	double cpus; /* CPUs this process may use; MOAT_TEST_POOL_CPUS for tests */
	struct moat_relay_caps *relay_caps; /* shared by every run's relays */
	struct serve_sessions *sessions; /* NULL: sessions off (their routes are 404s) */
	struct moat_run_options ses_opts; /* the sessions' sandboxes' */
};

/* A handler's response on its way from the worker to the connection. */
struct stream {
	struct frame_parser frame;
	bool head_ready, finished;
	int status;
	char **headers;
	size_t headers_count;
	struct moat_buf pending; /* body bytes not yet taken by MHD (in s->stream_bytes) */
	size_t pending_off;
	int resume_fd; /* eventfd: written when the client took some (the run's resume_fd) */
	bool abandoned; /* the response is gone: the rest is read and dropped */
	struct moat_result *res;
	struct moat_error err;
	bool run_failed;
	bool bodyless; /* 204, 205, 304: the handler's body is dropped */
	uint64_t dropped; /* bytes of it */
	bool ndjson; /* a streamed /v1/run (docs/SERVE.md, "Streaming"): pending holds lines */
	struct moat_ndjson nj;
	struct moat_request *req; /* the streamed run's request (freed with the req) */
};

struct req {
	struct server *s;
	pthread_mutex_t mu; /* refs, st */
	pthread_cond_t cv;
	int refs;
	enum serve_route route;
	int lang; /* -1: none */
	const char *mode; /* "script", "handler", NULL */
	bool is_post, done_headers, too_large, over_budget;
	uint64_t budget; /* bytes of s->body_bytes this request holds */
	uint64_t result_budget; /* bytes of s->result_bytes */
	struct moat_buf body;
	int64_t t0;
	uint64_t bytes_out;
	unsigned status;
	enum serve_outcome outcome;
	char method[16];
	char *header_id; /* X-Sandbox-Id, checked (serve_sandbox_id_header); NULL: none */
	char remote[INET6_ADDRSTRLEN + 8];
	int conn_fd; /* dup of the client socket while a run watches it */
	struct serve_envelope env;
	struct stream st;
	bool has_slot;
	/* the session routes: the caller's credential (the token's SHA-256, a
	 * unix peer's uid hashed), the id in the path, the session held */
	uint8_t cred[MOAT_SHA256_LEN];
	char ses_id[SERVE_SESSION_ID_LEN + 1];
	struct serve_session *ses;
	bool ses_busy; /* a step of it is ours (serve_session_end) */
	/* a run answered in this thread (run_script): its sandbox, ended by
	 * on_completed once the answer is out, before the slot is released */
	struct pool_lease lease;
	int lease_rc;
	bool has_lease;
};

/* ---- access log ---- */

/* The request's method for the log: a standard one, else "other" (a
 * client's own method name is its text, not the log's). */
static const char *log_method(const char *m)
{
	static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "DELETE",
					     "PATCH", "OPTIONS", "TRACE", "CONNECT" };
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (!strcmp(m, known[i]))
			return known[i];
	return "other";
}

static void log_request(struct req *q)
{
	struct server *s = q->s;
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"ts\":\"", 7);
	serve_log_ts(&b);
	moat_buf_append(&b, "\",\"remote\":", 11);
	moat_buf_append_json_string(&b, q->remote, strlen(q->remote));
	moat_buf_append(&b, ",\"method\":", 10);
	moat_buf_appendf(&b, "\"%s\"", log_method(q->method));
	moat_buf_appendf(&b, ",\"path\":\"%s\"", serve_route_template(q->route));
	moat_buf_appendf(&b, ",\"route\":\"%s\",\"status\":%u,\"outcome\":\"%s\",\"durationMs\":%lld,"
			     "\"bytesIn\":%zu,\"bytesOut\":%llu",
			 serve_route_name(q->route), q->status, serve_outcome_name(q->outcome),
			 (long long)(moat_mono_ms() - q->t0), q->body.len,
			 (unsigned long long)q->bytes_out);
	if (q->lang >= 0)
		moat_buf_appendf(&b, ",\"language\":\"%s\"",
				 moat_lang_get((enum moat_language)q->lang)->name);
	if (q->mode)
		moat_buf_appendf(&b, ",\"mode\":\"%s\"", q->mode);
	moat_buf_append(&b, "}\n", 2);
	if (!b.oom && b.data)
		serve_log_write(&s->log, b.data, b.len);
	moat_buf_free(&b);
}

/* The pending bytes of a handler's response leave the budget (q->mu held,
 * or the last reference). */
static void stream_drop(struct req *q)
{
	size_t held = q->st.pending.len - q->st.pending_off;
	__atomic_sub_fetch(&q->s->stream_bytes, held, __ATOMIC_RELAXED);
	moat_buf_free(&q->st.pending);
	q->st.pending_off = 0;
}

static void req_unref(struct req *q)
{
	pthread_mutex_lock(&q->mu);
	int left = --q->refs;
	pthread_mutex_unlock(&q->mu);
	if (left)
		return;
	log_request(q);
	serve_metrics_record(&q->s->metrics, q->route, q->lang, q->outcome,
			     (double)(moat_mono_ms() - q->t0) / 1000.0);
	if (q->conn_fd >= 0)
		close(q->conn_fd);
	stream_drop(q);
	if (q->st.resume_fd >= 0)
		close(q->st.resume_fd);
	pthread_mutex_lock(&q->s->mu);
	q->s->body_bytes -= q->budget;
	q->s->result_bytes -= q->result_budget;
	q->s->active--;
	pthread_cond_broadcast(&q->s->cv);
	pthread_mutex_unlock(&q->s->mu);
	if (q->ses_busy)
		serve_session_end(q->s->sessions, q->ses);
	serve_session_put(q->s->sessions, q->ses);
	moat_buf_free(&q->body);
	free(q->header_id);
	serve_envelope_free(&q->env);
	frame_free(&q->st.frame);
	for (size_t i = 0; i < 2 * q->st.headers_count; i++)
		free(q->st.headers[i]);
	free(q->st.headers);
	moat_result_free(q->st.res);
	moat_request_free(q->st.req);
	moat_error_clear(&q->st.err);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q);
}

/* ---- responses ---- */

static void conn_deadline_in(struct server *s, struct MHD_Connection *c, int64_t ms);

/* Queues body (taken; NULL: out of memory, an empty body): MHD's answer. */
static enum MHD_Result queue_body(struct MHD_Connection *c, unsigned status, char *body,
				  const char *ctype, const char *h1, const char *v1)
{
	size_t len = body ? strlen(body) : 0;
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *)"",
								 body ? MHD_RESPMEM_MUST_FREE
								      : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	if (h1)
		MHD_add_response_header(r, h1, v1);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result respond(struct req *q, struct MHD_Connection *c, unsigned status,
			       char *body, const char *ctype, const char *h1, const char *v1)
{
	q->status = status;
	q->bytes_out = body ? strlen(body) : 0;
	/* the whole answer must be out within --client-timeout: MHD's idle
	 * timeout alone lets a client that reads a byte now and then hold it */
	conn_deadline_in(q->s, c, (int64_t)q->s->o->client_timeout_s * 1000);
	return queue_body(c, status, body, ctype, h1, v1);
}

static char *error_json(const char *type, const char *msg)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"error\":{\"type\":", 17);
	moat_buf_append_json_string(&b, type, strlen(type));
	moat_buf_append(&b, ",\"message\":", 11);
	moat_buf_append_json_string(&b, msg, strlen(msg));
	moat_buf_append(&b, ",\"provider\":\"native\"}}\n", 23);
	return moat_buf_take(&b);
}

static enum MHD_Result fail(struct req *q, struct MHD_Connection *c, unsigned status,
			    const char *type, enum serve_outcome outcome, const char *msg)
{
	q->outcome = outcome;
	const char *h = NULL, *v = NULL;
	if (status == 401)
		h = "WWW-Authenticate", v = "Bearer";
	else if (status == 405)
		h = "Allow", v = q->route == R_HEALTHZ || q->route == R_METRICS ? "GET"
				 : q->route == R_SESSION			 ? "GET, DELETE"
										 : "POST";
	else if (status == 503)
		h = "Retry-After", v = "1";
	return respond(q, c, status, error_json(type, msg), "application/json", h, v);
}

/* A moat error: 400 config, 403 policy, 503 unavailable. */
static enum MHD_Result fail_moat(struct req *q, struct MHD_Connection *c,
				 const struct moat_error *err)
{
	const char *msg = err->message ? err->message : "error";
	const char *type = moat_error_type_name(err->type);
	switch (err->type) {
	case MOAT_ERR_POLICY:
		return fail(q, c, 403, type, O_BAD_REQUEST, msg);
	case MOAT_ERR_UNAVAILABLE:
		return fail(q, c, 503, type, O_UNAVAILABLE, msg);
	default:
		return fail(q, c, 400, "SandboxConfigError", O_BAD_REQUEST, msg);
	}
}

static void put_key_str(struct moat_buf *b, const char *key, const char *s, size_t len)
{
	moat_buf_appendf(b, ",\"%s\":", key);
	if (s)
		moat_buf_append_json_string(b, s, len);
	else
		moat_buf_append(b, "null", 4);
}

/* A captured stream cut so that its JSON string stays within max bytes
 * (a control byte is escaped six-fold): the answer's size is bounded by
 * the cap, not six times it. */
static void fit_output(const char *buf, size_t *len, bool *truncated, uint64_t max)
{
	size_t n = moat_json_string_fit(buf, *len, max > SIZE_MAX ? SIZE_MAX : (size_t)max, NULL);
	if (n < *len) {
		*len = n;
		*truncated = true;
	}
}

static void fit_result(struct moat_result *res, const struct moat_request *req)
{
	uint64_t cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	fit_output(res->stdout_buf, &res->stdout_len, &res->stdout_truncated, cap);
	fit_output(res->stderr_buf, &res->stderr_len, &res->stderr_truncated, cap);
}

/* The Spin script result, with moat's extra fields. */
static char *script_json(const struct moat_result *res, const struct moat_request *req)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"stdout\":", 10);
	moat_buf_append_json_string(&b, res->stdout_buf ? res->stdout_buf : "", res->stdout_len);
	put_key_str(&b, "stderr", res->stderr_buf ? res->stderr_buf : "", res->stderr_len);
	char *e = serve_script_error(res, req);
	put_key_str(&b, "error", e, e ? strlen(e) : 0);
	free(e);
	moat_buf_appendf(&b, ",\"stdoutTruncated\":%s,\"stderrTruncated\":%s,\"exitCode\":",
			 res->stdout_truncated ? "true" : "false",
			 res->stderr_truncated ? "true" : "false");
	if (res->exited)
		moat_buf_appendf(&b, "%d", res->exit_code);
	else
		moat_buf_append(&b, "null", 4);
	moat_buf_appendf(&b, ",\"timedOut\":%s", res->timed_out ? "true" : "false");
	put_key_str(&b, "killedBy", res->killed_by, res->killed_by ? strlen(res->killed_by) : 0);
	moat_buf_appendf(&b, ",\"durationMs\":%llu,\"limits\":{\"memory\":\"%s\",\"pids\":\"%s\","
			     "\"cpu\":\"%s\"},\"warnings\":[",
			 (unsigned long long)res->duration_ms,
			 res->limit_memory ? res->limit_memory : "none",
			 res->limit_pids ? res->limit_pids : "none",
			 res->limit_cpu ? res->limit_cpu : "none");
	for (size_t i = 0; i < res->warnings_count; i++) {
		if (i)
			moat_buf_append(&b, ",", 1);
		moat_buf_append_json_string(&b, res->warnings[i], strlen(res->warnings[i]));
	}
	moat_buf_append(&b, "]}\n", 3);
	return moat_buf_take(&b);
}

/* ---- run slots ---- */

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

static void release_slot(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	s->running--;
	gauges(s);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* A run's line for the operator (the store's path behind a program's "the
 * store is full"): the service's log. */
static void kv_notice(void *ctx, const char *line)
{
	serve_log_notice(ctx, "warn", "kv", "%s", line);
}

/* The service's options for a sandbox: root, policy, runtime, store,
 * relay caps (a run's and a session's). */
static void service_options(struct server *s, struct moat_run_options *opts)
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

static void run_options(struct req *q, struct moat_run_options *opts)
{
	service_options(q->s, opts);
	opts->cancel_fd = q->s->cancel_fd;
	opts->hangup_fd = q->conn_fd;
}

/* ---- handlers: the worker and the streamed response ---- */

/* A status whose response has no body (RFC 9110 15.3.5, 15.3.6, 15.4.5):
 * its head ends the message, so a body (or chunked framing) after it would
 * be read as the start of the next response on the connection. */
static bool bodyless_status(int status)
{
	return status == 204 || status == 205 || status == 304;
}

static void on_head(void *ctx, int status, char **headers, size_t count)
{
	struct req *q = ctx; /* q->mu held by on_output */
	q->st.status = status;
	q->st.headers = headers;
	q->st.headers_count = count;
	q->st.bodyless = bodyless_status(status);
	q->st.head_ready = true;
	pthread_cond_broadcast(&q->cv);
}

/* What was taken from pending goes (the buffer stays the window's size);
 * returns its length, for pending_added (q->mu held). */
static size_t pending_compact(struct req *q)
{
	moat_buf_drop_front(&q->st.pending, q->st.pending_off);
	q->st.pending_off = 0;
	return q->st.pending.len;
}

/* Bytes appended to pending since pending_compact join the budget. */
static void pending_added(struct req *q, size_t before)
{
	__atomic_add_fetch(&q->s->stream_bytes, q->st.pending.len - before, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&q->cv);
}

static void on_body(void *ctx, const char *buf, size_t len)
{
	struct req *q = ctx; /* q->mu held by on_output */
	if (q->st.abandoned)
		return;
	if (q->st.bodyless) {
		q->st.dropped += len;
		return;
	}
	size_t before = pending_compact(q);
	moat_buf_append(&q->st.pending, buf, len);
	pending_added(q, before);
}

static void on_output(void *ctx, enum moat_stream stream, const char *buf, size_t len)
{
	struct req *q = ctx;
	if (stream != MOAT_STDOUT)
		return;
	pthread_mutex_lock(&q->mu);
	frame_feed(&q->st.frame, buf, len);
	if (q->st.frame.state == FRAME_FAILED || q->st.frame.state == FRAME_END)
		pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

/* The run's stdout_full: the client has not taken enough yet. A failed or
 * abandoned response is read on (and dropped) to the program's end. */
static bool stream_full(void *ctx)
{
	struct req *q = ctx;
	pthread_mutex_lock(&q->mu);
	size_t held = q->st.pending.len - q->st.pending_off;
	bool full = !q->st.abandoned && q->st.frame.state != FRAME_FAILED &&
		    (held >= STREAM_WINDOW ||
		     (held > 0 &&
		      __atomic_load_n(&q->s->stream_bytes, __ATOMIC_RELAXED) > STREAM_BUDGET));
	pthread_mutex_unlock(&q->mu);
	return full;
}

/* Tells the run's pump to ask stream_full again. */
static void stream_wake(struct req *q)
{
	uint64_t one = 1;
	if (q->st.resume_fd >= 0 && write(q->st.resume_fd, &one, sizeof one) < 0) {
		/* EAGAIN: the counter is full, the pump is woken anyway */
	}
}

/* A streamed response's run options: its output to fn, the window's flow
 * control (stream_full, the response's resume_fd). */
static void stream_options(struct req *q, struct moat_run_options *opts,
			   void (*fn)(void *, enum moat_stream, const char *, size_t))
{
	run_options(q, opts);
	opts->on_output = fn;
	opts->output_ctx = q;
	opts->stdout_full = stream_full;
	opts->resume_fd = q->st.resume_fd;
}

/* A detached worker thread holding a reference of q; -1 when none started. */
static int start_worker(struct req *q, void *(*fn)(void *))
{
	pthread_t t;
	pthread_attr_t attr;
	pthread_mutex_lock(&q->mu);
	q->refs++; /* the worker's */
	pthread_mutex_unlock(&q->mu);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &attr, fn, q);
	pthread_attr_destroy(&attr);
	if (e) {
		pthread_mutex_lock(&q->mu);
		q->refs--;
		pthread_mutex_unlock(&q->mu);
		return -1;
	}
	return 0;
}

static void *handler_worker(void *arg)
{
	struct req *q = arg;
	struct server *s = q->s;
	struct moat_run_options opts;
	stream_options(q, &opts, on_output);
	opts.stdout_stream = true; /* no second copy: the response is streamed */
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	struct pool_lease lease;
	int rc = serve_pool_run(q->s->pool, q->env.req, &opts, &lease, &res, &err);
	pthread_mutex_lock(&q->mu);
	frame_finish(&q->st.frame);
	q->st.res = res;
	q->st.err = err;
	q->st.run_failed = rc < 0;
	q->st.finished = true;
	enum serve_outcome ro = rc < 0 ? O_UNAVAILABLE : serve_run_outcome(res);
	if (rc < 0)
		q->outcome = err.type == MOAT_ERR_UNAVAILABLE ? O_UNAVAILABLE : O_BAD_REQUEST;
	else if (q->st.frame.state == FRAME_END)
		q->outcome = O_OK; /* complete; a hang-up after it only ends the teardown */
	else if (ro == O_OK || (ro == O_DISCONNECTED && q->st.frame.state == FRAME_FAILED))
		q->outcome = O_ERROR;
	else
		q->outcome = ro;
	if (q->st.head_ready) { /* only an answer without a head reads the result */
		moat_result_free(q->st.res);
		q->st.res = NULL;
	}
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	req_unref(q);
	serve_pool_end(s->pool, &lease, rc); /* the answer is out: pid 1 gone, then */
	release_slot(s); /* last: shutdown waits for it */
	return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *q = cls;
	pthread_mutex_lock(&q->mu);
	while (q->st.pending.len == q->st.pending_off && !q->st.finished &&
	       q->st.frame.state != FRAME_END && q->st.frame.state != FRAME_FAILED)
		pthread_cond_wait(&q->cv, &q->mu);
	size_t have = q->st.pending.len - q->st.pending_off;
	ssize_t rc;
	if (have) {
		size_t n = have < max ? have : max;
		memcpy(buf, q->st.pending.data + q->st.pending_off, n);
		q->st.pending_off += n;
		if (q->st.pending_off == q->st.pending.len)
			q->st.pending.len = q->st.pending_off = 0;
		__atomic_sub_fetch(&q->s->stream_bytes, n, __ATOMIC_RELAXED);
		q->bytes_out += n;
		rc = (ssize_t)n;
		stream_wake(q);
	} else if (q->st.ndjson ? !q->st.run_failed : q->st.frame.state == FRAME_END) {
		rc = MHD_CONTENT_READER_END_OF_STREAM; /* a streamed run: its result line is out */
	} else {
		rc = MHD_CONTENT_READER_END_WITH_ERROR; /* truncated after the head */
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

static void stream_free(void *cls)
{
	struct req *q = cls;
	pthread_mutex_lock(&q->mu);
	q->st.abandoned = true; /* sent or the client is gone */
	stream_drop(q);
	pthread_mutex_unlock(&q->mu);
	stream_wake(q);
	req_unref(q);
}

/* A streamed response (stream_read), holding a reference of q; NULL on OOM. */
static struct MHD_Response *stream_response(struct req *q)
{
	struct MHD_Response *r = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, READER_BLOCK, stream_read, q, stream_free);
	if (r) {
		pthread_mutex_lock(&q->mu);
		q->refs++; /* the response's */
		pthread_mutex_unlock(&q->mu);
	}
	return r;
}

/* Queues it (and lets it go): the whole response is out within the run's
 * timeout and then --client-timeout, however slowly the client reads. */
static enum MHD_Result stream_queue(struct req *q, struct MHD_Connection *c,
				    struct MHD_Response *r, unsigned status, uint64_t timeout_ms)
{
	q->status = status;
	conn_deadline_in(q->s, c, (int64_t)timeout_ms + (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* A handler's 204, 205 or 304: its headers, no body and no framing (204
 * and 304 get no Content-Length; 205 gets Content-Length: 0). A body the
 * handler sent is dropped and counted. */
static enum MHD_Result respond_bodyless(struct req *q, struct MHD_Connection *c)
{
	if (q->st.dropped) {
		pthread_mutex_lock(&q->s->metrics.mu);
		q->s->metrics.handler_bodies_dropped++;
		pthread_mutex_unlock(&q->s->metrics.mu);
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"",
								 MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	for (size_t i = 0; i < q->st.headers_count; i++)
		MHD_add_response_header(r, q->st.headers[2 * i], q->st.headers[2 * i + 1]);
	q->status = (unsigned)q->st.status;
	enum MHD_Result rc = MHD_queue_response(c, (unsigned)q->st.status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result run_handler(struct req *q, struct MHD_Connection *c)
{
	frame_init(&q->st.frame, q->s->limits.max_response_bytes,
		   &(struct frame_sink){ on_head, on_body, q });
	if ((q->st.resume_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		release_slot(q->s);
		q->has_slot = false;
		return fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
			    "cannot make the response's eventfd");
	}
	if (start_worker(q, handler_worker) < 0) {
		release_slot(q->s);
		q->has_slot = false;
		return fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
			    "cannot start a worker thread");
	}
	q->has_slot = false; /* the worker releases it */
	pthread_mutex_lock(&q->mu);
	while (!q->st.head_ready && !q->st.finished && q->st.frame.state != FRAME_FAILED)
		pthread_cond_wait(&q->cv, &q->mu);
	if (q->st.head_ready && q->st.bodyless) {
		/* answered once the handler's response is complete: a failure
		 * after its head is then still a 500, not a 304 */
		while (q->st.frame.state != FRAME_END && q->st.frame.state != FRAME_FAILED &&
		       !q->st.finished)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->st.frame.state == FRAME_END) {
			pthread_mutex_unlock(&q->mu);
			return respond_bodyless(q, c);
		}
	} else if (q->st.head_ready) {
		int status = q->st.status;
		pthread_mutex_unlock(&q->mu);
		struct MHD_Response *r = stream_response(q);
		if (!r)
			return MHD_NO;
		for (size_t i = 0; i < q->st.headers_count; i++)
			MHD_add_response_header(r, q->st.headers[2 * i], q->st.headers[2 * i + 1]);
		return stream_queue(q, c, r, (unsigned)status, q->env.req->timeout_ms);
	}
	/* no head: wait for the run's end, then answer with what is known */
	while (!q->st.finished)
		pthread_cond_wait(&q->cv, &q->mu);
	pthread_mutex_unlock(&q->mu);
	if (q->st.run_failed)
		return fail_moat(q, c, &q->st.err);
	struct moat_result *res = q->st.res;
	fit_result(res, q->env.req);
	char *why = q->st.frame.error ? q->st.frame.error : "the handler wrote no response";
	char *script_err = serve_script_error(res, q->env.req);
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"stdout\":\"\"", 12);
	put_key_str(&b, "stderr", res->stderr_buf ? res->stderr_buf : "", res->stderr_len);
	struct moat_buf msg = { 0 };
	/* a kill (timeout, memory) says more than the missing response */
	if (script_err && !res->exited)
		moat_buf_appendf(&msg, "%s", script_err);
	else
		moat_buf_appendf(&msg, "%s", why);
	put_key_str(&b, "error", msg.data ? msg.data : "handler failed", msg.len);
	moat_buf_free(&msg);
	free(script_err);
	moat_buf_appendf(&b, ",\"exitCode\":");
	if (res->exited)
		moat_buf_appendf(&b, "%d", res->exit_code);
	else
		moat_buf_append(&b, "null", 4);
	moat_buf_appendf(&b, ",\"timedOut\":%s,\"durationMs\":%llu}\n",
			 res->timed_out ? "true" : "false", (unsigned long long)res->duration_ms);
	if (q->outcome == O_OK)
		q->outcome = O_ERROR;
	enum serve_outcome keep = q->outcome;
	enum MHD_Result rc = respond(q, c, 500, moat_buf_take(&b), "application/json", NULL, NULL);
	q->outcome = keep;
	return rc;
}

/* ---- routes ---- */

/* Reserves a result's worst case (RESULT_BUDGET); false: the budget is full. */
static bool reserve_result(struct req *q, const struct moat_request *req)
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

/* A finished run's 200 (body taken; NULL: out of memory), its outcome kept. */
static enum MHD_Result respond_run(struct req *q, struct MHD_Connection *c, char *body)
{
	if (!body)
		return MHD_NO;
	enum serve_outcome keep = q->outcome;
	enum MHD_Result r = respond(q, c, 200, body, "application/json", NULL, NULL);
	q->outcome = keep;
	return r;
}

/* An admitted request whose answer would not fit the results' budget. */
static enum MHD_Result refuse_result(struct req *q, struct MHD_Connection *c)
{
	release_slot(q->s);
	q->has_slot = false;
	return fail(q, c, 503, "ServerBusy", O_REJECTED,
		    "the results in flight fill this server's memory budget; retry later");
}

static enum MHD_Result run_script(struct req *q, struct MHD_Connection *c,
				  const struct moat_request *req, bool v1)
{
	if (!reserve_result(q, req)) /* admitted, but its answer would not fit */
		return refuse_result(q, c);
	struct moat_run_options opts;
	run_options(q, &opts);
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	int rc = serve_pool_run(q->s->pool, req, &opts, &q->lease, &res, &err);
	/* the slot and the sandbox stay until the answer is out (on_completed) */
	q->lease_rc = rc;
	q->has_lease = true;
	if (rc < 0) {
		enum MHD_Result r = fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	q->outcome = serve_run_outcome(res);
	fit_result(res, req);
	char *body = v1 ? moat_result_to_json(res) : script_json(res, req);
	moat_result_free(res);
	return respond_run(q, c, body);
}

/* q->conn_fd: a dup of the client's socket, for a run's (or a session's
 * start's) hangup_fd. */
static void watch_client(struct req *q, struct MHD_Connection *c)
{
	if (q->conn_fd >= 0)
		return;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		q->conn_fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
}

static enum MHD_Result take_slot(struct req *q, struct MHD_Connection *c)
{
	bool stopping;
	if (admit(q->s, &stopping) < 0)
		return fail(q, c, 503, "ServerBusy", O_REJECTED,
			    stopping ? "the server is shutting down"
				     : "every run slot and the queue are full; retry later");
	q->has_slot = true;
	/* the run watches the client: a hang-up kills it */
	watch_client(q, c);
	return MHD_YES;
}

/* The service's limits as the request pipeline's defaults. */
static int limits_fill(void *ctx, struct moat_request *req, unsigned given,
		       struct moat_error *err)
{
	return serve_limits_apply(ctx, req, given, err);
}

/* /v1/run's: the same, and the request's language for the log and the
 * metrics, an error after parsing included (an argv request has none). */
static int v1_fill(void *ctx, struct moat_request *req, unsigned given, struct moat_error *err)
{
	struct req *q = ctx;
	q->lang = req->argc ? -1 : (int)req->language;
	return serve_limits_apply(&q->s->limits, req, given, err);
}

static enum MHD_Result spin_route(struct req *q, struct MHD_Connection *c)
{
	enum moat_language lang = q->route == R_PY ? MOAT_LANG_PYTHON : MOAT_LANG_TYPESCRIPT;
	q->lang = (int)lang;
	bool too_large;
	struct moat_error err = { 0 };
	enum MHD_Result r;
	if (serve_envelope_parse(q->body.data ? q->body.data : "", q->body.len, lang,
				 q->header_id, &q->env, &too_large, &err) < 0) {
		r = too_large ? fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST, err.message)
			      : fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	q->mode = q->env.mode == SERVE_HANDLER ? "handler" : "script";
	if (q->env.kv_enabled && q->s->o->kv_off)
		return fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
			    "kvEnabled: this server runs without the key-value store (--no-kv)");
	if (q->env.mode == SERVE_HANDLER && !q->s->o->runtime_dir)
		return fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
			    "handlers need the runtime shims (moat serve --runtime DIR)");
	/* the envelope's own fields are checked; the service's limits fill
	 * the rest, then the request pipeline validates it once (a refused
	 * allowedHosts entry is the envelope's input error: 400) */
	struct moat_request_defaults d = { .fill = limits_fill, .ctx = &q->s->limits,
					   .entry_refusal_is_config = true };
	if (moat_request_finish(q->env.req, 0, &d, &err) < 0) {
		r = fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	/* a handler's stdout is streamed (bounded by maxResponseBytes and the
	 * stream window); the cap, a script's, is its stderr's */
	r = take_slot(q, c);
	if (!q->has_slot)
		return r;
	if (q->env.mode == SERVE_HANDLER)
		return run_handler(q, c);
	return run_script(q, c, q->env.req, false);
}

/* ---- sessions (docs/SESSIONS.md; the table and its thread: sessions.c) ---- */

/* A step's answer: json (a result object, or an NDJSON result line) with
 * the keys of extra (the driver's "error", "value", "display"...) and the
 * "session" after the step; malloc'd, '\n'-terminated, NULL on OOM. */
static char *session_answer(struct req *q, const char *json, const char *extra)
{
	size_t n = strlen(json);
	while (n && (json[n - 1] == '\n' || json[n - 1] == ' '))
		n--;
	if (!n || json[n - 1] != '}')
		return NULL;
	struct moat_buf b = { 0 };
	moat_buf_append(&b, json, n - 1);
	const char *e = extra ? strchr(extra, '{') : NULL;
	const char *end = e ? strrchr(e, '}') : NULL;
	if (e && end) {
		const char *in = e + 1;
		while (in < end && (*in == ' ' || *in == '\n' || *in == '\t' || *in == '\r'))
			in++;
		if (in < end) {
			moat_buf_append(&b, ",", 1);
			moat_buf_append(&b, in, (size_t)(end - in));
		}
	}
	moat_buf_append(&b, ",\"session\":", 11);
	serve_session_json(q->s->sessions, q->ses, &b, false);
	moat_buf_append(&b, "}\n", 2);
	return moat_buf_take(&b);
}

/* ---- /v1/run streamed (Accept: application/x-ndjson) ---- */

/* The client asked for the streamed answer. */
static bool wants_ndjson(struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	return a && strcasestr(a, "application/x-ndjson");
}

/* The run's on_output: each chunk becomes its lines in pending (counted in
 * the stream budget; the window pauses the run's pipes, stream_full). */
static void ndjson_output(void *ctx, enum moat_stream stream, const char *buf, size_t len)
{
	struct req *q = ctx;
	pthread_mutex_lock(&q->mu);
	if (!q->st.abandoned) {
		size_t before = pending_compact(q);
		moat_ndjson_output(&q->st.nj, &q->st.pending, stream, buf, len);
		pending_added(q, before);
	}
	pthread_mutex_unlock(&q->mu);
}

static void *ndjson_worker(void *arg)
{
	struct req *q = arg;
	struct server *s = q->s;
	struct moat_run_options opts;
	stream_options(q, &opts, ndjson_output);
	opts.output_stream = true; /* nothing kept: the output is streamed, capped */
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	char *line = NULL;
	int rc;
	struct pool_lease lease;
	bool ran = false;
	if (q->ses) {
		char *extra = NULL;
		rc = serve_session_step(s->sessions, q->ses, q->st.req, &opts, &res, &extra, &err);
		serve_session_end(s->sessions, q->ses);
		q->ses_busy = false;
		char *r = rc == 0 ? moat_ndjson_result(res) : NULL;
		line = r ? session_answer(q, r, extra) : NULL;
		free(r);
		free(extra);
	} else {
		rc = serve_pool_run(s->pool, q->st.req, &opts, &lease, &res, &err);
		ran = true;
		line = rc == 0 ? moat_ndjson_result(res) : NULL;
	}
	pthread_mutex_lock(&q->mu);
	q->st.err = err;
	q->st.run_failed = rc < 0 || !line;
	if (rc < 0)
		q->outcome = err.type == MOAT_ERR_UNAVAILABLE ? O_UNAVAILABLE : O_BAD_REQUEST;
	else
		q->outcome = serve_run_outcome(res);
	if (!q->st.abandoned && line) {
		size_t before = pending_compact(q);
		moat_ndjson_flush(&q->st.nj, &q->st.pending);
		moat_buf_append(&q->st.pending, line, strlen(line));
		pending_added(q, before);
	}
	free(line);
	moat_result_free(res);
	q->st.finished = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	req_unref(q);
	if (ran) /* the answer is out: pid 1 gone, then */
		serve_pool_end(s->pool, &lease, rc);
	release_slot(s); /* last: shutdown waits for it */
	return NULL;
}

/* A /v1/run answered as NDJSON lines while it runs; req is taken. The head
 * goes with the first line: a run that fails before any is an ordinary
 * error answer. */
static enum MHD_Result run_ndjson(struct req *q, struct MHD_Connection *c,
				  struct moat_request *req)
{
	q->st.ndjson = true;
	q->st.req = req;
	const char *why = NULL;
	if (!reserve_result(q, req))
		why = "the results in flight fill this server's memory budget; retry later";
	else if ((q->st.resume_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		why = "cannot make the response's eventfd";
	if (!why && start_worker(q, ndjson_worker) < 0)
		why = "cannot start a worker thread";
	if (why) {
		release_slot(q->s);
		q->has_slot = false;
		return fail(q, c, 503, q->result_budget ? "SandboxUnavailableError" : "ServerBusy",
			    q->result_budget ? O_UNAVAILABLE : O_REJECTED, why);
	}
	q->has_slot = false; /* the worker releases it */
	pthread_mutex_lock(&q->mu);
	while (q->st.pending.len == q->st.pending_off && !q->st.finished)
		pthread_cond_wait(&q->cv, &q->mu);
	bool failed = q->st.finished && q->st.run_failed &&
		      q->st.pending.len == q->st.pending_off;
	pthread_mutex_unlock(&q->mu);
	if (failed && q->ses) { /* the session died before its step began */
		char *gone = serve_session_gone(q->s->sessions, q->ses);
		if (gone) {
			enum MHD_Result r = fail(q, c, 410, "SessionGone", O_ERROR, gone);
			free(gone);
			return r;
		}
	}
	if (failed) /* nothing was streamed: the ordinary error answer */
		return q->st.err.message ? fail_moat(q, c, &q->st.err) : MHD_NO;
	struct MHD_Response *r = stream_response(q);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return stream_queue(q, c, r, 200, req->timeout_ms);
}

static enum MHD_Result v1_route(struct req *q, struct MHD_Connection *c)
{
	struct moat_request *req = NULL;
	struct moat_error err = { 0 };
	enum MHD_Result r;
	const char *body = q->body.data ? q->body.data : "";
	/* the request pipeline, with the X-Sandbox-Id header, if any, as the
	 * request's "sandboxId" and the service's limits as its defaults */
	struct moat_request_defaults d = { .fill = v1_fill, .ctx = q };
	if (moat_request_prepare(body, q->body.len, q->header_id, &d, &req, &err) < 0) {
		r = fail_moat(q, c, &err);
		moat_error_clear(&err);
		moat_request_free(req);
		return r;
	}
	/* an argv request has no language: the log and the metrics say none */
	q->lang = req->argc ? -1 : (int)req->language;
	q->mode = req->argc ? "command" : "script";
	r = take_slot(q, c);
	if (r == MHD_YES && q->has_slot && wants_ndjson(c))
		return run_ndjson(q, c, req);
	if (r == MHD_YES && q->has_slot)
		r = run_script(q, c, req, true);
	moat_request_free(req);
	return r;
}

/* The caller a session is bound to: the bearer token (its SHA-256) when
 * the service has one, else on a unix socket the peer's uid, else (a
 * loopback listener with --no-auth) every caller alike. */
static void caller_cred(struct server *s, struct MHD_Connection *c, uint8_t out[MOAT_SHA256_LEN])
{
	if (s->auth) {
		memcpy(out, s->token_hash, MOAT_SHA256_LEN);
		return;
	}
	char who[64];
	snprintf(who, sizeof who, "moat-session-caller:anonymous");
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct ucred uc;
	socklen_t ul = sizeof uc;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (ci && ci->connect_fd >= 0 &&
	    getsockname(ci->connect_fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    ss.ss_family == AF_UNIX &&
	    getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0)
		snprintf(who, sizeof who, "moat-session-caller:uid:%u", (unsigned)uc.uid);
	moat_sha256(who, strlen(who), out);
}

static enum MHD_Result session_missing(struct req *q, struct MHD_Connection *c)
{
	return fail(q, c, 404, "SessionNotFound", O_BAD_REQUEST,
		    "no such session (it never existed, is another caller's, or ended long ago)");
}

static enum MHD_Result session_gone(struct req *q, struct MHD_Connection *c, char *why)
{
	enum MHD_Result r = fail(q, c, 410, "SessionGone", O_ERROR,
				 why ? why : "the session is gone");
	free(why);
	return r;
}

/* A lifetime field of POST /v1/sessions (removed from the object): its
 * value, the default when absent, or -1 with *err. */
static int lifetime_key(cJSON *o, const char *key, uint64_t def, uint64_t max, uint64_t *out,
			struct moat_error *err)
{
	cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(o, key);
	*out = def;
	if (!it)
		return 0;
	double v = it->valuedouble;
	bool ok = cJSON_IsNumber(it) && v >= 100 && v <= (double)max && v == floor(v);
	cJSON_Delete(it);
	if (!ok)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"%s\" must be a whole number of milliseconds from 100 to %llu "
				      "(this server's serve.sessions maximum)", key,
				      (unsigned long long)max);
	*out = (uint64_t)v;
	return 0;
}

/* body as a JSON object whose keys are among allowed (NULL-terminated):
 * the object, or NULL with *err (400). */
static cJSON *session_body(struct req *q, const char *const *refused, struct moat_error *err)
{
	bool nul = false;
	const char *body = q->body.data ? q->body.data : "";
	if (moat_json_prescan(body, q->body.len, &nul, err) < 0)
		return NULL;
	cJSON *o = cJSON_ParseWithLength(body, q->body.len);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "the body must be a JSON object");
		return NULL;
	}
	for (const cJSON *it = o->child; it; it = it->next)
		for (const char *const *k = refused; *k; k++)
			if (it->string && !strcmp(it->string, *k)) {
				moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"%s\" is not taken here "
					       "(docs/SESSIONS.md)", *k);
				cJSON_Delete(o);
				return NULL;
			}
	return o;
}

/* The request pipeline on o (printed back), with the service's limits. */
static int session_prepare(struct req *q, cJSON *o, const char *header_id,
			   struct moat_request **req, struct moat_error *err)
{
	char *text = cJSON_PrintUnformatted(o);
	if (!text)
		return moat_error_oom(err);
	struct moat_request_defaults d = { .fill = limits_fill, .ctx = &q->s->limits };
	int rc = moat_request_prepare(text, strlen(text), header_id, &d, req, err);
	free(text);
	return rc;
}

/* POST /v1/sessions */
static enum MHD_Result sessions_create_route(struct req *q, struct MHD_Connection *c)
{
	static const char *const refused[] = { "code", "argv", "stdin", "files", "outputs",
					       "timeout", NULL };
	const struct serve_limits *l = &q->s->limits;
	struct moat_error err = { 0 };
	struct moat_request *req = NULL;
	char *answer = NULL;
	uint64_t idle = 0, life = 0;
	enum MHD_Result r;
	int rc = -1;
	cJSON *o = session_body(q, refused, &err);
	if (o && lifetime_key(o, "idleTimeoutMs", l->session_idle_ms, l->session_max_idle_ms,
			      &idle, &err) == 0 &&
	    lifetime_key(o, "maxLifetimeMs", l->session_max_life_ms, l->session_max_life_ms,
			 &life, &err) == 0 &&
	    cJSON_AddStringToObject(o, "code", "") && session_prepare(q, o, q->header_id, &req,
								       &err) == 0)
		rc = 0;
	cJSON_Delete(o);
	if (rc == 0) {
		q->lang = (int)req->language;
		if (req->language != MOAT_LANG_PYTHON && req->language != MOAT_LANG_JAVASCRIPT)
			rc = moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					    "sessions take Python or JavaScript (\"language\": "
					    "\"python\" or \"javascript\")");
	}
	if (rc == 0 && req->kv_enabled && q->s->o->kv_off) {
		moat_request_free(req);
		return fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
			    "kvEnabled: this server runs without the key-value store (--no-kv)");
	}
	if (rc == 0) {
		/* a client that hangs up, or the end of the grace, ends the
		 * wait for the driver's start */
		watch_client(q, c);
		struct moat_run_options per;
		run_options(q, &per);
		rc = serve_sessions_create(q->s->sessions, q->cred, req, idle, life, &per, &answer,
					   &err);
	}
	moat_request_free(req);
	if (rc == -2) {
		r = fail(q, c, 503, "ServerBusy", O_REJECTED, err.message);
	} else if (rc < 0) {
		r = fail_moat(q, c, &err);
	} else {
		r = respond(q, c, 201, answer, "application/json", NULL, NULL);
	}
	moat_error_clear(&err);
	return r;
}

/* A step answered whole. */
static enum MHD_Result session_step(struct req *q, struct MHD_Connection *c,
				    const struct moat_request *req)
{
	if (!reserve_result(q, req))
		return refuse_result(q, c);
	struct moat_run_options opts;
	run_options(q, &opts);
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	char *extra = NULL;
	int rc = serve_session_step(q->s->sessions, q->ses, req, &opts, &res, &extra, &err);
	release_slot(q->s);
	q->has_slot = false;
	serve_session_end(q->s->sessions, q->ses);
	q->ses_busy = false;
	if (rc < 0) {
		char *gone = serve_session_gone(q->s->sessions, q->ses);
		enum MHD_Result r = gone ? session_gone(q, c, gone) : fail_moat(q, c, &err);
		moat_error_clear(&err);
		free(extra);
		return r;
	}
	q->outcome = serve_run_outcome(res);
	fit_result(res, req);
	char *json = moat_result_to_json(res);
	moat_result_free(res);
	char *body = json ? session_answer(q, json, extra) : NULL;
	free(json);
	free(extra);
	return respond_run(q, c, body);
}

/* POST /v1/sessions/{id}/run */
static enum MHD_Result session_run_route(struct req *q, struct MHD_Connection *c)
{
	static const char *const refused[] = { "language", "argv", "env", "network",
					       "allowedHosts", "allowedCidrs", "memoryMb", "cpus",
					       "pidsLimit", "sandboxId", "kvEnabled", "outputs",
					       "maxOutputBytes", "strictLimits", NULL };
	struct serve_sessions *ss = q->s->sessions;
	q->ses = serve_sessions_get(ss, q->ses_id, q->cred);
	if (!q->ses)
		return session_missing(q, c);
	enum moat_language lang = serve_session_language(q->ses);
	q->lang = (int)lang;
	struct moat_error err = { 0 };
	struct moat_request *req = NULL;
	cJSON *o = session_body(q, refused, &err);
	int rc = -1;
	if (o && cJSON_AddStringToObject(o, "language", moat_lang_get(lang)->name) &&
	    session_prepare(q, o, NULL, &req, &err) == 0)
		rc = 0;
	cJSON_Delete(o);
	if (rc < 0) {
		enum MHD_Result r = err.message ? fail_moat(q, c, &err) : MHD_NO;
		moat_error_clear(&err);
		return r;
	}
	/* the session's own cap bounds its output; this one the answer */
	req->max_output_bytes = q->s->limits.max_output_bytes;
	char *gone = NULL;
	int b = serve_session_begin(ss, q->ses, &gone);
	if (b == -1) {
		moat_request_free(req);
		return fail(q, c, 409, "SessionBusy", O_REJECTED,
			    "a step is running in this session; runs in one session are "
			    "serialised");
	}
	if (b < 0) {
		moat_request_free(req);
		return session_gone(q, c, gone);
	}
	q->ses_busy = true;
	q->mode = "session";
	enum MHD_Result r = take_slot(q, c);
	if (r == MHD_YES && q->has_slot && wants_ndjson(c))
		return run_ndjson(q, c, req);
	if (r == MHD_YES && q->has_slot)
		r = session_step(q, c, req);
	moat_request_free(req);
	return r;
}

/* GET and DELETE /v1/sessions/{id}: answered from the headers. */
static enum MHD_Result session_route(struct req *q, struct MHD_Connection *c, bool del)
{
	struct serve_sessions *ss = q->s->sessions;
	q->ses = serve_sessions_get(ss, q->ses_id, q->cred);
	if (!q->ses)
		return session_missing(q, c);
	q->lang = (int)serve_session_language(q->ses);
	struct moat_buf b = { 0 };
	if (del) {
		char *gone = NULL;
		if (serve_session_delete(ss, q->ses, &gone) < 0)
			return session_gone(q, c, gone);
		moat_buf_appendf(&b, "{\"id\":\"%s\",\"state\":\"ended\"}\n", q->ses_id);
	} else {
		free(serve_session_gone(ss, q->ses)); /* its state now */
		serve_session_json(ss, q->ses, &b, true);
		moat_buf_append(&b, "\n", 1);
	}
	char *body = moat_buf_take(&b);
	return body ? respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
}

static double tv_s(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

/* The CPU time of this process and of its children reaped so far (a run's
 * pid 1 is reaped with its descendants' time in it), in seconds. */
static double cpu_used_s(void)
{
	struct rusage self, kids;
	if (getrusage(RUSAGE_SELF, &self) < 0 || getrusage(RUSAGE_CHILDREN, &kids) < 0)
		return 0;
	return tv_s(self.ru_utime) + tv_s(self.ru_stime) + tv_s(kids.ru_utime) +
	       tv_s(kids.ru_stime);
}

/* The CPUs the service and its runs kept busy lately (s->mu held): CPU time
 * over wall time, averaged exponentially over CPU_TAU_MS; true when that
 * leaves less than half a CPU of those this process may use. A run's time
 * counts once it has ended: a long one weighs on the next seconds. */
#define CPU_TAU_MS 1000.0
static bool cpu_busy(struct server *s)
{
	int64_t now = moat_mono_ms();
	double used = cpu_used_s();
	if (s->cpu_at) {
		double decay = exp(-(double)(now - s->cpu_at) / CPU_TAU_MS);
		double spent = used > s->cpu_last ? used - s->cpu_last : 0;
		s->cpu_rate = s->cpu_rate * decay + spent * 1000.0 / CPU_TAU_MS;
	}
	s->cpu_at = now;
	s->cpu_last = used;
	return s->cpu_rate > s->cpus - 0.5;
}

/* Every run slot taken, or the service and its runs have kept the CPUs
 * busy for the last second or so (cpu_busy): the pool does not prewarm an
 * interpreter then (its start would only compete with the runs; a request
 * that finds no warm sandbox runs cold, under such load as fast). */
static bool slots_full(void *ctx)
{
	struct server *s = ctx;
	pthread_mutex_lock(&s->mu);
	bool full = s->running >= s->o->max_concurrent || cpu_busy(s);
	pthread_mutex_unlock(&s->mu);
	return full;
}

/* The CPUs this process may run on (its affinity), at least 1. */
static double usable_cpus(void)
{
	int64_t t = moat_test_ms("MOAT_TEST_POOL_CPUS", 0);
	if (t > 0)
		return (double)t;
	cpu_set_t set;
	int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
	if (n <= 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (double)n : 1.0;
}

/* Warm sandboxes per language: --pool, else the config's serve.pool, else
 * 2 with at least 4 GiB available, 1 with 1 GiB, none below (an idle
 * python sandbox holds about 10 MiB, a node one about 40). */
static unsigned pool_size(int flag, int config)
{
	if (flag >= 0)
		return (unsigned)flag;
	if (config >= 0)
		return (unsigned)config;
	long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	double mib = pages > 0 && psize > 0 ? (double)pages * (double)psize / 1048576.0 : 0;
	return mib >= 4096 ? 2 : mib >= 1024 ? 1 : 0;
}

/* Sessions live at once by default: the memory available over a session's
 * default memory, at most SERVE_SESSIONS_AUTO_MAX (as the pool's size is
 * from memory), at least 1. */
static unsigned sessions_auto(uint64_t memory_mb)
{
	long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	double mib = pages > 0 && psize > 0 ? (double)pages * (double)psize / 1048576.0 : 0;
	double n = memory_mb ? mib / (double)memory_mb : 0;
	return n >= SERVE_SESSIONS_AUTO_MAX ? SERVE_SESSIONS_AUTO_MAX : n >= 1 ? (unsigned)n : 1;
}

/* The service's metrics and the pool's. */
static char *metrics_text(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t result_bytes = (int64_t)s->result_bytes;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->metrics.mu);
	s->metrics.result_bytes = result_bytes;
	s->metrics.stream_bytes = (int64_t)__atomic_load_n(&s->stream_bytes, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->metrics.mu);
	char *m = serve_metrics_render(&s->metrics);
	if (!m)
		return m;
	struct moat_buf b = { 0 };
	moat_buf_append(&b, m, strlen(m));
	free(m);
	moat_buf_appendf(&b, "# HELP moat_serve_log_lines_dropped_total Log lines dropped because "
			     "the log's reader fell behind (its queue was full).\n"
			     "# TYPE moat_serve_log_lines_dropped_total counter\n"
			     "moat_serve_log_lines_dropped_total %llu\n",
			 (unsigned long long)serve_log_dropped(&s->log));
	serve_metrics_relays(s->relay_caps, &b);
	serve_sessions_metrics(s->sessions, &b);
	if (s->pool)
		pool_render(s->pool, &b);
	return moat_buf_take(&b);
}

/* DELETE /v1/kv/<sandboxId>: retire an id's store. */
static enum MHD_Result kv_delete(struct req *q, struct MHD_Connection *c, const char *id)
{
	const struct moat_serve_options *o = q->s->o;
	if (o->kv_off)
		return fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
			    "this server runs without the key-value store (--no-kv)");
	struct moat_error err = { 0 };
	char *out = NULL, *detail = NULL;
	size_t len;
	if (moat_sandbox_id_agree(q->header_id, id, strlen(id), "the path", &err) < 0 ||
	    moat_kv_admin(o->kv_store, "clear", id, strlen(id), NULL, &out, &len, &detail,
			  &err) < 0) {
		/* the client gets err (no host path), the log the store's own words */
		if (detail)
			serve_log_notice(&q->s->log, "warn", "kv", "DELETE /v1/kv/{id}: %s", detail);
		free(detail);
		enum MHD_Result r = fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	char *body = moat_format("%s\n", out);
	free(out);
	return body ? respond(q, c, 200, body, "application/json", NULL, NULL)
		    : fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE, "out of memory");
}

/* Counts the X-Sandbox-Id headers and keeps the first value. */
struct id_headers {
	unsigned count;
	const char *first;
};

static enum MHD_Result count_id_header(void *cls, enum MHD_ValueKind kind, const char *key,
				       const char *value)
{
	struct id_headers *h = cls;
	(void)kind;
	if (key && !strcasecmp(key, "X-Sandbox-Id") && h->count++ == 0)
		h->first = value ? value : "";
	return MHD_YES;
}

/* The request's X-Sandbox-Id into q->header_id: 0 (none is fine), or -1
 * with *err (400). */
static int read_id_header(struct req *q, struct MHD_Connection *c, struct moat_error *err)
{
	struct id_headers h = { 0 };
	MHD_get_connection_values(c, MHD_HEADER_KIND, count_id_header, &h);
	if (h.count == 0)
		return 0;
	if (serve_sandbox_id_header(h.first, h.count, err) < 0)
		return -1;
	if (!(q->header_id = strdup(h.first)))
		return moat_error_oom(err);
	return 0;
}

static bool token_ok(struct server *s, struct MHD_Connection *c)
{
	if (!s->auth)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncasecmp(h, "Bearer ", 7))
		return false;
	uint8_t got[MOAT_SHA256_LEN];
	moat_sha256(h + 7, strlen(h + 7), got);
	unsigned diff = 0;
	for (size_t i = 0; i < MOAT_SHA256_LEN; i++)
		diff |= got[i] ^ s->token_hash[i];
	return diff == 0;
}

static enum serve_route route_of(const char *url)
{
	if (!strncmp(url, "/py/", 4))
		return R_PY;
	if (!strncmp(url, "/ts/", 4))
		return R_TS;
	if (!strcmp(url, "/v1/run"))
		return R_V1_RUN;
	if (!strncmp(url, "/v1/kv/", 7))
		return R_KV;
	if (!strcmp(url, "/v1/sessions"))
		return R_SESSIONS;
	if (!strncmp(url, "/v1/sessions/", 13)) {
		size_t n = strlen(url + 13);
		return n > 4 && !strcmp(url + 13 + n - 4, "/run") ? R_SESSION_RUN : R_SESSION;
	}
	if (!strcmp(url, "/healthz"))
		return R_HEALTHZ;
	if (!strcmp(url, "/metrics"))
		return R_METRICS;
	return R_OTHER;
}

static void describe_remote(struct req *q, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	snprintf(q->remote, sizeof q->remote, "unix");
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, q->remote,
			  sizeof q->remote);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, q->remote,
			  sizeof q->remote);
}

/* ---- the request target ---- */

static int hex_digit(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0'
	       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
	       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
					: -1;
}

/* libmicrohttpd's unescape (the path and each query argument, when the
 * request line is read): %XX decoded in place, as its own does. A %00
 * would leave a C string that ends early, and "/v1/kv/victim%00x" would
 * name "victim": instead the connection is marked (on_headers refuses the
 * request with 400) and the %00 is left as it is, so that nothing is cut
 * even without a mark. */
static size_t unescape_target(void *cls, struct MHD_Connection *c, char *url)
{
	(void)cls;
	const union MHD_ConnectionInfo *ci =
		c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
	struct conn *k = ci ? ci->socket_context : NULL;
	char *w = url;
	for (const char *r = url; *r;) {
		int hi, lo;
		if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0) {
			if (hi == 0 && lo == 0) {
				if (k)
					k->target_nul = true;
				*w++ = *r++;
				continue;
			}
			*w++ = (char)(hi * 16 + lo);
			r += 3;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
	return (size_t)(w - url);
}

/* Takes the mark unescape_target left for this request. */
static bool target_had_nul(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *k = ci ? ci->socket_context : NULL;
	if (!k || !k->target_nul)
		return false;
	k->target_nul = false;
	return true;
}

/* ---- request deadline ---- */

/* The connection is shut down ms from now (0: no deadline). */
static void conn_deadline_in(struct server *s, struct MHD_Connection *c, int64_t ms)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *k = ci ? ci->socket_context : NULL;
	if (!k)
		return;
	pthread_mutex_lock(&s->conns_mu);
	k->deadline = ms ? moat_mono_ms() + ms : 0;
	pthread_mutex_unlock(&s->conns_mu);
}

static void conn_deadline(struct server *s, struct MHD_Connection *c, bool arm)
{
	conn_deadline_in(s, c, arm ? (int64_t)s->o->client_timeout_s * 1000 : 0);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct conn *k = calloc(1, sizeof *k);
		if (!k || !ci) {
			free(k);
			return;
		}
		k->fd = ci->connect_fd;
		pthread_mutex_lock(&s->conns_mu);
		k->deadline = moat_mono_ms() + (int64_t)s->o->client_timeout_s * 1000;
		k->next = s->conns;
		if (s->conns)
			s->conns->prev = k;
		s->conns = k;
		pthread_mutex_unlock(&s->conns_mu);
		*socket_context = k;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
		/* MHD closes the socket after this call: from here on the fd may
		 * be another connection's, so it leaves the list first */
		struct conn *k = *socket_context;
		pthread_mutex_lock(&s->conns_mu);
		if (k->prev)
			k->prev->next = k->next;
		else
			s->conns = k->next;
		if (k->next)
			k->next->prev = k->prev;
		pthread_mutex_unlock(&s->conns_mu);
		free(k);
		*socket_context = NULL;
	}
}

static void notice(struct server *s, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Cgroup leaves left by moats no longer running (a predecessor killed with
 * -9 leaves its runs' leaves behind): removed when the service starts and
 * every LEFTOVER_SWEEP_MS after, so they wait neither for a run nor forever
 * (a run sweeps too, at most once a minute; src/cgroups). Only rmdir, only
 * leaves whose owner is gone: never a live moat's. */
#define LEFTOVER_SWEEP_MS 60000
static void sweep_leftovers(struct server *s, bool *warned)
{
	struct moat_cgroup_leftovers lo = { 0 };
	(void)moat_cgroup_sweep_leftovers(true, &lo);
	if (lo.removed)
		notice(s, "info", "removed %u cgroup leaves left by moats no longer running (%s)",
		       lo.removed, lo.where ? lo.where : "?");
	if (lo.found > lo.removed && !*warned) {
		*warned = true;
		notice(s, "warn", "%u cgroup leaves of moats no longer running could not be removed "
		       "(%s): processes are still in them (a moat of another pid namespace?)",
		       lo.found - lo.removed, lo.where ? lo.where : "?");
	}
	free(lo.where);
}

/* Every half second: a connection whose request (headers and body) is not in
 * by its deadline, or whose answer is not out by its own, is shut down; MHD
 * then closes it. And the leftover sweep above, at its start and every
 * minute. */
static void *watchdog(void *arg)
{
	struct server *s = arg;
	bool warned = false;
	/* first thing, beside the start-up: the listener does not wait for it */
	sweep_leftovers(s, &warned);
	int64_t next_sweep = moat_mono_ms() + LEFTOVER_SWEEP_MS;
	pthread_mutex_lock(&s->conns_mu);
	while (!s->watchdog_stop) {
		int64_t now = moat_mono_ms();
		if (now >= next_sweep) {
			pthread_mutex_unlock(&s->conns_mu);
			sweep_leftovers(s, &warned);
			pthread_mutex_lock(&s->conns_mu);
			next_sweep = moat_mono_ms() + LEFTOVER_SWEEP_MS;
			continue;
		}
		for (struct conn *k = s->conns; k; k = k->next)
			if (k->deadline && now > k->deadline) {
				/* reset, not closed: what the socket still holds for
				 * a slow reader is dropped with it */
				struct linger lg = { .l_onoff = 1, .l_linger = 0 };
				setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
				shutdown(k->fd, SHUT_RDWR);
				k->deadline = 0;
			}
		moat_cond_wait_ms(&s->conns_cv, &s->conns_mu, 500);
	}
	pthread_mutex_unlock(&s->conns_mu);
	return NULL;
}

/* The first call: headers only. Anything that can be refused without the
 * body is refused here, before a byte of it is read. */
static enum MHD_Result on_headers(struct req *q, struct MHD_Connection *c, const char *url,
				  const char *method)
{
	struct server *s = q->s;
	q->route = route_of(url);
	/* an id is taken with its decoded length: one with a NUL in it is
	 * refused here, as the envelope and X-Sandbox-Id refuse it */
	if (target_had_nul(c))
		return fail(q, c, 400, "SandboxConfigError", O_BAD_REQUEST,
			    "the request's path or query holds an encoded NUL (%00)");
	bool get_route = q->route == R_HEALTHZ || q->route == R_METRICS;
	bool ses_route = q->route == R_SESSIONS || q->route == R_SESSION ||
			 q->route == R_SESSION_RUN;
	if (q->route == R_OTHER || (ses_route && !s->sessions))
		return fail(q, c, 404, "NotFound", O_BAD_REQUEST, "no such route");
	if (q->route == R_SESSION) {
		if (strcmp(method, "GET") && strcmp(method, "DELETE"))
			return fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
				    "this route takes GET or DELETE");
		if (!token_ok(s, c))
			return fail(q, c, 401, "AuthenticationError", O_UNAUTHORIZED,
				    "a valid bearer token is required (Authorization: Bearer ...)");
		caller_cred(s, c, q->cred);
		snprintf(q->ses_id, sizeof q->ses_id, "%.36s", url + 13);
		if (strlen(url + 13) != SERVE_SESSION_ID_LEN)
			q->ses_id[0] = '\0'; /* no such id */
		return session_route(q, c, !strcmp(method, "DELETE"));
	}
	const char *want = get_route ? "GET" : q->route == R_KV ? "DELETE" : "POST";
	if (strcmp(method, want) && !(get_route && !strcmp(method, "HEAD")))
		return fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
			    get_route		  ? "this route takes GET"
			    : q->route == R_KV ? "this route takes DELETE"
					       : "this route takes POST");
	if (q->route == R_HEALTHZ)
		return respond(q, c, 200, strdup(s->healthz), "application/json", NULL, NULL);
	if (!token_ok(s, c))
		return fail(q, c, 401, "AuthenticationError", O_UNAUTHORIZED,
			    "a valid bearer token is required (Authorization: Bearer ...)");
	if (q->route == R_SESSION_RUN) {
		caller_cred(s, c, q->cred);
		size_t n = strlen(url + 13) - 4;
		if (n == SERVE_SESSION_ID_LEN)
			memcpy(q->ses_id, url + 13, n);
		if (!serve_session_id_valid(q->ses_id))
			return session_missing(q, c); /* before its body is read */
	} else if (q->route == R_SESSIONS) {
		caller_cred(s, c, q->cred);
	}
	if (q->route == R_METRICS)
		return respond(q, c, 200, metrics_text(s), "text/plain; version=0.0.4", NULL, NULL);
	struct moat_error err = { 0 };
	if (read_id_header(q, c, &err) < 0) {
		enum MHD_Result r = fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	if (q->route == R_KV)
		return kv_delete(q, c, url + 7);
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (errno || *end || end == cl || n > SERVE_MAX_BODY)
			return fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				    "the request body is larger than 6 MiB");
	}
	q->is_post = true;
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	struct req *q = *con_cls;
	if (!q) {
		if (!(q = calloc(1, sizeof *q)))
			return MHD_NO;
		q->s = s;
		q->refs = 1;
		pthread_mutex_lock(&s->mu);
		s->active++;
		pthread_mutex_unlock(&s->mu);
		q->lang = -1;
		q->conn_fd = -1;
		q->st.resume_fd = -1;
		q->t0 = moat_mono_ms();
		q->outcome = O_OK;
		pthread_mutex_init(&q->mu, NULL);
		pthread_cond_init(&q->cv, NULL);
		snprintf(q->method, sizeof q->method, "%s", method);
		describe_remote(q, c);
		*con_cls = q;
		q->done_headers = true;
		return on_headers(q, c, url, method);
	}
	if (!q->is_post)
		return MHD_YES;
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		if (!q->too_large && q->body.len + n > SERVE_MAX_BODY)
			q->too_large = true; /* the rest is read and dropped, never kept */
		if (!q->too_large && !q->over_budget) {
			pthread_mutex_lock(&s->mu);
			if (s->body_bytes + n > BODY_BUDGET) {
				q->over_budget = true;
			} else {
				s->body_bytes += n;
				q->budget += n;
			}
			pthread_mutex_unlock(&s->mu);
		}
		if (!q->too_large && !q->over_budget)
			moat_buf_append(&q->body, upload_data, n);
		*upload_data_size = 0;
		return MHD_YES;
	}
	q->is_post = false; /* answered once */
	conn_deadline(s, c, false); /* the request is in: the run's timeout takes over */
	if (q->too_large)
		return fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
			    "the request body is larger than 6 MiB");
	if (q->over_budget || q->body.oom)
		return fail(q, c, 503, "ServerBusy", O_REJECTED,
			    "too many request bodies are being received at once; retry later");
	if (q->route == R_SESSIONS)
		return sessions_create_route(q, c);
	if (q->route == R_SESSION_RUN)
		return session_run_route(q, c);
	return q->route == R_V1_RUN ? v1_route(q, c) : spin_route(q, c);
}

/* The --metrics-listen listener: GET (or HEAD) /metrics without the token,
 * 404 for every other path. Scrapes are neither logged nor counted. */
static enum MHD_Result on_metrics_listener(void *cls, struct MHD_Connection *c,
					   const char *url, const char *method,
					   const char *version, const char *upload_data,
					   size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	(void)version;
	(void)upload_data;
	if (*con_cls) { /* a body after the answer: dropped */
		*upload_data_size = 0;
		return MHD_YES;
	}
	*con_cls = s;
	if (strcmp(url, "/metrics"))
		return queue_body(c, 404, error_json("NotFound", "this listener serves /metrics "
							      "only"),
				  "application/json", NULL, NULL);
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return queue_body(c, 405, error_json("MethodNotAllowed", "this route takes GET"),
				  "application/json", "Allow", "GET");
	return queue_body(c, 200, metrics_text(s), "text/plain; version=0.0.4", NULL, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;
	conn_deadline(cls, c, true); /* the next request on this connection */
	if (!q)
		return;
	*con_cls = NULL;
	struct server *s = q->s;
	/* a run answered in this thread: its sandbox ends after the answer
	 * (and after the access line, which times the answer), before its
	 * slot is freed */
	struct pool_lease lease = q->lease;
	bool ending = q->has_lease, slot = q->has_slot;
	int rc = q->lease_rc;
	q->has_lease = q->has_slot = false;
	pthread_mutex_lock(&q->mu);
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->outcome == O_OK)
		q->outcome = O_DISCONNECTED;
	pthread_mutex_unlock(&q->mu);
	req_unref(q);
	if (ending)
		serve_pool_end(s->pool, &lease, rc);
	if (slot)
		release_slot(s);
}

__attribute__((format(printf, 2, 0)))
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct server *s = cls;
	serve_log_vnotice(&s->log, "warn", "http", fmt, ap);
}

/* ---- start and stop ---- */

static void notice(struct server *s, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void notice(struct server *s, const char *level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	serve_log_vnotice(&s->log, level, "serve", fmt, ap);
	va_end(ap);
}

/* Waits until no run holds a slot and every request has been answered, or
 * deadline (CLOCK_MONOTONIC ms). */
static bool wait_idle(struct server *s, int64_t deadline)
{
	pthread_mutex_lock(&s->mu);
	while (s->running > 0 || s->active > 0) {
		int64_t left = deadline - moat_mono_ms();
		if (left <= 0)
			break;
		moat_cond_wait_ms(&s->cv, &s->mu, left);
	}
	bool idle = s->running == 0 && s->active == 0;
	pthread_mutex_unlock(&s->mu);
	return idle;
}

int moat_serve_auth_check(int listen_fd, bool token, bool no_auth, bool *is_unix,
			  const char **why)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	memset(&ss, 0, sizeof ss);
	if (getsockname(listen_fd, (struct sockaddr *)&ss, &sl) < 0) {
		*why = "the listener is not a socket";
		return -1;
	}
	if (is_unix)
		*is_unix = ss.ss_family == AF_UNIX;
	if (token && no_auth) {
		*why = "--no-auth and --token-file exclude each other";
		return -1;
	}
	if (ss.ss_family == AF_UNIX || token)
		return 0;
	bool loopback;
	if (ss.ss_family == AF_INET)
		loopback = ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24 == 127;
	else if (ss.ss_family == AF_INET6)
		loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
	else {
		*why = "the listener is neither TCP nor a unix socket";
		return -1;
	}
	if (!loopback) {
		*why = no_auth ? "--no-auth is for a loopback address or a unix socket only: anyone "
				 "who reaches this one could run code on this machine; give "
				 "--token-file FILE"
			       : "not a loopback address: anyone who reaches it could run code on "
				 "this machine; give --token-file FILE";
		return -1;
	}
	if (!no_auth) {
		*why = "a TCP listener needs a token, on loopback too (any local user could run "
		       "code and read every sandboxId's store): give --token-file FILE, or "
		       "--no-auth to serve without one";
		return -1;
	}
	return 0;
}

static void close_listeners(const struct moat_serve_options *o)
{
	close(o->listen_fd);
	if (o->metrics_desc)
		close(o->metrics_fd);
}

int moat_serve_run(const struct moat_serve_options *o, const sigset_t *stop,
		   struct moat_error *err)
{
	const char *why;
	bool is_unix = false;
	if (moat_serve_auth_check(o->listen_fd, o->token != NULL, o->no_auth, &is_unix,
				  &why) < 0) {
		close_listeners(o);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "moat serve: %s: %s",
				      o->listen_desc, why);
	}
	if (moat_mhd_load(&why) < 0) {
		close_listeners(o);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "moat serve: %s", why);
	}
	struct server *s = calloc(1, sizeof *s);
	if (!s) {
		close_listeners(o);
		return moat_error_oom(err);
	}
	s->o = o;
	serve_limits_default(&s->limits);
	serve_metrics_init(&s->metrics);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->conns_mu, NULL);
	pthread_cond_init(&s->conns_cv, NULL);
	s->cancel_fd = -1;
	s->cpus = usable_cpus();
	int rc = -1;
	bool sessions_stopped = false;
	if (serve_log_init(&s->log, o->log, o->json_log, err) < 0) {
		close(o->listen_fd);
		goto out;
	}
	if (serve_limits_parse(o->cfg->serve_json, &s->limits, err) < 0) {
		close_listeners(o);
		goto out;
	}
	if (o->token) {
		s->auth = true;
		moat_sha256(o->token, strlen(o->token), s->token_hash);
	}
	/* /healthz stays {"status":"ok"} (clients compare it whole) unless
	 * authentication is off on purpose: then it says so */
	s->healthz = o->no_auth ? "{\"status\":\"ok\",\"auth\":\"off\",\"warning\":\"authentication "
				  "is off (--no-auth): whoever can connect can run code and "
				  "read every sandboxId's store\"}\n"
				: "{\"status\":\"ok\"}\n";
	if ((s->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "eventfd: %s", strerror(errno));
		close_listeners(o);
		goto out;
	}
	if ((errno = pthread_create(&s->watchdog, NULL, watchdog, s)) != 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "moat serve: cannot start the request-deadline thread: %s",
			       strerror(errno));
		close_listeners(o);
		goto out;
	}
	s->have_watchdog = true;
	/* the pool's thread also releases finished sandboxes after their
	 * answer: it runs with --pool 0 too */
	unsigned want = pool_size(o->pool, s->limits.pool);
	if (o->pool_zygote_max_children)
		s->limits.pool_zygote_max_children = o->pool_zygote_max_children;
	if (o->pool_zygote_max_age_s)
		s->limits.pool_zygote_max_age_ms = o->pool_zygote_max_age_s * 1000ull;
	if (o->max_relays)
		s->limits.max_relays = o->max_relays;
	if (o->max_dns)
		s->limits.max_dns = o->max_dns;
	if (!(s->relay_caps = moat_relay_caps_new(s->limits.max_relays, s->limits.max_dns))) {
		moat_error_oom(err);
		close_listeners(o);
		goto out;
	}
	{
		struct moat_run_options po;
		moat_run_options_init(&po);
		po.rootfs_dir = o->rootfs_dir ? o->rootfs_dir : o->cfg->rootfs_dir;
		po.policy_path = o->cfg->policy_path;
		po.runtime_dir = o->runtime_dir;
		po.strict_isolation = o->cfg->strict_isolation;
		/* the zygote: asked for (--pool-zygote, serve.poolZygote), else
		 * on where it can run; a zygote asked for that cannot run is a
		 * warning of the pool's, one not asked for is not tried */
		int zyg = o->pool_zygote >= 0 ? o->pool_zygote : s->limits.pool_zygote;
		const char *no_zyg = pool_zygote_refusal(&po);
		if (want && zyg < 0 && no_zyg)
			notice(s, "info", "Python requests use warm interpreters, not the zygote: it "
			       "needs the host's root and the default seccomp policy (%s)", no_zyg);
		if (zyg < 0)
			zyg = !no_zyg;
		if (serve_pool_start(&s->pool, want, want && zyg > 0, &po, &s->limits, &s->log,
				     slots_full, s, err) < 0) {
			close_listeners(o);
			goto out;
		}
	}
	{
		int max = o->max_sessions >= 0 ? o->max_sessions : s->limits.sessions_max;
		if (max < 0)
			max = (int)sessions_auto(s->limits.def_memory_mb);
		service_options(s, &s->ses_opts);
		struct serve_sessions_config sc = { .max = (unsigned)max, .opts = &s->ses_opts };
		if (serve_sessions_start(&s->sessions, &sc, err) < 0) {
			close_listeners(o);
			goto out;
		}
	}
	s->d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			MHD_USE_ITC | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_UNESCAPE_CALLBACK, unescape_target, s,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->listen_fd,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->client_timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTION_LIMIT,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)PER_IP_LIMIT,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEMORY,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
		MHD_OPTION_END);
	if (!s->d) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "moat serve: cannot start the HTTP server on %s", o->listen_desc);
		close_listeners(o);
		goto out;
	}
	if (o->metrics_desc) {
		/* one polling thread: a scrape is one short answer */
		s->metrics_d = MHD_start_daemon(
			MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
				MHD_USE_ERROR_LOG,
			0, NULL, NULL, on_metrics_listener, s,
			MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
			MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->metrics_fd,
			MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->client_timeout_s,
			MHD_OPTION_CONNECTION_LIMIT, (unsigned int)METRICS_CONNECTION_LIMIT,
			MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)PER_IP_LIMIT,
			MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEMORY,
			MHD_OPTION_END);
		if (!s->metrics_d) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				       "moat serve: cannot start the metrics listener on %s",
				       o->metrics_desc);
			close(o->metrics_fd);
			MHD_stop_daemon(s->d);
			goto out;
		}
	}
	notice(s, "info", "listening on %s (max %u runs at once, queue %u%s)", o->listen_desc,
	       o->max_concurrent, o->queue,
	       o->token ? ", bearer token required" : is_unix ? ", the socket's mode guards it" : "");
	if (o->no_auth)
		notice(s, "warn", "authentication is off (--no-auth): whoever can connect to %s can "
		       "run code and read every sandboxId's store", o->listen_desc);
	if (s->metrics_d)
		notice(s, "info", "/metrics without a token on %s", o->metrics_desc);

	int sig = 0;
	while (sigwait(stop, &sig) != 0)
		;
	notice(s, "info", "%s: stopping (in-flight runs get %u s)", sigabbrev_np(sig) ? sigabbrev_np(sig)
									   : "signal", o->grace_s);
	pthread_mutex_lock(&s->mu);
	s->stopping = true; /* queued requests get 503 */
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	MHD_socket l = MHD_quiesce_daemon(s->d);
	if (l != MHD_INVALID_SOCKET)
		close(l);
	if (o->unlink_path)
		unlink(o->unlink_path);
	if (!wait_idle(s, moat_mono_ms() + (int64_t)o->grace_s * 1000)) {
		notice(s, "warn", "grace period over: killing the runs still in flight");
		uint64_t one = 1;
		if (write(s->cancel_fd, &one, sizeof one) < 0)
			notice(s, "error", "cannot cancel the runs: %s", strerror(errno));
		/* a killed run ends in milliseconds (its cgroup or pid namespace
		 * goes at once); the bound keeps the whole stop within --grace +
		 * 5 s, inside a pod's terminationGracePeriodSeconds */
		if (!wait_idle(s, moat_mono_ms() + 5000))
			notice(s, "error", "runs still in flight 5 s after they were killed");
	}
	/* every session ends before the service (a step still running is
	 * cancelled); no new one is made from here on */
	serve_sessions_stop(s->sessions);
	sessions_stopped = true;
	MHD_stop_daemon(s->d);
	if (s->metrics_d)
		MHD_stop_daemon(s->metrics_d); /* closes its listener */
	notice(s, "info", "stopped");
	rc = 0;
out:
	if (s->have_watchdog) {
		pthread_mutex_lock(&s->conns_mu);
		s->watchdog_stop = true;
		pthread_cond_broadcast(&s->conns_cv);
		pthread_mutex_unlock(&s->conns_mu);
		pthread_join(s->watchdog, NULL);
	}
	if (!sessions_stopped)
		serve_sessions_stop(s->sessions);
	pool_stop(s->pool); /* after every run: the pool's thread owns their pid 1 */
	if (s->cancel_fd >= 0)
		close(s->cancel_fd);
	serve_log_destroy(&s->log);
	moat_relay_caps_release(s->relay_caps); /* a relay still ending holds its own */
	free(s);
	return rc;
}
