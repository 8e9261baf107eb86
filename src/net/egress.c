/* Transparent egress: the supervisor's side of the nftables redirects that
 * pid 1 installs inside the sandbox (net/nft.h). Nothing leaves the
 * sandbox's network namespace by itself: its only interface is lo, every
 * TCP connection to a non-loopback address lands on a listening socket pid
 * 1 opened and passed here, every DNS query on a UDP socket likewise.
 *
 *  TCP  the original destination (SO_ORIGINAL_DST) passes the one policy
 *       (moat_egress_refusal: public unicast, not the host's own, at
 *       connect time); with "allowedHosts" the connection must also go to
 *       an address this run's DNS answered for an allowed name, and its
 *       first bytes (TLS SNI or HTTP Host) must name that host, checked
 *       with the allowlist's scheme and port rules. Only then the
 *       supervisor connects from the host and relays both ways; plain
 *       HTTP carries one request only (its head with "Connection: close",
 *       exactly the body it declares; later bytes are dropped and logged):
 *       a second request could name another host of the same front end.
 *  DNS  A and AAAA questions are asked of the host's DNS resolvers only
 *       (moat_resolve: no /etc/hosts, no search domains), both types each
 *       time; only addresses the policy allows are answered (with
 *       "allowedHosts", only for allowed names), and a name with none gets
 *       what a name that does not exist gets; other types an empty answer.
 *       TCP to port 53, whatever the address, lands on the TCP listener and
 *       is answered the same way (DNS over TCP), never relayed. Each run
 *       has a question rate (EG_DNS_RATE, EG_DNS_BURST): a question past it
 *       is answered SERVFAIL at once and counted.
 *
 * One thread accepts and receives; each connection and each question runs
 * in a detached thread that holds a reference, bounded in number per run
 * and, under moat serve, across its runs (moat_relay_caps: a full cap
 * resets the connection, answers the question SERVFAIL). A connection with
 * no byte moving either way for moat_net_relay_idle_ms is reset. Stopping
 * wakes them all (eventfd) and waits a bounded time; a thread still
 * resolving lets go of its reference when it returns. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/dnsmsg.h"
#include "core/sys.h"
#include "net/internal.h"
#include "net/sniff.h"

#define EG_MAX_CONNS 512          /* connections relayed at once */
#define EG_MAX_TOTAL 65536        /* connections per run */
#define EG_MAX_DNS 64             /* questions being resolved at once */
#define EG_MAX_RECORDS 4096       /* (name, address) pairs remembered per run */
#define EG_MAX_ANSWERS 16
#define EG_CONNECT_TIMEOUT_MS 10000
#define EG_SNIFF_TIMEOUT_MS 10000
#define EG_STOP_GRACE_MS 2000
#define EG_RELAY_BUF 32768        /* each way, allocated once connected */
#define EG_STACK (192 * 1024)
#define EG_DNS_TTL 30
#define EG_DNS_MAX 4096           /* largest query read */
/* Questions a run may ask (UDP and TCP together): a bucket of EG_DNS_BURST
 * refilled at EG_DNS_RATE a second. Each question asked costs the
 * supervisor a thread and two queries upstream, outside the run's cgroup;
 * one past the rate is answered SERVFAIL at once and counted. */
#define EG_DNS_RATE 100
#define EG_DNS_BURST 200
#define EG_DNS_TCP_QUESTIONS 64   /* questions on one DNS-over-TCP connection */
#define EG_DNS_TCP_TIMEOUT_MS 10000 /* for each of them to arrive whole */
#define ORIGINAL_DST 80           /* SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST */

/* pid 1 passes its sockets in this order; the message's one data byte says
 * which are present (IPv6 may be missing on a host without it). */
enum { SOCK_TCP4, SOCK_TCP6, SOCK_UDP4, SOCK_UDP6, SOCK_COUNT };

struct record {
	int family;
	uint8_t a[16];
	char *name;
};

struct moat_egress {
	pthread_mutex_t mu;
	pthread_cond_t idle;      /* signalled when a worker ends */
	unsigned refs;
	unsigned conns, dns;      /* workers running */
	uint64_t total;
	int stop_fd;
	int sock_fd;
	int fds[SOCK_COUNT];
	bool allowlist;
	struct moat_allowlist al;
	struct moat_netlog *log;
	pthread_t thread;
	bool started;
	struct record *rec;
	size_t nrec;
	_Atomic uint64_t out_bufs; /* the outbound sockets' large buffers */
	struct moat_relay_caps *caps; /* shared with other runs, or NULL */
	int64_t idle_ms;          /* a relayed connection idle this long is reset */
	uint64_t dns_tokens;      /* the question bucket, in thousandths */
	int64_t dns_refilled;     /* when (moat_mono_ms) */
	bool dns_rate_logged;     /* the first question past the rate has its entry */
};

static void egress_unref(struct moat_egress *e)
{
	pthread_mutex_lock(&e->mu);
	unsigned left = --e->refs;
	pthread_mutex_unlock(&e->mu);
	if (left)
		return;
	if (e->stop_fd >= 0)
		close(e->stop_fd);
	if (e->sock_fd >= 0)
		close(e->sock_fd);
	for (int i = 0; i < SOCK_COUNT; i++)
		if (e->fds[i] >= 0)
			close(e->fds[i]);
	for (size_t i = 0; i < e->nrec; i++)
		free(e->rec[i].name);
	free(e->rec);
	moat_allowlist_free(&e->al);
	moat_netlog_unref(e->log);
	moat_relay_caps_release(e->caps);
	pthread_cond_destroy(&e->idle);
	pthread_mutex_destroy(&e->mu);
	free(e);
}

static int wait_fd(struct moat_egress *e, int fd, short events, int64_t deadline)
{
	return moat_wait_or_stop(fd, events, e->stop_fd, deadline);
}

/* ---- what this run's DNS answered ---- */

static void remember(struct moat_egress *e, const char *name, int family, const uint8_t *a)
{
	pthread_mutex_lock(&e->mu);
	bool have = false;
	for (size_t i = 0; i < e->nrec && !have; i++)
		have = e->rec[i].family == family && !memcmp(e->rec[i].a, a, family == AF_INET ? 4 : 16) &&
		       !strcmp(e->rec[i].name, name);
	if (!have && e->nrec < EG_MAX_RECORDS) {
		if (!e->rec)
			e->rec = calloc(EG_MAX_RECORDS, sizeof *e->rec);
		char *n = e->rec ? strdup(name) : NULL;
		if (n) {
			struct record *r = &e->rec[e->nrec++];
			r->family = family;
			memcpy(r->a, a, family == AF_INET ? 4 : 16);
			r->name = n;
		}
	}
	pthread_mutex_unlock(&e->mu);
}

/* Was a answered for name (or, name NULL: for any name; the first one is
 * copied to out)? */
static bool answered(struct moat_egress *e, const char *name, int family, const uint8_t *a,
		     char *out, size_t outlen)
{
	pthread_mutex_lock(&e->mu);
	bool found = false;
	for (size_t i = 0; i < e->nrec && !found; i++) {
		const struct record *r = &e->rec[i];
		if (r->family != family || memcmp(r->a, a, family == AF_INET ? 4 : 16) ||
		    (name && strcmp(r->name, name)))
			continue;
		found = true;
		if (out)
			snprintf(out, outlen, "%s", r->name);
	}
	pthread_mutex_unlock(&e->mu);
	return found;
}

/* ---- TCP ---- */

struct conn {
	struct moat_egress *e;
	int cfd, ofd;
	int family;
	uint8_t addr[16];
	uint16_t port;
	char text[48];
	int idx;
	uint64_t bufs;    /* charged to e->out_bufs */
	uint8_t *first;   /* bytes read from the program before connecting */
	size_t first_len;
	uint64_t sent, received;
	/* plain HTTP under allowedHosts: one request, then nothing more */
	bool http;
	bool http_done;    /* its body is complete */
	bool http_extra;   /* bytes after it were refused (logged once) */
	bool http_bad;     /* its body's framing was malformed: both ends reset */
	struct moat_http_req req;
	struct moat_http_body body;
	char host[254];    /* the host its Host named */
	bool dns_closed;   /* DNS over TCP: the program closed after its answers */
};

static void refuse(struct conn *c, const char *why)
{
	moat_netlog_verdict(c->e->log, c->idx, false, why);
}

const char *moat_sniff_read(int fd, int stop_fd, uint8_t *buf, size_t *len, int64_t deadline,
			    char name[254], struct moat_http_req *req, enum moat_sniff_kind *kind)
{
	*kind = *len ? moat_sniff_request(buf, *len, name, req) : MOAT_SNIFF_MORE;
	while (*kind == MOAT_SNIFF_MORE) {
		if (*len >= MOAT_SNIFF_MAX) {
			*kind = MOAT_SNIFF_OTHER;
			break;
		}
		ssize_t n = recv(fd, buf + *len, MOAT_SNIFF_MAX - *len, 0);
		if (n > 0) {
			*len += (size_t)n;
			*kind = moat_sniff_request(buf, *len, name, req);
			continue;
		}
		if (n == 0)
			return "the program closed the connection before naming a host";
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return "the connection failed before naming a host";
		int w = moat_wait_or_stop(fd, POLLIN, stop_fd, deadline);
		if (w == 0)
			return "no TLS ClientHello or HTTP request in time (allowedHosts needs one)";
		if (w < 0)
			return "the run ended";
	}
	return NULL;
}

/* Allowlist: reads the program's first bytes and checks the name they carry
 * against this run's DNS answers and the allowlist. NULL, or why not
 * (written into why). */
static const char *check_named(struct conn *c, char *why, size_t whylen)
{
	c->first = malloc(MOAT_SNIFF_MAX);
	if (!c->first)
		return "out of memory";
	char name[254] = "";
	enum moat_sniff_kind kind;
	const char *no = moat_sniff_read(c->cfd, c->e->stop_fd, c->first, &c->first_len,
					 moat_mono_ms() + EG_SNIFF_TIMEOUT_MS, name, &c->req, &kind);
	struct moat_host h;
	if (!no)
		no = moat_sniff_host(kind, name, &c->req, &h, why, whylen);
	if (no)
		return no;
	moat_netlog_host(c->e->log, c->idx, h.text, c->text);
	bool tls = kind == MOAT_SNIFF_TLS;
	no = moat_allowlist_refusal(&c->e->al, tls, &h, c->port, why, whylen);
	if (no)
		return no;
	/* a name must have been resolved by moat to this very address; an IP
	 * literal must be this address */
	bool literal_here = h.kind != MOAT_HOST_NAME &&
			    (h.kind == MOAT_HOST_IPV4) == (c->family == AF_INET) &&
			    !memcmp(h.addr, c->addr, c->family == AF_INET ? 4 : 16);
	if (h.kind != MOAT_HOST_NAME ? !literal_here : !answered(c->e, h.text, c->family, c->addr, NULL, 0)) {
		snprintf(why, whylen, "%s is not an address moat's DNS answered for %s", c->text, h.text);
		return why;
	}
	if (!tls) {
		c->http = true;
		snprintf(c->host, sizeof c->host, "%s", h.text);
		moat_http_body_init(&c->body, &c->req);
	}
	return NULL;
}

static int connect_out(struct conn *c)
{
	int s = moat_net_out_socket(c->family, &c->e->out_bufs, &c->bufs);
	if (s < 0)
		return -errno;
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t sl;
	if (c->family == AF_INET) {
		struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
		sa->sin_family = AF_INET;
		sa->sin_port = htons(c->port);
		memcpy(&sa->sin_addr, c->addr, 4);
		sl = sizeof *sa;
	} else {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&ss;
		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons(c->port);
		memcpy(&sa->sin6_addr, c->addr, 16);
		sl = sizeof *sa;
	}
	if (connect(s, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(s);
		return -e;
	}
	int w = wait_fd(c->e, s, POLLOUT, moat_mono_ms() + EG_CONNECT_TIMEOUT_MS);
	int soerr = 0;
	socklen_t el = sizeof soerr;
	if (w <= 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &el) < 0 || soerr) {
		close(s);
		return w == 0 ? -ETIMEDOUT : w < 0 ? -ECANCELED : -(soerr ? soerr : EIO);
	}
	return s;
}

/* ---- plain HTTP: one request per connection ---- */

/* A request of the connection's refused after its first was let through:
 * an entry of its own, naming the host it asked for when it says. */
static void refuse_later(struct conn *c, const char *host, const char *why)
{
	int idx = moat_netlog_add(c->e->log, "tcp", NULL, host && host[0] ? host : c->host, c->port);
	moat_netlog_host(c->e->log, idx, NULL, c->text);
	moat_netlog_verdict(c->e->log, idx, false, why);
}

/* Bytes the program sends after its one request: dropped; the first time
 * logged as a refused request. */
static void http_extra(struct conn *c, const uint8_t *p, size_t n)
{
	if (c->http_extra || n == 0)
		return;
	c->http_extra = true;
	char name[254];
	struct moat_http_req rq;
	if (moat_sniff_request(p, n, name, &rq) != MOAT_SNIFF_HTTP)
		name[0] = '\0';
	refuse_later(c, name, "a second request on one plain-HTTP connection: moat relays one "
		     "request per connection (with Connection: close) and drops what follows");
}

/* Of n bytes from the program, how many go out: the rest of its request's
 * body; -1 when its body framing is malformed (logged). */
static ssize_t http_filter(struct conn *c, const uint8_t *p, size_t n)
{
	if (c->http_done) {
		http_extra(c, p, n);
		return 0;
	}
	size_t used = 0;
	const char *bad;
	int r = moat_http_body_feed(&c->body, p, n, &used, &bad);
	if (r < 0) {
		char why[200];
		snprintf(why, sizeof why, "HTTP request body refused: %s", bad);
		refuse_later(c, NULL, why);
		c->http_bad = true;
		return -1;
	}
	if (r == 1) {
		c->http_done = true;
		http_extra(c, p + used, n - used);
	}
	return (ssize_t)used;
}

/* What was read before connecting: the head with "Connection: close", then
 * what of the rest belongs to the request. */
static int send_first(struct conn *c)
{
	int64_t deadline = moat_mono_ms() + EG_CONNECT_TIMEOUT_MS;
	const uint8_t *p = c->first;
	size_t n = c->first_len;
	if (c->http) {
		size_t hl = c->req.head_len;
		uint8_t *head = malloc(hl + MOAT_HTTP_CLOSE_EXTRA);
		if (!head)
			return -1;
		size_t k = moat_http_close_head(c->first, hl, head);
		int rc = moat_send_all_until(c->ofd, head, k, c->e->stop_fd, deadline);
		free(head);
		if (rc < 0)
			return -1;
		c->sent += k;
		ssize_t b = http_filter(c, p + hl, n - hl);
		if (b < 0)
			return -1;
		p += hl;
		n = (size_t)b;
	}
	if (n && moat_send_all_until(c->ofd, p, n, c->e->stop_fd, deadline) < 0)
		return -1;
	c->sent += n;
	return 0;
}

/* Both directions until both ended (a half close is passed on), the run
 * stops or no byte moved either way for e->idle_ms (*idle set). true when
 * both ended: nothing is left queued either way. */
static bool relay(struct conn *c, bool *idle)
{
	uint8_t *buf[2] = { malloc(EG_RELAY_BUF), malloc(EG_RELAY_BUF) };
	size_t len[2] = { 0, 0 }, off[2] = { 0, 0 };
	int from[2] = { c->cfd, c->ofd }, to[2] = { c->ofd, c->cfd };
	bool eof[2] = { false, false }, shut[2] = { false, false };
	uint64_t *count[2] = { &c->sent, &c->received };
	if (!buf[0] || !buf[1])
		goto out;
	while (!(shut[0] && shut[1])) {
		struct pollfd pf[3] = { { .fd = c->cfd }, { .fd = c->ofd },
					{ .fd = c->e->stop_fd, .events = POLLIN } };
		for (int d = 0; d < 2; d++) {
			if (!eof[d] && len[d] == 0)
				pf[d == 0 ? 0 : 1].events |= POLLIN;
			if (len[d] > off[d])
				pf[d == 0 ? 1 : 0].events |= POLLOUT;
		}
		int r = poll(pf, 3, (int)c->e->idle_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			*idle = true;
			break;
		}
		if (r < 0 || pf[2].revents || ((pf[0].revents | pf[1].revents) & (POLLERR | POLLNVAL)))
			break;
		bool failed = false;
		for (int d = 0; d < 2 && !failed; d++) {
			struct pollfd *in = &pf[d == 0 ? 0 : 1], *out = &pf[d == 0 ? 1 : 0];
			if (!eof[d] && len[d] == 0 && (in->revents & (POLLIN | POLLHUP | POLLERR))) {
				ssize_t n = recv(from[d], buf[d], EG_RELAY_BUF, 0);
				if (n > 0) {
					/* plain HTTP: the one request's bytes only */
					ssize_t k = d == 0 && c->http ? http_filter(c, buf[0], (size_t)n) : n;
					failed = k < 0;
					len[d] = k > 0 ? (size_t)k : 0;
					off[d] = 0;
					*count[d] += len[d];
				} else if (n == 0) {
					eof[d] = true;
				} else if (errno != EINTR && errno != EAGAIN) {
					failed = true;
				}
			}
			if (len[d] > off[d] && (out->revents & (POLLOUT | POLLERR | POLLHUP))) {
				ssize_t n = send(to[d], buf[d] + off[d], len[d] - off[d], MSG_NOSIGNAL);
				if (n > 0)
					off[d] += (size_t)n;
				else if (n < 0 && errno != EINTR && errno != EAGAIN)
					failed = true;
				if (off[d] == len[d])
					len[d] = off[d] = 0;
			}
			if (eof[d] && len[d] == 0 && !shut[d]) {
				shutdown(to[d], SHUT_WR);
				shut[d] = true;
			}
		}
		if (failed)
			break;
	}
out:
	free(buf[0]);
	free(buf[1]);
	return shut[0] && shut[1];
}

/* Where a redirected connection was going (SO_ORIGINAL_DST). 0 or -1. */
static int original_dst(int fd, int family, uint8_t addr[16], uint16_t *port)
{
	struct sockaddr_storage od;
	socklen_t ol = sizeof od;
	memset(&od, 0, sizeof od);
	if (getsockopt(fd, family == AF_INET ? SOL_IP : SOL_IPV6, ORIGINAL_DST, &od, &ol) < 0)
		return -1;
	if (family == AF_INET) {
		const struct sockaddr_in *sa = (const struct sockaddr_in *)&od;
		memcpy(addr, &sa->sin_addr, 4);
		*port = ntohs(sa->sin_port);
	} else {
		const struct sockaddr_in6 *sa = (const struct sockaddr_in6 *)&od;
		memcpy(addr, &sa->sin6_addr, 16);
		*port = ntohs(sa->sin6_port);
	}
	return 0;
}

static void dns_tcp(struct conn *c);

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct moat_egress *e = c->e;
	char why[600];
	const char *no = NULL;
	bool ended = false, idle = false;
	if (original_dst(c->cfd, c->family, c->addr, &c->port) < 0) {
		c->idx = moat_netlog_add(e->log, "tcp", NULL, "?", 0);
		refuse(c, "no original destination (not a redirected connection)");
		goto out;
	}
	moat_netlog_addr_text(c->family, c->addr, c->text);
	char name[254];
	bool named = answered(e, NULL, c->family, c->addr, name, sizeof name);
	c->idx = moat_netlog_add(e->log, "tcp", NULL, named ? name : c->text, c->port);
	if (named)
		moat_netlog_host(e->log, c->idx, NULL, c->text);
	if (c->port == 53) {
		/* DNS over TCP, to any address: moat answers, as for UDP */
		dns_tcp(c);
		goto out;
	}
	/* the address first: nothing is read from a connection that cannot go out */
	if (moat_egress_refusal_text(e->allowlist ? &e->al : NULL, c->family, c->addr, why,
				     sizeof why)) {
		no = why;
	} else if (e->allowlist) {
		no = check_named(c, why, sizeof why);
	}
	if (no) {
		refuse(c, no);
		goto out;
	}
	int s = connect_out(c);
	if (s < 0) {
		snprintf(why, sizeof why, "connection to %s port %u failed: %s", c->text, c->port,
			 strerror(-s));
		refuse(c, why);
		goto out;
	}
	c->ofd = s;
	moat_netlog_verdict(e->log, c->idx, true, NULL);
	if (send_first(c) < 0)
		goto out;
	ended = relay(c, &idle);
	if (idle) {
		moat_net_idle_reason(e->idle_ms, why, sizeof why);
		moat_netlog_verdict(e->log, c->idx, true, why);
	}
out:
	moat_netlog_bytes(e->log, c->idx, c->sent, c->received);
	moat_netlog_count(e->log, MOAT_NETLOG_BYTES, c->sent + c->received);
	if (c->ofd >= 0 && ended && !c->http_bad) {
		close(c->ofd);
		close(c->cfd);
	} else if (c->dns_closed) {
		close(c->cfd); /* answered, and closed by the program first */
	} else {
		/* refused, failed, malformed or cut at the run's end: a reset both
		 * ways, so what either socket still queued (a peer that stopped
		 * reading) is freed now rather than held by an orphan for minutes */
		if (c->ofd >= 0)
			moat_net_reset_close(c->ofd);
		moat_net_reset_close(c->cfd);
	}
	moat_net_out_release(&e->out_bufs, c->bufs);
	moat_relay_caps_give(e->caps, MOAT_RELAY_TCP);
	free(c->first);
	free(c);
	pthread_mutex_lock(&e->mu);
	e->conns--;
	pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->mu);
	egress_unref(e);
	return NULL;
}

/* ---- DNS ---- */

struct question {
	struct moat_egress *e;
	int fd;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	size_t len;
	uint8_t msg[];
};

static const char *qtype_name(uint16_t t)
{
	switch (t) {
	case 1: return "A";
	case 28: return "AAAA";
	case 5: return "CNAME";
	case 15: return "MX";
	case 16: return "TXT";
	case 33: return "SRV";
	case 65: return "HTTPS";
	default: return "other";
	}
}

static void answer(struct question *q, const uint8_t *msg, size_t len)
{
	(void)sendto(q->fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT, (struct sockaddr *)&q->peer,
		     q->peer_len);
}

/* One question (msg, len: UDP or TCP alike) answered into out (cap bytes):
 * the answer's length, or -1 for none. Asks the host's resolvers. */
static int dns_respond(struct moat_egress *e, const uint8_t *msg, size_t len, uint8_t *out,
		       size_t cap)
{
	struct moat_dns_query dq;
	int bad_id = -1;
	if (moat_dns_parse_query(msg, len, &dq, &bad_id) < 0) {
		moat_netlog_count(e->log, MOAT_NETLOG_MALFORMED, 1);
		return bad_id >= 0 ? moat_dns_build_formerr((uint16_t)bad_id, out, cap) : -1;
	}
	int idx = moat_netlog_add(e->log, "dns", qtype_name(dq.qtype), dq.name, 0);
	int rcode = 0;
	bool refused_by_policy = false; /* else an entry is allowed, answered or not */
	struct moat_dns_addr ok[EG_MAX_ANSWERS];
	size_t nok = 0;
	char why[600] = "";
	bool refused_any = false;
	struct moat_buf answers = { 0 };
	struct moat_host h;
	int family = dq.qtype == 1 ? AF_INET : dq.qtype == 28 ? AF_INET6 : 0;
	if (dq.qclass != 1) {
		rcode = 5;
		snprintf(why, sizeof why, "only class IN is answered");
	} else if (!dq.name[0] || moat_host_parse(dq.name, strlen(dq.name), &h) < 0) {
		rcode = 3;
		snprintf(why, sizeof why, "not a valid host name");
	} else if (e->allowlist && !moat_allowlist_match_name(&e->al, &h)) {
		/* NXDOMAIN, not REFUSED: resolvers retry a refusal elsewhere */
		rcode = 3;
		refused_by_policy = true;
		snprintf(why, sizeof why, "%s is not in allowedHosts", h.text);
	} else if (family) {
		/* Both families, whatever was asked, each time: a name none of
		 * whose addresses pass is answered exactly like a name that does
		 * not exist (NXDOMAIN, logged alike), so that neither the answer,
		 * nor the other type's, nor the time tells a sandbox which names
		 * the host's network has. */
		struct moat_dns_addr got[EG_MAX_ANSWERS];
		size_t passing = 0;
		/* AAAA answered only where the host has IPv6 (AI_ADDRCONFIG) */
		bool answer_family = family == AF_INET || moat_host_has_ipv6();
		bool failed = false;
		for (int f = 0; f < 2; f++) {
			int fam = f ? AF_INET6 : AF_INET;
			size_t ngot = 0;
			if (moat_resolve(h.text, fam, got, EG_MAX_ANSWERS, &ngot) == MOAT_RESOLVE_FAIL)
				failed = true;
			for (size_t k = 0; k < ngot; k++) {
				struct moat_dns_addr *a = &got[k];
				if (moat_egress_refusal(e->allowlist ? &e->al : NULL, fam, a->a)) {
					refused_any = true;
					continue;
				}
				passing++;
				bool dup = false;
				for (size_t i = 0; i < nok && !dup; i++)
					dup = !memcmp(ok[i].a, a->a, 16);
				if (fam != family || !answer_family || dup || nok == EG_MAX_ANSWERS)
					continue;
				ok[nok++] = *a;
				char text[48];
				moat_netlog_addr_text(family, a->a, text);
				moat_buf_appendf(&answers, "%s%s", answers.len ? " " : "", text);
				remember(e, h.text, family, a->a);
			}
		}
		if (!passing && failed && !refused_any) {
			rcode = 2;
			snprintf(why, sizeof why, "the host cannot resolve %s", h.text);
		} else if (!passing) {
			rcode = 3;
			refused_by_policy = true;
			snprintf(why, sizeof why, "%s", MOAT_NET_NO_NAME);
		}
	}
	if (answers.len && !answers.oom)
		moat_netlog_answers(e->log, idx, answers.data);
	moat_netlog_verdict(e->log, idx, !refused_by_policy && rcode != 5, why[0] ? why : NULL);
	moat_buf_free(&answers);
	return moat_dns_build_response(&dq, msg, rcode, ok, nok, EG_DNS_TTL, out, cap);
}

/* A DNS slot: the run's (EG_MAX_DNS at once) and the service's. false when
 * either is full (the service's counts as refused). */
static bool dns_slot_take(struct moat_egress *e, bool *capped)
{
	pthread_mutex_lock(&e->mu);
	bool busy = e->dns >= EG_MAX_DNS;
	if (!busy) {
		e->dns++;
		e->refs++;
	}
	pthread_mutex_unlock(&e->mu);
	*capped = false;
	if (busy)
		return false;
	if (moat_relay_caps_take(e->caps, MOAT_RELAY_DNS))
		return true;
	*capped = true;
	pthread_mutex_lock(&e->mu);
	e->dns--;
	e->refs--;
	pthread_mutex_unlock(&e->mu);
	return false;
}

/* Gives back a slot of dns_slot_take; the last reference may go with it. */
static void dns_slot_give(struct moat_egress *e)
{
	moat_relay_caps_give(e->caps, MOAT_RELAY_DNS);
	pthread_mutex_lock(&e->mu);
	e->dns--;
	pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->mu);
	egress_unref(e);
}

/* One question from the run's bucket; false past the rate (counted; *first
 * for the first such question of the run). */
static bool dns_rate_take(struct moat_egress *e, bool *first)
{
	int64_t now = moat_mono_ms();
	pthread_mutex_lock(&e->mu);
	uint64_t full = (uint64_t)EG_DNS_BURST * 1000;
	if (now > e->dns_refilled) {
		uint64_t add = (uint64_t)(now - e->dns_refilled) * EG_DNS_RATE;
		e->dns_tokens = full - e->dns_tokens < add ? full : e->dns_tokens + add;
		e->dns_refilled = now;
	}
	bool ok = e->dns_tokens >= 1000;
	if (ok)
		e->dns_tokens -= 1000;
	*first = !ok && !e->dns_rate_logged;
	if (*first)
		e->dns_rate_logged = true;
	pthread_mutex_unlock(&e->mu);
	if (!ok)
		moat_netlog_count(e->log, MOAT_NETLOG_DNS_RATE, 1);
	return ok;
}

/* A question refused without being asked (past the run's rate, or a cap
 * full: why): SERVFAIL, a transient failure (getaddrinfo says EAI_AGAIN;
 * REFUSED would read as a policy, which moat answers NXDOMAIN). Logged
 * when log; the answer's length or -1. */
static int dns_refuse(struct moat_egress *e, const uint8_t *msg, size_t len, const char *why,
		      bool log, uint8_t *out, size_t cap)
{
	struct moat_dns_query dq;
	int bad_id = -1;
	if (moat_dns_parse_query(msg, len, &dq, &bad_id) < 0)
		return -1;
	if (log) {
		int idx = moat_netlog_add(e->log, "dns", qtype_name(dq.qtype), dq.name, 0);
		moat_netlog_verdict(e->log, idx, false, why);
	}
	return moat_dns_build_response(&dq, msg, 2, NULL, 0, EG_DNS_TTL, out, cap);
}

/* What the log says of the first question past the rate (the others are
 * counted in dnsRateRefusals). */
#define STR_(x) #x
#define STR(x) STR_(x)
#define DNS_RATE_WHY "past the run's DNS question rate (" STR(EG_DNS_RATE) " a second, " \
	STR(EG_DNS_BURST) " at once): answered SERVFAIL, the next ones only counted " \
	"(dnsRateRefusals)"

static void *dns_main(void *arg)
{
	struct question *q = arg;
	struct moat_egress *e = q->e;
	uint8_t out[MOAT_DNS_UDP_MAX];
	int n = dns_respond(e, q->msg, q->len, out, sizeof out);
	if (n > 0)
		answer(q, out, (size_t)n);
	free(q);
	dns_slot_give(e);
	return NULL;
}

/* Reads exactly n bytes of the program's by the deadline: 0, 1 at the end
 * of the stream before any of them, -1 otherwise. */
static int recv_exact(struct conn *c, uint8_t *p, size_t n, int64_t deadline)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(c->cfd, p + got, n - got, 0);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return got ? -1 : 1;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (wait_fd(c->e, c->cfd, POLLIN, deadline) <= 0)
			return -1;
	}
	return 0;
}

/* DNS over TCP (port 53 at any address, the host's resolvers included):
 * answered by moat as over UDP (RFC 7766's two-byte length before each
 * message), never relayed. At most EG_DNS_TCP_QUESTIONS questions, each to
 * arrive whole within EG_DNS_TCP_TIMEOUT_MS, one at a time, each taking a
 * DNS slot and a token of the run's rate. */
static void dns_tcp(struct conn *c)
{
	struct moat_egress *e = c->e;
	moat_netlog_verdict(e->log, c->idx, true, "DNS over TCP: answered by moat's DNS, not relayed");
	uint8_t *msg = malloc(EG_DNS_MAX);
	uint8_t out[2 + MOAT_DNS_UDP_MAX];
	for (unsigned k = 0; msg && k < EG_DNS_TCP_QUESTIONS; k++) {
		int64_t deadline = moat_mono_ms() + EG_DNS_TCP_TIMEOUT_MS;
		uint8_t lp[2];
		int r = recv_exact(c, lp, 2, deadline);
		if (r == 1)
			c->dns_closed = true;
		if (r != 0)
			break;
		size_t len = (size_t)lp[0] << 8 | lp[1];
		if (len == 0 || len > EG_DNS_MAX) {
			moat_netlog_count(e->log, MOAT_NETLOG_MALFORMED, 1);
			break;
		}
		if (recv_exact(c, msg, len, deadline) != 0)
			break;
		c->sent += 2 + len;
		int n;
		bool capped = false, first = false;
		if (!dns_rate_take(e, &first)) {
			n = dns_refuse(e, msg, len, DNS_RATE_WHY, first, out + 2, MOAT_DNS_UDP_MAX);
		} else if (!dns_slot_take(e, &capped)) {
			moat_netlog_count(e->log, MOAT_NETLOG_BUSY, 1);
			n = dns_refuse(e, msg, len, capped ? MOAT_NET_CAPS_FULL :
				       "too many DNS questions at once", true, out + 2, MOAT_DNS_UDP_MAX);
		} else {
			n = dns_respond(e, msg, len, out + 2, MOAT_DNS_UDP_MAX);
			dns_slot_give(e);
		}
		if (n <= 0)
			break;
		out[0] = (uint8_t)(n >> 8);
		out[1] = (uint8_t)n;
		if (moat_send_all_until(c->cfd, out, (size_t)n + 2, e->stop_fd, deadline) < 0)
			break;
		c->received += (size_t)n + 2;
	}
	free(msg);
}

/* ---- the accepting thread ---- */

static int receive_sockets(struct moat_egress *e)
{
	if (wait_fd(e, e->sock_fd, POLLIN, moat_mono_ms() + 24LL * 3600 * 1000) <= 0)
		return -1;
	uint8_t mask = 0;
	int fds[SOCK_COUNT];
	size_t nfd = 0;
	ssize_t n = moat_recv_fds(e->sock_fd, &mask, 1, fds, SOCK_COUNT, &nfd, 0);
	if (n != 1 || nfd == 0) {
		for (size_t i = 0; i < nfd; i++)
			close(fds[i]);
		return -1; /* the sandbox ended before passing them */
	}
	size_t k = 0;
	for (int i = 0; i < SOCK_COUNT; i++)
		if ((mask & (1u << i)) && k < nfd)
			e->fds[i] = fds[k++];
	for (; k < nfd; k++)
		close(fds[k]);
	for (int i = 0; i < SOCK_COUNT; i++)
		if (e->fds[i] >= 0 && fcntl(e->fds[i], F_SETFL, O_NONBLOCK) < 0)
			return -1;
	close(e->sock_fd);
	e->sock_fd = -1;
	return 0;
}

static void spawn(struct moat_egress *e, pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	pthread_t t;
	if (pthread_create(&t, attr, fn, arg) == 0)
		return;
	/* undo what the caller counted */
	pthread_mutex_lock(&e->mu);
	if (fn == conn_main)
		e->conns--;
	else
		e->dns--;
	e->refs--;
	pthread_mutex_unlock(&e->mu);
	moat_relay_caps_give(e->caps, fn == conn_main ? MOAT_RELAY_TCP : MOAT_RELAY_DNS);
	if (fn == conn_main) {
		struct conn *c = arg;
		moat_net_reset_close(c->cfd);
		free(c);
	} else {
		free(arg);
	}
}

/* A connection the service-wide cap refused: an entry naming where it went. */
static void log_capped(struct moat_egress *e, int fd, int family)
{
	uint8_t addr[16];
	uint16_t port = 0;
	char text[48] = "?";
	if (original_dst(fd, family, addr, &port) == 0)
		moat_netlog_addr_text(family, addr, text);
	int idx = moat_netlog_add(e->log, "tcp", NULL, text, port);
	moat_netlog_verdict(e->log, idx, false, MOAT_NET_CAPS_FULL);
}

/* Accepts what is pending; false when the supervisor is out of fds or
 * memory (the caller stops accepting for a moment instead of spinning). */
static bool accept_all(struct moat_egress *e, pthread_attr_t *attr, int lfd, int family)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
				 errno == ENOMEM);
		pthread_mutex_lock(&e->mu);
		bool busy = e->conns >= EG_MAX_CONNS || e->total >= EG_MAX_TOTAL;
		if (!busy) {
			e->conns++;
			e->total++;
			e->refs++;
		}
		pthread_mutex_unlock(&e->mu);
		bool capped = !busy && !moat_relay_caps_take(e->caps, MOAT_RELAY_TCP);
		struct conn *c = busy || capped ? NULL : calloc(1, sizeof *c);
		if (!c) {
			if (!busy) {
				pthread_mutex_lock(&e->mu);
				e->conns--;
				e->refs--;
				pthread_mutex_unlock(&e->mu);
			}
			if (capped)
				log_capped(e, fd, family);
			else if (!busy)
				moat_relay_caps_give(e->caps, MOAT_RELAY_TCP);
			moat_netlog_count(e->log, MOAT_NETLOG_BUSY, 1);
			moat_net_reset_close(fd);
			continue;
		}
		c->e = e;
		c->cfd = fd;
		c->ofd = -1;
		c->idx = -1;
		c->family = family;
		spawn(e, attr, conn_main, c);
	}
}

static void receive_all(struct moat_egress *e, pthread_attr_t *attr, int fd)
{
	for (;;) {
		struct question *q = malloc(sizeof *q + EG_DNS_MAX);
		if (!q)
			return;
		q->peer_len = sizeof q->peer;
		ssize_t n = recvfrom(fd, q->msg, EG_DNS_MAX, MSG_TRUNC, (struct sockaddr *)&q->peer,
				     &q->peer_len);
		if (n < 0 || n > EG_DNS_MAX) {
			free(q);
			if (n < 0)
				return;
			moat_netlog_count(e->log, MOAT_NETLOG_MALFORMED, 1);
			continue;
		}
		q->e = e;
		q->fd = fd;
		q->len = (size_t)n;
		bool first = false, capped = false;
		if (!dns_rate_take(e, &first)) {
			/* answered at once, nothing asked: a flood costs a parse each */
			uint8_t out[MOAT_DNS_UDP_MAX];
			int k = dns_refuse(e, q->msg, q->len, DNS_RATE_WHY, first, out, sizeof out);
			if (k > 0)
				answer(q, out, (size_t)k);
			free(q);
			continue;
		}
		if (!dns_slot_take(e, &capped)) {
			moat_netlog_count(e->log, MOAT_NETLOG_BUSY, 1);
			if (capped) {
				uint8_t out[MOAT_DNS_UDP_MAX];
				int k = dns_refuse(e, q->msg, q->len, MOAT_NET_CAPS_FULL, true, out,
						   sizeof out);
				if (k > 0)
					answer(q, out, (size_t)k);
			}
			/* the run's own bound: the resolver retries; a flood only costs itself */
			free(q);
			continue;
		}
		spawn(e, attr, dns_main, q);
	}
}

static void *egress_main(void *arg)
{
	struct moat_egress *e = arg;
	if (receive_sockets(e) < 0)
		return NULL;
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) != 0)
		return NULL;
	if (pthread_attr_setstacksize(&attr, EG_STACK) != 0 ||
	    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0) {
		pthread_attr_destroy(&attr);
		return NULL;
	}
	bool paused = false; /* out of fds: pending connections wait a moment */
	for (;;) {
		struct pollfd pf[SOCK_COUNT + 1];
		for (int i = 0; i < SOCK_COUNT; i++)
			pf[i] = (struct pollfd){ .fd = e->fds[i], .events = POLLIN };
		if (paused)
			pf[SOCK_TCP4].fd = pf[SOCK_TCP6].fd = -1;
		pf[SOCK_COUNT] = (struct pollfd){ .fd = e->stop_fd, .events = POLLIN };
		int r = poll(pf, SOCK_COUNT + 1, paused ? 100 : -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[SOCK_COUNT].revents)
			break;
		bool ok = true;
		if (paused || (pf[SOCK_TCP4].revents & POLLIN))
			ok &= accept_all(e, &attr, e->fds[SOCK_TCP4], AF_INET);
		if (e->fds[SOCK_TCP6] >= 0 && (paused || (pf[SOCK_TCP6].revents & POLLIN)))
			ok &= accept_all(e, &attr, e->fds[SOCK_TCP6], AF_INET6);
		paused = !ok;
		if (pf[SOCK_UDP4].revents & POLLIN)
			receive_all(e, &attr, e->fds[SOCK_UDP4]);
		if (pf[SOCK_UDP6].revents & POLLIN)
			receive_all(e, &attr, e->fds[SOCK_UDP6]);
	}
	pthread_attr_destroy(&attr);
	return NULL;
}

/* ---- interface ---- */

int moat_egress_new(struct moat_allowlist *al, struct moat_netlog *log, int sock_fd,
		    struct moat_relay_caps *caps, struct moat_egress **out, struct moat_error *err)
{
	*out = NULL;
	struct moat_egress *e = calloc(1, sizeof *e);
	if (!e) {
		close(sock_fd);
		return moat_error_oom(err);
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->idle, &ca);
	pthread_condattr_destroy(&ca);
	e->refs = 1;
	e->sock_fd = sock_fd;
	for (int i = 0; i < SOCK_COUNT; i++)
		e->fds[i] = -1;
	e->log = moat_netlog_ref(log);
	e->caps = moat_relay_caps_ref(caps);
	e->idle_ms = moat_net_relay_idle_ms();
	e->dns_tokens = (uint64_t)EG_DNS_BURST * 1000;
	e->dns_refilled = moat_mono_ms();
	if (al) {
		e->allowlist = true;
		e->al = *al;
		memset(al, 0, sizeof *al);
	}
	e->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->stop_fd < 0) {
		int errno_ = errno;
		egress_unref(e);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno_, "eventfd: %s",
				      strerror(errno_));
	}
	*out = e;
	return 0;
}

int moat_egress_start(struct moat_egress *e, struct moat_error *err)
{
	int rc = pthread_create(&e->thread, NULL, egress_main, e);
	if (rc != 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, rc,
				      "cannot start the egress relay: %s", strerror(rc));
	e->started = true;
	return 0;
}

void moat_egress_stop(struct moat_egress *e)
{
	if (!e)
		return;
	uint64_t one = 1;
	if (write(e->stop_fd, &one, sizeof one) < 0) {
		/* an eventfd write cannot fail short of overflow */
	}
	if (e->started)
		pthread_join(e->thread, NULL);
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += EG_STOP_GRACE_MS / 1000;
	pthread_mutex_lock(&e->mu);
	while ((e->conns || e->dns) && pthread_cond_timedwait(&e->idle, &e->mu, &until) == 0)
		;
	pthread_mutex_unlock(&e->mu);
	egress_unref(e);
}
