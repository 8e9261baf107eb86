# A two-node moat serve cluster on this machine, for tests/cluster/two-node.sh
# and bench/cluster.sh (sourced, bash). Each node is a `moat serve` in a
# network namespace of its own, reached over a veth pair the script creates
# (host end 10.213.<k>.1/30, node end 10.213.<k>.2/30, k picked free); one
# redis-server in the host's namespace listens on 127.0.0.1 and on the host
# ends of the veths; HAProxy on 127.0.0.1 hashes X-Sandbox-Id onto the nodes
# (balance hdr(X-Sandbox-Id), hash-type consistent), health-checking /healthz.
# Nothing leaves the machine: loopback, the test's veths and namespaces only.
#
# The caller sets MOAT (the binary) and RUNTIME (the shims), calls cl_init,
# then cl_redis_start, cl_node_start N SPEC, cl_haproxy_start; cl_cleanup
# (from an EXIT trap) removes every process, namespace and file it made.

CL_PY=/usr/bin/python3
CL_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CL_TOKEN=moat-cluster-test-token-7d1f0b93c2
CL_PORT=3000 # each node's, in its own namespace

# What the cluster needs; prints why not and returns 1 when it cannot run.
cl_can_run() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "root is needed (network namespaces, veth pairs)"
		return 1
	fi
	local p
	for p in ip nsenter redis-server haproxy curl "$CL_PY"; do
		if ! command -v "$p" >/dev/null 2>&1; then
			echo "$p is not installed (tools/deps.sh)"
			return 1
		fi
	done
	return 0
}

cl_init() {
	CL_DIR=$(mktemp -d /tmp/moat-cluster-XXXXXX)
	chmod 755 "$CL_DIR"
	CL_TAG=mc$$
	CL_PIDS=""
	CL_NS=""
	CL_NODES=""
	printf '%s\n' "$CL_TOKEN" >"$CL_DIR/token"
	chmod 600 "$CL_DIR/token"
	# a /24 of 10.213.0.0/16 that no interface here uses
	local k
	for k in $(seq $(( $$ % 200 + 10 )) 250) $(seq 10 250); do
		if ! ip -4 addr show | grep -q "inet 10\.213\.$k\."; then
			CL_NET=10.213.$k
			break
		fi
	done
	[ -n "${CL_NET:-}" ] || { echo "no free 10.213.x.0/24 here" >&2; return 1; }
}

# A free TCP port on 127.0.0.1.
cl_free_port() {
	"$CL_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# cl_netns N: namespace CL_TAG-nN with veth CL_TAG-hN (host) <-> eth0 (node):
# host CL_NET.(4N-3)/30, node CL_NET.(4N-2)/30.
cl_netns() {
	local n=$1 ns=$CL_TAG-n$1 host=$CL_TAG-h$1
	local a=$(( 4 * n - 3 )) b=$(( 4 * n - 2 ))
	ip netns add "$ns" || return 1
	CL_NS="$CL_NS $ns"
	ip link add "$host" type veth peer name eth0 netns "$ns" || return 1
	ip addr add "$CL_NET.$a/30" dev "$host"
	ip link set "$host" up
	ip -n "$ns" addr add "$CL_NET.$b/30" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
	eval "CL_HOST$n=$CL_NET.$a CL_NODE$n=$CL_NET.$b"
}

# Namespaces for nodes 1 and 2 (and 3 with an argument "3"), then
# redis-server on 127.0.0.1 and the host ends (AOF, fsync always: an
# acknowledged write is on disk).
cl_redis_start() {
	local n binds=127.0.0.1
	for n in 1 2 ${1:-}; do
		cl_netns "$n" || return 1
		eval "binds=\"\$binds \$CL_HOST$n\""
	done
	CL_REDIS_PORT=$(cl_free_port)
	mkdir -p "$CL_DIR/redis"
	redis-server --port "$CL_REDIS_PORT" --bind "$binds" \
		--protected-mode no --save "" --appendonly yes --appendfsync always \
		--dir "$CL_DIR/redis" --daemonize no >"$CL_DIR/redis.log" 2>&1 &
	CL_REDIS_PID=$!
	CL_PIDS="$CL_PIDS $CL_REDIS_PID"
	local i
	for i in $(seq 100); do
		redis-cli -h 127.0.0.1 -p "$CL_REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
		sleep 0.05
	done
	echo "redis-server did not start: $(tail -n 5 "$CL_DIR/redis.log")" >&2
	return 1
}

# cl_node_start N SPEC [ARGS...]: moat serve in node N's namespace on
# CL_NODEn:3000 with --kv SPEC ("redis" for the shared server); its access
# log in CL_DIR/nodeN.log; as uid 65534 when N is in CL_ROOTLESS. Waits for
# /healthz.
cl_node_start() {
	local n=$1 spec=$2
	shift 2
	local ip host
	eval "ip=\$CL_NODE$n host=\$CL_HOST$n"
	[ "$spec" = redis ] && spec="redis://$host:$CL_REDIS_PORT/0"
	# CL_ROOTLESS lists the nodes run as uid 65534 (rootless), with a
	# directory of their own (CL_DIR/nobodyN: its token, its home) where a
	# relative store SPEC lands
	local as=() token=$CL_DIR/token
	case " ${CL_ROOTLESS:-} " in
	*" $n "*)
		local d=$CL_DIR/nobody$n
		mkdir -p "$d"
		cp "$CL_DIR/token" "$d/token"
		chown -R 65534:65534 "$d"
		token=$d/token
		case $spec in redis://*) ;; *) spec=$d/$(basename "$spec") ;; esac
		as=(env HOME="$d" setpriv --reuid=65534 --regid=65534 --clear-groups --)
		;;
	esac
	nsenter --net="/run/netns/$CL_TAG-n$n" "${as[@]}" "$MOAT" serve --listen "$ip:$CL_PORT" \
		--token-file "$token" --runtime "$RUNTIME" --kv "$spec" --pool 0 \
		--grace 2 "$@" >>"$CL_DIR/node$n.out" 2>>"$CL_DIR/node$n.log" &
	eval "CL_PID$n=$!"
	CL_PIDS="$CL_PIDS $!"
	local i
	for i in $(seq 200); do
		curl -s -o /dev/null --max-time 1 "http://$ip:$CL_PORT/healthz" && return 0
		kill -0 "$(eval echo \$CL_PID$n)" 2>/dev/null || break
		sleep 0.05
	done
	echo "node $n did not start: $(tail -n 5 "$CL_DIR/node$n.log")" >&2
	return 1
}

# cl_node_stop N: SIGTERM, wait.
cl_node_stop() {
	local pid
	eval "pid=\${CL_PID$1:-}"
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	eval "CL_PID$1="
}

# HAProxy on 127.0.0.1:CL_HAPROXY_PORT (pid CL_HAPROXY_PID) in front of
# nodes 1 and 2, or of the nodes named in $1 (e.g. "1"); $2 names its
# files when several run at once.
cl_haproxy_start() {
	local nodes=${1:-1 2} name=${2:-haproxy} n ip
	CL_HAPROXY_PORT=$(cl_free_port)
	{
		cat <<CFG
global
	maxconn 512
defaults
	mode http
	timeout connect 1s
	timeout client 60s
	timeout server 60s
	timeout check 1s
	retries 3
	option redispatch
frontend moat
	bind 127.0.0.1:$CL_HAPROXY_PORT
	default_backend nodes
backend nodes
	balance hdr(X-Sandbox-Id)
	hash-type consistent
	option httpchk GET /healthz
	http-check expect status 200
	default-server inter 200ms fastinter 100ms fall 1 rise 2
CFG
		for n in $nodes; do
			eval "ip=\$CL_NODE$n"
			printf '\tserver n%s %s:%s check\n' "$n" "$ip" "$CL_PORT"
		done
	} >"$CL_DIR/$name.cfg"
	haproxy -db -f "$CL_DIR/$name.cfg" >"$CL_DIR/$name.log" 2>&1 &
	CL_HAPROXY_PID=$!
	CL_PIDS="$CL_PIDS $CL_HAPROXY_PID"
	local i
	for i in $(seq 100); do
		curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$CL_HAPROXY_PORT/healthz" && return 0
		kill -0 "$CL_HAPROXY_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "haproxy did not start: $(tail -n 5 "$CL_DIR/$name.log")" >&2
	return 1
}

# Everything cl_* started, by pid, then the namespaces (their veths go with
# them) and the directory.
cl_cleanup() {
	local p ns
	for p in $CL_PIDS; do
		kill -KILL "$p" 2>/dev/null
	done
	for p in $CL_PIDS; do
		wait "$p" 2>/dev/null
	done
	CL_PIDS=""
	for ns in $CL_NS; do
		ip netns del "$ns" 2>/dev/null
	done
	CL_NS=""
	[ -n "${CL_DIR:-}" ] && rm -rf "$CL_DIR"
	CL_DIR=""
}

# cl_py_served URL [OUTCOME]: how many /py requests the node at URL has
# answered (its /metrics: moat_serve_requests_total of route "py", of that
# outcome when given). The access log cannot say which: it holds the route's
# template, never the path (SECURITY.md row 40).
cl_py_served() {
	curl -s --noproxy '*' --max-time 5 -H "Authorization: Bearer $CL_TOKEN" "$1/metrics" |
		awk -v o="${2:-}" '/^moat_serve_requests_total\{route="py",/ &&
			(o == "" || index($0, "outcome=\"" o "\"")) { n += $NF } END { print n + 0 }'
}

# cl_call URL ID CODE: one request (tests/cluster/client.py call): prints
# "<HTTP status> <the script's stdout, JSON-quoted>".
cl_call() {
	"$CL_PY" "$CL_LIB_DIR/client.py" call "$1" "$CL_TOKEN" "$2" "$3"
}

# cl_haproxy_doc_start: HAProxy on 127.0.0.1:CL_HAPROXY_PORT with the
# configuration docs/scaling.md gives for live sandboxes and sessions (the
# block after its "tests/cluster/live.sh runs this block" line), as it is
# but for the bind and the nodes' addresses (nodes 1 and 2: node-a, node-b).
cl_haproxy_doc_start() {
	local doc=$CL_LIB_DIR/../../docs/scaling.md i
	CL_HAPROXY_PORT=$(cl_free_port)
	awk '/^<!-- tests\/cluster\/live.sh runs this block/ { f = 1; next }
	     f && /^```haproxy/ { g = 1; next } g && /^```/ { exit } g' "$doc" |
		sed -e "s/^\([[:space:]]*bind\) :8080\$/\1 127.0.0.1:$CL_HAPROXY_PORT/" \
		    -e "s/10\.0\.0\.11:3000/$CL_NODE1:$CL_PORT/" \
		    -e "s/10\.0\.0\.12:3000/$CL_NODE2:$CL_PORT/" >"$CL_DIR/haproxy-live.cfg"
	grep -q "bind 127.0.0.1:$CL_HAPROXY_PORT\$" "$CL_DIR/haproxy-live.cfg" &&
		grep -q "$CL_NODE1:$CL_PORT track" "$CL_DIR/haproxy-live.cfg" ||
		{ echo "docs/scaling.md has no HAProxy block this script can use" >&2; return 1; }
	haproxy -db -f "$CL_DIR/haproxy-live.cfg" >"$CL_DIR/haproxy-live.log" 2>&1 &
	CL_HAPROXY_PID=$!
	CL_PIDS="$CL_PIDS $CL_HAPROXY_PID"
	for i in $(seq 100); do
		curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$CL_HAPROXY_PORT/healthz" && return 0
		kill -0 "$CL_HAPROXY_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "haproxy did not start: $(tail -n 5 "$CL_DIR/haproxy-live.log")" >&2
	return 1
}
