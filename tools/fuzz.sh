#!/bin/sh
# make fuzz: runs each libFuzzer harness for SECS seconds, one after the
# other, from its seeds (tests/fuzz/corpus/NAME, read only) and the corpus
# it grew in earlier runs (DIR/corpus/NAME). Prints each harness's final
# libFuzzer stats (cov: edges, ft: features, exec/s) and fails when one of
# them crashed, leaked, hit UB or an input took longer than 20 s; the input
# is saved under DIR/crashes/ and its log under DIR/logs/.
# Usage: tools/fuzz.sh DIR SECS NAME...
set -u
dir=$1 secs=$2
shift 2
mkdir -p "$dir/crashes" "$dir/logs"
failed=""
for name in "$@"; do
	mkdir -p "$dir/corpus/$name"
	log="$dir/logs/$name.log"
	"$dir/bin/$name" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$dir/crashes/$name-" \
		"$dir/corpus/$name" "tests/fuzz/corpus/$name" >"$log" 2>&1
	rc=$?
	stats=$(grep -E '^#[0-9]+[[:space:]]+DONE ' "$log" | tail -1)
	if [ "$rc" -eq 0 ] && [ -n "$stats" ]; then
		printf 'fuzz: %-15s %s\n' "$name" "$(echo "$stats" | sed 's/^#\([0-9]*\)[[:space:]]*DONE[[:space:]]*/runs: \1 /')"
	else
		failed="$failed $name"
		printf 'fuzz: %-15s FAILED (exit %s; log %s)\n' "$name" "$rc" "$log"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written|.*runtime error)' "$log" | head -8 | sed 's/^/    /'
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz: crashed:$failed" >&2
	exit 1
fi
echo "fuzz: $# harnesses, ${secs} s each, no crash"
