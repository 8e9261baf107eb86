/* `moat serve` against its contract (docs/SERVE.md), from the outside: the
 * real binary, started in the background as root and as uid 65534 (loop
 * index = harness mode), spoken to with the real curl command line and, for
 * malformed requests, with raw sockets.
 *
 * Every test starts its own server (server_start): a fresh temp dir holds its
 * unix socket or it gets a free TCP port on 127.0.0.1, its access log
 * (stderr, to a file), its config and token files. The test waits until
 * GET /healthz answers, makes its requests, and stops it (server_stop):
 * SIGTERM, exit status 0, no process of it left, its socket file removed.
 *
 * Nothing left behind is checked by making the test process a child
 * subreaper: a process of the server that outlives it is reparented to the
 * test, which then sees it among its own children. A test that fails half
 * way (Check ends it with _exit, then kills its process group) leaves its
 * server to a guard process in a group of its own that kills it and removes
 * the temp dir.
 *
 * Tests that cannot run in a mode say "note: ... not run" on stderr, as the
 * other suites do. */
#include <ctype.h>
#include <grp.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define ROOTLESS_ID 65534
#define SCRIPT_CAP 262144 /* stdout/stderr cap of a script, bytes */
#define TOKEN "serve-test-token-5f0c2a9e7b41d3"

static const char *const MODE_NAME[] = { "root", "rootless" };

/* ---- small helpers ----------------------------------------------------------- */

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The whole file, NUL-terminated (*len without it), or NULL. */
static char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	for (;;) {
		if (n + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

static void write_file(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		ck_assert_msg(w > 0, "write %s: %s", path, strerror(errno));
		off += (size_t)w;
	}
	ck_assert_int_eq(fchmod(fd, mode), 0);
	ck_assert_int_eq(close(fd), 0);
}

/* Removes a directory of plain files (the server's temp dir). */
static void rm_flat_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[PATH_MAX];
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* The handler shims: runtime/ of the checkout that built $MOAT_BIN
 * (<dir of moat>/../runtime). */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	socklen_t l = sizeof a;
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Children of pid (every thread's), into out[]; returns how many. */
static int proc_children(pid_t pid, pid_t *out, int max)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char f[384];
		snprintf(f, sizeof f, "%s/%s/children", path, e->d_name);
		char *txt = slurp(f, NULL);
		if (!txt)
			continue;
		char *save = NULL;
		for (char *tok = strtok_r(txt, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
			if (n < max)
				out[n++] = (pid_t)atol(tok);
		free(txt);
	}
	closedir(d);
	return n;
}

/* pid's argv, space-separated (NULL: gone). */
static char *proc_cmdline(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	size_t cl = 0;
	char *cmd = slurp(path, &cl);
	for (size_t i = 0; cmd && i + 1 < cl; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	return cmd;
}

/* "pid (comm) state cmdline" for messages. */
static void proc_desc(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	char *stat = slurp(path, NULL);
	char *cmd = proc_cmdline(pid);
	char *nl = stat ? strchr(stat, '\n') : NULL;
	if (nl)
		*nl = '\0';
	snprintf(buf, size, "[%.120s] %.200s", stat ? stat : "gone", cmd ? cmd : "");
	free(stat);
	free(cmd);
}

static const cJSON *jget(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *key)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* ---- the server ---------------------------------------------------------------- */

struct server_opts {
	bool socket;              /* --socket DIR/moat.sock, else --listen 127.0.0.1:<free port>
				   * (with --no-auth unless the test's token or args say) */
	const char *config;       /* JSON for --config, or NULL */
	bool token;               /* --token-file with TOKEN */
	const char *const *args;  /* more arguments (NULL-terminated), or NULL */
	bool no_listener;         /* neither --socket nor --listen: the test's args say */
	const char *const *env;   /* NULL: the harness's environment (with its cgroups) */
	const char *kv;           /* --kv SPEC; NULL: a store file in the server's dir;
				   * "": no --kv (the tests' own args say) */
	int pool;                 /* --pool N; 0 (the tests of cold runs): --pool 0;
				   * -1: no --pool (the service's default) */
	bool readonly_root;       /* every mount but /proc, /sys, /dev read-only, as a
				   * pod's readOnlyRootFilesystem (and no emptyDir) */
	int zygote;               /* 1: --pool-zygote; -1: --no-pool-zygote; 0: neither
				   * (the service's default: on, with a pool) */
	const int *log_pipe;      /* a pipe's write end to be the server's stdout and
				   * stderr (its log in either mode), or NULL: files */
};

struct server {
	int mode;
	bool running;             /* not reaped yet */
	struct harness_proc p;
	pid_t guard;
	int guard_fd;
	char dir[64];
	char sock[128];           /* "" for TCP */
	int port;
	char log[128];            /* the server's stderr: the access log */
	char outf[128];           /* its stdout */
	char cfg[128];
	char tokf[128];
	char kvf[128];            /* the store file (--kv), "" when not ours */
	char url[128];            /* http://127.0.0.1:PORT or http://localhost (socket) */
	int calls;                /* curl calls made, for file names */
	int open_calls;           /* started and not finished */
	int status;               /* exit status once reaped */
	int log_pipe;             /* server_opts.log_pipe, or -1 */
};

/* pids the leftover check must not count: live servers and guards */
static pid_t known[32];
static int nknown;

static void known_add(pid_t p)
{
	if (nknown < (int)(sizeof known / sizeof known[0]))
		known[nknown++] = p;
}

static void known_del(pid_t p)
{
	for (int i = 0; i < nknown; i++)
		if (known[i] == p)
			known[i] = known[--nknown];
}

static bool is_known(pid_t p)
{
	for (int i = 0; i < nknown; i++)
		if (known[i] == p)
			return true;
	return false;
}

/* In the forked child before moat: stderr to the log file, stdout to its
 * own, as the harness's user (root when the harness is): they stay writable
 * after the drop to 65534. */
static int prep_redirect(int mode, void *arg)
{
	(void)mode;
	const struct server *s = arg;
	int e = open(s->log, O_WRONLY | O_APPEND | O_CLOEXEC);
	int o = open(s->outf, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (e < 0 || o < 0 || dup2(e, 2) < 0 || dup2(o, 1) < 0) {
		perror("serve test: redirect the server's output");
		return -1;
	}
	close(e);
	close(o);
	if (s->log_pipe >= 0 && (dup2(s->log_pipe, 1) < 0 || dup2(s->log_pipe, 2) < 0)) {
		perror("serve test: the server's output to the log pipe");
		return -1;
	}
	return 0;
}

/* prep_redirect, then a mount namespace of the server's own where every
 * mount is read-only but /proc, /sys (cgroups) and /dev: what a pod with
 * readOnlyRootFilesystem and no emptyDir gives moat serve. */
static int prep_readonly(int mode, void *arg)
{
	if (prep_redirect(mode, arg) < 0)
		return -1;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		perror("serve test: a mount namespace for the server");
		return -1;
	}
	FILE *mi = fopen("/proc/self/mountinfo", "re");
	if (!mi) {
		perror("serve test: /proc/self/mountinfo");
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;
	while (rc == 0 && getline(&line, &cap, mi) > 0) {
		char mp[4096];
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		if (!strncmp(mp, "/proc", 5) || !strncmp(mp, "/sys", 4) || !strncmp(mp, "/dev", 4))
			continue;
		struct statvfs sv;
		if (statvfs(mp, &sv) < 0)
			continue; /* hidden under another mount */
		unsigned long keep = sv.f_flag & (ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME |
						  ST_NODIRATIME | ST_RELATIME);
		if (mount(NULL, mp, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, NULL) < 0) {
			fprintf(stderr, "serve test: remount %s read-only: %s\n", mp, strerror(errno));
			rc = -1;
		}
	}
	free(line);
	fclose(mi);
	return rc;
}

/* Is pid still a `moat serve` (argv "moat" "serve" ..., as harness_start
 * runs it), not a pid reused since? */
static bool is_moat_serve(pid_t pid)
{
	char path[64], buf[64];
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	static const char want[] = "moat\0serve";
	return n >= (ssize_t)sizeof want && !memcmp(buf, want, sizeof want);
}

/* A process that kills the server (and removes its dir) if the test
 * process dies first: it reads the pipe whose write end only the test
 * holds. 'r': the server was reaped, do not kill a pid that may be reused;
 * 'x': all done. EOF: the test died. */
static void guard_start(struct server *s)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t g = fork();
	ck_assert_int_ge(g, 0);
	if (g == 0) {
		/* Check kills the test's process group when the test ends: not us */
		setpgid(0, 0);
		for (int fd = 3; fd < 1024; fd++)
			if (fd != p[0])
				close(fd);
		bool reaped = false;
		for (;;) {
			char c;
			ssize_t n = read(p[0], &c, 1);
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 1 && c == 'r') {
				reaped = true;
				continue;
			}
			if (n == 1 && c == 'x')
				_exit(0);
			break;
		}
		if (!reaped && is_moat_serve(s->p.pid))
			kill(s->p.pid, SIGKILL);
		rm_flat_dir(s->dir);
		_exit(0);
	}
	close(p[0]);
	s->guard = g;
	s->guard_fd = p[1];
	known_add(g);
}

static void guard_say(struct server *s, char c)
{
	if (s->guard_fd >= 0)
		ck_assert_int_eq(write(s->guard_fd, &c, 1), 1);
}

static void guard_end(struct server *s)
{
	if (s->guard <= 0)
		return;
	guard_say(s, 'x');
	close(s->guard_fd);
	s->guard_fd = -1;
	waitpid(s->guard, NULL, 0);
	known_del(s->guard);
	s->guard = 0;
}

/* A file in the server's dir that uid 65534 can read (and, with owner_only,
 * only its owner: the server's user). */
static void server_file(struct server *s, char *path, size_t size, const char *name,
			const char *content, mode_t mode)
{
	snprintf(path, size, "%s/%s", s->dir, name);
	write_file(path, content, strlen(content), mode);
	if (s->mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
}

static bool has_arg(const char *const *args, const char *arg)
{
	for (int i = 0; args && args[i]; i++)
		if (!strcmp(args[i], arg))
			return true;
	return false;
}

/* Makes the server's dir and files and starts `moat serve` in the
 * background; does not wait for it to listen. */
static void server_spawn(struct server *s, int mode, const struct server_opts *o)
{
	memset(s, 0, sizeof *s);
	s->mode = mode;
	s->guard_fd = -1;
	/* orphans of the server come to this (per-test) process */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	snprintf(s->dir, sizeof s->dir, "/tmp/moat-serve-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	ck_assert_int_eq(chmod(s->dir, 0700), 0);
	if (mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(s->dir, ROOTLESS_ID, ROOTLESS_ID), 0);
	snprintf(s->log, sizeof s->log, "%s/stderr.log", s->dir);
	snprintf(s->outf, sizeof s->outf, "%s/stdout.log", s->dir);
	write_file(s->log, "", 0, 0600);
	write_file(s->outf, "", 0, 0600);

	const char *argv[48];
	int n = 0;
	char listen[64];
	argv[n++] = "serve";
	if (!o->no_listener) {
		if (o->socket) {
			snprintf(s->sock, sizeof s->sock, "%s/moat.sock", s->dir);
			argv[n++] = "--socket";
			argv[n++] = s->sock;
			snprintf(s->url, sizeof s->url, "http://localhost");
		} else {
			s->port = free_port();
			snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
			argv[n++] = "--listen";
			argv[n++] = listen;
			snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
		}
	}
	argv[n++] = "--runtime";
	argv[n++] = harness_runtime_dir();
	char pool[16];
	if (o->pool >= 0) {
		snprintf(pool, sizeof pool, "%d", o->pool);
		argv[n++] = "--pool";
		argv[n++] = pool;
	}
	if (o->zygote > 0)
		argv[n++] = "--pool-zygote";
	else if (o->zygote < 0)
		argv[n++] = "--no-pool-zygote";
	if (o->zygote > 0 || (o->zygote == 0 && o->pool != 0))
		harness_beside_moat("moat-zygote.so"); /* where the server looks for it */
	if (!o->kv) {
		snprintf(s->kvf, sizeof s->kvf, "%s/kv.sqlite3", s->dir);
		argv[n++] = "--kv";
		argv[n++] = s->kvf;
	} else if (*o->kv) {
		argv[n++] = "--kv";
		argv[n++] = o->kv;
	}
	if (o->config) {
		server_file(s, s->cfg, sizeof s->cfg, "moat.json", o->config, 0644);
		argv[n++] = "--config";
		argv[n++] = s->cfg;
	}
	if (o->token) {
		server_file(s, s->tokf, sizeof s->tokf, "token", TOKEN "\n", 0600);
		argv[n++] = "--token-file";
		argv[n++] = s->tokf;
	} else if (!o->no_listener && !o->socket && !has_arg(o->args, "--token-file") &&
		   !has_arg(o->args, "--no-auth")) {
		/* a TCP listener needs one or the other; the tests of other
		 * things run without the token */
		argv[n++] = "--no-auth";
	}
	for (int i = 0; o->args && o->args[i]; i++) {
		ck_assert_int_lt(n, 46);
		argv[n++] = o->args[i];
	}
	argv[n] = NULL;
	s->log_pipe = o->log_pipe ? *o->log_pipe : -1;
	harness_start(mode, argv, NULL, 0, o->env, o->readonly_root ? prep_readonly : prep_redirect,
		      s, &s->p);
	s->running = true;
	known_add(s->p.pid);
	guard_start(s);
}

/* Has the server exited? (not reaped: harness_finish does that) */
static bool server_exited(const struct server *s)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)s->p.pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return true;
	return si.si_pid == s->p.pid;
}

/* Reaps the exited server: its status. */
static int server_reap(struct server *s)
{
	if (!s->running)
		return s->status;
	struct run_out out;
	memset(&out, 0, sizeof out);
	harness_finish(&s->p, &out);
	s->status = out.status;
	harness_free(&out);
	s->running = false;
	known_del(s->p.pid);
	guard_say(s, 'r');
	return s->status;
}

/* Waits up to ms for the server to exit by itself: its status, or -1 when
 * it still runs. */
static int server_wait_exit(struct server *s, long ms)
{
	long t0 = now_ms();
	while (!server_exited(s)) {
		if (now_ms() - t0 > ms)
			return -1;
		sleep_ms(10);
	}
	return server_reap(s);
}

static char *server_log(const struct server *s)
{
	char *l = slurp(s->log, NULL);
	ck_assert_ptr_nonnull(l);
	return l;
}

/* ---- curl ------------------------------------------------------------------------ */

struct req {
	const char *method;       /* NULL: curl's choice (POST with a body, else GET) */
	const char *path;
	const char *body;         /* NULL: no body */
	const char *body_file;    /* or the body from this file */
	bool chunked;             /* send the body chunked */
	const char *auth;         /* Authorization header value, or NULL */
	const char *const *extra; /* more curl arguments, NULL-terminated */
	long max_ms;              /* curl --max-time; 0: 60 s (scaled) */
};

struct resp {
	int curl_rc;      /* curl's exit status; 128+signal when killed */
	int code;         /* HTTP status; 0 when none came */
	char *head;       /* the last header block */
	char *body;
	size_t body_len;
	char *err;        /* curl's stderr */
	cJSON *json;      /* body as JSON, or NULL */
	long ms;          /* wall time */
};

struct call {
	pid_t pid;
	char pre[160];
	long t0, max_ms;
	struct server *s;
};

static void call_start(struct server *s, const struct req *q, struct call *c)
{
	memset(c, 0, sizeof *c);
	c->s = s;
	snprintf(c->pre, sizeof c->pre, "%s/c%d", s->dir, s->calls++);
	char bodyf[200], headf[200], outf[200], errf[200], dataf[200], url[1200], maxt[32],
		data_arg[220], auth[400];
	snprintf(bodyf, sizeof bodyf, "%s.body", c->pre);
	snprintf(headf, sizeof headf, "%s.head", c->pre);
	snprintf(outf, sizeof outf, "%s.code", c->pre);
	snprintf(errf, sizeof errf, "%s.err", c->pre);
	c->max_ms = q->max_ms ? q->max_ms : harness_scale_ms(60000);
	snprintf(maxt, sizeof maxt, "%.3f", (double)c->max_ms / 1000.0);
	snprintf(url, sizeof url, "%s%s", s->url, q->path);
	const char *argv[64];
	int n = 0;
	argv[n++] = "curl";
	argv[n++] = "-sS";
	argv[n++] = "--http1.1";
	argv[n++] = "--noproxy";
	argv[n++] = "*";
	argv[n++] = "-o";
	argv[n++] = bodyf;
	argv[n++] = "-D";
	argv[n++] = headf;
	argv[n++] = "-w";
	argv[n++] = "%{http_code}";
	argv[n++] = "--max-time";
	argv[n++] = maxt;
	if (s->sock[0]) {
		argv[n++] = "--unix-socket";
		argv[n++] = s->sock;
	}
	if (q->method) {
		argv[n++] = "-X";
		argv[n++] = q->method;
	}
	if (q->auth) {
		snprintf(auth, sizeof auth, "Authorization: %s", q->auth);
		argv[n++] = "-H";
		argv[n++] = auth;
	}
	if (q->body) {
		snprintf(dataf, sizeof dataf, "%s.data", c->pre);
		write_file(dataf, q->body, strlen(q->body), 0600);
	}
	if (q->body || q->body_file) {
		snprintf(data_arg, sizeof data_arg, "@%s", q->body ? dataf : q->body_file);
		argv[n++] = "-H";
		argv[n++] = "Content-Type: application/json";
		argv[n++] = "--data-binary";
		argv[n++] = data_arg;
	}
	if (q->chunked) {
		argv[n++] = "-H";
		argv[n++] = "Transfer-Encoding: chunked";
	}
	for (int i = 0; q->extra && q->extra[i]; i++) {
		ck_assert_int_lt(n, 60);
		argv[n++] = q->extra[i];
	}
	argv[n++] = url;
	argv[n] = NULL;
	c->t0 = now_ms();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(outf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (o < 0 || e < 0 || in < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(in, 0) < 0)
			_exit(126);
		execvp("curl", (char *const *)argv);
		_exit(127);
	}
	c->pid = pid;
	s->open_calls++;
}

/* The last header block of a -D file (after any 100 Continue). */
static char *last_head(char *all)
{
	if (!all)
		return NULL;
	char *last = all, *p = all;
	while ((p = strstr(p, "\r\n\r\nHTTP/"))) {
		last = p + 4;
		p += 4;
	}
	return strdup(last);
}

static void call_finish(struct call *c, struct resp *r)
{
	memset(r, 0, sizeof *r);
	int st = 0;
	long deadline = c->max_ms + harness_scale_ms(15000);
	for (;;) {
		pid_t w = waitpid(c->pid, &st, WNOHANG);
		if (w == c->pid)
			break;
		ck_assert_int_eq(w, 0);
		if (now_ms() - c->t0 > deadline) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &st, 0);
			c->s->open_calls--;
			ck_abort_msg("curl %s did not end within %ld ms", c->pre, deadline);
		}
		sleep_ms(5);
	}
	c->s->open_calls--;
	r->ms = now_ms() - c->t0;
	r->curl_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	ck_assert_msg(r->curl_rc != 127 && r->curl_rc != 126, "cannot run curl");
	char f[200];
	snprintf(f, sizeof f, "%s.code", c->pre);
	char *code = slurp(f, NULL);
	r->code = code ? atoi(code) : 0;
	free(code);
	snprintf(f, sizeof f, "%s.head", c->pre);
	char *all = slurp(f, NULL);
	r->head = last_head(all);
	free(all);
	if (!r->head)
		r->head = strdup("");
	snprintf(f, sizeof f, "%s.body", c->pre);
	r->body = slurp(f, &r->body_len);
	if (!r->body) {
		r->body = strdup("");
		r->body_len = 0;
	}
	snprintf(f, sizeof f, "%s.err", c->pre);
	r->err = slurp(f, NULL);
	if (!r->err)
		r->err = strdup("");
	r->json = cJSON_ParseWithLength(r->body, r->body_len);
	/* the files are not needed any more (big bodies fill /tmp) */
	static const char *const ext[] = { "code", "head", "body", "err", "data" };
	for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		snprintf(f, sizeof f, "%s.%s", c->pre, ext[i]);
		unlink(f);
	}
}

static void call(struct server *s, const struct req *q, struct resp *r)
{
	struct call c;
	call_start(s, q, &c);
	call_finish(&c, r);
}

static void resp_free(struct resp *r)
{
	free(r->head);
	free(r->body);
	free(r->err);
	cJSON_Delete(r->json);
	memset(r, 0, sizeof *r);
}

/* A header's value from the response (first of that name), or NULL; into buf. */
static const char *resp_header(const struct resp *r, const char *name, char *buf, size_t size)
{
	size_t nl = strlen(name);
	for (const char *line = r->head; line && *line;) {
		const char *end = strstr(line, "\r\n");
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len > nl && line[nl] == ':' && !strncasecmp(line, name, nl)) {
			const char *v = line + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t vl = len - (size_t)(v - line);
			while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
				vl--;
			snprintf(buf, size, "%.*s", (int)vl, v);
			return buf;
		}
		if (!end)
			break;
		line = end + 2;
	}
	return NULL;
}

/* Request helpers */
static void post(struct server *s, const char *path, const char *body, struct resp *r)
{
	struct req q = { .path = path, .body = body };
	call(s, &q, r);
}

static void get(struct server *s, const char *path, struct resp *r)
{
	struct req q = { .path = path };
	call(s, &q, r);
}

/* A Spin envelope: code and sandboxId, then ",..." extra members or "". */
static char *envelope(const char *code, const char *extra)
{
	char *q = harness_json_quote(code);
	char *e = NULL;
	ck_assert_int_ge(asprintf(&e, "{\"code\":%s,\"sandboxId\":\"test\"%s}", q, extra ? extra : ""),
			 0);
	free(q);
	return e;
}

static void run_py(struct server *s, const char *code, const char *extra, struct resp *r)
{
	char *e = envelope(code, extra);
	post(s, "/py/run", e, r);
	free(e);
}

/* An error response: status, {"error":{"type","message","provider":"native"}}, JSON. */
static void expect_error(const char *what, const struct resp *r, int code, const char *type)
{
	ck_assert_msg(r->code == code, "%s: HTTP %d (want %d), curl exit %d: body %.600s %s", what,
		      r->code, code, r->curl_rc, r->body, r->err);
	const cJSON *e = jget(r->json, "error");
	const char *t = jstr(e, "type"), *m = jstr(e, "message"), *p = jstr(e, "provider");
	ck_assert_msg(cJSON_IsObject(e) && t && !strcmp(t, type),
		      "%s: HTTP %d, want error type %s: %.600s", what, r->code, type, r->body);
	ck_assert_msg(m && *m, "%s: the error has no message: %.600s", what, r->body);
	ck_assert_msg(p && !strcmp(p, "native"), "%s: provider is not \"native\": %.600s", what,
		      r->body);
	char ct[128];
	ck_assert_msg(resp_header(r, "Content-Type", ct, sizeof ct) && strstr(ct, "application/json"),
		      "%s: an error is JSON, Content-Type: %s", what, ct[0] ? ct : "(none)");
}

/* A 200 script result with every documented key. */
static void expect_script(const char *what, const struct resp *r)
{
	ck_assert_msg(r->code == 200 && r->json, "%s: HTTP %d (want 200 + JSON), curl %d: %.600s %s",
		      what, r->code, r->curl_rc, r->body, r->err);
	static const char *const keys[] = { "stdout", "stderr", "error", "stdoutTruncated",
					    "stderrTruncated", "exitCode", "timedOut", "killedBy",
					    "durationMs", "limits", "warnings" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		ck_assert_msg(jget(r->json, keys[i]), "%s: the script result has no \"%s\": %.600s",
			      what, keys[i], r->body);
}

/* Waits until GET /healthz says {"status":"ok"}; fails with the log when
 * the server exits or the deadline passes. */
static void server_wait_ready(struct server *s)
{
	long t0 = now_ms(), limit = harness_scale_ms(20000);
	for (;;) {
		if (server_exited(s)) {
			int st = server_reap(s);
			char *l = server_log(s);
			ck_abort_msg("%s: moat serve exited with %d before it listened: %.2000s",
				     MODE_NAME[s->mode], st, l);
		}
		struct req q = { .path = "/healthz", .max_ms = 2000 };
		struct resp r;
		call(s, &q, &r);
		bool ok = r.code == 200;
		if (ok) {
			const char *st = jstr(r.json, "status");
			ck_assert_msg(st && !strcmp(st, "ok"), "/healthz body: %s", r.body);
		}
		resp_free(&r);
		if (ok)
			return;
		if (now_ms() - t0 > limit) {
			char *l = server_log(s);
			ck_abort_msg("%s: moat serve did not answer /healthz within %ld ms: %.2000s",
				     MODE_NAME[s->mode], limit, l);
		}
		sleep_ms(50);
	}
}

static void server_start(struct server *s, int mode, const struct server_opts *o)
{
	server_spawn(s, mode, o);
	server_wait_ready(s);
}

/* Children of the running server, waiting up to ms for there to be none. */
static int server_children_gone(const struct server *s, long ms, char *desc, size_t size)
{
	long t0 = now_ms();
	pid_t kids[64];
	int n;
	while ((n = proc_children(s->p.pid, kids, 64)) > 0 && now_ms() - t0 < ms)
		sleep_ms(20);
	desc[0] = '\0';
	for (int i = 0; i < n && strlen(desc) + 300 < size; i++) {
		char d[400];
		proc_desc(kids[i], d, sizeof d);
		strncat(desc, d, size - strlen(desc) - 2);
		strcat(desc, "\n");
	}
	return n;
}

/* Waits up to ms until the running server has at least n children. */
static bool server_wait_children(const struct server *s, int n, long ms)
{
	long t0 = now_ms();
	pid_t kids[64];
	while (now_ms() - t0 < ms) {
		if (proc_children(s->p.pid, kids, 64) >= n)
			return true;
		sleep_ms(10);
	}
	return false;
}

/* After the server exited and the test's calls ended: nothing of it is
 * left (no process reparented to the test, the socket file removed); then
 * the guard ends and the dir goes. */
static void server_cleanup(struct server *s)
{
	ck_assert_msg(!s->running, "server_cleanup on a running server");
	ck_assert_msg(s->open_calls == 0, "%d curl call(s) not finished", s->open_calls);
	pid_t kids[64];
	char left[4096] = "";
	/* a process of the server that outlived it is now a child of ours */
	sleep_ms(harness_scale_ms(100));
	int n = proc_children(getpid(), kids, 64), bad = 0;
	for (int i = 0; i < n; i++) {
		if (is_known(kids[i]))
			continue;
		char d[400];
		proc_desc(kids[i], d, sizeof d);
		/* already dead: a sandbox's pid 1 killed with the server (no exit
		 * signal: only __WALL reaps it) */
		const char *rp = strrchr(d, ')');
		if (rp && rp[1] == ' ' && rp[2] == 'Z') {
			waitpid(kids[i], NULL, __WALL);
			continue;
		}
		if (strlen(left) + strlen(d) + 2 < sizeof left) {
			strcat(left, d);
			strcat(left, "\n");
		}
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
		bad++;
	}
	bool sock_left = s->sock[0] && access(s->sock, F_OK) == 0;
	guard_end(s);
	char *log = server_log(s);
	rm_flat_dir(s->dir);
	ck_assert_msg(bad == 0, "%s: %d process(es) of moat serve outlived it:\n%s\nlog: %.1500s",
		      MODE_NAME[s->mode], bad, left, log);
	ck_assert_msg(!sock_left, "%s: the socket %s is still there after moat serve exited",
		      MODE_NAME[s->mode], s->sock);
	free(log);
}

/* SIGTERM; waits up to ms for the exit. Status, or -1 (then killed). */
static int server_term(struct server *s, long ms, long *took)
{
	long t0 = now_ms();
	ck_assert_int_eq(kill(s->p.pid, SIGTERM), 0);
	int st = server_wait_exit(s, ms);
	if (took)
		*took = now_ms() - t0;
	if (st < 0) {
		kill(s->p.pid, SIGKILL);
		server_reap(s);
	}
	return st;
}

/* An idle server: its sandboxes are gone, SIGTERM, exit 0, nothing left. */
static void server_stop(struct server *s)
{
	char kids[4096];
	int n = server_children_gone(s, harness_scale_ms(10000), kids, sizeof kids);
	ck_assert_msg(n == 0, "%s: the idle server still has %d child process(es):\n%s",
		      MODE_NAME[s->mode], n, kids);
	int st = server_term(s, harness_scale_ms(15000), NULL);
	char *log = server_log(s);
	ck_assert_msg(st == 0, "%s: moat serve after SIGTERM: status %d (want 0; -1: did not exit "
		      "within 15 s); log: %.2000s", MODE_NAME[s->mode], st, log);
	free(log);
	server_cleanup(s);
}

/* ---- raw sockets ------------------------------------------------------------------- */

static int raw_connect(const struct server *s)
{
	int fd;
	if (s->sock[0]) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		ck_assert_uint_lt(strlen(s->sock), sizeof a.sun_path);
		memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
		ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s",
			      s->sock, strerror(errno));
	} else {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect :%d: %s",
			      s->port, strerror(errno));
	}
	return fd;
}

/* Sends what the peer takes; false when it closed on us. */
static bool raw_send(int fd, const char *data, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		off += (size_t)w;
	}
	return true;
}

/* Reads until EOF/reset or ms pass. *closed: the peer closed (EOF or reset). */
static char *raw_read(int fd, long ms, bool *closed, long *took)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	long t0 = now_ms();
	*closed = false;
	for (;;) {
		long left = ms - (now_ms() - t0);
		if (left <= 0)
			break;
		struct pollfd pf = { fd, POLLIN, 0 };
		int r = poll(&pf, 1, (int)(left > 100 ? 100 : left));
		if (r <= 0)
			continue;
		if (n + 4097 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t got = recv(fd, buf + n, 4096, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			*closed = true;
			break;
		}
		n += (size_t)got;
	}
	buf[n] = '\0';
	if (took)
		*took = now_ms() - t0;
	return buf;
}

/* "HTTP/1.1 431 ..." → 431; 0 when there is no status line. */
static int raw_status(const char *resp)
{
	if (strncmp(resp, "HTTP/1.", 7) != 0 || strlen(resp) < 12)
		return 0;
	return atoi(resp + 9);
}

/* ---- metrics --------------------------------------------------------------------- */

/* Sum of the samples of metric name (exact name, any labels) whose label
 * set contains each ';'-separated part of label (e.g. "route=\"py\";
 * outcome=\"ok\"") when label is not NULL; *found: how many samples
 * matched. */
static double metric_sum(const char *text, const char *name, const char *label, int *found)
{
	double sum = 0;
	int n = 0;
	size_t nl = strlen(name);
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len > nl && !strncmp(line, name, nl) && (line[nl] == '{' || line[nl] == ' ')) {
			char l[1024];
			snprintf(l, sizeof l, "%.*s", (int)len, line);
			const char *rb = line[nl] == '{' ? strchr(l, '}') : l + nl;
			bool match = !label || (line[nl] == '{' && rb);
			for (const char *lp = label; match && lp && *lp;) {
				size_t ll = strcspn(lp, ";");
				char one[256];
				snprintf(one, sizeof one, "%.*s", (int)ll, lp);
				const char *hit = strstr(l, one);
				match = hit && hit < rb;
				lp += ll;
				if (*lp == ';')
					lp++;
			}
			if (match && rb) {
				const char *v = rb + (line[nl] == '{' ? 1 : 0);
				sum += strtod(v, NULL);
				n++;
			}
		}
		if (!end)
			break;
		line = end + 1;
	}
	if (found)
		*found = n;
	return sum;
}

static char *get_metrics(struct server *s, const char *auth)
{
	struct req q = { .path = "/metrics", .auth = auth };
	struct resp r;
	call(s, &q, &r);
	ck_assert_msg(r.code == 200, "GET /metrics: HTTP %d: %s", r.code, r.body);
	char *m = strdup(r.body);
	resp_free(&r);
	return m;
}

/* ---- access log ------------------------------------------------------------------ */

/* The log's JSON lines (those starting with '{'), each checked: valid JSON
 * with every documented key. Returns an array the caller deletes. */
static cJSON *access_lines(const struct server *s)
{
	char *log = server_log(s);
	cJSON *arr = cJSON_CreateArray();
	char *save = NULL;
	for (char *line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != '{')
			continue;
		cJSON *j = cJSON_Parse(line);
		ck_assert_msg(j, "an access log line is not JSON: %s", line);
		static const char *const keys[] = { "ts", "remote", "method", "path", "route",
						    "status", "outcome", "durationMs", "bytesIn",
						    "bytesOut" };
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
			ck_assert_msg(jget(j, keys[i]), "access log line without \"%s\": %s", keys[i],
				      line);
		ck_assert_msg(cJSON_IsNumber(jget(j, "status")) && cJSON_IsNumber(jget(j, "durationMs")) &&
			      cJSON_IsNumber(jget(j, "bytesIn")) && cJSON_IsNumber(jget(j, "bytesOut")),
			      "status, durationMs, bytesIn, bytesOut are numbers: %s", line);
		ck_assert_msg(cJSON_IsString(jget(j, "path")) && cJSON_IsString(jget(j, "method")) &&
			      cJSON_IsString(jget(j, "outcome")),
			      "path, method, outcome are strings: %s", line);
		cJSON_AddItemToArray(arr, j);
	}
	free(log);
	return arr;
}

/* The first access line whose key is value (a string), or NULL. */
static const cJSON *access_find(const cJSON *lines, const char *key, const char *value)
{
	const cJSON *l;
	cJSON_ArrayForEach(l, lines)
	{
		const char *v = jstr(l, key);
		if (v && !strcmp(v, value))
			return l;
	}
	return NULL;
}

/* ---- tests: the seed's examples, scripts, handlers ---------------------------------- */

/* The seed's two curl examples, verbatim (curl -d, no content type of ours). */
START_TEST(seed_examples)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	const char *py[] = { "-d", "{\"code\":\"print(6 * 7)\",\"sandboxId\":\"demo\"}", NULL };
	struct req q = { .path = "/py/run", .extra = py };
	call(&s, &q, &r);
	expect_script("POST /py/run print(6 * 7)", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "42\n");
	ck_assert_str_eq(jstr(r.json, "stderr"), "");
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "error is not null: %s", r.body);
	ck_assert_msg(jnum(r.json, "exitCode") == 0, "exitCode: %s", r.body);
	char ct[128];
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "application/json"),
		      "script result Content-Type: %s", r.head);
	resp_free(&r);

	const char *ts[] = { "-d",
			     "{\n"
			     "  \"code\":\"export default { async fetch(r) { return new Response(r.url) } }\",\n"
			     "  \"sandboxId\":\"demo\", \"input\":{\"path\":\"/hello\"}}",
			     NULL };
	struct req q2 = { .path = "/ts/run", .extra = ts };
	call(&s, &q2, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "TS handler: HTTP %d curl %d: %.600s %s", r.code,
		      r.curl_rc, r.body, r.err);
	ck_assert_msg(r.body_len >= 6 && !strcmp(r.body + r.body_len - 6, "/hello"),
		      "TS handler body does not end with /hello: [%s]", r.body);
	ck_assert_msg(!strcmp(r.body, "http://localhost/hello"),
		      "TS handler: r.url is http://localhost + input.path, got [%s]", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Scripts: failures in one line, JS and TS scripts, any path under /py/. */
START_TEST(scripts)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import sys\nprint('out')\nprint('first', file=sys.stderr)\n"
		   "print('last line', file=sys.stderr)\nprint('', file=sys.stderr)\nsys.exit(3)",
	       NULL, &r);
	expect_script("exit 3", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "out\n");
	ck_assert_msg(jnum(r.json, "exitCode") == 3, "%s", r.body);
	ck_assert_msg(jstr(r.json, "error") && !strcmp(jstr(r.json, "error"), "exit code 3: last line"),
		      "error for exit 3 (want \"exit code 3: last line\"): %s", r.body);
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "timedOut")), "%s", r.body);
	resp_free(&r);

	char *e = envelope("print('deep')", NULL);
	post(&s, "/py/some/deeper/path", e, &r);
	free(e);
	expect_script("POST /py/some/deeper/path", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "deep\n");
	resp_free(&r);

	e = envelope("console.log(typeof process, 6 * 7)", NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	expect_script("JS script on /ts/run", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "object 42\n"), "%s", r.body);
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "%s", r.body);
	resp_free(&r);

	e = envelope("const n: number = 21;\ninterface A { x: string }\nconsole.log(n * 2);", NULL);
	post(&s, "/ts/x", e, &r);
	free(e);
	expect_script("TS script on /ts/x", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "42\n"), "%s", r.body);
	resp_free(&r);

	/* the runtime is mounted read-only at /opt/moat/runtime */
	run_py(&s,
	       "import os\n"
	       "print(os.path.isdir('/opt/moat/runtime/python'))\n"
	       "try:\n"
	       "    open('/opt/moat/runtime/python/x', 'w')\n"
	       "    print('writable')\n"
	       "except OSError as e:\n"
	       "    print('refused')\n",
	       NULL, &r);
	expect_script("the runtime mount", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "True\nrefused\n"),
		      "/opt/moat/runtime is a read-only mount: %s", r.body);
	resp_free(&r);

	/* a handle_request that is not top-level, or not at a line start: a script */
	run_py(&s,
	       "class A:\n"
	       "    def handle_request(self):\n"
	       "        pass\n"
	       "x = 'def handle_request(r)'\n"
	       "print('script after all')\n",
	       NULL, &r);
	expect_script("handle_request inside a class", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "script after all\n");
	resp_free(&r);
	e = envelope("throw new Error('js-boom')", NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	expect_script("JS script that throws", &r);
	ck_assert_msg(jstr(r.json, "error") && !strncmp(jstr(r.json, "error"), "exit code ", 10),
		      "error: %s", r.body);
	ck_assert_msg(strstr(jstr(r.json, "stderr"), "js-boom"), "%s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(python_handler)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(201, {\"x-a\": \"b\"}, b\"hi \" + request.body)\n",
	       ",\"input\":{\"method\":\"POST\",\"path\":\"/p\",\"body\":\"there\"}", &r);
	char h[256];
	ck_assert_msg(r.code == 201 && r.curl_rc == 0, "handler: HTTP %d (want 201), curl %d: %.600s",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(resp_header(&r, "x-a", h, sizeof h) && !strcmp(h, "b"), "x-a: %s", r.head);
	ck_assert_msg(!strcmp(r.body, "hi there"), "body [%s]", r.body);
	resp_free(&r);

	/* the request as the handler sees it */
	run_py(&s,
	       "import json\n"
	       "from spin_sdk.http import Response\n"
	       "async def handle_request(request):\n"
	       "    return Response(200, {\"content-type\": \"application/json\"},\n"
	       "        json.dumps([request.method, request.uri, request.headers.get('x-in')]).encode())\n",
	       ",\"input\":{\"method\":\"PUT\",\"path\":\"/a/b?c=d\",\"headers\":{\"x-in\":\"v\"}}", &r);
	ck_assert_msg(r.code == 200 && r.json, "async handler: HTTP %d: %.600s", r.code, r.body);
	char *got = cJSON_PrintUnformatted(r.json);
	ck_assert_msg(!strcmp(got, "[\"PUT\",\"http://localhost/a/b?c=d\",\"v\"]") ||
		      !strcmp(got, "[\"PUT\",\"/a/b?c=d\",\"v\"]"),
		      "the handler's request (method, uri, header): %s", got);
	free(got);
	resp_free(&r);

	/* input defaults: GET, /, no headers, empty body */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {}, f'{request.method} {request.uri} {len(request.body or b\"\")}'.encode())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (!strcmp(r.body, "GET http://localhost/ 0") ||
					!strcmp(r.body, "GET / 0")),
		      "the default input: HTTP %d [%s]", r.code, r.body);
	resp_free(&r);

	/* a header value with CR/LF cannot add a header */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {'x-a': 'b\\r\\nx-injected: 1', 'x-c': 'd'}, b'inj')\n",
	       NULL, &r);
	ck_assert_msg(!strcasestr(r.head, "x-injected"), "a handler injected a header: %s", r.head);
	resp_free(&r);

	/* framing and hop-by-hop headers of the handler are dropped */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {\"x-ok\": \"1\", \"content-length\": \"999\", \"connection\": "
	       "\"close\",\n"
	       "        \"transfer-encoding\": \"gzip\", \"upgrade\": \"h2c\"}, b\"body\")\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "HTTP %d curl %d: %s %s", r.code, r.curl_rc,
		      r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "body"), "body [%s]", r.body);
	ck_assert_msg(resp_header(&r, "x-ok", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	ck_assert_msg(!strstr(r.head, "999") && !strcasestr(r.head, "gzip") && !strcasestr(r.head, "h2c"),
		      "the handler's Content-Length/Transfer-Encoding/Upgrade passed: %s", r.head);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(python_streaming)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "import time\n"
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        for i in range(5):\n"
	       "            yield f'chunk{i};'\n"
	       "            time.sleep(0.05)\n"
	       "        yield b'bytes-too'\n"
	       "    return (200, {'content-type': 'text/plain', 'x-s': '1'}, gen())\n",
	       NULL, &r);
	char h[128];
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "stream: HTTP %d curl %d: %.600s %s", r.code,
		      r.curl_rc, r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "chunk0;chunk1;chunk2;chunk3;chunk4;bytes-too"), "body [%s]",
		      r.body);
	ck_assert_msg(resp_header(&r, "x-s", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	ck_assert_msg(resp_header(&r, "Transfer-Encoding", h, sizeof h) && strstr(h, "chunked"),
		      "a handler's response is streamed chunked: %s", r.head);
	resp_free(&r);

	/* the generator raises after 2 chunks: truncated, what came is kept */
	run_py(&s,
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        yield b'one;'\n"
	       "        yield b'two;'\n"
	       "        raise RuntimeError('generator-boom')\n"
	       "    return (200, {'content-type': 'text/plain'}, gen())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200, "failing stream: HTTP %d: %s", r.code, r.body);
	ck_assert_msg(r.curl_rc == 18 || r.curl_rc == 56,
		      "a generator that raises truncates the response: curl exit %d (want 18 or 56), "
		      "body [%s] %s", r.curl_rc, r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "one;two;"), "body so far [%s] (want one;two;)", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(handler_fails_before_head)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "def handle_request(request):\n    raise ValueError('nope-before-head')\n", NULL, &r);
	ck_assert_msg(r.code == 500 && r.json, "raise before head: HTTP %d (want 500 JSON): %.600s",
		      r.code, r.body);
	ck_assert_msg(jstr(r.json, "error") && *jstr(r.json, "error"), "error is null: %s", r.body);
	ck_assert_msg(jstr(r.json, "stderr") && strstr(jstr(r.json, "stderr"), "nope-before-head"),
		      "stderr holds the trace: %s", r.body);
	ck_assert_msg(jget(r.json, "exitCode") && jget(r.json, "timedOut"),
		      "script-shaped JSON: %s", r.body);
	resp_free(&r);

	/* a status out of 200..599 is a failure before the head */
	run_py(&s, "from spin_sdk.http import Response\n"
		   "def handle_request(request):\n    return Response(99, {}, b'x')\n",
	       NULL, &r);
	ck_assert_msg(r.code == 500 && r.json && jstr(r.json, "error"),
		      "status 99 from a handler: HTTP %d (want 500 with error): %.600s", r.code, r.body);
	resp_free(&r);

	/* a TS handler that throws */
	char *e = envelope("export default { async fetch(r) { throw new Error('ts-before-head') } }",
			   NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	ck_assert_msg(r.code == 500 && r.json && jstr(r.json, "error"),
		      "TS throw: HTTP %d (want 500 with error): %.600s", r.code, r.body);
	ck_assert_msg(jstr(r.json, "stderr") && strstr(jstr(r.json, "stderr"), "ts-before-head"),
		      "stderr holds the trace: %s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(ts_handler)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	char *e = envelope(
		"export default {\n"
		"  async fetch(r: Request): Promise<Response> {\n"
		"    const b: string = await r.text();\n"
		"    return new Response(`t:${b}:${r.headers.get('x-in')}:${r.method}`,\n"
		"      { status: 202, headers: { 'x-t': '1' } });\n"
		"  }\n"
		"}\n",
		",\"input\":{\"method\":\"POST\",\"path\":\"/p\",\"headers\":{\"x-in\":\"v\"},"
		"\"body\":\"abc\"}");
	post(&s, "/ts/run", e, &r);
	free(e);
	char h[64];
	ck_assert_msg(r.code == 202 && r.curl_rc == 0, "TS handler: HTTP %d (want 202) curl %d: %.600s",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(!strcmp(r.body, "t:abc:v:POST"), "body [%s]", r.body);
	ck_assert_msg(resp_header(&r, "x-t", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: limits of the envelope and of the runs ---------------------------------- */

/* A body file: {"code":"#xxx...","sandboxId":"big"<extra>} with code_len bytes of code. */
static void big_body(const struct server *s, const char *name, size_t code_len, size_t input_len,
		     char *path, size_t size)
{
	snprintf(path, size, "%s/%s", s->dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"code\":\"#", f);
	for (size_t i = 1; i < code_len; i++)
		fputc('x', f);
	fputs("\",\"sandboxId\":\"big\"", f);
	if (input_len) {
		fputs(",\"input\":{\"body\":\"", f);
		for (size_t i = 0; i < input_len; i++)
			fputc('y', f);
		fputs("\"}", f);
	}
	fputs("}", f);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(payload_too_large)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	struct resp r;
	char f[200];
	const size_t MiB = 1024 * 1024;

	/* code of exactly 5 MiB: accepted */
	big_body(&s, "code5.json", 5 * MiB, 0, f, sizeof f);
	struct req q = { .path = "/py/run", .body_file = f };
	call(&s, &q, &r);
	expect_script("code of exactly 5 MiB", &r);
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "%.600s", r.body);
	resp_free(&r);
	unlink(f);

	/* code over 5 MiB */
	big_body(&s, "code5p.json", 5 * MiB + 1, 0, f, sizeof f);
	call(&s, &q, &r);
	expect_error("code of 5 MiB + 1", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* body over 6 MiB (small code): from Content-Length, and chunked */
	big_body(&s, "body6.json", 10, 6 * MiB + 10, f, sizeof f);
	call(&s, &q, &r);
	expect_error("body over 6 MiB (Content-Length)", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	struct req qc = { .path = "/py/run", .body_file = f, .chunked = true };
	call(&s, &qc, &r);
	expect_error("body over 6 MiB (chunked)", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* /v1/run too */
	struct req qv = { .path = "/v1/run", .body_file = f };
	big_body(&s, "v1.json", 10, 6 * MiB + 10, f, sizeof f);
	call(&s, &qv, &r);
	expect_error("/v1/run body over 6 MiB", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* the server still serves */
	run_py(&s, "print('after')", NULL, &r);
	expect_script("after the 413s", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "after\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(bad_envelopes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	char id256[300], id257[300], b256[400], b257[400];
	memset(id256, 'i', 256);
	id256[256] = '\0';
	memset(id257, 'i', 257);
	id257[257] = '\0';
	snprintf(b256, sizeof b256, "{\"code\":\"print(256)\",\"sandboxId\":\"%s\"}", id256);
	snprintf(b257, sizeof b257, "{\"code\":\"print(1)\",\"sandboxId\":\"%s\"}", id257);
	const char *const bad[] = {
		"{\"code\":",
		"",
		"[]",
		"\"code\"",
		"{\"code\":42,\"sandboxId\":\"a\"}",
		"{\"code\":null,\"sandboxId\":\"a\"}",
		"{\"code\":\"print(1)\"}",
		"{\"sandboxId\":\"a\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":5}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"unknown\":1}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"language\":\"python\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"kvEnabled\":\"yes\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"allowedHosts\":\"https://a.com\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"allowedHosts\":[1]}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":\"x\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"headers\":{\"a\":1}}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"headers\":[[\"a\",\"b\"]]}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"method\":5}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"body\":{}}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"what\":\"x\"}}",
		b257,
	};
	struct resp r;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[200];
		snprintf(what, sizeof what, "/py/run %.120s", bad[i][0] ? bad[i] : "(empty body)");
		post(&s, "/py/run", bad[i], &r);
		expect_error(what, &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	/* the same on /ts/ */
	post(&s, "/ts/run", "{\"code\":\"console.log(1)\"}", &r);
	expect_error("/ts/run without sandboxId", &r, 400, "SandboxConfigError");
	resp_free(&r);

	/* boundaries that are fine */
	post(&s, "/py/run", b256, &r);
	expect_script("sandboxId of 256 bytes", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "256\n");
	resp_free(&r);
	run_py(&s, "print('kv off')", ",\"kvEnabled\":false,\"allowedHosts\":[],\"input\":{}", &r);
	expect_script("kvEnabled false, empty allowedHosts and input", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "kv off\n");
	resp_free(&r);

	run_py(&s, "print(1)", ",\"kvEnabled\":true", &r);
	expect_script("kvEnabled true", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(allowed_hosts)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	static const char *const bad[] = {
		"10.0.0.0/8", "https://10.0.0.0/8", "*", "https://*", "https://a.com:1-5",
		"ftp://x", "https://a.com/path", "", "https://", "a.com", "https://*.com",
		"https://a.*.com", "http://a.com:0", "http://a.com:70000", "https://user@a.com",
		"https://[::1", "https://a.com:",
	};
	struct resp r;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *q = harness_json_quote(bad[i]), *extra = NULL, what[200];
		ck_assert_int_ge(asprintf(&extra, ",\"allowedHosts\":[\"https://ok.example.com\",%s]", q), 0);
		snprintf(what, sizeof what, "allowedHosts entry \"%s\"", bad[i]);
		run_py(&s, "print(1)", extra, &r);
		expect_error(what, &r, 400, "SandboxConfigError");
		ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), "allowedHosts") ||
			      (bad[i][0] && strstr(jstr(jget(r.json, "error"), "message"), bad[i])),
			      "%s: the message names neither allowedHosts nor the entry: %s", what, r.body);
		resp_free(&r);
		free(q);
		free(extra);
	}
	/* accepted forms: the program runs (no egress needed to print) */
	run_py(&s, "print('allowed')",
	       ",\"allowedHosts\":[\"https://api.example.com\",\"https://*.example.org\","
	       "\"http://a.example.net:*\",\"https://b.example.net:8443\"]",
	       &r);
	expect_script("valid allowedHosts", &r);
	ck_assert_msg(jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "allowed\n"), "%.800s",
		      r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(output_truncation)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import sys\nsys.stdout.write('x' * (300 * 1024))\nsys.stderr.write('y' * (300 * 1024))\n",
	       NULL, &r);
	expect_script("300 KiB out and err", &r);
	const char *out = jstr(r.json, "stdout"), *err = jstr(r.json, "stderr");
	ck_assert_msg(out && strlen(out) == SCRIPT_CAP, "stdout length %zu (want %d)",
		      out ? strlen(out) : 0, SCRIPT_CAP);
	ck_assert_msg(err && strlen(err) == SCRIPT_CAP, "stderr length %zu (want %d)",
		      err ? strlen(err) : 0, SCRIPT_CAP);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stderrTruncated")), "stderrTruncated not true");
	resp_free(&r);

	/* exactly the cap: not truncated */
	run_py(&s, "import sys\nsys.stdout.write('z' * 262144)\n", NULL, &r);
	expect_script("256 KiB exactly", &r);
	ck_assert_msg(jstr(r.json, "stdout") && strlen(jstr(r.json, "stdout")) == SCRIPT_CAP,
		      "stdout length");
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "stdoutTruncated")), "truncated at exactly the cap");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(operator_timeout)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .config = "{\"serve\":{\"defaults\":{\"timeout\":1000},"
					   "\"max\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print('spin', flush=True)\nwhile True: pass\n", NULL, &r);
	expect_script("while True (default timeout 1000)", &r);
	const char *err = jstr(r.json, "error");
	ck_assert_msg(err && strstr(err, "timed out"), "error does not say timed out: %s", r.body);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "timedOut")), "timedOut not true: %s", r.body);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "spin\n"), "output before the timeout: %s", r.body);
	double d = jnum(r.json, "durationMs");
	ck_assert_msg(d >= 900 && d < harness_scale_ms(10000), "durationMs %f", d);
	ck_assert_msg(r.ms < harness_scale_ms(15000), "answered after %ld ms", r.ms);
	resp_free(&r);

	/* /v1/run: the default applies; asking up to max is fine, above is 403 */
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"while True: pass\"}", &r);
	ck_assert_msg(r.code == 200 && cJSON_IsTrue(jget(r.json, "timedOut")), "/v1/run default: %s",
		      r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(3)\",\"timeout\":3000}", &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "exitCode") == 0, "/v1/run timeout = max: %s",
		      r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(3)\",\"timeout\":3001}", &r);
	expect_error("/v1/run timeout above the configured max", &r, 403, "SandboxPolicyError");
	ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), "timeout"),
		      "the 403 names the limit: %s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(operator_memory)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true,
				 .config = "{\"serve\":{\"defaults\":{\"memoryMb\":64}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "x = b'x' * (512 << 20)\nprint(len(x))\n", NULL, &r);
	expect_script("512 MiB under a 64 MiB default", &r);
	const char *err = jstr(r.json, "error");
	ck_assert_msg(err && strcasestr(err, "memory"), "error does not mention memory: %s", r.body);
	ck_assert_msg(!strstr(jstr(r.json, "stdout"), "536870912"), "the allocation succeeded: %s",
		      r.body);
	resp_free(&r);
	/* a small program still runs under it */
	run_py(&s, "print('small')", NULL, &r);
	expect_script("small", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "small\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: /v1/run ---------------------------------------------------------------- */

START_TEST(v1_run)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	post(&s, "/v1/run",
	     "{\"language\":\"python\",\"code\":\"import os, sys\\nprint(os.environ['A'], "
	     "sys.stdin.read())\\nsys.exit(2)\",\"env\":{\"A\":\"a1\"},\"stdin\":\"in\"}",
	     &r);
	ck_assert_msg(r.code == 200 && r.json, "/v1/run: HTTP %d: %.600s", r.code, r.body);
	ck_assert_msg(jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "a1 in\n"), "%s", r.body);
	ck_assert_msg(jnum(r.json, "exitCode") == 2, "exitCode: %s", r.body);
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "timedOut")), "%s", r.body);
	const char *prov = jstr(r.json, "provider");
	ck_assert_msg(prov && !strcmp(prov, "native"), "provider: %s", r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"bash\",\"code\":\"echo $((6*7))\"}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "42\n"),
		      "bash: %s", r.body);
	resp_free(&r);
	/* a command line: the same run; "workdir" is no key (a host path) */
	post(&s, "/v1/run", "{\"argv\":[\"sh\",\"-c\",\"echo \\\"$1\\\"; id -u\",\"-\",\"a b\"]}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "a b\n65534\n"),
		      "argv: %s", r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"argv\":[\"ls\"],\"workdir\":\"/\"}", &r);
	expect_error("/v1/run argv with workdir", &r, 400, "SandboxConfigError");
	resp_free(&r);

	/* refused by policy: above the built-in max, open network */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	char cpu_req[160];
	snprintf(cpu_req, sizeof cpu_req, "{\"language\":\"python\",\"code\":\"print(1)\",\"cpus\":%ld}",
		 cpus + 1);
	struct {
		const char *body, *name;
	} policy[] = {
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":60001}", "timeout" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"memoryMb\":1025}", "memoryMb" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"pidsLimit\":257}", "pidsLimit" },
		{ cpu_req, "cpus" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"network\":true}", "network" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"env\":{\"A=B\":\"x\"}}", "A=B" },
	};
	for (size_t i = 0; i < sizeof policy / sizeof policy[0]; i++) {
		post(&s, "/v1/run", policy[i].body, &r);
		char what[240];
		snprintf(what, sizeof what, "/v1/run %s", policy[i].body);
		expect_error(what, &r, 403, "SandboxPolicyError");
		ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), policy[i].name),
			      "%s: the message does not name %s: %s", what, policy[i].name, r.body);
		resp_free(&r);
	}
	/* at the max: fine */
	post(&s, "/v1/run",
	     "{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":60000,\"memoryMb\":1024,"
	     "\"pidsLimit\":256}",
	     &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "exitCode") == 0, "limits at max: %s", r.body);
	resp_free(&r);
	/* malformed */
	static const char *const bad[] = {
		"{\"language\":\"cobol\",\"code\":\"x\"}",
		"{\"language\":\"python\"}",
		"{\"language\":\"python\",\"code\":\"print(1)\",\"nope\":1}",
		"{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":\"5\"}",
		"{not json",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		post(&s, "/v1/run", bad[i], &r);
		char what[200];
		snprintf(what, sizeof what, "/v1/run %s", bad[i]);
		expect_error(what, &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	server_stop(&s);
}
END_TEST

START_TEST(v1_open_network_allowed)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .config = "{\"serve\":{\"allowOpenNetwork\":true}}" };
	server_start(&s, _i, &o);
	struct resp r;
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print('net')\",\"network\":true}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "net\n"),
		      "network:true with allowOpenNetwork: HTTP %d %.800s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: HTTP surface ------------------------------------------------------------ */

START_TEST(routes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	char h[128];
	get(&s, "/nope", &r);
	expect_error("GET /nope", &r, 404, "NotFound");
	resp_free(&r);
	post(&s, "/nope", "{}", &r);
	expect_error("POST /nope", &r, 404, "NotFound");
	resp_free(&r);
	post(&s, "/python/run", "{}", &r);
	expect_error("POST /python/run", &r, 404, "NotFound");
	resp_free(&r);

	struct {
		const char *method, *path, *allow;
	} m[] = {
		{ "GET", "/py/run", "POST" },     { "PUT", "/ts/run", "POST" },
		{ "GET", "/v1/run", "POST" },     { "DELETE", "/py/x", "POST" },
		{ "POST", "/healthz", "GET" },    { "POST", "/metrics", "GET" },
	};
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
		struct req q = { .method = m[i].method, .path = m[i].path };
		call(&s, &q, &r);
		char what[64];
		snprintf(what, sizeof what, "%s %s", m[i].method, m[i].path);
		expect_error(what, &r, 405, "MethodNotAllowed");
		ck_assert_msg(resp_header(&r, "Allow", h, sizeof h) && strstr(h, m[i].allow),
			      "%s: Allow header (want %s): %s", what, m[i].allow, r.head);
		resp_free(&r);
	}
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "status") && !strcmp(jstr(r.json, "status"), "ok"),
		      "/healthz: %d %s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(auth_token)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true, .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("print('authed')", NULL);
	struct resp r;
	char h[128];
	struct {
		const char *auth, *what;
	} bad[] = {
		{ NULL, "no Authorization" },
		{ "Bearer wrong-token-0000000000000", "wrong token" },
		{ "Bearer " TOKEN "x", "token with a byte more" },
		{ "Bearer serve-test-token-5f0c2a9e7b41d", "token with a byte less" },
		{ "Basic " TOKEN, "Basic scheme" },
		{ "Bearer", "Bearer without token" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct req q = { .path = "/py/run", .body = body, .auth = bad[i].auth };
		call(&s, &q, &r);
		expect_error(bad[i].what, &r, 401, "AuthenticationError");
		ck_assert_msg(resp_header(&r, "WWW-Authenticate", h, sizeof h) && strstr(h, "Bearer"),
			      "%s: WWW-Authenticate: Bearer missing: %s", bad[i].what, r.head);
		resp_free(&r);
	}
	struct req ok = { .path = "/py/run", .body = body, .auth = "Bearer " TOKEN };
	call(&s, &ok, &r);
	expect_script("the right token", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "authed\n");
	resp_free(&r);
	free(body);

	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz needs no token: HTTP %d %s", r.code, r.body);
	ck_assert_msg(!strcmp(r.body, "{\"status\":\"ok\"}\n"),
		      "/healthz with a token is not today's body: %s", r.body);
	resp_free(&r);
	get(&s, "/metrics", &r);
	expect_error("/metrics without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	struct req qm = { .path = "/metrics", .auth = "Bearer " TOKEN };
	call(&s, &qm, &r);
	ck_assert_msg(r.code == 200, "/metrics with the token: HTTP %d", r.code);
	resp_free(&r);
	struct req qv = { .path = "/v1/run", .body = "{\"code\":\"print(1)\"}" };
	call(&s, &qv, &r);
	expect_error("/v1/run without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Starts a server expected to refuse: its exit status and log. */
static int refused_start(int mode, const struct server_opts *o, struct server *s, char **log)
{
	server_spawn(s, mode, o);
	int st = server_wait_exit(s, harness_scale_ms(10000));
	if (st < 0) {
		kill(s->p.pid, SIGKILL);
		server_reap(s);
	}
	*log = server_log(s);
	return st;
}

START_TEST(token_file_rules)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	char *log;
	int st;

	/* non-loopback without --token-file: exit 2, naming the flag */
	int port = free_port();
	char listen[64];
	snprintf(listen, sizeof listen, "0.0.0.0:%d", port);
	const char *a_any[] = { "--listen", listen, NULL };
	struct server_opts o1 = { .no_listener = true, .args = a_any };
	st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st == 2, "--listen %s without --token-file: status %d (want 2; -1: it ran): %s",
		      listen, st, log);
	ck_assert_msg(strstr(log, "--token-file"), "the refusal does not name --token-file: %s", log);
	free(log);
	server_cleanup(&s);

	/* the same with a token: it runs */
	struct server_opts o2 = { .no_listener = true, .args = a_any, .token = true };
	server_spawn(&s, _i, &o2);
	s.port = port;
	snprintf(s.url, sizeof s.url, "http://127.0.0.1:%d", port);
	server_wait_ready(&s);
	struct resp r;
	post(&s, "/py/run", "{\"code\":\"print(1)\",\"sandboxId\":\"a\"}", &r);
	expect_error("0.0.0.0 listener without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	server_stop(&s);

	/* token files it must refuse: readable by others, by group, too short, empty */
	struct {
		const char *content;
		mode_t mode;
		const char *what;
	} bad[] = {
		{ TOKEN "\n", 0644, "token file readable by others" },
		{ TOKEN "\n", 0640, "token file readable by group" },
		{ "short-token\n", 0600, "token of 11 bytes" },
		{ "\n", 0600, "empty token" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char dir[] = "/tmp/moat-serve-tok-XXXXXX";
		ck_assert_ptr_nonnull(mkdtemp(dir));
		ck_assert_int_eq(chmod(dir, 0755), 0);
		char path[128];
		snprintf(path, sizeof path, "%s/token", dir);
		write_file(path, bad[i].content, strlen(bad[i].content), bad[i].mode);
		if (_i == MODE_ROOTLESS && harness_is_root())
			ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(chmod(path, bad[i].mode), 0);
		const char *a_tok[] = { "--token-file", path, NULL };
		struct server_opts o4 = { .args = a_tok };
		st = refused_start(_i, &o4, &s, &log);
		unlink(path);
		rmdir(dir);
		ck_assert_msg(st > 0, "%s: moat serve did not refuse to start (status %d; -1: it ran): %s",
			      bad[i].what, st, log);
		ck_assert_msg(strcasestr(log, "token"), "%s: the refusal does not say why: %s",
			      bad[i].what, log);
		free(log);
		server_cleanup(&s);
	}
}
END_TEST

START_TEST(metrics)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print(1)", NULL, &r);
	expect_script("a run", &r);
	resp_free(&r);
	get(&s, "/nope", &r);
	resp_free(&r);
	struct req q = { .path = "/metrics" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200, "/metrics: HTTP %d", r.code);
	char ct[128];
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/plain"),
		      "/metrics Content-Type: %s", r.head);
	static const char *const names[] = { "moat_serve_requests_total",
					     "moat_serve_request_duration_seconds_bucket",
					     "moat_serve_in_flight", "moat_serve_queued",
					     "moat_serve_rejected_total" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		int found = 0;
		metric_sum(r.body, names[i], NULL, &found);
		ck_assert_msg(found > 0, "/metrics has no sample of %s:\n%.3000s", names[i], r.body);
	}
	int found;
	ck_assert_msg(metric_sum(r.body, "moat_serve_requests_total", NULL, &found) >= 2,
		      "requests_total counts fewer than the 2 requests made:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_in_flight", NULL, &found) == 0,
		      "in_flight is not 0 when idle:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_queued", NULL, &found) == 0,
		      "queued is not 0 when idle:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_rejected_total", NULL, &found) == 0,
		      "rejected_total is not 0:\n%.3000s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(access_log)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true };
	server_start(&s, _i, &o);
	struct resp r;
	const char *auth = "Bearer " TOKEN;
	char *body2 = NULL;
	ck_assert_int_ge(asprintf(&body2, "{\"code\":\"print('SECRET_CODE_MARK'[:6])\","
				  "\"sandboxId\":\"SECRET_SANDBOX_MARK\",\"input\":{\"body\":"
				  "\"SECRET_INPUT_MARK\",\"path\":\"/SECRET_PATH_MARK\"}}"),
			 0);
	struct req q = { .path = "/py/run?q=SECRET_QUERY_MARK", .body = body2, .auth = auth };
	call(&s, &q, &r);
	expect_script("a logged run", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "SECRET\n");
	resp_free(&r);
	free(body2);
	struct req qh = { .path = "/ts/run",
			  .body = "{\"code\":\"export default { async fetch(r) { return new "
				  "Response('SECRET_HANDLER_OUT') } }\",\"sandboxId\":\"b\"}",
			  .auth = auth };
	call(&s, &qh, &r);
	ck_assert_msg(r.code == 200, "TS handler: %d %s", r.code, r.body);
	resp_free(&r);
	struct req qv = { .path = "/v1/run",
			  .body = "{\"language\":\"python\",\"code\":\"print(2)\",\"env\":"
				  "{\"SECRET_ENV_NAME\":\"SECRET_ENV_VALUE\"}}",
			  .auth = auth };
	call(&s, &qv, &r);
	ck_assert_msg(r.code == 200, "/v1/run: %d %s", r.code, r.body);
	resp_free(&r);
	struct req qw = { .path = "/py/run", .body = "{}", .auth = "Bearer WRONG_TOKEN_MARK_0000000" };
	call(&s, &qw, &r);
	ck_assert_int_eq(r.code, 401);
	resp_free(&r);
	get(&s, "/nope", &r);
	resp_free(&r);
	/* the log is read once the server stopped: every line is out */
	{
		char kids[4096];
		ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
		int st = server_term(&s, harness_scale_ms(15000), NULL);
		ck_assert_msg(st == 0, "exit status %d", st);
	}
	char *log = server_log(&s);
	static const char *const secrets[] = { TOKEN,
					       "WRONG_TOKEN_MARK",
					       "SECRET_CODE_MARK",
					       "SECRET_INPUT_MARK",
					       "SECRET_PATH_MARK",
					       "SECRET_SANDBOX_MARK",
					       "SECRET_QUERY_MARK",
					       "SECRET_HANDLER_OUT",
					       "SECRET_ENV_NAME",
					       "SECRET_ENV_VALUE",
					       "print(" };
	for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
		ck_assert_msg(!strstr(log, secrets[i]), "the server's stderr holds %s:\n%.3000s",
			      secrets[i], log);
	cJSON *lines = access_lines(&s);
	ck_assert_msg(cJSON_GetArraySize(lines) >= 5, "%d access log lines for 5+ requests:\n%.3000s",
		      cJSON_GetArraySize(lines), log);
	const cJSON *py = access_find(lines, "route", "py"), *l;
	ck_assert_msg(py && !strcmp(jstr(py, "path"), "/py/{path}"),
		      "no access line with path /py/{path} (the template):\n%.3000s", log);
	int runs = 0;
	cJSON_ArrayForEach(l, lines)
	{
		const char *path = jstr(l, "path");
		ck_assert_msg(!strchr(path, '?'), "a path with its query string: %s", path);
		if (jnum(l, "status") == 200 && strcmp(path, "/healthz") != 0) {
			runs++;
			ck_assert_msg(cJSON_IsString(jget(l, "language")) && cJSON_IsString(jget(l, "mode")),
				      "a run's access line without language/mode:\n%.3000s", log);
		}
	}
	ck_assert_msg(runs >= 3, "%d successful run lines (want 3):\n%.3000s", runs, log);
	const char *lang = jstr(py, "language"), *mode = jstr(py, "mode");
	ck_assert_msg(lang && !strcmp(lang, "python"), "/py/run language: %s", lang ? lang : "none");
	ck_assert_msg(mode && !strcmp(mode, "script"), "/py/run mode: %s", mode ? mode : "none");
	ck_assert_msg(jnum(py, "bytesIn") > 0 && jnum(py, "bytesOut") > 0, "bytes of /py/run: %s", log);
	const cJSON *ts = access_find(lines, "path", "/ts/{path}");
	ck_assert_msg(ts && jstr(ts, "mode") && !strcmp(jstr(ts, "mode"), "handler"),
		      "/ts/run handler line mode:\n%.3000s", log);
	const cJSON *nf = access_find(lines, "path", "/{unknown}");
	ck_assert_msg(nf && jnum(nf, "status") == 404, "/nope line:\n%.3000s", log);
	bool saw401 = false;
	cJSON_ArrayForEach(l, lines) saw401 |= jnum(l, "status") == 401;
	ck_assert_msg(saw401, "no 401 access line:\n%.3000s", log);
	cJSON_Delete(lines);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* ---- tests: load, shutdown, disconnects ------------------------------------------- */

START_TEST(concurrency_queue)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "2", "--queue", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	enum { N = 32 };
	char *body = envelope("import time\ntime.sleep(0.3)\nprint('slept')", NULL);
	struct call c[N];
	struct req q = { .path = "/py/run", .body = body };
	for (int i = 0; i < N; i++)
		call_start(&s, &q, &c[i]);
	int n200 = 0, n503 = 0, other = 0;
	char others[2048] = "";
	for (int i = 0; i < N; i++) {
		struct resp r;
		call_finish(&c[i], &r);
		char h[64];
		if (r.code == 200 && r.json && jstr(r.json, "stdout") &&
		    !strcmp(jstr(r.json, "stdout"), "slept\n")) {
			n200++;
		} else if (r.code == 503) {
			n503++;
			ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h),
				      "a 503 without Retry-After: %s", r.head);
			ck_assert_msg(!strcmp(h, "1"), "Retry-After: %s (want 1)", h);
			expect_error("queue full", &r, 503, "ServerBusy");
		} else {
			other++;
			char line[300];
			snprintf(line, sizeof line, "#%d: curl %d HTTP %d %.200s\n", i, r.curl_rc, r.code,
				 r.body);
			strncat(others, line, sizeof others - strlen(others) - 1);
		}
		resp_free(&r);
	}
	free(body);
	ck_assert_msg(other == 0, "%d of %d requests got neither 200 nor 503:\n%s", other, N, others);
	ck_assert_msg(n200 + n503 == N, "lost requests: %d + %d != %d", n200, n503, N);
	ck_assert_msg(n200 >= 2, "only %d requests ran", n200);
	ck_assert_msg(n503 > 0, "32 requests at once with 2 slots and a queue of 4: none refused");
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double rej = metric_sum(m, "moat_serve_rejected_total", NULL, &found);
	ck_assert_msg(found && rej == n503, "rejected_total %g, but %d requests got 503:\n%.3000s", rej,
		      n503, m);
	double total = metric_sum(m, "moat_serve_requests_total", NULL, &found);
	ck_assert_msg(total >= N, "requests_total %g < %d:\n%.3000s", total, N, m);
	/* the labels are not in the contract: where the samples carry the route
	 * or the outcome, the counts match what came back */
	int fr = 0;
	double py = metric_sum(m, "moat_serve_requests_total", "route=\"py\"", &fr);
	ck_assert_msg(!fr || py == N, "requests_total{route=\"py\"} %g != %d requests:\n%.3000s", py,
		      N, m);
	int fo = 0;
	double ok = metric_sum(m, "moat_serve_requests_total", "route=\"py\";outcome=\"ok\"", &fo);
	ck_assert_msg(!fo || ok == n200, "requests_total{outcome=\"ok\"} %g != %d 200s:\n%.3000s", ok,
		      n200, m);
	double rj = metric_sum(m, "moat_serve_requests_total", "route=\"py\";outcome=\"rejected\"", &fo);
	ck_assert_msg(!fo || rj == n503, "requests_total{outcome=\"rejected\"} %g != %d 503s:\n%.3000s",
		      rj, n503, m);
	double cnt = metric_sum(m, "moat_serve_request_duration_seconds_count", "route=\"py\"", &fr);
	ck_assert_msg(!fr || cnt == N, "request_duration_seconds_count{route=\"py\"} %g != %d:\n%.3000s",
		      cnt, N, m);
	ck_assert_msg(metric_sum(m, "moat_serve_in_flight", NULL, &found) == 0 &&
		      metric_sum(m, "moat_serve_queued", NULL, &found) == 0,
		      "in_flight/queued not 0 after all answered:\n%.3000s", m);
	free(m);
	server_stop(&s);
}
END_TEST

START_TEST(client_disconnect)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(30)", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call c;
	call_start(&s, &q, &c);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)),
		      "no sandbox process appeared under the server");
	sleep_ms(harness_scale_ms(1000));
	kill(c.pid, SIGKILL);
	struct resp r;
	call_finish(&c, &r);
	resp_free(&r);
	free(body);
	long t0 = now_ms();
	char kids[4096];
	int n = server_children_gone(&s, harness_scale_ms(5000), kids, sizeof kids);
	ck_assert_msg(n == 0, "%s: %ld ms after the client went, the server still has %d child(ren):\n%s",
		      MODE_NAME[_i], now_ms() - t0, n, kids);
	/* the access line says so */
	bool seen = false;
	char *log = NULL;
	for (long t1 = now_ms(); !seen && now_ms() - t1 < harness_scale_ms(5000); sleep_ms(50)) {
		free(log);
		log = server_log(&s);
		cJSON *lines = access_lines(&s);
		seen = access_find(lines, "outcome", "disconnected") != NULL;
		cJSON_Delete(lines);
	}
	ck_assert_msg(seen, "no access line with outcome \"disconnected\":\n%.3000s", log);
	free(log);
	/* the server goes on */
	struct resp r2;
	run_py(&s, "print('next')", NULL, &r2);
	expect_script("after a disconnect", &r2);
	resp_free(&r2);
	server_stop(&s);
}
END_TEST

START_TEST(sigterm_drains)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "2", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(1)\nprint('finished')", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call c[2];
	call_start(&s, &q, &c[0]);
	call_start(&s, &q, &c[1]);
	/* both in flight (not in the listen backlog, not queued) */
	bool both = false;
	for (long t1 = now_ms(); !both && now_ms() - t1 < harness_scale_ms(10000); sleep_ms(20)) {
		char *m = get_metrics(&s, NULL);
		both = metric_sum(m, "moat_serve_in_flight", NULL, NULL) == 2;
		free(m);
	}
	ck_assert_msg(both, "moat_serve_in_flight never reached 2");
	ck_assert_msg(server_wait_children(&s, 2, harness_scale_ms(10000)),
		      "the two runs have no processes");
	long t0 = now_ms();
	ck_assert_int_eq(kill(s.p.pid, SIGTERM), 0);
	/* it stops accepting */
	sleep_ms(harness_scale_ms(200));
	if (!server_exited(&s)) {
		struct req qh = { .path = "/healthz", .max_ms = 3000 };
		struct resp rh;
		call(&s, &qh, &rh);
		ck_assert_msg(rh.code != 200, "a new request after SIGTERM was answered 200");
		resp_free(&rh);
	}
	struct resp r[2];
	for (int i = 0; i < 2; i++)
		call_finish(&c[i], &r[i]);
	int st = server_wait_exit(&s, harness_scale_ms(12000));
	for (int i = 0; i < 2; i++) {
		char *log = server_log(&s);
		ck_assert_msg(r[i].code == 200 && r[i].json && jstr(r[i].json, "stdout") &&
			      !strcmp(jstr(r[i].json, "stdout"), "finished\n"),
			      "in-flight run %d after SIGTERM: curl %d HTTP %d [%.500s]; server log:\n%.3000s",
			      i, r[i].curl_rc, r[i].code, r[i].body, log);
		free(log);
		resp_free(&r[i]);
	}
	long took = now_ms() - t0;
	if (st < 0) {
		kill(s.p.pid, SIGKILL);
		server_reap(&s);
	}
	free(body);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM with runs in flight (-1: still running "
		      "%ld ms later)", st, took);
	server_cleanup(&s);
}
END_TEST

START_TEST(sigterm_grace_kills)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--grace", "1", "--max-concurrent", "1", "--queue", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(30)\nprint('not killed')", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call run, queued[2];
	call_start(&s, &q, &run);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)), "the run did not start");
	call_start(&s, &q, &queued[0]);
	call_start(&s, &q, &queued[1]);
	/* wait until both wait in the queue */
	bool both = false;
	for (long t1 = now_ms(); !both && now_ms() - t1 < harness_scale_ms(10000); sleep_ms(50)) {
		char *m = get_metrics(&s, NULL);
		both = metric_sum(m, "moat_serve_queued", NULL, NULL) == 2;
		free(m);
	}
	ck_assert_msg(both, "moat_serve_queued never reached 2");
	long took;
	int st = server_term(&s, harness_scale_ms(1000 + 5000), &took);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM with --grace 1 (-1: not within %ld ms)", st,
		      harness_scale_ms(6000));
	struct resp r;
	call_finish(&run, &r);
	ck_assert_msg(r.curl_rc != 0 || r.code >= 500 ||
		      (r.code == 200 && r.json && jstr(r.json, "error")),
		      "the run killed at the end of the grace: curl %d HTTP %d %.500s (want an error "
		      "or a closed connection)", r.curl_rc, r.code, r.body);
	ck_assert_msg(!strstr(r.body, "not killed"), "the run finished: %s", r.body);
	resp_free(&r);
	for (int i = 0; i < 2; i++) {
		call_finish(&queued[i], &r);
		char h[32];
		ck_assert_msg(r.code == 503, "queued request %d at shutdown: curl %d HTTP %d %.300s "
			      "(want 503)", i, r.curl_rc, r.code, r.body);
		ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h), "503 without Retry-After");
		resp_free(&r);
	}
	free(body);
	server_cleanup(&s);
}
END_TEST

/* The run queue is first come, first served: with the one run slot held,
 * requests queued one after another (each seen waiting before the next is
 * sent) run in the order they came, although each woken waiter, and each
 * newcomer while others wait, could otherwise take a freed slot first. */
START_TEST(queue_is_first_come_first_served)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "1", "--queue", "16", NULL };
	struct server_opts o = { .args = a, .socket = true };
	server_start(&s, _i, &o);
	/* held long enough for the six to queue behind it on a slow host (a
	 * /v1/run request may ask up to the service's 60 s) */
	long hold_ms = harness_scale_ms(3000) < 50000 ? harness_scale_ms(3000) : 50000;
	char hold[160];
	snprintf(hold, sizeof hold,
		 "{\"code\":\"import time\\ntime.sleep(%.3f)\\nprint('held')\",\"timeout\":60000}",
		 (double)hold_ms / 1000.0);
	struct req hq = { .path = "/v1/run", .body = hold };
	enum { N = 6 };
	struct call run, queued[N];
	call_start(&s, &hq, &run);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)), "the run did not start");
	char *bodies[N];
	for (int i = 0; i < N; i++) {
		char code[96];
		snprintf(code, sizeof code, "import time\nprint(%d, time.monotonic_ns())", i);
		bodies[i] = envelope(code, NULL);
		struct req q = { .path = "/py/run", .body = bodies[i] };
		call_start(&s, &q, &queued[i]);
		bool in = false;
		for (long t1 = now_ms(); !in && now_ms() - t1 < harness_scale_ms(10000); sleep_ms(10)) {
			char *m = get_metrics(&s, NULL);
			in = metric_sum(m, "moat_serve_queued", NULL, NULL) == i + 1;
			free(m);
		}
		ck_assert_msg(in, "request %d never waited in the queue", i);
	}
	struct resp r;
	call_finish(&run, &r);
	ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "held\n"),
		      "HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	long long last = -1;
	for (int i = 0; i < N; i++) {
		call_finish(&queued[i], &r);
		int idx = -1;
		long long t = -1;
		const char *out = r.json ? jstr(r.json, "stdout") : NULL;
		ck_assert_msg(r.code == 200 && out && sscanf(out, "%d %lld", &idx, &t) == 2 && idx == i,
			      "queued request %d: HTTP %d %.300s", i, r.code, r.body);
		ck_assert_msg(t > last, "queued request %d ran before request %d, which came first",
			      i, i - 1);
		last = t;
		resp_free(&r);
		free(bodies[i]);
	}
	server_stop(&s);
}
END_TEST

/* After the head, a failure truncates: a body over maxResponseBytes, a
 * handler that times out. */
START_TEST(handler_late_failures)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS,
				 .config = "{\"serve\":{\"maxResponseBytes\":10000,"
					   "\"defaults\":{\"timeout\":1500}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "def handle_request(request):\n"
	       "    return (200, {}, (b'z' * 1000 for _ in range(50)))\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (r.curl_rc == 18 || r.curl_rc == 56),
		      "50000 bytes over maxResponseBytes 10000: HTTP %d curl %d (want 200 and 18/56), "
		      "%zu bytes", r.code, r.curl_rc, r.body_len);
	ck_assert_msg(r.body_len <= 10000, "%zu bytes came, over maxResponseBytes 10000", r.body_len);
	resp_free(&r);
	/* within the cap: whole */
	run_py(&s,
	       "def handle_request(request):\n"
	       "    return (200, {}, (b'z' * 1000 for _ in range(10)))\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && r.body_len == 10000,
		      "10000 bytes, at maxResponseBytes: HTTP %d curl %d, %zu bytes", r.code, r.curl_rc,
		      r.body_len);
	resp_free(&r);
	/* the handler times out after its head */
	run_py(&s,
	       "import time\n"
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        yield b'first;'\n"
	       "        time.sleep(30)\n"
	       "        yield b'never'\n"
	       "    return (200, {}, gen())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (r.curl_rc == 18 || r.curl_rc == 56),
		      "a handler timing out after its head: HTTP %d curl %d (want 200, 18/56) [%s]",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(!strcmp(r.body, "first;"), "body so far [%s]", r.body);
	ck_assert_msg(r.ms < harness_scale_ms(10000), "the truncation came after %ld ms", r.ms);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* SIGINT stops it as SIGTERM does. */
START_TEST(sigint_stops)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print(1)", NULL, &r);
	expect_script("a run", &r);
	resp_free(&r);
	char kids[4096];
	ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
	ck_assert_int_eq(kill(s.p.pid, SIGINT), 0);
	int st = server_wait_exit(&s, harness_scale_ms(15000));
	if (st < 0) {
		kill(s.p.pid, SIGKILL);
		server_reap(&s);
	}
	ck_assert_msg(st == 0, "exit status %d after SIGINT (-1: still running)", st);
	server_cleanup(&s);
}
END_TEST

/* --listen [::1]:PORT */
START_TEST(ipv6_listener)
{
	HARNESS_MODE_GUARD(_i);
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		fprintf(stderr, "note: %s: no IPv6 loopback here; not run\n", __func__);
		if (fd >= 0)
			close(fd);
		return;
	}
	socklen_t l = sizeof a;
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	int port = ntohs(a.sin6_port);
	char listen[64];
	snprintf(listen, sizeof listen, "[::1]:%d", port);
	const char *args[] = { "--listen", listen, "--no-auth", NULL };
	struct server_opts o = { .no_listener = true, .args = args };
	struct server s;
	server_spawn(&s, _i, &o);
	snprintf(s.url, sizeof s.url, "http://[::1]:%d", port);
	server_wait_ready(&s);
	struct resp r;
	run_py(&s, "print('v6')", NULL, &r);
	expect_script("over [::1]", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "v6\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: malformed HTTP ------------------------------------------------------------ */

START_TEST(slowloris)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--client-timeout", "2", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	int fd = raw_connect(&s);
	static const char part[] = "POST /py/run HTTP/1.1\r\nHost: x\r\n";
	ck_assert(raw_send(fd, part, sizeof part - 1));
	bool closed;
	long took;
	char *got = raw_read(fd, harness_scale_ms(2000 + 5000), &closed, &took);
	close(fd);
	ck_assert_msg(closed, "a half-sent request was not closed within %ld ms (got [%s])",
		      harness_scale_ms(7000), got);
	ck_assert_msg(took >= 1000, "closed after %ld ms, before --client-timeout 2", took);
	free(got);

	/* a body that never comes (Content-Length larger than what is sent) */
	fd = raw_connect(&s);
	static const char shortbody[] = "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
					"\r\n{\"code\":\"print(1)\",";
	ck_assert(raw_send(fd, shortbody, sizeof shortbody - 1));
	got = raw_read(fd, harness_scale_ms(7000), &closed, &took);
	close(fd);
	ck_assert_msg(closed, "a body short of its Content-Length was not closed: [%s]", got);
	ck_assert_msg(raw_status(got) == 0 || raw_status(got) >= 400, "answered %d: %s",
		      raw_status(got), got);
	free(got);

	/* a header trickled a byte every 300 ms: slow, never idle for 2 s */
	fd = raw_connect(&s);
	static const char trickle[] = "POST /py/run HTTP/1.1\r\nHost: x\r\nX-Slow: "
				      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	long t0 = now_ms(), limit = harness_scale_ms(2000 + 15000);
	closed = false;
	for (size_t i = 0; !closed && now_ms() - t0 < limit; i = (i + 1) % (sizeof trickle - 1)) {
		if (!raw_send(fd, trickle + i, 1)) {
			closed = true;
			break;
		}
		got = raw_read(fd, 300, &closed, NULL);
		free(got);
	}
	took = now_ms() - t0;
	close(fd);
	ck_assert_msg(closed, "a request trickled a byte every 300 ms was still open after %ld ms "
		      "(--client-timeout 2)", took);

	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(malformed_http)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	bool closed;
	long took;
	/* a 64 KiB header value */
	size_t big = 64 * 1024;
	char *req = malloc(big + 200);
	ck_assert_ptr_nonnull(req);
	int n = sprintf(req, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	n += (int)big;
	n += sprintf(req + n, "\r\n\r\n");
	int fd = raw_connect(&s);
	raw_send(fd, req, (size_t)n); /* the server may close while we send */
	char *got = raw_read(fd, harness_scale_ms(10000), &closed, &took);
	close(fd);
	free(req);
	int st = raw_status(got);
	ck_assert_msg(st == 431 || st == 413 || (st == 0 && closed),
		      "a 64 KiB header: status %d closed %d: %.300s", st, closed, got);
	free(got);

	struct {
		const char *raw, *what;
	} bad[] = {
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", "Content-Length abc" },
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}", "Content-Length -5" },
		{ "GARBAGE\r\n\r\n", "no request line" },
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"code\":\"print(1)\","
		  "\"sandboxId\":\"a\"}",
		  "Content-Length shorter than the body" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fd = raw_connect(&s);
		raw_send(fd, bad[i].raw, strlen(bad[i].raw));
		shutdown(fd, SHUT_WR);
		got = raw_read(fd, harness_scale_ms(20000), &closed, &took);
		close(fd);
		st = raw_status(got);
		ck_assert_msg((st >= 400 && st < 500) || (st == 0 && closed),
			      "%s: status %d (want 4xx or a closed connection): %.300s", bad[i].what, st,
			      got);
		free(got);
	}
	/* nothing ran and the server serves */
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz after the malformed requests: %d", r.code);
	resp_free(&r);
	run_py(&s, "print('still')", NULL, &r);
	expect_script("after the malformed requests", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* At most 64 connections per client address. */
START_TEST(connection_limit)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	enum { N = 70 };
	int fds[N];
	for (int i = 0; i < N; i++)
		fds[i] = raw_connect(&s);
	sleep_ms(harness_scale_ms(500));
	int closed_n = 0;
	for (int i = 0; i < N; i++) {
		bool closed;
		char *got = raw_read(fds[i], 50, &closed, NULL);
		closed_n += closed;
		free(got);
	}
	ck_assert_msg(closed_n >= N - 64, "70 idle connections from one address: only %d closed at "
		      "once (limit 64 per address)", closed_n);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	sleep_ms(harness_scale_ms(300));
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz once the connections went: %d", r.code);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: listeners ----------------------------------------------------------------- */

START_TEST(socket_listener)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	/* a regular file where the socket goes: refused, the file stays */
	char dir[] = "/tmp/moat-serve-sock-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	char path[128];
	snprintf(path, sizeof path, "%s/moat.sock", dir);
	write_file(path, "not a socket", 12, 0666);
	const char *a_file[] = { "--socket", path, NULL };
	struct server_opts o1 = { .no_listener = true, .args = a_file };
	char *log;
	int st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st > 0, "--socket on a regular file: status %d (want an error; -1: it ran): %s",
		      st, log);
	free(log);
	server_cleanup(&s);
	char *left = slurp(path, NULL);
	ck_assert_msg(left && !strcmp(left, "not a socket"), "the regular file was touched");
	free(left);
	unlink(path);

	/* a stale socket file: replaced; the new one is 0600 and the server's */
	int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	ck_assert_uint_lt(strlen(path), sizeof a.sun_path);
	memcpy(a.sun_path, path, strlen(path) + 1);
	ck_assert_int_eq(bind(sfd, (struct sockaddr *)&a, sizeof a), 0);
	close(sfd);
	if (_i == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
	const char *a_sock[] = { "--socket", path, NULL };
	struct server_opts o2 = { .no_listener = true, .args = a_sock };
	server_spawn(&s, _i, &o2);
	snprintf(s.sock, sizeof s.sock, "%s", path);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat(path, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode), "not a socket");
	ck_assert_msg((sb.st_mode & 0777) == 0600, "socket mode %o (want 600)", sb.st_mode & 0777);
	uid_t want = _i == MODE_ROOTLESS && harness_is_root() ? ROOTLESS_ID : geteuid();
	ck_assert_msg(sb.st_uid == want, "socket owner %d (want %d)", (int)sb.st_uid, (int)want);
	struct resp r;
	run_py(&s, "print('via socket')", NULL, &r);
	expect_script("via the replaced socket", &r);
	resp_free(&r);
	server_stop(&s); /* checks the socket is removed */
	rmdir(dir);
}
END_TEST

/* As root, in a network namespace of the test's own: loopback up, nothing
 * else. 0, or -1 after saying why. */
static int private_netns(void)
{
	if (unshare(CLONE_NEWNET) < 0) {
		perror("serve test: unshare(CLONE_NEWNET)");
		return -1;
	}
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	int rc = fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0 ? -1 : 0;
	ifr.ifr_flags |= IFF_UP;
	if (rc == 0)
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	if (rc < 0)
		perror("serve test: bring lo up");
	if (fd >= 0)
		close(fd);
	return rc;
}

/* As root: a mount namespace of the test's own with an empty tmpfs on /run,
 * where the root default's /run/moat is made unseen by the host (and by
 * other servers). 0, or -1 after saying why. */
static int private_run(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0) {
		perror("serve test: a private /run");
		return -1;
	}
	return 0;
}

/* Can uid and gid 65534, without other groups, connect to the unix socket
 * at path? (A forked child tries; a refusal other than EACCES fails.) */
static bool nobody_connects(const char *path)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 ||
		    setresgid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0 ||
		    setresuid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0)
			_exit(10);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
		if (fd < 0)
			_exit(11);
		if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			_exit(0);
		_exit(errno == EACCES ? 1 : 12);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) <= 1,
		      "uid 65534 connecting to %s: status %#x (not a connection, not EACCES)", path,
		      st);
	return WEXITSTATUS(st) == 0;
}

/* Is something listening on 127.0.0.1:port? */
static bool tcp_port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	bool open = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return open;
}

#define ROOT_SOCK "/run/moat/moat.sock"

/* The root default: the unix socket /run/moat/moat.sock, mode 0600, its
 * directory made 0755; nothing on 127.0.0.1:3000, nothing in
 * XDG_RUNTIME_DIR. With --socket-group: 0660 and that group's, so a member
 * connects. A /run/moat others may write is refused. The test moves itself
 * (and so the server) into network and mount namespaces of its own: the
 * fixed port and path are free there and nothing else on the machine sees
 * them. */
static void root_default_listener(void)
{
	int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int host_mnt = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(host_net, 0);
	ck_assert_int_ge(host_mnt, 0);
	ck_assert_msg(private_netns() == 0, "cannot make the test's network namespace");
	ck_assert_msg(private_run() == 0, "cannot make the test's /run");
	ck_assert_msg(access("/run/moat", F_OK) < 0, "the private /run is not empty");
	char xdg[] = "/tmp/moat-serve-xdg-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(xdg));
	char xdg_env[128];
	snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg);
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", xdg_env, NULL };
	struct server s;
	struct server_opts o = { .no_listener = true, .env = env };
	server_spawn(&s, MODE_ROOT, &o);
	snprintf(s.sock, sizeof s.sock, "%s", ROOT_SOCK);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat("/run/moat", &sb), 0);
	ck_assert_msg(S_ISDIR(sb.st_mode) && (sb.st_mode & 07777) == 0755 && sb.st_uid == 0,
		      "/run/moat: mode %o uid %d (want a directory, 755, root's)", sb.st_mode,
		      (int)sb.st_uid);
	ck_assert_int_eq(lstat(ROOT_SOCK, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0600 && sb.st_uid == 0 &&
			      sb.st_gid == 0,
		      ROOT_SOCK ": mode %o owner %d:%d (want a socket, 600, 0:0)", sb.st_mode,
		      (int)sb.st_uid, (int)sb.st_gid);
	ck_assert_msg(!nobody_connects(ROOT_SOCK), "uid 65534 connected to the 0600 socket");
	ck_assert_msg(!tcp_port_open(3000), "as root without flags, 127.0.0.1:3000 is open");
	struct resp r;
	run_py(&s, "print('on the root default')", NULL, &r);
	expect_script("on the root default socket", &r);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(out && !strcmp(out, "on the root default\n"), "stdout: %.600s", r.body);
	resp_free(&r);
	get(&s, "/healthz", &r);
	ck_assert_msg(!strcmp(r.body, "{\"status\":\"ok\"}\n"),
		      "/healthz on the socket is not today's body: %s", r.body);
	resp_free(&r);
	char sock[160];
	snprintf(sock, sizeof sock, "%s/moat.sock", xdg);
	ck_assert_msg(access(sock, F_OK) < 0, "as root, moat serve made %s", sock);
	server_stop(&s);

	/* --socket-group: 0660 and the group's; a member of it connects */
	const char *a_grp[] = { "--socket-group", "65534", NULL };
	struct server_opts o2 = { .no_listener = true, .env = env, .args = a_grp };
	server_spawn(&s, MODE_ROOT, &o2);
	snprintf(s.sock, sizeof s.sock, "%s", ROOT_SOCK);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	ck_assert_int_eq(lstat(ROOT_SOCK, &sb), 0);
	ck_assert_msg((sb.st_mode & 0777) == 0660 && sb.st_uid == 0 && sb.st_gid == ROOTLESS_ID,
		      "--socket-group 65534: mode %o owner %d:%d (want 660, 0:65534)",
		      sb.st_mode & 0777, (int)sb.st_uid, (int)sb.st_gid);
	ck_assert_msg(nobody_connects(ROOT_SOCK), "a member of --socket-group cannot connect");
	server_stop(&s);

	/* a /run/moat that others may write: refused, nothing bound there */
	ck_assert_int_eq(chmod("/run/moat", 0777), 0);
	char *log;
	int st = refused_start(MODE_ROOT, &o, &s, &log);
	ck_assert_msg(st > 0 && strstr(log, "/run/moat"),
		      "a world-writable /run/moat: status %d (want a refusal naming it; -1: it ran): %s",
		      st, log);
	ck_assert_msg(access(ROOT_SOCK, F_OK) < 0, "a socket was made in a world-writable /run/moat");
	free(log);
	server_cleanup(&s);

	rmdir(xdg);
	ck_assert_int_eq(setns(host_net, CLONE_NEWNET), 0);
	ck_assert_int_eq(setns(host_mnt, CLONE_NEWNS), 0);
	close(host_net);
	close(host_mnt);
}

/* The default listener: as root /run/moat/moat.sock; rootless
 * $XDG_RUNTIME_DIR/moat.sock (mode 0600 both), and without it and without
 * a flag, an error. */
START_TEST(default_listener)
{
	HARNESS_MODE_GUARD(_i);
	if (_i == MODE_ROOT) {
		root_default_listener();
		return;
	}
	struct server s;
	const char *env_none[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };
	struct server_opts o1 = { .no_listener = true, .env = env_none };
	char *log;
	int st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st > 0, "rootless without XDG_RUNTIME_DIR and without a listener flag: status %d "
		      "(want an error; -1: it ran): %s", st, log);
	free(log);
	server_cleanup(&s);

	char xdg[] = "/tmp/moat-serve-xdg-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(xdg));
	ck_assert_int_eq(chmod(xdg, 0700), 0);
	if (harness_is_root())
		ck_assert_int_eq(chown(xdg, ROOTLESS_ID, ROOTLESS_ID), 0);
	char xdg_env[128];
	snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg);
	const char *env_xdg[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", xdg_env, NULL };
	struct server_opts o2 = { .no_listener = true, .env = env_xdg };
	server_spawn(&s, _i, &o2);
	snprintf(s.sock, sizeof s.sock, "%s/moat.sock", xdg);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat(s.sock, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0600,
		      "%s: mode %o (want a socket, 600)", s.sock, sb.st_mode);
	server_stop(&s);
	rmdir(xdg);
}
END_TEST

/* --socket-group G (a gid or a name): the socket is 0660 and G's; a group
 * that does not exist, one the user is not in, and --socket-group with
 * --listen are refused. */
START_TEST(socket_group)
{
	HARNESS_MODE_GUARD(_i);
	/* the server's own group when rootless (chown to it is allowed);
	 * as root, nogroup by name */
	gid_t gid = _i == MODE_ROOTLESS && !harness_is_root() ? getegid() : ROOTLESS_ID;
	char gid_s[32];
	snprintf(gid_s, sizeof gid_s, "%u", (unsigned)gid);
	struct group *g = getgrgid(gid);
	const char *name = _i == MODE_ROOT && g ? g->gr_name : gid_s;
	const char *a[] = { "--socket-group", name, NULL };
	struct server s;
	struct server_opts o = { .socket = true, .args = a };
	server_start(&s, _i, &o);
	struct stat sb;
	ck_assert_int_eq(lstat(s.sock, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0660 && sb.st_gid == gid,
		      "--socket-group %s: mode %o group %d (want 660, %d)", name, sb.st_mode & 0777,
		      (int)sb.st_gid, (int)gid);
	struct resp r;
	run_py(&s, "print('grouped')", NULL, &r);
	expect_script("over a --socket-group socket", &r);
	resp_free(&r);
	server_stop(&s);

	struct {
		const char *const *args;
		bool socket;
		const char *want, *what;
	} bad[] = {
		{ (const char *const[]){ "--socket-group", "no-such-group-moat", NULL }, true,
		  "no-such-group-moat", "a group that does not exist" },
		{ (const char *const[]){ "--socket-group", gid_s, NULL }, false, "--socket-group",
		  "--socket-group with --listen" },
		{ (const char *const[]){ "--socket-group", "0", NULL }, true, "--socket-group",
		  "a group the user is not in" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (i == 2 && (_i == MODE_ROOT || !harness_is_root()))
			continue; /* root may give it to any group; a user may be in 0 */
		struct server_opts ob = { .socket = bad[i].socket, .args = bad[i].args };
		char *log;
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st > 0 && strstr(log, bad[i].want) && !strstr(log, "unrecognized"),
			      "%s: status %d (want a refusal naming %s; -1: it ran): %s", bad[i].what,
			      st, bad[i].want, log);
		free(log);
		server_cleanup(&s);
	}
}
END_TEST

/* The line of log that holds needle, or NULL; into buf. */
static const char *log_line(const char *log, const char *needle, char *buf, size_t size)
{
	const char *p = strstr(log, needle);
	if (!p)
		return NULL;
	const char *b = p;
	while (b > log && b[-1] != '\n')
		b--;
	size_t len = strcspn(b, "\n");
	snprintf(buf, size, "%.*s", (int)len, b);
	return buf;
}

/* A TCP listener without --token-file, loopback too, refuses to start with
 * one line naming both ways out (--token-file, --no-auth); nothing listens. */
START_TEST(tcp_needs_token)
{
	HARNESS_MODE_GUARD(_i);
	int port = free_port();
	char listen[64];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
	const char *a[] = { "--listen", listen, NULL };
	struct server_opts o = { .no_listener = true, .args = a };
	struct server s;
	char *log, line[1024];
	int st = refused_start(_i, &o, &s, &log);
	ck_assert_msg(st == 2, "--listen %s without a token: status %d (want 2; -1: it ran): %s",
		      listen, st, log);
	ck_assert_msg(log_line(log, "--token-file", line, sizeof line) && strstr(line, "--no-auth"),
		      "the refusal is not one line naming --token-file and --no-auth: %s", log);
	ck_assert_msg(!tcp_port_open(port), "127.0.0.1:%d is open after the refusal", port);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* --no-auth: a loopback listener without a token, said at start and in
 * /healthz; refused off loopback and with --token-file. */
START_TEST(no_auth)
{
	HARNESS_MODE_GUARD(_i);
	const char *a[] = { "--no-auth", NULL };
	struct server s;
	struct server_opts o = { .args = a };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print('open')", NULL, &r);
	expect_script("--no-auth, no Authorization", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "open\n");
	resp_free(&r);
	get(&s, "/metrics", &r);
	ck_assert_msg(r.code == 200, "/metrics with --no-auth: HTTP %d", r.code);
	resp_free(&r);
	get(&s, "/healthz", &r);
	const char *auth = jstr(r.json, "auth"), *warn = jstr(r.json, "warning");
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "status"), "ok") && auth &&
			      !strcmp(auth, "off") && warn && strstr(warn, "--no-auth"),
		      "/healthz with --no-auth does not say auth is off: %d %s", r.code, r.body);
	resp_free(&r);
	char *log = server_log(&s), line[1024];
	ck_assert_msg(strstr(log, "authentication is off (--no-auth)"), "no warning at start: %s",
		      log);
	free(log);
	server_stop(&s);

	int port = free_port();
	char any[64];
	snprintf(any, sizeof any, "0.0.0.0:%d", port);
	struct {
		const char *const *args;
		bool token;
		const char *want1, *want2, *what;
	} bad[] = {
		{ (const char *const[]){ "--listen", any, "--no-auth", NULL }, false, "loopback",
		  "--token-file", "--no-auth on 0.0.0.0" },
		{ (const char *const[]){ "--no-auth", NULL }, true, "--no-auth", "--token-file",
		  "--no-auth with --token-file" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct server_opts ob = { .no_listener = i == 0, .args = bad[i].args,
					  .token = bad[i].token };
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st == 2 && log_line(log, bad[i].want1, line, sizeof line) &&
				      strstr(line, bad[i].want2) && !strstr(log, "unrecognized"),
			      "%s: status %d (want 2 and a line naming %s and %s; -1: it ran): %s",
			      bad[i].what, st, bad[i].want1, bad[i].want2, log);
		free(log);
		server_cleanup(&s);
	}
	ck_assert_msg(!tcp_port_open(port), "0.0.0.0:%d is open after the refusal", port);
}
END_TEST

/* --metrics-listen: GET /metrics there without a token, 404 for every other
 * path (tokens or not); the main listener still wants the token for
 * /metrics. Nothing of a tenant (sandboxId, code, output) is in it. */
START_TEST(metrics_listener)
{
	HARNESS_MODE_GUARD(_i);
	int mport = free_port();
	char ml[64];
	snprintf(ml, sizeof ml, "127.0.0.1:%d", mport);
	const char *a[] = { "--metrics-listen", ml, NULL };
	struct server s;
	struct server_opts o = { .token = true, .args = a };
	server_start(&s, _i, &o);
	struct resp r;
	struct req q = { .path = "/py/run", .auth = "Bearer " TOKEN,
			 .body = "{\"code\":\"print('secret-output-7q')\","
				 "\"sandboxId\":\"tenant-id-9z\"}" };
	call(&s, &q, &r);
	expect_script("a run with the token", &r);
	resp_free(&r);
	get(&s, "/metrics", &r);
	expect_error("/metrics on the main listener without token", &r, 401,
		     "AuthenticationError");
	resp_free(&r);
	struct req qm = { .path = "/metrics", .auth = "Bearer " TOKEN };
	call(&s, &qm, &r);
	ck_assert_msg(r.code == 200, "/metrics on the main listener with the token: HTTP %d",
		      r.code);
	resp_free(&r);

	char main_url[sizeof s.url];
	snprintf(main_url, sizeof main_url, "%s", s.url);
	snprintf(s.url, sizeof s.url, "http://%s", ml);
	get(&s, "/metrics", &r);
	char ct[128];
	int found = 0;
	ck_assert_msg(r.code == 200, "/metrics on --metrics-listen without token: HTTP %d %s",
		      r.code, r.body);
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/plain"),
		      "--metrics-listen /metrics Content-Type: %s", r.head);
	ck_assert_msg(metric_sum(r.body, "moat_serve_requests_total", NULL, &found) >= 1 &&
			      found > 0,
		      "--metrics-listen /metrics counts no request:\n%.3000s", r.body);
	ck_assert_msg(!strstr(r.body, "tenant-id-9z") && !strstr(r.body, "secret-output-7q"),
		      "the metrics hold a tenant's id or output:\n%.3000s", r.body);
	resp_free(&r);
	static const char *const others[] = { "/healthz", "/py/run", "/v1/run", "/v1/kv/a",
					      "/metrics/x", "/" };
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		struct req qo = { .path = others[i], .auth = "Bearer " TOKEN,
				  .body = strcmp(others[i], "/healthz") ? "{\"code\":\"print(1)\","
									  "\"sandboxId\":\"a\"}"
									: NULL };
		call(&s, &qo, &r);
		ck_assert_msg(r.code == 404, "%s on --metrics-listen: HTTP %d (want 404) %s",
			      others[i], r.code, r.body);
		resp_free(&r);
	}
	snprintf(s.url, sizeof s.url, "%s", main_url);
	server_stop(&s);
	ck_assert_msg(!tcp_port_open(mport), "--metrics-listen %s is still open after the stop",
		      ml);
}
END_TEST

/* Is name in the comma-separated list? */
static bool selected(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		size_t l = strcspn(p, ",");
		if (l == n && !strncmp(p, name, n))
			return true;
		p += l;
		if (*p == ',')
			p++;
	}
	return false;
}

/* moat serve --rootfs <the Spin toolbox root>: a Python handler and a TS handler
 * that import toolbox modules, with the runtime shims bound into a prepared
 * root. Needs MOAT_SPIN_ROOTFS (rootfs/build-rootfs.sh --profile spin). */
START_TEST(spin_rootfs_handlers)
{
	HARNESS_MODE_GUARD(_i);
	const char *root = getenv("MOAT_SPIN_ROOTFS");
	if (!root || !*root) {
		fprintf(stderr, "note: %s: MOAT_SPIN_ROOTFS is not set; not run\n", __func__);
		return;
	}
	const char *args[] = { "--rootfs", root, NULL };
	struct server s;
	struct server_opts o = { .socket = true, .args = args };
	server_start(&s, _i, &o);
	struct resp r;
	const char *py[] = { "-d",
			     "{\"sandboxId\":\"d\",\"code\":\"import numpy, tabulate\\n"
			     "from spin_sdk.http import Response\\n"
			     "def handle_request(request):\\n"
			     "    t = tabulate.tabulate([[int(numpy.arange(4).sum())]], tablefmt='plain')\\n"
			     "    return Response(200, {'content-type': 'text/plain'}, t.strip())\\n\"}",
			     NULL };
	struct req q = { .path = "/py/run", .extra = py };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && !strcmp(r.body, "6"),
		      "python handler in the spin root: HTTP %d curl %d: [%.600s] %s", r.code,
		      r.curl_rc, r.body, r.err);
	resp_free(&r);
	const char *ts[] = { "-d",
			     "{\"sandboxId\":\"d\",\"code\":\"import { z } from 'zod';\\n"
			     "import dayjs from 'dayjs';\\n"
			     "export default { async fetch(req) {\\n"
			     "  const n = z.number().parse(41) + 1;\\n"
			     "  return new Response(n + ' ' + dayjs('2024-01-01').add(1, 'day').format('YYYY-MM-DD'));\\n"
			     "} }\\n\"}",
			     NULL };
	struct req q2 = { .path = "/ts/run", .extra = ts };
	call(&s, &q2, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && !strcmp(r.body, "42 2024-01-02"),
		      "TS handler in the spin root: HTTP %d curl %d: [%.600s] %s", r.code, r.curl_rc,
		      r.body, r.err);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: the scoped key-value store (docs/KV.md) ----------------------------------- */

/* A Spin envelope with sandboxId id, kvEnabled kv, then extra. */
static void run_kv(struct server *s, const char *route, const char *code, const char *id, bool kv,
		   struct resp *r)
{
	char *qc = harness_json_quote(code), *qi = harness_json_quote(id), *e = NULL;
	ck_assert_int_ge(asprintf(&e, "{\"code\":%s,\"sandboxId\":%s,\"kvEnabled\":%s}", qc, qi,
				  kv ? "true" : "false"),
			 0);
	post(s, route, e, r);
	free(e);
	free(qc);
	free(qi);
}

#define PY_VISIT                                                                       \
	"from spin_sdk import key_value\n"                                              \
	"from spin_sdk.http import Response\n"                                          \
	"def handle_request(request):\n"                                                \
	"    s = key_value.open_default()\n"                                            \
	"    n = int(s.get('visits') or b'0') + 1\n"                                    \
	"    s.set('visits', str(n).encode())\n"                                        \
	"    return Response(200, {'content-type': 'text/plain'}, f'visit {n}'.encode())\n"

START_TEST(kv_store)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	/* a Python handler counts its visits, per sandboxId */
	for (int i = 1; i <= 2; i++) {
		run_kv(&s, "/py/visit", PY_VISIT, "user-a", true, &r);
		char want[32];
		snprintf(want, sizeof want, "visit %d", i);
		ck_assert_msg(r.code == 200 && !strcmp(r.body, want), "visit %d: HTTP %d [%.400s]", i,
			      r.code, r.body);
		resp_free(&r);
	}
	run_kv(&s, "/py/visit", PY_VISIT, "user-b", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 1"), "user-b: [%.400s]", r.body);
	resp_free(&r);
	/* a TS handler reads what the Python one wrote */
	run_kv(&s, "/ts/read",
	       "import * as kv from \"@spinframework/spin-kv\";\n"
	       "export default {\n"
	       "  async fetch(req: Request): Promise<Response> {\n"
	       "    const s = kv.openDefault();\n"
	       "    const v = s.get(\"visits\");\n"
	       "    return new Response(`ts sees ${new TextDecoder().decode(v!)} ${s.getKeys()}`);\n"
	       "  },\n"
	       "};\n",
	       "user-a", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "ts sees 2 visits"), "ts: HTTP %d [%.400s]",
		      r.code, r.body);
	resp_free(&r);
	/* a script; and kvEnabled false: the program is told why */
	run_kv(&s, "/py/run",
	       "from spin_sdk import key_value\n"
	       "try:\n"
	       "    key_value.open_default()\n"
	       "except key_value.Error as e:\n"
	       "    print(e.kind)\n",
	       "user-a", false, &r);
	expect_script("kvEnabled false", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "access_denied\n");
	resp_free(&r);
	/* DELETE /v1/kv/<id> retires one id */
	struct req q = { .method = "DELETE", .path = "/v1/kv/user-a" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "sandboxId"), "user-a") &&
			      jnum(r.json, "removed") == 1,
		      "DELETE: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	run_kv(&s, "/py/visit", PY_VISIT, "user-a", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 1"), "after DELETE: [%.300s]", r.body);
	resp_free(&r);
	run_kv(&s, "/py/visit", PY_VISIT, "user-b", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 2"), "user-b after DELETE of user-a: [%.300s]", r.body);
	resp_free(&r);
	struct req wrong = { .method = "POST", .path = "/v1/kv/user-b", .body = "{}" };
	call(&s, &wrong, &r);
	expect_error("POST /v1/kv", &r, 405, "MethodNotAllowed");
	resp_free(&r);
	char path[400] = "/v1/kv/";
	memset(path + 7, 'x', 300);
	path[307] = '\0';
	struct req longid = { .method = "DELETE", .path = path };
	call(&s, &longid, &r);
	expect_error("DELETE of a 300-byte id", &r, 400, "SandboxConfigError");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* --no-kv: kvEnabled and DELETE /v1/kv are refused with 501, never
 * silently run without the store. */
START_TEST(kv_off)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	static const char *const args[] = { "--no-kv", NULL };
	struct server_opts o = { .socket = true, .kv = "", .args = args };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/run", "print(1)", "a", true, &r);
	expect_error("kvEnabled with --no-kv", &r, 501, "NotImplemented");
	resp_free(&r);
	struct req q = { .method = "DELETE", .path = "/v1/kv/a" };
	call(&s, &q, &r);
	expect_error("DELETE with --no-kv", &r, 501, "NotImplemented");
	resp_free(&r);
	run_kv(&s, "/py/run", "print(2)", "a", false, &r);
	expect_script("kvEnabled false with --no-kv", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* A set answered before the service is killed -9 is there for the next. */
START_TEST(kv_survives_kill)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/run",
	       "from spin_sdk import key_value\n"
	       "key_value.open_default().set('k', b'z' * 500000)\n"
	       "print('set')\n",
	       "durable", true, &r);
	expect_script("set", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "set\n");
	resp_free(&r);
	char file[128];
	snprintf(file, sizeof file, "%s", s.kvf);
	ck_assert_int_eq(kill(s.p.pid, SIGKILL), 0);
	server_wait_exit(&s, harness_scale_ms(10000));
	unlink(s.sock); /* a killed server cannot remove its socket */
	char kvarg[160];
	snprintf(kvarg, sizeof kvarg, "%s", file);
	struct server s2;
	struct server_opts o2 = { .socket = true, .kv = kvarg };
	server_start(&s2, _i, &o2);
	run_kv(&s2, "/py/run",
	       "from spin_sdk import key_value\n"
	       "v = key_value.open_default().get('k')\n"
	       "print(len(v), v == b'z' * 500000)\n",
	       "durable", true, &r);
	expect_script("get after kill -9", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "500000 True\n");
	resp_free(&r);
	server_stop(&s2);
	server_cleanup(&s);
}
END_TEST

/* A redis-server of the harness's (harness_redis_start), known to the
 * leftover check. */
struct redis {
	pid_t pid;
	char dir[64];
	char spec[64];
};

static void redis_start(struct redis *rd)
{
	rd->pid = harness_redis_start(rd->spec, sizeof rd->spec, rd->dir, sizeof rd->dir);
	if (rd->pid > 0)
		known_add(rd->pid); /* not a leftover of the servers */
}

static void redis_stop(struct redis *rd)
{
	if (rd->pid <= 0)
		return;
	harness_redis_stop(rd->pid, rd->dir);
	known_del(rd->pid);
}

/* Two services on one Redis: what one stores, the other serves; a DELETE on
 * one retires the id for both. */
START_TEST(kv_redis_two_nodes)
{
	HARNESS_MODE_GUARD(_i);
	struct redis rd;
	redis_start(&rd);
	if (rd.pid <= 0) {
		fprintf(stderr, "note: %s: redis-server is not installed; not run\n", __func__);
		return;
	}
	struct server a, b;
	struct server_opts o = { .kv = rd.spec };
	server_start(&a, _i, &o);
	server_start(&b, _i, &o);
	ck_assert_int_ne(a.port, b.port);
	struct resp r;
	for (int i = 1; i <= 4; i++) {
		run_kv(i % 2 ? &a : &b, "/py/visit", PY_VISIT, "shared-user", true, &r);
		char want[32];
		snprintf(want, sizeof want, "visit %d", i);
		ck_assert_msg(r.code == 200 && !strcmp(r.body, want), "visit %d on node %c: [%.300s]",
			      i, i % 2 ? 'a' : 'b', r.body);
		resp_free(&r);
	}
	struct req q = { .method = "DELETE", .path = "/v1/kv/shared-user" };
	call(&b, &q, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "removed") == 1, "DELETE: %.300s", r.body);
	resp_free(&r);
	run_kv(&a, "/py/visit", PY_VISIT, "shared-user", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 1"), "after DELETE on b, a: [%.300s]", r.body);
	resp_free(&r);
	server_stop(&a);
	server_stop(&b);
	redis_stop(&rd);
}
END_TEST

/* A request with X-Sandbox-Id headers (hdr2: a second one, or NULL). */
static void with_id_header(struct server *s, const char *method, const char *path,
			   const char *body, const char *hdr, const char *hdr2, struct resp *r)
{
	char *h1 = NULL, *h2 = NULL;
	ck_assert_int_ge(asprintf(&h1, "X-Sandbox-Id: %s", hdr), 0);
	if (hdr2)
		ck_assert_int_ge(asprintf(&h2, "X-Sandbox-Id: %s", hdr2), 0);
	const char *extra[] = { "-H", h1, h2 ? "-H" : NULL, h2, NULL };
	struct req q = { .method = method, .path = path, .body = body, .extra = extra };
	call(s, &q, r);
	free(h1);
	free(h2);
}

#define PY_KV_PUT                                                                      \
	"from spin_sdk import key_value\n"                                              \
	"key_value.open_default().set('who', b'header')\n"                             \
	"print('stored')\n"
#define PY_KV_GET                                                                      \
	"from spin_sdk import key_value\n"                                              \
	"print(key_value.open_default().get('who'))\n"

/* The X-Sandbox-Id header (SERVE.md "Sandbox id in a header"): alone it is
 * the request's sandboxId; with a different one in the body or the path it
 * is a 400; it is checked as the envelope's; /healthz ignores it. */
START_TEST(sandbox_id_header)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;

	/* header only: the store is the header's id's */
	char *qc = harness_json_quote(PY_KV_PUT), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s,\"kvEnabled\":true}", qc), 0);
	free(qc);
	with_id_header(&s, NULL, "/py/run", body, "hdr-user", NULL, &r);
	expect_script("header only", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "stored\n"), "%.400s", r.body);
	resp_free(&r);
	free(body);
	run_kv(&s, "/py/run", PY_KV_GET, "hdr-user", true, &r);
	expect_script("read by envelope id", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "b'header'\n"), "%.400s", r.body);
	resp_free(&r);
	run_kv(&s, "/py/run", PY_KV_GET, "other-user", true, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "None\n"), "%.400s", r.body);
	resp_free(&r);

	/* both, the same: fine; different: 400 naming both, and nothing ran */
	char *e = envelope("print('ran')", NULL); /* sandboxId "test" */
	with_id_header(&s, NULL, "/py/run", e, "test", NULL, &r);
	expect_script("same id twice", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "ran\n");
	resp_free(&r);
	with_id_header(&s, NULL, "/py/run", e, "test2", NULL, &r);
	expect_error("different ids", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"),
			     "X-Sandbox-Id header and the envelope's \"sandboxId\" name different"),
		      "%.400s", r.body);
	resp_free(&r);
	/* given twice (even the same): 400; too long, not UTF-8: 400 */
	with_id_header(&s, NULL, "/py/run", e, "test", "test", &r);
	expect_error("two headers", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "more than once"), "%.400s", r.body);
	resp_free(&r);
	char longid[258];
	memset(longid, 'i', 257);
	longid[257] = 0;
	with_id_header(&s, NULL, "/ts/run", e, longid, NULL, &r);
	expect_error("257 bytes", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "1 to 256 bytes"), "%.400s", r.body);
	resp_free(&r);
	with_id_header(&s, NULL, "/py/run", e, "\xff\xfe", NULL, &r);
	expect_error("not UTF-8", &r, 400, "SandboxConfigError");
	resp_free(&r);
	free(e);
	/* neither: still required */
	post(&s, "/py/run", "{\"code\":\"print(1)\"}", &r);
	expect_error("no id at all", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "X-Sandbox-Id"), "%.400s", r.body);
	resp_free(&r);

	/* /v1/run: the header is the request's sandboxId (the store's) */
	qc = harness_json_quote(PY_KV_GET);
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"python\",\"code\":%s,\"kvEnabled\":true}",
				  qc),
			 0);
	with_id_header(&s, NULL, "/v1/run", body, "hdr-user", NULL, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "b'header'\n"),
		      "/v1/run header only: HTTP %d %.400s", r.code, r.body);
	resp_free(&r);
	free(body);
	ck_assert_int_ge(asprintf(&body,
				  "{\"language\":\"python\",\"code\":%s,\"kvEnabled\":true,"
				  "\"sandboxId\":\"hdr-user\"}",
				  qc),
			 0);
	free(qc);
	with_id_header(&s, NULL, "/v1/run", body, "someone-else", NULL, &r);
	expect_error("/v1/run different ids", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "the request's \\\"sandboxId\\\" name different"), "%.400s",
		      r.body);
	resp_free(&r);
	free(body);

	/* DELETE /v1/kv/<id>: a header naming another id is refused, and
	 * nothing is removed */
	with_id_header(&s, "DELETE", "/v1/kv/hdr-user", NULL, "other-user", NULL, &r);
	expect_error("DELETE other id", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "the path name different"), "%.400s", r.body);
	resp_free(&r);
	with_id_header(&s, "DELETE", "/v1/kv/hdr-user", NULL, "hdr-user", NULL, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "removed") == 1, "DELETE: %.300s", r.body);
	resp_free(&r);

	/* /healthz (what a load balancer probes) ignores it */
	with_id_header(&s, NULL, "/healthz", NULL, "\xff", "x", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: the warm pool (docs/SERVE.md, "The pool") --------------------------------- */

static double pool_metric(struct server *s, const char *name, const char *label)
{
	char *m = get_metrics(s, NULL);
	int found = 0;
	double v = metric_sum(m, name, label, &found);
	ck_assert_msg(found, "no %s in /metrics: %.1500s", name, m);
	free(m);
	return v;
}

/* Waits until the pool holds n ready sandboxes of lang. */
static void pool_wait_ready(struct server *s, const char *lang, int n)
{
	char label[64];
	snprintf(label, sizeof label, "language=\"%s\"", lang);
	long t0 = now_ms();
	while (pool_metric(s, "moat_pool_ready", label) < n) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000),
			      "the pool never held %d %s sandbox(es)", n, lang);
		sleep_ms(20);
	}
}

/* The kinds of warm sandbox a pooled server keeps (SERVE.md, "The pool"):
 * python and javascript, and typescript where the root (the host's, in
 * these tests) has esbuild. */
static int pool_kinds(void)
{
	static const char *const at[] = { "/usr/local/bin/esbuild", "/usr/bin/esbuild",
					   "/bin/esbuild" };
	for (size_t i = 0; i < sizeof at / sizeof *at; i++)
		if (access(at[i], X_OK) == 0)
			return 3;
	return 2;
}

/* Waits until every kind holds n ready sandboxes. */
static void pool_wait_all(struct server *s, int n)
{
	pool_wait_ready(s, "python", n);
	pool_wait_ready(s, "javascript", n);
	if (pool_kinds() == 3)
		pool_wait_ready(s, "typescript", n);
}

/* POST /v1/run with body; the result JSON in r. */
static void v1(struct server *s, const char *body, struct resp *r)
{
	post(s, "/v1/run", body, r);
	ck_assert_msg(r->code == 200 && r->json, "/v1/run: HTTP %d %.500s", r->code, r->body);
}

static bool pooled(const struct resp *r)
{
	return cJSON_IsTrue(jget(r->json, "pool"));
}

/* How many children (each a pid 1) an idle server keeps with want per kind:
 * with the zygote, its python ones are the zygote's children, and the
 * zygote's own sandbox is the server's. */
static int pool_idle_children(int want, bool zygote)
{
	return zygote ? 1 + want * (pool_kinds() - 1) : want * pool_kinds();
}

/* Waits until the zygote runs (the python sandboxes are its children from
 * then on). */
static void pool_wait_zygote(struct server *s)
{
	long t0 = now_ms();
	while (pool_metric(s, "moat_pool_zygote_up", NULL) < 1) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000), "the zygote never started");
		sleep_ms(20);
	}
}

/* An idle pooled server: exactly its ready sandboxes as children (each a
 * pid 1), SIGTERM, exit 0, nothing left. */
static void server_stop_pool(struct server *s, int idle)
{
	pid_t kids[64];
	long t0 = now_ms();
	int n;
	while ((n = proc_children(s->p.pid, kids, 64)) != idle) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000),
			      "%s: the idle pooled server has %d children (want its %d warm ones)",
			      MODE_NAME[s->mode], n, idle);
		sleep_ms(50);
	}
	int st = server_term(s, harness_scale_ms(15000), NULL);
	ck_assert_msg(st == 0, "%s: pooled moat serve after SIGTERM: status %d", MODE_NAME[s->mode],
		      st);
	server_cleanup(s);
}

#define PY_DIRTY                                                                       \
	"import os, json, random, sys, time\n"                                          \
	"open('/tmp/x', 'w').write('left')\n"                                           \
	"open('/sandbox/y', 'w').write('left')\n"                                       \
	"open('/dev/shm/z', 'w').write('left')\n"                                       \
	"os.environ['LEAK'] = '1'\n"                                                    \
	"json.LEAK = 1\n"                                                               \
	"sys.modules['leaked'] = json\n"                                                \
	"random.seed(42)\n"                                                             \
	"if os.fork() == 0:\n"                                                          \
	"    os.setsid()\n"                                                             \
	"    time.sleep(30)\n"                                                          \
	"    os._exit(0)\n"                                                             \
	"print('dirty')\n"
#define PY_CLEAN                                                                       \
	"import os, json, sys\n"                                                        \
	"seen = [p for p in ('/tmp/x', '/sandbox/y', '/dev/shm/z') if os.path.exists(p)]\n" \
	"seen += [n for n in ('LEAK',) if n in os.environ]\n"                           \
	"seen += ['json.LEAK'] if hasattr(json, 'LEAK') else []\n"                      \
	"seen += ['leaked'] if 'leaked' in sys.modules else []\n"                       \
	"pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"           \
	"print('clean' if not seen and pids == [1, 2] else 'SEEN %s %s' % (seen, pids))\n"

/* Single use: what one request leaves (files, /tmp, environment, module
 * state, a daemon) is seen by none of the next 20, pooled or not. */
static void pool_single_use_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	struct resp r;
	char *q = harness_json_quote(PY_DIRTY), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s}", q), 0);
	v1(&s, body, &r);
	ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "dirty\n"), "%.500s", r.body);
	resp_free(&r);
	free(body);
	free(q);
	q = harness_json_quote(PY_CLEAN);
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s}", q), 0);
	int warm = 0;
	for (int i = 0; i < 20; i++) {
		if (i % 2 == 0)
			pool_wait_ready(&s, "python", 1);
		v1(&s, body, &r);
		ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "clean\n"), "request %d saw the one "
			      "before: %.500s", i, r.body);
		warm += pooled(&r);
		resp_free(&r);
	}
	ck_assert_msg(warm >= 10, "only %d of 20 requests were pooled", warm);
	free(body);
	free(q);
	/* a handler, through the pool: its shims and input arrive with it */
	pool_wait_ready(&s, "python", 1);
	double used = pool_metric(&s, "moat_pool_used_total", NULL);
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {}, b'warm ' + request.body)\n",
	       ",\"input\":{\"method\":\"POST\",\"body\":\"hi\"}", &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "warm hi"), "handler: HTTP %d [%.300s]",
		      r.code, r.body);
	resp_free(&r);
	ck_assert(pool_metric(&s, "moat_pool_used_total", NULL) == used + 1);
	if (zygote)
		ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) >= 22);
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

START_TEST(pool_single_use)
{
	HARNESS_MODE_GUARD(_i);
	pool_single_use_in(_i, false);
}
END_TEST

/* The same through the Python zygote: each of its children is as fresh. */
START_TEST(zygote_single_use)
{
	HARNESS_MODE_GUARD(_i);
	pool_single_use_in(_i, true);
}
END_TEST

/* The request's wall clock starts at delivery; its limits are the pool's,
 * in force; a request the pool cannot serve runs cold, correctly. */
static void pool_limits_and_fallback_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	sleep_ms(1500); /* idle time is not the request's */
	struct resp r;
	v1(&s, "{\"code\":\"import time\\ntime.sleep(0.5)\\nprint('slept')\",\"timeout\":1000}",
	   &r);
	ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "slept\n"), "%.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"import time\\ntime.sleep(5)\",\"timeout\":300}", &r);
	ck_assert_msg(pooled(&r) && cJSON_IsTrue(jget(r.json, "timedOut")) &&
			      jnum(r.json, "durationMs") < harness_scale_ms(3000),
		      "a pooled timeout: %.500s", r.body);
	resp_free(&r);
	/* the pool's memory limit (the service's default, 256 MiB) holds */
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"b = bytearray(400 * 1024 * 1024)\\nprint('allocated')\"}", &r);
	ck_assert_msg(pooled(&r) && strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "",
					   "allocated\n"),
		      "400 MiB in a pooled 256 MiB sandbox: %.500s", r.body);
	resp_free(&r);
	/* other limits: cold, except with the zygote, which makes a child
	 * with the request's own limits then (in force: 150 MiB under 100),
	 * and counts it */
	double made_for = zygote ? pool_metric(&s, "moat_pool_zygote_made_for_request_total", NULL)
				 : 0;
	v1(&s, "{\"code\":\"print(1)\",\"memoryMb\":100}", &r);
	ck_assert_msg(pooled(&r) == zygote && !strcmp(jstr(r.json, "stdout"), "1\n"), "%.500s",
		      r.body);
	resp_free(&r);
	if (zygote) {
		ck_assert(pool_metric(&s, "moat_pool_zygote_made_for_request_total", NULL) ==
			  made_for + 1);
		v1(&s, "{\"code\":\"b = bytearray(150 * 1024 * 1024)\\nprint('allocated')\","
		       "\"memoryMb\":100}", &r);
		ck_assert_msg(pooled(&r) && strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout")
									 : "", "allocated\n"),
			      "150 MiB in a 100 MiB zygote's child: %.500s", r.body);
		resp_free(&r);
	}
	/* cold: a start-up variable, network, outputs, another language */
	static const char *const cold[] = {
		"{\"code\":\"print(1)\",\"env\":{\"PYTHONHASHSEED\":\"1\"}}",
		"{\"code\":\"print(1)\",\"allowedHosts\":[]}",
		"{\"code\":\"open('o.txt','w').write('x')\\nprint(1)\",\"outputs\":[\"o.txt\"]}",
		"{\"code\":\"echo 1\",\"language\":\"bash\"}",
	};
	for (size_t i = 0; i < sizeof cold / sizeof cold[0]; i++) {
		v1(&s, cold[i], &r);
		ck_assert_msg(!pooled(&r) && !strcmp(jstr(r.json, "stdout"), "1\n"),
			      "%s: %.500s", cold[i], r.body);
		resp_free(&r);
	}
	/* stdin, argv, __name__ and the exit status as a cold run has them */
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"import sys\\nprint(repr(sys.stdin.read()), sys.argv, __name__)\\n"
	       "sys.exit(3)\",\"stdin\":\"a\\nb\"}", &r);
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 3 &&
			      !strcmp(jstr(r.json, "stdout"), "'a\\nb' ['/sandbox/main.py'] __main__\n"),
		      "%.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"raise ValueError('boom')\"}", &r);
	const char *err = jstr(r.json, "stderr");
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 1 && err &&
			      !strncmp(err, "Traceback (most recent call last):\n  File \"/sandbox/main.py\"",
				       60) && strstr(err, "ValueError: boom") && !strstr(err, "moat_pool"),
		      "an exception's trace: %.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "javascript", 1);
	v1(&s, "{\"language\":\"javascript\",\"code\":\"const fs = require('fs');\\n"
	       "console.log(fs.readFileSync(0, 'utf8'), process.argv[1], require.main === module);\\n"
	       "process.exitCode = 4\",\"stdin\":\"js-in\"}", &r);
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 4 &&
			      !strcmp(jstr(r.json, "stdout"), "js-in /sandbox/main.js true\n"),
		      "javascript: %.500s", r.body);
	resp_free(&r);
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

START_TEST(pool_limits_and_fallback)
{
	HARNESS_MODE_GUARD(_i);
	pool_limits_and_fallback_in(_i, false);
}
END_TEST

START_TEST(zygote_limits_and_fallback)
{
	HARNESS_MODE_GUARD(_i);
	pool_limits_and_fallback_in(_i, true);
}
END_TEST

/* 8 clients at once: every request answered right, no sandbox used twice
 * (uses never exceed creations; every eligible request was pooled or
 * counted cold). */
static void pool_under_load_in(int _i, bool zygote)
{
	struct server s;
	static const char *const args[] = { "--max-concurrent", "4", NULL };
	struct server_opts o = { .socket = true, .pool = 2, .args = args, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 2);
	enum { CLIENTS = 8, EACH = 4 };
	struct call c[CLIENTS];
	int done = 0;
	for (int round = 0; round < EACH; round++) {
		for (int i = 0; i < CLIENTS; i++) {
			char body[256];
			snprintf(body, sizeof body,
				 i % 2 ? "{\"language\":\"javascript\",\"code\":\"console.log(%d)\"}"
				       : "{\"code\":\"print(%d)\"}",
				 round * CLIENTS + i);
			struct req q = { .path = "/v1/run", .body = body };
			call_start(&s, &q, &c[i]);
		}
		for (int i = 0; i < CLIENTS; i++) {
			struct resp r;
			call_finish(&c[i], &r);
			char want[16];
			snprintf(want, sizeof want, "%d\n", round * CLIENTS + i);
			ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
					      !strcmp(jstr(r.json, "stdout"), want),
				      "request %d: HTTP %d %.400s", round * CLIENTS + i, r.code, r.body);
			resp_free(&r);
			done++;
		}
	}
	double created = pool_metric(&s, "moat_pool_created_total", NULL),
	       used = pool_metric(&s, "moat_pool_used_total", NULL),
	       cold = pool_metric(&s, "moat_pool_cold_total", NULL),
	       in_use = pool_metric(&s, "moat_pool_in_use", NULL);
	ck_assert_msg(used + cold == done && used <= created && used >= 4 && in_use == 0,
		      "created %.0f used %.0f cold %.0f in use %.0f of %d requests", created, used,
		      cold, in_use, done);
	/* an idle sandbox's memory is reported where it has a memory cgroup */
	struct resp r;
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"print(1)\"}", &r);
	const char *m = jstr(jget(r.json, "limits"), "memory");
	char mech[32];
	snprintf(mech, sizeof mech, "%s", m ? m : "?");
	bool cg = !strncmp(mech, "cgroup", 6);
	resp_free(&r);
	double idle = pool_metric(&s, "moat_pool_idle_memory_bytes", "language=\"python\"");
	/* a zygote's child shares the zygote's pages: its cgroup holds little,
	 * nothing at all when its pid 1 copied every page it writes before it
	 * joined (cgroup v1 charges a page where it was first written) */
	ck_assert_msg(cg ? idle >= (zygote ? 0 : 1e6) && idle < 256e6 : idle == -1,
		      "idle python sandbox: %.0f bytes (memory limit by %s)", idle, mech);
	server_stop_pool(&s, pool_idle_children(2, zygote));
}

START_TEST(pool_under_load)
{
	HARNESS_MODE_GUARD(_i);
	pool_under_load_in(_i, false);
}
END_TEST

START_TEST(zygote_under_load)
{
	HARNESS_MODE_GUARD(_i);
	pool_under_load_in(_i, true);
}
END_TEST

/* kill -9 of the service: its warm sandboxes die with it (their pid 1's
 * parent-death signal); nothing is left. */
static void pool_killed_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 2, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 2);
	ck_assert_int_eq(kill(s.p.pid, SIGKILL), 0);
	server_wait_exit(&s, harness_scale_ms(10000));
	unlink(s.sock);
	server_cleanup(&s); /* no process of it left (they would be ours: a subreaper) */
}

START_TEST(pool_killed)
{
	HARNESS_MODE_GUARD(_i);
	pool_killed_in(_i, false);
}
END_TEST

/* With the zygote: it and its children (waiting ones too) die as well. */
START_TEST(zygote_killed)
{
	HARNESS_MODE_GUARD(_i);
	pool_killed_in(_i, true);
}
END_TEST

/* A warm sandbox killed while it waited is never handed a request: the
 * request runs cold and succeeds. */
static void pool_dead_sandbox_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 1);
	pid_t kids[8];
	int n = proc_children(s.p.pid, kids, 8);
	ck_assert_int_eq(n, pool_idle_children(1, zygote));
	for (int k = 0; k < n; k++)
		ck_assert_int_eq(kill(kids[k], SIGKILL), 0); /* each warm sandbox's pid 1 */
	sleep_ms(100);
	struct resp r;
	v1(&s, "{\"code\":\"print('after')\"}", &r);
	ck_assert_msg(!pooled(&r) && !strcmp(jstr(r.json, "stdout"), "after\n"),
		      "a request after its warm sandbox died: %.500s", r.body);
	resp_free(&r);
	ck_assert(pool_metric(&s, "moat_pool_failed_total", NULL) >= 1);
	if (zygote) {
		/* a new zygote replaces the dead one, and serves */
		pool_wait_zygote(&s);
		pool_wait_ready(&s, "python", 1);
		v1(&s, "{\"code\":\"print('again')\"}", &r);
		ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "again\n"),
			      "after the zygote was replaced: %.500s", r.body);
		resp_free(&r);
		ck_assert(pool_metric(&s, "moat_pool_zygote_starts_total", NULL) >= 2);
	}
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

START_TEST(pool_dead_sandbox)
{
	HARNESS_MODE_GUARD(_i);
	pool_dead_sandbox_in(_i, false);
}
END_TEST

/* Whether a /metrics has the Python zygote's lines (a pool without one
 * has none). */
static bool has_zygote_metrics(struct server *s)
{
	char *m = get_metrics(s, NULL);
	int found = 0;
	(void)metric_sum(m, "moat_pool_zygote_up", NULL, &found);
	free(m);
	return found;
}

/* One Python request through the pool: pooled, 42. */
static void pool_py_42(struct server *s, const char *what)
{
	struct resp r;
	v1(s, "{\"code\":\"print(6*7)\"}", &r);
	ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "42\n"), "%s: %.500s", what,
		      r.body);
	resp_free(&r);
}

/* The zygote is the default with a pool (issue 15): on without a flag;
 * serve.poolZygote false turns it off, --pool-zygote wins over the config;
 * a service with its own root keeps warm interpreters and says why, once;
 * both flags at once, or a poolZygote that is not a boolean, are refused. */
START_TEST(zygote_is_the_default)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1 };
	server_start(&s, _i, &o);
	pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	double kids = pool_metric(&s, "moat_pool_zygote_children_total", NULL);
	pool_py_42(&s, "the default");
	ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) > kids);
	server_stop_pool(&s, pool_idle_children(1, true));

	o.config = "{\"serve\":{\"poolZygote\":false}}";
	server_start(&s, _i, &o);
	pool_wait_ready(&s, "python", 1);
	ck_assert_msg(!has_zygote_metrics(&s), "serve.poolZygote false: a zygote runs");
	pool_py_42(&s, "poolZygote false");
	server_stop_pool(&s, pool_idle_children(1, false));

	o.zygote = 1; /* the flag wins */
	server_start(&s, _i, &o);
	pool_wait_zygote(&s);
	pool_py_42(&s, "--pool-zygote over poolZygote false");
	server_stop_pool(&s, pool_idle_children(1, true));

	/* a policy of its own (the checkout's copy of the default): no
	 * zygote, warm interpreters, one info line that says why */
	char *rt = strdup(harness_runtime_dir()), *pcfg = NULL;
	ck_assert_ptr_nonnull(rt);
	*strrchr(rt, '/') = '\0';
	ck_assert_int_ge(asprintf(&pcfg, "{\"policy\":\"%s/policies/default.json\"}", rt), 0);
	free(rt);
	struct server_opts po = { .socket = true, .pool = 1, .config = pcfg };
	server_start(&s, _i, &po);
	pool_wait_ready(&s, "python", 1);
	ck_assert(!has_zygote_metrics(&s));
	pool_py_42(&s, "a policy");
	char *log = server_log(&s);
	ck_assert_msg(log && strstr(log, "Python requests use warm interpreters, not the zygote") &&
			      strstr(log, "a policy is set"),
		      "no word of the zygote in: %.1500s", log ? log : "");
	free(log);
	server_stop_pool(&s, pool_idle_children(1, false));
	free(pcfg);

	static const char *const both[] = { "serve", "--socket", "/nonexistent/moat.sock",
					    "--pool-zygote", "--no-pool-zygote", NULL };
	struct harness_proc p;
	struct run_out out = { 0 };
	harness_start(_i, both, NULL, 0, NULL, NULL, NULL, &p);
	harness_finish(&p, &out);
	ck_assert_msg(out.status == 2 && strstr(out.err, "exclude each other"), "status %d: %s",
		      out.status, out.err);
	harness_free(&out);
	/* the config is read before the listener is made */
	char dir[] = "/tmp/moat-zyg-cfg-XXXXXX", cfg[64], sockp[64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	snprintf(cfg, sizeof cfg, "%s/moat.json", dir);
	snprintf(sockp, sizeof sockp, "%s/moat.sock", dir);
	static const char bad[] = "{\"serve\":{\"poolZygote\":\"yes\"}}";
	write_file(cfg, bad, sizeof bad - 1, 0644);
	const char *const badcfg[] = { "serve", "--socket", sockp, "--no-kv", "--config", cfg,
				       NULL };
	memset(&out, 0, sizeof out);
	harness_start(_i, badcfg, NULL, 0, NULL, NULL, NULL, &p);
	harness_finish(&p, &out);
	unlink(cfg);
	unlink(sockp);
	rmdir(dir);
	ck_assert_msg(out.status != 0 && strstr(out.err, "serve.poolZygote must be a boolean"),
		      "status %d: %s", out.status, out.err);
	harness_free(&out);
}
END_TEST

/* A server with a pool of 1 whose environment is PATH, HOME and var (no
 * cgroup arranged by the harness: moat picks its own). */
static void pool_server_env(struct server *s, int mode, const char *var)
{
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", var, NULL };
	struct server_opts o = { .socket = true, .pool = 1, .env = env };
	server_start(s, mode, &o);
}

/* A zygote that runs but cannot make a sandbox (here: one that refuses
 * every record, MOAT_TEST_ZYGOTE_REFUSE) does not send Python cold: it is
 * replaced as one that failed to start, backing off, and warm Python
 * interpreters serve meanwhile; one warning says why. */
START_TEST(zygote_that_cannot_make_sandboxes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	pool_server_env(&s, _i, "MOAT_TEST_ZYGOTE_REFUSE=1");
	long t0 = now_ms();
	while (pool_metric(&s, "moat_pool_zygote_failed_total", NULL) < 1) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000), "the zygote was never refused");
		sleep_ms(20);
	}
	pool_wait_ready(&s, "python", 1);
	pool_py_42(&s, "a zygote that cannot make sandboxes");
	/* replaced after its back-off, and refused again */
	t0 = now_ms();
	while (pool_metric(&s, "moat_pool_zygote_starts_total", NULL) < 2) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000), "the zygote was not replaced");
		sleep_ms(50);
	}
	ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) == 0);
	pool_py_42(&s, "after the zygote was replaced");
	char *log = server_log(&s);
	ck_assert_msg(log && strstr(log, "the Python zygote could not make a sandbox") &&
			      strstr(log, "Python requests use warm sandboxes until it is replaced"),
		      "no warning in: %.1500s", log ? log : "");
	/* once per distinct message */
	const char *first = strstr(log, "the Python zygote could not make a sandbox");
	ck_assert_msg(!strstr(first + 1, "the Python zygote could not make a sandbox"),
		      "the warning is repeated: %.2000s", log);
	free(log);
	/* idle: the warm sandboxes and the zygote's own (refused, or up) */
	server_stop_pool(&s, pool_kinds() + 1);
}
END_TEST

/* The zygote is replaced past its age (here 1.5 s: MOAT_TEST_ZYGOTE_MAX_AGE_MS),
 * the new one started first: a request running in a child of the old one
 * finishes (the old zygote lives until its last child is done), the
 * children after it come from a new interpreter (another str hash seed),
 * and the old zygote is gone afterwards. */
START_TEST(zygote_is_replaced_past_its_age)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	pool_server_env(&s, _i, "MOAT_TEST_ZYGOTE_MAX_AGE_MS=1500");
	pool_wait_zygote(&s);
	static const char hash[] = "{\"code\":\"print(hash('moat'))\"}";
	struct resp r;
	v1(&s, hash, &r);
	ck_assert_msg(pooled(&r), "%.300s", r.body);
	char before[64];
	snprintf(before, sizeof before, "%s", jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "");
	resp_free(&r);
	double starts = pool_metric(&s, "moat_pool_zygote_starts_total", NULL);
	/* a child of this zygote, running across its replacement */
	struct req q = { .path = "/v1/run",
			 .body = "{\"code\":\"import time\\ntime.sleep(3)\\nprint('survived')\"}" };
	struct call slow;
	call_start(&s, &q, &slow);
	long t0 = now_ms();
	while (pool_metric(&s, "moat_pool_zygote_starts_total", NULL) < starts + 1) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(20000), "the zygote was not replaced");
		sleep_ms(50);
	}
	ck_assert(pool_metric(&s, "moat_pool_zygote_replaced_total", "reason=\"age\"") >= 1);
	pool_wait_ready(&s, "python", 1);
	v1(&s, hash, &r);
	ck_assert_msg(pooled(&r) && jstr(r.json, "stdout") && strcmp(jstr(r.json, "stdout"), before),
		      "the same hash seed after the replacement (%s): %.300s", before, r.body);
	resp_free(&r);
	call_finish(&slow, &r);
	ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "survived\n") &&
			      jnum(r.json, "exitCode") == 0,
		      "the request in the old zygote's child: HTTP %d %.400s", r.code, r.body);
	resp_free(&r);
	/* idle again: one zygote (the old one released), its child, the rest */
	server_stop_pool(&s, pool_idle_children(1, true));
}
END_TEST

/* The zygote is replaced after it made its children (here 3:
 * --pool-zygote-max-children), whatever its age: of 9 Python requests (each
 * once a child is ready), every one succeeds in a child of a zygote, the
 * children of one zygote agree on its str hash secret and heap layout
 * (hash('x'), id(sys): the interpreter's start made both) and no zygote
 * serves more than 3 of them; the metrics count the replacements by reason. */
START_TEST(zygote_is_replaced_after_its_children)
{
	HARNESS_MODE_GUARD(_i);
	enum { MAX = 3, RUNS = 9 };
	static const char *const args[] = { "--pool-zygote-max-children", "3", NULL };
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };
	struct server_opts o = { .socket = true, .pool = 1, .env = env, .args = args };
	struct server s;
	server_start(&s, _i, &o);
	pool_wait_zygote(&s);
	double starts = pool_metric(&s, "moat_pool_zygote_starts_total", NULL);
	char seen[RUNS][96];
	for (int k = 0; k < RUNS; k++) {
		pool_wait_ready(&s, "python", 1);
		struct resp r;
		v1(&s, "{\"code\":\"import sys\\nprint(hash('x'), id(sys))\"}", &r);
		const char *out = r.json ? jstr(r.json, "stdout") : NULL;
		ck_assert_msg(r.code == 200 && pooled(&r) && out && *out && jnum(r.json, "exitCode") == 0,
			      "request %d: HTTP %d %.400s", k, r.code, r.body);
		snprintf(seen[k], sizeof seen[k], "%s", out);
		resp_free(&r);
	}
	int most = 0, distinct = 0;
	for (int k = 0; k < RUNS; k++) {
		int same = 0, first = 1;
		for (int j = 0; j < RUNS; j++) {
			same += !strcmp(seen[j], seen[k]);
			if (j < k && !strcmp(seen[j], seen[k]))
				first = 0;
		}
		distinct += first;
		most = same > most ? same : most;
		ck_assert_msg(same <= MAX, "one zygote served %d requests (bound %d): %s", same, MAX,
			      seen[k]);
	}
	ck_assert_msg(most >= 2, "no two requests came from one zygote (%d layouts)", distinct);
	ck_assert_msg(distinct >= RUNS / MAX, "%d layouts for %d requests", distinct, RUNS);
	double replaced = pool_metric(&s, "moat_pool_zygote_replaced_total", "reason=\"children\"");
	ck_assert_msg(replaced >= RUNS / MAX - 1 && replaced >= distinct - 1,
		      "%g replacements for children counted, %d layouts seen", replaced, distinct);
	ck_assert(pool_metric(&s, "moat_pool_zygote_starts_total", NULL) >= starts + replaced);
	ck_assert(pool_metric(&s, "moat_pool_zygote_replaced_total", "reason=\"age\"") == 0);
	ck_assert(pool_metric(&s, "moat_pool_zygote_failed_total", NULL) == 0);
	/* idle again: one zygote (each replaced one released), its child, the rest */
	server_stop_pool(&s, pool_idle_children(1, true));
}
END_TEST

/* Under moat serve, a cold run's and a zygote's child's mountinfo name
 * neither the runtime directory nor the checkout that holds it: the shims
 * are a tmpfs copy (SECURITY.md row 72). */
START_TEST(mountinfo_names_no_runtime_path)
{
	HARNESS_MODE_GUARD(_i);
	char checkout[PATH_MAX];
	snprintf(checkout, sizeof checkout, "%s", harness_runtime_dir());
	*strrchr(checkout, '/') = '\0';
	static const char body[] =
		"{\"code\":\"import os\\nprint(open('/proc/self/mountinfo').read())\\n"
		"print(os.path.isfile('/opt/moat/runtime/python/moat_pool.py'))\"}";
	for (int pool = 0; pool <= 1; pool++) {
		struct server s;
		struct server_opts o = { .socket = true, .pool = pool };
		server_start(&s, _i, &o);
		if (pool) {
			pool_wait_zygote(&s);
			pool_wait_ready(&s, "python", 1);
		}
		struct resp r;
		v1(&s, body, &r);
		const char *out = r.json ? jstr(r.json, "stdout") : NULL;
		ck_assert_msg(r.code == 200 && out && strstr(out, " /opt/moat/runtime ") &&
				      strstr(out, "True\n") && pooled(&r) == (pool == 1),
			      "pool %d: HTTP %d %.3000s", pool, r.code, r.body);
		ck_assert_msg(!strstr(out, harness_runtime_dir()) && !strstr(out, checkout),
			      "pool %d: mountinfo names %s: %.3000s", pool, checkout, out);
		resp_free(&r);
		if (pool)
			server_stop_pool(&s, pool_idle_children(1, true));
		else
			server_stop(&s);
	}
}
END_TEST

/* A pooled server (warm interpreters, 2 per kind, full) whose refill waits
 * at most defer_ms for a run (MOAT_TEST_REFILL_DEFER_MS); args: more
 * arguments, or NULL. */
static void refill_server(struct server *s, int mode, long defer_ms, const char *const *args)
{
	char var[64];
	snprintf(var, sizeof var, "MOAT_TEST_REFILL_DEFER_MS=%ld", defer_ms);
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", var, NULL };
	struct server_opts o = { .socket = true, .pool = 2, .env = env, .zygote = -1, .args = args };
	server_start(s, mode, &o);
	pool_wait_all(s, 2);
}

/* A JavaScript request that prints "held" after ms (its own timeout 60 s),
 * started into c. */
static void held_start(struct server *s, long ms, struct call *c)
{
	char body[192];
	snprintf(body, sizeof body,
		 "{\"language\":\"javascript\",\"code\":\"setTimeout(() => console.log('held'), "
		 "%ld)\",\"timeout\":60000}",
		 ms);
	struct req q = { .path = "/v1/run", .body = body };
	call_start(s, &q, c);
}

/* Waits until the refill has waited for a run n times in all (since t0). */
static void refill_wait_deferred(struct server *s, double n, long t0)
{
	while (pool_metric(s, "moat_pool_refill_deferred_total", NULL) < n) {
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(10000),
			      "the refill never waited for the run");
		sleep_ms(10);
	}
}

/* The answer of a held_start request: pooled, "held". */
static void held_finish(struct call *c)
{
	struct resp r;
	call_finish(c, &r);
	ck_assert_msg(r.code == 200 && pooled(&r) && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "held\n"),
		      "the long run: HTTP %d %.400s", r.code, r.body);
	resp_free(&r);
}

/* With the pool otherwise idle, a refill waits while a request runs in a
 * sandbox just handed out and its kind still has one ready (the request's
 * start then has the CPUs to itself), but not past its deadline (here
 * 1.5 s, scaled): a long run does not keep the pool short. */
START_TEST(pool_refill_waits_for_a_run)
{
	HARNESS_MODE_GUARD(_i);
	long defer = harness_scale_ms(1500);
	struct server s;
	refill_server(&s, _i, defer, NULL);
	double deferred = pool_metric(&s, "moat_pool_refill_deferred_total", NULL);
	double created = pool_metric(&s, "moat_pool_created_total", NULL);
	struct call run;
	long t0 = now_ms();
	held_start(&s, 3 * defer, &run);
	/* handed out: the refill waits (and says so) */
	refill_wait_deferred(&s, deferred + 1, t0);
	double made = pool_metric(&s, "moat_pool_created_total", NULL);
	if (now_ms() - t0 < defer / 2) /* surely before the deadline */
		ck_assert_msg(made == created, "a sandbox was made while the run had just started");
	/* the deadline: the pool is whole again while the run still runs */
	pool_wait_ready(&s, "javascript", 2);
	ck_assert_msg(pool_metric(&s, "moat_pool_in_use", NULL) == 1,
		      "the pool was refilled only after the run (%ld ms of %ld)", now_ms() - t0,
		      3 * defer);
	held_finish(&run);
	server_stop_pool(&s, pool_idle_children(2, false));
}
END_TEST

/* Under load the refill does not wait: a second request handed a sandbox
 * while the first runs, and the pool is refilled while both run, long
 * before the deadline (here 60 s) would let it. */
START_TEST(pool_refill_under_load_does_not_wait)
{
	HARNESS_MODE_GUARD(_i);
	/* more run slots than runs: not saturated (then only the zygote's
	 * children would be made) */
	static const char *const args[] = { "--max-concurrent", "4", NULL };
	struct server s;
	refill_server(&s, _i, 60000, args);
	long hold = harness_scale_ms(4000);
	struct call run[2];
	long t0 = now_ms();
	held_start(&s, hold, &run[0]);
	refill_wait_deferred(&s, 1, t0);
	held_start(&s, hold, &run[1]);
	pool_wait_ready(&s, "javascript", 2);
	ck_assert_msg(pool_metric(&s, "moat_pool_in_use", NULL) == 2,
		      "the pool was refilled only after the runs (%ld ms of %ld)", now_ms() - t0,
		      hold);
	held_finish(&run[0]);
	held_finish(&run[1]);
	ck_assert_double_eq(pool_metric(&s, "moat_pool_refill_deferred_total", NULL), 1);
	server_stop_pool(&s, pool_idle_children(2, false));
}
END_TEST

/* The zygote killed (its pid 1 is the server's child): the waiting
 * children die with it, the next request runs cold, a new zygote takes
 * over. */
START_TEST(zygote_dead)
{
	HARNESS_MODE_GUARD(_i);
	pool_dead_sandbox_in(_i, true);
}
END_TEST

/* moat serve as a pod runs it (issue 18): no writable file system at all,
 * --json-log, SIGTERM. It serves scripts and handlers (no store: a pod's
 * store is Redis), every line on stdout is one JSON object (notices and
 * access lines), nothing goes to stderr, and SIGTERM ends it with status 0
 * within --grace + 5 s. */
START_TEST(pod_readonly_json_log)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--no-kv", "--json-log", "--grace", "2", NULL };
	struct server_opts o = { .args = a, .kv = "", .readonly_root = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import os\nopen('/tmp/x', 'w').write('ok')\nprint(6*7, os.getuid())", NULL, &r);
	ck_assert_msg(r.code == 200 && r.json && !strcmp(jstr(r.json, "stdout"), "42 65534\n"),
		      "a script in a read-only pod: HTTP %d %.500s", r.code, r.body);
	resp_free(&r);
	long took;
	int st = server_term(&s, harness_scale_ms(2000 + 5000), &took);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM (-1: not within %ld ms)", st,
		      harness_scale_ms(7000));
	char *err = server_log(&s);
	char *out = slurp(s.outf, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_msg(!*err, "stderr with --json-log: %.1000s", err);
	int lines = 0, access = 0, listening = 0, stopped = 0;
	for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		cJSON *j = cJSON_Parse(l);
		ck_assert_msg(cJSON_IsObject(j), "not one JSON object per line: %s", l);
		ck_assert_msg(jstr(j, "ts"), "no ts: %s", l);
		lines++;
		if (jstr(j, "route")) {
			access += !strcmp(jstr(j, "route"), "py"); /* not the readiness polls */
		} else {
			const char *lv = jstr(j, "level"), *c = jstr(j, "component"), *m = jstr(j, "msg");
			ck_assert_msg(lv && c && m, "a notice without level, component or msg: %s", l);
			listening += !strcmp(c, "serve") && !strncmp(m, "listening on ", 13);
			stopped += !strcmp(c, "serve") && !strcmp(m, "stopped");
		}
		cJSON_Delete(j);
	}
	ck_assert_msg(access == 1 && listening == 1 && stopped == 1,
		      "%d lines: %d access, %d listening, %d stopped", lines, access, listening, stopped);
	free(out);
	free(err);
	server_cleanup(&s);
}
END_TEST

/* Each body through a server without a pool: the cold results a warm
 * sandbox's are compared with. */
static void cold_results(int mode, const char *const *bodies, int n, struct resp *cold)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 0 };
	server_start(&s, mode, &o);
	for (int k = 0; k < n; k++) {
		v1(&s, bodies[k], &cold[k]);
		ck_assert_msg(!pooled(&cold[k]), "%.300s", cold[k].body);
	}
	server_stop(&s);
}

/* The hand-over frame carries bytes exactly (netstrings): code, files in
 * subdirectories, empty and separator-laden values, non-ASCII text, stdin
 * that looks like a frame -- a warm python and a warm node see what a cold
 * run sees. */
START_TEST(pool_frame_exact)
{
	HARNESS_MODE_GUARD(_i);
	static const char *const bodies[] = {
		"{\"code\":\"import os, sys\\nprint(repr(open('d/e/f.txt').read()), "
		"repr(open('g').read()), repr(os.environ['E']), repr(os.environ['F']), "
		"repr(sys.stdin.read()), 'ünï:,', sorted(m for m in ('json', 'base64', 're') "
		"if m in sys.modules))\",\"files\":{\"d/e/f.txt\":\"1:a,2:bc,\",\"g\":\"\"},"
		"\"env\":{\"E\":\"\",\"F\":\"a=b,c:3:\\u00e9\"},\"stdin\":\"MOATPOOL2 4\\n1:x,\"}",
		"{\"language\":\"javascript\",\"code\":\"const fs = require('fs');\\n"
		"console.log(JSON.stringify([fs.readFileSync('d/e/f.txt', 'utf8'), "
		"fs.readFileSync('g', 'utf8'), process.env.E, process.env.F, fs.readFileSync(0, "
		"'utf8'), 'ünï:,']))\",\"files\":{\"d/e/f.txt\":\"1:a,2:bc,\",\"g\":\"\"},"
		"\"env\":{\"E\":\"\",\"F\":\"a=b,c:3:\\u00e9\"},\"stdin\":\"MOATPOOL2 4\\n1:x,\"}",
	};
	enum { N = sizeof bodies / sizeof bodies[0] };
	struct resp cold[N];
	cold_results(_i, bodies, N, cold);
	for (int k = 0; k < N; k++)
		ck_assert_msg(jnum(cold[k].json, "exitCode") == 0, "%.500s", cold[k].body);
	/* python in a warm interpreter, then in a child of the zygote (the
	 * default), which reads the same frame */
	for (int zygote = 0; zygote < 2; zygote++) {
		struct server s;
		struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 0 : -1 };
		server_start(&s, _i, &o);
		if (zygote)
			pool_wait_zygote(&s);
		for (int k = 0; k < N; k++) {
			pool_wait_ready(&s, k ? "javascript" : "python", 1);
			struct resp r;
			v1(&s, bodies[k], &r);
			ck_assert_msg(pooled(&r) &&
					      !strcmp(jstr(r.json, "stdout"), jstr(cold[k].json, "stdout")) &&
					      !strcmp(jstr(r.json, "stderr"), jstr(cold[k].json, "stderr")),
				      "%d warm%s:\n%.800s\ncold:\n%.800s", k, zygote ? " (zygote)" : "",
				      r.body, cold[k].body);
			resp_free(&r);
		}
		if (zygote)
			ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) >= 1);
		server_stop_pool(&s, pool_idle_children(1, zygote));
	}
	ck_assert_str_eq(jstr(cold[0].json, "stdout"),
			 "'1:a,2:bc,' '' '' 'a=b,c:3:é' 'MOATPOOL2 4\\n1:x,' ünï:, []\n");
	for (int k = 0; k < N; k++)
		resp_free(&cold[k]);
}
END_TEST

/* What a program sees of its tree: each mount point's top mount (type,
 * read-only or not, flags, what of its filesystem it shows, the
 * filesystem's options), the working directory, what the writable and
 * shared directories hold, its /proc; then, on a line of its own, how many
 * mounts are stacked under the fresh ones (TREE_UNDER) and their device
 * numbers, top first; what umount2 of each of those returns. */
#define PY_TREE                                                                                 \
	"import os\n"                                                                           \
	"top, stack = {}, {}\n"                                                                 \
	"for line in open('/proc/self/mountinfo'):\n"                                           \
	"    f = line.split()\n"                                                                \
	"    i = f.index('-')\n"                                                                \
	"    o = f[5].split(',')\n"                                                             \
	"    top[f[4]] = (f[i + 1], o[0], sorted(x for x in o if x in ('nosuid', 'nodev', "      \
	"'noexec')), f[3], f[i + 3])\n"                                                          \
	"    stack.setdefault(f[4], []).insert(0, f[2])\n"                                      \
	"for mp, v in sorted(top.items()):\n"                                                   \
	"    print(mp, *v)\n"                                                                   \
	"print(os.getcwd(), os.stat('.') == os.stat('/sandbox'), os.statvfs('/').f_flag & 1)\n" \
	"for d in ('/', '/sandbox', '/tmp', '/dev', '/dev/pts', '/dev/shm', '/etc'):\n"         \
	"    print(d, sorted(os.listdir(d)))\n"                                                 \
	"print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.readlink('/dev/ptmx'))\n" \
	"fresh = ('/dev/pts', '/dev/shm', '/proc', '/tmp', '/sandbox')\n"                       \
	"import ctypes\n"                                                                      \
	"libc = ctypes.CDLL(None, use_errno=True)\n"                                           \
	"print('umount', [(libc.umount2(m.encode(), 2), ctypes.get_errno()) for m in fresh])\n" \
	"print('TREE_UNDER', sum(len(stack[m]) - 1 for m in fresh), *(','.join(stack[m]) for m in fresh))\n"

/* A child of the zygote keeps the zygote's read-only tree and mounts anew
 * only what a run writes to and /proc: what its program sees is what a
 * cold run's sees, mount for mount and directory for directory; each of
 * those five is a new filesystem over the zygote's, another in each child
 * (the device numbers), and the working directory is the new /sandbox;
 * none of them can be unmounted to uncover the zygote's. */
START_TEST(zygote_child_tree_is_a_cold_runs)
{
	HARNESS_MODE_GUARD(_i);
	char *q = harness_json_quote(PY_TREE), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s}", q), 0);
	const char *bodies[] = { body };
	struct resp cold;
	cold_results(_i, bodies, 1, &cold);
	ck_assert_msg(jnum(cold.json, "exitCode") == 0, "%.800s", cold.body);
	const char *cold_out = jstr(cold.json, "stdout");
	const char *cold_under = strstr(cold_out, "TREE_UNDER ");
	ck_assert_ptr_nonnull(cold_under);
	ck_assert_msg(!strncmp(cold_under, "TREE_UNDER 0 ", 13), "a cold run: %s", cold_under);
	/* nothing can uncover what is under a fresh mount (EPERM) */
	ck_assert_msg(strstr(cold_out, "umount [(-1, 1), (-1, 1), (-1, 1), (-1, 1), (-1, 1)]\n"),
		      "%s", cold_out);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = 1 };
	server_start(&s, _i, &o);
	pool_wait_zygote(&s);
	char *under[2] = { NULL, NULL };
	for (int k = 0; k < 2; k++) {
		pool_wait_ready(&s, "python", 1);
		struct resp r;
		v1(&s, body, &r);
		const char *out = jstr(r.json, "stdout");
		const char *u = strstr(out, "TREE_UNDER ");
		ck_assert_msg(pooled(&r) && u, "%.800s", r.body);
		ck_assert_msg((size_t)(u - out) == (size_t)(cold_under - cold_out) &&
				      !strncmp(out, cold_out, (size_t)(u - out)),
			      "a child of the zygote sees another tree:\n%s\ncold:\n%s", out, cold_out);
		/* five fresh mounts, each over the zygote's one */
		int n = -1;
		char devs[5][64];
		ck_assert_msg(sscanf(u, "TREE_UNDER %d %63s %63s %63s %63s %63s", &n, devs[0], devs[1],
				     devs[2], devs[3], devs[4]) == 6 && n == 5,
			      "not on the zygote's tree: %s", u);
		for (int m = 0; m < 5; m++) {
			char *comma = strchr(devs[m], ',');
			ck_assert_msg(comma && strcmp(comma + 1, devs[m]) && !strchr(comma + 1, ','),
				      "mount %d: %s", m, devs[m]);
			*comma = '\0';
		}
		ck_assert_int_ge(asprintf(&under[k], "%s %s %s %s %s", devs[0], devs[1], devs[2],
					  devs[3], devs[4]), 0);
		resp_free(&r);
	}
	/* another filesystem in each child, at each of the five */
	char a[5][64], b[5][64];
	ck_assert_int_eq(sscanf(under[0], "%63s %63s %63s %63s %63s", a[0], a[1], a[2], a[3], a[4]), 5);
	ck_assert_int_eq(sscanf(under[1], "%63s %63s %63s %63s %63s", b[0], b[1], b[2], b[3], b[4]), 5);
	for (int m = 0; m < 5; m++)
		ck_assert_msg(strcmp(a[m], b[m]), "two children share %s at fresh mount %d", a[m], m);
	free(under[0]);
	free(under[1]);
	server_stop_pool(&s, pool_idle_children(1, true));
	resp_free(&cold);
	free(body);
	free(q);
}
END_TEST

/* How many descendants of pid (to depth: pid 1, the program, its
 * children) have the command name comm; the last one found in *last. */
static int proc_descendants_named(pid_t pid, const char *comm, int depth, pid_t *last)
{
	pid_t kids[64];
	int n = proc_children(pid, kids, 64), found = 0;
	for (int i = 0; i < n; i++) {
		char f[64];
		snprintf(f, sizeof f, "/proc/%ld/comm", (long)kids[i]);
		char *c = slurp(f, NULL);
		if (c && !strcmp(c, comm)) {
			found++;
			if (last)
				*last = kids[i];
		}
		free(c);
		if (depth > 1)
			found += proc_descendants_named(kids[i], comm, depth - 1, last);
	}
	return found;
}

/* The value of /proc/PID/status's "Key:" line, or "" (a static buffer). */
static const char *proc_status_field(pid_t pid, const char *key)
{
	static char val[128];
	char f[64];
	snprintf(f, sizeof f, "/proc/%ld/status", (long)pid);
	char *st = slurp(f, NULL);
	val[0] = '\0';
	size_t k = strlen(key);
	for (char *l = st; l && *l;) {
		char *nl = strchr(l, '\n');
		if (!strncmp(l, key, k) && l[k] == ':') {
			const char *v = l + k + 1;
			v += strspn(v, " \t");
			snprintf(val, sizeof val, "%.*s", (int)(nl ? nl - v : (long)strlen(v)), v);
			break;
		}
		l = nl ? nl + 1 : NULL;
	}
	free(st);
	return val;
}

/* A child of the zygote made ahead is started ahead too: before any
 * request, its pid 2 exists, locked down (uid 65534, no capabilities,
 * no_new_privs, seccomp) and waiting in read(0) for the request's frame;
 * the request then only hands it that frame. Its wall clock starts at
 * delivery: the bootstrap's timer (the service's default timeout, 1 s
 * here) long expired while it waited, and a request under that timeout
 * is not cut short. */
START_TEST(zygote_child_waits_locked_down)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = 1,
				 .config = "{\"serve\":{\"defaults\":{\"timeout\":1000}}}" };
	server_start(&s, _i, &o);
	pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	/* the server's child is the zygote's pid 1; the zygote under it */
	pid_t zyg = 0;
	ck_assert_int_eq(proc_descendants_named(s.p.pid, "python3\n", 2, &zyg), 1);
	pid_t pid1[8], pid2[8];
	int n1 = 0;
	long t0 = now_ms();
	/* the refill sends the start right after the child is made */
	for (;;) {
		n1 = proc_children(zyg, pid1, 8);
		if (n1 == 1 && proc_children(pid1[0], pid2, 8) == 1)
			break;
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(10000),
			      "%s: the zygote's child made ahead has no pid 2 (%d children)",
			      MODE_NAME[_i], n1);
		sleep_ms(20);
	}
	/* ... and it is waiting for its frame: read(0, ...) */
#if defined(__x86_64__)
	const long nr_read = 0;
#elif defined(__aarch64__)
	const long nr_read = 63;
#else
	const long nr_read = -1;
#endif
	char f[64];
	snprintf(f, sizeof f, "/proc/%ld/syscall", (long)pid2[0]);
	char *sc = NULL;
	long nr = -2;
	unsigned long fd = 99;
	/* (another architecture: its number is not known here, nothing to wait for) */
	for (t0 = now_ms(); nr_read >= 0 && now_ms() - t0 < harness_scale_ms(10000); sleep_ms(20)) {
		free(sc);
		sc = slurp(f, NULL);
		ck_assert_msg(sc, "%s: cannot read %s", MODE_NAME[_i], f);
		if (sscanf(sc, "%ld 0x%lx", &nr, &fd) == 2 && nr == nr_read && fd == 0)
			break;
	}
	if (nr_read >= 0)
		ck_assert_msg(nr == nr_read && fd == 0,
			      "%s: pid 2 made ahead is not in read(0): %s", MODE_NAME[_i], sc);
	free(sc);
	/* 65534 as the host sees it too: mapped to 65534 as root, to the
	 * service's own uid (65534) rootless */
	ck_assert_str_eq(proc_status_field(pid2[0], "Uid"), "65534\t65534\t65534\t65534");
	ck_assert_str_eq(proc_status_field(pid2[0], "CapEff"), "0000000000000000");
	ck_assert_str_eq(proc_status_field(pid2[0], "CapPrm"), "0000000000000000");
	ck_assert_str_eq(proc_status_field(pid2[0], "CapBnd"), "0000000000000000");
	ck_assert_str_eq(proc_status_field(pid2[0], "NoNewPrivs"), "1");
	ck_assert_str_eq(proc_status_field(pid2[0], "Seccomp"), "2");
	/* longer than the bootstrap's 1 s timeout, then a 0.6 s request */
	sleep_ms(1500);
	struct resp r;
	v1(&s, "{\"code\":\"import os, time\\ntime.sleep(0.6)\\nprint('slept', os.getpid())\"}", &r);
	ck_assert_msg(pooled(&r) && !cJSON_IsTrue(jget(r.json, "timedOut")) &&
			      !strcmp(jstr(r.json, "stdout"), "slept 2\n"),
		      "%s: %.500s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* the one it was made ahead for is gone with its request */
	ck_assert_msg(kill(pid2[0], 0) < 0 && errno == ESRCH, "%s: pid 2 %ld outlived its request",
		      MODE_NAME[_i], (long)pid2[0]);
	server_stop_pool(&s, pool_idle_children(1, true));
}
END_TEST

/* The version of the host's esbuild (the sandbox root here), or NULL. */
static char *host_esbuild_version(void)
{
	FILE *f = popen("PATH=/usr/local/bin:/usr/bin:/bin esbuild --version 2>/dev/null", "r");
	if (!f)
		return NULL;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, f);
	pclose(f);
	if (n <= 0) {
		free(line);
		return NULL;
	}
	line[strcspn(line, "\n")] = '\0';
	return line;
}

/* TypeScript through a warm node (issue 15): the typescript kind's esbuild,
 * started before the request and fed the code on its stdin, gives what a
 * cold run's gives -- output, ESM semantics (top-level await,
 * import.meta), a syntax error's message and status, a thrown error's
 * trace, imports of the request's files under its tsconfig.json, stdin --
 * with "pool": true, and leaves no process behind (the program sees pids 1
 * and 2 only, as in a cold run). A variable Go reads at esbuild's start
 * sends the request cold. A TS handler goes the same way. */
#define TS_BODY "{\"language\":\"typescript\","
/* A warm node runs a program naming a Spin SDK package as a cold run does:
 * @spinframework/spin-kv resolves (and, without kvEnabled, says why it
 * cannot open), and a package moat does not offer fails at import with one
 * sentence (runtime/js/pool.cjs installs kv-hooks.mjs, the hook a cold run
 * gets from NODE_OPTIONS). */
START_TEST(pool_spin_sdk_imports)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = -1 };
	server_start(&s, _i, &o);
	pool_wait_ready(&s, "javascript", 1);
	const char *code =
		"import * as kv from \"@spinframework/spin-kv\";\n"
		"let a; try { kv.openDefault(); } catch (e) { a = e.kind; }\n"
		"const m = await import(\"@spinframework/spin-llm\").then(() => \"loaded\", (e) => e.message);\n"
		"console.log(a, m);\n";
	char *q = harness_json_quote(code), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"javascript\",\"code\":%s}", q), 0);
	struct resp r;
	v1(&s, body, &r);
	ck_assert_msg(pooled(&r), "not run warm: %.500s", r.body);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "",
			      "access_denied moat does not offer @spinframework/spin-llm: a program "
			      "run by moat cannot use it\n"),
		      "%.800s", r.body);
	resp_free(&r);
	free(body);
	free(q);
	server_stop_pool(&s, pool_idle_children(1, false));
}
END_TEST

START_TEST(pool_typescript)
{
	HARNESS_MODE_GUARD(_i);
	if (pool_kinds() != 3) {
		fprintf(stderr, "note: %s: no esbuild on this host; not run\n", __func__);
		return;
	}
	static const char *const bodies[] = {
		TS_BODY "\"code\":\"const x: number = await Promise.resolve(42);\\nconsole.log(x, "
		"import.meta.url, process.argv.length)\"}",
		TS_BODY "\"code\":\"const x: number = ;\"}",
		TS_BODY "\"code\":\"throw new Error('boom')\"}",
		TS_BODY "\"code\":\"import { y } from './lib';\\nimport { readdirSync, readFileSync } from "
		"'node:fs';\\nconst pids = readdirSync('/proc').filter((p) => /^\\\\d+$/.test(p));\\n"
		"console.log(y, pids.join(','), readFileSync(0, 'utf8'))\",\"stdin\":\"ts-in\","
		"\"files\":{\"lib.ts\":\"export const y: string = `${3 as number}`;\","
		"\"tsconfig.json\":\"{\\\"compilerOptions\\\":{\\\"target\\\":\\\"es2017\\\"}}\"}}",
		TS_BODY "\"code\":\"import { z } from './nope';\\nconsole.log(z)\"}",
		/* the service words these hints for esbuild's JS API; the warm
		 * node gives them the command line's words, as a cold run has */
		TS_BODY "\"code\":\"import { J } from './j.js';\\nconsole.log(J)\","
		"\"files\":{\"j.js\":\"export const J = <div/>;\"}}",
		TS_BODY "\"code\":\"import { a } from '#x';\\nconsole.log(a)\",\"files\":{"
		"\"package.json\":\"{\\\"imports\\\":{\\\"#x\\\":{\\\"custom\\\":\\\"./a.js\\\"}}}\","
		"\"a.js\":\"export const a = 1\"}}",
		/* a code excerpt with a hint's JS API words in it is the file's */
		TS_BODY "\"code\":\"const a: number = ; // You can use \\\"loader: { '.js': 'jsx' }\\\" "
		"to do that.\"}",
		/* the command line's message limit, 6 */
		TS_BODY "\"code\":\"import './a1';\\nimport './a2';\\nimport './a3';\\nimport './a4';\\n"
		"import './a5';\\nimport './a6';\\nimport './a7';\\nimport './a8';\"}",
	};
	/* what the last five show in a cold run's words */
	static const char *const said[] = { NULL, NULL, NULL, NULL, NULL,
					    "You can use \"--loader:.js=jsx\" to do that.",
					    "You can use \"--conditions=custom\" to do that:",
					    "You can use \"loader: { '.js': 'jsx' }\" to do...",
					    "6 of 8 errors shown (disable the message limit with --log-limit=0)" };
	enum { N = sizeof bodies / sizeof bodies[0] };
	struct resp cold[N];
	cold_results(_i, bodies, N, cold);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = -1 };
	server_start(&s, _i, &o);
	/* the warm typescript sandbox's esbuild waits for the code: one, in
	 * the typescript kind only */
	pool_wait_all(&s, 1);
	long t0 = now_ms();
	while (proc_descendants_named(s.p.pid, "esbuild\n", 4, NULL) < 1 &&
	       now_ms() - t0 < harness_scale_ms(10000))
		sleep_ms(20);
	pid_t esb = -1;
	ck_assert_int_eq(proc_descendants_named(s.p.pid, "esbuild\n", 4, &esb), 1);
	/* the esbuild pool.cjs speaks the service with waits as the service
	 * (its hints reworded below); any other as a cold run's */
	char *cmd = proc_cmdline(esb), *ver = host_esbuild_version();
	const char *args = cmd && strchr(cmd, ' ') ? strchr(cmd, ' ') + 1 : "";
	if (ver && !strcmp(ver, "0.17.0"))
		ck_assert_msg(!strcmp(args, "--service=0.17.0"), "esbuild waits as [%s]", cmd);
	else
		ck_assert_msg(!strncmp(args, "--loader=ts ", 12), "esbuild %s waits as [%s]", ver, cmd);
	free(cmd);
	free(ver);
	for (int k = 0; k < N; k++) {
		pool_wait_ready(&s, "typescript", 1);
		struct resp r;
		v1(&s, bodies[k], &r);
		ck_assert_msg(pooled(&r), "typescript %d was not pooled: %.300s", k, r.body);
		ck_assert_msg(!strcmp(jstr(r.json, "stdout"), jstr(cold[k].json, "stdout")) &&
			      !strcmp(jstr(r.json, "stderr"), jstr(cold[k].json, "stderr")) &&
			      jnum(r.json, "exitCode") == jnum(cold[k].json, "exitCode"),
			      "typescript %d warm:\n%.800s\ncold:\n%.800s", k, r.body, cold[k].body);
		if (k == 0)
			ck_assert_str_eq(jstr(r.json, "stdout"), "42 file:///sandbox/.moat-main.mjs 2\n");
		else if (k == 3)
			ck_assert_str_eq(jstr(r.json, "stdout"), "3 1,2 ts-in\n");
		else
			ck_assert(jnum(r.json, "exitCode") == 1);
		if (said[k])
			ck_assert_msg(strstr(jstr(r.json, "stderr"), said[k]), "typescript %d: no '%s' in %.800s",
				      k, said[k], jstr(r.json, "stderr"));
		resp_free(&r);
		resp_free(&cold[k]);
	}
	/* an esbuild that died while it waited: the warm node runs one as a
	 * cold run's pid 2 does */
	pool_wait_ready(&s, "typescript", 1);
	esb = -1;
	t0 = now_ms();
	while (proc_descendants_named(s.p.pid, "esbuild\n", 4, &esb) < 1 &&
	       now_ms() - t0 < harness_scale_ms(10000))
		sleep_ms(20);
	ck_assert_int_gt(esb, 0);
	ck_assert_int_eq(kill(esb, SIGKILL), 0);
	sleep_ms(100);
	struct resp d;
	v1(&s, "{\"language\":\"typescript\",\"code\":\"console.log(7 as number)\"}", &d);
	ck_assert_msg(pooled(&d) && jnum(d.json, "exitCode") == 0 &&
			      !strcmp(jstr(d.json, "stdout"), "7\n") && !*jstr(d.json, "stderr"),
		      "after its esbuild was killed: %.500s", d.body);
	resp_free(&d);
	/* GOMAXPROCS would reach a cold run's esbuild, not a warm one's */
	pool_wait_ready(&s, "typescript", 1);
	struct resp g;
	v1(&s, "{\"language\":\"typescript\",\"code\":\"console.log(1 as number)\","
	       "\"env\":{\"GOMAXPROCS\":\"1\"}}", &g);
	ck_assert_msg(!pooled(&g) && !strcmp(jstr(g.json, "stdout"), "1\n"), "%.300s", g.body);
	resp_free(&g);
	/* javascript keeps its own warm nodes */
	pool_wait_ready(&s, "javascript", 1);
	v1(&s, "{\"language\":\"javascript\",\"code\":\"console.log(require('fs').readdirSync("
	       "'/proc').filter((p) => /^\\\\d+$/.test(p)).join(','))\"}", &g);
	ck_assert_msg(pooled(&g) && !strcmp(jstr(g.json, "stdout"), "1,2\n"), "%.300s", g.body);
	resp_free(&g);
	pool_wait_ready(&s, "typescript", 1);
	double used = pool_metric(&s, "moat_pool_used_total", NULL);
	struct resp h;
	char *env = envelope("export default {\n  async fetch(r: Request): Promise<Response> {\n"
			     "    return new Response('ts ' + (await r.text()));\n  }\n}\n",
			     ",\"input\":{\"method\":\"POST\",\"body\":\"hi\"}");
	post(&s, "/ts/h", env, &h);
	ck_assert_msg(h.code == 200 && !strcmp(h.body, "ts hi"), "handler: HTTP %d [%.300s]", h.code,
		      h.body);
	ck_assert(pool_metric(&s, "moat_pool_used_total", NULL) == used + 1);
	resp_free(&h);
	free(env);
	server_stop_pool(&s, pool_kinds());
}
END_TEST

/* ---- memory the service holds (SERVE.md "Limits", SECURITY.md 69, 70) -------------- */

/* A handler whose response is 15 MiB, yielded 1 MiB at a time. */
#define BIG_HANDLER_MIB 15
static const char big_handler[] =
	"def handle_request(request):\n"
	"    def gen():\n"
	"        for i in range(15):\n"
	"            yield b'x' * (1024 * 1024)\n"
	"    return (200, {'content-type': 'text/plain'}, gen())\n";

static long vm_rss_kib(pid_t pid)
{
	return atol(proc_status_field(pid, "VmRSS"));
}

/* Connects and sends a POST of body to path; the answer is never read. */
static int raw_post(const struct server *s, const char *path, const char *body)
{
	int fd = raw_connect(s);
	char head[256];
	snprintf(head, sizeof head,
		 "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n", path, strlen(body));
	ck_assert(raw_send(fd, head, strlen(head)));
	ck_assert(raw_send(fd, body, strlen(body)));
	return fd;
}

/* Clients that never read a large handler response: the server reads
 * the handler's stdout only while less than a small window waits for the
 * client, so its memory stays bounded; each run, blocked on its full
 * pipe, is ended by its own timeout and frees its slot; other requests
 * are served meanwhile; a client that reads gets the whole response. */
START_TEST(handler_slow_clients)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "6", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS,
				 .config = "{\"serve\":{\"defaults\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	char *env = envelope(big_handler, NULL);
	struct resp r;
	post(&s, "/py/big", env, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 &&
		      r.body_len == (size_t)BIG_HANDLER_MIB * 1024 * 1024,
		      "a reading client: HTTP %d curl %d, %zu bytes (want %d MiB): %s", r.code,
		      r.curl_rc, r.body_len, BIG_HANDLER_MIB, r.err);
	resp_free(&r);

	long base = vm_rss_kib(s.p.pid);
	ck_assert_msg(base > 0, "no VmRSS for the server (pid %ld)", (long)s.p.pid);
	enum { N = 4 };
	int fd[N];
	long t0 = now_ms();
	for (int i = 0; i < N; i++)
		fd[i] = raw_post(&s, "/py/big", env);
	free(env);
	/* meanwhile, a script runs */
	run_py(&s, "print('meanwhile')", NULL, &r);
	expect_script("a script beside the stalled handlers", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "meanwhile\n"), "%.300s", r.body);
	resp_free(&r);
	/* the handlers' runs end by their 3 s timeout: the slots come back
	 * while their clients still have not read a byte */
	long peak = base, freed = -1, limit = harness_scale_ms(3000 + 2000 + 10000);
	while (now_ms() - t0 < limit) {
		long rss = vm_rss_kib(s.p.pid);
		if (rss > peak)
			peak = rss;
		char *m = get_metrics(&s, NULL);
		int found = 0;
		double inflight = metric_sum(m, "moat_serve_in_flight", NULL, &found);
		free(m);
		if (found && inflight == 0 && now_ms() - t0 >= 2500) {
			freed = now_ms() - t0;
			break;
		}
		sleep_ms(100);
	}
	ck_assert_msg(freed >= 0, "%d stalled handler runs still held their slots %ld ms after they "
		      "started (timeout 3 s)", N, limit);
	long rss = vm_rss_kib(s.p.pid);
	if (rss > peak)
		peak = rss;
	/* old: each held its whole response twice (30 MiB); now a window each */
	ck_assert_msg(peak - base < 48 * 1024,
		      "%d non-reading clients of a %d MiB handler response took the server from "
		      "%ld KiB to %ld KiB RSS", N, BIG_HANDLER_MIB, base, peak);
	for (int i = 0; i < N; i++)
		close(fd[i]);
	/* each run was ended by its timeout */
	long t1 = now_ms();
	int timeouts = 0;
	while (now_ms() - t1 < harness_scale_ms(10000)) {
		cJSON *lines = access_lines(&s);
		timeouts = 0;
		const cJSON *l;
		cJSON_ArrayForEach(l, lines)
		{
			const char *p = jstr(l, "path"), *oc = jstr(l, "outcome");
			if (p && !strcmp(p, "/py/{path}") && oc && !strcmp(oc, "timeout"))
				timeouts++;
		}
		cJSON_Delete(lines);
		if (timeouts >= N)
			break;
		sleep_ms(100);
	}
	ck_assert_msg(timeouts == N, "%d of %d stalled handler runs were logged as timed out",
		      timeouts, N);
	server_stop(&s);
}
END_TEST

/* Reads 16 KiB every 100 ms (never idle for --client-timeout, slower than
 * the answer needs) until the server has given up on the
 * request to path (its access log line is written: the answer is over,
 * whatever the sockets' buffers still hold) or ms pass: how long that
 * took, or -1. */
static long trickle_read(const struct server *s, int fd, const char *path, long ms)
{
	long t0 = now_ms();
	char buf[16384];
	while (now_ms() - t0 < ms) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 100) > 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) == 0)
			return now_ms() - t0;
		cJSON *lines = access_lines(s);
		bool done = access_find(lines, "path", path) != NULL;
		cJSON_Delete(lines);
		if (done)
			return now_ms() - t0;
		sleep_ms(100);
	}
	return -1;
}

/* A client that reads a little now and then cannot hold its answer (and
 * the memory behind it) for ever: a buffered answer must be out within
 * --client-timeout, a handler's within its timeout and then
 * --client-timeout. */
START_TEST(response_write_deadline)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--client-timeout", "3", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT,
				 .config = "{\"serve\":{\"defaults\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	/* 4 MiB of stdout: 26 s at 160 KB/s */
	int fd = raw_post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"import sys\\n"
				       "sys.stdout.write('x' * (4 << 20))\",\"maxOutputBytes\":4194304}");
	long took = trickle_read(&s, fd, "/v1/run", harness_scale_ms(3000 + 10000));
	close(fd);
	ck_assert_msg(took >= 0, "a /v1/run answer read 16 KiB every 100 ms was still being sent "
		      "after %ld ms (--client-timeout 3)", harness_scale_ms(13000));
	char *env = envelope(big_handler, NULL);
	fd = raw_post(&s, "/py/big", env);
	free(env);
	took = trickle_read(&s, fd, "/py/{path}", harness_scale_ms(3000 + 3000 + 10000));
	close(fd);
	ck_assert_msg(took >= 0, "a handler response read 16 KiB every 100 ms was still being "
		      "sent after %ld ms (timeout 3 s, --client-timeout 3)",
		      harness_scale_ms(16000));
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* serve.max.maxOutputBytes: a request may not ask more (403); what it does
 * not ask for is capped there; a result's JSON, control bytes escaped
 * six-fold, stays within the cap per stream. */
START_TEST(max_output_bytes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	/* the default maximum: 4 MiB */
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":4194305}",
	     &r);
	expect_error("maxOutputBytes above the default maximum", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":1073741824}",
	     &r);
	expect_error("maxOutputBytes 1 GiB", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	/* 64 MiB of \x01 asked at the maximum: the answer is about 4 MiB, not 24 */
	v1(&s, "{\"language\":\"python\",\"code\":\"import sys\\n"
	       "sys.stdout.buffer.write(b'\\\\x01' * (64 << 20))\",\"maxOutputBytes\":4194304}", &r);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(r.body_len <= 4194304 + 65536,
		      "a control-byte flood made a %zu-byte answer (cap 4 MiB a stream)", r.body_len);
	ck_assert_msg(out && strlen(out) == 4194304 / 6 && out[0] == '\x01',
		      "stdout: %zu bytes (want %d, each escaped in six)", out ? strlen(out) : 0,
		      4194304 / 6);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	resp_free(&r);
	/* a Spin script's 256 KiB cap counts escaped bytes too */
	run_py(&s, "import sys\nsys.stdout.write('\\x01' * 300000)\n", NULL, &r);
	expect_script("a script's control-byte flood", &r);
	out = jstr(r.json, "stdout");
	ck_assert_msg(r.body_len <= SCRIPT_CAP + 65536, "a script's flood made a %zu-byte answer",
		      r.body_len);
	ck_assert_msg(out && strlen(out) == SCRIPT_CAP / 6, "script stdout: %zu bytes (want %d)",
		      out ? strlen(out) : 0, SCRIPT_CAP / 6);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	resp_free(&r);
	server_stop(&s);

	/* an operator's lower maximum */
	o.config = "{\"serve\":{\"max\":{\"maxOutputBytes\":65536}}}";
	server_start(&s, _i, &o);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":65537}",
	     &r);
	expect_error("maxOutputBytes above serve.max", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	v1(&s, "{\"language\":\"python\",\"code\":\"print('y' * 100000)\"}", &r);
	out = jstr(r.json, "stdout");
	ck_assert_msg(out && strlen(out) == 65536 && cJSON_IsTrue(jget(r.json, "stdoutTruncated")),
		      "unasked, the output is capped at serve.max.maxOutputBytes: %zu bytes",
		      out ? strlen(out) : 0);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Results in flight reserve their worst case from a global budget (a
 * 128 MiB cap: the whole of it): a request that does not fit beside the
 * others is answered 503 with Retry-After and counted; the budget comes
 * back with the answer. */
START_TEST(result_budget)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT,
				 .config = "{\"serve\":{\"max\":{\"maxOutputBytes\":134217728}}}" };
	server_start(&s, _i, &o);
	static const char big[] = "{\"language\":\"python\",\"code\":\"import time\\ntime.sleep(2)\\n"
				  "print('slept')\",\"maxOutputBytes\":134217728}";
	struct req q = { .path = "/v1/run", .body = big };
	struct call c;
	call_start(&s, &q, &c);
	long t0 = now_ms();
	for (;;) {
		char *m = get_metrics(&s, NULL);
		int found = 0;
		double held = metric_sum(m, "moat_serve_result_bytes", NULL, &found);
		free(m);
		if (found && held > 0)
			break;
		ck_assert_msg(now_ms() - t0 < harness_scale_ms(10000),
			      "the first request never reserved its result (moat_serve_result_bytes)");
		sleep_ms(20);
	}
	struct resp r;
	post(&s, "/v1/run", big, &r);
	expect_error("a second 128 MiB result beside the first", &r, 503, "ServerBusy");
	char h[64];
	ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h) && !strcmp(h, "1"),
		      "a 503 of the result budget without Retry-After: 1: %s", r.head);
	resp_free(&r);
	call_finish(&c, &r);
	ck_assert_msg(r.code == 200 && r.json && !strcmp(jstr(r.json, "stdout"), "slept\n"),
		      "the first: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double rej = metric_sum(m, "moat_serve_result_budget_rejected_total", NULL, &found);
	ck_assert_msg(found && rej == 1, "result_budget_rejected_total %g (want 1):\n%.3000s", rej, m);
	free(m);
	/* the first answer is sent: its reservation is back */
	v1(&s, big, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "slept\n"), "%.300s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: protocol correctness and a log that never blocks (issue 31) -------------- */

/* Reads from fd into *buf (at *len, grown) until want(buf, len) or ms pass
 * or the peer closes; true when want said so. */
static bool raw_read_until(int fd, char **buf, size_t *len, size_t *cap, long ms,
			   bool (*want)(const char *buf, size_t len))
{
	long t0 = now_ms();
	while (!want(*buf, *len)) {
		long left = ms - (now_ms() - t0);
		if (left <= 0)
			return false;
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, (int)(left > 100 ? 100 : left)) <= 0)
			continue;
		if (*len + 4097 > *cap) {
			*cap = *cap * 2 + 8192;
			*buf = realloc(*buf, *cap);
			ck_assert_ptr_nonnull(*buf);
		}
		ssize_t got = recv(fd, *buf + *len, 4096, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return want(*buf, *len);
		*len += (size_t)got;
		(*buf)[*len] = '\0';
	}
	return true;
}

static bool has_head(const char *buf, size_t len)
{
	return len && memmem(buf, len, "\r\n\r\n", 4);
}

static bool never(const char *buf, size_t len)
{
	(void)buf;
	(void)len;
	return false;
}

/* The value of header name in the head at h (up to its blank line), or -1. */
static long head_number(const char *h, const char *name)
{
	const char *end = strstr(h, "\r\n\r\n");
	size_t nl = strlen(name);
	for (const char *l = strstr(h, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, name, nl) && l[2 + nl] == ':')
			return strtol(l + 3 + nl, NULL, 10);
	return -1;
}

static bool head_has(const char *h, const char *name)
{
	const char *end = strstr(h, "\r\n\r\n");
	size_t nl = strlen(name);
	for (const char *l = strstr(h, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, name, nl) && l[2 + nl] == ':')
			return true;
	return false;
}

/* "POST path" with a JSON body, raw; close: ask the server to close after. */
static char *raw_post_text(const struct server *s, const char *path, const char *body, bool close)
{
	char *q = NULL;
	ck_assert_int_ge(asprintf(&q, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
				  "Content-Length: %zu\r\n%s\r\n%s",
				  path, strlen(body), close ? "Connection: close\r\n" : "", body),
			 0);
	(void)s;
	return q;
}

/* A handler that answers 304, 204 or 205 (with a body it must not send),
 * then an ordinary request on the same keep-alive connection: the first
 * response ends at its head (205: Content-Length 0), no framing or body
 * follows it, and the second response starts right after and parses
 * cleanly. Before, 304 got "Transfer-Encoding: chunked" and a "0\r\n\r\n"
 * the client reads as the start of the next response, and 205 its body. A
 * 1xx from a handler is refused (500, the error names the range). */
START_TEST(handler_bodyless_status)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	static const int statuses[] = { 304, 204, 205 };
	for (size_t k = 0; k < sizeof statuses / sizeof statuses[0]; k++) {
		int st = statuses[k];
		char code[400];
		snprintf(code, sizeof code,
			 "from spin_sdk.http import Response\n"
			 "def handle_request(request):\n"
			 "    return Response(%d, {'etag': '\"v1\"', 'x-h': 'k'}, b'BODY-NOT-ALLOWED')\n",
			 st);
		char *env = envelope(code, NULL);
		char *q1 = raw_post_text(&s, "/py/h", env, false);
		char *env2 = envelope("print(6*7)", NULL);
		char *q2 = raw_post_text(&s, "/py/run", env2, true);
		int fd = raw_connect(&s);
		size_t len = 0, cap = 8192;
		char *buf = malloc(cap);
		ck_assert_ptr_nonnull(buf);
		buf[0] = '\0';
		ck_assert(raw_send(fd, q1, strlen(q1)));
		ck_assert_msg(raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(60000), has_head),
			      "%d: no response head: [%.600s]", st, buf);
		/* whatever else comes for the first request (there must be nothing) */
		raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(500), never);
		ck_assert(raw_send(fd, q2, strlen(q2)));
		raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(60000), never);
		close(fd);
		ck_assert_msg(raw_status(buf) == st, "%d: the first response: [%.600s]", st, buf);
		ck_assert_msg(head_has(buf, "x-h"),
			      "%d: the handler's header is not passed on: [%.600s]", st, buf);
		ck_assert_msg(!head_has(buf, "Transfer-Encoding"),
			      "%d: a body-less response with Transfer-Encoding: [%.600s]", st, buf);
		long cl = head_number(buf, "Content-Length");
		ck_assert_msg(cl <= 0, "%d: Content-Length %ld on a body-less response: [%.600s]", st,
			      cl, buf);
		if (st == 204)
			ck_assert_msg(cl < 0, "204 with a Content-Length: [%.600s]", buf);
		const char *second = strstr(buf, "\r\n\r\n") + 4;
		ck_assert_msg(!strstr(buf, "BODY-NOT-ALLOWED"), "%d: the handler's body was sent: [%.900s]",
			      st, buf);
		ck_assert_msg(raw_status(second) == 200,
			      "%d: the next response on the connection does not start right after "
			      "the first one's head (a client or proxy reads garbage): [%.900s]",
			      st, buf);
		const char *body2 = strstr(second, "\r\n\r\n");
		long cl2 = head_number(second, "Content-Length");
		ck_assert_msg(body2 && cl2 > 0 && (long)strlen(body2 + 4) == cl2,
			      "%d: the second response does not parse (Content-Length %ld): [%.900s]",
			      st, cl2, second);
		cJSON *j = cJSON_Parse(body2 + 4);
		ck_assert_msg(j && jstr(j, "stdout") && !strcmp(jstr(j, "stdout"), "42\n"),
			      "%d: the second response's script result: [%.600s]", st, body2 + 4);
		cJSON_Delete(j);
		free(buf);
		free(q1);
		free(q2);
		free(env);
		free(env2);
	}
	/* the bodies dropped are counted */
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double dropped = metric_sum(m, "moat_serve_handler_bodies_dropped_total", NULL, &found);
	ck_assert_msg(found == 1 && dropped == 3, "handler bodies dropped: %g (want 3):\n%.2000s",
		      dropped, m);
	free(m);
	/* 1xx is never a handler's final answer */
	struct resp r;
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(103, {'link': '</a>'}, b'')\n",
	       NULL, &r);
	ck_assert_msg(r.code == 500 && jstr(r.json, "error") && strstr(jstr(r.json, "error"), "200..599"),
		      "a handler's 103: HTTP %d %.600s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* DELETE /v1/kv/victim%00x once cleared "victim": the decoded path was cut
 * at the NUL. A request target that decodes to a NUL is refused (400) on
 * every route, and victim's store is left alone. */
START_TEST(kv_path_nul)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/visit", PY_VISIT, "victim", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 1"), "victim's visit: HTTP %d [%.300s]",
		      r.code, r.body);
	resp_free(&r);
	static const char *const paths[] = { "/v1/kv/victim%00x", "/v1/kv/victim%00",
					     "/v1/kv/vic%00tim" };
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		struct req q = { .method = "DELETE", .path = paths[i] };
		call(&s, &q, &r);
		expect_error(paths[i], &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	/* the other routes: a NUL in the path or the query is refused too */
	static const char *const more[][2] = {
		{ "GET", "/healthz%00" }, { "GET", "/metrics?x=%00" }, { "POST", "/py/run%00" },
		{ "POST", "/v1/run?a=%00b" },
	};
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
		struct req q = { .method = more[i][0], .path = more[i][1],
				 .body = !strcmp(more[i][0], "POST") ? "{}" : NULL };
		call(&s, &q, &r);
		expect_error(more[i][1], &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	run_kv(&s, "/py/visit", PY_VISIT, "victim", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 2"),
		      "victim's store after the DELETEs with a NUL: HTTP %d [%.300s] (want visit 2)",
		      r.code, r.body);
	resp_free(&r);
	/* an escaped id that is not a NUL still names its sandbox */
	struct req q = { .method = "DELETE", .path = "/v1/kv/vic%74im" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "sandboxId") &&
			      !strcmp(jstr(r.json, "sandboxId"), "victim") && jnum(r.json, "removed") == 1,
		      "DELETE /v1/kv/vic%%74im: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Every route of the router (enum serve_route: py, ts, v1_run, healthz,
 * metrics, kv, other), each with tenant material in its path, a header and
 * the body, successful and refused: the access log's path is the route's
 * template and no line holds the material. Before, DELETE /v1/kv/<id> put
 * the sandboxId in the log. */
START_TEST(access_log_every_route)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true };
	server_start(&s, _i, &o);
	const char *auth = "Bearer " TOKEN;
	const char *idh[] = { "-H", "X-Sandbox-Id: TENANT_HDR_MARK", NULL };
	struct {
		const char *method, *path, *body, *auth;
		const char *const *extra;
		int status;
	} reqs[] = {
		{ "POST", "/py/TENANT_PY_MARK",
		  "{\"code\":\"print(1)\",\"sandboxId\":\"TENANT_HDR_MARK\"}", auth, idh, 200 },
		{ "POST", "/ts/TENANT_TS_MARK",
		  "{\"code\":\"export default { async fetch(r) { return new Response('x') } }\","
		  "\"sandboxId\":\"TENANT_TS_ID_MARK\"}", auth, NULL, 200 },
		{ "POST", "/v1/run", "{\"language\":\"python\",\"code\":\"print(2)\","
				      "\"sandboxId\":\"TENANT_V1_MARK\"}", auth, NULL, 200 },
		{ "DELETE", "/v1/kv/TENANT_KV_MARK", NULL, auth, NULL, 200 },
		{ "DELETE", "/v1/kv/TENANT_KV_BAD_MARK", NULL, auth, idh, 400 },
		{ "DELETE", "/v1/kv/TENANT_KV_NUL_MARK%00x", NULL, auth, NULL, 400 },
		{ "DELETE", "/v1/kv/TENANT_KV_401_MARK", NULL, "Bearer WRONG", NULL, 401 },
		{ "POST", "/v1/kv/TENANT_KV_405_MARK", "{}", auth, NULL, 405 },
		{ "GET", "/healthz", NULL, NULL, idh, 200 },
		{ "GET", "/metrics", NULL, auth, idh, 200 },
		{ "GET", "/TENANT_OTHER_MARK", NULL, NULL, NULL, 404 },
		{ "TENANT_METHOD", "/healthz", NULL, NULL, NULL, 405 },
	};
	struct resp r;
	char wrong[2048] = ""; /* statuses are checked after the log */
	for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
		struct req q = { .method = reqs[i].method, .path = reqs[i].path, .body = reqs[i].body,
				 .auth = reqs[i].auth, .extra = reqs[i].extra };
		call(&s, &q, &r);
		if (r.code != reqs[i].status)
			snprintf(wrong + strlen(wrong), sizeof wrong - strlen(wrong),
				 "%s %s: HTTP %d (want %d) %.200s\n", reqs[i].method, reqs[i].path,
				 r.code, reqs[i].status, r.body);
		resp_free(&r);
	}
	char kids[4096];
	ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
	ck_assert_int_eq(server_term(&s, harness_scale_ms(15000), NULL), 0);
	char *log = server_log(&s);
	ck_assert_msg(!strstr(log, "TENANT_"), "the log holds a tenant's material:\n%.3000s", log);
	cJSON *lines = access_lines(&s);
	static const char *const known_routes[][2] = {
		{ "py", "/py/{path}" },     { "ts", "/ts/{path}" },   { "v1_run", "/v1/run" },
		{ "kv", "/v1/kv/{id}" },   { "healthz", "/healthz" }, { "metrics", "/metrics" },
		{ "other", "/{unknown}" },
	};
	const cJSON *l;
	cJSON_ArrayForEach(l, lines)
	{
		const char *route = jstr(l, "route"), *path = jstr(l, "path");
		size_t k = 0;
		while (k < sizeof known_routes / sizeof known_routes[0] && strcmp(known_routes[k][0], route))
			k++;
		ck_assert_msg(k < sizeof known_routes / sizeof known_routes[0],
			      "a route this test does not know (add it above): %s", route);
		ck_assert_msg(!strcmp(path, known_routes[k][1]), "route %s logged with path %s (want %s)",
			      route, path, known_routes[k][1]);
	}
	for (size_t k = 0; k < sizeof known_routes / sizeof known_routes[0]; k++)
		ck_assert_msg(access_find(lines, "route", known_routes[k][0]),
			      "no access line of route %s:\n%.3000s", known_routes[k][0], log);
	int kv = 0;
	cJSON_ArrayForEach(l, lines) kv += !strcmp(jstr(l, "route"), "kv");
	ck_assert_msg(kv == 5, "%d access lines of route kv (want 5):\n%.3000s", kv, log);
	ck_assert_msg(!wrong[0], "%s", wrong);
	cJSON_Delete(lines);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* One raw GET, Connection: close; true when a complete answer came within
 * ms (into *status). */
static bool raw_get(const struct server *s, const char *path, long ms, int *status, char **body)
{
	int fd = raw_connect(s);
	char q[256];
	snprintf(q, sizeof q, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	bool ok = raw_send(fd, q, strlen(q));
	bool closed = false;
	char *resp = ok ? raw_read(fd, ms, &closed, NULL) : NULL;
	close(fd);
	ok = ok && closed;
	*status = ok ? raw_status(resp) : 0;
	if (body)
		*body = resp;
	else
		free(resp);
	return ok;
}

/* Reads what the pipe has for up to ms; appends to *all (NULL: dropped);
 * stops early when *all holds stop_at. */
static void pipe_drain(int fd, char **all, size_t *len, long ms, const char *stop_at)
{
	long t0 = now_ms();
	char buf[65536];
	while (now_ms() - t0 < ms) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 50) <= 0)
			continue;
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		if (all) {
			*all = realloc(*all, *len + (size_t)n + 1);
			ck_assert_ptr_nonnull(*all);
			memcpy(*all + *len, buf, (size_t)n);
			*len += (size_t)n;
			(*all)[*len] = '\0';
			if (stop_at && strstr(*all, stop_at))
				break;
		}
	}
}

/* The server's log (stderr; with --json-log stdout) is a pipe nobody reads:
 * once it is full, requests, runs and /healthz still answer within a
 * deadline, the lines that do not fit are dropped and counted in /metrics,
 * and once the reader is back the lines flow again (the first says how
 * many were lost). Before, every request thread blocked in the log's
 * write and the whole service stopped answering. */
static void log_stall_in(int mode, bool json)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	/* the smallest pipe: full after ~20 lines */
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	const char *jargs[] = { "--json-log", NULL };
	struct server s;
	struct server_opts o = { .socket = mode == MODE_ROOTLESS, .args = json ? jargs : NULL,
				 .log_pipe = &p[1] };
	server_spawn(&s, mode, &o);
	close(p[1]);
	/* ready: the pipe is read until the server listens */
	char *seen = NULL;
	size_t seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "listening on ");
	ck_assert_msg(seen && strstr(seen, "listening on "), "%s%s: no listening line: %.1000s",
		      MODE_NAME[mode], json ? " json" : "", seen ? seen : "");
	server_wait_ready(&s);
	/* nobody reads from here on: past the pipe (4 KiB) and the service's
	 * queue (1 MiB, ~6000 lines of /healthz), lines are dropped */
	long each = harness_scale_ms(5000);
	double dropped = 0;
	int n = 0, st = 0;
	for (; n < 20000 && dropped == 0; n++) {
		ck_assert_msg(raw_get(&s, "/healthz", each, &st, NULL) && st == 200,
			      "%s%s: /healthz did not answer within %ld ms while the log's reader "
			      "stalls (request %d, HTTP %d)",
			      MODE_NAME[mode], json ? " json" : "", each, n + 1, st);
		if (n % 1000 == 999) {
			char *m = NULL;
			ck_assert_msg(raw_get(&s, "/metrics", each, &st, &m) && st == 200,
				      "%s: /metrics did not answer while the log stalls", MODE_NAME[mode]);
			int found = 0;
			dropped = metric_sum(strstr(m, "\r\n\r\n"), "moat_serve_log_lines_dropped_total",
					     NULL, &found);
			ck_assert_msg(found == 1, "no moat_serve_log_lines_dropped_total: %.2000s", m);
			free(m);
		}
	}
	ck_assert_msg(dropped > 0, "%s%s: %d requests and no log line dropped", MODE_NAME[mode],
		      json ? " json" : "", n);
	/* runs too */
	struct resp r;
	run_py(&s, "print(6*7)", NULL, &r);
	expect_script("a run while the log stalls", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "42\n");
	resp_free(&r);
	/* the reader is back: the queue drains, the loss is said, new lines come */
	free(seen);
	seen = NULL;
	seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "log line(s) dropped");
	ck_assert_msg(seen && strstr(seen, "log line(s) dropped"),
		      "%s%s: no line says how many were dropped (%zu bytes read)", MODE_NAME[mode],
		      json ? " json" : "", seen_len);
	free(seen);
	seen = NULL;
	seen_len = 0;
	ck_assert(raw_get(&s, "/no-such-route", each, &st, NULL) && st == 404);
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(10000), "\"route\":\"other\"");
	ck_assert_msg(seen && strstr(seen, "\"route\":\"other\""),
		      "%s%s: a request after the reader came back was not logged: %.1000s",
		      MODE_NAME[mode], json ? " json" : "", seen ? seen : "");
	free(seen);
	/* the stop's lines go to the pipe too: read them so that it is quick */
	ck_assert_int_eq(kill(s.p.pid, SIGTERM), 0);
	seen = NULL;
	seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(15000), "stopped");
	free(seen);
	ck_assert_int_eq(server_wait_exit(&s, harness_scale_ms(15000)), 0);
	close(p[0]);
	server_cleanup(&s);
}

START_TEST(log_reader_stalls)
{
	HARNESS_MODE_GUARD(_i);
	log_stall_in(_i, false);
	log_stall_in(_i, true);
}
END_TEST

/* A reader that never comes back does not hold the stop: SIGTERM ends the
 * server with status 0 within --grace (1 s) + the log's 2 s + margin. */
START_TEST(log_reader_gone_stop)
{
	HARNESS_MODE_GUARD(_i);
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	const char *a[] = { "--grace", "1", NULL };
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS, .args = a, .log_pipe = &p[1] };
	server_spawn(&s, _i, &o);
	close(p[1]);
	char *seen = NULL;
	size_t seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "listening on ");
	free(seen);
	server_wait_ready(&s);
	int st;
	for (int n = 0; n < 200; n++)
		ck_assert(raw_get(&s, "/healthz", harness_scale_ms(5000), &st, NULL) && st == 200);
	long took;
	st = server_term(&s, harness_scale_ms(10000), &took);
	ck_assert_msg(st == 0, "%s: status %d after SIGTERM with the log's reader gone (-1: no exit "
		      "within %ld ms)", MODE_NAME[_i], st, harness_scale_ms(10000));
	close(p[0]);
	server_cleanup(&s);
}
END_TEST

/* The relay cap across runs (--max-relays 1): while one relayed connection
 * of a run holds the service's only slot (a proxy connection that has not
 * sent its head yet), a second through the proxy gets 503 and one through
 * the transparent relay a reset, each logged in the run's network log;
 * /metrics counts both and shows every slot given back after the run. Bad
 * values of the flags and of the config keys refuse to start. */
static const char PY_CAP[] =
	"import socket, time\n"
	"hold = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
	"time.sleep(0.5)\n"
	"b = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
	"d = b''\n"
	"try:\n"
	"    while True:\n"
	"        x = b.recv(4096)\n"
	"        if not x: break\n"
	"        d += x\n"
	"except OSError as e: d += ('error %s' % e).encode()\n"
	"full = b\"X-Moat-Refused: the service's relay cap is full\" in d\n"
	"print('proxy:%s:%s' % (d.split(b'\\r\\n')[0].decode('latin1'), 'full' if full else '-'))\n"
	"t = socket.socket()\n"
	"t.settimeout(10)\n"
	"try:\n"
	"    t.connect(('11.1.1.1', 443))\n"
	"    print('tcp:eof' if not t.recv(10) else 'tcp:data')\n"
	"except ConnectionResetError: print('tcp:reset')\n"
	"except OSError as e: print('tcp:error %s' % e)\n"
	"hold.close()\n";

START_TEST(relay_cap_across_runs)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	char *log;
	static const char *const bad[][3] = {
		{ "--max-relays", "0", "--max-relays wants a number from 1 to 1048576" },
		{ "--max-dns", "65537", "--max-dns wants a number from 1 to 65536" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *a[] = { bad[i][0], bad[i][1], NULL };
		struct server_opts ob = { .socket = true, .args = a };
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st == 2 && strstr(log, bad[i][2]), "%s %s: status %d (want 2): %s",
			      bad[i][0], bad[i][1], st, log);
		free(log);
		server_cleanup(&s);
	}
	struct server_opts oc = { .socket = true, .config = "{\"serve\":{\"maxDns\":0}}" };
	int st = refused_start(_i, &oc, &s, &log);
	ck_assert_msg(st != 0 && st != -1 && strstr(log, "serve.maxDns must be"),
		      "serve.maxDns 0: status %d: %s", st, log);
	free(log);
	server_cleanup(&s);

	const char *args[] = { "--max-relays", "1", NULL };
	struct server_opts o = { .socket = true, .args = args };
	server_start(&s, _i, &o);
	char *q = harness_json_quote(PY_CAP);
	char *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"python\",\"timeout\":30000,\"code\":%s,"
				  "\"allowedHosts\":[\"https://example.com\"]}", q), 0);
	free(q);
	struct resp r;
	post(&s, "/v1/run", body, &r);
	free(body);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(r.code == 200 && out, "HTTP %d %.2000s", r.code, r.body);
	ck_assert_msg(strstr(out, "proxy:HTTP/1.1 503 Service Unavailable:full\n"),
		      "the second proxy connection was not refused for the service's cap: %s / %s", out,
		      jstr(r.json, "stderr"));
	ck_assert_msg(strstr(out, "tcp:reset\n"), "the transparent connection was not reset: %s",
		      out);
	int capped_proxy = 0, capped_tcp = 0;
	const cJSON *c, *conns = jget(jget(r.json, "network"), "connections");
	cJSON_ArrayForEach(c, conns) {
		const char *why = jstr(c, "reason"), *kind = jstr(c, "kind");
		if (!why || !kind || strcmp(why, "the service's relay cap is full") ||
		    !cJSON_IsFalse(jget(c, "allowed")))
			continue;
		capped_proxy += !strcmp(kind, "proxy");
		capped_tcp += !strcmp(kind, "tcp") && jstr(c, "host") &&
			      !strcmp(jstr(c, "host"), "11.1.1.1") && jnum(c, "port") == 443;
	}
	ck_assert_msg(capped_proxy == 1 && capped_tcp == 1,
		      "%d proxy and %d tcp entries say the cap was full (want 1 and 1): %.3000s",
		      capped_proxy, capped_tcp, r.body);
	resp_free(&r);
	struct req mq = { .path = "/metrics" };
	call(&s, &mq, &r);
	ck_assert_msg(r.code == 200, "/metrics: HTTP %d", r.code);
	int found = 0;
	double v = metric_sum(r.body, "moat_serve_relay_refused_total", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 2, "refused_total{tcp} %g (%d samples), want 2:\n%.3000s", v,
		      found, r.body);
	v = metric_sum(r.body, "moat_serve_relay_refused_total", "kind=\"dns\"", &found);
	ck_assert_msg(found == 1 && v == 0, "refused_total{dns} %g, want 0", v);
	v = metric_sum(r.body, "moat_serve_relay_limit", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 1, "relay_limit{tcp} %g, want 1 (--max-relays)", v);
	v = metric_sum(r.body, "moat_serve_relay_limit", "kind=\"dns\"", &found);
	ck_assert_msg(found == 1 && v == 256, "relay_limit{dns} %g, want the default 256", v);
	/* the run is over: every slot given back (the holder too) */
	v = metric_sum(r.body, "moat_serve_relays", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 0, "relays{tcp} %g after the run, want 0", v);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

Suite *serve_suite(void)
{
	Suite *s = suite_create("serve");
	TCase *tc = tcase_create("serve");
	tcase_set_timeout(tc, 180);
	/* MOAT_SERVE_TESTS=name,name...: only those (for working on one) */
	const char *only = getenv("MOAT_SERVE_TESTS");
#define ADD(t)                                                                        \
	do {                                                                          \
		if (!only || !*only || selected(only, #t))                           \
			tcase_add_loop_test(tc, t, MODE_ROOT, MODE_ROOTLESS + 1);    \
	} while (0)
	ADD(seed_examples);
	ADD(scripts);
	ADD(python_handler);
	ADD(python_streaming);
	ADD(handler_fails_before_head);
	ADD(ts_handler);
	ADD(payload_too_large);
	ADD(bad_envelopes);
	ADD(allowed_hosts);
	ADD(output_truncation);
	ADD(operator_timeout);
	ADD(operator_memory);
	ADD(v1_run);
	ADD(v1_open_network_allowed);
	ADD(routes);
	ADD(auth_token);
	ADD(token_file_rules);
	ADD(metrics);
	ADD(relay_cap_across_runs);
	ADD(access_log);
	ADD(concurrency_queue);
	ADD(client_disconnect);
	ADD(sigterm_drains);
	ADD(sigterm_grace_kills);
	ADD(queue_is_first_come_first_served);
	ADD(slowloris);
	ADD(handler_late_failures);
	ADD(sigint_stops);
	ADD(kv_store);
	ADD(kv_off);
	ADD(kv_survives_kill);
	ADD(kv_redis_two_nodes);
	ADD(sandbox_id_header);
	ADD(pool_single_use);
	ADD(pool_limits_and_fallback);
	ADD(pool_under_load);
	ADD(pool_killed);
	ADD(pool_dead_sandbox);
	ADD(pool_refill_waits_for_a_run);
	ADD(pool_refill_under_load_does_not_wait);
	ADD(zygote_single_use);
	ADD(zygote_is_the_default);
	ADD(zygote_that_cannot_make_sandboxes);
	ADD(zygote_is_replaced_past_its_age);
	ADD(zygote_is_replaced_after_its_children);
	ADD(mountinfo_names_no_runtime_path);
	ADD(zygote_limits_and_fallback);
	ADD(zygote_under_load);
	ADD(zygote_killed);
	ADD(zygote_dead);
	ADD(pool_typescript);
	ADD(pool_spin_sdk_imports);
	ADD(pool_frame_exact);
	ADD(zygote_child_tree_is_a_cold_runs);
	ADD(zygote_child_waits_locked_down);
	ADD(ipv6_listener);
	ADD(malformed_http);
	ADD(connection_limit);
	ADD(socket_listener);
	ADD(default_listener);
	ADD(socket_group);
	ADD(tcp_needs_token);
	ADD(no_auth);
	ADD(metrics_listener);
	ADD(spin_rootfs_handlers);
	ADD(pod_readonly_json_log);
	ADD(handler_slow_clients);
	ADD(response_write_deadline);
	ADD(max_output_bytes);
	ADD(result_budget);
	ADD(handler_bodyless_status);
	ADD(kv_path_nul);
	ADD(access_log_every_route);
	ADD(log_reader_stalls);
	ADD(log_reader_gone_stop);
#undef ADD
	suite_add_tcase(s, tc);
	return s;
}
