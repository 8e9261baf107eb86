/* `moat serve`: listeners: TCP, IPv6, the unix socket, the default listener, its group,
 * the token rule for TCP, --no-auth, --metrics-listen. Part of the serve suite (tcase "listen"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

/* ---- tests: listeners ----------------------------------------------------------------- */

START_TEST(socket_listener)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	/* a regular file where the socket goes: refused, the file stays */
	char dir[] = "/tmp/moat-serve-sock-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	char path[128];
	snprintf(path, sizeof path, "%s/moat.sock", dir);
	write_file(path, "not a socket", 12, 0666);
	const char *a_file[] = { "--socket", path, NULL };
	struct server_opts o1 = { .no_listener = true, .args = a_file };
	char *log;
	int st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st > 0, "--socket on a regular file: status %d (want an error; -1: it ran): %s",
		      st, log);
	free(log);
	server_cleanup(&s);
	char *left = slurp(path, NULL);
	ck_assert_msg(left && !strcmp(left, "not a socket"), "the regular file was touched");
	free(left);
	unlink(path);

	/* a stale socket file: replaced; the new one is 0600 and the server's */
	int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	ck_assert_uint_lt(strlen(path), sizeof a.sun_path);
	memcpy(a.sun_path, path, strlen(path) + 1);
	ck_assert_int_eq(bind(sfd, (struct sockaddr *)&a, sizeof a), 0);
	close(sfd);
	if (_i == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
	const char *a_sock[] = { "--socket", path, NULL };
	struct server_opts o2 = { .no_listener = true, .args = a_sock };
	server_spawn(&s, _i, &o2);
	snprintf(s.sock, sizeof s.sock, "%s", path);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat(path, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode), "not a socket");
	ck_assert_msg((sb.st_mode & 0777) == 0600, "socket mode %o (want 600)", sb.st_mode & 0777);
	uid_t want = _i == MODE_ROOTLESS && harness_is_root() ? ROOTLESS_ID : geteuid();
	ck_assert_msg(sb.st_uid == want, "socket owner %d (want %d)", (int)sb.st_uid, (int)want);
	struct resp r;
	run_py(&s, "print('via socket')", NULL, &r);
	expect_script("via the replaced socket", &r);
	resp_free(&r);
	server_stop(&s); /* checks the socket is removed */
	rmdir(dir);
}
END_TEST

/* As root: a mount namespace of the test's own with an empty tmpfs on /run,
 * where the root default's /run/moat is made unseen by the host (and by
 * other servers). 0, or -1 after saying why. */
static int private_run(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0) {
		perror("serve test: a private /run");
		return -1;
	}
	return 0;
}

/* Can uid and gid 65534, without other groups, connect to the unix socket
 * at path? (A forked child tries; a refusal other than EACCES fails.) */
static bool nobody_connects(const char *path)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 ||
		    setresgid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0 ||
		    setresuid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0)
			_exit(10);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
		if (fd < 0)
			_exit(11);
		if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			_exit(0);
		_exit(errno == EACCES ? 1 : 12);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) <= 1,
		      "uid 65534 connecting to %s: status %#x (not a connection, not EACCES)", path,
		      st);
	return WEXITSTATUS(st) == 0;
}

/* Is something listening on 127.0.0.1:port? */
static bool tcp_port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	bool open = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return open;
}

#define ROOT_SOCK "/run/moat/moat.sock"

/* The root default: the unix socket /run/moat/moat.sock, mode 0600, its
 * directory made 0755; nothing on 127.0.0.1:3000, nothing in
 * XDG_RUNTIME_DIR. With --socket-group: 0660 and that group's, so a member
 * connects. A /run/moat others may write is refused. The test moves itself
 * (and so the server) into network and mount namespaces of its own: the
 * fixed port and path are free there and nothing else on the machine sees
 * them. */
static void root_default_listener(void)
{
	int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int host_mnt = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(host_net, 0);
	ck_assert_int_ge(host_mnt, 0);
	ck_assert_msg(harness_private_netns() == 0, "cannot make the test's network namespace");
	ck_assert_msg(private_run() == 0, "cannot make the test's /run");
	ck_assert_msg(access("/run/moat", F_OK) < 0, "the private /run is not empty");
	char xdg[] = "/tmp/moat-serve-xdg-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(xdg));
	char xdg_env[128];
	snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg);
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", xdg_env, NULL };
	struct server s;
	struct server_opts o = { .no_listener = true, .env = env };
	server_spawn(&s, MODE_ROOT, &o);
	snprintf(s.sock, sizeof s.sock, "%s", ROOT_SOCK);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat("/run/moat", &sb), 0);
	ck_assert_msg(S_ISDIR(sb.st_mode) && (sb.st_mode & 07777) == 0755 && sb.st_uid == 0,
		      "/run/moat: mode %o uid %d (want a directory, 755, root's)", sb.st_mode,
		      (int)sb.st_uid);
	ck_assert_int_eq(lstat(ROOT_SOCK, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0600 && sb.st_uid == 0 &&
			      sb.st_gid == 0,
		      ROOT_SOCK ": mode %o owner %d:%d (want a socket, 600, 0:0)", sb.st_mode,
		      (int)sb.st_uid, (int)sb.st_gid);
	ck_assert_msg(!nobody_connects(ROOT_SOCK), "uid 65534 connected to the 0600 socket");
	ck_assert_msg(!tcp_port_open(3000), "as root without flags, 127.0.0.1:3000 is open");
	struct resp r;
	run_py(&s, "print('on the root default')", NULL, &r);
	expect_script("on the root default socket", &r);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(out && !strcmp(out, "on the root default\n"), "stdout: %.600s", r.body);
	resp_free(&r);
	get(&s, "/healthz", &r);
	ck_assert_msg(!strcmp(r.body, "{\"status\":\"ok\"}\n"),
		      "/healthz on the socket is not today's body: %s", r.body);
	resp_free(&r);
	char sock[160];
	snprintf(sock, sizeof sock, "%s/moat.sock", xdg);
	ck_assert_msg(access(sock, F_OK) < 0, "as root, moat serve made %s", sock);
	server_stop(&s);

	/* --socket-group: 0660 and the group's; a member of it connects */
	const char *a_grp[] = { "--socket-group", "65534", NULL };
	struct server_opts o2 = { .no_listener = true, .env = env, .args = a_grp };
	server_spawn(&s, MODE_ROOT, &o2);
	snprintf(s.sock, sizeof s.sock, "%s", ROOT_SOCK);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	ck_assert_int_eq(lstat(ROOT_SOCK, &sb), 0);
	ck_assert_msg((sb.st_mode & 0777) == 0660 && sb.st_uid == 0 && sb.st_gid == ROOTLESS_ID,
		      "--socket-group 65534: mode %o owner %d:%d (want 660, 0:65534)",
		      sb.st_mode & 0777, (int)sb.st_uid, (int)sb.st_gid);
	ck_assert_msg(nobody_connects(ROOT_SOCK), "a member of --socket-group cannot connect");
	server_stop(&s);

	/* a /run/moat that others may write: refused, nothing bound there */
	ck_assert_int_eq(chmod("/run/moat", 0777), 0);
	char *log;
	int st = refused_start(MODE_ROOT, &o, &s, &log);
	ck_assert_msg(st > 0 && strstr(log, "/run/moat"),
		      "a world-writable /run/moat: status %d (want a refusal naming it; -1: it ran): %s",
		      st, log);
	ck_assert_msg(access(ROOT_SOCK, F_OK) < 0, "a socket was made in a world-writable /run/moat");
	free(log);
	server_cleanup(&s);

	rmdir(xdg);
	ck_assert_int_eq(setns(host_net, CLONE_NEWNET), 0);
	ck_assert_int_eq(setns(host_mnt, CLONE_NEWNS), 0);
	close(host_net);
	close(host_mnt);
}

/* The default listener: as root /run/moat/moat.sock; rootless
 * $XDG_RUNTIME_DIR/moat.sock (mode 0600 both), and without it and without
 * a flag, an error. */
START_TEST(default_listener)
{
	HARNESS_MODE_GUARD(_i);
	if (_i == MODE_ROOT) {
		root_default_listener();
		return;
	}
	struct server s;
	const char *env_none[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };
	struct server_opts o1 = { .no_listener = true, .env = env_none };
	char *log;
	int st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st > 0, "rootless without XDG_RUNTIME_DIR and without a listener flag: status %d "
		      "(want an error; -1: it ran): %s", st, log);
	free(log);
	server_cleanup(&s);

	char xdg[] = "/tmp/moat-serve-xdg-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(xdg));
	ck_assert_int_eq(chmod(xdg, 0700), 0);
	if (harness_is_root())
		ck_assert_int_eq(chown(xdg, ROOTLESS_ID, ROOTLESS_ID), 0);
	char xdg_env[128];
	snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg);
	const char *env_xdg[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", xdg_env, NULL };
	struct server_opts o2 = { .no_listener = true, .env = env_xdg };
	server_spawn(&s, _i, &o2);
	snprintf(s.sock, sizeof s.sock, "%s/moat.sock", xdg);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct stat sb;
	ck_assert_int_eq(lstat(s.sock, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0600,
		      "%s: mode %o (want a socket, 600)", s.sock, sb.st_mode);
	server_stop(&s);
	rmdir(xdg);
}
END_TEST

/* --socket-group G (a gid or a name): the socket is 0660 and G's; a group
 * that does not exist, one the user is not in, and --socket-group with
 * --listen are refused. */
START_TEST(socket_group)
{
	HARNESS_MODE_GUARD(_i);
	/* the server's own group when rootless (chown to it is allowed);
	 * as root, nogroup by name */
	gid_t gid = _i == MODE_ROOTLESS && !harness_is_root() ? getegid() : ROOTLESS_ID;
	char gid_s[32];
	snprintf(gid_s, sizeof gid_s, "%u", (unsigned)gid);
	struct group *g = getgrgid(gid);
	const char *name = _i == MODE_ROOT && g ? g->gr_name : gid_s;
	const char *a[] = { "--socket-group", name, NULL };
	struct server s;
	struct server_opts o = { .socket = true, .args = a };
	server_start(&s, _i, &o);
	struct stat sb;
	ck_assert_int_eq(lstat(s.sock, &sb), 0);
	ck_assert_msg(S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0660 && sb.st_gid == gid,
		      "--socket-group %s: mode %o group %d (want 660, %d)", name, sb.st_mode & 0777,
		      (int)sb.st_gid, (int)gid);
	struct resp r;
	run_py(&s, "print('grouped')", NULL, &r);
	expect_script("over a --socket-group socket", &r);
	resp_free(&r);
	server_stop(&s);

	struct {
		const char *const *args;
		bool socket;
		const char *want, *what;
	} bad[] = {
		{ (const char *const[]){ "--socket-group", "no-such-group-moat", NULL }, true,
		  "no-such-group-moat", "a group that does not exist" },
		{ (const char *const[]){ "--socket-group", gid_s, NULL }, false, "--socket-group",
		  "--socket-group with --listen" },
		{ (const char *const[]){ "--socket-group", "0", NULL }, true, "--socket-group",
		  "a group the user is not in" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (i == 2 && (_i == MODE_ROOT || !harness_is_root()))
			continue; /* root may give it to any group; a user may be in 0 */
		struct server_opts ob = { .socket = bad[i].socket, .args = bad[i].args };
		char *log;
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st > 0 && strstr(log, bad[i].want) && !strstr(log, "unrecognized"),
			      "%s: status %d (want a refusal naming %s; -1: it ran): %s", bad[i].what,
			      st, bad[i].want, log);
		free(log);
		server_cleanup(&s);
	}
}
END_TEST

/* A listening unix socket at dir/moat.sock with mode (the server's in
 * mode): its fd. */
static int activation_socket(int mode, const char *path, mode_t fmode)
{
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	ck_assert_uint_lt(strlen(path), sizeof a.sun_path);
	memcpy(a.sun_path, path, strlen(path) + 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(chmod(path, fmode), 0);
	if (mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	return fd;
}

/* Socket activation (moat.socket; docs/SERVE.md "Socket activation"), as a
 * service manager does it: a bound, listening socket as fd 3 with
 * LISTEN_FDS=1, LISTEN_PID (the server's pid) and LISTEN_FDNAMES, and no
 * listener flag. The server answers on that socket, not on its default
 * one, and leaves the file (the manager's) when it stops. A passed socket
 * that group or others may connect to, or another user's, is refused. */
START_TEST(socket_activation)
{
	HARNESS_MODE_GUARD(_i);
	char dir[] = "/tmp/moat-serve-act-XXXXXX", xdg[] = "/tmp/moat-serve-actx-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_ptr_nonnull(mkdtemp(xdg));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	ck_assert_int_eq(chmod(xdg, 0700), 0);
	if (_i == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(xdg, ROOTLESS_ID, ROOTLESS_ID), 0);
	char path[128], xdg_env[128], xdg_sock[160];
	snprintf(path, sizeof path, "%s/moat.sock", dir);
	snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg);
	snprintf(xdg_sock, sizeof xdg_sock, "%s/moat.sock", xdg);
	char listen_pid[32] = "LISTEN_PID=";
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", xdg_env, "LISTEN_FDS=1",
			      "LISTEN_FDNAMES=moat.socket", listen_pid, NULL };
	const char *args[] = { "--pool", "0", NULL };

	int fd = activation_socket(_i, path, 0600);
	struct server s;
	struct server_opts o = { .no_listener = true, .env = env, .args = args, .pool = -1,
				 .pass_fd = fd, .listen_pid = listen_pid };
	server_spawn(&s, _i, &o);
	close(fd);
	snprintf(s.sock, sizeof s.sock, "%s", path);
	snprintf(s.url, sizeof s.url, "http://localhost");
	server_wait_ready(&s);
	struct resp r;
	run_py(&s,
	       "import os\n"
	       "socks = []\n"
	       "for f in os.listdir('/proc/self/fd'):\n"
	       "    try:\n"
	       "        l = os.readlink('/proc/self/fd/' + f)\n"
	       "    except OSError:\n"
	       "        continue\n"
	       "    if l.startswith('socket:'):\n"
	       "        socks.append(f)\n"
	       "print('activated', [k for k in os.environ if k.startswith('LISTEN_')], socks)",
	       NULL, &r);
	expect_script("over the passed socket", &r);
	/* the run sees neither the variables nor a socket of the service's */
	ck_assert_msg(strstr(r.body, "activated [] []"), "the answer: %s", r.body);
	resp_free(&r);
	char *log = server_log(&s);
	ck_assert_msg(strstr(log, "socket activation") && strstr(log, path),
		      "the log does not name the passed socket: %s", log);
	free(log);
	struct stat sb;
	ck_assert_msg(lstat(xdg_sock, &sb) < 0, "the server made its default socket %s as well",
		      xdg_sock);
	server_stop(&s);
	ck_assert_msg(lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode),
		      "the passed socket's file (the manager's) was removed at stop");

	/* refused: a socket group or others may connect to; another user's */
	struct {
		mode_t mode;
		bool other_owner;
		const char *want, *what;
	} bad[] = {
		{ 0666, false, "SocketMode=0600", "a socket anyone may connect to" },
		{ 0620, false, "SocketMode=0600", "a socket its group may connect to" },
		{ 0600, true, "another user", "another user's socket" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (bad[i].other_owner && !harness_is_root())
			continue; /* only root gives a file away */
		fd = activation_socket(_i, path, bad[i].mode);
		if (bad[i].other_owner)
			ck_assert_int_eq(chown(path, _i == MODE_ROOT ? ROOTLESS_ID : 0, 0), 0);
		struct server_opts ob = o;
		ob.pass_fd = fd;
		char *blog;
		int st = refused_start(_i, &ob, &s, &blog);
		close(fd);
		ck_assert_msg(st > 0 && strstr(blog, bad[i].want),
			      "%s: status %d (want a refusal naming %s; -1: it ran): %s",
			      bad[i].what, st, bad[i].want, blog);
		free(blog);
		server_cleanup(&s);
		ck_assert_msg(lstat(xdg_sock, &sb) < 0, "%s: the server made its default socket",
			      bad[i].what);
	}
	unlink(path);
	rmdir(dir);
	rmdir(xdg);
}
END_TEST

/* The line of log that holds needle, or NULL; into buf. */
static const char *log_line(const char *log, const char *needle, char *buf, size_t size)
{
	const char *p = strstr(log, needle);
	if (!p)
		return NULL;
	const char *b = p;
	while (b > log && b[-1] != '\n')
		b--;
	size_t len = strcspn(b, "\n");
	snprintf(buf, size, "%.*s", (int)len, b);
	return buf;
}

/* A TCP listener without --token-file, loopback too, refuses to start with
 * one line naming both ways out (--token-file, --no-auth); nothing listens. */
START_TEST(tcp_needs_token)
{
	HARNESS_MODE_GUARD(_i);
	harness_private_ports();
	int port = free_port();
	char listen[64];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
	const char *a[] = { "--listen", listen, NULL };
	struct server_opts o = { .no_listener = true, .args = a };
	struct server s;
	char *log, line[1024];
	int st = refused_start(_i, &o, &s, &log);
	ck_assert_msg(st == 2, "--listen %s without a token: status %d (want 2; -1: it ran): %s",
		      listen, st, log);
	ck_assert_msg(log_line(log, "--token-file", line, sizeof line) && strstr(line, "--no-auth"),
		      "the refusal is not one line naming --token-file and --no-auth: %s", log);
	ck_assert_msg(!tcp_port_open(port), "127.0.0.1:%d is open after the refusal", port);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* --no-auth: a loopback listener without a token, said at start and in
 * /healthz; refused off loopback and with --token-file. */
START_TEST(no_auth)
{
	HARNESS_MODE_GUARD(_i);
	harness_private_ports();
	const char *a[] = { "--no-auth", NULL };
	struct server s;
	struct server_opts o = { .args = a };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print('open')", NULL, &r);
	expect_script("--no-auth, no Authorization", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "open\n");
	resp_free(&r);
	get(&s, "/metrics", &r);
	ck_assert_msg(r.code == 200, "/metrics with --no-auth: HTTP %d", r.code);
	resp_free(&r);
	get(&s, "/healthz", &r);
	const char *auth = jstr(r.json, "auth"), *warn = jstr(r.json, "warning");
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "status"), "ok") && auth &&
			      !strcmp(auth, "off") && warn && strstr(warn, "--no-auth"),
		      "/healthz with --no-auth does not say auth is off: %d %s", r.code, r.body);
	resp_free(&r);
	char *log = server_log(&s), line[1024];
	ck_assert_msg(strstr(log, "authentication is off (--no-auth)"), "no warning at start: %s",
		      log);
	free(log);
	server_stop(&s);

	int port = free_port();
	char any[64];
	snprintf(any, sizeof any, "0.0.0.0:%d", port);
	struct {
		const char *const *args;
		bool token;
		const char *want1, *want2, *what;
	} bad[] = {
		{ (const char *const[]){ "--listen", any, "--no-auth", NULL }, false, "loopback",
		  "--token-file", "--no-auth on 0.0.0.0" },
		{ (const char *const[]){ "--no-auth", NULL }, true, "--no-auth", "--token-file",
		  "--no-auth with --token-file" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct server_opts ob = { .no_listener = i == 0, .args = bad[i].args,
					  .token = bad[i].token };
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st == 2 && log_line(log, bad[i].want1, line, sizeof line) &&
				      strstr(line, bad[i].want2) && !strstr(log, "unrecognized"),
			      "%s: status %d (want 2 and a line naming %s and %s; -1: it ran): %s",
			      bad[i].what, st, bad[i].want1, bad[i].want2, log);
		free(log);
		server_cleanup(&s);
	}
	ck_assert_msg(!tcp_port_open(port), "0.0.0.0:%d is open after the refusal", port);
}
END_TEST

/* --metrics-listen: GET /metrics there without a token, 404 for every other
 * path (tokens or not); the main listener still wants the token for
 * /metrics. Nothing of a tenant (sandboxId, code, output) is in it. */
START_TEST(metrics_listener)
{
	HARNESS_MODE_GUARD(_i);
	harness_private_ports();
	int mport = free_port();
	char ml[64];
	snprintf(ml, sizeof ml, "127.0.0.1:%d", mport);
	const char *a[] = { "--metrics-listen", ml, NULL };
	struct server s;
	struct server_opts o = { .token = true, .args = a };
	server_start(&s, _i, &o);
	struct resp r;
	struct req q = { .path = "/py/run", .auth = "Bearer " TOKEN,
			 .body = "{\"code\":\"print('secret-output-7q')\","
				 "\"sandboxId\":\"tenant-id-9z\"}" };
	call(&s, &q, &r);
	expect_script("a run with the token", &r);
	resp_free(&r);
	get(&s, "/metrics", &r);
	expect_error("/metrics on the main listener without token", &r, 401,
		     "AuthenticationError");
	resp_free(&r);
	struct req qm = { .path = "/metrics", .auth = "Bearer " TOKEN };
	call(&s, &qm, &r);
	ck_assert_msg(r.code == 200, "/metrics on the main listener with the token: HTTP %d",
		      r.code);
	resp_free(&r);

	char main_url[sizeof s.url];
	snprintf(main_url, sizeof main_url, "%s", s.url);
	snprintf(s.url, sizeof s.url, "http://%s", ml);
	get(&s, "/metrics", &r);
	char ct[128];
	int found = 0;
	ck_assert_msg(r.code == 200, "/metrics on --metrics-listen without token: HTTP %d %s",
		      r.code, r.body);
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/plain"),
		      "--metrics-listen /metrics Content-Type: %s", r.head);
	ck_assert_msg(metric_sum(r.body, "moat_serve_requests_total", NULL, &found) >= 1 &&
			      found > 0,
		      "--metrics-listen /metrics counts no request:\n%.3000s", r.body);
	ck_assert_msg(!strstr(r.body, "tenant-id-9z") && !strstr(r.body, "secret-output-7q"),
		      "the metrics hold a tenant's id or output:\n%.3000s", r.body);
	resp_free(&r);
	static const char *const others[] = { "/healthz", "/py/run", "/v1/run", "/v1/kv/a",
					      "/metrics/x", "/" };
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		struct req qo = { .path = others[i], .auth = "Bearer " TOKEN,
				  .body = strcmp(others[i], "/healthz") ? "{\"code\":\"print(1)\","
									  "\"sandboxId\":\"a\"}"
									: NULL };
		call(&s, &qo, &r);
		ck_assert_msg(r.code == 404, "%s on --metrics-listen: HTTP %d (want 404) %s",
			      others[i], r.code, r.body);
		resp_free(&r);
	}
	snprintf(s.url, sizeof s.url, "%s", main_url);
	server_stop(&s);
	ck_assert_msg(!tcp_port_open(mport), "--metrics-listen %s is still open after the stop",
		      ml);
}
END_TEST

void serve_listen_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "listen");

	SERVE_ADD(tc, only, socket_listener, SERVE_MODES);
	SERVE_ADD(tc, only, default_listener, SERVE_MODES);
	SERVE_ADD(tc, only, socket_group, SERVE_MODES);
	SERVE_ADD(tc, only, tcp_needs_token, SERVE_MODES);
	SERVE_ADD(tc, only, no_auth, SERVE_MODES);
	SERVE_ADD(tc, only, metrics_listener, SERVE_MODES);
	SERVE_ADD(tc, only, socket_activation, SERVE_MODES);
}
