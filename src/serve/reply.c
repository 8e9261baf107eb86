/* `moat serve`: a request's life (its references, its access line and
 * metrics when the last one goes) and its answers: a body queued whole,
 * the JSON error of every refusal. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/e2b.h"
#include "serve/http.h"

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
ssize_t srv_pending_take(struct moat_buf *pending, size_t *off, char *buf, size_t max)
{
	size_t n = pending->len - *off < max ? pending->len - *off : max;
	memcpy(buf, pending->data + *off, n);
	*off += n;
	if (*off == pending->len)
		pending->len = *off = 0;
	return (ssize_t)n;
}

void srv_stream_drop(struct req *q)
{
	size_t held = q->st.pending.len - q->st.pending_off;
	__atomic_sub_fetch(&q->s->stream_bytes, held, __ATOMIC_RELAXED);
	moat_buf_free(&q->st.pending);
	q->st.pending_off = 0;
}

void srv_req_unref(struct req *q)
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
	srv_stream_drop(q);
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
	if (q->sbx_busy)
		serve_sbx_end(q->s->sandboxes, q->sbx);
	serve_sbx_put(q->s->sandboxes, q->sbx);
	if (q->up_fd >= 0)
		close(q->up_fd);
	free(q->sbx_path);
	srv_e2b_req_free(q->e2b);
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

/* Queues body (taken; NULL: out of memory, an empty body): MHD's answer. */
enum MHD_Result srv_queue_body(struct MHD_Connection *c, unsigned status, char *body,
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

enum MHD_Result srv_respond(struct req *q, struct MHD_Connection *c, unsigned status,
			    char *body, const char *ctype, const char *h1, const char *v1)
{
	q->status = status;
	q->bytes_out = body ? strlen(body) : 0;
	/* the whole answer must be out within --client-timeout: MHD's idle
	 * timeout alone lets a client that reads a byte now and then hold it */
	srv_conn_deadline_in(q->s, c, (int64_t)q->s->o->client_timeout_s * 1000);
	return srv_queue_body(c, status, body, ctype, h1, v1);
}

/* The request's Content-Length, when it has one, is not a number or says
 * more than max bytes. */
bool srv_length_over(struct MHD_Connection *c, uint64_t max)
{
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	if (!cl)
		return false;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(cl, &end, 10);
	return errno || *end || end == cl || n > max;
}

char *srv_error_json(const char *type, const char *msg)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"error\":{\"type\":", 17);
	moat_buf_append_json_string(&b, type, strlen(type));
	moat_buf_append(&b, ",\"message\":", 11);
	moat_buf_append_json_string(&b, msg, strlen(msg));
	moat_buf_append(&b, ",\"provider\":\"native\"}}\n", 23);
	return moat_buf_take(&b);
}

enum MHD_Result srv_fail(struct req *q, struct MHD_Connection *c, unsigned status,
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
	return srv_respond(q, c, status, srv_error_json(type, msg), "application/json", h, v);
}

bool srv_misdirected(struct req *q, struct MHD_Connection *c, const char *id,
		     const char *prefix, enum MHD_Result *r)
{
	char node[SERVE_NODE_MAX + 1];
	if (!serve_id_elsewhere(id, prefix, node))
		return false;
	char msg[256];
	snprintf(msg, sizeof msg, "this id names node \"%s\" and this is node \"%s\": its "
		 "requests go to its node (docs/scaling.md)", node, serve_node());
	*r = srv_fail(q, c, 421, "WrongNode", O_BAD_REQUEST, msg);
	return true;
}

/* A moat error: 400 config, 403 policy, 503 unavailable. */
enum MHD_Result srv_fail_moat(struct req *q, struct MHD_Connection *c,
			      const struct moat_error *err)
{
	const char *msg = err->message ? err->message : "error";
	const char *type = moat_error_type_name(err->type);
	switch (err->type) {
	case MOAT_ERR_POLICY:
		return srv_fail(q, c, 403, type, O_BAD_REQUEST, msg);
	case MOAT_ERR_UNAVAILABLE:
		return srv_fail(q, c, 503, type, O_UNAVAILABLE, msg);
	default:
		return srv_fail(q, c, 400, "SandboxConfigError", O_BAD_REQUEST, msg);
	}
}
