/* The host checks of moat_admin.h (moat doctor, moat serve at start): each
 * done through the walls' own faces, so that the command line calls admin
 * functions only and the walls' headers never see moat_admin.h. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moat_admin.h"
#include "cgroups/cgroups.h"
#include "core/cleanup.h"
#include "core/core.h"
#include "net/net.h"
#include "ns/ns.h"
#include "priv/priv.h"
#include "seccomp/seccomp.h"

/* ---- user namespaces, /proc, AppArmor (ns/diag.c) ---- */

char *moat_userns_diagnose(void)
{
	return moat_ns_userns_diagnose();
}

char *moat_proc_diagnose(void)
{
	return moat_ns_proc_diagnose();
}

_Static_assert(sizeof ((struct moat_apparmor *)0)->label ==
			       sizeof ((struct moat_ns_apparmor *)0)->label &&
		       sizeof ((struct moat_apparmor *)0)->exe ==
			       sizeof ((struct moat_ns_apparmor *)0)->exe &&
		       sizeof ((struct moat_apparmor *)0)->profile_src ==
			       sizeof ((struct moat_ns_apparmor *)0)->profile_src,
	       "the public AppArmor fields are the namespace module's");

#define AA_FIELDS(X) X(enabled) X(restrict_userns) X(as_root) X(covered) \
	X(profile_loaded) X(etc_profile) X(exe_attached)
#define AA_COPY(f) to->f = from->f;

static void aa_to_public(struct moat_apparmor *to, const struct moat_ns_apparmor *from)
{
	AA_FIELDS(AA_COPY)
	memcpy(to->label, from->label, sizeof to->label);
	memcpy(to->exe, from->exe, sizeof to->exe);
	memcpy(to->profile_src, from->profile_src, sizeof to->profile_src);
}

static void aa_from_public(struct moat_ns_apparmor *to, const struct moat_apparmor *from)
{
	AA_FIELDS(AA_COPY)
	memcpy(to->label, from->label, sizeof to->label);
	memcpy(to->exe, from->exe, sizeof to->exe);
	memcpy(to->profile_src, from->profile_src, sizeof to->profile_src);
}

void moat_apparmor_probe(struct moat_apparmor *aa)
{
	struct moat_ns_apparmor *ns = malloc(sizeof *ns);
	memset(aa, 0, sizeof *aa);
	aa->profile_loaded = -1;
	if (!ns)
		return;
	moat_ns_apparmor_probe(ns);
	aa_to_public(aa, ns);
	free(ns);
}

char *moat_apparmor_fix(const struct moat_apparmor *aa)
{
	struct moat_ns_apparmor *ns = malloc(sizeof *ns);
	if (!ns)
		return NULL;
	aa_from_public(ns, aa);
	char *fix = moat_ns_apparmor_fix(ns);
	free(ns);
	return fix;
}

/* ---- cgroups ---- */

int moat_cgroup_delegate(char **note)
{
	return moat_cgroup_delegate_now(note);
}

int moat_cgroup_describe(FILE *out)
{
	return moat_cgroup_print_where(out);
}

int moat_cgroup_sweep_leftovers(bool remove, struct moat_cgroup_leftovers *out)
{
	return moat_cgroup_stale_leaves(remove, &out->found, &out->removed, &out->where);
}

/* A cgroup made as for a run asking for every limit (memory, processes,
 * CPU): a leaf in every hierarchy a run joins. *res gets what preparing it
 * wrote into a run's result (limits, warnings); 0, or -1 with err set. */
static int probe_cgroup(struct moat_cgroup **cg, struct moat_result **res, struct moat_error *err)
{
	*cg = NULL;
	MOAT_AUTO(moat_request) struct moat_request *req = moat_request_new();
	MOAT_AUTO(moat_result) struct moat_result *r = moat_result_new();
	if (!req || !r)
		return moat_error_oom(err);
	req->memory_mb = 256;
	req->pids_limit = 64;
	req->cpus = 1;
	if (moat_cgroup_prepare(req, r, cg, err) < 0)
		return -1;
	*res = MOAT_TAKE(r);
	return 0;
}

int moat_limits_probe(struct moat_result **out, bool *group_kill, struct moat_error *err)
{
	*out = NULL;
	*group_kill = false;
	struct moat_cgroup *cg;
	if (probe_cgroup(&cg, out, err) < 0)
		return -1;
	*group_kill = moat_cgroup_clone_fd(cg) >= 0;
	moat_cgroup_finish(cg, NULL);
	return 0;
}

int moat_cgroup_join_probe(struct moat_cgroup_join *out, struct moat_error *err)
{
	memset(out, 0, sizeof *out);
	out->samples = 3;
	out->gap_ms = 150;
	struct moat_cgroup *cg;
	MOAT_AUTO(moat_result) struct moat_result *res = NULL;
	if (probe_cgroup(&cg, &res, err) < 0)
		return -1;
	int rc = moat_cgroup_v1_join_cost(cg, res, out->samples, out->gap_ms, &out->median_ms,
					  &out->favordynmods, err);
	moat_cgroup_finish(cg, NULL);
	return rc;
}

/* ---- the network ---- */

int moat_net_probe(struct moat_error *err)
{
	struct moat_request *req = moat_request_new();
	if (!req)
		return moat_error_oom(err);
	req->network = true;
	struct moat_net *net = NULL;
	int rc = moat_net_prepare(req, &net, err);
	moat_request_free(req);
	if (rc < 0)
		return -1;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		moat_net_finish(net, NULL);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "pipe: %s", strerror(errno));
	}
	pid_t pid = fork();
	if (pid == 0) {
		int out[2] = { 0, 0 };
		int step = 0;
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
			out[0] = -1, out[1] = errno;
		else if (moat_net_child_sysctls(&step) < 0 || moat_net_child_setup(net, &step) < 0)
			out[0] = -step, out[1] = errno;
		_exit(write(p[1], out, sizeof out) == sizeof out ? 0 : 1);
	}
	close(p[1]);
	int got[2] = { -1, EIO };
	ssize_t n = pid < 0 ? -1 : read(p[0], got, sizeof got);
	int saved = errno;
	close(p[0]);
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	moat_net_finish(net, NULL);
	if (pid < 0 || n != (ssize_t)sizeof got)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, saved, "cannot run the probe");
	if (got[0] == -1)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, got[1],
				      "cannot create a user and network namespace: %s",
				      strerror(got[1]));
	if (got[0] < 0)
		return moat_net_setup_error(-got[0], got[1], err);
	return 0;
}

/* ---- seccomp, Landlock ---- */

int moat_seccomp_probe(char **cache_dir, bool *cached, struct moat_error *err)
{
	*cache_dir = NULL;
	*cached = false;
	struct moat_seccomp_prog *prog = NULL;
	if (moat_seccomp_prepare(NULL, false, &prog, err) < 0)
		return -1;
	moat_seccomp_prog_free(prog);
	prog = NULL;
	/* a second prepare shows whether the first one could store it */
	*cache_dir = moat_seccomp_cache_dir();
	if (moat_seccomp_prepare(NULL, false, &prog, err) < 0) {
		moat_error_clear(err); /* it compiled once: only the cache is in question */
		return 0;
	}
	*cached = moat_seccomp_last_from_cache();
	moat_seccomp_prog_free(prog);
	return 0;
}

int moat_landlock_version(void)
{
	return moat_landlock_abi();
}

int moat_seccomp_policy_check(const char *path, struct moat_error *err)
{
	return sc_policy_check(path, stderr, err);
}

int moat_seccomp_policy_show(const char *path, FILE *out, struct moat_error *err)
{
	return moat_seccomp_policy_print(path, out, err);
}

int moat_seccomp_policy_allowed(const char *path, size_t *count, struct moat_error *err)
{
	return sc_policy_allowed(path, count, err);
}
