/* Integration: providers through the real moat binary.
 *  - docker: a stand-in `docker` first on PATH records argv, environment and
 *    stdin; checks what moat sent, the timeout → `docker kill`, failures.
 *  - e2b / daytona: contract tests against a local python3 http.server
 *    (tests/integration writes it at run time) on 127.0.0.1, over plain http
 *    allowed only by MOAT_TEST_ALLOW_HTTP=1 for the literal host 127.0.0.1.
 *    Request bodies, headers, teardown on every path, key never echoed.
 *  - live e2b / daytona runs only when E2B_API_KEY / DAYTONA_API_KEY are set.
 *  - config selection (--provider, --config, ./moat.json, aistack → none). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "harness.h"

#define KEY "sk-TESTKEY-0123456789abcdef"

static char tmpdir[256];

static void mkpath(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", tmpdir, name);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	size_t len = strlen(text);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	chmod(path, mode);
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n = getdelim(&buf, &cap, '\0', f);
	fclose(f);
	if (n < 0) {
		free(buf);
		return strdup("");
	}
	return buf;
}

static void setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/moat-prov-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", tmpdir);
}

/* Runs moat (as the current user) with args, in cwd, with exactly envp. */
static void run_moat(const char *const *args, const char *const *envp, const char *cwd,
		     const char *input, struct run_out *out)
{
	memset(out, 0, sizeof *out);
	char inpath[300], outpath[300], errpath[300];
	mkpath(inpath, sizeof inpath, ".in");
	mkpath(outpath, sizeof outpath, ".out");
	mkpath(errpath, sizeof errpath, ".err");
	write_file(inpath, input ? input : "", 0600);
	size_t n = 0;
	while (args[n])
		n++;
	char **argv = calloc(n + 2, sizeof *argv);
	argv[0] = (char *)harness_moat();
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = (char *)args[i];
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int in = open(inpath, O_RDONLY);
		int o = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 ||
		    (cwd && chdir(cwd) < 0))
			_exit(97);
		execve(argv[0], argv, (char *const *)envp);
		_exit(98);
	}
	free(argv);
	int st;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 60) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("moat did not finish within 60 s");
		}
		usleep(10000);
	}
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	out->out = read_text(outpath);
	out->err = read_text(errpath);
	ck_assert_ptr_nonnull(out->out);
	ck_assert_ptr_nonnull(out->err);
	out->out_len = strlen(out->out);
	out->err_len = strlen(out->err);
	out->json = cJSON_Parse(out->out);
}

static const char *error_message(const struct run_out *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(out->json, "error");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
	return cJSON_IsString(m) ? m->valuestring : "";
}

/* ---------------------------------------------------------------- docker */

/* The stand-in: records argv / env / stdin in $DOCKER_CONFIG (a directory
 * moat forwards to the docker CLI), then acts according to $DOCKER_CONFIG/mode. */
static const char STANDIN[] =
	"#!/bin/sh\n"
	"d=\"$DOCKER_CONFIG\"\n"
	"if [ \"$1\" = kill ]; then\n"
	"  echo \"$@\" >> \"$d/kill\"\n"
	"  [ -f \"$d/run.pid\" ] && kill \"$(cat \"$d/run.pid\")\" 2>/dev/null\n"
	"  exit 0\n"
	"fi\n"
	"for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$d/argv\"\n"
	"env > \"$d/env\"\n"
	"cat > \"$d/stdin\"\n"
	"mode=$(cat \"$d/mode\" 2>/dev/null)\n"
	"case \"$mode\" in\n"
	"  sleep) sleep 30 & echo $! > \"$d/run.pid\"; wait; exit 137;;\n"
	"  daemon) echo 'docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2; exit 125;;\n"
	"  *) echo \"out:$GREETING\"; echo 'err-line' >&2; exit 3;;\n"
	"esac\n";

static char path_env[600], cfg_env[600];

static void docker_setup(const char *mode)
{
	char bin[300], p[300];
	mkpath(bin, sizeof bin, "bin");
	ck_assert_int_eq(mkdir(bin, 0755), 0);
	mkpath(p, sizeof p, "bin/docker");
	write_file(p, STANDIN, 0755);
	mkpath(p, sizeof p, "mode");
	write_file(p, mode, 0644);
	snprintf(path_env, sizeof path_env, "PATH=%s/bin:/usr/bin:/bin", tmpdir);
	snprintf(cfg_env, sizeof cfg_env, "DOCKER_CONFIG=%s", tmpdir);
}

static char *recorded(const char *name)
{
	char p[300];
	mkpath(p, sizeof p, name);
	return read_text(p);
}

START_TEST(docker_sends_flags_env_and_stdin)
{
	docker_setup("ok");
	const char *env[] = { path_env, cfg_env, "HOME=/nonexistent",
			      HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE, NULL };
	const char *args[] = { "exec", "--provider", "docker", NULL };
	struct run_out out;
	run_moat(args, env, tmpdir,
		 "{\"language\":\"python\",\"code\":\"print('marker-code-91')\","
		 "\"env\":{\"GREETING\":\"hi there; $(id)\"},\"timeout\":20000}", &out);
	ck_assert_msg(out.json, "no JSON: %s %s", out.out, out.err);
	ck_assert_str_eq(harness_str(&out, "provider"), "docker");
	ck_assert_str_eq(harness_str(&out, "stdout"), "out:hi there; $(id)\n");
	ck_assert_str_eq(harness_str(&out, "stderr"), "err-line\n");
	ck_assert(harness_num(&out, "exitCode") == 3);
	ck_assert(!harness_bool(&out, "timedOut"));

	char *argv = recorded("argv"), *envs = recorded("env"), *in = recorded("stdin");
	ck_assert_ptr_nonnull(argv);
	const char *must[] = { "run\n", "--rm\n", "-i\n", "--read-only\n", "--cap-drop=ALL\n",
			       "--security-opt=no-new-privileges\n", "--user=65534:65534\n",
			       "--network=none\n", "--memory=512m\n", "--memory-swap=512m\n",
			       "--pids-limit=100\n", "--tmpfs=/tmp:rw,noexec,nosuid,nodev,size=64m\n",
			       "-e\nGREETING\n", "python:3.12-slim\npython3\n-\n" };
	for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
		ck_assert_msg(strstr(argv, must[i]), "argv lacks %s:\n%s", must[i], argv);
	const char *never[] = { "--privileged", "--cap-add", "--device", "-v\n", "--volume",
				"--env-file", "host", "hi there", "marker-code-91" };
	for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
		ck_assert_msg(!strstr(argv, never[i]), "argv has %s:\n%s", never[i], argv);
	ck_assert_str_eq(in, "print('marker-code-91')");
	ck_assert_ptr_nonnull(strstr(envs, "GREETING=hi there; $(id)\n"));
	ck_assert_ptr_null(strstr(envs, HARNESS_CANARY_VALUE));
	free(argv);
	free(envs);
	free(in);
	harness_free(&out);
}
END_TEST

START_TEST(docker_timeout_issues_kill)
{
	docker_setup("sleep");
	const char *env[] = { path_env, cfg_env, NULL };
	const char *args[] = { "exec", "--provider", "docker", NULL };
	struct run_out out;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	run_moat(args, env, tmpdir, "{\"code\":\"while True: pass\",\"timeout\":500}", &out);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_msg(out.json, "no JSON: %s %s", out.out, out.err);
	ck_assert(harness_bool(&out, "timedOut"));
	ck_assert(harness_is_null(&out, "exitCode"));
	ck_assert_str_eq(harness_str(&out, "killedBy"), "timeout");
	ck_assert_str_eq(harness_str(&out, "provider"), "docker");
	ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 15);
	char *kill_log = recorded("kill"), *argv = recorded("argv");
	ck_assert_msg(kill_log, "docker kill was not run");
	/* the killed container is the one that was named */
	char *name = strstr(argv, "--name=");
	ck_assert_ptr_nonnull(name);
	name += 7;
	char *nl = strchr(name, '\n');
	ck_assert_ptr_nonnull(nl);
	*nl = '\0';
	char expect[200];
	snprintf(expect, sizeof expect, "kill %s\n", name);
	ck_assert_str_eq(kill_log, expect);
	ck_assert(!strncmp(name, "moat-", 5));
	free(kill_log);
	free(argv);
	harness_free(&out);
}
END_TEST

START_TEST(docker_sigterm_issues_kill)
{
	docker_setup("sleep");
	const char *env[] = { path_env, cfg_env, NULL };
	char inpath[300], outpath[300];
	mkpath(inpath, sizeof inpath, ".in");
	mkpath(outpath, sizeof outpath, ".out");
	write_file(inpath, "{\"code\":\"x=1\",\"timeout\":30000}", 0600);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int in = open(inpath, O_RDONLY), o = open(outpath, O_WRONLY | O_CREAT, 0600);
		if (in < 0 || o < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0)
			_exit(97);
		execle(harness_moat(), "moat", "exec", "--provider", "docker", (char *)NULL, env);
		_exit(98);
	}
	char pidfile[300];
	mkpath(pidfile, sizeof pidfile, "run.pid");
	for (int i = 0; i < 500 && access(pidfile, F_OK) != 0; i++)
		usleep(10000);
	ck_assert_int_eq(access(pidfile, F_OK), 0);
	kill(pid, SIGTERM);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	char *kill_log = recorded("kill");
	ck_assert_msg(kill_log && !strncmp(kill_log, "kill moat-", 10), "no docker kill on SIGTERM");
	free(kill_log);
}
END_TEST

START_TEST(docker_unavailable)
{
	/* no docker on PATH */
	char p[300];
	mkpath(p, sizeof p, "empty");
	mkdir(p, 0755);
	char pe[400];
	snprintf(pe, sizeof pe, "PATH=%s", p);
	const char *env[] = { pe, NULL };
	const char *args[] = { "exec", "--provider", "docker", NULL };
	struct run_out out;
	run_moat(args, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_int_eq(out.status, 3);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "docker CLI not found"));
	harness_free(&out);
	/* daemon down: docker run exits 125 */
	docker_setup("daemon");
	const char *env2[] = { path_env, cfg_env, NULL };
	run_moat(args, env2, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_int_eq(out.status, 3);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "Cannot connect"));
	harness_free(&out);
}
END_TEST

START_TEST(docker_refuses_env_names)
{
	docker_setup("ok");
	const char *env[] = { path_env, cfg_env, NULL };
	const char *args[] = { "exec", "--provider", "docker", NULL };
	const char *reqs[] = { "{\"code\":\"1\",\"env\":{\"BAD;NAME\":\"x\"}}",
			       "{\"code\":\"1\",\"env\":{\"$(rm -rf /)\":\"x\"}}",
			       "{\"code\":\"1\",\"env\":{\"DOCKER_HOST\":\"tcp://evil:2375\"}}",
			       "{\"code\":\"1\",\"env\":{\"PATH\":\"/tmp\"}}" };
	for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
		struct run_out out;
		run_moat(args, env, tmpdir, reqs[i], &out);
		ck_assert_int_eq(out.status, 2);
		ck_assert_str_eq(harness_error_type(&out), "SandboxPolicyError");
		harness_free(&out);
		char *argv = recorded("argv");
		ck_assert_msg(!argv, "docker was run for %s", reqs[i]);
	}
}
END_TEST

START_TEST(docker_run_streams)
{
	docker_setup("ok");
	const char *env[] = { path_env, cfg_env, NULL };
	const char *args[] = { "run", "--provider", "docker", "--memory", "300M", "-c", "print(1)",
			       NULL };
	struct run_out out;
	run_moat(args, env, tmpdir, NULL, &out);
	ck_assert_int_eq(out.status, 3);
	ck_assert_str_eq(out.out, "out:\n");
	ck_assert_ptr_nonnull(strstr(out.err, "err-line"));
	char *argv = recorded("argv");
	ck_assert_ptr_nonnull(strstr(argv, "--memory=300m\n--memory-swap=300m\n"));
	free(argv);
	harness_free(&out);
}
END_TEST

/* ---------------------------------------------------------------- config */

START_TEST(config_selects_provider)
{
	docker_setup("ok");
	const char *env[] = { path_env, cfg_env, "HOME=/nonexistent", NULL };
	const char *args[] = { "exec", NULL };
	char p[300];
	struct run_out out;
	/* ./moat.json picks docker and fills defaults; unknown keys warned */
	mkpath(p, sizeof p, "moat.json");
	write_file(p, "{\"provider\":\"docker\",\"memoryMb\":96,\"pidsLimit\":12,\"shiny\":1}", 0644);
	run_moat(args, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_msg(out.json, "%s %s", out.out, out.err);
	ck_assert_str_eq(harness_str(&out, "provider"), "docker");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(out.json, "warnings");
	ck_assert_int_eq(cJSON_GetArraySize(w), 1);
	ck_assert_ptr_nonnull(strstr(cJSON_GetArrayItem(w, 0)->valuestring, "\"shiny\""));
	char *argv = recorded("argv");
	ck_assert_ptr_nonnull(strstr(argv, "--memory=96m\n"));
	ck_assert_ptr_nonnull(strstr(argv, "--pids-limit=12\n"));
	free(argv);
	harness_free(&out);
	/* the request's own value wins over the config */
	run_moat(args, env, tmpdir, "{\"code\":\"print(1)\",\"memoryMb\":200}", &out);
	argv = recorded("argv");
	ck_assert_ptr_nonnull(strstr(argv, "--memory=200m\n"));
	free(argv);
	harness_free(&out);
	/* an invalid value is refused */
	write_file(p, "{\"provider\":\"docker\",\"memoryMb\":\"lots\"}", 0644);
	run_moat(args, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_int_eq(out.status, 2);
	ck_assert_str_eq(harness_error_type(&out), "SandboxConfigError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "memoryMb"));
	harness_free(&out);
	unlink(p);
	/* an aistack config without a sandbox object: none refuses */
	mkpath(p, sizeof p, "aistack.config.json");
	write_file(p, "{\"agents\":{}}", 0644);
	run_moat(args, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_int_eq(out.status, 2);
	ck_assert_str_eq(harness_error_type(&out), "SandboxPolicyError");
	harness_free(&out);
	/* --provider overrides the config */
	const char *args2[] = { "exec", "--provider", "docker", NULL };
	run_moat(args2, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_str_eq(harness_str(&out, "provider"), "docker");
	harness_free(&out);
	/* --config FILE */
	char cf[300], arg[320];
	mkpath(cf, sizeof cf, "x.json");
	write_file(cf, "{\"provider\":\"none\"}", 0644);
	snprintf(arg, sizeof arg, "%s", cf);
	const char *args3[] = { "exec", "--config", arg, NULL };
	run_moat(args3, env, "/", "{\"code\":\"print(1)\"}", &out);
	ck_assert_str_eq(harness_error_type(&out), "SandboxPolicyError");
	harness_free(&out);
	/* unknown provider name */
	const char *args4[] = { "exec", "--provider", "host", NULL };
	run_moat(args4, env, tmpdir, "{\"code\":\"print(1)\"}", &out);
	ck_assert_int_eq(out.status, 2);
	ck_assert_str_eq(harness_error_type(&out), "SandboxConfigError");
	harness_free(&out);
}
END_TEST

/* ------------------------------------------------------------ e2b/daytona */

/* A local server for the documented endpoints. Every request is logged as a
 * JSON line (method, path, headers, body) to $LOG; $MODE picks failures. */
static const char SERVER[] =
	"import json, os, sys, time, threading\n"
	"from http.server import HTTPServer, BaseHTTPRequestHandler\n"
	"LOG = os.environ['LOG']; MODE = os.environ.get('MODE', 'ok'); KEY = os.environ['KEY']\n"
	"lock = threading.Lock(); polls = [0]\n"
	"class H(BaseHTTPRequestHandler):\n"
	"    protocol_version = 'HTTP/1.1'\n"
	"    def log_message(self, *a): pass\n"
	"    def send(self, code, obj=None, raw=None, ctype='application/json'):\n"
	"        body = raw if raw is not None else (json.dumps(obj).encode() if obj is not None else b'')\n"
	"        self.send_response(code); self.send_header('Content-Type', ctype)\n"
	"        self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)\n"
	"    def handle_any(self, method):\n"
	"        n = int(self.headers.get('Content-Length') or 0)\n"
	"        body = self.rfile.read(n).decode('latin-1') if n else ''\n"
	"        with lock, open(LOG, 'a') as f:\n"
	"            f.write(json.dumps({'method': method, 'path': self.path, 'headers': dict(self.headers), 'body': body}) + '\\n')\n"
	"        p = self.path\n"
	"        if method == 'POST' and p == '/sandboxes':\n"
	"            if MODE == 'deny': return self.send(401, raw=('invalid api key ' + KEY).encode())\n"
	"            return self.send(201, {'sandboxID': 'sbx-123', 'envdAccessToken': 'tok-9', 'clientID': 'c'})\n"
	"        if method == 'POST' and p == '/sbx/sbx-123/execute':\n"
	"            if MODE == 'fail': return self.send(500, raw=b'kernel died')\n"
	"            if MODE == 'slow': time.sleep(5)\n"
	"            lines = [{'type': 'stdout', 'text': 'hello\\n'}, {'type': 'stderr', 'text': 'warn\\n'}]\n"
	"            if MODE == 'error': lines.append({'type': 'error', 'name': 'ZeroDivisionError', 'value': 'division by zero', 'traceback': 'Traceback: ZeroDivisionError'})\n"
	"            lines.append({'type': 'end_of_execution'})\n"
	"            return self.send(200, raw=''.join(json.dumps(l) + '\\n' for l in lines).encode(), ctype='application/x-ndjson')\n"
	"        if method == 'DELETE' and p in ('/sandboxes/sbx-123', '/sandbox/dt-7?force=true'):\n"
	"            return self.send(204)\n"
	"        if method == 'POST' and p == '/sandbox':\n"
	"            if MODE == 'deny': return self.send(403, {'message': 'bad token ' + KEY})\n"
	"            return self.send(200, {'id': 'dt-7', 'state': 'creating'})\n"
	"        if method == 'GET' and p == '/sandbox/dt-7':\n"
	"            polls[0] += 1\n"
	"            return self.send(200, {'id': 'dt-7', 'state': 'started' if polls[0] > 1 else 'starting'})\n"
	"        if method == 'POST' and p.startswith('/toolbox/dt-7/toolbox/files/upload?path='):\n"
	"            if MODE == 'fail': return self.send(500, raw=('upload broke for ' + KEY).encode())\n"
	"            return self.send(200, {})\n"
	"        if method == 'POST' and p == '/toolbox/dt-7/toolbox/process/execute':\n"
	"            if MODE == 'slow': time.sleep(8)\n"
	"            return self.send(200, {'exitCode': 4, 'result': 'daytona out\\n'})\n"
	"        self.send(404, {'message': 'no route ' + p})\n"
	"    def do_GET(self): self.handle_any('GET')\n"
	"    def do_POST(self): self.handle_any('POST')\n"
	"    def do_DELETE(self): self.handle_any('DELETE')\n"
	"class S(HTTPServer):\n"
	"    daemon_threads = True\n"
	"    def process_request(self, req, addr):\n"
	"        threading.Thread(target=self.process_request_thread, args=(req, addr), daemon=True).start()\n"
	"    def process_request_thread(self, req, addr):\n"
	"        try: self.finish_request(req, addr)\n"
	"        except Exception: pass\n"
	"        self.shutdown_request(req)\n"
	"s = S(('127.0.0.1', 0), H)\n"
	"print(s.server_address[1], flush=True)\n"
	"s.serve_forever()\n";

struct server {
	pid_t pid;
	int port;
	int fd; /* kept open: the server must never write into a closed pipe */
	char log[300];
};

static void server_start(struct server *s, const char *mode)
{
	char script[300];
	mkpath(script, sizeof script, "server.py");
	write_file(script, SERVER, 0644);
	mkpath(s->log, sizeof s->log, "requests.log");
	unlink(s->log);
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	s->pid = fork();
	ck_assert_int_ge(s->pid, 0);
	if (s->pid == 0) {
		dup2(p[1], 1);
		setenv("LOG", s->log, 1);
		setenv("MODE", mode, 1);
		setenv("KEY", KEY, 1);
		execlp("python3", "python3", script, (char *)NULL);
		_exit(98);
	}
	close(p[1]);
	char buf[32] = "";
	ssize_t n = 0;
	struct pollfd pf = { p[0], POLLIN, 0 };
	while (n < (ssize_t)sizeof buf - 1 && !memchr(buf, '\n', (size_t)n) && poll(&pf, 1, 10000) > 0) {
		ssize_t r = read(p[0], buf + n, sizeof buf - 1 - (size_t)n);
		if (r <= 0)
			break;
		n += r;
		buf[n] = '\0';
	}
	s->fd = p[0];
	ck_assert_msg(n > 0, "the test server did not start");
	buf[n] = '\0';
	s->port = atoi(buf);
	ck_assert_int_gt(s->port, 0);
}

static void server_stop(struct server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		s->pid = -1;
		close(s->fd);
	}
}

/* The logged requests as a JSON array. */
static cJSON *server_requests(const struct server *s)
{
	char *text = read_text(s->log);
	cJSON *arr = cJSON_CreateArray();
	for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
		cJSON_AddItemToArray(arr, cJSON_Parse(line));
	free(text);
	return arr;
}

static const cJSON *find_req(const cJSON *arr, const char *method, const char *path_prefix)
{
	const cJSON *r;
	cJSON_ArrayForEach(r, arr) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "method");
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "path");
		if (cJSON_IsString(m) && cJSON_IsString(p) && !strcmp(m->valuestring, method) &&
		    !strncmp(p->valuestring, path_prefix, strlen(path_prefix)))
			return r;
	}
	return NULL;
}

static const char *header(const cJSON *req, const char *name)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(req, "headers");
	const cJSON *v;
	cJSON_ArrayForEach(v, h) if (!strcasecmp(v->string, name)) return v->valuestring;
	return NULL;
}

static cJSON *body_json(const cJSON *req)
{
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(req, "body");
	return cJSON_IsString(b) ? cJSON_Parse(b->valuestring) : NULL;
}

static char e2b_cfg_path[300];

static void e2b_config(const struct server *s)
{
	char text[600];
	snprintf(text, sizeof text,
		 "{\"provider\":\"e2b\",\"e2bApiUrl\":\"http://127.0.0.1:%d\","
		 "\"e2bSandboxUrl\":\"http://127.0.0.1:%d/sbx/{sandboxId}\",\"e2bTemplate\":\"tmpl-a\"}",
		 s->port, s->port);
	mkpath(e2b_cfg_path, sizeof e2b_cfg_path, "e2b.json");
	write_file(e2b_cfg_path, text, 0644);
}

static void run_e2b(const char *req, bool test_mode, struct run_out *out)
{
	const char *env[] = { "PATH=/usr/bin:/bin", "E2B_API_KEY=" KEY,
			      test_mode ? "MOAT_TEST_ALLOW_HTTP=1" : "MOAT_X=0", NULL };
	const char *args[] = { "exec", "--config", e2b_cfg_path, NULL };
	run_moat(args, env, tmpdir, req, out);
}

static void assert_no_key(const struct run_out *out)
{
	ck_assert_msg(!strstr(out->out, KEY) && !strstr(out->err, KEY), "key leaked: %s %s",
		      out->out, out->err);
}

START_TEST(e2b_contract)
{
	struct server s;
	server_start(&s, "ok");
	e2b_config(&s);
	struct run_out out;
	run_e2b("{\"language\":\"python\",\"code\":\"print('hello')\",\"env\":{\"A\":\"1\"},"
		"\"timeout\":9000}", true, &out);
	ck_assert_msg(out.json, "%s %s", out.out, out.err);
	ck_assert_msg(!harness_error_type(&out), "%s", out.out);
	ck_assert_str_eq(harness_str(&out, "provider"), "e2b");
	ck_assert_str_eq(harness_str(&out, "stdout"), "hello\n");
	ck_assert_str_eq(harness_str(&out, "stderr"), "warn\n");
	ck_assert(harness_num(&out, "exitCode") == 0);
	assert_no_key(&out);
	harness_free(&out);
	server_stop(&s);
	cJSON *reqs = server_requests(&s);
	const cJSON *create = find_req(reqs, "POST", "/sandboxes");
	ck_assert_ptr_nonnull(create);
	ck_assert_str_eq(header(create, "X-API-Key"), KEY);
	cJSON *cb = body_json(create);
	ck_assert_str_eq(cJSON_GetObjectItem(cb, "templateID")->valuestring, "tmpl-a");
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(cb, "timeout")));
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(cb, "allow_internet_access")));
	cJSON_Delete(cb);
	const cJSON *exec = find_req(reqs, "POST", "/sbx/sbx-123/execute");
	ck_assert_ptr_nonnull(exec);
	ck_assert_str_eq(header(exec, "X-Access-Token"), "tok-9");
	ck_assert_ptr_null(header(exec, "X-API-Key")); /* the key goes to the API only */
	cJSON *eb = body_json(exec);
	ck_assert_str_eq(cJSON_GetObjectItem(eb, "code")->valuestring, "print('hello')");
	ck_assert_str_eq(cJSON_GetObjectItem(eb, "language")->valuestring, "python");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(eb, "env_vars"), "A")->valuestring, "1");
	cJSON_Delete(eb);
	const cJSON *del = find_req(reqs, "DELETE", "/sandboxes/sbx-123");
	ck_assert_ptr_nonnull(del);
	ck_assert_str_eq(header(del, "X-API-Key"), KEY);
	cJSON_Delete(reqs);
}
END_TEST

START_TEST(e2b_error_timeout_and_failures)
{
	struct server s;
	struct run_out out;
	cJSON *reqs;
	/* an exception in the code: exitCode 1, traceback on stderr */
	server_start(&s, "error");
	e2b_config(&s);
	run_e2b("{\"code\":\"1/0\"}", true, &out);
	ck_assert(harness_num(&out, "exitCode") == 1);
	ck_assert_ptr_nonnull(strstr(harness_str(&out, "stderr"), "ZeroDivisionError"));
	harness_free(&out);
	server_stop(&s);
	/* timeout: timedOut, exitCode null, sandbox still deleted */
	server_start(&s, "slow");
	e2b_config(&s);
	run_e2b("{\"code\":\"import time; time.sleep(60)\",\"timeout\":800}", true, &out);
	ck_assert_msg(out.json && !harness_error_type(&out), "%s %s", out.out, out.err);
	ck_assert(harness_bool(&out, "timedOut"));
	ck_assert(harness_is_null(&out, "exitCode"));
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_ptr_nonnull(find_req(reqs, "DELETE", "/sandboxes/sbx-123"));
	cJSON_Delete(reqs);
	/* execute fails: SandboxUnavailableError, sandbox deleted */
	server_start(&s, "fail");
	e2b_config(&s);
	run_e2b("{\"code\":\"1\"}", true, &out);
	ck_assert_int_eq(out.status, 3);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "HTTP 500"));
	assert_no_key(&out);
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_ptr_nonnull(find_req(reqs, "DELETE", "/sandboxes/sbx-123"));
	cJSON_Delete(reqs);
	/* the server echoes the key in its 401: moat never repeats it */
	server_start(&s, "deny");
	e2b_config(&s);
	run_e2b("{\"code\":\"1\"}", true, &out);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "HTTP 401"));
	ck_assert_ptr_nonnull(strstr(error_message(&out), "[redacted]"));
	assert_no_key(&out);
	harness_free(&out);
	/* without the test switch plain http is a mistake in the config */
	run_e2b("{\"code\":\"1\"}", false, &out);
	ck_assert_int_eq(out.status, 2);
	ck_assert_str_eq(harness_error_type(&out), "SandboxConfigError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "https"));
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_int_eq(cJSON_GetArraySize(reqs), 1); /* only the denied create */
	cJSON_Delete(reqs);
}
END_TEST

static char dt_cfg_path[300];

static void run_daytona(const struct server *s, const char *req, struct run_out *out)
{
	char text[400];
	snprintf(text, sizeof text, "{\"provider\":\"daytona\",\"daytonaApiUrl\":\"http://127.0.0.1:%d/\"}",
		 s->port);
	mkpath(dt_cfg_path, sizeof dt_cfg_path, "daytona.json");
	write_file(dt_cfg_path, text, 0644);
	const char *env[] = { "PATH=/usr/bin:/bin", "DAYTONA_API_KEY=" KEY, "MOAT_TEST_ALLOW_HTTP=1",
			      NULL };
	const char *args[] = { "exec", "--config", dt_cfg_path, NULL };
	run_moat(args, env, tmpdir, req, out);
}

START_TEST(daytona_contract)
{
	struct server s;
	server_start(&s, "ok");
	struct run_out out;
	run_daytona(&s, "{\"language\":\"python\",\"code\":\"print('dt-code')\",\"env\":{\"B\":\"2\"},"
		    "\"files\":{\"data/in.txt\":\"file-body\"},\"timeout\":7000}", &out);
	ck_assert_msg(out.json && !harness_error_type(&out), "%s %s", out.out, out.err);
	ck_assert_str_eq(harness_str(&out, "provider"), "daytona");
	ck_assert_str_eq(harness_str(&out, "stdout"), "daytona out\n");
	ck_assert(harness_num(&out, "exitCode") == 4);
	assert_no_key(&out);
	harness_free(&out);
	server_stop(&s);
	cJSON *reqs = server_requests(&s);
	char bearer[100];
	snprintf(bearer, sizeof bearer, "Bearer %s", KEY);
	const cJSON *create = find_req(reqs, "POST", "/sandbox");
	ck_assert_ptr_nonnull(create);
	ck_assert_str_eq(header(create, "Authorization"), bearer);
	cJSON *cb = body_json(create);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cb, "env"), "B")->valuestring, "2");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cb, "networkBlockAll")));
	cJSON_Delete(cb);
	ck_assert_ptr_nonnull(find_req(reqs, "GET", "/sandbox/dt-7"));
	const cJSON *up = find_req(reqs, "POST",
				   "/toolbox/dt-7/toolbox/files/upload?path=%2Fhome%2Fdaytona%2Fmoat%2Fmain.py");
	ck_assert_ptr_nonnull(up);
	ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(up, "body")->valuestring, "print('dt-code')"));
	ck_assert_ptr_nonnull(strstr(header(up, "Content-Type"), "multipart/form-data; boundary="));
	const cJSON *upf = find_req(reqs, "POST",
				    "/toolbox/dt-7/toolbox/files/upload?path=%2Fhome%2Fdaytona%2Fmoat%2Fdata%2Fin.txt");
	ck_assert_ptr_nonnull(upf);
	ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(upf, "body")->valuestring, "file-body"));
	const cJSON *ex = find_req(reqs, "POST", "/toolbox/dt-7/toolbox/process/execute");
	ck_assert_ptr_nonnull(ex);
	cJSON *eb = body_json(ex);
	ck_assert_str_eq(cJSON_GetObjectItem(eb, "command")->valuestring, "python3 main.py");
	ck_assert_str_eq(cJSON_GetObjectItem(eb, "cwd")->valuestring, "/home/daytona/moat");
	ck_assert(cJSON_GetObjectItem(eb, "timeout")->valuedouble == 7);
	cJSON_Delete(eb);
	const cJSON *del = find_req(reqs, "DELETE", "/sandbox/dt-7");
	ck_assert_ptr_nonnull(del);
	ck_assert_str_eq(header(del, "Authorization"), bearer);
	cJSON_Delete(reqs);
}
END_TEST

START_TEST(daytona_timeout_and_failures)
{
	struct server s;
	struct run_out out;
	cJSON *reqs;
	server_start(&s, "slow");
	run_daytona(&s, "{\"code\":\"1\",\"timeout\":1000}", &out);
	ck_assert_msg(out.json && !harness_error_type(&out), "%s %s", out.out, out.err);
	ck_assert(harness_bool(&out, "timedOut"));
	ck_assert(harness_is_null(&out, "exitCode"));
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_ptr_nonnull(find_req(reqs, "DELETE", "/sandbox/dt-7"));
	cJSON_Delete(reqs);

	server_start(&s, "fail");
	run_daytona(&s, "{\"code\":\"1\"}", &out);
	ck_assert_int_eq(out.status, 3);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "HTTP 500"));
	assert_no_key(&out);
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_ptr_nonnull(find_req(reqs, "DELETE", "/sandbox/dt-7"));
	ck_assert_ptr_null(find_req(reqs, "POST", "/toolbox/dt-7/toolbox/process/execute"));
	cJSON_Delete(reqs);

	server_start(&s, "deny");
	run_daytona(&s, "{\"code\":\"1\"}", &out);
	ck_assert_str_eq(harness_error_type(&out), "SandboxUnavailableError");
	ck_assert_ptr_nonnull(strstr(error_message(&out), "HTTP 403"));
	assert_no_key(&out);
	harness_free(&out);
	server_stop(&s);
	reqs = server_requests(&s);
	ck_assert_ptr_null(find_req(reqs, "DELETE", "/sandbox")); /* nothing was created */
	cJSON_Delete(reqs);
}
END_TEST

/* A daytonaApiUrl that is not a plain https URL, or that names a private,
 * loopback or link-local address or localhost, is a mistake in the config
 * (SandboxConfigError, exit 2), found before any request is sent. */
START_TEST(daytona_url_mistakes_are_config_errors)
{
	struct server s;
	server_start(&s, "ok");
	/* on_server: the URL is the test server's, with its port */
	static const struct { const char *url, *type, *msg; int status; bool on_server; } cases[] = {
		{ "http://127.0.0.1", "SandboxConfigError", "must be https", 2, true },
		{ "http://example.com/api", "SandboxConfigError", "must be https", 2, false },
		{ "https://user:pw@example.com/api", "SandboxConfigError", "credentials", 2, false },
		{ "not a url", "SandboxConfigError", "not a valid URL", 2, false },
		/* blackms/aistack tests/unit/sandbox/integration.test.ts, "daytonaApiUrl SSRF
		 * allowlist": private literals and localhost names are config errors */
		{ "https://127.0.0.1", "SandboxConfigError", "private", 2, true },
		{ "https://10.0.0.5/", "SandboxConfigError", "private", 2, false },
		{ "https://[fe80::1]/", "SandboxConfigError", "private", 2, false },
		{ "https://localhost", "SandboxConfigError", "loopback", 2, true },
		{ "https://app.localhost/", "SandboxConfigError", "loopback", 2, false },
		{ "file:///etc/passwd", "SandboxConfigError", "", 2, false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char url[128], text[400];
		if (cases[i].on_server)
			snprintf(url, sizeof url, "%s:%d/", cases[i].url, s.port);
		else
			snprintf(url, sizeof url, "%s", cases[i].url);
		snprintf(text, sizeof text, "{\"provider\":\"daytona\",\"daytonaApiUrl\":\"%s\"}", url);
		mkpath(dt_cfg_path, sizeof dt_cfg_path, "daytona.json");
		write_file(dt_cfg_path, text, 0644);
		/* no MOAT_TEST_ALLOW_HTTP: the policy as shipped */
		const char *env[] = { "PATH=/usr/bin:/bin", "DAYTONA_API_KEY=" KEY, NULL };
		const char *args[] = { "exec", "--config", dt_cfg_path, NULL };
		struct run_out out;
		run_moat(args, env, tmpdir, "{\"code\":\"1\"}", &out);
		ck_assert_msg(out.status == cases[i].status, "%s: status %d %s %s", url, out.status,
			      out.out, out.err);
		ck_assert_msg(harness_error_type(&out) && !strcmp(harness_error_type(&out), cases[i].type),
			      "%s: %s", url, out.out);
		ck_assert_msg(strstr(error_message(&out), cases[i].msg), "%s: %s", url, out.out);
		assert_no_key(&out);
		harness_free(&out);
	}
	server_stop(&s);
	cJSON *reqs = server_requests(&s);
	ck_assert_int_eq(cJSON_GetArraySize(reqs), 0); /* nothing reached the API */
	cJSON_Delete(reqs);
}
END_TEST

/* ------------------------------------------------------ aistack defaults */

/* aistack fills DEFAULT_SANDBOX_CONFIG (memoryMb 512, pidsLimit 100, cpus 1,
 * timeout 30000: blackms/aistack src/sandbox/index.ts) into a "sandbox"
 * object that leaves them out; moat exec reading that object does the same,
 * so {"provider":"native"} alone no longer runs without limits: a 700 MB
 * allocation and 150 processes fail, and the result's limits say how. */
START_TEST(aistack_config_defaults_bind)
{
	HARNESS_MODE_GUARD(_i);
	char cf[300];
	ck_assert_int_eq(chmod(tmpdir, 0755), 0); /* uid 65534 reads the config */
	mkpath(cf, sizeof cf, "aistack.config.json");
	write_file(cf, "{\"llm\":{},\"sandbox\":{\"provider\":\"native\"}}", 0644);
	const char *args[] = { "exec", "--config", cf, NULL };
	static const char mem[] = "{\"language\":\"python\",\"code\":"
		"\"try:\\n    x = bytearray(700 * 1024 * 1024)\\n    print('allocated')\\n"
		"except MemoryError:\\n    print('MemoryError')\\n\"}";
	struct run_out o;
	harness_run(_i, args, mem, strlen(mem), &o);
	ck_assert_msg(o.status == 0 && o.json && !harness_error_type(&o), "status %d %s %s",
		      o.status, o.out, o.err);
	const char *out = harness_str(&o, "stdout");
	ck_assert_msg(!out || !strstr(out, "allocated"), "700 MB were allocated: %s", o.out);
	ck_assert_msg(strcmp(harness_limit_of(&o, "memory"), "none"), "%s", o.out);
	ck_assert_msg(strcmp(harness_limit_of(&o, "pids"), "none"), "%s", o.out);
	harness_free(&o);
	static const char procs[] = "{\"language\":\"python\",\"code\":"
		"\"import os, time\\nkids = errs = 0\\nfor i in range(150):\\n"
		"    try:\\n        pid = os.fork()\\n    except OSError:\\n"
		"        errs += 1\\n        continue\\n    if pid == 0:\\n"
		"        time.sleep(30)\\n        os._exit(0)\\n    kids += 1\\n"
		"print(kids, errs)\\n\"}";
	harness_run(_i, args, procs, strlen(procs), &o);
	ck_assert_msg(o.status == 0 && o.json && !harness_error_type(&o), "status %d %s %s",
		      o.status, o.out, o.err);
	int kids = -1, errs = -1;
	out = harness_str(&o, "stdout");
	ck_assert_msg(out && sscanf(out, "%d %d", &kids, &errs) == 2, "%s", o.out);
	ck_assert_msg(kids < 100 && errs > 0, "kids %d errs %d: %s", kids, errs, o.out);
	harness_free(&o);
}
END_TEST

/* ---------------------------------------------------------------- live */

static void live(const char *provider, const char *key_var)
{
	const char *key = getenv(key_var);
	if (!key || !*key) {
		harness_skip("live %s test: %s is not set", provider, key_var);
		return;
	}
	char kv[512], pv[64];
	snprintf(kv, sizeof kv, "%s=%s", key_var, key);
	snprintf(pv, sizeof pv, "%s", provider);
	const char *dt_url = getenv("DAYTONA_API_URL");
	char cfg_text[600], cfg[300];
	snprintf(cfg_text, sizeof cfg_text, "{\"provider\":\"%s\"%s%s%s}", provider,
		 dt_url ? ",\"daytonaApiUrl\":\"" : "", dt_url ? dt_url : "", dt_url ? "\"" : "");
	mkpath(cfg, sizeof cfg, "live.json");
	write_file(cfg, cfg_text, 0600);
	const char *env[] = { "PATH=/usr/bin:/bin", kv, NULL };
	const char *args[] = { "exec", "--config", cfg, NULL };
	struct run_out out;
	run_moat(args, env, tmpdir, "{\"code\":\"print(6*7)\",\"timeout\":60000}", &out);
	ck_assert_msg(out.json && !harness_error_type(&out), "%s %s", out.out, out.err);
	ck_assert_str_eq(harness_str(&out, "stdout"), "42\n");
	ck_assert_ptr_null(strstr(out.out, key));
	harness_free(&out);
}

START_TEST(live_e2b)
{
	live("e2b", "E2B_API_KEY");
}
END_TEST

START_TEST(live_daytona)
{
	live("daytona", "DAYTONA_API_KEY");
}
END_TEST

Suite *providers_cli_suite(void)
{
	Suite *s = suite_create("providers_cli");
	TCase *tc = tcase_create("docker");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, docker_sends_flags_env_and_stdin);
	tcase_add_test(tc, docker_timeout_issues_kill);
	tcase_add_test(tc, docker_sigterm_issues_kill);
	tcase_add_test(tc, docker_unavailable);
	tcase_add_test(tc, docker_refuses_env_names);
	tcase_add_test(tc, docker_run_streams);
	tcase_add_test(tc, config_selects_provider);
	tcase_add_loop_test(tc, aistack_config_defaults_bind, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	tc = tcase_create("remote");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, e2b_contract);
	tcase_add_test(tc, e2b_error_timeout_and_failures);
	tcase_add_test(tc, daytona_contract);
	tcase_add_test(tc, daytona_timeout_and_failures);
	tcase_add_test(tc, daytona_url_mistakes_are_config_errors);
	tcase_add_test(tc, live_e2b);
	tcase_add_test(tc, live_daytona);
	suite_add_tcase(s, tc);
	return s;
}
