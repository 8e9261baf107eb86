/* Unit tests: file paths and env names (src/core/path.c). */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "suites.h"
#include "core/core.h"

static void no_controls(const char *msg)
{
	ck_assert_ptr_nonnull(msg);
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
		ck_assert_msg(*p >= 0x20 && *p < 0x7f, "byte 0x%02x in message", *p);
}

static void path_ok(const char *p, size_t len)
{
	struct moat_error err = { 0 };
	ck_assert_msg(moat_path_check_relative(p, len, &err) == 0, "%.60s: %s", p,
		      err.message ? err.message : "");
	ck_assert_int_eq(err.type, MOAT_ERR_NONE);
	ck_assert_ptr_null(err.message);
}

static void path_bad(const char *p, size_t len, const char *substr)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_path_check_relative(p, len, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(err.message);
	ck_assert_msg(strstr(err.message, substr), "message \"%s\" lacks \"%s\"", err.message,
		      substr);
	no_controls(err.message);
	moat_error_clear(&err);
}

#define PATH_OK(s) path_ok(s, strlen(s))
#define PATH_BAD(s, sub) path_bad(s, strlen(s), sub)

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

START_TEST(valid_paths)
{
	PATH_OK("a");
	PATH_OK("a/b/c");
	PATH_OK("dir/file.txt");
	PATH_OK("a\\b");      /* backslash is an ordinary byte on Linux */
	PATH_OK(".hidden");
	PATH_OK("..a");
	PATH_OK("a..");
	PATH_OK("...");
	PATH_OK("a/.b/..c");
	PATH_OK("caf\xc3\xa9 file");
	/* Only the first len bytes count. */
	path_ok("abc/../x", 3);
}
END_TEST

START_TEST(dot_components)
{
	PATH_BAD("../x", "\"..\"");
	PATH_BAD("a/../b", "\"..\"");
	PATH_BAD("..", "\"..\"");
	PATH_BAD("a/..", "\"..\"");
	PATH_BAD(".", "\".\"");
	PATH_BAD("./a", "\".\"");
	PATH_BAD("a/./b", "\".\"");
	PATH_BAD("a/.", "\".\"");
	/* The message names the path, quoted. */
	PATH_BAD("a/../b", "\"a/../b\"");
}
END_TEST

START_TEST(absolute_and_empty)
{
	PATH_BAD("/etc/passwd", "absolute");
	PATH_BAD("/", "absolute");
	PATH_BAD("//x", "absolute");
	path_bad("", 0, "empty");
	path_bad(NULL, 0, "empty");
	path_bad("abc", 0, "empty");
	PATH_BAD("a//b", "empty path component");
	PATH_BAD("a/", "trailing '/'");
	PATH_BAD("a/b/", "trailing '/'");
}
END_TEST

START_TEST(nul_inside)
{
	path_bad("a\0b", 3, "NUL");
	path_bad("\0", 1, "NUL");
	path_bad("abc\0", 4, "NUL");
	/* The NUL is shown escaped, never raw. */
	path_bad("a\0b", 3, "\"a\\x00b\"");
}
END_TEST

START_TEST(lengths)
{
	char *c255 = repeat('c', 255);
	char *c256 = repeat('c', 256);
	PATH_OK(c255);
	PATH_BAD(c256, "longer than 255");
	char *nested = malloc(600);
	strcpy(nested, "d/");
	strcat(nested, c256);
	PATH_BAD(nested, "longer than 255");

	/* 4096 bytes: 17 components of 240 bytes and 16 separators. */
	char *p = malloc(4098);
	size_t n = 0;
	for (int i = 0; i < 17; i++) {
		if (i)
			p[n++] = '/';
		memset(p + n, 'x', 240);
		n += 240;
	}
	p[n] = '\0';
	ck_assert_uint_eq(strlen(p), 4096);
	PATH_OK(p);
	p[n++] = 'y';
	p[n] = '\0';
	ck_assert_uint_eq(strlen(p), 4097);
	PATH_BAD(p, "longer than 4096");
	free(p);
	free(nested);
	free(c255);
	free(c256);
}
END_TEST

START_TEST(message_escaping_and_truncation)
{
	path_bad("../\n\x1b[31m\"\\\x7f\xff", 13, "\"../\\x0a\\x1b[31m\\\"\\\\\\x7f\\xff\"");
	char *longp = malloc(5000);
	memset(longp, 'z', 4999);
	longp[4999] = '\0';
	longp[0] = '/';
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_path_check_relative(longp, 4999, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(err.message, "..."));
	ck_assert_uint_lt(strlen(err.message), 250);
	moat_error_clear(&err);
	free(longp);
}
END_TEST

START_TEST(env_names)
{
	const char *good[] = { "_ok", "A1", "a", "_", "PATH", "LD_x_9", "abc_DEF_123" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		ck_assert_msg(moat_env_name_valid(good[i], strlen(good[i])), "%s", good[i]);
	const char *bad[] = { "BAD;NAME", "$(rm -rf /)", "1ABC", "", "A-B", "A B", "A=B",
			      "\xc3\x84" "B", "A\n", "9", " A", "A." };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(!moat_env_name_valid(bad[i], strlen(bad[i])), "%s", bad[i]);
	ck_assert(!moat_env_name_valid("A\0B", 3));
	ck_assert(!moat_env_name_valid("AB\0", 3));
	ck_assert(moat_env_name_valid("AB;", 2)); /* the length is what counts */
	ck_assert(!moat_env_name_valid(NULL, 0));
	ck_assert(!moat_env_name_valid("A", 0));

	char *n1024 = repeat('N', 1024);
	char *n1025 = repeat('N', 1025);
	ck_assert(moat_env_name_valid(n1024, 1024));
	ck_assert(!moat_env_name_valid(n1025, 1025));
	free(n1024);
	free(n1025);
}
END_TEST

Suite *path_suite(void)
{
	Suite *s = suite_create("path");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, valid_paths);
	tcase_add_test(tc, dot_components);
	tcase_add_test(tc, absolute_and_empty);
	tcase_add_test(tc, nul_inside);
	tcase_add_test(tc, lengths);
	tcase_add_test(tc, message_escaping_and_truncation);
	tcase_add_test(tc, env_names);
	suite_add_tcase(s, tc);
	return s;
}
