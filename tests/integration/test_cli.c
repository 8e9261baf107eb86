/* The command line: moat run flags, exit statuses, streaming, one-line
 * errors, moat version, moat doctor, moat exec arguments. Tests that start a
 * sandbox run as root and rootless (loop index = harness mode). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* ---- helpers ---------------------------------------------------------------- */

/* A directory uid 65534 can read, with files written into it. */
struct tdir {
	char path[64];
	char files[8][128];
	int n;
};

static const char *tdir_add(struct tdir *d, const char *name, const char *content)
{
	ck_assert_int_lt(d->n, 8);
	if (!d->path[0]) {
		snprintf(d->path, sizeof d->path, "/tmp/moat-cli-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(d->path));
		ck_assert_int_eq(chmod(d->path, 0755), 0);
	}
	char dir[sizeof d->path];
	memcpy(dir, d->path, sizeof dir);
	char *f = d->files[d->n++];
	snprintf(f, sizeof d->files[0], "%s/%s", dir, name);
	int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	size_t len = strlen(content);
	ck_assert_int_eq(write(fd, content, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	close(fd);
	return f;
}

static void tdir_remove(struct tdir *d)
{
	for (int i = 0; i < d->n; i++)
		unlink(d->files[i]);
	if (d->path[0])
		rmdir(d->path);
}

static void run(int mode, const char *const *args, const char *in, struct run_out *o)
{
	harness_run(mode, args, in, in ? strlen(in) : 0, o);
}

/* A failed `moat run`: status, one line on stderr naming the error type,
 * nothing on stdout. */
static void expect_run_error(int mode, const char *const *args, int status, const char *type)
{
	struct run_out o;
	run(mode, args, NULL, &o);
	ck_assert_msg(o.status == status, "%s: status %d (want %d): %s", args[1], o.status, status,
		      o.err);
	char prefix[64];
	snprintf(prefix, sizeof prefix, "moat: %s: ", type);
	ck_assert_msg(!strncmp(o.err, prefix, strlen(prefix)), "stderr [%s], want prefix [%s]", o.err,
		      prefix);
	ck_assert_msg(o.err_len > 0 && o.err[o.err_len - 1] == '\n' &&
		      memchr(o.err, '\n', o.err_len) == o.err + o.err_len - 1,
		      "error is not one line: [%s]", o.err);
	ck_assert_str_eq(o.out, "");
	harness_free(&o);
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(run_file_detects_language)
{
	HARNESS_MODE_GUARD(_i);
	struct tdir d = { 0 };
	const char *py = tdir_add(&d, "x.py", "import sys\nprint('py', sys.version_info[0])\n");
	const char *sh = tdir_add(&d, "y.sh", "echo \"sh ${BASH_VERSION:-nobash}\"\n");
	const char *js = tdir_add(&d, "z.js", "console.log('js', typeof process)\n");
	const char *ts = tdir_add(&d, "w.ts", "const n: number = 4;\nconsole.log(`ts ${n * 2}`);\n");
	const char *none = tdir_add(&d, "noext", "print(1)\n");
	struct { const char *file, *want; } cases[] = {
		{ py, "py 3\n" }, { sh, "sh nobash\n" }, { js, "js object\n" }, { ts, "ts 8\n" },
	};
	struct run_out o;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *args[] = { "run", cases[i].file, NULL };
		run(_i, args, NULL, &o);
		ck_assert_msg(o.status == 0, "%s: status %d: %s", cases[i].file, o.status, o.err);
		ck_assert_str_eq(o.out, cases[i].want);
		harness_free(&o);
	}
	/* -l wins over the extension */
	const char *args_l[] = { "run", "-l", "bash", sh, NULL };
	run(_i, args_l, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_msg(!strncmp(o.out, "sh 5.", 5) || !strncmp(o.out, "sh 4.", 5), "bash: %s", o.out);
	harness_free(&o);
	/* no extension, no -l: refused */
	const char *args_n[] = { "run", none, NULL };
	expect_run_error(_i, args_n, 2, "SandboxConfigError");
	tdir_remove(&d);
}
END_TEST

START_TEST(run_code_from_stdin)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "run", "-l", "python", "-", NULL };
	run(_i, args, "import sys\nprint('from stdin', sys.stdin.read() == '')\n", &o);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_str_eq(o.out, "from stdin True\n");
	harness_free(&o);
	const char *args_sh[] = { "run", "-l", "sh", "-", NULL };
	run(_i, args_sh, "echo sh-stdin; exit 4\n", &o);
	ck_assert_int_eq(o.status, 4);
	ck_assert_str_eq(o.out, "sh-stdin\n");
	harness_free(&o);
}
END_TEST

START_TEST(run_json)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "run", "--json", "-l", "python", "-c",
			       "import sys\nprint('j')\nprint('e', file=sys.stderr)\nsys.exit(3)", NULL };
	run(_i, args, NULL, &o);
	ck_assert_msg(o.status == 3, "status %d: %s", o.status, o.err);
	ck_assert_msg(o.json, "not JSON: %s", o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), "j\n");
	ck_assert_str_eq(harness_str(&o, "stderr"), "e\n");
	ck_assert(harness_num(&o, "exitCode") == 3);
	ck_assert(!harness_bool(&o, "timedOut"));
	ck_assert_str_eq(o.err, ""); /* nothing streamed */
	harness_free(&o);
}
END_TEST

START_TEST(run_timeout)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "run", "--timeout", "1s", "-l", "bash", "-c", "echo go; sleep 30", NULL };
	long t0 = harness_now_ms();
	run(_i, args, NULL, &o);
	long wall = harness_now_ms() - t0;
	ck_assert_msg(o.status == 124, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "go\n");
	ck_assert_msg(strstr(o.err, "timed out"), "stderr: %s", o.err);
	ck_assert_msg(wall >= 900 && wall < 5000, "wall %ld ms", wall);
	harness_free(&o);

	/* --json: the result says it, and the status is still 124 */
	const char *args_j[] = { "run", "--json", "--timeout", "300ms", "-l", "sh", "-c", "sleep 30", NULL };
	run(_i, args_j, NULL, &o);
	ck_assert_int_eq(o.status, 124);
	ck_assert_msg(o.json && harness_bool(&o, "timedOut"), "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "killedBy"), "timeout");
	harness_free(&o);
}
END_TEST

START_TEST(run_env_file_stdin)
{
	HARNESS_MODE_GUARD(_i);
	struct tdir d = { 0 };
	const char *src = tdir_add(&d, "data.txt", "file d\xc3\xa4ta\nline 2\n");
	const char *in = tdir_add(&d, "in.txt", "stdin text\n");
	char file_arg[256], stdin_arg[256];
	snprintf(file_arg, sizeof file_arg, "sub/dir/d.txt=%s", src);
	snprintf(stdin_arg, sizeof stdin_arg, "%s", in);
	const char *code = "import os, sys\n"
			   "print(os.environ['A'], '|' + os.environ['B'] + '|', os.environ['C'] == '')\n"
			   "print(open('sub/dir/d.txt', encoding='utf-8').read(), end='')\n"
			   "print(sys.stdin.read(), end='')\n"
			   "print(sorted(k for k in os.environ if k not in ('A', 'B', 'C')))\n";
	const char *args[] = { "run", "--env", "A=1", "--env", "B=x y=z", "--env", "C=", "--file",
			       file_arg, "--stdin", stdin_arg, "-l", "python", "-c", code, NULL };
	struct run_out o;
	run(_i, args, NULL, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "1 |x y=z| True\nfile d\xc3\xa4ta\nline 2\nstdin text\n"
				"['HOME', 'LANG', 'PATH', 'TMPDIR']\n");
	harness_free(&o);

	/* --stdin - : the program's stdin is moat's */
	const char *args_s[] = { "run", "--stdin", "-", "-l", "python", "-c",
				 "import sys\nprint(sys.stdin.read().upper(), end='')", NULL };
	run(_i, args_s, "piped in\n", &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "PIPED IN\n");
	harness_free(&o);

	/* bad flags of this family are refused */
	const char *bad_env[] = { "run", "--env", "NOEQUALS", "-c", "1", NULL };
	expect_run_error(_i, bad_env, 2, "SandboxConfigError");
	const char *bad_env_name[] = { "run", "--env", "BAD;NAME=1", "-c", "1", NULL };
	expect_run_error(_i, bad_env_name, 2, "SandboxPolicyError");
	const char *bad_file[] = { "run", "--file", "x=/nonexistent/moat-test", "-c", "1", NULL };
	expect_run_error(_i, bad_file, 2, "SandboxConfigError");
	char escape_arg[256];
	snprintf(escape_arg, sizeof escape_arg, "../x=%s", src);
	const char *bad_dest[] = { "run", "--file", escape_arg, "-c", "1", NULL };
	expect_run_error(_i, bad_dest, 2, "SandboxPolicyError");
	tdir_remove(&d);
}
END_TEST

START_TEST(run_max_output)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "run", "--max-output", "10", "-l", "python", "-c", "print('x' * 100)", NULL };
	run(_i, args, NULL, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "xxxxxxxxxx");
	ck_assert_msg(strstr(o.err, "stdout truncated at 10 bytes"), "stderr: %s", o.err);
	harness_free(&o);
}
END_TEST

START_TEST(run_streams_output)
{
	HARNESS_MODE_GUARD(_i);
	/* a first line must arrive long before the program ends */
	const char *code = "import sys, time\n"
			   "print('first', flush=True)\n"
			   "print('err-first', file=sys.stderr, flush=True)\n"
			   "time.sleep(1.5)\n"
			   "print('second')\n";
	int out_p[2], err_p[2];
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err_p, O_CLOEXEC), 0);
	const char *moat = harness_moat();
	long t0 = harness_now_ms();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		if (_i == MODE_ROOTLESS && geteuid() == 0 &&
		    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		     setresuid(65534, 65534, 65534) < 0))
			_exit(99);
		char *argv[] = { (char *)"moat", (char *)"run", (char *)"-l", (char *)"python",
				 (char *)"-c", (char *)code, NULL };
		char *envp[] = { (char *)"PATH=/usr/bin:/bin", NULL };
		execve(moat, argv, envp);
		_exit(98);
	}
	close(out_p[1]);
	close(err_p[1]);
	char buf[256] = "", ebuf[256] = "";
	size_t len = 0, elen = 0;
	long first_at = -1, err_first_at = -1;
	int open_fds = 2;
	while (open_fds > 0 && harness_now_ms() - t0 < 20000) {
		struct pollfd p[2] = { { out_p[0], POLLIN, 0 }, { err_p[0], POLLIN, 0 } };
		if (poll(p, 2, 100) <= 0)
			continue;
		for (int k = 0; k < 2; k++) {
			if (p[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP)))
				continue;
			char *b = k ? ebuf : buf;
			size_t *l = k ? &elen : &len;
			ssize_t n = read(p[k].fd, b + *l, 255 - *l);
			if (n <= 0) {
				close(k ? err_p[0] : out_p[0]);
				if (k)
					err_p[0] = -1;
				else
					out_p[0] = -1;
				open_fds--;
				continue;
			}
			*l += (size_t)n;
			b[*l] = '\0';
			if (!k && first_at < 0 && strstr(buf, "first\n"))
				first_at = harness_now_ms() - t0;
			if (k && err_first_at < 0 && strstr(ebuf, "err-first\n"))
				err_first_at = harness_now_ms() - t0;
		}
	}
	long total = harness_now_ms() - t0;
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x, stderr %s", st, ebuf);
	ck_assert_str_eq(buf, "first\nsecond\n");
	ck_assert_str_eq(ebuf, "err-first\n");
	ck_assert_msg(total >= 1500, "run took only %ld ms", total);
	ck_assert_msg(first_at >= 0 && first_at < 1200, "first stdout line after %ld ms (run %ld ms)",
		      first_at, total);
	ck_assert_msg(err_first_at >= 0 && err_first_at < 1200, "first stderr line after %ld ms",
		      err_first_at);
}
END_TEST

START_TEST(run_usage_errors)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *unknown[] = { "run", "--bogus-flag", "-c", "print(1)", NULL };
	run(_i, unknown, NULL, &o);
	ck_assert_msg(o.status == 2, "status %d", o.status);
	ck_assert_str_eq(o.out, "");
	harness_free(&o);

	static const char *const bad_timeouts[] = { "abc", "0", "-1", "5x", "", "1e999" };
	for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
		const char *args[] = { "run", "--timeout", bad_timeouts[i], "-c", "print(1)", NULL };
		expect_run_error(_i, args, 2, "SandboxConfigError");
	}
	const char *lang[] = { "run", "-l", "cobol", "-c", "1", NULL };
	expect_run_error(_i, lang, 2, "SandboxConfigError");
	const char *no_code[] = { "run", "-l", "python", NULL };
	expect_run_error(_i, no_code, 2, "SandboxConfigError");
	const char *two_codes[] = { "run", "-c", "1", "/tmp/x.py", NULL };
	expect_run_error(_i, two_codes, 2, "SandboxConfigError");
	const char *missing[] = { "run", "/nonexistent/moat-test.py", NULL };
	expect_run_error(_i, missing, 2, "SandboxConfigError");
	const char *memory[] = { "run", "--memory", "lots", "-c", "1", NULL };
	expect_run_error(_i, memory, 2, "SandboxConfigError");
	const char *rootfs[] = { "run", "--rootfs", "/nonexistent", "-c", "print(1)", NULL };
	expect_run_error(_i, rootfs, 2, "SandboxConfigError");
	const char *rootfs_rel[] = { "run", "--rootfs", "relative/dir", "-c", "print(1)", NULL };
	expect_run_error(_i, rootfs_rel, 2, "SandboxConfigError");
}
END_TEST

START_TEST(version_and_commands)
{
	struct run_out o;
	const char *version[] = { "version", NULL };
	run(MODE_ROOTLESS, version, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_msg(!strncmp(o.out, "moat 0.", 7) && o.out[o.out_len - 1] == '\n', "version: %s",
		      o.out);
	/* each library line says how it is linked, and says it truly: the
	 * dynamic loader's list of what it loads must agree */
	static const char *const libs[][2] = { { "\nlibseccomp ", "libseccomp.so" },
					       { "\nlibcap ", "libcap.so" },
					       { "\ncJSON ", "libcjson.so" } };
	char *cmd = NULL;
	ck_assert_int_gt(asprintf(&cmd, "LD_TRACE_LOADED_OBJECTS=1 '%s'", harness_moat()), 0);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char loaded[8192];
	size_t n = fread(loaded, 1, sizeof loaded - 1, p);
	loaded[n] = 0;
	pclose(p);
	free(cmd);
	for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
		const char *line = strstr(o.out, libs[i][0]);
		ck_assert_msg(line, "no %s line in: %s", libs[i][0] + 1, o.out);
		const char *eol = strchr(line + 1, '\n');
		ck_assert_ptr_nonnull(eol);
		bool shared = strstr(loaded, libs[i][1]) != NULL;
		const char *want = shared ? "(shared)" : "(static)";
		ck_assert_msg(eol - line > 9 && !strncmp(eol - 8, want, 8),
			      "%.*s: expected %s (loader: %s)", (int)(eol - line - 1), line + 1, want,
			      loaded);
	}
	harness_free(&o);

	const char *none[] = { NULL };
	run(MODE_ROOTLESS, none, NULL, &o);
	ck_assert_int_eq(o.status, 2);
	harness_free(&o);
	const char *bogus[] = { "bogus-command", NULL };
	run(MODE_ROOTLESS, bogus, NULL, &o);
	ck_assert_int_eq(o.status, 2);
	ck_assert_msg(strstr(o.err, "bogus-command"), "%s", o.err);
	harness_free(&o);
}
END_TEST

START_TEST(exec_takes_no_arguments)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "exec", "extra-arg", NULL };
	const char *req = "{\"code\":\"print(1)\"}";
	harness_run(_i, args, req, strlen(req), &o);
	ck_assert_msg(o.status == 2, "status %d: %s", o.status, o.out);
	ck_assert_msg(o.json, "not JSON: %s", o.out);
	ck_assert_str_eq(harness_error_type(&o), "SandboxConfigError");
	ck_assert_ptr_null(harness_str(&o, "stdout"));
	harness_free(&o);

	const char *rootfs[] = { "exec", "--rootfs", "/nonexistent", NULL };
	harness_run(_i, rootfs, req, strlen(req), &o);
	ck_assert_msg(o.status == 2 && o.json, "status %d: %s", o.status, o.out);
	ck_assert_str_eq(harness_error_type(&o), "SandboxConfigError");
	harness_free(&o);
}
END_TEST

/* A root without the interpreter: the run fails as unavailable and names
 * the interpreter, even though init also sees the program's process exit 127
 * (a setup report wins over that status: the program never started). */
START_TEST(missing_interpreter_is_explained)
{
	HARNESS_MODE_GUARD(_i);
	char dir[] = "/tmp/moat-noroot.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	static const char *const subs[] = { "proc", "dev", "tmp", "sandbox" };
	char path[128];
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
		ck_assert_int_eq(mkdir(path, 0755), 0);
	}
	const char *args[] = { "run", "--rootfs", dir, "-c", "print(1)", NULL };
	expect_run_error(_i, args, 3, "SandboxUnavailableError");
	struct run_out o;
	run(_i, args, NULL, &o);
	ck_assert_msg(strstr(o.err, "python3 is not installed in the sandbox root"), "%s", o.err);
	harness_free(&o);
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
		rmdir(path);
	}
	rmdir(dir);
}
END_TEST

/* In the forked child, as root: a mount namespace where /proc/sys is
 * mounted over (read-only), as Docker and a pod without procMount:
 * Unmasked give it. */
static int mask_proc(int mode, void *arg)
{
	(void)mode;
	(void)arg;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("/proc/sys", "/proc/sys", NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV |
							  MS_NOEXEC, NULL) < 0) {
		perror("mask /proc/sys");
		return -1;
	}
	return 0;
}

/* A masked /proc (a container runtime's mounts over parts of it) makes the
 * kernel refuse the sandbox its own /proc. The run fails closed, and both
 * the error and moat doctor say why and what the fix is, instead of a bare
 * "mount proc on /proc: Operation not permitted" and a doctor that says
 * isolation is complete. Needs root to build the mount namespace. */
START_TEST(masked_proc_is_explained)
{
	HARNESS_MODE_GUARD(_i);
	if (!harness_is_root()) {
		harness_skip("%s: needs root for the mount namespace", __func__);
		return;
	}
	static const char req[] = "{\"language\":\"python\",\"code\":\"print('ran')\"}";
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };
	struct harness_proc p;
	struct run_out o = { 0 }, d = { 0 };
	harness_start(_i, (const char *const[]){ "exec", NULL }, req, strlen(req), env, mask_proc,
		      NULL, &p);
	harness_finish(&p, &o);
	ck_assert_msg(o.status == 3 && !strstr(o.out, "ran\\n"), "status %d: %s %s", o.status, o.out,
		      o.err);
	ck_assert_str_eq(harness_error_type(&o), "SandboxUnavailableError");
	ck_assert_msg(strstr(o.out, "mount proc on /proc") && strstr(o.out, "(/proc/sys)") &&
		      strstr(o.out, "procMount: Unmasked") && strstr(o.out, "systempaths=unconfined"),
		      "%s", o.out);
	harness_start(_i, (const char *const[]){ "doctor", NULL }, NULL, 0, env, mask_proc, NULL, &p);
	harness_finish(&p, &d);
	ck_assert_msg(d.status == 3, "doctor status %d: %s %s", d.status, d.out, d.err);
	ck_assert_msg(strstr(d.out, "\n/proc:              MASKED: /proc has mounts over parts of "
				    "it (/proc/sys)") &&
		      strstr(d.out, "verdict isolation:  UNAVAILABLE"), "%s", d.out);
	harness_free(&o);
	harness_free(&d);
}
END_TEST

START_TEST(doctor_ok)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "doctor", NULL };
	run(_i, args, NULL, &o);
	ck_assert_msg(o.status == 0, "doctor status %d: %s %s", o.status, o.out, o.err);
	const char *line = strstr(o.out, "user namespaces:");
	ck_assert_msg(line, "no user namespaces line: %s", o.out);
	const char *eol = strchr(line, '\n');
	size_t n = eol ? (size_t)(eol - line) : strlen(line);
	char l[256];
	snprintf(l, sizeof l, "%.*s", (int)(n < 255 ? n : 255), line);
	ck_assert_msg(strstr(l, " ok"), "user namespaces not ok: %s", l);
	ck_assert_msg(strstr(o.out, "\n/proc:              fully visible"), "%s", o.out);
	/* one real sandbox ran (what the probes cannot see, a container's
	 * seccomp profile refusing a mount, fails it: tests/deploy/seccomp.sh) */
	ck_assert_msg(strstr(o.out, "\ntrial run:          ok (true ran in a sandbox)\n"),
		      "no successful trial run: %s", o.out);
	/* the seccomp cache line tells the truth: root has /var/cache/moat;
	 * the harness's uid 65534 runs with HOME=/nonexistent, so it has none */
	const char *cache = strstr(o.out, "seccomp cache:");
	ck_assert_msg(cache, "no seccomp cache line: %s", o.out);
	const char *want_cache = _i == MODE_ROOT ? "seccomp cache:      /var/cache/moat/seccomp\n"
						 : "seccomp cache:      none usable (/nonexistent/";
	ck_assert_msg(!strncmp(cache, want_cache, strlen(want_cache)), "%s", o.out);
	/* doctor's limits are what a run asking for every limit really gets */
	char want[3][64];
	static const char *const keys[] = { "memory", "pids", "cpu" };
	static const char *const labels[] = { "limit memory:", "limit pids:", "limit cpu:" };
	for (int k = 0; k < 3; k++) {
		const char *p = strstr(o.out, labels[k]);
		ck_assert_msg(p, "doctor has no \"%s\" line: %s", labels[k], o.out);
		p += strlen(labels[k]);
		while (*p == ' ')
			p++;
		snprintf(want[k], sizeof want[k], "%.*s", (int)strcspn(p, " \n"), p);
	}
	harness_free(&o);
	harness_exec_code(_i, "sh", "true", ",\"memoryMb\":256,\"pidsLimit\":64,\"cpus\":1", &o);
	const cJSON *limits = cJSON_GetObjectItemCaseSensitive(o.json, "limits");
	for (int k = 0; k < 3; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(limits, keys[k]);
		ck_assert_msg(cJSON_IsString(v) && !strcmp(v->valuestring, want[k]),
			      "doctor says %s for %s, a run got: %s", want[k], keys[k], o.out);
	}
	harness_free(&o);
}
END_TEST

/* The line of out that starts with label, without it and the padding. */
static void doctor_line(const char *out, const char *label, char *buf, size_t len)
{
	const char *p = strstr(out, label);
	ck_assert_msg(p && (p == out || p[-1] == '\n'), "doctor has no \"%s\" line: %s", label, out);
	p += strlen(label);
	while (*p == ' ')
		p++;
	snprintf(buf, len, "%.*s", (int)strcspn(p, "\n"), p);
}

/* Is favordynmods on a cgroup mount of this host? */
static bool host_favordynmods(void)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	ck_assert_ptr_nonnull(f);
	char *line = NULL;
	size_t cap = 0;
	bool yes = false;
	while (getline(&line, &cap, f) > 0)
		if ((strstr(line, " cgroup ") || strstr(line, " cgroup2 ")) && strstr(line, "favordynmods"))
			yes = true;
	free(line);
	fclose(f);
	return yes;
}

/* moat doctor measures what a run's move into its cgroup v1 leaves costs after
 * a pause (a v1 cgroup.procs write can wait for an RCU grace period) where runs
 * move into v1 cgroups (as root on this hybrid host), and names the remedy
 * (favordynmods, cgroup v2) when it waits and the host has no favordynmods;
 * where no run joins a v1 cgroup (rootless here), it says nothing of it. */
START_TEST(doctor_v1_join)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "sh", "true", ",\"memoryMb\":256,\"pidsLimit\":64,\"cpus\":1", &o);
	char *lim = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o.json, "limits"));
	bool v1 = lim && strstr(lim, "cgroup-v1") != NULL;
	char limits[256];
	snprintf(limits, sizeof limits, "%s", lim ? lim : "(none)");
	free(lim);
	harness_free(&o);
	const char *args[] = { "doctor", NULL };
	run(_i, args, NULL, &o);
	ck_assert_msg(o.status == 0, "doctor status %d: %s %s", o.status, o.out, o.err);
	const char *p = strstr(o.out, "\ncgroup v1 join:");
	if (!v1) {
		ck_assert_msg(!p, "a run here joins no v1 cgroup (limits %s), yet: %s", limits, o.out);
		harness_free(&o);
		return;
	}
	char line[1024];
	ck_assert_msg(p, "runs here join v1 cgroups (limits %s); doctor has no \"cgroup v1 join\" "
		      "line: %s", limits, o.out);
	doctor_line(o.out, "cgroup v1 join:", line, sizeof line);
	double ms = -1;
	ck_assert_msg(sscanf(line, "%lf ms per run", &ms) == 1 && ms >= 0, "no figure: %s", line);
	bool favor = host_favordynmods();
	bool remedy = strstr(o.out, "\n  remedy:") != NULL;
	if (favor)
		ck_assert_msg(strstr(line, "favordynmods is on") && !remedy, "favordynmods is on: %s",
			      o.out);
	else if (ms >= 1.0)
		ck_assert_msg(remedy && strstr(o.out, "favordynmods /sys/fs/cgroup/unified") &&
				      strstr(o.out, "cgroup v2") && strstr(o.out, "grace period"),
			      "a %.1f ms wait without its cause and remedy: %s", ms, o.out);
	else
		ck_assert_msg(!remedy, "a remedy for a %.1f ms move: %s", ms, o.out);
	harness_free(&o);
}
END_TEST

/* doctor's verdict keeps isolation and limits apart, and names each limit
 * by the mechanism the trial run got: "rlimit (fallback)", "none (not
 * enforced)" and a pointer to the warnings whenever a limit is short of a
 * cgroup; never "fully isolated" for a host that only isolates. */
static void check_doctor_verdict(const struct run_out *o)
{
	ck_assert_msg(o->status == 0, "doctor status %d: %s %s", o->status, o->out, o->err);
	ck_assert_msg(!strstr(o->out, "fully isolated"), "%s", o->out);
	char line[512];
	doctor_line(o->out, "verdict isolation:", line, sizeof line);
	ck_assert_msg(!strncmp(line, "complete", 8), "isolation verdict: %s", line);
	ck_assert_msg(!strstr(line, "limit"), "the isolation verdict speaks of limits: %s", line);
	/* Landlock: claimed exactly when this kernel has it */
	long abi = syscall(444 /* landlock_create_ruleset */, NULL, 0, 1u);
	char ll[512];
	doctor_line(o->out, "landlock:", ll, sizeof ll);
	if (abi >= 1) {
		ck_assert_msg(!strncmp(ll, "ABI ", 4) && atol(ll + 4) == abi, "landlock line: %s", ll);
		ck_assert_msg(strstr(line, "Landlock") && !strstr(line, "no Landlock"), "%s", line);
	} else {
		ck_assert_msg(!strncmp(ll, "not available", 13), "landlock line: %s", ll);
		ck_assert_msg(strstr(line, "no Landlock"), "%s", line);
	}
	char verdict[512];
	doctor_line(o->out, "verdict limits:", verdict, sizeof verdict);
	static const char *const names[] = { "memory", "pids", "cpu" };
	static const char *const labels[] = { "limit memory:", "limit pids:", "limit cpu:" };
	bool all_cgroup = true;
	for (int k = 0; k < 3; k++) {
		char mech[64], want[128];
		doctor_line(o->out, labels[k], mech, sizeof mech);
		bool cg = !strncmp(mech, "cgroup-", 7);
		all_cgroup = all_cgroup && cg;
		snprintf(want, sizeof want, "%s %s%s", names[k], mech,
			 !strcmp(mech, "rlimit") ? " (fallback)"
			 : !strcmp(mech, "none") ? " (not enforced)" : "");
		ck_assert_msg(strstr(verdict, want), "%s is \"%s\", the verdict says: %s", names[k],
			      mech, verdict);
	}
	if (all_cgroup) {
		ck_assert_msg(strstr(verdict, "all enforced by cgroups"), "%s", verdict);
	} else {
		ck_assert_msg(!strstr(verdict, "all enforced"), "claims limits it lacks: %s", verdict);
		ck_assert_msg(strstr(verdict, "see the warnings"), "%s", verdict);
		ck_assert_msg(strstr(o->out, "  warning:"), "no warning to see: %s", o->out);
	}
}

START_TEST(doctor_verdict_separates_limits)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *args[] = { "doctor", NULL };
	run(_i, args, NULL, &o);
	check_doctor_verdict(&o);
	harness_free(&o);
	if (_i != MODE_ROOTLESS)
		return;
	/* uid 65534 with no cgroup it may write: the limits fall back to
	 * rlimits (memory, pids) and nothing (cpu), and the verdict says so */
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent",
			      "MOAT_CGROUP_PARENT=/moat-test-no-such-cgroup", NULL };
	struct harness_proc p;
	harness_start(_i, args, NULL, 0, env, NULL, NULL, &p);
	memset(&o, 0, sizeof o);
	harness_finish(&p, &o);
	check_doctor_verdict(&o);
	ck_assert_msg(!strstr(o.out, "all enforced by cgroups"), "%s", o.out);
	harness_free(&o);
}
END_TEST

/* A host that refuses user namespaces: moat fails closed with the cause and
 * the fix. The refusal is made real by a user namespace of the test's own
 * whose user.max_user_namespaces is 0 (the knob is per namespace). */
START_TEST(userns_unavailable_is_explained)
{
	HARNESS_MODE_GUARD(_i);
	const char *moat = harness_moat();
	int out_p[2];
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	uid_t outer_uid = _i == MODE_ROOTLESS ? 65534 : geteuid();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(out_p[1], 2);
		if (_i == MODE_ROOTLESS && geteuid() == 0 &&
		    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		     setresuid(65534, 65534, 65534) < 0))
			_exit(90);
		/* the uid change made us non-dumpable: /proc/self would be root's */
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
			_exit(96);
		if (unshare(CLONE_NEWUSER) < 0)
			_exit(91);
		char map[64];
		int fd = open("/proc/self/setgroups", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "deny", 4) != 4)
			_exit(92);
		close(fd);
		snprintf(map, sizeof map, "0 %u 1", (unsigned)outer_uid);
		fd = open("/proc/self/uid_map", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t)strlen(map))
			_exit(93);
		close(fd);
		fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			_exit(94);
		close(fd);
		char *argv[] = { (char *)"moat", (char *)"run", (char *)"-l", (char *)"sh",
				 (char *)"-c", (char *)"echo started", NULL };
		char *envp[] = { (char *)"PATH=/usr/bin:/bin", NULL };
		execve(moat, argv, envp);
		_exit(95);
	}
	close(out_p[1]);
	char buf[4096];
	size_t len = 0;
	ssize_t n;
	while (len < sizeof buf - 1 && (n = read(out_p[0], buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(out_p[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status %d, stderr: %s", st, buf);
	ck_assert_msg(strstr(buf, "SandboxUnavailableError"), "stderr: %s", buf);
	ck_assert_msg(strstr(buf, "user.max_user_namespaces=0") && strstr(buf, "sysctl"),
		      "no cause and fix named: %s", buf);
	ck_assert_msg(!strstr(buf, "started"), "the program ran: %s", buf);
}
END_TEST

Suite *cli_suite(void)
{
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("cli");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, run_file_detects_language, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, doctor_v1_join, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_code_from_stdin, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_json, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_timeout, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_env_file_stdin, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_max_output, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_streams_output, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, run_usage_errors, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_test(tc, version_and_commands);
	tcase_add_loop_test(tc, exec_takes_no_arguments, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, doctor_ok, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, masked_proc_is_explained, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, doctor_verdict_separates_limits, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, missing_interpreter_is_explained, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, userns_unavailable_is_explained, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
