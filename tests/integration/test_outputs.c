/* "outputs": files the program wrote under /sandbox come back in the
 * result, bounded, never following a link out of /sandbox. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

static const cJSON *file_entry(const struct run_out *o, const char *path)
{
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(o->json, "files");
	ck_assert_msg(cJSON_IsObject(files), "no files object: %.300s", o->out);
	return cJSON_GetObjectItemCaseSensitive(files, path);
}

static const char *entry_str(const cJSON *e, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
	ck_assert_msg(cJSON_IsString(v), "entry has no string %s", key);
	return v->valuestring;
}

START_TEST(outputs_are_returned)
{
	HARNESS_MODE_GUARD(_i);
	const char *code =
		"import os\n"
		"os.makedirs('out/sub', exist_ok=True)\n"
		"open('out/a.txt','w').write('hello \\u00e9')\n"
		"open('out/b.bin','wb').write(bytes(range(6)))\n"
		"open('out/sub/c.txt','w').write('deep')\n"
		"open('out/.hidden','w').write('h')\n"
		"open('big.txt','w').write('y' * 1500000)\n"
		"os.symlink('/etc/passwd', 'out/link.txt')\n"
		"os.mkfifo('out/fifo.txt')\n"
		"open('notlisted.txt','w').write('n')\n";
	struct run_out o;
	harness_exec_code(_i, "python", code, ",\"outputs\":[\"out/*\",\"out/sub/*.txt\",\"big.txt\"]",
			  &o);
	ck_assert_msg(o.status == 0 && harness_num(&o, "exitCode") == 0, "%.400s", o.out);
	const cJSON *a = file_entry(&o, "out/a.txt");
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(entry_str(a, "encoding"), "utf8");
	ck_assert_str_eq(entry_str(a, "content"), "hello \xc3\xa9");
	const cJSON *b = file_entry(&o, "out/b.bin");
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(entry_str(b, "encoding"), "base64");
	ck_assert_str_eq(entry_str(b, "content"), "AAECAwQF");
	ck_assert_ptr_nonnull(file_entry(&o, "out/sub/c.txt"));
	const cJSON *big = file_entry(&o, "big.txt");
	ck_assert_ptr_nonnull(big);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(big, "truncated")));
	ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(big, "size")->valuedouble, 1500000);
	ck_assert_uint_eq(strlen(entry_str(big, "content")), 1024 * 1024);
	/* never a link's target, a fifo, a hidden file for '*', or an unlisted file */
	ck_assert_ptr_null(file_entry(&o, "out/link.txt"));
	ck_assert_ptr_null(file_entry(&o, "out/fifo.txt"));
	ck_assert_ptr_null(file_entry(&o, "out/.hidden"));
	ck_assert_ptr_null(file_entry(&o, "notlisted.txt"));
	ck_assert_msg(!strstr(o.out, "root:x:0:0"), "a link target leaked: %.300s", o.out);
	harness_free(&o);
}
END_TEST

START_TEST(no_outputs_no_files_key)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec_code(_i, "sh", "echo hi > x.txt", "", &o);
	ck_assert_msg(o.status == 0, "%s", o.out);
	ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o.json, "files"));
	harness_free(&o);
	harness_exec_code(_i, "sh", "echo hi > x.txt", ",\"outputs\":[\"*.none\"]", &o);
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(o.json, "files");
	ck_assert_msg(cJSON_IsObject(files) && !files->child, "%s", o.out);
	harness_free(&o);
}
END_TEST

START_TEST(bad_patterns_refused)
{
	static const char *const bad[] = { "[\"../x\"]", "[\"/etc/*\"]", "[\"a/../../b\"]",
					   "[\"\"]", "\"*.txt\"", "[1]" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char extra[128];
		snprintf(extra, sizeof extra, ",\"outputs\":%s", bad[i]);
		struct run_out o;
		harness_exec_code(MODE_ROOTLESS, "sh", "true", extra, &o);
		ck_assert_msg(o.status == 2, "%s: status %d %s", bad[i], o.status, o.out);
		const char *t = harness_error_type(&o);
		ck_assert_msg(t && (!strcmp(t, "SandboxPolicyError") || !strcmp(t, "SandboxConfigError")),
			      "%s: %s", bad[i], o.out);
		harness_free(&o);
	}
}
END_TEST

Suite *outputs_suite(void)
{
	Suite *s = suite_create("outputs");
	TCase *tc = tcase_create("outputs");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, outputs_are_returned, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_outputs_no_files_key, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_test(tc, bad_patterns_refused);
	suite_add_tcase(s, tc);
	return s;
}
