/* what a test suite's process handling does: system(), popen, posix_spawn,
 * waitid, pidfds, nice, scheduler queries, ids set to the ones held */
#define _GNU_SOURCE
#include "wl.h"
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
const char *wl_prog = "t_procs";
int wl_failed;
extern char **environ;

static int popen_reads(void)
{
	char buf[64] = "";
	FILE *f = popen("echo hello", "r");
	if (!f)
		return 0;
	int ok = fgets(buf, sizeof buf, f) && strcmp(buf, "hello\n") == 0;
	return pclose(f) == 0 && ok;
}

static int spawn_waits(void)
{
	pid_t pid;
	char *argv[] = {"sh", "-c", "exit 7", NULL};
	int st;
	if (posix_spawnp(&pid, "sh", NULL, NULL, argv, environ) != 0)
		return 0;
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7;
}

static int waitid_reaps(void)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(3);
	siginfo_t si = {0};
	return pid > 0 && waitid(P_PID, pid, &si, WEXITED) == 0 && si.si_pid == pid &&
	       si.si_status == 3;
}

static int pidfd_waits(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		pause();
		_exit(0);
	}
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 0;
	}
	int sent = syscall(SYS_pidfd_send_signal, fd, SIGTERM, NULL, 0) == 0;
	siginfo_t si = {0};
	int waited = waitid(P_PIDFD, (id_t)fd, &si, WEXITED) == 0 && si.si_pid == pid;
	if (!waited)
		waitpid(pid, NULL, 0);
	close(fd);
	return sent && waited;
}

static int nice_raises(void)
{
	int before = getpriority(PRIO_PROCESS, 0);
	errno = 0;
	int r = nice(5);
	return !(r == -1 && errno) && getpriority(PRIO_PROCESS, 0) == before + 5;
}

static int same_ids(void)
{
	uid_t r, e, s;
	gid_t gr, ge, gs;
	return getresuid(&r, &e, &s) == 0 && getresgid(&gr, &ge, &gs) == 0 &&
	       setresgid(gr, ge, gs) == 0 && setresuid(r, e, s) == 0 && setgid(ge) == 0 &&
	       setuid(e) == 0;
}

int main(void)
{
	cpu_set_t set;
	struct sched_param sp;
	WL_CHECK("system", system("exit 0") == 0);
	WL_CHECK("popen", popen_reads());
	WL_CHECK("posix_spawn", spawn_waits());
	WL_CHECK("waitid", waitid_reaps());
	WL_CHECK("pidfd", pidfd_waits());
	WL_CHECK("sched_getaffinity", sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0);
	WL_CHECK("sched_setaffinity", sched_setaffinity(0, sizeof set, &set) == 0);
	WL_CHECK("sched_getscheduler", sched_getscheduler(0) == SCHED_OTHER);
	WL_CHECK("sched_getparam", sched_getparam(0, &sp) == 0);
	WL_CHECK("setresuid_same", same_ids());
	WL_CHECK("nice", nice_raises());
	return wl_failed;
}
