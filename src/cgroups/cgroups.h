/* cgroups: memory/pids/cpu limits and their statistics for one run.
 * Every limit that is requested but cannot be enforced is reported in the
 * result (limits + warnings); strictLimits turns that into an error.
 *
 * Mechanisms, best first: cgroup v2, cgroup v1, rlimit (memory:
 * RLIMIT_DATA, pids: RLIMIT_NPROC; cpu has none). On cgroup v2 the run's
 * leaf goes under $MOAT_CGROUP_PARENT when set (a cgroup path, "/moat.slice"
 * or "/sys/fs/cgroup/moat.slice", writable by the caller, with the memory,
 * pids and cpu controllers available, and reachable: the caller may write
 * cgroup.procs of the common ancestor of its cgroup and that one), else under the caller's own cgroup
 * when it is delegated (`systemd-run --user --scope -p Delegate=yes moat
 * ...`); moat then moves itself into a sibling leaf moat-<pid>-supervisor.
 * Rootless and not delegated, a run asking for a limit first asks the
 * user's systemd for such a scope itself (systemd.c), once per process. */
#ifndef MOAT_CGROUPS_CGROUPS_H
#define MOAT_CGROUPS_CGROUPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "moat.h"

struct moat_cgroup;

/* Supervisor, before clone: choose the mechanism for each requested limit,
 * create what is needed, fill res->limit_* and warnings. A limit that falls
 * back to an rlimit is listed by moat_cgroup_rlimits, for the runner to
 * apply to the program. */
int moat_cgroup_prepare(const struct moat_request *req, struct moat_result *res,
			struct moat_cgroup **out, struct moat_error *err);
/* The rlimit fallbacks prepare chose (memory → RLIMIT_DATA, pids →
 * RLIMIT_NPROC), at most MOAT_CGROUP_MAX_RLIMITS: their number. */
#define MOAT_CGROUP_MAX_RLIMITS 2
struct moat_cgroup_rlimit {
	int resource;
	uint64_t value;
};
size_t moat_cgroup_rlimits(const struct moat_cgroup *cg,
			   struct moat_cgroup_rlimit out[MOAT_CGROUP_MAX_RLIMITS]);
/* Are the sandbox's socket buffers charged to its memory limit? cgroup
 * v2: to memory.max; v1: to memory.kmem.tcp.limit_in_bytes, set to the
 * same figure where the kernel still has it. No with the rlimit fallback. */
bool moat_cgroup_charges_sockets(const struct moat_cgroup *cg);
/* A directory fd for clone3(CLONE_INTO_CGROUP), or -1; its path (for
 * messages), or NULL. */
int moat_cgroup_clone_fd(const struct moat_cgroup *cg);
const char *moat_cgroup_clone_path(const struct moat_cgroup *cg);
/* After clone, before the child forks the program. v1: create the leaves the
 * prepare step chose, write their limits and move pid into them; nothing of
 * it is needed before clone3, so the supervisor does it while the child
 * builds its mounts. A failure fails the run (the prepare step only chose
 * parents the probe found writable); a swap limit that cannot be set is a
 * warning in res, as before. */
int moat_cgroup_attach(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		       struct moat_error *err);
/* moat_cgroup_attach for a pid 1 that was not cloned into the v2 leaf
 * (CLONE_INTO_CGROUP): one that another process made (a zygote's child,
 * runner's run_adopt). v1 as moat_cgroup_attach; then the v2 leaf's
 * cgroup.procs, which cgroup v2 allows only to a writer that may write
 * cgroup.procs of the common ancestor of pid's cgroup and the leaf. */
int moat_cgroup_adopt(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		      struct moat_error *err);
/* Removes the leaves of moats that no longer run from the parents this run
 * uses (rmdir only). The supervisor calls it once the program is on its way,
 * so it is not on the start-up path. NULL-safe, once per run; a process
 * sweeps at its first run and then at most once per
 * MOAT_CGROUP_SWEEP_EVERY_MS (the other runs' calls only free). */
#define MOAT_CGROUP_SWEEP_EVERY_MS 60000
void moat_cgroup_sweep(struct moat_cgroup *cg);
/* The same without a run, for moat serve (at start and on a timer) and moat
 * doctor: the leaves of moats no longer running (their owner's pid gone, or
 * taken by a process that started at another time) under every parent this
 * process's runs would use now. *found of them, *removed (remove: rmdir'd,
 * never killed; a sweep now counts for the runs' once-a-minute one), *where
 * the hierarchies that hold them ("cpu,cpuacct 45, pids 45, unified 45",
 * malloc'd, NULL when none). 0, or -1 out of memory (the counts stand). */
int moat_cgroup_stale_leaves(bool remove, unsigned *found, unsigned *removed, char **where);
/* Kill every process of the run at once; -1 when this mechanism cannot. */
int moat_cgroup_kill(struct moat_cgroup *cg);
/* After the run: statistics and oom/pids detection into res, then remove
 * everything that was created. NULL-safe. */
void moat_cgroup_finish(struct moat_cgroup *cg, struct moat_result *res);
/* The statistics and the limit hits into res (what finish does first),
 * leaving the leaves for moat_cgroup_finish(cg, NULL): removing them can
 * wait for the kernel to let go of the last task, which a caller may do
 * after it has answered. */
void moat_cgroup_collect(struct moat_cgroup *cg, struct moat_result *res);
/* Reads the figures moat_cgroup_collect (or finish) then reports, instead
 * of reading them there: the supervisor takes them once the program's
 * status is in, while pid 1's exit tears the namespaces down. The next
 * collect uses them and forgets them. NULL-safe. */
void moat_cgroup_snapshot(struct moat_cgroup *cg);
/* The run's memory in use now (memory.current / memory.usage_in_bytes),
 * or -1 without a memory cgroup. */
int64_t moat_cgroup_memory_now(const struct moat_cgroup *cg);
/* The run's CPU time so far in ms (cpuacct.usage / cpu.stat usage_usec),
 * or -1 without a cpu accounting cgroup: what moat_cgroup_collect puts in
 * cpu_time_ms, read alone (a session's step). */
int64_t moat_cgroup_cpu_ms(const struct moat_cgroup *cg);
/* For the thrash watch (runner/thrash.c): the run's memory limit is a
 * cgroup v2 one (memory.max); then moat_cgroup_memory_stall reads how often
 * it was hit (memory.events "max") and how long all the run's tasks have
 * stalled on memory together (memory.pressure "full" total, µs): 0, or -1
 * without a v2 memory limit or without PSI. */
bool moat_cgroup_memory_is_v2(const struct moat_cgroup *cg);
int moat_cgroup_memory_stall(const struct moat_cgroup *cg, int64_t *limit_hits,
			     int64_t *full_us);
/* moat doctor and moat serve (src/admin/, moat_admin.h's
 * moat_cgroup_describe and moat_cgroup_delegate): print_where says where
 * cgroup v2 is and which parent moat would use, changing nothing;
 * delegate_now does now, once, what the first run asking for a limit would
 * do about delegation (note: malloc'd, or NULL when nothing was needed). */
/* moat doctor: what moving a run's pid 1 into its v1 leaves costs here
 * (joincost.c says why it can wait for an RCU grace period): moves a
 * throwaway child into cg's leaves samples times, each after gap_ms of
 * quiet, as moat_cgroup_attach does for a run; the median in *median_ms.
 * *favordynmods: a cgroup mount has it. 0; 1 when cg has no v1 leaf (the
 * figure does not apply: cgroup v2, or none writable); -1 with *err. */
int moat_cgroup_v1_join_cost(struct moat_cgroup *cg, struct moat_result *res, int samples,
			     int gap_ms, double *median_ms, bool *favordynmods, struct moat_error *err);
int moat_cgroup_print_where(FILE *out);
int moat_cgroup_delegate_now(char **note);

#endif
