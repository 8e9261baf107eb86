/* Freezing a sandbox between requests and reading its CPU time without a
 * cgroup (runner/sandbox.h: run_sandbox_freeze, run_sandbox_cpu_ms;
 * docs/SESSIONS.md, "Pause and resume"). The sandbox's processes are pid
 * 1 and its descendants, found by the host's /proc (each process's parent
 * in /proc/<pid>/stat, which anyone may read: pid 1 is not dumpable and a
 * process of the sandbox may make itself so, which would hide its
 * /proc/<pid>/ns from a rootless service). Inside a pid namespace every
 * orphan is reparented to a task of it (its init or a subreaper below),
 * so the descendants of pid 1 are the namespace's tasks; the sandbox's
 * filter refuses setns, so nothing joins it from outside but the host.
 *
 * Freeze: SIGSTOP to every such process that has a thread not stopped,
 * pass after pass, until two passes in a row find the same processes and
 * every thread of them stopped (or, signalled, in an uninterruptible
 * wait in the kernel: it stops on its way out, before any instruction of
 * its own). Complete because (1) a task with a
 * SIGSTOP pending cannot finish a fork or clone (copy_process aborts on a
 * pending signal), so nothing new comes of a process once it is stopped;
 * (2) a task alive through a whole pass is seen by that pass; (3) a task
 * made during pass k by one not stopped yet is alive through pass k+1,
 * which then differs from pass k or sees it running; and a SIGCONT from
 * inside needs a task running, which (2) and (3) find. Only SIGKILL and
 * SIGSTOP reach a pid namespace's init from outside, and both do; a
 * stopped task keeps its memory and uses no CPU. Thaw: SIGCONT to each
 * process the freeze's last pass found (kept in the run: no second walk
 * of /proc), or, with none kept, to each found by one walk. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"
#include "runner/sandbox.h"

struct moat_sandbox {
	struct run run;
};

/* how long a freeze may take before it is given up (the caller then kills
 * the sandbox): stops take effect within a scheduling slice, even loaded */
#define FREEZE_MAX_MS 10000

/* The state letter of a task (tid 0: the process), 0 when gone. */
static char task_state(pid_t pid, pid_t tid)
{
	struct run_proc_stat st;
	return run_proc_stat(pid, tid, &st) < 0 ? 0 : st.state;
}

enum thread_state { ALL_STOPPED, IN_KERNEL, RUNNING };

/* The threads of pid: all stopped (or gone); none running but some in an
 * uninterruptible wait ('D', e.g. a vfork's parent whose child we
 * stopped before its exec: it waits until we thaw) or a tracing stop;
 * or one running. A thread in the kernel that was sent SIGSTOP stops
 * before it runs a user instruction again, so it counts as frozen once
 * signalled (the caller signals it on every pass). */
static enum thread_state threads_of(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
	DIR *d = opendir(p);
	if (!d)
		return ALL_STOPPED; /* gone */
	enum thread_state st = ALL_STOPPED;
	struct dirent *e;
	while (st != RUNNING && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char c = task_state(pid, (pid_t)atoi(e->d_name));
		if (c == 'D' || c == 't')
			st = IN_KERNEL;
		else if (c != 'T' && c != 'Z' && c != 'X' && c != 0)
			st = RUNNING;
	}
	closedir(d);
	return st;
}

struct proc_ent {
	pid_t pid, ppid;
	unsigned long long ticks;
	bool in; /* pid 1 or a descendant */
};

/* Every process of the host (pid, parent, CPU ticks) in pid order, and
 * which of them are root and its descendants: 0 with *out (malloc'd) and
 * *n, or -1. */
static int tree_of(pid_t root, struct proc_ent **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	struct proc_ent *v = NULL;
	size_t len = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid_t pid = (pid_t)atoi(e->d_name);
		struct run_proc_stat st;
		if (run_proc_stat(pid, 0, &st) < 0)
			continue;
		if (len == cap) {
			size_t nc = cap ? cap * 2 : 512;
			struct proc_ent *nv = realloc(v, nc * sizeof *nv);
			if (!nv) {
				free(v);
				closedir(d);
				errno = ENOMEM;
				return -1;
			}
			v = nv;
			cap = nc;
		}
		v[len++] = (struct proc_ent){ pid, st.ppid, st.ticks, pid == root };
	}
	closedir(d);
	/* descendants: a parent in the set puts its child in, until none
	 * more (as many rounds as the tree is deep) */
	for (bool more = true; more;) {
		more = false;
		for (size_t i = 0; i < len; i++) {
			if (v[i].in)
				continue;
			for (size_t j = 0; j < len; j++)
				if (v[j].in && v[j].pid == v[i].ppid) {
					v[i].in = more = true;
					break;
				}
		}
	}
	*out = v;
	*n = len;
	return 0;
}

/* The parent of pid now (its /proc stat), or -1 when gone. */
static pid_t parent_of(pid_t pid)
{
	struct run_proc_stat st;
	return run_proc_stat(pid, 0, &st) < 0 ? -1 : st.ppid;
}

/* sig to the process v[i] of the tree, never to another that took its pid
 * since the snapshot: a pidfd is opened first, then its parent is read
 * again and must be in the tree; the signal goes through the pidfd, so
 * it reaches that process or none (one that died since: ESRCH). pid 1
 * through the run's own pidfd. */
static void signal_member(const struct run *r, const struct proc_ent *v, size_t n, size_t i,
			  int sig)
{
	if (v[i].pid == r->pid && r->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, r->pidfd, sig, NULL, 0);
		return;
	}
	int fd = (int)syscall(SYS_pidfd_open, v[i].pid, 0);
	if (fd < 0)
		return; /* gone */
	pid_t pp = parent_of(v[i].pid);
	bool in = false;
	for (size_t j = 0; j < n && !in; j++)
		in = v[j].in && v[j].pid == pp;
	if (in)
		syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
	close(fd);
}

/* The thaw of a tree a freeze stopped: SIGCONT to each process it found
 * (r->frozen), pid 1 through the run's pidfd and any other through a
 * pidfd opened first, then its parent read again, which must be one of
 * the tree's (or gone: reparented to pid 1), as signal_member does: a
 * member that died since (only SIGKILL reaches a stopped process) and
 * whose pid another process took is never signalled. Nothing of a
 * stopped tree forks, so the set is the whole tree: no walk of the
 * host's /proc, whose cost grows with every process of the host. */
static void thaw_frozen(struct run *r)
{
	for (size_t i = 0; i < r->nfrozen; i++) {
		pid_t pid = r->frozen[i];
		if (pid == r->pid && r->pidfd >= 0) {
			syscall(SYS_pidfd_send_signal, r->pidfd, SIGCONT, NULL, 0);
			continue;
		}
		int fd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (fd < 0)
			continue; /* gone */
		pid_t pp = parent_of(pid);
		bool in = false;
		for (size_t j = 0; j < r->nfrozen && !in; j++)
			in = r->frozen[j] == pp;
		if (in)
			syscall(SYS_pidfd_send_signal, fd, SIGCONT, NULL, 0);
		close(fd);
	}
	free(r->frozen);
	r->frozen = NULL;
	r->nfrozen = 0;
}

/* Keeps the members of v (the last pass of a complete freeze) for the thaw:
 * 0, or -1 when out of memory (the thaw then walks /proc). */
static int keep_frozen(struct run *r, const struct proc_ent *v, size_t n, size_t count)
{
	free(r->frozen);
	r->nfrozen = 0;
	r->frozen = malloc((count ? count : 1) * sizeof *r->frozen);
	if (!r->frozen)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (v[i].in)
			r->frozen[r->nfrozen++] = v[i].pid;
	return 0;
}

int run_sandbox_freeze(struct moat_sandbox *sb, bool frozen, struct moat_error *err)
{
	struct run *r = &sb->run;
	if (r->pid <= 0 || r->exited)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ESRCH, "the sandbox has ended");
	if (!frozen && r->frozen) {
		thaw_frozen(r);
		return 0;
	}
	free(r->frozen); /* a freeze finds the tree anew */
	r->frozen = NULL;
	r->nfrozen = 0;
	uint64_t last_sum = 0;
	size_t last_count = 0;
	bool last_clean = false;
	int64_t until = moat_mono_ms() + FREEZE_MAX_MS;
	while (moat_mono_ms() < until) {
		struct proc_ent *v;
		size_t n;
		if (tree_of(r->pid, &v, &n) < 0)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
					      "cannot read the sandbox's processes in /proc: %s",
					      strerror(errno));
		bool sent = false;
		uint64_t sum = 0;
		size_t count = 0;
		for (size_t i = 0; i < n; i++) {
			if (!v[i].in)
				continue;
			count++;
			sum += (uint64_t)v[i].pid * 0x9e3779b97f4a7c15ull;
			if (!frozen)
				signal_member(r, v, n, i, SIGCONT);
			else {
				enum thread_state st = threads_of(v[i].pid);
				if (st != ALL_STOPPED)
					signal_member(r, v, n, i, SIGSTOP);
				sent |= st == RUNNING;
			}
		}
		if (!count) {
			free(v);
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ESRCH, "the sandbox has ended");
		}
		/* thawed: nothing of a stopped tree forks, one pass finds all */
		if (!frozen) {
			free(v);
			return 0;
		}
		bool clean = !sent;
		if (clean && last_clean && sum == last_sum && count == last_count) {
			keep_frozen(r, v, n, count);
			free(v);
			return 0;
		}
		free(v);
		last_clean = clean;
		last_sum = sum;
		last_count = count;
		if (!clean) /* the stops take effect */
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			      "the sandbox's processes did not all stop");
}

int64_t run_sandbox_cpu_ms(const struct moat_sandbox *sb)
{
	const struct run *r = &sb->run;
	int64_t cg = moat_cgroup_cpu_ms(r->cg);
	if (cg >= 0 || r->pid <= 0 || r->exited)
		return cg;
	struct proc_ent *v;
	size_t n;
	if (tree_of(r->pid, &v, &n) < 0)
		return -1;
	unsigned long long ticks = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i].in)
			ticks += v[i].ticks;
	free(v);
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	return (int64_t)(ticks * 1000ull / (unsigned long long)hz);
}

bool run_sandbox_cpu_bounded(const struct moat_sandbox *sb)
{
	const struct moat_result *p = sb->run.session_proto ? sb->run.session_proto : sb->run.res;
	return p && p->limit_cpu && strcmp(p->limit_cpu, "none") != 0;
}
