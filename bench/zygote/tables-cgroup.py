#!/usr/bin/python3
"""bench/zygote/tables-cgroup.py -- the tables of README.md "The per-request
cgroup leaf" from the cgroup-*.json of one round (bench.py --cgroup; round 1
had no pre-attached case: "-")
    python3 bench/zygote/tables-cgroup.py bench/zygote/results/cgroup-r3"""
import builtins
import json
import os
import re
import sys


def print(*a, **k):  # a case the round did not have: "-" instead of nan
    builtins.print(*[re.sub(r"[+-]?nan( / [+-]?nan)*( \([+-]?nan\))?", "-", str(x)) for x in a], **k)

D = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "cgroup")
RUNS = [("root, zygote keeps caps", "cgroup-root-keep"),
        ("root, zygote has no caps", "cgroup-root-nocaps"),
        ("root, keeps caps (again)", "cgroup-root-keep-2")]
RUNS = [(l, f) for l, f in RUNS if os.path.exists(os.path.join(D, f + ".json"))]
CL, CG, CD, BA = "zygote-clone", "clone+cgroup", "clone+cgroup, rmdir deferred", "bare python3"
CP = "clone+cgroup, pre-attached"


NAN = {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "mean": float("nan")}
EMPTY = {"wall": NAN, "cpu": NAN, "rate": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan"),
         "steal_ms_per_s": float("nan"), "kworker_per_req": 0.0, "busy_minus_idle_per_req": float("nan"),
         "cg_slow": {"slow": 0, "n": float("nan")}}


def load(f):
    with open(os.path.join(D, f + ".json")) as fh:
        d = json.load(fh)
    for p in ("A", "B", "C"):
        d[p]["cases"].setdefault(CP, EMPTY)
    return d


def w(x):
    return "%.1f / %.1f / %.1f" % (x["p50"], x["p90"], x["p99"])


print("### One client (phase A: 200 interleaved rounds of 7 cases; ms; CPU = children + zygote + driver's cgroup work)\n")
print("| run | load before→after | steal ms/s | bare wall p50 / p90 / p99 | bare CPU p50 | clone wall p50 / p90 / p99 "
      "| clone CPU p50 | clone+cgroup wall p50 / p90 / p99 | clone+cgroup CPU p50 | rmdir deferred: wall p50 / p90 / p99 "
      "| its CPU p50 (+ rmdir thread mean) | pre-attached: wall p50 / p90 / p99 | its CPU p50 "
      "| added by the cgroup: wall p50 (inline / deferred / pre-attached), CPU p50 (inline / pre-attached) |")
print("|---|---|---:|---|---:|---|---:|---|---:|---|---|---|---:|---|")
for lab, f in RUNS:
    A = load(f)["A"]
    c = A["cases"]
    dr = A.get("cg_rmdir_deferred") or {"rmdir_cpu": {"mean": 0}}
    print("| %s | %s→%s | %.0f | %s | %.2f | %s | %.2f | %s | %.2f | %s | %.2f (+%.2f) | %s | %.2f | %+.1f / %+.1f / %+.1f, %+.2f / %+.2f |" % (
        lab, A["load"][0], A["load"][1], A["steal_ms_per_s"], w(c[BA]["wall"]), c[BA]["cpu"]["p50"],
        w(c[CL]["wall"]), c[CL]["cpu"]["p50"], w(c[CG]["wall"]), c[CG]["cpu"]["p50"], w(c[CD]["wall"]),
        c[CD]["cpu"]["p50"], dr["rmdir_cpu"]["mean"], w(c[CP]["wall"]), c[CP]["cpu"]["p50"],
        c[CG]["wall"]["p50"] - c[CL]["wall"]["p50"], c[CD]["wall"]["p50"] - c[CL]["wall"]["p50"],
        c[CP]["wall"]["p50"] - c[CL]["wall"]["p50"],
        c[CG]["cpu"]["p50"] - c[CL]["cpu"]["p50"], c[CP]["cpu"]["p50"] - c[CL]["cpu"]["p50"]))

print("\n### The cgroup step itself (phase A, clone+cgroup with inline rmdir; ms)\n")
print("| run | mkdir 4 leaves + 5 limit writes, wall p50 / p90 | A's pidfd arrives after p50 | 4 cgroup.procs writes wall p50 / p90 / p99 "
      "| their CPU p50 / p90 | stats + rmdir inline wall p50 / p99 (retried) | deferred rmdir: enqueue→done p50 / p99, CPU mean (retried) "
      "| driver CPU for it all p50 / mean | peak MiB / cpuacct ms p50 |")
print("|---|---|---:|---|---|---|---|---|---|")
for lab, f in RUNS:
    A = load(f)["A"]
    c = A["cases"][CG]
    s = c["cg"]
    dr = A.get("cg_rmdir_deferred")
    drs = "%.2f / %.2f, %.3f (%d)" % (dr["rmdir_wall"]["p50"], dr["rmdir_wall"]["p99"], dr["rmdir_cpu"]["mean"],
                                      dr["rmdir_retried"]) if dr else "-"
    print("| %s | %.2f / %.2f | %.2f | %.2f / %.2f / %.2f | %.3f / %.3f | %.3f / %.3f (%d) | %s | %.2f / %.2f | %.1f / %.2f |" % (
        lab, s["mkdir_limits_wall"]["p50"], s["mkdir_limits_wall"]["p90"], s["wait_pidfd"]["p50"], s["procs_wall"]["p50"],
        s["procs_wall"]["p90"], s["procs_wall"]["p99"], s["procs_cpu"]["p50"], s["procs_cpu"]["p90"],
        s["rmdir_wall"]["p50"], s["rmdir_wall"]["p99"], s["rmdir_retried"], drs, s["driver_cg_cpu"]["p50"],
        s["driver_cg_cpu"]["mean"], c["mem_peak_p50"], c["cpuacct_p50"]))

print("\n### How often a request's cgroup.procs write waits (> 2 ms), and for what\n")
print("| run | spaced (phase A, 1 client, other cases between) | back to back, 1 client (phase B) | back to back, 2 clients (phase C) "
      "| the waiting write: wall p50 / max, CPU p50 (phase A) | pre-attached (off the request's wall): phase A, B, C |")
print("|---|---|---|---|---|---|")
for lab, f in RUNS:
    d = load(f)

    def fr(s):
        return "%d / %d = %.0f %% (first write %d, later %d)" % (s["slow"], s["n"], 100.0 * s["slow"] / s["n"],
                                                                 s["first_slow"], s["later_slow"])

    def both(sec):
        a, b = sec["cases"][CG]["cg_slow"], sec["cases"][CD]["cg_slow"]
        m = {k: a[k] + b[k] for k in ("slow", "n", "first_slow", "later_slow")}
        return fr(m)
    sa = d["A"]["cases"][CG]["cg_slow"]
    pa = ", ".join("%.0f %%" % (100.0 * d[p]["cases"][CP]["cg_slow"]["slow"] / d[p]["cases"][CP]["cg_slow"]["n"])
                   for p in ("A", "B", "C"))
    print("| %s | %s | %s | %s | %s | %s |" % (lab, both(d["A"]), both(d["B"]), both(d["C"]),
                                               "%.1f / %.1f, %.3f" % (sa["slow_wall_p50"], sa["slow_wall_max"], sa["slow_cpu_p50"])
                                               if sa["slow"] else "-", pa))

print("\n### Two concurrent clients (phase C: 400 requests per case, rotated order)\n")
print("| run | load before→after | bare req/s | bare p50 / p90 / p99 | clone req/s | clone p50 / p90 / p99 (p99÷p50) "
      "| clone+cgroup req/s | p50 / p90 / p99 (p99÷p50) | rmdir deferred req/s | p50 / p90 / p99 (p99÷p50) "
      "| pre-attached req/s | p50 / p90 / p99 (p99÷p50) "
      "| ÷ bare rate: clone, +cgroup, deferred, pre-attached | steal ms/s (bare, clone, +cg, deferred, pre) |")
print("|---|---|---:|---|---:|---|---:|---|---:|---|---:|---|---|---|")
for lab, f in RUNS:
    C = load(f)["C"]
    c = C["cases"]
    b, k, g, q, pa = c[BA], c[CL], c[CG], c[CD], c[CP]

    def lat(x):
        return "%.1f / %.1f / %.1f (%.2f)" % (x["p50"], x["p90"], x["p99"], x["p99"] / x["p50"])
    print("| %s | %s→%s | %.0f | %.1f / %.1f / %.1f | %.0f | %s | %.0f | %s | %.0f | %s | %.0f | %s | %.2f×, **%.2f×**, **%.2f×**, **%.2f×** | %s |" % (
        lab, C["load"][0], C["load"][1], b["rate"], b["p50"], b["p90"], b["p99"], k["rate"], lat(k), g["rate"], lat(g),
        q["rate"], lat(q), pa["rate"], lat(pa), k["rate"] / b["rate"], g["rate"] / b["rate"], q["rate"] / b["rate"],
        pa["rate"] / b["rate"], ", ".join("%.0f" % x["steal_ms_per_s"] for x in (b, k, g, q, pa))))

print("\n### CPU per request and the ceiling on 2 CPUs (phase A rusage mean + driver + kworker above idle from phase B; "
      "/proc/stat busy minus idle from phase B)\n")
print("| run | idle busy ms/s, steal ms/s (phase B) | bare ms/req → req/s | clone | clone+cgroup | rmdir deferred "
      "| pre-attached | ceiling ÷ bare: clone, +cgroup, pre-attached | /proc/stat ms/req: bare, clone, +cgroup, deferred, pre-attached |")
print("|---|---|---|---|---|---|---|---|---|")
for lab, f in RUNS:
    d = load(f)
    A, B = d["A"]["cases"], d["B"]
    dr = d["A"].get("cg_rmdir_deferred") or {"rmdir_cpu": {"mean": 0}}

    def cell(k, extra=0.0):
        kw = max(0.0, B["cases"][k]["kworker_per_req"])
        x = A[k]["cpu"]["mean"] + extra + kw
        return x, "%.2f + %.2f = %.2f → %.0f" % (A[k]["cpu"]["mean"] + extra, kw, x, 2000 / x)
    bx, bs = cell(BA)
    kx, ks = cell(CL)
    gx, gs = cell(CG)
    _, qs = cell(CD, dr["rmdir_cpu"]["mean"])
    px, ps = cell(CP)
    print("| %s | %.0f, %.0f | %s | %s | %s | %s | %s | %.2f×, **%.2f×**, **%.2f×** | %s |" % (
        lab, B["idle_busy_ms_per_s"], B["steal_ms_per_s"], bs, ks, gs, qs, ps, bx / kx, bx / gx, bx / px,
        ", ".join("%.2f" % B["cases"][k]["busy_minus_idle_per_req"] for k in (BA, CL, CG, CD, CP))))

print()
for lab, f in RUNS:
    d = load(f)
    print("- %s: clone+cgroup step 'pid 1 past the go signal' p50 %.2f ms (clone without cgroup: %.2f); probe: %s" % (
        f, d["A"]["cases"][CG]["steps"]["pid 1 past the go signal, fds 0/1 set"]["p50"],
        d["A"]["cases"][CL]["steps"]["pid 1 past the go signal, fds 0/1 set"]["p50"],
        d.get("P", {}).get("cgroup memory 400 MiB under 256 MiB")))
