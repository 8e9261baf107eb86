#!/bin/bash
# Soak: many runs of moat, then nothing may be left behind.
#
#   tests/soak/soak.sh [--build DIR] [RUNS]      (make soak, make soak-short)
#
# RUNS (default $SOAK_RUNS, else 10000) runs of the mix of tests/soak/soak.c
# (normal and non-zero exits in python, javascript, typescript and bash,
# timeouts, an OOM under memoryMb 48, a fork bomb under pidsLimit 16,
# "network": true with a DNS lookup moat refuses, "outputs") in each phase:
#   exec sequential   moat exec, one run at a time        (build/soak/execsoak)
#   exec 8-way        moat exec, 8 at a time               (execsoak --jobs 8)
#   libmoat 8 threads moat_run from 8 threads, one process (build/soak/libsoak)
# as root, then as uid 65534 (when run as root; otherwise as the user
# running it). Every result is checked (a valid result JSON with the
# exitCode/killedBy of its mode); a mismatch is a failure.
#
# Before the first phase and after the last it counts: processes descended
# from the soak (uid 65534, root), moat-* cgroup leaves (the memory, pids
# and cpu v1 hierarchies and the unified one), lines of /proc/self/mountinfo,
# network namespaces (distinct /proc/*/ns/net), moat's names under /tmp
# (moat*, .moat*) and the files of the seccomp caches (/var/cache/moat/seccomp
# for root, ~/.cache/moat/seccomp for uid 65534). Counts that other users of
# the host change while the soak runs (their sandboxes' namespaces and
# leaves) are sampled again for up to $SOAK_SETTLE seconds (20) until they
# are back; what stays above its count before is left over, and listed.
# Prints a summary table; exits 1 on any failed run or anything left over.
# SOAK_JOBS (8) and SOAK_THREADS (8) set the concurrency of the 8-way phases.
set -u -o pipefail

build=build
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) break ;;
	esac
done
runs=${1:-${SOAK_RUNS:-10000}}
jobs=${SOAK_JOBS:-8}
threads=${SOAK_THREADS:-8}
settle=${SOAK_SETTLE:-20}
case $runs in ''|*[!0-9]*|0) echo "soak: RUNS must be a positive number, not '$runs'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir=$(cd "$root" && cd "$build" 2>/dev/null && pwd) || { echo "soak: no build directory $build" >&2; exit 2; }
for f in moat soak/execsoak soak/libsoak; do
	[ -x "$bdir/$f" ] || { echo "soak: $bdir/$f is not built (make $build/$f)" >&2; exit 2; }
done

# Orphans of everything below become this shell's children (execsoak
# --subreaper sets PR_SET_CHILD_SUBREAPER, which survives execve), so that
# a process a run leaves behind is still counted as the soak's.
if [ -z "${SOAK_REAPER:-}" ]; then
	export SOAK_REAPER=$$
	exec "$bdir/soak/execsoak" --subreaper bash "$0" --build "$build" "$runs"
fi

uid=$(id -u)
work=$(mktemp -d /tmp/soak-XXXXXX) || exit 2
cleanup() {
	cd / && rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
# copies that uid 65534 can execute, whatever the build directory's modes
cp "$bdir/moat" "$bdir/soak/execsoak" "$bdir/soak/libsoak" "$work/"
mkdir "$work/home" "$work/roothome"
[ "$uid" -eq 0 ] && chown 65534:65534 "$work/home"
cd "$work" || exit 2

# identities: root runs as root with a HOME of its own (no user config);
# the other runs as uid 65534 through setpriv, with a HOME of its own
# (its seccomp cache), or, without root, as the user running the soak
if [ "$uid" -eq 0 ]; then
	idents="root rootless"
	user_cache=$work/home/.cache/moat/seccomp
else
	idents="user"
	user_cache=${XDG_CACHE_HOME:-$HOME/.cache}/moat/seccomp
fi
as() {
	local who=$1; shift
	case $who in
	root) env -i PATH=/usr/bin:/bin HOME="$work/roothome" "$@" ;;
	rootless) setpriv --reuid=65534 --regid=65534 --clear-groups \
		env -i PATH=/usr/bin:/bin HOME="$work/home" "$@" ;;
	user) env -i PATH=/usr/bin:/bin HOME="$HOME" XDG_CACHE_HOME="${XDG_CACHE_HOME:-$HOME/.cache}" "$@" ;;
	esac
}

# ---- counting ---------------------------------------------------------------

cg_roots() {
	if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
		echo /sys/fs/cgroup
	else
		for h in memory pids cpu unified; do
			[ -d "/sys/fs/cgroup/$h" ] && echo "/sys/fs/cgroup/$h"
		done
	fi
}
# list NAME SKIP: one line per item of category NAME; SKIP is the pid of
# the snapshot's subshell, whose subtree (ps, awk, sort) is not counted
list() {
	case $1 in
	procs65534|procsroot)
		# descendants of the soak
		local want; [ "$1" = procs65534 ] && want=65534 || want=0
		ps -e -o pid=,ppid=,uid=,comm= | awk -v top="$SOAK_REAPER" -v skip="$2" -v want="$want" '
			{ parent[$1] = $2; uid[$1] = $3; comm[$1] = $4 }
			END {
				for (p in parent) {
					if (p == top || uid[p] != want) continue
					for (q = parent[p]; q > 1 && q != top && q != skip; q = parent[q]) ;
					if (q == top && p != skip) print p, comm[p]
				}
			}' ;;
	leaves) find -H $(cg_roots) -mindepth 1 -type d -name 'moat-*' 2>/dev/null ;;
	mounts) cat /proc/self/mountinfo ;;
	# (a user that is not root sees only the namespaces of its own processes)
	netns) ls -l /proc/[0-9]*/ns/net 2>/dev/null | awk '$NF ~ /^net:\[/ {print $NF}' | sort -u ;;
	tmp) ls -A /tmp | grep -E '^\.?moat' ;;
	cacheroot) [ "$uid" -eq 0 ] && ls -A /var/cache/moat/seccomp 2>/dev/null ;;
	cacheuser) ls -A "$user_cache" 2>/dev/null ;;
	esac
}
CATS="procs65534 procsroot leaves mounts netns tmp cacheroot cacheuser"
declare -A TITLE=(
	[procs65534]="processes uid 65534 (soak's)" [procsroot]="processes root (soak's)"
	[leaves]="cgroup leaves moat-*" [mounts]="mounts (mountinfo lines)"
	[netns]="network namespaces" [tmp]="/tmp moat names"
	[cacheroot]="seccomp cache /var/cache/moat" [cacheuser]="seccomp cache ~/.cache/moat"
)
snapshot() ( # snapshot DIR, in a subshell
	mkdir -p "$1"
	me=$BASHPID
	for c in $CATS; do list "$c" "$me" | sort > "$1/$c"; done
)
count() { wc -l < "$1" | tr -d ' '; }

# ---- phases -----------------------------------------------------------------

# One run of each identity first: the seccomp filter compiled and cached,
# so that the counts before are those of a host that has run moat.
warm='{"language":"bash","code":"echo warm","timeout":30000}'
for who in $idents; do
	as "$who" ./moat exec <<<"$warm" >/dev/null 2>&1 ||
		{ echo "soak: moat exec fails as $who: $(as "$who" ./moat exec <<<"$warm" 2>&1)" >&2; exit 2; }
done

echo "soak: $runs runs per phase; $jobs-way exec, $threads library threads; identities: $idents; $(nproc) CPUs; $(uname -r)"
snapshot "$work/before"
t_all=$(date +%s.%N)
PHASES=()
declare -A LINE=() RC=()
for who in $idents; do
	for ph in seq par lib; do
		name="$who-$ph"
		case $ph in
		seq) as "$who" ./execsoak --moat ./moat --runs "$runs" --jobs 1 --label "$name" ;;
		par) as "$who" ./execsoak --moat ./moat --runs "$runs" --jobs "$jobs" --label "$name" ;;
		lib) as "$who" ./libsoak --runs "$runs" --threads "$threads" --label "$name" ;;
		esac > "$work/$name.out"
		RC[$name]=$?
		LINE[$name]=$(grep '^SOAK ' "$work/$name.out" | tail -1)
		[ -n "${LINE[$name]}" ] || LINE[$name]="SOAK label=$name crashed=${RC[$name]}"
		PHASES+=("$name")
	done
done
t_all=$(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# after: sample again while a count is above its count before (another
# user's sandbox that was running), for up to $settle seconds
deadline=$(( $(date +%s) + settle ))
while :; do
	rm -rf "$work/after"
	snapshot "$work/after"
	above=0
	for c in $CATS; do
		[ "$(count "$work/after/$c")" -gt "$(count "$work/before/$c")" ] && above=1
	done
	[ $above -eq 0 ] || [ "$(date +%s)" -ge "$deadline" ] && break
	sleep 1
done

# ---- the table --------------------------------------------------------------

field() { # field LINE KEY
	local w
	for w in $1; do
		case $w in "$2="*) echo "${w#*=}"; return ;; esac
	done
}
status=0
total_runs=0; total_fail=0
# the closing line counts each run, and each phase and category of what is
# left behind, as a check
bad_checks=0; checks=0
printf '\n%-26s %8s %9s %9s %8s %7s %8s\n' phase runs failures "wall s" "runs/s" leaves orphans
for name in "${PHASES[@]}"; do
	l=${LINE[$name]}
	case $name in
	*-seq) what="exec sequential" ;; *-par) what="exec $jobs-way" ;; *) what="libmoat $threads threads" ;;
	esac
	if [ -n "$(field "$l" crashed)" ]; then
		printf '%-26s %8s %9s   driver exited %s without a summary\n' "${name%%-*} $what" "$runs" "?" "$(field "$l" crashed)"
		status=1; bad_checks=$((bad_checks + 1))
		total_runs=$((total_runs + runs)); total_fail=$((total_fail + runs))
		continue
	fi
	r=$(field "$l" runs); f=$(field "$l" failures); w=$(field "$l" wall)
	lv=$(field "$l" leaves); o=$(field "$l" orphans)
	printf '%-26s %8d %9d %9.1f %8.1f %7d %8d\n' "${name%%-*} $what" "$r" "$f" "$w" \
		"$(awk -v r="$r" -v w="$w" 'BEGIN { printf "%.2f", (w > 0 ? r / w : 0) }')" "$lv" "$o"
	total_runs=$((total_runs + r)); total_fail=$((total_fail + f))
	# a driver also fails on what it left (leaves, orphans, the library's fds or heap)
	if [ "$f" -ne 0 ] || [ "$lv" -ne 0 ] || [ "$o" -ne 0 ] || [ "${RC[$name]}" -ne 0 ]; then
		status=1; bad_checks=$((bad_checks + 1))
	fi
done
printf '%-26s %8d %9d %9.1f %8.1f\n' total "$total_runs" "$total_fail" "$t_all" \
	"$(awk -v r="$total_runs" -v w="$t_all" 'BEGIN { printf "%.2f", (w > 0 ? r / w : 0) }')"

echo
echo "mix and limit mechanisms (mode:runs/failed):"
for name in "${PHASES[@]}"; do
	l=${LINE[$name]}
	printf '  %-14s %s %s %s\n' "$name" "$(field "$l" mix)" "mem=$(field "$l" mem)" "pids=$(field "$l" pids)"
done

printf '\n%-34s %7s %7s %6s\n' "left behind" before after left
for c in $CATS; do
	b=$(count "$work/before/$c"); a=$(count "$work/after/$c")
	left=$((a > b ? a - b : 0))
	printf '%-34s %7d %7d %6d\n' "${TITLE[$c]}" "$b" "$a" "$left"
	checks=$((checks + 1))
	if [ $left -gt 0 ]; then
		status=1; bad_checks=$((bad_checks + 1))
		# name what is new (not for mounts and namespaces: their lines say little)
		comm -13 "$work/before/$c" "$work/after/$c" | head -5 | sed 's/^/    new: /'
	fi
done

echo
printf '%-26s %14s %22s %24s\n' "libmoat (one process)" "fds b/w/a" "VmRSS KiB b/w/a" "heap in use KiB b/w/a"
for name in "${PHASES[@]}"; do
	case $name in *-lib) ;; *) continue ;; esac
	l=${LINE[$name]}
	printf '%-26s %14s %22s %24s\n' "${name%-lib}" "$(field "$l" fds)" "$(field "$l" rss)" "$(field "$l" heap)"
done
echo "(b: before the first run; w: after the warm-up, a tenth of the runs; a: after the last)"

# what runs left running is ours to end, after it was counted
for c in procs65534 procsroot; do
	awk '{print $1}' "$work/after/$c" | while read -r p; do kill -KILL "$p" 2>/dev/null; done
done

checks=$((checks + ${#PHASES[@]}))
echo
[ $status -eq 0 ] || echo "soak: FAILED: $total_fail of $total_runs runs failed; $bad_checks phases or categories failed or left something behind (above)"
echo "check-soak: $((total_runs - total_fail + checks - bad_checks)) passed, $((total_fail + bad_checks)) failed, 0 skipped"
exit $status
