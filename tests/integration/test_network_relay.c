/* The network suite (net_common.h), the relays: socket memory stays bounded
 * against a peer that never reads, idle relays are reset. */
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

/* ---- socket memory ---------------------------------------------------------- */

/* sink.py ADDR PORT: accepts and holds every connection, never reads. Its
 * receive buffers are small (the listener's SO_RCVBUF, inherited): it stands
 * for a peer on another machine, whose buffers are not this host's. */
static const char SINK_PY[] =
	"import socket, sys\n"
	"s = socket.socket()\n"
	"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	"s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n"
	"s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1024)\n"
	"print('ready', flush=True)\n"
	"keep = []\n"
	"while True:\n"
	"    c, _ = s.accept(); keep.append(c)\n";

/* N connections to the sink through the relay, each sent to until nothing
 * moves any more; "conns N bytes B", then 2 s held (the test samples the
 * host meanwhile). */
static const char PY_SINK_FILL[] =
	"import socket, time\n"
	"N, HOST = 500, '11.77.0.2'\n"
	"cl = []\n"
	"try:\n"
	"    for i in range(N):\n"
	"        c = socket.create_connection((HOST, 9100), timeout=30)\n"
	"        c.setblocking(False); cl.append(c)\n"
	"except OSError as e:\n"
	"    print('stopped at %d: %s' % (len(cl), e))\n"
	"chunk, total, idle = b'x' * 65536, 0, 0\n"
	"while idle < 4:\n"
	"    moved = 0\n"
	"    for c in cl:\n"
	"        while True:\n"
	"            try: n = c.send(chunk)\n"
	"            except OSError: break\n"
	"            moved += n\n"
	"    total += moved\n"
	"    idle = idle + 1 if not moved else 0\n"
	"    time.sleep(0.1)\n"
	"print('conns %d bytes %d' % (len(cl), total), flush=True)\n"
	"time.sleep(2)\n";

/* A 32 MiB run holding 500 relayed connections to a peer that never reads
 * raises the host's TCP memory by at most 64 MiB (the sandbox's namespace's
 * tcp_rmem/tcp_wmem maxima, the relay's fixed outbound buffers), and once it
 * ended its relays are reset: nothing of them lingers (no orphan holding
 * what the peer never read). */
START_TEST(egress_socket_memory_bounded)
{
	PEER_GUARD(_i);
	char sink[128];
	snprintf(sink, sizeof sink, "%s/sink.py", net_dir);
	net_write_file(sink, SINK_PY);
	int before = nservers;
	ck_assert_msg(start_server(NS_PUB, sink, (const char *const[]){ PUB4, "9100", NULL }),
		      "the sink did not start");
	char *code = NULL, *req = NULL;
	ck_assert_int_ge(asprintf(&code, "%s", PY_SINK_FILL), 0);
	char *q = harness_json_quote(code);
	ck_assert_int_ge(asprintf(&req, "{\"language\":\"python\",\"network\":true,\"memoryMb\":32,"
				  "\"timeout\":%ld,\"code\":%s}", harness_scale_ms(90000), q), 0);
	free(q);
	free(code);
	long base = harness_tcp_mem_pages();
	ck_assert_int_ge(base, 0);
	struct run_out o;
	memset(&o, 0, sizeof o);
	struct harness_proc p;
	harness_start(_i, (const char *const[]){ "exec", NULL }, req, strlen(req), H_ENV, enter_h,
		      NULL, &p);
	long peak = harness_tcp_mem_peak(&p);
	harness_finish(&p, &o);
	free(req);
	ck_assert_msg(o.json && !harness_error_type(&o), "%s / %s", o.out, o.err);
	double page = (double)sysconf(_SC_PAGESIZE), mib = 1024.0 * 1024.0;
	double grown = (double)(peak - base) * page / mib;
	/* after the run: back near where it was within a few seconds (the sink
	 * still holds what it received, about 4 MiB: it is not this host's in
	 * real life, and killing it would reset the relays' orphans too) */
	long after = harness_tcp_mem_pages();
	for (long waited = 0; after > base + (long)(12 * mib / page) && waited < harness_scale_ms(5000);
	     waited += 100) {
		usleep(100 * 1000);
		after = harness_tcp_mem_pages();
	}
	double left = (double)(after - base) * page / mib;
	const char *out = harness_str(&o, "stdout");
	fprintf(stderr, "note: %s mode %d: %s; host TCP memory +%.1f MiB at most, +%.1f MiB after\n",
		__func__, _i, out ? out : "?", grown, left);
	long long bytes = -1;
	ck_assert_msg(out && sscanf(out, "conns 500 bytes %lld", &bytes) == 1, "%s", o.out);
	ck_assert_msg(bytes >= 500LL * 4096, "only %lld bytes queued: %s", bytes, o.out);
	ck_assert_msg(grown <= 64, "500 relayed connections raised the host's TCP memory by %.1f MiB "
		      "(> 64)", grown);
	ck_assert_msg(left <= 12, "%.1f MiB of the host's TCP memory still held after the run", left);
	harness_free(&o);
	for (int k = before; k < nservers; k++) {
		kill(servers[k], SIGKILL);
		waitpid(servers[k], NULL, 0);
	}
	nservers = before;
}
END_TEST

/* An idle relayed connection: with MOAT_TEST_RELAY_IDLE_MS=1000 a
 * connection to the TCP echo that moves no byte for a few seconds is reset
 * (the program's recv fails with ECONNRESET, not a timeout) and its entry
 * says why; first through the transparent relay, then through the proxy's
 * CONNECT tunnel. */
static const char PY_IDLE[] =
	"import socket, time\n"
	"def idle(name, s, wait, data=b'ping'):\n"
	"    try:\n"
	"        s.sendall(data)\n"
	"        got = b''\n"
	"        while len(got) < len(data):\n"
	"            b = s.recv(65536)\n"
	"            if not b: break\n"
	"            got += b\n"
	"        if got != data:\n"
	"            print('%s:noecho %r' % (name, got)); return\n"
	"        time.sleep(wait)\n"
	"        s.settimeout(15)\n"
	"        b = s.recv(100)\n"
	"        print('%s:%s' % (name, 'eof' if not b else 'data'))\n"
	"    except ConnectionResetError: print('%s:reset' % name)\n"
	"    except socket.timeout: print('%s:open' % name)\n"
	"    except OSError as e: print('%s:error %s' % (name, e))\n"
	"if MODE == 'egress':\n"
	"    idle('egress', socket.create_connection(('" PUB4 "', 9000), timeout=15), WAIT)\n"
	"else:\n"
	"    s = socket.create_connection(('127.0.0.1', 3128), timeout=15)\n"
	"    s.sendall(b'CONNECT public.test:9000 HTTP/1.1\\r\\nHost: public.test:9000\\r\\n\\r\\n')\n"
	"    d = b''\n"
	"    while b'\\r\\n\\r\\n' not in d:\n"
	"        b = s.recv(1)\n"
	"        if not b: break\n"
	"        d += b\n"
	"    if not d.startswith(b'HTTP/1.1 200'): print('proxy:refused %r' % d)\n"
	"    else: idle('proxy', s, WAIT, hello('public.test'))\n";

static const char *const H_ENV_IDLE[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent",
					  HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE,
					  "MOAT_TEST_RELAY_IDLE_MS=1000", NULL };

static int idle_entries(const struct run_out *o, const char *kind)
{
	int n = 0;
	cJSON *c;
	cJSON_ArrayForEach(c, connections(o)) {
		const char *k = str_item(c, "kind"), *r = str_item(c, "reason");
		n += k && !strcmp(k, kind) && r && strstr(r, "idle for 1.000 s") &&
		     num_item(c, "port") == 9000;
	}
	return n;
}

START_TEST(relay_idle_reset)
{
	PEER_GUARD(_i);
	static const char *const modes[][3] = {
		{ "egress", ",\"network\":true", "tcp" },
		{ "proxy", ",\"allowedHosts\":[\"https://public.test:9000\"]", "proxy" },
	};
	struct verdict v;
	v_init(&v, __func__, _i);
	struct run_out o;
	for (size_t m = 0; m < 2; m++) {
		char *code = NULL;
		ck_assert_int_ge(asprintf(&code, "MODE = '%s'\nWAIT = %.1f\n%s%s", modes[m][0],
					  (double)harness_scale_ms(4000) / 1000.0, PY_HELLO, PY_IDLE),
				 0);
		char *req = net_request(code, modes[m][1]);
		memset(&o, 0, sizeof o);
		struct harness_proc p;
		harness_start(_i, (const char *const[]){ "exec", NULL }, req, strlen(req),
			      H_ENV_IDLE, enter_h, NULL, &p);
		harness_finish(&p, &o);
		ck_assert_msg(o.json, "moat printed no JSON (status %d): %s / %s", o.status, o.out,
			      o.err);
		struct lines ls;
		lines_parse(harness_str(&o, "stdout"), &ls);
		v_line(&v, &ls, modes[m][0], "reset");
		int n = idle_entries(&o, modes[m][2]);
		v_expect(&v, n == 1, "%s: %d %s entries to port 9000 say \"idle for 1.000 s\", want 1",
			 modes[m][0], n, modes[m][2]);
		lines_free(&ls);
		if (m == 0)
			harness_free(&o);
		free(req);
		free(code);
	}
	v_done(&v, &o);
	harness_free(&o);
}
END_TEST

void network_relay_tests(TCase *tc)
{
	tcase_add_loop_test(tc, egress_socket_memory_bounded, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, relay_idle_reset, MODE_ROOT, MODE_ROOTLESS + 1);
}
