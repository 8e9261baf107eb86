/* E2B's "other ports" (docs/E2B.md, "The sandbox's own servers"): a
 * request to the sandbox URL whose E2b-Sandbox-Port is neither envd's nor
 * the code interpreter's goes to the server the sandbox runs on that port,
 * on its own loopback (127.0.0.1 in its network namespace), through the
 * agent's socket (live_connect). Authenticated as envd is (the access
 * token, or the traffic token); the request body is taken as every body
 * (at most 6 MiB, the bodies' budget), then sent as HTTP/1.0 with
 * Connection: close, without its hop-by-hop headers and without anything
 * of moat's or E2B's own (the sandbox id and port headers, the tokens, the
 * API key, and any header whose value is one of the service's secrets):
 * nothing of the operator's credentials reaches sandboxed code. The
 * answer's status line and headers are read with a bound (FWD_MAX_HEAD
 * bytes, FWD_MAX_HEADERS lines), then its body streamed to the client as
 * the client takes it (the socket read only then: back-pressure up to the
 * sandbox's server), each wait bounded by FWD_IDLE_MS and the client's
 * hang-up. Upgrades (WebSocket) are refused. The sandbox is held busy
 * while a forward lasts; at most LIVE_MAX_CONNS at once a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/e2b.h"

#define FWD_CHUNK (64u * 1024u)
#define FWD_MAX_HEAD (64u * 1024u) /* the answer's status line and headers */
#define FWD_MAX_HEADERS 100u       /* the answer's header lines */
#define FWD_CONNECT_MS 5000        /* the sandbox's server accepts within it */
#define FWD_IDLE_MS 300000         /* the server or the client silent that long: the end */

/* Headers never forwarded, either way: hop-by-hop ones (RFC 9110 7.6.1),
 * the lengths moat sets itself, and (to the sandbox) moat's and E2B's own. */
static const char *const hop[] = { "Connection", "Keep-Alive", "Proxy-Connection",
				   "Transfer-Encoding", "TE", "Trailer", "Upgrade",
				   "Proxy-Authorization", "Proxy-Authenticate", "Content-Length",
				   NULL };
static const char *const own[] = { "E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Access-Token",
				   "E2B-Traffic-Access-Token", "X-API-KEY", "Host", "Expect", NULL };

/* A method, a header's name: a token (RFC 9110 5.6.2). */
static bool token_ok(const char *m)
{
	if (!*m)
		return false;
	for (; *m; m++)
		if (!((*m >= 'A' && *m <= 'Z') || (*m >= 'a' && *m <= 'z') || (*m >= '0' && *m <= '9') ||
		      strchr("!#$%&'*+-.^_`|~", *m)))
			return false;
	return true;
}

static bool listed(const char *const *l, const char *name, size_t n)
{
	for (; *l; l++)
		if (strlen(*l) == n && !strncasecmp(*l, name, n))
			return true;
	return false;
}

/* name is a token of the Connection header's value (a header it names is
 * hop-by-hop too). */
static bool in_connection(const char *conn, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = conn; p && *p;) {
		p += strspn(p, " \t,");
		size_t k = strcspn(p, " \t,");
		if (k == n && !strncasecmp(p, name, n))
			return true;
		p += k;
	}
	return false;
}

/* The value is one of the service's secrets (its token, an E2B key, the
 * sandbox's access token), alone or after "Bearer ". */
static bool secret(struct server *s, const uint8_t *access, const char *v)
{
	if (!strncasecmp(v, "Bearer ", 7))
		v += 7;
	uint8_t h[MOAT_SHA256_LEN];
	moat_sha256(v, strlen(v), h);
	bool hit = (s->auth && serve_ct_equal(h, s->token_hash, MOAT_SHA256_LEN)) ||
		   serve_ct_equal(h, access, MOAT_SHA256_LEN);
	for (unsigned i = 0; i < s->limits.e2b_nkeys; i++)
		hit |= serve_ct_equal(h, s->limits.e2b_keys[i], MOAT_SHA256_LEN);
	return hit;
}

struct head_ctx {
	struct server *s;
	const char *conn; /* the Connection header's value */
	uint8_t access[MOAT_SHA256_LEN];
	struct moat_buf *b;
	bool bad;
};

static enum MHD_Result put_header(void *cls, enum MHD_ValueKind kind, const char *k,
				  const char *v)
{
	(void)kind;
	struct head_ctx *h = cls;
	size_t n = strlen(k);
	if (!v)
		v = "";
	if (listed(hop, k, n) || listed(own, k, n) || in_connection(h->conn, k) ||
	    secret(h->s, h->access, v))
		return MHD_YES;
	if (!token_ok(k) || strpbrk(v, "\r\n")) {
		h->bad = true;
		return MHD_NO;
	}
	moat_buf_appendf(h->b, "%s: %s\r\n", k, v);
	return MHD_YES;
}

/* s percent-encoded but for RFC 3986's unreserved characters and keep. */
static void pct(struct moat_buf *b, const char *s, const char *keep)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p) || (*p && strchr(keep, *p))) {
			moat_buf_append(b, (const char *)p, 1);
		} else {
			char e[3] = { '%', hex[*p >> 4], hex[*p & 15] };
			moat_buf_append(b, e, 3);
		}
	}
}

struct query_ctx {
	struct moat_buf *b;
	bool first;
};

static enum MHD_Result put_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	(void)kind;
	struct query_ctx *x = cls;
	moat_buf_append(x->b, x->first ? "?" : "&", 1);
	x->first = false;
	pct(x->b, k, "");
	if (v) {
		moat_buf_append(x->b, "=", 1);
		pct(x->b, v, "");
	}
	return MHD_YES;
}

/* ---- the answer, streamed ---- */

struct fwd {
	struct server *s;
	struct serve_sbx *x;
	int fd;     /* the sandbox server's connection (live_connect's) */
	int client; /* dup of the client's socket: its hang-up ends a wait */
	char *held; /* the body's bytes read with the head */
	size_t held_len, held_off;
	uint64_t left; /* the body's bytes still to come (Content-Length), else UINT64_MAX */
};

/* Waits up to FWD_IDLE_MS for fd's events (the client's hang-up, the
 * sandbox's end cut it short): > 0 ready, 0 not, -1 an error. */
static int fwd_wait(struct fwd *f, short events)
{
	struct live *lv = serve_sbx_live(f->x);
	for (int64_t waited = 0; waited < FWD_IDLE_MS; waited += 200) {
		struct pollfd p = { .fd = f->fd, .events = events };
		int r = poll(&p, 1, 200);
		if (r > 0 || (r < 0 && errno != EINTR))
			return r;
		if (live_gone(lv) || (f->client >= 0 && live_client_gone(f->client)))
			return -1;
	}
	return 0;
}

static ssize_t fwd_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fwd *f = cls;
	(void)pos;
	if (f->left == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (max > f->left)
		max = (size_t)f->left;
	if (f->held_off < f->held_len) {
		size_t n = f->held_len - f->held_off < max ? f->held_len - f->held_off : max;
		memcpy(buf, f->held + f->held_off, n);
		f->held_off += n;
		if (f->left != UINT64_MAX)
			f->left -= n;
		return (ssize_t)n;
	}
	for (;;) {
		ssize_t n = recv(f->fd, buf, max, MSG_DONTWAIT);
		if (n > 0) {
			if (f->left != UINT64_MAX)
				f->left -= (uint64_t)n;
			return n;
		}
		if (n == 0) /* the end: a body cut short of its length is an error */
			return f->left == UINT64_MAX ? MHD_CONTENT_READER_END_OF_STREAM
						     : MHD_CONTENT_READER_END_WITH_ERROR;
		if (errno != EAGAIN && errno != EINTR)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (errno == EAGAIN && fwd_wait(f, POLLIN) <= 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

static void fwd_free(void *cls)
{
	struct fwd *f = cls;
	live_connect_end(serve_sbx_live(f->x), f->fd);
	if (f->client >= 0)
		close(f->client);
	free(f->held);
	serve_sbx_end(f->s->sandboxes, f->x);
	serve_sbx_put(f->s->sandboxes, f->x);
	free(f);
}

/* All of buf to the sandbox's server: 0, or -1. */
static int fwd_send(struct fwd *f, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(f->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			if (fwd_wait(f, POLLOUT) <= 0)
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

/* The answer's head into h (at most FWD_MAX_HEAD bytes): its length with
 * the blank line, or 0 (closed, silent, too long). */
static size_t fwd_head(struct fwd *f, char *h, size_t *have)
{
	for (;;) {
		char *end = *have >= 4 ? memmem(h, *have, "\r\n\r\n", 4) : NULL;
		if (end)
			return (size_t)(end - h) + 4;
		if (*have == FWD_MAX_HEAD)
			return 0;
		ssize_t n = recv(f->fd, h + *have, FWD_MAX_HEAD - *have, MSG_DONTWAIT);
		if (n > 0)
			*have += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return 0;
		else if (errno == EAGAIN && fwd_wait(f, POLLIN) <= 0)
			return 0;
	}
}

static enum MHD_Result fwd_fail(struct req *q, struct MHD_Connection *c, struct fwd *f,
				unsigned status, const char *msg)
{
	if (f) {
		live_connect_end(serve_sbx_live(f->x), f->fd);
		if (f->client >= 0)
			close(f->client);
		free(f->held);
		free(f);
	}
	return e2b_fail(q, c, status, O_ERROR, msg);
}

/* The answer's head (h, hl bytes with its blank line, NUL-ended at the
 * blank line's start) cut into its header lines: their names and values
 * (at most FWD_MAX_HEADERS), the Content-Length (*len, UINT64_MAX none)
 * and whether a Transfer-Encoding other than identity came. false:
 * malformed (a line without a name and a colon, a folded line, two
 * lengths that differ, too many lines). */
static bool head_lines(char *h, char **name, char **value, size_t *n, uint64_t *len,
		       bool *chunked)
{
	*n = 0;
	*len = UINT64_MAX;
	*chunked = false;
	char *l = strstr(h, "\r\n");
	if (!l)
		return true; /* the status line alone */
	for (l += 2; *l;) {
		char *e = strstr(l, "\r\n");
		if (e)
			*e = '\0';
		char *colon = strchr(l, ':');
		if (*n == FWD_MAX_HEADERS || !colon || strchr(l, '\r') || strchr(l, '\n'))
			return false;
		*colon = '\0';
		if (!token_ok(l))
			return false;
		char *v = colon + 1;
		v += strspn(v, " \t");
		size_t vl = strlen(v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			v[--vl] = '\0';
		if (!strcasecmp(l, "Content-Length")) {
			char *end;
			errno = 0;
			unsigned long long x = strtoull(v, &end, 10);
			if (errno || end == v || *end || *v < '0' || *v > '9' ||
			    (*len != UINT64_MAX && *len != x))
				return false;
			*len = x;
		} else if (!strcasecmp(l, "Transfer-Encoding")) {
			*chunked |= strcasecmp(v, "identity") != 0;
		}
		name[*n] = l;
		value[(*n)++] = v;
		if (!e)
			break;
		l = e + 2;
	}
	return true;
}

enum MHD_Result e2b_port_route(struct req *q, struct MHD_Connection *c, const char *port,
			       const char *rest, const char *method)
{
	char *end;
	errno = 0;
	unsigned long p = strtoul(port, &end, 10);
	if (errno || end == port || *end || port[0] < '1' || port[0] > '9' || strlen(port) > 5 ||
	    p > 65535)
		return e2b_fail(q, c, 400, O_BAD_REQUEST, "E2b-Sandbox-Port is a port, 1 to 65535");
	q->e2b->port = (unsigned)p;
	if (!strcmp(method, "CONNECT") || !token_ok(method) || strlen(method) >= sizeof q->method)
		return e2b_fail(q, c, 405, O_BAD_REQUEST, "this method is not forwarded");
	if (!(q->e2b->target = strdup(rest[0] ? rest : "/")))
		return MHD_NO;
	if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade"))
		return e2b_fail(q, c, 501, O_BAD_REQUEST,
				"upgrades (WebSocket) to a sandbox's own server are not supported "
				"(docs/E2B.md)");
	int a = e2b_envd_sandbox(q, c);
	if (a < 0)
		return e2b_fail(q, c, a == -1 ? 401 : 502, a == -1 ? O_UNAUTHORIZED : O_ERROR,
				a == -1 ? "unknown sandbox or invalid access token "
					  "(X-Access-Token or E2B-Traffic-Access-Token)"
					: "the sandbox is not running anymore");
	if (srv_length_over(c, SERVE_MAX_BODY))
		return e2b_fail(q, c, 413, O_BAD_REQUEST, "the request body is larger than 6 MiB");
	q->is_post = true; /* its body, if any, then e2b_port_body */
	return MHD_YES;
}

enum MHD_Result e2b_port_body(struct req *q, struct MHD_Connection *c)
{
	const char *path = q->e2b->target;
	struct server *s = q->s;
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	int fd;
	if (live_connect(lv, q->e2b->port, FWD_CONNECT_MS, &fd, &err) < 0) {
		char msg[128];
		if (err.sys_errno == ECONNREFUSED)
			snprintf(msg, sizeof msg, "nothing listens on port %u in the sandbox",
				 q->e2b->port);
		else if (err.sys_errno == ETIMEDOUT)
			snprintf(msg, sizeof msg, "port %u of the sandbox accepted no connection "
				 "within %d s", q->e2b->port, FWD_CONNECT_MS / 1000);
		else if (err.sys_errno == EAGAIN)
			return e2b_fail(q, c, 503, O_REJECTED,
					"too many requests to the sandbox's own servers at once");
		else if (live_gone(lv))
			snprintf(msg, sizeof msg, "the sandbox is not running anymore");
		else
			snprintf(msg, sizeof msg, "port %u of the sandbox could not be reached",
				 q->e2b->port);
		return e2b_fail(q, c, 502, O_ERROR, msg);
	}
	struct fwd *f = calloc(1, sizeof *f);
	if (!f) {
		live_connect_end(lv, fd);
		return MHD_NO;
	}
	f->s = s;
	f->x = q->sbx;
	f->fd = fd;
	f->client = -1;
	f->left = UINT64_MAX;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		f->client = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
	/* the request: its line, the headers kept, its body */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "%s ", q->method);
	pct(&b, path, "/!$&'()*+,;=:@");
	struct query_ctx qc = { .b = &b, .first = true };
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, put_arg, &qc);
	moat_buf_append(&b, " HTTP/1.0\r\n", 11);
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	moat_buf_appendf(&b, "Host: %s\r\n", host && !strpbrk(host, "\r\n") ? host : "localhost");
	struct head_ctx hc = { .s = s, .b = &b,
			       .conn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection") };
	char token[E2B_TOKEN_HEX + 1] = "";
	e2b_rec_token(s->e2b, q->e2b->id, token);
	moat_sha256(token, strlen(token), hc.access);
	explicit_bzero(token, sizeof token);
	MHD_get_connection_values(c, MHD_HEADER_KIND, put_header, &hc);
	if (q->body.len || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length") ||
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"))
		moat_buf_appendf(&b, "Content-Length: %zu\r\n", q->body.len);
	moat_buf_append(&b, "Connection: close\r\n\r\n", 21);
	if (hc.bad) {
		moat_buf_free(&b);
		return fwd_fail(q, c, f, 400, "a header holds a line break");
	}
	if (b.oom) {
		moat_buf_free(&b);
		return fwd_fail(q, c, f, 500, "out of memory");
	}
	int sent = fwd_send(f, b.data, b.len);
	moat_buf_free(&b);
	if (sent == 0 && q->body.len)
		sent = fwd_send(f, q->body.data, q->body.len);
	/* the answer's head (a 1xx one skipped); a server that answered before
	 * taking all of the request (sent < 0) is still heard */
	MOAT_AUTOFREE char *h = malloc(FWD_MAX_HEAD);
	size_t have = 0, hl = 0;
	unsigned status = 0;
	for (int round = 0; h && round < 4; round++) {
		if (!(hl = fwd_head(f, h, &have)))
			break;
		if (hl < 14 || strncmp(h, "HTTP/1.", 7) || h[8] != ' ' || h[9] < '1' || h[9] > '5' ||
		    h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9' ||
		    (h[12] != ' ' && h[12] != '\r')) {
			hl = 0;
			break;
		}
		status = (unsigned)((h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0'));
		if (status >= 200)
			break;
		memmove(h, h + hl, have - hl);
		have -= hl;
		hl = 0;
	}
	if (!h)
		return fwd_fail(q, c, f, 500, "out of memory");
	if (!hl || status < 200)
		return fwd_fail(q, c, f, 502,
				sent < 0 ? "the sandbox's server took not all of the request and answered "
					   "nothing"
					 : "the sandbox's server answered no HTTP/1 status line and headers "
					   "(at most 64 KiB)");
	if (memchr(h, '\0', hl))
		return fwd_fail(q, c, f, 502, "the sandbox's server answered a NUL in its headers");
	h[hl - 4] = '\0';
	char *name[FWD_MAX_HEADERS], *value[FWD_MAX_HEADERS];
	size_t nh;
	uint64_t len;
	bool chunked;
	if (!head_lines(h, name, value, &nh, &len, &chunked) || chunked)
		return fwd_fail(q, c, f, 502,
				chunked ? "the sandbox's server answered HTTP/1.0 with a chunked body"
					: "the sandbox's server answered malformed headers (at most 100)");
	const char *conn = "";
	for (size_t i = 0; i < nh; i++)
		if (!strcasecmp(name[i], "Connection"))
			conn = value[i];
	/* no body: a HEAD's answer (its length the server's, MHD sends none of
	 * it), a 204's, a 304's; else the server's length, or chunks */
	bool nobody = !strcmp(q->method, "HEAD") || status == 204 || status == 304;
	uint64_t size = status == 204 || status == 304 ? 0
			: len != UINT64_MAX			? len
			: nobody				? 0
								: MHD_SIZE_UNKNOWN;
	struct MHD_Response *r =
		MHD_create_response_from_callback(size, FWD_CHUNK, fwd_read, f, fwd_free);
	if (!r)
		return fwd_fail(q, c, f, 500, "out of memory");
	q->sbx = NULL; /* the response's now, busy included (fwd_free ends both) */
	q->sbx_busy = false;
	for (size_t i = 0; i < nh; i++)
		if (!listed(hop, name[i], strlen(name[i])) && !in_connection(conn, name[i]) &&
		    strcasecmp(name[i], "Date") && MHD_add_response_header(r, name[i], value[i]) != MHD_YES) {
			MHD_destroy_response(r); /* f with it */
			return e2b_fail(q, c, 502, O_ERROR, "the sandbox's server answered a header "
							    "moat cannot pass on");
		}
	/* the body's bytes read with the head */
	if (have > hl) {
		if (!(f->held = malloc(have - hl))) {
			MHD_destroy_response(r);
			return e2b_fail(q, c, 500, O_ERROR, "out of memory");
		}
		memcpy(f->held, h + hl, have - hl);
		f->held_len = have - hl;
	}
	f->left = nobody ? 0 : len;
	q->status = status;
	srv_conn_deadline_in(s, c, serve_sbx_left_ms(s->sandboxes, f->x) +
					   (int64_t)s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}
