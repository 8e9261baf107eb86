/* Build-time generator of the nftables batch that pid 1 sends inside every
 * sandbox with network egress (src/net/nft.h). The ruleset is the same for
 * every run, so its netlink messages are built once here with libnftnl (the
 * library nft itself uses) and compiled into libmoat as bytes: a run loads
 * neither libnftnl nor libmnl.
 *
 *   table inet moat {
 *     chain out_nat {     type nat hook output priority -100; policy accept;
 *       udp dport 53 redirect to :53          # every DNS query: moat's answerer
 *       tcp dport 53 redirect to :1           # DNS over TCP, loopback's too: the
 *                                             # relay, which answers it itself
 *       ip daddr 127.0.0.0/8 return           # the sandbox's own loopback
 *       ip6 daddr ::1 return
 *       meta l4proto tcp redirect to :1       # every other TCP connection
 *     }
 *     chain out_filter {  type filter hook output priority 0; policy drop;
 *       ip daddr 127.0.0.0/8 accept           # after NAT: lo and moat's sockets
 *       ip6 daddr ::1 accept
 *     }
 *   }
 *
 * Usage: nftgen OUT.c  (writes moat_nft_batch, its length and ack count). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>

#include "net/nft.h"

static char buf[65536];
static size_t off;
static uint32_t seq = 1;
static unsigned acks;

static void die(const char *what)
{
	fprintf(stderr, "nftgen: %s\n", what);
	exit(1);
}

static struct nlmsghdr *hdr(uint16_t type, uint16_t flags)
{
	if (sizeof buf - off < 4096)
		die("batch too large");
	acks++;
	return nftnl_nlmsg_build_hdr(buf + off, type, NFPROTO_INET, flags | NLM_F_ACK, seq++);
}

static void advance(struct nlmsghdr *h)
{
	off += NLMSG_ALIGN(h->nlmsg_len);
}

static struct nftnl_expr *expr(const char *name)
{
	struct nftnl_expr *e = nftnl_expr_alloc(name);
	if (!e)
		die("nftnl_expr_alloc");
	return e;
}

static void meta(struct nftnl_rule *r, uint32_t key)
{
	struct nftnl_expr *e = expr("meta");
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
	nftnl_rule_add_expr(r, e);
}

static void cmp_eq(struct nftnl_rule *r, const void *data, uint32_t len)
{
	struct nftnl_expr *e = expr("cmp");
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
	nftnl_rule_add_expr(r, e);
}

static void payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len)
{
	struct nftnl_expr *e = expr("payload");
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_rule_add_expr(r, e);
}

static void l4proto(struct nftnl_rule *r, uint8_t proto)
{
	meta(r, NFT_META_L4PROTO);
	cmp_eq(r, &proto, 1);
}

static void redirect_to(struct nftnl_rule *r, uint16_t port)
{
	uint16_t p = htons(port);
	struct nftnl_expr *e = expr("immediate");
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
	nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &p, sizeof p);
	nftnl_rule_add_expr(r, e);
	e = expr("redir");
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
	nftnl_rule_add_expr(r, e);
}

static void verdict(struct nftnl_rule *r, int v)
{
	struct nftnl_expr *e = expr("immediate");
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)v);
	nftnl_rule_add_expr(r, e);
}

/* ip daddr 127.0.0.0/8 */
static void daddr_loopback4(struct nftnl_rule *r)
{
	uint8_t fam = NFPROTO_IPV4;
	meta(r, NFT_META_NFPROTO);
	cmp_eq(r, &fam, 1);
	payload(r, NFT_PAYLOAD_NETWORK_HEADER, 16, 4);
	uint8_t mask[4] = { 0xff, 0, 0, 0 }, zero[4] = { 0 }, net[4] = { 127, 0, 0, 0 };
	struct nftnl_expr *e = expr("bitwise");
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, 4);
	nftnl_rule_add_expr(r, e);
	cmp_eq(r, net, 4);
}

/* ip6 daddr ::1 */
static void daddr_loopback6(struct nftnl_rule *r)
{
	uint8_t fam = NFPROTO_IPV6;
	meta(r, NFT_META_NFPROTO);
	cmp_eq(r, &fam, 1);
	payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16);
	struct in6_addr lo = IN6ADDR_LOOPBACK_INIT;
	cmp_eq(r, &lo, 16);
}

static struct nftnl_rule *rule(const char *chain)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	if (!r)
		die("nftnl_rule_alloc");
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, MOAT_NFT_TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	return r;
}

static void emit_rule(struct nftnl_rule *r)
{
	struct nlmsghdr *h = hdr(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
	nftnl_rule_nlmsg_build_payload(h, r);
	advance(h);
	nftnl_rule_free(r);
}

static void emit_chain(const char *name, const char *type, uint32_t hook, int prio,
		       uint32_t policy)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	if (!c)
		die("nftnl_chain_alloc");
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, MOAT_NFT_TABLE);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, hook);
	nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, policy);
	struct nlmsghdr *h = hdr(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
	nftnl_chain_nlmsg_build_payload(h, c);
	advance(h);
	nftnl_chain_free(c);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		die("usage: nftgen OUT.c");
	struct nlmsghdr *h = nftnl_batch_begin(buf, seq++);
	advance(h);

	struct nftnl_table *t = nftnl_table_alloc();
	if (!t)
		die("nftnl_table_alloc");
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, MOAT_NFT_TABLE);
	h = hdr(NFT_MSG_NEWTABLE, NLM_F_CREATE);
	nftnl_table_nlmsg_build_payload(h, t);
	advance(h);
	nftnl_table_free(t);

	emit_chain(MOAT_NFT_NAT_CHAIN, "nat", NF_INET_LOCAL_OUT, -100, NF_ACCEPT);
	emit_chain(MOAT_NFT_FILTER_CHAIN, "filter", NF_INET_LOCAL_OUT, 0, NF_DROP);

	/* out_nat */
	struct nftnl_rule *r = rule(MOAT_NFT_NAT_CHAIN);
	l4proto(r, IPPROTO_UDP);
	payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
	uint16_t dns = htons(53);
	cmp_eq(r, &dns, 2);
	redirect_to(r, MOAT_NET_DNS_PORT);
	emit_rule(r);
	r = rule(MOAT_NFT_NAT_CHAIN);
	l4proto(r, IPPROTO_TCP);
	payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
	cmp_eq(r, &dns, 2);
	redirect_to(r, MOAT_NET_EGRESS_PORT);
	emit_rule(r);
	r = rule(MOAT_NFT_NAT_CHAIN);
	daddr_loopback4(r);
	verdict(r, NFT_RETURN);
	emit_rule(r);
	r = rule(MOAT_NFT_NAT_CHAIN);
	daddr_loopback6(r);
	verdict(r, NFT_RETURN);
	emit_rule(r);
	r = rule(MOAT_NFT_NAT_CHAIN);
	l4proto(r, IPPROTO_TCP);
	redirect_to(r, MOAT_NET_EGRESS_PORT);
	emit_rule(r);

	/* out_filter: policy drop */
	r = rule(MOAT_NFT_FILTER_CHAIN);
	daddr_loopback4(r);
	verdict(r, NF_ACCEPT);
	emit_rule(r);
	r = rule(MOAT_NFT_FILTER_CHAIN);
	daddr_loopback6(r);
	verdict(r, NF_ACCEPT);
	emit_rule(r);

	h = nftnl_batch_end(buf + off, seq++);
	advance(h);

	FILE *f = fopen(argv[1], "we");
	if (!f)
		die(strerror(errno));
	fprintf(f, "/* generated by tools/nftgen.c: do not edit */\n#include \"net/nft.h\"\n"
		   "const unsigned char moat_nft_batch[] __attribute__((aligned(4))) = {");
	for (size_t i = 0; i < off; i++)
		fprintf(f, "%s0x%02x,", i % 12 ? " " : "\n\t", (unsigned char)buf[i]);
	fprintf(f, "\n};\nconst unsigned moat_nft_batch_len = %zu;\n"
		   "const unsigned moat_nft_batch_acks = %u;\n", off, acks);
	if (fclose(f) != 0)
		die(strerror(errno));
	return 0;
}
