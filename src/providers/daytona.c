/* The daytona provider: create a sandbox (REST), wait until it is started,
 * upload the code (and request files) through the toolbox, execute it with
 * the toolbox process endpoint, delete the sandbox on every path. The API key
 * comes from the config or DAYTONA_API_KEY only. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>
#include "providers/curl_dl.h"

#include "core/sys.h"
#include "providers/internal.h"

#define DAYTONA_API_URL "https://app.daytona.io/api"
#define WORKDIR "/home/daytona/moat"
#define CREATE_TIMEOUT_MS 60000u
#define START_WAIT_MS 120000u
#define UPLOAD_TIMEOUT_MS 60000u
#define DELETE_TIMEOUT_MS 15000u
#define NET_MARGIN_MS 5000u

static const char *run_command(enum moat_language l)
{
	switch (l) {
	case MOAT_LANG_PYTHON: return "python3 main.py";
	case MOAT_LANG_JAVASCRIPT: return "node main.js";
	case MOAT_LANG_TYPESCRIPT: return "npx --no-install ts-node main.ts";
	case MOAT_LANG_BASH: return "bash main.sh";
	case MOAT_LANG_SH: return "sh main.sh";
	case MOAT_LANG__COUNT: break;
	}
	return NULL;
}

static const char *daytona_language(enum moat_language l)
{
	return l == MOAT_LANG_PYTHON ? "python"
	       : l == MOAT_LANG_JAVASCRIPT ? "javascript"
	       : l == MOAT_LANG_TYPESCRIPT ? "typescript" : "python";
}

static bool id_ok(const char *id)
{
	if (!id || !*id || strlen(id) > 128)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return false;
	return true;
}

struct dctx {
	struct moat_http *h;
	const char *auth;
	const char *id;
};

static cJSON *json_request(struct dctx *d, const char *method, const char *path, cJSON *body,
			   uint64_t timeout_ms, const char *what, struct moat_http_resp *r,
			   struct moat_error *err)
{
	char *text = body ? cJSON_PrintUnformatted(body) : NULL;
	if (body && !text) {
		moat_error_oom(err);
		return NULL;
	}
	const char *headers[] = { d->auth, "Accept: application/json",
				  body ? "Content-Type: application/json" : NULL, NULL };
	int rc = moat_http_request(d->h, method, path, headers, text, text ? strlen(text) : 0,
				   timeout_ms, NULL, NULL, r, err);
	free(text);
	if (rc < 0)
		return NULL;
	if (r->timed_out)
		return NULL;
	if (r->status < 200 || r->status > 299) {
		moat_http_status_error(d->h, what, r, err);
		return NULL;
	}
	cJSON *j = cJSON_ParseWithLength(r->body.data ? r->body.data : "", r->body.len);
	if (!j)
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "daytona: %s: the response is not JSON",
			       what);
	return j;
}

static const char *state_of(const cJSON *j)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "state");
	return cJSON_IsString(s) ? s->valuestring : "";
}

static int create(struct dctx *d, const struct moat_request *req, char **id,
		  struct moat_error *err)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "language", daytona_language(req->language));
	cJSON *env = cJSON_AddObjectToObject(b, "env");
	for (size_t i = 0; env && i < req->env_count; i++)
		cJSON_AddStringToObject(env, req->env[i].key, req->env[i].value ? req->env[i].value : "");
	cJSON *labels = cJSON_AddObjectToObject(b, "labels");
	cJSON_AddStringToObject(labels, "created-by", "moat");
	cJSON_AddBoolToObject(b, "networkBlockAll", !req->network);
	cJSON_AddNumberToObject(b, "autoStopInterval", 15);
	struct moat_http_resp r;
	cJSON *j = json_request(d, "POST", "/sandbox", b, CREATE_TIMEOUT_MS, "creating the sandbox",
				&r, err);
	cJSON_Delete(b);
	bool timed_out = r.timed_out;
	moat_http_resp_free(&r);
	if (!j) {
		if (timed_out)
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, ETIMEDOUT,
				       "daytona: creating the sandbox timed out");
		return -1;
	}
	const cJSON *jid = cJSON_GetObjectItemCaseSensitive(j, "id");
	int rc = -1;
	if (!cJSON_IsString(jid) || !id_ok(jid->valuestring)) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "daytona: the create response has no valid id");
	} else if (!(*id = strdup(jid->valuestring))) {
		moat_error_oom(err);
	} else {
		d->id = *id;
		rc = 0;
		if (strcmp(state_of(j), "started")) {
			/* poll until started */
			char *path = NULL;
			int64_t end = moat_mono_ms() + START_WAIT_MS;
			rc = -1;
			if (asprintf(&path, "/sandbox/%s", *id) < 0) {
				moat_error_oom(err);
			} else {
				while (moat_mono_ms() < end) {
					struct moat_http_resp pr;
					cJSON *pj = json_request(d, "GET", path, NULL, 15000,
								 "waiting for the sandbox", &pr, err);
					moat_http_resp_free(&pr);
					if (!pj && err->type != MOAT_ERR_NONE)
						break;
					const char *st = state_of(pj);
					bool started = !strcmp(st, "started");
					bool failed = !strcmp(st, "error") || !strcmp(st, "build_failed") ||
						      !strcmp(st, "destroyed");
					cJSON_Delete(pj);
					if (started) {
						rc = 0;
						break;
					}
					if (failed) {
						moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
							       "daytona: the sandbox failed to start");
						break;
					}
					struct timespec ts = { 0, 500 * 1000000L };
					nanosleep(&ts, NULL);
				}
				if (rc < 0 && err->type == MOAT_ERR_NONE)
					moat_error_set(err, MOAT_ERR_UNAVAILABLE, ETIMEDOUT,
						       "daytona: the sandbox did not start within %u s",
						       START_WAIT_MS / 1000);
			}
			free(path);
		}
	}
	cJSON_Delete(j);
	return rc;
}

/* multipart/form-data upload of one file to WORKDIR/rel. */
static int upload(struct dctx *d, const char *rel, const char *data, size_t len,
		  struct moat_error *err)
{
	unsigned char rnd[12];
	char boundary[40];
	do {
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "getrandom failed");
		int n = snprintf(boundary, sizeof boundary, "moat");
		for (size_t i = 0; i < sizeof rnd; i++)
			n += snprintf(boundary + n, sizeof boundary - (size_t)n, "%02x", rnd[i]);
	} while (len && memmem(data, len, boundary, strlen(boundary)));
	const char *base = strrchr(rel, '/');
	base = base ? base + 1 : rel;
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
			 "filename=\"upload\"\r\nContent-Type: application/octet-stream\r\n\r\n",
			 boundary);
	moat_buf_append(&b, data, len);
	moat_buf_appendf(&b, "\r\n--%s--\r\n", boundary);
	char *full = NULL, *esc = NULL, *path = NULL, *ctype = NULL;
	int rc = -1;
	if (asprintf(&full, WORKDIR "/%s", rel) < 0)
		full = NULL;
	esc = full ? curl_easy_escape(d->h->curl, full, 0) : NULL;
	if (b.oom || !esc || asprintf(&path, "/toolbox/%s/toolbox/files/upload?path=%s", d->id, esc) < 0 ||
	    asprintf(&ctype, "Content-Type: multipart/form-data; boundary=%s", boundary) < 0) {
		moat_error_oom(err);
		goto out;
	}
	(void)base;
	const char *headers[] = { d->auth, ctype, NULL };
	struct moat_http_resp r;
	if (moat_http_request(d->h, "POST", path, headers, b.data, b.len, UPLOAD_TIMEOUT_MS, NULL,
			      NULL, &r, err) == 0) {
		if (r.timed_out)
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, ETIMEDOUT, "daytona: upload timed out");
		else if (r.status < 200 || r.status > 299)
			moat_http_status_error(d->h, "uploading the code", &r, err);
		else
			rc = 0;
		moat_http_resp_free(&r);
	}
out:
	moat_buf_free(&b);
	free(full);
	curl_free(esc);
	free(path);
	free(ctype);
	return rc;
}

static void delete_sandbox(struct dctx *d, struct moat_result *res, struct moat_error *err)
{
	char *path = NULL;
	if (asprintf(&path, "/sandbox/%s?force=true", d->id) < 0)
		return;
	const char *headers[] = { d->auth, NULL };
	struct moat_http_resp r;
	struct moat_error e = { 0 };
	int rc = moat_http_request(d->h, "DELETE", path, headers, NULL, 0, DELETE_TIMEOUT_MS, NULL,
				   NULL, &r, &e);
	bool ok = rc == 0 && !r.timed_out && ((r.status >= 200 && r.status <= 299) || r.status == 404);
	if (!ok) {
		if (res)
			(void)moat_result_warn(res, "daytona: deleting sandbox %s failed (HTTP %ld)%s%s",
					       d->id, r.status, e.message ? ": " : "",
					       e.message ? e.message : "");
		else if (err->message)
			moat_error_set(err, err->type, err->sys_errno,
				       "%s (and deleting sandbox %s failed)", err->message, d->id);
	}
	moat_error_clear(&e);
	moat_http_resp_free(&r);
	free(path);
}

int moat_daytona_run(const struct moat_request *req, const struct moat_provider_options *o,
		     struct moat_result **out, struct moat_error *err)
{
	const struct moat_config *cfg = o->cfg;
	const char *api = cfg->daytona_api_url ? cfg->daytona_api_url : DAYTONA_API_URL;
	if (moat_http_url_check(api, "daytona", err) < 0)
		return -1;
	const char *key = cfg->daytona_api_key ? cfg->daytona_api_key : getenv("DAYTONA_API_KEY");
	if (!key || !*key)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "daytona: DAYTONA_API_KEY not set (export it, or set "
				      "daytonaApiKey in the config; the environment is preferred)");
	if (strpbrk(key, "\r\n"))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "daytona: the API key has a line break");
	if (req->stdin_len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "daytona: \"stdin\" is not supported "
				      "by this provider; use native");
	const struct moat_lang_info *li = moat_lang_get(req->language);
	const char *cmd = run_command(req->language);
	if (!li || !cmd)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "invalid language");

	struct moat_http h = { 0 };
	if (moat_http_open(&h, api, key,
			   "daytona", err) < 0)
		return -1;
	int rc = -1;
	char *auth = NULL, *id = NULL, *main_name = NULL, *path = NULL;
	struct moat_result *res = NULL;
	struct dctx d = { &h, NULL, NULL };
	if (asprintf(&auth, "Authorization: Bearer %s", key) < 0) {
		auth = NULL;
		moat_error_oom(err);
		goto out;
	}
	d.auth = auth;
	int64_t t0 = moat_mono_ms();
	if (create(&d, req, &id, err) < 0) {
		if (!d.id)
			goto out; /* nothing was created */
		goto del;
	}
	if (asprintf(&main_name, "main.%s", li->ext) < 0 || !(res = moat_result_new())) {
		moat_error_oom(err);
		goto del;
	}
	if (upload(&d, main_name, req->code, req->code_len, err) < 0)
		goto del;
	for (size_t i = 0; i < req->files_count; i++)
		if (upload(&d, req->files[i].key, req->files[i].value ? req->files[i].value : "",
			   req->files[i].value_len, err) < 0)
			goto del;
	if (asprintf(&path, "/toolbox/%s/toolbox/process/execute", id) < 0) {
		moat_error_oom(err);
		goto del;
	}
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "command", cmd);
	cJSON_AddStringToObject(b, "cwd", WORKDIR);
	cJSON_AddNumberToObject(b, "timeout", (double)((req->timeout_ms + 999) / 1000));
	struct moat_http_resp r;
	int64_t te = moat_mono_ms();
	cJSON *j = json_request(&d, "POST", path, b, req->timeout_ms + NET_MARGIN_MS,
				"running the code", &r, err);
	cJSON_Delete(b);
	bool timed_out = r.timed_out;
	moat_http_resp_free(&r);
	uint64_t ran = (uint64_t)(moat_mono_ms() - te);
	res->duration_ms = (uint64_t)(moat_mono_ms() - t0);
	res->limit_memory = res->limit_pids = res->limit_cpu = "none";
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "exitCode");
	const cJSON *out_text = cJSON_GetObjectItemCaseSensitive(j, "result");
	if (!j && !timed_out) {
		goto del;
	} else if (timed_out || (cJSON_IsNumber(code) && code->valueint < 0 && ran >= req->timeout_ms)) {
		res->timed_out = true;
		res->killed_by = "timeout";
		res->signal = SIGKILL;
	} else if (!cJSON_IsNumber(code)) {
		cJSON_Delete(j);
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "daytona: the execute response has no exitCode");
		goto del;
	} else {
		res->exited = true;
		res->exit_code = code->valueint;
	}
	if (cJSON_IsString(out_text)) /* daytona merges stdout and stderr */
		moat_prov_output(res, o, MOAT_STDOUT, out_text->valuestring,
				 strlen(out_text->valuestring),
				 req->max_output_bytes ? req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP);
	cJSON_Delete(j);
	if (req->memory_mb || req->cpus > 0 || req->pids_limit)
		(void)moat_result_warn(res, "daytona: memoryMb, cpus and pidsLimit are not applied by "
				       "this provider");
	rc = 0;
del:
	delete_sandbox(&d, rc == 0 ? res : NULL, err);
	if (rc == 0) {
		*out = res;
		res = NULL;
	}
out:
	moat_http_close(&h);
	moat_result_free(res);
	if (auth)
		explicit_bzero(auth, strlen(auth));
	free(auth);
	free(id);
	free(main_name);
	free(path);
	return rc;
}
