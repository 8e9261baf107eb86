/* What moving a run into its cgroup v1 leaves costs on this host (moat
 * doctor). A write to a v1 cgroup.procs takes the kernel's
 * cgroup_threadgroup_rwsem for writing; in its default mode that waits for an
 * RCU grace period whenever no other writer came within the last one, so a
 * run started after a quiet gap (an agent's tool call, a CI step) waits for
 * one (measured here: 13-18 ms median at load 44, 4 ms and more at low
 * load), where runs back to back share it. favordynmods on a cgroup mount
 * keeps that lock in the mode whose writers do not wait (kernel 6.2+; from
 * 6.18 it switches to a lock per thread group, for good until reboot).
 * cgroup v2 runs are born in their leaf (CLONE_INTO_CGROUP) and pay no move. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroups/backend.h"

static bool mounted_favordynmods(void)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	if (!f)
		return false;
	char *line = NULL;
	size_t cap = 0;
	bool yes = false;
	while (!yes && getline(&line, &cap, f) > 0) {
		char dev[8], dir[4096], type[16], opts[4096];
		if (sscanf(line, "%7s %4095s %15s %4095s", dev, dir, type, opts) == 4 &&
		    (!strcmp(type, "cgroup") || !strcmp(type, "cgroup2")))
			for (char *save = NULL, *o = strtok_r(opts, ",", &save); o;
			     o = strtok_r(NULL, ",", &save))
				if (!strcmp(o, "favordynmods"))
					yes = true;
	}
	free(line);
	fclose(f);
	return yes;
}

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int moat_cgroup_v1_join_cost(struct moat_cgroup *cg, struct moat_result *res, int samples,
			     int gap_ms, double *median_ms, bool *favordynmods, struct moat_error *err)
{
	*favordynmods = mounted_favordynmods();
	*median_ms = -1;
	bool v1 = false;
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		v1 = v1 || cg->v1_leaf[i];
	if (!v1)
		return 1;
	if (samples < 1 || samples > 15)
		samples = 3;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		close(p[1]);
		_exit(read(p[0], &c, 1) < 0);
	}
	close(p[0]);
	if (pid < 0) {
		close(p[1]);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "fork: %s", strerror(errno));
	}
	double ms[15];
	int rc = 0;
	for (int i = 0; i < samples && rc == 0; i++) {
		/* a quiet gap first: no other writer within the last grace period */
		struct timespec gap = { gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L };
		nanosleep(&gap, NULL);
		double t0 = mono_ms();
		rc = moat_cgroup_attach(cg, pid, res, err);
		ms[i] = mono_ms() - t0;
	}
	close(p[1]);
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (rc < 0)
		return -1;
	qsort(ms, (size_t)samples, sizeof ms[0], cmp_double);
	*median_ms = ms[samples / 2];
	return 0;
}
