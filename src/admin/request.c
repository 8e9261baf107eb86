/* The request pipeline (moat_admin.h): parse, fill from the config or a
 * service's limits, validate once. moat exec, moat run, /v1/run and the
 * Spin routes all come through here; what it prepares, moat_run, the phases
 * and the providers trust (moat_request.prepared). */
#include <stdlib.h>

#include "moat_admin.h"
#include "core/core.h"

int moat_request_finish(struct moat_request *req, unsigned given,
			const struct moat_request_defaults *d, struct moat_error *err)
{
	req->prepared = false;
	if (d && d->cfg)
		moat_config_apply(d->cfg, req, given);
	if (d && d->fill && d->fill(d->ctx, req, given, err) < 0)
		return -1;
	if (moat_request_validate(req, err) < 0) {
		if (d && d->entry_refusal_is_config && err->type == MOAT_ERR_POLICY)
			err->type = MOAT_ERR_CONFIG;
		return -1;
	}
	req->prepared = true;
	return 0;
}

int moat_request_prepare(const char *json, size_t len, const char *header_id,
			 const struct moat_request_defaults *d, struct moat_request **out,
			 struct moat_error *err)
{
	*out = NULL;
	struct moat_request *req = NULL;
	if (moat_request_decode(json, len, header_id, &req, err) < 0)
		return -1;
	if (moat_request_finish(req, moat_config_request_keys(json, len), d, err) < 0) {
		moat_request_free(req);
		return -1;
	}
	*out = req;
	return 0;
}
