/* Provider dispatch, and the two simplest providers: native and none. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys.h"
#include "moat_admin.h"
#include "providers/internal.h"

static int native_run(const struct moat_request *req, const struct moat_provider_options *o,
		      struct moat_result **out, struct moat_error *err)
{
	struct moat_run_options opts;
	if (o->run)
		opts = *o->run;
	else
		moat_run_options_init(&opts);
	if (!opts.policy_path && o->cfg->policy_path)
		opts.policy_path = o->cfg->policy_path;
	if (!opts.rootfs_dir && o->cfg->rootfs_dir)
		opts.rootfs_dir = o->cfg->rootfs_dir;
	if (o->cfg->strict_isolation)
		opts.strict_isolation = true;
	if (!opts.kv_store && o->cfg->kv_store)
		opts.kv_store = o->cfg->kv_store;
	if (!opts.kv_max_keys && !opts.kv_max_bytes && !opts.kv_max_value && !opts.kv_min_free &&
	    o->cfg->kv_quota &&
	    moat_kv_quota_options(o->cfg->kv_quota, &opts, err) < 0)
		return -1;
	if (moat_run(req, &opts, out, err) < 0)
		return -1;
	(*out)->provider = "native";
	return 0;
}

static int none_run(const struct moat_request *req, const struct moat_provider_options *o,
		    struct moat_result **out, struct moat_error *err)
{
	(void)req;
	(void)out;
	return moat_error_set(err, MOAT_ERR_POLICY, 0,
			      "sandboxing is disabled (provider \"none\"%s%s): refusing to run "
			      "code; set \"provider\" to native, docker, e2b or daytona",
			      o->cfg->source ? " from " : "", o->cfg->source ? o->cfg->source : "");
}

static const struct moat_provider PROVIDERS[] = {
	{ "native", native_run },
	{ "docker", moat_docker_run },
	{ "e2b", moat_e2b_run },
	{ "daytona", moat_daytona_run },
	{ "none", none_run },
};

const struct moat_provider *moat_provider_get(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < sizeof PROVIDERS / sizeof PROVIDERS[0]; i++)
		if (!strcmp(PROVIDERS[i].name, name))
			return &PROVIDERS[i];
	return NULL;
}

const char *moat_provider_name(const char *name)
{
	const struct moat_provider *p = moat_provider_get(name);
	return p ? p->name : NULL;
}

int moat_provider_run(const char *name, const struct moat_request *req,
		      const struct moat_provider_options *o, struct moat_result **out,
		      struct moat_error *err)
{
	*out = NULL;
	if (!o || !o->cfg)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "no configuration");
	if (!name)
		name = o->cfg->provider ? o->cfg->provider : "native";
	const struct moat_provider *p = moat_provider_get(name);
	if (!p)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "unknown provider (native, docker, e2b, daytona, none)");
	if (!req->prepared && moat_request_validate(req, err) < 0)
		return -1;
	/* the store lives in moat; another provider would run without it */
	if (req->kv_enabled && p->run != native_run)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"kvEnabled\" needs the native provider (the key-value store "
				      "is moat's own; provider \"%s\" has none)", p->name);
	/* the other providers run code in a language only, and cannot bind a
	 * host directory */
	if (req->argc && p->run != native_run)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"argv\" needs the native provider (provider \"%s\" runs "
				      "code only)", p->name);
	if (o->run && o->run->workdir && p->run != native_run)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "--workdir needs the native provider (provider \"%s\" cannot "
				      "map a host directory)", p->name);
	if (p->run(req, o, out, err) < 0)
		return -1;
	(*out)->provider = p->name;
	if (moat_request_warn_units(req, *out) < 0) {
		moat_result_free(*out);
		*out = NULL;
		return moat_error_oom(err);
	}
	for (size_t i = 0; i < o->cfg->warnings_count; i++)
		if (moat_result_warn(*out, "%s", o->cfg->warnings[i]) < 0) {
			moat_result_free(*out);
			*out = NULL;
			return moat_error_oom(err);
		}
	return 0;
}
