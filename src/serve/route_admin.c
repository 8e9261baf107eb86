/* `moat serve`'s operator routes: /metrics (the service's, the pool's and
 * the sessions'; also on the --metrics-listen listener, without the token)
 * and DELETE /v1/kv/{id}. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "serve/http.h"

/* The service's metrics and the pool's. */
char *srv_metrics_text(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t result_bytes = (int64_t)s->result_bytes;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->metrics.mu);
	s->metrics.result_bytes = result_bytes;
	s->metrics.stream_bytes = (int64_t)__atomic_load_n(&s->stream_bytes, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->metrics.mu);
	char *m = serve_metrics_render(&s->metrics);
	if (!m)
		return m;
	struct moat_buf b = { 0 };
	moat_buf_append(&b, m, strlen(m));
	free(m);
	moat_buf_appendf(&b, "# HELP moat_serve_log_lines_dropped_total Log lines dropped because "
			     "the log's reader fell behind (its queue was full).\n"
			     "# TYPE moat_serve_log_lines_dropped_total counter\n"
			     "moat_serve_log_lines_dropped_total %llu\n",
			 (unsigned long long)serve_log_dropped(&s->log));
	moat_buf_appendf(&b, "# HELP moat_serve_node_info This node's name, in its session and "
			     "sandbox ids (docs/scaling.md).\n"
			     "# TYPE moat_serve_node_info gauge\n"
			     "moat_serve_node_info{node=\"%s\"} 1\n", serve_node());
	serve_metrics_relays(s->relay_caps, &b);
	serve_sessions_metrics(s->sessions, &b);
	if (s->have_budget)
		serve_budget_metrics(&s->budget, &b);
	serve_sbxs_metrics(s->sandboxes, &b);
	if (s->pool)
		pool_render(s->pool, &b);
	return moat_buf_take(&b);
}

/* DELETE /v1/kv/<sandboxId>: retire an id's store. */
enum MHD_Result srv_kv_delete(struct req *q, struct MHD_Connection *c, const char *id)
{
	const struct moat_serve_options *o = q->s->o;
	if (o->kv_off)
		return srv_fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
				"this server runs without the key-value store (--no-kv)");
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTOFREE char *out = NULL;
	MOAT_AUTOFREE char *detail = NULL;
	size_t len;
	if (moat_sandbox_id_agree(q->header_id, id, strlen(id), "the path", &err) < 0 ||
	    moat_kv_admin(o->kv_store, "clear", id, strlen(id), NULL, &out, &len, &detail,
			  &err) < 0) {
		/* the client gets err (no host path), the log the store's own words */
		if (detail)
			serve_log_notice(&q->s->log, "warn", "kv", "DELETE /v1/kv/{id}: %s", detail);
		return srv_fail_moat(q, c, &err);
	}
	char *body = moat_format("%s\n", out);
	return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL)
		    : srv_fail(q, c, 503, "SandboxUnavailableError", O_UNAVAILABLE, "out of memory");
}

/* The --metrics-listen listener: GET (or HEAD) /metrics without the token,
 * 404 for every other path. Scrapes are neither logged nor counted. */
enum MHD_Result srv_on_metrics_listener(void *cls, struct MHD_Connection *c,
					const char *url, const char *method,
					const char *version, const char *upload_data,
					size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	(void)version;
	(void)upload_data;
	if (*con_cls) { /* a body after the answer: dropped */
		*upload_data_size = 0;
		return MHD_YES;
	}
	*con_cls = s;
	if (strcmp(url, "/metrics"))
		return srv_queue_body(c, 404, srv_error_json("NotFound", "this listener serves /metrics "
							      "only"),
				  "application/json", NULL, NULL);
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return srv_queue_body(c, 405, srv_error_json("MethodNotAllowed", "this route takes GET"),
				      "application/json", "Allow", "GET");
	return srv_queue_body(c, 200, srv_metrics_text(s), "text/plain; version=0.0.4", NULL, NULL);
}
