/* What the host offers, found without changing anything: moat's own
 * cgroups (/proc/self/cgroup), where cgroup2 is mounted and whether it is
 * the unified hierarchy, the v2 parent a run's leaf would go under
 * ($MOAT_CGROUP_PARENT or moat's own, delegated cgroup; checked against
 * v2's common-ancestor migration rule) and its controllers, and each v1
 * controller's writable parent. A reason for every mechanism that is not
 * usable, for the run's warnings and moat doctor. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "cgroups/backend.h"

#define fmt moat_format

static bool is_fs(const char *path, unsigned long magic)
{
	struct statfs sfs;
	return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == magic;
}

const char *const MOAT_CG_V2_CTL[L__COUNT] = { "memory", "pids", "cpu" };

bool cg_word_in(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p && (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == '\n') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

void cg_probe_free(struct probe *p)
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
		p->v2_avail[i] = ctl && cg_word_in(ctl, MOAT_CG_V2_CTL[i]);
	free(ctl);
	p->v2_parent = dir;
}

void cg_probe_host(struct probe *p)
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
