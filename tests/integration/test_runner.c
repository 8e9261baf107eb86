/* End-to-end behaviour of a run: languages, exit codes, inputs, outputs,
 * timeouts, process cleanup, output caps, limits. Each test runs as root and
 * rootless (loop index = harness mode). */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "harness.h"
#include "core/sys.h"
#include "runner/run.h"
#include "pool/pool.h"
#include "pool/zygote.h"
#include "suites.h"

/* ---- helpers ---------------------------------------------------------------- */

/* A marker unique to this test process and mode, for /proc scans. */
/* what, the pid, mode and random bits: see harness_marker */
static void make_marker(char *buf, size_t len, const char *what, int mode)
{
	char tag[64];
	snprintf(tag, sizeof tag, "moat%s", what);
	harness_marker(buf, len, tag, mode);
}

/* Asserts a normal exit with exitCode code and returns stdout. */
static const char *expect_exit(const struct run_out *o, int code)
{
	ck_assert_msg(o->status == 0, "moat exec status %d: %s %s", o->status, o->out, o->err);
	ck_assert_msg(harness_error_type(o) == NULL, "error result: %s", o->out);
	ck_assert_msg(harness_num(o, "exitCode") == code, "exitCode != %d: %s", code, o->out);
	ck_assert_msg(!harness_bool(o, "timedOut"), "timed out: %s", o->out);
	const char *so = harness_str(o, "stdout");
	ck_assert_msg(so != NULL, "no stdout in %s", o->out);
	return so;
}

static void expect_lang(int mode, const char *lang, const char *code, const char *want)
{
	struct run_out o;
	/* the default 30 s is wall time: node under TCG (make check-vm) came
	 * within it and once past it; this test is about languages, not time */
	char extra[64];
	snprintf(extra, sizeof extra, ",\"timeout\":%ld", harness_scale_ms(30000));
	harness_exec_code(mode, lang, code, extra, &o);
	const char *so = expect_exit(&o, 0);
	ck_assert_msg(strcmp(so, want) == 0, "%s (mode %d): stdout [%s], want [%s]; stderr [%s]",
		      lang, mode, so, want, harness_str(&o, "stderr"));
	ck_assert_str_eq(harness_str(&o, "stderr"), "");
	ck_assert_str_eq(harness_str(&o, "provider"), "native");
	ck_assert(harness_is_null(&o, "signal"));
	ck_assert(harness_is_null(&o, "killedBy"));
	harness_free(&o);
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(every_language_runs)
{
	HARNESS_MODE_GUARD(_i);
	expect_lang(_i, "python", "import sys\nprint('py', sys.version_info[0])", "py 3\n");
	expect_lang(_i, "javascript", "const a = [1, 2, 3];\nconsole.log('js', a.reduce((x, y) => x + y));",
		    "js 6\n");
	expect_lang(_i, "typescript",
		    "interface Point { x: number; y: number }\n"
		    "type Label = `p${number}`;\n"
		    "function add(p: Point): number { return p.x + p.y; }\n"
		    "const p: Point = { x: 40, y: 2 };\n"
		    "const l: Label = `p${add(p)}`;\n"
		    "console.log(`ts ${add(p)} ${l}`);",
		    "ts 42 p42\n");
	expect_lang(_i, "bash", "declare -A m=([k]=v)\necho \"bash ${m[k]} $((6*7))\"", "bash v 42\n");
	expect_lang(_i, "sh", "x=4; echo \"sh $((x+1))\"", "sh 5\n");
}
END_TEST

START_TEST(run_prints_42)
{
	HARNESS_MODE_GUARD(_i);
	const char *args[] = { "run", "-l", "python", "-c", "print(6*7)", NULL };
	struct run_out o;
	harness_run(_i, args, NULL, 0, &o);
	ck_assert_msg(o.status == 0, "status %d, stderr %s", o.status, o.err);
	ck_assert_str_eq(o.out, "42\n");
	ck_assert_str_eq(o.err, "");
	harness_free(&o);
}
END_TEST

START_TEST(exit_code_propagates)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "python", "import sys\nprint('bye')\nsys.exit(7)", "", &o);
	ck_assert_str_eq(expect_exit(&o, 7), "bye\n");
	ck_assert(harness_is_null(&o, "killedBy"));
	harness_free(&o);

	harness_exec_code(_i, "bash", "exit 213", "", &o);
	expect_exit(&o, 213);
	harness_free(&o);

	const char *args[] = { "run", "-l", "python", "-c", "raise SystemExit(7)", NULL };
	harness_run(_i, args, NULL, 0, &o);
	ck_assert_msg(o.status == 7, "moat run status %d (want 7): %s", o.status, o.err);
	harness_free(&o);
}
END_TEST

START_TEST(files_env_stdin_byte_exact)
{
	HARNESS_MODE_GUARD(_i);
	/* 1 MiB+ of UTF-8 stdin the program regenerates and compares itself */
	size_t n_lines = 80000;
	size_t cap = n_lines * 20 + 1;
	char *in = malloc(cap);
	ck_assert_ptr_nonnull(in);
	size_t len = 0;
	for (size_t i = 0; i < n_lines; i++)
		len += (size_t)snprintf(in + len, cap - len, "line %06zu \xc3\xbc\xe2\x9c\x93\n", i);
	ck_assert_uint_gt(len, 1024 * 1024);
	char *qin = harness_json_quote(in);
	const char *code =
		"import os, sys\n"
		"want = ''.join('line %06d \\u00fc\\u2713\\n' % i for i in range(80000)).encode()\n"
		"got = sys.stdin.buffer.read()\n"
		"out = sys.stdout.buffer\n"
		"out.write(b'stdin %d %s\\n' % (len(got), str(got == want).encode()))\n"
		"for p in ['a/b/c/deep.txt', 'a/top.txt', 'x.bin']:\n"
		"    out.write(open(p, 'rb').read() + b'|')\n"
		"out.write(b'\\n')\n"
		"for k in ['GREETING', 'EMPTY', 'WITH_EQ', 'SPACES']:\n"
		"    out.write(os.environb[k.encode()] + b'|')\n"
		"out.write(b'\\n')\n"
		"out.write(repr([sorted(os.listdir('/sandbox')), sorted(os.listdir('/sandbox/a'))]).encode() + b'\\n')\n";
	char *extra = NULL;
	ck_assert_int_ge(asprintf(&extra,
				  ",\"stdin\":%s,"
				  "\"files\":{\"a/b/c/deep.txt\":\"d\\u00e9ep \\u2603\\n\\ttab\","
				  "\"a/top.txt\":\"top\",\"x.bin\":\"\\u0001\\u007f\\u00ff\"},"
				  "\"env\":{\"GREETING\":\"gr\\u00fc\\u00dfe \\u2713\",\"EMPTY\":\"\","
				  "\"WITH_EQ\":\"a=b=c\",\"SPACES\":\"  x  y  \"}",
				  qin), 0);
	struct run_out o;
	harness_exec_code(_i, "python", code, extra, &o);
	const char *so = expect_exit(&o, 0);
	char want[512];
	snprintf(want, sizeof want,
		 "stdin %zu True\n"
		 "d\xc3\xa9" "ep \xe2\x98\x83\n\ttab|top|\x01\x7f\xc3\xbf|\n"
		 "gr\xc3\xbc\xc3\x9f" "e \xe2\x9c\x93||a=b=c|  x  y  |\n"
		 "[['a', 'main.py', 'x.bin'], ['b', 'top.txt']]\n",
		 len);
	ck_assert_msg(strcmp(so, want) == 0, "stdout [%s]\nwant [%s]\nstderr [%s]", so, want,
		      harness_str(&o, "stderr"));
	harness_free(&o);
	free(extra);
	free(qin);
	free(in);
}
END_TEST

START_TEST(stdout_stderr_separated)
{
	HARNESS_MODE_GUARD(_i);
	const char *code = "import sys\n"
			   "for i in range(3):\n"
			   "    print('out', i, flush=True)\n"
			   "    print('err', i, file=sys.stderr, flush=True)\n";
	struct run_out o;
	harness_exec_code(_i, "python", code, "", &o);
	ck_assert_str_eq(expect_exit(&o, 0), "out 0\nout 1\nout 2\n");
	ck_assert_str_eq(harness_str(&o, "stderr"), "err 0\nerr 1\nerr 2\n");
	harness_free(&o);

	const char *args[] = { "run", "-l", "python", "-c", code, NULL };
	harness_run(_i, args, NULL, 0, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "out 0\nout 1\nout 2\n");
	ck_assert_str_eq(o.err, "err 0\nerr 1\nerr 2\n");
	harness_free(&o);
}
END_TEST

START_TEST(timeout_kills)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	long t0 = harness_now_ms();
	harness_exec_code(_i, "bash", "echo before\nsleep 30\necho after", ",\"timeout\":1000", &o);
	long wall = harness_now_ms() - t0;
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.out);
	ck_assert_msg(harness_bool(&o, "timedOut"), "not timed out: %s", o.out);
	ck_assert_msg(harness_is_null(&o, "exitCode"), "exitCode not null: %s", o.out);
	ck_assert_str_eq(harness_str(&o, "killedBy"), "timeout");
	ck_assert_str_eq(harness_str(&o, "stdout"), "before\n");
	/* upper bounds scaled for slow machines (harness_slowdown) */
	double d = harness_num(&o, "durationMs");
	ck_assert_msg(d >= 900 && d <= harness_scale_ms(5000), "durationMs %g", d);
	ck_assert_msg(wall < harness_scale_ms(6000), "wall %ld ms", wall);
	harness_free(&o);
}
END_TEST

static void check_daemon_gone(int mode, const char *lang, const char *code, const char *marker)
{
	struct run_out o;
	long t0 = harness_now_ms();
	harness_exec_code(mode, lang, code, "", &o);
	long wall = harness_now_ms() - t0;
	/* the daemon was really running inside before the program exited */
	ck_assert_str_eq(expect_exit(&o, 0), "daemon 1\n");
	ck_assert_msg(wall < harness_scale_ms(5000), "run with a daemon took %ld ms", wall);
	ck_assert_msg(harness_num(&o, "durationMs") < harness_scale_ms(5000), "%s", o.out);
	int left = harness_count_marker(marker);
	ck_assert_msg(left == 0, "%d daemon process(es) with %s outlived the run (mode %d)", left,
		      marker, mode);
	harness_free(&o);
}

START_TEST(daemon_does_not_outlive_run)
{
	HARNESS_MODE_GUARD(_i);
	char marker[96], code[2048];
	make_marker(marker, sizeof marker, "shdaemon", _i);
	/* the subshell exits at once: sleep is reparented to init */
	snprintf(code, sizeof code,
		 "(exec -a %s sleep 30 &)\n"
		 "for try in 1 2 3 4 5 6 7 8 9 10; do\n"
		 "  n=0; for f in /proc/[0-9]*/cmdline; do\n"
		 "    a=; read -r -d '' a < \"$f\" 2>/dev/null; [ \"$a\" = %s ] && n=$((n+1))\n"
		 "  done\n"
		 "  [ $n = 1 ] && break; sleep 0.05\n"
		 "done\n"
		 "echo daemon $n\n",
		 marker, marker);
	check_daemon_gone(_i, "bash", code, marker);

	make_marker(marker, sizeof marker, "pydaemon", _i);
	snprintf(code, sizeof code,
		 "import os, time\n"
		 "M = '%s'\n"
		 "if os.fork() == 0:\n"
		 "    os.setsid()\n"
		 "    if os.fork() == 0:\n"
		 "        os.execv('/bin/sleep', [M, '30'])\n"
		 "    os._exit(0)\n"
		 "os.wait()\n"
		 "def seen():\n"
		 "    n = 0\n"
		 "    for p in os.listdir('/proc'):\n"
		 "        if p.isdigit():\n"
		 "            try:\n"
		 "                if open('/proc/%%s/cmdline' %% p, 'rb').read().split(b'\\0')[0] == M.encode(): n += 1\n"
		 "            except OSError: pass\n"
		 "    return n\n"
		 "for _ in range(50):\n"
		 "    if seen(): break\n"
		 "    time.sleep(0.02)\n"
		 "print('daemon', seen())\n",
		 marker);
	check_daemon_gone(_i, "python", code, marker);
}
END_TEST

START_TEST(timeout_kills_process_tree)
{
	HARNESS_MODE_GUARD(_i);
	char marker[96], code[1024];
	make_marker(marker, sizeof marker, "tree", _i);
	/* 4 children that each start 4 grandchildren: 20 processes */
	snprintf(code, sizeof code,
		 "for i in 1 2 3 4; do\n"
		 "  ( for j in 1 2 3 4; do (exec -a %s sleep 30) & done; exec -a %s sleep 30 ) &\n"
		 "done\n"
		 "for try in 1 2 3 4 5 6 7 8 9 10; do\n"
		 "  n=0; for f in /proc/[0-9]*/cmdline; do\n"
		 "    a=; read -r -d '' a < \"$f\" 2>/dev/null; [ \"$a\" = %s ] && n=$((n+1))\n"
		 "  done\n"
		 "  [ $n = 20 ] && break; sleep 0.05\n"
		 "done\n"
		 "echo tree $n\n"
		 "wait\n",
		 marker, marker, marker);
	/* long enough for the tree to be built on a slow host (qemu TCG under
	 * load took more than 2.5 s), short enough to keep the test quick */
	long timeout = harness_scale_ms(2500);
	if (timeout > 10000)
		timeout = 10000;
	char extra[64];
	snprintf(extra, sizeof extra, ",\"timeout\":%ld", timeout);
	struct run_out o;
	harness_exec_code(_i, "bash", code, extra, &o);
	ck_assert_msg(harness_bool(&o, "timedOut"), "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "killedBy"), "timeout");
	ck_assert_str_eq(harness_str(&o, "stdout"), "tree 20\n");
	int left = harness_count_marker(marker);
	ck_assert_msg(left == 0, "%d of 20 processes outlived the timeout (mode %d)", left, _i);
	harness_free(&o);
}
END_TEST

START_TEST(output_cap)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "python",
			  "import sys\nsys.stdout.write('x' * 100000)\nsys.stdout.flush()\n"
			  "sys.stderr.write('small')\n",
			  ",\"maxOutputBytes\":1000", &o);
	const char *so = expect_exit(&o, 0);
	ck_assert_uint_eq(strlen(so), 1000);
	ck_assert_uint_eq(strspn(so, "x"), 1000);
	ck_assert(harness_bool(&o, "stdoutTruncated"));
	ck_assert(!harness_bool(&o, "stderrTruncated"));
	ck_assert_str_eq(harness_str(&o, "stderr"), "small");
	harness_free(&o);

	/* stderr has its own cap */
	harness_exec_code(_i, "python", "import sys\nsys.stderr.write('e' * 5000)\nprint('ok')",
			  ",\"maxOutputBytes\":100", &o);
	ck_assert_str_eq(expect_exit(&o, 0), "ok\n");
	ck_assert_uint_eq(strlen(harness_str(&o, "stderr")), 100);
	ck_assert(harness_bool(&o, "stderrTruncated"));
	ck_assert(!harness_bool(&o, "stdoutTruncated"));
	harness_free(&o);
}
END_TEST

START_TEST(binary_output_is_valid_json)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "python",
			  "import sys\n"
			  "sys.stdout.buffer.write(b'a\\xffb\\xc3\\xa9\\x01\\x00z\\xe2\\x82')\n"
			  "sys.stderr.buffer.write(b'\\x80\\x80e')\n",
			  "", &o);
	ck_assert_msg(o.json != NULL, "not JSON: %s", o.out);
	const char *so = expect_exit(&o, 0);
	/* cJSON cuts the string at the decoded NUL */
	ck_assert_str_eq(so, "a\xef\xbf\xbd" "b\xc3\xa9\x01");
	ck_assert_msg(strstr(o.out, "\\u0000z"), "no \\u0000 escape in %s", o.out);
	ck_assert_msg(strstr(o.out, "\\u0001"), "no \\u0001 escape in %s", o.out);
	ck_assert_msg(strstr(o.out, "z\xef\xbf\xbd"), "truncated sequence not replaced: %s", o.out);
	const char *se = harness_str(&o, "stderr");
	ck_assert_msg(se && strcmp(se, "\xef\xbf\xbd\xef\xbf\xbd" "e") == 0, "stderr [%s]", se);
	/* the raw result text is valid UTF-8 with no raw control bytes */
	for (size_t i = 0; i < o.out_len; i++)
		ck_assert_msg((unsigned char)o.out[i] >= 0x20 || o.out[i] == '\n',
			      "raw control byte 0x%02x at %zu", (unsigned char)o.out[i], i);
	harness_free(&o);
}
END_TEST

START_TEST(killed_by_signal)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "python", "import os\nprint('x', flush=True)\nos.kill(os.getpid(), 9)",
			  "", &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_msg(harness_is_null(&o, "exitCode"), "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "signal"), "SIGKILL");
	ck_assert_str_eq(harness_str(&o, "killedBy"), "signal");
	ck_assert(!harness_bool(&o, "timedOut"));
	ck_assert_str_eq(harness_str(&o, "stdout"), "x\n");
	harness_free(&o);

	const char *args[] = { "run", "-l", "python", "-c", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", NULL };
	harness_run(_i, args, NULL, 0, &o);
	ck_assert_msg(o.status == 128 + 15, "moat run status %d: %s", o.status, o.err);
	harness_free(&o);
}
END_TEST

/* moat started with signals ignored and blocked (as a shell's background job
 * or a service manager may start it): the program still gets every signal
 * at its default and an empty mask, whichever way pid 1 finds the
 * dispositions to reset. */
static int prep_signals_ignored(int mode, void *arg)
{
	(void)mode;
	(void)arg;
	struct sigaction ign = { .sa_handler = SIG_IGN };
	int sigs[] = { SIGHUP, SIGINT, SIGUSR2, SIGTERM, SIGRTMIN + 3, SIGRTMAX };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &ign, NULL) < 0) {
			perror("sigaction");
			return -1;
		}
	/* glibc's own two (32, 33), which its sigaction refuses: ignored
	 * through the raw call, as a parent not written with glibc can */
	unsigned long raw_ign[8] = { (unsigned long)SIG_IGN };
	for (int sig = 32; sig <= 33; sig++)
		if (syscall(SYS_rt_sigaction, sig, raw_ign, NULL, (size_t)(_NSIG - 1) / 8) < 0) {
			perror("rt_sigaction");
			return -1;
		}
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGRTMIN + 5);
	if (sigprocmask(SIG_BLOCK, &block, NULL) < 0) {
		perror("sigprocmask");
		return -1;
	}
	return 0;
}

START_TEST(program_signals_default)
{
	HARNESS_MODE_GUARD(_i);
	const char *args[] = { "run", "-l", "sh", "-c",
			       "exec cat /proc/self/status", NULL };
	struct harness_proc p;
	harness_start(_i, args, NULL, 0, NULL, prep_signals_ignored, NULL, &p);
	struct run_out o = { 0 };
	harness_finish(&p, &o);
	ck_assert_msg(o.status == 0, "status %d, stderr %s", o.status, o.err);
	/* cat installs no handler: what it shows is what it was started with */
	const char *lines[] = { "\nSigBlk:\t0000000000000000\n", "\nSigIgn:\t0000000000000000\n",
				"\nSigCgt:\t0000000000000000\n" };
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
		ck_assert_msg(strstr(o.out, lines[i]), "no %s in: %s", lines[i] + 1, o.out);
	harness_free(&o);
}
END_TEST

START_TEST(limits_fallback_reported)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "python", "print('ran')", ",\"memoryMb\":128", &o);
	ck_assert_str_eq(expect_exit(&o, 0), "ran\n");
	const cJSON *limits = cJSON_GetObjectItemCaseSensitive(o.json, "limits");
	const cJSON *mem = cJSON_GetObjectItemCaseSensitive(limits, "memory");
	const cJSON *warn = cJSON_GetObjectItemCaseSensitive(o.json, "warnings");
	ck_assert_msg(cJSON_IsString(mem) && cJSON_IsArray(warn), "%s", o.out);
	bool enforced_by_cgroup = !strncmp(mem->valuestring, "cgroup-", 7);
	if (!enforced_by_cgroup) {
		/* today: "none"; any fallback must be reported */
		ck_assert_msg(!strcmp(mem->valuestring, "none") || !strcmp(mem->valuestring, "rlimit"),
			      "limits.memory %s", mem->valuestring);
		ck_assert_msg(cJSON_GetArraySize(warn) > 0, "fallback without warning: %s", o.out);
	}
	harness_free(&o);

	harness_exec_code(_i, "python", "print('ran')", ",\"memoryMb\":128,\"strictLimits\":true", &o);
	if (enforced_by_cgroup) {
		expect_exit(&o, 0);
	} else {
		ck_assert_msg(o.status == 3, "status %d: %s", o.status, o.out);
		ck_assert_str_eq(harness_error_type(&o), "SandboxUnavailableError");
		ck_assert_ptr_null(harness_str(&o, "stdout"));
	}
	harness_free(&o);

	/* no limit requested: no warning */
	harness_exec_code(_i, "python", "print('ran')", "", &o);
	expect_exit(&o, 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o.json, "warnings")), 0);
	harness_free(&o);
}
END_TEST

/* ---- pid 2 without execve (the zygote's seam) -------------------------------- */

/* Appends s to the probe's report. System calls only: pid2_probe runs in
 * a raw fork. */
static void probe_put(char *buf, size_t *len, size_t cap, const char *s)
{
	while (*s && *len + 1 < cap)
		buf[(*len)++] = *s++;
	buf[*len] = '\0';
}

static void probe_put_errno(char *buf, size_t *len, size_t cap, const char *what, int rc)
{
	probe_put(buf, len, cap, what);
	probe_put(buf, len, cap, rc < 0 ? strerrorname_np(errno) : "ok");
	probe_put(buf, len, cap, "\n");
}

/* The names in dir, space-separated, sorted as the kernel lists them
 * (numeric for /proc/self/fd and /proc's pids: both list ascending). */
static void probe_list(char *buf, size_t *len, size_t cap, const char *what, const char *dir,
		       bool digits_only)
{
	probe_put(buf, len, cap, what);
	DIR *d = opendir(dir);
	if (!d) {
		probe_put(buf, len, cap, strerrorname_np(errno));
		probe_put(buf, len, cap, "\n");
		return;
	}
	int dfd = dirfd(d);
	char self[16];
	snprintf(self, sizeof self, "%d", dfd);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (digits_only && !isdigit((unsigned char)e->d_name[0]))
			continue;
		if (!strcmp(dir, "/proc/self/fd") && !strcmp(e->d_name, self))
			continue;
		probe_put(buf, len, cap, " ");
		probe_put(buf, len, cap, e->d_name);
	}
	closedir(d);
	probe_put(buf, len, cap, "\n");
}

/* What pid 2 does in the pid2 tests (struct run's pid2_arg). */
enum pid2_what { PID2_PROBE, PID2_FORKS, PID2_SLEEP };

/* Forks until 30 children or a failure; prints "forks <ok> <failed>". */
static int pid2_forks(void)
{
	int ok = 0, failed = 0;
	for (int i = 0; i < 30; i++) {
		pid_t c = fork();
		if (c == 0) {
			sleep(30);
			_exit(0);
		}
		if (c < 0)
			failed++;
		else
			ok++;
	}
	char line[64];
	int n = snprintf(line, sizeof line, "forks %d %d\n", ok, failed);
	return write(1, line, (size_t)n) == n ? 7 : 99;
}

/* pid 2 of a run whose struct run has pid2_main: what a zygote's child
 * would find before it reads the request. Reports on stdout; exits 7. */
static int pid2_probe(void *arg)
{
	enum pid2_what what = *(const enum pid2_what *)arg;
	if (what == PID2_FORKS)
		return pid2_forks();
	if (what == PID2_SLEEP) {
		sleep(60);
		return 7;
	}
	static char buf[8192];
	size_t len = 0;
	char num[32];
	snprintf(num, sizeof num, "pid %d\n", (int)getpid());
	probe_put(buf, &len, sizeof buf, num);
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char st[4096];
		ssize_t n = read(fd, st, sizeof st - 1);
		close(fd);
		st[n > 0 ? n : 0] = '\0';
		static const char *const keys[] = { "Uid:", "Gid:", "CapInh:", "CapPrm:", "CapEff:",
						    "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:" };
		for (char *line = strtok(st, "\n"); line; line = strtok(NULL, "\n"))
			for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
				if (!strncmp(line, keys[k], strlen(keys[k]))) {
					for (char *t = line; *t; t++)
						if (*t == '\t')
							*t = ' ';
					probe_put(buf, &len, sizeof buf, line);
					probe_put(buf, &len, sizeof buf, "\n");
				}
	}
	probe_list(buf, &len, sizeof buf, "fds", "/proc/self/fd", false);
	probe_list(buf, &len, sizeof buf, "pids", "/proc", true);
	probe_list(buf, &len, sizeof buf, "tmp", "/tmp", false);
	probe_put_errno(buf, &len, sizeof buf, "unshare ", unshare(CLONE_NEWUSER));
	probe_put_errno(buf, &len, sizeof buf, "write-usr ",
			open("/usr/moat-pid2-probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	char host[64] = "";
	gethostname(host, sizeof host - 1);
	probe_put(buf, &len, sizeof buf, "host ");
	probe_put(buf, &len, sizeof buf, host);
	probe_put(buf, &len, sizeof buf, "\n");
	for (size_t off = 0; off < len;) {
		ssize_t w = write(1, buf + off, len - off);
		if (w <= 0)
			return 99;
		off += (size_t)w;
	}
	return 7;
}

/* One pid2 test: what pid 2 does, the request's limits, and whether pid 1
 * is made by another process (a stand-in zygote) and adopted. */
struct pid2_case {
	enum pid2_what what;
	bool adopt;
	uint64_t pids_limit;
	long timeout_ms; /* unscaled */
};

/* The stand-in zygote of the adopt tests: a process that is not the
 * supervisor clones pid 1 from the run's child spec into new namespaces,
 * writes its id maps, hands its pidfd to the supervisor over sock, and
 * reaps it. Runs in a fork of the worker; never returns. */
__attribute__((noreturn)) static void pid2_zygote(struct run *r, int sock)
{
	struct moat_child spec;
	run_child_spec(r, &spec);
	int pidfd = -1;
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
	args.pidfd = (uint64_t)(uintptr_t)&pidfd;
	args.exit_signal = SIGCHLD;
	pid_t a = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (a == 0) {
		if (moat_child_main(&spec) == 0)
			_exit(r->pid2_main(r->pid2_arg));
		_exit(127);
	}
	if (a < 0)
		_exit(80);
	struct moat_error err = { 0 };
	uid_t uid = r->as_root ? MOAT_SANDBOX_UID : getuid();
	gid_t gid = r->as_root ? MOAT_SANDBOX_GID : getgid();
	if (moat_idmap_write(a, r->as_root, uid, gid, &err) < 0)
		_exit(81);
	char one = 'p';
	if (moat_send_fds(sock, &one, 1, &pidfd, 1) < 0)
		_exit(82);
	/* nothing of the run stays open here: pid 1 must see the
	 * supervisor's ends only */
	syscall(SYS_close_range, 3u, ~0u, 0u);
	int st;
	while (waitpid(a, &st, 0) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* Adopts pid 1 from a stand-in zygote forked here (pid2_zygote). */
static int pid2_adopt(struct run *r, pid_t *zygote, struct moat_error *err)
{
	/* a run made here builds its mount plan in run_spawn, after clone3,
	 * into memory pid 1 shares (a zygote's template builds it in
	 * run_prepare): the stand-in's pid 1 is cloned after this */
	if (run_plan_hand_over(r, err) < 0)
		return -1;
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair");
	*zygote = fork();
	if (*zygote == 0) {
		close(sp[0]);
		pid2_zygote(r, sp[1]);
	}
	close(sp[1]);
	char one;
	int pidfd = -1;
	size_t nfds = 0;
	ssize_t n = *zygote < 0 ? -1 : moat_recv_fds(sp[0], &one, 1, &pidfd, 1, &nfds, 0);
	close(sp[0]);
	if (n != 1 || nfds != 1)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "the stand-in zygote sent no pidfd");
	return run_adopt(r, pidfd, err);
}

/* The worker of the pid2 tests: runs the runner's own phases with
 * pid2_main set (as uid 65534 for the rootless mode when the harness is
 * root) and writes the result's JSON (or the error's message) to fd. */
static int pid2_worker(int mode, int fd, const void *arg)
{
	const struct pid2_case *pc = arg;
	if (harness_worker_enter(mode) < 0)
		return 90;
	struct moat_request *req = moat_request_new();
	if (!req)
		return 92;
	req->language = MOAT_LANG_BASH;
	req->code = strdup("echo the program must not run");
	req->code_len = strlen(req->code);
	req->timeout_ms = (uint64_t)harness_scale_ms(pc->timeout_ms);
	req->pids_limit = pc->pids_limit;
	struct moat_error err = { 0 };
	struct moat_result *res = NULL;
	struct run r;
	run_init(&r, req, NULL);
	r.pid2_main = pid2_probe;
	r.pid2_arg = (void *)&pc->what;
	pid_t zygote = -1;
	int rc = run_prepare(&r, &err);
	if (rc == 0)
		rc = pc->adopt ? pid2_adopt(&r, &zygote, &err) : run_spawn(&r, &err);
	if (rc == 0)
		rc = run_start(&r, &err);
	if (rc == 0)
		rc = run_pump(&r, &err);
	if (rc == 0)
		rc = run_collect(&r, &res, &err);
	run_release(&r);
	if (zygote > 0)
		waitpid(zygote, NULL, 0);
	char *text = rc == 0 ? moat_result_to_json(res) : strdup(err.message);
	moat_result_free(res);
	moat_request_free(req);
	if (!text)
		return 93;
	size_t n = strlen(text);
	bool ok = write(fd, text, n) == (ssize_t)n;
	free(text);
	return !ok ? 94 : rc == 0 ? 0 : 95;
}

/* The runner with pid2_main (moat_child_main without a program, the seam
 * docs/design/pool-zygote.md builds the zygote's child on): pid 2 returns
 * into the caller's code only once it is 65534, without capabilities,
 * under no_new_privs and the filter, alone with pid 1 in its pid
 * namespace, with fds 0, 1 and 2 only, on the read-only root with an
 * empty /tmp; and the supervisor reports what it returned as the exit
 * code, with its output, as for any program. */
/* Forks fn(mode, fd, arg) as a worker and returns what it wrote to fd
 * (malloc'd, NUL-terminated, *len bytes), once it exited 0 (asserted) and
 * its rootless cgroup leaf, if any, is gone. */
static char *worker_output(int mode, int (*fn)(int mode, int fd, const void *arg),
			   const void *arg, size_t *len)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t w = fork();
	ck_assert_int_ge(w, 0);
	if (w == 0) {
		close(p[0]);
		_exit(fn(mode, p[1], arg));
	}
	close(p[1]);
	char *all = calloc(1, 1);
	ck_assert_ptr_nonnull(all);
	*len = 0;
	char chunk[4096];
	ssize_t n;
	while ((n = read(p[0], chunk, sizeof chunk)) > 0) {
		all = realloc(all, *len + (size_t)n + 1);
		ck_assert_ptr_nonnull(all);
		memcpy(all + *len, chunk, (size_t)n);
		*len += (size_t)n;
		all[*len] = '\0';
	}
	close(p[0]);
	int st;
	ck_assert_int_eq(waitpid(w, &st, 0), w);
	harness_worker_leave(mode, w);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker status %d: %s", st, all);
	return all;
}

static void pid2_run(int mode, const struct pid2_case *pc, struct run_out *out)
{
	memset(out, 0, sizeof *out);
	out->out = worker_output(mode, pid2_worker, pc, &out->out_len);
	out->json = cJSON_ParseWithLength(out->out, out->out_len);
	ck_assert_msg(out->json, "not JSON: %s", out->out);
}

static void pid2_expect_locked_down(int mode, bool adopt)
{
	struct pid2_case pc = { .what = PID2_PROBE, .adopt = adopt, .timeout_ms = 20000 };
	struct run_out o;
	pid2_run(mode, &pc, &o);
	ck_assert_msg(harness_num(&o, "exitCode") == 7, "%s", o.out);
	ck_assert(!harness_bool(&o, "timedOut"));
	const char *so = harness_str(&o, "stdout");
	ck_assert_msg(so && !strstr(so, "must not run"), "%s", o.out);
	static const char *const want[] = {
		"pid 2\n", "Uid: 65534 65534 65534 65534\n", "Gid: 65534 65534 65534 65534\n",
		"CapInh: 0000000000000000\n", "CapPrm: 0000000000000000\n",
		"CapEff: 0000000000000000\n", "CapBnd: 0000000000000000\n",
		"CapAmb: 0000000000000000\n", "NoNewPrivs: 1\n", "Seccomp: 2\n",
		"fds 0 1 2\n", "pids 1 2\n", "tmp\n", "unshare EPERM\n", "write-usr EROFS\n",
		"host moat\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		ck_assert_msg(strstr(so, want[i]), "mode %d: no [%.*s] in:\n%s", mode,
			      (int)strcspn(want[i], "\n"), want[i], so);
	ck_assert_str_eq(harness_str(&o, "stderr"), "");
	harness_free(&o);
}

START_TEST(pid2_returns_locked_down)
{
	HARNESS_MODE_GUARD(_i);
	pid2_expect_locked_down(_i, false);
}
END_TEST

/* run_adopt (the runner's side of a zygote): pid 1 made by another
 * process -- not the supervisor's child -- from the run's child spec.
 * The program's pid 2 is locked down as in a run the supervisor cloned,
 * and the result comes from pid 1's report, never from waiting for it. */
START_TEST(adopted_pid1_is_locked_down)
{
	HARNESS_MODE_GUARD(_i);
	pid2_expect_locked_down(_i, true);
}
END_TEST

/* An adopted pid 1 is put into the run's cgroups before its program
 * starts (root: the pids controller; rootless here: RLIMIT_NPROC), and
 * the wall clock kills it though it is not the supervisor's child: the
 * run ends promptly as timed out. */
START_TEST(adopted_pid1_gets_limits_and_timeout)
{
	HARNESS_MODE_GUARD(_i);
	struct pid2_case forks = { .what = PID2_FORKS, .adopt = true, .pids_limit = 8,
				   .timeout_ms = 20000 };
	struct run_out o;
	pid2_run(_i, &forks, &o);
	ck_assert_msg(harness_num(&o, "exitCode") == 7, "%s", o.out);
	int ok = -1, failed = -1;
	const char *so = harness_str(&o, "stdout");
	ck_assert_msg(so && sscanf(so, "forks %d %d", &ok, &failed) == 2, "%s", o.out);
	ck_assert_msg(ok < 8 && failed > 0, "forks ok %d failed %d: %s", ok, failed, o.out);
	if (_i == MODE_ROOT)
		ck_assert_msg(strcmp(harness_limit_of(&o, "pids"), "rlimit") != 0, "%s", o.out);
	harness_free(&o);

	struct pid2_case sleeper = { .what = PID2_SLEEP, .adopt = true, .timeout_ms = 1000 };
	long t0 = harness_now_ms();
	pid2_run(_i, &sleeper, &o);
	long took = harness_now_ms() - t0;
	ck_assert_msg(harness_bool(&o, "timedOut"), "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "killedBy"), "timeout");
	ck_assert_msg(took < harness_scale_ms(10000), "the run took %ld ms: %s", took, o.out);
	harness_free(&o);
}
END_TEST

/* ---- the Python zygote (runtime/python/moat_zygote.py + moat-zygote.so) ------- */

/* The worker of the zygote tests: starts the Python zygote on a control
 * socket, then, as the supervisor, runs each request of reqs through it
 * (pool_create_adopted with zygote_exchange, started; wait and
 * release as any run) and writes each result's JSON (or error message) as
 * one line to fd. */
/* make_pid1 of pool_create_adopted (ctx: the control socket): one
 * record to the zygote, its pidfd back. */
static int zygote_exchange(void *ctx, const int *fds, size_t nfds, const void *record,
			   size_t record_len, int *pidfd, struct moat_error *err)
{
	int sock = *(const int *)ctx;
	char reply[16] = "";
	size_t got_fds = 0;
	ssize_t got = -1;
	if (moat_send_fds(sock, record, record_len, fds, nfds) == 0)
		got = moat_recv_fds(sock, reply, sizeof reply - 1, pidfd, 1, &got_fds, 0);
	if (got < 1 || reply[0] != 'p' || got_fds != 1)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "the zygote made no pid 1: %zd [%.*s] %zu: %s", got,
				      got > 0 ? (int)got : 0, reply, got_fds, strerror(errno));
	return 0;
}

struct zygote_reqs {
	const char *const *reqs;
	size_t n;
};

static int zygote_worker(int mode, int fd, const void *arg)
{
	const char *const *reqs = ((const struct zygote_reqs *)arg)->reqs;
	size_t n = ((const struct zygote_reqs *)arg)->n;
	/* as the harness's user: the copies before the drop */
	char so[PATH_MAX], script[PATH_MAX + 64], fdnum[16];
	snprintf(so, sizeof so, "%s", harness_beside_moat("moat-zygote.so"));
	snprintf(script, sizeof script, "%s/python/moat_zygote.py", harness_runtime_dir());
	if (harness_worker_enter(mode) < 0)
		return 90;
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return 91;
	pid_t z = fork();
	if (z < 0)
		return 92;
	if (z == 0) {
		int zfd = fcntl(sp[1], F_DUPFD, 10); /* without close-on-exec */
		snprintf(fdnum, sizeof fdnum, "%d", zfd);
		const char *tmpl = "{\"language\":\"python\",\"code\":\"pass\"}";
		char *argv[] = { (char *)"python3", script, so, (char *)tmpl, (char *)"0",
				 (char *)"", fdnum, NULL };
		char *envp[] = { (char *)"PATH=/usr/bin:/bin", (char *)"PYTHONDONTWRITEBYTECODE=1",
				 NULL };
		execve("/usr/bin/python3", argv, envp);
		_exit(93);
	}
	close(sp[1]);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (reqs[i][0] == '!') {
			/* a record the zygote must refuse, its answer as a JSON
			 * string: "!nofds" (no fds), "!long" (longer than a
			 * record), "!badbyte" (the fds, but not MOAT_ZYGOTE_RUN) */
			char rec[MOAT_ZYGOTE_MAX_RECORD + 8], reply[16] = "";
			memset(rec, 'r', sizeof rec);
			int pf[2], fds[MOAT_ZYGOTE_NFDS];
			if (pipe2(pf, O_CLOEXEC) < 0)
				return 96;
			for (int k = 0; k < MOAT_ZYGOTE_NFDS; k++)
				fds[k] = pf[k % 2];
			bool nofds = !strcmp(reqs[i], "!nofds"), lng = !strcmp(reqs[i], "!long");
			if (!strcmp(reqs[i], "!badbyte"))
				rec[0] = 'x';
			size_t got_fds = 0;
			int pidfd = -1;
			ssize_t got = -1;
			if (moat_send_fds(sp[0], rec, lng ? sizeof rec : 1, fds,
					  nofds ? 0 : MOAT_ZYGOTE_NFDS) == 0)
				got = moat_recv_fds(sp[0], reply, sizeof reply - 1, &pidfd, 1, &got_fds,
						    0);
			close(pf[0]);
			close(pf[1]);
			if (got_fds)
				close(pidfd);
			char line[64];
			int len = snprintf(line, sizeof line, "\"%.*s%s\"\n", got > 0 ? (int)got : 0,
					   reply, got_fds ? " with an fd" : "");
			if (write(fd, line, (size_t)len) != len)
				rc = 94;
			continue;
		}
		struct moat_request *req = NULL;
		struct moat_error err = { 0 };
		struct moat_result *res = NULL;
		struct moat_sandbox *sb = NULL;
		int st = moat_request_parse_json(reqs[i], strlen(reqs[i]), &req, &err);
		if (st == 0)
			st = pool_create_adopted(req, NULL, zygote_exchange, &sp[0], RUN_ADOPT_START,
						 &sb, &err);
		if (st == 0)
			st = moat_sandbox_wait(sb, &res, &err);
		moat_sandbox_release(sb);
		char *text = st == 0 ? moat_result_to_json(res) : strdup(err.message);
		moat_result_free(res);
		moat_request_free(req);
		moat_error_clear(&err);
		size_t len = text ? strlen(text) : 0;
		if (!text || write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
			rc = 94;
		free(text);
	}
	close(sp[0]); /* the zygote ends at EOF */
	int zst;
	if (waitpid(z, &zst, 0) != z || !WIFEXITED(zst) || WEXITSTATUS(zst) != 0)
		rc = rc ? rc : 95;
	return rc;
}

/* Runs reqs through a Python zygote (zygote_worker) in mode; out[i] gets
 * the i-th result (harness_free each). */
static void zygote_run(int mode, const char *const *reqs, size_t n, struct run_out *out)
{
	struct zygote_reqs zr = { reqs, n };
	size_t len;
	char *all = worker_output(mode, zygote_worker, &zr, &len);
	char *line = all;
	for (size_t i = 0; i < n; i++) {
		ck_assert_msg(line && *line, "result %zu missing: %s", i, all ? all : "");
		char *nl = strchr(line, '\n');
		ck_assert_ptr_nonnull(nl);
		memset(&out[i], 0, sizeof out[i]);
		out[i].out = strndup(line, (size_t)(nl - line));
		out[i].out_len = strlen(out[i].out);
		out[i].json = cJSON_Parse(out[i].out);
		ck_assert_msg(out[i].json, "result %zu is not JSON: %s", i, out[i].out);
		line = nl + 1;
	}
	free(all);
}

/* A zygote's child, as the program sees it: a Python whose pid 2 came back
 * into the interpreter only locked down -- the same state as
 * pid2_returns_locked_down, checked from Python -- with the run's
 * environment (not the zygote's), the request's env and stdin, and the
 * result the supervisor collects from pid 1's report. */
START_TEST(zygote_child_is_a_locked_down_python)
{
	HARNESS_MODE_GUARD(_i);
	static const char code[] =
		"import os, socket, sys, ctypes\\n"
		"for l in open('/proc/self/status').read().split('\\\\n'):\\n"
		"    if l.split(':')[0] in ('Uid', 'Gid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd',\\n"
		"                           'CapAmb', 'NoNewPrivs', 'Seccomp'):\\n"
		"        print(' '.join(l.split()))\\n"
		"print('pid', os.getpid())\\n"
		"print('pids', ' '.join(sorted((p for p in os.listdir('/proc') if p.isdigit()), key=int)))\\n"
		"print('fds', ' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))\\n"
		"print('tmp', os.listdir('/tmp'), 'sandbox', sorted(os.listdir('/sandbox')))\\n"
		"libc = ctypes.CDLL(None, use_errno=True)\\n"
		"print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\\n"
		"try:\\n"
		"    open('/usr/moat-zygote-probe', 'w')\\n"
		"except OSError as e:\\n"
		"    print('write-usr', e.errno)\\n"
		"print('host', socket.gethostname())\\n"
		"print('env', os.environ.get('PATH'), os.environ.get('FOO'), "
		"os.environ.get('PYTHONDONTWRITEBYTECODE'))\\n"
		"print('argv', sys.argv, os.getcwd(), __name__)\\n"
		"print('stdin', sys.stdin.read())\\n"
		"print(6 * 7)\\n";
	char *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"language\":\"python\",\"code\":\"%s\",\"env\":{\"FOO\":"
				  "\"bar\"},\"stdin\":\"in put\",\"timeout\":%ld}", code,
				  harness_scale_ms(20000)), 0);
	const char *reqs[] = { req };
	struct run_out o;
	zygote_run(_i, reqs, 1, &o);
	free(req);
	ck_assert_msg(harness_num(&o, "exitCode") == 0, "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "stderr"), "");
	const char *so = harness_str(&o, "stdout");
	static const char *const want[] = {
		"Uid: 65534 65534 65534 65534\n", "Gid: 65534 65534 65534 65534\n",
		"CapInh: 0000000000000000\n", "CapPrm: 0000000000000000\n",
		"CapEff: 0000000000000000\n", "CapBnd: 0000000000000000\n",
		"CapAmb: 0000000000000000\n", "NoNewPrivs: 1\n", "Seccomp: 2\n", "pid 2\n",
		"pids 1 2\n", "fds 0 1 2 3\n", "tmp [] sandbox ['main.py']\n", "unshare -1 1\n",
		"write-usr 30\n", "host moat\n", "env /usr/local/bin:/usr/bin:/bin bar None\n",
		"argv ['/sandbox/main.py'] /sandbox __main__\n", "stdin in put\n", "42\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		ck_assert_msg(so && strstr(so, want[i]), "mode %d: no [%.*s] in:\n%s", _i,
			      (int)strcspn(want[i], "\n"), want[i], so ? so : o.out);
	harness_free(&o);
}
END_TEST

/* Single use across a zygote's children: one request dirties everything it
 * can (files in /tmp and /sandbox, the environment, a module, sys, a
 * daemon); the next ones see none of it, and each has its own random
 * state. */
/* A template the zygote refuses (pool_refusal: a language no warm
 * interpreter serves) fails without closing what it never opened: the
 * calling interpreter's fd 0 stays open (moat_zygote_new released a run
 * it had not initialised, whose fds were all 0, until 2026-12-07). */
START_TEST(zygote_refused_template_closes_nothing)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, 0), 0);
	char why[256] = "";
	static const char req[] = "{\"language\":\"bash\",\"code\":\"\"}";
	ck_assert_ptr_null(moat_zygote_new(req, strlen(req), 0, NULL, 0, why, sizeof why));
	ck_assert_msg(strstr(why, "only python and javascript"), "%s", why);
	ck_assert_msg(fcntl(0, F_GETFD) >= 0, "fd 0 closed by a refused template");
	close(fd);
}
END_TEST

/* A run prepared for a zygote's child (pool_create_adopted's
 * RUN_ADOPTED) builds what the supervisor needs -- result, limits,
 * channels -- and none of what the zygote's template already has: no mount
 * plan, filter, program or environment of its own. It cannot be started
 * as a run of its own, and a setup report naming a step of the template's
 * plan is told by its step (not looked up in a plan it does not have). */
START_TEST(prepared_for_zygote_has_no_plan)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->language = MOAT_LANG_PYTHON;
	req->code = strdup("print(1)");
	req->code_len = strlen(req->code);
	req->timeout_ms = 5000;
	req->pids_limit = 16;
	struct moat_error err = { 0 };
	struct run r;
	run_init(&r, req, NULL);
	r.origin = RUN_ADOPTED;
	ck_assert_msg(run_prepare(&r, &err) == 0, "%s", err.message);
	ck_assert(r.prepared);
	ck_assert_ptr_null(r.plan);
	ck_assert_ptr_null(r.seccomp);
	ck_assert_ptr_null(r.envp);
	ck_assert_ptr_null(r.program.argv);
	ck_assert(r.report_r >= 0 && r.report_w >= 0 && r.sync_w >= 0 && r.stdin_w >= 0 &&
		  r.stdout_r >= 0 && r.stderr_r >= 0 && r.epfd >= 0 && r.timerfd >= 0);
	ck_assert_ptr_nonnull(r.res);
	ck_assert_int_eq(run_spawn(&r, &err), -1);
	ck_assert_msg(strstr(err.message, "zygote's child"), "%s", err.message);
	moat_error_clear(&err);
	struct moat_report rep = { .step = MOAT_STEP_MOUNT, .detail = 3, .err = ENOSPC };
	ck_assert_int_eq(run_setup_error(&r, &rep, &err), -1);
	ck_assert_msg(strstr(err.message, "building the sandbox filesystem") &&
			      strstr(err.message, strerror(ENOSPC)),
		      "%s", err.message);
	moat_error_clear(&err);
	run_release(&r);
	moat_request_free(req);
}
END_TEST

/* The zygote's loop (moat_zygote_serve) refuses what is not a run's
 * record -- no fds, a record longer than one, another first byte -- with
 * "e22" and no fd, and goes on: the next request is served; at the end of
 * its control socket it exits 0 (zygote_worker checks). */
START_TEST(zygote_refuses_bad_records)
{
	HARNESS_MODE_GUARD(_i);
	const char *const reqs[] = { "!nofds", "!long", "!badbyte",
				     "{\"language\":\"python\",\"code\":\"print(6*7)\"}" };
	struct run_out out[4];
	zygote_run(_i, reqs, 4, out);
	for (int k = 0; k < 3; k++) {
		ck_assert_msg(cJSON_IsString(out[k].json) &&
				      !strcmp(out[k].json->valuestring, "e22"),
			      "%s: %s", reqs[k], out[k].out);
		harness_free(&out[k]);
	}
	ck_assert_msg(!strcmp(harness_str(&out[3], "stdout") ? harness_str(&out[3], "stdout") : "",
			      "42\n"), "%s", out[3].out);
	harness_free(&out[3]);
}
END_TEST

START_TEST(zygote_children_share_nothing)
{
	HARNESS_MODE_GUARD(_i);
	static const char dirty[] =
		"import os, sys, json, random, subprocess\\n"
		"open('/tmp/x', 'w').write('x')\\n"
		"open('/sandbox/y', 'w').write('y')\\n"
		"os.environ['MOAT_LEAK'] = '1'\\n"
		"json.MOAT_LEAK = 1\\n"
		"sys.moat_leak = 1\\n"
		"subprocess.Popen(['sleep', '60'], start_new_session=True)\\n"
		"print('rand', random.random())\\n";
	static const char look[] =
		"import os, sys, random\\n"
		"print('tmp', os.listdir('/tmp'), 'sandbox', sorted(os.listdir('/sandbox')))\\n"
		"print('env', os.environ.get('MOAT_LEAK'))\\n"
		"print('json', getattr(sys.modules.get('json'), 'MOAT_LEAK', None))\\n"
		"print('sys', getattr(sys, 'moat_leak', None))\\n"
		"print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\\n"
		"print('rand', random.random())\\n";
	enum { N = 4 };
	char *reqs[N];
	for (int i = 0; i < N; i++)
		ck_assert_int_ge(asprintf(&reqs[i], "{\"language\":\"python\",\"code\":\"%s\","
					  "\"timeout\":%ld}", i == 0 ? dirty : look,
					  harness_scale_ms(20000)), 0);
	struct run_out o[N];
	zygote_run(_i, (const char *const *)reqs, N, o);
	char rands[N][64];
	for (int i = 0; i < N; i++) {
		ck_assert_msg(harness_num(&o[i], "exitCode") == 0, "%d: %s", i, o[i].out);
		const char *so = harness_str(&o[i], "stdout");
		ck_assert_ptr_nonnull(so);
		const char *r = strstr(so, "rand ");
		ck_assert_ptr_nonnull(r);
		snprintf(rands[i], sizeof rands[i], "%.*s", (int)strcspn(r, "\n"), r);
		for (int j = 0; j < i; j++)
			ck_assert_msg(strcmp(rands[i], rands[j]), "%d and %d: %s", i, j, rands[i]);
		if (i == 0)
			continue;
		static const char *const clean[] = { "tmp [] sandbox ['main.py']\n", "env None\n",
						     "json None\n", "sys None\n", "pids [1, 2]\n" };
		for (size_t k = 0; k < sizeof clean / sizeof *clean; k++)
			ck_assert_msg(strstr(so, clean[k]), "request %d: no [%.*s] in:\n%s", i,
				      (int)strcspn(clean[k], "\n"), clean[k], so);
	}
	for (int i = 0; i < N; i++) {
		harness_free(&o[i]);
		free(reqs[i]);
	}
}
END_TEST

Suite *runner_suite(void)
{
	Suite *s = suite_create("runner");
	TCase *tc = tcase_create("runner");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, every_language_runs, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_prints_42, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, exit_code_propagates, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, files_env_stdin_byte_exact, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stdout_stderr_separated, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, timeout_kills, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, daemon_does_not_outlive_run, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, timeout_kills_process_tree, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, output_cap, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, binary_output_is_valid_json, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, killed_by_signal, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, program_signals_default, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, limits_fallback_reported, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pid2_returns_locked_down, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, adopted_pid1_is_locked_down, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, adopted_pid1_gets_limits_and_timeout, MODE_ROOT,
			    MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, zygote_child_is_a_locked_down_python, MODE_ROOT,
			    MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, zygote_children_share_nothing, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_test(tc, prepared_for_zygote_has_no_plan);
	tcase_add_test(tc, zygote_refused_template_closes_nothing);
	tcase_add_loop_test(tc, zygote_refuses_bad_records, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
