/* Unit tests: the growable buffer and JSON string writer (src/core/buf.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "suites.h"
#include "core/core.h"

/* The JSON literal written for len bytes of s; caller frees. */
static char *jstr(const char *s, size_t len)
{
	struct moat_buf b = { 0 };
	moat_buf_append_json_string(&b, s, len);
	char *out = moat_buf_take(&b);
	ck_assert_ptr_nonnull(out);
	return out;
}

static void expect(const char *in, size_t len, const char *want)
{
	char *got = jstr(in, len);
	ck_assert_str_eq(got, want);
	free(got);
}

#define EXPECT(lit, want) expect(lit, sizeof(lit) - 1, want)

/* Independent check: strict UTF-8 with no raw control bytes. */
static bool valid_json_text(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		if (c < 0x20 || c == 0x7f)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
		if (k == 0 || c > 0xF4 || i + k >= n)
			return false;
		uint32_t cp = c & (0x3F >> k);
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3F);
		}
		uint32_t min = k == 1 ? 0x80 : k == 2 ? 0x800 : 0x10000;
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += k + 1;
	}
	return true;
}

START_TEST(ascii_and_escapes)
{
	EXPECT("", "\"\"");
	EXPECT("hello world/ok", "\"hello world/ok\"");
	EXPECT("a\"b", "\"a\\\"b\"");
	EXPECT("a\\b", "\"a\\\\b\"");
	EXPECT("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
	EXPECT("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
	EXPECT("\x1b[0m", "\"\\u001b[0m\"");
	EXPECT("a\0b", "\"a\\u0000b\"");
	EXPECT("\0", "\"\\u0000\"");
	/* Only len bytes are read. */
	expect("abcdef", 3, "\"abc\"");
}
END_TEST

START_TEST(valid_utf8_kept)
{
	EXPECT("caf\xc3\xa9", "\"caf\xc3\xa9\"");
	EXPECT("\xe2\x82\xac", "\"\xe2\x82\xac\"");                 /* U+20AC */
	EXPECT("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");         /* U+1F600 */
	EXPECT("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");         /* U+10FFFF */
	EXPECT("\xef\xbf\xbf", "\"\xef\xbf\xbf\"");                 /* U+FFFF */
	EXPECT("\xed\x9f\xbf", "\"\xed\x9f\xbf\"");                 /* U+D7FF */
	EXPECT("\xee\x80\x80", "\"\xee\x80\x80\"");                 /* U+E000 */
	EXPECT("\xc2\x80", "\"\xc2\x80\"");                         /* U+0080 */
	EXPECT("\xe0\xa0\x80", "\"\xe0\xa0\x80\"");                 /* U+0800 */
	EXPECT("\xf0\x90\x80\x80", "\"\xf0\x90\x80\x80\"");         /* U+10000 */
}
END_TEST

#define R "\xef\xbf\xbd"

START_TEST(invalid_utf8_replaced)
{
	EXPECT("\xff", "\"" R "\"");
	EXPECT("\xfe", "\"" R "\"");
	EXPECT("\x80", "\"" R "\"");                       /* lone continuation */
	EXPECT("\xc0\xaf", "\"" R R "\"");                 /* overlong '/' */
	EXPECT("\xc1\xbf", "\"" R R "\"");                 /* overlong */
	EXPECT("\xe0\x80\xaf", "\"" R R R "\"");           /* overlong 3-byte */
	EXPECT("\xf0\x80\x80\xaf", "\"" R R R R "\"");     /* overlong 4-byte */
	EXPECT("\xed\xa0\x80", "\"" R R R "\"");           /* surrogate D800 */
	EXPECT("\xed\xbf\xbf", "\"" R R R "\"");           /* surrogate DFFF */
	EXPECT("\xf4\x90\x80\x80", "\"" R R R R "\"");     /* > U+10FFFF */
	EXPECT("\xf5\x80\x80\x80", "\"" R R R R "\"");
	EXPECT("\xe2\x82", "\"" R R "\"");                 /* truncated at end */
	EXPECT("\xe2\x82" "A", "\"" R R "A\"");            /* truncated then ASCII */
	EXPECT("a\xe2", "\"a" R "\"");
	EXPECT("\xf0\x9f\x98", "\"" R R R "\"");
	EXPECT("\xc3" "\xc3\xa9", "\"" R "\xc3\xa9\"");    /* bad lead, then valid */
	EXPECT("\xe2\x82\x0a", "\"" R R "\\n\"");
	/* A multi-byte sequence cut by len is invalid, not read past. */
	expect("\xe2\x82\xac", 2, "\"" R R "\"");
}
END_TEST

START_TEST(random_bytes_give_valid_json)
{
	uint32_t state = 12345;
	for (int round = 0; round < 500; round++) {
		size_t n = (size_t)(round * 7 % 300);
		unsigned char *in = malloc(n + 1);
		for (size_t i = 0; i < n; i++) {
			state = state * 1103515245u + 12345u;
			in[i] = (unsigned char)(state >> 16);
		}
		char *out = jstr((const char *)in, n);
		size_t olen = strlen(out);
		ck_assert(valid_json_text((const unsigned char *)out, olen));
		cJSON *v = cJSON_Parse(out);
		ck_assert_ptr_nonnull(v);
		ck_assert(cJSON_IsString(v));
		cJSON_Delete(v);
		free(out);
		free(in);
	}
}
END_TEST

START_TEST(roundtrip_through_cjson)
{
	const char in[] = "line1\nline2\t\"q\" \\ caf\xc3\xa9 \xf0\x9f\x98\x80 \x01";
	char *out = jstr(in, sizeof in - 1);
	cJSON *v = cJSON_Parse(out);
	ck_assert(cJSON_IsString(v));
	ck_assert_str_eq(v->valuestring, in);
	cJSON_Delete(v);
	free(out);
}
END_TEST

START_TEST(buf_append_and_take)
{
	struct moat_buf b = { 0 };
	char *s = moat_buf_take(&b);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "");
	free(s);

	moat_buf_append(&b, "abc", 3);
	moat_buf_append(&b, NULL, 0);
	moat_buf_appendf(&b, "-%d-%s", 42, "x");
	ck_assert_uint_eq(b.len, 8);
	ck_assert_str_eq(b.data, "abc-42-x");
	s = moat_buf_take(&b);
	ck_assert_str_eq(s, "abc-42-x");
	ck_assert_ptr_null(b.data);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_uint_eq(b.cap, 0);
	free(s);
	moat_buf_free(&b);
	moat_buf_free(NULL);
}
END_TEST

START_TEST(buf_grows)
{
	struct moat_buf b = { 0 };
	char chunk[1000];
	memset(chunk, 'q', sizeof chunk);
	for (int i = 0; i < 3000; i++)
		moat_buf_append(&b, chunk, sizeof chunk);
	ck_assert(!b.oom);
	ck_assert_uint_eq(b.len, 3000000);
	ck_assert_uint_ge(b.cap, b.len + 1);
	ck_assert_int_eq(b.data[b.len], '\0');
	char *big = malloc(200001);
	memset(big, 'w', 200000);
	big[200000] = '\0';
	moat_buf_appendf(&b, "%s", big);
	ck_assert_uint_eq(b.len, 3200000);
	free(big);
	moat_buf_free(&b);
	ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(buf_oom_is_sticky)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "ok", 2);
	b.oom = true;
	moat_buf_append(&b, "more", 4);
	moat_buf_appendf(&b, "%d", 5);
	moat_buf_append_json_string(&b, "x", 1);
	ck_assert_uint_eq(b.len, 2);
	ck_assert_ptr_null(moat_buf_take(&b));
	/* take reset the buffer (and freed the data). */
	ck_assert_ptr_null(b.data);
	ck_assert(!b.oom);
	moat_buf_append(&b, "new", 3);
	char *s = moat_buf_take(&b);
	ck_assert_str_eq(s, "new");
	free(s);
}
END_TEST

START_TEST(buf_size_overflow)
{
	/* A length near SIZE_MAX: growing must fail cleanly, not wrap. */
	struct moat_buf b = { 0 };
	b.len = SIZE_MAX - 4;
	moat_buf_append(&b, "0123456789", 10);
	ck_assert(b.oom);
	ck_assert_ptr_null(b.data);
	b.len = 0;
	ck_assert_ptr_null(moat_buf_take(&b));

}
END_TEST

/* moat_json_string_fit agrees with the writer: for random bytes (control,
 * invalid and multi-byte UTF-8 among them) and every max, the prefix it
 * gives is written in at most max bytes (quotes aside), the escaped
 * length it reports is that literal's, and one more character would not
 * fit. */
START_TEST(json_string_fit)
{
	static const char pick[] = "a\x01\"\\\n\x7f\xc3\xa9\xe2\x82\xac\xff\xf0\x9f\x98\x80z";
	char in[64];
	unsigned seed = 7;
	for (int round = 0; round < 60; round++) {
		size_t len = (size_t)(seed % sizeof in);
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			in[i] = pick[(seed >> 16) % (sizeof pick - 1)];
		}
		seed = seed * 1103515245u + 12345u;
		char *all = jstr(in, len);
		size_t full = strlen(all) - 2;
		free(all);
		for (size_t max = 0; max <= full + 1; max++) {
			size_t esc = 0, n = moat_json_string_fit(in, len, max, &esc);
			ck_assert_uint_le(n, len);
			char *got = jstr(in, n);
			ck_assert_uint_eq(strlen(got) - 2, esc);
			ck_assert_uint_le(esc, max);
			free(got);
			if (n < len) { /* the next character does not fit */
				size_t e2 = 0, n2 = moat_json_string_fit(in, len, max + 6, &e2);
				ck_assert_uint_gt(n2, n);
				char *more = jstr(in, n + moat_utf8_char_len(in + n, len - n) +
							      (moat_utf8_char_len(in + n, len - n) == 0));
				ck_assert_uint_gt(strlen(more) - 2, max);
				free(more);
			} else {
				ck_assert_uint_eq(esc, full);
			}
		}
	}
	/* a flood of one control byte: six each */
	char flood[100];
	memset(flood, 1, sizeof flood);
	size_t esc = 0;
	ck_assert_uint_eq(moat_json_string_fit(flood, sizeof flood, 100, &esc), 16);
	ck_assert_uint_eq(esc, 96);
}
END_TEST

Suite *jsonw_suite(void)
{
	Suite *s = suite_create("jsonw");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, ascii_and_escapes);
	tcase_add_test(tc, valid_utf8_kept);
	tcase_add_test(tc, invalid_utf8_replaced);
	tcase_add_test(tc, random_bytes_give_valid_json);
	tcase_add_test(tc, roundtrip_through_cjson);
	tcase_add_test(tc, buf_append_and_take);
	tcase_add_test(tc, buf_grows);
	tcase_add_test(tc, buf_oom_is_sticky);
	tcase_add_test(tc, buf_size_overflow);
	tcase_add_test(tc, json_string_fit);
	suite_add_tcase(s, tc);
	return s;
}
