/* moat_admin — libmoat's second public header: what a command line or an
 * operator tool needs besides running code (moat.h). Configuration files,
 * the providers of the aistack sandbox contract, the host checks behind
 * `moat doctor`, the seccomp policy tools and the start-up timeline.
 * A program that only runs sandboxes needs moat.h alone. */
#ifndef MOAT_ADMIN_H
#define MOAT_ADMIN_H

#include <stdbool.h>
#include <signal.h>
#include <stdio.h>

#include "moat.h"

/* ---- configuration ---------------------------------------------------------
 * moat.json, or the "sandbox" object of an aistack.config.json; the search
 * order is the README's ("Providers and configuration"). */

struct moat_config;

/* Finds and loads the config (explicit_path may be NULL: the search order). */
int moat_config_load(const char *explicit_path, struct moat_config **out, struct moat_error *err);
void moat_config_free(struct moat_config *cfg);
/* The provider the config selects: never NULL ("native" without a file). */
const char *moat_config_provider(const struct moat_config *cfg);

/* Which request fields the caller gave explicitly; the config fills the
 * others. */
enum {
	MOAT_REQ_HAS_TIMEOUT = 1u << 0,
	MOAT_REQ_HAS_MEMORY = 1u << 1,
	MOAT_REQ_HAS_CPUS = 1u << 2,
	MOAT_REQ_HAS_PIDS = 1u << 3,
	MOAT_REQ_HAS_NETWORK = 1u << 4,
	MOAT_REQ_HAS_STRICT = 1u << 5,
	MOAT_REQ_HAS_MAXOUT = 1u << 6,
};
/* The config's "kv" (the store spec, docs/KV.md) and "kvQuota", or NULL. */
const char *moat_config_kv_store(const struct moat_config *cfg);
const char *moat_config_kv_quota(const struct moat_config *cfg);
/* Fills the request fields not in given (MOAT_REQ_HAS_*) from the config. */
void moat_config_apply(const struct moat_config *cfg, struct moat_request *req, unsigned given);
/* Which of the MOAT_REQ_HAS_* keys a (valid) JSON request names. */
unsigned moat_config_request_keys(const char *json, size_t len);

/* ---- the request pipeline ----------------------------------------------------
 * One path for every request (moat exec, moat run, /v1/run, the Spin
 * routes): parse, fill what the request leaves out (the config, or a
 * service's limits), then validate once with every module's rules
 * (moat_request_validate). The result is marked prepared. */
struct moat_request_defaults {
	const struct moat_config *cfg; /* moat_config_apply; NULL: none */
	/* then this, if set (moat serve's limits: defaults and maxima): given
	 * is the MOAT_REQ_HAS_* keys the caller named; 0, or -1 with *err */
	int (*fill)(void *ctx, struct moat_request *req, unsigned given,
		    struct moat_error *err);
	void *ctx;
	/* an "allowedHosts"/"allowedCidrs" entry the network refuses is the
	 * caller's input error (SandboxConfigError), not a policy refusal:
	 * the Spin envelope's rule */
	bool entry_refusal_is_config;
};
/* JSON text (header_id: an X-Sandbox-Id header's id, or NULL; it stands in
 * for a missing "sandboxId", and a different one is a SandboxConfigError)
 * → a prepared request in *out. d may be NULL: nothing to fill. */
int moat_request_prepare(const char *json, size_t len, const char *header_id,
			 const struct moat_request_defaults *d, struct moat_request **out,
			 struct moat_error *err);
/* The same for a request built otherwise (moat run's flags, a Spin
 * envelope): fill with d (given: MOAT_REQ_HAS_* the caller named), then
 * validate once. */
int moat_request_finish(struct moat_request *req, unsigned given,
			const struct moat_request_defaults *d, struct moat_error *err);

/* ---- streamed results (moat exec --stream; docs/SERVE.md, "Streaming") -------
 * One JSON object a line: {"type":"stdout"|"stderr","data":...} as the
 * program writes (base64 with "encoding":"base64" when not UTF-8, at most
 * 64 KiB of its bytes a line), then one {"type":"result",...}. */
struct moat_lines;
struct moat_lines *moat_lines_new(void); /* NULL when out of memory */
void moat_lines_free(struct moat_lines *l);
/* Appends the lines for len bytes of stream (a UTF-8 sequence cut at the
 * end is carried to that stream's next call). */
void moat_lines_output(struct moat_lines *l, enum moat_stream stream, const char *buf, size_t len);
/* The bytes still carried, as base64 lines (before the result line). */
void moat_lines_flush(struct moat_lines *l);
/* The bytes waiting to be written (*data), and their count. */
size_t moat_lines_pending(const struct moat_lines *l, const char **data);
/* n of the waiting bytes were written. */
void moat_lines_consume(struct moat_lines *l, size_t n);
/* The result line (res's stdout and stderr were streamed: left out),
 * '\n'-terminated; malloc'd, NULL when out of memory. */
char *moat_lines_result(const struct moat_result *res);

/* ---- providers ---------------------------------------------------------------
 * native (moat_run), docker, e2b, daytona, none: one interface. */

/* The provider's name as moat spells it, or NULL when unknown. */
const char *moat_provider_name(const char *name);

struct moat_provider_options {
	const struct moat_config *cfg;      /* never NULL */
	const struct moat_run_options *run; /* native options; streaming callback for all */
};
/* Validates req and runs it with the provider named name (NULL: the
 * config's). The config's warnings are added to the result's. */
int moat_provider_run(const char *name, const struct moat_request *req,
		      const struct moat_provider_options *o, struct moat_result **out,
		      struct moat_error *err);

/* ---- the host (moat doctor) -------------------------------------------------- */

/* Why user namespaces are unavailable here, with the fix, or NULL when no
 * known restriction is found (malloc'd). */
char *moat_userns_diagnose(void);

/* Why a sandbox could not mount its own /proc here (a container runtime's
 * masked paths: mounts over parts of /proc), with the fix, or NULL when
 * nothing is mounted over it (malloc'd). */
char *moat_proc_diagnose(void);

/* AppArmor's user-namespace restriction (Ubuntu 23.10+) and moat's profile
 * (apparmor/moat: `userns,` for /usr/bin/moat and /usr/local/bin/moat). */
struct moat_apparmor {
	bool enabled;           /* the AppArmor LSM is active */
	int restrict_userns;    /* kernel.apparmor_restrict_unprivileged_userns; -1: absent */
	bool as_root;           /* euid 0: the restriction does not apply */
	char label[256];        /* this process's label ("unconfined", "moat (unconfined)"); "" unknown */
	bool covered;           /* the label is moat's profile: user namespaces are allowed */
	int profile_loaded;     /* a profile named moat is loaded: 1, 0; -1: list not readable */
	bool etc_profile;       /* /etc/apparmor.d/moat exists */
	bool exe_attached;      /* the binary's path is one the profile attaches to */
	char exe[4096];         /* the running binary; "" unknown */
	char profile_src[4096]; /* the profile shipped beside this binary; "" not found */
};
/* Fills *aa from /proc, /sys and the filesystem; changes nothing. */
void moat_apparmor_probe(struct moat_apparmor *aa);
/* What to run so that this binary may create user namespaces here (one
 * paragraph with the exact commands), or NULL when nothing stands in the
 * way (malloc'd). */
char *moat_apparmor_fix(const struct moat_apparmor *aa);
/* For a long-lived caller (moat serve, at start): what the first run asking
 * for a limit would do about cgroup delegation, done now and once. Rootless
 * on a cgroup v2 host whose cgroup is not delegated, moat asks the user's
 * systemd for a transient scope with Delegate=yes and moves into it. 0 when
 * nothing was needed or it worked, -1 when runs will fall back to rlimits;
 * *note (malloc'd, or NULL when nothing was needed) says which, for a log. */
int moat_cgroup_delegate(char **note);
/* Where cgroup v2 is and which parent moat would use, and the leaves of
 * moats no longer running found there; changes nothing. */
int moat_cgroup_describe(FILE *out);
/* The cgroup leaves of moats no longer running (a crash, kill -9) under the
 * parents this process's runs would use: how many were found, how many
 * removed (remove: empty ones rmdir'd, never a live moat's), and where
 * ("cpu,cpuacct 45, pids 45, unified 45"; malloc'd, NULL when none). For
 * moat serve, at its start and on a timer. 0, or -1 out of memory. */
struct moat_cgroup_leftovers {
	unsigned found, removed;
	char *where;
};
int moat_cgroup_sweep_leftovers(bool remove, struct moat_cgroup_leftovers *out);
/* What a run asking for every limit would get on this host, decided as a
 * run decides (a cgroup leaf is created and removed again): *out holds
 * limit_memory/pids/cpu and the warnings; *group_kill is true when a
 * timeout kills the whole cgroup at once (cgroup.kill). */
int moat_limits_probe(struct moat_result **out, bool *group_kill, struct moat_error *err);
/* As root on cgroup v1, what moving a run into its v1 cgroups costs after a
 * quiet gap (cgroups/joincost.c: a write to a v1 cgroup.procs can wait for
 * an RCU grace period): a leaf like a run's, a throwaway child moved into
 * it samples times, gap_ms apart; the median. favordynmods: a cgroup mount
 * has it (the kernel's remedy). 0 with *out; 1 when no run here moves into
 * a v1 cgroup (cgroup v2, rootless without a writable v1 parent); -1 with
 * *err. */
struct moat_cgroup_join {
	double median_ms;
	int samples, gap_ms;
	bool favordynmods;
};
int moat_cgroup_join_probe(struct moat_cgroup_join *out, struct moat_error *err);
/* The egress setup of a run ("network": true) done for real in a
 * throwaway user and network namespace: 0, or the error a run would get. */
int moat_net_probe(struct moat_error *err);
/* Compiles the default seccomp policy as a run would, twice: 0 when it
 * compiles. *cache_dir: where this user's compiled filters are cached
 * (malloc'd, or NULL when there is no usable place); *cached: the second
 * compile came from that cache. */
int moat_seccomp_probe(char **cache_dir, bool *cached, struct moat_error *err);
/* The kernel's Landlock ABI version (the program's second filesystem wall,
 * SECURITY.md); 0 when the kernel has none. */
int moat_landlock_version(void);

/* ---- seccomp policies -------------------------------------------------------- */

/* `moat policy check FILE`: 0 when valid; otherwise the error names the
 * JSON path of the bad entry (e.g. syscalls[3].args[0].op). */
int moat_seccomp_policy_check(const char *path, struct moat_error *err);
/* `moat policy show`: the effective policy (path NULL: the embedded
 * default) as Docker-format JSON. */
int moat_seccomp_policy_show(const char *path, FILE *out, struct moat_error *err);
/* How many system call names the policy (path NULL: the embedded default)
 * allows on this host, some only with the arguments it names (`moat policy
 * show` prints it). The default's is bounded by its unit tests (SECURITY.md). */
int moat_seccomp_policy_allowed(const char *path, size_t *count, struct moat_error *err);

/* ---- start-up timeline (make timeline) -------------------------------------
 * In a build with -DMOAT_TIMELINE: mark a named point in time, and print
 * every point recorded by the supervisor, pid 1 and pid 2 to stderr.
 * Otherwise both do nothing. */
void moat_timeline_mark(const char *name);
void moat_timeline_dump(void);

/* ---- the key-value store (moat kv; docs/KV.md) ------------------------------
 * spec: as --kv (NULL: this user's default SQLite file). */

/* The quota text of --kv-quota ("keys=N,bytes=N,value=N,free=N", sizes with
 * K/M/G) into the run options' kv_max_* and kv_min_free. */
int moat_kv_quota_options(const char *text, struct moat_run_options *opts,
			  struct moat_error *err);
/* Opens the store and closes it again (moat serve at start, moat doctor):
 * 0 and *desc ("sqlite", "redis", malloc'd), or -1 with the error a
 * kvEnabled run would get. */
int moat_kv_probe(const char *spec, char **desc, struct moat_error *err);
/* `moat kv OP SANDBOXID [KEY]`: op "list" (JSON {"sandboxId","keys":[..]}),
 * "export" (JSON {"sandboxId","items":[{"key","value"|"valueBase64"}..]}),
 * "clear" (JSON {"sandboxId","removed":N}) or "get" (the value's bytes).
 * *out is malloc'd (*out_len bytes). 0; 1 when "get" found no such key; -1
 * with *err, whose message names no host path or server address (moat
 * serve answers it to a client: "the store is full", "the key-value store
 * cannot be opened"); *detail (detail may be NULL; malloc'd or NULL) is
 * then the operator's: the store's path or address and the backend's
 * error. */
int moat_kv_admin(const char *spec, const char *op, const char *id, size_t id_len,
		  const char *key, char **out, size_t *out_len, char **detail,
		  struct moat_error *err);

/* ---- the HTTP service (moat serve; docs/SERVE.md) ------------------------------
 * libmicrohttpd is loaded with dlopen when the service starts, so no other
 * command pays for loading it. */

struct moat_serve_options {
	int listen_fd;            /* bound and listening, O_CLOEXEC; the service closes it */
	const char *listen_desc;  /* "127.0.0.1:3000", "unix:/run/user/1000/moat.sock" */
	const char *unlink_path;  /* a unix socket removed when it stops accepting, or NULL */
	const char *token;        /* bearer token, or NULL: none (a unix socket's mode is its
				   * only guard; a TCP listener then needs no_auth) */
	bool no_auth;             /* no token on a loopback TCP listener or a socket, on
				   * purpose (--no-auth): warned at start and in /healthz */
	int metrics_fd;           /* with metrics_desc: a second listener, bound and listening,
				   * O_CLOEXEC, serving GET /metrics only, without the token;
				   * the service closes it */
	const char *metrics_desc; /* "0.0.0.0:9090", or NULL: no metrics listener */
	unsigned max_concurrent;  /* > 0 */
	unsigned queue;
	unsigned grace_s;
	unsigned client_timeout_s;
	const char *runtime_dir;  /* bound at /opt/moat/runtime; NULL: handlers unavailable */
	/* kvEnabled requests: the store spec (NULL: the default file), quotas
	 * (0: defaults); kv_off refuses kvEnabled with 501 */
	const char *kv_store;
	uint64_t kv_max_keys, kv_max_bytes, kv_max_value;
	uint64_t kv_min_free; /* moat_run_options' kv_min_free */
	bool kv_off;
	int pool;                 /* warm sandboxes per language (python, javascript); 0: none;
				   * -1: the config's serve.pool, else sized to the memory */
	int pool_zygote;          /* 1: Python requests go to a zygote (docs/design/pool-zygote.md)
				   * while it runs, instead of warm python sandboxes; 0: they
				   * do not; -1: the config's serve.poolZygote, else 1 where
				   * the service can run one (the host's root, the default
				   * policy) */
	/* the zygote's lifetime (docs/SERVE.md): children each makes, seconds
	 * each lives, whichever comes first; 0: the config's
	 * serve.poolZygoteMaxChildren / serve.poolZygoteMaxAge, else the
	 * defaults */
	unsigned pool_zygote_max_children, pool_zygote_max_age_s;
	/* across all runs at once (moat_relay_caps in moat.h): connections
	 * relayed out of the host, DNS questions being resolved; 0: the
	 * config's serve.maxRelays / serve.maxDns, else 4096 and 256 */
	unsigned max_relays, max_dns;
	/* sessions live at once (docs/SESSIONS.md); 0: sessions off; -1: the
	 * config's serve.sessions.max, else from memory (at most 64) */
	int max_sessions;
	/* live sandboxes at once (docs/SANDBOXES.md); 0: off; -1: as
	 * max_sessions' default (from memory, at most 64) */
	int max_sandboxes;
	/* live sandboxes kept made ahead, their agent answered (docs/SANDBOXES.md,
	 * "The pool"); -1: the config's serve.sandboxes.pool, else 1 as root
	 * with 1 GiB available, 0 rootless */
	int sandbox_pool;
	/* this node's name in every session and sandbox id (docs/scaling.md):
	 * [a-z0-9-]{1,32}; NULL: the config's serve.node, else derived from
	 * the host's name (a digest: "n" + 8 hex digits) */
	const char *node;
	const char *rootfs_dir;   /* NULL: the config's, else the host-derived root */
	const struct moat_config *cfg; /* never NULL: policy, rootfs and the "serve" limits */
	FILE *log;                /* access log and notices */
	bool json_log;            /* every log line one JSON object (--json-log) */
};

/* Whether a listener may serve with this authentication (token: one is
 * set): 0, or -1 with *why (a sentence naming the flags: --token-file,
 * --no-auth). A TCP listener needs the token, loopback too, unless no_auth;
 * no_auth only on a loopback address or a unix socket, never with a token.
 * *is_unix (may be NULL): the listener is a unix socket. moat_serve_run
 * checks it again. */
int moat_serve_auth_check(int listen_fd, bool token, bool no_auth, bool *is_unix,
			  const char **why);

/* Socket activation (docs/SERVE.md "Socket activation"): the listening
 * socket a service manager passed (LISTEN_PID this process, LISTEN_FDS 1,
 * fd 3; through libsystemd's sd_listen_fds_with_names when it loads, else
 * the same protocol read here). 1 with *fd (close-on-exec) and *desc
 * (malloc'd, for the log; may be NULL); 0 when none was passed; -1 with *why
 * (a sentence) when what was passed cannot be served: not one listening
 * stream socket, or, without a token (token false), a unix socket whose
 * file is not this user's or that group or others may write (connect to;
 * its mode is then its only guard). The LISTEN_* variables are removed from the environment in every
 * case. */
int moat_serve_activated(bool token, int *fd, char **desc, const char **why);

/* Serves until one of stop (blocked in every thread by the caller before
 * this call) arrives, then shuts down (SERVE.md: --grace). 0 after a clean
 * stop; -1 with *err when it could not start. */
int moat_serve_run(const struct moat_serve_options *o, const sigset_t *stop,
		   struct moat_error *err);

#endif
