/* Delegation from the user's systemd (src/cgroups/systemd.c), for real:
 * rootless moat in a cgroup it may not write, on a cgroup v2 host, with no
 * wrapper and no MOAT_CGROUP_PARENT.
 *
 *  - make check-vm (pure cgroup v2, no systemd) and make check-systemd: a
 *    run without limits never contacts the bus; a run with a limit does, and
 *    when the bus is not systemd the fallback's warning (and strictLimits's
 *    error) names the failed call.
 *  - make check-systemd (tools/vm with systemd as PID 1; MOAT_TEST_SYSTEMD=1,
 *    the tests run as uid 65534 in a logind session, session-cN.scope, not
 *    delegated, like a terminal on a laptop): memory, pids and cpu are
 *    enforced by cgroup-v2 in a scope systemd delegated, and no scope is
 *    left after the runs.
 * Elsewhere (the development host is hybrid v1/v2) they say "not run". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define MS(ms) harness_scale_ms(ms)

static bool systemd_guest(void)
{
	const char *v = getenv("MOAT_TEST_SYSTEMD");
	return v && !strcmp(v, "1");
}

/* The default environment of a rootless harness run: no bus address, no
 * XDG_RUNTIME_DIR (moat finds /run/user/<uid>/bus), no MOAT_CGROUP_PARENT. */
static const char *const PLAIN_ENV[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };

/* moat exec, rootless, with exactly env (no MOAT_CGROUP_PARENT: moat stays
 * in the cgroup the test runs in, which it may not write) */
static void exec_env(const char *req, const char *const *env, struct run_out *o)
{
	struct harness_proc p;
	memset(o, 0, sizeof *o);
	harness_start(MODE_ROOTLESS, (const char *const[]){ "exec", NULL }, req, strlen(req), env,
		      NULL, NULL, &p);
	harness_finish(&p, o);
	ck_assert_msg(o->json, "moat exec printed no JSON (status %d): %s %s", o->status, o->out,
		      o->err);
}

/* The test runs where moat, as uid 65534, finds no delegated cgroup. */
static bool not_delegated_here(void)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");
	ck_assert_ptr_nonnull(f);
	ck_assert(getline(&text, &n, f) > 0);
	fclose(f);
	char path[4200];
	text[strcspn(text, "\n")] = '\0';
	snprintf(path, sizeof path, "/sys/fs/cgroup%s/cgroup.procs", text + 3);
	struct stat st;
	bool ok = strncmp(text, "0::", 3) == 0 && stat(path, &st) == 0 && st.st_uid != 65534 &&
		  (harness_is_root() || access(path, W_OK) < 0);
	free(text);
	return ok;
}

/* ---- the path is taken only when a limit is asked for ----------------------- */

/* A listening unix socket: the "user bus" of a run (the acceptor below). */
static int fake_bus(char *dir, size_t dlen, char *addr, size_t alen)
{
	snprintf(dir, dlen, "/tmp/moat-fakebus-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/bus", dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(chmod(sa.sun_path, 0777), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	snprintf(addr, alen, "unix:path=%s", sa.sun_path);
	return fd;
}

/* The fake bus's acceptor: every connection is counted and closed at once,
 * so moat's call fails fast (a reset during authentication) instead of
 * waiting for its timeout. */
struct acceptor {
	int lfd;
	int stop_fd;           /* readable: stop */
	volatile int accepted; /* read after the thread is joined, or under the lock */
	pthread_mutex_t mu;
	pthread_t th;
};

static void *accept_loop(void *arg)
{
	struct acceptor *a = arg;
	for (;;) {
		struct pollfd pf[2] = { { a->lfd, POLLIN, 0 }, { a->stop_fd, POLLIN, 0 } };
		if (poll(pf, 2, -1) < 0)
			continue;
		if (pf[1].revents)
			return NULL;
		int c = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c >= 0) {
			close(c);
			pthread_mutex_lock(&a->mu);
			a->accepted++;
			pthread_mutex_unlock(&a->mu);
		}
	}
}

static int accepted_now(struct acceptor *a)
{
	pthread_mutex_lock(&a->mu);
	int n = a->accepted;
	a->accepted = 0;
	pthread_mutex_unlock(&a->mu);
	return n;
}

START_TEST(bus_only_when_a_limit_is_asked)
{
	if (!harness_unified_host() || !not_delegated_here()) {
		harness_skip("%s: %s", __func__,
			!harness_unified_host() ? "not a unified cgroup v2 host (make check-vm)"
					: "the test's cgroup is delegated to 65534");
		return;
	}
	char dir[64], addr[160], env_addr[200];
	int lfd = fake_bus(dir, sizeof dir, addr, sizeof addr);
	int stop[2];
	ck_assert_int_eq(pipe2(stop, O_CLOEXEC), 0);
	struct acceptor acc = { .lfd = lfd, .stop_fd = stop[0] };
	pthread_mutex_init(&acc.mu, NULL);
	ck_assert_int_eq(pthread_create(&acc.th, NULL, accept_loop, &acc), 0);
	snprintf(env_addr, sizeof env_addr, "DBUS_SESSION_BUS_ADDRESS=%s", addr);
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", env_addr, NULL };
	struct run_out none, lim, strict;
	exec_env("{\"language\":\"sh\",\"code\":\"echo ran\"}", env, &none);
	int after_none = accepted_now(&acc);
	char req[256];
	snprintf(req, sizeof req, "{\"language\":\"sh\",\"code\":\"echo ran\",\"memoryMb\":64,"
				  "\"pidsLimit\":32,\"timeout\":%ld}", MS(10000));
	exec_env(req, env, &lim);
	int after_lim = accepted_now(&acc);
	exec_env("{\"language\":\"sh\",\"code\":\"echo ran\",\"cpus\":1,\"strictLimits\":true}",
		 env, &strict);
	int after_strict = accepted_now(&acc);
	ck_assert_int_eq(write(stop[1], "x", 1), 1);
	pthread_join(acc.th, NULL);
	close(stop[0]);
	close(stop[1]);
	close(lfd);
	char sock[128];
	snprintf(sock, sizeof sock, "%s/bus", dir);
	unlink(sock);
	rmdir(dir);

	/* no limit: no bus, no warning */
	ck_assert_int_eq(after_none, 0);
	ck_assert_str_eq(harness_str(&none, "stdout"), "ran\n");
	ck_assert_str_eq(harness_limit_of(&none, "memory"), "none");
	ck_assert_int_eq(harness_warning_count(&none), 0);
	/* a limit: moat asked (one connection), and the bus was not systemd:
	 * the fallback's warnings name the call and the address */
	ck_assert_int_eq(after_lim, 1);
	ck_assert_str_eq(harness_str(&lim, "stdout"), "ran\n");
	ck_assert_str_eq(harness_limit_of(&lim, "memory"), "rlimit");
	ck_assert_str_eq(harness_limit_of(&lim, "pids"), "rlimit");
	ck_assert_msg(harness_has_warning(&lim, "moat asked the user's systemd for a delegated scope") &&
		      harness_has_warning(&lim, addr) && harness_has_warning(&lim, "RLIMIT_DATA") &&
		      harness_has_warning(&lim, "RLIMIT_NPROC"), "%s", lim.out);
	/* strictLimits refuses, with the same reason */
	ck_assert_int_eq(after_strict, 1);
	ck_assert_msg(strict.status == 3, "status %d: %s", strict.status, strict.out);
	ck_assert_str_eq(harness_error_type(&strict), "SandboxUnavailableError");
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(strict.json, "error");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
	ck_assert_msg(cJSON_IsString(m) && strstr(m->valuestring, "cpus") &&
		      strstr(m->valuestring, "moat asked the user's systemd") &&
		      strstr(m->valuestring, addr) && strstr(m->valuestring, "strictLimits"), "%s",
		      strict.out);
	harness_free(&none);
	harness_free(&lim);
	harness_free(&strict);
}
END_TEST

/* ---- a real systemd (make check-systemd) ---------------------------------------- */

static bool skip_unless_systemd(const char *fn)
{
	if (systemd_guest() && harness_unified_host())
		return false;
	harness_skip("%s: needs systemd as PID 1 and a user manager "
		"(make check-systemd)", fn);
	return true;
}


static const char HOG[] = "a = []\n"
			  "for i in range(20):\n"
			  "    a.append(bytearray(10 * 1024 * 1024))\n"
			  "    print(i, flush=True)\n"
			  "print('survived')\n";

START_TEST(delegated_memory_is_cgroup_v2)
{
	if (skip_unless_systemd(__func__))
		return;
	ck_assert_msg(not_delegated_here(), "the test itself runs in a delegated cgroup");
	char *code = harness_json_quote(HOG), req[1024];
	snprintf(req, sizeof req, "{\"language\":\"python\",\"code\":%s,\"memoryMb\":64,"
				  "\"timeout\":%ld}", code, MS(20000));
	free(code);
	struct run_out o;
	exec_env(req, PLAIN_ENV, &o);
	ck_assert_msg(o.status == 0 && !harness_error_type(&o), "%s %s", o.out, o.err);
	ck_assert_str_eq(harness_limit_of(&o, "memory"), "cgroup-v2");
	/* no fallback warning; under TCG the kernel's reclaim of file-backed
	 * pages can keep the hog grinding until moat's thrash watch kills it
	 * as out of memory, which says so (as in limits/memory_hog_is_oom_killed) */
	int thrash = harness_has_warning(&o, "thrashed at its memory limit");
	ck_assert_msg(harness_warning_count(&o) == thrash, "%s", o.out);
	ck_assert_msg(!strstr(o.out, "survived"), "the hog was not stopped: %s", o.out);
	ck_assert_msg(harness_bool(&o, "oomKilled"), "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "killedBy"), "oom");
	double peak = harness_num(&o, "memoryPeakBytes");
	ck_assert_msg(peak >= 40.0 * 1048576 && peak <= 80.0 * 1048576, "memoryPeakBytes %.0f", peak);
	harness_free(&o);
}
END_TEST

START_TEST(delegated_pids_is_cgroup_v2)
{
	if (skip_unless_systemd(__func__))
		return;
	static const char code[] = "import os, sys, time\n"
				   "for i in range(50):\n"
				   "    try:\n"
				   "        if os.fork() == 0:\n"
				   "            time.sleep(60)\n"
				   "            os._exit(0)\n"
				   "    except OSError:\n"
				   "        sys.exit(7)\n";
	char *q = harness_json_quote(code), req[1024];
	snprintf(req, sizeof req, "{\"language\":\"python\",\"code\":%s,\"pidsLimit\":10,"
				  "\"timeout\":%ld}", q, MS(30000));
	free(q);
	struct run_out o;
	exec_env(req, PLAIN_ENV, &o);
	ck_assert_msg(o.status == 0 && !harness_error_type(&o), "%s %s", o.out, o.err);
	ck_assert_str_eq(harness_limit_of(&o, "pids"), "cgroup-v2");
	ck_assert_int_eq(harness_warning_count(&o), 0);
	/* the fork failed at the limit: pids.events in the leaf says so (an
	 * rlimit leaves no such trace) */
	ck_assert_int_eq((int)harness_num(&o, "exitCode"), 7);
	ck_assert_msg(harness_str(&o, "killedBy") && !strcmp(harness_str(&o, "killedBy"), "pids"),
		      "%s", o.out);
	harness_free(&o);
}
END_TEST

START_TEST(delegated_cpu_is_cgroup_v2)
{
	if (skip_unless_systemd(__func__))
		return;
	static const char code[] = "import time\n"
				   "c = time.process_time()\n"
				   "t = time.time()\n"
				   "while time.time() - t < 2:\n"
				   "    pass\n"
				   "print(round((time.process_time() - c) * 1000))\n";
	char *q = harness_json_quote(code), req[1024];
	snprintf(req, sizeof req, "{\"language\":\"python\",\"code\":%s,\"cpus\":0.25,"
				  "\"strictLimits\":true,\"timeout\":%ld}", q, MS(20000));
	free(q);
	struct run_out o;
	exec_env(req, PLAIN_ENV, &o);
	ck_assert_msg(o.status == 0 && !harness_error_type(&o), "%s %s", o.out, o.err);
	ck_assert_str_eq(harness_limit_of(&o, "cpu"), "cgroup-v2");
	ck_assert_int_eq(harness_warning_count(&o), 0);
	double loop = -1;
	const char *so = harness_str(&o, "stdout");
	ck_assert_msg(so && sscanf(so, "%lf", &loop) == 1, "%s", o.out);
	/* 0.25 of 2 s is 500 ms; unlimited would be 2000 */
	ck_assert_msg(loop >= 250 && loop <= 1000, "CPU time in the 2 s loop %.0f ms", loop);
	harness_free(&o);
}
END_TEST

/* moat-*.scope cgroups under the user manager's app.slice */
static int moat_scopes(void)
{
	char dir[256];
	snprintf(dir, sizeof dir,
		 "/sys/fs/cgroup/user.slice/user-%ld.slice/user@%ld.service/app.slice",
		 (long)(harness_is_root() ? 65534 : getuid()),
		 (long)(harness_is_root() ? 65534 : getuid()));
	DIR *d = opendir(dir);
	ck_assert_msg(d, "%s: %s", dir, strerror(errno));
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "moat-", 5) && strstr(e->d_name, ".scope"))
			n++;
	closedir(d);
	return n;
}

/* The scope lives as long as moat: systemd removes it (and moat's leaves in
 * it) once its last process exits. All runs in parallel get a scope each. */
START_TEST(scopes_go_away_with_moat)
{
	if (skip_unless_systemd(__func__))
		return;
	struct run_out o;
	exec_env("{\"language\":\"sh\",\"code\":\"cat /proc/self/cgroup\",\"memoryMb\":64,"
		 "\"pidsLimit\":32,\"cpus\":1,\"strictLimits\":true}", PLAIN_ENV, &o);
	ck_assert_msg(o.status == 0 && !harness_error_type(&o), "%s %s", o.out, o.err);
	/* the sandbox sees its own cgroup namespace, rooted at its leaf */
	ck_assert_str_eq(harness_str(&o, "stdout"), "0::/\n");
	harness_free(&o);
	int left = -1;
	for (int i = 0; i < 100; i++) {
		if ((left = moat_scopes()) == 0)
			break;
		struct timespec ts = { 0, MS(20) * 1000000L };
		nanosleep(&ts, NULL);
	}
	ck_assert_msg(left == 0, "%d moat scope(s) left under app.slice", left);
}
END_TEST


/* /proc/<pid>/cgroup's first line (malloc'd), or NULL */
static char *proc_cgroup(pid_t pid)
{
	char f[64], *line = NULL;
	size_t n = 0;
	snprintf(f, sizeof f, "/proc/%ld/cgroup", (long)pid);
	FILE *fp = fopen(f, "re");
	if (!fp)
		return NULL;
	if (getline(&line, &n, fp) < 0) {
		free(line);
		line = NULL;
	}
	fclose(fp);
	return line;
}

/* moat serve asks once, at start: its process is in the scope before the
 * first request, a /v1/run asking for limits gets cgroup-v2, and serve then
 * sits in its supervisor leaf inside the scope. */
START_TEST(serve_delegates_at_start)
{
	if (skip_unless_systemd(__func__))
		return;
	char dir[] = "/tmp/moat-sdserve-XXXXXX", sock[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof sock, "%s/s", dir);
	const char *const args[] = { "serve", "--socket", sock, "--runtime", harness_runtime_dir(),
				     "--no-kv", NULL };
	struct harness_proc p;
	harness_start(MODE_ROOTLESS, args, NULL, 0, PLAIN_ENV, NULL, NULL, &p);
	/* its stderr until it listens */
	char log[8192] = "";
	size_t len = 0;
	long waited = 0;
	while (!strstr(log, "listening on") && waited < MS(60000) && len < sizeof log - 1) {
		struct pollfd pf = { p.err, POLLIN, 0 };
		if (poll(&pf, 1, 100) > 0) {
			ssize_t n = read(p.err, log + len, sizeof log - 1 - len);
			if (n <= 0)
				break;
			len += (size_t)n;
			log[len] = '\0';
		}
		waited += 100;
	}
	char *cg = proc_cgroup(p.pid);
	char req[256], cmd[1024];
	snprintf(req, sizeof req, "{\"language\":\"sh\",\"code\":\"echo ran\",\"memoryMb\":64,"
				  "\"pidsLimit\":32,\"cpus\":1,\"strictLimits\":true}");
	snprintf(cmd, sizeof cmd, "curl -sS --max-time %ld --unix-socket %s -d '%s' "
				  "http://localhost/v1/run", MS(30000) / 1000, sock, req);
	FILE *c = popen(cmd, "re");
	char body[8192] = "";
	size_t bl = c ? fread(body, 1, sizeof body - 1, c) : 0;
	body[bl] = '\0';
	if (c)
		pclose(c);
	char *cg_after = proc_cgroup(p.pid);
	kill(p.pid, SIGTERM);
	struct run_out o;
	memset(&o, 0, sizeof o);
	harness_finish(&p, &o);
	harness_free(&o);
	unlink(sock);
	rmdir(dir);

	ck_assert_msg(strstr(log, "moat serve: limits: cgroup v2 under ") &&
		      strstr(log, "systemd delegated the scope moat-"), "serve's log: %s", log);
	/* at start: in the scope; after a run: in its supervisor leaf there,
	 * the scope holding the run's leaves */
	char pre[64], sup[64];
	snprintf(pre, sizeof pre, "/app.slice/moat-%ld-", (long)p.pid);
	snprintf(sup, sizeof sup, ".scope/moat-%ld-supervisor\n", (long)p.pid);
	size_t cl = cg ? strlen(cg) : 0;
	ck_assert_msg(cg && strstr(cg, pre) && cl > 7 && !strcmp(cg + cl - 7, ".scope\n"),
		      "serve started in %s", cg ? cg : "?");
	ck_assert_msg(cg_after && strstr(cg_after, pre) && strstr(cg_after, sup),
		      "serve is in %s after a run", cg_after ? cg_after : "?");
	free(cg);
	free(cg_after);
	cJSON *r = cJSON_Parse(body);
	ck_assert_msg(r, "/v1/run answered: %s", body);
	const cJSON *lim = cJSON_GetObjectItemCaseSensitive(r, "limits");
	static const char *const keys[] = { "memory", "pids", "cpu" };
	for (size_t i = 0; i < 3; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(lim, keys[i]);
		ck_assert_msg(cJSON_IsString(v) && !strcmp(v->valuestring, "cgroup-v2"), "%s", body);
	}
	cJSON_Delete(r);
}
END_TEST

/* moat doctor's line on delegation, changing nothing: what this host offers
 * a rootless moat without wrapper or MOAT_CGROUP_PARENT. */
START_TEST(doctor_says_whether_systemd_delegates)
{
	struct harness_proc p;
	struct run_out o;
	memset(&o, 0, sizeof o);
	harness_start(MODE_ROOTLESS, (const char *const[]){ "doctor", NULL }, NULL, 0, PLAIN_ENV,
		      NULL, NULL, &p);
	harness_finish(&p, &o);
	const char *line = strstr(o.out, "\nsystemd delegation: ");
	ck_assert_msg(line, "no systemd delegation line: %s", o.out);
	line++;
	char l[1024];
	snprintf(l, sizeof l, "%.*s", (int)strcspn(line, "\n"), line);
	if (!harness_unified_host())
		ck_assert_str_eq(l, "systemd delegation: not used: cgroup v2 is not the unified "
				    "hierarchy here");
	else if (systemd_guest())
		ck_assert_msg(strstr(l, "available: systemd ") && strstr(l, "/run/user/") &&
			      !strstr(l, "not available"), "%s", l);
	else if (not_delegated_here())
		/* make check-vm: no user manager, no bus */
		ck_assert_msg(strstr(l, "not available: no user bus: ") &&
			      strstr(l, "enable-linger"), "%s", l);
	else
		ck_assert_msg(strstr(l, "not needed") || strstr(l, "not used"), "%s", l);
	harness_free(&o);
}
END_TEST

Suite *systemd_suite(void)
{
	Suite *s = suite_create("systemd");
	TCase *tc = tcase_create("systemd");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, bus_only_when_a_limit_is_asked);
	tcase_add_test(tc, doctor_says_whether_systemd_delegates);
	tcase_add_test(tc, delegated_memory_is_cgroup_v2);
	tcase_add_test(tc, delegated_pids_is_cgroup_v2);
	tcase_add_test(tc, delegated_cpu_is_cgroup_v2);
	tcase_add_test(tc, scopes_go_away_with_moat);
	tcase_add_test(tc, serve_delegates_at_start);
	suite_add_tcase(s, tc);
	return s;
}
