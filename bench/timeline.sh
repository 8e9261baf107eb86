#!/bin/sh
# Where moat's start-up time goes, step by step: runs a timeline build of moat
# (make timeline; compiled with -DMOAT_TIMELINE, see src/core/stamp.h) N times and
# prints, per step, the median time since main() and the median time since the step
# before. Steps come from the supervisor (sup:), the sandbox init (init:) and the
# program's process before its execve (pid2:). Figures, not tests.
#
#   sh bench/timeline.sh [PATH/TO/timeline-moat] [N]
# The run: moat's bench flags (--memory 256M --pids 64 --cpus 1), sh running
# 'exec /bin/true'. Extra moat flags: MOAT_FLAGS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build-timeline/moat}
N=${2:-21}
FLAGS=${MOAT_FLAGS:---memory 256M --pids 64 --cpus 1}
[ -x "$MOAT" ] || { echo "timeline: $MOAT not built (run make timeline)" >&2; exit 2; }
work=$(mktemp -d /tmp/moat-timeline.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
chmod 755 "$work"
printf 'exec /bin/true\n' >"$work/main.sh"
chmod 644 "$work/main.sh"
"$MOAT" run -l sh "$work/main.sh" >/dev/null 2>&1 || true # warm the BPF cache
i=0
while [ $i -lt "$N" ]; do
	# shellcheck disable=SC2086
	"$MOAT" run $FLAGS -l sh "$work/main.sh" 2>&1 >/dev/null | grep '^timeline	' >>"$work/raw" || true
	i=$((i + 1))
done
[ -s "$work/raw" ] || { echo "timeline: $MOAT printed no timeline (not a timeline build?)" >&2; exit 1; }
# lines: timeline TAB clock TAB at TAB delta TAB step -> per step (in first-seen
# order), the medians of at and delta
awk -F'\t' '!($5 in k) { k[$5] = ++n; print n "\t" $5 }' "$work/raw" >"$work/steps"
while IFS=$(printf '\t') read -r k name; do
	med() { awk -F'\t' -v s="$name" -v c="$1" '$5 == s { print $c }' "$work/raw" | sort -g |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
	printf '%8.3f ms  +%6.3f  %s\n' "$(med 3)" "$(med 4)" "$name"
done <"$work/steps"
echo "(medians of $N runs of: moat run $FLAGS -l sh 'exec /bin/true'; $(uname -r), $(nproc) CPUs)"
