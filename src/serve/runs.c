/* How moat serve runs a request: in a sandbox its pool made ahead (or its
 * Python zygote made for it), else in a cold one; then the sandbox goes
 * back to the pool, which releases it after the answer (src/pool/). */
#include <errno.h>
#include <stdlib.h>

#include "serve/internal.h"

static void log_warn(void *ctx, const char *msg)
{
	serve_log_notice(ctx, "warn", "pool", "%s", msg);
}

int serve_pool_start(struct pool **out, unsigned want, bool zygote,
		     const struct moat_run_options *opts,
		     const struct serve_limits *limits, struct serve_log *log, bool (*saturated)(void *ctx),
		     void *sat_ctx, struct moat_error *err)
{
	*out = NULL;
	/* the limits a Spin request gets: the pool serves exactly those */
	struct moat_request *l = moat_request_new();
	if (!l)
		return moat_error_oom(err);
	l->max_output_bytes = SERVE_SCRIPT_OUTPUT_CAP;
	int rc = serve_limits_apply(limits, l, 0, err);
	if (rc == 0) {
		struct pool_config cfg = {
			.want = want, .zygote = zygote,
			.zygote_max_children = limits->pool_zygote_max_children,
			.zygote_max_age_ms = limits->pool_zygote_max_age_ms,
			.opts = opts, .limits = l, .saturated = saturated, .sat_ctx = sat_ctx,
			.warn = log ? log_warn : NULL, .warn_ctx = log,
		};
		rc = pool_start(out, &cfg, err);
	}
	moat_request_free(l);
	return rc;
}

int serve_pool_run(struct pool *p, const struct moat_request *req,
		   const struct moat_run_options *opts, struct pool_lease *l,
		   struct moat_result **out, struct moat_error *err)
{
	*out = NULL;
	pool_acquire(p, req, opts, l);
	int rc = 0;
	if (!l->sb) {
		/* cold: moat_run's phases, with the release in pool_return */
		rc = moat_sandbox_create(req, opts, &l->sb, err);
		if (rc == 0)
			rc = moat_sandbox_start(l->sb, err);
	}
	if (rc == 0)
		rc = moat_sandbox_wait(l->sb, out, err);
	if (rc == 0 && moat_request_warn_units(req, *out) < 0) {
		moat_result_free(*out);
		*out = NULL;
		rc = moat_error_oom(err);
	}
	return rc;
}

void serve_pool_end(struct pool *p, struct pool_lease *l, int rc)
{
	pool_return(p, l, rc); /* pid 1 reaped there */
}
