/* Network modes.
 *  none       a fresh network namespace with only lo, up (the default);
 *  egress     "network": true: pasta (or slirp4netns) gives the namespace a
 *             user-mode uplink; the host's own addresses and cloud metadata
 *             are made unreachable with prohibit routes inside;
 *  allowlist  "allowedHosts": only lo; the program reaches the network
 *             through moat's HTTP/HTTPS proxy, whose listening socket pid 1
 *             opens on 127.0.0.1 inside and passes to the supervisor.
 *
 * Netlink requests (lo up, prohibit routes; rtnl.c) are built in the
 * supervisor and only sent by pid 1, which must not allocate. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


#include "net/internal.h"

enum net_mode { NET_NONE, NET_EGRESS, NET_ALLOWLIST };

struct moat_net {
	enum net_mode mode;
	uint8_t *nl;          /* netlink requests for pid 1, back to back */
	size_t nl_len;
	int child_fd, sup_fd; /* allowlist: the socketpair for the listening socket */
	struct moat_allowlist al;
	struct moat_proxy *proxy;
	struct moat_stack stack;
	bool stack_ready;
};

static char *const PROXY_ENV[] = {
	"HTTP_PROXY=" MOAT_NET_PROXY_URL, "HTTPS_PROXY=" MOAT_NET_PROXY_URL,
	"http_proxy=" MOAT_NET_PROXY_URL, "https_proxy=" MOAT_NET_PROXY_URL,
	"ALL_PROXY=" MOAT_NET_PROXY_URL, "all_proxy=" MOAT_NET_PROXY_URL,
	"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1", NULL,
};

/* ---- netlink requests (supervisor side) ---- */

static int add_lo_up(struct moat_net *net)
{
	return moat_rtnl_link_up(&net->nl, &net->nl_len, 1); /* lo is 1 in a new namespace */
}

static int add_prohibit(struct moat_net *net, int family, const void *addr)
{
	return moat_rtnl_prohibit(&net->nl, &net->nl_len, family, addr);
}

/* Egress: every address of the host (its loopback is already the sandbox's
 * own lo) and the cloud metadata service become unreachable inside. */
static int add_host_blocks(struct moat_net *net, struct moat_error *err)
{
	static const uint8_t meta4[4] = { 169, 254, 169, 254 };
	static const uint8_t meta6[16] = { 0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54 };
	if (add_prohibit(net, AF_INET, meta4) < 0 || add_prohibit(net, AF_INET6, meta6) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "cannot list the host's addresses (getifaddrs: %s)",
				      strerror(errno));
	int rc = 0;
	for (struct ifaddrs *i = ifa; i && rc == 0; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			const struct in_addr *a = &((const struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
			if ((ntohl(a->s_addr) >> 24) == 127)
				continue;
			rc = add_prohibit(net, AF_INET, a);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			const struct in6_addr *a = &((const struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
			/* link-local addresses are only reachable on their own link */
			if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a))
				continue;
			rc = add_prohibit(net, AF_INET6, a);
		}
	}
	freeifaddrs(ifa);
	if (rc < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
	return 0;
}

/* ---- the interface ---- */

int moat_net_prepare(const struct moat_request *req, struct moat_net **out,
		     struct moat_error *err)
{
	*out = NULL;
	if (moat_net_validate(req, err) < 0)
		return -1;
	struct moat_net *net = calloc(1, sizeof *net);
	if (!net)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
	net->child_fd = net->sup_fd = -1;
	net->stack.pid = -1;
	net->stack.pidfd = net->stack.devnull = -1;
	net->mode = req->network ? NET_EGRESS : req->has_allowed_hosts ? NET_ALLOWLIST : NET_NONE;
	if (add_lo_up(net) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM,
			       "cannot build the netlink request for lo");
		goto fail;
	}
	if (net->mode == NET_EGRESS) {
		if (moat_stack_prepare(&net->stack, err) < 0 || add_host_blocks(net, err) < 0)
			goto fail;
	} else if (net->mode == NET_ALLOWLIST) {
		int sv[2];
		if (moat_allowlist_build(req, &net->al, err) < 0)
			goto fail;
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				       strerror(errno));
			goto fail;
		}
		net->sup_fd = sv[0];
		net->child_fd = sv[1];
	}
	*out = net;
	return 0;
fail:
	moat_net_finish(net, NULL);
	return -1;
}

char *const *moat_net_env(const struct moat_net *net)
{
	return net && net->mode == NET_ALLOWLIST ? PROXY_ENV : NULL;
}

const char *moat_net_resolv_conf(const struct moat_net *net)
{
	return net && net->mode == NET_EGRESS ? moat_stack_resolv_conf(&net->stack) : NULL;
}

int moat_net_child_fd(const struct moat_net *net)
{
	return net ? net->child_fd : -1;
}

/* Sends each prepared request and checks its acknowledgement. */
static int send_netlink(const struct moat_net *net)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (s < 0)
		return -1;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	size_t off = 0;
	int rc = 0;
	while (rc == 0 && off < net->nl_len) {
		const struct nlmsghdr *h = (const struct nlmsghdr *)(const void *)(net->nl + off);
		ssize_t n;
		do
			n = sendto(s, h, h->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			rc = -1;
			break;
		}
		/* the kernel's answer: one NLMSG_ERROR (error 0 = ack) */
		union {
			struct nlmsghdr h;
			char b[4096];
		} ans;
		for (;;) {
			n = recv(s, &ans, sizeof ans, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
				if (n >= 0)
					errno = EPROTO;
				rc = -1;
				break;
			}
			if (ans.h.nlmsg_seq != h->nlmsg_seq || ans.h.nlmsg_type != NLMSG_ERROR)
				continue;
			const struct nlmsgerr *e = NLMSG_DATA(&ans.h);
			if (e->error != 0) {
				const struct rtmsg *rtm = NLMSG_DATA(h);
				/* a kernel without IPv6 has no IPv6 traffic to block */
				if (!(e->error == -EAFNOSUPPORT && h->nlmsg_type == RTM_NEWROUTE &&
				      rtm->rtm_family == AF_INET6)) {
					errno = -e->error;
					rc = -1;
				}
			}
			break;
		}
		off += NLMSG_ALIGN(h->nlmsg_len);
	}
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

/* Allowlist: the proxy's listening socket, opened here in the sandbox's
 * namespace and handed to the supervisor. */
static int pass_listener(const struct moat_net *net)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(MOAT_NET_PROXY_PORT),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int rc = -1;
	if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
	    bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(s, 128) == 0) {
		char byte = 'L';
		struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} ctl;
		memset(&ctl, 0, sizeof ctl);
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				     .msg_controllen = sizeof ctl.b };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &s, sizeof s);
		ssize_t n;
		do
			n = sendmsg(net->child_fd, &mh, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		rc = n == 1 ? 0 : -1;
	}
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

int moat_net_child_setup(const struct moat_net *net)
{
	if (send_netlink(net) < 0)
		return -1;
	if (net->mode == NET_ALLOWLIST && pass_listener(net) < 0)
		return -1;
	return 0;
}

int moat_net_attach(struct moat_net *net, pid_t child, struct moat_error *err)
{
	if (net->child_fd >= 0) {
		close(net->child_fd); /* the child has its copy */
		net->child_fd = -1;
	}
	if (net->mode == NET_EGRESS) {
		if (moat_stack_attach(&net->stack, child, geteuid() == 0, err) < 0)
			return -1;
		net->stack_ready = true;
	}
	return 0;
}

int moat_net_start(struct moat_net *net, struct moat_error *err)
{
	if (net->mode != NET_ALLOWLIST)
		return 0;
	if (moat_proxy_new(&net->al, net->sup_fd, &net->proxy, err) < 0)
		return -1;
	net->sup_fd = -1; /* owned by the proxy now */
	return moat_proxy_start(net->proxy, err);
}

void moat_net_finish(struct moat_net *net, struct moat_result *res)
{
	if (!net)
		return;
	struct moat_buf b = { 0 };
	bool render = res && !res->network_json;
	if (render) {
		static const char *const names[] = { "none", "egress", "allowlist" };
		moat_buf_appendf(&b, "{\"mode\":\"%s\"", names[net->mode]);
		if (net->mode == NET_EGRESS)
			moat_buf_appendf(&b, ",\"stack\":\"%s\"", moat_stack_name(&net->stack));
		if (net->mode == NET_ALLOWLIST && !net->proxy)
			moat_buf_appendf(&b, ",\"connections\":[]");
	}
	if (net->proxy)
		moat_proxy_stop(net->proxy, render ? &b : NULL);
	moat_stack_stop(&net->stack);
	if (render) {
		moat_buf_append(&b, "}", 1);
		res->network_json = moat_buf_take(&b);
	}
	moat_buf_free(&b);
	if (net->child_fd >= 0)
		close(net->child_fd);
	if (net->sup_fd >= 0)
		close(net->sup_fd);
	moat_allowlist_free(&net->al);
	free(net->nl);
	free(net);
}
