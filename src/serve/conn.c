/* `moat serve`'s connections: the request deadline (MHD's timeout only
 * counts idle time, so a client that trickles a byte now and then would
 * hold its thread forever) and the watchdog that enforces it, which also
 * sweeps the cgroup leaves of moats no longer running; the request
 * target's unescape (a %00 refused, never cut); the service's notices. */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "serve/http.h"

static int hex_digit(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0'
	       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
	       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
					: -1;
}

/* libmicrohttpd's unescape (the path and each query argument, when the
 * request line is read): %XX decoded in place, as its own does. A %00
 * would leave a C string that ends early, and "/v1/kv/victim%00x" would
 * name "victim": instead the connection is marked (on_headers refuses the
 * request with 400) and the %00 is left as it is, so that nothing is cut
 * even without a mark. */
size_t srv_unescape_target(void *cls, struct MHD_Connection *c, char *url)
{
	(void)cls;
	const union MHD_ConnectionInfo *ci =
		c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
	struct conn *k = ci ? ci->socket_context : NULL;
	char *w = url;
	for (const char *r = url; *r;) {
		int hi, lo;
		if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0) {
			if (hi == 0 && lo == 0) {
				if (k)
					k->target_nul = true;
				*w++ = *r++;
				continue;
			}
			*w++ = (char)(hi * 16 + lo);
			r += 3;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
	return (size_t)(w - url);
}

/* Takes the mark srv_unescape_target left for this request. */
bool srv_target_had_nul(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *k = ci ? ci->socket_context : NULL;
	if (!k || !k->target_nul)
		return false;
	k->target_nul = false;
	return true;
}

/* The connection is shut down ms from now (0: no deadline). */
void srv_conn_deadline_in(struct server *s, struct MHD_Connection *c, int64_t ms)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *k = ci ? ci->socket_context : NULL;
	if (!k)
		return;
	pthread_mutex_lock(&s->conns_mu);
	k->deadline = ms ? moat_mono_ms() + ms : 0;
	pthread_mutex_unlock(&s->conns_mu);
}

void srv_conn_deadline(struct server *s, struct MHD_Connection *c, bool arm)
{
	srv_conn_deadline_in(s, c, arm ? (int64_t)s->o->client_timeout_s * 1000 : 0);
}

void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
		       enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct conn *k = calloc(1, sizeof *k);
		if (!k || !ci) {
			free(k);
			return;
		}
		k->fd = ci->connect_fd;
		pthread_mutex_lock(&s->conns_mu);
		k->deadline = moat_mono_ms() + (int64_t)s->o->client_timeout_s * 1000;
		k->next = s->conns;
		if (s->conns)
			s->conns->prev = k;
		s->conns = k;
		pthread_mutex_unlock(&s->conns_mu);
		*socket_context = k;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
		/* MHD closes the socket after this call: from here on the fd may
		 * be another connection's, so it leaves the list first */
		struct conn *k = *socket_context;
		pthread_mutex_lock(&s->conns_mu);
		if (k->prev)
			k->prev->next = k->next;
		else
			s->conns = k->next;
		if (k->next)
			k->next->prev = k->prev;
		pthread_mutex_unlock(&s->conns_mu);
		free(k);
		*socket_context = NULL;
	}
}

void srv_notice(struct server *s, const char *level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	serve_log_vnotice(&s->log, level, "serve", fmt, ap);
	va_end(ap);
}

/* Cgroup leaves left by moats no longer running (a predecessor killed with
 * -9 leaves its runs' leaves behind): removed when the service starts and
 * every LEFTOVER_SWEEP_MS after, so they wait neither for a run nor forever
 * (a run sweeps too, at most once a minute; src/cgroups). Only rmdir, only
 * leaves whose owner is gone: never a live moat's. */
#define LEFTOVER_SWEEP_MS 60000
static void sweep_leftovers(struct server *s, bool *warned)
{
	struct moat_cgroup_leftovers lo = { 0 };
	(void)moat_cgroup_sweep_leftovers(true, &lo);
	if (lo.removed)
		srv_notice(s, "info", "removed %u cgroup leaves left by moats no longer running (%s)",
			   lo.removed, lo.where ? lo.where : "?");
	if (lo.found > lo.removed && !*warned) {
		*warned = true;
		srv_notice(s, "warn", "%u cgroup leaves of moats no longer running could not be removed "
			   "(%s): processes are still in them (a moat of another pid namespace?)",
			   lo.found - lo.removed, lo.where ? lo.where : "?");
	}
	free(lo.where);
}

/* Every half second: a connection whose request (headers and body) is not in
 * by its deadline, or whose answer is not out by its own, is shut down; MHD
 * then closes it. And the leftover sweep above, at its start and every
 * minute. */
void *srv_watchdog(void *arg)
{
	struct server *s = arg;
	bool warned = false;
	/* first thing, beside the start-up: the listener does not wait for it */
	sweep_leftovers(s, &warned);
	int64_t next_sweep = moat_mono_ms() + LEFTOVER_SWEEP_MS;
	pthread_mutex_lock(&s->conns_mu);
	while (!s->watchdog_stop) {
		int64_t now = moat_mono_ms();
		if (now >= next_sweep) {
			pthread_mutex_unlock(&s->conns_mu);
			sweep_leftovers(s, &warned);
			pthread_mutex_lock(&s->conns_mu);
			next_sweep = moat_mono_ms() + LEFTOVER_SWEEP_MS;
			continue;
		}
		for (struct conn *k = s->conns; k; k = k->next)
			if (k->deadline && now > k->deadline) {
				/* reset, not closed: what the socket still holds for
				 * a slow reader is dropped with it */
				struct linger lg = { .l_onoff = 1, .l_linger = 0 };
				setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
				shutdown(k->fd, SHUT_RDWR);
				k->deadline = 0;
			}
		moat_cond_wait_ms(&s->conns_cv, &s->conns_mu, 500);
	}
	pthread_mutex_unlock(&s->conns_mu);
	return NULL;
}
