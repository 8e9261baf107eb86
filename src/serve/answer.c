/* `moat serve`: a finished run answered whole, in the connection's thread
 * (a Spin script's result, /v1/run's, a session step's), its output fitted
 * to the cap. */
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "serve/http.h"

void srv_put_key_str(struct moat_buf *b, const char *key, const char *s, size_t len)
{
	moat_buf_appendf(b, ",\"%s\":", key);
	if (s)
		moat_buf_append_json_string(b, s, len);
	else
		moat_buf_append(b, "null", 4);
}

/* A captured stream cut so that its JSON string stays within max bytes
 * (a control byte is escaped six-fold): the answer's size is bounded by
 * the cap, not six times it. */
static void fit_output(const char *buf, size_t *len, bool *truncated, uint64_t max)
{
	size_t n = moat_json_string_fit(buf, *len, max > SIZE_MAX ? SIZE_MAX : (size_t)max, NULL);
	if (n < *len) {
		*len = n;
		*truncated = true;
	}
}

void srv_fit_result(struct moat_result *res, const struct moat_request *req)
{
	uint64_t cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	fit_output(res->stdout_buf, &res->stdout_len, &res->stdout_truncated, cap);
	fit_output(res->stderr_buf, &res->stderr_len, &res->stderr_truncated, cap);
}

/* The Spin script result, with moat's extra fields. */
static char *script_json(const struct moat_result *res, const struct moat_request *req)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"stdout\":", 10);
	moat_buf_append_json_string(&b, res->stdout_buf ? res->stdout_buf : "", res->stdout_len);
	srv_put_key_str(&b, "stderr", res->stderr_buf ? res->stderr_buf : "", res->stderr_len);
	char *e = serve_script_error(res, req);
	srv_put_key_str(&b, "error", e, e ? strlen(e) : 0);
	free(e);
	moat_buf_appendf(&b, ",\"stdoutTruncated\":%s,\"stderrTruncated\":%s,\"exitCode\":",
			 res->stdout_truncated ? "true" : "false",
			 res->stderr_truncated ? "true" : "false");
	if (res->exited)
		moat_buf_appendf(&b, "%d", res->exit_code);
	else
		moat_buf_append(&b, "null", 4);
	moat_buf_appendf(&b, ",\"timedOut\":%s", res->timed_out ? "true" : "false");
	srv_put_key_str(&b, "killedBy", res->killed_by, res->killed_by ? strlen(res->killed_by) : 0);
	moat_buf_appendf(&b, ",\"durationMs\":%llu,\"limits\":{\"memory\":\"%s\",\"pids\":\"%s\","
			     "\"cpu\":\"%s\"},\"warnings\":[",
			 (unsigned long long)res->duration_ms,
			 res->limit_memory ? res->limit_memory : "none",
			 res->limit_pids ? res->limit_pids : "none",
			 res->limit_cpu ? res->limit_cpu : "none");
	for (size_t i = 0; i < res->warnings_count; i++) {
		if (i)
			moat_buf_append(&b, ",", 1);
		moat_buf_append_json_string(&b, res->warnings[i], strlen(res->warnings[i]));
	}
	moat_buf_append(&b, "]}\n", 3);
	return moat_buf_take(&b);
}

/* A step's answer: json (a result object, or an NDJSON result line) with
 * the keys of extra (the driver's "error", "value", "display"...) and the
 * "session" after the step; malloc'd, '\n'-terminated, NULL on OOM. */
char *srv_session_answer(struct req *q, const char *json, const char *extra)
{
	size_t n = strlen(json);
	while (n && (json[n - 1] == '\n' || json[n - 1] == ' '))
		n--;
	if (!n || json[n - 1] != '}')
		return NULL;
	struct moat_buf b = { 0 };
	moat_buf_append(&b, json, n - 1);
	const char *e = extra ? strchr(extra, '{') : NULL;
	const char *end = e ? strrchr(e, '}') : NULL;
	if (e && end) {
		const char *in = e + 1;
		while (in < end && (*in == ' ' || *in == '\n' || *in == '\t' || *in == '\r'))
			in++;
		if (in < end) {
			moat_buf_append(&b, ",", 1);
			moat_buf_append(&b, in, (size_t)(end - in));
		}
	}
	moat_buf_append(&b, ",\"session\":", 11);
	serve_session_json(q->s->sessions, q->ses, &b, false);
	moat_buf_append(&b, "}\n", 2);
	return moat_buf_take(&b);
}

/* A finished run's 200 (body taken; NULL: out of memory), its outcome kept. */
enum MHD_Result srv_respond_run(struct req *q, struct MHD_Connection *c, char *body)
{
	if (!body)
		return MHD_NO;
	enum serve_outcome keep = q->outcome;
	enum MHD_Result r = srv_respond(q, c, 200, body, "application/json", NULL, NULL);
	q->outcome = keep;
	return r;
}

enum MHD_Result srv_run_script(struct req *q, struct MHD_Connection *c,
			       const struct moat_request *req, bool v1)
{
	if (!srv_reserve_result(q, req)) /* admitted, but its answer would not fit */
		return srv_refuse_result(q, c);
	struct moat_run_options opts;
	srv_run_options(q, &opts);
	struct moat_result *res = NULL;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	int rc = serve_pool_run(q->s->pool, req, &opts, &q->lease, &res, &err);
	/* the slot and the sandbox stay until the answer is out (srv_on_completed) */
	q->lease_rc = rc;
	q->has_lease = true;
	if (rc < 0)
		return srv_fail_moat(q, c, &err);
	q->outcome = serve_run_outcome(res);
	srv_fit_result(res, req);
	char *body = v1 ? moat_result_to_json(res) : script_json(res, req);
	moat_result_free(res);
	return srv_respond_run(q, c, body);
}
