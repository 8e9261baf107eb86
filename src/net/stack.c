/* "network": true: a user-mode network stack (pasta, else slirp4netns)
 * attached to the sandbox's network namespace, torn down with the run.
 *
 * The tool is started the same way rootless and as root: a forked helper
 * joins the sandbox's user namespace (its owner — the supervisor — may),
 * becomes the sandbox's uid 65534 (the invoking user rootless, the
 * unprivileged mapped uid as root: never host root), keeps only
 * CAP_SYS_ADMIN and CAP_NET_ADMIN of that namespace as ambient capabilities
 * and execs the tool with a fixed argv, an empty environment and exactly
 * the fds it needs: 0-2 on /dev/null, 3 the sandbox's netns, 4 a pipe on
 * which the tool reports that the namespace is configured.
 *
 * Neither tool may reach the host's loopback: pasta runs with --no-map-gw
 * and no port forwarding in either direction (-t/-u/-T/-U none);
 * slirp4netns with --disable-host-loopback. The host's other addresses are
 * blocked by prohibit routes that pid 1 installs (net.c). */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#include <sched.h>

#include "net/internal.h"

#define READY_TIMEOUT_MS 10000
#define PASTA_DNS "169.254.1.1"
#define SLIRP_DNS "10.0.2.3"
#define INSIDE_ID 65534

static const char *const DIRS[] = { "/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/sbin" };

static const char *const PASTA_ARGV[] = {
	"pasta", "--foreground", "--quiet", "--config-net", "--no-map-gw",
	"-t", "none", "-u", "none", "-T", "none", "-U", "none",
	"--dns-forward", PASTA_DNS, "--pid", "/proc/self/fd/4",
	"--no-netns-quit", "--netns-only", "--netns", "/proc/self/fd/3", NULL,
};
static const char *const SLIRP_ARGV[] = {
	"slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
	"--netns-type=path", "--ready-fd=4", "/proc/self/fd/3", "tap0", NULL,
};

/* exit codes of the helper before exec (the tools use small ones) */
enum helper_step { H_PARENT = 120, H_SETNS, H_GROUPS, H_IDS, H_CAPS, H_FDS, H_EXEC };

const char *moat_stack_name(const struct moat_stack *s)
{
	return s->kind == MOAT_STACK_PASTA ? "pasta" : "slirp4netns";
}

const char *moat_stack_resolv_conf(const struct moat_stack *s)
{
	return s->kind == MOAT_STACK_PASTA ? "nameserver " PASTA_DNS "\n"
					   : "nameserver " SLIRP_DNS "\n";
}

static char *find_tool(const char *name)
{
	for (size_t i = 0; i < sizeof DIRS / sizeof DIRS[0]; i++) {
		char *p = NULL;
		if (asprintf(&p, "%s/%s", DIRS[i], name) < 0)
			return NULL;
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

int moat_stack_prepare(struct moat_stack *s, struct moat_error *err)
{
	const char *want = secure_getenv("MOAT_NET_STACK");
	if (want && *want && strcmp(want, "pasta") && strcmp(want, "slirp4netns"))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "MOAT_NET_STACK must be pasta or slirp4netns");
	bool try_pasta = !want || !*want || !strcmp(want, "pasta");
	bool try_slirp = !want || !*want || !strcmp(want, "slirp4netns");
	if (try_pasta && (s->path = find_tool("pasta")))
		s->kind = MOAT_STACK_PASTA;
	else if (try_slirp && (s->path = find_tool("slirp4netns")))
		s->kind = MOAT_STACK_SLIRP4NETNS;
	else if (try_pasta && try_slirp)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "\"network\": true needs a user-mode network stack: install "
				      "pasta (Debian package 'passt') or slirp4netns (Debian "
				      "package 'slirp4netns'); the run was not started");
	else
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "MOAT_NET_STACK=%s, but it is not installed (Debian package "
				      "'%s'); the run was not started", want,
				      try_pasta ? "passt" : "slirp4netns");
	/* both tools open /dev/net/tun as an unprivileged uid */
	struct stat st;
	if (stat("/dev/net/tun", &st) < 0 || !S_ISCHR(st.st_mode) || (st.st_mode & 0006) != 0006)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "\"network\": true needs /dev/net/tun readable and writable by "
				      "every user (mode 0666, the Debian default set by udev) for %s; "
				      "the run was not started", moat_stack_name(s));
	const char *const *src = s->kind == MOAT_STACK_PASTA ? PASTA_ARGV : SLIRP_ARGV;
	size_t n = 0;
	while (src[n])
		n++;
	s->argv = calloc(n + 1, sizeof *s->argv);
	if (!s->argv)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		s->argv[i] = (char *)src[i]; /* static strings: never freed */
	return 0;
}

/* Forked helper: system calls only. */
__attribute__((noreturn)) static void helper(const struct moat_stack *s, int userns, int netns,
					     int ready_w, bool as_root, pid_t parent)
{
	static char *const envp[] = { NULL };
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		_exit(H_PARENT);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (setns(userns, CLONE_NEWUSER) < 0)
		_exit(H_SETNS);
	/* rootless: setgroups is denied in the namespace and the groups are the
	 * user's own; as root the supplementary groups must go */
	if (setgroups(0, NULL) < 0 && as_root)
		_exit(H_GROUPS);
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 ||
	    setresgid(INSIDE_ID, INSIDE_ID, INSIDE_ID) < 0 ||
	    setresuid(INSIDE_ID, INSIDE_ID, INSIDE_ID) < 0)
		_exit(H_IDS);
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	uint32_t keep = (1u << CAP_SYS_ADMIN) | (1u << CAP_NET_ADMIN);
	data[0].effective = data[0].permitted = data[0].inheritable = keep;
	if (syscall(SYS_capset, &hdr, data) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_ADMIN, 0, 0) < 0)
		_exit(H_CAPS);
	/* 0-2 /dev/null, 3 netns, 4 ready pipe, nothing else */
	int hi_net = fcntl(netns, F_DUPFD_CLOEXEC, 10);
	int hi_ready = fcntl(ready_w, F_DUPFD_CLOEXEC, 10);
	if (hi_net < 0 || hi_ready < 0 || dup2(s->devnull, 0) < 0 || dup2(s->devnull, 1) < 0 ||
	    dup2(s->devnull, 2) < 0 || dup2(hi_net, 3) < 0 || dup2(hi_ready, 4) < 0 ||
	    syscall(SYS_close_range, 5U, ~0U, 0) < 0)
		_exit(H_FDS);
	execve(s->path, s->argv, envp);
	_exit(H_EXEC);
}

static const char *step_text(int code)
{
	switch (code) {
	case H_PARENT: return "starting (the supervisor went away)";
	case H_SETNS: return "joining the sandbox's user namespace";
	case H_GROUPS: return "dropping supplementary groups";
	case H_IDS: return "switching to the sandbox's uid";
	case H_CAPS: return "setting its capabilities";
	case H_FDS: return "setting up its file descriptors";
	case H_EXEC: return "executing it";
	}
	return NULL;
}

/* The host id that id `inside` of the child's namespace maps to, or -1. */
static long long outside_id(pid_t child, const char *map, unsigned long inside)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)child, map);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	unsigned long in, out, count;
	long long found = -1;
	while (found < 0 && fscanf(f, "%lu %lu %lu", &in, &out, &count) == 3)
		if (inside >= in && inside - in < count)
			found = (long long)(out + (inside - in));
	fclose(f);
	return found;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int moat_stack_attach(struct moat_stack *s, pid_t child, bool as_root, struct moat_error *err)
{
	char path[64];
	int userns = -1, netns = -1, ready[2] = { -1, -1 };
	int rc = -1;
	snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)child);
	netns = open(path, O_RDONLY | O_CLOEXEC);
	s->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (userns < 0 || netns < 0 || s->devnull < 0 || pipe2(ready, O_CLOEXEC) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "cannot prepare %s for the sandbox's namespaces: %s",
			       moat_stack_name(s), strerror(errno));
		goto out;
	}
	/* pasta reopens the pipe as /proc/self/fd/4: as root the pipe must
	 * belong to the uid the tool runs as */
	if (as_root) {
		long long u = outside_id(child, "uid_map", INSIDE_ID);
		long long g = outside_id(child, "gid_map", INSIDE_ID);
		if (u < 0 || g < 0 || fchown(ready[1], (uid_t)u, (gid_t)g) < 0) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				       "cannot hand the readiness pipe to %s", moat_stack_name(s));
			goto out;
		}
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		helper(s, userns, netns, ready[1], as_root, parent);
	s->pid = pid;
	s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	close(ready[1]);
	ready[1] = -1;

	/* ready: pasta writes its pid, slirp4netns "1"; EOF means it died */
	int64_t deadline = mono_ms() + READY_TIMEOUT_MS;
	char c;
	ssize_t n = -1;
	for (;;) {
		int64_t left = deadline - mono_ms();
		if (left <= 0)
			break;
		struct pollfd pf = { .fd = ready[0], .events = POLLIN };
		int pr = poll(&pf, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		n = read(ready[0], &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	if (n == 1) {
		rc = 0;
		goto out;
	}
	kill(pid, SIGKILL);
	siginfo_t si;
	memset(&si, 0, sizeof si);
	while (waitid(P_PID, (id_t)pid, &si, WEXITED) < 0 && errno == EINTR)
		;
	s->pid = -1;
	const char *step = si.si_code == CLD_EXITED ? step_text(si.si_status) : NULL;
	if (n < 0)
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "%s did not configure the sandbox's network within %d ms",
			       moat_stack_name(s), READY_TIMEOUT_MS);
	else if (step)
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "cannot start %s: failed while %s", s->path, step);
	else
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "%s failed to attach to the sandbox's network namespace (%s %d)",
			       s->path, si.si_code == CLD_EXITED ? "exit status" : "signal",
			       si.si_status);
out:
	if (userns >= 0)
		close(userns);
	if (netns >= 0)
		close(netns);
	if (ready[0] >= 0)
		close(ready[0]);
	if (ready[1] >= 0)
		close(ready[1]);
	return rc;
}

void moat_stack_stop(struct moat_stack *s)
{
	if (s->pid > 0) {
		if (s->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
		else
			kill(s->pid, SIGKILL);
		siginfo_t si;
		while (waitid(P_PID, (id_t)s->pid, &si, WEXITED) < 0 && errno == EINTR)
			;
		s->pid = -1;
	}
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->devnull >= 0)
		close(s->devnull);
	s->pidfd = s->devnull = -1;
	free(s->argv);
	free(s->path);
	s->argv = NULL;
	s->path = NULL;
}
