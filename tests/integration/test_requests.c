/* Bad requests through `moat exec`: refused with the right error type and
 * exit status 2, as one JSON object, before anything is started. Rootless
 * only: validation does not depend on the mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define CONFIG "SandboxConfigError"
#define POLICY "SandboxPolicyError"

/* Sends raw request bytes; asserts the refusal. */
static void expect_refused_raw(const char *req, size_t len, const char *type, const char *what)
{
	const char *args[] = { "exec", NULL };
	struct run_out o;
	long t0 = harness_now_ms();
	harness_run(MODE_ROOTLESS, args, req, len, &o);
	long wall = harness_now_ms() - t0;
	ck_assert_msg(o.json, "%s: no JSON (status %d): %s / %s", what, o.status, o.out, o.err);
	ck_assert_msg(o.status == 2, "%s: status %d (want 2): %s", what, o.status, o.out);
	const char *t = harness_error_type(&o);
	ck_assert_msg(t && !strcmp(t, type), "%s: error type %s, want %s: %s", what, t ? t : "(none)",
		      type, o.out);
	/* exactly one JSON object: {"error":{...}} and a newline, nothing else */
	ck_assert_msg(cJSON_IsObject(o.json) && cJSON_GetArraySize(o.json) == 1, "%s: %s", what, o.out);
	ck_assert_msg(o.out_len > 2 && o.out[o.out_len - 1] == '\n' && o.out[o.out_len - 2] == '}' &&
		      memchr(o.out, '\n', o.out_len) == o.out + o.out_len - 1,
		      "%s: not a single JSON line: %s", what, o.out);
	cJSON *e = cJSON_GetObjectItemCaseSensitive(o.json, "error");
	cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
	cJSON *prov = cJSON_GetObjectItemCaseSensitive(e, "provider");
	ck_assert_msg(cJSON_IsString(msg) && msg->valuestring[0], "%s: no message: %s", what, o.out);
	ck_assert_msg(cJSON_IsString(prov) && !strcmp(prov->valuestring, "native"), "%s", o.out);
	/* nothing was started: no result fields, and the answer is immediate */
	ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o.json, "durationMs"));
	ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o.json, "stdout"));
	ck_assert_msg(wall < 1000, "%s: refusal took %ld ms", what, wall);
	ck_assert_str_eq(o.err, "");
	harness_free(&o);
}

static void expect_refused(const char *req, const char *type)
{
	expect_refused_raw(req, strlen(req), type, req);
}

START_TEST(malformed_input)
{
	expect_refused("{\"code\": \"print(1)\"", CONFIG);
	expect_refused("{\"code\": 'print(1)'}", CONFIG);
	expect_refused("{\"code\": \"print(1)\"} {}", CONFIG);
	expect_refused("print(1)", CONFIG);
	expect_refused_raw("", 0, CONFIG, "empty input");
	expect_refused(" \n\t ", CONFIG);
	expect_refused("[{\"code\":\"print(1)\"}]", CONFIG);
	expect_refused("\"print(1)\"", CONFIG);
	expect_refused("null", CONFIG);
	static const char raw_nul[] = "{\"code\":\"a\0b\"}";
	expect_refused_raw(raw_nul, sizeof raw_nul - 1, CONFIG, "raw NUL byte");
}
END_TEST

START_TEST(missing_or_unknown_fields)
{
	expect_refused("{}", CONFIG);
	expect_refused("{\"language\":\"python\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"language\":\"cobol\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"language\":\"Python\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"unknown\":1}", CONFIG);
	expect_refused("{\"code\":\"1\",\"Code\":\"2\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"code\":\"2\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"timeout\":100,\"timeout\":200}", CONFIG);
}
END_TEST

START_TEST(wrong_types)
{
	expect_refused("{\"code\":1}", CONFIG);
	expect_refused("{\"code\":null}", CONFIG);
	expect_refused("{\"code\":\"1\",\"timeout\":\"1000\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"env\":\"A=1\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"env\":[\"A\"]}", CONFIG);
	expect_refused("{\"code\":\"1\",\"env\":{\"A\":1}}", CONFIG);
	expect_refused("{\"code\":\"1\",\"files\":{\"a\":null}}", CONFIG);
	expect_refused("{\"code\":\"1\",\"network\":\"yes\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"network\":0}", CONFIG);
	expect_refused("{\"code\":\"1\",\"stdin\":[]}", CONFIG);
	expect_refused("{\"code\":\"1\",\"strictLimits\":\"true\"}", CONFIG);
	expect_refused("{\"code\":\"1\",\"memoryMb\":\"512\"}", CONFIG);
}
END_TEST

START_TEST(bad_numbers)
{
	expect_refused("{\"code\":\"1\",\"timeout\":0}", CONFIG);
	expect_refused("{\"code\":\"1\",\"timeout\":-5}", CONFIG);
	expect_refused("{\"code\":\"1\",\"timeout\":1.5}", CONFIG);
	expect_refused("{\"code\":\"1\",\"timeout\":1e300}", CONFIG);
	expect_refused("{\"code\":\"1\",\"memoryMb\":0}", CONFIG);
	expect_refused("{\"code\":\"1\",\"cpus\":0}", CONFIG);
	expect_refused("{\"code\":\"1\",\"cpus\":-1}", CONFIG);
	expect_refused("{\"code\":\"1\",\"pidsLimit\":-1}", CONFIG);
	expect_refused("{\"code\":\"1\",\"maxOutputBytes\":0}", CONFIG);
}
END_TEST

START_TEST(code_too_large)
{
	size_t n = 5u * 1024u * 1024u + 1u;
	size_t cap = n + 64;
	char *req = malloc(cap);
	ck_assert_ptr_nonnull(req);
	size_t off = (size_t)snprintf(req, cap, "{\"code\":\"");
	memset(req + off, '#', n);
	off += n;
	off += (size_t)snprintf(req + off, cap - off, "\"}");
	expect_refused_raw(req, off, POLICY, "code of 5 MiB + 1");
	free(req);
}
END_TEST

START_TEST(bad_env_names)
{
	expect_refused("{\"code\":\"1\",\"env\":{\"BAD;NAME\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"$(rm -rf /)\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"1ABC\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"A=B\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"LD PRELOAD\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"A\":\"x\\u0000y\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"env\":{\"A\":\"x\",\"A\":\"y\"}}", CONFIG);
}
END_TEST

START_TEST(nul_in_code)
{
	expect_refused("{\"code\":\"print(1)\\u0000import os\"}", POLICY);
	expect_refused("{\"code\":\"1\",\"stdin\":\"a\\u0000b\"}", POLICY);
	expect_refused("{\"code\":\"1\",\"files\":{\"a\\u0000b\":\"x\"}}", POLICY);
}
END_TEST

START_TEST(bad_file_paths)
{
	static const char *const paths[] = {
		"../x", "/etc/passwd", "a/../../b", "a//b", "", ".", "./a", "a/", "..", "a/..",
	};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		char *q = harness_json_quote(paths[i]);
		char *req = NULL;
		ck_assert_int_ge(asprintf(&req, "{\"code\":\"1\",\"files\":{%s:\"x\"}}", q), 0);
		expect_refused(req, POLICY);
		free(req);
		free(q);
	}
	/* the request's own code file, and the same for other languages */
	expect_refused("{\"code\":\"1\",\"files\":{\"main.py\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"language\":\"bash\",\"files\":{\"main.sh\":\"x\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"files\":{\".moat-main.mjs\":\"x\"}}", POLICY);
	/* a file cannot also be a directory; duplicates */
	expect_refused("{\"code\":\"1\",\"files\":{\"a\":\"x\",\"a/b\":\"y\"}}", POLICY);
	expect_refused("{\"code\":\"1\",\"files\":{\"a\":\"x\",\"a\":\"y\"}}", CONFIG);
}
END_TEST

START_TEST(nesting_too_deep)
{
	char req[512];
	size_t off = (size_t)snprintf(req, sizeof req, "{\"code\":\"1\",\"files\":");
	for (int i = 0; i < 100; i++)
		req[off++] = '[';
	for (int i = 0; i < 100; i++)
		req[off++] = ']';
	req[off++] = '}';
	req[off] = '\0';
	expect_refused(req, CONFIG);
}
END_TEST

/* The refusals above are real refusals: the same requests, fixed, run. */
START_TEST(valid_neighbours_run)
{
	struct run_out o;
	harness_exec(MODE_ROOTLESS,
		     "{\"code\":\"import os\\nprint(os.environ['_OK1'], open('a/b').read())\","
		     "\"timeout\":5000,\"env\":{\"_OK1\":\"v\"},\"files\":{\"a/b\":\"f\"}}",
		     &o);
	ck_assert_msg(o.status == 0 && harness_num(&o, "exitCode") == 0, "%s", o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), "v f\n");
	harness_free(&o);
}
END_TEST

/* A JSON "timeout" is milliseconds (aistack's contract), where E2B and
 * Daytona take seconds: one below 100 runs as given, with a warning naming
 * the unit (issue 48); 100 and more, and moat run's --timeout (a duration,
 * a plain number in seconds), have none. A config file's "timeout" too. */
#define UNIT_MODE(m) ((m) == MODE_ROOT ? "root" : "rootless")
START_TEST(timeout_unit_warned)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec(_i, "{\"code\":\"print(1)\",\"timeout\":5}", &o);
	ck_assert_msg(o.json && !harness_error_type(&o), "%s: %s %s", UNIT_MODE(_i), o.out, o.err);
	ck_assert_msg(harness_has_warning(&o, "timeout 5 is in milliseconds") &&
			      harness_has_warning(&o, "give 5000"),
		      "%s: timeout 5 without the unit's warning: %s", UNIT_MODE(_i), o.out);
	harness_free(&o);
	harness_exec(_i, "{\"code\":\"print(1)\",\"timeout\":10000}", &o);
	ck_assert_msg(harness_num(&o, "exitCode") == 0, "%s: %s", UNIT_MODE(_i), o.out);
	ck_assert_msg(!harness_has_warning(&o, "in milliseconds"), "%s: %s", UNIT_MODE(_i), o.out);
	harness_free(&o);
	const char *cli[] = { "run", "--json", "--timeout", "5", "-c", "print(1)", NULL };
	harness_run(_i, cli, "", 0, &o);
	ck_assert_msg(o.json && harness_num(&o, "exitCode") == 0, "%s: %s %s", UNIT_MODE(_i), o.out,
		      o.err);
	ck_assert_msg(!harness_has_warning(&o, "in milliseconds"), "%s: --timeout 5 (seconds): %s",
		      UNIT_MODE(_i), o.out);
	harness_free(&o);
	char cfg[] = "/tmp/moat-units-XXXXXX";
	int fd = mkstemp(cfg);
	ck_assert_int_ge(fd, 0);
	static const char body[] = "{\"timeout\":50}";
	ck_assert_int_eq(write(fd, body, sizeof body - 1), (ssize_t)(sizeof body - 1));
	close(fd);
	ck_assert_int_eq(chmod(cfg, 0644), 0);
	const char *with_cfg[] = { "run", "--json", "--config", cfg, "-c", "print(1)", NULL };
	harness_run(_i, with_cfg, "", 0, &o);
	unlink(cfg);
	ck_assert_msg(o.json && harness_has_warning(&o, "\"timeout\" 50 is in milliseconds"),
		      "%s: a config's timeout 50 without the unit's warning: %s %s", UNIT_MODE(_i),
		      o.out, o.err);
	harness_free(&o);
}
END_TEST

Suite *requests_suite(void)
{
	Suite *s = suite_create("requests");
	TCase *tc = tcase_create("requests");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, malformed_input);
	tcase_add_test(tc, missing_or_unknown_fields);
	tcase_add_test(tc, wrong_types);
	tcase_add_test(tc, bad_numbers);
	tcase_add_test(tc, code_too_large);
	tcase_add_test(tc, bad_env_names);
	tcase_add_test(tc, nul_in_code);
	tcase_add_test(tc, bad_file_paths);
	tcase_add_test(tc, nesting_too_deep);
	tcase_add_test(tc, valid_neighbours_run);
	tcase_add_loop_test(tc, timeout_unit_warned, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
