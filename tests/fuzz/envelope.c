/* Fuzz: the body of POST /py/... and /ts/... (serve_envelope_parse), what a
 * `moat serve` client sends. The first input byte picks the language. */
#include "serve/internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum moat_language lang = data[0] & 1 ? MOAT_LANG_TYPESCRIPT : MOAT_LANG_PYTHON;
	char *body = fuzz_copy(data + 1, size - 1);
	struct serve_envelope env;
	struct moat_error err = { 0 };
	bool too_large = false;
	if (serve_envelope_parse(body, size - 1, lang, NULL, &env, &too_large, &err) == 0) {
		if (!env.req || err.message)
			abort();
		if (env.req->code)
			(void)serve_is_handler(env.req->code, env.req->code_len, lang);
		serve_envelope_free(&env);
	} else if (!err.message) {
		abort();
	}
	moat_error_clear(&err);
	free(body);
	return 0;
}
