/* The allowlist: the grammar of "allowedHosts" entries (the Spin sandbox
 * semantics), host canonicalisation, matching, and the address rules the
 * proxy applies to every resolved address. Pure logic: unit-tested. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/internal.h"

#define ENTRY_MAX 2048u
#define MSG_QUOTE 100u

static int entry_error(struct moat_error *err, const char *what, const char *entry,
		       const char *why)
{
	struct moat_buf b = { 0 };
	moat_buf_append_quoted(&b, entry, strlen(entry), MSG_QUOTE);
	char *q = moat_buf_take(&b);
	moat_error_set(err, MOAT_ERR_POLICY, 0, "%s entry %s refused: %s", what,
		       q ? q : "(unprintable)", why);
	free(q);
	return -1;
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
	return is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'f');
}

/* ---- hosts ---- */

static int ipv4_part(const char *s, size_t len, uint64_t *out)
{
	unsigned base = 10;
	if (len >= 2 && s[0] == '0' && lower(s[1]) == 'x') {
		base = 16;
		s += 2;
		len -= 2;
	} else if (len >= 2 && s[0] == '0') {
		base = 8;
		s++;
		len--;
	}
	if (len == 0)
		return -1;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned d;
		if (is_digit(s[i]))
			d = (unsigned)(s[i] - '0');
		else if (base == 16 && is_hex(s[i]))
			d = (unsigned)(lower(s[i]) - 'a' + 10);
		else
			return -1;
		if (d >= base)
			return -1;
		v = v * base + d;
		if (v > 0xffffffffu)
			return -1;
	}
	*out = v;
	return 0;
}

int moat_ipv4_parse_any(const char *s, size_t len, uint8_t out[4])
{
	uint64_t parts[4];
	size_t n = 0, start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != '.')
			continue;
		if (n == 4 || ipv4_part(s + start, i - start, &parts[n]) < 0)
			return -1;
		n++;
		start = i + 1;
	}
	uint64_t v = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		if (parts[i] > 255)
			return -1;
		v = (v << 8) | parts[i];
	}
	unsigned rest = (unsigned)(5 - n); /* bytes the last part fills */
	if (rest < 4 && parts[n - 1] >> (8 * rest))
		return -1;
	v = (v << (8 * rest)) | parts[n - 1];
	out[0] = (uint8_t)(v >> 24);
	out[1] = (uint8_t)(v >> 16);
	out[2] = (uint8_t)(v >> 8);
	out[3] = (uint8_t)v;
	return 0;
}

/* WHATWG "ends in a number": the last label is decimal digits or 0x[hex]*. */
static bool ends_in_number(const char *s, size_t len)
{
	size_t i = len;
	while (i > 0 && s[i - 1] != '.')
		i--;
	const char *l = s + i;
	size_t ll = len - i;
	if (ll == 0)
		return false;
	if (ll >= 2 && l[0] == '0' && lower(l[1]) == 'x') {
		for (size_t k = 2; k < ll; k++)
			if (!is_hex(l[k]))
				return false;
		return true;
	}
	for (size_t k = 0; k < ll; k++)
		if (!is_digit(l[k]))
			return false;
	return true;
}

static void set_ipv4(struct moat_host *out, const uint8_t a[4])
{
	out->kind = MOAT_HOST_IPV4;
	memset(out->addr, 0, sizeof out->addr);
	memcpy(out->addr, a, 4);
	inet_ntop(AF_INET, a, out->text, sizeof out->text);
}

int moat_host_parse(const char *s, size_t len, struct moat_host *out)
{
	memset(out, 0, sizeof *out);
	if (len == 0)
		return -1;
	if (s[0] == '[') {
		char buf[INET6_ADDRSTRLEN];
		if (len < 3 || s[len - 1] != ']' || len - 2 >= sizeof buf)
			return -1;
		memcpy(buf, s + 1, len - 2);
		buf[len - 2] = '\0';
		struct in6_addr a6;
		if (strchr(buf, '%') || inet_pton(AF_INET6, buf, &a6) != 1)
			return -1;
		if (IN6_IS_ADDR_V4MAPPED(&a6)) {
			set_ipv4(out, a6.s6_addr + 12);
			return 0;
		}
		out->kind = MOAT_HOST_IPV6;
		memcpy(out->addr, a6.s6_addr, 16);
		inet_ntop(AF_INET6, &a6, out->text, sizeof out->text);
		return 0;
	}
	if (s[len - 1] == '.')
		len--; /* one trailing dot: the same name */
	if (len == 0 || len > MOAT_HOST_MAX)
		return -1;
	size_t label = 0;
	for (size_t i = 0; i < len; i++) {
		char c = lower(s[i]);
		if (c == '.') {
			if (label == 0)
				return -1;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_') {
			if (++label > 63)
				return -1;
		} else {
			return -1; /* non-ASCII, spaces, '%', '*', ... */
		}
		out->text[i] = c;
	}
	if (label == 0)
		return -1;
	out->text[len] = '\0';
	if (ends_in_number(out->text, len)) {
		uint8_t a[4];
		if (moat_ipv4_parse_any(out->text, len, a) < 0)
			return -1;
		set_ipv4(out, a);
		return 0;
	}
	out->kind = MOAT_HOST_NAME;
	return 0;
}

/* ---- entries ---- */

int moat_allow_parse_entry(const char *s, struct moat_allow_entry *out, struct moat_error *err)
{
	static const char what[] = "allowedHosts";
	memset(out, 0, sizeof *out);
	size_t len = strlen(s);
	if (len == 0)
		return entry_error(err, what, s, "empty");
	if (len > ENTRY_MAX)
		return entry_error(err, what, s, "too long");
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return entry_error(err, what, s,
					   "only printable ASCII without spaces is accepted "
					   "(write internationalised names in their xn-- form)");
	const char *sep = strstr(s, "://");
	if (!sep)
		return entry_error(err, what, s, "expected scheme://host[:port]");
	size_t slen = (size_t)(sep - s);
	if (slen == 4 && !strncasecmp(s, "http", 4))
		out->https = false;
	else if (slen == 5 && !strncasecmp(s, "https", 5))
		out->https = true;
	else
		return entry_error(err, what, s, "the scheme must be http or https");
	const char *auth = sep + 3;
	size_t alen = strcspn(auth, "/?#");
	const char *rest = auth + alen;
	const char *host = auth;
	size_t hlen;
	const char *port = NULL;
	size_t plen = 0;
	if (memchr(auth, '@', alen))
		return entry_error(err, what, s, "user information is not allowed");
	if (alen > 0 && auth[0] == '[') {
		const char *close = memchr(auth, ']', alen);
		if (!close)
			return entry_error(err, what, s, "unterminated IPv6 address");
		hlen = (size_t)(close - auth) + 1;
		if (hlen < alen) {
			if (auth[hlen] != ':')
				return entry_error(err, what, s, "expected ':' after the IPv6 address");
			port = auth + hlen + 1;
			plen = alen - hlen - 1;
		}
	} else {
		const char *colon = memchr(auth, ':', alen);
		hlen = colon ? (size_t)(colon - auth) : alen;
		if (colon) {
			port = colon + 1;
			plen = alen - hlen - 1;
			if (memchr(port, ':', plen))
				return entry_error(err, what, s,
						   "IPv6 addresses must be written in brackets");
		}
	}
	if (*rest) {
		bool digits = rest[0] == '/' && rest[1];
		for (const char *p = rest + 1; *p && digits; p++)
			digits = is_digit(*p);
		if (digits)
			return entry_error(err, what, s,
					   "CIDR ranges are not supported (name hosts; "
					   "allowedCidrs exists for tests only)");
		if (strcmp(rest, "/") != 0)
			return entry_error(err, what, s,
					   "an entry has no path, query or fragment");
	}
	if (hlen == 0)
		return entry_error(err, what, s, "no host");
	if (hlen == 1 && host[0] == '*')
		return entry_error(err, what, s, "a bare wildcard grants nothing; name the hosts");
	if (hlen > 2 && host[0] == '*' && host[1] == '.') {
		out->wildcard = true;
		host += 2;
		hlen -= 2;
	}
	if (memchr(host, '*', hlen))
		return entry_error(err, what, s, "a wildcard is only allowed as a leading \"*.\"");
	struct moat_host h;
	if (moat_host_parse(host, hlen, &h) < 0)
		return entry_error(err, what, s, "the host is not a valid name or IP address");
	if (out->wildcard && (h.kind != MOAT_HOST_NAME || !strchr(h.text, '.')))
		return entry_error(err, what, s,
				   "\"*.\" must be followed by a domain of at least two labels");
	if (port) {
		if (plen == 1 && port[0] == '*') {
			out->any_port = true;
		} else {
			if (plen == 0)
				return entry_error(err, what, s, "empty port");
			if (memchr(port, '-', plen))
				return entry_error(err, what, s, "port ranges are not supported");
			unsigned v = 0;
			for (size_t i = 0; i < plen; i++) {
				if (!is_digit(port[i]) || plen > 5)
					return entry_error(err, what, s, "the port must be 1-65535 or *");
				v = v * 10 + (unsigned)(port[i] - '0');
			}
			if (v == 0 || v > 65535)
				return entry_error(err, what, s, "the port must be 1-65535 or *");
			out->port = (uint16_t)v;
		}
	} else {
		out->port = out->https ? 443 : 80;
	}
	out->host = strdup(h.text);
	if (!out->host)
		return moat_error_oom(err);
	return 0;
}

int moat_cidr_parse(const char *s, struct moat_cidr *out, struct moat_error *err)
{
	static const char what[] = "allowedCidrs";
	memset(out, 0, sizeof *out);
	const char *slash = strchr(s, '/');
	char buf[INET6_ADDRSTRLEN];
	if (!slash || (size_t)(slash - s) >= sizeof buf)
		return entry_error(err, what, s, "expected ADDRESS/PREFIX");
	memcpy(buf, s, (size_t)(slash - s));
	buf[slash - s] = '\0';
	const char *pfx = slash + 1;
	size_t pl = strlen(pfx);
	if (pl == 0 || pl > 3)
		return entry_error(err, what, s, "bad prefix length");
	unsigned prefix = 0;
	for (size_t i = 0; i < pl; i++) {
		if (!is_digit(pfx[i]))
			return entry_error(err, what, s, "bad prefix length");
		prefix = prefix * 10 + (unsigned)(pfx[i] - '0');
	}
	unsigned bits;
	if (inet_pton(AF_INET, buf, out->addr) == 1) {
		out->family = AF_INET;
		bits = 32;
	} else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
		out->family = AF_INET6;
		bits = 128;
	} else {
		return entry_error(err, what, s, "not an IPv4 or IPv6 address");
	}
	if (prefix > bits)
		return entry_error(err, what, s, "prefix length too large");
	if (prefix == 0)
		return entry_error(err, what, s, "a /0 range would allow every address");
	for (unsigned b = prefix; b < bits; b++)
		if (out->addr[b / 8] & (0x80u >> (b % 8)))
			return entry_error(err, what, s, "host bits are set after the prefix");
	out->prefix = prefix;
	return 0;
}

void moat_allowlist_free(struct moat_allowlist *al)
{
	if (!al)
		return;
	for (size_t i = 0; i < al->count; i++)
		free(al->entries[i].host);
	free(al->entries);
	free(al->cidrs);
	memset(al, 0, sizeof *al);
}

int moat_allowlist_build(const struct moat_request *req, struct moat_allowlist *out,
			 struct moat_error *err)
{
	memset(out, 0, sizeof *out);
	size_t n = req->allowed_hosts_count, m = req->allowed_cidrs_count;
	out->entries = calloc(n ? n : 1, sizeof *out->entries);
	out->cidrs = calloc(m ? m : 1, sizeof *out->cidrs);
	if (!out->entries || !out->cidrs) {
		moat_allowlist_free(out);
		return moat_error_oom(err);
	}
	for (size_t i = 0; i < n; i++) {
		if (moat_allow_parse_entry(req->allowed_hosts[i], &out->entries[i], err) < 0) {
			moat_allowlist_free(out);
			return -1;
		}
		out->count++;
	}
	for (size_t i = 0; i < m; i++) {
		if (moat_cidr_parse(req->allowed_cidrs[i], &out->cidrs[i], err) < 0) {
			moat_allowlist_free(out);
			return -1;
		}
		out->cidr_count++;
	}
	return 0;
}

/* Does entry e name host h (its port and scheme aside)? */
static bool entry_names(const struct moat_allow_entry *e, const struct moat_host *h)
{
	if (!e->wildcard)
		return !strcmp(h->text, e->host);
	size_t tl = strlen(h->text), sl = strlen(e->host);
	return h->kind == MOAT_HOST_NAME && tl > sl + 1 && h->text[tl - sl - 1] == '.' &&
	       !strcmp(h->text + tl - sl, e->host);
}

bool moat_allowlist_match(const struct moat_allowlist *al, bool https, const struct moat_host *h,
			  uint16_t port)
{
	for (size_t i = 0; i < al->count; i++) {
		const struct moat_allow_entry *e = &al->entries[i];
		if (e->https == https && (e->any_port || e->port == port) && entry_names(e, h))
			return true;
	}
	return false;
}

const char *moat_allowlist_refusal(const struct moat_allowlist *al, bool https,
				   const struct moat_host *h, uint16_t port, char *why,
				   size_t whylen)
{
	if (moat_allowlist_match(al, https, h, port))
		return NULL;
	bool v6 = h->kind == MOAT_HOST_IPV6;
	snprintf(why, whylen, "%s://%s%s%s:%u is not in allowedHosts", https ? "https" : "http",
		 v6 ? "[" : "", h->text, v6 ? "]" : "", port);
	return why;
}

const char *moat_sniff_host(enum moat_sniff_kind kind, const char *name,
			    const struct moat_http_req *req, struct moat_host *h, char *why,
			    size_t whylen)
{
	memset(h, 0, sizeof *h);
	bool tls = kind == MOAT_SNIFF_TLS;
	if (kind == MOAT_SNIFF_OTHER && req && req->refusal) {
		snprintf(why, whylen, "HTTP request refused: %s", req->refusal);
		return why;
	}
	if (!tls && kind != MOAT_SNIFF_HTTP)
		return "neither TLS nor HTTP: allowedHosts checks the TLS SNI or the HTTP Host";
	if (!name[0])
		return tls ? "TLS without a server name (SNI)" : "HTTP request without a Host header";
	/* the sniffer gives an IPv6 Host without its brackets */
	char v6[MOAT_HOST_MAX + 3];
	size_t n = strlen(name);
	bool colon = strchr(name, ':') != NULL;
	if (colon)
		n = (size_t)snprintf(v6, sizeof v6, "[%s]", name);
	if (moat_host_parse(colon ? v6 : name, n, h) < 0) {
		memset(h, 0, sizeof *h);
		snprintf(why, whylen, "malformed host name in the %s",
			 tls ? "TLS SNI" : "HTTP Host header");
		return why;
	}
	return NULL;
}

bool moat_allowlist_match_name(const struct moat_allowlist *al, const struct moat_host *h)
{
	for (size_t i = 0; i < al->count; i++)
		if (entry_names(&al->entries[i], h))
			return true;
	return false;
}

int moat_net_validate(const struct moat_request *req, struct moat_error *err)
{
	if (req->network && req->has_allowed_hosts)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"network\": true (full egress) and \"allowedHosts\" (egress "
				      "only to listed hosts) contradict each other; use one");
	if (req->allowed_cidrs_count && !req->has_allowed_hosts)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"allowedCidrs\" only applies together with \"allowedHosts\"");
	if ((req->allowed_hosts_count && !req->allowed_hosts) ||
	    (req->allowed_cidrs_count && !req->allowed_cidrs))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "allowedHosts/allowedCidrs: no array");
	if (req->allowed_hosts_count > MOAT_NET_MAX_ENTRIES ||
	    req->allowed_cidrs_count > MOAT_NET_MAX_ENTRIES)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "too many allowedHosts or allowedCidrs entries (max %u)",
				      MOAT_NET_MAX_ENTRIES);
	if (!req->has_allowed_hosts)
		return 0;
	struct moat_allowlist al;
	if (moat_allowlist_build(req, &al, err) < 0)
		return -1;
	moat_allowlist_free(&al);
	return 0;
}

/* ---- address rules ---- */

static bool in4(const uint8_t *a, uint32_t net, unsigned prefix)
{
	uint32_t v = (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 | (uint32_t)a[2] << 8 | a[3];
	uint32_t mask = prefix ? 0xffffffffu << (32 - prefix) : 0;
	return (v & mask) == net;
}

static bool in_prefix(const uint8_t *a, const uint8_t *net, unsigned prefix)
{
	for (unsigned b = 0; b < prefix; b++) {
		unsigned m = 0x80u >> (b % 8);
		if ((a[b / 8] & m) != (net[b / 8] & m))
			return false;
	}
	return true;
}

/* The clouds' and platforms' metadata services, host agents and
 * instance-local resolvers: credentials, the VM's configuration and the
 * provider's internal names. Refused in every mode, before allowedCidrs is
 * looked at (no range lifts them), and whatever name led there. */
#define META "cloud metadata"
static const struct {
	uint32_t net;
	unsigned prefix;
} meta4[] = {
	/* AWS, GCP (metadata.google.internal), Azure IMDS, Oracle, DigitalOcean,
	 * OpenStack, IBM, Hetzner, Huawei, ... */
	{ 0xa9fea9feu, 32 },	/* 169.254.169.254 */
	{ 0xa9fea9fdu, 32 },	/* 169.254.169.253: AWS's VPC resolver */
	{ 0xa9feaa02u, 32 },	/* 169.254.170.2: AWS ECS task credentials */
	{ 0xa9feaa17u, 32 },	/* 169.254.170.23: AWS EKS Pod Identity agent */
	{ 0xa9fe0017u, 32 },	/* 169.254.0.23: Tencent Cloud */
	{ 0xa9fe140au, 32 },	/* 169.254.20.10: Kubernetes NodeLocal DNSCache */
	{ 0x646464c8u, 32 },	/* 100.100.100.200: Alibaba Cloud */
	{ 0xa83f8110u, 32 },	/* 168.63.129.16: Azure WireServer (80), HostGAPlugin
				 * (32526), the VNet's DNS: a public address */
	{ 0xc00000c0u, 32 },	/* 192.0.0.192: Oracle Cloud's legacy metadata */
};

static const struct {
	uint8_t net[16];
	unsigned prefix;
} meta6[] = {
	{ { 0xfd, 0x00, 0x0e, 0xc2 }, 32 },	/* fd00:ec2::/32: AWS (IMDS ::254, DNS
						 * ::253, EKS Pod Identity ::23) */
	{ { 0xfd, 0x20, 0x00, 0xce, [14] = 0x02, [15] = 0x54 }, 128 }, /* fd20:ce::254: GCP */
	{ { 0xfd, 0x00, 0x00, 0xc1, [12] = 0xa9, 0xfe, 0xa9, 0xfe }, 128 }, /* fd00:c1::a9fe:a9fe:
									      * Oracle */
	{ { 0xfe, 0x80, [12] = 0xa9, 0xfe, 0xa9, 0xfe }, 128 },	/* fe80::a9fe:a9fe: OpenStack */
};

static const char *meta4_of(const uint8_t *a)
{
	for (size_t i = 0; i < sizeof meta4 / sizeof meta4[0]; i++)
		if (in4(a, meta4[i].net, meta4[i].prefix))
			return META;
	return NULL;
}

static const char *meta6_of(const uint8_t *a)
{
	for (size_t i = 0; i < sizeof meta6 / sizeof meta6[0]; i++)
		if (in_prefix(a, meta6[i].net, meta6[i].prefix))
			return META;
	return NULL;
}

/* IANA IPv4 special-purpose registry; first match wins. */
static const struct {
	uint32_t net;
	unsigned prefix;
	const char *why;
} v4_rules[] = {
	{ 0xffffffffu, 32, "broadcast" },
	{ 0x00000000u, 8, "unspecified" },
	{ 0x0a000000u, 8, "private" },
	{ 0x7f000000u, 8, "loopback" },
	{ 0x64400000u, 10, "shared address space (CGNAT)" },
	{ 0xa9fe0000u, 16, "link-local" },
	{ 0xac100000u, 12, "private" },
	{ 0xc0000000u, 24, "reserved" },	/* IETF protocol assignments */
	{ 0xc0000200u, 24, "documentation" },
	{ 0xc0586300u, 24, "reserved" },	/* 6to4 relay anycast */
	{ 0xc0a80000u, 16, "private" },
	{ 0xc6120000u, 15, "benchmarking" },
	{ 0xc6336400u, 24, "documentation" },
	{ 0xcb007100u, 24, "documentation" },
	{ 0xe0000000u, 4, "multicast" },
	{ 0xf0000000u, 4, "reserved" },
};

static const char *class4(const uint8_t *a)
{
	if (meta4_of(a))
		return META;
	for (size_t i = 0; i < sizeof v4_rules / sizeof v4_rules[0]; i++)
		if (in4(a, v4_rules[i].net, v4_rules[i].prefix))
			return v4_rules[i].why;
	return NULL;
}

/* IPv6 literal rules: only global unicast (2000::/3) minus the IANA
 * special-purpose registry is public. First match wins; a NULL reason is a
 * form that is public as a literal (IPv4-mapped, NAT64): the IPv4 address
 * it carries is judged on its own (moat_addr_embedded). */
static const struct {
	uint8_t net[16];
	unsigned prefix;
	const char *why;
} v6_rules[] = {
	{ { 0 }, 128, "unspecified" },
	{ { [15] = 1 }, 128, "loopback" },
	{ { 0 }, 96, "reserved" },				/* IPv4-compatible */
	{ { [10] = 0xff, [11] = 0xff }, 96, NULL },		/* IPv4-mapped */
	{ { [8] = 0xff, [9] = 0xff }, 96, "reserved" },		/* SIIT ::ffff:0:0:0/96 */
	{ { 0x00, 0x64, 0xff, 0x9b }, 96, NULL },		/* NAT64 well-known */
	{ { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48, "reserved" }, /* local NAT64 */
	{ { 0x01, 0x00 }, 64, "reserved" },			/* discard-only */
	{ { 0xfc }, 7, "private" },
	{ { 0xfe, 0x80 }, 10, "link-local" },
	{ { 0xfe, 0xc0 }, 10, "reserved" },			/* site-local */
	{ { 0xff }, 8, "multicast" },
	{ { 0x20, 0x01, 0x0d, 0xb8 }, 32, "documentation" },
	{ { 0x20, 0x01, 0x00, 0x02 }, 48, "benchmarking" },
	{ { 0x20, 0x01 }, 32, "Teredo" },			/* RFC 4380 */
	{ { 0x20, 0x01 }, 23, "reserved" },			/* ORCHID, AMT, ... */
	{ { 0x20, 0x02 }, 16, "6to4" },				/* RFC 7526: deprecated */
	{ { 0x3f, 0xff }, 20, "documentation" },
};

static const char *class6_literal(const uint8_t *a)
{
	if (meta6_of(a))
		return META;
	for (size_t i = 0; i < sizeof v6_rules / sizeof v6_rules[0]; i++)
		if (in_prefix(a, v6_rules[i].net, v6_rules[i].prefix))
			return v6_rules[i].why;
	if ((a[0] & 0xe0) != 0x20)
		return "not global unicast";
	return NULL;
}

/* Copies the 4 bytes of an RFC 6052 embedding for prefix length plen (the
 * u-octet, byte 8, skipped). */
static void rfc6052(const uint8_t *a, unsigned plen, uint8_t *v4)
{
	size_t o = plen / 8;
	for (size_t k = 0; k < 4; k++, o++)
		v4[k] = a[o == 8 ? ++o : o];
}

size_t moat_addr_embedded(const uint8_t *a, uint8_t v4[][4])
{
	static const uint8_t wk[12] = { 0x00, 0x64, 0xff, 0x9b };
	static const uint8_t local[6] = { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 };
	static const uint8_t teredo[4] = { 0x20, 0x01 };
	static const uint8_t zero[12] = { 0 };
	static const uint8_t siit[12] = { [8] = 0xff, [9] = 0xff };
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	size_t n = 0;
	if (!memcmp(a, local, 6)) {
		/* local-use: the operator picks the prefix length; any of them */
		static const unsigned plen[] = { 48, 56, 64, 96 };
		for (size_t i = 0; i < 4; i++)
			rfc6052(a, plen[i], v4[n++]);
	} else if (!memcmp(a, wk, 12) || !memcmp(a, siit, 12) || !memcmp(a, mapped, 12) ||
		   (!memcmp(a, zero, 12) && (a[12] | a[13] | a[14] || a[15] > 1))) {
		memcpy(v4[n++], a + 12, 4); /* NAT64, SIIT, mapped, IPv4-compatible */
	} else if (a[0] == 0x20 && a[1] == 0x02) {
		memcpy(v4[n++], a + 2, 4); /* 6to4: the site's IPv4 */
	} else if (!memcmp(a, teredo, 4)) {
		memcpy(v4[n++], a + 4, 4); /* Teredo server */
		for (size_t k = 0; k < 4; k++)
			v4[n][k] = (uint8_t)~a[12 + k]; /* the client, obfuscated */
		n++;
	}
	/* ISATAP interface id, under any prefix: [0-3]00:5efe:a.b.c.d */
	if (!(a[8] & 0xfc) && !a[9] && a[10] == 0x5e && a[11] == 0xfe)
		memcpy(v4[n++], a + 12, 4);
	return n;
}

const char *moat_addr_class(int family, const uint8_t *addr)
{
	if (family == AF_INET)
		return class4(addr);
	if (family != AF_INET6)
		return "not an IP address";
	uint8_t v4[MOAT_ADDR_EMBED_MAX][4];
	size_t n = moat_addr_embedded(addr, v4);
	for (size_t i = 0; i < n; i++) {
		const char *why = class4(v4[i]);
		if (why)
			return why;
	}
	return class6_literal(addr);
}

void moat_addr_unmap(int *family, uint8_t *addr)
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	if (*family == AF_INET6 && !memcmp(addr, mapped, 12)) {
		memmove(addr, addr + 12, 4);
		memset(addr + 4, 0, 12);
		*family = AF_INET;
	}
}

static bool cidr_covers(const struct moat_allowlist *al, int family, const uint8_t *a)
{
	for (size_t i = 0; al && i < al->cidr_count; i++)
		if (al->cidrs[i].family == family && in_prefix(a, al->cidrs[i].addr, al->cidrs[i].prefix))
			return true;
	return false;
}

/* One address on its own: a metadata address (never excepted), its class
 * (unless allowedCidrs covers it), then the host's (never excepted). */
static const char *judge_one(const struct moat_allowlist *al, int family, const uint8_t *a,
			     const char *(*host)(int, const uint8_t *))
{
	const char *why = family == AF_INET ? meta4_of(a) : meta6_of(a);
	if (!why && !cidr_covers(al, family, a))
		why = family == AF_INET ? class4(a) : class6_literal(a);
	return why || !host ? why : host(family, a);
}

const char *moat_addr_judge(const struct moat_allowlist *al, int family, const uint8_t *addr,
			    const char *(*host)(int family, const uint8_t *addr),
			    struct moat_addr_verdict *v)
{
	struct moat_addr_verdict tmp;
	if (!v)
		v = &tmp;
	memset(v, 0, sizeof *v);
	if (family != AF_INET && family != AF_INET6)
		return v->why = "not an IP address";
	v->family = family;
	memcpy(v->addr, addr, family == AF_INET ? 4 : 16);
	moat_addr_unmap(&v->family, v->addr);
	v->judged_family = v->family;
	memcpy(v->judged, v->addr, 16);
	if (v->family == AF_INET6) {
		/* every IPv4 address the form carries passes the whole policy too */
		uint8_t v4[MOAT_ADDR_EMBED_MAX][4];
		size_t n = moat_addr_embedded(v->addr, v4);
		for (size_t i = 0; i < n; i++) {
			const char *why = judge_one(al, AF_INET, v4[i], host);
			if (why) {
				v->judged_family = AF_INET;
				memset(v->judged, 0, 16);
				memcpy(v->judged, v4[i], 4);
				return v->why = why;
			}
		}
	}
	return v->why = judge_one(al, v->family, v->addr, host);
}

const char *moat_addr_refusal(const struct moat_allowlist *al, int family, const uint8_t *addr)
{
	return moat_addr_judge(al, family, addr, NULL, NULL);
}

int moat_addr_verdict_text(const struct moat_addr_verdict *v, char *out, size_t len)
{
	char judged[48], literal[48];
	moat_netlog_addr_text(v->judged_family, v->judged, judged);
	moat_netlog_addr_text(v->family, v->addr, literal);
	/* "host address" is already a noun: no "host address address" */
	size_t wl = strlen(v->why ? v->why : "");
	bool noun = wl >= 7 && !strcmp(v->why + wl - 7, "address");
	bool carried = v->judged_family != v->family;
	return snprintf(out, len, "%s%s %s%s%s%s", v->why ? v->why : "allowed",
			noun ? "" : " address", judged, carried ? " (carried in " : "",
			carried ? literal : "", carried ? ")" : "");
}

const char *moat_egress_refusal(const struct moat_allowlist *al, int family, const uint8_t *addr)
{
	return moat_addr_judge(al, family, addr, moat_addr_host_local, NULL);
}

const char *moat_egress_refusal_text(const struct moat_allowlist *al, int family,
				     const uint8_t *addr, char *text, size_t len)
{
	struct moat_addr_verdict v;
	const char *why = moat_addr_judge(al, family, addr, moat_addr_host_local, &v);
	if (why && text && len)
		moat_addr_verdict_text(&v, text, len);
	return why;
}

const char *moat_net_addr_refused(int family, const void *addr)
{
	if (family != AF_INET && family != AF_INET6)
		return "not an IP address";
	return moat_egress_refusal(NULL, family, addr);
}
