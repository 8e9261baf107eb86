/* Fuzz: one "allowedHosts" entry (moat_allow_parse_entry), the same bytes as
 * an "allowedCidrs" entry (moat_cidr_parse) and as a URL authority's host
 * (moat_host_parse, the proxy's). Checked: the canonical form of a host
 * parses again to itself (entries and requests meet in that form), an entry
 * allows the host it names (and a wildcard only the names below it). */
#include <stdio.h>
#include <sys/socket.h>

#include "net/internal.h"
#include "fuzz.h"

/* Parses h's canonical text again, as a URL would write it. */
static int reparse(const struct moat_host *h, struct moat_host *out)
{
	char text[MOAT_HOST_MAX + 3];
	int n = snprintf(text, sizeof text, h->kind == MOAT_HOST_IPV6 ? "[%s]" : "%s", h->text);
	if (n < 0 || (size_t)n >= sizeof text)
		abort();
	return moat_host_parse(text, (size_t)n, out);
}

static void check_host(const struct moat_host *h)
{
	struct moat_host again;
	if (strnlen(h->text, sizeof h->text) > MOAT_HOST_MAX)
		abort();
	if (reparse(h, &again) < 0 || again.kind != h->kind || strcmp(again.text, h->text) ||
	    (h->kind != MOAT_HOST_NAME && memcmp(again.addr, h->addr, 16)))
		abort(); /* canonicalisation is not idempotent */
}

static void check_entry(struct moat_allow_entry *e)
{
	struct moat_allowlist al = { .entries = e, .count = 1 };
	struct moat_host h, below;
	uint16_t port = e->any_port ? 8443 : e->port;
	char text[MOAT_HOST_MAX + 8];
	if (!e->host || strlen(e->host) > MOAT_HOST_MAX)
		abort();
	/* the host as the entry names it: canonical text parses to itself */
	int n = snprintf(text, sizeof text, strchr(e->host, ':') ? "[%s]" : "%s", e->host);
	if (moat_host_parse(text, (size_t)n, &h) < 0 || strcmp(h.text, e->host))
		abort();
	if (!e->wildcard) {
		if (!moat_allowlist_match(&al, e->https, &h, port) || !moat_allowlist_match_name(&al, &h))
			abort();
		if (moat_allowlist_match(&al, !e->https, &h, port))
			abort(); /* the scheme is part of the entry */
		return;
	}
	if (moat_allowlist_match(&al, e->https, &h, port))
		abort(); /* "*.x" is strictly below x */
	n = snprintf(text, sizeof text, "a.%s", e->host);
	if (n < (int)sizeof text - 1 && (size_t)n <= MOAT_HOST_MAX &&
	    moat_host_parse(text, (size_t)n, &below) == 0 && below.kind == MOAT_HOST_NAME &&
	    !moat_allowlist_match(&al, e->https, &below, port))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	struct moat_error err = { 0 };
	struct moat_allow_entry e = { 0 };
	if (moat_allow_parse_entry(s, &e, &err) == 0) {
		check_entry(&e);
		free(e.host);
	} else if (!err.message || err.type != MOAT_ERR_POLICY) {
		abort();
	}
	moat_error_clear(&err);

	struct moat_cidr c;
	if (moat_cidr_parse(s, &c, &err) == 0 &&
	    ((c.family == AF_INET && c.prefix > 32) || (c.family == AF_INET6 && c.prefix > 128) ||
	     (c.family != AF_INET && c.family != AF_INET6) || !c.prefix))
		abort();
	moat_error_clear(&err);
	free(s);

	char *raw = fuzz_copy(data, size);
	struct moat_host h;
	if (moat_host_parse(raw, size, &h) == 0)
		check_host(&h);
	free(raw);
	return 0;
}
