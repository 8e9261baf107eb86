/* The network suite (net_common.h), allowlist mode: the transparent and the
 * explicit proxy, one request per connection, CONNECT tunnels, trailers, an
 * empty allowlist, sends from a spinning program, refused requests. */
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

/* ---- allowedHosts ---- */

/* Transparent connections to what moat's DNS returned for an allowed name,
 * when the Host header matches; the explicit proxy; allowed names that
 * resolve to a host address are refused both ways. */
START_TEST(allowlist_transparent)
{
	PEER_GUARD(_i);
	char *extra = NULL;
	ck_assert_int_ge(asprintf(&extra, "%s%s"
				  "get('proxy', 'http://public.test:8080/x')\n"
				  "hc('hc-name', 'public.test', 8080)\n"
				  "hc('hc-addr', '" PUB4 "', 8080, 'public.test:8080')\n"
				  "hc('hc-addr6', '" PUB6 "', 8080, 'public.test:8080')\n"
				  "hc('hc-otherhost', 'public.test', 8080, 'other.test:8080')\n"
				  "hc('hc-addr-otherhost', '" PUB4 "', 8080, 'other.test:8080')\n"
				  "hc('hc-otherport', 'public.test', 8081)\n"
				  "hc('hc-hostpub', 'hostpub.test', 8080)\n"
				  "hc('hc-self', 'self.test', 8080)\n"
				  "get('proxy-self', 'http://self.test:8080/')\n"
				  "get('proxy-hostpub', 'http://hostpub.test:8080/')\n",
				  PY_PROXY, PY_HTTP_CLIENT), 0);
	char *code = probe_code(false, extra);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"allowedHosts\":[\"http://public.test:8080\","
		  "\"http://self.test:8080\",\"http://hostpub.test:8080\"]", &o, &ls, &v);
	const char *out = harness_str(&o, "stdout");
	check_sweep(&v, &ls, WALL_ALLOWLIST);
	v_line(&v, &ls, "proxy", "200::public-ok host=public.test:8080 path=/x");
	v_line(&v, &ls, "hc-name", "ok 200 public-ok host=public.test:8080 path=/hc");
	v_line(&v, &ls, "hc-addr", "ok 200 public-ok host=public.test:8080 path=/hc");
	v_line(&v, &ls, "hc-addr6", "ok 200 public-ok host=public.test:8080 path=/hc");
	v_fail(&v, &ls, "hc-otherhost");
	v_fail(&v, &ls, "hc-addr-otherhost");
	v_fail(&v, &ls, "hc-otherport");
	v_fail(&v, &ls, "hc-hostpub");
	v_fail(&v, &ls, "hc-self");
	v_line(&v, &ls, "proxy-self", "403:");
	v_line(&v, &ls, "proxy-hostpub", "403:");
	v_expect(&v, out && !strstr(out, "secret") && !strstr(out, "CREDENTIALS"),
		 "a host/LAN/metadata service answered");
	v_expect(&v, !strcmp(network_mode(&o), "allowlist"), "network.mode %s, want allowlist",
		 network_mode(&o));
	cJSON *c, *all = connections(&o);
	v_expect(&v, all != NULL, "network.connections is missing");
	cJSON_ArrayForEach(c, all)
		v_expect(&v, str_item(c, "kind") != NULL, "a connection entry has no \"kind\"");
	v_expect(&v, has_conn(&o, "proxy", "public.test", 8080, true, true),
		 "no allowed proxy entry for public.test:8080 with received > 0");
	v_expect(&v, has_conn(&o, "tcp", "public.test|" PUB4 "|" PUB6, 8080, true, true),
		 "no allowed transparent tcp entry for public.test:8080 with received > 0");
	v_expect(&v, has_conn(&o, NULL, "hostpub.test|" H_PUB4 "|" H_PUB6, -1, false, false),
		 "no refused entry with a reason for hostpub.test");
	net_probe_end(&o, &ls, &v);
	free(code);
	free(extra);
}
END_TEST

/* The explicit proxy's rules, every spelling of a refused address; names
 * it resolves with the host's DNS only, and says the same of a name that does
 * not exist as of one with only refused addresses. */
START_TEST(allowlist_proxy)
{
	PEER_GUARD(_i);
	char *code = NULL;
	ck_assert_int_ge(asprintf(&code, "%s%s"
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
		 "get('lo-literal', 'http://127.0.0.1:8080/')\n"
		 "get('lo-decimal', 'http://2130706433:8080/')\n"
		 "get('lo-octal', 'http://0177.0.0.1:8080/')\n"
		 "get('lo-hex', 'http://0x7f.1:8080/')\n"
		 "get('lo-mapped', 'http://[::ffff:127.0.0.1]:8080/')\n"
		 "get('lo-mapped-hex', 'http://[::ffff:7f00:1]:8080/')\n"
		 "connect('lo-connect', '0x7f000001:8080')\n"
		 "get('lo-name', 'http://local.test:8080/')\n"
		 "get('hostaddr', 'http://" H_SECOND ":8080/')\n"
		 "get('hostpub', 'http://" H_PUB4 ":8080/')\n"
		 "get('metadata', 'http://169.254.169.254/')\n"
		 "get('metadata-hex', 'http://0xa9fea9fe/')\n"
		 "get('private', 'http://10.0.0.1:8080/')\n"
		 "get('private-name', 'http://private.test:8080/')\n"
		 "get('https-absolute', 'https://api.example.com:8080/')\n"
		 "get('cidr', 'http://lan.test:8080/c')\n"
		 "get('nosuch-name', 'http://nosuch.test:8080/')\n"
		 "get('hostsonly-name', 'http://hostsonly.test:8080/')\n"
		 "print('direct:' + attempt('tcp', '" PUB4 "', 8080, 'api.example.com:8080'))\n",
		 PY_LIB, PY_PROXY), 0);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code,
		  ",\"allowedHosts\":[\"http://api.example.com:8080\",\"https://api.example.com:8080\","
		  "\"http://*.example.com:8080\",\"http://127.0.0.1:8080\",\"https://127.0.0.1:8080\","
		  "\"http://local.test:8080\",\"http://" H_SECOND ":8080\",\"http://" H_PUB4 ":8080\","
		  "\"http://169.254.169.254\",\"http://10.0.0.1:8080\",\"http://private.test:8080\","
		  "\"http://lan.test:8080\",\"http://nosuch.test:8080\",\"http://hostsonly.test:8080\"],"
		  "\"allowedCidrs\":[\"" LAN_PEER "/32\"]", &o, &ls, &v);
	const char *out = harness_str(&o, "stdout");
	v_line(&v, &ls, "http", "200::public-ok host=api.example.com:8080 path=/x");
	v_line(&v, &ls, "connect", "200::public-ok host=api.example.com path=/t");
	v_line(&v, &ls, "wildcard", "200::public-ok host=sub.example.com:8080");
	v_line(&v, &ls, "otherport", "403:http://api.example.com:8081 is not in allowedHosts");
	v_line(&v, &ls, "connect-otherport", "403:");
	v_line(&v, &ls, "otherhost", "403:http://other.test:8080 is not in");
	v_line(&v, &ls, "connect-otherhost", "403:https://other.test:8080 is not in");
	v_line(&v, &ls, "lookalike", "403:");
	v_line(&v, &ls, "apex", "403:");
	v_line(&v, &ls, "hostheader", "403:the Host header does not match");
	v_line(&v, &ls, "hostheader-port", "403:the Host header does not match");
	static const char *const lo[] = { "lo-literal", "lo-decimal", "lo-octal", "lo-hex",
					  "lo-mapped", "lo-mapped-hex", "lo-connect" };
	for (size_t i = 0; i < sizeof lo / sizeof lo[0]; i++)
		v_line(&v, &ls, lo[i], "403:loopback address 127.0.0.1");
	v_line(&v, &ls, "hostaddr", "403:private address " H_SECOND);
	v_line(&v, &ls, "hostpub", "403:");
	v_line(&v, &ls, "metadata", "403:cloud metadata address 169.254.169.254");
	v_line(&v, &ls, "metadata-hex", "403:cloud metadata");
	v_line(&v, &ls, "private", "403:private address 10.0.0.1");
	/* a name: the same words whether it does not exist, resolves only to
	 * refused addresses or is only in the host's /etc/hosts */
	v_line(&v, &ls, "lo-name", "403:local.test: no such name, or none of its addresses");
	v_line(&v, &ls, "private-name", "403:private.test: no such name, or none of its addresses");
	v_line(&v, &ls, "nosuch-name", "403:nosuch.test: no such name, or none of its addresses");
	v_line(&v, &ls, "hostsonly-name", "403:hostsonly.test: no such name, or none of its addresses");
	v_line(&v, &ls, "https-absolute", "400:");
	v_line(&v, &ls, "cidr", "200::lan-secret host=lan.test:8080 path=/c");
	/* the exception is reported, in network and in warnings */
	cJSON *cidrs = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(o.json, "network"), "allowedCidrs");
	v_expect(&v, cJSON_IsArray(cidrs) && cJSON_GetArraySize(cidrs) == 1 &&
			     !strcmp(cJSON_GetArrayItem(cidrs, 0)->valuestring, LAN_PEER "/32"),
		 "network.allowedCidrs does not report the exception");
	cJSON *warn = cJSON_GetObjectItemCaseSensitive(o.json, "warnings");
	v_expect(&v, cJSON_GetArraySize(warn) >= 1 &&
			     strstr(cJSON_GetArrayItem(warn, 0)->valuestring, "allowedCidrs"),
		 "no warning names allowedCidrs");
	v_fail(&v, &ls, "direct");
	v_expect(&v, out && !strstr(out, "host-secret") && !strstr(out, "CREDENTIALS"),
		 "a host or metadata service answered");

	v_expect(&v, !strcmp(network_mode(&o), "allowlist"), "network.mode %s, want allowlist",
		 network_mode(&o));
	cJSON *conns = connections(&o), *c;
	v_expect(&v, conns != NULL, "network.connections is missing");
	int allowed = 0, refused = 0;
	bool saw_api = false;
	cJSON_ArrayForEach(c, conns) {
		const char *k = str_item(c, "kind");
		if (k && !strcmp(k, "dns"))
			continue;
		cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "allowed");
		const char *h = str_item(c, "host");
		bool shape = cJSON_IsBool(a) && h && num_item(c, "port") >= 0 && num_item(c, "received") >= 0;
		v_expect(&v, shape, "a connection entry lacks allowed/host/port/received");
		if (!shape)
			continue;
		if (cJSON_IsTrue(a)) {
			allowed++;
			saw_api |= !strcmp(h, "api.example.com") && num_item(c, "port") == 8080 &&
				   num_item(c, "received") > 0;
		} else {
			refused++;
			v_expect(&v, str_item(c, "reason") != NULL, "a refused entry for %s has no reason", h);
		}
	}
	v_expect(&v, allowed == 4, "%d allowed connections, want 4 (http, connect, wildcard, cidr)",
		 allowed);
	v_expect(&v, refused >= 22, "%d refused connections, want >= 22", refused);
	v_expect(&v, saw_api, "no allowed entry for api.example.com:8080 with received > 0");
	net_probe_end(&o, &ls, &v);
	free(code);
}
END_TEST

/* One request per plain-HTTP connection: a second request on a connection
 * whose first named an allowed host (pipelined in the same write, or sent
 * after the first answer on the kept-alive connection) could name any host
 * the same front end serves. The kept-alive service on 8082 answers every
 * request it gets, so whatever reached it shows; through the transparent
 * path and the proxy, each refusal in the network log. Request heads moat
 * cannot judge (smuggling-shaped framing, Upgrade, obs-fold) and malformed
 * chunked bodies are refused. */
/* ka(name, addr, first, second[, wait_first[, connect]]): first and second
 * sent on one connection to addr (through a CONNECT tunnel to connect, when
 * given); OUT[name]: what the kept-alive service answered ("host/path:body
 * ...", "none"). */
#define PY_KA                                                                                    \
	"import re, socket, threading\n"                                                        \
	"PROXY = ('127.0.0.1', 3128)\n"                                                         \
	"OUT = {}\n"                                                                            \
	"def answers(d):\n"                                                                     \
	"    got = re.findall(r'host=(\\S+) path=(\\S+) body=(\\d+)', d.decode('latin1'))\n"   \
	"    return ' '.join('%s%s:%s' % g for g in got) or 'none'\n"                          \
	"def tunnel(s, hp):\n"                                                                  \
	"    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (hp, hp)).encode())\n"  \
	"    h = b''\n"                                                                         \
	"    while b'\\r\\n\\r\\n' not in h:\n"                                                 \
	"        b = s.recv(1)\n"                                                               \
	"        if not b: break\n"                                                             \
	"        h += b\n"                                                                      \
	"    return h.startswith(b'HTTP/1.1 200')\n"                                            \
	"def ka(name, addr, first, second, wait_first=False, connect=None):\n"                  \
	"    try:\n"                                                                            \
	"        s = socket.create_connection(addr, timeout=10)\n"                              \
	"        if connect and not tunnel(s, connect):\n"                                      \
	"            OUT[name] = 'CONNECT refused'\n"                                           \
	"            return\n"                                                                  \
	"        s.sendall((first if wait_first else first + second).encode())\n"              \
	"        d = b''\n"                                                                         \
	"        try:\n"                                                                            \
	"            while wait_first and not re.search(rb'n=\\d+\\n', d):\n"                       \
	"                b = s.recv(65536)\n"                                                       \
	"                if not b: break\n"                                                         \
	"                d += b\n"                                                                  \
	"            if wait_first: s.sendall(second.encode())\n"                                   \
	"            while True:\n"                                                                 \
	"                b = s.recv(65536)\n"                                                       \
	"                if not b: break\n"                                                         \
	"                d += b\n"                                                                  \
	"        except OSError:\n"                                                                 \
	"            pass\n"                                                                        \
	"        s.close()\n"                                                                       \
	"        OUT[name] = answers(d)\n"                                                          \
	"    except OSError as e:\n"                                                                \
	"        OUT[name] = 'error %s' % e\n"

static const char PY_ONE_REQUEST[] =
	PY_KA
	"A = ('public.test', 8082)\n"
	"H = 'Host: public.test:8082\\r\\n'\n"
	"G1 = 'GET /one HTTP/1.1\\r\\n' + H + '\\r\\n'\n"
	"G2 = 'GET /two HTTP/1.1\\r\\nHost: other.test:8082\\r\\n\\r\\n'\n"
	"P1 = 'GET http://public.test:8082/one HTTP/1.1\\r\\n' + H + '\\r\\n'\n"
	"P2 = 'GET http://other.test:8082/two HTTP/1.1\\r\\nHost: other.test:8082\\r\\n\\r\\n'\n"
	"JOBS = [('pipe', A, G1, G2), ('kept', A, G1, G2, True),\n"
	"        ('chunked', A, 'POST /chunked HTTP/1.1\\r\\n' + H + 'Transfer-Encoding: chunked\\r\\n\\r\\n'\n"
	"         '5;x=1\\r\\nhello\\r\\n6\\r\\n world\\r\\n0\\r\\nX-T: 1\\r\\n\\r\\n', G2),\n"
	"        ('length', A, 'POST /length HTTP/1.1\\r\\n' + H + 'Expect: 100-continue\\r\\n'\n"
	"         'Content-Length: 5\\r\\n\\r\\nhello', G2),\n"
	"        ('smuggle', A, 'POST /s HTTP/1.1\\r\\n' + H + 'Content-Length: 5\\r\\n'\n"
	"         'Transfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n', G2),\n"
	"        ('h2c', A, 'GET /h HTTP/1.1\\r\\n' + H + 'Connection: Upgrade, HTTP2-Settings\\r\\n'\n"
	"         'Upgrade: h2c\\r\\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\\r\\n\\r\\n', ''),\n"
	"        ('fold', A, 'GET /f HTTP/1.1\\r\\n' + H + 'X: 1\\r\\n Host: other.test\\r\\n\\r\\n', ''),\n"
	"        ('badchunk', A, 'POST /bc HTTP/1.1\\r\\n' + H + 'Transfer-Encoding: chunked\\r\\n\\r\\n'\n"
	"         '5\\r\\nhelloXX\\r\\n0\\r\\n\\r\\n', G2),\n"
	"        ('proxy-pipe', PROXY, P1, P2), ('proxy-kept', PROXY, P1, P2, True)]\n"
	"ts = [threading.Thread(target=ka, args=j) for j in JOBS]\n"
	"for t in ts: t.start()\n"
	"for t in ts: t.join()\n"
	"for j in JOBS: print('%s:%s' % (j[0], OUT.get(j[0], 'none')))\n";

/* Entries of a kind for host (NULL: any) refused with a reason holding why. */
static int refusals(const struct run_out *o, const char *kind, const char *host, const char *why)
{
	int n = 0;
	cJSON *c;
	cJSON_ArrayForEach(c, connections(o)) {
		const char *k = str_item(c, "kind"), *h = str_item(c, "host"), *r = str_item(c, "reason");
		n += k && !strcmp(k, kind) && h && (!host || !strcmp(h, host)) && r && strstr(r, why) &&
		     cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "allowed"));
	}
	return n;
}

START_TEST(allowlist_one_request)
{
	PEER_GUARD(_i);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, PY_ONE_REQUEST, ",\"allowedHosts\":[\"http://public.test:8082\"]", &o,
		  &ls, &v);
	const char *out = harness_str(&o, "stdout");
	static const char *const want[][2] = {
		{ "pipe", "public.test:8082/one:0" },
		{ "kept", "public.test:8082/one:0" },
		{ "chunked", "public.test:8082/chunked:11" },
		{ "length", "public.test:8082/length:5" },
		{ "smuggle", "none" },
		{ "h2c", "none" },
		{ "fold", "none" },
		{ "badchunk", "none" },
		{ "proxy-pipe", "public.test:8082/one:0" },
		{ "proxy-kept", "public.test:8082/one:0" },
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const char *r = lines_get(&ls, want[i][0]);
		v_expect(&v, r && !strcmp(r, want[i][1]), "%s: want \"%s\" (one request, nothing "
			 "after it), got \"%s\"", want[i][0], want[i][1], r ? r : "(no line)");
	}
	v_expect(&v, out && !strstr(out, "other.test"), "a second request reached the peer");
	v_expect(&v, has_conn(&o, "tcp", "public.test|" PUB4 "|" PUB6, 8082, true, true),
		 "no allowed transparent entry for public.test:8082 with received > 0");
	int later = refusals(&o, "tcp", "other.test", "second request on one plain-HTTP connection");
	v_expect(&v, later == 4, "%d refused transparent entries for other.test's second request, "
		 "want 4 (pipe, kept, chunked, length)", later);
	later = refusals(&o, "proxy", "other.test", "second request on one proxy connection");
	v_expect(&v, later == 2, "%d refused proxy entries for other.test's second request, want 2",
		 later);
	static const char *const heads[] = { "both Content-Length and Transfer-Encoding",
					     "an Upgrade request", "obs-fold",
					     "body refused: a chunk longer than its size" };
	for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
		v_expect(&v, refusals(&o, "tcp", NULL, heads[i]) == 1,
			 "no refused transparent entry naming \"%s\"", heads[i]);
	net_probe_end(&o, &ls, &v);
}
END_TEST

/* A CONNECT tunnel is judged as the transparent path judges a connection
 * (issue 50): its first bytes must be a TLS ClientHello whose SNI names the
 * CONNECT host (whole or in pieces; none for an IP literal), or one plain
 * HTTP request whose Host names it, allowed as http on that port, relayed
 * alone; anything else is reset and logged, naming what the bytes asked
 * for, and so is a tunnel whose first bytes do not decide in 16 KiB or do
 * not come in 10 s. The peers: the TCP echo on 9000 (what passes comes
 * back) and the kept-alive service on 8082 (it answers every request that
 * reaches it). */
static const char PY_TUNNEL[] =
	PY_KA
	"import time\n"
	"def tls(name, hp, data, pieces=1):\n"
	"    try:\n"
	"        s = socket.create_connection(PROXY, timeout=30)\n"
	"        if not tunnel(s, hp):\n"
	"            OUT[name] = 'CONNECT refused'\n"
	"            return\n"
	"        k = max(1, (len(data) + pieces - 1) // pieces)\n"
	"        for i in range(0, len(data), k):\n"
	"            if i: time.sleep(0.3)\n"
	"            s.sendall(data[i:i + k])\n"
	"        got = b''\n"
	"        while len(got) < len(data) or not data:\n"
	"            b = s.recv(65536)\n"
	"            if not b: break\n"
	"            got += b\n"
	"        OUT[name] = 'echo' if got == data and data else 'closed after %d bytes' % len(got)\n"
	"    except OSError as e:\n"
	"        OUT[name] = 'cut %s' % e.__class__.__name__\n"
	"A = ('public.test', 8082)\n"
	"G1 = 'GET /one HTTP/1.1\\r\\nHost: public.test:8082\\r\\n\\r\\n'\n"
	"G2 = 'GET /two HTTP/1.1\\r\\nHost: other.test:8082\\r\\n\\r\\n'\n"
	"GA = 'GET /api HTTP/1.1\\r\\nHost: api.example.com:8082\\r\\n\\r\\n'\n"
	"JOBS = [(tls, 'tls-ok', 'public.test:9000', hello('public.test')),\n"
	"        (tls, 'tls-pieces', 'public.test:9000', hello('PUBLIC.test.'), 3),\n"
	"        (tls, 'tls-ip', '11.77.0.2:9000', hello(None)),\n"
	"        (tls, 'tls-evil', 'public.test:9000', hello('other.test')),\n"
	"        (tls, 'tls-nosni', 'public.test:9000', hello(None)),\n"
	"        (tls, 'other', 'public.test:9000', b'ping\\n'),\n"
	"        (tls, 'silent', 'public.test:9000', b''),\n"
	"        (tls, 'long-head', 'public.test:8082', b'GET / HTTP/1.1\\r\\nX: ' + b'a' * 17000),\n"
	"        (ka, 'http-pipe', PROXY, G1, G2, False, 'public.test:8082'),\n"
	"        (ka, 'http-kept', PROXY, G1, G2, True, 'public.test:8082'),\n"
	"        (ka, 'http-other', PROXY, G2, '', False, 'public.test:8082'),\n"
	"        (ka, 'http-https-only', PROXY, GA, G2, False, 'api.example.com:8082')]\n"
	"ts = [threading.Thread(target=j[0], args=j[1:]) for j in JOBS]\n"
	"for t in ts: t.start()\n"
	"for t in ts: t.join()\n"
	"for j in JOBS: print('%s:%s' % (j[1], OUT.get(j[1], 'none')))\n";

START_TEST(allowlist_tunnel)
{
	PEER_GUARD(_i);
	char *code = NULL;
	ck_assert_int_ge(asprintf(&code, "%s%s", PY_HELLO, PY_TUNNEL), 0);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"allowedHosts\":[\"https://public.test:*\","
		  "\"http://public.test:8082\",\"https://api.example.com:*\","
		  "\"https://" PUB4 ":9000\"]", &o, &ls, &v);
	const char *out = harness_str(&o, "stdout");
	static const char *const want[][2] = {
		{ "tls-ok", "echo" },
		{ "tls-pieces", "echo" },
		{ "tls-ip", "echo" },
		{ "http-pipe", "public.test:8082/one:0" },
		{ "http-kept", "public.test:8082/one:0" },
		{ "http-other", "none" },
		{ "http-https-only", "none" },
	};
	v_exact(&v, &ls, want, sizeof want / sizeof want[0]);
	static const char *const cut[] = { "tls-evil", "tls-nosni", "other", "silent", "long-head" };
	for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
		const char *r = lines_get(&ls, cut[i]);
		v_expect(&v, r && (!strncmp(r, "cut Connection", 14) ||
				   !strcmp(r, "closed after 0 bytes")),
			 "%s: want the tunnel cut (reset or closed) with nothing relayed, got \"%s\"", cut[i],
			 r ? r : "(no line)");
	}
	v_expect(&v, out && !strstr(out, "other.test") && !strstr(out, "/two"),
		 "a request for other.test reached the peer");
	static const struct {
		const char *host, *why;
		int n;
	} logged[] = {
		{ "other.test", "the TLS SNI names other.test, not the CONNECT host public.test", 1 },
		{ "public.test", "TLS without a server name (SNI)", 1 },
		{ "public.test", "neither TLS nor HTTP", 1 },
		{ "public.test", "no TLS ClientHello or HTTP request in time", 1 },
		{ "public.test", "HTTP request refused: no complete request head in 16 KiB", 1 },
		{ "other.test", "the HTTP Host header names other.test, not the CONNECT host "
				"public.test", 1 },
		{ "api.example.com", "http://api.example.com:8082 is not in allowedHosts", 1 },
		{ "other.test", "second request on one proxy connection", 2 },
	};
	for (size_t i = 0; i < sizeof logged / sizeof logged[0]; i++) {
		int n = refusals(&o, "proxy", logged[i].host, logged[i].why);
		v_expect(&v, n == logged[i].n, "%d refused proxy entries for %s saying \"%s\", want %d",
			 n, logged[i].host, logged[i].why, logged[i].n);
	}
	v_expect(&v, has_conn(&o, "proxy", "public.test", 9000, true, true),
		 "no allowed proxy entry for public.test:9000 with received > 0");
	v_expect(&v, has_conn(&o, "proxy", PUB4, 9000, true, true),
		 "no allowed proxy entry for " PUB4 ":9000 with received > 0");
	net_probe_end(&o, &ls, &v);
	free(code);
}
END_TEST

/* Trailers after a chunked body are header fields, judged as a head's are
 * (issue 50): a request line there is refused, on the transparent path and
 * through a CONNECT tunnel, the connection reset before the body reaches
 * the peer; a real trailer passes. */
static const char PY_TRAILERS[] =
	PY_KA
	"A = ('public.test', 8082)\n"
	"HEAD = 'POST /t HTTP/1.1\\r\\nHost: public.test:8082\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n'\n"
	"BAD = HEAD + '5\\r\\nhello\\r\\n0\\r\\nGET /b HTTP/1.1\\r\\nHost: other.test:8082\\r\\n\\r\\n'\n"
	"GOOD = HEAD + '5\\r\\nhello\\r\\n0\\r\\nX-Checksum: 1\\r\\n\\r\\n'\n"
	"JOBS = [('trailer', A, BAD, ''), ('trailer-tunnel', PROXY, BAD, '', False, 'public.test:8082'),\n"
	"        ('trailer-ok', A, GOOD, ''), ('trailer-ok-tunnel', PROXY, GOOD, '', False, 'public.test:8082')]\n"
	"ts = [threading.Thread(target=ka, args=j) for j in JOBS]\n"
	"for t in ts: t.start()\n"
	"for t in ts: t.join()\n"
	"for j in JOBS: print('%s:%s' % (j[0], OUT.get(j[0], 'none')))\n";

START_TEST(allowlist_trailers)
{
	PEER_GUARD(_i);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, PY_TRAILERS, ",\"allowedHosts\":[\"http://public.test:8082\","
		  "\"https://public.test:8082\"]", &o, &ls, &v);
	static const char *const want[][2] = {
		{ "trailer", "none" },
		{ "trailer-tunnel", "none" },
		{ "trailer-ok", "public.test:8082/t:5" },
		{ "trailer-ok-tunnel", "public.test:8082/t:5" },
	};
	v_exact(&v, &ls, want, sizeof want / sizeof want[0]);
	static const char why[] = "HTTP request body refused: a trailer line that is not a header field";
	v_expect(&v, refusals(&o, "tcp", NULL, why) == 1, "no refused transparent entry saying \"%s\"",
		 why);
	v_expect(&v, refusals(&o, "proxy", "public.test", why) == 1,
		 "no refused proxy entry for public.test saying \"%s\"", why);
	net_probe_end(&o, &ls, &v);
}
END_TEST

/* No entries: no egress at all. */
START_TEST(allowlist_empty)
{
	PEER_GUARD(_i);
	char *extra = NULL;
	ck_assert_int_ge(asprintf(&extra, "%sget('any', 'http://public.test:8080/')\n", PY_PROXY), 0);
	char *code = probe_code(false, extra);
	struct run_out o;
	struct lines ls;
	struct verdict v;
	net_probe(__func__, _i, code, ",\"allowedHosts\":[]", &o, &ls, &v);
	check_sweep(&v, &ls, WALL_NONE);
	v_line(&v, &ls, "any", "403:");
	v_expect(&v, !strcmp(network_mode(&o), "allowlist"), "network.mode %s, want allowlist",
		 network_mode(&o));
	net_probe_end(&o, &ls, &v);
	free(code);
	free(extra);
}
END_TEST

/* Spin's Python SDK `send` (runtime/python/spin_sdk/http.py) through the real
 * egress: an allowed host answers, SDK 3's sync and SDK 4's awaited spelling;
 * another host, by plain HTTP and by CONNECT, raises Err(HttpRequestDenied);
 * with allowedHosts [] every host does (tests/compat/spin/ has the rest). */
#define PY_SPIN_SEND                                                                         \
	"import asyncio\n"                                                                   \
	"from componentize_py_types import Err\n"                                            \
	"from spin_sdk.http import Request, send\n"                                          \
	"def show(tag, url, wait=False):\n"                                                  \
	"    r = Request('GET', url, {}, None)\n"                                            \
	"    async def a():\n"                                                               \
	"        return await send(r)\n"                                                     \
	"    try:\n"                                                                         \
	"        resp = asyncio.run(a()) if wait else send(r)\n"                             \
	"        print(f'{tag}:{resp.status}:{resp.body.decode()}', flush=True)\n"           \
	"    except Err as e:\n"                                                             \
	"        print(f'{tag}:err:{type(e.value).__name__}', flush=True)\n"

START_TEST(allowlist_spin_send)
{
	PEER_GUARD(_i);
	const char *code = PY_SPIN_SEND
		"show('sync', 'http://public.test:8080/x')\n"
		"show('await', 'http://public.test:8080/y', True)\n"
		"show('other', 'http://other.test:8080/')\n"
		"show('other-tls', 'https://other.test:8080/')\n";
	const char *const args[] = { "exec", "--runtime", harness_runtime_dir(), NULL };
	for (int empty = 0; empty < 2; empty++) {
		char *req = net_request(code, empty ? ",\"sandboxId\":\"spin-send\",\"allowedHosts\":[]"
						: ",\"sandboxId\":\"spin-send\","
						  "\"allowedHosts\":[\"http://public.test:8080\"]");
		struct run_out o;
		memset(&o, 0, sizeof o);
		struct harness_proc p;
		harness_start(_i, args, req, strlen(req), H_ENV, enter_h, NULL, &p);
		harness_finish(&p, &o);
		ck_assert_msg(o.json, "moat printed no JSON (status %d): %s / %s", o.status, o.out,
			      o.err);
		struct lines ls;
		lines_parse(harness_str(&o, "stdout"), &ls);
		struct verdict v;
		v_init(&v, __func__, _i);
		if (!empty) {
			v_line(&v, &ls, "sync", "200:public-ok host=public.test:8080 path=/x");
			v_line(&v, &ls, "await", "200:public-ok host=public.test:8080 path=/y");
		} else {
			v_line(&v, &ls, "sync", "err:ErrorCode_HttpRequestDenied");
			v_line(&v, &ls, "await", "err:ErrorCode_HttpRequestDenied");
		}
		v_line(&v, &ls, "other", "err:ErrorCode_HttpRequestDenied");
		v_line(&v, &ls, "other-tls", "err:ErrorCode_HttpRequestDenied");
		v_done(&v, &o);
		lines_free(&ls);
		harness_free(&o);
		free(req);
	}
}
END_TEST

/* ---- request rules (no topology needed) ---- */

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

void network_allowlist_tests(TCase *tc)
{
	tcase_add_loop_test(tc, allowlist_transparent, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_proxy, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_one_request, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_tunnel, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_trailers, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_empty, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, allowlist_spin_send, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, refused_requests, MODE_ROOT, MODE_ROOTLESS + 1);
}
