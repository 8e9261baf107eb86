/* The live sandbox's agent protocol (docs/SANDBOXES.md, "The agent"): what
 * the host (src/live/) sends the in-sandbox agent (src/agent/main.c, built
 * static to runtime/bin/moat-agent) over the agent's fd 3, and the parser
 * the agent reads it with. Pure functions, no allocation: unit-tested
 * (tests/unit/test_agent_proto.c) and linked into the static agent.
 *
 * A request is one SOCK_SEQPACKET message of at most AGENT_MAX_MSG bytes
 * carrying exactly one fd (SCM_RIGHTS): the operation's own socket, on
 * which every answer of that operation comes. Its bytes: one op byte, then
 * fields, each ended by a NUL (the message ends with one). An answer is one
 * message of text: "<errno> <payload>" ("0 ..." is success), the fds of a
 * success attached; a process's end later on its socket: "X <code> <signal>";
 * a listing's entries "e <type> <size> <mode> <mtime_ms> <path>" then
 * "0 <count> <truncated>"; a stat's answer and a listing's entry may carry
 * the file's metadata after their text (agent_meta_parse: a NUL, then
 * "0" or "1" (1: some was left out) and NUL-ended key, value pairs); a disk answer "0 <sandbox bytes> <tmp bytes>"; a connect's
 * "0 " with the socket attached (non-blocking, its connect begun). An exec's stdin field 2 (a code context's
 * driver, docs/CONTEXTS.md): stdin /dev/null and fd 3 a unix stream
 * socket (socketpair) whose other end is the answer's first fd, before
 * the stdout and stderr pipes. */
#ifndef MOAT_AGENT_PROTO_H
#define MOAT_AGENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_MAX_MSG 65536u   /* a request or an answer, bytes */
#define AGENT_MAX_FIELDS 1024u /* fields of a request (argv + env of a process) */
#define AGENT_MAX_PATH 4095u   /* a path's bytes */
#define AGENT_MAX_DEPTH 32u    /* a listing's depth, a removal's */
#define AGENT_MAX_ENTRIES 100000u /* a listing's entries, at most */
#define AGENT_MAX_PROCS 256u   /* processes the agent tracks at once */
#define AGENT_MAX_PORT 65535u

enum agent_op {
	AGENT_PING = 'p',   /* no field */
	AGENT_READ = 'r',   /* path */
	AGENT_WRITE = 'w',  /* path, mkdirs 0|1, metadata 0|1 then (1) key, value
			     * pairs: the file's user.e2b.<key> xattrs
			     * replaced by them, before its data (0: none
			     * touched) */
	AGENT_STAT = 's',   /* path */
	AGENT_LIST = 'l',   /* path, depth 1..AGENT_MAX_DEPTH, max entries */
	AGENT_MKDIR = 'm',  /* path, parents 0|1 */
	AGENT_RENAME = 'n', /* from, to */
	AGENT_REMOVE = 'd', /* path, recursive 0|1 */
	AGENT_EXEC = 'x',   /* cwd, stdin 0|1|2, argc, argv..., env (NAME=value)... */
	AGENT_SIGNAL = 'k', /* pid, signal 1..64 */
	AGENT_DISK = 'f',   /* no field: bytes used of /sandbox and of /tmp */
	AGENT_EXEC_PTY = 't', /* cwd, rows, cols (1..AGENT_MAX_WINSIZE), argc, argv..., env... */
	AGENT_WATCH = 'i',  /* directory, recursive 0|1: events on the op's socket */
	AGENT_CONNECT = 'c', /* port 1..65535: a TCP socket to 127.0.0.1:port, the
			      * sandbox's own loopback (its connect maybe still in
			      * progress: the host waits for it) */
};

/* A watch's events, one message each on its operation's socket after the
 * answer "0 ": a kind byte, then NUL-ended paths. */
enum agent_event_kind {
	AGENT_EV_CREATE = 'c',   /* path */
	AGENT_EV_WRITE = 'w',    /* path */
	AGENT_EV_REMOVE = 'd',   /* path */
	AGENT_EV_RENAME = 'r',   /* from, to */
	AGENT_EV_OVERFLOW = 'o', /* nothing: events were lost */
	AGENT_EV_END = 'g',      /* nothing: the directory watched is gone */
};
#define AGENT_MAX_WATCHES 8u       /* watches at once per sandbox */
#define AGENT_MAX_WATCH_DIRS 1024u /* directories one (recursive) watch holds */
struct agent_event {
	char kind;
	const char *path, *to; /* into the parsed buffer; NULL when none */
};
/* Parses an event of len bytes whose paths must be root or under it: 0, or
 * -1 when malformed (an unknown kind, the wrong number of paths, a path
 * agent_path refuses or outside root). */
int agent_event_parse(const char *buf, size_t len, const char *root, struct agent_event *ev);

/* A file's metadata (docs/E2B.md, "File metadata"): its user.e2b.<key>
 * extended attributes. Keys 1..AGENT_MAX_META_KEY bytes, keys and values
 * printable US-ASCII (0x20-0x7E), no key twice, and the sum over the pairs
 * of strlen("user.e2b." key) + strlen(value) at most AGENT_MAX_META: what
 * a write may set and what an answer may carry (an answer leaves out what
 * is past it, or not printable, and says so). */
#define AGENT_META_PREFIX "user.e2b."
#define AGENT_META_PREFIX_LEN 9u
#define AGENT_MAX_META 4096u
#define AGENT_MAX_META_KEY 246u
#define AGENT_MAX_META_PAIRS (AGENT_MAX_META / (AGENT_META_PREFIX_LEN + 1))
/* A key, a value of len bytes: within the rules above. */
bool agent_meta_key_ok(const char *k, size_t len);
bool agent_meta_value_ok(const char *v, size_t len);
/* npairs pairs kv[2i], kv[2i+1]: every rule above (the total bound, no key
 * twice) kept. */
bool agent_meta_pairs_ok(const char *const *kv, size_t npairs);
/* The metadata block after an answer's text (buf, len: what follows the
 * text's NUL): "0" or "1" NUL, then key NUL value NUL pairs, at least one
 * unless the flag is 1. kv (2 x AGENT_MAX_META_PAIRS) points into buf:
 * 0 with *npairs and *incomplete, or -1 when malformed or past a rule. */
int agent_meta_parse(const char *buf, size_t len, const char **kv, size_t *npairs,
		     bool *incomplete);

#define AGENT_MAX_WINSIZE 1000u /* a pty's rows, its columns */

struct agent_msg {
	char op;
	size_t nfields;
	const char *field[AGENT_MAX_FIELDS]; /* into the parsed buffer */
	/* AGENT_EXEC, AGENT_EXEC_PTY: */
	size_t argv0; /* the first argv field: 3 (exec), 4 (pty) */
	size_t argc; /* field[argv0 .. argv0+argc) */
	size_t envc; /* field[argv0+argc .. nfields) */
};

/* Parses a request of len bytes (buf is not changed; fields point into it):
 * 0, or -1 when it is malformed (empty, too long, not NUL-ended, an unknown
 * op, the wrong number of fields for it, a flag not 0|1, a number out of
 * range, a path agent_path refuses, argc 0 or past the fields). */
int agent_parse(const char *buf, size_t len, struct agent_msg *m);
/* A decimal number of at most 10 digits, no sign, no leading zero but "0",
 * at most max: 0 and *out, or -1. */
int agent_num(const char *s, uint64_t max, uint64_t *out);
/* A path the agent acts on: absolute, under /sandbox or /tmp (or one of
 * them), at most AGENT_MAX_PATH bytes, no "." or ".." component. *root: 0
 * /sandbox, 1 /tmp; *rel the rest with its leading slashes skipped ("" for
 * the root itself). 0, or -1. */
int agent_path(const char *p, int *root, const char **rel);

#endif
