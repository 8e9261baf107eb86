#!/usr/bin/env bash
# Proves that a test can fail: applies tests/broken/PATCH to a scratch copy
# of this checkout, builds moat there, runs the test against it, and passes
# only when the test fails, in every mode it runs, with the expected message
# (tests/broken/README.md lists the patches).
#
#   tools/broken.sh zygote-shared-tmp
#
# Keeps the scratch copy's TAP and stderr in /var/tmp/flaky/broken-NAME-DATE/
# (its path is printed) and removes the scratch copy itself.
set -eu
name=${1:?usage: $0 PATCH-NAME (tests/broken/*.patch)}
top=$(cd "$(dirname "$0")/.." && pwd)
patch=$top/tests/broken/$name.patch
[ -f "$patch" ] || { echo "$0: no $patch" >&2; exit 2; }
case $name in
zygote-shared-tmp)
	suite=serve test=zygote_child_tree_is_a_cold_runs expect='two children alive at once share' ;;
*) echo "$0: $name: no test named for it here" >&2; exit 2 ;;
esac
[ -x "$top/build/moat" ] || { echo "$0: build the checkout first (make)" >&2; exit 2; }
logs=/var/tmp/flaky/broken-$name-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$logs"
scratch=$(mktemp -d /var/tmp/moat-broken-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# mtimes kept: make rebuilds only what the patch touches
tar -C "$top" --exclude=./.git -cf - . | tar -C "$scratch" -xf -
(cd "$scratch" && patch -p1 --quiet <"$patch")
make -C "$scratch" -j2 build/moat build/moat-zygote.so build/test-integration >"$logs/build.log" 2>&1 ||
	{ echo "$0: the patched copy did not build (see $logs/build.log)" >&2; exit 1; }
chmod 755 "$scratch" # rootless mode reads its runtime/ as uid 65534
set +e
CK_RUN_SUITE=$suite MOAT_TESTS=$test CK_TAP_LOG_FILE_NAME="$logs/run.tap" \
	MOAT_BIN="$scratch/build/moat" "$scratch/build/test-integration" >/dev/null 2>"$logs/run.err"
set -e
cat "$logs/run.tap"
nok=$(grep -c '^not ok' "$logs/run.tap" || true)
ran=$(grep -c '^\(not \)\{0,1\}ok' "$logs/run.tap" || true)
hit=$(grep '^not ok' "$logs/run.tap" | grep -cF "$expect" || true)
echo "broken: $name: $nok of $ran runs of $test failed, $hit with \"$expect\" (logs in $logs)"
[ "$ran" -gt 0 ] && [ "$hit" -eq "$ran" ]
