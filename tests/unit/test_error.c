/* Unit tests: errors (src/core/error.c). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "suites.h"
#include "moat.h"
#include "core/cleanup.h"

START_TEST(type_names)
{
	ck_assert_str_eq(moat_error_type_name(MOAT_ERR_CONFIG), "SandboxConfigError");
	ck_assert_str_eq(moat_error_type_name(MOAT_ERR_POLICY), "SandboxPolicyError");
	ck_assert_str_eq(moat_error_type_name(MOAT_ERR_UNAVAILABLE), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(moat_error_type_name(MOAT_ERR_NONE));
	ck_assert_ptr_nonnull(moat_error_type_name((enum moat_error_type)42));
}
END_TEST

START_TEST(exit_codes)
{
	ck_assert_int_eq(moat_error_exit_code(MOAT_ERR_CONFIG), 2);
	ck_assert_int_eq(moat_error_exit_code(MOAT_ERR_POLICY), 2);
	ck_assert_int_eq(moat_error_exit_code(MOAT_ERR_UNAVAILABLE), 3);
	ck_assert_int_eq(moat_error_exit_code(MOAT_ERR_NONE), 0);
	ck_assert_int_ne(moat_error_exit_code((enum moat_error_type)42), 0);
}
END_TEST

START_TEST(set_formats_and_replaces)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_error_set(&err, MOAT_ERR_CONFIG, 0, "bad %s %d", "thing", 7), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_int_eq(err.sys_errno, 0);
	ck_assert_str_eq(err.message, "bad thing 7");
	/* Replacing frees the old message (LeakSanitizer checks). */
	ck_assert_int_eq(moat_error_set(&err, MOAT_ERR_UNAVAILABLE, EPERM, "clone3: %s",
					strerror(EPERM)), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert_int_eq(err.sys_errno, EPERM);
	ck_assert_ptr_nonnull(strstr(err.message, "clone3: "));
	moat_error_clear(&err);
	ck_assert_ptr_null(err.message);
	ck_assert_int_eq(err.type, MOAT_ERR_NONE);
	ck_assert_int_eq(err.sys_errno, 0);
	moat_error_clear(&err); /* twice is fine */
	moat_error_clear(NULL);
}
END_TEST

START_TEST(set_wraps_own_message)
{
	struct moat_error err = { 0 };
	moat_error_set(&err, MOAT_ERR_POLICY, 0, "inner %d", 1);
	moat_error_set(&err, MOAT_ERR_POLICY, 0, "outer: %s", err.message);
	ck_assert_str_eq(err.message, "outer: inner 1");
	moat_error_clear(&err);
}
END_TEST

START_TEST(set_long_message)
{
	struct moat_error err = { 0 };
	char *big = malloc(100001);
	memset(big, 'x', 100000);
	big[100000] = '\0';
	moat_error_set(&err, MOAT_ERR_CONFIG, 0, "[%s]", big);
	ck_assert_uint_eq(strlen(err.message), 100002);
	ck_assert_int_eq(err.message[0], '[');
	ck_assert_int_eq(err.message[100001], ']');
	free(big);
	moat_error_clear(&err);
}
END_TEST

START_TEST(set_null_err)
{
	ck_assert_int_eq(moat_error_set(NULL, MOAT_ERR_CONFIG, 0, "x"), -1);
}
END_TEST

static cJSON *error_obj(const char *json)
{
	cJSON *root = cJSON_Parse(json);
	ck_assert_ptr_nonnull(root);
	ck_assert_int_eq(cJSON_GetArraySize(root), 1);
	cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
	ck_assert(cJSON_IsObject(e));
	ck_assert_int_eq(cJSON_GetArraySize(e), 3);
	return root;
}

static const char *field(cJSON *root, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(root, "error"), name);
	ck_assert(cJSON_IsString(v));
	return v->valuestring;
}

START_TEST(to_json_basic)
{
	struct moat_error err = { 0 };
	moat_error_set(&err, MOAT_ERR_POLICY, 0, "invalid env name \"%s\"", "A;B");
	char *json = moat_error_to_json(&err, NULL);
	ck_assert_ptr_nonnull(json);
	ck_assert_str_eq(json, "{\"error\":{\"type\":\"SandboxPolicyError\","
			       "\"message\":\"invalid env name \\\"A;B\\\"\","
			       "\"provider\":\"native\"}}");
	cJSON *root = error_obj(json);
	ck_assert_str_eq(field(root, "type"), "SandboxPolicyError");
	ck_assert_str_eq(field(root, "message"), "invalid env name \"A;B\"");
	ck_assert_str_eq(field(root, "provider"), "native");
	cJSON_Delete(root);
	free(json);
	moat_error_clear(&err);
}
END_TEST

START_TEST(to_json_provider_and_types)
{
	struct moat_error err = { 0 };
	moat_error_set(&err, MOAT_ERR_UNAVAILABLE, ENOSYS, "no user namespaces");
	char *json = moat_error_to_json(&err, "docker");
	cJSON *root = error_obj(json);
	ck_assert_str_eq(field(root, "type"), "SandboxUnavailableError");
	ck_assert_str_eq(field(root, "provider"), "docker");
	cJSON_Delete(root);
	free(json);

	moat_error_set(&err, MOAT_ERR_CONFIG, 0, "x");
	json = moat_error_to_json(&err, NULL);
	root = error_obj(json);
	ck_assert_str_eq(field(root, "type"), "SandboxConfigError");
	cJSON_Delete(root);
	free(json);
	moat_error_clear(&err);
}
END_TEST

START_TEST(to_json_escapes_message)
{
	struct moat_error err = { 0 };
	moat_error_set(&err, MOAT_ERR_CONFIG, 0, "q\"b\\n\nt\tc\x01 bad\xff" " end");
	char *json = moat_error_to_json(&err, NULL);
	ck_assert_ptr_nonnull(json);
	for (const unsigned char *p = (const unsigned char *)json; *p; p++)
		ck_assert_uint_ge(*p, 0x20);
	ck_assert_ptr_nonnull(strstr(json, "\\u0001"));
	ck_assert_ptr_nonnull(strstr(json, "\xef\xbf\xbd"));
	cJSON *root = error_obj(json);
	ck_assert_str_eq(field(root, "message"), "q\"b\\n\nt\tc\x01 bad\xef\xbf\xbd" " end");
	cJSON_Delete(root);
	free(json);
	moat_error_clear(&err);
}
END_TEST

START_TEST(to_json_without_message)
{
	struct moat_error err = { .type = MOAT_ERR_POLICY };
	char *json = moat_error_to_json(&err, NULL);
	cJSON *root = error_obj(json);
	ck_assert_str_eq(field(root, "type"), "SandboxPolicyError");
	ck_assert_uint_gt(strlen(field(root, "message")), 0);
	cJSON_Delete(root);
	free(json);
}
END_TEST

/* ---- core/cleanup.h: release on scope exit ---- */

struct counted {
	int *released;
};
static void counted_free(struct counted *c)
{
	(*c->released)++;
}
MOAT_DEFINE_AUTO(counted, counted_free)

static struct counted *counted_kept(struct counted *c, bool keep)
{
	MOAT_AUTO(counted) struct counted *p = c;
	if (!keep)
		return NULL; /* released here */
	return MOAT_TAKE(p); /* handed out: not released */
}

START_TEST(cleanup_releases_at_scope_exit)
{
	int released = 0;
	struct counted c = { &released };
	ck_assert_ptr_null(counted_kept(&c, false));
	ck_assert_int_eq(released, 1);
	ck_assert_ptr_eq(counted_kept(&c, true), &c);
	ck_assert_int_eq(released, 1);
	{
		MOAT_AUTO(counted) struct counted *none = NULL; /* NULL: nothing called */
		(void)none;
	}
	ck_assert_int_eq(released, 1);
	{
		/* ASan's leak check fails the suite if this is not freed */
		MOAT_AUTOFREE char *text = strdup("freed at the brace");
		ck_assert_ptr_nonnull(text);
		MOAT_AUTO_ERROR struct moat_error err = { 0 };
		moat_error_set(&err, MOAT_ERR_CONFIG, 0, "cleared at the brace");
	}
}
END_TEST

START_TEST(cleanup_closes_and_takes_fds)
{
	int kept, closed;
	{
		MOAT_AUTOCLOSE int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
		MOAT_AUTOCLOSE int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
		MOAT_AUTOCLOSE int none = -1; /* -1: nothing closed */
		(void)none;
		ck_assert_int_ge(a, 0);
		ck_assert_int_ge(b, 0);
		closed = a;
		kept = MOAT_TAKE_FD(b);
		ck_assert_int_eq(b, -1);
		/* a close that fails on the way out (EBADF: closed already, and
		 * nothing opened since) keeps the error being returned */
		MOAT_AUTOCLOSE int gone = open("/dev/null", O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(gone, 0);
		close(gone);
		errno = ENOSPC;
	}
	ck_assert_int_eq(errno, ENOSPC);
	ck_assert_int_eq(fcntl(closed, F_GETFD), -1);
	ck_assert_int_ge(fcntl(kept, F_GETFD), 0);
	close(kept);
}
END_TEST

Suite *error_suite(void)
{
	Suite *s = suite_create("error");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, type_names);
	tcase_add_test(tc, exit_codes);
	tcase_add_test(tc, set_formats_and_replaces);
	tcase_add_test(tc, set_wraps_own_message);
	tcase_add_test(tc, set_long_message);
	tcase_add_test(tc, set_null_err);
	tcase_add_test(tc, to_json_basic);
	tcase_add_test(tc, to_json_provider_and_types);
	tcase_add_test(tc, to_json_escapes_message);
	tcase_add_test(tc, to_json_without_message);
	tcase_add_test(tc, cleanup_releases_at_scope_exit);
	tcase_add_test(tc, cleanup_closes_and_takes_fds);
	suite_add_tcase(s, tc);
	return s;
}
