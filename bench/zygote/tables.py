#!/usr/bin/python3
"""bench/zygote/tables.py -- the README's tables from results/*.json
    python3 bench/zygote/tables.py [bench/zygote/results]"""
import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RUNS = [("root, zygote keeps SYS_ADMIN/SETUID/SETGID", "root-keep"),
        ("uid 65534, zygote keeps caps", "rootless-keep"),
        ("root, zygote has no caps", "root-nocaps"),
        ("uid 65534, zygote has no caps", "rootless-nocaps"),
        ("root, keeps caps, `gc.freeze()`", "root-keep-gcfreeze")]
ZS = ("zygote", "zygote-clone")


def load(f):
    with open(os.path.join(D, f + ".json")) as fh:
        return json.load(fh)


def w(c):
    return "%.1f / %.1f / %.1f" % (c["wall"]["p50"], c["wall"]["p90"], c["wall"]["p99"])


def cp(c):
    return "%.2f / %.2f" % (c["cpu"]["p50"], c["cpu"]["p90"])


print("### One client (phase A: 200 interleaved rounds; ms; CPU = children + zygote's own)\n")
print("| run | load before→after | steal ms/s | zygote wall p50 / p90 / p99 | zygote CPU p50 / p90 | "
      "no-netns CPU p50 | clone variant wall p50 / p90 / p99 | clone CPU p50 / p90 | moat run wall p50 / p90 / p99 | "
      "moat run CPU p50 / p90 | bare wall p50 / p90 / p99 | bare CPU p50 / p90 |")
print("|---|---|---:|---|---|---:|---|---|---|---|---|---|")
for lab, f in RUNS:
    A = load(f)["A"]
    c = A["cases"]
    print("| %s | %s→%s | %.0f | %s | %s | %.2f | %s | %s | %s | %s | %s | %s |" % (
        lab, A["load"][0], A["load"][1], A["steal_ms_per_s"], w(c["zygote"]), cp(c["zygote"]),
        c["zygote-nonetns"]["cpu"]["p50"], w(c["zygote-clone"]), cp(c["zygote-clone"]), w(c["moat run"]),
        cp(c["moat run"]), w(c["bare python3"]), cp(c["bare python3"])))
c = load("root-keep")["A"]["cases"]
print("\nMinor page faults per request (p50, root-keep): " + ", ".join(
    "%s %d" % (k, c[k]["minflt_p50"]) for k in c))

print("\n### Two concurrent clients (phase C: 400 requests per case)\n")
print("| run | load before→after | zygote req/s | zygote p50 / p90 / p99 (p99÷p50) | clone variant req/s | "
      "clone p50 / p90 / p99 (p99÷p50) | moat run req/s | moat run p50 / p99 (p99÷p50) | bare req/s | "
      "bare p50 / p90 / p99 (p99÷p50) | zygote ÷ bare rate | clone ÷ bare rate | zygote p50 ÷ bare p50 | "
      "steal ms/s (zygote, clone, moat, bare) |")
print("|---|---|---:|---|---:|---|---:|---|---:|---|---:|---:|---:|---|")
for lab, f in RUNS:
    C = load(f)["C"]
    c = C["cases"]
    z, k, m, b = c["zygote"], c["zygote-clone"], c["moat run"], c["bare python3"]

    def lat(x):
        return "%.1f / %.1f / %.1f (%.2f)" % (x["p50"], x["p90"], x["p99"], x["p99"] / x["p50"])
    print("| %s | %s→%s | %.0f | %s | %.0f | %s | %.0f | %.1f / %.1f (%.2f) | %.0f | %s | **%.2f×** | %.2f× | %.2f× | %s |" % (
        lab, C["load"][0], C["load"][1], z["rate"], lat(z), k["rate"], lat(k), m["rate"], m["p50"], m["p99"],
        m["p99"] / m["p50"], b["rate"], lat(b), z["rate"] / b["rate"], k["rate"] / b["rate"], z["p50"] / b["p50"],
        ", ".join("%.0f" % x["steal_ms_per_s"] for x in (z, k, m, b))))

print("\n### Throughput ceiling on 2 CPUs (CPU per request: rusage mean + kworker above the idle rate)\n")
print("| run | idle block busy ms/s | zygote ms/req → req/s | without netns | clone variant | moat run | "
      "bare python3 | zygote ÷ bare | clone ÷ bare |")
print("|---|---:|---|---|---|---|---|---:|---:|")
for lab, f in RUNS:
    d = load(f)
    A, B = d["A"]["cases"], d["B"]

    def cell(k):
        kw = max(0.0, B["cases"][k]["kworker_per_req"])
        x = A[k]["cpu"]["mean"] + kw
        return x, "%.2f + %.2f = %.2f → %.0f" % (A[k]["cpu"]["mean"], kw, x, 2000 / x)
    zx, zs = cell("zygote")
    _, ns = cell("zygote-nonetns")
    kx, ks = cell("zygote-clone")
    _, ms_ = cell("moat run")
    bx, bs = cell("bare python3")
    print("| %s | %.0f | %s | %s | %s | %s | %s | **%.2f×** | %.2f× |" % (
        lab, B["idle_busy_ms_per_s"], zs, ns, ks, ms_, bs, bx / zx, bx / kx))

print("\n/proc/stat busy minus the idle rate, ms per request (phase B; only meaningful when the idle block was quiet):\n")
print("| run | idle busy ms/s | steal ms/s | zygote | no-netns | clone | moat run | bare |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for lab, f in RUNS:
    B = load(f)["B"]
    c = B["cases"]
    print("| %s | %.0f | %.0f | %s |" % (lab, B["idle_busy_ms_per_s"], B["steal_ms_per_s"], " | ".join(
        "%.2f" % c[k]["busy_minus_idle_per_req"] for k in ("zygote", "zygote-nonetns", "zygote-clone",
                                                         "moat run", "bare python3"))))

for name in ZS:
    print("\n### Steps: %s (root, keeps caps; ms, one client)\n" % name)
    st = load("root-keep")["A"]["cases"][name]["steps"]
    print("| step | p50 | p90 |")
    print("|---|---:|---:|")
    for k, v in st.items():
        print("| %s | %.3f | %.3f |" % (k, v["p50"], v["p90"]))
nn = load("root-keep")["A"]["cases"]["zygote-nonetns"]["steps"]
print("\n(no-netns: unshare step %.3f ms p50, total %.3f)" % (nn["unshare(NS,PID,NET,IPC,UTS,CGROUP)"]["p50"],
                                                        nn["TOTAL arrive -> reaped"]["p50"]))
print("\nkworker ms per request by block (phase B):")
for lab, f in RUNS:
    B = load(f)["B"]["cases"]
    print("- %s: zygote %s; no-netns %s; clone %s" % (f, *(
        [round(b["kworker_ms"] / b["k"], 2) for b in B[k]["blocks"]] for k in ("zygote", "zygote-nonetns", "zygote-clone"))))
for lab, f in RUNS:
    P = load(f).get("P", {})
    print("- probes %s: %s" % (f, P))
