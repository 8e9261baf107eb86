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
 * is there is a valid prefix, -1 when it is not an origin-form HTTP/1.x line. */
static int request_line(const uint8_t *b, size_t len, size_t *end)
{
	size_t i = 0;
	while (i < len && i < METHOD_MAX && tchar(b[i]))
		i++;
	if (i == len)
		return 0;
	if (i == 0 || b[i++] != ' ')
		return -1;
	size_t t = i;
	if (t < len && b[t] != '/' && b[t] != '*')
		return -1; /* absolute- or authority-form: a proxy request */
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

/* One header line (no CRLF): "name:" OWS value OWS. */
static bool header(const uint8_t *l, size_t n, bool *host_seen, char name[254])
{
	size_t c = 0;
	while (c < n && tchar(l[c]))
		c++;
	if (c == 0 || c == n || l[c] != ':') /* also refuses obs-fold */
		return false;
	for (size_t i = c + 1; i < n; i++)
		if ((l[i] < 0x20 && l[i] != '\t') || l[i] == 0x7f)
			return false;
	if (c != 4 || lower(l[0]) != 'h' || lower(l[1]) != 'o' || lower(l[2]) != 's' ||
	    lower(l[3]) != 't')
		return true;
	if (*host_seen)
		return false;
	*host_seen = true;
	size_t s = c + 1, e = n;
	while (s < e && (l[s] == ' ' || l[s] == '\t'))
		s++;
	while (e > s && (l[e - 1] == ' ' || l[e - 1] == '\t'))
		e--;
	return host_value(l + s, e - s, name);
}

static enum moat_sniff_kind http(const uint8_t *b, size_t len, char name[254])
{
	size_t i;
	int rl = request_line(b, len, &i);
	if (rl <= 0)
		return rl ? MOAT_SNIFF_OTHER : MOAT_SNIFF_MORE;
	bool host_seen = false;
	for (;;) {
		size_t e = i;
		while (e < len && b[e] != '\r' && b[e] != '\n')
			e++;
		if (e < len && b[e] == '\n')
			return MOAT_SNIFF_OTHER; /* bare LF */
		if (e + 1 >= len)
			return MOAT_SNIFF_MORE;
		if (b[e + 1] != '\n')
			return MOAT_SNIFF_OTHER; /* bare CR */
		if (e == i)
			return MOAT_SNIFF_HTTP;
		if (!header(b + i, e - i, &host_seen, name))
			return MOAT_SNIFF_OTHER;
		i = e + 2;
	}
}

enum moat_sniff_kind moat_sniff(const uint8_t *buf, size_t len, char name[254])
{
	enum moat_sniff_kind k = MOAT_SNIFF_MORE;
	name[0] = '\0';
	if (len > 0)
		k = buf[0] == 22 ? tls(buf, len, name) : http(buf, len, name);
	if (k == MOAT_SNIFF_MORE && len >= MOAT_SNIFF_MAX)
		k = MOAT_SNIFF_OTHER;
	if (k == MOAT_SNIFF_MORE || k == MOAT_SNIFF_OTHER)
		name[0] = '\0';
	return k;
}
