/* `moat serve`: running a service: routes, token, metrics, the access log, load, the
 * queue, shutdown, disconnects, malformed HTTP, memory the service holds, a log that
 * never blocks, the relay caps. Part of the serve suite (tcase "ops"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

/* ---- tests: HTTP surface ------------------------------------------------------------ */

START_TEST(routes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	char h[128];
	get(&s, "/nope", &r);
	expect_error("GET /nope", &r, 404, "NotFound");
	resp_free(&r);
	post(&s, "/nope", "{}", &r);
	expect_error("POST /nope", &r, 404, "NotFound");
	resp_free(&r);
	post(&s, "/python/run", "{}", &r);
	expect_error("POST /python/run", &r, 404, "NotFound");
	resp_free(&r);

	struct {
		const char *method, *path, *allow;
	} m[] = {
		{ "GET", "/py/run", "POST" },     { "PUT", "/ts/run", "POST" },
		{ "GET", "/v1/run", "POST" },     { "DELETE", "/py/x", "POST" },
		{ "POST", "/healthz", "GET" },    { "POST", "/metrics", "GET" },
	};
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
		struct req q = { .method = m[i].method, .path = m[i].path };
		call(&s, &q, &r);
		char what[64];
		snprintf(what, sizeof what, "%s %s", m[i].method, m[i].path);
		expect_error(what, &r, 405, "MethodNotAllowed");
		ck_assert_msg(resp_header(&r, "Allow", h, sizeof h) && strstr(h, m[i].allow),
			      "%s: Allow header (want %s): %s", what, m[i].allow, r.head);
		resp_free(&r);
	}
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "status") && !strcmp(jstr(r.json, "status"), "ok"),
		      "/healthz: %d %s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(auth_token)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true, .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("print('authed')", NULL);
	struct resp r;
	char h[128];
	struct {
		const char *auth, *what;
	} bad[] = {
		{ NULL, "no Authorization" },
		{ "Bearer wrong-token-0000000000000", "wrong token" },
		{ "Bearer " TOKEN "x", "token with a byte more" },
		{ "Bearer serve-test-token-5f0c2a9e7b41d", "token with a byte less" },
		{ "Basic " TOKEN, "Basic scheme" },
		{ "Bearer", "Bearer without token" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct req q = { .path = "/py/run", .body = body, .auth = bad[i].auth };
		call(&s, &q, &r);
		expect_error(bad[i].what, &r, 401, "AuthenticationError");
		ck_assert_msg(resp_header(&r, "WWW-Authenticate", h, sizeof h) && strstr(h, "Bearer"),
			      "%s: WWW-Authenticate: Bearer missing: %s", bad[i].what, r.head);
		resp_free(&r);
	}
	struct req ok = { .path = "/py/run", .body = body, .auth = "Bearer " TOKEN };
	call(&s, &ok, &r);
	expect_script("the right token", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "authed\n");
	resp_free(&r);
	free(body);

	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz needs no token: HTTP %d %s", r.code, r.body);
	ck_assert_msg(!strcmp(r.body, "{\"status\":\"ok\"}\n"),
		      "/healthz with a token is not today's body: %s", r.body);
	resp_free(&r);
	get(&s, "/metrics", &r);
	expect_error("/metrics without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	struct req qm = { .path = "/metrics", .auth = "Bearer " TOKEN };
	call(&s, &qm, &r);
	ck_assert_msg(r.code == 200, "/metrics with the token: HTTP %d", r.code);
	resp_free(&r);
	struct req qv = { .path = "/v1/run", .body = "{\"code\":\"print(1)\"}" };
	call(&s, &qv, &r);
	expect_error("/v1/run without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(token_file_rules)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	char *log;
	int st;

	/* the port is refused, then taken by a second start: no other
	 * program may take it in between */
	harness_private_ports();
	/* non-loopback without --token-file: exit 2, naming the flag */
	int port = free_port();
	char listen[64];
	snprintf(listen, sizeof listen, "0.0.0.0:%d", port);
	const char *a_any[] = { "--listen", listen, NULL };
	struct server_opts o1 = { .no_listener = true, .args = a_any };
	st = refused_start(_i, &o1, &s, &log);
	ck_assert_msg(st == 2, "--listen %s without --token-file: status %d (want 2; -1: it ran): %s",
		      listen, st, log);
	ck_assert_msg(strstr(log, "--token-file"), "the refusal does not name --token-file: %s", log);
	free(log);
	server_cleanup(&s);

	/* the same with a token: it runs */
	struct server_opts o2 = { .no_listener = true, .args = a_any, .token = true };
	server_spawn(&s, _i, &o2);
	s.port = port;
	snprintf(s.url, sizeof s.url, "http://127.0.0.1:%d", port);
	server_wait_ready(&s);
	struct resp r;
	post(&s, "/py/run", "{\"code\":\"print(1)\",\"sandboxId\":\"a\"}", &r);
	expect_error("0.0.0.0 listener without token", &r, 401, "AuthenticationError");
	resp_free(&r);
	server_stop(&s);

	/* token files it must refuse: readable by others, by group, too short, empty */
	struct {
		const char *content;
		mode_t mode;
		const char *what;
	} bad[] = {
		{ TOKEN "\n", 0644, "token file readable by others" },
		{ TOKEN "\n", 0640, "token file readable by group" },
		{ "short-token\n", 0600, "token of 11 bytes" },
		{ "\n", 0600, "empty token" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char dir[] = "/tmp/moat-serve-tok-XXXXXX";
		ck_assert_ptr_nonnull(mkdtemp(dir));
		ck_assert_int_eq(chmod(dir, 0755), 0);
		char path[128];
		snprintf(path, sizeof path, "%s/token", dir);
		write_file(path, bad[i].content, strlen(bad[i].content), bad[i].mode);
		if (_i == MODE_ROOTLESS && harness_is_root())
			ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(chmod(path, bad[i].mode), 0);
		const char *a_tok[] = { "--token-file", path, NULL };
		struct server_opts o4 = { .args = a_tok };
		st = refused_start(_i, &o4, &s, &log);
		unlink(path);
		rmdir(dir);
		ck_assert_msg(st > 0, "%s: moat serve did not refuse to start (status %d; -1: it ran): %s",
			      bad[i].what, st, log);
		ck_assert_msg(strcasestr(log, "token"), "%s: the refusal does not say why: %s",
			      bad[i].what, log);
		free(log);
		server_cleanup(&s);
	}
}
END_TEST

START_TEST(metrics)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print(1)", NULL, &r);
	expect_script("a run", &r);
	resp_free(&r);
	get(&s, "/nope", &r);
	resp_free(&r);
	struct req q = { .path = "/metrics" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200, "/metrics: HTTP %d", r.code);
	char ct[128];
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "text/plain"),
		      "/metrics Content-Type: %s", r.head);
	static const char *const names[] = { "moat_serve_requests_total",
					     "moat_serve_request_duration_seconds_bucket",
					     "moat_serve_in_flight", "moat_serve_queued",
					     "moat_serve_rejected_total" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		int found = 0;
		metric_sum(r.body, names[i], NULL, &found);
		ck_assert_msg(found > 0, "/metrics has no sample of %s:\n%.3000s", names[i], r.body);
	}
	int found;
	ck_assert_msg(metric_sum(r.body, "moat_serve_requests_total", NULL, &found) >= 2,
		      "requests_total counts fewer than the 2 requests made:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_in_flight", NULL, &found) == 0,
		      "in_flight is not 0 when idle:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_queued", NULL, &found) == 0,
		      "queued is not 0 when idle:\n%.3000s", r.body);
	ck_assert_msg(metric_sum(r.body, "moat_serve_rejected_total", NULL, &found) == 0,
		      "rejected_total is not 0:\n%.3000s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(access_log)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true };
	server_start(&s, _i, &o);
	struct resp r;
	const char *auth = "Bearer " TOKEN;
	char *body2 = NULL;
	ck_assert_int_ge(asprintf(&body2, "{\"code\":\"print('SECRET_CODE_MARK'[:6])\","
				  "\"sandboxId\":\"SECRET_SANDBOX_MARK\",\"input\":{\"body\":"
				  "\"SECRET_INPUT_MARK\",\"path\":\"/SECRET_PATH_MARK\"}}"),
			 0);
	struct req q = { .path = "/py/run?q=SECRET_QUERY_MARK", .body = body2, .auth = auth };
	call(&s, &q, &r);
	expect_script("a logged run", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "SECRET\n");
	resp_free(&r);
	free(body2);
	struct req qh = { .path = "/ts/run",
			  .body = "{\"code\":\"export default { async fetch(r) { return new "
				  "Response('SECRET_HANDLER_OUT') } }\",\"sandboxId\":\"b\"}",
			  .auth = auth };
	call(&s, &qh, &r);
	ck_assert_msg(r.code == 200, "TS handler: %d %s", r.code, r.body);
	resp_free(&r);
	struct req qv = { .path = "/v1/run",
			  .body = "{\"language\":\"python\",\"code\":\"print(2)\",\"env\":"
				  "{\"SECRET_ENV_NAME\":\"SECRET_ENV_VALUE\"}}",
			  .auth = auth };
	call(&s, &qv, &r);
	ck_assert_msg(r.code == 200, "/v1/run: %d %s", r.code, r.body);
	resp_free(&r);
	struct req qw = { .path = "/py/run", .body = "{}", .auth = "Bearer WRONG_TOKEN_MARK_0000000" };
	call(&s, &qw, &r);
	ck_assert_int_eq(r.code, 401);
	resp_free(&r);
	get(&s, "/nope", &r);
	resp_free(&r);
	/* the log is read once the server stopped: every line is out */
	{
		char kids[4096];
		ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
		int st = server_term(&s, harness_scale_ms(15000), NULL);
		ck_assert_msg(st == 0, "exit status %d", st);
	}
	char *log = server_log(&s);
	static const char *const secrets[] = { TOKEN,
					       "WRONG_TOKEN_MARK",
					       "SECRET_CODE_MARK",
					       "SECRET_INPUT_MARK",
					       "SECRET_PATH_MARK",
					       "SECRET_SANDBOX_MARK",
					       "SECRET_QUERY_MARK",
					       "SECRET_HANDLER_OUT",
					       "SECRET_ENV_NAME",
					       "SECRET_ENV_VALUE",
					       "print(" };
	for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
		ck_assert_msg(!strstr(log, secrets[i]), "the server's stderr holds %s:\n%.3000s",
			      secrets[i], log);
	cJSON *lines = access_lines(&s);
	ck_assert_msg(cJSON_GetArraySize(lines) >= 5, "%d access log lines for 5+ requests:\n%.3000s",
		      cJSON_GetArraySize(lines), log);
	const cJSON *py = access_find(lines, "route", "py"), *l;
	ck_assert_msg(py && !strcmp(jstr(py, "path"), "/py/{path}"),
		      "no access line with path /py/{path} (the template):\n%.3000s", log);
	int runs = 0;
	cJSON_ArrayForEach(l, lines)
	{
		const char *path = jstr(l, "path");
		ck_assert_msg(!strchr(path, '?'), "a path with its query string: %s", path);
		if (jnum(l, "status") == 200 && strcmp(path, "/healthz") != 0) {
			runs++;
			ck_assert_msg(cJSON_IsString(jget(l, "language")) && cJSON_IsString(jget(l, "mode")),
				      "a run's access line without language/mode:\n%.3000s", log);
		}
	}
	ck_assert_msg(runs >= 3, "%d successful run lines (want 3):\n%.3000s", runs, log);
	const char *lang = jstr(py, "language"), *mode = jstr(py, "mode");
	ck_assert_msg(lang && !strcmp(lang, "python"), "/py/run language: %s", lang ? lang : "none");
	ck_assert_msg(mode && !strcmp(mode, "script"), "/py/run mode: %s", mode ? mode : "none");
	ck_assert_msg(jnum(py, "bytesIn") > 0 && jnum(py, "bytesOut") > 0, "bytes of /py/run: %s", log);
	const cJSON *ts = access_find(lines, "path", "/ts/{path}");
	ck_assert_msg(ts && jstr(ts, "mode") && !strcmp(jstr(ts, "mode"), "handler"),
		      "/ts/run handler line mode:\n%.3000s", log);
	const cJSON *nf = access_find(lines, "path", "/{unknown}");
	ck_assert_msg(nf && jnum(nf, "status") == 404, "/nope line:\n%.3000s", log);
	bool saw401 = false;
	cJSON_ArrayForEach(l, lines) saw401 |= jnum(l, "status") == 401;
	ck_assert_msg(saw401, "no 401 access line:\n%.3000s", log);
	cJSON_Delete(lines);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* ---- tests: load, shutdown, disconnects ------------------------------------------- */

START_TEST(concurrency_queue)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "2", "--queue", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	enum { N = 32 };
	char *body = envelope("import time\ntime.sleep(0.3)\nprint('slept')", NULL);
	struct call c[N];
	struct req q = { .path = "/py/run", .body = body };
	for (int i = 0; i < N; i++)
		call_start(&s, &q, &c[i]);
	int n200 = 0, n503 = 0, other = 0;
	char others[2048] = "";
	for (int i = 0; i < N; i++) {
		struct resp r;
		call_finish(&c[i], &r);
		char h[64];
		if (r.code == 200 && r.json && jstr(r.json, "stdout") &&
		    !strcmp(jstr(r.json, "stdout"), "slept\n")) {
			n200++;
		} else if (r.code == 503) {
			n503++;
			ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h),
				      "a 503 without Retry-After: %s", r.head);
			ck_assert_msg(!strcmp(h, "1"), "Retry-After: %s (want 1)", h);
			expect_error("queue full", &r, 503, "ServerBusy");
		} else {
			other++;
			char line[300];
			snprintf(line, sizeof line, "#%d: curl %d HTTP %d %.200s\n", i, r.curl_rc, r.code,
				 r.body);
			strncat(others, line, sizeof others - strlen(others) - 1);
		}
		resp_free(&r);
	}
	free(body);
	ck_assert_msg(other == 0, "%d of %d requests got neither 200 nor 503:\n%s", other, N, others);
	ck_assert_msg(n200 + n503 == N, "lost requests: %d + %d != %d", n200, n503, N);
	ck_assert_msg(n200 >= 2, "only %d requests ran", n200);
	ck_assert_msg(n503 > 0, "32 requests at once with 2 slots and a queue of 4: none refused");
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double rej = metric_sum(m, "moat_serve_rejected_total", NULL, &found);
	ck_assert_msg(found && rej == n503, "rejected_total %g, but %d requests got 503:\n%.3000s", rej,
		      n503, m);
	double total = metric_sum(m, "moat_serve_requests_total", NULL, &found);
	ck_assert_msg(total >= N, "requests_total %g < %d:\n%.3000s", total, N, m);
	/* the labels are not in the contract: where the samples carry the route
	 * or the outcome, the counts match what came back */
	int fr = 0;
	double py = metric_sum(m, "moat_serve_requests_total", "route=\"py\"", &fr);
	ck_assert_msg(!fr || py == N, "requests_total{route=\"py\"} %g != %d requests:\n%.3000s", py,
		      N, m);
	int fo = 0;
	double ok = metric_sum(m, "moat_serve_requests_total", "route=\"py\";outcome=\"ok\"", &fo);
	ck_assert_msg(!fo || ok == n200, "requests_total{outcome=\"ok\"} %g != %d 200s:\n%.3000s", ok,
		      n200, m);
	double rj = metric_sum(m, "moat_serve_requests_total", "route=\"py\";outcome=\"rejected\"", &fo);
	ck_assert_msg(!fo || rj == n503, "requests_total{outcome=\"rejected\"} %g != %d 503s:\n%.3000s",
		      rj, n503, m);
	double cnt = metric_sum(m, "moat_serve_request_duration_seconds_count", "route=\"py\"", &fr);
	ck_assert_msg(!fr || cnt == N, "request_duration_seconds_count{route=\"py\"} %g != %d:\n%.3000s",
		      cnt, N, m);
	ck_assert_msg(metric_sum(m, "moat_serve_in_flight", NULL, &found) == 0 &&
		      metric_sum(m, "moat_serve_queued", NULL, &found) == 0,
		      "in_flight/queued not 0 after all answered:\n%.3000s", m);
	free(m);
	server_stop(&s);
}
END_TEST

START_TEST(client_disconnect)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(30)", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call c;
	call_start(&s, &q, &c);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)),
		      "no sandbox process appeared under the server");
	harness_sleep_ms(harness_scale_ms(1000));
	kill(c.pid, SIGKILL);
	struct resp r;
	call_finish(&c, &r);
	resp_free(&r);
	free(body);
	long t0 = harness_now_ms();
	char kids[4096];
	int n = server_children_gone(&s, harness_scale_ms(5000), kids, sizeof kids);
	ck_assert_msg(n == 0, "%s: %ld ms after the client went, the server still has %d child(ren):\n%s",
		      MODE_NAME[_i], harness_now_ms() - t0, n, kids);
	/* the access line says so */
	bool seen = false;
	char *log = NULL;
	for (long t1 = harness_now_ms(); !seen && harness_now_ms() - t1 < harness_scale_ms(5000); harness_sleep_ms(50)) {
		free(log);
		log = server_log(&s);
		cJSON *lines = access_lines(&s);
		seen = access_find(lines, "outcome", "disconnected") != NULL;
		cJSON_Delete(lines);
	}
	ck_assert_msg(seen, "no access line with outcome \"disconnected\":\n%.3000s", log);
	free(log);
	/* the server goes on */
	struct resp r2;
	run_py(&s, "print('next')", NULL, &r2);
	expect_script("after a disconnect", &r2);
	resp_free(&r2);
	server_stop(&s);
}
END_TEST

START_TEST(sigterm_drains)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "2", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(1)\nprint('finished')", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call c[2];
	call_start(&s, &q, &c[0]);
	call_start(&s, &q, &c[1]);
	/* both in flight (not in the listen backlog, not queued) */
	bool both = false;
	for (long t1 = harness_now_ms(); !both && harness_now_ms() - t1 < harness_scale_ms(10000); harness_sleep_ms(20)) {
		char *m = get_metrics(&s, NULL);
		both = metric_sum(m, "moat_serve_in_flight", NULL, NULL) == 2;
		free(m);
	}
	ck_assert_msg(both, "moat_serve_in_flight never reached 2");
	ck_assert_msg(server_wait_children(&s, 2, harness_scale_ms(10000)),
		      "the two runs have no processes");
	long t0 = harness_now_ms();
	ck_assert_int_eq(kill(s.p.pid, SIGTERM), 0);
	/* it stops accepting */
	harness_sleep_ms(harness_scale_ms(200));
	if (!server_exited(&s)) {
		struct req qh = { .path = "/healthz", .max_ms = 3000 };
		struct resp rh;
		call(&s, &qh, &rh);
		ck_assert_msg(rh.code != 200, "a new request after SIGTERM was answered 200");
		resp_free(&rh);
	}
	struct resp r[2];
	for (int i = 0; i < 2; i++)
		call_finish(&c[i], &r[i]);
	int st = server_wait_exit(&s, harness_scale_ms(12000));
	for (int i = 0; i < 2; i++) {
		char *log = server_log(&s);
		ck_assert_msg(r[i].code == 200 && r[i].json && jstr(r[i].json, "stdout") &&
			      !strcmp(jstr(r[i].json, "stdout"), "finished\n"),
			      "in-flight run %d after SIGTERM: curl %d HTTP %d [%.500s]; server log:\n%.3000s",
			      i, r[i].curl_rc, r[i].code, r[i].body, log);
		free(log);
		resp_free(&r[i]);
	}
	long took = harness_now_ms() - t0;
	if (st < 0) {
		kill(s.p.pid, SIGKILL);
		server_reap(&s);
	}
	free(body);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM with runs in flight (-1: still running "
		      "%ld ms later)", st, took);
	server_cleanup(&s);
}
END_TEST

START_TEST(sigterm_grace_kills)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--grace", "1", "--max-concurrent", "1", "--queue", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	char *body = envelope("import time\ntime.sleep(30)\nprint('not killed')", NULL);
	struct req q = { .path = "/py/run", .body = body };
	struct call run, queued[2];
	call_start(&s, &q, &run);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)), "the run did not start");
	call_start(&s, &q, &queued[0]);
	call_start(&s, &q, &queued[1]);
	/* wait until both wait in the queue */
	bool both = false;
	for (long t1 = harness_now_ms(); !both && harness_now_ms() - t1 < harness_scale_ms(10000); harness_sleep_ms(50)) {
		char *m = get_metrics(&s, NULL);
		both = metric_sum(m, "moat_serve_queued", NULL, NULL) == 2;
		free(m);
	}
	ck_assert_msg(both, "moat_serve_queued never reached 2");
	long took;
	int st = server_term(&s, harness_scale_ms(1000 + 5000), &took);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM with --grace 1 (-1: not within %ld ms)", st,
		      harness_scale_ms(6000));
	struct resp r;
	call_finish(&run, &r);
	ck_assert_msg(r.curl_rc != 0 || r.code >= 500 ||
		      (r.code == 200 && r.json && jstr(r.json, "error")),
		      "the run killed at the end of the grace: curl %d HTTP %d %.500s (want an error "
		      "or a closed connection)", r.curl_rc, r.code, r.body);
	ck_assert_msg(!strstr(r.body, "not killed"), "the run finished: %s", r.body);
	resp_free(&r);
	for (int i = 0; i < 2; i++) {
		call_finish(&queued[i], &r);
		char h[32];
		ck_assert_msg(r.code == 503, "queued request %d at shutdown: curl %d HTTP %d %.300s "
			      "(want 503)", i, r.curl_rc, r.code, r.body);
		ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h), "503 without Retry-After");
		resp_free(&r);
	}
	free(body);
	server_cleanup(&s);
}
END_TEST

/* The run queue is first come, first served: with the one run slot held,
 * requests queued one after another (each seen waiting before the next is
 * sent) run in the order they came, although each woken waiter, and each
 * newcomer while others wait, could otherwise take a freed slot first. */
START_TEST(queue_is_first_come_first_served)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "1", "--queue", "16", NULL };
	struct server_opts o = { .args = a, .socket = true };
	server_start(&s, _i, &o);
	/* held until the six have queued behind it: the test's SIGUSR1 lets
	 * it go (a sleep scaled for a slow host still ended before the sixth
	 * queued on a loaded one, issue 49); named moat-hold once it listens */
	static const char hold[] =
		"{\"code\":\"import ctypes, signal, time\\nclass Go(BaseException): pass\\n"
		"def go(*a): raise Go\\nsignal.signal(signal.SIGUSR1, go)\\n"
		"ctypes.CDLL(None).prctl(15, b'moat-hold', 0, 0, 0)\\ntry:\\n    time.sleep(55)\\n"
		"except Go:\\n    pass\\nprint('held')\",\"timeout\":60000}";
	struct req hq = { .path = "/v1/run", .body = hold };
	enum { N = 6 };
	struct call run, queued[N];
	call_start(&s, &hq, &run);
	ck_assert_msg(server_wait_children(&s, 1, harness_scale_ms(10000)), "the run did not start");
	char *bodies[N];
	for (int i = 0; i < N; i++) {
		char code[96];
		snprintf(code, sizeof code, "import time\nprint(%d, time.monotonic_ns())", i);
		bodies[i] = envelope(code, NULL);
		struct req q = { .path = "/py/run", .body = bodies[i] };
		call_start(&s, &q, &queued[i]);
		bool in = false;
		for (long t1 = harness_now_ms(); !in && harness_now_ms() - t1 < harness_scale_ms(10000); harness_sleep_ms(10)) {
			char *m = get_metrics(&s, NULL);
			in = metric_sum(m, "moat_serve_queued", NULL, NULL) == i + 1;
			free(m);
		}
		ck_assert_msg(in, "request %d never waited in the queue", i);
	}
	pid_t holder = 0;
	for (long t1 = harness_now_ms(); proc_descendants_named(s.p.pid, "moat-hold\n", 3, &holder) < 1;
	     harness_sleep_ms(20))
		ck_assert_msg(harness_now_ms() - t1 < harness_scale_ms(20000), "the holding run never held");
	ck_assert_int_eq(kill(holder, SIGUSR1), 0);
	struct resp r;
	call_finish(&run, &r);
	ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "held\n"),
		      "HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	long long last = -1;
	for (int i = 0; i < N; i++) {
		call_finish(&queued[i], &r);
		int idx = -1;
		long long t = -1;
		const char *out = r.json ? jstr(r.json, "stdout") : NULL;
		ck_assert_msg(r.code == 200 && out && sscanf(out, "%d %lld", &idx, &t) == 2 && idx == i,
			      "queued request %d: HTTP %d %.300s", i, r.code, r.body);
		ck_assert_msg(t > last, "queued request %d ran before request %d, which came first",
			      i, i - 1);
		last = t;
		resp_free(&r);
		free(bodies[i]);
	}
	server_stop(&s);
}
END_TEST

/* After the head, a failure truncates: a body over maxResponseBytes, a
 * handler that times out. */
START_TEST(handler_late_failures)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS,
				 .config = "{\"serve\":{\"maxResponseBytes\":10000,"
					   "\"defaults\":{\"timeout\":1500}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "def handle_request(request):\n"
	       "    return (200, {}, (b'z' * 1000 for _ in range(50)))\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (r.curl_rc == 18 || r.curl_rc == 56),
		      "50000 bytes over maxResponseBytes 10000: HTTP %d curl %d (want 200 and 18/56), "
		      "%zu bytes", r.code, r.curl_rc, r.body_len);
	ck_assert_msg(r.body_len <= 10000, "%zu bytes came, over maxResponseBytes 10000", r.body_len);
	resp_free(&r);
	/* within the cap: whole */
	run_py(&s,
	       "def handle_request(request):\n"
	       "    return (200, {}, (b'z' * 1000 for _ in range(10)))\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && r.body_len == 10000,
		      "10000 bytes, at maxResponseBytes: HTTP %d curl %d, %zu bytes", r.code, r.curl_rc,
		      r.body_len);
	resp_free(&r);
	/* the handler times out after its head */
	run_py(&s,
	       "import time\n"
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        yield b'first;'\n"
	       "        time.sleep(30)\n"
	       "        yield b'never'\n"
	       "    return (200, {}, gen())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (r.curl_rc == 18 || r.curl_rc == 56),
		      "a handler timing out after its head: HTTP %d curl %d (want 200, 18/56) [%s]",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(!strcmp(r.body, "first;"), "body so far [%s]", r.body);
	ck_assert_msg(r.ms < harness_scale_ms(10000), "the truncation came after %ld ms", r.ms);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* SIGINT stops it as SIGTERM does. */
START_TEST(sigint_stops)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print(1)", NULL, &r);
	expect_script("a run", &r);
	resp_free(&r);
	char kids[4096];
	ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
	ck_assert_int_eq(kill(s.p.pid, SIGINT), 0);
	int st = server_wait_exit(&s, harness_scale_ms(15000));
	if (st < 0) {
		kill(s.p.pid, SIGKILL);
		server_reap(&s);
	}
	ck_assert_msg(st == 0, "exit status %d after SIGINT (-1: still running)", st);
	server_cleanup(&s);
}
END_TEST

/* --listen [::1]:PORT */
START_TEST(ipv6_listener)
{
	HARNESS_MODE_GUARD(_i);
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		harness_skip("%s: no IPv6 loopback here", __func__);
		if (fd >= 0)
			close(fd);
		return;
	}
	socklen_t l = sizeof a;
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	int port = ntohs(a.sin6_port);
	char listen[64];
	snprintf(listen, sizeof listen, "[::1]:%d", port);
	const char *args[] = { "--listen", listen, "--no-auth", NULL };
	struct server_opts o = { .no_listener = true, .args = args };
	struct server s;
	server_spawn(&s, _i, &o);
	snprintf(s.url, sizeof s.url, "http://[::1]:%d", port);
	server_wait_ready(&s);
	struct resp r;
	run_py(&s, "print('v6')", NULL, &r);
	expect_script("over [::1]", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "v6\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: malformed HTTP ------------------------------------------------------------ */

START_TEST(slowloris)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--client-timeout", "2", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	int fd = raw_connect(&s);
	static const char part[] = "POST /py/run HTTP/1.1\r\nHost: x\r\n";
	ck_assert(raw_send(fd, part, sizeof part - 1));
	bool closed;
	long took;
	char *got = raw_read(fd, harness_scale_ms(2000 + 5000), &closed, &took);
	close(fd);
	ck_assert_msg(closed, "a half-sent request was not closed within %ld ms (got [%s])",
		      harness_scale_ms(7000), got);
	ck_assert_msg(took >= 1000, "closed after %ld ms, before --client-timeout 2", took);
	free(got);

	/* a body that never comes (Content-Length larger than what is sent) */
	fd = raw_connect(&s);
	static const char shortbody[] = "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
					"\r\n{\"code\":\"print(1)\",";
	ck_assert(raw_send(fd, shortbody, sizeof shortbody - 1));
	got = raw_read(fd, harness_scale_ms(7000), &closed, &took);
	close(fd);
	ck_assert_msg(closed, "a body short of its Content-Length was not closed: [%s]", got);
	ck_assert_msg(raw_status(got) == 0 || raw_status(got) >= 400, "answered %d: %s",
		      raw_status(got), got);
	free(got);

	/* a header trickled a byte every 300 ms: slow, never idle for 2 s */
	fd = raw_connect(&s);
	static const char trickle[] = "POST /py/run HTTP/1.1\r\nHost: x\r\nX-Slow: "
				      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	long t0 = harness_now_ms(), limit = harness_scale_ms(2000 + 15000);
	closed = false;
	for (size_t i = 0; !closed && harness_now_ms() - t0 < limit; i = (i + 1) % (sizeof trickle - 1)) {
		if (!raw_send(fd, trickle + i, 1)) {
			closed = true;
			break;
		}
		got = raw_read(fd, 300, &closed, NULL);
		free(got);
	}
	took = harness_now_ms() - t0;
	close(fd);
	ck_assert_msg(closed, "a request trickled a byte every 300 ms was still open after %ld ms "
		      "(--client-timeout 2)", took);

	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(malformed_http)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	bool closed;
	long took;
	/* a 64 KiB header value */
	size_t big = 64 * 1024;
	char *req = malloc(big + 200);
	ck_assert_ptr_nonnull(req);
	int n = sprintf(req, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	n += (int)big;
	n += sprintf(req + n, "\r\n\r\n");
	int fd = raw_connect(&s);
	raw_send(fd, req, (size_t)n); /* the server may close while we send */
	char *got = raw_read(fd, harness_scale_ms(10000), &closed, &took);
	close(fd);
	free(req);
	int st = raw_status(got);
	ck_assert_msg(st == 431 || st == 413 || (st == 0 && closed),
		      "a 64 KiB header: status %d closed %d: %.300s", st, closed, got);
	free(got);

	struct {
		const char *raw, *what;
	} bad[] = {
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", "Content-Length abc" },
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}", "Content-Length -5" },
		{ "GARBAGE\r\n\r\n", "no request line" },
		{ "POST /py/run HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"code\":\"print(1)\","
		  "\"sandboxId\":\"a\"}",
		  "Content-Length shorter than the body" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fd = raw_connect(&s);
		raw_send(fd, bad[i].raw, strlen(bad[i].raw));
		shutdown(fd, SHUT_WR);
		got = raw_read(fd, harness_scale_ms(20000), &closed, &took);
		close(fd);
		st = raw_status(got);
		ck_assert_msg((st >= 400 && st < 500) || (st == 0 && closed),
			      "%s: status %d (want 4xx or a closed connection): %.300s", bad[i].what, st,
			      got);
		free(got);
	}
	/* nothing ran and the server serves */
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz after the malformed requests: %d", r.code);
	resp_free(&r);
	run_py(&s, "print('still')", NULL, &r);
	expect_script("after the malformed requests", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* At most 64 connections per client address. */
START_TEST(connection_limit)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	enum { N = 70 };
	int fds[N];
	for (int i = 0; i < N; i++)
		fds[i] = raw_connect(&s);
	harness_sleep_ms(harness_scale_ms(500));
	int closed_n = 0;
	for (int i = 0; i < N; i++) {
		bool closed;
		char *got = raw_read(fds[i], 50, &closed, NULL);
		closed_n += closed;
		free(got);
	}
	ck_assert_msg(closed_n >= N - 64, "70 idle connections from one address: only %d closed at "
		      "once (limit 64 per address)", closed_n);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	harness_sleep_ms(harness_scale_ms(300));
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_msg(r.code == 200, "/healthz once the connections went: %d", r.code);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: the warm pool (docs/SERVE.md, "The pool") --------------------------------- */

/* moat serve as a pod runs it (issue 18): no writable file system at all,
 * --json-log, SIGTERM. It serves scripts and handlers (no store: a pod's
 * store is Redis), every line on stdout is one JSON object (notices and
 * access lines), nothing goes to stderr, and SIGTERM ends it with status 0
 * within --grace + 5 s. */
START_TEST(pod_readonly_json_log)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--no-kv", "--json-log", "--grace", "2", NULL };
	struct server_opts o = { .args = a, .kv = "", .readonly_root = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import os\nopen('/tmp/x', 'w').write('ok')\nprint(6*7, os.getuid())", NULL, &r);
	ck_assert_msg(r.code == 200 && r.json && !strcmp(jstr(r.json, "stdout"), "42 65534\n"),
		      "a script in a read-only pod: HTTP %d %.500s", r.code, r.body);
	resp_free(&r);
	long took;
	int st = server_term(&s, harness_scale_ms(2000 + 5000), &took);
	ck_assert_msg(st == 0, "exit status %d after SIGTERM (-1: not within %ld ms)", st,
		      harness_scale_ms(7000));
	char *err = server_log(&s);
	char *out = slurp(s.outf, NULL);
	ck_assert_ptr_nonnull(out);
	ck_assert_msg(!*err, "stderr with --json-log: %.1000s", err);
	int lines = 0, access = 0, listening = 0, stopped = 0;
	for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		cJSON *j = cJSON_Parse(l);
		ck_assert_msg(cJSON_IsObject(j), "not one JSON object per line: %s", l);
		ck_assert_msg(jstr(j, "ts"), "no ts: %s", l);
		lines++;
		if (jstr(j, "route")) {
			access += !strcmp(jstr(j, "route"), "py"); /* not the readiness polls */
		} else {
			const char *lv = jstr(j, "level"), *c = jstr(j, "component"), *m = jstr(j, "msg");
			ck_assert_msg(lv && c && m, "a notice without level, component or msg: %s", l);
			listening += !strcmp(c, "serve") && !strncmp(m, "listening on ", 13);
			stopped += !strcmp(c, "serve") && !strcmp(m, "stopped");
		}
		cJSON_Delete(j);
	}
	ck_assert_msg(access == 1 && listening == 1 && stopped == 1,
		      "%d lines: %d access, %d listening, %d stopped", lines, access, listening, stopped);
	free(out);
	free(err);
	server_cleanup(&s);
}
END_TEST

/* ---- memory the service holds (SERVE.md "Limits", SECURITY.md 69, 70) -------------- */

/* A handler whose response is 15 MiB, yielded 1 MiB at a time. */
#define BIG_HANDLER_MIB 15
static const char big_handler[] =
	"def handle_request(request):\n"
	"    def gen():\n"
	"        for i in range(15):\n"
	"            yield b'x' * (1024 * 1024)\n"
	"    return (200, {'content-type': 'text/plain'}, gen())\n";

static long vm_rss_kib(pid_t pid)
{
	return atol(proc_status_field(pid, "VmRSS"));
}

/* Connects and sends a POST of body to path; the answer is never read. */
static int raw_post(const struct server *s, const char *path, const char *body)
{
	int fd = raw_connect(s);
	char head[256];
	snprintf(head, sizeof head,
		 "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n", path, strlen(body));
	ck_assert(raw_send(fd, head, strlen(head)));
	ck_assert(raw_send(fd, body, strlen(body)));
	return fd;
}

/* Clients that never read a large handler response: the server reads
 * the handler's stdout only while less than a small window waits for the
 * client, so its memory stays bounded; each run, blocked on its full
 * pipe, is ended by its own timeout and frees its slot; other requests
 * are served meanwhile; a client that reads gets the whole response. */
START_TEST(handler_slow_clients)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "6", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOTLESS,
				 .config = "{\"serve\":{\"defaults\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	char *env = envelope(big_handler, NULL);
	struct resp r;
	post(&s, "/py/big", env, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 &&
		      r.body_len == (size_t)BIG_HANDLER_MIB * 1024 * 1024,
		      "a reading client: HTTP %d curl %d, %zu bytes (want %d MiB): %s", r.code,
		      r.curl_rc, r.body_len, BIG_HANDLER_MIB, r.err);
	resp_free(&r);

	long base = vm_rss_kib(s.p.pid);
	ck_assert_msg(base > 0, "no VmRSS for the server (pid %ld)", (long)s.p.pid);
	enum { N = 4 };
	int fd[N];
	long t0 = harness_now_ms();
	for (int i = 0; i < N; i++)
		fd[i] = raw_post(&s, "/py/big", env);
	free(env);
	/* meanwhile, a script runs */
	run_py(&s, "print('meanwhile')", NULL, &r);
	expect_script("a script beside the stalled handlers", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "meanwhile\n"), "%.300s", r.body);
	resp_free(&r);
	/* the handlers' runs end by their 3 s timeout: the slots come back
	 * while their clients still have not read a byte */
	long peak = base, freed = -1, limit = harness_scale_ms(3000 + 2000 + 10000);
	while (harness_now_ms() - t0 < limit) {
		long rss = vm_rss_kib(s.p.pid);
		if (rss > peak)
			peak = rss;
		char *m = get_metrics(&s, NULL);
		int found = 0;
		double inflight = metric_sum(m, "moat_serve_in_flight", NULL, &found);
		free(m);
		if (found && inflight == 0 && harness_now_ms() - t0 >= 2500) {
			freed = harness_now_ms() - t0;
			break;
		}
		harness_sleep_ms(100);
	}
	ck_assert_msg(freed >= 0, "%d stalled handler runs still held their slots %ld ms after they "
		      "started (timeout 3 s)", N, limit);
	long rss = vm_rss_kib(s.p.pid);
	if (rss > peak)
		peak = rss;
	/* old: each held its whole response twice (30 MiB); now a window each */
	ck_assert_msg(peak - base < 48 * 1024,
		      "%d non-reading clients of a %d MiB handler response took the server from "
		      "%ld KiB to %ld KiB RSS", N, BIG_HANDLER_MIB, base, peak);
	for (int i = 0; i < N; i++)
		close(fd[i]);
	/* each run was ended by its timeout */
	long t1 = harness_now_ms();
	int timeouts = 0;
	while (harness_now_ms() - t1 < harness_scale_ms(10000)) {
		cJSON *lines = access_lines(&s);
		timeouts = 0;
		const cJSON *l;
		cJSON_ArrayForEach(l, lines)
		{
			const char *p = jstr(l, "path"), *oc = jstr(l, "outcome");
			if (p && !strcmp(p, "/py/{path}") && oc && !strcmp(oc, "timeout"))
				timeouts++;
		}
		cJSON_Delete(lines);
		if (timeouts >= N)
			break;
		harness_sleep_ms(100);
	}
	ck_assert_msg(timeouts == N, "%d of %d stalled handler runs were logged as timed out",
		      timeouts, N);
	server_stop(&s);
}
END_TEST

/* Reads 16 KiB every 100 ms (never idle for --client-timeout, slower than
 * the answer needs) until the server has given up on the
 * request to path (its access log line is written: the answer is over,
 * whatever the sockets' buffers still hold) or ms pass: how long that
 * took, or -1. */
static long trickle_read(const struct server *s, int fd, const char *path, long ms)
{
	long t0 = harness_now_ms();
	char buf[16384];
	while (harness_now_ms() - t0 < ms) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 100) > 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) == 0)
			return harness_now_ms() - t0;
		cJSON *lines = access_lines(s);
		bool done = access_find(lines, "path", path) != NULL;
		cJSON_Delete(lines);
		if (done)
			return harness_now_ms() - t0;
		harness_sleep_ms(100);
	}
	return -1;
}

/* A client that reads a little now and then cannot hold its answer (and
 * the memory behind it) for ever: a buffered answer must be out within
 * --client-timeout, a handler's within its timeout and then
 * --client-timeout. */
START_TEST(response_write_deadline)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--client-timeout", "3", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT,
				 .config = "{\"serve\":{\"defaults\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	/* 4 MiB of stdout: 26 s at 160 KB/s */
	int fd = raw_post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"import sys\\n"
				       "sys.stdout.write('x' * (4 << 20))\",\"maxOutputBytes\":4194304}");
	long took = trickle_read(&s, fd, "/v1/run", harness_scale_ms(3000 + 10000));
	close(fd);
	ck_assert_msg(took >= 0, "a /v1/run answer read 16 KiB every 100 ms was still being sent "
		      "after %ld ms (--client-timeout 3)", harness_scale_ms(13000));
	char *env = envelope(big_handler, NULL);
	fd = raw_post(&s, "/py/big", env);
	free(env);
	took = trickle_read(&s, fd, "/py/{path}", harness_scale_ms(3000 + 3000 + 10000));
	close(fd);
	ck_assert_msg(took >= 0, "a handler response read 16 KiB every 100 ms was still being "
		      "sent after %ld ms (timeout 3 s, --client-timeout 3)",
		      harness_scale_ms(16000));
	struct resp r;
	get(&s, "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* serve.max.maxOutputBytes: a request may not ask more (403); what it does
 * not ask for is capped there; a result's JSON, control bytes escaped
 * six-fold, stays within the cap per stream. */
START_TEST(max_output_bytes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	/* the default maximum: 4 MiB */
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":4194305}",
	     &r);
	expect_error("maxOutputBytes above the default maximum", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":1073741824}",
	     &r);
	expect_error("maxOutputBytes 1 GiB", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	/* 64 MiB of \x01 asked at the maximum: the answer is about 4 MiB, not 24 */
	v1(&s, "{\"language\":\"python\",\"code\":\"import sys\\n"
	       "sys.stdout.buffer.write(b'\\\\x01' * (64 << 20))\",\"maxOutputBytes\":4194304}", &r);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(r.body_len <= 4194304 + 65536,
		      "a control-byte flood made a %zu-byte answer (cap 4 MiB a stream)", r.body_len);
	ck_assert_msg(out && strlen(out) == 4194304 / 6 && out[0] == '\x01',
		      "stdout: %zu bytes (want %d, each escaped in six)", out ? strlen(out) : 0,
		      4194304 / 6);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	resp_free(&r);
	/* a Spin script's 256 KiB cap counts escaped bytes too */
	run_py(&s, "import sys\nsys.stdout.write('\\x01' * 300000)\n", NULL, &r);
	expect_script("a script's control-byte flood", &r);
	out = jstr(r.json, "stdout");
	ck_assert_msg(r.body_len <= SCRIPT_CAP + 65536, "a script's flood made a %zu-byte answer",
		      r.body_len);
	ck_assert_msg(out && strlen(out) == SCRIPT_CAP / 6, "script stdout: %zu bytes (want %d)",
		      out ? strlen(out) : 0, SCRIPT_CAP / 6);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	resp_free(&r);
	server_stop(&s);

	/* an operator's lower maximum */
	o.config = "{\"serve\":{\"max\":{\"maxOutputBytes\":65536}}}";
	server_start(&s, _i, &o);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(1)\",\"maxOutputBytes\":65537}",
	     &r);
	expect_error("maxOutputBytes above serve.max", &r, 403, "SandboxPolicyError");
	resp_free(&r);
	v1(&s, "{\"language\":\"python\",\"code\":\"print('y' * 100000)\"}", &r);
	out = jstr(r.json, "stdout");
	ck_assert_msg(out && strlen(out) == 65536 && cJSON_IsTrue(jget(r.json, "stdoutTruncated")),
		      "unasked, the output is capped at serve.max.maxOutputBytes: %zu bytes",
		      out ? strlen(out) : 0);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Results in flight reserve their worst case from a global budget (a
 * 128 MiB cap: the whole of it): a request that does not fit beside the
 * others is answered 503 with Retry-After and counted; the budget comes
 * back with the answer. */
START_TEST(result_budget)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	const char *a[] = { "--max-concurrent", "4", NULL };
	struct server_opts o = { .args = a, .socket = _i == MODE_ROOT,
				 .config = "{\"serve\":{\"max\":{\"maxOutputBytes\":134217728}}}" };
	server_start(&s, _i, &o);
	static const char big[] = "{\"language\":\"python\",\"code\":\"import time\\ntime.sleep(2)\\n"
				  "print('slept')\",\"maxOutputBytes\":134217728}";
	struct req q = { .path = "/v1/run", .body = big };
	struct call c;
	call_start(&s, &q, &c);
	long t0 = harness_now_ms();
	for (;;) {
		char *m = get_metrics(&s, NULL);
		int found = 0;
		double held = metric_sum(m, "moat_serve_result_bytes", NULL, &found);
		free(m);
		if (found && held > 0)
			break;
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(10000),
			      "the first request never reserved its result (moat_serve_result_bytes)");
		harness_sleep_ms(20);
	}
	struct resp r;
	post(&s, "/v1/run", big, &r);
	expect_error("a second 128 MiB result beside the first", &r, 503, "ServerBusy");
	char h[64];
	ck_assert_msg(resp_header(&r, "Retry-After", h, sizeof h) && !strcmp(h, "1"),
		      "a 503 of the result budget without Retry-After: 1: %s", r.head);
	resp_free(&r);
	call_finish(&c, &r);
	ck_assert_msg(r.code == 200 && r.json && !strcmp(jstr(r.json, "stdout"), "slept\n"),
		      "the first: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double rej = metric_sum(m, "moat_serve_result_budget_rejected_total", NULL, &found);
	ck_assert_msg(found && rej == 1, "result_budget_rejected_total %g (want 1):\n%.3000s", rej, m);
	free(m);
	/* the first answer is sent: its reservation is back */
	v1(&s, big, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "slept\n"), "%.300s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: protocol correctness and a log that never blocks (issue 31) -------------- */

/* Reads from fd into *buf (at *len, grown) until want(buf, len) or ms pass
 * or the peer closes; true when want said so. */
static bool raw_read_until(int fd, char **buf, size_t *len, size_t *cap, long ms,
			   bool (*want)(const char *buf, size_t len))
{
	long t0 = harness_now_ms();
	while (!want(*buf, *len)) {
		long left = ms - (harness_now_ms() - t0);
		if (left <= 0)
			return false;
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, (int)(left > 100 ? 100 : left)) <= 0)
			continue;
		if (*len + 4097 > *cap) {
			*cap = *cap * 2 + 8192;
			*buf = realloc(*buf, *cap);
			ck_assert_ptr_nonnull(*buf);
		}
		ssize_t got = recv(fd, *buf + *len, 4096, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return want(*buf, *len);
		*len += (size_t)got;
		(*buf)[*len] = '\0';
	}
	return true;
}

static bool has_head(const char *buf, size_t len)
{
	return len && memmem(buf, len, "\r\n\r\n", 4);
}

static bool never(const char *buf, size_t len)
{
	(void)buf;
	(void)len;
	return false;
}

/* The value of header name in the head at h (up to its blank line), or -1. */
static long head_number(const char *h, const char *name)
{
	const char *end = strstr(h, "\r\n\r\n");
	size_t nl = strlen(name);
	for (const char *l = strstr(h, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, name, nl) && l[2 + nl] == ':')
			return strtol(l + 3 + nl, NULL, 10);
	return -1;
}

static bool head_has(const char *h, const char *name)
{
	const char *end = strstr(h, "\r\n\r\n");
	size_t nl = strlen(name);
	for (const char *l = strstr(h, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, name, nl) && l[2 + nl] == ':')
			return true;
	return false;
}

/* "POST path" with a JSON body, raw; close: ask the server to close after. */
static char *raw_post_text(const struct server *s, const char *path, const char *body, bool close)
{
	char *q = NULL;
	ck_assert_int_ge(asprintf(&q, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
				  "Content-Length: %zu\r\n%s\r\n%s",
				  path, strlen(body), close ? "Connection: close\r\n" : "", body),
			 0);
	(void)s;
	return q;
}

/* A handler that answers 304, 204 or 205 (with a body it must not send),
 * then an ordinary request on the same keep-alive connection: the first
 * response ends at its head (205: Content-Length 0), no framing or body
 * follows it, and the second response starts right after and parses
 * cleanly. Before, 304 got "Transfer-Encoding: chunked" and a "0\r\n\r\n"
 * the client reads as the start of the next response, and 205 its body. A
 * 1xx from a handler is refused (500, the error names the range). */
START_TEST(handler_bodyless_status)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	static const int statuses[] = { 304, 204, 205 };
	for (size_t k = 0; k < sizeof statuses / sizeof statuses[0]; k++) {
		int st = statuses[k];
		char code[400];
		snprintf(code, sizeof code,
			 "from spin_sdk.http import Response\n"
			 "def handle_request(request):\n"
			 "    return Response(%d, {'etag': '\"v1\"', 'x-h': 'k'}, b'BODY-NOT-ALLOWED')\n",
			 st);
		char *env = envelope(code, NULL);
		char *q1 = raw_post_text(&s, "/py/h", env, false);
		char *env2 = envelope("print(6*7)", NULL);
		char *q2 = raw_post_text(&s, "/py/run", env2, true);
		int fd = raw_connect(&s);
		size_t len = 0, cap = 8192;
		char *buf = malloc(cap);
		ck_assert_ptr_nonnull(buf);
		buf[0] = '\0';
		ck_assert(raw_send(fd, q1, strlen(q1)));
		ck_assert_msg(raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(60000), has_head),
			      "%d: no response head: [%.600s]", st, buf);
		/* whatever else comes for the first request (there must be nothing) */
		raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(500), never);
		ck_assert(raw_send(fd, q2, strlen(q2)));
		raw_read_until(fd, &buf, &len, &cap, harness_scale_ms(60000), never);
		close(fd);
		ck_assert_msg(raw_status(buf) == st, "%d: the first response: [%.600s]", st, buf);
		ck_assert_msg(head_has(buf, "x-h"),
			      "%d: the handler's header is not passed on: [%.600s]", st, buf);
		ck_assert_msg(!head_has(buf, "Transfer-Encoding"),
			      "%d: a body-less response with Transfer-Encoding: [%.600s]", st, buf);
		long cl = head_number(buf, "Content-Length");
		ck_assert_msg(cl <= 0, "%d: Content-Length %ld on a body-less response: [%.600s]", st,
			      cl, buf);
		if (st == 204)
			ck_assert_msg(cl < 0, "204 with a Content-Length: [%.600s]", buf);
		const char *second = strstr(buf, "\r\n\r\n") + 4;
		ck_assert_msg(!strstr(buf, "BODY-NOT-ALLOWED"), "%d: the handler's body was sent: [%.900s]",
			      st, buf);
		ck_assert_msg(raw_status(second) == 200,
			      "%d: the next response on the connection does not start right after "
			      "the first one's head (a client or proxy reads garbage): [%.900s]",
			      st, buf);
		const char *body2 = strstr(second, "\r\n\r\n");
		long cl2 = head_number(second, "Content-Length");
		ck_assert_msg(body2 && cl2 > 0 && (long)strlen(body2 + 4) == cl2,
			      "%d: the second response does not parse (Content-Length %ld): [%.900s]",
			      st, cl2, second);
		cJSON *j = cJSON_Parse(body2 + 4);
		ck_assert_msg(j && jstr(j, "stdout") && !strcmp(jstr(j, "stdout"), "42\n"),
			      "%d: the second response's script result: [%.600s]", st, body2 + 4);
		cJSON_Delete(j);
		free(buf);
		free(q1);
		free(q2);
		free(env);
		free(env2);
	}
	/* the bodies dropped are counted */
	char *m = get_metrics(&s, NULL);
	int found = 0;
	double dropped = metric_sum(m, "moat_serve_handler_bodies_dropped_total", NULL, &found);
	ck_assert_msg(found == 1 && dropped == 3, "handler bodies dropped: %g (want 3):\n%.2000s",
		      dropped, m);
	free(m);
	/* 1xx is never a handler's final answer */
	struct resp r;
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(103, {'link': '</a>'}, b'')\n",
	       NULL, &r);
	ck_assert_msg(r.code == 500 && jstr(r.json, "error") && strstr(jstr(r.json, "error"), "200..599"),
		      "a handler's 103: HTTP %d %.600s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Every route of the router (enum serve_route: py, ts, v1_run, healthz,
 * metrics, kv, other), each with tenant material in its path, a header and
 * the body, successful and refused: the access log's path is the route's
 * template and no line holds the material. Before, DELETE /v1/kv/<id> put
 * the sandboxId in the log. */
START_TEST(access_log_every_route)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .token = true };
	server_start(&s, _i, &o);
	const char *auth = "Bearer " TOKEN;
	const char *idh[] = { "-H", "X-Sandbox-Id: TENANT_HDR_MARK", NULL };
	struct {
		const char *method, *path, *body, *auth;
		const char *const *extra;
		int status;
	} reqs[] = {
		{ "POST", "/py/TENANT_PY_MARK",
		  "{\"code\":\"print(1)\",\"sandboxId\":\"TENANT_HDR_MARK\"}", auth, idh, 200 },
		{ "POST", "/ts/TENANT_TS_MARK",
		  "{\"code\":\"export default { async fetch(r) { return new Response('x') } }\","
		  "\"sandboxId\":\"TENANT_TS_ID_MARK\"}", auth, NULL, 200 },
		{ "POST", "/v1/run", "{\"language\":\"python\",\"code\":\"print(2)\","
				      "\"sandboxId\":\"TENANT_V1_MARK\"}", auth, NULL, 200 },
		{ "DELETE", "/v1/kv/TENANT_KV_MARK", NULL, auth, NULL, 200 },
		{ "DELETE", "/v1/kv/TENANT_KV_BAD_MARK", NULL, auth, idh, 400 },
		{ "DELETE", "/v1/kv/TENANT_KV_NUL_MARK%00x", NULL, auth, NULL, 400 },
		{ "DELETE", "/v1/kv/TENANT_KV_401_MARK", NULL, "Bearer WRONG", NULL, 401 },
		{ "POST", "/v1/kv/TENANT_KV_405_MARK", "{}", auth, NULL, 405 },
		{ "GET", "/healthz", NULL, NULL, idh, 200 },
		{ "GET", "/metrics", NULL, auth, idh, 200 },
		{ "GET", "/TENANT_OTHER_MARK", NULL, NULL, NULL, 404 },
		{ "TENANT_METHOD", "/healthz", NULL, NULL, NULL, 405 },
	};
	struct resp r;
	char wrong[2048] = ""; /* statuses are checked after the log */
	for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
		struct req q = { .method = reqs[i].method, .path = reqs[i].path, .body = reqs[i].body,
				 .auth = reqs[i].auth, .extra = reqs[i].extra };
		call(&s, &q, &r);
		if (r.code != reqs[i].status)
			snprintf(wrong + strlen(wrong), sizeof wrong - strlen(wrong),
				 "%s %s: HTTP %d (want %d) %.200s\n", reqs[i].method, reqs[i].path,
				 r.code, reqs[i].status, r.body);
		resp_free(&r);
	}
	char kids[4096];
	ck_assert_int_eq(server_children_gone(&s, harness_scale_ms(10000), kids, sizeof kids), 0);
	ck_assert_int_eq(server_term(&s, harness_scale_ms(15000), NULL), 0);
	char *log = server_log(&s);
	ck_assert_msg(!strstr(log, "TENANT_"), "the log holds a tenant's material:\n%.3000s", log);
	cJSON *lines = access_lines(&s);
	static const char *const known_routes[][2] = {
		{ "py", "/py/{path}" },     { "ts", "/ts/{path}" },   { "v1_run", "/v1/run" },
		{ "kv", "/v1/kv/{id}" },   { "healthz", "/healthz" }, { "metrics", "/metrics" },
		{ "other", "/{unknown}" },
	};
	const cJSON *l;
	cJSON_ArrayForEach(l, lines)
	{
		const char *route = jstr(l, "route"), *path = jstr(l, "path");
		size_t k = 0;
		while (k < sizeof known_routes / sizeof known_routes[0] && strcmp(known_routes[k][0], route))
			k++;
		ck_assert_msg(k < sizeof known_routes / sizeof known_routes[0],
			      "a route this test does not know (add it above): %s", route);
		ck_assert_msg(!strcmp(path, known_routes[k][1]), "route %s logged with path %s (want %s)",
			      route, path, known_routes[k][1]);
	}
	for (size_t k = 0; k < sizeof known_routes / sizeof known_routes[0]; k++)
		ck_assert_msg(access_find(lines, "route", known_routes[k][0]),
			      "no access line of route %s:\n%.3000s", known_routes[k][0], log);
	int kv = 0;
	cJSON_ArrayForEach(l, lines) kv += !strcmp(jstr(l, "route"), "kv");
	ck_assert_msg(kv == 5, "%d access lines of route kv (want 5):\n%.3000s", kv, log);
	ck_assert_msg(!wrong[0], "%s", wrong);
	cJSON_Delete(lines);
	free(log);
	server_cleanup(&s);
}
END_TEST

/* One raw GET, Connection: close; true when a complete answer came within
 * ms (into *status). */
static bool raw_get(const struct server *s, const char *path, long ms, int *status, char **body)
{
	int fd = raw_connect(s);
	char q[256];
	snprintf(q, sizeof q, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	bool ok = raw_send(fd, q, strlen(q));
	bool closed = false;
	char *resp = ok ? raw_read(fd, ms, &closed, NULL) : NULL;
	close(fd);
	ok = ok && closed;
	*status = ok ? raw_status(resp) : 0;
	if (body)
		*body = resp;
	else
		free(resp);
	return ok;
}

/* Reads what the pipe has for up to ms; appends to *all (NULL: dropped);
 * stops early when *all holds stop_at. */
static void pipe_drain(int fd, char **all, size_t *len, long ms, const char *stop_at)
{
	long t0 = harness_now_ms();
	char buf[65536];
	while (harness_now_ms() - t0 < ms) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 50) <= 0)
			continue;
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		if (all) {
			*all = realloc(*all, *len + (size_t)n + 1);
			ck_assert_ptr_nonnull(*all);
			memcpy(*all + *len, buf, (size_t)n);
			*len += (size_t)n;
			(*all)[*len] = '\0';
			if (stop_at && strstr(*all, stop_at))
				break;
		}
	}
}

/* The server's log (stderr; with --json-log stdout) is a pipe nobody reads:
 * once it is full, requests, runs and /healthz still answer within a
 * deadline, the lines that do not fit are dropped and counted in /metrics,
 * and once the reader is back the lines flow again (the first says how
 * many were lost). Before, every request thread blocked in the log's
 * write and the whole service stopped answering. */
static void log_stall_in(int mode, bool json)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	/* the smallest pipe: full after ~20 lines */
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	const char *jargs[] = { "--json-log", NULL };
	struct server s;
	struct server_opts o = { .socket = mode == MODE_ROOTLESS, .args = json ? jargs : NULL,
				 .log_pipe = &p[1] };
	server_spawn(&s, mode, &o);
	close(p[1]);
	/* ready: the pipe is read until the server listens */
	char *seen = NULL;
	size_t seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "listening on ");
	ck_assert_msg(seen && strstr(seen, "listening on "), "%s%s: no listening line: %.1000s",
		      MODE_NAME[mode], json ? " json" : "", seen ? seen : "");
	server_wait_ready(&s);
	/* nobody reads from here on: past the pipe (4 KiB) and the service's
	 * queue (1 MiB, ~6000 lines of /healthz), lines are dropped */
	long each = harness_scale_ms(5000);
	double dropped = 0;
	int n = 0, st = 0;
	for (; n < 20000 && dropped == 0; n++) {
		ck_assert_msg(raw_get(&s, "/healthz", each, &st, NULL) && st == 200,
			      "%s%s: /healthz did not answer within %ld ms while the log's reader "
			      "stalls (request %d, HTTP %d)",
			      MODE_NAME[mode], json ? " json" : "", each, n + 1, st);
		if (n % 1000 == 999) {
			char *m = NULL;
			ck_assert_msg(raw_get(&s, "/metrics", each, &st, &m) && st == 200,
				      "%s: /metrics did not answer while the log stalls", MODE_NAME[mode]);
			int found = 0;
			dropped = metric_sum(strstr(m, "\r\n\r\n"), "moat_serve_log_lines_dropped_total",
					     NULL, &found);
			ck_assert_msg(found == 1, "no moat_serve_log_lines_dropped_total: %.2000s", m);
			free(m);
		}
	}
	ck_assert_msg(dropped > 0, "%s%s: %d requests and no log line dropped", MODE_NAME[mode],
		      json ? " json" : "", n);
	/* runs too */
	struct resp r;
	run_py(&s, "print(6*7)", NULL, &r);
	expect_script("a run while the log stalls", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "42\n");
	resp_free(&r);
	/* the reader is back: the queue drains, the loss is said, new lines come */
	free(seen);
	seen = NULL;
	seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "log line(s) dropped");
	ck_assert_msg(seen && strstr(seen, "log line(s) dropped"),
		      "%s%s: no line says how many were dropped (%zu bytes read)", MODE_NAME[mode],
		      json ? " json" : "", seen_len);
	free(seen);
	seen = NULL;
	seen_len = 0;
	ck_assert(raw_get(&s, "/no-such-route", each, &st, NULL) && st == 404);
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(10000), "\"route\":\"other\"");
	ck_assert_msg(seen && strstr(seen, "\"route\":\"other\""),
		      "%s%s: a request after the reader came back was not logged: %.1000s",
		      MODE_NAME[mode], json ? " json" : "", seen ? seen : "");
	free(seen);
	/* the stop's lines go to the pipe too: read them so that it is quick */
	ck_assert_int_eq(kill(s.p.pid, SIGTERM), 0);
	seen = NULL;
	seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(15000), "stopped");
	free(seen);
	ck_assert_int_eq(server_wait_exit(&s, harness_scale_ms(15000)), 0);
	close(p[0]);
	server_cleanup(&s);
}

START_TEST(log_reader_stalls)
{
	HARNESS_MODE_GUARD(_i);
	log_stall_in(_i, false);
	log_stall_in(_i, true);
}
END_TEST

/* A reader that never comes back does not hold the stop: SIGTERM ends the
 * server with status 0 within --grace (1 s) + the log's 2 s + margin. */
START_TEST(log_reader_gone_stop)
{
	HARNESS_MODE_GUARD(_i);
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	const char *a[] = { "--grace", "1", NULL };
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS, .args = a, .log_pipe = &p[1] };
	server_spawn(&s, _i, &o);
	close(p[1]);
	char *seen = NULL;
	size_t seen_len = 0;
	pipe_drain(p[0], &seen, &seen_len, harness_scale_ms(20000), "listening on ");
	free(seen);
	server_wait_ready(&s);
	int st;
	for (int n = 0; n < 200; n++)
		ck_assert(raw_get(&s, "/healthz", harness_scale_ms(5000), &st, NULL) && st == 200);
	long took;
	st = server_term(&s, harness_scale_ms(10000), &took);
	ck_assert_msg(st == 0, "%s: status %d after SIGTERM with the log's reader gone (-1: no exit "
		      "within %ld ms)", MODE_NAME[_i], st, harness_scale_ms(10000));
	close(p[0]);
	server_cleanup(&s);
}
END_TEST

/* The relay cap across runs (--max-relays 1): while one relayed connection
 * of a run holds the service's only slot (a proxy connection that has not
 * sent its head yet), a second through the proxy gets 503 and one through
 * the transparent relay a reset, each logged in the run's network log;
 * /metrics counts both and shows every slot given back after the run. Bad
 * values of the flags and of the config keys refuse to start. */
static const char PY_CAP[] =
	"import socket, time\n"
	"hold = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
	"time.sleep(0.5)\n"
	"b = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
	"d = b''\n"
	"try:\n"
	"    while True:\n"
	"        x = b.recv(4096)\n"
	"        if not x: break\n"
	"        d += x\n"
	"except OSError as e: d += ('error %s' % e).encode()\n"
	"full = b\"X-Moat-Refused: the service's relay cap is full\" in d\n"
	"print('proxy:%s:%s' % (d.split(b'\\r\\n')[0].decode('latin1'), 'full' if full else '-'))\n"
	"t = socket.socket()\n"
	"t.settimeout(10)\n"
	"try:\n"
	"    t.connect(('11.1.1.1', 443))\n"
	"    print('tcp:eof' if not t.recv(10) else 'tcp:data')\n"
	"except ConnectionResetError: print('tcp:reset')\n"
	"except OSError as e: print('tcp:error %s' % e)\n"
	"hold.close()\n";

START_TEST(relay_cap_across_runs)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	char *log;
	static const char *const bad[][3] = {
		{ "--max-relays", "0", "--max-relays wants a number from 1 to 1048576" },
		{ "--max-dns", "65537", "--max-dns wants a number from 1 to 65536" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *a[] = { bad[i][0], bad[i][1], NULL };
		struct server_opts ob = { .socket = true, .args = a };
		int st = refused_start(_i, &ob, &s, &log);
		ck_assert_msg(st == 2 && strstr(log, bad[i][2]), "%s %s: status %d (want 2): %s",
			      bad[i][0], bad[i][1], st, log);
		free(log);
		server_cleanup(&s);
	}
	struct server_opts oc = { .socket = true, .config = "{\"serve\":{\"maxDns\":0}}" };
	int st = refused_start(_i, &oc, &s, &log);
	ck_assert_msg(st != 0 && st != -1 && strstr(log, "serve.maxDns must be"),
		      "serve.maxDns 0: status %d: %s", st, log);
	free(log);
	server_cleanup(&s);

	const char *args[] = { "--max-relays", "1", NULL };
	struct server_opts o = { .socket = true, .args = args };
	server_start(&s, _i, &o);
	char *q = harness_json_quote(PY_CAP);
	char *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"python\",\"timeout\":30000,\"code\":%s,"
				  "\"allowedHosts\":[\"https://example.com\"]}", q), 0);
	free(q);
	struct resp r;
	post(&s, "/v1/run", body, &r);
	free(body);
	const char *out = jstr(r.json, "stdout");
	ck_assert_msg(r.code == 200 && out, "HTTP %d %.2000s", r.code, r.body);
	ck_assert_msg(strstr(out, "proxy:HTTP/1.1 503 Service Unavailable:full\n"),
		      "the second proxy connection was not refused for the service's cap: %s / %s", out,
		      jstr(r.json, "stderr"));
	ck_assert_msg(strstr(out, "tcp:reset\n"), "the transparent connection was not reset: %s",
		      out);
	int capped_proxy = 0, capped_tcp = 0;
	const cJSON *c, *conns = jget(jget(r.json, "network"), "connections");
	cJSON_ArrayForEach(c, conns) {
		const char *why = jstr(c, "reason"), *kind = jstr(c, "kind");
		if (!why || !kind || strcmp(why, "the service's relay cap is full") ||
		    !cJSON_IsFalse(jget(c, "allowed")))
			continue;
		capped_proxy += !strcmp(kind, "proxy");
		capped_tcp += !strcmp(kind, "tcp") && jstr(c, "host") &&
			      !strcmp(jstr(c, "host"), "11.1.1.1") && jnum(c, "port") == 443;
	}
	ck_assert_msg(capped_proxy == 1 && capped_tcp == 1,
		      "%d proxy and %d tcp entries say the cap was full (want 1 and 1): %.3000s",
		      capped_proxy, capped_tcp, r.body);
	resp_free(&r);
	struct req mq = { .path = "/metrics" };
	call(&s, &mq, &r);
	ck_assert_msg(r.code == 200, "/metrics: HTTP %d", r.code);
	int found = 0;
	double v = metric_sum(r.body, "moat_serve_relay_refused_total", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 2, "refused_total{tcp} %g (%d samples), want 2:\n%.3000s", v,
		      found, r.body);
	v = metric_sum(r.body, "moat_serve_relay_refused_total", "kind=\"dns\"", &found);
	ck_assert_msg(found == 1 && v == 0, "refused_total{dns} %g, want 0", v);
	v = metric_sum(r.body, "moat_serve_relay_limit", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 1, "relay_limit{tcp} %g, want 1 (--max-relays)", v);
	v = metric_sum(r.body, "moat_serve_relay_limit", "kind=\"dns\"", &found);
	ck_assert_msg(found == 1 && v == 256, "relay_limit{dns} %g, want the default 256", v);
	/* the run is over: every slot given back (the holder too) */
	v = metric_sum(r.body, "moat_serve_relays", "kind=\"tcp\"", &found);
	ck_assert_msg(found == 1 && v == 0, "relays{tcp} %g after the run, want 0", v);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- after kill -9: the cgroup leaves it left (issue 51) ---------------------------- */

/* The test process moves into cgroups of its own in each hierarchy moat uses
 * (root): the servers it starts (and moat doctor) take their leaves' parents
 * from there, so no other moat on the host, whose own sweep would remove a
 * dead server's leaves as well, shares those parents. */
#define CG_HIER 5
static const char *const cg_hier[CG_HIER] = { "memory", "pids", "cpu", "cpuacct", "unified" };
struct cg_box {
	char *orig[CG_HIER], *mine[CG_HIER];
};

static void cg_join(const char *dir, pid_t pid)
{
	char f[600], v[24];
	snprintf(f, sizeof f, "%s/cgroup.procs", dir);
	snprintf(v, sizeof v, "%ld", (long)pid);
	int fd = open(f, O_WRONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0 && write(fd, v, strlen(v)) == (ssize_t)strlen(v), "join %s: %s", f,
		      strerror(errno));
	close(fd);
}

static void cg_box_enter(struct cg_box *b)
{
	memset(b, 0, sizeof *b);
	for (int i = 0; i < CG_HIER; i++) {
		if (!(b->orig[i] = cg_own_dir(cg_hier[i])))
			continue;
		ck_assert_int_ge(asprintf(&b->mine[i], "%s/t51-%ld", b->orig[i], (long)getpid()), 0);
		/* cpu and cpuacct co-mounted: one directory, EEXIST the second time */
		ck_assert_msg(mkdir(b->mine[i], 0755) == 0 || errno == EEXIST, "mkdir %s: %s",
			      b->mine[i], strerror(errno));
		cg_join(b->mine[i], getpid());
	}
}

/* Back where it was; the box and whatever moat left in it removed. */
static void cg_box_leave(struct cg_box *b)
{
	for (int i = 0; i < CG_HIER; i++) {
		if (!b->mine[i])
			continue;
		cg_join(b->orig[i], getpid());
		DIR *d = opendir(b->mine[i]);
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (!strncmp(e->d_name, "moat-", 5)) {
				char leaf[800];
				snprintf(leaf, sizeof leaf, "%s/%s", b->mine[i], e->d_name);
				rmdir(leaf);
			}
		if (d)
			closedir(d);
		rmdir(b->mine[i]);
		free(b->mine[i]);
		free(b->orig[i]);
	}
}

/* A service with a pool of 2 that answered three requests, killed with -9:
 * its pid; *leaves, where: what it left. *cg: its runs' memory limit was a
 * cgroup's. */
static pid_t serve_and_kill(int mode, int *leaves, char *where, size_t size, bool *cg)
{
	struct server s;
	server_start(&s, mode, &(struct server_opts){ .pool = 2 });
	for (int i = 0; i < 3; i++) {
		struct resp r;
		v1(&s, "{\"code\":\"print(6 * 7)\"}", &r);
		ck_assert_str_eq(jstr(r.json, "stdout"), "42\n");
		const char *m = jstr(jget(r.json, "limits"), "memory");
		*cg = m && !strncmp(m, "cgroup", 6);
		resp_free(&r);
	}
	pid_t pid = s.p.pid;
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	server_wait_exit(&s, harness_scale_ms(10000));
	server_cleanup(&s);
	*leaves = cg_leaves_of(pid, where, size);
	return pid;
}

/* The leaves a killed service left are removed by the next one when it
 * starts, before any run of its own (--pool 0), and moat doctor names them
 * (how many, in which hierarchies) before that. */
START_TEST(crash_leaves_swept)
{
	bool root = _i == MODE_ROOT;
	struct cg_box box;
	if (root)
		cg_box_enter(&box);
	char where_a[128] = "", where_d[128] = "", left_where[128] = "";
	bool cg = false;
	int leaves_a = 0, leaves_d = 0;
	pid_t a = serve_and_kill(_i, &leaves_a, where_a, sizeof where_a, &cg);
	if (!root && leaves_a == 0) {
		ck_assert_msg(!cg, "rootless: cgroup limits but no leaf seen");
		harness_skip("rootless: moat makes no cgroup leaves on this host (the cgroups it "
			     "runs in are root's and not delegated; its limits are rlimits), so a "
			     "killed rootless service leaves none");
		return;
	}
	if (root)
		ck_assert_msg(leaves_a > 0, "root: the killed service left no leaf: the test proves "
			      "nothing");
	/* a new service, without any run: the dead one's leaves go */
	struct server c;
	server_start(&c, _i, &(struct server_opts){ .pool = 0 });
	int left = leaves_a;
	long t0 = harness_now_ms();
	while ((left = cg_leaves_of(a, left_where, sizeof left_where)) > 0 &&
	       harness_now_ms() - t0 < harness_scale_ms(5000))
		harness_sleep_ms(100);
	long took = harness_now_ms() - t0;
	/* the service's notice reaches its log after the removals, through the
	 * log's own writer: a quiet host can see the leaves gone before the
	 * line is in the file */
	bool logged = false;
	long t1 = harness_now_ms();
	for (;;) {
		char *log = server_log(&c);
		logged = strstr(log, "cgroup leaves left by moats no longer running") != NULL;
		free(log);
		if (logged || harness_now_ms() - t1 >= harness_scale_ms(3000))
			break;
		harness_sleep_ms(50);
	}
	server_stop(&c);
	/* moat doctor names what a killed service left */
	pid_t d = serve_and_kill(_i, &leaves_d, where_d, sizeof where_d, &cg);
	struct run_out o;
	harness_run(_i, (const char *const[]){ "doctor", NULL }, NULL, 0, &o);
	const char *line = strstr(o.out, "cgroup leftovers:");
	char named[512] = "";
	if (line)
		snprintf(named, sizeof named, "%.*s", (int)strcspn(line, "\n"), line);
	bool counted = line && strtol(line + strlen("cgroup leftovers:"), NULL, 10) >= 1;
	bool hier_named = counted;
	char wd[128];
	snprintf(wd, sizeof wd, "%s", where_d);
	for (char *sv = NULL, *h = strtok_r(wd, " ", &sv); h; h = strtok_r(NULL, " ", &sv))
		hier_named &= strstr(named, h) != NULL;
	harness_free(&o);
	int d_left = cg_leaves_of(d, NULL, 0);
	if (root)
		cg_box_leave(&box);
	ck_assert_msg(left == 0 && logged && leaves_d > 0 && hier_named,
		      "%s: the leaves of a service killed with -9 (pid %ld: %d in %s) %s %ld ms after "
		      "a new service started (%d left in %s; its log %s the sweep); moat doctor after "
		      "another (pid %ld: %d in %s; %d still there) says: \"%s\"",
		      MODE_NAME[_i], (long)a, leaves_a, where_a,
		      left ? "are still there" : "are gone", took, left, left_where,
		      logged ? "names" : "does not name", (long)d, leaves_d, where_d, d_left,
		      line ? named : "(no cgroup leftovers line)");
}
END_TEST

void serve_ops_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "ops");

	SERVE_ADD(tc, only, routes, SERVE_MODES);
	SERVE_ADD(tc, only, auth_token, SERVE_MODES);
	SERVE_ADD(tc, only, token_file_rules, SERVE_MODES);
	SERVE_ADD(tc, only, metrics, SERVE_MODES);
	SERVE_ADD(tc, only, relay_cap_across_runs, SERVE_MODES);
	SERVE_ADD(tc, only, access_log, SERVE_MODES);
	SERVE_ADD(tc, only, concurrency_queue, SERVE_MODES);
	SERVE_ADD(tc, only, client_disconnect, SERVE_MODES);
	SERVE_ADD(tc, only, sigterm_drains, SERVE_MODES);
	SERVE_ADD(tc, only, sigterm_grace_kills, SERVE_MODES);
	SERVE_ADD(tc, only, queue_is_first_come_first_served, SERVE_MODES);
	SERVE_ADD(tc, only, slowloris, SERVE_MODES);
	SERVE_ADD(tc, only, handler_late_failures, SERVE_MODES);
	SERVE_ADD(tc, only, sigint_stops, SERVE_MODES);
	SERVE_ADD(tc, only, ipv6_listener, SERVE_MODES);
	SERVE_ADD(tc, only, malformed_http, SERVE_MODES);
	SERVE_ADD(tc, only, connection_limit, SERVE_MODES);
	SERVE_ADD(tc, only, pod_readonly_json_log, SERVE_MODES);
	SERVE_ADD(tc, only, handler_slow_clients, SERVE_MODES);
	SERVE_ADD(tc, only, response_write_deadline, SERVE_MODES);
	SERVE_ADD(tc, only, max_output_bytes, SERVE_MODES);
	SERVE_ADD(tc, only, result_budget, SERVE_MODES);
	SERVE_ADD(tc, only, handler_bodyless_status, SERVE_MODES);
	SERVE_ADD(tc, only, access_log_every_route, SERVE_MODES);
	SERVE_ADD(tc, only, log_reader_stalls, SERVE_MODES);
	SERVE_ADD(tc, only, log_reader_gone_stop, SERVE_MODES);
	SERVE_ADD(tc, only, crash_leaves_swept, SERVE_MODES);
}
