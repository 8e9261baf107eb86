/* The service-wide budgets of live sandboxes (docs/SESSIONS.md,
 * "Budgets"): every live session (and, once they land, every live
 * sandbox) reserves its memoryMb and cpus here for as long as it lives,
 * and a reservation past either budget is refused with a sentence naming
 * it. One face: reserve, release, and the figures for /healthz and
 * /metrics. Thread-safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/internal.h"

/* cpus are kept in thousandths: sums of doubles drift */
static uint64_t milli(double cpus)
{
	return cpus > 0 ? (uint64_t)(cpus * 1000.0 + 0.5) : 0;
}

/* MemTotal in MiB from /proc/meminfo, else the physical pages; 0 unknown. */
static uint64_t mem_total_mb(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	uint64_t kb = 0;
	if (f) {
		char line[256];
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "MemTotal: %lu kB", &kb) == 1)
				break;
		fclose(f);
	}
	if (kb)
		return kb / 1024;
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	return pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 1048576u : 0;
}

uint64_t serve_budget_default_memory_mb(unsigned slots, uint64_t slot_mb, uint64_t floor_mb)
{
	uint64_t half = mem_total_mb() / 2;
	uint64_t runs = (uint64_t)slots * slot_mb;
	uint64_t v = half > runs ? half - runs : 0;
	return v > floor_mb ? v : floor_mb;
}

void serve_budget_init(struct serve_budget *b, uint64_t memory_mb, double cpus)
{
	memset(b, 0, sizeof *b);
	pthread_mutex_init(&b->mu, NULL);
	b->memory_mb = memory_mb;
	b->cpus_milli = milli(cpus);
}

int serve_budget_reserve(struct serve_budget *b, uint64_t memory_mb, double cpus, char **why)
{
	*why = NULL;
	uint64_t mc = milli(cpus);
	pthread_mutex_lock(&b->mu);
	bool mem_ok = memory_mb <= b->memory_mb && b->memory_reserved + memory_mb <= b->memory_mb;
	bool cpu_ok = mc <= b->cpus_milli && b->cpus_reserved + mc <= b->cpus_milli;
	if (mem_ok && cpu_ok) {
		b->memory_reserved += memory_mb;
		b->cpus_reserved += mc;
		pthread_mutex_unlock(&b->mu);
		return 0;
	}
	b->refused[mem_ok ? 1 : 0]++;
	int n;
	if (!mem_ok)
		n = asprintf(why, "the live sandboxes' memory budget (serve.sandboxes.memoryMb "
				  "%llu MiB) is spent: %llu MiB reserved, this one asks %llu MiB; "
				  "close a session or retry later",
			     (unsigned long long)b->memory_mb,
			     (unsigned long long)b->memory_reserved, (unsigned long long)memory_mb);
	else
		n = asprintf(why, "the live sandboxes' CPU budget (serve.sandboxes.cpus %g) is "
				  "spent: %g reserved, this one asks %g; close a session or retry "
				  "later",
			     (double)b->cpus_milli / 1000.0, (double)b->cpus_reserved / 1000.0,
			     (double)mc / 1000.0);
	pthread_mutex_unlock(&b->mu);
	if (n < 0)
		*why = NULL;
	return -1;
}

void serve_budget_release(struct serve_budget *b, uint64_t memory_mb, double cpus)
{
	uint64_t mc = milli(cpus);
	pthread_mutex_lock(&b->mu);
	b->memory_reserved -= memory_mb <= b->memory_reserved ? memory_mb : b->memory_reserved;
	b->cpus_reserved -= mc <= b->cpus_reserved ? mc : b->cpus_reserved;
	pthread_mutex_unlock(&b->mu);
}

void serve_budget_json(struct serve_budget *b, struct moat_buf *out)
{
	pthread_mutex_lock(&b->mu);
	moat_buf_appendf(out, "{\"memoryMb\":{\"reserved\":%llu,\"total\":%llu},"
			      "\"cpus\":{\"reserved\":%g,\"total\":%g}}",
			 (unsigned long long)b->memory_reserved, (unsigned long long)b->memory_mb,
			 (double)b->cpus_reserved / 1000.0, (double)b->cpus_milli / 1000.0);
	pthread_mutex_unlock(&b->mu);
}

void serve_budget_metrics(struct serve_budget *b, struct moat_buf *out)
{
	pthread_mutex_lock(&b->mu);
	moat_buf_appendf(out,
			 "# HELP moat_serve_sandboxes_memory_reserved_mb Memory the live sandboxes "
			 "(sessions) reserved (MiB).\n"
			 "# TYPE moat_serve_sandboxes_memory_reserved_mb gauge\n"
			 "moat_serve_sandboxes_memory_reserved_mb %llu\n"
			 "# HELP moat_serve_sandboxes_memory_budget_mb serve.sandboxes.memoryMb.\n"
			 "# TYPE moat_serve_sandboxes_memory_budget_mb gauge\n"
			 "moat_serve_sandboxes_memory_budget_mb %llu\n"
			 "# HELP moat_serve_sandboxes_cpus_reserved CPUs the live sandboxes "
			 "reserved.\n"
			 "# TYPE moat_serve_sandboxes_cpus_reserved gauge\n"
			 "moat_serve_sandboxes_cpus_reserved %g\n"
			 "# HELP moat_serve_sandboxes_cpus_budget serve.sandboxes.cpus.\n"
			 "# TYPE moat_serve_sandboxes_cpus_budget gauge\n"
			 "moat_serve_sandboxes_cpus_budget %g\n"
			 "# HELP moat_serve_sandboxes_budget_refused_total Creates refused past a "
			 "budget.\n"
			 "# TYPE moat_serve_sandboxes_budget_refused_total counter\n"
			 "moat_serve_sandboxes_budget_refused_total{budget=\"memory\"} %llu\n"
			 "moat_serve_sandboxes_budget_refused_total{budget=\"cpus\"} %llu\n",
			 (unsigned long long)b->memory_reserved, (unsigned long long)b->memory_mb,
			 (double)b->cpus_reserved / 1000.0, (double)b->cpus_milli / 1000.0,
			 (unsigned long long)b->refused[0], (unsigned long long)b->refused[1]);
	pthread_mutex_unlock(&b->mu);
}
