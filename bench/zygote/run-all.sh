#!/bin/sh
# bench/zygote/run-all.sh -- the five configurations of bench/zygote/README.md,
# one after the other, as root: the zygote keeping CAP_SYS_ADMIN/SETUID/SETGID
# or no capability at all, started by root and by uid 65534 (setpriv), and
# the gc.freeze variant. Results in bench/zygote/results/ (Markdown + JSON);
# the load average before and after each run in results/runs.log.
#   make build/zygote/ready && sh bench/zygote/run-all.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
[ "$(id -u)" = 0 ] || { echo "run-all.sh: run as root (it also runs as uid 65534 through setpriv)"; exit 2; }
B="bench/zygote/bench.py --moat $PWD/build/moat --zdir $PWD/build/zygote"
R=bench/zygote/results
mkdir -p "$R"
T=$(mktemp -d)
chmod 0777 "$T"
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
run() {
	out=$1
	shift
	echo "== $out start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$R/runs.log"
	timeout 900 "$@" >"$R/$out.md" 2>&1
	echo "== $out rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$R/runs.log"
}
: >"$R/runs.log"
run root-keep /usr/bin/python3 $B --caps keep --label root --out "$R/root-keep.json"
run rootless-keep $AS_NOBODY /usr/bin/python3 $B --caps keep --label "rootless (uid 65534)" --out "$T/rootless-keep.json"
run root-nocaps /usr/bin/python3 $B --caps nocaps --label root --out "$R/root-nocaps.json"
run rootless-nocaps $AS_NOBODY /usr/bin/python3 $B --caps nocaps --label "rootless (uid 65534)" --out "$T/rootless-nocaps.json"
run root-keep-gcfreeze /usr/bin/python3 $B --caps keep --gc-freeze --label root --out "$R/root-keep-gcfreeze.json"
cp "$T"/*.json "$R"/ 2>/dev/null
rm -rf "$T"
