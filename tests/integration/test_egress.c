/* Egress fails closed: on a host where the sandbox cannot install its
 * nftables rules, "network": true and "allowedHosts" are refused with a
 * SandboxUnavailableError that names what is missing, `moat doctor` says
 * so before any run, and runs without network are unaffected. The missing
 * kernel feature is made real, not faked in moat: moat runs under a seccomp
 * filter (inherited by every process it starts) that answers
 * socket(AF_NETLINK, *, NETLINK_NETFILTER) with EPROTONOSUPPORT, which is
 * what a kernel without nf_tables answers. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/netlink.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* Runs moat with args in mode under the NETLINK_NETFILTER filter, feeding
 * stdin_text; stdout/stderr captured, JSON parsed when it is JSON. */
static void run_without_nftables(int mode, const char *const *args, const char *stdin_text,
				 struct run_out *out)
{
	memset(out, 0, sizeof *out);
	int in_p[2], out_p[2], err_p[2];
	ck_assert_int_eq(pipe2(in_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err_p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in_p[0], 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		if (mode == MODE_ROOTLESS &&
		    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		     setresuid(65534, 65534, 65534) < 0))
			_exit(99);
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
		if (!ctx || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
				     SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
				     SCMP_A2(SCMP_CMP_EQ, NETLINK_NETFILTER)) < 0 ||
		    seccomp_load(ctx) < 0)
			_exit(98);
		char *argv[8] = { (char *)"moat" };
		for (int i = 0; args[i] && i < 6; i++)
			argv[i + 1] = (char *)args[i];
		char *envp[] = { (char *)"PATH=/usr/bin:/bin", (char *)"HOME=/nonexistent", NULL };
		execve(harness_moat(), argv, envp);
		_exit(97);
	}
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	size_t len = strlen(stdin_text);
	ck_assert_int_eq(write(in_p[1], stdin_text, len), (ssize_t)len);
	close(in_p[1]);
	int fds[2] = { out_p[0], err_p[0] };
	char buf[8192];
	while (fds[0] >= 0 || fds[1] >= 0) {
		struct pollfd pf[2] = { { fds[0], POLLIN, 0 }, { fds[1], POLLIN, 0 } };
		if (poll(pf, 2, harness_scale_ms(60000)) <= 0) {
			kill(pid, SIGKILL);
			ck_abort_msg("moat did not finish");
		}
		for (int i = 0; i < 2; i++) {
			if (fds[i] < 0 || !pf[i].revents)
				continue;
			ssize_t n = read(fds[i], buf, sizeof buf);
			if (n <= 0) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			char **b = i ? &out->err : &out->out;
			size_t *l = i ? &out->err_len : &out->out_len;
			*b = realloc(*b, *l + (size_t)n + 1);
			ck_assert_ptr_nonnull(*b);
			memcpy(*b + *l, buf, (size_t)n);
			*l += (size_t)n;
			(*b)[*l] = '\0';
		}
	}
	int st;
	waitpid(pid, &st, 0);
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	ck_assert_msg(out->status < 97 || out->status > 99, "test child setup failed: %d", out->status);
	out->json = out->out ? cJSON_Parse(out->out) : NULL;
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
