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
#include "priv/priv.h" /* MOAT_MAX_RLIMITS */

/* A pid 1 made by another process, a zygote (src/pool/zygote.c, from
 * run_sandbox_template_spawn below), for the supervisor to adopt (run_adopt): the fds it
 * is handed -- the child's ends of the channels of a run the supervisor
 * prepared (run_prepare), in this order -- and the record beside them. */
enum {
	MOAT_ZYGOTE_STDIN,  /* read end of the program's stdin */
	MOAT_ZYGOTE_STDOUT, /* write end of its stdout */
	MOAT_ZYGOTE_STDERR, /* write end of its stderr */
	MOAT_ZYGOTE_REPORT, /* pid 1's end of the report socket */
	MOAT_ZYGOTE_SYNC,   /* read end of the sync pipe */
	MOAT_ZYGOTE_NFDS
};

/* One record of the control socket, as a zygote takes it (run_sandbox_template_spawn): the
 * byte MOAT_ZYGOTE_RUN, then the rlimits of the run (what the supervisor's
 * run_prepare chose: its cgroup fallbacks and the file size), each applied
 * to the program as the lower of it and the template's. */
#define MOAT_ZYGOTE_RUN 'r'
struct moat_zygote_rlimit {
	int32_t resource;
	uint32_t zero;
	uint64_t value;
};
#define MOAT_ZYGOTE_MAX_RECORD (1 + MOAT_MAX_RLIMITS * sizeof(struct moat_zygote_rlimit))

/* The program's PATH; the interpreters, and an argv request's program, are
 * looked up in these directories. */
#define RUN_SANDBOX_PATH "/usr/local/bin:/usr/bin:/bin"
/* TypeScript: esbuild writes the program here, node runs it (prepare.c) */
#define RUN_TS_OUTPUT "/sandbox/.moat-main.mjs"
extern const char *const run_ts_flags[7];

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
/* Freezes (frozen) or thaws every process of the sandbox (runner/freeze.c:
 * SIGSTOP of each task of its pid namespace until two passes in a row
 * find the same tasks all stopped; SIGCONT to each). Works alike with or
 * without a cgroup, as root and rootless. A stopped task keeps its memory
 * and uses no CPU; SIGKILL still ends it. 0, or -1 with *err (the sandbox
 * has ended, /proc unreadable, or its tasks would not stop). Not
 * concurrent with itself. */
int run_sandbox_freeze(struct moat_sandbox *sb, bool frozen, struct moat_error *err);
/* The sandbox's CPU time so far (ms), background work included: its
 * cgroup's (cpuacct.usage / cpu.stat), else the sum of its tasks' /proc
 * stat times (their own and their reaped children's); -1 unknown. */
int64_t run_sandbox_cpu_ms(const struct moat_sandbox *sb);
/* Whether the sandbox's CPU is bounded by a cgroup (its cpus quota):
 * without, background work between requests is bounded by nothing. */
bool run_sandbox_cpu_bounded(const struct moat_sandbox *sb);
/* A live sandbox (src/live/): boot's program (the agent) started with
 * the host's end of a SOCK_SEQPACKET pair in *ctl (the program's fd 3),
 * *made a result holding the limits and warnings of its making;
 * moat_sandbox_wait pumps it to its end, run_sandbox_session_kill ends it
 * from any thread. The thread that calls this must outlive the sandbox. */
int run_sandbox_start_live(const struct moat_request *boot, const struct moat_run_options *opts,
			   struct moat_sandbox **out, int *ctl, struct moat_result **made,
			   struct moat_error *err);
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
/* Interrupt, don't kill: a step's timeout (or run_sandbox_session_interrupt)
 * sends SIGINT to the driver (pid 2, found through /proc from pid 1's host
 * pid), which answers its step as any other; only a driver that has not
 * answered grace_ms later is killed. 0 (the default): the timeout kills at
 * once. A step whose caller hung up (per's hangup_fd) is interrupted so
 * too, or with hangup_finish runs on to its end. Set between steps. */
void run_sandbox_session_set_grace(struct moat_sandbox *sb, uint64_t grace_ms,
				   bool hangup_finish);
/* Asks the running step to stop, as its timeout would (any thread; an ask
 * when no step runs is dropped at the next step's start). 0, or -1. */
int run_sandbox_session_interrupt(struct moat_sandbox *sb);
/* Whether the last step was interrupted (*asked: by
 * run_sandbox_session_interrupt, not its timeout). Not during a step. */
bool run_sandbox_session_interrupted(const struct moat_sandbox *sb, bool *asked);

/* A zygote's template (template.c; docs/design/pool-zygote.md): the run
 * every pid 1 of one zygote is made from, prepared once from req (the
 * language and environment of the runs it will serve; the caller checked
 * it with pool_refusal; borrowed until free) with tmpfs_bytes for /tmp and
 * /sandbox (0: the default) and runtime_dir bound (NULL or "": none), as
 * the supervisor's runs have them. own_tree: each child keeps the calling
 * process's tree (moat_plan_input.own_tree; a zygote in moat's own
 * sandbox), with /dev/pts, /dev/shm, /proc, /tmp and /sandbox mounted
 * anew, where the tree passes moat_tree_check_self; refused otherwise.
 * NULL with *err on failure. */
struct run_template;
struct run_template *run_sandbox_template_new(const struct moat_request *req,
					      unsigned long long tmpfs_bytes,
					      const char *runtime_dir, bool own_tree,
					      struct moat_error *err);
/* The program's environment (NULL-terminated "NAME=value"): what a cold
 * run's program starts with. */
char *const *run_sandbox_template_envp(const struct run_template *t);
/* Clones pid 1 of a run from the template with the run's fds (borrowed)
 * and record (MOAT_ZYGOTE_RUN, then the rlimits) into the new namespaces
 * (MOAT_RUN_NS_FLAGS), writes its id maps and returns its pid with
 * *pidfd. Returns 0 in the run's pid 2 only, locked down (moat_child_main
 * without a program). -EINVAL for a malformed record, -EBADF for a
 * missing fd, -errno when no pid 1 was made (or it was killed because its
 * maps could not be written; the caller reaps it). */
int run_sandbox_template_spawn(struct run_template *t, const int fds[MOAT_ZYGOTE_NFDS],
			       const void *record, size_t record_len, int *pidfd);
void run_sandbox_template_free(struct run_template *t);

#endif
