/* Socket activation (sd_listen_fds(3)): the listener a service manager
 * made and passed as fd 3, with LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES
 * in the environment. moat.socket (a systemd user unit, docs/SERVE.md
 * "Socket activation") makes $XDG_RUNTIME_DIR/moat.sock with mode 0600.
 *
 * The fds are taken with libsystemd's sd_listen_fds_with_names, loaded with
 * dlopen like sd-bus (cgroups/systemd_dl.c; moat links no libsystemd), only
 * when LISTEN_FDS is set: a service started any other way never loads it.
 * Without libsystemd.so.0 (a host whose manager is not systemd, or a test)
 * the same documented protocol is read here: LISTEN_PID must be this
 * process, fds 3 .. 3+LISTEN_FDS-1 are made close-on-exec, and the three
 * variables are removed so no run inherits them. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sys.h"
#include "moat_admin.h"

#define LISTEN_FDS_START 3
#define LISTEN_FDS_MAX 64 /* more is not a moat.socket: refused */

struct sd_fns {
	int (*listen_fds_with_names)(int, char ***);
};
static struct sd_fns sd;
static struct moat_dl_once once = MOAT_DL_ONCE_INIT;
static const struct moat_dl_sym syms[] = {
	{ "sd_listen_fds_with_names", offsetof(struct sd_fns, listen_fds_with_names) },
};

static void load(void)
{
	moat_dl_load(&once, "libsystemd.so.0", syms, 1, &sd, sizeof sd,
		     "libsystemd.so.0 cannot be loaded (Debian package libsystemd0)",
		     "libsystemd.so.0 lacks sd_listen_fds_with_names (systemd 227 or later)");
}

static void unset_env(void)
{
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
}

/* The protocol without libsystemd: the number of fds passed to this
 * process (0: none, LISTEN_PID is another's), or -1 with *why. */
static int listen_fds_env(const char **why)
{
	const char *pid_s = getenv("LISTEN_PID"), *n_s = getenv("LISTEN_FDS");
	char *end;
	errno = 0;
	unsigned long pid = pid_s ? strtoul(pid_s, &end, 10) : 0;
	if (!pid_s || errno || end == pid_s || *end || pid != (unsigned long)getpid())
		return 0;
	errno = 0;
	unsigned long n = n_s ? strtoul(n_s, &end, 10) : 0;
	if (!n_s || errno || end == n_s || *end) {
		*why = "LISTEN_FDS is not a number";
		return -1;
	}
	if (n > LISTEN_FDS_MAX) {
		*why = "more sockets were passed than moat.socket makes (one)";
		return -1;
	}
	for (int fd = LISTEN_FDS_START; fd < LISTEN_FDS_START + (int)n; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0) {
			*why = "LISTEN_FDS names an fd that is not open";
			return -1;
		}
	}
	return (int)n;
}

/* A unix socket's file, when nothing but its mode guards it (no token):
 * 0, or -1 with *why. The file at the socket's path is checked, which is
 * the socket the manager bound unless someone who may write its directory
 * replaced it (SECURITY.md: $XDG_RUNTIME_DIR is the user's, 0700). */
static int unix_mode_ok(const struct sockaddr_un *a, socklen_t len, const char **why)
{
	if (len <= offsetof(struct sockaddr_un, sun_path) || a->sun_path[0] == '\0') {
		*why = "the passed socket has no file (an abstract or unnamed socket has no mode "
		       "to guard it): give --token-file";
		return -1;
	}
	struct stat st;
	if (stat(a->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		*why = "the passed socket's file is gone or is not a socket";
		return -1;
	}
	if (st.st_uid != geteuid()) {
		*why = "the passed socket's file belongs to another user";
		return -1;
	}
	if (st.st_mode & 0022) {
		/* connecting takes write permission on the file */
		*why = "the passed socket's file lets group or others connect (moat.socket "
		       "sets SocketMode=0600): any of them could run code as this user";
		return -1;
	}
	return 0;
}

int moat_serve_activated(bool token, int *fd_out, char **desc, const char **why)
{
	*fd_out = -1;
	*desc = NULL;
	if (!getenv("LISTEN_FDS")) {
		unset_env();
		return 0;
	}
	int n;
	const char *dl_why;
	char **names = NULL;
	if (moat_dl_once(&once, load, &dl_why) == 0) {
		n = sd.listen_fds_with_names(1, &names);
		if (n < 0) {
			*why = "sd_listen_fds failed (LISTEN_FDS or LISTEN_FDNAMES is malformed)";
			return -1;
		}
		if (n > LISTEN_FDS_MAX) {
			*why = "more sockets were passed than moat.socket makes (one)";
			n = -1;
		}
	} else {
		n = listen_fds_env(why);
	}
	unset_env();
	if (names)
		moat_strv_free(names);
	if (n <= 0)
		return n;
	if (n != 1) {
		for (int i = 0; i < n; i++)
			close(LISTEN_FDS_START + i);
		*why = "more than one socket was passed (moat.socket has one ListenStream=)";
		return -1;
	}
	int fd = LISTEN_FDS_START, type = 0, acc = 0;
	socklen_t tl = sizeof type, al = sizeof acc;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	memset(&ss, 0, sizeof ss);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		close(fd);
		*why = "the passed fd is not a listening stream socket (moat.socket: "
		       "ListenStream=, Accept=no)";
		return -1;
	}
	int rc = 0;
	if (ss.ss_family == AF_UNIX) {
		const struct sockaddr_un *a = (const struct sockaddr_un *)&ss;
		if (!token && unix_mode_ok(a, sl, why) < 0)
			rc = -1;
		else if (sl > offsetof(struct sockaddr_un, sun_path) && a->sun_path[0] &&
			 asprintf(desc, "unix:%.*s (socket activation)",
				  (int)(sl - offsetof(struct sockaddr_un, sun_path)),
				  a->sun_path) < 0)
			*desc = NULL;
	} else if (asprintf(desc, "a TCP socket (socket activation)") < 0) {
		*desc = NULL;
	}
	if (rc < 0) {
		close(fd);
		return -1;
	}
	*fd_out = fd;
	return 1;
}
