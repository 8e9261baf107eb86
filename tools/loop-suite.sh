#!/usr/bin/env bash
# Runs one integration suite (or one test case of it) N times in a row and
# says, run by run, what passed, failed and was skipped, and which tests
# failed: the loop that finds flaky tests (issue 49; docs/testing.md,
# "Looping a suite").
#
#   tools/loop-suite.sh [-n N] [-c CASE] [-t TESTS] [-l LOGDIR] [-b BUILD] SUITE
#
#   -n N       runs (default 20)
#   -c CASE    one Check test case of the suite (CK_RUN_CASE), e.g. pool
#   -t TESTS   tests by name, comma-separated (MOAT_TESTS)
#   -l LOGDIR  where each run's TAP and stderr go (default
#              /var/tmp/flaky/<suite>[-<case>]-<date>-<pid>): run-K.tap,
#              run-K.err, summary.txt (the lines printed here), and build/,
#              the copy of the binaries the loop runs
#   -b BUILD   the build directory (default build/): its moat and
#              test-integration
#
# The integration binary runs each test as root and rootless itself. Each run
# prints "run K: N passed, M failed, S skipped (T s, load L)" and a "  not ok"
# line per failed test; the end, "loop: R runs, F with failures", and the
# exit status is 0 only when every run passed. Several loops may run at once
# (each test's service has its own /tmp/moat-serve-* directory, socket or
# port, and cgroup leaves named by its pid): give each its own LOGDIR.
set -u
n=20 case= tests= logdir= build=build
while getopts n:c:t:l:b: o; do
	case $o in
	n) n=$OPTARG ;;
	c) case=$OPTARG ;;
	t) tests=$OPTARG ;;
	l) logdir=$OPTARG ;;
	b) build=$OPTARG ;;
	*) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-n N] [-c CASE] [-t TESTS] [-l LOGDIR] [-b BUILD] SUITE" >&2; exit 2; }
suite=$1
case $n in '' | *[!0-9]*) echo "$0: -n wants a number: $n" >&2; exit 2 ;; esac
bin=$(realpath "$build/test-integration") && moat=$(realpath "$build/moat") || exit 2
[ -x "$bin" ] && [ -x "$moat" ] || { echo "$0: no $build/test-integration or $build/moat (make build/test-integration)" >&2; exit 2; }
[ -n "$logdir" ] || logdir=/var/tmp/flaky/$suite${case:+-$case}-$(date -u +%Y%m%dT%H%M%S)-$$
mkdir -p "$logdir" || exit 2
# the loop runs a copy of the binaries, so a rebuild while it runs (make
# rebuilds build/test-integration in place) does not change them between
# runs; the runtime shims stay the checkout's (harness_runtime_dir: the
# build directory's ../runtime)
mkdir -p "$logdir/build" &&
	cp "$bin" "$moat" "$(dirname "$moat")/moat-zygote.so" "$logdir/build/" &&
	ln -sfn "$(realpath "$(dirname "$moat")/../runtime")" "$logdir/runtime" || exit 2
bin=$logdir/build/test-integration moat=$logdir/build/moat
# shellcheck source=tools/tap.sh
. "$(dirname "$0")/tap.sh"

say() { printf '%s\n' "$*" | tee -a "$logdir/summary.txt"; }
top=$(dirname "$0")/..
rev=$(git -C "$top" rev-parse --short HEAD 2>/dev/null)$(git -C "$top" diff --quiet HEAD -- 2>/dev/null || echo +dirty)
say "loop: $suite${case:+ case $case}${tests:+ tests $tests}, $n runs, logs in $logdir ($(date -u +%FT%TZ); checkout ${rev:-unknown})"
bad=0
for k in $(seq 1 "$n"); do
	tap=$logdir/run-$k.tap
	t0=$(date +%s)
	# (an empty CK_RUN_CASE would match no case: set only when given)
	env CK_RUN_SUITE="$suite" ${case:+CK_RUN_CASE="$case"} ${tests:+MOAT_TESTS="$tests"} \
		CK_TAP_LOG_FILE_NAME="$tap" MOAT_BIN="$moat" "$bin" >/dev/null 2>"$logdir/run-$k.err"
	rc=$?
	t=$(($(date +%s) - t0))
	read -r p f s <<<"$(tap_sum "$tap")"
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	# Check ends 1 when a test failed; anything else (a crash, no TAP at
	# all) is a failure of the run even with no "not ok" line
	extra=
	if [ "$f" -eq 0 ] && { [ "$rc" -ne 0 ] || [ $((p + s)) -eq 0 ]; }; then
		f=1 extra="  the run ended $rc with no failed test in its TAP (see run-$k.err)"
	fi
	say "run $k: $p passed, $f failed, $s skipped ($t s, load $load)"
	grep '^not ok' "$tap" 2>/dev/null | sed 's/^/  /' | tee -a "$logdir/summary.txt"
	[ -z "$extra" ] || say "$extra"
	[ "$f" -eq 0 ] || bad=$((bad + 1))
done
say "loop: $n runs, $bad with failures ($(date -u +%FT%TZ))"
[ "$bad" -eq 0 ]
