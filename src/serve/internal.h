/* serve: pieces of the HTTP service that are pure logic (envelope, limits,
 * handler frames, metrics) and are unit-tested without a server. */
#ifndef MOAT_SERVE_INTERNAL_H
#define MOAT_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"
#include "core/sha256.h"
#include "pool/pool.h"
#include "serve/serve.h"

#define SERVE_SCRIPT_OUTPUT_CAP (256u * 1024u)   /* Spin: stdout/stderr of a script */
#define SERVE_MAX_BODY (6u * 1024u * 1024u)      /* a request body */
#define SERVE_MAX_HANDLER_HEADERS 100u
#define SERVE_MAX_HEAD_BYTES (64u * 1024u)       /* the handler's head line */
#define SERVE_MAX_OUTPUT_DEFAULT (4u * 1024u * 1024u) /* serve.max.maxOutputBytes */

/* ---- operator limits (config "serve" object) ---- */
#define SERVE_NODE_MAX 32 /* a node's name: [a-z0-9-]{1,32} (ids.c) */
/* The Python zygote's lifetime by default (SECURITY.md row 61: how many
 * children share its layout and hash secret, and for how long), and the
 * most either may be set to (--pool-zygote-max-children/-max-age). */
#define SERVE_ZYGOTE_MAX_CHILDREN 100
#define SERVE_ZYGOTE_MAX_AGE_S 60
#define SERVE_ZYGOTE_CHILDREN_LIMIT 100000
#define SERVE_ZYGOTE_AGE_LIMIT_S 86400
/* relayed connections and DNS questions at once across the service's runs
 * (each run also has its own: 512 and 64), and the most one may set */
#define SERVE_MAX_RELAYS 4096
#define SERVE_MAX_DNS 256
#define SERVE_MAX_RELAYS_LIMIT 1048576
#define SERVE_MAX_DNS_LIMIT 65536
#define SERVE_E2B_MAX_KEYS 64 /* serve.e2b.keys */
#define SERVE_E2B_MAX_TEMPLATES 64 /* serve.e2b.templates */
#define SERVE_E2B_MAX_TEMPLATE_NAME 64 /* a name there: [a-z0-9_-]{1,64} */
struct serve_limits {
	uint64_t def_timeout_ms, max_timeout_ms;
	uint64_t def_memory_mb, max_memory_mb;
	double def_cpus, max_cpus;
	uint64_t def_pids, max_pids;
	bool allow_open_network;
	uint64_t max_response_bytes;
	uint64_t max_output_bytes; /* serve.max.maxOutputBytes: per stream, raw and escaped */
	/* "e2b": {"keys": [...]}: E2B API keys (e2b_ and 32-128 hex digits), each
	 * its own credential on /e2b (docs/E2B.md); their hashes */
	uint8_t e2b_keys[SERVE_E2B_MAX_KEYS][MOAT_SHA256_LEN];
	unsigned e2b_nkeys;
	/* "e2b": {"templates": {"name": "/abs/dir"}}: the roots E2B's templateID
	 * names (checked at start: absolute, a directory); "name\0dir\0..."
	 * (malloc'd, serve_limits_free), e2b_ntemplates pairs */
	char *e2b_templates;
	unsigned e2b_ntemplates;
	int pool; /* "pool": warm sandboxes per language; -1: not set */
	int pool_zygote; /* "poolZygote": 0 or 1; -1: not set */
	/* the zygote's lifetime: "poolZygoteMaxChildren" (children it makes)
	 * and "poolZygoteMaxAge" (seconds; kept here in ms), whichever first */
	unsigned pool_zygote_max_children;
	uint64_t pool_zygote_max_age_ms;
	/* across every run of the service at once (moat_relay_caps):
	 * "maxRelays" relayed connections, "maxDns" DNS questions */
	unsigned max_relays, max_dns;
	/* "sessions" (docs/SESSIONS.md): "max" (-1: not set: from memory),
	 * "idleTimeoutMs" (a session's default), "maxIdleTimeoutMs" and
	 * "maxLifetimeMs" (the most a session may ask; also its default
	 * lifetime) */
	int sessions_max;
	uint64_t session_idle_ms, session_max_idle_ms, session_max_life_ms;
	/* "sessions.maxCpuTimeMs": the most CPU time a session may ask to be
	 * capped at, and its default (0: no cap unless the session asks) */
	uint64_t session_max_cpu_ms;
	/* "sandboxes" (docs/SESSIONS.md, "Budgets"): "memoryMb" and "cpus"
	 * the live sandboxes reserve in all; 0: not set (from the host) */
	uint64_t sandboxes_memory_mb;
	double sandboxes_cpus;
	/* "sandboxes.pool": live sandboxes made ahead (-1: not set) */
	int sandboxes_pool;
	/* "sandboxes.networkPool": the pool's network: true shape (-1: not set) */
	int sandboxes_network_pool;
	/* "interruptGraceMs": how long an interrupted step's interpreter has
	 * to answer before it is killed; "onHangup": "interrupt" (false) or
	 * "finish" (true) a step whose streaming client hung up */
	uint64_t session_grace_ms;
	bool session_hangup_finish;
	/* "node": this node's name in every id (docs/scaling.md); "" not set */
	char node[SERVE_NODE_MAX + 1];
};
/* Built-in values (SERVE.md); max_cpus: online CPUs. */
void serve_limits_default(struct serve_limits *l);
/* The "serve" object of a config (JSON text; NULL: nothing to do). Unknown
 * keys, wrong types and a default above its max are SandboxConfigErrors. */
int serve_limits_parse(const char *json, struct serve_limits *l, struct moat_error *err);
/* What serve_limits_parse allocated (the templates); NULL-safe, idempotent. */
void serve_limits_free(struct serve_limits *l);
/* The root serve.e2b.templates names for name, else NULL (borrowed from l). */
const char *serve_limits_e2b_template(const struct serve_limits *l, const char *name);
/* Fills what the request did not give (MOAT_REQ_HAS_* in given) with the
 * defaults and refuses (SandboxPolicyError) what exceeds a max. */
int serve_limits_apply(const struct serve_limits *l, struct moat_request *req, unsigned given,
		       struct moat_error *err);

/* ---- the Spin envelope ---- */
enum serve_mode { SERVE_SCRIPT, SERVE_HANDLER };
struct serve_input { /* the request a handler gets */
	char *method, *path, *body;
	size_t body_len;
	char **headers; /* name, value, name, value... */
	size_t headers_count; /* pairs */
};
struct serve_envelope {
	struct moat_request *req; /* ready to run: bootstrap + files for handlers */
	enum serve_mode mode;
	bool kv_enabled;
	struct serve_input input;
};
/* Parses the body of POST /py/... (lang python) or /ts/... (typescript).
 * header_id: the request's X-Sandbox-Id (checked by serve_sandbox_id_header),
 * or NULL: the envelope may then omit "sandboxId", and if it has one, the two
 * must be the same. -1 with *err: SandboxConfigError (400), or *too_large
 * (413). */
int serve_envelope_parse(const char *body, size_t len, enum moat_language lang,
			 const char *header_id, struct serve_envelope *out, bool *too_large,
			 struct moat_error *err);
/* The X-Sandbox-Id header (SERVE.md "Sandbox id in a header"): count is how
 * many times the request has it, value the first. 0 when it may be used,
 * else -1 with *err (400): given twice, not a valid id (moat_sandbox_id_valid). */
int serve_sandbox_id_header(const char *value, unsigned count, struct moat_error *err);
void serve_envelope_free(struct serve_envelope *env);
/* Handler detection (SERVE.md "Mode"). */
bool serve_is_handler(const char *code, size_t len, enum moat_language lang);

/* ---- handler frames (SERVE.md "The handler protocol") ---- */
enum frame_state { FRAME_HEAD, FRAME_LEN, FRAME_BODY, FRAME_END, FRAME_FAILED };
struct frame_sink { /* what the parser reports */
	void (*head)(void *ctx, int status, char **headers, size_t count); /* headers: owned */
	void (*body)(void *ctx, const char *buf, size_t len);
	void *ctx;
};
struct frame_parser {
	enum frame_state state;
	struct moat_buf line; /* the head line or a length line being read */
	uint64_t remaining;   /* bytes of the current chunk */
	uint64_t body_total, body_cap;
	bool head_seen;
	char *error;          /* FRAME_FAILED: why (malloc'd, one line) */
	struct frame_sink sink;
};
void frame_init(struct frame_parser *p, uint64_t body_cap, const struct frame_sink *sink);
void frame_feed(struct frame_parser *p, const char *buf, size_t len);
/* The program ended: a parser not in FRAME_END fails ("no response"). */
void frame_finish(struct frame_parser *p);
void frame_free(struct frame_parser *p);
/* A handler's response header is passed on: name a token, value printable. */
bool frame_header_ok(const char *name, const char *value);
/* Headers moat sets itself (framing, hop-by-hop): dropped. */
bool frame_header_dropped(const char *name);

/* ---- metrics ---- */
enum serve_route { R_PY, R_TS, R_V1_RUN, R_HEALTHZ, R_METRICS, R_KV, R_OTHER, R_SESSIONS,
		  R_SESSION, R_SESSION_RUN, R_SESSION_CTL /* /pause, /resume */, R_SESSION_INTERRUPT,
		  R_SANDBOXES, R_E2B /* /e2b/... (docs/E2B.md) */, R__COUNT };
enum serve_outcome {
	O_OK, O_ERROR, O_TIMEOUT, O_OOM, O_KILLED, O_DISCONNECTED, O_BAD_REQUEST,
	O_UNAUTHORIZED, O_REJECTED, O_UNAVAILABLE, O__COUNT
};
#define SERVE_LANGS (MOAT_LANG__COUNT + 1) /* + "none" */
#define SERVE_BUCKETS 14
struct serve_metrics {
	pthread_mutex_t mu;
	uint64_t requests[R__COUNT][SERVE_LANGS][O__COUNT];
	uint64_t buckets[R__COUNT][SERVE_BUCKETS + 1]; /* last: +Inf */
	double sum[R__COUNT];
	uint64_t count[R__COUNT];
	int64_t in_flight, queued;
	uint64_t rejected;
	/* the memory budgets of answers (server.c): bytes of /v1/run and
	 * script results reserved, handler response bytes waiting for their
	 * client, requests refused because the result budget was full */
	int64_t result_bytes, stream_bytes;
	uint64_t result_rejected;
	uint64_t handler_bodies_dropped; /* a 204/205/304 handler response's body */
};
const char *serve_route_name(enum serve_route r);
/* The route's path template for the access log ("/v1/kv/{id}"). */
const char *serve_route_template(enum serve_route r);
const char *serve_outcome_name(enum serve_outcome o);
void serve_metrics_init(struct serve_metrics *m);
void serve_metrics_record(struct serve_metrics *m, enum serve_route r, int lang,
			  enum serve_outcome o, double seconds);
/* Prometheus text format; malloc'd. */
char *serve_metrics_render(struct serve_metrics *m);
/* Appends the relay caps' gauges and counters (moat_serve_relays,
 * moat_serve_relay_limit, moat_serve_relay_refused_total; kind "tcp" and
 * "dns"). */
void serve_metrics_relays(struct moat_relay_caps *c, struct moat_buf *b);

/* ---- log (log.c) ---- */

/* Lines are queued (bounded in bytes) and written by one thread of the
 * log's: a log reader that stalls never blocks the caller; a line that
 * does not fit is dropped and counted. */
struct log_ring;
struct serve_log {
	bool json;
	struct log_ring *ring; /* NULL: not started (lines go nowhere) */
};
/* Starts the writer on f's fd (stdio's buffer flushed first). */
int serve_log_init(struct serve_log *l, FILE *f, bool json, struct moat_error *err);
/* Gives the queued lines a bounded time (2 s) to be written, then stops. */
void serve_log_destroy(struct serve_log *l);
/* Lines dropped so far because the queue was full. */
uint64_t serve_log_dropped(struct serve_log *l);
void serve_log_ts(struct moat_buf *b);
void serve_log_write(struct serve_log *l, const char *line, size_t len);
void serve_log_vnotice(struct serve_log *l, const char *level, const char *component,
		       const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
void serve_log_notice(struct serve_log *l, const char *level, const char *component,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- the warm pool (src/pool/; runs.c) ---- */
/* pool_start with want sandboxes per kind prewarmed with opts and the
 * Spin requests' limits, warnings to log; no prewarm while
 * saturated(sat_ctx) says every run slot is taken or the runs fill the
 * CPUs (then only the zygote's children are made). */
int serve_pool_start(struct pool **out, unsigned want, bool zygote,
		     const struct moat_run_options *opts,
		     const struct serve_limits *limits, struct serve_log *log, bool (*saturated)(void *ctx),
		     void *sat_ctx, struct moat_error *err);
/* moat_run, in a sandbox of p's when it has one for req (p may be NULL),
 * up to its result: the result is final once pid 1 has sent the program's
 * status with nothing else of the run alive, and pid 1's own exit (the
 * namespaces' teardown) may still be under way. The sandbox stays in *l
 * until serve_pool_end, called after the answer is out and before the
 * request's run slot is released. */
int serve_pool_run(struct pool *p, const struct moat_request *req,
		   const struct moat_run_options *opts, struct pool_lease *l,
		   struct moat_result **out, struct moat_error *err);
/* The run of serve_pool_run's *l (rc: its return) ends: pid 1 killed if
 * still there and reaped (so no process of the run is left), then the
 * sandbox back to p, which removes its cgroup leaves in the background. */
void serve_pool_end(struct pool *p, struct pool_lease *l, int rc);

/* ---- the live sandboxes' budgets (budget.c; docs/SESSIONS.md) ---- */
/* the default CPU budget, in CPUs this process may use: a session's cpus
 * is a ceiling (its cgroup quota), not a use; idle ones use none */
#define SERVE_SANDBOX_CPU_OVERCOMMIT 4
struct serve_budget {
	pthread_mutex_t mu;
	uint64_t memory_mb, memory_reserved; /* MiB */
	uint64_t cpus_milli, cpus_reserved;  /* thousandths of a CPU */
	uint64_t refused[2];                 /* memory, cpus */
};
/* The default memory budget: half of MemTotal less the run slots' share
 * (slots x slot_mb), at least floor_mb. */
uint64_t serve_budget_default_memory_mb(unsigned slots, uint64_t slot_mb, uint64_t floor_mb);
void serve_budget_init(struct serve_budget *b, uint64_t memory_mb, double cpus);
/* Reserves memory_mb and cpus: 0, or -1 past a budget with *why (malloc'd,
 * may be NULL out of memory) naming it, for a 503 ServerBusy. */
int serve_budget_reserve(struct serve_budget *b, uint64_t memory_mb, double cpus, char **why);
void serve_budget_release(struct serve_budget *b, uint64_t memory_mb, double cpus);
/* {"memoryMb":{"reserved","total"},"cpus":{"reserved","total"}} */
void serve_budget_json(struct serve_budget *b, struct moat_buf *out);
void serve_budget_metrics(struct serve_budget *b, struct moat_buf *out);

/* ---- what the tables share (ids.c) ---- */
/* An id: a 4-byte prefix ("ses_", "sbx_"), the node's name (1-32 of
 * [a-z0-9-]), "_", 32 hex digits (128 random bits); docs/scaling.md */
#define SERVE_ID_HEX 32
#define SERVE_ID_LEN (4 + SERVE_NODE_MAX + 1 + SERVE_ID_HEX) /* the longest */
int64_t serve_wall_ms(void); /* CLOCK_REALTIME */
/* Appends ,"key":"<RFC 3339 UTC with milliseconds>". */
void serve_put_time(struct moat_buf *b, const char *key, int64_t ms);
bool serve_ct_equal(const void *a, const void *b, size_t n);
/* The node's name: [a-z0-9-]{1,32}; its default (a digest of the host's
 * name, "n" + 8 hex digits); serve_node_set before any thread starts
 * (-1: not a valid name); the name ("node" until set). */
bool serve_node_name_valid(const char *name, size_t n);
void serve_node_default(char out[SERVE_NODE_MAX + 1]);
int serve_node_set(const char *name);
const char *serve_node(void);
/* An id of this node with that prefix. */
bool serve_id_valid(const char *id, const char *prefix);
/* An id of that form naming another node: true, its name in node. */
bool serve_id_elsewhere(const char *id, const char *prefix, char node[SERVE_NODE_MAX + 1]);
/* A new id of this node, the rest of out zeroed. */
int serve_new_id(char out[SERVE_ID_LEN + 1], const char *prefix);
/* An id inside one sandbox (a code context's): the 4-byte prefix and 32 hex
 * digits, no node (its sandbox's id names that). */
#define SERVE_LOCAL_ID_LEN (4 + SERVE_ID_HEX)
int serve_new_local_id(char out[SERVE_LOCAL_ID_LEN + 1], const char *prefix);
bool serve_local_id_valid(const char *id, const char *prefix);

/* ---- sessions (sessions.c; docs/SESSIONS.md) ---- */
#define SERVE_SESSION_ID_LEN SERVE_ID_LEN /* "ses_<node>_" + 32 hex digits, at most */
#define SERVE_SESSIONS_LIMIT 4096 /* --max-sessions, serve.sessions.max at most */
#define SERVE_SESSIONS_AUTO_MAX 64 /* the default from memory at most */
enum { SERVE_SES_KILL_TIMEOUT, SERVE_SES_KILL_OOM, SERVE_SES_KILL_SECCOMP,
       SERVE_SES_KILL_CRASH, SERVE_SES_KILL_EXIT, SERVE_SES_KILL_CANCELLED,
       SERVE_SES_KILL_CPU_TIME, SERVE_SES_KILL__COUNT };
struct serve_sessions_config {
	unsigned max; /* 0: sessions off (serve_sessions_start makes none) */
	const struct moat_run_options *opts; /* the sessions' sandboxes; lives as long */
	struct serve_budget *budget; /* each live session's reservation; lives as long */
	uint64_t max_cpu_ms; /* serve.sessions.maxCpuTimeMs: a session's cap at most (0: none) */
	uint64_t grace_ms;  /* of an interrupt (0: POOL_SESSION_GRACE_MS) */
	bool hangup_finish; /* a client's hang-up lets the step finish */
};
struct serve_sessions;
struct serve_session;
/* Starts the session thread (*out NULL when cfg->max is 0). */
int serve_sessions_start(struct serve_sessions **out, const struct serve_sessions_config *cfg,
			 struct moat_error *err);
/* Ends every session (a running step is cancelled, waited for up to 10 s)
 * and the session thread; NULL-safe. */
void serve_sessions_stop(struct serve_sessions *ss);
unsigned serve_sessions_max(const struct serve_sessions *ss);
bool serve_session_id_valid(const char *id);
/* A new session for cred, its sandbox made by the session thread (req:
 * prepared, borrowed until the call returns), its driver's start waited
 * for on the caller's thread (per: its cancel_fd and hangup_fd end that
 * wait, as a step's; may be NULL). 0 with *answer (the 201's JSON); -2:
 * --max-sessions live, or stopping (503 ServerBusy); -1: *err. */
struct serve_session_params {
	uint64_t idle_ms, life_ms;
	uint64_t max_cpu_ms; /* maxCpuTimeMs: 0 none */
	bool on_idle_pause;  /* onIdle "pause": the idle timeout pauses, not ends */
};
/* -2 also when the live sandboxes' budget (serve.sandboxes) cannot hold
 * its memoryMb and cpus: *err names the budget. A session whose CPU no
 * cgroup bounds is frozen between its steps (warnings say so). */
int serve_sessions_create(struct serve_sessions *ss, const uint8_t cred[MOAT_SHA256_LEN],
			  const struct moat_request *req, const struct serve_session_params *p,
			  const struct moat_run_options *per, char **answer,
			  struct moat_error *err);
/* POST .../pause (pause) and .../resume: every process of the session
 * frozen (thawed): 0 with its "session" object in b; -1: a step runs
 * (409); -2: gone (410, *gone the sentence); -3: the freeze failed, the
 * session is killed (*err). A step on a paused session resumes it. */
int serve_session_pause(struct serve_sessions *ss, struct serve_session *x, bool pause,
			struct moat_buf *b, char **gone, struct moat_error *err);
/* The session id names for cred (a reference: serve_session_put), or NULL:
 * none, another credential's or forgotten (404 alike). */
struct serve_session *serve_sessions_get(struct serve_sessions *ss, const char *id,
					 const uint8_t cred[MOAT_SHA256_LEN]);
void serve_session_put(struct serve_sessions *ss, struct serve_session *x);
/* NULL while live, else the 410's sentence (malloc'd). */
char *serve_session_gone(struct serve_sessions *ss, struct serve_session *x);
/* Takes the session for one step: 0; -1: a step runs (409); -2: gone (410,
 * *gone the sentence, malloc'd). serve_session_end after. */
int serve_session_begin(struct serve_sessions *ss, struct serve_session *x, char **gone);
int serve_session_step(struct serve_sessions *ss, struct serve_session *x,
		       const struct moat_request *step, const struct moat_run_options *per,
		       struct moat_result **res, char **extra, struct moat_error *err);
void serve_session_end(struct serve_sessions *ss, struct serve_session *x);
enum moat_language serve_session_language(const struct serve_session *x);
/* The session's JSON object into b (full: GET's, else a step's "session"). */
void serve_session_json(struct serve_sessions *ss, struct serve_session *x, struct moat_buf *b,
			bool full);
/* DELETE: ends it, its sandbox gone before it returns: 0; -1: already gone
 * (*gone: the sentence). */
int serve_session_delete(struct serve_sessions *ss, struct serve_session *x, char **gone);
/* POST .../interrupt: the running step interrupted (SIGINT to its
 * interpreter, killed past the grace): 1; 0: no step runs; -1: gone
 * (*gone: the sentence). */
int serve_session_interrupt(struct serve_sessions *ss, struct serve_session *x, char **gone);
void serve_sessions_metrics(struct serve_sessions *ss, struct moat_buf *b);

/* ---- live sandboxes (sandboxes.c; docs/SANDBOXES.md) ---- */
#define SERVE_SBX_ID_LEN SERVE_ID_LEN /* "sbx_<node>_" + 32 hex digits, at most */
#define SERVE_SBX_LIMIT 4096 /* --max-sandboxes at most */
#define SERVE_SBX_POOL_MAX 16 /* --sandbox-pool at most */
/* the pool's shapes: moat's default create, and it with network: true
 * (E2B's default, allow_internet_access) */
#define SERVE_SBX_POOL_SHAPES 2
#define SERVE_SBX_POOL_DEFAULT 0
#define SERVE_SBX_POOL_NETWORK 1
/* the bounds of the sandbox routes (docs/SANDBOXES.md, "Bounds") */
#define SERVE_SBX_MAX_FILE (1024ull * 1024 * 1024) /* a PUT file's bytes */
#define SERVE_SBX_MAX_ENTRIES 10000u /* a listing's entries */
#define SERVE_SBX_MAX_DEPTH 32u      /* a listing's depth */
#define SERVE_SBX_MAX_ARGS 1000u     /* a process's argv, its env */
#define SERVE_SBX_MAX_META 64u       /* metadata pairs */
#define SERVE_SBX_MAX_META_KEY 128u
#define SERVE_SBX_MAX_META_VALUE 1024u
struct serve_sbxs_config {
	unsigned max; /* live at once; 0: sandboxes off */
	const struct moat_run_options *opts; /* their sandboxes'; lives as long */
	uint64_t max_life_ms; /* the most a lifetime may be, extensions included */
	/* each live sandbox's memoryMb and cpus reserved here, with the
	 * sessions' (budget.c); NULL: none */
	struct serve_budget *budget;
	/* the pool (docs/SANDBOXES.md, "The pool"): per shape, target
	 * sandboxes kept made from key (a create's request text: the
	 * service's defaults, prepared with pool_defaults; NULL: none), each
	 * reserving from budget while it waits; name: its /metrics label;
	 * warnings to log (may be NULL) */
	struct {
		unsigned target;
		const char *key, *name;
	} pools[SERVE_SBX_POOL_SHAPES];
	struct moat_request_defaults pool_defaults;
	struct serve_log *log;
};
struct serve_sbxs;
struct serve_sbx;
struct live_watch;
struct serve_ctxs;
struct live;
int serve_sbxs_start(struct serve_sbxs **out, const struct serve_sbxs_config *cfg,
		     struct moat_error *err);
/* Ends every sandbox (all killed at once) and the reaper; NULL-safe. */
void serve_sbxs_stop(struct serve_sbxs *ss);
unsigned serve_sbxs_max(const struct serve_sbxs *ss);
bool serve_sbx_id_valid(const char *id);
/* A new sandbox for cred (req: prepared, taken; meta: 2 x meta_count
 * malloc'd strings, taken): 0 and *out (a reference); -2 (503): the most
 * are live, past a budget (serve.sandboxes, named in *err), or stopping;
 * -1: *err. rootfs: the operator's root for this one sandbox (an E2B
 * template, borrowed for the service's life), or NULL: the service's.
 * key: the text req was prepared from with no X-Sandbox-Id, or NULL: a
 * sandbox of the pool is taken only when key is one of the pool's shapes'
 * exactly (and rootfs NULL); else one is made. */
int serve_sbx_create(struct serve_sbxs *ss, const uint8_t cred[MOAT_SHA256_LEN],
		     struct moat_request *req, const char *key, uint64_t life_ms,
		     uint64_t idle_ms, char **meta, size_t meta_count, const char *rootfs,
		     struct serve_sbx **out, struct moat_error *err);
/* The pool's figures for one shape (SERVE_SBX_POOL_*) for
 * /healthz?detail=1: {"target","ready","hits","misses","fillFailures",
 * "lastError"} (ss may be NULL: nothing). */
void serve_sbxs_pool_json(struct serve_sbxs *ss, unsigned shape, struct moat_buf *b);
/* The sandbox id names for cred (a reference), or NULL (404 alike:
 * none, another credential's, forgotten). */
struct serve_sbx *serve_sbx_get(struct serve_sbxs *ss, const char *id,
				const uint8_t cred[MOAT_SHA256_LEN]);
void serve_sbx_put(struct serve_sbxs *ss, struct serve_sbx *x);
struct live *serve_sbx_live(struct serve_sbx *x);
/* Its code contexts (contexts.h; freed with it), its memoryMb. */
struct serve_ctxs *serve_sbx_ctxs(struct serve_sbx *x, uint64_t *memory_mb);
const char *serve_sbx_id(const struct serve_sbx *x);
/* A request uses it (its idle clock stands still until serve_sbx_end):
 * NULL, or the 410's sentence (malloc'd) when it is dead (then no _end). */
char *serve_sbx_begin(struct serve_sbxs *ss, struct serve_sbx *x);
/* begin thaws a frozen one (and resumes a paused one: any request does);
 * end freezes it again once no request is in flight where no cgroup quota
 * bounds its CPU (docs/SANDBOXES.md, "Pause, resume and CPU time"). */
void serve_sbx_end(struct serve_sbxs *ss, struct serve_sbx *x);
char *serve_sbx_gone(struct serve_sbxs *ss, struct serve_sbx *x);
/* onIdle "pause" (else the idle timeout ends it) and maxCpuTimeMs (0:
 * none; reaching it ends it), set once made. */
void serve_sbx_set_accounting(struct serve_sbxs *ss, struct serve_sbx *x, bool on_idle_pause,
			      uint64_t max_cpu_ms);
/* Pauses (every process frozen, memory kept) or resumes it: 0; -1 (409) a
 * pause while a request is in flight on it; -2 dead (*gone). */
int serve_sbx_pause(struct serve_sbxs *ss, struct serve_sbx *x, bool pause, char **gone);
/* Paused (POST .../pause or onIdle "pause"), not yet resumed. */
bool serve_sbx_paused(struct serve_sbxs *ss, struct serve_sbx *x);
/* Its lifetime ends ms from now, capped at max_life_ms from its making:
 * 0; 1: capped; -1: dead (*gone). */
int serve_sbx_extend(struct serve_sbxs *ss, struct serve_sbx *x, uint64_t ms, char **gone);
/* ms until the end of its lifetime (0 when dead or past). */
int64_t serve_sbx_left_ms(struct serve_sbxs *ss, struct serve_sbx *x);
/* Ends it, out of the table, nothing of it left when this returns. */
void serve_sbx_delete(struct serve_sbxs *ss, struct serve_sbx *x);
void serve_sbx_json(struct serve_sbxs *ss, struct serve_sbx *x, struct moat_buf *b);
/* Its kept directory watches (E2B's polling watchers, e2b_envd.c): at most
 * LIVE_MAX_WATCHES with the streamed ones (live_watch_open's bound), each
 * named by a new random id ("wch_" and 32 hex digits), closed when the
 * sandbox ends. keep takes w: 0 and *id; -1 no randomness, -2 the sandbox
 * ended (w closed either way). lend: w for one request at a time (why 0),
 * else NULL and why ENOENT (none such) or EBUSY (lent); return gives it
 * back, closed unless keep (and kept only while the sandbox lives and
 * the id was not dropped meanwhile). drop: 0, or -1 none such. */
int serve_sbx_watch_keep(struct serve_sbxs *ss, struct serve_sbx *x, struct live_watch *w,
			 char id[SERVE_LOCAL_ID_LEN + 1]);
struct live_watch *serve_sbx_watch_lend(struct serve_sbxs *ss, struct serve_sbx *x,
					const char *id, int *why);
void serve_sbx_watch_return(struct serve_sbxs *ss, struct serve_sbx *x, const char *id,
			    struct live_watch *w, bool keep);
int serve_sbx_watch_drop(struct serve_sbxs *ss, struct serve_sbx *x, const char *id);
/* cred's live sandboxes whose metadata has every filter pair (2 x nfilter
 * strings), newest first, at most limit, after the id after (NULL: from
 * the first): {"sandboxes":[...],"next":id|null}. */
void serve_sbx_list(struct serve_sbxs *ss, const uint8_t cred[MOAT_SHA256_LEN],
		    char *const *filter, size_t nfilter, unsigned limit, const char *after,
		    struct moat_buf *b);
void serve_sbxs_metrics(struct serve_sbxs *ss, struct moat_buf *b);

/* The one-line "error" of a Spin script result (NULL on success). */
char *serve_script_error(const struct moat_result *res, const struct moat_request *req);
/* The outcome a finished run counts as. */
enum serve_outcome serve_run_outcome(const struct moat_result *res);

#endif
