/* `moat serve`: the warm pool (docs/SERVE.md, "The pool"); the tests the Python zygote
 * shares with it are loop tests: index 0, 1 warm sandboxes (root, rootless), 2, 3 the
 * same through the zygote. Part of the serve suite (tcase "pool"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

#include <sys/syscall.h>

/* ---- tests: the warm pool (docs/SERVE.md, "The pool") --------------------------------- */

/* A pool test the Python zygote shares, NAME_in(mode, zygote): loop index 0,
 * 1 warm sandboxes (root, rootless), 2, 3 the same through the zygote. */
#define WARM_AND_ZYGOTE_TEST(name)                                                     \
	START_TEST(name)                                                               \
	{                                                                              \
		int mode = _i % 2;                                                     \
		HARNESS_MODE_GUARD(mode);                                              \
		name##_in(mode, _i >= 2);                                              \
	}                                                                              \
	END_TEST

#define PY_DIRTY                                                                       \
	"import os, json, random, sys, time\n"                                          \
	"open('/tmp/x', 'w').write('left')\n"                                           \
	"open('/sandbox/y', 'w').write('left')\n"                                       \
	"open('/dev/shm/z', 'w').write('left')\n"                                       \
	"os.environ['LEAK'] = '1'\n"                                                    \
	"json.LEAK = 1\n"                                                               \
	"sys.modules['leaked'] = json\n"                                                \
	"random.seed(42)\n"                                                             \
	"if os.fork() == 0:\n"                                                          \
	"    os.setsid()\n"                                                             \
	"    time.sleep(30)\n"                                                          \
	"    os._exit(0)\n"                                                             \
	"print('dirty')\n"
#define PY_CLEAN                                                                       \
	"import os, json, sys\n"                                                        \
	"seen = [p for p in ('/tmp/x', '/sandbox/y', '/dev/shm/z') if os.path.exists(p)]\n" \
	"seen += [n for n in ('LEAK',) if n in os.environ]\n"                           \
	"seen += ['json.LEAK'] if hasattr(json, 'LEAK') else []\n"                      \
	"seen += ['leaked'] if 'leaked' in sys.modules else []\n"                       \
	"pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"           \
	"print('clean' if not seen and pids == [1, 2] else 'SEEN %s %s' % (seen, pids))\n"

/* Single use: what one request leaves (files, /tmp, environment, module
 * state, a daemon) is seen by none of the next 20, pooled or not. */
static void pool_single_use_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	struct resp r;
	char *q = harness_json_quote(PY_DIRTY), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s}", q), 0);
	v1(&s, body, &r);
	ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "dirty\n"), "%.500s", r.body);
	resp_free(&r);
	free(body);
	free(q);
	q = harness_json_quote(PY_CLEAN);
	ck_assert_int_ge(asprintf(&body, "{\"code\":%s}", q), 0);
	int warm = 0;
	for (int i = 0; i < 20; i++) {
		if (i % 2 == 0)
			pool_wait_ready(&s, "python", 1);
		v1(&s, body, &r);
		ck_assert_msg(!strcmp(jstr(r.json, "stdout"), "clean\n"), "request %d saw the one "
			      "before: %.500s", i, r.body);
		warm += pooled(&r);
		resp_free(&r);
	}
	ck_assert_msg(warm >= 10, "only %d of 20 requests were pooled", warm);
	free(body);
	free(q);
	/* a handler, through the pool: its shims and input arrive with it */
	pool_wait_ready(&s, "python", 1);
	double used = pool_metric(&s, "moat_pool_used_total", NULL);
	run_py(&s,
	       "from spin_sdk.http import Response\n"
	       "def handle_request(request):\n"
	       "    return Response(200, {}, b'warm ' + request.body)\n",
	       ",\"input\":{\"method\":\"POST\",\"body\":\"hi\"}", &r);
	ck_assert_msg(r.code == 200 && !strcmp(r.body, "warm hi"), "handler: HTTP %d [%.300s]",
		      r.code, r.body);
	resp_free(&r);
	ck_assert(pool_metric(&s, "moat_pool_used_total", NULL) == used + 1);
	if (zygote)
		ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) >= 22);
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

/* Loop index 2, 3: the same through the Python zygote: each of its children is as fresh. */
WARM_AND_ZYGOTE_TEST(pool_single_use)

/* The request's wall clock starts at delivery; its limits are the pool's,
 * in force; a request the pool cannot serve runs cold, correctly. */
static void pool_limits_and_fallback_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_ready(&s, "python", 1);
	harness_sleep_ms(1500); /* idle time is not the request's */
	struct resp r;
	v1(&s, "{\"code\":\"import time\\ntime.sleep(0.5)\\nprint('slept')\",\"timeout\":1000}",
	   &r);
	ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "slept\n"), "%.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"import time\\ntime.sleep(5)\",\"timeout\":300}", &r);
	ck_assert_msg(pooled(&r) && cJSON_IsTrue(jget(r.json, "timedOut")) &&
			      jnum(r.json, "durationMs") < harness_scale_ms(3000),
		      "a pooled timeout: %.500s", r.body);
	resp_free(&r);
	/* the pool's memory limit (the service's default, 256 MiB) holds */
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"b = bytearray(400 * 1024 * 1024)\\nprint('allocated')\"}", &r);
	ck_assert_msg(pooled(&r) && strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "",
					   "allocated\n"),
		      "400 MiB in a pooled 256 MiB sandbox: %.500s", r.body);
	resp_free(&r);
	/* other limits: cold, except with the zygote, which makes a child
	 * with the request's own limits then (in force: 150 MiB under 100),
	 * and counts it */
	double made_for = zygote ? pool_metric(&s, "moat_pool_zygote_made_for_request_total", NULL)
				 : 0;
	v1(&s, "{\"code\":\"print(1)\",\"memoryMb\":100}", &r);
	ck_assert_msg(pooled(&r) == zygote && !strcmp(jstr(r.json, "stdout"), "1\n"), "%.500s",
		      r.body);
	resp_free(&r);
	if (zygote) {
		ck_assert(pool_metric(&s, "moat_pool_zygote_made_for_request_total", NULL) ==
			  made_for + 1);
		v1(&s, "{\"code\":\"b = bytearray(150 * 1024 * 1024)\\nprint('allocated')\","
		       "\"memoryMb\":100}", &r);
		ck_assert_msg(pooled(&r) && strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout")
									 : "", "allocated\n"),
			      "150 MiB in a 100 MiB zygote's child: %.500s", r.body);
		resp_free(&r);
	}
	/* cold: a start-up variable, network, outputs, another language */
	static const char *const cold[] = {
		"{\"code\":\"print(1)\",\"env\":{\"PYTHONHASHSEED\":\"1\"}}",
		"{\"code\":\"print(1)\",\"allowedHosts\":[]}",
		"{\"code\":\"open('o.txt','w').write('x')\\nprint(1)\",\"outputs\":[\"o.txt\"]}",
		"{\"code\":\"echo 1\",\"language\":\"bash\"}",
	};
	for (size_t i = 0; i < sizeof cold / sizeof cold[0]; i++) {
		v1(&s, cold[i], &r);
		ck_assert_msg(!pooled(&r) && !strcmp(jstr(r.json, "stdout"), "1\n"),
			      "%s: %.500s", cold[i], r.body);
		resp_free(&r);
	}
	/* stdin, argv, __name__ and the exit status as a cold run has them */
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"import sys\\nprint(repr(sys.stdin.read()), sys.argv, __name__)\\n"
	       "sys.exit(3)\",\"stdin\":\"a\\nb\"}", &r);
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 3 &&
			      !strcmp(jstr(r.json, "stdout"), "'a\\nb' ['/sandbox/main.py'] __main__\n"),
		      "%.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"raise ValueError('boom')\"}", &r);
	const char *err = jstr(r.json, "stderr");
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 1 && err &&
			      !strncmp(err, "Traceback (most recent call last):\n  File \"/sandbox/main.py\"",
				       60) && strstr(err, "ValueError: boom") && !strstr(err, "moat_pool"),
		      "an exception's trace: %.500s", r.body);
	resp_free(&r);
	pool_wait_ready(&s, "javascript", 1);
	v1(&s, "{\"language\":\"javascript\",\"code\":\"const fs = require('fs');\\n"
	       "console.log(fs.readFileSync(0, 'utf8'), process.argv[1], require.main === module);\\n"
	       "process.exitCode = 4\",\"stdin\":\"js-in\"}", &r);
	ck_assert_msg(pooled(&r) && jnum(r.json, "exitCode") == 4 &&
			      !strcmp(jstr(r.json, "stdout"), "js-in /sandbox/main.js true\n"),
		      "javascript: %.500s", r.body);
	resp_free(&r);
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

WARM_AND_ZYGOTE_TEST(pool_limits_and_fallback)

/* 8 clients at once: every request answered right, no sandbox used twice
 * (uses never exceed creations; every eligible request was pooled or
 * counted cold). */
static void pool_under_load_in(int _i, bool zygote)
{
	struct server s;
	static const char *const args[] = { "--max-concurrent", "4", NULL };
	struct server_opts o = { .socket = true, .pool = 2, .args = args, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 2);
	enum { CLIENTS = 8, EACH = 4 };
	struct call c[CLIENTS];
	int done = 0;
	for (int round = 0; round < EACH; round++) {
		for (int i = 0; i < CLIENTS; i++) {
			char body[256];
			snprintf(body, sizeof body,
				 i % 2 ? "{\"language\":\"javascript\",\"code\":\"console.log(%d)\"}"
				       : "{\"code\":\"print(%d)\"}",
				 round * CLIENTS + i);
			struct req q = { .path = "/v1/run", .body = body };
			call_start(&s, &q, &c[i]);
		}
		for (int i = 0; i < CLIENTS; i++) {
			struct resp r;
			call_finish(&c[i], &r);
			char want[16];
			snprintf(want, sizeof want, "%d\n", round * CLIENTS + i);
			ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
					      !strcmp(jstr(r.json, "stdout"), want),
				      "request %d: HTTP %d %.400s", round * CLIENTS + i, r.code, r.body);
			resp_free(&r);
			done++;
		}
	}
	double created = pool_metric(&s, "moat_pool_created_total", NULL),
	       used = pool_metric(&s, "moat_pool_used_total", NULL),
	       cold = pool_metric(&s, "moat_pool_cold_total", NULL),
	       in_use = pool_metric(&s, "moat_pool_in_use", NULL);
	ck_assert_msg(used + cold == done && used <= created && used >= 4 && in_use == 0,
		      "created %.0f used %.0f cold %.0f in use %.0f of %d requests", created, used,
		      cold, in_use, done);
	/* an idle sandbox's memory is reported where it has a memory cgroup */
	struct resp r;
	pool_wait_ready(&s, "python", 1);
	v1(&s, "{\"code\":\"print(1)\"}", &r);
	const char *m = jstr(jget(r.json, "limits"), "memory");
	char mech[32];
	snprintf(mech, sizeof mech, "%s", m ? m : "?");
	bool cg = !strncmp(mech, "cgroup", 6);
	resp_free(&r);
	double idle = pool_metric(&s, "moat_pool_idle_memory_bytes", "language=\"python\"");
	/* a zygote's child shares the zygote's pages: its cgroup holds little,
	 * nothing at all when its pid 1 copied every page it writes before it
	 * joined (cgroup v1 charges a page where it was first written) */
	ck_assert_msg(cg ? idle >= (zygote ? 0 : 1e6) && idle < 256e6 : idle == -1,
		      "idle python sandbox: %.0f bytes (memory limit by %s)", idle, mech);
	server_stop_pool(&s, pool_idle_children(2, zygote));
}

WARM_AND_ZYGOTE_TEST(pool_under_load)

/* kill -9 of the service: its warm sandboxes die with it (their pid 1's
 * parent-death signal); nothing is left. */
static void pool_killed_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 2, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 2);
	ck_assert_int_eq(kill(s.p.pid, SIGKILL), 0);
	server_wait_exit(&s, harness_scale_ms(10000));
	unlink(s.sock);
	server_cleanup(&s); /* no process of it left (they would be ours: a subreaper) */
}

/* Loop index 2, 3: with the zygote: it and its children (waiting ones too) die as well. */
WARM_AND_ZYGOTE_TEST(pool_killed)

/* A warm sandbox killed while it waited is never handed a request: the
 * request runs cold and succeeds. */
static void pool_dead_sandbox_in(int _i, bool zygote)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 1 : -1 };
	server_start(&s, _i, &o);
	if (zygote)
		pool_wait_zygote(&s);
	pool_wait_all(&s, 1);
	pid_t kids[8];
	int n = proc_children(s.p.pid, kids, 8);
	ck_assert_int_eq(n, pool_idle_children(1, zygote));
	for (int k = 0; k < n; k++)
		ck_assert_int_eq(kill(kids[k], SIGKILL), 0); /* each warm sandbox's pid 1 */
	harness_sleep_ms(100);
	struct resp r;
	v1(&s, "{\"code\":\"print('after')\"}", &r);
	ck_assert_msg(!pooled(&r) && !strcmp(jstr(r.json, "stdout"), "after\n"),
		      "a request after its warm sandbox died: %.500s", r.body);
	resp_free(&r);
	ck_assert(pool_metric(&s, "moat_pool_failed_total", NULL) >= 1);
	if (zygote) {
		/* a new zygote replaces the dead one, and serves */
		pool_wait_zygote(&s);
		pool_wait_ready(&s, "python", 1);
		v1(&s, "{\"code\":\"print('again')\"}", &r);
		ck_assert_msg(pooled(&r) && !strcmp(jstr(r.json, "stdout"), "again\n"),
			      "after the zygote was replaced: %.500s", r.body);
		resp_free(&r);
		ck_assert(pool_metric(&s, "moat_pool_zygote_starts_total", NULL) >= 2);
	}
	server_stop_pool(&s, pool_idle_children(1, zygote));
}

/* Loop index 2, 3: the zygote killed (its pid 1 is the server's child): the waiting
 * children die with it, the next request runs cold, a new zygote takes
 * over. */
WARM_AND_ZYGOTE_TEST(pool_dead_sandbox)

/* A pooled server (warm interpreters, 2 per kind, full) whose refill waits
 * at most defer_ms for a run (MOAT_TEST_REFILL_DEFER_MS); args: more
 * arguments, or NULL. */
static void refill_server(struct server *s, int mode, long defer_ms, const char *const *args)
{
	char var[64];
	snprintf(var, sizeof var, "MOAT_TEST_REFILL_DEFER_MS=%ld", defer_ms);
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent", var, NULL };
	struct server_opts o = { .socket = true, .pool = 2, .env = env, .zygote = -1, .args = args };
	server_start(s, mode, &o);
	pool_wait_all(s, 2);
}

/* A JavaScript request that holds its sandbox until the test lets it go
 * (held_release; 55 s at most), named moat-hold while it holds, then prints
 * "held", started into c; returns once it holds. The refill tests used to
 * hold for a scaled time instead, which a loaded host could see end before
 * the refill it was to outlast (issue 49). */
static void held_start(struct server *s, struct call *c)
{
	static const char *const body =
		"{\"language\":\"javascript\",\"code\":\"process.title = 'moat-hold';\\n"
		"const t = setTimeout(() => {}, 55000);\\n"
		"process.on('SIGUSR2', () => { clearTimeout(t); process.title = 'node'; "
		"console.log('held'); });\",\"timeout\":60000}";
	int before = proc_descendants_named(s->p.pid, "moat-hold\n", 5, NULL);
	struct req q = { .path = "/v1/run", .body = body };
	call_start(s, &q, c);
	long t0 = harness_now_ms();
	while (proc_descendants_named(s->p.pid, "moat-hold\n", 5, NULL) <= before) {
		if (harness_now_ms() - t0 > harness_scale_ms(20000)) {
			struct resp r;
			call_finish(c, &r);
			ck_abort_msg("the long run never held its sandbox: HTTP %d %.600s", r.code,
				     r.body);
		}
		harness_sleep_ms(20);
	}
}

/* Lets every held run go (SIGUSR2, through a pidfd of a process seen named
 * moat-hold). */
static bool named_hold(pid_t p)
{
	char f[64];
	snprintf(f, sizeof f, "/proc/%ld/comm", (long)p);
	char *comm = slurp(f, NULL);
	bool is = comm && !strcmp(comm, "moat-hold\n");
	free(comm);
	return is;
}

static void held_release(struct server *s)
{
	pid_t p = 0;
	while (proc_descendants_named(s->p.pid, "moat-hold\n", 5, &p) > 0) {
		int fd = harness_pidfd(p);
		/* still the one seen: the pidfd names it, not a later owner of p */
		if (named_hold(p))
			ck_assert_int_eq(syscall(SYS_pidfd_send_signal, fd, SIGUSR2, NULL, 0), 0);
		close(fd);
		/* its name goes with the signal's handler */
		for (long t0 = harness_now_ms(); named_hold(p);) {
			ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(10000),
				      "a held run did not let go");
			harness_sleep_ms(10);
		}
	}
}

/* Waits until the refill has waited for a run n times in all (since t0). */
static void refill_wait_deferred(struct server *s, double n, long t0)
{
	while (pool_metric(s, "moat_pool_refill_deferred_total", NULL) < n) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(10000),
			      "the refill never waited for the run");
		harness_sleep_ms(10);
	}
}

/* The answer of a held_start request: pooled, "held". */
static void held_finish(struct call *c)
{
	struct resp r;
	call_finish(c, &r);
	ck_assert_msg(r.code == 200 && pooled(&r) && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "held\n"),
		      "the long run: HTTP %d %.400s", r.code, r.body);
	resp_free(&r);
}

/* With the pool otherwise idle, a refill waits while a request runs in a
 * sandbox just handed out and its kind still has one ready (the request's
 * start then has the CPUs to itself), but not past its deadline (here
 * 1.5 s, scaled): a long run does not keep the pool short. */
START_TEST(pool_refill_waits_for_a_run)
{
	HARNESS_MODE_GUARD(_i);
	long defer = harness_scale_ms(1500);
	struct server s;
	refill_server(&s, _i, defer, NULL);
	double deferred = pool_metric(&s, "moat_pool_refill_deferred_total", NULL);
	double created = pool_metric(&s, "moat_pool_created_total", NULL);
	struct call run;
	long t0 = harness_now_ms();
	held_start(&s, &run);
	/* handed out: the refill waits (and says so) */
	refill_wait_deferred(&s, deferred + 1, t0);
	double made = pool_metric(&s, "moat_pool_created_total", NULL);
	if (harness_now_ms() - t0 < defer / 2) /* surely before the deadline */
		ck_assert_msg(made == created, "a sandbox was made while the run had just started");
	/* the deadline: the pool is whole again while the run still runs (it
	 * holds until released) */
	pool_wait_ready(&s, "javascript", 2);
	ck_assert_msg(pool_metric(&s, "moat_pool_in_use", NULL) == 1,
		      "the pool was refilled only after the run (%ld ms)", harness_now_ms() - t0);
	held_release(&s);
	held_finish(&run);
	server_stop_pool(&s, pool_idle_children(2, false));
}
END_TEST

/* Under load the refill does not wait: a second request handed a sandbox
 * while the first runs, and the pool is refilled while both run, long
 * before the deadline (here 60 s) would let it. */
START_TEST(pool_refill_under_load_does_not_wait)
{
	HARNESS_MODE_GUARD(_i);
	/* more run slots than runs: not saturated (then only the zygote's
	 * children would be made) */
	static const char *const args[] = { "--max-concurrent", "4", NULL };
	struct server s;
	refill_server(&s, _i, 60000, args);
	struct call run[2];
	long t0 = harness_now_ms();
	held_start(&s, &run[0]);
	refill_wait_deferred(&s, 1, t0);
	held_start(&s, &run[1]);
	/* both hold until released: refilled while both run */
	pool_wait_ready(&s, "javascript", 2);
	ck_assert_msg(pool_metric(&s, "moat_pool_in_use", NULL) == 2,
		      "the pool was refilled only after the runs (%ld ms)", harness_now_ms() - t0);
	held_release(&s);
	held_finish(&run[0]);
	held_finish(&run[1]);
	ck_assert_double_eq(pool_metric(&s, "moat_pool_refill_deferred_total", NULL), 1);
	server_stop_pool(&s, pool_idle_children(2, false));
}
END_TEST

/* The hand-over frame carries bytes exactly (netstrings): code, files in
 * subdirectories, empty and separator-laden values, non-ASCII text, stdin
 * that looks like a frame -- a warm python and a warm node see what a cold
 * run sees. */
START_TEST(pool_frame_exact)
{
	HARNESS_MODE_GUARD(_i);
	static const char *const bodies[] = {
		"{\"code\":\"import os, sys\\nprint(repr(open('d/e/f.txt').read()), "
		"repr(open('g').read()), repr(os.environ['E']), repr(os.environ['F']), "
		"repr(sys.stdin.read()), 'ünï:,', sorted(m for m in ('json', 'base64', 're') "
		"if m in sys.modules))\",\"files\":{\"d/e/f.txt\":\"1:a,2:bc,\",\"g\":\"\"},"
		"\"env\":{\"E\":\"\",\"F\":\"a=b,c:3:\\u00e9\"},\"stdin\":\"MOATPOOL2 4\\n1:x,\"}",
		"{\"language\":\"javascript\",\"code\":\"const fs = require('fs');\\n"
		"console.log(JSON.stringify([fs.readFileSync('d/e/f.txt', 'utf8'), "
		"fs.readFileSync('g', 'utf8'), process.env.E, process.env.F, fs.readFileSync(0, "
		"'utf8'), 'ünï:,']))\",\"files\":{\"d/e/f.txt\":\"1:a,2:bc,\",\"g\":\"\"},"
		"\"env\":{\"E\":\"\",\"F\":\"a=b,c:3:\\u00e9\"},\"stdin\":\"MOATPOOL2 4\\n1:x,\"}",
	};
	enum { N = sizeof bodies / sizeof bodies[0] };
	struct resp cold[N];
	cold_results(_i, bodies, N, cold);
	for (int k = 0; k < N; k++)
		ck_assert_msg(jnum(cold[k].json, "exitCode") == 0, "%.500s", cold[k].body);
	/* python in a warm interpreter, then in a child of the zygote (the
	 * default), which reads the same frame */
	for (int zygote = 0; zygote < 2; zygote++) {
		struct server s;
		struct server_opts o = { .socket = true, .pool = 1, .zygote = zygote ? 0 : -1 };
		server_start(&s, _i, &o);
		if (zygote)
			pool_wait_zygote(&s);
		for (int k = 0; k < N; k++) {
			pool_wait_ready(&s, k ? "javascript" : "python", 1);
			struct resp r;
			v1(&s, bodies[k], &r);
			ck_assert_msg(pooled(&r) &&
					      !strcmp(jstr(r.json, "stdout"), jstr(cold[k].json, "stdout")) &&
					      !strcmp(jstr(r.json, "stderr"), jstr(cold[k].json, "stderr")),
				      "%d warm%s:\n%.800s\ncold:\n%.800s", k, zygote ? " (zygote)" : "",
				      r.body, cold[k].body);
			resp_free(&r);
		}
		if (zygote)
			ck_assert(pool_metric(&s, "moat_pool_zygote_children_total", NULL) >= 1);
		server_stop_pool(&s, pool_idle_children(1, zygote));
	}
	ck_assert_str_eq(jstr(cold[0].json, "stdout"),
			 "'1:a,2:bc,' '' '' 'a=b,c:3:é' 'MOATPOOL2 4\\n1:x,' ünï:, []\n");
	for (int k = 0; k < N; k++)
		resp_free(&cold[k]);
}
END_TEST

/* The version of the host's esbuild (the sandbox root here), or NULL. */
static char *host_esbuild_version(void)
{
	FILE *f = popen("PATH=/usr/local/bin:/usr/bin:/bin esbuild --version 2>/dev/null", "r");
	if (!f)
		return NULL;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, f);
	pclose(f);
	if (n <= 0) {
		free(line);
		return NULL;
	}
	line[strcspn(line, "\n")] = '\0';
	return line;
}

/* TypeScript through a warm node (issue 15): the typescript kind's esbuild,
 * started before the request and fed the code on its stdin, gives what a
 * cold run's gives -- output, ESM semantics (top-level await,
 * import.meta), a syntax error's message and status, a thrown error's
 * trace, imports of the request's files under its tsconfig.json, stdin --
 * with "pool": true, and leaves no process behind (the program sees pids 1
 * and 2 only, as in a cold run). A variable Go reads at esbuild's start
 * sends the request cold. A TS handler goes the same way. */
#define TS_BODY "{\"language\":\"typescript\","
/* A warm node runs a program naming a Spin SDK package as a cold run does:
 * @spinframework/spin-kv resolves (and, without kvEnabled, says why it
 * cannot open), and a package moat does not offer fails at import with one
 * sentence (runtime/js/pool.cjs installs kv-hooks.mjs, the hook a cold run
 * gets from NODE_OPTIONS). */
START_TEST(pool_spin_sdk_imports)
{
	HARNESS_MODE_GUARD(_i);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = -1 };
	server_start(&s, _i, &o);
	pool_wait_ready(&s, "javascript", 1);
	const char *code =
		"import * as kv from \"@spinframework/spin-kv\";\n"
		"let a; try { kv.openDefault(); } catch (e) { a = e.kind; }\n"
		"const m = await import(\"@spinframework/spin-llm\").then(() => \"loaded\", (e) => e.message);\n"
		"console.log(a, m);\n";
	char *q = harness_json_quote(code), *body = NULL;
	ck_assert_int_ge(asprintf(&body, "{\"language\":\"javascript\",\"code\":%s}", q), 0);
	struct resp r;
	v1(&s, body, &r);
	ck_assert_msg(pooled(&r), "not run warm: %.500s", r.body);
	ck_assert_msg(!strcmp(jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "",
			      "access_denied moat does not offer @spinframework/spin-llm: a program "
			      "run by moat cannot use it\n"),
		      "%.800s", r.body);
	resp_free(&r);
	free(body);
	free(q);
	server_stop_pool(&s, pool_idle_children(1, false));
}
END_TEST

START_TEST(pool_typescript)
{
	HARNESS_MODE_GUARD(_i);
	if (pool_kinds() != 3) {
		harness_skip("%s: no esbuild on this host", __func__);
		return;
	}
	static const char *const bodies[] = {
		TS_BODY "\"code\":\"const x: number = await Promise.resolve(42);\\nconsole.log(x, "
		"import.meta.url, process.argv.length)\"}",
		TS_BODY "\"code\":\"const x: number = ;\"}",
		TS_BODY "\"code\":\"throw new Error('boom')\"}",
		TS_BODY "\"code\":\"import { y } from './lib';\\nimport { readdirSync, readFileSync } from "
		"'node:fs';\\nconst pids = readdirSync('/proc').filter((p) => /^\\\\d+$/.test(p));\\n"
		"console.log(y, pids.join(','), readFileSync(0, 'utf8'))\",\"stdin\":\"ts-in\","
		"\"files\":{\"lib.ts\":\"export const y: string = `${3 as number}`;\","
		"\"tsconfig.json\":\"{\\\"compilerOptions\\\":{\\\"target\\\":\\\"es2017\\\"}}\"}}",
		TS_BODY "\"code\":\"import { z } from './nope';\\nconsole.log(z)\"}",
		/* the service words these hints for esbuild's JS API; the warm
		 * node gives them the command line's words, as a cold run has */
		TS_BODY "\"code\":\"import { J } from './j.js';\\nconsole.log(J)\","
		"\"files\":{\"j.js\":\"export const J = <div/>;\"}}",
		TS_BODY "\"code\":\"import { a } from '#x';\\nconsole.log(a)\",\"files\":{"
		"\"package.json\":\"{\\\"imports\\\":{\\\"#x\\\":{\\\"custom\\\":\\\"./a.js\\\"}}}\","
		"\"a.js\":\"export const a = 1\"}}",
		/* a code excerpt with a hint's JS API words in it is the file's */
		TS_BODY "\"code\":\"const a: number = ; // You can use \\\"loader: { '.js': 'jsx' }\\\" "
		"to do that.\"}",
		/* the command line's message limit, 6 */
		TS_BODY "\"code\":\"import './a1';\\nimport './a2';\\nimport './a3';\\nimport './a4';\\n"
		"import './a5';\\nimport './a6';\\nimport './a7';\\nimport './a8';\"}",
	};
	/* what the last five show in a cold run's words */
	static const char *const said[] = { NULL, NULL, NULL, NULL, NULL,
					    "You can use \"--loader:.js=jsx\" to do that.",
					    "You can use \"--conditions=custom\" to do that:",
					    "You can use \"loader: { '.js': 'jsx' }\" to do...",
					    "6 of 8 errors shown (disable the message limit with --log-limit=0)" };
	enum { N = sizeof bodies / sizeof bodies[0] };
	struct resp cold[N];
	cold_results(_i, bodies, N, cold);
	struct server s;
	struct server_opts o = { .socket = true, .pool = 1, .zygote = -1 };
	server_start(&s, _i, &o);
	/* the warm typescript sandbox's esbuild waits for the code: one, in
	 * the typescript kind only */
	pool_wait_all(&s, 1);
	/* its name is set in its execve before its command line is (issue
	 * 49: seen as [] under load): both, once the execve is done */
	long t0 = harness_now_ms();
	pid_t esb = -1;
	char *cmd = NULL;
	for (;;) {
		free(cmd);
		cmd = NULL;
		int n = proc_descendants_named(s.p.pid, "esbuild\n", 4, &esb);
		if (n == 1 && (cmd = proc_cmdline(esb)) && *cmd)
			break;
		if (harness_now_ms() - t0 > harness_scale_ms(10000))
			break;
		harness_sleep_ms(20);
	}
	ck_assert_int_eq(proc_descendants_named(s.p.pid, "esbuild\n", 4, &esb), 1);
	/* the esbuild pool.cjs speaks the service with waits as the service
	 * (its hints reworded below); any other as a cold run's */
	char *ver = host_esbuild_version();
	const char *args = cmd && strchr(cmd, ' ') ? strchr(cmd, ' ') + 1 : "";
	if (ver && !strcmp(ver, "0.17.0"))
		ck_assert_msg(!strcmp(args, "--service=0.17.0"), "esbuild waits as [%s]", cmd);
	else
		ck_assert_msg(!strncmp(args, "--loader=ts ", 12), "esbuild %s waits as [%s]", ver, cmd);
	free(cmd);
	free(ver);
	for (int k = 0; k < N; k++) {
		pool_wait_ready(&s, "typescript", 1);
		struct resp r;
		v1(&s, bodies[k], &r);
		ck_assert_msg(pooled(&r), "typescript %d was not pooled: %.300s", k, r.body);
		ck_assert_msg(!strcmp(jstr(r.json, "stdout"), jstr(cold[k].json, "stdout")) &&
			      !strcmp(jstr(r.json, "stderr"), jstr(cold[k].json, "stderr")) &&
			      jnum(r.json, "exitCode") == jnum(cold[k].json, "exitCode"),
			      "typescript %d warm:\n%.800s\ncold:\n%.800s", k, r.body, cold[k].body);
		if (k == 0)
			ck_assert_str_eq(jstr(r.json, "stdout"), "42 file:///sandbox/.moat-main.mjs 2\n");
		else if (k == 3)
			ck_assert_str_eq(jstr(r.json, "stdout"), "3 1,2 ts-in\n");
		else
			ck_assert(jnum(r.json, "exitCode") == 1);
		if (said[k])
			ck_assert_msg(strstr(jstr(r.json, "stderr"), said[k]), "typescript %d: no '%s' in %.800s",
				      k, said[k], jstr(r.json, "stderr"));
		resp_free(&r);
		resp_free(&cold[k]);
	}
	/* an esbuild that died while it waited: the warm node runs one as a
	 * cold run's pid 2 does */
	pool_wait_ready(&s, "typescript", 1);
	esb = -1;
	t0 = harness_now_ms();
	while (proc_descendants_named(s.p.pid, "esbuild\n", 4, &esb) < 1 &&
	       harness_now_ms() - t0 < harness_scale_ms(10000))
		harness_sleep_ms(20);
	ck_assert_int_gt(esb, 0);
	ck_assert_int_eq(kill(esb, SIGKILL), 0);
	harness_sleep_ms(100);
	struct resp d;
	v1(&s, "{\"language\":\"typescript\",\"code\":\"console.log(7 as number)\"}", &d);
	ck_assert_msg(pooled(&d) && jnum(d.json, "exitCode") == 0 &&
			      !strcmp(jstr(d.json, "stdout"), "7\n") && !*jstr(d.json, "stderr"),
		      "after its esbuild was killed: %.500s", d.body);
	resp_free(&d);
	/* GOMAXPROCS would reach a cold run's esbuild, not a warm one's */
	pool_wait_ready(&s, "typescript", 1);
	struct resp g;
	v1(&s, "{\"language\":\"typescript\",\"code\":\"console.log(1 as number)\","
	       "\"env\":{\"GOMAXPROCS\":\"1\"}}", &g);
	ck_assert_msg(!pooled(&g) && !strcmp(jstr(g.json, "stdout"), "1\n"), "%.300s", g.body);
	resp_free(&g);
	/* javascript keeps its own warm nodes */
	pool_wait_ready(&s, "javascript", 1);
	v1(&s, "{\"language\":\"javascript\",\"code\":\"console.log(require('fs').readdirSync("
	       "'/proc').filter((p) => /^\\\\d+$/.test(p)).join(','))\"}", &g);
	ck_assert_msg(pooled(&g) && !strcmp(jstr(g.json, "stdout"), "1,2\n"), "%.300s", g.body);
	resp_free(&g);
	pool_wait_ready(&s, "typescript", 1);
	double used = pool_metric(&s, "moat_pool_used_total", NULL);
	struct resp h;
	char *env = envelope("export default {\n  async fetch(r: Request): Promise<Response> {\n"
			     "    return new Response('ts ' + (await r.text()));\n  }\n}\n",
			     ",\"input\":{\"method\":\"POST\",\"body\":\"hi\"}");
	post(&s, "/ts/h", env, &h);
	ck_assert_msg(h.code == 200 && !strcmp(h.body, "ts hi"), "handler: HTTP %d [%.300s]", h.code,
		      h.body);
	ck_assert(pool_metric(&s, "moat_pool_used_total", NULL) == used + 1);
	resp_free(&h);
	free(env);
	server_stop_pool(&s, pool_kinds());
}
END_TEST

void serve_pool_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "pool");

	SERVE_ADD(tc, only, pool_single_use, SERVE_WARM_AND_ZYGOTE);
	SERVE_ADD(tc, only, pool_limits_and_fallback, SERVE_WARM_AND_ZYGOTE);
	SERVE_ADD(tc, only, pool_under_load, SERVE_WARM_AND_ZYGOTE);
	SERVE_ADD(tc, only, pool_killed, SERVE_WARM_AND_ZYGOTE);
	SERVE_ADD(tc, only, pool_dead_sandbox, SERVE_WARM_AND_ZYGOTE);
	SERVE_ADD(tc, only, pool_refill_waits_for_a_run, SERVE_MODES);
	SERVE_ADD(tc, only, pool_refill_under_load_does_not_wait, SERVE_MODES);
	SERVE_ADD(tc, only, pool_typescript, SERVE_MODES);
	SERVE_ADD(tc, only, pool_spin_sdk_imports, SERVE_MODES);
	SERVE_ADD(tc, only, pool_frame_exact, SERVE_MODES);
}
