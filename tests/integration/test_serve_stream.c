/* Results that stream (docs/SERVE.md, "Streaming"): POST /v1/run with
 * Accept: application/x-ndjson and moat exec --stream, from the outside, as
 * root and rootless. Each test starts its own `moat serve` on a loopback
 * port (--no-auth) and speaks HTTP/1.1 to it over a raw socket, so that it
 * sees when each line arrives and can stop reading or hang up. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define ROOTLESS_ID 65534
#define NDJSON_CHUNK 65536                 /* program bytes a line carries at most */
#define NDJSON_LINE_MAX (6 * 65536 + 64)   /* a line's bytes at most */
#define STREAM_WINDOW (256 * 1024)         /* bytes a stream may hold for its client */

static const char *const MODE_NAME[] = { "root", "rootless" };

/* ---- the server ---- */

struct srv {
	int mode;
	int port;
	char dir[64];
	char log[128];
	struct harness_proc p;
};

static int prep_log(int mode, void *arg)
{
	(void)mode;
	const struct srv *s = arg;
	int fd = open(s->log, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
		perror("stream test: redirect the server's output");
		return -1;
	}
	close(fd);
	return 0;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Connects to the server; rcvbuf > 0: that receive buffer (set before the
 * connection, so the window stays small). */
static int conn_open(const struct srv *s, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	if (rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		buf += n;
		len -= (size_t)n;
	}
}

/* Sends a request (Connection: close); accept: the Accept header or NULL. */
static int http_send(const struct srv *s, const char *method, const char *path,
		     const char *accept, const char *body, int rcvbuf)
{
	int fd = conn_open(s, rcvbuf);
	ck_assert_msg(fd >= 0, "connect to moat serve: %s", strerror(errno));
	char head[512];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof head,
			 "%s %s HTTP/1.1\r\nHost: localhost\r\n%s%s%sContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			 method, path, accept ? "Accept: " : "", accept ? accept : "",
			 accept ? "\r\n" : "", blen);
	send_all(fd, head, (size_t)n);
	if (blen)
		send_all(fd, body, blen);
	return fd;
}

/* What came back: status, Content-Type, the body (de-chunked), and when
 * (ms after the request) the raw bytes first held mark, and the end. */
struct hresp {
	int status;
	char ctype[128];
	char *body;
	size_t body_len;
	long t_mark; /* -1: never */
	long t_end;
	char *raw;
	size_t raw_len;
};

static void hresp_free(struct hresp *r)
{
	free(r->body);
	free(r->raw);
	memset(r, 0, sizeof *r);
}

/* Reads one more piece into r->raw; 1 read, 0 EOF, -1 timeout (ms). */
static int read_some(int fd, struct hresp *r, long ms)
{
	struct pollfd pf = { fd, POLLIN, 0 };
	if (poll(&pf, 1, (int)ms) <= 0)
		return -1;
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof buf);
	if (n <= 0)
		return 0;
	r->raw = realloc(r->raw, r->raw_len + (size_t)n + 1);
	ck_assert_ptr_nonnull(r->raw);
	memcpy(r->raw + r->raw_len, buf, (size_t)n);
	r->raw_len += (size_t)n;
	r->raw[r->raw_len] = '\0';
	return 1;
}

static const char *raw_find(const struct hresp *r, const char *s)
{
	return r->raw ? memmem(r->raw, r->raw_len, s, strlen(s)) : NULL;
}

/* The head and the body of r->raw (a chunked body is de-chunked). */
static void parse_resp(struct hresp *r)
{
	const char *end = raw_find(r, "\r\n\r\n");
	ck_assert_msg(end, "no HTTP head in %.300s", r->raw ? r->raw : "");
	ck_assert_int_eq(sscanf(r->raw, "HTTP/1.%*d %d", &r->status), 1);
	const char *ct = strcasestr(r->raw, "\r\nContent-Type: ");
	if (ct && ct < end)
		sscanf(ct + 16, "%127[^\r]", r->ctype);
	bool chunked = strcasestr(r->raw, "Transfer-Encoding: chunked") != NULL;
	const char *p = end + 4, *lim = r->raw + r->raw_len;
	r->body = malloc(r->raw_len + 1);
	ck_assert_ptr_nonnull(r->body);
	r->body_len = 0;
	if (!chunked) {
		memcpy(r->body, p, (size_t)(lim - p));
		r->body_len = (size_t)(lim - p);
	} else {
		while (p < lim) {
			char *e;
			unsigned long n = strtoul(p, &e, 16);
			const char *crlf = memmem(e, (size_t)(lim - e), "\r\n", 2);
			if (!crlf || n == 0)
				break;
			p = crlf + 2;
			ck_assert_msg((size_t)(lim - p) >= n, "a chunk is cut short");
			memcpy(r->body + r->body_len, p, n);
			r->body_len += n;
			p += n + 2;
		}
	}
	r->body[r->body_len] = '\0';
}

/* Reads the whole answer (until the server closes), noting when mark
 * first appeared. */
static void http_read(int fd, long t0, const char *mark, struct hresp *r)
{
	long limit = harness_scale_ms(120000);
	r->t_mark = -1;
	int got;
	while ((got = read_some(fd, r, 1000)) != 0) {
		if (mark && r->t_mark < 0 && raw_find(r, mark))
			r->t_mark = harness_now_ms() - t0;
		ck_assert_msg(harness_now_ms() - t0 < limit, "the answer did not end within %ld ms", limit);
	}
	r->t_end = harness_now_ms() - t0;
	close(fd);
	parse_resp(r);
}

static void http(const struct srv *s, const char *method, const char *path, const char *accept,
		 const char *body, struct hresp *r)
{
	memset(r, 0, sizeof *r);
	long t0 = harness_now_ms();
	int fd = http_send(s, method, path, accept, body, 0);
	http_read(fd, t0, NULL, r);
}

/* A metric's value in /metrics (the sum of its series); -1 when absent. */
static double metric(const struct srv *s, const char *name)
{
	struct hresp r;
	http(s, "GET", "/metrics", NULL, NULL, &r);
	double sum = -1;
	size_t nl = strlen(name);
	for (const char *l = r.body; l && *l;) {
		const char *e = strchr(l, '\n');
		if (!strncmp(l, name, nl) && (l[nl] == ' ' || l[nl] == '{')) {
			const char *v = strchr(l, ' ');
			sum = (sum < 0 ? 0 : sum) + strtod(v, NULL);
		}
		l = e ? e + 1 : NULL;
	}
	hresp_free(&r);
	return sum;
}

static void srv_start(struct srv *s, int mode, int pool)
{
	memset(s, 0, sizeof *s);
	s->mode = mode;
	snprintf(s->dir, sizeof s->dir, "/tmp/moat-stream-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	snprintf(s->log, sizeof s->log, "%s/serve.log", s->dir);
	int fd = open(s->log, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	if (mode == MODE_ROOTLESS && harness_is_root()) {
		ck_assert_int_eq(chown(s->dir, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(chown(s->log, ROOTLESS_ID, ROOTLESS_ID), 0);
	}
	/* the port found free is the test's alone until the server listens,
	 * and what answers on it can only be that server */
	harness_private_ports();
	s->port = free_port();
	char listen[32], pools[16], kv[128];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
	snprintf(pools, sizeof pools, "%d", pool);
	snprintf(kv, sizeof kv, "%s/kv.sqlite3", s->dir);
	if (pool > 0)
		harness_beside_moat("moat-zygote.so"); /* where the server looks for it */
	const char *argv[] = { "serve", "--listen", listen, "--no-auth", "--runtime",
			       harness_runtime_dir(), "--pool", pools, "--kv", kv, NULL };
	harness_start(mode, argv, NULL, 0, NULL, prep_log, s, &s->p);
	long t0 = harness_now_ms();
	for (;;) {
		int c = conn_open(s, 0);
		if (c >= 0) {
			close(c);
			break;
		}
		ck_assert_msg(waitpid(s->p.pid, NULL, WNOHANG) == 0,
			      "%s: moat serve exited before it listened", MODE_NAME[mode]);
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000),
			      "%s: moat serve did not listen within 20 s", MODE_NAME[mode]);
		harness_sleep_ms(50);
	}
}

/* SIGTERM and the exit (status 0); the dir goes. */
static void srv_stop(struct srv *s)
{
	ck_assert_int_eq(kill(s->p.pid, SIGTERM), 0);
	struct run_out out = { 0 };
	harness_finish(&s->p, &out);
	ck_assert_msg(out.status == 0, "%s: moat serve after SIGTERM: status %d",
		      MODE_NAME[s->mode], out.status);
	harness_free(&out);
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* ---- the lines ---- */

struct lines {
	cJSON *items[4096];
	int n;
	int results; /* "type":"result" lines */
	size_t longest; /* bytes of the longest line */
	char *out, *err; /* the streams put back together (base64 decoded) */
	size_t out_len, err_len;
	int base64; /* lines with "encoding":"base64" */
	size_t biggest_chunk; /* program bytes of the biggest line */
};

static int b64v(char c)
{
	const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = c ? strchr(a, c) : NULL;
	return p ? (int)(p - a) : -1;
}

static size_t b64_decode(const char *s, char *out)
{
	size_t n = 0;
	unsigned v = 0;
	int bits = 0;
	for (; *s && *s != '='; s++) {
		int d = b64v(*s);
		ck_assert_msg(d >= 0, "not base64: %c", *s);
		v = (v << 6) | (unsigned)d;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (char)((v >> bits) & 0xff);
		}
	}
	return n;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	ck_assert_ptr_nonnull(*buf);
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Every line of body: one JSON object each, '\n'-terminated. */
static void lines_parse(const char *body, size_t len, struct lines *L)
{
	memset(L, 0, sizeof *L);
	append(&L->out, &L->out_len, "", 0);
	append(&L->err, &L->err_len, "", 0);
	const char *p = body, *lim = body + len;
	while (p < lim) {
		const char *e = memchr(p, '\n', (size_t)(lim - p));
		ck_assert_msg(e, "the last line has no newline: %.200s", p);
		size_t ll = (size_t)(e - p);
		if (ll > L->longest)
			L->longest = ll;
		cJSON *j = cJSON_ParseWithLength(p, ll);
		ck_assert_msg(j && cJSON_IsObject(j), "a line is not a JSON object: %.200s", p);
		ck_assert_int_lt(L->n, 4096);
		L->items[L->n++] = j;
		const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "type"));
		ck_assert_msg(type, "a line without type: %.200s", p);
		if (!strcmp(type, "result")) {
			L->results++;
		} else {
			ck_assert_msg(!strcmp(type, "stdout") || !strcmp(type, "stderr"),
				      "type %s", type);
			ck_assert_msg(L->results == 0, "a %s line after the result", type);
			const char *data = cJSON_GetStringValue(cJSON_GetObjectItem(j, "data"));
			const char *enc = cJSON_GetStringValue(cJSON_GetObjectItem(j, "encoding"));
			ck_assert_ptr_nonnull(data);
			char *dec = malloc(strlen(data) + 1);
			size_t dn;
			if (enc) {
				ck_assert_str_eq(enc, "base64");
				L->base64++;
				dn = b64_decode(data, dec);
			} else {
				dn = strlen(data); /* NUL bytes are not used by these tests */
				memcpy(dec, data, dn);
			}
			if (dn > L->biggest_chunk)
				L->biggest_chunk = dn;
			if (!strcmp(type, "stdout"))
				append(&L->out, &L->out_len, dec, dn);
			else
				append(&L->err, &L->err_len, dec, dn);
			free(dec);
		}
		p = e + 1;
	}
}

static cJSON *lines_result(const struct lines *L)
{
	ck_assert_msg(L->results == 1, "%d result lines (want exactly 1)", L->results);
	cJSON *r = L->items[L->n - 1];
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "type")), "result");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "streamed")));
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "stdout")), "");
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "stderr")), "");
	return r;
}

static void lines_free(struct lines *L)
{
	for (int i = 0; i < L->n; i++)
		cJSON_Delete(L->items[i]);
	free(L->out);
	free(L->err);
}

static void expect_ndjson(const struct hresp *r)
{
	ck_assert_msg(r->status == 200, "HTTP %d: %.400s", r->status, r->body);
	ck_assert_msg(!strcmp(r->ctype, "application/x-ndjson"), "Content-Type %s: %.300s",
		      r->ctype, r->body);
}

#define ND "application/x-ndjson"

/* ---- the tests ---- */

/* The first line arrives while the program still runs (it prints, then
 * sleeps): long before the end of the answer. */
START_TEST(stream_arrives_early)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 0);
	long nap = harness_scale_ms(3000);
	char body[512];
	snprintf(body, sizeof body,
		 "{\"language\":\"python\",\"code\":\"import time\\nprint('early-7c1e', "
		 "flush=True)\\ntime.sleep(%.3f)\\nprint('late')\"}", nap / 1000.0);
	struct hresp r = { 0 };
	long t0 = harness_now_ms();
	int fd = http_send(&s, "POST", "/v1/run", ND, body, 0);
	http_read(fd, t0, "early-7c1e", &r);
	expect_ndjson(&r);
	ck_assert_msg(r.t_mark >= 0, "no early line: %.300s", r.body);
	ck_assert_msg(r.t_end - r.t_mark >= nap * 2 / 3,
		      "%s: the first line came at %ld ms, the end at %ld ms (the program slept "
		      "%ld ms after it)", MODE_NAME[_i], r.t_mark, r.t_end, nap);
	struct lines L;
	lines_parse(r.body, r.body_len, &L);
	ck_assert_str_eq(L.out, "early-7c1e\nlate\n");
	cJSON *res = lines_result(&L);
	ck_assert_int_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(res, "exitCode")), 0);
	lines_free(&L);
	hresp_free(&r);
	srv_stop(&s);
}
END_TEST

/* stdout and stderr apart, base64 for bytes that are not UTF-8, a UTF-8
 * character cut between two writes kept as text, the one result line last
 * with the usual fields; errors before the run are plain JSON; without the
 * Accept header nothing changes. */
START_TEST(stream_lines)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 0);
	struct hresp r;
	/* before the run: the ordinary error answers */
	http(&s, "POST", "/v1/run", ND, "{\"language\":\"nope\",\"code\":\"x\"}", &r);
	ck_assert_msg(r.status == 400 && !strcmp(r.ctype, "application/json") &&
			      strstr(r.body, "\"SandboxConfigError\""),
		      "a bad request: HTTP %d %s %.300s", r.status, r.ctype, r.body);
	hresp_free(&r);
	http(&s, "POST", "/v1/run", ND, "{\"language\":\"python\",\"code\":\"x\",\"timeout\":1e12}",
	     &r);
	ck_assert_msg(r.status >= 400 && r.status < 500 && !strcmp(r.ctype, "application/json"),
		      "past a limit: HTTP %d %s %.300s", r.status, r.ctype, r.body);
	hresp_free(&r);

	const char *code =
		"{\"language\":\"python\",\"code\":\"import sys,time\\n"
		"o=sys.stdout.buffer; e=sys.stderr.buffer\\n"
		"o.write(b'out-1\\\\n'); o.flush(); time.sleep(0.2)\\n"
		"e.write(b'err-1\\\\n'); e.flush(); time.sleep(0.2)\\n"
		"o.write(b'\\\\xff\\\\xfe\\\\x00bin'); o.flush(); time.sleep(0.2)\\n"
		"o.write(b'\\\\n\\\\xc3'); o.flush(); time.sleep(0.2)\\n"
		"o.write(b'\\\\xa9-done\\\\n'); o.flush()\\n"
		"sys.exit(3)\"}";
	http(&s, "POST", "/v1/run", ND, code, &r);
	expect_ndjson(&r);
	struct lines L;
	lines_parse(r.body, r.body_len, &L);
	ck_assert_msg(L.base64 >= 1, "no base64 line: %s", r.body);
	const char want[] = "out-1\n\xff\xfe\0bin\n\xc3\xa9-done\n";
	ck_assert_msg(L.out_len == sizeof want - 1 && !memcmp(L.out, want, sizeof want - 1),
		      "stdout put back together: %s", r.body);
	ck_assert_str_eq(L.err, "err-1\n");
	/* the cut character came back as text, not base64 */
	ck_assert_msg(strstr(r.body, "\"data\":\"\xc3\xa9-done\\n\""), "é cut by a read: %s",
		      r.body);
	cJSON *res = lines_result(&L);
	ck_assert_int_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(res, "exitCode")), 3);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "timedOut")));
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "stdoutTruncated")));
	ck_assert_ptr_nonnull(cJSON_GetObjectItem(res, "durationMs"));
	ck_assert_ptr_nonnull(cJSON_GetObjectItem(res, "limits"));
	lines_free(&L);
	hresp_free(&r);

	/* without the header: the one JSON answer of today */
	http(&s, "POST", "/v1/run", NULL,
	     "{\"language\":\"bash\",\"code\":\"echo plain; echo e >&2\"}", &r);
	ck_assert_msg(r.status == 200 && !strcmp(r.ctype, "application/json") &&
			      strstr(r.body, "\"stdout\":\"plain\\n\"") && !strstr(r.body, "\"type\""),
		      "plain answer: %s %.300s", r.ctype, r.body);
	hresp_free(&r);
	srv_stop(&s);
}
END_TEST

/* A program writing past maxOutputBytes: the streamed total is the cap,
 * truncated is said, and no line carries more than 64 KiB of the program's
 * bytes (a line of control bytes, six-fold escaped, stays bounded too). */
START_TEST(stream_caps_and_line_bound)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 0);
	struct hresp r;
	http(&s, "POST", "/v1/run", ND,
	     "{\"language\":\"python\",\"maxOutputBytes\":300000,\"code\":\"import sys\\n"
	     "sys.stdout.buffer.write(b'\\\\x01' * 1000000); sys.stdout.flush()\\n"
	     "sys.stderr.write('e' * 1000)\"}",
	     &r);
	expect_ndjson(&r);
	struct lines L;
	lines_parse(r.body, r.body_len, &L);
	ck_assert_msg(L.out_len == 300000, "%s: stdout streamed %zu bytes (cap 300000)",
		      MODE_NAME[_i], L.out_len);
	ck_assert_int_eq(L.err_len, 1000);
	ck_assert_msg(L.biggest_chunk <= NDJSON_CHUNK, "a line carries %zu bytes",
		      L.biggest_chunk);
	ck_assert_msg(L.longest <= NDJSON_LINE_MAX, "a line of %zu bytes", L.longest);
	cJSON *res = lines_result(&L);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "stdoutTruncated")));
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "stderrTruncated")));
	lines_free(&L);
	hresp_free(&r);
	srv_stop(&s);
}
END_TEST

/* A client that stops reading: its run waits (the program blocks on its
 * pipe) with at most the window held for it, the service answers others
 * at once, and when the client reads again everything arrives. */
START_TEST(stream_stalled_client)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 0);
	const size_t total = 4u * 1024 * 1024;
	char body[512];
	snprintf(body, sizeof body,
		 "{\"language\":\"python\",\"maxOutputBytes\":%zu,\"timeout\":%ld,\"code\":"
		 "\"import sys\\nb=b'y'*65536\\nfor i in range(%zu): sys.stdout.buffer.write(b)\\n"
		 "sys.stdout.flush()\"}",
		 total, 60000L, total / 65536);
	long t0 = harness_now_ms();
	int fd = http_send(&s, "POST", "/v1/run", ND, body, 4096);
	long stall = harness_scale_ms(3000);
	harness_sleep_ms(stall);
	/* others are answered promptly while it waits */
	long t1 = harness_now_ms();
	struct hresp r;
	http(&s, "POST", "/v1/run", ND, "{\"language\":\"bash\",\"code\":\"echo other\"}", &r);
	expect_ndjson(&r);
	ck_assert_msg(strstr(r.body, "\"data\":\"other\\n\""), "%s", r.body);
	long took = harness_now_ms() - t1;
	ck_assert_msg(took < harness_scale_ms(30000), "%s: another run took %ld ms beside the "
		      "stalled one", MODE_NAME[_i], took);
	hresp_free(&r);
	/* what the service holds for the stalled client: at most the window
	 * and one line (a 64 KiB read as its JSON) */
	double held = metric(&s, "moat_serve_stream_bytes");
	ck_assert_msg(held >= 0 && held <= STREAM_WINDOW + 2 * NDJSON_CHUNK,
		      "%s: %.0f bytes held for the stalled client", MODE_NAME[_i], held);
	ck_assert_msg(metric(&s, "moat_serve_in_flight") >= 1,
		      "the stalled run ended without its client");
	/* reading again: all of it, and the program waited for the client */
	struct hresp a = { 0 };
	http_read(fd, t0, NULL, &a);
	expect_ndjson(&a);
	struct lines L;
	lines_parse(a.body, a.body_len, &L);
	ck_assert_msg(L.out_len == total, "%s: %zu of %zu bytes", MODE_NAME[_i], L.out_len, total);
	cJSON *res = lines_result(&L);
	ck_assert_int_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(res, "exitCode")), 0);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "stdoutTruncated")));
	double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(res, "durationMs"));
	ck_assert_msg(ms >= stall * 2 / 3, "%s: the program ran %.0f ms: it did not wait for "
		      "the stalled client (%ld ms)", MODE_NAME[_i], ms, stall);
	lines_free(&L);
	hresp_free(&a);
	ck_assert_msg(metric(&s, "moat_serve_stream_bytes") == 0, "bytes still held");
	srv_stop(&s);
}
END_TEST

/* A client that hangs up after the first line: the run is cancelled (its
 * slot is free long before the program's sleep would end). */
START_TEST(stream_disconnect_cancels)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 0);
	struct hresp r = { 0 };
	long t0 = harness_now_ms();
	int fd = http_send(&s, "POST", "/v1/run", ND,
			   "{\"language\":\"bash\",\"timeout\":60000,\"code\":"
			   "\"echo started-5d2a; sleep 50; echo never\"}",
			   0);
	while (!raw_find(&r, "started-5d2a")) {
		ck_assert_msg(read_some(fd, &r, 1000) != 0, "the answer ended: %s", r.raw);
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(30000), "no first line");
	}
	close(fd);
	long t1 = harness_now_ms();
	while (metric(&s, "moat_serve_in_flight") > 0) {
		ck_assert_msg(harness_now_ms() - t1 < harness_scale_ms(15000),
			      "%s: the run goes on after its client hung up", MODE_NAME[_i]);
		harness_sleep_ms(100);
	}
	ck_assert_msg(metric(&s, "moat_serve_stream_bytes") == 0, "bytes still held");
	hresp_free(&r);
	srv_stop(&s);
}
END_TEST

/* A pooled Python run (the zygote's, or a warm sandbox's) streams too. */
START_TEST(stream_pooled_python)
{
	HARNESS_MODE_GUARD(_i);
	struct srv s;
	srv_start(&s, _i, 1);
	long t0 = harness_now_ms();
	bool pooled = false;
	while (!pooled) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(30000),
			      "%s: no pooled python run within 30 s", MODE_NAME[_i]);
		struct hresp r = { 0 };
		long t1 = harness_now_ms();
		int fd = http_send(&s, "POST", "/v1/run", ND,
				   "{\"language\":\"python\",\"code\":\"import sys,time\\n"
				   "print('pool-first', flush=True)\\ntime.sleep(1.5)\\n"
				   "sys.stderr.write('pool-err')\"}",
				   0);
		http_read(fd, t1, "pool-first", &r);
		expect_ndjson(&r);
		struct lines L;
		lines_parse(r.body, r.body_len, &L);
		ck_assert_str_eq(L.out, "pool-first\n");
		ck_assert_str_eq(L.err, "pool-err");
		cJSON *res = lines_result(&L);
		pooled = cJSON_IsTrue(cJSON_GetObjectItem(res, "pool"));
		if (pooled)
			ck_assert_msg(r.t_end - r.t_mark >= 1000, "%s: pooled: first line at %ld "
				      "ms, end at %ld ms", MODE_NAME[_i], r.t_mark, r.t_end);
		lines_free(&L);
		hresp_free(&r);
		if (!pooled)
			harness_sleep_ms(200);
	}
	srv_stop(&s);
}
END_TEST

/* moat exec --stream: the same lines on stdout, the first while the
 * program runs, the result last; the exit status of moat exec. */
START_TEST(exec_stream)
{
	HARNESS_MODE_GUARD(_i);
	long nap = harness_scale_ms(2000);
	char req[512];
	snprintf(req, sizeof req,
		 "{\"language\":\"bash\",\"code\":\"echo cli-first; echo cli-err >&2; sleep %.3f; "
		 "printf '\\\\377'; echo; exit 4\"}", nap / 1000.0);
	const char *args[] = { "exec", "--stream", NULL };
	struct harness_proc p;
	harness_start(_i, args, req, strlen(req), NULL, NULL, NULL, &p);
	struct hresp r = { 0 };
	long t0 = harness_now_ms(), t_first = -1;
	while (t_first < 0) {
		ck_assert_msg(read_some(p.out, &r, harness_scale_ms(30000)) == 1,
			      "moat exec --stream ended or said nothing: %s", r.raw ? r.raw : "");
		if (raw_find(&r, "cli-first"))
			t_first = harness_now_ms() - t0;
	}
	struct run_out out = { 0 };
	out.out = r.raw;
	out.out_len = r.raw_len;
	r.raw = NULL;
	harness_finish(&p, &out);
	long t_end = harness_now_ms() - t0;
	ck_assert_msg(out.status == 0, "%s: moat exec --stream: status %d, %s", MODE_NAME[_i],
		      out.status, out.err);
	ck_assert_msg(t_end - t_first >= nap * 2 / 3, "%s: the first line at %ld ms, the end "
		      "at %ld ms", MODE_NAME[_i], t_first, t_end);
	struct lines L;
	lines_parse(out.out, out.out_len, &L);
	ck_assert_msg(L.out_len == 12 && !memcmp(L.out, "cli-first\n\xff\n", 12), "stdout: %s",
		      out.out);
	ck_assert_str_eq(L.err, "cli-err\n");
	ck_assert_int_ge(L.base64, 1);
	cJSON *res = lines_result(&L);
	ck_assert_int_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(res, "exitCode")), 4);
	lines_free(&L);
	harness_free(&out);
	hresp_free(&r);

	/* a refused request: the error object of moat exec, not lines */
	const char *bad = "{\"language\":\"nope\",\"code\":\"x\"}";
	harness_run(_i, args, bad, strlen(bad), &out);
	ck_assert_int_eq(out.status, 2);
	ck_assert_msg(out.json && cJSON_GetObjectItem(out.json, "error"), "%s", out.out);
	harness_free(&out);
}
END_TEST

/* moat exec --stream whose reader stops reading: the run does not wait for
 * it without end, its own timeout still ends it (the lines wait in a
 * window; the pump is never blocked in a write). */
START_TEST(exec_stream_stalled_reader)
{
	HARNESS_MODE_GUARD(_i);
	const char *req = "{\"language\":\"python\",\"timeout\":2000,\"code\":\"import sys\\n"
			  "while True: sys.stdout.write('x' * 65536)\"}";
	const char *args[] = { "exec", "--stream", NULL };
	struct harness_proc p;
	harness_start(_i, args, req, strlen(req), NULL, NULL, NULL, &p);
	long stall = harness_scale_ms(12000);
	harness_sleep_ms(stall);
	struct run_out out = { 0 };
	harness_finish(&p, &out);
	ck_assert_msg(out.status == 0, "%s: status %d %s", MODE_NAME[_i], out.status, out.err);
	struct lines L;
	lines_parse(out.out, out.out_len, &L);
	cJSON *res = lines_result(&L);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "timedOut")));
	double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(res, "durationMs"));
	ck_assert_msg(ms < stall * 3 / 4, "%s: the run took %.0f ms: its 2 s timeout waited for "
		      "the reader (stalled %ld ms)", MODE_NAME[_i], ms, stall);
	lines_free(&L);
	harness_free(&out);
}
END_TEST

/* moat exec --stream whose reader goes away: the run is cancelled, not
 * left to its timeout. */
START_TEST(exec_stream_reader_gone)
{
	HARNESS_MODE_GUARD(_i);
	const char *req = "{\"language\":\"bash\",\"timeout\":60000,\"code\":"
			  "\"echo gone-first; sleep 50\"}";
	const char *args[] = { "exec", "--stream", NULL };
	struct harness_proc p;
	harness_start(_i, args, req, strlen(req), NULL, NULL, NULL, &p);
	struct hresp r = { 0 };
	long t0 = harness_now_ms();
	while (!raw_find(&r, "gone-first"))
		ck_assert_msg(read_some(p.out, &r, harness_scale_ms(30000)) == 1,
			      "no first line: %s", r.raw ? r.raw : "");
	close(p.out);
	p.out = -1;
	struct run_out out = { 0 };
	harness_finish(&p, &out);
	long took = harness_now_ms() - t0;
	ck_assert_msg(took < harness_scale_ms(20000), "%s: moat exec --stream ran %ld ms after "
		      "its reader went away", MODE_NAME[_i], took);
	harness_free(&out);
	hresp_free(&r);
}
END_TEST

Suite *serve_stream_suite(void)
{
	Suite *s = suite_create("serve_stream");
	TCase *tc = tcase_create("serve_stream");
	tcase_set_timeout(tc, 180);
	tcase_add_loop_test(tc, stream_arrives_early, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stream_lines, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stream_caps_and_line_bound, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stream_stalled_client, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stream_disconnect_cancels, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, stream_pooled_python, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, exec_stream, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, exec_stream_stalled_reader, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, exec_stream_reader_gone, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
