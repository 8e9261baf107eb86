/* The DNS messages moat's answerer reads and writes (RFC 1035 over UDP):
 * one question in, a response with A/AAAA answers out. Pure: unit-tested. */
#ifndef MOAT_NET_DNSMSG_H
#define MOAT_NET_DNSMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOAT_DNS_UDP_MAX 512u /* response size limit (RFC 1035 UDP, no EDNS) */

struct moat_dns_query {
	uint16_t id;
	bool rd;             /* recursion desired, echoed */
	char name[254];      /* lowercased, no trailing dot, "" for the root */
	uint16_t qtype, qclass;
	size_t question_len; /* bytes of header + question, to echo the question */
};

/* 0, or -1 when msg is not a query moat answers: shorter than a header, QR
 * set, opcode != 0, QDCOUNT != 1, ANCOUNT or NSCOUNT != 0, ARCOUNT > 1, an
 * additional record that is not an EDNS OPT at the root, a compression
 * pointer or other label type in the question, a name over 253 characters,
 * a label byte outside [A-Za-z0-9_-], or bytes left over. EDNS is ignored.
 * *bad_id gets the id whenever len >= 12 (to answer FORMERR), else -1. */
int moat_dns_parse_query(const uint8_t *msg, size_t len, struct moat_dns_query *q, int *bad_id);

struct moat_dns_addr {
	int family; /* AF_INET: a[0..3]; AF_INET6: a[0..15] */
	uint8_t a[16];
};

/* Writes the response to q (query_msg: the message q was parsed from) into
 * out: QR and RA set, AA and TC clear, RD echoed, the question echoed byte
 * for byte, rcode (0 NOERROR, 1 FORMERR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED;
 * at most 15). With rcode 0 and class IN, each address of the qtype's family
 * (AF_INET for A, AF_INET6 for AAAA; others skipped) becomes an answer named
 * by a pointer to the question, with ttl. Answers that would take the
 * message past min(cap, MOAT_DNS_UDP_MAX) bytes are left out, without
 * setting TC: a client needs some addresses, not all. Returns the length,
 * or -1 when header and question do not fit in cap. */
int moat_dns_build_response(const struct moat_dns_query *q, const uint8_t *query_msg, int rcode,
			    const struct moat_dns_addr *addrs, size_t n, uint32_t ttl,
			    uint8_t *out, size_t cap);

/* Reads a response from the host's resolver: *rcode gets its rcode, and the
 * answer section's records of type qtype (1 A, 28 AAAA) and class IN, at
 * most max, go into addrs (owner names are not compared: the resolver has
 * followed any CNAME chain). Returns how many, or -1 when msg is malformed
 * (shorter than a header, not a response, a name or record past the end,
 * a record of type A/AAAA whose length is not 4/16). Pure: fuzzed. */
int moat_dns_parse_answers(const uint8_t *msg, size_t len, uint16_t qtype,
			   struct moat_dns_addr *addrs, size_t max, int *rcode);

/* A FORMERR response that is only a header (QR, RA, rcode 1, no records)
 * with id: 12, or -1 when cap < 12. */
int moat_dns_build_formerr(uint16_t id, uint8_t *out, size_t cap);

#endif
