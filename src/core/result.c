/* The result of one run and its JSON form (README.md, "JSON contract"). Written with the
 * moat_buf writer, not cJSON: output may hold NUL and invalid UTF-8. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/sys.h"

struct moat_result *moat_result_new(void)
{
	struct moat_result *res = calloc(1, sizeof *res);
	if (!res)
		return NULL;
	res->memory_peak_bytes = -1;
	res->cpu_time_ms = -1;
	res->provider = "native";
	return res;
}

void moat_result_free(struct moat_result *res)
{
	if (!res)
		return;
	free(res->stdout_buf);
	free(res->stderr_buf);
	for (size_t i = 0; i < res->warnings_count; i++)
		free(res->warnings[i]);
	free(res->warnings);
	free(res->network_json);
	free(res->files_json);
	free(res->seccomp_json);
	free(res);
}

int moat_result_warn(struct moat_result *res, const char *fmt, ...)
{
	if (!res)
		return -1;
	if (res->warnings_count >= SIZE_MAX / sizeof *res->warnings - 1)
		return -1;
	char **list = realloc(res->warnings, (res->warnings_count + 1) * sizeof *list);
	if (!list)
		return -1;
	res->warnings = list;

	va_list ap;
	va_start(ap, fmt);
	char *msg = moat_vformat(fmt, ap);
	va_end(ap);
	if (!msg)
		return -1;
	list[res->warnings_count++] = msg;
	return 0;
}

int moat_request_warn_units(const struct moat_request *req, struct moat_result *res)
{
	if (!req || !res || !req->timeout_from_json ||
	    req->timeout_ms >= MOAT_TIMEOUT_UNIT_WARN_MS)
		return 0;
	uint64_t t = req->timeout_ms;
	return moat_result_warn(res,
				"timeout %" PRIu64 " is in milliseconds: this run had %" PRIu64
				" ms (for %" PRIu64 " seconds, give %" PRIu64 ")",
				t, t, t, t * 1000);
}

static void put_key(struct moat_buf *b, bool *first, const char *key)
{
	if (!*first)
		moat_buf_append(b, ",", 1);
	*first = false;
	moat_buf_append_json_string(b, key, strlen(key));
	moat_buf_append(b, ":", 1);
}

static void put_str(struct moat_buf *b, const char *s)
{
	if (s)
		moat_buf_append_json_string(b, s, strlen(s));
	else
		moat_buf_append(b, "null", 4);
}

static void put_bool(struct moat_buf *b, bool v)
{
	if (v)
		moat_buf_append(b, "true", 4);
	else
		moat_buf_append(b, "false", 5);
}

static void put_signal(struct moat_buf *b, int sig)
{
	if (sig <= 0) {
		moat_buf_append(b, "null", 4);
		return;
	}
	const char *abbrev = NULL;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
	abbrev = sigabbrev_np(sig);
#endif
	struct moat_buf name = { 0 };
	if (abbrev)
		moat_buf_appendf(&name, "SIG%s", abbrev);
	else
		moat_buf_appendf(&name, "SIG%d", sig);
	if (name.oom)
		b->oom = true;
	else
		moat_buf_append_json_string(b, name.data, name.len);
	moat_buf_free(&name);
}

char *moat_result_to_json(const struct moat_result *res)
{
	if (!res)
		return NULL;
	struct moat_buf b = { 0 };
	bool first = true;

	moat_buf_append(&b, "{", 1);
	put_key(&b, &first, "stdout");
	moat_buf_append_json_string(&b, res->stdout_buf ? res->stdout_buf : "",
				    res->stdout_buf ? res->stdout_len : 0);
	put_key(&b, &first, "stderr");
	moat_buf_append_json_string(&b, res->stderr_buf ? res->stderr_buf : "",
				    res->stderr_buf ? res->stderr_len : 0);
	put_key(&b, &first, "exitCode");
	if (res->exited)
		moat_buf_appendf(&b, "%d", res->exit_code);
	else
		moat_buf_append(&b, "null", 4);
	put_key(&b, &first, "timedOut");
	put_bool(&b, res->timed_out);
	put_key(&b, &first, "durationMs");
	moat_buf_appendf(&b, "%" PRIu64, res->duration_ms);
	put_key(&b, &first, "provider");
	put_str(&b, res->provider ? res->provider : "native");
	put_key(&b, &first, "signal");
	put_signal(&b, res->signal);
	put_key(&b, &first, "oomKilled");
	put_bool(&b, res->oom_killed);
	put_key(&b, &first, "killedBy");
	put_str(&b, res->killed_by);
	put_key(&b, &first, "memoryPeakBytes");
	if (res->memory_peak_bytes >= 0)
		moat_buf_appendf(&b, "%" PRId64, res->memory_peak_bytes);
	else
		moat_buf_append(&b, "null", 4);
	put_key(&b, &first, "cpuTimeMs");
	if (res->cpu_time_ms >= 0)
		moat_buf_appendf(&b, "%" PRId64, res->cpu_time_ms);
	else
		moat_buf_append(&b, "null", 4);
	put_key(&b, &first, "stdoutTruncated");
	put_bool(&b, res->stdout_truncated);
	put_key(&b, &first, "stderrTruncated");
	put_bool(&b, res->stderr_truncated);
	put_key(&b, &first, "limits");
	moat_buf_append(&b, "{\"memory\":", 10);
	put_str(&b, res->limit_memory ? res->limit_memory : "none");
	moat_buf_append(&b, ",\"pids\":", 8);
	put_str(&b, res->limit_pids ? res->limit_pids : "none");
	moat_buf_append(&b, ",\"cpu\":", 7);
	put_str(&b, res->limit_cpu ? res->limit_cpu : "none");
	moat_buf_append(&b, "}", 1);
	put_key(&b, &first, "warnings");
	moat_buf_append(&b, "[", 1);
	bool wfirst = true;
	for (size_t i = 0; i < res->warnings_count; i++) {
		if (!res->warnings || !res->warnings[i])
			continue;
		if (!wfirst)
			moat_buf_append(&b, ",", 1);
		wfirst = false;
		moat_buf_append_json_string(&b, res->warnings[i], strlen(res->warnings[i]));
	}
	moat_buf_append(&b, "]", 1);
	/* module-rendered members, each a complete JSON value */
	if (res->network_json) {
		put_key(&b, &first, "network");
		moat_buf_append(&b, res->network_json, strlen(res->network_json));
	}
	if (res->files_json) {
		put_key(&b, &first, "files");
		moat_buf_append(&b, res->files_json, strlen(res->files_json));
	}
	if (res->seccomp_json) {
		put_key(&b, &first, "seccomp");
		moat_buf_append(&b, res->seccomp_json, strlen(res->seccomp_json));
	}
	if (res->pooled) { /* only then: a cold result is unchanged */
		put_key(&b, &first, "pool");
		moat_buf_append(&b, "true", 4);
	}
	moat_buf_append(&b, "}", 1);
	return moat_buf_take(&b);
}
