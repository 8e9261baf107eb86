#!/bin/bash
# The Python client's tests (clients/python/tests, unittest) against the built binary, in
# both modes: as root (when this runs as root) and as uid 65534 (rootless), with the binary
# copied where that user can run it. Uses the host's Debian python3 (/usr/bin/python3 when
# there is one). Each mode reports in TAP (tests/tap_unittest.py), which
# tools/check.sh sums (tools/tap.sh).
# Usage: clients/python/tests/run.sh [BUILD_DIR]   (default build)
set -u
cd "$(dirname "$0")/../../.."
build=${1:-build}
moat="$(pwd)/$build/moat"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tests=clients/python/tests
status=0
echo "-- python client, $( [ "$(id -u)" = 0 ] && echo root || echo rootless ) mode ($($py --version 2>&1))"
MOAT_BIN="$moat" PYTHONDONTWRITEBYTECODE=1 "$py" tests/tap_unittest.py "$tests" 2>&1 || status=1
if [ "$(id -u)" = 0 ]; then
	echo "-- python client, rootless mode (uid 65534)"
	bin=$(mktemp -d /tmp/moat-pyclient-XXXXXX)
	cp "$moat" "$bin/moat"
	[ -f "$build/moat-zygote.so" ] && cp "$build/moat-zygote.so" "$bin/"
	chmod 755 "$bin" "$bin/moat"
	chmod -R a+rX "$bin"
	# a home of its own: moat serve keeps its key-value store under ~/.local/state
	mkdir "$bin/home" && chown 65534:65534 "$bin/home"
	(cd /tmp && MOAT_BIN="$bin/moat" MOAT_RUNTIME_DIR="$OLDPWD/runtime" HOME="$bin/home" \
		PYTHONDONTWRITEBYTECODE=1 setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$py" "$OLDPWD/tests/tap_unittest.py" "$OLDPWD/$tests") 2>&1 || status=1
	rm -rf "$bin"
fi
exit $status
