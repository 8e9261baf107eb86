/* `moat serve`'s session routes (docs/SESSIONS.md): POST /v1/sessions,
 * POST /v1/sessions/{id}/run, POST /v1/sessions/{id}/interrupt, GET and
 * DELETE /v1/sessions/{id}. The table
 * of sessions and its thread are sessions.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "core/cleanup.h"
#include "serve/http.h"


/* The caller a session is bound to: the bearer token (its SHA-256) when
 * the service has one, else on a unix socket the peer's uid, else (a
 * loopback listener with --no-auth) every caller alike. */
void srv_caller_cred(struct server *s, struct MHD_Connection *c, uint8_t out[MOAT_SHA256_LEN])
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

enum MHD_Result srv_session_missing(struct req *q, struct MHD_Connection *c)
{
	return srv_fail(q, c, 404, "SessionNotFound", O_BAD_REQUEST,
			"no such session (it never existed, is another caller's, or ended long ago)");
}

static enum MHD_Result session_gone(struct req *q, struct MHD_Connection *c, char *why)
{
	enum MHD_Result r = srv_fail(q, c, 410, "SessionGone", O_ERROR,
				     why ? why : "the session is gone");
	free(why);
	return r;
}

/* A lifetime field of POST /v1/sessions or /v1/sandboxes (removed from
 * the object): its value, the default when absent, or -1 with *err. */
int srv_lifetime_key(cJSON *o, const char *key, uint64_t def, uint64_t max, uint64_t *out,
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

/* "onIdle" of POST /v1/sessions and /v1/sandboxes (removed from the object): "pause" or
 * "delete" (the default). */
int srv_on_idle_key(cJSON *o, bool *pause, struct moat_error *err)
{
	cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(o, "onIdle");
	*pause = false;
	if (!it)
		return 0;
	bool ok = cJSON_IsString(it) && (!strcmp(it->valuestring, "pause") ||
					 !strcmp(it->valuestring, "delete"));
	*pause = ok && !strcmp(it->valuestring, "pause");
	cJSON_Delete(it);
	return ok ? 0 : moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "\"onIdle\" must be \"pause\" or \"delete\"");
}

/* The request body as a JSON object whose keys are among the route's own
 * (spec->keys, NULL-terminated; NULL: any, the pipeline behind checks
 * them): the object, or NULL with *err (400). An empty body is {}; a NUL
 * escaped into a string is refused (cJSON would cut the string there); an
 * unknown key's error names the route and its own keys, so that a key of
 * /v1/run's is not offered where a session or a sandbox refuses it. */
cJSON *srv_json_body(struct req *q, const struct srv_body_spec *spec, struct moat_error *err)
{
	bool nul = false;
	const char *body = q->body.data ? q->body.data : "";
	if (q->body.len == 0) {
		cJSON *o = cJSON_CreateObject();
		if (!o)
			moat_error_oom(err);
		return o;
	}
	if (moat_json_prescan(body, q->body.len, &nul, err) < 0)
		return NULL;
	if (nul) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "a string of the body holds a NUL (\\u0000)");
		return NULL;
	}
	cJSON *o = cJSON_ParseWithLength(body, q->body.len);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "the body must be a JSON object");
		return NULL;
	}
	const char *const *keys = spec->keys;
	for (const cJSON *it = o->child; keys && it; it = it->next) {
		const char *name = it->string ? it->string : "";
		const char *const *k = keys;
		while (*k && strcmp(name, *k) != 0)
			k++;
		if (*k)
			continue;
		struct moat_buf b = { 0 };
		for (k = keys; *k; k++)
			moat_buf_appendf(&b, "%s%s", k == keys ? "" : ", ", *k);
		MOAT_AUTOFREE char *list = moat_buf_take(&b);
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "unknown key \"%.64s\" for %s (accepted: %s; %s)",
			       name, spec->route, list ? list : "see the docs", spec->doc);
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* The request pipeline on o (printed back), with the service's limits. */
static int session_prepare(struct req *q, cJSON *o, const char *header_id,
			   struct moat_request **req, struct moat_error *err)
{
	MOAT_AUTOFREE char *text = cJSON_PrintUnformatted(o);
	if (!text)
		return moat_error_oom(err);
	struct moat_request_defaults d = { .fill = srv_limits_fill, .ctx = &q->s->limits };
	return moat_request_prepare(text, strlen(text), header_id, &d, req, err);
}

/* POST /v1/sessions */
enum MHD_Result srv_sessions_create_route(struct req *q, struct MHD_Connection *c)
{
	static const char *const keys[] = { "language", "env", "network", "allowedHosts",
					    "allowedCidrs", "memoryMb", "cpus", "pidsLimit",
					    "strictLimits", "maxOutputBytes", "sandboxId", "kvEnabled",
					    "idleTimeoutMs", "maxLifetimeMs", "maxCpuTimeMs", "onIdle",
					    NULL };
	static const struct srv_body_spec spec = { "POST /v1/sessions", keys, "docs/SESSIONS.md" };
	const struct serve_limits *l = &q->s->limits;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTO(moat_request) struct moat_request *req = NULL;
	struct serve_session_params sp = { 0 };
	{
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		uint64_t cpu_max = l->session_max_cpu_ms ? l->session_max_cpu_ms
							 : 7ull * 24 * 3600 * 1000;
		if (!o ||
		    srv_lifetime_key(o, "idleTimeoutMs", l->session_idle_ms, l->session_max_idle_ms,
				 &sp.idle_ms, &err) < 0 ||
		    srv_lifetime_key(o, "maxLifetimeMs", l->session_max_life_ms,
				 l->session_max_life_ms, &sp.life_ms, &err) < 0 ||
		    srv_lifetime_key(o, "maxCpuTimeMs", l->session_max_cpu_ms, cpu_max,
				 &sp.max_cpu_ms, &err) < 0 ||
		    srv_on_idle_key(o, &sp.on_idle_pause, &err) < 0 ||
		    !cJSON_AddStringToObject(o, "code", "") ||
		    session_prepare(q, o, q->header_id, &req, &err) < 0)
			return srv_fail_moat(q, c, &err);
	}
	q->lang = (int)req->language;
	if (req->language != MOAT_LANG_PYTHON && req->language != MOAT_LANG_JAVASCRIPT) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "sessions take Python or JavaScript (\"language\": \"python\" or "
			       "\"javascript\")");
		return srv_fail_moat(q, c, &err);
	}
	if (req->kv_enabled && q->s->o->kv_off)
		return srv_fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
				"kvEnabled: this server runs without the key-value store (--no-kv)");
	/* a client that hangs up, or the end of the grace, ends the wait for
	 * the driver's start */
	srv_watch_client(q, c);
	struct moat_run_options per;
	srv_run_options(q, &per);
	char *answer = NULL;
	int rc = serve_sessions_create(q->s->sessions, q->cred, req, &sp, &per, &answer, &err);
	if (rc == -2)
		return srv_fail(q, c, 503, "ServerBusy", O_REJECTED, err.message);
	if (rc < 0)
		return srv_fail_moat(q, c, &err);
	return srv_respond(q, c, 201, answer, "application/json", NULL, NULL);
}

/* A step answered whole. */
static enum MHD_Result session_step(struct req *q, struct MHD_Connection *c,
				    const struct moat_request *req)
{
	if (!srv_reserve_result(q, req))
		return srv_refuse_result(q, c);
	struct moat_run_options opts;
	srv_run_options(q, &opts);
	struct moat_result *res = NULL;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTOFREE char *extra = NULL;
	int rc = serve_session_step(q->s->sessions, q->ses, req, &opts, &res, &extra, &err);
	srv_release_slot(q->s);
	q->has_slot = false;
	serve_session_end(q->s->sessions, q->ses);
	q->ses_busy = false;
	if (rc < 0) {
		char *gone = serve_session_gone(q->s->sessions, q->ses);
		return gone ? session_gone(q, c, gone) : srv_fail_moat(q, c, &err);
	}
	q->outcome = serve_run_outcome(res);
	srv_fit_result(res, req);
	char *json = moat_result_to_json(res);
	moat_result_free(res);
	char *body = json ? srv_session_answer(q, json, extra) : NULL;
	free(json);
	return srv_respond_run(q, c, body);
}

/* POST /v1/sessions/{id}/run */
enum MHD_Result srv_session_run_route(struct req *q, struct MHD_Connection *c)
{
	static const char *const keys[] = { "code", "timeout", "stdin", "files", NULL };
	static const struct srv_body_spec spec = { "POST /v1/sessions/{id}/run", keys,
						   "docs/SESSIONS.md" };
	struct serve_sessions *ss = q->s->sessions;
	q->ses = serve_sessions_get(ss, q->ses_id, q->cred);
	if (!q->ses)
		return srv_session_missing(q, c);
	enum moat_language lang = serve_session_language(q->ses);
	q->lang = (int)lang;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTO(moat_request) struct moat_request *req = NULL;
	{
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		if (!o || !cJSON_AddStringToObject(o, "language", moat_lang_get(lang)->name) ||
		    session_prepare(q, o, NULL, &req, &err) < 0)
			return err.message ? srv_fail_moat(q, c, &err) : MHD_NO;
	}
	/* the session's own cap bounds its output; this one the answer */
	req->max_output_bytes = q->s->limits.max_output_bytes;
	char *gone = NULL;
	int b = serve_session_begin(ss, q->ses, &gone);
	if (b == -1)
		return srv_fail(q, c, 409, "SessionBusy", O_REJECTED,
				"a step is running in this session; runs in one session are "
				"serialised");
	if (b < 0)
		return session_gone(q, c, gone);
	q->ses_busy = true;
	q->mode = "session";
	enum MHD_Result r = srv_take_slot(q, c);
	if (r == MHD_YES && q->has_slot && srv_wants_ndjson(c))
		return srv_run_ndjson(q, c, MOAT_TAKE(req));
	if (r == MHD_YES && q->has_slot)
		r = session_step(q, c, req);
	return r;
}

/* GET and DELETE /v1/sessions/{id}, POST .../pause and .../resume:
 * answered from the headers. */
enum MHD_Result srv_session_route(struct req *q, struct MHD_Connection *c, enum srv_session_op op)
{
	struct serve_sessions *ss = q->s->sessions;
	q->ses = serve_sessions_get(ss, q->ses_id, q->cred);
	if (!q->ses)
		return srv_session_missing(q, c);
	q->lang = (int)serve_session_language(q->ses);
	struct moat_buf b = { 0 };
	char *gone = NULL;
	if (op == SES_OP_DELETE) {
		if (serve_session_delete(ss, q->ses, &gone) < 0)
			return session_gone(q, c, gone);
		moat_buf_appendf(&b, "{\"id\":\"%s\",\"state\":\"ended\"}", q->ses_id);
	} else if (op == SES_OP_GET) {
		free(serve_session_gone(ss, q->ses)); /* its state now */
		serve_session_json(ss, q->ses, &b, true);
	} else {
		MOAT_AUTO_ERROR struct moat_error err = { 0 };
		int rc = serve_session_pause(ss, q->ses, op == SES_OP_PAUSE, &b, &gone, &err);
		if (rc < 0)
			moat_buf_free(&b);
		if (rc == -1)
			return srv_fail(q, c, 409, "SessionBusy", O_REJECTED,
					"a step is running in this session; pause or resume it between "
					"steps");
		if (rc == -2)
			return session_gone(q, c, gone);
		if (rc < 0)
			return srv_fail_moat(q, c, &err);
	}
	moat_buf_append(&b, "\n", 1);
	char *body = moat_buf_take(&b);
	return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
}

/* POST /v1/sessions/{id}/interrupt: answered from the headers (no body). */
enum MHD_Result srv_session_interrupt_route(struct req *q, struct MHD_Connection *c)
{
	struct serve_sessions *ss = q->s->sessions;
	if (!serve_session_id_valid(q->ses_id) ||
	    !(q->ses = serve_sessions_get(ss, q->ses_id, q->cred)))
		return srv_session_missing(q, c);
	q->lang = (int)serve_session_language(q->ses);
	char *gone = NULL;
	int rc = serve_session_interrupt(ss, q->ses, &gone);
	if (rc < 0)
		return session_gone(q, c, gone);
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"id\":\"%s\",\"interrupted\":%s}\n", q->ses_id,
			 rc ? "true" : "false");
	char *body = moat_buf_take(&b);
	return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
}
