/* moat benchmark driver: start-up latency (interleaved), launcher peak memory and
 * concurrent throughput of the same programs under several runners.
 *
 *   driver [-n N] [-w WARMUP] [-m MEMRUNS] [-t SECONDS] [-k 1,2,8] [-s SEED] [-C DIR]
 *          [-o PREFIX] CASES
 *
 * CASES is a tab-separated file written by bench/run.sh:
 *   @env   NAME=VALUE            environment of every run (nothing else is passed)
 *   @note  TEXT                  a line copied into the report
 *   @meta  KEY VALUE             a string copied into the JSON "host" object
 *   case   WORKLOAD RUNNER FLAGS ARGV0 ARGV1 ...
 * FLAGS: "-" or letters; 't' = also measure throughput.
 * Every run: stdin, stdout and stderr are /dev/null, the cwd is DIR, exit status 0 is
 * required (anything else counts as a failure and its time is not used).
 * Writes PREFIX.md and PREFIX.json and prints the Markdown to stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CASES 64
#define MAX_ARGS 128
#define MAX_ENV 32
#define MAX_NOTES 32
#define MAX_K 8

struct tput {
	int k;
	long runs, failures;
	double seconds, per_sec;
};

struct bcase {
	char *workload, *runner;
	int tput;
	char *argv[MAX_ARGS];
	int disabled;
	char why[256];
	double *ms;      /* successful samples, ms */
	long *maxrss;    /* wait4 ru_maxrss (KiB) of the launched process tree */
	int n, failures;
	long hwm_kib;    /* VmHWM of the launched process itself at exit (median) */
	double cpu_ms;   /* its own on-CPU time (median), children excluded */
	struct tput tp[MAX_K];
	int ntp;
};

static struct bcase cases[MAX_CASES];
static int ncases;
static char *envv[MAX_ENV + 1];
static int nenv;
static char *notes[MAX_NOTES];
static int nnotes;
static char *meta_k[MAX_NOTES], *meta_v[MAX_NOTES];
static int nmeta;
static const char *workdir = ".";

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("bench driver: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n, sz);
	if (!p)
		die("out of memory");
	return p;
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		die("out of memory");
	return p;
}

static void load_cases(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("%s: %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (len > 0 && line[len - 1] == '\n')
			line[--len] = 0;
		if (!len || line[0] == '#')
			continue;
		char *fields[MAX_ARGS + 4];
		int nf = 0;
		char *save = NULL;
		for (char *tok = strtok_r(line, "\t", &save); tok && nf < MAX_ARGS + 4;
		     tok = strtok_r(NULL, "\t", &save))
			fields[nf++] = tok;
		if (!nf)
			continue;
		if (!strcmp(fields[0], "@env") && nf == 2) {
			if (nenv == MAX_ENV)
				die("%s:%d: too many @env", path, lineno);
			envv[nenv++] = xstrdup(fields[1]);
		} else if (!strcmp(fields[0], "@note") && nf == 2) {
			if (nnotes < MAX_NOTES)
				notes[nnotes++] = xstrdup(fields[1]);
		} else if (!strcmp(fields[0], "@meta") && nf == 3) {
			if (nmeta < MAX_NOTES) {
				meta_k[nmeta] = xstrdup(fields[1]);
				meta_v[nmeta++] = xstrdup(fields[2]);
			}
		} else if (!strcmp(fields[0], "case") && nf >= 5) {
			if (ncases == MAX_CASES)
				die("%s:%d: too many cases", path, lineno);
			if (nf - 4 >= MAX_ARGS)
				die("%s:%d: too many arguments", path, lineno);
			struct bcase *c = &cases[ncases++];
			c->workload = xstrdup(fields[1]);
			c->runner = xstrdup(fields[2]);
			c->tput = strchr(fields[3], 't') != NULL;
			for (int i = 4; i < nf; i++)
				c->argv[i - 4] = xstrdup(fields[i]);
		} else {
			die("%s:%d: cannot parse line", path, lineno);
		}
	}
	free(line);
	fclose(f);
	envv[nenv] = NULL;
	if (!ncases)
		die("%s: no cases", path);
}

/* In the child: stdio to /dev/null (stderr to errfd when >= 0), cwd, exec. */
static void child_exec(const struct bcase *c, int errfd, int traceme)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		_exit(126);
	dup2(null, 0);
	dup2(null, 1);
	dup2(errfd >= 0 ? errfd : null, 2);
	if (chdir(workdir) < 0)
		_exit(126);
	if (traceme && ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
		_exit(126);
	execve(c->argv[0], c->argv, envv);
	_exit(127);
}

/* One timed run. Returns the exit status (wait status) and fills *ms and *rss. */
static int run_once(const struct bcase *c, int errfd, double *ms, long *rss)
{
	double t0 = now_s();
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0)
		child_exec(c, errfd, 0);
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0)
		if (errno != EINTR)
			die("wait4: %s", strerror(errno));
	double t1 = now_s();
	if (ms)
		*ms = (t1 - t0) * 1e3;
	if (rss)
		*rss = ru.ru_maxrss;
	return status;
}

static long read_hwm(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strstr(buf, "VmHWM:");
	return p ? strtol(p + 6, NULL, 10) : -1;
}

/* On-CPU time of the process (its main thread) so far, ns, from /proc/PID/schedstat. */
static long long read_cpu_ns(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return strtoll(buf, NULL, 10);
}

/* An untimed run under ptrace: the launched process's own peak RSS (VmHWM) and on-CPU
 * time, read at its exit event before its memory is released. Its children are not
 * traced. Returns the peak RSS in KiB, -1 on failure. */
static long run_hwm(const struct bcase *c, long long *cpu_ns)
{
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0)
		child_exec(c, -1, 1);
	long hwm = -1;
	int status, first = 1;
	for (;;) {
		if (waitpid(pid, &status, 0) < 0) {
			if (errno == EINTR)
				continue;
			die("waitpid: %s", strerror(errno));
		}
		if (WIFEXITED(status) || WIFSIGNALED(status))
			break;
		if (!WIFSTOPPED(status))
			continue;
		int sig = WSTOPSIG(status), inject = 0;
		if (first && sig == SIGTRAP) {
			first = 0; /* the stop after execve */
			ptrace(PTRACE_SETOPTIONS, pid, NULL,
			       (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC |
					       PTRACE_O_EXITKILL));
		} else if (sig == SIGTRAP && (status >> 16) == PTRACE_EVENT_EXIT) {
			hwm = read_hwm(pid);
			if (cpu_ns)
				*cpu_ns = read_cpu_ns(pid);
		} else if (sig == SIGTRAP && (status >> 16) == PTRACE_EVENT_EXEC) {
			/* a later execve of the same process (sh exec): keep going */
		} else {
			inject = sig;
		}
		ptrace(PTRACE_CONT, pid, NULL, (void *)(long)inject);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return hwm;
}

static void loadavg(char *buf, size_t sz)
{
	snprintf(buf, sz, "?");
	FILE *f = fopen("/proc/loadavg", "r");
	if (!f)
		return;
	double a;
	if (fscanf(f, "%lf", &a) == 1)
		snprintf(buf, sz, "%.2f", a);
	fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return x < y ? -1 : x > y;
}

/* Percentile with linear interpolation on sorted data. */
static double pct(const double *s, int n, double p)
{
	if (n <= 0)
		return NAN;
	double r = p / 100.0 * (n - 1);
	int lo = (int)floor(r), hi = (int)ceil(r);
	return s[lo] + (s[hi] - s[lo]) * (r - lo);
}

struct stats {
	double median, p10, p90, min, max, mean;
	long rss_median;
};

static struct stats case_stats(const struct bcase *c)
{
	struct stats st = { NAN, NAN, NAN, NAN, NAN, NAN, -1 };
	if (c->n <= 0)
		return st;
	double *s = xcalloc((size_t)c->n, sizeof *s);
	memcpy(s, c->ms, (size_t)c->n * sizeof *s);
	qsort(s, (size_t)c->n, sizeof *s, cmp_double);
	st.median = pct(s, c->n, 50);
	st.p10 = pct(s, c->n, 10);
	st.p90 = pct(s, c->n, 90);
	st.min = s[0];
	st.max = s[c->n - 1];
	double sum = 0;
	for (int i = 0; i < c->n; i++)
		sum += s[i];
	st.mean = sum / c->n;
	free(s);
	long *r = xcalloc((size_t)c->n, sizeof *r);
	memcpy(r, c->maxrss, (size_t)c->n * sizeof *r);
	qsort(r, (size_t)c->n, sizeof *r, cmp_long);
	st.rss_median = r[c->n / 2];
	free(r);
	return st;
}

static struct bcase *find_case(const char *workload, const char *runner)
{
	for (int i = 0; i < ncases; i++)
		if (!strcmp(cases[i].workload, workload) && !strcmp(cases[i].runner, runner) &&
		    !cases[i].disabled)
			return &cases[i];
	return NULL;
}

/* Throughput: k workers, each running the case back to back until the deadline. */
static void throughput(struct bcase *c, int k, double seconds)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	double t0 = now_s(), deadline = t0 + seconds;
	pid_t pids[64];
	for (int w = 0; w < k; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork: %s", strerror(errno));
		if (pids[w] == 0) {
			close(pfd[0]);
			long counts[2] = { 0, 0 };
			while (now_s() < deadline) {
				int st = run_once(c, -1, NULL, NULL);
				if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
					counts[0]++;
				else
					counts[1]++;
			}
			if (write(pfd[1], counts, sizeof counts) != (ssize_t)sizeof counts)
				_exit(1);
			_exit(0);
		}
	}
	close(pfd[1]);
	long runs = 0, fails = 0, counts[2];
	while (read(pfd[0], counts, sizeof counts) == (ssize_t)sizeof counts) {
		runs += counts[0];
		fails += counts[1];
	}
	close(pfd[0]);
	for (int w = 0; w < k; w++)
		waitpid(pids[w], NULL, 0);
	double el = now_s() - t0;
	struct tput *t = &c->tp[c->ntp++];
	t->k = k;
	t->runs = runs;
	t->failures = fails;
	t->seconds = el;
	t->per_sec = runs / el;
}

static void shuffle(int *a, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(random() % (i + 1));
		int t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

/* Distinct values in first-seen order. */
static int distinct(const char **out, int max, int runners)
{
	int n = 0;
	for (int i = 0; i < ncases; i++) {
		const char *v = runners ? cases[i].runner : cases[i].workload;
		int seen = 0;
		for (int j = 0; j < n; j++)
			if (!strcmp(out[j], v))
				seen = 1;
		if (!seen && n < max)
			out[n++] = v;
	}
	return n;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v, int prec)
{
	if (isnan(v) || isinf(v))
		fputs("null", f);
	else
		fprintf(f, "%.*f", prec, v);
}

static void fmt_num(char *buf, size_t sz, double v, int prec, const char *plus)
{
	if (isnan(v) || isinf(v))
		snprintf(buf, sz, "n/a");
	else
		snprintf(buf, sz, "%s%.*f", v >= 0 ? plus : "", prec, v);
}

int main(int argc, char **argv)
{
	int n = 30, warm = 3, memruns = 5, gap_ms = 0;
	double tsecs = 5;
	unsigned seed = (unsigned)time(NULL);
	const char *klist = "1,2,8", *prefix = "latest";
	int opt;
	while ((opt = getopt(argc, argv, "n:w:m:t:k:s:C:o:g:")) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'w': warm = atoi(optarg); break;
		case 'm': memruns = atoi(optarg); break;
		case 't': tsecs = atof(optarg); break;
		case 'k': klist = optarg; break;
		case 's': seed = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'C': workdir = optarg; break;
		case 'o': prefix = optarg; break;
		case 'g': gap_ms = atoi(optarg); break;
		default: die("usage: driver [-n N] [-w W] [-m M] [-t S] [-k 1,2,8] [-s SEED] [-g GAP_MS] [-C DIR] [-o PREFIX] CASES");
		}
	}
	if (optind != argc - 1 || n < 1 || warm < 0 || memruns < 0 || tsecs < 0 || gap_ms < 0)
		die("usage: driver [-n N] [-w W] [-m M] [-t S] [-k 1,2,8] [-s SEED] [-g GAP_MS] [-C DIR] [-o PREFIX] CASES");
	int ks[MAX_K], nk = 0;
	if (tsecs > 0) {
		char *kl = xstrdup(klist), *save = NULL;
		for (char *tok = strtok_r(kl, ",", &save); tok && nk < MAX_K;
		     tok = strtok_r(NULL, ",", &save)) {
			int k = atoi(tok);
			if (k < 1 || k > 64)
				die("-k: 1..64");
			ks[nk++] = k;
		}
		free(kl);
	}
	load_cases(argv[optind]);
	char load0[32], load1[32];
	loadavg(load0, sizeof load0);
	srandom(seed);
	signal(SIGPIPE, SIG_IGN);

	/* warm-up: also the sanity check; a failing case is disabled and reported */
	for (int i = 0; i < ncases; i++) {
		struct bcase *c = &cases[i];
		c->ms = xcalloc((size_t)n, sizeof *c->ms);
		c->maxrss = xcalloc((size_t)n, sizeof *c->maxrss);
		for (int w = 0; w < (warm > 0 ? warm : 1); w++) {
			char tmpl[] = "/tmp/moat-bench-err.XXXXXX";
			int errfd = mkostemp(tmpl, O_CLOEXEC);
			if (errfd < 0)
				die("mkostemp: %s", strerror(errno));
			unlink(tmpl);
			int st = run_once(c, errfd, NULL, NULL);
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				char msg[200] = "";
				ssize_t r = pread(errfd, msg, sizeof msg - 1, 0);
				msg[r > 0 ? r : 0] = 0;
				msg[strcspn(msg, "\n")] = 0;
				snprintf(c->why, sizeof c->why, "%s %d%s%s",
					 WIFEXITED(st) ? "exit" : "signal",
					 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
					 msg[0] ? ": " : "", msg);
				c->disabled = 1;
				fprintf(stderr, "bench: %s/%s disabled (%s)\n", c->workload, c->runner,
					c->why);
				close(errfd);
				break;
			}
			close(errfd);
		}
	}

	/* latency: N rounds, each running every case once in a fresh random order */
	int order[MAX_CASES];
	fprintf(stderr, "bench: latency, %d rounds of %d cases\n", n, ncases);
	double lat_t0 = now_s();
	for (int r = 0; r < n; r++) {
		for (int i = 0; i < ncases; i++)
			order[i] = i;
		shuffle(order, ncases);
		for (int i = 0; i < ncases; i++) {
			struct bcase *c = &cases[order[i]];
			if (c->disabled)
				continue;
			double ms;
			long rss;
			/* spaced (-g): each run after a quiet gap, as an agent's tool calls
			 * come; 0: back to back */
			if (gap_ms > 0)
				usleep((useconds_t)gap_ms * 1000);
			int st = run_once(c, -1, &ms, &rss);
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
				c->ms[c->n] = ms;
				c->maxrss[c->n++] = rss;
			} else {
				c->failures++;
			}
		}
	}
	double lat_secs = now_s() - lat_t0;

	/* peak RSS of the launched process itself, in separate untimed runs */
	if (memruns > 0) {
		fprintf(stderr, "bench: launcher peak memory, %d runs per case\n", memruns);
		long *h = xcalloc((size_t)memruns, sizeof *h);
		double *cpu = xcalloc((size_t)memruns, sizeof *cpu);
		for (int i = 0; i < ncases; i++) {
			struct bcase *c = &cases[i];
			if (c->disabled)
				continue;
			int m = 0;
			for (int r = 0; r < memruns; r++) {
				long long ns = -1;
				long v = run_hwm(c, &ns);
				if (v > 0) {
					cpu[m] = ns >= 0 ? ns / 1e6 : NAN;
					h[m++] = v;
				}
			}
			qsort(h, (size_t)m, sizeof *h, cmp_long);
			qsort(cpu, (size_t)m, sizeof *cpu, cmp_double);
			c->hwm_kib = m ? h[m / 2] : -1;
			c->cpu_ms = m ? pct(cpu, m, 50) : NAN;
		}
		free(h);
		free(cpu);
	}

	/* throughput: for each k, the 't' cases in a random order */
	if (nk) {
		int tc[MAX_CASES], ntc = 0;
		for (int i = 0; i < ncases; i++)
			if (cases[i].tput && !cases[i].disabled)
				tc[ntc++] = i;
		for (int j = 0; j < nk; j++) {
			shuffle(tc, ntc);
			for (int i = 0; i < ntc; i++) {
				fprintf(stderr, "bench: throughput %s/%s, %d clients, %.0f s\n",
					cases[tc[i]].workload, cases[tc[i]].runner, ks[j], tsecs);
				throughput(&cases[tc[i]], ks[j], tsecs);
			}
		}
	}

	/* ---- report ---- */
	loadavg(load1, sizeof load1);
	const char *wl[MAX_CASES], *rn[MAX_CASES];
	int nw = distinct(wl, MAX_CASES, 0), nr = distinct(rn, MAX_CASES, 1);
	char mdpath[4096], jspath[4096];
	snprintf(mdpath, sizeof mdpath, "%s.md", prefix);
	snprintf(jspath, sizeof jspath, "%s.json", prefix);
	FILE *md = fopen(mdpath, "w"), *js = fopen(jspath, "w");
	if (!md || !js)
		die("cannot write %s / %s: %s", mdpath, jspath, strerror(errno));

	char host[256] = "?";
	gethostname(host, sizeof host - 1);
	time_t tnow = time(NULL);
	char when[64];
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tnow));

	fprintf(md, "## Start-up latency (wall time per run, ms)\n\n");
	fprintf(md, "%d interleaved rounds (random order each round), %d warm-up runs per case "
		    "discarded; %s; 1-min load average %s before, %s after; %s.\n\n", n, warm, when,
		load0, load1, gap_ms > 0 ? "spaced: each run after a quiet gap (-g)" : "back to back");
	if (gap_ms > 0)
		fprintf(md, "Gap before each run: %d ms.\n\n", gap_ms);
	fprintf(md, "| workload | runner | median | p10 | p90 | overhead vs bare | ratio to bwrap "
		    "| launcher peak RSS | launcher CPU ms | fails |\n");
	fprintf(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");

	fprintf(js, "{\n  \"generated\": ");
	json_str(js, when);
	fprintf(js, ",\n  \"host\": {\"hostname\": ");
	json_str(js, host);
	for (int i = 0; i < nmeta; i++) {
		fputs(", ", js);
		json_str(js, meta_k[i]);
		fputs(": ", js);
		json_str(js, meta_v[i]);
	}
	fprintf(js, "},\n  \"config\": {\"rounds\": %d, \"warmup\": %d, \"memRuns\": %d, "
		    "\"throughputSeconds\": %g, \"seed\": %u, \"latencySeconds\": %.1f, "
		    "\"loadavgBefore\": \"%s\", \"loadavgAfter\": \"%s\"},\n",
		n, warm, memruns, tsecs, seed, lat_secs, load0, load1);
	fprintf(js, "  \"notes\": [");
	for (int i = 0; i < nnotes; i++) {
		fputs(i ? ", " : "", js);
		json_str(js, notes[i]);
	}
	fprintf(js, "],\n  \"latency\": [");

	int first = 1;
	for (int w = 0; w < nw; w++) {
		struct bcase *bare = find_case(wl[w], "bare"), *bw = find_case(wl[w], "bwrap");
		double bare_med = bare ? case_stats(bare).median : NAN;
		double bw_over = bw && bare ? case_stats(bw).median - bare_med : NAN;
		for (int r = 0; r < nr; r++) {
			struct bcase *c = NULL;
			for (int i = 0; i < ncases; i++)
				if (!strcmp(cases[i].workload, wl[w]) && !strcmp(cases[i].runner, rn[r]))
					c = &cases[i];
			if (!c)
				continue;
			struct stats st = case_stats(c);
			double over = st.median - bare_med;
			double ratio = bw_over > 0 ? over / bw_over : NAN;
			if (!strcmp(c->runner, "bare"))
				ratio = NAN;
			char a[32], b[32], d[32], e[32], f[32], g[32], h[32], u[32];
			fmt_num(u, sizeof u, c->hwm_kib > 0 ? c->cpu_ms : NAN, 1, "");
			fmt_num(a, sizeof a, st.median, 1, "");
			fmt_num(b, sizeof b, st.p10, 1, "");
			fmt_num(d, sizeof d, st.p90, 1, "");
			fmt_num(e, sizeof e, strcmp(c->runner, "bare") ? over : NAN, 1, "+");
			fmt_num(f, sizeof f, ratio, 2, "");
			if (c->hwm_kib > 0)
				snprintf(g, sizeof g, "%.1f MiB", c->hwm_kib / 1024.0);
			else
				snprintf(g, sizeof g, "n/a");
			snprintf(h, sizeof h, "%d", c->failures);
			if (c->disabled)
				fprintf(md, "| %s | %s | disabled: %s | | | | | | | |\n", c->workload,
					c->runner, c->why);
			else
				fprintf(md, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
					c->workload, c->runner, a, b, d, e, f, g, u, h);

			fprintf(js, "%s\n    {\"workload\": ", first ? "" : ",");
			first = 0;
			json_str(js, c->workload);
			fprintf(js, ", \"runner\": ");
			json_str(js, c->runner);
			fprintf(js, ", \"argv\": [");
			for (int i = 0; c->argv[i]; i++) {
				fputs(i ? ", " : "", js);
				json_str(js, c->argv[i]);
			}
			fprintf(js, "], \"disabled\": ");
			if (c->disabled)
				json_str(js, c->why);
			else
				fputs("null", js);
			fprintf(js, ", \"runs\": %d, \"failures\": %d, \"medianMs\": ", c->n,
				c->failures);
			json_num(js, st.median, 3);
			fputs(", \"p10Ms\": ", js);
			json_num(js, st.p10, 3);
			fputs(", \"p90Ms\": ", js);
			json_num(js, st.p90, 3);
			fputs(", \"minMs\": ", js);
			json_num(js, st.min, 3);
			fputs(", \"maxMs\": ", js);
			json_num(js, st.max, 3);
			fputs(", \"meanMs\": ", js);
			json_num(js, st.mean, 3);
			fputs(", \"overheadMs\": ", js);
			json_num(js, strcmp(c->runner, "bare") ? over : NAN, 3);
			fputs(", \"ratioToBwrap\": ", js);
			json_num(js, ratio, 3);
			fputs(", \"launcherPeakRssKiB\": ", js);
			if (c->hwm_kib > 0)
				fprintf(js, "%ld", c->hwm_kib);
			else
				fputs("null", js);
			fputs(", \"launcherCpuMs\": ", js);
			json_num(js, c->hwm_kib > 0 ? c->cpu_ms : NAN, 3);
			fprintf(js, ", \"treeMaxRssKiB\": %ld, \"samplesMs\": [", st.rss_median);
			for (int i = 0; i < c->n; i++)
				fprintf(js, "%s%.3f", i ? ", " : "", c->ms[i]);
			fputs("]}", js);
		}
	}
	fprintf(js, "\n  ],\n  \"throughput\": [");
	fprintf(md, "\n");

	int any_tp = 0;
	for (int i = 0; i < ncases; i++)
		any_tp |= cases[i].ntp > 0;
	if (any_tp) {
		fprintf(md, "## Throughput (runs per second, %g s per cell)\n\n", tsecs);
		fprintf(md, "| workload | runner |");
		for (int j = 0; j < nk; j++)
			fprintf(md, " %d client%s |", ks[j], ks[j] > 1 ? "s" : "");
		fprintf(md, "\n|---|---|");
		for (int j = 0; j < nk; j++)
			fprintf(md, "---:|");
		fprintf(md, "\n");
	}
	first = 1;
	for (int w = 0; w < nw; w++) {
		for (int r = 0; r < nr; r++) {
			struct bcase *c = find_case(wl[w], rn[r]);
			if (!c || !c->ntp)
				continue;
			fprintf(md, "| %s | %s |", c->workload, c->runner);
			for (int j = 0; j < c->ntp; j++) {
				struct tput *t = &c->tp[j];
				fprintf(md, " %.1f%s |", t->per_sec, t->failures ? " (fails!)" : "");
				fprintf(js, "%s\n    {\"workload\": ", first ? "" : ",");
				first = 0;
				json_str(js, c->workload);
				fputs(", \"runner\": ", js);
				json_str(js, c->runner);
				fprintf(js, ", \"clients\": %d, \"runs\": %ld, \"failures\": %ld, "
					    "\"seconds\": %.3f, \"runsPerSecond\": %.2f}",
					t->k, t->runs, t->failures, t->seconds, t->per_sec);
			}
			fprintf(md, "\n");
		}
	}
	fprintf(js, "\n  ]\n}\n");
	if (any_tp)
		fprintf(md, "\n");
	for (int i = 0; i < nnotes; i++)
		fprintf(md, "- %s\n", notes[i]);
	if (fclose(md) || fclose(js))
		die("write failed");

	FILE *in = fopen(mdpath, "r");
	if (in) {
		char buf[4096];
		size_t k;
		while ((k = fread(buf, 1, sizeof buf, in)) > 0)
			fwrite(buf, 1, k, stdout);
		fclose(in);
	}
	int bad = 0;
	for (int i = 0; i < ncases; i++)
		bad |= cases[i].disabled;
	return bad ? 1 : 0;
}
