/* moat serve: the command line of the HTTP service (docs/SERVE.md): the
 * listener, the token, the runtime shims, then libmoat's moat_serve_run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
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
#include "cli/opts.h"
#include "core/cleanup.h"

MOAT_DEFINE_AUTO(moat_config, moat_config_free)

#define TOKEN_MIN 16
#define TOKEN_MAX 4096
#define ROOT_SOCKET_DIR "/run/moat" /* root's default listener: moat.sock in it */

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
	if (cli_opts_uint(colon + 1, 1, 65535, &port) < 0)
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
	if (cli_opts_uint(s, 0, 0x7fffffff, &n) == 0) {
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
	MOAT_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		fprintf(stderr, "moat serve: --token-file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "moat serve: --token-file %s is not a regular file\n", path);
		return NULL;
	}
	if (st.st_mode & 077) {
		fprintf(stderr, "moat serve: --token-file %s is readable or writable by others "
				"(mode %04o); chmod 600 it\n", path, (unsigned)(st.st_mode & 07777));
		return NULL;
	}
	MOAT_AUTOFREE char *buf = calloc(1, TOKEN_MAX + 1);
	if (!buf)
		return NULL;
	ssize_t n = read(fd, buf, TOKEN_MAX);
	if (n < 0) {
		fprintf(stderr, "moat serve: --token-file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	size_t len = strlen(buf);
	for (size_t i = 0; i < len; i++)
		if (buf[i] <= 0x20 || buf[i] == 0x7f) {
			fprintf(stderr, "moat serve: --token-file %s: the token must be printable "
					"ASCII without spaces\n", path);
			return NULL;
		}
	if (len < TOKEN_MIN) {
		fprintf(stderr, "moat serve: --token-file %s: the token must be at least %d "
				"bytes\n", path, TOKEN_MIN);
		return NULL;
	}
	return MOAT_TAKE(buf);
}

/* The socket moat serve made and listens on, until the service takes it:
 * closed, and its file (path, if any) removed, on the way out. */
struct listener {
	int fd;
	const char *path;
};

static void listener_release(struct listener *l)
{
	if (l->fd >= 0) {
		close(l->fd);
		if (l->path)
			unlink(l->path);
	}
}

/* What the flags set. */
struct serve_args {
	const char *listen_spec, *sock, *token_file, *config, *rootfs, *runtime, *kv, *kv_quota;
	const char *socket_group, *metrics_spec, *node;
	bool no_kv, json_log, no_auth;
	int zygote; /* -1: not given */
	unsigned pool, max_sessions, max_sandboxes, sandbox_pool, zyg_children, zyg_age, max_relays, max_dns;
	unsigned maxc, queue, grace, client_to;
};

enum { SERVE_ZYGOTE = 1, SERVE_NO_ZYGOTE };

static int serve_set(void *ctx, const struct cli_opt *o, const char *arg)
{
	struct serve_args *a = ctx;
	(void)arg;
	int on = o->id == SERVE_ZYGOTE;
	if (a->zygote >= 0 && a->zygote != on)
		return bad("%s", "--pool-zygote and --no-pool-zygote exclude each other");
	a->zygote = on;
	return 0;
}

#define S_STR(n, a, f, c, h) { .name = n, .arg = a, .kind = CLI_OPT_STR, \
	.off = offsetof(struct serve_args, f), .complete = c, .help = h }
#define S_FLAG(n, f, h) { .name = n, .kind = CLI_OPT_FLAG, \
	.off = offsetof(struct serve_args, f), .help = h }
#define S_UINT(n, a, f, l, u, un, h) { .name = n, .arg = a, .kind = CLI_OPT_UINT, \
	.off = offsetof(struct serve_args, f), .lo = l, .hi = u, .unit = un, .help = h }

static const struct cli_opt serve_opts[] = {
	S_STR("listen", "HOST:PORT", listen_spec, CLI_COMP_NONE,
	      "a TCP listener instead of the unix socket, a numeric address (127.0.0.1:3000, "
	      "[::1]:3000); loopback too, it needs --token-file"),
	S_STR("socket", "PATH", sock, CLI_COMP_FILE,
	      "the unix socket, mode 0600 (default: /run/moat/moat.sock as root, "
	      "$XDG_RUNTIME_DIR/moat.sock otherwise)"),
	S_STR("socket-group", "G", socket_group, CLI_COMP_GROUP,
	      "the socket mode 0660, group G (a name or a gid)"),
	S_STR("token-file", "F", token_file, CLI_COMP_FILE,
	      "the bearer token every route but /healthz requires: the file's first line, at "
	      "least 16 bytes; the file mode 0600"),
	S_FLAG("no-auth", no_auth, "serve loopback (or a socket) without a token"),
	S_STR("metrics-listen", "HOST:PORT", metrics_spec, CLI_COMP_NONE,
	      "also serve GET /metrics there, without the token"),
	S_UINT("max-concurrent", "N", maxc, 1, 4096, "a number",
	       "runs at once (default: the number of CPUs)"),
	S_UINT("queue", "N", queue, 0, 65536, "a number",
	       "requests waiting (default: 4 times --max-concurrent); beyond, 503"),
	S_STR("config", "F", config, CLI_COMP_FILE, "the config file (as for moat run)"),
	S_STR("rootfs", "DIR", rootfs, CLI_COMP_DIR,
	      "a prepared root directory instead of the host's /usr"),
	S_STR("runtime", "DIR", runtime, CLI_COMP_DIR,
	      "the runtime shims (default: $MOAT_RUNTIME_DIR, else next to moat)"),
	S_UINT("grace", "SECS", grace, 0, 3600, "seconds",
	       "on SIGTERM or SIGINT, how long running requests may finish (default 10)"),
	S_UINT("client-timeout", "SECS", client_to, 1, 3600, "seconds",
	       "how long a client may take to send a request (default 15)"),
	S_STR("kv", "SPEC", kv, CLI_COMP_FILE,
	      "the store of kvEnabled requests: a file, sqlite:FILE or redis://HOST:PORT/DB "
	      "(default: the SQLite file of this user); docs/KV.md"),
	S_STR("kv-quota", "keys=N,bytes=N,value=N,free=N", kv_quota, CLI_COMP_NONE,
	      "the store's quotas per sandbox id"),
	S_FLAG("no-kv", no_kv, "run without the key-value store"),
	S_UINT("pool", "N", pool, 0, 64, "a number",
	       "keep N warm python, javascript and typescript sandboxes each (typescript "
	       "where the root has esbuild; 0: none; default: config serve.pool, else 1-2 by "
	       "available memory)"),
	{ .name = "pool-zygote", .kind = CLI_OPT_CALL, .id = SERVE_ZYGOTE,
	  .help = "(with a pool) Python requests are made by forking an initialised "
		  "interpreter, each into a fresh sandbox (docs/SERVE.md); default: config "
		  "serve.poolZygote, else on unless --rootfs or a policy is set" },
	{ .name = "no-pool-zygote", .kind = CLI_OPT_CALL, .id = SERVE_NO_ZYGOTE,
	  .help = "warm Python interpreters instead" },
	S_UINT("pool-zygote-max-children", "N", zyg_children, 1, 100000, "a number",
	       "a zygote is replaced after making N sandboxes (default: config "
	       "serve.poolZygoteMaxChildren, else 100)"),
	S_UINT("pool-zygote-max-age", "SECS", zyg_age, 1, 86400, "seconds",
	       "or after SECS, whichever comes first (its children share its address layout "
	       "and str hash secret; default: config serve.poolZygoteMaxAge, else 60)"),
	S_UINT("max-relays", "N", max_relays, 1, 1048576, "a number",
	       "connections relayed out of the host at once across all runs (a full cap "
	       "resets a new connection; default: config serve.maxRelays, else 4096)"),
	S_UINT("max-dns", "N", max_dns, 1, 65536, "a number",
	       "DNS questions resolved at once across all runs (a full cap answers SERVFAIL; "
	       "default: config serve.maxDns, else 256)"),
	S_UINT("max-sessions", "N", max_sessions, 0, 4096, "a number",
	       "sessions (POST /v1/sessions, docs/SESSIONS.md) live at once; 0 turns sessions "
	       "off (default: config serve.sessions.max, else by available memory, at most "
	       "64)"),
	S_UINT("max-sandboxes", "N", max_sandboxes, 0, 4096, "a number",
	       "live sandboxes (POST /v1/sandboxes, docs/SANDBOXES.md) at once; they never "
	       "take a run slot; 0 turns them off (default: as --max-sessions' default)"),
	S_UINT("sandbox-pool", "N", sandbox_pool, 0, 16, "a number",
	       "live sandboxes kept made ahead with the service's defaults, handed to a "
	       "create that asks for nothing else (docs/SANDBOXES.md); 0: none (default: "
	       "config serve.sandboxes.pool, else 1 as root with 1 GiB available, 0 rootless)"),
	S_STR("node", "NAME", node, CLI_COMP_NONE,
	      "this node's name, in every session and sandbox id so a load balancer can "
	      "route them (docs/scaling.md): 1-32 of a-z, 0-9 and - (default: config "
	      "serve.node, else n + 8 hex digits of a digest of the host's name)"),
	S_FLAG("json-log", json_log,
	       "write every log line as one JSON object to stdout (for a log collector, e.g. "
	       "in a pod); by default the log goes to stderr"),
	{ .name = "help", .short_name = 'h', .kind = CLI_OPT_HELP },
};

const struct cli_cmd cli_serve_cmd = {
	.name = "serve",
	.prefix = "moat serve: ",
	.usage = "usage: moat serve [--listen HOST:PORT | --socket PATH [--socket-group G]]\n"
		 "                  [--token-file F | --no-auth] [options]\n"
		 "Serves the Spin sandbox API (POST /py/..., /ts/...) and the moat exec contract\n"
		 "(POST /v1/run) over HTTP; docs/SERVE.md. Default listener: the unix\n"
		 "socket /run/moat/moat.sock as root, $XDG_RUNTIME_DIR/moat.sock otherwise,\n"
		 "mode 0600 (--socket-group G: 0660, group G). A TCP listener (--listen),\n"
		 "loopback too, needs --token-file; --no-auth serves loopback without one.\n",
	.help_col = 30,
	.opts = serve_opts,
	.count = sizeof serve_opts / sizeof serve_opts[0],
	.set = serve_set,
	.usage_on_error = true,
};

int cli_serve(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct serve_args a = { .zygote = -1, .maxc = ncpu > 0 ? (unsigned)ncpu : 1,
				.grace = 10, .client_to = 15 };
	struct cli_parsed p;
	if (cli_opts_parse(&cli_serve_cmd, argc, argv, &a, &p))
		return p.status;
	const char *listen_spec = a.listen_spec, *sock = a.sock, *token_file = a.token_file;
	const char *config = a.config, *rootfs = a.rootfs, *runtime = a.runtime, *kv = a.kv;
	const char *kv_quota = a.kv_quota, *socket_group = a.socket_group;
	const char *metrics_spec = a.metrics_spec;
	bool no_kv = a.no_kv, json_log = a.json_log, no_auth = a.no_auth;
	int zygote = a.zygote;
	int pool = cli_opts_given(&cli_serve_cmd, &p, "pool") ? (int)a.pool : -1;
	int max_sessions = cli_opts_given(&cli_serve_cmd, &p, "max-sessions")
				   ? (int)a.max_sessions : -1;
	int max_sandboxes = cli_opts_given(&cli_serve_cmd, &p, "max-sandboxes")
				    ? (int)a.max_sandboxes : -1;
	int sandbox_pool = cli_opts_given(&cli_serve_cmd, &p, "sandbox-pool")
				   ? (int)a.sandbox_pool : -1;
	unsigned zyg_children = a.zyg_children, zyg_age = a.zyg_age;
	unsigned max_relays = a.max_relays, max_dns = a.max_dns;
	unsigned maxc = a.maxc, queue = a.queue, grace = a.grace, client_to = a.client_to;
	bool have_queue = cli_opts_given(&cli_serve_cmd, &p, "queue");
	if (p.next < argc)
		return bad("unexpected argument %s", argv[p.next]);
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

	/* socket activation (moat.socket): a listener passed as fd 3 is the
	 * default's place; --listen and --socket win over it (and the LISTEN_*
	 * variables are dropped either way) */
	MOAT_AUTOFREE char *sock_path = NULL;
	MOAT_AUTOFREE char *act_desc = NULL;
	MOAT_AUTOCLOSE int act_fd = -1;
	if (!listen_spec && !sock) {
		const char *why = "";
		int got = moat_serve_activated(token_file != NULL, &act_fd, &act_desc, &why);
		if (got < 0) {
			fprintf(stderr, "moat serve: the socket passed by the service manager "
					"(LISTEN_FDS): %s\n", why);
			return 3;
		}
		if (got > 0 && socket_group)
			return bad("%s", "--socket-group is for a socket moat makes; a passed "
					 "socket's mode and group are its unit's (SocketMode=, "
					 "SocketGroup=)");
	} else {
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_FDNAMES");
	}
	if (!listen_spec && !sock && act_fd < 0) {
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

	MOAT_AUTOWIPE char *token = NULL; /* wiped before it is freed */
	if (token_file && !(token = read_token(token_file)))
		return 2;

	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTO(moat_config) struct moat_config *cfg = NULL;
	int rc = 2;
	MOAT_AUTOFREE char *rt = NULL;
	MOAT_AUTOFREE char *desc = NULL;
	__attribute__((cleanup(listener_release))) struct listener l = { .fd = -1, .path = sock };
	MOAT_AUTOCLOSE int mfd = -1;
	if (moat_config_load(config, &cfg, &err) < 0)
		return cli_fail(&err);
	if (strcmp(moat_config_provider(cfg), "native"))
		fprintf(stderr, "moat serve: the config selects provider \"%s\"; the service "
				"runs every request with the native sandbox\n",
			moat_config_provider(cfg));
	if (runtime) {
		if (!cli_is_dir(runtime) || !(rt = realpath(runtime, NULL)))
			return bad("--runtime %s is not a directory", runtime);
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
	if (kv_quota && moat_kv_quota_options(kv_quota, &kvo, &err) < 0)
		return cli_fail(&err);
	if (!no_kv) {
		/* a store that cannot be opened is an operator's error: say so now,
		 * not in the first kvEnabled request */
		MOAT_AUTOFREE char *kind = NULL;
		if (moat_kv_probe(kv, &kind, &err) < 0) {
			if (kv) {
				fprintf(stderr, "moat serve: the key-value store: %s (--no-kv runs "
						"without it)\n", err.message);
				return moat_error_exit_code(err.type);
			}
			/* no store was asked for and the default has no place (a
			 * service user without a home): serve without one, as
			 * --no-kv, and say so; kvEnabled requests get 501 */
			fprintf(stderr, "moat serve: running without the key-value store "
					"(kvEnabled requests are refused): %s\n", err.message);
			no_kv = true;
			moat_error_clear(&err);
		}
	}

	if (act_fd >= 0) {
		l.fd = MOAT_TAKE_FD(act_fd);
		desc = MOAT_TAKE(act_desc);
	} else if (listen_spec) {
		if ((l.fd = tcp_listener_for("--listen", listen_spec, &rc)) < 0)
			return rc;
		desc = strdup(listen_spec);
	} else {
		const char *why = "";
		if ((l.fd = unix_listener(sock, gid, &why)) < 0) {
			fprintf(stderr, "moat serve: cannot listen on %s: %s\n", sock, why);
			return 3;
		}
		if (asprintf(&desc, "unix:%s", sock) < 0)
			desc = NULL;
	}
	const char *why;
	if (moat_serve_auth_check(l.fd, token != NULL, no_auth, NULL, &why) < 0)
		return bad("%s %s: %s", listen_spec ? "--listen" : sock ? "--socket" : "the passed socket",
			   listen_spec ? listen_spec : sock ? sock : (desc ? desc : "?"), why);
	if (metrics_spec && (mfd = tcp_listener_for("--metrics-listen", metrics_spec, &rc)) < 0)
		return rc;

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
		MOAT_AUTOFREE char *note = NULL;
		(void)moat_cgroup_delegate(&note);
		if (note)
			fprintf(stderr, "moat serve: %s\n", note);
	}

	struct moat_serve_options o = {
		.listen_fd = l.fd, .listen_desc = desc ? desc : "?", .unlink_path = sock,
		.token = token, .no_auth = no_auth, .metrics_fd = mfd, .metrics_desc = metrics_spec,
		.max_concurrent = maxc, .queue = queue, .grace_s = grace,
		.client_timeout_s = client_to, .runtime_dir = rt, .rootfs_dir = rootfs, .cfg = cfg,
		.log = json_log ? stdout : stderr, .json_log = json_log, .kv_store = kv, .kv_max_keys = kvo.kv_max_keys,
		.kv_max_bytes = kvo.kv_max_bytes, .kv_max_value = kvo.kv_max_value,
		.kv_min_free = kvo.kv_min_free, .kv_off = no_kv,
		.pool = pool, .pool_zygote = zygote,
		.pool_zygote_max_children = zyg_children, .pool_zygote_max_age_s = zyg_age,
		.max_relays = max_relays, .max_dns = max_dns, .max_sessions = max_sessions,
		.max_sandboxes = max_sandboxes, .sandbox_pool = sandbox_pool, .node = a.node,
	};
	l.fd = mfd = -1; /* the service's now */
	if (moat_serve_run(&o, &stop, &err) < 0) {
		if (sock)
			unlink(sock);
		return cli_fail(&err);
	}
	return 0;
}
