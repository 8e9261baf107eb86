/* Counters of the service, rendered in the Prometheus text format. */
#include <string.h>

#include "serve/internal.h"

static const double bucket_le[SERVE_BUCKETS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
};

static const char *const route_names[R__COUNT] = {
	[R_PY] = "py", [R_TS] = "ts", [R_V1_RUN] = "v1_run", [R_HEALTHZ] = "healthz",
	[R_METRICS] = "metrics", [R_KV] = "kv", [R_OTHER] = "other",
	[R_SESSIONS] = "sessions", [R_SESSION] = "session", [R_SESSION_RUN] = "session_run",
	[R_SESSION_CTL] = "session_ctl",
	[R_SESSION_INTERRUPT] = "session_interrupt",
	[R_SANDBOXES] = "sandboxes", [R_E2B] = "e2b",
};

static const char *const outcome_names[O__COUNT] = {
	[O_OK] = "ok", [O_ERROR] = "error", [O_TIMEOUT] = "timeout", [O_OOM] = "oom",
	[O_KILLED] = "killed", [O_DISCONNECTED] = "disconnected", [O_BAD_REQUEST] = "bad_request",
	[O_UNAUTHORIZED] = "unauthorized", [O_REJECTED] = "rejected",
	[O_UNAVAILABLE] = "unavailable",
};

/* What the access log says for "path": the route's template, never what
 * the client put in the path (an id, a tenant's Spin route). */
static const char *const route_templates[R__COUNT] = {
	[R_PY] = "/py/{path}", [R_TS] = "/ts/{path}", [R_V1_RUN] = "/v1/run",
	[R_HEALTHZ] = "/healthz", [R_METRICS] = "/metrics", [R_KV] = "/v1/kv/{id}",
	[R_OTHER] = "/{unknown}", [R_SESSIONS] = "/v1/sessions",
	[R_SESSION] = "/v1/sessions/{id}", [R_SESSION_RUN] = "/v1/sessions/{id}/run",
	[R_SESSION_CTL] = "/v1/sessions/{id}/{pause,resume}",
	[R_SESSION_INTERRUPT] = "/v1/sessions/{id}/interrupt",
	[R_SANDBOXES] = "/v1/sandboxes", [R_E2B] = "/e2b/{path}",
};

const char *serve_route_template(enum serve_route r)
{
	return (unsigned)r < R__COUNT ? route_templates[r] : route_templates[R_OTHER];
}

const char *serve_route_name(enum serve_route r)
{
	return (unsigned)r < R__COUNT ? route_names[r] : "other";
}

const char *serve_outcome_name(enum serve_outcome o)
{
	return (unsigned)o < O__COUNT ? outcome_names[o] : "error";
}

static const char *lang_label(int lang)
{
	const struct moat_lang_info *li = lang >= 0 ? moat_lang_get((enum moat_language)lang) : NULL;
	return li ? li->name : "none";
}

void serve_metrics_init(struct serve_metrics *m)
{
	memset(m, 0, sizeof *m);
	pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_record(struct serve_metrics *m, enum serve_route r, int lang,
			  enum serve_outcome o, double seconds)
{
	if ((unsigned)r >= R__COUNT)
		r = R_OTHER;
	if ((unsigned)o >= O__COUNT)
		o = O_ERROR;
	size_t li = lang >= 0 && lang < MOAT_LANG__COUNT ? (size_t)lang : MOAT_LANG__COUNT;
	pthread_mutex_lock(&m->mu);
	m->requests[r][li][o]++;
	size_t b = 0;
	while (b < SERVE_BUCKETS && seconds > bucket_le[b])
		b++;
	m->buckets[r][b]++;
	m->sum[r] += seconds;
	m->count[r]++;
	if (o == O_REJECTED)
		m->rejected++;
	pthread_mutex_unlock(&m->mu);
}

/* One metric of the relay caps, a sample for each kind. */
static void relay_metric(struct moat_buf *b, const char *name, const char *type, const char *help,
			 const uint64_t v[MOAT_RELAY__KINDS])
{
	static const char *const kinds[MOAT_RELAY__KINDS] = { [MOAT_RELAY_TCP] = "tcp",
							      [MOAT_RELAY_DNS] = "dns" };
	moat_buf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (int k = 0; k < MOAT_RELAY__KINDS; k++)
		moat_buf_appendf(b, "%s{kind=\"%s\"} %llu\n", name, kinds[k],
				 (unsigned long long)v[k]);
}

void serve_metrics_relays(struct moat_relay_caps *c, struct moat_buf *b)
{
	struct moat_relay_caps_stats st;
	moat_relay_caps_stats(c, &st);
	uint64_t max[MOAT_RELAY__KINDS];
	for (int k = 0; k < MOAT_RELAY__KINDS; k++)
		max[k] = st.max[k];
	relay_metric(b, "moat_serve_relays", "gauge", "Connections relayed out of the host (tcp) "
		     "and DNS questions being resolved (dns) for all runs now.", st.active);
	relay_metric(b, "moat_serve_relay_limit", "gauge",
		     "The service-wide cap on them (--max-relays, --max-dns).", max);
	relay_metric(b, "moat_serve_relay_refused_total", "counter",
		     "Connections reset (the proxy: 503) and DNS questions answered SERVFAIL "
		     "because the cap was full.", st.refused);
}

char *serve_metrics_render(struct serve_metrics *m)
{
	struct moat_buf b = { 0 };
	pthread_mutex_lock(&m->mu);
	moat_buf_appendf(&b, "# HELP moat_serve_requests_total Requests answered, by route, "
			     "language and outcome.\n# TYPE moat_serve_requests_total counter\n");
	for (int r = 0; r < R__COUNT; r++)
		for (int l = 0; l < SERVE_LANGS; l++)
			for (int o = 0; o < O__COUNT; o++)
				if (m->requests[r][l][o])
					moat_buf_appendf(&b, "moat_serve_requests_total{route=\"%s\","
							     "language=\"%s\",outcome=\"%s\"} %llu\n",
							 route_names[r],
							 lang_label(l < MOAT_LANG__COUNT ? l : -1),
							 outcome_names[o],
							 (unsigned long long)m->requests[r][l][o]);
	moat_buf_appendf(&b, "# HELP moat_serve_request_duration_seconds Time from the request "
			     "to its answer.\n# TYPE moat_serve_request_duration_seconds histogram\n");
	for (int r = 0; r < R__COUNT; r++) {
		if (!m->count[r])
			continue;
		uint64_t cum = 0;
		for (int i = 0; i <= SERVE_BUCKETS; i++) {
			cum += m->buckets[r][i];
			if (i < SERVE_BUCKETS)
				moat_buf_appendf(&b, "moat_serve_request_duration_seconds_bucket{route="
						     "\"%s\",le=\"%g\"} %llu\n", route_names[r],
						 bucket_le[i], (unsigned long long)cum);
			else
				moat_buf_appendf(&b, "moat_serve_request_duration_seconds_bucket{route="
						     "\"%s\",le=\"+Inf\"} %llu\n", route_names[r],
						 (unsigned long long)cum);
		}
		moat_buf_appendf(&b, "moat_serve_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
				     "moat_serve_request_duration_seconds_count{route=\"%s\"} %llu\n",
				 route_names[r], m->sum[r], route_names[r],
				 (unsigned long long)m->count[r]);
	}
	moat_buf_appendf(&b, "# HELP moat_serve_in_flight Runs in progress.\n"
			     "# TYPE moat_serve_in_flight gauge\nmoat_serve_in_flight %lld\n"
			     "# HELP moat_serve_queued Requests waiting for a run slot.\n"
			     "# TYPE moat_serve_queued gauge\nmoat_serve_queued %lld\n"
			     "# HELP moat_serve_rejected_total Requests refused with 503 because "
			     "every slot and the queue were full.\n"
			     "# TYPE moat_serve_rejected_total counter\nmoat_serve_rejected_total %llu\n",
			 (long long)m->in_flight, (long long)m->queued,
			 (unsigned long long)m->rejected);
	moat_buf_appendf(&b, "# HELP moat_serve_result_bytes Bytes reserved for results being "
			     "made or sent (/v1/run, scripts).\n"
			     "# TYPE moat_serve_result_bytes gauge\nmoat_serve_result_bytes %lld\n"
			     "# HELP moat_serve_stream_bytes Streamed response bytes (handlers, NDJSON "
			     "/v1/run) waiting for "
			     "their client.\n"
			     "# TYPE moat_serve_stream_bytes gauge\nmoat_serve_stream_bytes %lld\n"
			     "# HELP moat_serve_result_budget_rejected_total Requests refused with "
			     "503 because the results in flight filled their budget.\n"
			     "# TYPE moat_serve_result_budget_rejected_total counter\n"
			     "moat_serve_result_budget_rejected_total %llu\n",
			 (long long)m->result_bytes, (long long)m->stream_bytes,
			 (unsigned long long)m->result_rejected);
	moat_buf_appendf(&b, "# HELP moat_serve_handler_bodies_dropped_total Handler responses "
			     "with status 204, 205 or 304 whose body was dropped.\n"
			     "# TYPE moat_serve_handler_bodies_dropped_total counter\n"
			     "moat_serve_handler_bodies_dropped_total %llu\n",
			 (unsigned long long)m->handler_bodies_dropped);
	pthread_mutex_unlock(&m->mu);
	return moat_buf_take(&b);
}
