"""A small client of moat serve for tests/cluster and bench/cluster.sh (stdlib only).

  client.py call URL TOKEN ID CODE   POST URL with {code, sandboxId: ID, kvEnabled: true} and
                                     X-Sandbox-Id: ID; prints the HTTP status, a space and the
                                     script's stdout (JSON-quoted), or "0 <error>" when no answer.
  client.py bench URL TOKEN CLIENTS REQUESTS CODE
                                     CLIENTS threads, REQUESTS in all, client i using sandbox id
                                     "bench-<i>"; prints one JSON line: requests, ok, failed,
                                     seconds, rps, p50Ms, p95Ms, latenciesMs.
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def post(url, token, sid, code, timeout=60):
    u = urllib.parse.urlsplit(url)
    body = json.dumps({"code": code, "sandboxId": sid, "kvEnabled": True}).encode()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("POST", u.path, body=body, headers={
            "Authorization": "Bearer " + token, "X-Sandbox-Id": sid,
            "Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, data
    finally:
        c.close()


def call(url, token, sid, code):
    try:
        status, data = post(url, token, sid, code)
    except (OSError, http.client.HTTPException) as e:
        print("0 " + json.dumps(str(e)))
        return
    out = None
    try:
        out = json.loads(data).get("stdout")
    except ValueError:
        pass
    print("%d %s" % (status, json.dumps(out if out is not None else data.decode("utf-8", "replace"))))


def bench(url, token, clients, requests, code):
    lock = threading.Lock()
    left = [requests]
    lat, failed = [], [0]

    def worker(i):
        sid = "bench-%d" % i
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t = time.monotonic()
            try:
                status, data = post(url, token, sid, code)
                ok = status == 200 and json.loads(data).get("exitCode") == 0
            except (OSError, http.client.HTTPException, ValueError):
                ok = False
            d = (time.monotonic() - t) * 1000
            with lock:
                if ok:
                    lat.append(d)
                else:
                    failed[0] += 1

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    lat.sort()
    pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
    print(json.dumps({"requests": requests, "ok": len(lat), "failed": failed[0],
                      "seconds": round(secs, 3), "rps": round(len(lat) / secs, 2),
                      "p50Ms": pick(0.5), "p95Ms": pick(0.95),
                      "latenciesMs": [round(x, 1) for x in lat]}))


if __name__ == "__main__":
    a = sys.argv
    if len(a) == 6 and a[1] == "call":
        call(a[2], a[3], a[4], a[5])
    elif len(a) == 7 and a[1] == "bench":
        bench(a[2], a[3], int(a[4]), int(a[5]), a[6])
    else:
        sys.exit(__doc__)
