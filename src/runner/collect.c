/* Collecting a run: reap pid 1, decode how the program ended (a pure
 * function, unit-tested), render what pid 1 sent (outputs) and what the
 * supervisor saw (seccomp log, cgroup statistics, network log). And the
 * errors for the setup failures pid 1 and pid 2 report. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/stamp.h"
#include "core/sys.h"
#include "runner/run.h"

bool run_decode(const struct run_end *e, struct moat_result *res)
{
	res->timed_out = e->timed_out;
	if (e->have_status && !e->timed_out && !e->cancelled) {
		int ws = e->status;
		if (WIFEXITED(ws)) {
			res->exited = true;
			res->exit_code = WEXITSTATUS(ws);
		} else if (WIFSIGNALED(ws)) {
			res->signal = WTERMSIG(ws);
			res->killed_by = res->signal == SIGSYS ? "seccomp" : "signal";
		}
		return false;
	}
	if (e->timed_out || e->cancelled) {
		res->signal = SIGKILL;
		res->killed_by = e->timed_out ? "timeout" : "cancelled";
		return false;
	}
	/* pid 1 died without reporting: killed from outside (OOM killer, admin) */
	res->signal = e->init_code == CLD_KILLED || e->init_code == CLD_DUMPED ? e->init_status
									       : SIGKILL;
	res->killed_by = "signal";
	return true;
}

static const char *step_name(enum moat_step step)
{
	switch (step) {
	case MOAT_STEP_SYNC: return "starting the sandbox";
	case MOAT_STEP_IDS: return "switching to uid/gid 65534";
	case MOAT_STEP_PRIVATE: return "making the mount tree private";
	case MOAT_STEP_NET: return "setting up the network";
	case MOAT_STEP_MOUNT: return "building the sandbox filesystem";
	case MOAT_STEP_HOSTNAME: return "setting the hostname";
	case MOAT_STEP_FORK: return "forking the program";
	case MOAT_STEP_FDS: return "setting up file descriptors";
	case MOAT_STEP_RLIMITS: return "setting resource limits";
	case MOAT_STEP_CAPS: return "dropping capabilities";
	case MOAT_STEP_NNP: return "setting no_new_privs";
	case MOAT_STEP_LANDLOCK: return "restricting the filesystem with Landlock";
	case MOAT_STEP_SECCOMP: return "installing the seccomp filter";
	case MOAT_STEP_TRANSPILE: return "starting the transpiler";
	case MOAT_STEP_EXEC: return "starting the interpreter";
	case MOAT_STEP_INIT: return "starting the sandbox init";
	case MOAT_STEP_CMDLINE: return "hiding the host command line";
	case MOAT_STEP_CGROUPNS: return "entering the run's cgroup namespace";
	case MOAT_STEP_NONE: break;
	}
	return "sandbox setup";
}

int run_setup_error(const struct run *r, const struct moat_report *rep, struct moat_error *err)
{
	const struct moat_mount_plan *plan = r->plan;
	char what[512];
	/* a zygote's child reports a step of its template's plan, which this
	 * run does not have (RUN_ADOPTED): named by its step only */
	if (plan && rep->step == MOAT_STEP_MOUNT && rep->detail >= 0 &&
	    (size_t)rep->detail < plan->count) {
		const struct moat_mount_op *op = &plan->ops[rep->detail];
		moat_plan_describe(plan, (size_t)rep->detail, what, sizeof what);
		/* a directory of the caller's (runtime, work) the sandbox's user
		 * may not reach: the caller's to fix, not the host's */
		if (op->kind == MOAT_OP_HOLD && rep->err == ELOOP && op->no_symlinks)
			return moat_error_set(err, MOAT_ERR_CONFIG, rep->err,
					      "the sandbox cannot open %s: a symlink is in its path now, "
					      "after moat resolved it (refused rather than followed)",
					      op->src);
		if (op->kind == MOAT_OP_HOLD && (rep->err == EACCES || rep->err == ENOENT ||
						 rep->err == ENOTDIR)) {
			unsigned uid = r->opts.root_host_id ? r->opts.root_host_id
							    : MOAT_SANDBOX_UID;
			if (r->as_root)
				return moat_error_set(err, MOAT_ERR_CONFIG, rep->err,
						      "the sandbox cannot open %s: %s (moat runs as "
						      "root and opens it as host uid %u, which needs "
						      "search permission on every directory of the "
						      "path)", op->src, strerror(rep->err), uid);
			return moat_error_set(err, MOAT_ERR_CONFIG, rep->err,
					      "the sandbox cannot open %s: %s", op->src,
					      strerror(rep->err));
		}
		if (op->user_data && (rep->err == ENOSPC || rep->err == EEXIST ||
				      rep->err == ENOTDIR || rep->err == EFBIG))
			return moat_error_set(err, MOAT_ERR_POLICY, rep->err,
					      "request files do not fit the sandbox: %s: %s", what,
					      strerror(rep->err));
	} else {
		snprintf(what, sizeof what, "%s", step_name((enum moat_step)rep->step));
	}
	if ((rep->step == MOAT_STEP_EXEC || rep->step == MOAT_STEP_TRANSPILE) &&
	    (rep->err == ENOENT || rep->err == ENOTDIR)) {
		const struct moat_exec *e = rep->step == MOAT_STEP_EXEC ? &r->program
			: r->need_transpile ? &r->transpile : NULL;
		const char *name = e && e->argv ? e->argv[0] : "the interpreter";
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, rep->err,
				      "%s is not installed in the sandbox root (looked in %s)%s", name,
				      RUN_SANDBOX_PATH,
				      rep->step == MOAT_STEP_TRANSPILE
					      ? "; TypeScript needs esbuild (Debian package 'esbuild')"
					      : "");
	}
	if (rep->step == MOAT_STEP_NET && rep->detail > 0)
		return moat_net_setup_error(rep->detail, rep->err, err);
	char *diag = NULL;
	if (plan && rep->step == MOAT_STEP_MOUNT && rep->detail >= 0 &&
	    (size_t)rep->detail < plan->count && plan->ops[rep->detail].kind == MOAT_OP_PROC &&
	    rep->err == EPERM)
		diag = moat_ns_proc_diagnose();
	if (!diag && (rep->err == EPERM || rep->err == EACCES))
		diag = moat_ns_userns_diagnose();
	moat_error_set(err, MOAT_ERR_UNAVAILABLE, rep->err, "sandbox setup failed while %s: %s%s%s",
		       what, strerror(rep->err), diag ? "; " : "", diag ? diag : "");
	free(diag);
	return -1;
}

int run_collect(struct run *r, struct moat_result **out, struct moat_error *err)
{
	siginfo_t si;
	if (run_ended_alone(r)) {
		/* the status is final and nothing but the exiting pid 1 is
		 * left: it is reaped by run_release, after the answer */
		memset(&si, 0, sizeof si);
		moat_stamp("sup: ended alone");
	} else {
		run_wait_pid1(r, &si);
		moat_stamp("sup: reaped");
		r->pid = -1;
	}
	struct moat_result *res = r->res;
	res->duration_ms = (uint64_t)(moat_mono_ms() - r->t0);

	/* a setup failure means the program never started (pid 2 reports only
	 * before its execve), even when pid 1 then reports pid 2's exit 127 */
	if (r->have_setup)
		return run_setup_error(r, &r->setup, err);
	struct run_end end = {
		.have_status = r->have_status, .status = r->status.detail,
		.timed_out = res->timed_out, .cancelled = r->cancelled, .init_code = si.si_code, .init_status = si.si_status,
	};
	bool unreported = run_decode(&end, res);
	if (r->req->outputs_count &&
	    moat_outputs_render(r->outs.data ? r->outs.data : "", r->outs.len,
				r->outs_cut || r->outs.oom, res) < 0)
		(void)moat_result_warn(res, "out of memory rendering the outputs");
	if (r->sclog && !(res->seccomp_json = moat_seccomp_log_json(r->sclog)))
		(void)moat_result_warn(res, "out of memory rendering the seccomp log");
	/* the statistics now (read when the status came in, if it did: the
	 * pump's on_report); the leaves go in run_release (their removal can
	 * wait several ms for the kernel, after the answer is out) */
	moat_cgroup_collect(r->cg, res);
	moat_stamp("sup: cgroup read");
	if (r->thrash_killed) {
		res->oom_killed = true;
		if (!res->timed_out && !r->cancelled) {
			res->killed_by = "oom";
			unreported = false;
		}
		(void)moat_result_warn(res, "the program thrashed at its memory limit: all of it "
				       "was stalled on memory for %lld of the last %lld ms, so moat "
				       "killed it as out of memory (the kernel's OOM killer had "
				       "not, because reclaiming file-backed pages kept making "
				       "progress)", (long long)(r->thrash.stalled_us / 1000),
				       (long long)(r->thrash.window_us / 1000));
	}
	/* an OOM group kill takes pid 1 too: finish has said why */
	if (unreported && !strcmp(res->killed_by, "signal"))
		(void)moat_result_warn(res, "the sandbox init ended without reporting the "
				       "program's status (si_code %d, status %d)", si.si_code,
				       si.si_status);
	moat_net_finish(r->net, res);
	r->net = NULL;
	moat_stamp("sup: net finished");
	*out = res;
	r->res = NULL;
	return 0;
}
