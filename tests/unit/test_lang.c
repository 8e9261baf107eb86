/* Unit tests: the language table (src/core/lang.c). */
#include <string.h>

#include <check.h>

#include "suites.h"
#include "core/core.h"

START_TEST(table)
{
	struct { enum moat_language id; const char *name, *ext, *interp, *transpiler; } want[] = {
		{ MOAT_LANG_PYTHON, "python", "py", "python3", NULL },
		{ MOAT_LANG_JAVASCRIPT, "javascript", "js", "node", NULL },
		{ MOAT_LANG_TYPESCRIPT, "typescript", "ts", "node", "esbuild" },
		{ MOAT_LANG_BASH, "bash", "sh", "bash", NULL },
		{ MOAT_LANG_SH, "sh", "sh", "sh", NULL },
	};
	ck_assert_int_eq(sizeof want / sizeof want[0], MOAT_LANG__COUNT);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const struct moat_lang_info *l = moat_lang_get(want[i].id);
		ck_assert_ptr_nonnull(l);
		ck_assert_int_eq(l->id, want[i].id);
		ck_assert_str_eq(l->name, want[i].name);
		ck_assert_str_eq(l->ext, want[i].ext);
		ck_assert_str_eq(l->interpreter, want[i].interp);
		if (want[i].transpiler)
			ck_assert_str_eq(l->transpiler, want[i].transpiler);
		else
			ck_assert_ptr_null(l->transpiler);
		/* The canonical name maps back to the same id. */
		enum moat_language id = MOAT_LANG__COUNT;
		ck_assert_int_eq(moat_lang_from_name(l->name, &id), 0);
		ck_assert_int_eq(id, want[i].id);
	}
}
END_TEST

START_TEST(get_out_of_range)
{
	ck_assert_ptr_null(moat_lang_get(MOAT_LANG__COUNT));
	ck_assert_ptr_null(moat_lang_get((enum moat_language)-1));
	ck_assert_ptr_null(moat_lang_get((enum moat_language)1000));
}
END_TEST

START_TEST(aliases)
{
	struct { const char *name; enum moat_language id; } cases[] = {
		{ "py", MOAT_LANG_PYTHON }, { "python3", MOAT_LANG_PYTHON },
		{ "js", MOAT_LANG_JAVASCRIPT }, { "node", MOAT_LANG_JAVASCRIPT },
		{ "ts", MOAT_LANG_TYPESCRIPT }, { "shell", MOAT_LANG_SH },
		{ "bash", MOAT_LANG_BASH }, { "sh", MOAT_LANG_SH },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		enum moat_language id = MOAT_LANG__COUNT;
		ck_assert_int_eq(moat_lang_from_name(cases[i].name, &id), 0);
		ck_assert_int_eq(id, cases[i].id);
	}
}
END_TEST

START_TEST(unknown_names)
{
	const char *bad[] = { "Python", "PYTHON", "ruby", "", "python ", " python", "pythonx",
			      "java", "Bash", "typescript\n" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		enum moat_language id = MOAT_LANG_BASH;
		ck_assert_int_eq(moat_lang_from_name(bad[i], &id), -1);
		ck_assert_int_eq(id, MOAT_LANG_BASH); /* untouched */
	}
	ck_assert_int_eq(moat_lang_from_name(NULL, NULL), -1);
}
END_TEST

START_TEST(from_path)
{
	struct { const char *path; enum moat_language id; } cases[] = {
		{ "x.py", MOAT_LANG_PYTHON }, { "dir/sub/x.py", MOAT_LANG_PYTHON },
		{ "x.js", MOAT_LANG_JAVASCRIPT }, { "x.mjs", MOAT_LANG_JAVASCRIPT },
		{ "x.cjs", MOAT_LANG_JAVASCRIPT }, { "x.ts", MOAT_LANG_TYPESCRIPT },
		{ "x.mts", MOAT_LANG_TYPESCRIPT }, { "x.sh", MOAT_LANG_SH },
		{ "x.bash", MOAT_LANG_BASH }, { "a.tar.sh", MOAT_LANG_SH },
		{ "/abs/dir.d/run.py", MOAT_LANG_PYTHON },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		enum moat_language id = MOAT_LANG__COUNT;
		ck_assert_msg(moat_lang_from_path(cases[i].path, &id) == 0, "%s", cases[i].path);
		ck_assert_int_eq(id, cases[i].id);
	}
	const char *bad[] = { "x", "x.PY", "x.rb", "x.", ".sh", "dir/.py", "x.py/y",
			      "dir.py/file", "x.pyc", "" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		enum moat_language id = MOAT_LANG__COUNT;
		ck_assert_msg(moat_lang_from_path(bad[i], &id) == -1, "%s", bad[i]);
		ck_assert_int_eq(id, MOAT_LANG__COUNT);
	}
	ck_assert_int_eq(moat_lang_from_path(NULL, NULL), -1);
}
END_TEST

Suite *lang_suite(void)
{
	Suite *s = suite_create("lang");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, table);
	tcase_add_test(tc, get_out_of_range);
	tcase_add_test(tc, aliases);
	tcase_add_test(tc, unknown_names);
	tcase_add_test(tc, from_path);
	suite_add_tcase(s, tc);
	return s;
}
