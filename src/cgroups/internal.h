/* cgroups module internals the unit tests reach: pure parsers (parse.c,
 * unit-tested against fixtures), the file helpers (files.c), the stale-leaf
 * scan (sweep.c) and systemd delegation's pure parts (systemd.c). The
 * backends' private plumbing is backend.h. */
#ifndef MOAT_CGROUPS_INTERNAL_H
#define MOAT_CGROUPS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum moat_cg_mech { MOAT_CG_NONE = 0, MOAT_CG_RLIMIT, MOAT_CG_V1, MOAT_CG_V2 };
/* "none", "rlimit", "cgroup-v1", "cgroup-v2" (static strings for the result) */
const char *moat_cg_mech_name(enum moat_cg_mech m);

/* v1 controllers moat uses, in this order everywhere */
enum moat_cg_v1ctl { MOAT_V1_MEMORY = 0, MOAT_V1_PIDS, MOAT_V1_CPU, MOAT_V1_CPUACCT, MOAT_V1__COUNT };
const char *moat_cg_v1_name(enum moat_cg_v1ctl c);

/* The cpu.max / cpu.cfs_* period moat always uses. */
#define MOAT_CG_CPU_PERIOD 100000
/* The kernel's smallest cfs quota (1 ms). */
#define MOAT_CG_CPU_MIN_QUOTA 1000

/* /proc/<pid>/cgroup: "0::/path" (v2) and "N:ctl[,ctl]:/path" (v1). */
struct moat_cg_self {
	char *v2;                  /* path of the "0::" line, or NULL */
	char *v1[MOAT_V1__COUNT];  /* path per v1 controller, or NULL */
};
/* 0, or -1 with errno (EINVAL: malformed line, ENOMEM). */
int moat_cg_parse_self(const char *text, struct moat_cg_self *out);
void moat_cg_self_free(struct moat_cg_self *s);

/* The common ancestor of two cgroup paths of one hierarchy ("/a/b/c" and
 * "/a/b/d" → "/a/b"; "/x" and "/y" → "/"), compared component by component
 * ("/ab" is no ancestor of "/abc"); empty and "." components are ignored.
 * cgroup v2 moves a process (cgroup.procs, CLONE_INTO_CGROUP) only for a
 * caller that may write the cgroup.procs of the common ancestor of its
 * cgroup and the destination. Malloc'd, or NULL with errno: EINVAL when a
 * path is not absolute or has a ".." component (a cgroup outside the
 * caller's cgroup namespace: "/../x"), ENOMEM. */
char *moat_cg_common_ancestor(const char *a, const char *b);

/* Flat-keyed files ("key value" per line: memory.events, pids.events,
 * cpu.stat, memory.oom_control): 1 and *out when key is present with a
 * number ("max" reads as INT64_MAX), 0 when absent or not a number. */
int moat_cg_kv_get(const char *text, const char *key, int64_t *out);
/* The cumulative stall time (total=, in µs) on the "some" or "full" line of
 * a PSI pressure file. 1 found, 0 absent or malformed. */
int moat_cg_pressure_total(const char *text, const char *kind, int64_t *out);
/* A file holding one number ("max" → INT64_MAX): 1 with *out, else 0. */
int moat_cg_parse_number(const char *text, int64_t *out);

/* cfs quota in µs for cpus CPUs over MOAT_CG_CPU_PERIOD, at least
 * MOAT_CG_CPU_MIN_QUOTA. */
int64_t moat_cg_cpu_quota(double cpus);
/* "QUOTA PERIOD" for cpu.max, e.g. 0.25 → "25000 100000". -1 if it does not fit. */
int moat_cg_format_cpu_max(double cpus, char *buf, size_t len);

/* Leaf names: "moat-<pid>-t<start>-<counter>", start the owner's start
 * time (/proc/<pid>/stat field 22, clock ticks since boot), or
 * "moat-<pid>-<counter>" when it is unknown (0; and moats before it); the
 * supervisor's own leaf on a delegated v2 cgroup is "moat-<pid>-supervisor".
 * The start time tells a live owner from a process that got its pid since. */
#define MOAT_CG_SUPERVISOR_SUFFIX "supervisor"
int moat_cg_leaf_name(pid_t pid, uint64_t start, unsigned counter, char *buf, size_t len);
/* 1 and *pid, *start (0: not in the name) when name is "moat-<pid>-<non-empty
 * suffix>", else 0. */
int moat_cg_leaf_owner(const char *name, pid_t *pid, uint64_t *start);
int moat_cg_leaf_pid(const char *name, pid_t *pid);
/* /proc/<pid>/stat's starttime (field 22; comm may hold spaces and
 * parentheses): 1 and *out, else 0. */
int moat_cg_stat_starttime(const char *text, uint64_t *out);
/* That of pid now, 0 when unknown. */
uint64_t moat_cg_pid_start(pid_t pid);
/* A leaf left behind by a run whose supervisor no longer exists. */
bool moat_cg_leaf_stale(const char *name, bool (*alive)(pid_t pid, uint64_t start));
/* kill(pid, 0) based liveness (EPERM counts as alive); with a start time,
 * a pid whose process started at another time is not the owner (unknown
 * counts as alive). */
bool moat_cg_pid_alive(pid_t pid, uint64_t start);

/* ---- files (files.c; untrusted contents read whole, malloc'd) ---- */
/* file relative to the directory fd dfd (O_PATH is enough; AT_FDCWD: a
 * path), opened O_CLOEXEC: a run's leaves are read and written this way */
char *moat_cg_read_at(int dfd, const char *file);
int moat_cg_write_at(int dfd, const char *file, const char *value);
/* dir/file joined: one-off reads and writes of the host's cgroups */
char *moat_cg_path(const char *dir, const char *file);
char *moat_cg_read(const char *dir, const char *file);
int moat_cg_write(const char *dir, const char *file, const char *value);
/* Removes a leaf directory, retrying up to about 1 s while it is still busy
 * (processes draining). 0 or -1 with errno. */
int moat_cg_rmdir_wait(const char *dir);
/* Removes sibling leaves under parent left by supervisors that are gone
 * (sweep.c). */
void moat_cg_remove_stale(const char *parent);
/* The same, counting: *found such leaves (may be NULL), *removed of them
 * (rmdir'd when remove; a leaf with processes in it stays). */
void moat_cg_scan_stale(const char *parent, bool remove, unsigned *found, unsigned *removed);

/* ---- delegation from the user's systemd (systemd.c) ---- */
/* Whether a run asks systemd for a delegated scope: a unified host, no
 * usable v2 parent, none named by MOAT_CGROUP_PARENT (the caller's choice
 * stands), not root, and the request asks for a limit. */
bool moat_cg_delegation_wanted(bool v2_pure, bool have_parent, bool parent_from_env, uid_t euid,
			       bool want_limit);
/* The user bus address: dbus_env when set (DBUS_SESSION_BUS_ADDRESS, as
 * given), else unix:path=<xdg_env>/bus (XDG_RUNTIME_DIR, absolute), else
 * unix:path=/run/user/<uid>/bus when owned_socket says it is a socket of
 * uid. Malloc'd, or NULL with *why (malloc'd; NULL: out of memory). */
char *moat_cg_user_bus(const char *dbus_env, const char *xdg_env, uid_t uid,
		       bool (*owned_socket)(const char *path, uid_t uid), char **why);
/* D-Bus address value escaping ("/run/user/1000/bus" unchanged; others %XX). */
char *moat_cg_dbus_escape(const char *s);
/* "moat-<pid>-<8 hex>.scope"; 0, or -1 when it does not fit. */
int moat_cg_scope_name(pid_t pid, uint32_t rnd, char *buf, size_t len);
/* true when cgroup path v2path is the unit's own cgroup (last component). */
bool moat_cg_path_in_unit(const char *v2path, const char *unit);
/* A sentence for a failed step: r a negative errno, or the D-Bus error
 * name and message; a hint for the common causes. Malloc'd. */
char *moat_cg_systemd_error(const char *step, int r, const char *bus_name, const char *bus_msg,
			    const char *addr);
/* Asks the user manager for a transient scope moat-<pid>-<random>.scope in
 * app.slice with Delegate=yes and PIDs=[getpid()], waits for its start job
 * and for /proc/self/cgroup to name it, all within timeout_ms. 0 with *unit
 * (malloc'd), or -1 with *why (malloc'd, names the systemd error). Loads
 * libsystemd on first use. The caller re-probes its cgroup either way. */
int moat_cg_systemd_delegate(int timeout_ms, char **unit, char **why);
/* For moat doctor, changing nothing: 0 with the manager's *version and the
 * bus *addr (malloc'd), or -1 with *why (malloc'd). */
int moat_cg_systemd_reachable(int timeout_ms, char **version, char **addr, char **why);

#endif
