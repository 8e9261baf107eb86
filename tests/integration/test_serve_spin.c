/* `moat serve`: the Spin routes: the seed's examples, scripts, Python and TypeScript
 * handlers, the envelope's limits and a Spin toolbox root. Part of the serve suite (tcase "spin"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

/* ---- tests: the seed's examples, scripts, handlers ---------------------------------- */

/* The seed's two curl examples, verbatim (curl -d, no content type of ours). */
START_TEST(seed_examples)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	const char *py[] = { "-d", "{\"code\":\"print(6 * 7)\",\"sandboxId\":\"demo\"}", NULL };
	struct req q = { .path = "/py/run", .extra = py };
	call(&s, &q, &r);
	expect_script("POST /py/run print(6 * 7)", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "42\n");
	ck_assert_str_eq(jstr(r.json, "stderr"), "");
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "error is not null: %s", r.body);
	ck_assert_msg(jnum(r.json, "exitCode") == 0, "exitCode: %s", r.body);
	char ct[128];
	ck_assert_msg(resp_header(&r, "Content-Type", ct, sizeof ct) && strstr(ct, "application/json"),
		      "script result Content-Type: %s", r.head);
	resp_free(&r);

	const char *ts[] = { "-d",
			     "{\n"
			     "  \"code\":\"export default { async fetch(r) { return new Response(r.url) } }\",\n"
			     "  \"sandboxId\":\"demo\", \"input\":{\"path\":\"/hello\"}}",
			     NULL };
	struct req q2 = { .path = "/ts/run", .extra = ts };
	call(&s, &q2, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "TS handler: HTTP %d curl %d: %.600s %s", r.code,
		      r.curl_rc, r.body, r.err);
	ck_assert_msg(r.body_len >= 6 && !strcmp(r.body + r.body_len - 6, "/hello"),
		      "TS handler body does not end with /hello: [%s]", r.body);
	ck_assert_msg(!strcmp(r.body, "http://localhost/hello"),
		      "TS handler: r.url is http://localhost + input.path, got [%s]", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Scripts: failures in one line, JS and TS scripts, any path under /py/. */
START_TEST(scripts)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import sys\nprint('out')\nprint('first', file=sys.stderr)\n"
		   "print('last line', file=sys.stderr)\nprint('', file=sys.stderr)\nsys.exit(3)",
	       NULL, &r);
	expect_script("exit 3", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "out\n");
	ck_assert_msg(jnum(r.json, "exitCode") == 3, "%s", r.body);
	ck_assert_msg(jstr(r.json, "error") && !strcmp(jstr(r.json, "error"), "exit code 3: last line"),
		      "error for exit 3 (want \"exit code 3: last line\"): %s", r.body);
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "timedOut")), "%s", r.body);
	resp_free(&r);

	char *e = envelope("print('deep')", NULL);
	post(&s, "/py/some/deeper/path", e, &r);
	free(e);
	expect_script("POST /py/some/deeper/path", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "deep\n");
	resp_free(&r);

	e = envelope("console.log(typeof process, 6 * 7)", NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	expect_script("JS script on /ts/run", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "object 42\n"), "%s", r.body);
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "%s", r.body);
	resp_free(&r);

	e = envelope("const n: number = 21;\ninterface A { x: string }\nconsole.log(n * 2);", NULL);
	post(&s, "/ts/x", e, &r);
	free(e);
	expect_script("TS script on /ts/x", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "42\n"), "%s", r.body);
	resp_free(&r);

	/* the runtime is mounted read-only at /opt/moat/runtime */
	run_py(&s,
	       "import os\n"
	       "print(os.path.isdir('/opt/moat/runtime/python'))\n"
	       "try:\n"
	       "    open('/opt/moat/runtime/python/x', 'w')\n"
	       "    print('writable')\n"
	       "except OSError as e:\n"
	       "    print('refused')\n",
	       NULL, &r);
	expect_script("the runtime mount", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "True\nrefused\n"),
		      "/opt/moat/runtime is a read-only mount: %s", r.body);
	resp_free(&r);

	/* a handle_request that is not top-level, or not at a line start: a script */
	run_py(&s,
	       "class A:\n"
	       "    def handle_request(self):\n"
	       "        pass\n"
	       "x = 'def handle_request(r)'\n"
	       "print('script after all')\n",
	       NULL, &r);
	expect_script("handle_request inside a class", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "script after all\n");
	resp_free(&r);
	e = envelope("throw new Error('js-boom')", NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	expect_script("JS script that throws", &r);
	ck_assert_msg(jstr(r.json, "error") && !strncmp(jstr(r.json, "error"), "exit code ", 10),
		      "error: %s", r.body);
	ck_assert_msg(strstr(jstr(r.json, "stderr"), "js-boom"), "%s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(python_handler)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOTLESS };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(201, {\"x-a\": \"b\"}, b\"hi \" + request.body)\n",
	       ",\"input\":{\"method\":\"POST\",\"path\":\"/p\",\"body\":\"there\"}", &r);
	char h[256];
	ck_assert_msg(r.code == 201 && r.curl_rc == 0, "handler: HTTP %d (want 201), curl %d: %.600s",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(resp_header(&r, "x-a", h, sizeof h) && !strcmp(h, "b"), "x-a: %s", r.head);
	ck_assert_msg(!strcmp(r.body, "hi there"), "body [%s]", r.body);
	resp_free(&r);

	/* the request as the handler sees it */
	run_py(&s,
	       "import json\n"
	       "from spin_sdk.http import Response\n"
	       "async def handle_request(request):\n"
	       "    return Response(200, {\"content-type\": \"application/json\"},\n"
	       "        json.dumps([request.method, request.uri, request.headers.get('x-in')]).encode())\n",
	       ",\"input\":{\"method\":\"PUT\",\"path\":\"/a/b?c=d\",\"headers\":{\"x-in\":\"v\"}}", &r);
	ck_assert_msg(r.code == 200 && r.json, "async handler: HTTP %d: %.600s", r.code, r.body);
	char *got = cJSON_PrintUnformatted(r.json);
	ck_assert_msg(!strcmp(got, "[\"PUT\",\"http://localhost/a/b?c=d\",\"v\"]") ||
		      !strcmp(got, "[\"PUT\",\"/a/b?c=d\",\"v\"]"),
		      "the handler's request (method, uri, header): %s", got);
	free(got);
	resp_free(&r);

	/* input defaults: GET, /, no headers, empty body */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {}, f'{request.method} {request.uri} {len(request.body or b\"\")}'.encode())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && (!strcmp(r.body, "GET http://localhost/ 0") ||
					!strcmp(r.body, "GET / 0")),
		      "the default input: HTTP %d [%s]", r.code, r.body);
	resp_free(&r);

	/* a header value with CR/LF cannot add a header */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {'x-a': 'b\\r\\nx-injected: 1', 'x-c': 'd'}, b'inj')\n",
	       NULL, &r);
	ck_assert_msg(!strcasestr(r.head, "x-injected"), "a handler injected a header: %s", r.head);
	resp_free(&r);

	/* framing and hop-by-hop headers of the handler are dropped */
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {\"x-ok\": \"1\", \"content-length\": \"999\", \"connection\": "
	       "\"close\",\n"
	       "        \"transfer-encoding\": \"gzip\", \"upgrade\": \"h2c\"}, b\"body\")\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "HTTP %d curl %d: %s %s", r.code, r.curl_rc,
		      r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "body"), "body [%s]", r.body);
	ck_assert_msg(resp_header(&r, "x-ok", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	ck_assert_msg(!strstr(r.head, "999") && !strcasestr(r.head, "gzip") && !strcasestr(r.head, "h2c"),
		      "the handler's Content-Length/Transfer-Encoding/Upgrade passed: %s", r.head);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(python_streaming)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s,
	       "import time\n"
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        for i in range(5):\n"
	       "            yield f'chunk{i};'\n"
	       "            time.sleep(0.05)\n"
	       "        yield b'bytes-too'\n"
	       "    return (200, {'content-type': 'text/plain', 'x-s': '1'}, gen())\n",
	       NULL, &r);
	char h[128];
	ck_assert_msg(r.code == 200 && r.curl_rc == 0, "stream: HTTP %d curl %d: %.600s %s", r.code,
		      r.curl_rc, r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "chunk0;chunk1;chunk2;chunk3;chunk4;bytes-too"), "body [%s]",
		      r.body);
	ck_assert_msg(resp_header(&r, "x-s", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	ck_assert_msg(resp_header(&r, "Transfer-Encoding", h, sizeof h) && strstr(h, "chunked"),
		      "a handler's response is streamed chunked: %s", r.head);
	resp_free(&r);

	/* the generator raises after 2 chunks: truncated, what came is kept */
	run_py(&s,
	       "def handle_request(request):\n"
	       "    def gen():\n"
	       "        yield b'one;'\n"
	       "        yield b'two;'\n"
	       "        raise RuntimeError('generator-boom')\n"
	       "    return (200, {'content-type': 'text/plain'}, gen())\n",
	       NULL, &r);
	ck_assert_msg(r.code == 200, "failing stream: HTTP %d: %s", r.code, r.body);
	ck_assert_msg(r.curl_rc == 18 || r.curl_rc == 56,
		      "a generator that raises truncates the response: curl exit %d (want 18 or 56), "
		      "body [%s] %s", r.curl_rc, r.body, r.err);
	ck_assert_msg(!strcmp(r.body, "one;two;"), "body so far [%s] (want one;two;)", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(handler_fails_before_head)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "def handle_request(request):\n    raise ValueError('nope-before-head')\n", NULL, &r);
	ck_assert_msg(r.code == 500 && r.json, "raise before head: HTTP %d (want 500 JSON): %.600s",
		      r.code, r.body);
	ck_assert_msg(jstr(r.json, "error") && *jstr(r.json, "error"), "error is null: %s", r.body);
	ck_assert_msg(jstr(r.json, "stderr") && strstr(jstr(r.json, "stderr"), "nope-before-head"),
		      "stderr holds the trace: %s", r.body);
	ck_assert_msg(jget(r.json, "exitCode") && jget(r.json, "timedOut"),
		      "script-shaped JSON: %s", r.body);
	resp_free(&r);

	/* a status out of 200..599 is a failure before the head */
	run_py(&s, "from spin_sdk.http import Response\n"
		   "def handle_request(request):\n    return Response(99, {}, b'x')\n",
	       NULL, &r);
	ck_assert_msg(r.code == 500 && r.json && jstr(r.json, "error"),
		      "status 99 from a handler: HTTP %d (want 500 with error): %.600s", r.code, r.body);
	resp_free(&r);

	/* a TS handler that throws */
	char *e = envelope("export default { async fetch(r) { throw new Error('ts-before-head') } }",
			   NULL);
	post(&s, "/ts/run", e, &r);
	free(e);
	ck_assert_msg(r.code == 500 && r.json && jstr(r.json, "error"),
		      "TS throw: HTTP %d (want 500 with error): %.600s", r.code, r.body);
	ck_assert_msg(jstr(r.json, "stderr") && strstr(jstr(r.json, "stderr"), "ts-before-head"),
		      "stderr holds the trace: %s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(ts_handler)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	struct resp r;
	char *e = envelope(
		"export default {\n"
		"  async fetch(r: Request): Promise<Response> {\n"
		"    const b: string = await r.text();\n"
		"    return new Response(`t:${b}:${r.headers.get('x-in')}:${r.method}`,\n"
		"      { status: 202, headers: { 'x-t': '1' } });\n"
		"  }\n"
		"}\n",
		",\"input\":{\"method\":\"POST\",\"path\":\"/p\",\"headers\":{\"x-in\":\"v\"},"
		"\"body\":\"abc\"}");
	post(&s, "/ts/run", e, &r);
	free(e);
	char h[64];
	ck_assert_msg(r.code == 202 && r.curl_rc == 0, "TS handler: HTTP %d (want 202) curl %d: %.600s",
		      r.code, r.curl_rc, r.body);
	ck_assert_msg(!strcmp(r.body, "t:abc:v:POST"), "body [%s]", r.body);
	ck_assert_msg(resp_header(&r, "x-t", h, sizeof h) && !strcmp(h, "1"), "%s", r.head);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: limits of the envelope and of the runs ---------------------------------- */

/* A body file: {"code":"#xxx...","sandboxId":"big"<extra>} with code_len bytes of code. */
static void big_body(const struct server *s, const char *name, size_t code_len, size_t input_len,
		     char *path, size_t size)
{
	snprintf(path, size, "%s/%s", s->dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"code\":\"#", f);
	for (size_t i = 1; i < code_len; i++)
		fputc('x', f);
	fputs("\",\"sandboxId\":\"big\"", f);
	if (input_len) {
		fputs(",\"input\":{\"body\":\"", f);
		for (size_t i = 0; i < input_len; i++)
			fputc('y', f);
		fputs("\"}", f);
	}
	fputs("}", f);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(payload_too_large)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = _i == MODE_ROOT };
	server_start(&s, _i, &o);
	struct resp r;
	char f[200];
	const size_t MiB = 1024 * 1024;

	/* code of exactly 5 MiB: accepted */
	big_body(&s, "code5.json", 5 * MiB, 0, f, sizeof f);
	struct req q = { .path = "/py/run", .body_file = f };
	call(&s, &q, &r);
	expect_script("code of exactly 5 MiB", &r);
	ck_assert_msg(cJSON_IsNull(jget(r.json, "error")), "%.600s", r.body);
	resp_free(&r);
	unlink(f);

	/* code over 5 MiB */
	big_body(&s, "code5p.json", 5 * MiB + 1, 0, f, sizeof f);
	call(&s, &q, &r);
	expect_error("code of 5 MiB + 1", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* body over 6 MiB (small code): from Content-Length, and chunked */
	big_body(&s, "body6.json", 10, 6 * MiB + 10, f, sizeof f);
	call(&s, &q, &r);
	expect_error("body over 6 MiB (Content-Length)", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	struct req qc = { .path = "/py/run", .body_file = f, .chunked = true };
	call(&s, &qc, &r);
	expect_error("body over 6 MiB (chunked)", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* /v1/run too */
	struct req qv = { .path = "/v1/run", .body_file = f };
	big_body(&s, "v1.json", 10, 6 * MiB + 10, f, sizeof f);
	call(&s, &qv, &r);
	expect_error("/v1/run body over 6 MiB", &r, 413, "PayloadTooLarge");
	resp_free(&r);
	unlink(f);

	/* the server still serves */
	run_py(&s, "print('after')", NULL, &r);
	expect_script("after the 413s", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "after\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(bad_envelopes)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	char id256[300], id257[300], b256[400], b257[400];
	memset(id256, 'i', 256);
	id256[256] = '\0';
	memset(id257, 'i', 257);
	id257[257] = '\0';
	snprintf(b256, sizeof b256, "{\"code\":\"print(256)\",\"sandboxId\":\"%s\"}", id256);
	snprintf(b257, sizeof b257, "{\"code\":\"print(1)\",\"sandboxId\":\"%s\"}", id257);
	const char *const bad[] = {
		"{\"code\":",
		"",
		"[]",
		"\"code\"",
		"{\"code\":42,\"sandboxId\":\"a\"}",
		"{\"code\":null,\"sandboxId\":\"a\"}",
		"{\"code\":\"print(1)\"}",
		"{\"sandboxId\":\"a\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":5}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"unknown\":1}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"language\":\"python\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"kvEnabled\":\"yes\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"allowedHosts\":\"https://a.com\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"allowedHosts\":[1]}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":\"x\"}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"headers\":{\"a\":1}}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"headers\":[[\"a\",\"b\"]]}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"method\":5}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"body\":{}}}",
		"{\"code\":\"print(1)\",\"sandboxId\":\"a\",\"input\":{\"what\":\"x\"}}",
		b257,
	};
	struct resp r;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[200];
		snprintf(what, sizeof what, "/py/run %.120s", bad[i][0] ? bad[i] : "(empty body)");
		post(&s, "/py/run", bad[i], &r);
		expect_error(what, &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	/* the same on /ts/ */
	post(&s, "/ts/run", "{\"code\":\"console.log(1)\"}", &r);
	expect_error("/ts/run without sandboxId", &r, 400, "SandboxConfigError");
	resp_free(&r);

	/* boundaries that are fine */
	post(&s, "/py/run", b256, &r);
	expect_script("sandboxId of 256 bytes", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "256\n");
	resp_free(&r);
	run_py(&s, "print('kv off')", ",\"kvEnabled\":false,\"allowedHosts\":[],\"input\":{}", &r);
	expect_script("kvEnabled false, empty allowedHosts and input", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "kv off\n");
	resp_free(&r);

	run_py(&s, "print(1)", ",\"kvEnabled\":true", &r);
	expect_script("kvEnabled true", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(allowed_hosts)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { 0 };
	server_start(&s, _i, &o);
	static const char *const bad[] = {
		"10.0.0.0/8", "https://10.0.0.0/8", "*", "https://*", "https://a.com:1-5",
		"ftp://x", "https://a.com/path", "", "https://", "a.com", "https://*.com",
		"https://a.*.com", "http://a.com:0", "http://a.com:70000", "https://user@a.com",
		"https://[::1", "https://a.com:",
	};
	struct resp r;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *q = harness_json_quote(bad[i]), *extra = NULL, what[200];
		ck_assert_int_ge(asprintf(&extra, ",\"allowedHosts\":[\"https://ok.example.com\",%s]", q), 0);
		snprintf(what, sizeof what, "allowedHosts entry \"%s\"", bad[i]);
		run_py(&s, "print(1)", extra, &r);
		expect_error(what, &r, 400, "SandboxConfigError");
		ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), "allowedHosts") ||
			      (bad[i][0] && strstr(jstr(jget(r.json, "error"), "message"), bad[i])),
			      "%s: the message names neither allowedHosts nor the entry: %s", what, r.body);
		resp_free(&r);
		free(q);
		free(extra);
	}
	/* accepted forms: the program runs (no egress needed to print) */
	run_py(&s, "print('allowed')",
	       ",\"allowedHosts\":[\"https://api.example.com\",\"https://*.example.org\","
	       "\"http://a.example.net:*\",\"https://b.example.net:8443\"]",
	       &r);
	expect_script("valid allowedHosts", &r);
	ck_assert_msg(jstr(r.json, "stdout") && !strcmp(jstr(r.json, "stdout"), "allowed\n"), "%.800s",
		      r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(output_truncation)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "import sys\nsys.stdout.write('x' * (300 * 1024))\nsys.stderr.write('y' * (300 * 1024))\n",
	       NULL, &r);
	expect_script("300 KiB out and err", &r);
	const char *out = jstr(r.json, "stdout"), *err = jstr(r.json, "stderr");
	ck_assert_msg(out && strlen(out) == SCRIPT_CAP, "stdout length %zu (want %d)",
		      out ? strlen(out) : 0, SCRIPT_CAP);
	ck_assert_msg(err && strlen(err) == SCRIPT_CAP, "stderr length %zu (want %d)",
		      err ? strlen(err) : 0, SCRIPT_CAP);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stdoutTruncated")), "stdoutTruncated not true");
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "stderrTruncated")), "stderrTruncated not true");
	resp_free(&r);

	/* exactly the cap: not truncated */
	run_py(&s, "import sys\nsys.stdout.write('z' * 262144)\n", NULL, &r);
	expect_script("256 KiB exactly", &r);
	ck_assert_msg(jstr(r.json, "stdout") && strlen(jstr(r.json, "stdout")) == SCRIPT_CAP,
		      "stdout length");
	ck_assert_msg(cJSON_IsFalse(jget(r.json, "stdoutTruncated")), "truncated at exactly the cap");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(operator_timeout)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .config = "{\"serve\":{\"defaults\":{\"timeout\":1000},"
					   "\"max\":{\"timeout\":3000}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "print('spin', flush=True)\nwhile True: pass\n", NULL, &r);
	expect_script("while True (default timeout 1000)", &r);
	const char *err = jstr(r.json, "error");
	ck_assert_msg(err && strstr(err, "timed out"), "error does not say timed out: %s", r.body);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "timedOut")), "timedOut not true: %s", r.body);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "spin\n"), "output before the timeout: %s", r.body);
	double d = jnum(r.json, "durationMs");
	ck_assert_msg(d >= 900 && d < harness_scale_ms(10000), "durationMs %f", d);
	ck_assert_msg(r.ms < harness_scale_ms(15000), "answered after %ld ms", r.ms);
	resp_free(&r);

	/* /v1/run: the default applies; asking up to max is fine, above is 403 */
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"while True: pass\"}", &r);
	ck_assert_msg(r.code == 200 && cJSON_IsTrue(jget(r.json, "timedOut")), "/v1/run default: %s",
		      r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(3)\",\"timeout\":3000}", &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "exitCode") == 0, "/v1/run timeout = max: %s",
		      r.body);
	resp_free(&r);
	post(&s, "/v1/run", "{\"language\":\"python\",\"code\":\"print(3)\",\"timeout\":3001}", &r);
	expect_error("/v1/run timeout above the configured max", &r, 403, "SandboxPolicyError");
	ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"), "timeout"),
		      "the 403 names the limit: %s", r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

START_TEST(operator_memory)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true,
				 .config = "{\"serve\":{\"defaults\":{\"memoryMb\":64}}}" };
	server_start(&s, _i, &o);
	struct resp r;
	run_py(&s, "x = b'x' * (512 << 20)\nprint(len(x))\n", NULL, &r);
	expect_script("512 MiB under a 64 MiB default", &r);
	const char *err = jstr(r.json, "error");
	ck_assert_msg(err && strcasestr(err, "memory"), "error does not mention memory: %s", r.body);
	ck_assert_msg(!strstr(jstr(r.json, "stdout"), "536870912"), "the allocation succeeded: %s",
		      r.body);
	resp_free(&r);
	/* a small program still runs under it */
	run_py(&s, "print('small')", NULL, &r);
	expect_script("small", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "small\n");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: listeners ----------------------------------------------------------------- */

/* moat serve --rootfs <the Spin toolbox root>: a Python handler and a TS handler
 * that import toolbox modules, with the runtime shims bound into a prepared
 * root. Needs MOAT_SPIN_ROOTFS (rootfs/build-rootfs.sh --profile spin). */
START_TEST(spin_rootfs_handlers)
{
	HARNESS_MODE_GUARD(_i);
	const char *root = getenv("MOAT_SPIN_ROOTFS");
	if (!root || !*root) {
		harness_skip("%s: MOAT_SPIN_ROOTFS is not set", __func__);
		return;
	}
	const char *args[] = { "--rootfs", root, NULL };
	struct server s;
	struct server_opts o = { .socket = true, .args = args };
	server_start(&s, _i, &o);
	struct resp r;
	const char *py[] = { "-d",
			     "{\"sandboxId\":\"d\",\"code\":\"import numpy, tabulate\\n"
			     "from spin_sdk.http import Response\\n"
			     "def handle_request(request):\\n"
			     "    t = tabulate.tabulate([[int(numpy.arange(4).sum())]], tablefmt='plain')\\n"
			     "    return Response(200, {'content-type': 'text/plain'}, t.strip())\\n\"}",
			     NULL };
	struct req q = { .path = "/py/run", .extra = py };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && !strcmp(r.body, "6"),
		      "python handler in the spin root: HTTP %d curl %d: [%.600s] %s", r.code,
		      r.curl_rc, r.body, r.err);
	resp_free(&r);
	const char *ts[] = { "-d",
			     "{\"sandboxId\":\"d\",\"code\":\"import { z } from 'zod';\\n"
			     "import dayjs from 'dayjs';\\n"
			     "export default { async fetch(req) {\\n"
			     "  const n = z.number().parse(41) + 1;\\n"
			     "  return new Response(n + ' ' + dayjs('2024-01-01').add(1, 'day').format('YYYY-MM-DD'));\\n"
			     "} }\\n\"}",
			     NULL };
	struct req q2 = { .path = "/ts/run", .extra = ts };
	call(&s, &q2, &r);
	ck_assert_msg(r.code == 200 && r.curl_rc == 0 && !strcmp(r.body, "42 2024-01-02"),
		      "TS handler in the spin root: HTTP %d curl %d: [%.600s] %s", r.code, r.curl_rc,
		      r.body, r.err);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

void serve_spin_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "spin");

	SERVE_ADD(tc, only, seed_examples, SERVE_MODES);
	SERVE_ADD(tc, only, scripts, SERVE_MODES);
	SERVE_ADD(tc, only, python_handler, SERVE_MODES);
	SERVE_ADD(tc, only, python_streaming, SERVE_MODES);
	SERVE_ADD(tc, only, handler_fails_before_head, SERVE_MODES);
	SERVE_ADD(tc, only, ts_handler, SERVE_MODES);
	SERVE_ADD(tc, only, payload_too_large, SERVE_MODES);
	SERVE_ADD(tc, only, bad_envelopes, SERVE_MODES);
	SERVE_ADD(tc, only, allowed_hosts, SERVE_MODES);
	SERVE_ADD(tc, only, output_truncation, SERVE_MODES);
	SERVE_ADD(tc, only, operator_timeout, SERVE_MODES);
	SERVE_ADD(tc, only, operator_memory, SERVE_MODES);
	SERVE_ADD(tc, only, spin_rootfs_handlers, SERVE_MODES);
}
