/* A provider's output into the result, within the request's cap, and
 * streamed: below the providers (docker.c, e2b.c, daytona.c) that call it
 * and providers.c that dispatches to them (make layers: no file of a room
 * calls back up). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys.h"
#include "providers/internal.h"

void moat_prov_output(struct moat_result *res, const struct moat_provider_options *o,
		      enum moat_stream which, const char *buf, size_t len, size_t cap)
{
	char **dst = which == MOAT_STDOUT ? &res->stdout_buf : &res->stderr_buf;
	size_t *dlen = which == MOAT_STDOUT ? &res->stdout_len : &res->stderr_len;
	bool *trunc = which == MOAT_STDOUT ? &res->stdout_truncated : &res->stderr_truncated;
	size_t keep = moat_cap_take(*dlen, len, cap, trunc);
	if (keep == 0)
		return;
	char *nb = realloc(*dst, *dlen + keep + 1);
	if (!nb) {
		*trunc = true;
		return;
	}
	memcpy(nb + *dlen, buf, keep);
	*dlen += keep;
	nb[*dlen] = '\0';
	*dst = nb;
	if (o && o->run && o->run->on_output)
		o->run->on_output(o->run->output_ctx, which, buf, keep);
}
