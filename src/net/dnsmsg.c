/* DNS query parsing and response building for moat's answerer (see
 * dnsmsg.h). Bounds are checked against len before every read. */
#include <string.h>
#include <sys/socket.h>

#include "net/dnsmsg.h"

#define HDR 12u
#define TYPE_A 1u
#define TYPE_AAAA 28u
#define TYPE_OPT 41u
#define CLASS_IN 1u
#define NAME_LEN 253u

#define F_QR 0x8000u
#define F_RD 0x0100u
#define F_RA 0x0080u

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v & 0xffffu);
}

static bool label_byte(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

int moat_dns_parse_query(const uint8_t *msg, size_t len, struct moat_dns_query *q, int *bad_id)
{
	memset(q, 0, sizeof *q);
	*bad_id = len >= HDR ? get16(msg) : -1;
	if (len < HDR)
		return -1;
	unsigned flags = get16(msg + 2);
	if ((flags & F_QR) || (flags >> 11 & 0xfu) != 0)
		return -1;
	unsigned arcount = get16(msg + 10);
	if (get16(msg + 4) != 1 || get16(msg + 6) || get16(msg + 8) || arcount > 1)
		return -1;
	size_t i = HDR, n = 0;
	for (;;) {
		if (i == len)
			return -1;
		size_t l = msg[i++];
		if (l == 0)
			break;
		if (l > 63 || l > len - i) /* 0xc0: compression pointer; 0x40, 0x80: reserved */
			return -1;
		if (n + (n > 0) + l > NAME_LEN)
			return -1;
		if (n > 0)
			q->name[n++] = '.';
		for (size_t k = 0; k < l; k++) {
			uint8_t c = msg[i + k];
			if (!label_byte(c))
				return -1;
			q->name[n++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
		}
		i += l;
	}
	q->name[n] = '\0';
	if (len - i < 4)
		return -1;
	q->qtype = get16(msg + i);
	q->qclass = get16(msg + i + 2);
	i += 4;
	q->question_len = i;
	if (arcount == 1) {
		/* OPT: root name, type, class (UDP size), TTL (flags), RDLENGTH, RDATA */
		if (len - i < 11 || msg[i] != 0 || get16(msg + i + 1) != TYPE_OPT)
			return -1;
		size_t rdlen = get16(msg + i + 9);
		if (len - i - 11 < rdlen)
			return -1;
		i += 11 + rdlen;
	}
	if (i != len)
		return -1;
	q->id = get16(msg);
	q->rd = flags & F_RD;
	return 0;
}

int moat_dns_build_response(const struct moat_dns_query *q, const uint8_t *query_msg, int rcode,
			    const struct moat_dns_addr *addrs, size_t n, uint32_t ttl,
			    uint8_t *out, size_t cap)
{
	size_t len = q->question_len;
	size_t limit = cap < MOAT_DNS_UDP_MAX ? cap : MOAT_DNS_UDP_MAX;
	if (rcode < 0 || rcode > 15 || len < HDR + 5 || len > limit)
		return -1;
	memmove(out + HDR, query_msg + HDR, len - HDR); /* out may be query_msg */
	int family = q->qtype == TYPE_A ? AF_INET : q->qtype == TYPE_AAAA ? AF_INET6 : AF_UNSPEC;
	size_t alen = family == AF_INET ? 4 : 16;
	unsigned count = 0;
	for (size_t i = 0; rcode == 0 && q->qclass == CLASS_IN && family != AF_UNSPEC && i < n; i++) {
		if (addrs[i].family != family)
			continue;
		if (limit - len < 12 + alen)
			break;
		put16(out + len, 0xc000u | HDR); /* the question's name */
		put16(out + len + 2, q->qtype);
		put16(out + len + 4, CLASS_IN);
		put32(out + len + 6, ttl);
		put16(out + len + 10, (unsigned)alen);
		memcpy(out + len + 12, addrs[i].a, alen);
		len += 12 + alen;
		count++;
	}
	put16(out, q->id);
	put16(out + 2, F_QR | (q->rd ? F_RD : 0) | F_RA | (unsigned)rcode);
	put16(out + 4, 1);
	put16(out + 6, count);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return (int)len;
}

int moat_dns_build_formerr(uint16_t id, uint8_t *out, size_t cap)
{
	if (cap < HDR)
		return -1;
	memset(out, 0, HDR);
	put16(out, id);
	put16(out + 2, F_QR | F_RA | 1u);
	return HDR;
}

/* Skips a (possibly compressed) name at msg[i]: the index after it, or 0. */
static size_t skip_name(const uint8_t *msg, size_t len, size_t i)
{
	for (size_t labels = 0; labels < 128; labels++) {
		if (i >= len)
			return 0;
		uint8_t l = msg[i];
		if (l == 0)
			return i + 1;
		if ((l & 0xc0) == 0xc0)
			return len - i >= 2 ? i + 2 : 0; /* a pointer ends the name */
		if (l & 0xc0)
			return 0;
		i += 1u + l;
	}
	return 0;
}

int moat_dns_parse_answers(const uint8_t *msg, size_t len, uint16_t qtype,
			   struct moat_dns_addr *addrs, size_t max, int *rcode)
{
	*rcode = -1;
	if (len < HDR || !(get16(msg + 2) & F_QR))
		return -1;
	*rcode = get16(msg + 2) & 0xfu;
	unsigned qd = get16(msg + 4), an = get16(msg + 6);
	size_t i = HDR, n = 0;
	for (unsigned k = 0; k < qd; k++) {
		i = skip_name(msg, len, i);
		if (!i || len - i < 4)
			return -1;
		i += 4;
	}
	size_t alen = qtype == TYPE_A ? 4 : qtype == TYPE_AAAA ? 16 : 0;
	for (unsigned k = 0; k < an; k++) {
		i = skip_name(msg, len, i);
		if (!i || len - i < 10)
			return -1;
		unsigned type = get16(msg + i), class = get16(msg + i + 2);
		size_t rdlen = get16(msg + i + 8);
		i += 10;
		if (len - i < rdlen)
			return -1;
		if ((type == TYPE_A && rdlen != 4) || (type == TYPE_AAAA && rdlen != 16))
			return -1;
		if (alen && type == qtype && class == CLASS_IN && n < max) {
			addrs[n].family = alen == 4 ? AF_INET : AF_INET6;
			memset(addrs[n].a, 0, sizeof addrs[n].a);
			memcpy(addrs[n].a, msg + i, alen);
			n++;
		}
		i += rdlen;
	}
	return (int)n;
}
