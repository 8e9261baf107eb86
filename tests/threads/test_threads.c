/* libmoat from many threads at once, in one process, built with
 * ThreadSanitizer (make check-threads; TSAN_OPTIONS=halt_on_error=1
 * exitcode=66 turns any race report into a failure).
 *
 * THREADS threads each run RUNS mixed-language programs (python,
 * javascript, bash, typescript, each printing 42) through moat_run, as root
 * and as uid 65534 (rootless: the test drops its own privileges first).
 * Then: every run printed 42 and exited 0 (none hung until its timeout),
 * the whole batch ended within a bounded wall time, the process holds
 * exactly the fds it held before, no child is left to reap, and none of
 * moat's cgroup leaves (moat-<pid>-<n>) is left under the cgroups the
 * process is in. MOAT_THREADS_RUNS overrides RUNS (runs per thread). */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "moat.h"
#include "../skip.h"

#define THREADS 8
#define RUNS 50
#define RUN_TIMEOUT_MS 30000
#define ROOTLESS_UID 65534

static const struct {
	enum moat_language lang;
	const char *name;
	const char *code;
} PROGRAMS[] = {
	{ MOAT_LANG_PYTHON, "python", "print(6 * 7)" },
	{ MOAT_LANG_JAVASCRIPT, "javascript", "console.log(6 * 7)" },
	{ MOAT_LANG_BASH, "bash", "echo $((6 * 7))" },
	{ MOAT_LANG_TYPESCRIPT, "typescript", "const n: number = 6 * 7; console.log(n)" },
};
#define NPROGRAMS (sizeof PROGRAMS / sizeof PROGRAMS[0])

static double slowdown(void)
{
	const char *v = getenv("MOAT_TEST_SLOWDOWN");
	double s = v ? strtod(v, NULL) : 1;
	return s >= 1 ? s : 1;
}

static int runs_per_thread(void)
{
	const char *v = getenv("MOAT_THREADS_RUNS");
	int n = v ? atoi(v) : RUNS;
	return n > 0 ? n : RUNS;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct worker {
	pthread_t thread;
	int index;
	int runs;
	int ok;
	int failed;
	double slowest;
	char first_failure[512];
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < w->runs; i++) {
		size_t k = (size_t)(w->index + i) % NPROGRAMS;
		struct moat_request *req = moat_request_new();
		struct moat_result *res = NULL;
		struct moat_error err = { 0 };
		if (!req || !(req->code = strdup(PROGRAMS[k].code))) {
			moat_request_free(req);
			w->failed++;
			snprintf(w->first_failure, sizeof w->first_failure, "out of memory");
			continue;
		}
		req->code_len = strlen(req->code);
		req->language = PROGRAMS[k].lang;
		req->timeout_ms = RUN_TIMEOUT_MS;
		double t0 = now_s();
		int rc = moat_run(req, NULL, &res, &err);
		double took = now_s() - t0;
		if (took > w->slowest)
			w->slowest = took;
		bool good = rc == 0 && res->exited && res->exit_code == 0 && !res->timed_out &&
			    res->stdout_len == 3 && !memcmp(res->stdout_buf, "42\n", 3);
		if (good) {
			w->ok++;
		} else if (w->failed++ == 0) {
			snprintf(w->first_failure, sizeof w->first_failure,
				 "thread %d run %d (%s): rc %d, %s; timed out %d, exit %d, "
				 "stdout \"%.*s\", stderr \"%.*s\", %.1f s", w->index, i,
				 PROGRAMS[k].name, rc, err.message ? err.message : "no error",
				 res ? res->timed_out : -1, res ? res->exit_code : -1,
				 res ? (int)(res->stdout_len > 40 ? 40 : res->stdout_len) : 0,
				 res && res->stdout_buf ? res->stdout_buf : "",
				 res ? (int)(res->stderr_len > 200 ? 200 : res->stderr_len) : 0,
				 res && res->stderr_buf ? res->stderr_buf : "", took);
		}
		moat_result_free(res);
		moat_error_clear(&err);
		moat_request_free(req);
	}
	return NULL;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}

/* moat's run leaves of this process ("moat-<pid>-<n>", not the
 * "-supervisor" leaf) under every cgroup /proc/self/cgroup names, v1
 * controllers and cgroup2 (hybrid or unified). Names the first in *which. */
static int count_leaves(char *which, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	ck_assert_ptr_nonnull(f);
	char prefix[64];
	snprintf(prefix, sizeof prefix, "moat-%ld-", (long)getpid());
	int n = 0;
	char line[4096];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *ctl = strchr(line, ':');
		char *path = ctl ? strchr(ctl + 1, ':') : NULL;
		if (!path)
			continue;
		*path++ = '\0';
		ctl++;
		char dirs[2][4200];
		int nd = 0;
		if (*ctl == '\0') { /* cgroup2 */
			if (snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup/unified%s", path) < 0 ||
			    snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup%s", path) < 0)
				continue;
		} else {
			if (!strncmp(ctl, "name=", 5) ||
			    snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup/%s%s", ctl, path) < 0)
				continue;
		}
		for (int i = 0; i < nd; i++) {
			DIR *d = opendir(dirs[i]);
			if (!d)
				continue;
			struct dirent *de;
			while ((de = readdir(d))) {
				if (strncmp(de->d_name, prefix, strlen(prefix)) ||
				    strstr(de->d_name, "supervisor"))
					continue;
				if (n++ == 0 &&
				    snprintf(which, len, "%s/%s", dirs[i], de->d_name) < 0)
					which[0] = '\0';
			}
			closedir(d);
		}
	}
	fclose(f);
	return n;
}

static char home[] = "/tmp/moat-threads-XXXXXX";

static void remove_tree(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char sub[4096];
			if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) < (int)sizeof sub)
				remove_tree(sub);
		}
		closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

/* Rootless: this (forked) test process becomes uid/gid 65534 with a HOME
 * of its own, where moat keeps its BPF cache. */
static void become_rootless(void)
{
	ck_assert_ptr_nonnull(mkdtemp(home));
	ck_assert_int_eq(chown(home, ROOTLESS_UID, ROOTLESS_UID), 0);
	ck_assert_int_eq(setenv("HOME", home, 1), 0);
	ck_assert_int_eq(unsetenv("XDG_CACHE_HOME"), 0);
	ck_assert_int_eq(setgroups(0, NULL), 0);
	ck_assert_int_eq(setresgid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID), 0);
	ck_assert_int_eq(setresuid(ROOTLESS_UID, ROOTLESS_UID, ROOTLESS_UID), 0);
	/* as after an execve: a process whose ids changed is not dumpable, and
	 * the kernel then keeps the /proc files of its children (uid_map) root's */
	ck_assert_int_eq(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
}

START_TEST(threads_run_mixed_programs)
{
	int mode = _i; /* 0: as root, 1: rootless */
	if (mode == 0 && geteuid() != 0) {
		harness_skip("threads: root mode needs root");
		return;
	}
	if (mode == 1 && geteuid() == 0)
		become_rootless();
	const char *name = mode == 0 ? "root" : "rootless";
	int runs = runs_per_thread();
	char leaf[4400] = "";
	int fds_before = count_fds();
	int leaves_before = count_leaves(leaf, sizeof leaf);
	ck_assert_msg(leaves_before == 0, "a leaf of this pid before the runs: %s", leaf);

	struct worker w[THREADS];
	memset(w, 0, sizeof w);
	double t0 = now_s();
	for (int i = 0; i < THREADS; i++) {
		w[i].index = i;
		w[i].runs = runs;
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(w[i].thread, NULL), 0);
	double wall = now_s() - t0;

	int ok = 0, failed = 0;
	double slowest = 0;
	const char *why = NULL;
	for (int i = 0; i < THREADS; i++) {
		ok += w[i].ok;
		failed += w[i].failed;
		if (w[i].slowest > slowest)
			slowest = w[i].slowest;
		if (w[i].failed && !why)
			why = w[i].first_failure;
	}
	int fds_after = count_fds();
	int leaves_after = count_leaves(leaf, sizeof leaf);
	int st;
	pid_t left = waitpid(-1, &st, WNOHANG | __WALL);
	fprintf(stderr, "threads: %s: %d threads x %d runs: %d ok, %d failed in %.1f s "
		"(slowest run %.2f s); fds %d -> %d; moat leaves left %d\n", name, THREADS, runs,
		ok, failed, wall, slowest, fds_before, fds_after, leaves_after);
	ck_assert_msg(failed == 0, "%d of %d runs failed; first: %s", failed, THREADS * runs, why);
	/* nothing hung until its timeout: a stuck run would take RUN_TIMEOUT_MS */
	ck_assert_msg(slowest < 10.0 * slowdown(), "a run took %.1f s", slowest);
	ck_assert_msg(fds_after == fds_before, "fds: %d before, %d after", fds_before, fds_after);
	ck_assert_msg(left < 0 && errno == ECHILD, "a child is left to reap (pid %d)", (int)left);
	ck_assert_msg(leaves_after == 0, "%d cgroup leaves left, e.g. %s", leaves_after, leaf);
	if (mode == 1 && strcmp(home, "/tmp/moat-threads-XXXXXX"))
		remove_tree(home);
}
END_TEST


/* ---- the options a long-lived caller uses (moat serve) ----
 * cancel_fd and hangup_fd kill runs from outside their threads; runtime_dir
 * is bound read-only. Root and rootless, like the batch above. */

static bool enter_mode(int mode, const char *test)
{
	if (mode == 0 && geteuid() != 0) {
		harness_skip("threads: %s: root mode needs root", test);
		return false;
	}
	if (mode == 1 && geteuid() == 0)
		become_rootless();
	return true;
}

struct sleeper {
	pthread_t thread;
	struct moat_run_options opts;
	struct moat_result *res;
	int rc;
	double took;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *sl = arg;
	struct moat_request *req = moat_request_new();
	req->language = MOAT_LANG_PYTHON;
	req->code = strdup("import time\nprint('started', flush=True)\ntime.sleep(30)\n");
	req->code_len = strlen(req->code);
	req->timeout_ms = 30000;
	struct moat_error err = { 0 };
	double t0 = now_s();
	sl->rc = moat_run(req, &sl->opts, &sl->res, &err);
	sl->took = now_s() - t0;
	if (sl->rc < 0)
		fprintf(stderr, "threads: run failed: %s\n", err.message);
	moat_error_clear(&err);
	moat_request_free(req);
	return NULL;
}

START_TEST(options_cancel_fd_kills_runs)
{
	if (!enter_mode(_i, "cancel_fd"))
		return;
	int fds_before = count_fds();
	int efd = eventfd(0, EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	struct sleeper sl[4];
	memset(sl, 0, sizeof sl);
	for (int i = 0; i < 4; i++) {
		moat_run_options_init(&sl[i].opts);
		ck_assert_int_eq(sl[i].opts.cancel_fd, -1);
		ck_assert_int_eq(sl[i].opts.hangup_fd, -1);
		sl[i].opts.cancel_fd = efd; /* one fd cancels them all */
		ck_assert_int_eq(pthread_create(&sl[i].thread, NULL, sleeper_main, &sl[i]), 0);
	}
	usleep((useconds_t)(1500000 * slowdown()));
	uint64_t one = 1;
	ck_assert_int_eq(write(efd, &one, sizeof one), (ssize_t)sizeof one);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pthread_join(sl[i].thread, NULL), 0);
		ck_assert_int_eq(sl[i].rc, 0);
		struct moat_result *r = sl[i].res;
		ck_assert_msg(!r->exited && r->killed_by && !strcmp(r->killed_by, "cancelled"),
			      "run %d: exited %d killedBy %s", i, r->exited,
			      r->killed_by ? r->killed_by : "null");
		ck_assert(!r->timed_out);
		ck_assert_msg(sl[i].took < 15 * slowdown(), "run %d took %.1f s", i, sl[i].took);
		moat_result_free(r);
	}
	/* still readable: a run started now is cancelled at once */
	struct sleeper late;
	memset(&late, 0, sizeof late);
	moat_run_options_init(&late.opts);
	late.opts.cancel_fd = efd;
	sleeper_main(&late);
	ck_assert_int_eq(late.rc, 0);
	ck_assert_str_eq(late.res->killed_by, "cancelled");
	moat_result_free(late.res);
	uint64_t v;
	ck_assert_int_eq(read(efd, &v, sizeof v), (ssize_t)sizeof v); /* moat never read it */
	ck_assert_int_eq((int)v, 1);
	close(efd);
	ck_assert_int_eq(count_fds(), fds_before);
}
END_TEST

START_TEST(options_hangup_fd_kills_run)
{
	if (!enter_mode(_i, "hangup_fd"))
		return;
	int fds_before = count_fds();
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	/* a peer that is still there: the run ends by itself, not cancelled */
	struct moat_request *req = moat_request_new();
	req->language = MOAT_LANG_PYTHON;
	req->code = strdup("print(6 * 7)");
	req->code_len = strlen(req->code);
	struct moat_run_options opts;
	moat_run_options_init(&opts);
	opts.hangup_fd = sv[0];
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_run(req, &opts, &res, &err) == 0, "%s", err.message);
	ck_assert(res->exited && res->exit_code == 0 && !res->killed_by);
	moat_result_free(res);
	moat_request_free(req);
	/* data from the peer is not a hang-up */
	ck_assert_int_eq(write(sv[1], "x", 1), 1);
	struct sleeper sl;
	memset(&sl, 0, sizeof sl);
	moat_run_options_init(&sl.opts);
	sl.opts.hangup_fd = sv[0];
	ck_assert_int_eq(pthread_create(&sl.thread, NULL, sleeper_main, &sl), 0);
	usleep((useconds_t)(1500000 * slowdown()));
	close(sv[1]); /* the client goes away */
	ck_assert_int_eq(pthread_join(sl.thread, NULL), 0);
	ck_assert_int_eq(sl.rc, 0);
	ck_assert_msg(sl.res->killed_by && !strcmp(sl.res->killed_by, "cancelled"), "killedBy %s",
		      sl.res->killed_by ? sl.res->killed_by : "null");
	ck_assert_msg(sl.took < 15 * slowdown(), "took %.1f s", sl.took);
	/* the run ran long enough to start: the hang-up, not the data, ended it */
	ck_assert_msg(sl.res->stdout_len >= 7 && !memcmp(sl.res->stdout_buf, "started", 7),
		      "stdout %.*s", (int)sl.res->stdout_len, sl.res->stdout_buf);
	moat_result_free(sl.res);
	close(sv[0]);
	ck_assert_int_eq(count_fds(), fds_before);
}
END_TEST

START_TEST(options_runtime_dir_is_read_only)
{
	/* made before the drop; world-writable on the host, so that only the
	 * read-only mount can stop the writes below (not permissions); under
	 * /tmp, which the sandbox's root is assembled on */
	char dir[] = "/tmp/moat-runtime-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	char file[64];
	snprintf(file, sizeof file, "%s/shim.txt", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fputs("shim-content", f);
	fclose(f);
	ck_assert_int_eq(chmod(file, 0666), 0);
	if (!enter_mode(_i, "runtime_dir")) {
		unlink(file);
		rmdir(dir);
		return;
	}
	struct moat_request *req = moat_request_new();
	req->language = MOAT_LANG_PYTHON;
	req->code = strdup(
		"import os, errno\n"
		"print(open('/opt/moat/runtime/shim.txt').read())\n"
		"for how in ('a', 'new'):\n"
		"    try:\n"
		"        p = '/opt/moat/runtime/shim.txt' if how == 'a' else '/opt/moat/runtime/x'\n"
		"        open(p, 'a' if how == 'a' else 'w').write('x')\n"
		"        print('WROTE', p)\n"
		"    except OSError as e:\n"
		"        print(errno.errorcode[e.errno])\n"
		"try:\n"
		"    os.chmod('/opt/moat/runtime/shim.txt', 0o777); print('CHMOD')\n"
		"except OSError as e:\n"
		"    print(errno.errorcode[e.errno])\n");
	req->code_len = strlen(req->code);
	struct moat_run_options opts;
	moat_run_options_init(&opts);
	opts.runtime_dir = dir;
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_run(req, &opts, &res, &err) == 0, "%s", err.message);
	ck_assert_msg(res->exited && res->exit_code == 0, "stderr %.*s", (int)res->stderr_len,
		      res->stderr_buf);
	ck_assert_msg(res->stdout_len == strlen("shim-content\nEROFS\nEROFS\nEROFS\n") &&
			      !memcmp(res->stdout_buf, "shim-content\nEROFS\nEROFS\nEROFS\n",
				      res->stdout_len),
		      "stdout %.*s", (int)res->stdout_len, res->stdout_buf);
	moat_result_free(res);
	/* without the option there is no /opt at all */
	moat_run_options_init(&opts);
	free(req->code);
	req->code = strdup("import os\nprint(os.path.exists('/opt'))");
	req->code_len = strlen(req->code);
	ck_assert_msg(moat_run(req, &opts, &res, &err) == 0, "%s", err.message);
	ck_assert_msg(res->stdout_len == 6 && !memcmp(res->stdout_buf, "False\n", 6),
		      "stdout %.*s", (int)res->stdout_len, res->stdout_buf);
	moat_result_free(res);
	/* a relative or missing directory is a config error, before anything starts */
	opts.runtime_dir = "relative/dir";
	ck_assert_int_eq(moat_run(req, &opts, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	opts.runtime_dir = "/nonexistent-moat-runtime";
	ck_assert_int_eq(moat_run(req, &opts, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	moat_request_free(req);
	unlink(file);
	rmdir(dir);
}
END_TEST

/* The library's argv request with both host directories of the options at
 * once (the plan holds two): the runtime shims and the work directory, each
 * readable, each read-only, the command running in /sandbox/work. */
START_TEST(options_workdir_and_runtime_dir)
{
	char rt[] = "/tmp/moat-runtime-XXXXXX", wd[] = "/tmp/moat-workdir-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(rt));
	ck_assert_ptr_nonnull(mkdtemp(wd));
	ck_assert_int_eq(chmod(rt, 0777), 0);
	ck_assert_int_eq(chmod(wd, 0777), 0);
	char rf[64], wf[64];
	snprintf(rf, sizeof rf, "%s/shim.txt", rt);
	snprintf(wf, sizeof wf, "%s/work.txt", wd);
	const char *paths[] = { rf, wf }, *texts[] = { "shim", "work" };
	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(paths[i], "w");
		ck_assert_ptr_nonnull(f);
		fputs(texts[i], f);
		fclose(f);
		ck_assert_int_eq(chmod(paths[i], 0666), 0);
	}
	/* owned by the rootless mode's uid, so that it can remove them from
	 * the sticky /tmp afterwards */
	if (geteuid() == 0)
		ck_assert(chown(rt, 65534, 65534) == 0 && chown(wd, 65534, 65534) == 0);
	if (!enter_mode(_i, "workdir")) {
		unlink(rf);
		unlink(wf);
		rmdir(rt);
		rmdir(wd);
		return;
	}
	struct moat_request *req = moat_request_new();
	static const char *const args[] = {
		"sh", "-c",
		"pwd; cat /opt/moat/runtime/shim.txt work.txt; echo;"
		" { echo x >> /opt/moat/runtime/shim.txt; } 2>&1; { echo x >> work.txt; } 2>&1",
	};
	req->argc = sizeof args / sizeof args[0];
	req->argv = calloc(req->argc + 1, sizeof *req->argv);
	for (size_t i = 0; i < req->argc; i++)
		req->argv[i] = strdup(args[i]);
	struct moat_run_options opts;
	moat_run_options_init(&opts);
	opts.runtime_dir = rt;
	opts.workdir = wd;
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_run(req, &opts, &res, &err) == 0, "%s", err.message);
	ck_assert_msg(res->exited && res->exit_code != 0, "exit %d", res->exit_code);
	const char *want = "/sandbox/work\nshimwork\n";
	ck_assert_msg(res->stdout_len > strlen(want) &&
			      !memcmp(res->stdout_buf, want, strlen(want)),
		      "stdout %.*s", (int)res->stdout_len, res->stdout_buf);
	int erofs = 0;
	for (size_t i = 0; i + 9 <= res->stdout_len; i++)
		erofs += !memcmp(res->stdout_buf + i, "Read-only", 9);
	ck_assert_msg(erofs == 2, "stdout %.*s", (int)res->stdout_len, res->stdout_buf);
	moat_result_free(res);
	moat_request_free(req);
	FILE *f = fopen(wf, "r");
	char back[16] = { 0 };
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(back, 1, sizeof back - 1, f), 4);
	fclose(f);
	ck_assert_str_eq(back, "work");
	unlink(rf);
	unlink(wf);
	rmdir(rt);
	rmdir(wd);
}
END_TEST

static Suite *threads_suite(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase_create("library");
	/* the bound on the whole batch: a deadlock fails here, not by hanging */
	tcase_set_timeout(tc, 300.0 * slowdown());
	tcase_add_loop_test(tc, threads_run_mixed_programs, 0, 2);
	suite_add_tcase(s, tc);
	TCase *opt = tcase_create("options");
	tcase_set_timeout(opt, 120.0 * slowdown());
	tcase_add_loop_test(opt, options_cancel_fd_kills_runs, 0, 2);
	tcase_add_loop_test(opt, options_hangup_fd_kills_run, 0, 2);
	tcase_add_loop_test(opt, options_runtime_dir_is_read_only, 0, 2);
	tcase_add_loop_test(opt, options_workdir_and_runtime_dir, 0, 2);
	suite_add_tcase(s, opt);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(threads_suite());
	srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, CK_TAP_LOG_FILE_NAME (tools/check.sh) */
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
