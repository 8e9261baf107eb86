#!/bin/sh
# The key-value store from inside a sandbox (make bench-kv): one moat exec
# per backend runs N set+get pairs through the Python shim and times each
# call with perf_counter_ns, so the figures are the round trip program →
# broker (moat's pump) → store → program, not moat's start-up. Prints p50,
# p90 and p99 per operation for SQLite (a file in a temp dir, WAL, FULL
# sync: each set is one fsync'd transaction) and Redis (a redis-server the
# script starts on a free loopback port, appendfsync everysec and always),
# and the run's wall time. KV_BENCH_DIR (default /var/tmp) holds the
# files; KV_BENCH_OPS (default 500) the pairs. Nothing is asserted.
set -eu
moat=${1:?usage: bench/kv.sh path/to/moat}
n=${KV_BENCH_OPS:-500}
top=$(cd "$(dirname "$0")/.." && pwd)
# the store on a real disk (not tmpfs, where fsync costs nothing)
tmp=$(mktemp -d "${KV_BENCH_DIR:-/var/tmp}/moat-kvbench-XXXXXX")
redis_pid=
cleanup() {
	[ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

code=$(cat <<PY
import time, statistics
from spin_sdk import key_value
s = key_value.open_default()
sets, gets = [], []
v = b'x' * 100
for i in range($n):
    k = 'k%d' % (i % 50)
    t = time.perf_counter_ns(); s.set(k, v); sets.append(time.perf_counter_ns() - t)
    t = time.perf_counter_ns(); s.get(k); gets.append(time.perf_counter_ns() - t)
def q(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(len(xs) * p))] / 1000
print('set p50 %.0f us  p90 %.0f us  p99 %.0f us' % (q(sets, .5), q(sets, .9), q(sets, .99)))
print('get p50 %.0f us  p90 %.0f us  p99 %.0f us' % (q(gets, .5), q(gets, .9), q(gets, .99)))
PY
)
req=$(python3 -c 'import json,sys; print(json.dumps({"code": sys.argv[1], "sandboxId": "bench", "kvEnabled": True, "timeout": 120000}))' "$code")

run() { # label spec
	t0=$(date +%s%N)
	out=$(printf '%s' "$req" | "$moat" exec --kv "$2" --runtime "$top/runtime")
	t1=$(date +%s%N)
	printf '%s' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if r.get("exitCode") != 0:
    sys.exit("bench: the run failed: %s" % json.dumps(r)[:600])
for line in r["stdout"].splitlines():
    print("%-22s %s" % (sys.argv[1], line))
' "$1"
	echo "$1: $n set+get pairs, run wall $(( (t1 - t0) / 1000000 )) ms"
}

echo "moat kv bench: $n set+get pairs of 100-byte values, $(nproc) CPUs, $(uname -r)"
run "sqlite (fsync)" "$tmp/kv.sqlite3"
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	for fsync in everysec always; do
		port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		mkdir -p "$tmp/redis-$fsync"
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly yes \
			--appendfsync "$fsync" --dir "$tmp/redis-$fsync" --daemonize no >/dev/null 2>&1 &
		redis_pid=$!
		i=0
		until redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; do
			i=$((i + 1)); [ $i -lt 200 ] || { echo "bench: redis-server did not start" >&2; exit 1; }
			sleep 0.05
		done
		run "redis ($fsync)" "redis://127.0.0.1:$port/0"
		kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_pid=
	done
else
	echo "redis: redis-server is not installed; not run"
fi
