/* Fuzz: the "outputs" stream pid 1 sends the supervisor (records of a
 * header, a file name and its bytes), decoded by moat_outputs_render into
 * the result's "files" JSON. The sandbox writes that stream: any bytes. The
 * first input byte says whether the stream was cut (the collector's cap). */
#include <cjson/cJSON.h>

#include "runner/runner.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool cut = data[0] & 1;
	char *stream = fuzz_copy(data + 1, size - 1);
	struct moat_result *res = moat_result_new();
	if (!res)
		abort();
	if (moat_outputs_render(stream, size - 1, cut, res) == 0) {
		/* the result carries it as JSON: it must be a JSON object */
		cJSON *j = res->files_json ? cJSON_Parse(res->files_json) : NULL;
		if (!cJSON_IsObject(j))
			abort();
		cJSON_Delete(j);
	}
	moat_result_free(res);
	free(stream);
	return 0;
}
