/* Live sandboxes in moat serve (docs/SANDBOXES.md): /v1/sandboxes, its
 * processes and files, from the outside, as root and rootless (loop index =
 * harness mode). Each test starts its own server (serve_common.c) and
 * speaks to it with curl. The path attacks each set the trap inside the
 * sandbox (a process of its own) and ask the service to follow it: none
 * may reach outside the sandbox's own tree, none may hang. */
#include "serve_common.h"
#include "skip.h"

#include <sys/random.h>

#define SBX_SKIP "live sandboxes are not built into this moat (runtime/bin/moat-agent)"

static void sbx_req(struct server *s, const char *method, const char *path, const char *body,
		    struct resp *r)
{
	struct req q = { .method = method, .path = path, .body = body };
	call(s, &q, r);
}

/* POST /v1/sandboxes: the id (malloc'd), or NULL when live sandboxes are
 * not here (404 on an older moat: the test fails there, it is not
 * skipped; a missing agent is a skip). */
static char *sbx_create(struct server *s, const char *body)
{
	struct resp r;
	sbx_req(s, "POST", "/v1/sandboxes", body ? body : "{}", &r);
	if (r.code == 503 && strstr(r.body, "not built into this moat")) {
		resp_free(&r);
		return NULL;
	}
	ck_assert_msg(r.code == 201, "%s: POST /v1/sandboxes %s: HTTP %d: %.2000s",
		      MODE_NAME[s->mode], body ? body : "{}", r.code, r.body ? r.body : "");
	const char *id = jstr(r.json, "id");
	ck_assert_msg(id && strlen(id) == 36 && !strncmp(id, "sbx_", 4), "bad id in %s", r.body);
	for (int i = 4; i < 36; i++)
		ck_assert_msg(isxdigit((unsigned char)id[i]), "id not hex: %s", id);
	char *ret = strdup(id);
	resp_free(&r);
	return ret;
}

static bool sbx_start(struct server *s, int mode, char **id)
{
	server_start(s, mode, &(struct server_opts){ .pool = 0 });
	*id = sbx_create(s, NULL);
	if (*id)
		return true;
	server_stop(s);
	harness_skip(SBX_SKIP);
	return false;
}

static void sbx_path(char *buf, size_t n, const char *id, const char *rest)
{
	snprintf(buf, n, "/v1/sandboxes/%s%s", id, rest);
}

/* A process started (not streamed): its pid. */
static int sbx_exec(struct server *s, const char *id, const char *body)
{
	char p[128];
	sbx_path(p, sizeof p, id, "/processes");
	struct resp r;
	sbx_req(s, "POST", p, body, &r);
	ck_assert_msg(r.code == 201, "%s: start %s: HTTP %d: %.2000s", MODE_NAME[s->mode], body,
		      r.code, r.body);
	int pid = (int)jnum(r.json, "pid");
	ck_assert_int_ge(pid, 1);
	resp_free(&r);
	return pid;
}

/* A shell line run to its end inside the sandbox: its exit code. */
static int sbx_sh(struct server *s, const char *id, const char *line)
{
	char *q = harness_json_quote(line), body[8192];
	snprintf(body, sizeof body, "{\"cmd\":%s}", q);
	free(q);
	int pid = sbx_exec(s, id, body);
	char p[160];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=30000", id, pid);
	struct resp r;
	sbx_req(s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "state") && !strcmp(jstr(r.json, "state"), "exited"),
		      "%s: %s: HTTP %d %s", MODE_NAME[s->mode], line, r.code, r.body);
	int code = (int)jnum(r.json, "exitCode");
	resp_free(&r);
	return code;
}

static void sbx_delete(struct server *s, const char *id)
{
	char p[96];
	sbx_path(p, sizeof p, id, "");
	struct resp r;
	sbx_req(s, "DELETE", p, NULL, &r);
	ck_assert_msg(r.code == 200, "%s: DELETE: %d %s", MODE_NAME[s->mode], r.code, r.body);
	resp_free(&r);
}

/* GET a file (path already in the URL's form) into r. */
static void sbx_get_file(struct server *s, const char *id, const char *path, const char *range,
			 struct resp *r)
{
	char p[4200], h[128];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=%s", id, path);
	const char *extra[] = { "-H", h, NULL };
	snprintf(h, sizeof h, "Range: %s", range ? range : "");
	struct req q = { .path = p, .extra = range ? extra : NULL, .max_ms = 20000 };
	call(s, &q, r);
}

static void sbx_put_file(struct server *s, const char *id, const char *path, const char *file,
			 bool mkdirs, struct resp *r)
{
	char p[4200];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=%s%s", id, path, mkdirs ? "&mkdirs=1" : "");
	struct req q = { .method = "PUT", .path = p, .body_file = file, .max_ms = 60000 };
	call(s, &q, r);
}

/* ---- lifecycle ---- */

START_TEST(sbx_lifecycle)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	sbx_delete(&s, id);
	free(id);
	/* with metadata, listed, filtered, paged */
	char *ids[3];
	for (int k = 0; k < 3; k++) {
		char body[128];
		snprintf(body, sizeof body, "{\"metadata\":{\"team\":\"%s\",\"n\":\"%d\"}}",
			 k < 2 ? "blue" : "red", k);
		ids[k] = sbx_create(&s, body);
	}
	struct resp r;
	sbx_req(&s, "GET", "/v1/sandboxes?metadata.team=blue", NULL, &r);
	ck_assert_int_eq(r.code, 200);
	const cJSON *list = jget(r.json, "sandboxes");
	ck_assert_int_eq(cJSON_GetArraySize(list), 2);
	for (const cJSON *it = list->child; it; it = it->next)
		ck_assert_str_eq(jstr(jget(it, "metadata"), "team"), "blue");
	resp_free(&r);
	sbx_req(&s, "GET", "/v1/sandboxes?limit=2", NULL, &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_int_eq(cJSON_GetArraySize(jget(r.json, "sandboxes")), 2);
	const char *next = jstr(r.json, "next");
	ck_assert_msg(next, "a full page has a next: %s", r.body);
	char p[160];
	snprintf(p, sizeof p, "/v1/sandboxes?limit=2&next=%s", next);
	struct resp r2;
	sbx_req(&s, "GET", p, NULL, &r2);
	ck_assert_int_eq(cJSON_GetArraySize(jget(r2.json, "sandboxes")), 1);
	ck_assert_msg(cJSON_IsNull(jget(r2.json, "next")), "the last page: %s", r2.body);
	resp_free(&r);
	resp_free(&r2);
	/* get: state, limits, usage */
	sbx_path(p, sizeof p, ids[0], "");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_str_eq(jstr(r.json, "state"), "running");
	ck_assert_ptr_nonnull(jget(r.json, "usage"));
	ck_assert_ptr_nonnull(jget(jget(r.json, "usage"), "cpuTimeMs"));
	ck_assert_ptr_nonnull(jget(r.json, "limits"));
	resp_free(&r);
	/* extend */
	sbx_path(p, sizeof p, ids[0], "/timeout");
	sbx_req(&s, "POST", p, "{\"lifetimeMs\":120000}", &r);
	ck_assert_msg(r.code == 200, "timeout: %d %s", r.code, r.body);
	resp_free(&r);
	/* a background process in each, then delete: nothing of them left */
	char marker[64];
	snprintf(marker, sizeof marker, "moat-sbx-del-%d-%ld", (int)getpid(), harness_now_ms());
	for (int k = 0; k < 3; k++) {
		char body[256];
		snprintf(body, sizeof body, "{\"argv\":[\"sh\",\"-c\",\"sleep 300\",\"%s\"]}", marker);
		sbx_exec(&s, ids[k], body);
	}
	long t0 = harness_now_ms();
	while (marked(marker) < 3 && harness_now_ms() - t0 < 5000)
		harness_sleep_ms(50);
	ck_assert_int_eq(marked(marker), 3);
	ck_assert_msg(cg_leaves_of(s.p.pid, NULL, 0) > 0 || _i == MODE_ROOTLESS,
		      "root: the sandboxes have cgroup leaves");
	for (int k = 0; k < 3; k++) {
		sbx_delete(&s, ids[k]);
		sbx_path(p, sizeof p, ids[k], "");
		sbx_req(&s, "GET", p, NULL, &r);
		expect_error("a deleted sandbox", &r, 404, "SandboxNotFound");
		resp_free(&r);
		free(ids[k]);
	}
	/* gone when DELETE answered: no process, no cgroup leaf */
	ck_assert_msg(marked(marker) == 0, "%s: a process outlived its sandbox's DELETE",
		      MODE_NAME[_i]);
	char where[256] = "";
	t0 = harness_now_ms();
	while (cg_leaves_of(s.p.pid, where, sizeof where) > 0 && harness_now_ms() - t0 < 2000)
		harness_sleep_ms(50);
	ck_assert_msg(cg_leaves_of(s.p.pid, where, sizeof where) == 0,
		      "%s: cgroup leaves left after DELETE (%s)", MODE_NAME[_i], where);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_other_caller)
{
	if (!harness_is_root()) {
		harness_skip("another caller's uid needs root to switch to");
		return;
	}
	static const char *const args[] = { "--socket-group", "nogroup", NULL };
	struct server s;
	server_start(&s, _i, &(struct server_opts){ .pool = 0, .socket = true, .args = args });
	ck_assert_int_eq(chmod(s.dir, 0711), 0);
	char *id = sbx_create(&s, NULL);
	if (!id) {
		server_stop(&s);
		harness_skip(SBX_SKIP);
		return;
	}
	const char *const rests[][2] = {
		{ "GET", "" }, { "DELETE", "" }, { "POST", "/processes" }, { "GET", "/processes" },
		{ "GET", "/files?path=/sandbox" }, { "POST", "/timeout" },
		{ "GET", "/files/list?path=/sandbox" },
	};
	for (size_t k = 0; k < sizeof rests / sizeof rests[0]; k++) {
		char p[160];
		sbx_path(p, sizeof p, id, rests[k][1]);
		int st = status_as_other(&s, rests[k][0], p);
		ck_assert_msg(st == 404, "%s: another uid's %s %s: %d (want 404)", MODE_NAME[_i],
			      rests[k][0], rests[k][1], st);
	}
	/* and its own list does not show it */
	char p[96];
	sbx_path(p, sizeof p, id, "");
	struct resp r;
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 200); /* the owner still has it */
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- processes ---- */

START_TEST(sbx_exec_streamed)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[128];
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	struct resp r;
	sbx_req(&s, "POST", p, "{\"cmd\":\"echo hi; echo oops >&2; exit 7\"}", &r);
	ck_assert_msg(r.code == 200, "%s: streamed start: %d %s", MODE_NAME[_i], r.code, r.body);
	ck_assert_msg(strstr(r.body, "{\"type\":\"stdout\",\"data\":\"hi\\n\"}") &&
			      strstr(r.body, "{\"type\":\"stderr\",\"data\":\"oops\\n\"}") &&
			      strstr(r.body, "\"type\":\"exit\"") && strstr(r.body, "\"exitCode\":7"),
		      "%s: the stream: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* the same with argv and Accept: application/x-ndjson, env and cwd */
	sbx_path(p, sizeof p, id, "/processes");
	const char *extra[] = { "-H", "Accept: application/x-ndjson", NULL };
	struct req q = { .path = p, .extra = extra,
			 .body = "{\"argv\":[\"sh\",\"-c\",\"echo $FOO; pwd\"],\"env\":{\"FOO\":\"bar\"},"
				 "\"cwd\":\"/tmp\"}" };
	call(&s, &q, &r);
	/* its two lines may come in one read or two */
	ck_assert_msg(r.code == 200 && strstr(r.body, "bar\\n") && strstr(r.body, "/tmp\\n") &&
			      strstr(r.body, "\"exitCode\":0"),
		      "%s: argv/env/cwd: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* a cwd outside, a missing command */
	sbx_req(&s, "POST", p, "{\"argv\":[\"true\"],\"cwd\":\"/etc\"}", &r);
	expect_error("a cwd outside the sandbox's tree", &r, 400, "SandboxConfigError");
	resp_free(&r);
	sbx_req(&s, "POST", p, "{\"argv\":[\"no-such-command-here\"]}", &r);
	expect_error("a missing command", &r, 400, "SandboxConfigError");
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_background_signal)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	int pid = sbx_exec(&s, id, "{\"argv\":[\"sleep\",\"300\"]}");
	char p[160];
	sbx_path(p, sizeof p, id, "/processes");
	struct resp r;
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	const cJSON *list = jget(r.json, "processes");
	bool seen = false;
	for (const cJSON *it = list ? list->child : NULL; it; it = it->next)
		seen |= (int)jnum(it, "pid") == pid && !strcmp(jstr(it, "state"), "running");
	ck_assert_msg(seen, "%s: the background sleep is not listed running: %s", MODE_NAME[_i],
		      r.body);
	resp_free(&r);
	/* still there a moment later: it runs in the background */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=300", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_str_eq(jstr(r.json, "state"), "running");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/signal", id, pid);
	sbx_req(&s, "POST", p, "{\"signal\":\"TERM\"}", &r);
	ck_assert_msg(r.code == 200, "signal: %d %s", r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=10000", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "exited") &&
			      (int)jnum(r.json, "signal") == SIGTERM,
		      "%s: after TERM: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* a process of another sandbox, or none: 404 */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/signal", id, 4000000);
	sbx_req(&s, "POST", p, "{\"signal\":\"KILL\"}", &r);
	expect_error("no such process", &r, 404, "ProcessNotFound");
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_stdin_and_reconnect)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	int pid = sbx_exec(&s, id, "{\"argv\":[\"cat\"],\"stdin\":true}");
	char p[160];
	struct resp r;
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/stdin", id, pid);
	sbx_req(&s, "POST", p, "hello from stdin\n", &r);
	ck_assert_msg(r.code == 200, "stdin: %d %s", r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/stdin/close", id, pid);
	sbx_req(&s, "POST", p, "", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/output", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "hello from stdin\\n") &&
			      strstr(r.body, "\"exitCode\":0"),
		      "%s: cat's output: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* reconnect: a client that hung up, another that attaches later and
	 * gets what came after (the process writes "two" only once /sandbox/go
	 * exists, made after the first client is gone) */
	pid = sbx_exec(&s, id, "{\"cmd\":\"echo one; while ! test -e /sandbox/go; do sleep 0.1; "
			       "done; echo two; sleep 300\"}");
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/output", id, pid);
	struct req q = { .path = p, .max_ms = 1500 };
	call(&s, &q, &r);
	ck_assert_msg(r.body && strstr(r.body, "one\\n") && !strstr(r.body, "two"),
		      "%s: the first client: %s", MODE_NAME[_i], r.body ? r.body : "");
	resp_free(&r);
	ck_assert_int_eq(sbx_sh(&s, id, "touch /sandbox/go"), 0);
	q.max_ms = 4000;
	long t0 = harness_now_ms();
	for (;;) { /* the first client's hang-up is seen within a wait */
		call(&s, &q, &r);
		if (r.code != 409 || harness_now_ms() - t0 > 5000)
			break;
		resp_free(&r);
		harness_sleep_ms(200);
	}
	ck_assert_msg(r.body && strstr(r.body, "two\\n") && !strstr(r.body, "one"),
		      "%s: the reconnected client: %d %s", MODE_NAME[_i], r.code,
		      r.body ? r.body : "");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/signal", id, pid);
	sbx_req(&s, "POST", p, "{\"signal\":\"KILL\"}", &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/output", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(strstr(r.body, "\"signal\":9"), "%s: the exit after KILL: %s", MODE_NAME[_i],
		      r.body);
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- files ---- */

static void random_file(const char *path, size_t len)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	char buf[65536];
	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof buf ? len - done : sizeof buf;
		ck_assert_int_eq(getrandom(buf, n, 0), (ssize_t)n);
		ck_assert_int_eq(fwrite(buf, 1, n, f), n);
		done += n;
	}
	ck_assert_int_eq(fclose(f), 0);
}

static long rss_kb(pid_t pid)
{
	const char *v = proc_status_field(pid, "VmRSS");
	return v ? atol(v) : -1;
}

START_TEST(sbx_files_roundtrip)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char src[160];
	snprintf(src, sizeof src, "%s/one.bin", s.dir);
	random_file(src, 1 << 20);
	struct resp r;
	sbx_put_file(&s, id, "/sandbox/a/b/one.bin", src, true, &r);
	ck_assert_msg(r.code == 201 && (long)jnum(r.json, "size") == 1 << 20,
		      "%s: PUT 1 MiB: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_get_file(&s, id, "/sandbox/a/b/one.bin", NULL, &r);
	size_t len;
	char *want = slurp(src, &len);
	ck_assert_msg(r.code == 200 && r.body_len == len && !memcmp(r.body, want, len),
		      "%s: GET back: %d, %zu bytes", MODE_NAME[_i], r.code, r.body_len);
	resp_free(&r);
	/* ranges */
	sbx_get_file(&s, id, "/sandbox/a/b/one.bin", "bytes=10-19", &r);
	ck_assert_msg(r.code == 206 && r.body_len == 10 && !memcmp(r.body, want + 10, 10),
		      "%s: a range: %d %zu", MODE_NAME[_i], r.code, r.body_len);
	resp_free(&r);
	sbx_get_file(&s, id, "/sandbox/a/b/one.bin", "bytes=-5", &r);
	ck_assert_msg(r.code == 206 && r.body_len == 5 && !memcmp(r.body, want + len - 5, 5),
		      "%s: a suffix range: %d %zu", MODE_NAME[_i], r.code, r.body_len);
	resp_free(&r);
	sbx_get_file(&s, id, "/sandbox/a/b/one.bin", "bytes=2000000-", &r);
	ck_assert_int_eq(r.code, 416);
	resp_free(&r);
	free(want);
	/* the sandbox sees the same bytes (its own sha256sum) */
	char line[256];
	snprintf(line, sizeof line, "test \"$(wc -c < /sandbox/a/b/one.bin)\" -eq 1048576");
	ck_assert_int_eq(sbx_sh(&s, id, line), 0);
	/* 20 MiB streamed both ways: the service does not hold it */
	snprintf(src, sizeof src, "%s/big.bin", s.dir);
	random_file(src, 20u << 20);
	long before = rss_kb(s.p.pid);
	sbx_put_file(&s, id, "/tmp/big.bin", src, false, &r);
	ck_assert_msg(r.code == 201, "%s: PUT 20 MiB: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_get_file(&s, id, "/tmp/big.bin", NULL, &r);
	want = slurp(src, &len);
	ck_assert_msg(r.code == 200 && r.body_len == len && !memcmp(r.body, want, len),
		      "%s: GET 20 MiB back: %d, %zu bytes", MODE_NAME[_i], r.code, r.body_len);
	free(want);
	resp_free(&r);
	long after = rss_kb(s.p.pid);
	ck_assert_msg(before > 0 && after - before < 10 * 1024,
		      "%s: the service's RSS grew by %ld KiB moving 20 MiB", MODE_NAME[_i],
		      after - before);
	unlink(src);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_files_ops)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[256];
	struct resp r;
	sbx_path(p, sizeof p, id, "/files/mkdir");
	sbx_req(&s, "POST", p, "{\"path\":\"/sandbox/x/y/z\",\"parents\":true}", &r);
	ck_assert_msg(r.code == 200, "mkdir: %d %s", r.code, r.body);
	resp_free(&r);
	sbx_req(&s, "POST", p, "{\"path\":\"/sandbox/x\"}", &r);
	expect_error("mkdir of an existing one", &r, 409, "Conflict");
	resp_free(&r);
	ck_assert_int_eq(sbx_sh(&s, id, "echo data > /sandbox/x/y/f.txt"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/sandbox/x/y/f.txt", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "type"), "file") &&
			      (int)jnum(r.json, "size") == 5,
		      "stat: %d %s", r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/x&depth=3", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && (int)jnum(r.json, "count") == 3 &&
			      strstr(r.body, "\"/sandbox/x/y/f.txt\""),
		      "list: %d %s", r.code, r.body);
	resp_free(&r);
	sbx_path(p, sizeof p, id, "/files/rename");
	sbx_req(&s, "POST", p, "{\"from\":\"/sandbox/x/y/f.txt\",\"to\":\"/tmp/g.txt\"}", &r);
	expect_error("a rename across /sandbox and /tmp", &r, 400, "SandboxConfigError");
	resp_free(&r);
	sbx_req(&s, "POST", p, "{\"from\":\"/sandbox/x/y/f.txt\",\"to\":\"/sandbox/g.txt\"}", &r);
	ck_assert_msg(r.code == 200, "rename: %d %s", r.code, r.body);
	resp_free(&r);
	ck_assert_int_eq(sbx_sh(&s, id, "test \"$(cat /sandbox/g.txt)\" = data && ! test -e /sandbox/x/y/f.txt"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/x", id);
	sbx_req(&s, "DELETE", p, NULL, &r);
	expect_error("removing a non-empty directory", &r, 409, "Conflict");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/x&recursive=1", id);
	sbx_req(&s, "DELETE", p, NULL, &r);
	ck_assert_msg(r.code == 200, "rm -r: %d %s", r.code, r.body);
	resp_free(&r);
	ck_assert_int_eq(sbx_sh(&s, id, "! test -e /sandbox/x"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/sandbox/x", id);
	sbx_req(&s, "GET", p, NULL, &r);
	expect_error("stat of a removed one", &r, 404, "FileNotFound");
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- the path attacks ---- */

/* A file request that must be refused (any 4xx but never a 200 with a
 * body from outside), and quickly. */
static void refused(struct server *s, const char *what, const char *method, const char *path,
		    int want)
{
	struct resp r;
	struct req q = { .method = method, .path = path, .max_ms = 10000 };
	if (method && !strcmp(method, "PUT"))
		q.body = "overwritten by the service";
	call(s, &q, &r);
	ck_assert_msg(r.curl_rc == 0, "%s: %s: no answer in 10 s (curl %d): it hangs",
		      MODE_NAME[s->mode], what, r.curl_rc);
	ck_assert_msg(r.code == want, "%s: %s: HTTP %d (want %d): %.500s", MODE_NAME[s->mode], what,
		      r.code, want, r.body ? r.body : "");
	resp_free(&r);
}

START_TEST(sbx_path_attacks)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[512];
	/* .. and paths outside the two roots: refused before the agent */
	const char *outside[] = { "/sandbox/../etc/passwd", "/tmp/../../etc/passwd", "/etc/passwd",
				  "/sandboxx/a", "sandbox/a", "/sandbox/./a", "/dev/null",
				  "/proc/self/environ" };
	for (size_t k = 0; k < sizeof outside / sizeof outside[0]; k++) {
		snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=%s", id, outside[k]);
		refused(&s, outside[k], NULL, p, 400);
		refused(&s, outside[k], "PUT", p, 400);
	}
	/* an absolute symlink to /etc, one to a file, a relative one up:
	 * never followed, for reading, writing, listing, stat */
	ck_assert_int_eq(sbx_sh(&s, id, "ln -s /etc /sandbox/x && ln -s /etc/passwd /sandbox/p && "
				       "ln -s ../../etc /sandbox/up && mkdir /sandbox/d && "
				       "ln -s /etc/hostname /sandbox/d/h"), 0);
	const char *links[] = { "/sandbox/x/passwd", "/sandbox/p", "/sandbox/up/passwd",
				"/sandbox/d/h", "/sandbox/x/newfile" };
	for (size_t k = 0; k < sizeof links / sizeof links[0]; k++) {
		snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=%s", id, links[k]);
		refused(&s, links[k], NULL, p, 400);
		refused(&s, links[k], "PUT", p, 400);
	}
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/x", id);
	refused(&s, "list through a symlink", NULL, p, 400);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/x/passwd&mkdirs=1", id);
	refused(&s, "mkdirs through a symlink", "PUT", p, 400);
	/* the listing shows the link as a link, not what it points at */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox&depth=5", id);
	struct resp r;
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"/sandbox/x\",\"type\":\"symlink\"") &&
			      !strstr(r.body, "passwd"),
		      "%s: a listing followed a symlink: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	/* a FIFO: neither read nor write may hang */
	ck_assert_int_eq(sbx_sh(&s, id, "mkfifo /sandbox/fifo"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/fifo", id);
	refused(&s, "a FIFO read", NULL, p, 400);
	refused(&s, "a FIFO write", "PUT", p, 400);
	/* a device node: the sandbox cannot make one (no CAP_MKNOD), and
	 * none outside is reachable by name or by link */
	ck_assert_int_ne(sbx_sh(&s, id, "mknod /sandbox/null c 1 3"), 0);
	ck_assert_int_eq(sbx_sh(&s, id, "ln -s /dev/zero /sandbox/zero"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/zero", id);
	refused(&s, "a device by symlink", NULL, p, 400);
	/* a hard link to a file outside: the kernel refuses it (another
	 * filesystem), so there is nothing to read */
	ck_assert_int_ne(sbx_sh(&s, id, "ln /etc/passwd /sandbox/hard"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/hard", id);
	refused(&s, "a hard link to outside", NULL, p, 404);
	/* a socket in the tree: refused */
	ck_assert_int_eq(sbx_sh(&s, id, "python3 -c 'import socket; socket.socket(socket.AF_UNIX)"
				       ".bind(\"/sandbox/sock\")' || true"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/sandbox/sock", id);
	sbx_req(&s, "GET", p, NULL, &r);
	bool have_sock = r.code == 200;
	resp_free(&r);
	if (have_sock) {
		snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/sock", id);
		refused(&s, "a socket", NULL, p, 400);
	}
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_symlink_race)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	/* inside: /sandbox/r flips between a directory holding a file and a
	 * symlink to /etc, as fast as it can */
	sbx_exec(&s, id, "{\"cmd\":\"while :; do mkdir -p /sandbox/r && echo inside > "
			 "/sandbox/r/passwd; rm -rf /sandbox/r; ln -s /etc /sandbox/r; rm -f "
			 "/sandbox/r; done\"}");
	char p[256];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/r/passwd", id);
	int ok = 0, refusals = 0;
	for (int k = 0; k < 60; k++) {
		struct resp r;
		struct req q = { .path = p, .max_ms = 10000 };
		call(&s, &q, &r);
		ck_assert_msg(r.curl_rc == 0, "%s: a racing read hung", MODE_NAME[_i]);
		if (r.code == 200) {
			/* the inside file, whole or caught between its creation
			 * and the echo's write (empty or a prefix), or this
			 * test's own write below landed inside it before the
			 * loop removed it: anything else came from outside */
			ck_assert_msg(r.body_len <= 7 &&
					      (r.body_len == 0 || !memcmp(r.body, "inside\n", r.body_len) ||
					       !memcmp(r.body, "written", r.body_len)),
				      "%s: a racing read reached outside: %.300s", MODE_NAME[_i],
				      r.body);
			ok++;
		} else {
			ck_assert_msg(r.code == 400 || r.code == 404, "%s: %d %s", MODE_NAME[_i],
				      r.code, r.body);
			refusals++;
		}
		resp_free(&r);
		/* and a write racing it never lands outside */
		struct req w = { .method = "PUT", .path = p, .body = "written", .max_ms = 10000 };
		call(&s, &w, &r);
		ck_assert_msg(r.curl_rc == 0 && (r.code == 201 || r.code == 400 || r.code == 404),
			      "%s: a racing write: %d %s", MODE_NAME[_i], r.code, r.body);
		resp_free(&r);
	}
	/* the sandbox's own /etc/passwd is as it was (the root is read-only
	 * anyway: a write there could only fail) */
	ck_assert_int_eq(sbx_sh(&s, id, "! grep -q written /etc/passwd"), 0);
	(void)ok;
	(void)refusals;
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_tree_bounds)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	/* deeper than the bound: the listing stops at its depth */
	ck_assert_int_eq(sbx_sh(&s, id, "d=/sandbox/deep; for i in $(seq 40); do d=$d/d; done; "
				       "mkdir -p $d"), 0);
	char p[256];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/deep&depth=33", id);
	struct resp r;
	sbx_req(&s, "GET", p, NULL, &r);
	expect_error("a depth past the bound", &r, 400, "SandboxConfigError");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/deep&depth=32", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && (int)jnum(r.json, "count") == 32,
		      "%s: a 40-deep tree listed 32 deep: %d %.300s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* a recursive removal of a tree deeper than its bound: refused, not
	 * unbounded */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/deep&recursive=1", id);
	sbx_req(&s, "DELETE", p, NULL, &r);
	ck_assert_msg(r.code == 400 && strstr(r.body, "deeper"), "%s: rm -r of a 40-deep tree: %d %s",
		      MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* wider than the bound: the listing is cut and says so */
	ck_assert_int_eq(sbx_sh(&s, id, "mkdir /sandbox/wide && cd /sandbox/wide && "
				       "seq 10100 | xargs touch"), 0);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/wide", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && (int)jnum(r.json, "count") == 10000 &&
			      cJSON_IsTrue(jget(r.json, "truncated")),
		      "%s: a 10100-wide directory: %d count %g", MODE_NAME[_i], r.code,
		      r.json ? jnum(r.json, "count") : -1);
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* ---- the agent killed, the service killed ---- */

START_TEST(sbx_agent_killed)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	/* the agent is every process's parent: kill -9 it from inside (the
	 * start itself may already see it gone) */
	char p[160];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes");
	sbx_req(&s, "POST", p, "{\"cmd\":\"kill -9 $PPID\"}", &r);
	ck_assert_msg(r.code == 201 || r.code == 410, "%s: the start: %d %s", MODE_NAME[_i],
		      r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/sandbox", id);
	long t0 = harness_now_ms();
	for (;;) {
		sbx_req(&s, "GET", p, NULL, &r);
		if (r.code != 200 || harness_now_ms() - t0 > 10000)
			break;
		resp_free(&r);
		harness_sleep_ms(100);
	}
	expect_error("a sandbox whose agent was killed", &r, 410, "SandboxGone");
	const char *msg = jstr(jget(r.json, "error"), "message");
	ck_assert_msg(msg && strstr(msg, "agent") && strstr(msg, "signal 9"),
		      "%s: the 410 does not name why: %s", MODE_NAME[_i], msg ? msg : "(none)");
	resp_free(&r);
	sbx_path(p, sizeof p, id, "/processes");
	sbx_req(&s, "POST", p, "{\"argv\":[\"true\"]}", &r);
	expect_error("a process in it", &r, 410, "SandboxGone");
	resp_free(&r);
	sbx_path(p, sizeof p, id, "");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "ended"), "GET: %s", r.body);
	resp_free(&r);
	free(id);
	server_stop(&s);
}
END_TEST

START_TEST(sbx_kill9_leaves_nothing)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char marker[64], body[256];
	snprintf(marker, sizeof marker, "moat-sbx-k9-%d-%ld", (int)getpid(), harness_now_ms());
	snprintf(body, sizeof body, "{\"argv\":[\"sh\",\"-c\",\"sleep 300\",\"%s\"]}", marker);
	sbx_exec(&s, id, body);
	expect_kill9_leaves_nothing(&s, marker, "sandbox");
	free(id);
	server_cleanup(&s);
}
END_TEST

/* A route of a sandbox's refuses a key it does not take, naming its own
 * keys (srv_json_body): not one silently ignored, nor a list of another
 * route's. */
START_TEST(sbx_route_keys)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[128];
	sbx_path(p, sizeof p, id, "/processes");
	expect_own_keys(&s, p, "{\"argv\":[\"true\"],\"code\":\"x\"}", "code",
			"argv, cmd, env, cwd, stdin", "memoryMb");
	sbx_path(p, sizeof p, id, "/timeout");
	expect_own_keys(&s, p, "{\"lifetimeMs\":120000,\"idleTimeoutMs\":1000}", "idleTimeoutMs",
			"lifetimeMs", "argv");
	sbx_path(p, sizeof p, id, "/files/mkdir");
	expect_own_keys(&s, p, "{\"path\":\"/sandbox/d\",\"mode\":448}", "mode", "path, parents",
			"from");
	sbx_path(p, sizeof p, id, "/files/rename");
	expect_own_keys(&s, p, "{\"from\":\"/sandbox/a\",\"to\":\"/sandbox/b\",\"force\":true}",
			"force", "from, to", "parents");
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* Live sandboxes reserve their memoryMb and cpus from the service-wide
 * budgets the sessions use (serve.sandboxes, issue 45's hole 3): past it,
 * a 503 naming the budget; a deleted sandbox gives its reservation back. */
START_TEST(sbx_budget)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){
		.pool = 0,
		.config = "{\"serve\":{\"sandboxes\":{\"memoryMb\":2560,\"cpus\":64}}}" });
	char *ids[4] = { 0 };
	int made = 0;
	struct resp r;
	for (int i = 0; i < 4; i++) {
		sbx_req(&s, "POST", "/v1/sandboxes", "{\"memoryMb\":1024}", &r);
		if (r.code == 503 && strstr(r.body, "not built into this moat")) {
			resp_free(&r);
			server_stop(&s);
			harness_skip(SBX_SKIP);
			return;
		}
		if (r.code != 201) {
			ck_assert_msg(r.code == 503 && strstr(r.body, "serve.sandboxes.memoryMb 2560"),
				      "%s: a sandbox past the memory budget: HTTP %d %s",
				      MODE_NAME[_i], r.code, r.body);
			char ra[32];
			ck_assert_ptr_nonnull(resp_header(&r, "Retry-After", ra, sizeof ra));
			resp_free(&r);
			break;
		}
		ids[made++] = strdup(jstr(r.json, "id"));
		resp_free(&r);
	}
	ck_assert_msg(made == 2, "%s: %d sandboxes of 1 GiB in a 2560 MiB budget", MODE_NAME[_i],
		      made);
	get(&s, "/healthz?detail=1", &r);
	ck_assert_msg(jnum(jget(jget(r.json, "sandboxes"), "memoryMb"), "reserved") == 2048,
		      "%s: /healthz?detail=1 with two sandboxes of 1 GiB: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	sbx_delete(&s, ids[0]);
	free(ids[0]);
	ids[0] = sbx_create(&s, "{\"memoryMb\":1024}");
	ck_assert_ptr_nonnull(ids[0]);
	for (int i = 0; i < made; i++) {
		sbx_delete(&s, ids[i]);
		free(ids[i]);
	}
	get(&s, "/healthz?detail=1", &r);
	ck_assert_msg(jnum(jget(jget(r.json, "sandboxes"), "memoryMb"), "reserved") == 0,
		      "%s: reservations left after every sandbox ended: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	server_stop(&s);
}
END_TEST

Suite *serve_sandboxes_suite(void)
{
	Suite *s = suite_create("serve_sandboxes");
	TCase *tc = tcase_create("serve_sandboxes");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, sbx_lifecycle, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_other_caller, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_exec_streamed, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_background_signal, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_stdin_and_reconnect, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_files_roundtrip, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_files_ops, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_path_attacks, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_symlink_race, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_tree_bounds, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_agent_killed, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_kill9_leaves_nothing, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_budget, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_route_keys, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
