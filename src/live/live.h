/* Live sandboxes (docs/SANDBOXES.md): one sandbox made exactly as a run's
 * (namespaces, root, filter, Landlock, limits, uid 65534) that outlives a
 * request, whose program is the in-sandbox agent (src/agent/, built static
 * to runtime/bin/moat-agent, run from MOAT_RUNTIME_MOUNT). Every file and
 * process operation is the agent's, inside the sandbox with its identity:
 * this side never resolves a sandbox path. For each operation a fresh
 * SOCK_SEQPACKET pair: one end goes to the agent with the request (over its
 * fd 3), the answer comes on the other, with the fds the agent opened (a
 * regular file, a process's pipes), which this side then reads or writes
 * itself, in bounded chunks. The agent is untrusted (tenant code shares
 * its uid): every answer is bounded and parsed strictly, every fd checked
 * for the type expected (a regular file of a tmpfs, an anonymous pipe), no
 * fd of its ever used to resolve a path; a breach kills the sandbox
 * ("protocol").
 *
 * Errors: moat_error with sys_errno the agent's errno (ENOENT, EEXIST,
 * ELOOP for a symlink on the path, ENXIO for a file that is not a regular
 * one, ...), or ENOTCONN when the sandbox is gone (live_gone says why).
 * Thread-safe: any operation from any thread, concurrently. */
#ifndef MOAT_LIVE_LIVE_H
#define MOAT_LIVE_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "moat.h"

struct live;

struct live_config {
	/* prepared (moat_request_prepare): limits, env, network, allowedHosts,
	 * sandboxId, kvEnabled; taken (freed with the sandbox, also on
	 * failure); its argv and timeout are replaced (the agent; backstop_ms) */
	struct moat_request *req;
	/* the service's (runtime_dir needed); borrowed while the sandbox lives */
	const struct moat_run_options *opts;
	uint64_t backstop_ms; /* the sandbox's own timeout (its lifetime's backstop) */
};

/* Creates the sandbox on a thread of its own (it lives as long as the
 * sandbox: pid 1's parent-death signal follows it) and waits for the
 * agent's first answer. On failure nothing is left. */
int live_create(const struct live_config *cfg, struct live **out, struct moat_error *err);
/* Kills every process of it (from any thread, any number of times). */
void live_kill(struct live *lv);
/* Kills it and waits until nothing of it is left (processes, cgroups,
 * files: pid 1 reaped, the run released); frees it. Once no other thread
 * uses it. NULL-safe. */
void live_destroy(struct live *lv);
/* Waits until the sandbox has ended and nothing of it is left (its thread
 * released it); live_kill first to end it. */
void live_wait_ended(struct live *lv);
/* NULL while the sandbox lives, else why it ended (a sentence for a 410;
 * valid until live_destroy). */
const char *live_gone(struct live *lv);
/* Its cgroup's memory now and peak (bytes) and CPU time (ms), -1 unknown;
 * processes started and still running. */
int64_t live_memory(struct live *lv);
int64_t live_cpu_ms(struct live *lv);
unsigned live_running(struct live *lv);
/* Freezes (frozen) or thaws every process of it, the agent's too
 * (run_sandbox_freeze: SIGSTOP of its whole tree; keeps its memory; a
 * frozen sandbox's agent answers nothing: thaw before asking). 0, or -1
 * with err (ended, or its tasks would not stop: the caller kills it). */
int live_freeze(struct live *lv, bool frozen, struct moat_error *err);
/* Whether a cgroup quota bounds its CPU (else nothing does while it runs). */
bool live_cpu_bounded(struct live *lv);
/* The bytes used of its /sandbox and /tmp tmpfs (the agent's fstatfs:
 * what the sandbox says of itself). */
int live_disk(struct live *lv, uint64_t *bytes, struct moat_error *err);
/* Appends "limits":{memory,pids,cpu: how each is enforced},"warnings":[...]
 * (a limit's fallback, Landlock missing: what its making said; then extra,
 * when not NULL: the caller's own). */
void live_made_json(struct live *lv, struct moat_buf *out, const char *extra);

/* ---- files (paths under /sandbox or /tmp, resolved by the agent) ---- */
/* The form of a path the agent takes (absolute, under /sandbox or /tmp,
 * no "." or ".." component, at most 4095 bytes): checked before asking. */
bool live_path_ok(const char *path);
/* A regular file opened for reading (*fd: the caller's, O_CLOEXEC), its size. */
int live_open_read(struct live *lv, const char *path, int *fd, uint64_t *size,
		   struct moat_error *err);
/* A file's metadata (docs/E2B.md, "File metadata"): its user.e2b.<key>
 * extended attributes, set by the agent. Keys 1..LIVE_MAX_META_KEY bytes,
 * keys and values printable US-ASCII, no key twice, the sum of
 * strlen("user.e2b." key value) over them at most LIVE_MAX_META. */
#define LIVE_MAX_META 4096u
#define LIVE_MAX_META_KEY 246u
struct live_meta {
	const char *const *kv; /* kv[2i] a key, kv[2i+1] its value */
	size_t npairs;
};
/* npairs pairs within the rules above. */
bool live_meta_ok(const char *const *kv, size_t npairs);
/* A regular file created or truncated for writing (mkdirs: its missing
 * parents made). meta (NULL: the file's metadata not touched): its
 * metadata replaced by these pairs before its data is truncated; a failure
 * there (EOPNOTSUPP: the sandbox's filesystem has no user xattrs; an empty
 * set is then a success) leaves no file made and an existing one
 * untouched. */
int live_open_write(struct live *lv, const char *path, bool mkdirs, const struct live_meta *meta,
		    int *fd, struct moat_error *err);
struct live_stat {
	char type[8]; /* file dir symlink fifo socket char block other */
	uint64_t size;
	unsigned mode;
	int64_t mtime_ms;
	/* its metadata (a regular file's or a directory's): meta_pairs
	 * NUL-ended key, value pairs one after another (meta_len bytes);
	 * meta_incomplete: the agent left some out (not printable, past the
	 * bounds, or not readable by the sandbox's user) */
	char meta[LIVE_MAX_META];
	size_t meta_len, meta_pairs;
	bool meta_incomplete;
};
/* Appends ,"metadata":{"key":"value",...} when st has any and
 * ,"metadataIncomplete":true when some was left out. */
void live_meta_json(struct moat_buf *out, const struct live_stat *st);
int live_stat(struct live *lv, const char *path, struct live_stat *st, struct moat_error *err);
/* The entries under path, depth levels down, at most max and about
 * LIVE_LIST_MAX_BYTES of JSON: appended to out as JSON objects separated
 * by commas ({"path","type","size","mode","mtimeMs"}, and "metadata",
 * "metadataIncomplete" as live_meta_json); *truncated when a bound cut it. */
#define LIVE_LIST_MAX_BYTES (8u << 20) /* a listing's JSON, at most (then truncated) */
int live_list(struct live *lv, const char *path, unsigned depth, unsigned max,
	      struct moat_buf *out, unsigned *count, bool *truncated, struct moat_error *err);
int live_mkdir(struct live *lv, const char *path, bool parents, struct moat_error *err);
int live_rename(struct live *lv, const char *from, const char *to, struct moat_error *err);
int live_remove(struct live *lv, const char *path, bool recursive, struct moat_error *err);

/* ---- processes ---- */
struct live_exec {
	const char *const *argv; /* argc of them, argv[0] looked up on PATH */
	size_t argc;
	const char *const *env;  /* "NAME=value", envc of them, over the sandbox's */
	size_t envc;
	const char *cwd;         /* under /sandbox or /tmp */
	bool stdin_open;         /* else /dev/null (a pty's is always open) */
	/* a terminal of the sandbox's own devpts: its controlling tty, fds 0-2;
	 * rows, cols 1..LIVE_MAX_WINSIZE */
	bool pty;
	unsigned rows, cols;
};
#define LIVE_MAX_WINSIZE 1000u
/* At most LIVE_MAX_PROCS processes are kept (running, or ended and not yet
 * dropped: the oldest ended one goes first). */
#define LIVE_MAX_PROCS 128
int live_exec(struct live *lv, const struct live_exec *spec, int *pid, struct moat_error *err);
/* live_exec of a code context's driver (docs/CONTEXTS.md): stdin
 * /dev/null, fd 3 a unix stream socket the agent makes; fds[0] its other
 * end, fds[1] and fds[2] the stdout and stderr pipes (the caller's,
 * O_CLOEXEC, O_NONBLOCK, each checked for its kind). The process is
 * kept as any (signal, wait, listed) but attached for good: no client may
 * read its output. */
int live_exec_ctl(struct live *lv, const struct live_exec *spec, int *pid, int fds[3],
		  struct moat_error *err);
int live_signal(struct live *lv, int pid, int sig, struct moat_error *err);
/* Writes len bytes to the process's stdin, waiting at most timeout_ms for
 * room in the pipe: the bytes written (< len on timeout), or -1. */
ssize_t live_stdin_write(struct live *lv, int pid, const char *buf, size_t len,
			 int64_t timeout_ms, struct moat_error *err);
int live_stdin_close(struct live *lv, int pid, struct moat_error *err);
/* A pty process's window size (TIOCSWINSZ on the master this side holds,
 * checked a devpts ptmx at exec); ENOTTY for a process without a pty. */
int live_resize(struct live *lv, int pid, unsigned rows, unsigned cols, struct moat_error *err);
struct live_proc_info {
	int pid;
	bool running;
	bool exited;   /* exit_code valid */
	int exit_code;
	int signal;    /* 0 when none */
	bool attached; /* a client reads its output */
	bool lost;     /* the sandbox ended before its end was known */
	bool pty;      /* it runs on a terminal: one output stream, stdout */
};
/* Its state after waiting up to ms for its end (0: now). */
int live_wait(struct live *lv, int pid, int64_t ms, struct live_proc_info *info,
	      struct moat_error *err);
/* Every process kept, as JSON objects separated by commas. */
void live_procs_json(struct live *lv, struct moat_buf *out);

/* Attaches the one reader of a process's output (EBUSY when another
 * is attached); the output a process wrote while none was attached waits
 * in its pipes (the process blocks once a pipe is full). */
struct live_attach;
int live_attach(struct live *lv, int pid, struct live_attach **out, struct moat_error *err);
enum live_event { LIVE_EV_NONE, LIVE_EV_STDOUT, LIVE_EV_STDERR, LIVE_EV_EXIT, LIVE_EV_END,
		  LIVE_EV_HANGUP };
/* The next event within ms: output (*n bytes into buf), the exit (info),
 * nothing yet, or the end (after the exit, or the sandbox gone). client
 * (-1: none) is the reader's socket: once it hangs up nothing more is
 * read from the pipes (LIVE_EV_HANGUP), so that the next reader gets it. */
enum live_event live_attach_next(struct live_attach *a, int ms, int client, char *buf,
				 size_t cap, size_t *n, struct live_proc_info *info);

/* A directory's events (inotify in the agent, one message each, checked
 * here: agent/proto.h agent_event_parse), at most LIVE_MAX_WATCHES at once
 * per sandbox (EMFILE past it). */
#define LIVE_MAX_WATCHES 8u
struct live_watch;
int live_watch_open(struct live *lv, const char *path, bool recursive, struct live_watch **out,
		    struct moat_error *err);
/* Waits up to ms for one event: LIVE_EV_STDOUT with its NDJSON line
 * appended to line, LIVE_EV_EXIT with the last one (the directory gone),
 * LIVE_EV_NONE, LIVE_EV_HANGUP (client hung up), LIVE_EV_END (the sandbox
 * gone, or its agent broke the protocol: the sandbox is killed). */
enum live_event live_watch_next(struct live_watch *w, int ms, int client, struct moat_buf *line);
void live_watch_close(struct live_watch *w);
/* The directory it watches, as asked (its trailing slashes off). */
const char *live_watch_root(const struct live_watch *w);

void live_attach_end(struct live_attach *a);

/* ---- the sandbox's own servers ---- */
/* A TCP connection to 127.0.0.1:port inside the sandbox's network
 * namespace (the agent's socket, its connect begun there): *fd the
 * caller's (O_CLOEXEC, O_NONBLOCK), connected within timeout_ms, checked
 * an AF_INET stream socket connected to the sandbox's loopback at port.
 * ECONNREFUSED (nothing listens), ETIMEDOUT, EAGAIN past LIVE_MAX_CONNS
 * open at once per sandbox (each held until live_connect_end). */
#define LIVE_MAX_CONNS 32u
int live_connect(struct live *lv, unsigned port, int64_t timeout_ms, int *fd,
		 struct moat_error *err);
/* The connection's fd closed and its place among LIVE_MAX_CONNS freed. */
void live_connect_end(struct live *lv, int fd);
/* A client's socket hung up (POLLHUP, an error, or over TCP the peer's FIN:
 * a read side the HTTP server shut is not one); -1: false. */
bool live_client_gone(int fd);

#endif
