/* cgroups: parsers for /proc/self/cgroup and the controller files (fixtures
 * under tests/fixtures/cgroup/ for the v2 files this host lacks), cpu.max
 * formatting, leaf naming and stale-leaf detection; the v2 and v1 backends
 * writing a fake tree through their leaves' fds. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moat_admin.h"
#include "cgroups/cgroups.h"
#include "cgroups/backend.h"
#include "cgroups/internal.h"
#include "suites.h"

#define FIXTURES "tests/fixtures/cgroup"

static char *fixture(const char *name)
{
	char *t = moat_cg_read(FIXTURES, name);
	ck_assert_msg(t != NULL, "cannot read " FIXTURES "/%s (run from the repository root): %s",
		      name, strerror(errno));
	return t;
}

START_TEST(self_v1)
{
	char *t = fixture("proc_self_cgroup.v1");
	struct moat_cg_self s;
	ck_assert_int_eq(moat_cg_parse_self(t, &s), 0);
	ck_assert_str_eq(s.v1[MOAT_V1_MEMORY], "/process_api/47f3f0fa921a61f3558b918ad24950cd");
	ck_assert_str_eq(s.v1[MOAT_V1_PIDS], "/");
	ck_assert_str_eq(s.v1[MOAT_V1_CPU], "/");
	ck_assert_str_eq(s.v1[MOAT_V1_CPUACCT], "/");
	ck_assert_str_eq(s.v2, "/");
	moat_cg_self_free(&s);
	free(t);
}
END_TEST

START_TEST(self_v2)
{
	char *t = fixture("proc_self_cgroup.v2");
	struct moat_cg_self s;
	ck_assert_int_eq(moat_cg_parse_self(t, &s), 0);
	ck_assert_str_eq(s.v2, "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u42.scope");
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		ck_assert_ptr_null(s.v1[i]);
	moat_cg_self_free(&s);
	free(t);
}
END_TEST

START_TEST(self_hybrid)
{
	char *t = fixture("proc_self_cgroup.hybrid");
	struct moat_cg_self s;
	ck_assert_int_eq(moat_cg_parse_self(t, &s), 0);
	const char *scope = "/user.slice/user-1000.slice/session-3.scope";
	ck_assert_str_eq(s.v1[MOAT_V1_CPU], scope);     /* "cpu,cpuacct" names both */
	ck_assert_str_eq(s.v1[MOAT_V1_CPUACCT], scope);
	ck_assert_str_eq(s.v1[MOAT_V1_MEMORY], scope);
	ck_assert_str_eq(s.v1[MOAT_V1_PIDS], scope);
	ck_assert_str_eq(s.v2, scope);
	moat_cg_self_free(&s);
	free(t);
}
END_TEST

START_TEST(self_edge_cases)
{
	struct moat_cg_self s;
	/* ':' inside a path; no trailing newline; name= hierarchies ignored */
	ck_assert_int_eq(moat_cg_parse_self("3:name=systemd:/x\n0::/a:b/c", &s), 0);
	ck_assert_str_eq(s.v2, "/a:b/c");
	moat_cg_self_free(&s);
	ck_assert_int_eq(moat_cg_parse_self("", &s), 0);
	ck_assert_ptr_null(s.v2);
	moat_cg_self_free(&s);
	ck_assert_int_eq(moat_cg_parse_self("garbage\n", &s), -1);
	ck_assert_int_eq(moat_cg_parse_self("x:memory:/\n", &s), -1);
	ck_assert_int_eq(moat_cg_parse_self("4:memory:relative\n", &s), -1);
	/* memoryx is not memory */
	ck_assert_int_eq(moat_cg_parse_self("4:memoryx,pidsy:/q\n", &s), 0);
	ck_assert_ptr_null(s.v1[MOAT_V1_MEMORY]);
	ck_assert_ptr_null(s.v1[MOAT_V1_PIDS]);
	moat_cg_self_free(&s);
}
END_TEST

START_TEST(pressure_totals)
{
	const char *t = "some avg10=12.50 avg60=3.00 avg300=0.61 total=918273\n"
			"full avg10=11.00 avg60=2.50 avg300=0.50 total=817263\n";
	int64_t v = -1;
	ck_assert_int_eq(moat_cg_pressure_total(t, "full", &v), 1);
	ck_assert_int_eq(v, 817263);
	ck_assert_int_eq(moat_cg_pressure_total(t, "some", &v), 1);
	ck_assert_int_eq(v, 918273);
	ck_assert_int_eq(moat_cg_pressure_total(t, "ful", &v), 0); /* not a prefix match */
	/* a "full" line without total=, or total= only on the next line */
	ck_assert_int_eq(moat_cg_pressure_total("full avg10=1.00\nsome total=5\n", "full", &v), 0);
	ck_assert_int_eq(moat_cg_pressure_total("full avg10=1.00 total=\n", "full", &v), 0);
	ck_assert_int_eq(moat_cg_pressure_total("full avg10=1.00 total=-4\n", "full", &v), 0);
	ck_assert_int_eq(moat_cg_pressure_total("full avg10=1.00 total=12x\n", "full", &v), 0);
	ck_assert_int_eq(moat_cg_pressure_total("", "full", &v), 0);
	/* the last line without a newline */
	ck_assert_int_eq(moat_cg_pressure_total("some total=1\nfull total=77", "full", &v), 1);
	ck_assert_int_eq(v, 77);
}
END_TEST

START_TEST(memory_events)
{
	char *t = fixture("memory.events");
	int64_t v;
	ck_assert_int_eq(moat_cg_kv_get(t, "oom_kill", &v), 1);
	ck_assert_int_eq(v, 2);
	ck_assert_int_eq(moat_cg_kv_get(t, "oom_group_kill", &v), 1);
	ck_assert_int_eq(v, 1);
	ck_assert_int_eq(moat_cg_kv_get(t, "oom", &v), 1); /* not a prefix match */
	ck_assert_int_eq(v, 3);
	ck_assert_int_eq(moat_cg_kv_get(t, "max", &v), 1);
	ck_assert_int_eq(v, 1342);
	ck_assert_int_eq(moat_cg_kv_get(t, "absent", &v), 0);
	free(t);
	t = fixture("memory.events.clean");
	ck_assert_int_eq(moat_cg_kv_get(t, "oom_kill", &v), 1);
	ck_assert_int_eq(v, 0);
	free(t);
}
END_TEST

START_TEST(pids_events_and_cpu_stat)
{
	char *t = fixture("pids.events");
	int64_t v;
	ck_assert_int_eq(moat_cg_kv_get(t, "max", &v), 1);
	ck_assert_int_eq(v, 17);
	free(t);
	t = fixture("cpu.stat");
	ck_assert_int_eq(moat_cg_kv_get(t, "usage_usec", &v), 1);
	ck_assert_int_eq(v, 523417);
	ck_assert_int_eq(moat_cg_kv_get(t, "usage", &v), 0);
	free(t);
}
END_TEST

START_TEST(v1_oom_control)
{
	char *t = fixture("memory.oom_control");
	int64_t v;
	ck_assert_int_eq(moat_cg_kv_get(t, "oom_kill", &v), 1);
	ck_assert_int_eq(v, 1);
	ck_assert_int_eq(moat_cg_kv_get(t, "under_oom", &v), 1);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(moat_cg_kv_get(t, "oom_kill_disable", &v), 1);
	ck_assert_int_eq(v, 0);
	free(t);
	/* kernels before 4.13 have no oom_kill line */
	ck_assert_int_eq(moat_cg_kv_get("oom_kill_disable 0\nunder_oom 0\n", "oom_kill", &v), 0);
}
END_TEST

START_TEST(single_numbers)
{
	int64_t v;
	char *t = fixture("memory.peak");
	ck_assert_int_eq(moat_cg_parse_number(t, &v), 1);
	ck_assert_int_eq(v, 67108864);
	free(t);
	ck_assert_int_eq(moat_cg_parse_number("max\n", &v), 1);
	ck_assert(v == INT64_MAX);
	ck_assert_int_eq(moat_cg_parse_number("", &v), 0);
	ck_assert_int_eq(moat_cg_parse_number("12x\n", &v), 0);
	ck_assert_int_eq(moat_cg_parse_number("maximum", &v), 0);
	t = fixture("cpu.max.default");
	ck_assert_int_eq(moat_cg_parse_number(t, &v), 1); /* first field */
	ck_assert(v == INT64_MAX);
	free(t);
}
END_TEST

START_TEST(cpu_max_format)
{
	char buf[64];
	ck_assert_int_eq(moat_cg_format_cpu_max(0.25, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "25000 100000");
	ck_assert_int_eq(moat_cg_format_cpu_max(1, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "100000 100000");
	ck_assert_int_eq(moat_cg_format_cpu_max(1.5, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "150000 100000");
	ck_assert_int_eq(moat_cg_format_cpu_max(0.333, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "33300 100000");
	/* below the kernel minimum of 1 ms */
	ck_assert_int_eq(moat_cg_format_cpu_max(0.001, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "1000 100000");
	ck_assert_int_eq(moat_cg_format_cpu_max(0.25, buf, 5), -1);
	ck_assert_int_eq(moat_cg_cpu_quota(0.5), 50000);
}
END_TEST

/* pid 42 lives, started at tick 500 */
static bool alive_only_42(pid_t pid, uint64_t start)
{
	return pid == 42 && (!start || start == 500);
}

START_TEST(leaf_names)
{
	char buf[64];
	ck_assert_int_eq(moat_cg_leaf_name(1234, 0, 7, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "moat-1234-7");
	ck_assert_int_eq(moat_cg_leaf_name(1234, 0, 7, buf, 6), -1);
	ck_assert_int_eq(moat_cg_leaf_name(1234, 98765, 7, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "moat-1234-t98765-7");
	ck_assert_int_eq(moat_cg_leaf_name(1234, 98765, 7, buf, 12), -1);
	pid_t pid = 0;
	uint64_t start = 1;
	ck_assert_int_eq(moat_cg_leaf_pid("moat-1234-7", &pid), 1);
	ck_assert_int_eq(pid, 1234);
	ck_assert_int_eq(moat_cg_leaf_owner("moat-1234-7", &pid, &start), 1);
	ck_assert_int_eq(start, 0);
	ck_assert_int_eq(moat_cg_leaf_owner("moat-1234-t98765-7", &pid, &start), 1);
	ck_assert_int_eq(pid, 1234);
	ck_assert_uint_eq(start, 98765);
	/* not a start time: the pid alone counts */
	const char *no_start[] = { "moat-5-t-1", "moat-5-t12", "moat-5-t12-", "moat-5-t0-1",
				   "moat-5-tx-1", "moat-5-t99999999999999999999999-1" };
	for (size_t i = 0; i < sizeof no_start / sizeof no_start[0]; i++) {
		start = 1;
		ck_assert_int_eq(moat_cg_leaf_owner(no_start[i], &pid, &start), 1);
		ck_assert_msg(pid == 5 && start == 0, "%s: pid %d start %llu", no_start[i],
			      (int)pid, (unsigned long long)start);
	}
	ck_assert_int_eq(moat_cg_leaf_pid("moat-99-" MOAT_CG_SUPERVISOR_SUFFIX, &pid), 1);
	ck_assert_int_eq(pid, 99);
	const char *bad[] = { "moat-", "moat-12", "moat-12-", "moat--1", "moat-0-1", "moat-x-1",
			      "other-12-1", "moat-99999999999-1", "moat-12x-1" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(moat_cg_leaf_pid(bad[i], &pid) == 0, "%s accepted", bad[i]);
	ck_assert(moat_cg_leaf_stale("moat-41-3", alive_only_42));
	ck_assert(!moat_cg_leaf_stale("moat-42-3", alive_only_42));
	ck_assert(!moat_cg_leaf_stale("user.slice", alive_only_42));
	/* the pid reused by a process that started later: the owner is gone */
	ck_assert(!moat_cg_leaf_stale("moat-42-t500-3", alive_only_42));
	ck_assert(moat_cg_leaf_stale("moat-42-t501-3", alive_only_42));
	ck_assert(moat_cg_leaf_stale("moat-41-t500-3", alive_only_42));
	ck_assert(moat_cg_pid_alive(getpid(), 0));
	uint64_t me = moat_cg_pid_start(getpid());
	ck_assert_uint_gt(me, 0);
	ck_assert(moat_cg_pid_alive(getpid(), me));
	ck_assert(!moat_cg_pid_alive(getpid(), me + 1));
}
END_TEST

/* /proc/<pid>/stat's field 22, whatever the command's name holds */
START_TEST(stat_starttime)
{
	uint64_t v = 0;
	ck_assert_int_eq(moat_cg_stat_starttime("1234 (moat) S 1 1234 1234 0 -1 4194560 2747 0 0 0 "
						 "1 2 0 0 20 0 3 0 8815123 12345 67\n", &v), 1);
	ck_assert_uint_eq(v, 8815123);
	ck_assert_int_eq(moat_cg_stat_starttime("7 (a) b) c (d) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 "
						 "20 0 1 0 42 1 1", &v), 1);
	ck_assert_uint_eq(v, 42);
	const char *bad[] = { "", "1234 moat S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 "
			      "0 0 0 0 20 0 1 0 x1 1", NULL };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(moat_cg_stat_starttime(bad[i], &v) == 0, "%s accepted",
			      bad[i] ? bad[i] : "NULL");
	char self[64];
	snprintf(self, sizeof self, "/proc/%ld/stat", (long)getpid());
	FILE *f = fopen(self, "r");
	char line[1024];
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
	fclose(f);
	ck_assert_int_eq(moat_cg_stat_starttime(line, &v), 1);
	ck_assert_uint_eq(v, moat_cg_pid_start(getpid()));
}
END_TEST

/* Stale-leaf removal on plain directories (what rmdir sees is the same). */
START_TEST(remove_stale_dirs)
{
	char tmpl[] = "/tmp/moat-cg-test-XXXXXX";
	char *dir = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(dir);
	/* a pid that cannot exist (above pid_max) and our own */
	char dead[128], live[128], other[128];
	snprintf(dead, sizeof dead, "%s/moat-2147483646-1", dir);
	snprintf(live, sizeof live, "%s/moat-%ld-1", dir, (long)getpid());
	snprintf(other, sizeof other, "%s/unrelated", dir);
	ck_assert_int_eq(mkdir(dead, 0700), 0);
	ck_assert_int_eq(mkdir(live, 0700), 0);
	ck_assert_int_eq(mkdir(other, 0700), 0);
	/* our pid with our start time: live; with another: a process that had
	 * our pid before us (reused), gone */
	uint64_t me = moat_cg_pid_start(getpid());
	char live_t[160], reused[160];
	snprintf(live_t, sizeof live_t, "%s/moat-%ld-t%llu-2", dir, (long)getpid(),
		 (unsigned long long)me);
	snprintf(reused, sizeof reused, "%s/moat-%ld-t%llu-2", dir, (long)getpid(),
		 (unsigned long long)me + 1);
	ck_assert_int_eq(mkdir(live_t, 0700), 0);
	ck_assert_int_eq(mkdir(reused, 0700), 0);
	unsigned found = 0, removed = 0;
	moat_cg_scan_stale(dir, false, &found, &removed);
	ck_assert_uint_eq(found, 2);
	ck_assert_uint_eq(removed, 0);
	ck_assert_int_eq(access(dead, F_OK), 0);
	moat_cg_remove_stale(dir);
	ck_assert_int_eq(access(dead, F_OK), -1);
	ck_assert_int_eq(access(reused, F_OK), -1);
	ck_assert_int_eq(access(live, F_OK), 0);
	ck_assert_int_eq(access(live_t, F_OK), 0);
	ck_assert_int_eq(access(other, F_OK), 0);
	ck_assert_int_eq(rmdir(live_t), 0);
	ck_assert_int_eq(moat_cg_rmdir_wait(live), 0);
	ck_assert_int_eq(moat_cg_rmdir_wait(live), 0); /* already gone: fine */
	rmdir(other);
	rmdir(dir);
}
END_TEST

START_TEST(file_helpers)
{
	char tmpl[] = "/tmp/moat-cg-test-XXXXXX";
	char *dir = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(dir);
	char *path = moat_cg_path(dir, "f");
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(moat_cg_write(dir, "f", "12345\n"), 0);
	char *t = moat_cg_read(dir, "f");
	ck_assert_str_eq(t, "12345\n");
	free(t);
	/* larger than the first read buffer */
	size_t big = 100000;
	char *s = malloc(big + 1);
	memset(s, 'a', big);
	s[big] = '\0';
	ck_assert_int_eq(moat_cg_write(dir, "f", s), 0);
	t = moat_cg_read(dir, "f");
	ck_assert_uint_eq(strlen(t), big);
	free(t);
	free(s);
	ck_assert_ptr_null(moat_cg_read(dir, "missing"));
	ck_assert_int_eq(moat_cg_write(dir, "missing", "1"), -1);
	unlink(path);
	free(path);
	rmdir(dir);
}
END_TEST

START_TEST(mech_names_and_describe)
{
	ck_assert_str_eq(moat_cg_mech_name(MOAT_CG_V2), "cgroup-v2");
	ck_assert_str_eq(moat_cg_mech_name(MOAT_CG_V1), "cgroup-v1");
	ck_assert_str_eq(moat_cg_mech_name(MOAT_CG_RLIMIT), "rlimit");
	ck_assert_str_eq(moat_cg_mech_name(MOAT_CG_NONE), "none");
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(moat_cgroup_describe(f), 0);
	fclose(f);
	/* the probe names cgroup2 and where a run's v2 leaf would go; the
	 * per-limit verdict comes from a trial run (cli/doctor_ok checks it) */
	ck_assert_msg(strstr(buf, "cgroup2"), "%s", buf);
	ck_assert_msg(strstr(buf, "cgroup2 parent:"), "%s", buf);
	free(buf);
}
END_TEST

/* cgroup v2's migration rule needs the common ancestor of moat's cgroup and
 * the run's parent: component-wise, never a string prefix. */
static void ancestor_is(const char *a, const char *b, const char *want)
{
	char *got = moat_cg_common_ancestor(a, b);
	ck_assert_msg(got && !strcmp(got, want), "ancestor of %s and %s: %s, want %s", a, b,
		      got ? got : "NULL", want);
	free(got);
	got = moat_cg_common_ancestor(b, a);
	ck_assert_msg(got && !strcmp(got, want), "ancestor of %s and %s: %s, want %s", b, a,
		      got ? got : "NULL", want);
	free(got);
}

START_TEST(common_ancestor)
{
	/* the test layout of limits/unreachable_parent_falls_back: siblings */
	ancestor_is("/moat-ca-1/a", "/moat-ca-1/b", "/moat-ca-1");
	/* the harness's rootless layout: moat in a leaf under the parent */
	ancestor_is("/moat-rootless/h-7", "/moat-rootless", "/moat-rootless");
	/* moat's own delegated cgroup, before and after its supervisor leaf */
	ancestor_is("/u.slice/run.scope", "/u.slice/run.scope", "/u.slice/run.scope");
	ancestor_is("/u.slice/run.scope/moat-9-supervisor", "/u.slice/run.scope",
		    "/u.slice/run.scope");
	/* nothing shared but the root; a name prefix is not an ancestor */
	ancestor_is("/init", "/moat-root", "/");
	ancestor_is("/ab", "/abc/d", "/");
	ancestor_is("/a/bc", "/a/b", "/a");
	ancestor_is("/", "/x/y", "/");
	ancestor_is("/", "/", "/");
	/* repeated and trailing slashes, "." components */
	ancestor_is("//a///b/", "/a/./b/c", "/a/b");
	/* not computable: relative paths, a cgroup outside the namespace */
	static const char *const bad[][2] = { { "a/b", "/a" }, { "", "/" }, { "/../x", "/x" },
					      { "/a/../b", "/a" }, { "/a", "/a/.." } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		ck_assert_msg(!moat_cg_common_ancestor(bad[i][0], bad[i][1]) && errno == EINVAL,
			      "%s, %s", bad[i][0], bad[i][1]);
	}
}
END_TEST

/* NULL-safety of the runner-facing calls. */
START_TEST(null_safe)
{
	moat_cgroup_finish(NULL, NULL);
	ck_assert_int_eq(moat_cgroup_clone_fd(NULL), -1);
	ck_assert_int_eq(moat_cgroup_kill(NULL), -1);
}
END_TEST


/* ---- delegation from the user's systemd (cgroups/systemd.c) ------------- */

START_TEST(delegation_decision)
{
	/* asked only: unified host, no usable parent, no MOAT_CGROUP_PARENT,
	 * not root, a limit requested */
	ck_assert(moat_cg_delegation_wanted(true, false, false, 1000, true));
	ck_assert(!moat_cg_delegation_wanted(false, false, false, 1000, true)); /* hybrid/v1 */
	ck_assert(!moat_cg_delegation_wanted(true, true, false, 1000, true));   /* delegated */
	ck_assert(!moat_cg_delegation_wanted(true, false, true, 1000, true));   /* env parent */
	ck_assert(!moat_cg_delegation_wanted(true, false, false, 0, true));     /* root */
	ck_assert(!moat_cg_delegation_wanted(true, false, false, 1000, false)); /* no limit */
}
END_TEST

static bool sock_yes(const char *path, uid_t uid)
{
	return !strcmp(path, "/run/user/1000/bus") && uid == 1000;
}

static bool sock_no(const char *path, uid_t uid)
{
	return false;
}

START_TEST(user_bus_choice)
{
	char *why = NULL;
	/* the caller's DBUS_SESSION_BUS_ADDRESS is taken as given */
	char *a = moat_cg_user_bus("unix:path=/tmp/x,guid=1", "/run/user/1000", 1000, sock_no, &why);
	ck_assert_str_eq(a, "unix:path=/tmp/x,guid=1");
	ck_assert_ptr_null(why);
	free(a);
	a = moat_cg_user_bus("unix:path=/a;unix:abstract=b", NULL, 1000, sock_no, &why);
	ck_assert_str_eq(a, "unix:path=/a;unix:abstract=b");
	free(a);
	/* never another transport: tcp: goes off the machine, unixexec: runs a program */
	const char *bad[] = { "tcp:host=192.0.2.1,port=1", "unixexec:path=/bin/sh",
			      "unix:path=/a;unixexec:path=/bin/sh", ";tcp:host=a", "x" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_msg(!moat_cg_user_bus(bad[i], "/run/user/1000", 1000, sock_yes, &why),
			      "%s accepted", bad[i]);
		ck_assert_msg(why && strstr(why, "is not a unix: address"), "%s", why);
		free(why);
	}
	/* else $XDG_RUNTIME_DIR/bus, escaped for an address */
	a = moat_cg_user_bus(NULL, "/run/user/1000", 1000, sock_no, &why);
	ck_assert_str_eq(a, "unix:path=/run/user/1000/bus");
	free(a);
	a = moat_cg_user_bus("", "/tmp/my dir,x=y", 1000, sock_no, &why);
	ck_assert_str_eq(a, "unix:path=/tmp/my%20dir%2cx%3dy/bus");
	free(a);
	ck_assert_ptr_null(moat_cg_user_bus(NULL, "run/user/1000", 1000, sock_yes, &why));
	ck_assert_msg(why && strstr(why, "not an absolute path"), "%s", why);
	free(why);
	/* else /run/user/<uid>/bus, only when it is uid's socket */
	a = moat_cg_user_bus(NULL, NULL, 1000, sock_yes, &why);
	ck_assert_str_eq(a, "unix:path=/run/user/1000/bus");
	free(a);
	a = moat_cg_user_bus(NULL, "", 1000, sock_yes, &why);
	ck_assert_str_eq(a, "unix:path=/run/user/1000/bus");
	free(a);
	ck_assert_ptr_null(moat_cg_user_bus(NULL, NULL, 1001, sock_yes, &why));
	ck_assert_msg(why && strstr(why, "/run/user/1001/bus is not a socket of uid 1001") &&
		      strstr(why, "enable-linger"), "%s", why);
	free(why);
}
END_TEST

START_TEST(scope_names)
{
	char buf[96];
	ck_assert_int_eq(moat_cg_scope_name(4321, 0xabcdef01u, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "moat-4321-abcdef01.scope");
	ck_assert_int_eq(moat_cg_scope_name(4321, 1, buf, 10), -1);
	const char *u = "moat-4321-abcdef01.scope";
	ck_assert(moat_cg_path_in_unit("/user.slice/user-1000.slice/user@1000.service/app.slice/"
				       "moat-4321-abcdef01.scope", u));
	/* not the scope: a cgroup below it, above it, or a longer name */
	ck_assert(!moat_cg_path_in_unit("/user.slice/x/moat-4321-abcdef01.scope/moat-4321-"
					"supervisor", u));
	ck_assert(!moat_cg_path_in_unit("/user.slice/user-1000.slice/session-2.scope", u));
	ck_assert(!moat_cg_path_in_unit("/a/xmoat-4321-abcdef01.scope", u));
	ck_assert(!moat_cg_path_in_unit("/a/moat-4321-abcdef01.scope2", u));
	ck_assert(!moat_cg_path_in_unit(NULL, u));
	ck_assert(!moat_cg_path_in_unit("/a/b", ""));
}
END_TEST

START_TEST(systemd_error_mapping)
{
	char *w = moat_cg_systemd_error("cannot connect to the user bus", -ENOENT, NULL, NULL,
					"unix:path=/run/user/7/bus");
	ck_assert_msg(strstr(w, "cannot connect to the user bus on unix:path=/run/user/7/bus: ") &&
		      strstr(w, strerror(ENOENT)) && strstr(w, "enable-linger"), "%s", w);
	free(w);
	w = moat_cg_systemd_error("StartTransientUnit", -EACCES,
				  "org.freedesktop.DBus.Error.AccessDenied", "Access denied by policy",
				  "unix:path=/b");
	ck_assert_msg(strstr(w, "org.freedesktop.DBus.Error.AccessDenied: Access denied by policy") &&
		      strstr(w, "(systemd refused)"), "%s", w);
	free(w);
	w = moat_cg_systemd_error("StartTransientUnit", -EHOSTUNREACH,
				  "org.freedesktop.DBus.Error.ServiceUnknown", "", NULL);
	ck_assert_msg(strstr(w, "the user bus") && strstr(w, strerror(EHOSTUNREACH)) &&
		      strstr(w, "no systemd user manager"), "%s", w);
	free(w);
	w = moat_cg_systemd_error("StartTransientUnit", -ETIMEDOUT, NULL, NULL, "unix:path=/b");
	ck_assert_msg(strstr(w, "no answer in time"), "%s", w);
	free(w);
}
END_TEST

/* The real call, against a bus address where nothing listens: the error
 * names the address and the errno (this loads libsystemd.so.0, present
 * wherever systemd is installed; without it the error says that). */
START_TEST(delegate_without_bus_fails_with_reason)
{
	char dir[] = "/tmp/moat-unit-bus-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char addr[128];
	snprintf(addr, sizeof addr, "unix:path=%s/bus", dir);
	const char *old = getenv("DBUS_SESSION_BUS_ADDRESS");
	char *saved = old ? strdup(old) : NULL;
	setenv("DBUS_SESSION_BUS_ADDRESS", addr, 1);
	char *unit = NULL, *why = NULL;
	int rc = moat_cg_systemd_delegate(2000, &unit, &why);
	if (saved)
		setenv("DBUS_SESSION_BUS_ADDRESS", saved, 1);
	else
		unsetenv("DBUS_SESSION_BUS_ADDRESS");
	free(saved);
	rmdir(dir);
	ck_assert_int_eq(rc, -1);
	ck_assert_ptr_null(unit);
	ck_assert_msg(why && (strstr(why, "libsystemd.so.0") ||
			      (strstr(why, addr) && strstr(why, strerror(ENOENT)))), "%s", why);
	free(why);
}
END_TEST

/* ---- the backends on fake trees ------------------------------------------
 * This host's cgroup2 has no controllers (check-vm runs the real v2 limits);
 * here v2.c and v1.c write into plain directories shaped like a cgroup, so
 * what they write, where, and through which fd is checked on every host. */

static void put(const char *dir, const char *file, const char *text)
{
	char *path = moat_cg_path(dir, file);
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
	free(path);
}

static void expect(const char *dir, const char *file, const char *want)
{
	char *t = moat_cg_read(dir, file);
	ck_assert_msg(t != NULL, "%s/%s: %s", dir, file, strerror(errno));
	ck_assert_msg(!strncmp(t, want, strlen(want)), "%s/%s holds '%s', want '%s'", dir, file,
		      t, want);
	free(t);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void rm_tree(const char *dir)
{
	char *cmd = NULL;
	ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", dir), 0);
	ck_assert_int_eq(system(cmd), 0);
	free(cmd);
}

static struct moat_cgroup *fake_record(void)
{
	struct moat_cgroup *cg = calloc(1, sizeof *cg);
	ck_assert_ptr_nonnull(cg);
	cg->v2_fd = -1;
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		cg->v1_fd[i] = -1;
	return cg;
}

START_TEST(v2_on_a_fake_tree)
{
	char tmpl[] = "/tmp/moat-cg-v2-XXXXXX";
	char *parent = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(parent);
	/* a delegated parent below the root (cgroup.type), holding no process */
	put(parent, "cgroup.type", "domain\n");
	put(parent, "cgroup.procs", "");
	put(parent, "cgroup.subtree_control", "");
	/* the leaf as the kernel would populate it on mkdir (mkdirat's EEXIST
	 * is accepted: a name reused within a process) */
	const char *name = "moat-1-t1-1";
	char *leaf = moat_cg_path(parent, name);
	ck_assert_int_eq(mkdir(leaf, 0755), 0);
	put(leaf, "cgroup.controllers", "cpu memory pids\n");
	const char *files[] = { "memory.max", "memory.oom.group", "memory.swap.max", "pids.max",
				"cpu.max", "cgroup.procs", "cgroup.kill" };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		put(leaf, files[i], "");
	put(leaf, "memory.current", "4096\n");
	put(leaf, "memory.peak", "8192\n");
	put(leaf, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
	put(leaf, "memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n"
				     "full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n");
	put(leaf, "pids.events", "max 2\n");
	put(leaf, "cpu.stat", "usage_usec 25000\nuser_usec 20000\nsystem_usec 5000\n");

	int fds = count_fds();
	struct probe p;
	memset(&p, 0, sizeof p);
	p.v2_mount = "/nonexistent";
	p.v2_pure = true;
	p.v2_parent = parent;
	for (int i = 0; i < L__COUNT; i++)
		p.v2_avail[i] = true;
	struct moat_cgroup *cg = fake_record();
	bool want[L__COUNT] = { true, true, true };
	char *why[L__COUNT] = { NULL, NULL, NULL };
	cg_v2_create(cg, &p, name, want, why);
	for (int i = 0; i < L__COUNT; i++)
		ck_assert_msg(why[i] == NULL, "limit %d: %s", i, why[i]);
	ck_assert_int_ge(cg->v2_fd, 0);
	ck_assert(fcntl(cg->v2_fd, F_GETFD) & FD_CLOEXEC);
	ck_assert_str_eq(cg->v2_leaf, leaf);
	ck_assert_str_eq(moat_cgroup_clone_path(cg), leaf);
	ck_assert_int_eq(moat_cgroup_clone_fd(cg), cg->v2_fd);
	for (int i = 0; i < L__COUNT; i++)
		ck_assert(cg->v2_ctl[i]);
	/* the controllers were enabled in the parent, one write each (a plain
	 * file keeps the last: "+cpu" over "+pids" over "+memory") */
	expect(parent, "cgroup.subtree_control", "+cpu");

	struct moat_result res;
	memset(&res, 0, sizeof res);
	struct moat_error err = { 0 };
	char *w = NULL;
	ck_assert_int_eq(cg_v2_set_memory(cg, 64 * MIB, &w, &res, &err), 0);
	ck_assert_ptr_null(w);
	cg_v2_set_pids(cg, 32, &w);
	ck_assert_ptr_null(w);
	cg_v2_set_cpu(cg, 0.5, &w);
	ck_assert_ptr_null(w);
	expect(leaf, "memory.max", "67108864");
	expect(leaf, "memory.oom.group", "1");
	expect(leaf, "memory.swap.max", "0");
	expect(leaf, "pids.max", "32");
	expect(leaf, "cpu.max", "50000 100000");
	ck_assert_int_eq(cg->mech[L_MEMORY], MOAT_CG_V2);
	ck_assert_int_eq(cg->mech[L_PIDS], MOAT_CG_V2);
	ck_assert_int_eq(cg->mech[L_CPU], MOAT_CG_V2);
	ck_assert_uint_eq(res.warnings_count, 0);

	/* the face, through the leaf's fd */
	ck_assert_int_eq(moat_cgroup_adopt(cg, 4242, &res, &err), 0);
	expect(leaf, "cgroup.procs", "4242");
	ck_assert_int_eq(moat_cgroup_kill(cg), 0);
	expect(leaf, "cgroup.kill", "1");
	ck_assert(moat_cgroup_memory_is_v2(cg));
	ck_assert(moat_cgroup_charges_sockets(cg));
	ck_assert_int_eq(moat_cgroup_memory_now(cg), 4096);
	ck_assert_int_eq(moat_cgroup_cpu_ms(cg), 25);
	int64_t hits = -1, full = -1;
	ck_assert_int_eq(moat_cgroup_memory_stall(cg, &hits, &full), 0);
	ck_assert_int_eq(hits, 3);
	ck_assert_int_eq(full, 7);
	res.exited = true;
	res.exit_code = 1;
	moat_cgroup_collect(cg, &res);
	ck_assert_int_eq(res.memory_peak_bytes, 8192);
	ck_assert_int_eq(res.cpu_time_ms, 25);
	ck_assert(res.oom_killed);
	ck_assert_ptr_null(res.killed_by); /* exited: no kill; the pids hits are a warning */
	ck_assert_uint_eq(res.warnings_count, 1);
	ck_assert_msg(strstr(res.warnings[0], "pids limit was hit 2"), "%s", res.warnings[0]);

	/* a leaf whose name was swapped after creation: the fd still writes
	 * the leaf moat made, not what the name points at now */
	char *moved = moat_cg_path(parent, "moved");
	ck_assert_int_eq(rename(leaf, moved), 0);
	ck_assert_int_eq(mkdir(leaf, 0755), 0);
	put(leaf, "pids.max", "");
	cg_v2_set_pids(cg, 7, &w);
	ck_assert_ptr_null(w);
	expect(moved, "pids.max", "7");
	char *now = moat_cg_read(leaf, "pids.max");
	ck_assert_str_eq(now, "");
	free(now);

	/* finish closes the fd whatever rmdir says (the fake leaf holds files) */
	cg->v2_leaf[0] = '\0'; /* rmdir("") fails: keep the fake tree for rm_tree */
	moat_cgroup_finish(cg, NULL);
	ck_assert_int_eq(count_fds(), fds);
	for (size_t i = 0; i < res.warnings_count; i++)
		free(res.warnings[i]);
	free(res.warnings);
	moat_error_clear(&err);
	rm_tree(parent);
	free(moved);
	free(leaf);
}
END_TEST

START_TEST(v1_on_a_fake_tree)
{
	char tmpl[] = "/tmp/moat-cg-v1-XXXXXX";
	char *root = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(root);
	int fds = count_fds();
	struct moat_cgroup *cg = fake_record();
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		char *ctl = moat_cg_path(root, moat_cg_v1_name((enum moat_cg_v1ctl)i));
		ck_assert_int_eq(mkdir(ctl, 0755), 0);
		cg->v1_leaf[i] = moat_cg_path(ctl, "moat-1-t1-1");
		ck_assert_int_eq(mkdir(cg->v1_leaf[i], 0755), 0);
		put(cg->v1_leaf[i], "cgroup.procs", "");
		free(ctl);
	}
	const char *mem = cg->v1_leaf[MOAT_V1_MEMORY];
	put(mem, "memory.limit_in_bytes", "");
	put(mem, "memory.memsw.limit_in_bytes", "");
	put(mem, "memory.kmem.tcp.limit_in_bytes", "");
	put(mem, "memory.usage_in_bytes", "2048\n");
	put(cg->v1_leaf[MOAT_V1_PIDS], "pids.max", "");
	put(cg->v1_leaf[MOAT_V1_CPU], "cpu.cfs_period_us", "");
	put(cg->v1_leaf[MOAT_V1_CPU], "cpu.cfs_quota_us", "");
	put(cg->v1_leaf[MOAT_V1_CPUACCT], "cpuacct.usage", "3000000\n");
	cg_v1_set_pids(cg, 16);
	cg_v1_set_cpu(cg, 0.25);
	cg->mech[L_MEMORY] = MOAT_CG_V1;
	cg->v1_mem = 32 * MIB;
	cg->v1_memsw = cg->v1_tcp = true;
	struct moat_result res;
	memset(&res, 0, sizeof res);
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_cgroup_attach(cg, 4242, &res, &err), 0);
	expect(mem, "memory.limit_in_bytes", "33554432");
	expect(mem, "memory.memsw.limit_in_bytes", "33554432");
	expect(mem, "memory.kmem.tcp.limit_in_bytes", "33554432");
	expect(cg->v1_leaf[MOAT_V1_PIDS], "pids.max", "16");
	expect(cg->v1_leaf[MOAT_V1_CPU], "cpu.cfs_period_us", "100000");
	expect(cg->v1_leaf[MOAT_V1_CPU], "cpu.cfs_quota_us", "25000");
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		expect(cg->v1_leaf[i], "cgroup.procs", "4242");
		ck_assert_int_ge(cg->v1_fd[i], 0);
		ck_assert(fcntl(cg->v1_fd[i], F_GETFD) & FD_CLOEXEC);
	}
	ck_assert(moat_cgroup_charges_sockets(cg));
	ck_assert_int_eq(moat_cgroup_memory_now(cg), 2048);
	ck_assert_int_eq(moat_cgroup_cpu_ms(cg), 3);
	ck_assert_int_eq(moat_cgroup_kill(cg), -1); /* no v2 leaf: the caller kills */
	/* a leaf that cannot be created fails the run, naming it */
	struct moat_cgroup *bad = fake_record();
	bad->v1_leaf[MOAT_V1_PIDS] = moat_cg_path(root, "missing/moat-1-t1-2");
	ck_assert_int_eq(moat_cgroup_attach(bad, 4242, &res, &err), -1);
	ck_assert_msg(strstr(err.message, "missing/moat-1-t1-2"), "%s", err.message);
	moat_cgroup_finish(bad, NULL);
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		cg->v1_leaf[i][0] = '\0'; /* keep the fake tree for rm_tree */
	moat_cgroup_finish(cg, NULL);
	ck_assert_int_eq(count_fds(), fds);
	for (size_t i = 0; i < res.warnings_count; i++)
		free(res.warnings[i]);
	free(res.warnings);
	moat_error_clear(&err);
	rm_tree(root);
}
END_TEST

Suite *cgroups_suite(void)
{
	Suite *s = suite_create("cgroups");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, self_v1);
	tcase_add_test(tc, self_v2);
	tcase_add_test(tc, self_hybrid);
	tcase_add_test(tc, self_edge_cases);
	tcase_add_test(tc, common_ancestor);
	tcase_add_test(tc, memory_events);
	tcase_add_test(tc, pressure_totals);
	tcase_add_test(tc, pids_events_and_cpu_stat);
	tcase_add_test(tc, v1_oom_control);
	tcase_add_test(tc, single_numbers);
	tcase_add_test(tc, cpu_max_format);
	tcase_add_test(tc, leaf_names);
	tcase_add_test(tc, stat_starttime);
	tcase_add_test(tc, remove_stale_dirs);
	tcase_add_test(tc, file_helpers);
	tcase_add_test(tc, v2_on_a_fake_tree);
	tcase_add_test(tc, v1_on_a_fake_tree);
	tcase_add_test(tc, mech_names_and_describe);
	tcase_add_test(tc, null_safe);
	tcase_add_test(tc, delegation_decision);
	tcase_add_test(tc, user_bus_choice);
	tcase_add_test(tc, scope_names);
	tcase_add_test(tc, systemd_error_mapping);
	tcase_add_test(tc, delegate_without_bus_fails_with_reason);
	suite_add_tcase(s, tc);
	return s;
}
