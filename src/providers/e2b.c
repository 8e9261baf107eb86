/* The e2b provider: create a sandbox from a template (REST), run the code
 * through the code interpreter's /execute endpoint (NDJSON stream of
 * stdout / stderr / error / end_of_execution), delete the sandbox on every
 * path. The API key comes from the config or E2B_API_KEY only. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/sys.h"
#include "providers/internal.h"

#define E2B_API_URL "https://api.e2b.dev"
#define E2B_SANDBOX_URL "https://49999-{sandboxId}.e2b.app"
#define E2B_TEMPLATE "code-interpreter-v1"
#define CREATE_TIMEOUT_MS 60000u
#define DELETE_TIMEOUT_MS 15000u
#define LIFETIME_MARGIN_S 60u
#define MAX_LINE_BYTES (8u * 1024u * 1024u)

static const char *e2b_language(enum moat_language l)
{
	switch (l) {
	case MOAT_LANG_PYTHON: return "python";
	case MOAT_LANG_JAVASCRIPT: return "js";
	case MOAT_LANG_TYPESCRIPT: return "ts";
	case MOAT_LANG_BASH:
	case MOAT_LANG_SH: return "bash";
	case MOAT_LANG__COUNT: break;
	}
	return NULL;
}

/* Sandbox ids go into URLs: [A-Za-z0-9-]{1,128} only. */
static bool id_ok(const char *id)
{
	if (!id || !*id || strlen(id) > 128)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return true;
}

static char *replace_id(const char *tmpl, const char *id)
{
	struct moat_buf b = { 0 };
	const char *hit = strstr(tmpl, "{sandboxId}");
	if (!hit) {
		moat_buf_append(&b, tmpl, strlen(tmpl));
	} else {
		moat_buf_append(&b, tmpl, (size_t)(hit - tmpl));
		moat_buf_append(&b, id, strlen(id));
		moat_buf_append(&b, hit + 11, strlen(hit + 11));
	}
	return moat_buf_take(&b);
}

struct stream_state {
	struct moat_result *res;
	const struct moat_provider_options *o;
	size_t cap;
	struct moat_buf line;
	bool ended, error, bad;
};

static void handle_line(struct stream_state *s, const char *line, size_t len)
{
	if (len == 0)
		return;
	cJSON *j = cJSON_ParseWithLength(line, len);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
	if (!cJSON_IsString(type)) {
		s->bad = true;
		cJSON_Delete(j);
		return;
	}
	const char *t = type->valuestring;
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
	if (!strcmp(t, "stdout") || !strcmp(t, "stderr")) {
		if (cJSON_IsString(text))
			moat_prov_output(s->res, s->o, t[3] == 'o' ? MOAT_STDOUT : MOAT_STDERR,
					 text->valuestring, strlen(text->valuestring), s->cap);
	} else if (!strcmp(t, "error")) {
		s->error = true;
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(j, "value");
		const cJSON *tb = cJSON_GetObjectItemCaseSensitive(j, "traceback");
		struct moat_buf b = { 0 };
		if (cJSON_IsString(tb) && *tb->valuestring) {
			moat_buf_append(&b, tb->valuestring, strlen(tb->valuestring));
		} else {
			if (cJSON_IsString(name))
				moat_buf_appendf(&b, "%s: ", name->valuestring);
			if (cJSON_IsString(value))
				moat_buf_append(&b, value->valuestring, strlen(value->valuestring));
		}
		moat_buf_append(&b, "\n", 1);
		if (!b.oom)
			moat_prov_output(s->res, s->o, MOAT_STDERR, b.data, b.len, s->cap);
		moat_buf_free(&b);
	} else if (!strcmp(t, "end_of_execution") || !strcmp(t, "end")) {
		s->ended = true;
	}
	cJSON_Delete(j);
}

static bool on_data(void *ctx, const char *p, size_t n)
{
	struct stream_state *s = ctx;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			handle_line(s, s->line.data ? s->line.data : "", s->line.len);
			s->line.len = 0;
			continue;
		}
		moat_buf_append(&s->line, p + i, 1);
		if (s->line.oom || s->line.len > MAX_LINE_BYTES) {
			s->bad = true;
			return false;
		}
	}
	return true;
}

static int create_sandbox(struct moat_http *api, const char *key_header, const char *tmpl,
			  const struct moat_request *req, char **id, char **token,
			  struct moat_error *err)
{
	cJSON *body = cJSON_CreateObject();
	cJSON_AddStringToObject(body, "templateID", tmpl);
	cJSON_AddNumberToObject(body, "timeout",
				(double)(req->timeout_ms / 1000 + LIFETIME_MARGIN_S));
	cJSON_AddBoolToObject(body, "allow_internet_access", req->network);
	char *text = cJSON_PrintUnformatted(body);
	cJSON_Delete(body);
	if (!text)
		return moat_error_oom(err);
	const char *headers[] = { key_header, "Content-Type: application/json",
				  "Accept: application/json", NULL };
	struct moat_http_resp r;
	int rc = moat_http_request(api, "POST", "/sandboxes", headers, text, strlen(text),
				   CREATE_TIMEOUT_MS, NULL, NULL, &r, err);
	free(text);
	if (rc < 0)
		return -1;
	rc = -1;
	cJSON *j = NULL;
	if (r.timed_out) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ETIMEDOUT,
			       "e2b: creating the sandbox timed out");
		goto out;
	}
	if (r.status != 200 && r.status != 201) {
		moat_http_status_error(api, "creating the sandbox", &r, err);
		goto out;
	}
	j = cJSON_ParseWithLength(r.body.data ? r.body.data : "", r.body.len);
	const cJSON *sid = cJSON_GetObjectItemCaseSensitive(j, "sandboxID");
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(j, "envdAccessToken");
	if (!cJSON_IsString(sid) || !id_ok(sid->valuestring)) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			       "e2b: the create response has no valid sandboxID");
		goto out;
	}
	*id = strdup(sid->valuestring);
	if (cJSON_IsString(tok) && *tok->valuestring && !strpbrk(tok->valuestring, "\r\n"))
		*token = strdup(tok->valuestring);
	if (!*id) {
		moat_error_oom(err);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(j);
	moat_http_resp_free(&r);
	return rc;
}

static void delete_sandbox(struct moat_http *api, const char *key_header, const char *id,
			   struct moat_result *res, struct moat_error *err_if_no_res)
{
	char *path = NULL;
	if (asprintf(&path, "/sandboxes/%s", id) < 0)
		return;
	const char *headers[] = { key_header, NULL };
	struct moat_http_resp r;
	struct moat_error e = { 0 };
	int rc = moat_http_request(api, "DELETE", path, headers, NULL, 0, DELETE_TIMEOUT_MS, NULL,
				   NULL, &r, &e);
	bool ok = rc == 0 && !r.timed_out && (r.status == 204 || r.status == 200 || r.status == 404);
	if (!ok) {
		const char *why = rc < 0 && e.message ? e.message : r.timed_out ? "timed out" : "";
		if (res)
			(void)moat_result_warn(res, "e2b: deleting sandbox %s failed (HTTP %ld) %s; "
					       "it expires by itself within %u s", id, r.status, why,
					       LIFETIME_MARGIN_S);
		else if (err_if_no_res && err_if_no_res->message)
			moat_error_set(err_if_no_res, err_if_no_res->type, err_if_no_res->sys_errno,
				       "%s (and deleting sandbox %s failed)", err_if_no_res->message, id);
	}
	moat_error_clear(&e);
	moat_http_resp_free(&r);
	free(path);
}

int moat_e2b_run(const struct moat_request *req, const struct moat_provider_options *o,
		 struct moat_result **out, struct moat_error *err)
{
	const struct moat_config *cfg = o->cfg;
	const char *key = cfg->e2b_api_key ? cfg->e2b_api_key : getenv("E2B_API_KEY");
	if (!key || !*key)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "e2b: E2B_API_KEY not set (export it, or set e2bApiKey in "
				      "the config; the environment is preferred)");
	if (strpbrk(key, "\r\n"))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "e2b: the API key has a line break");
	if (req->files_count || req->stdin_len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "e2b: \"files\" and \"stdin\" are not "
				      "supported by this provider; use native");
	const char *lang = e2b_language(req->language);
	if (!lang)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "invalid language");

	int rc = -1;
	struct moat_http api = { 0 }, sbx = { 0 };
	char *key_header = NULL, *tok_header = NULL, *id = NULL, *token = NULL, *url = NULL;
	char *id_header = NULL, *body = NULL;
	struct moat_result *res = NULL;
	struct stream_state st = { 0 };
	if (moat_http_open(&api, cfg->e2b_api_url ? cfg->e2b_api_url : E2B_API_URL, key, "e2b",
			   err) < 0)
		return -1;
	if (asprintf(&key_header, "X-API-Key: %s", key) < 0) {
		key_header = NULL;
		moat_error_oom(err);
		goto out;
	}
	int64_t t0 = moat_mono_ms();
	if (create_sandbox(&api, key_header, cfg->e2b_template ? cfg->e2b_template : E2B_TEMPLATE,
			   req, &id, &token, err) < 0)
		goto out;
	/* from here on the sandbox exists: every path deletes it */
	res = moat_result_new();
	url = replace_id(cfg->e2b_sandbox_url ? cfg->e2b_sandbox_url : E2B_SANDBOX_URL, id);
	if (!res || !url || asprintf(&id_header, "E2b-Sandbox-Id: %s", id) < 0 ||
	    (token && asprintf(&tok_header, "X-Access-Token: %s", token) < 0)) {
		moat_error_oom(err);
		goto del;
	}
	if (moat_http_open(&sbx, url, token ? token : key, "e2b", err) < 0)
		goto del;
	cJSON *jb = cJSON_CreateObject();
	cJSON_AddStringToObject(jb, "code", req->code);
	cJSON_AddStringToObject(jb, "language", lang);
	cJSON *env = cJSON_AddObjectToObject(jb, "env_vars");
	for (size_t i = 0; env && i < req->env_count; i++)
		cJSON_AddStringToObject(env, req->env[i].key, req->env[i].value ? req->env[i].value : "");
	body = cJSON_PrintUnformatted(jb);
	cJSON_Delete(jb);
	if (!body) {
		moat_error_oom(err);
		goto del;
	}
	st.res = res;
	st.o = o;
	st.cap = req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	const char *headers[] = { "Content-Type: application/json", "Accept: application/x-ndjson",
				  id_header, tok_header, NULL };
	struct moat_http_resp r;
	if (moat_http_request(&sbx, "POST", "/execute", headers, body, strlen(body),
			      req->timeout_ms, on_data, &st, &r, err) < 0)
		goto del;
	if (st.line.len && !st.bad)
		handle_line(&st, st.line.data, st.line.len); /* last line without '\n' */
	res->duration_ms = (uint64_t)(moat_mono_ms() - t0);
	res->limit_memory = res->limit_pids = res->limit_cpu = "none";
	if (r.timed_out) {
		res->timed_out = true;
		res->killed_by = "timeout";
		res->signal = SIGKILL;
	} else if (r.status != 200) {
		moat_http_status_error(&sbx, "running the code", &r, err);
		moat_http_resp_free(&r);
		goto del;
	} else if (st.bad || !st.ended) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "e2b: the execution stream %s",
			       st.bad ? "was malformed" : "ended without end_of_execution");
		moat_http_resp_free(&r);
		goto del;
	} else {
		res->exited = true;
		res->exit_code = st.error ? 1 : 0;
	}
	moat_http_resp_free(&r);
	if (req->memory_mb || req->cpus > 0 || req->pids_limit)
		(void)moat_result_warn(res, "e2b: memoryMb, cpus and pidsLimit are not applied by "
				       "this provider (the template decides)");
	rc = 0;
del:
	delete_sandbox(&api, key_header, id, rc == 0 ? res : NULL, err);
	if (rc == 0) {
		*out = res;
		res = NULL;
	}
out:
	moat_http_close(&api);
	moat_http_close(&sbx);
	moat_buf_free(&st.line);
	moat_result_free(res);
	if (key_header)
		explicit_bzero(key_header, strlen(key_header));
	if (tok_header)
		explicit_bzero(tok_header, strlen(tok_header));
	free(key_header);
	free(tok_header);
	free(token);
	free(id);
	free(id_header);
	free(url);
	free(body);
	return rc;
}
