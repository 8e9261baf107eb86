/* The limits manager's face (cgroups.h): picks, per limit, the best
 * mechanism this host offers (cgroup v2 → cgroup v1 → rlimit → none),
 * creates the run's leaves, reads the statistics after the run and removes
 * everything it created. The mechanisms are a file each (backend.h lists
 * them); this file only sequences them and reads the figures.
 *
 * Where the leaves go:
 *  - cgroup v2 (/sys/fs/cgroup is cgroup2): $MOAT_CGROUP_PARENT when set (a
 *    cgroup path such as /moat.slice or /sys/fs/cgroup/moat.slice), else
 *    the cgroup moat runs in when it is writable (delegated). In the latter
 *    case moat first moves itself into a sibling leaf moat-<pid>-supervisor
 *    so the parent holds no processes and controllers can be enabled in its
 *    cgroup.subtree_control (v2.c). Rootless without delegation, a run
 *    asking for a limit first asks the user's systemd for a delegated scope
 *    (scope.c).
 *  - cgroup v1: a leaf under the cgroup moat is in, per controller (memory,
 *    pids, cpu, cpuacct); the child joins them in moat_cgroup_attach before
 *    it is released (v1.c). On hybrid hosts a leaf in the cgroup2 mount is
 *    also used for CLONE_INTO_CGROUP, cgroup.kill and cpu.stat.
 *  - otherwise rlimits for the program: memory → RLIMIT_DATA, pids →
 *    RLIMIT_NPROC, cpu → not expressible (reported "none") (rlimit.c).
 * Leaves of moats that are gone are swept by later runs and moat serve
 * (sweep.c). The leaves' directory fds (O_CLOEXEC) live in the record
 * until moat_cgroup_finish closes them; pid 1 closes every fd it does not
 * own, so none reaches the sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroups/backend.h"

#define fmt moat_format

static void cg_free(struct moat_cgroup *cg, struct moat_result *res);

static unsigned next_counter(void)
{
	static unsigned counter; /* leaf names unique within the process */
	return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

/* This process's start time, for its leaves' names (0: unknown). Read once
 * per pid (a fork's child reads its own); threads racing here store the
 * same figure. */
static uint64_t self_start(void)
{
	static _Atomic uint64_t cached;
	static _Atomic pid_t cached_pid;
	pid_t me = getpid();
	if (atomic_load(&cached_pid) == me)
		return atomic_load(&cached);
	uint64_t v = moat_cg_pid_start(me);
	atomic_store(&cached, v);
	atomic_store(&cached_pid, me);
	return v;
}

int moat_cgroup_prepare(const struct moat_request *req, struct moat_result *res,
			struct moat_cgroup **out, struct moat_error *err)
{
	*out = NULL;
	res->limit_memory = res->limit_pids = res->limit_cpu = "none";
	struct moat_cgroup *cg = calloc(1, sizeof *cg);
	if (!cg)
		return moat_error_oom(err);
	cg->v2_fd = -1;
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		cg->v1_fd[i] = -1;
	bool want[L__COUNT] = { req->memory_mb > 0, req->pids_limit > 0, req->cpus > 0 };
	char *why[L__COUNT] = { NULL, NULL, NULL }; /* why a limit has no cgroup */
	struct probe p;
	cg_probe_host(&p);
	cg_scope_maybe_delegate(&p, want[L_MEMORY] || want[L_PIDS] || want[L_CPU]);
	char name[64];
	moat_cg_leaf_name(getpid(), self_start(), next_counter(), name, sizeof name);
	int rc = -1;

	/* v2: a leaf in the parent (pure v2: the limits; hybrid: kill + stats) */
	if (p.v2_parent) {
		cg->sweep[MOAT_V1__COUNT] = strdup(p.v2_parent);
		cg_v2_create(cg, &p, name, want, why);
	} else if (p.v2_pure) {
		for (int i = 0; i < L__COUNT; i++)
			if (want[i])
				why[i] = strdup(p.v2_why ? p.v2_why : "no usable cgroup2 parent");
	}
	/* v1: named now, created in moat_cgroup_attach */
	if (!p.v2_pure && cg_v1_plan(cg, &p, name, want, why, err) < 0)
		goto fail;

	/* limits, controller by controller */
	if (want[L_MEMORY] && !why[L_MEMORY]) {
		unsigned long long bytes = req->memory_mb * MIB;
		if ((cg->v2_ctl[L_MEMORY] ? cg_v2_set_memory(cg, bytes, &why[L_MEMORY], res, err)
					  : cg_v1_set_memory(cg, &p, bytes, res, err)) < 0)
			goto fail;
	}
	if (want[L_PIDS] && !why[L_PIDS]) {
		if (cg->v2_ctl[L_PIDS])
			cg_v2_set_pids(cg, req->pids_limit, &why[L_PIDS]);
		else
			cg_v1_set_pids(cg, req->pids_limit);
	}
	if (want[L_CPU] && !why[L_CPU]) {
		if (cg->v2_ctl[L_CPU])
			cg_v2_set_cpu(cg, req->cpus, &why[L_CPU]);
		else
			cg_v1_set_cpu(cg, req->cpus);
	}

	/* what no cgroup enforces: strictLimits refuses, else rlimits + warnings */
	for (int i = 0; i < L__COUNT; i++)
		if (want[i] && cg->mech[i] == MOAT_CG_NONE &&
		    cg_rlimit_fallback(cg, req, i, why[i] ? why[i] : "no cgroup is available", res,
				       err) < 0)
			goto fail;
	res->limit_memory = moat_cg_mech_name(cg->mech[L_MEMORY]);
	res->limit_pids = moat_cg_mech_name(cg->mech[L_PIDS]);
	res->limit_cpu = moat_cg_mech_name(cg->mech[L_CPU]);
	*out = cg;
	cg = NULL;
	rc = 0;
fail:
	for (int i = 0; i < L__COUNT; i++)
		free(why[i]);
	cg_probe_free(&p);
	cg_free(cg, NULL);
	return rc;
}

int moat_cgroup_clone_fd(const struct moat_cgroup *cg)
{
	return cg ? cg->v2_fd : -1;
}

bool moat_cgroup_charges_sockets(const struct moat_cgroup *cg)
{
	return cg && (cg->mech[L_MEMORY] == MOAT_CG_V2 ||
		      (cg->mech[L_MEMORY] == MOAT_CG_V1 && cg->v1_tcp));
}

const char *moat_cgroup_clone_path(const struct moat_cgroup *cg)
{
	return cg && cg->v2_fd >= 0 ? cg->v2_leaf : NULL;
}

int moat_cgroup_attach(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		       struct moat_error *err)
{
	return cg ? cg_v1_attach(cg, pid, res, err) : 0;
}

int moat_cgroup_adopt(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		      struct moat_error *err)
{
	if (moat_cgroup_attach(cg, pid, res, err) < 0)
		return -1;
	if (!cg || cg->v2_fd < 0)
		return 0;
	if (cg_v2_join(cg, pid) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot move the sandbox into %s: %s", cg->v2_leaf,
				      strerror(errno));
	return 0;
}

int moat_cgroup_kill(struct moat_cgroup *cg)
{
	if (!cg || cg->v2_fd < 0)
		return -1;
	return moat_cg_write_at(cg->v2_fd, "cgroup.kill", "1") == 0 ? 0 : -1;
}

int64_t moat_cgroup_cpu_ms(const struct moat_cgroup *cg)
{
	if (!cg)
		return -1;
	/* cpuacct.usage (ns) or cpu.stat usage_usec (a core v2 file) */
	int64_t ns = cg_read_num(cg->v1_fd[MOAT_V1_CPUACCT], "cpuacct.usage");
	if (ns >= 0)
		return ns / 1000000;
	int64_t us = cg_read_kv(cg->v2_fd, "cpu.stat", "usage_usec");
	return us >= 0 ? us / 1000 : -1;
}

/* The files only; what they mean for the run is collect's (it needs the
 * decoded status). */
static void read_figures(struct moat_cgroup *cg, struct cg_figures *f)
{
	int v2 = cg->v2_fd;
	int mem1 = cg->v1_fd[MOAT_V1_MEMORY];
	bool v2mem = cg->v2_ctl[L_MEMORY];
	*f = (struct cg_figures){ true, -1, -1, -1, -1, -1, -1, -1 };
	f->peak = v2mem ? cg_read_num(v2, "memory.peak")
			: cg_read_num(mem1, "memory.max_usage_in_bytes");
	/* cpu time: cpuacct.usage (ns) or cpu.stat usage_usec (a core v2 file) */
	f->cpu_ns = cg_read_num(cg->v1_fd[MOAT_V1_CPUACCT], "cpuacct.usage");
	if (f->cpu_ns < 0)
		f->cpu_us = cg_read_kv(v2, "cpu.stat", "usage_usec");
	if (v2mem) {
		f->oom_kills = cg_read_kv(v2, "memory.events", "oom_kill");
		f->oom_group_kills = cg_read_kv(v2, "memory.events", "oom_group_kill");
	} else if (mem1 >= 0) {
		f->oom_kills = cg_read_kv(mem1, "memory.oom_control", "oom_kill");
		if (f->oom_kills < 0) /* kernels before 4.13 */
			f->failcnt = cg_read_num(mem1, "memory.failcnt");
	}
	int pl = cg->v2_ctl[L_PIDS] ? v2 : cg->v1_fd[MOAT_V1_PIDS];
	if (cg->mech[L_PIDS] == MOAT_CG_V1 || cg->mech[L_PIDS] == MOAT_CG_V2)
		f->pids_hits = cg_read_kv(pl, "pids.events", "max");
}

static void collect(struct moat_cgroup *cg, struct moat_result *res)
{
	struct cg_figures f = cg->fig;
	if (!f.taken)
		read_figures(cg, &f);
	cg->fig.taken = false; /* a session's next step reads its own */
	bool v2mem = cg->v2_ctl[L_MEMORY];
	if (f.peak >= 0)
		res->memory_peak_bytes = f.peak;
	if (f.cpu_ns >= 0)
		res->cpu_time_ms = f.cpu_ns / 1000000;
	else if (f.cpu_us >= 0)
		res->cpu_time_ms = f.cpu_us / 1000;
	/* OOM */
	bool oom = false;
	if (v2mem)
		oom = f.oom_kills > 0 || f.oom_group_kills > 0;
	else if (cg->v1_fd[MOAT_V1_MEMORY] >= 0) {
		if (f.oom_kills >= 0)
			oom = f.oom_kills > 0;
		else /* kernels before 4.13: a SIGKILL after hitting the limit */
			oom = f.failcnt > 0 && !res->exited && res->signal == 9;
	}
	if (oom) {
		res->oom_killed = true;
		if (!res->exited && !res->timed_out)
			res->killed_by = "oom";
	}
	/* pids limit hit: the cause only when the program failed */
	if (cg->mech[L_PIDS] == MOAT_CG_V1 || cg->mech[L_PIDS] == MOAT_CG_V2) {
		int64_t hits = f.pids_hits;
		if (hits > 0) {
			bool failed = !res->exited || res->exit_code != 0;
			if (failed && !res->timed_out && !oom)
				res->killed_by = "pids";
			else
				(void)moat_result_warn(res, "the pids limit was hit %lld time(s): some "
						       "fork/clone calls failed", (long long)hits);
		}
	}
}

static void cg_remove(struct moat_result *res, const char *leaf, int fd)
{
	if (rmdir(leaf) == 0 || errno == ENOENT)
		return;
	if (fd >= 0 && errno == EBUSY) /* v2: kill what is left */
		(void)moat_cg_write_at(fd, "cgroup.kill", "1");
	if (moat_cg_rmdir_wait(leaf) < 0 && res)
		(void)moat_result_warn(res, "cgroup %s could not be removed: %s", leaf,
				       strerror(errno));
}

static void cg_free(struct moat_cgroup *cg, struct moat_result *res)
{
	if (!cg)
		return;
	for (int i = 0; i <= MOAT_V1__COUNT; i++)
		free(cg->sweep[i]);
	if (cg->v2_leaf)
		cg_remove(res, cg->v2_leaf, cg->v2_fd);
	if (cg->v2_fd >= 0)
		close(cg->v2_fd);
	free(cg->v2_leaf);
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		if (cg->v1_leaf[i])
			cg_remove(res, cg->v1_leaf[i], -1);
		if (cg->v1_fd[i] >= 0)
			close(cg->v1_fd[i]);
		free(cg->v1_leaf[i]);
	}
	free(cg);
}

int64_t moat_cgroup_memory_now(const struct moat_cgroup *cg)
{
	if (!cg)
		return -1;
	if (cg->v2_fd >= 0 && cg->v2_ctl[L_MEMORY])
		return cg_read_num(cg->v2_fd, "memory.current");
	return cg_read_num(cg->v1_fd[MOAT_V1_MEMORY], "memory.usage_in_bytes");
}

bool moat_cgroup_memory_is_v2(const struct moat_cgroup *cg)
{
	return cg && cg->v2_fd >= 0 && cg->mech[L_MEMORY] == MOAT_CG_V2;
}

int moat_cgroup_memory_stall(const struct moat_cgroup *cg, int64_t *limit_hits,
			     int64_t *full_us)
{
	if (!moat_cgroup_memory_is_v2(cg))
		return -1;
	char *t = moat_cg_read_at(cg->v2_fd, "memory.pressure");
	int ok = t && moat_cg_pressure_total(t, "full", full_us) == 1;
	free(t);
	if (!ok || (*limit_hits = cg_read_kv(cg->v2_fd, "memory.events", "max")) < 0)
		return -1;
	return 0;
}

void moat_cgroup_snapshot(struct moat_cgroup *cg)
{
	if (cg && !cg->fig.taken)
		read_figures(cg, &cg->fig);
}

void moat_cgroup_collect(struct moat_cgroup *cg, struct moat_result *res)
{
	if (cg && res)
		collect(cg, res);
}

void moat_cgroup_finish(struct moat_cgroup *cg, struct moat_result *res)
{
	if (!cg)
		return;
	if (res)
		collect(cg, res);
	cg_free(cg, res);
}

/* ---- moat doctor --------------------------------------------------------- */

int moat_cgroup_print_where(FILE *out)
{
	struct probe p;
	cg_probe_host(&p);
	if (p.v2_mount)
		fprintf(out, "cgroup2:            %s (%s)\n", p.v2_mount,
			p.v2_pure ? "unified: limits use cgroup v2" : "hybrid: used for kill/cpu time only");
	if (p.v2_parent)
		fprintf(out, "cgroup2 parent:     %s%s\n", p.v2_parent,
			!p.v2_own ? " (MOAT_CGROUP_PARENT)"
			: p.v2_pure && strcmp(p.v2_parent, p.v2_mount)
				? " (moat's own cgroup; moat moves into a sibling leaf first)"
				: " (moat's own cgroup)");
	else if (p.v2_why)
		fprintf(out, "cgroup2 parent:     none%s: %s\n",
			p.v2_pure ? "" : " (on this hybrid host only for cgroup.kill)", p.v2_why);
	cg_scope_describe(out, &p);
	cg_probe_free(&p);
	unsigned found = 0, removed = 0;
	char *where = NULL;
	(void)moat_cgroup_stale_leaves(false, &found, &removed, &where);
	if (found)
		fprintf(out, "cgroup leftovers:   %u leaves of moats no longer running (%s): empty "
			"ones are removed by moat serve at its start and every minute, and by "
			"a run at most once a minute\n", found, where ? where : "?");
	else
		fprintf(out, "cgroup leftovers:   none\n");
	free(where);
	return 0;
}
