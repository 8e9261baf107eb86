/* The mechanism-less manager: nothing is enforced and the result says so.
 * Real cgroup v2 / v1 / rlimit managers replace this (see the limits issue). */
#include <stdlib.h>

#include "cgroups/cgroups.h"

struct moat_cgroup {
	int unused;
};

int moat_cgroup_prepare(const struct moat_request *req, struct moat_result *res,
			struct moat_priv_plan *priv, struct moat_cgroup **out,
			struct moat_error *err)
{
	(void)priv;
	res->limit_memory = res->limit_pids = res->limit_cpu = "none";
	const char *missing[3];
	int n = 0;
	if (req->memory_mb)
		missing[n++] = "memoryMb";
	if (req->pids_limit)
		missing[n++] = "pidsLimit";
	if (req->cpus > 0)
		missing[n++] = "cpus";
	for (int i = 0; i < n; i++) {
		if (req->strict_limits)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
					      "%s was requested with strictLimits but this build of moat "
					      "cannot enforce resource limits", missing[i]);
		if (moat_result_warn(res, "%s was requested but is not enforced: this build of moat "
				     "has no resource-limit mechanism", missing[i]) < 0)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "out of memory");
	}
	*out = calloc(1, sizeof **out);
	if (!*out)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "out of memory");
	return 0;
}

int moat_cgroup_clone_fd(const struct moat_cgroup *cg)
{
	(void)cg;
	return -1;
}

int moat_cgroup_attach(struct moat_cgroup *cg, pid_t pid, struct moat_error *err)
{
	(void)cg;
	(void)pid;
	(void)err;
	return 0;
}

int moat_cgroup_kill(struct moat_cgroup *cg)
{
	(void)cg;
	return -1;
}

void moat_cgroup_finish(struct moat_cgroup *cg, struct moat_result *res)
{
	(void)res;
	free(cg);
}
