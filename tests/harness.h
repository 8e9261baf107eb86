/* Integration test harness: runs the built moat binary for real, as root and
 * as uid 65534 (rootless), and parses its JSON. */
#ifndef MOAT_TESTS_HARNESS_H
#define MOAT_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <check.h>
#include <cjson/cJSON.h>

#include "fixture_path.h"
#include "skip.h"

/* MOAT_TESTS=name,name...: only the tests of those names are added to their
 * tcase (unset or empty: every test). Every tcase_add_test and
 * tcase_add_loop_test of a file that includes this header goes through it;
 * with CK_RUN_SUITE it picks tests inside one suite, as CK_RUN_CASE picks a
 * tcase (tests/deploy/seccomp.sh runs one representative test per suite
 * under the pod's seccomp profile this way, and counts that it ran). */
static inline bool harness_test_selected(const char *name)
{
	const char *list = getenv("MOAT_TESTS");
	if (!list || !*list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ", ");
		if (len == n && !strncmp(p, name, n))
			return true;
		p += len;
		p += strspn(p, ", ");
	}
	return false;
}
static inline void harness_add_test(TCase *tc, const TTest *t, int start, int end)
{
	if (harness_test_selected(t->name))
		_tcase_add_test(tc, t, 0, 0, start, end);
}
#undef tcase_add_test
#undef tcase_add_loop_test
#define tcase_add_test(tc, t) harness_add_test((tc), (t), 0, 1)
#define tcase_add_loop_test(tc, t, s, e) harness_add_test((tc), (t), (s), (e))

/* Loop-test index → mode: 0 = as root (when the harness is root), 1 = rootless. */
#define MODE_ROOT 0
#define MODE_ROOTLESS 1
/* A host environment variable the harness sets for moat; it must never be
 * visible inside a sandbox. */
#define HARNESS_CANARY_NAME "MOAT_HOST_CANARY"
#define HARNESS_CANARY_VALUE "host-secret-4f1d"

struct run_out {
	int status;        /* exit status of moat, or 128+signal */
	char *out;
	size_t out_len;
	char *err;
	size_t err_len;
	cJSON *json;       /* stdout parsed as JSON, or NULL */
};

/* Path of a copy of $MOAT_BIN that uid 65534 can execute. */
const char *harness_moat(void);
/* Path of a copy of the file name beside $MOAT_BIN (moat-zygote.so), made
 * beside harness_moat()'s copy, where uid 65534 can read it. */
const char *harness_beside_moat(const char *name);
/* true when the harness can run the root mode (it runs as root). */
bool harness_is_root(void);
/* How much slower than the development host this machine starts and runs
 * processes: $MOAT_TEST_SLOWDOWN (tools/vm/run-vm.sh sets 40 under TCG), at
 * least 1; 1 when unset or not a number. Scales the harness's watchdog and
 * the tests' wall-time timeouts, sleeps and bands. */
double harness_slowdown(void);
/* ms scaled by harness_slowdown(), for wall-time values. */
long harness_scale_ms(long ms);

/* CLOCK_MONOTONIC in milliseconds; a sleep of ms that EINTR does not cut
 * short. */
long harness_now_ms(void);
void harness_sleep_ms(long ms);

/* A pidfd (close-on-exec) of pid, opened while the caller knows pid is the
 * process it means; fails the test when pid is gone. It names that process
 * and no other: asked later, "does it still exist" cannot be answered by a
 * process that got its number since (pid_max is 32768 on the development
 * hosts, and several test runs at once cycle through it; issue 49). */
int harness_pidfd(pid_t pid);
/* Does the process of pidfd still exist (running, or a zombie not yet
 * reaped)? */
bool harness_pidfd_exists(int pidfd);

/* As root, into a network namespace of the test's own: loopback up,
 * nothing else. 0, or -1 after saying why. */
int harness_private_netns(void);
/* A test that checks a TCP port is closed, or starts a server on a port it
 * found free earlier, calls this first: in the host's namespace another
 * program (a parallel test run) can take the port in between, and "open",
 * EADDRINUSE or another server's answer then says nothing of moat (issue
 * 49: a port compared across processes that need not hold it together).
 * harness_private_netns, or, where it cannot be made, a note that the
 * test's ports stay the host's. */
void harness_private_ports(void);
/*
 * Cgroups the environment provides for moat (tools/vm sets both):
 *  - MOAT_TEST_ROOT_CGROUP: a cgroup2 directory with the memory, pids and cpu
 *    controllers enabled in its subtree; root-mode runs get it as
 *    MOAT_CGROUP_PARENT.
 *  - MOAT_TEST_ROOTLESS_CGROUP: the same, delegated to uid 65534. For each
 *    rootless run the harness (as root, before dropping privileges) moves the
 *    child into a leaf h-<pid> of it, owned by 65534, and passes the subtree
 *    as MOAT_CGROUP_PARENT; the leaf is removed after the run. Only when the
 *    harness runs as root: otherwise it cannot put moat into the subtree.
 * Unset: moat gets no MOAT_CGROUP_PARENT and picks its cgroup itself.
 * Returns the directory for mode, or NULL. */
const char *harness_cgroup_parent(int mode);
/* For a test's own forked worker that runs libmoat in-process instead of
 * the moat binary: in the worker, what harness_start arranges for moat
 * (MOAT_CGROUP_PARENT from harness_cgroup_parent, HOME, rootless: the
 * worker's cgroup leaf and the drop to 65534, dumpable kept). 0, or -1
 * after saying why on stderr. harness_worker_leave, in the test once the
 * worker was reaped, removes that leaf. */
int harness_worker_enter(int mode);
void harness_worker_leave(int mode, pid_t worker);
/* Runs moat with args (NULL-terminated, without argv[0]) in mode, feeding
 * stdin: harness_start with the harness's environment and no prep, then
 * harness_finish. Aborts the test on harness failure. */
void harness_run(int mode, const char *const *args, const char *stdin_data, size_t stdin_len,
		 struct run_out *out);

/* A step the forked child runs before it execs moat: after its stdin, stdout
 * and stderr are wired (and, rootless, it joined its cgroup leaf), with the
 * harness's privileges, so as root when the harness is root, also for the
 * rootless mode: the drop to 65534 comes after it. 0, or -1 after saying why
 * on stderr (the child then exits 97). */
typedef int (*harness_prep_fn)(int mode, void *arg);

/* A moat started by harness_start and not yet finished. */
struct harness_proc {
	pid_t pid;   /* moat: the test may signal it before harness_finish */
	int out;     /* read end of moat's stdout: the test may read the start of
		      * it itself before harness_finish (what it reads is its own) */
	int err;     /* read end of moat's stderr */
	/* the harness's */
	int in;               /* write end of moat's stdin, or -1 once closed */
	const char *in_data;  /* what is left to feed: in_data[in_off..in_len) */
	size_t in_len, in_off;
	const char *leaf_parent; /* the rootless child's cgroup leaf is under it, or NULL */
};

/* Starts moat with args (NULL-terminated, without argv[0]) in mode and
 * returns without waiting for it. env: NULL for the harness's environment
 * (PATH, HOME, the canary, MOAT_CGROUP_PARENT from harness_cgroup_parent and,
 * rootless, the cgroup leaf), or exactly these variables (NULL-terminated),
 * and then no cgroup is arranged: moat picks its own. prep: NULL, or run in
 * the child with arg (see harness_prep_fn). stdin_data is fed as the pipe
 * takes it, here and in harness_finish, then stdin is closed; it must stay
 * valid until harness_finish. Aborts the test on harness failure. */
void harness_start(int mode, const char *const *args, const char *stdin_data, size_t stdin_len,
		   const char *const *env, harness_prep_fn prep, void *arg, struct harness_proc *p);
/* Feeds the rest of stdin, reads moat's stdout and stderr to EOF (appended to
 * out->out and out->err, which start zeroed or hold what the test read from
 * p->out), reaps moat (out->status) and parses stdout (out->json). Kills moat
 * and aborts the test after harness_scale_ms(120 s). */
void harness_finish(struct harness_proc *p, struct run_out *out);
/* The host's TCP socket memory now, in pages: /proc/net/sockstat's "TCP:
 * ... mem N" (one count for the whole kernel, every network namespace
 * included); -1 when it cannot be read. */
long harness_tcp_mem_pages(void);
/* Between harness_start and harness_finish: samples harness_tcp_mem_pages
 * every 20 ms, feeding stdin, until moat's stdout becomes readable (moat
 * exec writes its result once the run is over) or the watchdog's time
 * passed; the highest sample. */
long harness_tcp_mem_peak(struct harness_proc *p);
/* moat exec with a JSON request; out->json is the parsed result or error. */
void harness_exec(int mode, const char *request_json, struct run_out *out);
/* Convenience: exec a request {"language":lang,"code":code,...extra} where
 * extra_json is "" or ",\"key\":value..." */
void harness_exec_code(int mode, const char *lang, const char *code, const char *extra_json,
		       struct run_out *out);
void harness_free(struct run_out *out);
/* Writes "<tag><pid>x<index>r<64 random bits in hex>" to buf: a marker for
 * the command lines of one test run that no other process on the machine
 * carries (not a leftover of an earlier run whose pid was reused, not a run
 * in another pid namespace with the same pid). Letters and digits only. */
void harness_marker(char *buf, size_t size, const char *tag, int index);
/* Number of host processes whose command line contains marker. */
int harness_count_marker(const char *marker);
/* The runtime shims of the checkout that built $MOAT_BIN (its ../runtime),
 * as a real path; aborts the test when there is none. */
const char *harness_runtime_dir(void);
/* A redis-server on a free 127.0.0.1 port (append-only, fsync always) in a
 * new directory: its pid, spec "redis://127.0.0.1:PORT/0" and dir; 0 when
 * redis-server or redis-cli is not installed (the caller skips). */
pid_t harness_redis_start(char *spec, size_t spec_size, char *dir, size_t dir_size);
void harness_redis_stop(pid_t pid, const char *dir);
/* JSON helpers on out->json */
const char *harness_str(const struct run_out *out, const char *key);   /* NULL if absent/null */
double harness_num(const struct run_out *out, const char *key);        /* NAN if absent/null */
bool harness_bool(const struct run_out *out, const char *key);
bool harness_is_null(const struct run_out *out, const char *key);
/* The result's limits.<key> (asserted to be a string). */
const char *harness_limit_of(const struct run_out *out, const char *key);
/* The number of entries of the result's warnings (asserted to be an array). */
int harness_warning_count(const struct run_out *out);
/* Some warning of the result contains needle. */
bool harness_has_warning(const struct run_out *out, const char *needle);
/* /sys/fs/cgroup is a pure cgroup v2 hierarchy (tools/vm), not v1 or hybrid. */
bool harness_unified_host(void);
const char *harness_error_type(const struct run_out *out);            /* NULL if no error */
/* A JSON string literal (with quotes) for s: malloc'd. */
char *harness_json_quote(const char *s);
/* Skips root-mode iterations when the harness is not root, saying so. */
#define HARNESS_MODE_GUARD(mode)                                                     \
	do {                                                                         \
		if ((mode) == MODE_ROOT && !harness_is_root()) {                    \
			harness_skip("%s root mode needs root", __func__); \
			return;                                                      \
		}                                                                    \
	} while (0)

#endif
