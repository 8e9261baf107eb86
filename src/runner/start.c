/* Spawning and starting: clone3 into new namespaces, the id maps, the
 * release of pid 1 step by step (enum moat_sync), the cgroup join, then
 * the start of the program with the wall-clock timer running. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/stamp.h"
#include "core/sys.h"
#include "runner/run.h"

/* A step of the release failed (id maps, a sync byte, the cgroup join): the
 * child is killed and reaped, and if it had already failed on its own (its
 * setup report is queued before it exits), that report is the real cause,
 * not the ESRCH or EPIPE the step then got. Returns -1. */
static int child_report_wins(struct run *r, struct moat_error *err)
{
	run_kill(r);
	struct moat_report rep;
	ssize_t n;
	while ((n = recv(r->report_r, &rep, sizeof rep, MSG_DONTWAIT)) > 0) {
		if ((size_t)n == sizeof rep && rep.kind == MOAT_REPORT_SETUP_FAILED) {
			moat_error_clear(err);
			run_setup_error(r, &rep, err);
			break;
		}
	}
	return -1;
}

static pid_t do_clone3(int cgroup_fd, int *pidfd)
{
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = MOAT_RUN_NS_FLAGS | CLONE_PIDFD;
	args.pidfd = (uint64_t)(uintptr_t)pidfd;
	/* no exit signal: pid 1 raises no SIGCHLD in the host program, and
	 * wait()/waitpid(-1) there do not see it (only __WALL/__WCLONE do);
	 * moat waits for it through its pidfd */
	args.exit_signal = 0;
#ifdef CLONE_INTO_CGROUP
	if (cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)cgroup_fd;
	}
#else
	(void)cgroup_fd;
#endif
	return (pid_t)syscall(SYS_clone3, &args, sizeof args);
}

/* The child's ends live on in the child only. */
static void close_child_ends(struct run *r)
{
	moat_close_fd(&r->sync_r);
	moat_close_fd(&r->report_w);
	moat_close_fd(&r->stdin_r);
	moat_close_fd(&r->stdout_w);
	moat_close_fd(&r->stderr_w);
	moat_close_fd(&r->outputs_w);
	moat_close_fd(&r->kv_child);
	moat_close_fd(&r->session_child);
}

void run_child_spec(const struct run *r, struct moat_child *c)
{
	*c = (struct moat_child){
		.plan = r->plan_piped ? NULL : r->plan, .plan_piped = r->plan_piped,
		.priv = &r->priv, .seccomp = r->seccomp, .as_root = r->as_root,
		.net = r->net, .net_fds = { -1, -1 },
		.outputs = r->req->outputs, .outputs_count = r->req->outputs_count,
		.outputs_fd = r->outputs_w, .outputs_skip_work = r->workdir != NULL,
		.kv_fd = r->kv_child, .session_fd = r->session_child,
		.c_locale = r->req->outputs_count ? moat_outputs_locale() : (locale_t)0,
		.sync_fd = r->sync_r, .report_fd = r->report_w, .stdin_fd = r->stdin_r,
		.stdout_fd = r->stdout_w, .stderr_fd = r->stderr_w,
		.transpile = r->need_transpile && !r->pid2_main ? &r->transpile : NULL,
		.program = r->pid2_main ? NULL : &r->program, .envp = r->envp,
	};
	moat_net_child_fds(r->net, c->net_fds);
}

static int clone_sandbox(struct run *r, struct moat_error *err)
{
	struct moat_child child;
	run_child_spec(r, &child);
	moat_stamp("sup: fds ready, clone3");
	int cgroup_fd = moat_cgroup_clone_fd(r->cg);
	r->pid = do_clone3(cgroup_fd, &r->pidfd);
	if (r->pid < 0) {
		int e = errno;
		char *diag = moat_ns_userns_diagnose();
		/* clone3 also fails with EPERM/EACCES when the move into the
		 * run's cgroup is refused (cgroup v2's common-ancestor rule; the
		 * prepare step checks it, but the hierarchy may have changed) */
		const char *leaf = cgroup_fd >= 0 && (e == EPERM || e == EACCES)
					   ? moat_cgroup_clone_path(r->cg) : NULL;
		if (leaf)
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
				       "cannot create the sandbox (clone3: %s): the move into cgroup %s "
				       "(CLONE_INTO_CGROUP) may be the cause rather than the namespaces: "
				       "cgroup v2 allows it only for a caller that may write cgroup.procs "
				       "of the common ancestor of its own cgroup and that one (`moat "
				       "doctor` checks it)%s%s", strerror(e), leaf,
				       diag ? "; if not, the namespaces: " : "", diag ? diag : "");
		else
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
				       "cannot create the sandbox namespaces (clone3: %s)%s%s",
				       strerror(e), diag ? "; " : "", diag ? diag : "");
		free(diag);
		return -1;
	}
	if (r->pid == 0) {
		/* pid 1 never returns; pid 2 only without a program */
		if (moat_child_main(&child) == 0 && r->pid2_main)
			moat_sys_exit(r->pid2_main(r->pid2_arg));
		moat_sys_exit(127);
	}
	moat_stamp("sup: clone3 returned");
	close_child_ends(r);
	return 0;
}

static int map_ids(struct run *r, struct moat_error *err)
{
	const struct moat_run_options *o = &r->opts;
	uid_t host_uid = r->as_root ? (o->root_host_id ? o->root_host_id : MOAT_SANDBOX_UID)
				    : getuid();
	gid_t host_gid = r->as_root ? (o->root_host_id ? o->root_host_id : MOAT_SANDBOX_GID)
				    : getgid();
	if (moat_idmap_write(r->pid, r->as_root, host_uid, host_gid, err) < 0 ||
	    moat_net_attach(r->net, r->pid, err) < 0) {
		char *diag = moat_ns_userns_diagnose();
		if (diag)
			moat_error_wrap(err, NULL, diag);
		free(diag);
		return -1;
	}
	return 0;
}

/* MOAT_SYNC_PLAN where the plan is handed over, then the plan itself on
 * the sync pipe (runner.h, struct moat_plan_header), all of it one write
 * from the flat copy run_plan_hand_over laid out behind them: at once
 * where the pipe holds it (a plan of a few KiB), else as pid 1 reads it.
 * The supervisor's flat copy is freed once written. */
static int send_plan(struct run *r, struct moat_error *err)
{
	if (!r->plan_piped)
		return 0;
	char *at = (char *)r->plan_flat + RUN_PLAN_PREFIX - sizeof(struct moat_plan_header) - 1;
	int rc = moat_write_all(r->sync_w, at, 1 + sizeof(struct moat_plan_header) + r->plan_flat_len);
	int e = errno;
	run_plan_flat_free(r);
	if (rc < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
				      "cannot hand the mount plan to the sandbox: %s", strerror(e));
	moat_stamp("sup: plan handed over");
	return 0;
}

static int spawn(struct run *r, struct moat_error *err)
{
	if (clone_sandbox(r, err) < 0)
		return -1;
	if (map_ids(r, err) < 0)
		return child_report_wins(r, err);
	if (moat_sync_send(r->sync_w, MOAT_SYNC_IDS) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot release the sandbox: %s",
			       strerror(errno));
		return child_report_wins(r, err);
	}
	moat_stamp("sup: released");
	/* the mount plan, built while pid 1 is scheduled and sets its ids (it
	 * waits for MOAT_SYNC_PLAN only before its mounts); its error is the
	 * run's, as before clone3: pid 1 is killed before it mounts anything */
	if (run_plan_hand_over(r, err) < 0) {
		run_kill(r);
		return -1;
	}
	if (send_plan(r, err) < 0)
		return child_report_wins(r, err);
	/* creating, limiting and joining the v1 cgroups takes ~1 ms here: done
	 * while the child builds its mounts; it forks the program only after
	 * MOAT_SYNC_START */
	if (moat_cgroup_attach(r->cg, r->pid, r->res, err) < 0)
		return child_report_wins(r, err);
	moat_stamp("sup: cgroups attached");
	return 0;
}

int run_spawn(struct run *r, struct moat_error *err)
{
	if (!r->prepared || r->origin == RUN_ADOPTED)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      r->prepared ? "a run prepared for a zygote's child has no plan "
						    "of its own to start"
						  : "the run was not prepared");
	/* a sandbox that is gone when a sync byte is written must not kill
	 * the supervisor with SIGPIPE */
	struct sigpipe_guard g;
	sigpipe_block(&g);
	int rc = spawn(r, err);
	sigpipe_restore(&g);
	return rc;
}

static int adopt(struct run *r, int pidfd, struct moat_error *err)
{
	r->pidfd = pidfd;
	close_child_ends(r);
	/* the maker wrote the id maps before it handed the pidfd on */
	if ((r->pid = moat_pidfd_pid(pidfd)) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       errno == ESRCH ? "the sandbox's pid 1 ended before it was adopted"
					      : "cannot learn the adopted pid 1's pid (%s)",
			       strerror(errno));
		r->pid = 0; /* nothing to kill or reap; the report may say why */
		struct moat_report rep;
		ssize_t n;
		while ((n = recv(r->report_r, &rep, sizeof rep, MSG_DONTWAIT)) > 0)
			if ((size_t)n == sizeof rep && rep.kind == MOAT_REPORT_SETUP_FAILED) {
				moat_error_clear(err);
				return run_setup_error(r, &rep, err);
			}
		return -1;
	}
	if (moat_sync_send(r->sync_w, MOAT_SYNC_IDS) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot release the sandbox: %s",
			       strerror(errno));
		return child_report_wins(r, err);
	}
	/* a pid 1 made from this run's own spec after run_plan_hand_over (a
	 * zygote's template hands none over: its plan is in its memory) */
	if (send_plan(r, err) < 0)
		return child_report_wins(r, err);
	if (moat_cgroup_adopt(r->cg, r->pid, r->res, err) < 0)
		return child_report_wins(r, err);
	return 0;
}

int run_adopt(struct run *r, int pidfd, struct moat_error *err)
{
	if (r->pid > 0 || r->pidfd >= 0 || r->started || !r->prepared) {
		if (pidfd >= 0)
			close(pidfd);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "only a prepared run that has no pid 1 yet can adopt one");
	}
	if (r->req->network || r->req->has_allowed_hosts || r->req->kv_enabled ||
	    r->req->outputs_count || r->opts.seccomp_log) {
		close(pidfd);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "an adopted pid 1 takes no network, kvEnabled, outputs or "
				      "seccomp log: its maker has no channel for them");
	}
	struct sigpipe_guard g;
	sigpipe_block(&g);
	int rc = adopt(r, pidfd, err);
	sigpipe_restore(&g);
	return rc;
}

static int start(struct run *r, struct moat_error *err)
{
	if (moat_sync_send(r->sync_w, MOAT_SYNC_START) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot release the sandbox: %s",
			       strerror(errno));
		return child_report_wins(r, err);
	}
	moat_close_fd(&r->sync_w);
	r->started = true;
	/* no timer, no wall-clock kill: the run fails instead */
	if (r->broker)
		moat_kv_broker_set_deadline(r->broker, moat_mono_ms() + (int64_t)r->req->timeout_ms);
	if (run_arm_timer(r, r->req->timeout_ms, err) < 0 ||
	    moat_net_start(r->net, r->opts.relay_caps, err) < 0)
		return -1;
	/* the child needs nothing more from us: housekeeping now runs beside
	 * its start instead of before it */
	moat_cgroup_sweep(r->cg);
	moat_stamp("sup: stale leaves swept");
	/* pid 1 usually waits for MOAT_SYNC_START (the cgroup join is the
	 * slower side): the pump's setup comes after it, beside the fork */
	return pump_watch(r, err);
}

int run_start(struct run *r, struct moat_error *err)
{
	if (r->started || r->pid <= 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "the sandbox was already started");
	struct sigpipe_guard g;
	sigpipe_block(&g);
	int rc = start(r, err);
	sigpipe_restore(&g);
	return rc;
}
