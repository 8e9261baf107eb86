/* Unit tests: the pure logic of `moat serve` (src/serve): the Spin envelope,
 * handler detection, the handler frame parser, the operator limits, the
 * script error line and the metrics. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "net/internal.h"
#include "serve/internal.h"
#include "fixture.h"
#include "suites.h"

/* ---- the envelope ---- */

/* Parses an exact-size heap copy (no NUL after it), so ASan sees any
 * over-read, then finishes the request as spin_route does (the request
 * pipeline: a refused allowedHosts entry is the envelope's input error). */
static int parse_env(const char *body, size_t len, enum moat_language lang,
		     struct serve_envelope *env, bool *too_large, struct moat_error *err)
{
	char *b = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(b);
	memcpy(b, body, len);
	int rc = serve_envelope_parse(b, len, lang, NULL, env, too_large, err);
	free(b);
	struct moat_request_defaults d = { .entry_refusal_is_config = true };
	if (rc == 0 && moat_request_finish(env->req, 0, &d, err) < 0) {
		serve_envelope_free(env);
		rc = -1;
	}
	return rc;
}

static void env_ok(const char *body, enum moat_language lang, struct serve_envelope *env)
{
	struct moat_error err = { 0 };
	bool too_large = true;
	int rc = parse_env(body, strlen(body), lang, env, &too_large, &err);
	ck_assert_msg(rc == 0, "%s: %s", body, err.message ? err.message : "");
	ck_assert(!too_large);
	ck_assert_ptr_null(err.message);
	ck_assert_ptr_nonnull(env->req);
}

/* An envelope refused with a SandboxConfigError whose message holds substr
 * (NULL: any message); not too large. */
static void env_bad(const char *body, enum moat_language lang, const char *substr)
{
	struct serve_envelope env;
	struct moat_error err = { 0 };
	bool too_large = true;
	ck_assert_msg(parse_env(body, strlen(body), lang, &env, &too_large, &err) == -1,
		      "accepted %s", body);
	ck_assert_msg(err.type == MOAT_ERR_CONFIG, "%s: type %d (%s)", body, (int)err.type,
		      err.message);
	ck_assert_ptr_nonnull(err.message);
	ck_assert_msg(!too_large, "%s: too_large", body);
	if (substr)
		ck_assert_msg(strstr(err.message, substr), "%s: \"%s\" lacks \"%s\"", body,
			      err.message, substr);
	ck_assert_ptr_null(env.req); /* freed and cleared */
	ck_assert_ptr_null(env.input.method);
	moat_error_clear(&err);
}

START_TEST(envelope_seed)
{
	struct serve_envelope env;
	env_ok("{\"code\":\"print(6 * 7)\",\"sandboxId\":\"demo\"}", MOAT_LANG_PYTHON, &env);
	ck_assert_int_eq(env.mode, SERVE_SCRIPT);
	ck_assert(!env.kv_enabled);
	struct moat_request *r = env.req;
	ck_assert_int_eq(r->language, MOAT_LANG_PYTHON);
	ck_assert_str_eq(r->code, "print(6 * 7)");
	ck_assert_uint_eq(r->code_len, 12);
	ck_assert_uint_eq(r->max_output_bytes, 262144);
	ck_assert(!r->has_allowed_hosts);
	ck_assert_uint_eq(r->allowed_hosts_count, 0);
	ck_assert(!r->network);
	ck_assert_uint_eq(r->files_count, 0);
	ck_assert_uint_eq(r->env_count, 0);
	ck_assert_ptr_null(r->stdin_data);
	ck_assert_str_eq(env.input.method, "GET");
	ck_assert_str_eq(env.input.path, "/");
	ck_assert_str_eq(env.input.body, "");
	ck_assert_uint_eq(env.input.body_len, 0);
	ck_assert_uint_eq(env.input.headers_count, 0);
	serve_envelope_free(&env);
	ck_assert_ptr_null(env.req);

	/* whitespace around it, and TypeScript */
	env_ok(" \n{ \"sandboxId\" : \"x\" , \"code\" : \"console.log(1)\" }\n", MOAT_LANG_TYPESCRIPT,
	       &env);
	ck_assert_int_eq(env.mode, SERVE_SCRIPT);
	ck_assert_int_eq(env.req->language, MOAT_LANG_TYPESCRIPT);
	ck_assert_str_eq(env.req->code, "console.log(1)");
	serve_envelope_free(&env);

	/* a string with escapes is decoded */
	env_ok("{\"code\":\"print(\\\"\\u00e9\\\")\\n\",\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, &env);
	ck_assert_str_eq(env.req->code, "print(\"\xc3\xa9\")\n");
	ck_assert_uint_eq(env.req->code_len, strlen("print(\"\xc3\xa9\")\n"));
	serve_envelope_free(&env);
}
END_TEST

START_TEST(envelope_required_and_types)
{
	env_bad("{\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, "\"code\" is required");
	env_bad("{\"code\":\"x\"}", MOAT_LANG_PYTHON, "\"sandboxId\" is required");
	env_bad("{}", MOAT_LANG_PYTHON, "required");
	env_bad("{\"code\":1,\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, "\"code\" must be a string");
	env_bad("{\"code\":null,\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, "\"code\"");
	env_bad("{\"code\":[\"x\"],\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, "\"code\"");
	env_bad("{\"code\":\"x\",\"sandboxId\":5}", MOAT_LANG_PYTHON,
		"\"sandboxId\" must be a string");
	env_bad("{\"code\":\"x\",\"sandboxId\":{}}", MOAT_LANG_PYTHON, "\"sandboxId\"");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"\"}", MOAT_LANG_PYTHON, "1 to 256");

	/* sandboxId: 256 bytes fine, 257 not */
	char body[600];
	char id[300];
	memset(id, 's', 257);
	id[256] = '\0';
	snprintf(body, sizeof body, "{\"code\":\"x\",\"sandboxId\":\"%s\"}", id);
	struct serve_envelope env;
	env_ok(body, MOAT_LANG_PYTHON, &env);
	serve_envelope_free(&env);
	id[256] = 's';
	id[257] = '\0';
	snprintf(body, sizeof body, "{\"code\":\"x\",\"sandboxId\":\"%s\"}", id);
	env_bad(body, MOAT_LANG_PYTHON, "1 to 256");

	/* keys */
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"language\":\"python\"}", MOAT_LANG_PYTHON,
		"unknown key \"language\"");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"Code\":\"y\"}", MOAT_LANG_PYTHON,
		"unknown key");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"timeout\":5}", MOAT_LANG_PYTHON,
		"unknown key");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"code\":\"y\"}", MOAT_LANG_PYTHON,
		"duplicate key \"code\"");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON,
		"duplicate key");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":false,\"kvEnabled\":false}",
		MOAT_LANG_PYTHON, "duplicate key");

	/* not an object, not JSON */
	env_bad("[]", MOAT_LANG_PYTHON, "object");
	env_bad("[{\"code\":\"x\",\"sandboxId\":\"d\"}]", MOAT_LANG_PYTHON, "object");
	env_bad("\"code\"", MOAT_LANG_PYTHON, "object");
	env_bad("42", MOAT_LANG_PYTHON, "object");
	env_bad("null", MOAT_LANG_PYTHON, "object");
	env_bad("", MOAT_LANG_PYTHON, NULL);
	env_bad("   ", MOAT_LANG_PYTHON, NULL);
	env_bad("{", MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\"", MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"x\" \"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",}", MOAT_LANG_PYTHON, NULL);
	env_bad("{code:\"x\",\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"unterminated,\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, NULL);

	/* NUL: escaped anywhere, or a raw byte */
	env_bad("{\"code\":\"a\\u0000b\",\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, "NUL");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\\u0000\"}", MOAT_LANG_PYTHON, "NUL");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"body\":\"\\u0000\"}}",
		MOAT_LANG_PYTHON, "NUL");
	static const char raw[] = "{\"code\":\"a\0b\",\"sandboxId\":\"d\"}";
	bool too_large = true;
	struct moat_error err = { 0 };
	ck_assert_int_eq(parse_env(raw, sizeof raw - 1, MOAT_LANG_PYTHON, &env, &too_large, &err),
			 -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert(!too_large);
	ck_assert_ptr_null(env.req);
	moat_error_clear(&err);

	/* a length shorter than the text: only that much is the body */
	const char *cut = "{\"code\":\"x\",\"sandboxId\":\"d\"}GARBAGE";
	ck_assert_int_eq(parse_env(cut, strlen(cut) - 7, MOAT_LANG_PYTHON, &env, &too_large, &err),
			 0);
	serve_envelope_free(&env);
	ck_assert_int_eq(parse_env(cut, 10, MOAT_LANG_PYTHON, &env, &too_large, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
}
END_TEST

/* Data after the envelope's object is malformed JSON, as it is for the
 * /v1/run request (moat_request_parse_json: "unexpected data after the
 * JSON value"). */
/* ---- the X-Sandbox-Id header (SERVE.md "Sandbox id in a header") ---- */

/* The envelope parsed with header id hid: 0 and the request's id, or -1 and
 * the message. */
static int env_with_header(const char *body, const char *hid, char **id_or_msg)
{
	struct serve_envelope env;
	struct moat_error err = { 0 };
	bool too_large = false;
	size_t len = strlen(body);
	char *b = malloc(len);
	ck_assert_ptr_nonnull(b);
	memcpy(b, body, len);
	int rc = serve_envelope_parse(b, len, MOAT_LANG_PYTHON, hid, &env, &too_large, &err);
	free(b);
	ck_assert(!too_large);
	if (rc == 0) {
		ck_assert_ptr_null(err.message);
		*id_or_msg = strndup(env.req->sandbox_id, env.req->sandbox_id_len);
		ck_assert_uint_eq(strlen(*id_or_msg), env.req->sandbox_id_len);
		serve_envelope_free(&env);
	} else {
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		*id_or_msg = strdup(err.message);
		moat_error_clear(&err);
	}
	return rc;
}

START_TEST(envelope_header_id)
{
	char *s = NULL;
	/* header only: it is the request's sandboxId */
	ck_assert_int_eq(env_with_header("{\"code\":\"x\"}", "from-header", &s), 0);
	ck_assert_str_eq(s, "from-header");
	free(s);
	/* both, the same: fine */
	ck_assert_int_eq(env_with_header("{\"code\":\"x\",\"sandboxId\":\"d\"}", "d", &s), 0);
	ck_assert_str_eq(s, "d");
	free(s);
	/* both, different (a prefix too, and only case apart): 400 */
	const char *other[] = { "e", "dd", "D", "d ", "" };
	for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
		ck_assert_int_eq(env_with_header("{\"code\":\"x\",\"sandboxId\":\"d\"}", other[i], &s),
				 -1);
		ck_assert_msg(strstr(s, "X-Sandbox-Id header and the envelope's \"sandboxId\" name "
					"different sandboxes"),
			      "%s", s);
		free(s);
	}
	/* the envelope's own checks still hold with a header */
	ck_assert_int_eq(env_with_header("{\"code\":\"x\",\"sandboxId\":5}", "d", &s), -1);
	ck_assert(strstr(s, "must be a string"));
	free(s);
	ck_assert_int_eq(env_with_header("{\"code\":\"x\",\"sandboxId\":\"\"}", "d", &s), -1);
	ck_assert(strstr(s, "1 to 256"));
	free(s);
	/* neither: the message names both places */
	ck_assert_int_eq(env_with_header("{\"code\":\"x\"}", NULL, &s), -1);
	ck_assert(strstr(s, "\"sandboxId\" is required") && strstr(s, "X-Sandbox-Id"));
	free(s);

	/* the header's own check: the envelope's rule (1..256 bytes of UTF-8) */
	struct moat_error err = { 0 };
	char id[MOAT_MAX_SANDBOX_ID + 2];
	memset(id, 'i', sizeof id - 1);
	id[MOAT_MAX_SANDBOX_ID] = 0;
	ck_assert_int_eq(serve_sandbox_id_header(id, 1, &err), 0);
	ck_assert_int_eq(serve_sandbox_id_header("d", 1, &err), 0);
	ck_assert_int_eq(serve_sandbox_id_header("\xc3\xa9t\xc3\xa9", 1, &err), 0);
	ck_assert_ptr_null(err.message);
	id[MOAT_MAX_SANDBOX_ID] = 'i';
	id[MOAT_MAX_SANDBOX_ID + 1] = 0;
	const struct {
		const char *v;
		unsigned count;
		const char *want;
	} bad_h[] = {
		{ id, 1, "1 to 256 bytes of UTF-8 without NUL (it has 257 bytes)" },
		{ "", 1, "(it has 0 bytes)" },
		{ "\xff", 1, "UTF-8" },
		{ "\xc3", 1, "UTF-8" },
		{ "d", 2, "more than once" },
	};
	for (size_t i = 0; i < sizeof bad_h / sizeof bad_h[0]; i++) {
		ck_assert_int_eq(serve_sandbox_id_header(bad_h[i].v, bad_h[i].count, &err), -1);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		ck_assert_msg(strstr(err.message, bad_h[i].want), "%zu: %s", i, err.message);
		moat_error_clear(&err);
	}
	/* agree: a missing side is no conflict, bytes must match exactly */
	ck_assert_int_eq(moat_sandbox_id_agree(NULL, "a", 1, "x", &err), 0);
	ck_assert_int_eq(moat_sandbox_id_agree("a", NULL, 0, "x", &err), 0);
	ck_assert_int_eq(moat_sandbox_id_agree("a", "a", 1, "x", &err), 0);
	ck_assert_int_eq(moat_sandbox_id_agree("a", "a\0", 2, "the path", &err), -1);
	ck_assert(strstr(err.message, "the X-Sandbox-Id header and the path name different"));
	moat_error_clear(&err);
}
END_TEST

START_TEST(envelope_trailing_data)
{
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\"}xyz", MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\"}{\"code\":\"y\",\"sandboxId\":\"e\"}",
		MOAT_LANG_PYTHON, NULL);
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\"} 1", MOAT_LANG_PYTHON, NULL);
}
END_TEST

/* A JSON body whose "code" is n bytes of 'a'. */
static char *big_code_body(size_t n, size_t *len)
{
	static const char pre[] = "{\"sandboxId\":\"d\",\"code\":\"", post[] = "\"}";
	size_t total = sizeof pre - 1 + n + sizeof post - 1;
	char *b = malloc(total);
	ck_assert_ptr_nonnull(b);
	memcpy(b, pre, sizeof pre - 1);
	memset(b + sizeof pre - 1, 'a', n);
	memcpy(b + sizeof pre - 1 + n, post, sizeof post - 1);
	*len = total;
	return b;
}

START_TEST(envelope_code_size)
{
	struct serve_envelope env;
	struct moat_error err = { 0 };
	bool too_large = true;
	size_t len;
	char *b = big_code_body(MOAT_MAX_CODE_BYTES, &len);
	ck_assert_int_eq(parse_env(b, len, MOAT_LANG_PYTHON, &env, &too_large, &err), 0);
	ck_assert(!too_large);
	ck_assert_uint_eq(env.req->code_len, MOAT_MAX_CODE_BYTES);
	serve_envelope_free(&env);
	free(b);

	b = big_code_body(MOAT_MAX_CODE_BYTES + 1, &len);
	too_large = false;
	ck_assert_int_eq(parse_env(b, len, MOAT_LANG_PYTHON, &env, &too_large, &err), -1);
	ck_assert(too_large);
	ck_assert_ptr_nonnull(err.message);
	ck_assert_ptr_null(env.req);
	moat_error_clear(&err);
	free(b);

	/* a big body that is bad for another reason is not "too large" */
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"body\":1}}", MOAT_LANG_PYTHON,
		"input.body");
}
END_TEST

START_TEST(envelope_kv)
{
	struct serve_envelope env;
	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":true}", MOAT_LANG_PYTHON, &env);
	ck_assert(env.kv_enabled);
	serve_envelope_free(&env);
	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":false}", MOAT_LANG_PYTHON, &env);
	ck_assert(!env.kv_enabled);
	serve_envelope_free(&env);
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":1}", MOAT_LANG_PYTHON,
		"kvEnabled");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":\"true\"}", MOAT_LANG_PYTHON,
		"kvEnabled");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"kvEnabled\":null}", MOAT_LANG_PYTHON,
		"kvEnabled");
}
END_TEST

START_TEST(envelope_allowed_hosts)
{
	struct serve_envelope env;
	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[\"https://api.example.com\","
	       "\"https://*.example.com\",\"http://a.com:*\",\"http://a.com:8080\"]}",
	       MOAT_LANG_PYTHON, &env);
	ck_assert(env.req->has_allowed_hosts);
	ck_assert(!env.req->network);
	ck_assert_uint_eq(env.req->allowed_hosts_count, 4);
	ck_assert_str_eq(env.req->allowed_hosts[0], "https://api.example.com");
	ck_assert_str_eq(env.req->allowed_hosts[1], "https://*.example.com");
	ck_assert_str_eq(env.req->allowed_hosts[2], "http://a.com:*");
	ck_assert_str_eq(env.req->allowed_hosts[3], "http://a.com:8080");
	serve_envelope_free(&env);

	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[]}", MOAT_LANG_PYTHON, &env);
	ck_assert(!env.req->has_allowed_hosts);
	ck_assert_uint_eq(env.req->allowed_hosts_count, 0);
	ck_assert(!env.req->network);
	serve_envelope_free(&env);

	static const char *const bad_hosts[] = {
		"\"10.0.0.0/8\"", "\"*\"", "\"https://*\"", "\"https://a.com:1-5\"",
		"\"ftp://a.com\"", "\"https://a.com/path\"", "\"\"", "\"a.com\"",
		"\"https://a.com:99999\"", "\"https://exa mple.com\"", "1", "null", "true",
		"[\"https://a.com\"]", "{}",
	};
	for (size_t i = 0; i < sizeof bad_hosts / sizeof bad_hosts[0]; i++) {
		char body[256];
		snprintf(body, sizeof body,
			 "{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[\"https://ok.example.com\","
			 "%s]}", bad_hosts[i]);
		env_bad(body, MOAT_LANG_PYTHON, NULL);
		snprintf(body, sizeof body,
			 "{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[%s]}", bad_hosts[i]);
		env_bad(body, MOAT_LANG_PYTHON, NULL);
	}
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":\"https://a.com\"}",
		MOAT_LANG_PYTHON, "allowedHosts");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":{}}", MOAT_LANG_PYTHON,
		"allowedHosts");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":null}", MOAT_LANG_PYTHON,
		"allowedHosts");
	env_bad("{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[1]}", MOAT_LANG_PYTHON,
		"strings");

	/* too many entries */
	size_t n = MOAT_MAX_LIST_ENTRIES + 1;
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"sandboxId\":\"d\",\"allowedHosts\":[");
	for (size_t i = 0; i < n; i++)
		moat_buf_appendf(&b, "%s\"https://h%zu.example.com\"", i ? "," : "", i);
	moat_buf_appendf(&b, "]}");
	char *s = moat_buf_take(&b);
	ck_assert_ptr_nonnull(s);
	env_bad(s, MOAT_LANG_PYTHON, "too many");
	free(s);
}
END_TEST

START_TEST(envelope_input)
{
	struct serve_envelope env;
	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{}}", MOAT_LANG_PYTHON, &env);
	ck_assert_str_eq(env.input.method, "GET");
	ck_assert_str_eq(env.input.path, "/");
	ck_assert_str_eq(env.input.body, "");
	ck_assert_uint_eq(env.input.headers_count, 0);
	serve_envelope_free(&env);

	env_ok("{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"method\":\"PATCH\",\"path\":"
	       "\"/a/b?c=%20d\",\"headers\":{\"X-One\":\"1\",\"accept\":\"*/*\",\"X-Tab\":\"a\\tb\"},"
	       "\"body\":\"h\\u00e9\\n\"}}", MOAT_LANG_PYTHON, &env);
	ck_assert_str_eq(env.input.method, "PATCH");
	ck_assert_str_eq(env.input.path, "/a/b?c=%20d");
	ck_assert_str_eq(env.input.body, "h\xc3\xa9\n");
	ck_assert_uint_eq(env.input.body_len, 4);
	ck_assert_uint_eq(env.input.headers_count, 3);
	ck_assert_str_eq(env.input.headers[0], "X-One");
	ck_assert_str_eq(env.input.headers[1], "1");
	ck_assert_str_eq(env.input.headers[2], "accept");
	ck_assert_str_eq(env.input.headers[3], "*/*");
	ck_assert_str_eq(env.input.headers[4], "X-Tab");
	ck_assert_str_eq(env.input.headers[5], "a\tb");
	ck_assert_int_eq(env.mode, SERVE_SCRIPT); /* a script ignores it */
	ck_assert_ptr_null(env.req->stdin_data);
	serve_envelope_free(&env);

	static const char *const bad_inputs[][2] = {
		{ "[]", "object" },
		{ "\"GET /\"", "object" },
		{ "null", "object" },
		{ "{\"method\":\"GE T\"}", "method" },
		{ "{\"method\":\"\"}", "method" },
		{ "{\"method\":\"GET\\n\"}", "method" },
		{ "{\"method\":\"G(T\"}", "method" },
		{ "{\"method\":1}", "input.method" },
		{ "{\"method\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}", "method" }, /* 33 */
		{ "{\"path\":\"a\"}", "path" },
		{ "{\"path\":\"\"}", "path" },
		{ "{\"path\":\"http://x/\"}", "path" },
		{ "{\"path\":\"/a b\"}", "path" },
		{ "{\"path\":\"/a\\tb\"}", "path" },
		{ "{\"path\":\"/a\\r\\nX: y\"}", "path" },
		{ "{\"path\":\"/\\u007f\"}", "path" },
		{ "{\"path\":[\"/\"]}", "input.path" },
		{ "{\"body\":{}}", "input.body" },
		{ "{\"headers\":[]}", "headers" },
		{ "{\"headers\":\"X: y\"}", "headers" },
		{ "{\"headers\":[[\"X\",\"y\"]]}", "headers" },
		{ "{\"headers\":{\"X\":1}}", "headers" },
		{ "{\"headers\":{\"X\":null}}", "headers" },
		{ "{\"headers\":{\"X\":\"a\\r\\nInjected: 1\"}}", "headers" },
		{ "{\"headers\":{\"X\":\"a\\nb\"}}", "headers" },
		{ "{\"headers\":{\"X\":\"a\\rb\"}}", "headers" },
		{ "{\"headers\":{\"X Y\":\"a\"}}", "headers" },
		{ "{\"headers\":{\"X:\":\"a\"}}", "headers" },
		{ "{\"headers\":{\"\":\"a\"}}", "headers" },
		{ "{\"query\":\"a=1\"}", "unknown key \"input.query\"" },
		{ "{\"Method\":\"GET\"}", "unknown key" },
	};
	for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) {
		char body[512];
		snprintf(body, sizeof body, "{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":%s}",
			 bad_inputs[i][0]);
		env_bad(body, MOAT_LANG_PYTHON, bad_inputs[i][1]);
		/* the same for a handler, which would use it */
		snprintf(body, sizeof body,
			 "{\"code\":\"def handle_request(r):\\n  pass\\n\",\"sandboxId\":\"d\","
			 "\"input\":%s}", bad_inputs[i][0]);
		env_bad(body, MOAT_LANG_PYTHON, bad_inputs[i][1]);
	}

	/* a path of 8192 bytes is fine, 8193 not; 100 headers fine, 101 not */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"path\":\"/");
	for (int i = 1; i < 8192; i++)
		moat_buf_append(&b, "p", 1);
	moat_buf_appendf(&b, "\"}}");
	char *s = moat_buf_take(&b);
	env_ok(s, MOAT_LANG_PYTHON, &env);
	ck_assert_uint_eq(strlen(env.input.path), 8192);
	serve_envelope_free(&env);
	free(s);
	moat_buf_appendf(&b, "{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"path\":\"/");
	for (int i = 1; i < 8193; i++)
		moat_buf_append(&b, "p", 1);
	moat_buf_appendf(&b, "\"}}");
	s = moat_buf_take(&b);
	env_bad(s, MOAT_LANG_PYTHON, "path");
	free(s);
	for (int n = 100; n <= 101; n++) {
		moat_buf_appendf(&b, "{\"code\":\"x\",\"sandboxId\":\"d\",\"input\":{\"headers\":{");
		for (int i = 0; i < n; i++)
			moat_buf_appendf(&b, "%s\"X-H%d\":\"%d\"", i ? "," : "", i, i);
		moat_buf_appendf(&b, "}}}");
		s = moat_buf_take(&b);
		if (n == 100) {
			env_ok(s, MOAT_LANG_PYTHON, &env);
			ck_assert_uint_eq(env.input.headers_count, 100);
			ck_assert_str_eq(env.input.headers[198], "X-H99");
			ck_assert_str_eq(env.input.headers[199], "99");
			serve_envelope_free(&env);
		} else {
			env_bad(s, MOAT_LANG_PYTHON, "headers");
		}
		free(s);
	}
}
END_TEST

/* The handler's stdin: {"method","url","headers":[[n,v]...],"body"}. */
static cJSON *stdin_json(const struct moat_request *r)
{
	ck_assert_ptr_nonnull(r->stdin_data);
	ck_assert_uint_eq(strlen(r->stdin_data), r->stdin_len);
	cJSON *j = cJSON_ParseWithLength(r->stdin_data, r->stdin_len);
	ck_assert_msg(j != NULL, "stdin is not JSON: %s", r->stdin_data);
	ck_assert(cJSON_IsObject(j));
	ck_assert_int_eq(cJSON_GetArraySize(j), 4);
	return j;
}

static const char *jstr(const cJSON *j, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
	ck_assert_msg(cJSON_IsString(it), "\"%s\" is not a string", key);
	return it->valuestring;
}

static const struct moat_kv *find_kv(const struct moat_kv *kv, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(kv[i].key, key))
			return &kv[i];
	return NULL;
}

START_TEST(envelope_python_handler)
{
	const char *code = "import json\n\ndef handle_request(req):\n    return {\"status\": 200}\n";
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":");
	moat_buf_append_json_string(&b, code, strlen(code));
	moat_buf_appendf(&b, ",\"sandboxId\":\"d\",\"input\":{\"method\":\"POST\",\"path\":"
			     "\"/x/y?z=1\",\"headers\":{\"Content-Type\":\"application/json\","
			     "\"X-Quote\":\"a\\\"b\\\\c\"},\"body\":\"{\\\"k\\\":1}\\n\\u00e9\"}}");
	char *body = moat_buf_take(&b);
	struct serve_envelope env;
	env_ok(body, MOAT_LANG_PYTHON, &env);
	free(body);
	ck_assert_int_eq(env.mode, SERVE_HANDLER);
	struct moat_request *r = env.req;
	ck_assert_int_eq(r->language, MOAT_LANG_PYTHON);
	ck_assert_str_eq(r->code, "from moat_handler import main\nmain()\n");
	ck_assert_uint_eq(r->code_len, strlen(r->code));
	ck_assert_uint_eq(r->files_count, 1);
	ck_assert_str_eq(r->files[0].key, "handler.py");
	ck_assert_str_eq(r->files[0].value, code);
	ck_assert_uint_eq(r->files[0].value_len, strlen(code));
	ck_assert_uint_eq(r->env_count, 1);
	const struct moat_kv *pp = find_kv(r->env, r->env_count, "PYTHONPATH");
	ck_assert_ptr_nonnull(pp);
	ck_assert_str_eq(pp->value, "/opt/moat/runtime/python");
	ck_assert_uint_eq(pp->value_len, strlen("/opt/moat/runtime/python"));
	ck_assert_uint_eq(r->max_output_bytes, 262144);
	ck_assert(!r->has_allowed_hosts);

	cJSON *j = stdin_json(r);
	ck_assert_str_eq(jstr(j, "method"), "POST");
	ck_assert_str_eq(jstr(j, "url"), "http://localhost/x/y?z=1");
	ck_assert_str_eq(jstr(j, "body"), "{\"k\":1}\n\xc3\xa9");
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(j, "headers");
	ck_assert(cJSON_IsArray(hs));
	ck_assert_int_eq(cJSON_GetArraySize(hs), 2);
	static const char *const want[2][2] = { { "Content-Type", "application/json" },
						{ "X-Quote", "a\"b\\c" } };
	for (int i = 0; i < 2; i++) {
		const cJSON *pair = cJSON_GetArrayItem(hs, i);
		ck_assert(cJSON_IsArray(pair));
		ck_assert_int_eq(cJSON_GetArraySize(pair), 2);
		ck_assert(cJSON_IsString(cJSON_GetArrayItem(pair, 0)));
		ck_assert(cJSON_IsString(cJSON_GetArrayItem(pair, 1)));
		ck_assert_str_eq(cJSON_GetArrayItem(pair, 0)->valuestring, want[i][0]);
		ck_assert_str_eq(cJSON_GetArrayItem(pair, 1)->valuestring, want[i][1]);
	}
	cJSON_Delete(j);
	serve_envelope_free(&env);

	/* async, blanks before '(', no input: the defaults on stdin; hosts kept */
	env_ok("{\"code\":\"import asyncio\\nasync def handle_request (req):\\n  pass\\n\","
	       "\"sandboxId\":\"d\",\"allowedHosts\":[\"https://api.example.com\"]}",
	       MOAT_LANG_PYTHON, &env);
	ck_assert_int_eq(env.mode, SERVE_HANDLER);
	ck_assert_str_eq(env.req->files[0].key, "handler.py");
	ck_assert(env.req->has_allowed_hosts);
	ck_assert_uint_eq(env.req->allowed_hosts_count, 1);
	j = stdin_json(env.req);
	ck_assert_str_eq(jstr(j, "method"), "GET");
	ck_assert_str_eq(jstr(j, "url"), "http://localhost/");
	ck_assert_str_eq(jstr(j, "body"), "");
	hs = cJSON_GetObjectItemCaseSensitive(j, "headers");
	ck_assert(cJSON_IsArray(hs));
	ck_assert_int_eq(cJSON_GetArraySize(hs), 0);
	cJSON_Delete(j);
	serve_envelope_free(&env);

	/* indented (a method of a class): a script, and the code stays the code */
	const char *cls = "{\"code\":\"class A:\\n    def handle_request(self):\\n        pass\\n\","
			  "\"sandboxId\":\"d\"}";
	env_ok(cls, MOAT_LANG_PYTHON, &env);
	ck_assert_int_eq(env.mode, SERVE_SCRIPT);
	ck_assert_str_eq(env.req->code, "class A:\n    def handle_request(self):\n        pass\n");
	ck_assert_uint_eq(env.req->files_count, 0);
	ck_assert_uint_eq(env.req->env_count, 0);
	ck_assert_ptr_null(env.req->stdin_data);
	serve_envelope_free(&env);
	/* Python code is not a handler for /ts, nor TS code for /py */
	env_ok("{\"code\":\"def handle_request(r):\\n  pass\\n\",\"sandboxId\":\"d\"}",
	       MOAT_LANG_TYPESCRIPT, &env);
	ck_assert_int_eq(env.mode, SERVE_SCRIPT);
	serve_envelope_free(&env);
	env_ok("{\"code\":\"export default {}\",\"sandboxId\":\"d\"}", MOAT_LANG_PYTHON, &env);
	ck_assert_int_eq(env.mode, SERVE_SCRIPT);
	serve_envelope_free(&env);
}
END_TEST

START_TEST(envelope_ts_handler)
{
	static const char *const handlers[] = {
		"export default {\n  async fetch(req) { return new Response(\"hi\"); }\n};\n",
		"const h = { fetch() {} };\nexport  \n default h;\n",
	};
	for (size_t i = 0; i < 2; i++) {
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"code\":");
		moat_buf_append_json_string(&b, handlers[i], strlen(handlers[i]));
		moat_buf_appendf(&b, ",\"sandboxId\":\"d\",\"input\":{\"path\":\"/p\"}}");
		char *body = moat_buf_take(&b);
		struct serve_envelope env;
		env_ok(body, MOAT_LANG_TYPESCRIPT, &env);
		free(body);
		ck_assert_msg(env.mode == SERVE_HANDLER, "%zu", i);
		struct moat_request *r = env.req;
		ck_assert_int_eq(r->language, MOAT_LANG_TYPESCRIPT);
		ck_assert_str_eq(r->code,
				 "import { serve } from \"/opt/moat/runtime/js/handler.mjs\";\n"
				 "import h from \"./handler.ts\";\nawait serve(h);\n");
		ck_assert_uint_eq(r->code_len, strlen(r->code));
		ck_assert_uint_eq(r->files_count, 1);
		ck_assert_str_eq(r->files[0].key, "handler.ts");
		ck_assert_str_eq(r->files[0].value, handlers[i]);
		ck_assert_uint_eq(r->files[0].value_len, strlen(handlers[i]));
		ck_assert_ptr_null(find_kv(r->env, r->env_count, "PYTHONPATH"));
		cJSON *j = stdin_json(r);
		ck_assert_str_eq(jstr(j, "method"), "GET");
		ck_assert_str_eq(jstr(j, "url"), "http://localhost/p");
		cJSON_Delete(j);
		serve_envelope_free(&env);
	}
	static const char *const scripts[] = {
		"{\"code\":\"exportdefault {}\",\"sandboxId\":\"d\"}",
		"{\"code\":\"my_export default {}\",\"sandboxId\":\"d\"}",
		"{\"code\":\"export defaults = 1\",\"sandboxId\":\"d\"}",
		"{\"code\":\"console.log('hi')\",\"sandboxId\":\"d\"}",
	};
	for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
		struct serve_envelope env;
		env_ok(scripts[i], MOAT_LANG_TYPESCRIPT, &env);
		ck_assert_msg(env.mode == SERVE_SCRIPT, "%s", scripts[i]);
		ck_assert_uint_eq(env.req->files_count, 0);
		ck_assert_ptr_null(env.req->stdin_data);
		serve_envelope_free(&env);
	}
}
END_TEST

static bool is_handler(const char *code, enum moat_language lang)
{
	/* an exact-size copy: the detector must honour len */
	size_t len = strlen(code);
	char *c = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(c);
	memcpy(c, code, len);
	bool h = serve_is_handler(c, len, lang);
	free(c);
	return h;
}

START_TEST(is_handler_edges)
{
	static const char *const py_yes[] = {
		"def handle_request(req): pass",
		"def handle_request\t(req): pass",
		"async def handle_request(req): pass",
		"x = 1\ndef handle_request(req): pass",
		"x = 1\r\ndef handle_request(req): pass",
		"# def handle_request(\ndef handle_request(r):\n",
		"\n\n\ndef handle_request(",
		"def handle_request   (",
	};
	static const char *const py_no[] = {
		"", "d", "def handle_request", "def handle_request ", "def handle_request:",
		"def handle_requests(req): pass",
		"def handle_request2(req): pass",
		" def handle_request(req): pass",
		"\tdef handle_request(req): pass",
		"class A:\n    def handle_request(self): pass",
		"x = 1; def handle_request(req): pass",
		"# def handle_request(req)",
		"async  def handle_request(req): pass",
		"asyncdef handle_request(req): pass",
		"def  handle_request(req): pass",
		"def handle_request\n(req)",
		"handle_request(req)",
		"xdef handle_request(req)",
		"Def handle_request(req)",
	};
	for (size_t i = 0; i < sizeof py_yes / sizeof py_yes[0]; i++) {
		ck_assert_msg(is_handler(py_yes[i], MOAT_LANG_PYTHON), "py not a handler: %s",
			      py_yes[i]);
		ck_assert_msg(!is_handler(py_yes[i], MOAT_LANG_TYPESCRIPT), "ts: %s", py_yes[i]);
	}
	for (size_t i = 0; i < sizeof py_no / sizeof py_no[0]; i++)
		ck_assert_msg(!is_handler(py_no[i], MOAT_LANG_PYTHON), "py handler: %s", py_no[i]);

	static const char *const ts_yes[] = {
		"export default {}",
		"export default",
		"export  default function (req) {}",
		"export\ndefault {}",
		"export\t\r\n default {}",
		"const h = 1;\nexport default h;",
		"(export default x)",
		"x;export default{}",
		"export default;",
	};
	static const char *const ts_no[] = {
		"", "export", "export ", "export defaul", "exportdefault {}",
		"my_export default {}", "myexport default {}", "$export default {}",
		"export defaults {}", "export default_x", "export default2",
		"export { a as default }", "export const x = 1", "Export default {}",
		"module.exports = {}",
	};
	for (size_t i = 0; i < sizeof ts_yes / sizeof ts_yes[0]; i++) {
		ck_assert_msg(is_handler(ts_yes[i], MOAT_LANG_TYPESCRIPT), "ts not a handler: %s",
			      ts_yes[i]);
		ck_assert_msg(is_handler(ts_yes[i], MOAT_LANG_JAVASCRIPT), "js not a handler: %s",
			      ts_yes[i]);
		ck_assert_msg(!is_handler(ts_yes[i], MOAT_LANG_PYTHON), "py: %s", ts_yes[i]);
	}
	for (size_t i = 0; i < sizeof ts_no / sizeof ts_no[0]; i++)
		ck_assert_msg(!is_handler(ts_no[i], MOAT_LANG_TYPESCRIPT), "ts handler: %s",
			      ts_no[i]);

	/* len is honoured: the text past it is not looked at */
	const char *s = "x = 1\ndef handle_request(r): pass";
	ck_assert(!serve_is_handler(s, 6 + strlen("def handle_request"), MOAT_LANG_PYTHON));
	ck_assert(serve_is_handler(s, 6 + strlen("def handle_request("), MOAT_LANG_PYTHON));
	const char *t = "export defaultX";
	ck_assert(serve_is_handler(t, 14, MOAT_LANG_TYPESCRIPT));
	ck_assert(!serve_is_handler(t, 15, MOAT_LANG_TYPESCRIPT));
	ck_assert(!serve_is_handler(t, 13, MOAT_LANG_TYPESCRIPT));
}
END_TEST

/* ---- handler frames ---- */

struct rec {
	int heads;
	int status;
	char **headers;
	size_t count;
	struct moat_buf body;
	size_t body_calls;
};

static void rec_head(void *ctx, int status, char **headers, size_t count)
{
	struct rec *r = ctx;
	r->heads++;
	for (size_t i = 0; i < 2 * r->count; i++)
		free(r->headers[i]);
	free(r->headers);
	r->status = status;
	r->headers = headers;
	r->count = count;
}

static void rec_body(void *ctx, const char *buf, size_t len)
{
	struct rec *r = ctx;
	ck_assert_uint_gt(len, 0);
	ck_assert_int_eq(r->heads, 1); /* no body before the head */
	moat_buf_append(&r->body, buf, len);
	r->body_calls++;
}

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < 2 * r->count; i++)
		free(r->headers[i]);
	free(r->headers);
	moat_buf_free(&r->body);
	memset(r, 0, sizeof *r);
}

/* Feeds s in pieces of step bytes (0: at once), each an exact-size heap
 * copy, then finishes unless !finish. */
static void run_frames(struct frame_parser *p, struct rec *r, uint64_t cap, const char *s,
		       size_t len, size_t step, bool finish)
{
	memset(r, 0, sizeof *r);
	struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = r };
	frame_init(p, cap, &sink);
	ck_assert_int_eq(p->state, FRAME_HEAD);
	size_t at = 0;
	do {
		size_t n = step && len - at > step ? step : len - at;
		char *piece = malloc(n ? n : 1);
		ck_assert_ptr_nonnull(piece);
		memcpy(piece, s + at, n);
		frame_feed(p, piece, n);
		free(piece);
		at += n;
	} while (at < len);
	if (finish)
		frame_finish(p);
	ck_assert_uint_eq(p->body_total, r->body.len);
	ck_assert((p->state == FRAME_FAILED) == (p->error != NULL));
}

/* The stream must fail (after finish); the error holds substr (NULL: any). */
static void frames_fail(const char *s, uint64_t cap, const char *substr)
{
	size_t len = strlen(s);
	static const size_t steps[] = { 0, 1, 2, 7 };
	for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, cap, s, len, steps[k], true);
		ck_assert_msg(p.state == FRAME_FAILED, "accepted (step %zu): %s", steps[k], s);
		ck_assert_ptr_nonnull(p.error);
		ck_assert_msg(!strchr(p.error, '\n') && !strchr(p.error, '\r'), "%s", p.error);
		if (substr)
			ck_assert_msg(strstr(p.error, substr), "%s: \"%s\" lacks \"%s\"", s, p.error,
				      substr);
		frame_free(&p);
		ck_assert_ptr_null(p.error);
		rec_free(&r);
	}
}

static const char valid_stream[] =
	"MOAT/1 {\"status\":201,\"headers\":[[\"Content-Type\",\"text/plain\"],"
	"[\"X-A\",\"1\"],[\"Content-Length\",\"99\"],[\"transfer-encoding\",\"chunked\"],"
	"[\"Connection\",\"close\"],[\"Set-Cookie\",\"a=b; Path=/\"],[\"Keep-Alive\",\"x\"],"
	"[\"Upgrade\",\"h2c\"],[\"TE\",\"trailers\"],[\"Trailer\",\"X\"],[\"X-Tab\",\"a\\tb\"]]}\n"
	"5\nhello"
	"1\n\n"
	"12\n world 0123\n"
	"end\n";

static void check_valid(const struct frame_parser *p, const struct rec *r)
{
	ck_assert_int_eq(p->state, FRAME_END);
	ck_assert_ptr_null(p->error);
	ck_assert(p->head_seen);
	ck_assert_int_eq(r->heads, 1);
	ck_assert_int_eq(r->status, 201);
	ck_assert_uint_eq(r->count, 4);
	static const char *const want[] = { "Content-Type", "text/plain", "X-A", "1",
					    "Set-Cookie", "a=b; Path=/", "X-Tab", "a\tb" };
	for (size_t i = 0; i < 8; i++)
		ck_assert_str_eq(r->headers[i], want[i]);
	static const char body[] = "hello\n world 0123\n";
	ck_assert_uint_eq(r->body.len, sizeof body - 1);
	ck_assert(!memcmp(r->body.data, body, sizeof body - 1));
	ck_assert_uint_eq(p->body_total, sizeof body - 1);
}

START_TEST(frames_valid)
{
	size_t len = sizeof valid_stream - 1;
	for (size_t step = 0; step <= 13; step++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 1 << 20, valid_stream, len, step, true);
		check_valid(&p, &r);
		if (step == 0)
			ck_assert_uint_eq(r.body_calls, 3);
		if (step == 1)
			ck_assert_uint_eq(r.body_calls, r.body.len);
		frame_free(&p);
		rec_free(&r);
	}
	/* every split in two */
	for (size_t cut = 0; cut <= len; cut++) {
		struct frame_parser p;
		struct rec r;
		memset(&r, 0, sizeof r);
		struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = &r };
		frame_init(&p, 1 << 20, &sink);
		frame_feed(&p, valid_stream, cut);
		ck_assert_msg(p.state != FRAME_FAILED, "cut %zu: %s", cut, p.error);
		ck_assert_msg(cut == len || p.state != FRAME_END, "cut %zu", cut);
		frame_feed(&p, valid_stream + cut, len - cut);
		frame_finish(&p);
		check_valid(&p, &r);
		frame_free(&p);
		rec_free(&r);
	}

	/* head + 2 chunks + end; no headers key; the smallest and largest status */
	static const char *const two[] = {
		"MOAT/1 {\"status\":200}\n3\nabc4\ndefgend\n",
		"MOAT/1 {\"headers\":[],\"status\":599}\n3\nabc4\ndefgend\n",
	};
	for (size_t i = 0; i < 2; i++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 7, two[i], strlen(two[i]), 0, true);
		ck_assert_int_eq(p.state, FRAME_END);
		ck_assert_int_eq(r.status, i ? 599 : 200);
		ck_assert_uint_eq(r.count, 0);
		ck_assert_uint_eq(r.body.len, 7);
		ck_assert(!memcmp(r.body.data, "abcdefg", 7));
		frame_free(&p);
		rec_free(&r);
	}

	/* states on the way */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "MOAT/1 {\"status\":204}", 21, 0, false);
	ck_assert_int_eq(p.state, FRAME_HEAD);
	ck_assert_int_eq(r.heads, 0);
	frame_feed(&p, "\n", 1);
	ck_assert_int_eq(p.state, FRAME_LEN);
	ck_assert_int_eq(r.heads, 1);
	ck_assert_int_eq(r.status, 204);
	frame_feed(&p, "10\n01234", 8);
	ck_assert_int_eq(p.state, FRAME_BODY);
	ck_assert_uint_eq(p.remaining, 5);
	frame_feed(&p, "56789", 5);
	ck_assert_int_eq(p.state, FRAME_LEN);
	frame_feed(&p, "en", 2);
	ck_assert_int_eq(p.state, FRAME_LEN);
	frame_feed(&p, "d\n", 2);
	ck_assert_int_eq(p.state, FRAME_END);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_ptr_null(p.error);
	frame_free(&p);
	rec_free(&r);

	/* an empty body; the body exactly at the cap */
	run_frames(&p, &r, 0, "MOAT/1 {\"status\":200}\nend\n", 26, 0, true);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(r.body.len, 0);
	frame_free(&p);
	rec_free(&r);
	run_frames(&p, &r, 6, "MOAT/1 {\"status\":200}\n3\nabc3\ndefend\n", 36, 1, true);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(r.body.len, 6);
	frame_free(&p);
	rec_free(&r);

	/* a sink without callbacks */
	struct frame_sink none = { 0 };
	frame_init(&p, 100, &none);
	frame_feed(&p, valid_stream, len);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(p.body_total, 18);
	frame_free(&p);

	/* frame_header_ok / frame_header_dropped directly */
	ck_assert(frame_header_ok("X-A", "v"));
	ck_assert(frame_header_ok("x!#$%&'*+-.^_`|~9", ""));
	ck_assert(frame_header_ok("X", "a\tb \x80\xff"));
	ck_assert(!frame_header_ok("", "v"));
	ck_assert(!frame_header_ok("X A", "v"));
	ck_assert(!frame_header_ok("X:", "v"));
	ck_assert(!frame_header_ok("X(", "v"));
	ck_assert(!frame_header_ok("X", "a\rb"));
	ck_assert(!frame_header_ok("X", "a\nb"));
	ck_assert(!frame_header_ok("X", "a\x01"));
	ck_assert(!frame_header_ok("X", "a\x7f"));
	static const char *const dropped[] = { "Content-Length", "content-length",
					       "TRANSFER-ENCODING", "Connection", "keep-alive",
					       "Upgrade", "TE", "te", "Trailer" };
	for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
		ck_assert_msg(frame_header_dropped(dropped[i]), "%s", dropped[i]);
	static const char *const kept[] = { "Content-Type", "Trailers", "TEx", "Set-Cookie",
					    "Content-Length2", "X-Connection", "Location" };
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
		ck_assert_msg(!frame_header_dropped(kept[i]), "%s", kept[i]);
}
END_TEST

START_TEST(frames_errors)
{
	/* "error" before the head: the handler's own words */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "error boom\n", 11, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "boom");
	ck_assert(!p.head_seen);
	ck_assert_int_eq(r.heads, 0);
	frame_free(&p);
	rec_free(&r);
	run_frames(&p, &r, 100, "error boom\n", 11, 1, false);
	ck_assert_int_eq(p.state, FRAME_FAILED); /* before finish */
	ck_assert_str_eq(p.error, "boom");
	frame_free(&p);
	rec_free(&r);
	/* control characters made blanks; bounded */
	run_frames(&p, &r, 100, "error a\tb\x01" "c\r\n", 13, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "a b c ");
	frame_free(&p);
	rec_free(&r);
	char line[600] = "error ";
	memset(line + 6, 'e', 530);
	strcpy(line + 536, "\n");
	run_frames(&p, &r, 100, line, strlen(line), 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_le(strlen(p.error), 500);
	frame_free(&p);
	rec_free(&r);

	/* after the head and some body: a truncation */
	const char *s = "MOAT/1 {\"status\":200,\"headers\":[[\"A\",\"b\"]]}\n2\nhierror late boom\n";
	run_frames(&p, &r, 100, s, strlen(s), 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "late boom");
	ck_assert(p.head_seen);
	ck_assert_int_eq(r.heads, 1);
	ck_assert_uint_eq(r.body.len, 2);
	frame_free(&p);
	rec_free(&r);

	/* no head, or no end, then EOF */
	frames_fail("", 100, NULL);
	run_frames(&p, &r, 100, "", 0, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert(!p.head_seen);
	frame_free(&p);
	rec_free(&r);
	frames_fail("MOAT/1 {\"status\":200}", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhel", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhello", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhelloend", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhelloen", 100, NULL);
	frames_fail("hello world\n", 100, NULL);
	frames_fail("end\n", 100, NULL);
	frames_fail("error\n", 100, NULL);
	frames_fail("\n", 100, NULL);
	frames_fail("MOAT/2 {\"status\":200}\nend\n", 100, NULL);
	frames_fail("MOAT/1{\"status\":200}\nend\n", 100, NULL);
	frames_fail("moat/1 {\"status\":200}\nend\n", 100, NULL);
	frames_fail(" MOAT/1 {\"status\":200}\nend\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\nend\r\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n1\r\naend\n", 100, NULL);

	/* chunk lengths */
	static const char *const bad_len[] = {
		"0", "01", "00", "-1", "+1", "1a", "a", " 1", "1 ", "0x10", "1.0", "",
		"123456789012345678901", /* 21 digits */
		"99999999999999999999",  /* 20 digits, over the cap (and near overflow) */
		"18446744073709551616",  /* 2^64 */
		"end ", "END", "en", "ends",
	};
	for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
		char st[200];
		snprintf(st, sizeof st, "MOAT/1 {\"status\":200}\n%s\nabcdefghijend\n", bad_len[i]);
		frames_fail(st, 1 << 20, NULL);
	}
	/* 20 digits are read, not refused for their length */
	run_frames(&p, &r, UINT64_MAX, "MOAT/1 {\"status\":200}\n10000000000000000000\nx", 44, 0,
		   false);
	ck_assert_int_eq(p.state, FRAME_BODY);
	ck_assert_uint_eq(p.remaining, 10000000000000000000u - 1);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	frame_free(&p);
	rec_free(&r);

	/* the body cap: one chunk over, or the total over */
	frames_fail("MOAT/1 {\"status\":200}\n11\nabcdefghijkend\n", 10, "maxResponseBytes");
	frames_fail("MOAT/1 {\"status\":200}\n6\nabcdef5\nghijkend\n", 10, "maxResponseBytes");
	frames_fail("MOAT/1 {\"status\":200}\n1\na", 0, "maxResponseBytes");
	run_frames(&p, &r, 10, "MOAT/1 {\"status\":200}\n6\nabcdef5\nghijkend\n", 41, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_eq(r.body.len, 6); /* nothing of the chunk over the cap */
	frame_free(&p);
	rec_free(&r);

	/* the head */
	static const char *const bad_heads[] = {
		"{\"status\":199}", "{\"status\":600}", "{\"status\":200.5}", "{\"status\":\"200\"}",
		"{\"status\":-200}", "{\"status\":0}", "{\"status\":1e999}", "{\"status\":null}",
		"{\"status\":true}", "{}", "[]", "200", "", "{", "{\"status\":200",
		"{\"status\":2000000000000}",
		"{\"status\":200,\"headers\":{}}",
		"{\"status\":200,\"headers\":\"X: y\"}",
		"{\"status\":200,\"headers\":[\"X\"]}",
		"{\"status\":200,\"headers\":[[\"X\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"y\",\"z\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",1]]}",
		"{\"status\":200,\"headers\":[[1,\"y\"]]}",
		"{\"status\":200,\"headers\":[{\"X\":\"y\"}]}",
		"{\"status\":200,\"headers\":[[\"X Y\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"X:\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\rb\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\nb\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\r\\nSet-Cookie: x=1\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\u007f\"]]}",
		"{\"status\":200,\"headers\":[[\"Content-Length\",\"a\\nb\"]]}",
	};
	for (size_t i = 0; i < sizeof bad_heads / sizeof bad_heads[0]; i++) {
		char st[300];
		snprintf(st, sizeof st, "MOAT/1 %s\n1\naend\n", bad_heads[i]);
		frames_fail(st, 100, NULL);
		run_frames(&p, &r, 100, st, strlen(st), 0, true);
		ck_assert_int_eq(r.heads, 0); /* the sink never saw it */
		ck_assert(!p.head_seen);
		frame_free(&p);
		rec_free(&r);
	}

	/* 100 headers fine (dropped ones count too), 101 not */
	for (int n = 100; n <= 101; n++) {
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "MOAT/1 {\"status\":200,\"headers\":[[\"Connection\",\"x\"]");
		for (int i = 1; i < n; i++)
			moat_buf_appendf(&b, ",[\"X-H%d\",\"%d\"]", i, i);
		moat_buf_appendf(&b, "]}\nend\n");
		char *st = moat_buf_take(&b);
		run_frames(&p, &r, 100, st, strlen(st), 0, true);
		if (n == 100) {
			ck_assert_int_eq(p.state, FRAME_END);
			ck_assert_uint_eq(r.count, 99);
			ck_assert_str_eq(r.headers[0], "X-H1");
			ck_assert_str_eq(r.headers[197], "99");
		} else {
			ck_assert_int_eq(p.state, FRAME_FAILED);
			ck_assert_int_eq(r.heads, 0);
			ck_assert_ptr_nonnull(strstr(p.error, "100"));
		}
		frame_free(&p);
		rec_free(&r);
		free(st);
	}

	/* a second head is not a length */
	frames_fail("MOAT/1 {\"status\":200}\nMOAT/1 {\"status\":200}\nend\n", 100, NULL);

	/* the head line: 64 KiB is fine, one byte more is not */
	size_t cap = SERVE_MAX_HEAD_BYTES;
	char *big = malloc(cap + 100);
	ck_assert_ptr_nonnull(big);
	static const char pre[] = "MOAT/1 {\"status\":200,\"headers\":[[\"X\",\"";
	static const char post[] = "\"]]}";
	for (size_t extra = 0; extra <= 1; extra++) {
		size_t fill = cap + extra - (sizeof pre - 1) - (sizeof post - 1);
		memcpy(big, pre, sizeof pre - 1);
		memset(big + sizeof pre - 1, 'v', fill);
		memcpy(big + sizeof pre - 1 + fill, post, sizeof post - 1);
		size_t l = cap + extra;
		ck_assert_uint_eq(sizeof pre - 1 + fill + sizeof post - 1, l);
		memcpy(big + l, "\nend\n", 5);
		/* the header value is over frame_header_ok's 8192 bytes, so even the
		 * line that fits is refused — but for its value, not its size */
		run_frames(&p, &r, 100, big, l + 5, 4096, true);
		ck_assert_int_eq(p.state, FRAME_FAILED);
		if (extra)
			ck_assert_ptr_nonnull(strstr(p.error, "too large"));
		else
			ck_assert_ptr_null(strstr(p.error, "too large"));
		frame_free(&p);
		rec_free(&r);
	}
	/* many small headers filling 64 KiB exactly: accepted */
	{
		struct moat_buf b = { 0 };
		size_t per = 600;
		moat_buf_appendf(&b, "MOAT/1 {\"status\":200,\"headers\":[");
		for (int i = 0; i < 99; i++) {
			moat_buf_appendf(&b, "[\"X-%02d\",\"", i);
			for (size_t k = 0; k < per; k++)
				moat_buf_append(&b, "v", 1);
			moat_buf_appendf(&b, "\"],");
		}
		moat_buf_appendf(&b, "[\"X-99\",\"");
		size_t tail = strlen("\"]]}");
		ck_assert_uint_lt(b.len + tail, cap);
		size_t pad = cap - b.len - tail;
		ck_assert_uint_le(pad, 8192);
		for (size_t k = 0; k < pad; k++)
			moat_buf_append(&b, "w", 1);
		moat_buf_appendf(&b, "\"]]}");
		ck_assert_uint_eq(b.len, cap);
		moat_buf_appendf(&b, "\nend\n");
		for (size_t extra = 0; extra <= 1; extra++) {
			char *st = malloc(b.len + 1);
			ck_assert_ptr_nonnull(st);
			size_t l = b.len;
			memcpy(st, b.data, b.len);
			if (extra) { /* one more 'w' in the last value */
				st = realloc(st, l + 2);
				ck_assert_ptr_nonnull(st);
				memmove(st + cap - tail + 1, st + cap - tail, l - (cap - tail));
				st[cap - tail] = 'w';
				l++;
			}
			run_frames(&p, &r, 100, st, l, 1000, true);
			if (extra) {
				ck_assert_int_eq(p.state, FRAME_FAILED);
				ck_assert_ptr_nonnull(strstr(p.error, "too large"));
				ck_assert_int_eq(r.heads, 0);
			} else {
				ck_assert_msg(p.state == FRAME_END, "%s", p.error);
				ck_assert_uint_eq(r.count, 100);
			}
			frame_free(&p);
			rec_free(&r);
			free(st);
		}
		moat_buf_free(&b);
	}
	/* a head line that never ends is refused before 64 KiB + 1 is buffered */
	memset(big, 'M', cap + 100);
	run_frames(&p, &r, 100, big, cap + 1, 0, false);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_le(p.line.cap, cap + 1024);
	frame_free(&p);
	rec_free(&r);
	free(big);

	/* a length line that never ends */
	char lenline[2000] = "MOAT/1 {\"status\":200}\n";
	memset(lenline + 23, '1', 1500);
	lenline[1523] = '\0';
	frames_fail(lenline, UINT64_MAX, NULL);
}
END_TEST

/* After "end", anything more is a failure (SERVE.md: "Anything else ... is a
 * failure"), whether in the same write or a later one. */
START_TEST(frames_after_end)
{
	static const char *const after[] = {
		"MOAT/1 {\"status\":200}\nend\nx",
		"MOAT/1 {\"status\":200}\nend\n\n",
		"MOAT/1 {\"status\":200}\nend\nend\n",
		"MOAT/1 {\"status\":200}\n1\naend\n1\nb",
		"MOAT/1 {\"status\":200}\nend\nerror late\n",
	};
	for (size_t i = 0; i < sizeof after / sizeof after[0]; i++)
		frames_fail(after[i], 100, NULL);
	/* in a later write */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "MOAT/1 {\"status\":200}\nend\n", 26, 0, false);
	ck_assert_int_eq(p.state, FRAME_END);
	frame_feed(&p, "z", 1);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_ptr_nonnull(p.error);
	frame_free(&p);
	rec_free(&r);
}
END_TEST

/* ---- random streams ---- */

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 32);
}

/* The handler protocol's shared vectors (tests/fixtures/frames/handler.json,
 * also read by tests/runtime/test_frames.py against the Python bootstrap's
 * writer): each valid stream parses to its status, headers and body, fed
 * whole and a byte at a time; each invalid one fails. */
START_TEST(frame_vectors)
{
	cJSON *doc = fixture_json("frames/handler.json");
	const cJSON *valid = cJSON_GetObjectItemCaseSensitive(doc, "valid"), *v;
	ck_assert_int_gt(cJSON_GetArraySize(valid), 0);
	cJSON_ArrayForEach(v, valid)
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
		const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "stream"));
		const cJSON *headers = cJSON_GetObjectItemCaseSensitive(v, "headers"), *c;
		ck_assert_ptr_nonnull(name);
		ck_assert_ptr_nonnull(s);
		struct moat_buf body = { 0 };
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(v, "chunks"))
			moat_buf_append(&body, c->valuestring, strlen(c->valuestring));
		for (size_t step = 0; step <= 1; step++) {
			struct frame_parser p;
			struct rec r;
			run_frames(&p, &r, 1 << 20, s, strlen(s), step, true);
			ck_assert_msg(p.state == FRAME_END, "%s: %s", name, p.error ? p.error : "not ended");
			ck_assert_int_eq(r.status, (int)cJSON_GetNumberValue(
							   cJSON_GetObjectItemCaseSensitive(v, "status")));
			ck_assert_uint_eq(r.count, (size_t)cJSON_GetArraySize(headers));
			for (size_t i = 0; i < r.count; i++) {
				const cJSON *h = cJSON_GetArrayItem(headers, (int)i);
				ck_assert_str_eq(r.headers[2 * i], cJSON_GetArrayItem(h, 0)->valuestring);
				ck_assert_str_eq(r.headers[2 * i + 1], cJSON_GetArrayItem(h, 1)->valuestring);
			}
			ck_assert_msg(r.body.len == body.len && (!body.len || !memcmp(r.body.data, body.data, body.len)),
				      "%s: body [%.*s]", name, (int)r.body.len, r.body.data ? r.body.data : "");
			frame_free(&p);
			rec_free(&r);
		}
		moat_buf_free(&body);
	}
	const cJSON *invalid = cJSON_GetObjectItemCaseSensitive(doc, "invalid");
	ck_assert_int_gt(cJSON_GetArraySize(invalid), 0);
	cJSON_ArrayForEach(v, invalid)
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
		const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "stream"));
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 1 << 20, s, strlen(s), 0, true);
		ck_assert_msg(p.state == FRAME_FAILED, "%s: accepted", name);
		frame_free(&p);
		rec_free(&r);
	}
	cJSON_Delete(doc);
}
END_TEST

START_TEST(frames_random)
{
	static const char *const pieces[] = {
		"MOAT/1 ", "{\"status\":200}", "{\"status\":200,\"headers\":[[\"A\",\"b\"]]}", "\n",
		"end\n", "error x\n", "1\n", "5\n", "0\n", "12\n", "hello", "\r", "\x00", "\xff",
		"[", "]", "\"", ",", "{", "}", "99999999999999999999\n",
	};
	size_t vlen = sizeof valid_stream - 1;
	char *buf = malloc(4096);
	ck_assert_ptr_nonnull(buf);
	unsigned seen[5] = { 0 };
	for (int it = 0; it < 20000; it++) {
		size_t len = 0;
		switch (it % 3) {
		case 0: /* noise */
			len = next() % 600;
			for (size_t i = 0; i < len; i++)
				buf[i] = (char)next();
			break;
		case 1: /* the valid stream, a few bytes changed, cut or not */
			len = next() % 4 ? vlen : next() % (vlen + 1);
			memcpy(buf, valid_stream, len);
			for (unsigned k = next() % 4; k > 0 && len; k--)
				buf[next() % len] = (char)next();
			if (next() % 8 == 0 && len < 4000) { /* and bytes inserted */
				size_t at = next() % (len + 1);
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = (char)next();
				len++;
			}
			break;
		default: /* pieces of the protocol */
			for (unsigned k = next() % 20; k > 0; k--) {
				const char *pc = pieces[next() % (sizeof pieces / sizeof pieces[0])];
				size_t pl = pc[0] ? strlen(pc) : 1;
				if (len + pl > 4096)
					break;
				memcpy(buf + len, pc, pl);
				len += pl;
			}
		}
		struct rec r;
		memset(&r, 0, sizeof r);
		struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = &r };
		struct frame_parser p;
		uint64_t cap = next() % 2 ? 1 << 20 : next() % 32;
		frame_init(&p, cap, &sink);
		for (size_t at = 0; at < len;) {
			size_t n = 1 + next() % (len - at);
			if (next() % 2)
				n = n > 8 ? n % 8 + 1 : n;
			char *piece = malloc(n);
			ck_assert_ptr_nonnull(piece);
			memcpy(piece, buf + at, n);
			frame_feed(&p, piece, n);
			free(piece);
			at += n;
			ck_assert_uint_le(p.body_total, cap);
		}
		frame_finish(&p);
		ck_assert(p.state == FRAME_END || p.state == FRAME_FAILED);
		ck_assert((p.state == FRAME_FAILED) == (p.error != NULL));
		ck_assert(p.head_seen == (r.heads == 1));
		ck_assert_int_le(r.heads, 1);
		ck_assert_uint_eq(p.body_total, r.body.len);
		if (p.state == FRAME_END)
			ck_assert(p.head_seen);
		if (p.error)
			ck_assert(!strchr(p.error, '\n'));
		seen[p.state]++;
		frame_free(&p);
		rec_free(&r);
	}
	ck_assert_uint_gt(seen[FRAME_END], 0);
	ck_assert_uint_gt(seen[FRAME_FAILED], 0);
	free(buf);
}
END_TEST

/* ---- operator limits ---- */

START_TEST(limits_parse)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_uint_eq(l.max_timeout_ms, 60000);
	ck_assert_uint_eq(l.def_memory_mb, 256);
	ck_assert_uint_eq(l.max_memory_mb, 1024);
	ck_assert(l.def_cpus == 1);
	ck_assert(l.max_cpus >= 1);
	ck_assert_uint_eq(l.def_pids, 64);
	ck_assert_uint_eq(l.max_pids, 256);
	ck_assert(!l.allow_open_network);
	ck_assert_uint_eq(l.max_response_bytes, 16777216);
	ck_assert_uint_eq(l.max_output_bytes, 4194304);
	ck_assert_int_eq(serve_limits_parse(NULL, &l, &err), 0);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_int_eq(serve_limits_parse("{}", &l, &err), 0);
	ck_assert_uint_eq(l.max_response_bytes, 16777216);

	ck_assert_int_eq(serve_limits_parse(
				 "{\"defaults\":{\"timeout\":2000,\"memoryMb\":128,\"cpus\":0.5,"
				 "\"pidsLimit\":32},\"max\":{\"timeout\":5000,\"memoryMb\":512,"
				 "\"cpus\":1.5,\"pidsLimit\":100},\"allowOpenNetwork\":true,"
				 "\"maxResponseBytes\":4096}", &l, &err), 0);
	ck_assert_ptr_null(err.message);
	ck_assert_uint_eq(l.def_timeout_ms, 2000);
	ck_assert_uint_eq(l.max_timeout_ms, 5000);
	ck_assert_uint_eq(l.def_memory_mb, 128);
	ck_assert_uint_eq(l.max_memory_mb, 512);
	ck_assert(l.def_cpus == 0.5);
	ck_assert(l.max_cpus == 1.5);
	ck_assert_uint_eq(l.def_pids, 32);
	ck_assert_uint_eq(l.max_pids, 100);
	ck_assert(l.allow_open_network);
	ck_assert_uint_eq(l.max_response_bytes, 4096);

	ck_assert_int_eq(serve_limits_parse("{\"allowOpenNetwork\":false}", &l, &err), 0);
	ck_assert(!l.allow_open_network);

	/* poolZygote: unset (-1: the service decides) unless a boolean says */
	serve_limits_default(&l);
	ck_assert_int_eq(l.pool_zygote, -1);
	ck_assert_int_eq(serve_limits_parse("{\"pool\":3}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, -1);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygote\":false}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, 0);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygote\":true}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, 1);

	/* serve.max.maxOutputBytes: 1 B .. 1 GiB; not a default */
	ck_assert_int_eq(serve_limits_parse("{\"max\":{\"maxOutputBytes\":65536}}", &l, &err), 0);
	ck_assert_uint_eq(l.max_output_bytes, 65536);
	/* the zygote's lifetime: 100 children, 60 s unless set (issue 31) */
	serve_limits_default(&l);
	ck_assert_uint_eq(l.pool_zygote_max_children, 100);
	ck_assert_uint_eq(l.pool_zygote_max_age_ms, 60000);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygoteMaxChildren\":7,\"poolZygoteMaxAge\":2}",
					    &l, &err), 0);
	ck_assert_uint_eq(l.pool_zygote_max_children, 7);
	ck_assert_uint_eq(l.pool_zygote_max_age_ms, 2000);
	/* the relay caps across runs: 4096 connections, 256 DNS questions */
	serve_limits_default(&l);
	ck_assert_uint_eq(l.max_relays, 4096);
	ck_assert_uint_eq(l.max_dns, 256);
	ck_assert_int_eq(serve_limits_parse("{\"maxRelays\":100,\"maxDns\":8}", &l, &err), 0);
	ck_assert_uint_eq(l.max_relays, 100);
	ck_assert_uint_eq(l.max_dns, 8);

	/* sessions (docs/SESSIONS.md): max unset (from memory), 10 min idle, 1 h */
	serve_limits_default(&l);
	ck_assert_int_eq(l.sessions_max, -1);
	ck_assert_uint_eq(l.session_idle_ms, 600000);
	ck_assert_uint_eq(l.session_max_idle_ms, 3600000);
	ck_assert_uint_eq(l.session_max_life_ms, 3600000);
	ck_assert_int_eq(serve_limits_parse("{\"sessions\":{\"max\":0,\"idleTimeoutMs\":1500,"
					    "\"maxIdleTimeoutMs\":2000,\"maxLifetimeMs\":9000}}",
					    &l, &err), 0);
	ck_assert_int_eq(l.sessions_max, 0);
	ck_assert_uint_eq(l.session_idle_ms, 1500);
	ck_assert_uint_eq(l.session_max_idle_ms, 2000);
	ck_assert_uint_eq(l.session_max_life_ms, 9000);

	/* only some keys: the rest stay */
	serve_limits_default(&l);
	ck_assert_int_eq(serve_limits_parse("{\"max\":{\"timeout\":120000}}", &l, &err), 0);
	ck_assert_uint_eq(l.max_timeout_ms, 120000);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_uint_eq(l.max_memory_mb, 1024);
	ck_assert(!l.allow_open_network);

	static const char *const bad[][2] = {
		{ "[]", "object" },
		{ "1", "object" },
		{ "{", "object" },
		{ "{\"default\":{}}", "unknown key \"default\"" },
		{ "{\"maxima\":{}}", "unknown key" },
		{ "{\"defaults\":{\"timeoutMs\":1}}", "unknown key \"timeoutMs\"" },
		{ "{\"max\":{\"network\":true}}", "unknown key" },
		{ "{\"defaults\":[]}", "serve.defaults must be an object" },
		{ "{\"max\":1}", "serve.max must be an object" },
		{ "{\"defaults\":{\"timeout\":\"1000\"}}", "timeout" },
		{ "{\"defaults\":{\"timeout\":0}}", "timeout" },
		{ "{\"defaults\":{\"memoryMb\":true}}", "memoryMb" },
		{ "{\"defaults\":{\"memoryMb\":8}}", "memoryMb" },
		{ "{\"max\":{\"cpus\":0}}", "cpus" },
		{ "{\"max\":{\"cpus\":null}}", "cpus" },
		{ "{\"max\":{\"pidsLimit\":0}}", "pidsLimit" },
		{ "{\"max\":{\"pidsLimit\":-5}}", "pidsLimit" },
		{ "{\"allowOpenNetwork\":1}", "allowOpenNetwork" },
		{ "{\"allowOpenNetwork\":\"true\"}", "allowOpenNetwork" },
		{ "{\"poolZygote\":1}", "serve.poolZygote must be a boolean" },
		{ "{\"poolZygote\":\"false\"}", "serve.poolZygote must be a boolean" },
		{ "{\"poolzygote\":true}", "unknown key \"poolzygote\"" },
		{ "{\"defaults\":{\"maxOutputBytes\":1024}}", "unknown key \"maxOutputBytes\"" },
		{ "{\"max\":{\"maxOutputBytes\":0}}", "serve.max.maxOutputBytes must be" },
		{ "{\"max\":{\"maxOutputBytes\":1073741825}}", "maxOutputBytes" },
		{ "{\"max\":{\"maxOutputBytes\":\"1\"}}", "maxOutputBytes" },
		{ "{\"poolZygoteMaxChildren\":0}", "poolZygoteMaxChildren" },
		{ "{\"poolZygoteMaxChildren\":true}", "poolZygoteMaxChildren" },
		{ "{\"poolZygoteMaxAge\":0}", "poolZygoteMaxAge" },
		{ "{\"poolZygoteMaxAge\":100000}", "poolZygoteMaxAge" },
		{ "{\"maxResponseBytes\":\"1\"}", "maxResponseBytes" },
		{ "{\"maxRelays\":0}", "serve.maxRelays must be a number from 1 to 1048576" },
		{ "{\"maxRelays\":1048577}", "maxRelays" },
		{ "{\"maxDns\":0}", "serve.maxDns must be a number from 1 to 65536" },
		{ "{\"maxDns\":\"8\"}", "maxDns" },
		{ "{\"maxdns\":8}", "unknown key \"maxdns\"" },
		{ "{\"maxResponseBytes\":100}", "maxResponseBytes" },
		{ "{\"defaults\":{\"timeout\":70000}}", "above its max" },
		{ "{\"defaults\":{\"memoryMb\":2048}}", "above its max" },
		{ "{\"defaults\":{\"pidsLimit\":300}}", "above its max" },
		{ "{\"max\":{\"timeout\":5000}}", "above its max" },
		{ "{\"defaults\":{\"cpus\":1000}}", "above its max" },
		{ "{\"sessions\":1}", "serve.sessions must be an object" },
		{ "{\"sessions\":{\"max\":4097}}", "serve.sessions.max must be" },
		{ "{\"sessions\":{\"idleTimeoutMs\":99}}", "serve.sessions.idleTimeoutMs" },
		{ "{\"sessions\":{\"idleTimeoutMs\":7200000}}", "above maxIdleTimeoutMs" },
		{ "{\"sessions\":{\"maxlifetimems\":1000}}", "unknown key \"maxlifetimems\"" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		serve_limits_default(&l);
		ck_assert_msg(serve_limits_parse(bad[i][0], &l, &err) == -1, "accepted %s", bad[i][0]);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		ck_assert_msg(strstr(err.message, bad[i][1]), "%s: \"%s\" lacks \"%s\"", bad[i][0],
			      err.message, bad[i][1]);
		moat_error_clear(&err);
	}
}
END_TEST

/* The message of a bad maxResponseBytes names it as the config spells it. */
START_TEST(limits_message_names_key)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_int_eq(serve_limits_parse("{\"maxResponseBytes\":100}", &l, &err), -1);
	ck_assert_msg(strstr(err.message, "serve.maxResponseBytes"), "%s", err.message);
	ck_assert_msg(!strstr(err.message, ".."), "%s", err.message);
	moat_error_clear(&err);
}
END_TEST

START_TEST(limits_apply)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	l.max_cpus = 2;

	/* given = 0: every limit from the defaults, even if the request held one */
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->timeout_ms = 999999;
	req->memory_mb = 99999;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 10000);
	ck_assert_uint_eq(req->memory_mb, 256);
	ck_assert(req->cpus == 1);
	ck_assert_uint_eq(req->pids_limit, 64);
	ck_assert_ptr_null(err.message);

	/* given values within the max are kept */
	req->timeout_ms = 60000;
	req->memory_mb = 1024;
	req->cpus = 2;
	req->pids_limit = 256;
	unsigned all = MOAT_REQ_HAS_TIMEOUT | MOAT_REQ_HAS_MEMORY | MOAT_REQ_HAS_CPUS |
		       MOAT_REQ_HAS_PIDS;
	ck_assert_int_eq(serve_limits_apply(&l, req, all, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 60000);
	ck_assert_uint_eq(req->memory_mb, 1024);
	ck_assert(req->cpus == 2);
	ck_assert_uint_eq(req->pids_limit, 256);

	/* one at a time over the max: a policy error naming it */
	struct {
		unsigned flag;
		const char *name;
	} over[] = {
		{ MOAT_REQ_HAS_TIMEOUT, "timeout" },
		{ MOAT_REQ_HAS_MEMORY, "memoryMb" },
		{ MOAT_REQ_HAS_CPUS, "cpus" },
		{ MOAT_REQ_HAS_PIDS, "pidsLimit" },
	};
	for (size_t i = 0; i < 4; i++) {
		req->timeout_ms = 60001;
		req->memory_mb = 1025;
		req->cpus = 2.5;
		req->pids_limit = 257;
		ck_assert_int_eq(serve_limits_apply(&l, req, over[i].flag, &err), -1);
		ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
		ck_assert_msg(strstr(err.message, over[i].name), "%s lacks %s", err.message,
			      over[i].name);
		moat_error_clear(&err);
	}
	/* maxOutputBytes: asked above serve.max, refused; unasked (moat's
	 * default, a Spin script's cap), brought down to it */
	req->timeout_ms = 60000;
	req->memory_mb = 1024;
	req->cpus = 2;
	req->pids_limit = 256;
	req->max_output_bytes = 4194305;
	ck_assert_int_eq(serve_limits_apply(&l, req, all | MOAT_REQ_HAS_MAXOUT, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_msg(strstr(err.message, "maxOutputBytes"), "%s", err.message);
	moat_error_clear(&err);
	req->max_output_bytes = 4194304;
	ck_assert_int_eq(serve_limits_apply(&l, req, all | MOAT_REQ_HAS_MAXOUT, &err), 0);
	ck_assert_uint_eq(req->max_output_bytes, 4194304);
	l.max_output_bytes = 1000;
	req->max_output_bytes = 1048576;
	ck_assert_int_eq(serve_limits_apply(&l, req, all, &err), 0);
	ck_assert_uint_eq(req->max_output_bytes, 1000);
	l.max_output_bytes = 4194304;

	req->timeout_ms = 120000;
	ck_assert_int_eq(serve_limits_apply(&l, req, MOAT_REQ_HAS_TIMEOUT, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(err.message, "timeout"));
	ck_assert_ptr_nonnull(strstr(err.message, "120000"));
	ck_assert_ptr_nonnull(strstr(err.message, "60000"));
	moat_error_clear(&err);
	/* not given: the default replaces it, no error */
	req->timeout_ms = 120000;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 10000);

	/* open network */
	req->network = true;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(err.message, "network"));
	moat_error_clear(&err);
	ck_assert_int_eq(serve_limits_apply(&l, req, MOAT_REQ_HAS_NETWORK, &err), -1);
	moat_error_clear(&err);
	l.allow_open_network = true;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert(req->network);
	l.allow_open_network = false;
	req->network = false;
	req->has_allowed_hosts = true; /* allowedHosts is always allowed */
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	moat_request_free(req);
}
END_TEST

/* ---- the script error line and the outcome ---- */

static char *script_error(struct moat_result *res, const char *stderr_text)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->timeout_ms = 1500;
	req->memory_mb = 128;
	req->pids_limit = 64;
	char *copy = NULL;
	if (stderr_text) {
		/* exact size, no NUL after it: ASan sees any over-read */
		copy = malloc(strlen(stderr_text) ? strlen(stderr_text) : 1);
		ck_assert_ptr_nonnull(copy);
		memcpy(copy, stderr_text, strlen(stderr_text));
		res->stderr_buf = copy;
		res->stderr_len = strlen(stderr_text);
	}
	char *e = serve_script_error(res, req);
	res->stderr_buf = NULL;
	res->stderr_len = 0;
	free(copy);
	moat_request_free(req);
	if (e)
		ck_assert_msg(!strchr(e, '\n') && !strchr(e, '\r'), "%s", e);
	return e;
}

static void expect_error(struct moat_result res, const char *stderr_text, const char *want,
			 bool exact, enum serve_outcome outcome)
{
	char *e = script_error(&res, stderr_text);
	if (!want) {
		ck_assert_msg(e == NULL, "%s", e);
	} else {
		ck_assert_ptr_nonnull(e);
		if (exact)
			ck_assert_str_eq(e, want);
		else
			ck_assert_msg(strstr(e, want), "\"%s\" lacks \"%s\"", e, want);
	}
	free(e);
	ck_assert_int_eq(serve_run_outcome(&res), outcome);
}

START_TEST(script_error_lines)
{
	expect_error((struct moat_result){ .exited = true }, NULL, NULL, true, O_OK);
	expect_error((struct moat_result){ .exited = true }, "warning\n", NULL, true, O_OK);
	expect_error((struct moat_result){ .exited = true, .exit_code = 1 },
		     "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: x\n",
		     "exit code 1: ValueError: x", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 1 },
		     "Traceback...\nValueError: x\n", "exit code 1: ValueError: x", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 2 },
		     "first\nlast line  \r\n\n\n", "exit code 2: last line", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 3 }, "no newline",
		     "exit code 3: no newline", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 3 }, "a\tb\x01",
		     "exit code 3: a b ", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 4 }, NULL, "exit code 4",
		     true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 4 }, "\n\n \n",
		     "exit code 4", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 255 }, "", "exit code 255",
		     true, O_ERROR);
	/* a long last line is cut to its last 300 bytes */
	char longline[1000];
	memset(longline, 'a', 500);
	memset(longline + 500, 'z', 300);
	longline[800] = '\0';
	struct moat_result r1 = { .exited = true, .exit_code = 1 };
	char *e = script_error(&r1, longline);
	ck_assert_uint_eq(strlen(e), strlen("exit code 1: ") + 300);
	ck_assert_ptr_null(strchr(e + strlen("exit code 1: "), 'a'));
	free(e);

	expect_error((struct moat_result){ .timed_out = true, .killed_by = "timeout",
					   .signal = SIGKILL },
		     "partial\n", "timed out after 1500 ms", true, O_TIMEOUT);
	expect_error((struct moat_result){ .timed_out = true }, NULL, "timed out after", false,
		     O_TIMEOUT);
	expect_error((struct moat_result){ .killed_by = "timeout" }, NULL, "timed out after",
		     false, O_TIMEOUT);
	expect_error((struct moat_result){ .oom_killed = true, .killed_by = "oom",
					   .signal = SIGKILL },
		     NULL, "memory limit exceeded (128 MiB)", true, O_OOM);
	expect_error((struct moat_result){ .killed_by = "oom" }, NULL, "memory limit exceeded",
		     false, O_OOM);
	expect_error((struct moat_result){ .killed_by = "pids", .signal = SIGKILL }, NULL,
		     "process limit reached", false, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "seccomp", .signal = SIGSYS }, NULL,
		     "killed by seccomp", false, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "cancelled", .signal = SIGKILL }, NULL,
		     "cancelled", true, O_DISCONNECTED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGKILL }, NULL,
		     "killed by signal SIGKILL", true, O_KILLED);
	expect_error((struct moat_result){ .signal = 9 }, "x\n", "killed by signal SIGKILL", true,
		     O_KILLED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGSEGV }, NULL,
		     "killed by signal SIGSEGV", true, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGABRT }, NULL,
		     "killed by signal SIGABRT", true, O_KILLED);
	expect_error((struct moat_result){ 0 }, NULL, "killed by signal", false, O_KILLED);
	/* a timeout wins over the exit status only when the program did not exit */
	expect_error((struct moat_result){ .exited = true, .exit_code = 0, .timed_out = false },
		     NULL, NULL, true, O_OK);
}
END_TEST

/* ---- metrics ---- */

/* The value of the line that starts with prefix (followed by ' '), or -1. */
static double metric(const char *text, const char *prefix)
{
	size_t pl = strlen(prefix);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, prefix, pl) && l[pl] == ' ')
			return strtod(l + pl + 1, NULL);
	}
	return -1;
}

static size_t count_lines(const char *text, const char *prefix)
{
	size_t n = 0, pl = strlen(prefix);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, prefix, pl))
			n++;
	return n;
}

/* /metrics' relay caps: the gauges (now, the cap) and the refusals, by
 * kind; zero for a service without caps. */
START_TEST(metrics_relays)
{
	struct moat_relay_caps *c = moat_relay_caps_new(2, 1);
	ck_assert_ptr_nonnull(c);
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_DNS));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_DNS));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_DNS));
	struct moat_buf b = { 0 };
	serve_metrics_relays(c, &b);
	char *t = moat_buf_take(&b);
	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relays gauge\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relay_limit gauge\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relay_refused_total counter\n"));
	ck_assert(metric(t, "moat_serve_relays{kind=\"tcp\"}") == 2);
	ck_assert(metric(t, "moat_serve_relays{kind=\"dns\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_limit{kind=\"tcp\"}") == 2);
	ck_assert(metric(t, "moat_serve_relay_limit{kind=\"dns\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"tcp\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"dns\"}") == 2);
	free(t);
	moat_relay_caps_release(c);
	memset(&b, 0, sizeof b);
	serve_metrics_relays(NULL, &b);
	t = moat_buf_take(&b);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"tcp\"}") == 0);
	free(t);
}
END_TEST

START_TEST(metrics_render)
{
	struct serve_metrics m;
	serve_metrics_init(&m);
	char *t = serve_metrics_render(&m);
	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_requests_total counter\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_request_duration_seconds histogram\n"));
	ck_assert_uint_eq(count_lines(t, "moat_serve_requests_total{"), 0);
	ck_assert(metric(t, "moat_serve_in_flight") == 0);
	ck_assert(metric(t, "moat_serve_queued") == 0);
	ck_assert(metric(t, "moat_serve_rejected_total") == 0);
	free(t);

	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.003);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.2);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_TIMEOUT, 1000);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.005); /* le is inclusive */
	serve_metrics_record(&m, R_TS, MOAT_LANG_TYPESCRIPT, O_ERROR, 2);
	serve_metrics_record(&m, R_HEALTHZ, -1, O_OK, 0.0001);
	serve_metrics_record(&m, R_V1_RUN, -1, O_REJECTED, 0.001);
	serve_metrics_record(&m, R_V1_RUN, MOAT_LANG_BASH, O_REJECTED, 0.001);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_REJECTED, 0.001);
	serve_metrics_record(&m, (enum serve_route)99, 99, (enum serve_outcome)99, 0.5);
	m.in_flight = 3;
	m.queued = 2;
	t = serve_metrics_render(&m);
	ck_assert_ptr_nonnull(t);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"ok\"}") == 3);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"timeout\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"ts\",language=\"typescript\","
			    "outcome=\"error\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"healthz\",language=\"none\","
			    "outcome=\"ok\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"v1_run\",language=\"none\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"v1_run\",language=\"bash\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"other\",language=\"none\","
			    "outcome=\"error\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert_uint_eq(count_lines(t, "moat_serve_requests_total{"), 8);
	ck_assert(metric(t, "moat_serve_rejected_total") == 3);
	ck_assert(metric(t, "moat_serve_in_flight") == 3);
	ck_assert(metric(t, "moat_serve_queued") == 2);

	/* the histogram of each route that has requests */
	static const char *const routes[] = { "py", "ts", "healthz", "v1_run", "other" };
	static const unsigned counts[] = { 5, 1, 1, 2, 1 };
	static const char *const les[] = { "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
					   "0.5", "1", "2.5", "5", "10", "30", "60", "300",
					   "+Inf" };
	for (size_t r = 0; r < 5; r++) {
		char name[200];
		double prev = 0;
		for (size_t i = 0; i < 15; i++) {
			snprintf(name, sizeof name,
				 "moat_serve_request_duration_seconds_bucket{route=\"%s\",le=\"%s\"}",
				 routes[r], les[i]);
			double v = metric(t, name);
			ck_assert_msg(v >= prev, "%s: %g after %g", name, v, prev);
			prev = v;
		}
		snprintf(name, sizeof name, "moat_serve_request_duration_seconds_count{route=\"%s\"}",
			 routes[r]);
		ck_assert_msg(metric(t, name) == counts[r], "%s", name);
		ck_assert_msg(prev == counts[r], "+Inf of %s: %g", routes[r], prev);
		snprintf(name, sizeof name,
			 "moat_serve_request_duration_seconds_bucket{route=\"%s\",", routes[r]);
		ck_assert_uint_eq(count_lines(t, name), 15);
	}
	/* no histogram for a route without requests */
	ck_assert_uint_eq(count_lines(t, "moat_serve_request_duration_seconds_bucket{route=\"metrics\""),
			  0);
	/* py: 0.001, 0.003 and 0.005 in le=0.005, 0.2 by le=0.25, 1000 only in +Inf */
	const char *b = "moat_serve_request_duration_seconds_bucket{route=\"py\",le=";
	char name[200];
	snprintf(name, sizeof name, "%s\"0.005\"}", b);
	ck_assert(metric(t, name) == 3);
	snprintf(name, sizeof name, "%s\"0.1\"}", b);
	ck_assert(metric(t, name) == 3);
	snprintf(name, sizeof name, "%s\"0.25\"}", b);
	ck_assert(metric(t, name) == 4);
	snprintf(name, sizeof name, "%s\"300\"}", b);
	ck_assert(metric(t, name) == 4);
	snprintf(name, sizeof name, "%s\"+Inf\"}", b);
	ck_assert(metric(t, name) == 5);
	double sum = metric(t, "moat_serve_request_duration_seconds_sum{route=\"py\"}");
	ck_assert_msg(fabs(sum - 1000.209) < 1e-5, "%g", sum);
	snprintf(name, sizeof name, "moat_serve_request_duration_seconds_bucket{route=\"ts\","
				    "le=\"1\"}");
	ck_assert(metric(t, name) == 0);
	snprintf(name, sizeof name, "moat_serve_request_duration_seconds_bucket{route=\"ts\","
				    "le=\"2.5\"}");
	ck_assert(metric(t, name) == 1);
	/* every line is a comment or "name{labels} value" / "name value" */
	for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
		ck_assert_ptr_nonnull(strchr(l, '\n'));
		ck_assert(l[0] == '#' || !strncmp(l, "moat_serve_", 11));
	}
	free(t);

	ck_assert_str_eq(serve_route_name(R_V1_RUN), "v1_run");
	ck_assert_str_eq(serve_route_name((enum serve_route)77), "other");
	ck_assert_str_eq(serve_outcome_name(O_DISCONNECTED), "disconnected");
	ck_assert_str_eq(serve_outcome_name((enum serve_outcome)77), "error");
	ck_assert_str_eq(serve_route_template(R_KV), "/v1/kv/{id}");
	ck_assert_str_eq(serve_route_template(R_PY), "/py/{path}");
	ck_assert_str_eq(serve_route_template((enum serve_route)77), "/{unknown}");
	for (int r = 0; r < R__COUNT; r++)
		ck_assert_ptr_nonnull(serve_route_template((enum serve_route)r));
	pthread_mutex_destroy(&m.mu);
}
END_TEST

/* A TCP socket bound to addr, port 0 (IPv6 when v6); -1 when the address
 * cannot be bound here. */
static int bound_tcp(const char *addr, bool v6)
{
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a4 = { .sin_family = AF_INET };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
	ck_assert_int_eq(v6 ? inet_pton(AF_INET6, addr, &a6.sin6_addr)
			    : inet_pton(AF_INET, addr, &a4.sin_addr), 1);
	if (v6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6) : bind(fd, (struct sockaddr *)&a4,
									 sizeof a4)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* moat_serve_auth_check: TCP needs the token, loopback too, unless no_auth
 * on loopback; a unix socket needs neither; no_auth never with a token. */
START_TEST(auth_check_listeners)
{
	int sp[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	struct {
		const char *what, *addr;
		bool v6, is_unix;
		int want[2][2]; /* [token][no_auth]: 0 allowed, -1 refused */
	} l[] = {
		{ "127.0.0.1", "127.0.0.1", false, false, { { -1, 0 }, { 0, -1 } } },
		{ "127.0.0.2", "127.0.0.2", false, false, { { -1, 0 }, { 0, -1 } } },
		{ "0.0.0.0", "0.0.0.0", false, false, { { -1, -1 }, { 0, -1 } } },
		{ "::1", "::1", true, false, { { -1, 0 }, { 0, -1 } } },
		{ "::", "::", true, false, { { -1, -1 }, { 0, -1 } } },
		{ "unix", NULL, false, true, { { 0, 0 }, { 0, -1 } } },
	};
	for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) {
		int fd = l[i].addr ? bound_tcp(l[i].addr, l[i].v6) : sp[0];
		if (fd < 0) {
			fprintf(stderr, "note: auth_check_listeners: cannot bind %s here; not run\n",
				l[i].what);
			continue;
		}
		for (int t = 0; t < 2; t++)
			for (int n = 0; n < 2; n++) {
				const char *why = NULL;
				bool is_unix = !l[i].is_unix;
				int rc = moat_serve_auth_check(fd, t, n, &is_unix, &why);
				ck_assert_msg(rc == l[i].want[t][n],
					      "%s, token %d, no_auth %d: %d (want %d): %s", l[i].what,
					      t, n, rc, l[i].want[t][n], why ? why : "");
				ck_assert_msg(rc == 0 || (why && strstr(why, "--token-file")),
					      "%s: the refusal does not name --token-file: %s",
					      l[i].what, why ? why : "(none)");
				ck_assert_msg(is_unix == l[i].is_unix, "%s: is_unix %d", l[i].what,
					      is_unix);
			}
		if (l[i].addr)
			close(fd);
	}
	/* loopback without either: both ways out named */
	int fd = bound_tcp("127.0.0.1", false);
	const char *why = NULL;
	ck_assert_int_eq(moat_serve_auth_check(fd, false, false, NULL, &why), -1);
	ck_assert_msg(strstr(why, "--token-file") && strstr(why, "--no-auth"), "%s", why);
	close(fd);
	/* not a socket */
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(moat_serve_auth_check(p[0], true, false, NULL, &why), -1);
	close(p[0]);
	close(p[1]);
	close(sp[0]);
	close(sp[1]);
}
END_TEST

/* ---- the log (log.c) ---- */

static long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the pipe until it has been quiet for quiet_ms; appends to *all. */
static void read_quiet(int fd, char **all, size_t *len, long quiet_ms)
{
	char buf[65536];
	for (;;) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, (int)quiet_ms) <= 0)
			return;
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			return;
		*all = realloc(*all, *len + (size_t)n + 1);
		ck_assert_ptr_nonnull(*all);
		memcpy(*all + *len, buf, (size_t)n);
		*len += (size_t)n;
		(*all)[*len] = '\0';
	}
}

/* Writers never wait for the reader: with nobody reading, 3 MiB of lines
 * are queued or dropped at once; what comes out once the reader is back is
 * whole lines in order (the ring wrapped), the drops are counted and said,
 * and lines written after that come through. */
START_TEST(log_never_blocks)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	FILE *f = fdopen(p[1], "w");
	ck_assert_ptr_nonnull(f);
	struct serve_log l;
	struct moat_error err = { 0 };
	ck_assert_int_eq(serve_log_init(&l, f, false, &err), 0);
	enum { N = 30000 };
	char line[128];
	long t0 = mono_ms();
	for (int i = 0; i < N; i++) {
		int n = snprintf(line, sizeof line, "line %06d %s\n", i,
				 "................................................................"
				 "......................");
		serve_log_write(&l, line, (size_t)n);
	}
	long took = mono_ms() - t0;
	ck_assert_msg(took < 5000, "30000 lines with nobody reading took %ld ms", took);
	uint64_t dropped = serve_log_dropped(&l);
	ck_assert_msg(dropped > 10000 && dropped < N, "dropped %llu of %d", (unsigned long long)dropped,
		      N);
	char *all = NULL;
	size_t len = 0;
	read_quiet(p[0], &all, &len, 500);
	serve_log_write(&l, "after the reader came back\n", 27);
	read_quiet(p[0], &all, &len, 500);
	ck_assert_ptr_nonnull(all);
	/* every line whole, numbers increasing, the drop notice before the last */
	int last = -1, count = 0;
	bool notice = false, after = false;
	for (char *save = NULL, *s = strtok_r(all, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
		int i;
		if (sscanf(s, "line %d", &i) == 1) {
			ck_assert_msg(!notice, "a queued line after the drop notice: %s", s);
			ck_assert_msg(i > last && strlen(s) == 98, "line out of order or cut: [%s]", s);
			last = i;
			count++;
		} else if (strstr(s, "log line(s) dropped")) {
			char want[64];
			snprintf(want, sizeof want, "moat serve: %llu log line(s) dropped",
				 (unsigned long long)dropped);
			ck_assert_msg(!strncmp(s, want, strlen(want)), "[%s] (want %s)", s, want);
			notice = true;
		} else {
			ck_assert_str_eq(s, "after the reader came back");
			after = true;
		}
	}
	ck_assert_msg((uint64_t)count + dropped == N, "%d lines out + %llu dropped != %d", count,
		      (unsigned long long)dropped, N);
	ck_assert(notice && after);
	free(all);
	/* the stop with a reader gone: bounded (the writer gets 2 s) */
	for (int i = 0; i < 20000; i++)
		serve_log_write(&l, line, strlen(line));
	t0 = mono_ms();
	serve_log_destroy(&l);
	took = mono_ms() - t0;
	ck_assert_msg(took < 4000, "the stop took %ld ms with nobody reading", took);
	/* the writer left behind gets EPIPE (SIGPIPE blocked) and ends; f
	 * stays open: it may still be writing to it (as a service's stderr
	 * stays open until the process exits) */
	close(p[0]);
}
END_TEST

Suite *serve_suite(void)
{
	Suite *s = suite_create("serve");
	TCase *tc = tcase_create("serve");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, envelope_seed);
	tcase_add_test(tc, envelope_required_and_types);
	tcase_add_test(tc, envelope_trailing_data);
	tcase_add_test(tc, envelope_header_id);
	tcase_add_test(tc, envelope_code_size);
	tcase_add_test(tc, envelope_kv);
	tcase_add_test(tc, envelope_allowed_hosts);
	tcase_add_test(tc, envelope_input);
	tcase_add_test(tc, envelope_python_handler);
	tcase_add_test(tc, envelope_ts_handler);
	tcase_add_test(tc, is_handler_edges);
	tcase_add_test(tc, frames_valid);
	tcase_add_test(tc, frames_errors);
	tcase_add_test(tc, frames_after_end);
	tcase_add_test(tc, frames_random);
	tcase_add_test(tc, frame_vectors);
	tcase_add_test(tc, limits_parse);
	tcase_add_test(tc, limits_message_names_key);
	tcase_add_test(tc, limits_apply);
	tcase_add_test(tc, script_error_lines);
	tcase_add_test(tc, metrics_render);
	tcase_add_test(tc, metrics_relays);
	tcase_add_test(tc, auth_check_listeners);
	tcase_add_test(tc, log_never_blocks);
	suite_add_tcase(s, tc);
	return s;
}
