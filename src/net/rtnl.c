/* The rtnetlink requests moat needs: lo up (RTM_NEWLINK), a default route
 * through lo (RTM_NEWROUTE), both built in the supervisor and only sent by
 * pid 1 (which must not allocate), and a route lookup (RTM_GETROUTE) for the
 * supervisor's host-address check. Built with libnl-3's core (messages and
 * attributes: its alignment, padding and length rules, not moat's), then
 * copied into one flat buffer, so the child sends bytes and links nothing.
 * Each carries NLM_F_REQUEST | NLM_F_ACK and a sequence number equal to its
 * offset + 1, so an answer can be matched to it. libnl-3 only: libnl-route's
 * constructors (its caches and object types) cost 0.26 ms of every run. */
#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/utils.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/internal.h"

/* libnl-3's constructor sets its debug level from $NLDBG, and a level
 * above 1 prints every message's heap address to moat's stderr (the
 * caller's, or moat serve's log): moat's output stays moat's. */
static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet(void)
{
	nl_debug = 0;
}

/* A request of type with flags and a fixed body; NULL when out of memory. */
static struct nl_msg *start(int type, int flags, const void *body, size_t body_len)
{
	pthread_once(&quiet_once, quiet);
	struct nl_msg *m = nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_ACK | flags);
	if (m && nlmsg_append(m, (void *)body, body_len, NLMSG_ALIGNTO) < 0) {
		nlmsg_free(m);
		return NULL;
	}
	return m;
}

/* Appends m (freed) to *buf with its sequence number; 0 or -1. */
static int finish(uint8_t **buf, size_t *len, struct nl_msg *m, int attr_rc)
{
	if (!m)
		return -1;
	if (attr_rc < 0) {
		nlmsg_free(m);
		return -1;
	}
	struct nlmsghdr *h = nlmsg_hdr(m);
	h->nlmsg_seq = (uint32_t)(*len + 1);
	size_t total = NLMSG_ALIGN(h->nlmsg_len);
	uint8_t *nb = realloc(*buf, *len + total);
	if (!nb) {
		nlmsg_free(m);
		return -1;
	}
	memset(nb + *len, 0, total);
	memcpy(nb + *len, h, h->nlmsg_len);
	*buf = nb;
	*len += total;
	nlmsg_free(m);
	return 0;
}

int moat_rtnl_link_up(uint8_t **buf, size_t *len, int ifindex)
{
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC, .ifi_index = ifindex,
			       .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
	return finish(buf, len, start(RTM_NEWLINK, 0, &i, sizeof i), 0);
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
	struct nl_msg *m = start(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &r, sizeof r);
	int rc = m ? nla_put_u32(m, RTA_OIF, (uint32_t)ifindex) : 0;
	if (m && rc >= 0 && src)
		rc = nla_put(m, RTA_PREFSRC, family == AF_INET ? 4 : 16, src);
	return finish(buf, len, m, rc);
}

int moat_rtnl_get_route(uint8_t **buf, size_t *len, int family, const void *dst, uid_t uid)
{
	if (family != AF_INET && family != AF_INET6)
		return -1;
	int alen = family == AF_INET ? 4 : 16;
	struct rtmsg r = { .rtm_family = (unsigned char)family,
			   .rtm_dst_len = (unsigned char)(alen * 8) };
	struct nl_msg *m = start(RTM_GETROUTE, 0, &r, sizeof r);
	int rc = m ? nla_put(m, RTA_DST, alen, dst) : 0;
	if (m && rc >= 0)
		rc = nla_put_u32(m, RTA_UID, (uint32_t)uid);
	return finish(buf, len, m, rc);
}
