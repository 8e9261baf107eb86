#!/bin/sh
# Bulk egress throughput: one TCP download of SIZE_MB MiB from a public-looking
# peer, bare, through pasta used directly as a user-mode uplink, through
# moat "network": true and through moat's proxy (allowedHosts: a CONNECT
# tunnel, "tunnel") (as root and rootless; RUNNERS=a,b picks rows); REPS
# interleaved repetitions,
# median MB/s. Then PAR (256) connections open at once from inside moat, each
# echoing 4 KiB: all must succeed. Then SINK (500) connections of a 32 MiB run
# to a peer that never reads, each sent to until nothing moves: the host's TCP
# memory at its highest above where it was (/proc/net/sockstat, root and
# rootless).
#
#   sudo sh bench/egress.sh [PATH/TO/moat]
# Environment: SIZE_MB (512), TUNNEL_MB (192: the tunnel rows' download; the
# proxy relays at most 256 MiB a run), REPS (3), PAR (256), SINK (500),
# PY (/usr/bin/python3).
#
# Nothing on the machine's own network is touched: everything runs in a
# network namespace "H" made here (the host), joined by a veth to a peer
# namespace "P" with 11.77.0.2/24 and 2a01:4f8:77::2/64 (public-looking, not
# documentation ranges), serving bench/egress_peer.py. H's default routes go
# via the peer (pasta copies them). Both are removed on exit.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
SIZE_MB=${SIZE_MB:-512}
REPS=${REPS:-3}
PAR=${PAR:-256}
SINK=${SINK:-500}
TUNNEL_MB=${TUNNEL_MB:-192} # the proxy relays at most 256 MiB a run
SINK_PORT=9200
PY=${PY:-/usr/bin/python3}
BYTES=$((SIZE_MB * 1048576))
PEER4=11.77.0.2
STREAM_PORT=9100
ECHO_PORT=9000

[ "$(id -u)" = 0 ] || { echo "egress.sh: needs root (ip netns)" >&2; exit 2; }
[ -x "$MOAT" ] || { echo "egress.sh: $MOAT not built (run make)" >&2; exit 2; }
command -v ip >/dev/null || { echo "egress.sh: needs iproute2" >&2; exit 2; }
[ -x "$PY" ] || { echo "egress.sh: needs $PY" >&2; exit 2; }

id=$$
H=moatbH$id
P=moatbP$id
tmp=$(mktemp -d /tmp/moat-egress-bench.XXXXXX)
chmod 755 "$tmp"
peer_pid=

cleanup() {
	[ -n "$peer_pid" ] && kill "$peer_pid" 2>/dev/null
	for ns in "$H" "$P"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a copy of moat and the client that uid 65534 can read and run
cp "$MOAT" "$tmp/moat"
cp "$here/egress_client.py" "$here/egress_peer.py" "$tmp/"
chmod 755 "$tmp/moat"
chmod 644 "$tmp/egress_client.py" "$tmp/egress_peer.py"

ip netns add "$H"
ip netns add "$P"
for ns in "$H" "$P"; do
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0
	ip -n "$ns" link set lo up
done
ip -n "$H" link add pub0 type veth peer name eth0 netns "$P"
ip -n "$H" addr add 11.77.0.1/24 dev pub0
ip -n "$H" addr add 2a01:4f8:77::1/64 dev pub0 nodad
ip -n "$H" link set pub0 up
ip -n "$P" addr add $PEER4/24 dev eth0
ip -n "$P" addr add 2a01:4f8:77::2/64 dev eth0 nodad
ip -n "$P" link set eth0 up
ip -n "$H" route add default via $PEER4
ip -n "$H" -6 route add default via 2a01:4f8:77::2

ip netns exec "$P" "$PY" "$tmp/egress_peer.py" "$PEER4,2a01:4f8:77::2" $STREAM_PORT $ECHO_PORT $SINK_PORT \
	> "$tmp/peer.out" 2> "$tmp/peer.err" &
peer_pid=$!
i=0
until grep -q ready "$tmp/peer.out" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "egress.sh: the peer did not start:" >&2; cat "$tmp/peer.err" >&2; exit 1; }
	sleep 0.1
done

PASTA=$(command -v pasta || true)
AS_NOBODY="setpriv --reuid 65534 --regid 65534 --clear-groups"
command -v setpriv >/dev/null || AS_NOBODY=

# one measurement: the runner's command prints "egress-bytes ... MBps X"
run_case() {
	name=$1
	shift
	out=$(timeout 300 ip netns exec "$H" env -i PATH=/usr/bin:/bin HOME=/nonexistent \
		EGRESS_HOST=$PEER4 EGRESS_PORT=$STREAM_PORT EGRESS_BYTES=$BYTES "$@" 2>"$tmp/err") || {
		echo "egress.sh: $name failed: $(tail -3 "$tmp/err")" >&2
		echo "fail"
		return
	}
	echo "$out" | sed -n 's/.*MBps \([0-9.]*\).*/\1/p' | tail -1
}

moat_cmd="$tmp/moat run --net --timeout 300s --env EGRESS_HOST=$PEER4 --env EGRESS_PORT=$STREAM_PORT --env EGRESS_BYTES=$BYTES $tmp/egress_client.py"
# pasta's own flags as moat used them (no port forwarding, gateway not mapped to the host);
# as root, --runas 0: otherwise pasta switches to nobody and cannot join its command's
# namespace here (it spins on EACCES)
pasta_cmd="$PASTA --quiet --config-net --no-map-gw -t none -u none -T none -U none -- $PY $tmp/egress_client.py"
pasta_root_cmd="$PASTA --runas 0 --quiet --config-net --no-map-gw -t none -u none -T none -U none -- $PY $tmp/egress_client.py"

# the same download through moat's proxy: allowedHosts, a CONNECT tunnel to the
# peer's address, a ClientHello first (what the proxy judges before relaying)
"$PY" -c 'import json, sys
print(json.dumps({"language": "python", "code": open(sys.argv[1]).read(), "timeout": 300000,
    "allowedHosts": ["https://%s:%s" % (sys.argv[2], sys.argv[3])],
    "env": {"EGRESS_HOST": sys.argv[2], "EGRESS_PORT": sys.argv[3], "EGRESS_BYTES": sys.argv[4],
            "EGRESS_TUNNEL": "1"}}))' "$tmp/egress_client.py" $PEER4 $STREAM_PORT $((TUNNEL_MB * 1048576)) > "$tmp/tunnel.json"
chmod 644 "$tmp/tunnel.json"

runners="bare moat"
[ -n "$PASTA" ] && runners="bare pasta moat"
runners="$runners tunnel"
[ -n "$AS_NOBODY" ] && runners="$runners moat-rootless tunnel-rootless"
[ -n "$PASTA" ] && [ -n "$AS_NOBODY" ] && runners="$runners pasta-rootless"
[ -n "$PASTA" ] || echo "egress.sh: pasta (Debian package passt) not installed: no pasta rows" >&2
[ -n "${RUNNERS:-}" ] && runners=$(echo "$RUNNERS" | tr ',' ' ')

for r in $runners; do : > "$tmp/res.$r"; done
rep=1
while [ $rep -le "$REPS" ]; do
	for r in $runners; do
		case $r in
		bare) v=$(run_case $r "$PY" "$tmp/egress_client.py") ;;
		pasta) v=$(run_case $r $pasta_root_cmd) ;;
		pasta-rootless) v=$(run_case $r $AS_NOBODY $pasta_cmd) ;;
		moat) v=$(run_case $r $moat_cmd) ;;
		moat-rootless) v=$(run_case $r $AS_NOBODY $moat_cmd) ;;
		tunnel) v=$(run_case $r sh -c "$tmp/moat exec < $tmp/tunnel.json") ;;
		tunnel-rootless) v=$(run_case $r $AS_NOBODY sh -c "$tmp/moat exec < $tmp/tunnel.json") ;;
		esac
		echo "$v" >> "$tmp/res.$r"
	done
	rep=$((rep + 1))
done

echo "# egress: one TCP download of $SIZE_MB MiB ($TUNNEL_MB MiB for tunnel rows) from $PEER4, MB/s (10^6 bytes/s), $REPS reps, median"
echo "# $(uname -r), $(nproc) CPUs, moat: $("$MOAT" version 2>/dev/null | head -1)"
printf '| %-15s | %-27s | %9s |\n' runner "runs" median
printf '|%s|%s|%s|\n' "-----------------" "-----------------------------" "----------:"
for r in $runners; do
	runs=$(tr '\n' ' ' < "$tmp/res.$r" | sed 's/ *$//')
	med=$(grep -v fail "$tmp/res.$r" | sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "n/a"}')
	printf '| %-15s | %-27s | %9s |\n' "$r" "$runs" "$med"
done

# PAR connections at once from inside moat, root and rootless
status=0
for who in root rootless; do
	pre=
	[ $who = rootless ] && { [ -n "$AS_NOBODY" ] || continue; pre=$AS_NOBODY; }
	out=$(timeout 180 ip netns exec "$H" env -i PATH=/usr/bin:/bin HOME=/nonexistent $pre "$tmp/moat" run --net \
		--timeout 120s --env EGRESS_HOST=$PEER4 --env EGRESS_PORT=$ECHO_PORT \
		--env EGRESS_PARALLEL="$PAR" "$tmp/egress_client.py" 2>&1) || status=1
	echo "parallel ($who): $(echo "$out" | grep egress-parallel || echo "$out" | tail -2)"
done

# SINK connections to a peer that never reads: the host's TCP memory, pages
tcp_mem() { awk '/^TCP:/ { for (i = 1; i < NF; i++) if ($i == "mem") print $(i + 1) }' /proc/net/sockstat; }
page=$(getconf PAGESIZE)
for who in root rootless; do
	pre=
	[ $who = rootless ] && { [ -n "$AS_NOBODY" ] || continue; pre=$AS_NOBODY; }
	base=$(tcp_mem)
	peak=$base
	timeout 180 ip netns exec "$H" env -i PATH=/usr/bin:/bin HOME=/nonexistent $pre "$tmp/moat" run --net \
		--memory 32 --timeout 120s --env EGRESS_HOST=$PEER4 --env EGRESS_PORT=$SINK_PORT \
		--env EGRESS_SINK="$SINK" "$tmp/egress_client.py" > "$tmp/sink.out" 2>&1 &
	pid=$!
	while kill -0 $pid 2>/dev/null; do
		m=$(tcp_mem)
		[ "$m" -gt "$peak" ] && peak=$m
		sleep 0.05
	done
	wait $pid || status=1
	sleep 1
	after=$(tcp_mem)
	echo "sink ($who): $(grep egress-sink "$tmp/sink.out" || tail -2 "$tmp/sink.out"): host TCP memory" \
		"+$(( (peak - base) * page / 1048576 )) MiB at most, +$(( (after - base) * page / 1048576 )) MiB 1 s after"
done
exit $status
