/* The request rules of every module, behind the public moat_request_validate
 * and moat_request_parse_json: core checks the request's own fields, and
 * the network module its modes and allowlists. They meet here, in the one
 * module that knows all the others, so that core depends on none of them. */
#include <stdlib.h>

#include "core/core.h"
#include "net/net.h"

_Static_assert(MOAT_MAX_LIST_ENTRIES == MOAT_NET_MAX_ENTRIES,
	       "the JSON list bound is the network module's entry bound");

int moat_request_validate(const struct moat_request *req, struct moat_error *err)
{
	if (moat_request_check(req, err) < 0)
		return -1;
	/* network, allowedHosts, allowedCidrs */
	return moat_net_validate(req, err);
}

int moat_request_parse_json(const char *buf, size_t len, struct moat_request **out,
			    struct moat_error *err)
{
	if (moat_request_parse(buf, len, out, err) < 0)
		return -1;
	if (moat_net_validate(*out, err) < 0) {
		moat_request_free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}
