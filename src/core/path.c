/* Rules for paths in `files` and for environment variable names. */
#include <string.h>
#include <stdlib.h>

#include "core/core.h"

#define PATH_MAX_BYTES 4096u
#define COMPONENT_MAX_BYTES 255u
#define ENV_NAME_MAX_BYTES 1024u
#define MSG_QUOTE_MAX 100u

/* Defined in buf.c (proposed for core.h). */

static int path_error(struct moat_error *err, const char *path, size_t len,
		      const char *reason)
{
	struct moat_buf b = { 0 };
	moat_buf_append_quoted(&b, path, len, MSG_QUOTE_MAX);
	char *q = moat_buf_take(&b);
	if (!q)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "invalid file path: %s", reason);
	moat_error_set(err, MOAT_ERR_POLICY, 0, "invalid file path %s: %s", q, reason);
	free(q);
	return -1;
}

int moat_path_check_relative(const char *path, size_t len, struct moat_error *err)
{
	if (!path || len == 0)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "invalid file path: empty");
	if (memchr(path, '\0', len))
		return path_error(err, path, len, "contains a NUL byte");
	if (path[0] == '/')
		return path_error(err, path, len, "absolute paths are not allowed (paths are relative to /sandbox)");
	if (len > PATH_MAX_BYTES)
		return path_error(err, path, len, "longer than 4096 bytes");
	if (path[len - 1] == '/')
		return path_error(err, path, len, "trailing '/' is not allowed");

	size_t start = 0;
	while (start < len) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		size_t clen = end - start;
		const char *c = path + start;
		if (clen == 0)
			return path_error(err, path, len, "empty path component (\"//\")");
		if (clen == 1 && c[0] == '.')
			return path_error(err, path, len, "\".\" components are not allowed");
		if (clen == 2 && c[0] == '.' && c[1] == '.')
			return path_error(err, path, len, "\"..\" components are not allowed");
		if (clen > COMPONENT_MAX_BYTES)
			return path_error(err, path, len, "a path component is longer than 255 bytes");
		start = end + 1;
	}
	return 0;
}

bool moat_env_name_valid(const char *name, size_t len)
{
	if (!name || len == 0 || len > ENV_NAME_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
		bool digit = c >= '0' && c <= '9';
		if (!alpha && !(digit && i > 0))
			return false; /* also rejects NUL */
	}
	return true;
}
