/* The prepare phase: everything a run needs that can be built before
 * clone3, owned by struct run; and run_release, which frees all of it. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/stamp.h"
#include "core/sys.h"
#include "runner/run.h"

static const char *const EXEC_DIRS[] = { "/usr/local/bin", "/usr/bin", "/bin" };
/* esbuild's arguments after the code file, for a cold run's transpile step
 * and a warm node's (src/pool/warm.c sends them): one bundle, ESM, packages
 * left to node, at RUN_TS_OUTPUT */
const char *const run_ts_flags[7] = { "--bundle", "--platform=node", "--format=esm",
				      "--packages=external", "--log-level=error",
				      "--outfile=" RUN_TS_OUTPUT, NULL };

static void exec_free(struct moat_exec *e)
{
	moat_strv_free(e->paths);
	moat_strv_free(e->argv);
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
			moat_strv_free(v);
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

/* An argv request: argv[0] itself when it holds a '/' (relative to the
 * program's working directory), else argv[0] in each directory of the
 * sandbox's own PATH; no code file. */
static int command_setup(struct run *r)
{
	const struct moat_request *req = r->req;
	const char *name = req->argv[0];
	r->program.command = true;
	if (strchr(name, '/')) {
		r->program.paths = strv_new(&name, 1);
		r->program.argv = strv_new((const char *const *)req->argv, req->argc);
		return r->program.paths && r->program.argv ? 0 : -1;
	}
	return exec_init(&r->program, name, (const char *const *)req->argv, req->argc);
}

/* The program (and the transpiler, for TypeScript) and the name of the
 * code file. */
static int lang_setup(struct run *r)
{
	if (r->req->argc)
		return command_setup(r);
	const struct moat_lang_info *li = moat_lang_get(r->req->language);
	if (!li)
		return -1;
	if (asprintf(&r->code_name, "main.%s", li->ext) < 0) {
		r->code_name = NULL;
		return -1;
	}
	char *code_path = NULL;
	if (asprintf(&code_path, MOAT_SANDBOX_DIR "/%s", r->code_name) < 0)
		return -1;
	int rc;
	r->need_transpile = li->transpiler != NULL;
	if (li->transpiler) {
		const char *targv[2 + sizeof run_ts_flags / sizeof run_ts_flags[0]] = {
			li->transpiler, code_path };
		size_t tn = 2;
		for (size_t i = 0; run_ts_flags[i]; i++)
			targv[tn++] = run_ts_flags[i];
		const char *pargv[] = { li->interpreter, RUN_TS_OUTPUT };
		rc = exec_init(&r->transpile, li->transpiler, targv, tn);
		if (rc == 0)
			rc = exec_init(&r->program, li->interpreter, pargv, 2);
	} else {
		const char *pargv[] = { li->interpreter, code_path };
		rc = exec_init(&r->program, li->interpreter, pargv, 2);
	}
	free(code_path);
	return rc;
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
/* Does the program's text (its code or a file) name a Spin SDK package,
 * @spinframework/spin-kv or one runtime/js/kv-hooks.mjs says moat does not
 * offer? */
static bool names_spin_kv(const struct moat_request *req)
{
	static const char pkg[] = "@spinframework/spin-";
	if (!req->code ||
	    (req->language != MOAT_LANG_JAVASCRIPT && req->language != MOAT_LANG_TYPESCRIPT))
		return false;
	if (memmem(req->code, req->code_len, pkg, sizeof pkg - 1))
		return true;
	for (size_t i = 0; i < req->files_count; i++)
		if (memmem(req->files[i].value, req->files[i].value_len, pkg, sizeof pkg - 1))
			return true;
	return false;
}

/* The variables the runtime shims need (docs/KV.md): the store's fd, and
 * where Python and node find spin_sdk and @spinframework/spin-kv when the
 * shims are bound. A request's own PYTHONPATH/NODE_OPTIONS come after. */
static int shim_env(const struct run *r, char **out, size_t *n)
{
	const struct moat_request *req = r->req;
	if (req->kv_enabled && !(out[(*n)++] = strdup("MOAT_KV_FD=" RUN_KV_FD_STR)))
		return -1;
	if (!r->opts.runtime_dir)
		return 0;
	const char *py = NULL, *node = NULL;
	for (size_t i = 0; i < req->env_count; i++) {
		if (!strcmp(req->env[i].key, "PYTHONPATH"))
			py = req->env[i].value;
		else if (!strcmp(req->env[i].key, "NODE_OPTIONS"))
			node = req->env[i].value;
	}
	if (!py && asprintf(&out[(*n)++], "PYTHONPATH=" RUN_RUNTIME_PY) < 0)
		return -1;
	/* node's resolve hook costs 60-100 ms of start-up (a loader thread):
	 * only for programs that name the package */
	if (names_spin_kv(req) &&
	    asprintf(&out[(*n)++], "NODE_OPTIONS=--import=" RUN_RUNTIME_KV_HOOK "%s%s",
		     node ? " " : "", node ? node : "") < 0)
		return -1;
	return 0;
}

static char **build_envp(const struct run *r, char *const *net_env)
{
	const struct moat_request *req = r->req;
	static const char *const defaults[][2] = {
		{ "PATH", RUN_SANDBOX_PATH }, { "HOME", MOAT_SANDBOX_DIR },
		{ "LANG", "C.UTF-8" }, { "TMPDIR", "/tmp" },
	};
	size_t nd = sizeof defaults / sizeof defaults[0];
	size_t nn = 0;
	while (net_env && net_env[nn])
		nn++;
	char **envp = calloc(nd + nn + req->env_count + 3 + 1, sizeof *envp);
	if (!envp)
		return NULL;
	size_t n = 0;
	if (shim_env(r, envp, &n) < 0)
		goto fail;
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
	moat_strv_free(envp);
	return NULL;
}

/* opts.workdir: its real path (symlinks resolved here, so that what is
 * opened inside is the directory the caller named), a directory; and no
 * request file under work/, which the bind would hide. */
static int workdir_prepare(struct run *r, struct moat_error *err)
{
	const char *dir = r->opts.workdir;
	if (!dir)
		return 0;
	if (!dir[0])
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "the work directory is empty");
	if (!(r->workdir = realpath(dir, NULL))) {
		if (errno == ENOMEM)
			return moat_error_oom(err);
		return moat_error_set(err, MOAT_ERR_CONFIG, errno, "the work directory %s: %s", dir,
				      strerror(errno));
	}
	struct stat st;
	if (stat(r->workdir, &st) < 0 || !S_ISDIR(st.st_mode))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the work directory %s is not a directory", dir);
	const struct moat_request *req = r->req;
	size_t n = sizeof MOAT_WORK_NAME - 1;
	for (size_t i = 0; i < req->files_count; i++) {
		const char *k = req->files[i].key;
		if (!strncmp(k, MOAT_WORK_NAME, n) && (k[n] == '/' || !k[n]))
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "a file under %s/ would be hidden by the work directory "
					      "mounted at " MOAT_WORK_MOUNT, MOAT_WORK_NAME);
	}
	return 0;
}

static int make_pipe(int *rd, int *wr)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	*rd = p[0];
	*wr = p[1];
	return 0;
}

/* Pipes for sync, stdin, stdout, stderr (and outputs), the report socket,
 * the epoll set and the wall-clock timer; all O_CLOEXEC. */
static int make_channels(struct run *r, struct moat_error *err)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0) {
		r->report_r = sp[0];
		r->report_w = sp[1];
	}
	if ((r->req->outputs_count && make_pipe(&r->outputs_r, &r->outputs_w) < 0) ||
	    r->report_r < 0 || make_pipe(&r->sync_r, &r->sync_w) < 0 ||
	    make_pipe(&r->stdin_r, &r->stdin_w) < 0 || make_pipe(&r->stdout_r, &r->stdout_w) < 0 ||
	    make_pipe(&r->stderr_r, &r->stderr_w) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "pipe: %s", strerror(errno));
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (r->epfd < 0 || r->timerfd < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll/timerfd: %s",
				      strerror(errno));
	return 0;
}

/* kvEnabled: the store opened (a store that cannot be opened fails the run
 * before it starts), the broker, and the socket the program gets. */
static int kv_prepare(struct run *r, struct moat_error *err)
{
	if (r->zygote_fd >= 0) {
		/* the zygote's control socket: the program's fd 4, no broker */
		if (r->req->kv_enabled)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "a zygote's sandbox needs its control socket and "
					      "takes no kvEnabled");
		if ((r->kv_child = fcntl(r->zygote_fd, F_DUPFD_CLOEXEC, 0)) < 0)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "dup: %s",
					      strerror(errno));
		return 0;
	}
	if (!r->req->kv_enabled)
		return 0;
	moat_kv_quota_default(&r->kvq);
	if (r->opts.kv_max_keys)
		r->kvq.max_keys = r->opts.kv_max_keys;
	if (r->opts.kv_max_bytes)
		r->kvq.max_bytes = r->opts.kv_max_bytes;
	if (r->opts.kv_max_value)
		r->kvq.max_value = r->opts.kv_max_value;
	if (r->opts.kv_min_free)
		r->kvq.min_free = r->opts.kv_min_free == MOAT_KV_FREE_OFF ? 0 : r->opts.kv_min_free;
	if (r->kvq.max_value > MOAT_KV_LIMIT_MAX_VALUE)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the key-value value quota is above %u bytes",
				      MOAT_KV_LIMIT_MAX_VALUE);
	if (moat_kv_open(r->opts.kv_store, &r->kv, err) < 0) {
		/* the message names the store's file or server: the operator's,
		 * not the request's (moat serve answers err to its client) */
		if (r->opts.on_notice && err->message)
			r->opts.on_notice(r->opts.notice_ctx, err->message);
		return moat_error_set(err, err->type, err->sys_errno,
				      "the key-value store cannot be opened%s",
				      r->opts.on_notice ? " (the operator's log says why)" : "");
	}
	if (!(r->broker = moat_kv_broker_new(r->kv, r->req->sandbox_id, r->req->sandbox_id_len,
					     &r->kvq)))
		return moat_error_oom(err);
	moat_kv_broker_set_notice(r->broker, r->opts.on_notice, r->opts.notice_ctx);
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				      strerror(errno));
	r->kv_fd = sp[0];
	r->kv_child = sp[1];
	return 0;
}

void run_init(struct run *r, const struct moat_request *req, const struct moat_run_options *opts)
{
	memset(r, 0, sizeof *r);
	r->req = req;
	if (opts)
		r->opts = *opts;
	else
		moat_run_options_init(&r->opts);
	r->as_root = geteuid() == 0;
	r->t0 = moat_mono_ms();
	int *fds[] = { &r->sync_w, &r->report_r, &r->stdin_w, &r->stdout_r, &r->stderr_r,
		       &r->outputs_r, &r->sync_r, &r->report_w, &r->stdin_r, &r->stdout_w,
		       &r->stderr_w, &r->outputs_w, &r->epfd, &r->timerfd, &r->pidfd,
		       &r->listener, &r->kv_fd, &r->kv_child, &r->thrash_fd, &r->session_fd,
		       &r->session_child, &r->session_intr_fd, &r->session_pid2fd };
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		*fds[i] = -1;
	r->zygote_fd = -1;
	r->pid = -1;
}

static int plan_build(struct run *r, struct moat_error *err)
{
	struct moat_plan_input pin = {
		.rootfs_dir = r->opts.rootfs_dir,
		.tmpfs_bytes = r->opts.tmpfs_bytes ? r->opts.tmpfs_bytes : MOAT_DEFAULT_TMPFS_BYTES,
		.req = r->req, .code_name = r->code_name,
		.resolv_conf = moat_net_resolv_conf(r->net), .runtime_dir = r->opts.runtime_dir,
		.workdir = r->workdir, .proc_unmasked = r->zygote_fd >= 0, .own_tree = r->own_tree,
		.runtime_bin = r->live,
	};
	if (moat_plan_build(&pin, &r->plan, err) < 0)
		return -1;
	moat_stamp("sup: plan built");
	return 0;
}

/* The program, its environment, the seccomp log and the mount plan: a
 * zygote's template builds it now (its pid 1s are cloned from its memory),
 * a run spawned here after clone3 (run_plan_hand_over), for pid 1 to read
 * from the sync pipe. Every pointer the plan's ops keep to data (the
 * request's files, the network's resolv.conf) is made before clone3. */
static int program_prepare(struct run *r, struct moat_error *err)
{
	if (lang_setup(r) < 0 || !(r->envp = build_envp(r, moat_net_env(r->net))) ||
	    (r->opts.seccomp_log && !(r->sclog = moat_seccomp_log_new(!r->opts.policy_path))))
		return moat_error_oom(err);
	if (r->origin == RUN_TEMPLATE)
		return plan_build(r, err);
	r->plan_piped = true;
	return 0;
}

int run_plan_hand_over(struct run *r, struct moat_error *err)
{
	if (!r->plan_piped)
		return 0;
	if (plan_build(r, err) < 0)
		return -1;
	size_t len = moat_plan_flat_size(r->plan);
	if (len > MOAT_PLAN_MAX_BYTES)
		return moat_error_set(err, MOAT_ERR_CONFIG, EFBIG,
				      "the mount plan is larger than %u MiB",
				      (unsigned)(MOAT_PLAN_MAX_BYTES >> 20));
	/* the sync byte and the header just before the plan: one write */
	char *buf = malloc(RUN_PLAN_PREFIX + len);
	if (!buf)
		return moat_error_oom(err);
	r->plan_flat = buf;
	r->plan_flat_len = len;
	char *flat = buf + RUN_PLAN_PREFIX;
	struct moat_plan_header h = { .len = len, .at = (uint64_t)(uintptr_t)flat };
	flat[-(ptrdiff_t)sizeof h - 1] = (char)MOAT_SYNC_PLAN;
	memcpy(flat - sizeof h, &h, sizeof h);
	if (!moat_plan_flatten(r->plan, flat, len))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, EINVAL,
				      "the mount plan could not be laid out for the sandbox");
	return 0;
}

void run_plan_flat_free(struct run *r)
{
	free(r->plan_flat);
	r->plan_flat = NULL;
	r->plan_flat_len = 0;
}

int run_prepare(struct run *r, struct moat_error *err)
{
	const struct moat_request *req = r->req;
	if (!(r->res = moat_result_new()))
		return moat_error_oom(err);
	moat_stamp("sup: run start");
	uint64_t tmpfs = r->opts.tmpfs_bytes ? r->opts.tmpfs_bytes : MOAT_DEFAULT_TMPFS_BYTES;
	if (moat_net_prepare(req, &r->net, err) < 0)
		return -1;
	moat_stamp("sup: net prepared");
	if (r->zygote_fd >= 0 && (r->opts.policy_path || r->opts.seccomp_log))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a zygote's sandbox has the zygote policy only");
	/* a zygote's child: the template's filter (it is the default policy's:
	 * run_sandbox_create_adopted refuses --policy and the seccomp log) */
	if (r->origin != RUN_ADOPTED &&
	    (r->zygote_fd >= 0 ? moat_seccomp_prepare_zygote(&r->seccomp, err)
				 : moat_seccomp_prepare(r->opts.policy_path, r->opts.seccomp_log,
							&r->seccomp, err)) < 0)
		return -1;
	moat_stamp("sup: seccomp prepared");
	if (moat_priv_prepare(&r->priv, tmpfs, err) < 0)
		return -1;
	/* Landlock would forbid the mounts of the sandboxes a zygote builds;
	 * each of them applies its own */
	if (r->zygote_fd >= 0)
		r->priv.landlock_abi = 0;
	int ll = r->zygote_fd >= 0 ? 0
		 : moat_landlock_decide(r->priv.landlock_abi, r->opts.strict_isolation, err);
	if (ll < 0)
		return -1;
	if (ll > 0 && moat_result_warn(r->res, "%s", MOAT_LANDLOCK_MISSING) < 0)
		return moat_error_oom(err);
	if (moat_cgroup_prepare(req, r->res, &r->cg, err) < 0)
		return -1;
	/* socket buffers: charged to memory.max on cgroup v2 only */
	unsigned long nofile = 0;
	for (int i = 0; i < r->priv.rlimit_count; i++)
		if (r->priv.rlimits[i].resource == RLIMIT_NOFILE)
			nofile = (unsigned long)r->priv.rlimits[i].value.rlim_max;
	if (req->memory_mb && !moat_cgroup_charges_sockets(r->cg) &&
	    moat_net_warn_uncharged(r->res, r->res->limit_memory, nofile) < 0)
		return moat_error_oom(err);
	struct moat_cgroup_rlimit rl[MOAT_CGROUP_MAX_RLIMITS];
	for (size_t i = 0, n = moat_cgroup_rlimits(r->cg, rl); i < n; i++)
		if (moat_priv_add_rlimit(&r->priv, rl[i].resource, (rlim_t)rl[i].value, err) < 0)
			return -1;
	moat_stamp("sup: cgroup prepared");
	if (workdir_prepare(r, err) < 0)
		return -1;
	if (!(r->chunk = malloc(RUN_READ_CHUNK)))
		return moat_error_oom(err);
	/* a zygote's child: the program, its environment and its mounts are
	 * the template's (the request's code, files and env reach pid 2 in
	 * its frame) */
	if (r->origin != RUN_ADOPTED && program_prepare(r, err) < 0)
		return -1;
	if (make_channels(r, err) < 0 || kv_prepare(r, err) < 0)
		return -1;
	r->prepared = true;
	return 0;
}

void run_release(struct run *r)
{
	run_kill(r); /* a child still there: the run failed or was abandoned */
	int *fds[] = { &r->sync_w, &r->report_r, &r->stdin_w, &r->stdout_r, &r->stderr_r,
		       &r->outputs_r, &r->sync_r, &r->report_w, &r->stdin_r, &r->stdout_w,
		       &r->stderr_w, &r->outputs_w, &r->epfd, &r->timerfd, &r->pidfd,
		       &r->listener, &r->kv_fd, &r->kv_child, &r->thrash_fd, &r->session_fd,
		       &r->session_child, &r->session_intr_fd, &r->session_pid2fd };
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		moat_close_fd(fds[i]);
	moat_buf_free(&r->session_in);
	free(r->frozen);
	r->frozen = NULL;
	free(r->session_reply);
	moat_result_free(r->session_proto);
	moat_buf_free(&r->outs);
	moat_kv_broker_free(r->broker);
	free(r->pool_frame);
	moat_kv_close(r->kv);
	moat_seccomp_log_free(r->sclog);
	moat_cgroup_finish(r->cg, NULL);
	moat_net_finish(r->net, NULL);
	moat_plan_free(r->plan);
	run_plan_flat_free(r);
	moat_priv_release(&r->priv);
	moat_seccomp_prog_free(r->seccomp);
	exec_free(&r->program);
	exec_free(&r->transpile);
	moat_strv_free(r->envp);
	free(r->code_name);
	free(r->workdir);
	free(r->chunk);
	moat_result_free(r->res);
}
