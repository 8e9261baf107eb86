#!/bin/bash
# Live sandboxes and sessions on two `moat serve` nodes behind HAProxy, with
# the configuration docs/scaling.md gives ("Live sandboxes and sessions: one
# node each"): 20 sandboxes made through HAProxy, every later request on one
# reaching the node that made it (each node's /metrics and its own list),
# another node's id answered 421, sessions the same; then kill -9 of node-a:
# its callers get HAProxy's 410 naming the reason while node-b's sandboxes
# and sessions carry on. tests/cluster/live.py drives it; the nodes use
# SQLite stores of their own (no Redis); node-a runs as root, node-b as uid
# 65534 (rootless). Loopback, the test's own
# namespaces and veths only; every process, namespace and file goes on
# every exit path.
#
#   bash tests/cluster/live.sh [PATH/TO/moat]      (make check-cluster)
# Prints TAP; without root (or haproxy...) one "ok 1 - ... # SKIP why".
set -u
here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
RUNTIME=${RUNTIME:-$here/../../runtime}
. "$here/lib.sh"

die() {
	echo "not ok 1 - cluster/live: setup: $*"
	for f in "$CL_DIR"/node*.log "$CL_DIR"/haproxy-live.log; do
		[ -f "$f" ] && { echo "# tail of $f"; tail -n 5 "$f" | sed 's/^/# /'; }
	done
	echo "1..1"
	exit 1
}

if ! why=$(cl_can_run); then
	echo "note: cluster/live: $why; not run"
	echo "ok 1 - cluster/live # SKIP $why"
	echo "1..1"
	exit 0
fi
[ -x "$MOAT" ] || die "$MOAT is not built (make)"
[ -d "$RUNTIME" ] || die "no runtime shims at $RUNTIME (set RUNTIME)"
RUNTIME=$(cd "$RUNTIME" && pwd)

trap 'cl_cleanup' EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
cl_init || die "no address range"
cl_netns 1 || die "network namespace 1"
cl_netns 2 || die "network namespace 2"
# node-a as root, node-b rootless (uid 65534): both modes in one cluster
CL_ROOTLESS=2
cl_node_start 1 "$CL_DIR/a.sqlite3" --node node-a --max-sandboxes 16 || die "node-a"
cl_node_start 2 "$CL_DIR/b.sqlite3" --node node-b --max-sandboxes 16 || die "node-b"
[ "$(stat -c %u "/proc/$CL_PID1")" = 0 ] && [ "$(stat -c %u "/proc/$CL_PID2")" = 65534 ] ||
	die "node-a is not root or node-b not uid 65534"
cl_haproxy_doc_start || die "haproxy"
"$CL_PY" "$here/live.py" "http://127.0.0.1:$CL_HAPROXY_PORT" "http://$CL_NODE1:$CL_PORT" \
	"http://$CL_NODE2:$CL_PORT" "$CL_TOKEN" "$CL_PID1"
rc=$?
if [ "$rc" -ne 0 ]; then
	for f in "$CL_DIR"/node*.log "$CL_DIR"/haproxy-live.log; do
		[ -f "$f" ] && { echo "# tail of $f"; tail -n 8 "$f" | sed 's/^/# /'; }
	done
fi
echo "# cluster/live: $(( $(date +%s) - t0 )) s"
exit "$rc"
