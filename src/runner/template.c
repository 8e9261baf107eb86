/* A zygote's template (runner/sandbox.h, run_sandbox_template_*;
 * docs/design/pool-zygote.md): a run prepared once from a request (no
 * code: its files, code and env come later, on the program's stdin) whose
 * plan, privileges, filter and environment every pid 1 of its zygote is
 * cloned from; only the channels are each request's own, made by the
 * supervisor's run_prepare and passed in as fds. The zygote (pool/zygote.c)
 * owns the process and its control socket; how a pid 1 is made is the
 * runner's, here. run_sandbox_template_spawn runs in the zygote's process
 * and its clone: pid 1 and pid 2 keep moat_child_main's raw-syscall
 * discipline (docs/ARCHITECTURE.md, "The handover"). */
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"
#include "runner/sandbox.h"

struct run_template {
	struct run r;
};

struct run_template *run_sandbox_template_new(const struct moat_request *req,
					      unsigned long long tmpfs_bytes,
					      const char *runtime_dir, bool own_tree,
					      struct moat_error *err)
{
	struct run_template *t = calloc(1, sizeof *t);
	if (!t) {
		moat_error_oom(err);
		return NULL;
	}
	struct moat_run_options o;
	moat_run_options_init(&o);
	o.tmpfs_bytes = tmpfs_bytes;
	o.runtime_dir = runtime_dir && *runtime_dir ? runtime_dir : NULL;
	run_init(&t->r, req, &o);
	t->r.origin = RUN_TEMPLATE;
	if (own_tree) {
		char unfit[256];
		if (moat_tree_check_self(o.runtime_dir != NULL, unfit, sizeof unfit) < 0) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "the zygote's tree cannot be its children's: %s", unfit);
			run_sandbox_template_free(t);
			return NULL;
		}
		t->r.own_tree = true;
	}
	if (run_prepare(&t->r, err) < 0) {
		run_sandbox_template_free(t);
		return NULL;
	}
	/* the template's cgroups (a leaf for cgroup.kill, where the zygote may
	 * make one) are nobody's: each run's are its supervisor's. Removed
	 * now, not left in the zygote's cgroup for its lifetime. */
	moat_cgroup_finish(t->r.cg, NULL);
	t->r.cg = NULL;
	return t;
}

char *const *run_sandbox_template_envp(const struct run_template *t)
{
	return t ? t->r.envp : NULL;
}

int run_sandbox_template_spawn(struct run_template *t, const int fds[MOAT_ZYGOTE_NFDS],
			       const void *record, size_t record_len, int *pidfd)
{
	if (!t || !fds || !pidfd || !record || record_len < 1 ||
	    *(const char *)record != MOAT_ZYGOTE_RUN ||
	    (record_len - 1) % sizeof(struct moat_zygote_rlimit) ||
	    record_len > MOAT_ZYGOTE_MAX_RECORD)
		return -EINVAL;
	for (int i = 0; i < MOAT_ZYGOTE_NFDS; i++)
		if (fds[i] < 0)
			return -EBADF;
	/* the run's rlimits on a copy of the template's privileges (pid 1 and
	 * pid 2 read it from the clone's copy of this stack) */
	struct moat_priv_plan priv = t->r.priv;
	size_t n = (record_len - 1) / sizeof(struct moat_zygote_rlimit);
	for (size_t i = 0; i < n; i++) {
		struct moat_zygote_rlimit rl;
		memcpy(&rl, (const char *)record + 1 + i * sizeof rl, sizeof rl);
		struct moat_error err = { 0 };
		if (rl.resource < 0 || rl.resource >= RLIM_NLIMITS || rl.zero ||
		    moat_priv_add_rlimit(&priv, rl.resource, (rlim_t)rl.value, &err) < 0) {
			moat_error_clear(&err);
			return -EINVAL;
		}
	}
	struct moat_child c;
	run_child_spec(&t->r, &c);
	c.priv = &priv;
	c.program = NULL;
	c.transpile = NULL;
	c.stdin_fd = fds[MOAT_ZYGOTE_STDIN];
	c.stdout_fd = fds[MOAT_ZYGOTE_STDOUT];
	c.stderr_fd = fds[MOAT_ZYGOTE_STDERR];
	c.report_fd = fds[MOAT_ZYGOTE_REPORT];
	c.sync_fd = fds[MOAT_ZYGOTE_SYNC];
	c.outputs_fd = -1;
	c.kv_fd = -1;
	*pidfd = -1;
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = MOAT_RUN_NS_FLAGS | CLONE_PIDFD; /* the runner's set (runner/runner.h) */
	args.pidfd = (uint64_t)(uintptr_t)pidfd;
	/* the zygote reaps its pid 1s (SIGCHLD); the supervisor only ever
	 * watches the pidfd it was handed */
	args.exit_signal = SIGCHLD;
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* pid 1 never returns; pid 2 returns 0 locked down */
		if (moat_child_main(&c) == 0)
			return 0;
		moat_sys_exit(127);
	}
	const struct moat_run_options *o = &t->r.opts;
	uid_t uid = t->r.as_root ? (o->root_host_id ? o->root_host_id : MOAT_SANDBOX_UID) : getuid();
	gid_t gid = t->r.as_root ? (o->root_host_id ? o->root_host_id : MOAT_SANDBOX_GID) : getgid();
	struct moat_error err = { 0 };
	if (moat_idmap_write(pid, t->r.as_root, uid, gid, &err) < 0) {
		int e = err.sys_errno ? err.sys_errno : EPERM;
		moat_error_clear(&err);
		syscall(SYS_pidfd_send_signal, *pidfd, SIGKILL, NULL, 0);
		close(*pidfd);
		*pidfd = -1;
		return -e; /* the zygote reaps it as any other */
	}
	return pid;
}

void run_sandbox_template_free(struct run_template *t)
{
	if (!t)
		return;
	run_release(&t->r);
	free(t);
}
