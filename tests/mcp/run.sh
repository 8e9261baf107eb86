#!/bin/bash
# moat mcp (clients/node/mcp.js) through the MCP SDK's own client, against the built
# binary, in both modes: as root (when this runs as root) and as uid 65534 (rootless).
# Each mode is one `node --test` run reporting in TAP, which tools/check.sh sums
# (tools/tap.sh); without the SDK (npm ci in clients/node) the cases say
# they are skipped.
# Usage: tests/mcp/run.sh [BUILD_DIR]   (default build)
set -u
cd "$(dirname "$0")/../.."
moat="$(pwd)/${1:-build}/moat"
status=0
echo "-- moat mcp, root mode"
MOAT_MCP_MODE=root MOAT_BIN="$moat" node --test --test-reporter=tap tests/mcp/mcp.test.js || status=1
echo "-- moat mcp, rootless mode (uid 65534)"
if [ "$(id -u)" = 0 ]; then
	# the suite, the server and the binary must be readable by 65534 where they are
	MOAT_MCP_MODE=rootless MOAT_BIN="$moat" HOME=/nonexistent TMPDIR=/tmp \
		setpriv --reuid=65534 --regid=65534 --clear-groups node --test --test-reporter=tap tests/mcp/mcp.test.js || status=1
else
	MOAT_MCP_MODE=rootless MOAT_BIN="$moat" node --test --test-reporter=tap tests/mcp/mcp.test.js || status=1
fi
exit $status
