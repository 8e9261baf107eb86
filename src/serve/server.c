/* `moat serve`: libmicrohttpd with a thread per connection. Each request is
 * routed, authenticated and size-checked from its headers, its body is
 * buffered (capped), then it waits for a run slot (bounded queue) and runs
 * in a fresh sandbox: scripts and /v1/run in the connection's thread,
 * handlers in a worker thread that streams the response to the connection's
 * thread as it comes. docs/SERVE.md is the contract. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "serve/e2b.h"
#include "serve/http.h"

#define PER_IP_LIMIT 64u
#define CONNECTION_LIMIT 512u
#define HEADER_MEMORY (32u * 1024u)
#define METRICS_CONNECTION_LIMIT 32u /* --metrics-listen: scrapers, not clients */

static double tv_s(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

/* The CPU time of this process and of its children reaped so far (a run's
 * pid 1 is reaped with its descendants' time in it), in seconds. */
static double cpu_used_s(void)
{
	struct rusage self, kids;
	if (getrusage(RUSAGE_SELF, &self) < 0 || getrusage(RUSAGE_CHILDREN, &kids) < 0)
		return 0;
	return tv_s(self.ru_utime) + tv_s(self.ru_stime) + tv_s(kids.ru_utime) +
	       tv_s(kids.ru_stime);
}

/* The CPUs the service and its runs kept busy lately (s->mu held): CPU time
 * over wall time, averaged exponentially over CPU_TAU_MS; true when that
 * leaves less than half a CPU of those this process may use. A run's time
 * counts once it has ended: a long one weighs on the next seconds. */
#define CPU_TAU_MS 1000.0
static bool cpu_busy(struct server *s)
{
	int64_t now = moat_mono_ms();
	double used = cpu_used_s();
	if (s->cpu_at) {
		double decay = exp(-(double)(now - s->cpu_at) / CPU_TAU_MS);
		double spent = used > s->cpu_last ? used - s->cpu_last : 0;
		s->cpu_rate = s->cpu_rate * decay + spent * 1000.0 / CPU_TAU_MS;
	}
	s->cpu_at = now;
	s->cpu_last = used;
	return s->cpu_rate > s->cpus - 0.5;
}

/* Every run slot taken, or the service and its runs have kept the CPUs
 * busy for the last second or so (cpu_busy): the pool does not prewarm an
 * interpreter then (its start would only compete with the runs; a request
 * that finds no warm sandbox runs cold, under such load as fast). */
static bool slots_full(void *ctx)
{
	struct server *s = ctx;
	pthread_mutex_lock(&s->mu);
	bool full = s->running >= s->o->max_concurrent || cpu_busy(s);
	pthread_mutex_unlock(&s->mu);
	return full;
}

/* The CPUs this process may run on (its affinity), at least 1. */
static double usable_cpus(void)
{
	int64_t t = moat_test_ms("MOAT_TEST_POOL_CPUS", 0);
	if (t > 0)
		return (double)t;
	cpu_set_t set;
	int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
	if (n <= 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (double)n : 1.0;
}

/* Warm sandboxes per language: --pool, else the config's serve.pool, else
 * 2 with at least 4 GiB available, 1 with 1 GiB, none below (an idle
 * python sandbox holds about 10 MiB, a node one about 40). */
static unsigned pool_size(int flag, int config)
{
	if (flag >= 0)
		return (unsigned)flag;
	if (config >= 0)
		return (unsigned)config;
	long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	double mib = pages > 0 && psize > 0 ? (double)pages * (double)psize / 1048576.0 : 0;
	return mib >= 4096 ? 2 : mib >= 1024 ? 1 : 0;
}

/* The live sandboxes' pool: --sandbox-pool, else serve.sandboxes.pool,
 * else 1 as root with 1 GiB available and none rootless: there no cgroup
 * bounds a sandbox's memory, and the pooled one, frozen, would hold it
 * unbounded for a create that may never come (docs/SANDBOXES.md). */
static unsigned sandbox_pool_size(int flag, int config)
{
	if (flag >= 0)
		return (unsigned)flag;
	if (config >= 0)
		return (unsigned)config;
	return geteuid() == 0 && pool_size(-1, -1) > 0 ? 1 : 0;
}

/* The request a create with nothing asked is prepared from (sbx_create's
 * and E2B's text for an empty body): the pool's sandboxes are made from
 * it, and only a create whose text is this takes one. */
#define SANDBOX_POOL_KEY "{\"language\":\"bash\",\"code\":\"\"}"
/* The same with network: true: E2B's create with allow_internet_access
 * true and nothing else asked (e2b_api.c), or a native create of just
 * {"network":true}. Its egress rules are the operator's (nothing of the
 * caller's): a sandbox made from it ahead is the one made at the create. */
#define SANDBOX_NETPOOL_KEY "{\"network\":true,\"language\":\"bash\",\"code\":\"\"}"

/* Sessions live at once by default: as many of the default size as the
 * budgets hold (serve.sandboxes: memory and cpus, docs/SESSIONS.md
 * "Budgets"), at most SERVE_SESSIONS_AUTO_MAX, at least 1. */
static unsigned sessions_auto(uint64_t budget_mb, double budget_cpus, uint64_t memory_mb,
			      double cpus)
{
	double n = memory_mb ? (double)budget_mb / (double)memory_mb : 0;
	if (cpus > 0 && budget_cpus / cpus < n)
		n = budget_cpus / cpus;
	return n >= SERVE_SESSIONS_AUTO_MAX ? SERVE_SESSIONS_AUTO_MAX : n >= 1 ? (unsigned)n : 1;
}

__attribute__((format(printf, 2, 0)))
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct server *s = cls;
	serve_log_vnotice(&s->log, "warn", "http", fmt, ap);
}

/* Waits until no run holds a slot and every request has been answered, or
 * deadline (CLOCK_MONOTONIC ms). */
static bool wait_idle(struct server *s, int64_t deadline)
{
	pthread_mutex_lock(&s->mu);
	while (s->running > 0 || s->active > 0) {
		int64_t left = deadline - moat_mono_ms();
		if (left <= 0)
			break;
		moat_cond_wait_ms(&s->cv, &s->mu, left);
	}
	bool idle = s->running == 0 && s->active == 0;
	pthread_mutex_unlock(&s->mu);
	return idle;
}

int moat_serve_auth_check(int listen_fd, bool token, bool no_auth, bool *is_unix,
			  const char **why)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	memset(&ss, 0, sizeof ss);
	if (getsockname(listen_fd, (struct sockaddr *)&ss, &sl) < 0) {
		*why = "the listener is not a socket";
		return -1;
	}
	if (is_unix)
		*is_unix = ss.ss_family == AF_UNIX;
	if (token && no_auth) {
		*why = "--no-auth and --token-file exclude each other";
		return -1;
	}
	if (ss.ss_family == AF_UNIX || token)
		return 0;
	bool loopback;
	if (ss.ss_family == AF_INET)
		loopback = ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24 == 127;
	else if (ss.ss_family == AF_INET6)
		loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
	else {
		*why = "the listener is neither TCP nor a unix socket";
		return -1;
	}
	if (!loopback) {
		*why = no_auth ? "--no-auth is for a loopback address or a unix socket only: anyone "
				 "who reaches this one could run code on this machine; give "
				 "--token-file FILE"
			       : "not a loopback address: anyone who reaches it could run code on "
				 "this machine; give --token-file FILE";
		return -1;
	}
	if (!no_auth) {
		*why = "a TCP listener needs a token, on loopback too (any local user could run "
		       "code and read every sandboxId's store): give --token-file FILE, or "
		       "--no-auth to serve without one";
		return -1;
	}
	return 0;
}

static void close_listeners(const struct moat_serve_options *o)
{
	close(o->listen_fd);
	if (o->metrics_desc)
		close(o->metrics_fd);
}

int moat_serve_run(const struct moat_serve_options *o, const sigset_t *stop,
		   struct moat_error *err)
{
	const char *why;
	bool is_unix = false;
	if (moat_serve_auth_check(o->listen_fd, o->token != NULL, o->no_auth, &is_unix,
				  &why) < 0) {
		close_listeners(o);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "moat serve: %s: %s",
				      o->listen_desc, why);
	}
	if (moat_mhd_load(&why) < 0) {
		close_listeners(o);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "moat serve: %s", why);
	}
	struct server *s = calloc(1, sizeof *s);
	if (!s) {
		close_listeners(o);
		return moat_error_oom(err);
	}
	s->o = o;
	serve_limits_default(&s->limits);
	serve_metrics_init(&s->metrics);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->conns_mu, NULL);
	pthread_cond_init(&s->conns_cv, NULL);
	s->cancel_fd = -1;
	s->cpus = usable_cpus();
	int rc = -1;
	bool sessions_stopped = false;
	if (serve_log_init(&s->log, o->log, o->json_log, err) < 0) {
		close(o->listen_fd);
		goto out;
	}
	if (serve_limits_parse(o->cfg->serve_json, &s->limits, err) < 0) {
		close_listeners(o);
		goto out;
	}
	{
		char def[SERVE_NODE_MAX + 1];
		const char *node = o->node ? o->node : s->limits.node;
		if (!o->node && !*node) /* --node "" is refused below */
			serve_node_default(def), node = def;
		if (serve_node_set(node) < 0) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "moat serve: the node name must be 1-32 of a-z, 0-9 and -");
			close_listeners(o);
			goto out;
		}
	}
	if (o->token) {
		s->auth = true;
		moat_sha256(o->token, strlen(o->token), s->token_hash);
	}
	/* /healthz stays {"status":"ok"} (clients compare it whole) unless
	 * authentication is off on purpose: then it says so */
	s->healthz = o->no_auth ? "{\"status\":\"ok\",\"auth\":\"off\",\"warning\":\"authentication "
				  "is off (--no-auth): whoever can connect can run code and "
				  "read every sandboxId's store\"}\n"
				: "{\"status\":\"ok\"}\n";
	if ((s->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "eventfd: %s", strerror(errno));
		close_listeners(o);
		goto out;
	}
	if ((errno = pthread_create(&s->watchdog, NULL, srv_watchdog, s)) != 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "moat serve: cannot start the request-deadline thread: %s",
			       strerror(errno));
		close_listeners(o);
		goto out;
	}
	s->have_watchdog = true;
	/* the pool's thread also releases finished sandboxes after their
	 * answer: it runs with --pool 0 too */
	unsigned want = pool_size(o->pool, s->limits.pool);
	if (o->pool_zygote_max_children)
		s->limits.pool_zygote_max_children = o->pool_zygote_max_children;
	if (o->pool_zygote_max_age_s)
		s->limits.pool_zygote_max_age_ms = o->pool_zygote_max_age_s * 1000ull;
	if (o->max_relays)
		s->limits.max_relays = o->max_relays;
	if (o->max_dns)
		s->limits.max_dns = o->max_dns;
	if (!(s->relay_caps = moat_relay_caps_new(s->limits.max_relays, s->limits.max_dns))) {
		moat_error_oom(err);
		close_listeners(o);
		goto out;
	}
	{
		struct moat_run_options po;
		moat_run_options_init(&po);
		po.rootfs_dir = o->rootfs_dir ? o->rootfs_dir : o->cfg->rootfs_dir;
		po.policy_path = o->cfg->policy_path;
		po.runtime_dir = o->runtime_dir;
		po.strict_isolation = o->cfg->strict_isolation;
		/* the zygote: asked for (--pool-zygote, serve.poolZygote), else
		 * on where it can run; a zygote asked for that cannot run is a
		 * warning of the pool's, one not asked for is not tried */
		int zyg = o->pool_zygote >= 0 ? o->pool_zygote : s->limits.pool_zygote;
		const char *no_zyg = pool_zygote_refusal(&po);
		if (want && zyg < 0 && no_zyg)
			srv_notice(s, "info", "Python requests use warm interpreters, not the zygote: it "
				   "needs the host's root and the default seccomp policy (%s)", no_zyg);
		if (zyg < 0)
			zyg = !no_zyg;
		if (serve_pool_start(&s->pool, want, want && zyg > 0, &po, &s->limits, &s->log,
				     slots_full, s, err) < 0) {
			close_listeners(o);
			goto out;
		}
	}
	{
		/* the budgets: memory, half the host's less what the run slots
		 * may take at once; cpus, SERVE_SANDBOX_CPU_OVERCOMMIT times
		 * the CPUs this process may use */
		uint64_t bmem = s->limits.sandboxes_memory_mb;
		if (!bmem)
			bmem = serve_budget_default_memory_mb(o->max_concurrent,
							      s->limits.max_memory_mb,
							      s->limits.def_memory_mb);
		double bcpu = s->limits.sandboxes_cpus > 0 ? s->limits.sandboxes_cpus
							   : s->cpus * SERVE_SANDBOX_CPU_OVERCOMMIT;
		serve_budget_init(&s->budget, bmem, bcpu);
		s->have_budget = true;
		int max = o->max_sessions >= 0 ? o->max_sessions : s->limits.sessions_max;
		if (max < 0)
			max = (int)sessions_auto(bmem, bcpu, s->limits.def_memory_mb,
						 s->limits.def_cpus);
		srv_service_options(s, &s->ses_opts);
		struct serve_sessions_config sc = { .max = (unsigned)max, .opts = &s->ses_opts,
						    .budget = &s->budget,
						    .max_cpu_ms = s->limits.session_max_cpu_ms,
						    .grace_ms = s->limits.session_grace_ms,
						    .hangup_finish = s->limits.session_hangup_finish };
		if (serve_sessions_start(&s->sessions, &sc, err) < 0) {
			close_listeners(o);
			goto out;
		}
		/* live sandboxes never take a run slot: their own bound */
		int smax = o->max_sandboxes >= 0
				   ? o->max_sandboxes
				   : (int)sessions_auto(bmem, bcpu, s->limits.def_memory_mb,
							s->limits.def_cpus);
		unsigned pool = smax ? sandbox_pool_size(o->sandbox_pool, s->limits.sandboxes_pool)
				     : 0;
		/* the network shape (E2B's create with internet access): as
		 * set, else the default rule's when the default shape's size
		 * is not set either (--sandbox-pool N sizes the default shape
		 * alone); none where network: true is refused (no
		 * serve.allowOpenNetwork: its every fill would fail) */
		if (s->limits.sandboxes_network_pool > 0 && !s->limits.allow_open_network) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "config serve.sandboxes.networkPool: its sandboxes have "
				       "\"network\": true, which needs serve.allowOpenNetwork");
			close_listeners(o);
			goto out;
		}
		unsigned netpool = !smax || !s->limits.allow_open_network ? 0
				   : s->limits.sandboxes_network_pool >= 0
					   ? (unsigned)s->limits.sandboxes_network_pool
				   : o->sandbox_pool < 0 && s->limits.sandboxes_pool < 0 ? pool
											   : 0;
		struct serve_sbxs_config xc = {
			.max = (unsigned)smax, .opts = &s->ses_opts,
			.max_life_ms = s->limits.session_max_life_ms, .budget = &s->budget,
			.pools = { [SERVE_SBX_POOL_DEFAULT] = { .target = pool, .key = SANDBOX_POOL_KEY,
								.name = "default" },
				   [SERVE_SBX_POOL_NETWORK] = { .target = netpool,
								.key = SANDBOX_NETPOOL_KEY,
								.name = "network" } },
			.pool_defaults = { .fill = srv_limits_fill, .ctx = &s->limits },
			.log = &s->log };
		if (serve_sbxs_start(&s->sandboxes, &xc, err) < 0 ||
		    (s->sandboxes && e2b_start(&s->e2b, xc.max, err) < 0)) {
			close_listeners(o);
			goto out;
		}
	}
	s->d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			MHD_USE_ITC | MHD_USE_ERROR_LOG,
		0, NULL, NULL, srv_on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_UNESCAPE_CALLBACK, srv_unescape_target, s,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->listen_fd,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->client_timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTION_LIMIT,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)PER_IP_LIMIT,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEMORY,
		MHD_OPTION_NOTIFY_COMPLETED, srv_on_completed, s,
		MHD_OPTION_NOTIFY_CONNECTION, srv_on_connection, s,
		MHD_OPTION_END);
	if (!s->d) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
			       "moat serve: cannot start the HTTP server on %s", o->listen_desc);
		close_listeners(o);
		goto out;
	}
	if (o->metrics_desc) {
		/* one polling thread: a scrape is one short answer */
		s->metrics_d = MHD_start_daemon(
			MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
				MHD_USE_ERROR_LOG,
			0, NULL, NULL, srv_on_metrics_listener, s,
			MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
			MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->metrics_fd,
			MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->client_timeout_s,
			MHD_OPTION_CONNECTION_LIMIT, (unsigned int)METRICS_CONNECTION_LIMIT,
			MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)PER_IP_LIMIT,
			MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEMORY,
			MHD_OPTION_END);
		if (!s->metrics_d) {
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				       "moat serve: cannot start the metrics listener on %s",
				       o->metrics_desc);
			close(o->metrics_fd);
			MHD_stop_daemon(s->d);
			goto out;
		}
	}
	srv_notice(s, "info", "listening on %s (node %s, max %u runs at once, queue %u%s)",
		   o->listen_desc, serve_node(), o->max_concurrent, o->queue,
		   o->token ? ", bearer token required" : is_unix ? ", the socket's mode guards it" : "");
	if (o->no_auth)
		srv_notice(s, "warn", "authentication is off (--no-auth): whoever can connect to %s can "
			   "run code and read every sandboxId's store", o->listen_desc);
	if (s->metrics_d)
		srv_notice(s, "info", "/metrics without a token on %s", o->metrics_desc);

	int sig = 0;
	while (sigwait(stop, &sig) != 0)
		;
	srv_notice(s, "info", "%s: stopping (in-flight runs get %u s)",
		   sigabbrev_np(sig) ? sigabbrev_np(sig) : "signal", o->grace_s);
	pthread_mutex_lock(&s->mu);
	s->stopping = true; /* queued requests get 503 */
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	MHD_socket l = MHD_quiesce_daemon(s->d);
	if (l != MHD_INVALID_SOCKET)
		close(l);
	if (o->unlink_path)
		unlink(o->unlink_path);
	if (!wait_idle(s, moat_mono_ms() + (int64_t)o->grace_s * 1000)) {
		srv_notice(s, "warn", "grace period over: killing the runs still in flight");
		uint64_t one = 1;
		if (write(s->cancel_fd, &one, sizeof one) < 0)
			srv_notice(s, "error", "cannot cancel the runs: %s", strerror(errno));
		/* a killed run ends in milliseconds (its cgroup or pid namespace
		 * goes at once); the bound keeps the whole stop within --grace +
		 * 5 s, inside a pod's terminationGracePeriodSeconds */
		if (!wait_idle(s, moat_mono_ms() + 5000))
			srv_notice(s, "error", "runs still in flight 5 s after they were killed");
	}
	/* every session ends before the service (a step still running is
	 * cancelled); no new one is made from here on */
	serve_sessions_stop(s->sessions);
	serve_sbxs_stop(s->sandboxes);
	e2b_stop(s->e2b);
	s->e2b = NULL;
	sessions_stopped = true;
	MHD_stop_daemon(s->d);
	if (s->metrics_d)
		MHD_stop_daemon(s->metrics_d); /* closes its listener */
	srv_notice(s, "info", "stopped");
	rc = 0;
out:
	if (s->have_watchdog) {
		pthread_mutex_lock(&s->conns_mu);
		s->watchdog_stop = true;
		pthread_cond_broadcast(&s->conns_cv);
		pthread_mutex_unlock(&s->conns_mu);
		pthread_join(s->watchdog, NULL);
	}
	if (!sessions_stopped) {
		serve_sessions_stop(s->sessions);
		serve_sbxs_stop(s->sandboxes);
		e2b_stop(s->e2b);
	}
	pool_stop(s->pool); /* after every run: the pool's thread owns their pid 1 */
	if (s->cancel_fd >= 0)
		close(s->cancel_fd);
	serve_log_destroy(&s->log);
	moat_relay_caps_release(s->relay_caps); /* a relay still ending holds its own */
	serve_limits_free(&s->limits);
	free(s);
	return rc;
}
