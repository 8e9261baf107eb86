/* "outputs": files the program wrote under /sandbox come back in the
 * result, bounded, never following a link out of /sandbox. */
#include <stdint.h>
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

static size_t unbase64(const char *s, char *out, size_t cap)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0, bits = 0;
	uint32_t acc = 0;
	for (; *s && *s != '='; s++) {
		const char *q = strchr(tbl, *s);
		ck_assert_msg(q != NULL, "not base64: %s", s);
		acc = acc << 6 | (uint32_t)(q - tbl);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			ck_assert_uint_lt(n, cap);
			out[n++] = (char)(acc >> bits);
		}
	}
	return n;
}

/* Invalid UTF-8 in file names: each file has its own key (they used to
 * share one, with U+FFFD for the bytes), and the exact bytes of its name
 * come back, from "pathBase64" and by undoing the key's escaping. A valid
 * name that looks escaped keeps its own key, and the escaped keys' prefix
 * cannot be planted: the walk never returns a name starting with ".moat". */
START_TEST(non_utf8_names_stay_distinct)
{
	HARNESS_MODE_GUARD(_i);
	const char *code =
		"import os\n"
		"os.makedirs('out', exist_ok=True)\n"
		"open(b'out/report\\xff.txt','wb').write(b'ff')\n"
		"open(b'out/report\\xfe.txt','wb').write(b'fe')\n"
		"open(b'out/report%FF.txt','wb').write(b'percent')\n"
		"open(b'out/100%\\xff','wb').write(b'both')\n"
		"open('out/r\\u00e9sum\\u00e9.txt','w').write('utf8 name')\n"
		"os.makedirs('.moat-nonutf8/out')\n"
		"open('.moat-nonutf8/out/report%FF.txt','w').write('planted')\n";
	struct run_out o;
	harness_exec_code(_i, "python", code,
			  ",\"outputs\":[\"out/*\",\".moat-nonutf8/out/*\",\".moat-nonutf8/*/*\"]", &o);
	ck_assert_msg(o.status == 0 && harness_num(&o, "exitCode") == 0, "%.600s", o.out);
	static const struct { const char *key, *raw, *content; } want[] = {
		{ ".moat-nonutf8/out/report%FF.txt", "out/report\xff.txt", "ff" },
		{ ".moat-nonutf8/out/report%FE.txt", "out/report\xfe.txt", "fe" },
		{ "out/report%FF.txt", NULL, "percent" },
		{ ".moat-nonutf8/out/100%25%FF", "out/100%\xff", "both" },
		{ "out/r\xc3\xa9sum\xc3\xa9.txt", NULL, "utf8 name" },
	};
	const size_t n = sizeof want / sizeof want[0];
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(o.json, "files");
	ck_assert_msg(cJSON_GetArraySize(files) == (int)n, "%.600s", o.out);
	for (const cJSON *a = files->child; a; a = a->next)
		for (const cJSON *b = a->next; b; b = b->next)
			ck_assert_msg(strcmp(a->string, b->string), "key twice: %s", a->string);
	for (size_t k = 0; k < n; k++) {
		const cJSON *e = file_entry(&o, want[k].key);
		ck_assert_msg(e != NULL, "no %s: %.600s", want[k].key, o.out);
		ck_assert_str_eq(entry_str(e, "content"), want[k].content);
		const cJSON *raw = cJSON_GetObjectItemCaseSensitive(e, "pathBase64");
		if (!want[k].raw) {
			ck_assert_msg(raw == NULL, "%s has a pathBase64", want[k].key);
			continue;
		}
		char name[64];
		size_t len = unbase64(entry_str(e, "pathBase64"), name, sizeof name);
		ck_assert_uint_eq(len, strlen(want[k].raw));
		ck_assert(!memcmp(name, want[k].raw, len));
		/* the key alone gives the same bytes: drop the prefix, undo %XX */
		const char *p = want[k].key + strlen(".moat-nonutf8/");
		size_t m = 0;
		for (; *p; m++) {
			unsigned v;
			if (*p == '%' && sscanf(p + 1, "%2X", &v) == 1) {
				name[m] = (char)v;
				p += 3;
			} else {
				name[m] = *p++;
			}
		}
		ck_assert_uint_eq(m, len);
		ck_assert(!memcmp(name, want[k].raw, len));
	}
	ck_assert_msg(!strstr(o.out, "planted"), "a .moat name was returned: %.600s", o.out);
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
	tcase_add_loop_test(tc, non_utf8_names_stay_distinct, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, no_outputs_no_files_key, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_test(tc, bad_patterns_refused);
	suite_add_tcase(s, tc);
	return s;
}
