#!/bin/bash
# The integration stage of make check (tools/check.sh) as two shards at once:
# its tests mostly wait (a service to start, a sandbox to be made, a
# timeout to pass), so two test-integration processes share the machine's
# CPUs well (docs/testing.md, "CI's time by stage", has the measurements).
#
#   tools/shards.sh [BUILD]        (BUILD: the build directory, default build)
#
# One shard runs the suites MOAT_SHARD names (default: serve, the longest,
# with serve_sandboxes and kv: on 2026-12-07 serve alone ended 209 s before
# the rest, 339 s against 548 s; with serve_sandboxes 46-50 s after it, 418 s
# against 468 s and 437 against 483 in two clean-clone runs; kv took about
# 37 s of one process's time),
# the other every suite but those (test-integration's MOAT_SUITES and
# MOAT_SKIP_SUITES), so every suite runs exactly once, one added later
# included, and a name that is no suite's fails the stage. Each shard's TAP
# is printed whole once both are done, the first then the second (the plan
# lines of both: tools/tap.sh counts test lines only). MOAT_SHARD= (empty)
# runs the stage in one process, as before. The exit status is 0 only when
# both shards passed. Every test runs root and rootless itself, as always.
set -u
build=${1:-build}
moat=$(realpath "$build/moat") || exit 2
bin=$build/test-integration
list=${MOAT_SHARD-serve,serve_sandboxes,kv}
if [ -z "$list" ]; then
	env MOAT_BIN="$moat" "$bin"
	exit
fi
out=$(mktemp -d /tmp/moat-shards-XXXXXX) || exit 2
trap 'rm -rf "$out"' EXIT
# shard N: run it, its TAP to $out/N, its status and seconds to $out/N.rc
shard() {
	local n=$1 t0=$SECONDS rc=0
	shift
	env MOAT_BIN="$moat" "$@" "$bin" >"$out/$n" 2>&1 || rc=1
	echo "$rc $((SECONDS - t0))" >"$out/$n.rc"
}
shard 1 MOAT_SUITES="$list" &
shard 2 MOAT_SKIP_SUITES="$list"
wait
rc=0
read -r rc1 t1 <"$out/1.rc" || rc1=1
read -r rc2 t2 <"$out/2.rc" || rc2=1
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] || rc=1
echo "# shard 1 (${list}): its TAP"
cat "$out/1"
echo "# shard 2 (every other suite): its TAP"
cat "$out/2"
echo "# shards: 1 (${list}) took ${t1:-?} s, 2 ${t2:-?} s"
exit "$rc"
