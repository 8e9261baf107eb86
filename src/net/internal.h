/* net internals shared by net.c (modes), allow.c (allowlist grammar and the
 * address rules), proxy.c (the allowlist proxy) and stack.c (pasta,
 * slirp4netns). Unit tests include this header too. */
#ifndef MOAT_NET_INTERNAL_H
#define MOAT_NET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/core.h"
#include "net/net.h"

/* ---- rtnetlink requests (rtnl.c) ----------------------------------------- */

/* Append one request to *buf (realloc'd; *len grows by its aligned size):
 * set interface ifindex up, or add a prohibit route to one host address
 * (family AF_INET or AF_INET6, addr 4 or 16 bytes). 0, or -1 (ENOMEM, bad
 * family) with *buf and *len unchanged. */
int moat_rtnl_link_up(uint8_t **buf, size_t *len, int ifindex);
int moat_rtnl_prohibit(uint8_t **buf, size_t *len, int family, const void *addr);

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

/* Why an address must not be reached from the sandbox ("loopback",
 * "private", "link-local", "cloud metadata", ...), or NULL when it is a
 * public unicast address. IPv4-mapped, NAT64 and 6to4 IPv6 addresses are
 * judged by the IPv4 address they carry. */
const char *moat_addr_class(int family, const uint8_t *addr);
/* moat_addr_class, unless an allowedCidrs range covers the address. */
const char *moat_addr_refusal(const struct moat_allowlist *al, int family, const uint8_t *addr);
/* An IPv4-mapped IPv6 address becomes the IPv4 address (in place). */
void moat_addr_unmap(int *family, uint8_t *addr);

/* ---- proxy (proxy.c) ------------------------------------------------------ */

struct moat_proxy;

/* Takes ownership of *al (emptied). sock_fd: the supervisor's end of the
 * socketpair over which the sandbox passes the listening socket (owned). */
int moat_proxy_new(struct moat_allowlist *al, int sock_fd, struct moat_proxy **out,
		   struct moat_error *err);
int moat_proxy_start(struct moat_proxy *p, struct moat_error *err);
/* Stops and releases the proxy; appends the connection log as JSON
 * ("connections":[...]) to b when b is not NULL. */
void moat_proxy_stop(struct moat_proxy *p, struct moat_buf *b);

/* ---- user-mode stack (stack.c) ------------------------------------------ */

enum moat_stack_kind { MOAT_STACK_PASTA, MOAT_STACK_SLIRP4NETNS };

struct moat_stack {
	enum moat_stack_kind kind;
	char *path;        /* the executable */
	char **argv;       /* built in prepare; "/proc/self/fd/3" is the netns */
	pid_t pid;
	int pidfd;
	int devnull;
};

/* Finds the tool (pasta first; $MOAT_NET_STACK may name one) and builds its
 * argv. SandboxUnavailableError naming the Debian packages when none. */
int moat_stack_prepare(struct moat_stack *s, struct moat_error *err);
/* Starts the tool in the sandbox's network namespace and waits until it has
 * configured it. */
int moat_stack_attach(struct moat_stack *s, pid_t child, bool as_root, struct moat_error *err);
void moat_stack_stop(struct moat_stack *s);
const char *moat_stack_name(const struct moat_stack *s);
const char *moat_stack_resolv_conf(const struct moat_stack *s);

#endif
