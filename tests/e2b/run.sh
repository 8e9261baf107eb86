#!/bin/bash
# The unmodified e2b SDK (tests/e2b/e2b.test.js, docs/E2B.md) against the built moat
# serve, in both modes: as root (when this runs as root) and as uid 65534 (rootless).
# The SDK comes from npm, pinned by tests/e2b/package-lock.json (npm ci, once); when npm
# or its registry cannot be reached every case reports itself skipped (counted).
# Each mode is one `node --test` run reporting in TAP, which tools/check.sh sums.
# Usage: tests/e2b/run.sh [BUILD_DIR]   (default build)
set -u
cd "$(dirname "$0")/../.."
moat="$(pwd)/${1:-build}/moat"
if [ ! -d tests/e2b/node_modules/e2b ] || [ tests/e2b/package-lock.json -nt tests/e2b/node_modules/.package-lock.json ]; then
	if command -v npm >/dev/null 2>&1; then
		(cd tests/e2b && npm ci --ignore-scripts --no-audit --no-fund >/dev/null 2>&1) ||
			echo "-- npm ci in tests/e2b failed (no registry?): the cases report themselves skipped"
	else
		echo "-- no npm: the e2b cases report themselves skipped"
	fi
fi
status=0
echo "-- the e2b SDK against moat serve, root mode"
MOAT_E2B_MODE=root MOAT_BIN="$moat" node --test --test-reporter=tap tests/e2b/e2b.test.js || status=1
echo "-- the e2b SDK against moat serve, rootless mode (uid 65534)"
if [ "$(id -u)" = 0 ]; then
	MOAT_E2B_MODE=rootless MOAT_BIN="$moat" HOME=/nonexistent TMPDIR=/tmp \
		setpriv --reuid=65534 --regid=65534 --clear-groups \
		node --test --test-reporter=tap tests/e2b/e2b.test.js || status=1
else
	MOAT_E2B_MODE=rootless MOAT_BIN="$moat" node --test --test-reporter=tap tests/e2b/e2b.test.js || status=1
fi
exit $status
