#!/bin/bash
# aistack conformance (tests/compat/*.test.js) against the built binary, in both modes:
# as root (when this runs as root) and as uid 65534 (rootless). Each mode is one
# `node --test` run, whose "# pass N" / "# fail N" / "# skipped N" lines tools/check.sh
# sums; a mode that cannot run here reports its cases skipped.
# Usage: tests/compat/run.sh [BUILD_DIR]   (default build)
set -u
cd "$(dirname "$0")/../.."
moat="$(pwd)/${1:-build}/moat"
status=0
echo "-- aistack conformance, root mode"
MOAT_COMPAT_MODE=root MOAT_BIN="$moat" node --test --test-reporter=tap tests/compat/aistack.test.js || status=1
echo "-- aistack conformance, rootless mode (uid 65534)"
if [ "$(id -u)" = 0 ]; then
	# the suite and the binary must be readable by 65534 where they are
	MOAT_COMPAT_MODE=rootless MOAT_BIN="$moat" HOME=/nonexistent \
		setpriv --reuid=65534 --regid=65534 --clear-groups node --test --test-reporter=tap tests/compat/aistack.test.js || status=1
else
	MOAT_COMPAT_MODE=rootless MOAT_BIN="$moat" node --test --test-reporter=tap tests/compat/aistack.test.js || status=1
fi
exit $status
