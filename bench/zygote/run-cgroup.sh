#!/bin/sh
# bench/zygote/run-cgroup.sh -- the runs of README.md "The per-request cgroup
# leaf": bench.py --cgroup as root (the driver stands in for moat serve and
# writes the v1 tree; rootless has no cgroup delegation on this host), with
# the zygote keeping its capabilities and with none, the first repeated.
# Results in DIR (default bench/zygote/results/cgroup): cgroup-*.{md,json}, load in cgroup-runs.log.
#   make build/zygote/ready && sh bench/zygote/run-cgroup.sh [DIR]
set -u
cd "$(dirname "$0")/../.." || exit 1
[ "$(id -u)" = 0 ] || { echo "run-cgroup.sh: run as root (the driver writes the cgroup v1 tree)"; exit 2; }
B="bench/zygote/bench.py --moat $PWD/build/moat --zdir $PWD/build/zygote --cgroup"
R=${1:-bench/zygote/results/cgroup}
mkdir -p "$R"
run() {
	out=$1
	shift
	echo "== $out start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$R/cgroup-runs.log"
	timeout 1200 "$@" >"$R/$out.md" 2>&1
	echo "== $out rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$R/cgroup-runs.log"
}
: >"$R/cgroup-runs.log"
run cgroup-root-keep /usr/bin/python3 $B --caps keep --label "root, keeps caps" --out "$R/cgroup-root-keep.json"
run cgroup-root-nocaps /usr/bin/python3 $B --caps nocaps --label "root, no caps" --out "$R/cgroup-root-nocaps.json"
run cgroup-root-keep-2 /usr/bin/python3 $B --caps keep --label "root, keeps caps (again)" --out "$R/cgroup-root-keep-2.json"
