/* Fuzz: one "allowedHosts" entry (moat_allow_parse_entry), the same bytes as
 * an "allowedCidrs" entry (moat_cidr_parse) and as a URL authority's host
 * (moat_host_parse, the proxy's), and the match of a parsed host against a
 * parsed entry. */
#include <sys/socket.h>

#include "net/internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	struct moat_error err = { 0 };
	struct moat_allow_entry e = { 0 };
	bool have_entry = moat_allow_parse_entry(s, &e, &err) == 0;
	if (have_entry && (!e.host || strlen(e.host) > MOAT_HOST_MAX))
		abort();
	if (!have_entry && (!err.message || err.type != MOAT_ERR_POLICY))
		abort();
	moat_error_clear(&err);

	struct moat_cidr c;
	if (moat_cidr_parse(s, &c, &err) == 0 &&
	    ((c.family == AF_INET && c.prefix > 32) || (c.family == AF_INET6 && c.prefix > 128) ||
	     (c.family != AF_INET && c.family != AF_INET6)))
		abort();
	moat_error_clear(&err);

	char *raw = fuzz_copy(data, size);
	struct moat_host h;
	if (moat_host_parse(raw, size, &h) == 0) {
		if (strnlen(h.text, sizeof h.text) > MOAT_HOST_MAX)
			abort();
		if (have_entry) {
			struct moat_allowlist al = { .entries = &e, .count = 1 };
			(void)moat_allowlist_match(&al, e.https, &h, e.port);
			(void)moat_allowlist_match_name(&al, &h);
		}
	}
	free(raw);
	if (have_entry)
		free(e.host);
	free(s);
	return 0;
}
