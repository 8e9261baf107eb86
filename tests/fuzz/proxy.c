/* Fuzz: the explicit proxy's request head (moat_proxy_parse_request) and
 * its refusals. Like the proxy's reader, the head is the input up to the
 * first blank line, at most 16 KiB; an input without one is only passed
 * whole, to check that the parser refuses a head without its end. */
#include "net/internal.h"
#include "fuzz.h"

#define HEAD_MAX 16384

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t have = size < HEAD_MAX ? size : HEAD_MAX;
	const uint8_t *end = memmem(data, have, "\r\n\r\n", 4);
	size_t head_len = end ? (size_t)(end - data) + 4 : have;
	char *head = fuzz_copy(data, head_len);
	struct moat_proxy_request rq;
	const char *reason = NULL;
	int v = moat_proxy_parse_request(head, head_len, &rq, &reason);
	if (!end && v == MOAT_PROXY_OK)
		abort();
	if ((v == MOAT_PROXY_OK) != (reason == NULL))
		abort();
	if (v == MOAT_PROXY_OK) {
		/* what the proxy forwards: every piece lies inside the head */
		const char *lo = head, *hi = head + head_len;
		if (rq.method < lo || rq.method + rq.method_len > hi || !rq.method_len ||
		    rq.version < lo || rq.version + 8 > hi)
			abort();
		if (!rq.tunnel && (rq.path < lo || rq.path + rq.path_len > hi))
			abort();
		for (size_t i = 0; i < rq.nh; i++)
			if (rq.h[i].name < lo || rq.h[i].name + rq.h[i].name_len > hi ||
			    rq.h[i].value < lo || rq.h[i].value + rq.h[i].value_len > hi)
				abort();
		if (!rq.logged || strnlen(rq.host.text, sizeof rq.host.text) > MOAT_HOST_MAX)
			abort();
	}
	free(rq.h);
	free(head);
	return 0;
}
