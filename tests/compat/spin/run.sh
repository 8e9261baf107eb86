#!/bin/sh
# Conformance of moat's Spin SDK shims (runtime/) with Spin's Python and JS
# SDKs: each case cites the upstream file it comes from. Host-side, on the
# host's python3 and node, like tests/runtime/run.sh; no sandbox needed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
status=0
echo "== Spin Python SDK conformance ($py)"
PYTHONDONTWRITEBYTECODE=1 "$py" -m unittest discover -s "$here" -p 'test_*.py' || status=1
echo "== Spin JS SDK conformance (node $(node --version))"
node --test "$here/" || status=1
exit $status
