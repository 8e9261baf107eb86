/* Code contexts in a live sandbox (docs/CONTEXTS.md): several interpreters
 * (python, javascript, typescript) in one live sandbox (src/live/), each
 * with its own globals and working directory, all sharing the sandbox's
 * files and processes. A context is the session driver
 * (runtime/python/moat_session.py, runtime/js/session.cjs) started *through
 * the agent* as a process of the sandbox (live_exec with control: its fd 3
 * a unix stream socket whose other end, with its stdout and stderr pipes,
 * comes to this side), speaking the session step protocol (MOATSESS1
 * frames) on it. Every byte of it is untrusted (tenant code shares the
 * driver's process): frames bounded and checked as a session's are
 * (pool_session_check_*), a breach kills that context only.
 *
 * The face E2B's /execute and /contexts build on (src/serve/route_contexts.c
 * is the HTTP side). Thread-safe: any function from any thread; one
 * execute per context at a time (a second is EBUSY). */
#ifndef MOAT_SERVE_CONTEXTS_H
#define MOAT_SERVE_CONTEXTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

struct live;
struct serve_ctxs; /* one sandbox's contexts */
struct serve_ctx_step;

#define SERVE_CTX_ID_LEN 36 /* "ctx_" + 32 hex digits: 128 random bits */
#define SERVE_CTX_MAX 16    /* contexts per sandbox, at most */
#define SERVE_CTX_GRACE_MS 2000u /* an interrupt's grace, then the context is killed */
#define SERVE_CTX_READY_MS 30000u /* a driver's ready frame, at most */
#define SERVE_CTX_MAX_OUTPUT (1024u * 1024u) /* a step's stdout (and stderr), default */

struct serve_ctxs *serve_ctxs_new(void);
/* Kills every context's driver and frees them; waits for no step (a
 * step holds its own reference). NULL-safe. */
void serve_ctxs_free(struct serve_ctxs *cs);
bool serve_ctx_id_valid(const char *id);

/* A new context: its driver started in lv through the agent (language
 * "python" | "javascript" | "typescript" and their aliases as /v1/run's;
 * cwd under /sandbox or /tmp, NULL: /sandbox; memory_mb the sandbox's, for
 * the Python driver's RLIMIT_DATA: 0 none) and its ready frame awaited.
 * Appends its object {"id","language","cwd","executionCount","state"} to
 * out. Errors (err->sys_errno): EINVAL a bad language or cwd (400),
 * EAGAIN SERVE_CTX_MAX reached (409/503), ENOTCONN the sandbox is gone,
 * else the driver did not start (its sentence). */
int serve_ctx_create(struct serve_ctxs *cs, struct live *lv, const char *language,
		     const char *cwd, uint64_t memory_mb, struct moat_buf *out,
		     struct moat_error *err);
/* {"contexts":[obj,...]} */
void serve_ctx_list(struct serve_ctxs *cs, struct moat_buf *out);
/* Its object appended; ENOENT: no such context. */
int serve_ctx_get(struct serve_ctxs *cs, const char *id, struct moat_buf *out,
		  struct moat_error *err);
/* Its driver killed and a fresh one started (same id, language, cwd;
 * executionCount back to 0): its object appended. ENOENT: no such context. */
int serve_ctx_restart(struct serve_ctxs *cs, struct live *lv, const char *id,
		      struct moat_buf *out, struct moat_error *err);
/* Killed (a running step answers "the context was deleted") and
 * forgotten. ENOENT: no such context. */
int serve_ctx_delete(struct serve_ctxs *cs, struct live *lv, const char *id,
		     struct moat_error *err);
/* A running step interrupted (SIGINT to the driver's process group, killed
 * after the grace): 1; 0 no step runs; -1 ENOENT. */
int serve_ctx_interrupt(struct serve_ctxs *cs, struct live *lv, const char *id,
			struct moat_error *err);

/* ---- a step (execute) ---- */
struct serve_ctx_exec {
	const char *code;
	size_t code_len;
	uint64_t timeout_ms;  /* 0: 30 s; then interrupted, killed past the grace */
	uint64_t max_output;  /* stdout and stderr each, bytes kept (0: the default) */
	int client_fd;        /* the client's socket, or -1: a hang-up interrupts the step */
	bool hangup_finish;   /* a hang-up lets the step run on instead */
	bool stream;          /* the output is the events' only (the answer's stdout, stderr empty) */
};
/* Starts a step: EBUSY another step runs, ENOENT no such context,
 * ENOTCONN the context or the sandbox is gone (its sentence). */
int serve_ctx_step_begin(struct serve_ctxs *cs, struct live *lv, const char *id,
			 const struct serve_ctx_exec *ex, struct serve_ctx_step **out,
			 struct moat_error *err);
enum serve_ctx_ev {
	SERVE_CTX_EV_NONE,   /* nothing within the wait */
	SERVE_CTX_EV_STDOUT, /* *data, *len: a chunk of output */
	SERVE_CTX_EV_STDERR,
	SERVE_CTX_EV_RESULT, /* *data: a result's JSON {"isMain","data":{mime:...}} */
	SERVE_CTX_EV_ERROR,  /* *data: the step's error {"name","value","traceback"} */
	SERVE_CTX_EV_DONE,   /* the step's end: serve_ctx_step_answer */
};
/* The next event of the step, in the order it happened (output the driver
 * wrote before a display() comes before its result), waiting at most
 * wait_ms. *data is valid until the next call. After DONE, NONE forever. */
enum serve_ctx_ev serve_ctx_step_next(struct serve_ctx_step *st, int wait_ms, const char **data,
				      size_t *len);
/* After DONE: the answer, a JSON object: stdout, stderr, stdoutTruncated,
 * stderrTruncated, results, resultsTruncated, error, executionCount,
 * exitCode, timedOut, interrupted, killed (its driver was killed: the grace
 * passed, OOM, the step ended it), context {id, state ("idle" | "killed" |
 * "ended"), reason (why not idle, or null)}, durationMs, warnings. */
void serve_ctx_step_answer(struct serve_ctx_step *st, struct moat_buf *out);
/* Ends a step (a running one is interrupted first, as a hang-up would,
 * unless hangup_finish: then it is run to its end here). NULL-safe. */
/* Gives the context back once DONE was given (a no-op before, and after
 * the first call): a streamed step's context is free for the next step as
 * soon as its done line is queued, not when the response is freed (a
 * client that read it and sent its next step at once got a 409). */
void serve_ctx_step_release(struct serve_ctx_step *st);
void serve_ctx_step_end(struct serve_ctx_step *st);

#endif
