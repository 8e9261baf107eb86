/* The lowest pieces of a run, below every other file of runner/: the
 * options' defaults, the SIGPIPE guard, killing and waiting for pid 1, the
 * run's timer, one more pump entry watched. The phases (prepare.c,
 * start.c, pump.c, collect.c, deliver.c, thrash.c, supervisor.c) call
 * down to them, so none of those calls back up into another (make
 * layers). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
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
