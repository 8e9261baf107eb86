/* The soak through the library, in one process: RUNS runs of the mix of
 * soak.c through moat_run from THREADS threads at once (each request
 * parsed from the same JSON as moat exec gets, each result rendered back to
 * JSON and checked like moat exec's).
 *
 *   libsoak --runs N [--threads T] [--label NAME]
 *
 * The runs go in two batches: a warm-up (a tenth, at least 40 runs: every
 * case of the mix, so that what a process keeps once, such as per-thread
 * malloc arenas, is there) and the rest. Before the first, between the
 * two and after the second it records its open fds, VmRSS and malloc's
 * bytes in use (mallinfo2, after malloc_trim). It fails on a failed run,
 * on an fd more (or fewer) than before, on heap in use that grew by more
 * than HEAP_SLACK over the second batch (what a leak of ~100 bytes a run
 * does over 10,000 runs), on a cgroup leaf of this process (moat-<pid>-*)
 * left, and on a child left to reap. Prints one line for soak.sh:
 *   SOAK label=.. runs=N failures=F wall=S leaves=L orphans=O fds=B/W/A
 *        rss=B/W/A heap=B/W/A mix=.. mem=.. pids=..     (rss, heap in KiB) */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moat.h"
#include "soak.h"

#define MAX_THREADS 64
#define HEAP_SLACK (1024L * 1024L)
#define SHOW_FAILURES 10

static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long shown;
static const char *label = "lib";
static int nthreads = 8;

struct worker {
	pthread_t thread;
	int index;
	unsigned long lo, hi; /* runs [lo, hi) with i % nthreads == index */
	unsigned long failures;
	struct soak_tally tally;
};

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	pthread_mutex_lock(&print_mu);
	if (++shown <= SHOW_FAILURES) {
		va_list ap;
		va_start(ap, fmt);
		fprintf(stderr, "libsoak %s: FAIL ", label);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
	pthread_mutex_unlock(&print_mu);
}

static void one_run(struct worker *w, unsigned long i)
{
	struct soak_case c;
	soak_case_of(i, &c);
	char *text = soak_request(i, &c);
	struct moat_request *req = NULL;
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	char *json = NULL;
	char why[1200];
	double t0 = soak_now();
	if (!text || moat_request_parse_json(text, strlen(text), &req, &err) < 0) {
		soak_check(i, &c, NULL, 0, why, sizeof why, &w->tally);
		report("run %lu (%s %s): the request does not parse: %s", i, soak_mode_name(c.mode),
		       c.lang, err.message ? err.message : "out of memory");
		w->failures++;
	} else if (moat_run(req, NULL, &res, &err) < 0) {
		soak_check(i, &c, NULL, 0, why, sizeof why, &w->tally);
		report("run %lu (%s %s): moat_run failed after %.2f s: %s: %s", i,
		       soak_mode_name(c.mode), c.lang, soak_now() - t0,
		       moat_error_type_name(err.type), err.message ? err.message : "");
		w->failures++;
	} else if (!(json = moat_result_to_json(res)) ||
		   !soak_check(i, &c, json, strlen(json), why, sizeof why, &w->tally)) {
		report("run %lu (%s %s, %.2f s): %s", i, soak_mode_name(c.mode), c.lang,
		       soak_now() - t0, json ? why : "the result does not render");
		w->failures++;
	}
	free(json);
	moat_result_free(res);
	moat_error_clear(&err);
	moat_request_free(req);
	free(text);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned long first = w->lo + ((unsigned long)w->index + nthreads - w->lo % nthreads) % nthreads;
	for (unsigned long i = first; i < w->hi; i += (unsigned long)nthreads)
		one_run(w, i);
	return NULL;
}

struct sample {
	int fds;
	long rss_kib;
	long heap_kib;
};

static void sample(struct sample *s)
{
	malloc_trim(0);
	struct mallinfo2 mi = mallinfo2();
	s->fds = soak_count_fds();
	s->rss_kib = soak_rss_kib();
	s->heap_kib = (long)((mi.uordblks + mi.hblkhd) / 1024);
}

/* Runs [lo, hi) from nthreads threads; adds up their failures and tallies. */
static unsigned long batch(unsigned long lo, unsigned long hi, struct soak_tally *tally)
{
	struct worker w[MAX_THREADS];
	memset(w, 0, sizeof w);
	for (int k = 0; k < nthreads; k++) {
		w[k].index = k;
		w[k].lo = lo;
		w[k].hi = hi;
		if (pthread_create(&w[k].thread, NULL, worker_main, &w[k]) != 0) {
			perror("libsoak: pthread_create");
			exit(2);
		}
	}
	unsigned long failures = 0;
	for (int k = 0; k < nthreads; k++) {
		pthread_join(w[k].thread, NULL);
		failures += w[k].failures;
		soak_tally_add(tally, &w[k].tally);
	}
	return failures;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runs", required_argument, NULL, 'n' }, { "threads", required_argument, NULL, 't' },
		{ "label", required_argument, NULL, 'l' }, { NULL, 0, NULL, 0 },
	};
	unsigned long runs = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n': runs = strtoul(optarg, NULL, 10); break;
		case 't': nthreads = atoi(optarg); break;
		case 'l': label = optarg; break;
		default: goto usage;
		}
	}
	if (!runs || nthreads < 1 || nthreads > MAX_THREADS || optind != argc)
		goto usage;
	if (soak_subreaper() < 0) {
		perror("libsoak: PR_SET_CHILD_SUBREAPER");
		return 2;
	}
	soak_leaf_dirs_init();
	unsigned long warm = runs / 10 > 40 ? runs / 10 : 40;
	if (warm > runs)
		warm = runs;

	struct sample before, mid, after;
	struct soak_tally tally;
	memset(&tally, 0, sizeof tally);
	sample(&before);
	double t0 = soak_now();
	unsigned long failures = batch(0, warm, &tally);
	char leaf[4400];
	int leaves = soak_count_leaves(getpid(), false, leaf, sizeof leaf);
	sample(&mid);
	fprintf(stderr, "libsoak %s: warm-up %lu runs, %lu failed, %.1f runs/s; fds %d -> %d, "
		"VmRSS %ld -> %ld KiB, heap in use %ld -> %ld KiB\n", label, warm, failures,
		(double)warm / (soak_now() - t0), before.fds, mid.fds, before.rss_kib, mid.rss_kib,
		before.heap_kib, mid.heap_kib);
	double t1 = soak_now();
	failures += batch(warm, runs, &tally);
	double wall = soak_now() - t0;
	if (runs > warm)
		fprintf(stderr, "libsoak %s: %lu/%lu runs, %lu failed, %.1f runs/s after the warm-up\n",
			label, runs, runs, failures, (double)(runs - warm) / (soak_now() - t1));
	leaves += soak_count_leaves(getpid(), false, leaf, sizeof leaf);
	if (leaves)
		report("%d cgroup leaves of this process left, e.g. %s", leaves, leaf);
	/* moat reaps its own pid 1s: nothing may be left to reap, nor running */
	unsigned long orphans = 0;
	int st;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
		orphans++;
		report("process %d was left to reap (status 0x%x)", (int)p, st);
	}
	pid_t kids[16];
	int nk = soak_children(kids, 16);
	if (nk > 0) {
		orphans += (unsigned long)nk;
		report("%d processes are left as children, e.g. %d", nk, (int)kids[0]);
	}
	sample(&after);
	bool fd_leak = after.fds != before.fds || mid.fds != before.fds;
	bool heap_leak = after.heap_kib - mid.heap_kib > HEAP_SLACK / 1024;
	if (fd_leak)
		report("fds: %d before, %d after the warm-up, %d after", before.fds, mid.fds, after.fds);
	if (heap_leak)
		report("heap in use grew by %ld KiB over %lu runs after the warm-up",
		       after.heap_kib - mid.heap_kib, runs - warm);
	char mix[512];
	soak_tally_format(&tally, mix, sizeof mix);
	printf("SOAK label=%s runs=%lu failures=%lu wall=%.2f leaves=%d orphans=%lu fds=%d/%d/%d "
	       "rss=%ld/%ld/%ld heap=%ld/%ld/%ld %s\n", label, runs, failures, wall, leaves, orphans,
	       before.fds, mid.fds, after.fds, before.rss_kib, mid.rss_kib, after.rss_kib,
	       before.heap_kib, mid.heap_kib, after.heap_kib, mix);
	fflush(stdout);
	return failures || leaves || orphans || fd_leak || heap_leak ? 1 : 0;
usage:
	fprintf(stderr, "usage: libsoak --runs N [--threads T] [--label NAME]\n");
	return 2;
}
