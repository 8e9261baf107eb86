/* Resolution for the sandbox: the host's DNS resolvers only (the
 * nameservers of /etc/resolv.conf), asked for exactly the name given.
 * Never /etc/hosts, never the host's search domains (RES_DEFNAMES and
 * RES_DNSRCH off; res_nquery does not search anyway): what the host alone
 * knows by those means must not be told to a sandbox. Bounded like
 * getaddrinfo was: the resolv.conf timeout and attempts, capped. */
#include <netinet/in.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <resolv.h>
#include <string.h>

#include "net/dnsmsg.h"
#include "net/internal.h"

#define RESOLVE_BUF 4096      /* one response (TCP fallback included) */
#define RESOLVE_RETRANS_MAX 3 /* seconds per try */
#define RESOLVE_RETRY_MAX 2   /* tries per server */

enum moat_resolve moat_resolve(const char *name, int family, struct moat_dns_addr *addrs,
			       size_t max, size_t *n)
{
	*n = 0;
	if (family != AF_INET && family != AF_INET6)
		return MOAT_RESOLVE_FAIL;
	struct __res_state st;
	memset(&st, 0, sizeof st);
	if (res_ninit(&st) < 0)
		return MOAT_RESOLVE_FAIL;
	st.options &= ~(unsigned long)(RES_DEFNAMES | RES_DNSRCH);
	if (st.retrans > RESOLVE_RETRANS_MAX)
		st.retrans = RESOLVE_RETRANS_MAX;
	if (st.retry > RESOLVE_RETRY_MAX)
		st.retry = RESOLVE_RETRY_MAX;
	uint16_t qtype = family == AF_INET ? 1 : 28;
	uint8_t ans[RESOLVE_BUF];
	int len = res_nquery(&st, name, 1 /* IN */, qtype, ans, sizeof ans);
	int herr = st.res_h_errno;
	res_nclose(&st);
	if (len < 0)
		return herr == HOST_NOT_FOUND ? MOAT_RESOLVE_NONAME
		     : herr == NO_DATA ? MOAT_RESOLVE_NODATA : MOAT_RESOLVE_FAIL;
	int rcode;
	int got = moat_dns_parse_answers(ans, (size_t)len < sizeof ans ? (size_t)len : sizeof ans,
					 qtype, addrs, max, &rcode);
	if (got < 0 || rcode != 0)
		return rcode == 3 ? MOAT_RESOLVE_NONAME : MOAT_RESOLVE_FAIL;
	*n = (size_t)got;
	return got ? MOAT_RESOLVE_OK : MOAT_RESOLVE_NODATA;
}
