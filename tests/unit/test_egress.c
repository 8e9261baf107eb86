/* The egress pieces that need no sandbox: the nftables batch pid 1 sends
 * (decoded with libnftnl and compared rule by rule), the host-address
 * check, and the connection log. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <libnftnl/chain.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>

#include "net/internal.h"
#include "net/nft.h"
#include "suites.h"

/* What `nft --debug=netlink` would show for the ruleset of net/nft.h. */
static const char *const WANT[] = {
	"begin",
	"table inet moat",
	"chain inet moat out_nat type nat hook output prio -100 policy accept",
	"chain inet moat out_filter type filter hook output prio 0 policy drop",
	/* udp dport 53 redirect to :53 */
	"rule inet moat out_nat [ meta load l4proto => reg 1 ] [ cmp eq reg 1 0x00000011 ] "
	"[ payload load 2b @ transport header + 2 => reg 1 ] [ cmp eq reg 1 0x00003500 ] "
	"[ immediate reg 1 0x00003500 ] [ redir proto_min reg 1 ]",
	/* tcp dport 53 redirect to :1 (DNS over TCP, loopback's too: moat answers) */
	"rule inet moat out_nat [ meta load l4proto => reg 1 ] [ cmp eq reg 1 0x00000006 ] "
	"[ payload load 2b @ transport header + 2 => reg 1 ] [ cmp eq reg 1 0x00003500 ] "
	"[ immediate reg 1 0x00000100 ] [ redir proto_min reg 1 ]",
	/* ip daddr 127.0.0.0/8 return */
	"rule inet moat out_nat [ meta load nfproto => reg 1 ] [ cmp eq reg 1 0x00000002 ] "
	"[ payload load 4b @ network header + 16 => reg 1 ] "
	"[ bitwise reg 1 = ( reg 1 & 0x000000ff ) ^ 0x00000000 ] [ cmp eq reg 1 0x0000007f ] "
	"[ immediate reg 0 return ]",
	/* ip6 daddr ::1 return */
	"rule inet moat out_nat [ meta load nfproto => reg 1 ] [ cmp eq reg 1 0x0000000a ] "
	"[ payload load 16b @ network header + 24 => reg 1 ] "
	"[ cmp eq reg 1 0x00000000 0x00000000 0x00000000 0x01000000 ] [ immediate reg 0 return ]",
	/* meta l4proto tcp redirect to :1 */
	"rule inet moat out_nat [ meta load l4proto => reg 1 ] [ cmp eq reg 1 0x00000006 ] "
	"[ immediate reg 1 0x00000100 ] [ redir proto_min reg 1 ]",
	/* ip daddr 127.0.0.0/8 accept (policy drop) */
	"rule inet moat out_filter [ meta load nfproto => reg 1 ] [ cmp eq reg 1 0x00000002 ] "
	"[ payload load 4b @ network header + 16 => reg 1 ] "
	"[ bitwise reg 1 = ( reg 1 & 0x000000ff ) ^ 0x00000000 ] [ cmp eq reg 1 0x0000007f ] "
	"[ immediate reg 0 accept ]",
	"rule inet moat out_filter [ meta load nfproto => reg 1 ] [ cmp eq reg 1 0x0000000a ] "
	"[ payload load 16b @ network header + 24 => reg 1 ] "
	"[ cmp eq reg 1 0x00000000 0x00000000 0x00000000 0x01000000 ] [ immediate reg 0 accept ]",
	"end",
};

/* Collapses libnftnl's multi-line rule text to one line. */
static void squash(char *s)
{
	char *w = s;
	bool space = false;
	for (char *r = s; *r; r++) {
		if (*r == '\n' || *r == ' ' || *r == '\t') {
			space = w != s;
			continue;
		}
		if (space)
			*w++ = ' ';
		space = false;
		*w++ = *r;
	}
	*w = '\0';
}

START_TEST(nft_batch_is_the_ruleset)
{
	size_t off = 0, n = 0;
	unsigned acks = 0;
	char text[4096];
	while (off < moat_nft_batch_len) {
		const struct nlmsghdr *h = (const struct nlmsghdr *)(const void *)(moat_nft_batch + off);
		ck_assert(NLMSG_OK(h, moat_nft_batch_len - off));
		ck_assert_uint_lt(n, sizeof WANT / sizeof WANT[0]);
		uint16_t type = h->nlmsg_type;
		if (type == NFNL_MSG_BATCH_BEGIN || type == NFNL_MSG_BATCH_END) {
			snprintf(text, sizeof text, "%s", type == NFNL_MSG_BATCH_BEGIN ? "begin" : "end");
		} else {
			/* every change is acknowledged, so pid 1 sees each one applied */
			ck_assert(h->nlmsg_flags & NLM_F_ACK);
			acks++;
			ck_assert_uint_eq(type >> 8, NFNL_SUBSYS_NFTABLES);
			char body[2048] = "";
			if ((type & 0xff) == NFT_MSG_NEWTABLE) {
				struct nftnl_table *t = nftnl_table_alloc();
				ck_assert_int_eq(nftnl_table_nlmsg_parse(h, t), 0);
				snprintf(text, sizeof text, "table inet %s",
					 nftnl_table_get_str(t, NFTNL_TABLE_NAME));
				ck_assert_uint_eq(nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY), NFPROTO_INET);
				nftnl_table_free(t);
			} else if ((type & 0xff) == NFT_MSG_NEWCHAIN) {
				struct nftnl_chain *c = nftnl_chain_alloc();
				ck_assert_int_eq(nftnl_chain_nlmsg_parse(h, c), 0);
				nftnl_chain_snprintf(body, sizeof body, c, NFTNL_OUTPUT_DEFAULT, 0);
				nftnl_chain_free(c);
				/* "inet moat out_nat use 0 type nat hook ... packets 0 bytes 0" */
				char *use = strstr(body, " use 0"), *pk = strstr(body, " packets");
				ck_assert(use && pk);
				*pk = '\0';
				memmove(use, use + 6, strlen(use + 6) + 1);
				snprintf(text, sizeof text, "chain %s", body);
			} else {
				ck_assert_uint_eq(type & 0xff, NFT_MSG_NEWRULE);
				struct nftnl_rule *r = nftnl_rule_alloc();
				ck_assert_int_eq(nftnl_rule_nlmsg_parse(h, r), 0);
				nftnl_rule_snprintf(body, sizeof body, r, NFTNL_OUTPUT_DEFAULT, 0);
				nftnl_rule_free(r);
				snprintf(text, sizeof text, "rule %s", body);
			}
		}
		squash(text);
		ck_assert_msg(!strcmp(text, WANT[n]), "message %zu:\n got: %s\nwant: %s", n, text,
			      WANT[n]);
		off += NLMSG_ALIGN(h->nlmsg_len);
		n++;
	}
	ck_assert_uint_eq(off, moat_nft_batch_len);
	ck_assert_uint_eq(n, sizeof WANT / sizeof WANT[0]);
	ck_assert_uint_eq(acks, moat_nft_batch_acks);
}
END_TEST

static const char *local(const char *text)
{
	uint8_t a[16];
	if (inet_pton(AF_INET, text, a) == 1)
		return moat_addr_host_local(AF_INET, a);
	ck_assert_int_eq(inet_pton(AF_INET6, text, a), 1);
	return moat_addr_host_local(AF_INET6, a);
}

/* A host IPv4 address written in each IPv6 form that carries one (NAT64,
 * local NAT64, 6to4, Teredo server and client, ISATAP, compatible, SIIT)
 * is refused too, naming the address it carries. */
static void embedded_forms_refused(const uint8_t *v4)
{
	static const struct {
		uint8_t net[16];
		unsigned at;  /* where the IPv4 address goes */
		bool invert;  /* Teredo's client */
	} forms[] = {
		{ { 0x00, 0x64, 0xff, 0x9b }, 12, false },				/* NAT64 */
		{ { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 12, false },		/* local NAT64 */
		{ { 0x20, 0x02, [15] = 1 }, 2, false },				/* 6to4 */
		{ { 0x20, 0x01, [12] = 0xf7, 0xf7, 0xf7, 0xf7 }, 4, false },	/* Teredo server */
		{ { 0x20, 0x01, 0, 0, 8, 8, 8, 8 }, 12, true },			/* Teredo client */
		{ { 0x2a, 0x01, 0x04, 0xf8, [10] = 0x5e, 0xfe }, 12, false },	/* ISATAP */
		{ { 0x2a, 0x01, 0x04, 0xf8, [8] = 2, 0, 0x5e, 0xfe }, 12, false },
		{ { 0 }, 12, false },							/* compatible */
		{ { [8] = 0xff, 0xff }, 12, false },					/* SIIT */
	};
	char text[48], why[200], want[32];
	uint8_t a[16];
	snprintf(want, sizeof want, "%u.%u.%u.%u", v4[0], v4[1], v4[2], v4[3]);
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		memcpy(a, forms[i].net, 16);
		for (unsigned k = 0; k < 4; k++)
			a[forms[i].at + k] = forms[i].invert ? (uint8_t)~v4[k] : v4[k];
		inet_ntop(AF_INET6, a, text, sizeof text);
		const char *r = moat_egress_refusal_text(NULL, AF_INET6, a, why, sizeof why);
		ck_assert_msg(r, "%s passed", text);
		/* local NAT64 is refused at another position first */
		ck_assert_msg(i == 1 || strstr(why, want), "%s: \"%s\" does not name %s", text, why, want);
	}
}

/* Every address the host holds now is refused, whatever its class; an
 * address nobody here holds is not (only a route lookup: no packet). */
START_TEST(host_addresses_are_refused)
{
	ck_assert_str_eq(local("127.0.0.1"), "host address");
	ck_assert_str_eq(local("127.3.4.5"), "host address"); /* routed locally */
	struct ifaddrs *ifa = NULL;
	ck_assert_int_eq(getifaddrs(&ifa), 0);
	int seen = 0;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		int fam = i->ifa_addr->sa_family;
		const uint8_t *a = fam == AF_INET
			? (const uint8_t *)&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr
			: (const uint8_t *)&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
		const char *why = moat_addr_host_local(fam, a);
		ck_assert_msg(why && !strcmp(why, "host address"), "%s not seen as the host's",
			      i->ifa_name);
		/* the one policy says so too, even for a public-looking address */
		ck_assert_ptr_nonnull(moat_egress_refusal(NULL, fam, a));
		if (fam == AF_INET)
			embedded_forms_refused(a);
		seen++;
	}
	freeifaddrs(ifa);
	ck_assert_int_gt(seen, 0);
	ck_assert_ptr_null(local("11.22.33.44"));
	ck_assert_ptr_null(local("2a01:4f8:77::99"));
	uint8_t a[16];
	inet_pton(AF_INET, "10.1.2.3", a);
	ck_assert_str_eq(moat_egress_refusal(NULL, AF_INET, a), "private");
	inet_pton(AF_INET6, "::ffff:127.0.0.1", a);
	ck_assert_str_eq(moat_egress_refusal(NULL, AF_INET6, a), "loopback");
	inet_pton(AF_INET, "11.22.33.44", a);
	ck_assert_ptr_null(moat_egress_refusal(NULL, AF_INET, a));
	ck_assert_ptr_null(moat_net_addr_refused(AF_INET, a));
}
END_TEST

static cJSON *render(struct moat_netlog *l)
{
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"mode\":\"egress\"", 16);
	moat_netlog_render(l, &b);
	moat_buf_append(&b, "}", 1);
	char *s = moat_buf_take(&b);
	ck_assert_ptr_nonnull(s);
	cJSON *j = cJSON_Parse(s);
	ck_assert_msg(j, "not JSON: %s", s);
	free(s);
	return j;
}

START_TEST(netlog_entries)
{
	struct moat_netlog *l = moat_netlog_new();
	ck_assert_ptr_nonnull(l);
	int t = moat_netlog_add(l, "tcp", NULL, "11.22.33.44", 443);
	moat_netlog_host(l, t, "api.example.com", "11.22.33.44");
	moat_netlog_verdict(l, t, true, NULL);
	moat_netlog_bytes(l, t, 100, 2000);
	int d = moat_netlog_add(l, "dns", "A", "meta.test\"x", 0);
	moat_netlog_verdict(l, d, false, "meta.test resolves only to refused addresses");
	moat_netlog_answers(l, d, "1.2.3.4 2a01::1");
	moat_netlog_count(l, MOAT_NETLOG_BYTES, 2100);
	cJSON *j = render(l);
	cJSON *c = cJSON_GetObjectItem(j, "connections");
	ck_assert_int_eq(cJSON_GetArraySize(c), 2);
	cJSON *e0 = cJSON_GetArrayItem(c, 0), *e1 = cJSON_GetArrayItem(c, 1);
	ck_assert_str_eq(cJSON_GetObjectItem(e0, "kind")->valuestring, "tcp");
	ck_assert_str_eq(cJSON_GetObjectItem(e0, "host")->valuestring, "api.example.com");
	ck_assert_str_eq(cJSON_GetObjectItem(e0, "address")->valuestring, "11.22.33.44");
	ck_assert_int_eq(cJSON_GetObjectItem(e0, "port")->valueint, 443);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(e0, "allowed")));
	ck_assert_int_eq(cJSON_GetObjectItem(e0, "received")->valueint, 2000);
	ck_assert_ptr_null(cJSON_GetObjectItem(e0, "reason"));
	ck_assert_str_eq(cJSON_GetObjectItem(e1, "host")->valuestring, "meta.test\"x");
	ck_assert_str_eq(cJSON_GetObjectItem(e1, "method")->valuestring, "A");
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(e1, "allowed")));
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e1, "answers")), 2);
	ck_assert_ptr_null(cJSON_GetObjectItem(e1, "sent")); /* no bytes for DNS */
	ck_assert_int_eq(cJSON_GetObjectItem(j, "bytes")->valueint, 2100);
	ck_assert_ptr_null(cJSON_GetObjectItem(j, "connectionsNotListed"));
	cJSON_Delete(j);
	moat_netlog_unref(l);
}
END_TEST

static void *adder(void *arg)
{
	struct moat_netlog *l = moat_netlog_ref(arg);
	for (int i = 0; i < 100; i++) {
		int idx = moat_netlog_add(l, "tcp", NULL, "11.22.33.44", 80);
		moat_netlog_verdict(l, idx, false, "private address 10.0.0.1");
		moat_netlog_bytes(l, idx, 1, 2);
		moat_netlog_count(l, MOAT_NETLOG_BUSY, 1);
	}
	moat_netlog_unref(l);
	return NULL;
}

/* 8 threads × 100 entries: 256 listed, the rest counted, nothing lost. */
START_TEST(netlog_is_capped_and_thread_safe)
{
	struct moat_netlog *l = moat_netlog_new();
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, adder, l), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	cJSON *j = render(l);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "connections")), 256);
	ck_assert_int_eq(cJSON_GetObjectItem(j, "connectionsNotListed")->valueint, 800 - 256);
	ck_assert_int_eq(cJSON_GetObjectItem(j, "busyRefusals")->valueint, 800);
	cJSON_Delete(j);
	moat_netlog_unref(l);
}
END_TEST

/* The caps shared by the runs of moat serve: never past a limit, each kind
 * on its own, a refusal counted, a slot given back free again; NULL is no
 * cap at all. */
START_TEST(relay_caps_bound)
{
	ck_assert_ptr_null(moat_relay_caps_new(0, 1));
	ck_assert_ptr_null(moat_relay_caps_new(1, 0));
	struct moat_relay_caps *c = moat_relay_caps_new(3, 1);
	ck_assert_ptr_nonnull(c);
	struct moat_relay_caps_stats st;
	for (int i = 0; i < 3; i++)
		ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_DNS)); /* its own count */
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_DNS));
	moat_relay_caps_stats(c, &st);
	ck_assert_uint_eq(st.max[MOAT_RELAY_TCP], 3);
	ck_assert_uint_eq(st.max[MOAT_RELAY_DNS], 1);
	ck_assert_uint_eq(st.active[MOAT_RELAY_TCP], 3);
	ck_assert_uint_eq(st.active[MOAT_RELAY_DNS], 1);
	ck_assert_uint_eq(st.refused[MOAT_RELAY_TCP], 1);
	ck_assert_uint_eq(st.refused[MOAT_RELAY_DNS], 1);
	moat_relay_caps_give(c, MOAT_RELAY_TCP);
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_TCP));
	/* a run's reference keeps it after the service let go */
	struct moat_relay_caps *run = moat_relay_caps_ref(c);
	moat_relay_caps_release(c);
	moat_relay_caps_give(run, MOAT_RELAY_DNS);
	moat_relay_caps_stats(run, &st);
	ck_assert_uint_eq(st.active[MOAT_RELAY_DNS], 0);
	ck_assert_uint_eq(st.refused[MOAT_RELAY_TCP], 2);
	moat_relay_caps_release(run);
	/* none: always a slot, all zero */
	ck_assert(moat_relay_caps_take(NULL, MOAT_RELAY_TCP));
	moat_relay_caps_give(NULL, MOAT_RELAY_TCP);
	ck_assert_ptr_null(moat_relay_caps_ref(NULL));
	moat_relay_caps_release(NULL);
	moat_relay_caps_stats(NULL, &st);
	ck_assert_uint_eq(st.max[MOAT_RELAY_TCP] + st.active[MOAT_RELAY_TCP] +
			  st.refused[MOAT_RELAY_DNS], 0);
}
END_TEST

#define CAPS_THREADS 8
#define CAPS_ROUNDS 20000
struct caps_race {
	struct moat_relay_caps *c;
	_Atomic unsigned held, peak;
	unsigned got;
};

static void *caps_racer(void *arg)
{
	struct caps_race *r = arg;
	unsigned got = 0;
	for (int i = 0; i < CAPS_ROUNDS; i++) {
		if (!moat_relay_caps_take(r->c, MOAT_RELAY_TCP))
			continue;
		got++;
		unsigned now = atomic_fetch_add(&r->held, 1) + 1, p = atomic_load(&r->peak);
		while (now > p && !atomic_compare_exchange_weak(&r->peak, &p, now))
			;
		atomic_fetch_sub(&r->held, 1);
		moat_relay_caps_give(r->c, MOAT_RELAY_TCP);
	}
	return (void *)(uintptr_t)got;
}

/* Many threads taking and giving at once never hold more than the cap, and
 * every take is either a slot or a counted refusal. */
START_TEST(relay_caps_threads)
{
	struct caps_race r = { .c = moat_relay_caps_new(3, 1) };
	ck_assert_ptr_nonnull(r.c);
	pthread_t t[CAPS_THREADS];
	for (int i = 0; i < CAPS_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, caps_racer, &r), 0);
	uint64_t got = 0;
	for (int i = 0; i < CAPS_THREADS; i++) {
		void *v;
		pthread_join(t[i], &v);
		got += (uintptr_t)v;
	}
	struct moat_relay_caps_stats st;
	moat_relay_caps_stats(r.c, &st);
	ck_assert_uint_le(atomic_load(&r.peak), 3);
	ck_assert_uint_eq(st.active[MOAT_RELAY_TCP], 0);
	ck_assert_uint_eq(got + st.refused[MOAT_RELAY_TCP], (uint64_t)CAPS_THREADS * CAPS_ROUNDS);
	moat_relay_caps_release(r.c);
}
END_TEST

/* The relays' idle time: 60 s, MOAT_TEST_RELAY_IDLE_MS (positive ms only)
 * for the tests. */
START_TEST(relay_idle_time)
{
	unsetenv("MOAT_TEST_RELAY_IDLE_MS");
	ck_assert_int_eq(moat_net_relay_idle_ms(), 60000);
	setenv("MOAT_TEST_RELAY_IDLE_MS", "1500", 1);
	ck_assert_int_eq(moat_net_relay_idle_ms(), 1500);
	static const char *const bad[] = { "0", "-5", "1s", "", "99999999999999999999999" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("MOAT_TEST_RELAY_IDLE_MS", bad[i], 1);
		ck_assert_msg(moat_net_relay_idle_ms() == 60000, "\"%s\" was taken", bad[i]);
	}
	unsetenv("MOAT_TEST_RELAY_IDLE_MS");
	char why[96];
	moat_net_idle_reason(1000, why, sizeof why);
	ck_assert_str_eq(why, "idle for 1.000 s (no byte either way): closed with a reset");
}
END_TEST

Suite *egress_suite(void)
{
	Suite *s = suite_create("egress");
	TCase *tc = tcase_create("egress");
	tcase_add_test(tc, nft_batch_is_the_ruleset);
	tcase_add_test(tc, host_addresses_are_refused);
	tcase_add_test(tc, netlog_entries);
	tcase_add_test(tc, netlog_is_capped_and_thread_safe);
	tcase_add_test(tc, relay_caps_bound);
	tcase_add_test(tc, relay_caps_threads);
	tcase_add_test(tc, relay_idle_time);
	suite_add_tcase(s, tc);
	return s;
}
