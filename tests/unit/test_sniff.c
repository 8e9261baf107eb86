/* Unit tests: TLS SNI and HTTP Host sniffing (src/net/sniff.c). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "net/internal.h"
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

/* ---- one request per connection: what a head declares ---- */

static enum moat_sniff_kind sniff_req(const char *r, size_t len, char name[254],
				      struct moat_http_req *req)
{
	uint8_t *b = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(b);
	memcpy(b, r, len);
	enum moat_sniff_kind k = moat_sniff_request(b, len, name, req);
	free(b);
	char plain[254];
	/* moat_sniff says the same, without the reasons */
	uint8_t *c = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(c);
	memcpy(c, r, len);
	ck_assert_int_eq(moat_sniff(c, len, plain), k);
	free(c);
	ck_assert_str_eq(plain, name);
	return k;
}

static const struct {
	const char *head;
	const char *why;
} http_refused[] = {
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	  "both Content-Length and Transfer-Encoding" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	  "both Content-Length and Transfer-Encoding" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	  "two Content-Length headers" },
	{ "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\nContent-Length: 6\r\n\r\n",
	  "two Content-Length headers" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", "bad Content-Length" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", "bad Content-Length" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", "bad Content-Length" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", "bad Content-Length" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456\r\n\r\n",
	  "bad Content-Length" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
	  "\r\n\r\n", "two Transfer-Encoding headers" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	  "Transfer-Encoding other than chunked" },
	{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
	  "Transfer-Encoding other than chunked" },
	{ "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
	  "Transfer-Encoding in an HTTP/1.0 request" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
	  "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", "Upgrade request" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", "Upgrade request" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nHTTP2-Settings: AAMA\r\n\r\n", "Upgrade request" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n Host: evil\r\n\r\n", "obs-fold" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\tmore\r\n\r\n", "obs-fold" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nHost: evil\r\n\r\n", "two Host headers" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "two Host headers" },
	{ "GET http://evil/ HTTP/1.1\r\nHost: a\r\n\r\n", "absolute-form" },
	{ "CONNECT evil:443 HTTP/1.1\r\nHost: a\r\n\r\n", "authority-form" },
	{ "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", "bare CR or LF" },
	{ "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", "bare CR or LF" },
	{ "GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", "control byte" },
	{ "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "malformed Host" },
	{ "GET / HTTP/1.1\r\nHost : a\r\n\r\n", "malformed header line" },
};

START_TEST(http_heads)
{
	char name[254];
	struct moat_http_req req;
	for (size_t i = 0; i < sizeof http_refused / sizeof http_refused[0]; i++) {
		const char *r = http_refused[i].head;
		enum moat_sniff_kind k = sniff_req(r, strlen(r), name, &req);
		ck_assert_msg(k == MOAT_SNIFF_OTHER, "%zu: kind %d", i, k);
		ck_assert_msg(req.refusal && strstr(req.refusal, http_refused[i].why), "%zu: %s", i,
			      req.refusal ? req.refusal : "(none)");
		ck_assert_str_eq(name, "");
	}
	/* not HTTP at all: no reason of HTTP's */
	ck_assert_int_eq(sniff_req("SSH-2.0-x\r\n", 11, name, &req), MOAT_SNIFF_OTHER);
	ck_assert_ptr_null(req.refusal);
	ck_assert_int_eq(sniff_req("GET / HTTP/2.0\r\n\r\n", 18, name, &req), MOAT_SNIFF_OTHER);
	ck_assert_ptr_null(req.refusal);

	static const struct {
		const char *head;
		const char *host;
		bool chunked;
		uint64_t length;
	} ok[] = {
		{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "a", false, 0 },
		{ "POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 012\r\n\r\n", "a", false, 12 },
		{ "POST /u HTTP/1.1\r\nHost: a\r\ncontent-length:  999999999999999 \r\n\r\n", "a",
		  false, 999999999999999ull },
		{ "POST /u HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nHost: a\r\n\r\n", "a", true, 0 },
		{ "PUT /u HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
		  "a", false, 3 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n\r\n", "a", false, 0 },
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		const char *r = ok[i].head;
		size_t len = strlen(r);
		for (size_t cut = 0; cut < len; cut++)
			ck_assert_msg(sniff_req(r, cut, name, &req) == MOAT_SNIFF_MORE, "%zu: cut %zu", i,
				      cut);
		/* what follows the head is not part of it */
		char *more = NULL;
		ck_assert_int_ge(asprintf(&more, "%sGET / HTTP/1.1\r\nHost: evil\r\n\r\n", r), 0);
		ck_assert_msg(sniff_req(more, strlen(more), name, &req) == MOAT_SNIFF_HTTP, "%zu", i);
		free(more);
		ck_assert_str_eq(name, ok[i].host);
		ck_assert_uint_eq(req.head_len, len);
		ck_assert(req.chunked == ok[i].chunked);
		ck_assert_uint_eq(req.length, ok[i].length);
		ck_assert_ptr_null(req.refusal);
	}
}
END_TEST

/* ---- one request per connection: its body ---- */

static struct moat_http_req body_req(bool chunked, uint64_t length)
{
	return (struct moat_http_req){ .chunked = chunked, .length = length };
}

/* Feeds s in pieces of step bytes (0: all at once); returns the verdict and
 * the bytes used in all. */
static int feed(struct moat_http_req r, const char *s, size_t step, size_t *used_all,
		const char **why)
{
	struct moat_http_body b;
	moat_http_body_init(&b, &r);
	size_t len = strlen(s), at = 0;
	int v = 0;
	*used_all = 0;
	*why = NULL;
	if (len == 0)
		v = moat_http_body_feed(&b, (const uint8_t *)"", 0, used_all, why);
	while (at < len) {
		size_t n = step && len - at > step ? step : len - at, used = 0;
		uint8_t *copy = malloc(n);
		ck_assert_ptr_nonnull(copy);
		memcpy(copy, s + at, n);
		v = moat_http_body_feed(&b, copy, n, &used, why);
		free(copy);
		ck_assert_uint_le(used, n);
		*used_all += used;
		if (v != 0)
			break;
		ck_assert_uint_eq(used, n);
		at += n;
	}
	return v;
}

START_TEST(http_bodies)
{
	static const struct {
		bool chunked;
		uint64_t length;
		const char *bytes;
		int verdict;
		size_t used; /* when complete */
		const char *why;
	} cases[] = {
		{ false, 0, "GET / HTTP/1.1\r\n\r\n", 1, 0, NULL },
		{ false, 5, "hello", 1, 5, NULL },
		{ false, 5, "helloGET / HTTP/1.1\r\n\r\n", 1, 5, NULL },
		{ false, 5, "hell", 0, 0, NULL },
		{ true, 0, "5\r\nhello\r\n0\r\n\r\n", 1, 15, NULL },
		{ true, 0, "5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: evil\r\n\r\n", 1, 15, NULL },
		{ true, 0, "A;name=\"v\"\r\n0123456789\r\n00\r\nX-T: 1\r\nY: 2\r\n\r\nrest", 1,
		  44, NULL },
		{ true, 0, "5\r\nhello\r\n0\r\n", 0, 0, NULL },
		{ true, 0, "5\r\nhelloX\r\n0\r\n\r\n", -1, 0, "longer than its size" },
		{ true, 0, "5\nhello\r\n0\r\n\r\n", -1, 0, "malformed chunk size" },
		{ true, 0, "5\r\nhello\n0\r\n\r\n", -1, 0, "longer than its size" },
		{ true, 0, "5\r\nhello\r\n0\r\n\r\r", -1, 0, "bare CR" },
		{ true, 0, "g\r\n", -1, 0, "malformed chunk size" },
		{ true, 0, "\r\n", -1, 0, "malformed chunk size" },
		{ true, 0, "-1\r\n", -1, 0, "malformed chunk size" },
		{ true, 0, " 5\r\n", -1, 0, "malformed chunk size" },
		{ true, 0, "1000000000000000\r\n", -1, 0, "over 15 hex digits" },
		{ true, 0, "5;a\x01\r\n", -1, 0, "control byte" },
		{ true, 0, "0\r\nX: a\nY: b\r\n\r\n", -1, 0, "bare LF" },
		/* trailers are header field lines, judged as a head's are */
		{ true, 0, "5\r\nhello\r\n0\r\nGET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n", -1, 0,
		  "not a header field" },
		{ true, 0, "0\r\nX-T: 1\r\nGET /b HTTP/1.1\r\n\r\n", -1, 0, "not a header field" },
		{ true, 0, "0\r\n: v\r\n\r\n", -1, 0, "not a header field" },
		{ true, 0, "0\r\nX T: v\r\n\r\n", -1, 0, "not a header field" },
		{ true, 0, "0\r\nX-T\r\n\r\n", -1, 0, "not a header field" },
		{ true, 0, "0\r\nX-T: 1\r\n Y: 2\r\n\r\n", -1, 0, "obs-fold" },
		{ true, 0, "0\r\n\tY: 2\r\n\r\n", -1, 0, "obs-fold" },
		{ true, 0, "0\r\nX\x01: 2\r\n\r\n", -1, 0, "not a header field" },
		{ true, 0, "0\r\nX: 2\x7f\r\n\r\n", -1, 0, "control byte" },
		{ true, 0, "0\r\nHost: evil.test\r\n\r\n", -1, 0, "Host trailer" },
		{ true, 0, "0\r\ncontent-LENGTH: 5\r\n\r\n", -1, 0, "Host trailer" },
		{ true, 0, "0\r\nTransfer-Encoding: chunked\r\n\r\n", -1, 0, "Host trailer" },
		{ true, 0, "0\r\nHostx: a\r\nX-Transfer-Encoding: b\r\nContent-Lengths: 1\r\n"
		  "A-very-long-trailer-name-that-goes-on: 1\r\nX:\r\n\r\n", 1, 105, NULL },
	};
	static const size_t steps[] = { 0, 1, 2, 3, 7 };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
			size_t used;
			const char *why;
			int v = feed(body_req(cases[i].chunked, cases[i].length), cases[i].bytes,
				     steps[s], &used, &why);
			ck_assert_msg(v == cases[i].verdict, "%zu step %zu: %d", i, steps[s], v);
			if (v == 1)
				ck_assert_msg(used == cases[i].used, "%zu step %zu: used %zu", i,
					      steps[s], used);
			if (v < 0)
				ck_assert_msg(why && strstr(why, cases[i].why), "%zu: %s", i,
					      why ? why : "(none)");
			else
				ck_assert_ptr_null(why);
		}

	/* Bounded: a chunk extension or trailers that never end. */
	char *big = malloc(MOAT_HTTP_LINE_MAX + 64);
	ck_assert_ptr_nonnull(big);
	size_t used;
	const char *why;
	memcpy(big, "1;", 2);
	memset(big + 2, 'x', MOAT_HTTP_LINE_MAX + 10);
	big[MOAT_HTTP_LINE_MAX + 12] = '\0';
	ck_assert_int_eq(feed(body_req(true, 0), big, 4096, &used, &why), -1);
	ck_assert_ptr_nonnull(strstr(why, "16 KiB"));
	memcpy(big, "0\r\n", 3);
	for (size_t i = 3; i < MOAT_HTTP_LINE_MAX + 10; i += 6)
		memcpy(big + i, "X: y\r\n", 6);
	big[MOAT_HTTP_LINE_MAX + 9] = '\0';
	ck_assert_int_eq(feed(body_req(true, 0), big, 4096, &used, &why), -1);
	ck_assert_ptr_nonnull(strstr(why, "trailers over 16 KiB"));
	free(big);

	/* A large Content-Length counts down without overflow. */
	struct moat_http_req r = body_req(false, UINT64_C(999999999999999));
	struct moat_http_body b;
	moat_http_body_init(&b, &r);
	uint8_t chunk[4096] = { 0 };
	size_t u;
	ck_assert_int_eq(moat_http_body_feed(&b, chunk, sizeof chunk, &u, &why), 0);
	ck_assert_uint_eq(u, sizeof chunk);
	ck_assert_uint_eq(b.left, UINT64_C(999999999999999) - sizeof chunk);
}
END_TEST

/* ---- one request per connection: its head with Connection: close ---- */

START_TEST(http_close_head)
{
	static const char *const cases[][2] = {
		{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		  "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" },
		{ "GET / HTTP/1.1\r\nConnection: keep-alive\r\nHost: a\r\nKeep-Alive: 5\r\n"
		  "proxy-connection: x\r\nX-Connection: y\r\n\r\n",
		  "GET / HTTP/1.1\r\nHost: a\r\nX-Connection: y\r\nConnection: close\r\n\r\n" },
		{ "GET / HTTP/1.0\r\nCONNECTION: content-length\r\nContent-Length: 2\r\n\r\n",
		  "GET / HTTP/1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n" },
		{ "GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nConnection: close\r\n\r\n" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *in = cases[i][0];
		char name[254], name2[254];
		struct moat_http_req req, req2;
		ck_assert_int_eq(sniff_req(in, strlen(in), name, &req), MOAT_SNIFF_HTTP);
		uint8_t *out = malloc(req.head_len + MOAT_HTTP_CLOSE_EXTRA);
		ck_assert_ptr_nonnull(out);
		size_t n = moat_http_close_head((const uint8_t *)in, req.head_len, out);
		ck_assert_uint_le(n, req.head_len + MOAT_HTTP_CLOSE_EXTRA);
		ck_assert_msg(n == strlen(cases[i][1]) && !memcmp(out, cases[i][1], n), "%zu: %.*s", i,
			      (int)n, (const char *)out);
		/* what goes out is judged the same */
		ck_assert_int_eq(moat_sniff_request(out, n, name2, &req2), MOAT_SNIFF_HTTP);
		ck_assert_str_eq(name2, name);
		ck_assert_uint_eq(req2.head_len, n);
		ck_assert_uint_eq(req2.length, req.length);
		free(out);
	}
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

/* ---- a CONNECT tunnel's first bytes (moat_proxy_tunnel_refusal) ---- */

/* The verdict on bytes for CONNECT target:port under allowedHosts entries:
 * NULL (passes) or the refusal; *seen_out: the host the bytes named. */
static const char *tunnel(const char *const *entries, const char *target, uint16_t port,
			  const void *bytes, size_t len, char *seen_out, char *why, size_t whylen)
{
	struct moat_allowlist al = { 0 };
	size_t n = 0;
	while (entries[n])
		n++;
	al.entries = calloc(n ? n : 1, sizeof *al.entries);
	ck_assert_ptr_nonnull(al.entries);
	struct moat_error err = { 0 };
	for (size_t i = 0; i < n; i++) {
		ck_assert_int_eq(moat_allow_parse_entry(entries[i], &al.entries[i], &err), 0);
		al.count++;
	}
	struct moat_host t, seen;
	ck_assert_int_eq(moat_host_parse(target, strlen(target), &t), 0);
	/* the CONNECT was let through: an https entry allows it */
	ck_assert(moat_allowlist_match(&al, true, &t, port));
	char name[254];
	struct moat_http_req req;
	uint8_t *b = malloc(len);
	ck_assert_ptr_nonnull(b);
	memcpy(b, bytes, len);
	enum moat_sniff_kind k = moat_sniff_request(b, len, name, &req);
	free(b);
	ck_assert_int_ne(k, MOAT_SNIFF_MORE);
	const char *r = moat_proxy_tunnel_refusal(&al, &t, port, k, name, &req, &seen, why, whylen);
	strcpy(seen_out, seen.text);
	moat_allowlist_free(&al);
	return r;
}

START_TEST(tunnel_first_bytes)
{
	static const char *const https_only[] = { "https://allowed.test:*", "https://11.77.0.2",
						  "https://[2a01:4f8::2]", NULL };
	static const char *const both[] = { "https://allowed.test:*", "http://allowed.test:8082",
					    "http://[2a01:4f8::2]:8082", "https://[2a01:4f8::2]:8082",
					    NULL };
	uint8_t b[4200];
	char seen[254], why[600];
	const char *r;
	/* TLS: the SNI must be the CONNECT host (case and one trailing dot aside) */
	size_t len = hello_with(b, "ALLOWED.test.");
	ck_assert_ptr_null(tunnel(https_only, "allowed.test", 443, b, len, seen, why, sizeof why));
	ck_assert_str_eq(seen, "allowed.test");
	ck_assert_ptr_null(tunnel(https_only, "Allowed.Test.", 8443, b, len, seen, why, sizeof why));
	len = hello_with(b, "evil.test");
	r = tunnel(https_only, "allowed.test", 443, b, len, seen, why, sizeof why);
	ck_assert_str_eq(r, "the TLS SNI names evil.test, not the CONNECT host allowed.test");
	ck_assert_str_eq(seen, "evil.test");
	len = hello_with(b, "sub.allowed.test");
	ck_assert_ptr_nonnull(tunnel(https_only, "allowed.test", 443, b, len, seen, why, sizeof why));
	len = hello_with(b, "11.77.0.2");
	ck_assert_ptr_nonnull(tunnel(https_only, "allowed.test", 443, b, len, seen, why, sizeof why));
	/* no SNI: refused for a name; an IP literal target has none (RFC 6066) */
	len = hello_with(b, NULL);
	r = tunnel(https_only, "allowed.test", 443, b, len, seen, why, sizeof why);
	ck_assert_str_eq(r, "TLS without a server name (SNI)");
	ck_assert_str_eq(seen, "");
	ck_assert_ptr_null(tunnel(https_only, "11.77.0.2", 443, b, len, seen, why, sizeof why));
	ck_assert_str_eq(seen, "11.77.0.2");
	ck_assert_ptr_null(tunnel(https_only, "[2a01:4f8::2]", 443, b, len, seen, why, sizeof why));
	/* an IP target with an SNI: it must name that address */
	len = hello_with(b, "11.77.0.2");
	ck_assert_ptr_null(tunnel(https_only, "11.77.0.2", 443, b, len, seen, why, sizeof why));
	len = hello_with(b, "allowed.test");
	r = tunnel(https_only, "11.77.0.2", 443, b, len, seen, why, sizeof why);
	ck_assert_str_eq(r, "the TLS SNI names allowed.test, not the CONNECT host 11.77.0.2");

	/* plain HTTP: judged as the transparent path judges it (an http entry
	 * for the host and port), and its Host must be the CONNECT host */
	static const char get[] = "GET /a HTTP/1.1\r\nHost: allowed.test:8082\r\n\r\n";
	r = tunnel(https_only, "allowed.test", 8082, get, sizeof get - 1, seen, why, sizeof why);
	ck_assert_str_eq(r, "http://allowed.test:8082 is not in allowedHosts");
	ck_assert_ptr_null(tunnel(both, "allowed.test", 8082, get, sizeof get - 1, seen, why,
				  sizeof why));
	ck_assert_str_eq(seen, "allowed.test");
	static const char other[] = "GET /a HTTP/1.1\r\nHost: evil.test\r\n\r\n";
	r = tunnel(both, "allowed.test", 8082, other, sizeof other - 1, seen, why, sizeof why);
	ck_assert_str_eq(r, "the HTTP Host header names evil.test, not the CONNECT host allowed.test");
	ck_assert_str_eq(seen, "evil.test");
	static const char v6[] = "GET /a HTTP/1.1\r\nHost: [2A01:4f8:0::2]:8082\r\n\r\n";
	ck_assert_ptr_null(tunnel(both, "[2a01:4f8::2]", 8082, v6, sizeof v6 - 1, seen, why,
				  sizeof why));
	ck_assert_str_eq(seen, "2a01:4f8::2");
	static const char nohost[] = "GET /a HTTP/1.0\r\n\r\n";
	r = tunnel(both, "allowed.test", 8082, nohost, sizeof nohost - 1, seen, why, sizeof why);
	ck_assert_str_eq(r, "HTTP request without a Host header");
	static const char smuggle[] = "POST /a HTTP/1.1\r\nHost: allowed.test\r\n"
				      "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
	r = tunnel(both, "allowed.test", 8082, smuggle, sizeof smuggle - 1, seen, why, sizeof why);
	ck_assert_ptr_nonnull(strstr(r, "HTTP request refused: both Content-Length"));
	static const char proxyform[] = "GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
	r = tunnel(both, "allowed.test", 8082, proxyform, sizeof proxyform - 1, seen, why,
		   sizeof why);
	ck_assert_ptr_nonnull(strstr(r, "absolute-form"));
	/* anything else */
	static const char ssh[] = "SSH-2.0-OpenSSH_9.2\r\n";
	r = tunnel(both, "allowed.test", 8082, ssh, sizeof ssh - 1, seen, why, sizeof why);
	ck_assert_ptr_nonnull(strstr(r, "neither TLS nor HTTP"));
	ck_assert_str_eq(seen, "");
	uint8_t junk[8] = { 22, 3, 1, 0, 2, 2, 0, 0 }; /* a record, not a ClientHello */
	r = tunnel(both, "allowed.test", 443, junk, sizeof junk, seen, why, sizeof why);
	ck_assert_ptr_nonnull(strstr(r, "neither TLS nor HTTP"));
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
	tcase_add_test(tc, http_heads);
	tcase_add_test(tc, http_bodies);
	tcase_add_test(tc, http_close_head);
	tcase_add_test(tc, random_input);
	tcase_add_test(tc, tunnel_first_bytes);
	suite_add_tcase(s, tc);
	return s;
}
