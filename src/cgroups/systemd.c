/* Delegation from the user's systemd: on a cgroup v2 host where rootless
 * moat's own cgroup is not delegated (a terminal's session-N.scope, a
 * service's cgroup), a run that asks for a limit would fall back to
 * rlimits. Instead moat asks the user's systemd manager, over the user bus,
 * for a transient scope with Delegate=yes holding its own pid
 * (org.freedesktop.systemd1.Manager.StartTransientUnit, what
 * `systemd-run --user --scope -p Delegate=yes` asks), waits for the start
 * job and for its own move, and the caller re-probes /proc/self/cgroup:
 * nothing systemd says is taken for the cgroup moat gets.
 *
 * The user manager cannot move moat out of session-N.scope itself (cgroup
 * v2's common-ancestor rule: the ancestor, user-<uid>.slice, is root's); it
 * asks PID 1 (AttachProcessesToUnit), which checks that the process is the
 * caller's uid. That second hop is asynchronous: the job is "done" before
 * the move, so moat waits for /proc/self/cgroup to name the scope.
 *
 * The scope goes away with moat: systemd stops a scope once its cgroup is
 * empty, removes the delegated subtree (moat's leaves in it), and
 * CollectMode=inactive-or-failed lets it forget a failed one as well. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroups/internal.h"
#include "cgroups/systemd_dl.h"
#include "core/sys.h"

#define fmt moat_format

#define SD_DEST "org.freedesktop.systemd1"
#define SD_PATH "/org/freedesktop/systemd1"
#define SD_MANAGER "org.freedesktop.systemd1.Manager"

/* ---- pure parts (unit suite cgroups) ------------------------------------- */

bool moat_cg_delegation_wanted(bool v2_pure, bool have_parent, bool parent_from_env, uid_t euid,
			       bool want_limit)
{
	return v2_pure && !have_parent && !parent_from_env && euid != 0 && want_limit;
}

/* D-Bus address values escape every byte but [-0-9A-Za-z_/.\*] as %XX. */
char *moat_cg_dbus_escape(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1), *o = out;
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned char c = *p;
		if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    c == '-' || c == '_' || c == '/' || c == '.' || c == '\\' || c == '*') {
			*o++ = (char)c;
		} else {
			snprintf(o, 4, "%%%02x", c);
			o += 3;
		}
	}
	*o = '\0';
	return out;
}

char *moat_cg_user_bus(const char *dbus_env, const char *xdg_env, uid_t uid,
		       bool (*owned_socket)(const char *path, uid_t uid), char **why)
{
	*why = NULL;
	if (dbus_env && *dbus_env) {
		/* a local socket only: sd-bus would also connect over tcp: and
		 * run the program a unixexec: address names, from moat's
		 * supervisor; each ';'-separated entry must be unix: */
		for (const char *a = dbus_env; *a; a += strcspn(a, ";"), a += *a == ';')
			if (strncmp(a, "unix:", 5)) {
				*why = fmt("DBUS_SESSION_BUS_ADDRESS=%s is not a unix: address (moat "
					   "connects only to a local socket)", dbus_env);
				return NULL;
			}
		return strdup(dbus_env);
	}
	char *path = NULL;
	if (xdg_env && *xdg_env) {
		if (xdg_env[0] != '/') {
			*why = fmt("XDG_RUNTIME_DIR=%s is not an absolute path", xdg_env);
			return NULL;
		}
		path = fmt("%s/bus", xdg_env);
	} else {
		/* Not in a login session's environment (sudo -u, su without -l,
		 * cron, a system service with User=): the user manager's bus, if
		 * it runs, is there. /run/user/<uid> is made by systemd-logind,
		 * owned by uid, mode 0700; the socket must be uid's too. */
		path = fmt("/run/user/%ld/bus", (long)uid);
		if (path && !owned_socket(path, uid)) {
			*why = fmt("no user bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are "
				   "unset and %s is not a socket of uid %ld (no systemd user "
				   "manager runs for this user: `loginctl enable-linger` starts one "
				   "without a login; Debian and Ubuntu need dbus-user-session)",
				   path, (long)uid);
			free(path);
			return NULL;
		}
	}
	char *esc = path ? moat_cg_dbus_escape(path) : NULL;
	char *addr = esc ? fmt("unix:path=%s", esc) : NULL;
	free(path);
	free(esc);
	return addr;
}

int moat_cg_scope_name(pid_t pid, uint32_t rnd, char *buf, size_t len)
{
	int n = snprintf(buf, len, "moat-%ld-%08x.scope", (long)pid, rnd);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

bool moat_cg_path_in_unit(const char *v2path, const char *unit)
{
	if (!v2path || !unit || !*unit)
		return false;
	const char *last = strrchr(v2path, '/');
	return last && !strcmp(last + 1, unit);
}

char *moat_cg_systemd_error(const char *step, int r, const char *bus_name, const char *bus_msg,
			    const char *addr)
{
	int e = r < 0 ? -r : r;
	const char *hint = "";
	if (bus_name) {
		if (!strcmp(bus_name, "org.freedesktop.DBus.Error.ServiceUnknown") ||
		    !strcmp(bus_name, "org.freedesktop.DBus.Error.NameHasNoOwner"))
			hint = " (no systemd user manager on that bus)";
		else if (!strcmp(bus_name, "org.freedesktop.DBus.Error.AccessDenied") ||
			 !strcmp(bus_name, "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"))
			hint = " (systemd refused)";
		else if (!strcmp(bus_name, "org.freedesktop.DBus.Error.NoReply") ||
			 !strcmp(bus_name, "org.freedesktop.DBus.Error.Timeout"))
			hint = " (no answer in time)";
		return fmt("%s on %s: %s: %s%s", step, addr ? addr : "the user bus", bus_name,
			   bus_msg && *bus_msg ? bus_msg : strerror(e), hint);
	}
	if (e == ENOENT || e == ECONNREFUSED)
		hint = " (no user bus there: no systemd user manager runs for this user; "
		       "`loginctl enable-linger` starts one without a login)";
	else if (e == EACCES || e == EPERM)
		hint = " (the bus refused moat)";
	else if (e == ETIMEDOUT)
		hint = " (no answer in time)";
	return fmt("%s on %s: %s%s", step, addr ? addr : "the user bus", strerror(e), hint);
}

/* ---- the call -------------------------------------------------------------- */

static bool owned_socket(const char *path, uid_t uid)
{
	struct stat st;
	return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == uid;
}

static int64_t mono_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static uint64_t left_us(int64_t deadline)
{
	int64_t l = deadline - mono_us();
	return l > 0 ? (uint64_t)l : 1;
}

/* moat's cgroup v2 path now (malloc'd), or NULL */
static char *self_v2(void)
{
	char *text = moat_cg_read("/proc/self", "cgroup");
	struct moat_cg_self s;
	char *v2 = NULL;
	if (text && moat_cg_parse_self(text, &s) == 0) {
		v2 = s.v2;
		s.v2 = NULL;
		moat_cg_self_free(&s);
	}
	free(text);
	return v2;
}

struct job_wait {
	const char *unit;
	char *result; /* "done", "failed", ... once JobRemoved named our unit */
};

static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *ret)
{
	struct job_wait *w = userdata;
	uint32_t id;
	const char *path, *unit, *result;
	if (sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0)
		return 0;
	if (!w->result && unit && !strcmp(unit, w->unit))
		w->result = strdup(result ? result : "?");
	return 0;
}

/* The bus connection: opened on addr (sd-bus's sockets are SOCK_CLOEXEC). */
static int bus_open(const char *addr, sd_bus **out)
{
	sd_bus *bus = NULL;
	int r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_address(bus, addr);
	if (r >= 0)
		r = sd_bus_set_bus_client(bus, 1);
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r < 0) {
		if (bus) {
			sd_bus_close(bus);
			sd_bus_unref(bus);
		}
		return r;
	}
	*out = bus;
	return 0;
}

/* The bus address (malloc'd) with libsystemd loaded, or NULL with *why. */
static char *prepare(char **why)
{
	char *addr = moat_cg_user_bus(secure_getenv("DBUS_SESSION_BUS_ADDRESS"),
				      secure_getenv("XDG_RUNTIME_DIR"), geteuid(), owned_socket, why);
	if (!addr) {
		if (!*why)
			*why = fmt("out of memory");
		return NULL;
	}
	const char *lw;
	if (moat_sdbus_load(&lw) < 0) {
		*why = fmt("%s", lw);
		free(addr);
		return NULL;
	}
	return addr;
}

int moat_cg_systemd_delegate(int timeout_ms, char **unit_out, char **why)
{
	*unit_out = NULL;
	*why = NULL;
	int64_t deadline = mono_us() + (int64_t)timeout_ms * 1000;
	char *addr = prepare(why);
	if (!addr)
		return -1;
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd)
		rnd = (uint32_t)mono_us();
	char unit[96];
	moat_cg_scope_name(getpid(), rnd, unit, sizeof unit);

	sd_bus *bus = NULL;
	sd_bus_slot *slot = NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	struct job_wait w = { unit, NULL };
	int rc = -1;
	int r = bus_open(addr, &bus);
	if (r < 0) {
		*why = moat_cg_systemd_error("cannot connect to the user bus", r, NULL, NULL, addr);
		goto out;
	}
	/* the match goes out before the call, so the bus routes JobRemoved to us */
	r = sd_bus_match_signal_async(bus, &slot, SD_DEST, SD_PATH, SD_MANAGER, "JobRemoved",
				      on_job_removed, NULL, &w);
	if (r >= 0)
		r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH, SD_MANAGER,
						   "StartTransientUnit");
	if (r >= 0)
		r = sd_bus_message_append(m, "ss", unit, "fail");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "(sv)");
	if (r >= 0)
		r = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)(sv)",
					  "PIDs", "au", 1, (uint32_t)getpid(),
					  "Delegate", "b", 1,
					  "Slice", "s", "app.slice",
					  "CollectMode", "s", "inactive-or-failed",
					  "Description", "s", "moat: delegated cgroup for its sandboxes");
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_append(m, "a(sa(sv))", 0);
	if (r < 0) {
		*why = moat_cg_systemd_error("cannot build the StartTransientUnit call", r, NULL,
					     NULL, addr);
		goto out;
	}
	r = sd_bus_call(bus, m, left_us(deadline), &e, &reply);
	if (r < 0) {
		*why = moat_cg_systemd_error("StartTransientUnit", r, e.name, e.message, addr);
		goto out;
	}
	/* the start job, then moat's own move (PID 1 does it, after the job) */
	while (!w.result && mono_us() < deadline) {
		r = sd_bus_process(bus, NULL);
		if (r < 0) {
			*why = moat_cg_systemd_error("waiting for the scope's start job", r, NULL,
						     NULL, addr);
			goto out;
		}
		if (r == 0)
			(void)sd_bus_wait(bus, left_us(deadline));
	}
	if (w.result && strcmp(w.result, "done")) {
		*why = fmt("systemd's job starting %s ended \"%s\" (`journalctl --user -u %s` "
			   "says why)", unit, w.result, unit);
		goto out;
	}
	for (;;) {
		char *now = self_v2();
		bool in = moat_cg_path_in_unit(now, unit);
		free(now);
		if (in)
			break;
		if (mono_us() >= deadline) {
			*why = fmt("systemd %s %s, but moat's /proc/self/cgroup did not name it "
				   "within %d ms", w.result ? "started" : "did not report starting",
				   unit, timeout_ms);
			goto out;
		}
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	*unit_out = strdup(unit);
	rc = *unit_out ? 0 : -1;
	if (rc < 0)
		*why = fmt("out of memory");
out:
	if (m)
		sd_bus_message_unref(m);
	if (reply)
		sd_bus_message_unref(reply);
	if (slot)
		sd_bus_slot_unref(slot);
	sd_bus_error_free(&e);
	if (bus) {
		sd_bus_close(bus);
		sd_bus_unref(bus);
	}
	free(w.result);
	free(addr);
	return rc;
}

int moat_cg_systemd_reachable(int timeout_ms, char **version, char **addr_out, char **why)
{
	*version = *addr_out = *why = NULL;
	char *addr = prepare(why);
	if (!addr)
		return -1;
	sd_bus *bus = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	int rc = -1;
	int r = bus_open(addr, &bus);
	if (r < 0) {
		*why = moat_cg_systemd_error("cannot connect to the user bus", r, NULL, NULL, addr);
		goto out;
	}
	/* Properties.Get, not sd_bus_get_property_string: that one waits sd-bus's
	 * default 25 s */
	sd_bus_message *m = NULL, *reply = NULL;
	const char *v = NULL;
	r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH,
					   "org.freedesktop.DBus.Properties", "Get");
	if (r >= 0)
		r = sd_bus_message_append(m, "ss", SD_MANAGER, "Version");
	if (r >= 0)
		r = sd_bus_call(bus, m, (uint64_t)timeout_ms * 1000, &e, &reply);
	if (r >= 0)
		r = sd_bus_message_read(reply, "v", "s", &v);
	if (r >= 0 && !(*version = strdup(v ? v : "?")))
		r = -ENOMEM;
	if (m)
		sd_bus_message_unref(m);
	if (reply)
		sd_bus_message_unref(reply);
	if (r < 0) {
		*why = moat_cg_systemd_error("asking the user manager for its version", r, e.name,
					     e.message, addr);
		goto out;
	}
	*addr_out = addr;
	addr = NULL;
	rc = 0;
out:
	sd_bus_error_free(&e);
	if (bus) {
		sd_bus_close(bus);
		sd_bus_unref(bus);
	}
	free(addr);
	return rc;
}
