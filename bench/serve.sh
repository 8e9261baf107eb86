#!/bin/sh
# moat serve benchmark: latency (p50/p90/p99) and throughput of a Python script, a Python
# handler and a TS handler through `moat serve` on a unix socket, next to `moat exec`
# spawned per request, at 1, 2 and 8 concurrent clients. Prints a Markdown table.
# Figures, not a test: nothing is asserted on timing.
#
#   sh bench/serve.sh [PATH/TO/moat]
# Environment: REQUESTS per cell (200), WARMUP per cell, not timed (10), CLIENTS (1,2,8),
# WORKLOADS (see bench/serve-load.mjs), RUNTIME (the handler shims, default
# runtime/ of this checkout), QUEUE (--queue, 1024), NODE (node), GAP_MS (a pause after each
# answer, per client: spaced requests), POOL_FLAGS (more flags for the pooled service, e.g.
# --no-pool-zygote for the warm Python interpreters instead of the zygote), ROUNDS (each
# cell in that many parts, the workloads taking turns in a random order each round (SEED):
# bench/serve-load.mjs; default 5, so that the two sides of a ratio see the same host);
# SANDBOXES=0 leaves out the live sandboxes' tables (bench/sandbox-load.mjs), SANDBOXES_ONLY=1
# prints only those: root (the service without a pool) and rootless (a third service, run as
# uid 65534 by setpriv; ROOTLESS=0 leaves it out); both with SANDBOX_POOL live sandboxes made
# ahead (--sandbox-pool, default 1; 0: every create cold, as before the pool).
# E2B=0 leaves out E2B's SDK (bench/e2b-load.mjs, with SANDBOX_POOL too); E2B_INTERNET=1 has
# its creates ask allowInternetAccess: true (the pool's network shape).
# SESSIONS=0 leaves out the session step's table (bench/session-load.mjs: SESSION_ROUNDS,
# SESSION_CODE, SESSION_LANGUAGE), SESSION_ONLY=1 prints only that one.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
RUNTIME=${RUNTIME:-$here/../runtime}
QUEUE=${QUEUE:-1024}
export ROUNDS="${ROUNDS:-5}"
NODE=${NODE:-node}

[ -x "$MOAT" ] || { echo "bench-serve: $MOAT not built (run make)" >&2; exit 2; }
"$MOAT" serve --help >/dev/null 2>&1 ||
	{ echo "bench-serve: $MOAT has no working 'serve' command" >&2; exit 2; }
command -v "$NODE" >/dev/null || { echo "bench-serve: node not found (set NODE)" >&2; exit 2; }
[ -d "$RUNTIME" ] || { echo "bench-serve: no runtime directory at $RUNTIME (set RUNTIME)" >&2; exit 2; }
CPUS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-serve.XXXXXX")
sock=$tmp/moat.sock
pid=
cold_pid=
rl_pid=
cleanup() {
	for p in $pid $cold_pid $rl_pid; do
		if kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		fi
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The access log (one JSON line per request) goes to a file; its tail is shown on failure.
# Two services side by side: one with its warm pool (POOL per language, default 2), one
# without (--pool 0), on the same store file.
"$MOAT" serve --socket "$sock" --runtime "$RUNTIME" --max-concurrent "$CPUS" --queue "$QUEUE" \
	--pool "${POOL:-2}" ${POOL_FLAGS:-} --kv "$tmp/kv.sqlite3" 2>"$tmp/serve.log" &
pid=$!
"$MOAT" serve --socket "$tmp/cold.sock" --runtime "$RUNTIME" --max-concurrent "$CPUS" \
	--queue "$QUEUE" --pool 0 --sandbox-pool "${SANDBOX_POOL:-1}" --kv "$tmp/kv.sqlite3" \
	2>"$tmp/cold.log" &
cold_pid=$!
# rootless: a service as uid 65534 (live sandboxes' table only), its socket in a dir of its own
if [ "${SANDBOXES:-1}" != 0 ] && [ "${ROOTLESS:-1}" != 0 ] && [ "$(id -u)" = 0 ] &&
	command -v setpriv >/dev/null; then
	chmod 711 "$tmp"
	mkdir "$tmp/rl"
	chown 65534:65534 "$tmp/rl"
	setpriv --reuid 65534 --regid 65534 --clear-groups env HOME=/nonexistent \
		"$MOAT" serve --socket "$tmp/rl/moat.sock" --runtime "$RUNTIME" --max-concurrent "$CPUS" \
		--queue "$QUEUE" --pool 0 --sandbox-pool "${SANDBOX_POOL:-1}" --no-kv \
		2>"$tmp/rl/serve.log" &
	rl_pid=$!
fi

rc=0
[ "${SESSION_ONLY:-0}" = 1 ] || [ "${SANDBOXES_ONLY:-0}" = 1 ] ||
	"$NODE" "$here/serve-load.mjs" --socket "$sock" --cold-socket "$tmp/cold.sock" --moat "$MOAT" --cpus "$CPUS" --queue "$QUEUE" || rc=$?
# a session step against a cold and a warm run of the same code (bench/session-load.mjs)
[ "$rc" != 0 ] || [ "${SESSIONS:-1}" = 0 ] || [ "${SANDBOXES_ONLY:-0}" = 1 ] ||
	"$NODE" "$here/session-load.mjs" --socket "$sock" --cold-socket "$tmp/cold.sock" || rc=$?
# live sandboxes: create, a process, 1 MiB each way (bench/sandbox-load.mjs)
[ "$rc" != 0 ] || [ "${SANDBOXES:-1}" = 0 ] || [ "${SESSION_ONLY:-0}" = 1 ] ||
	for i in $(seq 100); do [ -S "$tmp/cold.sock" ] && break; sleep 0.1; done &&
	"$NODE" "$here/sandbox-load.mjs" --socket "$tmp/cold.sock" --pid "$cold_pid" \
		--label "$( [ "$(id -u)" = 0 ] && echo root || echo "uid $(id -u)" )" || rc=$?
if [ "$rc" = 0 ] && [ -n "$rl_pid" ] && [ "${SESSION_ONLY:-0}" != 1 ]; then
	for i in $(seq 100); do [ -S "$tmp/rl/moat.sock" ] && break; sleep 0.1; done
	[ -S "$tmp/rl/moat.sock" ] || { cat "$tmp/rl/serve.log" >&2; exit 1; }
	"$NODE" "$here/sandbox-load.mjs" --socket "$tmp/rl/moat.sock" --pid "$rl_pid" \
		--label "rootless: uid 65534" || rc=$?
fi
# E2B's SDK against /e2b, spaced (bench/e2b-load.mjs: its own TCP service; skipped without the SDK)
[ "$rc" != 0 ] || [ "${E2B:-1}" = 0 ] || [ "${SESSION_ONLY:-0}" = 1 ] ||
	"$NODE" "$here/e2b-load.mjs" --moat "$MOAT" --runtime "$RUNTIME" \
		--sandbox-pool "${SANDBOX_POOL:-1}" ${E2B_INTERNET:+--internet} || rc=$?
if [ "$rc" != 0 ]; then
	echo "bench-serve: failed (exit $rc); the end of moat serve's log:" >&2
	tail -n 20 "$tmp/serve.log" >&2 || true
fi
exit "$rc"
