#!/bin/sh
# moat benchmark: the same programs, bare and under unshare, bubblewrap and moat,
# interleaved in one run; writes bench/results/latest.{md,json} and prints the table.
#
#   sh bench/run.sh [PATH/TO/moat]
# Environment: N (rounds, default 30), WARMUP (3), MEMRUNS (5), TPUT_SECS (5; 0 = skip
# throughput), CLIENTS (1,2,8), SEED, CC, OUT (results prefix, default
# bench/results/latest), MOAT_B (a second moat binary, e.g. the branch point's: its own
# row "moat-b" in the same interleaved rounds, an A/B of two builds), GAP_MS (0: back to
# back; 100: each run after a 100 ms quiet gap, as an agent's tool calls come).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
MOAT_B=${MOAT_B:-}
[ -z "$MOAT_B" ] || { [ -x "$MOAT_B" ] || { echo "bench: MOAT_B=$MOAT_B is not executable" >&2; exit 2; }
	MOAT_B=$(cd "$(dirname "$MOAT_B")" && pwd)/$(basename "$MOAT_B"); }
N=${N:-30}
WARMUP=${WARMUP:-3}
MEMRUNS=${MEMRUNS:-5}
TPUT_SECS=${TPUT_SECS:-5}
CLIENTS=${CLIENTS:-1,2,8}
GAP_MS=${GAP_MS:-0}
SEED=${SEED:-$(date +%s)}
CC=${CC:-cc}
OUT=${OUT:-$here/results/latest}

[ -x "$MOAT" ] || { echo "bench: $MOAT not built (run make)" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"

# the driver: plain C, built here so the Makefile target stays one line
DRIVER=$here/../build/bench-driver
if ! mkdir -p "$here/../build" 2>/dev/null || [ ! -w "$here/../build" ]; then
	DRIVER=${TMPDIR:-/tmp}/moat-bench-driver-$(id -u)
fi
if [ ! -x "$DRIVER" ] || [ "$here/driver.c" -nt "$DRIVER" ]; then
	$CC -std=gnu11 -O2 -Wall -Wextra -Werror -o "$DRIVER" "$here/driver.c" -lm
fi
# the namespace floor: clone3 into moat's namespaces + id maps + exec, nothing else
NSFLOOR=$(dirname "$DRIVER")/$(basename "$DRIVER" | sed 's/driver/nsfloor/')
if [ ! -x "$NSFLOOR" ] || [ "$here/nsfloor.c" -nt "$NSFLOOR" ]; then
	$CC -std=gnu11 -O2 -Wall -Wextra -Werror -o "$NSFLOOR" "$here/nsfloor.c"
fi

notes=""
note() { notes="$notes$(printf '@note\t%s' "$*")
"; }

# bubblewrap: install when missing and root, otherwise skip its columns
BWRAP=$(command -v bwrap || true)
if [ -z "$BWRAP" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "bench: installing bubblewrap" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2 ||
			{ apt-get update -q >&2 &&
			  DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2; } || true
		BWRAP=$(command -v bwrap || true)
	fi
	if [ -z "$BWRAP" ]; then
		echo "bench: bubblewrap is missing; install it with: sudo apt-get install bubblewrap" >&2
		note "bubblewrap not installed (sudo apt-get install bubblewrap): bwrap rows and ratios are absent"
	fi
fi
UNSHARE=$(command -v unshare || true)
[ -n "$UNSHARE" ] || note "unshare (util-linux) not found: its rows are absent"

# the programs: one file per workload, run as INTERPRETER FILE by every runner, exactly
# what moat itself does (/sandbox/main.EXT)
work=$(mktemp -d /tmp/moat-bench.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT INT TERM
mkdir "$work/true" "$work/py-pass" "$work/node" "$work/py-imports"
printf 'exec /bin/true\n' >"$work/true/main.sh"
printf 'pass\n' >"$work/py-pass/main.py"
printf '0\n' >"$work/node/main.js"
cat >"$work/py-imports/main.py" <<'EOF'
import collections
import json
import re

words = re.findall(r"[a-z]+", "the quick brown fox jumps over the lazy dog and the cat")
json.dumps(collections.Counter(words).most_common(3))
EOF
chmod -R a+rX "$work"

# workload  language  interpreter  file
workloads="true sh /usr/bin/sh main.sh
py-pass python /usr/bin/python3 main.py
node javascript /usr/bin/node main.js
py-imports python /usr/bin/python3 main.py"
[ -x /usr/bin/node ] || { note "/usr/bin/node missing: node workload skipped";
	workloads=$(printf '%s\n' "$workloads" | grep -v '^node '); }

tab=$(printf '\t')
cases=$work/cases.tsv
{
	# moat's environment inside, for every runner
	printf '@env\tPATH=/usr/local/bin:/usr/bin:/bin\n'
	printf '@env\tLANG=C.UTF-8\n'
	printf '@env\tTMPDIR=/tmp\n'
	printf '@env\tHOME=%s\n' "$work"
	printf '@meta\tkernel\t%s\n' "$(uname -r)"
	printf '@meta\tcpus\t%s\n' "$(nproc)"
	printf '@meta\tuser\t%s\n' "$(id -u)"
	printf '@meta\tmoat\t%s\n' "$("$MOAT" version 2>/dev/null | head -1)"
	[ -z "$MOAT_B" ] || printf '@meta\tmoat-b\t%s (%s)\n' "$("$MOAT_B" version 2>/dev/null | head -1)" "$MOAT_B"
	[ -z "$BWRAP" ] || printf '@meta\tbwrap\t%s\n' "$("$BWRAP" --version | head -1)"
	printf '@meta\tcpuModel\t%s\n' "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
	printf '%s' "$notes"
	printf '%s\n' "$workloads" | while read -r wl lang interp file; do
		f=$work/$wl/$file
		t=-
		case $wl in true|py-imports) t=t ;; esac
		# bare: the program alone
		printf 'case\t%s\tbare\t-\t%s\t%s\n' "$wl" "$interp" "$f"
		# unshare: the same namespaces, nothing else (no new root, caps kept inside)
		[ -z "$UNSHARE" ] || printf 'case\t%s\tunshare\t-\t%s\n' "$wl" "$(printf '%s\t' \
			"$UNSHARE" --user --map-user=65534 --map-group=65534 --pid --fork \
			--kill-child --mount --mount-proc --net --ipc --uts --cgroup -- "$interp" "$f" |
			sed "s/$tab\$//")"
		# ns-floor: the namespaces alone, the least any such sandbox does
		printf 'case\t%s\tns-floor\t-\t%s\t%s\t%s\n' "$wl" "$NSFLOOR" "$interp" "$f"
		# bubblewrap: moat's default root (rootfs/default.plan) assembled by hand
		if [ -n "$BWRAP" ]; then
			set -- --unshare-all --unshare-user --die-with-parent --new-session \
				--cap-drop ALL --uid 65534 --gid 65534 --ro-bind /usr /usr
			for d in bin sbin lib lib32 lib64 libx32; do
				if [ -L "/$d" ]; then set -- "$@" --symlink "$(readlink "/$d")" "/$d"
				elif [ -d "/$d" ]; then set -- "$@" --ro-bind "/$d" "/$d"; fi
			done
			for e in ld.so.cache ld.so.conf ld.so.conf.d localtime nsswitch.conf \
				alternatives ssl/certs ssl/openssl.cnf ca-certificates.conf mime.types \
				python3 python3.11 python3.12 python3.13; do
				set -- "$@" --ro-bind-try "/etc/$e" "/etc/$e"
			done
			set -- "$@" --proc /proc --dev /dev --tmpfs /tmp --tmpfs /sandbox \
				--ro-bind "$f" "/sandbox/$file" --chdir /sandbox --clearenv \
				--setenv PATH /usr/local/bin:/usr/bin:/bin --setenv LANG C.UTF-8 \
				--setenv TMPDIR /tmp --setenv HOME /sandbox -- "$interp" "/sandbox/$file"
			printf 'case\t%s\tbwrap\t%s\t%s\n' "$wl" "$t" "$(printf '%s\t' "$BWRAP" "$@" |
				sed "s/$tab\$//")"
		fi
		# moat: full default isolation, seccomp on, limits on
		printf 'case\t%s\tmoat\t%s\t%s\n' "$wl" "$t" "$(printf '%s\t' "$MOAT" run \
			--memory 256M --pids 64 --cpus 1 -l "$lang" "$f" | sed "s/$tab\$//")"
		[ -z "$MOAT_B" ] || printf 'case\t%s\tmoat-b\t%s\t%s\n' "$wl" "$t" "$(printf '%s\t' \
			"$MOAT_B" run --memory 256M --pids 64 --cpus 1 -l "$lang" "$f" | sed "s/$tab\$//")"
	done
} >"$cases"

limits=$("$MOAT" run --json --memory 256M --pids 64 --cpus 1 -l sh "$work/true/main.sh" 2>/dev/null |
	sed -n 's/.*"limits":\({[^}]*}\).*/\1/p')
[ -z "$limits" ] || printf '@note\tmoat runs with --memory 256M --pids 64 --cpus 1; limits enforced by %s\n' \
	"$limits" >>"$cases"
printf '@note\t%s\n' \
	"every runner runs INTERPRETER FILE with the same file and the same environment (moat runs /sandbox/main.EXT the same way); true = sh running exec /bin/true" \
	"overhead = median(runner) - median(bare); ratio to bwrap = overhead(runner) / overhead(bwrap); p10/p90 = spread" \
	"ns-floor = bench/nsfloor.c: one more process, clone3 into moat's seven namespaces, uid/gid maps, exec of the program as pid 1; no mounts, /proc, seccomp, cgroups or init: the least any namespace sandbox pays on this host" \
	"launcher peak RSS / CPU = VmHWM and on-CPU time (schedstat) of the launched process itself at its exit, children excluded (moat: the supervisor alone; bwrap: its outer process; bare: the program), median of $MEMRUNS separate untimed runs under ptrace" \
	>>"$cases"

status=0
"$DRIVER" -n "$N" -w "$WARMUP" -m "$MEMRUNS" -t "$TPUT_SECS" -k "$CLIENTS" -s "$SEED" -g "$GAP_MS" \
	-C "$work" -o "$OUT" "$cases" || status=$?
echo "bench: wrote $OUT.md and $OUT.json" >&2
exit $status
