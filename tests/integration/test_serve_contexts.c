/* Code contexts in live sandboxes (docs/CONTEXTS.md): several interpreters
 * (Python, JavaScript) per sandbox, each with its own globals and working
 * directory, sharing the sandbox's files; a step's interrupt keeps the
 * context's state, a driver that does not stop is killed alone; a driver
 * that breaks the protocol is killed alone; streamed steps give result and
 * error events in the order they happened. Root and rootless (loop index =
 * harness mode); each test starts its own server and speaks curl. */
#include "serve_common.h"
#include "skip.h"

#define CTX_SKIP "live sandboxes are not built into this moat (runtime/bin/moat-agent)"

static void creq(struct server *s, const char *method, const char *path, const char *body,
		 struct resp *r)
{
	struct req q = { .method = method, .path = path, .body = body, .max_ms = 90000 };
	call(s, &q, r);
}

/* A server and a sandbox: its id into sid (128 bytes: a node's name may
 * be in it), false when skipped. */
static bool ctx_start(struct server *s, int mode, char *sid)
{
	server_start(s, mode, &(struct server_opts){ .pool = 0 });
	struct resp r;
	creq(s, "POST", "/v1/sandboxes", "{}", &r);
	if (r.code == 503 && strstr(r.body, "not built into this moat")) {
		resp_free(&r);
		server_stop(s);
		harness_skip(CTX_SKIP);
		return false;
	}
	ck_assert_msg(r.code == 201, "%s: POST /v1/sandboxes: %d %s", MODE_NAME[mode], r.code, r.body);
	snprintf(sid, 128, "%s", jstr(r.json, "id"));
	resp_free(&r);
	return true;
}

/* The sandbox deleted (nothing of it left), then the server stopped. */
static void ctx_stop(struct server *s, const char *sid)
{
	char p[320];
	snprintf(p, sizeof p, "/v1/sandboxes/%s", sid);
	struct resp r;
	creq(s, "DELETE", p, NULL, &r);
	ck_assert_msg(r.code == 200, "%s: DELETE: %d %s", MODE_NAME[s->mode], r.code, r.body);
	resp_free(&r);
	server_stop(s);
}

/* A new context: its id into cid (37 bytes). */
static void ctx_new(struct server *s, const char *sid, const char *body, char *cid)
{
	char p[320];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts", sid);
	struct resp r;
	creq(s, "POST", p, body, &r);
	ck_assert_msg(r.code == 201, "%s: POST %s %s: HTTP %d: %.2000s", MODE_NAME[s->mode], p, body,
		      r.code, r.body ? r.body : "");
	const char *id = jstr(r.json, "id");
	ck_assert_msg(id && strlen(id) == 36 && !strncmp(id, "ctx_", 4), "bad id in %s", r.body);
	ck_assert_str_eq(jstr(r.json, "state"), "idle");
	snprintf(cid, 37, "%s", id);
	resp_free(&r);
}

/* A step, answered whole: r holds the answer (200 asserted). */
static void ctx_exec(struct server *s, const char *sid, const char *cid, const char *code,
		     long timeout, struct resp *r)
{
	char p[320], body[8192];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, cid);
	char *q = harness_json_quote(code);
	if (timeout)
		snprintf(body, sizeof body, "{\"code\":%s,\"timeout\":%ld}", q, timeout);
	else
		snprintf(body, sizeof body, "{\"code\":%s}", q);
	free(q);
	creq(s, "POST", p, body, r);
	ck_assert_msg(r->code == 200 && r->json, "%s: execute %s: HTTP %d: %.2000s",
		      MODE_NAME[s->mode], code, r->code, r->body ? r->body : "");
}

/* The text/plain of the answer's main result, or NULL. */
static const char *main_text(const cJSON *answer)
{
	const cJSON *res = jget(answer, "results"), *it;
	cJSON_ArrayForEach(it, res)
		if (cJSON_IsTrue(jget(it, "isMain")))
			return jstr(jget(it, "data"), "text/plain");
	return NULL;
}

/* The step's main result is want (asserted), its answer freed. */
static void expect_value(struct server *s, const char *sid, const char *cid, const char *code,
			 const char *want)
{
	struct resp r;
	ctx_exec(s, sid, cid, code, 0, &r);
	const char *got = main_text(r.json);
	ck_assert_msg(got && !strcmp(got, want), "%s: %s gave %s, not %s: %.2000s",
		      MODE_NAME[s->mode], code, got ? got : "(no main result)", want, r.body);
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "%s: %s: an error: %s",
		      MODE_NAME[s->mode], code, r.body);
	resp_free(&r);
}

static const char *error_name(const cJSON *answer)
{
	return jstr(jget(answer, "error"), "name");
}

static const char *ctx_state(const cJSON *answer)
{
	return jstr(jget(answer, "context"), "state");
}

/* Python and node contexts in one sandbox: their own globals and working
 * directories, the sandbox's files shared; listed, deleted. */
START_TEST(ctx_globals_cwd_files)
{
	struct server s;
	char sid[128], a[40], b[40], js[40], p[320];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", a);
	ctx_new(&s, sid, "{\"language\":\"py\",\"cwd\":\"/sandbox\"}", b);
	ctx_new(&s, sid, "{\"language\":\"javascript\",\"cwd\":\"/tmp\"}", js);
	expect_value(&s, sid, a,
		     "import os\nx = 41\nos.chdir('/tmp')\n"
		     "open('/sandbox/shared.txt', 'w').write('hello')\nx + 1",
		     "42");
	/* b has globals of its own, and its own directory */
	struct resp r;
	ctx_exec(&s, sid, b, "x", 0, &r);
	ck_assert_msg(error_name(r.json) && !strcmp(error_name(r.json), "NameError"),
		      "%s: a global of another context is seen: %s", MODE_NAME[_i], r.body);
	ck_assert_int_eq((int)jnum(r.json, "executionCount"), 1);
	resp_free(&r);
	expect_value(&s, sid, b, "import os\nos.getcwd()", "'/sandbox'");
	expect_value(&s, sid, a, "os.getcwd()", "'/tmp'");
	expect_value(&s, sid, a, "x", "41");
	/* node: its cwd, the file python wrote, its own state */
	expect_value(&s, sid, js, "let y = 1; process.cwd()", "'/tmp'");
	expect_value(&s, sid, js, "require('fs').readFileSync('/sandbox/shared.txt', 'utf8')",
		     "'hello'");
	expect_value(&s, sid, js, "y + 1", "2");
	expect_value(&s, sid, js, "typeof x", "'undefined'");
	/* listed, oldest first */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts", sid);
	creq(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	const cJSON *list = jget(r.json, "contexts");
	ck_assert_int_eq(cJSON_GetArraySize(list), 3);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(list, 0), "id"), a);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(list, 2), "language"), "javascript");
	resp_free(&r);
	/* deleted: gone, the others live on */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s", sid, b);
	creq(&s, "DELETE", p, NULL, &r);
	ck_assert_msg(r.code == 200, "DELETE: %d %s", r.code, r.body);
	resp_free(&r);
	creq(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 404);
	resp_free(&r);
	expect_value(&s, sid, a, "x", "41");
	ctx_stop(&s, sid);
}
END_TEST

/* A step past its timeout is interrupted, not killed: the context's state
 * before it survives (python: KeyboardInterrupt in time.sleep; node: the
 * script interrupted); an explicit POST .../interrupt likewise. */
START_TEST(ctx_interrupt_keeps_state)
{
	struct server s;
	char sid[128], py[40], js[40];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	ctx_new(&s, sid, "{\"language\":\"javascript\"}", js);
	expect_value(&s, sid, py, "x = 7\nx", "7");
	expect_value(&s, sid, js, "var z = 7; z", "7");
	struct resp r;
	ctx_exec(&s, sid, py, "import time\ntime.sleep(60)", 1500, &r);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "timedOut")) && !cJSON_IsTrue(jget(r.json, "killed")) &&
		      error_name(r.json) && !strcmp(error_name(r.json), "KeyboardInterrupt") &&
		      !strcmp(ctx_state(r.json), "idle"),
		      "%s: python timeout: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	ctx_exec(&s, sid, js, "while (true) {}", 1500, &r);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "timedOut")) && !cJSON_IsTrue(jget(r.json, "killed")) &&
		      !cJSON_IsNull(jget(r.json, "error")) && !strcmp(ctx_state(r.json), "idle"),
		      "%s: node timeout: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	expect_value(&s, sid, py, "x + 1", "8");
	expect_value(&s, sid, js, "z + 1", "8");
	/* a client's interrupt */
	char p[320], body[256];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, py);
	snprintf(body, sizeof body, "{\"code\":\"import time\\ntime.sleep(60)\",\"timeout\":60000}");
	struct req q = { .method = "POST", .path = p, .body = body, .max_ms = 90000 };
	struct call c;
	call_start(&s, &q, &c);
	usleep(1500 * 1000);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/interrupt", sid, py);
	struct resp ir;
	creq(&s, "POST", p, "{}", &ir);
	ck_assert_msg(ir.code == 200 && cJSON_IsTrue(jget(ir.json, "interrupted")),
		      "%s: interrupt: %d %s", MODE_NAME[_i], ir.code, ir.body);
	resp_free(&ir);
	call_finish(&c, &r);
	ck_assert_msg(r.code == 200 && cJSON_IsTrue(jget(r.json, "interrupted")) &&
		      !cJSON_IsTrue(jget(r.json, "timedOut")) && jnum(r.json, "durationMs") < 30000 &&
		      error_name(r.json) && !strcmp(error_name(r.json), "KeyboardInterrupt"),
		      "%s: interrupted step: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	expect_value(&s, sid, py, "x", "7");
	ctx_stop(&s, sid);
}
END_TEST

/* A driver that ignores the interrupt is killed after the grace: that
 * context only (the answer says so); the sandbox and its other context
 * live on; a restart makes it new. */
START_TEST(ctx_killed_alone)
{
	struct server s;
	char sid[128], py[40], js[40], p[320];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	ctx_new(&s, sid, "{\"language\":\"javascript\"}", js);
	expect_value(&s, sid, js, "var k = 3; k", "3");
	struct resp r;
	ctx_exec(&s, sid, py,
		 "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
		 1000, &r);
	const char *reason = jstr(jget(r.json, "context"), "reason");
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "killed")) && cJSON_IsTrue(jget(r.json, "timedOut")) &&
		      !strcmp(ctx_state(r.json), "killed") && reason &&
		      strstr(reason, "did not stop within 2000 ms"),
		      "%s: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* not live: a step is refused, saying so */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, py);
	creq(&s, "POST", p, "{\"code\":\"1\"}", &r);
	ck_assert_msg(r.code == 409, "%s: a killed context ran a step: %d %s", MODE_NAME[_i], r.code,
		      r.body);
	resp_free(&r);
	expect_value(&s, sid, js, "k", "3");
	snprintf(p, sizeof p, "/v1/sandboxes/%s", sid);
	creq(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "running"), "%s: sandbox: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/restart", sid, py);
	creq(&s, "POST", p, "{}", &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "idle") &&
		      jnum(r.json, "executionCount") == 0,
		      "%s: restart: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	expect_value(&s, sid, py, "'x' in globals()", "False");
	ctx_stop(&s, sid);
}
END_TEST

/* The driver's control socket is the tenant's too (fd 3 of its process):
 * garbage on it kills that context ("protocol"), never the sandbox or
 * another context. */
START_TEST(ctx_protocol_breach)
{
	struct server s;
	char sid[128], py[40], other[128];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	ctx_new(&s, sid, "{\"language\":\"python\"}", other);
	expect_value(&s, sid, other, "v = 5\nv", "5");
	struct resp r;
	ctx_exec(&s, sid, py,
		 "import os, time\nos.write(3, b'MOATSESS1 99999999999\\n')\ntime.sleep(20)", 30000,
		 &r);
	const char *reason = jstr(jget(r.json, "context"), "reason");
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "killed")) && !strcmp(ctx_state(r.json), "killed") &&
		      reason && strstr(reason, "protocol") && jnum(r.json, "durationMs") < 15000,
		      "%s: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* a result frame out of bounds (no text/plain) likewise */
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	ctx_exec(&s, sid, py,
		 "import os, json, time\n"
		 "b = json.dumps({'type': 'result', 'seq': 1, 'result': {'isMain': False, "
		 "'data': {'text/evil': 'x'}}}).encode()\n"
		 "os.write(3, b'MOATSESS1 %d\\n' % len(b) + b)\ntime.sleep(20)",
		 30000, &r);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "killed")) && jnum(r.json, "durationMs") < 15000,
		      "%s: a bad result frame: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	expect_value(&s, sid, other, "v", "5");
	ctx_stop(&s, sid);
}
END_TEST

/* At most 16 contexts a sandbox (then 409, until one is deleted); a
 * context's id names it in its own sandbox only; bad requests are 400s. */
START_TEST(ctx_bounds)
{
	struct server s;
	char sid[128], other[128], ids[17][40], p[320];
	if (!ctx_start(&s, _i, sid))
		return;
	struct resp r;
	creq(&s, "POST", "/v1/sandboxes", "{\"memoryMb\":512}", &r);
	ck_assert_msg(r.code == 201, "%d %s", r.code, r.body);
	snprintf(other, sizeof other, "%s", jstr(r.json, "id"));
	resp_free(&r);
	for (int k = 0; k < 16; k++)
		ctx_new(&s, other, "{\"language\":\"python\"}", ids[k]);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts", other);
	creq(&s, "POST", p, "{\"language\":\"python\"}", &r);
	ck_assert_msg(r.code == 409, "%s: a 17th context: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s", other, ids[3]);
	creq(&s, "DELETE", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	ctx_new(&s, other, "{\"language\":\"python\"}", ids[16]);
	/* another sandbox's context is not found here */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, ids[0]);
	creq(&s, "POST", p, "{\"code\":\"1\"}", &r);
	ck_assert_msg(r.code == 404, "%s: another sandbox's context: %d %s", MODE_NAME[_i], r.code,
		      r.body);
	resp_free(&r);
	/* bad requests */
	static const char *const bad[] = { "{\"language\":\"ruby\"}", "{\"cwd\":\"/etc\"}",
					   "{\"cwd\":\"/sandbox/../etc\"}", "{\"extra\":1}",
					   "{\"language\":3}" };
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts", sid);
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		creq(&s, "POST", p, bad[k], &r);
		ck_assert_msg(r.code == 400, "%s: %s: %d %s", MODE_NAME[_i], bad[k], r.code, r.body);
		resp_free(&r);
	}
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", other, ids[0]);
	static const char *const badx[] = { "{}", "{\"code\":1}", "{\"code\":\"1\",\"timeout\":0}",
					    "{\"code\":\"1\",\"stdin\":\"x\"}" };
	for (size_t k = 0; k < sizeof badx / sizeof *badx; k++) {
		creq(&s, "POST", p, badx[k], &r);
		ck_assert_msg(r.code == 400, "%s: %s: %d %s", MODE_NAME[_i], badx[k], r.code, r.body);
		resp_free(&r);
	}
	snprintf(p, sizeof p, "/v1/sandboxes/%s", other);
	creq(&s, "DELETE", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	ctx_stop(&s, sid);
}
END_TEST

/* A streaming client that hangs up mid-step interrupts the step (the
 * default serve.sessions.onHangup): the context is free again within the
 * grace, its state before the step kept. */
START_TEST(ctx_hangup_interrupts)
{
	struct server s;
	char sid[128], py[40], p[320];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	expect_value(&s, sid, py, "x = 3\nx", "3");
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute?stream=1", sid, py);
	struct req q = { .method = "POST", .path = p, .max_ms = 1500,
			 .body = "{\"code\":\"import time\\nprint('started', flush=True)\\n"
				 "time.sleep(60)\\nx = 4\",\"timeout\":60000}" };
	struct resp r;
	call(&s, &q, &r); /* curl gives up after 1.5 s: the hang-up */
	ck_assert_msg(r.body && strstr(r.body, "started"), "%s: the step did not start: %d %s",
		      MODE_NAME[_i], r.code, r.body ? r.body : "");
	resp_free(&r);
	/* free again well before the step's 60 s: busy (409) only meanwhile */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, py);
	int64_t t0 = harness_now_ms();
	int code = 0;
	for (;;) {
		creq(&s, "POST", p, "{\"code\":\"x\"}", &r);
		code = r.code;
		if (code == 200) {
			ck_assert_msg(main_text(r.json) && !strcmp(main_text(r.json), "3"),
				      "%s: the state after the hang-up: %s", MODE_NAME[_i], r.body);
			resp_free(&r);
			break;
		}
		ck_assert_msg(code == 409 && harness_now_ms() - t0 < 20000,
			      "%s: after the hang-up: %d %s", MODE_NAME[_i], code, r.body);
		resp_free(&r);
		usleep(200 * 1000);
	}
	ctx_stop(&s, sid);
}
END_TEST

/* A TypeScript context: each cell through esbuild's transform in the
 * sandbox (as a cold run's TypeScript), its declarations kept; a cell
 * that does not parse is a SyntaxError in that step only. */
START_TEST(ctx_typescript)
{
	struct server s;
	char sid[128], ts[40];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"typescript\"}", ts);
	struct resp r;
	ctx_exec(&s, sid, ts, "interface P { a: number }\nconst p: P = { a: 2 };\n"
		 "let n: number = p.a * 21;\nn", 30000, &r);
	const char *m = jstr(jget(r.json, "error"), "message");
	if (m && strstr(m, "needs esbuild")) {
		resp_free(&r);
		ctx_stop(&s, sid);
		harness_skip("TypeScript needs esbuild in the sandbox's root (Debian package 'esbuild')");
		return;
	}
	ck_assert_msg(main_text(r.json) && !strcmp(main_text(r.json), "42"), "%s: %s", MODE_NAME[_i],
		      r.body);
	resp_free(&r);
	expect_value(&s, sid, ts, "const k: string = 'v' + (n + 1); k", "'v43'");
	ctx_exec(&s, sid, ts, "let q: = 3", 30000, &r);
	ck_assert_msg(error_name(r.json) && !strcmp(error_name(r.json), "SyntaxError") &&
		      !strcmp(ctx_state(r.json), "idle"), "%s: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	expect_value(&s, sid, ts, "n", "42");
	ctx_stop(&s, sid);
}
END_TEST

/* A step past the sandbox's memory (256 MiB here) is a MemoryError in
 * that step (the Python driver's RLIMIT_DATA), the context's state kept. */
START_TEST(ctx_memory_error)
{
	struct server s;
	char sid[128], py[40];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	expect_value(&s, sid, py, "x = 9\nx", "9");
	struct resp r;
	ctx_exec(&s, sid, py, "b = bytearray(600 * 1024 * 1024)", 30000, &r);
	ck_assert_msg(error_name(r.json) && !strcmp(error_name(r.json), "MemoryError") &&
		      !cJSON_IsTrue(jget(r.json, "killed")) && !strcmp(ctx_state(r.json), "idle"),
		      "%s: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	expect_value(&s, sid, py, "x", "9");
	ctx_stop(&s, sid);
}
END_TEST

/* A node step past the sandbox's memory (128 MiB): its interpreter is
 * killed (the kernel's OOM killer, or V8's own abort where only an rlimit
 * bounds it) and the answer says so; the sandbox and its other context
 * live on, the killed one restarts. */
START_TEST(ctx_oom_kills_one)
{
	struct server s;
	char sid[128], other[128], py[40], js[40], p[320];
	if (!ctx_start(&s, _i, sid))
		return;
	struct resp r;
	creq(&s, "POST", "/v1/sandboxes", "{\"memoryMb\":128}", &r);
	ck_assert_msg(r.code == 201, "%d %s", r.code, r.body);
	snprintf(other, sizeof other, "%s", jstr(r.json, "id"));
	resp_free(&r);
	ctx_new(&s, other, "{\"language\":\"python\"}", py);
	ctx_new(&s, other, "{\"language\":\"javascript\"}", js);
	expect_value(&s, other, py, "v = 1\nv", "1");
	ctx_exec(&s, other, js, "const a = []; while (true) a.push(Buffer.alloc(1 << 20, 1));", 30000,
		 &r);
	const char *reason = jstr(jget(r.json, "context"), "reason");
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "killed")) && !strcmp(ctx_state(r.json), "killed") &&
		      reason && strstr(reason, "killed") && !cJSON_IsTrue(jget(r.json, "timedOut")),
		      "%s: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	expect_value(&s, other, py, "v", "1");
	snprintf(p, sizeof p, "/v1/sandboxes/%s", other);
	creq(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "running"), "%s: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/restart", other, js);
	creq(&s, "POST", p, "{}", &r);
	ck_assert_msg(r.code == 200, "%s: restart: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	expect_value(&s, other, js, "1 + 1", "2");
	snprintf(p, sizeof p, "/v1/sandboxes/%s", other);
	creq(&s, "DELETE", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	ctx_stop(&s, sid);
}
END_TEST

/* The NDJSON lines of body: their "type"s joined by ',' into out, with
 * stdout data as "out:<data>" and result text as "result:<text/plain>". */
static void event_list(const char *body, char *out, size_t n)
{
	out[0] = '\0';
	const char *l = body;
	while (l && *l) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		cJSON *j = cJSON_ParseWithLength(l, len);
		ck_assert_msg(j, "not a JSON line: %.*s", (int)len, l);
		const char *t = jstr(j, "type");
		char item[256];
		if (!strcmp(t, "stdout"))
			snprintf(item, sizeof item, "out:%s", jstr(j, "data"));
		else if (!strcmp(t, "result"))
			snprintf(item, sizeof item, "result:%s",
				 jstr(jget(jget(j, "result"), "data"), "text/plain"));
		else if (!strcmp(t, "error"))
			snprintf(item, sizeof item, "error:%s", jstr(jget(j, "error"), "name"));
		else
			snprintf(item, sizeof item, "%s", t);
		snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? "," : "", item);
		cJSON_Delete(j);
		l = e ? e + 1 : NULL;
	}
}

/* ?stream=1 / Accept: application/x-ndjson: stdout, result and error
 * events in the order they happened (display() mid-cell), then done. */
START_TEST(ctx_stream_order)
{
	struct server s;
	char sid[128], py[40], js[40], p[320], got[4096];
	if (!ctx_start(&s, _i, sid))
		return;
	ctx_new(&s, sid, "{\"language\":\"python\"}", py);
	ctx_new(&s, sid, "{\"language\":\"javascript\"}", js);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute?stream=1", sid, py);
	struct resp r;
	/* several rounds: an order by chance does not pass */
	for (int round = 0; round < 3; round++) {
		creq(&s, "POST", p,
		     "{\"code\":\"print('a')\\ndisplay(7)\\nprint('b')\\ndisplay(8)\\nprint('c')\\n"
		     "raise ValueError('boom')\"}",
		     &r);
		ck_assert_msg(r.code == 200, "%d %s", r.code, r.body);
		event_list(r.body, got, sizeof got);
		ck_assert_msg(!strcmp(got, "out:a\n,result:7,out:b\n,result:8,out:c\n,stderr,"
				      "error:ValueError,done"),
			      "%s: python events: %s", MODE_NAME[_i], got);
		resp_free(&r);
	}
	snprintf(p, sizeof p, "/v1/sandboxes/%s/contexts/%s/execute", sid, js);
	const char *extra[] = { "-H", "Accept: application/x-ndjson", NULL };
	struct req q = { .method = "POST", .path = p, .extra = extra, .max_ms = 60000,
			 .body = "{\"code\":\"console.log('a'); display(7); console.log('b'); "
				 "display(8); console.log('c'); 9\"}" };
	for (int round = 0; round < 3; round++) {
		call(&s, &q, &r);
		ck_assert_msg(r.code == 200, "%d %s", r.code, r.body);
		event_list(r.body, got, sizeof got);
		ck_assert_msg(!strcmp(got, "out:a\n,result:7,out:b\n,result:8,out:c\n,result:9,done"),
			      "%s: node events: %s", MODE_NAME[_i], got);
		resp_free(&r);
	}
	ctx_stop(&s, sid);
}
END_TEST

Suite *serve_contexts_suite(void)
{
	Suite *s = suite_create("serve_contexts");
	TCase *tc = tcase_create("serve_contexts");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, ctx_globals_cwd_files, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_interrupt_keeps_state, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_killed_alone, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_protocol_breach, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_stream_order, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_memory_error, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_typescript, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_hangup_interrupts, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_bounds, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, ctx_oom_kills_one, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
