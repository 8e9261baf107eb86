/* `moat serve`: POST /v1/run: the runner's request as JSON. Part of the serve suite (tcase "v1"); the server and the
 * helpers are serve_common.h's. */
#include "serve_common.h"

#include <sys/ptrace.h>

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

/* pid ns init's pid among the server's children: NSpid "<host> 1" (0: none yet). */
static pid_t sandbox_pid1(const struct server *s)
{
	pid_t kids[64];
	int n = proc_children(s->p.pid, kids, 64);
	for (int i = 0; i < n; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%ld/status", (long)kids[i]);
		char *st = slurp(path, NULL);
		const char *ns = st ? strstr(st, "\nNSpid:") : NULL;
		bool init = false;
		if (ns) {
			const char *eol = strchr(ns + 1, '\n');
			const char *last = eol ? eol : ns + strlen(ns);
			while (last > ns && isdigit((unsigned char)last[-1]))
				last--;
			init = last[0] == '1' && !isdigit((unsigned char)last[1]) && last[-1] != ':';
		}
		free(st);
		if (init)
			return kids[i];
	}
	return 0;
}

/* The answer goes out once pid 1 has sent the program's status with nothing
 * else of the run alive, not after pid 1's own exit (the namespaces'
 * teardown): with pid 1 held at the very start of its exit (a ptrace exit
 * stop, PTRACE_O_TRACEEXIT), the answer still comes, complete; let go, pid 1
 * is reaped and nothing of the run is left (server_stop). */
START_TEST(v1_answer_before_teardown)
{
	HARNESS_MODE_GUARD(_i);
	if (getuid() != 0)
		harness_skip("ptrace of the sandbox's pid 1 needs root");
	struct server s;
	struct server_opts o = { 0 }; /* --pool 0: a cold run, pid 1 the server's child */
	server_start(&s, _i, &o);
	struct req q = { .path = "/v1/run",
			 .body = "{\"argv\":[\"sh\",\"-c\",\"sleep 2; echo done\"]}" };
	struct call c;
	call_start(&s, &q, &c);
	pid_t pid1 = 0;
	for (long until = harness_now_ms() + harness_scale_ms(10000); !pid1 && harness_now_ms() < until;)
		if (!(pid1 = sandbox_pid1(&s)))
			harness_sleep_ms(5);
	ck_assert_msg(pid1 > 0, "no sandbox pid 1 among the server's children");
	/* "reaped" asked of this process, never of another that gets its pid */
	int pfd = harness_pidfd(pid1);
	ck_assert_msg(ptrace(PTRACE_SEIZE, pid1, NULL, (void *)(long)PTRACE_O_TRACEEXIT) == 0,
		      "PTRACE_SEIZE %ld: %s", (long)pid1, strerror(errno));
	/* pid 1's stops until its exit stop: signals (SIGCHLD) passed on */
	bool at_exit = false;
	long until = harness_now_ms() + harness_scale_ms(20000);
	while (!at_exit && harness_now_ms() < until) {
		int st;
		pid_t w = waitpid(pid1, &st, __WALL | WNOHANG);
		if (w == 0) {
			harness_sleep_ms(2);
			continue;
		}
		ck_assert_msg(w == pid1 && WIFSTOPPED(st), "pid 1 ended before its exit stop (%#x)",
			      w == pid1 ? st : -1);
		if (st >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8)))
			at_exit = true;
		else
			ptrace(PTRACE_CONT, pid1, NULL,
			       (void *)(long)(st >> 16 ? 0 : WSTOPSIG(st)));
	}
	ck_assert_msg(at_exit, "pid 1 did not reach its exit");
	/* held there: the answer must come all the same */
	bool answered = false;
	for (long end = harness_now_ms() + harness_scale_ms(5000); !answered && harness_now_ms() < end;) {
		siginfo_t si = { 0 };
		answered = waitid(P_PID, (id_t)c.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			   si.si_pid == c.pid;
		if (!answered)
			harness_sleep_ms(5);
	}
	ptrace(PTRACE_DETACH, pid1, NULL, NULL); /* let it go (or the SIGKILL did) */
	struct resp r;
	call_finish(&c, &r);
	ck_assert_msg(answered, "%s: no answer while pid 1 was held at its exit", MODE_NAME[_i]);
	ck_assert_msg(r.code == 200 && r.json && jstr(r.json, "stdout") &&
			      !strcmp(jstr(r.json, "stdout"), "done\n") && jnum(r.json, "exitCode") == 0,
		      "HTTP %d: %.600s", r.code, r.body);
	resp_free(&r);
	/* let go, it is reaped (server_stop: nothing of the server left) */
	bool gone = false;
	for (long end = harness_now_ms() + harness_scale_ms(5000); !gone && harness_now_ms() < end;)
		if (!(gone = !harness_pidfd_exists(pfd)))
			harness_sleep_ms(5);
	close(pfd);
	ck_assert_msg(gone, "pid 1 %ld still there after it was let go", (long)pid1);
	server_stop(&s);
}
END_TEST

/* The mappings of pid that another process may share: writable shared
 * ones (perms "rw-s") and any of shared anonymous memory ("/dev/zero
 * (deleted)") or a memfd, whatever its perms; each line appended to *why
 * (with what the process is). How many, or -1 when its maps cannot be read
 * (it ended). */
static int foreign_maps(pid_t pid, const char *what, char **why)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/maps", (long)pid);
	char *maps = slurp(path, NULL);
	if (!maps || !*maps) {
		free(maps);
		return -1;
	}
	int n = 0;
	for (char *save = NULL, *l = strtok_r(maps, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char perms[8] = "";
		if (sscanf(l, "%*s %7s", perms) != 1)
			continue;
		if ((perms[1] == 'w' && perms[3] == 's') || strstr(l, "/dev/zero (deleted)") ||
		    strstr(l, "/memfd:")) {
			n++;
			char *more = NULL;
			if (asprintf(&more, "%s%s %ld: %s\n", *why ? *why : "", what, (long)pid, l) >= 0) {
				free(*why);
				*why = more;
			}
		}
	}
	free(maps);
	return n;
}

/* Every process named "moat-init" (a run's pid 1) among pid's descendants
 * to depth, with its children (the program) when progs: checked with
 * foreign_maps. Adds the pid 1s seen to *inits, what they map to *bad. */
static void check_inits(pid_t pid, int depth, bool progs, int *inits, int *bad, char **why)
{
	pid_t kids[64];
	int n = proc_children(pid, kids, 64);
	for (int i = 0; i < n; i++) {
		char f[64];
		snprintf(f, sizeof f, "/proc/%ld/comm", (long)kids[i]);
		char *comm = slurp(f, NULL);
		bool init = comm && !strcmp(comm, "moat-init\n");
		free(comm);
		if (init) {
			int m = foreign_maps(kids[i], "pid 1", why);
			if (m >= 0) {
				(*inits)++;
				*bad += m;
			}
			pid_t prog[8];
			int np = progs ? proc_children(kids[i], prog, 8) : 0;
			for (int j = 0; j < np; j++) {
				int pm = foreign_maps(prog[j], "its program", why);
				*bad += pm > 0 ? pm : 0;
			}
		}
		if (depth > 1)
			check_inits(kids[i], depth - 1, progs, inits, bad, why);
	}
}

/* How many pid 1s (children of the server named moat-init) have a child. */
static int inits_running(const struct server *s)
{
	pid_t kids[64], prog[8];
	int n = proc_children(s->p.pid, kids, 64), running = 0;
	for (int i = 0; i < n; i++) {
		char f[64];
		snprintf(f, sizeof f, "/proc/%ld/comm", (long)kids[i]);
		char *comm = slurp(f, NULL);
		running += comm && !strcmp(comm, "moat-init\n") && proc_children(kids[i], prog, 8) > 0;
		free(comm);
	}
	return running;
}

/* Concurrent cold runs under the service (issue 43, SECURITY.md row 108):
 * no run's pid 1 or program holds a mapping it shares with the supervisor
 * or with another run. The mount plan used to reach each pid 1 in a
 * MAP_SHARED mapping made before clone3, which every other thread's clone3
 * meanwhile copied into its own pid 1 (11 of 12 pid 1s held other runs'
 * 16 MiB regions, a session's for its whole life). Ten cold runs and a
 * session made at once, looked at from the host while all of them run;
 * then a pooled server's zygote and warm sandboxes, made while ten cold
 * runs start (and the pid 1s of the zygote's children). The runs are
 * ended by the server's stop (--grace 1) once looked at. */
START_TEST(v1_concurrent_runs_share_no_memory)
{
	HARNESS_MODE_GUARD(_i);
	enum { RUNS = 10 };
	static const char *const args[] = { "--max-concurrent", "16", "--grace", "1", NULL };
	static const char body[] =
		"{\"language\":\"bash\",\"code\":\"exec sleep 55\",\"timeout\":60000}";
	for (int pool = 0; pool <= 1; pool++) {
		struct server s;
		struct server_opts o = { .socket = true, .pool = pool, .args = args };
		server_start(&s, _i, &o);
		struct req q = { .path = "/v1/run", .body = body };
		struct req sq = { .path = "/v1/sessions", .body = "{\"language\":\"python\"}" };
		struct call calls[RUNS], ses;
		for (int k = 0; k < RUNS; k++) {
			call_start(&s, &q, &calls[k]);
			if (k == RUNS / 2 && !pool)
				call_start(&s, &sq, &ses);
		}
		struct resp r;
		int want = RUNS;
		if (!pool) {
			call_finish(&ses, &r);
			ck_assert_msg(r.code == 201 || (r.code == 503 && strstr(r.body, "not built")),
				      "%s: session: HTTP %d %.300s", MODE_NAME[_i], r.code, r.body);
			want += r.code == 201;
			resp_free(&r);
		} else {
			pool_wait_zygote(&s);
			pool_wait_ready(&s, "python", 1);
			want += pool_kinds() + 1; /* the warm sandboxes, the zygote's own */
		}
		long t0 = harness_now_ms();
		while (inits_running(&s) < want && harness_now_ms() - t0 < harness_scale_ms(30000))
			harness_sleep_ms(50);
		int inits = 0, bad = 0;
		char *why = NULL;
		/* the cold runs' and the session's pid 1s and programs; with a
		 * pool, the zygote's children's pid 1s too (its grandchildren) */
		check_inits(s.p.pid, pool ? 4 : 1, true, &inits, &bad, &why);
		/* the stop ends the runs (--grace 1) */
		int st = server_term(&s, harness_scale_ms(15000), NULL);
		for (int k = 0; k < RUNS; k++) {
			call_finish(&calls[k], &r);
			resp_free(&r);
		}
		server_cleanup(&s);
		ck_assert_msg(st == 0, "%s, pool %d: status %d after SIGTERM", MODE_NAME[_i], pool, st);
		ck_assert_msg(inits >= want, "%s, pool %d: %d pid 1s seen at once, %d wanted",
			      MODE_NAME[_i], pool, inits, want);
		ck_assert_msg(bad == 0,
			      "%s, pool %d: %d mappings shared with another process in %d pid 1s "
			      "and their programs:\n%s",
			      MODE_NAME[_i], pool, bad, inits, why ? why : "");
		free(why);
	}
}
END_TEST

void serve_v1_tests(Suite *s, const char *only)
{
	TCase *tc = serve_tcase(s, "v1");

	SERVE_ADD(tc, only, v1_run, SERVE_MODES);
	SERVE_ADD(tc, only, v1_open_network_allowed, SERVE_MODES);
	SERVE_ADD(tc, only, v1_answer_before_teardown, SERVE_MODES);
	SERVE_ADD(tc, only, v1_concurrent_runs_share_no_memory, SERVE_MODES);
}
