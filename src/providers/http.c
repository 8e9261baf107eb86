/* HTTPS for the remote providers (libcurl): URL policy, DNS pinning,
 * bounded bodies, secrets kept out of messages. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "providers/curl_dl.h"

#include "net/net.h"
#include "providers/internal.h"
#include "core/sys.h"

#define MAX_BODY_BYTES (64u * 1024u * 1024u)
#define EXCERPT_BYTES 200u

bool moat_http_test_mode(void)
{
	const char *v = getenv("MOAT_TEST_ALLOW_HTTP");
	return v && !strcmp(v, "1");
}

void moat_redact(char **s, const char *secret)
{
	if (!s || !*s || !secret || !*secret)
		return;
	size_t sl = strlen(secret);
	struct moat_buf b = { 0 };
	const char *p = *s, *hit;
	while ((hit = strstr(p, secret))) {
		moat_buf_append(&b, p, (size_t)(hit - p));
		moat_buf_append(&b, "[redacted]", 10);
		p = hit + sl;
	}
	if (p == *s)
		return;
	moat_buf_append(&b, p, strlen(p));
	char *n = moat_buf_take(&b);
	if (!n) {
		/* cannot build the copy: blank the original rather than leak */
		memset(*s, '*', strlen(*s));
		return;
	}
	free(*s);
	*s = n;
}

__attribute__((format(printf, 5, 0))) static int vfail(struct moat_http *h,
							struct moat_error *err,
							enum moat_error_type type, int e,
							const char *fmt, va_list ap)
{
	char *msg = moat_vformat(fmt, ap);
	moat_redact(&msg, h ? h->secret : NULL);
	moat_error_set(err, msg ? type : MOAT_ERR_UNAVAILABLE, e, "%s: %s",
		       h && h->provider ? h->provider : "http", msg ? msg : "out of memory");
	free(msg);
	return -1;
}

/* The host or the service failed us: SandboxUnavailableError. */
static int fail(struct moat_http *h, struct moat_error *err, int e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(struct moat_http *h, struct moat_error *err, int e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(h, err, MOAT_ERR_UNAVAILABLE, e, fmt, ap);
	va_end(ap);
	return -1;
}

static int oom(struct moat_http *h, struct moat_error *err)
{
	return fail(h, err, ENOMEM, "out of memory");
}

/* The configured URL itself is wrong (whatever the network does):
 * SandboxConfigError, exit 2, like any other mistake in the config. */
static int bad_url(struct moat_http *h, struct moat_error *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad_url(struct moat_http *h, struct moat_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(h, err, MOAT_ERR_CONFIG, 0, fmt, ap);
	va_end(ap);
	return -1;
}

/* A host that names this machine whatever DNS says: "localhost", "*.localhost"
 * (RFC 6761), with or without the root's trailing dot. */
static bool loopback_name(const char *host)
{
	size_t n = strlen(host);
	if (n && host[n - 1] == '.')
		n--;
	static const char lh[] = "localhost";
	size_t l = sizeof lh - 1;
	if (n < l || strncasecmp(host + n - l, lh, l))
		return false;
	return n == l || host[n - l - 1] == '.';
}

/* What can be said of url without the network: a URL, https, a host, no
 * credentials or query, not an IP literal in a refused range, not a loopback
 * name. Fills bare (the host without brackets) and *port (curl_free it).
 * Every refusal is a SandboxConfigError. */
static int check_url(struct moat_http *h, const char *url, char bare[256], char **port,
		     bool *test_http, struct moat_error *err)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *user = NULL, *query = NULL;
	int rc = -1;
	*port = NULL;
	if (!u)
		return oom(h, err);
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		bad_url(h, err, "the API URL is not a valid URL");
		goto out;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_PORT, port, CURLU_DEFAULT_PORT);
	curl_url_get(u, CURLUPART_USER, &user, 0);
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	if (!scheme || !host || !*port) {
		bad_url(h, err, "the API URL has no scheme or host");
		goto out;
	}
	if (user || query) {
		bad_url(h, err, "the API URL must not carry credentials or a query");
		goto out;
	}
	*test_http = moat_http_test_mode() && !strcmp(host, "127.0.0.1");
	if (strcmp(scheme, "https") && !(*test_http && !strcmp(scheme, "http"))) {
		bad_url(h, err, "the API URL must be https");
		goto out;
	}
	size_t hl = strlen(host);
	if (hl >= 256) {
		bad_url(h, err, "the API host name is too long");
		goto out;
	}
	if (host[0] == '[' && hl > 2) {
		memcpy(bare, host + 1, hl - 2);
		bare[hl - 2] = '\0';
	} else {
		memcpy(bare, host, hl + 1);
	}
	unsigned char a[sizeof(struct in6_addr)];
	int fam = inet_pton(AF_INET, bare, a) == 1 ? AF_INET
		: inet_pton(AF_INET6, bare, a) == 1 ? AF_INET6 : 0;
	if (fam && moat_net_addr_refused(fam, a) && !*test_http) {
		bad_url(h, err, "the API host %s is a private, loopback or link-local address; "
			"refused", bare);
		goto out;
	}
	if (!fam && loopback_name(bare)) {
		bad_url(h, err, "the API host %s is a loopback name; refused", bare);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0) {
		curl_free(*port);
		*port = NULL;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(query);
	curl_url_cleanup(u);
	return rc;
}

int moat_http_url_check(const char *url, const char *provider, struct moat_error *err)
{
	struct moat_http h = { .provider = provider };
	char bare[256], *port = NULL;
	bool test_http = false;
	const char *why = NULL;
	if (moat_curl_load(&why) < 0)
		return 0; /* no libcurl: moat_http_open says so */
	int rc = check_url(&h, url, bare, &port, &test_http, err);
	curl_free(port);
	return rc;
}

int moat_http_open(struct moat_http *h, const char *url, const char *secret,
		   const char *provider, struct moat_error *err)
{
	memset(h, 0, sizeof *h);
	h->secret = secret;
	h->provider = provider;
	const char *why = NULL;
	if (moat_curl_load(&why) < 0)
		return fail(h, err, 0, "%s", why);
	char bare[256], *port = NULL;
	bool test_http = false;
	int rc = -1;
	if (check_url(h, url, bare, &port, &test_http, err) < 0)
		goto out;
	/* resolve, refuse non-public addresses, pin the first one */
	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	int gai = getaddrinfo(bare, NULL, &hints, &ai);
	if (gai != 0 || !ai) {
		fail(h, err, 0, "cannot resolve the API host %s: %s", bare, gai_strerror(gai));
		goto out;
	}
	char addr[INET6_ADDRSTRLEN + 2] = "";
	bool bad = false;
	for (struct addrinfo *p = ai; p; p = p->ai_next) {
		const void *a = p->ai_family == AF_INET
			? (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
			: (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
		if (p->ai_family != AF_INET && p->ai_family != AF_INET6)
			continue;
		char text[INET6_ADDRSTRLEN];
		inet_ntop(p->ai_family, a, text, sizeof text);
		bool allowed_loopback = test_http && p->ai_family == AF_INET &&
					!strcmp(text, "127.0.0.1");
		if (moat_net_addr_refused(p->ai_family, a) && !allowed_loopback) {
			bad = true;
			break;
		}
		if (!addr[0]) {
			if (p->ai_family == AF_INET6)
				snprintf(addr, sizeof addr, "[%s]", text);
			else
				snprintf(addr, sizeof addr, "%s", text);
		}
	}
	freeaddrinfo(ai);
	if (bad) {
		bad_url(h, err, "the API host %s resolves to a private, loopback or metadata "
			"address; refused", bare);
		goto out;
	}
	if (!addr[0]) {
		fail(h, err, 0, "the API host %s has no usable address", bare);
		goto out;
	}
	char *pin = NULL;
	if (asprintf(&pin, "%s:%s:%s", bare, port, addr) < 0) {
		oom(h, err);
		goto out;
	}
	h->resolve = curl_slist_append(NULL, pin);
	free(pin);
	h->base = strdup(url);
	h->curl = curl_easy_init();
	if (!h->resolve || !h->base || !h->curl) {
		oom(h, err);
		goto out;
	}
	size_t bl = strlen(h->base);
	while (bl > 0 && h->base[bl - 1] == '/')
		h->base[--bl] = '\0';
	rc = 0;
out:
	curl_free(port);
	if (rc < 0)
		moat_http_close(h);
	return rc;
}

void moat_http_close(struct moat_http *h)
{
	if (!h)
		return;
	if (h->curl)
		curl_easy_cleanup(h->curl);
	curl_slist_free_all(h->resolve);
	free(h->base);
	h->curl = NULL;
	h->resolve = NULL;
	h->base = NULL;
}

void moat_http_resp_free(struct moat_http_resp *resp)
{
	if (resp)
		moat_buf_free(&resp->body);
}

struct sink {
	struct moat_http_resp *resp;
	bool (*on_data)(void *ctx, const char *p, size_t n);
	void *ctx;
	bool too_big;
};

static size_t on_write(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb;
	if (s->on_data)
		return s->on_data(s->ctx, p, n) ? n : 0;
	if (s->resp->body.len + n > MAX_BODY_BYTES) {
		s->too_big = true;
		return 0;
	}
	moat_buf_append(&s->resp->body, p, n);
	return s->resp->body.oom ? 0 : n;
}

int moat_http_request(struct moat_http *h, const char *method, const char *path,
		      const char *const *headers, const char *body, size_t body_len,
		      uint64_t timeout_ms, bool (*on_data)(void *ctx, const char *p, size_t n),
		      void *ctx, struct moat_http_resp *resp, struct moat_error *err)
{
	memset(resp, 0, sizeof *resp);
	CURL *c = h->curl;
	char *url = NULL;
	struct curl_slist *hl = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sink s = { resp, on_data, ctx, false };
	int rc = -1;
	if (asprintf(&url, "%s%s", h->base, path) < 0)
		return oom(h, err);
	for (const char *const *p = headers; p && *p; p++) {
		struct curl_slist *n = curl_slist_append(hl, *p);
		if (!n) {
			oom(h, err);
			goto out;
		}
		hl = n;
	}
	const char *proto = moat_http_test_mode() ? "https,http" : "https";
	curl_easy_reset(c);
	/* every option is part of the policy (pinned address, https only, no
	 * redirects, no proxy, verified TLS, bounded time): one libcurl
	 * refuses fails the request instead of running without it */
#define SETOPT(opt, val)                                                                  \
	do {                                                                              \
		CURLcode oc = curl_easy_setopt(c, opt, val);                              \
		if (oc != CURLE_OK) {                                                     \
			fail(h, err, 0, "libcurl refused " #opt ": %s",                   \
			     curl_easy_strerror(oc));                                     \
			goto out;                                                         \
		}                                                                         \
	} while (0)
	SETOPT(CURLOPT_URL, url);
	SETOPT(CURLOPT_RESOLVE, (struct curl_slist *)h->resolve);
	SETOPT(CURLOPT_PROTOCOLS_STR, proto);
	SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, proto);
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(CURLOPT_PROXY, "");
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_SSL_VERIFYPEER, 1L);
	SETOPT(CURLOPT_SSL_VERIFYHOST, 2L);
	SETOPT(CURLOPT_TIMEOUT_MS, (long)(timeout_ms ? timeout_ms : 1));
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, 15000L);
	SETOPT(CURLOPT_CUSTOMREQUEST, method);
	SETOPT(CURLOPT_HTTPHEADER, hl);
	SETOPT(CURLOPT_WRITEFUNCTION, on_write);
	SETOPT(CURLOPT_WRITEDATA, &s);
	SETOPT(CURLOPT_ERRORBUFFER, errbuf);
	SETOPT(CURLOPT_USERAGENT, "moat/" MOAT_VERSION);
	if (body) {
		SETOPT(CURLOPT_POSTFIELDS, body);
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	} else if (!strcmp(method, "GET")) {
		SETOPT(CURLOPT_HTTPGET, 1L);
	}
#undef SETOPT
	CURLcode cr = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
	if (cr == CURLE_OPERATION_TIMEDOUT) {
		resp->timed_out = true;
		rc = 0;
	} else if (cr == CURLE_WRITE_ERROR && on_data) {
		rc = 0; /* the consumer stopped reading */
	} else if (cr != CURLE_OK) {
		fail(h, err, 0, "%s %s failed: %s", method, path,
		     s.too_big ? "response too large" : errbuf[0] ? errbuf : curl_easy_strerror(cr));
	} else {
		rc = 0;
	}
out:
	curl_slist_free_all(hl);
	free(url);
	return rc;
}

int moat_http_status_error(struct moat_http *h, const char *what,
			   const struct moat_http_resp *resp, struct moat_error *err)
{
	if (resp->status == 0)
		return fail(h, err, 0, "%s: no response", what);
	/* redact before cutting: a cut could split the secret (keys are far
	 * shorter than the margin kept past the excerpt) */
	char *body = NULL;
	if (resp->body.data && resp->body.len) {
		size_t take = resp->body.len > 4 * EXCERPT_BYTES + 4096 ? 4 * EXCERPT_BYTES + 4096
									 : resp->body.len;
		body = strndup(resp->body.data, take);
		moat_redact(&body, h->secret);
	}
	char excerpt[EXCERPT_BYTES + 1];
	size_t n = 0;
	for (size_t i = 0; body && body[i] && n < EXCERPT_BYTES; i++) {
		char ch = body[i];
		excerpt[n++] = (ch >= 0x20 && ch < 0x7f) ? ch : ' ';
	}
	excerpt[n] = '\0';
	free(body);
	return fail(h, err, 0, "%s: HTTP %ld%s%s%s", what, resp->status,
		    resp->status == 401 || resp->status == 403 ? " (check the API key)" : "",
		    n ? ": " : "", excerpt);
}
