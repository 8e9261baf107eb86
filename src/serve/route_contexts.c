/* `moat serve`'s code context routes (docs/CONTEXTS.md):
 * /v1/sandboxes/{id}/contexts and everything under it. route_sandboxes.c
 * finds the sandbox (the caller's, live, held busy) and hands the rest of
 * the URL here; the contexts are contexts.c's. A step's answer is JSON, or
 * with ?stream=1 / Accept: application/x-ndjson an NDJSON stream of its
 * events in the order they happened, then its answer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "core/ndjson.h"
#include "live/live.h"
#include "serve/contexts.h"
#include "serve/http.h"


#define STREAM_WAIT_MS 500
#define STREAM_CHUNK (64u * 1024u)

enum ctx_op { CX_NONE, CX_LIST, CX_CREATE, CX_GET, CX_DELETE, CX_RESTART, CX_INTERRUPT,
	      CX_EXECUTE };

/* "/contexts[/{cid}[/op]]" (rest) for method: 0 (q->ctx_op, q->ctx_id),
 * -1 no such route, -2 not that method. */
static int parse(struct req *q, const char *rest, const char *method)
{
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"),
	     del = !strcmp(method, "DELETE");
	const char *p = rest + strlen("/contexts");
	enum ctx_op op = CX_NONE;
	q->ctx_id[0] = '\0';
	if (!*p) {
		op = get ? CX_LIST : post ? CX_CREATE : CX_NONE;
	} else {
		if (*p++ != '/')
			return -1;
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n != SERVE_CTX_ID_LEN)
			return -1;
		memcpy(q->ctx_id, p, n);
		q->ctx_id[n] = '\0';
		const char *sub = slash ? slash : "";
		if (!*sub)
			op = get ? CX_GET : del ? CX_DELETE : CX_NONE;
		else if (!strcmp(sub, "/restart"))
			op = post ? CX_RESTART : CX_NONE;
		else if (!strcmp(sub, "/interrupt"))
			op = post ? CX_INTERRUPT : CX_NONE;
		else if (!strcmp(sub, "/execute"))
			op = post ? CX_EXECUTE : CX_NONE;
		else
			return -1;
	}
	q->ctx_op = (int)op;
	return op ? 0 : -2;
}

/* o's keys are all of keys (NULL-ended) */
static bool keys_known(const cJSON *o, const char *const *keys)
{
	for (const cJSON *it = o->child; it; it = it->next) {
		const char *const *k = keys;
		while (*k && (!it->string || strcmp(it->string, *k)))
			k++;
		if (!*k)
			return false;
	}
	return true;
}

static enum MHD_Result answer(struct req *q, struct MHD_Connection *c, unsigned status,
			      struct moat_buf *b)
{
	moat_buf_append(b, "\n", 1);
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, status, body, "application/json", NULL, NULL) : MHD_NO;
}

/* A context operation's error as an HTTP answer. */
static enum MHD_Result fail(struct req *q, struct MHD_Connection *c, const struct moat_error *err)
{
	const char *m = err->message ? err->message : "failed";
	switch (err->sys_errno) {
	case ENOENT:
		return srv_fail(q, c, 404, "ContextNotFound", O_BAD_REQUEST,
				"no such context (it never existed or was deleted)");
	case EINVAL:
		return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST, m);
	case EAGAIN:
		return srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST, m);
	case EBUSY:
		return srv_fail(q, c, 409, "ContextBusy", O_BAD_REQUEST, m);
	case ENOTCONN: {
		char *why = serve_sbx_gone(q->s->sandboxes, q->sbx);
		if (why) {
			enum MHD_Result r = srv_fail(q, c, 410, "SandboxGone", O_ERROR, why);
			free(why);
			return r;
		}
		return srv_fail(q, c, 409, "ContextNotLive", O_BAD_REQUEST, m);
	}
	default:
		return srv_fail(q, c, 503, "SandboxUnavailableError", O_ERROR, m);
	}
}

enum MHD_Result srv_contexts_route(struct req *q, struct MHD_Connection *c, const char *rest,
				   const char *method)
{
	int pr = parse(q, rest, method);
	if (pr == -1)
		return srv_fail(q, c, 404, "NotFound", O_BAD_REQUEST, "no such route");
	if (pr == -2)
		return srv_fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
				"this route does not take that method (docs/CONTEXTS.md)");
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct moat_buf b = { 0 };
	switch ((enum ctx_op)q->ctx_op) {
	case CX_LIST:
		serve_ctx_list(cs, &b);
		return answer(q, c, 200, &b);
	case CX_GET:
		if (serve_ctx_get(cs, q->ctx_id, &b, &err) < 0)
			return fail(q, c, &err);
		return answer(q, c, 200, &b);
	case CX_DELETE:
		if (serve_ctx_delete(cs, lv, q->ctx_id, &err) < 0)
			return fail(q, c, &err);
		moat_buf_appendf(&b, "{\"id\":\"%s\",\"deleted\":true}", q->ctx_id);
		return answer(q, c, 200, &b);
	default:
		break;
	}
	/* the rest have a (small) body: read it, 6 MiB at most */
	if (srv_length_over(c, SERVE_MAX_BODY))
		return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				"the request body is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

/* ---- a streamed step ---- */

struct cstream {
	struct server *s;
	struct serve_sbx *x;
	struct serve_ctx_step *st;
	int client;
	struct moat_buf pending;
	size_t off;
	bool done;
	struct moat_ndjson nj;
};

static ssize_t cstream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct cstream *p = cls;
	(void)pos;
	for (;;) {
		if (p->off < p->pending.len)
			return srv_pending_take(&p->pending, &p->off, buf, max);
		if (p->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (p->pending.oom)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		const char *d;
		size_t n;
		enum serve_ctx_ev ev = serve_ctx_step_next(p->st, STREAM_WAIT_MS, &d, &n);
		switch (ev) {
		case SERVE_CTX_EV_STDOUT:
		case SERVE_CTX_EV_STDERR:
			moat_ndjson_output(&p->nj, &p->pending,
					   ev == SERVE_CTX_EV_STDOUT ? MOAT_STDOUT : MOAT_STDERR, d, n);
			break;
		case SERVE_CTX_EV_RESULT:
		case SERVE_CTX_EV_ERROR:
			moat_ndjson_flush(&p->nj, &p->pending);
			moat_buf_appendf(&p->pending, "{\"type\":\"%s\",\"%s\":",
					 ev == SERVE_CTX_EV_RESULT ? "result" : "error",
					 ev == SERVE_CTX_EV_RESULT ? "result" : "error");
			moat_buf_append(&p->pending, d, n);
			moat_buf_append(&p->pending, "}\n", 2);
			break;
		case SERVE_CTX_EV_DONE:
			moat_ndjson_flush(&p->nj, &p->pending);
			moat_buf_appendf(&p->pending, "{\"type\":\"done\",\"answer\":");
			serve_ctx_step_answer(p->st, &p->pending);
			moat_buf_append(&p->pending, "}\n", 2);
			serve_ctx_step_release(p->st);
			p->done = true;
			break;
		case SERVE_CTX_EV_NONE:
			/* a hang-up: the step was interrupted by step_next (or runs
			 * on, serve.sessions.onHangup "finish"): the rest is nobody's */
			if (live_client_gone(p->client))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
	}
}

static void cstream_free(void *cls)
{
	struct cstream *p = cls;
	serve_ctx_step_end(p->st);
	if (p->client >= 0)
		close(p->client);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

static bool wants_stream(struct MHD_Connection *c)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream");
	if (v && (!strcmp(v, "1") || !strcmp(v, "true")))
		return true;
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	return a && strstr(a, "application/x-ndjson");
}

static int client_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci && ci->connect_fd >= 0 ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3) : -1;
}

static enum MHD_Result execute(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	static const char *const keys[] = { "code", "timeout", NULL };
	if (!keys_known(o, keys))
		return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST,
				"an execute takes \"code\" and \"timeout\" only");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(o, "timeout");
	if (!cJSON_IsString(code))
		return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST,
				"\"code\": a string, the code to run");
	uint64_t max_to = q->s->limits.max_timeout_ms;
	if (to && !(cJSON_IsNumber(to) && to->valuedouble >= 1 &&
		    to->valuedouble <= (double)max_to &&
		    to->valuedouble == (double)(uint64_t)to->valuedouble)) {
		char m[160];
		snprintf(m, sizeof m, "\"timeout\": whole milliseconds from 1 to %llu",
			 (unsigned long long)max_to);
		return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST, m);
	}
	uint64_t tmo = to ? (uint64_t)to->valuedouble : 30000;
	if (tmo > max_to)
		tmo = max_to;
	bool stream = wants_stream(c);
	int client = client_fd(c);
	struct serve_ctx_exec ex = {
		.code = code->valuestring,
		.code_len = strlen(code->valuestring),
		.timeout_ms = tmo,
		.max_output = q->s->limits.max_output_bytes < SERVE_CTX_MAX_OUTPUT &&
					      q->s->limits.max_output_bytes
				      ? q->s->limits.max_output_bytes
				      : SERVE_CTX_MAX_OUTPUT,
		.client_fd = client,
		.hangup_finish = q->s->limits.session_hangup_finish,
		.stream = stream,
	};
	struct serve_ctx_step *st;
	if (serve_ctx_step_begin(cs, lv, q->ctx_id, &ex, &st, &err) < 0) {
		if (client >= 0)
			close(client);
		return fail(q, c, &err);
	}
	if (!stream) {
		const char *d;
		size_t n;
		while (serve_ctx_step_next(st, 1000, &d, &n) != SERVE_CTX_EV_DONE)
			;
		struct moat_buf b = { 0 };
		serve_ctx_step_answer(st, &b);
		serve_ctx_step_end(st);
		if (client >= 0)
			close(client);
		return answer(q, c, 200, &b);
	}
	struct cstream *p = calloc(1, sizeof *p);
	struct MHD_Response *r =
		p ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_CHUNK, cstream_read,
						      p, cstream_free)
		  : NULL;
	if (!r) {
		free(p);
		serve_ctx_step_end(st);
		if (client >= 0)
			close(client);
		return MHD_NO;
	}
	p->s = q->s;
	p->x = q->sbx;
	p->st = st;
	p->client = client;
	/* the stream holds the sandbox (and keeps it from idling) */
	q->sbx = NULL;
	q->sbx_busy = false;
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	q->status = 200;
	srv_conn_deadline_in(q->s, c, (int64_t)tmo + SERVE_CTX_GRACE_MS + 10000 +
					      (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

enum MHD_Result srv_contexts_body(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct moat_buf b = { 0 };
	switch ((enum ctx_op)q->ctx_op) {
	case CX_CREATE: {
		static const char *const keys[] = { "language", "cwd", NULL };
		if (!keys_known(o, keys))
			return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST,
					"a context takes \"language\" and \"cwd\" only");
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "language");
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "cwd");
		if ((l && !cJSON_IsString(l)) || (w && !cJSON_IsString(w)))
			return srv_fail(q, c, 400, "ContextConfigError", O_BAD_REQUEST,
					"\"language\" and \"cwd\" are strings");
		if (serve_ctx_create(cs, lv, l ? l->valuestring : NULL, w ? w->valuestring : NULL,
				     mem, &b, &err) < 0) {
			moat_buf_free(&b);
			return fail(q, c, &err);
		}
		return answer(q, c, 201, &b);
	}
	case CX_RESTART:
		if (serve_ctx_restart(cs, lv, q->ctx_id, &b, &err) < 0) {
			moat_buf_free(&b);
			return fail(q, c, &err);
		}
		return answer(q, c, 200, &b);
	case CX_INTERRUPT: {
		int rc = serve_ctx_interrupt(cs, lv, q->ctx_id, &err);
		if (rc < 0)
			return fail(q, c, &err);
		moat_buf_appendf(&b, "{\"id\":\"%s\",\"interrupted\":%s}", q->ctx_id,
				 rc ? "true" : "false");
		return answer(q, c, 200, &b);
	}
	case CX_EXECUTE:
		return execute(q, c, o);
	default:
		return srv_fail(q, c, 500, "InternalError", O_ERROR, "no such operation");
	}
}
