/* The allowlist proxy: serves, from the supervisor (host namespace), a
 * listening socket that lives on 127.0.0.1 inside the sandbox.
 *
 * One request per connection: CONNECT host:port (checked as https) opens a
 * tunnel whose first bytes are judged as the transparent path judges a
 * connection's (egress.c, sniff.c): a ClientHello whose SNI names the
 * CONNECT host, or one plain HTTP request naming it that the allowlist
 * allows as http, relayed alone; anything else is reset and logged. An
 * absolute-URI http:// request is checked (its Host header must
 * name the same host and port), rewritten to origin form with
 * "Connection: close", and only its Content-Length body is forwarded (what
 * the client sends after it is dropped, the first bytes logged as a refused
 * request; Transfer-Encoding and Upgrade are refused).
 * Names are resolved once here; every address passes the one egress policy
 * (moat_egress_refusal: loopback, private, link-local, metadata... refused
 * unless allowedCidrs covers it; the host's own addresses always) and the
 * connection goes to a checked address, never to a second resolution. A
 * refusal is "403 Forbidden" with X-Moat-Refused. Each request is an entry
 * of the run's network log (kind "proxy").
 *
 * Bounds: PROXY_MAX_CONNS at once, PROXY_MAX_TOTAL per run, PROXY_BYTE_CAP
 * relayed per run, a 16 KiB request head, head/connect timeouts, a
 * connection idle for moat_net_relay_idle_ms reset, and the service-wide
 * caps when the run has them (a full cap: 503). Each
 * connection runs in its own thread; stopping wakes them all (eventfd) and
 * waits a bounded time; a thread still resolving a name is detached and
 * frees nothing shared until the last reference goes. */
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
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "net/dnsmsg.h"
#include "net/internal.h"
#include "net/sniff.h"

#define PROXY_MAX_CONNS 32
#define PROXY_MAX_TOTAL 4096
#define PROXY_BYTE_CAP (256ull * 1024 * 1024)
#define PROXY_HEAD_MAX 16384
#define PROXY_HEAD_TIMEOUT_MS 10000
#define PROXY_CONNECT_TIMEOUT_MS 10000
#define PROXY_REPLY_TIMEOUT_MS 2000
#define PROXY_STOP_GRACE_MS 2000
#define PROXY_RELAY_BUF 16384
#define PROXY_MAX_ADDRS 16
#define PROXY_STACK (256 * 1024)

struct worker {
	pthread_t thread;
	bool used;
	bool done;
};

struct moat_proxy {
	pthread_mutex_t mu;
	unsigned refs;
	int stop_fd;
	int sock_fd;
	int listen_fd;
	pthread_t acceptor;
	bool acceptor_started;
	struct moat_allowlist al;
	struct worker workers[PROXY_MAX_CONNS];
	uint64_t total;
	uint64_t bytes;
	struct moat_netlog *log;
	_Atomic uint64_t out_bufs; /* the outbound sockets' large buffers */
	struct moat_relay_caps *caps; /* shared with other runs, or NULL */
	int64_t idle_ms;
	char idle_why[96];
};

struct conn {
	struct moat_proxy *p;
	int slot;
	int cfd;
	int ofd;
	int log_idx;
	uint64_t bufs; /* charged to p->out_bufs */
	uint64_t sent, received;
	char *head;
	size_t head_len, have;
	const struct moat_host *host; /* of the request relayed (http) */
	uint16_t port;
	bool one;                     /* one HTTP request: what the client sends is body */
	struct moat_http_body body;   /* ... parsed here */
	bool extra;                   /* bytes after it were refused (logged) */
	bool reset;                   /* idle, refused or malformed: both ends reset */
};

_Static_assert(PROXY_HEAD_MAX >= MOAT_SNIFF_MAX, "a tunnel's first bytes are read into the head's buffer");

static void proxy_unref(struct moat_proxy *p)
{
	pthread_mutex_lock(&p->mu);
	unsigned left = --p->refs;
	pthread_mutex_unlock(&p->mu);
	if (left)
		return;
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	if (p->sock_fd >= 0)
		close(p->sock_fd);
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	moat_allowlist_free(&p->al);
	moat_netlog_unref(p->log);
	moat_relay_caps_release(p->caps);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static int wait_fd(struct moat_proxy *p, int fd, short events, int64_t deadline)
{
	return moat_wait_or_stop(fd, events, p->stop_fd, deadline);
}

static int write_all(struct moat_proxy *p, int fd, const char *buf, size_t len, int64_t deadline)
{
	return moat_send_all_until(fd, buf, len, p->stop_fd, deadline);
}

/* ---- log ---- */

static int log_add(struct moat_proxy *p, const char *method, const char *host, uint16_t port)
{
	return moat_netlog_add(p->log, "proxy", method, host, port);
}

static void log_verdict(struct conn *c, bool allowed, const char *reason)
{
	moat_netlog_verdict(c->p->log, c->log_idx, allowed, reason);
}

/* ---- replies ---- */

/* reason: our own text (printable ASCII) */
static void reply(struct conn *c, int code, const char *phrase, const char *header,
		  const char *reason)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf,
			 "HTTP/1.1 %d %s\r\n%s: %s\r\nContent-Type: text/plain\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
			 code, phrase, header, reason, strlen(reason) + 1, reason);
	if (n > 0 && (size_t)n < sizeof buf)
		(void)write_all(c->p, c->cfd, buf, (size_t)n, moat_mono_ms() + PROXY_REPLY_TIMEOUT_MS);
}

static void refuse(struct conn *c, const char *reason)
{
	log_verdict(c, false, reason);
	reply(c, 403, "Forbidden", "X-Moat-Refused", reason);
}

static void bad_request(struct conn *c, const char *reason)
{
	moat_netlog_count(c->p->log, MOAT_NETLOG_MALFORMED, 1);
	reply(c, 400, "Bad Request", "X-Moat-Refused", reason);
}

/* ---- the request head ---- */

static int read_head(struct conn *c)
{
	c->head = malloc(PROXY_HEAD_MAX + 1);
	if (!c->head)
		return -1;
	int64_t deadline = moat_mono_ms() + PROXY_HEAD_TIMEOUT_MS;
	for (;;) {
		if (c->have >= 4) {
			char *end = memmem(c->head, c->have, "\r\n\r\n", 4);
			if (end) {
				c->head_len = (size_t)(end - c->head) + 4;
				return 0;
			}
		}
		if (c->have >= PROXY_HEAD_MAX) {
			bad_request(c, "request head larger than 16 KiB");
			return -1;
		}
		ssize_t n = recv(c->cfd, c->head + c->have, PROXY_HEAD_MAX - c->have, 0);
		if (n > 0) {
			c->have += (size_t)n;
			continue;
		}
		if (n == 0)
			return -1;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		int w = wait_fd(c->p, c->cfd, POLLIN, deadline);
		if (w == 0)
			bad_request(c, "timed out reading the request head");
		if (w <= 0)
			return -1;
	}
}

static bool is_tchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool name_is(const struct moat_proxy_header *h, const char *name)
{
	return h->name_len == strlen(name) && !strncasecmp(h->name, name, h->name_len);
}

/* Splits the head into the request line and headers; NULL on success or
 * the reason it is malformed. */
static const char *parse_head(const char *head, size_t head_len, struct moat_proxy_request *rq)
{
	const char *s = head, *end = head + head_len - 2; /* keep the last CRLF */
	const char *eol = memmem(s, (size_t)(end - s), "\r\n", 2);
	if (!eol)
		return "malformed request line";
	const char *sp1 = memchr(s, ' ', (size_t)(eol - s));
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', (size_t)(eol - sp2 - 1)))
		return "malformed request line";
	rq->method = s;
	rq->method_len = (size_t)(sp1 - s);
	rq->target = sp1 + 1;
	rq->target_len = (size_t)(sp2 - sp1 - 1);
	rq->version = sp2 + 1;
	if (rq->method_len == 0 || rq->method_len > 32 || rq->target_len == 0)
		return "malformed request line";
	for (size_t i = 0; i < rq->method_len; i++)
		if (!is_tchar(s[i]))
			return "malformed request line";
	for (size_t i = 0; i < rq->target_len; i++)
		if ((unsigned char)rq->target[i] <= 0x20 || (unsigned char)rq->target[i] >= 0x7f)
			return "malformed request target";
	if ((size_t)(eol - rq->version) != 8 ||
	    (memcmp(rq->version, "HTTP/1.1", 8) && memcmp(rq->version, "HTTP/1.0", 8)))
		return "only HTTP/1.0 and HTTP/1.1 are supported";
	size_t cap = 0;
	for (const char *l = eol + 2; l < end;) {
		const char *le = memmem(l, (size_t)(end - l) + 2, "\r\n", 2);
		if (!le)
			return "malformed header";
		if (*l == ' ' || *l == '\t')
			return "folded headers are not accepted";
		const char *colon = memchr(l, ':', (size_t)(le - l));
		if (!colon || colon == l)
			return "malformed header";
		for (const char *k = l; k < colon; k++)
			if (!is_tchar(*k))
				return "malformed header name";
		const char *v = colon + 1, *ve = le;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (const char *k = v; k < ve; k++)
			if ((unsigned char)*k < 0x20 && *k != '\t')
				return "control characters in a header";
		if (rq->nh == cap) {
			cap = cap ? cap * 2 : 16;
			struct moat_proxy_header *nh = realloc(rq->h, cap * sizeof *nh);
			if (!nh)
				return "out of memory";
			rq->h = nh;
		}
		rq->h[rq->nh++] = (struct moat_proxy_header){ l, v, (size_t)(colon - l), (size_t)(ve - v) };
		l = le + 2;
	}
	/* a bare CR or LF anywhere in the head */
	for (const char *k = head; k < head + head_len; k++)
		if ((*k == '\r' && k[1] != '\n') || (*k == '\n' && (k == head || k[-1] != '\r')))
			return "bare CR or LF in the request head";
	return NULL;
}

/* host[:port] of an authority; default_port when absent. */
static int parse_authority(const char *s, size_t len, uint16_t default_port, bool port_required,
			   struct moat_host *h, uint16_t *port)
{
	if (memchr(s, '@', len))
		return -1;
	size_t hlen = len;
	const char *ps = NULL;
	if (len && s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (!close)
			return -1;
		hlen = (size_t)(close - s) + 1;
		if (hlen < len) {
			if (s[hlen] != ':')
				return -1;
			ps = s + hlen + 1;
		}
	} else {
		const char *colon = memchr(s, ':', len);
		if (colon) {
			hlen = (size_t)(colon - s);
			ps = colon + 1;
		}
	}
	if (moat_host_parse(s, hlen, h) < 0)
		return -1;
	if (!ps) {
		if (port_required)
			return -1;
		*port = default_port;
		return 0;
	}
	size_t pl = (size_t)(s + len - ps);
	if (pl == 0 || pl > 5)
		return -1;
	unsigned v = 0;
	for (size_t i = 0; i < pl; i++) {
		if (ps[i] < '0' || ps[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(ps[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

int moat_proxy_parse_request(const char *head, size_t head_len, struct moat_proxy_request *rq,
			     const char **reason)
{
	memset(rq, 0, sizeof *rq);
	*reason = NULL;
	if (head_len < 4 || memcmp(head + head_len - 4, "\r\n\r\n", 4)) {
		*reason = "malformed request head";
		return MOAT_PROXY_BAD;
	}
	const char *bad = parse_head(head, head_len, rq);
	if (bad) {
		*reason = bad;
		return MOAT_PROXY_BAD;
	}
	rq->tunnel = rq->method_len == 7 && !memcmp(rq->method, "CONNECT", 7);
	if (rq->tunnel) {
		if (parse_authority(rq->target, rq->target_len, 0, true, &rq->host, &rq->port) < 0) {
			*reason = "CONNECT needs host:port (a valid ASCII host name or IP address)";
			return MOAT_PROXY_BAD;
		}
		rq->logged = true;
		return MOAT_PROXY_OK;
	}
	if (rq->target_len >= 8 && !strncasecmp(rq->target, "https://", 8)) {
		*reason = "https:// URLs go through CONNECT";
		return MOAT_PROXY_BAD;
	}
	if (rq->target_len < 7 || strncasecmp(rq->target, "http://", 7)) {
		*reason = "not a proxy request (expected an absolute http:// URL or CONNECT)";
		return MOAT_PROXY_BAD;
	}
	const char *auth = rq->target + 7;
	size_t alen = 0;
	while (7 + alen < rq->target_len && !strchr("/?#", auth[alen]))
		alen++;
	if (parse_authority(auth, alen, 80, false, &rq->host, &rq->port) < 0) {
		*reason = "malformed host in the URL (ASCII names and IP addresses only)";
		return MOAT_PROXY_BAD;
	}
	rq->path = auth + alen;
	rq->path_len = rq->target_len - 7 - alen;
	const char *frag = memchr(rq->path, '#', rq->path_len);
	if (frag)
		rq->path_len = (size_t)(frag - rq->path);
	/* Content-Length only; one Host, naming the URL's host and port */
	size_t nhost = 0, ncl = 0;
	const struct moat_proxy_header *hosth = NULL;
	for (size_t i = 0; i < rq->nh; i++) {
		if (name_is(&rq->h[i], "transfer-encoding")) {
			rq->logged = true;
			*reason = "Transfer-Encoding request bodies are not supported";
			return MOAT_PROXY_REFUSED;
		}
		if (name_is(&rq->h[i], "upgrade") || name_is(&rq->h[i], "http2-settings")) {
			rq->logged = true;
			*reason = "Upgrade requests (h2c, WebSocket) are not relayed: one HTTP/1.x "
				  "request per connection";
			return MOAT_PROXY_REFUSED;
		}
		if (name_is(&rq->h[i], "host")) {
			nhost++;
			hosth = &rq->h[i];
		}
		if (name_is(&rq->h[i], "content-length")) {
			uint64_t v = 0;
			if (rq->h[i].value_len == 0 || rq->h[i].value_len > 15) {
				*reason = "bad Content-Length";
				return MOAT_PROXY_BAD;
			}
			for (size_t k = 0; k < rq->h[i].value_len; k++) {
				char d = rq->h[i].value[k];
				if (d < '0' || d > '9') {
					*reason = "bad Content-Length";
					return MOAT_PROXY_BAD;
				}
				v = v * 10 + (uint64_t)(d - '0');
			}
			if (ncl++ && v != rq->body) {
				*reason = "conflicting Content-Length headers";
				return MOAT_PROXY_BAD;
			}
			rq->body = v;
		}
	}
	rq->logged = true;
	if (nhost > 1) {
		*reason = "more than one Host header";
		return MOAT_PROXY_REFUSED;
	}
	if (hosth) {
		struct moat_host hh;
		uint16_t hp = 0;
		if (parse_authority(hosth->value, hosth->value_len, 80, false, &hh, &hp) < 0 ||
		    strcmp(hh.text, rq->host.text) || hp != rq->port) {
			*reason = "the Host header does not match the request URL";
			return MOAT_PROXY_REFUSED;
		}
	} else if (!memcmp(rq->version, "HTTP/1.1", 8)) {
		*reason = "HTTP/1.1 request without a Host header";
		return MOAT_PROXY_BAD;
	}
	return MOAT_PROXY_OK;
}

/* ---- upstream ---- */

struct addr {
	int family;
	uint8_t a[16];
};

/* Resolves (names, with the host's DNS only) and checks every address;
 * fills ok[] with the permitted ones. NULL, or the refusal reason (written
 * into why): for a name, the same whether it does not exist or none of its
 * addresses may be reached. */
static const char *resolve_checked(struct conn *c, const struct moat_host *h, struct addr *ok,
				   size_t *nok, char *why, size_t whylen)
{
	*nok = 0;
	struct addr all[PROXY_MAX_ADDRS];
	size_t n = 0;
	if (h->kind == MOAT_HOST_IPV4) {
		all[0].family = AF_INET;
		memcpy(all[0].a, h->addr, 4);
		n = 1;
	} else if (h->kind == MOAT_HOST_IPV6) {
		all[0].family = AF_INET6;
		memcpy(all[0].a, h->addr, 16);
		n = 1;
	} else {
		/* the host's DNS only, as moat's DNS answerer asks it */
		for (int f = 0; f < 2; f++) {
			struct moat_dns_addr got[PROXY_MAX_ADDRS];
			size_t ng = 0;
			int fam = f ? AF_INET6 : AF_INET;
			(void)moat_resolve(h->text, fam, got, PROXY_MAX_ADDRS, &ng);
			for (size_t k = 0; k < ng && n < PROXY_MAX_ADDRS; k++) {
				all[n].family = fam;
				memcpy(all[n].a, got[k].a, 16);
				n++;
			}
		}
	}
	const char *first = NULL;
	char first_text[160] = "";
	for (size_t i = 0; i < n; i++) {
		moat_addr_unmap(&all[i].family, all[i].a);
		const char *r = moat_egress_refusal_text(&c->p->al, all[i].family, all[i].a,
							 first ? NULL : first_text, sizeof first_text);
		if (!r)
			ok[(*nok)++] = all[i];
		else if (!first)
			first = r;
	}
	if (*nok)
		return NULL;
	if (h->kind == MOAT_HOST_NAME) /* never which: that tells the host's names */
		snprintf(why, whylen, "%s: %s", h->text, MOAT_NET_NO_NAME);
	else
		snprintf(why, whylen, "%s is not allowed", first_text);
	return why;
}

static int connect_one(struct conn *c, const struct addr *a, uint16_t port, int64_t deadline)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	memset(&ss, 0, sizeof ss);
	if (a->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, a->a, 4);
		sl = sizeof *sin;
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, a->a, 16);
		sl = sizeof *sin6;
	}
	moat_net_out_release(&c->p->out_bufs, c->bufs);
	c->bufs = 0;
	int fd = moat_net_out_socket(a->family, &c->p->out_bufs, &c->bufs);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
		return fd;
	if (errno == EINPROGRESS && wait_fd(c->p, fd, POLLOUT, deadline) == 1) {
		int e = 0;
		socklen_t el = sizeof e;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
			return fd;
	}
	close(fd);
	return -1;
}

/* ---- relay ---- */

static bool count_bytes(struct moat_proxy *p, size_t n)
{
	pthread_mutex_lock(&p->mu);
	p->bytes += n;
	bool over = p->bytes > PROXY_BYTE_CAP;
	pthread_mutex_unlock(&p->mu);
	return !over;
}

/* What the client sends after its one request's body: dropped; the first
 * time logged as a refused request of its own (naming the host it asks for
 * when its head is all there: a proxy request's, or in a tunnel an origin
 * server's). */
static void refuse_extra(struct conn *c, const char *p, size_t n)
{
	if (c->extra || !c->host)
		return;
	c->extra = true;
	struct moat_proxy_request rq;
	const char *bad;
	const char *end = memmem(p, n, "\r\n\r\n", 4);
	bool named = end && moat_proxy_parse_request(p, (size_t)(end - p) + 4, &rq, &bad) !=
					 MOAT_PROXY_BAD && rq.logged;
	char origin[254] = "";
	struct moat_http_req hr;
	if (!named && moat_sniff_request((const uint8_t *)p, n, origin, &hr) != MOAT_SNIFF_HTTP)
		origin[0] = '\0';
	int idx = log_add(c->p, "HTTP", named ? rq.host.text : origin[0] ? origin : c->host->text,
			  named ? rq.port : c->port);
	if (end)
		free(rq.h);
	moat_netlog_verdict(c->p->log, idx, false,
			    "a second request on one proxy connection: the proxy relays one "
			    "request per connection (with Connection: close) and drops what follows");
}

/* Of n bytes from the client, how many go out: all in a TLS tunnel; of one
 * HTTP request (c->one) the rest of its body, what follows dropped (the
 * first time logged); -1 when its body's framing is malformed (logged; the
 * connection is reset). */
static ssize_t body_filter(struct conn *c, const char *p, size_t n)
{
	if (!c->one)
		return (ssize_t)n;
	size_t used = 0; /* once the body is complete: 1, none of them */
	const char *bad;
	int r = moat_http_body_feed(&c->body, (const uint8_t *)p, n, &used, &bad);
	if (r == 1 && used < n)
		refuse_extra(c, p + used, n - used);
	if (r >= 0)
		return (ssize_t)used;
	char why[200];
	snprintf(why, sizeof why, "HTTP request body refused: %s", bad);
	log_verdict(c, false, why);
	c->reset = true;
	return -1;
}

/* Both ways until done; the client's bytes through body_filter. tunnel: a
 * half close is passed on (else the origin's end ends it). */
static void relay(struct conn *c, bool tunnel, const char **end_reason)
{
	char *up = malloc(PROXY_RELAY_BUF), *down = malloc(PROXY_RELAY_BUF);
	size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
	bool c_eof = false, o_eof = false, o_shut = false, c_shut = false;
	*end_reason = NULL;
	if (!up || !down)
		goto out;
	for (;;) {
		if (o_eof && down_len == down_off) {
			if (!tunnel || c_eof)
				break;
			if (!c_shut) {
				shutdown(c->cfd, SHUT_WR);
				c_shut = true;
			}
		}
		if (c_eof && up_len == up_off && tunnel && !o_shut) {
			shutdown(c->ofd, SHUT_WR);
			o_shut = true;
		}
		if (c_eof && o_eof && up_len == up_off && down_len == down_off)
			break;
		struct pollfd pf[3] = {
			{ .fd = c->cfd, .events = (short)((!c_eof && up_len == up_off ? POLLIN : 0) |
							  (down_len > down_off ? POLLOUT : 0)) },
			{ .fd = c->ofd, .events = (short)((!o_eof && down_len == down_off ? POLLIN : 0) |
							  (up_len > up_off ? POLLOUT : 0)) },
			{ .fd = c->p->stop_fd, .events = POLLIN },
		};
		int r = poll(pf, 3, (int)c->p->idle_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[2].revents) {
			*end_reason = "the run ended";
			break;
		}
		if (r == 0) {
			*end_reason = c->p->idle_why;
			c->reset = true;
			break;
		}
		if ((pf[0].revents & (POLLERR | POLLNVAL)) || (pf[1].revents & (POLLERR | POLLNVAL)))
			break;
		/* client → origin */
		if (pf[0].revents & (POLLIN | POLLHUP) && !c_eof && up_len == up_off) {
			ssize_t n = recv(c->cfd, up, PROXY_RELAY_BUF, 0);
			if (n == 0) {
				c_eof = true;
			} else if (n > 0) {
				if (!count_bytes(c->p, (size_t)n)) {
					*end_reason = "byte cap reached";
					break;
				}
				ssize_t keep = body_filter(c, up, (size_t)n);
				if (keep < 0)
					break;
				up_len = (size_t)keep;
				up_off = 0;
				c->sent += (size_t)keep;
			} else if (errno != EINTR && errno != EAGAIN) {
				break;
			}
		}
		if (pf[1].revents & POLLOUT && up_len > up_off) {
			ssize_t n = send(c->ofd, up + up_off, up_len - up_off, MSG_NOSIGNAL);
			if (n > 0)
				up_off += (size_t)n;
			else if (n < 0 && errno != EINTR && errno != EAGAIN)
				break;
			if (up_off == up_len)
				up_len = up_off = 0;
		}
		/* origin → client */
		if (pf[1].revents & (POLLIN | POLLHUP) && !o_eof && down_len == down_off) {
			ssize_t n = recv(c->ofd, down, PROXY_RELAY_BUF, 0);
			if (n == 0) {
				o_eof = true;
			} else if (n > 0) {
				if (!count_bytes(c->p, (size_t)n)) {
					*end_reason = "byte cap reached";
					break;
				}
				down_len = (size_t)n;
				down_off = 0;
				c->received += (size_t)n;
			} else if (errno != EINTR && errno != EAGAIN) {
				break;
			}
		}
		if (pf[0].revents & POLLOUT && down_len > down_off) {
			ssize_t n = send(c->cfd, down + down_off, down_len - down_off, MSG_NOSIGNAL);
			if (n > 0)
				down_off += (size_t)n;
			else if (n < 0 && errno != EINTR && errno != EAGAIN)
				break;
			if (down_off == down_len)
				down_len = down_off = 0;
		}
	}
out:
	free(up);
	free(down);
}

/* ---- a CONNECT tunnel ---- */

const char *moat_proxy_tunnel_refusal(const struct moat_allowlist *al,
				      const struct moat_host *target, uint16_t port,
				      enum moat_sniff_kind kind, const char *name,
				      const struct moat_http_req *req, struct moat_host *seen,
				      char *why, size_t whylen)
{
	if (kind == MOAT_SNIFF_TLS && !name[0] && target->kind != MOAT_HOST_NAME) {
		*seen = *target; /* TLS names no IP address in its SNI (RFC 6066) */
		return NULL;
	}
	const char *no = moat_sniff_host(kind, name, req, seen, why, whylen);
	if (no)
		return no;
	bool tls = kind == MOAT_SNIFF_TLS;
	if (strcmp(seen->text, target->text)) {
		snprintf(why, whylen, "the %s names %s, not the CONNECT host %s",
			 tls ? "TLS SNI" : "HTTP Host header", seen->text, target->text);
		return why;
	}
	return moat_allowlist_refusal(al, tls, seen, port, why, whylen);
}

/* After "200 Connection established": the tunnel's first bytes (extra of
 * them came with the CONNECT head) judged as the transparent path judges a
 * connection's, then TLS relayed both ways, or one plain HTTP request (its
 * head with "Connection: close", its body, nothing after it). A refusal
 * resets both ends; the entry then names the host the bytes asked for. */
static void tunnel_relay(struct conn *c, const struct moat_host *h, uint16_t port, size_t extra)
{
	static const char ok200[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	if (write_all(c->p, c->cfd, ok200, sizeof ok200 - 1,
		      moat_mono_ms() + PROXY_REPLY_TIMEOUT_MS) < 0)
		return;
	char *buf = c->head; /* PROXY_HEAD_MAX >= MOAT_SNIFF_MAX */
	memmove(buf, c->head + c->head_len, extra);
	size_t len = extra;
	char name[254] = "", why[600];
	struct moat_http_req req;
	struct moat_host seen = { 0 };
	enum moat_sniff_kind kind;
	const char *no = moat_sniff_read(c->cfd, c->p->stop_fd, (uint8_t *)buf, &len,
					 moat_mono_ms() + PROXY_HEAD_TIMEOUT_MS, name, &req, &kind);
	if (!no)
		no = moat_proxy_tunnel_refusal(&c->p->al, h, port, kind, name, &req, &seen, why,
					       sizeof why);
	if (no) {
		if (seen.text[0])
			moat_netlog_host(c->p->log, c->log_idx, seen.text, NULL);
		log_verdict(c, false, no);
		c->reset = true;
		return;
	}
	if (!count_bytes(c->p, len)) {
		log_verdict(c, true, "byte cap reached");
		return;
	}
	size_t at = 0;
	if (kind == MOAT_SNIFF_HTTP) {
		uint8_t *head = malloc(req.head_len + MOAT_HTTP_CLOSE_EXTRA);
		if (!head)
			return;
		size_t k = moat_http_close_head((const uint8_t *)buf, req.head_len, head);
		int rc = write_all(c->p, c->ofd, (const char *)head, k,
				   moat_mono_ms() + PROXY_CONNECT_TIMEOUT_MS);
		free(head);
		if (rc < 0)
			return;
		c->sent += k;
		at = req.head_len;
		c->one = true;
		moat_http_body_init(&c->body, &req);
	}
	ssize_t n = body_filter(c, buf + at, len - at);
	if (n < 0 || (n && write_all(c->p, c->ofd, buf + at, (size_t)n,
				     moat_mono_ms() + PROXY_CONNECT_TIMEOUT_MS) < 0))
		return;
	c->sent += (size_t)n;
	const char *end_reason;
	relay(c, true, &end_reason);
	if (end_reason)
		log_verdict(c, true, end_reason);
}

/* ---- one connection ---- */

static void handle(struct conn *c)
{
	if (read_head(c) < 0)
		return;
	struct moat_proxy_request rq;
	const char *bad = NULL;
	int verdict = moat_proxy_parse_request(c->head, c->head_len, &rq, &bad);
	bool tunnel = rq.tunnel;
	const struct moat_host h = rq.host;
	uint16_t port = rq.port;
	const char *path = rq.path;
	size_t path_len = rq.path_len;
	uint64_t body = rq.body;
	char why[600];
	struct addr ok[PROXY_MAX_ADDRS];
	size_t nok = 0;
	if (rq.logged)
		c->log_idx = log_add(c->p, tunnel ? "CONNECT" : "HTTP", h.text, port);
	if (verdict == MOAT_PROXY_BAD) {
		bad_request(c, bad);
		goto out;
	}
	if (verdict == MOAT_PROXY_REFUSED) {
		refuse(c, bad);
		goto out;
	}
	const char *r = moat_allowlist_refusal(&c->p->al, tunnel, &h, port, why, sizeof why);
	if (r) {
		refuse(c, r);
		goto out;
	}
	r = resolve_checked(c, &h, ok, &nok, why, sizeof why);
	if (r) {
		refuse(c, r);
		goto out;
	}
	int64_t deadline = moat_mono_ms() + PROXY_CONNECT_TIMEOUT_MS;
	for (size_t i = 0; i < nok && c->ofd < 0; i++)
		c->ofd = connect_one(c, &ok[i], port, deadline);
	if (c->ofd < 0) {
		log_verdict(c, false, "connection to the host failed");
		reply(c, 502, "Bad Gateway", "X-Moat-Error", "connection to the host failed");
		goto out;
	}
	log_verdict(c, true, NULL);
	size_t extra = c->have - c->head_len; /* bytes after the head */
	c->host = &h;
	c->port = port;
	if (tunnel) {
		tunnel_relay(c, &h, port, extra);
		goto out;
	}
	{
		/* the request in origin form, hop-by-hop headers dropped */
		struct moat_buf b = { 0 };
		moat_buf_append(&b, rq.method, rq.method_len);
		moat_buf_append(&b, " ", 1);
		if (path_len == 0 || path[0] != '/')
			moat_buf_append(&b, "/", 1);
		moat_buf_append(&b, path, path_len);
		moat_buf_append(&b, " ", 1);
		moat_buf_append(&b, rq.version, 8);
		moat_buf_append(&b, "\r\n", 2);
		bool have_host = false;
		for (size_t i = 0; i < rq.nh; i++) {
			const struct moat_proxy_header *hd = &rq.h[i];
			if (name_is(hd, "connection") || name_is(hd, "proxy-connection") ||
			    name_is(hd, "keep-alive") || name_is(hd, "proxy-authorization") ||
			    name_is(hd, "te") || name_is(hd, "upgrade") || name_is(hd, "trailer"))
				continue;
			have_host |= name_is(hd, "host");
			moat_buf_append(&b, hd->name, hd->name_len);
			moat_buf_append(&b, ": ", 2);
			moat_buf_append(&b, hd->value, hd->value_len);
			moat_buf_append(&b, "\r\n", 2);
		}
		if (!have_host)
			moat_buf_appendf(&b, "Host: %s%s%s:%u\r\n", h.kind == MOAT_HOST_IPV6 ? "[" : "",
					 h.text, h.kind == MOAT_HOST_IPV6 ? "]" : "", port);
		moat_buf_append(&b, "Connection: close\r\n\r\n", 21);
		c->one = true;
		moat_http_body_init(&c->body, &(struct moat_http_req){ .length = body });
		ssize_t first = body_filter(c, c->head + c->head_len, extra);
		moat_buf_append(&b, c->head + c->head_len, first > 0 ? (size_t)first : 0);
		c->sent += first > 0 ? (size_t)first : 0;
		bool oom = b.oom;
		int wr = oom ? -1 : write_all(c->p, c->ofd, b.data, b.len,
					       moat_mono_ms() + PROXY_CONNECT_TIMEOUT_MS);
		moat_buf_free(&b);
		if (wr < 0)
			goto out;
		const char *end_reason;
		relay(c, false, &end_reason);
		if (end_reason)
			log_verdict(c, true, end_reason);
	}
out:
	free(rq.h);
}

static void *worker_main(void *arg)
{
	struct conn *c = arg;
	struct moat_proxy *p = c->p;
	handle(c);
	moat_netlog_bytes(p->log, c->log_idx, c->sent, c->received);
	if (c->reset) {
		moat_net_reset_close(c->cfd);
		if (c->ofd >= 0)
			moat_net_reset_close(c->ofd);
	} else {
		close(c->cfd);
		if (c->ofd >= 0)
			close(c->ofd);
	}
	moat_net_out_release(&p->out_bufs, c->bufs);
	moat_relay_caps_give(p->caps, MOAT_RELAY_TCP);
	free(c->head);
	pthread_mutex_lock(&p->mu);
	p->workers[c->slot].done = true;
	pthread_mutex_unlock(&p->mu);
	free(c);
	proxy_unref(p);
	return NULL;
}

/* ---- acceptor ---- */

static int receive_listener(struct moat_proxy *p)
{
	for (;;) {
		int w = wait_fd(p, p->sock_fd, POLLIN, moat_mono_ms() + 24LL * 3600 * 1000);
		if (w <= 0)
			return -1;
		char byte;
		int fd;
		size_t nfd = 0;
		ssize_t n = moat_recv_fds(p->sock_fd, &byte, 1, &fd, 1, &nfd, MSG_DONTWAIT);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0 || nfd != 1) {
			if (nfd)
				close(fd);
			return -1; /* the sandbox ended before passing it */
		}
		int listening = 0;
		socklen_t l = sizeof listening;
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l) < 0 || !listening) {
			close(fd);
			return -1;
		}
		if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
			close(fd);
			return -1;
		}
		p->listen_fd = fd;
		close(p->sock_fd);
		p->sock_fd = -1;
		return 0;
	}
}

static void reap_workers(struct moat_proxy *p)
{
	for (int i = 0; i < PROXY_MAX_CONNS; i++) {
		pthread_mutex_lock(&p->mu);
		bool done = p->workers[i].used && p->workers[i].done;
		pthread_mutex_unlock(&p->mu);
		if (done) {
			pthread_join(p->workers[i].thread, NULL);
			p->workers[i].used = p->workers[i].done = false;
		}
	}
}

static void refuse_busy(struct moat_proxy *p, int fd, const char *why, bool log)
{
	if (log)
		moat_netlog_verdict(p->log, log_add(p, NULL, "?", 0), false, why);
	char buf[256];
	int n = snprintf(buf, sizeof buf,
			 "HTTP/1.1 503 Service Unavailable\r\nX-Moat-Refused: %s\r\n"
			 "Content-Length: 0\r\nConnection: close\r\n\r\n", why);
	if (n > 0)
		(void)send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	moat_netlog_count(p->log, MOAT_NETLOG_BUSY, 1);
}

static void *acceptor_main(void *arg)
{
	struct moat_proxy *p = arg;
	if (receive_listener(p) < 0)
		return NULL;
	pthread_attr_t attr;
	bool have_attr = pthread_attr_init(&attr) == 0;
	if (have_attr)
		pthread_attr_setstacksize(&attr, PROXY_STACK);
	for (;;) {
		if (wait_fd(p, p->listen_fd, POLLIN, moat_mono_ms() + 60000) < 0)
			break;
		reap_workers(p);
		int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		int slot = -1;
		for (int i = 0; i < PROXY_MAX_CONNS && slot < 0; i++)
			if (!p->workers[i].used)
				slot = i;
		pthread_mutex_lock(&p->mu);
		bool over_total = p->total >= PROXY_MAX_TOTAL;
		bool over_bytes = p->bytes > PROXY_BYTE_CAP;
		if (!over_total && slot >= 0)
			p->total++;
		pthread_mutex_unlock(&p->mu);
		if (slot < 0 || over_total || over_bytes) {
			refuse_busy(p, fd, slot < 0 ? "too many connections at once"
					   : over_total ? "connection limit of the run reached"
							: "byte limit of the run reached", false);
			continue;
		}
		if (!moat_relay_caps_take(p->caps, MOAT_RELAY_TCP)) {
			refuse_busy(p, fd, MOAT_NET_CAPS_FULL, true);
			continue;
		}
		struct conn *c = calloc(1, sizeof *c);
		if (!c) {
			moat_relay_caps_give(p->caps, MOAT_RELAY_TCP);
			close(fd);
			continue;
		}
		c->p = p;
		c->slot = slot;
		c->cfd = fd;
		c->ofd = -1;
		c->log_idx = -1;
		pthread_mutex_lock(&p->mu);
		p->refs++;
		p->workers[slot].used = true;
		p->workers[slot].done = false;
		pthread_mutex_unlock(&p->mu);
		if (pthread_create(&p->workers[slot].thread, have_attr ? &attr : NULL, worker_main, c) != 0) {
			pthread_mutex_lock(&p->mu);
			p->refs--;
			p->workers[slot].used = false;
			pthread_mutex_unlock(&p->mu);
			moat_relay_caps_give(p->caps, MOAT_RELAY_TCP);
			close(fd);
			free(c);
		}
	}
	if (have_attr)
		pthread_attr_destroy(&attr);
	return NULL;
}

/* ---- interface ---- */

int moat_proxy_new(struct moat_allowlist *al, struct moat_netlog *log, int sock_fd,
		   struct moat_relay_caps *caps, struct moat_proxy **out, struct moat_error *err)
{
	struct moat_proxy *p = calloc(1, sizeof *p);
	if (!p) {
		close(sock_fd);
		return moat_error_oom(err);
	}
	p->refs = 1;
	p->sock_fd = sock_fd;
	p->listen_fd = -1;
	p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p->log = moat_netlog_ref(log);
	p->caps = moat_relay_caps_ref(caps);
	p->idle_ms = moat_net_relay_idle_ms();
	moat_net_idle_reason(p->idle_ms, p->idle_why, sizeof p->idle_why);
	pthread_mutex_init(&p->mu, NULL);
	p->al = *al;
	memset(al, 0, sizeof *al);
	if (p->stop_fd < 0) {
		int e = errno;
		proxy_unref(p);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "cannot set up the proxy: %s",
				      strerror(e));
	}
	*out = p;
	return 0;
}

int moat_proxy_start(struct moat_proxy *p, struct moat_error *err)
{
	int rc = pthread_create(&p->acceptor, NULL, acceptor_main, p);
	if (rc != 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, rc, "cannot start the proxy: %s",
				      strerror(rc));
	p->acceptor_started = true;
	return 0;
}

void moat_proxy_stop(struct moat_proxy *p)
{
	if (!p)
		return;
	uint64_t one = 1;
	if (write(p->stop_fd, &one, sizeof one) < 0) {
		/* an eventfd write cannot fail short of overflow */
	}
	if (p->acceptor_started)
		pthread_join(p->acceptor, NULL);
	int64_t deadline = moat_mono_ms() + PROXY_STOP_GRACE_MS;
	for (int i = 0; i < PROXY_MAX_CONNS; i++) {
		if (!p->workers[i].used)
			continue;
		int64_t left = deadline - moat_mono_ms();
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (left < 0)
			left = 0;
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (pthread_timedjoin_np(p->workers[i].thread, NULL, &ts) != 0)
			pthread_detach(p->workers[i].thread); /* stuck resolving: it lets go itself */
		p->workers[i].used = false;
	}
	moat_netlog_count(p->log, MOAT_NETLOG_BYTES, p->bytes);
	proxy_unref(p);
}
