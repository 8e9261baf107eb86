/* `moat serve`'s Spin routes, POST /py/... and /ts/... (docs/SERVE.md): the
 * envelope checked, then a script answered whole (answer.c) or a handler
 * run in a worker whose framed stdout (frame.c) is streamed to the client
 * as it comes (stream.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "core/cleanup.h"
#include "serve/http.h"

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

static void on_body(void *ctx, const char *buf, size_t len)
{
	struct req *q = ctx; /* q->mu held by on_output */
	if (q->st.abandoned)
		return;
	if (q->st.bodyless) {
		q->st.dropped += len;
		return;
	}
	size_t before = srv_pending_compact(q);
	moat_buf_append(&q->st.pending, buf, len);
	srv_pending_added(q, before);
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

static void *handler_worker(void *arg)
{
	struct req *q = arg;
	struct server *s = q->s;
	struct moat_run_options opts;
	srv_stream_options(q, &opts, on_output);
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
	srv_req_unref(q);
	serve_pool_end(s->pool, &lease, rc); /* the answer is out: pid 1 gone, then */
	srv_release_slot(s); /* last: shutdown waits for it */
	return NULL;
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
		srv_release_slot(q->s);
		q->has_slot = false;
		return srv_fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
				"cannot make the response's eventfd");
	}
	if (srv_start_worker(q, handler_worker) < 0) {
		srv_release_slot(q->s);
		q->has_slot = false;
		return srv_fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
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
		struct MHD_Response *r = srv_stream_response(q);
		if (!r)
			return MHD_NO;
		for (size_t i = 0; i < q->st.headers_count; i++)
			MHD_add_response_header(r, q->st.headers[2 * i], q->st.headers[2 * i + 1]);
		return srv_stream_queue(q, c, r, (unsigned)status, q->env.req->timeout_ms);
	}
	/* no head: wait for the run's end, then answer with what is known */
	while (!q->st.finished)
		pthread_cond_wait(&q->cv, &q->mu);
	pthread_mutex_unlock(&q->mu);
	if (q->st.run_failed)
		return srv_fail_moat(q, c, &q->st.err);
	struct moat_result *res = q->st.res;
	srv_fit_result(res, q->env.req);
	char *why = q->st.frame.error ? q->st.frame.error : "the handler wrote no response";
	char *script_err = serve_script_error(res, q->env.req);
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"stdout\":\"\"", 12);
	srv_put_key_str(&b, "stderr", res->stderr_buf ? res->stderr_buf : "", res->stderr_len);
	struct moat_buf msg = { 0 };
	/* a kill (timeout, memory) says more than the missing response */
	if (script_err && !res->exited)
		moat_buf_appendf(&msg, "%s", script_err);
	else
		moat_buf_appendf(&msg, "%s", why);
	srv_put_key_str(&b, "error", msg.data ? msg.data : "handler failed", msg.len);
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
	enum MHD_Result rc = srv_respond(q, c, 500, moat_buf_take(&b), "application/json", NULL, NULL);
	q->outcome = keep;
	return rc;
}

enum MHD_Result srv_spin_route(struct req *q, struct MHD_Connection *c)
{
	enum moat_language lang = q->route == R_PY ? MOAT_LANG_PYTHON : MOAT_LANG_TYPESCRIPT;
	q->lang = (int)lang;
	bool too_large;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	if (serve_envelope_parse(q->body.data ? q->body.data : "", q->body.len, lang,
				 q->header_id, &q->env, &too_large, &err) < 0)
		return too_large ? srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
					    err.message)
				 : srv_fail_moat(q, c, &err);
	q->mode = q->env.mode == SERVE_HANDLER ? "handler" : "script";
	if (q->env.kv_enabled && q->s->o->kv_off)
		return srv_fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
				"kvEnabled: this server runs without the key-value store (--no-kv)");
	if (q->env.mode == SERVE_HANDLER && !q->s->o->runtime_dir)
		return srv_fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE,
				"handlers need the runtime shims (moat serve --runtime DIR)");
	/* the envelope's own fields are checked; the service's limits fill
	 * the rest, then the request pipeline validates it once (a refused
	 * allowedHosts entry is the envelope's input error: 400) */
	struct moat_request_defaults d = { .fill = srv_limits_fill, .ctx = &q->s->limits,
					   .entry_refusal_is_config = true };
	if (moat_request_finish(q->env.req, 0, &d, &err) < 0)
		return srv_fail_moat(q, c, &err);
	/* a handler's stdout is streamed (bounded by maxResponseBytes and the
	 * stream window); the cap, a script's, is its stderr's */
	enum MHD_Result r = srv_take_slot(q, c);
	if (!q->has_slot)
		return r;
	if (q->env.mode == SERVE_HANDLER)
		return run_handler(q, c);
	return srv_run_script(q, c, q->env.req, false);
}
