/* Egress fails closed: on a host where the sandbox cannot install its
 * nftables rules, "network": true and "allowedHosts" are refused with a
 * SandboxUnavailableError that names what is missing, `moat doctor` says
 * so before any run, and runs without network are unaffected. The missing
 * kernel feature is made real, not faked in moat: moat runs under a seccomp
 * filter (inherited by every process it starts) that answers
 * socket(AF_NETLINK, *, NETLINK_NETFILTER) with EPROTONOSUPPORT, which is
 * what a kernel without nf_tables answers. */
#include <errno.h>
#include <linux/netlink.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "harness.h"
#include "suites.h"

/* harness_prep_fn: installs the NETLINK_NETFILTER filter in moat's child. */
static int no_nftables(int mode, void *arg)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
			     SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
			     SCMP_A2(SCMP_CMP_EQ, NETLINK_NETFILTER)) < 0 ||
	    seccomp_load(ctx) < 0) {
		fputs("egress suite: cannot install the NETLINK_NETFILTER filter\n", stderr);
		return -1;
	}
	return 0;
}

/* Runs moat with args in mode under the NETLINK_NETFILTER filter, feeding
 * stdin_text; stdout/stderr captured, JSON parsed when it is JSON. */
static void run_without_nftables(int mode, const char *const *args, const char *stdin_text,
				 struct run_out *out)
{
	static const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL };
	memset(out, 0, sizeof *out);
	struct harness_proc p;
	harness_start(mode, args, stdin_text, strlen(stdin_text), env, no_nftables, NULL, &p);
	harness_finish(&p, out);
	ck_assert_msg(out->status < 97 || out->status > 99, "test child setup failed: %d", out->status);
}

START_TEST(egress_fails_closed_without_nftables)
{
	HARNESS_MODE_GUARD(_i);
	static const char *const extra[] = {
		",\"network\":true",
		",\"allowedHosts\":[\"https://api.example.com\"]",
	};
	static const char *const exec_args[] = { "exec", NULL };
	for (size_t i = 0; i < 2; i++) {
		char req[512];
		snprintf(req, sizeof req, "{\"language\":\"python\",\"code\":\"print(1)\"%s}", extra[i]);
		struct run_out o;
		run_without_nftables(_i, exec_args, req, &o);
		ck_assert_msg(o.json, "no JSON: %s / %s", o.out ? o.out : "", o.err ? o.err : "");
		const char *t = harness_error_type(&o);
		ck_assert_msg(t && !strcmp(t, "SandboxUnavailableError"), "%s: ran or wrong error: %s",
			      extra[i], o.out);
		cJSON *e = cJSON_GetObjectItemCaseSensitive(o.json, "error");
		cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
		ck_assert(cJSON_IsString(m));
		ck_assert_msg(strstr(m->valuestring, "nftables") && strstr(m->valuestring, "CONFIG_NFT_NAT"),
			      "message does not name what is missing: %s", m->valuestring);
		ck_assert_int_eq(o.status, 3);
		harness_free(&o);
	}
	/* without network nothing is missing: the run goes ahead */
	struct run_out o;
	run_without_nftables(_i, exec_args, "{\"language\":\"python\",\"code\":\"print(6*7)\"}", &o);
	ck_assert_msg(o.json && harness_str(&o, "stdout"), "%s", o.out ? o.out : "");
	ck_assert_str_eq(harness_str(&o, "stdout"), "42\n");
	harness_free(&o);
	/* and moat doctor says it before any run */
	static const char *const doctor[] = { "doctor", NULL };
	run_without_nftables(_i, doctor, "", &o);
	ck_assert_msg(o.out && strstr(o.out, "network egress:     UNAVAILABLE") &&
			      strstr(o.out, "nftables"),
		      "doctor: %s", o.out ? o.out : "");
	harness_free(&o);
	/* the same doctor without the filter: egress available here */
	harness_run(_i, doctor, NULL, 0, &o);
	ck_assert_msg(o.out && strstr(o.out, "network egress:     ok"), "doctor: %s",
		      o.out ? o.out : "");
	harness_free(&o);
}
END_TEST

Suite *egress_suite(void)
{
	Suite *s = suite_create("egress");
	TCase *tc = tcase_create("fail_closed");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, egress_fails_closed_without_nftables, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
