/* Network modes, with real traffic and no internet: the suite makes its own
 * peer host — a network namespace joined to the host by a veth pair,
 * 198.51.100.1/24 on the host end and 198.51.100.2/24 in the peer, running
 * a small HTTP server — plus "secret" servers on the host's 127.0.0.1 and on
 * its own address 198.51.100.1. Everything is created and removed here.
 * Names for the allowlist are mapped to the peer with a private /etc/hosts
 * bind-mounted in a mount namespace of the moat process only. Needs root to
 * build the peer; each mode runs as root and rootless. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define PEER_ADDR "198.51.100.2"
#define HOST_ADDR "198.51.100.1"
#define PEER_PORT 8080

static bool ready;
static char ns_name[32], veth_host[16], veth_peer[16];
static char dir[64], hosts_path[96], server_path[96];
static int secret_port;
static pid_t servers[3];

static const char SERVER_PY[] =
	"import sys, http.server, socketserver\n"
	"tag, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
	"class H(http.server.BaseHTTPRequestHandler):\n"
	"    def do_GET(self):\n"
	"        b = ('%s host=%s path=%s\\n' % (tag, self.headers.get('Host'), self.path)).encode()\n"
	"        self.send_response(200)\n"
	"        self.send_header('Content-Length', str(len(b)))\n"
	"        self.end_headers()\n"
	"        self.wfile.write(b)\n"
	"    def log_message(self, *a):\n"
	"        pass\n"
	"class S(socketserver.ThreadingMixIn, http.server.HTTPServer):\n"
	"    daemon_threads = True\n"
	"    allow_reuse_address = True\n"
	"S((addr, port), H).serve_forever()\n";

static int run_argv(const char *const *argv)
{
	pid_t p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	while (waitpid(p, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define RUN(...) run_argv((const char *const[]){ __VA_ARGS__, NULL })

static pid_t start_server(bool in_peer, const char *tag, const char *addr, int port)
{
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	pid_t p = fork();
	if (p == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (in_peer)
			execlp("ip", "ip", "netns", "exec", ns_name, "python3", server_path, tag, addr,
			       ps, (char *)NULL);
		else
			execlp("python3", "python3", server_path, tag, addr, ps, (char *)NULL);
		_exit(127);
	}
	return p;
}

/* The host reaches addr:port (the peer through the veth). */
static bool wait_port(const char *addr, int port)
{
	for (int i = 0; i < 200; i++) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct timeval tv = { .tv_sec = 1 };
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		inet_pton(AF_INET, addr, &sa.sin_addr);
		int rc = connect(s, (struct sockaddr *)&sa, sizeof sa);
		close(s);
		if (rc == 0)
			return true;
		usleep(50000);
	}
	return false;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
	chmod(path, 0644);
}

static void peer_teardown(void)
{
	for (int i = 0; i < 3; i++)
		if (servers[i] > 0) {
			kill(servers[i], SIGKILL);
			waitpid(servers[i], NULL, 0);
			servers[i] = 0;
		}
	if (ns_name[0]) {
		/* the python server in the peer is a child of "ip netns exec": gone with it */
		RUN("ip", "netns", "pids", ns_name);
		RUN("ip", "netns", "del", ns_name);
		RUN("ip", "link", "del", veth_host);
	}
	if (dir[0]) {
		unlink(hosts_path);
		unlink(server_path);
		rmdir(dir);
	}
	ready = false;
}

static void peer_setup(void)
{
	if (!harness_is_root()) {
		fprintf(stderr, "note: network suite needs root to build its peer host; not run\n");
		return;
	}
	harness_moat();
	int id = (int)getpid() % 100000;
	snprintf(ns_name, sizeof ns_name, "moatpeer%d", id);
	snprintf(veth_host, sizeof veth_host, "mtv%dh", id);
	snprintf(veth_peer, sizeof veth_peer, "mtv%dp", id);
	snprintf(dir, sizeof dir, "/tmp/moat-nettest-%d", id);
	secret_port = 20000 + id % 20000;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return;
	chmod(dir, 0755);
	snprintf(hosts_path, sizeof hosts_path, "%s/hosts", dir);
	snprintf(server_path, sizeof server_path, "%s/server.py", dir);
	write_file(server_path, SERVER_PY);
	write_file(hosts_path, "127.0.0.1 localhost local.test\n"
			       PEER_ADDR " api.example.com sub.example.com example.com "
			       "evil-example.com other.test\n"
			       "10.0.0.1 private.test\n");
	char peer_cidr[] = PEER_ADDR "/24", host_cidr[] = HOST_ADDR "/24";
	if (RUN("ip", "netns", "add", ns_name) || RUN("ip", "link", "add", veth_host, "type", "veth",
						      "peer", "name", veth_peer) ||
	    RUN("ip", "link", "set", veth_peer, "netns", ns_name) ||
	    RUN("ip", "addr", "add", host_cidr, "dev", veth_host) ||
	    RUN("ip", "link", "set", veth_host, "up") ||
	    RUN("ip", "-n", ns_name, "addr", "add", peer_cidr, "dev", veth_peer) ||
	    RUN("ip", "-n", ns_name, "link", "set", veth_peer, "up") ||
	    RUN("ip", "-n", ns_name, "link", "set", "lo", "up")) {
		fprintf(stderr, "note: network suite could not build its peer (iproute2, veth)\n");
		peer_teardown();
		return;
	}
	servers[0] = start_server(true, "peer-ok", PEER_ADDR, PEER_PORT);
	servers[1] = start_server(false, "host-loopback-secret", "127.0.0.1", secret_port);
	servers[2] = start_server(false, "host-address-secret", HOST_ADDR, secret_port);
	bool up_peer = wait_port(PEER_ADDR, PEER_PORT), up_lo = wait_port("127.0.0.1", secret_port),
	     up_addr = wait_port(HOST_ADDR, secret_port);
	if (!up_peer || !up_lo || !up_addr) {
		fprintf(stderr, "note: network suite: test servers did not start (peer %d, "
			"host loopback %d, host address %d)\n", up_peer, up_lo, up_addr);
		peer_teardown();
		return;
	}
	ready = true;
}

#define PEER_GUARD(mode)                                                              \
	do {                                                                          \
		HARNESS_MODE_GUARD(mode);                                             \
		if (!ready) {                                                         \
			fprintf(stderr, "note: %s: no peer host; not run\n", __func__); \
			return;                                                       \
		}                                                                     \
	} while (0)

/* moat exec as harness_exec does, with extra environment and optionally the
 * private /etc/hosts (a mount namespace of the moat process only). */
static void net_exec(int mode, const char *request, const char *extra_env, bool hosts,
		     struct run_out *out)
{
	memset(out, 0, sizeof *out);
	int in_p[2], out_p[2], err_p[2];
	ck_assert_int_eq(pipe2(in_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err_p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in_p[0], 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		if (hosts && (unshare(CLONE_NEWNS) < 0 ||
			      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
			      mount(hosts_path, "/etc/hosts", NULL, MS_BIND, NULL) < 0)) {
			perror("net_exec: private /etc/hosts");
			_exit(97);
		}
		if (mode == MODE_ROOTLESS &&
		    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		     setresuid(65534, 65534, 65534) < 0)) {
			perror("net_exec: drop to 65534");
			_exit(99);
		}
		char *envp[] = { (char *)"PATH=/usr/bin:/bin", (char *)"HOME=/nonexistent",
				 (char *)extra_env, NULL };
		char *argv[] = { (char *)"moat", (char *)"exec", NULL };
		execve(harness_moat(), argv, envp);
		_exit(98);
	}
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	size_t len = strlen(request);
	ck_assert_int_eq(write(in_p[1], request, len), (ssize_t)len); /* fits the pipe */
	close(in_p[1]);
	int fds[2] = { out_p[0], err_p[0] };
	char buf[65536];
	time_t t0 = time(NULL);
	while (fds[0] >= 0 || fds[1] >= 0) {
		struct pollfd pf[2] = { { fds[0], POLLIN, 0 }, { fds[1], POLLIN, 0 } };
		if (poll(pf, 2, 1000) < 0 && errno != EINTR)
			break;
		if (time(NULL) - t0 > 120) {
			kill(pid, SIGKILL);
			ck_abort_msg("moat did not finish");
		}
		for (int i = 0; i < 2; i++) {
			if (fds[i] < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(fds[i], buf, sizeof buf);
			if (n <= 0) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			char **b = i == 0 ? &out->out : &out->err;
			size_t *l = i == 0 ? &out->out_len : &out->err_len;
			char *nb = realloc(*b, *l + (size_t)n + 1);
			ck_assert_ptr_nonnull(nb);
			memcpy(nb + *l, buf, (size_t)n);
			*l += (size_t)n;
			nb[*l] = '\0';
			*b = nb;
		}
	}
	int st;
	waitpid(pid, &st, 0);
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	out->json = out->out ? cJSON_Parse(out->out) : NULL;
	ck_assert_msg(out->json, "moat printed no JSON (status %d): %s / %s", out->status,
		      out->out ? out->out : "", out->err ? out->err : "");
}

static char *request(const char *code, const char *extra_json)
{
	char *q = harness_json_quote(code);
	char *r = NULL;
	ck_assert_int_ge(asprintf(&r, "{\"language\":\"python\",\"timeout\":60000,\"code\":%s%s}", q,
				  extra_json), 0);
	free(q);
	return r;
}

static const char *stdout_of(const struct run_out *o)
{
	const char *s = harness_str(o, "stdout");
	ck_assert_msg(s, "no stdout in %s", o->out);
	return s;
}

/* A line "name:..." of the program's output must contain want. */
static void expect_line(const char *out, const char *name, const char *want)
{
	size_t nl = strlen(name);
	for (const char *l = out; l && *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		if (len > nl && !strncmp(l, name, nl) && l[nl] == ':') {
			char *line = strndup(l, len);
			ck_assert_msg(strstr(line, want), "%s: got \"%s\", want \"%s\"", name, line, want);
			free(line);
			return;
		}
		l = e ? e + 1 : NULL;
	}
	ck_abort_msg("no line for %s in output:\n%s", name, out);
}

static const char *network_mode(const struct run_out *o)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(o->json, "network");
	cJSON *m = n ? cJSON_GetObjectItemCaseSensitive(n, "mode") : NULL;
	return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* Python: try(name, host, port) prints "name:ok <first bytes>" or "name:fail <error>". */
static const char PY_TRY[] =
	"import socket, os\n"
	"def tryget(name, host, port, t=3):\n"
	"    try:\n"
	"        s = socket.create_connection((host, port), timeout=t)\n"
	"        s.sendall(b'GET /probe HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n')\n"
	"        d = b''\n"
	"        while True:\n"
	"            b = s.recv(4096)\n"
	"            if not b: break\n"
	"            d += b\n"
	"        print('%s:ok %s' % (name, d.split(b'\\r\\n\\r\\n')[-1].decode('latin1').strip()))\n"
	"    except OSError as e:\n"
	"        print('%s:fail %s' % (name, e))\n"
	"def gateway():\n"
	"    for l in open('/proc/net/route').read().splitlines()[1:]:\n"
	"        f = l.split()\n"
	"        if f[1] == '00000000':\n"
	"            return socket.inet_ntoa(bytes.fromhex(f[2])[::-1])\n"
	"    return '192.0.2.1'\n";

/* ---- default: only lo ---- */

START_TEST(default_only_lo)
{
	PEER_GUARD(_i);
	char code[4096];
	snprintf(code, sizeof code,
		 "%s"
		 "srv = socket.socket(); srv.bind(('127.0.0.1', 8000)); srv.listen()\n"
		 "c = socket.create_connection(('127.0.0.1', 8000)); a, _ = srv.accept()\n"
		 "c.sendall(b'hi'); print('local:ok' if a.recv(2) == b'hi' else 'local:bad')\n"
		 "tryget('peer', '%s', %d)\n"
		 "tryget('hostlo', '127.0.0.1', %d)\n"
		 "tryget('hostaddr', '%s', %d)\n"
		 "tryget('any', '1.1.1.1', 80)\n"
		 "print('resolv:%%s' %% os.path.exists('/etc/resolv.conf'))\n"
		 "print('ifaces:%%s' %% sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'ifaces:n/a')\n",
		 PY_TRY, PEER_ADDR, PEER_PORT, secret_port, HOST_ADDR, secret_port);
	char *req = request(code, "");
	struct run_out o;
	net_exec(_i, req, NULL, false, &o);
	const char *out = stdout_of(&o);
	expect_line(out, "local", "local:ok");
	expect_line(out, "peer", "peer:fail");
	expect_line(out, "hostlo", "hostlo:fail");
	expect_line(out, "hostaddr", "hostaddr:fail");
	expect_line(out, "any", "any:fail");
	expect_line(out, "resolv", "False");
	ck_assert_str_eq(network_mode(&o), "none");
	harness_free(&o);
	free(req);
}
END_TEST

/* ---- network: true ---- */

static void egress_check(int mode, const char *stack_env, const char *stack)
{
	char code[4096];
	snprintf(code, sizeof code,
		 "%s"
		 "tryget('peer', '%s', %d)\n"
		 "tryget('hostlo', '127.0.0.1', %d)\n"
		 "tryget('gateway', gateway(), %d)\n"
		 "tryget('hostaddr', '%s', %d)\n"
		 "tryget('metadata', '169.254.169.254', 80)\n"
		 "print('resolv:%%s' %% open('/etc/resolv.conf').read().strip())\n",
		 PY_TRY, PEER_ADDR, PEER_PORT, secret_port, secret_port, HOST_ADDR, secret_port);
	char *req = request(code, ",\"network\":true");
	struct run_out o;
	net_exec(mode, req, stack_env, false, &o);
	const char *out = stdout_of(&o);
	expect_line(out, "peer", "peer:ok peer-ok");
	expect_line(out, "hostlo", "hostlo:fail");
	expect_line(out, "gateway", "gateway:fail");
	expect_line(out, "hostaddr", "hostaddr:fail");
	expect_line(out, "metadata", "metadata:fail");
	expect_line(out, "resolv", "nameserver");
	ck_assert_msg(!strstr(out, "secret"), "a host service answered:\n%s", out);
	ck_assert_str_eq(network_mode(&o), "egress");
	cJSON *n = cJSON_GetObjectItemCaseSensitive(o.json, "network");
	cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "stack");
	ck_assert(cJSON_IsString(s));
	ck_assert_str_eq(s->valuestring, stack);
	harness_free(&o);
	free(req);
}

START_TEST(egress_pasta)
{
	PEER_GUARD(_i);
	egress_check(_i, NULL, "pasta");
}
END_TEST

START_TEST(egress_slirp4netns)
{
	PEER_GUARD(_i);
	egress_check(_i, "MOAT_NET_STACK=slirp4netns", "slirp4netns");
}
END_TEST

/* After the run, no pasta/slirp4netns of ours is left and the run's
 * namespaces are gone with it. */
START_TEST(egress_torn_down)
{
	PEER_GUARD(_i);
	char *req = request("print('x')", ",\"network\":true");
	struct run_out o;
	net_exec(_i, req, NULL, false, &o);
	ck_assert_int_eq(o.status, 0);
	harness_free(&o);
	free(req);
	FILE *p = popen("pgrep -f -- '[-]-netns /proc/self/fd/3' | wc -l", "r");
	ck_assert_ptr_nonnull(p);
	int n = -1;
	ck_assert_int_eq(fscanf(p, "%d", &n), 1);
	pclose(p);
	ck_assert_int_eq(n, 0);
}
END_TEST

/* ---- allowedHosts: the proxy ---- */

static const char PY_PROXY[] =
	"import socket\n"
	"P = ('127.0.0.1', 3128)\n"
	"def talk(raw, then=None):\n"
	"    s = socket.create_connection(P, timeout=15)\n"
	"    s.sendall(raw.encode())\n"
	"    d = b''\n"
	"    while b'\\r\\n\\r\\n' not in d:\n"
	"        b = s.recv(65536)\n"
	"        if not b: break\n"
	"        d += b\n"
	"    head, _, body = d.partition(b'\\r\\n\\r\\n')\n"
	"    lines = head.decode('latin1').split('\\r\\n')\n"
	"    st = lines[0].split(' ')[1] if ' ' in lines[0] else '?'\n"
	"    reason = ''\n"
	"    for l in lines[1:]:\n"
	"        if l.lower().startswith('x-moat-refused:'): reason = l.split(':', 1)[1].strip()\n"
	"    if st == '200' and then: s.sendall(then.encode())\n"
	"    if st != '200' or then or not raw.startswith('CONNECT'):\n"
	"        while True:\n"
	"            b = s.recv(65536)\n"
	"            if not b: break\n"
	"            body += b\n"
	"    s.close()\n"
	"    return st, body.decode('latin1').strip().split('\\n')[-1], reason\n"
	"def show(name, r):\n"
	"    print('%s:%s:%s:%s' % (name, r[0], r[2], r[1]))\n"
	"def get(name, url, host=None):\n"
	"    h = url.split('/')[2] if host is None else host\n"
	"    try: show(name, talk('GET %s HTTP/1.1\\r\\nHost: %s\\r\\nUser-Agent: t\\r\\n\\r\\n' % (url, h)))\n"
	"    except OSError as e: print('%s:error:%s' % (name, e))\n"
	"def connect(name, hp, then=None):\n"
	"    try: show(name, talk('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (hp, hp), then))\n"
	"    except OSError as e: print('%s:error:%s' % (name, e))\n";

START_TEST(allowlist_proxy)
{
	PEER_GUARD(_i);
	char code[8192];
	int sp = secret_port;
	snprintf(code, sizeof code,
		 "%s"
		 "get('http', 'http://api.example.com:8080/x')\n"
		 "connect('connect', 'api.example.com:8080', 'GET /t HTTP/1.0\\r\\nHost: api.example.com\\r\\n\\r\\n')\n"
		 "get('wildcard', 'http://sub.example.com:8080/w')\n"
		 "get('otherport', 'http://api.example.com:8081/')\n"
		 "connect('connect-otherport', 'api.example.com:443')\n"
		 "get('otherhost', 'http://other.test:8080/')\n"
		 "connect('connect-otherhost', 'other.test:8080')\n"
		 "get('lookalike', 'http://evil-example.com:8080/')\n"
		 "get('apex', 'http://example.com:8080/')\n"
		 "get('hostheader', 'http://api.example.com:8080/', 'other.test:8080')\n"
		 "get('hostheader-port', 'http://api.example.com:8080/', 'api.example.com:9999')\n"
		 "get('lo-literal', 'http://127.0.0.1:%d/')\n"
		 "get('lo-decimal', 'http://2130706433:%d/')\n"
		 "get('lo-octal', 'http://0177.0.0.1:%d/')\n"
		 "get('lo-hex', 'http://0x7f.1:%d/')\n"
		 "get('lo-mapped', 'http://[::ffff:127.0.0.1]:%d/')\n"
		 "get('lo-mapped-hex', 'http://[::ffff:7f00:1]:%d/')\n"
		 "connect('lo-connect', '0x7f000001:%d')\n"
		 "get('lo-name', 'http://local.test:%d/')\n"
		 "get('hostaddr', 'http://%s:%d/')\n"
		 "get('metadata', 'http://169.254.169.254/')\n"
		 "get('metadata-hex', 'http://0xa9fea9fe/')\n"
		 "get('private', 'http://10.0.0.1:8080/')\n"
		 "get('private-name', 'http://private.test:8080/')\n"
		 "get('https-absolute', 'https://api.example.com:8080/')\n"
		 "tryget('direct', '%s', %d)\n",
		 PY_PROXY, sp, sp, sp, sp, sp, sp, sp, sp, HOST_ADDR, sp, PEER_ADDR, PEER_PORT);
	/* PY_TRY for tryget */
	char *full = NULL;
	ck_assert_int_ge(asprintf(&full, "%s%s", PY_TRY, code), 0);
	char extra[2048];
	snprintf(extra, sizeof extra,
		 ",\"allowedHosts\":[\"http://api.example.com:8080\",\"https://api.example.com:8080\","
		 "\"http://*.example.com:8080\",\"http://127.0.0.1:%d\",\"https://127.0.0.1:%d\","
		 "\"http://local.test:%d\",\"http://%s:%d\",\"http://169.254.169.254\","
		 "\"http://10.0.0.1:8080\",\"http://private.test:8080\"],"
		 "\"allowedCidrs\":[\"198.51.100.2/32\"]",
		 sp, sp, sp, HOST_ADDR, sp);
	char *req = request(full, extra);
	struct run_out o;
	net_exec(_i, req, NULL, true, &o);
	const char *out = stdout_of(&o);
	expect_line(out, "http", "http:200::peer-ok host=api.example.com:8080 path=/x");
	expect_line(out, "connect", "connect:200::peer-ok host=api.example.com path=/t");
	expect_line(out, "wildcard", "wildcard:200::peer-ok host=sub.example.com:8080");
	expect_line(out, "otherport", "otherport:403:http://api.example.com:8081 is not in allowedHosts");
	expect_line(out, "connect-otherport", "connect-otherport:403:");
	expect_line(out, "otherhost", "otherhost:403:http://other.test:8080 is not in");
	expect_line(out, "connect-otherhost", "connect-otherhost:403:https://other.test:8080 is not in");
	expect_line(out, "lookalike", "lookalike:403:");
	expect_line(out, "apex", "apex:403:");
	expect_line(out, "hostheader", "hostheader:403:the Host header does not match");
	expect_line(out, "hostheader-port", "hostheader-port:403:the Host header does not match");
	static const char *const lo[] = { "lo-literal", "lo-decimal", "lo-octal", "lo-hex",
					  "lo-mapped", "lo-mapped-hex", "lo-connect", "lo-name" };
	for (size_t i = 0; i < sizeof lo / sizeof lo[0]; i++) {
		char want[64];
		snprintf(want, sizeof want, "%s:403:loopback address 127.0.0.1", lo[i]);
		expect_line(out, lo[i], want);
	}
	expect_line(out, "hostaddr", "hostaddr:403:documentation address 198.51.100.1");
	expect_line(out, "metadata", "metadata:403:cloud metadata address 169.254.169.254");
	expect_line(out, "metadata-hex", "metadata-hex:403:cloud metadata");
	expect_line(out, "private", "private:403:private address 10.0.0.1");
	expect_line(out, "private-name", "private-name:403:private address 10.0.0.1");
	expect_line(out, "https-absolute", "https-absolute:400:");
	expect_line(out, "direct", "direct:fail");
	ck_assert_msg(!strstr(out, "secret"), "a host service answered:\n%s", out);

	/* the result reports the mode and each connection */
	ck_assert_str_eq(network_mode(&o), "allowlist");
	cJSON *conns = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o.json, "network"),
							"connections");
	ck_assert(cJSON_IsArray(conns));
	int allowed = 0, refused = 0;
	bool saw_api = false;
	cJSON *c;
	cJSON_ArrayForEach(c, conns) {
		cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "allowed");
		cJSON *h = cJSON_GetObjectItemCaseSensitive(c, "host");
		cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "port");
		cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "received");
		ck_assert(cJSON_IsBool(a) && cJSON_IsString(h) && cJSON_IsNumber(p) && cJSON_IsNumber(r));
		if (cJSON_IsTrue(a)) {
			allowed++;
			if (!strcmp(h->valuestring, "api.example.com") && p->valueint == 8080 &&
			    r->valuedouble > 0)
				saw_api = true;
		} else {
			refused++;
			ck_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "reason")));
		}
	}
	ck_assert_int_eq(allowed, 3);
	ck_assert_int_ge(refused, 20);
	ck_assert(saw_api);
	harness_free(&o);
	free(req);
	free(full);
}
END_TEST

/* No entries: no egress at all, and the sandbox still has only lo. */
START_TEST(allowlist_empty)
{
	PEER_GUARD(_i);
	char code[4096];
	snprintf(code, sizeof code, "%s%s"
		 "get('any', 'http://api.example.com:8080/')\n"
		 "tryget('direct', '%s', %d)\n",
		 PY_TRY, PY_PROXY, PEER_ADDR, PEER_PORT);
	char *req = request(code, ",\"allowedHosts\":[]");
	struct run_out o;
	net_exec(_i, req, NULL, true, &o);
	const char *out = stdout_of(&o);
	expect_line(out, "any", "any:403:");
	expect_line(out, "direct", "direct:fail");
	harness_free(&o);
	free(req);
}
END_TEST

/* ---- request rules (no peer needed) ---- */

START_TEST(refused_requests)
{
	HARNESS_MODE_GUARD(_i);
	static const char *const cases[][2] = {
		{ ",\"network\":true,\"allowedHosts\":[\"https://a.example.com\"]", "SandboxConfigError" },
		{ ",\"allowedHosts\":[\"https://*\"]", "SandboxPolicyError" },
		{ ",\"allowedHosts\":[\"10.0.0.0/8\"]", "SandboxPolicyError" },
		{ ",\"allowedHosts\":[\"http://10.0.0.0/8\"]", "SandboxPolicyError" },
		{ ",\"allowedHosts\":[\"https://a.example.com:1-9\"]", "SandboxPolicyError" },
		{ ",\"allowedHosts\":[\"a.example.com\"]", "SandboxPolicyError" },
		{ ",\"allowedCidrs\":[\"198.51.100.0/24\"]", "SandboxConfigError" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct run_out o;
		harness_exec_code(_i, "python", "print(1)", cases[i][0], &o);
		const char *t = harness_error_type(&o);
		ck_assert_msg(t && !strcmp(t, cases[i][1]), "%s: %s", cases[i][0], o.out);
		ck_assert_int_eq(o.status, 2);
		harness_free(&o);
	}
}
END_TEST

Suite *network_suite(void)
{
	Suite *s = suite_create("network");
	TCase *tc = tcase_create("modes");
	tcase_set_timeout(tc, 180);
	tcase_add_unchecked_fixture(tc, peer_setup, peer_teardown);
	tcase_add_loop_test(tc, default_only_lo, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_pasta, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_slirp4netns, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_torn_down, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_proxy, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_empty, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, refused_requests, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
