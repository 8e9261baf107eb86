/* The host's own addresses, asked at connect time: an address on any host
 * interface (getifaddrs), or one the kernel would deliver locally (a route
 * lookup answering local, broadcast, anycast or multicast) is never
 * connected to for a sandbox, whatever its class. Nothing is cached: an
 * address added after the run started (a VPN, a container bridge) counts. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/internal.h"

static bool on_an_interface(int family, const uint8_t *addr)
{
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return true; /* cannot tell: treat as the host's */
	bool found = false;
	for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != family)
			continue;
		const void *a = family == AF_INET
			? (const void *)&((const struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr
			: (const void *)&((const struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
		found = !memcmp(a, addr, family == AF_INET ? 4 : 16);
	}
	freeifaddrs(ifa);
	return found;
}

/* The type of the route the kernel picks for addr (RTN_*), or -1 when
 * there is none (unreachable: nothing to reach either). */
static int route_type(int family, const uint8_t *addr)
{
	uint8_t *req = NULL;
	size_t len = 0;
	if (moat_rtnl_get_route(&req, &len, family, addr, getuid()) < 0)
		return RTN_LOCAL; /* out of memory: fail closed */
	int type = RTN_LOCAL;
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (s < 0)
		goto out;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	struct timeval tv = { .tv_sec = 2 };
	(void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (sendto(s, req, len, 0, (struct sockaddr *)&kernel, sizeof kernel) != (ssize_t)len)
		goto out;
	union {
		struct nlmsghdr h;
		char b[8192];
	} ans;
	for (;;) {
		ssize_t n = recv(s, &ans, sizeof ans, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		for (struct nlmsghdr *h = &ans.h; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != 1)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				if (e->error == -ENETUNREACH || e->error == -EHOSTUNREACH)
					type = -1; /* no route at all */
				if (e->error != 0 || type == -1)
					goto out;
				continue; /* the ack after the answer */
			}
			if (h->nlmsg_type == RTM_NEWROUTE &&
			    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct rtmsg))) {
				type = ((const struct rtmsg *)NLMSG_DATA(h))->rtm_type;
				goto out;
			}
		}
	}
out:
	if (s >= 0)
		close(s);
	free(req);
	return type;
}

/* Is addr a nameserver of the host's /etc/resolv.conf, read now (every
 * line, not only the three glibc uses)? */
static bool host_resolver(int family, const uint8_t *addr)
{
	FILE *f = fopen(MOAT_NET_RESOLV_CONF, "re");
	if (!f)
		return false; /* glibc then asks 127.0.0.1: loopback anyway */
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	for (unsigned k = 0; !found && k < 4096 && getline(&line, &cap, f) > 0; k++) {
		char *p = line + strspn(line, " \t");
		if (strncmp(p, "nameserver", 10) || !strchr(" \t", p[10]) || !p[10])
			continue;
		p += 10 + strspn(p + 10, " \t");
		p[strcspn(p, " \t\r\n#;%")] = '\0';
		uint8_t a[16];
		if (family == AF_INET)
			found = inet_pton(AF_INET, p, a) == 1 && !memcmp(a, addr, 4);
		else
			found = inet_pton(AF_INET6, p, a) == 1 && !memcmp(a, addr, 16);
	}
	free(line);
	fclose(f);
	return found;
}

const char *moat_addr_host_local(int family, const uint8_t *addr)
{
	if (family != AF_INET && family != AF_INET6)
		return "not an IP address";
	if (on_an_interface(family, addr))
		return "host address";
	switch (route_type(family, addr)) {
	case RTN_LOCAL:
	case RTN_BROADCAST:
	case RTN_ANYCAST:
	case RTN_MULTICAST:
		return "host address";
	default:
		break;
	}
	/* its DNS over TCP (port 53) is moat's answer; every other port (DNS
	 * over TLS on 853, HTTPS, a directory server's) is the host's network */
	if (host_resolver(family, addr))
		return "host DNS resolver";
	return NULL;
}

bool moat_host_has_ipv6(void)
{
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return true; /* cannot tell: answer as before */
	bool found = false;
	for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		const struct in6_addr *a = &((const struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
		found = !IN6_IS_ADDR_LINKLOCAL(a) && !IN6_IS_ADDR_LOOPBACK(a);
	}
	freeifaddrs(ifa);
	return found;
}
