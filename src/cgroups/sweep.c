/* Leaves of supervisors that no longer exist. Leaves are named
 * moat-<pid>-t<start>-<counter> (start: the owner's start time,
 * /proc/<pid>/stat field 22; moat-<pid>-<counter> when unknown, and from
 * moats before it); those whose owner is gone are removed (rmdir only,
 * never killed) by later runs, while their program starts
 * (moat_cgroup_sweep: a process's first run, then at most once a minute),
 * and without a run by moat serve at its start and every minute
 * (moat_cgroup_stale_leaves, which moat doctor uses to count them).
 * Liveness is kill(pid, 0) in moat's pid namespace, and the start time when
 * the name has one (a pid reused since is another process), so two moats in
 * different pid namespaces sharing one cgroup parent should not share it. */
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroups/backend.h"

#define fmt moat_format

void moat_cg_scan_stale(const char *parent, bool remove, unsigned *found, unsigned *removed)
{
	int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if (!moat_cg_leaf_stale(de->d_name, moat_cg_pid_alive))
			continue;
		if (found)
			(*found)++;
		/* a crashed run's processes died with its pid namespace, so
		 * its leaf is empty. Only rmdir, never kill: a busy leaf may
		 * belong to a live moat in another pid namespace */
		if (remove && unlinkat(dfd, de->d_name, AT_REMOVEDIR) == 0 && removed)
			(*removed)++;
	}
	closedir(d);
}

void moat_cg_remove_stale(const char *parent)
{
	moat_cg_scan_stale(parent, true, NULL, NULL);
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
	cg_probe_host(&p);
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
	cg_probe_free(&p);
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
