#!/bin/bash
# Two `moat serve` nodes on this machine, one Redis, HAProxy in front
# (tests/cluster/lib.sh builds it), and what a cluster must hold:
#   shared      a value written through node 1 is read through node 2
#   sticky      one sandbox id goes to one node while both are up (HAProxy's
#               hash of X-Sandbox-Id; who served is read from each node's
#               /metrics), and the ids spread over both nodes
#   kill        node killed (SIGKILL) under two writers: no acknowledged
#               write is lost, the other node serves that id afterwards
#   sqlite      with the SQLite backend (a file per node) state is not shared
# Bounded loops only; loopback, the test's own namespaces and veths only;
# every process, namespace and file goes on every exit path.
#
#   bash tests/cluster/two-node.sh [PATH/TO/moat]      (make check-cluster)
# Prints TAP (tools/tap.sh), a line per check, which tools/check.sh sums;
# without root (or haproxy, redis-server...) one "ok 1 - ... # SKIP why".
set -u
here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
RUNTIME=${RUNTIME:-$here/../../runtime}
. "$here/lib.sh"

checks=0
failures=0
errors=0
summary() {
	local pass=$((checks - failures - errors))
	echo "1..$checks"
	echo "# cluster/two-node: $pass passed, $((failures + errors)) failed"
}
pass() { checks=$((checks + 1)); echo "ok $checks - $*"; }
fail() { checks=$((checks + 1)); failures=$((failures + 1)); echo "not ok $checks - $*"; }
# setup broke: the run ends here, counted as an error
die() {
	checks=$((checks + 1))
	errors=$((errors + 1))
	echo "not ok $checks - setup: $*"
	for f in "$CL_DIR"/node*.log "$CL_DIR"/haproxy.log; do
		[ -f "$f" ] && { echo "--- tail of $f"; tail -n 5 "$f"; }
	done
	summary
	exit 1
}

if ! why=$(cl_can_run); then
	echo "note: cluster/two-node: $why; not run"
	echo "ok 1 - cluster/two-node # SKIP $why"
	exit 0
fi
[ -x "$MOAT" ] || die "$MOAT is not built (make)"
[ -d "$RUNTIME" ] || die "no runtime shims at $RUNTIME (set RUNTIME)"
RUNTIME=$(cd "$RUNTIME" && pwd)

trap 'cl_cleanup' EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
cl_init || die "no address range"
cl_redis_start || die "redis-server"
cl_node_start 1 redis || die "node 1"
cl_node_start 2 redis || die "node 2"
cl_haproxy_start || die "haproxy"
N1=http://$CL_NODE1:$CL_PORT
N2=http://$CL_NODE2:$CL_PORT
LB=http://127.0.0.1:$CL_HAPROXY_PORT

KV='from spin_sdk import key_value
s = key_value.open_default()
'
# /py requests node N has answered (all, or those that ran: outcome ok)
node_url() { [ "$1" = 1 ] && echo "$N1" || echo "$N2"; }
served() { cl_py_served "$(node_url "$1")"; }
served_ok() { cl_py_served "$(node_url "$1")" ok; }

# ---- shared: node 1 writes, node 2 reads
s1=$(served 1)
s2=$(served 2)
r=$(cl_call "$N1/py/shared" alpha "${KV}s.set('k', b'from-node-1'); print('ok')")
[ "$r" = '200 "ok\n"' ] || die "write through node 1: $r"
r=$(cl_call "$N2/py/shared" alpha "${KV}print(s.get('k'))")
if [ "$r" = "200 \"b'from-node-1'\\n\"" ]; then
	pass "shared: a value written through node 1 is read through node 2"
else
	fail "shared: node 2 read: $r"
fi
[ "$(($(served 1) - s1))" = 1 ] && [ "$(($(served 2) - s2))" = 1 ] ||
	fail "shared: the requests did not go to the nodes addressed"

# ---- sticky: 6 ids, 3 requests each, through HAProxy
ids_on_1=0
ids_on_2=0
split=""
for i in 1 2 3 4 5 6; do
	a0=$(served 1)
	b0=$(served 2)
	for j in 1 2 3; do
		r=$(cl_call "$LB/py/s$i" "user-$i" "${KV}s.set('n', b'$j'); print('ok')")
		[ "$r" = '200 "ok\n"' ] || fail "sticky: user-$i request $j: $r"
	done
	a=$(($(served 1) - a0))
	b=$(($(served 2) - b0))
	if [ "$a" = 3 ] && [ "$b" = 0 ]; then
		ids_on_1=$((ids_on_1 + 1))
	elif [ "$a" = 0 ] && [ "$b" = 3 ]; then
		ids_on_2=$((ids_on_2 + 1))
	else
		split="$split user-$i($a/$b)"
	fi
done
if [ -z "$split" ]; then
	pass "sticky: each of 6 ids served by one node ($ids_on_1 on node 1, $ids_on_2 on node 2)"
else
	fail "sticky: ids served by both nodes:$split"
fi
if [ "$ids_on_1" -gt 0 ] && [ "$ids_on_2" -gt 0 ]; then
	pass "sticky: the ids spread over both nodes"
else
	fail "sticky: every id went to one node ($ids_on_1/$ids_on_2)"
fi

# ---- kill: which node has "durable", two writers, kill -9 it under them
p1=$(served 1)
p2=$(served 2)
r=$(cl_call "$LB/py/d-probe" durable "${KV}print('ok')")
[ "$r" = '200 "ok\n"' ] || die "durable probe: $r"
if [ "$(($(served 1) - p1))" = 1 ]; then victim=1 other=2; else victim=2 other=1; fi
[ "$(($(served $victim) - $([ $victim = 1 ] && echo $p1 || echo $p2)))" = 1 ] ||
	die "the probe was served by no node"
# writer W: writes of key wW-i, one line per acknowledged one, until 8 have
# been sent after the kill (the file "killed" is there). Runs are fast enough
# that a fixed count could all be done before the kill, leaving nothing to
# show that the other node took the id over; 400 writes at most.
writer() {
	local w=$1 i r after=0
	for i in $(seq 400); do
		r=$(cl_call "$LB/py/durable" durable "${KV}s.set('w$w-$i', b'$i'); print('ok')")
		if [ "$r" = '200 "ok\n"' ]; then
			echo "w$w-$i" >>"$CL_DIR/acked"
		else
			echo "w$w-$i $r" >>"$CL_DIR/refused"
		fi
		if [ -e "$CL_DIR/killed" ]; then
			after=$((after + 1))
			[ "$after" -ge 8 ] && break
		fi
	done
}
: >"$CL_DIR/acked"
: >"$CL_DIR/refused"
rm -f "$CL_DIR/killed"
writer 1 &
wp1=$!
writer 2 &
wp2=$!
CL_PIDS="$CL_PIDS $wp1 $wp2" # an abort stops them too
for i in $(seq 300); do # until 4 writes are acknowledged (at most 30 s)
	[ "$(wc -l <"$CL_DIR/acked")" -ge 4 ] && break
	sleep 0.1
done
# one request surely in flight on the victim when it dies: it sleeps
# before its write (answered 200 only if the node lived through it)
cl_call "$LB/py/slow" durable "${KV}import time; time.sleep(3); s.set('slow', b'1'); print('ok')" \
	>"$CL_DIR/slow" &
slow_pid=$!
CL_PIDS="$CL_PIDS $slow_pid"
sleep 1 # its run has started on the victim (a cold start is ~0.3 s here)
victim_pid=$(eval echo "\$CL_PID$victim")
acked_before=$(wc -l <"$CL_DIR/acked")
other_before=$(served_ok $other)
kill -KILL "$victim_pid"
wait "$victim_pid" 2>/dev/null
: >"$CL_DIR/killed"
wait "$wp1" "$wp2" "$slow_pid"
other_after=$(served_ok $other) # before the check below, which goes to it too
slow=$(cat "$CL_DIR/slow")
case $slow in
'200 '*) fail "kill: the request in flight on node $victim was answered 200: $slow" ;;
*) pass "kill: the request in flight on node $victim when it died was not acknowledged (${slow%% *})" ;;
esac
acked=$(sort "$CL_DIR/acked")
n_acked=$(echo "$acked" | grep -c .)
n_refused=$(grep -c . "$CL_DIR/refused")
echo "kill: node $victim killed after $acked_before acknowledged writes; $n_acked acknowledged in all, $n_refused not"
[ "$acked_before" -ge 4 ] || fail "kill: fewer than 4 writes acknowledged before the kill"
r=$(cl_call "$( [ $other = 1 ] && echo "$N1" || echo "$N2")/py/check" durable \
	"${KV}print(' '.join(sorted(s.get_keys())))")
stored=$(echo "$r" | sed -n 's/^200 "\(.*\)\\n"$/\1/p' | tr ' ' '\n' | sort)
lost=$(comm -23 <(echo "$acked") <(echo "$stored"))
if [ -n "$stored" ] && [ -z "$lost" ]; then
	pass "kill: all $n_acked acknowledged writes are in the store (read through node $other)"
else
	fail "kill: acknowledged writes missing: $(echo $lost) (read: $r)"
fi
if [ "$other_after" -gt "$other_before" ] && [ "$n_acked" -gt "$acked_before" ]; then
	pass "kill: node $other served the id after the kill ($((other_after - other_before)) writes)"
else
	fail "kill: node $other served no write of the id after the kill ($other_before -> $other_after)"
fi
last=$(tail -n 1 "$CL_DIR/acked") # the last acknowledged write
o0=$(served_ok $other)
r=$(cl_call "$LB/py/after" durable "${KV}print(s.get('$last') is not None)")
if [ "$r" = '200 "True\n"' ] && [ "$(($(served_ok $other) - o0))" = 1 ]; then
	pass "kill: HAProxy sends the id to node $other"
else
	fail "kill: a read through HAProxy after the kill: $r"
fi

# ---- sqlite: one file per node, nothing shared
cl_node_stop $other
cl_node_start 1 "$CL_DIR/node1.sqlite3" || die "node 1 (sqlite)"
cl_node_start 2 "$CL_DIR/node2.sqlite3" || die "node 2 (sqlite)"
r=$(cl_call "$N1/py/sq" alpha "${KV}s.set('k', b'only-on-1'); print('ok')")
[ "$r" = '200 "ok\n"' ] || fail "sqlite: write through node 1: $r"
r1=$(cl_call "$N1/py/sq" alpha "${KV}print(s.get('k'))")
r2=$(cl_call "$N2/py/sq" alpha "${KV}print(s.get('k'))")
if [ "$r1" = "200 \"b'only-on-1'\\n\"" ] && [ "$r2" = '200 "None\n"' ] &&
	[ -s "$CL_DIR/node1.sqlite3" ] && [ -s "$CL_DIR/node2.sqlite3" ]; then
	pass "sqlite: node 1 reads its own write, node 2 (its own file) does not see it"
else
	fail "sqlite: node 1 read $r1, node 2 read $r2"
fi
cl_node_stop 1
cl_node_stop 2
echo "cluster/two-node: $(( $(date +%s) - t0 )) s"
summary
[ "$failures" -eq 0 ]
