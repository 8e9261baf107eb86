/* core: request/result/errors (public parts in include/moat.h) plus the
 * language table, path rules and a JSON string writer used by the rest. */
#ifndef MOAT_CORE_CORE_H
#define MOAT_CORE_CORE_H

#include "moat.h"

/* ---- the sandbox's identity (ns maps it, priv becomes it) ---- */
#define MOAT_SANDBOX_UID 65534
#define MOAT_SANDBOX_GID 65534
/* the program's home and working directory inside (a tmpfs) */
#define MOAT_SANDBOX_DIR "/sandbox"
/* where moat_run_options.runtime_dir appears inside (read-only): ns
 * mounts it there, the runner and the pool name the shims by it */
#define MOAT_RUNTIME_MOUNT "/opt/moat/runtime"

/* ---- requests ---- */
/* The rules of the request's own fields (code, language, env, files,
 * limits, outputs), without the network's: moat_request_validate
 * (runner/validate.c) is this plus each module's rules. */
int moat_request_check(const struct moat_request *req, struct moat_error *err);
/* JSON → request, checked by moat_request_check (moat_request_parse_json
 * adds the network's rules). */
int moat_request_parse(const char *buf, size_t len, struct moat_request **out,
		       struct moat_error *err);
/* The same with the id of an X-Sandbox-Id header (moat serve; NULL: none):
 * the request's "sandboxId" when the JSON has none; a different one in the
 * JSON is a SandboxConfigError. */
int moat_request_parse_id(const char *buf, size_t len, const char *header_id,
			  struct moat_request **out, struct moat_error *err);
/* The one rule for a sandbox id ("sandboxId", X-Sandbox-Id, the store's
 * scope, DELETE /v1/kv/<id>): 1 to MOAT_MAX_SANDBOX_ID bytes of UTF-8
 * without NUL. */
bool moat_sandbox_id_valid(const char *id, size_t len);
/* An X-Sandbox-Id header's id (NULL: none) against the id the body or path
 * names (NULL: none; where says which, for the message): 0 when either is
 * missing or both are the same bytes, else -1 with a SandboxConfigError. */
int moat_sandbox_id_agree(const char *header_id, const char *id, size_t id_len,
			  const char *where, struct moat_error *err);
/* The same without moat_request_check: the request pipeline's first step
 * (moat_request_prepare, src/admin/request.c), which validates once, after
 * the defaults are filled in. */
int moat_request_decode(const char *buf, size_t len, const char *header_id,
			struct moat_request **out, struct moat_error *err);

/* The checks a JSON text gets before cJSON parses it: no raw NUL byte, no
 * nesting deeper than the request parser allows (-1, SandboxConfigError);
 * *nul_escape tells whether a string holds a \u0000 escape. */
int moat_json_prescan(const char *buf, size_t len, bool *nul_escape, struct moat_error *err);

/* ---- errors ---- */
/* Wraps err's message as "prefix: message; suffix" (either may be NULL),
 * keeping its type and errno. Returns -1. */
int moat_error_wrap(struct moat_error *err, const char *prefix, const char *suffix);

/* ---- language table ---- */
struct moat_lang_info {
	enum moat_language id;
	const char *name;        /* canonical request name: "python" */
	const char *ext;         /* file extension without dot: "py" */
	const char *interpreter; /* program looked up on the sandbox PATH: "python3" */
	const char *transpiler;  /* run first inside the sandbox (TypeScript: "esbuild"), or NULL */
};
const struct moat_lang_info *moat_lang_get(enum moat_language id);
/* moat_lang_from_name and moat_lang_from_path are public (moat.h). */

/* ---- paths ---- */
/* A path for `files`: non-empty, relative, no NUL (len is the real length),
 * no "." / ".." / empty components, no trailing '/', at most 4096 bytes and
 * 255 bytes a component. Returns 0 or -1 with a SandboxPolicyError. */
int moat_path_check_relative(const char *path, size_t len, struct moat_error *err);
/* Env var names: ^[A-Za-z_][A-Za-z0-9_]*$ (len is the real length). */
bool moat_env_name_valid(const char *name, size_t len);

/* ---- growable buffer + JSON writing ---- */
struct moat_buf {
	char *data;
	size_t len;
	size_t cap;
	bool oom; /* sticky: set when an append failed */
};
void moat_buf_append(struct moat_buf *b, const void *data, size_t len);
void moat_buf_appendf(struct moat_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Appends a JSON string literal (with quotes) of arbitrary bytes: valid UTF-8
 * is kept, each invalid byte becomes U+FFFD, control bytes and NUL are
 * \u-escaped, '"' and '\\' escaped. */
void moat_buf_append_json_string(struct moat_buf *b, const char *s, size_t len);
/* The longest prefix of s (whole characters) whose string literal by
 * moat_buf_append_json_string, quotes left out, is at most max bytes
 * (control bytes take six, an invalid byte three); *escaped (may be NULL):
 * that literal's length. */
size_t moat_json_string_fit(const char *s, size_t len, size_t max, size_t *escaped);
/* true when s is valid UTF-8 (RFC 3629) without a NUL byte: text that a
 * JSON string carries unchanged. */
bool moat_utf8_text(const char *s, size_t len);
/* How many bytes at s (avail > 0 of them) make one character: 1 for ASCII,
 * 2-4 for a valid UTF-8 sequence (RFC 3629), 0 when s[0] starts none. */
size_t moat_utf8_char_len(const char *s, size_t avail);
/* Appends s for an error message: printable ASCII kept, '"' and '\\'
 * escaped, other bytes as \xNN, cut at max bytes with "...". */
void moat_buf_append_quoted(struct moat_buf *b, const char *s, size_t len, size_t max);
/* Appends a JSON string literal of s in base64 (RFC 4648, padded). */
void moat_buf_append_base64(struct moat_buf *b, const unsigned char *s, size_t len);
/* Takes the NUL-terminated data (NULL if oom) and resets the buffer. */
char *moat_buf_take(struct moat_buf *b);
/* Drops the first n bytes (at most len) and moves the rest to the start:
 * a buffer read from the front keeps its size instead of growing. */
void moat_buf_drop_front(struct moat_buf *b, size_t n);
void moat_buf_free(struct moat_buf *b);

#endif
