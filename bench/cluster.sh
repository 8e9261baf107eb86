#!/bin/bash
# Throughput of moat serve scaled out: two nodes behind HAProxy (hash of
# X-Sandbox-Id, one shared Redis) against one node, at 8 concurrent
# clients, each sending the same request: a Python script, run cold in a
# fresh sandbox, that sets one key in its sandboxId's store (kvEnabled).
# Client i uses sandbox id bench-<i>. The cluster is tests/cluster/lib.sh's
# (network namespaces, veths; root). Figures, not a test: nothing is
# asserted on timing.
#
#   bash bench/cluster.sh [PATH/TO/moat]            (make bench-cluster)
# Environment: REQUESTS per configuration (320), ROUNDS (4), WARMUP per
# configuration (16), CLIENTS (8).
#
# Four configurations, all up at once, measured in ROUNDS interleaved
# passes (the order rotates) so that a shared machine's load drifts over
# all of them alike:
#   one node          node 1 directly (--max-concurrent = CPUs, the default)
#   one node + proxy  node 1 behind an HAProxy of its own
#   two nodes + proxy nodes 1 and 2 behind HAProxy
#   one node, 2x slots node 3 directly, --max-concurrent = 2 x CPUs: the
#                     run slots of two nodes in one process
# On a machine of 2 CPUs two nodes share the CPUs one node already uses:
# the ratios show what the proxy, a second process and more run slots
# cost or give, not a speed-up from more machines.
set -u
here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
RUNTIME=$(cd "${RUNTIME:-$here/../runtime}" && pwd)
REQUESTS=${REQUESTS:-320}
ROUNDS=${ROUNDS:-4}
WARMUP=${WARMUP:-16}
CLIENTS=${CLIENTS:-8}
. "$here/../tests/cluster/lib.sh"

if ! why=$(cl_can_run); then
	echo "bench-cluster: $why" >&2
	exit 2
fi
trap 'cl_cleanup' EXIT
trap 'exit 130' INT TERM
CPUS=$(getconf _NPROCESSORS_ONLN)
cl_init && cl_redis_start 3 && cl_node_start 1 redis && cl_node_start 2 redis &&
	cl_node_start 3 redis --max-concurrent $((2 * CPUS)) || exit 1
cl_haproxy_start 1 haproxy-one || exit 1
LB1=http://127.0.0.1:$CL_HAPROXY_PORT
cl_haproxy_start "1 2" haproxy-two || exit 1
LB2=http://127.0.0.1:$CL_HAPROXY_PORT
URLS=("http://$CL_NODE1:$CL_PORT" "$LB1" "$LB2" "http://$CL_NODE3:$CL_PORT")
NAMES=("one node, direct" "one node behind HAProxy" "two nodes behind HAProxy"
	"one node, direct, --max-concurrent $((2 * CPUS))")
CODE='from spin_sdk import key_value
key_value.open_default().set("n", b"1")
print("ok")'
bench() { "$CL_PY" "$CL_LIB_DIR/client.py" bench "$1/py/bench" "$CL_TOKEN" "$CLIENTS" "$2" "$CODE"; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for c in 0 1 2 3; do bench "${URLS[$c]}" "$WARMUP" >/dev/null; done
b2=$(cl_py_served "http://$CL_NODE2:$CL_PORT")
per=$((REQUESTS / ROUNDS))
for r in $(seq 0 $((ROUNDS - 1))); do
	for k in 0 1 2 3; do
		c=$(( (k + r) % 4 ))
		echo "$c $(bench "${URLS[$c]}" "$per")" >>"$CL_DIR/results"
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
# node 1 also served the one-node passes: node 2's count tells the split
n2=$(( $(cl_py_served "http://$CL_NODE2:$CL_PORT") - b2 ))

echo "moat serve, $CLIENTS clients, $REQUESTS requests per configuration in $ROUNDS interleaved rounds (after $WARMUP), $CPUS CPUs, --max-concurrent $CPUS per node unless said, --pool 0, one Redis (AOF, fsync always) on the host; load average $load0 before, $load1 after"
echo
"$CL_PY" - "$CL_DIR/results" "$CPUS" "$n2" "$CLIENTS" "${NAMES[@]}" <<'PY'
import json, sys
path, cpus, n2, clients, names = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                                  sys.argv[5:])
agg = {c: {"ok": 0, "failed": 0, "seconds": 0.0, "lat": []} for c in range(4)}
for line in open(path):
    c, j = line.split(" ", 1)
    j, a = json.loads(j), agg[int(c)]
    a["ok"] += j["ok"]; a["failed"] += j["failed"]; a["seconds"] += j["seconds"]
    a["lat"] += j["latenciesMs"]
def pct(l, q):
    l = sorted(l)
    return round(l[min(len(l) - 1, int(q * len(l)))]) if l else "-"
print("| configuration | ok | failed | req/s | p50 ms | p95 ms |")
print("|---|---|---|---|---|---|")
rps = {}
for c in range(4):
    a = agg[c]
    rps[c] = a["ok"] / a["seconds"] if a["seconds"] else 0
    print("| %s | %d | %d | %.1f | %s | %s |" % (names[c], a["ok"], a["failed"], rps[c],
                                                pct(a["lat"], .5), pct(a["lat"], .95)))
print()
print("two nodes behind HAProxy ÷ one node direct: %.2f; ÷ one node behind HAProxy: %.2f; "
      "÷ one node with twice the slots: %.2f" % (rps[2] / rps[0], rps[2] / rps[1], rps[2] / rps[3]))
if cpus <= 2:
    print("On %d CPUs the two nodes share the CPUs of one: these ratios are overhead (the proxy, a "
          "second process) and run-slot effects, not a speed-up from more machines." % cpus)
two = agg[2]["ok"] + agg[2]["failed"]
print("In the two-node passes node 2 served %d of %d requests (the %s clients' sandbox ids hash"
      " onto both nodes)." % (n2, two, clients))
PY
