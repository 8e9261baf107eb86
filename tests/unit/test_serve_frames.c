/* Unit tests, suite serve (test_serve.c): the handler frame parser (valid
 * and malformed frames, after the end, vectors and random streams). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "net/internal.h"
#include "serve/internal.h"
#include "fixture.h"

/* ---- handler frames ---- */

struct rec {
	int heads;
	int status;
	char **headers;
	size_t count;
	struct moat_buf body;
	size_t body_calls;
};

static void rec_head(void *ctx, int status, char **headers, size_t count)
{
	struct rec *r = ctx;
	r->heads++;
	for (size_t i = 0; i < 2 * r->count; i++)
		free(r->headers[i]);
	free(r->headers);
	r->status = status;
	r->headers = headers;
	r->count = count;
}

static void rec_body(void *ctx, const char *buf, size_t len)
{
	struct rec *r = ctx;
	ck_assert_uint_gt(len, 0);
	ck_assert_int_eq(r->heads, 1); /* no body before the head */
	moat_buf_append(&r->body, buf, len);
	r->body_calls++;
}

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < 2 * r->count; i++)
		free(r->headers[i]);
	free(r->headers);
	moat_buf_free(&r->body);
	memset(r, 0, sizeof *r);
}

/* Feeds s in pieces of step bytes (0: at once), each an exact-size heap
 * copy, then finishes unless !finish. */
static void run_frames(struct frame_parser *p, struct rec *r, uint64_t cap, const char *s,
		       size_t len, size_t step, bool finish)
{
	memset(r, 0, sizeof *r);
	struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = r };
	frame_init(p, cap, &sink);
	ck_assert_int_eq(p->state, FRAME_HEAD);
	size_t at = 0;
	do {
		size_t n = step && len - at > step ? step : len - at;
		char *piece = malloc(n ? n : 1);
		ck_assert_ptr_nonnull(piece);
		memcpy(piece, s + at, n);
		frame_feed(p, piece, n);
		free(piece);
		at += n;
	} while (at < len);
	if (finish)
		frame_finish(p);
	ck_assert_uint_eq(p->body_total, r->body.len);
	ck_assert((p->state == FRAME_FAILED) == (p->error != NULL));
}

/* The stream must fail (after finish); the error holds substr (NULL: any). */
static void frames_fail(const char *s, uint64_t cap, const char *substr)
{
	size_t len = strlen(s);
	static const size_t steps[] = { 0, 1, 2, 7 };
	for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, cap, s, len, steps[k], true);
		ck_assert_msg(p.state == FRAME_FAILED, "accepted (step %zu): %s", steps[k], s);
		ck_assert_ptr_nonnull(p.error);
		ck_assert_msg(!strchr(p.error, '\n') && !strchr(p.error, '\r'), "%s", p.error);
		if (substr)
			ck_assert_msg(strstr(p.error, substr), "%s: \"%s\" lacks \"%s\"", s, p.error,
				      substr);
		frame_free(&p);
		ck_assert_ptr_null(p.error);
		rec_free(&r);
	}
}

static const char valid_stream[] =
	"MOAT/1 {\"status\":201,\"headers\":[[\"Content-Type\",\"text/plain\"],"
	"[\"X-A\",\"1\"],[\"Content-Length\",\"99\"],[\"transfer-encoding\",\"chunked\"],"
	"[\"Connection\",\"close\"],[\"Set-Cookie\",\"a=b; Path=/\"],[\"Keep-Alive\",\"x\"],"
	"[\"Upgrade\",\"h2c\"],[\"TE\",\"trailers\"],[\"Trailer\",\"X\"],[\"X-Tab\",\"a\\tb\"]]}\n"
	"5\nhello"
	"1\n\n"
	"12\n world 0123\n"
	"end\n";

static void check_valid(const struct frame_parser *p, const struct rec *r)
{
	ck_assert_int_eq(p->state, FRAME_END);
	ck_assert_ptr_null(p->error);
	ck_assert(p->head_seen);
	ck_assert_int_eq(r->heads, 1);
	ck_assert_int_eq(r->status, 201);
	ck_assert_uint_eq(r->count, 4);
	static const char *const want[] = { "Content-Type", "text/plain", "X-A", "1",
					    "Set-Cookie", "a=b; Path=/", "X-Tab", "a\tb" };
	for (size_t i = 0; i < 8; i++)
		ck_assert_str_eq(r->headers[i], want[i]);
	static const char body[] = "hello\n world 0123\n";
	ck_assert_uint_eq(r->body.len, sizeof body - 1);
	ck_assert(!memcmp(r->body.data, body, sizeof body - 1));
	ck_assert_uint_eq(p->body_total, sizeof body - 1);
}

START_TEST(frames_valid)
{
	size_t len = sizeof valid_stream - 1;
	for (size_t step = 0; step <= 13; step++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 1 << 20, valid_stream, len, step, true);
		check_valid(&p, &r);
		if (step == 0)
			ck_assert_uint_eq(r.body_calls, 3);
		if (step == 1)
			ck_assert_uint_eq(r.body_calls, r.body.len);
		frame_free(&p);
		rec_free(&r);
	}
	/* every split in two */
	for (size_t cut = 0; cut <= len; cut++) {
		struct frame_parser p;
		struct rec r;
		memset(&r, 0, sizeof r);
		struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = &r };
		frame_init(&p, 1 << 20, &sink);
		frame_feed(&p, valid_stream, cut);
		ck_assert_msg(p.state != FRAME_FAILED, "cut %zu: %s", cut, p.error);
		ck_assert_msg(cut == len || p.state != FRAME_END, "cut %zu", cut);
		frame_feed(&p, valid_stream + cut, len - cut);
		frame_finish(&p);
		check_valid(&p, &r);
		frame_free(&p);
		rec_free(&r);
	}

	/* head + 2 chunks + end; no headers key; the smallest and largest status */
	static const char *const two[] = {
		"MOAT/1 {\"status\":200}\n3\nabc4\ndefgend\n",
		"MOAT/1 {\"headers\":[],\"status\":599}\n3\nabc4\ndefgend\n",
	};
	for (size_t i = 0; i < 2; i++) {
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 7, two[i], strlen(two[i]), 0, true);
		ck_assert_int_eq(p.state, FRAME_END);
		ck_assert_int_eq(r.status, i ? 599 : 200);
		ck_assert_uint_eq(r.count, 0);
		ck_assert_uint_eq(r.body.len, 7);
		ck_assert(!memcmp(r.body.data, "abcdefg", 7));
		frame_free(&p);
		rec_free(&r);
	}

	/* states on the way */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "MOAT/1 {\"status\":204}", 21, 0, false);
	ck_assert_int_eq(p.state, FRAME_HEAD);
	ck_assert_int_eq(r.heads, 0);
	frame_feed(&p, "\n", 1);
	ck_assert_int_eq(p.state, FRAME_LEN);
	ck_assert_int_eq(r.heads, 1);
	ck_assert_int_eq(r.status, 204);
	frame_feed(&p, "10\n01234", 8);
	ck_assert_int_eq(p.state, FRAME_BODY);
	ck_assert_uint_eq(p.remaining, 5);
	frame_feed(&p, "56789", 5);
	ck_assert_int_eq(p.state, FRAME_LEN);
	frame_feed(&p, "en", 2);
	ck_assert_int_eq(p.state, FRAME_LEN);
	frame_feed(&p, "d\n", 2);
	ck_assert_int_eq(p.state, FRAME_END);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_ptr_null(p.error);
	frame_free(&p);
	rec_free(&r);

	/* an empty body; the body exactly at the cap */
	run_frames(&p, &r, 0, "MOAT/1 {\"status\":200}\nend\n", 26, 0, true);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(r.body.len, 0);
	frame_free(&p);
	rec_free(&r);
	run_frames(&p, &r, 6, "MOAT/1 {\"status\":200}\n3\nabc3\ndefend\n", 36, 1, true);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(r.body.len, 6);
	frame_free(&p);
	rec_free(&r);

	/* a sink without callbacks */
	struct frame_sink none = { 0 };
	frame_init(&p, 100, &none);
	frame_feed(&p, valid_stream, len);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_END);
	ck_assert_uint_eq(p.body_total, 18);
	frame_free(&p);

	/* frame_header_ok / frame_header_dropped directly */
	ck_assert(frame_header_ok("X-A", "v"));
	ck_assert(frame_header_ok("x!#$%&'*+-.^_`|~9", ""));
	ck_assert(frame_header_ok("X", "a\tb \x80\xff"));
	ck_assert(!frame_header_ok("", "v"));
	ck_assert(!frame_header_ok("X A", "v"));
	ck_assert(!frame_header_ok("X:", "v"));
	ck_assert(!frame_header_ok("X(", "v"));
	ck_assert(!frame_header_ok("X", "a\rb"));
	ck_assert(!frame_header_ok("X", "a\nb"));
	ck_assert(!frame_header_ok("X", "a\x01"));
	ck_assert(!frame_header_ok("X", "a\x7f"));
	static const char *const dropped[] = { "Content-Length", "content-length",
					       "TRANSFER-ENCODING", "Connection", "keep-alive",
					       "Upgrade", "TE", "te", "Trailer" };
	for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
		ck_assert_msg(frame_header_dropped(dropped[i]), "%s", dropped[i]);
	static const char *const kept[] = { "Content-Type", "Trailers", "TEx", "Set-Cookie",
					    "Content-Length2", "X-Connection", "Location" };
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
		ck_assert_msg(!frame_header_dropped(kept[i]), "%s", kept[i]);
}
END_TEST

START_TEST(frames_errors)
{
	/* "error" before the head: the handler's own words */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "error boom\n", 11, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "boom");
	ck_assert(!p.head_seen);
	ck_assert_int_eq(r.heads, 0);
	frame_free(&p);
	rec_free(&r);
	run_frames(&p, &r, 100, "error boom\n", 11, 1, false);
	ck_assert_int_eq(p.state, FRAME_FAILED); /* before finish */
	ck_assert_str_eq(p.error, "boom");
	frame_free(&p);
	rec_free(&r);
	/* control characters made blanks; bounded */
	run_frames(&p, &r, 100, "error a\tb\x01" "c\r\n", 13, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "a b c ");
	frame_free(&p);
	rec_free(&r);
	char line[600] = "error ";
	memset(line + 6, 'e', 530);
	strcpy(line + 536, "\n");
	run_frames(&p, &r, 100, line, strlen(line), 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_le(strlen(p.error), 500);
	frame_free(&p);
	rec_free(&r);

	/* after the head and some body: a truncation */
	const char *s = "MOAT/1 {\"status\":200,\"headers\":[[\"A\",\"b\"]]}\n2\nhierror late boom\n";
	run_frames(&p, &r, 100, s, strlen(s), 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_str_eq(p.error, "late boom");
	ck_assert(p.head_seen);
	ck_assert_int_eq(r.heads, 1);
	ck_assert_uint_eq(r.body.len, 2);
	frame_free(&p);
	rec_free(&r);

	/* no head, or no end, then EOF */
	frames_fail("", 100, NULL);
	run_frames(&p, &r, 100, "", 0, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert(!p.head_seen);
	frame_free(&p);
	rec_free(&r);
	frames_fail("MOAT/1 {\"status\":200}", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhel", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhello", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhelloend", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n5\nhelloen", 100, NULL);
	frames_fail("hello world\n", 100, NULL);
	frames_fail("end\n", 100, NULL);
	frames_fail("error\n", 100, NULL);
	frames_fail("\n", 100, NULL);
	frames_fail("MOAT/2 {\"status\":200}\nend\n", 100, NULL);
	frames_fail("MOAT/1{\"status\":200}\nend\n", 100, NULL);
	frames_fail("moat/1 {\"status\":200}\nend\n", 100, NULL);
	frames_fail(" MOAT/1 {\"status\":200}\nend\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\nend\r\n", 100, NULL);
	frames_fail("MOAT/1 {\"status\":200}\n1\r\naend\n", 100, NULL);

	/* chunk lengths */
	static const char *const bad_len[] = {
		"0", "01", "00", "-1", "+1", "1a", "a", " 1", "1 ", "0x10", "1.0", "",
		"123456789012345678901", /* 21 digits */
		"99999999999999999999",  /* 20 digits, over the cap (and near overflow) */
		"18446744073709551616",  /* 2^64 */
		"end ", "END", "en", "ends",
	};
	for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
		char st[200];
		snprintf(st, sizeof st, "MOAT/1 {\"status\":200}\n%s\nabcdefghijend\n", bad_len[i]);
		frames_fail(st, 1 << 20, NULL);
	}
	/* 20 digits are read, not refused for their length */
	run_frames(&p, &r, UINT64_MAX, "MOAT/1 {\"status\":200}\n10000000000000000000\nx", 44, 0,
		   false);
	ck_assert_int_eq(p.state, FRAME_BODY);
	ck_assert_uint_eq(p.remaining, 10000000000000000000u - 1);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	frame_free(&p);
	rec_free(&r);

	/* the body cap: one chunk over, or the total over */
	frames_fail("MOAT/1 {\"status\":200}\n11\nabcdefghijkend\n", 10, "maxResponseBytes");
	frames_fail("MOAT/1 {\"status\":200}\n6\nabcdef5\nghijkend\n", 10, "maxResponseBytes");
	frames_fail("MOAT/1 {\"status\":200}\n1\na", 0, "maxResponseBytes");
	run_frames(&p, &r, 10, "MOAT/1 {\"status\":200}\n6\nabcdef5\nghijkend\n", 41, 0, true);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_eq(r.body.len, 6); /* nothing of the chunk over the cap */
	frame_free(&p);
	rec_free(&r);

	/* the head */
	static const char *const bad_heads[] = {
		"{\"status\":199}", "{\"status\":600}", "{\"status\":200.5}", "{\"status\":\"200\"}",
		"{\"status\":-200}", "{\"status\":0}", "{\"status\":1e999}", "{\"status\":null}",
		"{\"status\":true}", "{}", "[]", "200", "", "{", "{\"status\":200",
		"{\"status\":2000000000000}",
		"{\"status\":200,\"headers\":{}}",
		"{\"status\":200,\"headers\":\"X: y\"}",
		"{\"status\":200,\"headers\":[\"X\"]}",
		"{\"status\":200,\"headers\":[[\"X\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"y\",\"z\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",1]]}",
		"{\"status\":200,\"headers\":[[1,\"y\"]]}",
		"{\"status\":200,\"headers\":[{\"X\":\"y\"}]}",
		"{\"status\":200,\"headers\":[[\"X Y\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"X:\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"\",\"v\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\rb\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\nb\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\r\\nSet-Cookie: x=1\"]]}",
		"{\"status\":200,\"headers\":[[\"X\",\"a\\u007f\"]]}",
		"{\"status\":200,\"headers\":[[\"Content-Length\",\"a\\nb\"]]}",
	};
	for (size_t i = 0; i < sizeof bad_heads / sizeof bad_heads[0]; i++) {
		char st[300];
		snprintf(st, sizeof st, "MOAT/1 %s\n1\naend\n", bad_heads[i]);
		frames_fail(st, 100, NULL);
		run_frames(&p, &r, 100, st, strlen(st), 0, true);
		ck_assert_int_eq(r.heads, 0); /* the sink never saw it */
		ck_assert(!p.head_seen);
		frame_free(&p);
		rec_free(&r);
	}

	/* 100 headers fine (dropped ones count too), 101 not */
	for (int n = 100; n <= 101; n++) {
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "MOAT/1 {\"status\":200,\"headers\":[[\"Connection\",\"x\"]");
		for (int i = 1; i < n; i++)
			moat_buf_appendf(&b, ",[\"X-H%d\",\"%d\"]", i, i);
		moat_buf_appendf(&b, "]}\nend\n");
		char *st = moat_buf_take(&b);
		run_frames(&p, &r, 100, st, strlen(st), 0, true);
		if (n == 100) {
			ck_assert_int_eq(p.state, FRAME_END);
			ck_assert_uint_eq(r.count, 99);
			ck_assert_str_eq(r.headers[0], "X-H1");
			ck_assert_str_eq(r.headers[197], "99");
		} else {
			ck_assert_int_eq(p.state, FRAME_FAILED);
			ck_assert_int_eq(r.heads, 0);
			ck_assert_ptr_nonnull(strstr(p.error, "100"));
		}
		frame_free(&p);
		rec_free(&r);
		free(st);
	}

	/* a second head is not a length */
	frames_fail("MOAT/1 {\"status\":200}\nMOAT/1 {\"status\":200}\nend\n", 100, NULL);

	/* the head line: 64 KiB is fine, one byte more is not */
	size_t cap = SERVE_MAX_HEAD_BYTES;
	char *big = malloc(cap + 100);
	ck_assert_ptr_nonnull(big);
	static const char pre[] = "MOAT/1 {\"status\":200,\"headers\":[[\"X\",\"";
	static const char post[] = "\"]]}";
	for (size_t extra = 0; extra <= 1; extra++) {
		size_t fill = cap + extra - (sizeof pre - 1) - (sizeof post - 1);
		memcpy(big, pre, sizeof pre - 1);
		memset(big + sizeof pre - 1, 'v', fill);
		memcpy(big + sizeof pre - 1 + fill, post, sizeof post - 1);
		size_t l = cap + extra;
		ck_assert_uint_eq(sizeof pre - 1 + fill + sizeof post - 1, l);
		memcpy(big + l, "\nend\n", 5);
		/* the header value is over frame_header_ok's 8192 bytes, so even the
		 * line that fits is refused — but for its value, not its size */
		run_frames(&p, &r, 100, big, l + 5, 4096, true);
		ck_assert_int_eq(p.state, FRAME_FAILED);
		if (extra)
			ck_assert_ptr_nonnull(strstr(p.error, "too large"));
		else
			ck_assert_ptr_null(strstr(p.error, "too large"));
		frame_free(&p);
		rec_free(&r);
	}
	/* many small headers filling 64 KiB exactly: accepted */
	{
		struct moat_buf b = { 0 };
		size_t per = 600;
		moat_buf_appendf(&b, "MOAT/1 {\"status\":200,\"headers\":[");
		for (int i = 0; i < 99; i++) {
			moat_buf_appendf(&b, "[\"X-%02d\",\"", i);
			for (size_t k = 0; k < per; k++)
				moat_buf_append(&b, "v", 1);
			moat_buf_appendf(&b, "\"],");
		}
		moat_buf_appendf(&b, "[\"X-99\",\"");
		size_t tail = strlen("\"]]}");
		ck_assert_uint_lt(b.len + tail, cap);
		size_t pad = cap - b.len - tail;
		ck_assert_uint_le(pad, 8192);
		for (size_t k = 0; k < pad; k++)
			moat_buf_append(&b, "w", 1);
		moat_buf_appendf(&b, "\"]]}");
		ck_assert_uint_eq(b.len, cap);
		moat_buf_appendf(&b, "\nend\n");
		for (size_t extra = 0; extra <= 1; extra++) {
			char *st = malloc(b.len + 1);
			ck_assert_ptr_nonnull(st);
			size_t l = b.len;
			memcpy(st, b.data, b.len);
			if (extra) { /* one more 'w' in the last value */
				st = realloc(st, l + 2);
				ck_assert_ptr_nonnull(st);
				memmove(st + cap - tail + 1, st + cap - tail, l - (cap - tail));
				st[cap - tail] = 'w';
				l++;
			}
			run_frames(&p, &r, 100, st, l, 1000, true);
			if (extra) {
				ck_assert_int_eq(p.state, FRAME_FAILED);
				ck_assert_ptr_nonnull(strstr(p.error, "too large"));
				ck_assert_int_eq(r.heads, 0);
			} else {
				ck_assert_msg(p.state == FRAME_END, "%s", p.error);
				ck_assert_uint_eq(r.count, 100);
			}
			frame_free(&p);
			rec_free(&r);
			free(st);
		}
		moat_buf_free(&b);
	}
	/* a head line that never ends is refused before 64 KiB + 1 is buffered */
	memset(big, 'M', cap + 100);
	run_frames(&p, &r, 100, big, cap + 1, 0, false);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_uint_le(p.line.cap, cap + 1024);
	frame_free(&p);
	rec_free(&r);
	free(big);

	/* a length line that never ends */
	char lenline[2000] = "MOAT/1 {\"status\":200}\n";
	memset(lenline + 23, '1', 1500);
	lenline[1523] = '\0';
	frames_fail(lenline, UINT64_MAX, NULL);
}
END_TEST

/* After "end", anything more is a failure (SERVE.md: "Anything else ... is a
 * failure"), whether in the same write or a later one. */
START_TEST(frames_after_end)
{
	static const char *const after[] = {
		"MOAT/1 {\"status\":200}\nend\nx",
		"MOAT/1 {\"status\":200}\nend\n\n",
		"MOAT/1 {\"status\":200}\nend\nend\n",
		"MOAT/1 {\"status\":200}\n1\naend\n1\nb",
		"MOAT/1 {\"status\":200}\nend\nerror late\n",
	};
	for (size_t i = 0; i < sizeof after / sizeof after[0]; i++)
		frames_fail(after[i], 100, NULL);
	/* in a later write */
	struct frame_parser p;
	struct rec r;
	run_frames(&p, &r, 100, "MOAT/1 {\"status\":200}\nend\n", 26, 0, false);
	ck_assert_int_eq(p.state, FRAME_END);
	frame_feed(&p, "z", 1);
	frame_finish(&p);
	ck_assert_int_eq(p.state, FRAME_FAILED);
	ck_assert_ptr_nonnull(p.error);
	frame_free(&p);
	rec_free(&r);
}
END_TEST

/* ---- random streams ---- */

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 32);
}

/* The handler protocol's shared vectors (tests/fixtures/frames/handler.json,
 * also read by tests/runtime/test_frames.py against the Python bootstrap's
 * writer): each valid stream parses to its status, headers and body, fed
 * whole and a byte at a time; each invalid one fails. */
START_TEST(frame_vectors)
{
	cJSON *doc = fixture_json("frames/handler.json");
	const cJSON *valid = cJSON_GetObjectItemCaseSensitive(doc, "valid"), *v;
	ck_assert_int_gt(cJSON_GetArraySize(valid), 0);
	cJSON_ArrayForEach(v, valid)
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
		const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "stream"));
		const cJSON *headers = cJSON_GetObjectItemCaseSensitive(v, "headers"), *c;
		ck_assert_ptr_nonnull(name);
		ck_assert_ptr_nonnull(s);
		struct moat_buf body = { 0 };
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(v, "chunks"))
			moat_buf_append(&body, c->valuestring, strlen(c->valuestring));
		for (size_t step = 0; step <= 1; step++) {
			struct frame_parser p;
			struct rec r;
			run_frames(&p, &r, 1 << 20, s, strlen(s), step, true);
			ck_assert_msg(p.state == FRAME_END, "%s: %s", name, p.error ? p.error : "not ended");
			ck_assert_int_eq(r.status, (int)cJSON_GetNumberValue(
							   cJSON_GetObjectItemCaseSensitive(v, "status")));
			ck_assert_uint_eq(r.count, (size_t)cJSON_GetArraySize(headers));
			for (size_t i = 0; i < r.count; i++) {
				const cJSON *h = cJSON_GetArrayItem(headers, (int)i);
				ck_assert_str_eq(r.headers[2 * i], cJSON_GetArrayItem(h, 0)->valuestring);
				ck_assert_str_eq(r.headers[2 * i + 1], cJSON_GetArrayItem(h, 1)->valuestring);
			}
			ck_assert_msg(r.body.len == body.len && (!body.len || !memcmp(r.body.data, body.data, body.len)),
				      "%s: body [%.*s]", name, (int)r.body.len, r.body.data ? r.body.data : "");
			frame_free(&p);
			rec_free(&r);
		}
		moat_buf_free(&body);
	}
	const cJSON *invalid = cJSON_GetObjectItemCaseSensitive(doc, "invalid");
	ck_assert_int_gt(cJSON_GetArraySize(invalid), 0);
	cJSON_ArrayForEach(v, invalid)
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
		const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "stream"));
		struct frame_parser p;
		struct rec r;
		run_frames(&p, &r, 1 << 20, s, strlen(s), 0, true);
		ck_assert_msg(p.state == FRAME_FAILED, "%s: accepted", name);
		frame_free(&p);
		rec_free(&r);
	}
	cJSON_Delete(doc);
}
END_TEST

START_TEST(frames_random)
{
	static const char *const pieces[] = {
		"MOAT/1 ", "{\"status\":200}", "{\"status\":200,\"headers\":[[\"A\",\"b\"]]}", "\n",
		"end\n", "error x\n", "1\n", "5\n", "0\n", "12\n", "hello", "\r", "\x00", "\xff",
		"[", "]", "\"", ",", "{", "}", "99999999999999999999\n",
	};
	size_t vlen = sizeof valid_stream - 1;
	char *buf = malloc(4096);
	ck_assert_ptr_nonnull(buf);
	unsigned seen[5] = { 0 };
	for (int it = 0; it < 20000; it++) {
		size_t len = 0;
		switch (it % 3) {
		case 0: /* noise */
			len = next() % 600;
			for (size_t i = 0; i < len; i++)
				buf[i] = (char)next();
			break;
		case 1: /* the valid stream, a few bytes changed, cut or not */
			len = next() % 4 ? vlen : next() % (vlen + 1);
			memcpy(buf, valid_stream, len);
			for (unsigned k = next() % 4; k > 0 && len; k--)
				buf[next() % len] = (char)next();
			if (next() % 8 == 0 && len < 4000) { /* and bytes inserted */
				size_t at = next() % (len + 1);
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = (char)next();
				len++;
			}
			break;
		default: /* pieces of the protocol */
			for (unsigned k = next() % 20; k > 0; k--) {
				const char *pc = pieces[next() % (sizeof pieces / sizeof pieces[0])];
				size_t pl = pc[0] ? strlen(pc) : 1;
				if (len + pl > 4096)
					break;
				memcpy(buf + len, pc, pl);
				len += pl;
			}
		}
		struct rec r;
		memset(&r, 0, sizeof r);
		struct frame_sink sink = { .head = rec_head, .body = rec_body, .ctx = &r };
		struct frame_parser p;
		uint64_t cap = next() % 2 ? 1 << 20 : next() % 32;
		frame_init(&p, cap, &sink);
		for (size_t at = 0; at < len;) {
			size_t n = 1 + next() % (len - at);
			if (next() % 2)
				n = n > 8 ? n % 8 + 1 : n;
			char *piece = malloc(n);
			ck_assert_ptr_nonnull(piece);
			memcpy(piece, buf + at, n);
			frame_feed(&p, piece, n);
			free(piece);
			at += n;
			ck_assert_uint_le(p.body_total, cap);
		}
		frame_finish(&p);
		ck_assert(p.state == FRAME_END || p.state == FRAME_FAILED);
		ck_assert((p.state == FRAME_FAILED) == (p.error != NULL));
		ck_assert(p.head_seen == (r.heads == 1));
		ck_assert_int_le(r.heads, 1);
		ck_assert_uint_eq(p.body_total, r.body.len);
		if (p.state == FRAME_END)
			ck_assert(p.head_seen);
		if (p.error)
			ck_assert(!strchr(p.error, '\n'));
		seen[p.state]++;
		frame_free(&p);
		rec_free(&r);
	}
	ck_assert_uint_gt(seen[FRAME_END], 0);
	ck_assert_uint_gt(seen[FRAME_FAILED], 0);
	free(buf);
}
END_TEST

void serve_frames_tests(TCase *tc);

void serve_frames_tests(TCase *tc)
{
	tcase_add_test(tc, frames_valid);
	tcase_add_test(tc, frames_errors);
	tcase_add_test(tc, frames_after_end);
	tcase_add_test(tc, frames_random);
	tcase_add_test(tc, frame_vectors);
}
