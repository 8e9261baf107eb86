/* Why a host refuses user namespaces, in one sentence with the fix. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ns/ns.h"

static long read_long(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/* The whole of a small file (/proc, /sys) into a malloc'd, NUL-terminated
 * buffer of at most max bytes; NULL when it cannot be read. */
static char *read_all(const char *path, size_t max, size_t *len_out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (len + 1 == cap) {
			char *nb = cap < max ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			buf = NULL;
		} else if (n == 0) {
			buf[len] = '\0';
			*len_out = len;
		} else {
			len += (size_t)n;
			continue;
		}
		break;
	}
	close(fd);
	return buf;
}

int moat_aa_label_parse(const char *text, size_t len, char *profile, size_t profile_len,
			char *mode, size_t mode_len)
{
	/* the kernel ends the label with a newline (and some versions a NUL) */
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\0' || text[len - 1] == ' '))
		len--;
	if (len == 0 || memchr(text, '\0', len) || memchr(text, '\n', len))
		return -1;
	size_t plen = len;
	const char *m = NULL;
	size_t mlen = 0;
	if (text[len - 1] == ')') {
		for (size_t i = len - 1; i-- > 0;) {
			if (text[i] == '(' && i > 0 && text[i - 1] == ' ') {
				m = text + i + 1;
				mlen = len - 1 - (i + 1);
				plen = i - 1;
				break;
			}
		}
	}
	if (plen == 0 || plen >= profile_len || mlen >= mode_len)
		return -1;
	memcpy(profile, text, plen);
	profile[plen] = '\0';
	if (m)
		memcpy(mode, m, mlen);
	mode[mlen] = '\0';
	return 0;
}

bool moat_aa_label_is_moat(const char *profile)
{
	return !strcmp(profile, "moat");
}

bool moat_aa_profiles_has(const char *text, size_t len, const char *name)
{
	size_t nlen = strlen(name);
	const char *end = text + len;
	for (const char *line = text; line < end;) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		const char *stop = nl ? nl : end;
		/* "NAME (MODE)": the name is what comes before the last " (" */
		const char *cut = stop;
		for (const char *p = stop; p > line + 1; p--) {
			if (p[-1] == '(' && p[-2] == ' ') {
				cut = p - 2;
				break;
			}
		}
		if ((size_t)(cut - line) == nlen && !memcmp(line, name, nlen))
			return true;
		line = nl ? nl + 1 : end;
	}
	return false;
}

bool moat_aa_exe_attached(const char *exe)
{
	return !strcmp(exe, "/usr/bin/moat") || !strcmp(exe, "/usr/local/bin/moat");
}

bool moat_uid_map_is_initial(const char *text)
{
	unsigned long inside, outside, count;
	char tail;
	/* one line "0 0 4294967295": the initial user namespace's map */
	return text && sscanf(text, " %lu %lu %lu %c", &inside, &outside, &count, &tail) == 3 &&
	       inside == 0 && outside == 0 && count == 4294967295UL;
}

/* Root of the initial user namespace: what AppArmor's userns restriction
 * calls privileged. uid 0 of a pod's or a container's user namespace is
 * not, and gets the restriction like any other user. */
static bool host_root(void)
{
	if (geteuid() != 0)
		return false;
	size_t len = 0;
	char *map = read_all("/proc/self/uid_map", 4096, &len);
	bool initial = moat_uid_map_is_initial(map);
	free(map);
	return initial;
}

void moat_ns_apparmor_probe(struct moat_ns_apparmor *aa)
{
	memset(aa, 0, sizeof *aa);
	aa->profile_loaded = -1;
	aa->as_root = host_root();
	aa->restrict_userns = (int)read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
	size_t len = 0;
	char *t = read_all("/sys/module/apparmor/parameters/enabled", 64, &len);
	aa->enabled = t ? t[0] == 'Y' : access("/sys/kernel/security/apparmor", F_OK) == 0;
	free(t);
	if (aa->enabled) {
		/* the AppArmor-specific file first: attr/current belongs to
		 * whichever LSM is the major one */
		t = read_all("/proc/self/attr/apparmor/current", 4096, &len);
		if (!t)
			t = read_all("/proc/self/attr/current", 4096, &len);
		char mode[64];
		if (t && moat_aa_label_parse(t, len, aa->label, sizeof aa->label, mode,
					     sizeof mode) == 0) {
			aa->covered = moat_aa_label_is_moat(aa->label);
			if (mode[0] && strlen(aa->label) + strlen(mode) + 3 < sizeof aa->label)
				snprintf(aa->label + strlen(aa->label),
					 sizeof aa->label - strlen(aa->label), " (%s)", mode);
		}
		free(t);
		t = read_all("/sys/kernel/security/apparmor/profiles", 16u << 20, &len);
		if (t)
			aa->profile_loaded = moat_aa_profiles_has(t, len, "moat");
		free(t);
	}
	aa->etc_profile = access("/etc/apparmor.d/moat", F_OK) == 0;
	ssize_t n = readlink("/proc/self/exe", aa->exe, sizeof aa->exe - 1);
	aa->exe[n > 0 ? n : 0] = '\0';
	aa->exe_attached = moat_aa_exe_attached(aa->exe);
	/* installed: PREFIX/bin/moat → PREFIX/share/moat/apparmor/moat;
	 * the build tree: build/moat → apparmor/moat */
	char *slash = strrchr(aa->exe, '/');
	static const char *const rel[] = { "/../share/moat/apparmor/moat", "/../apparmor/moat" };
	for (size_t i = 0; slash && i < 2 && !aa->profile_src[0]; i++) {
		char cand[PATH_MAX + 64];
		snprintf(cand, sizeof cand, "%.*s%s", (int)(slash - aa->exe), aa->exe, rel[i]);
		char *real = access(cand, R_OK) == 0 ? realpath(cand, NULL) : NULL;
		if (real && strlen(real) < sizeof aa->profile_src)
			strcpy(aa->profile_src, real);
		free(real);
	}
}

char *moat_ns_apparmor_fix(const struct moat_ns_apparmor *aa)
{
	if (!aa->enabled || aa->restrict_userns != 1 || aa->as_root || aa->covered)
		return NULL;
	char *load = NULL, *s = NULL;
	int rc;
	if (aa->etc_profile)
		rc = asprintf(&load, "sudo apparmor_parser -r /etc/apparmor.d/moat");
	else
		rc = asprintf(&load, "sudo install -m 0644 %s /etc/apparmor.d/moat && "
			      "sudo apparmor_parser -r /etc/apparmor.d/moat",
			      aa->profile_src[0] ? aa->profile_src : "apparmor/moat");
	if (rc < 0)
		return NULL;
	const char *src_note = aa->etc_profile || aa->profile_src[0]
				       ? "" : " (apparmor/moat is in moat's source tree)";
	const char *sysctl = "; or lift the restriction for every program: 'sudo sysctl -w "
			     "kernel.apparmor_restrict_unprivileged_userns=0' (until reboot; a file "
			     "in /etc/sysctl.d keeps it)";
	if (!aa->exe_attached)
		rc = asprintf(&s, "moat's AppArmor profile attaches to /usr/bin/moat and "
			      "/usr/local/bin/moat only, and this binary is %s: install moat there "
			      "('sudo make install' or the Debian package), load the profile with "
			      "'%s'%s and run the installed moat%s",
			      aa->exe[0] ? aa->exe : "elsewhere", load, src_note, sysctl);
	else if (aa->profile_loaded == 1)
		rc = asprintf(&s, "moat's AppArmor profile is loaded but this process is not under "
			      "it (it started before the profile was loaded?): run %s again; to "
			      "reload the profile: '%s'%s", aa->exe, load, sysctl);
	else
		rc = asprintf(&s, "load moat's AppArmor profile: '%s'%s%s", load, src_note, sysctl);
	free(load);
	return rc < 0 ? NULL : s;
}

char *moat_ns_userns_diagnose(void)
{
	char *s = NULL;
	int rc = 0;
	if (read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1 &&
	    !host_root()) {
		struct moat_ns_apparmor *aa = malloc(sizeof *aa);
		char *fix = NULL;
		if (aa) {
			moat_ns_apparmor_probe(aa);
			fix = moat_ns_apparmor_fix(aa);
		}
		if (fix || !aa)
			rc = asprintf(&s, "AppArmor restricts unprivileged user namespaces "
				      "(kernel.apparmor_restrict_unprivileged_userns=1) to programs "
				      "with a profile that allows them, and this process's label is "
				      "\"%s\"; fix: %s", aa && aa->label[0] ? aa->label : "unknown",
				      fix ? fix : "run 'moat doctor'");
		free(fix);
		free(aa);
		if (rc < 0)
			return NULL;
		if (s)
			return s;
	}
	if (read_long("/proc/sys/kernel/unprivileged_userns_clone") == 0 && !host_root())
		rc = asprintf(&s, "unprivileged user namespaces are disabled "
			      "(kernel.unprivileged_userns_clone=0); fix: run "
			      "'sudo sysctl kernel.unprivileged_userns_clone=1'");
	else if (read_long("/proc/sys/user/max_user_namespaces") == 0)
		rc = asprintf(&s, "user namespaces are disabled (user.max_user_namespaces=0); fix: run "
			      "'sudo sysctl user.max_user_namespaces=15000'");
	if (rc < 0)
		return NULL;
	return s;
}

/* ---- /proc with mounts over parts of it (a container's masked paths) ---- */

int moat_proc_overmounts_parse(const char *text, char **out)
{
	*out = NULL;
	size_t cap = 0, len = 0;
	char *list = NULL;
	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		/* "id parent maj:min root mountpoint opts [optional...] - fstype src super" */
		const char *f = l, *end = l + n, *mp = NULL;
		size_t mpl = 0;
		for (int field = 0; f < end && field <= 4; field++) {
			const char *sp = memchr(f, ' ', (size_t)(end - f));
			const char *fe = sp ? sp : end;
			if (field == 4) {
				mp = f;
				mpl = (size_t)(fe - f);
			}
			f = sp ? sp + 1 : end;
		}
		const char *dash = memmem(l, n, " - ", 3);
		bool binfmt = dash && (size_t)(end - (dash + 3)) >= 12 &&
			      !memcmp(dash + 3, "binfmt_misc ", 12);
		/* under /proc, not /proc itself; binfmt_misc sits on a directory
		 * proc keeps empty, which the kernel does not count */
		if (mp && mpl > 6 && !memcmp(mp, "/proc/", 6) && !binfmt) {
			if (len + mpl + 3 > cap) {
				size_t nc = (cap ? cap * 2 : 128) + mpl + 3;
				char *nb = realloc(list, nc);
				if (!nb) {
					free(list);
					return -1;
				}
				list = nb;
				cap = nc;
			}
			if (len) {
				memcpy(list + len, ", ", 2);
				len += 2;
			}
			memcpy(list + len, mp, mpl); /* octal escapes (\040) kept as written */
			len += mpl;
			list[len] = '\0';
		}
		l = nl ? nl + 1 : NULL;
	}
	*out = list;
	return 0;
}

char *moat_ns_proc_diagnose(void)
{
	size_t len = 0;
	char *text = read_all("/proc/self/mountinfo", 16u << 20, &len);
	char *list = NULL, *s = NULL;
	if (!text || moat_proc_overmounts_parse(text, &list) < 0 || !list) {
		free(text);
		return NULL;
	}
	free(text);
	if (asprintf(&s, "/proc has mounts over parts of it (%s), as a container runtime masks "
		     "them, and the kernel gives a new /proc only to a namespace that can see all "
		     "of the old one; fix: in Kubernetes set securityContext.procMount: Unmasked "
		     "(it needs hostUsers: false), in Docker or Podman "
		     "--security-opt systempaths=unconfined", list) < 0)
		s = NULL;
	free(list);
	return s;
}

int moat_tree_check_self(bool runtime, char *why, size_t len)
{
	size_t n = 0;
	char *text = read_all("/proc/self/mountinfo", 16u << 20, &n);
	if (!text) {
		snprintf(why, len, "/proc/self/mountinfo cannot be read");
		return -1;
	}
	int rc = moat_tree_check_own(text, runtime, why, len);
	free(text);
	return rc;
}
