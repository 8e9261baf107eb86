/* cgroup v2: a leaf under the probe's parent. On the unified hierarchy
 * (cgroup2 at /sys/fs/cgroup) the leaf holds the limits (memory.max with
 * memory.oom.group and memory.swap.max, pids.max, cpu.max) after the
 * controllers are enabled in the parent's cgroup.subtree_control; on a
 * hybrid host (cgroup2 at /sys/fs/cgroup/unified, no controllers) it is
 * used for CLONE_INTO_CGROUP, cgroup.kill and cpu.stat only. The program
 * starts in the leaf (clone3 with its fd), so it is never outside it.
 * Every file is written relative to the parent's or the leaf's directory
 * fd (files.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroups/backend.h"

#define fmt moat_format

/* true when processes live in the cgroup at dfd (cgroup.procs not empty) */
static bool has_procs(int dfd)
{
	char *t = moat_cg_read_at(dfd, "cgroup.procs");
	bool any = t && t[strspn(t, " \n")] != '\0';
	free(t);
	return any;
}

/* The hierarchy's real root, which the no-internal-processes rule
 * exempts. A cgroup namespace's root (a container's "/") is not: the
 * kernel leaves cgroup.type off the real root only. */
static bool real_root(int dfd)
{
	return faccessat(dfd, "cgroup.type", F_OK, 0) < 0 && errno == ENOENT;
}

/* Writes op ("+memory") to the parent's cgroup.subtree_control (pfd). Below
 * the root, a cgroup where processes live gets no controller: the kernel
 * refuses the domain ones (memory) with EBUSY, and would accept the
 * threaded ones (pids, cpu) but that makes the cgroup a thread root, whose
 * domain children are invalid (clone3 CLONE_INTO_CGROUP into the run's
 * leaf fails with EOPNOTSUPP), so they are refused here the same way. */
static int enable_one(int pfd, const char *op)
{
	if (!real_root(pfd) && has_procs(pfd)) {
		errno = EBUSY;
		return -1;
	}
	return moat_cg_write_at(pfd, "cgroup.subtree_control", op);
}

/* Enables the available controllers in the parent's subtree, moving moat
 * into a sibling leaf first when it lives in the parent. When other
 * processes live there too, moat moves back and removes that leaf: it
 * would gain nothing, and an empty leaf of a moat that has exited is only
 * removed by a later run. Returns a reason string (malloc'd) when some
 * controller could not be enabled, else NULL. */
static char *enable(struct probe *p, int pfd)
{
	char *cur = moat_cg_read_at(pfd, "cgroup.subtree_control");
	bool tried_move = false;
	char *why = NULL;
	for (int i = 0; i < L__COUNT; i++) {
		if (!p->v2_avail[i] || (cur && cg_word_in(cur, MOAT_CG_V2_CTL[i])))
			continue;
		char op[16];
		snprintf(op, sizeof op, "+%s", MOAT_CG_V2_CTL[i]);
		int rc = enable_one(pfd, op);
		if (rc < 0 && errno == EBUSY && p->v2_own && !tried_move) {
			/* no internal processes: leave the parent for a sibling leaf.
			 * This includes the mount's root: EBUSY there means it is
			 * the root of a cgroup namespace, not the real root (which
			 * the rule exempts), as for a container's pid 1 in a pod */
			tried_move = true;
			char sup[64], procs[96], pid[24];
			snprintf(sup, sizeof sup, "moat-%ld-" MOAT_CG_SUPERVISOR_SUFFIX, (long)getpid());
			snprintf(procs, sizeof procs, "%s/cgroup.procs", sup);
			snprintf(pid, sizeof pid, "%ld", (long)getpid());
			bool made = mkdirat(pfd, sup, 0755) == 0 || errno == EEXIST;
			bool moved = made && moat_cg_write_at(pfd, procs, pid) == 0;
			if (moved)
				rc = enable_one(pfd, op);
			if (made && rc < 0) {
				int e = errno;
				if (!moved || moat_cg_write_at(pfd, "cgroup.procs", pid) == 0)
					(void)unlinkat(pfd, sup, AT_REMOVEDIR);
				errno = e;
			}
		}
		if (rc < 0) {
			int e = errno;
			p->v2_avail[i] = false;
			if (!why)
				why = fmt("cannot enable the %s controller in %s/cgroup.subtree_control: "
					  "%s%s", MOAT_CG_V2_CTL[i], p->v2_parent, strerror(e),
					  e == EBUSY ? " (other processes live in that cgroup; "
						       "give moat a cgroup of its own)" : "");
		}
	}
	free(cur);
	return why;
}

void cg_v2_create(struct moat_cgroup *cg, struct probe *p, const char *name,
		  const bool want[L__COUNT], char *why[L__COUNT])
{
	char *ewhy = NULL;
	int pfd = open(p->v2_parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd >= 0 && p->v2_pure)
		ewhy = enable(p, pfd);
	if (pfd >= 0 && (mkdirat(pfd, name, 0755) == 0 || errno == EEXIST)) {
		cg->v2_fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
		int e = errno;
		if (cg->v2_fd >= 0)
			cg->v2_leaf = moat_cg_path(p->v2_parent, name);
		if (cg->v2_fd >= 0 && !cg->v2_leaf) {
			close(cg->v2_fd);
			cg->v2_fd = -1;
			e = ENOMEM;
		}
		if (cg->v2_fd < 0)
			(void)unlinkat(pfd, name, AT_REMOVEDIR);
		errno = e;
	}
	if (cg->v2_fd < 0) {
		int e = errno;
		free(ewhy);
		ewhy = fmt("cannot create a cgroup under %s: %s", p->v2_parent, strerror(e));
	}
	if (pfd >= 0)
		close(pfd);
	if (cg->v2_fd >= 0 && p->v2_pure) {
		char *ctl = moat_cg_read_at(cg->v2_fd, "cgroup.controllers");
		for (int i = 0; i < L__COUNT; i++)
			cg->v2_ctl[i] = ctl && cg_word_in(ctl, MOAT_CG_V2_CTL[i]);
		free(ctl);
	}
	if (p->v2_pure)
		for (int i = 0; i < L__COUNT; i++)
			if (want[i] && !cg->v2_ctl[i])
				why[i] = ewhy ? strdup(ewhy)
					      : fmt("the cgroup v2 %s controller is not available "
						    "in %s", MOAT_CG_V2_CTL[i], p->v2_parent);
	free(ewhy);
}

int cg_v2_set_memory(struct moat_cgroup *cg, unsigned long long bytes, char **why,
		     struct moat_result *res, struct moat_error *err)
{
	if (cg_write_u64(cg->v2_fd, "memory.max", bytes) < 0) {
		*why = fmt("cannot set memory.max: %s", strerror(errno));
		return 0;
	}
	cg->mech[L_MEMORY] = MOAT_CG_V2;
	(void)moat_cg_write_at(cg->v2_fd, "memory.oom.group", "1");
	if (moat_cg_write_at(cg->v2_fd, "memory.swap.max", "0") < 0)
		return cg_warn(res, err, "memoryMb does not limit swap: memory.swap.max cannot be "
			       "set (%s); enable swap accounting (swapaccount=1)", strerror(errno));
	return 0;
}

void cg_v2_set_pids(struct moat_cgroup *cg, unsigned long long n, char **why)
{
	if (cg_write_u64(cg->v2_fd, "pids.max", n) < 0)
		*why = fmt("cannot set pids.max: %s", strerror(errno));
	else
		cg->mech[L_PIDS] = MOAT_CG_V2;
}

void cg_v2_set_cpu(struct moat_cgroup *cg, double cpus, char **why)
{
	char val[64];
	moat_cg_format_cpu_max(cpus, val, sizeof val);
	if (moat_cg_write_at(cg->v2_fd, "cpu.max", val) < 0)
		*why = fmt("cannot set cpu.max: %s", strerror(errno));
	else
		cg->mech[L_CPU] = MOAT_CG_V2;
}

int cg_v2_join(struct moat_cgroup *cg, pid_t pid)
{
	char buf[24];
	snprintf(buf, sizeof buf, "%ld", (long)pid);
	return moat_cg_write_at(cg->v2_fd, "cgroup.procs", buf);
}
