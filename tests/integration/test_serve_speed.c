/* moat serve under load: the warm pool holds its refills while the service
 * and its runs keep the CPUs busy, and requests run cold meanwhile (a warm
 * interpreter made then only competes with the runs). A server of its own
 * on a unix socket, as root and rootless; plain HTTP over the socket (the
 * test process is root in both modes). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define ROOTLESS_ID 65534

struct speed_server {
	struct harness_proc p;
	char dir[64];
	char sock[96];
	char kv[96];
};

/* One request on a fresh connection: the status (0: no answer) and the
 * body (malloc'd, NUL-terminated) in *body. */
static int http(const struct speed_server *s, const char *method, const char *path,
		const char *json, char **body)
{
	*body = NULL;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", s->sock);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return 0;
	}
	char head[256];
	size_t blen = json ? strlen(json) : 0;
	int hn = snprintf(head, sizeof head,
			  "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
			  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			  method, path, blen);
	ck_assert(hn > 0 && (size_t)hn < sizeof head);
	ck_assert_int_eq(write(fd, head, (size_t)hn), hn);
	if (blen)
		ck_assert_int_eq(write(fd, json, blen), (ssize_t)blen);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	for (;;) {
		if (len + 1 == cap) {
			ck_assert(cap < (64u << 20));
			buf = realloc(buf, cap *= 2);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	int code = 0;
	if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
		code = 0;
	char *b = strstr(buf, "\r\n\r\n");
	*body = strdup(b ? b + 4 : "");
	free(buf);
	ck_assert_ptr_nonnull(*body);
	return code;
}

/* The value of a metric line "name{label} value" (label NULL: "name value");
 * -1 when /metrics has no such line. */
static double metric(const struct speed_server *s, const char *name, const char *label)
{
	char *m;
	int code = http(s, "GET", "/metrics", NULL, &m);
	ck_assert_msg(code == 200, "GET /metrics: HTTP %d", code);
	char want[160];
	snprintf(want, sizeof want, label ? "%s{%s} " : "%s ", name, label);
	double v = -1;
	for (char *line = m; line && *line;) {
		char *nl = strchr(line, '\n');
		if (!strncmp(line, want, strlen(want))) {
			v = strtod(line + strlen(want), NULL);
			break;
		}
		line = nl ? nl + 1 : NULL;
	}
	free(m);
	return v;
}

/* moat serve --pool 1 --no-pool-zygote with the pool told the host has one
 * CPU (MOAT_TEST_POOL_CPUS=1): busy once the service's CPU time comes to
 * half a CPU. Waits for its warm Python sandbox. */
static void speed_start(struct speed_server *s, int mode)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "/tmp/moat-speed-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	ck_assert_int_eq(chmod(s->dir, 0700), 0);
	if (mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(s->dir, ROOTLESS_ID, ROOTLESS_ID), 0);
	snprintf(s->sock, sizeof s->sock, "%s/moat.sock", s->dir);
	snprintf(s->kv, sizeof s->kv, "%s/kv.sqlite3", s->dir);
	const char *const argv[] = { "serve", "--socket", s->sock, "--runtime",
				     harness_runtime_dir(), "--pool", "1", "--no-pool-zygote",
				     "--max-concurrent", "4", "--kv", s->kv, NULL };
	const char *const env[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent",
				    "MOAT_TEST_POOL_CPUS=1", NULL };
	harness_start(mode, argv, NULL, 0, env, NULL, NULL, &s->p);
	long t0 = harness_now_ms();
	for (;;) {
		char *b = NULL;
		int code = access(s->sock, F_OK) == 0 ? http(s, "GET", "/healthz", NULL, &b) : 0;
		free(b);
		if (code == 200 && metric(s, "moat_pool_ready", "language=\"python\"") >= 1)
			break;
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(30000),
			      "moat serve never held a warm Python sandbox");
		harness_sleep_ms(50);
	}
}

static void speed_stop(struct speed_server *s)
{
	ck_assert_int_eq(kill(s->p.pid, SIGTERM), 0);
	struct run_out out;
	memset(&out, 0, sizeof out);
	harness_finish(&s->p, &out);
	ck_assert_msg(out.status == 0, "moat serve exited %d: %.2000s", out.status,
		      out.err ? out.err : "");
	harness_free(&out);
	unlink(s->kv);
	rmdir(s->dir);
}

/* POST /v1/run of Python code: its answer must be 200 with stdout want;
 * the answer's "pool" (ran in a warm sandbox). */
static bool run_py(const struct speed_server *s, const char *code_json, const char *want)
{
	char req[512];
	snprintf(req, sizeof req, "{\"language\":\"python\",\"code\":%s,\"timeout\":60000}",
		 code_json);
	char *body;
	int code = http(s, "POST", "/v1/run", req, &body);
	cJSON *j = cJSON_Parse(body);
	cJSON *out = j ? cJSON_GetObjectItem(j, "stdout") : NULL;
	ck_assert_msg(code == 200 && cJSON_IsString(out) && !strcmp(out->valuestring, want),
		      "HTTP %d: %.600s", code, body);
	bool pooled = cJSON_IsTrue(cJSON_GetObjectItem(j, "pool"));
	cJSON_Delete(j);
	free(body);
	return pooled;
}

/* A run that used the CPU for 4 s, then two quick ones at once: the first
 * takes the warm sandbox, the pool does not make the next while the CPU
 * time just spent weighs (it says so in /metrics), and the second runs
 * cold; once the CPUs are idle again the pool is refilled. */
START_TEST(pool_holds_refill_while_cpus_busy)
{
	HARNESS_MODE_GUARD(_i);
	struct speed_server s;
	speed_start(&s, _i);
	const char *py = "language=\"python\"";
	double held0 = metric(&s, "moat_pool_refill_held_total", NULL);
	ck_assert_msg(held0 >= 0, "/metrics has no moat_pool_refill_held_total");
	ck_assert(run_py(&s, "\"import time\\nwhile time.process_time() < 4: pass\\nprint('burnt')\"",
			 "burnt\n"));
	/* refilled while the burner ran (its CPU time counts at its end) */
	ck_assert_msg(metric(&s, "moat_pool_ready", py) == 1,
		      "no warm Python sandbox after the long run");
	double cold0 = metric(&s, "moat_pool_cold_total", py);
	ck_assert_msg(run_py(&s, "\"print(2)\"", "2\n"), "the first quick run was not pooled");
	ck_assert_msg(!run_py(&s, "\"print(3)\"", "3\n"),
		      "the pool was refilled while 4 s of CPU time had just been spent");
	ck_assert_msg(metric(&s, "moat_pool_cold_total", py) >= cold0 + 1,
		      "the second quick run was not counted cold");
	ck_assert_msg(metric(&s, "moat_pool_refill_held_total", NULL) >= held0 + 1,
		      "the held refill is not in /metrics");
	/* the load is over: the pool is whole again */
	long t0 = harness_now_ms();
	while (metric(&s, "moat_pool_ready", py) < 1) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000),
			      "the pool was not refilled once the CPUs were idle");
		harness_sleep_ms(50);
	}
	speed_stop(&s);
}
END_TEST

Suite *serve_speed_suite(void)
{
	Suite *s = suite_create("serve_speed");
	TCase *tc = tcase_create("serve_speed");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, pool_holds_refill_while_cpus_busy, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}
