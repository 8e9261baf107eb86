/* Integration test harness (see harness.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define HARNESS_TIMEOUT_MS 120000
/* the uid rootless runs drop to */
#define ROOTLESS_UID 65534

static char moat_copy[4096];

bool harness_is_root(void)
{
	return geteuid() == 0;
}

double harness_slowdown(void)
{
	const char *s = getenv("MOAT_TEST_SLOWDOWN");
	if (!s || !*s)
		return 1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !(v >= 1) || v > 1000)
		return 1;
	return v;
}

long harness_scale_ms(long ms)
{
	return (long)((double)ms * harness_slowdown());
}

long harness_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

int harness_pidfd(pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0); /* always close-on-exec */
	ck_assert_msg(fd >= 0, "pidfd_open %ld: %s", (long)pid, strerror(errno));
	return fd;
}

bool harness_pidfd_exists(int pidfd)
{
	/* signal 0: the permission and existence checks, nothing sent; ESRCH
	 * once the process is reaped (a zombie still counts, as kill(pid, 0)) */
	if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0)
		return true;
	ck_assert_msg(errno == ESRCH, "pidfd_send_signal: %s", strerror(errno));
	return false;
}

/* As root, in a network namespace of the test's own: loopback up, nothing
 * else. 0, or -1 after saying why. */
int harness_private_netns(void)
{
	if (unshare(CLONE_NEWNET) < 0) {
		perror("test: unshare(CLONE_NEWNET)");
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
		perror("test: bring lo up");
	if (fd >= 0)
		close(fd);
	return rc;
}

/* A test that checks a TCP port is closed, or starts a server on a port it
 * found free earlier, moves into a network namespace of its own first: in
 * the host's, another program (a parallel test run) can take the port in
 * between, and "open" or EADDRINUSE then says nothing of moat (issue 49:
 * a port compared across processes that need not hold it together). Where
 * the namespace cannot be made, the test goes on in the host's, saying so. */
void harness_private_ports(void)
{
	if (harness_private_netns() < 0)
		fprintf(stderr, "note: no network namespace of the test's own; its ports are the "
			"host's, where another program may take them\n");
}

void harness_sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
}

const char *harness_cgroup_parent(int mode)
{
	const char *v = getenv(mode == MODE_ROOT ? "MOAT_TEST_ROOT_CGROUP" : "MOAT_TEST_ROOTLESS_CGROUP");
	if (!v || v[0] != '/' || !harness_is_root())
		return NULL;
	return v;
}

/* In the forked child, still root: moves it into a new leaf
 * parent/h-<pid> owned by ROOTLESS_UID, so that moat, once it runs as that
 * uid, may move its sandbox into leaves of parent (cgroup v2 migration needs
 * write access to the common ancestor's cgroup.procs). Async-signal-safe
 * enough for a child of a single-threaded process. 0, or -1 after perror. */
static int child_enter_leaf(const char *parent)
{
	char leaf[4096], file[4200], pid[24];
	snprintf(leaf, sizeof leaf, "%s/h-%ld", parent, (long)getpid());
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
		perror("harness: mkdir rootless cgroup leaf");
		return -1;
	}
	static const char *const own[] = { "", "/cgroup.procs", "/cgroup.subtree_control",
					   "/cgroup.threads" };
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
		snprintf(file, sizeof file, "%s%s", leaf, own[i]);
		if (chown(file, ROOTLESS_UID, ROOTLESS_UID) < 0) {
			perror("harness: chown rootless cgroup leaf");
			return -1;
		}
	}
	snprintf(file, sizeof file, "%s/cgroup.procs", leaf);
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, pid, strlen(pid)) != (ssize_t)strlen(pid)) {
		perror("harness: join rootless cgroup leaf");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* After the run: removes the child's leaf; its processes may take a moment
 * to leave it. */
static void remove_leaf(const char *parent, pid_t pid)
{
	char leaf[4096];
	snprintf(leaf, sizeof leaf, "%s/h-%ld", parent, (long)pid);
	/* 2 s, scaled: the child's last processes may still be exiting */
	for (long i = 0; i < harness_scale_ms(2000) / 10; i++) {
		if (rmdir(leaf) == 0 || errno == ENOENT)
			return;
		if (errno != EBUSY)
			break;
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	ck_abort_msg("cannot remove the harness's cgroup %s: %s", leaf, strerror(errno));
}

int harness_worker_enter(int mode)
{
	const char *cg = harness_cgroup_parent(mode);
	if ((cg ? setenv("MOAT_CGROUP_PARENT", cg, 1) : unsetenv("MOAT_CGROUP_PARENT")) < 0 ||
	    setenv("HOME", "/nonexistent", 1) < 0 || unsetenv("XDG_CACHE_HOME") < 0)
		return -1;
	if (mode == MODE_ROOTLESS && cg && child_enter_leaf(cg) < 0)
		return -1;
	if (mode == MODE_ROOTLESS && geteuid() == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID) < 0 ||
		    setresuid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID) < 0) {
			perror("harness: drop to 65534");
			return -1;
		}
		/* a uid change clears dumpability: a supervisor writes its
		 * child's id maps under /proc/<pid>, which needs it */
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) {
			perror("harness: PR_SET_DUMPABLE");
			return -1;
		}
	}
	return 0;
}

void harness_worker_leave(int mode, pid_t worker)
{
	const char *cg = harness_cgroup_parent(mode);
	if (mode == MODE_ROOTLESS && cg)
		remove_leaf(cg, worker);
}

/* Runs in main() before any test, so it reports with stdio, not Check. */
#define SETUP_CHECK(cond, ...)                                          \
	do {                                                            \
		if (!(cond)) {                                          \
			fprintf(stderr, "harness: " __VA_ARGS__);       \
			fputc('\n', stderr);                            \
			exit(2);                                        \
		}                                                       \
	} while (0)

/* Copies src to dst (made with flags, mode 0755), for uid 65534 to execute
 * or read. NULL, or what failed (with errno set). */
static const char *copy_file(const char *src, const char *dst, int flags)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return "open";
	int out = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0755);
	const char *what = out < 0 ? "create" : NULL;
	char buf[65536];
	ssize_t n = 0;
	while (!what && (n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)n) != n)
			what = "write";
	if (!what && n < 0)
		what = "read";
	if (!what && fchmod(out, 0755) < 0)
		what = "fchmod";
	int e = errno;
	close(in);
	if (out >= 0 && close(out) < 0 && !what) {
		what = "close";
		e = errno;
	}
	errno = e;
	return what;
}

const char *harness_moat(void)
{
	if (moat_copy[0])
		return moat_copy;
	const char *bin = getenv("MOAT_BIN");
	SETUP_CHECK(bin && *bin, "MOAT_BIN is not set");
	char dir[] = "/tmp/moat-test-XXXXXX";
	SETUP_CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	SETUP_CHECK(chmod(dir, 0755) == 0, "chmod %s: %s", dir, strerror(errno));
	snprintf(moat_copy, sizeof moat_copy, "%s/moat", dir);
	const char *failed = copy_file(bin, moat_copy, O_EXCL);
	SETUP_CHECK(!failed, "copy %s to %s: %s: %s", bin, moat_copy, failed, strerror(errno));
	return moat_copy;
}

const char *harness_beside_moat(const char *name)
{
	static char path[PATH_MAX];
	const char *copy = harness_moat();
	const char *bin = getenv("MOAT_BIN");
	const char *slash = strrchr(copy, '/'), *bslash = strrchr(bin, '/');
	ck_assert_ptr_nonnull(slash);
	snprintf(path, sizeof path, "%.*s/%s", (int)(slash - copy), copy, name);
	if (access(path, R_OK) == 0)
		return path;
	char src[PATH_MAX];
	if (bslash)
		snprintf(src, sizeof src, "%.*s/%s", (int)(bslash - bin), bin, name);
	else
		snprintf(src, sizeof src, "%s", name);
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
	const char *failed = copy_file(src, tmp, O_TRUNC);
	ck_assert_msg(!failed, "copy %s (built beside $MOAT_BIN?) to %s: %s: %s", src, tmp, failed,
		      strerror(errno));
	ck_assert_msg(rename(tmp, path) == 0, "rename %s: %s", tmp, strerror(errno));
	return path;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
	char *nb = realloc(*buf, *len + n + 1);
	ck_assert_ptr_nonnull(nb);
	memcpy(nb + *len, data, n);
	*len += n;
	nb[*len] = '\0';
	*buf = nb;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Writes what the pipe takes now of the rest of p's stdin; closes it when
 * all is written or moat stopped reading (a moat that exits without reading
 * stdin gives EPIPE, not a SIGPIPE that would kill the test). */
static void feed_stdin(struct harness_proc *p)
{
	struct sigaction ign = { .sa_handler = SIG_IGN }, old;
	sigaction(SIGPIPE, &ign, &old);
	while (p->in >= 0) {
		ssize_t n = 0;
		if (p->in_off < p->in_len) {
			n = write(p->in, p->in_data + p->in_off, p->in_len - p->in_off);
			if (n > 0) {
				p->in_off += (size_t)n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
		}
		close(p->in);
		p->in = -1;
	}
	sigaction(SIGPIPE, &old, NULL);
}

void harness_start(int mode, const char *const *args, const char *stdin_data, size_t stdin_len,
		   const char *const *env, harness_prep_fn prep, void *arg, struct harness_proc *p)
{
	memset(p, 0, sizeof *p);
	const char *moat = harness_moat();
	int in_p[2], out_p[2], err_p[2];
	ck_assert_int_eq(pipe2(in_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err_p, O_CLOEXEC), 0);
	size_t argc = 0;
	while (args[argc])
		argc++;
	char **argv = calloc(argc + 2, sizeof *argv);
	ck_assert_ptr_nonnull(argv);
	argv[0] = (char *)"moat";
	for (size_t i = 0; i < argc; i++)
		argv[i + 1] = (char *)args[i];
	const char *cg_parent = env ? NULL : harness_cgroup_parent(mode);
	char *cg_env = NULL;
	if (cg_parent)
		ck_assert_int_ge(asprintf(&cg_env, "MOAT_CGROUP_PARENT=%s", cg_parent), 0);
	char *harness_env[] = { (char *)"PATH=/usr/bin:/bin",
				(char *)HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE,
				(char *)"HOME=/nonexistent", cg_env, NULL };
	char *const *envp = env ? (char *const *)env : harness_env;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in_p[0], 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		if (mode == MODE_ROOTLESS && cg_parent && child_enter_leaf(cg_parent) < 0)
			_exit(97);
		if (prep && prep(mode, arg) < 0)
			_exit(97);
		if (mode == MODE_ROOTLESS && geteuid() == 0) {
			if (setgroups(0, NULL) < 0 ||
			    setresgid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID) < 0 ||
			    setresuid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID) < 0) {
				perror("harness: drop to 65534");
				_exit(99);
			}
		}
		execve(moat, argv, envp);
		perror("harness: execve moat");
		_exit(98);
	}
	free(argv);
	free(cg_env);
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	p->pid = pid;
	p->out = out_p[0];
	p->err = err_p[0];
	p->in = in_p[1];
	p->in_data = stdin_data;
	p->in_len = stdin_data ? stdin_len : 0;
	p->leaf_parent = mode == MODE_ROOTLESS ? cg_parent : NULL;
	fcntl(p->in, F_SETFL, O_NONBLOCK);
	feed_stdin(p);
}

void harness_finish(struct harness_proc *p, struct run_out *out)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	const long watchdog_ms = harness_scale_ms(HARNESS_TIMEOUT_MS);
	int *fds[2] = { &p->out, &p->err };
	char buf[65536];
	while (p->out >= 0 || p->err >= 0) {
		struct pollfd pf[3] = { { p->out, POLLIN, 0 }, { p->err, POLLIN, 0 },
					{ p->in, POLLOUT, 0 } };
		int r = poll(pf, 3, 1000);
		if (elapsed_ms(&t0) > watchdog_ms) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, NULL, 0);
			if (p->leaf_parent)
				remove_leaf(p->leaf_parent, p->pid);
			ck_abort_msg("moat did not finish within %ld ms; stdout so far: %s", watchdog_ms,
				     out->out ? out->out : "");
		}
		if (r <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			int *fd = fds[i];
			if (*fd >= 0 && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
				ssize_t n = read(*fd, buf, sizeof buf);
				if (n > 0)
					append(i == 0 ? &out->out : &out->err,
					       i == 0 ? &out->out_len : &out->err_len, buf, (size_t)n);
				else if (n == 0 || errno != EINTR) {
					close(*fd);
					*fd = -1;
				}
			}
		}
		if (p->in >= 0 && (pf[2].revents & (POLLOUT | POLLERR | POLLHUP)))
			feed_stdin(p);
	}
	if (p->in >= 0) {
		close(p->in);
		p->in = -1;
	}
	int st;
	ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
	if (p->leaf_parent)
		remove_leaf(p->leaf_parent, p->pid);
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (!out->out)
		append(&out->out, &out->out_len, "", 0);
	if (!out->err)
		append(&out->err, &out->err_len, "", 0);
	out->json = cJSON_ParseWithLength(out->out, out->out_len);
}

long harness_tcp_mem_pages(void)
{
	FILE *f = fopen("/proc/net/sockstat", "re");
	if (!f)
		return -1;
	char line[256];
	long pages = -1;
	while (fgets(line, sizeof line, f)) {
		const char *m = strncmp(line, "TCP:", 4) ? NULL : strstr(line, " mem ");
		if (m)
			pages = strtol(m + 5, NULL, 10);
	}
	fclose(f);
	return pages;
}

long harness_tcp_mem_peak(struct harness_proc *p)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long peak = harness_tcp_mem_pages();
	while (elapsed_ms(&t0) < harness_scale_ms(HARNESS_TIMEOUT_MS)) {
		struct pollfd pf[2] = { { p->out, POLLIN, 0 }, { p->in, POLLOUT, 0 } };
		int r = poll(pf, 2, 20);
		long now = harness_tcp_mem_pages();
		if (now > peak)
			peak = now;
		if (r > 0 && p->in >= 0 && (pf[1].revents & (POLLOUT | POLLERR | POLLHUP)))
			feed_stdin(p);
		if (r > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
			break;
	}
	return peak;
}

void harness_run(int mode, const char *const *args, const char *stdin_data, size_t stdin_len,
		 struct run_out *out)
{
	memset(out, 0, sizeof *out);
	struct harness_proc p;
	harness_start(mode, args, stdin_data, stdin_len, NULL, NULL, NULL, &p);
	harness_finish(&p, out);
}

void harness_exec(int mode, const char *request_json, struct run_out *out)
{
	const char *args[] = { "exec", NULL };
	harness_run(mode, args, request_json, strlen(request_json), out);
	ck_assert_msg(out->json, "moat exec printed no JSON (status %d): stdout=%s stderr=%s",
		      out->status, out->out, out->err);
}

char *harness_json_quote(const char *s)
{
	cJSON *str = cJSON_CreateString(s);
	ck_assert_ptr_nonnull(str);
	char *q = cJSON_PrintUnformatted(str);
	cJSON_Delete(str);
	ck_assert_ptr_nonnull(q);
	return q;
}

void harness_exec_code(int mode, const char *lang, const char *code, const char *extra_json,
		       struct run_out *out)
{
	char *q = harness_json_quote(code);
	char *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"language\":\"%s\",\"code\":%s%s}", lang, q,
				  extra_json ? extra_json : ""), 0);
	harness_exec(mode, req, out);
	free(q);
	free(req);
}

void harness_free(struct run_out *out)
{
	free(out->out);
	free(out->err);
	cJSON_Delete(out->json);
	memset(out, 0, sizeof *out);
}

const char *harness_str(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double harness_num(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

bool harness_bool(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	ck_assert_msg(cJSON_IsBool(v), "result has no boolean \"%s\": %s", key, out->out);
	return cJSON_IsTrue(v);
}

bool harness_is_null(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsNull(v);
}

const char *harness_limit_of(const struct run_out *out, const char *key)
{
	const cJSON *limits = cJSON_GetObjectItemCaseSensitive(out->json, "limits");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(limits, key);
	ck_assert_msg(cJSON_IsString(v), "no limits.%s in %s", key, out->out);
	return v->valuestring;
}

int harness_warning_count(const struct run_out *out)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(out->json, "warnings");
	ck_assert_msg(cJSON_IsArray(w), "no warnings array: %s", out->out);
	return cJSON_GetArraySize(w);
}

bool harness_has_warning(const struct run_out *out, const char *needle)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(out->json, "warnings");
	const cJSON *e;
	cJSON_ArrayForEach(e, w)
		if (cJSON_IsString(e) && strstr(e->valuestring, needle))
			return true;
	return false;
}

bool harness_unified_host(void)
{
	struct statfs s;
	return statfs("/sys/fs/cgroup", &s) == 0 &&
	       (unsigned long)s.f_type == (unsigned long)CGROUP2_SUPER_MAGIC;
}

const char *harness_error_type(const struct run_out *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(out->json, "error");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
	return cJSON_IsString(t) ? t->valuestring : NULL;
}

void harness_marker(char *buf, size_t size, const char *tag, int index)
{
	unsigned long long r = 0;
	ck_assert_int_eq(getrandom(&r, sizeof r, 0), (ssize_t)sizeof r);
	ck_assert_int_lt(snprintf(buf, size, "%s%ldx%dr%016llx", tag, (long)getpid(), index, r),
			 (int)size);
}

int harness_count_marker(const char *marker)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	size_t mlen = strlen(marker);
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char path[300];
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		char buf[4096];
		ssize_t r = read(fd, buf, sizeof buf);
		close(fd);
		if (r > 0 && memmem(buf, (size_t)r, marker, mlen))
			n++;
	}
	closedir(d);
	return n;
}

const char *harness_runtime_dir(void)
{
	static char dir[PATH_MAX];
	if (dir[0])
		return dir;
	const char *bin = getenv("MOAT_BIN");
	ck_assert_msg(bin && *bin, "MOAT_BIN is not set");
	char real[PATH_MAX];
	ck_assert_msg(realpath(bin, real), "realpath %s: %s", bin, strerror(errno));
	char *slash = strrchr(real, '/');
	ck_assert_ptr_nonnull(slash);
	*slash = '\0';
	char cand[PATH_MAX + 32];
	snprintf(cand, sizeof cand, "%s/../runtime", real);
	ck_assert_msg(realpath(cand, dir), "no runtime dir at %s (the handler shims of the "
		      "checkout that built $MOAT_BIN): %s", cand, strerror(errno));
	return dir;
}

pid_t harness_redis_start(char *spec, size_t spec_size, char *dir, size_t dir_size)
{
	if (system("command -v redis-server >/dev/null 2>&1 && "
		   "command -v redis-cli >/dev/null 2>&1") != 0)
		return 0;
	snprintf(dir, dir_size, "/tmp/moat-redis-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	/* a free port: bind 127.0.0.1:0, read it, close */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	int port = ntohs(a.sin_port);
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		dup2(null, 1);
		dup2(null, 2);
		execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save",
		       "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir,
		       "--daemonize", "no", (char *)NULL);
		_exit(127);
	}
	char cmd[128];
	snprintf(cmd, sizeof cmd, "redis-cli -p %d ping 2>/dev/null | grep -q PONG", port);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (system(cmd) != 0) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ck_assert_msg((t1.tv_sec - t0.tv_sec) * 1000 < harness_scale_ms(10000),
			      "redis-server did not start");
		usleep(50000);
	}
	snprintf(spec, spec_size, "redis://127.0.0.1:%d/0", port);
	return pid;
}

void harness_redis_stop(pid_t pid, const char *dir)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	char cmd[128]; /* redis 7 keeps its append-only files in a subdirectory */
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
