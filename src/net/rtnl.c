/* The two rtnetlink requests a run needs, built by hand: lo up (RTM_NEWLINK)
 * and a prohibit route to one address (RTM_NEWROUTE). They are built in the
 * supervisor, back to back in one buffer, and only sent by pid 1 (which
 * must not allocate). Each carries NLM_F_REQUEST | NLM_F_ACK and a sequence
 * number equal to its offset + 1, so an answer can be matched to it. */
#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

/* Appends header + fixed body (+ one attribute) to *buf. */
static int append(uint8_t **buf, size_t *len, uint16_t type, uint16_t flags, const void *body,
		  size_t body_len, uint16_t attr, const void *attr_data, size_t attr_len)
{
	size_t msg_len = NLMSG_LENGTH(body_len);
	size_t attr_at = NLMSG_ALIGN(msg_len);
	if (attr_data)
		msg_len = attr_at + RTA_LENGTH(attr_len);
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
	if (attr_data) {
		struct rtattr a = { .rta_len = (unsigned short)RTA_LENGTH(attr_len), .rta_type = attr };
		memcpy(m + attr_at, &a, sizeof a);
		memcpy(m + attr_at + RTA_LENGTH(0), attr_data, attr_len);
	}
	*buf = nb;
	*len += total;
	return 0;
}

int moat_rtnl_link_up(uint8_t **buf, size_t *len, int ifindex)
{
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC, .ifi_index = ifindex,
			       .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
	return append(buf, len, RTM_NEWLINK, 0, &i, sizeof i, 0, NULL, 0);
}

int moat_rtnl_prohibit(uint8_t **buf, size_t *len, int family, const void *addr)
{
	if (family != AF_INET && family != AF_INET6)
		return -1;
	size_t alen = family == AF_INET ? 4 : 16;
	struct rtmsg r = {
		.rtm_family = (unsigned char)family,
		.rtm_dst_len = (unsigned char)(alen * 8),
		.rtm_table = RT_TABLE_MAIN,
		.rtm_protocol = RTPROT_STATIC,
		.rtm_scope = RT_SCOPE_UNIVERSE,
		.rtm_type = RTN_PROHIBIT,
	};
	return append(buf, len, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &r, sizeof r, RTA_DST,
		      addr, alen);
}
