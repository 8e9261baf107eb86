/* DESIGN.md §4 invariants 1, 2, 3, 5, 6, 7 and the output/tmpfs/rlimit parts
 * of 8, checked from inside real sandboxes, as root and rootless (loop index =
 * harness mode). Each program prints a verdict that is compared exactly. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* ---- helpers ---------------------------------------------------------------- */

/* Runs python code through moat exec and compares its stdout exactly. */
static void expect_py_env(int mode, const char *code, const char *extra, const char *want)
{
	struct run_out o;
	harness_exec_code(mode, "python", code, extra, &o);
	ck_assert_msg(o.status == 0 && harness_error_type(&o) == NULL, "mode %d: status %d: %s",
		      mode, o.status, o.out);
	const char *so = harness_str(&o, "stdout");
	ck_assert_msg(harness_num(&o, "exitCode") == 0, "mode %d: program failed: stdout [%s] stderr [%s]",
		      mode, so, harness_str(&o, "stderr"));
	ck_assert_msg(so && strcmp(so, want) == 0, "mode %d:\n got [%s]\nwant [%s]\nstderr [%s]", mode,
		      so, want, harness_str(&o, "stderr"));
	harness_free(&o);
}

static void expect_py(int mode, const char *code, const char *want)
{
	expect_py_env(mode, code, "", want);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Python repr of a sorted list of names: ['a', 'b']. */
static void py_list(const char **names, size_t n, char *buf, size_t len)
{
	qsort(names, n, sizeof *names, cmp_str);
	size_t off = (size_t)snprintf(buf, len, "[");
	for (size_t i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s'%s'", i ? ", " : "", names[i]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

/* A python prelude: err(f) runs f and returns 'ok' or the errno name. */
#define PY_ERR                                                         \
	"import errno, os\n"                                           \
	"def err(f):\n"                                                \
	"    try:\n"                                                   \
	"        f()\n"                                                \
	"        return 'ok'\n"                                        \
	"    except OSError as e:\n"                                   \
	"        return errno.errorcode.get(e.errno, str(e))\n"        \
	"def w(p, data='x', mode='a'):\n"                              \
	"    def f():\n"                                               \
	"        with open(p, mode) as fh:\n"                          \
	"            fh.write(data)\n"                                 \
	"    return err(f)\n"

/* moat started by hand, for what harness_run cannot do: a terminal as its
 * stdio, an inherited host fd, being killed mid-run. Its stdout and stderr
 * both go to *out_fd. */
static pid_t spawn_moat(int mode, const char *const *args, const char *stdin_text, bool pty,
			bool leak_fd, int *out_fd)
{
	const char *moat = harness_moat();
	int p[2] = { -1, -1 }, in[2] = { -1, -1 }, master = -1;
	char slave[128] = "";
	if (pty) {
		master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		ck_assert_msg(master >= 0, "posix_openpt: %s", strerror(errno));
		ck_assert_int_eq(grantpt(master), 0);
		ck_assert_int_eq(unlockpt(master), 0);
		ck_assert_int_eq(ptsname_r(master, slave, sizeof slave), 0);
	} else {
		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	}
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	size_t argc = 0;
	while (args[argc])
		argc++;
	char **argv = calloc(argc + 2, sizeof *argv);
	ck_assert_ptr_nonnull(argv);
	argv[0] = (char *)"moat";
	for (size_t i = 0; i < argc; i++)
		argv[i + 1] = (char *)args[i];
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = p[1];
		if (pty) {
			setsid();
			o = open(slave, O_RDWR);
			if (o < 0 || ioctl(o, TIOCSCTTY, 0) < 0)
				_exit(97);
			dup2(o, 0);
		} else {
			dup2(in[0], 0);
		}
		dup2(o, 1);
		dup2(o, 2);
		if (leak_fd) {
			/* a host fd without FD_CLOEXEC: moat must not pass it on */
			int f = open("/etc/hostname", O_RDONLY);
			if (f < 0 || dup2(f, 7) < 0)
				_exit(96);
		}
		if (mode == MODE_ROOTLESS && geteuid() == 0 &&
		    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		     setresuid(65534, 65534, 65534) < 0))
			_exit(99);
		char *envp[] = { (char *)"PATH=/usr/bin:/bin",
				 (char *)HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE,
				 (char *)"HOME=/nonexistent", NULL };
		execve(moat, argv, envp);
		_exit(98);
	}
	free(argv);
	close(in[0]);
	if (stdin_text) {
		size_t len = strlen(stdin_text);
		ck_assert_int_eq(write(in[1], stdin_text, len), (ssize_t)len);
	}
	close(in[1]);
	if (pty) {
		*out_fd = master;
	} else {
		close(p[1]);
		*out_fd = p[0];
	}
	return pid;
}

/* Reads fd until EOF (or EIO on a pty), until `until` appears when not NULL,
 * or until timeout_ms. Returns the malloc'd text (\r removed). */
static char *read_until(int fd, const char *until, long timeout_ms)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	buf[0] = '\0';
	long t0 = harness_now_ms();
	while (harness_now_ms() - t0 < timeout_ms) {
		if (until && strstr(buf, until))
			break;
		struct pollfd pfd = { fd, POLLIN, 0 };
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		char chunk[4096];
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (chunk[i] == '\r')
				continue;
			if (len + 2 > cap) {
				cap *= 2;
				buf = realloc(buf, cap);
				ck_assert_ptr_nonnull(buf);
			}
			buf[len++] = chunk[i];
		}
		buf[len] = '\0';
	}
	return buf;
}

static int wait_status(pid_t pid)
{
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- invariant 1: nothing of the host writable ----------------------------- */

START_TEST(root_and_binds_read_only)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_ERR
		  "bad = []\n"
		  "for p in ['/newfile', '/usr/newfile', '/usr/bin/python3', '/etc/passwd', '/etc/newfile',\n"
		  "          '/etc/ld.so.cache', '/dev/newfile', '/bin/newfile', '/lib/newfile',\n"
		  "          '/etc/ssl/certs/new.pem', '/usr/lib/newfile']:\n"
		  "    r = w(p)\n"
		  "    if r not in ('EROFS', 'EACCES'): bad.append((p, r))\n"
		  "for d in ['/newdir', '/usr/newdir', '/etc/newdir', '/dev/newdir', '/usr/share/newdir']:\n"
		  "    r = err(lambda: os.mkdir(d))\n"
		  "    if r not in ('EROFS', 'EACCES'): bad.append((d, r))\n"
		  "for p in ['/etc/passwd', '/usr/bin/env']:\n"
		  "    r = err(lambda: os.utime(p))\n"
		  "    if r not in ('EROFS', 'EACCES', 'EPERM'): bad.append(('utime ' + p, r))\n"
		  "print('writes', bad)\n"
		  "print('root', w('/x'), 'usr', w('/usr/x'), 'etc', w('/etc/x'), 'dev', w('/dev/x'))\n",
		  "writes []\nroot EROFS usr EROFS etc EROFS dev EROFS\n");
}
END_TEST

START_TEST(mount_flags)
{
	HARNESS_MODE_GUARD(_i);
	/* every mount nosuid; rw only the scratch tmpfs, /proc itself and the
	 * private devpts; nodev except the bound device nodes and devpts; no
	 * exec from /tmp, /dev, /dev/shm, /dev/pts, /proc */
	expect_py(_i,
		  "bad = []\n"
		  "seen = set()\n"
		  "for line in open('/proc/self/mountinfo'):\n"
		  "    f = line.split()\n"
		  "    root, mp, opts = f[3], f[4], f[5].split(',')\n"
		  "    seen.add(mp)\n"
		  "    if 'nosuid' not in opts: bad.append(('suid', mp))\n"
		  "    if 'ro' not in opts and mp not in ('/tmp', '/sandbox', '/dev/shm', '/dev/pts', '/proc'):\n"
		  "        bad.append(('rw', mp))\n"
		  "    dev = root in ('/null', '/zero', '/full', '/random', '/urandom') or mp == '/dev/pts'\n"
		  "    if 'nodev' not in opts and not dev: bad.append(('dev', mp))\n"
		  "    if mp in ('/tmp', '/dev', '/dev/shm', '/dev/pts', '/proc') and 'noexec' not in opts:\n"
		  "        bad.append(('exec', mp))\n"
		  "print(bad, sorted(seen & {'/', '/usr', '/tmp', '/sandbox', '/proc', '/dev', '/dev/shm', '/dev/pts'}))\n",
		  "[] ['/', '/dev', '/dev/pts', '/dev/shm', '/proc', '/sandbox', '/tmp', '/usr']\n");
}
END_TEST

START_TEST(scratch_dirs_writable_tmp_noexec)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_ERR
		  "import shutil, subprocess\n"
		  "print('empty', os.listdir('/tmp'), os.listdir('/dev/shm'), os.listdir('/sandbox'))\n"
		  "def run(d):\n"
		  "    shutil.copy('/bin/true', d + '/t')\n"
		  "    os.chmod(d + '/t', 0o755)\n"
		  "    try:\n"
		  "        return 'exit %d' % subprocess.run([d + '/t']).returncode\n"
		  "    except OSError as e:\n"
		  "        return type(e).__name__\n"
		  "print('tmp', run('/tmp'), 'shm', run('/dev/shm'), 'sandbox', run('/sandbox'))\n"
		  "for d in ['/tmp', '/sandbox', '/dev/shm']:\n"
		  "    os.mkdir(d + '/sub')\n"
		  "    open(d + '/sub/f', 'w').write('data ' + d)\n"
		  "    print(open(d + '/sub/f').read(), oct(os.stat(d).st_mode & 0o7777))\n",
		  "empty [] [] ['main.py']\n"
		  "tmp PermissionError shm PermissionError sandbox exit 0\n"
		  "data /tmp 0o1777\ndata /sandbox 0o755\ndata /dev/shm 0o1777\n");
}
END_TEST

START_TEST(tmpfs_size_capped)
{
	HARNESS_MODE_GUARD(_i);
	/* two 40 MiB files (each under RLIMIT_FSIZE) cannot both fit in 64 MiB */
	expect_py(_i,
		  "import errno, os\n"
		  "chunk = b'z' * (1 << 20)\n"
		  "for d in ['/tmp', '/sandbox', '/dev/shm']:\n"
		  "    total, res = 0, 'ok'\n"
		  "    try:\n"
		  "        for name in ['a', 'b']:\n"
		  "            fd = os.open(d + '/' + name, os.O_WRONLY | os.O_CREAT, 0o600)\n"
		  "            try:\n"
		  "                for _ in range(40):\n"
		  "                    total += os.write(fd, chunk)\n"
		  "            finally:\n"
		  "                os.close(fd)\n"
		  "    except OSError as e:\n"
		  "        res = errno.errorcode[e.errno]\n"
		  "    print(d, res, 60 << 20 <= total <= 64 << 20)\n"
		  "    for name in ['a', 'b']:\n"
		  "        if os.path.exists(d + '/' + name): os.unlink(d + '/' + name)\n",
		  "/tmp ENOSPC True\n/sandbox ENOSPC True\n/dev/shm ENOSPC True\n");
}
END_TEST

START_TEST(dev_minimal)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  PY_ERR
		  "print(sorted(os.listdir('/dev')))\n"
		  "print([p for p in ['/dev/tty', '/dev/console', '/dev/sda', '/dev/vda', '/dev/mem',\n"
		  "       '/dev/kmsg', '/dev/tty0', '/dev/net/tun', '/dev/fuse'] if os.path.lexists(p)])\n"
		  "print('null', w('/dev/null'), repr(open('/dev/null', 'rb').read()))\n"
		  "print('zero', open('/dev/zero', 'rb').read(4))\n"
		  "print('urandom', len(open('/dev/urandom', 'rb').read(16)), len(open('/dev/random', 'rb').read(8)))\n"
		  "print('full', w('/dev/full'))\n"
		  "print('shm', w('/dev/shm/x', 'shared'), open('/dev/shm/x').read())\n"
		  /* EPERM: no CAP_MKNOD; EACCES: Landlock refuses it first */
		  "print('mknod', err(lambda: os.mknod('/tmp/n', 0o600 | 0o020000, os.makedev(1, 3))) in ('EPERM', 'EACCES'))\n",
		  "['fd', 'full', 'null', 'ptmx', 'pts', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n"
		  "[]\n"
		  "null ok b''\n"
		  "zero b'\\x00\\x00\\x00\\x00'\n"
		  "urandom 16 8\n"
		  "full ENOSPC\n"
		  "shm ok shared\n"
		  "mknod True\n");
}
END_TEST

/* Pseudo-terminals: a private devpts instance. openpty works and a pair
 * carries bytes both ways; pty.fork and pty.spawn give a child a
 * controlling terminal; script(1) runs where the host has it; /dev/pts holds only the sandbox's
 * own (a host pty exists meanwhile: it is in another instance, whose device
 * number the sandbox's /dev/pts does not have); TIOCSTI and TIOCLINUX on a
 * pty are the filter's EACCES (the kernel never answers that); at most
 * MOAT_MAX_PTYS (64) at once. */
START_TEST(ptys_private_instance)
{
	HARNESS_MODE_GUARD(_i);
	int host_pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_msg(host_pty >= 0, "posix_openpt: %s", strerror(errno));
	struct stat host_pts;
	ck_assert_int_eq(stat("/dev/pts", &host_pts), 0);
	bool script = access("/usr/bin/script", X_OK) == 0;
	char want[1024];
	snprintf(want, sizeof want,
		 "roundtrip b'ping\\n' b'pong\\n'\n"
		 "pts/ptmx ['0', 'ptmx'] /dev/pts/0 0o620 65534 65534 ptmx 0o666\n"
		 "other instance True\n"
		 "TIOCSTI EACCES TIOCLINUX EACCES\n"
		 "fork b'/dev/pts/1\\r\\nin a pty\\r\\n'\n"
		 "spawn b'/dev/pts/1\\r\\n' 0\n"
		 "%s"
		 "max 64 ENOSPC\n",
		 script ? "script b'/dev/pts/1\\r\\n'\n" : "");
	char code[4096];
	snprintf(code, sizeof code,
		 "import errno, fcntl, os, pty, subprocess, termios, tty\n"
		 "m, s = os.openpty()\n"
		 "tty.setraw(s)\n"
		 "os.write(m, b'ping\\n'); a = os.read(s, 100)\n"
		 "os.write(s, b'pong\\n'); b = os.read(m, 100)\n"
		 "print('roundtrip', a, b)\n"
		 "st = os.stat(os.ttyname(s))\n"
		 "print(os.readlink('/dev/ptmx'), sorted(os.listdir('/dev/pts')), os.ttyname(s),\n"
		 "      oct(st.st_mode & 0o7777), st.st_uid, st.st_gid,\n"
		 "      'ptmx', oct(os.stat('/dev/ptmx').st_mode & 0o7777))\n"
		 "print('other instance', os.stat('/dev/pts').st_dev != %llu)\n"
		 "def io(req):\n"
		 "    try: fcntl.ioctl(s, req, b'x'); return 'ok'\n"
		 "    except OSError as e: return errno.errorcode[e.errno]\n"
		 "print('TIOCSTI', io(termios.TIOCSTI), 'TIOCLINUX', io(0x541C))\n"
		 "pid, fd = pty.fork()\n"
		 "if pid == 0:\n"
		 "    os.execv('/bin/sh', ['sh', '-c', 'tty; echo in a pty'])\n"
		 "out = b''\n"
		 "while True:\n"
		 "    try: d = os.read(fd, 1000)\n"
		 "    except OSError: break\n"
		 "    if not d: break\n"
		 "    out += d\n"
		 "os.waitpid(pid, 0); os.close(fd)\n"
		 "print('fork', out)\n"
		 "r = subprocess.run(['python3', '-c', 'import pty, sys; sys.exit(pty.spawn([\"tty\"]))'],\n"
		 "                   capture_output=True, timeout=20)\n"
		 "print('spawn', r.stdout, r.returncode)\n"
		 "if os.path.exists('/usr/bin/script'):\n"
		 "    r = subprocess.run(['script', '-qc', 'tty', '/dev/null'], capture_output=True, timeout=20)\n"
		 "    print('script', r.stdout)\n"
		 "n = [(m, s)]\n"
		 "try:\n"
		 "    while len(n) < 200: n.append(os.openpty())\n"
		 "except OSError as e: print('max', len(n), errno.errorcode[e.errno])\n",
		 (unsigned long long)host_pts.st_dev);
	expect_py(_i, code, want);
	close(host_pty);
}
END_TEST

/* ---- invariant 2: host files not visible -------------------------------------- */

START_TEST(host_paths_hidden)
{
	HARNESS_MODE_GUARD(_i);
	const char *names[16] = { "proc", "dev", "sandbox", "tmp", "etc", "usr" };
	size_t n = 6;
	static const char *const links[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		char path[32];
		struct stat st;
		snprintf(path, sizeof path, "/%s", links[i]);
		if (lstat(path, &st) == 0 && (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode)))
			names[n++] = links[i];
	}
	char list[512], want[1024];
	py_list(names, n, list, sizeof list);
	snprintf(want, sizeof want, "%s\n[]\n[]\n", list);
	expect_py(_i,
		  "import os\n"
		  "print(sorted(os.listdir('/')))\n"
		  "print([p for p in ['/root', '/home', '/run', '/var', '/srv', '/opt', '/mnt', '/media',\n"
		  "       '/boot', '/sys', '/work', '/old_root', '/lost+found', '/.dockerenv', '/var/run',\n"
		  "       '/run/user', '/tmp/.X11-unix', '/proc/sys/fs/binfmt_misc/register'] if os.path.lexists(p)])\n"
		  /* absolute symlinks (merged /usr) point into the sandbox, never out */
		  "print([p for p in os.listdir('/') if os.path.islink('/' + p) and\n"
		  "       not os.path.realpath('/' + p).startswith('/usr/')])\n",
		  want);
}
END_TEST

START_TEST(etc_only_planned_files)
{
	HARNESS_MODE_GUARD(_i);
	/* what rootfs/default.plan binds when the host has it, plus the generated files */
	static const char *const plan[][2] = {
		{ "/etc/ld.so.cache", "ld.so.cache" }, { "/etc/ld.so.conf", "ld.so.conf" },
		{ "/etc/ld.so.conf.d", "ld.so.conf.d" }, { "/etc/localtime", "localtime" },
		{ "/etc/nsswitch.conf", "nsswitch.conf" }, { "/etc/alternatives", "alternatives" },
		{ "/etc/ssl/certs", "ssl" }, { "/etc/ssl/openssl.cnf", "ssl" },
		{ "/etc/ca-certificates.conf", "ca-certificates.conf" }, { "/etc/mime.types", "mime.types" },
		{ "/etc/python3", "python3" }, { "/etc/python3.11", "python3.11" },
		{ "/etc/python3.12", "python3.12" }, { "/etc/python3.13", "python3.13" },
		{ "/etc/timezone", "timezone" }, { "/etc/matplotlibrc", "matplotlibrc" },
		{ "/etc/fonts", "fonts" }, { "/etc/services", "services" },
		{ "/etc/protocols", "protocols" },
	};
	const char *names[32] = { "passwd", "group", "hosts", "hostname" };
	size_t n = 4;
	for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
		struct stat st;
		if (stat(plan[i][0], &st) < 0)
			continue;
		bool dup = false;
		for (size_t k = 0; k < n; k++)
			dup |= !strcmp(names[k], plan[i][1]);
		if (!dup)
			names[n++] = plan[i][1];
	}
	char list[1024], want[2048];
	py_list(names, n, list, sizeof list);
	/* /etc/ssl holds only the two planned entries, never the host's private/ */
	const char *ssl[2];
	size_t nssl = 0;
	if (access("/etc/ssl/certs", F_OK) == 0)
		ssl[nssl++] = "certs";
	if (access("/etc/ssl/openssl.cnf", F_OK) == 0)
		ssl[nssl++] = "openssl.cnf";
	char ssl_list[128];
	py_list(ssl, nssl, ssl_list, sizeof ssl_list);
	snprintf(want, sizeof want,
		 "%s\n['nobody', 'root']\n['nogroup', 'root']\nmoat\n%s\n[]\n", list,
		 nssl ? ssl_list : "[]");
	/* what the plan refuses (docs/rootfs.md): secrets, credentials of other
	 * tools, the host's identity and configuration; asked by name too, so a
	 * bind of a whole directory that brought one of them in fails here */
	expect_py(_i,
		  "import os\n"
		  "print(sorted(os.listdir('/etc')))\n"
		  "print(sorted(l.split(':')[0] for l in open('/etc/passwd') if l.strip()))\n"
		  "print(sorted(l.split(':')[0] for l in open('/etc/group') if l.strip()))\n"
		  "print(open('/etc/hostname').read().strip())\n"
		  "print(sorted(os.listdir('/etc/ssl')) if os.path.isdir('/etc/ssl') else [])\n"
		  "print([p for p in ['/etc/shadow', '/etc/shadow-', '/etc/gshadow', '/etc/gshadow-',\n"
		  "       '/etc/passwd-', '/etc/group-', '/etc/subuid', '/etc/subgid', '/etc/sudoers',\n"
		  "       '/etc/sudoers.d', '/etc/ssh', '/etc/ssl/private', '/etc/pam.d', '/etc/security',\n"
		  "       '/etc/machine-id', '/etc/resolv.conf', '/etc/gitconfig', '/etc/pip.conf',\n"
		  "       '/etc/npmrc', '/etc/wgetrc', '/etc/environment', '/etc/profile', '/etc/apt',\n"
		  "       '/etc/cron.d', '/etc/crontab', '/etc/fstab', '/etc/krb5.keytab', '/etc/ldap',\n"
		  "       '/etc/docker', '/etc/containers', '/etc/netrc',\n"
		  "       '/root', '/root/.ssh', '/home', '/var/cache/fontconfig']\n"
		  "       if os.path.lexists(p)])\n",
		  want);
}
END_TEST

/* Host matplotlib the sandbox's python3 (/usr/bin) would import: Debian's
 * python3-matplotlib, or one installed under /usr/local. */
static bool host_has_matplotlib(void)
{
	static const char *const pats[] = {
		"/usr/lib/python3/dist-packages/matplotlib/__init__.py",
		"/usr/local/lib/python3*/dist-packages/matplotlib/__init__.py",
	};
	for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
		glob_t g;
		bool hit = glob(pats[i], 0, NULL, &g) == 0 && g.gl_pathc > 0;
		globfree(&g);
		if (hit)
			return true;
	}
	return false;
}

/* An agent's most common snippet in a cold run (no session driver, no env):
 * matplotlib imports (Debian's reads /etc/matplotlibrc, which the plan binds),
 * draws with Agg and saves a PNG that comes back through "outputs". */
/* /etc/services and /etc/protocols (rootfs/default.plan, docs/rootfs.md):
 * a service or protocol given by name resolves inside, as it does on the
 * host (issue 43: getservbyname and getaddrinfo with a service name failed).
 * Read-only like every bind (root_and_binds_read_only, mount_flags). */
START_TEST(etc_services_names_resolve)
{
	HARNESS_MODE_GUARD(_i);
	if (access("/etc/services", R_OK) != 0 || access("/etc/protocols", R_OK) != 0) {
		harness_skip("the host has no /etc/services or /etc/protocols to bind");
		return;
	}
	expect_py(_i,
		  "import os, socket\n"
		  "print(socket.getservbyname('http'), socket.getservbyport(443, 'tcp'),\n"
		  "      socket.getprotobyname('tcp'))\n"
		  "print(sorted({a[4][1] for a in socket.getaddrinfo('localhost', 'http',\n"
		  "                                                  type=socket.SOCK_STREAM)}))\n"
		  "print([os.access(p, os.W_OK) for p in ('/etc/services', '/etc/protocols')])\n",
		  "80 https 6\n[80]\n[False, False]\n");
}
END_TEST

START_TEST(matplotlib_plot_cold_run)
{
	HARNESS_MODE_GUARD(_i);
	if (!host_has_matplotlib()) {
		harness_skip("%s: the host has no matplotlib (python3-matplotlib)", __func__);
		return;
	}
	struct run_out o;
	harness_exec_code(_i, "python",
			  "import matplotlib\n"
			  "matplotlib.use('Agg')\n"
			  "import matplotlib.pyplot as plt\n"
			  "fig, ax = plt.subplots()\n"
			  "ax.plot([1, 3, 2], label='moat')\n"
			  "ax.set_title('a plot'); ax.legend()\n"
			  "fig.savefig('/sandbox/plot.png')\n"
			  "print(matplotlib.get_backend(), matplotlib.matplotlib_fname())\n",
			  ",\"outputs\":[\"plot.png\"]", &o);
	const char *so = harness_str(&o, "stdout"), *se = harness_str(&o, "stderr");
	ck_assert_msg(o.status == 0 && harness_num(&o, "exitCode") == 0,
		      "mode %d: stdout [%s] stderr [%.2000s]", _i, so, se);
	/* Debian's file when the host has it, else matplotlib's own */
	const char *rc = access("/etc/matplotlibrc", F_OK) == 0 ? "agg /etc/matplotlibrc\n" : "agg ";
	ck_assert_msg(so && !strncmp(so, rc, strlen(rc)), "mode %d: stdout [%s]", _i, so);
	ck_assert_msg(!se || !strstr(se, "Fontconfig error"), "mode %d: stderr [%s]", _i, se);
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(o.json, "files");
	const cJSON *png = cJSON_GetObjectItemCaseSensitive(files, "plot.png");
	ck_assert_msg(cJSON_IsObject(png), "mode %d: no plot.png: %.500s", _i, o.out);
	const cJSON *enc = cJSON_GetObjectItemCaseSensitive(png, "encoding");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(png, "content");
	ck_assert(cJSON_IsString(enc) && !strcmp(enc->valuestring, "base64"));
	/* base64 of "\x89PNG\r\n\x1a\n" */
	ck_assert_msg(cJSON_IsString(content) && !strncmp(content->valuestring, "iVBORw0KGgo", 11),
		      "mode %d: not a PNG: %.40s", _i,
		      cJSON_IsString(content) ? content->valuestring : "(none)");
	ck_assert_uint_gt(strlen(content->valuestring), 1000);
	harness_free(&o);
}
END_TEST

/* fontconfig reads its configuration (/etc/fonts, bound by the plan) and
 * finds a font under /usr: fc-match where the host has it, else matplotlib's
 * font manager (which asks fontconfig too). */
START_TEST(fontconfig_finds_a_font)
{
	HARNESS_MODE_GUARD(_i);
	bool fc = access("/usr/bin/fc-match", X_OK) == 0;
	if (!fc && !host_has_matplotlib()) {
		harness_skip("%s: the host has neither fc-match (fontconfig) nor matplotlib", __func__);
		return;
	}
	if (access("/etc/fonts/fonts.conf", F_OK) != 0) {
		harness_skip("%s: the host has no /etc/fonts/fonts.conf", __func__);
		return;
	}
	const char *code =
		fc ? "import os, subprocess\n"
		     "r = subprocess.run(['fc-match', '-f', '%{file}', 'sans-serif'], capture_output=True,\n"
		     "                   text=True)\n"
		     "n = subprocess.run(['fc-list'], capture_output=True, text=True)\n"
		     "print(r.returncode, repr(r.stderr), repr(n.stderr), len(n.stdout.splitlines()) > 0)\n"
		     "print(r.stdout.startswith('/usr/'), os.path.isfile(r.stdout))\n"
		   : "import os, warnings\n"
		     "warnings.simplefilter('error')\n"
		     "from matplotlib import font_manager\n"
		     "f = font_manager.findfont('sans-serif', fallback_to_default=False)\n"
		     "print(0, repr(''), repr(''), len(font_manager.get_font_names()) > 0)\n"
		     "print(f.startswith('/usr/'), os.path.isfile(f))\n";
	expect_py(_i, code, "0 '' '' True\nTrue True\n");
}
END_TEST

/* ---- invariant 3: identity and privileges ----------------------------------------- */

START_TEST(ids_are_nobody)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  "import os, subprocess\n"
		  "print(os.getresuid(), os.getresgid(), os.getgroups())\n"
		  "print(subprocess.run(['id'], capture_output=True, text=True).stdout, end='')\n"
		  "print(os.stat('/sandbox/main.py').st_uid, os.stat('/tmp').st_uid)\n",
		  "(65534, 65534, 65534) (65534, 65534, 65534) []\n"
		  "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n"
		  "65534 65534\n");
}
END_TEST

START_TEST(no_capabilities_no_new_privs)
{
	HARNESS_MODE_GUARD(_i);
	const char *code = "for l in open('/proc/self/status'):\n"
			   "    if l.startswith(('Cap', 'NoNewPrivs')): print(l.split()[0], l.split()[1])\n";
	const char *want = "CapInh: 0000000000000000\nCapPrm: 0000000000000000\n"
			   "CapEff: 0000000000000000\nCapBnd: 0000000000000000\n"
			   "CapAmb: 0000000000000000\nNoNewPrivs: 1\n";
	expect_py(_i, code, want);
	/* the same for a grandchild started through bash */
	char *bash = NULL;
	ck_assert_int_ge(asprintf(&bash, "python3 - <<'EOF'\n%sEOF\n", code), 0);
	struct run_out o;
	harness_exec_code(_i, "bash", bash, "", &o);
	ck_assert_msg(harness_num(&o, "exitCode") == 0, "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), want);
	harness_free(&o);
	free(bash);
}
END_TEST

START_TEST(only_sandbox_pids)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  "import os\n"
		  "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
		  "print(os.getpid() <= 3, os.getppid(), '1' in pids, len(pids) < 10)\n"
		  "print(open('/proc/1/status').read().count('NSpid'))\n"
		  "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NSpid')])\n",
		  "True 1 True True\n1\n['2']\n");
}
END_TEST

START_TEST(hostname_is_moat)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  "import os, socket\n"
		  "print(socket.gethostname(), os.uname().nodename,\n"
		  "      open('/proc/sys/kernel/hostname').read().strip(),\n"
		  "      open('/proc/sys/kernel/domainname').read().strip())\n",
		  "moat moat moat moat\n");
}
END_TEST

START_TEST(proc_protected)
{
	HARNESS_MODE_GUARD(_i);
	/* masked files read empty when the host has them, are absent otherwise */
	static const char *const masked[] = { "kcore", "kallsyms", "keys", "timer_list", "kmsg" };
	char want[1024] = "sys []\nsysrq blocked\n";
	for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%s", masked[i]);
		size_t off = strlen(want);
		snprintf(want + off, sizeof want - off, "%s %s\n", masked[i],
			 access(path, F_OK) == 0 ? "empty" : "absent");
	}
	expect_py(_i,
		  PY_ERR
		  "bad = []\n"
		  "for p in ['/proc/sys/kernel/hostname', '/proc/sys/kernel/core_pattern',\n"
		  "          '/proc/sys/vm/drop_caches', '/proc/sys/kernel/modprobe', '/proc/sys/net/ipv4/ip_forward']:\n"
		  "    r = w(p, '1\\n', 'w')\n"
		  "    if r not in ('EROFS', 'EACCES', 'EPERM', 'ENOENT'): bad.append((p, r))\n"
		  "print('sys', bad)\n"
		  "print('sysrq', 'blocked' if w('/proc/sysrq-trigger', 'h', 'w') != 'ok' else 'WRITABLE')\n"
		  "for n in ['kcore', 'kallsyms', 'keys', 'timer_list', 'kmsg']:\n"
		  "    p = '/proc/' + n\n"
		  "    if not os.path.exists(p): print(n, 'absent'); continue\n"
		  "    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
		  "    try: data = os.read(fd, 4096)\n"
		  "    except OSError as e: data = errno.errorcode[e.errno].encode()\n"
		  "    os.close(fd)\n"
		  "    print(n, 'empty' if data == b'' else 'LEAKS %r' % data[:40])\n",
		  want);
}
END_TEST

START_TEST(proc1_not_accessible)
{
	HARNESS_MODE_GUARD(_i);
	expect_py(_i,
		  "import os\n"
		  "def rd(p):\n"
		  "    try:\n"
		  "        open(p, 'rb').read(1)\n"
		  "        return 'READABLE'\n"
		  "    except OSError as e:\n"
		  "        return type(e).__name__\n"
		  "def ls(p):\n"
		  "    try:\n"
		  "        os.listdir(p)\n"
		  "        return 'LISTED'\n"
		  "    except OSError as e:\n"
		  "        return type(e).__name__\n"
		  "print(rd('/proc/1/environ'), rd('/proc/1/mem'), ls('/proc/1/root/'), ls('/proc/1/fd'))\n"
		  "print([l.split()[1] for l in open('/proc/1/status') if l.startswith(('CapEff', 'CapPrm', 'Uid'))])\n",
		  "PermissionError PermissionError PermissionError PermissionError\n"
		  "['65534', '0000000000000000', '0000000000000000']\n");
}
END_TEST

/* pid 1 is a copy of moat: its command line, environment and name are the
 * host's unless pid 1 hides them. moat is run with a distinctive --env value
 * and host paths (--file, --config, --policy, the binary's own path); none
 * of them may show in any process of the sandbox but as the program's own
 * environment (the --env value is meant for it). */
START_TEST(proc1_hides_host_command_line)
{
	HARNESS_MODE_GUARD(_i);
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/moat-argvleak-%ld-XXXXXX", (long)getpid());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	static const char *const names[] = { "data.txt", "config.json", "policy.json" };
	static const char *const texts[] = { "host data\n", "{}\n",
					     "{\"defaultAction\":\"SCMP_ACT_ALLOW\"}\n" };
	char paths[3][128];
	for (int i = 0; i < 3; i++) {
		snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
		int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, texts[i], strlen(texts[i])), (ssize_t)strlen(texts[i]));
		ck_assert_int_eq(fchmod(fd, 0644), 0);
		close(fd);
	}
	char file_arg[160], env_arg[64], code[2048];
	snprintf(file_arg, sizeof file_arg, "f.txt=%s", paths[0]);
	snprintf(env_arg, sizeof env_arg, "ARGV_SECRET=argv-secret-%ld-q7", (long)getpid());
	snprintf(code, sizeof code,
		 "import os\n"
		 "secrets = [b'%s', b'%s', b'%s', b'%s', b'moat-argvleak']\n"
		 "def rd(p):\n"
		 "    try: return open(p, 'rb').read()\n"
		 "    except OSError as e: return type(e).__name__.encode()\n"
		 "leaks = []\n"
		 "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
		 "    for f in ('cmdline', 'comm', 'stat', 'status', 'environ'):\n"
		 "        if pid == str(os.getpid()) and f == 'environ': continue\n"
		 "        data = rd('/proc/%%s/%%s' %% (pid, f))\n"
		 "        leaks += [(pid, f, s) for s in secrets if s in data]\n"
		 "print(leaks, open('f.txt').read().strip(), os.environ['ARGV_SECRET'] == '%s')\n"
		 "print(rd('/proc/1/cmdline').rstrip(b'\\0'), rd('/proc/1/comm'), rd('/proc/1/environ'))\n",
		 strchr(env_arg, '=') + 1, HARNESS_CANARY_VALUE, harness_moat(), dir,
		 strchr(env_arg, '=') + 1);
	const char *args[] = { "run", "--config", paths[1], "--policy", paths[2], "--env", env_arg,
			       "--file", file_arg, "-l", "python", "-c", code, NULL };
	struct run_out o;
	harness_run(_i, args, NULL, 0, &o);
	for (int i = 0; i < 3; i++)
		unlink(paths[i]);
	rmdir(dir);
	ck_assert_msg(o.status == 0, "mode %d: status %d: %s %s", _i, o.status, o.out, o.err);
	ck_assert_str_eq(o.out, "[] host data True\n"
				"b'moat-init' b'moat-init\\n' b'PermissionError'\n");
	harness_free(&o);
}
END_TEST

/* The next line of mountinfo text at *line into buf (len bytes, cut), its
 * fields 4 and 5 into root and mp (2048 bytes each; "" when the line is not
 * a mount's); false at the end. */
static bool next_mount(const char **line, char *buf, size_t len, char *root, char *mp)
{
	if (!**line)
		return false;
	const char *end = strchr(*line, '\n');
	size_t n = end ? (size_t)(end - *line) : strlen(*line);
	snprintf(buf, len, "%.*s", (int)(n < len - 1 ? n : len - 1), *line);
	*line += n + (end ? 1 : 0);
	/* a mount's line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - FSTYPE ..."; the
	 * program's other output is not one */
	unsigned id, parent, maj, min;
	if (sscanf(buf, "%u %u %u:%u %2047s %2047s", &id, &parent, &maj, &min, root, mp) != 6 ||
	    !strstr(buf, " - "))
		root[0] = mp[0] = '\0';
	return true;
}

/* mountinfo line by line: fields 4 (root: the mount's path in its source
 * filesystem) and 5 (the mount point). Each line holding needle must be a
 * mount of the tree bound at `at` (the directory given, which a bind's root
 * field names by its host path: the documented unhideable case), with root
 * field needle + the mount point's path below at; nothing else may name it.
 * Returns how many lines name it. */
static int mountinfo_names(const char *mi, const char *needle, const char *at)
{
	int n = 0;
	size_t nl = strlen(needle), al = at ? strlen(at) : 0;
	char buf[4096], root[2048], mp[2048];
	for (const char *line = mi; next_mount(&line, buf, sizeof buf, root, mp);) {
		if (!strstr(buf, needle))
			continue;
		n++;
		ck_assert_msg(at && root[0], "mountinfo names %s: %s", needle, buf);
		/* the mount point: at itself or below it; the root: needle + the rest */
		const char *below = !strcmp(at, "/") ? (strcmp(mp, "/") ? mp : "")
				    : !strncmp(mp, at, al) && (!mp[al] || mp[al] == '/') ? mp + al
											: NULL;
		ck_assert_msg(below && !strncmp(root, needle, nl) && !strcmp(root + nl, below) &&
				      strstr(buf, needle) == strstr(buf, root) &&
				      !strstr(strstr(buf, root) + nl, needle),
			      "mountinfo names %s outside its bind at %s: %s", needle, at, buf);
	}
	return n;
}

/* Every mount of mountinfo text names, as its root field, "/", its own
 * mount point (a host path bound at the same path), or a device node or
 * procfs entry bound under /dev or /proc: no other host path. */
static void mountinfo_roots_are_own(const char *mi)
{
	char buf[4096], root[2048], mp[2048];
	for (const char *line = mi; next_mount(&line, buf, sizeof buf, root, mp);) {
		if (!root[0])
			continue;
		ck_assert_msg(!strcmp(root, "/") || !strcmp(root, mp) || !strncmp(mp, "/dev/", 5) ||
				      !strncmp(mp, "/proc/", 6),
			      "a mount names another host path than its own: %s", buf);
	}
}

/* The directory holding MOAT_BIN (the build directory) and its parent (the
 * checkout), as real paths. */
static void build_dirs(char *build, char *checkout, size_t len)
{
	char real[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(getenv("MOAT_BIN"), real));
	*strrchr(real, '/') = '\0';
	snprintf(build, len, "%s", real);
	*strrchr(real, '/') = '\0';
	snprintf(checkout, len, "%s", real);
}

/* Copies host file src to dir/rel (mode 0755), for a minimal root. */
static void copy_into(const char *src, const char *dir, const char *rel)
{
	char dst[PATH_MAX];
	snprintf(dst, sizeof dst, "%s%s", dir, rel);
	int in = open(src, O_RDONLY | O_CLOEXEC);
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	ck_assert_msg(in >= 0 && out >= 0, "copy %s to %s: %s", src, dst, strerror(errno));
	char buf[65536];
	ssize_t r;
	while ((r = read(in, buf, sizeof buf)) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)r), r);
	close(in);
	close(out);
}

/* A run's /proc/self/mountinfo names none of the host paths it was given
 * (issue 31): the runtime directory (copied into a tmpfs of its own at
 * /opt/moat/runtime, not bound), the build directory and the checkout, and
 * each bind of the host's root names only its own path (/etc/localtime: a
 * symlink as on the host, not a bind of its target). What
 * cannot be hidden, a --workdir and a --rootfs (bound live: a bind's root
 * field is the directory's path in its filesystem), appears exactly as the
 * root field of its own mounts and nowhere else. SECURITY.md row 72. */
START_TEST(mountinfo_names_no_host_path)
{
	HARNESS_MODE_GUARD(_i);
	char build[PATH_MAX], checkout[PATH_MAX];
	build_dirs(build, checkout, sizeof build);
	const char *rt = harness_runtime_dir();
	const char *hidden[] = { rt, build, checkout };
	/* the runtime shims: a Spin-style request (sandboxId) through moat exec */
	const char *req = "{\"sandboxId\":\"mi\",\"language\":\"python\",\"code\":\"import os\\n"
			  "print(open('/proc/self/mountinfo').read())\\n"
			  "print(sorted(os.listdir('/opt/moat/runtime/python')))\"}";
	const char *exec_args[] = { "exec", "--runtime", rt, NULL };
	struct run_out o;
	harness_run(_i, exec_args, req, strlen(req), &o);
	const char *out = harness_str(&o, "stdout");
	ck_assert_msg(o.status == 0 && out && strstr(out, " /opt/moat/runtime ") &&
			      strstr(out, "'moat_pool.py'") && strstr(out, "'spin_sdk'"),
		      "mode %d: status %d: %.3000s %s", _i, o.status, o.out, o.err);
	for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
		ck_assert_int_eq(mountinfo_names(out, hidden[i], NULL), 0);
	/* /etc/localtime, a symlink into /usr on most hosts: no bind naming its target */
	mountinfo_roots_are_own(out);
	harness_free(&o);

	/* a work directory and a root of its own */
	char work[] = "/tmp/moat-mi-work.XXXXXX", root[] = "/tmp/moat-mi-root.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(work));
	ck_assert_ptr_nonnull(mkdtemp(root));
	ck_assert_int_eq(chmod(work, 0755), 0);
	ck_assert_int_eq(chmod(root, 0755), 0);
	static const char *const dirs[] = { "/proc", "/dev", "/tmp", "/sandbox", "/usr",
					    "/usr/bin", "/lib", "/lib/x86_64-linux-gnu", "/lib64" };
	char path[PATH_MAX];
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(path, sizeof path, "%s%s", root, dirs[i]);
		ck_assert_int_eq(mkdir(path, 0755), 0);
	}
	copy_into("/usr/bin/cat", root, "/usr/bin/cat");
	copy_into("/lib/x86_64-linux-gnu/libc.so.6", root, "/lib/x86_64-linux-gnu/libc.so.6");
	copy_into("/lib64/ld-linux-x86-64.so.2", root, "/lib64/ld-linux-x86-64.so.2");
	const char *run_args[] = { "run", "--rootfs", root, "--workdir", work, "--",
				   "/usr/bin/cat", "/proc/self/mountinfo", NULL };
	harness_run(_i, run_args, NULL, 0, &o);
	ck_assert_msg(o.status == 0 && strstr(o.out, " /sandbox/work "), "mode %d: status %d: %s %s",
		      _i, o.status, o.out, o.err);
	for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
		ck_assert_int_eq(mountinfo_names(o.out, hidden[i], NULL), 0);
	ck_assert_int_ge(mountinfo_names(o.out, work, "/sandbox/work"), 1);
	ck_assert_int_ge(mountinfo_names(o.out, root, "/"), 1);
	harness_free(&o);
	static const char *const files[] = { "/usr/bin/cat", "/lib/x86_64-linux-gnu/libc.so.6",
					     "/lib64/ld-linux-x86-64.so.2" };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s%s", root, files[i]);
		unlink(path);
	}
	for (size_t i = sizeof dirs / sizeof dirs[0]; i-- > 0;) {
		snprintf(path, sizeof path, "%s%s", root, dirs[i]);
		rmdir(path);
	}
	rmdir(root);
	rmdir(work);
}
END_TEST

/* The cgroup namespace is rooted at the run's leaves: /proc/self/cgroup
 * shows "/" for every hierarchy, never the leaf moat made on the host
 * (moat-<moat's pid>-<n>) or anything above it. With limits, so that as root
 * the leaves exist (cgroup v1 joins them after clone3). */
START_TEST(cgroup_paths_hide_the_host)
{
	HARNESS_MODE_GUARD(_i);
	const char *code = "import sys\n"
			   "sys.stdout.write(open('/proc/self/cgroup').read() + open('/proc/1/cgroup').read())\n";
	const char *args[] = { "run", "--json", "--memory", "128", "--pids", "50", "--cpus", "1",
			       "-l", "python", "-c", code, NULL };
	struct harness_proc p;
	harness_start(_i, args, NULL, 0, NULL, NULL, NULL, &p);
	struct run_out o = { 0 };
	harness_finish(&p, &o);
	ck_assert_msg(o.status == 0 && o.json && harness_num(&o, "exitCode") == 0,
		      "mode %d: status %d: %s %s", _i, o.status, o.out, o.err);
	if (_i == MODE_ROOT) {
		const cJSON *lim = cJSON_GetObjectItemCaseSensitive(o.json, "limits");
		const cJSON *mem = cJSON_GetObjectItemCaseSensitive(lim, "memory");
		ck_assert_msg(cJSON_IsString(mem) && !strncmp(mem->valuestring, "cgroup-", 7),
			      "no cgroup leaf was made: %s", o.out);
	}
	const char *text = harness_str(&o, "stdout");
	char pid[16];
	snprintf(pid, sizeof pid, "%d", (int)p.pid);
	ck_assert_msg(text && !strstr(text, "moat-"), "mode %d: %s", _i, text);
	int lines = 0;
	for (const char *l = text; *l; lines++) {
		const char *eol = strchr(l, '\n');
		ck_assert_ptr_nonnull(eol);
		/* hierarchy id, controllers, path: the path is the last field */
		const char *path = eol;
		while (path > l && path[-1] != ':')
			path--;
		ck_assert_msg(eol - path == 1 && *path == '/' && !memmem(path, (size_t)(eol - path), pid, strlen(pid)),
			      "mode %d: %.*s", _i, (int)(eol - l), l);
		l = eol + 1;
	}
	ck_assert_int_gt(lines, 1);
	harness_free(&o);
}
END_TEST

/* ---- invariant 5: network ----------------------------------------------------- */

START_TEST(network_only_loopback)
{
	HARNESS_MODE_GUARD(_i);
	/* a host TCP listener on 127.0.0.1 and a host abstract unix socket */
	int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(tcp, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	ck_assert_int_eq(bind(tcp, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(listen(tcp, 16), 0);
	socklen_t alen = sizeof a;
	ck_assert_int_eq(getsockname(tcp, (struct sockaddr *)&a, &alen), 0);
	int port = ntohs(a.sin_port);

	char abstract[64];
	snprintf(abstract, sizeof abstract, "moat-test-abstract-%ld-%d", (long)getpid(), _i);
	int ux = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(ux, 0);
	struct sockaddr_un u = { .sun_family = AF_UNIX };
	memcpy(u.sun_path + 1, abstract, strlen(abstract));
	socklen_t ulen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(abstract));
	ck_assert_int_eq(bind(ux, (struct sockaddr *)&u, ulen), 0);
	ck_assert_int_eq(listen(ux, 16), 0);

	char code[4096];
	snprintf(code, sizeof code,
		 "import errno, socket\n"
		 /* /proc/net/dev lists this netns; if_nameindex needs NETLINK_ROUTE,
		  * which the seccomp policy may refuse (EPERM) */
		 "print([l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])\n"
		 "try: print(socket.if_nameindex() == [(1, 'lo')])\n"
		 "except PermissionError: print(True)\n"
		 "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
		 "c = socket.create_connection(s.getsockname(), timeout=3); a, _ = s.accept()\n"
		 "c.sendall(b'ping'); print('lo', a.recv(4).decode())\n"
		 "def conn(fam, addr, typ=socket.SOCK_STREAM):\n"
		 "    c = socket.socket(fam, typ); c.settimeout(3)\n"
		 "    try:\n"
		 "        if typ == socket.SOCK_DGRAM: c.sendto(b'x', addr); return 'sent'\n"
		 "        c.connect(addr); return 'CONNECTED'\n"
		 "    except OSError as e: return errno.errorcode.get(e.errno, str(e))\n"
		 "print('host', conn(socket.AF_INET, ('127.0.0.1', %d)))\n"
		 "print('abstract', conn(socket.AF_UNIX, '\\0%s'))\n"
		 "print('ext', conn(socket.AF_INET, ('198.51.100.1', 80)))\n"
		 "print('udp', conn(socket.AF_INET, ('198.51.100.1', 53), socket.SOCK_DGRAM))\n"
		 "print('dns', conn(socket.AF_INET, ('8.8.8.8', 53)))\n",
		 port, abstract);
	expect_py(_i, code,
		  "['lo']\nTrue\nlo ping\nhost ECONNREFUSED\nabstract ECONNREFUSED\n"
		  "ext ENETUNREACH\nudp ENETUNREACH\ndns ENETUNREACH\n");
	/* nothing reached the host listeners */
	ck_assert_int_lt(accept(tcp, NULL, NULL), 0);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_lt(accept(ux, NULL, NULL), 0);
	ck_assert_int_eq(errno, EAGAIN);
	close(tcp);
	close(ux);
}
END_TEST

/* ---- invariant 6: environment, fds, terminal ------------------------------------ */

START_TEST(host_env_absent)
{
	HARNESS_MODE_GUARD(_i);
	expect_py_env(_i,
		      "import os\n"
		      "print(sorted(os.environ))\n"
		      "raw = open('/proc/self/environ', 'rb').read()\n"
		      "print(b'" HARNESS_CANARY_VALUE "' in raw, b'" HARNESS_CANARY_NAME "' in raw, os.environ['FOO'])\n",
		      ",\"env\":{\"FOO\":\"bar\"}",
		      "['FOO', 'HOME', 'LANG', 'PATH', 'TMPDIR']\nFalse False bar\n");
	expect_py(_i, "import os\nprint(sorted(os.environ))\n", "['HOME', 'LANG', 'PATH', 'TMPDIR']\n");
}
END_TEST

START_TEST(no_host_fds)
{
	HARNESS_MODE_GUARD(_i);
	const char *code = "import os\n"
			   "print(sorted(os.listdir('/proc/self/fd'), key=int),\n"
			   "      [os.readlink('/proc/self/fd/%d' % i).split(':')[0] for i in range(3)])\n";
	/* moat is started with a leaked host fd 7 */
	const char *args[] = { "run", "-l", "python", "-c", code, NULL };
	int out;
	pid_t pid = spawn_moat(_i, args, "", false, true, &out);
	char *text = read_until(out, NULL, 30000);
	close(out);
	int st = wait_status(pid);
	ck_assert_msg(st == 0, "status %d: %s", st, text);
	/* 0-2 and the directory listdir itself opened */
	ck_assert_str_eq(text, "['0', '1', '2', '3'] ['pipe', 'pipe', 'pipe']\n");
	free(text);
}
END_TEST

START_TEST(no_terminal_inside)
{
	HARNESS_MODE_GUARD(_i);
	/* moat itself runs on a terminal (stdin, stdout, stderr, controlling tty) */
	const char *code = "import os, errno\n"
			   "try:\n"
			   "    open('/dev/tty'); t = 'TTY'\n"
			   "except OSError as e:\n"
			   "    t = errno.errorcode[e.errno]\n"
			   "print('tty', [os.isatty(i) for i in range(3)], open('/proc/self/stat').read().split()[6], t)\n";
	const char *args[] = { "run", "-l", "python", "-c", code, NULL };
	int out;
	pid_t pid = spawn_moat(_i, args, NULL, true, false, &out);
	char *text = read_until(out, NULL, 30000);
	close(out);
	int st = wait_status(pid);
	ck_assert_msg(st == 0, "status %d: %s", st, text);
	ck_assert_str_eq(text, "tty [False, False, False] 0 ENOENT\n");
	free(text);
}
END_TEST

/* ---- invariant 7: nothing outlives a run ---------------------------------------- */

/* /proc/PID/task/PID/children into kids (len bytes; "" when unread). */
static void read_children(pid_t pid, char *kids, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
	kids[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(kids, (int)len, f))
			kids[0] = '\0';
		fclose(f);
	}
}

START_TEST(supervisor_killed_kills_sandbox)
{
	HARNESS_MODE_GUARD(_i);
	char marker[96], code[512];
	harness_marker(marker, sizeof marker, "moatorphan", _i);
	snprintf(code, sizeof code,
		 "for i in 1 2 3; do (exec -a %s sleep 30) & done\n"
		 "(exec -a %s sleep 30 &)\n"
		 "sleep 0.2; echo ready; wait\n",
		 marker, marker);
	/* code through stdin: the marker is in no argv but the sleeps' */
	const char *args[] = { "run", "-l", "bash", "-", NULL };
	int out;
	pid_t pid = spawn_moat(_i, args, code, false, false, &out);
	char *text = read_until(out, "ready\n", 20000);
	ck_assert_msg(strstr(text, "ready\n"), "no ready: %s", text);
	int started = 0;
	for (int i = 0; i < 40 && started < 4; i++) {
		started = harness_count_marker(marker);
		if (started < 4)
			usleep(50000);
	}
	ck_assert_int_eq(started, 4);
	/* the sandbox init, to clean up if the test fails */
	char kids[256];
	read_children(pid, kids, sizeof kids);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(wait_status(pid), 128 + SIGKILL);
	int left = -1;
	for (int i = 0; i < 20 && left != 0; i++) {
		left = harness_count_marker(marker);
		if (left)
			usleep(100000);
	}
	if (left) /* do not leave them behind: killing the init ends its namespace */
		for (char *p = strtok(kids, " \n"); p; p = strtok(NULL, " \n"))
			kill(atoi(p), SIGKILL);
	close(out);
	free(text);
	ck_assert_msg(left == 0, "%d sandbox processes outlived a killed supervisor (mode %d)", left,
		      _i);
}
END_TEST

/* The first pid listed in /proc/PID/task/PID/children, or -1. */
static pid_t first_child(pid_t pid)
{
	char kids[256];
	read_children(pid, kids, sizeof kids);
	return kids[0] ? (pid_t)atoi(kids) : -1;
}

/* Lines of /proc/PID/maps (into *lines) and, of them, the shared writable
 * mappings (perms "rw-s": a file mapped read-only and shared, like glibc's
 * gconv cache, is no channel); -1 when it cannot be read. */
static int shared_maps(pid_t pid, int *lines)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int shared = 0;
	*lines = 0;
	while (fgets(line, sizeof line, f)) {
		char perms[8] = "";
		(*lines)++;
		if (sscanf(line, "%*s %7s", perms) == 1 && perms[1] == 'w' && perms[3] == 's') {
			fprintf(stderr, "shared mapping in %d: %s", (int)pid, line);
			shared++;
		}
	}
	fclose(f);
	return shared;
}

/* No process of the sandbox shares a page with the supervisor: the mount
 * plan reaches pid 1 on the sync pipe after clone3, read into a private
 * mapping pid 1 unmaps once its mounts are made, before it forks the
 * program. Looked at from the host while the program runs (concurrent runs
 * under the service: serve/v1_concurrent_runs_share_no_memory). */
START_TEST(sandbox_shares_no_memory_with_supervisor)
{
	HARNESS_MODE_GUARD(_i);
	const char *args[] = { "run", "-l", "bash", "-", NULL };
	int out;
	pid_t pid = spawn_moat(_i, args, "echo ready; exec sleep 30\n", false, false, &out);
	char *text = read_until(out, "ready\n", 20000);
	pid_t init = first_child(pid), program = init > 0 ? first_child(init) : -1;
	int init_lines = 0, program_lines = 0;
	int init_shared = init > 0 ? shared_maps(init, &init_lines) : -1;
	int program_shared = program > 0 ? shared_maps(program, &program_lines) : -1;
	ck_assert_int_eq(kill(pid, SIGKILL), 0); /* pid 1 and the program die with it */
	ck_assert_int_eq(wait_status(pid), 128 + SIGKILL);
	close(out);
	ck_assert_msg(strstr(text, "ready\n"), "no ready: %s", text);
	free(text);
	ck_assert_msg(init > 0 && program > 0, "mode %d: pid 1 %d, program %d", _i, (int)init,
		      (int)program);
	ck_assert_msg(init_lines > 0 && program_lines > 0, "mode %d: maps unread (%d, %d lines)",
		      _i, init_lines, program_lines);
	ck_assert_msg(init_shared == 0, "mode %d: pid 1 maps %d shared mappings", _i, init_shared);
	ck_assert_msg(program_shared == 0, "mode %d: the program maps %d shared mappings", _i,
		      program_shared);
}
END_TEST

/* ---- invariant 8: rlimits ------------------------------------------------------- */

START_TEST(rlimits_set)
{
	HARNESS_MODE_GUARD(_i);
	/* RLIMIT_MEMLOCK: 8 MiB, or the caller's hard limit when lower (moat
	 * never raises one); RLIMIT_NICE and RLIMIT_RTPRIO 0: what the default
	 * policy's mlock, setpriority and sched_set* are held to (SECURITY.md
	 * rows 15, 90) */
	/* the caller's own limits raised first where it may (this test runs in
	 * a process of its own; raising a hard limit needs CAP_SYS_RESOURCE):
	 * moat lowers them for the program whatever the caller had */
	struct rlimit big = { 64u << 20, 64u << 20 }, nice = { 20, 20 }, rt = { 10, 10 };
	if (setrlimit(RLIMIT_MEMLOCK, &big) < 0 || setrlimit(RLIMIT_NICE, &nice) < 0 ||
	    setrlimit(RLIMIT_RTPRIO, &rt) < 0)
		fprintf(stderr, "note: %s: the caller's RLIMIT_MEMLOCK, NICE and RTPRIO not "
			"raised (%s): the program's are checked against the caller's\n",
			__func__, strerror(errno));
	struct rlimit ml;
	ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &ml), 0);
	unsigned long long memlock = 8ull << 20;
	if (ml.rlim_max != RLIM_INFINITY && ml.rlim_max < memlock)
		memlock = ml.rlim_max;
	char want[256];
	snprintf(want, sizeof want, "(0, 0) True True\ncannot raise\n(%llu, %llu) (0, 0) (0, 0)\n",
		 memlock, memlock);
	expect_py(_i,
		  "import resource as r\n"
		  "core = r.getrlimit(r.RLIMIT_CORE)\n"
		  "nofile = r.getrlimit(r.RLIMIT_NOFILE)\n"
		  "fsize = r.getrlimit(r.RLIMIT_FSIZE)\n"
		  "print(core, 0 < nofile[0] <= nofile[1] <= 1024, r.RLIM_INFINITY not in fsize)\n"
		  "try:\n"
		  "    r.setrlimit(r.RLIMIT_NOFILE, (4096, 4096)); print('raised')\n"
		  "except (ValueError, OSError) as e:\n"
		  "    print('cannot raise')\n"
		  "print(r.getrlimit(r.RLIMIT_MEMLOCK), r.getrlimit(r.RLIMIT_NICE),\n"
		  "      r.getrlimit(r.RLIMIT_RTPRIO))\n",
		  want);
}
END_TEST

Suite *isolation_suite(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("isolation");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, root_and_binds_read_only, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, mount_flags, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, scratch_dirs_writable_tmp_noexec, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, tmpfs_size_capped, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, dev_minimal, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ptys_private_instance, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, host_paths_hidden, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, etc_only_planned_files, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, etc_services_names_resolve, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, matplotlib_plot_cold_run, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, fontconfig_finds_a_font, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ids_are_nobody, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_capabilities_no_new_privs, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, only_sandbox_pids, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, hostname_is_moat, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, proc_protected, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, proc1_not_accessible, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, proc1_hides_host_command_line, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, cgroup_paths_hide_the_host, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, mountinfo_names_no_host_path, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, network_only_loopback, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, host_env_absent, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_host_fds, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_terminal_inside, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, supervisor_killed_kills_sandbox, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sandbox_shares_no_memory_with_supervisor, MODE_ROOT,
			    MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, rlimits_set, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
