/* priv: what the sandboxed program may do — ids, capabilities,
 * no_new_privs, resource rlimits. prepare runs in the supervisor; the rest
 * runs in the child and only makes system calls. */
#ifndef MOAT_PRIV_PRIV_H
#define MOAT_PRIV_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/capability.h>
#include "moat.h"

#define MOAT_MAX_RLIMITS 12
/* the program's RLIMIT_MEMLOCK (or the caller's, when lower) */
#define MOAT_MEMLOCK_BYTES (8u << 20)

struct moat_rlimit {
	int resource;
	struct rlimit value;
};

struct moat_priv_plan {
	int last_cap;       /* highest capability number the kernel knows */
	cap_t empty;        /* every set cleared, allocated in the supervisor */
	struct moat_rlimit rlimits[MOAT_MAX_RLIMITS];
	int rlimit_count;
	int landlock_abi;   /* the kernel's Landlock ABI; 0: not available */
};

int moat_priv_prepare(struct moat_priv_plan *p, uint64_t fsize_bytes, struct moat_error *err);
/* Adds (or lowers) an rlimit applied to the program, e.g. a cgroup fallback. */
int moat_priv_add_rlimit(struct moat_priv_plan *p, int resource, rlim_t value,
			 struct moat_error *err);
void moat_priv_release(struct moat_priv_plan *p);

/* Child side. Each returns 0 or -1 with errno set. */
/* As root, drop the supplementary groups; then become 65534:65534. */
int moat_priv_become_nobody(bool as_root);
/* Empty the bounding set. It only limits what an execve may grant, so pid 1
 * drops it first thing (its own capabilities stay) and the program inherits
 * it empty. */
int moat_priv_drop_bounding(const struct moat_priv_plan *p);
/* Empty the ambient set, then every capability set. */
int moat_priv_clear_caps(const struct moat_priv_plan *p);
int moat_priv_no_new_privs(void);
int moat_priv_apply_rlimits(const struct moat_priv_plan *p);
/* Landlock (landlock.c): the second filesystem wall, granting what the
 * mount plan allows (SECURITY.md). After no_new_privs, in the program.
 * 0 when applied or when the kernel has none (p->landlock_abi 0). */
int moat_priv_landlock(const struct moat_priv_plan *p);
/* The kernel's Landlock ABI version; 0 when Landlock is unavailable
 * (not built, or not in the lsm= list). */
int moat_landlock_abi(void);
/* Pure: what a run does about the kernel's Landlock ABI. abi >= 1: nothing
 * (0). abi 0: with strict, -1 and *err (SandboxUnavailableError: the run is
 * refused); without, 1: the caller adds MOAT_LANDLOCK_MISSING as a warning. */
int moat_landlock_decide(int abi, bool strict, struct moat_error *err);
#define MOAT_LANDLOCK_MISSING                                                        \
	"Landlock is not available on this kernel (not built, or not in the lsm= boot " \
	"list): the read-only mounts are the only filesystem wall, without a second one"

#endif
