/* The records of the sandboxes made through E2B's API (docs/E2B.md): each
 * one's access token (its hash, to check envd's requests against, and the
 * token, given again to its own key's connect), its maker's credential, its
 * template, the processes envd started in it. Below e2b_api.c (the control
 * plane) and e2b_envd.c (envd), which both use them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/e2b.h"

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
	char tmpl[E2B_MAX_TEMPLATE + 1];
	struct e2b_proc procs[LIVE_MAX_PROCS];
	unsigned nprocs; /* started: the next goes to procs[nprocs % LIVE_MAX_PROCS] */
	char dflt[E2B_CI_LANGS][E2B_CI_CTX_ID + 1]; /* the code interpreter's default contexts */
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

struct e2b_rec *e2b_rec_new(void)
{
	return calloc(1, sizeof(struct e2b_rec));
}

void e2b_rec_drop(struct e2b_rec *r)
{
	if (r)
		rec_free(r);
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

bool e2b_rec_template(struct e2b *e, const char *id, char out[E2B_MAX_TEMPLATE + 1])
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
		snprintf(out, E2B_MAX_TEMPLATE + 1, "base"); /* made by the native API */
	return found;
}

/* q's sandbox (q->e2b->id, q->cred) held: 0; -2 ended. */
static int hold(struct req *q)
{
	struct server *s = q->s;
	q->sbx = serve_sbx_get(s->sandboxes, q->e2b->id, q->cred);
	char *why = q->sbx ? serve_sbx_begin(s->sandboxes, q->sbx) : NULL;
	if (!q->sbx || why) {
		free(why);
		return -2;
	}
	q->sbx_busy = true;
	return 0;
}

int e2b_envd_sandbox(struct req *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
	/* the code interpreter SDK sends its /contexts calls with the traffic
	 * token only (the same secret: the create answer's trafficAccessToken) */
	if (!tok && (q->e2b->ci || q->e2b->port))
		tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2B-Traffic-Access-Token");
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
	return ok ? hold(q) : -1;
}

/* A signed URL's signature as E2B's SDK makes it: "v1_" and the unpadded
 * base64 of SHA-256("path:operation:user:token[:expiration]") into out. */
#define SIG_LEN (3 + 43)
static bool signature(const char *path, const char *op, const char *user, const char *token,
		      const char *exp, char out[SIG_LEN + 1])
{
	struct moat_buf m = { 0 }, b = { 0 };
	moat_buf_appendf(&m, "%s:%s:%s:%s%s%s", path, op, user, token, exp ? ":" : "",
			 exp ? exp : "");
	uint8_t h[MOAT_SHA256_LEN];
	if (!m.oom)
		moat_sha256(m.data, m.len, h);
	moat_buf_append_base64(&b, h, sizeof h); /* a JSON string: "…=" */
	bool ok = !m.oom && !b.oom && b.len >= 1 + SIG_LEN - 3;
	if (ok) { /* its quotes and padding ("=") off */
		memcpy(out, "v1_", 3);
		memcpy(out + 3, b.data + 1, SIG_LEN - 3);
	}
	out[SIG_LEN] = '\0';
	if (m.data)
		explicit_bzero(m.data, m.len); /* it holds the token */
	moat_buf_free(&m);
	moat_buf_free(&b);
	return ok;
}

int e2b_envd_signed(struct req *q, struct MHD_Connection *c, bool write, const char **why)
{
	struct server *s = q->s;
	const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	const char *sig = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "signature");
	const char *path = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
	const char *user = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "username");
	const char *exp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
						      "signature_expiration");
	*why = "invalid signature (signature, signature_expiration) or unknown sandbox";
	path = path ? path : "";
	user = user ? user : "";
	/* bounded before any hashing: each record's token is tried */
	if (!sig || strlen(sig) != SIG_LEN || strncmp(sig, "v1_", 3) ||
	    strlen(path) > E2B_MAX_SIGNED_PATH || strlen(user) > E2B_MAX_SIGNED_USER ||
	    (exp && (!exp[0] || strlen(exp) > 18 || strspn(exp, "0123456789") != strlen(exp))))
		return -1;
	bool ok = false;
	pthread_mutex_lock(&s->e2b->mu);
	for (struct e2b_rec *x = s->e2b->list; x && !ok; x = x->next) {
		if (id && strcmp(x->id, id))
			continue;
		char want[SIG_LEN + 1];
		if (!signature(path, write ? "write" : "read", user, x->token, exp, want))
			break;
		ok = serve_ct_equal(want, sig, SIG_LEN);
		if (ok) {
			memcpy(q->cred, x->cred, MOAT_SHA256_LEN);
			snprintf(q->e2b->id, sizeof q->e2b->id, "%s", x->id);
		}
	}
	pthread_mutex_unlock(&s->e2b->mu);
	if (!ok)
		return -1;
	if (exp && strtoll(exp, NULL, 10) < (long long)time(NULL)) {
		*why = "the signature has expired (signature_expiration)";
		return -1;
	}
	return hold(q);
}

static struct e2b_rec *rec_of(struct e2b *e, const char *id)
{
	for (struct e2b_rec *r = e->list; r; r = r->next)
		if (!strcmp(r->id, id))
			return r;
	return NULL;
}

bool e2b_ci_default(struct e2b *e, const char *id, unsigned lang, const char *set,
		    char out[E2B_CI_CTX_ID + 1])
{
	bool ok = false;
	out[0] = '\0';
	if (lang >= E2B_CI_LANGS)
		return false;
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	if (r) {
		if (set && !r->dflt[lang][0])
			snprintf(r->dflt[lang], sizeof r->dflt[lang], "%s", set);
		snprintf(out, E2B_CI_CTX_ID + 1, "%s", r->dflt[lang]);
		ok = out[0] != '\0';
	}
	pthread_mutex_unlock(&e->mu);
	return ok;
}

void e2b_ci_default_forget(struct e2b *e, const char *id, unsigned lang, const char *ctx)
{
	if (lang >= E2B_CI_LANGS)
		return;
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	if (r && !strcmp(r->dflt[lang], ctx))
		r->dflt[lang][0] = '\0';
	pthread_mutex_unlock(&e->mu);
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

/* Room for one more record (pruning the forgotten ones when full): 0, or
 * -1 when there is none. */
int e2b_rec_reserve(struct server *s)
{
	struct e2b *e = s->e2b;
	pthread_mutex_lock(&e->mu);
	if (e->n >= e->cap)
		prune(s, e);
	bool room = e->n < e->cap;
	if (room)
		e->n++;
	pthread_mutex_unlock(&e->mu);
	return room ? 0 : -1;
}

void e2b_rec_unreserve(struct e2b *e)
{
	pthread_mutex_lock(&e->mu);
	e->n--;
	pthread_mutex_unlock(&e->mu);
}

void e2b_rec_add(struct e2b *e, struct e2b_rec *r, const char *id, const char *token,
		 const uint8_t cred[MOAT_SHA256_LEN], const char *tmpl)
{
	snprintf(r->id, sizeof r->id, "%s", id);
	moat_sha256(token, strlen(token), r->token_hash);
	snprintf(r->token, sizeof r->token, "%s", token);
	memcpy(r->cred, cred, MOAT_SHA256_LEN);
	snprintf(r->tmpl, sizeof r->tmpl, "%s", tmpl);
	pthread_mutex_lock(&e->mu);
	r->next = e->list;
	e->list = r;
	pthread_mutex_unlock(&e->mu);
}

bool e2b_rec_token(struct e2b *e, const char *id, char out[E2B_TOKEN_HEX + 1])
{
	pthread_mutex_lock(&e->mu);
	struct e2b_rec *r = rec_of(e, id);
	if (r)
		memcpy(out, r->token, E2B_TOKEN_HEX + 1);
	pthread_mutex_unlock(&e->mu);
	return r != NULL;
}
