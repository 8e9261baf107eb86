/* The Spin envelope: {"code", "sandboxId", "allowedHosts", "kvEnabled",
 * "input"} → a moat request, and the handler bootstrap (SERVE.md). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve/internal.h"

#define PY_BOOTSTRAP "from moat_handler import main\nmain()\n"
#define TS_BOOTSTRAP                                                    \
	"import { serve } from \"/opt/moat/runtime/js/handler.mjs\";\n" \
	"import h from \"./handler.ts\";\n"                            \
	"await serve(h);\n"
#define PY_PATH "/opt/moat/runtime/python"

static int bad(struct moat_error *err, const char *msg)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, 0, "%s", msg);
}

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A line that starts (column 0) with "def handle_request(" or
 * "async def handle_request(". */
static bool py_defines_handler(const char *code, size_t len)
{
	static const char *const forms[] = { "def handle_request", "async def handle_request" };
	for (size_t i = 0; i < len; i++) {
		if (i > 0 && code[i - 1] != '\n')
			continue;
		for (size_t f = 0; f < 2; f++) {
			size_t fl = strlen(forms[f]);
			if (len - i < fl || memcmp(code + i, forms[f], fl))
				continue;
			size_t k = i + fl;
			while (k < len && (code[k] == ' ' || code[k] == '\t'))
				k++;
			if (k < len && code[k] == '(')
				return true;
		}
	}
	return false;
}

/* "export default" as two tokens (any blank between them). */
static bool js_exports_default(const char *code, size_t len)
{
	for (size_t i = 0; i + 6 <= len; i++) {
		if (memcmp(code + i, "export", 6) || (i > 0 && (isalnum((unsigned char)code[i - 1]) ||
								code[i - 1] == '_' || code[i - 1] == '$')))
			continue;
		size_t k = i + 6;
		size_t blanks = 0;
		while (k < len && isspace((unsigned char)code[k]))
			k++, blanks++;
		if (blanks && len - k >= 7 && !memcmp(code + k, "default", 7) &&
		    (k + 7 == len || !(isalnum((unsigned char)code[k + 7]) || code[k + 7] == '_')))
			return true;
	}
	return false;
}

bool serve_is_handler(const char *code, size_t len, enum moat_language lang)
{
	if (lang == MOAT_LANG_PYTHON)
		return py_defines_handler(code, len);
	return js_exports_default(code, len);
}

void serve_envelope_free(struct serve_envelope *env)
{
	moat_request_free(env->req);
	free(env->input.method);
	free(env->input.path);
	free(env->input.body);
	for (size_t i = 0; i < env->input.headers_count * 2; i++)
		free(env->input.headers[i]);
	free(env->input.headers);
	memset(env, 0, sizeof *env);
}

/* An HTTP token (RFC 9110): a method or a header name. */
static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
			return false;
	return true;
}

static bool printable_value(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return false;
	return true;
}

static int parse_input(const cJSON *in, struct serve_input *out, struct moat_error *err)
{
	if (!cJSON_IsObject(in))
		return bad(err, "\"input\" must be an object");
	for (const cJSON *it = in->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		for (const cJSON *o = in->child; o != it; o = o->next)
			if (o->string && !strcmp(o->string, k))
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "duplicate key \"input.%.64s\"", k);
		if (!strcmp(k, "method") || !strcmp(k, "path") || !strcmp(k, "body")) {
			if (!cJSON_IsString(it))
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "\"input.%s\" must be a string", k);
		} else if (!strcmp(k, "headers")) {
			if (!cJSON_IsObject(it))
				return bad(err, "\"input.headers\" must be an object of strings");
		} else {
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "unknown key \"input.%.64s\" (known: method, path, "
					      "headers, body)", k);
		}
	}
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(in, "method");
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "path");
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(in, "body");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(in, "headers");
	if (m) {
		if (!is_token(m->valuestring) || strlen(m->valuestring) > 32)
			return bad(err, "\"input.method\" must be an HTTP method (a token)");
		if (!(out->method = strdup(m->valuestring)))
			goto oom;
	}
	if (p) {
		const char *s = p->valuestring;
		if (s[0] != '/' || strlen(s) > 8192)
			return bad(err, "\"input.path\" must start with '/' (at most 8192 bytes)");
		for (const char *c = s; *c; c++)
			if ((unsigned char)*c <= 0x20 || *c == 0x7f)
				return bad(err, "\"input.path\" must not hold spaces or control "
						"characters (percent-encode them)");
		if (!(out->path = strdup(s)))
			goto oom;
	}
	if (b) {
		out->body_len = strlen(b->valuestring);
		if (!(out->body = strdup(b->valuestring)))
			goto oom;
	}
	if (h) {
		size_t n = (size_t)cJSON_GetArraySize(h);
		if (n > SERVE_MAX_HANDLER_HEADERS)
			return bad(err, "\"input.headers\": too many headers (at most 100)");
		if (n && !(out->headers = calloc(n * 2, sizeof *out->headers)))
			goto oom;
		for (const cJSON *it = h->child; it; it = it->next) {
			if (!cJSON_IsString(it))
				return bad(err, "\"input.headers\" values must be strings");
			if (!is_token(it->string) || !printable_value(it->valuestring))
				return bad(err, "\"input.headers\": a name is not an HTTP token or a "
						"value holds control characters");
			size_t i = out->headers_count++;
			if (!(out->headers[2 * i] = strdup(it->string)) ||
			    !(out->headers[2 * i + 1] = strdup(it->valuestring)))
				goto oom;
		}
	}
	if ((!out->method && !(out->method = strdup("GET"))) ||
	    (!out->path && !(out->path = strdup("/"))) ||
	    (!out->body && !(out->body = strdup(""))))
		goto oom;
	return 0;
oom:
	return moat_error_oom(err);
}

/* The request a handler's bootstrap reads on stdin. */
static char *input_json(const struct serve_input *in)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"method\":", 10);
	moat_buf_append_json_string(&b, in->method, strlen(in->method));
	moat_buf_append(&b, ",\"url\":", 7);
	struct moat_buf url = { 0 };
	moat_buf_appendf(&url, "http://localhost%s", in->path);
	moat_buf_append_json_string(&b, url.data ? url.data : "", url.len);
	moat_buf_free(&url);
	moat_buf_append(&b, ",\"headers\":[", 12);
	for (size_t i = 0; i < in->headers_count; i++) {
		moat_buf_append(&b, i ? ",[" : "[", i ? 2 : 1);
		moat_buf_append_json_string(&b, in->headers[2 * i], strlen(in->headers[2 * i]));
		moat_buf_append(&b, ",", 1);
		moat_buf_append_json_string(&b, in->headers[2 * i + 1],
					    strlen(in->headers[2 * i + 1]));
		moat_buf_append(&b, "]", 1);
	}
	moat_buf_append(&b, "],\"body\":", 9);
	moat_buf_append_json_string(&b, in->body, in->body_len);
	moat_buf_append(&b, "}", 1);
	return moat_buf_take(&b);
}

static int set_kv(struct moat_kv **arr, size_t *count, const char *key, const char *value,
		  size_t value_len)
{
	struct moat_kv *n = realloc(*arr, (*count + 1) * sizeof *n);
	if (!n)
		return -1;
	*arr = n;
	n[*count].key = strdup(key);
	n[*count].value = malloc(value_len + 1);
	if (!n[*count].key || !n[*count].value) {
		free(n[*count].key);
		free(n[*count].value);
		return -1;
	}
	memcpy(n[*count].value, value, value_len);
	n[*count].value[value_len] = '\0';
	n[*count].value_len = value_len;
	(*count)++;
	return 0;
}

/* The handler runs under a bootstrap from the runtime mount: the user's code
 * becomes a file next to it; the request goes in on stdin. */
static int make_handler(struct serve_envelope *env, struct moat_error *err)
{
	struct moat_request *req = env->req;
	bool py = req->language == MOAT_LANG_PYTHON;
	const char *boot = py ? PY_BOOTSTRAP : TS_BOOTSTRAP;
	char *code = req->code;
	size_t code_len = req->code_len;
	req->code = strdup(boot);
	req->code_len = strlen(boot);
	int rc = -1;
	if (!req->code)
		goto out;
	if (set_kv(&req->files, &req->files_count, py ? "handler.py" : "handler.ts", code,
		   code_len) < 0)
		goto out;
	if (py && set_kv(&req->env, &req->env_count, "PYTHONPATH", PY_PATH, strlen(PY_PATH)) < 0)
		goto out;
	if (!(req->stdin_data = input_json(&env->input)))
		goto out;
	req->stdin_len = strlen(req->stdin_data);
	rc = 0;
out:
	free(code);
	if (rc < 0)
		moat_error_oom(err);
	return rc;
}

int serve_sandbox_id_header(const char *value, unsigned count, struct moat_error *err)
{
	if (count > 1)
		return bad(err, "the X-Sandbox-Id header is given more than once");
	size_t n = value ? strlen(value) : 0;
	if (!moat_sandbox_id_valid(value, n))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the X-Sandbox-Id header must be 1 to %u bytes of UTF-8 "
				      "without NUL (it has %zu bytes)",
				      MOAT_MAX_SANDBOX_ID, n);
	return 0;
}

int serve_envelope_parse(const char *body, size_t len, enum moat_language lang,
			 const char *header_id, struct serve_envelope *out, bool *too_large,
			 struct moat_error *err)
{
	memset(out, 0, sizeof *out);
	*too_large = false;
	bool nul = false;
	if (moat_json_prescan(body, len, &nul, err) < 0)
		return -1;
	if (nul)
		return bad(err, "NUL characters are not allowed in the envelope");
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
	if (!root)
		return bad(err, "malformed JSON");
	for (size_t off = end && end >= body ? (size_t)(end - body) : len; off < len; off++)
		if (body[off] != ' ' && body[off] != '\t' && body[off] != '\n' && body[off] != '\r') {
			cJSON_Delete(root);
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "unexpected data after the JSON value at byte offset %zu",
					      off);
		}
	int rc = -1;
	if (!cJSON_IsObject(root)) {
		bad(err, "the envelope must be a JSON object");
		goto out;
	}
	const cJSON *code = NULL, *sid = NULL, *hosts = NULL, *kv = NULL, *input = NULL;
	for (const cJSON *it = root->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		const cJSON **slot = !strcmp(k, "code") ? &code : !strcmp(k, "sandboxId") ? &sid
			: !strcmp(k, "allowedHosts") ? &hosts : !strcmp(k, "kvEnabled") ? &kv
			: !strcmp(k, "input") ? &input : NULL;
		if (!slot) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "unknown key \"%.64s\" (the envelope has code, sandboxId, "
				       "allowedHosts, kvEnabled, input)", k);
			goto out;
		}
		if (*slot) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0, "duplicate key \"%s\"", k);
			goto out;
		}
		*slot = it;
	}
	if (!code || !cJSON_IsString(code)) {
		bad(err, code ? "\"code\" must be a string" : "\"code\" is required");
		goto out;
	}
	if ((!sid && !header_id) || (sid && !cJSON_IsString(sid))) {
		bad(err, sid ? "\"sandboxId\" must be a string"
			     : "\"sandboxId\" is required (in the envelope or an X-Sandbox-Id "
			       "header)");
		goto out;
	}
	/* the header's id stands in for a missing "sandboxId" (it was checked
	 * the same way: serve_sandbox_id_header) */
	const char *sid_text = sid ? sid->valuestring : header_id;
	size_t code_len = strlen(code->valuestring), sid_len = strlen(sid_text);
	if (code_len > MOAT_MAX_CODE_BYTES) {
		*too_large = true;
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"code\" is %zu bytes; the limit is %u",
			       code_len, MOAT_MAX_CODE_BYTES);
		goto out;
	}
	if (sid_len == 0 || sid_len > MOAT_MAX_SANDBOX_ID) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"sandboxId\" must be 1 to %u bytes",
			       MOAT_MAX_SANDBOX_ID);
		goto out;
	}
	if (moat_sandbox_id_agree(header_id, sid_text, sid_len, "the envelope's \"sandboxId\"",
				   err) < 0)
		goto out;
	if (kv && !cJSON_IsBool(kv)) {
		bad(err, "\"kvEnabled\" must be a boolean");
		goto out;
	}
	out->kv_enabled = kv && cJSON_IsTrue(kv);
	if (hosts && !cJSON_IsArray(hosts)) {
		bad(err, "\"allowedHosts\" must be an array of strings");
		goto out;
	}
	if (input && parse_input(input, &out->input, err) < 0)
		goto out;
	if (!input) {
		out->input.method = dup_str("GET");
		out->input.path = dup_str("/");
		out->input.body = dup_str("");
		if (!out->input.method || !out->input.path || !out->input.body) {
			moat_error_oom(err);
			goto out;
		}
	}
	struct moat_request *req = out->req = moat_request_new();
	if (!req || !(req->code = strdup(code->valuestring))) {
		moat_error_oom(err);
		goto out;
	}
	req->code_len = code_len;
	req->language = lang;
	req->max_output_bytes = SERVE_SCRIPT_OUTPUT_CAP;
	/* the store is scoped to the id (docs/KV.md); moat_request_validate
	 * checks it is UTF-8 */
	if (!(req->sandbox_id = strdup(sid_text))) {
		moat_error_oom(err);
		goto out;
	}
	req->sandbox_id_len = sid_len;
	req->kv_enabled = out->kv_enabled;
	size_t nh = hosts ? (size_t)cJSON_GetArraySize(hosts) : 0;
	if (nh > MOAT_MAX_LIST_ENTRIES) {
		bad(err, "\"allowedHosts\": too many entries");
		goto out;
	}
	if (nh) { /* missing or empty: no egress at all (only lo) */
		req->has_allowed_hosts = true;
		if (!(req->allowed_hosts = calloc(nh, sizeof *req->allowed_hosts))) {
			moat_error_oom(err);
			goto out;
		}
		for (const cJSON *it = hosts->child; it; it = it->next) {
			if (!cJSON_IsString(it)) {
				bad(err, "\"allowedHosts\" entries must be strings");
				goto out;
			}
			if (!(req->allowed_hosts[req->allowed_hosts_count++] =
				      strdup(it->valuestring))) {
				moat_error_oom(err);
				goto out;
			}
		}
		/* the entries themselves: the request pipeline (spin_route's
		 * moat_request_finish), where a malformed one is the caller's
		 * input error: 400, not 403 */
	}
	out->mode = serve_is_handler(req->code, req->code_len, lang) ? SERVE_HANDLER
								      : SERVE_SCRIPT;
	if (out->mode == SERVE_HANDLER && make_handler(out, err) < 0)
		goto out;
	rc = 0;
out:
	cJSON_Delete(root);
	if (rc < 0)
		serve_envelope_free(out);
	return rc;
}
