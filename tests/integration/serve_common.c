/* The serve suite's server, curl, raw-socket, metrics, access-log and pool helpers
 * (serve_common.h), and the suite: one tcase per feature file. */
#include "serve_common.h"

/* ---- small helpers ----------------------------------------------------------- */

/* The whole file, NUL-terminated (*len without it), or NULL. */
char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	for (;;) {
		if (n + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

void write_file(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		ck_assert_msg(w > 0, "write %s: %s", path, strerror(errno));
		off += (size_t)w;
	}
	ck_assert_int_eq(fchmod(fd, mode), 0);
	ck_assert_int_eq(close(fd), 0);
}

/* Removes a directory of plain files (the server's temp dir). */
void rm_flat_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[PATH_MAX];
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* The handler shims: runtime/ of the checkout that built $MOAT_BIN
 * (<dir of moat>/../runtime). */
int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	socklen_t l = sizeof a;
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Children of pid (every thread's), into out[]; returns how many. */
int proc_children(pid_t pid, pid_t *out, int max)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char f[384];
		snprintf(f, sizeof f, "%s/%s/children", path, e->d_name);
		char *txt = slurp(f, NULL);
		if (!txt)
			continue;
		char *save = NULL;
		for (char *tok = strtok_r(txt, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
			if (n < max)
				out[n++] = (pid_t)atol(tok);
		free(txt);
	}
	closedir(d);
	return n;
}

/* pid's argv, space-separated (NULL: gone). */
char *proc_cmdline(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	size_t cl = 0;
	char *cmd = slurp(path, &cl);
	for (size_t i = 0; cmd && i + 1 < cl; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	return cmd;
}

/* "pid (comm) state cmdline" for messages. */
void proc_desc(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	char *stat = slurp(path, NULL);
	char *cmd = proc_cmdline(pid);
	char *nl = stat ? strchr(stat, '\n') : NULL;
	if (nl)
		*nl = '\0';
	snprintf(buf, size, "[%.120s] %.200s", stat ? stat : "gone", cmd ? cmd : "");
	free(stat);
	free(cmd);
}

const cJSON *jget(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double jnum(const cJSON *o, const char *key)
{
	const cJSON *v = jget(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* ---- the server ---------------------------------------------------------------- */

/* pids the leftover check must not count: live servers and guards */
static pid_t known[32];
static int nknown;

void known_add(pid_t p)
{
	if (nknown < (int)(sizeof known / sizeof known[0]))
		known[nknown++] = p;
}

void known_del(pid_t p)
{
	for (int i = 0; i < nknown; i++)
		if (known[i] == p)
			known[i] = known[--nknown];
}

bool is_known(pid_t p)
{
	for (int i = 0; i < nknown; i++)
		if (known[i] == p)
			return true;
	return false;
}

/* In the forked child before moat: stderr to the log file, stdout to its
 * own, as the harness's user (root when the harness is): they stay writable
 * after the drop to 65534. */
int prep_redirect(int mode, void *arg)
{
	(void)mode;
	const struct server *s = arg;
	int e = open(s->log, O_WRONLY | O_APPEND | O_CLOEXEC);
	int o = open(s->outf, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (e < 0 || o < 0 || dup2(e, 2) < 0 || dup2(o, 1) < 0) {
		perror("serve test: redirect the server's output");
		return -1;
	}
	close(e);
	close(o);
	if (s->log_pipe >= 0 && (dup2(s->log_pipe, 1) < 0 || dup2(s->log_pipe, 2) < 0)) {
		perror("serve test: the server's output to the log pipe");
		return -1;
	}
	if (s->pass_fd > 0) {
		/* socket activation: fd 3 without close-on-exec, LISTEN_PID this
		 * process (the one that execs moat) */
		if ((s->pass_fd == 3 ? fcntl(3, F_SETFD, 0) : dup2(s->pass_fd, 3)) < 0) {
			perror("serve test: the passed socket as fd 3");
			return -1;
		}
		snprintf(s->listen_pid + strlen("LISTEN_PID="), 16, "%d", (int)getpid());
	}
	return 0;
}

/* prep_redirect, then a mount namespace of the server's own where every
 * mount is read-only but /proc, /sys (cgroups) and /dev: what a pod with
 * readOnlyRootFilesystem and no emptyDir gives moat serve. */
int prep_readonly(int mode, void *arg)
{
	if (prep_redirect(mode, arg) < 0)
		return -1;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		perror("serve test: a mount namespace for the server");
		return -1;
	}
	FILE *mi = fopen("/proc/self/mountinfo", "re");
	if (!mi) {
		perror("serve test: /proc/self/mountinfo");
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;
	while (rc == 0 && getline(&line, &cap, mi) > 0) {
		char mp[4096];
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		if (!strncmp(mp, "/proc", 5) || !strncmp(mp, "/sys", 4) || !strncmp(mp, "/dev", 4))
			continue;
		struct statvfs sv;
		if (statvfs(mp, &sv) < 0)
			continue; /* hidden under another mount */
		unsigned long keep = sv.f_flag & (ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME |
						  ST_NODIRATIME | ST_RELATIME);
		if (mount(NULL, mp, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, NULL) < 0) {
			fprintf(stderr, "serve test: remount %s read-only: %s\n", mp, strerror(errno));
			rc = -1;
		}
	}
	free(line);
	fclose(mi);
	return rc;
}

/* Is pid still a `moat serve` (argv "moat" "serve" ..., as harness_start
 * runs it), not a pid reused since? */
bool is_moat_serve(pid_t pid)
{
	char path[64], buf[64];
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	static const char want[] = "moat\0serve";
	return n >= (ssize_t)sizeof want && !memcmp(buf, want, sizeof want);
}

/* A process that kills the server (and removes its dir) if the test
 * process dies first: it reads the pipe whose write end only the test
 * holds. 'r': the server was reaped, do not kill a pid that may be reused;
 * 'x': all done. EOF: the test died. */
void guard_start(struct server *s)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t g = fork();
	ck_assert_int_ge(g, 0);
	if (g == 0) {
		/* Check kills the test's process group when the test ends: not us */
		setpgid(0, 0);
		for (int fd = 3; fd < 1024; fd++)
			if (fd != p[0])
				close(fd);
		bool reaped = false;
		for (;;) {
			char c;
			ssize_t n = read(p[0], &c, 1);
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 1 && c == 'r') {
				reaped = true;
				continue;
			}
			if (n == 1 && c == 'x')
				_exit(0);
			break;
		}
		if (!reaped && is_moat_serve(s->p.pid))
			kill(s->p.pid, SIGKILL);
		rm_flat_dir(s->dir);
		_exit(0);
	}
	close(p[0]);
	s->guard = g;
	s->guard_fd = p[1];
	known_add(g);
}

void guard_say(struct server *s, char c)
{
	if (s->guard_fd >= 0)
		ck_assert_int_eq(write(s->guard_fd, &c, 1), 1);
}

void guard_end(struct server *s)
{
	if (s->guard <= 0)
		return;
	guard_say(s, 'x');
	close(s->guard_fd);
	s->guard_fd = -1;
	waitpid(s->guard, NULL, 0);
	known_del(s->guard);
	s->guard = 0;
}

/* A file in the server's dir that uid 65534 can read (and, with owner_only,
 * only its owner: the server's user). */
void server_file(struct server *s, char *path, size_t size, const char *name,
			const char *content, mode_t mode)
{
	snprintf(path, size, "%s/%s", s->dir, name);
	write_file(path, content, strlen(content), mode);
	if (s->mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(path, ROOTLESS_ID, ROOTLESS_ID), 0);
}

bool has_arg(const char *const *args, const char *arg)
{
	for (int i = 0; args && args[i]; i++)
		if (!strcmp(args[i], arg))
			return true;
	return false;
}

/* Makes the server's dir and files and starts `moat serve` in the
 * background; does not wait for it to listen. */
void server_spawn(struct server *s, int mode, const struct server_opts *o)
{
	memset(s, 0, sizeof *s);
	s->mode = mode;
	s->guard_fd = -1;
	/* orphans of the server come to this (per-test) process */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	snprintf(s->dir, sizeof s->dir, "/tmp/moat-serve-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	ck_assert_int_eq(chmod(s->dir, 0700), 0);
	if (mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(s->dir, ROOTLESS_ID, ROOTLESS_ID), 0);
	snprintf(s->log, sizeof s->log, "%s/stderr.log", s->dir);
	snprintf(s->outf, sizeof s->outf, "%s/stdout.log", s->dir);
	write_file(s->log, "", 0, 0600);
	write_file(s->outf, "", 0, 0600);

	const char *argv[52];
	int n = 0;
	char listen[64];
	argv[n++] = "serve";
	if (!o->no_listener) {
		if (o->socket) {
			snprintf(s->sock, sizeof s->sock, "%s/moat.sock", s->dir);
			argv[n++] = "--socket";
			argv[n++] = s->sock;
			snprintf(s->url, sizeof s->url, "http://localhost");
		} else {
			s->port = free_port();
			snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
			argv[n++] = "--listen";
			argv[n++] = listen;
			snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
		}
	}
	argv[n++] = "--runtime";
	argv[n++] = harness_runtime_dir();
	char pool[16];
	if (o->pool >= 0) {
		snprintf(pool, sizeof pool, "%d", o->pool);
		argv[n++] = "--pool";
		argv[n++] = pool;
	}
	char sbx_pool[16];
	if (o->sbx_pool >= 0 && !has_arg(o->args, "--sandbox-pool")) {
		snprintf(sbx_pool, sizeof sbx_pool, "%d", o->sbx_pool);
		argv[n++] = "--sandbox-pool";
		argv[n++] = sbx_pool;
	}
	if (o->zygote > 0)
		argv[n++] = "--pool-zygote";
	else if (o->zygote < 0)
		argv[n++] = "--no-pool-zygote";
	if (o->zygote > 0 || (o->zygote == 0 && o->pool != 0))
		harness_beside_moat("moat-zygote.so"); /* where the server looks for it */
	if (!o->kv) {
		snprintf(s->kvf, sizeof s->kvf, "%s/kv.sqlite3", s->dir);
		argv[n++] = "--kv";
		argv[n++] = s->kvf;
	} else if (*o->kv) {
		argv[n++] = "--kv";
		argv[n++] = o->kv;
	}
	if (o->config) {
		server_file(s, s->cfg, sizeof s->cfg, "moat.json", o->config, 0644);
		argv[n++] = "--config";
		argv[n++] = s->cfg;
	}
	if (o->token) {
		server_file(s, s->tokf, sizeof s->tokf, "token", TOKEN "\n", 0600);
		argv[n++] = "--token-file";
		argv[n++] = s->tokf;
	} else if (!o->no_listener && !o->socket && !has_arg(o->args, "--token-file") &&
		   !has_arg(o->args, "--no-auth")) {
		/* a TCP listener needs one or the other; the tests of other
		 * things run without the token */
		argv[n++] = "--no-auth";
	}
	for (int i = 0; o->args && o->args[i]; i++) {
		ck_assert_int_lt(n, 46);
		argv[n++] = o->args[i];
	}
	argv[n] = NULL;
	s->log_pipe = o->log_pipe ? *o->log_pipe : -1;
	s->pass_fd = o->pass_fd;
	s->listen_pid = o->listen_pid;
	harness_start(mode, argv, NULL, 0, o->env, o->readonly_root ? prep_readonly : prep_redirect,
		      s, &s->p);
	s->running = true;
	known_add(s->p.pid);
	guard_start(s);
}

/* Has the server exited? (not reaped: harness_finish does that) */
bool server_exited(const struct server *s)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)s->p.pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return true;
	return si.si_pid == s->p.pid;
}

/* Reaps the exited server: its status. */
int server_reap(struct server *s)
{
	if (!s->running)
		return s->status;
	struct run_out out;
	memset(&out, 0, sizeof out);
	harness_finish(&s->p, &out);
	s->status = out.status;
	harness_free(&out);
	s->running = false;
	known_del(s->p.pid);
	guard_say(s, 'r');
	return s->status;
}

/* Waits up to ms for the server to exit by itself: its status, or -1 when
 * it still runs. */
int server_wait_exit(struct server *s, long ms)
{
	long t0 = harness_now_ms();
	while (!server_exited(s)) {
		if (harness_now_ms() - t0 > ms)
			return -1;
		harness_sleep_ms(10);
	}
	return server_reap(s);
}

char *server_log(const struct server *s)
{
	char *l = slurp(s->log, NULL);
	ck_assert_ptr_nonnull(l);
	return l;
}

/* ---- curl ------------------------------------------------------------------------ */

void call_start(struct server *s, const struct req *q, struct call *c)
{
	memset(c, 0, sizeof *c);
	c->s = s;
	snprintf(c->pre, sizeof c->pre, "%s/c%d", s->dir, s->calls++);
	char bodyf[200], headf[200], outf[200], errf[200], dataf[200], url[1200], maxt[32],
		data_arg[220], auth[400];
	snprintf(bodyf, sizeof bodyf, "%s.body", c->pre);
	snprintf(headf, sizeof headf, "%s.head", c->pre);
	snprintf(outf, sizeof outf, "%s.code", c->pre);
	snprintf(errf, sizeof errf, "%s.err", c->pre);
	c->max_ms = q->max_ms ? q->max_ms : harness_scale_ms(60000);
	snprintf(maxt, sizeof maxt, "%.3f", (double)c->max_ms / 1000.0);
	snprintf(url, sizeof url, "%s%s", s->url, q->path);
	const char *argv[64];
	int n = 0;
	argv[n++] = "curl";
	argv[n++] = "-sS";
	argv[n++] = "--http1.1";
	argv[n++] = "--noproxy";
	argv[n++] = "*";
	argv[n++] = "-o";
	argv[n++] = bodyf;
	argv[n++] = "-D";
	argv[n++] = headf;
	argv[n++] = "-w";
	argv[n++] = "%{http_code}";
	argv[n++] = "--max-time";
	argv[n++] = maxt;
	if (s->sock[0]) {
		argv[n++] = "--unix-socket";
		argv[n++] = s->sock;
	}
	if (q->method) {
		argv[n++] = "-X";
		argv[n++] = q->method;
	}
	if (q->auth) {
		snprintf(auth, sizeof auth, "Authorization: %s", q->auth);
		argv[n++] = "-H";
		argv[n++] = auth;
	}
	if (q->body) {
		snprintf(dataf, sizeof dataf, "%s.data", c->pre);
		write_file(dataf, q->body, strlen(q->body), 0600);
	}
	if (q->body || q->body_file) {
		snprintf(data_arg, sizeof data_arg, "@%s", q->body ? dataf : q->body_file);
		argv[n++] = "-H";
		argv[n++] = "Content-Type: application/json";
		argv[n++] = "--data-binary";
		argv[n++] = data_arg;
	}
	if (q->chunked) {
		argv[n++] = "-H";
		argv[n++] = "Transfer-Encoding: chunked";
	}
	for (int i = 0; q->extra && q->extra[i]; i++) {
		ck_assert_int_lt(n, 60);
		argv[n++] = q->extra[i];
	}
	argv[n++] = url;
	argv[n] = NULL;
	c->t0 = harness_now_ms();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(outf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (o < 0 || e < 0 || in < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(in, 0) < 0)
			_exit(126);
		execvp("curl", (char *const *)argv);
		_exit(127);
	}
	c->pid = pid;
	s->open_calls++;
}

/* The last header block of a -D file (after any 100 Continue). */
char *last_head(char *all)
{
	if (!all)
		return NULL;
	char *last = all, *p = all;
	while ((p = strstr(p, "\r\n\r\nHTTP/"))) {
		last = p + 4;
		p += 4;
	}
	return strdup(last);
}

void call_finish(struct call *c, struct resp *r)
{
	memset(r, 0, sizeof *r);
	int st = 0;
	long deadline = c->max_ms + harness_scale_ms(15000);
	for (;;) {
		pid_t w = waitpid(c->pid, &st, WNOHANG);
		if (w == c->pid)
			break;
		ck_assert_int_eq(w, 0);
		if (harness_now_ms() - c->t0 > deadline) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &st, 0);
			c->s->open_calls--;
			ck_abort_msg("curl %s did not end within %ld ms", c->pre, deadline);
		}
		harness_sleep_ms(5);
	}
	c->s->open_calls--;
	r->ms = harness_now_ms() - c->t0;
	r->curl_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	ck_assert_msg(r->curl_rc != 127 && r->curl_rc != 126, "cannot run curl");
	char f[200];
	snprintf(f, sizeof f, "%s.code", c->pre);
	char *code = slurp(f, NULL);
	r->code = code ? atoi(code) : 0;
	free(code);
	snprintf(f, sizeof f, "%s.head", c->pre);
	char *all = slurp(f, NULL);
	r->head = last_head(all);
	free(all);
	if (!r->head)
		r->head = strdup("");
	snprintf(f, sizeof f, "%s.body", c->pre);
	r->body = slurp(f, &r->body_len);
	if (!r->body) {
		r->body = strdup("");
		r->body_len = 0;
	}
	snprintf(f, sizeof f, "%s.err", c->pre);
	r->err = slurp(f, NULL);
	if (!r->err)
		r->err = strdup("");
	r->json = cJSON_ParseWithLength(r->body, r->body_len);
	/* the files are not needed any more (big bodies fill /tmp) */
	static const char *const ext[] = { "code", "head", "body", "err", "data" };
	for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		snprintf(f, sizeof f, "%s.%s", c->pre, ext[i]);
		unlink(f);
	}
}

void call(struct server *s, const struct req *q, struct resp *r)
{
	struct call c;
	call_start(s, q, &c);
	call_finish(&c, r);
}

void resp_free(struct resp *r)
{
	free(r->head);
	free(r->body);
	free(r->err);
	cJSON_Delete(r->json);
	memset(r, 0, sizeof *r);
}

/* A header's value from the response (first of that name), or NULL; into buf. */
const char *resp_header(const struct resp *r, const char *name, char *buf, size_t size)
{
	size_t nl = strlen(name);
	for (const char *line = r->head; line && *line;) {
		const char *end = strstr(line, "\r\n");
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len > nl && line[nl] == ':' && !strncasecmp(line, name, nl)) {
			const char *v = line + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t vl = len - (size_t)(v - line);
			while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
				vl--;
			snprintf(buf, size, "%.*s", (int)vl, v);
			return buf;
		}
		if (!end)
			break;
		line = end + 2;
	}
	return NULL;
}

/* Request helpers */
void post(struct server *s, const char *path, const char *body, struct resp *r)
{
	struct req q = { .path = path, .body = body };
	call(s, &q, r);
}

void get(struct server *s, const char *path, struct resp *r)
{
	struct req q = { .path = path };
	call(s, &q, r);
}

/* A Spin envelope: code and sandboxId, then ",..." extra members or "". */
char *envelope(const char *code, const char *extra)
{
	char *q = harness_json_quote(code);
	char *e = NULL;
	ck_assert_int_ge(asprintf(&e, "{\"code\":%s,\"sandboxId\":\"test\"%s}", q, extra ? extra : ""),
			 0);
	free(q);
	return e;
}

void run_py(struct server *s, const char *code, const char *extra, struct resp *r)
{
	char *e = envelope(code, extra);
	post(s, "/py/run", e, r);
	free(e);
}

/* An error response: status, {"error":{"type","message","provider":"native"}}, JSON. */
void expect_error(const char *what, const struct resp *r, int code, const char *type)
{
	ck_assert_msg(r->code == code, "%s: HTTP %d (want %d), curl exit %d: body %.600s %s", what,
		      r->code, code, r->curl_rc, r->body, r->err);
	const cJSON *e = jget(r->json, "error");
	const char *t = jstr(e, "type"), *m = jstr(e, "message"), *p = jstr(e, "provider");
	ck_assert_msg(cJSON_IsObject(e) && t && !strcmp(t, type),
		      "%s: HTTP %d, want error type %s: %.600s", what, r->code, type, r->body);
	ck_assert_msg(m && *m, "%s: the error has no message: %.600s", what, r->body);
	ck_assert_msg(p && !strcmp(p, "native"), "%s: provider is not \"native\": %.600s", what,
		      r->body);
	char ct[128];
	ck_assert_msg(resp_header(r, "Content-Type", ct, sizeof ct) && strstr(ct, "application/json"),
		      "%s: an error is JSON, Content-Type: %s", what, ct[0] ? ct : "(none)");
}

bool id_form_ok(const char *id, const char *prefix, const char *node)
{
	if (!id || strncmp(id, prefix, 4))
		return false;
	const char *u = strchr(id + 4, '_');
	size_t n = u ? (size_t)(u - (id + 4)) : 0;
	if (n < 1 || n > 32 || strlen(u + 1) != 32 ||
	    (node && (strlen(node) != n || strncmp(id + 4, node, n))))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)id[4 + i]) || isdigit((unsigned char)id[4 + i]) ||
		      id[4 + i] == '-'))
			return false;
	for (const char *p = u + 1; *p; p++)
		if (!(isdigit((unsigned char)*p) || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* A refusal of an unknown key names the route's own keys, not /v1/run's. */
void expect_own_keys(struct server *s, const char *path, const char *body,
			    const char *key, const char *has, const char *lacks)
{
	struct resp r;
	post(s, path, body, &r);
	expect_error(path, &r, 400, "SandboxConfigError");
	const char *msg = jstr(jget(r.json, "error"), "message");
	char want[96];
	snprintf(want, sizeof want, "unknown key \"%s\"", key);
	ck_assert_msg(msg && strstr(msg, want) && strstr(msg, has) && !strstr(msg, lacks),
		      "%s: %s %s: the message should name \"%s\" and list %s, not %s: %s",
		      MODE_NAME[s->mode], path, body, key, has, lacks, msg ? msg : r.body);
	resp_free(&r);
}

/* A 200 script result with every documented key. */
void expect_script(const char *what, const struct resp *r)
{
	ck_assert_msg(r->code == 200 && r->json, "%s: HTTP %d (want 200 + JSON), curl %d: %.600s %s",
		      what, r->code, r->curl_rc, r->body, r->err);
	static const char *const keys[] = { "stdout", "stderr", "error", "stdoutTruncated",
					    "stderrTruncated", "exitCode", "timedOut", "killedBy",
					    "durationMs", "limits", "warnings" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		ck_assert_msg(jget(r->json, keys[i]), "%s: the script result has no \"%s\": %.600s",
			      what, keys[i], r->body);
}

/* Is pid the one listening on TCP port (any address, /proc/net/tcp and
 * tcp6, then pid's fds)? What answers on a port free_port() found may be
 * another program that took it before the server listened (issue 49).
 * true as well when nothing is seen listening there (nothing to tell). */
static bool listener_is(pid_t pid, int port)
{
	unsigned long inodes[16];
	int n = 0;
	static const char *const tabs[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	for (int t = 0; t < 2; t++) {
		char *tab = slurp(tabs[t], NULL);
		for (char *l = tab ? strchr(tab, '\n') : NULL; l && n < 16; l = strchr(l + 1, '\n')) {
			char local[64], st[8];
			unsigned long ino;
			if (sscanf(l + 1, "%*d: %63s %*s %7s %*s %*s %*s %*s %*s %lu", local, st, &ino) != 3)
				continue;
			char *colon = strrchr(local, ':');
			if (colon && strtol(colon + 1, NULL, 16) == port && !strcmp(st, "0A"))
				inodes[n++] = ino;
		}
		free(tab);
	}
	if (n == 0)
		return true;
	char dir[64], link[64], path[384];
	snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
	DIR *d = opendir(dir);
	struct dirent *e;
	bool ours = false;
	while (d && !ours && (e = readdir(d))) {
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		ssize_t len = readlink(path, link, sizeof link - 1);
		unsigned long ino;
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino) == 1)
			for (int i = 0; i < n; i++)
				ours |= inodes[i] == ino;
	}
	if (d)
		closedir(d);
	return ours;
}

/* Waits until GET /healthz says {"status":"ok"}; fails with the log when
 * the server exits or the deadline passes. */
/* As server_wait_ready; with port_retry, false (the server exited and
 * reaped) when it could not listen on the port free_port() picked because
 * another process took it in between. */
static bool wait_ready(struct server *s, bool port_retry)
{
	long t0 = harness_now_ms(), limit = harness_scale_ms(20000);
	for (;;) {
		if (server_exited(s)) {
			int st = server_reap(s);
			char *l = server_log(s);
			if (port_retry && st == 3 && l && strstr(l, "cannot listen on") &&
			    strstr(l, strerror(EADDRINUSE))) {
				free(l);
				return false;
			}
			ck_abort_msg("%s: moat serve exited with %d before it listened: %.2000s",
				     MODE_NAME[s->mode], st, l);
		}
		struct req q = { .path = "/healthz", .max_ms = 2000 };
		struct resp r;
		call(s, &q, &r);
		bool ok = r.code == 200;
		/* on a TCP port: from this server, not a program that took the
		 * port first (then this one exits, EADDRINUSE, and is started
		 * again on another) */
		if (ok && s->port && !listener_is(s->p.pid, s->port))
			ok = false;
		if (ok) {
			const char *st = jstr(r.json, "status");
			ck_assert_msg(st && !strcmp(st, "ok"), "/healthz body: %s", r.body);
		}
		resp_free(&r);
		if (ok)
			return true;
		if (harness_now_ms() - t0 > limit) {
			char *l = server_log(s);
			ck_abort_msg("%s: moat serve did not answer /healthz within %ld ms: %.2000s",
				     MODE_NAME[s->mode], limit, l);
		}
		harness_sleep_ms(50);
	}
}

void server_wait_ready(struct server *s)
{
	wait_ready(s, false);
}

/* The port free_port() found is free only when it looked: another process
 * on the host (another suite's client, another test run) may bind or
 * connect from it before the server listens. The server then cannot
 * listen (exit 3, EADDRINUSE): started again on another port, twice at
 * most. */
void server_start(struct server *s, int mode, const struct server_opts *o)
{
	for (int tries = 0;; tries++) {
		server_spawn(s, mode, o);
		bool ours = !o->no_listener && !o->socket;
		if (wait_ready(s, ours && tries < 2))
			return;
		fprintf(stderr, "note: port %d was taken before moat serve listened; another\n",
			s->port);
		server_cleanup(s);
	}
}

/* Children of the running server, waiting up to ms for there to be none. */
int server_children_gone(const struct server *s, long ms, char *desc, size_t size)
{
	long t0 = harness_now_ms();
	pid_t kids[64];
	int n;
	while ((n = proc_children(s->p.pid, kids, 64)) > 0 && harness_now_ms() - t0 < ms)
		harness_sleep_ms(20);
	desc[0] = '\0';
	for (int i = 0; i < n && strlen(desc) + 300 < size; i++) {
		char d[400];
		proc_desc(kids[i], d, sizeof d);
		strncat(desc, d, size - strlen(desc) - 2);
		strcat(desc, "\n");
	}
	return n;
}

/* Waits up to ms until the running server has at least n children. */
bool server_wait_children(const struct server *s, int n, long ms)
{
	long t0 = harness_now_ms();
	pid_t kids[64];
	while (harness_now_ms() - t0 < ms) {
		if (proc_children(s->p.pid, kids, 64) >= n)
			return true;
		harness_sleep_ms(10);
	}
	return false;
}

/* pid is dead, not reaped yet (a sandbox's pid 1 killed with the server
 * has no exit signal: only __WALL reaps it). d: its proc_desc. */
static bool desc_is_zombie(const char *d)
{
	const char *rp = strrchr(d, ')');
	return rp && rp[1] == ' ' && rp[2] == 'Z';
}

/* Whether a child of ours that is neither a live server nor a guard is
 * still alive (not a zombie). */
static bool server_orphans_alive(void)
{
	pid_t kids[64];
	int n = proc_children(getpid(), kids, 64);
	for (int i = 0; i < n; i++) {
		char d[400];
		if (is_known(kids[i]))
			continue;
		proc_desc(kids[i], d, sizeof d);
		if (!desc_is_zombie(d))
			return true;
	}
	return false;
}

/* After the server exited and the test's calls ended: nothing of it is
 * left (no process reparented to the test, the socket file removed); then
 * the guard ends and the dir goes. */
void server_cleanup(struct server *s)
{
	ck_assert_msg(!s->running, "server_cleanup on a running server");
	ck_assert_msg(s->open_calls == 0, "%d curl call(s) not finished", s->open_calls);
	pid_t kids[64];
	char left[4096] = "";
	/* a process of the server that outlived it is now a child of ours; a
	 * sandbox's pid 1 killed with the server (its parent-death signal) may
	 * take a moment on a loaded machine: up to 3 s (scaled) for every such
	 * child to be a zombie or gone, so only one that stays alive counts */
	harness_sleep_ms(harness_scale_ms(100));
	for (long t0 = harness_now_ms(); harness_now_ms() - t0 < harness_scale_ms(3000); harness_sleep_ms(50))
		if (!server_orphans_alive())
			break;
	int n = proc_children(getpid(), kids, 64), bad = 0;
	for (int i = 0; i < n; i++) {
		if (is_known(kids[i]))
			continue;
		char d[400];
		proc_desc(kids[i], d, sizeof d);
		if (desc_is_zombie(d)) {
			waitpid(kids[i], NULL, __WALL);
			continue;
		}
		if (strlen(left) + strlen(d) + 2 < sizeof left) {
			strcat(left, d);
			strcat(left, "\n");
		}
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
		bad++;
	}
	/* a passed socket (socket activation) is its manager's: it stays */
	bool sock_left = s->sock[0] && s->pass_fd <= 0 && access(s->sock, F_OK) == 0;
	guard_end(s);
	char *log = server_log(s);
	rm_flat_dir(s->dir);
	ck_assert_msg(bad == 0, "%s: %d process(es) of moat serve outlived it:\n%s\nlog: %.1500s",
		      MODE_NAME[s->mode], bad, left, log);
	ck_assert_msg(!sock_left, "%s: the socket %s is still there after moat serve exited",
		      MODE_NAME[s->mode], s->sock);
	free(log);
}

/* SIGTERM; waits up to ms for the exit. Status, or -1 (then killed). */
int server_term(struct server *s, long ms, long *took)
{
	long t0 = harness_now_ms();
	ck_assert_int_eq(kill(s->p.pid, SIGTERM), 0);
	int st = server_wait_exit(s, ms);
	if (took)
		*took = harness_now_ms() - t0;
	if (st < 0) {
		kill(s->p.pid, SIGKILL);
		server_reap(s);
	}
	return st;
}

/* An idle server: its sandboxes are gone, SIGTERM, exit 0, nothing left. */
void server_stop(struct server *s)
{
	char kids[4096];
	int n = server_children_gone(s, harness_scale_ms(10000), kids, sizeof kids);
	ck_assert_msg(n == 0, "%s: the idle server still has %d child process(es):\n%s",
		      MODE_NAME[s->mode], n, kids);
	int st = server_term(s, harness_scale_ms(15000), NULL);
	char *log = server_log(s);
	ck_assert_msg(st == 0, "%s: moat serve after SIGTERM: status %d (want 0; -1: did not exit "
		      "within 15 s); log: %.2000s", MODE_NAME[s->mode], st, log);
	free(log);
	server_cleanup(s);
}

/* ---- raw sockets ------------------------------------------------------------------- */

int raw_connect(const struct server *s)
{
	int fd;
	if (s->sock[0]) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		ck_assert_uint_lt(strlen(s->sock), sizeof a.sun_path);
		memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
		ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s",
			      s->sock, strerror(errno));
	} else {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect :%d: %s",
			      s->port, strerror(errno));
	}
	return fd;
}

/* Sends what the peer takes; false when it closed on us. */
bool raw_send(int fd, const char *data, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		off += (size_t)w;
	}
	return true;
}

/* Reads until EOF/reset or ms pass. *closed: the peer closed (EOF or reset). */
char *raw_read(int fd, long ms, bool *closed, long *took)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	long t0 = harness_now_ms();
	*closed = false;
	for (;;) {
		long left = ms - (harness_now_ms() - t0);
		if (left <= 0)
			break;
		struct pollfd pf = { fd, POLLIN, 0 };
		int r = poll(&pf, 1, (int)(left > 100 ? 100 : left));
		if (r <= 0)
			continue;
		if (n + 4097 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t got = recv(fd, buf + n, 4096, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			*closed = true;
			break;
		}
		n += (size_t)got;
	}
	buf[n] = '\0';
	if (took)
		*took = harness_now_ms() - t0;
	return buf;
}

/* "HTTP/1.1 431 ..." → 431; 0 when there is no status line. */
int raw_status(const char *resp)
{
	if (strncmp(resp, "HTTP/1.", 7) != 0 || strlen(resp) < 12)
		return 0;
	return atoi(resp + 9);
}

/* ---- metrics --------------------------------------------------------------------- */

/* Sum of the samples of metric name (exact name, any labels) whose label
 * set contains each ';'-separated part of label (e.g. "route=\"py\";
 * outcome=\"ok\"") when label is not NULL; *found: how many samples
 * matched. */
double metric_sum(const char *text, const char *name, const char *label, int *found)
{
	double sum = 0;
	int n = 0;
	size_t nl = strlen(name);
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len > nl && !strncmp(line, name, nl) && (line[nl] == '{' || line[nl] == ' ')) {
			char l[1024];
			snprintf(l, sizeof l, "%.*s", (int)len, line);
			const char *rb = line[nl] == '{' ? strchr(l, '}') : l + nl;
			bool match = !label || (line[nl] == '{' && rb);
			for (const char *lp = label; match && lp && *lp;) {
				size_t ll = strcspn(lp, ";");
				char one[256];
				snprintf(one, sizeof one, "%.*s", (int)ll, lp);
				const char *hit = strstr(l, one);
				match = hit && hit < rb;
				lp += ll;
				if (*lp == ';')
					lp++;
			}
			if (match && rb) {
				const char *v = rb + (line[nl] == '{' ? 1 : 0);
				sum += strtod(v, NULL);
				n++;
			}
		}
		if (!end)
			break;
		line = end + 1;
	}
	if (found)
		*found = n;
	return sum;
}

char *get_metrics(struct server *s, const char *auth)
{
	struct req q = { .path = "/metrics", .auth = auth };
	struct resp r;
	call(s, &q, &r);
	ck_assert_msg(r.code == 200, "GET /metrics: HTTP %d: %s", r.code, r.body);
	char *m = strdup(r.body);
	resp_free(&r);
	return m;
}

/* ---- access log ------------------------------------------------------------------ */

/* The log's JSON lines (those starting with '{'), each checked: valid JSON
 * with every documented key. Returns an array the caller deletes. */
cJSON *access_lines(const struct server *s)
{
	char *log = server_log(s);
	cJSON *arr = cJSON_CreateArray();
	char *save = NULL;
	for (char *line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != '{')
			continue;
		cJSON *j = cJSON_Parse(line);
		ck_assert_msg(j, "an access log line is not JSON: %s", line);
		static const char *const keys[] = { "ts", "remote", "method", "path", "route",
						    "status", "outcome", "durationMs", "bytesIn",
						    "bytesOut" };
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
			ck_assert_msg(jget(j, keys[i]), "access log line without \"%s\": %s", keys[i],
				      line);
		ck_assert_msg(cJSON_IsNumber(jget(j, "status")) && cJSON_IsNumber(jget(j, "durationMs")) &&
			      cJSON_IsNumber(jget(j, "bytesIn")) && cJSON_IsNumber(jget(j, "bytesOut")),
			      "status, durationMs, bytesIn, bytesOut are numbers: %s", line);
		ck_assert_msg(cJSON_IsString(jget(j, "path")) && cJSON_IsString(jget(j, "method")) &&
			      cJSON_IsString(jget(j, "outcome")),
			      "path, method, outcome are strings: %s", line);
		cJSON_AddItemToArray(arr, j);
	}
	free(log);
	return arr;
}

/* The first access line whose key is value (a string), or NULL. */
const cJSON *access_find(const cJSON *lines, const char *key, const char *value)
{
	const cJSON *l;
	cJSON_ArrayForEach(l, lines)
	{
		const char *v = jstr(l, key);
		if (v && !strcmp(v, value))
			return l;
	}
	return NULL;
}

/* ---- tests: HTTP surface ------------------------------------------------------------ */

/* Starts a server expected to refuse: its exit status and log. */
int refused_start(int mode, const struct server_opts *o, struct server *s, char **log)
{
	server_spawn(s, mode, o);
	int st = server_wait_exit(s, harness_scale_ms(10000));
	if (st < 0) {
		kill(s->p.pid, SIGKILL);
		server_reap(s);
	}
	*log = server_log(s);
	return st;
}

/* ---- tests: listeners ----------------------------------------------------------------- */

/* Is name in the comma-separated list? */
bool selected(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		size_t l = strcspn(p, ",");
		if (l == n && !strncmp(p, name, n))
			return true;
		p += l;
		if (*p == ',')
			p++;
	}
	return false;
}

/* ---- tests: the warm pool (docs/SERVE.md, "The pool") --------------------------------- */

double pool_metric(struct server *s, const char *name, const char *label)
{
	char *m = get_metrics(s, NULL);
	int found = 0;
	double v = metric_sum(m, name, label, &found);
	ck_assert_msg(found, "no %s in /metrics: %.1500s", name, m);
	free(m);
	return v;
}

/* Waits until the pool holds n ready sandboxes of lang. */
void pool_wait_ready(struct server *s, const char *lang, int n)
{
	char label[64];
	snprintf(label, sizeof label, "language=\"%s\"", lang);
	long t0 = harness_now_ms();
	while (pool_metric(s, "moat_pool_ready", label) < n) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000),
			      "the pool never held %d %s sandbox(es)", n, lang);
		harness_sleep_ms(20);
	}
}

/* The kinds of warm sandbox a pooled server keeps (SERVE.md, "The pool"):
 * python and javascript, and typescript where the root (the host's, in
 * these tests) has esbuild. */
int pool_kinds(void)
{
	static const char *const at[] = { "/usr/local/bin/esbuild", "/usr/bin/esbuild",
					   "/bin/esbuild" };
	for (size_t i = 0; i < sizeof at / sizeof *at; i++)
		if (access(at[i], X_OK) == 0)
			return 3;
	return 2;
}

/* Waits until every kind holds n ready sandboxes. */
void pool_wait_all(struct server *s, int n)
{
	pool_wait_ready(s, "python", n);
	pool_wait_ready(s, "javascript", n);
	if (pool_kinds() == 3)
		pool_wait_ready(s, "typescript", n);
}

/* POST /v1/run with body; the result JSON in r. */
void v1(struct server *s, const char *body, struct resp *r)
{
	post(s, "/v1/run", body, r);
	ck_assert_msg(r->code == 200 && r->json, "/v1/run: HTTP %d %.500s", r->code, r->body);
}

bool pooled(const struct resp *r)
{
	return cJSON_IsTrue(jget(r->json, "pool"));
}

/* How many children (each a pid 1) an idle server keeps with want per kind:
 * with the zygote, its python ones are the zygote's children, and the
 * zygote's own sandbox is the server's. */
int pool_idle_children(int want, bool zygote)
{
	return zygote ? 1 + want * (pool_kinds() - 1) : want * pool_kinds();
}

/* Waits until the zygote runs (the python sandboxes are its children from
 * then on). */
void pool_wait_zygote(struct server *s)
{
	long t0 = harness_now_ms();
	while (pool_metric(s, "moat_pool_zygote_up", NULL) < 1) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000), "the zygote never started");
		harness_sleep_ms(20);
	}
}

/* An idle pooled server: exactly its ready sandboxes as children (each a
 * pid 1), SIGTERM, exit 0, nothing left. */
void server_stop_pool(struct server *s, int idle)
{
	pid_t kids[64];
	long t0 = harness_now_ms();
	int n;
	while ((n = proc_children(s->p.pid, kids, 64)) != idle) {
		ck_assert_msg(harness_now_ms() - t0 < harness_scale_ms(20000),
			      "%s: the idle pooled server has %d children (want its %d warm ones)",
			      MODE_NAME[s->mode], n, idle);
		harness_sleep_ms(50);
	}
	int st = server_term(s, harness_scale_ms(15000), NULL);
	ck_assert_msg(st == 0, "%s: pooled moat serve after SIGTERM: status %d", MODE_NAME[s->mode],
		      st);
	server_cleanup(s);
}

/* Each body through a server without a pool: the cold results a warm
 * sandbox's are compared with. */
void cold_results(int mode, const char *const *bodies, int n, struct resp *cold)
{
	struct server s;
	struct server_opts o = { .socket = true, .pool = 0 };
	server_start(&s, mode, &o);
	for (int k = 0; k < n; k++) {
		v1(&s, bodies[k], &cold[k]);
		ck_assert_msg(!pooled(&cold[k]), "%.300s", cold[k].body);
	}
	server_stop(&s);
}

/* How many descendants of pid (to depth: pid 1, the program, its
 * children) have the command name comm; the last one found in *last. */
int proc_descendants_named(pid_t pid, const char *comm, int depth, pid_t *last)
{
	pid_t kids[64];
	int n = proc_children(pid, kids, 64), found = 0;
	for (int i = 0; i < n; i++) {
		char f[64];
		snprintf(f, sizeof f, "/proc/%ld/comm", (long)kids[i]);
		char *c = slurp(f, NULL);
		if (c && !strcmp(c, comm)) {
			found++;
			if (last)
				*last = kids[i];
		}
		free(c);
		if (depth > 1)
			found += proc_descendants_named(kids[i], comm, depth - 1, last);
	}
	return found;
}

/* The value of /proc/PID/status's "Key:" line, or "" (a static buffer). */
const char *proc_status_field(pid_t pid, const char *key)
{
	static char val[128];
	char f[64];
	snprintf(f, sizeof f, "/proc/%ld/status", (long)pid);
	char *st = slurp(f, NULL);
	val[0] = '\0';
	size_t k = strlen(key);
	for (char *l = st; l && *l;) {
		char *nl = strchr(l, '\n');
		if (!strncmp(l, key, k) && l[k] == ':') {
			const char *v = l + k + 1;
			v += strspn(v, " \t");
			snprintf(val, sizeof val, "%.*s", (int)(nl ? nl - v : (long)strlen(v)), v);
			break;
		}
		l = nl ? nl + 1 : NULL;
	}
	free(st);
	return val;
}

TCase *serve_tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 180);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *serve_suite(void)
{
	Suite *s = suite_create("serve");
	/* MOAT_SERVE_TESTS=name,name...: only those (for working on one) */
	const char *only = getenv("MOAT_SERVE_TESTS");

	serve_spin_tests(s, only);
	serve_v1_tests(s, only);
	serve_kv_tests(s, only);
	serve_pool_tests(s, only);
	serve_zygote_tests(s, only);
	serve_listen_tests(s, only);
	serve_ops_tests(s, only);
	return s;
}

char *cg_own_dir(const char *name)
{
	char *text = slurp("/proc/self/cgroup", NULL);
	char *dir = NULL, *save = NULL;
	bool unified = !strcmp(name, "unified");
	struct statfs sfs;
	bool pure = statfs("/sys/fs/cgroup", &sfs) == 0 && sfs.f_type == 0x63677270; /* cgroup2 */
	for (char *l = text ? strtok_r(text, "\n", &save) : NULL; l && !dir;
	     l = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		const char *ctls = c1 + 1, *path = c2 + 1;
		bool match = false;
		if (unified)
			match = !strcmp(l, "0") && !*ctls;
		else {
			char *copy = strdup(ctls), *s2 = NULL;
			for (char *t = strtok_r(copy, ",", &s2); t; t = strtok_r(NULL, ",", &s2))
				match |= !strcmp(t, name);
			free(copy);
		}
		if (!match)
			continue;
		if (unified && pure)
			ck_assert_int_ge(asprintf(&dir, "/sys/fs/cgroup%s", strcmp(path, "/") ? path : ""), 0);
		else
			ck_assert_int_ge(asprintf(&dir, "/sys/fs/cgroup/%s%s", name,
						  strcmp(path, "/") ? path : ""), 0);
	}
	free(text);
	return dir;
}

int cg_leaves_of(pid_t owner, char *where, size_t size)
{
	static const char *const names[] = { "memory", "pids", "cpu", "cpuacct", "unified" };
	char prefix[32];
	snprintf(prefix, sizeof prefix, "moat-%ld-", (long)owner);
	if (where && size)
		where[0] = '\0';
	int total = 0;
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char *dir = cg_own_dir(names[i]);
		DIR *d = dir ? opendir(dir) : NULL;
		int n = 0;
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (!strncmp(e->d_name, prefix, strlen(prefix)))
				n++;
		if (d)
			closedir(d);
		free(dir);
		if (n && where && strlen(where) + strlen(names[i]) + 2 < size) {
			if (where[0])
				strcat(where, " ");
			strcat(where, names[i]);
		}
		total += n;
	}
	return total;
}

/* ---- another caller, a process found by its command line ---- */

/* METHOD path with body {} as uid 65534 over the server's unix socket: the
 * HTTP status. */
int status_as_other(struct server *s, const char *method, const char *path)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(ROOTLESS_ID) < 0 || setuid(ROOTLESS_ID) < 0)
			_exit(99);
		int fd = raw_connect(s);
		char req[256];
		int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
				 "Connection: close\r\n\r\n{}", method, path);
		if (!raw_send(fd, req, (size_t)n))
			_exit(98);
		bool closed;
		long took;
		char *resp = raw_read(fd, 20000, &closed, &took);
		_exit(raw_status(resp) / 100 * 10 + raw_status(resp) % 10);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) < 98, "the other caller could not ask");
	int e = WEXITSTATUS(st);
	return e / 10 * 100 + e % 10;
}

/* Processes whose command line holds marker, anywhere on the host. */
int marked(const char *marker)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char *cl = proc_cmdline((pid_t)atoi(e->d_name));
		if (cl && strstr(cl, marker))
			n++;
		free(cl);
	}
	closedir(d);
	return n;
}

/* kill -9 of s's service once a process marked with marker is seen: no
 * process of what ("session", "sandbox") outlives it. */
void expect_kill9_leaves_nothing(struct server *s, const char *marker, const char *what)
{
	long t0 = harness_now_ms();
	while (marked(marker) < 1 && harness_now_ms() - t0 < 5000)
		harness_sleep_ms(50);
	ck_assert_msg(marked(marker) >= 1, "%s: the %s's process is not seen", MODE_NAME[s->mode],
		      what);
	ck_assert_int_eq(kill(s->p.pid, SIGKILL), 0);
	server_reap(s);
	t0 = harness_now_ms();
	while (marked(marker) > 0 && harness_now_ms() - t0 < harness_scale_ms(10000))
		harness_sleep_ms(50);
	ck_assert_msg(marked(marker) == 0, "%s: a %s's process outlived kill -9 of the service",
		      MODE_NAME[s->mode], what);
}
