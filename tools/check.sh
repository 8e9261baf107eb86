#!/bin/bash
# make check: unit tests (ASan/UBSan), the thread test (TSan), then
# integration and security tests against the built binary, as root and as
# uid 65534. Prints one summary line.
set -u -o pipefail
BUILD=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0

echo "== unit tests (AddressSanitizer + UBSan)"
"$BUILD/test-unit" 2>&1 | tee -a "$log" || status=1
echo "== libmoat from 8 threads at once (ThreadSanitizer; root mode and uid 65534)"
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$BUILD/test-threads" 2>&1 | tee -a "$log" || status=1

echo "== integration and security tests ($(id -un): root mode $( [ "$(id -u)" -eq 0 ] && echo on || echo off ), rootless mode on)"
MOAT_BIN="$(pwd)/$BUILD/moat" "$BUILD/test-integration" 2>&1 | tee -a "$log" || status=1

echo "== node client tests (clients/node, against the built binary)"
MOAT_BIN="$(pwd)/$BUILD/moat" node --test clients/node/test/ 2>&1 | tee -a "$log" || status=1

# Check prints "NN%: Checks: T, Failures: F, Errors: E" per runner
total=0; bad=0
for line in $(sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1:\2:\3/p' "$log"); do
	t=${line%%:*}; rest=${line#*:}; f=${rest%%:*}; e=${rest#*:}
	total=$((total + t)); bad=$((bad + f + e))
done
# node --test prints "# pass N" and "# fail N"
np=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$log" | tail -1)
nf=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$log" | tail -1)
total=$((total + ${np:-0} + ${nf:-0})); bad=$((bad + ${nf:-0}))
if [ "$total" -eq 0 ]; then
	echo "check: no test ran" >&2
	status=1
fi
echo "check: $((total - bad)) passed, $bad failed"
exit $status
