/* bench/zygote/outer.c -- the sandbox the zygote lives in, for the prototype
 * (issue 15): like moat's, minus what the zygote must keep. New user, mount,
 * pid, net, ipc, uts and cgroup namespaces; uid/gid 65534 inside (mapped to
 * the caller's uid, or to host 65534 when the caller is root); a tmpfs root,
 * read-only, with /usr and /etc bound read-only, a few /dev nodes, a new
 * /proc, tmpfs /tmp and /sandbox, DIR bound read-only at /zyg; pivot_root
 * (not chroot: a chrooted process may not create user namespaces).
 * No seccomp filter (the zygote needs unshare and mount for its children).
 *
 *   zyg-outer keep|nocaps DIR PROGRAM [ARGS...]
 * keep:   PROGRAM runs as uid 65534 with CAP_SYS_ADMIN, CAP_SETUID and
 *         CAP_SETGID (ambient) in its user namespace, other caps out of the
 *         bounding set;
 * nocaps: PROGRAM runs with no capability at all (bounding set empty).
 * Both set no_new_privs. PROGRAM is pid 1 of the new pid namespace.
 * keep,mask / nocaps,mask: /proc is masked as moat's plan masks it (kcore,
 * keys, ... behind /dev/null; sys, sysrq-trigger, irq, bus, fs read-only),
 * to see what that does to the children's own /proc mounts. */

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define R "/tmp" /* the staging root: a tmpfs mounted over /tmp in our own mount ns */

static void die(const char *what)
{
	fprintf(stderr, "zyg-outer: %s: %s\n", what, strerror(errno));
	_exit(126);
}

static void write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		die(path);
	close(fd);
}

static void bind_ro(const char *src, const char *dst, int rec)
{
	if (mount(src, dst, NULL, MS_BIND | (rec ? MS_REC : 0), NULL) < 0)
		die(dst);
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID };
	if (syscall(SYS_mount_setattr, AT_FDCWD, dst, rec ? AT_RECURSIVE : 0, &attr, sizeof attr) < 0)
		die("mount_setattr");
}

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die(path);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc < 4 || (strncmp(argv[1], "keep", 4) && strncmp(argv[1], "nocaps", 6))) {
		fprintf(stderr, "usage: zyg-outer keep|nocaps[,mask] DIR PROGRAM [ARGS...]\n");
		return 2;
	}
	int keep = !strncmp(argv[1], "keep", 4);
	int mask = strstr(argv[1], ",mask") != NULL;
	unsigned uid = getuid(), gid = getgid();
	unsigned out_uid = uid == 0 ? 65534 : uid, out_gid = uid == 0 ? 65534 : gid;
	/* The maps are written from outside: a process inside a new user namespace
	 * may only map its own uid; root mapping 65534 -> host 65534 needs
	 * CAP_SETUID in the parent namespace, which only the parent holds. */
	int ready[2], go[2];
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		die("pipe");
	pid_t x = fork();
	if (x < 0)
		die("fork");
	if (x > 0) {
		char c = 0, path[64], map[64];
		close(ready[1]);
		close(go[0]);
		if (read(ready[0], &c, 1) != 1)
			_exit(126);
		snprintf(path, sizeof path, "/proc/%d/setgroups", (int)x);
		write_str(path, "deny");
		snprintf(path, sizeof path, "/proc/%d/uid_map", (int)x);
		snprintf(map, sizeof map, "65534 %u 1\n", out_uid);
		write_str(path, map);
		snprintf(path, sizeof path, "/proc/%d/gid_map", (int)x);
		snprintf(map, sizeof map, "65534 %u 1\n", out_gid);
		write_str(path, map);
		if (write(go[1], &c, 1) != 1)
			die("go");
		int st;
		while (waitpid(x, &st, 0) < 0)
			if (errno != EINTR)
				die("waitpid");
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	close(ready[0]);
	close(go[1]);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		die("pdeathsig");
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		    CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		die("unshare");
	char c = 1;
	if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
		die("sync");
	/* Root's kuid 0 is not mapped in here: become the mapped 65534 (caps in
	 * this namespace are kept: we never were its uid 0) */
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setresgid(65534, 65534, 65534) < 0 ||
	    setresuid(65534, 65534, 65534) < 0)
		die("setresuid 65534");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid > 0) {
		int st;
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				die("waitpid");
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	/* pid 1 of the new pid namespace */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		die("pdeathsig");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("make private");
	if (mount("tmpfs", R, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
		die("staging tmpfs");
	const char *dirs[] = { R "/usr", R "/etc", R "/dev", R "/proc", R "/tmp", R "/sandbox",
			       R "/zyg", R "/oldroot" };
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
		if (mkdir(dirs[i], 0755) < 0)
			die(dirs[i]);
	const char *links[][2] = { { "usr/bin", R "/bin" }, { "usr/sbin", R "/sbin" },
				   { "usr/lib", R "/lib" }, { "usr/lib64", R "/lib64" } };
	for (size_t i = 0; i < sizeof links / sizeof *links; i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			die(links[i][1]);
	bind_ro("/usr", R "/usr", 1);
	bind_ro("/etc", R "/etc", 1);
	bind_ro(argv[2], R "/zyg", 1);
	const char *devs[] = { "null", "zero", "full", "random", "urandom" };
	for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
		char src[32], dst[48];
		snprintf(src, sizeof src, "/dev/%s", devs[i]);
		snprintf(dst, sizeof dst, R "/dev/%s", devs[i]);
		touch(dst);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			die(dst);
	}
	if (mount("proc", R "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("proc");
	if (mask) {
		const char *ro[] = { "sys", "sysrq-trigger", "irq", "bus", "fs" };
		const char *hide[] = { "kcore", "keys", "timer_list", "sched_debug", "latency_stats",
				       "kallsyms", "kmsg" };
		char p[64];
		for (size_t i = 0; i < sizeof ro / sizeof *ro; i++) {
			snprintf(p, sizeof p, R "/proc/%s", ro[i]);
			if (access(p, F_OK) == 0)
				bind_ro(p, p, 1);
		}
		for (size_t i = 0; i < sizeof hide / sizeof *hide; i++) {
			snprintf(p, sizeof p, R "/proc/%s", hide[i]);
			if (access(p, F_OK) == 0 && mount(R "/dev/null", p, NULL, MS_BIND, NULL) < 0)
				die(p);
		}
	}
	if (mount("tmpfs", R "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") < 0)
		die("tmp");
	if (mount("tmpfs", R "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0755") < 0)
		die("sandbox");
	if (chdir(R) < 0)
		die("chdir");
	if (syscall(SYS_pivot_root, ".", "oldroot") < 0)
		die("pivot_root");
	if (umount2("/oldroot", MNT_DETACH) < 0)
		die("umount oldroot");
	if (rmdir("/oldroot") < 0)
		die("rmdir oldroot");
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		die("remount / ro");
	if (chdir("/") < 0)
		die("chdir /");
	/* capabilities: keep = SYS_ADMIN, SETUID, SETGID through exec (ambient) */
	unsigned long keepset = keep ? (1ul << CAP_SYS_ADMIN) | (1ul << CAP_SETUID) | (1ul << CAP_SETGID) : 0;
	for (int cap = 0; cap <= CAP_LAST_CAP + 8; cap++)
		if (!(keepset >> cap & 1) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			die("capbset");
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	d[0].effective = d[0].permitted = d[0].inheritable = (unsigned)keepset;
	if (syscall(SYS_capset, &h, d) < 0)
		die("capset");
	for (int cap = 0; cap < 32; cap++)
		if ((keepset >> cap & 1) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
			die("ambient");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("nnp");
	char *envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", NULL };
	execve(argv[3], argv + 3, envp);
	die(argv[3]);
}
