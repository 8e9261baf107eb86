/* The lowest pieces of a run, below every other file of runner/: the
 * options' defaults, the SIGPIPE guard, killing and waiting for pid 1, the
 * run's timer, one more pump entry watched. The phases (prepare.c,
 * start.c, pump.c, collect.c, deliver.c, thrash.c, supervisor.c) call
 * down to them, so none of those calls back up into another (make
 * layers). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"

void moat_run_options_init(struct moat_run_options *opts)
{
	memset(opts, 0, sizeof *opts);
	opts->cancel_fd = -1;
	opts->hangup_fd = -1;
	opts->resume_fd = -1;
}

void sigpipe_block(struct sigpipe_guard *g)
{
	sigset_t pipe_set;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	g->set = pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old) == 0;
}

void sigpipe_restore(struct sigpipe_guard *g)
{
	if (!g->set)
		return;
	/* drop a SIGPIPE raised by our own writes before unblocking */
	sigset_t pipe_set;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	struct timespec zero = { 0, 0 };
	while (sigtimedwait(&pipe_set, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
	g->set = false;
}

void run_kill(struct run *r)
{
	if (r->pid <= 0)
		return;
	moat_close_fd(&r->sync_w); /* alone, this makes pid 1 exit at its next sync wait */
	syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
	run_wait_pid1(r, NULL);
	r->pid = -1;
}

void run_wait_pid1(struct run *r, siginfo_t *si)
{
	siginfo_t local;
	if (!si)
		si = &local;
	memset(si, 0, sizeof *si);
	if (r->origin != RUN_ADOPTED) {
		while (waitid(P_PIDFD, (id_t)r->pidfd, si, WEXITED | __WALL) < 0 && errno == EINTR)
			;
		return;
	}
	/* not our child: its maker reaps it; the pidfd turns readable once it
	 * has exited. SIGKILL was sent or it is ending: bounded all the same */
	struct pollfd pf = { .fd = r->pidfd, .events = POLLIN };
	int64_t until = moat_mono_ms() + RUN_ADOPT_EXIT_WAIT_MS;
	for (int64_t left; (left = until - moat_mono_ms()) > 0;) {
		int n = poll(&pf, 1, (int)left);
		if (n > 0 || (n < 0 && errno != EINTR))
			break;
	}
}

int run_arm_timer(struct run *r, uint64_t ms, struct moat_error *err)
{
	struct itimerspec it;
	memset(&it, 0, sizeof it);
	it.it_value.tv_sec = (time_t)(ms / 1000);
	it.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	if (ms == 0)
		it.it_value.tv_nsec = 1;
	if (timerfd_settime(r->timerfd, 0, &it, NULL) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot arm the run's timer (timerfd_settime: %s)",
				      strerror(errno));
	return 0;
}

int pump_watch_slot(struct run *r, enum pump_slot slot, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = &r->pump[slot] };
	return epoll_ctl(r->epfd, EPOLL_CTL_ADD, *r->pump[slot].fd, &ev);
}

/* ---- /proc/<pid>/stat, read for the host's view of a sandbox's tasks
 * (here and runner/freeze.c: one reader) ---- */

int run_proc_stat(pid_t pid, pid_t tid, struct run_proc_stat *st)
{
	char path[96], buf[1024];
	if (tid)
		snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
		snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) state ppid ...": comm may hold anything, ')' too (at
	 * most 15 bytes of it): the state follows the last ')'. Fields after
	 * it: state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime */
	char *rp = strrchr(buf, ')');
	int ppid;
	unsigned long long t[4];
	if (!rp || rp[1] != ' ' || !rp[2])
		return -1;
	st->state = rp[2];
	int got = sscanf(rp + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
			 &ppid, &t[0], &t[1], &t[2], &t[3]);
	if (got < 1)
		return -1;
	st->ppid = (pid_t)ppid;
	st->ticks = got == 5 ? t[0] + t[1] + t[2] + t[3] : 0;
	return 0;
}

/* ---- a session's interrupt (runner/session.c; here, below the pump that calls
 * it at a step's timeout) ---- */

/* /proc/<pid>/stat's parent pid (the host's view), -1 when unreadable. */
static pid_t proc_ppid(pid_t pid)
{
	struct run_proc_stat st;
	return run_proc_stat(pid, 0, &st) < 0 ? -1 : st.ppid;
}

/* Whether pid's innermost pid namespace number (status's NSpid, last) is 2. */
static bool proc_is_pid2(pid_t pid)
{
	char path[48];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char *line = NULL;
	size_t cap = 0;
	bool two = false;
	while (getline(&line, &cap, f) > 0)
		if (!strncmp(line, "NSpid:", 6)) {
			char *last = strrchr(line, '\t');
			two = last && !strcmp(last, "\t2\n");
			break;
		}
	free(line);
	fclose(f);
	return two;
}

/* A pidfd of the session's driver: the child of pid 1 that is pid 2 in
 * its namespace (the kernel has no children list here: /proc is
 * scanned). Checked again once the pidfd is open, so a pid reused in
 * between is never signalled (a driver gone since makes the signal fail).
 * -1 when not found. */
static int find_pid2(pid_t pid1)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int fd = -1;
	struct dirent *e;
	while (fd < 0 && (e = readdir(d))) {
		char *endp;
		long p = strtol(e->d_name, &endp, 10);
		if (*endp || p <= 0 || proc_ppid((pid_t)p) != pid1 || !proc_is_pid2((pid_t)p))
			continue;
		fd = (int)syscall(SYS_pidfd_open, (pid_t)p, 0);
		if (fd >= 0 && (proc_ppid((pid_t)p) != pid1 || !proc_is_pid2((pid_t)p)))
			moat_close_fd(&fd);
	}
	closedir(d);
	return fd;
}

bool run_session_sigint(struct run *r)
{
	if (r->session_pid2fd < 0)
		r->session_pid2fd = find_pid2(r->pid);
	return r->session_pid2fd >= 0 &&
	       syscall(SYS_pidfd_send_signal, r->session_pid2fd, SIGINT, NULL, 0) == 0;
}

bool run_session_interrupt(struct run *r, enum run_intr why)
{
	if (!r->session_stepping || !r->session_grace_ms || r->session_intr != RUN_INTR_NONE ||
	    r->exited || r->have_status)
		return false;
	/* the driver has not the whole frame yet: a SIGINT now would come
	 * before its step, so it is sent once the frame is out
	 * (runner/session.c); the grace runs from now all the same */
	if (r->session_out_off < r->session_out_len)
		r->session_intr_later = true;
	else if (!run_session_sigint(r))
		return false;
	struct moat_error ignored = { 0 };
	int rc = run_arm_timer(r, r->session_grace_ms, &ignored);
	moat_error_clear(&ignored);
	if (rc < 0)
		return false;
	r->session_intr = why;
	return true;
}
