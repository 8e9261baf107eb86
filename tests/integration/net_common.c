/* The network suite's shared fixture (net_common.h); the tests are in
 * test_network*.c.
 *
 * Network modes against a wall, with real traffic and nothing on the real
 * machine touched. The suite builds its own "host": a network namespace H
 * (ip netns add), and runs moat inside it (the forked child joins H before
 * exec: setns as root, then drops to 65534 for the rootless mode). Around H,
 * all made and removed here, names unique by pid:
 *
 *   H    lo: the "host-secret" service (HTTP and UDP echo, port 8080) on
 *        127.0.0.1 and ::1, and the same on every other address of H:
 *        10.77.0.1 and 10.78.0.1 (lan0), 10.79.0.1 and fd00:79::1 (meta0),
 *        11.77.0.1 and 2a01:4f8:77::1 (pub0) and each veth's fe80::
 *        link-local. A DNS server on 127.0.0.1:53 and [::1]:53 answering
 *        from the suite's hosts table (what H's resolv.conf names).
 *        Default routes via the public peer.
 *   LAN  10.77.0.2 on the other end of lan0: an RFC1918 peer ("lan-secret").
 *   META 169.254.169.254 and fd00:ec2::254, port 80 and 8080, answering
 *        "CREDENTIALS", behind meta0 (10.79.0.2, fd00:79::2). H reaches them
 *        two ways: a plain route in the main table (root-mode moat runs as
 *        root: H is ours, so a plain route is fine) and, for the sandbox user,
 *        a policy route: `ip rule add uidrange 65534-65534 lookup 77` with the
 *        same routes in table 77 (what a cloud host that exposes metadata to
 *        unprivileged users looks like; rootless moat and its helpers run as
 *        65534).
 *   PUB  the public peer, public-looking (not documentation, not
 *        special-purpose) addresses 11.77.0.2 and 2a01:4f8:77::2: "public-ok"
 *        on 8080 (HTTP + UDP echo) and 8081, a TCP echo on 9000, a kept-alive
 *        HTTP service on 8082 that answers every request it gets.
 *
 * Names: moat's mount namespace gets a private /etc/hosts with the same
 * table (public.test, meta.test, lan.test, hostaddr.test, hostlo.test, ...,
 * hostnat64.test and host6to4.test: H's public IPv4 in NAT64 and 6to4 form)
 * plus hostsonly.test (a public address, in /etc/hosts only: DNS does not
 * know it), a private /etc/resolv.conf naming H's DNS server, and a sysfs
 * of H.
 *
 * The probe (PY_LIB + PY_SWEEP, run inside the sandbox) tries every target
 * over TCP and UDP, IPv4 and IPv6, plainly, with SO_BINDTODEVICE and with
 * IP_UNICAST_IF/IPV6_UNICAST_IF on every interface the sandbox has, and by
 * name through the sandbox's resolver; one line per attempt, "name:ok
 * <reply>" or "name:fail <error>". Before any test the same probe runs in H
 * itself, as root and as 65534, and every service must answer: a later
 * "fail" means the sandbox stopped it, not that the service was down.
 *
 * Every check of a test is evaluated and all failures are reported together
 * (also on stderr), so one run lists every hole. The addresses below are
 * repeated in the python strings. Needs root to build the topology; each
 * test runs as root and rootless. */
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

#include "harness.h"
#include "net_common.h"

static const char *const NS_TAG[NS_COUNT] = { "H", "L", "M", "P" };

bool net_ready;
/* why the topology is not there, when it is not: every test says it */
char setup_why[256] = "the topology was not built";
char ns_name[NS_COUNT][32];
char net_dir[64], hosts_path[96], resolv_path[96], server_path[96], dns_path[96],
	table_path[96];
static char ll_spec[512]; /* "lan0=fe80::..,meta0=..,pub0=.." : H's link-locals */
ino_t h_ino;
pid_t servers[8];
int nservers;

/* The hosts table: moat's /etc/hosts (with HOSTS_ONLY) and H's DNS server. */
const char HOSTS[] =
	"127.0.0.1 localhost\n"
	"::1 localhost\n"
	PUB4 " public.test mixed.test api.example.com sub.example.com example.com "
	"evil-example.com other.test\n"
	PUB6 " public.test\n"
	H_SECOND " mixed.test hostaddr.test self.test\n"
	META4 " meta.test\n"
	META6 " meta.test\n"
	LAN_PEER " lan.test\n"
	"127.0.0.1 hostlo.test local.test\n"
	"::1 hostlo.test\n"
	H_PUB4 " hostpub.test\n"
	H_PUB6 " hostpub.test\n"
	"10.0.0.1 private.test\n"
	"64:ff9b::b4d:1 hostnat64.test\n"	/* H_PUB4 as NAT64 */
	"2002:b4d:1::1 host6to4.test\n";	/* H_PUB4 as 6to4 */

/* Only in moat's /etc/hosts, not in H's DNS: never resolved for a sandbox. */
static const char HOSTS_ONLY[] = PUB4 " hostsonly.test\n";

/* ---- python: services ---- */

/* server.py TAG ADDR,... PORT,... [ECHO_PORT [KA_PORT]]: on every address and
 * port an HTTP responder ("TAG host=.. path=.. via=..") and a UDP echo ("TAG
 * udp via=.."), plus a TCP echo on ECHO_PORT and on KA_PORT a kept-alive HTTP
 * service like a shared front end that pipelines: it answers every request
 * on a connection ("TAG host=.. path=.. body=<bytes> n=<nth>"), Connection:
 * close or not, until the client closes or is idle 2 s. "ready" once all are
 * bound. */
static const char SERVER_PY[] =
	"import socket, sys, threading\n"
	"tag, addrs, ports = sys.argv[1], sys.argv[2].split(','), [int(p) for p in sys.argv[3].split(',')]\n"
	"echo = int(sys.argv[4]) if len(sys.argv) > 4 else 0\n"
	"kaport = int(sys.argv[5]) if len(sys.argv) > 5 else 0\n"
	"def sa(a, p):\n"
	"    if '%' in a:\n"
	"        h, i = a.split('%')\n"
	"        return socket.AF_INET6, (h, p, 0, socket.if_nametoindex(i))\n"
	"    return (socket.AF_INET6, (a, p, 0, 0)) if ':' in a else (socket.AF_INET, (a, p))\n"
	"def http(c, via):\n"
	"    try:\n"
	"        c.settimeout(3)\n"
	"        d = b''\n"
	"        while b'\\r\\n\\r\\n' not in d and len(d) < 65536:\n"
	"            b = c.recv(4096)\n"
	"            if not b: break\n"
	"            d += b\n"
	"        lines = d.decode('latin1').split('\\r\\n')\n"
	"        path = lines[0].split(' ')[1] if lines[0].count(' ') >= 2 else '?'\n"
	"        host = ''\n"
	"        for l in lines[1:]:\n"
	"            if l.lower().startswith('host:'): host = l[5:].strip()\n"
	"        b = ('%s host=%s path=%s via=%s\\n' % (tag, host, path, via)).encode()\n"
	"        c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % len(b) + b)\n"
	"    except OSError:\n"
	"        pass\n"
	"    finally:\n"
	"        c.close()\n"
	"def ka(c, via):\n"
	"    d, n = b'', 0\n"
	"    def need(k):\n"
	"        nonlocal d\n"
	"        while len(d) < k:\n"
	"            b = c.recv(65536)\n"
	"            if not b: raise OSError('closed')\n"
	"            d += b\n"
	"    def line():\n"
	"        nonlocal d\n"
	"        while b'\\r\\n' not in d: need(len(d) + 1)\n"
	"        l, _, d = d.partition(b'\\r\\n')\n"
	"        return l\n"
	"    try:\n"
	"        c.settimeout(2)\n"
	"        while True:\n"
	"            while b'\\r\\n\\r\\n' not in d: need(len(d) + 1)\n"
	"            head, _, d = d.partition(b'\\r\\n\\r\\n')\n"
	"            lines = head.decode('latin1').split('\\r\\n')\n"
	"            path = lines[0].split(' ')[1] if lines[0].count(' ') >= 2 else '?'\n"
	"            host, cl, chunked, body = '', 0, False, 0\n"
	"            for l in lines[1:]:\n"
	"                k, _, v = l.partition(':')\n"
	"                k, v = k.strip().lower(), v.strip()\n"
	"                if k == 'host': host = v\n"
	"                if k == 'content-length': cl = int(v)\n"
	"                if k == 'transfer-encoding': chunked = True\n"
	"            if chunked:\n"
	"                while True:\n"
	"                    k = int(line().split(b';')[0], 16)\n"
	"                    if k == 0: break\n"
	"                    need(k + 2)\n"
	"                    d = d[k + 2:]\n"
	"                    body += k\n"
	"                while line(): pass\n"
	"            else:\n"
	"                need(cl)\n"
	"                d, body = d[cl:], cl\n"
	"            n += 1\n"
	"            b = ('%s host=%s path=%s body=%d n=%d\\n' % (tag, host, path, body, n)).encode()\n"
	"            c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(b) + b)\n"
	"    except (OSError, ValueError):\n"
	"        pass\n"
	"    finally:\n"
	"        c.close()\n"
	"def echo_conn(c):\n"
	"    try:\n"
	"        while True:\n"
	"            b = c.recv(65536)\n"
	"            if not b: break\n"
	"            c.sendall(b)\n"
	"    except OSError:\n"
	"        pass\n"
	"    finally:\n"
	"        c.close()\n"
	"def tcp(a, p, fn):\n"
	"    f, addr = sa(a, p)\n"
	"    s = socket.socket(f, socket.SOCK_STREAM)\n"
	"    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	"    if f == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
	"    s.bind(addr)\n"
	"    s.listen(1024)\n"
	"    via = '%s:%d' % (a, p)\n"
	"    def loop():\n"
	"        while True:\n"
	"            c, _ = s.accept()\n"
	"            threading.Thread(target=fn, args=(c, via) if fn in (http, ka) else (c,), daemon=True).start()\n"
	"    threading.Thread(target=loop, daemon=True).start()\n"
	"def udp(a, p):\n"
	"    f, addr = sa(a, p)\n"
	"    s = socket.socket(f, socket.SOCK_DGRAM)\n"
	"    if f == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
	"    s.bind(addr)\n"
	"    via = '%s:%d' % (a, p)\n"
	"    def loop():\n"
	"        while True:\n"
	"            d, peer = s.recvfrom(65536)\n"
	"            s.sendto(('%s udp via=%s\\n' % (tag, via)).encode(), peer)\n"
	"    threading.Thread(target=loop, daemon=True).start()\n"
	"for a in addrs:\n"
	"    for p in ports:\n"
	"        tcp(a, p, http)\n"
	"        udp(a, p)\n"
	"    if echo:\n"
	"        tcp(a, echo, echo_conn)\n"
	"    if kaport:\n"
	"        tcp(a, kaport, ka)\n"
	"print('ready', flush=True)\n"
	"threading.Event().wait()\n";

/* dns.py HOSTS: A and AAAA answers from a hosts table on 127.0.0.1:53 and [::1]:53
 * (NXDOMAIN for other names). */
static const char DNS_PY[] =
	"import socket, struct, sys, threading\n"
	"table = {}\n"
	"for l in open(sys.argv[1]):\n"
	"    f = l.split('#')[0].split()\n"
	"    for n in f[1:]:\n"
	"        table.setdefault(n.lower().rstrip('.'), []).append(f[0])\n"
	PY_DNS_ANSWER
	"def serve(f, a):\n"
	"    s = socket.socket(f, socket.SOCK_DGRAM)\n"
	"    s.bind((a, 53))\n"
	"    while True:\n"
	"        q, peer = s.recvfrom(4096)\n"
	"        r = answer(q)\n"
	"        if r: s.sendto(r, peer)\n"
	"for f, a in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
	"    threading.Thread(target=serve, args=(f, a), daemon=True).start()\n"
	"print('ready', flush=True)\n"
	"threading.Event().wait()\n";

/* ---- python: the probe (run in the sandbox, and in H to verify the services) ---- */

/* attempt(proto, addr, port, host, bind, uif, scope, data) -> "ok <reply>" | "fail <error>" */
const char PY_LIB[] =
	"import socket, struct, sys, os\n"
	"from concurrent.futures import ThreadPoolExecutor\n"
	"T = 1.5\n"
	"P = 8080\n"
	"def ifaces():\n"
	"    try:\n"
	"        return [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
	"    except OSError:\n"
	"        return [n for _, n in socket.if_nameindex()]\n"
	"def attempt(proto, addr, port, host, bind=None, uif=None, scope=None, data=None):\n"
	"    v6 = ':' in addr\n"
	"    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET,\n"
	"                      socket.SOCK_STREAM if proto == 'tcp' else socket.SOCK_DGRAM)\n"
	"    try:\n"
	"        s.settimeout(T)\n"
	"        if bind:\n"
	"            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, bind.encode())\n"
	"        if uif:\n"
	"            s.setsockopt(socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP, 76 if v6 else 50,\n"
	"                         struct.pack('!I', socket.if_nametoindex(uif)))\n"
	"        s.connect((addr, port, 0, socket.if_nametoindex(scope) if scope else 0) if v6 else (addr, port))\n"
	"        if proto == 'tcp':\n"
	"            s.sendall(data or b'GET /probe HTTP/1.0\\r\\nHost: ' + host.encode() + b'\\r\\n\\r\\n')\n"
	"            d = b''\n"
	"            while len(d) < 65536:\n"
	"                b = s.recv(4096)\n"
	"                if not b or data: d += b; break\n"
	"                d += b\n"
	"            if not data:\n"
	"                head, _, d = d.partition(b'\\r\\n\\r\\n')\n"
	"                st = head.split(b' ')[1] if head.count(b' ') >= 1 else b'?'\n"
	"                if d.strip() and st != b'200':\n"
	"                    return 'fail http %s %s' % (st.decode('latin1'), d.decode('latin1').strip()[:80])\n"
	"        else:\n"
	"            s.send(data or b'probe')\n"
	"            d = s.recv(4096)\n"
	"        if not d.strip():\n"
	"            return 'fail closed without a reply'\n"
	"        return 'ok ' + d.decode('latin1').strip().replace('\\n', ' ')\n"
	"    except OSError as e:\n"
	"        return 'fail %s' % (e,)\n"
	"    finally:\n"
	"        s.close()\n";

/* The sweep: every target x protocol x variant, and by name; needs LLSPEC
 * and VERIFY (plain attempts only, plus the echo service) defined before it. */
static const char PY_SWEEP[] =
	"LL = dict(x.split('=', 1) for x in LLSPEC.split(',') if x)\n"
	"TARGETS = [('meta4', '169.254.169.254', 80), ('meta6', 'fd00:ec2::254', 80),\n"
	"           ('hostaddr', '10.78.0.1', P), ('hostlan', '10.77.0.1', P), ('hostmeta4', '10.79.0.1', P),\n"
	"           ('hostmeta6', 'fd00:79::1', P), ('hostlo4', '127.0.0.1', P), ('hostlo6', '::1', P),\n"
	"           ('hostpub4', '11.77.0.1', P), ('hostpub6', '2a01:4f8:77::1', P),\n"
	"           ('lan', '10.77.0.2', P), ('public4', '11.77.0.2', P), ('public6', '2a01:4f8:77::2', P)]\n"
	"TARGETS += [('hostll-' + k, v, P) for k, v in sorted(LL.items())]\n"
	"NAMES = ['public.test', 'mixed.test', 'meta.test', 'lan.test', 'hostaddr.test', 'hostlo.test',\n"
	"         'hostpub.test', 'self.test']\n"
	"IFS = ifaces()\n"
	"def gateways():\n"
	"    g = []\n"
	"    try:\n"
	"        for l in open('/proc/net/route').read().splitlines()[1:]:\n"
	"            f = l.split()\n"
	"            if f[1] == '00000000' and f[2] != '00000000':\n"
	"                g.append(('gw4', socket.inet_ntoa(bytes.fromhex(f[2])[::-1]), P, None))\n"
	"        for l in open('/proc/net/ipv6_route').read().splitlines():\n"
	"            f = l.split()\n"
	"            if f[0] == '0' * 32 and f[1] == '00' and f[4] != '0' * 32:\n"
	"                a = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(f[4]))\n"
	"                g.append(('gw6', a, P, f[9]))\n"
	"    except OSError:\n"
	"        pass\n"
	"    return g\n"
	"def hostport(a, p):\n"
	"    return '[%s]:%d' % (a, p) if ':' in a else '%s:%d' % (a, p)\n"
	"jobs = []\n"
	"for proto in ('tcp', 'udp'):\n"
	"    for name, addr, port in TARGETS + [g[:3] for g in gateways()]:\n"
	"        h = hostport(addr, port)\n"
	"        if addr.startswith('fe80:'):\n"
	"            for i in IFS:\n"
	"                if VERIFY and i != name.split('-')[-1]:\n"
	"                    continue\n"
	"                jobs.append(('%s-%s-scope=%s' % (proto, name, i), (proto, addr, port, h, None, None, i)))\n"
	"                if not VERIFY:\n"
	"                    jobs.append(('%s-%s-scope=%s+bind=%s' % (proto, name, i, i),\n"
	"                                 (proto, addr, port, h, i, None, i)))\n"
	"            continue\n"
	"        jobs.append(('%s-%s-plain' % (proto, name), (proto, addr, port, h)))\n"
	"        if VERIFY:\n"
	"            continue\n"
	"        for i in IFS:\n"
	"            jobs.append(('%s-%s-bind=%s' % (proto, name, i), (proto, addr, port, h, i)))\n"
	"            jobs.append(('%s-%s-uif=%s' % (proto, name, i), (proto, addr, port, h, None, i)))\n"
	"if VERIFY:\n"
	"    jobs.append(('echo-public4', ('tcp', '11.77.0.2', 9000, '', None, None, None, b'echo\\n')))\n"
	"    jobs.append(('echo-public6', ('tcp', '2a01:4f8:77::2', 9000, '', None, None, None, b'echo\\n')))\n"
	"def resolve(n):\n"
	"    try:\n"
	"        r = socket.getaddrinfo(n, P, proto=socket.IPPROTO_TCP)\n"
	"        return sorted(set(x[4][0] for x in r))\n"
	"    except OSError as e:\n"
	"        return e\n"
	"lines = []\n"
	"with ThreadPoolExecutor(48) as ex:\n"
	"    for n, r in zip(NAMES, ex.map(resolve, NAMES)):\n"
	"        if isinstance(r, list):\n"
	"            lines.append('dns-%s:ok %s' % (n, ','.join(r)))\n"
	"            for a in r:\n"
	"                for proto in ('tcp', 'udp'):\n"
	"                    jobs.append(('%s-name-%s-%s' % (proto, n, a.replace(':', '-')),\n"
	"                                 (proto, a, P, '%s:%d' % (n, P))))\n"
	"        else:\n"
	"            lines.append('dns-%s:fail %s' % (n, r))\n"
	"    lines += ['%s:%s' % (j[0], r) for j, r in zip(jobs, ex.map(lambda j: attempt(*j[1]), jobs))]\n"
	"print('ifaces:%s' % ','.join(IFS))\n"
	"for l in sorted(lines):\n"
	"    print(l)\n";

/* The explicit proxy at 127.0.0.1:3128: get(name, url[, host]), connect(name, host:port[, then]). */
const char PY_PROXY[] =
	"PROXY = ('127.0.0.1', 3128)\n"
	"def talk(raw, then=None):\n"
	"    s = socket.create_connection(PROXY, timeout=15)\n"
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

/* hello(sni): a real ClientHello (Python's ssl, TLS 1.2-1.3), SNI sni or
 * none; the first flight of a TLS client, as moat sees it. */
const char PY_HELLO[] =
	"import ssl\n"
	"def hello(sni):\n"
	"    ctx = ssl.create_default_context()\n"
	"    if not sni: ctx.check_hostname = False\n"
	"    o = ssl.MemoryBIO()\n"
	"    t = ctx.wrap_bio(ssl.MemoryBIO(), o, server_hostname=sni)\n"
	"    try: t.do_handshake()\n"
	"    except ssl.SSLWantReadError: pass\n"
	"    return o.read()\n";

/* hc(name, host, port[, Host header]): a plain http.client GET (no proxy). */
const char PY_HTTP_CLIENT[] =
	"import http.client\n"
	"def hc(name, host, port, hosthdr=None):\n"
	"    try:\n"
	"        c = http.client.HTTPConnection(host, port, timeout=5)\n"
	"        c.request('GET', '/hc', headers={'Host': hosthdr} if hosthdr else {})\n"
	"        r = c.getresponse()\n"
	"        b = r.read().decode('latin1').strip()\n"
	"        c.close()\n"
	"        print('%s:%s %d %s' % (name, 'ok' if r.status == 200 and b else 'fail', r.status, b))\n"
	"    except Exception as e:\n"
	"        print('%s:fail %s' % (name, e))\n";

/* 256 connections to the public peer's echo, all open at once, 4 KiB each. */
const char PY_PARALLEL[] =
	"import asyncio\n"
	"N, HOST = 256, '11.77.0.2'\n"
	"async def opener(i):\n"
	"    return await asyncio.wait_for(asyncio.open_connection(HOST, 9000), 30)\n"
	"async def talk(i, rw):\n"
	"    r, w = rw\n"
	"    data = bytes([65 + i % 26]) * 4096\n"
	"    w.write(data)\n"
	"    await w.drain()\n"
	"    got = await asyncio.wait_for(r.readexactly(len(data)), 30)\n"
	"    return got == data\n"
	"async def main():\n"
	"    conns = await asyncio.gather(*(opener(i) for i in range(N)), return_exceptions=True)\n"
	"    live = [(i, c) for i, c in enumerate(conns) if not isinstance(c, BaseException)]\n"
	"    res = await asyncio.gather(*(talk(i, c) for i, c in live), return_exceptions=True)\n"
	"    for _, (r, w) in live:\n"
	"        w.close()\n"
	"    good = sum(1 for x in res if x is True)\n"
	"    errs = sorted(set(repr(x) for x in list(conns) + list(res) if isinstance(x, BaseException)))\n"
	"    print('parallel:%s %d/%d open %d %s' % ('ok' if good == N else 'fail', good, N, len(live), errs[:3]))\n"
	"asyncio.run(main())\n";

/* ---- the program's lines: "name:result" ---- */


void lines_parse(const char *text, struct lines *ls)
{
	memset(ls, 0, sizeof *ls);
	ls->buf = strdup(text ? text : "");
	size_t cap = 1;
	for (const char *p = ls->buf; *p; p++)
		cap += *p == '\n';
	ls->name = calloc(cap, sizeof *ls->name);
	ls->res = calloc(cap, sizeof *ls->res);
	ck_assert(ls->buf && ls->name && ls->res);
	char *save = NULL;
	for (char *l = strtok_r(ls->buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *c = strchr(l, ':');
		if (!c)
			continue;
		*c = '\0';
		ls->name[ls->n] = l;
		ls->res[ls->n++] = c + 1;
	}
}

const char *lines_get(const struct lines *ls, const char *name)
{
	for (size_t i = 0; i < ls->n; i++)
		if (!strcmp(ls->name[i], name))
			return ls->res[i];
	return NULL;
}

void lines_free(struct lines *ls)
{
	free(ls->buf);
	free(ls->name);
	free(ls->res);
}

/* ---- processes and the topology ---- */

int run_argv(const char *const *argv)
{
	pid_t p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
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


void net_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
	chmod(path, 0644);
}

/* In a forked child: joins the named network namespace. */
static int enter_netns(const char *name)
{
	char path[96];
	snprintf(path, sizeof path, "/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		perror("network suite: setns");
		return -1;
	}
	close(fd);
	return 0;
}

/* In a forked child, in H: a mount namespace of its own with the suite's
 * /etc/hosts and /etc/resolv.conf and H's sysfs (what `ip netns exec` does). */
static int enter_h_files(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(hosts_path, "/etc/hosts", NULL, MS_BIND, NULL) < 0 ||
	    mount(resolv_path, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0) {
		perror("network suite: private /etc/hosts and /etc/resolv.conf");
		return -1;
	}
	if (umount2("/sys", MNT_DETACH) == 0)
		mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	return 0;
}

static int drop_to_rootless(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0 ||
	    setresuid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID) < 0) {
		perror("network suite: drop to 65534");
		return -1;
	}
	return 0;
}

/* Writes /proc/sys/<path> = value inside a namespace (sysctl files answer
 * for the netns of the process that opens them). */
static int ns_sysctl(const char *ns, const char *path, const char *value)
{
	pid_t p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		if (enter_netns(ns) < 0)
			_exit(1);
		char file[160];
		snprintf(file, sizeof file, "/proc/sys/%s", path);
		int fd = open(file, O_WRONLY | O_CLOEXEC);
		_exit(fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : 1);
	}
	int st;
	waitpid(p, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Reads fd until EOF, until `until` appears (when given) or until the
 * deadline; returns what was read (malloc'd). */
char *read_until(int fd, const char *until, long timeout_ms)
{
	size_t len = 0;
	char *buf = calloc(1, 1);
	long end = harness_now_ms() + timeout_ms;
	while (buf && harness_now_ms() < end && !(until && strstr(buf, until))) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 200) <= 0)
			continue;
		char tmp[4096];
		ssize_t n = read(fd, tmp, sizeof tmp);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		char *nb = realloc(buf, len + (size_t)n + 1);
		if (!nb)
			break;
		buf = nb;
		memcpy(buf + len, tmp, (size_t)n);
		len += (size_t)n;
		buf[len] = '\0';
	}
	return buf;
}

/* A python service in namespace ns; waits for its "ready". */
bool start_server(int ns, const char *script, const char *const *args)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0 || nservers >= (int)(sizeof servers / sizeof servers[0]))
		return false;
	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		char log[128];
		snprintf(log, sizeof log, "%s/%s-%d.log", net_dir, NS_TAG[ns], nservers);
		int nul = open("/dev/null", O_RDONLY), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (nul < 0 || lf < 0 || dup2(nul, 0) < 0 || dup2(p[1], 1) < 0 || dup2(lf, 2) < 0)
			_exit(126);
		if (enter_netns(ns_name[ns]) < 0)
			_exit(126);
		const char *argv[12] = { PY, script };
		for (int i = 0; args[i] && i < 9; i++)
			argv[i + 2] = args[i];
		execv(PY, (char *const *)argv);
		_exit(127);
	}
	servers[nservers++] = pid;
	close(p[1]);
	char *out = read_until(p[0], "ready\n", harness_scale_ms(15000));
	close(p[0]);
	bool ok = out && strstr(out, "ready\n");
	if (!ok)
		fprintf(stderr, "note: network suite: a service in %s did not start (log: %s/%s-%d.log)\n",
			ns_name[ns], net_dir, NS_TAG[ns], nservers - 1);
	free(out);
	return ok;
}

/* Runs python code in H with the suite's files, as root or as 65534;
 * returns its stdout (malloc'd). */
static char *python_in_h(bool rootless, const char *code)
{
	char path[128];
	snprintf(path, sizeof path, "%s/verify-%d.py", net_dir, (int)rootless);
	net_write_file(path, code);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return NULL;
	pid_t pid = fork();
	if (pid < 0)
		return NULL;
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(p[1], 1) < 0 || dup2(nul, 2) < 0)
			_exit(126);
		if (enter_netns(ns_name[NS_H]) < 0 || enter_h_files() < 0 ||
		    (rootless && drop_to_rootless() < 0))
			_exit(126);
		execl(PY, PY, path, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char *out = read_until(p[0], NULL, harness_scale_ms(60000));
	close(p[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	unlink(path);
	return out;
}

/* SIGKILL to every process in the suite's namespace name except the
 * suite's own services when keep_services (what a failed teardown test left
 * behind, e.g. an orphaned pasta holding the sandbox's namespace); the
 * namespaces are the suite's own, so is everything in them. */
void kill_ns_procs(const char *name, bool keep_services)
{
	char path[96];
	struct stat st;
	snprintf(path, sizeof path, "/run/netns/%s", name);
	if (stat(path, &st) < 0)
		return;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		pid_t pid = (pid_t)atoi(e->d_name);
		if (pid <= 0 || pid == getpid())
			continue;
		char p[64];
		struct stat ns;
		snprintf(p, sizeof p, "/proc/%d/ns/net", (int)pid);
		if (stat(p, &ns) < 0 || ns.st_ino != st.st_ino || ns.st_dev != st.st_dev)
			continue;
		bool service = false;
		for (int i = 0; i < nservers; i++)
			service |= servers[i] == pid;
		if (!(keep_services && service))
			kill(pid, SIGKILL);
	}
	if (d)
		closedir(d);
}

void topology_teardown(void)
{
	for (int i = 0; i < nservers; i++) {
		kill(servers[i], SIGKILL);
		waitpid(servers[i], NULL, 0);
	}
	nservers = 0;
	for (int i = NS_COUNT - 1; i >= 0; i--)
		if (ns_name[i][0]) {
			kill_ns_procs(ns_name[i], false);
			RUN("ip", "netns", "del", ns_name[i]); /* its veth ends go with it */
			ns_name[i][0] = '\0';
		}
	if (net_dir[0]) {
		DIR *d = opendir(net_dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char p[400];
			if (e->d_name[0] == '.')
				continue;
			snprintf(p, sizeof p, "%s/%s", net_dir, e->d_name);
			unlink(p);
		}
		if (d)
			closedir(d);
		rmdir(net_dir);
		net_dir[0] = '\0';
	}
	net_ready = false;
}

#define IPH(...) RUN("ip", "-n", ns_name[NS_H], __VA_ARGS__)

static bool build_links(void)
{
	const char *l = ns_name[NS_LAN], *m = ns_name[NS_META], *p = ns_name[NS_PUB];
	for (int i = 0; i < NS_COUNT; i++)
		if (RUN("ip", "netns", "add", ns_name[i]) ||
		    ns_sysctl(ns_name[i], "net/ipv6/conf/default/accept_dad", "0") ||
		    ns_sysctl(ns_name[i], "net/ipv6/conf/all/accept_dad", "0") ||
		    RUN("ip", "-n", ns_name[i], "link", "set", "lo", "up"))
			return false;
	return !IPH("link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", l) &&
	       !IPH("link", "add", "meta0", "type", "veth", "peer", "name", "eth0", "netns", m) &&
	       !IPH("link", "add", "pub0", "type", "veth", "peer", "name", "eth0", "netns", p) &&
	       !IPH("addr", "add", H_LAN "/24", "dev", "lan0") &&
	       !IPH("addr", "add", H_SECOND "/32", "dev", "lan0") &&
	       !IPH("addr", "add", H_META4 "/30", "dev", "meta0") &&
	       !IPH("addr", "add", H_META6 "/64", "dev", "meta0", "nodad") &&
	       !IPH("addr", "add", H_PUB4 "/24", "dev", "pub0") &&
	       !IPH("addr", "add", H_PUB6 "/64", "dev", "pub0", "nodad") &&
	       !IPH("link", "set", "lan0", "up") && !IPH("link", "set", "meta0", "up") &&
	       !IPH("link", "set", "pub0", "up") &&
	       /* the LAN peer */
	       !RUN("ip", "-n", l, "addr", "add", LAN_PEER "/24", "dev", "eth0") &&
	       !RUN("ip", "-n", l, "link", "set", "eth0", "up") &&
	       !RUN("ip", "-n", l, "route", "add", "default", "via", H_LAN) &&
	       /* the metadata service */
	       !RUN("ip", "-n", m, "addr", "add", M_LINK4 "/30", "dev", "eth0") &&
	       !RUN("ip", "-n", m, "addr", "add", M_LINK6 "/64", "dev", "eth0", "nodad") &&
	       !RUN("ip", "-n", m, "addr", "add", META4 "/32", "dev", "lo") &&
	       !RUN("ip", "-n", m, "addr", "add", META6 "/128", "dev", "lo") &&
	       !RUN("ip", "-n", m, "link", "set", "eth0", "up") &&
	       !RUN("ip", "-n", m, "route", "add", "default", "via", H_META4) &&
	       !RUN("ip", "-n", m, "-6", "route", "add", "default", "via", H_META6) &&
	       /* the public peer */
	       !RUN("ip", "-n", p, "addr", "add", PUB4 "/24", "dev", "eth0") &&
	       !RUN("ip", "-n", p, "addr", "add", PUB6 "/64", "dev", "eth0", "nodad") &&
	       !RUN("ip", "-n", p, "link", "set", "eth0", "up") &&
	       !RUN("ip", "-n", p, "route", "add", "default", "via", H_PUB4) &&
	       !RUN("ip", "-n", p, "-6", "route", "add", "default", "via", H_PUB6) &&
	       /* H: default routes via the public peer (pasta needs one to copy) */
	       !IPH("route", "add", "default", "via", PUB4) &&
	       !IPH("-6", "route", "add", "default", "via", PUB6) &&
	       /* metadata: a plain route (root-mode runs) ... */
	       !IPH("route", "add", META4 "/32", "via", M_LINK4) &&
	       !IPH("-6", "route", "add", META6 "/128", "via", M_LINK6) &&
	       /* ... and a policy route for the sandbox user (rootless runs) */
	       !IPH("route", "add", META4 "/32", "via", M_LINK4, "table", "77") &&
	       !IPH("-6", "route", "add", META6 "/128", "via", M_LINK6, "table", "77") &&
	       !IPH("rule", "add", "uidrange", "65534-65534", "lookup", "77", "priority", "100") &&
	       !IPH("-6", "rule", "add", "uidrange", "65534-65534", "lookup", "77", "priority", "100");
}

/* H's link-local addresses: ll_spec "lan0=fe80::..,..." and the service
 * address list "fe80::..%lan0,...". */
static bool link_locals(char *addrs, size_t size)
{
	char cmd[160];
	snprintf(cmd, sizeof cmd, "ip -n %s -6 -o addr show scope link", ns_name[NS_H]);
	FILE *f = popen(cmd, "r");
	if (!f)
		return false;
	char line[512];
	int n = 0;
	ll_spec[0] = addrs[0] = '\0';
	while (fgets(line, sizeof line, f)) {
		char dev[32], addr[64];
		if (sscanf(line, "%*d: %31s inet6 %63[0-9a-f:]/", dev, addr) != 2)
			continue;
		size_t a = strlen(ll_spec), b = strlen(addrs);
		snprintf(ll_spec + a, sizeof ll_spec - a, "%s%s=%s", n ? "," : "", dev, addr);
		snprintf(addrs + b, size - b, ",%s%%%s", addr, dev);
		n++;
	}
	pclose(f);
	return n == 3;
}


/* The probe in H, as root and as 65534: every line must be "ok" and the
 * key services must be among them. */
static bool verify_services(void)
{
	static const char *const must[] = {
		"tcp-meta4-plain:ok CREDENTIALS", "tcp-meta6-plain:ok CREDENTIALS",
		"udp-meta4-plain:ok CREDENTIALS", "tcp-hostlo4-plain:ok host-secret",
		"tcp-hostlo6-plain:ok host-secret", "udp-hostlo4-plain:ok host-secret",
		"udp-hostlo6-plain:ok host-secret", "tcp-hostaddr-plain:ok host-secret",
		"tcp-hostpub4-plain:ok host-secret", "tcp-hostll-lan0-scope=lan0:ok host-secret",
		"udp-hostll-pub0-scope=pub0:ok host-secret", "tcp-lan-plain:ok lan-secret",
		"udp-lan-plain:ok lan-secret", "tcp-public4-plain:ok public-ok",
		"tcp-public6-plain:ok public-ok", "udp-public4-plain:ok public-ok",
		"udp-public6-plain:ok public-ok", "echo-public4:ok echo", "echo-public6:ok echo",
		"dns-public.test:ok " PUB4 "," PUB6, "dns-meta.test:ok " META4 "," META6,
		"tcp-name-public.test-11.77.0.2:ok public-ok",
	};
	char *code = probe_code(true, "");
	bool ok = true;
	for (int rootless = 0; rootless < 2 && ok; rootless++) {
		char *out = NULL;
		for (int attempt = 0; attempt < 3; attempt++) {
			free(out);
			out = python_in_h(rootless, code);
			struct lines ls;
			lines_parse(out, &ls);
			bool all = lines_get(&ls, "ifaces") != NULL;
			for (size_t i = 0; all && i < ls.n; i++)
				all = !strcmp(ls.name[i], "ifaces") || !strncmp(ls.res[i], "ok ", 3);
			lines_free(&ls);
			for (size_t i = 0; all && i < sizeof must / sizeof must[0]; i++)
				all = strstr(out, must[i]) != NULL;
			if (all)
				break;
			if (attempt == 2) {
				fprintf(stderr, "note: network suite: a service does not answer from H (as %s); "
					"probe output:\n%s\n", rootless ? "65534" : "root", out ? out : "(none)");
				ok = false;
			}
			usleep(300000);
		}
		free(out);
	}
	free(code);
	return ok;
}

/* The suite cannot build its topology: why, once here (not counted: each
 * test then says it did not run, or as root fails, with the reason). */
static void setup_failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void setup_failed(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(setup_why, sizeof setup_why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "network suite: no topology: %s\n", setup_why);
}

void topology_setup(void)
{
	if (!harness_is_root()) {
		setup_failed("the network suite needs root to build its host namespace");
		return;
	}
	if (access(PY, X_OK) < 0) {
		setup_failed("the network suite needs %s", PY);
		return;
	}
	harness_moat();
	int id = (int)getpid() % 100000;
	for (int i = 0; i < NS_COUNT; i++)
		snprintf(ns_name[i], sizeof ns_name[i], "moatw%s%d", NS_TAG[i], id);
	snprintf(net_dir, sizeof net_dir, "/tmp/moat-nettest-%d", id);
	if (mkdir(net_dir, 0755) < 0 && errno != EEXIST) {
		setup_failed("mkdir %s: %s", net_dir, strerror(errno));
		net_dir[0] = '\0';
		return;
	}
	chmod(net_dir, 0755);
	snprintf(hosts_path, sizeof hosts_path, "%s/hosts", net_dir);
	snprintf(resolv_path, sizeof resolv_path, "%s/resolv.conf", net_dir);
	snprintf(server_path, sizeof server_path, "%s/server.py", net_dir);
	snprintf(dns_path, sizeof dns_path, "%s/dns.py", net_dir);
	snprintf(table_path, sizeof table_path, "%s/dnstable", net_dir);
	char hosts_file[sizeof HOSTS + sizeof HOSTS_ONLY];
	snprintf(hosts_file, sizeof hosts_file, "%s%s", HOSTS, HOSTS_ONLY);
	net_write_file(hosts_path, hosts_file);
	net_write_file(table_path, HOSTS);
	net_write_file(resolv_path, "nameserver 127.0.0.1\noptions timeout:1 attempts:2\n");
	net_write_file(server_path, SERVER_PY);
	net_write_file(dns_path, DNS_PY);
	char ll_addrs[512], h_addrs[1024];
	if (!build_links() || !link_locals(ll_addrs, sizeof ll_addrs)) {
		setup_failed("could not build its namespaces (iproute2, veth, IPv6)");
		topology_teardown();
		return;
	}
	char path[96];
	struct stat st;
	snprintf(path, sizeof path, "/run/netns/%s", ns_name[NS_H]);
	if (stat(path, &st) < 0) {
		setup_failed("stat %s: %s", path, strerror(errno));
		topology_teardown();
		return;
	}
	h_ino = st.st_ino;
	snprintf(h_addrs, sizeof h_addrs, "127.0.0.1,::1,%s,%s,%s,%s,%s,%s%s", H_LAN, H_SECOND,
		 H_META4, H_META6, H_PUB4, H_PUB6, ll_addrs);
	bool up = start_server(NS_H, server_path, (const char *const[]){ "host-secret", h_addrs, "8080", NULL }) &&
		  start_server(NS_H, dns_path, (const char *const[]){ table_path, NULL }) &&
		  start_server(NS_LAN, server_path, (const char *const[]){ "lan-secret", LAN_PEER, "8080", NULL }) &&
		  start_server(NS_META, server_path,
			       (const char *const[]){ "CREDENTIALS", META4 "," META6, "80,8080", NULL }) &&
		  start_server(NS_PUB, server_path,
			       (const char *const[]){ "public-ok", PUB4 "," PUB6, "8080,8081", "9000",
						      "8082", NULL });
	if (!up || !verify_services()) {
		setup_failed("its services are not all up (see the probe output above)");
		topology_teardown();
		return;
	}
	net_ready = true;
}


/* ---- moat inside H ---- */

/* moat's environment in H: the harness's without a cgroup parent (moat
 * picks its own cgroup). */
const char *const H_ENV[] = { "PATH=/usr/bin:/bin", "HOME=/nonexistent",
				     HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE, NULL };

/* harness_prep_fn: moat's child joins H with the suite's files (as root; the
 * harness drops to 65534 after it for the rootless mode). */
int enter_h(int mode, void *arg)
{
	return enter_netns(ns_name[NS_H]) < 0 || enter_h_files() < 0 ? -1 : 0;
}

void net_append(char **b, size_t *l, const char *data, size_t n)
{
	char *nb = realloc(*b, *l + n + 1);
	ck_assert_ptr_nonnull(nb);
	memcpy(nb + *l, data, n);
	*l += n;
	nb[*l] = '\0';
	*b = nb;
}

/* moat exec with a JSON request, in H. */
void net_exec(int mode, const char *request, struct run_out *out)
{
	memset(out, 0, sizeof *out);
	struct harness_proc p;
	harness_start(mode, (const char *const[]){ "exec", NULL }, request, strlen(request), H_ENV,
		      enter_h, NULL, &p);
	harness_finish(&p, out);
	ck_assert_msg(out->json, "moat printed no JSON (status %d): %s / %s", out->status, out->out,
		      out->err);
}

char *net_request(const char *code, const char *extra_json)
{
	char *q = harness_json_quote(code);
	char *r = NULL;
	ck_assert_int_ge(asprintf(&r, "{\"language\":\"python\",\"timeout\":60000,\"code\":%s%s}", q,
				  extra_json), 0);
	free(q);
	return r;
}

char *probe_code(bool verify, const char *extra)
{
	char *c = NULL;
	if (asprintf(&c, "LLSPEC = '%s'\nVERIFY = %s\n%s%s%s", ll_spec, verify ? "True" : "False",
		     PY_LIB, PY_SWEEP, extra) < 0)
		return NULL;
	return c;
}

/* ---- the checks ---- */


void v_init(struct verdict *v, const char *test, int mode)
{
	memset(v, 0, sizeof *v);
	snprintf(v->test, sizeof v->test, "%s (%s)", test, mode == MODE_ROOT ? "root" : "rootless");
}

__attribute__((format(printf, 3, 4))) void v_expect(struct verdict *v, bool ok,
							   const char *fmt, ...)
{
	if (ok)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	v->failed++;
	net_append(&v->log, &v->len, "  - ", 4);
	net_append(&v->log, &v->len, msg, strlen(msg));
	net_append(&v->log, &v->len, "\n", 1);
}

/* The line name: exists and its result contains want. */
void v_line(struct verdict *v, const struct lines *ls, const char *name, const char *want)
{
	const char *r = lines_get(ls, name);
	v_expect(v, r && strstr(r, want), "%s: want \"%s\", got \"%s\"", name, want,
		 r ? r : "(no line)");
}

/* The line name starts with "fail" (refused). */
void v_fail(struct verdict *v, const struct lines *ls, const char *name)
{
	const char *r = lines_get(ls, name);
	v_expect(v, r && !strncmp(r, "fail", 4), "%s: want a refusal, got \"%s\"", name,
		 r ? r : "(no line)");
}

/* Each line want[i][0] exists and is exactly want[i][1]. */
void v_exact(struct verdict *v, const struct lines *ls, const char *const (*want)[2],
		    size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *r = lines_get(ls, want[i][0]);
		v_expect(v, r && !strcmp(r, want[i][1]), "%s: want \"%s\", got \"%s\"", want[i][0],
			 want[i][1], r ? r : "(no line)");
	}
}

void v_done(struct verdict *v, const struct run_out *o)
{
	if (!v->failed) {
		free(v->log);
		return;
	}
	const char *so = o ? harness_str(o, "stdout") : NULL;
	const char *se = o ? harness_str(o, "stderr") : NULL;
	cJSON *net = o ? cJSON_GetObjectItemCaseSensitive(o->json, "network") : NULL;
	char *nj = net ? cJSON_PrintUnformatted(net) : NULL;
	fprintf(stderr, "FAILED %s: %d expectation(s):\n%s--- program stdout ---\n%s\n"
		"--- program stderr ---\n%s\n--- moat stderr ---\n%s\n--- result.network ---\n%s\n",
		v->test, v->failed, v->log, so ? so : "(none)", se ? se : "(none)",
		o && o->err ? o->err : "", nj ? nj : "(none)");
	free(nj);
	ck_abort_msg("%s: %d expectation(s) failed (all listed on stderr):\n%.3000s", v->test,
		     v->failed, v->log);
}

const char *network_mode(const struct run_out *o)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(o->json, "network");
	cJSON *m = n ? cJSON_GetObjectItemCaseSensitive(n, "mode") : NULL;
	return cJSON_IsString(m) ? m->valuestring : "(none)";
}

cJSON *connections(const struct run_out *o)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(o->json, "network");
	cJSON *c = n ? cJSON_GetObjectItemCaseSensitive(n, "connections") : NULL;
	return cJSON_IsArray(c) ? c : NULL;
}

const char *str_item(const cJSON *c, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double num_item(const cJSON *c, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* A connection entry: kind (NULL: any), host or address (one of a
 * "|"-separated list: "host" may be the name moat's DNS answered for the
 * address), port (-1: any), allowed; for a refusal also a reason, for an
 * allowed one received > 0 when want_bytes. */
bool has_conn(const struct run_out *o, const char *kind, const char *hosts, int port,
		     bool allowed, bool want_bytes)
{
	cJSON *c, *all = connections(o);
	cJSON_ArrayForEach(c, all) {
		const char *k = str_item(c, "kind"), *h = str_item(c, "host"), *r = str_item(c, "reason");
		cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "allowed");
		if ((kind && (!k || strcmp(k, kind))) || !h || !cJSON_IsBool(a) || cJSON_IsTrue(a) != allowed)
			continue;
		const char *addr = str_item(c, "address");
		char want[256], have[300], have_addr[300];
		snprintf(want, sizeof want, "|%s|", hosts);
		snprintf(have, sizeof have, "|%s|", h);
		snprintf(have_addr, sizeof have_addr, "|%s|", addr ? addr : "");
		if ((!strstr(want, have) && !(addr && strstr(want, have_addr))) ||
		    (port >= 0 && num_item(c, "port") != port))
			continue;
		if (!allowed && (!r || !*r))
			continue;
		if (allowed && want_bytes && !(num_item(c, "received") > 0))
			continue;
		return true;
	}
	return false;
}

/* Names whose every address is a host's, private or metadata address. */
static const char *const FORBIDDEN_NAMES[] = { "meta.test", "lan.test", "hostaddr.test",
					       "hostlo.test", "hostpub.test", "self.test" };
static const char *const FORBIDDEN_ADDRS[] = { META4, META6, LAN_PEER, H_SECOND, H_LAN,
					       "127.0.0.1", "::1", H_PUB4, H_PUB6 };

static bool addr_in(const char *list, const char *addr)
{
	char *l = strdup(list), *save = NULL;
	bool found = false;
	for (char *a = strtok_r(l, ", ", &save); a && !found; a = strtok_r(NULL, ", ", &save))
		found = !strcmp(a, addr);
	free(l);
	return found;
}


/* The sweep's lines: nothing of H, the LAN or the metadata service
 * answers; UDP never leaves; a TCP answer is only ever the public peer
 * (egress), or only for public.test by name (allowlist), or nothing (none). */
void check_sweep(struct verdict *v, const struct lines *ls, enum wall w)
{
	size_t attempts = 0;
	for (size_t i = 0; i < ls->n; i++) {
		const char *n = ls->name[i], *r = ls->res[i];
		if (!strcmp(n, "ifaces") || !strncmp(n, "dns-", 4))
			continue;
		if (strncmp(n, "tcp-", 4) && strncmp(n, "udp-", 4))
			continue;
		attempts++;
		if (strstr(r, "secret") || strstr(r, "CREDENTIALS")) {
			v_expect(v, false, "%s: a host/LAN/metadata service answered: %s", n, r);
			continue;
		}
		if (strncmp(r, "ok", 2))
			continue;
		bool may = w == WALL_EGRESS ? !strncmp(n, "tcp-", 4)
			 : w == WALL_ALLOWLIST ? !strncmp(n, "tcp-name-public.test-", 21)
					       : false;
		v_expect(v, may && !strncmp(r, "ok public-ok", 12), "%s: must be refused, got \"%s\"",
			 n, r);
	}
	v_expect(v, attempts >= 60, "the probe made only %zu attempts", attempts);
	for (size_t i = 0; i < sizeof FORBIDDEN_NAMES / sizeof FORBIDDEN_NAMES[0]; i++) {
		char name[64];
		snprintf(name, sizeof name, "dns-%s", FORBIDDEN_NAMES[i]);
		const char *r = lines_get(ls, name);
		v_expect(v, r != NULL, "%s: no line", name);
		if (!r || strncmp(r, "ok", 2))
			continue;
		for (size_t j = 0; j < sizeof FORBIDDEN_ADDRS / sizeof FORBIDDEN_ADDRS[0]; j++)
			v_expect(v, !addr_in(r + 2, FORBIDDEN_ADDRS[j]),
				 "%s: the sandbox's resolver returned %s (%s)", name, FORBIDDEN_ADDRS[j], r);
	}
	if (w == WALL_NONE)
		return;
	v_line(v, ls, "dns-public.test", PUB4);
	v_line(v, ls, "dns-public.test", PUB6);
	const char *want_ok[] = { "tcp-name-public.test-11.77.0.2", "tcp-name-public.test-2a01-4f8-77--2",
				  "tcp-public4-plain", "tcp-public6-plain", "tcp-name-mixed.test-11.77.0.2" };
	for (size_t i = 0; i < (w == WALL_EGRESS ? 5u : 2u); i++)
		v_line(v, ls, want_ok[i], "ok public-ok");
	if (w == WALL_EGRESS) {
		const char *m = lines_get(ls, "dns-mixed.test");
		v_expect(v, m && !strncmp(m, "ok", 2) && addr_in(m + 2, PUB4) && !addr_in(m + 2, H_SECOND),
			 "dns-mixed.test: want only the public address %s, got \"%s\"", PUB4,
			 m ? m : "(no line)");
	}
}

/* ---- default: only lo ---- */

/* dnsq(name, qtype): one raw question to the sandbox's resolver; prints
 * "q-NAME-TYPE:RCODE flags=.. an=.. ns=.. ar=.. tail=.." (all of the
 * answer but the id and the question) and the time it took. */
const char PY_DNSQ[] =
	"import time, random\n"
	"NS = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]\n"
	"def dnsq(name, qtype):\n"
	"    qid = random.randrange(65536)\n"
	"    q = struct.pack('!HHHHHH', qid, 0x0100, 1, 0, 0, 0)\n"
	"    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\\0'\n"
	"    q += struct.pack('!HH', 28 if qtype == 'AAAA' else 1, 1)\n"
	"    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
	"    s.settimeout(20)\n"
	"    t = time.monotonic()\n"
	"    try:\n"
	"        s.sendto(q, (NS, 53))\n"
	"        r = s.recv(4096)\n"
	"    except OSError as e:\n"
	"        print('q-%s-%s:fail %s' % (name, qtype, e)); return\n"
	"    finally:\n"
	"        s.close()\n"
	"    ms = (time.monotonic() - t) * 1000\n"
	"    fl, qd, an, ns, ar = struct.unpack('!HHHHH', r[2:12])\n"
	"    tail = r[len(q):].hex()\n"
	"    print('q-%s-%s:%d flags=%04x qd=%d an=%d ns=%d ar=%d tail=%s id=%s' % (name, qtype, fl & 15,\n"
	"          fl, qd, an, ns, ar, tail, 'ok' if r[:2] == q[:2] else 'bad'))\n"
	"    print('ms-%s-%s:%.0f' % (name, qtype, ms))\n"
	"def gai(name):\n"
	"    try:\n"
	"        r = socket.getaddrinfo(name, 8080, proto=socket.IPPROTO_TCP)\n"
	"        print('gai-%s:ok %s' % (name, ','.join(sorted(set(x[4][0] for x in r)))))\n"
	"    except socket.gaierror as e:\n"
	"        print('gai-%s:fail %d' % (name, e.errno))\n";

/* ---- the fixture every test shares ---- */

/* One run of code (with the request's extra JSON) in H: moat's result in *o,
 * the program's stdout lines in *ls, and a verdict for test in mode in *v. */
void net_probe(const char *test, int mode, const char *code, const char *extra_json,
	       struct run_out *o, struct lines *ls, struct verdict *v)
{
	char *req = net_request(code, extra_json);
	net_exec(mode, req, o);
	free(req);
	lines_parse(harness_str(o, "stdout"), ls);
	v_init(v, test, mode);
}

/* Its end: the verdict (every failure listed), then everything freed. */
void net_probe_end(struct run_out *o, struct lines *ls, struct verdict *v)
{
	v_done(v, o);
	lines_free(ls);
	harness_free(o);
}
