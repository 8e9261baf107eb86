/* Unit tests: TLS SNI and HTTP Host sniffing (src/net/sniff.c). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "net/sniff.h"
#include "suites.h"

/* moat_sniff on an exact-size heap copy, so ASan sees any over-read. */
static enum moat_sniff_kind sniff(const void *p, size_t len, char name[254])
{
	uint8_t *b = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(b);
	if (len)
		memcpy(b, p, len);
	memset(name, 'x', 254);
	enum moat_sniff_kind k = moat_sniff(b, len, name);
	free(b);
	ck_assert_uint_le(strnlen(name, 254), 253);
	if (k != MOAT_SNIFF_TLS && k != MOAT_SNIFF_HTTP)
		ck_assert_str_eq(name, "");
	return k;
}

/* ---- a ClientHello builder ---- */

static size_t put16(uint8_t *b, size_t n, unsigned v)
{
	b[n] = (uint8_t)(v >> 8);
	b[n + 1] = (uint8_t)v;
	return n + 2;
}

struct hello {
	const char *names[2]; /* host_names in each server_name extension */
	int sni_exts;         /* how many server_name extensions */
	bool no_ext;          /* no extensions block at all */
};

/* One record holding one ClientHello; *ext_at: where the extensions block
 * starts (a hello cut there is still valid). Returns the length. */
static size_t build_hello(uint8_t *out, const struct hello *h, size_t *ext_at)
{
	uint8_t body[4096];
	size_t n = put16(body, 0, 0x0303);
	memset(body + n, 0xab, 32); /* random */
	n += 32;
	body[n++] = 32; /* session id */
	memset(body + n, 0xcd, 32);
	n += 32;
	n = put16(body, n, 6);
	n = put16(body, n, 0x1301);
	n = put16(body, n, 0x1302);
	n = put16(body, n, 0x00ff);
	body[n++] = 1; /* compression: null */
	body[n++] = 0;
	if (ext_at)
		*ext_at = 9 + n;
	if (!h->no_ext) {
		size_t exts = n;
		n += 2;
		n = put16(body, n, 0x002b); /* supported_versions: TLS 1.3 */
		n = put16(body, n, 3);
		body[n++] = 2;
		n = put16(body, n, 0x0304);
		for (int e = 0; e < h->sni_exts; e++) {
			size_t ext = n;
			n += 6;
			for (size_t k = 0; k < 2 && h->names[k]; k++) {
				size_t l = strlen(h->names[k]);
				body[n++] = 0; /* host_name */
				n = put16(body, n, (unsigned)l);
				memcpy(body + n, h->names[k], l);
				n += l;
			}
			put16(body, ext, 0x0000);
			put16(body, ext + 2, (unsigned)(n - ext - 4));
			put16(body, ext + 4, (unsigned)(n - ext - 6));
		}
		n = put16(body, n, 0x0015); /* padding: skipped */
		n = put16(body, n, 5);
		memset(body + n, 0, 5);
		n += 5;
		put16(body, exts, (unsigned)(n - exts - 2));
	}
	out[0] = 22;
	put16(out, 1, 0x0301);
	put16(out, 3, (unsigned)(n + 4));
	out[5] = 1;
	out[6] = (uint8_t)(n >> 16);
	put16(out, 7, (unsigned)n);
	memcpy(out + 9, body, n);
	return n + 9;
}

static size_t hello_with(uint8_t *out, const char *sni)
{
	struct hello h = { .names = { sni }, .sni_exts = sni ? 1 : 0 };
	return build_hello(out, &h, NULL);
}

START_TEST(tls_sni)
{
	uint8_t b[4200];
	char name[254];
	size_t len = hello_with(b, "Api.Example.COM.");
	for (size_t cut = 0; cut < len; cut++)
		ck_assert_msg(sniff(b, cut, name) == MOAT_SNIFF_MORE, "cut %zu", cut);
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, "api.example.com");
	memset(b + len, 0x17, 20); /* bytes after the record are not looked at */
	ck_assert_int_eq(sniff(b, len + 20, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, "api.example.com");

	len = hello_with(b, NULL);
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, "");
	struct hello bare = { .no_ext = true };
	len = build_hello(b, &bare, NULL);
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, "");

	len = hello_with(b, "_svc.my-host9.example");
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, "_svc.my-host9.example");

	char longest[256];
	memset(longest, 'a', 253);
	for (size_t i = 63; i < 253; i += 64)
		longest[i] = '.';
	longest[253] = '\0';
	len = hello_with(b, longest);
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_TLS);
	ck_assert_str_eq(name, longest);
	strcpy(longest + 253, "a");
	len = hello_with(b, longest);
	ck_assert_int_eq(sniff(b, len, name), MOAT_SNIFF_OTHER);
}
END_TEST

START_TEST(tls_malformed)
{
	uint8_t b[4200], t[4200];
	char name[254];
	static const char *const bad_names[] = {
		"exa mple.com", "a..b", ".a", "a.b..", "", ".", "caf\xc3\xa9.com", "a/b", "a:443",
		"a\\b", "a*.b",
	};
	for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
		ck_assert_msg(sniff(b, hello_with(b, bad_names[i]), name) == MOAT_SNIFF_OTHER,
			      "accepted %s", bad_names[i]);
	struct hello two_hosts = { .names = { "a.example", "b.example" }, .sni_exts = 1 };
	ck_assert_int_eq(sniff(b, build_hello(b, &two_hosts, NULL), name), MOAT_SNIFF_OTHER);
	struct hello two_exts = { .names = { "a.example" }, .sni_exts = 2 };
	ck_assert_int_eq(sniff(b, build_hello(b, &two_exts, NULL), name), MOAT_SNIFF_OTHER);

	/* The body cut short, outer lengths consistent: only a cut right
	 * before the extensions block is still a hello. */
	size_t ext_at;
	struct hello h = { .names = { "a.example" }, .sni_exts = 1 };
	size_t len = build_hello(b, &h, &ext_at);
	for (size_t k = 0; k + 9 < len; k++) {
		memcpy(t, b, 9 + k);
		put16(t, 3, (unsigned)(k + 4));
		t[6] = 0;
		put16(t, 7, (unsigned)k);
		enum moat_sniff_kind want = 9 + k == ext_at ? MOAT_SNIFF_TLS : MOAT_SNIFF_OTHER;
		ck_assert_msg(sniff(t, 9 + k, name) == want, "body cut at %zu", k);
	}

	/* Outer lengths that disagree, or out of range. */
	struct { size_t at; uint8_t v; size_t len; } edits[] = {
		{ 1, 2, 0 },		/* record version 2.x */
		{ 5, 2, 0 },		/* handshake type: ServerHello */
		{ 9, 2, 0 },		/* client_version 2.x */
		{ 0, 23, 0 },		/* application data: not a hello, not HTTP */
		{ 6, 1, 9 },		/* handshake length != record length - 4, early */
		{ 4, 3, 0 },		/* record shorter than the hello */
	};
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		memcpy(t, b, len);
		t[edits[i].at] = edits[i].v;
		ck_assert_msg(sniff(t, edits[i].len ? edits[i].len : len, name) == MOAT_SNIFF_OTHER,
			      "edit %zu", i);
	}
	memcpy(t, b, len); /* record longer than the hello it holds */
	put16(t, 3, (unsigned)(len - 5 + 1));
	ck_assert_int_eq(sniff(t, len + 1, name), MOAT_SNIFF_OTHER);
	memcpy(t, b, len); /* handshake longer than its record */
	put16(t, 7, (unsigned)(len - 9 + 1));
	ck_assert_int_eq(sniff(t, len, name), MOAT_SNIFF_OTHER);
	static const unsigned rec_lens[] = { 0, 1, 3, MOAT_SNIFF_MAX - 4, 0xffff };
	for (size_t i = 0; i < sizeof rec_lens / sizeof rec_lens[0]; i++) {
		memcpy(t, b, 9);
		put16(t, 3, rec_lens[i]);
		ck_assert_int_eq(sniff(t, 5, name), MOAT_SNIFF_OTHER);
	}
	memcpy(t, b, 9); /* the largest record: wait for it */
	put16(t, 3, MOAT_SNIFF_MAX - 5);
	t[6] = 0;
	put16(t, 7, MOAT_SNIFF_MAX - 9);
	ck_assert_int_eq(sniff(t, 9, name), MOAT_SNIFF_MORE);

	/* Every byte of a hello set to every value: never a crash. */
	for (size_t i = 0; i < len; i++)
		for (unsigned v = 0; v < 256; v++) {
			memcpy(t, b, len);
			t[i] = (uint8_t)v;
			enum moat_sniff_kind k = sniff(t, len, name);
			ck_assert_int_ne(k, MOAT_SNIFF_HTTP);
		}
}
END_TEST

/* ---- HTTP ---- */

static const char *const http_ok[][2] = {
	{ "GET / HTTP/1.1\r\nHost: Example.COM\r\nAccept: */*\r\n\r\n", "example.com" },
	{ "POST /v1/x?y=1 HTTP/1.1\r\nhost:api.example.com:8443\r\n\r\n", "api.example.com" },
	{ "GET / HTTP/1.1\r\nHOST: \t example.com. \t\r\n\r\n", "example.com" },
	{ "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", "::1" },
	{ "GET / HTTP/1.1\r\nHost: [2001:DB8::1]\r\n\r\n", "2001:db8::1" },
	{ "GET / HTTP/1.1\r\nHost: 93.184.216.34\r\n\r\n", "93.184.216.34" },
	{ "GET / HTTP/1.0\r\nUser-Agent: x\r\n\r\n", "" },
	{ "GET / HTTP/1.1\r\nHost:\r\n\r\n", "" },
	{ "GET / HTTP/1.1\r\n\r\n", "" },
	{ "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "a" },
	{ "GET / HTTP/1.1\r\nX-Host: evil\r\nHost: good\r\nHosts: evil\r\n\r\n", "good" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\nBODY", "a" },
};

static const char *const http_bad[] = {
	"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nhost: a\r\nHOST: b\r\n\r\n",
	"GET http://evil/ HTTP/1.1\r\nHost: good\r\n\r\n",
	"CONNECT evil:443 HTTP/1.1\r\nHost: evil:443\r\n\r\n",
	"OPTIONS *x HTTP/1.1\r\n\r\n",
	"GET / HTTP/2.0\r\n\r\n",
	"GET / HTTP/1.x\r\n\r\n",
	"GET  / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1 \r\n\r\n",
	"GET /\x01 HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\r\n Host: b\r\n\r\n",
	"GET / HTTP/1.1\r\n: a\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a..b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:080x\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:123456\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: []\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [zz::1]\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
	"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n",
	"\x00\x01\x02",
	" GET / HTTP/1.1\r\n\r\n",
	"\r\n\r\n",
};

START_TEST(http_requests)
{
	char name[254];
	for (size_t i = 0; i < sizeof http_ok / sizeof http_ok[0]; i++) {
		const char *r = http_ok[i][0];
		size_t end = (size_t)(strstr(r, "\r\n\r\n") - r) + 4;
		for (size_t cut = 0; cut < end; cut++)
			ck_assert_msg(sniff(r, cut, name) == MOAT_SNIFF_MORE, "%zu: cut %zu", i, cut);
		ck_assert_msg(sniff(r, strlen(r), name) == MOAT_SNIFF_HTTP, "%zu", i);
		ck_assert_str_eq(name, http_ok[i][1]);
	}
	for (size_t i = 0; i < sizeof http_bad / sizeof http_bad[0]; i++) {
		size_t len = strlen(http_bad[i]) + (http_bad[i][0] == '\0' ? 3 : 0);
		ck_assert_msg(sniff(http_bad[i], len, name) == MOAT_SNIFF_OTHER, "accepted %zu", i);
	}
	/* Decided early, before the header section ends. */
	ck_assert_int_eq(sniff("SSH-2.0-x\r\n", 11, name), MOAT_SNIFF_OTHER);
	ck_assert_int_eq(sniff("\x80", 1, name), MOAT_SNIFF_OTHER);
	ck_assert_int_eq(sniff("GET http", 8, name), MOAT_SNIFF_OTHER);
	ck_assert_int_eq(sniff("GET / HTTP/1.1\r\nX", 17, name), MOAT_SNIFF_MORE);
	char method[40];
	memset(method, 'A', sizeof method);
	ck_assert_int_eq(sniff(method, 32, name), MOAT_SNIFF_MORE);
	ck_assert_int_eq(sniff(method, 33, name), MOAT_SNIFF_OTHER);

	/* A header section that never ends: MORE until MOAT_SNIFF_MAX bytes. */
	char *big = malloc(MOAT_SNIFF_MAX);
	ck_assert_ptr_nonnull(big);
	static const char start[] = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
	memcpy(big, start, sizeof start - 1);
	memset(big + sizeof start - 1, 'v', MOAT_SNIFF_MAX - (sizeof start - 1));
	ck_assert_int_eq(sniff(big, MOAT_SNIFF_MAX - 1, name), MOAT_SNIFF_MORE);
	ck_assert_int_eq(sniff(big, MOAT_SNIFF_MAX, name), MOAT_SNIFF_OTHER);
	free(big);
}
END_TEST

/* ---- random input ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 32);
}

START_TEST(random_input)
{
	static const char *const pieces[] = { "a", "Z", "0", ".", ":", "[", "]", "::1", " ",
					      "\t", "\r\n", "\r", "\n", "X: y", "Host: ", "\x01",
					      "\xff" };
	uint8_t hello[600], buf[1200];
	char name[254];
	size_t hlen = hello_with(hello, "fuzz.example");
	unsigned seen[4] = { 0 };
	for (int it = 0; it < 100000; it++) {
		size_t len = next() % 700;
		switch (it % 3) {
		case 0: /* noise */
			for (size_t i = 0; i < len; i++)
				buf[i] = (uint8_t)next();
			break;
		case 1: /* a hello with a few bytes changed, cut anywhere */
			len = next() % (hlen + 1);
			memcpy(buf, hello, len);
			for (unsigned k = next() % 4; k > 0 && len; k--)
				buf[next() % len] = (uint8_t)next();
			break;
		default: /* a request line, then header-ish pieces */
			memcpy(buf, "GET / HTTP/1.1\r\n", 16);
			for (size_t i = 16; i < len;) {
				const char *p = pieces[next() % (sizeof pieces / sizeof pieces[0])];
				memcpy(buf + i, p, strlen(p));
				i += strlen(p);
			}
			len = len < 16 ? 16 : len;
		}
		seen[sniff(buf, len, name)]++;
	}
	for (int k = 0; k < 4; k++)
		ck_assert_uint_gt(seen[k], 0);
}
END_TEST

Suite *sniff_suite(void)
{
	Suite *s = suite_create("sniff");
	TCase *tc = tcase_create("sniff");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, tls_sni);
	tcase_add_test(tc, tls_malformed);
	tcase_add_test(tc, http_requests);
	tcase_add_test(tc, random_input);
	suite_add_tcase(s, tc);
	return s;
}
