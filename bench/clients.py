#!/usr/bin/env python3
"""The clients' run("print(1)") as a user calls it, spaced (a quiet gap before each call,
as an agent's tool calls come): through the user's service (a `moat serve --socket`
started here, as moat.socket would start it), through `moat exec` (MOAT_SERVICE=off), and
bare `python3 -c 'print(1)'`; Python and Node clients. Interleaved rounds, median/p10/p90
wall time of the call in the caller. Not a test: figures for docs/benchmarks.md.

    python3 bench/clients.py [PATH/TO/moat]   (env: N rounds, default 30; GAP_MS, 100)
"""
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MOAT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build", "moat"))
N = int(os.environ.get("N", "30"))
GAP = int(os.environ.get("GAP_MS", "100")) / 1000.0
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

# a long-lived caller per client: reads a line ("svc" or "exec"), runs print(1), answers
# the call's wall time in ms
PY_CALLER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from moat_sandbox import create_sandbox
sock = sys.argv[2]
os.environ["MOAT_SOCKET"] = sock
os.environ.pop("MOAT_SERVICE", None)
svc = create_sandbox()
os.environ["MOAT_SERVICE"] = "off"
ex = create_sandbox()
for line in sys.stdin:
    s = svc if line.strip() == "svc" else ex
    t = time.perf_counter()
    r = s.run("print(1)")
    ms = (time.perf_counter() - t) * 1000
    assert r.stdout == "1\n", r.to_dict()
    if line.strip() == "svc":
        assert r.get("pool") is True, r.to_dict()
    print("%.3f" % ms, flush=True)
"""

NODE_CALLER = r"""
const { createSandbox } = require(process.argv[1]);
process.env.MOAT_SOCKET = process.argv[2];
delete process.env.MOAT_SERVICE;
const svc = createSandbox();
process.env.MOAT_SERVICE = 'off';
const ex = createSandbox();
const rl = require('node:readline').createInterface({ input: process.stdin });
(async () => {
  for await (const line of rl) {
    const s = line.trim() === 'svc' ? svc : ex;
    const t = process.hrtime.bigint();
    const r = await s.run('print(1)', { language: 'python' });
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    if (r.stdout !== '1\n' || (line.trim() === 'svc' && r.pool !== true)) throw new Error(JSON.stringify(r));
    process.stdout.write(ms.toFixed(3) + '\n');
  }
  await svc.dispose(); await ex.dispose();
})();
"""


def main() -> int:
    work = tempfile.mkdtemp(prefix="moat-bench-clients-")
    os.chmod(work, 0o755)
    sock = os.path.join(work, "moat.sock")
    env = dict(os.environ, MOAT_BIN=MOAT)
    serve = subprocess.Popen([MOAT, "serve", "--socket", sock, "--runtime", os.path.join(REPO, "runtime")],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(work, "serve.log"), "wb"))
    callers = {}
    try:
        end = time.monotonic() + 30
        while not os.path.exists(sock):
            if time.monotonic() > end or serve.poll() is not None:
                sys.stderr.write(open(os.path.join(work, "serve.log")).read())
                return 1
            time.sleep(0.05)
        time.sleep(2)  # the pool fills
        callers["python"] = subprocess.Popen([PY, "-c", PY_CALLER, os.path.join(REPO, "clients", "python"), sock],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        if shutil.which("node"):
            callers["node"] = subprocess.Popen(["node", "-e", NODE_CALLER, os.path.join(REPO, "clients", "node"),
                                                sock], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                               text=True)

        def call(client: str, how: str) -> float:
            p = callers[client]
            p.stdin.write(how + "\n")
            p.stdin.flush()
            return float(p.stdout.readline())

        def bare() -> float:
            t = time.perf_counter()
            subprocess.run([PY, "-c", "print(1)"], stdout=subprocess.DEVNULL, check=True)
            return (time.perf_counter() - t) * 1000

        cases = [("bare python3 -c 'print(1)'", bare)]
        for c in callers:
            cases.append(("%s run() via the user service" % c, lambda c=c: call(c, "svc")))
            cases.append(("%s run() via moat exec" % c, lambda c=c: call(c, "exec")))
        for _, f in cases:  # warm-up
            f()
        times = {name: [] for name, _ in cases}
        load0 = os.getloadavg()[0]
        for _ in range(N):
            random.shuffle(cases)
            for name, f in cases:
                time.sleep(GAP)
                times[name].append(f())
        load1 = os.getloadavg()[0]
        base = statistics.median(times["bare python3 -c 'print(1)'"])
        print("Clients' `run(\"print(1)\")`, %s, spaced %d ms, %d interleaved rounds, uid %d, "
              "load %.2f before, %.2f after.\n" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                   GAP * 1000, N, os.getuid(), load0, load1))
        print("| call | median ms | p10 | p90 | × bare python3 |")
        print("|---|---|---|---|---|")
        for name in sorted(times, key=lambda k: statistics.median(times[k])):
            v = sorted(times[name])
            q = statistics.quantiles(v, n=10)
            print("| %s | %.1f | %.1f | %.1f | %.2f |" % (name, statistics.median(v), q[0], q[-1],
                                                       statistics.median(v) / base))
        return 0
    finally:
        for p in callers.values():
            try:
                p.stdin.close()
                p.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
        serve.terminate()
        serve.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
