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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "moat.h"

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
		fprintf(stderr, "note: threads: root mode needs root; not run\n");
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

static Suite *threads_suite(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase_create("library");
	/* the bound on the whole batch: a deadlock fails here, not by hanging */
	tcase_set_timeout(tc, 300.0 * slowdown());
	tcase_add_loop_test(tc, threads_run_mixed_programs, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(threads_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
