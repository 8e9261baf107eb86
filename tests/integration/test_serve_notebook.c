/* Sessions as a notebook (issue 46; docs/SESSIONS.md): a step interrupted,
 * not killed, Jupyter's results and errors, !cmd and %pip, MemoryError in
 * the step, from the outside, as root and rootless (loop index = harness
 * mode). The serve_sessions suite's tcase session_notebook; its helpers
 * are test_serve_sessions.c's (ses_common.h). */
#include "serve_common.h"
#include "ses_common.h"
#include "skip.h"

#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* ---- interrupt, don't kill (issue 46) ---- */


/* A step that was interrupted and left the session live, with error name. */
static void expect_interrupted(const struct server *s, const struct resp *r, bool timed_out,
			       const char *name)
{
	ck_assert_msg(r->code == 200, "%s: HTTP %d %s", MODE_NAME[s->mode], r->code, r->body);
	const char *st = jstr(jget(r->json, "session"), "state");
	ck_assert_msg(st && !strcmp(st, "idle"), "%s: the session after an interrupted step: "
		      "%.2000s", MODE_NAME[s->mode], r->body);
	ck_assert_msg(cJSON_IsTrue(jget(r->json, "timedOut")) == timed_out,
		      "%s: timedOut: %.1500s", MODE_NAME[s->mode], r->body);
	ck_assert_msg(!jstr(r->json, "killedBy"), "%s: killedBy set: %.1500s",
		      MODE_NAME[s->mode], r->body);
	ck_assert_msg(cJSON_IsTrue(jget(r->json, "interrupted")), "%s: interrupted: %.1500s",
		      MODE_NAME[s->mode], r->body);
	ck_assert_msg(!strcmp(err_name(r), name), "%s: error %s (want %s): %.1500s",
		      MODE_NAME[s->mode], err_name(r), name, r->body);
}

/* A step whose value must be want. */
static void expect_value(struct server *s, const char *id, const char *code, const char *want)
{
	struct resp r;
	ses_run(s, id, code, NULL, &r);
	const char *v = jstr(r.json, "value");
	ck_assert_msg(r.code == 200 && v && !strcmp(v, want), "%s: %s: want %s: %.1500s",
		      MODE_NAME[s->mode], code, want, r.body);
	resp_free(&r);
}

START_TEST(ses_interrupt_timeout)
{
	struct server s;
	char *id;
	if (!ses_start(&s, _i, "{\"language\":\"python\"}", &id))
		return;
	free(ses_ok(&s, id, "x = 41\nimport time"));
	struct resp r;
	/* in time.sleep (a blocking call) and in a busy loop: KeyboardInterrupt */
	static const char *const steps[] = { "time.sleep(60)", "while True: x = 41" };
	for (int k = 0; k < 2; k++) {
		ses_run(&s, id, steps[k], ",\"timeout\":1000", &r);
		expect_interrupted(&s, &r, true, "KeyboardInterrupt");
		const cJSON *tb = jget(jget(r.json, "error"), "traceback");
		ck_assert_msg(cJSON_IsArray(tb) && cJSON_GetArraySize(tb) >= 2,
			      "%s: traceback: %.1500s", MODE_NAME[_i], r.body);
		resp_free(&r);
	}
	/* the state of before is there */
	expect_value(&s, id, "x + 1", "42");
	/* one that ignores SIGINT is killed after the grace, and the 410 says so */
	ses_run(&s, id, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
		"while True: pass", ",\"timeout\":500", &r);
	ck_assert_msg(r.code == 200 && cJSON_IsTrue(jget(r.json, "timedOut")),
		      "%s: %.1500s", MODE_NAME[_i], r.body);
	ck_assert_str_eq(jstr(jget(r.json, "session"), "state"), "killed");
	ck_assert_msg(r.ms >= 2000, "%s: killed after %ld ms, before the 2 s grace",
		      MODE_NAME[_i], r.ms);
	resp_free(&r);
	expect_gone(&s, id, "did not stop within 2000 ms of the interrupt");
	free(id);
	/* node: a busy loop (vm's breakOnSigint) and an awaited promise */
	if (!have_js_driver()) {
		server_stop(&s);
		return;
	}
	id = ses_try_create(&s, "{\"language\":\"javascript\"}", NULL, NULL);
	ck_assert_ptr_nonnull(id);
	free(ses_ok(&s, id, "var k = 7"));
	static const char *const js[] = { "while (true) {}",
					  "await new Promise((r) => setTimeout(r, 60000))" };
	for (int k = 0; k < 2; k++) {
		ses_run(&s, id, js[k], ",\"timeout\":1000", &r);
		expect_interrupted(&s, &r, true, "Error");
		ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), "interrupted"),
			      "%s: %.1500s", MODE_NAME[_i], r.body);
		resp_free(&r);
	}
	expect_value(&s, id, "k * 6", "42");
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* POST /v1/sessions/{id}/interrupt, and a streaming client that hangs up */
START_TEST(ses_interrupt_asked)
{
	struct server s;
	char *id;
	if (!ses_start(&s, _i, "{\"language\":\"python\"}", &id))
		return;
	free(ses_ok(&s, id, "n = 0"));
	char path[128];
	snprintf(path, sizeof path, "/v1/sessions/%s/interrupt", id);
	struct resp r;
	/* nothing runs: nothing to interrupt */
	post(&s, path, "", &r);
	ck_assert_msg(r.code == 200 && cJSON_IsFalse(jget(r.json, "interrupted")),
		      "%s: an idle session's interrupt: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	struct call c;
	ses_run_start(&s, id, "{\"code\":\"while True: n += 1\",\"timeout\":60000}", &c);
	/* asked until the step runs (its start may take a while here) */
	long t0 = harness_now_ms();
	bool asked = false;
	while (!asked) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(30000),
			      "%s: the step never ran", MODE_NAME[_i]);
		harness_sleep_ms(300);
		post(&s, path, "", &r);
		ck_assert_msg(r.code == 200, "%s: interrupt: %d %s", MODE_NAME[_i], r.code, r.body);
		asked = cJSON_IsTrue(jget(r.json, "interrupted"));
		resp_free(&r);
	}
	call_finish(&c, &r);
	expect_interrupted(&s, &r, false, "KeyboardInterrupt");
	resp_free(&r);
	expect_value(&s, id, "n > 0", "True");
	/* a streaming client that hangs up: the step is interrupted, the
	 * session kept */
	static const char *const accept[] = { "-H", "Accept: application/x-ndjson", NULL };
	snprintf(path, sizeof path, "/v1/sessions/%s/run", id);
	struct req q = { .path = path, .extra = accept, .max_ms = 1500,
			 .body = "{\"code\":\"m = 5\\nimport time\\ntime.sleep(60)\\nm = 6\","
				 "\"timeout\":60000}" };
	call(&s, &q, &r);
	resp_free(&r);
	t0 = harness_now_ms();
	for (;;) {
		ses_run(&s, id, "m", NULL, &r);
		if (r.code != 409)
			break;
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(15000),
			      "%s: the step goes on after its client hung up", MODE_NAME[_i]);
		resp_free(&r);
		harness_sleep_ms(200);
	}
	ck_assert_msg(r.code == 200 && jstr(r.json, "value") && !strcmp(jstr(r.json, "value"), "5"),
		      "%s: after a hang-up: %.1500s", MODE_NAME[_i], r.body);
	resp_free(&r);
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- results as Jupyter has them (issue 46) ---- */

/* The data of results[i], and its isMain. */
static const cJSON *result_data(const struct resp *r, int i, bool *main)
{
	const cJSON *it = cJSON_GetArrayItem(jget(r->json, "results"), i);
	ck_assert_msg(it, "no results[%d]: %.2000s", i, r->body);
	*main = cJSON_IsTrue(jget(it, "isMain"));
	return jget(it, "data");
}

START_TEST(ses_rich_results)
{
	struct server s;
	char *id;
	if (!ses_start(&s, _i, "{\"language\":\"python\"}", &id))
		return;
	struct resp r;
	bool main;
	ses_run(&s, id,
		"class H:\n"
		"    def _repr_html_(self): return '<b>h</b>'\n"
		"    def _repr_markdown_(self): return '**h**'\n"
		"    def _repr_json_(self): return {'a': [1, 2]}\n"
		"    def _repr_png_(self): return b'\\x89PNG..'\n"
		"    def __repr__(self): return 'H()'\n"
		"display(H(), 'two')\n"
		"40 + 2",
		NULL, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "exitCode") == 0, "%s: %.2000s",
		      MODE_NAME[_i], r.body);
	ck_assert_msg(cJSON_GetArraySize(jget(r.json, "results")) == 3, "%s: results: %.2000s",
		      MODE_NAME[_i], r.body);
	const cJSON *d = result_data(&r, 0, &main);
	ck_assert(!main);
	ck_assert_str_eq(jstr(d, "text/html"), "<b>h</b>");
	ck_assert_str_eq(jstr(d, "text/markdown"), "**h**");
	ck_assert_str_eq(jstr(d, "text/plain"), "H()");
	ck_assert_str_eq(jstr(d, "image/png"), "iVBORy4u");
	ck_assert_int_eq(cJSON_GetArraySize(jget(jget(d, "application/json"), "a")), 2);
	d = result_data(&r, 1, &main);
	ck_assert(!main);
	ck_assert_str_eq(jstr(d, "text/plain"), "'two'");
	d = result_data(&r, 2, &main);
	ck_assert(main);
	ck_assert_str_eq(jstr(d, "text/plain"), "42");
	ck_assert_str_eq(jstr(r.json, "value"), "42"); /* kept for existing clients */
	ck_assert_int_eq((int)jnum(r.json, "executionCount"), 1);
	ck_assert(cJSON_IsFalse(jget(r.json, "resultsTruncated")));
	resp_free(&r);
	/* an error as Jupyter gives it, type and message kept */
	ses_run(&s, id, "def f():\n    raise ValueError('bad v')\nf()", NULL, &r);
	const cJSON *e = jget(r.json, "error");
	ck_assert_msg(jstr(e, "name") && !strcmp(jstr(e, "name"), "ValueError") &&
		      jstr(e, "value") && !strcmp(jstr(e, "value"), "bad v"),
		      "%s: error: %.2000s", MODE_NAME[_i], r.body);
	ck_assert_str_eq(jstr(e, "type"), "ValueError");
	ck_assert_str_eq(jstr(e, "message"), "bad v");
	const cJSON *tb = jget(e, "traceback");
	ck_assert_msg(cJSON_IsArray(tb) && cJSON_GetArraySize(tb) >= 4, "%s: %.2000s",
		      MODE_NAME[_i], r.body);
	bool cell = false;
	const cJSON *l;
	cJSON_ArrayForEach(l, tb) {
		ck_assert_msg(cJSON_IsString(l) && !strchr(l->valuestring, '\n'), "a line: %s",
			      r.body);
		cell = cell || strstr(l->valuestring, "File \"<cell 2>\", line 2, in f");
		ck_assert_msg(!strstr(l->valuestring, "moat_session"), "the driver's frame: %s",
			      r.body);
	}
	ck_assert_msg(cell, "%s: no cell frame: %.2000s", MODE_NAME[_i], r.body);
	ck_assert_str_eq(cJSON_GetArrayItem(tb, cJSON_GetArraySize(tb) - 1)->valuestring,
			 "ValueError: bad v");
	ck_assert_int_eq((int)jnum(r.json, "executionCount"), 2);
	resp_free(&r);
	/* bounds: a result over 4 MiB a type is dropped, and said so */
	ses_run(&s, id, "class Big:\n    def _repr_html_(self): return 'x' * (5 << 20)\nBig()",
		NULL, &r);
	ck_assert_msg(r.code == 200 && cJSON_IsTrue(jget(r.json, "resultsTruncated")),
		      "%s: a 5 MiB html: %.500s", MODE_NAME[_i], r.body);
	d = result_data(&r, 0, &main);
	ck_assert(main && !jget(d, "text/html") && jstr(d, "text/plain"));
	resp_free(&r);
	ses_end(&s, id);
	free(id);
	if (!have_js_driver()) {
		server_stop(&s);
		return;
	}
	id = ses_try_create(&s, "{\"language\":\"javascript\"}", NULL, NULL);
	ck_assert_ptr_nonnull(id);
	ses_run(&s, id, "display.html('<i>j</i>'); display({ a: 1 }); 6 * 7", NULL, &r);
	ck_assert_msg(cJSON_GetArraySize(jget(r.json, "results")) == 3, "%s: node results: %.2000s",
		      MODE_NAME[_i], r.body);
	d = result_data(&r, 0, &main);
	ck_assert_str_eq(jstr(d, "text/html"), "<i>j</i>");
	d = result_data(&r, 1, &main);
	ck_assert_str_eq(jstr(d, "text/plain"), "{ a: 1 }");
	d = result_data(&r, 2, &main);
	ck_assert(main);
	ck_assert_str_eq(jstr(d, "text/plain"), "42");
	resp_free(&r);
	ses_run(&s, id, "function g() { throw new TypeError('tt'); }\ng()", NULL, &r);
	e = jget(r.json, "error");
	ck_assert_msg(jstr(e, "name") && !strcmp(jstr(e, "name"), "TypeError") &&
		      jstr(e, "value") && !strcmp(jstr(e, "value"), "tt"),
		      "%s: node error: %.2000s", MODE_NAME[_i], r.body);
	tb = jget(e, "traceback");
	ck_assert_msg(cJSON_IsArray(tb) && cJSON_GetArraySize(tb) >= 2, "%s: %.2000s",
		      MODE_NAME[_i], r.body);
	ck_assert_int_eq((int)jnum(r.json, "executionCount"), 2);
	resp_free(&r);
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* pandas' DataFrame as text/html, where the sandbox's Python has pandas */
START_TEST(ses_pandas_html)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){ .pool = 0 });
	struct resp r;
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"import pandas\"}", &r);
	bool have = r.code == 200 && jnum(r.json, "exitCode") == 0;
	resp_free(&r);
	if (!have) {
		server_stop(&s);
		harness_skip("pandas is not importable in a sandbox (python3-pandas)");
		return;
	}
	char *id;
	if (!ses_create(&s, "{\"language\":\"python\",\"memoryMb\":512}", &id))
		return;
	bool main;
	ses_run(&s, id, "import pandas as pd\npd.DataFrame({'a': [1, 2]})", NULL, &r);
	const cJSON *d = result_data(&r, 0, &main);
	ck_assert_msg(main && jstr(d, "text/html") && strstr(jstr(d, "text/html"), "<table"),
		      "%s: %.2000s", MODE_NAME[_i], r.body);
	resp_free(&r);
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- !cmd and %pip (issue 46) ---- */

START_TEST(ses_shell_escape)
{
	struct server s;
	char *id;
	if (!ses_start(&s, _i, "{\"language\":\"python\"}", &id))
		return;
	char *o = ses_ok(&s, id, "print('a')\n!echo from-sh-$((6 * 7))\nfor i in range(2):\n"
			 "    !echo loop\ns = \"\"\"\n!not a command\n\"\"\"\nprint(len(s))");
	ck_assert_msg(!strcmp(o, "a\nfrom-sh-42\nloop\nloop\n16\n"), "%s: !cmd: %s", MODE_NAME[_i],
		      o);
	free(o);
	static const char *const pip[] = { "%pip install requests", "!pip install requests" };
	for (int k = 0; k < 2; k++) {
		struct resp r;
		ses_run(&s, id, pip[k], NULL, &r);
		const char *v = jstr(jget(r.json, "error"), "value");
		ck_assert_msg(r.code == 200 && v && strstr(v, "docs/rootfs.md"), "%s: %s: %.1500s",
			      MODE_NAME[_i], pip[k], r.body);
		resp_free(&r);
	}
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- memory: MemoryError in the step; the OOM killer ends the session ---- */

START_TEST(ses_memory_error_oom)
{
	struct server s;
	char *id;
	if (!ses_start(&s, _i, "{\"language\":\"python\",\"memoryMb\":128}", &id))
		return;
	free(ses_ok(&s, id, "keep = 1"));
	struct resp r;
	/* past the limit in one allocation, and by growing: MemoryError, the
	 * session lives (the cgroup's and the rlimit's alike) */
	static const char *const grow[] = {
		"b = bytearray(300 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])",
		"l = []\nwhile True: l.append(bytearray(1 << 20))",
	};
	bool cg = false;
	for (int k = 0; k < 2; k++) {
		ses_run(&s, id, grow[k], NULL, &r);
		ck_assert_msg(r.code == 200 && !strcmp(err_name(&r), "MemoryError"),
			      "%s: %s: %.1500s", MODE_NAME[_i], grow[k], r.body);
		ck_assert_str_eq(jstr(jget(r.json, "session"), "state"), "idle");
		cg = cgroup_memory(&r);
		resp_free(&r);
		expect_value(&s, id, "l = b = None\nimport gc\ngc.collect()\nkeep", "1");
	}
	/* what only the kernel's OOM killer can act on (a child under its own
	 * rlimit, with what the interpreter holds, past the cgroup's): the
	 * session ends, the answer and the 410 say why; rootless has no cgroup */
	if (cg) {
		ses_run(&s, id,
			"import subprocess, sys\nh = bytearray(60 << 20)\n"
			"h[::4096] = b'x' * len(h[::4096])\n"
			"subprocess.run([sys.executable, '-c', 'b = bytearray(90 << 20)\\n"
			"b[::4096] = b\"x\" * len(b[::4096])\\nimport time\\ntime.sleep(5)'])\n"
			"import os\nos.kill(os.getpid(), 9)",
			NULL, &r);
		ck_assert_msg(r.code == 200, "%s: %.1500s", MODE_NAME[_i], r.body);
		const char *st = jstr(jget(r.json, "session"), "state");
		const char *kb = jstr(r.json, "killedBy");
		ck_assert_msg(st && !strcmp(st, "killed") && kb && !strcmp(kb, "oom"),
			      "%s: an OOM kill: %.1500s", MODE_NAME[_i], r.body);
		resp_free(&r);
		expect_gone(&s, id, "memory limit exceeded");
	} else {
		fprintf(stderr, "note: %s: no memory cgroup: the OOM-killer part of "
			"ses_memory_error_oom not run\n", MODE_NAME[_i]);
	}
	ses_end(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

void serve_sessions_notebook_tcase(Suite *s)
{
	/* a notebook inside (issue 46): its own case, to be run alone */
	TCase *tc = tcase_create("session_notebook");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, ses_interrupt_timeout, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ses_interrupt_asked, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ses_rich_results, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ses_pandas_html, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ses_shell_escape, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ses_memory_error_oom, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
}
