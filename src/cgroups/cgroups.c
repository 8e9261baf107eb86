/* The limits manager: picks, per limit, the best mechanism this host offers
 * (cgroup v2 → cgroup v1 → rlimit → none), creates the run's leaves, reads
 * the statistics after the run and removes everything it created.
 *
 * Where the leaves go:
 *  - cgroup v2 (/sys/fs/cgroup is cgroup2): $MOAT_CGROUP_PARENT when set (a
 *    cgroup path such as /moat.slice or /sys/fs/cgroup/moat.slice), else
 *    the cgroup moat runs in when it is writable (delegated). In the latter
 *    case moat first moves itself into a sibling leaf moat-<pid>-supervisor
 *    so the parent holds no processes and controllers can be enabled in its
 *    cgroup.subtree_control. Rootless without delegation (a terminal's
 *    session-N.scope), a run asking for a limit first asks the user's
 *    systemd for a transient scope with Delegate=yes holding moat
 *    (systemd.c), once per process, and probes again: the scope is then
 *    moat's own, delegated cgroup. If that fails, the fallback's warning
 *    names the systemd error.
 *  - cgroup v1: a leaf under the cgroup moat is in, per controller (memory,
 *    pids, cpu, cpuacct); the child joins them in moat_cgroup_attach before
 *    it is released. On hybrid hosts a leaf in the cgroup2 mount is also
 *    used for CLONE_INTO_CGROUP, cgroup.kill and cpu.stat.
 *  - otherwise rlimits for the program: memory → RLIMIT_DATA, pids →
 *    RLIMIT_NPROC, cpu → not expressible (reported "none").
 * Leaves are named moat-<pid>-t<start>-<counter> (start: the owner's start
 * time, /proc/<pid>/stat field 22; moat-<pid>-<counter> when unknown, and
 * from moats before it); leaves of supervisors that no longer exist are
 * removed (rmdir only, never killed) by later runs, while their program
 * starts (moat_cgroup_sweep: a process's first run, then at most once a
 * minute), and without a run by moat serve at its start and every minute
 * (moat_cgroup_stale_leaves, which moat doctor uses to count them).
 * Liveness is kill(pid, 0) in moat's pid namespace, and the start time when
 * the name has one (a pid reused since is another process), so two moats in
 * different pid namespaces sharing one cgroup parent should not share it.
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
 * reported as "none" with a warning rather than approximated. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "cgroups/cgroups.h"
#include "cgroups/internal.h"
#include "core/stamp.h"
#include "core/sys.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP_UNIFIED CGROUP_ROOT "/unified"
#define MIB (1024ull * 1024ull)
/* node needs about 48 MiB of RLIMIT_DATA to start (measured, node 20) */
#define NODE_MIN_DATA_MB 64

enum { L_MEMORY = 0, L_PIDS, L_CPU, L__COUNT };
static const char *const V2_CTL[L__COUNT] = { "memory", "pids", "cpu" };
static const char *const REQ_NAME[L__COUNT] = { "memoryMb", "pidsLimit", "cpus" };

struct moat_cgroup {
	enum moat_cg_mech mech[L__COUNT]; /* how each requested limit is enforced */
	char *v2_leaf;                    /* absolute path, or NULL */
	int v2_fd;                        /* O_PATH fd of v2_leaf, or -1 */
	bool v2_ctl[L__COUNT];            /* controller enabled in v2_leaf */
	char *v1_leaf[MOAT_V1__COUNT];    /* absolute paths, or NULL; created in attach */
	/* v1 limits, written in moat_cgroup_attach (0: none) */
	unsigned long long v1_mem, v1_pids;
	int64_t v1_cpu_quota;
	bool v1_memsw;                    /* memory.memsw.limit_in_bytes exists */
	bool v1_tcp;                      /* memory.kmem.tcp.limit_in_bytes exists */
	char *sweep[MOAT_V1__COUNT + 1];  /* parents to clear of stale leaves, or NULL */
	struct moat_cgroup_rlimit rl[MOAT_CGROUP_MAX_RLIMITS]; /* fallbacks for the program */
	size_t nrl;
	/* the figures as moat_cgroup_snapshot read them (-1: not there), until
	 * moat_cgroup_collect takes them */
	struct cg_figures {
		bool taken;
		int64_t peak, cpu_ns, cpu_us, oom_kills, oom_group_kills, failcnt, pids_hits;
	} fig;
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

#define fmt moat_format

static bool is_fs(const char *path, unsigned long magic)
{
	struct statfs sfs;
	return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == magic;
}

static bool word_in(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p && (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == '\n') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

static void probe_free(struct probe *p)
{
	moat_cg_self_free(&p->self);
	free(p->v2_parent);
	free(p->v2_why);
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		free(p->v1_parent[i]);
		free(p->v1_why[i]);
	}
	memset(p, 0, sizeof *p);
}

/* cgroup v2's migration rule: a process may be moved (clone3 with
 * CLONE_INTO_CGROUP, or a write to cgroup.procs) only by a caller that may
 * write cgroup.procs of the common ancestor of the process's cgroup and the
 * destination (kernel: cgroup_procs_write_permission → cgroup_may_write, an
 * inode_permission(MAY_WRITE) on that file). A run's leaf goes under dir,
 * so that ancestor is the one of moat's cgroup and dir. Checked with
 * faccessat(AT_EACCESS), which runs the same inode_permission with moat's
 * effective credentials (mode, owner, group, ACLs, CAP_DAC_OVERRIDE); a copy
 * of that logic over stat() would miss ACLs, supplementary groups and
 * capabilities. It is stricter only where the kernel's check would fail
 * anyway (a read-only mount, an unsearchable directory). NULL when the move
 * is allowed, else why not (malloc'd): the run then falls back like a parent
 * that is not writable, instead of failing in clone3 with EPERM. */
static char *v2_migration_denied(const struct probe *p, const char *dir)
{
	size_t ml = strlen(p->v2_mount);
	const char *rel = dir[ml] ? dir + ml : "/";
	const char *self = p->self.v2;
	if (!self)
		return fmt("/proc/self/cgroup has no cgroup2 entry, so moat cannot tell whether "
			   "it may move the sandbox into %s", dir);
	char *anc = moat_cg_common_ancestor(self, rel);
	if (!anc) {
		if (errno == ENOMEM)
			return NULL; /* clone3 will tell */
		return fmt("moat's cgroup %s is outside its cgroup namespace, so it may not move "
			   "the sandbox into %s (cgroup v2 moves processes only within the "
			   "namespace); run moat in a cgroup inside the delegated subtree, e.g. "
			   "`systemd-run --user --scope -p Delegate=yes moat ...`", self, dir);
	}
	char *ancdir = strcmp(anc, "/") ? fmt("%s%s", p->v2_mount, anc) : strdup(p->v2_mount);
	char *procs = ancdir ? moat_cg_path(ancdir, "cgroup.procs") : NULL;
	char *why = NULL;
	if (procs && faccessat(AT_FDCWD, procs, W_OK, AT_EACCESS) < 0) {
		int e = errno;
		char *selfdir = strcmp(self, "/") ? fmt("%s%s", p->v2_mount, self)
						  : strdup(p->v2_mount);
		why = fmt("moat may not move the sandbox into a cgroup under %s: cgroup v2 allows "
			  "the move only for a caller that may write cgroup.procs of the common "
			  "ancestor of its own cgroup (%s) and the destination (the common-ancestor "
			  "rule), here %s, and %s is not writable by uid %ld (%s); put moat in a "
			  "cgroup inside the delegated subtree, e.g. `systemd-run --user --scope -p "
			  "Delegate=yes moat ...`, or set MOAT_CGROUP_PARENT to a directory inside "
			  "the subtree moat already runs in (%s)", dir, selfdir ? selfdir : self,
			  ancdir, procs, (long)geteuid(), strerror(e), selfdir ? selfdir : self);
		free(selfdir);
	}
	free(procs);
	free(ancdir);
	free(anc);
	return why;
}

/* The v2 parent: $MOAT_CGROUP_PARENT or moat's own cgroup. */
static void probe_v2_parent(struct probe *p)
{
	const char *conf = secure_getenv("MOAT_CGROUP_PARENT");
	char *dir = NULL;
	p->v2_env = conf && *conf;
	if (conf && *conf) {
		size_t ml = strlen(p->v2_mount);
		if (conf[0] != '/' || strstr(conf, "/../") ||
		    (strlen(conf) >= 3 && !strcmp(conf + strlen(conf) - 3, "/.."))) {
			p->v2_why = fmt("MOAT_CGROUP_PARENT=%s is not an absolute cgroup path", conf);
			return;
		}
		if (!strncmp(conf, p->v2_mount, ml) && (conf[ml] == '/' || conf[ml] == '\0'))
			dir = strdup(conf);
		else
			dir = fmt("%s%s", p->v2_mount, conf);
		if (!dir)
			return;
		if (!is_fs(dir, CGROUP2_SUPER_MAGIC) || access(dir, W_OK) < 0) {
			p->v2_why = fmt("MOAT_CGROUP_PARENT %s is not a writable cgroup2 directory (%s)",
					dir, strerror(errno ? errno : ENOTDIR));
			free(dir);
			return;
		}
	} else {
		if (!p->self.v2) {
			p->v2_why = fmt("/proc/self/cgroup has no cgroup2 entry");
			return;
		}
		dir = fmt("%s%s", p->v2_mount, strcmp(p->self.v2, "/") ? p->self.v2 : "");
		if (!dir)
			return;
		/* a later run of the same process: moat already sits in its
		 * supervisor leaf; the delegated parent is one up */
		char sup[64];
		snprintf(sup, sizeof sup, "/moat-%ld-" MOAT_CG_SUPERVISOR_SUFFIX, (long)getpid());
		size_t dl = strlen(dir), sl = strlen(sup);
		if (dl > sl && !strcmp(dir + dl - sl, sup))
			dir[dl - sl] = '\0';
		p->v2_own = true;
		if (access(dir, W_OK) < 0) {
			p->v2_why = fmt("moat's cgroup %s is not delegated to uid %ld (not writable); "
					"run moat with delegation, e.g. `systemd-run --user --scope "
					"-p Delegate=yes moat ...`, or set MOAT_CGROUP_PARENT to a "
					"writable cgroup", dir, (long)geteuid());
			free(dir);
			return;
		}
	}
	char *sub = moat_cg_path(dir, "cgroup.subtree_control");
	bool ok = sub && access(sub, W_OK) == 0;
	free(sub);
	if (!ok) {
		p->v2_why = fmt("%s/cgroup.subtree_control is not writable; get delegation with "
				"`systemd-run --user --scope -p Delegate=yes moat ...`", dir);
		free(dir);
		return;
	}
	p->v2_why = v2_migration_denied(p, dir);
	if (p->v2_why) {
		free(dir);
		return;
	}
	char *ctl = moat_cg_read(dir, "cgroup.controllers");
	for (int i = 0; i < L__COUNT; i++)
		p->v2_avail[i] = ctl && word_in(ctl, V2_CTL[i]);
	free(ctl);
	p->v2_parent = dir;
}

static void probe_host(struct probe *p)
{
	memset(p, 0, sizeof *p);
	char *text = moat_cg_read("/proc/self", "cgroup");
	p->self_ok = text && moat_cg_parse_self(text, &p->self) == 0;
	free(text);
	if (!p->self_ok) {
		p->v2_why = fmt("cannot read /proc/self/cgroup");
		for (int i = 0; i < MOAT_V1__COUNT; i++)
			p->v1_why[i] = fmt("cannot read /proc/self/cgroup");
		return;
	}
	if (is_fs(CGROUP_ROOT, CGROUP2_SUPER_MAGIC)) {
		p->v2_mount = CGROUP_ROOT;
		p->v2_pure = true;
	} else if (is_fs(CGROUP_UNIFIED, CGROUP2_SUPER_MAGIC)) {
		p->v2_mount = CGROUP_UNIFIED;
	}
	if (p->v2_mount)
		probe_v2_parent(p);
	else
		p->v2_why = fmt("no cgroup2 filesystem at " CGROUP_ROOT " or " CGROUP_UNIFIED);
	if (p->v2_pure)
		return; /* no v1 controllers on a unified host */
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		const char *name = moat_cg_v1_name((enum moat_cg_v1ctl)i);
		char *mnt = fmt(CGROUP_ROOT "/%s", name);
		if (!mnt)
			continue;
		if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || !p->self.v1[i]) {
			p->v1_why[i] = fmt("the cgroup v1 %s controller is not mounted at %s", name, mnt);
		} else {
			char *dir = fmt("%s%s", mnt, strcmp(p->self.v1[i], "/") ? p->self.v1[i] : "");
			if (dir && access(dir, W_OK) == 0)
				p->v1_parent[i] = dir;
			else {
				if (dir)
					p->v1_why[i] = fmt("the cgroup v1 %s hierarchy at %s is not "
							   "writable by uid %ld", name, dir, (long)geteuid());
				free(dir);
			}
		}
		free(mnt);
	}
}

/* ---- creating ---------------------------------------------------------- */

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

static char *make_leaf(const char *parent, const char *name)
{
	char *leaf = moat_cg_path(parent, name);
	if (leaf && mkdir(leaf, 0755) < 0 && errno != EEXIST) {
		free(leaf);
		return NULL;
	}
	return leaf;
}

static int write_u64(const char *dir, const char *file, unsigned long long v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", v);
	return moat_cg_write(dir, file, buf);
}

/* true when processes live in dir (its cgroup.procs is not empty) */
static bool has_procs(const char *dir)
{
	char *t = moat_cg_read(dir, "cgroup.procs");
	bool any = t && t[strspn(t, " \n")] != '\0';
	free(t);
	return any;
}

/* The hierarchy's real root, which the no-internal-processes rule
 * exempts. A cgroup namespace's root (a container's "/") is not: the
 * kernel leaves cgroup.type off the real root only. */
static bool v2_real_root(const char *dir)
{
	char *t = moat_cg_path(dir, "cgroup.type");
	bool root = t && access(t, F_OK) < 0 && errno == ENOENT;
	free(t);
	return root;
}

/* Writes op ("+memory") to parent's cgroup.subtree_control. Below the
 * root, a cgroup where processes live gets no controller: the kernel
 * refuses the domain ones (memory) with EBUSY, and would accept the
 * threaded ones (pids, cpu) but that makes the cgroup a thread root, whose
 * domain children are invalid (clone3 CLONE_INTO_CGROUP into the run's
 * leaf fails with EOPNOTSUPP), so they are refused here the same way. */
static int v2_enable_one(const struct probe *p, const char *op)
{
	if (!v2_real_root(p->v2_parent) && has_procs(p->v2_parent)) {
		errno = EBUSY;
		return -1;
	}
	return moat_cg_write(p->v2_parent, "cgroup.subtree_control", op);
}

/* Enables the available controllers in parent's subtree, moving moat into
 * a sibling leaf first when it lives in parent. When other processes live
 * there too, moat moves back and removes that leaf: it would gain nothing,
 * and an empty leaf of a moat that has exited is only removed by a later
 * run. Returns a reason string (malloc'd) when some controller could not
 * be enabled, else NULL. */
static char *v2_enable(struct probe *p)
{
	char *cur = moat_cg_read(p->v2_parent, "cgroup.subtree_control");
	bool tried_move = false;
	char *why = NULL;
	for (int i = 0; i < L__COUNT; i++) {
		if (!p->v2_avail[i] || (cur && word_in(cur, V2_CTL[i])))
			continue;
		char op[16];
		snprintf(op, sizeof op, "+%s", V2_CTL[i]);
		int rc = v2_enable_one(p, op);
		if (rc < 0 && errno == EBUSY && p->v2_own && !tried_move) {
			/* no internal processes: leave the parent for a sibling leaf.
			 * This includes the mount's root: EBUSY there means it is
			 * the root of a cgroup namespace, not the real root (which
			 * the rule exempts), as for a container's pid 1 in a pod */
			tried_move = true;
			char name[64];
			snprintf(name, sizeof name, "moat-%ld-" MOAT_CG_SUPERVISOR_SUFFIX, (long)getpid());
			char *sup = make_leaf(p->v2_parent, name);
			char pid[24];
			snprintf(pid, sizeof pid, "%ld", (long)getpid());
			bool moved = sup && moat_cg_write(sup, "cgroup.procs", pid) == 0;
			if (moved)
				rc = v2_enable_one(p, op);
			if (sup && rc < 0) {
				int e = errno;
				if (!moved || moat_cg_write(p->v2_parent, "cgroup.procs", pid) == 0)
					(void)rmdir(sup);
				errno = e;
			}
			free(sup);
		}
		if (rc < 0) {
			int e = errno;
			p->v2_avail[i] = false;
			if (!why)
				why = fmt("cannot enable the %s controller in %s/cgroup.subtree_control: "
					  "%s%s", V2_CTL[i], p->v2_parent, strerror(e),
					  e == EBUSY ? " (other processes live in that cgroup; "
						       "give moat a cgroup of its own)" : "");
		}
	}
	free(cur);
	return why;
}

static int warn(struct moat_result *res, struct moat_error *err, const char *f, ...)
	__attribute__((format(printf, 3, 4)));
static int warn(struct moat_result *res, struct moat_error *err, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	char *s = moat_vformat(f, ap);
	va_end(ap);
	int rc = s ? moat_result_warn(res, "%s", s) : -1;
	free(s);
	if (rc < 0)
		return moat_error_oom(err);
	return 0;
}

static void cg_free(struct moat_cgroup *cg, struct moat_result *res);

/* ---- delegation from systemd --------------------------------------------- */

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

/* After probe_host: when the run wants a limit and no v2 parent is usable,
 * ask systemd and probe again (moat's cgroup is read anew from
 * /proc/self/cgroup and checked like any other: nothing systemd said is
 * trusted). On failure the probe's reason gains systemd's. */
static void maybe_delegate(struct probe *p, bool want_limit)
{
	if (!moat_cg_delegation_wanted(p->v2_pure, p->v2_parent != NULL, p->v2_env, geteuid(),
				       want_limit && p->self_ok))
		return;
	char *dwhy = NULL;
	int rc = systemd_delegate(&dwhy);
	moat_stamp("sup: systemd asked");
	if (rc == 0) {
		probe_free(p);
		probe_host(p);
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
	probe_host(&p);
	bool wanted = moat_cg_delegation_wanted(p.v2_pure, p.v2_parent != NULL, p.v2_env,
						 geteuid(), p.self_ok);
	int rc = 0;
	if (wanted) {
		maybe_delegate(&p, true);
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
	probe_free(&p);
	return rc;
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
	bool want[L__COUNT] = { req->memory_mb > 0, req->pids_limit > 0, req->cpus > 0 };
	char *why[L__COUNT] = { NULL, NULL, NULL }; /* why a limit has no cgroup */
	struct probe p;
	probe_host(&p);
	maybe_delegate(&p, want[L_MEMORY] || want[L_PIDS] || want[L_CPU]);
	char name[64];
	moat_cg_leaf_name(getpid(), self_start(), next_counter(), name, sizeof name);
	int rc = -1;

	/* v2: a leaf in the parent (pure v2: the limits; hybrid: kill + stats) */
	if (p.v2_parent) {
		cg->sweep[MOAT_V1__COUNT] = strdup(p.v2_parent);
		char *ewhy = p.v2_pure ? v2_enable(&p) : NULL;
		cg->v2_leaf = make_leaf(p.v2_parent, name);
		if (cg->v2_leaf)
			cg->v2_fd = open(cg->v2_leaf, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cg->v2_fd < 0) {
			int e = errno;
			if (cg->v2_leaf)
				rmdir(cg->v2_leaf);
			free(cg->v2_leaf);
			cg->v2_leaf = NULL;
			free(ewhy);
			ewhy = fmt("cannot create a cgroup under %s: %s", p.v2_parent, strerror(e));
		}
		if (cg->v2_leaf && p.v2_pure) {
			char *ctl = moat_cg_read(cg->v2_leaf, "cgroup.controllers");
			for (int i = 0; i < L__COUNT; i++)
				cg->v2_ctl[i] = ctl && word_in(ctl, V2_CTL[i]);
			free(ctl);
		}
		if (p.v2_pure)
			for (int i = 0; i < L__COUNT; i++)
				if (want[i] && !cg->v2_ctl[i])
					why[i] = ewhy ? strdup(ewhy)
						      : fmt("the cgroup v2 %s controller is not "
							    "available in %s", V2_CTL[i],
							    p.v2_parent);
		free(ewhy);
	} else if (p.v2_pure) {
		for (int i = 0; i < L__COUNT; i++)
			if (want[i])
				why[i] = strdup(p.v2_why ? p.v2_why : "no usable cgroup2 parent");
	}

	/* v1: a leaf per controller under the cgroup moat is in, where the
	 * probe found the parent writable. They are created, limited and joined
	 * in moat_cgroup_attach, after clone3, while the child builds its mounts
	 * (none of it is needed before); a failure there fails the run. */
	if (!p.v2_pure) {
		for (int i = 0; i < MOAT_V1__COUNT; i++) {
			if (!p.v1_parent[i])
				continue;
			cg->sweep[i] = strdup(p.v1_parent[i]);
			cg->v1_leaf[i] = moat_cg_path(p.v1_parent[i], name);
			if (!cg->v1_leaf[i]) {
				rc = moat_error_oom(err);
				goto fail;
			}
		}
		static const int v1_of[L__COUNT] = { MOAT_V1_MEMORY, MOAT_V1_PIDS, MOAT_V1_CPU };
		for (int i = 0; i < L__COUNT; i++)
			if (want[i] && !cg->v1_leaf[v1_of[i]]) {
				const char *w = p.v1_why[v1_of[i]];
				why[i] = strdup(w ? w : "cgroup v1 is not available");
			}
	}

	/* limits, controller by controller */
	if (want[L_MEMORY] && !why[L_MEMORY]) {
		unsigned long long bytes = req->memory_mb * MIB;
		if (cg->v2_ctl[L_MEMORY]) {
			if (write_u64(cg->v2_leaf, "memory.max", bytes) < 0)
				why[L_MEMORY] = fmt("cannot set memory.max: %s", strerror(errno));
			else {
				cg->mech[L_MEMORY] = MOAT_CG_V2;
				(void)moat_cg_write(cg->v2_leaf, "memory.oom.group", "1");
				if (moat_cg_write(cg->v2_leaf, "memory.swap.max", "0") < 0 &&
				    warn(res, err, "memoryMb does not limit swap: memory.swap.max "
					 "cannot be set (%s); enable swap accounting (swapaccount=1)",
					 strerror(errno)) < 0)
					goto fail;
			}
		} else {
			/* the parent has the same files as the leaf will */
			cg->mech[L_MEMORY] = MOAT_CG_V1;
			cg->v1_mem = bytes;
			char *ms = moat_cg_path(p.v1_parent[MOAT_V1_MEMORY], "memory.memsw.limit_in_bytes");
			cg->v1_memsw = ms && access(ms, F_OK) == 0;
			free(ms);
			char *tcp = moat_cg_path(p.v1_parent[MOAT_V1_MEMORY],
						 "memory.kmem.tcp.limit_in_bytes");
			cg->v1_tcp = tcp && access(tcp, F_OK) == 0;
			free(tcp);
			if (!cg->v1_memsw &&
			    warn(res, err, "memoryMb does not limit swap: this kernel has no "
				 "memory.memsw.limit_in_bytes (enable swapaccount=1)") < 0)
				goto fail;
		}
	}
	if (want[L_PIDS] && !why[L_PIDS]) {
		if (!cg->v2_ctl[L_PIDS]) {
			cg->v1_pids = req->pids_limit;
			cg->mech[L_PIDS] = MOAT_CG_V1;
		} else if (write_u64(cg->v2_leaf, "pids.max", req->pids_limit) < 0) {
			why[L_PIDS] = fmt("cannot set pids.max: %s", strerror(errno));
		} else {
			cg->mech[L_PIDS] = MOAT_CG_V2;
		}
	}
	if (want[L_CPU] && !why[L_CPU]) {
		char val[64];
		moat_cg_format_cpu_max(req->cpus, val, sizeof val);
		if (cg->v2_ctl[L_CPU]) {
			if (moat_cg_write(cg->v2_leaf, "cpu.max", val) < 0)
				why[L_CPU] = fmt("cannot set cpu.max: %s", strerror(errno));
			else
				cg->mech[L_CPU] = MOAT_CG_V2;
		} else {
			cg->v1_cpu_quota = moat_cg_cpu_quota(req->cpus);
			cg->mech[L_CPU] = MOAT_CG_V1;
		}
	}

	/* what no cgroup enforces: strictLimits refuses, else rlimits + warnings */
	for (int i = 0; i < L__COUNT; i++) {
		if (!want[i] || cg->mech[i] != MOAT_CG_NONE)
			continue;
		const char *w = why[i] ? why[i] : "no cgroup is available";
		if (req->strict_limits) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				       "%s cannot be enforced by a cgroup (%s) and strictLimits refuses "
				       "the %s fallback", REQ_NAME[i], w,
				       i == L_CPU ? "unlimited" : "rlimit");
			goto fail;
		}
		int wr = 0;
		if (i == L_MEMORY) {
			cg->rl[cg->nrl++] = (struct moat_cgroup_rlimit){ RLIMIT_DATA,
									  req->memory_mb * MIB };
			cg->mech[i] = MOAT_CG_RLIMIT;
			wr = warn(res, err, "memoryMb is enforced per process with RLIMIT_DATA, not a "
				  "cgroup (%s): each process may allocate %llu MiB of heap; file and "
				  "shared mappings are not counted and exceeding it makes allocations "
				  "fail (MemoryError, bad_alloc) instead of an OOM kill", w,
				  (unsigned long long)req->memory_mb);
			if (wr == 0 && req->memory_mb < NODE_MIN_DATA_MB &&
			    (req->language == MOAT_LANG_JAVASCRIPT || req->language == MOAT_LANG_TYPESCRIPT))
				wr = warn(res, err, "node needs about 48 MiB of RLIMIT_DATA to start; "
					  "with memoryMb below %d it may crash or hang until the timeout "
					  "(RLIMIT_AS is not used: node reserves ~800 MiB of address space)",
					  NODE_MIN_DATA_MB);
		} else if (i == L_PIDS) {
			cg->rl[cg->nrl++] = (struct moat_cgroup_rlimit){ RLIMIT_NPROC,
									  req->pids_limit };
			cg->mech[i] = MOAT_CG_RLIMIT;
			if (geteuid() == 0)
				wr = warn(res, err, "pidsLimit is enforced with RLIMIT_NPROC, not a cgroup "
					  "(%s): it counts processes per user, and uid 65534 in the sandbox "
					  "is an unprivileged host uid (65534 by default) that other runs "
					  "and host processes of that uid may share", w);
			else
				wr = warn(res, err, "pidsLimit is enforced with RLIMIT_NPROC, not a cgroup "
					  "(%s): it counts processes per user, and uid 65534 in the sandbox "
					  "is your uid %ld on the host; on kernels before 5.14 your other "
					  "processes count against the limit too", w, (long)getuid());
		} else {
			wr = warn(res, err, "cpus is not enforced (%s): no rlimit expresses a CPU "
				  "share (RLIMIT_CPU bounds total CPU seconds), so the program may use "
				  "every CPU", w);
		}
		if (wr < 0)
			goto fail;
	}
	res->limit_memory = moat_cg_mech_name(cg->mech[L_MEMORY]);
	res->limit_pids = moat_cg_mech_name(cg->mech[L_PIDS]);
	res->limit_cpu = moat_cg_mech_name(cg->mech[L_CPU]);
	*out = cg;
	cg = NULL;
	rc = 0;
fail:
	for (int i = 0; i < L__COUNT; i++)
		free(why[i]);
	probe_free(&p);
	cg_free(cg, NULL);
	return rc;
}

size_t moat_cgroup_rlimits(const struct moat_cgroup *cg,
			   struct moat_cgroup_rlimit out[MOAT_CGROUP_MAX_RLIMITS])
{
	size_t n = cg ? cg->nrl : 0;
	for (size_t i = 0; i < n; i++)
		out[i] = cg->rl[i];
	return n;
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

static int attach_fail(struct moat_error *err, const char *what, const char *where)
{
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot %s %s: %s", what, where,
			      strerror(errno));
}

int moat_cgroup_attach(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		       struct moat_error *err)
{
	if (!cg)
		return 0;
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		if (cg->v1_leaf[i] && mkdir(cg->v1_leaf[i], 0755) < 0 && errno != EEXIST)
			return attach_fail(err, "create the cgroup", cg->v1_leaf[i]);
	const char *mem = cg->v1_leaf[MOAT_V1_MEMORY];
	if (cg->v1_mem) {
		if (write_u64(mem, "memory.limit_in_bytes", cg->v1_mem) < 0)
			return attach_fail(err, "set memory.limit_in_bytes in", mem);
		if (cg->v1_memsw && write_u64(mem, "memory.memsw.limit_in_bytes", cg->v1_mem) < 0 &&
		    moat_result_warn(res, "memoryMb does not limit swap: cannot set "
				     "memory.memsw.limit_in_bytes: %s", strerror(errno)) < 0)
			return moat_error_oom(err);
	}
	/* v1 charges socket buffers to a counter of their own, only once it
	 * has a limit: memoryMb again (the sandbox's sockets are then put
	 * under memory pressure past it) */
	if (cg->v1_mem && cg->v1_tcp &&
	    write_u64(mem, "memory.kmem.tcp.limit_in_bytes", cg->v1_mem) < 0)
		return attach_fail(err, "set memory.kmem.tcp.limit_in_bytes in", mem);
	if (cg->v1_pids && write_u64(cg->v1_leaf[MOAT_V1_PIDS], "pids.max", cg->v1_pids) < 0)
		return attach_fail(err, "set pids.max in", cg->v1_leaf[MOAT_V1_PIDS]);
	const char *cpu = cg->v1_leaf[MOAT_V1_CPU];
	if (cg->v1_cpu_quota && (write_u64(cpu, "cpu.cfs_period_us", MOAT_CG_CPU_PERIOD) < 0 ||
				 write_u64(cpu, "cpu.cfs_quota_us",
					   (unsigned long long)cg->v1_cpu_quota) < 0))
		return attach_fail(err, "set cpu.cfs_quota_us in", cpu);
	char buf[24];
	snprintf(buf, sizeof buf, "%ld", (long)pid);
	for (int i = 0; i < MOAT_V1__COUNT; i++)
		if (cg->v1_leaf[i] && moat_cg_write(cg->v1_leaf[i], "cgroup.procs", buf) < 0)
			return attach_fail(err, "move the sandbox into", cg->v1_leaf[i]);
	return 0;
}

int moat_cgroup_adopt(struct moat_cgroup *cg, pid_t pid, struct moat_result *res,
		      struct moat_error *err)
{
	if (moat_cgroup_attach(cg, pid, res, err) < 0)
		return -1;
	if (!cg || !cg->v2_leaf)
		return 0;
	char buf[24];
	snprintf(buf, sizeof buf, "%ld", (long)pid);
	if (moat_cg_write(cg->v2_leaf, "cgroup.procs", buf) < 0)
		return attach_fail(err, "move the sandbox into", cg->v2_leaf);
	return 0;
}

/* When this process last swept (moat_mono_ms; 0: never). A long-lived
 * caller (moat serve) lists every parent once per sweep interval, not once
 * per run: each listing reads every live leaf of every run beside it, and
 * stale leaves are only made by moats that crashed. */
static _Atomic int64_t last_sweep_ms;

/* The parents this process's runs would use, as the probe finds them now
 * (changing nothing), each once: v1 cpu and cpuacct are one directory when
 * co-mounted. names[i]: the hierarchies of parents[i] ("cpu,cpuacct"). */
struct sweep_parents {
	char *dir[MOAT_V1__COUNT + 1];
	char names[MOAT_V1__COUNT + 1][48];
	int n;
};

static void sweep_parents(struct sweep_parents *sp)
{
	memset(sp, 0, sizeof *sp);
	struct probe p;
	probe_host(&p);
	struct stat seen[MOAT_V1__COUNT + 1];
	for (int i = 0; i <= MOAT_V1__COUNT; i++) {
		const char *dir = i < MOAT_V1__COUNT ? p.v1_parent[i] : p.v2_parent;
		const char *name = i < MOAT_V1__COUNT ? moat_cg_v1_name((enum moat_cg_v1ctl)i)
				   : p.v2_pure		     ? "cgroup2"
							     : "unified";
		struct stat st;
		if (!dir || stat(dir, &st) < 0)
			continue;
		int j = 0;
		while (j < sp->n && !(seen[j].st_dev == st.st_dev && seen[j].st_ino == st.st_ino))
			j++;
		if (j < sp->n) {
			size_t l = strlen(sp->names[j]);
			snprintf(sp->names[j] + l, sizeof sp->names[j] - l, ",%s", name);
			continue;
		}
		if (!(sp->dir[sp->n] = strdup(dir)))
			continue;
		seen[sp->n] = st;
		snprintf(sp->names[sp->n], sizeof sp->names[sp->n], "%s", name);
		sp->n++;
	}
	probe_free(&p);
}

int moat_cgroup_stale_leaves(bool remove, unsigned *found, unsigned *removed, char **where)
{
	*found = *removed = 0;
	*where = NULL;
	struct sweep_parents sp;
	sweep_parents(&sp);
	if (remove)
		atomic_store(&last_sweep_ms, moat_mono_ms());
	char *w = NULL;
	int rc = 0;
	for (int i = 0; i < sp.n; i++) {
		unsigned f = 0, r = 0;
		moat_cg_scan_stale(sp.dir[i], remove, &f, &r);
		*found += f;
		*removed += r;
		if (f) {
			char *nw = fmt("%s%s%s %u", w ? w : "", w ? ", " : "", sp.names[i], f);
			free(w);
			if (!(w = nw))
				rc = -1;
		}
		free(sp.dir[i]);
	}
	*where = w;
	return rc;
}

void moat_cgroup_sweep(struct moat_cgroup *cg)
{
	if (!cg)
		return;
	int64_t now = moat_mono_ms(), last = atomic_load(&last_sweep_ms);
	bool due = (last == 0 || now - last >= MOAT_CGROUP_SWEEP_EVERY_MS) &&
		   atomic_compare_exchange_strong(&last_sweep_ms, &last, now);
	for (int i = 0; i <= MOAT_V1__COUNT; i++) {
		if (cg->sweep[i] && due)
			moat_cg_remove_stale(cg->sweep[i]);
		free(cg->sweep[i]);
		cg->sweep[i] = NULL;
	}
}

int moat_cgroup_kill(struct moat_cgroup *cg)
{
	if (!cg || !cg->v2_leaf)
		return -1;
	return moat_cg_write(cg->v2_leaf, "cgroup.kill", "1") == 0 ? 0 : -1;
}

static int64_t read_kv(const char *dir, const char *file, const char *key)
{
	int64_t v = -1;
	char *t = dir ? moat_cg_read(dir, file) : NULL;
	if (!t || moat_cg_kv_get(t, key, &v) != 1)
		v = -1;
	free(t);
	return v;
}

static int64_t read_num(const char *dir, const char *file)
{
	int64_t v = -1;
	char *t = dir ? moat_cg_read(dir, file) : NULL;
	if (!t || moat_cg_parse_number(t, &v) != 1)
		v = -1;
	free(t);
	return v;
}

int64_t moat_cgroup_cpu_ms(const struct moat_cgroup *cg)
{
	if (!cg)
		return -1;
	/* cpuacct.usage (ns) or cpu.stat usage_usec (a core v2 file) */
	int64_t ns = read_num(cg->v1_leaf[MOAT_V1_CPUACCT], "cpuacct.usage");
	if (ns >= 0)
		return ns / 1000000;
	int64_t us = read_kv(cg->v2_leaf, "cpu.stat", "usage_usec");
	return us >= 0 ? us / 1000 : -1;
}

/* The files only; what they mean for the run is collect's (it needs the
 * decoded status). */
static void read_figures(struct moat_cgroup *cg, struct cg_figures *f)
{
	const char *v2 = cg->v2_leaf;
	const char *mem1 = cg->v1_leaf[MOAT_V1_MEMORY];
	bool v2mem = cg->v2_ctl[L_MEMORY];
	*f = (struct cg_figures){ true, -1, -1, -1, -1, -1, -1, -1 };
	f->peak = v2mem ? read_num(v2, "memory.peak") : read_num(mem1, "memory.max_usage_in_bytes");
	/* cpu time: cpuacct.usage (ns) or cpu.stat usage_usec (a core v2 file) */
	f->cpu_ns = read_num(cg->v1_leaf[MOAT_V1_CPUACCT], "cpuacct.usage");
	if (f->cpu_ns < 0)
		f->cpu_us = read_kv(v2, "cpu.stat", "usage_usec");
	if (v2mem) {
		f->oom_kills = read_kv(v2, "memory.events", "oom_kill");
		f->oom_group_kills = read_kv(v2, "memory.events", "oom_group_kill");
	} else if (mem1) {
		f->oom_kills = read_kv(mem1, "memory.oom_control", "oom_kill");
		if (f->oom_kills < 0) /* kernels before 4.13 */
			f->failcnt = read_num(mem1, "memory.failcnt");
	}
	const char *pl = cg->v2_ctl[L_PIDS] ? v2 : cg->v1_leaf[MOAT_V1_PIDS];
	if (cg->mech[L_PIDS] == MOAT_CG_V1 || cg->mech[L_PIDS] == MOAT_CG_V2)
		f->pids_hits = read_kv(pl, "pids.events", "max");
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
	else if (cg->v1_leaf[MOAT_V1_MEMORY]) {
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

static void cg_remove(struct moat_result *res, const char *leaf, bool v2)
{
	if (rmdir(leaf) == 0 || errno == ENOENT)
		return;
	if (v2 && errno == EBUSY)
		(void)moat_cg_write(leaf, "cgroup.kill", "1");
	if (moat_cg_rmdir_wait(leaf) < 0 && res)
		(void)moat_result_warn(res, "cgroup %s could not be removed: %s", leaf,
				       strerror(errno));
}

static void cg_free(struct moat_cgroup *cg, struct moat_result *res)
{
	if (!cg)
		return;
	if (cg->v2_fd >= 0)
		close(cg->v2_fd);
	for (int i = 0; i <= MOAT_V1__COUNT; i++)
		free(cg->sweep[i]);
	if (cg->v2_leaf)
		cg_remove(res, cg->v2_leaf, true);
	free(cg->v2_leaf);
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		if (cg->v1_leaf[i])
			cg_remove(res, cg->v1_leaf[i], false);
		free(cg->v1_leaf[i]);
	}
	free(cg);
}

int64_t moat_cgroup_memory_now(const struct moat_cgroup *cg)
{
	if (!cg)
		return -1;
	if (cg->v2_leaf && cg->v2_ctl[L_MEMORY])
		return read_num(cg->v2_leaf, "memory.current");
	if (cg->v1_leaf[MOAT_V1_MEMORY])
		return read_num(cg->v1_leaf[MOAT_V1_MEMORY], "memory.usage_in_bytes");
	return -1;
}

bool moat_cgroup_memory_is_v2(const struct moat_cgroup *cg)
{
	return cg && cg->v2_leaf && cg->mech[L_MEMORY] == MOAT_CG_V2;
}

int moat_cgroup_memory_stall(const struct moat_cgroup *cg, int64_t *limit_hits,
			     int64_t *full_us)
{
	if (!moat_cgroup_memory_is_v2(cg))
		return -1;
	char *t = moat_cg_read(cg->v2_leaf, "memory.pressure");
	int ok = t && moat_cg_pressure_total(t, "full", full_us) == 1;
	free(t);
	if (!ok || (*limit_hits = read_kv(cg->v2_leaf, "memory.events", "max")) < 0)
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

/* doctor's line on delegation from systemd, changing nothing */
static void describe_systemd(FILE *out, const struct probe *p)
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

int moat_cgroup_print_where(FILE *out)
{
	struct probe p;
	probe_host(&p);
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
	describe_systemd(out, &p);
	probe_free(&p);
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
