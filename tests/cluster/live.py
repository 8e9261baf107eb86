"""Live sandboxes and sessions across two moat serve nodes behind HAProxy
(tests/cluster/live.sh builds the cluster; docs/scaling.md, "Live sandboxes and
sessions: one node each"). Stdlib only; prints TAP, its plan last.

  live.py LB NODE_A_URL NODE_B_URL TOKEN NODE_A_PID

Every request but the checks of where things are goes through HAProxy (LB).
The nodes are named node-a and node-b; NODE_A_PID is killed (SIGKILL) midway.
"""
import http.client
import json
import os
import re
import signal
import sys
import time
import urllib.parse

SANDBOXES = 20
SESSIONS = 4
# small, so that 20 fit the nodes' default budgets (serve.sandboxes.cpus, memoryMb)
SBX_BODY = {"cpus": 0.25, "memoryMb": 128}
SES_BODY = {"language": "python", "cpus": 0.25, "memoryMb": 256}
ID = re.compile(r"^(sbx|ses)_([a-z0-9-]{1,32})_[0-9a-f]{32}$")


class Skip(Exception):
    pass


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, ok, what):
        self.n += 1
        if not ok:
            self.failed += 1
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, what), flush=True)
        return ok


def req(url, token, method, path, body=None, raw=None, timeout=30):
    """(status, bytes, JSON or None); status 0 when there was no answer."""
    u = urllib.parse.urlsplit(url)
    h = {"Authorization": "Bearer " + token}
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
    except (OSError, http.client.HTTPException) as e:
        return 0, str(e).encode(), None
    finally:
        c.close()
    try:
        j = json.loads(out)
    except ValueError:
        j = None
    return r.status, out, j


def node_of(i):
    m = ID.match(i or "")
    return m.group(2) if m else None


def err(j):
    e = (j or {}).get("error") or {}
    return e.get("type"), e.get("message") or ""


def served(url, token):
    """Requests node URL has answered on the routes of sandboxes and sessions."""
    st, out, _ = req(url, token, "GET", "/metrics")
    n = {}
    for line in out.decode("utf-8", "replace").splitlines():
        m = re.match(r'^moat_serve_requests_total\{route="(\w+)",.*\} (\d+)$', line)
        if m:
            n[m.group(1)] = n.get(m.group(1), 0) + int(m.group(2))
    return n


def work(lb, token, sid):
    """A file written, a process that checks it and exits 3, the file read back, all
    through HAProxy (5 requests with the create): None, or what went wrong."""
    p = "/v1/sandboxes/" + sid
    st, out, _ = req(lb, token, "PUT", p + "/files?path=/tmp/who", raw=sid.encode())
    if st != 201:
        return "PUT file: %d %.200s" % (st, out)
    st, out, j = req(lb, token, "POST", p + "/processes",
                     {"cmd": 'test "$(cat /tmp/who)" = %s && exit 3' % sid})
    if st != 201:
        return "start: %d %.200s" % (st, out)
    st, out, j = req(lb, token, "GET", "%s/processes/%d?wait=30000" % (p, j["pid"]), timeout=40)
    if st != 200 or j.get("state") != "exited" or j.get("exitCode") != 3:
        return "wait: %d %.200s" % (st, out)
    st, out, _ = req(lb, token, "GET", p + "/files?path=/tmp/who")
    if st != 200 or out != sid.encode():
        return "GET file: %d %.200s" % (st, out)
    return None


TAP = Tap()


def main():
    lb, na, nb, token, pid_a = sys.argv[1:6]
    node_url = {"node-a": na, "node-b": nb}
    t = TAP

    # ---- 20 sandboxes made through HAProxy, spread by it, each named by its node
    before = {n: served(u, token) for n, u in node_url.items()}
    sbx = []
    for k in range(SANDBOXES):
        st, out, j = req(lb, token, "POST", "/v1/sandboxes", SBX_BODY)
        if st == 503 and b"not built into this moat" in out:
            raise Skip("live sandboxes are not built into this moat (runtime/bin/moat-agent)")
        if st != 201:
            t.check(False, "create %d through HAProxy: %d %.300s" % (k, st, out))
            break
        sbx.append(j["id"])
    on = {n: [i for i in sbx if node_of(i) == n] for n in node_url}
    t.check(len(sbx) == SANDBOXES and len(on["node-a"]) + len(on["node-b"]) == SANDBOXES,
            "create: %d sandboxes through HAProxy, every id naming node-a or node-b (%s)"
            % (len(sbx), ", ".join("%s: %d" % (n, len(v)) for n, v in on.items())))
    t.check(on["node-a"] and on["node-b"], "create: HAProxy spread them over both nodes")

    # ---- each later request reaches the node that made it
    bad = [(i, w) for i in sbx for w in [work(lb, token, i)] if w]
    t.check(not bad, "route: a file written, a process run, the file read for each of %d "
            "sandboxes through HAProxy%s" % (len(sbx), "" if not bad else ": %s" % bad[:3]))
    after = {n: served(u, token) for n, u in node_url.items()}
    got = {n: after[n].get("sandboxes", 0) - before[n].get("sandboxes", 0) for n in node_url}
    want = {n: 5 * len(on[n]) for n in node_url}
    t.check(got == want, "route: each node answered exactly its own sandboxes' requests "
            "(its /metrics: %s; want %s)" % (got, want))
    for n, u in node_url.items():
        st, out, j = req(u, token, "GET", "/v1/sandboxes?limit=1000")
        have = sorted(x["id"] for x in (j or {}).get("sandboxes", []))
        t.check(st == 200 and have == sorted(on[n]),
                "route: %s holds exactly the sandboxes whose ids name it (%d)" % (n, len(have)))
    # a node asked about another's sandbox, with no load balancer: 421, never a 404
    a0, b0 = on["node-a"][0], on["node-b"][0]
    st, out, j = req(nb, token, "GET", "/v1/sandboxes/" + a0)
    ty, msg = err(j)
    t.check(st == 421 and ty == "WrongNode" and '"node-a"' in msg and '"node-b"' in msg,
            "wrong node: node-b asked for a sandbox of node-a answers 421 WrongNode naming "
            "both: %d %s" % (st, msg))
    st, out, j = req(na, token, "POST", "/v1/sandboxes/%s/processes" % b0, {"cmd": "true"})
    t.check(st == 421 and err(j)[0] == "WrongNode",
            "wrong node: node-a asked to start a process in node-b's sandbox: %d" % st)
    # without the token: 401, as for any id (the 421 comes after authentication)
    st, out, j = req(nb, "not-the-token", "GET", "/v1/sandboxes/" + a0)
    t.check(st == 401, "wrong node: without the token it is a 401 first: %d" % st)

    # ---- sessions, the same way
    # (at least SESSIONS, until both nodes have one: HAProxy's round robin is
    # not strict alternation; at most 2 * SESSIONS)
    ses = []
    for k in range(2 * SESSIONS):
        st, out, j = req(lb, token, "POST", "/v1/sessions", SES_BODY)
        if st != 201:
            t.check(False, "session %d through HAProxy: %d %.300s" % (k, st, out))
            break
        ses.append(j["id"])
        nodes = set(node_of(i) for i in ses)
        if len(ses) >= SESSIONS and len(nodes) == 2:
            break
    son = {n: [i for i in ses if node_of(i) == n] for n in node_url}
    t.check(len(ses) >= SESSIONS and son["node-a"] and son["node-b"] and
            len(son["node-a"]) + len(son["node-b"]) == len(ses),
            "sessions: %d made through HAProxy, on both nodes (%s)" %
            (len(ses), ", ".join("%s: %d" % (n, len(v)) for n, v in son.items())))
    bad = []
    for i in ses:
        st, out, j = req(lb, token, "POST", "/v1/sessions/%s/run" % i,
                         {"code": "x = 6 * 7\nprint(x)"}, timeout=60)
        if st != 200 or (j or {}).get("stdout") != "42\n":
            bad.append((i, st, out[:200]))
    t.check(not bad, "sessions: a step in each through HAProxy%s" % ("" if not bad else
                                                                     ": %s" % bad[:2]))

    # ---- node-a dies: its callers get 410 naming why, node-b's carry on
    os.kill(int(pid_a), signal.SIGKILL)
    t0 = time.monotonic()
    seen = []
    st = 0
    while time.monotonic() - t0 < 10:
        st, out, j = req(lb, token, "GET", "/v1/sandboxes/" + a0, timeout=5)
        if not seen or seen[-1] != st:
            seen.append(st)
        if st == 410:
            break
        time.sleep(0.1)
    t.check(st == 410, "kill: HAProxy answers 410 for node-a's sandboxes %.1f s after "
            "kill -9 (statuses on the way: %s)" % (time.monotonic() - t0, seen))
    bad = []
    for i in on["node-a"]:
        for method, path, body in (("GET", "", None), ("POST", "/processes", {"cmd": "true"}),
                                   ("GET", "/files?path=/tmp/who", None)):
            st, out, j = req(lb, token, method, "/v1/sandboxes/" + i + path, body)
            ty, msg = err(j)
            if st != 410 or ty != "SandboxGone" or "node-a is down" not in msg:
                bad.append((i, method, path, st, out[:200]))
    t.check(not bad, "kill: every request on node-a's %d sandboxes is 410 SandboxGone "
            "naming node-a down%s" % (len(on["node-a"]), "" if not bad else ": %s" % bad[:2]))
    bad = []
    for i in son["node-a"]:
        st, out, j = req(lb, token, "POST", "/v1/sessions/%s/run" % i, {"code": "print(x)"})
        ty, msg = err(j)
        if st != 410 or ty != "SessionGone" or "node-a is down" not in msg:
            bad.append((i, st, out[:200]))
    t.check(not bad, "kill: a step in node-a's sessions is 410 SessionGone naming node-a "
            "down%s" % ("" if not bad else ": %s" % bad[:2]))
    bad = [(i, w) for i in on["node-b"] for w in [work(lb, token, i)] if w]
    t.check(not bad, "kill: node-b's %d sandboxes carry on (file, process, file)%s"
            % (len(on["node-b"]), "" if not bad else ": %s" % bad[:3]))
    bad = []
    for i in son["node-b"]:
        st, out, j = req(lb, token, "POST", "/v1/sessions/%s/run" % i, {"code": "print(x)"},
                         timeout=60)
        if st != 200 or (j or {}).get("stdout") != "42\n":
            bad.append((i, st, out[:200]))
    t.check(not bad, "kill: node-b's sessions carry on, their state kept%s"
            % ("" if not bad else ": %s" % bad[:2]))
    new = []
    for k in range(2):
        st, out, j = req(lb, token, "POST", "/v1/sandboxes", SBX_BODY)
        new.append(node_of((j or {}).get("id")) if st == 201 else st)
        if st == 201:
            on["node-b"].append(j["id"])  # ended below
    t.check(new == ["node-b", "node-b"], "kill: new sandboxes go to node-b (%s)" % new)
    # an id naming no node of the cluster: HAProxy's 404, no node asked
    z = "0" * 32
    st, out, j = req(lb, token, "GET", "/v1/sandboxes/sbx_node-z_" + z)
    s2, out2, j2 = req(lb, token, "POST", "/v1/sessions/ses_node-z_%s/run" % z, {"code": "1"})
    t.check(st == 404 and err(j)[0] == "SandboxNotFound" and s2 == 404 and
            err(j2)[0] == "SessionNotFound",
            "unknown node: an id naming no node of the cluster is a 404 (%d, %d)" % (st, s2))

    # ---- node-b's end, through HAProxy
    st_all = []
    for i in on["node-b"]:
        st_all.append(req(lb, token, "DELETE", "/v1/sandboxes/" + i)[0])
    for i in son["node-b"]:
        st_all.append(req(lb, token, "DELETE", "/v1/sessions/" + i)[0])
    t.check(set(st_all) <= {200, 204}, "end: node-b's sandboxes and sessions deleted "
            "through HAProxy (%s)" % sorted(set(st_all)))
    return t


if __name__ == "__main__":
    try:
        tap = main()
    except Skip as e:
        print("ok 1 - cluster/live # SKIP %s" % e)
        print("1..1")
        sys.exit(0)
    except Exception as e:  # the driver broke: said, counted
        TAP.check(False, "cluster/live: the driver broke: %r" % e)
        print("1..%d" % TAP.n)
        sys.exit(1)
    print("1..%d" % tap.n)
    print("# cluster/live: %d passed, %d failed" % (tap.n - tap.failed, tap.failed))
    sys.exit(1 if tap.failed else 0)
