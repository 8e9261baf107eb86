/* moat doctor: what this host supports and what a run will use. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static const char *find_exec(const char *name, char *buf, size_t len)
{
	static const char *const dirs[] = { "/usr/local/bin", "/usr/bin", "/bin" };
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(buf, len, "%s/%s", dirs[i], name);
		if (access(buf, X_OK) == 0)
			return buf;
	}
	return NULL;
}

/* Seccomp filters already on this process (from /proc/self/status): a
 * container runtime's profile, typically. 0 when none or unknown. */
static long outer_seccomp_filters(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	char line[256];
	long mode = 0, n = 0;
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, "Seccomp:", 8))
			mode = strtol(line + 8, NULL, 10);
		else if (!strncmp(line, "Seccomp_filters:", 16))
			n = strtol(line + 16, NULL, 10);
	}
	fclose(f);
	return mode == 2 ? (n > 0 ? n : 1) : 0;
}

/* One real run of /bin/true, every step of a sandbox included: what the
 * probes above cannot see (a container runtime's seccomp or AppArmor
 * profile refusing a mount or a pivot_root) fails here. */
static bool trial_run(void)
{
	static const char req_json[] = "{\"argv\":[\"true\"],\"timeout\":10000}";
	struct moat_request *req = NULL;
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	bool ok = false;
	if (moat_request_parse_json(req_json, sizeof req_json - 1, &req, &err) < 0 ||
	    moat_run(req, NULL, &res, &err) < 0) {
		printf("trial run:          FAILED: %s\n", err.message ? err.message : "out of memory");
	} else if (!res->exited || res->exit_code != 0)
		printf("trial run:          FAILED: true in a sandbox did not exit 0 (%s %d)\n",
		       res->exited ? "exit" : "killed, signal",
		       res->exited ? res->exit_code : res->signal);
	else
		ok = printf("trial run:          ok (true ran in a sandbox)\n") > 0;
	moat_result_free(res);
	moat_request_free(req);
	moat_error_clear(&err);
	return ok;
}

/* Forks a child that creates a user namespace, as a run would. */
static int try_userns(int *err_out)
{
	pid_t pid = fork();
	if (pid < 0) {
		*err_out = errno;
		return -1;
	}
	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) == 0 ? 0 : errno);
	int st;
	if (waitpid(pid, &st, 0) < 0) {
		*err_out = errno;
		return -1;
	}
	*err_out = WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
	return *err_out == 0 ? 0 : -1;
}

/* What a run asking for every limit would really get: the same decision a
 * run makes (a leaf is created and removed again). Returns the result that
 * names the mechanisms (the caller frees it), or NULL when such a run
 * would fail. */
static struct moat_result *trial_limits(void)
{
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	bool group_kill = false;
	if (moat_limits_probe(&res, &group_kill, &err) < 0) {
		printf("limits:             a run would fail: %s\n",
		       err.message ? err.message : "out of memory");
		res = NULL;
	} else {
		printf("limit memory:       %s\nlimit pids:         %s\nlimit cpu:          %s\n",
		       res->limit_memory, res->limit_pids, res->limit_cpu);
		printf("kill on timeout:    %s\n", group_kill
							  ? "cgroup.kill"
							  : "SIGKILL to the sandbox's pid-namespace init");
		for (size_t i = 0; i < res->warnings_count; i++)
			printf("  warning:          %s\n", res->warnings[i]);
	}
	moat_error_clear(&err);
	return res;
}

/* As root on cgroup v1: what a run's move into its v1 cgroups costs after a
 * pause, and the operator's remedy when it waits (moat_cgroup_join_probe). */
static void trial_join(void)
{
	struct moat_cgroup_join j;
	struct moat_error err = { 0 };
	int rc = moat_cgroup_join_probe(&j, &err);
	if (rc < 0)
		printf("cgroup v1 join:     cannot measure: %s\n",
		       err.message ? err.message : "out of memory");
	moat_error_clear(&err);
	if (rc != 0)
		return;
	printf("cgroup v1 join:     %.1f ms per run started after a pause (median of %d moves into "
	       "a run's v1 cgroups, each after %d ms of quiet)%s\n",
	       j.median_ms, j.samples, j.gap_ms,
	       j.favordynmods ? "; favordynmods is on: the move does not wait for an RCU grace "
				"period" : "");
	if (j.favordynmods || j.median_ms < 1.0)
		return;
	printf("  cost:             each run as root moves its pid 1 into its cgroup v1 leaves; a "
	       "write to a v1 cgroup.procs waits for an RCU grace period unless another came "
	       "within the last one, so a run after a pause (an agent's call, a CI step) pays "
	       "it where runs back to back share it\n"
	       "  remedy:           mount -o remount,favordynmods /sys/fs/cgroup/unified (the "
	       "cgroup2 mount of this hybrid host; kernel 6.2 or later; the v1 hierarchies take "
	       "the option only when first mounted; from kernel 6.18 it stays on until reboot), "
	       "or boot with cgroup v2 only (a run is then born in its cgroup: no move)\n");
}

static bool by_cgroup(const char *mechanism)
{
	return !strncmp(mechanism, "cgroup-", 7);
}

/* The verdict on limits, apart from isolation: a rootless run without a
 * delegated cgroup is fully isolated yet has only rlimits, or nothing, as
 * limits, and must not be told otherwise. */
static void limits_verdict(const struct moat_result *res)
{
	printf("verdict limits:     ");
	if (!res) {
		printf("a run asking for a limit fails here (see \"limits\" above)\n");
		return;
	}
	const char *const names[] = { "memory", "pids", "cpu" };
	const char *const mech[] = { res->limit_memory, res->limit_pids, res->limit_cpu };
	bool all = true;
	for (int i = 0; i < 3; i++) {
		const char *m = mech[i] ? mech[i] : "none";
		all = all && by_cgroup(m);
		printf("%s%s %s%s", i ? ", " : "", names[i], m,
		       !strcmp(m, "rlimit") ? " (fallback)" : !strcmp(m, "none") ? " (not enforced)"
									: "");
	}
	if (all)
		printf(": all enforced by cgroups\n");
	else
		printf(": weaker than a cgroup, see the warnings above (\"strictLimits\": true "
		       "refuses to run here)\n");
}

/* What "network": true and "allowedHosts" need: the sandbox's egress
 * setup (nftables inside a user namespace) tried for real. */
static bool trial_network(void)
{
	struct moat_error err = { 0 };
	bool ok = moat_net_probe(&err) == 0;
	if (ok)
		printf("network egress:     ok: nftables inside a user namespace; every connection "
		       "of \"network\": true or \"allowedHosts\" passes moat's address policy\n");
	else
		printf("network egress:     UNAVAILABLE: %s\n", err.message ? err.message : "?");
	moat_error_clear(&err);
	return ok;
}

/* Ubuntu's user-namespace restriction: does it apply to this binary, and
 * the exact fix when it does. */
static void apparmor_report(void)
{
	struct moat_apparmor *aa = malloc(sizeof *aa);
	if (!aa)
		return;
	moat_apparmor_probe(aa);
	if (aa->restrict_userns < 0)
		printf("AppArmor userns:    no restriction on this kernel (no "
		       "kernel.apparmor_restrict_unprivileged_userns)\n");
	else
		printf("AppArmor userns:    restrict_unprivileged_userns=%d%s\n", aa->restrict_userns,
		       !aa->enabled ? " (AppArmor is not the active LSM: no effect)"
		       : aa->restrict_userns != 1 ? ": unprivileged programs may create them"
		       : aa->as_root ? ": applies to unprivileged users, not to root" : "");
	if (aa->enabled) {
		printf("AppArmor label:     %s: %s\n", aa->label[0] ? aa->label : "unknown",
		       aa->covered ? "moat's profile, user namespaces allowed"
				   : "not moat's profile");
		printf("AppArmor profile:   moat %s; this binary %s %s\n",
		       aa->profile_loaded == 1 ? "loaded"
		       : aa->profile_loaded == 0 ? "not loaded"
		       : aa->etc_profile ? "in /etc/apparmor.d (whether loaded: the list needs root)"
					 : "not in /etc/apparmor.d",
		       aa->exe[0] ? aa->exe : "(unknown path)",
		       aa->exe_attached ? "is a path it attaches to"
					: "is not a path it attaches to (/usr/bin/moat, "
					  "/usr/local/bin/moat)");
	}
	char *fix = moat_apparmor_fix(aa);
	if (fix)
		printf("  fix:              %s\n", fix);
	free(fix);
	free(aa);
}

int cli_doctor(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	char buf[512], path[512];
	bool ok = true;
	printf("moat %s doctor\n", MOAT_VERSION);
	if (read_text("/proc/sys/kernel/osrelease", buf, sizeof buf) == 0)
		printf("kernel:             %s\n", buf);
	printf("running as:         %s (uid %u)\n", geteuid() == 0 ? "root" : "rootless",
	       (unsigned)geteuid());

	long outer = outer_seccomp_filters();
	if (outer > 0)
		printf("outer seccomp:      %ld filter(s) on moat itself (a container's profile?): it "
		       "must allow clone3, unshare, mount, umount2, pivot_root, mount_setattr, "
		       "sethostname and setdomainname (deploy/kubernetes/seccomp/moat.json), or "
		       "runs fail with EPERM or ENOSYS\n", outer);
	int e = 0;
	if (try_userns(&e) == 0) {
		printf("user namespaces:    ok\n");
	} else {
		char *diag = moat_userns_diagnose();
		printf("user namespaces:    UNAVAILABLE (%s)%s%s\n", strerror(e), diag ? ": " : "",
		       diag ? diag : "");
		free(diag);
		ok = false;
	}
	apparmor_report();
	char *masked = moat_proc_diagnose();
	if (masked) {
		printf("/proc:              MASKED: %s\n", masked);
		ok = false;
	} else {
		printf("/proc:              fully visible (each sandbox mounts its own)\n");
	}
	free(masked);
	if (read_text("/proc/sys/user/max_user_namespaces", buf, sizeof buf) == 0)
		printf("max_user_namespaces: %s\n", buf);

	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 && errno == EINVAL) {
		printf("seccomp:            UNAVAILABLE (kernel built without it)\n");
		ok = false;
	} else {
		struct moat_error err = { 0 };
		char *dir = NULL;
		bool cached = false;
		if (moat_seccomp_probe(&dir, &cached, &err) == 0) {
			printf("seccomp:            filter mode; default policy compiles\n");
			if (cached)
				printf("seccomp cache:      %s\n", dir);
			else
				printf("seccomp cache:      none usable (%s%s): every run compiles its "
				       "filter (a few ms); set HOME or XDG_CACHE_HOME to a directory "
				       "you own\n", dir ? dir : "no HOME or XDG_CACHE_HOME",
				       dir ? " is not a directory you own with mode 0700, or cannot be "
					     "created" : "");
			free(dir);
		} else {
			printf("seccomp:            default policy FAILED: %s\n", err.message);
			ok = false;
		}
		moat_error_clear(&err);
	}

	/* the second filesystem wall: its absence weakens, it does not fail */
	int ll = moat_landlock_version();
	if (ll >= 1)
		printf("landlock:           ABI %d: the program restricts itself to what the "
		       "mounts allow%s\n", ll, ll >= 6 ? " (and no signals out of its sandbox)" : "");
	else
		printf("landlock:           not available (kernel without it, or not in the lsm= boot "
		       "list): the read-only mounts are the only filesystem wall; every result "
		       "warns\n");

	moat_cgroup_describe(stdout);
	struct moat_result *limits = trial_limits();
	trial_join();

	/* a host without it still runs every request without network */
	trial_network();

	/* the key-value store of kvEnabled requests: opened as a run opens it */
	{
		struct moat_error err = { 0 };
		char *kind = NULL;
		if (moat_kv_probe(NULL, &kind, &err) == 0)
			printf("kv store:           %s, the default file of this user opens "
			       "(--kv or the config's \"kv\" choose another)\n", kind);
		else
			printf("kv store:           the default does not open: %s (kvEnabled requests "
			       "need --kv or the config's \"kv\")\n", err.message);
		free(kind);
		moat_error_clear(&err);
		char *rt = cli_find_runtime();
		printf("runtime shims:      %s\n", rt ? rt : "not found (handlers and the store's "
							   "API need --runtime DIR)");
		free(rt);
	}

	static const char *const interp[] = { "python3", "node", "bash", "sh" };
	for (size_t i = 0; i < sizeof interp / sizeof interp[0]; i++) {
		const char *p = find_exec(interp[i], path, sizeof path);
		printf("%-20s%s\n", interp[i], p ? p : "not found");
	}
	const char *esb = find_exec("esbuild", path, sizeof path);
	printf("typescript:         %s\n",
	       esb ? "esbuild transpiles inside the sandbox, node runs the result"
		   : "UNAVAILABLE: node 20 has no type stripping and esbuild is missing "
		     "(apt-get install esbuild)");
	if (ok && !trial_run())
		ok = false;
	/* isolation and limits are separate claims: a host can give the one
	 * without the other */
	printf("verdict isolation:  %s\n",
	       ok ? (ll >= 1 ? "complete: each run gets its own namespaces, the seccomp filter and "
			       "Landlock"
			     : "complete: each run gets its own namespaces and the seccomp filter "
			       "(no Landlock: see above)")
		  : "UNAVAILABLE: runs will fail closed until the items above are fixed");
	limits_verdict(limits);
	moat_result_free(limits);
	return ok ? 0 : 3;
}
