/* net internals shared by net.c (modes, pid 1's setup), allow.c (allowlist
 * grammar and the address rules), local.c (the host's own addresses),
 * netlog.c (the connection log), egress.c (transparent TCP and DNS) and
 * proxy.c (the explicit allowlist proxy). Unit tests include this header. */
#ifndef MOAT_NET_INTERNAL_H
#define MOAT_NET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/core.h"
#include "net/net.h"
#include "net/sniff.h"

/* ---- rtnetlink requests (rtnl.c) ----------------------------------------- */

/* Append one request to *buf (realloc'd; *len grows by its aligned size):
 * set interface ifindex up, or add a default route (family AF_INET or
 * AF_INET6) through interface ifindex, with preferred source src (4 or 16
 * bytes, or NULL). 0, or -1 (ENOMEM, bad family) with *buf and *len
 * unchanged. */
int moat_rtnl_link_up(uint8_t **buf, size_t *len, int ifindex);
int moat_rtnl_default_route(uint8_t **buf, size_t *len, int family, int ifindex,
			    const void *src);
/* Appends an RTM_GETROUTE request for one destination (and the uid whose
 * route it is) to *buf. */
int moat_rtnl_get_route(uint8_t **buf, size_t *len, int family, const void *dst, uid_t uid);

/* ---- allowlist grammar (allow.c) ---------------------------------------- */

#define MOAT_HOST_MAX 253u

/* One "scheme://host[:port]" entry. */
struct moat_allow_entry {
	bool https;        /* scheme: https (true) or http */
	bool wildcard;     /* "*.suffix": any name strictly below suffix */
	bool any_port;     /* ":*" */
	uint16_t port;     /* explicit port, or the scheme's default */
	char *host;        /* canonical: lowercase name or IP text (the suffix for wildcards) */
};

struct moat_cidr {
	int family;        /* AF_INET or AF_INET6 */
	uint8_t addr[16];  /* network bytes; host bits zero */
	unsigned prefix;
};

struct moat_allowlist {
	struct moat_allow_entry *entries;
	size_t count;
	struct moat_cidr *cidrs;
	size_t cidr_count;
};

/* A host as a request names it. kind: name, IPv4 or IPv6 literal. */
enum moat_host_kind { MOAT_HOST_NAME, MOAT_HOST_IPV4, MOAT_HOST_IPV6 };

struct moat_host {
	enum moat_host_kind kind;
	char text[MOAT_HOST_MAX + 1]; /* canonical: lowercase, no trailing dot; IPs as
				       * inet_ntop text (IPv4-mapped IPv6 becomes IPv4) */
	uint8_t addr[16];             /* IPv4 in the first 4 bytes */
};

/* Canonicalises a host as written in a URL authority (IPv6 in brackets,
 * no zone). IPv4 literals in any
 * numeric spelling (127.1, 0x7f.1, 017700000001, 2130706433) become
 * dotted-quad text. 0, or -1 when malformed (non-ASCII, bad label, a name
 * ending in a number that is not a valid IPv4 address...). */
int moat_host_parse(const char *s, size_t len, struct moat_host *out);
/* Strict numeric IPv4 parse (WHATWG URL rules): 1 to 4 parts, each decimal,
 * octal (leading 0) or hex (0x); the last part fills the remaining bytes. */
int moat_ipv4_parse_any(const char *s, size_t len, uint8_t out[4]);

/* Parses one allowedHosts entry; -1 with a SandboxPolicyError naming it. */
int moat_allow_parse_entry(const char *s, struct moat_allow_entry *out, struct moat_error *err);
/* Parses one allowedCidrs entry ("198.51.100.0/24", "fd00::/8"). */
int moat_cidr_parse(const char *s, struct moat_cidr *out, struct moat_error *err);
int moat_allowlist_build(const struct moat_request *req, struct moat_allowlist *out,
			 struct moat_error *err);
void moat_allowlist_free(struct moat_allowlist *al);
/* Does any entry allow scheme (https for CONNECT) + host + port? */
bool moat_allowlist_match(const struct moat_allowlist *al, bool https, const struct moat_host *h,
			  uint16_t port);
/* moat_allowlist_match, or why not ("https://h:443 is not in allowedHosts",
 * written into why). */
const char *moat_allowlist_refusal(const struct moat_allowlist *al, bool https,
				   const struct moat_host *h, uint16_t port, char *why,
				   size_t whylen);
/* The host a connection's first bytes name (moat_sniff_request's kind, name
 * and req): NULL with *h set (canonical, as moat_host_parse; an IPv6 Host
 * too), or why not (static, or written into why): neither TLS nor HTTP, an
 * HTTP head refused (req->refusal), TLS without SNI, HTTP without Host, a
 * malformed name. Pure: the transparent path and the proxy's tunnels. */
const char *moat_sniff_host(enum moat_sniff_kind kind, const char *name,
			    const struct moat_http_req *req, struct moat_host *h, char *why,
			    size_t whylen);

/* Why an address must not be reached from the sandbox ("loopback",
 * "private", "link-local", "cloud metadata", "6to4", "Teredo", ...), or
 * NULL when it is a public unicast address. An IPv6 form that carries an
 * IPv4 address is judged by that address first, then as a literal. */
const char *moat_addr_class(int family, const uint8_t *addr);
/* The IPv4 addresses an IPv6 address carries: IPv4-mapped, -compatible and
 * SIIT (::ffff:0:0:0/96) forms, NAT64 64:ff9b::/96, local-use NAT64
 * 64:ff9b:1::/48 (at every RFC 6052 position: the prefix length is the
 * operator's), 6to4 2002::/16, Teredo 2001::/32 (server and de-obfuscated
 * client) and an ISATAP interface id ([0-3]00:5efe:a.b.c.d) under any
 * prefix. Returns how many were written into v4 (at most MOAT_ADDR_EMBED_MAX). */
#define MOAT_ADDR_EMBED_MAX 6
size_t moat_addr_embedded(const uint8_t *a, uint8_t v4[][4]);

/* What the policy said about an address, for the refusal's text. */
struct moat_addr_verdict {
	const char *why;     /* static; NULL: allowed */
	int family;          /* the address, IPv4-mapped made IPv4 */
	uint8_t addr[16];
	int judged_family;   /* the address the reason is about: addr, or an */
	uint8_t judged[16];  /* IPv4 address addr carries */
};
/* The policy on one address: every IPv4 address it carries (moat_addr_embedded)
 * is judged as if it were the destination, then the address itself; each by
 * its class unless an allowedCidrs range (al, may be NULL) covers that very
 * address, then by host() (may be NULL; never excepted). The reason or
 * NULL; v (may be NULL) gets the details. */
const char *moat_addr_judge(const struct moat_allowlist *al, int family, const uint8_t *addr,
			    const char *(*host)(int family, const uint8_t *addr),
			    struct moat_addr_verdict *v);
/* moat_addr_judge without the host's addresses (pure). */
const char *moat_addr_refusal(const struct moat_allowlist *al, int family, const uint8_t *addr);
/* "private address 10.0.0.1", "host address 11.77.0.1 (carried in
 * 64:ff9b::b4d:1)": snprintf's result. */
int moat_addr_verdict_text(const struct moat_addr_verdict *v, char *out, size_t len);
/* An IPv4-mapped IPv6 address becomes the IPv4 address (in place). */
void moat_addr_unmap(int *family, uint8_t *addr);

/* ---- the host's own addresses (local.c) -------------------------------- */

/* "host address" when the host holds addr on one of its interfaces now, or
 * routes it locally (local, broadcast, multicast, anycast route types);
 * "host DNS resolver" when a nameserver line of /etc/resolv.conf names it;
 * NULL otherwise. Asked at connect time, never cached. */
#define MOAT_NET_RESOLV_CONF "/etc/resolv.conf"
const char *moat_addr_host_local(int family, const uint8_t *addr);
/* The one egress policy (allow.c): moat_addr_judge with moat_addr_host_local. With
 * text (may be NULL), the refusal's text (moat_addr_verdict_text) too. */
const char *moat_egress_refusal(const struct moat_allowlist *al, int family, const uint8_t *addr);
const char *moat_egress_refusal_text(const struct moat_allowlist *al, int family,
				     const uint8_t *addr, char *text, size_t len);
/* Does the host have IPv6 beyond loopback and link-local (what getaddrinfo's
 * AI_ADDRCONFIG asks)? true when it cannot tell. */
bool moat_host_has_ipv6(void);
/* Does any allowedHosts entry name this host, whatever its scheme or port? */
bool moat_allowlist_match_name(const struct moat_allowlist *al, const struct moat_host *h);

/* ---- resolution for the sandbox (resolve.c) ------------------------------ */

struct moat_dns_addr;
enum moat_resolve {
	MOAT_RESOLVE_OK,     /* addresses */
	MOAT_RESOLVE_NODATA, /* the name exists, no address of this family */
	MOAT_RESOLVE_NONAME, /* NXDOMAIN */
	MOAT_RESOLVE_FAIL    /* no answer, SERVFAIL, REFUSED, malformed */
};
/* The A (AF_INET) or AAAA (AF_INET6) records of exactly name, asked of the
 * host's DNS resolvers only: not /etc/hosts, no search domains. At most max
 * into addrs (*n). Blocks for at most the resolv.conf timeout x attempts x
 * servers, capped at 3 s x 2 tries per server. */
enum moat_resolve moat_resolve(const char *name, int family, struct moat_dns_addr *addrs,
			       size_t max, size_t *n);
/* What the DNS answerer's log and the proxy say of a name with no address a
 * sandbox may reach, whether it exists or not: the result goes to whoever
 * sent the code, and must not tell which names the host's network has. */
#define MOAT_NET_NO_NAME "no such name, or none of its addresses may be reached"

/* ---- the relays' sockets (relay.c) -------------------------------------- */

/* SO_SNDBUF and SO_RCVBUF of the sockets the supervisor connects out of the
 * host for a sandbox, fixed (the kernel doubles them): neither a peer that
 * never reads nor a program that never reads grows them to the host's
 * tcp_wmem / tcp_rmem maxima. Large while the relay's budget lasts (each
 * large socket holds 4 * LARGE of it: 1 MiB), small past it: a run's first
 * connections keep their speed, its 500th costs 64 KiB. */
#define MOAT_NET_OUT_SMALL 16384
#define MOAT_NET_OUT_LARGE 262144
#define MOAT_NET_OUT_BUDGET (8u << 20)
/* SO_RCVBUF of the relays' listening sockets inside (egress and proxy),
 * which their accepted connections inherit. */
#define MOAT_NET_RELAY_RCVBUF 8192
/* A non-blocking, close-on-exec TCP socket of family with those buffers,
 * charged to *used (a relay's budget); *charged: what to give back with
 * moat_net_out_release when it is closed. -1 with errno. */
int moat_net_out_socket(int family, _Atomic uint64_t *used, uint64_t *charged);
void moat_net_out_release(_Atomic uint64_t *used, uint64_t charged);
/* Closes a relayed connection with a reset (SO_LINGER {1, 0}): what it
 * still queued is dropped at once, nothing lingers as an orphan. */
void moat_net_reset_close(int fd);
/* A relayed connection (the transparent relay's, the proxy's) with no byte
 * moving either way for this long is reset and logged ("idle for N s").
 * 60 s; a run's relays end with the run anyway, so a shorter run needs no
 * shorter idle time. MOAT_TEST_RELAY_IDLE_MS overrides it (tests only). */
#define MOAT_NET_RELAY_IDLE_MS 60000
int64_t moat_net_relay_idle_ms(void);
/* The idle reason logged: "idle for N s: no byte either way, reset". */
void moat_net_idle_reason(int64_t idle_ms, char *out, size_t len);

/* ---- caps across runs (caps.c; the object is include/moat.h's) ---------- */

struct moat_relay_caps;
/* Another reference (NULL-safe: NULL). */
struct moat_relay_caps *moat_relay_caps_ref(struct moat_relay_caps *c);
/* A slot of kind k: true (always with NULL), or false when the cap is full
 * (counted as refused). Give each slot taken back once. */
bool moat_relay_caps_take(struct moat_relay_caps *c, int k);
void moat_relay_caps_give(struct moat_relay_caps *c, int k);
/* What a run's network log says of what the cap refused. */
#define MOAT_NET_CAPS_FULL "the service's relay cap is full"

/* ---- connection log (netlog.c) ------------------------------------------ */

struct moat_netlog;
enum moat_netlog_counter {
	MOAT_NETLOG_BYTES,     /* relayed, both ways, every path */
	MOAT_NETLOG_BUSY,      /* refused for a concurrency or total limit */
	MOAT_NETLOG_MALFORMED, /* malformed proxy requests or DNS queries */
	MOAT_NETLOG_DNS_RATE,  /* DNS questions past the run's rate, answered SERVFAIL */
	MOAT_NETLOG_COUNTERS
};
/* Reference counted: the threads of the egress paths each hold one, so a
 * thread still resolving a name when the run ends never sees it freed. */
struct moat_netlog *moat_netlog_new(void);
struct moat_netlog *moat_netlog_ref(struct moat_netlog *l);
void moat_netlog_unref(struct moat_netlog *l); /* NULL-safe */
/* A new entry (kind and method: static strings); its index, or -1 when the
 * log is full (the entry is then only counted). Every call below takes
 * -1 and does nothing. */
int moat_netlog_add(struct moat_netlog *l, const char *kind, const char *method,
		    const char *host, uint16_t port);
void moat_netlog_host(struct moat_netlog *l, int idx, const char *host, const char *address);
void moat_netlog_verdict(struct moat_netlog *l, int idx, bool allowed, const char *reason);
void moat_netlog_answers(struct moat_netlog *l, int idx, const char *answers);
void moat_netlog_bytes(struct moat_netlog *l, int idx, uint64_t sent, uint64_t received);
void moat_netlog_count(struct moat_netlog *l, enum moat_netlog_counter c, uint64_t n);
uint64_t moat_netlog_counter(struct moat_netlog *l, enum moat_netlog_counter c);
/* Appends ,"connections":[...] and the counters. */
void moat_netlog_render(struct moat_netlog *l, struct moat_buf *b);
void moat_netlog_addr_text(int family, const uint8_t *addr, char out[48]);

/* ---- transparent egress and DNS (egress.c) ------------------------------ */

struct moat_egress;
/* al: NULL for open egress ("network": true), else the allowlist (taken
 * over, *al emptied). log: one reference is taken. sock_fd: the
 * supervisor's end of the socketpair on which pid 1 passes its sockets
 * (owned, closed on failure too). */
/* caps: shared with other runs, or NULL (a reference is taken). */
int moat_egress_new(struct moat_allowlist *al, struct moat_netlog *log, int sock_fd,
		    struct moat_relay_caps *caps, struct moat_egress **out, struct moat_error *err);
int moat_egress_start(struct moat_egress *e, struct moat_error *err);
/* Stops every thread (bounded wait) and releases; NULL-safe. */
void moat_egress_stop(struct moat_egress *e);
/* Reads a connection's first bytes into buf (MOAT_SNIFF_MAX bytes; *len
 * already there) until moat_sniff_request decides (*kind, name, req), the
 * buffer is full (OTHER), deadline passes or stop_fd is readable (fd
 * non-blocking). NULL, or why it did not decide (static text). */
const char *moat_sniff_read(int fd, int stop_fd, uint8_t *buf, size_t *len, int64_t deadline,
			    char name[254], struct moat_http_req *req, enum moat_sniff_kind *kind);

/* ---- proxy (proxy.c) ------------------------------------------------------ */

/* The proxy's reading of one request head (pure: unit-tested and fuzzed). */
struct moat_proxy_header {
	const char *name, *value;
	size_t name_len, value_len;
};

struct moat_proxy_request {
	const char *method;
	size_t method_len;
	const char *target;
	size_t target_len;
	const char *version;          /* "HTTP/1.0" or "HTTP/1.1" (8 bytes) */
	struct moat_proxy_header *h;  /* malloc'd (free(h) whatever the verdict) */
	size_t nh;
	bool tunnel;                  /* CONNECT */
	bool logged;                  /* named a host: gets a log entry (host, port) */
	struct moat_host host;        /* valid when logged */
	uint16_t port;
	const char *path;             /* http: what follows the authority, no fragment */
	size_t path_len;
	uint64_t body;                /* http: Content-Length */
};

enum { MOAT_PROXY_OK = 0, MOAT_PROXY_BAD = 400, MOAT_PROXY_REFUSED = 403 };

/* Parses a request head (head_len bytes ending with the blank line's CRLF,
 * pointers into head) and applies the refusals that need no allowlist:
 * 400 for a malformed head (bare CR or LF, folded or malformed headers, bad
 * or conflicting Content-Length, an https:// or origin-form target, a bad
 * authority, HTTP/1.1 without Host), 403 for Transfer-Encoding, two Host
 * headers or a Host that differs from the URL's. Returns MOAT_PROXY_OK, or
 * the status with *reason (static text). The allowlist and the addresses are
 * checked after, by the caller. */
int moat_proxy_parse_request(const char *head, size_t head_len, struct moat_proxy_request *rq,
			     const char **reason);

/* A CONNECT tunnel's first bytes (moat_sniff_request's kind, name and req)
 * for the CONNECT target and port, already allowed as https: NULL when they
 * are TLS whose SNI names the target (none for an IP literal target), or
 * one plain HTTP request whose Host names it and that the allowlist allows
 * as http on that port; else why not (static, or written into why). *seen:
 * the host the bytes named (text "" when none). Pure: unit-tested, fuzzed. */
const char *moat_proxy_tunnel_refusal(const struct moat_allowlist *al,
				      const struct moat_host *target, uint16_t port,
				      enum moat_sniff_kind kind, const char *name,
				      const struct moat_http_req *req, struct moat_host *seen,
				      char *why, size_t whylen);

struct moat_proxy;

/* Takes ownership of *al (emptied) and one reference to log. sock_fd: the
 * supervisor's end of the socketpair over which the sandbox passes the
 * listening socket (owned). */
int moat_proxy_new(struct moat_allowlist *al, struct moat_netlog *log, int sock_fd,
		   struct moat_relay_caps *caps, struct moat_proxy **out, struct moat_error *err);
int moat_proxy_start(struct moat_proxy *p, struct moat_error *err);
/* Stops and releases the proxy (its entries stay in the log). */
void moat_proxy_stop(struct moat_proxy *p);

#endif
