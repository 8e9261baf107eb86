/* A session's sandbox through libmoat (src/pool/session.c over the
 * runner's session phases, docs/SESSIONS.md): state across steps, a
 * step's timeout, limits over the session's life, the driver's end,
 * output per step, the control channel untrusted, stop leaving nothing,
 * and the run's isolation. Each test runs in a forked worker (libmoat in
 * process, as root and as uid 65534: harness_worker_enter), which checks
 * and writes "ok" or what failed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "pool/session.h"
#include "suites.h"

#define MB (1024L * 1024L)

/* ---- the worker ---------------------------------------------------------- */

struct w {
	int fd;         /* what the test reads */
	int mode;
	char runtime[PATH_MAX];
	struct moat_run_options opts;
};

#define W_CHECK(w, cond, ...)                                                \
	do {                                                                 \
		if (!(cond)) {                                               \
			dprintf((w)->fd, "line %d: ", __LINE__);             \
			dprintf((w)->fd, __VA_ARGS__);                       \
			return 1;                                            \
		}                                                            \
	} while (0)

/* A session request: language, limits, cap; borrowed by the session for
 * pool_session_start only. */
static struct moat_request *session_req(enum moat_language lang, uint64_t memory_mb,
					uint64_t max_output)
{
	struct moat_request *r = moat_request_new();
	if (!r)
		return NULL;
	r->language = lang;
	r->memory_mb = memory_mb;
	if (max_output)
		r->max_output_bytes = max_output;
	return r;
}

static int start(struct w *w, enum moat_language lang, uint64_t memory_mb, uint64_t max_output,
		 struct pool_session **s, struct moat_error *err)
{
	struct moat_request *r = session_req(lang, memory_mb, max_output);
	if (!r)
		return -1;
	struct pool_session_config cfg = { .req = r, .opts = &w->opts,
					   .lifetime_ms = (uint64_t)harness_scale_ms(120000),
					   .ready_timeout_ms = (uint64_t)harness_scale_ms(30000) };
	int rc = pool_session_start(&cfg, s, err);
	moat_request_free(r); /* borrowed for the call only */
	return rc;
}

/* One step of code; *res and *extra are the caller's. */
static int step(struct pool_session *s, enum moat_language lang, const char *code,
		long timeout_ms, struct moat_result **res, char **extra, struct moat_error *err)
{
	struct moat_request *r = moat_request_new();
	if (!r)
		return -1;
	r->language = lang;
	r->code = strdup(code);
	r->code_len = strlen(code);
	r->timeout_ms = (uint64_t)harness_scale_ms(timeout_ms);
	int rc = pool_session_run(s, r, NULL, res, extra, err);
	moat_request_free(r);
	return rc;
}

static bool out_is(const struct moat_result *r, const char *want)
{
	return r->stdout_len == strlen(want) && !memcmp(r->stdout_buf, want, r->stdout_len);
}

static const char *lang_name(enum moat_language l)
{
	return l == MOAT_LANG_PYTHON ? "python" : "javascript";
}

/* Forks fn as a worker in mode and asserts it wrote "ok"; skipped when
 * the driver (runtime/<driver>) is not in the checkout. */
static void worker_driver(int mode, const char *driver, int (*fn)(struct w *w))
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	struct w w = { .fd = p[1], .mode = mode };
	snprintf(w.runtime, sizeof w.runtime, "%s", harness_runtime_dir());
	char drv[PATH_MAX + 64];
	snprintf(drv, sizeof drv, "%s/%s", w.runtime, driver);
	if (access(drv, R_OK) != 0) {
		close(p[0]);
		close(p[1]);
		harness_skip("the session driver %s is not in %s", driver, w.runtime);
		return;
	}
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		if (harness_worker_enter(mode) < 0)
			_exit(90);
		moat_run_options_init(&w.opts);
		w.opts.runtime_dir = w.runtime;
		int rc = fn(&w);
		if (rc == 0)
			dprintf(w.fd, "ok");
		_exit(rc);
	}
	close(p[1]);
	char buf[8192];
	size_t len = 0;
	ssize_t n;
	while (len < sizeof buf - 1 && (n = read(p[0], buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(p[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	harness_worker_leave(mode, pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !strcmp(buf, "ok"),
		      "mode %d: worker status %d: %s", mode, st, buf);
}

static void worker_run(int mode, int (*fn)(struct w *w))
{
	worker_driver(mode, "python/moat_session.py", fn);
}

/* ---- state ----------------------------------------------------------------- */

static int fifty_steps(struct w *w, enum moat_language lang)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, lang, 0, 0, &s, &err) == 0, "%s: start: %s", lang_name(lang),
		err.message);
	struct moat_result *r;
	char *extra;
	bool py = lang == MOAT_LANG_PYTHON;
	const char *init = py ? "x = 0\nimport json\nopen('keep.txt', 'w').write('kept')"
			      : "var x = 0;\nrequire('fs').writeFileSync('keep.txt', 'kept');";
	const char *inc = lang == MOAT_LANG_PYTHON ? "x += 1\nprint(x)" : "x += 1;\nconsole.log(x);";
	W_CHECK(w, step(s, lang, init, 20000, &r, &extra, &err) == 0, "%s", err.message);
	W_CHECK(w, r->exited && r->exit_code == 0, "init exit %d: %.*s", r->exit_code,
		(int)r->stderr_len, r->stderr_buf);
	moat_result_free(r);
	free(extra);
	for (int i = 1; i <= 50; i++) {
		W_CHECK(w, step(s, lang, inc, 20000, &r, &extra, &err) == 0, "step %d: %s", i,
			err.message);
		char want[16];
		snprintf(want, sizeof want, "%d\n", i);
		W_CHECK(w, r->exited && r->exit_code == 0 && out_is(r, want),
			"step %d: exit %d stdout [%.*s] stderr [%.*s]", i, r->exit_code,
			(int)r->stdout_len, r->stdout_buf, (int)r->stderr_len, r->stderr_buf);
		W_CHECK(w, r->cpu_time_ms >= 0 || r->cpu_time_ms == -1, "cpu %lld",
			(long long)r->cpu_time_ms);
		moat_result_free(r);
		free(extra);
	}
	/* the last expression's value (Python: its repr; node: util.inspect),
	 * of the globals, an import and a file of the first step */
	W_CHECK(w, step(s, lang, py ? "(json.dumps(x * 2), open('keep.txt').read())"
				    : "[x * 2, require('fs').readFileSync('keep.txt', 'utf8')]",
			20000, &r, &extra, &err) == 0, "%s", err.message);
	W_CHECK(w, extra && strstr(extra, py ? "\"value\":\"('100', 'kept')\""
					     : "\"value\":\"[ 100, 'kept' ]\""),
		"extra %s stderr [%.*s]", extra, (int)r->stderr_len, r->stderr_buf);
	moat_result_free(r);
	free(extra);
	W_CHECK(w, pool_session_runs(s) == 52, "runs %u", pool_session_runs(s));
	W_CHECK(w, pool_session_state(s, NULL, NULL) == POOL_SESSION_LIVE, "not live");
	pool_session_stop(s);
	return 0;
}

static int w_fifty_python(struct w *w)
{
	return fifty_steps(w, MOAT_LANG_PYTHON);
}

static int w_fifty_node(struct w *w)
{
	return fifty_steps(w, MOAT_LANG_JAVASCRIPT);
}

/* Globals and imports persist from step to step over 50 steps, and the
 * last expression is the value: Python ... */
START_TEST(state_across_50_steps)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_fifty_python);
}
END_TEST

/* ... and node (module-level state of the one global scope). */
START_TEST(state_across_50_steps_node)
{
	HARNESS_MODE_GUARD(_i);
	worker_driver(_i, "js/session.cjs", w_fifty_node);
}
END_TEST

/* ---- a step's timeout ------------------------------------------------------ */

static int w_timeout(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* interrupted (issue 46): KeyboardInterrupt in time.sleep, the session
	 * lives on */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "import time\nprint('before', flush=True)\n"
			"time.sleep(600)", 1000, &r, &extra, &err) == 0, "%s", err.message);
	W_CHECK(w, r->timed_out && !r->killed_by && extra && strstr(extra, "KeyboardInterrupt"),
		"timedOut %d killedBy %s extra %.300s", r->timed_out,
		r->killed_by ? r->killed_by : "null", extra ? extra : "");
	W_CHECK(w, out_is(r, "before\n"), "stdout [%.*s]", (int)r->stdout_len, r->stdout_buf);
	W_CHECK(w, pool_session_state(s, NULL, NULL) == POOL_SESSION_LIVE, "killed by an interrupt");
	moat_result_free(r);
	free(extra);
	/* one that ignores the interrupt: the whole sandbox killed after the
	 * grace (2 s) */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "import signal\nsignal.signal(signal.SIGINT, "
			"signal.SIG_IGN)\nprint('before', flush=True)\ntime.sleep(600)", 1000, &r,
			&extra, &err) == 0, "%s", err.message);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long took = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	W_CHECK(w, r->timed_out && r->killed_by && !strcmp(r->killed_by, "timeout"),
		"timedOut %d killedBy %s", r->timed_out, r->killed_by ? r->killed_by : "null");
	W_CHECK(w, out_is(r, "before\n"), "stdout [%.*s]", (int)r->stdout_len, r->stdout_buf);
	W_CHECK(w, took >= 3000 && took < harness_scale_ms(15000), "the step took %ld ms", took);
	moat_result_free(r);
	free(extra);
	const char *reason = NULL, *sentence = NULL;
	W_CHECK(w, pool_session_state(s, &reason, &sentence) == POOL_SESSION_KILLED, "state");
	W_CHECK(w, reason && !strcmp(reason, "timeout"), "reason %s", reason);
	W_CHECK(w, sentence && strstr(sentence, "did not stop within 2000 ms"), "sentence %s",
		sentence);
	/* and the session takes no more steps */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print(1)", 5000, &r, &extra, &err) < 0,
		"a step ran in a killed session");
	W_CHECK(w, strstr(err.message, "timed out"), "error %s", err.message);
	pool_session_stop(s);
	return 0;
}

/* A step that passes its timeout is interrupted and the session lives
 * on; one that ignores the interrupt kills the whole session after the
 * grace, says so, and the session answers no more steps. */
START_TEST(step_timeout_kills_session)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_timeout);
}
END_TEST

/* ---- limits over the life ---------------------------------------------------- */

static int w_memory(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
#define GROW(n) "a" #n " = b'x' * (40 << 20)\nprint('grown', flush=True)"
	/* one step alone fits in 64 MiB */
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 64, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, GROW(1), 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	W_CHECK(w, r->exited && r->exit_code == 0 && out_is(r, "grown\n"),
		"step 1: exit %d killedBy %s stderr [%.*s]", r->exit_code,
		r->killed_by ? r->killed_by : "null", (int)r->stderr_len, r->stderr_buf);
	bool cgroup = r->limit_memory && strcmp(r->limit_memory, "rlimit") &&
		      strcmp(r->limit_memory, "none");
	W_CHECK(w, w->mode == MODE_ROOTLESS || cgroup, "root without a memory cgroup: %s",
		r->limit_memory);
	moat_result_free(r);
	free(extra);
	/* what step 1 keeps counts in step 2: 80 MiB do not fit */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, GROW(2), 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	W_CHECK(w, !out_is(r, "grown\n"), "step 2 grew past the limit");
	const char *reason = NULL;
	enum pool_session_state st = pool_session_state(s, &reason, NULL);
	/* the allocation fails in the interpreter (issue 46: the driver's
	 * RLIMIT_DATA below the cgroup's limit), the session lives on */
	W_CHECK(w, r->exited && r->exit_code == 1 && extra && strstr(extra, "MemoryError") &&
		st == POOL_SESSION_LIVE, "exit %d state %d reason %s extra %.300s", r->exit_code, st,
		reason ? reason : "null", extra ? extra : "");
	if (!cgroup) {
		/* RLIMIT_DATA: the allocation fails in the interpreter, and
		 * each step's result says which limit it had */
		W_CHECK(w, r->exited && r->exit_code == 1 && extra && strstr(extra, "MemoryError"),
			"exit %d extra %s", r->exit_code, extra);
		bool said = false;
		for (size_t i = 0; i < r->warnings_count; i++)
			said = said || strstr(r->warnings[i], "RLIMIT_DATA");
		W_CHECK(w, said && r->limit_memory && !strcmp(r->limit_memory, "rlimit"),
			"step 2 does not say its memory limit is an rlimit (%s)", r->limit_memory);
	}
	moat_result_free(r);
	free(extra);
	pool_session_stop(s);
	return 0;
}

/* The session's memory limit holds over its whole life: 40 MiB kept by
 * step 1 and 40 more in step 2 pass 64 MiB (MemoryError: the driver's
 * RLIMIT_DATA under a cgroup, moat's rootless), though each step alone fits. */
START_TEST(memory_grown_in_step_1_counts_in_step_2)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_memory);
}
END_TEST

/* ---- the interpreter's end ----------------------------------------------------- */

static int w_exit(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	/* SystemExit: the step's exit code, the session goes on */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "raise SystemExit(4)", 20000, &r, &extra, &err) == 0,
		"%s", err.message);
	W_CHECK(w, r->exited && r->exit_code == 4, "exit %d", r->exit_code);
	W_CHECK(w, pool_session_state(s, NULL, NULL) == POOL_SESSION_LIVE, "not live");
	moat_result_free(r);
	free(extra);
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "import os\nprint('bye', flush=True)\nos._exit(3)",
			20000, &r, &extra, &err) == 0, "%s", err.message);
	W_CHECK(w, r->exited && r->exit_code == 3 && out_is(r, "bye\n"),
		"exit %d/%d killedBy %s stdout [%.*s]", r->exited, r->exit_code,
		r->killed_by ? r->killed_by : "null", (int)r->stdout_len, r->stdout_buf);
	moat_result_free(r);
	free(extra);
	const char *reason = NULL;
	W_CHECK(w, pool_session_state(s, &reason, NULL) == POOL_SESSION_ENDED, "not ended");
	W_CHECK(w, reason && !strcmp(reason, "exit"), "reason %s", reason);
	pool_session_stop(s);
	return 0;
}

/* os._exit ends the session ("ended", the step's exit code); SystemExit
 * does not. */
START_TEST(interpreter_exit_ends_session)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_exit);
}
END_TEST

/* ---- a sandbox that dies between steps ------------------------------------------ */

static long mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The worker's one child: the session's pid 1 (0 when not exactly one). */
static pid_t only_child(void)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
	FILE *f = fopen(path, "re");
	long a = 0, b = 0;
	int n = f ? fscanf(f, "%ld %ld", &a, &b) : 0;
	if (f)
		fclose(f);
	return n == 1 ? (pid_t)a : 0;
}

static int w_dies_between(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "a = 1", 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	moat_result_free(r);
	free(extra);
	/* alive: the watch changes nothing */
	W_CHECK(w, !pool_session_watch(s) && pool_session_state(s, NULL, NULL) == POOL_SESSION_LIVE,
		"a live session's watch ended it");
	pid_t pid1 = only_child();
	W_CHECK(w, pid1 > 0, "the session's pid 1 is not this worker's one child");
	W_CHECK(w, kill(pid1, SIGKILL) == 0, "kill pid 1: %s", strerror(errno));
	long t0 = mono_ms();
	while (!pool_session_watch(s) && mono_ms() - t0 < harness_scale_ms(2000))
		usleep(20000);
	const char *reason = NULL, *sentence = NULL;
	W_CHECK(w, pool_session_state(s, &reason, &sentence) == POOL_SESSION_KILLED,
		"not killed %ld ms after its pid 1 was", mono_ms() - t0);
	W_CHECK(w, reason && !strcmp(reason, "crash") && sentence &&
			   strstr(sentence, "killed between runs (signal 9)"),
		"reason %s: %s", reason ? reason : "null", sentence ? sentence : "null");
	/* the next step does not run: the session is over, with why */
	r = NULL;
	extra = NULL;
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print(a)", 20000, &r, &extra, &err) < 0 &&
			   strstr(err.message, "between runs"),
		"a step after the death: %s", r ? "it ran" : err.message);
	moat_error_clear(&err);
	pool_session_stop(s);
	W_CHECK(w, only_child() == 0, "pid 1 not reaped by stop");
	return 0;
}

/* pid 1 killed from outside while no step runs: pool_session_watch sees it,
 * the session is killed with the reason, the next step refused. */
START_TEST(death_between_steps_is_seen)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_dies_between);
}
END_TEST

/* ---- output per step ---------------------------------------------------------- */

static int w_output(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 1000000, &s, &err) == 0, "start: %s",
		err.message);
	struct moat_result *r;
	char *extra;
	/* written just before done into pipes made 1 MiB large (more than
	 * one read of the pump): all of it counted in this step */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON,
			"import sys, fcntl\n"
			"for fd in (1, 2):\n"
			"    fcntl.fcntl(fd, 1031, 1 << 20)\n"
			"sys.stdout.write('o' * 900000)\nsys.stderr.write('e' * 700000)",
			20000, &r, &extra, &err) == 0, "%s", err.message);
	W_CHECK(w, r->stdout_len == 900000 && r->stderr_len == 700000 && !r->stdout_truncated,
		"stdout %zu stderr %zu", r->stdout_len, r->stderr_len);
	moat_result_free(r);
	free(extra);
	/* the cap is per step: 1200000 bytes cut at 1000000 ... */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print('p' * 1199999)", 20000, &r, &extra, &err) == 0,
		"%s", err.message);
	W_CHECK(w, r->stdout_len == 1000000 && r->stdout_truncated, "stdout %zu truncated %d",
		r->stdout_len, r->stdout_truncated);
	moat_result_free(r);
	free(extra);
	/* ... and the next step starts from nothing: its own output only */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print('next')", 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	W_CHECK(w, out_is(r, "next\n") && !r->stdout_truncated && r->stderr_len == 0,
		"stdout [%.*s] truncated %d stderr %zu", (int)(r->stdout_len > 64 ? 64 : r->stdout_len),
		r->stdout_buf, r->stdout_truncated, r->stderr_len);
	moat_result_free(r);
	free(extra);
	pool_session_stop(s);
	return 0;
}

/* Everything a step writes before its done frame is that step's output
 * (drained after done, more than a pipe holds), capped per step, and the
 * next step starts with nothing. */
START_TEST(output_per_step)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_output);
}
END_TEST

/* ---- the control channel ------------------------------------------------------- */

static int forged(struct w *w, const char *code, const char *what)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, code, 20000, &r, &extra, &err) == 0, "%s: %s", what,
		err.message);
	W_CHECK(w, r->killed_by && !strcmp(r->killed_by, "protocol") && !r->exited,
		"%s: killedBy %s exited %d stderr [%.*s]", what,
		r->killed_by ? r->killed_by : "null", r->exited, (int)r->stderr_len,
		r->stderr_buf);
	moat_result_free(r);
	free(extra);
	const char *reason = NULL;
	W_CHECK(w, pool_session_state(s, &reason, NULL) == POOL_SESSION_KILLED, "%s: state", what);
	W_CHECK(w, reason && !strcmp(reason, "protocol"), "%s: reason %s", what, reason);
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print(1)", 5000, &r, &extra, &err) < 0,
		"%s: a step ran after", what);
	pool_session_stop(s);
	return 0;
}

static int w_forged(struct w *w)
{
	static const char *const cases[][2] = {
		{ "import os\nos.write(3, b'garbage\\n')\nimport time\ntime.sleep(30)", "garbage" },
		/* 11 digits, and 16 MiB + 1 */
		{ "import os\nos.write(3, b'MOATSESS1 99999999999\\n')\nimport time\ntime.sleep(30)",
		  "long length" },
		{ "import os\nos.write(3, b'MOATSESS1 16777217\\n' + b'{' * 65536)\n"
		  "import time\ntime.sleep(30)", "oversized" },
		/* a well-formed frame that is not this step's done */
		{ "import os, json\nb = json.dumps({'type': 'done', 'seq': 999, 'exitCode': 0})"
		  ".encode()\nos.write(3, b'MOATSESS1 %d\\n' % len(b) + b)\n"
		  "import time\ntime.sleep(30)", "another step's done" },
		{ "import os, json\nb = json.dumps({'type': 'done', 'seq': 1, 'exitCode': 0, "
		  "'value': 7}).encode()\nos.write(3, b'MOATSESS1 %d\\n' % len(b) + b)\n"
		  "import time\ntime.sleep(30)", "a value that is not a string" },
		{ "import os\nos.write(3, b'MOATSESS1 5\\n[1,2]')\nimport time\ntime.sleep(30)",
		  "not an object" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (forged(w, cases[i][0], cases[i][1]))
			return 1;
	return 0;
}

/* The program shares the driver's process and can write to the control
 * socket: a frame with a bad header, a length past 16 MiB, another step's
 * done or a done of the wrong shape kills the session ("protocol"),
 * without waiting for the step's timeout and without harm to the host. */
START_TEST(forged_frame_kills_session)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_forged);
}
END_TEST

/* ---- stop ----------------------------------------------------------------------- */

static int w_stop(struct w *w)
{
	char marker[96];
	harness_marker(marker, sizeof marker, "moatsess", w->mode);
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	char code[512];
	/* a child and a daemonised grandchild, both outliving the step */
	snprintf(code, sizeof code,
		 "import subprocess\n"
		 "p = subprocess.Popen(['python3', '-c', 'import time; time.sleep(600)', '%s'])\n"
		 "subprocess.Popen(['sh', '-c', 'setsid python3 -c \"import time; "
		 "time.sleep(600)\" %s &'])\n"
		 "import time\ntime.sleep(0.5)\nprint('started')", marker, marker);
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, code, 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	W_CHECK(w, out_is(r, "started\n"), "stdout [%.*s] stderr [%.*s]", (int)r->stdout_len,
		r->stdout_buf, (int)r->stderr_len, r->stderr_buf);
	moat_result_free(r);
	free(extra);
	int before = harness_count_marker(marker);
	W_CHECK(w, before == 2, "%d processes with the marker before stop", before);
	pool_session_stop(s);
	int after = harness_count_marker(marker);
	W_CHECK(w, after == 0, "%d processes left after stop", after);
	return 0;
}

/* pool_session_stop returns once every process of the session is gone,
 * the interpreter's children and daemons included. */
START_TEST(stop_leaves_no_process)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_stop);
}
END_TEST

/* ---- cancel ---------------------------------------------------------------------- */

struct killer {
	struct pool_session *s;
	long after_ms;
};

static void *kill_later(void *arg)
{
	struct killer *k = arg;
	struct timespec ts = { k->after_ms / 1000, (k->after_ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
	pool_session_kill(k->s);
	return NULL;
}

static int w_kill(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct killer k = { s, harness_scale_ms(500) };
	pthread_t t;
	W_CHECK(w, pthread_create(&t, NULL, kill_later, &k) == 0, "pthread_create");
	struct moat_result *r;
	char *extra;
	int rc = step(s, MOAT_LANG_PYTHON, "import time\ntime.sleep(600)", 60000, &r, &extra, &err);
	pthread_join(t, NULL);
	W_CHECK(w, rc == 0, "%s", err.message);
	W_CHECK(w, r->killed_by && !strcmp(r->killed_by, "cancelled") && !r->timed_out,
		"killedBy %s", r->killed_by ? r->killed_by : "null");
	moat_result_free(r);
	free(extra);
	const char *reason = NULL;
	W_CHECK(w, pool_session_state(s, &reason, NULL) == POOL_SESSION_KILLED &&
		reason && !strcmp(reason, "cancelled"), "reason %s", reason);
	pool_session_stop(s);
	return 0;
}

/* pool_session_kill from another thread ends a running step ("cancelled")
 * and the session. */
START_TEST(kill_ends_running_step)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_kill);
}
END_TEST

/* ---- isolation ------------------------------------------------------------------- */

static int w_isolation(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s;
	W_CHECK(w, start(w, MOAT_LANG_PYTHON, 0, 0, &s, &err) == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	const char *probe =
		"import os, socket, ctypes, errno\n"
		"st = open('/proc/self/status').read()\n"
		"print('uid', os.getuid(), os.getgid())\n"
		"print([l for l in st.splitlines() if l.startswith(('NoNewPrivs', 'Seccomp:', "
		"'CapEff'))])\n"
		"print('fds', sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
		"try:\n"
		"    socket.create_connection(('1.1.1.1', 80), timeout=2); print('net open')\n"
		"except OSError as e:\n"
		"    print('net refused')\n"
		"try:\n"
		"    open('/usr/moat-session-probe', 'w'); print('root writable')\n"
		"except OSError as e:\n"
		"    print('root', errno.errorcode[e.errno])\n"
		"libc = ctypes.CDLL(None, use_errno=True)\n"
		"rc = libc.unshare(0x10000000)\n"
		"print('unshare', rc, errno.errorcode.get(ctypes.get_errno()))\n"
		"print('pid', os.getpid())\n";
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, probe, 20000, &r, &extra, &err) == 0, "%s",
		err.message);
	char *out = strndup(r->stdout_buf ? r->stdout_buf : "", r->stdout_len);
	static const char *const want[] = {
		"uid 65534 65534\n", "'NoNewPrivs:\\t1'", "'Seccomp:\\t2'",
		"'CapEff:\\t0000000000000000'", "fds [0, 1, 2, 3, 4]\n", "net refused\n",
		"root EROFS\n", "unshare -1 EPERM\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		W_CHECK(w, out && strstr(out, want[i]), "no [%s] in:\n%s\nstderr %.*s", want[i], out,
			(int)r->stderr_len, r->stderr_buf);
	free(out);
	moat_result_free(r);
	free(extra);
	pool_session_stop(s);
	return 0;
}

/* A session's sandbox is a run's: uid 65534, no capabilities, no_new_privs
 * and the filter (a refused unshare), no network, a read-only root; its
 * program holds fds 0-2 and the control socket only (fd 4 here is the
 * listing's own). */
START_TEST(session_has_run_isolation)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_isolation);
}
END_TEST

static int w_kv(struct w *w)
{
	char dir[] = "/tmp/moat-session-kv.XXXXXX", file[64];
	W_CHECK(w, mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(file, sizeof file, "%s/kv.sqlite3", dir);
	w->opts.kv_store = file;
	struct moat_request *q = session_req(MOAT_LANG_PYTHON, 0, 0);
	W_CHECK(w, q != NULL, "oom");
	q->kv_enabled = true;
	q->sandbox_id = strdup("agent-7");
	q->sandbox_id_len = strlen(q->sandbox_id);
	struct pool_session_config cfg = { .req = q, .opts = &w->opts,
					   .lifetime_ms = (uint64_t)harness_scale_ms(120000) };
	struct moat_error err = { 0 };
	struct pool_session *s;
	int rc = pool_session_start(&cfg, &s, &err);
	moat_request_free(q);
	W_CHECK(w, rc == 0, "start: %s", err.message);
	struct moat_result *r;
	char *extra;
	/* the store in one step, read back in the next; the fds the
	 * program holds: 0-2, the control socket 3, the store 4 */
	W_CHECK(w, step(s, MOAT_LANG_PYTHON,
			"import os\nfrom spin_sdk import key_value\n"
			"st = key_value.open_default()\nst.set('k', b'v1')\n"
			"print(sorted(int(f) for f in os.listdir('/proc/self/fd')))", 20000, &r,
			&extra, &err) == 0, "%s", err.message);
	W_CHECK(w, out_is(r, "[0, 1, 2, 3, 4, 5]\n"), "stdout [%.*s] stderr [%.*s]",
		(int)r->stdout_len, r->stdout_buf, (int)r->stderr_len, r->stderr_buf);
	moat_result_free(r);
	free(extra);
	W_CHECK(w, step(s, MOAT_LANG_PYTHON, "print(st.get('k'))", 20000, &r, &extra, &err) == 0,
		"%s", err.message);
	W_CHECK(w, out_is(r, "b'v1'\n"), "stdout [%.*s] stderr [%.*s]", (int)r->stdout_len,
		r->stdout_buf, (int)r->stderr_len, r->stderr_buf);
	moat_result_free(r);
	free(extra);
	pool_session_stop(s);
	char cmd[96];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	W_CHECK(w, system(cmd) == 0, "rm");
	return 0;
}

/* kvEnabled: the store's socket (fd 4) next to the control socket (fd 3),
 * kept across steps. */
START_TEST(session_with_store)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_kv);
}
END_TEST

static int w_refuses(struct w *w)
{
	struct moat_error err = { 0 };
	struct pool_session *s = NULL;
	struct moat_request *r = session_req(MOAT_LANG_TYPESCRIPT, 0, 0);
	struct pool_session_config cfg = { .req = r, .opts = &w->opts };
	int rc = pool_session_start(&cfg, &s, &err);
	moat_request_free(r);
	W_CHECK(w, rc < 0 && !s && err.type == MOAT_ERR_CONFIG && strstr(err.message, "Python"),
		"typescript: rc %d: %s", rc, err.message);
	return 0;
}

/* Sessions take Python or JavaScript only, with a clear config error. */
START_TEST(other_languages_refused)
{
	HARNESS_MODE_GUARD(_i);
	worker_run(_i, w_refuses);
}
END_TEST

Suite *pool_session_suite(void)
{
	Suite *s = suite_create("pool_session");
	TCase *tc = tcase_create("pool_session");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, state_across_50_steps, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, state_across_50_steps_node, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, interpreter_exit_ends_session, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, death_between_steps_is_seen, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, output_per_step, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, forged_frame_kills_session, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, session_has_run_isolation, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, session_with_store, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, other_languages_refused, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	/* what the session's cgroup does (memory held across steps, the kill of
	 * the whole tree on a timeout, a kill and a stop): make check-vm runs
	 * this case on cgroup v2 (VM_SUITES pool_session/pool_session_cgroup) */
	TCase *cg = tcase_create("pool_session_cgroup");
	tcase_set_timeout(cg, 600);
	tcase_add_loop_test(cg, step_timeout_kills_session, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(cg, memory_grown_in_step_1_counts_in_step_2, MODE_ROOT,
			    MODE_ROOTLESS + 1);
	tcase_add_loop_test(cg, stop_leaves_no_process, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(cg, kill_ends_running_step, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, cg);
	return s;
}
