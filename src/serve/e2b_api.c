/* E2B's control plane (docs/E2B.md) under /e2b of moat serve's listener:
 * E2B's REST routes (create, list, get, kill, timeout, connect, metrics)
 * mapped onto the live sandboxes (sandboxes.c), with X-API-KEY as the
 * service's token; each sandbox made here gets a record (e2b_records.c),
 * which envd's requests (e2b_envd.c) are checked against. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/e2b.h"


#define DEFAULT_TIMEOUT_S 300 /* E2B's default sandbox timeout */

enum api_op { API_NONE, API_CREATE, API_LIST, API_GET, API_KILL, API_TIMEOUT, API_CONNECT,
	      API_PAUSE, API_METRICS };

static enum MHD_Result respond(struct req *q, struct MHD_Connection *c, unsigned status,
			       struct moat_buf *b, const char *h, const char *v)
{
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, status, body, "application/json", h, v) : MHD_NO;
}

/* ---- the control plane ---- */

/* X-API-KEY: the service's token (the caller's credential is then the
 * token's, as on the native routes), or one of serve.e2b.keys (each key a
 * credential of its own: it sees only what it made); without a token (a
 * unix socket, --no-auth) a key that is none of those is the native
 * routes' credential. Every key is compared, in constant time. */
static bool api_key_ok(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
	uint8_t h[MOAT_SHA256_LEN];
	moat_sha256(k ? k : "", k ? strlen(k) : 0, h);
	if (k && s->auth && serve_ct_equal(h, s->token_hash, MOAT_SHA256_LEN)) {
		srv_caller_cred(s, c, q->cred);
		return true;
	}
	bool listed = false;
	for (unsigned i = 0; i < s->limits.e2b_nkeys; i++)
		listed |= serve_ct_equal(h, s->limits.e2b_keys[i], MOAT_SHA256_LEN);
	if (k && listed) {
		static const char ns[] = "moat-e2b-key:";
		size_t n = strlen(k);
		MOAT_AUTOFREE char *t = malloc(sizeof ns + n);
		if (!t)
			return false;
		memcpy(t, ns, sizeof ns - 1);
		memcpy(t + sizeof ns - 1, k, n);
		moat_sha256(t, sizeof ns - 1 + n, q->cred);
		return true;
	}
	if (s->auth)
		return false;
	srv_caller_cred(s, c, q->cred);
	return true;
}

/* "/sandboxes[/{id}[/verb]]" (or "/v2/sandboxes") → op; -1 no route, -2 method. */
static int parse_api(const char *rest, const char *method, char *id, enum api_op *op)
{
	bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
	if (!strncmp(rest, "/v2/sandboxes/", 14))
		rest += 3; /* E2B's v2 routes of one sandbox (connect) are the v1 ones */
	if (!strcmp(rest, "/sandboxes") || !strcmp(rest, "/v2/sandboxes")) {
		*op = post ? API_CREATE : API_LIST;
		return post || get ? 0 : -2;
	}
	if (strncmp(rest, "/sandboxes/", 11))
		return -1;
	rest += 11;
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	if (n > SERVE_SBX_ID_LEN)
		n = 0; /* no such id: a 404 once authenticated */
	memcpy(id, rest, n);
	id[n] = '\0';
	const char *verb = slash ? slash + 1 : NULL;
	if (!verb) {
		*op = get ? API_GET : API_KILL;
		return get || !strcmp(method, "DELETE") ? 0 : -2;
	}
	static const struct {
		const char *verb;
		enum api_op op;
		bool post;
	} verbs[] = { { "timeout", API_TIMEOUT, true }, { "refreshes", API_TIMEOUT, true },
		      { "connect", API_CONNECT, true }, { "resume", API_CONNECT, true },
		      { "pause", API_PAUSE, true },	{ "metrics", API_METRICS, false } };
	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		if (!strcmp(verb, verbs[i].verb)) {
			*op = verbs[i].op;
			return (verbs[i].post ? post : get) ? 0 : -2;
		}
	return -1;
}

/* The native object of x as E2B's sandbox (ListedSandbox / SandboxDetail). */
static void put_sandbox(struct req *q, struct serve_sbx *x, struct moat_buf *b)
{
	struct moat_buf nb = { 0 };
	serve_sbx_json(q->s->sandboxes, x, &nb);
	MOAT_AUTO(cJSON) cJSON *o = nb.data ? cJSON_ParseWithLength(nb.data, nb.len) : NULL;
	moat_buf_free(&nb);
	char tmpl[E2B_MAX_TEMPLATE + 1];
	e2b_rec_template(q->s->e2b, serve_sbx_id(x), tmpl);
	const cJSON *created = cJSON_GetObjectItemCaseSensitive(o, "createdAt");
	const cJSON *expires = cJSON_GetObjectItemCaseSensitive(o, "expiresAt");
	const cJSON *mem = cJSON_GetObjectItemCaseSensitive(o, "memoryMb");
	const cJSON *cpus = cJSON_GetObjectItemCaseSensitive(o, "cpus");
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(o, "state");
	cJSON *meta = cJSON_GetObjectItemCaseSensitive(o, "metadata");
	moat_buf_appendf(b, "{\"sandboxID\":\"%s\",\"templateID\":", serve_sbx_id(x));
	moat_buf_append_json_string(b, tmpl, strlen(tmpl));
	moat_buf_appendf(b, ",\"alias\":");
	moat_buf_append_json_string(b, tmpl, strlen(tmpl));
	moat_buf_appendf(b, ",\"clientID\":\"moat\",\"envdVersion\":\"%s\"", E2B_ENVD_VERSION);
	const char *st = cJSON_IsString(state) ? state->valuestring : "running";
	moat_buf_appendf(b, ",\"state\":\"%s\"",
			 !strcmp(st, "running") ? "running" : !strcmp(st, "paused") ? "paused" : "killed");
	if (cJSON_IsString(created))
		moat_buf_appendf(b, ",\"startedAt\":\"%s\"", created->valuestring);
	if (cJSON_IsString(expires))
		moat_buf_appendf(b, ",\"endAt\":\"%s\"", expires->valuestring);
	moat_buf_appendf(b, ",\"cpuCount\":%d,\"memoryMB\":%lld,\"diskSizeMB\":0",
			 cJSON_IsNumber(cpus) ? (int)ceil(cpus->valuedouble) : 1,
			 cJSON_IsNumber(mem) ? (long long)mem->valuedouble : 0);
	char *m = cJSON_IsObject(meta) ? cJSON_PrintUnformatted(meta) : NULL;
	moat_buf_appendf(b, ",\"metadata\":%s}", m ? m : "{}");
	free(m);
}

/* The answer to a create or connect: what the SDK builds its Sandbox from. */
static enum MHD_Result created(struct req *q, struct MHD_Connection *c, struct serve_sbx *x,
			       const char *tmpl, const char *token, unsigned status)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"sandboxID\":\"%s\",\"templateID\":", serve_sbx_id(x));
	moat_buf_append_json_string(&b, tmpl, strlen(tmpl));
	moat_buf_appendf(&b, ",\"clientID\":\"moat\",\"envdVersion\":\"%s\"", E2B_ENVD_VERSION);
	if (token) /* the traffic token too: the code interpreter SDK's /contexts calls send
		    * only that one (e2b_ci.c); the same secret, to the same caller */
		moat_buf_appendf(&b, ",\"envdAccessToken\":\"%s\",\"trafficAccessToken\":\"%s\"",
				 token, token);
	moat_buf_append(&b, "}\n", 2);
	return respond(q, c, status, &b, NULL, NULL);
}

/* "timeout" (seconds) of o: *ms, or -1 with *why. */
static int timeout_key(struct req *q, const cJSON *o, uint64_t def_s, uint64_t *ms, char *why,
		       size_t wl)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "timeout");
	uint64_t max = q->s->limits.session_max_life_ms;
	if (!t || cJSON_IsNull(t)) {
		*ms = def_s * 1000 < max ? def_s * 1000 : max;
		return 0;
	}
	if (!cJSON_IsNumber(t) || t->valuedouble < 1 || t->valuedouble != floor(t->valuedouble) ||
	    t->valuedouble * 1000 > (double)max) {
		snprintf(why, wl, "\"timeout\" must be a whole number of seconds from 1 to %llu "
			 "(serve.sessions.maxLifetimeMs)", (unsigned long long)(max / 1000));
		return -1;
	}
	*ms = (uint64_t)t->valuedouble * 1000;
	return 0;
}

static enum MHD_Result api_create(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *why;
	MOAT_AUTO(cJSON) cJSON *o = e2b_json_body(q, &why);
	if (!o)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, why);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "templateID");
	if (!cJSON_IsString(t))
		return e2b_fail(q, c, 400, O_BAD_REQUEST, "\"templateID\" is required");
	const char *tmpl = t->valuestring;
	/* the operator's roots (serve.e2b.templates) first: they may name base too */
	const char *rootfs = serve_limits_e2b_template(&s->limits, tmpl);
	if (!rootfs && strcmp(tmpl, "base") && strcmp(tmpl, "code-interpreter-v1")) {
		char msg[160];
		snprintf(msg, sizeof msg, "template '%.64s' not found", tmpl);
		return e2b_fail(q, c, 404, O_BAD_REQUEST, msg);
	}
	/* what moat cannot give is refused, never dropped */
	static const char *const refused[] = { "network", "mcp", "volumeMounts", "autoResume",
					       "iam", NULL };
	for (const char *const *k = refused; *k; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, *k);
		if (v && !cJSON_IsNull(v)) {
			char msg[160];
			snprintf(msg, sizeof msg, "\"%s\" is not supported by moat (docs/E2B.md)", *k);
			return e2b_fail(q, c, 400, O_BAD_REQUEST, msg);
		}
	}
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "autoPause")))
		return e2b_fail(q, c, 400, O_BAD_REQUEST,
				"autoPause (onTimeout \"pause\") is not supported by moat yet "
				"(docs/E2B.md)");
	uint64_t life;
	char msg[200];
	if (timeout_key(q, o, DEFAULT_TIMEOUT_S, &life, msg, sizeof msg) < 0)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, msg);
	/* the native create's body: envVars are the sandbox's env, internet
	 * access is moat's contained egress */
	MOAT_AUTO(cJSON) cJSON *n = cJSON_CreateObject();
	cJSON *env = cJSON_DetachItemFromObjectCaseSensitive(o, "envVars");
	if (env && !cJSON_IsNull(env))
		cJSON_AddItemToObject(n, "env", env);
	else
		cJSON_Delete(env);
	const cJSON *net = cJSON_GetObjectItemCaseSensitive(o, "allow_internet_access");
	if (cJSON_IsTrue(net))
		cJSON_AddTrueToObject(n, "network");
	cJSON *meta = cJSON_DetachItemFromObjectCaseSensitive(o, "metadata");
	if (meta && !cJSON_IsNull(meta))
		cJSON_AddItemToObject(n, "metadata", meta);
	else
		cJSON_Delete(meta);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	char **kv = NULL;
	size_t nkv = 0;
	if (srv_sandboxes_metadata(n, &kv, &nkv, &err) < 0)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, err.message ? err.message : "metadata");
	struct moat_request *req = NULL;
	MOAT_AUTOFREE char *text = NULL;
	if (!cJSON_AddStringToObject(n, "language", "bash") || !cJSON_AddStringToObject(n, "code", "") ||
	    !(text = cJSON_PrintUnformatted(n))) {
		moat_error_oom(&err);
	} else {
		struct moat_request_defaults d = { .fill = srv_limits_fill, .ctx = &s->limits };
		(void)moat_request_prepare(text, strlen(text), NULL, &d, &req, &err);
	}
	if (!req) {
		for (size_t i = 0; i < 2 * nkv; i++)
			free(kv[i]);
		free(kv);
		unsigned st = err.type == MOAT_ERR_POLICY ? 403 : 400;
		return e2b_fail(q, c, st, O_BAD_REQUEST, err.message ? err.message : "bad request");
	}
	/* its record's room first: nothing is made that could not be reached */
	struct e2b *e = s->e2b;
	struct e2b_rec *r = e2b_rec_new();
	uint8_t raw[E2B_TOKEN_HEX / 2];
	char token[E2B_TOKEN_HEX + 1];
	bool room = r && e2b_rec_reserve(s) == 0;
	if (!room || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		if (room)
			e2b_rec_unreserve(e);
		e2b_rec_drop(r);
		moat_request_free(req);
		for (size_t i = 0; i < 2 * nkv; i++)
			free(kv[i]);
		free(kv);
		return e2b_fail(q, c, 429, O_REJECTED, "too many sandboxes remembered; retry later");
	}
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	struct serve_sbx *x = NULL;
	/* E2B has no idle timeout: its timeout is the idle one too */
	int rc = serve_sbx_create(s->sandboxes, q->cred, req, text, life, life, kv, nkv, rootfs,
				  &x, &err);
	if (rc < 0) {
		e2b_rec_unreserve(e);
		e2b_rec_drop(r);
		explicit_bzero(token, sizeof token);
		if (rc == -2)
			return e2b_fail(q, c, 429, O_REJECTED,
					err.message ? err.message : "too many sandboxes");
		return e2b_fail(q, c, err.type == MOAT_ERR_POLICY ? 403 : 500, O_ERROR,
				err.message ? err.message : "the sandbox could not be made");
	}
	q->sbx = x;
	e2b_rec_add(e, r, serve_sbx_id(x), token, q->cred, tmpl);
	enum MHD_Result res = created(q, c, x, tmpl, token, 201);
	explicit_bzero(token, sizeof token);
	return res;
}

/* ?metadata=k%3Dv%26k2%3Dv2 (E2B's one query parameter, URL-encoded pairs). */
static int parse_meta_query(const char *m, struct meta_filter *f)
{
	if (!m || !*m)
		return 0;
	MOAT_AUTOFREE char *dup = strdup(m);
	if (!dup)
		return -1;
	char *save = NULL;
	for (char *pair = strtok_r(dup, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		if (!eq || eq == pair || f->n == 16)
			return -1;
		*eq = '\0';
		char *k = strdup(pair), *v = strdup(eq + 1);
		if (!k || !v) {
			free(k);
			free(v);
			return -1;
		}
		for (char **s = (char *[]){ k, v, NULL }; *s; s++) { /* percent-decoding */
			char *w = *s;
			for (const char *r = *s; *r; r++) {
				/* two hex digits, never past the end; %00 stays as it is */
				if (*r == '%' && isxdigit((unsigned char)r[1]) &&
				    isxdigit((unsigned char)r[2]) && (r[1] != '0' || r[2] != '0')) {
					char hex[3] = { r[1], r[2], '\0' };
					*w++ = (char)strtoul(hex, NULL, 16);
					r += 2;
				} else {
					*w++ = *r == '+' ? ' ' : *r;
				}
			}
			*w = '\0';
		}
		f->kv[2 * f->n] = k;
		f->kv[2 * f->n + 1] = v;
		f->n++;
	}
	return 0;
}

static enum MHD_Result api_list(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
	const char *next = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "nextToken");
	const char *state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
	long limit = 100;
	if (lim) {
		char *end;
		errno = 0;
		limit = strtol(lim, &end, 10);
		if (errno || end == lim || *end || limit < 1 || limit > 1000)
			return e2b_fail(q, c, 400, O_BAD_REQUEST, "\"limit\" must be 1 to 1000");
	}
	if (next && !serve_sbx_id_valid(next))
		return e2b_fail(q, c, 400, O_BAD_REQUEST, "\"nextToken\" is not one this server gave");
	struct moat_buf b = { 0 };
	/* running and paused sandboxes are kept (a killed one is forgotten): a
	 * state filter names which of the two */
	bool want_running = !state || strstr(state, "running"), want_paused = !state || strstr(state, "paused");
	if (!want_running && !want_paused) {
		moat_buf_append(&b, "[]\n", 3);
		return respond(q, c, 200, &b, NULL, NULL);
	}
	struct meta_filter f = { 0 };
	if (parse_meta_query(MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "metadata"),
			     &f) < 0) {
		for (size_t i = 0; i < 2 * f.n; i++)
			free(f.kv[i]);
		return e2b_fail(q, c, 400, O_BAD_REQUEST,
				"\"metadata\": at most 16 URL-encoded key=value pairs");
	}
	struct moat_buf nb = { 0 };
	serve_sbx_list(s->sandboxes, q->cred, f.kv, f.n, (unsigned)limit, next, &nb);
	for (size_t i = 0; i < 2 * f.n; i++)
		free(f.kv[i]);
	MOAT_AUTO(cJSON) cJSON *o = nb.data ? cJSON_ParseWithLength(nb.data, nb.len) : NULL;
	moat_buf_free(&nb);
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "sandboxes");
	const cJSON *nx = cJSON_GetObjectItemCaseSensitive(o, "next");
	moat_buf_append(&b, "[", 1);
	bool first = true;
	for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		struct serve_sbx *x = cJSON_IsString(id) ? serve_sbx_get(s->sandboxes, id->valuestring,
									  q->cred)
							  : NULL;
		if (!x)
			continue;
		bool paused = serve_sbx_paused(s->sandboxes, x);
		if (paused ? !want_paused : !want_running) {
			serve_sbx_put(s->sandboxes, x);
			continue;
		}
		if (!first)
			moat_buf_append(&b, ",", 1);
		first = false;
		put_sandbox(q, x, &b);
		serve_sbx_put(s->sandboxes, x);
	}
	moat_buf_append(&b, "]\n", 2);
	if (!o)
		b.oom = true;
	return respond(q, c, 200, &b, cJSON_IsString(nx) ? "x-next-token" : NULL,
		       cJSON_IsString(nx) ? nx->valuestring : NULL);
}

static enum MHD_Result api_with_sandbox(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	char *why = serve_sbx_gone(s->sandboxes, q->sbx);
	if (why) { /* E2B forgets a killed sandbox */
		free(why);
		return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
	}
	struct moat_buf b = { 0 };
	switch ((enum api_op)q->e2b->op) {
	case API_GET:
		put_sandbox(q, q->sbx, &b);
		moat_buf_append(&b, "\n", 1);
		return respond(q, c, 200, &b, NULL, NULL);
	case API_KILL:
		serve_sbx_delete(s->sandboxes, q->sbx);
		q->status = 204;
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	case API_PAUSE: {
		/* the native pause (docs/SANDBOXES.md): every process frozen, its
		 * memory kept; E2B's 409 for one already paused */
		if (serve_sbx_paused(s->sandboxes, q->sbx))
			return e2b_fail(q, c, 409, O_BAD_REQUEST, "sandbox is already paused");
		char *gone = NULL;
		int pr = serve_sbx_pause(s->sandboxes, q->sbx, true, &gone);
		free(gone);
		if (pr == -2)
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
		if (pr == -1) /* not E2B's 409, which the SDK takes for "already paused" */
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					"a request is in flight on the sandbox (an open command's "
					"stream too: disconnect its handle): pause it once they have "
					"ended");
		q->status = 204;
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	}
	case API_METRICS: {
		struct live *lv = serve_sbx_live(q->sbx);
		int64_t mem = live_memory(lv), cpu = live_cpu_ms(lv);
		if (mem < 0) { /* not measured here (no cgroup): no sample, never a made-up 0 */
			moat_buf_append(&b, "[]\n", 3);
			return respond(q, c, 200, &b, NULL, NULL);
		}
		moat_buf_appendf(&b, "[{\"timestamp\":");
		int64_t now = serve_wall_ms();
		struct moat_buf t = { 0 };
		serve_put_time(&t, "t", now);
		/* serve_put_time wrote ,"t":"..." */
		moat_buf_append(&b, t.data ? t.data + 5 : "null", t.data ? t.len - 5 : 4);
		moat_buf_free(&t);
		moat_buf_appendf(&b, ",\"timestampUnix\":%lld,\"cpuCount\":1,\"cpuUsedPct\":0,"
				 "\"memUsed\":%lld,\"memTotal\":0,\"diskUsed\":0,\"diskTotal\":0,"
				 "\"cpuTimeMs\":%lld}]\n",
				 (long long)(now / 1000), (long long)mem,
				 (long long)(cpu < 0 ? 0 : cpu));
		return respond(q, c, 200, &b, NULL, NULL);
	}
	default:
		break;
	}
	return e2b_fail(q, c, 500, O_ERROR, "no such operation");
}

static enum MHD_Result api_body(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	if (q->e2b->op == API_CREATE)
		return api_create(q, c);
	const char *why;
	MOAT_AUTO(cJSON) cJSON *o = e2b_json_body(q, &why);
	if (!o)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, why);
	if (q->e2b->op == API_PAUSE)
		return api_with_sandbox(q, c);
	char *gone = serve_sbx_gone(s->sandboxes, q->sbx);
	if (gone) {
		free(gone);
		return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
	}
	uint64_t ms;
	char msg[200];
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "duration"); /* refreshes */
	if (d && !cJSON_GetObjectItemCaseSensitive(o, "timeout"))
		cJSON_AddItemReferenceToObject(o, "timeout", (cJSON *)d);
	bool given = cJSON_GetObjectItemCaseSensitive(o, "timeout") != NULL;
	if (timeout_key(q, o, DEFAULT_TIMEOUT_S, &ms, msg, sizeof msg) < 0)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, msg);
	if (q->e2b->op == API_TIMEOUT || given) {
		char *w = NULL;
		if (serve_sbx_extend(s->sandboxes, q->sbx, ms, &w) < 0) {
			free(w);
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
		}
	}
	if (q->e2b->op == API_TIMEOUT)
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	/* connect, resume: a paused sandbox resumed, then the running sandbox,
	 * with its access token (the caller's key made it: another key's
	 * sandbox is a 404 before this) */
	if (serve_sbx_paused(s->sandboxes, q->sbx)) {
		char *w = NULL;
		if (serve_sbx_pause(s->sandboxes, q->sbx, false, &w) < 0) {
			free(w);
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
		}
	}
	char tmpl[E2B_MAX_TEMPLATE + 1], token[E2B_TOKEN_HEX + 1] = "";
	e2b_rec_template(s->e2b, serve_sbx_id(q->sbx), tmpl);
	bool have = e2b_rec_token(s->e2b, serve_sbx_id(q->sbx), token);
	enum MHD_Result rc = created(q, c, q->sbx, tmpl, have ? token : NULL, 200);
	explicit_bzero(token, sizeof token);
	return rc;
}

enum MHD_Result srv_e2b_route(struct req *q, struct MHD_Connection *c, const char *rest,
			      const char *method)
{
	struct server *s = q->s;
	q->mode = "e2b";
	if (!(q->e2b = calloc(1, sizeof *q->e2b)))
		return MHD_NO;
	if (!s->sandboxes || !s->e2b)
		return e2b_fail(q, c, 404, O_BAD_REQUEST, "live sandboxes are off on this server");
	if (!strncmp(rest, "/envd/", 6) || !strcmp(rest, "/envd")) {
		q->e2b->envd = true;
		return e2b_envd_route(q, c, rest + 5, method);
	}
	enum api_op op = API_NONE;
	int pr = parse_api(rest, method, q->e2b->id, &op);
	if (pr == -1)
		return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such route");
	if (pr == -2)
		return e2b_fail(q, c, 405, O_BAD_REQUEST, "this route does not take that method");
	if (!api_key_ok(q, c))
		return e2b_fail(q, c, 401, O_UNAUTHORIZED, "invalid API key (X-API-KEY)");
	q->e2b->op = (int)op;
	if (op == API_LIST)
		return api_list(q, c);
	if (op != API_CREATE) {
		/* another key's sandbox is a 404 alike */
		if (!q->e2b->id[0] || !(q->sbx = serve_sbx_get(s->sandboxes, q->e2b->id, q->cred)))
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "sandbox not found");
		if (op == API_GET || op == API_KILL || op == API_METRICS)
			return api_with_sandbox(q, c);
	}
	if (srv_length_over(c, SERVE_MAX_BODY))
		return e2b_fail(q, c, 413, O_BAD_REQUEST, "the request body is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

enum MHD_Result srv_e2b_body(struct req *q, struct MHD_Connection *c)
{
	return q->e2b->envd ? e2b_envd_body(q, c) : api_body(q, c);
}
