/* Fuzz: the first bytes of a transparent TCP connection out of the sandbox
 * (moat_sniff: TLS SNI or HTTP Host), as the egress path reads them: it
 * decides on the first prefix whose verdict is not MORE, then forwards every
 * byte. So a verdict and name, once given, must not change as more bytes
 * arrive; a few prefixes of each input are checked against the whole.
 * For HTTP the egress path then relays one request (moat_sniff_request,
 * moat_http_close_head, moat_http_body_feed): the head's length and the
 * body's end must not depend on how the bytes are split. The same bytes as
 * a CONNECT tunnel's first (moat_sniff_host, moat_proxy_tunnel_refusal, for
 * a name and an IP literal target): a tunnel passes only TLS or HTTP naming
 * its target, and every refusal says why. */
#include "net/internal.h"
#include "net/sniff.h"
#include "fuzz.h"

static struct moat_allowlist *allowlist(void)
{
	static struct moat_allow_entry entries[3];
	static struct moat_allowlist al;
	static const char *const text[] = { "https://a.test:*", "http://a.test:8080",
					    "https://192.0.2.1:*" };
	if (!al.count) {
		struct moat_error err = { 0 };
		for (size_t i = 0; i < 3; i++)
			if (moat_allow_parse_entry(text[i], &entries[i], &err) < 0)
				abort();
		al.entries = entries;
		al.count = 3;
	}
	return &al;
}

static void tunnel(enum moat_sniff_kind k, const char *name, const struct moat_http_req *req)
{
	static const char *const targets[] = { "a.test", "192.0.2.1" };
	for (size_t t = 0; t < 2; t++) {
		struct moat_host target, seen, h;
		char why[600];
		if (moat_host_parse(targets[t], strlen(targets[t]), &target) < 0)
			abort();
		uint16_t port = k == MOAT_SNIFF_HTTP ? 8080 : 443;
		const char *r = moat_proxy_tunnel_refusal(allowlist(), &target, port, k, name, req,
							  &seen, why, sizeof why);
		if (r ? !r[0] : (k != MOAT_SNIFF_TLS && k != MOAT_SNIFF_HTTP) ||
				strcmp(seen.text, target.text))
			abort();
		if (strnlen(seen.text, sizeof seen.text) > MOAT_HOST_MAX)
			abort();
		const char *hr = moat_sniff_host(k, name, req, &h, why, sizeof why);
		if (hr ? !hr[0] || h.text[0] : !name[0] || !h.text[0])
			abort();
	}
}

static enum moat_sniff_kind sniff(const uint8_t *data, size_t len, char name[254])
{
	uint8_t *b = (uint8_t *)fuzz_copy(data, len);
	memset(name, 'x', 254);
	enum moat_sniff_kind k = moat_sniff(b, len, name);
	free(b);
	if (strnlen(name, 254) > 253)
		abort();
	if (k != MOAT_SNIFF_TLS && k != MOAT_SNIFF_HTTP && name[0])
		abort();
	return k;
}

/* The body after the head, fed whole and in pieces of step bytes. */
static void body(const struct moat_http_req *req, const uint8_t *p, size_t n, size_t step)
{
	struct moat_http_body whole, split;
	size_t used_whole = 0, used = 0, at = 0;
	const char *why;
	moat_http_body_init(&whole, req);
	moat_http_body_init(&split, req);
	uint8_t *b = (uint8_t *)fuzz_copy(p, n);
	int v_whole = moat_http_body_feed(&whole, b, n, &used_whole, &why);
	if (used_whole > n || (v_whole == 0 && used_whole != n) || (v_whole < 0) != (why != NULL))
		abort();
	int v = moat_http_body_feed(&split, b, 0, &used, &why); /* 1 for an empty body */
	if (used)
		abort();
	while (at < n && v == 0) {
		size_t k = n - at < step ? n - at : step, u = 0;
		v = moat_http_body_feed(&split, b + at, k, &u, &why);
		if (u > k || (v == 0 && u != k))
			abort();
		at += u;
	}
	free(b);
	if (v != v_whole || (v >= 0 && at != used_whole))
		abort();
}

static void request(const uint8_t *data, size_t size)
{
	char name[254], plain[254];
	struct moat_http_req req;
	uint8_t *b = (uint8_t *)fuzz_copy(data, size);
	enum moat_sniff_kind k = moat_sniff_request(b, size, name, &req);
	free(b);
	if (k != sniff(data, size, plain) || strcmp(name, plain))
		abort();
	if (req.refusal && k != MOAT_SNIFF_OTHER)
		abort();
	if (k != MOAT_SNIFF_MORE)
		tunnel(k, name, &req);
	if (k != MOAT_SNIFF_HTTP)
		return;
	if (req.head_len < 4 || req.head_len > size || (req.chunked && req.length))
		abort();
	uint8_t *out = malloc(req.head_len + MOAT_HTTP_CLOSE_EXTRA);
	if (!out)
		abort();
	size_t n = moat_http_close_head(data, req.head_len, out);
	struct moat_http_req again;
	char name2[254];
	if (n > req.head_len + MOAT_HTTP_CLOSE_EXTRA ||
	    moat_sniff_request(out, n, name2, &again) != MOAT_SNIFF_HTTP || strcmp(name, name2) ||
	    again.head_len != n || again.length != req.length || again.chunked != req.chunked)
		abort();
	free(out);
	body(&req, data + req.head_len, size - req.head_len, 1 + size % 7);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MOAT_SNIFF_MAX)
		size = MOAT_SNIFF_MAX;
	char whole_name[254], name[254];
	enum moat_sniff_kind whole = sniff(data, size, whole_name);
	size_t step = size / 8 + 1;
	for (size_t n = 0; n < size; n += step) {
		enum moat_sniff_kind k = sniff(data, n, name);
		if (k != MOAT_SNIFF_MORE && (k != whole || strcmp(name, whole_name)))
			abort();
	}
	request(data, size);
	return 0;
}
