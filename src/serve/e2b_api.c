/* E2B's control plane (docs/E2B.md) under /e2b of moat serve's listener:
 * E2B's REST routes (create, list, get, kill, timeout, connect, metrics)
 * mapped onto the live sandboxes (sandboxes.c), with X-API-KEY as the
 * service's token; and the records of the sandboxes made here (their
 * access tokens, hashed), which envd's requests (e2b_envd.c) are checked
 * against. */
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

MOAT_DEFINE_AUTO(cJSON, cJSON_Delete)

#define DEFAULT_TIMEOUT_S 300 /* E2B's default sandbox timeout */
#define MAX_TEMPLATE 64

/* A process started through envd: what Process/List answers and a tag
 * selects (the agent keeps at most LIVE_MAX_PROCS: so is this ring). */
struct e2b_proc {
	int pid;
	char *tag;    /* NULL: none */
	char *config; /* its ProcessConfig as JSON, at most E2B_MAX_PROC_CONFIG */
};

struct e2b_rec {
	char id[SERVE_SBX_ID_LEN + 1];
	uint8_t token_hash[MOAT_SHA256_LEN];
	char token[E2B_TOKEN_HEX + 1]; /* given again to connect (its key's caller) */
	uint8_t cred[MOAT_SHA256_LEN];
	char tmpl[MAX_TEMPLATE + 1];
	struct e2b_proc procs[LIVE_MAX_PROCS];
	unsigned nprocs; /* started: the next goes to procs[nprocs % LIVE_MAX_PROCS] */
	struct e2b_rec *next;
};

static void rec_free(struct e2b_rec *r)
{
	for (size_t i = 0; i < LIVE_MAX_PROCS; i++) {
		free(r->procs[i].tag);
		free(r->procs[i].config);
	}
	explicit_bzero(r->token, sizeof r->token);
	free(r);
}

struct e2b {
	pthread_mutex_t mu;
	struct e2b_rec *list;
	unsigned n, cap;
};

enum api_op { API_NONE, API_CREATE, API_LIST, API_GET, API_KILL, API_TIMEOUT, API_CONNECT,
	      API_PAUSE, API_METRICS };

int e2b_start(struct e2b **out, unsigned max_sandboxes, struct moat_error *err)
{
	struct e2b *e = calloc(1, sizeof *e);
	if (!e)
		return moat_error_oom(err);
	pthread_mutex_init(&e->mu, NULL);
	e->cap = 4 * max_sandboxes + 16;
	*out = e;
	return 0;
}

void e2b_stop(struct e2b *e)
{
	if (!e)
		return;
	for (struct e2b_rec *r = e->list, *n; r; r = n) {
		n = r->next;
		rec_free(r);
	}
	pthread_mutex_destroy(&e->mu);
	free(e);
}

void srv_e2b_req_free(struct e2b_req *r)
{
	if (!r)
		return;
	e2b_envd_req_free(r); /* its state holds no fd: q->up_fd is the open file */
	free(r->path);
	free(r);
}

enum MHD_Result e2b_fail(struct req *q, struct MHD_Connection *c, unsigned status,
			 enum serve_outcome o, const char *msg)
{
	q->outcome = o;
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":%u,\"message\":", status);
	moat_buf_append_json_string(&b, msg, strlen(msg));
	moat_buf_append(&b, "}\n", 2);
	char *body = moat_buf_take(&b);
	return body ? srv_respond(q, c, status, body, "application/json", NULL, NULL) : MHD_NO;
}

static enum MHD_Result respond(struct req *q, struct MHD_Connection *c, unsigned status,
			       struct moat_buf *b, const char *h, const char *v)
{
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, status, body, "application/json", h, v) : MHD_NO;
}

cJSON *e2b_json_body(struct req *q, const char **why)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	bool nul = false;
	*why = "the body must be a JSON object";
	if (q->body.len == 0)
		return cJSON_CreateObject();
	if (moat_json_prescan(q->body.data, q->body.len, &nul, &err) < 0 || nul)
		return NULL;
	cJSON *o = cJSON_ParseWithLength(q->body.data, q->body.len);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* ---- the records ---- */

/* Drops the records whose sandbox the native table forgot; under e->mu. */
static void prune(struct server *s, struct e2b *e)
{
	for (struct e2b_rec **p = &e->list; *p;) {
		struct serve_sbx *x = serve_sbx_get(s->sandboxes, (*p)->id, (*p)->cred);
		if (x) {
			serve_sbx_put(s->sandboxes, x);
			p = &(*p)->next;
			continue;
		}
		struct e2b_rec *dead = *p;
		*p = dead->next;
		rec_free(dead);
		e->n--;
	}
}

static bool rec_template(struct e2b *e, const char *id, char out[MAX_TEMPLATE + 1])
{
	bool found = false;
	pthread_mutex_lock(&e->mu);
	for (struct e2b_rec *r = e->list; r && !found; r = r->next)
		if (!strcmp(r->id, id)) {
			memcpy(out, r->tmpl, sizeof r->tmpl);
			found = true;
		}
	pthread_mutex_unlock(&e->mu);
	if (!found)
		snprintf(out, MAX_TEMPLATE + 1, "base"); /* made by the native API */
	return found;
}

int e2b_envd_sandbox(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
	uint8_t h[MOAT_SHA256_LEN];
	moat_sha256(tok ? tok : "", tok ? strlen(tok) : 0, h);
	bool ok = false;
	pthread_mutex_lock(&s->e2b->mu);
	for (struct e2b_rec *x = s->e2b->list; id && x; x = x->next)
		if (!strcmp(x->id, id)) {
			ok = tok && serve_ct_equal(x->token_hash, h, MOAT_SHA256_LEN);
			if (ok) {
				memcpy(q->cred, x->cred, MOAT_SHA256_LEN);
				snprintf(q->e2b->id, sizeof q->e2b->id, "%s", x->id);
			}
			break;
		}
	pthread_mutex_unlock(&s->e2b->mu);
	/* an unknown sandbox and a wrong token answer alike */
	if (!ok)
		return -1;
	q->sbx = serve_sbx_get(s->sandboxes, q->e2b->id, q->cred);
	char *why = q->sbx ? serve_sbx_begin(s->sandboxes, q->sbx) : NULL;
	if (!q->sbx || why) {
		free(why);
		return -2;
	}
	q->sbx_busy = true;
	return 0;
}

static struct e2b_rec *rec_of(struct e2b *e, const char *id)
{
	for (struct e2b_rec *r = e->list; r; r = r->next)
		if (!strcmp(r->id, id))
			return r;
	return NULL;
}

void e2b_proc_note(struct e2b *e, const char *id, int pid, const char *tag, const char *config)
{
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	if (r) {
		struct e2b_proc *p = &r->procs[r->nprocs++ % LIVE_MAX_PROCS];
		free(p->tag);
		free(p->config);
		p->pid = pid;
		p->tag = tag ? strdup(tag) : NULL;
		p->config = config && strlen(config) <= E2B_MAX_PROC_CONFIG ? strdup(config) : NULL;
	}
	pthread_mutex_unlock(&e->mu);
}

int e2b_proc_by_tag(struct e2b *e, const char *id, const char *tag)
{
	int pid = -1;
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	/* the newest with the tag */
	for (unsigned k = 0; r && k < LIVE_MAX_PROCS && k < r->nprocs; k++) {
		const struct e2b_proc *p = &r->procs[(r->nprocs - 1 - k) % LIVE_MAX_PROCS];
		if (p->tag && !strcmp(p->tag, tag)) {
			pid = p->pid;
			break;
		}
	}
	pthread_mutex_unlock(&e->mu);
	return pid;
}

void e2b_proc_json(struct e2b *e, const char *id, int pid, struct moat_buf *b)
{
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	const struct e2b_proc *p = NULL;
	for (unsigned k = 0; r && k < LIVE_MAX_PROCS && k < r->nprocs && !p; k++) {
		const struct e2b_proc *x = &r->procs[(r->nprocs - 1 - k) % LIVE_MAX_PROCS];
		if (x->pid == pid)
			p = x;
	}
	moat_buf_appendf(b, "{\"pid\":%d,\"config\":%s", pid,
			 p && p->config ? p->config : "{\"cmd\":\"\"}");
	if (p && p->tag) {
		moat_buf_append(b, ",\"tag\":", 7);
		moat_buf_append_json_string(b, p->tag, strlen(p->tag));
	}
	moat_buf_append(b, "}", 1);
	pthread_mutex_unlock(&e->mu);
}

/* ---- the control plane ---- */

/* X-API-KEY: the service's token when it has one (the caller's credential
 * is then the token's, as on the native routes); without one (a unix
 * socket, --no-auth) the native routes' credential. */
static bool api_key_ok(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	if (s->auth) {
		const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
		if (!k)
			return false;
		uint8_t h[MOAT_SHA256_LEN];
		moat_sha256(k, strlen(k), h);
		if (!serve_ct_equal(h, s->token_hash, MOAT_SHA256_LEN))
			return false;
	}
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
	if (n != SERVE_SBX_ID_LEN)
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
	char tmpl[MAX_TEMPLATE + 1];
	rec_template(q->s->e2b, serve_sbx_id(x), tmpl);
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
	moat_buf_appendf(b, ",\"state\":\"%s\"", !strcmp(st, "running") ? "running" : "killed");
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
	if (token)
		moat_buf_appendf(&b, ",\"envdAccessToken\":\"%s\"", token);
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
	if (strcmp(tmpl, "base") && strcmp(tmpl, "code-interpreter-v1")) {
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
	struct e2b_rec *r = calloc(1, sizeof *r);
	uint8_t raw[E2B_TOKEN_HEX / 2];
	char token[E2B_TOKEN_HEX + 1];
	bool room;
	pthread_mutex_lock(&e->mu);
	if (e->n >= e->cap)
		prune(s, e);
	room = e->n < e->cap;
	if (room)
		e->n++; /* reserved */
	pthread_mutex_unlock(&e->mu);
	if (!r || !room || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		if (room) {
			pthread_mutex_lock(&e->mu);
			e->n--;
			pthread_mutex_unlock(&e->mu);
		}
		free(r);
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
	int rc = serve_sbx_create(s->sandboxes, q->cred, req, life, life, kv, nkv, &x, &err);
	if (rc < 0) {
		pthread_mutex_lock(&e->mu);
		e->n--;
		pthread_mutex_unlock(&e->mu);
		free(r);
		if (rc == -2)
			return e2b_fail(q, c, 429, O_REJECTED,
					err.message ? err.message : "too many sandboxes");
		return e2b_fail(q, c, err.type == MOAT_ERR_POLICY ? 403 : 500, O_ERROR,
				err.message ? err.message : "the sandbox could not be made");
	}
	q->sbx = x;
	snprintf(r->id, sizeof r->id, "%s", serve_sbx_id(x));
	moat_sha256(token, strlen(token), r->token_hash);
	memcpy(r->token, token, sizeof r->token);
	memcpy(r->cred, q->cred, MOAT_SHA256_LEN);
	snprintf(r->tmpl, sizeof r->tmpl, "%s", tmpl);
	pthread_mutex_lock(&e->mu);
	r->next = e->list;
	e->list = r;
	pthread_mutex_unlock(&e->mu);
	return created(q, c, x, tmpl, token, 201);
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
				unsigned x;
				if (*r == '%' && sscanf(r + 1, "%2x", &x) == 1 && x) {
					*w++ = (char)x;
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
	/* only running sandboxes are kept: a state filter without "running" is empty */
	if (state && !strstr(state, "running")) {
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
	case API_PAUSE:
		return e2b_fail(q, c, 501, O_BAD_REQUEST,
				"pause is not supported by moat yet (docs/E2B.md); the sandbox "
				"keeps running");
	case API_METRICS: {
		struct live *lv = serve_sbx_live(q->sbx);
		int64_t mem = live_memory(lv), cpu = live_cpu_ms(lv);
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
				 (long long)(now / 1000), (long long)(mem < 0 ? 0 : mem),
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
	/* connect, resume: the running sandbox, with its access token (the
	 * caller's key made it: another key's sandbox is a 404 before this) */
	char tmpl[MAX_TEMPLATE + 1], token[E2B_TOKEN_HEX + 1] = "";
	rec_template(s->e2b, serve_sbx_id(q->sbx), tmpl);
	pthread_mutex_lock(&s->e2b->mu);
	struct e2b_rec *r = rec_of(s->e2b, serve_sbx_id(q->sbx));
	if (r)
		memcpy(token, r->token, sizeof token);
	pthread_mutex_unlock(&s->e2b->mu);
	enum MHD_Result rc = created(q, c, q->sbx, tmpl, r ? token : NULL, 200);
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
