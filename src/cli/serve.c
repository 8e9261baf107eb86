/* moat serve: the command line of the HTTP service (docs/SERVE.md): the
 * listener, the token, the runtime shims, then libmoat's moat_serve_run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/cli.h"

#define TOKEN_MIN 16
#define TOKEN_MAX 4096
#define ROOT_SOCKET_DIR "/run/moat" /* root's default listener: moat.sock in it */

static void usage(FILE *f)
{
	fputs("usage: moat serve [--listen HOST:PORT | --socket PATH [--socket-group G]]\n"
	      "                  [--token-file F | --no-auth] [--metrics-listen HOST:PORT]\n"
	      "                  [--max-concurrent N] [--queue N] [--config F] [--rootfs DIR]\n"
	      "                  [--runtime DIR] [--grace SECS] [--client-timeout SECS]\n"
	      "                  [--kv SPEC] [--kv-quota keys=N,bytes=N,value=N,free=N | --no-kv]\n"
	      "                  [--pool N] [--pool-zygote | --no-pool-zygote] [--json-log]\n"
	      "                  [--pool-zygote-max-children N] [--pool-zygote-max-age SECS]\n"
	      "                  [--max-relays N] [--max-dns N] [--max-sessions N]\n"
	      "                  [--max-sandboxes N]\n"
	      "Serves the Spin sandbox API (POST /py/..., /ts/...) and the moat exec contract\n"
	      "(POST /v1/run) over HTTP; docs/SERVE.md. Default listener: the unix\n"
	      "socket /run/moat/moat.sock as root, $XDG_RUNTIME_DIR/moat.sock otherwise,\n"
	      "mode 0600 (--socket-group G: 0660, group G). A TCP listener (--listen),\n"
	      "loopback too, needs --token-file; --no-auth serves loopback without one.\n"
	      "--metrics-listen HOST:PORT also serves GET /metrics there without the token.\n"
	      "kvEnabled requests use the store of --kv (a file, sqlite:FILE or\n"
	      "redis://HOST:PORT/DB; default: the SQLite file of this user); docs/KV.md.\n"
	      "--pool N keeps N warm python, javascript and typescript sandboxes each\n"
	      "(typescript where the root has esbuild; 0: none;\n"
	      "default: config serve.pool, else 1-2 by available memory).\n"
	      "--pool-zygote (with a pool): Python requests are made by forking an\n"
	      "initialised interpreter, each into a fresh sandbox (docs/SERVE.md);\n"
	      "default: config serve.poolZygote, else on unless --rootfs or a policy\n"
	      "is set. --no-pool-zygote: warm Python interpreters instead.\n"
	      "--pool-zygote-max-children N, --pool-zygote-max-age SECS: a zygote is\n"
	      "replaced after making N sandboxes or after SECS, whichever comes first\n"
	      "(its children share its address layout and str hash secret; default:\n"
	      "config serve.poolZygoteMaxChildren / poolZygoteMaxAge, else 100 and 60).\n"
	      "--max-relays N, --max-dns N: connections relayed out of the host and DNS\n"
	      "questions resolved at once across all runs (a full cap resets a new\n"
	      "connection, answers a question SERVFAIL; default: config serve.maxRelays /\n"
	      "maxDns, else 4096 and 256).\n"
	      "--max-sessions N: sessions (POST /v1/sessions, docs/SESSIONS.md) live at\n"
	      "once; 0 turns sessions off (default: config serve.sessions.max, else by\n"
	      "available memory, at most 64).\n"
	      "--max-sandboxes N: live sandboxes (POST /v1/sandboxes, docs/SANDBOXES.md)\n"
	      "at once; they never take a run slot; 0 turns them off (default: as\n"
	      "--max-sessions' default).\n"
	      "--json-log writes every log line as one JSON object to stdout (for a log\n"
	      "collector, e.g. in a pod); by default the log goes to stderr.\n",
	      f);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("moat serve: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi || s[0] == '-')
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* "127.0.0.1:3000", "[::1]:3000". Numeric addresses only. */
static int tcp_listener(const char *spec)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host)
		return -1;
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	unsigned port;
	if (parse_uint(colon + 1, 1, 65535, &port) < 0)
		return -1;
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t sl;
	size_t hl = strlen(host);
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
			return -1;
		sl = sizeof *a;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -1;
		sl = sizeof *a;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -2;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -2;
	}
	return fd;
}

/* tcp_listener for flag's spec: the fd, or -1 after saying why, with *rc
 * the exit status (2: not an address, 3: cannot listen there). */
static int tcp_listener_for(const char *flag, const char *spec, int *rc)
{
	int fd = tcp_listener(spec);
	if (fd == -1) {
		*rc = bad("%s wants a numeric HOST:PORT (127.0.0.1:3000, [::1]:3000), not %s", flag,
			  spec);
	} else if (fd == -2) {
		fprintf(stderr, "moat serve: cannot listen on %s: %s\n", spec, strerror(errno));
		*rc = 3;
	}
	return fd < 0 ? -1 : fd;
}

/* A unix socket with mode 0600, or 0660 owned by group gid (not -1); an
 * existing socket file at path is replaced, anything else there is an
 * error. */
static int unix_listener(const char *path, gid_t gid, const char **why)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof a.sun_path) {
		*why = "the socket path is too long";
		return -1;
	}
	strcpy(a.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			*why = "a file that is not a socket is in the way";
			return -1;
		}
		if (unlink(path) < 0) {
			*why = strerror(errno);
			return -1;
		}
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*why = strerror(errno);
		return -1;
	}
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
	int e = errno;
	umask(old);
	if (rc == 0 && gid != (gid_t)-1 && (chown(path, (uid_t)-1, gid) < 0 ||
					   chmod(path, 0660) < 0)) {
		e = errno;
		close(fd);
		unlink(path);
		*why = e == EPERM ? "cannot give the socket to --socket-group (not a group of "
				    "this user)"
				  : strerror(e);
		return -1;
	}
	if (rc < 0 || (gid == (gid_t)-1 && chmod(path, 0600) < 0) || listen(fd, 128) < 0) {
		e = rc < 0 ? e : errno;
		close(fd);
		if (rc == 0)
			unlink(path);
		*why = strerror(e);
		return -1;
	}
	return fd;
}

/* --socket-group: a group name or a numeric gid. */
static int parse_group(const char *s, gid_t *gid)
{
	unsigned n;
	if (parse_uint(s, 0, 0x7fffffff, &n) == 0) {
		*gid = (gid_t)n;
		return 0;
	}
	long size = sysconf(_SC_GETGR_R_SIZE_MAX);
	size_t cap = size > 0 ? (size_t)size : 16384;
	for (int tries = 0; tries < 6; tries++, cap *= 4) {
		char *buf = malloc(cap);
		if (!buf)
			return -1;
		struct group g, *res = NULL;
		int e = getgrnam_r(s, &g, buf, cap, &res);
		if (res)
			*gid = g.gr_gid;
		free(buf);
		if (e == ERANGE)
			continue;
		return res ? 0 : -1;
	}
	return -1;
}

/* As root, the default socket's directory: made 0755 when missing; one that
 * is not root's own directory, or that others may write, is refused (a user
 * could swap the socket). 0, or -1 after saying why. */
static int root_run_dir(const char *dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "moat serve: cannot make %s: %s (give --socket PATH)\n", dir,
			strerror(errno));
		return -1;
	}
	struct stat st;
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & 022)) {
		fprintf(stderr, "moat serve: %s is not a directory of root's that only root can "
				"write (give --socket PATH)\n", dir);
		return -1;
	}
	return 0;
}

/* The token: the file's first line, at least 16 bytes of printable ASCII
 * without spaces; the file must be private to its owner. */
static char *read_token(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		fprintf(stderr, "moat serve: --token-file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "moat serve: --token-file %s is not a regular file\n", path);
		goto out;
	}
	if (st.st_mode & 077) {
		fprintf(stderr, "moat serve: --token-file %s is readable or writable by others "
				"(mode %04o); chmod 600 it\n", path, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	if (!(buf = calloc(1, TOKEN_MAX + 1)))
		goto out;
	ssize_t n = read(fd, buf, TOKEN_MAX);
	if (n < 0) {
		fprintf(stderr, "moat serve: --token-file %s: %s\n", path, strerror(errno));
		goto fail;
	}
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	size_t len = strlen(buf);
	for (size_t i = 0; i < len; i++)
		if (buf[i] <= 0x20 || buf[i] == 0x7f) {
			fprintf(stderr, "moat serve: --token-file %s: the token must be printable "
					"ASCII without spaces\n", path);
			goto fail;
		}
	if (len < TOKEN_MIN) {
		fprintf(stderr, "moat serve: --token-file %s: the token must be at least %d "
				"bytes\n", path, TOKEN_MIN);
		goto fail;
	}
	goto out;
fail:
	free(buf);
	buf = NULL;
out:
	close(fd);
	return buf;
}

int cli_serve(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "socket", required_argument, NULL, 's' },
		{ "token-file", required_argument, NULL, 't' },
		{ "no-auth", no_argument, NULL, 'A' },
		{ "socket-group", required_argument, NULL, 'G' },
		{ "metrics-listen", required_argument, NULL, 'M' },
		{ "max-concurrent", required_argument, NULL, 'm' },
		{ "queue", required_argument, NULL, 'q' },
		{ "config", required_argument, NULL, 'c' },
		{ "rootfs", required_argument, NULL, 'r' },
		{ "runtime", required_argument, NULL, 'R' },
		{ "grace", required_argument, NULL, 'g' },
		{ "client-timeout", required_argument, NULL, 'T' },
		{ "kv", required_argument, NULL, 'k' },
		{ "kv-quota", required_argument, NULL, 'Q' },
		{ "no-kv", no_argument, NULL, 'N' },
		{ "pool", required_argument, NULL, 'P' },
		{ "pool-zygote", no_argument, NULL, 'Z' },
		{ "no-pool-zygote", no_argument, NULL, 'z' },
		{ "pool-zygote-max-children", required_argument, NULL, 'C' },
		{ "pool-zygote-max-age", required_argument, NULL, 'Y' },
		{ "json-log", no_argument, NULL, 'J' },
		{ "max-relays", required_argument, NULL, 'X' },
		{ "max-dns", required_argument, NULL, 'D' },
		{ "max-sessions", required_argument, NULL, 'S' },
		{ "max-sandboxes", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *listen_spec = NULL, *sock = NULL, *token_file = NULL, *config = NULL;
	const char *rootfs = NULL, *runtime = NULL, *kv = NULL, *kv_quota = NULL;
	const char *socket_group = NULL, *metrics_spec = NULL;
	bool no_kv = false, json_log = false, no_auth = false;
	int zygote = -1;
	int pool = -1, max_sessions = -1, max_sandboxes = -1;
	unsigned zyg_children = 0, zyg_age = 0, max_relays = 0, max_dns = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned maxc = ncpu > 0 ? (unsigned)ncpu : 1, queue = 0, grace = 10, client_to = 15;
	bool have_queue = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", longs, NULL)) != -1) {
		switch (c) {
		case 'l': listen_spec = optarg; break;
		case 's': sock = optarg; break;
		case 't': token_file = optarg; break;
		case 'A': no_auth = true; break;
		case 'G': socket_group = optarg; break;
		case 'M': metrics_spec = optarg; break;
		case 'c': config = optarg; break;
		case 'r': rootfs = optarg; break;
		case 'R': runtime = optarg; break;
		case 'k': kv = optarg; break;
		case 'Q': kv_quota = optarg; break;
		case 'N': no_kv = true; break;
		case 'J': json_log = true; break;
		case 'Z':
		case 'z':
			if (zygote >= 0 && zygote != (c == 'Z'))
				return bad("%s", "--pool-zygote and --no-pool-zygote exclude each other");
			zygote = c == 'Z';
			break;
		case 'C':
			if (parse_uint(optarg, 1, 100000, &zyg_children) < 0)
				return bad("--pool-zygote-max-children wants a number from 1 to 100000, "
					   "not %s", optarg);
			break;
		case 'Y':
			if (parse_uint(optarg, 1, 86400, &zyg_age) < 0)
				return bad("--pool-zygote-max-age wants seconds from 1 to 86400, not %s",
					   optarg);
			break;
		case 'X':
			if (parse_uint(optarg, 1, 1048576, &max_relays) < 0)
				return bad("--max-relays wants a number from 1 to 1048576, not %s",
					   optarg);
			break;
		case 'D':
			if (parse_uint(optarg, 1, 65536, &max_dns) < 0)
				return bad("--max-dns wants a number from 1 to 65536, not %s",
					   optarg);
			break;
		case 'S': {
			unsigned n;
			if (parse_uint(optarg, 0, 4096, &n) < 0)
				return bad("--max-sessions wants a number from 0 to 4096, not %s",
					   optarg);
			max_sessions = (int)n;
			break;
		}
		case 'B': {
			unsigned n;
			if (parse_uint(optarg, 0, 4096, &n) < 0)
				return bad("--max-sandboxes wants a number from 0 to 4096, not %s",
					   optarg);
			max_sandboxes = (int)n;
			break;
		}
		case 'P': {
			unsigned n;
			if (parse_uint(optarg, 0, 64, &n) < 0)
				return bad("--pool wants a number from 0 to 64, not %s", optarg);
			pool = (int)n;
			break;
		}
		case 'm':
			if (parse_uint(optarg, 1, 4096, &maxc) < 0)
				return bad("--max-concurrent wants a number from 1 to 4096, not %s",
					   optarg);
			break;
		case 'q':
			if (parse_uint(optarg, 0, 65536, &queue) < 0)
				return bad("--queue wants a number from 0 to 65536, not %s", optarg);
			have_queue = true;
			break;
		case 'g':
			if (parse_uint(optarg, 0, 3600, &grace) < 0)
				return bad("--grace wants seconds from 0 to 3600, not %s", optarg);
			break;
		case 'T':
			if (parse_uint(optarg, 1, 3600, &client_to) < 0)
				return bad("--client-timeout wants seconds from 1 to 3600, not %s",
					   optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		return bad("unexpected argument %s", argv[optind]);
	if (listen_spec && sock)
		return bad("%s", "--listen and --socket exclude each other");
	if (no_auth && token_file)
		return bad("%s", "--no-auth and --token-file exclude each other");
	if (socket_group && listen_spec)
		return bad("%s", "--socket-group is for a unix socket, not --listen");
	gid_t gid = (gid_t)-1;
	if (socket_group && parse_group(socket_group, &gid) < 0)
		return bad("--socket-group %s: no such group", socket_group);
	if (no_kv && (kv || kv_quota))
		return bad("%s", "--no-kv excludes --kv and --kv-quota");
	if (!have_queue)
		queue = maxc > 16384 ? 65536 : 4 * maxc;

	char *sock_path = NULL;
	if (!listen_spec && !sock) {
		if (geteuid() == 0) {
			if (root_run_dir(ROOT_SOCKET_DIR) < 0)
				return 3;
			sock = ROOT_SOCKET_DIR "/moat.sock";
		} else {
			const char *xdg = getenv("XDG_RUNTIME_DIR");
			if (!xdg || xdg[0] != '/')
				return bad("%s", "XDG_RUNTIME_DIR is not set: give --socket PATH or "
						 "--listen HOST:PORT");
			if (asprintf(&sock_path, "%s/moat.sock", xdg) < 0)
				return 3;
			sock = sock_path;
		}
	}

	char *token = NULL;
	if (token_file && !(token = read_token(token_file)))
		return 2;

	struct moat_error err = { 0 };
	struct moat_config *cfg = NULL;
	int rc = 2;
	char *rt = NULL, *desc = NULL;
	int fd = -1, mfd = -1;
	if (moat_config_load(config, &cfg, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	if (strcmp(moat_config_provider(cfg), "native"))
		fprintf(stderr, "moat serve: the config selects provider \"%s\"; the service "
				"runs every request with the native sandbox\n",
			moat_config_provider(cfg));
	if (runtime) {
		if (!cli_is_dir(runtime) || !(rt = realpath(runtime, NULL))) {
			rc = bad("--runtime %s is not a directory", runtime);
			goto out;
		}
	} else if (!(rt = cli_find_runtime())) {
		fprintf(stderr, "moat serve: no runtime shims found ($MOAT_RUNTIME_DIR, "
				"../share/moat/runtime or ../runtime next to moat): handler-mode "
				"requests will get 503; scripts work\n");
	}

	/* the flags win over the config's "kv" and "kvQuota" */
	if (!kv && !no_kv)
		kv = moat_config_kv_store(cfg);
	if (!kv_quota && !no_kv)
		kv_quota = moat_config_kv_quota(cfg);
	struct moat_run_options kvo;
	moat_run_options_init(&kvo);
	if (kv_quota && moat_kv_quota_options(kv_quota, &kvo, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	if (!no_kv) {
		/* a store that cannot be opened is an operator's error: say so now,
		 * not in the first kvEnabled request */
		char *kind = NULL;
		if (moat_kv_probe(kv, &kind, &err) < 0) {
			fprintf(stderr, "moat serve: the key-value store: %s (--no-kv runs without "
					"it)\n", err.message);
			rc = moat_error_exit_code(err.type);
			goto out;
		}
		free(kind);
	}

	if (listen_spec) {
		if ((fd = tcp_listener_for("--listen", listen_spec, &rc)) < 0)
			goto out;
		desc = strdup(listen_spec);
	} else {
		const char *why = "";
		if ((fd = unix_listener(sock, gid, &why)) < 0) {
			fprintf(stderr, "moat serve: cannot listen on %s: %s\n", sock, why);
			rc = 3;
			goto out;
		}
		if (asprintf(&desc, "unix:%s", sock) < 0)
			desc = NULL;
	}
	const char *why;
	if (moat_serve_auth_check(fd, token != NULL, no_auth, NULL, &why) < 0) {
		rc = bad("%s %s: %s", listen_spec ? "--listen" : "--socket",
			 listen_spec ? listen_spec : sock, why);
		goto out;
	}
	if (metrics_spec && (mfd = tcp_listener_for("--metrics-listen", metrics_spec, &rc)) < 0)
		goto out;

	/* each connection and each run hold fds (a run about ten, with egress two
	 * per relayed connection): take what the hard limit allows */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max > 65536 ? 65536 : nofile.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &nofile);
	}
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL); /* every thread started after this inherits it */
	signal(SIGPIPE, SIG_IGN);

	/* rootless on a systemd host without a delegated cgroup: ask systemd for
	 * one now, once, rather than in the first run that asks for a limit */
	{
		char *note = NULL;
		(void)moat_cgroup_delegate(&note);
		if (note)
			fprintf(stderr, "moat serve: %s\n", note);
		free(note);
	}

	struct moat_serve_options o = {
		.listen_fd = fd, .listen_desc = desc ? desc : "?", .unlink_path = sock,
		.token = token, .no_auth = no_auth, .metrics_fd = mfd, .metrics_desc = metrics_spec,
		.max_concurrent = maxc, .queue = queue, .grace_s = grace,
		.client_timeout_s = client_to, .runtime_dir = rt, .rootfs_dir = rootfs, .cfg = cfg,
		.log = json_log ? stdout : stderr, .json_log = json_log, .kv_store = kv, .kv_max_keys = kvo.kv_max_keys,
		.kv_max_bytes = kvo.kv_max_bytes, .kv_max_value = kvo.kv_max_value,
		.kv_min_free = kvo.kv_min_free, .kv_off = no_kv,
		.pool = pool, .pool_zygote = zygote,
		.pool_zygote_max_children = zyg_children, .pool_zygote_max_age_s = zyg_age,
		.max_relays = max_relays, .max_dns = max_dns, .max_sessions = max_sessions,
		.max_sandboxes = max_sandboxes,
	};
	fd = mfd = -1; /* the service's now */
	if (moat_serve_run(&o, &stop, &err) < 0) {
		rc = cli_fail(&err);
		if (sock)
			unlink(sock);
	} else {
		rc = 0;
	}
out:
	if (mfd >= 0)
		close(mfd);
	if (fd >= 0) {
		close(fd);
		if (sock)
			unlink(sock);
	}
	moat_error_clear(&err);
	moat_config_free(cfg);
	if (token) {
		explicit_bzero(token, strlen(token));
		free(token);
	}
	free(rt);
	free(desc);
	free(sock_path);
	return rc;
}
