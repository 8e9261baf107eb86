/* `moat serve`'s route table and dispatch: each request routed,
 * authenticated and size-checked from its headers, its body buffered
 * (capped, within the bodies' budget), then handed to its route; and its
 * end (the run's sandbox and slot released after the answer). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "serve/e2b.h"
#include "serve/http.h"

/* request bodies buffered at once, over all connections (512 × 6 MiB would
 * be 3 GiB): past it a request is answered 503 and its body dropped */
#define BODY_BUDGET (256ull * 1024 * 1024)

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
		const char *rest = url + 13 + strcspn(url + 13, "/");
		if (!strcmp(rest, "/pause") || !strcmp(rest, "/resume"))
			return R_SESSION_CTL;
		if (n > 10 && !strcmp(url + 13 + n - 10, "/interrupt"))
			return R_SESSION_INTERRUPT;
		return n > 4 && !strcmp(url + 13 + n - 4, "/run") ? R_SESSION_RUN : R_SESSION;
	}
	if (!strcmp(url, "/v1/sandboxes") || !strncmp(url, "/v1/sandboxes/", 14))
		return R_SANDBOXES;
	if (!strcmp(url, "/healthz"))
		return R_HEALTHZ;
	if (!strcmp(url, "/metrics"))
		return R_METRICS;
	return R_OTHER;
}

/* "/v1/sessions/<id><suffix>": the id into q->ses_id when the rest of the
 * path is suffix, else "" (no such session); an id of another node is
 * answered 421 (true, *r) */
static bool session_id_of(struct req *q, struct MHD_Connection *c, const char *url,
			  const char *suffix, enum MHD_Result *r)
{
	const char *p = url + 13;
	size_t n = strcspn(p, "/");
	q->ses_id[0] = '\0';
	if (n <= SERVE_SESSION_ID_LEN && !strcmp(p + n, suffix)) {
		memcpy(q->ses_id, p, n);
		q->ses_id[n] = '\0';
	}
	return srv_misdirected(q, c, q->ses_id, "ses_", r);
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

/* The first call: headers only. Anything that can be refused without the
 * body is refused here, before a byte of it is read. */
static enum MHD_Result on_headers(struct req *q, struct MHD_Connection *c, const char *url,
				  const char *method)
{
	struct server *s = q->s;
	q->route = route_of(url);
	/* an id is taken with its decoded length: one with a NUL in it is
	 * refused here, as the envelope and X-Sandbox-Id refuse it */
	if (srv_target_had_nul(c))
		return srv_fail(q, c, 400, "SandboxConfigError", O_BAD_REQUEST,
				"the request's path or query holds an encoded NUL (%00)");
	if (!strncmp(url, "/e2b/", 5)) { /* E2B's surface (docs/E2B.md): its own keys */
		q->route = R_E2B;
		return srv_e2b_route(q, c, url + 4, method);
	}
	bool get_route = q->route == R_HEALTHZ || q->route == R_METRICS;
	bool ses_route = q->route == R_SESSIONS || q->route == R_SESSION ||
			 q->route == R_SESSION_RUN || q->route == R_SESSION_CTL ||
			 q->route == R_SESSION_INTERRUPT;
	if (q->route == R_OTHER || (ses_route && !s->sessions) ||
	    (q->route == R_SANDBOXES && !s->sandboxes))
		return srv_fail(q, c, 404, "NotFound", O_BAD_REQUEST, "no such route");
	if (q->route == R_SANDBOXES) {
		if (!token_ok(s, c))
			return srv_fail(q, c, 401, "AuthenticationError", O_UNAUTHORIZED,
					"a valid bearer token is required (Authorization: Bearer ...)");
		struct moat_error err = { 0 };
		if (read_id_header(q, c, &err) < 0) {
			enum MHD_Result r = srv_fail_moat(q, c, &err);
			moat_error_clear(&err);
			return r;
		}
		return srv_sandboxes_route(q, c, url, method);
	}
	if (q->route == R_SESSION || q->route == R_SESSION_CTL) {
		/* answered from the headers: a body, if any, is not read */
		bool ctl = q->route == R_SESSION_CTL;
		if (ctl ? strcmp(method, "POST") != 0
			: strcmp(method, "GET") && strcmp(method, "DELETE"))
			return srv_fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
					ctl ? "this route takes POST" : "this route takes GET or DELETE");
		if (!token_ok(s, c))
			return srv_fail(q, c, 401, "AuthenticationError", O_UNAUTHORIZED,
					"a valid bearer token is required (Authorization: Bearer ...)");
		srv_caller_cred(s, c, q->cred);
		const char *rest = url + 13 + strcspn(url + 13, "/");
		enum MHD_Result mis;
		if (session_id_of(q, c, url, ctl ? rest : "", &mis))
			return mis;
		enum srv_session_op op = !ctl ? (!strcmp(method, "DELETE") ? SES_OP_DELETE : SES_OP_GET)
				       : rest[1] == 'p' ? SES_OP_PAUSE
							: SES_OP_RESUME;
		return srv_session_route(q, c, op);
	}
	const char *want = get_route ? "GET" : q->route == R_KV ? "DELETE" : "POST";
	if (strcmp(method, want) && !(get_route && !strcmp(method, "HEAD")))
		return srv_fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
				get_route	   ? "this route takes GET"
				: q->route == R_KV ? "this route takes DELETE"
						   : "this route takes POST");
	if (q->route == R_HEALTHZ) {
		/* the body stays what clients and load balancers compare whole;
		 * ?detail=1 adds the live sandboxes' budgets, to a caller that
		 * may see /metrics (the token, when there is one) */
		const char *d = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "detail");
		if (!d || strcmp(d, "1") || !s->have_budget || !token_ok(s, c))
			return srv_respond(q, c, 200, strdup(s->healthz), "application/json", NULL,
					   NULL);
		struct moat_buf b = { 0 };
		size_t hl = strlen(s->healthz);
		moat_buf_append(&b, s->healthz, hl - 2); /* without its "}\n" */
		moat_buf_append(&b, ",\"sandboxes\":", 13);
		serve_budget_json(&s->budget, &b);
		if (s->sandboxes) {
			moat_buf_append(&b, ",\"sandboxPool\":", 15);
			serve_sbxs_pool_json(s->sandboxes, SERVE_SBX_POOL_DEFAULT, &b);
			moat_buf_append(&b, ",\"sandboxNetworkPool\":", 22);
			serve_sbxs_pool_json(s->sandboxes, SERVE_SBX_POOL_NETWORK, &b);
		}
		moat_buf_append(&b, "}\n", 2);
		char *body = moat_buf_take(&b);
		return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
	}
	if (!token_ok(s, c))
		return srv_fail(q, c, 401, "AuthenticationError", O_UNAUTHORIZED,
				"a valid bearer token is required (Authorization: Bearer ...)");
	if (q->route == R_SESSION_INTERRUPT) {
		srv_caller_cred(s, c, q->cred);
		enum MHD_Result mis;
		if (session_id_of(q, c, url, "/interrupt", &mis))
			return mis;
		return srv_session_interrupt_route(q, c);
	}
	if (q->route == R_SESSION_RUN) {
		srv_caller_cred(s, c, q->cred);
		enum MHD_Result mis;
		if (session_id_of(q, c, url, "/run", &mis))
			return mis;
		if (!serve_session_id_valid(q->ses_id))
			return srv_session_missing(q, c); /* before its body is read */
	} else if (q->route == R_SESSIONS) {
		srv_caller_cred(s, c, q->cred);
	}
	if (q->route == R_METRICS)
		return srv_respond(q, c, 200, srv_metrics_text(s), "text/plain; version=0.0.4", NULL, NULL);
	struct moat_error err = { 0 };
	if (read_id_header(q, c, &err) < 0) {
		enum MHD_Result r = srv_fail_moat(q, c, &err);
		moat_error_clear(&err);
		return r;
	}
	if (q->route == R_KV)
		return srv_kv_delete(q, c, url + 7);
	if (srv_length_over(c, SERVE_MAX_BODY))
		return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				"the request body is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

enum MHD_Result srv_on_request(void *cls, struct MHD_Connection *c, const char *url,
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
		q->up_fd = -1;
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
	if (*upload_data_size && q->e2b && (q->e2b->mp || q->e2b->defer_status || q->e2b->gz)) {
		/* a multipart upload's files, a gzip upload's bytes */
		srv_e2b_upload(q, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size && q->sbx_mp) {
		/* parts of a multipart upload: each to its file as it comes */
		srv_sandboxes_multipart(q, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size && q->up_fd >= 0) {
		/* a file's bytes go to it as they come, never kept */
		srv_sandboxes_upload(q, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
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
	srv_conn_deadline(s, c, false); /* the request is in: the run's timeout takes over */
	if (q->too_large)
		return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				"the request body is larger than 6 MiB");
	if (q->over_budget || q->body.oom)
		return srv_fail(q, c, 503, "ServerBusy", O_REJECTED,
				"too many request bodies are being received at once; retry later");
	if (q->e2b)
		return srv_e2b_body(q, c);
	if (q->route == R_SANDBOXES)
		return srv_sandboxes_body(q, c);
	if (q->route == R_SESSIONS)
		return srv_sessions_create_route(q, c);
	if (q->route == R_SESSION_RUN)
		return srv_session_run_route(q, c);
	return q->route == R_V1_RUN ? srv_v1_route(q, c) : srv_spin_route(q, c);
}

void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;
	srv_conn_deadline(cls, c, true); /* the next request on this connection */
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
	srv_sandboxes_multipart_free(q); /* MHD's post processor: before the connection goes */
	srv_req_unref(q);
	if (ending)
		serve_pool_end(s->pool, &lease, rc);
	if (slot)
		srv_release_slot(s);
}
