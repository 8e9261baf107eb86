/* The docker provider: `docker run` with the aistack security flags.
 * The code goes to the interpreter on stdin, env values through the docker
 * CLI's environment (`-e NAME`, never `-e NAME=value`), and a timeout (or a
 * SIGTERM/SIGINT/SIGHUP to moat) issues `docker kill <name>`. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "providers/internal.h"

#define DOCKER_MEMORY_MB 512u
#define DOCKER_CPUS 1.0
#define DOCKER_PIDS 100u
#define DOCKER_TMPFS "size=64m"
#define KILL_WAIT_MS 10000u
#define EXIT_WAIT_MS 10000u

extern char **environ;

const char *moat_docker_default_image(enum moat_language lang)
{
	switch (lang) {
	case MOAT_LANG_PYTHON: return "python:3.12-slim";
	case MOAT_LANG_JAVASCRIPT: return "node:22-slim";
	case MOAT_LANG_TYPESCRIPT: return "node:24-slim";
	case MOAT_LANG_BASH: return "bash:5";
	case MOAT_LANG_SH: return "alpine:3";
	case MOAT_LANG__COUNT: break;
	}
	return NULL;
}

/* The interpreter reads the program from stdin. */
static const char *const *interp_argv(enum moat_language lang, size_t *n)
{
	static const char *const py[] = { "python3", "-" };
	static const char *const js[] = { "node", "-" };
	static const char *const ts[] = { "node", "--input-type=module-typescript", "-" };
	static const char *const bash[] = { "bash", "-s" };
	static const char *const sh[] = { "sh", "-s" };
	switch (lang) {
	case MOAT_LANG_PYTHON: *n = 2; return py;
	case MOAT_LANG_JAVASCRIPT: *n = 2; return js;
	case MOAT_LANG_TYPESCRIPT: *n = 3; return ts;
	case MOAT_LANG_BASH: *n = 2; return bash;
	case MOAT_LANG_SH: *n = 2; return sh;
	case MOAT_LANG__COUNT: break;
	}
	*n = 0;
	return NULL;
}

bool moat_docker_env_reserved(const char *name)
{
	static const char *const exact_nocase[] = { "PATH", "HOME", "TMPDIR", "HTTP_PROXY",
						    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
						    "GODEBUG", "GOGC", "GOMAXPROCS", "GOTRACEBACK",
						    "GOMEMLIMIT", "SHELL" };
	static const char *const prefixes[] = { "DOCKER_", "LD_", "XDG_", "SSL_", "BUILDKIT_" };
	for (size_t i = 0; i < sizeof exact_nocase / sizeof exact_nocase[0]; i++)
		if (!strcasecmp(name, exact_nocase[i]))
			return true;
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (!strncasecmp(name, prefixes[i], strlen(prefixes[i])))
			return true;
	return false;
}

/* The docker CLI's own settings taken from the host environment. */
static bool cli_setting(const char *entry)
{
	static const char *const names[] = { "PATH=", "HOME=", "XDG_RUNTIME_DIR=", "DOCKER_HOST=",
					     "DOCKER_CONTEXT=", "DOCKER_CONFIG=", "DOCKER_CERT_PATH=",
					     "DOCKER_TLS_VERIFY=", "DOCKER_API_VERSION=" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strncmp(entry, names[i], strlen(names[i])))
			return true;
	return false;
}

struct strv {
	char **v;
	size_t n;
	bool oom;
};

static void strv_add(struct strv *s, char *item) /* takes item */
{
	char **nv = s->oom || !item ? NULL : realloc(s->v, (s->n + 2) * sizeof *nv);
	if (!nv) {
		free(item);
		s->oom = true;
		return;
	}
	s->v = nv;
	s->v[s->n++] = item;
	s->v[s->n] = NULL;
}

static void strv_addf(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void strv_addf(struct strv *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = NULL;
	if (vasprintf(&p, fmt, ap) < 0)
		p = NULL;
	va_end(ap);
	strv_add(s, p);
}

void moat_docker_cmd_free(struct moat_docker_cmd *cmd)
{
	if (!cmd)
		return;
	moat_strv_free(cmd->argv);
	moat_strv_free(cmd->envp);
	free(cmd->name);
	memset(cmd, 0, sizeof *cmd);
}

static bool name_ok(const char *name)
{
	if (!name || !((*name >= 'a' && *name <= 'z') || (*name >= '0' && *name <= '9')) ||
	    strlen(name) > 128)
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return true;
}

int moat_docker_build(const struct moat_request *req, const struct moat_config *cfg,
		      const char *docker_bin, const char *name, char *const *host_env,
		      struct moat_docker_cmd *out, struct moat_error *err)
{
	memset(out, 0, sizeof *out);
	const struct moat_lang_info *li = moat_lang_get(req->language);
	size_t ni = 0;
	const char *const *interp = li ? interp_argv(req->language, &ni) : NULL;
	if (!interp)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "invalid language");
	if (!docker_bin || !*docker_bin)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "docker CLI not found");
	if (!name_ok(name))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "invalid container name");
	if (req->files_count)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the docker provider does not support \"files\" (no host "
				      "path is ever mounted); use the native provider");
	if (req->stdin_len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the docker provider does not support \"stdin\" (the program "
				      "itself arrives on stdin); use the native provider");
	for (size_t i = 0; i < req->env_count; i++) {
		const char *k = req->env[i].key;
		if (!k || !moat_env_name_valid(k, strlen(k)))
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "invalid env name (names must match "
					      "^[A-Za-z_][A-Za-z0-9_]*$)");
		if (moat_docker_env_reserved(k))
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "env name %s cannot be used with the docker provider: "
					      "it would configure the docker CLI on the host", k);
		if (req->env[i].value_len && memchr(req->env[i].value, '\0', req->env[i].value_len))
			return moat_error_set(err, MOAT_ERR_POLICY, 0, "NUL in env %s", k);
	}
	const char *image = moat_config_image(cfg, li->name);
	if (!image)
		image = moat_docker_default_image(req->language);

	struct strv a = { 0 }, e = { 0 };
	strv_add(&a, strdup(docker_bin));
	strv_add(&a, strdup("run"));
	strv_add(&a, strdup("--rm"));
	strv_add(&a, strdup("-i"));
	strv_addf(&a, "--name=%s", name);
	strv_add(&a, strdup("--read-only"));
	strv_add(&a, strdup("--cap-drop=ALL"));
	strv_add(&a, strdup("--security-opt=no-new-privileges"));
	strv_add(&a, strdup("--user=65534:65534"));
	strv_add(&a, strdup(req->network ? "--network=bridge" : "--network=none"));
	uint64_t mem = req->memory_mb ? req->memory_mb : DOCKER_MEMORY_MB;
	strv_addf(&a, "--memory=%llum", (unsigned long long)mem);
	strv_addf(&a, "--memory-swap=%llum", (unsigned long long)mem);
	strv_addf(&a, "--cpus=%.3f", req->cpus > 0 ? req->cpus : DOCKER_CPUS);
	strv_addf(&a, "--pids-limit=%llu",
		  (unsigned long long)(req->pids_limit ? req->pids_limit : DOCKER_PIDS));
	strv_add(&a, strdup("--tmpfs=/tmp:rw,noexec,nosuid,nodev," DOCKER_TMPFS));
	strv_add(&a, strdup("--tmpfs=/sandbox:rw,nosuid,nodev,mode=1777," DOCKER_TMPFS));
	strv_add(&a, strdup("--workdir=/sandbox"));
	for (size_t i = 0; i < req->env_count; i++) {
		strv_add(&a, strdup("-e"));
		strv_add(&a, strdup(req->env[i].key)); /* the value comes from envp */
	}
	strv_add(&a, strdup(image));
	for (size_t i = 0; i < ni; i++)
		strv_add(&a, strdup(interp[i]));

	bool have_path = false;
	for (char *const *p = host_env; p && *p; p++)
		if (cli_setting(*p)) {
			have_path |= !strncmp(*p, "PATH=", 5);
			strv_add(&e, strdup(*p));
		}
	if (!have_path)
		strv_add(&e, strdup("PATH=/usr/local/bin:/usr/bin:/bin"));
	for (size_t i = 0; i < req->env_count; i++)
		strv_addf(&e, "%s=%s", req->env[i].key, req->env[i].value ? req->env[i].value : "");
	out->name = strdup(name);
	if (a.oom || e.oom || !out->name) {
		moat_strv_free(a.v);
		moat_strv_free(e.v);
		free(out->name);
		out->name = NULL;
		return moat_error_oom(err);
	}
	out->argv = a.v;
	out->envp = e.v;
	return 0;
}

/* ---- running ---- */

/* docker_bin: the config's dockerPath, else "docker" on $PATH. */
static char *find_docker(const struct moat_config *cfg)
{
	if (cfg->docker_path)
		return access(cfg->docker_path, X_OK) == 0 ? strdup(cfg->docker_path) : NULL;
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	char *copy = strdup(path), *save = NULL;
	for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
	     dir = strtok_r(NULL, ":", &save)) {
		char *cand = NULL;
		struct stat st;
		if (*dir != '/' || asprintf(&cand, "%s/docker", dir) < 0)
			continue;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
			free(copy);
			return cand;
		}
		free(cand);
	}
	free(copy);
	return NULL;
}

static pid_t spawn(char **argv, char **envp, int in, int outfd, int errfd, const sigset_t *mask)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	sigprocmask(SIG_SETMASK, mask, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (dup2(in, 0) < 0 || dup2(outfd, 1) < 0 || dup2(errfd, 2) < 0)
		_exit(127);
	execve(argv[0], argv, envp);
	_exit(127);
}

/* Waits for pid up to ms; SIGKILLs it after that. Returns the wait status. */
static int wait_bounded(pid_t pid, uint64_t ms)
{
	int64_t end = moat_mono_ms() + (int64_t)ms;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid || (r < 0 && errno != EINTR))
			return st;
		if (moat_mono_ms() >= end) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return st;
		}
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

static void docker_kill(const struct moat_docker_cmd *cmd, const sigset_t *mask)
{
	char *argv[] = { cmd->argv[0], (char *)"kill", cmd->name, NULL };
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		return;
	pid_t pid = spawn(argv, cmd->envp, devnull, devnull, devnull, mask);
	close(devnull);
	if (pid > 0)
		wait_bounded(pid, KILL_WAIT_MS);
}

/* "docker: Error response from daemon: ..." / "Cannot connect to the Docker daemon". */
static bool docker_failed(const struct moat_result *res)
{
	if (!res->stderr_buf || res->stderr_len == 0)
		return false;
	return !strncmp(res->stderr_buf, "docker:", 7) ||
	       memmem(res->stderr_buf, res->stderr_len, "Cannot connect to the Docker daemon", 34) ||
	       memmem(res->stderr_buf, res->stderr_len, "Error response from daemon", 26);
}

static void first_line(const struct moat_result *res, char *buf, size_t size)
{
	size_t n = 0;
	for (size_t i = 0; i < res->stderr_len && n + 1 < size; i++) {
		char c = res->stderr_buf[i];
		if (c == '\n')
			break;
		buf[n++] = (c >= 0x20 && c < 0x7f) ? c : '?';
	}
	buf[n] = '\0';
}

int moat_docker_run(const struct moat_request *req, const struct moat_provider_options *o,
		    struct moat_result **out, struct moat_error *err)
{
	char *docker = find_docker(o->cfg);
	if (!docker)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOENT,
				      "docker CLI not found%s; install Docker or pick another "
				      "provider (native, e2b, daytona)",
				      o->cfg->docker_path ? " at dockerPath" : " on PATH");
	unsigned char rnd[8];
	char name[32];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
		free(docker);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "getrandom: %s",
				      strerror(errno));
	}
	snprintf(name, sizeof name, "moat-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
		 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	struct moat_docker_cmd cmd;
	int rc = moat_docker_build(req, o->cfg, docker, name, environ, &cmd, err);
	free(docker);
	if (rc < 0)
		return -1;

	rc = -1;
	struct moat_result *res = moat_result_new();
	int in_p[2] = { -1, -1 }, out_p[2] = { -1, -1 }, err_p[2] = { -1, -1 }, sfd = -1;
	pid_t pid = -1;
	sigset_t stop_set, old_mask;
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGINT);
	sigaddset(&stop_set, SIGHUP);
	sigaddset(&stop_set, SIGPIPE);
	bool masked = false;
	if (!res) {
		moat_error_oom(err);
		goto out;
	}
	if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "pipe: %s", strerror(errno));
		goto out;
	}
	/* a stop signal to moat becomes `docker kill`: no container outlives moat */
	if (sigprocmask(SIG_BLOCK, &stop_set, &old_mask) == 0)
		masked = true;
	sfd = signalfd(-1, &stop_set, SFD_CLOEXEC | SFD_NONBLOCK);
	int64_t t0 = moat_mono_ms();
	pid = spawn(cmd.argv, cmd.envp, in_p[0], out_p[1], err_p[1], &old_mask);
	if (pid < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "fork: %s", strerror(errno));
		goto out;
	}
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	in_p[0] = out_p[1] = err_p[1] = -1;
	if (fcntl(in_p[1], F_SETFL, O_NONBLOCK) < 0) {
		/* a blocking write of the code would stall the timeout */
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "fcntl: %s", strerror(errno));
		docker_kill(&cmd, &old_mask);
		goto out;
	}

	size_t cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	size_t off = 0;
	int64_t deadline = t0 + (int64_t)req->timeout_ms;
	bool killed = false, stopped = false;
	char *chunk = malloc(65536);
	if (!chunk) {
		moat_error_oom(err);
		goto out;
	}
	while (out_p[0] >= 0 || err_p[0] >= 0) {
		int64_t now = moat_mono_ms();
		if (!killed && now >= deadline) {
			res->timed_out = true;
			killed = true;
			docker_kill(&cmd, &old_mask);
			deadline = moat_mono_ms() + EXIT_WAIT_MS;
			continue;
		}
		if (killed && now >= deadline)
			break; /* the CLI keeps its pipes open: give up reading */
		struct pollfd p[4] = {
			{ out_p[0], POLLIN, 0 }, { err_p[0], POLLIN, 0 },
			{ in_p[1], POLLOUT, 0 }, { sfd, POLLIN, 0 },
		};
		int wait = (int)(deadline - now);
		if (poll(p, 4, wait) < 0 && errno != EINTR) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "poll: %s", strerror(errno));
			docker_kill(&cmd, &old_mask);
			goto out_chunk;
		}
		for (int i = 0; i < 2; i++) {
			int *fd = i == 0 ? &out_p[0] : &err_p[0];
			if (*fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(*fd, chunk, 65536);
			if (n > 0)
				moat_prov_output(res, o, i == 0 ? MOAT_STDOUT : MOAT_STDERR, chunk,
						 (size_t)n, cap);
			else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				close(*fd);
				*fd = -1;
			}
		}
		if (in_p[1] >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(in_p[1], req->code + off, req->code_len - off);
			if (n > 0)
				off += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == req->code_len) {
				close(in_p[1]);
				in_p[1] = -1;
			}
		}
		if (sfd >= 0 && (p[3].revents & POLLIN)) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGPIPE &&
			    !killed) {
				killed = stopped = true;
				docker_kill(&cmd, &old_mask);
				deadline = moat_mono_ms() + EXIT_WAIT_MS;
			}
		}
	}
	int st = wait_bounded(pid, EXIT_WAIT_MS);
	pid = -1;
	res->duration_ms = (uint64_t)(moat_mono_ms() - t0);
	res->limit_memory = res->limit_pids = res->limit_cpu = "docker";
	if (stopped) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, EINTR,
			       "moat was asked to stop; the container %s was killed", cmd.name);
		goto out_chunk;
	}
	if (res->timed_out) {
		res->killed_by = "timeout";
		res->signal = SIGKILL;
	} else if (WIFEXITED(st)) {
		int code = WEXITSTATUS(st);
		if (code == 125 && docker_failed(res)) {
			char line[300];
			first_line(res, line, sizeof line);
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "docker could not run the "
				       "container: %s", line);
			goto out_chunk;
		}
		res->exited = true;
		res->exit_code = code;
	} else {
		res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : SIGKILL;
		res->killed_by = "signal";
	}
	*out = res;
	res = NULL;
	rc = 0;
out_chunk:
	free(chunk);
out:
	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	int fds[] = { in_p[0], in_p[1], out_p[0], out_p[1], err_p[0], err_p[1], sfd };
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (masked) {
		struct timespec zero = { 0, 0 };
		sigset_t pipe_only;
		sigemptyset(&pipe_only);
		sigaddset(&pipe_only, SIGPIPE);
		while (sigtimedwait(&pipe_only, NULL, &zero) > 0)
			;
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
	}
	moat_docker_cmd_free(&cmd);
	moat_result_free(res);
	return rc;
}
