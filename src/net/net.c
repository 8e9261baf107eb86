/* Network modes. Every mode starts from a fresh network namespace whose only
 * interface is lo; nothing ever gets a second one.
 *  none       lo, up (the default);
 *  egress     "network": true: lo plus default routes through it, and the
 *             nftables table of net/nft.h: every TCP connection and DNS
 *             query ends in the supervisor (egress.c), which applies the one
 *             address policy and only then connects from the host;
 *  allowlist  "allowedHosts": the same, with the allowlist's names as the
 *             policy, plus the explicit HTTP/HTTPS proxy on 127.0.0.1:3128
 *             (proxy.c) for programs that honour HTTP_PROXY.
 *
 * The rtnetlink requests (rtnl.c) are built in the supervisor and the
 * nftables batch at build time (tools/nftgen.c); pid 1 only sends them,
 * opens the sockets the supervisor serves and passes them out, all before
 * the program exists and while it still holds CAP_NET_ADMIN in its user
 * namespace. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sys.h"
#include "net/internal.h"
#include "net/nft.h"

enum net_mode { NET_NONE, NET_EGRESS, NET_ALLOWLIST };

struct moat_net {
	enum net_mode mode;
	uint8_t *nl;               /* rtnetlink requests for pid 1, back to back */
	size_t nl_len;
	int eg_child, eg_sup;      /* socketpair: pid 1's egress sockets */
	int px_child, px_sup;      /* allowlist: the proxy's listening socket */
	struct moat_allowlist al;  /* allowlist: the egress relay's copy */
	struct moat_allowlist pal; /* allowlist: the proxy's copy */
	struct moat_netlog *log;
	struct moat_egress *egress;
	struct moat_proxy *proxy;
	char *cidrs_json;          /* "allowedCidrs" as given, reported with the result */
	size_t cidr_count;
};

static char *const PROXY_ENV[] = {
	"HTTP_PROXY=" MOAT_NET_PROXY_URL, "HTTPS_PROXY=" MOAT_NET_PROXY_URL,
	"http_proxy=" MOAT_NET_PROXY_URL, "https_proxy=" MOAT_NET_PROXY_URL,
	"ALL_PROXY=" MOAT_NET_PROXY_URL, "all_proxy=" MOAT_NET_PROXY_URL,
	"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1", NULL,
};

static const char RESOLV_CONF[] = "nameserver 127.0.0.1\n";

static int pair(int *child, int *sup, struct moat_error *err)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				      strerror(errno));
	*sup = sv[0];
	*child = sv[1];
	return 0;
}

int moat_net_prepare(const struct moat_request *req, struct moat_net **out,
		     struct moat_error *err)
{
	*out = NULL;
	if (moat_net_validate(req, err) < 0)
		return -1;
	struct moat_net *net = calloc(1, sizeof *net);
	if (!net)
		return moat_error_oom(err);
	net->eg_child = net->eg_sup = net->px_child = net->px_sup = -1;
	net->mode = req->network ? NET_EGRESS : req->has_allowed_hosts ? NET_ALLOWLIST : NET_NONE;
	static const uint8_t lo4[4] = { 127, 0, 0, 1 };
	/* lo is interface 1 in a new namespace */
	if (moat_rtnl_link_up(&net->nl, &net->nl_len, 1) < 0 ||
	    (net->mode != NET_NONE &&
	     (moat_rtnl_default_route(&net->nl, &net->nl_len, AF_INET, 1, lo4) < 0 ||
	      moat_rtnl_default_route(&net->nl, &net->nl_len, AF_INET6, 1, NULL) < 0))) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM,
			       "cannot build the netlink requests for lo");
		goto fail;
	}
	if (net->mode == NET_NONE) {
		*out = net;
		return 0;
	}
	if (!(net->log = moat_netlog_new())) {
		moat_error_oom(err);
		goto fail;
	}
	if (pair(&net->eg_child, &net->eg_sup, err) < 0)
		goto fail;
	if (req->allowed_cidrs_count) {
		struct moat_buf b = { 0 };
		for (size_t i = 0; i < req->allowed_cidrs_count; i++) {
			moat_buf_append(&b, i ? "," : "[", 1);
			moat_buf_append_json_string(&b, req->allowed_cidrs[i], strlen(req->allowed_cidrs[i]));
		}
		moat_buf_append(&b, "]", 1);
		net->cidrs_json = moat_buf_take(&b);
		moat_buf_free(&b);
		net->cidr_count = req->allowed_cidrs_count;
		if (!net->cidrs_json) {
			moat_error_oom(err);
			goto fail;
		}
	}
	if (net->mode == NET_ALLOWLIST &&
	    (moat_allowlist_build(req, &net->al, err) < 0 ||
	     moat_allowlist_build(req, &net->pal, err) < 0 ||
	     pair(&net->px_child, &net->px_sup, err) < 0))
		goto fail;
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
	return net && net->mode != NET_NONE ? RESOLV_CONF : NULL;
}

size_t moat_net_child_fds(const struct moat_net *net, int fds[2])
{
	size_t n = 0;
	if (net && net->eg_child >= 0)
		fds[n++] = net->eg_child;
	if (net && net->px_child >= 0)
		fds[n++] = net->px_child;
	return n;
}

/* ---- pid 1: system calls only ---- */

/* Sends len bytes of netlink messages in one datagram over a new socket of
 * protocol proto and reads answers until acks acknowledgements came. An
 * error answer fails, except a route for IPv6 on a kernel without it. */
static int transact(int proto, const void *msgs, size_t len, unsigned acks)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);
	if (s < 0)
		return -1;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int rc = 0;
	ssize_t n;
	do
		n = sendto(s, msgs, len, 0, (struct sockaddr *)&kernel, sizeof kernel);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)len) {
		rc = -1;
		goto out;
	}
	union {
		struct nlmsghdr h;
		char b[8192];
	} ans;
	while (rc == 0 && acks) {
		n = recv(s, &ans, sizeof ans, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EPROTO;
			rc = -1;
			break;
		}
		for (struct nlmsghdr *h = &ans.h; rc == 0 && NLMSG_OK(h, (size_t)n);
		     h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type != NLMSG_ERROR ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
				continue;
			const struct nlmsgerr *e = NLMSG_DATA(h);
			acks--;
			if (e->error == 0)
				continue;
			/* a kernel without IPv6 has no IPv6 traffic to route */
			if (e->error == -EAFNOSUPPORT && proto == NETLINK_ROUTE &&
			    e->msg.nlmsg_type == RTM_NEWROUTE)
				continue;
			errno = -e->error;
			rc = -1;
		}
	}
out:;
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

static unsigned count_messages(const uint8_t *buf, size_t len)
{
	unsigned n = 0;
	for (size_t off = 0; off + NLMSG_HDRLEN <= len;) {
		const struct nlmsghdr *h = (const struct nlmsghdr *)(const void *)(buf + off);
		off += NLMSG_ALIGN(h->nlmsg_len);
		n++;
	}
	return n;
}

/* A socket bound to the loopback address of family on port. */
static int bound(int family, int type, uint16_t port)
{
	int s = socket(family, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int one = 1;
	int rc;
	if (family == AF_INET) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		rc = bind(s, (struct sockaddr *)&sa, sizeof sa);
	} else {
		struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(port),
					   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
		rc = setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
		if (rc == 0)
			rc = bind(s, (struct sockaddr *)&sa, sizeof sa);
	}
	/* the relays' ends inside: small receive buffers (accepted sockets
	 * inherit them), so a connection the relay cannot pass on holds
	 * little in the supervisor's socket */
	int rcv = MOAT_NET_RELAY_RCVBUF;
	if (rc == 0 && type == SOCK_STREAM)
		rc = setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	if (rc == 0 && type == SOCK_STREAM)
		rc = listen(s, 4096);
	if (rc < 0) {
		int saved = errno;
		close(s);
		errno = saved;
		return -1;
	}
	return s;
}

/* Passes fds (with one data byte) over sock. */
static int pass(int sock, uint8_t byte, const int *fds, size_t n)
{
	return moat_send_fds(sock, &byte, 1, fds, n);
}

/* The egress sockets, in egress.c's order (TCP v4, v6, UDP v4, v6); an
 * IPv6 socket is left out (its bit clear) on a kernel without IPv6. */
static int pass_egress(const struct moat_net *net)
{
	static const struct { int family, type; uint16_t port; } want[4] = {
		{ AF_INET, SOCK_STREAM, MOAT_NET_EGRESS_PORT },
		{ AF_INET6, SOCK_STREAM, MOAT_NET_EGRESS_PORT },
		{ AF_INET, SOCK_DGRAM, MOAT_NET_DNS_PORT },
		{ AF_INET6, SOCK_DGRAM, MOAT_NET_DNS_PORT },
	};
	int fds[4];
	size_t n = 0;
	uint8_t mask = 0;
	int rc = 0;
	for (int i = 0; i < 4 && rc == 0; i++) {
		int s = bound(want[i].family, want[i].type, want[i].port);
		if (s < 0 && want[i].family == AF_INET6 && errno == EAFNOSUPPORT)
			continue;
		if (s < 0) {
			rc = -1;
			break;
		}
		fds[n++] = s;
		mask |= (uint8_t)(1u << i);
	}
	if (rc == 0)
		rc = pass(net->eg_child, mask, fds, n);
	int saved = errno;
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	errno = saved;
	return rc;
}

static int pass_proxy(const struct moat_net *net)
{
	int s = bound(AF_INET, SOCK_STREAM, MOAT_NET_PROXY_PORT);
	if (s < 0)
		return -1;
	int rc = pass(net->px_child, 'L', &s, 1);
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

/* Writes text to /proc/sys/<path>. */
static int sysctl_write(const char *path, const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n;
	do
		n = write(fd, text, len);
	while (n < 0 && errno == EINTR);
	int saved = errno;
	close(fd);
	if (n != (ssize_t)len) {
		errno = n < 0 ? saved : EIO;
		return -1;
	}
	return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

int moat_net_child_sysctls(int *step)
{
	/* minimum, default (a new socket's), maximum (autotuning's ceiling) */
	static const char rmem[] = "4096 16384 " STR(MOAT_NET_TCP_RMEM_MAX) "\n";
	static const char wmem[] = "4096 16384 " STR(MOAT_NET_TCP_WMEM_MAX) "\n";
	static const char somaxconn[] = "1024\n";
	*step = MOAT_NET_STEP_SYSCTL;
	if (sysctl_write("/proc/sys/net/ipv4/tcp_rmem", rmem, sizeof rmem - 1) < 0 ||
	    sysctl_write("/proc/sys/net/ipv4/tcp_wmem", wmem, sizeof wmem - 1) < 0)
		return -1;
	/* before Linux 6.x a namespace owned by another user namespace than
	 * the host's has no net.core.somaxconn (Debian 12's 6.1): a backlog
	 * then keeps the kernel's own cap; the buffers above are the bound */
	if (sysctl_write("/proc/sys/net/core/somaxconn", somaxconn, sizeof somaxconn - 1) < 0 &&
	    errno != ENOENT)
		return -1;
	return 0;
}

int moat_net_child_setup(const struct moat_net *net, int *step)
{
	*step = MOAT_NET_STEP_LINK;
	if (transact(NETLINK_ROUTE, net->nl, net->nl_len, count_messages(net->nl, net->nl_len)) < 0)
		return -1;
	if (net->mode == NET_NONE)
		return 0;
	*step = MOAT_NET_STEP_NFT;
	if (transact(NETLINK_NETFILTER, moat_nft_batch, moat_nft_batch_len, moat_nft_batch_acks) < 0)
		return -1;
	*step = MOAT_NET_STEP_SOCKETS;
	if (pass_egress(net) < 0 || (net->mode == NET_ALLOWLIST && pass_proxy(net) < 0))
		return -1;
	return 0;
}

int moat_net_setup_error(int step, int errnum, struct moat_error *err)
{
	if (step == MOAT_NET_STEP_NFT)
		return moat_error_set(
			err, MOAT_ERR_UNAVAILABLE, errnum,
			"network egress needs nftables with NAT inside an unprivileged user "
			"namespace, and installing moat's rules failed: %s. Use a kernel with "
			"CONFIG_NF_TABLES, CONFIG_NF_TABLES_INET, CONFIG_NFT_NAT, CONFIG_NFT_REDIR "
			"and CONFIG_NF_CONNTRACK (built in or loaded: `modprobe nft_redir nft_chain_nat`), "
			"or run without \"network\"/\"allowedHosts\"; `moat doctor` checks this",
			strerror(errnum));
	if (step == MOAT_NET_STEP_SYSCTL)
		return moat_error_set(
			err, MOAT_ERR_UNAVAILABLE, errnum,
			"sandbox setup failed while setting the network namespace's socket "
			"buffer limits (/proc/sys/net/ipv4/tcp_rmem, tcp_wmem, "
			"/proc/sys/net/core/somaxconn): %s. moat needs /proc/sys writable for its "
			"own network namespace (Linux 4.15 or later; in a container: an unmasked /proc)",
			strerror(errnum));
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errnum,
			      "sandbox setup failed while %s: %s",
			      step == MOAT_NET_STEP_LINK ? "bringing up and routing lo"
							 : "opening the egress sockets",
			      strerror(errnum));
}

/* A host sysctl as a number, or fallback. */
static unsigned long long host_sysctl(const char *path, unsigned long long fallback)
{
	FILE *f = fopen(path, "re");
	unsigned long long v;
	if (!f)
		return fallback;
	if (fscanf(f, "%llu", &v) != 1)
		v = fallback;
	fclose(f);
	return v;
}

int moat_net_warn_uncharged(struct moat_result *res, const char *mech, unsigned long nofile)
{
	if (!mech || (strcmp(mech, "cgroup-v1") && strcmp(mech, "rlimit")))
		return 0;
	const unsigned long long kib = 1024, mib = 1024 * kib;
	unsigned long long per = MOAT_NET_TCP_RMEM_MAX + MOAT_NET_TCP_WMEM_MAX;
	/* SO_RCVBUF / SO_SNDBUF: up to the host's maxima, doubled */
	unsigned long long forced = 2 * (host_sysctl("/proc/sys/net/core/rmem_max", 212992) +
					 host_sysctl("/proc/sys/net/core/wmem_max", 212992));
	if (forced < per)
		forced = per;
	return moat_result_warn(
		res,
		"socket buffers are not charged to memoryMb (%s): each TCP socket of the sandbox "
		"holds at most %llu KiB (%llu MiB for its %lu fds; with SO_SNDBUF/SO_RCVBUF up to "
		"%llu KiB each, %llu MiB, this host's net.core.rmem_max and wmem_max)",
		!strcmp(mech, "rlimit") ? "RLIMIT_DATA" : "cgroup v1", per / kib, per * nofile / mib,
		nofile, forced / kib, forced * nofile / mib) < 0 ? -1 : 0;
}

/* ---- supervisor, after clone ---- */

int moat_net_attach(struct moat_net *net, pid_t child, struct moat_error *err)
{
	(void)child;
	(void)err;
	/* the child has its copies */
	if (net->eg_child >= 0) {
		close(net->eg_child);
		net->eg_child = -1;
	}
	if (net->px_child >= 0) {
		close(net->px_child);
		net->px_child = -1;
	}
	return 0;
}

int moat_net_start(struct moat_net *net, struct moat_relay_caps *caps, struct moat_error *err)
{
	if (net->mode == NET_NONE)
		return 0;
	int sock = net->eg_sup;
	net->eg_sup = -1;
	if (moat_egress_new(net->mode == NET_ALLOWLIST ? &net->al : NULL, net->log, sock,
			    caps, &net->egress, err) < 0 ||
	    moat_egress_start(net->egress, err) < 0)
		return -1;
	if (net->mode != NET_ALLOWLIST)
		return 0;
	sock = net->px_sup;
	net->px_sup = -1;
	if (moat_proxy_new(&net->pal, net->log, sock, caps, &net->proxy, err) < 0)
		return -1;
	return moat_proxy_start(net->proxy, err);
}

void moat_net_finish(struct moat_net *net, struct moat_result *res)
{
	if (!net)
		return;
	/* stopped first, so the log below is final */
	moat_proxy_stop(net->proxy);
	moat_egress_stop(net->egress);
	if (res && !res->network_json) {
		static const char *const names[] = { "none", "egress", "allowlist" };
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"mode\":\"%s\"", names[net->mode]);
		/* an exception to the address policy is never silent */
		if (net->cidrs_json) {
			moat_buf_appendf(&b, ",\"allowedCidrs\":%s", net->cidrs_json);
			moat_result_warn(res, "allowedCidrs let %zu range(s) past moat's address classes "
					 "(never the host's own addresses)", net->cidr_count);
		}
		if (net->log)
			moat_netlog_render(net->log, &b);
		moat_buf_append(&b, "}", 1);
		res->network_json = moat_buf_take(&b);
		moat_buf_free(&b);
	}
	int *fds[] = { &net->eg_child, &net->eg_sup, &net->px_child, &net->px_sup };
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (*fds[i] >= 0)
			close(*fds[i]);
	moat_netlog_unref(net->log);
	free(net->cidrs_json);
	moat_allowlist_free(&net->al);
	moat_allowlist_free(&net->pal);
	free(net->nl);
	free(net);
}

