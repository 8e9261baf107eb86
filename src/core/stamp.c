
#include "core/stamp.h"
#include "moat_admin.h"

#ifdef MOAT_TIMELINE
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_STAMPS 64

struct stamp {
	const char *name; /* a literal: same address in every copy of the image */
	long long ns;
};

static struct {
	atomic_int n;
	struct stamp s[MAX_STAMPS];
} *tl;

void moat_stamp(const char *name)
{
	if (!__atomic_load_n(&tl, __ATOMIC_ACQUIRE)) {
		void *p = mmap(NULL, sizeof *tl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
		if (p == MAP_FAILED)
			return;
		void *none = NULL;
		/* two threads may map at once: the first page wins */
		if (!__atomic_compare_exchange_n(&tl, &none, p, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			munmap(p, sizeof *tl);
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int i = atomic_fetch_add(&tl->n, 1);
	if (i < MAX_STAMPS)
		tl->s[i] = (struct stamp){ name, ts.tv_sec * 1000000000LL + ts.tv_nsec };
}

void moat_stamp_dump(void)
{
	if (!tl)
		return;
	int n = atomic_load(&tl->n);
	if (n > MAX_STAMPS)
		n = MAX_STAMPS;
	/* timeline <TAB> clock ms <TAB> ms since the first stamp <TAB> ms since the
	 * previous one <TAB> step */
	for (int i = 0; i < n; i++)
		fprintf(stderr, "timeline\t%lld.%06lld\t%.3f\t%.3f\t%s\n", tl->s[i].ns / 1000000,
			tl->s[i].ns % 1000000, (tl->s[i].ns - tl->s[0].ns) / 1e6,
			i ? (tl->s[i].ns - tl->s[i - 1].ns) / 1e6 : 0.0, tl->s[i].name);
	tl->n = 0;
}
#endif

/* The public face (moat_admin.h), for the CLI's own marks. */
void moat_timeline_mark(const char *name)
{
	(void)name;
	moat_stamp(name);
}

void moat_timeline_dump(void)
{
	moat_stamp_dump();
}
