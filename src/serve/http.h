/* serve: the HTTP server's shared state (the server, a connection, a
 * request, a streamed response) and what its files give each other, listed
 * from the bottom up: each file calls only the ones above its own.
 * server.c starts and stops it; docs/ARCHITECTURE.md says who does what.
 * The pure logic's face, unit-tested without a server, is serve/internal.h. */
#ifndef MOAT_SERVE_HTTP_H
#define MOAT_SERVE_HTTP_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/core.h"
#include "core/ndjson.h"
#include "core/sha256.h"
#include "core/sys.h"
#include "serve/internal.h"
#include "serve/mhd_dl.h"

/* A client connection, for the request deadline (below). */
struct conn {
	int fd;
	int64_t deadline; /* ms (monotonic) by which the request must be in; 0: none */
	bool target_nul; /* the request target being read decodes to a NUL (unescape) */
	struct conn *prev, *next;
};

struct server {
	const struct moat_serve_options *o;
	struct serve_limits limits;
	struct serve_metrics metrics;
	struct MHD_Daemon *d;
	pthread_mutex_t mu; /* running, waiting, tickets, stopping, body_bytes */
	pthread_cond_t cv;
	unsigned running, waiting;
	/* the queue is first come, first served: a request that must wait
	 * takes the next ticket and is admitted when a slot is free and its
	 * ticket is the oldest one still waiting (admit) */
	uint64_t ticket_next, ticket_head;
	unsigned active; /* requests not yet answered and logged (their response may
			  * still be on its way after the run's slot is free) */
	uint64_t body_bytes;
	uint64_t result_bytes; /* reserved by results in flight (RESULT_BUDGET) */
	uint64_t stream_bytes; /* __atomic: handler bytes waiting for clients (STREAM_BUDGET) */
	bool stopping;
	int cancel_fd; /* eventfd: written when the grace period is over */
	bool auth;
	uint8_t token_hash[MOAT_SHA256_LEN];
	const char *healthz; /* /healthz's body: says how clients are authenticated */
	struct MHD_Daemon *metrics_d; /* --metrics-listen, or NULL */
	struct serve_log log;
	/* the request deadline: MHD's timeout only counts idle time, so a client
	 * that trickles a byte now and then would hold its thread forever */
	pthread_mutex_t conns_mu;
	pthread_cond_t conns_cv;
	struct conn *conns;
	bool watchdog_stop;
	pthread_t watchdog;
	bool have_watchdog;
	struct pool *pool; /* warm sandboxes, or NULL (--pool 0) */
	/* the CPUs the service and its finished runs used, averaged over
	 * about a second (under mu; cpu_busy): a warm interpreter made while
	 * they fill the CPUs only moves a cold start's work onto the refill
	 * thread, competing with the runs, so the pool holds it and requests
	 * run cold (docs/SERVE.md, "The pool") */
	double cpu_rate, cpu_last;
	int64_t cpu_at;
	double cpus; /* CPUs this process may use; MOAT_TEST_POOL_CPUS for tests */
	struct moat_relay_caps *relay_caps; /* shared by every run's relays */
	struct serve_sessions *sessions; /* NULL: sessions off (their routes are 404s) */
	struct moat_run_options ses_opts; /* the sessions' sandboxes' */
	struct serve_budget budget; /* the live sandboxes' memory and cpus (budget.c) */
	bool have_budget;
	struct serve_sbxs *sandboxes; /* NULL: live sandboxes off (their routes are 404s) */
	struct e2b *e2b; /* E2B's surface (e2b.h), with the live sandboxes */
};

/* A handler's response on its way from the worker to the connection. */
struct stream {
	struct frame_parser frame;
	bool head_ready, finished;
	int status;
	char **headers;
	size_t headers_count;
	struct moat_buf pending; /* body bytes not yet taken by MHD (in s->stream_bytes) */
	size_t pending_off;
	int resume_fd; /* eventfd: written when the client took some (the run's resume_fd) */
	bool abandoned; /* the response is gone: the rest is read and dropped */
	struct moat_result *res;
	struct moat_error err;
	bool run_failed;
	bool bodyless; /* 204, 205, 304: the handler's body is dropped */
	uint64_t dropped; /* bytes of it */
	bool ndjson; /* a streamed /v1/run (docs/SERVE.md, "Streaming"): pending holds lines */
	struct moat_ndjson nj;
	struct moat_request *req; /* the streamed run's request (freed with the req) */
};

struct req {
	struct server *s;
	pthread_mutex_t mu; /* refs, st */
	pthread_cond_t cv;
	int refs;
	enum serve_route route;
	int lang; /* -1: none */
	const char *mode; /* "script", "handler", NULL */
	bool is_post, done_headers, too_large, over_budget;
	uint64_t budget; /* bytes of s->body_bytes this request holds */
	uint64_t result_budget; /* bytes of s->result_bytes */
	struct moat_buf body;
	int64_t t0;
	uint64_t bytes_out;
	unsigned status;
	enum serve_outcome outcome;
	char method[16];
	char *header_id; /* X-Sandbox-Id, checked (serve_sandbox_id_header); NULL: none */
	char remote[INET6_ADDRSTRLEN + 8];
	int conn_fd; /* dup of the client socket while a run watches it */
	struct serve_envelope env;
	struct stream st;
	bool has_slot;
	/* the session routes: the caller's credential (the token's SHA-256, a
	 * unix peer's uid hashed), the id in the path, the session held */
	uint8_t cred[MOAT_SHA256_LEN];
	char ses_id[SERVE_SESSION_ID_LEN + 1];
	struct serve_session *ses;
	bool ses_busy; /* a step of it is ours (serve_session_end) */
	/* the sandbox routes (route_sandboxes.c): the sandbox held, whether
	 * this request keeps it busy, the operation, and a PUT file's upload */
	struct serve_sbx *sbx;
	bool sbx_busy;
	int sbx_op, sbx_pid;
	char ctx_id[40]; /* a code context's (route_contexts.c) */
	int ctx_op;
	char *sbx_path;
	int up_fd;
	uint64_t up_len;
	int up_errno;
	bool up_too_large;
	struct sbx_multipart *sbx_mp; /* a multipart POST .../files (route_sandboxes.c) */
	/* a run answered in this thread (run_script): its sandbox, ended by
	 * on_completed once the answer is out, before the slot is released */
	struct pool_lease lease;
	int lease_rc;
	bool has_lease;
	struct e2b_req *e2b; /* a request of E2B's surface (/e2b/..., e2b.h) */
};

/* ---- conn.c ---- */
size_t srv_unescape_target(void *cls, struct MHD_Connection *c, char *url);
bool srv_target_had_nul(struct MHD_Connection *c);
void srv_conn_deadline_in(struct server *s, struct MHD_Connection *c, int64_t ms);
void srv_conn_deadline(struct server *s, struct MHD_Connection *c, bool arm);
void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
		enum MHD_ConnectionNotificationCode code);
void *srv_watchdog(void *arg);
void srv_notice(struct server *s, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- reply.c ---- */
void srv_stream_drop(struct req *q);
/* A streamed answer's reader: up to max bytes of pending from *off into buf
 * (pending emptied once all of it was taken): the count, > 0; call it only
 * while *off < pending->len. */
ssize_t srv_pending_take(struct moat_buf *pending, size_t *off, char *buf, size_t max);
void srv_req_unref(struct req *q);
enum MHD_Result srv_queue_body(struct MHD_Connection *c, unsigned status, char *body,
		const char *ctype, const char *h1, const char *v1);
enum MHD_Result srv_respond(struct req *q, struct MHD_Connection *c, unsigned status, char *body,
		const char *ctype, const char *h1, const char *v1);
char *srv_error_json(const char *type, const char *msg);
bool srv_length_over(struct MHD_Connection *c, uint64_t max);
enum MHD_Result srv_fail(struct req *q, struct MHD_Connection *c, unsigned status, const char *type,
		enum serve_outcome outcome, const char *msg);
/* An id of prefix's form naming another node (docs/scaling.md): answered
 * 421 WrongNode naming both nodes, true with *r; else false. */
bool srv_misdirected(struct req *q, struct MHD_Connection *c, const char *id,
		     const char *prefix, enum MHD_Result *r);
enum MHD_Result srv_fail_moat(struct req *q, struct MHD_Connection *c,
		const struct moat_error *err);

/* ---- slots.c ---- */
void srv_release_slot(struct server *s);
void srv_service_options(struct server *s, struct moat_run_options *opts);
void srv_run_options(struct req *q, struct moat_run_options *opts);
bool srv_reserve_result(struct req *q, const struct moat_request *req);
enum MHD_Result srv_refuse_result(struct req *q, struct MHD_Connection *c);
void srv_watch_client(struct req *q, struct MHD_Connection *c);
enum MHD_Result srv_take_slot(struct req *q, struct MHD_Connection *c);
int srv_limits_fill(void *ctx, struct moat_request *req, unsigned given, struct moat_error *err);

/* ---- stream.c ---- */
size_t srv_pending_compact(struct req *q);
void srv_pending_added(struct req *q, size_t before);
void srv_stream_options(struct req *q, struct moat_run_options *opts, void (*fn)(void *,
		enum moat_stream, const char *, size_t));
int srv_start_worker(struct req *q, void *(*fn)(void *));
struct MHD_Response *srv_stream_response(struct req *q);
enum MHD_Result srv_stream_queue(struct req *q, struct MHD_Connection *c, struct MHD_Response *r,
		unsigned status, uint64_t timeout_ms);

/* ---- answer.c ---- */
void srv_put_key_str(struct moat_buf *b, const char *key, const char *s, size_t len);
void srv_fit_result(struct moat_result *res, const struct moat_request *req);
enum MHD_Result srv_respond_run(struct req *q, struct MHD_Connection *c, char *body);
enum MHD_Result srv_run_script(struct req *q, struct MHD_Connection *c,
		const struct moat_request *req, bool v1);
char *srv_session_answer(struct req *q, const char *json, const char *extra);

/* ---- route_spin.c ---- */
enum MHD_Result srv_spin_route(struct req *q, struct MHD_Connection *c);

/* ---- route_run.c ---- */
bool srv_wants_ndjson(struct MHD_Connection *c);
enum MHD_Result srv_run_ndjson(struct req *q, struct MHD_Connection *c, struct moat_request *req);
enum MHD_Result srv_v1_route(struct req *q, struct MHD_Connection *c);

/* ---- route_sessions.c ---- */
void srv_caller_cred(struct server *s, struct MHD_Connection *c, uint8_t out[MOAT_SHA256_LEN]);
enum MHD_Result srv_session_missing(struct req *q, struct MHD_Connection *c);
struct cJSON;
int srv_lifetime_key(struct cJSON *o, const char *key, uint64_t def, uint64_t max, uint64_t *out,
		struct moat_error *err);
/* "onIdle": "pause" (*pause) or "delete" (the default); removed from o. */
int srv_on_idle_key(struct cJSON *o, bool *pause, struct moat_error *err);
/* What a route's JSON body may hold (srv_json_body): the route as its
 * errors name it, its keys (NULL-terminated; NULL: any) and its doc. */
struct srv_body_spec {
	const char *route;
	const char *const *keys;
	const char *doc;
};
struct cJSON *srv_json_body(struct req *q, const struct srv_body_spec *spec,
			    struct moat_error *err);
enum MHD_Result srv_sessions_create_route(struct req *q, struct MHD_Connection *c);
enum MHD_Result srv_session_run_route(struct req *q, struct MHD_Connection *c);
enum srv_session_op { SES_OP_GET, SES_OP_DELETE, SES_OP_PAUSE, SES_OP_RESUME };
/* GET and DELETE /v1/sessions/{id}, POST .../pause and .../resume. */
enum MHD_Result srv_session_route(struct req *q, struct MHD_Connection *c, enum srv_session_op op);
enum MHD_Result srv_session_interrupt_route(struct req *q, struct MHD_Connection *c);

/* ---- route_sandboxes.c ---- */
struct meta_filter { /* ?metadata.<key>=<value>, at most 16 */
	char *kv[32];
	size_t n;
	bool bad;
};
enum MHD_Result srv_sandboxes_filter(void *cls, enum MHD_ValueKind kind, const char *key,
		const char *value);
enum MHD_Result srv_sandboxes_route(struct req *q, struct MHD_Connection *c, const char *url,
		const char *method);
void srv_sandboxes_upload(struct req *q, const char *data, size_t n);
/* "metadata" (detached from o): 2 x *count malloc'd strings, bounded. */
int srv_sandboxes_metadata(struct cJSON *o, char ***out, size_t *count, struct moat_error *err);
void srv_sandboxes_multipart(struct req *q, const char *data, size_t n);
void srv_sandboxes_multipart_free(struct req *q);
enum MHD_Result srv_sandboxes_body(struct req *q, struct MHD_Connection *c);
/* ---- route_contexts.c (docs/CONTEXTS.md): the sandbox q->sbx held busy;
 * rest: the URL from "/contexts" on ---- */
enum MHD_Result srv_contexts_route(struct req *q, struct MHD_Connection *c, const char *rest,
				   const char *method);
/* o: the request's body, a JSON object (route_sandboxes.c parsed it) */
enum MHD_Result srv_contexts_body(struct req *q, struct MHD_Connection *c, const struct cJSON *o);
/* Streams len bytes of fd (taken) from off, q->sbx with them (busy); range_of:
 * the file's size for a 206, UINT64_MAX for a 200. */
enum MHD_Result srv_sandboxes_send_fd(struct req *q, struct MHD_Connection *c, int fd, uint64_t off,
				      uint64_t len, uint64_t range_of);

/* ---- route_admin.c ---- */
char *srv_metrics_text(struct server *s);
enum MHD_Result srv_kv_delete(struct req *q, struct MHD_Connection *c, const char *id);
enum MHD_Result srv_on_metrics_listener(void *cls, struct MHD_Connection *c, const char *url,
		const char *method, const char *version, const char *upload_data,
		size_t *upload_data_size, void **con_cls);

/* ---- dispatch.c ---- */
enum MHD_Result srv_on_request(void *cls, struct MHD_Connection *c, const char *url,
		const char *method, const char *version, const char *upload_data,
		size_t *upload_data_size, void **con_cls);
void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		enum MHD_RequestTerminationCode toe);

#endif
