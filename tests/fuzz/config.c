/* Fuzz: a config file (moat_config_parse), read as moat.json and as an
 * aistack.config.json; what parses is applied to a request, and its "serve"
 * object goes through serve_limits_parse as `moat serve` reads it. */
#include "moat_admin.h"
#include "core/config.h"
#include "serve/internal.h"
#include "fuzz.h"

static void one(const char *buf, size_t size, bool aistack)
{
	struct moat_config *cfg = NULL;
	struct moat_error err = { 0 };
	if (moat_config_parse(buf, size, aistack, "fuzz.json", &cfg, &err) == 0) {
		if (!cfg || !cfg->provider)
			abort();
		struct moat_request *req = moat_request_new();
		if (req) {
			moat_config_apply(cfg, req, 0);
			moat_request_free(req);
		}
		(void)moat_config_image(cfg, "python");
		struct serve_limits l;
		serve_limits_default(&l);
		if (serve_limits_parse(cfg->serve_json, &l, &err) < 0 && !err.message)
			abort();
		moat_config_free(cfg);
	} else if (cfg || !err.message) {
		abort();
	}
	moat_error_clear(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size);
	one(buf, size, false);
	one(buf, size, true);
	free(buf);
	return 0;
}
