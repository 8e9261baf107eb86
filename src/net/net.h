/* net: the sandbox's network. Default: a new network namespace with only
 * lo (up). Other modes (egress through a user-mode stack, an allowlist
 * proxy) plug in through the same calls. Order, as the runner calls them:
 *   prepare (supervisor, before clone) → child_setup (pid 1, caps held,
 *   before the mount plan) → attach (supervisor, after clone, before the
 *   child is released) → start (supervisor, after release) → finish. */
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

/* Why an address must never be connected to on behalf of a sandbox (proxy
 * and remote providers alike): "loopback", "private", "link-local",
 * "cloud metadata", "multicast", "documentation", "reserved", ... — in
 * every IPv6 form that embeds an IPv4 address too; NULL when it is a public
 * unicast address. family: AF_INET (4 bytes) or AF_INET6 (16 bytes). */
const char *moat_net_addr_refused(int family, const void *addr);

int moat_net_prepare(const struct moat_request *req, struct moat_net **out,
		     struct moat_error *err);
/* Extra "NAME=value" entries for the program's environment (e.g. proxy
 * variables), NULL-terminated; NULL when none. */
char *const *moat_net_env(const struct moat_net *net);
/* Text of the sandbox's /etc/resolv.conf, or NULL when the mode has no DNS
 * (the file is then absent). Valid until moat_net_finish. */
const char *moat_net_resolv_conf(const struct moat_net *net);
/* An fd pid 1 must keep open for child_setup (e.g. a socketpair end), or -1. */
int moat_net_child_fd(const struct moat_net *net);
/* Child side, pid 1 with its namespace capabilities: bring lo up and set up
 * the mode. System calls only (async-signal-safe). 0, or -1 with errno. */
int moat_net_child_setup(const struct moat_net *net);
/* Supervisor: after clone, before release. */
int moat_net_attach(struct moat_net *net, pid_t child, struct moat_error *err);
/* Supervisor: after the child was released. */
int moat_net_start(struct moat_net *net, struct moat_error *err);
/* Supervisor: after the run (or on failure, with res NULL): stop helpers,
 * close fds, render res->network_json. NULL-safe. */
void moat_net_finish(struct moat_net *net, struct moat_result *res);

#endif
