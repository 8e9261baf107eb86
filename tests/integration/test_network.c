/* The network suite (net_common.h has the topology, the probe and the
 * verdict), the wall: network none and true against every target of the
 * probe, names in a request, DNS that tells nothing, parallel
 * connections, and nothing left behind; and the suite, whose other tests
 * are in test_network_allowlist.c, _relay.c and _agents.c. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net_common.h"
#include "suites.h"

START_TEST(default_only_lo)
{
	PEER_GUARD(_i);
	char *code = probe_code(false,
				"srv = socket.socket(); srv.bind(('127.0.0.1', 8000)); srv.listen()\n"
				"c = socket.create_connection(('127.0.0.1', 8000)); a, _ = srv.accept()\n"
				"c.sendall(b'hi'); print('local:ok' if a.recv(2) == b'hi' else 'local:bad')\n"
				"print('resolv:%s' % os.path.exists('/etc/resolv.conf'))\n");
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, "", &o, &ls, &v);
	check_sweep(&v, &ls, WALL_NONE);
	v_line(&v, &ls, "local", "ok");
	v_line(&v, &ls, "resolv", "False");
	const char *ifs = lines_get(&ls, "ifaces");
	v_expect(&v, ifs && !strcmp(ifs, "lo"), "interfaces: want only lo, got %s", ifs ? ifs : "?");
	v_expect(&v, !strcmp(network_mode(&o), "none"), "network.mode %s, want none", network_mode(&o));
	net_probe_end(&o, &ls, &v);
	free(code);
}
END_TEST

/* ---- network: true ---- */

START_TEST(egress_wall)
{
	PEER_GUARD(_i);
	char *code = probe_code(false, "");
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"network\":true", &o, &ls, &v);
	check_sweep(&v, &ls, WALL_EGRESS);
	v_expect(&v, !strcmp(network_mode(&o), "egress"), "network.mode %s, want egress",
		 network_mode(&o));
	cJSON *net = cJSON_GetObjectItemCaseSensitive(o.json, "network");
	v_expect(&v, !cJSON_GetObjectItemCaseSensitive(net, "stack"), "network.stack is still reported");
	v_expect(&v, connections(&o) != NULL, "network.connections is missing");
	v_expect(&v, has_conn(&o, "tcp", META4, 80, false, false),
		 "no refused tcp connection to %s:80 with a reason in network.connections", META4);
	v_expect(&v, has_conn(&o, "tcp", PUB4 "|" PUB6 "|public.test|mixed.test", PORT, true, true),
		 "no allowed tcp connection to the public peer with received > 0 in network.connections");
	net_probe_end(&o, &ls, &v);
	free(code);
}
END_TEST

/* ---- network: true, IPv6 forms of the host's IPv4, and DNS that tells nothing ---- */

/* The line of name with the part after the rcode (flags, counts, tail). */
static const char *dns_shape(const struct lines *ls, const char *name)
{
	const char *r = lines_get(ls, name);
	return r ? r : "(no line)";
}

/* A dns entry for name in the result: its reason (NULL: none or no entry). */
static const cJSON *dns_entry(const struct run_out *o, const char *name)
{
	cJSON *c, *all = connections(o);
	cJSON_ArrayForEach(c, all) {
		const char *k = str_item(c, "kind"), *h = str_item(c, "host");
		if (k && !strcmp(k, "dns") && h && !strcmp(h, name))
			return c;
	}
	return NULL;
}

/* H's own public IPv4 written as NAT64, 6to4, Teredo (server and client)
 * and ISATAP is refused like H's own address, by address and by name;
 * refused with the reason "host address 11.77.0.1 (carried in ...)" in
 * network.connections, not forwarded. */
START_TEST(egress_embedded_host)
{
	PEER_GUARD(_i);
	static const char *const forms[][2] = {
		{ "nat64", "64:ff9b::b4d:1" },
		{ "6to4", "2002:b4d:1::1" },
		{ "teredo-server", "2001:0:b4d:1::f7f7:f7f7" },
		{ "teredo-client", "2001:0:808:808::f4b2:fffe" },
		{ "isatap", "2a01:4f8:77::5efe:b4d:1" },
		{ "compat", "::11.77.0.1" },
	};
	char *extra = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&extra, &len);
	ck_assert_ptr_nonnull(f);
	fputs(PY_DNSQ, f);
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
		fprintf(f, "print('%s:' + attempt('tcp', '%s', 8080, '[%s]:8080'))\n", forms[i][0],
			forms[i][1], forms[i][1]);
	fputs("gai('hostnat64.test')\ngai('host6to4.test')\n"
	      "dnsq('hostnat64.test', 'AAAA')\ndnsq('host6to4.test', 'AAAA')\n"
	      "dnsq('nosuch.test', 'AAAA')\n", f);
	fclose(f);
	char *code = NULL;
	ck_assert_int_ge(asprintf(&code, "%s%s", PY_LIB, extra), 0);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"network\":true", &o, &ls, &v);
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		v_fail(&v, &ls, forms[i][0]);
		char want[160];
		snprintf(want, sizeof want, "host address " H_PUB4 " (carried in %s)", forms[i][1]);
		bool found = false;
		cJSON *c, *all = connections(&o);
		cJSON_ArrayForEach(c, all) {
			const char *k = str_item(c, "kind"), *h = str_item(c, "host"), *r = str_item(c, "reason");
			cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "allowed");
			found |= k && !strcmp(k, "tcp") && h && !strcmp(h, forms[i][1]) && cJSON_IsFalse(a) &&
				 r && !strcmp(r, want);
		}
		v_expect(&v, found, "%s: no refused tcp entry for %s with the reason \"%s\"", forms[i][0],
			 forms[i][1], want);
	}
	/* by name: the host's address is never answered; the names read as
	 * names that do not exist */
	v_line(&v, &ls, "gai-hostnat64.test", "fail");
	v_line(&v, &ls, "gai-host6to4.test", "fail");
	const char *none = dns_shape(&ls, "q-nosuch.test-AAAA");
	v_expect(&v, !strncmp(none, "3 ", 2), "q-nosuch.test-AAAA: want NXDOMAIN, got %s", none);
	static const char *const names[] = { "hostnat64.test", "host6to4.test" };
	for (size_t i = 0; i < 2; i++) {
		char q[64];
		snprintf(q, sizeof q, "q-%s-AAAA", names[i]);
		v_expect(&v, !strcmp(dns_shape(&ls, q), none), "%s: \"%s\", want the same as a name that "
			 "does not exist: \"%s\"", q, dns_shape(&ls, q), none);
		const cJSON *e = dns_entry(&o, names[i]);
		v_expect(&v, e && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "allowed")) &&
				     !cJSON_GetObjectItemCaseSensitive(e, "answers"),
			 "%s: want a refused dns entry without answers", names[i]);
	}
	net_probe_end(&o, &ls, &v);
	free(code);
	free(extra);
}
END_TEST

/* A name on the host's private network (lan.test: only 10.77.0.2) is
 * answered byte for byte like a name that does not exist, A and AAAA, and
 * logged alike; a name only in the host's /etc/hosts is not resolved; a
 * public name still is. */
START_TEST(dns_tells_nothing)
{
	PEER_GUARD(_i);
	char *code = NULL;
	ck_assert_int_ge(asprintf(&code, "%s%s"
		 "for n in ('lan.test', 'nosuch.test', 'hostsonly.test', 'meta.test', 'public.test', 'nosuch2.test'):\n"
		 "    for t in ('A', 'AAAA'):\n"
		 "        dnsq(n, t)\n"
		 "for n in ('lan.test', 'nosuch.test', 'hostsonly.test', 'public.test'):\n"
		 "    gai(n)\n"
		 "print('hostsonly-direct:' + attempt('tcp', '" PUB4 "', 8080, 'hostsonly.test:8080'))\n",
		 PY_LIB, PY_DNSQ), 0);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"network\":true", &o, &ls, &v);
	static const char *const types[] = { "A", "AAAA" };
	for (size_t t = 0; t < 2; t++) {
		char q[64];
		snprintf(q, sizeof q, "q-nosuch.test-%s", types[t]);
		const char *none = dns_shape(&ls, q);
		v_expect(&v, !strncmp(none, "3 ", 2) && strstr(none, "an=0 ns=0 ar=0 tail= id=ok"),
			 "%s: want NXDOMAIN and nothing more, got \"%s\"", q, none);
		static const char *const same[] = { "lan.test", "hostsonly.test", "meta.test", "nosuch2.test" };
		for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
			snprintf(q, sizeof q, "q-%s-%s", same[i], types[t]);
			v_expect(&v, !strcmp(dns_shape(&ls, q), none),
				 "%s: \"%s\", want exactly what a name that does not exist gets: \"%s\"", q,
				 dns_shape(&ls, q), none);
		}
	}
	v_line(&v, &ls, "q-public.test-A", "0 flags=8180 qd=1 an=1");
	v_line(&v, &ls, "q-public.test-AAAA", "0 flags=8180 qd=1 an=1");
	v_line(&v, &ls, "gai-public.test", PUB4);
	const char *gn = lines_get(&ls, "gai-nosuch.test");
	v_expect(&v, gn && !strncmp(gn, "fail", 4), "gai-nosuch.test: want a failure, got %s",
		 gn ? gn : "(no line)");
	v_line(&v, &ls, "gai-lan.test", gn ? gn : "fail");
	v_line(&v, &ls, "gai-hostsonly.test", gn ? gn : "fail");
	/* the address itself is public: only the name is unknown to DNS */
	v_line(&v, &ls, "hostsonly-direct", "ok public-ok");
	/* the log reads the same for both, and names no internal address */
	const cJSON *el = dns_entry(&o, "lan.test"), *en = dns_entry(&o, "nosuch.test");
	const char *rl = el ? str_item(el, "reason") : NULL, *rn = en ? str_item(en, "reason") : NULL;
	v_expect(&v, rl && rn && !strcmp(rl, rn), "the dns entries' reasons differ: lan.test \"%s\", "
		 "nosuch.test \"%s\"", rl ? rl : "(none)", rn ? rn : "(none)");
	char *nj = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o.json, "network"));
	v_expect(&v, nj && !strstr(nj, LAN_PEER) && !strstr(nj, META4),
		 "network names an internal address: %s", nj ? nj : "(none)");
	free(nj);
	for (size_t i = 0; i < ls.n; i++)
		if (!strncmp(ls.name[i], "ms-", 3))
			fprintf(stderr, "dns_tells_nothing (%s): %s %s ms\n",
				_i == MODE_ROOT ? "root" : "rootless", ls.name[i] + 3, ls.res[i]);
	net_probe_end(&o, &ls, &v);
	free(code);
}
END_TEST

/* 256 TCP connections open at once from inside, each echoing 4 KiB. */
START_TEST(egress_parallel)
{
	PEER_GUARD(_i);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, PY_PARALLEL, ",\"network\":true", &o, &ls, &v);
	v_line(&v, &ls, "parallel", "ok 256/256 open 256");
	net_probe_end(&o, &ls, &v);
}
END_TEST

/* ---- teardown: namespaces and processes ---- */

struct inoset {
	unsigned long *v;
	size_t n, cap;
};

static bool inoset_has(const struct inoset *s, unsigned long x)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == x)
			return true;
	return false;
}

static void inoset_add(struct inoset *s, unsigned long x)
{
	if (!x || inoset_has(s, x))
		return;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		ck_assert_ptr_nonnull(s->v);
	}
	s->v[s->n++] = x;
}

static unsigned long ns_ino(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* Every network namespace a process, a thread or an open fd holds. */
static void netns_snapshot(struct inoset *s)
{
	s->n = 0;
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char p[300];
		snprintf(p, sizeof p, "/proc/%s/task", e->d_name);
		DIR *t = opendir(p);
		struct dirent *te;
		while (t && (te = readdir(t))) {
			if (!isdigit((unsigned char)te->d_name[0]))
				continue;
			char q[600];
			snprintf(q, sizeof q, "/proc/%s/task/%s/ns/net", e->d_name, te->d_name);
			inoset_add(s, ns_ino(q));
		}
		if (t)
			closedir(t);
		snprintf(p, sizeof p, "/proc/%s/fd", e->d_name);
		DIR *f = opendir(p);
		while (f && (te = readdir(f))) {
			char q[600], link[64];
			snprintf(q, sizeof q, "/proc/%s/fd/%s", e->d_name, te->d_name);
			ssize_t n = readlink(q, link, sizeof link - 1);
			unsigned long ino;
			if (n > 0) {
				link[n] = '\0';
				if (sscanf(link, "net:[%lu]", &ino) == 1)
					inoset_add(s, ino);
			}
		}
		if (f)
			closedir(f);
	}
	closedir(d);
}

/* Appends ", pid(comm)note" to buf. */
static void describe_proc(char *buf, size_t size, const char *pid, const char *note)
{
	char p[300], comm[64] = "?";
	snprintf(p, sizeof p, "/proc/%s/comm", pid);
	FILE *f = fopen(p, "re");
	if (f) {
		if (fgets(comm, sizeof comm, f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	size_t l = strlen(buf);
	snprintf(buf + l, size - l, "%s %s(%s)%s", l ? "," : "", pid, comm, note);
}

/* "pid (comm)" of processes in or holding namespace ino, and the count of
 * processes in it. */
static int ns_holders(unsigned long ino, char *buf, size_t size)
{
	int n = 0;
	if (size)
		buf[0] = '\0';
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char p[300];
		snprintf(p, sizeof p, "/proc/%s/ns/net", e->d_name);
		if (ns_ino(p) != ino)
			continue;
		n++;
		describe_proc(buf, size, e->d_name, "");
	}
	closedir(d);
	return n;
}

static bool has_marker(const char *pid, const char *marker)
{
	char p[300], buf[8192];
	snprintf(p, sizeof p, "/proc/%s/cmdline", pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t r = read(fd, buf, sizeof buf);
	close(fd);
	return r > 0 && memmem(buf, (size_t)r, marker, strlen(marker));
}

/* The pid of a process other than `not` whose command line holds marker. */
static pid_t find_marker(const char *marker, pid_t not)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	pid_t found = 0;
	while (!found && (e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]) && atoi(e->d_name) != not &&
		    has_marker(e->d_name, marker))
			found = atoi(e->d_name);
	closedir(d);
	return found;
}

/* The parent of pid, or 0. */
static pid_t parent_of(pid_t pid)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%ld/stat", (long)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end = strrchr(buf, ')'); /* comm may hold spaces and parens */
	long ppid = 0;
	if (!end || sscanf(end + 1, " %*c %ld", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* Is pid a descendant of this (test) process? With the test a child
 * subreaper, every process moat started stays one, also once moat is gone:
 * an orphan is reparented to the test, not to pid 1. */
static bool is_ours(pid_t pid)
{
	pid_t self = getpid();
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		pid = parent_of(pid);
		if (pid == self)
			return true;
	}
	return false;
}

/* Processes of the run still alive after moat was reaped: the test's
 * children (what moat started and left behind, reparented to the test),
 * after reaping those that already exited. Their count; described in buf
 * (and killed, with kill_them). Only this process's: nothing else on the
 * machine is counted. */
static int run_leftovers(char *buf, size_t size, bool kill_them)
{
	while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
		;
	buf[0] = '\0';
	int n = 0;
	char p[64];
	snprintf(p, sizeof p, "/proc/%ld/task", (long)getpid());
	DIR *d = opendir(p);
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char f[384], kids[4096];
		snprintf(f, sizeof f, "%s/%s/children", p, e->d_name);
		int fd = open(f, O_RDONLY | O_CLOEXEC);
		ssize_t r = fd < 0 ? -1 : read(fd, kids, sizeof kids - 1);
		if (fd >= 0)
			close(fd);
		if (r <= 0)
			continue;
		kids[r] = '\0';
		char *save = NULL;
		for (char *tok = strtok_r(kids, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			n++;
			describe_proc(buf, size, tok, "");
			if (kill_them)
				kill((pid_t)atol(tok), SIGKILL);
		}
	}
	closedir(d);
	if (kill_them)
		while (waitpid(-1, NULL, __WALL) > 0)
			;
	return n;
}

/* Processes holding network namespace ino (in it, or by an open fd); the
 * number of those that belong to the run: descendants of the test, in H
 * (an orphaned uplink helper), in the run's user namespace user_ns, or with
 * marker in their command line. The others (another program on this
 * machine made a namespace meanwhile, or took the number of one that is
 * gone) are only described. */
static int ns_related(unsigned long ino, unsigned long user_ns, const char *marker, char *buf,
		      size_t size)
{
	int related = 0;
	buf[0] = '\0';
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char p[300];
		snprintf(p, sizeof p, "/proc/%s/ns/net", e->d_name);
		unsigned long net = ns_ino(p);
		bool holds = net == ino;
		snprintf(p, sizeof p, "/proc/%s/fd", e->d_name);
		DIR *f = holds ? NULL : opendir(p);
		struct dirent *fe;
		while (f && !holds && (fe = readdir(f))) {
			char q[600], link[64];
			unsigned long x;
			snprintf(q, sizeof q, "/proc/%s/fd/%s", e->d_name, fe->d_name);
			ssize_t n = readlink(q, link, sizeof link - 1);
			if (n > 0) {
				link[n] = '\0';
				holds = sscanf(link, "net:[%lu]", &x) == 1 && x == ino;
			}
		}
		if (f)
			closedir(f);
		if (!holds)
			continue;
		snprintf(p, sizeof p, "/proc/%s/ns/user", e->d_name);
		bool ours = net == (unsigned long)h_ino || (user_ns && ns_ino(p) == user_ns) ||
			    has_marker(e->d_name, marker) || is_ours((pid_t)atoi(e->d_name));
		related += ours;
		describe_proc(buf, size, e->d_name, ours ? "" : "[not of this run]");
	}
	closedir(d);
	return related;
}


/* A program holding a relayed connection; moat ends with the program
 * (_i / 2 == 0), or is killed with SIGTERM (1) or SIGKILL (2) mid-run. No
 * process of the run and no network namespace of it may remain, and H
 * holds exactly the processes it held before. Only this run's processes
 * and namespaces count, whatever else runs on the machine: the test is a
 * child subreaper, so all that moat started stays its descendant, and the
 * marker in the program's command line is unique to the run. */
START_TEST(egress_teardown)
{
	int mode = _i % 2, how = _i / 2;
	static const char *const HOW[] = { "exit", "SIGTERM", "SIGKILL" };
	PEER_GUARD(mode);
	char marker[80], code[2048];
	harness_marker(marker, sizeof marker, "moatwallmark", _i);
	/* orphans of moat (its sandbox, a helper) come to this per-test process */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	snprintf(code, sizeof code,
		 "import os\n"
		 "inner = r'''\n"
		 "import socket, time\n"
		 "s = socket.create_connection(('" PUB4 "', 9000), timeout=10)\n"
		 "s.sendall(b'hold\\n')\n"
		 "print('connected:' + s.recv(100).decode().strip(), flush=True)\n"
		 "time.sleep(%d)\n"
		 "print('done', flush=True)\n"
		 "'''\n"
		 "os.execv('/usr/bin/python3', ['python3', '-c', inner, '%s'])\n",
		 how ? 90 : 3, marker);
	struct inoset before = { 0 }, after = { 0 };
	netns_snapshot(&before);
	char holders[2048];
	int in_h = ns_holders(h_ino, holders, sizeof holders);

	struct harness_proc mp;
	harness_start(mode,
		      (const char *const[]){ "run", "--net", "--timeout", "100s", "-l", "python", "-c",
					     code, NULL },
		      NULL, 0, H_ENV, enter_h, NULL, &mp);
	struct run_out o = { 0 };
	char *early = read_until(mp.out, "connected:", harness_scale_ms(30000));
	net_append(&o.out, &o.out_len, early ? early : "", early ? strlen(early) : 0);
	free(early);
	if (!strstr(o.out, "connected:hold")) {
		kill(mp.pid, SIGKILL);
		harness_finish(&mp, &o);
		ck_abort_msg("%s: the program did not connect: stdout %s stderr %s", HOW[how], o.out, o.err);
	}
	unsigned long sandbox_ns = 0, sandbox_user = 0;
	for (int i = 0; i < 100 && !sandbox_ns; i++) {
		pid_t sp = find_marker(marker, mp.pid);
		char p[64];
		snprintf(p, sizeof p, "/proc/%d/ns/net", (int)sp);
		if (sp > 0)
			sandbox_ns = ns_ino(p);
		snprintf(p, sizeof p, "/proc/%d/ns/user", (int)sp);
		if (sp > 0)
			sandbox_user = ns_ino(p);
		if (!sandbox_ns)
			usleep(20000);
	}
	if (how)
		kill(mp.pid, how == 1 ? SIGTERM : SIGKILL);
	harness_finish(&mp, &o);

	struct verdict v;
	v_init(&v, __func__, mode);
	char *name = v.test + strlen(v.test);
	snprintf(name, sizeof v.test - strlen(v.test), " %s", HOW[how]);
	v_expect(&v, sandbox_ns && sandbox_ns != h_ino, "could not find the sandbox's namespace");
	if (how == 0)
		v_expect(&v, o.status == 0 && strstr(o.out, "done"), "the run did not finish: status %d",
			 o.status);
	int markers = -1, in_h_after = -1, left = -1, sandbox_left = -1;
	char left_desc[2048] = "", sandbox_desc[512] = "";
	bool clean = false;
	long end = harness_now_ms() + harness_scale_ms(10000);
	do {
		markers = harness_count_marker(marker);
		left = run_leftovers(left_desc, sizeof left_desc, false);
		netns_snapshot(&after);
		in_h_after = ns_holders(h_ino, holders, sizeof holders);
		/* a number the sandbox's namespace had may name another's by now */
		sandbox_left = inoset_has(&after, sandbox_ns)
				       ? ns_related(sandbox_ns, sandbox_user, marker, sandbox_desc,
						    sizeof sandbox_desc)
				       : 0;
		clean = markers == 0 && left == 0 && in_h_after <= in_h && sandbox_left == 0;
		for (size_t i = 0; clean && i < after.n; i++) {
			char who[512];
			clean = inoset_has(&before, after.v[i]) ||
				!ns_related(after.v[i], sandbox_user, marker, who, sizeof who);
		}
		if (!clean)
			usleep(100000);
	} while (!clean && harness_now_ms() < end);
	v_expect(&v, markers == 0, "%d process(es) with the run's marker remain", markers);
	v_expect(&v, left == 0, "%d process(es) started by the run remain:%s", left, left_desc);
	v_expect(&v, in_h_after <= in_h, "H holds %d processes, %d before: %s", in_h_after, in_h,
		 holders);
	v_expect(&v, sandbox_left == 0, "the sandbox's network namespace %lu remains, held by:%s",
		 sandbox_ns, sandbox_desc);
	for (size_t i = 0; i < after.n; i++) {
		char who[512];
		if (inoset_has(&before, after.v[i]))
			continue;
		if (ns_related(after.v[i], sandbox_user, marker, who, sizeof who))
			v_expect(&v, false, "a new network namespace %lu remains, held by:%s", after.v[i],
				 who);
		else
			fprintf(stderr, "note: %s: a new network namespace %lu held by%s is not this "
				"run's; not counted\n", v.test, after.v[i], who[0] ? who : " nothing");
	}
	free(before.v);
	free(after.v);
	if (v.failed) {
		/* leave nothing behind for the next test */
		fprintf(stderr, "moat output: %s / %s\n", o.out, o.err);
		for (pid_t p; markers > 0 && (p = find_marker(marker, 0)) > 0; markers--)
			kill(p, SIGKILL);
		run_leftovers(left_desc, sizeof left_desc, true);
		kill_ns_procs(ns_name[NS_H], true);
	}
	v_done(&v, NULL);
	harness_free(&o);
}
END_TEST

Suite *network_suite(void)
{
	Suite *s = suite_create("network");
	TCase *tc = tcase_create("wall");
	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, topology_setup, topology_teardown);
	tcase_add_loop_test(tc, default_only_lo, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_wall, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_parallel, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, egress_embedded_host, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, dns_tells_nothing, MODE_ROOT, MODE_ROOTLESS + 1);
	/* index = mode + 2 * (0 exit, 1 SIGTERM, 2 SIGKILL) */
	tcase_add_loop_test(tc, egress_teardown, 0, 6);
	network_allowlist_tests(tc);
	network_relay_tests(tc);
	network_agents_tests(tc);
	suite_add_tcase(s, tc);
	return s;
}
