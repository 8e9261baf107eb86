/* E2B's code interpreter (docs/E2B.md, "Code interpreter") under the
 * sandbox URL (/e2b/envd) with E2b-Sandbox-Port 49999, on moat's code
 * contexts (contexts.c, docs/CONTEXTS.md): POST /execute streams a step of
 * a context as E2B's JSON lines (stdout, stderr, result with its MIME
 * fields under E2B's names, error, number_of_executions,
 * end_of_execution); GET/POST /contexts, DELETE /contexts/{id},
 * POST /contexts/{id}/restart. The sandbox and its access token are
 * envd's (e2b_envd_sandbox; the traffic token header too, the same
 * secret). A language's default context is made on its first use and kept
 * in the sandbox's record (e2b_records.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/contexts.h"
#include "serve/e2b.h"
#include "serve/internal.h"


#define WAIT_MS 500
#define CHUNK (64u * 1024u)

enum ci_op { CI_NONE, CI_EXECUTE, CI_LIST, CI_CREATE, CI_DELETE, CI_RESTART };

static const char *const langs[E2B_CI_LANGS] = { "python", "javascript", "typescript" };

/* E2B's language name (and moat's aliases) → 0..2, or -1 */
static int lang_index(const char *l)
{
	static const struct {
		const char *name;
		int i;
	} names[] = { { "python", 0 }, { "py", 0 },	    { "python3", 0 }, { "javascript", 1 },
		      { "js", 1 },     { "node", 1 },	    { "typescript", 2 }, { "ts", 2 } };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(l, names[i].name))
			return names[i].i;
	return -1;
}

static enum MHD_Result answer(struct req *q, struct MHD_Connection *c, unsigned status,
			      struct moat_buf *b)
{
	moat_buf_append(b, "\n", 1);
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, status, body, "application/json", NULL, NULL) : MHD_NO;
}

/* A context operation's error as E2B's (the SDK: 404 NotFoundError, 502
 * TimeoutError, else SandboxError with the status). */
static enum MHD_Result fail(struct req *q, struct MHD_Connection *c, const struct moat_error *err)
{
	const char *m = err->message ? err->message : "failed";
	switch (err->sys_errno) {
	case ENOENT:
		return e2b_fail(q, c, 404, O_BAD_REQUEST,
				"no such context (it never existed or was deleted)");
	case EINVAL:
		return e2b_fail(q, c, 400, O_BAD_REQUEST, m);
	case EAGAIN:
	case EBUSY:
		return e2b_fail(q, c, 409, O_BAD_REQUEST, m);
	case ENOTCONN: {
		char *why = serve_sbx_gone(q->s->sandboxes, q->sbx);
		if (why) {
			free(why);
			return e2b_fail(q, c, 502, O_ERROR, "the sandbox is not running anymore");
		}
		return e2b_fail(q, c, 409, O_BAD_REQUEST, m);
	}
	default:
		return e2b_fail(q, c, 503, O_ERROR, m);
	}
}

/* moat's context object (json) as E2B's {"id","language","cwd"} */
static void ctx_e2b(const char *json, size_t len, struct moat_buf *out)
{
	MOAT_AUTO(cJSON) cJSON *o = cJSON_ParseWithLength(json, len);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "language");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "cwd");
	moat_buf_append(out, "{\"id\":", 6);
	const char *s = cJSON_IsString(id) ? id->valuestring : "";
	moat_buf_append_json_string(out, s, strlen(s));
	moat_buf_append(out, ",\"language\":", 12);
	s = cJSON_IsString(l) ? l->valuestring : "";
	moat_buf_append_json_string(out, s, strlen(s));
	moat_buf_append(out, ",\"cwd\":", 7);
	s = cJSON_IsString(w) ? w->valuestring : "";
	moat_buf_append_json_string(out, s, strlen(s));
	moat_buf_append(out, "}", 1);
}

enum MHD_Result e2b_ci_route(struct req *q, struct MHD_Connection *c, const char *rest,
			     const char *method)
{
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"),
	     del = !strcmp(method, "DELETE");
	enum ci_op op = CI_NONE;
	q->ctx_id[0] = '\0';
	if (!strcmp(rest, "/execute")) {
		op = post ? CI_EXECUTE : CI_NONE;
	} else if (!strcmp(rest, "/contexts")) {
		op = get ? CI_LIST : post ? CI_CREATE : CI_NONE;
	} else if (!strncmp(rest, "/contexts/", 10)) {
		const char *p = rest + 10, *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n != SERVE_CTX_ID_LEN)
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such context");
		memcpy(q->ctx_id, p, n);
		q->ctx_id[n] = '\0';
		if (!serve_ctx_id_valid(q->ctx_id))
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such context");
		if (!slash)
			op = del ? CI_DELETE : CI_NONE;
		else if (!strcmp(slash, "/restart"))
			op = post ? CI_RESTART : CI_NONE;
		else
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such route");
	} else {
		return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such route");
	}
	if (op == CI_NONE)
		return e2b_fail(q, c, 405, O_BAD_REQUEST, "this route does not take that method");
	q->e2b->op = (int)op;
	int a = e2b_envd_sandbox(q, c);
	if (a < 0)
		return e2b_fail(q, c, a == -1 ? 401 : 502, a == -1 ? O_UNAUTHORIZED : O_ERROR,
				a == -1 ? "unknown sandbox or invalid access token (X-Access-Token)"
					: "the sandbox is not running anymore");
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	if (op == CI_LIST) {
		struct moat_buf b = { 0 }, l = { 0 };
		serve_ctx_list(cs, &l);
		MOAT_AUTO(cJSON) cJSON *o = l.data ? cJSON_ParseWithLength(l.data, l.len) : NULL;
		moat_buf_free(&l);
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "contexts");
		moat_buf_append(&b, "[", 1);
		const cJSON *it;
		bool first = true;
		cJSON_ArrayForEach(it, arr)
		{
			char *s = cJSON_PrintUnformatted(it);
			if (!s)
				continue;
			if (!first)
				moat_buf_append(&b, ",", 1);
			first = false;
			ctx_e2b(s, strlen(s), &b);
			free(s);
		}
		moat_buf_append(&b, "]", 1);
		return answer(q, c, 200, &b);
	}
	if (op == CI_DELETE) {
		if (serve_ctx_delete(cs, lv, q->ctx_id, &err) < 0)
			return fail(q, c, &err);
		for (unsigned i = 0; i < E2B_CI_LANGS; i++)
			e2b_ci_default_forget(q->s->e2b, q->e2b->id, i, q->ctx_id);
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	}
	if (srv_length_over(c, SERVE_MAX_BODY))
		return e2b_fail(q, c, 413, O_BAD_REQUEST, "the request is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

/* ---- a streamed step: E2B's JSON lines ---- */

struct ci_stream {
	struct server *s;
	struct serve_sbx *x;
	struct serve_ctx_step *st;
	int client;
	struct moat_buf pending;
	size_t off;
	bool done, errored;
};

/* A result event {"isMain","data":{mime:value}} as E2B's result line. */
static void result_line(struct moat_buf *b, const char *d, size_t n)
{
	static const struct {
		const char *mime, *name;
	} names[] = { { "text/plain", "text" },	    { "text/html", "html" },
		      { "text/markdown", "markdown" }, { "image/svg+xml", "svg" },
		      { "image/png", "png" },	    { "image/jpeg", "jpeg" },
		      { "application/pdf", "pdf" },    { "text/latex", "latex" },
		      { "application/json", "json" },  { "application/javascript", "javascript" } };
	MOAT_AUTO(cJSON) cJSON *o = cJSON_ParseWithLength(d, n);
	const cJSON *main = cJSON_GetObjectItemCaseSensitive(o, "isMain");
	const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
	moat_buf_append(b, "{\"type\":\"result\"", 16);
	const cJSON *it;
	cJSON_ArrayForEach(it, data)
	{
		if (!it->string)
			continue;
		const char *k = it->string;
		for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
			if (!strcmp(k, names[i].mime))
				k = names[i].name;
		char *v = cJSON_PrintUnformatted(it);
		if (!v) {
			b->oom = true;
			continue;
		}
		moat_buf_append(b, ",", 1);
		moat_buf_append_json_string(b, k, strlen(k));
		moat_buf_append(b, ":", 1);
		moat_buf_append(b, v, strlen(v));
		free(v);
	}
	moat_buf_appendf(b, ",\"is_main_result\":%s}\n", cJSON_IsTrue(main) ? "true" : "false");
}

/* An error event {"name","value","traceback":[lines]} as E2B's error line
 * (its traceback one string). */
static void error_line(struct moat_buf *b, const char *name, const char *value,
		       const cJSON *tb)
{
	moat_buf_append(b, "{\"type\":\"error\",\"name\":", 23);
	moat_buf_append_json_string(b, name, strlen(name));
	moat_buf_append(b, ",\"value\":", 9);
	moat_buf_append_json_string(b, value, strlen(value));
	struct moat_buf t = { 0 };
	const cJSON *it;
	cJSON_ArrayForEach(it, tb)
	{
		if (!cJSON_IsString(it))
			continue;
		if (t.len)
			moat_buf_append(&t, "\n", 1);
		moat_buf_append(&t, it->valuestring, strlen(it->valuestring));
	}
	if (cJSON_IsString(tb))
		moat_buf_append(&t, tb->valuestring, strlen(tb->valuestring));
	moat_buf_append(b, ",\"traceback\":", 13);
	moat_buf_append_json_string(b, t.data ? t.data : "", t.len);
	moat_buf_free(&t);
	moat_buf_append(b, "}\n", 2);
}

static void done_lines(struct ci_stream *p)
{
	struct moat_buf a = { 0 };
	serve_ctx_step_answer(p->st, &a);
	MOAT_AUTO(cJSON) cJSON *o = a.data ? cJSON_ParseWithLength(a.data, a.len) : NULL;
	moat_buf_free(&a);
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "executionCount");
	const cJSON *killed = cJSON_GetObjectItemCaseSensitive(o, "killed");
	const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(o, "context");
	const cJSON *why = cJSON_GetObjectItemCaseSensitive(ctx, "reason");
	if (!p->errored && (cJSON_IsTrue(killed) || !o))
		/* its interpreter ended without an error of its own: say so, never
		 * an execution that looks clean */
		error_line(&p->pending, "ContextKilled",
			   cJSON_IsString(why) ? why->valuestring
					       : "the context's interpreter ended (restart it)",
			   NULL);
	moat_buf_appendf(&p->pending,
			 "{\"type\":\"number_of_executions\",\"execution_count\":%lld}\n"
			 "{\"type\":\"end_of_execution\"}\n",
			 cJSON_IsNumber(n) ? (long long)n->valuedouble : 0LL);
}

static ssize_t ci_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct ci_stream *p = cls;
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
		enum serve_ctx_ev ev = serve_ctx_step_next(p->st, WAIT_MS, &d, &n);
		switch (ev) {
		case SERVE_CTX_EV_STDOUT:
		case SERVE_CTX_EV_STDERR:
			moat_buf_appendf(&p->pending, "{\"type\":\"%s\",\"text\":",
					 ev == SERVE_CTX_EV_STDOUT ? "stdout" : "stderr");
			moat_buf_append_json_string(&p->pending, d, n);
			moat_buf_append(&p->pending, "}\n", 2);
			break;
		case SERVE_CTX_EV_RESULT:
			result_line(&p->pending, d, n);
			break;
		case SERVE_CTX_EV_ERROR: {
			MOAT_AUTO(cJSON) cJSON *e = cJSON_ParseWithLength(d, n);
			const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
			error_line(&p->pending, cJSON_IsString(nm) ? nm->valuestring : "Error",
				   cJSON_IsString(v) ? v->valuestring : "",
				   cJSON_GetObjectItemCaseSensitive(e, "traceback"));
			p->errored = true;
			break;
		}
		case SERVE_CTX_EV_DONE:
			done_lines(p);
			serve_ctx_step_release(p->st);
			p->done = true;
			break;
		case SERVE_CTX_EV_NONE:
			/* a hang-up (the SDK's timeoutMs aborts its request): the
			 * step was interrupted by step_next, its state kept */
			if (live_client_gone(p->client))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
	}
}

static void ci_free(void *cls)
{
	struct ci_stream *p = cls;
	serve_ctx_step_end(p->st);
	if (p->client >= 0)
		close(p->client);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

/* The language's default context (made on its first use) into id. */
static int default_ctx(struct req *q, int lang, char id[E2B_CI_CTX_ID + 1],
		       struct moat_error *err)
{
	if (e2b_ci_default(q->s->e2b, q->e2b->id, (unsigned)lang, NULL, id))
		return 0;
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	struct moat_buf b = { 0 };
	if (serve_ctx_create(cs, lv, langs[lang], NULL, mem, &b, err) < 0) {
		moat_buf_free(&b);
		return -1;
	}
	MOAT_AUTO(cJSON) cJSON *o = b.data ? cJSON_ParseWithLength(b.data, b.len) : NULL;
	moat_buf_free(&b);
	const cJSON *made = cJSON_GetObjectItemCaseSensitive(o, "id");
	if (!cJSON_IsString(made) || !serve_ctx_id_valid(made->valuestring))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, EIO, "the context was made without an id");
	e2b_ci_default(q->s->e2b, q->e2b->id, (unsigned)lang, made->valuestring, id);
	if (strcmp(id, made->valuestring)) /* another request's was kept first */
		serve_ctx_delete(cs, lv, made->valuestring, NULL);
	return 0;
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
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
	const cJSON *cid = cJSON_GetObjectItemCaseSensitive(o, "context_id");
	const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env_vars");
	for (const cJSON *it = o->child; it; it = it->next)
		if (!it->string || (strcmp(it->string, "code") && strcmp(it->string, "context_id") &&
				    strcmp(it->string, "language") && strcmp(it->string, "env_vars")))
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					"an execute takes \"code\", \"context_id\", \"language\" "
					"and \"env_vars\" only");
	if (!cJSON_IsString(code))
		return e2b_fail(q, c, 400, O_BAD_REQUEST, "\"code\": a string, the code to run");
	if (env && !cJSON_IsNull(env) && !(cJSON_IsObject(env) && !env->child))
		/* refused, never dropped: a context's environment is its sandbox's */
		return e2b_fail(q, c, 400, O_BAD_REQUEST,
				"\"env_vars\" per execution are not supported by moat: set them "
				"when the sandbox is made (envs) (docs/E2B.md)");
	if ((cid && !cJSON_IsNull(cid) && !cJSON_IsString(cid)) ||
	    (lang && !cJSON_IsNull(lang) && !cJSON_IsString(lang)))
		return e2b_fail(q, c, 400, O_BAD_REQUEST,
				"\"context_id\" and \"language\" are strings");
	bool by_id = cJSON_IsString(cid), by_lang = cJSON_IsString(lang);
	if (by_id && by_lang)
		return e2b_fail(q, c, 400, O_BAD_REQUEST,
				"give \"context_id\" or \"language\", not both");
	int li = 0;
	char id[E2B_CI_CTX_ID + 1];
	if (by_id) {
		if (!serve_ctx_id_valid(cid->valuestring))
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such context");
		snprintf(id, sizeof id, "%s", cid->valuestring);
	} else {
		li = by_lang ? lang_index(lang->valuestring) : 0;
		if (li < 0)
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					"moat's code interpreter runs python, javascript and "
					"typescript only");
		if (default_ctx(q, li, id, &err) < 0)
			return fail(q, c, &err);
	}
	uint64_t tmo = q->s->limits.max_timeout_ms ? q->s->limits.max_timeout_ms : 30000;
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
		.stream = true,
	};
	struct serve_ctx_step *st;
	int rc = serve_ctx_step_begin(cs, lv, id, &ex, &st, &err);
	if (rc < 0 && !by_id && err.sys_errno == ENOENT) {
		/* the default context was deleted (DELETE /contexts/{id}): a new one */
		e2b_ci_default_forget(q->s->e2b, q->e2b->id, (unsigned)li, id);
		moat_error_clear(&err);
		if (default_ctx(q, li, id, &err) == 0)
			rc = serve_ctx_step_begin(cs, lv, id, &ex, &st, &err);
	}
	if (rc < 0 && !by_id && err.sys_errno == ENOTCONN) {
		/* the default context's interpreter was killed (its last step said
		 * so: ContextKilled): made new, as a kernel restarts */
		char *gone = serve_sbx_gone(q->s->sandboxes, q->sbx);
		if (!gone) {
			struct moat_buf tmp = { 0 };
			moat_error_clear(&err);
			if (serve_ctx_restart(cs, lv, id, &tmp, &err) == 0)
				rc = serve_ctx_step_begin(cs, lv, id, &ex, &st, &err);
			moat_buf_free(&tmp);
		}
		free(gone);
	}
	if (rc < 0) {
		if (client >= 0)
			close(client);
		return fail(q, c, &err);
	}
	struct ci_stream *p = calloc(1, sizeof *p);
	struct MHD_Response *r =
		p ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK, ci_read, p, ci_free)
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
	enum MHD_Result mrc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return mrc;
}

enum MHD_Result e2b_ci_body(struct req *q, struct MHD_Connection *c)
{
	uint64_t mem;
	struct serve_ctxs *cs = serve_sbx_ctxs(q->sbx, &mem);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	const char *why;
	MOAT_AUTO(cJSON) cJSON *o = e2b_json_body(q, &why);
	if (!o)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, why);
	struct moat_buf b = { 0 }, out = { 0 };
	switch ((enum ci_op)q->e2b->op) {
	case CI_EXECUTE:
		return execute(q, c, o);
	case CI_CREATE: {
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "language");
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "cwd");
		for (const cJSON *it = o->child; it; it = it->next)
			if (!it->string ||
			    (strcmp(it->string, "language") && strcmp(it->string, "cwd")))
				return e2b_fail(q, c, 400, O_BAD_REQUEST,
						"a context takes \"language\" and \"cwd\" only");
		if ((l && !cJSON_IsNull(l) && !cJSON_IsString(l)) ||
		    (w && !cJSON_IsNull(w) && !cJSON_IsString(w)))
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					"\"language\" and \"cwd\" are strings");
		const char *cwd = cJSON_IsString(w) ? w->valuestring : NULL;
		/* E2B's home is moat's /sandbox (docs/E2B.md, envd) */
		if (cwd && !strcmp(cwd, "/home/user"))
			cwd = "/sandbox";
		if (serve_ctx_create(cs, lv, cJSON_IsString(l) ? l->valuestring : NULL, cwd, mem, &b,
				     &err) < 0) {
			moat_buf_free(&b);
			return fail(q, c, &err);
		}
		ctx_e2b(b.data ? b.data : "", b.len, &out);
		moat_buf_free(&b);
		return answer(q, c, 200, &out);
	}
	case CI_RESTART:
		if (serve_ctx_restart(cs, lv, q->ctx_id, &b, &err) < 0) {
			moat_buf_free(&b);
			return fail(q, c, &err);
		}
		moat_buf_free(&b);
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	default:
		return e2b_fail(q, c, 500, O_ERROR, "no such operation");
	}
}
