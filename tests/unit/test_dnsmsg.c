/* Unit tests: the DNS answerer's message codec (src/net/dnsmsg.c). */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <check.h>

#include "net/dnsmsg.h"
#include "suites.h"

static size_t put16(uint8_t *b, size_t n, unsigned v)
{
	b[n] = (uint8_t)(v >> 8);
	b[n + 1] = (uint8_t)v;
	return n + 2;
}

static unsigned get16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

/* A query: header, the dotted name as labels, qtype, class IN, and with
 * edns an OPT record carrying one 8-byte cookie option. */
static size_t build_query(uint8_t *b, unsigned id, unsigned flags, const char *name,
			  unsigned qtype, bool edns)
{
	size_t n = put16(b, 0, id);
	n = put16(b, n, flags);
	n = put16(b, n, 1);
	n = put16(b, n, 0);
	n = put16(b, n, 0);
	n = put16(b, n, edns);
	while (*name) {
		size_t l = strcspn(name, ".");
		b[n++] = (uint8_t)l;
		memcpy(b + n, name, l);
		n += l;
		name += l + (name[l] == '.');
	}
	b[n++] = 0;
	n = put16(b, n, qtype);
	n = put16(b, n, 1);
	if (edns) {
		static const uint8_t opt[] = { 0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12,
					       0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8 };
		memcpy(b + n, opt, sizeof opt);
		n += sizeof opt;
	}
	return n;
}

/* moat_dns_parse_query on an exact-size heap copy (ASan sees over-reads). */
static int parse(const uint8_t *m, size_t len, struct moat_dns_query *q, int *bad_id)
{
	uint8_t *b = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(b);
	if (len)
		memcpy(b, m, len);
	int rc = moat_dns_parse_query(b, len, q, bad_id);
	free(b);
	if (rc == 0) {
		ck_assert_uint_le(strnlen(q->name, sizeof q->name), 253);
		ck_assert_uint_le(q->question_len, len);
		ck_assert_uint_ge(q->question_len, 17);
	}
	return rc;
}

/* Checks a response against the query it answers: header, the echoed
 * question, then exactly the want answers. */
static void check_response(const uint8_t *r, int rlen, const uint8_t *query, size_t qlen,
			   unsigned flags, unsigned qtype, uint32_t ttl,
			   const struct moat_dns_addr *want, size_t nwant)
{
	ck_assert_int_ge(rlen, (int)qlen);
	ck_assert_int_le(rlen, 512);
	ck_assert_uint_eq(get16(r), get16(query));
	ck_assert_uint_eq(get16(r + 2), flags);
	ck_assert_uint_eq(get16(r + 4), 1);
	ck_assert_uint_eq(get16(r + 6), nwant);
	ck_assert_uint_eq(get16(r + 8), 0);
	ck_assert_uint_eq(get16(r + 10), 0);
	ck_assert_mem_eq(r + 12, query + 12, qlen - 12);
	size_t at = qlen;
	for (size_t i = 0; i < nwant; i++) {
		size_t alen = want[i].family == AF_INET ? 4 : 16;
		ck_assert_uint_le(at + 12 + alen, (size_t)rlen);
		ck_assert_uint_eq(get16(r + at), 0xc00c);
		ck_assert_uint_eq(get16(r + at + 2), qtype);
		ck_assert_uint_eq(get16(r + at + 4), 1);
		ck_assert_uint_eq((uint32_t)get16(r + at + 6) << 16 | get16(r + at + 8), ttl);
		ck_assert_uint_eq(get16(r + at + 10), alen);
		ck_assert_mem_eq(r + at + 12, want[i].a, alen);
		at += 12 + alen;
	}
	ck_assert_uint_eq(at, (size_t)rlen);
}

static struct moat_dns_addr addr(const char *text)
{
	struct moat_dns_addr a = { .family = strchr(text, ':') ? AF_INET6 : AF_INET };
	ck_assert_int_eq(inet_pton(a.family, text, a.a), 1);
	return a;
}

START_TEST(round_trip)
{
	uint8_t m[600], r[600];
	struct moat_dns_query q;
	int bad_id;
	const struct moat_dns_addr addrs[] = { addr("192.0.2.1"), addr("2001:db8::1"),
					       addr("198.51.100.7"), addr("2001:db8::2") };

	size_t len = build_query(m, 0x1234, 0x0100, "Api.Example.com", 1, false);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	ck_assert_int_eq(bad_id, 0x1234);
	ck_assert_uint_eq(q.id, 0x1234);
	ck_assert(q.rd);
	ck_assert_str_eq(q.name, "api.example.com");
	ck_assert_uint_eq(q.qtype, 1);
	ck_assert_uint_eq(q.qclass, 1);
	ck_assert_uint_eq(q.question_len, 12 + 17 + 4);
	int rlen = moat_dns_build_response(&q, m, 0, addrs, 4, 300, r, sizeof r);
	const struct moat_dns_addr want4[] = { addrs[0], addrs[2] };
	check_response(r, rlen, m, q.question_len, 0x8180, 1, 300, want4, 2);

	/* AAAA with EDNS: the OPT record is skipped and not answered. */
	len = build_query(m, 0xbeef, 0, "api.example.com.", 28, true);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	ck_assert(!q.rd);
	ck_assert_str_eq(q.name, "api.example.com");
	ck_assert_uint_eq(q.qtype, 28);
	ck_assert_uint_eq(q.question_len, len - 23);
	rlen = moat_dns_build_response(&q, m, 0, addrs, 4, 0xfffffffe, r, sizeof r);
	const struct moat_dns_addr want6[] = { addrs[1], addrs[3] };
	check_response(r, rlen, m, q.question_len, 0x8080, 28, 0xfffffffe, want6, 2);

	/* Errors and other types carry no answers. */
	static const int rcodes[] = { 1, 2, 3, 5 };
	for (size_t i = 0; i < 4; i++) {
		rlen = moat_dns_build_response(&q, m, rcodes[i], addrs, 4, 60, r, sizeof r);
		check_response(r, rlen, m, q.question_len, 0x8080u | (unsigned)rcodes[i], 28, 60,
			       NULL, 0);
	}
	len = build_query(m, 7, 0x0100, "example.com", 15, false); /* MX */
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	rlen = moat_dns_build_response(&q, m, 0, addrs, 4, 60, r, sizeof r);
	check_response(r, rlen, m, q.question_len, 0x8180, 15, 60, NULL, 0);
	len = build_query(m, 7, 0x0100, "example.com", 1, false);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	q.qclass = 3; /* CH */
	rlen = moat_dns_build_response(&q, m, 0, addrs, 4, 60, r, sizeof r);
	check_response(r, rlen, m, q.question_len, 0x8180, 1, 60, NULL, 0);
	ck_assert_int_eq(moat_dns_build_response(&q, m, 16, addrs, 4, 60, r, sizeof r), -1);
	ck_assert_int_eq(moat_dns_build_response(&q, m, -1, addrs, 4, 60, r, sizeof r), -1);

	/* The root; and the response written over the query. */
	len = build_query(m, 9, 0x0100, "", 2, false);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	ck_assert_str_eq(q.name, "");
	ck_assert_uint_eq(q.question_len, 17);
	memcpy(r, m, len);
	rlen = moat_dns_build_response(&q, r, 3, NULL, 0, 0, r, 17);
	check_response(r, rlen, m, 17, 0x8183, 2, 0, NULL, 0);
	ck_assert_int_eq(moat_dns_build_response(&q, m, 3, NULL, 0, 0, r, 16), -1);

	/* The longest name; label bytes in any case, '_' and '-'. */
	char name[300];
	memset(name, 'a', 253);
	name[63] = name[127] = name[191] = '.';
	name[0] = 'A';
	name[1] = '_';
	name[2] = '-';
	name[253] = '\0';
	len = build_query(m, 1, 0, name, 1, false);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	name[0] = 'a';
	ck_assert_str_eq(q.name, name);
}
END_TEST

START_TEST(answer_limits)
{
	uint8_t m[600], r[1024];
	struct moat_dns_query q;
	int bad_id;
	struct moat_dns_addr many[40];
	for (size_t i = 0; i < 40; i++) {
		many[i] = addr("2001:db8::");
		many[i].a[15] = (uint8_t)i;
	}
	size_t len = build_query(m, 5, 0x0100, "many.example", 28, false);
	ck_assert_int_eq(parse(m, len, &q, &bad_id), 0);
	size_t fit = (512 - q.question_len) / 28;
	int rlen = moat_dns_build_response(&q, m, 0, many, 40, 30, r, sizeof r);
	check_response(r, rlen, m, q.question_len, 0x8180, 28, 30, many, fit);
	/* cap below 512 bounds the answers too */
	rlen = moat_dns_build_response(&q, m, 0, many, 40, 30, r, q.question_len + 2 * 28 + 27);
	check_response(r, rlen, m, q.question_len, 0x8180, 28, 30, many, 2);
	rlen = moat_dns_build_response(&q, m, 0, many, 40, 30, r, q.question_len);
	check_response(r, rlen, m, q.question_len, 0x8180, 28, 30, NULL, 0);
	ck_assert_int_eq(moat_dns_build_response(&q, m, 0, many, 40, 30, r, q.question_len - 1),
			 -1);

	uint8_t f[16];
	memset(f, 0xee, sizeof f);
	ck_assert_int_eq(moat_dns_build_formerr(0xabcd, f, 11), -1);
	ck_assert_int_eq(moat_dns_build_formerr(0xabcd, f, 12), 12);
	static const uint8_t want[12] = { 0xab, 0xcd, 0x80, 0x81 };
	ck_assert_mem_eq(f, want, 12);
	ck_assert_uint_eq(f[12], 0xee);
}
END_TEST

START_TEST(malformed)
{
	uint8_t m[600], t[600];
	struct moat_dns_query q;
	int bad_id;
	/* header 0-11, name 12-22, type/class 23-26, OPT 27-49 (RDLENGTH 36) */
	size_t len = build_query(m, 0x4242, 0x0100, "a.example", 1, true);
	for (size_t cut = 0; cut < len; cut++) {
		ck_assert_msg(parse(m, cut, &q, &bad_id) == -1, "cut %zu", cut);
		ck_assert_int_eq(bad_id, cut >= 12 ? 0x4242 : -1);
	}
	m[len] = 0;
	ck_assert_int_eq(parse(m, len + 1, &q, &bad_id), -1); /* trailing byte */

	/* header edits: at, value (16 bits) */
	static const unsigned edits[][2] = {
		{ 2, 0x8100 },	/* QR: a response */
		{ 2, 0x0900 },	/* opcode 1 (IQUERY) */
		{ 2, 0x2100 },	/* opcode 4 (NOTIFY) */
		{ 2, 0x2800 },	/* opcode 5 (UPDATE) */
		{ 4, 0 },	/* QDCOUNT 0 */
		{ 4, 2 },	/* QDCOUNT 2 */
		{ 6, 1 },	/* ANCOUNT */
		{ 8, 1 },	/* NSCOUNT */
		{ 10, 2 },	/* ARCOUNT 2 */
		{ 10, 0 },	/* an OPT record not counted: leftover bytes */
		{ 28, 5 },	/* additional record of type CNAME, not OPT */
		{ 36, 13 },	/* OPT RDLENGTH past the end */
		{ 36, 11 },	/* OPT RDLENGTH short of the end */
		{ 12, 0xc00c },	/* compression pointer as the name */
	};
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		memcpy(t, m, len);
		put16(t, edits[i][0], edits[i][1]);
		ck_assert_msg(parse(t, len, &q, &bad_id) == -1, "edit %zu", i);
		ck_assert_int_eq(bad_id, 0x4242);
	}
	memcpy(t, m, len); /* OPT owner not the root */
	t[27] = 1;
	ck_assert_int_eq(parse(t, len, &q, &bad_id), -1);

	/* Names: raw question bytes after the header. */
	static const struct { const char *b; size_t n; } names[] = {
		{ "\x01" "a\xc0\x0c", 4 },	   /* pointer after a label */
		{ "\x40" "a", 2 },		   /* label type 01 */
		{ "\x80" "a", 2 },		   /* label type 10 */
		{ "\x03" "a.b\x00", 5 },	   /* '.' inside a label */
		{ "\x03" "a b\x00", 5 },	   /* space */
		{ "\x03" "a\x00" "b\x00", 5 },	   /* NUL */
		{ "\x03" "a\xff" "b\x00", 5 },	   /* non-ASCII */
		{ "\x03" "a*b\x00", 5 },	   /* '*' */
		{ "\x03" "ab", 3 },		   /* label past the end */
		{ "\x02" "ab", 3 },		   /* no terminating root label */
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		memcpy(t, m, 12);
		put16(t, 10, 0);
		memcpy(t + 12, names[i].b, names[i].n);
		size_t n = 12 + names[i].n;
		n = put16(t, n, 1);
		n = put16(t, n, 1);
		ck_assert_msg(parse(t, n, &q, &bad_id) == -1, "name %zu", i);
	}
	/* 254 characters: four labels 63+63+63+62 */
	char name[300];
	memset(name, 'a', 254);
	name[63] = name[127] = name[191] = '.';
	name[254] = '\0';
	size_t n = build_query(t, 1, 0, name, 1, false);
	ck_assert_int_eq(parse(t, n, &q, &bad_id), -1);
	/* a 64-byte label */
	memset(name, 'b', 64);
	name[64] = '\0';
	n = build_query(t, 1, 0, name, 1, false);
	ck_assert_int_eq(parse(t, n, &q, &bad_id), -1);
}
END_TEST

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 32);
}

/* The host resolver's responses: A/AAAA records of the answer section, a
 * CNAME chain's too; NXDOMAIN's rcode; anything cut or out of bounds is
 * malformed. */
START_TEST(resolver_answers)
{
	static const uint8_t resp[] = {
		0x12, 0x34, 0x81, 0x80, 0, 1, 0, 4, 0, 0, 0, 0,
		3, 'w', 'w', 'w', 1, 'x', 0, 0, 1, 0, 1,		/* www.x A IN */
		0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 4, 1, 'y', 0xc0, 16, /* CNAME y.x */
		0xc0, 35, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 11, 22, 33, 44,	/* y.x A */
		0xc0, 35, 0, 1, 0, 3, 0, 0, 0, 60, 0, 4, 9, 9, 9, 9,	/* class CH: skipped */
		1, 'z', 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 1,	/* z A (any owner) */
	};
	struct moat_dns_addr a[4];
	int rcode;
	ck_assert_int_eq(moat_dns_parse_answers(resp, sizeof resp, 1, a, 4, &rcode), 2);
	ck_assert_int_eq(rcode, 0);
	ck_assert_int_eq(a[0].family, AF_INET);
	ck_assert(!memcmp(a[0].a, "\x0b\x16\x21\x2c", 4) && !memcmp(a[1].a, "\x0a\x00\x00\x01", 4));
	ck_assert_int_eq(moat_dns_parse_answers(resp, sizeof resp, 1, a, 1, &rcode), 1);
	ck_assert_int_eq(moat_dns_parse_answers(resp, sizeof resp, 28, a, 4, &rcode), 0);
	for (size_t cut = 0; cut < sizeof resp; cut++)
		ck_assert_msg(moat_dns_parse_answers(resp, cut, 1, a, 4, &rcode) == -1, "cut %zu", cut);
	uint8_t t[sizeof resp];
	memcpy(t, resp, sizeof resp);
	t[3] = 0x83; /* NXDOMAIN */
	ck_assert_int_eq(moat_dns_parse_answers(t, sizeof t, 1, a, 4, &rcode), 2);
	ck_assert_int_eq(rcode, 3);
	memcpy(t, resp, sizeof resp);
	t[2] = 0x01; /* a query, not a response */
	ck_assert_int_eq(moat_dns_parse_answers(t, sizeof t, 1, a, 4, &rcode), -1);
	memcpy(t, resp, sizeof resp);
	t[50] = 5; /* an A record of length 5 */
	ck_assert_int_eq(moat_dns_parse_answers(t, sizeof t, 1, a, 4, &rcode), -1);
	memcpy(t, resp, sizeof resp);
	t[12] = 0x40; /* a reserved label type */
	ck_assert_int_eq(moat_dns_parse_answers(t, sizeof t, 1, a, 4, &rcode), -1);
	static const uint8_t aaaa[] = {
		0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0,
		0, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16, 0x20, 0x01, [38] = 1,
	};
	ck_assert_int_eq(moat_dns_parse_answers(aaaa, sizeof aaaa, 28, a, 4, &rcode), 1);
	ck_assert_int_eq(a[0].family, AF_INET6);
	ck_assert_int_eq(a[0].a[15], 1);
}
END_TEST

START_TEST(random_input)
{
	uint8_t m[600], t[600], r[600];
	struct moat_dns_query q;
	int bad_id;
	const struct moat_dns_addr addrs[] = { addr("192.0.2.1"), addr("2001:db8::1") };
	size_t base = build_query(m, 0x77, 0x0100, "x.example.org", 1, true);
	unsigned ok = 0;
	for (int it = 0; it < 100000; it++) {
		size_t len;
		if (it % 2) {
			len = next() % 300;
			for (size_t i = 0; i < len; i++)
				t[i] = (uint8_t)next();
			t[2] &= 0x07; /* a standard query more often than not */
			if (len > 5) {
				t[4] = 0;
				t[5] = 1;
			}
		} else {
			len = base - 4 + next() % 8;
			memcpy(t, m, base);
			for (unsigned k = next() % 3; k > 0; k--)
				t[next() % len] = (uint8_t)next();
		}
		if (parse(t, len, &q, &bad_id) < 0) {
			ck_assert_int_eq(bad_id, len >= 12 ? (int)get16(t) : -1);
			continue;
		}
		ok++;
		int rlen = moat_dns_build_response(&q, t, 0, addrs, 2, 1, r, sizeof r);
		ck_assert_int_ge(rlen, (int)q.question_len);
		ck_assert_uint_eq(get16(r + 4), 1);
		ck_assert_mem_eq(r + 12, t + 12, q.question_len - 12);
	}
	ck_assert_uint_gt(ok, 100);
}
END_TEST

Suite *dnsmsg_suite(void)
{
	Suite *s = suite_create("dnsmsg");
	TCase *tc = tcase_create("dnsmsg");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, answer_limits);
	tcase_add_test(tc, malformed);
	tcase_add_test(tc, resolver_answers);
	tcase_add_test(tc, random_input);
	suite_add_tcase(s, tc);
	return s;
}
