/* Unit tests: the streamed result's lines (src/core/ndjson.c). */
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "suites.h"
#include "core/ndjson.h"

/* The lines of b: each one JSON object; their data put back together per
 * stream in out/err (base64 decoded), the count of base64 lines. */
struct got {
	char out[300000], err[1024];
	size_t out_len, err_len;
	int lines, b64;
	size_t biggest; /* program bytes of one line */
};

static size_t unb64(const char *s, unsigned char *o)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0;
	unsigned v = 0;
	int bits = 0;
	for (; *s && *s != '='; s++) {
		const char *p = strchr(a, *s);
		ck_assert_ptr_nonnull(p);
		v = (v << 6) | (unsigned)(p - a);
		if ((bits += 6) >= 8) {
			bits -= 8;
			o[n++] = (unsigned char)(v >> bits);
		}
	}
	return n;
}

static void collect(struct moat_buf *b, struct got *g)
{
	memset(g, 0, sizeof *g);
	ck_assert(!b->oom);
	char *p = b->data, *lim = b->data + b->len;
	while (p < lim) {
		char *e = memchr(p, '\n', (size_t)(lim - p));
		ck_assert_ptr_nonnull(e);
		ck_assert_uint_le((size_t)(e - p), MOAT_NDJSON_LINE_MAX);
		cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
		ck_assert_ptr_nonnull(j);
		const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "type"));
		const cJSON *d = cJSON_GetObjectItem(j, "data");
		bool is_b64 = cJSON_GetObjectItem(j, "encoding") != NULL;
		unsigned char *dec = malloc(strlen(d->valuestring) + 1);
		size_t n;
		if (is_b64) {
			n = unb64(d->valuestring, dec);
			g->b64++;
		} else { /* these tests have no NUL in text */
			n = strlen(d->valuestring);
			memcpy(dec, d->valuestring, n);
		}
		if (n > g->biggest)
			g->biggest = n;
		bool out = !strcmp(type, "stdout");
		ck_assert(out || !strcmp(type, "stderr"));
		memcpy(out ? g->out + g->out_len : g->err + g->err_len, dec, n);
		*(out ? &g->out_len : &g->err_len) += n;
		free(dec);
		cJSON_Delete(j);
		g->lines++;
		p = e + 1;
	}
}

/* A character cut between two reads is carried, per stream: text, not base64. */
START_TEST(ndjson_carries_a_cut_character)
{
	struct moat_ndjson nj = { 0 };
	struct moat_buf b = { 0 };
	moat_ndjson_output(&nj, &b, MOAT_STDOUT, "a\xe2\x82", 3); /* € cut after 2 of 3 */
	moat_ndjson_output(&nj, &b, MOAT_STDERR, "e\xc3", 2);
	moat_ndjson_output(&nj, &b, MOAT_STDOUT, "\xac!", 2);
	moat_ndjson_output(&nj, &b, MOAT_STDERR, "\xa9", 1);
	moat_ndjson_flush(&nj, &b);
	struct got g;
	collect(&b, &g);
	ck_assert_int_eq(g.b64, 0);
	ck_assert_uint_eq(g.out_len, 5);
	ck_assert(!memcmp(g.out, "a\xe2\x82\xac!", 5));
	ck_assert_uint_eq(g.err_len, 3);
	ck_assert(!memcmp(g.err, "e\xc3\xa9", 3));
	moat_buf_free(&b);
}
END_TEST

/* Bytes that are not UTF-8 are base64, exact; a cut sequence never
 * completed is flushed as base64. */
START_TEST(ndjson_base64_and_flush)
{
	struct moat_ndjson nj = { 0 };
	struct moat_buf b = { 0 };
	moat_ndjson_output(&nj, &b, MOAT_STDOUT, "\xff\xfe\x00z", 4);
	moat_ndjson_output(&nj, &b, MOAT_STDOUT, "ok\xf0\x9f", 4);
	moat_ndjson_flush(&nj, &b);
	struct got g;
	collect(&b, &g);
	ck_assert_int_eq(g.b64, 2);
	ck_assert_uint_eq(g.out_len, 8);
	ck_assert(!memcmp(g.out, "\xff\xfe\x00zok\xf0\x9f", 8));
	moat_buf_free(&b);
}
END_TEST

/* A big chunk is cut in lines of at most MOAT_NDJSON_CHUNK bytes, never
 * inside a character; control bytes keep a line within the bound. */
START_TEST(ndjson_line_bound)
{
	size_t n = 200000;
	char *big = malloc(n);
	for (size_t i = 0; i < n; i += 2) { /* "é" after "é": a boundary falls inside some */
		big[i] = '\xc3';
		big[i + 1] = '\xa9';
	}
	big[1] = 'x'; /* shift: 0x..x then pairs at odd offsets */
	big[0] = 'x';
	memmove(big + 1, big + 2, n - 2);
	big[n - 1] = 'y';
	struct moat_ndjson nj = { 0 };
	struct moat_buf b = { 0 };
	moat_ndjson_output(&nj, &b, MOAT_STDOUT, big, n);
	moat_ndjson_flush(&nj, &b);
	struct got g;
	collect(&b, &g);
	ck_assert_int_eq(g.b64, 0);
	ck_assert_uint_le(g.biggest, MOAT_NDJSON_CHUNK);
	ck_assert_int_ge(g.lines, 4);
	ck_assert_uint_eq(g.out_len, n);
	ck_assert(!memcmp(g.out, big, n));
	moat_buf_free(&b);
	memset(big, 1, n);
	moat_ndjson_output(&nj, &b, MOAT_STDERR, big, 1000);
	collect(&b, &g); /* control bytes: escaped, within the line bound */
	ck_assert_uint_eq(g.err_len, 1000);
	moat_buf_free(&b);
	free(big);
}
END_TEST

/* The result line: type and streamed first, then the result's own fields. */
START_TEST(ndjson_result_line)
{
	struct moat_result *r = moat_result_new();
	r->exited = true;
	r->exit_code = 3;
	char *line = moat_ndjson_result(r);
	ck_assert_ptr_nonnull(line);
	size_t len = strlen(line);
	ck_assert(len > 2 && line[len - 1] == '\n' && !memchr(line, '\n', len - 1));
	ck_assert(!strncmp(line, "{\"type\":\"result\",\"streamed\":true,\"stdout\":\"\"", 44));
	cJSON *j = cJSON_Parse(line);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "exitCode")), 3);
	cJSON_Delete(j);
	free(line);
	moat_result_free(r);
}
END_TEST

Suite *ndjson_suite(void)
{
	Suite *s = suite_create("ndjson");
	TCase *tc = tcase_create("ndjson");
	tcase_add_test(tc, ndjson_carries_a_cut_character);
	tcase_add_test(tc, ndjson_base64_and_flush);
	tcase_add_test(tc, ndjson_line_bound);
	tcase_add_test(tc, ndjson_result_line);
	suite_add_tcase(s, tc);
	return s;
}
