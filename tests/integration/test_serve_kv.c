/* `moat serve`: the scoped key-value store (docs/KV.md) through the Spin routes and
 * /v1/kv, X-Sandbox-Id. Part of the serve suite (tcase "kv"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"
#include "kv_fill.h"

/* ---- tests: the scoped key-value store (docs/KV.md) ----------------------------------- */

/* A Spin envelope with sandboxId id, kvEnabled kv, then extra. */
static void run_kv(struct server *s, const char *route, const char *code, const char *id, bool kv,
		   struct resp *r)
{
	char *qc = harness_json_quote(code), *qi = harness_json_quote(id), *e = NULL;
	ck_assert_int_ge(asprintf(&e, "{\"code\":%s,\"sandboxId\":%s,\"kvEnabled\":%s}", qc, qi,
				  kv ? "true" : "false"),
			 0);
	post(s, route, e, r);
	free(e);
	free(qc);
	free(qi);
}

#define PY_VISIT                                                                       \
	"from spin_sdk import key_value\n"                                              \
	"from spin_sdk.http import Response\n"                                          \
	"def handle_request(request):\n"                                                \
	"    s = key_value.open_default()\n"                                            \
	"    n = int(s.get('visits') or b'0') + 1\n"                                    \
	"    s.set('visits', str(n).encode())\n"                                        \
	"    return Response(200, {'content-type': 'text/plain'}, f'visit {n}'.encode())\n"

START_TEST(kv_store)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	/* a Python handler counts its visits, per sandboxId */
	for (int i = 1; i <= 2; i++) {
		run_kv(&s, "/py/visit", PY_VISIT, "user-a", true, &r);
		char want[32];
		snprintf(want, sizeof want, "visit %d", i);
		ck_assert_msg(r.code == 200 && !strcmp(r.body, want), "visit %d: HTTP %d [%.400s]", i,
			      r.code, r.body);
		resp_free(&r);
	}
	run_kv(&s, "/py/visit", PY_VISIT, "user-b", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 1"), "user-b: [%.400s]", r.body);
	resp_free(&r);
	/* a TS handler reads what the Python one wrote */
	run_kv(&s, "/ts/read",
	       "import * as kv from \"@spinframework/spin-kv\";\n"
	       "export default {\n"
	       "  async fetch(req: Request): Promise<Response> {\n"
	       "    const s = kv.openDefault();\n"
	       "    const v = s.get(\"visits\");\n"
	       "    return new Response(`ts sees ${new TextDecoder().decode(v!)} ${s.getKeys()}`);\n"
	       "  },\n"
	       "};\n",
	       "user-a", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "ts sees 2 visits"), "ts: HTTP %d [%.400s]",
		      r.code, r.body);
	resp_free(&r);
	/* a script; and kvEnabled false: the program is told why */
	run_kv(&s, "/py/run",
	       "from spin_sdk import key_value\n"
	       "try:\n"
	       "    key_value.open_default()\n"
	       "except key_value.Error as e:\n"
	       "    print(e.kind)\n",
	       "user-a", false, &r);
	expect_script("kvEnabled false", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "access_denied\n");
	resp_free(&r);
	/* DELETE /v1/kv/<id> retires one id */
	struct req q = { .method = "DELETE", .path = "/v1/kv/user-a" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "sandboxId"), "user-a") &&
			      jnum(r.json, "removed") == 1,
		      "DELETE: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	run_kv(&s, "/py/visit", PY_VISIT, "user-a", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 1"), "after DELETE: [%.300s]", r.body);
	resp_free(&r);
	run_kv(&s, "/py/visit", PY_VISIT, "user-b", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 2"), "user-b after DELETE of user-a: [%.300s]", r.body);
	resp_free(&r);
	struct req wrong = { .method = "POST", .path = "/v1/kv/user-b", .body = "{}" };
	call(&s, &wrong, &r);
	expect_error("POST /v1/kv", &r, 405, "MethodNotAllowed");
	resp_free(&r);
	char path[400] = "/v1/kv/";
	memset(path + 7, 'x', 300);
	path[307] = '\0';
	struct req longid = { .method = "DELETE", .path = path };
	call(&s, &longid, &r);
	expect_error("DELETE of a 300-byte id", &r, 400, "SandboxConfigError");
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* --no-kv: kvEnabled and DELETE /v1/kv are refused with 501, never
 * silently run without the store. */
START_TEST(kv_off)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	static const char *const args[] = { "--no-kv", NULL };
	struct server_opts o = { .socket = true, .kv = "", .args = args };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/run", "print(1)", "a", true, &r);
	expect_error("kvEnabled with --no-kv", &r, 501, "NotImplemented");
	resp_free(&r);
	struct req q = { .method = "DELETE", .path = "/v1/kv/a" };
	call(&s, &q, &r);
	expect_error("DELETE with --no-kv", &r, 501, "NotImplemented");
	resp_free(&r);
	run_kv(&s, "/py/run", "print(2)", "a", false, &r);
	expect_script("kvEnabled false with --no-kv", &r);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* No --kv and no place for the default store (a service user whose home is
 * /nonexistent, as the per-user unit's nobody): the service starts without
 * the store, says so in its log, and refuses kvEnabled as --no-kv does;
 * systemd's STATE_DIRECTORY, when given, is where the default store goes. */
START_TEST(kv_default_place)
{
	HARNESS_MODE_GUARD(_i);
	char state[] = "/tmp/moat-kvstate-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(state));
	if (_i == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(state, ROOTLESS_ID, ROOTLESS_ID), 0);
	/* root's default is /var/lib/moat: its "no place" is a STATE_DIRECTORY
	 * that cannot be made; rootless, also neither XDG_STATE_HOME nor HOME (as
	 * user@65534's manager gives its services) */
	const char *none[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent",
			       "STATE_DIRECTORY=/dev/null/moat", NULL };
	const char *none_home[] = { "PATH=/usr/bin:/bin", NULL };
	static const char *const why[] = { "cannot create /dev/null/moat",
					   "no place for the key-value store" };
	char sd[64];
	snprintf(sd, sizeof sd, "STATE_DIRECTORY=%s", state);
	const char *placed[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", sd, NULL };
	const char *const *envs[] = { none, _i == MODE_ROOTLESS ? none_home : NULL };
	for (int k = 0; k < 2; k++) {
		if (!envs[k])
			continue;
		struct server s;
		struct server_opts o = { .socket = true, .kv = "", .env = envs[k] };
		server_start(&s, _i, &o);
		struct resp r;
		run_kv(&s, "/py/run", "print(1)", "a", true, &r);
		expect_error("kvEnabled with no place for the store", &r, 501, "NotImplemented");
		resp_free(&r);
		run_kv(&s, "/py/run", "print(2)", "a", false, &r);
		expect_script("kvEnabled false with no place for the store", &r);
		resp_free(&r);
		char *log = server_log(&s);
		ck_assert_msg(log && strstr(log, "running without the key-value store") &&
				      strstr(log, why[k]),
			      "env %d: the log does not say the store is off, and why (%s): %s", k,
			      why[k], log ? log : "(none)");
		free(log);
		server_stop(&s);
	}
	struct server s;
	struct server_opts o = { .socket = true, .kv = "", .env = placed };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/run", "print(3)", "a", true, &r);
	expect_script("kvEnabled with STATE_DIRECTORY", &r);
	resp_free(&r);
	server_stop(&s);
	char db[96];
	snprintf(db, sizeof db, "%s/kv.sqlite3", state);
	struct stat st;
	ck_assert_msg(stat(db, &st) == 0, "no store at %s (STATE_DIRECTORY)", db);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A set answered before the service is killed -9 is there for the next. */
START_TEST(kv_survives_kill)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/run",
	       "from spin_sdk import key_value\n"
	       "key_value.open_default().set('k', b'z' * 500000)\n"
	       "print('set')\n",
	       "durable", true, &r);
	expect_script("set", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "set\n");
	resp_free(&r);
	char file[128];
	snprintf(file, sizeof file, "%s", s.kvf);
	ck_assert_int_eq(kill(s.p.pid, SIGKILL), 0);
	server_wait_exit(&s, harness_scale_ms(10000));
	unlink(s.sock); /* a killed server cannot remove its socket */
	char kvarg[160];
	snprintf(kvarg, sizeof kvarg, "%s", file);
	struct server s2;
	struct server_opts o2 = { .socket = true, .kv = kvarg };
	server_start(&s2, _i, &o2);
	run_kv(&s2, "/py/run",
	       "from spin_sdk import key_value\n"
	       "v = key_value.open_default().get('k')\n"
	       "print(len(v), v == b'z' * 500000)\n",
	       "durable", true, &r);
	expect_script("get after kill -9", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "500000 True\n");
	resp_free(&r);
	server_stop(&s2);
	server_cleanup(&s);
}
END_TEST

/* A redis-server of the harness's (harness_redis_start), known to the
 * leftover check. */
struct redis {
	pid_t pid;
	char dir[64];
	char spec[64];
};

static void redis_start(struct redis *rd)
{
	rd->pid = harness_redis_start(rd->spec, sizeof rd->spec, rd->dir, sizeof rd->dir);
	if (rd->pid > 0)
		known_add(rd->pid); /* not a leftover of the servers */
}

static void redis_stop(struct redis *rd)
{
	if (rd->pid <= 0)
		return;
	harness_redis_stop(rd->pid, rd->dir);
	known_del(rd->pid);
}

/* Two services on one Redis: what one stores, the other serves; a DELETE on
 * one retires the id for both. */
START_TEST(kv_redis_two_nodes)
{
	HARNESS_MODE_GUARD(_i);
	struct redis rd;
	redis_start(&rd);
	if (rd.pid <= 0) {
		harness_skip("%s: redis-server is not installed", __func__);
		return;
	}
	struct server a, b;
	struct server_opts o = { .kv = rd.spec };
	server_start(&a, _i, &o);
	server_start(&b, _i, &o);
	ck_assert_int_ne(a.port, b.port);
	struct resp r;
	for (int i = 1; i <= 4; i++) {
		run_kv(i % 2 ? &a : &b, "/py/visit", PY_VISIT, "shared-user", true, &r);
		char want[32];
		snprintf(want, sizeof want, "visit %d", i);
		ck_assert_msg(r.code == 200 && !strcmp(r.body, want), "visit %d on node %c: [%.300s]",
			      i, i % 2 ? 'a' : 'b', r.body);
		resp_free(&r);
	}
	struct req q = { .method = "DELETE", .path = "/v1/kv/shared-user" };
	call(&b, &q, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "removed") == 1, "DELETE: %.300s", r.body);
	resp_free(&r);
	run_kv(&a, "/py/visit", PY_VISIT, "shared-user", true, &r);
	ck_assert_msg(!strcmp(r.body, "visit 1"), "after DELETE on b, a: [%.300s]", r.body);
	resp_free(&r);
	server_stop(&a);
	server_stop(&b);
	redis_stop(&rd);
}
END_TEST

/* A request with X-Sandbox-Id headers (hdr2: a second one, or NULL). */
static void with_id_header(struct server *s, const char *method, const char *path,
			   const char *body, const char *hdr, const char *hdr2, struct resp *r)
{
	char *h1 = NULL, *h2 = NULL;
	ck_assert_int_ge(asprintf(&h1, "X-Sandbox-Id: %s", hdr), 0);
	if (hdr2)
		ck_assert_int_ge(asprintf(&h2, "X-Sandbox-Id: %s", hdr2), 0);
	const char *extra[] = { "-H", h1, h2 ? "-H" : NULL, h2, NULL };
	struct req q = { .method = method, .path = path, .body = body, .extra = extra };
	call(s, &q, r);
	free(h1);
	free(h2);
}

#define PY_KV_PUT                                                                      \
	"from spin_sdk import key_value\n"                                              \
	"key_value.open_default().set('who', b'header')\n"                             \
	"print('stored')\n"
#define PY_KV_GET                                                                      \
	"from spin_sdk import key_value\n"                                              \
	"print(key_value.open_default().get('who'))\n"

/* The X-Sandbox-Id header (SERVE.md "Sandbox id in a header"): alone it is
 * the request's sandboxId; with a different one in the body or the path it
 * is a 400; it is checked as the envelope's; /healthz ignores it. */
START_TEST(sandbox_id_header)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;

	/* header only: the store is the header's id's */
	char *qc = harness_json_quote(PY_KV_PUT), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s,\"kvEnabled\":true}", qc), 0);
	free(qc);
	with_id_header(&s, NULL, "/py/run", body, "hdr-user", NULL, &r);
	expect_script("header only", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "stored\n"), "%.400s", r.body);
	resp_free(&r);
	free(body);
	run_kv(&s, "/py/run", PY_KV_GET, "hdr-user", true, &r);
	expect_script("read by envelope id", &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "b'header'\n"), "%.400s", r.body);
	resp_free(&r);
	run_kv(&s, "/py/run", PY_KV_GET, "other-user", true, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "None\n"), "%.400s", r.body);
	resp_free(&r);

	/* both, the same: fine; different: 400 naming both, and nothing ran */
	char *e = envelope("print('ran')", NULL); /* sandboxId "test" */
	with_id_header(&s, NULL, "/py/run", e, "test", NULL, &r);
	expect_script("same id twice", &r);
	ck_assert_str_eq(jstr(r.json, "stdout"), "ran\n");
	resp_free(&r);
	with_id_header(&s, NULL, "/py/run", e, "test2", NULL, &r);
	expect_error("different ids", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(jstr(jget(r.json, "error"), "message"),
			     "X-Sandbox-Id header and the envelope's \"sandboxId\" name different"),
		      "%.400s", r.body);
	resp_free(&r);
	/* given twice (even the same): 400; too long, not UTF-8: 400 */
	with_id_header(&s, NULL, "/py/run", e, "test", "test", &r);
	expect_error("two headers", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "more than once"), "%.400s", r.body);
	resp_free(&r);
	char longid[258];
	memset(longid, 'i', 257);
	longid[257] = 0;
	with_id_header(&s, NULL, "/ts/run", e, longid, NULL, &r);
	expect_error("257 bytes", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "1 to 256 bytes"), "%.400s", r.body);
	resp_free(&r);
	with_id_header(&s, NULL, "/py/run", e, "\xff\xfe", NULL, &r);
	expect_error("not UTF-8", &r, 400, "SandboxConfigError");
	resp_free(&r);
	free(e);
	/* neither: still required */
	post(&s, "/py/run", "{\"code\":\"print(1)\"}", &r);
	expect_error("no id at all", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "X-Sandbox-Id"), "%.400s", r.body);
	resp_free(&r);

	/* /v1/run: the header is the request's sandboxId (the store's) */
	qc = harness_json_quote(PY_KV_GET);
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"python\",\"code\":%s,\"kvEnabled\":true}",
				  qc),
			 0);
	with_id_header(&s, NULL, "/v1/run", body, "hdr-user", NULL, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "b'header'\n"),
		      "/v1/run header only: HTTP %d %.400s", r.code, r.body);
	resp_free(&r);
	free(body);
	ck_assert_int_ge(asprintf(&body,
				  "{\"language\":\"python\",\"code\":%s,\"kvEnabled\":true,"
				  "\"sandboxId\":\"hdr-user\"}",
				  qc),
			 0);
	free(qc);
	with_id_header(&s, NULL, "/v1/run", body, "someone-else", NULL, &r);
	expect_error("/v1/run different ids", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "the request's \\\"sandboxId\\\" name different"), "%.400s",
		      r.body);
	resp_free(&r);
	free(body);

	/* DELETE /v1/kv/<id>: a header naming another id is refused, and
	 * nothing is removed */
	with_id_header(&s, "DELETE", "/v1/kv/hdr-user", NULL, "other-user", NULL, &r);
	expect_error("DELETE other id", &r, 400, "SandboxConfigError");
	ck_assert_msg(strstr(r.body, "the path name different"), "%.400s", r.body);
	resp_free(&r);
	with_id_header(&s, "DELETE", "/v1/kv/hdr-user", NULL, "hdr-user", NULL, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "removed") == 1, "DELETE: %.300s", r.body);
	resp_free(&r);

	/* /healthz (what a load balancer probes) ignores it */
	with_id_header(&s, NULL, "/healthz", NULL, "\xff", "x", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* ---- tests: protocol correctness and a log that never blocks (issue 31) -------------- */

/* DELETE /v1/kv/victim%00x once cleared "victim": the decoded path was cut
 * at the NUL. A request target that decodes to a NUL is refused (400) on
 * every route, and victim's store is left alone. */
START_TEST(kv_path_nul)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true };
	server_start(&s, _i, &o);
	struct resp r;
	run_kv(&s, "/py/visit", PY_VISIT, "victim", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 1"), "victim's visit: HTTP %d [%.300s]",
		      r.code, r.body);
	resp_free(&r);
	static const char *const paths[] = { "/v1/kv/victim%00x", "/v1/kv/victim%00",
					     "/v1/kv/vic%00tim" };
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		struct req q = { .method = "DELETE", .path = paths[i] };
		call(&s, &q, &r);
		expect_error(paths[i], &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	/* the other routes: a NUL in the path or the query is refused too */
	static const char *const more[][2] = {
		{ "GET", "/healthz%00" }, { "GET", "/metrics?x=%00" }, { "POST", "/py/run%00" },
		{ "POST", "/v1/run?a=%00b" },
	};
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
		struct req q = { .method = more[i][0], .path = more[i][1],
				 .body = !strcmp(more[i][0], "POST") ? "{}" : NULL };
		call(&s, &q, &r);
		expect_error(more[i][1], &r, 400, "SandboxConfigError");
		resp_free(&r);
	}
	run_kv(&s, "/py/visit", PY_VISIT, "victim", true, &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "visit 2"),
		      "victim's store after the DELETEs with a NUL: HTTP %d [%.300s] (want visit 2)",
		      r.code, r.body);
	resp_free(&r);
	/* an escaped id that is not a NUL still names its sandbox */
	struct req q = { .method = "DELETE", .path = "/v1/kv/vic%74im" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "sandboxId") &&
			      !strcmp(jstr(r.json, "sandboxId"), "victim") && jnum(r.json, "removed") == 1,
		      "DELETE /v1/kv/vic%%74im: HTTP %d %.300s", r.code, r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

/* Writes 256 KiB values under fresh keys until the store refuses one.
 * Prints "<writes> <kind>", then the error. */
#define PY_FILL                                                                        \
	KV_PY_FILL_WRITES                                                              \
	"print(n, kind)\n"                                                              \
	"print(err)\n"

/* The server's log holds want within 3 s (its writer thread is behind). */
static bool log_has(const struct server *s, const char *want)
{
	for (int i = 0; i < 30; i++) {
		char *l = server_log(s);
		bool found = strstr(l, want) != NULL;
		free(l);
		if (found)
			return true;
		usleep(100 * 1000);
	}
	return false;
}

/* A 24 MiB tmpfs of the mode's user at dir, in a mount namespace of this
 * test's process (a failed test leaves no mount), and moat serve with its
 * store there (the default 16 MiB floor); then PY_FILL as "filler": *n
 * writes, *r the answer. false when this process cannot mount. */
static bool full_store(int mode, char *dir, char *file, struct server *s, int *n,
		       struct resp *r)
{
	if (!harness_is_root())
		return false;
	ck_assert_msg(unshare(CLONE_NEWNS) == 0, "unshare: %s", strerror(errno));
	ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	strcpy(dir, "/tmp/moat-kvfull-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	unsigned id = mode == MODE_ROOTLESS ? ROOTLESS_ID : 0;
	char opts[96];
	snprintf(opts, sizeof opts, "size=24m,mode=0700,uid=%u,gid=%u", id, id);
	ck_assert_msg(mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0, "mount: %s",
		      strerror(errno));
	snprintf(file, 96, "%s/kv.sqlite3", dir);
	struct server_opts o = { .socket = true, .kv = file };
	server_start(s, mode, &o);
	run_kv(s, "/py/run", PY_FILL, "filler", true, r);
	expect_script("fill", r);
	*n = -1;
	ck_assert_msg(sscanf(jstr(r->json, "stdout"), "%d", n) == 1 && *n > 0, "%s",
		      jstr(r->json, "stdout"));
	return true;
}

static void full_store_drop(struct server *s, const char *dir)
{
	server_stop(s);
	ck_assert_int_eq(umount2(dir, MNT_DETACH), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}

/* A full store under moat serve (issue 51 item 3; docs/KV.md, "A full
 * disk"): the program's error and the body of a failed DELETE /v1/kv name
 * no host path; the service's log does. */
START_TEST(kv_full_names_no_path)
{
	HARNESS_MODE_GUARD(_i);
	char dir[64], file[96], kind[64] = "";
	struct server s;
	struct resp r;
	int n;
	if (!full_store(_i, dir, file, &s, &n, &r)) {
		harness_skip("%s: mounting the test's small tmpfs needs root", __func__);
		return;
	}
	ck_assert_msg(!strstr(r.body, dir), "the answer names the store's directory %s: %.600s", dir,
		      r.body);
	ck_assert_msg(sscanf(jstr(r.json, "stdout"), "%*d %63s", kind) == 1 &&
			      !strcmp(kind, "store_table_full") &&
			      strstr(jstr(r.json, "stdout"), "the store is full"),
		      "want store_table_full \"the store is full\": %s", jstr(r.json, "stdout"));
	resp_free(&r);
	ck_assert_msg(log_has(&s, file), "the service's log lacks the store's path");
	/* a store that cannot be opened any more: DELETE's error names no path */
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -f '%s'* && mkdir '%s'", file, file);
	ck_assert_int_eq(system(cmd), 0);
	struct req del = { .method = "DELETE", .path = "/v1/kv/filler" };
	call(&s, &del, &r);
	ck_assert_msg(r.code == 503 && !strstr(r.body, dir),
		      "DELETE with a broken store: HTTP %d %.400s (want 503 without %s)", r.code,
		      r.body, dir);
	resp_free(&r);
	ck_assert_msg(log_has(&s, "DELETE /v1/kv/{id}: key-value store"),
		      "the service's log lacks DELETE's reason");
	full_store_drop(&s, dir);
}
END_TEST

/* Fills what is left of the file system holding dir with one file (another
 * writer on the store's disk); its path into hog. */
static void fill_rest(const char *dir, char *hog, size_t size)
{
	snprintf(hog, size, "%s/hog", dir);
	int fd = open(hog, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	static char block[65536];
	while (write(fd, block, sizeof block) > 0)
		;
	while (write(fd, block, 512) > 0)
		;
	ck_assert_int_eq(close(fd), 0);
	struct statvfs v;
	ck_assert_int_eq(statvfs(dir, &v), 0);
	ck_assert_uint_lt(v.f_bavail * v.f_frsize, 4096);
}

/* A full store under moat serve (issue 51 item 4): the writes stopped at
 * the floor, then another writer took the rest of the disk (nothing
 * free): DELETE /v1/kv still retires the id (the store's reserve), and
 * once the other writer's file is gone, writes work again. */
START_TEST(kv_full_delete_frees)
{
	HARNESS_MODE_GUARD(_i);
	char dir[64], file[96], kind[64] = "";
	struct server s;
	struct resp r;
	int n1, n2 = -1;
	if (!full_store(_i, dir, file, &s, &n1, &r)) {
		harness_skip("%s: mounting the test's small tmpfs needs root", __func__);
		return;
	}
	resp_free(&r);
	char hog[128];
	fill_rest(dir, hog, sizeof hog);
	struct req del = { .method = "DELETE", .path = "/v1/kv/filler" };
	call(&s, &del, &r);
	ck_assert_msg(r.code == 200 && jnum(r.json, "removed") == n1,
		      "DELETE /v1/kv on a full disk: HTTP %d %.400s (want removed %d)", r.code,
		      r.body, n1);
	resp_free(&r);
	ck_assert_int_eq(unlink(hog), 0);
	run_kv(&s, "/py/run", PY_FILL, "filler", true, &r);
	expect_script("fill again", &r);
	ck_assert_msg(sscanf(jstr(r.json, "stdout"), "%d %63s", &n2, kind) == 2 &&
			      n2 >= (n1 + 1) / 2 && !strcmp(kind, "store_table_full"),
		      "after DELETE, writes (want >= %d of them): %s", (n1 + 1) / 2,
		      jstr(r.json, "stdout"));
	resp_free(&r);
	full_store_drop(&s, dir);
}
END_TEST

void serve_kv_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "kv");

	SERVE_ADD(tc, only, kv_store, SERVE_MODES);
	SERVE_ADD(tc, only, kv_off, SERVE_MODES);
	SERVE_ADD(tc, only, kv_default_place, SERVE_MODES);
	SERVE_ADD(tc, only, kv_survives_kill, SERVE_MODES);
	SERVE_ADD(tc, only, kv_redis_two_nodes, SERVE_MODES);
	SERVE_ADD(tc, only, sandbox_id_header, SERVE_MODES);
	SERVE_ADD(tc, only, kv_path_nul, SERVE_MODES);
	SERVE_ADD(tc, only, kv_full_names_no_path, SERVE_MODES);
	SERVE_ADD(tc, only, kv_full_delete_frees, SERVE_MODES);
}
