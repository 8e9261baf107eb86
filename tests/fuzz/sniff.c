/* Fuzz: the first bytes of a transparent TCP connection out of the sandbox
 * (moat_sniff: TLS SNI or HTTP Host), as the egress path reads them: it
 * decides on the first prefix whose verdict is not MORE, then forwards every
 * byte. So a verdict and name, once given, must not change as more bytes
 * arrive; a few prefixes of each input are checked against the whole. */
#include "net/sniff.h"
#include "fuzz.h"

static enum moat_sniff_kind sniff(const uint8_t *data, size_t len, char name[254])
{
	uint8_t *b = (uint8_t *)fuzz_copy(data, len);
	memset(name, 'x', 254);
	enum moat_sniff_kind k = moat_sniff(b, len, name);
	free(b);
	if (strnlen(name, 254) > 253)
		abort();
	if (k != MOAT_SNIFF_TLS && k != MOAT_SNIFF_HTTP && name[0])
		abort();
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MOAT_SNIFF_MAX)
		size = MOAT_SNIFF_MAX;
	char whole_name[254], name[254];
	enum moat_sniff_kind whole = sniff(data, size, whole_name);
	size_t step = size / 8 + 1;
	for (size_t n = 0; n < size; n += step) {
		enum moat_sniff_kind k = sniff(data, n, name);
		if (k != MOAT_SNIFF_MORE && (k != whole || strcmp(name, whole_name)))
			abort();
	}
	return 0;
}
