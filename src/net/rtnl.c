/* The rtnetlink requests moat needs, built by hand: lo up (RTM_NEWLINK), a
 * default route through lo (RTM_NEWROUTE), both built in the supervisor and
 * only sent by pid 1 (which must not allocate), and a route lookup
 * (RTM_GETROUTE) for the supervisor's host-address check. Each carries
 * NLM_F_REQUEST | NLM_F_ACK and a sequence number equal to its offset + 1,
 * so an answer can be matched to it. */
#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

struct attr {
	uint16_t type;
	const void *data;
	size_t len;
};

/* Appends header + fixed body + attributes to *buf. */
static int append(uint8_t **buf, size_t *len, uint16_t type, uint16_t flags, const void *body,
		  size_t body_len, const struct attr *attrs, size_t nattrs)
{
	size_t msg_len = NLMSG_ALIGN(NLMSG_LENGTH(body_len));
	for (size_t i = 0; i < nattrs; i++)
		msg_len += RTA_ALIGN(RTA_LENGTH(attrs[i].len));
	size_t total = NLMSG_ALIGN(msg_len);
	uint8_t *nb = realloc(*buf, *len + total);
	if (!nb)
		return -1;
	uint8_t *m = nb + *len;
	memset(m, 0, total);
	struct nlmsghdr h = {
		.nlmsg_len = (uint32_t)msg_len,
		.nlmsg_type = type,
		.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | NLM_F_ACK | flags),
		.nlmsg_seq = (uint32_t)(*len + 1),
	};
	memcpy(m, &h, sizeof h);
	memcpy(m + NLMSG_HDRLEN, body, body_len);
	size_t at = NLMSG_ALIGN(NLMSG_LENGTH(body_len));
	for (size_t i = 0; i < nattrs; i++) {
		struct rtattr a = { .rta_len = (unsigned short)RTA_LENGTH(attrs[i].len),
				    .rta_type = attrs[i].type };
		memcpy(m + at, &a, sizeof a);
		memcpy(m + at + RTA_LENGTH(0), attrs[i].data, attrs[i].len);
		at += RTA_ALIGN(RTA_LENGTH(attrs[i].len));
	}
	*buf = nb;
	*len += total;
	return 0;
}

int moat_rtnl_link_up(uint8_t **buf, size_t *len, int ifindex)
{
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC, .ifi_index = ifindex,
			       .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
	return append(buf, len, RTM_NEWLINK, 0, &i, sizeof i, NULL, 0);
}

int moat_rtnl_default_route(uint8_t **buf, size_t *len, int family, int ifindex, const void *src)
{
	if (family != AF_INET && family != AF_INET6)
		return -1;
	struct rtmsg r = {
		.rtm_family = (unsigned char)family,
		.rtm_table = RT_TABLE_MAIN,
		.rtm_protocol = RTPROT_STATIC,
		.rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE,
		.rtm_type = RTN_UNICAST,
	};
	uint32_t oif = (uint32_t)ifindex;
	struct attr a[2] = { { RTA_OIF, &oif, sizeof oif },
			     { RTA_PREFSRC, src, family == AF_INET ? 4 : 16 } };
	return append(buf, len, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &r, sizeof r, a,
		      src ? 2 : 1);
}

int moat_rtnl_get_route(uint8_t **buf, size_t *len, int family, const void *dst, uid_t uid)
{
	if (family != AF_INET && family != AF_INET6)
		return -1;
	size_t alen = family == AF_INET ? 4 : 16;
	struct rtmsg r = { .rtm_family = (unsigned char)family,
			   .rtm_dst_len = (unsigned char)(alen * 8) };
	uint32_t u = (uint32_t)uid;
	struct attr a[2] = { { RTA_DST, dst, alen }, { RTA_UID, &u, sizeof u } };
	return append(buf, len, RTM_GETROUTE, 0, &r, sizeof r, a, 2);
}
