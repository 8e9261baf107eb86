/* The runner's phases for sandboxes made ahead of their request or by
 * another process: what src/pool/ (warm sandboxes, the Python zygote)
 * uses, never an embedder (include/moat.h has the cold phases). Each is a
 * composition of the phases in runner/run.h, kept in supervisor.c with the
 * others, so that the order of a run is spelled in one file; the pool
 * decides which request goes where, the runner how a sandbox is made. */
#ifndef MOAT_RUNNER_SANDBOX_H
#define MOAT_RUNNER_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moat.h"

/* Creates and starts a warm sandbox (RUN_WARM) whose program is boot, a
 * bootstrap (the runtime shims' moat_pool.py / pool.cjs) that waits on its
 * stdin, locked down like any run, for one request. boot stays borrowed
 * until release; opts' cancel/hangup fds, on_output and stdout flow control
 * are ignored (the request brings its own). The thread that prewarms must
 * outlive the sandbox (pid 1's parent-death signal follows the creating
 * thread). */
int run_sandbox_prewarm(const struct moat_request *boot, const struct moat_run_options *opts,
			struct moat_sandbox **out, struct moat_error *err);
/* Hands a sandbox started ahead its one request (validated here; the
 * caller has checked it may take this sandbox, pool_refusal): frame is the
 * request as the bootstrap reads it (pool/warm.c; the sandbox owns it, also
 * on failure); per gives the request's cancel_fd, hangup_fd, on_output and
 * stdout flow control (may be NULL). req stays borrowed until release.
 * Then moat_sandbox_wait as for any run: the result has "pool": true,
 * durationMs and the timeout count from the delivery. */
int run_sandbox_deliver(struct moat_sandbox *sb, const struct moat_request *req,
			const struct moat_run_options *per, char *frame, size_t frame_len,
			struct moat_error *err);
/* The sandbox's memory in use now, from its cgroup (bytes), or -1 when it
 * has no memory cgroup. */
int64_t run_sandbox_memory(const struct moat_sandbox *sb);
/* A live sandbox (src/live/): boot's program (the agent) started with
 * the host's end of a SOCK_SEQPACKET pair in *ctl (the program's fd 3),
 * *made a result holding the limits and warnings of its making;
 * moat_sandbox_wait pumps it to its end, run_sandbox_session_kill ends it
 * from any thread. The thread that calls this must outlive the sandbox. */
int run_sandbox_start_live(const struct moat_request *boot, const struct moat_run_options *opts,
			   struct moat_sandbox **out, int *ctl, struct moat_result **made,
			   struct moat_error *err);
/* The sandbox's CPU time so far from its cgroup (ms), or -1. */
int64_t run_sandbox_cpu_ms(const struct moat_sandbox *sb);
/* pid 1 killed if it is still there, and reaped (waited for): after it
 * nothing of the run is alive. moat_sandbox_wait may return before pid 1
 * has exited (run_ended_alone); moat_sandbox_release does this too. sb may
 * be NULL. */
void run_sandbox_reap(struct moat_sandbox *sb);

/* How a zygote's child is made: make_pid1 hands the zygote the run's five
 * fds (stdin, stdout, stderr, report, sync: borrowed, the run closes its
 * copies) and record (the run's rlimits; its bytes go to the zygote as they
 * are) and returns pid 1's pidfd (the run owns it), or -1 with *err. */
typedef int (*run_make_pid1_fn)(void *ctx, const int *fds, size_t nfds, const void *record,
				size_t record_len, int *pidfd, struct moat_error *err);
enum run_adopt_start {
	RUN_ADOPT_START, /* started for req, whose frame is its stdin */
	RUN_ADOPT_AHEAD, /* started ahead of its request (req: the bootstrap):
			  * pid 2 locked down and waiting on its stdin; the
			  * timer and the thrash watch start with
			  * run_sandbox_deliver */
};
/* A zygote's child (RUN_ADOPTED; docs/design/pool-zygote.md): prepared
 * as moat_sandbox_create does, except that pid 1 is made by make_pid1 and
 * adopted, then started as `start` says. frame: req as a warm sandbox's
 * bootstrap reads it (the sandbox owns it, also on failure; NULL with
 * RUN_ADOPT_AHEAD). The caller has validated req and checked it against
 * itself with pool_refusal. Refused (MOAT_ERR_CONFIG, before make_pid1 is
 * called) for opts the zygote's template cannot reproduce: a rootfs, a
 * policy, the seccomp log or a workdir. Then _wait and _release as for
 * any run; the result has "pool": true. */
int run_sandbox_create_adopted(const struct moat_request *req, const struct moat_run_options *opts,
			       char *frame, size_t frame_len, run_make_pid1_fn make_pid1,
			       void *ctx, enum run_adopt_start start, struct moat_sandbox **out,
			       struct moat_error *err);
/* moat serve's Python zygote's own sandbox, created and started: a cold
 * run of boot whose filter is the zygote policy (opts' policy_path and
 * seccomp_log must be unset), whose /proc is not masked (a new /proc for
 * each sandbox it builds needs a fully visible one), without Landlock (it
 * would forbid those sandboxes' mounts), and where zygote_fd, a socket
 * that stays the caller's, becomes the program's fd 4 (no kvEnabled). */
int run_sandbox_start_zygote(const struct moat_request *boot, const struct moat_run_options *opts,
			     int zygote_fd, struct moat_sandbox **out, struct moat_error *err);

/* A session's sandbox (runner/session.c, docs/SESSIONS.md): boot (an
 * argv request: the driver) created and started as a cold run, with a
 * control socket whose other end the runner holds as the program's fd 3
 * (RUN_SESSION_FD); boot's timeout_ms is the session's lifetime, and boot
 * and opts stay borrowed until release (opts' cancel/hangup fds and
 * output options are each step's, given to it). The thread that starts it
 * must outlive it (pid 1's parent-death signal). */
#define RUN_SESSION_MAX_FRAME (16u * 1024u * 1024u)
int run_sandbox_start_session(const struct moat_request *boot, const struct moat_run_options *opts,
			      struct moat_sandbox **out, struct moat_error *err);
/* One exchange with the driver: frame (NULL: none, the wait for its
 * ready) written on the control socket, then the pump as for a run --
 * output capped at max_output (0: the default) a stream, per's on_output,
 * flow control, cancel and hangup (per NULL: none), timeout_ms (within the
 * lifetime; then the whole sandbox is killed) -- until the driver's next
 * frame or the sandbox's end. 0 with *res (the step's result: output,
 * caps, durationMs, the step's cpuTimeMs) and either *reply (the frame's
 * JSON text, malloc'd, NUL-terminated; at most RUN_SESSION_MAX_FRAME; the
 * output written before it drained into *res; exit code unset: the
 * reply's) or *reply NULL: the sandbox ended, *res is its end collected as
 * a run's (killedBy "timeout", "cancelled", "oom", "pids", "seccomp",
 * "signal", or "protocol" when the driver wrote anything but a frame of
 * at most RUN_SESSION_MAX_FRAME bytes; exitCode when the driver exited).
 * -1 with *err: the sandbox had ended before, or the pump failed (the
 * sandbox is killed). Not concurrent with itself. */
int run_sandbox_session_step(struct moat_sandbox *sb, uint64_t timeout_ms, uint64_t max_output,
			     const struct moat_run_options *per, const char *frame,
			     size_t frame_len, struct moat_result **res, char **reply,
			     size_t *reply_len, struct moat_error *err);
/* Kills the whole sandbox now; a running step then ends with the sandbox.
 * Any thread, any number of times, until release. */
void run_sandbox_session_kill(struct moat_sandbox *sb);
/* Between steps: whether the sandbox's pid 1 has ended (its pidfd is
 * readable, polled without waiting; nothing is reaped or read). The caller
 * then collects the end with run_sandbox_session_step (frame NULL), which
 * returns at once with its result. Not concurrent with a step. */
bool run_sandbox_session_ended(struct moat_sandbox *sb);

#endif
