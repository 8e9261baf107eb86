/* `moat serve`: POST /v1/run: the runner's request as JSON. Part of the serve suite (tcase "v1"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

/* ---- tests: /v1/run ---------------------------------------------------------------- */

START_TEST(v1_run)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	post(&s, "/v1/run",
	     "{\"language\":\"python\",\"code\":\"import os, sys\\nprint(os.environ['A'], "
	     "sys.stdin.read())\\nsys.exit(2)\",\"env\":{\"A\":\"a1\"},\"stdin\":\"in\"}",
	     &r);
	ck_assert_msg(r.code == 200 && r.json, "/v1/run: HTTP %d: %.600s", r.code, r.body);
	ck_assert_msg(jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "a1 in\n"), "%s", r.body);
	ck_assert_msg(jnum(r.json, "exitCode") == 2, "exitCode: %s", r.body);
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "timedOut")), "%s", r.body);
	const char *prov = jstr(r.json, "provider");
	ck_assert_msg(prov && !strcmp(prov, "native"), "provider: %s", r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"bash\",\"code\":\"echo $((6*7))\"}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "42\n"),
		      "bash: %s", r.body);
	resp_free(&r);
	/* a command line: the same run; "workdir" is no key (a host path) */
	post(&s, "/v1/run", "{\"argv\":[\"sh\",\"-c\",\"echo \\\"$1\\\"; id -u\",\"-\",\"a b\"]}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "a b\n65534\n"),
		      "argv: %s", r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"argv\":[\"ls\"],\"workdir\":\"/\"}", &r);
	expect_error("/v1/run argv with workdir", &r, 400, "SandboxConfigError");
	resp_free(&r);

	/* refused by policy: above the built-in max, open network */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	char cpu_req[160];
	snprintf(cpu_req, sizeof cpu_req, "{\"language\":\"python\",\"code\":\"print(1)\",\"cpus\":%ld}",
		 cpus + 1);
	struct {
		const char *body, *name;
	} policy[] = {
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":60001}", "timeout" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"memoryMb\":1025}", "memoryMb" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"pidsLimit\":257}", "pidsLimit" },
		{ cpu_req, "cpus" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"network\":true}", "network" },
		{ "{\"language\":\"python\",\"code\":\"print(1)\",\"env\":{\"A=B\":\"x\"}}", "A=B" },
	};
	for (size_t i = 0; i < sizeof policy / sizeof policy[0]; i++) {
		post(&s, "/v1/run", policy[i].body, &r);
		char what[240];
		snprintf(what, sizeof what, "/v1/run %s", policy[i].body);
		expect_error(what, &r, 403, "SandboxPolicyError");
		ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), policy[i].name),
			      "%s: the message does not name %s: %s", what, policy[i].name, r.body);
		resp_free(&r);
	}
	/* at the max: fine */
	post(&s, "/v1/run",
	     "{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":60000,\"memoryMb\":1024,"
	     "\"pidsLimit\":256}",
	     &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "exitCode") == 0, "limits at max: %s", r.body);
	resp_free(&r);
	/* malformed */
	static const char *const bad[] = {
		"{\"language\":\"cobol\",\"code\":\"x\"}",
		"{\"language\":\"python\"}",
		"{\"language\":\"python\",\"code\":\"print(1)\",\"nope\":1}",
		"{\"language\":\"python\",\"code\":\"print(1)\",\"timeout\":\"5\"}",
		"{not json",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		post(&s, "/v1/run", bad[i], &r);
		char what[200];
		snprintf(what, sizeof what, "/v1/run %s", bad[i]);
		expect_error(what, &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	server_stop(&s);
}
END_TEST

START_TEST(v1_open_network_allowed)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .config = "{\"serve\":{\"allowOpenNetwork\":true}}" };
	server_start(&s, _i, &o);
	struct resp r;
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print('net')\",\"network\":true}", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "net\n"),
		      "network:true with allowOpenNetwork: HTTP %d %.800s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

void serve_v1_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "v1");

	SERVE_ADD(tc, only, v1_run, SERVE_MODES);
	SERVE_ADD(tc, only, v1_open_network_allowed, SERVE_MODES);
}
