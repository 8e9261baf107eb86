/* Freezing a sandbox between requests and reading its CPU time without a
 * cgroup (runner/sandbox.h: run_sandbox_freeze, run_sandbox_cpu_ms;
 * docs/SESSIONS.md, "Pause and resume"). The sandbox's processes are the
 * tasks of its pid namespace, found by the host's /proc: every task whose
 * /proc/<pid>/ns/pid is pid 1's (the sandbox's filter refuses unshare and
 * clone's namespace flags, so no task of it is in a namespace below).
 *
 * Freeze: SIGSTOP to every process of the namespace that has a thread not
 * stopped, pass after pass, until two passes in a row find the same tasks
 * and every thread of them stopped. Complete because (1) a task with a
 * SIGSTOP pending cannot finish a fork or clone (copy_process aborts on a
 * pending signal), so once every process seen was stopped nothing new
 * comes of it; (2) a task alive through a whole pass is seen by that pass;
 * (3) a task made during pass k by one not stopped yet is alive through
 * pass k+1, which then differs from pass k or sees it running; and a
 * SIGCONT from inside needs a task running, which (2) and (3) find. Only
 * SIGKILL and SIGSTOP reach a pid namespace's init from outside, and both
 * do; a stopped task keeps its memory. Thaw: SIGCONT to each. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"
#include "runner/sandbox.h"

struct moat_sandbox {
	struct run run;
};

#define FREEZE_MAX_PASSES 2000

/* The pid namespace of pid (its nsfs inode): 0, or -1 (gone, or not ours
 * to look at). */
static int ns_of(pid_t pid, dev_t *dev, ino_t *ino)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/ns/pid", (int)pid);
	struct stat st;
	if (stat(p, &st) < 0)
		return -1;
	*dev = st.st_dev;
	*ino = st.st_ino;
	return 0;
}

/* Reads a small /proc file whole into buf (NUL-terminated): its length,
 * or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n;
	do
		n = read(fd, buf, size - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* The state letter of /proc/<pid>/task/<tid>/stat (or /proc/<pid>/stat
 * with tid 0) and, when times is set, utime+stime+cutime+cstime in clock
 * ticks: the letter, or 0 when gone. */
static char task_stat(pid_t pid, pid_t tid, unsigned long long *times)
{
	char p[96], buf[1024];
	if (tid)
		snprintf(p, sizeof p, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
		snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	if (read_small(p, buf, sizeof buf) <= 0)
		return 0;
	/* comm may hold anything, ')' too: the state follows the last ')' */
	char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || !rp[2])
		return 0;
	if (times) {
		/* fields 3.. after ')': state ppid pgrp session tty tpgid flags
		 * minflt cminflt majflt cmajflt utime stime cutime cstime */
		unsigned long long v[4];
		if (sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
			   &v[0], &v[1], &v[2], &v[3]) == 4)
			*times = v[0] + v[1] + v[2] + v[3];
		else
			*times = 0;
	}
	return rp[2];
}

static bool stopped_letter(char c)
{
	return c == 'T' || c == 'Z' || c == 'X' || c == 0;
}

/* Every thread of pid stopped (or gone)? */
static bool all_threads_stopped(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
	DIR *d = opendir(p);
	if (!d)
		return true; /* gone */
	bool all = true;
	struct dirent *e;
	while (all && (e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]))
			all = stopped_letter(task_stat(pid, (pid_t)atoi(e->d_name), NULL));
	closedir(d);
	return all;
}

/* Each process of the namespace (dev, ino): fn(pid, ctx). -1 when /proc
 * cannot be read. */
static int each_process(dev_t dev, ino_t ino, void (*fn)(pid_t, void *), void *ctx)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid_t pid = (pid_t)atoi(e->d_name);
		dev_t pd;
		ino_t pi;
		if (ns_of(pid, &pd, &pi) == 0 && pd == dev && pi == ino)
			fn(pid, ctx);
	}
	closedir(d);
	return 0;
}

struct stop_pass {
	bool freeze;
	bool sent;           /* a process was signalled (found running) */
	uint64_t sum;        /* the pids seen, summed and mixed: a pass's set */
	unsigned count;
	unsigned long long ticks;
};

static void stop_one(pid_t pid, void *ctx)
{
	struct stop_pass *sp = ctx;
	sp->count++;
	sp->sum += (uint64_t)pid * 0x9e3779b97f4a7c15ull ^ (uint64_t)pid;
	if (!sp->freeze) {
		kill(pid, SIGCONT);
		return;
	}
	if (!all_threads_stopped(pid)) {
		kill(pid, SIGSTOP);
		sp->sent = true;
	}
}

int run_sandbox_freeze(struct moat_sandbox *sb, bool frozen, struct moat_error *err)
{
	struct run *r = &sb->run;
	if (r->pid <= 0 || r->exited)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the sandbox has ended");
	dev_t dev;
	ino_t ino;
	if (ns_of(r->pid, &dev, &ino) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot find the sandbox's processes: %s", strerror(errno));
	if (!frozen) {
		/* nothing of a stopped tree forks: one pass finds every task */
		struct stop_pass sp = { .freeze = false };
		if (each_process(dev, ino, stop_one, &sp) < 0)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
					      "cannot read /proc: %s", strerror(errno));
		return 0;
	}
	uint64_t last_sum = 0;
	unsigned last_count = 0;
	bool last_clean = false;
	for (int pass = 0; pass < FREEZE_MAX_PASSES; pass++) {
		struct stop_pass sp = { .freeze = true };
		if (each_process(dev, ino, stop_one, &sp) < 0)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
					      "cannot read /proc: %s", strerror(errno));
		bool clean = !sp.sent;
		if (clean && last_clean && sp.sum == last_sum && sp.count == last_count)
			return 0;
		last_clean = clean;
		last_sum = sp.sum;
		last_count = sp.count;
		if (!clean) /* the stops take effect */
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			      "the sandbox's processes did not all stop");
}

static void sum_one(pid_t pid, void *ctx)
{
	struct stop_pass *sp = ctx;
	unsigned long long t = 0;
	if (task_stat(pid, 0, &t))
		sp->ticks += t;
}

int64_t run_sandbox_cpu_ms(const struct moat_sandbox *sb)
{
	const struct run *r = &sb->run;
	int64_t cg = moat_cgroup_cpu_ms(r->cg);
	if (cg >= 0 || r->pid <= 0 || r->exited)
		return cg;
	dev_t dev;
	ino_t ino;
	if (ns_of(r->pid, &dev, &ino) < 0)
		return -1;
	struct stop_pass sp = { 0 };
	if (each_process(dev, ino, sum_one, &sp) < 0)
		return -1;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	return (int64_t)(sp.ticks * 1000ull / (unsigned long long)hz);
}

bool run_sandbox_cpu_bounded(const struct moat_sandbox *sb)
{
	const struct moat_result *p = sb->run.session_proto ? sb->run.session_proto : sb->run.res;
	return p && p->limit_cpu && strcmp(p->limit_cpu, "none") != 0;
}
