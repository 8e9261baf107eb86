/* Errors: a type, an errno and a formatted message; the caller decides how to
 * print them (JSON for `exec`, one line for `run`). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int moat_error_set(struct moat_error *err, enum moat_error_type type,
		   int sys_errno, const char *fmt, ...)
{
	if (!err)
		return -1;
	/* Format before freeing the old message: the arguments may refer to it
	 * (wrapping: moat_error_set(err, t, e, "context: %s", err->message)). */
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n >= 0) {
		msg = malloc((size_t)n + 1);
		if (msg)
			vsnprintf(msg, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	free(err->message);
	err->message = msg; /* NULL on OOM: the type still says what failed */
	err->type = type;
	err->sys_errno = sys_errno;
	return -1;
}

void moat_error_clear(struct moat_error *err)
{
	if (!err)
		return;
	free(err->message);
	err->message = NULL;
	err->type = MOAT_ERR_NONE;
	err->sys_errno = 0;
}

const char *moat_error_type_name(enum moat_error_type type)
{
	switch (type) {
	case MOAT_ERR_CONFIG: return "SandboxConfigError";
	case MOAT_ERR_POLICY: return "SandboxPolicyError";
	case MOAT_ERR_UNAVAILABLE: return "SandboxUnavailableError";
	case MOAT_ERR_NONE: break;
	}
	return "SandboxError"; /* no error / unknown value: the generic base name */
}

int moat_error_exit_code(enum moat_error_type type)
{
	switch (type) {
	case MOAT_ERR_CONFIG:
	case MOAT_ERR_POLICY: return 2;
	case MOAT_ERR_UNAVAILABLE: return 3;
	case MOAT_ERR_NONE: return 0;
	}
	return 1;
}

char *moat_error_to_json(const struct moat_error *err, const char *provider)
{
	enum moat_error_type type = err ? err->type : MOAT_ERR_NONE;
	const char *msg = err && err->message ? err->message
		: type == MOAT_ERR_NONE ? "no error"
		: "(message unavailable: out of memory)";
	const char *type_name = moat_error_type_name(type);
	const char *prov = provider ? provider : "native";
	struct moat_buf b = { 0 };

	moat_buf_append(&b, "{\"error\":{\"type\":", 17);
	moat_buf_append_json_string(&b, type_name, strlen(type_name));
	moat_buf_append(&b, ",\"message\":", 11);
	moat_buf_append_json_string(&b, msg, strlen(msg));
	moat_buf_append(&b, ",\"provider\":", 12);
	moat_buf_append_json_string(&b, prov, strlen(prov));
	moat_buf_append(&b, "}}", 2);
	return moat_buf_take(&b);
}
