/* cgroup v1: a leaf per controller (memory, pids, cpu, cpuacct) under the
 * cgroup moat is in, where the probe found the parent writable. prepare
 * only names them and records the limits; they are created, limited and
 * joined in moat_cgroup_attach, after clone3, while the child builds its
 * mounts (none of it is needed before); a failure there fails the run.
 * Each leaf's files are written relative to its directory fd, opened once
 * it exists (after clone3: pid 1 never holds it). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroups/backend.h"

int cg_v1_plan(struct moat_cgroup *cg, const struct probe *p, const char *name,
	       const bool want[L__COUNT], char *why[L__COUNT], struct moat_error *err)
{
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		if (!p->v1_parent[i])
			continue;
		cg->sweep[i] = strdup(p->v1_parent[i]);
		cg->v1_leaf[i] = moat_cg_path(p->v1_parent[i], name);
		if (!cg->v1_leaf[i])
			return moat_error_oom(err);
	}
	static const int v1_of[L__COUNT] = { MOAT_V1_MEMORY, MOAT_V1_PIDS, MOAT_V1_CPU };
	for (int i = 0; i < L__COUNT; i++)
		if (want[i] && !cg->v1_leaf[v1_of[i]]) {
			const char *w = p->v1_why[v1_of[i]];
			why[i] = strdup(w ? w : "cgroup v1 is not available");
		}
	return 0;
}

int cg_v1_set_memory(struct moat_cgroup *cg, const struct probe *p, unsigned long long bytes,
		     struct moat_result *res, struct moat_error *err)
{
	/* the parent has the same files as the leaf will */
	cg->mech[L_MEMORY] = MOAT_CG_V1;
	cg->v1_mem = bytes;
	int pfd = open(p->v1_parent[MOAT_V1_MEMORY], O_PATH | O_DIRECTORY | O_CLOEXEC);
	cg->v1_memsw = pfd >= 0 && faccessat(pfd, "memory.memsw.limit_in_bytes", F_OK, 0) == 0;
	cg->v1_tcp = pfd >= 0 && faccessat(pfd, "memory.kmem.tcp.limit_in_bytes", F_OK, 0) == 0;
	if (pfd >= 0)
		close(pfd);
	if (!cg->v1_memsw)
		return cg_warn(res, err, "memoryMb does not limit swap: this kernel has no "
			       "memory.memsw.limit_in_bytes (enable swapaccount=1)");
	return 0;
}

void cg_v1_set_pids(struct moat_cgroup *cg, unsigned long long n)
{
	cg->v1_pids = n;
	cg->mech[L_PIDS] = MOAT_CG_V1;
}

void cg_v1_set_cpu(struct moat_cgroup *cg, double cpus)
{
	cg->v1_cpu_quota = moat_cg_cpu_quota(cpus);
	cg->mech[L_CPU] = MOAT_CG_V1;
}

static int attach_fail(struct moat_error *err, const char *what, const char *where)
{
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot %s %s: %s", what, where,
			      strerror(errno));
}

int cg_v1_attach(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		 struct moat_error *err)
{
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		if (!cg->v1_leaf[i] || cg->v1_fd[i] >= 0)
			continue;
		if (mkdir(cg->v1_leaf[i], 0755) < 0 && errno != EEXIST)
			return attach_fail(err, "create the cgroup", cg->v1_leaf[i]);
		cg->v1_fd[i] = open(cg->v1_leaf[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cg->v1_fd[i] < 0)
			return attach_fail(err, "open the cgroup", cg->v1_leaf[i]);
	}
	const char *mem = cg->v1_leaf[MOAT_V1_MEMORY];
	int memfd = cg->v1_fd[MOAT_V1_MEMORY];
	if (cg->v1_mem) {
		if (cg_write_u64(memfd, "memory.limit_in_bytes", cg->v1_mem) < 0)
			return attach_fail(err, "set memory.limit_in_bytes in", mem);
		if (cg->v1_memsw &&
		    cg_write_u64(memfd, "memory.memsw.limit_in_bytes", cg->v1_mem) < 0 &&
		    moat_result_warn(res, "memoryMb does not limit swap: cannot set "
				     "memory.memsw.limit_in_bytes: %s", strerror(errno)) < 0)
			return moat_error_oom(err);
	}
	/* v1 charges socket buffers to a counter of their own, only once it
	 * has a limit: memoryMb again (the sandbox's sockets are then put
	 * under memory pressure past it) */
	if (cg->v1_mem && cg->v1_tcp &&
	    cg_write_u64(memfd, "memory.kmem.tcp.limit_in_bytes", cg->v1_mem) < 0)
		return attach_fail(err, "set memory.kmem.tcp.limit_in_bytes in", mem);
	if (cg->v1_pids && cg_write_u64(cg->v1_fd[MOAT_V1_PIDS], "pids.max", cg->v1_pids) < 0)
		return attach_fail(err, "set pids.max in", cg->v1_leaf[MOAT_V1_PIDS]);
	int cpufd = cg->v1_fd[MOAT_V1_CPU];
	if (cg->v1_cpu_quota && (cg_write_u64(cpufd, "cpu.cfs_period_us", MOAT_CG_CPU_PERIOD) < 0 ||
				 cg_write_u64(cpufd, "cpu.cfs_quota_us",
					      (unsigned long long)cg->v1_cpu_quota) < 0))
		return attach_fail(err, "set cpu.cfs_quota_us in", cg->v1_leaf[MOAT_V1_CPU]);
	char buf[24];
	snprintf(buf, sizeof buf, "%ld", (long)pid);
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		if (cg->v1_fd[i] >= 0 && moat_cg_write_at(cg->v1_fd[i], "cgroup.procs", buf) < 0)
			return attach_fail(err, "move the sandbox into", cg->v1_leaf[i]);
	return 0;
}
