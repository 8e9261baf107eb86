/* Fuzz: the JSON request (moat_request_parse_json) that `moat exec`,
 * `moat serve` (/v1/run) and the clients send. A parsed request must pass
 * moat_request_validate again; a refusal must carry a typed message. The
 * same bytes go through moat_config_request_keys (the CLI's look at them). */
#include "moat.h"
#include "moat_admin.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size);
	struct moat_request *req = NULL;
	struct moat_error err = { 0 };
	if (moat_request_parse_json(buf, size, &req, &err) == 0) {
		if (!req || err.message)
			abort();
		if (moat_request_validate(req, &err) < 0)
			abort(); /* the parser let through what the validator refuses */
		moat_request_free(req);
	} else if (req || !err.message || err.type == MOAT_ERR_NONE) {
		abort();
	}
	moat_error_clear(&err);
	/* the CLI asks which limits a request names before the config fills them */
	(void)moat_config_request_keys(buf, size);
	free(buf);
	return 0;
}
