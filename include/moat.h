/* moat — public interface of libmoat.
 *
 * One run: parse/validate a request, run it in a fresh sandbox, get a result.
 * Every fallible function returns 0 on success or -1 and fills *err
 * (type, errno, message); nothing in the library exits the process.
 * docs/ARCHITECTURE.md maps the modules behind it and the order of a run.
 *
 * Threads, signals and child processes. libmoat may be called from several
 * threads at once, each call with its own request, result and error (a
 * sandbox of the phase API by one thread at a time). It installs no signal
 * handler and changes no process-wide disposition: while a phase writes to
 * a pipe the sandbox may have closed it blocks SIGPIPE in the calling
 * thread only, and drops a SIGPIPE it raised itself before unblocking.
 * Every fd moat opens is O_CLOEXEC (libcurl, loaded only by the e2b and
 * daytona providers, opens its own sockets). The sandbox's pid 1 is a child
 * of the calling thread created without an exit signal: it raises no
 * SIGCHLD, and wait() and waitpid(-1, ...) do not see it. What the host
 * program must not do while runs may be in flight:
 *  - reap children it did not create with __WALL or __WCLONE (that would
 *    take moat's pid 1 and lose the run's status);
 *  - end the thread that called moat_run or moat_sandbox_create before
 *    that sandbox is released: pid 1 holds a parent-death signal, which
 *    the kernel sends when the creating *thread* exits; the sandbox is
 *    then killed (fail-safe, but the run is lost);
 *  - call setenv/putenv/unsetenv (moat reads HOME, XDG_CACHE_HOME,
 *    MOAT_CGROUP_PARENT; glibc's getenv is not safe against them), or move
 *    itself to another cgroup;
 *  - close or dup2 over fds it does not own (a close_range in another
 *    thread takes moat's pipes with it).
 * A program that changed its own uid or gid is not dumpable, and the kernel
 * then refuses it the id maps of its sandboxes: it sets PR_SET_DUMPABLE back
 * to 1 (as an execve would) before running moat. The docker provider forks
 * the docker CLI as an ordinary child (SIGCHLD): a host that reaps every
 * child with waitpid(-1) takes its status. */
#ifndef MOAT_H
#define MOAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOAT_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------ */

enum moat_error_type {
	MOAT_ERR_NONE = 0,
	MOAT_ERR_CONFIG,      /* SandboxConfigError: malformed input or config */
	MOAT_ERR_POLICY,      /* SandboxPolicyError: refused by a security rule */
	MOAT_ERR_UNAVAILABLE, /* SandboxUnavailableError: host cannot isolate */
};

struct moat_error {
	enum moat_error_type type;
	int sys_errno; /* 0 when not caused by a system call */
	char *message; /* malloc'd; NULL when no error */
};

/* Fills err (replacing any previous message) and returns -1. */
int moat_error_set(struct moat_error *err, enum moat_error_type type,
		   int sys_errno, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The out-of-memory error (SandboxUnavailableError, ENOMEM); returns -1. */
int moat_error_oom(struct moat_error *err);
void moat_error_clear(struct moat_error *err);
/* "SandboxConfigError", "SandboxPolicyError", "SandboxUnavailableError". */
const char *moat_error_type_name(enum moat_error_type type);
/* Process exit code for an error: 2 for config/policy, 3 for unavailable. */
int moat_error_exit_code(enum moat_error_type type);
/* {"error":{"type":..,"message":..,"provider":..}} — malloc'd, NULL on OOM. */
char *moat_error_to_json(const struct moat_error *err, const char *provider);

/* ---- languages ----------------------------------------------------------- */

enum moat_language {
	MOAT_LANG_PYTHON = 0,
	MOAT_LANG_JAVASCRIPT,
	MOAT_LANG_TYPESCRIPT,
	MOAT_LANG_BASH,
	MOAT_LANG_SH,
	MOAT_LANG__COUNT,
};

/* Accepts canonical names and aliases (py, python3, js, node, ts, shell). */
int moat_lang_from_name(const char *name, enum moat_language *out);
/* By file extension (.py .js .mjs .cjs .ts .mts .sh .bash); -1 when unknown. */
int moat_lang_from_path(const char *path, enum moat_language *out);

/* ---- request ------------------------------------------------------------- */

#define MOAT_MAX_CODE_BYTES (5u * 1024u * 1024u)
#define MOAT_DEFAULT_TIMEOUT_MS 30000u
#define MOAT_DEFAULT_OUTPUT_CAP (1024u * 1024u)
#define MOAT_MAX_OUTPUT_PATTERNS 64u
#define MOAT_OUTPUT_FILE_CAP (1024u * 1024u)        /* bytes of one returned file */
#define MOAT_OUTPUT_TOTAL_CAP (8u * 1024u * 1024u)  /* bytes of all returned files */
#define MOAT_OUTPUT_MAX_FILES 100u
#define MOAT_MAX_LIST_ENTRIES 256u
#define MOAT_MAX_SANDBOX_ID 256u /* bytes of "sandboxId" */ /* entries of "allowedHosts", "allowedCidrs", "outputs" in JSON */
#define MOAT_MAX_ARGC 4096u                    /* entries of "argv" */
#define MOAT_MAX_ARGV_BYTES (1024u * 1024u)    /* "argv" in all, each with its NUL */
#define MOAT_MAX_ARG_BYTES 131071u             /* one entry (the kernel's MAX_ARG_STRLEN - 1) */

struct moat_kv {
	char *key;
	char *value;
	size_t value_len;
};

struct moat_request {
	char *code;
	size_t code_len;
	enum moat_language language;
	/* The argv form ("argv"): when argc > 0 the program is argv[0], looked
	 * up in the sandbox's own PATH (/usr/local/bin:/usr/bin:/bin; not the
	 * request's env) unless it holds a '/', run with argv[0..argc) (argv[argc]
	 * NULL) and no code file; code must be NULL then and language is not
	 * used. 1..MOAT_MAX_ARGC entries, argv[0] non-empty, each at most
	 * MOAT_MAX_ARG_BYTES, MOAT_MAX_ARGV_BYTES in all. A program that cannot
	 * be executed is the run's exit 127 (not found) or 126 (found, not
	 * executable), with a line on its stderr, as a shell would do. */
	char **argv;
	size_t argc;
	uint64_t timeout_ms;      /* > 0; default MOAT_DEFAULT_TIMEOUT_MS */
	/* "timeout" came as a JSON number (milliseconds): one below
	 * MOAT_TIMEOUT_UNIT_WARN_MS is run as given, with a warning naming the
	 * unit (moat_request_warn_units), for seconds are what E2B and
	 * Daytona take */
	bool timeout_from_json;
	struct moat_kv *env;      /* names match ^[A-Za-z_][A-Za-z0-9_]*$ */
	size_t env_count;
	struct moat_kv *files;    /* key: relative path under /sandbox */
	size_t files_count;
	char *stdin_data;         /* may be NULL: empty stdin */
	size_t stdin_len;
	/* Egress ("network": true): every TCP connection and DNS query of the
	 * program ends in moat, which connects only to public unicast addresses
	 * that are not the host's own (the result's "network" lists them). */
	bool network;
	uint64_t memory_mb;       /* 0: not requested */
	double cpus;              /* 0: not requested */
	uint64_t pids_limit;      /* 0: not requested */
	bool strict_limits;
	uint64_t max_output_bytes; /* per stream; default MOAT_DEFAULT_OUTPUT_CAP */
	/* Egress allowlist ("allowedHosts"): when has_allowed_hosts, the sandbox
	 * reaches only the listed "scheme://host[:port]" entries (none: no
	 * egress), through moat's HTTP/HTTPS proxy or directly to an address
	 * moat's DNS answered for an allowed name, with a matching TLS SNI or
	 * HTTP Host. */
	bool has_allowed_hosts;
	char **allowed_hosts;
	size_t allowed_hosts_count;
	/* "allowedCidrs" (with allowedHosts): ranges egress may connect to
	 * although the address classes refuse them (private, documentation...);
	 * never the host's own addresses. */
	char **allowed_cidrs;
	size_t allowed_cidrs_count;
	/* "outputs": glob patterns (fnmatch, '*' stays within one directory)
	 * relative to /sandbox; matching regular files written by the program
	 * come back in the result's "files" (capped, base64 when binary). */
	char **outputs;
	size_t outputs_count;
	/* "sandboxId" (1..MOAT_MAX_SANDBOX_ID bytes of UTF-8, no NUL; NULL: none)
	 * and "kvEnabled": the run gets the key-value store scoped to that id
	 * (docs/KV.md) through the fd named by MOAT_KV_FD. */
	char *sandbox_id;
	size_t sandbox_id_len;
	bool kv_enabled;
	/* Set by the request pipeline (moat_request_prepare/_finish,
	 * moat_admin.h) once the request passed every module's rules: moat_run,
	 * the phases and the providers then trust it instead of validating it
	 * again. A request built or changed in code leaves it false (and is
	 * validated where it runs). */
	bool prepared;
};

/* A request with defaults and no code; free with moat_request_free. */
struct moat_request *moat_request_new(void);
void moat_request_free(struct moat_request *req);
/* Parse one JSON request (README.md, "JSON contract") and validate it. */
int moat_request_parse_json(const char *buf, size_t len,
			    struct moat_request **out, struct moat_error *err);
/* Validate a request built in code (the CLI): same rules as the parser. */
int moat_request_validate(const struct moat_request *req, struct moat_error *err);

/* ---- result -------------------------------------------------------------- */

struct moat_result {
	char *stdout_buf; /* captured bytes (not NUL-terminated), up to the cap */
	size_t stdout_len;
	bool stdout_truncated;
	char *stderr_buf;
	size_t stderr_len;
	bool stderr_truncated;
	bool exited;        /* true: exit_code valid; false: killed */
	int exit_code;
	int signal;         /* terminating signal, 0 when none */
	bool timed_out;
	bool oom_killed;
	const char *killed_by; /* static: "timeout","oom","pids","seccomp","signal","cancelled"; NULL */
	uint64_t duration_ms;
	int64_t memory_peak_bytes; /* -1: unknown */
	int64_t cpu_time_ms;       /* -1: unknown */
	const char *limit_memory;  /* static: "cgroup-v2","cgroup-v1","rlimit","none" */
	const char *limit_pids;
	const char *limit_cpu;
	char **warnings;           /* malloc'd strings */
	size_t warnings_count;
	const char *provider;      /* static: "native" */
	/* Rendered by the module that owns them (valid JSON values, malloc'd),
	 * emitted as "network" / "files" when not NULL. */
	char *network_json;        /* the network mode and, with egress, every connection */
	char *files_json;          /* "outputs" files collected after the run */
	char *seccomp_json;        /* with seccomp_log: the calls the filter refused */
	bool pooled;               /* ran in a warm sandbox ("pool": true) */
};

struct moat_result *moat_result_new(void);
void moat_result_free(struct moat_result *res);
/* Adds a formatted warning; returns -1 on OOM. */
int moat_result_warn(struct moat_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A JSON "timeout" below this many milliseconds is warned about. */
#define MOAT_TIMEOUT_UNIT_WARN_MS 100u
/* The warning of a JSON "timeout" below MOAT_TIMEOUT_UNIT_WARN_MS (it is in
 * milliseconds) added to res; 0 when none is due, -1 on OOM. Every entry
 * that answers a JSON request calls it on the result it returns. */
int moat_request_warn_units(const struct moat_request *req, struct moat_result *res);
/* Result JSON (README.md, "JSON contract"). Output bytes are made valid UTF-8: invalid
 * sequences become U+FFFD, NUL and control bytes are \u-escaped. */
char *moat_result_to_json(const struct moat_result *res);

/* ---- running --------------------------------------------------------------- */

enum moat_stream { MOAT_STDOUT = 1, MOAT_STDERR = 2 };

struct moat_run_options {
	const char *rootfs_dir;    /* NULL: host-derived default plan */
	const char *policy_path;   /* NULL: embedded default seccomp policy */
	uint64_t tmpfs_bytes;      /* /tmp and /sandbox size; 0: 64 MiB */
	uint32_t root_host_id;     /* host uid/gid for sandbox 65534 when run as root; 0: 65534 */
	bool seccomp_log;          /* report every call the filter refuses (result "seccomp") */
	/* Refuse to run (SandboxUnavailableError) where a defense-in-depth layer
	 * is missing (Landlock), instead of running with a warning. */
	bool strict_isolation;
	/* Called with each chunk of captured output (within the cap), as it comes. */
	void (*on_output)(void *ctx, enum moat_stream stream, const char *buf, size_t len);
	void *output_ctx;
	/* Flow control for a caller that passes stdout on (on_output) instead
	 * of keeping it (moat serve's handlers). With stdout_stream, stdout is
	 * neither kept in the result (stdout_len stays 0) nor capped by
	 * max_output_bytes (the caller bounds what it takes; the cap is then
	 * stderr's), and after each chunk stdout_full(output_ctx) is asked:
	 * while it says true, stdout is not read -- the program blocks on the
	 * full pipe and its timeout runs on -- until resume_fd (the caller's
	 * non-blocking eventfd; moat reads it, never closes it) is readable
	 * and stdout_full says false. A program that has ended while stdout
	 * waits keeps the rest of its timeout to be read (not only the 2 s
	 * drain). resume_fd -1 after moat_run_options_init: no flow control. */
	bool stdout_stream;
	bool (*stdout_full)(void *ctx);
	int resume_fd;
	/* Both streams passed on (moat serve's streamed /v1/run, moat exec
	 * --stream): stdout and stderr go to on_output only, neither is kept
	 * (stdout_len and stderr_len stay 0), each is still capped by
	 * max_output_bytes (what is past the cap is read and dropped, its
	 * truncated flag set), and stdout_full/resume_fd pause both while the
	 * caller's window is full. */
	bool output_stream;
	/* A host directory bound read-only (nosuid, nodev) at /opt/moat/runtime
	 * (the service's handler shims); NULL: none. With rootfs_dir, that root
	 * must have the empty directory /opt/moat/runtime. */
	const char *runtime_dir;
	/* A host directory bound read-only (nosuid, nodev; not noexec: a build
	 * step runs scripts of the checkout) at /sandbox/work, which is then the
	 * program's working directory (HOME stays /sandbox); NULL: none. Its
	 * path's symlinks are resolved (realpath) by the supervisor, and it is
	 * opened in the sandbox's mount namespace before the root is assembled,
	 * as the sandbox's user (uid 65534; rootless, the caller), who must be
	 * able to reach and read it. A caller's option, never a request's: the
	 * request may be a stranger's and must not name host paths. Request
	 * files may not lie under work/, and "outputs" never look into it (it
	 * holds nothing the program wrote). Native provider only. */
	const char *workdir;
	/* Cancellation, both -1 after moat_run_options_init (a zeroed struct
	 * would watch fd 0). While the run waits: cancel_fd readable (an
	 * eventfd, a pipe; moat never reads it), or hangup_fd's peer gone (a
	 * connected socket: EPOLLRDHUP, EPOLLHUP or EPOLLERR; a half-close by
	 * the peer counts) kills the sandbox; the result then has killedBy
	 * "cancelled" (unless the program had ended first). Both stay the
	 * caller's; the same fd may serve many runs, not both roles in one. */
	int cancel_fd;
	int hangup_fd;
	/* The key-value store of a kvEnabled request (docs/KV.md): kv_store is
	 * the --kv spec (NULL: the default SQLite file of this user); quotas
	 * per sandboxId, 0 for the defaults (1024 keys, 64 MiB, 1 MiB a value). */
	const char *kv_store;
	uint64_t kv_max_keys, kv_max_bytes, kv_max_value;
	/* The free space a SQLite store's file system keeps: a write that
	 * would leave less is refused ("the store is full"), deletes are not
	 * (docs/KV.md, "A full disk"). 0: the default (16 MiB);
	 * MOAT_KV_FREE_OFF: no floor. */
	uint64_t kv_min_free;
	/* Lines for the operator only, never for the program or a client (the
	 * store's path and its backend's error behind the program's "the store
	 * is full"): on_notice(notice_ctx, line); NULL: dropped. A run sends a
	 * handful at most. Called on the thread that waits for the run. */
	void (*on_notice)(void *ctx, const char *line);
	void *notice_ctx;
	/* Caps shared with other runs (moat_relay_caps_new below); NULL: none,
	 * only this run's own caps (512 relayed connections, 64 DNS questions
	 * at once). The run takes a reference of its own while it relays. */
	struct moat_relay_caps *relay_caps;
};

void moat_run_options_init(struct moat_run_options *opts);
/* kv_min_free: no free-space floor. */
#define MOAT_KV_FREE_OFF UINT64_MAX

/* ---- caps across runs ---------------------------------------------------
 *
 * A long-lived caller that runs many sandboxes at once (moat serve) bounds
 * what all of them relay together: connections relayed out of the host at
 * once (the transparent relay's and the allowlist proxy's; "tcp") and DNS
 * questions being resolved at once ("dns"). It creates one object and puts
 * it in the options of every run. When a cap is full, a new connection is
 * reset (the proxy answers 503) and a DNS question answered SERVFAIL, each
 * logged in its run's network log as "the service's relay cap is full" and
 * counted here. Thread-safe; without it a run has only its own caps. */
struct moat_relay_caps;
enum moat_relay_kind { MOAT_RELAY_TCP, MOAT_RELAY_DNS, MOAT_RELAY__KINDS };
/* Both limits at least 1; NULL when one is 0 or out of memory. */
struct moat_relay_caps *moat_relay_caps_new(unsigned max_tcp, unsigned max_dns);
/* Drops the caller's reference; the object lives on while a run still
 * holds it. NULL-safe. */
void moat_relay_caps_release(struct moat_relay_caps *c);
struct moat_relay_caps_stats {
	unsigned max[MOAT_RELAY__KINDS];
	uint64_t active[MOAT_RELAY__KINDS];  /* now */
	uint64_t refused[MOAT_RELAY__KINDS]; /* since it was created */
};
/* All zero for NULL. */
void moat_relay_caps_stats(struct moat_relay_caps *c, struct moat_relay_caps_stats *out);
/* Runs req in a fresh sandbox: moat_sandbox_create, _start, _wait and
 * _release below, in that order. opts may be NULL (defaults). On success
 * *out is the result (free with moat_result_free), whatever the program
 * did; -1 only when the sandbox could not run it. */
int moat_run(const struct moat_request *req, const struct moat_run_options *opts,
	     struct moat_result **out, struct moat_error *err);

/* ---- running in phases ------------------------------------------------------
 *
 * For a long-lived caller (a service, a pool of prepared sandboxes), the
 * phases of moat_run one by one (docs/ARCHITECTURE.md, "A run"):
 *
 *   create   validates req and builds its sandbox up to "only the program is
 *            missing": the seccomp filter compiled, the cgroups created and
 *            joined, pid 1 cloned into new namespaces with its ids mapped and
 *            building the filesystem. Nothing of the request's code runs.
 *   start    pid 1 forks the program (uid 65534, no capabilities,
 *            no_new_privs, seccomp) and the wall-clock timeout starts.
 *   wait     relays output (opts->on_output) and stdin until the sandbox has
 *            ended, then returns the result, as moat_run does. A setup step
 *            pid 1 fails after create (a mount, the interpreter missing) is
 *            the error of wait. The result is final once pid 1 has reported
 *            the program's status with no other process of the sandbox
 *            left: wait may return while pid 1 itself is still exiting (the
 *            namespaces' teardown, under a millisecond).
 *   release  kills what still runs and reaps pid 1 (nothing of the sandbox
 *            is left after it), removes the cgroups, closes and frees
 *            everything. Call it exactly once for every created sandbox,
 *            after a failed start or wait too. NULL is a no-op.
 *
 * req, opts and everything they point to are borrowed until release. Each
 * call returns 0, or -1 with *err filled; after a -1 only release remains.
 * One sandbox is used by one thread at a time (any thread; phases may
 * move between threads); different sandboxes are independent.
 *
 * Not split yet, honestly:
 *  - create needs the request: the filesystem (code, files), the network
 *    mode, the limits and the environment are built from it before clone3.
 *    A sandbox prepared before its request is known (moat serve's warm
 *    pool) gets them later through a channel of its bootstrap's, which is
 *    moat's internal (src/pool/), not this API.
 *  - the result's durationMs counts from create, as for moat_run. */
struct moat_sandbox;
int moat_sandbox_create(const struct moat_request *req, const struct moat_run_options *opts,
			struct moat_sandbox **out, struct moat_error *err);
int moat_sandbox_start(struct moat_sandbox *sb, struct moat_error *err);
int moat_sandbox_wait(struct moat_sandbox *sb, struct moat_result **out, struct moat_error *err);
void moat_sandbox_release(struct moat_sandbox *sb);

#endif
