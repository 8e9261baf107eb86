#!/bin/sh
# Where moat's start-up time goes, as a rough guide (figures only, nothing asserted).
#
#   sh bench/profile.sh [PATH/TO/moat] [LANG FILE-CONTENT]
# default: -l sh running 'exec /bin/true', with moat's bench flags (limits on).
#  1. perf stat of the supervisor alone (--no-inherit): instructions when the CPU exposes
#     them, else task-clock / context switches / page faults
#  2. callgrind of the supervisor (--trace-children=no): valgrind 3.19 answers clone3 with
#     ENOSYS, so this counts the path up to clone3 (the run then fails, as expected)
#  3. strace -f -c: system calls of the whole run (supervisor, init, program)
#  4. strace -f -ttt: a timeline of the run's milestones (strace slows every call, so
#     read the proportions, not the absolute figures)
set -u

here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
LANG_=${2:-sh}
CODE=${3:-exec /bin/true}
FLAGS="--memory 256M --pids 64 --cpus 1"
[ -x "$MOAT" ] || { echo "profile: $MOAT not built (run make)" >&2; exit 2; }

work=$(mktemp -d /tmp/moat-profile.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
case $LANG_ in
python) ext=py ;; javascript) ext=js ;; *) ext=sh ;;
esac
prog=$work/main.$ext
printf '%s\n' "$CODE" >"$prog"
chmod -R a+rX "$work"
# shellcheck disable=SC2086
run() { "$@" "$MOAT" run $FLAGS -l "$LANG_" "$prog"; }

echo "== moat start-up profile: $LANG_ '$CODE' ($MOAT run $FLAGS)"
run env >/dev/null 2>&1 || { echo "profile: the plain run fails" >&2; exit 1; }

echo
echo "== 1. perf stat, supervisor only (--no-inherit), 20 runs"
if command -v perf >/dev/null; then
	if perf stat -x, -e instructions:u true 2>&1 | grep -q 'not supported'; then
		echo "(hardware counters not exposed here: software events instead)"
		events=task-clock,context-switches,cpu-migrations,page-faults
	else
		events=instructions:u,instructions:k,task-clock,context-switches,page-faults
	fi
	# shellcheck disable=SC2086
	perf stat -r 20 --no-inherit -e "$events" "$MOAT" run $FLAGS -l "$LANG_" "$prog" \
		2>&1 >/dev/null | sed -n '/Performance counter/,$p' | sed '/^$/d'
else
	echo "(perf not installed)"
fi

echo
echo "== 2. callgrind, supervisor up to clone3 (instructions, inclusive, top 25)"
if command -v valgrind >/dev/null; then
	# shellcheck disable=SC2086
	valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$work/cg.out" \
		"$MOAT" run $FLAGS -l "$LANG_" "$prog" >/dev/null 2>"$work/vg.err"
	grep -m1 'clone3' "$work/vg.err" | sed 's/^/(run ends here: /; s/$/)/'
	callgrind_annotate --inclusive=yes "$work/cg.out" 2>/dev/null |
		sed -n '/file:function/,$p' | grep -v '^-*$' | sed -n '2,60p' |
		sed 's|/work/main/||; s| \[[^]]*moat\]$||' | awk '!seen[$0]++' | sed -n '1,25p' |
		cut -c1-150
	echo "-- self cost, top 12"
	callgrind_annotate "$work/cg.out" 2>/dev/null |
		sed -n '/file:function/,$p' | grep -v '^-*$' | sed -n '2,13p' |
		sed 's|/work/main/||; s| \[[^]]*moat\]$||' | cut -c1-150
else
	echo "(valgrind not installed)"
fi

if ! command -v strace >/dev/null; then
	echo "(strace not installed: no syscall summary)"
	exit 0
fi
echo
echo "== 3. strace -f -c, the whole run (top 20 by time)"
run strace -f -c -o "$work/c.txt" >/dev/null 2>&1
sed -n '1,2p' "$work/c.txt"
sed -n '3,22p' "$work/c.txt"
tail -1 "$work/c.txt"

echo
echo "== 4. timeline of one run under strace -f -ttt (ms since moat's execve)"
run strace -f -ttt -T -o "$work/t.txt" >/dev/null 2>&1
awk '
function mark(name) { if (!(name in seen)) { seen[name] = 1; n++; nm[n] = name; tm[n] = t } }
NR == 1 { sup = $1; t0 = $2 }
{ t = ($2 - t0) * 1000 }
$1 == sup && /openat\(.*\/sys\/fs\/cgroup/ { mark("supervisor: first cgroup file") }
$1 == sup && /clone3\(/ { mark("supervisor: clone3 (new namespaces)") }
$1 != sup && !child { child = $1; mark("sandbox init: running") }
$1 == sup && /uid_map/ { mark("supervisor: writes uid_map") }
$1 == child && /mount\(/ { mark("sandbox init: first mount") }
$1 == child && /pivot_root\(/ { mark("sandbox init: pivot_root") }
$1 == child && /sendto\(/ { mark("sandbox init: netlink (lo up)") }
$1 != sup && $1 != child && !prog { prog = $1; mark("program (pid 2): forked") }
$1 == prog && /prctl\(PR_SET_NO_NEW_PRIVS/ { mark("program: no_new_privs") }
$1 == prog && /seccomp\(SECCOMP_SET_MODE_FILTER/ { mark("program: seccomp filter installed") }
$1 == prog && /execve\(/ { mark("program: execve interpreter") }
$1 == prog && /\+\+\+ exited/ { mark("program: exited") }
$1 == child && /\+\+\+ exited/ { mark("sandbox init: exited") }
$1 == sup && /rmdir\(/ { mark("supervisor: removes cgroups") }
$1 == sup && /\+\+\+ exited/ { mark("supervisor: exited") }
END {
	# in time order
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
		if (tm[j] < tm[i]) { x = tm[i]; tm[i] = tm[j]; tm[j] = x; y = nm[i]; nm[i] = nm[j]; nm[j] = y }
	printf "%9s %9s  %s\n", "at ms", "+ms", "milestone"
	p = 0
	for (i = 1; i <= n; i++) { printf "%9.2f %9.2f  %s\n", tm[i], tm[i] - p, nm[i]; p = tm[i] }
}' "$work/t.txt"
echo "-- slowest single system calls (strace -T; waits on children excluded)"
sup=$(head -1 "$work/t.txt" | cut -d' ' -f1)
grep -v -e 'wait4' -e 'waitid' -e 'epoll_wait' -e 'read resumed' -e 'poll' "$work/t.txt" |
	sed -n 's/^\([0-9]*\) *[0-9.]* \(.*\) <\([0-9.]*\)>$/\3 \1 \2/p' | sort -rn | head -12 |
	awk -v sup="$sup" '{ who = $2 == sup ? "supervisor" : "sandbox   "; $2 = ""; d = $1; $1 = "";
		printf "%8.3f ms  %s %s\n", d * 1000, who, substr($0, 3, 110) }'
