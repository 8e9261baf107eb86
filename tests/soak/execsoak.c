/* The soak through the CLI: RUNS runs of `moat exec` (JSON request on
 * stdin, JSON result on stdout), JOBS at a time, the mix of soak.c.
 *
 *   execsoak --moat BIN --runs N [--jobs J] [--first I] [--label NAME]
 *   execsoak --subreaper CMD [ARG]...      exec CMD as a child subreaper
 *
 * Each run must end with moat's exit status 0 and a result that passes
 * soak_check. After each run: no cgroup leaf of that moat process
 * (moat-<pid>-*, its supervisor leaf included) may remain, and no process
 * may have been orphaned to us (this driver is a child subreaper, so a
 * sandbox process that outlived its moat would become our child). A moat
 * that has not ended after WATCHDOG_S is killed and counted as failed.
 * Prints one line for tests/soak/soak.sh:
 *   SOAK label=.. runs=N failures=F wall=S leaves=L orphans=O mix=.. mem=.. pids=..
 * and, on stderr, progress every tenth and the first failures in full. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soak.h"

#define MAX_JOBS 64
#define WATCHDOG_S 120.0
#define SHOW_FAILURES 10
#define OUT_CAP (16u << 20)

extern char **environ;

struct job {
	pid_t pid; /* 0: slot free */
	unsigned long run;
	struct soak_case c;
	int out, err;
	char *obuf, *ebuf;
	size_t olen, ocap, elen, ecap;
	double t0;
	bool reaped;
	int status;
};

static const char *moat_bin;
static const char *label = "exec";
static struct job jobs[MAX_JOBS];
static int njobs = 1;
static unsigned long failures, orphans, leaves_left, shown;
static struct soak_tally tally;

/* Says what went wrong, in full for the first SHOW_FAILURES. */
static void failure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failure(const char *fmt, ...)
{
	if (++shown > SHOW_FAILURES)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "execsoak %s: FAIL ", label);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = *cap ? *cap * 2 : 4096;
		while (nc < *len + n + 1)
			nc *= 2;
		if (nc > OUT_CAP)
			return -1;
		char *nb = realloc(*buf, nc);
		if (!nb)
			return -1;
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

static int start_job(struct job *j, unsigned long run)
{
	memset(j, 0, sizeof *j);
	j->run = run;
	j->out = j->err = -1;
	soak_case_of(run, &j->c);
	char *req = soak_request(run, &j->c);
	int in_p[2], out_p[2], err_p[2];
	if (!req || pipe2(in_p, O_CLOEXEC) < 0)
		goto oom;
	if (pipe2(out_p, O_CLOEXEC) < 0) {
		close(in_p[0]);
		close(in_p[1]);
		goto oom;
	}
	if (pipe2(err_p, O_CLOEXEC) < 0) {
		close(in_p[0]);
		close(in_p[1]);
		close(out_p[0]);
		close(out_p[1]);
		goto oom;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("execsoak: fork");
		exit(2);
	}
	if (pid == 0) {
		dup2(in_p[0], 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		signal(SIGPIPE, SIG_DFL);
		char *argv[] = { (char *)"moat", (char *)"exec", NULL };
		execve(moat_bin, argv, environ);
		perror("execsoak: execve moat");
		_exit(127);
	}
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	/* a request is far smaller than a pipe: one write, never blocking long */
	size_t len = strlen(req), off = 0;
	while (off < len) {
		ssize_t n = write(in_p[1], req + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* moat went away without reading: its result says why */
		off += (size_t)n;
	}
	close(in_p[1]);
	free(req);
	j->pid = pid;
	j->out = out_p[0];
	j->err = err_p[0];
	j->t0 = soak_now();
	return 0;
oom:
	free(req);
	perror("execsoak: cannot start a run");
	exit(2);
}

static struct job *job_of(pid_t pid)
{
	for (int k = 0; k < njobs; k++)
		if (jobs[k].pid == pid)
			return &jobs[k];
	return NULL;
}

/* Reaps whatever has ended: our runs' moats (kept for finish_job) and any
 * other process, which can only be an orphan reparented to us. */
static void reap_others(unsigned long run)
{
	int st;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
		struct job *j = job_of(p);
		if (j) {
			j->reaped = true;
			j->status = st;
			continue;
		}
		orphans++;
		failure("run %lu: process %d was orphaned to the soak (it outlived its moat) and "
			"ended with status 0x%x", run, (int)p, st);
	}
}

static void finish_job(struct job *j)
{
	if (!j->reaped) {
		while (waitpid(j->pid, &j->status, __WALL) < 0 && errno == EINTR)
			;
		j->reaped = true;
	}
	double took = soak_now() - j->t0;
	char why[1200];
	int st = j->status;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	bool ok;
	if (code != 0) {
		ok = false;
		soak_check(j->run, &j->c, NULL, 0, why, sizeof why, &tally); /* counts it */
		failure("run %lu (%s %s): moat exited %d after %.2f s; stdout %.400s; stderr %.400s",
			j->run, soak_mode_name(j->c.mode), j->c.lang, code, took,
			j->obuf ? j->obuf : "", j->ebuf ? j->ebuf : "");
	} else {
		ok = soak_check(j->run, &j->c, j->obuf, j->olen, why, sizeof why, &tally);
		if (!ok)
			failure("run %lu (%s %s, %.2f s): %s; stderr %.300s", j->run,
				soak_mode_name(j->c.mode), j->c.lang, took, why, j->ebuf ? j->ebuf : "");
	}
	char leaf[4400];
	int left = soak_count_leaves(j->pid, true, leaf, sizeof leaf);
	if (left > 0) {
		leaves_left += (unsigned long)left;
		failure("run %lu: %d cgroup leaves of moat %d left, e.g. %s", j->run, left,
			(int)j->pid, leaf);
		ok = false;
	}
	if (!ok)
		failures++;
	free(j->obuf);
	free(j->ebuf);
	unsigned long run = j->run;
	memset(j, 0, sizeof *j);
	j->out = j->err = -1;
	reap_others(run);
	/* an orphan still running: a child of ours that is not a run's moat */
	pid_t kids[MAX_JOBS + 16];
	int n = soak_children(kids, MAX_JOBS + 16);
	for (int k = 0; k < n && k < MAX_JOBS + 16; k++)
		if (!job_of(kids[k])) {
			orphans++;
			failure("after run %lu: process %d was orphaned to the soak and still runs",
				run, (int)kids[k]);
			/* counted once: it is ours to end */
			kill(kids[k], SIGKILL);
		}
}

static void usage(void)
{
	fprintf(stderr, "usage: execsoak --moat BIN --runs N [--jobs J] [--first I] [--label NAME]\n"
			"       execsoak --subreaper CMD [ARG]...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "--subreaper")) {
		if (soak_subreaper() < 0) {
			perror("execsoak: PR_SET_CHILD_SUBREAPER");
			return 2;
		}
		execvp(argv[2], argv + 2);
		perror("execsoak: exec");
		return 127;
	}
	static const struct option opts[] = {
		{ "moat", required_argument, NULL, 'm' }, { "runs", required_argument, NULL, 'n' },
		{ "jobs", required_argument, NULL, 'j' }, { "first", required_argument, NULL, 'f' },
		{ "label", required_argument, NULL, 'l' }, { NULL, 0, NULL, 0 },
	};
	unsigned long runs = 0, first = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': moat_bin = optarg; break;
		case 'n': runs = strtoul(optarg, NULL, 10); break;
		case 'j': njobs = atoi(optarg); break;
		case 'f': first = strtoul(optarg, NULL, 10); break;
		case 'l': label = optarg; break;
		default: usage();
		}
	}
	if (!moat_bin || !runs || njobs < 1 || njobs > MAX_JOBS || optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (soak_subreaper() < 0) {
		perror("execsoak: PR_SET_CHILD_SUBREAPER");
		return 2;
	}
	soak_leaf_dirs_init();
	for (int k = 0; k < MAX_JOBS; k++)
		jobs[k].out = jobs[k].err = -1;

	unsigned long next = 0, done = 0, step = runs >= 10 ? runs / 10 : 1;
	double t0 = soak_now();
	while (done < runs) {
		for (int k = 0; k < njobs && next < runs; k++)
			if (!jobs[k].pid)
				start_job(&jobs[k], first + next++);
		struct pollfd pf[2 * MAX_JOBS];
		int map[2 * MAX_JOBS], np = 0;
		for (int k = 0; k < njobs; k++) {
			if (!jobs[k].pid)
				continue;
			if (jobs[k].out >= 0) {
				pf[np] = (struct pollfd){ jobs[k].out, POLLIN, 0 };
				map[np++] = 2 * k;
			}
			if (jobs[k].err >= 0) {
				pf[np] = (struct pollfd){ jobs[k].err, POLLIN, 0 };
				map[np++] = 2 * k + 1;
			}
		}
		if (np > 0 && poll(pf, (nfds_t)np, 1000) < 0 && errno != EINTR) {
			perror("execsoak: poll");
			return 2;
		}
		char buf[65536];
		for (int q = 0; q < np; q++) {
			if (!(pf[q].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			struct job *j = &jobs[map[q] / 2];
			bool is_err = map[q] % 2;
			int *fd = is_err ? &j->err : &j->out;
			ssize_t n = read(*fd, buf, sizeof buf);
			if (n > 0) {
				if ((is_err ? append(&j->ebuf, &j->elen, &j->ecap, buf, (size_t)n)
					    : append(&j->obuf, &j->olen, &j->ocap, buf, (size_t)n)) < 0) {
					fprintf(stderr, "execsoak: run %lu printed more than %u bytes\n",
						j->run, OUT_CAP);
					kill(j->pid, SIGKILL);
				}
			} else if (n == 0 || errno != EINTR) {
				close(*fd);
				*fd = -1;
			}
		}
		for (int k = 0; k < njobs; k++) {
			struct job *j = &jobs[k];
			if (!j->pid)
				continue;
			if (j->out < 0 && j->err < 0) {
				finish_job(j);
				if (++done % step == 0 || done == runs)
					fprintf(stderr, "execsoak %s: %lu/%lu runs, %lu failed, %.1f runs/s\n",
						label, done, runs, failures, (double)done / (soak_now() - t0));
			} else if (soak_now() - j->t0 > WATCHDOG_S) {
				fprintf(stderr, "execsoak %s: run %lu has not ended after %.0f s: killing moat %d\n",
					label, j->run, WATCHDOG_S, (int)j->pid);
				kill(j->pid, SIGKILL); /* its pipes close; the run fails */
				j->t0 = soak_now() + 1e9;
			}
		}
	}
	double wall = soak_now() - t0;
	/* what the runs left to reap, given a moment to end */
	for (int w = 0; w < 20; w++) {
		reap_others(first + runs - 1);
		pid_t kids[16];
		if (soak_children(kids, 16) == 0)
			break;
		usleep(100 * 1000);
	}
	pid_t kids[16];
	int n = soak_children(kids, 16);
	if (n > 0) {
		orphans += (unsigned long)n;
		failure("%d processes are left as children of the soak, e.g. %d", n, (int)kids[0]);
	}
	char mix[512];
	soak_tally_format(&tally, mix, sizeof mix);
	printf("SOAK label=%s runs=%lu failures=%lu wall=%.2f leaves=%lu orphans=%lu %s\n", label,
	       runs, failures, wall, leaves_left, orphans, mix);
	fflush(stdout);
	return failures || orphans ? 1 : 0;
}
