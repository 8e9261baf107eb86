/* Shared by the provider implementations (not part of the module's face). */
#ifndef MOAT_PROVIDERS_INTERNAL_H
#define MOAT_PROVIDERS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "providers/providers.h"

int moat_docker_run(const struct moat_request *req, const struct moat_provider_options *o,
		    struct moat_result **out, struct moat_error *err);
int moat_e2b_run(const struct moat_request *req, const struct moat_provider_options *o,
		 struct moat_result **out, struct moat_error *err);
int moat_daytona_run(const struct moat_request *req, const struct moat_provider_options *o,
		     struct moat_result **out, struct moat_error *err);

/* Appends to a result stream within the request's cap, and streams it. */
void moat_prov_output(struct moat_result *res, const struct moat_provider_options *o,
		      enum moat_stream which, const char *buf, size_t len, size_t cap);

/* ---- HTTP (libcurl) for the remote providers ---- */

struct moat_http {
	void *curl;            /* CURL * */
	void *resolve;         /* struct curl_slist *: the pinned host:port:addr */
	char *base;            /* the checked base URL, without a trailing '/' */
	const char *secret;    /* redacted from every message */
	const char *provider;  /* for messages */
};

struct moat_http_resp {
	long status;           /* 0: no response */
	struct moat_buf body;
	bool timed_out;
};

/* Checks url (https, public address after DNS; see providers.h) and pins it.
 * A URL that is wrong in itself (not a URL, not https, credentials or a
 * query, an IP literal in a private, loopback or link-local range,
 * "localhost" or "*.localhost") or whose host resolves to a refused address
 * is a SandboxConfigError (aistack's SSRF guard in src/sandbox/daytona.ts);
 * one whose host does not resolve, a SandboxUnavailableError. */
int moat_http_open(struct moat_http *h, const char *url, const char *secret,
		   const char *provider, struct moat_error *err);
/* The checks of moat_http_open that need no network (everything but DNS):
 * 0, or -1 with a SandboxConfigError. Run before anything else a provider
 * checks, as aistack checks daytonaApiUrl when the adapter is built. */
int moat_http_url_check(const char *url, const char *provider, struct moat_error *err);
void moat_http_close(struct moat_http *h);
/* One request: method, path appended to the base, headers (NULL-terminated),
 * body (may be NULL), timeout. on_data, when set, receives the body as it
 * arrives instead of resp->body; returning false aborts. -1 only for
 * transport errors other than a timeout (resp->timed_out covers that). */
int moat_http_request(struct moat_http *h, const char *method, const char *path,
		      const char *const *headers, const char *body, size_t body_len,
		      uint64_t timeout_ms, bool (*on_data)(void *ctx, const char *p, size_t n),
		      void *ctx, struct moat_http_resp *resp, struct moat_error *err);
/* A SandboxUnavailableError for an unexpected HTTP status, with a short,
 * redacted excerpt of the response body. */
int moat_http_status_error(struct moat_http *h, const char *what,
			   const struct moat_http_resp *resp, struct moat_error *err);
void moat_http_resp_free(struct moat_http_resp *resp);
/* true when MOAT_TEST_ALLOW_HTTP=1 is set (test-only). */
bool moat_http_test_mode(void);

#endif
