/* Live sandboxes in moat serve (docs/SANDBOXES.md): /v1/sandboxes, its
 * processes and files, from the outside, as root and rootless (loop index =
 * harness mode). Each test starts its own server (serve_common.c) and
 * speaks to it with curl. The path attacks each set the trap inside the
 * sandbox (a process of its own) and ask the service to follow it: none
 * may reach outside the sandbox's own tree, none may hang. */
#include "serve_common.h"
#include "ses_common.h"
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
	ck_assert_msg(id_form_ok(id, "sbx_", NULL), "bad id in %s", r.body);
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
	/* a background process in each, then delete: nothing of them left.
	 * It forks nothing (a builtin read of an open stdin): a child of sh
	 * between its fork and its exec carries the marker too, and may stay
	 * so (rootless the sandbox is frozen after the start), counted 4 */
	char marker[64];
	snprintf(marker, sizeof marker, "moat-sbx-del-%d-%ld", (int)getpid(), harness_now_ms());
	for (int k = 0; k < 3; k++) {
		char body[256];
		snprintf(body, sizeof body,
			 "{\"argv\":[\"sh\",\"-c\",\"read x\",\"%s\"],\"stdin\":true}", marker);
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

/* A process on a terminal (pty): the sandbox's own devpts, its controlling
 * tty, the size asked, a resize seen by a fresh stty; no pty of the host's
 * visible (the sandbox's devpts holds this one only). */
START_TEST(sbx_pty)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[160];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p,
		"{\"cmd\":\"tty; stty size; ls /dev/pts | tr '\\\\n' ' '; echo; "
		"test -t 0 && test -t 2 && echo all-tty\",\"pty\":{\"rows\":24,\"cols\":80}}",
		&r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "/dev/pts/0") && strstr(r.body, "24 80") &&
			      strstr(r.body, "0 ptmx ") && strstr(r.body, "all-tty") &&
			      strstr(r.body, "\"exitCode\":0") && !strstr(r.body, "\"stderr\""),
		      "%s: a pty process: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* a resize between two stty size: the second sees it */
	int pid = sbx_exec(&s, id, "{\"cmd\":\"read x; stty size\",\"pty\":{\"rows\":24,\"cols\":80}}");
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/resize", id, pid);
	sbx_req(&s, "POST", p, "{\"rows\":40,\"cols\":120}", &r);
	ck_assert_msg(r.code == 200, "%s: resize: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_req(&s, "POST", p, "{\"rows\":0,\"cols\":120}", &r);
	expect_error("a resize to 0 rows", &r, 400, "SandboxConfigError");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/stdin", id, pid);
	sbx_req(&s, "POST", p, "go\n", &r);
	ck_assert_msg(r.code == 200, "%s: stdin to a pty: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/output", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "40 120") && !strstr(r.body, "24 80") &&
			      strstr(r.body, "\"exitCode\":0"),
		      "%s: stty size after the resize: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* a terminal has no stdin to close (its EOF is ctrl-D); ctrl-C is SIGINT */
	pid = sbx_exec(&s, id, "{\"argv\":[\"sleep\",\"300\"],\"pty\":{\"rows\":5,\"cols\":5}}");
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/stdin/close", id, pid);
	sbx_req(&s, "POST", p, "", &r);
	expect_error("closing a pty's stdin", &r, 409, "Conflict");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/stdin", id, pid);
	sbx_req(&s, "POST", p, "\003", &r);
	ck_assert_msg(r.code == 200, "%s: ctrl-C to a pty: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=10000", id, pid);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"signal\":2"),
		      "%s: ctrl-C on the terminal is SIGINT: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* no pty: a resize is a conflict; a bad pty is refused */
	pid = sbx_exec(&s, id, "{\"argv\":[\"sleep\",\"300\"]}");
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/resize", id, pid);
	sbx_req(&s, "POST", p, "{\"rows\":40,\"cols\":120}", &r);
	expect_error("a resize without a pty", &r, 409, "Conflict");
	resp_free(&r);
	sbx_path(p, sizeof p, id, "/processes");
	sbx_req(&s, "POST", p, "{\"argv\":[\"true\"],\"pty\":{\"rows\":24,\"cols\":100000}}", &r);
	expect_error("a pty too wide", &r, 400, "SandboxConfigError");
	resp_free(&r);
	sbx_req(&s, "POST", p, "{\"argv\":[\"true\"],\"pty\":{\"rows\":24}}", &r);
	expect_error("a pty without cols", &r, 400, "SandboxConfigError");
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

/* ---- file metadata (user.e2b.* xattrs, docs/SANDBOXES.md "Files") ---- */

/* stat's metadata of path (object or NULL) and metadataIncomplete, r kept. */
static const cJSON *sbx_stat_meta(struct server *s, const char *id, const char *path,
				  struct resp *r, bool *incomplete)
{
	char p[512];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=%s", id, path);
	sbx_req(s, "GET", p, NULL, r);
	ck_assert_msg(r->code == 200 && r->json, "stat %s: %d %s", path, r->code, r->body);
	*incomplete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r->json, "metadataIncomplete"));
	return cJSON_GetObjectItemCaseSensitive(r->json, "metadata");
}

/* The agent reads a file's user.e2b.* xattrs (set here by a program inside,
 * python's os.setxattr: the filter allows it) into stat and list, only
 * those, bounded at 4096 bytes with what is left out said; the native
 * API's writes never touch them. */
START_TEST(sbx_files_metadata)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	int rc = sbx_sh(&s, id,
			"mkdir -p /sandbox/m/d && echo hi > /sandbox/m/f && touch /sandbox/m/plain "
			"/sandbox/m/bad /sandbox/m/big && python3 -c \"import os\n"
			"try:\n os.setxattr('/sandbox/m/f', 'user.e2b.owner', b'Ann \\\"B\\\"')\n"
			"except OSError as e:\n raise SystemExit(3 if e.errno == 95 else 1)\n"
			"os.setxattr('/sandbox/m/f', 'user.other', b'z')\n"
			"os.setxattr('/sandbox/m/d', 'user.e2b.kind', b'dir')\n"
			"os.setxattr('/sandbox/m/bad', 'user.e2b.ok', b'1')\n"
			"os.setxattr('/sandbox/m/bad', 'user.e2b.ctl', b'a\\x01b')\n"
			"[os.setxattr('/sandbox/m/big', 'user.e2b.k%d' % i, b'v' * 1000) for i in range(10)]\"");
	if (rc == 3) { /* tmpfs without user xattrs (before Linux 6.6) */
		sbx_delete(&s, id);
		free(id);
		server_stop(&s);
		harness_skip("the sandbox's tmpfs keeps no user xattrs (Linux 6.6 or later)");
		return;
	}
	ck_assert_msg(rc == 0, "%s: setxattr inside: exit %d", MODE_NAME[s.mode], rc);
	struct resp r;
	bool inc;
	const cJSON *m = sbx_stat_meta(&s, id, "/sandbox/m/f", &r, &inc);
	ck_assert_msg(cJSON_IsObject(m) && cJSON_GetArraySize(m) == 1 && !inc &&
			      !strcmp(jstr(m, "owner"), "Ann \"B\""),
		      "%s: f: %s", MODE_NAME[s.mode], r.body);
	resp_free(&r);
	m = sbx_stat_meta(&s, id, "/sandbox/m/d", &r, &inc);
	ck_assert_msg(m && !strcmp(jstr(m, "kind"), "dir"), "d: %s", r.body);
	resp_free(&r);
	m = sbx_stat_meta(&s, id, "/sandbox/m/plain", &r, &inc); /* none: no key at all */
	ck_assert_msg(!m && !inc && !strstr(r.body, "metadata"), "plain: %s", r.body);
	resp_free(&r);
	m = sbx_stat_meta(&s, id, "/sandbox/m/bad", &r, &inc); /* \x01 left out, said */
	ck_assert_msg(m && cJSON_GetArraySize(m) == 1 && !strcmp(jstr(m, "ok"), "1") && inc,
		      "bad: %s", r.body);
	resp_free(&r);
	m = sbx_stat_meta(&s, id, "/sandbox/m/big", &r, &inc); /* 10 x 1011 bytes: 4 fit */
	ck_assert_msg(m && cJSON_GetArraySize(m) == 4 && inc, "big: %s", r.body);
	resp_free(&r);
	char p[256];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/list?path=/sandbox/m", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"metadata\":{\"owner\":\"Ann \\\"B\\\"\"}") &&
			      strstr(r.body, "\"metadata\":{\"kind\":\"dir\"}") &&
			      strstr(r.body, "\"metadataIncomplete\":true") && !strstr(r.body, "other"),
		      "list: %d %s", r.code, r.body);
	resp_free(&r);
	/* the native PUT writes the bytes and leaves the metadata as it was */
	char tmpf[] = "/tmp/moat-meta-XXXXXX";
	int fd = mkstemp(tmpf);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "new", 3), 3);
	close(fd);
	sbx_put_file(&s, id, "/sandbox/m/f", tmpf, false, &r);
	unlink(tmpf);
	ck_assert_msg(r.code == 201, "put: %d %s", r.code, r.body);
	resp_free(&r);
	m = sbx_stat_meta(&s, id, "/sandbox/m/f", &r, &inc);
	ck_assert_msg(m && !strcmp(jstr(m, "owner"), "Ann \"B\"") && jnum(r.json, "size") == 3,
		      "f after a PUT: %s", r.body);
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
	 * symlink to /etc, as fast as it can; started streamed and held so
	 * that a request is in flight throughout (rootless, no cgroup bounds
	 * the sandbox's CPU: it is frozen whenever none is, and the loop
	 * would race only during each read and write) */
	char p[256];
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	struct call swapper;
	call_start(&s, &(struct req){ .method = "POST", .path = p, .max_ms = harness_scale_ms(300000),
				      .body = "{\"cmd\":\"while :; do mkdir -p /sandbox/r && echo "
					      "inside > /sandbox/r/passwd; rm -rf /sandbox/r; ln -s "
					      "/etc /sandbox/r; rm -f /sandbox/r; done\"}" },
		   &swapper);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/r/passwd", id);
	int ok = 0, refusals = 0;
	for (int k = 0; k < 60; k++) {
		struct resp r;
		struct req q = { .path = p, .max_ms = 10000 };
		call(&s, &q, &r);
		ck_assert_msg(r.curl_rc == 0, "%s: a racing read hung", MODE_NAME[_i]);
		if (r.code == 200) {
			/* the inside file, whole or caught between its creation
			 * and the echo's write (empty or a prefix), or what the
			 * previous PUT wrote inside (rootless the sandbox is
			 * frozen between requests, so the loop may not have
			 * replaced it yet; a write never lands outside: the
			 * check at the end): anything else came from outside */
			bool inside = r.body_len == 0 ||
				      (r.body_len <= 7 && !memcmp(r.body, "inside\n", r.body_len)) ||
				      (r.body_len <= 7 && !memcmp(r.body, "written", r.body_len));
			ck_assert_msg(inside, "%s: a racing read reached outside: %.300s",
				      MODE_NAME[_i], r.body);
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
	struct resp sr;
	call_finish(&swapper, &sr); /* its stream ends with the sandbox */
	ck_assert_msg(sr.code == 200 && strstr(sr.body, "\"type\":\"start\""),
		      "%s: the streamed swapper: %d %.300s", MODE_NAME[_i], sr.code, sr.body);
	resp_free(&sr);
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
	/* the agent is every process's parent: kill -9 it from inside, from a
	 * process whose output is streamed: the stream ends with one error line,
	 * SandboxGone naming why, a JSON object as every line (a client parses
	 * each: no byte past it, no NUL in it) */
	char p[160];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p, "{\"cmd\":\"echo up; sleep 1; kill -9 $PPID; sleep 10\"}", &r);
	ck_assert_msg(r.code == 200, "%s: the streamed start: %d %s", MODE_NAME[_i], r.code, r.body);
	ck_assert_msg(r.body_len == strlen(r.body), "%s: the stream has a NUL byte at %zu of %zu: %s",
		      MODE_NAME[_i], strlen(r.body), r.body_len, r.body);
	ck_assert_msg(r.body_len > 1 && r.body[r.body_len - 1] == '\n', "%s: the stream: %s",
		      MODE_NAME[_i], r.body);
	r.body[r.body_len - 1] = '\0';
	const char *nl = strrchr(r.body, '\n');
	cJSON *last = cJSON_Parse(nl ? nl + 1 : r.body);
	const cJSON *le = last ? jget(last, "error") : NULL;
	const char *lmsg = le ? jstr(le, "message") : NULL;
	ck_assert_msg(last && jstr(last, "type") && !strcmp(jstr(last, "type"), "error") && le &&
			      jstr(le, "type") && !strcmp(jstr(le, "type"), "SandboxGone") && lmsg &&
			      strstr(lmsg, "ended"),
		      "%s: the stream's last line is not the SandboxGone error line: %s",
		      MODE_NAME[_i], nl ? nl + 1 : r.body);
	cJSON_Delete(last);
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

/* ---- pause, resume, the freeze between requests, CPU time, disk (issue 45) ---- */

/* The CPU time (ms) the host's /proc gives the processes whose command
 * line holds marker: the host's own view, not the service's report. */
static long marked_cpu_ms(const char *marker)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	unsigned long long ticks = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char *cl = proc_cmdline((pid_t)atoi(e->d_name));
		bool in = cl && strstr(cl, marker);
		free(cl);
		if (!in)
			continue;
		char path[300], buf[1024];
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		char *rp = strrchr(buf, ')');
		unsigned long long u, st;
		if (rp && sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &u,
				 &st) == 2)
			ticks += u + st;
	}
	closedir(d);
	return (long)(ticks * 1000 / (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* GET the sandbox into r (200 asserted). */
static void sbx_get(struct server *s, const char *id, struct resp *r)
{
	char p[96];
	sbx_path(p, sizeof p, id, "");
	sbx_req(s, "GET", p, NULL, r);
	ck_assert_msg(r->code == 200, "%s: GET the sandbox: %d %s", MODE_NAME[s->mode], r->code,
		      r->body);
}

static long sbx_cpu(struct server *s, const char *id)
{
	struct resp r;
	sbx_get(s, id, &r);
	const cJSON *c = jget(jget(r.json, "usage"), "cpuTimeMs");
	ck_assert_msg(cJSON_IsNumber(c), "%s: usage.cpuTimeMs is a number: %s", MODE_NAME[s->mode],
		      r.body);
	long v = (long)c->valuedouble;
	resp_free(&r);
	return v;
}

/* Waits up to 5 s for GET to say its processes are stopped ("frozen"):
 * the freeze after a request's end runs once its answer is sent.
 * Whether it did (the caller's own check of the CPU is the proof). */
static bool sbx_wait_frozen(struct server *s, const char *id)
{
	long t0 = harness_now_ms();
	bool frozen = false;
	struct resp r;
	while (!frozen && harness_now_ms() - t0 < 5000) {
		sbx_get(s, id, &r);
		frozen = cJSON_IsTrue(jget(r.json, "frozen"));
		resp_free(&r);
		if (!frozen)
			harness_sleep_ms(20);
	}
	return frozen;
}

/* A busy loop started in the background, marked: the marker (static);
 * its pid in *pid when set. */
static const char *sbx_busy_loop(struct server *s, const char *id, int *pid)
{
	static char marker[64];
	snprintf(marker, sizeof marker, "moat-sbx-busy-%d-%ld", (int)getpid(), harness_now_ms());
	char body[256];
	snprintf(body, sizeof body, "{\"argv\":[\"sh\",\"-c\",\"while :; do :; done\",\"%s\"]}",
		 marker);
	int p = sbx_exec(s, id, body);
	if (pid)
		*pid = p;
	return marker;
}

/* Waits up to ms for the marked processes' CPU time to pass from + by:
 * the last value read. */
static long cpu_moves(const char *marker, long from, long by, long ms)
{
	long t0 = harness_now_ms(), v;
	while ((v = marked_cpu_ms(marker)) < from + by && harness_now_ms() - t0 < ms)
		harness_sleep_ms(50);
	return v;
}

static void sbx_post_state(struct server *s, const char *id, const char *what, const char *state,
			   struct resp *r)
{
	char p[128];
	sbx_path(p, sizeof p, id, what);
	sbx_req(s, "POST", p, "", r);
	ck_assert_msg(r->code == 200 && jstr(r->json, "state") && !strcmp(jstr(r->json, "state"), state),
		      "%s: POST %s: %d %s", MODE_NAME[s->mode], what, r->code, r->body);
}

/* A paused sandbox uses no CPU: a busy loop in it does not move its CPU
 * time for 5 s (the test; the host's /proc and the service's
 * usage both), and its memory is kept; resume makes it move again (as
 * root in the background; rootless while a request is in flight on it,
 * here a 1.5 s wait). */
START_TEST(sbx_pause_resume)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	const char *marker = sbx_busy_loop(&s, id, NULL);
	char p[160];
	struct resp r;
	if (_i == MODE_ROOT) {
		long c0 = marked_cpu_ms(marker);
		ck_assert_msg(cpu_moves(marker, c0, 200, 10000) >= c0 + 200,
			      "root: the background loop runs (in its cgroup's quota)");
	}
	sbx_post_state(&s, id, "/pause", "paused", &r);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "frozen")), "%s: paused is frozen: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	ck_assert_int_eq(marked(marker), 1); /* kept, stopped */
	long h1 = marked_cpu_ms(marker), u1 = sbx_cpu(&s, id);
	harness_sleep_ms(5000);
	long h2 = marked_cpu_ms(marker), u2 = sbx_cpu(&s, id);
	ck_assert_msg(h2 - h1 <= 10 && u2 - u1 <= 10,
		      "%s: a paused sandbox's busy loop ran: %ld ms (host /proc), %ld ms (usage) in 5 s",
		      MODE_NAME[_i], h2 - h1, u2 - u1);
	sbx_get(&s, id, &r);
	ck_assert_str_eq(jstr(r.json, "state"), "paused");
	resp_free(&r);
	sbx_post_state(&s, id, "/resume", "running", &r);
	resp_free(&r);
	if (_i == MODE_ROOT) {
		ck_assert_msg(cpu_moves(marker, h2, 200, 10000) >= h2 + 200,
			      "root: resumed, the loop runs again");
	} else {
		/* a request in flight: the loop runs meanwhile */
		int pid = sbx_exec(&s, id, "{\"argv\":[\"sleep\",\"300\"]}");
		snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=1500", id, pid);
		sbx_req(&s, "GET", p, NULL, &r);
		ck_assert_msg(r.code == 200, "rootless: a wait: %d %s", r.code, r.body);
		resp_free(&r);
		long h3 = marked_cpu_ms(marker);
		ck_assert_msg(h3 >= h2 + 100, "rootless: resumed, the loop ran during a 1.5 s request: "
			      "%ld ms", h3 - h2);
	}
	/* paused again, then any request on it resumes it */
	sbx_post_state(&s, id, "/pause", "paused", &r);
	resp_free(&r);
	sbx_path(p, sizeof p, id, "/processes");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_int_eq(r.code, 200);
	resp_free(&r);
	sbx_get(&s, id, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "state"), "running"),
		      "%s: a request resumes a paused sandbox: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	sbx_delete(&s, id);
	ck_assert_int_eq(marked(marker), 0);
	free(id);
	server_stop(&s);
}
END_TEST

/* The hole: a background process of a live sandbox burns CPU after its
 * request has returned. Rootless (no cgroup quota) the sandbox is frozen
 * whenever no request is in flight on it, and create says so; as root
 * the cgroup quota bounds it and its CPU time counts it. */
START_TEST(sbx_background_cpu)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	struct resp r;
	sbx_get(&s, id, &r);
	const char *cpu_limit = jstr(jget(r.json, "limits"), "cpu");
	bool bounded = cpu_limit && strcmp(cpu_limit, "none");
	const cJSON *w = jget(r.json, "warnings");
	bool warned = false;
	for (const cJSON *it = w ? w->child : NULL; it; it = it->next)
		warned |= cJSON_IsString(it) && strstr(it->valuestring, "frozen whenever no request");
	char *made = strdup(r.body);
	resp_free(&r);
	if (_i == MODE_ROOT)
		ck_assert_msg(bounded, "root: a cgroup bounds the sandbox's CPU");
	int busy_pid;
	const char *marker = sbx_busy_loop(&s, id, &busy_pid);
	long h1 = marked_cpu_ms(marker);
	if (bounded) {
		long u1 = sbx_cpu(&s, id);
		long h2 = cpu_moves(marker, h1, 300, 10000);
		ck_assert_msg(h2 >= h1 + 300, "root: the background loop runs in its quota");
		ck_assert_msg(sbx_cpu(&s, id) >= u1 + 200,
			      "root: usage.cpuTimeMs counts background work");
	} else {
		(void)sbx_wait_frozen(&s, id); /* the code before never said so */
		h1 = marked_cpu_ms(marker);
		harness_sleep_ms(2000);
		long h2 = marked_cpu_ms(marker);
		ck_assert_msg(h2 - h1 <= 10,
			      "%s: a background busy loop ran %ld ms in 2 s with no request in flight "
			      "and no cgroup bounding it", MODE_NAME[_i], h2 - h1);
		/* a streamed start keeps it running while it streams */
		char p[128];
		sbx_path(p, sizeof p, id, "/processes?stream=1");
		struct req q = { .method = "POST", .path = p, .max_ms = 30000,
				 .body = "{\"cmd\":\"i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
					 "echo counted $i\"}" };
		call(&s, &q, &r);
		ck_assert_msg(r.code == 200 && strstr(r.body, "counted 20000"),
			      "rootless: a streamed process runs: %d %s", r.code, r.body);
		resp_free(&r);
		ck_assert_msg(sbx_cpu(&s, id) > 0, "rootless: usage.cpuTimeMs is counted from /proc");
		/* an attach to a process's output is a request while it lasts:
		 * the loop runs; once the client hangs up it is frozen again */
		long a1 = marked_cpu_ms(marker);
		snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d/output", id, busy_pid);
		struct req att = { .path = p, .max_ms = 1500 };
		call(&s, &att, &r);
		ck_assert_msg(r.curl_rc == 28, "rootless: the attach held until curl's 1.5 s: "
			      "curl %d, HTTP %d %s", r.curl_rc, r.code, r.body);
		resp_free(&r);
		long a2 = marked_cpu_ms(marker);
		ck_assert_msg(a2 >= a1 + 100, "rootless: the loop ran during a 1.5 s attach: %ld ms",
			      a2 - a1);
		ck_assert_msg(sbx_wait_frozen(&s, id), "rootless: frozen again once the attached "
			      "client hung up");
		a1 = marked_cpu_ms(marker);
		harness_sleep_ms(1000);
		a2 = marked_cpu_ms(marker);
		ck_assert_msg(a2 - a1 <= 10, "rootless: after the attach, the loop ran %ld ms in 1 s",
			      a2 - a1);
	}
	/* after the CPU (the hole first): create said so exactly when unbounded */
	ck_assert_msg(bounded == !warned, "%s: create warns of the freeze exactly when no cgroup "
		      "bounds CPU (bounded %d): %s", MODE_NAME[_i], bounded, made);
	free(made);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* onIdle "pause": idle, it is paused (not ended); a request resumes it. */
START_TEST(sbx_on_idle_pause)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){ .pool = 0 });
	char *id = sbx_create(&s, "{\"idleTimeoutMs\":600,\"onIdle\":\"pause\"}");
	if (!id) {
		server_stop(&s);
		harness_skip(SBX_SKIP);
		return;
	}
	const char *marker = sbx_busy_loop(&s, id, NULL);
	struct resp r;
	long t0 = harness_now_ms();
	bool paused = false;
	while (!paused && harness_now_ms() - t0 < 10000) {
		harness_sleep_ms(100);
		sbx_get(&s, id, &r);
		/* the reaper's pause: the state first, then the freeze */
		paused = !strcmp(jstr(r.json, "state"), "paused") &&
			 cJSON_IsTrue(jget(r.json, "frozen"));
		ck_assert_str_eq(jstr(r.json, "onIdle"), "pause");
		resp_free(&r);
	}
	ck_assert_msg(paused, "%s: idle with onIdle pause: paused", MODE_NAME[_i]);
	long h1 = marked_cpu_ms(marker);
	harness_sleep_ms(1000);
	ck_assert_msg(marked_cpu_ms(marker) - h1 <= 10, "%s: idle-paused, the loop ran",
		      MODE_NAME[_i]);
	ck_assert_int_eq(sbx_sh(&s, id, "true"), 0); /* a request resumes it */
	sbx_get(&s, id, &r);
	ck_assert_str_eq(jstr(r.json, "state"), "running");
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* maxCpuTimeMs ends the sandbox once its CPU time (background work
 * included) reaches it, with the reason; past the service's most is a 400. */
START_TEST(sbx_max_cpu)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){ .pool = 0 });
	char *id = sbx_create(&s, "{\"maxCpuTimeMs\":400}");
	if (!id) {
		server_stop(&s);
		harness_skip(SBX_SKIP);
		return;
	}
	char p[128];
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	struct resp r;
	struct req q = { .method = "POST", .path = p, .max_ms = 60000,
			 .body = "{\"cmd\":\"while :; do :; done\"}" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "SandboxGone") &&
			      strstr(r.body, "maxCpuTimeMs 400"),
		      "%s: a busy loop past maxCpuTimeMs: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_get(&s, id, &r);
	ck_assert_msg(!strcmp(jstr(r.json, "state"), "ended") && jstr(r.json, "reason") &&
			      strstr(jstr(r.json, "reason"), "it used its CPU time (maxCpuTimeMs 400)"),
		      "%s: the sandbox past its CPU time: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	sbx_path(p, sizeof p, id, "/processes");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 410 && strstr(r.body, "maxCpuTimeMs 400"),
		      "%s: a request on it: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_req(&s, "POST", "/v1/sandboxes", "{\"maxCpuTimeMs\":99}", &r);
	expect_error("maxCpuTimeMs under 100", &r, 400, "SandboxConfigError");
	resp_free(&r);
	free(id);
	server_stop(&s);
}
END_TEST

/* usage.diskBytes: the sandbox's /sandbox and /tmp in use, grown by a
 * 1 MiB write. */
START_TEST(sbx_disk_usage)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	struct resp r;
	sbx_get(&s, id, &r);
	const cJSON *d = jget(jget(r.json, "usage"), "diskBytes");
	ck_assert_msg(cJSON_IsNumber(d), "%s: usage.diskBytes: %s", MODE_NAME[_i], r.body);
	long long d0 = (long long)d->valuedouble;
	resp_free(&r);
	char file[96];
	snprintf(file, sizeof file, "/tmp/moat-sbx-disk-%d", (int)getpid());
	random_file(file, 1 << 20);
	sbx_put_file(&s, id, "/sandbox/big", file, false, &r);
	unlink(file);
	ck_assert_msg(r.code == 201, "%s: PUT 1 MiB: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_get(&s, id, &r);
	d = jget(jget(r.json, "usage"), "diskBytes");
	ck_assert_msg(cJSON_IsNumber(d) && (long long)d->valuedouble >= d0 + (1 << 20),
		      "%s: diskBytes after a 1 MiB write (before: %lld): %s", MODE_NAME[_i], d0,
		      r.body);
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST


/* ---- nodes (docs/scaling.md) ---- */

/* Every id names the node that made it (--node), so a load balancer can
 * route on the path; an id naming another node is answered 421 WrongNode
 * naming both, never looked up and never 404 (which would say the sandbox
 * is gone); a name that is not [a-z0-9-]{1,32} does not start. */
START_TEST(sbx_ids_name_their_node)
{
	struct server s;
	const char *args[] = { "--node", "alpha-1", NULL };
	server_start(&s, _i, &(struct server_opts){ .pool = 0, .args = args });
	char *id = sbx_create(&s, NULL);
	if (!id) {
		server_stop(&s);
		harness_skip(SBX_SKIP);
		return;
	}
	ck_assert_msg(id_form_ok(id, "sbx_", "alpha-1"), "%s: id %s does not name node alpha-1",
		      MODE_NAME[_i], id);
	ck_assert_int_eq(sbx_sh(&s, id, "exit 7"), 7);
	struct resp r;
	char *ses = ses_try_create(&s, "{\"language\":\"python\"}", NULL, NULL);
	ck_assert_msg(id_form_ok(ses, "ses_", "alpha-1"), "%s: session id %s", MODE_NAME[_i],
		      ses ? ses : "(none)");
	/* the same random part under another node's name: not this node's */
	char other[128], p[256];
	snprintf(other, sizeof other, "sbx_beta_%s", strrchr(id, '_') + 1);
	static const char *const rests[] = { "", "/processes", "/files?path=/tmp/x" };
	static const char *const methods[] = { "GET", "POST", "GET" };
	for (int k = 0; k < 3; k++) {
		sbx_path(p, sizeof p, other, rests[k]);
		sbx_req(&s, methods[k], p, k == 1 ? "{\"cmd\":\"true\"}" : NULL, &r);
		expect_error(p, &r, 421, "WrongNode");
		const char *m = jstr(jget(r.json, "error"), "message");
		ck_assert_msg(strstr(m, "\"beta\"") && strstr(m, "\"alpha-1\""),
			      "%s: the 421 names neither node: %s", MODE_NAME[_i], m);
		resp_free(&r);
	}
	snprintf(other, sizeof other, "ses_beta_%s", strrchr(ses, '_') + 1);
	static const char *const srests[] = { "", "/run", "/interrupt", "/pause" };
	static const char *const smethods[] = { "GET", "POST", "POST", "POST" };
	for (int k = 0; k < 4; k++) {
		snprintf(p, sizeof p, "/v1/sessions/%s%s", other, srests[k]);
		sbx_req(&s, smethods[k], p, k == 1 ? "{\"code\":\"print(1)\"}" : NULL, &r);
		expect_error(p, &r, 421, "WrongNode");
		resp_free(&r);
	}
	/* this node's name with a random part it never made: no such sandbox */
	snprintf(other, sizeof other, "sbx_alpha-1_%032d", 0);
	sbx_path(p, sizeof p, other, "");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 404, "%s: an unknown id of this node: HTTP %d %s", MODE_NAME[_i],
		      r.code, r.body);
	resp_free(&r);
	/* not an id's form (an upper-case node): no such sandbox either */
	snprintf(other, sizeof other, "sbx_BETA_%s", strrchr(id, '_') + 1);
	sbx_path(p, sizeof p, other, "");
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 404, "%s: a malformed id: HTTP %d %s", MODE_NAME[_i], r.code,
		      r.body);
	resp_free(&r);
	char *m = get_metrics(&s, NULL);
	ck_assert_msg(m && strstr(m, "moat_serve_node_info{node=\"alpha-1\"} 1"),
		      "%s: /metrics does not name the node", MODE_NAME[_i]);
	free(m);
	ses_end(&s, ses);
	free(ses);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
	/* names that are not [a-z0-9-]{1,32} */
	static const char *const bad[] = { "Alpha", "a_b", "", "abcdefghijklmnopqrstuvwxyz0123456" };
	for (int k = 0; k < 4; k++) {
		const char *bargs[] = { "--node", bad[k], NULL };
		server_spawn(&s, _i, &(struct server_opts){ .pool = 0, .args = bargs });
		int st = server_wait_exit(&s, harness_scale_ms(10000));
		char *log = server_log(&s);
		ck_assert_msg(st > 0 && log && strstr(log, "node"),
			      "%s: --node \"%s\": exit %d, log %.600s", MODE_NAME[_i], bad[k], st,
			      log ? log : "");
		free(log);
		server_cleanup(&s);
	}
}
END_TEST

/* A watch's stream on a raw connection (curl's -o is buffered: the
 * "ready" line would not be seen until more came). */
struct wconn {
	int fd;
	char *got; /* all read so far */
	bool closed;
};

/* Reads until got holds what (true), the peer closes or ms pass. */
static bool wconn_until(struct wconn *w, const char *what, long ms)
{
	long t0 = harness_now_ms();
	while (!(w->got && strstr(w->got, what)) && !w->closed &&
	       harness_now_ms() - t0 < harness_scale_ms(ms)) {
		char *more = raw_read(w->fd, 200, &w->closed, NULL);
		size_t a = w->got ? strlen(w->got) : 0, b = strlen(more);
		w->got = realloc(w->got, a + b + 1);
		ck_assert_ptr_nonnull(w->got);
		memcpy(w->got + a, more, b + 1);
		free(more);
	}
	return w->got && strstr(w->got, what);
}

static void wconn_open(struct server *s, struct wconn *w, const char *path)
{
	memset(w, 0, sizeof *w);
	w->fd = raw_connect(s);
	char req[400];
	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	ck_assert(raw_send(w->fd, req, strlen(req)));
}

static void wconn_close(struct wconn *w)
{
	close(w->fd);
	free(w->got);
}

/* s holds each of the lines, in this order */
static void expect_in_order(const char *what, const char *s, const char *const *lines)
{
	const char *at = s;
	for (size_t i = 0; lines[i]; i++) {
		const char *f = strstr(at, lines[i]);
		ck_assert_msg(f, "%s: %s not found (in order) in %s", what, lines[i], s);
		at = f + strlen(lines[i]);
	}
}

/* Watching a directory: create, write, rename, remove in order (a new
 * subdirectory of a recursive watch included), the end when the directory
 * goes; a path outside, a symlink, a file refused; at most 8 at once. */
START_TEST(sbx_watch)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[200];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p,
		"{\"cmd\":\"mkdir /sandbox/w /sandbox/w/old && ln -s /etc /sandbox/etc && "
		"ln -s /sandbox/w /sandbox/wl && echo x > /sandbox/file\"}", &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"exitCode\":0"), "%s: setup: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	struct wconn w;
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/watch?path=/sandbox/w&recursive=1", id);
	wconn_open(&s, &w, p);
	ck_assert_msg(wconn_until(&w, "{\"type\":\"ready\"}", 20000),
		      "%s: the watch never was ready: %s", MODE_NAME[_i], w.got ? w.got : "");
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p,
		"{\"cmd\":\"cd /sandbox/w && echo hi > a && mv a b && mkdir d && sleep 1 && "
		"echo y > d/f && echo z > old/g && rm b d/f && sleep 1 && cd / && rm -r /sandbox/w\"}",
		&r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"exitCode\":0"), "%s: the changes: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	wconn_until(&w, "{\"type\":\"end\"", 20000);
	static const char *const order[] = {
		"{\"type\":\"ready\"}",
		"{\"type\":\"create\",\"path\":\"/sandbox/w/a\"}",
		"{\"type\":\"write\",\"path\":\"/sandbox/w/a\"}",
		"{\"type\":\"rename\",\"from\":\"/sandbox/w/a\",\"path\":\"/sandbox/w/b\"}",
		"{\"type\":\"create\",\"path\":\"/sandbox/w/d\"}",
		"{\"type\":\"create\",\"path\":\"/sandbox/w/d/f\"}",
		"{\"type\":\"write\",\"path\":\"/sandbox/w/d/f\"}",
		"{\"type\":\"create\",\"path\":\"/sandbox/w/old/g\"}",
		"{\"type\":\"remove\",\"path\":\"/sandbox/w/b\"}",
		"{\"type\":\"remove\",\"path\":\"/sandbox/w/d/f\"}",
		"{\"type\":\"end\",\"path\":\"/sandbox/w\"",
		NULL,
	};
	ck_assert_msg(raw_status(w.got) == 200, "%s: watch: %s", MODE_NAME[_i], w.got);
	expect_in_order(MODE_NAME[_i], w.got, order);
	wconn_close(&w);
	/* refused: outside, through a symlink (to outside, to inside), a file */
	static const char *const refused[] = { "/etc", "/sandbox/etc", "/sandbox/wl",
					       "/sandbox/etc/ssl", "/sandbox/file", "/sandbox/../etc",
					       NULL };
	for (size_t i = 0; refused[i]; i++) {
		snprintf(p, sizeof p, "/v1/sandboxes/%s/files/watch?path=%s", id, refused[i]);
		sbx_req(&s, "GET", p, NULL, &r);
		ck_assert_msg(r.code == 400, "%s: a watch on %s: %d %s", MODE_NAME[_i], refused[i],
			      r.code, r.body);
		resp_free(&r);
	}
	/* a tree past the bounds is refused, not watched in part: 33 levels
	 * deep, 1100 directories wide */
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p,
		"{\"cmd\":\"mkdir -p /sandbox/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/"
		"19/20/21/22/23/24/25/26/27/28/29/30/31/32/33 && mkdir /sandbox/wide && cd "
		"/sandbox/wide && seq 1100 | xargs mkdir\"}", &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"exitCode\":0"), "%s: the trees: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	static const char *const big[] = { "/sandbox/deep", "/sandbox/wide", NULL };
	for (size_t i = 0; big[i]; i++) {
		snprintf(p, sizeof p, "/v1/sandboxes/%s/files/watch?path=%s&recursive=1", id, big[i]);
		sbx_req(&s, "GET", p, NULL, &r);
		ck_assert_msg(r.code == 400 && strstr(r.body, "too large to watch"),
			      "%s: a recursive watch of %s: %d %s", MODE_NAME[_i], big[i], r.code,
			      r.body);
		resp_free(&r);
	}
	/* at most 8 at once */
	struct wconn many[8];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/watch?path=/tmp", id);
	for (int i = 0; i < 8; i++) {
		wconn_open(&s, &many[i], p);
		ck_assert_msg(wconn_until(&many[i], "ready", 20000), "%s: watch %d not ready: %s",
			      MODE_NAME[_i], i, many[i].got ? many[i].got : "");
	}
	sbx_req(&s, "GET", p, NULL, &r);
	expect_error("a ninth watch", &r, 429, "TooManyWatches");
	resp_free(&r);
	for (int i = 0; i < 8; i++)
		wconn_close(&many[i]);
	/* their hang-ups give the room back (noticed within half a second) */
	bool ready = false;
	for (int k = 0; k < 20 && !ready; k++) {
		harness_sleep_ms(250);
		struct wconn again;
		wconn_open(&s, &again, p);
		ready = wconn_until(&again, "ready", 5000);
		wconn_close(&again);
	}
	ck_assert_msg(ready, "%s: no watch after the others hung up", MODE_NAME[_i]);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* POST .../files?path=DIR with a multipart body built here (boundary moatB). */
static void mp_post(struct server *s, const char *id, const char *dir, const char *body_file,
		    struct resp *r)
{
	char p[300];
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=%s", id, dir);
	char data[220];
	snprintf(data, sizeof data, "@%s", body_file);
	/* not .body_file: the harness would add its own Content-Type */
	const char *const args[] = { "-H", "Content-Type: multipart/form-data; boundary=moatB",
				     "--data-binary", data, NULL };
	struct req q = { .method = "POST", .path = p, .extra = args, .max_ms = 20000 };
	call(s, &q, r);
}

/* Multipart upload: each part to DIR/<filename> (curl -F: a binary file and
 * a text one, read back whole); refused: a filename that is not one path
 * component, a part without a filename, more than 100 parts, a malformed
 * body, a body that is not multipart, a directory through a symlink. */
START_TEST(sbx_multipart)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	char p[300], src[200], txt[200], arg1[300], arg2[300];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p, "{\"cmd\":\"mkdir /sandbox/up && ln -s /tmp /sandbox/tl\"}", &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"exitCode\":0"), "%s: setup: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	snprintf(src, sizeof src, "%s/mp.bin", s.dir);
	snprintf(txt, sizeof txt, "%s/mp.txt", s.dir);
	random_file(src, 300000);
	write_file(txt, "hello, multipart\n", 17, 0644);
	snprintf(arg1, sizeof arg1, "one=@%s;filename=data.bin", src);
	snprintf(arg2, sizeof arg2, "two=@%s;filename=note.txt", txt);
	const char *const ok_args[] = { "-F", arg1, "-F", arg2, NULL };
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/up", id);
	struct req q = { .method = "POST", .path = p, .extra = ok_args, .max_ms = 20000 };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 201 && (int)jnum(r.json, "count") == 2 &&
			      strstr(r.body, "{\"path\":\"/sandbox/up/data.bin\",\"size\":300000}") &&
			      strstr(r.body, "{\"path\":\"/sandbox/up/note.txt\",\"size\":17}"),
		      "%s: multipart upload: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_get_file(&s, id, "/sandbox/up/data.bin", NULL, &r);
	size_t len;
	char *want = slurp(src, &len);
	ck_assert_msg(r.code == 200 && r.body_len == len && !memcmp(r.body, want, len),
		      "%s: the binary part read back: %d, %zu bytes", MODE_NAME[_i], r.code,
		      r.body_len);
	free(want);
	resp_free(&r);
	sbx_get_file(&s, id, "/sandbox/up/note.txt", NULL, &r);
	ck_assert_msg(r.code == 200 && r.body_len == 17 && !memcmp(r.body, "hello, multipart\n", 17),
		      "%s: the text part read back: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* 20 MiB in one part: streamed to the file, never held by the service */
	random_file(src, 20u << 20);
	long before = rss_kb(s.p.pid);
	call(&s, &q, &r);
	ck_assert_msg(r.code == 201 && strstr(r.body, "\"size\":20971520"),
		      "%s: a 20 MiB part: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	long after = rss_kb(s.p.pid);
	ck_assert_msg(before > 0 && after - before < 10 * 1024,
		      "%s: the service grew %ld KiB for a 20 MiB multipart upload", MODE_NAME[_i],
		      after - before);
	sbx_get_file(&s, id, "/sandbox/up/data.bin", NULL, &r);
	want = slurp(src, &len);
	ck_assert_msg(r.code == 200 && r.body_len == len && !memcmp(r.body, want, len),
		      "%s: the 20 MiB part read back: %d, %zu bytes", MODE_NAME[_i], r.code,
		      r.body_len);
	free(want);
	resp_free(&r);
	/* refused bodies, built by hand */
	static const struct {
		const char *what, *body;
		int code;
		const char *says;
	} bad_bodies[] = {
		{ "a filename with a slash",
		  "--moatB\r\nContent-Disposition: form-data; name=\"a\"; filename=\"../../tmp/x\"\r\n\r\n"
		  "x\r\n--moatB--\r\n", 400, "one path component" },
		{ "a filename ..",
		  "--moatB\r\nContent-Disposition: form-data; name=\"a\"; filename=\"..\"\r\n\r\n"
		  "x\r\n--moatB--\r\n", 400, "one path component" },
		{ "an empty filename",
		  "--moatB\r\nContent-Disposition: form-data; name=\"a\"; filename=\"\"\r\n\r\n"
		  "x\r\n--moatB--\r\n", 400, "one path component" },
		{ "a part without a filename",
		  "--moatB\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--moatB--\r\n", 400,
		  "every part is a file" },
		{ "a body cut short",
		  "--moatB\r\nContent-Disposition: form-data; name=\"a\"; filename=\"cut\"\r\n\r\nabc", 400,
		  "not well-formed" },
		{ "garbage (a preamble, no part)", "this is not multipart at all", 400, "holds no file" },
	};
	char bf[200];
	snprintf(bf, sizeof bf, "%s/mp.body", s.dir);
	for (size_t i = 0; i < sizeof bad_bodies / sizeof bad_bodies[0]; i++) {
		write_file(bf, bad_bodies[i].body, strlen(bad_bodies[i].body), 0644);
		mp_post(&s, id, "/sandbox/up", bf, &r);
		ck_assert_msg(r.code == bad_bodies[i].code && strstr(r.body, bad_bodies[i].says),
			      "%s: %s: %d %s", MODE_NAME[_i], bad_bodies[i].what, r.code, r.body);
		resp_free(&r);
	}
	/* nothing escaped the directory */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/tmp/x", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 404, "%s: /tmp/x was written: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* 101 parts */
	FILE *f = fopen(bf, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 101; i++)
		fprintf(f, "--moatB\r\nContent-Disposition: form-data; name=\"f\"; filename=\"p%d\"\r\n\r\n"
			   "%d\r\n", i, i);
	fprintf(f, "--moatB--\r\n");
	ck_assert_int_eq(fclose(f), 0);
	mp_post(&s, id, "/sandbox/up", bf, &r);
	ck_assert_msg(r.code == 400 && strstr(r.body, "at most 100"), "%s: 101 parts: %d %s",
		      MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* the directory through a symlink; a raw body */
	static const char one[] = "--moatB\r\nContent-Disposition: form-data; name=\"a\"; "
				  "filename=\"y\"\r\n\r\ny\r\n--moatB--\r\n";
	write_file(bf, one, sizeof one - 1, 0644);
	mp_post(&s, id, "/sandbox/tl", bf, &r);
	ck_assert_msg(r.code == 400 && strstr(r.body, "symlink"), "%s: through a symlink: %d %s",
		      MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files?path=/sandbox/up", id);
	sbx_req(&s, "POST", p, "raw", &r);
	ck_assert_msg(r.code == 415, "%s: a raw POST: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* The agent (runtime/bin/, about 700 KB) is copied into a live sandbox's
 * runtime and into no one-shot run's: each run's runtime tmpfs holds the
 * shims (python/, js/) only. */
START_TEST(sbx_agent_only_in_live)
{
	struct server s;
	char *id;
	if (!sbx_start(&s, _i, &id))
		return;
	struct resp r;
	post(&s, "/v1/run", "{\"argv\":[\"ls\",\"/opt/moat/runtime\"]}", &r);
	const char *out = r.json ? jstr(r.json, "stdout") : NULL;
	ck_assert_msg(r.code == 200 && out && strstr(out, "python\n") && !strstr(out, "bin\n"),
		      "%s: a one-shot run's runtime: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	char p[160];
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p, "{\"argv\":[\"ls\",\"/opt/moat/runtime/bin\"]}", &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "moat-agent"),
		      "%s: a live sandbox's runtime: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	sbx_delete(&s, id);
	free(id);
	server_stop(&s);
}
END_TEST

/* A watch whose client does not read: the agent never blocks on the
 * service, the events it cannot send are lost and said, as one
 * {"type":"overflow"} once there is room, and the watch goes on. */
START_TEST(sbx_watch_overflow)
{
	/* over a unix socket: the kernel holds a few hundred KiB between the
	 * service and a client that does not read (TCP's autotuned buffers
	 * hold megabytes, and drain them slowly through a small window) */
	struct server s;
	server_start(&s, _i, &(struct server_opts){ .pool = 0, .socket = true });
	char *id = sbx_create(&s, NULL);
	if (!id) {
		server_stop(&s);
		harness_skip(SBX_SKIP);
		return;
	}
	char p[200];
	struct resp r;
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	sbx_req(&s, "POST", p, "{\"cmd\":\"mkdir /sandbox/o\"}", &r);
	resp_free(&r);
	struct wconn w;
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/watch?path=/sandbox/o", id);
	wconn_open(&s, &w, p);
	ck_assert_msg(wconn_until(&w, "{\"type\":\"ready\"}", 20000), "%s: not ready: %s",
		      MODE_NAME[_i], w.got ? w.got : "");
	/* 120000 writes (two files taking turns: no two alike in a row, which
	 * the kernel would merge), while nobody reads: megabytes of events */
	sbx_path(p, sizeof p, id, "/processes?stream=1");
	struct req q = { .method = "POST", .path = p, .max_ms = harness_scale_ms(180000),
			 .body = "{\"cmd\":\"cd /sandbox/o && i=0; while [ $i -lt 60000 ]; do "
				 "echo >> a; echo >> b; i=$((i+1)); done; touch after\"}" };
	call(&s, &q, &r);
	ck_assert_msg(r.code == 200 && strstr(r.body, "\"exitCode\":0"),
		      "%s: the writes (the agent blocked?): %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* the agent still answers other requests at once */
	snprintf(p, sizeof p, "/v1/sandboxes/%s/files/stat?path=/sandbox/o/after", id);
	sbx_req(&s, "GET", p, NULL, &r);
	ck_assert_msg(r.code == 200, "%s: stat during the flood: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* the overflow comes once there is room (what was lost, the
	 * flood's end and "after" perhaps among it, is not sent) */
	ck_assert_msg(wconn_until(&w, "{\"type\":\"overflow\"}", 90000),
		      "%s: events were lost without an overflow (%zu bytes read)", MODE_NAME[_i],
		      w.got ? strlen(w.got) : 0);
	/* and the watch goes on */
	bool later = false;
	for (int k = 0; k < 60 && !later; k++) {
		sbx_path(p, sizeof p, id, "/processes?stream=1");
		if (k)
			resp_free(&r);
		sbx_req(&s, "POST", p, "{\"cmd\":\"touch /sandbox/o/later\"}", &r);
		later = wconn_until(&w, "/sandbox/o/later\"}", 2000);
	}
	size_t gl = strlen(w.got);
	ck_assert_msg(later, "%s: the watch did not go on after the overflow (%zu bytes read, "
		      "the last: %s; the touch: %d %.300s)", MODE_NAME[_i], gl,
		      w.got + (gl > 400 ? gl - 400 : 0), r.code, r.body ? r.body : "");
	resp_free(&r);
	wconn_close(&w);
	sbx_delete(&s, id);
	free(id);
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
	tcase_add_loop_test(tc, sbx_pty, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_files_roundtrip, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_files_ops, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_files_metadata, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_watch, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_watch_overflow, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_multipart, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_agent_only_in_live, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_path_attacks, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_symlink_race, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_tree_bounds, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_agent_killed, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_kill9_leaves_nothing, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_budget, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_pause_resume, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_background_cpu, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_on_idle_pause, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_max_cpu, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_disk_usage, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_ids_name_their_node, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, sbx_route_keys, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
