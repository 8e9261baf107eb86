/* signal waits and queries, interval timers */
#define _GNU_SOURCE
#include "wl.h"
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
const char *wl_prog = "t_signals";
int wl_failed;
static volatile sig_atomic_t got;

static void on_alarm(int sig)
{
	(void)sig;
	got = 1;
}

static int pause_waits(void)
{
	struct sigaction sa = {.sa_handler = on_alarm};
	struct itimerval it = {.it_value = {0, 50000}};
	struct timespec t0, t1;
	sigaction(SIGALRM, &sa, NULL);
	got = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (setitimer(ITIMER_REAL, &it, NULL) != 0)
		return 0;
	int r = pause();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	/* a refused pause returns at once with EPERM; a real one, on the signal */
	return r == -1 && errno == EINTR && got && dt > 0.02;
}

int main(void)
{
	sigset_t set, pend;
	siginfo_t si;
	struct timespec ts = {1, 0};
	struct itimerval it = {.it_value = {5, 0}}, cur;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	raise(SIGUSR1);
	WL_CHECK("sigpending", sigpending(&pend) == 0 && sigismember(&pend, SIGUSR1));
	WL_CHECK("sigtimedwait", sigtimedwait(&set, &si, &ts) == SIGUSR1 && si.si_signo == SIGUSR1);
	raise(SIGUSR1);
	WL_CHECK("sigwaitinfo", sigwaitinfo(&set, &si) == SIGUSR1);
	int sig = 0;
	raise(SIGUSR1);
	WL_CHECK("sigwait", sigwait(&set, &sig) == 0 && sig == SIGUSR1);
	WL_CHECK("setitimer", setitimer(ITIMER_VIRTUAL, &it, NULL) == 0);
	WL_CHECK("getitimer", getitimer(ITIMER_VIRTUAL, &cur) == 0 && cur.it_value.tv_sec <= 5 &&
				      (cur.it_value.tv_sec > 0 || cur.it_value.tv_usec > 0));
	it.it_value.tv_sec = 0;
	setitimer(ITIMER_VIRTUAL, &it, NULL);
	WL_CHECK("pause", pause_waits());
	return wl_failed;
}
