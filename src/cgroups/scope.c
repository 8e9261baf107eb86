/* Rootless on a unified host without a delegated cgroup (a terminal's
 * session-N.scope), a run asking for a limit first asks the user's systemd
 * for a transient scope with Delegate=yes holding moat, once per process,
 * and probes again: the scope is then moat's own, delegated cgroup (the
 * sd-bus exchange is systemd.c, libsystemd loaded with dlopen). If that
 * fails, the fallback's warning names the systemd error. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroups/backend.h"
#include "core/stamp.h"

#define fmt moat_format

/* Bound on the whole exchange with the user manager (connect, the call, the
 * start job, PID 1 moving moat): 0.5 s in the TCG test VM, a few ms natively
 * by estimate (README, "Speed"); a manager that hangs costs this much once. */
#define SYSTEMD_TIMEOUT_MS 5000

/* Asked once per process, under a lock: threads of one process share its
 * cgroup, and a second scope would only take moat out of the first. Later
 * runs find the scope as moat's own cgroup, or get the same failure. */
static pthread_mutex_t deleg_mu = PTHREAD_MUTEX_INITIALIZER;
static int deleg_state;  /* 0: not asked, 1: delegated, -1: failed */
static char *deleg_unit; /* the scope, once delegated */
static char *deleg_why;  /* why not, once failed */

/* 0 when moat is (now or already) in a scope systemd delegated, -1 with
 * *why (malloc'd) otherwise. */
static int systemd_delegate(char **why)
{
	*why = NULL;
	pthread_mutex_lock(&deleg_mu);
	if (deleg_state == 0) {
		char *unit = NULL, *w = NULL;
		if (moat_cg_systemd_delegate(SYSTEMD_TIMEOUT_MS, &unit, &w) == 0) {
			deleg_state = 1;
			deleg_unit = unit;
		} else {
			deleg_state = -1;
			deleg_why = w;
		}
	}
	int rc = deleg_state == 1 ? 0 : -1;
	if (rc < 0)
		*why = strdup(deleg_why ? deleg_why : "out of memory");
	pthread_mutex_unlock(&deleg_mu);
	return rc;
}

/* After cg_probe_host: when the run wants a limit and no v2 parent is usable,
 * ask systemd and probe again (moat's cgroup is read anew from
 * /proc/self/cgroup and checked like any other: nothing systemd said is
 * trusted). On failure the probe's reason gains systemd's. */
void cg_scope_maybe_delegate(struct probe *p, bool want_limit)
{
	if (!moat_cg_delegation_wanted(p->v2_pure, p->v2_parent != NULL, p->v2_env, geteuid(),
				       want_limit && p->self_ok))
		return;
	char *dwhy = NULL;
	int rc = systemd_delegate(&dwhy);
	moat_stamp("sup: systemd asked");
	if (rc == 0) {
		cg_probe_free(p);
		cg_probe_host(p);
		return;
	}
	char *w = fmt("%s; moat asked the user's systemd for a delegated scope: %s",
		      p->v2_why ? p->v2_why : "no usable cgroup2 parent",
		      dwhy ? dwhy : "out of memory");
	if (w) {
		free(p->v2_why);
		p->v2_why = w;
	}
	free(dwhy);
}

int moat_cgroup_delegate_now(char **note)
{
	*note = NULL;
	struct probe p;
	cg_probe_host(&p);
	bool wanted = moat_cg_delegation_wanted(p.v2_pure, p.v2_parent != NULL, p.v2_env,
						 geteuid(), p.self_ok);
	int rc = 0;
	if (wanted) {
		cg_scope_maybe_delegate(&p, true);
		if (p.v2_parent) {
			pthread_mutex_lock(&deleg_mu);
			*note = fmt("limits: cgroup v2 under %s (systemd delegated the scope %s)",
				    p.v2_parent, deleg_unit ? deleg_unit : "?");
			pthread_mutex_unlock(&deleg_mu);
		} else {
			*note = fmt("limits: no cgroup: %s; runs fall back to rlimits and say so, "
				    "and strictLimits requests fail",
				    p.v2_why ? p.v2_why : "no usable cgroup2 parent");
			rc = -1;
		}
	}
	cg_probe_free(&p);
	return rc;
}

/* doctor's line on delegation from systemd, changing nothing */
void cg_scope_describe(FILE *out, const struct probe *p)
{
	const char *h = "systemd delegation: ";
	pthread_mutex_lock(&deleg_mu);
	char *unit = deleg_unit ? strdup(deleg_unit) : NULL;
	pthread_mutex_unlock(&deleg_mu);
	if (unit)
		fprintf(out, "%sin use: moat runs in the scope %s systemd delegated\n", h, unit);
	else if (!p->v2_pure)
		fprintf(out, "%snot used: cgroup v2 is not the unified hierarchy here\n", h);
	else if (p->v2_env)
		fprintf(out, "%snot used: MOAT_CGROUP_PARENT names the parent\n", h);
	else if (geteuid() == 0)
		fprintf(out, "%snot used: root creates its cgroups itself\n", h);
	else if (p->v2_parent)
		fprintf(out, "%snot needed: moat's own cgroup is delegated\n", h);
	else {
		char *ver = NULL, *addr = NULL, *why = NULL;
		if (moat_cg_systemd_reachable(SYSTEMD_TIMEOUT_MS, &ver, &addr, &why) == 0)
			fprintf(out, "%savailable: systemd %s at %s; a run asking for a limit first "
				"moves moat into a transient scope with Delegate=yes\n", h, ver, addr);
		else
			fprintf(out, "%snot available: %s\n", h, why ? why : "out of memory");
		free(ver);
		free(addr);
		free(why);
	}
	free(unit);
}
