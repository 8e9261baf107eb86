#!/bin/sh
# make bench: bench/run.sh back to back and spaced (GAP_MS=100: each run after a
# 100 ms quiet gap, as an agent's tool calls and CI steps come), as this user and,
# when that is root, as uid 65534 (rootless) too; then the clients' run("print(1)")
# through the user service, moat exec and bare python3, spaced (bench/clients.py).
# Results: bench/results/{root,rootless}-{b2b,spaced}.{md,json}.
#
#   sh bench/modes.sh [PATH/TO/moat]    (env: as bench/run.sh; N, WARMUP, ...)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
MOAT=${1:-$here/../build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
res=$here/results
mkdir -p "$res"
me=$( [ "$(id -u)" = 0 ] && echo root || echo rootless )
for gap in 0 100; do
	name=$([ "$gap" = 0 ] && echo b2b || echo spaced)
	GAP_MS=$gap OUT=$res/$me-$name sh "$here/run.sh" "$MOAT"
done
if [ "$me" = root ] && command -v setpriv >/dev/null; then
	bin=$(mktemp -d /tmp/moat-bench-bin-XXXXXX)
	out=$(mktemp -d /tmp/moat-bench-out-XXXXXX)
	trap 'rm -rf "$bin" "$out"' EXIT INT TERM
	cp "$MOAT" "$bin/moat"
	[ -f "$(dirname "$MOAT")/moat-zygote.so" ] && cp "$(dirname "$MOAT")/moat-zygote.so" "$bin/"
	chmod -R a+rX "$bin"
	chown 65534 "$out"
	for gap in 0 100; do
		name=$([ "$gap" = 0 ] && echo b2b || echo spaced)
		(cd /tmp && GAP_MS=$gap OUT=$out/rootless-$name MOAT_RUNTIME_DIR=$here/../runtime \
			setpriv --reuid=65534 --regid=65534 --clear-groups sh "$here/run.sh" "$bin/moat")
		cp "$out/rootless-$name.md" "$out/rootless-$name.json" "$res/"
	done
fi
python3 "$here/clients.py" "$MOAT" | tee "$res/$me-clients.md"
