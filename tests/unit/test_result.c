/* Unit tests: results and their JSON (src/core/result.c). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "suites.h"
#include "core/core.h"

static const char *const key_order[] = {
	"stdout", "stderr", "exitCode", "timedOut", "durationMs", "provider", "signal",
	"oomKilled", "killedBy", "memoryPeakBytes", "cpuTimeMs", "stdoutTruncated",
	"stderrTruncated", "limits", "warnings",
};

/* Parses json, checks it is one object with exactly the keys in order. */
static cJSON *parse_result(const char *json)
{
	ck_assert_ptr_nonnull(json);
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
	ck_assert_msg(root != NULL, "invalid JSON: %s", json);
	ck_assert(cJSON_IsObject(root));
	size_t i = 0;
	for (cJSON *c = root->child; c; c = c->next, i++) {
		ck_assert_uint_lt(i, sizeof key_order / sizeof key_order[0]);
		ck_assert_str_eq(c->string, key_order[i]);
	}
	ck_assert_uint_eq(i, sizeof key_order / sizeof key_order[0]);
	return root;
}

static cJSON *get(cJSON *root, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	ck_assert_ptr_nonnull(v);
	return v;
}

static void set_out(char **buf, size_t *len, const char *data, size_t n)
{
	*buf = malloc(n ? n : 1);
	memcpy(*buf, data, n);
	*len = n;
}

START_TEST(defaults)
{
	struct moat_result *res = moat_result_new();
	ck_assert_ptr_nonnull(res);
	ck_assert_int_eq(res->memory_peak_bytes, -1);
	ck_assert_int_eq(res->cpu_time_ms, -1);
	ck_assert_str_eq(res->provider, "native");
	ck_assert(!res->exited);
	ck_assert_ptr_null(res->stdout_buf);
	ck_assert_uint_eq(res->warnings_count, 0);

	char *json = moat_result_to_json(res);
	cJSON *root = parse_result(json);
	ck_assert_str_eq(get(root, "stdout")->valuestring, "");
	ck_assert_str_eq(get(root, "stderr")->valuestring, "");
	ck_assert(cJSON_IsNull(get(root, "exitCode")));
	ck_assert(cJSON_IsFalse(get(root, "timedOut")));
	ck_assert_int_eq(get(root, "durationMs")->valueint, 0);
	ck_assert_str_eq(get(root, "provider")->valuestring, "native");
	ck_assert(cJSON_IsNull(get(root, "signal")));
	ck_assert(cJSON_IsFalse(get(root, "oomKilled")));
	ck_assert(cJSON_IsNull(get(root, "killedBy")));
	ck_assert(cJSON_IsNull(get(root, "memoryPeakBytes")));
	ck_assert(cJSON_IsNull(get(root, "cpuTimeMs")));
	ck_assert(cJSON_IsFalse(get(root, "stdoutTruncated")));
	ck_assert(cJSON_IsFalse(get(root, "stderrTruncated")));
	cJSON *limits = get(root, "limits");
	ck_assert_int_eq(cJSON_GetArraySize(limits), 3);
	ck_assert_str_eq(get(limits, "memory")->valuestring, "none");
	ck_assert_str_eq(get(limits, "pids")->valuestring, "none");
	ck_assert_str_eq(get(limits, "cpu")->valuestring, "none");
	ck_assert(cJSON_IsArray(get(root, "warnings")));
	ck_assert_int_eq(cJSON_GetArraySize(get(root, "warnings")), 0);
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
	moat_result_free(NULL);
	ck_assert_ptr_null(moat_result_to_json(NULL));
}
END_TEST

START_TEST(normal_exit)
{
	struct moat_result *res = moat_result_new();
	set_out(&res->stdout_buf, &res->stdout_len, "42\n", 3);
	set_out(&res->stderr_buf, &res->stderr_len, "warn\n", 5);
	res->exited = true;
	res->exit_code = 0;
	res->duration_ms = 9;
	res->memory_peak_bytes = 9437184;
	res->cpu_time_ms = 7;
	res->limit_memory = "cgroup-v2";
	res->limit_pids = "cgroup-v1";
	res->limit_cpu = "rlimit";
	res->provider = NULL;
	char *json = moat_result_to_json(res);
	ck_assert_str_eq(json,
		"{\"stdout\":\"42\\n\",\"stderr\":\"warn\\n\",\"exitCode\":0,\"timedOut\":false,"
		"\"durationMs\":9,\"provider\":\"native\",\"signal\":null,\"oomKilled\":false,"
		"\"killedBy\":null,\"memoryPeakBytes\":9437184,\"cpuTimeMs\":7,"
		"\"stdoutTruncated\":false,\"stderrTruncated\":false,\"limits\":{\"memory\":"
		"\"cgroup-v2\",\"pids\":\"cgroup-v1\",\"cpu\":\"rlimit\"},\"warnings\":[]}");
	cJSON *root = parse_result(json);
	ck_assert_int_eq(get(root, "exitCode")->valueint, 0);
	cJSON_Delete(root);
	free(json);

	res->exit_code = 137;
	res->stdout_truncated = true;
	res->stderr_truncated = true;
	json = moat_result_to_json(res);
	root = parse_result(json);
	ck_assert_int_eq(get(root, "exitCode")->valueint, 137);
	ck_assert(cJSON_IsTrue(get(root, "stdoutTruncated")));
	ck_assert(cJSON_IsTrue(get(root, "stderrTruncated")));
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

START_TEST(killed_by_timeout)
{
	struct moat_result *res = moat_result_new();
	res->exited = false;
	res->exit_code = 99; /* ignored: not exited */
	res->signal = SIGKILL;
	res->timed_out = true;
	res->killed_by = "timeout";
	res->duration_ms = 5000;
	char *json = moat_result_to_json(res);
	cJSON *root = parse_result(json);
	ck_assert(cJSON_IsNull(get(root, "exitCode")));
	ck_assert_str_eq(get(root, "signal")->valuestring, "SIGKILL");
	ck_assert(cJSON_IsTrue(get(root, "timedOut")));
	ck_assert_str_eq(get(root, "killedBy")->valuestring, "timeout");
	ck_assert_int_eq(get(root, "durationMs")->valueint, 5000);
	cJSON_Delete(root);
	free(json);

	res->timed_out = false;
	res->oom_killed = true;
	res->killed_by = "oom";
	res->signal = SIGSEGV;
	json = moat_result_to_json(res);
	root = parse_result(json);
	ck_assert_str_eq(get(root, "signal")->valuestring, "SIGSEGV");
	ck_assert(cJSON_IsTrue(get(root, "oomKilled")));
	ck_assert_str_eq(get(root, "killedBy")->valuestring, "oom");
	cJSON_Delete(root);
	free(json);

	res->signal = SIGSYS;
	res->killed_by = "seccomp";
	json = moat_result_to_json(res);
	root = parse_result(json);
	ck_assert_str_eq(get(root, "signal")->valuestring, "SIGSYS");
	cJSON_Delete(root);
	free(json);

	res->signal = 200; /* not a real signal: still a string */
	json = moat_result_to_json(res);
	root = parse_result(json);
	ck_assert_str_eq(get(root, "signal")->valuestring, "SIG200");
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

START_TEST(output_bytes_made_valid)
{
	struct moat_result *res = moat_result_new();
	const char out[] = "a\0b\xff\xc0\xaf\xed\xa0\x80\xe2\x82" "caf\xc3\xa9\n\x1b";
	const char err[] = "\x7f\t\"\\";
	set_out(&res->stdout_buf, &res->stdout_len, out, sizeof out - 1);
	set_out(&res->stderr_buf, &res->stderr_len, err, sizeof err - 1);
	res->exited = true;
	char *json = moat_result_to_json(res);
	ck_assert_ptr_nonnull(strstr(json,
		"\"stdout\":\"a\\u0000b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
		"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
		"caf\xc3\xa9\\n\\u001b\""));
	ck_assert_ptr_nonnull(strstr(json, "\"stderr\":\"\\u007f\\t\\\"\\\\\""));
	for (const unsigned char *p = (const unsigned char *)json; *p; p++)
		ck_assert_uint_ge(*p, 0x20);
	cJSON *root = parse_result(json);
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

START_TEST(large_random_output)
{
	struct moat_result *res = moat_result_new();
	size_t n = 1u << 20;
	res->stdout_buf = malloc(n);
	unsigned state = 7;
	for (size_t i = 0; i < n; i++) {
		state = state * 1103515245u + 12345u;
		res->stdout_buf[i] = (char)(state >> 16);
	}
	res->stdout_len = n;
	char *json = moat_result_to_json(res);
	cJSON *root = parse_result(json);
	ck_assert(cJSON_IsString(get(root, "stdout")));
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

START_TEST(null_buffer_with_length)
{
	struct moat_result *res = moat_result_new();
	res->stdout_len = 10; /* inconsistent, but must not be read */
	char *json = moat_result_to_json(res);
	cJSON *root = parse_result(json);
	ck_assert_str_eq(get(root, "stdout")->valuestring, "");
	cJSON_Delete(root);
	free(json);
	res->stdout_len = 0;
	moat_result_free(res);
}
END_TEST

START_TEST(warnings)
{
	struct moat_result *res = moat_result_new();
	ck_assert_int_eq(moat_result_warn(res, "memory limit: %s fallback", "rlimit"), 0);
	ck_assert_int_eq(moat_result_warn(res, "pids limit unavailable (%d)", 3), 0);
	ck_assert_int_eq(moat_result_warn(res, "quote \" and \n newline"), 0);
	ck_assert_uint_eq(res->warnings_count, 3);
	ck_assert_str_eq(res->warnings[0], "memory limit: rlimit fallback");
	ck_assert_int_eq(moat_result_warn(NULL, "x"), -1);
	char *json = moat_result_to_json(res);
	cJSON *root = parse_result(json);
	cJSON *w = get(root, "warnings");
	ck_assert_int_eq(cJSON_GetArraySize(w), 3);
	ck_assert_str_eq(cJSON_GetArrayItem(w, 0)->valuestring, "memory limit: rlimit fallback");
	ck_assert_str_eq(cJSON_GetArrayItem(w, 1)->valuestring, "pids limit unavailable (3)");
	ck_assert_str_eq(cJSON_GetArrayItem(w, 2)->valuestring, "quote \" and \n newline");
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

START_TEST(negative_and_large_numbers)
{
	struct moat_result *res = moat_result_new();
	res->exited = true;
	res->exit_code = -1;
	res->duration_ms = UINT64_C(123456789012);
	res->memory_peak_bytes = INT64_C(68719476736);
	res->cpu_time_ms = 0;
	char *json = moat_result_to_json(res);
	ck_assert_ptr_nonnull(strstr(json, "\"exitCode\":-1,"));
	ck_assert_ptr_nonnull(strstr(json, "\"durationMs\":123456789012,"));
	ck_assert_ptr_nonnull(strstr(json, "\"memoryPeakBytes\":68719476736,"));
	ck_assert_ptr_nonnull(strstr(json, "\"cpuTimeMs\":0,"));
	cJSON *root = parse_result(json);
	cJSON_Delete(root);
	free(json);
	moat_result_free(res);
}
END_TEST

Suite *result_suite(void)
{
	Suite *s = suite_create("result");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, normal_exit);
	tcase_add_test(tc, killed_by_timeout);
	tcase_add_test(tc, output_bytes_made_valid);
	tcase_add_test(tc, large_random_output);
	tcase_add_test(tc, null_buffer_with_length);
	tcase_add_test(tc, warnings);
	tcase_add_test(tc, negative_and_large_numbers);
	suite_add_tcase(s, tc);
	return s;
}
