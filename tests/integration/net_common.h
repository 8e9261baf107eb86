/* The network suite's shared fixture (net_common.c): the topology around the
 * host namespace H that every network test runs moat in, the probe that runs
 * inside the sandbox, and the verdict that lists every failed expectation of a
 * test together. The suite's tests are split by subject: test_network.c (the
 * wall: network none and true, teardown), test_network_allowlist.c,
 * test_network_relay.c (socket memory, idle relays) and
 * test_network_agents.c (host agents, DNS over TCP, DNS rate). */
#ifndef MOAT_TESTS_NET_COMMON_H
#define MOAT_TESTS_NET_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define PUB4 "11.77.0.2"
#define PUB6 "2a01:4f8:77::2"
#define H_PUB4 "11.77.0.1"
#define H_PUB6 "2a01:4f8:77::1"
#define H_LAN "10.77.0.1"
#define H_SECOND "10.78.0.1"
#define LAN_PEER "10.77.0.2"
#define H_META4 "10.79.0.1"
#define M_LINK4 "10.79.0.2"
#define H_META6 "fd00:79::1"
#define M_LINK6 "fd00:79::2"
#define META4 "169.254.169.254"
#define META6 "fd00:ec2::254"
#define PORT 8080
#define PY "/usr/bin/python3"
#define ROOTLESS_ID 65534

enum { NS_H, NS_LAN, NS_META, NS_PUB, NS_COUNT };

/* answer(q): the DNS answer (A, AAAA, NXDOMAIN) to a question from the
 * hosts table `table`, in python; in dns.py and the agents' peer resolver. */
#define PY_DNS_ANSWER \
	"def answer(q):\n" \
	"    if len(q) < 12: return None\n" \
	"    qid, flags, qd = struct.unpack('!HHH', q[:6])\n" \
	"    if qd != 1: return None\n" \
	"    i, labels = 12, []\n" \
	"    while i < len(q) and q[i]:\n" \
	"        labels.append(q[i + 1:i + 1 + q[i]].decode('latin1'))\n" \
	"        i += 1 + q[i]\n" \
	"    i += 1\n" \
	"    if i + 4 > len(q): return None\n" \
	"    qtype, qclass = struct.unpack('!HH', q[i:i + 4])\n" \
	"    question = q[12:i + 4]\n" \
	"    name = '.'.join(labels).lower()\n" \
	"    ans = []\n" \
	"    if name in table:\n" \
	"        rcode = 0\n" \
	"        for a in table[name]:\n" \
	"            if qtype == 1 and ':' not in a:\n" \
	"                ans.append(struct.pack('!HHHIH', 0xc00c, 1, 1, 5, 4) + socket.inet_pton(socket.AF_INET, a))\n" \
	"            if qtype == 28 and ':' in a:\n" \
	"                ans.append(struct.pack('!HHHIH', 0xc00c, 28, 1, 5, 16) + socket.inet_pton(socket.AF_INET6, a))\n" \
	"    else:\n" \
	"        rcode = 3\n" \
	"    hdr = struct.pack('!HHHHHH', qid, 0x8180 | (flags & 0x0100) | rcode, 1, len(ans), 0, 0)\n" \
	"    return hdr + question + b''.join(ans)\n"

struct lines {
	char *buf;
	char **name, **res; /* "name:res" */
	size_t n;
};

/* Every expectation of a test is checked; the failures are listed together. */
struct verdict {
	char test[96];
	char *log;
	size_t len;
	int failed;
};

enum wall { WALL_NONE, WALL_EGRESS, WALL_ALLOWLIST };

/* Without the topology a test does not run: as root (CI) that is a
 * failure, so that a broken setup cannot pass as skipped tests; otherwise
 * (the suite needs root) a note, counted as skipped by tools/check.sh. */
#define PEER_GUARD(mode)                                                                    \
	do {                                                                                \
		HARNESS_MODE_GUARD(mode);                                                   \
		if (!net_ready) {                                                           \
			ck_assert_msg(!harness_is_root(), "%s: no host namespace: %s",      \
				      __func__, setup_why);                                 \
			harness_skip("%s: %s", __func__, setup_why);                        \
			return;                                                             \
		}                                                                           \
	} while (0)

#define RUN(...) run_argv((const char *const[]){ __VA_ARGS__, NULL })

/* The topology's state (net_common.c). */
extern bool net_ready;
extern char setup_why[256];
extern char ns_name[NS_COUNT][32];
extern char net_dir[64];
extern char server_path[96]; /* the services' python (SERVER_PY) */
extern ino_t h_ino;
extern pid_t servers[8];
extern int nservers;

/* Python the tests run: the hosts table, the probe's library, an explicit
 * proxy client, a hello service, an HTTP client, parallel connections,
 * raw DNS questions. */
extern const char HOSTS[];
extern const char PY_LIB[];
extern const char PY_PROXY[];
extern const char PY_HELLO[];
extern const char PY_HTTP_CLIENT[];
extern const char PY_PARALLEL[];
extern const char PY_DNSQ[]; /* dnsq(name, qtype), gai(name) */
extern const char *const H_ENV[];

void topology_setup(void);
void topology_teardown(void);

void lines_parse(const char *text, struct lines *ls);
const char *lines_get(const struct lines *ls, const char *name);
void lines_free(struct lines *ls);

int run_argv(const char *const *argv);
void net_write_file(const char *path, const char *text);
char *read_until(int fd, const char *until, long timeout_ms);
bool start_server(int ns, const char *script, const char *const *args);
void kill_ns_procs(const char *name, bool keep_services);
int enter_h(int mode, void *arg);
void net_append(char **b, size_t *l, const char *data, size_t n);
void net_exec(int mode, const char *request, struct run_out *out);
char *net_request(const char *code, const char *extra_json);
char *probe_code(bool verify, const char *extra);

void v_init(struct verdict *v, const char *test, int mode);
__attribute__((format(printf, 3, 4))) void v_expect(struct verdict *v, bool ok, const char *fmt,
						    ...);
void v_line(struct verdict *v, const struct lines *ls, const char *name, const char *want);
void v_fail(struct verdict *v, const struct lines *ls, const char *name);
void v_exact(struct verdict *v, const struct lines *ls, const char *const (*want)[2], size_t n);
void v_done(struct verdict *v, const struct run_out *o);

const char *network_mode(const struct run_out *o);
cJSON *connections(const struct run_out *o);
const char *str_item(const cJSON *c, const char *key);
double num_item(const cJSON *c, const char *key);
bool has_conn(const struct run_out *o, const char *kind, const char *hosts, int port,
	      bool allowed, bool want_bytes);
void check_sweep(struct verdict *v, const struct lines *ls, enum wall w);

void net_probe(const char *test, int mode, const char *code, const char *extra_json,
	       struct run_out *o, struct lines *ls, struct verdict *v);
void net_probe_end(struct run_out *o, struct lines *ls, struct verdict *v);

/* The tests of each file, added to the suite's one tcase in order. */
void network_allowlist_tests(TCase *tc);
void network_relay_tests(TCase *tc);
void network_agents_tests(TCase *tc);

#endif
