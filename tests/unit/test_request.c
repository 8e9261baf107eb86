/* Unit tests: request parsing and validation (src/core/request.c). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "suites.h"
#include "core/core.h"

#define MIB (1024u * 1024u)

static void no_controls(const char *msg)
{
	ck_assert_ptr_nonnull(msg);
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
		ck_assert_msg(*p >= 0x20 && *p < 0x7f, "byte 0x%02x in message", *p);
}

static struct moat_request *parse_ok_len(const char *json, size_t len)
{
	struct moat_error err = { 0 };
	struct moat_request *req = NULL;
	int rc = moat_request_parse_json(json, len, &req, &err);
	ck_assert_msg(rc == 0, "%.200s: %s", json, err.message ? err.message : "(null)");
	ck_assert_ptr_nonnull(req);
	ck_assert_ptr_null(err.message);
	return req;
}

static struct moat_request *parse_ok(const char *json)
{
	return parse_ok_len(json, strlen(json));
}

/* Parses json; asserts failure with the type and a message substring. */
static void fail_len(const char *json, size_t len, enum moat_error_type type,
		     const char *substr)
{
	struct moat_error err = { 0 };
	/* A stale message must be replaced, not leaked. */
	moat_error_set(&err, MOAT_ERR_UNAVAILABLE, 0, "stale");
	struct moat_request *req = (struct moat_request *)&err; /* any non-NULL value */
	int rc = moat_request_parse_json(json, len, &req, &err);
	ck_assert_msg(rc == -1, "accepted: %.200s", json);
	ck_assert_ptr_null(req);
	ck_assert_msg(err.type == type, "%.200s: got %s (%s)", json,
		      moat_error_type_name(err.type), err.message);
	ck_assert_ptr_nonnull(err.message);
	ck_assert_msg(strstr(err.message, substr), "%.200s: message \"%s\" lacks \"%s\"", json,
		      err.message, substr);
	no_controls(err.message);
	moat_error_clear(&err);
}

#define FAIL(json, type, substr) fail_len(json, strlen(json), type, substr)
#define CONFIG MOAT_ERR_CONFIG
#define POLICY MOAT_ERR_POLICY

/* Builds text with the moat_buf writer under test elsewhere; caller frees. */
static char *repeat(const char *unit, size_t n)
{
	struct moat_buf b = { 0 };
	for (size_t i = 0; i < n; i++)
		moat_buf_append(&b, unit, strlen(unit));
	char *s = moat_buf_take(&b);
	ck_assert_ptr_nonnull(s);
	return s;
}

START_TEST(new_defaults)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	ck_assert_ptr_null(req->code);
	ck_assert_int_eq(req->language, MOAT_LANG_PYTHON);
	ck_assert_uint_eq(req->timeout_ms, 30000);
	ck_assert_uint_eq(req->max_output_bytes, 1024 * 1024);
	ck_assert_uint_eq(req->env_count, 0);
	ck_assert_uint_eq(req->files_count, 0);
	ck_assert_ptr_null(req->stdin_data);
	ck_assert(!req->network);
	ck_assert(!req->strict_limits);
	ck_assert_uint_eq(req->memory_mb, 0);
	ck_assert(req->cpus == 0);
	ck_assert_uint_eq(req->pids_limit, 0);
	/* No code yet: invalid. */
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_request_validate(req, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, "missing required key \"code\""));
	moat_error_clear(&err);
	moat_request_free(req);
	moat_request_free(NULL);
}
END_TEST

START_TEST(minimal)
{
	struct moat_request *req = parse_ok("{\"code\":\"print(6*7)\"}");
	ck_assert_str_eq(req->code, "print(6*7)");
	ck_assert_uint_eq(req->code_len, 10);
	ck_assert_int_eq(req->language, MOAT_LANG_PYTHON); /* default */
	ck_assert_uint_eq(req->timeout_ms, 30000);
	ck_assert_uint_eq(req->max_output_bytes, 1024 * 1024);
	ck_assert_uint_eq(req->env_count, 0);
	ck_assert_uint_eq(req->files_count, 0);
	ck_assert_ptr_null(req->stdin_data);
	moat_request_free(req);

	req = parse_ok(" \n\t{ \"code\" : \"\" }\r\n ");
	ck_assert_str_eq(req->code, "");
	ck_assert_uint_eq(req->code_len, 0);
	moat_request_free(req);
}
END_TEST

START_TEST(every_key)
{
	struct moat_request *req = parse_ok(
		"{\"code\":\"console.log(1)\",\"language\":\"javascript\",\"timeout\":5000,"
		"\"env\":{\"B\":\"2\",\"A\":\"1\",\"_x\":\"\"},"
		"\"files\":{\"z.txt\":\"zz\",\"dir/a.txt\":\"a\\nb\",\"m\":\"\"},"
		"\"stdin\":\"in\\u0001put\",\"network\":true,\"memoryMb\":512,\"cpus\":0.5,"
		"\"pidsLimit\":100,\"strictLimits\":true,\"maxOutputBytes\":4096}");
	ck_assert_str_eq(req->code, "console.log(1)");
	ck_assert_int_eq(req->language, MOAT_LANG_JAVASCRIPT);
	ck_assert_uint_eq(req->timeout_ms, 5000);
	ck_assert_uint_eq(req->env_count, 3);
	ck_assert_str_eq(req->env[0].key, "B");
	ck_assert_str_eq(req->env[0].value, "2");
	ck_assert_uint_eq(req->env[0].value_len, 1);
	ck_assert_str_eq(req->env[1].key, "A");
	ck_assert_str_eq(req->env[2].key, "_x");
	ck_assert_str_eq(req->env[2].value, "");
	ck_assert_uint_eq(req->env[2].value_len, 0);
	/* Document order is kept. */
	ck_assert_uint_eq(req->files_count, 3);
	ck_assert_str_eq(req->files[0].key, "z.txt");
	ck_assert_str_eq(req->files[1].key, "dir/a.txt");
	ck_assert_str_eq(req->files[1].value, "a\nb");
	ck_assert_uint_eq(req->files[1].value_len, 3);
	ck_assert_str_eq(req->files[2].key, "m");
	ck_assert_uint_eq(req->stdin_len, 6);
	ck_assert_mem_eq(req->stdin_data, "in\x01put", 6);
	ck_assert(req->network);
	ck_assert_uint_eq(req->memory_mb, 512);
	ck_assert(req->cpus == 0.5);
	ck_assert_uint_eq(req->pids_limit, 100);
	ck_assert(req->strict_limits);
	ck_assert_uint_eq(req->max_output_bytes, 4096);
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	moat_request_free(req);

	req = parse_ok("{\"code\":\"x\",\"network\":false,\"strictLimits\":false,\"env\":{},"
		       "\"files\":{},\"stdin\":\"\",\"cpus\":1024,\"timeout\":86400000,"
		       "\"memoryMb\":1048576,\"pidsLimit\":4194304,\"maxOutputBytes\":1073741824}");
	ck_assert(!req->network);
	ck_assert_uint_eq(req->env_count, 0);
	ck_assert_uint_eq(req->stdin_len, 0);
	ck_assert(req->cpus == 1024);
	ck_assert_uint_eq(req->timeout_ms, 86400000);
	ck_assert_uint_eq(req->max_output_bytes, 1073741824);
	moat_request_free(req);

	/* Exponent notation is fine when the value is integral. */
	req = parse_ok("{\"code\":\"x\",\"timeout\":1e3,\"memoryMb\":2.0E2}");
	ck_assert_uint_eq(req->timeout_ms, 1000);
	ck_assert_uint_eq(req->memory_mb, 200);
	moat_request_free(req);
}
END_TEST

START_TEST(languages)
{
	struct { const char *name; enum moat_language id; } cases[] = {
		{ "python", MOAT_LANG_PYTHON }, { "javascript", MOAT_LANG_JAVASCRIPT },
		{ "typescript", MOAT_LANG_TYPESCRIPT }, { "bash", MOAT_LANG_BASH },
		{ "sh", MOAT_LANG_SH }, { "py", MOAT_LANG_PYTHON }, { "node", MOAT_LANG_JAVASCRIPT },
		{ "ts", MOAT_LANG_TYPESCRIPT }, { "shell", MOAT_LANG_SH },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"language\":\"%s\",\"code\":\"x\"}", cases[i].name);
		char *json = moat_buf_take(&b);
		struct moat_request *req = parse_ok(json);
		ck_assert_int_eq(req->language, cases[i].id);
		moat_request_free(req);
		free(json);
	}
	FAIL("{\"code\":\"x\",\"language\":\"ruby\"}", CONFIG, "unknown language \"ruby\"");
	FAIL("{\"code\":\"x\",\"language\":\"ruby\"}", CONFIG,
	     "python, javascript, typescript, bash, sh");
	FAIL("{\"code\":\"x\",\"language\":\"Python\"}", CONFIG, "unknown language");
	FAIL("{\"code\":\"x\",\"language\":\"\"}", CONFIG, "unknown language \"\"");
	FAIL("{\"code\":\"x\",\"language\":\"py\\nthon\"}", CONFIG, "\"py\\x0athon\"");
}
END_TEST

START_TEST(wrong_types)
{
	struct { const char *json, *substr; } cases[] = {
		{ "{\"code\":1}", "\"code\" must be a string, got a number" },
		{ "{\"code\":null}", "\"code\" must be a string, got null" },
		{ "{\"code\":[\"x\"]}", "\"code\" must be a string, got an array" },
		{ "{\"code\":\"x\",\"language\":1}", "\"language\" must be a string" },
		{ "{\"code\":\"x\",\"timeout\":\"5\"}", "\"timeout\" must be an integer, got a string" },
		{ "{\"code\":\"x\",\"timeout\":true}", "\"timeout\" must be an integer, got a boolean" },
		{ "{\"code\":\"x\",\"env\":[]}", "\"env\" must be an object of strings, got an array" },
		{ "{\"code\":\"x\",\"env\":\"A=1\"}", "\"env\" must be an object" },
		{ "{\"code\":\"x\",\"env\":{\"A\":1}}", "\"env\" entry \"A\" must be a string, got a number" },
		{ "{\"code\":\"x\",\"env\":{\"A\":null}}", "\"env\" entry \"A\" must be a string, got null" },
		{ "{\"code\":\"x\",\"files\":\"x\"}", "\"files\" must be an object of strings" },
		{ "{\"code\":\"x\",\"files\":{\"a\":{}}}", "\"files\" entry \"a\" must be a string, got an object" },
		{ "{\"code\":\"x\",\"stdin\":5}", "\"stdin\" must be a string" },
		{ "{\"code\":\"x\",\"network\":\"true\"}", "\"network\" must be a boolean, got a string" },
		{ "{\"code\":\"x\",\"network\":1}", "\"network\" must be a boolean" },
		{ "{\"code\":\"x\",\"memoryMb\":\"1\"}", "\"memoryMb\" must be an integer" },
		{ "{\"code\":\"x\",\"cpus\":true}", "\"cpus\" must be a number, got a boolean" },
		{ "{\"code\":\"x\",\"pidsLimit\":[]}", "\"pidsLimit\" must be an integer" },
		{ "{\"code\":\"x\",\"strictLimits\":0}", "\"strictLimits\" must be a boolean" },
		{ "{\"code\":\"x\",\"maxOutputBytes\":{}}", "\"maxOutputBytes\" must be an integer" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		FAIL(cases[i].json, CONFIG, cases[i].substr);
}
END_TEST

START_TEST(unknown_and_duplicate_keys)
{
	FAIL("{\"code\":\"x\",\"foo\":1}", CONFIG, "unknown key \"foo\"");
	FAIL("{\"Code\":\"x\"}", CONFIG, "unknown key \"Code\"");
	FAIL("{\"code\":\"x\",\"\":1}", CONFIG, "unknown key \"\"");
	FAIL("{\"code\":\"x\",\"timeoutMs\":1}", CONFIG, "unknown key \"timeoutMs\"");
	FAIL("{\"code\":\"x\",\"a\\u001bb\":1}", CONFIG, "unknown key \"a\\x1bb\"");
	FAIL("{\"code\":\"x\",\"code\":\"y\"}", CONFIG, "duplicate key \"code\"");
	FAIL("{\"code\":\"x\",\"timeout\":1,\"timeout\":1}", CONFIG, "duplicate key \"timeout\"");
	FAIL("{\"code\":\"x\",\"env\":{\"A\":\"1\",\"B\":\"2\",\"A\":\"3\"}}", CONFIG,
	     "duplicate env name \"A\"");
	FAIL("{\"code\":\"x\",\"files\":{\"a\":\"1\",\"a\":\"2\"}}", CONFIG,
	     "duplicate file path \"a\"");
	/* Escapes are decoded before comparing. */
	FAIL("{\"code\":\"x\",\"c\\u006fde\":\"y\"}", CONFIG, "duplicate key \"code\"");
}
END_TEST

START_TEST(missing_code)
{
	FAIL("{}", CONFIG, "missing required key \"code\"");
	FAIL("{\"language\":\"python\"}", CONFIG, "missing required key \"code\"");
}
END_TEST

START_TEST(code_size)
{
	size_t max = MOAT_MAX_CODE_BYTES;
	char *json = malloc(max + 32);
	strcpy(json, "{\"code\":\"");
	size_t off = strlen(json);
	memset(json + off, 'a', max);
	strcpy(json + off + max, "\"}");
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(req->code_len, max);
	moat_request_free(req);

	json = realloc(json, max + 33);
	memset(json + off, 'a', max + 1);
	strcpy(json + off + max + 1, "\"}");
	FAIL(json, POLICY, "\"code\" is too large: 5242881 bytes");
	free(json);
}
END_TEST

static char *nested(size_t depth)
{
	/* {"code":"x","x": + (depth-1) arrays + } */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"x\":");
	for (size_t i = 1; i < depth; i++)
		moat_buf_append(&b, "[", 1);
	for (size_t i = 1; i < depth; i++)
		moat_buf_append(&b, "]", 1);
	moat_buf_append(&b, "}", 1);
	return moat_buf_take(&b);
}

START_TEST(nesting_depth)
{
	char *d32 = nested(32), *d33 = nested(33);
	/* 32 levels get past the depth check (and fail later, on the key). */
	FAIL(d32, CONFIG, "unknown key \"x\"");
	FAIL(d33, CONFIG, "nests deeper than 32 levels");
	free(d32);
	free(d33);
	char *deep = repeat("[", 100000);
	FAIL(deep, CONFIG, "nests deeper than 32 levels");
	free(deep);
	char *objs = repeat("{\"a\":", 40);
	FAIL(objs, CONFIG, "nests deeper");
	free(objs);
	/* Brackets inside strings do not count. */
	char *brackets = repeat("[{", 100);
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"%s\\\"[[[\"}", brackets);
	char *json = moat_buf_take(&b);
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(req->code_len, 204);
	moat_request_free(req);
	free(json);
	free(brackets);
}
END_TEST

START_TEST(nul_escapes)
{
	FAIL("{\"code\":\"a\\u0000b\"}", POLICY, "NUL characters are not allowed (in \"code\")");
	FAIL("{\"code\":\"x\",\"env\":{\"A\":\"\\u0000\"}}", POLICY,
	     "NUL characters are not allowed (in \"env\")");
	FAIL("{\"code\":\"x\",\"env\":{\"A\\u0000B\":\"v\"}}", POLICY, "(in \"env\")");
	FAIL("{\"code\":\"x\",\"files\":{\"a\":\"x\\u0000\"}}", POLICY, "(in \"files\")");
	FAIL("{\"code\":\"x\",\"files\":{\"a\\u0000.txt\":\"x\"}}", POLICY, "(in \"files\")");
	FAIL("{\"code\":\"x\",\"stdin\":\"\\u0000\"}", POLICY, "(in \"stdin\")");
	FAIL("{\"code\":\"x\",\"co\\u0000de\":1}", POLICY, "NUL characters are not allowed");
	FAIL("\"\\u0000\"", POLICY, "NUL characters are not allowed");
	/* An escaped backslash followed by a real \u0000 escape. */
	FAIL("{\"code\":\"\\\\\\u0000\"}", POLICY, "(in \"code\")");

	/* "\\u0000" is a backslash and the text u0000: fine. */
	struct moat_request *req = parse_ok("{\"code\":\"\\\\u0000\",\"stdin\":\"\\\\\\\\u0000\"}");
	ck_assert_str_eq(req->code, "\\u0000");
	ck_assert_uint_eq(req->code_len, 6);
	ck_assert_str_eq(req->stdin_data, "\\\\u0000");
	moat_request_free(req);
	/* Other \u escapes are fine. */
	req = parse_ok("{\"code\":\"\\u0041\\u00e9\\u0001\\ud83d\\ude00\"}");
	ck_assert_str_eq(req->code, "A\xc3\xa9\x01\xf0\x9f\x98\x80");
	moat_request_free(req);
}
END_TEST

START_TEST(raw_nul_byte)
{
	const char json[] = "{\"code\":\"a\0b\"}";
	fail_len(json, sizeof json - 1, CONFIG, "NUL byte at byte offset 10");
	const char json2[] = "{\"code\":\"ab\"}\0";
	fail_len(json2, sizeof json2 - 1, CONFIG, "NUL byte");
}
END_TEST

START_TEST(malformed)
{
	FAIL("", CONFIG, "empty request");
	fail_len(NULL, 0, CONFIG, "empty request");
	FAIL("  \n\t ", CONFIG, "empty request");
	FAIL("{\"code\":}", CONFIG, "malformed JSON at byte offset");
	FAIL("{\"code\":\"x\"", CONFIG, "malformed JSON");
	FAIL("{\"code\":\"x\",}", CONFIG, "malformed JSON");
	FAIL("{code:\"x\"}", CONFIG, "malformed JSON at byte offset ");
	FAIL("{\"code\":'x'}", CONFIG, "malformed JSON");
	FAIL("{\"code\":\"x\"} x", CONFIG, "unexpected data after the JSON value at byte offset 13");
	FAIL("{\"code\":\"x\"}{}", CONFIG, "unexpected data after the JSON value at byte offset 12");
	FAIL("{\"code\":\"x\",\"timeout\":NaN}", CONFIG, "malformed JSON");
	FAIL("{\"code\":\"\\x\"}", CONFIG, "malformed JSON");
	FAIL("{\"code\":\"\\ud800\"}", CONFIG, "malformed JSON");
	/* Non-object top levels. */
	FAIL("[]", CONFIG, "request must be a JSON object, got an array");
	FAIL("\"code\"", CONFIG, "must be a JSON object, got a string");
	FAIL("1", CONFIG, "must be a JSON object, got a number");
	FAIL("null", CONFIG, "must be a JSON object, got null");
	FAIL("true", CONFIG, "must be a JSON object, got a boolean");
	/* Trailing whitespace is fine; only len bytes are read. */
	const char buf[] = "{\"code\":\"x\"}\n\n GARBAGE";
	struct moat_request *req = parse_ok_len(buf, 15);
	ck_assert_str_eq(req->code, "x");
	moat_request_free(req);
	/* A cut-off buffer is malformed even though the bytes after it would fix it. */
	fail_len(buf, 11, CONFIG, "malformed JSON");
}
END_TEST

START_TEST(numbers)
{
	FAIL("{\"code\":\"x\",\"timeout\":1500.5}", CONFIG, "\"timeout\" must be an integer, got 1500.5");
	FAIL("{\"code\":\"x\",\"timeout\":0}", CONFIG, "\"timeout\" must be between 1 and 86400000, got 0");
	FAIL("{\"code\":\"x\",\"timeout\":-5}", CONFIG, "\"timeout\" must be between 1 and 86400000, got -5");
	FAIL("{\"code\":\"x\",\"timeout\":0.5}", CONFIG, "\"timeout\" must be between 1");
	FAIL("{\"code\":\"x\",\"timeout\":86400001}", CONFIG, "must be between 1 and 86400000");
	FAIL("{\"code\":\"x\",\"timeout\":1e400}", CONFIG, "\"timeout\" must be a finite number");
	FAIL("{\"code\":\"x\",\"timeout\":-1e400}", CONFIG, "\"timeout\" must be a finite number");
	FAIL("{\"code\":\"x\",\"timeout\":1e300}", CONFIG, "must be between");
	FAIL("{\"code\":\"x\",\"memoryMb\":0}", CONFIG, "\"memoryMb\" must be between 1 and 1048576");
	FAIL("{\"code\":\"x\",\"memoryMb\":1048577}", CONFIG, "\"memoryMb\" must be between");
	FAIL("{\"code\":\"x\",\"memoryMb\":1.5}", CONFIG, "\"memoryMb\" must be an integer");
	FAIL("{\"code\":\"x\",\"memoryMb\":1e400}", CONFIG, "finite");
	FAIL("{\"code\":\"x\",\"pidsLimit\":0}", CONFIG, "\"pidsLimit\" must be between 1 and 4194304");
	FAIL("{\"code\":\"x\",\"pidsLimit\":4194305}", CONFIG, "\"pidsLimit\" must be between");
	FAIL("{\"code\":\"x\",\"pidsLimit\":10.25}", CONFIG, "\"pidsLimit\" must be an integer");
	FAIL("{\"code\":\"x\",\"maxOutputBytes\":0}", CONFIG, "\"maxOutputBytes\" must be between 1 and 1073741824");
	FAIL("{\"code\":\"x\",\"maxOutputBytes\":1073741825}", CONFIG, "\"maxOutputBytes\"");
	FAIL("{\"code\":\"x\",\"cpus\":0}", CONFIG, "\"cpus\" must be greater than 0 and at most 1024, got 0");
	FAIL("{\"code\":\"x\",\"cpus\":-1}", CONFIG, "\"cpus\" must be greater than 0");
	FAIL("{\"code\":\"x\",\"cpus\":1024.5}", CONFIG, "got 1024.5");
	FAIL("{\"code\":\"x\",\"cpus\":1e400}", CONFIG, "\"cpus\" must be a finite number");
	struct moat_request *req = parse_ok("{\"code\":\"x\",\"cpus\":0.001,\"timeout\":1}");
	ck_assert(req->cpus == 0.001);
	ck_assert_uint_eq(req->timeout_ms, 1);
	moat_request_free(req);
	/* -0 is zero. */
	FAIL("{\"code\":\"x\",\"timeout\":-0}", CONFIG, "must be between 1");
}
END_TEST

START_TEST(env_names)
{
	FAIL("{\"code\":\"x\",\"env\":{\"BAD;NAME\":\"v\"}}", POLICY, "invalid env name \"BAD;NAME\"");
	FAIL("{\"code\":\"x\",\"env\":{\"$(rm -rf /)\":\"v\"}}", POLICY, "invalid env name \"$(rm -rf /)\"");
	FAIL("{\"code\":\"x\",\"env\":{\"1ABC\":\"v\"}}", POLICY, "invalid env name \"1ABC\"");
	FAIL("{\"code\":\"x\",\"env\":{\"\":\"v\"}}", POLICY, "invalid env name \"\"");
	FAIL("{\"code\":\"x\",\"env\":{\"A=B\":\"v\"}}", POLICY, "invalid env name \"A=B\"");
	FAIL("{\"code\":\"x\",\"env\":{\"A\\nB\":\"v\"}}", POLICY, "invalid env name \"A\\x0aB\"");
	FAIL("{\"code\":\"x\",\"env\":{\"\\u00c4\":\"v\"}}", POLICY, "invalid env name \"\\xc3\\x84\"");
	FAIL("{\"code\":\"x\",\"env\":{\"OK\":\"v\",\"BAD-ONE\":\"v\"}}", POLICY, "\"BAD-ONE\"");
	struct moat_request *req = parse_ok("{\"code\":\"x\",\"env\":{\"_ok\":\"1\",\"A1\":\"v=w;$(x)\"}}");
	ck_assert_uint_eq(req->env_count, 2);
	ck_assert_str_eq(req->env[1].value, "v=w;$(x)");
	moat_request_free(req);
}
END_TEST

START_TEST(env_limits)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"env\":{");
	for (int i = 0; i < 1024; i++)
		moat_buf_appendf(&b, "%s\"V%d\":\"%d\"", i ? "," : "", i, i);
	char *tail_ok = "}}";
	moat_buf_append(&b, tail_ok, 2);
	char *json = moat_buf_take(&b);
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(req->env_count, 1024);
	ck_assert_str_eq(req->env[1023].key, "V1023");
	moat_request_free(req);
	free(json);

	moat_buf_appendf(&b, "{\"code\":\"x\",\"env\":{");
	for (int i = 0; i < 1025; i++)
		moat_buf_appendf(&b, "%s\"V%d\":\"%d\"", i ? "," : "", i, i);
	moat_buf_append(&b, "}}", 2);
	json = moat_buf_take(&b);
	FAIL(json, POLICY, "too many env entries: 1025 (max 1024)");
	free(json);

	/* 1 MiB in total, NAME=VALUE\0 each. */
	char *big = repeat("v", MIB - 4);
	moat_buf_appendf(&b, "{\"code\":\"x\",\"env\":{\"AB\":\"%s\"}}", big);
	json = moat_buf_take(&b);
	req = parse_ok(json);
	moat_request_free(req);
	free(json);
	moat_buf_appendf(&b, "{\"code\":\"x\",\"env\":{\"ABC\":\"%s\"}}", big);
	json = moat_buf_take(&b);
	FAIL(json, POLICY, "env is too large");
	free(json);
	free(big);
}
END_TEST

static void files_fail(const char *path, enum moat_error_type type, const char *substr)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"files\":{\"ok.txt\":\"1\",\"%s\":\"c\"}}", path);
	char *json = moat_buf_take(&b);
	FAIL(json, type, substr);
	free(json);
}

START_TEST(file_paths)
{
	files_fail("../x", POLICY, "invalid file path \"../x\"");
	files_fail("a/../b", POLICY, "\"..\" components");
	files_fail("/etc/passwd", POLICY, "absolute");
	files_fail("a//b", POLICY, "empty path component");
	files_fail("a/", POLICY, "trailing '/'");
	files_fail(".", POLICY, "\".\" components");
	files_fail("./a", POLICY, "\".\" components");
	files_fail("a/./b", POLICY, "\".\" components");
	files_fail("", POLICY, "invalid file path: empty");
	files_fail("../\\u0001", POLICY, "\"../\\x01\"");
	char *c256 = repeat("c", 256);
	files_fail(c256, POLICY, "longer than 255");
	free(c256);
	char *p4097 = repeat("abcdefg/", 512);
	p4097[4095] = 'x';
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "%s1", p4097);
	char *p = moat_buf_take(&b);
	ck_assert_uint_eq(strlen(p), 4097);
	files_fail(p, POLICY, "longer than 4096");
	p[4096] = '\0';
	struct moat_buf b2 = { 0 };
	moat_buf_appendf(&b2, "{\"code\":\"x\",\"files\":{\"%s\":\"\"}}", p);
	char *json = moat_buf_take(&b2);
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(strlen(req->files[0].key), 4096);
	moat_request_free(req);
	free(json);
	free(p);
	free(p4097);

	/* The code file's name is reserved, per language. */
	files_fail("main.py", POLICY, "\"main.py\" is reserved for the request's code");
	files_fail(".moat", POLICY, "reserved");
	files_fail(".moat/x", POLICY, "reserved");
	files_fail(".moatrc", POLICY, "reserved");
	FAIL("{\"code\":\"x\",\"language\":\"bash\",\"files\":{\"main.sh\":\"\"}}", POLICY,
	     "\"main.sh\" is reserved");
	FAIL("{\"code\":\"x\",\"language\":\"typescript\",\"files\":{\"main.ts\":\"\"}}", POLICY,
	     "\"main.ts\" is reserved");
	/* ... and the language may come after files. */
	FAIL("{\"code\":\"x\",\"files\":{\"main.js\":\"\"},\"language\":\"javascript\"}", POLICY,
	     "\"main.js\" is reserved");
	req = parse_ok("{\"code\":\"x\",\"language\":\"bash\",\"files\":{\"main.py\":\"\","
		       "\"sub/main.sh\":\"\",\"main.sh.txt\":\"\",\"a.moat\":\"\",\"x/.moat\":\"\"}}");
	ck_assert_uint_eq(req->files_count, 5);
	moat_request_free(req);
}
END_TEST

START_TEST(file_conflicts)
{
	FAIL("{\"code\":\"x\",\"files\":{\"a\":\"1\",\"a/b\":\"2\"}}", POLICY,
	     "file path \"a\" conflicts with \"a/b\"");
	FAIL("{\"code\":\"x\",\"files\":{\"a/b/c\":\"1\",\"a\":\"2\"}}", POLICY,
	     "file path \"a\" conflicts with \"a/b/c\"");
	FAIL("{\"code\":\"x\",\"files\":{\"a/b\":\"1\",\"a/b/c/d\":\"2\"}}", POLICY,
	     "\"a/b\" conflicts with \"a/b/c/d\"");
	/* Names sorting between "a" and "a/b" must not hide the conflict. */
	FAIL("{\"code\":\"x\",\"files\":{\"a\":\"1\",\"a-b\":\"\",\"a.txt\":\"\",\"a/b\":\"2\"}}",
	     POLICY, "conflicts with");
	FAIL("{\"code\":\"x\",\"files\":{\"a/b\":\"2\",\"a!\":\"\",\"a\":\"1\"}}", POLICY,
	     "conflicts with");
	struct moat_request *req = parse_ok(
		"{\"code\":\"x\",\"files\":{\"a/b\":\"1\",\"a/c\":\"2\",\"ab\":\"3\",\"a-b/c\":\"\","
		"\"b/a\":\"\",\"a/bc\":\"\"}}");
	ck_assert_uint_eq(req->files_count, 6);
	ck_assert_str_eq(req->files[0].key, "a/b");
	ck_assert_str_eq(req->files[5].key, "a/bc");
	moat_request_free(req);
}
END_TEST

START_TEST(files_limits)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"code\":\"x\",\"files\":{");
	for (int i = 0; i < 1000; i++)
		moat_buf_appendf(&b, "%s\"d/f%d\":\"%d\"", i ? "," : "", i, i);
	moat_buf_append(&b, "}}", 2);
	char *json = moat_buf_take(&b);
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(req->files_count, 1000);
	ck_assert_str_eq(req->files[999].key, "d/f999");
	moat_request_free(req);
	free(json);

	moat_buf_appendf(&b, "{\"code\":\"x\",\"files\":{");
	for (int i = 0; i < 1001; i++)
		moat_buf_appendf(&b, "%s\"f%d\":\"\"", i ? "," : "", i);
	moat_buf_append(&b, "}}", 2);
	json = moat_buf_take(&b);
	FAIL(json, POLICY, "too many files: 1001 (max 1000)");
	free(json);
}
END_TEST

/* A valid request built in code. */
static struct moat_request *built(void)
{
	struct moat_request *req = moat_request_new();
	req->code = strdup("print(1)");
	req->code_len = 8;
	return req;
}

static void validate_fail(struct moat_request *req, enum moat_error_type type,
			  const char *substr)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_request_validate(req, &err), -1);
	ck_assert_msg(err.type == type, "got %s (%s)", moat_error_type_name(err.type),
		      err.message);
	ck_assert_msg(strstr(err.message, substr), "message \"%s\" lacks \"%s\"", err.message,
		      substr);
	no_controls(err.message);
	moat_error_clear(&err);
	moat_request_free(req);
}

static void add_kv(struct moat_kv **arr, size_t *n, const char *k, const char *v, size_t vlen)
{
	*arr = realloc(*arr, (*n + 1) * sizeof **arr);
	(*arr)[*n].key = strdup(k);
	(*arr)[*n].value = malloc(vlen ? vlen : 1);
	memcpy((*arr)[*n].value, v, vlen);
	(*arr)[*n].value_len = vlen;
	(*n)++;
}

START_TEST(validate_built)
{
	struct moat_error err = { 0 };
	struct moat_request *req = built();
	add_kv(&req->env, &req->env_count, "A", "1", 1);
	add_kv(&req->files, &req->files_count, "data/x.bin", "\0\1\2", 3);
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	moat_request_free(req);

	ck_assert_int_eq(moat_request_validate(NULL, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);

	req = built();
	free(req->code);
	req->code = NULL;
	validate_fail(req, CONFIG, "missing required key \"code\"");

	req = built();
	req->code_len = MOAT_MAX_CODE_BYTES + 1; /* not read, only checked */
	validate_fail(req, POLICY, "\"code\" is too large");

	req = built();
	req->language = MOAT_LANG__COUNT;
	validate_fail(req, CONFIG, "invalid language");

	req = built();
	req->timeout_ms = 0;
	validate_fail(req, CONFIG, "\"timeout\" must be between 1 and 86400000, got 0");
	req = built();
	req->timeout_ms = 86400001;
	validate_fail(req, CONFIG, "\"timeout\" must be between");
	req = built();
	req->memory_mb = 1048577;
	validate_fail(req, CONFIG, "\"memoryMb\" must be between");
	req = built();
	req->cpus = NAN;
	validate_fail(req, CONFIG, "\"cpus\" must be greater than 0");
	req = built();
	req->cpus = -0.5;
	validate_fail(req, CONFIG, "\"cpus\"");
	req = built();
	req->cpus = 2000;
	validate_fail(req, CONFIG, "\"cpus\"");
	req = built();
	req->pids_limit = 4194305;
	validate_fail(req, CONFIG, "\"pidsLimit\"");
	req = built();
	req->max_output_bytes = 0;
	validate_fail(req, CONFIG, "\"maxOutputBytes\" must be between 1");

	req = built();
	add_kv(&req->env, &req->env_count, "BAD;NAME", "v", 1);
	validate_fail(req, POLICY, "invalid env name \"BAD;NAME\"");
	req = built();
	add_kv(&req->env, &req->env_count, "A", "x\0y", 3);
	validate_fail(req, POLICY, "NUL characters are not allowed (in env \"A\")");
	req = built();
	add_kv(&req->env, &req->env_count, "A", "1", 1);
	add_kv(&req->env, &req->env_count, "B", "1", 1);
	add_kv(&req->env, &req->env_count, "A", "2", 1);
	validate_fail(req, CONFIG, "duplicate env name \"A\"");

	req = built();
	add_kv(&req->files, &req->files_count, "../etc/x", "", 0);
	validate_fail(req, POLICY, "invalid file path \"../etc/x\"");
	req = built();
	add_kv(&req->files, &req->files_count, "x", "", 0);
	add_kv(&req->files, &req->files_count, "x", "", 0);
	validate_fail(req, CONFIG, "duplicate file path \"x\"");
	req = built();
	add_kv(&req->files, &req->files_count, "main.py", "", 0);
	validate_fail(req, POLICY, "reserved");

	req = built();
	req->stdin_len = 5;
	validate_fail(req, CONFIG, "\"stdin\"");
}
END_TEST

START_TEST(validate_size_limits)
{
	struct moat_error err = { 0 };
	struct moat_request *req = built();
	size_t n = 64 * MIB;
	req->stdin_data = malloc(n + 1);
	req->stdin_len = n;
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	req->stdin_len = n + 1;
	validate_fail(req, POLICY, "\"stdin\" is too large");

	req = built();
	char *big = malloc(40 * MIB);
	add_kv(&req->files, &req->files_count, "a", "", 0);
	add_kv(&req->files, &req->files_count, "b", "", 0);
	free(req->files[0].value);
	req->files[0].value = big;
	req->files[0].value_len = 40 * MIB;
	req->files[1].value = realloc(req->files[1].value, 24 * MIB);
	req->files[1].value_len = 24 * MIB;
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	req->files[1].value_len = 24 * MIB + 1;
	validate_fail(req, POLICY, "files are too large");

	req = built();
	for (int i = 0; i < 1001; i++) {
		char name[16];
		snprintf(name, sizeof name, "f%d", i);
		add_kv(&req->files, &req->files_count, name, "", 0);
	}
	validate_fail(req, POLICY, "too many files: 1001");

	req = built();
	for (int i = 0; i < 1025; i++) {
		char name[16];
		snprintf(name, sizeof name, "E%d", i);
		add_kv(&req->env, &req->env_count, name, "", 0);
	}
	validate_fail(req, POLICY, "too many env entries: 1025");
}
END_TEST

START_TEST(same_messages_as_parser)
{
	struct moat_error e1 = { 0 }, e2 = { 0 };
	struct moat_request *out = NULL;
	const char *json = "{\"code\":\"x\",\"env\":{\"BAD;NAME\":\"v\"}}";
	ck_assert_int_eq(moat_request_parse_json(json, strlen(json), &out, &e1), -1);
	struct moat_request *req = built();
	add_kv(&req->env, &req->env_count, "BAD;NAME", "v", 1);
	ck_assert_int_eq(moat_request_validate(req, &e2), -1);
	ck_assert_int_eq(e1.type, e2.type);
	ck_assert_str_eq(e1.message, e2.message);
	moat_request_free(req);
	moat_error_clear(&e1);
	moat_error_clear(&e2);

	json = "{\"code\":\"x\",\"files\":{\"a/../b\":\"\"}}";
	ck_assert_int_eq(moat_request_parse_json(json, strlen(json), &out, &e1), -1);
	req = built();
	add_kv(&req->files, &req->files_count, "a/../b", "", 0);
	ck_assert_int_eq(moat_request_validate(req, &e2), -1);
	ck_assert_int_eq(e1.type, e2.type);
	ck_assert_str_eq(e1.message, e2.message);
	moat_request_free(req);
	moat_error_clear(&e1);
	moat_error_clear(&e2);
}
END_TEST

/* An argv request built in code: argc entries of the given strings. */
static struct moat_request *built_argv(const char *const *args, size_t n)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->argv = calloc(n + 1, sizeof *req->argv);
	ck_assert_ptr_nonnull(req->argv);
	for (size_t i = 0; i < n; i++) {
		req->argv[i] = strdup(args[i]);
		ck_assert_ptr_nonnull(req->argv[i]);
	}
	req->argc = n;
	return req;
}

START_TEST(argv_parsed)
{
	/* exactly the strings given: spaces, quotes, empty, unicode, escapes */
	struct moat_request *req = parse_ok(
		"{\"argv\":[\"sh\",\"-c\",\"echo \\\"$@\\\"\",\"\",\"a b\",\"\\u00e9\\u6f22\",\"'\\\"\"],"
		"\"env\":{\"A\":\"1\"},\"files\":{\"main.py\":\"x\"},\"outputs\":[\"o/*\"]}");
	ck_assert_ptr_null(req->code);
	ck_assert_uint_eq(req->argc, 7);
	ck_assert_str_eq(req->argv[0], "sh");
	ck_assert_str_eq(req->argv[1], "-c");
	ck_assert_str_eq(req->argv[2], "echo \"$@\"");
	ck_assert_str_eq(req->argv[3], "");
	ck_assert_str_eq(req->argv[4], "a b");
	ck_assert_str_eq(req->argv[5], "\xc3\xa9\xe6\xbc\xa2");
	ck_assert_str_eq(req->argv[6], "'\"");
	ck_assert_ptr_null(req->argv[7]);
	/* main.py is no code file's name in an argv request */
	ck_assert_uint_eq(req->files_count, 1);
	moat_request_free(req);

	req = parse_ok("{\"argv\":[\"/bin/true\"]}");
	ck_assert_uint_eq(req->argc, 1);
	moat_request_free(req);
}
END_TEST

START_TEST(argv_refused)
{
	FAIL("{\"argv\":[\"echo\"],\"code\":\"x\"}", CONFIG, "\"code\" and \"argv\" are exclusive");
	FAIL("{\"code\":\"x\",\"argv\":[\"echo\"]}", CONFIG, "\"code\" and \"argv\" are exclusive");
	FAIL("{\"argv\":[\"echo\"],\"language\":\"python\"}", CONFIG,
	     "\"language\" applies to \"code\"");
	FAIL("{\"argv\":[]}", CONFIG, "\"argv\" must have at least one entry");
	FAIL("{\"argv\":[\"\"]}", CONFIG, "\"argv\"[0], the program, must not be empty");
	FAIL("{\"argv\":[\"\",\"x\"]}", CONFIG, "must not be empty");
	FAIL("{\"argv\":\"echo hi\"}", CONFIG, "\"argv\" must be an array of strings, got a string");
	FAIL("{\"argv\":null}", CONFIG, "\"argv\" must be an array of strings, got null");
	FAIL("{\"argv\":[\"echo\",1]}", CONFIG, "\"argv\" entry 1 must be a string, got a number");
	FAIL("{\"argv\":[\"echo\",[\"x\"]]}", CONFIG, "\"argv\" entry 1 must be a string");
	FAIL("{\"argv\":[\"echo\"],\"argv\":[\"echo\"]}", CONFIG, "duplicate key \"argv\"");
	FAIL("{\"argv\":[\"echo\",\"a\\u0000b\"]}", POLICY, "NUL characters are not allowed (in \"argv\")");
	FAIL("{\"argv\":[\"ec\\u0000ho\"]}", POLICY, "NUL characters are not allowed (in \"argv\")");
	/* a host path is never a request's to name */
	FAIL("{\"argv\":[\"ls\"],\"workdir\":\"/etc\"}", CONFIG, "unknown key \"workdir\"");
	FAIL("{\"code\":\"x\",\"workdir\":\"/etc\"}", CONFIG, "unknown key \"workdir\"");
}
END_TEST

START_TEST(argv_limits)
{
	/* 4096 entries pass, 4097 do not */
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"argv\":[\"x\"", 12);
	for (int i = 1; i < 4096; i++)
		moat_buf_append(&b, ",\"a\"", 4);
	moat_buf_append(&b, "]}", 2);
	char *json = moat_buf_take(&b);
	ck_assert_ptr_nonnull(json);
	struct moat_request *req = parse_ok(json);
	ck_assert_uint_eq(req->argc, 4096);
	moat_request_free(req);
	free(json);
	moat_buf_append(&b, "{\"argv\":[\"x\"", 12);
	for (int i = 1; i < 4097; i++)
		moat_buf_append(&b, ",\"a\"", 4);
	moat_buf_append(&b, "]}", 2);
	json = moat_buf_take(&b);
	FAIL(json, POLICY, "too many \"argv\" entries: 4097 (max 4096)");
	free(json);

	/* one entry: at most 131071 bytes (the kernel's MAX_ARG_STRLEN) */
	char *arg = repeat("a", MOAT_MAX_ARG_BYTES);
	const char *args[] = { "echo", arg };
	req = built_argv(args, 2);
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	moat_request_free(req);
	free(arg);
	arg = repeat("a", MOAT_MAX_ARG_BYTES + 1);
	args[1] = arg;
	validate_fail(built_argv(args, 2), POLICY, "\"argv\" entry 1 is too long: 131072 bytes");
	free(arg);

	/* in all: 1 MiB, each entry with its NUL */
	char *chunk = repeat("b", 100000);
	const char *many[12];
	many[0] = "echo"; /* 5 bytes */
	for (int i = 1; i < 12; i++)
		many[i] = chunk; /* 100001 bytes each: 1100016 in all */
	validate_fail(built_argv(many, 12), POLICY, "\"argv\" is too large: more than 1048576 bytes");
	req = built_argv(many, 10); /* 900014 */
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	moat_request_free(req);
	free(chunk);
}
END_TEST

START_TEST(argv_validate_built)
{
	struct moat_error err = { 0 };
	const char *ok[] = { "sh", "-c", "exit 3" };
	struct moat_request *req = built_argv(ok, 3);
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	/* the language is not used: even an invalid one passes */
	req->language = MOAT_LANG__COUNT;
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	/* main.<ext> is free */
	add_kv(&req->files, &req->files_count, "main.py", "x", 1);
	ck_assert_int_eq(moat_request_validate(req, &err), 0);
	moat_request_free(req);

	req = built_argv(ok, 3);
	req->code = strdup("print(1)");
	req->code_len = 8;
	validate_fail(req, CONFIG, "\"code\" and \"argv\" are exclusive");

	req = built_argv(ok, 0); /* an array without entries */
	validate_fail(req, CONFIG, "\"argv\" must have at least one entry");

	req = moat_request_new();
	req->argc = 2; /* entries without an array */
	validate_fail(req, CONFIG, "argv: 2 entries but no array");

	req = built_argv(ok, 3);
	free(req->argv[1]);
	req->argv[1] = NULL;
	validate_fail(req, CONFIG, "\"argv\" entry 1 is missing");

	const char *empty[] = { "", "x" };
	validate_fail(built_argv(empty, 2), CONFIG, "must not be empty");

	req = built_argv(ok, 3);
	req->argc = MOAT_MAX_ARGC + 1; /* not read past argv[3]: refused first */
	struct moat_error e2 = { 0 };
	ck_assert_int_eq(moat_request_validate(req, &e2), -1);
	ck_assert_int_eq(e2.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(e2.message, "too many \"argv\" entries: 4097"));
	moat_error_clear(&e2);
	req->argc = 3;
	moat_request_free(req);

	/* the same rules as the parser, the same words */
	struct moat_error e1 = { 0 };
	struct moat_request *out = NULL;
	const char *json = "{\"argv\":[\"\"]}";
	ck_assert_int_eq(moat_request_parse_json(json, strlen(json), &out, &e1), -1);
	const char *blank[] = { "" };
	req = built_argv(blank, 1);
	ck_assert_int_eq(moat_request_validate(req, &e2), -1);
	ck_assert_int_eq(e1.type, e2.type);
	ck_assert_str_eq(e1.message, e2.message);
	moat_request_free(req);
	moat_error_clear(&e1);
	moat_error_clear(&e2);
}
END_TEST

START_TEST(null_out)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_request_parse_json("{\"code\":\"x\"}", 12, NULL, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	/* A NULL err is allowed: failure still returns -1. */
	struct moat_request *req = NULL;
	ck_assert_int_eq(moat_request_parse_json("[", 1, &req, NULL), -1);
	ck_assert_ptr_null(req);
}
END_TEST

Suite *request_suite(void)
{
	Suite *s = suite_create("request");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, new_defaults);
	tcase_add_test(tc, minimal);
	tcase_add_test(tc, every_key);
	tcase_add_test(tc, languages);
	tcase_add_test(tc, wrong_types);
	tcase_add_test(tc, unknown_and_duplicate_keys);
	tcase_add_test(tc, missing_code);
	tcase_add_test(tc, code_size);
	tcase_add_test(tc, nesting_depth);
	tcase_add_test(tc, nul_escapes);
	tcase_add_test(tc, raw_nul_byte);
	tcase_add_test(tc, malformed);
	tcase_add_test(tc, numbers);
	tcase_add_test(tc, env_names);
	tcase_add_test(tc, env_limits);
	tcase_add_test(tc, file_paths);
	tcase_add_test(tc, file_conflicts);
	tcase_add_test(tc, files_limits);
	tcase_add_test(tc, validate_built);
	tcase_add_test(tc, validate_size_limits);
	tcase_add_test(tc, same_messages_as_parser);
	tcase_add_test(tc, null_out);
	tcase_add_test(tc, argv_parsed);
	tcase_add_test(tc, argv_refused);
	tcase_add_test(tc, argv_limits);
	tcase_add_test(tc, argv_validate_built);
	suite_add_tcase(s, tc);
	return s;
}
