/* Errors: a type, an errno and a formatted message; the caller decides how to
 * print them (JSON for `exec`, one line for `run`). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/sys.h"

int moat_error_set(struct moat_error *err, enum moat_error_type type,
		   int sys_errno, const char *fmt, ...)
{
	if (!err)
		return -1;
	/* Format before freeing the old message: the arguments may refer to it
	 * (wrapping: moat_error_set(err, t, e, "context: %s", err->message)). */
	va_list ap;
	va_start(ap, fmt);
	char *msg = moat_vformat(fmt, ap);
	va_end(ap);
	free(err->message);
	err->message = msg; /* NULL on OOM: the type still says what failed */
	err->type = type;
	err->sys_errno = sys_errno;
	return -1;
}

int moat_error_oom(struct moat_error *err)
{
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
}

int moat_error_wrap(struct moat_error *err, const char *prefix, const char *suffix)
{
	if (!err || !err->message)
		return -1;
	return moat_error_set(err, err->type, err->sys_errno, "%s%s%s%s%s", prefix ? prefix : "",
			      prefix ? ": " : "", err->message, suffix ? "; " : "",
			      suffix ? suffix : "");
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
