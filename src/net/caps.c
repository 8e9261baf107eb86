/* Caps shared by the runs of one long-lived caller (moat serve): relayed
 * TCP connections and DNS questions at once, across every run that holds
 * the object (include/moat.h). Lock-free: a slot is taken by a
 * compare-and-swap below the limit, so the count never passes it. */
#include <stdatomic.h>
#include <stdlib.h>

#include "moat.h"
#include "net/internal.h"

struct moat_relay_caps {
	_Atomic unsigned refs;
	unsigned max[MOAT_RELAY__KINDS];
	_Atomic uint64_t active[MOAT_RELAY__KINDS];
	_Atomic uint64_t refused[MOAT_RELAY__KINDS];
};

struct moat_relay_caps *moat_relay_caps_new(unsigned max_tcp, unsigned max_dns)
{
	if (!max_tcp || !max_dns)
		return NULL;
	struct moat_relay_caps *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->max[MOAT_RELAY_TCP] = max_tcp;
	c->max[MOAT_RELAY_DNS] = max_dns;
	return c;
}

struct moat_relay_caps *moat_relay_caps_ref(struct moat_relay_caps *c)
{
	if (c)
		atomic_fetch_add(&c->refs, 1);
	return c;
}

void moat_relay_caps_release(struct moat_relay_caps *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1)
		free(c);
}

bool moat_relay_caps_take(struct moat_relay_caps *c, int k)
{
	if (!c)
		return true;
	uint64_t n = atomic_load(&c->active[k]);
	do {
		if (n >= c->max[k]) {
			atomic_fetch_add(&c->refused[k], 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak(&c->active[k], &n, n + 1));
	return true;
}

void moat_relay_caps_give(struct moat_relay_caps *c, int k)
{
	if (c)
		atomic_fetch_sub(&c->active[k], 1);
}

void moat_relay_caps_stats(struct moat_relay_caps *c, struct moat_relay_caps_stats *out)
{
	for (int k = 0; k < MOAT_RELAY__KINDS; k++) {
		out->max[k] = c ? c->max[k] : 0;
		out->active[k] = c ? atomic_load(&c->active[k]) : 0;
		out->refused[k] = c ? atomic_load(&c->refused[k]) : 0;
	}
}
