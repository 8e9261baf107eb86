/* The host side of a run: prepare everything, clone3 into new namespaces,
 * map ids, release the child, relay output, enforce the wall-clock timeout,
 * collect the result. The only place that knows the order of the steps. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroups/cgroups.h"
#include "core/core.h"
#include "net/net.h"
#include "runner/runner.h"
#include "core/stamp.h"
#include "core/sys.h"

#define DRAIN_GRACE_MS 2000
#define READ_CHUNK 65536

static const char *const EXEC_DIRS[] = { "/usr/local/bin", "/usr/bin", "/bin" };
#define SANDBOX_PATH "/usr/local/bin:/usr/bin:/bin"
#define TS_OUTPUT "/sandbox/.moat-main.mjs"

void moat_run_options_init(struct moat_run_options *opts)
{
	memset(opts, 0, sizeof *opts);
}

static void free_strv(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static void exec_free(struct moat_exec *e)
{
	free_strv(e->paths);
	free_strv(e->argv);
	e->paths = e->argv = NULL;
}

/* NULL-terminated copy of n strings. */
static char **strv_new(const char *const *items, size_t n)
{
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		v[i] = strdup(items[i]);
		if (!v[i]) {
			free_strv(v);
			return NULL;
		}
	}
	return v;
}

static int exec_init(struct moat_exec *e, const char *name, const char *const *argv, size_t argc)
{
	size_t nd = sizeof EXEC_DIRS / sizeof EXEC_DIRS[0];
	e->paths = calloc(nd + 1, sizeof *e->paths);
	e->argv = strv_new(argv, argc);
	if (!e->paths || !e->argv)
		return -1;
	for (size_t i = 0; i < nd; i++)
		if (asprintf(&e->paths[i], "%s/%s", EXEC_DIRS[i], name) < 0) {
			e->paths[i] = NULL;
			return -1;
		}
	return 0;
}

static bool env_has(const struct moat_request *req, const char *name)
{
	for (size_t i = 0; i < req->env_count; i++)
		if (!strcmp(req->env[i].key, name))
			return true;
	return false;
}

/* The program's whole environment: moat's minimal defaults, the network
 * mode's variables and the request's allowlist. Nothing of the host
 * environment is ever copied. */
static char **build_envp(const struct moat_request *req, char *const *net_env)
{
	static const char *const defaults[][2] = {
		{ "PATH", SANDBOX_PATH }, { "HOME", MOAT_SANDBOX_DIR },
		{ "LANG", "C.UTF-8" }, { "TMPDIR", "/tmp" },
	};
	size_t nd = sizeof defaults / sizeof defaults[0];
	size_t nn = 0;
	while (net_env && net_env[nn])
		nn++;
	char **envp = calloc(nd + nn + req->env_count + 1, sizeof *envp);
	if (!envp)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < nd; i++) {
		if (env_has(req, defaults[i][0]))
			continue;
		if (asprintf(&envp[n], "%s=%s", defaults[i][0], defaults[i][1]) < 0)
			goto fail;
		n++;
	}
	for (size_t i = 0; i < nn; i++) {
		if (!(envp[n] = strdup(net_env[i])))
			goto fail;
		n++;
	}
	for (size_t i = 0; i < req->env_count; i++) {
		if (asprintf(&envp[n], "%s=%s", req->env[i].key, req->env[i].value) < 0)
			goto fail;
		n++;
	}
	return envp;
fail:
	envp[n] = NULL;
	free_strv(envp);
	return NULL;
}

struct stream {
	int fd;
	enum moat_stream which;
	char **buf;
	size_t *len;
	bool *truncated;
	size_t cap;
	size_t alloc;
};

static int stream_read(struct stream *s, const struct moat_run_options *opts, char *chunk)
{
	ssize_t n = read(s->fd, chunk, READ_CHUNK);
	if (n < 0)
		return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
	if (n == 0)
		return -1; /* EOF */
	size_t keep = moat_cap_take(*s->len, (size_t)n, s->cap, s->truncated);
	if (keep == 0)
		return 0;
	if (*s->len + keep > s->alloc) {
		size_t na = s->alloc ? s->alloc : 4096;
		while (na < *s->len + keep)
			na *= 2;
		if (na > s->cap)
			na = s->cap;
		char *nb = realloc(*s->buf, na);
		if (!nb) {
			*s->truncated = true;
			return 0;
		}
		*s->buf = nb;
		s->alloc = na;
	}
	memcpy(*s->buf + *s->len, chunk, keep);
	*s->len += keep;
	if (opts->on_output)
		opts->on_output(opts->output_ctx, s->which, chunk, keep);
	return 0;
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
	case MOAT_STEP_SECCOMP: return "installing the seccomp filter";
	case MOAT_STEP_TRANSPILE: return "starting the transpiler";
	case MOAT_STEP_EXEC: return "starting the interpreter";
	case MOAT_STEP_INIT: return "starting the sandbox init";
	case MOAT_STEP_NONE: break;
	}
	return "sandbox setup";
}

static int setup_error(const struct moat_report *r, const struct moat_mount_plan *plan,
		       const struct moat_exec *program, const struct moat_exec *transpile,
		       struct moat_error *err)
{
	char what[512];
	if (r->step == MOAT_STEP_MOUNT && r->detail >= 0 && (size_t)r->detail < plan->count) {
		const struct moat_mount_op *op = &plan->ops[r->detail];
		moat_plan_describe(plan, (size_t)r->detail, what, sizeof what);
		if (op->user_data && (r->err == ENOSPC || r->err == EEXIST || r->err == ENOTDIR ||
				      r->err == EFBIG))
			return moat_error_set(err, MOAT_ERR_POLICY, r->err,
					      "request files do not fit the sandbox: %s: %s", what,
					      strerror(r->err));
	} else {
		snprintf(what, sizeof what, "%s", step_name((enum moat_step)r->step));
	}
	if ((r->step == MOAT_STEP_EXEC || r->step == MOAT_STEP_TRANSPILE) &&
	    (r->err == ENOENT || r->err == ENOTDIR)) {
		const struct moat_exec *e = r->step == MOAT_STEP_EXEC ? program : transpile;
		const char *name = e && e->argv ? e->argv[0] : "the interpreter";
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, r->err,
				      "%s is not installed in the sandbox root (looked in %s)%s", name,
				      SANDBOX_PATH,
				      r->step == MOAT_STEP_TRANSPILE
					      ? "; TypeScript needs esbuild (Debian package 'esbuild')"
					      : "");
	}
	if (r->step == MOAT_STEP_NET && r->detail > 0)
		return moat_net_setup_error(r->detail, r->err, err);
	char *diag = (r->err == EPERM || r->err == EACCES) ? moat_userns_diagnose() : NULL;
	moat_error_set(err, MOAT_ERR_UNAVAILABLE, r->err, "sandbox setup failed while %s: %s%s%s",
		       what, strerror(r->err), diag ? "; " : "", diag ? diag : "");
	free(diag);
	return -1;
}

struct run_state {
	int sync_w, report_r, stdin_w, stdout_r, stderr_r;
	int sync_r, report_w, stdin_r, stdout_w, stderr_w;
	int pidfd, timerfd, epfd, listener, outputs_r, outputs_w;
	pid_t pid;
};

/* One report record; a listener fd that comes with it is stored in *fd_out.
 * Returns 1 for a record, 0 for nothing now (EAGAIN), -1 at EOF or error. */
static int recv_report(int sock, struct moat_report *r, int *fd_out)
{
	int fd;
	size_t nfd;
	ssize_t n = moat_recv_fds(sock, r, sizeof *r, &fd, 1, &nfd, MSG_DONTWAIT);
	if (n < 0)
		return (errno == EAGAIN || errno == EMSGSIZE) ? 0 : -1; /* EMSGSIZE: malformed */
	if (n == 0)
		return -1;
	if (nfd && *fd_out < 0 && r->kind == MOAT_REPORT_LISTENER && (size_t)n == sizeof *r)
		*fd_out = fd;
	else if (nfd)
		close(fd); /* never keep an fd we did not ask for */
	if ((size_t)n != sizeof *r)
		return 0; /* malformed: ignore it */
	return 1;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A run that fails after clone3: the child is killed (closing sync_w alone
 * makes it exit at its next wait) and reaped. */
static void reap_child(struct run_state *st)
{
	if (st->pid <= 0)
		return;
	close_fd(&st->sync_w);
	syscall(SYS_pidfd_send_signal, st->pidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)st->pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	st->pid = -1;
}

static int make_pipe(int *r, int *w, int extra_flags)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | extra_flags) < 0)
		return -1;
	*r = p[0];
	*w = p[1];
	return 0;
}

static int epoll_add(int epfd, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void arm_timer(int tfd, uint64_t ms)
{
	struct itimerspec it;
	memset(&it, 0, sizeof it);
	it.it_value.tv_sec = (time_t)(ms / 1000);
	it.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	if (ms == 0)
		it.it_value.tv_nsec = 1;
	timerfd_settime(tfd, 0, &it, NULL);
}

/* A step of the release failed (id maps, 'g', the cgroup join, 'c'): the
 * child is killed and reaped, and if it had already failed on its own (its
 * setup report is queued before it exits), that report is the real cause,
 * not the ESRCH or EPIPE the step then got. */
static void child_report_wins(struct run_state *st, const struct moat_mount_plan *plan,
			      const struct moat_exec *program, const struct moat_exec *transpile,
			      struct moat_error *err)
{
	reap_child(st);
	struct moat_report r;
	int fd = -1;
	while (recv_report(st->report_r, &r, &fd) > 0)
		if (r.kind == MOAT_REPORT_SETUP_FAILED) {
			moat_error_clear(err);
			setup_error(&r, plan, program, transpile, err);
			break;
		}
	if (fd >= 0)
		close(fd);
}

static pid_t do_clone3(int cgroup_fd, int *pidfd)
{
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
	args.pidfd = (uint64_t)(uintptr_t)pidfd;
	args.exit_signal = SIGCHLD;
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

static int lang_setup(const struct moat_request *req, struct moat_exec *program,
		      struct moat_exec *transpile, bool *need_transpile, char **code_name)
{
	const struct moat_lang_info *li = moat_lang_get(req->language);
	if (!li)
		return -1;
	if (asprintf(code_name, "main.%s", li->ext) < 0) {
		*code_name = NULL;
		return -1;
	}
	char *code_path = NULL;
	if (asprintf(&code_path, MOAT_SANDBOX_DIR "/%s", *code_name) < 0)
		return -1;
	int rc;
	*need_transpile = li->transpiler != NULL;
	if (li->transpiler) {
		const char *targv[] = { li->transpiler, code_path, "--bundle", "--platform=node",
					"--format=esm", "--packages=external", "--log-level=error",
					"--outfile=" TS_OUTPUT };
		const char *pargv[] = { li->interpreter, TS_OUTPUT };
		rc = exec_init(transpile, li->transpiler, targv, sizeof targv / sizeof targv[0]);
		if (rc == 0)
			rc = exec_init(program, li->interpreter, pargv, 2);
	} else {
		const char *pargv[] = { li->interpreter, code_path };
		rc = exec_init(program, li->interpreter, pargv, 2);
	}
	free(code_path);
	return rc;
}

int moat_run(const struct moat_request *req, const struct moat_run_options *opts_in,
	     struct moat_result **out, struct moat_error *err)
{
	struct moat_run_options defaults;
	if (!opts_in) {
		moat_run_options_init(&defaults);
		opts_in = &defaults;
	}
	const struct moat_run_options *opts = opts_in;
	if (moat_request_validate(req, err) < 0)
		return -1;

	int64_t t0 = moat_mono_ms();
	int rc = -1;
	struct moat_result *res = moat_result_new();
	struct moat_seccomp_prog *seccomp = NULL;
	struct moat_priv_plan priv;
	memset(&priv, 0, sizeof priv);
	struct moat_cgroup *cg = NULL;
	struct moat_net *net = NULL;
	struct moat_seccomp_log *sclog = NULL;
	struct moat_buf outs = { 0 }; /* the "outputs" stream */
	bool outs_cut = false;
	struct moat_mount_plan *plan = NULL;
	struct moat_exec program = { 0 }, transpile = { 0 };
	bool need_transpile = false;
	char *code_name = NULL;
	char **envp = NULL;
	char *chunk = NULL;
	struct run_state st;
	memset(&st, 0xff, sizeof st); /* every fd -1 */
	bool as_root = geteuid() == 0;
	sigset_t pipe_set, old_mask;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	bool mask_set = false;

	if (!res) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
		goto out;
	}
	moat_stamp("sup: run start");
	uint64_t tmpfs = opts->tmpfs_bytes ? opts->tmpfs_bytes : MOAT_DEFAULT_TMPFS_BYTES;
	if (moat_net_prepare(req, &net, err) < 0)
		goto out;
	moat_stamp("sup: net prepared");
	if (moat_seccomp_prepare(opts->policy_path, opts->seccomp_log, &seccomp, err) < 0)
		goto out;
	moat_stamp("sup: seccomp prepared");
	if (moat_priv_prepare(&priv, tmpfs, err) < 0)
		goto out;
	if (moat_cgroup_prepare(req, res, &priv, &cg, err) < 0)
		goto out;
	moat_stamp("sup: cgroup prepared");
	if (lang_setup(req, &program, &transpile, &need_transpile, &code_name) < 0 ||
	    !(envp = build_envp(req, moat_net_env(net))) || !(chunk = malloc(READ_CHUNK))) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
		goto out;
	}
	struct moat_plan_input pin = {
		.rootfs_dir = opts->rootfs_dir, .tmpfs_bytes = tmpfs, .req = req,
		.code_name = code_name, .resolv_conf = moat_net_resolv_conf(net),
	};
	if (moat_plan_build(&pin, &plan, err) < 0)
		goto out;
	moat_stamp("sup: plan built");

	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0) {
		st.report_r = sp[0];
		st.report_w = sp[1];
	}
	if ((req->outputs_count && make_pipe(&st.outputs_r, &st.outputs_w, 0) < 0) ||
	    st.report_r < 0 || make_pipe(&st.sync_r, &st.sync_w, 0) < 0 ||
	    make_pipe(&st.stdin_r, &st.stdin_w, 0) < 0 || make_pipe(&st.stdout_r, &st.stdout_w, 0) < 0 ||
	    make_pipe(&st.stderr_r, &st.stderr_w, 0) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "pipe: %s", strerror(errno));
		goto out;
	}
	st.epfd = epoll_create1(EPOLL_CLOEXEC);
	st.timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (st.epfd < 0 || st.timerfd < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll/timerfd: %s", strerror(errno));
		goto out;
	}

	struct moat_child child = {
		.plan = plan, .priv = &priv, .seccomp = seccomp, .as_root = as_root,
		.net = net, .net_fds = { -1, -1 },
		.outputs = req->outputs, .outputs_count = req->outputs_count,
		.outputs_fd = st.outputs_w,
		.sync_fd = st.sync_r, .report_fd = st.report_w, .stdin_fd = st.stdin_r,
		.stdout_fd = st.stdout_w, .stderr_fd = st.stderr_w,
		.transpile = need_transpile ? &transpile : NULL, .program = &program, .envp = envp,
	};
	moat_net_child_fds(net, child.net_fds);

	/* a sandbox that stops reading its stdin must not kill the supervisor */
	if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask) == 0)
		mask_set = true;

	moat_stamp("sup: fds ready, clone3");
	st.pid = do_clone3(moat_cgroup_clone_fd(cg), &st.pidfd);
	if (st.pid < 0) {
		int e = errno;
		char *diag = moat_userns_diagnose();
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
			       "cannot create the sandbox namespaces (clone3: %s)%s%s", strerror(e),
			       diag ? "; " : "", diag ? diag : "");
		free(diag);
		goto out;
	}
	if (st.pid == 0)
		moat_child_main(&child);

	moat_stamp("sup: clone3 returned");
	close_fd(&st.sync_r);
	close_fd(&st.report_w);
	close_fd(&st.stdin_r);
	close_fd(&st.stdout_w);
	close_fd(&st.stderr_w);
	close_fd(&st.outputs_w);

	uid_t host_uid = as_root ? (opts->root_host_id ? opts->root_host_id : MOAT_SANDBOX_UID) : getuid();
	gid_t host_gid = as_root ? (opts->root_host_id ? opts->root_host_id : MOAT_SANDBOX_GID) : getgid();
	if (moat_idmap_write(st.pid, as_root, host_uid, host_gid, err) < 0 ||
	    moat_net_attach(net, st.pid, err) < 0) {
		char *diag = moat_userns_diagnose();
		if (diag)
			moat_error_wrap(err, NULL, diag);
		free(diag);
		child_report_wins(&st, plan, &program, need_transpile ? &transpile : NULL, err);
		goto out;
	}
	if (write(st.sync_w, "g", 1) != 1) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot release the sandbox: %s",
			       strerror(errno));
		child_report_wins(&st, plan, &program, need_transpile ? &transpile : NULL, err);
		goto out;
	}
	moat_stamp("sup: released");
	/* creating, limiting and joining the v1 cgroups takes ~1 ms here: done
	 * while the child builds its mounts; it forks the program only after 'c' */
	bool joined = moat_cgroup_attach(cg, st.pid, res, err) == 0;
	if (joined && write(st.sync_w, "c", 1) != 1) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot release the sandbox: %s",
			       strerror(errno));
		joined = false;
	}
	if (!joined) {
		child_report_wins(&st, plan, &program, need_transpile ? &transpile : NULL, err);
		goto out;
	}
	moat_stamp("sup: cgroups attached");
	close_fd(&st.sync_w);
	arm_timer(st.timerfd, req->timeout_ms);
	if (moat_net_start(net, err) < 0)
		goto kill_out;
	/* the child needs nothing more from us: housekeeping now runs beside
	 * its start instead of before it */
	moat_cgroup_sweep(cg);
	moat_stamp("sup: stale leaves swept");

	fcntl(st.stdout_r, F_SETFL, O_NONBLOCK);
	fcntl(st.stderr_r, F_SETFL, O_NONBLOCK);
	fcntl(st.report_r, F_SETFL, O_NONBLOCK);
	if (st.outputs_r >= 0 && (fcntl(st.outputs_r, F_SETFL, O_NONBLOCK) < 0 ||
				  epoll_add(st.epfd, st.outputs_r, EPOLLIN) < 0)) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "outputs pipe: %s", strerror(errno));
		goto kill_out;
	}
	if (req->stdin_len == 0)
		close_fd(&st.stdin_w);
	else
		fcntl(st.stdin_w, F_SETFL, O_NONBLOCK);
	if (epoll_add(st.epfd, st.stdout_r, EPOLLIN) < 0 || epoll_add(st.epfd, st.stderr_r, EPOLLIN) < 0 ||
	    epoll_add(st.epfd, st.report_r, EPOLLIN) < 0 || epoll_add(st.epfd, st.timerfd, EPOLLIN) < 0 ||
	    epoll_add(st.epfd, st.pidfd, EPOLLIN) < 0 ||
	    (st.stdin_w >= 0 && epoll_add(st.epfd, st.stdin_w, EPOLLOUT) < 0)) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_ctl: %s", strerror(errno));
		goto out;
	}

	size_t cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	struct stream so = { st.stdout_r, MOAT_STDOUT, &res->stdout_buf, &res->stdout_len,
			     &res->stdout_truncated, cap, 0 };
	struct stream se = { st.stderr_r, MOAT_STDERR, &res->stderr_buf, &res->stderr_len,
			     &res->stderr_truncated, cap, 0 };
	size_t stdin_off = 0;
	if (opts->seccomp_log && !(sclog = moat_seccomp_log_new())) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
		goto kill_out;
	}
	bool have_status = false, have_setup_error = false, exited = false, draining = false;
	bool init_unreported = false;
	struct moat_report status = { 0 }, setup = { 0 };

	size_t outs_cap = moat_outputs_stream_cap();
	while (st.stdout_r >= 0 || st.stderr_r >= 0 || st.report_r >= 0 || st.outputs_r >= 0 ||
	       !exited) {
		struct epoll_event evs[8];
		int n = epoll_wait(st.epfd, evs, 8, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_wait: %s", strerror(errno));
			goto kill_out;
		}
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == st.stdout_r || fd == st.stderr_r) {
				struct stream *s = fd == st.stdout_r ? &so : &se;
				if (stream_read(s, opts, chunk) < 0) {
					epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
					close_fd(fd == st.stdout_r ? &st.stdout_r : &st.stderr_r);
				}
			} else if (fd == st.report_r) {
				struct moat_report r;
				int got;
				while ((got = recv_report(st.report_r, &r, &st.listener)) > 0) {
					if (r.kind == MOAT_REPORT_STATUS && !have_status) {
						status = r;
						have_status = true;
					} else if (r.kind == MOAT_REPORT_SETUP_FAILED && !have_setup_error) {
						setup = r;
						have_setup_error = true;
					} else if (r.kind == MOAT_REPORT_LISTENER && st.listener >= 0 &&
						   (!sclog || epoll_add(st.epfd, st.listener, EPOLLIN) < 0)) {
						/* unanswered, the filtered calls fail with ENOSYS */
						close_fd(&st.listener);
					}
				}
				if (got < 0) {
					epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
					close_fd(&st.report_r);
				}
			} else if (st.outputs_r >= 0 && fd == st.outputs_r) {
				ssize_t r = read(st.outputs_r, chunk, READ_CHUNK);
				if (r > 0) {
					moat_buf_append(&outs, chunk,
							moat_cap_take(outs.len, (size_t)r, outs_cap,
								      &outs_cut));
				} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
					epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
					close_fd(&st.outputs_r);
				}
			} else if (st.listener >= 0 && fd == st.listener) {
				if (moat_seccomp_log_handle(seccomp, st.listener, sclog) < 0) {
					epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
					close_fd(&st.listener);
				}
			} else if (fd == st.stdin_w) {
				ssize_t w = write(st.stdin_w, req->stdin_data + stdin_off,
						  req->stdin_len - stdin_off);
				if (w > 0)
					stdin_off += (size_t)w;
				if ((w < 0 && errno != EAGAIN && errno != EINTR) ||
				    stdin_off == req->stdin_len) {
					epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
					close_fd(&st.stdin_w);
				}
			} else if (fd == st.timerfd) {
				uint64_t ticks;
				if (read(st.timerfd, &ticks, sizeof ticks) < 0)
					continue;
				if (draining) {
					/* output pipes still open after the sandbox died: give up */
					(void)moat_result_warn(res, "output was still open %d ms after "
							       "the sandbox ended; stopped reading",
							       DRAIN_GRACE_MS);
					goto loop_done;
				}
				if (!exited && !have_status) {
					res->timed_out = true;
					if (moat_cgroup_kill(cg) < 0)
						syscall(SYS_pidfd_send_signal, st.pidfd, SIGKILL, NULL, 0);
				}
			} else if (fd == st.pidfd) {
				moat_stamp("sup: pidfd readable");
				epoll_ctl(st.epfd, EPOLL_CTL_DEL, fd, NULL);
				exited = true;
				draining = true;
				arm_timer(st.timerfd, DRAIN_GRACE_MS);
			}
		}
	}
loop_done:;
	siginfo_t si;
	memset(&si, 0, sizeof si);
	while (waitid(P_PIDFD, (id_t)st.pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	moat_stamp("sup: reaped");
	st.pid = -1;
	res->duration_ms = (uint64_t)(moat_mono_ms() - t0);

	/* a setup failure means the program never started (pid 2 reports only
	 * before its execve), even when init then reports pid 2's exit 127 */
	if (have_setup_error) {
		setup_error(&setup, plan, &program, need_transpile ? &transpile : NULL, err);
		goto out;
	}
	if (have_status && !res->timed_out) {
		int ws = status.detail;
		if (WIFEXITED(ws)) {
			res->exited = true;
			res->exit_code = WEXITSTATUS(ws);
		} else if (WIFSIGNALED(ws)) {
			res->signal = WTERMSIG(ws);
			res->killed_by = res->signal == SIGSYS ? "seccomp" : "signal";
		}
	} else if (res->timed_out) {
		res->signal = SIGKILL;
		res->killed_by = "timeout";
	} else {
		/* init died without reporting: killed from outside (OOM killer, admin) */
		res->signal = si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED ? si.si_status : SIGKILL;
		res->killed_by = "signal";
		init_unreported = true;
	}
	if (req->outputs_count &&
	    moat_outputs_render(outs.data ? outs.data : "", outs.len, outs_cut || outs.oom, res) < 0)
		(void)moat_result_warn(res, "out of memory rendering the outputs");
	if (sclog && !(res->seccomp_json = moat_seccomp_log_json(sclog)))
		(void)moat_result_warn(res, "out of memory rendering the seccomp log");
	moat_cgroup_finish(cg, res);
	cg = NULL;
	moat_stamp("sup: cgroup finished");
	/* an OOM group kill takes the init too: finish has said why */
	if (init_unreported && !strcmp(res->killed_by, "signal"))
		(void)moat_result_warn(res, "the sandbox init ended without reporting the "
				       "program's status (si_code %d, status %d)", si.si_code,
				       si.si_status);
	moat_net_finish(net, res);
	net = NULL;
	moat_stamp("sup: net finished");
	*out = res;
	res = NULL;
	rc = 0;
	goto out;

kill_out:
	syscall(SYS_pidfd_send_signal, st.pidfd, SIGKILL, NULL, 0);
out:
	reap_child(&st); /* the child was started but the run failed */
	int *fds[] = { &st.sync_w, &st.report_r, &st.stdin_w, &st.stdout_r, &st.stderr_r,
		       &st.sync_r, &st.report_w, &st.stdin_r, &st.stdout_w, &st.stderr_w,
		       &st.pidfd, &st.timerfd, &st.epfd, &st.listener, &st.outputs_r,
		       &st.outputs_w };
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		close_fd(fds[i]);
	if (mask_set) {
		/* drop a SIGPIPE raised by our own writes before unblocking */
		struct timespec zero = { 0, 0 };
		while (sigtimedwait(&pipe_set, NULL, &zero) > 0)
			;
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	}
	moat_buf_free(&outs);
	moat_seccomp_log_free(sclog);
	moat_cgroup_finish(cg, NULL);
	moat_net_finish(net, NULL);
	moat_plan_free(plan);
	moat_priv_release(&priv);
	moat_seccomp_prog_free(seccomp);
	exec_free(&program);
	exec_free(&transpile);
	free_strv(envp);
	free(code_name);
	free(chunk);
	moat_result_free(res);
	return rc;
}
