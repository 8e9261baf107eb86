/* The sandbox side of a run. pid 1 of the new namespaces sets up the
 * filesystem while it still holds its namespace capabilities, then forks the
 * program (pid 2) and stays as a tiny init that reaps and reports.
 *
 * This runs right after clone3 in a copy of the supervisor: system calls
 * only, no allocation, no stdio. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/runner.h"
#include "core/stamp.h"
#include "core/sys.h"

static void report(int fd, int32_t kind, int32_t step, int32_t err, int32_t detail)
{
	struct moat_report r = { .kind = kind, .step = step, .err = err, .detail = detail };
	ssize_t n;
	do
		n = send(fd, &r, sizeof r, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
}

/* Hands the seccomp listener to the supervisor: one record with the fd. */
static int send_listener(int fd, int listener)
{
	struct moat_report r = { .kind = MOAT_REPORT_LISTENER };
	return moat_send_fds(fd, &r, sizeof r, &listener, 1);
}

__attribute__((noreturn)) static void fail(const struct moat_child *c, enum moat_step step,
					   int detail)
{
	report(c->report_fd, MOAT_REPORT_SETUP_FAILED, step, errno, detail);
	moat_sys_exit(127);
}

/* Closes every fd but the ones in keep (unsorted, may hold -1). */
static int close_all_except(const int *keep, int n)
{
	int sorted[10];
	int m = 0;
	for (int i = 0; i < n && m < 10; i++) {
		if (keep[i] < 0)
			continue;
		int v = keep[i], j = m;
		while (j > 0 && sorted[j - 1] > v) {
			sorted[j] = sorted[j - 1];
			j--;
		}
		sorted[j] = v;
		m++;
	}
	unsigned int from = 0;
	for (int i = 0; i < m; i++) {
		if ((unsigned)sorted[i] > from &&
		    syscall(SYS_close_range, from, (unsigned)sorted[i] - 1, 0) < 0)
			return -1;
		from = (unsigned)sorted[i] + 1;
	}
	return (int)syscall(SYS_close_range, from, ~0U, 0);
}

/* Every signal back to its default and none blocked: a disposition set to
 * ignore survives execve, so whatever started moat would otherwise pass it on
 * to the program. The raw call, because glibc refuses its two internal
 * signals (32 and 33) in sigaction and hides them from sigprocmask, yet an
 * ignored 32 or 33 is inherited like any other (seen from CI's shell). An
 * all-zero kernel sigaction is SIG_DFL, no flags, an empty mask, whatever the
 * architecture's field order; the buffer is larger than any's. */
static void reset_signals(void)
{
	unsigned long dfl[8] = { 0 };
	unsigned long none[4] = { 0 };
	const size_t setsize = (_NSIG - 1) / 8;

	syscall(SYS_rt_sigprocmask, SIG_SETMASK, none, NULL, setsize);
	for (int s = 1; s < _NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			syscall(SYS_rt_sigaction, s, dfl, NULL, setsize);
}

/* What pid 1 shows as its command line instead of the supervisor's. */
static const char INIT_NAME[] = "moat-init";

/* Reads the numeric fields of /proc/self/stat numbered in want[] (as in
 * proc(5), ascending) into out[]. System calls only. */
static int read_self_stat(const int *want, int n, unsigned long *out)
{
	char buf[2048];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	while (len < sizeof buf - 1) {
		ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	/* field 2, the command name, may hold spaces and ')': field 3 starts
	 * after the last ')' */
	const char *p = strrchr(buf, ')');
	int field = 2, k = 0;
	while (p && *++p && k < n) {
		if (*p == ' ')
			continue;
		field++;
		unsigned long v = 0;
		bool digits = false;
		for (; *p >= '0' && *p <= '9'; p++, digits = true)
			v = v * 10 + (unsigned long)(*p - '0');
		if (field == want[k]) {
			if (!digits)
				break;
			out[k++] = v;
		}
		while (*p && *p != ' ')
			p++;
		if (!*p)
			break;
	}
	if (k < n) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* Writes len bytes of data (NULL: zeros) at addr of this process's own
 * memory, through mem (a /proc/self/mem fd) or, with mem -1, through
 * process_vm_writev on itself (no /proc file opened): an address the kernel
 * cannot write fails instead of faulting. System calls only. */
static int poke(int mem, unsigned long addr, const char *data, size_t len)
{
	static const char zeros[4096];
	pid_t self = mem < 0 ? (pid_t)syscall(SYS_getpid) : 0;
	while (len) {
		ssize_t w;
		if (mem >= 0) {
			size_t n = len < sizeof zeros ? len : sizeof zeros;
			w = pwrite(mem, data ? data : zeros, n, (off_t)addr);
		} else {
			struct iovec local[16], remote;
			size_t n = 0;
			unsigned long k = 0;
			if (data) {
				local[k++] = (struct iovec){ (void *)data, len };
				n = len;
			}
			for (; !data && k < 16 && n < len; k++) {
				size_t c = len - n < sizeof zeros ? len - n : sizeof zeros;
				local[k] = (struct iovec){ (void *)zeros, c };
				n += c;
			}
			remote = (struct iovec){ (void *)addr, n };
			w = process_vm_writev(self, local, k, &remote, 1, 0);
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		addr += (unsigned long)w;
		len -= (size_t)w;
		if (data)
			data += w;
	}
	return 0;
}

/* INIT_NAME over the start of the argument area (a shorter area is only
 * zeroed), zeros over the rest of it and over the environment. */
static int wipe(int mem, unsigned long arg, size_t arg_len, size_t name_len, unsigned long env,
		size_t env_len)
{
	if (poke(mem, arg, INIT_NAME, name_len) < 0 ||
	    poke(mem, arg + name_len, NULL, arg_len - name_len) < 0 ||
	    poke(mem, env, NULL, env_len) < 0)
		return -1;
	return 0;
}

/* The fields of /proc/self/stat that PR_SET_MM_MAP needs (proc(5) numbers). */
enum { START_CODE, END_CODE, START_STACK, START_DATA, END_DATA, START_BRK, ARG_START,
       ARG_END, ENV_START, ENV_END, NFIELDS };
static const int layout_fields[NFIELDS] = { 26, 27, 28, 45, 46, 47, 48, 49, 50, 51 };

/* This process's layout, read once before main: pid 1 is a copy of this
 * memory (clone3 from the supervisor, or from a zygote that loaded libmoat),
 * so the areas are the same, and pid 1, a fresh process, no longer pays for
 * a first /proc/self read of its own (~0.1 ms in issue 35's timeline); the
 * supervisor reads /proc/self anyway. Written only here. */
static unsigned long self_layout[NFIELDS];
static bool self_layout_ok;

__attribute__((constructor)) static void read_self_layout(void)
{
	self_layout_ok = read_self_stat(layout_fields, NFIELDS, self_layout) == 0;
}

/* pid 1 is a copy of the supervisor, and /proc/1/cmdline is readable by
 * every process of the sandbox (dumpability does not guard it): the host's
 * command line (--env values, host paths) must not be there, nor its
 * environment or its name. The name becomes INIT_NAME; both areas are
 * overwritten in pid 1's own copy (INIT_NAME, then zeros); then, where the
 * kernel allows it without a capability (PR_SET_MM_MAP without exe_fd:
 * CONFIG_CHECKPOINT_RESTORE), the command line is shrunk to INIT_NAME alone
 * and the environment emptied. The areas are the supervisor's, read before
 * its main (read_self_layout); where that failed, from pid 1's /proc/self,
 * while the host's /proc is still mounted. System calls only. */
/* memfd_create is in the default policy (SECURITY.md row 90): as root, pid 1
 * still runs with the host's root uid here (it becomes 65534 later), the one
 * uid the kernel lets write vm.memfd_noexec, and this process's pid
 * namespace is the run's own. 2: every memfd is sealed not executable and
 * MFD_EXEC fails, for every process of the run (a pid namespace's setting
 * can only be raised below it, and the program holds no capability to raise
 * or lower it). Rootless the kernel refuses the write; before Linux 6.3 the
 * file is missing. Either way a memfd stays executable, which gives the
 * program nothing /sandbox (writable, not noexec) does not. */
static void memfd_noexec(void)
{
	int fd = open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (write(fd, "2", 1) < 0) {
		/* best effort: the property is defence in depth (above) */
	}
	close(fd);
}

static int hide_host_cmdline(void)
{
	unsigned long v[NFIELDS];
	/* raw prctl: sanitizers intercept PR_SET_NAME and take their thread
	 * registry's lock, which another thread of the supervisor may have
	 * held at clone3 */
	if (syscall(SYS_prctl, PR_SET_NAME, INIT_NAME, 0, 0, 0) < 0)
		return -1;
	if (self_layout_ok)
		memcpy(v, self_layout, sizeof v);
	else if (read_self_stat(layout_fields, NFIELDS, v) < 0)
		return -1;
	if (v[ARG_END] < v[ARG_START] || v[ENV_END] < v[ENV_START]) {
		errno = EINVAL;
		return -1;
	}
	size_t arg_len = v[ARG_END] - v[ARG_START];
	/* a shorter area (argv[0] of a few bytes) is only zeroed */
	size_t name_len = arg_len >= sizeof INIT_NAME ? sizeof INIT_NAME : 0;
	/* under a seccomp filter already (a zygote's pid 1 runs under its
	 * sandbox's, or moat itself is sandboxed), which may refuse
	 * process_vm_writev or kill for it: /proc/self/mem, as before */
	bool filtered = syscall(SYS_prctl, PR_GET_SECCOMP, 0, 0, 0, 0) != 0;
	size_t env_len = v[ENV_END] - v[ENV_START];
	int rc = -1;
	errno = EPERM;
	if (!filtered)
		rc = wipe(-1, v[ARG_START], arg_len, name_len, v[ENV_START], env_len);
	if (rc < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES)) {
		/* refused, not a bad range: through /proc/self/mem */
		int mem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
		if (mem < 0)
			return -1;
		rc = wipe(mem, v[ARG_START], arg_len, name_len, v[ENV_START], env_len);
		int e = errno;
		close(mem);
		errno = e;
	}
	if (rc < 0)
		return -1;
	struct prctl_mm_map map = {
		.start_code = v[START_CODE], .end_code = v[END_CODE],
		.start_data = v[START_DATA], .end_data = v[END_DATA],
		.start_brk = v[START_BRK], .brk = (unsigned long)syscall(SYS_brk, 0),
		.start_stack = v[START_STACK],
		.arg_start = v[ARG_START], .arg_end = v[ARG_START] + name_len,
		.env_start = v[ENV_START], .env_end = v[ENV_START],
		.exe_fd = (uint32_t)-1,
	};
	/* best effort: without it the areas read as INIT_NAME and zeros */
	(void)syscall(SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0);
	return 0;
}

/* Tries each candidate path; returns only when none could be executed. */
static void exec_candidates(const struct moat_exec *e, char **envp)
{
	int first_err = ENOENT;
	for (char **p = e->paths; *p; p++) {
		execve(*p, e->argv, envp);
		if (errno != ENOENT && errno != ENOTDIR && first_err == ENOENT)
			first_err = errno;
	}
	errno = first_err;
}

/* An argv request's program could not be executed: say so on the
 * program's stderr and end as a shell would, 127 when it was not found, 126
 * when it was found but could not run. System calls only. */
__attribute__((noreturn)) static void command_failed(const struct moat_exec *e, int err)
{
	const char *name = e->argv[0];
	bool found = err != ENOENT && err != ENOTDIR;
	const char *why;
	switch (err) {
	case ENOENT:
	case ENOTDIR:
		why = strchr(name, '/') ? "no such file or directory"
					: "command not found (looked in " RUN_SANDBOX_PATH ")";
		break;
	case EACCES: why = "permission denied"; break;
	case ENOEXEC: why = "exec format error"; break;
	case E2BIG: why = "argument list too long"; break;
	case ELOOP: why = "too many levels of symbolic links"; break;
	case EISDIR: why = "is a directory"; break;
	case ENOMEM: why = "out of memory"; break;
	default: why = NULL; break;
	}
	char num[48] = "cannot execute: errno ";
	if (!why) {
		size_t at = strlen(num);
		char digits[12];
		int n = 0;
		for (unsigned v = (unsigned)err; n == 0 || v; v /= 10)
			digits[n++] = (char)('0' + v % 10);
		while (n)
			num[at++] = digits[--n];
		num[at] = '\0';
		why = num;
	}
	struct iovec iov[] = {
		{ (void *)"moat: ", 6 }, { (void *)name, strlen(name) }, { (void *)": ", 2 },
		{ (void *)why, strlen(why) }, { (void *)"\n", 1 },
	};
	ssize_t w;
	do
		w = writev(STDERR_FILENO, iov, sizeof iov / sizeof iov[0]);
	while (w < 0 && errno == EINTR);
	moat_sys_exit(found ? 126 : 127);
}

/* pid 2 up to its program: fds 0, 1, 2 the program's, 3 the report socket
 * (close-on-exec), 4 the key-value socket; rlimits, no capabilities,
 * no_new_privs, Landlock and the filter. *local is c with report_fd 3, and
 * c points at it on return. Fails the run (exits) on any error. */
static void program_lockdown(const struct moat_child **cp, struct moat_child *local)
{
	const struct moat_child *c = *cp;
	moat_stamp("pid2: started");
	/* pid 1 reset every signal and the mask at its start; it ignores
	 * SIGPIPE for its own writes, the program gets the default */
	if (signal(SIGPIPE, SIG_DFL) == SIG_ERR || setsid() < 0)
		fail(c, MOAT_STEP_FDS, 0);
	/* move the fds out of the way, then to 0, 1, 2, 3 (the report socket,
	 * closed by execve) and 4 (the key-value socket, which the program
	 * keeps) */
	int fds[6] = { c->stdin_fd, c->stdout_fd, c->stderr_fd, c->report_fd, c->kv_fd,
		       c->session_fd };
	bool kv = c->kv_fd >= 0, session = c->session_fd >= 0;
	for (int i = 0; i < 6; i++) {
		if (i >= 4 && fds[i] < 0)
			continue;
		fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
		if (fds[i] < 0)
			fail(c, MOAT_STEP_FDS, 0);
	}
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			fail(c, MOAT_STEP_FDS, 0);
	/* a session's driver keeps its control socket as fd 3: the report
	 * socket goes past the fds the program keeps */
	int report = !session ? 3 : kv ? RUN_KV_FD + 1 : RUN_KV_FD;
	if (dup3(fds[3], report, O_CLOEXEC) < 0)
		fail(c, MOAT_STEP_FDS, 0);
	*local = *c;
	local->report_fd = report;
	c = *cp = local;
	if (kv && dup2(fds[4], RUN_KV_FD) < 0) /* dup2: not close-on-exec */
		fail(c, MOAT_STEP_FDS, 0);
	if (session && dup2(fds[5], RUN_SESSION_FD) < 0)
		fail(c, MOAT_STEP_FDS, 0);
	int top = kv && report < RUN_KV_FD ? RUN_KV_FD : report; /* the highest kept */
	if (syscall(SYS_close_range, (unsigned)top + 1, ~0U, 0) < 0)
		fail(c, MOAT_STEP_FDS, 0);
	moat_stamp("pid2: fds done");
	umask(022);
	if (moat_priv_apply_rlimits(c->priv) < 0)
		fail(c, MOAT_STEP_RLIMITS, 0);
	/* the bounding set is already empty (pid 1 dropped it) */
	if (moat_priv_clear_caps(c->priv) < 0)
		fail(c, MOAT_STEP_CAPS, 0);
	if (moat_priv_no_new_privs() < 0)
		fail(c, MOAT_STEP_NNP, 0);
	if (moat_priv_landlock(c->priv) < 0)
		fail(c, MOAT_STEP_LANDLOCK, 0);
	moat_stamp("pid2: caps dropped");
	if (c->seccomp) {
		int listener = -1;
		if (moat_seccomp_install(c->seccomp, &listener) < 0)
			fail(c, MOAT_STEP_SECCOMP, 0);
		if (listener >= 0) {
			if (send_listener(c->report_fd, listener) < 0)
				fail(c, MOAT_STEP_SECCOMP, 1);
			close(listener);
		}
	}
}

/* pid 2: becomes the program. */
__attribute__((noreturn)) static void program_main(const struct moat_child *c)
{
	struct moat_child local;
	program_lockdown(&c, &local);
	if (c->transpile) {
		pid_t t = moat_sys_fork();
		if (t < 0)
			fail(c, MOAT_STEP_TRANSPILE, 0);
		if (t == 0) {
			exec_candidates(c->transpile, c->envp);
			fail(c, MOAT_STEP_TRANSPILE, 0);
		}
		int st;
		while (waitpid(t, &st, 0) < 0)
			if (errno != EINTR)
				fail(c, MOAT_STEP_TRANSPILE, 0);
		/* a transpiler that did not start has already reported */
		if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
			moat_sys_exit(127);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			moat_sys_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	moat_stamp("pid2: seccomp on, execve");
	exec_candidates(c->program, c->envp);
	if (c->program->command)
		command_failed(c->program, errno);
	fail(c, MOAT_STEP_EXEC, 0);
}

/* The stack pid 2 runs on while it shares pid 1's memory (see below).
 * Mutable static state, but never shared: only pid 1 and pid 2 touch it,
 * in pid 1's own copy of the supervisor's memory, one at a time (pid 1
 * waits until pid 2 has exec'd). */
static char program_stack[256 * 1024] __attribute__((aligned(64)));

static int program_entry(void *arg)
{
	program_main(arg);
}

/* pid 1 after the fork: no capabilities, not dumpable (the program runs as
 * the same uid and must not ptrace it), reaps until the program exits. */
__attribute__((noreturn)) static void init_main(const struct moat_child *c, pid_t program)
{
	close(c->stdin_fd);
	close(c->stdout_fd);
	close(c->stderr_fd);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || moat_priv_clear_caps(c->priv) < 0 ||
	    moat_priv_no_new_privs() < 0) {
		kill(program, SIGKILL);
		fail(c, MOAT_STEP_INIT, 0);
	}
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, __WALL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			moat_sys_exit(126); /* no children left and no status: should not happen */
		}
		if (WIFSTOPPED(st)) {
			/* the program made init its tracer (PTRACE_TRACEME, where a
			 * policy allows it): never hold a tracee stopped, let it go
			 * with the signal it stopped for */
			int sig = WSTOPSIG(st) == SIGTRAP ? 0 : WSTOPSIG(st);
			ptrace(PTRACE_DETACH, w, NULL, (void *)(long)sig);
			continue;
		}
		if (!WIFEXITED(st) && !WIFSIGNALED(st))
			continue;
		if (w == program) {
			moat_stamp("init: program reaped");
			if (c->outputs_fd >= 0) {
				moat_outputs_collect(c);
				close(c->outputs_fd);
			}
			/* alone (no child left, the zombies reaped): no other
			 * process of the run exists or can appear, so the
			 * supervisor may answer without waiting for this exit */
			int z;
			pid_t more;
			while ((more = waitpid(-1, &z, WNOHANG | __WALL)) > 0 ||
			       (more < 0 && errno == EINTR))
				;
			int32_t alone = more < 0 && errno == ECHILD ? MOAT_STATUS_ALONE : 0;
			report(c->report_fd, MOAT_REPORT_STATUS, alone, 0, st);
			moat_stamp("init: status sent, exiting");
			/* exiting kills every other process of the pid namespace */
			moat_sys_exit(0);
		}
	}
}

/* Exactly len bytes from fd: 0, or -1 (EOF: errno 0). */
static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = 0;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The mount plan from the sync pipe (runner.h, struct moat_plan_header),
 * into an anonymous private mapping of this process's own (*held, *len:
 * unmapped once the mounts are made): no page of it is shared with the
 * supervisor or with any other run's pid 1. The supervisor gone (EOF, or
 * another byte): exit 125. */
static const struct moat_mount_plan *read_plan(const struct moat_child *c, void **held,
					       size_t *len)
{
	struct moat_plan_header h;
	if (moat_sync_wait(c->sync_fd, MOAT_SYNC_PLAN) < 0 ||
	    read_full(c->sync_fd, &h, sizeof h) < 0)
		moat_sys_exit(125);
	if (h.len < sizeof(struct moat_mount_plan) || h.len > MOAT_PLAN_MAX_BYTES) {
		errno = EINVAL;
		fail(c, MOAT_STEP_MOUNT, 0);
	}
	void *m = mmap(NULL, (size_t)h.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		fail(c, MOAT_STEP_MOUNT, 0);
	if (read_full(c->sync_fd, m, (size_t)h.len) < 0)
		moat_sys_exit(125);
	*held = m;
	*len = (size_t)h.len;
	const struct moat_mount_plan *p = moat_plan_rebase(m, (size_t)h.len, h.at);
	if (!p)
		fail(c, MOAT_STEP_MOUNT, 0);
	return p;
}

int moat_child_main(const struct moat_child *c)
{
	moat_sys_child_begin();
	/* if the supervisor dies from here on, so does pid 1 and with it the
	 * whole pid namespace; before this point the sync read sees EOF */
	moat_stamp("init: started");
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		fail(c, MOAT_STEP_SYNC, 0);
	int keep[] = { c->sync_fd, c->report_fd, c->stdin_fd, c->stdout_fd, c->stderr_fd,
		       c->net_fds[0], c->net_fds[1], c->outputs_fd, c->kv_fd, c->session_fd };
	if (close_all_except(keep, 10) < 0)
		fail(c, MOAT_STEP_FDS, 0);
	/* Work for the program's sake, done here while the supervisor writes the
	 * id maps (pid 2 inherits both): every signal back to its default with
	 * an empty mask, then SIGPIPE ignored for init's own writes (pid 2 resets
	 * it); the bounding set emptied; the host's command line and
	 * environment wiped from /proc/1/cmdline. */
	reset_signals();
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || moat_priv_drop_bounding(c->priv) < 0)
		fail(c, MOAT_STEP_CAPS, 0);
	if (hide_host_cmdline() < 0)
		fail(c, MOAT_STEP_CMDLINE, 0);
	if (c->as_root)
		memfd_noexec();
	moat_stamp("init: prepared, waits for the id maps");
	if (moat_sync_wait(c->sync_fd, MOAT_SYNC_IDS) < 0)
		moat_sys_exit(125); /* the supervisor gave up: nothing to report to */
	moat_stamp("init: released");

	if (moat_priv_become_nobody(c->as_root) < 0)
		fail(c, MOAT_STEP_IDS, 0);
	/* As root the uid change above cleared the parent-death signal: set it
	 * again, then make sure the supervisor did not die in between (its end
	 * of the report socket would be closed; getppid() is 0 across the pid
	 * namespace, so it cannot tell). */
	if (moat_pdeathsig_rearm(0, c->report_fd) < 0) {
		if (errno != ESRCH)
			fail(c, MOAT_STEP_SYNC, 0);
		moat_sys_exit(125);
	}
	moat_stamp("init: ids set");
	/* the network namespace's socket buffer limits, through this mount
	 * namespace's /proc while it is still writable (the sandbox's /proc/sys
	 * is a read-only bind). A failure is reported after the mounts: where
	 * a container runtime masked /proc (its /proc/sys read-only), the
	 * sandbox's own /proc cannot be mounted either, and that error says
	 * what is wrong and how to fix it. */
	int sysctl_step = 0, sysctl_errno = 0;
	if (moat_net_child_sysctls(&sysctl_step) < 0)
		sysctl_errno = errno;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail(c, MOAT_STEP_PRIVATE, 0);
	size_t op = 0;
	/* the supervisor built the plan while this process set its ids */
	void *held = NULL;
	size_t held_len = 0;
	const struct moat_mount_plan *plan = c->plan_piped ? read_plan(c, &held, &held_len)
							   : c->plan;
	if (moat_plan_apply(plan, &op) < 0)
		fail(c, MOAT_STEP_MOUNT, (int)op);
	/* pid 1's own copy: gone before the program is forked */
	if (held && munmap(held, held_len) < 0)
		fail(c, MOAT_STEP_MOUNT, (int)op);
	if (sysctl_errno) {
		errno = sysctl_errno;
		fail(c, MOAT_STEP_NET, sysctl_step);
	}
	moat_stamp("init: mounts done");
	if (sethostname(MOAT_HOSTNAME, sizeof MOAT_HOSTNAME - 1) < 0 ||
	    setdomainname(MOAT_HOSTNAME, sizeof MOAT_HOSTNAME - 1) < 0)
		fail(c, MOAT_STEP_HOSTNAME, 0);
	int net_step = 0;
	if (moat_net_child_setup(c->net, &net_step) < 0)
		fail(c, MOAT_STEP_NET, net_step);
	for (int i = 0; i < 2; i++)
		if (c->net_fds[i] >= 0)
			close(c->net_fds[i]);

	moat_stamp("init: net done, clone pid 2");
	/* The supervisor joins this process to the run's cgroups (v1) while
	 * the mounts above are made; the program is forked only once that is
	 * done, so it starts inside every limit. */
	if (moat_sync_wait(c->sync_fd, MOAT_SYNC_START) < 0)
		moat_sys_exit(125);
	close(c->sync_fd);
	moat_stamp("init: cgroups joined");
	/* clone3 rooted the cgroup namespace where the supervisor was; the v1
	 * leaves were joined after it, so /proc/self/cgroup would show them
	 * (moat-<host pid>-<n>). A new namespace here is rooted at the leaves:
	 * every path reads "/". */
	if (unshare(CLONE_NEWCGROUP) < 0)
		fail(c, MOAT_STEP_CGROUPNS, 0);

	pid_t program;
	if (!c->program && c->transpile) {
		errno = EINVAL;
		fail(c, MOAT_STEP_FORK, 0);
	}
	if (!c->program) {
		/* no program: pid 2 returns to the caller of moat_child_main
		 * locked down, in a memory of its own (a raw fork, as below).
		 * The report socket is closed first: from here on only the
		 * caller's code runs, and it must hold no channel to the
		 * supervisor but the program's stdin, stdout and stderr. */
		program = moat_sys_fork();
		if (program == 0) {
			struct moat_child local;
			program_lockdown(&c, &local);
			moat_stamp("pid2: locked down, returning");
			if (close(c->report_fd) < 0)
				moat_sys_exit(127);
			return 0;
		}
	} else if (c->transpile || MOAT_SYS_TSAN) {
		/* the program forks the transpiler itself: it needs its own memory
		 * (a raw fork: glibc's would take locks copied from the
		 * supervisor's other threads, see core/sys.h). ThreadSanitizer
		 * builds take this path always: TSan intercepts clone() with
		 * CLONE_VFORK and takes its own locks, copied here too. */
		program = moat_sys_fork();
		if (program == 0)
			program_main(c);
	} else {
		/* pid 2 shares pid 1's memory until its execve, while pid 1 waits
		 * (CLONE_VFORK): no page-table copy of the supervisor's image,
		 * about 1 ms per run here. It runs on a stack of its own and only
		 * makes system calls before execve or _exit. */
		program = clone(program_entry, program_stack + sizeof program_stack,
				CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)c);
	}
	if (program < 0)
		fail(c, MOAT_STEP_FORK, 0);
	if (c->kv_fd >= 0)
		close(c->kv_fd); /* the program's alone */
	moat_stamp("init: pid 2 exec'd");
	init_main(c, program);
}
