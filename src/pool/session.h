/* A session's sandbox (docs/SESSIONS.md): one sandbox holding one live
 * interpreter (the driver runtime/python/moat_session.py or
 * runtime/js/session.cjs) that runs step after step in the same state.
 * Built on the runner like the pool's sandboxes; never shared, never
 * pooled, never reused. Thread-safe per object only where said. */
#ifndef MOAT_POOL_SESSION_H
#define MOAT_POOL_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "moat.h"

struct pool_session;

struct pool_session_config {
	/* prepared (moat_request_prepare): language python|javascript, limits,
	 * env, network, allowedHosts, sandboxId, kvEnabled, maxOutputBytes;
	 * borrowed for the call only */
	const struct moat_request *req;
	/* the service's options (runtime_dir, kv, cgroup parent...); borrowed
	 * while the session lives */
	const struct moat_run_options *opts;
	/* a backstop: the sandbox is killed after this (0: none) */
	uint64_t lifetime_ms;
	/* how long the driver may take to say ready */
	uint64_t ready_timeout_ms;
	/* a step's timeout or an interrupt sends SIGINT to the interpreter,
	 * which is killed only when it has not answered this long after
	 * (0: POOL_SESSION_GRACE_MS) */
	uint64_t interrupt_grace_ms;
	/* a step whose client hung up (per's hangup_fd) runs on to its end
	 * (false: it is interrupted as above) */
	bool hangup_finish;
};
#define POOL_SESSION_GRACE_MS 2000u

/* Creates and starts the session's sandbox with its driver and waits for
 * its ready frame. MUST be called on a thread that outlives the session:
 * pid 1's parent-death signal follows the creating thread (serve: its
 * session thread, never a connection's). On failure nothing is left. */
int pool_session_start(const struct pool_session_config *cfg, struct pool_session **out,
		       struct moat_error *err);

/* pool_session_start in two halves, so that a driver slow to start holds
 * up only its own creator: _spawn makes the sandbox (on the long-lived
 * thread, as above; it does not wait for the driver), _ready waits up to
 * ready_ms (0: 30 s) for its ready frame, on any thread; a
 * pool_session_kill ends that wait, and so do per's cancel_fd and
 * hangup_fd (per may be NULL). After a failed _ready the caller
 * stops the session. */
int pool_session_spawn(const struct pool_session_config *cfg, struct pool_session **out,
		       struct moat_error *err);
int pool_session_ready(struct pool_session *s, uint64_t ready_ms,
		       const struct moat_run_options *per, struct moat_error *err);

/* One step. step: prepared, the session's language, code + stdin + files +
 * timeout only (the rest is the session's). per: the step's cancel_fd,
 * hangup_fd, on_output and stdout flow control (may be NULL). On return 0:
 * *res is the run result (as moat_sandbox_wait's: stdout, stderr, caps,
 * exitCode, timedOut, killedBy, durationMs, cpuTimeMs of this step) and
 * *extra a malloc'd JSON object text with "error", "value",
 * "valueTruncated", "display" (valid JSON; the caller merges its keys into
 * the answer). A step that times out, is cancelled or whose sandbox dies
 * still returns 0 with its result; the session's state says what became of
 * it. <0 with err: the step could not start (the session is not live:
 * MOAT_ERR_... with why). Not concurrent with itself (the caller
 * serialises). */
int pool_session_run(struct pool_session *s, const struct moat_request *step,
		     const struct moat_run_options *per, struct moat_result **res, char **extra,
		     struct moat_error *err);

enum pool_session_state {
	POOL_SESSION_LIVE,
	POOL_SESSION_ENDED,  /* its interpreter exited (os._exit, process.exit) */
	POOL_SESSION_KILLED, /* timeout, oom, pids, seccomp, a crash, cancelled, protocol */
};
/* The state and, when not live, why (static: "timeout", "oom", "pids",
 * "seccomp", "crash", "cancelled", "protocol", "exit") and a sentence for
 * a 410 ("the session was killed: memory limit exceeded (256 MiB)"). Safe
 * from any thread. */
enum pool_session_state pool_session_state(const struct pool_session *s, const char **reason,
					   const char **sentence);
/* Between steps: when the sandbox died on its own (pid 1 ended: killed
 * from outside, the kernel, its interpreter gone), collects its end now
 * (pid 1's status read, nothing reaped) and marks the session over with
 * the reason, as a step that saw the end would have. true when the session
 * is (now or already) not live. Cheap while the sandbox lives (one poll of
 * its pidfd). Any thread, but never while a step of it may start: the
 * caller serialises it with pool_session_run (serve: under its table's
 * lock, only while no step holds the session); a running step or ready
 * wait makes it a no-op. */
bool pool_session_watch(struct pool_session *s);
/* The cgroup's memory in use now (bytes), -1 when unknown; CPU time used
 * in all (ms), -1 when unknown; steps run. Safe from any thread. */
int64_t pool_session_memory(const struct pool_session *s);
int64_t pool_session_cpu_ms(const struct pool_session *s);
unsigned pool_session_runs(const struct pool_session *s);
/* pool_session_cpu_ms is, while the session lives, its sandbox's CPU time
 * now (run_sandbox_cpu_ms: background work between steps counted), else
 * the last known. Whether a cgroup bounds its CPU (its cpus quota):
 * without, nothing bounds work left running between steps. */
bool pool_session_cpu_bounded(const struct pool_session *s);
/* Freezes (frozen) or thaws every process of the session's sandbox
 * (run_sandbox_freeze), keeping its memory: 0, or -1 with *err (not live,
 * or a step, a watch or another freeze holds it). A step thaws a frozen
 * session first (pool_session_run); the caller freezes it again after,
 * if it wants. Idempotent. */
int pool_session_freeze(struct pool_session *s, bool frozen, struct moat_error *err);
bool pool_session_frozen(const struct pool_session *s);
/* Interrupts a running step as its timeout would (SIGINT to the
 * interpreter, killed past the grace): true when a step was running. Safe
 * from any thread. */
bool pool_session_interrupt(struct pool_session *s);
/* Kills a running step (it returns with killedBy "cancelled") and the
 * sandbox. Safe from any thread, any number of times. */
void pool_session_kill(struct pool_session *s);
/* Kills (if live) and destroys, every process of it gone before it returns.
 * Any thread, once no step runs (pool_session_kill first to end one).
 * NULL-safe. */
void pool_session_stop(struct pool_session *s);

/* The checks of a driver's frames, a code context's too (src/serve/
 * contexts.c): the done frame of step seq (len bytes of reply), checked,
 * into *extra (the answer's keys: error, value, valueTruncated, display,
 * results, resultsTruncated, executionCount, interrupted; malloc'd JSON
 * object text) and res's exit code and warnings: false when it is not
 * one. A result frame's "result" ({isMain, data}: a JSON text of len
 * bytes) within the bounds of a done frame's results. */
bool pool_session_take_done(const char *reply, size_t len, unsigned seq, bool interrupted,
			    struct moat_result *res, char **extra);
bool pool_session_result_ok(const char *json, size_t len);

#endif
