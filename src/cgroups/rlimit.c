/* The fallback when no cgroup enforces a limit: rlimits for the program.
 *
 * The memory rlimit, measured with node 20 and python 3.11 on this kernel:
 * RLIMIT_AS cannot limit node: V8 reserves large virtual ranges and node
 * traps at startup below ~800 MiB of address space, so an AS cap is either
 * meaningless or breaks javascript/typescript. RLIMIT_DATA (private
 * writable mappings, Linux >= 4.7) lets `node -e 0` start from 48 MiB
 * (below that it hangs or traps) and python3 from 8 MiB, and makes
 * allocations fail (MemoryError, bad_alloc) at the limit. moat uses
 * RLIMIT_DATA and warns javascript/typescript runs below 64 MiB.
 * pids → RLIMIT_NPROC, which counts per user: since Linux 5.14 per (user
 * namespace, uid), before that every process of the host uid counts.
 * cpus → none: RLIMIT_CPU bounds total CPU seconds per process, not a share;
 * reported as "none" with a warning rather than approximated.
 * strictLimits refuses every fallback instead. */
#include <sys/resource.h>
#include <unistd.h>

#include "cgroups/backend.h"

/* node needs about 48 MiB of RLIMIT_DATA to start (measured, node 20) */
#define NODE_MIN_DATA_MB 64

static const char *const REQ_NAME[L__COUNT] = { "memoryMb", "pidsLimit", "cpus" };

int cg_rlimit_fallback(struct moat_cgroup *cg, const struct moat_request *req, int i,
		       const char *w, struct moat_result *res, struct moat_error *err)
{
	if (req->strict_limits) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "%s cannot be enforced by a cgroup (%s) and strictLimits refuses "
			       "the %s fallback", REQ_NAME[i], w,
			       i == L_CPU ? "unlimited" : "rlimit");
		return -1;
	}
	int wr = 0;
	if (i == L_MEMORY) {
		cg->rl[cg->nrl++] = (struct moat_cgroup_rlimit){ RLIMIT_DATA,
								  req->memory_mb * MIB };
		cg->mech[i] = MOAT_CG_RLIMIT;
		wr = cg_warn(res, err, "memoryMb is enforced per process with RLIMIT_DATA, not a "
			     "cgroup (%s): each process may allocate %llu MiB of heap; file and "
			     "shared mappings are not counted and exceeding it makes allocations "
			     "fail (MemoryError, bad_alloc) instead of an OOM kill", w,
			     (unsigned long long)req->memory_mb);
		if (wr == 0 && req->memory_mb < NODE_MIN_DATA_MB &&
		    (req->language == MOAT_LANG_JAVASCRIPT || req->language == MOAT_LANG_TYPESCRIPT))
			wr = cg_warn(res, err, "node needs about 48 MiB of RLIMIT_DATA to start; "
				  "with memoryMb below %d it may crash or hang until the timeout "
				  "(RLIMIT_AS is not used: node reserves ~800 MiB of address space)",
				  NODE_MIN_DATA_MB);
	} else if (i == L_PIDS) {
		cg->rl[cg->nrl++] = (struct moat_cgroup_rlimit){ RLIMIT_NPROC,
								  req->pids_limit };
		cg->mech[i] = MOAT_CG_RLIMIT;
		if (geteuid() == 0)
			wr = cg_warn(res, err, "pidsLimit is enforced with RLIMIT_NPROC, not a cgroup "
				  "(%s): it counts processes per user, and uid 65534 in the sandbox "
				  "is an unprivileged host uid (65534 by default) that other runs "
				  "and host processes of that uid may share", w);
		else
			wr = cg_warn(res, err, "pidsLimit is enforced with RLIMIT_NPROC, not a cgroup "
				  "(%s): it counts processes per user, and uid 65534 in the sandbox "
				  "is your uid %ld on the host; on kernels before 5.14 your other "
				  "processes count against the limit too", w, (long)getuid());
	} else {
		wr = cg_warn(res, err, "cpus is not enforced (%s): no rlimit expresses a CPU "
			     "share (RLIMIT_CPU bounds total CPU seconds), so the program may use "
			     "every CPU", w);
	}
	return wr;
}

size_t moat_cgroup_rlimits(const struct moat_cgroup *cg,
			   struct moat_cgroup_rlimit out[MOAT_CGROUP_MAX_RLIMITS])
{
	size_t n = cg ? cg->nrl : 0;
	for (size_t i = 0; i < n; i++)
		out[i] = cg->rl[i];
	return n;
}
