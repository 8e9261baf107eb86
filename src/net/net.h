/* net: the sandbox's network. Always a new network namespace with only lo
 * (up). With egress ("network": true or "allowedHosts") every connection
 * leaving lo is redirected inside to sockets the supervisor serves, which
 * apply one address policy (net.c, egress.c). Order, as the runner calls
 * them: prepare (supervisor, before clone) → child_setup (pid 1, caps
 * held) → attach (supervisor, after clone, before the child is released)
 * → start (supervisor, after release) → finish. */
#ifndef MOAT_NET_NET_H
#define MOAT_NET_NET_H

#include <sys/types.h>
#include "moat.h"

struct moat_net;

/* Most entries in "allowedHosts" and in "allowedCidrs". */
#define MOAT_NET_MAX_ENTRIES 256u
/* The loopback address and port of the allowlist proxy inside the sandbox. */
#define MOAT_NET_PROXY_PORT 3128
#define MOAT_NET_PROXY_URL "http://127.0.0.1:3128"

/* Request rules of the network modes (called by moat_request_validate):
 * "network": true with "allowedHosts" is contradictory (SandboxConfigError);
 * malformed allowedHosts entries, CIDRs, port ranges and bare wildcards
 * are a SandboxPolicyError; "allowedCidrs" needs "allowedHosts". */
int moat_net_validate(const struct moat_request *req, struct moat_error *err);

/* Why an address must never be connected to on behalf of a sandbox (the
 * one policy of transparent egress, the DNS answerer, the proxy and the
 * remote providers): "loopback", "private", "link-local", "cloud metadata",
 * "multicast", "documentation", "reserved", "6to4", "Teredo", ... — every
 * IPv4 address an IPv6 form carries judged the same way first — or "host
 * address" when a host interface holds it (or one it carries) now; NULL
 * when it is a public unicast address. family: AF_INET
 * (4 bytes) or AF_INET6 (16 bytes). */
const char *moat_net_addr_refused(int family, const void *addr);

int moat_net_prepare(const struct moat_request *req, struct moat_net **out,
		     struct moat_error *err);
/* Extra "NAME=value" entries for the program's environment (e.g. proxy
 * variables), NULL-terminated; NULL when none. */
char *const *moat_net_env(const struct moat_net *net);
/* Text of the sandbox's /etc/resolv.conf, or NULL when the mode has no DNS
 * (the file is then absent). Valid until moat_net_finish. */
const char *moat_net_resolv_conf(const struct moat_net *net);
/* The fds pid 1 must keep open for child_setup (socketpair ends), at most
 * 2: stored in fds, their number returned. */
size_t moat_net_child_fds(const struct moat_net *net, int fds[2]);
/* What child_setup was doing when it failed. */
enum moat_net_step { MOAT_NET_STEP_LINK = 1, MOAT_NET_STEP_NFT, MOAT_NET_STEP_SOCKETS,
		     MOAT_NET_STEP_SYSCTL };
/* The socket memory of one TCP socket of the sandbox's network namespace
 * at most (its net.ipv4.tcp_rmem and tcp_wmem maxima, set by pid 1): what
 * bounds the program's own sockets, loopback pairs included, and the
 * relays' ends inside. A socket that asks for more with SO_SNDBUF or
 * SO_RCVBUF gets up to the host's net.core.wmem_max / rmem_max (read-only
 * in a child namespace), doubled by the kernel. */
#define MOAT_NET_TCP_RMEM_MAX 65536
#define MOAT_NET_TCP_WMEM_MAX 32768
/* Supervisor: a run with memoryMb whose limit does not charge socket
 * buffers (mech "cgroup-v1" or "rlimit"; cgroup v2 charges them to
 * memory.max) gets a warning with what bounds them instead: these maxima
 * and the host's net.core maxima, times the sandbox's fd limit (nofile).
 * 0, or -1 when out of memory. */
int moat_net_warn_uncharged(struct moat_result *res, const char *mech, unsigned long nofile);
/* Child side, pid 1 with its namespace capabilities, before any mount (the
 * sandbox's /proc/sys is read-only): sets the namespace's tcp_rmem and
 * tcp_wmem (minimum, default, maximum), and a small listen backlog
 * (somaxconn), through the /proc of pid 1's mount namespace (sysctls of
 * net/ are per network namespace: the opener's). Every mode, network off
 * too. System calls only. 0, or -1 with errno and *step
 * MOAT_NET_STEP_SYSCTL. */
int moat_net_child_sysctls(int *step);
/* Child side, pid 1 with its namespace capabilities: bring lo up and set up
 * the mode. System calls only (async-signal-safe). 0, or -1 with errno and
 * *step (enum moat_net_step) saying which part failed. */
int moat_net_child_setup(const struct moat_net *net, int *step);
/* The SandboxUnavailableError for a child_setup failure at step with
 * errnum; names what is missing and the fix. Returns -1. */
int moat_net_setup_error(int step, int errnum, struct moat_error *err);
/* Supervisor: after clone, before release. */
int moat_net_attach(struct moat_net *net, pid_t child, struct moat_error *err);
/* Supervisor: after the child was released. caps: shared with other runs
 * (moat_run_options.relay_caps), or NULL. */
int moat_net_start(struct moat_net *net, struct moat_relay_caps *caps, struct moat_error *err);
/* Supervisor: after the run (or on failure, with res NULL): stop helpers,
 * close fds, render res->network_json. NULL-safe. */
void moat_net_finish(struct moat_net *net, struct moat_result *res);

#endif
