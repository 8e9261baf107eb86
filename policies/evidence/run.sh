#!/bin/sh
# Traces the workloads moat exists for, inside moat, as root and rootless, and
# writes the system calls each made (policies/evidence/README.md): the ones of
# workloads/ here and every workload of tests/workloads (named wl-NAME).
#   usage: policies/evidence/run.sh MOAT_BIN [ONLY]     (make seccomp-evidence)
#   MODES="root rootless" (default) or one of them; PYTESTS: other CPython
#   test modules than issue 37's; PYTEST_TIMEOUT: seconds per module (300).
# Writes policies/evidence/calls/<workload>.<root|rootless>.txt (name, calls,
# refused: see extract.py) and policies/evidence/union.txt (every name any
# workload called, over every calls/ file). ONLY: an extended regular
# expression; only the workloads whose name it matches run.
# The runs are traced with strace -f (following the supervisor into the
# sandbox); rootless is strace -u nobody (moat's rootless mode as uid 65534).
# A workload that fails is reported and its calls are kept all the same: the
# list is of what it tried.
set -u
MOAT=$(realpath "${1:?usage: run.sh MOAT_BIN [ONLY]}")
ONLY=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v strace >/dev/null || { echo "run.sh: strace is needed (apt-get install strace)" >&2; exit 2; }
work=$(mktemp -d /var/tmp/moat-evidence.XXXXXX) || exit 2
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
cp "$here"/workloads/* "$work"/ && chmod 644 "$work"/*
mkdir -p "$here/calls"
SPIN_ROOTFS=${SPIN_ROOTFS:-/var/tmp/moat-spin-rootfs}
# CPython's regression suites named in issue 37 (Debian: libpython3.11-testsuite)
PYTESTS=${PYTESTS:-"test_json test_re test_collections test_tempfile test_subprocess test_threading test_os test_shutil test_select test_mmap"}
failed=0
tab=$(printf '\t')
oldifs=$IFS
python3 "$repo/tests/workloads/run.py" --prepare "$work/wl" || exit 2
python3 "$repo/tests/workloads/run.py" --list all >"$work/wl.list" || exit 2

# trace NAME MODE CMD...: run CMD (which runs moat) under strace
trace() {
	name=$1 mode=$2
	shift 2
	echo "$name" | grep -Eq "$ONLY" || return 0
	out="$work/$name.$mode"
	user=""
	[ "$mode" = rootless ] && user="-u nobody"
	start=$(date +%s)
	# shellcheck disable=SC2086
	(cd "$work" && strace -f -qq -s 0 --decode-pids=pidns -o "$out.trace" $user "$@") \
		>"$out.out" 2>"$out.err" </dev/null
	rc=$?
	python3 "$here/extract.py" "$out.trace" >"$here/calls/$name.$mode.txt"
	n=$(wc -l <"$here/calls/$name.$mode.txt")
	if [ "$rc" -ne 0 ]; then
		failed=$((failed + 1))
		echo "$name ($mode): exit $rc, $n names, $(($(date +%s) - start)) s: $(tail -n 2 "$out.err" | tr '\n' ' ')"
	else
		echo "$name ($mode): ok, $n names, $(($(date +%s) - start)) s"
	fi
	rm -f "$out.trace"
}

for mode in ${MODES:-root rootless}; do
	trace python-regrtest $mode "$MOAT" run --timeout 30m --memory 2G -- \
		python3 -m test -j2 --timeout "${PYTEST_TIMEOUT:-300}" $PYTESTS
	trace node $mode "$MOAT" run --timeout 5m "$work/node.js"
	trace typescript $mode "$MOAT" run --timeout 5m "$work/hello.ts"
	trace bash-coreutils $mode "$MOAT" run -l bash --timeout 5m "$work/coreutils.sh"
	trace git $mode "$MOAT" run -l bash --timeout 5m "$work/git.sh"
	trace tar $mode "$MOAT" run -l bash --timeout 5m "$work/tar.sh"
	trace python-fetch $mode "$MOAT" run --timeout 5m "$work/fetch.py"
	trace curl $mode "$MOAT" run -l bash --timeout 5m "$work/curl.sh"
	# tests/workloads' whole set (make, CMake, perl, node --test, git, tar/xz,
	# Go, CPython's suites module by module): the argv run.py --list gives
	while IFS="$tab" read -r wname wtimeout wmemory wargs; do
		IFS=$tab
		# shellcheck disable=SC2086  # the tab-separated argv, split on tabs
		set -- $wargs
		IFS=$oldifs
		trace "wl-$wname" "$mode" "$MOAT" run --timeout "${wtimeout}s" --memory "$wmemory" \
			--max-output 16777216 --workdir "$work/wl" -- "$@"
	done <"$work/wl.list"
	if [ -d "$SPIN_ROOTFS" ]; then
		trace spin-toolbox $mode sh "$repo/tests/spin/check-toolbox.sh" "$SPIN_ROOTFS" "$MOAT"
	else
		echo "spin-toolbox ($mode): skipped, no $SPIN_ROOTFS (rootfs/build-rootfs.sh --profile spin)"
	fi
done
cut -f1 "$here"/calls/*.txt | sort -u >"$here/union.txt"
echo "union: $(wc -l <"$here/union.txt") names in $here/union.txt; $failed workload run(s) failed"
