/* What both relays (egress.c's transparent one, proxy.c's) use for their
 * connections to the host: the outgoing socket with its charged buffers,
 * the reset close, the idle limit and its logged reason. Below net.c, which
 * starts the relays, and below the relays, so none calls back up (make
 * layers). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sys.h"
#include "net/internal.h"

int moat_net_out_socket(int family, _Atomic uint64_t *used, uint64_t *charged)
{
	*charged = 0;
	int s = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	const uint64_t cost = 4ull * MOAT_NET_OUT_LARGE;
	uint64_t cur = atomic_load(used);
	while (cur + cost <= MOAT_NET_OUT_BUDGET &&
	       !atomic_compare_exchange_weak(used, &cur, cur + cost))
		;
	int size = MOAT_NET_OUT_SMALL;
	if (cur + cost <= MOAT_NET_OUT_BUDGET) {
		*charged = cost;
		size = MOAT_NET_OUT_LARGE;
	}
	if (setsockopt(s, SOL_SOCKET, SO_SNDBUF, &size, sizeof size) < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) < 0) {
		int saved = errno;
		close(s);
		moat_net_out_release(used, *charged);
		*charged = 0;
		errno = saved;
		return -1;
	}
	return s;
}

void moat_net_out_release(_Atomic uint64_t *used, uint64_t charged)
{
	if (charged)
		atomic_fetch_sub(used, charged);
}

void moat_net_reset_close(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	close(fd);
}

int64_t moat_net_relay_idle_ms(void)
{
	int64_t ms = moat_test_ms("MOAT_TEST_RELAY_IDLE_MS", MOAT_NET_RELAY_IDLE_MS);
	return ms < 86400000 ? ms : 86400000; /* poll()'s int, a day at most */
}

void moat_net_idle_reason(int64_t idle_ms, char *out, size_t len)
{
	snprintf(out, len, "idle for %lld.%03lld s (no byte either way): closed with a reset",
		 (long long)(idle_ms / 1000), (long long)(idle_ms % 1000));
}
