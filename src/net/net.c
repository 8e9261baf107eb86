/* Network modes. Only "none" exists so far: a fresh network namespace
 * whose lo is brought up; a request for egress is refused, not ignored. */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/net.h"

struct moat_net {
	int unused;
};

int moat_net_prepare(const struct moat_request *req, struct moat_net **out,
		     struct moat_error *err)
{
	if (req->network)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "\"network\": true is not supported by this build of moat "
				      "(no user-mode network stack is wired in); the run was not started");
	*out = calloc(1, sizeof **out);
	if (!*out)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM, "out of memory");
	return 0;
}

char *const *moat_net_env(const struct moat_net *net)
{
	(void)net;
	return NULL;
}

int moat_net_child_fd(const struct moat_net *net)
{
	(void)net;
	return -1;
}

int moat_net_child_setup(const struct moat_net *net)
{
	(void)net;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

int moat_net_attach(struct moat_net *net, pid_t child, struct moat_error *err)
{
	(void)net;
	(void)child;
	(void)err;
	return 0;
}

int moat_net_start(struct moat_net *net, struct moat_error *err)
{
	(void)net;
	(void)err;
	return 0;
}

void moat_net_finish(struct moat_net *net, struct moat_result *res)
{
	if (res && !res->network_json)
		res->network_json = strdup("{\"mode\":\"none\"}");
	free(net);
}
