/* The cgroups module's private plumbing: the run's cgroup record, the host
 * probe, and the steps each mechanism's file offers to the face
 * (cgroups.c). One file per mechanism, as crun splits libcrun/cgroup-*.c:
 *   probe.c   what the host offers, found without changing anything
 *   scope.c   a delegated scope from the user's systemd (the sd-bus talk
 *             itself is systemd.c)
 *   v2.c      the unified hierarchy: controllers, the leaf, its limits
 *   v1.c      the v1 controllers: a leaf each, created and joined in attach
 *   rlimit.c  the fallback for the program when no cgroup enforces a limit
 *   sweep.c   leaves of supervisors that no longer exist
 *   files.c   reading and writing cgroup files, relative to a directory fd
 * Nothing outside src/cgroups/ includes this. */
#ifndef MOAT_CGROUPS_BACKEND_H
#define MOAT_CGROUPS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cgroups/cgroups.h"
#include "cgroups/internal.h"
#include "core/sys.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP_UNIFIED CGROUP_ROOT "/unified"
#define MIB (1024ull * 1024ull)

/* the limits a request may ask for, in this order everywhere */
enum { L_MEMORY = 0, L_PIDS, L_CPU, L__COUNT };
extern const char *const MOAT_CG_V2_CTL[L__COUNT]; /* "memory", "pids", "cpu" */

/* the figures as moat_cgroup_snapshot read them (-1: not there), until
 * moat_cgroup_collect takes them */
struct cg_figures {
	bool taken;
	int64_t peak, cpu_ns, cpu_us, oom_kills, oom_group_kills, failcnt, pids_hits;
};

struct moat_cgroup {
	enum moat_cg_mech mech[L__COUNT]; /* how each requested limit is enforced */
	char *v2_leaf;                    /* absolute path, or NULL */
	int v2_fd;                        /* O_PATH fd of v2_leaf, or -1: clone3's
					     CLONE_INTO_CGROUP and every file of the leaf */
	bool v2_ctl[L__COUNT];            /* controller enabled in v2_leaf */
	char *v1_leaf[MOAT_V1__COUNT];    /* absolute paths, or NULL; created in attach */
	int v1_fd[MOAT_V1__COUNT];        /* O_PATH fds of them once created, or -1 */
	/* v1 limits, written in moat_cgroup_attach (0: none) */
	unsigned long long v1_mem, v1_pids;
	int64_t v1_cpu_quota;
	bool v1_memsw;                    /* memory.memsw.limit_in_bytes exists */
	bool v1_tcp;                      /* memory.kmem.tcp.limit_in_bytes exists */
	char *sweep[MOAT_V1__COUNT + 1];  /* parents to clear of stale leaves, or NULL */
	struct moat_cgroup_rlimit rl[MOAT_CGROUP_MAX_RLIMITS]; /* fallbacks for the program */
	size_t nrl;
	struct cg_figures fig;
};

/* What the host offers, found without changing anything. */
struct probe {
	struct moat_cg_self self;
	bool self_ok;
	const char *v2_mount;     /* NULL when no cgroup2 is mounted */
	bool v2_pure;             /* cgroup2 at /sys/fs/cgroup: the limits live there */
	char *v2_parent;          /* where v2 run leaves go, or NULL */
	bool v2_own;              /* v2_parent is moat's own cgroup */
	bool v2_env;              /* MOAT_CGROUP_PARENT is set */
	bool v2_avail[L__COUNT];  /* controller listed in v2_parent's cgroup.controllers */
	char *v2_why;             /* why there is no usable v2 parent */
	char *v1_parent[MOAT_V1__COUNT];
	char *v1_why[MOAT_V1__COUNT];
};

/* ---- probe.c ---- */
void cg_probe_host(struct probe *p);
void cg_probe_free(struct probe *p);
/* word as a whole word of a space or newline separated list */
bool cg_word_in(const char *list, const char *word);

/* ---- scope.c ---- */
/* After cg_probe_host: when the run wants a limit and no v2 parent is
 * usable, ask the user's systemd for a delegated scope (once per process)
 * and probe again; on failure the probe's reason gains systemd's. */
void cg_scope_maybe_delegate(struct probe *p, bool want_limit);
/* doctor's line on delegation from systemd, changing nothing */
void cg_scope_describe(FILE *out, const struct probe *p);

/* ---- v2.c ---- */
/* The run's leaf name under the probe's v2 parent (pure v2: controllers
 * enabled first), its O_PATH fd and enabled controllers; why[i] (malloc'd)
 * for each wanted limit the leaf cannot take. Never fails the run. */
void cg_v2_create(struct moat_cgroup *cg, struct probe *p, const char *name,
		  const bool want[L__COUNT], char *why[L__COUNT]);
/* Each sets a limit in the leaf and mech[]; *why on failure. memory also
 * writes memory.oom.group and memory.swap.max (a warning when swap stays
 * unlimited): -1 only when that warning cannot be stored (err set). */
int cg_v2_set_memory(struct moat_cgroup *cg, unsigned long long bytes, char **why,
		     struct moat_result *res, struct moat_error *err);
void cg_v2_set_pids(struct moat_cgroup *cg, unsigned long long n, char **why);
void cg_v2_set_cpu(struct moat_cgroup *cg, double cpus, char **why);
/* Writes pid to the leaf's cgroup.procs (a zygote's fork, made outside it). */
int cg_v2_join(struct moat_cgroup *cg, pid_t pid);

/* ---- v1.c ---- */
/* The paths of the run's v1 leaves (created in attach); why[i] for each
 * wanted limit without its controller. -1 only when out of memory. */
int cg_v1_plan(struct moat_cgroup *cg, const struct probe *p, const char *name,
	       const bool want[L__COUNT], char *why[L__COUNT], struct moat_error *err);
/* Records the limits attach writes (the parent has the leaf's files). */
int cg_v1_set_memory(struct moat_cgroup *cg, const struct probe *p, unsigned long long bytes,
		     struct moat_result *res, struct moat_error *err);
void cg_v1_set_pids(struct moat_cgroup *cg, unsigned long long n);
void cg_v1_set_cpu(struct moat_cgroup *cg, double cpus);
/* Creates the leaves, writes the limits, moves pid in. */
int cg_v1_attach(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		 struct moat_error *err);

/* ---- rlimit.c ---- */
/* The fallback for limit i that no cgroup enforces (w: why not): an rlimit
 * for the program or, for cpus, nothing; a warning says which. -1 with err
 * when strictLimits refuses or out of memory. */
int cg_rlimit_fallback(struct moat_cgroup *cg, const struct moat_request *req, int i,
		       const char *w, struct moat_result *res, struct moat_error *err);

/* ---- files.c: a cgroup's files relative to its directory fd ---- */
/* A warning on the result; -1 with err when out of memory. */
int cg_warn(struct moat_result *res, struct moat_error *err, const char *f, ...)
	__attribute__((format(printf, 3, 4)));
/* One number ("max": INT64_MAX), or a key of a flat-keyed file; -1 when
 * absent (dfd < 0 included). */
int64_t cg_read_num(int dfd, const char *file);
int64_t cg_read_kv(int dfd, const char *file, const char *key);
int cg_write_u64(int dfd, const char *file, unsigned long long v);

#endif
