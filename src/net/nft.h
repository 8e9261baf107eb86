/* The nftables table inside a sandbox with egress ("network": true or
 * "allowedHosts"): every TCP connection that does not stay on the sandbox's
 * own loopback is redirected to MOAT_NET_EGRESS_PORT, every UDP datagram to
 * port 53 to MOAT_NET_DNS_PORT, every TCP connection to port 53 (loopback's
 * too) to MOAT_NET_EGRESS_PORT, where the supervisor answers it as DNS, and
 * every other packet that would leave lo
 * is dropped. Behind both ports are sockets pid 1 opened and handed to the
 * supervisor, which decides (net/egress.c). The batch is built at build time
 * by tools/nftgen.c with libnftnl; pid 1 only sends it. */
#ifndef MOAT_NET_NFT_H
#define MOAT_NET_NFT_H

#define MOAT_NFT_TABLE "moat"
#define MOAT_NFT_NAT_CHAIN "out_nat"
#define MOAT_NFT_FILTER_CHAIN "out_filter"
/* Ports inside the sandbox's own namespace, below 1024 so that the program
 * (no capabilities) could never bind them, and bound by pid 1 before it
 * starts anyway. */
#define MOAT_NET_EGRESS_PORT 1
#define MOAT_NET_DNS_PORT 53

/* NFNL_MSG_BATCH_BEGIN, the table, its chains and rules (each with
 * NLM_F_ACK), NFNL_MSG_BATCH_END: build/gen/nft_batch.c. */
extern const unsigned char moat_nft_batch[];
extern const unsigned moat_nft_batch_len;
extern const unsigned moat_nft_batch_acks;

#endif
