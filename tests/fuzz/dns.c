/* Fuzz: a DNS query from the sandbox (moat_dns_parse_query), then the
 * response moat builds to it (moat_dns_build_response, with two addresses of
 * each family) or the FORMERR for it; and the same bytes read as the host
 * resolver's response (moat_dns_parse_answers). */
#include <sys/socket.h>

#include "net/dnsmsg.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *msg = (uint8_t *)fuzz_copy(data, size);
	struct moat_dns_query q;
	int bad_id = -2;
	uint8_t out[MOAT_DNS_UDP_MAX];
	if (moat_dns_parse_query(msg, size, &q, &bad_id) == 0) {
		if (q.question_len > size || strnlen(q.name, sizeof q.name) > 253)
			abort();
		static const struct moat_dns_addr addrs[] = {
			{ AF_INET, { 192, 0, 2, 1 } },
			{ AF_INET6, { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 } },
			{ AF_INET, { 198, 51, 100, 7 } },
			{ AF_INET6, { 0x20, 0x01, 0x0d, 0xb8, [15] = 2 } },
		};
		int rcode = size ? data[size - 1] & 15 : 0;
		int n = moat_dns_build_response(&q, msg, rcode, addrs, 4, 60, out, sizeof out);
		if (n > (int)sizeof out || (n >= 0 && (size_t)n < q.question_len))
			abort();
		if (moat_dns_build_response(&q, msg, 0, addrs, 4, 60, out, q.question_len) !=
		    (int)q.question_len)
			abort();
	} else {
		if ((size >= 12) != (bad_id >= 0))
			abort();
		if (bad_id >= 0 && moat_dns_build_formerr((uint16_t)bad_id, out, sizeof out) != 12)
			abort();
	}
	struct moat_dns_addr got[3];
	int rc;
	for (int t = 0; t < 2; t++) {
		int n = moat_dns_parse_answers(msg, size, t ? 28 : 1, got, 3, &rc);
		if (n > 3 || (n >= 0 && (rc < 0 || rc > 15)))
			abort();
		for (int k = 0; k < n; k++)
			if (got[k].family != (t ? AF_INET6 : AF_INET))
				abort();
	}
	free(msg);
	return 0;
}
