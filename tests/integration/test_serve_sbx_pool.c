/* The live sandboxes' pool (docs/SANDBOXES.md, "The pool"; --sandbox-pool):
 * sandboxes made ahead with the service's defaults, handed to a create
 * that asks for exactly those. From the outside, as root and rootless (loop
 * index = harness mode): a pooled sandbox goes to one caller once, is bound
 * to it as a cold one, its clocks start at the handout, nothing of another
 * tenant is in it; the pool reserves from the budgets but not from
 * --max-sandboxes, is frozen where no cgroup bounds it, refills off the
 * request's path, backs off a failing fill and says so, and leaves nothing
 * at SIGTERM. */
#include "serve_common.h"
#include "skip.h"

#define POOL_SKIP "live sandboxes are not built into this moat (runtime/bin/moat-agent)"

/* POST /v1/sandboxes with body (and curl's extra arguments) into r. */
static void pcreate(struct server *s, const char *body, const char *const *extra, struct resp *r)
{
	struct req q = { .method = "POST", .path = "/v1/sandboxes", .body = body, .extra = extra };
	call(s, &q, r);
}

/* A 201's id (malloc'd) and whether the pool gave it. */
static char *pcreated(const struct resp *r, const char *what, bool *pool)
{
	ck_assert_msg(r->code == 201, "%s: HTTP %d: %.2000s", what, r->code, r->body ? r->body : "");
	const char *id = jstr(r->json, "id");
	ck_assert_msg(id_form_ok(id, "sbx_", NULL), "%s: bad id in %s", what, r->body);
	const cJSON *p = jget(r->json, "pool");
	ck_assert_msg(cJSON_IsBool(p), "%s: no \"pool\" in %s", what, r->body);
	*pool = cJSON_IsTrue(p);
	return strdup(id);
}

/* Waits until the pool holds n sandboxes; false (a skip) when live
 * sandboxes are not built in and the pool says so. */
static bool pwait_ready(struct server *s, int n)
{
	long t0 = harness_now_ms();
	for (;;) {
		if (pool_metric(s, "moat_serve_sandbox_pool_ready", NULL) >= n)
			return true;
		struct resp r;
		get(s, "/healthz?detail=1", &r);
		const char *e = jstr(jget(r.json, "sandboxPool"), "lastError");
		bool missing = e && strstr(e, "not built into this moat");
		resp_free(&r);
		if (missing)
			return false;
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000),
			      "%s: the sandbox pool never held %d", MODE_NAME[s->mode], n);
		harness_sleep_ms(20);
	}
}

static bool pstart(struct server *s, int mode, struct server_opts *o, int n)
{
	server_start(s, mode, o);
	if (pwait_ready(s, n))
		return true;
	server_stop(s);
	harness_skip(POOL_SKIP);
	return false;
}

/* A shell line run to its end in sandbox id: its exit code. */
static int psh(struct server *s, const char *id, const char *line)
{
	char *q = harness_json_quote(line), body[4096], p[160];
	snprintf(body, sizeof body, "{\"cmd\":%s}", q);
	free(q);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes", id);
	struct resp r;
	post(s, p, body, &r);
	ck_assert_msg(r.code == 201, "%s: %s: HTTP %d %s", MODE_NAME[s->mode], line, r.code, r.body);
	int pid = (int)jnum(r.json, "pid");
	resp_free(&r);
	snprintf(p, sizeof p, "/v1/sandboxes/%s/processes/%d?wait=30000", id, pid);
	get(s, p, &r);
	ck_assert_msg(r.code == 200 && jstr(r.json, "state") && !strcmp(jstr(r.json, "state"), "exited"),
		      "%s: %s: HTTP %d %s", MODE_NAME[s->mode], line, r.code, r.body);
	int code = (int)jnum(r.json, "exitCode");
	resp_free(&r);
	return code;
}

static int pstatus(struct server *s, const char *method, const char *id)
{
	char p[128];
	snprintf(p, sizeof p, "/v1/sandboxes/%s", id);
	struct req q = { .method = method, .path = p };
	struct resp r;
	call(s, &q, &r);
	int code = r.code;
	resp_free(&r);
	return code;
}

/* Every process below pid (its descendants) stopped (state T): the pool's
 * sandboxes, frozen. Their number in *n. */
static bool descendants_stopped(pid_t pid, int *n)
{
	pid_t kids[64];
	int k = proc_children(pid, kids, 64);
	bool all = true;
	for (int i = 0; i < k; i++) {
		const char *st = proc_status_field(kids[i], "State");
		(*n)++;
		if (st[0] != 'T' && st[0] != 't')
			all = false;
		if (!descendants_stopped(kids[i], n))
			all = false;
	}
	return all;
}

/* A pooled sandbox is handed out with its clocks started then: made long
 * before, its lifetime and idle timeout still run from the create; it is
 * bound to the caller (another's requests: 404); frozen while it waited
 * where no cgroup bounds it; and it was never used: empty /sandbox and
 * /tmp, only its agent. */
START_TEST(pool_handout)
{
	static const char *const args[] = { "--socket-group", "nogroup", NULL };
	bool other = harness_is_root();
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){ .sbx_pool = 1, .socket = other,
						   .args = other ? args : NULL }, 1))
		return;
	if (other)
		ck_assert_int_eq(chmod(s.dir, 0711), 0);
	int procs = 0;
	bool stopped = descendants_stopped(s.p.pid, &procs);
	/* it waits past the lifetime and idle timeout the create asks */
	harness_sleep_ms(2500);
	struct resp r;
	pcreate(&s, "{\"lifetimeMs\":3000,\"idleTimeoutMs\":3000,\"metadata\":{\"k\":\"v\"}}",
		NULL, &r);
	bool pool;
	char *id = pcreated(&r, MODE_NAME[_i], &pool);
	ck_assert_msg(pool, "%s: a create with the defaults, the pool ready: %s", MODE_NAME[_i],
		      r.body);
	const char *warn = r.body ? strstr(r.body, "cpus is not enforced") : NULL;
	if (warn) /* no cgroup quota bounds it: it waited frozen */
		ck_assert_msg(procs > 0 && stopped, "%s: the pooled sandbox (%d processes) was not "
			      "frozen while it waited", MODE_NAME[_i], procs);
	ck_assert_msg(cJSON_IsTrue(jget(r.json, "frozen")) == (warn != NULL),
		      "%s: frozen as a cold one would be: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	harness_sleep_ms(1500); /* 4 s after its making, 1.5 s after its create */
	ck_assert_msg(psh(&s, id, "test -z \"$(ls -A /sandbox)$(ls -A /tmp)\"") == 0,
		      "%s: a pooled sandbox's /sandbox or /tmp is not empty", MODE_NAME[_i]);
	ck_assert_msg(psh(&s, id, "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; test $n -le 4")
			      == 0, "%s: a pooled sandbox runs more than its agent", MODE_NAME[_i]);
	char p[128];
	snprintf(p, sizeof p, "/v1/sandboxes/%s", id);
	if (other)
		ck_assert_msg(status_as_other(&s, "GET", p) == 404 &&
				      status_as_other(&s, "DELETE", p) == 404,
			      "%s: another caller reaches a pooled sandbox", MODE_NAME[_i]);
	get(&s, p, &r);
	ck_assert_msg(r.code == 200 && !strcmp(jstr(r.json, "state"), "running") &&
			      !strcmp(jstr(jget(r.json, "metadata"), "k"), "v"),
		      "%s: 1.5 s after its create (4 s after the pool made it) with lifetimeMs "
		      "3000: %d %s", MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	/* and its lifetime does end, 3 s after the create */
	long t0 = harness_now_ms();
	bool ended = false;
	while (!ended && harness_now_ms() - t0 < harness_scale_ms(5000)) {
		get(&s, p, &r);
		ended = jstr(r.json, "state") && !strcmp(jstr(r.json, "state"), "ended");
		ck_assert_msg(!ended || strstr(r.body, "lifetimeMs"), "%s: %s", MODE_NAME[_i], r.body);
		resp_free(&r);
		harness_sleep_ms(100);
	}
	ck_assert_msg(ended, "%s: a pooled sandbox outlived its lifetime", MODE_NAME[_i]);
	free(id);
	pwait_ready(&s, 1);
	server_stop_pool(&s, 1);
}
END_TEST

/* Concurrent creates: each gets a sandbox of its own, a pooled one at most
 * once (each marks its sandbox and finds it unmarked); the counters agree;
 * nothing of a deleted pooled sandbox's tenant is in the next one. */
START_TEST(pool_once)
{
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){ .sbx_pool = 1 }, 1))
		return;
	enum { N = 4 };
	struct call c[N];
	struct resp r[N];
	struct req q = { .method = "POST", .path = "/v1/sandboxes", .body = "{}" };
	for (int i = 0; i < N; i++)
		call_start(&s, &q, &c[i]);
	char *ids[N];
	int pooled_n = 0;
	for (int i = 0; i < N; i++) {
		call_finish(&c[i], &r[i]);
		bool pool;
		ids[i] = pcreated(&r[i], MODE_NAME[_i], &pool);
		pooled_n += pool;
		resp_free(&r[i]);
	}
	ck_assert_msg(pooled_n >= 1, "%s: no create of %d took the ready pool", MODE_NAME[_i], N);
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_used_total", NULL), pooled_n);
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(ids[i], ids[j]);
		char line[200];
		snprintf(line, sizeof line, "test ! -e /tmp/owner && echo %s > /tmp/owner", ids[i]);
		ck_assert_msg(psh(&s, ids[i], line) == 0, "%s: sandbox %d was another create's too",
			      MODE_NAME[_i], i);
	}
	/* a tenant's traces in a pooled sandbox, deleted: the next pooled one
	 * is another sandbox */
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(pstatus(&s, "DELETE", ids[i]), 200);
		free(ids[i]);
	}
	pwait_ready(&s, 1);
	struct resp a;
	pcreate(&s, "{}", NULL, &a);
	bool pool;
	char *id = pcreated(&a, MODE_NAME[_i], &pool);
	resp_free(&a);
	ck_assert(pool);
	char marker[64], line[256];
	snprintf(marker, sizeof marker, "moat-pool-trace-%d-%ld", (int)getpid(), harness_now_ms());
	snprintf(line, sizeof line, "echo s > /sandbox/%s; echo t > /tmp/%s; (sleep 300 %s &)",
		 marker, marker, marker);
	ck_assert_int_eq(psh(&s, id, line), 0);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	pwait_ready(&s, 1);
	pcreate(&s, "{}", NULL, &a);
	id = pcreated(&a, MODE_NAME[_i], &pool);
	resp_free(&a);
	ck_assert(pool);
	snprintf(line, sizeof line, "test ! -e /sandbox/%s && test ! -e /tmp/%s", marker, marker);
	ck_assert_msg(psh(&s, id, line) == 0, "%s: a deleted tenant's files in the next pooled "
		      "sandbox", MODE_NAME[_i]);
	ck_assert_msg(marked(marker) == 0, "%s: a deleted tenant's process lives on",
		      MODE_NAME[_i]);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	pwait_ready(&s, 1);
	server_stop_pool(&s, 1);
}
END_TEST

/* Only exactly the pool's request takes one: other limits, env, network
 * refused or not, an X-Sandbox-Id, kvEnabled, each a cold sandbox, the
 * pool untouched. */
START_TEST(pool_only_its_request)
{
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){ .sbx_pool = 1 }, 1))
		return;
	static const char *const hdr[] = { "-H", "X-Sandbox-Id: pool-test-1", NULL };
	const struct {
		const char *body;
		const char *const *extra;
	} other[] = {
		{ "{\"memoryMb\":128}", NULL }, { "{\"cpus\":0.5}", NULL }, { "{\"pidsLimit\":32}", NULL },
		{ "{\"env\":{\"A\":\"b\"}}", NULL }, { "{\"kvEnabled\":true}", hdr }, { "{}", hdr },
	};
	for (size_t k = 0; k < sizeof other / sizeof *other; k++) {
		struct resp r;
		pcreate(&s, other[k].body, other[k].extra, &r);
		bool pool;
		char *id = pcreated(&r, other[k].body, &pool);
		ck_assert_msg(!pool, "%s: %s%s took the pool's sandbox: %s", MODE_NAME[_i],
			      other[k].body, other[k].extra ? " with X-Sandbox-Id" : "", r.body);
		resp_free(&r);
		ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
		free(id);
	}
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_used_total", NULL), 0);
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_ready", NULL), 1);
	/* without serve.allowOpenNetwork no network: true shape is kept */
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_target", "shape=\"network\""),
			    0);
	struct resp r;
	pcreate(&s, "{\"onIdle\":\"pause\",\"maxCpuTimeMs\":60000}", NULL, &r);
	bool pool;
	char *id = pcreated(&r, MODE_NAME[_i], &pool);
	ck_assert_msg(pool && jnum(r.json, "memoryMb") == 256,
		      "%s: the defaults (lifetime keys aside) take the pool's: %s", MODE_NAME[_i],
		      r.body);
	resp_free(&r);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	pwait_ready(&s, 1);
	server_stop_pool(&s, 1);
}
END_TEST

static double reserved_mb(struct server *s)
{
	struct resp r;
	get(s, "/healthz?detail=1", &r);
	double v = jnum(jget(jget(r.json, "sandboxes"), "memoryMb"), "reserved");
	resp_free(&r);
	return v;
}

/* The pooled sandboxes reserve from serve.sandboxes' budget (a create can
 * never pass it) and do not count against --max-sandboxes. */
START_TEST(pool_budget_and_max)
{
	static const char *const args[] = { "--max-sandboxes", "1", NULL };
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){
		.sbx_pool = 1, .args = args,
		.config = "{\"serve\":{\"sandboxes\":{\"memoryMb\":512,\"cpus\":64}}}" }, 1))
		return;
	ck_assert_msg(reserved_mb(&s) == 256, "%s: the pooled sandbox reserves its 256 MiB",
		      MODE_NAME[_i]);
	struct resp r;
	pcreate(&s, "{}", NULL, &r);
	bool pool;
	char *id = pcreated(&r, "the one --max-sandboxes allows", &pool);
	ck_assert(pool);
	resp_free(&r);
	pwait_ready(&s, 1); /* refilled: the pool is not counted in --max-sandboxes */
	ck_assert_msg(reserved_mb(&s) == 512, "%s: one live, one pooled: 512 MiB reserved",
		      MODE_NAME[_i]);
	pcreate(&s, "{}", NULL, &r);
	ck_assert_msg(r.code == 503 && strstr(r.body, "--max-sandboxes"),
		      "%s: a second create with --max-sandboxes 1 and a ready pool: %d %s",
		      MODE_NAME[_i], r.code, r.body);
	resp_free(&r);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	/* the pooled one's 256 MiB stay reserved: 384 more do not fit */
	pcreate(&s, "{\"memoryMb\":384}", NULL, &r);
	ck_assert_msg(r.code == 503 && strstr(r.body, "serve.sandboxes.memoryMb 512"),
		      "%s: past the budget with the pool's reservation: %d %s", MODE_NAME[_i],
		      r.code, r.body);
	resp_free(&r);
	ck_assert_msg(reserved_mb(&s) == 256, "%s: the pool's reservation alone", MODE_NAME[_i]);
	server_stop_pool(&s, 1);
}
END_TEST

/* A pool that cannot be filled (its sandbox past the budget) says so in
 * /metrics, /healthz?detail=1 and one warning, and retries with a growing
 * back-off, not in a loop; creates go on cold. */
START_TEST(pool_fill_fails)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){
		.sbx_pool = 1, .config = "{\"serve\":{\"sandboxes\":{\"memoryMb\":200}}}" });
	long t0 = harness_now_ms();
	while (pool_metric(&s, "moat_serve_sandbox_pool_failed_total", NULL) < 1)
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(10000) &&
				      (harness_sleep_ms(20), true),
			      "%s: no failed fill counted", MODE_NAME[_i]);
	harness_sleep_ms(3500);
	double failed = pool_metric(&s, "moat_serve_sandbox_pool_failed_total", NULL);
	ck_assert_msg(failed >= 2 && failed <= 4, "%s: %g failed fills in 3.5 s (retries 1 s, 2 s, "
		      "4 s apart)", MODE_NAME[_i], failed);
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_ready", NULL), 0);
	struct resp r;
	get(&s, "/healthz?detail=1", &r);
	const char *e = jstr(jget(r.json, "sandboxPool"), "lastError");
	ck_assert_msg(e && strstr(e, "serve.sandboxes.memoryMb"), "%s: /healthz?detail=1: %s",
		      MODE_NAME[_i], r.body);
	resp_free(&r);
	char *log = server_log(&s);
	const char *w = strstr(log, "cannot make a live sandbox for the pool");
	ck_assert_msg(w && !strstr(w + 1, "cannot make a live sandbox for the pool"),
		      "%s: one warning per distinct failure: %.2000s", MODE_NAME[_i], log);
	free(log);
	pcreate(&s, "{\"memoryMb\":64}", NULL, &r);
	bool pool;
	char *id = pcreated(&r, "a cold create beside a failing pool", &pool);
	ck_assert(!pool);
	resp_free(&r);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	server_stop(&s);
}
END_TEST

/* SIGTERM with the pool full and a sandbox of it handed out: the service
 * exits 0 and leaves nothing: no process (server_cleanup), no cgroup leaf. */
START_TEST(pool_shutdown)
{
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){ .sbx_pool = 2 }, 2))
		return;
	struct resp r;
	pcreate(&s, "{}", NULL, &r);
	bool pool;
	free(pcreated(&r, MODE_NAME[_i], &pool));
	resp_free(&r);
	ck_assert(pool);
	pwait_ready(&s, 2);
	pid_t pid = s.p.pid;
	char where[64];
	int leaves = cg_leaves_of(pid, where, sizeof where);
	int st = server_term(&s, harness_scale_ms(15000), NULL);
	ck_assert_msg(st == 0, "%s: SIGTERM with a full sandbox pool: status %d", MODE_NAME[_i], st);
	int left = cg_leaves_of(pid, where, sizeof where);
	ck_assert_msg(left == 0, "%s: %d cgroup leaves left in %s (%d before SIGTERM)",
		      MODE_NAME[_i], left, where, leaves);
	server_cleanup(&s);
}
END_TEST

/* The default (no --sandbox-pool, no pool config): one of each shape
 * (the default create's and, open egress allowed, network: true's:
 * E2B's with internet access) as root with 1 GiB available, none
 * rootless (docs/SANDBOXES.md, "The pool"). */
START_TEST(pool_default)
{
	struct server s;
	server_start(&s, _i, &(struct server_opts){
		.sbx_pool = -1, .config = "{\"serve\":{\"allowOpenNetwork\":true}}" });
	double mib = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
	double want = _i == MODE_ROOT && harness_is_root() && mib >= 1024 ? 1 : 0;
	double target = pool_metric(&s, "moat_serve_sandbox_pool_target", "shape=\"default\"");
	double net = pool_metric(&s, "moat_serve_sandbox_pool_target", "shape=\"network\"");
	ck_assert_msg((target == want || (mib > 900 && mib < 1150)) && net == target,
		      "%s: the default pool: %g and %g of network: true (%.0f MiB available)",
		      MODE_NAME[_i], target, net, mib);
	if (target > 0 && !pwait_ready(&s, (int)(target + net))) {
		server_stop(&s);
		harness_skip(POOL_SKIP);
		return;
	}
	server_stop_pool(&s, (int)(target + net));
}
END_TEST

/* The contained egress of network: true (src/net/net.c): a default route
 * through lo and the supervisor's redirect listener on 127.0.0.1; exit
 * code 0 when the sandbox has them (one without network has neither). */
#define HAS_EGRESS                                                      \
	"grep -q '^lo[[:space:]]*00000000' /proc/net/route && "         \
	"grep -q ' 0100007F:[0-9A-F]* 00000000:0000 0A' /proc/net/tcp"

/* The pool's network: true shape (serve.sandboxes.networkPool; E2B's
 * create with allow_internet_access true): only exactly that request takes
 * one (the default create, network with env or other limits, E2B's with
 * envVars or without internet access: cold, the pool untouched); the one
 * taken has its egress as a cold one has; E2B's create takes one too
 * (bound to its key alike: the same serve_sbx_create). */
START_TEST(pool_network)
{
	struct server s;
	if (!pstart(&s, _i, &(struct server_opts){
		.sbx_pool = 0,
		.config = "{\"serve\":{\"allowOpenNetwork\":true,"
			  "\"sandboxes\":{\"networkPool\":1}}}" }, 1))
		return;
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_ready", "shape=\"network\""), 1);
	static const char *const cold[] = { "{}", "{\"network\":true,\"env\":{\"A\":\"b\"}}",
					    "{\"network\":true,\"memoryMb\":128}",
					    "{\"allowedHosts\":[\"https://example.com\"]}" };
	for (size_t k = 0; k < sizeof cold / sizeof *cold; k++) {
		struct resp r;
		pcreate(&s, cold[k], NULL, &r);
		bool pool;
		char *id = pcreated(&r, cold[k], &pool);
		ck_assert_msg(!pool, "%s: %s took the network pool's sandbox: %s", MODE_NAME[_i],
			      cold[k], r.body);
		resp_free(&r);
		if (k == 1)
			ck_assert_msg(psh(&s, id, HAS_EGRESS) == 0, "%s: a cold network: true sandbox "
				      "has no egress", MODE_NAME[_i]);
		ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
		free(id);
	}
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_used_total", NULL), 0);
	struct resp r;
	pcreate(&s, "{\"network\":true,\"lifetimeMs\":60000,\"metadata\":{\"k\":\"v\"}}", NULL,
		&r);
	bool pool;
	char *id = pcreated(&r, MODE_NAME[_i], &pool);
	ck_assert_msg(pool, "%s: network: true, the network pool ready: %s", MODE_NAME[_i], r.body);
	resp_free(&r);
	ck_assert_msg(psh(&s, id, HAS_EGRESS) == 0, "%s: a pooled network: true sandbox has no "
		      "interface but lo", MODE_NAME[_i]);
	ck_assert_msg(psh(&s, id, "test -z \"$(ls -A /sandbox)$(ls -A /tmp)\"") == 0,
		      "%s: a pooled sandbox's /sandbox or /tmp is not empty", MODE_NAME[_i]);
	ck_assert_int_eq(pstatus(&s, "DELETE", id), 200);
	free(id);
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_used_total",
					"shape=\"network\""), 1);
	ck_assert_double_eq(pool_metric(&s, "moat_serve_sandbox_pool_used_total",
					"shape=\"default\""), 0);
	/* E2B's create: with allow_internet_access true and nothing else,
	 * the pool's; with envVars, or without internet access, cold */
	pwait_ready(&s, 1);
	static const struct {
		const char *body;
		bool pool;
	} e2b[] = {
		{ "{\"templateID\":\"base\",\"allow_internet_access\":true,\"envVars\":{\"A\":\"b\"}}",
		  false },
		{ "{\"templateID\":\"base\",\"allow_internet_access\":false}", false },
		{ "{\"templateID\":\"base\",\"timeout\":60,\"allow_internet_access\":true,"
		  "\"metadata\":{\"k\":\"v\"}}", true },
	};
	/* --no-auth: any key is the native routes' credential (docs/E2B.md) */
	static const char *const hdr[] = { "-H", "X-API-KEY: e2b_pool_test", NULL };
	for (size_t k = 0; k < sizeof e2b / sizeof *e2b; k++) {
		double used = pool_metric(&s, "moat_serve_sandbox_pool_used_total", NULL);
		struct req q = { .method = "POST", .path = "/e2b/sandboxes", .body = e2b[k].body,
				 .extra = hdr };
		call(&s, &q, &r);
		ck_assert_msg(r.code == 201, "%s: E2B create %s: HTTP %d %s", MODE_NAME[_i],
			      e2b[k].body, r.code, r.body);
		const char *sid = jstr(r.json, "sandboxID");
		ck_assert(sid);
		char *eid = strdup(sid);
		resp_free(&r);
		ck_assert_msg(pool_metric(&s, "moat_serve_sandbox_pool_used_total", NULL) ==
				      used + e2b[k].pool,
			      "%s: E2B create %s: pooled should be %d", MODE_NAME[_i], e2b[k].body,
			      e2b[k].pool);
		bool net = !strstr(e2b[k].body, "false");
		ck_assert_msg((psh(&s, eid, HAS_EGRESS) == 0) == net,
			      "%s: E2B create %s: its network", MODE_NAME[_i], e2b[k].body);
		ck_assert_int_eq(pstatus(&s, "DELETE", eid), 200);
		free(eid);
	}
	pwait_ready(&s, 1);
	server_stop_pool(&s, 1);
}
END_TEST

Suite *serve_sbx_pool_suite(void)
{
	Suite *s = suite_create("serve_sbx_pool");
	TCase *tc = tcase_create("serve_sbx_pool");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, pool_handout, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_once, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_only_its_request, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_budget_and_max, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_fill_fails, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_shutdown, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_default, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, pool_network, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
