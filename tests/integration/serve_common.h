/* `moat serve` against its contract (docs/SERVE.md), from the outside: the
 * real binary, started in the background as root and as uid 65534 (loop
 * index = harness mode), spoken to with the real curl command line and, for
 * malformed requests, with raw sockets.
 *
 * Every test starts its own server (server_start): a fresh temp dir holds its
 * unix socket or it gets a free TCP port on 127.0.0.1, its access log
 * (stderr, to a file), its config and token files. The test waits until
 * GET /healthz answers, makes its requests, and stops it (server_stop):
 * SIGTERM, exit status 0, no process of it left, its socket file removed.
 *
 * Nothing left behind is checked by making the test process a child
 * subreaper: a process of the server that outlives it is reparented to the
 * test, which then sees it among its own children. A test that fails half
 * way (Check ends it with _exit, then kills its process group) leaves its
 * server to a guard process in a group of its own that kills it and removes
 * the temp dir.
 *
 * A test that cannot run in a mode reports itself skipped (harness_skip,
 * tests/skip.h), as the other suites do. */
#ifndef MOAT_TESTS_SERVE_COMMON_H
#define MOAT_TESTS_SERVE_COMMON_H

#include <ctype.h>
#include <grp.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "suites.h"

#define ROOTLESS_ID 65534
#define SCRIPT_CAP 262144 /* stdout/stderr cap of a script, bytes */
#define TOKEN "serve-test-token-5f0c2a9e7b41d3"

static const char *const MODE_NAME[] = { "root", "rootless" };

/* ---- the server ---------------------------------------------------------------- */

struct server_opts {
	bool socket;              /* --socket DIR/moat.sock, else --listen 127.0.0.1:<free port>
				   * (with --no-auth unless the test's token or args say) */
	const char *config;       /* JSON for --config, or NULL */
	bool token;               /* --token-file with TOKEN */
	const char *const *args;  /* more arguments (NULL-terminated), or NULL */
	bool no_listener;         /* neither --socket nor --listen: the test's args say */
	const char *const *env;   /* NULL: the harness's environment (with its cgroups) */
	const char *kv;           /* --kv SPEC; NULL: a store file in the server's dir;
				   * "": no --kv (the tests' own args say) */
	int pool;                 /* --pool N; 0 (the tests of cold runs): --pool 0;
				   * -1: no --pool (the service's default) */
	int sbx_pool;             /* --sandbox-pool N; 0 (every test but the live
				   * sandboxes' pool's): --sandbox-pool 0; -1: none */
	bool readonly_root;       /* every mount but /proc, /sys, /dev read-only, as a
				   * pod's readOnlyRootFilesystem (and no emptyDir) */
	int zygote;               /* 1: --pool-zygote; -1: --no-pool-zygote; 0: neither
				   * (the service's default: on, with a pool) */
	const int *log_pipe;      /* a pipe's write end to be the server's stdout and
				   * stderr (its log in either mode), or NULL: files */
	int pass_fd;              /* > 0: given to the server as its fd 3 (socket
				   * activation), with listen_pid (an entry of env,
				   * "LISTEN_PID=" and room for a pid) set to its pid */
	char *listen_pid;
};

struct server {
	int mode;
	bool running;             /* not reaped yet */
	struct harness_proc p;
	pid_t guard;
	int guard_fd;
	char dir[64];
	char sock[128];           /* "" for TCP */
	int port;
	char log[128];            /* the server's stderr: the access log */
	char outf[128];           /* its stdout */
	char cfg[128];
	char tokf[128];
	char kvf[128];            /* the store file (--kv), "" when not ours */
	char url[128];            /* http://127.0.0.1:PORT or http://localhost (socket) */
	int calls;                /* curl calls made, for file names */
	int open_calls;           /* started and not finished */
	int status;               /* exit status once reaped */
	int log_pipe;             /* server_opts.log_pipe, or -1 */
	int pass_fd;              /* server_opts.pass_fd, listen_pid */
	char *listen_pid;
};

/* ---- curl ------------------------------------------------------------------------ */

struct req {
	const char *method;       /* NULL: curl's choice (POST with a body, else GET) */
	const char *path;
	const char *body;         /* NULL: no body */
	const char *body_file;    /* or the body from this file */
	bool chunked;             /* send the body chunked */
	const char *auth;         /* Authorization header value, or NULL */
	const char *const *extra; /* more curl arguments, NULL-terminated */
	long max_ms;              /* curl --max-time; 0: 60 s (scaled) */
};

struct resp {
	int curl_rc;      /* curl's exit status; 128+signal when killed */
	int code;         /* HTTP status; 0 when none came */
	char *head;       /* the last header block */
	char *body;
	size_t body_len;
	char *err;        /* curl's stderr */
	cJSON *json;      /* body as JSON, or NULL */
	long ms;          /* wall time */
};

struct call {
	pid_t pid;
	char pre[160];
	long t0, max_ms;
	struct server *s;
};

/* The tests of each feature (test_serve_<feature>.c) in a tcase of the serve suite:
 * every test once per mode (loop index = harness mode), the pool's tests the Python
 * zygote shares four times (index 0, 1: warm sandboxes; 2, 3: the zygote). */
#define SERVE_MODES (MODE_ROOTLESS + 1)
#define SERVE_WARM_AND_ZYGOTE (2 * SERVE_MODES)
#define SERVE_ADD(tc, only, t, n)                                                    \
	do {                                                                          \
		if (!(only) || !*(only) || selected((only), #t))                      \
			tcase_add_loop_test((tc), t, 0, (n));                         \
	} while (0)
TCase *serve_tcase(Suite *s, const char *name);
void serve_spin_tests(Suite *s, const char *only);
void serve_v1_tests(Suite *s, const char *only);
void serve_kv_tests(Suite *s, const char *only);
void serve_pool_tests(Suite *s, const char *only);
void serve_zygote_tests(Suite *s, const char *only);
void serve_listen_tests(Suite *s, const char *only);
void serve_ops_tests(Suite *s, const char *only);

/* ---- small helpers ----------------------------------------------------------- */
char *slurp(const char *path, size_t *len);
void write_file(const char *path, const char *data, size_t len, mode_t mode);
void rm_flat_dir(const char *dir);
int free_port(void);
int proc_children(pid_t pid, pid_t *out, int max);
char *proc_cmdline(pid_t pid);
void proc_desc(pid_t pid, char *buf, size_t size);
const cJSON *jget(const cJSON *o, const char *key);
const char *jstr(const cJSON *o, const char *key);
double jnum(const cJSON *o, const char *key);

/* ---- the server ---------------------------------------------------------------- */
void known_add(pid_t p);
void known_del(pid_t p);
bool is_known(pid_t p);
int prep_redirect(int mode, void *arg);
int prep_readonly(int mode, void *arg);
bool is_moat_serve(pid_t pid);
void guard_start(struct server *s);
void guard_say(struct server *s, char c);
void guard_end(struct server *s);
void server_file(struct server *s, char *path, size_t size, const char *name,
			const char *content, mode_t mode);
bool has_arg(const char *const *args, const char *arg);
void server_spawn(struct server *s, int mode, const struct server_opts *o);
bool server_exited(const struct server *s);
int server_reap(struct server *s);
int server_wait_exit(struct server *s, long ms);
char *server_log(const struct server *s);

/* ---- curl ------------------------------------------------------------------------ */
void call_start(struct server *s, const struct req *q, struct call *c);
char *last_head(char *all);
void call_finish(struct call *c, struct resp *r);
void call(struct server *s, const struct req *q, struct resp *r);
void resp_free(struct resp *r);
const char *resp_header(const struct resp *r, const char *name, char *buf, size_t size);
void post(struct server *s, const char *path, const char *body, struct resp *r);
void get(struct server *s, const char *path, struct resp *r);
char *envelope(const char *code, const char *extra);
void run_py(struct server *s, const char *code, const char *extra, struct resp *r);
void expect_error(const char *what, const struct resp *r, int code, const char *type);
/* A session or sandbox id (docs/scaling.md): prefix ("ses_", "sbx_"), a node's
 * name ([a-z0-9-]{1,32}), "_", 32 lowercase hex digits; node, when given, its
 * name must be. */
bool id_form_ok(const char *id, const char *prefix, const char *node);
/* A 400 refusing key of body at path whose message lists has (a key of that
 * route's own) and not lacks (one of another route's). */
void expect_own_keys(struct server *s, const char *path, const char *body, const char *key,
		     const char *has, const char *lacks);
void expect_script(const char *what, const struct resp *r);
void server_wait_ready(struct server *s);
void server_start(struct server *s, int mode, const struct server_opts *o);
int server_children_gone(const struct server *s, long ms, char *desc, size_t size);
bool server_wait_children(const struct server *s, int n, long ms);
void server_cleanup(struct server *s);
int server_term(struct server *s, long ms, long *took);
void server_stop(struct server *s);

/* ---- raw sockets ------------------------------------------------------------------- */
int raw_connect(const struct server *s);
bool raw_send(int fd, const char *data, size_t len);
char *raw_read(int fd, long ms, bool *closed, long *took);
int raw_status(const char *resp);

/* ---- another caller, a process found by its command line ---- */
int status_as_other(struct server *s, const char *method, const char *path);
int marked(const char *marker);
void expect_kill9_leaves_nothing(struct server *s, const char *marker, const char *what);

/* ---- metrics --------------------------------------------------------------------- */
double metric_sum(const char *text, const char *name, const char *label, int *found);
char *get_metrics(struct server *s, const char *auth);

/* ---- access log ------------------------------------------------------------------ */
cJSON *access_lines(const struct server *s);
const cJSON *access_find(const cJSON *lines, const char *key, const char *value);

/* ---- tests: HTTP surface ------------------------------------------------------------ */
int refused_start(int mode, const struct server_opts *o, struct server *s, char **log);

/* ---- tests: listeners ----------------------------------------------------------------- */
bool selected(const char *list, const char *name);

/* ---- tests: the warm pool (docs/SERVE.md, "The pool") --------------------------------- */
double pool_metric(struct server *s, const char *name, const char *label);
void pool_wait_ready(struct server *s, const char *lang, int n);
int pool_kinds(void);
void pool_wait_all(struct server *s, int n);
void v1(struct server *s, const char *body, struct resp *r);
bool pooled(const struct resp *r);
int pool_idle_children(int want, bool zygote);
void pool_wait_zygote(struct server *s);
void server_stop_pool(struct server *s, int idle);
void cold_results(int mode, const char *const *bodies, int n, struct resp *cold);
int proc_descendants_named(pid_t pid, const char *comm, int depth, pid_t *last);
const char *proc_status_field(pid_t pid, const char *key);
/* The cgroup leaves named moat-<owner>-* in every hierarchy moat puts them
 * in (the v1 memory, pids, cpu, cpuacct and the cgroup2 mount), under the
 * cgroups the test process is in (a server started by the test is in
 * them): their number, and which hierarchies hold them ("cpu pids
 * unified ...") in where (may be NULL). */
int cg_leaves_of(pid_t owner, char *where, size_t size);
/* The directory of the test process's cgroup in hierarchy name ("memory",
 * "pids", "cpu", "cpuacct", "unified": the cgroup2 mount), malloc'd, or
 * NULL. */
char *cg_own_dir(const char *name);

#endif
