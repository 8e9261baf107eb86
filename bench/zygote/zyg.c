/* bench/zygote/zyg.c -- the per-request child path of the zygote prototype
 * (issue 15), as a shared object the Python zygote calls through ctypes right
 * after os.fork(). Benchmark code: nothing in src/ uses it.
 *
 * zyg_child() runs in the freshly forked child C of the zygote, before any
 * byte of the request is read:
 *   C: unshare(CLONE_NEWUSER); setgroups deny; uid/gid map "65534 <uid> 1"
 *      unshare(NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS|NEWCGROUP)
 *      fork -> A (pid 1 of the new pid namespace); C waits for A, _exit
 *   A: tmpfs on /tmp and /sandbox, new /proc; fork -> B (pid 2); A reaps, _exit
 *   B: setsid; drop the bounding set, ambient, then capset(0); no_new_privs;
 *      seccomp (moat's default filter, compiled beforehand by bpfdump);
 *      returns 0 to Python, which reads the request and runs it.
 * Every step stamps CLOCK_MONOTONIC into a page shared with the zygote.
 * Only C and B return to the caller on error (negative step number, errno in
 * the page); A never returns. */

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* stamp slots (int64 ns), shared with zygote.py */
enum {
	S_ARRIVE = 0,  /* zygote: request fd readable (set by Python) */
	S_CHILD,       /* C: entered zyg_child */
	S_USERNS,      /* C: unshare(CLONE_NEWUSER) returned */
	S_MAPS,        /* C: setgroups + uid_map + gid_map written */
	S_NS,          /* C: the other six namespaces */
	S_A,           /* A: pid 1 running */
	S_MOUNTS,      /* A: /tmp, /sandbox, /proc mounted */
	S_B,           /* B: pid 2 running */
	S_CAPS,        /* B: capabilities dropped */
	S_NNP,         /* B: no_new_privs */
	S_SECCOMP,     /* B: filter installed (back in Python next) */
	S_REQ,         /* B (Python): request read, main.py written */
	S_RUN,         /* B (Python): program ran, stdout flushed */
	S_A_REAPED,    /* A: B reaped */
	S_C_REAPED,    /* C: A reaped */
	S_REAPED,      /* zygote: C reaped (set by Python) */
	S_PARENT_FORK, /* zygote: os.fork returned in the parent */
	S_NSLOTS
};
#define ERR_STEP 30 /* int64 slot: failing step */
#define ERR_NO 31   /* int64 slot: its errno */
#define GO_FD 29    /* int64 slot: clone variant with flags & 16, the "go" write end */

static struct sock_filter *bpf;
static unsigned short bpf_len;
static int last_cap = 40;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Zygote side, once: the BPF program written by bpfdump (raw sock_filter
 * array) and the highest capability number. 0 or -errno. */
int zyg_init(const char *bpf_path)
{
	int fd = open(bpf_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
	    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		close(fd);
		return -EINVAL;
	}
	bpf = malloc((size_t)st.st_size);
	if (!bpf) {
		close(fd);
		return -ENOMEM;
	}
	ssize_t n = read(fd, bpf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size)
		return -EIO;
	bpf_len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char b[16] = { 0 };
		if (read(fd, b, sizeof b - 1) > 0)
			last_cap = atoi(b);
		close(fd);
	}
	return bpf_len;
}

int zyg_bpf_len(void) { return bpf_len; }

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static int fail(int64_t *st, int step)
{
	st[ERR_STEP] = step;
	st[ERR_NO] = errno;
	return -step;
}

static int wait_exit(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 125;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A (pid 1 of the new pid namespace): mounts, fork B, reap, _exit. B (pid 2):
 * the lockdown; returns 0 (or -step on error) to the caller, in B only. */
static int pid1_and_program(int64_t *st, unsigned flags)
{
	/* A: pid 1 */
	st[S_A] = now_ns();
	int step = 0;
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") < 0)
		step = S_MOUNTS;
	else if (mount("tmpfs", "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0755") < 0)
		step = S_MOUNTS + 100;
	/* flags & 4: procfs subset=pid (only /proc/<pid> and self) */
	else if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		       (flags & 4) ? "subset=pid" : NULL) < 0)
		step = S_MOUNTS + 200;
	if (step) {
		fail(st, step);
		_exit(120);
	}
	st[S_MOUNTS] = now_ns();
	pid_t b = fork();
	if (b < 0) {
		fail(st, S_B);
		_exit(121);
	}
	if (b > 0) { /* A: reap everything; leave with B's status */
		int rc = 125, status;
		for (;;) {
			pid_t w = waitpid(-1, &status, 0);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				break;
			if (w == b) {
				rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
				st[S_A_REAPED] = now_ns();
				break; /* pid 1 leaving kills the rest of the namespace */
			}
		}
		_exit(rc);
	}
	/* B: pid 2, the program */
	st[S_B] = now_ns();
	if (setsid() < 0)
		return fail(st, S_B);
	for (int c = 0; c <= last_cap; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return fail(st, S_CAPS);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return fail(st, S_CAPS);
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) < 0)
		return fail(st, S_CAPS);
	st[S_CAPS] = now_ns();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail(st, S_NNP);
	st[S_NNP] = now_ns();
	if (!(flags & 1)) { /* flags & 1: no seccomp (not used by the bench) */
		struct sock_fprog prog = { .len = bpf_len, .filter = bpf };
		if (!bpf || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
			return fail(st, S_SECCOMP);
	}
	st[S_SECCOMP] = now_ns();
	return 0;
}

int zyg_child(int64_t *st, unsigned flags)
{
	st[S_CHILD] = now_ns();
	unsigned uid = getuid(), gid = getgid();
	/* fds above 2 belong to the zygote (other clients' pipes, pidfds) */
	if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0)
		return fail(st, S_CHILD);
	if (unshare(CLONE_NEWUSER) < 0)
		return fail(st, S_USERNS);
	st[S_USERNS] = now_ns();
	char map[64];
	snprintf(map, sizeof map, "65534 %u 1\n", uid);
	if (write_str("/proc/self/setgroups", "deny") < 0 ||
	    write_str("/proc/self/uid_map", map) < 0)
		return fail(st, S_MAPS);
	snprintf(map, sizeof map, "65534 %u 1\n", gid);
	if (write_str("/proc/self/gid_map", map) < 0)
		return fail(st, S_MAPS);
	st[S_MAPS] = now_ns();
	/* flags & 2: no network namespace (to isolate its cost) */
	if (unshare(CLONE_NEWNS | CLONE_NEWPID | ((flags & 2) ? 0 : CLONE_NEWNET) | CLONE_NEWIPC |
		    CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		return fail(st, S_NS);
	st[S_NS] = now_ns();
	pid_t a = fork();
	if (a < 0)
		return fail(st, S_A);
	if (a > 0) { /* C */
		int rc = wait_exit(a);
		st[S_C_REAPED] = now_ns();
		_exit(rc);
	}
	return pid1_and_program(st, flags);
}

/* Variant with one process fewer: called in the zygote itself (between
 * PyOS_BeforeFork and PyOS_AfterFork_*), clone3 straight into the seven
 * namespaces; the zygote writes the child's one-line maps (its own uid and
 * gid: no capability needed) and lets it go. The child is A (pid 1) at once;
 * flags & 16 (cgroup): the zygote does not send "go" itself but leaves the
 * write end of the go pipe in st[GO_FD] for the caller to hand on (with A's
 * pidfd) to whoever puts A into its cgroup leaf; and A unshares its cgroup
 * namespace only after go, so that its root is the request's leaf;
 * A makes its fds 0 and 1 the request and response (so B inherits them),
 * closes the rest, mounts, forks B. Returns the pid in the zygote, 0 in B
 * (-1000-step in B on error), -errno in the zygote on error. */
int zyg_clone(int64_t *st, unsigned flags, int req, int resp)
{
	int sync[2];
	st[GO_FD] = -1;
	if (pipe2(sync, O_CLOEXEC) < 0)
		return -errno;
	unsigned uid = getuid(), gid = getgid();
	struct {
		uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	} args = { 0 };
	args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | ((flags & 2) ? 0 : CLONE_NEWNET) |
		     CLONE_NEWIPC | CLONE_NEWUTS | ((flags & 16) ? 0 : CLONE_NEWCGROUP);
	args.exit_signal = SIGCHLD;
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (pid < 0) {
		int e = errno;
		close(sync[0]);
		close(sync[1]);
		return -e;
	}
	if (pid == 0) { /* A */
		char go;
		close(sync[1]);
		if (read(sync[0], &go, 1) != 1)
			_exit(122);
		/* flags & 16: now in the request's leaf, so the namespace's root is it */
		if ((flags & 16) && unshare(CLONE_NEWCGROUP) < 0) {
			fail(st, S_NS);
			_exit(123);
		}
		st[S_NS] = now_ns();
		if (dup2(req, 0) < 0 || dup2(resp, 1) < 0 ||
		    syscall(SYS_close_range, 3u, ~0u, 0u) < 0) {
			fail(st, S_NS);
			_exit(123);
		}
		int rc = pid1_and_program(st, flags);
		if (getpid() == 1) /* only B may return to Python */
			_exit(124);
		return rc < 0 ? rc - 1000 : 0; /* B's errors: <= -1000 */
	}
	st[S_CHILD] = now_ns(); /* clone3 returned in the zygote */
	close(sync[0]);
	char path[64], map[64];
	int ok = 1;
	snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
	ok = ok && write_str(path, "deny") == 0;
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof map, "65534 %u 1\n", uid);
	ok = ok && write_str(path, map) == 0;
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof map, "65534 %u 1\n", gid);
	ok = ok && write_str(path, map) == 0;
	if (!ok)
		fail(st, S_MAPS);
	st[S_MAPS] = now_ns();
	/* on failure the child sees EOF and exits; the zygote reaps it as usual */
	if (ok && (flags & 16)) {
		st[GO_FD] = sync[1]; /* the caller passes it on and closes it */
		return pid;
	}
	if (ok && write(sync[1], "g", 1) != 1)
		fail(st, S_MAPS);
	close(sync[1]);
	return pid;
}
