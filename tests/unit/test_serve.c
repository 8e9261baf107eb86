/* Unit tests: the pure logic of `moat serve` (src/serve): the Spin envelope,
 * handler detection, the handler frame parser, the operator limits, the
 * script error line and the metrics. Here: the envelope, handler detection
 * and the suite; the frames are in test_serve_frames.c, the limits, script
 * error line, metrics and log in test_serve_limits.c. */
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


/* The suite's other files (test_serve_frames.c, test_serve_limits.c): their
 * tests, added to the one tcase in order. */
void serve_frames_tests(TCase *tc);
void serve_limits_tests(TCase *tc);

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

/* Ids name their node (docs/scaling.md): sbx_<node>_<32 hex>; this node's
 * ids are valid, another node's are "elsewhere", anything else neither. */
START_TEST(ids_name_node)
{
	static const char *const good[] = { "a", "node-1", "0", "abcdefghijklmnopqrstuvwxyz012345" };
	static const char *const bad[] = { "", "A", "a_b", "a.b", "n\xc3\xa9",
					   "abcdefghijklmnopqrstuvwxyz0123456" };
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		ck_assert_msg(serve_node_name_valid(good[i], strlen(good[i])), "%s", good[i]);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		ck_assert_msg(!serve_node_name_valid(bad[i], strlen(bad[i])), "%s", bad[i]);
		ck_assert_int_eq(serve_node_set(bad[i]), -1);
	}
	char def[SERVE_NODE_MAX + 1], def2[SERVE_NODE_MAX + 1];
	serve_node_default(def);
	serve_node_default(def2);
	ck_assert_str_eq(def, def2);
	ck_assert_msg(strlen(def) == 9 && def[0] == 'n' && serve_node_name_valid(def, 9), "%s", def);

	ck_assert_int_eq(serve_node_set("node-a"), 0);
	ck_assert_str_eq(serve_node(), "node-a");
	char id[SERVE_ID_LEN + 1], id2[SERVE_ID_LEN + 1], node[SERVE_NODE_MAX + 1];
	ck_assert_int_eq(serve_new_id(id, "sbx_"), 0);
	ck_assert_int_eq(serve_new_id(id2, "sbx_"), 0);
	ck_assert_str_ne(id, id2);
	ck_assert_uint_eq(strlen(id), 4 + 6 + 1 + 32);
	ck_assert_msg(!strncmp(id, "sbx_node-a_", 11), "%s", id);
	ck_assert(serve_id_valid(id, "sbx_"));
	ck_assert(!serve_id_valid(id, "ses_"));
	ck_assert(!serve_id_elsewhere(id, "sbx_", node));

	char other[128];
	snprintf(other, sizeof other, "sbx_node-b_%s", id + 11);
	ck_assert(!serve_id_valid(other, "sbx_"));
	ck_assert(serve_id_elsewhere(other, "sbx_", node));
	ck_assert_str_eq(node, "node-b");
	/* a name that is this one's prefix, or has it as prefix: another node */
	snprintf(other, sizeof other, "sbx_node_%s", id + 11);
	ck_assert(!serve_id_valid(other, "sbx_") && serve_id_elsewhere(other, "sbx_", node));
	snprintf(other, sizeof other, "sbx_node-ab_%s", id + 11);
	ck_assert(!serve_id_valid(other, "sbx_") && serve_id_elsewhere(other, "sbx_", node));
	/* neither: the old form, a short or upper-case random part, a bad name,
	 * a name too long, no name */
	static const char *const neither[] = {
		"sbx_0123456789abcdef0123456789abcdef",
		"sbx_node-a_0123456789abcdef0123456789abcde",
		"sbx_node-a_0123456789ABCDEF0123456789abcdef",
		"sbx_node-a_0123456789abcdef0123456789abcdef0",
		"sbx_Node-a_0123456789abcdef0123456789abcdef",
		"sbx_a_b_0123456789abcdef0123456789abcdef",
		"sbx__0123456789abcdef0123456789abcdef",
		"sbx_abcdefghijklmnopqrstuvwxyz0123456_0123456789abcdef0123456789abcdef",
		"ses_node-b_0123456789abcdef0123456789abcdef",
		"",
	};
	for (size_t i = 0; i < sizeof neither / sizeof *neither; i++)
		ck_assert_msg(!serve_id_valid(neither[i], "sbx_") &&
				      !serve_id_elsewhere(neither[i], "sbx_", node),
			      "%s", neither[i]);
	/* the longest name: the longest id */
	ck_assert_int_eq(serve_node_set("abcdefghijklmnopqrstuvwxyz012345"), 0);
	ck_assert_int_eq(serve_new_id(id, "ses_"), 0);
	ck_assert_uint_eq(strlen(id), SERVE_ID_LEN);
	ck_assert(serve_id_valid(id, "ses_"));

	struct serve_limits l;
	serve_limits_default(&l);
	ck_assert_str_eq(l.node, "");
	struct moat_error err = { 0 };
	ck_assert_int_eq(serve_limits_parse("{\"node\":\"edge-7\"}", &l, &err), 0);
	ck_assert_str_eq(l.node, "edge-7");
	ck_assert_int_eq(serve_limits_parse("{\"node\":\"Edge_7\"}", &l, &err), -1);
	ck_assert_msg(strstr(err.message, "serve.node"), "%s", err.message);
	moat_error_clear(&err);
	ck_assert_int_eq(serve_limits_parse("{\"node\":7}", &l, &err), -1);
	moat_error_clear(&err);
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
	tcase_add_test(tc, ids_name_node);
	serve_frames_tests(tc);
	serve_limits_tests(tc);
	suite_add_tcase(s, tc);
	return s;
}
