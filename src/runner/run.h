/* The supervisor side of one run (private to runner/): struct run owns
 * every resource of a run, and each phase below takes it one step further.
 * A failed phase leaves the run as it is; run_release frees whatever was
 * acquired, on every path. The order (supervisor.c):
 *
 *   moat_request_validate  validate.c  core's rules, then the network's;
 *                            nothing is acquired before the request passed
 *   run_prepare   prepare.c  result, network, seccomp BPF, privileges,
 *                            cgroups, program, environment, mount plan,
 *                            pipes, epoll, timer
 *   run_spawn     start.c    clone3 into new namespaces; id maps; network
 *                            attach; MOAT_SYNC_IDS; cgroup join
 *     or run_adopt start.c   pid 1 made by another process (a zygote) from
 *                            run_child_spec; MOAT_SYNC_IDS; cgroup join
 *   run_start     start.c    MOAT_SYNC_START (pid 1 forks the program),
 *                            wall-clock timer, network relays, stale-leaf
 *                            sweep, the supervisor's ends non-blocking and
 *                            watched
 *   run_pump      pump.c     relay output and stdin, answer the seccomp
 *                            listener, enforce the timeout, until pid 1 ends
 *   run_collect   collect.c  reap pid 1, decode how the program ended, outputs,
 *                            seccomp log, cgroup statistics, network log
 *   run_release   prepare.c  kill and reap a child still there, close, free
 */
#ifndef MOAT_RUNNER_RUN_H
#define MOAT_RUNNER_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "cgroups/cgroups.h"
#include "core/core.h"
#include "kv/kv.h"
#include "runner/runner.h"

#define RUN_READ_CHUNK 65536
/* Where the runtime shims are, when opts.runtime_dir is bound. */
#define RUN_RUNTIME_PY MOAT_RUNTIME_MOUNT "/python"
#define RUN_RUNTIME_KV_HOOK MOAT_RUNTIME_MOUNT "/js/kv-register.mjs"

/* One captured output stream. */
struct run_stream {
	enum moat_stream which;
	char **buf;
	size_t *len;
	bool *truncated;
	size_t cap;
	size_t alloc;
	bool passed_on; /* opts.stdout_stream: neither kept nor capped */
	bool capped;    /* opts.output_stream: passed on, not kept, capped */
	size_t seen;    /* bytes passed on (capped) */
	bool paused;    /* unwatched by pump_flow */
};

struct run;

/* An fd the pump watches, with the handler that serves it. ready returns
 * PUMP_GO, PUMP_STOP (leave the loop now) or -1 with *err set (the run
 * fails). A handler that is done with its fd calls pump_drop. */
enum { PUMP_GO = 0, PUMP_STOP = 1 };
struct pump_entry {
	int *fd; /* the struct run member it watches */
	int (*ready)(struct run *r, struct pump_entry *e, struct moat_error *err);
};
enum pump_slot {
	PUMP_STDOUT, PUMP_STDERR, PUMP_REPORT, PUMP_OUTPUTS, PUMP_LISTENER, PUMP_STDIN,
	PUMP_TIMER, PUMP_EXIT, PUMP_CANCEL, PUMP_HANGUP, PUMP_KV, PUMP_THRASH, PUMP_RESUME,
	PUMP_SESSION, PUMP_INTERRUPT, PUMP__COUNT
};

/* The thrash watch (thrash.c): the samples of the last THRASH_TICKS ticks
 * of the leaf's limit hits and full memory stall. */
#define THRASH_TICK_MS 500
#define THRASH_TICKS 8
#define THRASH_SHARE_PCT 25
struct run_thrash_sample {
	int64_t limit_hits; /* memory.events max */
	int64_t full_us;    /* memory.pressure full total */
	int64_t at_us;      /* when (CLOCK_MONOTONIC) */
};
struct run_thrash {
	struct run_thrash_sample ring[THRASH_TICKS + 1];
	size_t next;        /* samples taken */
	int64_t stalled_us; /* the window that killed: stall and length */
	int64_t window_us;
};

/* What the supervisor knows when pid 1 has ended: the input of the pure
 * status decoder. */
struct run_end {
	bool have_status; /* pid 1 reported the program's wait status */
	int status;       /* that wait status */
	bool timed_out;   /* the wall-clock timer killed the run */
	bool cancelled;   /* opts.cancel_fd / hangup_fd killed the run */
	int init_code;    /* how pid 1 itself ended (siginfo si_code: CLD_*) */
	int init_status;  /* and its si_status */
};

/* run.plan_flat: the sync byte and struct moat_plan_header end here, the
 * flat plan starts here (aligned as malloc's memory is) */
#define RUN_PLAN_PREFIX 32

enum run_origin { RUN_COLD, RUN_WARM, RUN_ADOPTED, RUN_TEMPLATE };

struct run {
	/* what to run: borrowed from the caller until run_release */
	const struct moat_request *req;
	struct moat_run_options opts;
	bool as_root;
	int64_t t0; /* durationMs counts from here (validation passed) */

	/* prepare: built before clone3 */
	struct moat_result *res;
	struct moat_net *net;
	struct moat_seccomp_prog *seccomp;
	struct moat_seccomp_log *sclog; /* opts.seccomp_log */
	struct moat_priv_plan priv;
	struct moat_cgroup *cg;
	/* the mount plan: built before clone3 for a zygote's template, after
	 * it for a run spawned here (plan_piped: run_plan_hand_over, while
	 * pid 1 is being scheduled) and then flattened into plan_flat
	 * (plan_flat_len bytes, private to the supervisor), which send_plan
	 * writes to pid 1 over the sync pipe after MOAT_SYNC_PLAN and frees
	 * (runner.h, struct moat_plan_header). A setup report's op index is
	 * looked up in plan, the supervisor's own copy. */
	struct moat_mount_plan *plan;
	bool plan_piped;
	void *plan_flat;      /* RUN_PLAN_PREFIX bytes, then the flat plan */
	size_t plan_flat_len; /* the flat plan's */
	struct moat_exec program, transpile;
	bool need_transpile;
	char *code_name;
	char *workdir; /* opts.workdir with its symlinks resolved */
	char **envp;
	char *chunk; /* RUN_READ_CHUNK bytes for reads */

	/* the channels: the supervisor's ends, then the child's (closed in
	 * the supervisor once clone3 returned); -1 when closed */
	int sync_w, report_r, stdin_w, stdout_r, stderr_r, outputs_r;
	int sync_r, report_w, stdin_r, stdout_w, stderr_w, outputs_w;
	int epfd, timerfd, pidfd, listener;
	/* the processes of the tree a freeze found stopped (run_sandbox_freeze):
	 * the thaw signals these (nothing of a stopped tree forks) instead of
	 * walking the host's /proc again; NULL when not frozen */
	pid_t *frozen;
	size_t nfrozen;
	/* the key-value store (kvEnabled): the broker's end of the program's
	 * socket, the program's end (kept by pid 2 as fd RUN_KV_FD) */
	int kv_fd, kv_child;
	struct moat_kv_store *kv;
	struct moat_kv_broker *broker;
	struct moat_kv_quota kvq;
	bool kv_writing; /* the pump waits to write an answer, not to read */
	/* how pid 1 comes to be and whose request it runs (src/pool/ makes
	 * all but the cold ones through runner/sandbox.h):
	 *   RUN_COLD      clone3 here (run_spawn), for the request it was made for
	 *   RUN_WARM      the same, with a bootstrap request; started ahead,
	 *                 its one real request comes by run_deliver
	 *   RUN_ADOPTED   made by a zygote from its template and adopted
	 *                 (run_adopt): run_prepare builds no mount plan, filter,
	 *                 program or environment (the template's; a setup
	 *                 report's step refers to the template's plan); never
	 *                 waited for, its status comes from the report
	 *   RUN_TEMPLATE  a zygote's template (moat_zygote_new), never spawned
	 *                 itself: every pid 1 its zygote makes is cloned from it
	 * Set between run_init and run_prepare. */
	enum run_origin origin;
	/* started ahead of its request (RUN_WARM; RUN_ADOPTED by
	 * run_sandbox_start_ahead): pid 2 waits on its stdin for the frame
	 * run_deliver hands it; delivered once it has */
	bool ahead, delivered;
	/* RUN_TEMPLATE whose children keep the zygote's tree
	 * (moat_plan_input.own_tree; only moat_zygote_new sets it, once the
	 * tree passed moat_tree_check_own) */
	bool own_tree;
	/* a live sandbox's (run_sandbox_start_live): its runtime copy holds
	 * bin/ (the agent); every other run's leaves it out */
	bool live;
	/* -1, or the run is moat serve's Python zygote's own sandbox
	 * (run_sandbox_start_host): its filter is the zygote policy, /proc is
	 * not masked, no Landlock, and this socket (the caller's) becomes the
	 * program's fd 4 */
	int zygote_fd;
	const char *stdin_data; /* what the pump feeds to the program's stdin */
	size_t stdin_len;
	/* the request as a warm sandbox's bootstrap reads it (src/pool/warm.c
	 * builds it; the run owns it): a RUN_ADOPTED run's stdin from the
	 * start, or the one run_deliver hands a run started ahead */
	char *pool_frame;
	size_t pool_frame_len;
	/* NULL: pid 2 executes the program. Else pid 2 calls it once locked
	 * down instead of execve (moat_child_main's program == NULL) and
	 * exits with what it returns: the seam the runner's tests use to look
	 * at a zygote's child from inside (docs/design/pool-zygote.md); set
	 * between run_init and run_spawn */
	int (*pid2_main)(void *arg);
	void *pid2_arg;
	bool prepared; /* run_prepare succeeded */
	pid_t pid; /* pid 1 of the sandbox, as the host sees it; -1 when reaped */
	bool started;

	/* pump */
	struct pump_entry pump[PUMP__COUNT];
	struct run_stream out, errout;
	size_t stdin_off;
	struct moat_buf outs; /* the "outputs" stream */
	bool outs_cut;
	bool exited, draining, cancelled;
	int cancel_fd, hangup_fd; /* copies of the caller's fds; -1 once unwatched */
	int resume_fd; /* opts.resume_fd while stdout waits for it (paused), else -1 */
	bool out_paused; /* stdout unwatched: opts.stdout_full said so */
	bool have_status, have_setup;
	struct moat_report status, setup;
	int thrash_fd; /* the thrash watch's periodic timer; -1 when not watching */
	struct run_thrash thrash;
	bool thrash_killed;

	/* a session's sandbox (runner/session.c): the host's end of the
	 * driver's control socket and the program's (RUN_SESSION_FD), -1
	 * otherwise; what the driver wrote and was not yet taken as a frame;
	 * the frame that ends the pump (PUMP_STOP) when taken */
	int session_fd, session_child;
	struct moat_buf session_in;
	char *session_reply;
	size_t session_reply_len;
	const char *session_out; /* the host's frame being written (borrowed) */
	size_t session_out_len, session_out_off;
	bool session_bad;      /* the driver broke the protocol: killed */
	int64_t session_end;   /* the lifetime's end (moat_mono_ms) */
	int64_t session_cpu_ms; /* the cgroup's CPU time at the last step's end */
	struct moat_result *session_proto; /* the limits and warnings of each step */
	/* interrupt, don't kill (runner/session.c): SIGINT to the driver (pid
	 * 2, its pidfd found at the first interrupt) at the step's timeout or
	 * when asked (session_intr_fd, an eventfd any thread may write), then
	 * session_grace_ms for its answer before the sandbox is killed (0: the
	 * timeout kills at once); what interrupted this step */
	int session_intr_fd, session_pid2fd;
	uint64_t session_grace_ms;
	enum run_intr { RUN_INTR_NONE, RUN_INTR_TIMEOUT, RUN_INTR_ASKED } session_intr;
	bool session_intr_later; /* asked while the frame was still going out: not sent yet */
	bool session_stepping; /* a step's frame was sent: its code may run */
	bool session_hangup_finish; /* a hang-up lets the step run on */
};

/* prepare.c */
void run_init(struct run *r, const struct moat_request *req, const struct moat_run_options *opts);
int run_prepare(struct run *r, struct moat_error *err);
/* After clone3 and MOAT_SYNC_IDS: the mount plan built and flattened into
 * r->plan_flat for send_plan (a no-op where run_prepare built it). 0 or -1
 * with err (the plan's own error, as run_prepare would have given it). */
int run_plan_hand_over(struct run *r, struct moat_error *err);
void run_plan_flat_free(struct run *r);
void run_release(struct run *r);

/* base.c: below every other file of runner/ */
/* Waits until pid 1 has ended: reaps it (*si: how, when si is not NULL),
 * or for an adopted one waits for its pidfd (si zeroed). */
void run_wait_pid1(struct run *r, siginfo_t *si);
/* (Re)arms the run's timer to fire once, ms from now. 0, or -1 with *err:
 * the run must fail then (no timer is no wall-clock kill). */
int run_arm_timer(struct run *r, uint64_t ms, struct moat_error *err);
/* Kills and reaps pid 1 if it is still there. */
void run_kill(struct run *r);
/* SIGPIPE blocked in the calling thread for the span of a phase that
 * writes to a pipe pid 1 may have closed (the sync bytes, stdin). */
struct sigpipe_guard {
	sigset_t old;
	bool set;
};
void sigpipe_block(struct sigpipe_guard *g);
void sigpipe_restore(struct sigpipe_guard *g);
/* Watches one more entry (its fd set) for events. */
int pump_watch_slot(struct run *r, enum pump_slot slot, uint32_t events);

/* start.c */
/* What pid 1 runs from (moat_child_main): the run's plan, privileges,
 * filter, network, channels (the child's ends) and program. Borrows from
 * r. */
void run_child_spec(const struct run *r, struct moat_child *c);
int run_spawn(struct run *r, struct moat_error *err);
/* Instead of run_spawn: pid 1 was made by another process (a zygote,
 * docs/design/pool-zygote.md) from this run's run_child_spec -- cloned
 * into the new namespaces with its id maps written -- and pidfd refers to
 * it (owned by the run from here on, also on failure). Closes the run's
 * copies of the child's ends, sends MOAT_SYNC_IDS and puts pid 1 into the
 * run's cgroups (moat_cgroup_adopt); run_start follows as after
 * run_spawn. Refuses requests needing a channel to pid 1 that the maker
 * would have to set up (network, kvEnabled, outputs, seccomp log). pid 1
 * is never waited for: the program's status comes from pid 1's report,
 * and a pid 1 that ended without one is "killed from outside". */
int run_adopt(struct run *r, int pidfd, struct moat_error *err);
/* How long a kill waits for an adopted pid 1 to exit. */
#define RUN_ADOPT_EXIT_WAIT_MS 5000
int run_start(struct run *r, struct moat_error *err);

/* pump.c */
int run_pump(struct run *r, struct moat_error *err);
/* pid 1 reported the program's status with no other process of the run
 * left (MOAT_STATUS_ALONE), has not been seen to exit yet, and nothing
 * killed the sandbox: the result is final, pid 1 is reaped by run_release. */
bool run_ended_alone(const struct run *r);
/* Registers the pump's entries (run_start, once pid 1 was released). */
int pump_watch(struct run *r, struct moat_error *err);
/* Kills the whole sandbox now (cgroup.kill, else pid 1), as the timeout does. */
void pump_kill(struct run *r);
/* Reads what is in the output pipes now, without waiting (a session's
 * step, once its driver said done): at most 16 chunks a stream. */
void pump_drain_now(struct run *r);

/* deliver.c */
/* Hands a run started ahead (r->ahead) its one real request (docs/SERVE.md,
 * "The pool"): frame is the request as the bootstrap reads it (the run
 * owns it from here, also on failure); the caller has checked that req may
 * take this sandbox (pool_refusal). req and its per-request options
 * (hangup_fd, cancel_fd, on_output, stdout flow control) are borrowed
 * until release. The wall clock, durationMs and the output caps start over
 * from here. */
int run_deliver(struct run *r, const struct moat_request *req,
		const struct moat_run_options *per, char *frame, size_t frame_len,
		struct moat_error *err);
/* The per-request options of a run started ahead (a delivery, a
 * session's step): per's on_output, stdout flow control, cancel and hangup
 * fds (watched from here; per NULL: the run's own stay) and the output
 * caps (max_output, 0: the default). */
int run_take_per(struct run *r, const struct moat_run_options *per, uint64_t max_output,
		 struct moat_error *err);
/* collect.c */
int run_collect(struct run *r, struct moat_result **out, struct moat_error *err);
/* Pure: how the program ended, into res->exited/exit_code/signal/killed_by.
 * Returns true when pid 1 ended without reporting the program's status
 * (killed from outside), which deserves a warning. */
bool run_decode(const struct run_end *e, struct moat_result *res);

/* thrash.c: one sample of the thrash watch's pure rule. True when over the
 * last THRASH_TICKS ticks the limit was hit and the run was stalled on
 * memory for at least THRASH_SHARE_PCT of the time: it is to be killed.
 * limit_hits is memory.events "max", full_us the memory.pressure "full"
 * total, now_us a monotonic clock. */
bool run_thrash_step(struct run_thrash *t, int64_t limit_hits, int64_t full_us, int64_t now_us);
/* Starts the watch when the run's memory limit is a cgroup v2 one (else
 * does nothing; a failure to start is a warning, and a host without PSI
 * ends it at the first tick). */
void run_thrash_arm(struct run *r);
/* session.c: a session's step is to stop (why: RUN_INTR_TIMEOUT or
 * _ASKED): SIGINT to its driver and the timer armed for the grace. true
 * when sent; false when it cannot be (no step's code runs, no grace, the
 * step was interrupted already, the driver not found): the caller kills. */
bool run_session_interrupt(struct run *r, enum run_intr why);
/* The SIGINT itself (its pidfd found at the first): whether it was sent. */
bool run_session_sigint(struct run *r);
/* A task's /proc stat as the host sees it (runner/base.c; tid 0: the
 * process's own /proc/<pid>/stat): its state letter, parent and CPU
 * ticks (utime+stime+cutime+cstime; 0 when unparsed). 0, or -1 when gone
 * or unreadable. */
struct run_proc_stat {
	char state;
	pid_t ppid;
	unsigned long long ticks;
};
int run_proc_stat(pid_t pid, pid_t tid, struct run_proc_stat *st);

/* The timer fired: 1 kill the run now, 0 keep watching, -1 stop watching. */
int run_thrash_tick(struct run *r);
/* The error for a setup failure pid 1 or pid 2 reported. Returns -1. */
int run_setup_error(const struct run *r, const struct moat_report *rep, struct moat_error *err);

#endif
