/* `moat serve`'s POST /v1/run: answered whole (answer.c), or as NDJSON
 * lines while it runs (Accept: application/x-ndjson, docs/SERVE.md
 * "Streaming"), a session's streamed step too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "core/cleanup.h"
#include "serve/http.h"

/* The client asked for the streamed answer. */
bool srv_wants_ndjson(struct MHD_Connection *c)
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
		size_t before = srv_pending_compact(q);
		moat_ndjson_output(&q->st.nj, &q->st.pending, stream, buf, len);
		srv_pending_added(q, before);
	}
	pthread_mutex_unlock(&q->mu);
}

static void *ndjson_worker(void *arg)
{
	struct req *q = arg;
	struct server *s = q->s;
	struct moat_run_options opts;
	srv_stream_options(q, &opts, ndjson_output);
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
		line = r ? srv_session_answer(q, r, extra) : NULL;
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
		size_t before = srv_pending_compact(q);
		moat_ndjson_flush(&q->st.nj, &q->st.pending);
		moat_buf_append(&q->st.pending, line, strlen(line));
		srv_pending_added(q, before);
	}
	free(line);
	moat_result_free(res);
	q->st.finished = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	srv_req_unref(q);
	if (ran) /* the answer is out: pid 1 gone, then */
		serve_pool_end(s->pool, &lease, rc);
	srv_release_slot(s); /* last: shutdown waits for it */
	return NULL;
}

/* A /v1/run answered as NDJSON lines while it runs; req is taken. The head
 * goes with the first line: a run that fails before any is an ordinary
 * error answer. */
enum MHD_Result srv_run_ndjson(struct req *q, struct MHD_Connection *c,
			       struct moat_request *req)
{
	q->st.ndjson = true;
	q->st.req = req;
	const char *why = NULL;
	if (!srv_reserve_result(q, req))
		why = "the results in flight fill this server's memory budget; retry later";
	else if ((q->st.resume_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		why = "cannot make the response's eventfd";
	if (!why && srv_start_worker(q, ndjson_worker) < 0)
		why = "cannot start a worker thread";
	if (why) {
		srv_release_slot(q->s);
		q->has_slot = false;
		return srv_fail(q, c, 503, q->result_budget ? "SandboxUnavailableError" : "ServerBusy",
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
			enum MHD_Result r = srv_fail(q, c, 410, "SessionGone", O_ERROR, gone);
			free(gone);
			return r;
		}
	}
	if (failed) /* nothing was streamed: the ordinary error answer */
		return q->st.err.message ? srv_fail_moat(q, c, &q->st.err) : MHD_NO;
	struct MHD_Response *r = srv_stream_response(q);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return srv_stream_queue(q, c, r, 200, req->timeout_ms);
}

/* /v1/run's: the same, and the request's language for the log and the
 * metrics, an error after parsing included (an argv request has none). */
static int v1_fill(void *ctx, struct moat_request *req, unsigned given, struct moat_error *err)
{
	struct req *q = ctx;
	q->lang = req->argc ? -1 : (int)req->language;
	return serve_limits_apply(&q->s->limits, req, given, err);
}

enum MHD_Result srv_v1_route(struct req *q, struct MHD_Connection *c)
{
	MOAT_AUTO(moat_request) struct moat_request *req = NULL;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	const char *body = q->body.data ? q->body.data : "";
	/* the request pipeline, with the X-Sandbox-Id header, if any, as the
	 * request's "sandboxId" and the service's limits as its defaults */
	struct moat_request_defaults d = { .fill = v1_fill, .ctx = q };
	if (moat_request_prepare(body, q->body.len, q->header_id, &d, &req, &err) < 0)
		return srv_fail_moat(q, c, &err);
	/* an argv request has no language: the log and the metrics say none */
	q->lang = req->argc ? -1 : (int)req->language;
	q->mode = req->argc ? "command" : "script";
	enum MHD_Result r = srv_take_slot(q, c);
	if (r == MHD_YES && q->has_slot && srv_wants_ndjson(c))
		return srv_run_ndjson(q, c, MOAT_TAKE(req));
	if (r == MHD_YES && q->has_slot)
		r = srv_run_script(q, c, req, true);
	return r;
}
