/* Escape attempts that do not depend on seccomp: each must be stopped by the
 * namespaces, the dropped privileges or the mount flags alone. Run as root
 * and rootless (loop index = harness mode). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "integration/suites.h"

/* ---- helpers ---------------------------------------------------------------- */

static void expect_py(int mode, const char *code, const char *want)
{
	struct run_out o;
	harness_exec_code(mode, "python", code, "", &o);
	ck_assert_msg(o.status == 0 && harness_error_type(&o) == NULL, "mode %d: status %d: %s",
		      mode, o.status, o.out);
	const char *so = harness_str(&o, "stdout");
	ck_assert_msg(harness_num(&o, "exitCode") == 0, "mode %d: program failed: %s", mode, o.out);
	ck_assert_msg(so && strcmp(so, want) == 0, "mode %d:\n got [%s]\nwant [%s]\nstderr [%s]", mode,
		      so, want, harness_str(&o, "stderr"));
	harness_free(&o);
}

#define PY_LIBC                                                                      \
	"import ctypes, errno, os\n"                                                 \
	"libc = ctypes.CDLL(None, use_errno=True)\n"                                 \
	"def call(f, *a):\n"                                                         \
	"    ctypes.set_errno(0)\n"                                                  \
	"    rc = f(*a)\n"                                                           \
	"    return '%d %s' % (rc, errno.errorcode.get(ctypes.get_errno(), '-') if rc else 'ok')\n" \
	"def err(f):\n"                                                              \
	"    try:\n"                                                                 \
	"        f()\n"                                                              \
	"        return 'ok'\n"                                                      \
	"    except OSError as e:\n"                                                 \
	"        return errno.errorcode.get(e.errno, str(e))\n"

static void copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(in >= 0, "open %s: %s", from, strerror(errno));
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(out >= 0, "create %s: %s", to, strerror(errno));
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(fchmod(out, mode), 0);
	close(in);
	close(out);
}

/* mkdir -p DIR/REL (REL absolute), every level 0755 */
static void mkdirs(const char *dir, const char *rel)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s%s", dir, rel);
	for (char *p = path + strlen(dir) + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0)
			ck_assert_int_eq(errno, EEXIST);
		*p = '/';
	}
	if (mkdir(path, 0755) < 0)
		ck_assert_int_eq(errno, EEXIST);
}

/* copies host file ABS (following links) to DIR/ABS */
static void copy_into(const char *dir, const char *abs, mode_t mode)
{
	char parent[PATH_MAX], real[PATH_MAX], dst[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", abs);
	*strrchr(parent, '/') = '\0';
	if (parent[0])
		mkdirs(dir, parent);
	ck_assert_ptr_nonnull(realpath(abs, real));
	snprintf(dst, sizeof dst, "%s%s", dir, abs);
	copy_file(real, dst, mode);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static const char PROBE_SRC[] =
	"#define _GNU_SOURCE\n#include <errno.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
	"int main(void)\n{\n"
	"\tuid_t r, e, s;\n"
	"\tgetresuid(&r, &e, &s);\n"
	"\tint rc = setuid(0);\n"
	"\tint err = errno;\n"
	"\tprintf(\"uids=%d,%d,%d setuid=%d %s\\n\", (int)r, (int)e, (int)s, rc, rc ? strerrorname_np(err) : \"ok\");\n"
	"\treturn 0;\n}\n";

/* A --rootfs with dash, its libraries and a root-owned setuid probe. */
static void build_suid_rootfs(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/moat-suid-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	static const char *const dirs[] = { "/proc", "/dev", "/tmp", "/sandbox", "/usr/bin" };
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		mkdirs(dir, dirs[i]);
	char sh[PATH_MAX], dst[PATH_MAX + 32];
	ck_assert_ptr_nonnull(realpath("/bin/sh", sh));
	snprintf(dst, sizeof dst, "%s/usr/bin/sh", dir);
	copy_file(sh, dst, 0755);
	/* the libraries ldd lists for it */
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "ldd %s", sh);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[1024];
	int libs = 0;
	while (fgets(line, sizeof line, p)) {
		char *slash = strchr(line, '/');
		if (!slash)
			continue; /* linux-vdso */
		slash[strcspn(slash, " \t\n(")] = '\0';
		copy_into(dir, slash, 0755);
		libs++;
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_int_gt(libs, 0);
	/* the static setuid probe */
	char src[PATH_MAX + 16], bin[PATH_MAX + 32];
	snprintf(src, sizeof src, "%s.c", dir);
	FILE *f = fopen(src, "w");
	ck_assert_ptr_nonnull(f);
	fputs(PROBE_SRC, f);
	fclose(f);
	snprintf(bin, sizeof bin, "%s/usr/bin/suidprobe", dir);
	char *cc = NULL;
	ck_assert_int_ge(asprintf(&cc, "cc -static -O1 -o %s %s", bin, src), 0);
	int rc = system(cc);
	unlink(src);
	ck_assert_msg(rc == 0, "%s failed (%d)", cc, rc);
	free(cc);
	ck_assert_int_eq(chown(bin, 0, 0), 0);
	ck_assert_int_eq(chmod(bin, 04755), 0);
}

/* Runs the probe on the host as uid 65534: it must really be setuid root. */
static void host_probe_sanity(const char *dir)
{
	char bin[PATH_MAX + 32];
	snprintf(bin, sizeof bin, "%s/usr/bin/suidprobe", dir);
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(99);
		execl(bin, "suidprobe", (char *)NULL);
		_exit(98);
	}
	close(pfd[1]);
	char buf[256] = "";
	ssize_t n = read(pfd[0], buf, sizeof buf - 1);
	close(pfd[0]);
	buf[n > 0 ? n : 0] = '\0';
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(!strcmp(buf, "uids=65534,0,0 setuid=0 ok\n"),
		      "the probe is not setuid root on the host (host /tmp nosuid?): %s", buf);
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(setuid_binary_gains_nothing)
{
	HARNESS_MODE_GUARD(_i);
	if (!harness_is_root()) {
		harness_skip("%s needs root to make a root-owned setuid file", __func__);
		return;
	}
	char dir[64];
	build_suid_rootfs(dir, sizeof dir);
	host_probe_sanity(dir);
	struct run_out o;
	const char *args[] = { "run", "--rootfs", dir, "-l", "sh", "-c",
			       "/usr/bin/suidprobe; echo done", NULL };
	harness_run(_i, args, NULL, 0, &o);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	ck_assert_msg(o.status == 0, "mode %d: status %d: %s%s", _i, o.status, o.out, o.err);
	/* EINVAL: uid 0 is not mapped in the sandbox; EPERM: no capability */
	ck_assert_msg(!strcmp(o.out, "uids=65534,65534,65534 setuid=-1 EINVAL\ndone\n") ||
		      !strcmp(o.out, "uids=65534,65534,65534 setuid=-1 EPERM\ndone\n"),
		      "mode %d: %s", _i, o.out);
	harness_free(&o);
}
END_TEST

START_TEST(mount_family_refused)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_LIBC
		  "print('mount', call(libc.mount, b'none', b'/tmp', b'tmpfs', 0, None))\n"
		  "print('bind', call(libc.mount, b'/usr', b'/sandbox', None, 4096, None))\n"
		  "print('remount', call(libc.mount, None, b'/', None, 32, None))\n"
		  "print('umount', call(libc.umount2, b'/proc', 2))\n"
		  "print('chroot', call(libc.chroot, b'/tmp'))\n"
		  "print('unshare', call(libc.unshare, 0x00020000))\n"
		  "print('setns', call(libc.setns, os.open('/proc/self/ns/mnt', os.O_RDONLY), 0))\n",
		  "mount -1 EPERM\nbind -1 EPERM\nremount -1 EPERM\numount -1 EPERM\n"
		  "chroot -1 EPERM\nunshare -1 EPERM\nsetns -1 EPERM\n");
}
END_TEST

START_TEST(identity_cannot_change)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_LIBC
		  "def w(p, data):\n"
		  "    def f():\n"
		  "        with open(p, 'w') as fh: fh.write(data)\n"
		  "    return err(f)\n"
		  /* EPERM from the kernel's id-map rules, or EACCES from Landlock
		   * (which refuses writes under /proc first where the kernel has it) */
		  "ref = ('EPERM', 'EACCES')\n"
		  "print('uid_map', w('/proc/self/uid_map', '0 0 1\\n') in ref)\n"
		  "print('gid_map', w('/proc/self/gid_map', '0 0 1\\n') in ref)\n"
		  "print('setgroups file', w('/proc/self/setgroups', 'allow\\n') != 'ok')\n"
		  "print('setgroups', err(lambda: os.setgroups([0])))\n"
		  /* EINVAL: 0 is not even mapped; EPERM: no capability */
		  "no = ('EINVAL', 'EPERM')\n"
		  "print('setuid', err(lambda: os.setuid(0)) in no, err(lambda: os.setresuid(0, 0, 0)) in no,\n"
		  "      err(lambda: os.setuid(1000)) in no)\n"
		  "print('setgid', err(lambda: os.setgid(0)) in no, err(lambda: os.setresgid(0, 0, 0)) in no)\n"
		  "print(os.getresuid(), os.getresgid(), os.getgroups())\n",
		  "uid_map True\ngid_map True\nsetgroups file True\nsetgroups EPERM\n"
		  "setuid True True True\nsetgid True True\n(65534, 65534, 65534) (65534, 65534, 65534) []\n");
}
END_TEST

START_TEST(no_hard_links_to_host_files)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_LIBC
		  "print(err(lambda: os.link('/etc/passwd', '/tmp/p')), err(lambda: os.link('/usr/bin/env', '/sandbox/e')))\n"
		  "print(err(lambda: os.rename('/etc/hosts', '/tmp/h')))\n",
		  "EXDEV EXDEV\nEXDEV\n");
}
END_TEST

START_TEST(kill_all_only_kills_sandbox)
{
	HARNESS_MODE_GUARD(_i);
	if (!harness_is_root()) {
		harness_skip("%s needs root to start a uid-65534 host process", __func__);
		return;
	}
	/* a host process with the sandbox's host uid (65534 in both modes) */
	pid_t victim = fork();
	ck_assert_int_ge(victim, 0);
	if (victim == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(99);
		execl("/bin/sleep", "moat-test-victim", "30", (char *)NULL);
		_exit(98);
	}
	usleep(50000);
	struct run_out o;
	harness_exec_code(_i, "python",
			  "import os, signal, subprocess\n"
			  "child = subprocess.Popen(['sleep', '30'])\n"
			  "os.kill(-1, signal.SIGKILL)\n"
			  "print('child', child.wait())\n",
			  "", &o);
	int alive = kill(victim, 0) == 0 && waitpid(victim, NULL, WNOHANG) == 0;
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	ck_assert_msg(o.status == 0 && harness_num(&o, "exitCode") == 0, "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), "child -9\n");
	ck_assert_msg(alive, "kill(-1, SIGKILL) inside the sandbox killed a host process (mode %d)", _i);
	harness_free(&o);
}
END_TEST

START_TEST(kernel_interfaces_closed)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_LIBC
		  "def w(p, data):\n"
		  "    def f():\n"
		  "        with open(p, 'w') as fh: fh.write(data)\n"
		  "    return err(f)\n"
		  "print('sysrq', w('/proc/sysrq-trigger', 'c') != 'ok')\n"
		  "print('core_pattern', w('/proc/sys/kernel/core_pattern', '|/tmp/x') != 'ok')\n"
		  "print('dev kmsg', os.path.exists('/dev/kmsg'))\n"
		  "def rd(p):\n"
		  "    if not os.path.exists(p): return 'absent'\n"
		  "    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
		  "    try: return 'empty' if os.read(fd, 4096) == b'' else 'LEAKS'\n"
		  "    except OSError as e: return errno.errorcode[e.errno]\n"
		  "    finally: os.close(fd)\n"
		  "print('proc kmsg', rd('/proc/kmsg') in ('absent', 'empty'))\n"
		  "print('reboot', call(libc.reboot, 0x4321FEDC))\n"
		  "print('sethostname', call(libc.sethostname, b'evil', 4))\n",
		  "sysrq True\ncore_pattern True\ndev kmsg False\nproc kmsg True\n"
		  "reboot -1 EPERM\nsethostname -1 EPERM\n");
}
END_TEST

Suite *escape_suite(void)
{
	Suite *s = suite_create("escape");
	TCase *tc = tcase_create("escape");
	tcase_set_timeout(tc, 90);
	tcase_add_loop_test(tc, setuid_binary_gains_nothing, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, mount_family_refused, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, identity_cannot_change, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_hard_links_to_host_files, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, kill_all_only_kills_sandbox, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, kernel_interfaces_closed, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
