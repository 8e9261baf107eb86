/* TLS ClientHello SNI and HTTP/1.x Host sniffing (see sniff.h). Every length
 * is checked against the bytes present; nothing here allocates. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <string.h>

#include "net/sniff.h"

#define NAME_LEN 253u
#define METHOD_MAX 32u /* longest registered method is 17 bytes */

static char lower(uint8_t c)
{
	return (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

static bool is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

static bool is_alnum(uint8_t c)
{
	return is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'z');
}

/* A host name: one trailing dot dropped, then 1..253 bytes of [A-Za-z0-9._-]
 * with no empty label; written lowercased into name. */
static bool take_name(const uint8_t *s, size_t n, char name[254])
{
	if (n > 0 && s[n - 1] == '.')
		n--;
	if (n == 0 || n > NAME_LEN || s[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = s[i];
		if (c == '.' ? i == 0 || s[i - 1] == '.' : !(is_alnum(c) || c == '-' || c == '_'))
			return false;
		name[i] = lower(c);
	}
	name[n] = '\0';
	return true;
}

/* ---- TLS ---- */

struct rd {
	const uint8_t *p;
	size_t n;
};

static bool take(struct rd *r, size_t k, const uint8_t **out)
{
	if (r->n < k)
		return false;
	*out = r->p;
	r->p += k;
	r->n -= k;
	return true;
}

static bool num(struct rd *r, size_t bytes, size_t *v)
{
	const uint8_t *p;
	if (!take(r, bytes, &p))
		return false;
	*v = 0;
	for (size_t i = 0; i < bytes; i++)
		*v = *v << 8 | p[i];
	return true;
}

/* A vector with a 1- or 2-byte length prefix, as a sub-reader. */
static bool vec(struct rd *r, size_t len_bytes, struct rd *out)
{
	size_t n;
	if (!num(r, len_bytes, &n) || !take(r, n, &out->p))
		return false;
	out->n = n;
	return true;
}

/* The server_name extension's ServerNameList: at most one host_name. */
static bool server_name(struct rd *ext, char name[254])
{
	struct rd list, host;
	bool seen = false;
	if (!vec(ext, 2, &list) || ext->n || list.n == 0)
		return false;
	while (list.n) {
		size_t type;
		if (!num(&list, 1, &type) || !vec(&list, 2, &host))
			return false;
		if (type != 0)
			continue;
		if (seen || !take_name(host.p, host.n, name))
			return false;
		seen = true;
	}
	return true;
}

/* The ClientHello body, after the handshake header. */
static bool client_hello(struct rd *r, char name[254])
{
	const uint8_t *p;
	struct rd v, exts;
	if (!take(r, 2 + 32, &p) || p[0] != 3) /* legacy_version, random */
		return false;
	if (!vec(r, 1, &v) || v.n > 32) /* session id */
		return false;
	if (!vec(r, 2, &v) || v.n < 2 || v.n % 2) /* cipher suites */
		return false;
	if (!vec(r, 1, &v) || v.n < 1) /* compression methods */
		return false;
	if (r->n == 0)
		return true; /* no extensions */
	if (!vec(r, 2, &exts) || r->n)
		return false;
	bool sni = false;
	while (exts.n) {
		size_t type;
		if (!num(&exts, 2, &type) || !vec(&exts, 2, &v))
			return false;
		if (type != 0)
			continue;
		if (sni || !server_name(&v, name))
			return false;
		sni = true;
	}
	return true;
}

/* Record header (type 22, version 3.x, length), then one handshake message
 * (type 1, 24-bit length) that fills the record exactly. */
static enum moat_sniff_kind tls(const uint8_t *b, size_t len, char name[254])
{
	if ((len > 1 && b[1] != 3) || (len > 5 && b[5] != 1))
		return MOAT_SNIFF_OTHER;
	if (len < 5)
		return MOAT_SNIFF_MORE;
	size_t rec = (size_t)b[3] << 8 | b[4];
	if (rec < 4 || rec > MOAT_SNIFF_MAX - 5)
		return MOAT_SNIFF_OTHER;
	if (len >= 9 && ((size_t)b[6] << 16 | (size_t)b[7] << 8 | b[8]) != rec - 4)
		return MOAT_SNIFF_OTHER;
	if (len < 5 + rec)
		return MOAT_SNIFF_MORE;
	struct rd r = { b + 9, rec - 4 };
	return client_hello(&r, name) ? MOAT_SNIFF_TLS : MOAT_SNIFF_OTHER;
}

/* ---- HTTP ---- */

static bool tchar(uint8_t c)
{
	return is_alnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The request line: 1 when complete (*end just past its CRLF), 0 when what
 * is there is a valid prefix, -1 when it is not an origin-form HTTP/1.x line
 * (*why set when it is one in another form: a proxy's request). */
static int request_line(const uint8_t *b, size_t len, size_t *end, const char **why)
{
	size_t i = 0;
	while (i < len && i < METHOD_MAX && tchar(b[i]))
		i++;
	if (i == len)
		return 0;
	if (i == 0 || b[i++] != ' ')
		return -1;
	size_t t = i;
	if (t < len && b[t] != '/' && b[t] != '*') {
		/* absolute- or authority-form: names a host of its own, which an
		 * origin server may prefer to the Host header */
		*why = "an absolute-form or authority-form request target (a proxy request: "
		       "use the proxy, HTTP_PROXY)";
		return -1;
	}
	while (i < len && b[i] > ' ' && b[i] < 0x7f)
		i++;
	if (i == len)
		return 0;
	if (i == t || b[i++] != ' ' || (b[t] == '*' && i - t != 2))
		return -1;
	static const char version[] = "HTTP/1.#\r\n";
	for (size_t k = 0; k < sizeof version - 1; k++, i++) {
		if (i == len)
			return 0;
		if (version[k] == '#' ? !is_digit(b[i]) : b[i] != (uint8_t)version[k])
			return -1;
	}
	*end = i;
	return 1;
}

/* A Host value without surrounding whitespace: "", host[:port] or
 * [IPv6][:port]. */
static bool host_value(const uint8_t *v, size_t n, char name[254])
{
	size_t h; /* bytes of the host part, brackets included */
	if (n == 0)
		return true;
	if (v[0] == '[') {
		const uint8_t *close = memchr(v, ']', n);
		size_t an = close ? (size_t)(close - v) - 1 : 0;
		struct in6_addr a;
		if (an == 0 || an >= INET6_ADDRSTRLEN)
			return false;
		for (size_t i = 0; i < an; i++)
			name[i] = lower(v[1 + i]);
		name[an] = '\0';
		if (inet_pton(AF_INET6, name, &a) != 1)
			return false;
		h = an + 2;
	} else {
		const uint8_t *colon = memchr(v, ':', n);
		h = colon ? (size_t)(colon - v) : n;
		if (!take_name(v, h, name))
			return false;
	}
	if (h == n)
		return true;
	if (v[h] != ':' || n - h - 1 == 0 || n - h - 1 > 5)
		return false;
	unsigned port = 0;
	for (size_t i = h + 1; i < n; i++) {
		if (!is_digit(v[i]))
			return false;
		port = port * 10 + (unsigned)(v[i] - '0');
	}
	return port <= 65535;
}

static bool name_is(const uint8_t *l, size_t n, const char *want)
{
	size_t k = strlen(want);
	if (n != k)
		return false;
	for (size_t i = 0; i < k; i++)
		if (lower(l[i]) != want[i])
			return false;
	return true;
}

static bool value_is(const uint8_t *v, size_t n, const char *want)
{
	return name_is(v, n, want);
}

/* What the headers seen so far said. */
struct seen {
	bool host, length, te, v10;
};

/* One header line (no CRLF): "name:" OWS value OWS. NULL when fine, else
 * why the request is refused. */
static const char *header(const uint8_t *l, size_t n, struct seen *s, char name[254],
			  struct moat_http_req *req)
{
	size_t c = 0;
	if (n && (l[0] == ' ' || l[0] == '\t'))
		return "a folded header line (obs-fold)";
	while (c < n && tchar(l[c]))
		c++;
	if (c == 0 || c == n || l[c] != ':')
		return "a malformed header line";
	for (size_t i = c + 1; i < n; i++)
		if ((l[i] < 0x20 && l[i] != '\t') || l[i] == 0x7f)
			return "a control byte in a header";
	size_t vs = c + 1, ve = n;
	while (vs < ve && (l[vs] == ' ' || l[vs] == '\t'))
		vs++;
	while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
		ve--;
	const uint8_t *v = l + vs;
	size_t vn = ve - vs;
	if (name_is(l, c, "host")) {
		if (s->host)
			return "two Host headers";
		s->host = true;
		return host_value(v, vn, name) ? NULL : "a malformed Host header";
	}
	if (name_is(l, c, "content-length")) {
		if (s->length)
			return "two Content-Length headers (request smuggling)";
		s->length = true;
		if (vn == 0 || vn > 15)
			return "a bad Content-Length";
		uint64_t x = 0;
		for (size_t i = 0; i < vn; i++) {
			if (!is_digit(v[i]))
				return "a bad Content-Length";
			x = x * 10 + (uint64_t)(v[i] - '0');
		}
		if (req)
			req->length = x;
	} else if (name_is(l, c, "transfer-encoding")) {
		if (s->te)
			return "two Transfer-Encoding headers (request smuggling)";
		s->te = true;
		if (s->v10)
			return "Transfer-Encoding in an HTTP/1.0 request (request smuggling)";
		if (!value_is(v, vn, "chunked"))
			return "a Transfer-Encoding other than chunked";
		if (req)
			req->chunked = true;
	} else if (name_is(l, c, "upgrade") || name_is(l, c, "http2-settings")) {
		return "an Upgrade request (h2c, WebSocket: moat relays HTTP/1.x requests only)";
	}
	if (s->length && s->te)
		return "both Content-Length and Transfer-Encoding (request smuggling)";
	return NULL;
}

static enum moat_sniff_kind http(const uint8_t *b, size_t len, char name[254],
				 struct moat_http_req *req, const char **why)
{
	size_t i;
	int rl = request_line(b, len, &i, why);
	if (rl <= 0)
		return rl ? MOAT_SNIFF_OTHER : MOAT_SNIFF_MORE;
	struct seen s = { .v10 = b[i - 3] == '0' };
	for (;;) {
		size_t e = i;
		while (e < len && b[e] != '\r' && b[e] != '\n')
			e++;
		if ((e < len && b[e] == '\n') || (e + 1 < len && b[e + 1] != '\n')) {
			*why = "a bare CR or LF in the request head";
			return MOAT_SNIFF_OTHER;
		}
		if (e + 1 >= len)
			return MOAT_SNIFF_MORE;
		if (e == i) {
			if (req)
				req->head_len = e + 2;
			return MOAT_SNIFF_HTTP;
		}
		*why = header(b + i, e - i, &s, name, req);
		if (*why)
			return MOAT_SNIFF_OTHER;
		i = e + 2;
	}
}

enum moat_sniff_kind moat_sniff_request(const uint8_t *buf, size_t len, char name[254],
					struct moat_http_req *req)
{
	enum moat_sniff_kind k = MOAT_SNIFF_MORE;
	const char *why = NULL;
	name[0] = '\0';
	if (req)
		*req = (struct moat_http_req){ 0 };
	if (len > 0)
		k = buf[0] == 22 ? tls(buf, len, name) : http(buf, len, name, req, &why);
	if (k == MOAT_SNIFF_MORE && len >= MOAT_SNIFF_MAX) {
		k = MOAT_SNIFF_OTHER;
		why = buf[0] == 22 ? NULL : "no complete request head in 16 KiB";
	}
	if (k == MOAT_SNIFF_MORE || k == MOAT_SNIFF_OTHER)
		name[0] = '\0';
	if (req) {
		if (k != MOAT_SNIFF_HTTP)
			*req = (struct moat_http_req){ 0 };
		req->refusal = k == MOAT_SNIFF_OTHER ? why : NULL;
	}
	return k;
}

enum moat_sniff_kind moat_sniff(const uint8_t *buf, size_t len, char name[254])
{
	return moat_sniff_request(buf, len, name, NULL);
}

/* ---- one request's body, and its head with "Connection: close" ---- */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_TRAILER_LF,
       CH_END_LF, CH_DONE };

void moat_http_body_init(struct moat_http_body *b, const struct moat_http_req *req)
{
	*b = (struct moat_http_body){ .chunked = req->chunked,
				      .left = req->chunked ? 0 : req->length,
				      .state = req->chunked ? CH_SIZE : CH_DATA };
	if (!req->chunked && req->length == 0)
		b->state = CH_DONE;
}

static int hexval(uint8_t c)
{
	if (is_digit(c))
		return c - '0';
	c = (uint8_t)lower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A framing or routing field, which a trailer must not be (RFC 9110 6.5.1):
 * a server that merges trailers into the head would read it there. */
static bool trailer_forbidden(const char *name, size_t n)
{
	static const char *const names[] = { "content-length", "transfer-encoding", "host" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (n == strlen(names[i]) && !memcmp(name, names[i], n))
			return true;
	return false;
}

/* One byte of a trailer line before its CR: a header field line, "name:"
 * OWS value, as header() has it. NULL, or why not. */
static const char *trailer_byte(struct moat_http_body *b, uint8_t c)
{
	if (b->line == 1 && (c == ' ' || c == '\t'))
		return "a folded trailer line (obs-fold)";
	if (b->value)
		return (c < 0x20 && c != '\t') || c == 0x7f ? "a control byte or bare LF in a trailer"
							      : NULL;
	if (tchar(c)) {
		if (b->name_len < sizeof b->name)
			b->name[b->name_len] = lower(c);
		b->name_len++;
		return NULL;
	}
	if (c != ':' || b->name_len == 0)
		return "a trailer line that is not a header field (a request line, or a "
		       "malformed name)";
	if (b->name_len <= sizeof b->name && trailer_forbidden(b->name, b->name_len))
		return "a Content-Length, Transfer-Encoding or Host trailer (framing and "
		       "routing fields are never trailers)";
	b->value = true;
	return NULL;
}

int moat_http_body_feed(struct moat_http_body *b, const uint8_t *p, size_t n, size_t *used,
			const char **why)
{
	size_t i = 0;
	*why = NULL;
	while (i < n && b->state != CH_DONE) {
		uint8_t c = p[i];
		if (b->state == CH_DATA) {
			size_t k = n - i < b->left ? n - i : (size_t)b->left;
			b->left -= k;
			i += k;
			if (b->left == 0)
				b->state = b->chunked ? CH_DATA_CR : CH_DONE;
			continue;
		}
		i++;
		if (++b->line > MOAT_HTTP_LINE_MAX) {
			*why = "a chunk-size or trailer line over 16 KiB";
			goto bad;
		}
		switch (b->state) {
		case CH_SIZE:
			if (hexval(c) >= 0 && b->digits < 15) {
				b->left = b->left << 4 | (uint64_t)hexval(c);
				b->digits++;
			} else if (c == ';' && b->digits) {
				b->state = CH_EXT;
			} else if (c == '\r' && b->digits) {
				b->state = CH_SIZE_LF;
			} else {
				*why = hexval(c) >= 0 ? "a chunk size over 15 hex digits"
						      : "a malformed chunk size";
				goto bad;
			}
			break;
		case CH_EXT:
			if (c == '\r')
				b->state = CH_SIZE_LF;
			else if ((c < 0x20 && c != '\t') || c == 0x7f) {
				*why = "a control byte in a chunk extension";
				goto bad;
			}
			break;
		case CH_SIZE_LF:
		case CH_DATA_LF:
		case CH_TRAILER_LF:
		case CH_END_LF:
			if (c != '\n') {
				*why = "a bare CR in the chunked body";
				goto bad;
			}
			b->line = 0;
			if (b->state == CH_SIZE_LF)
				b->state = b->left ? CH_DATA : CH_TRAILER;
			else if (b->state == CH_END_LF)
				b->state = CH_DONE;
			else
				b->state = b->state == CH_DATA_LF ? CH_SIZE : CH_TRAILER;
			b->digits = 0;
			b->value = false;
			b->name_len = 0;
			if (b->state == CH_TRAILER && (b->trailer += 2) > MOAT_HTTP_LINE_MAX) {
				*why = "trailers over 16 KiB";
				goto bad;
			}
			break;
		case CH_DATA_CR:
			if (c != '\r') {
				*why = "a chunk longer than its size";
				goto bad;
			}
			b->state = CH_DATA_LF;
			break;
		case CH_TRAILER:
			if (c == '\r' && (b->line == 1 || b->value)) {
				b->state = b->line == 1 ? CH_END_LF : CH_TRAILER_LF;
				break;
			}
			if (++b->trailer > MOAT_HTTP_LINE_MAX) {
				*why = "trailers over 16 KiB";
				goto bad;
			}
			*why = trailer_byte(b, c);
			if (*why)
				goto bad;
			break;
		}
	}
	*used = i;
	return b->state == CH_DONE;
bad:
	*used = i;
	return -1;
}

/* Hop-by-hop headers a "Connection: close" request must not carry. */
static bool hop_by_hop(const uint8_t *l, size_t n)
{
	const uint8_t *colon = memchr(l, ':', n);
	size_t c = colon ? (size_t)(colon - l) : n;
	return name_is(l, c, "connection") || name_is(l, c, "keep-alive") ||
	       name_is(l, c, "proxy-connection");
}

size_t moat_http_close_head(const uint8_t *head, size_t head_len, uint8_t *out)
{
	static const char close_line[] = "Connection: close\r\n\r\n";
	size_t o = 0, i = 0;
	while (i + 2 <= head_len) {
		const uint8_t *crlf = memchr(head + i, '\r', head_len - i);
		size_t e = crlf ? (size_t)(crlf - head) : head_len;
		if (e == i)
			break; /* the blank line */
		if (i == 0 || !hop_by_hop(head + i, e - i)) {
			size_t k = e + 2 <= head_len ? e + 2 - i : head_len - i;
			memcpy(out + o, head + i, k);
			o += k;
		}
		i = e + 2;
	}
	memcpy(out + o, close_line, sizeof close_line - 1);
	return o + sizeof close_line - 1;
}
