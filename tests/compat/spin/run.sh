#!/bin/sh
# Conformance of moat's Spin SDK shims (runtime/) with Spin's Python and JS
# SDKs, each case citing the upstream file it comes from: host-side, on the
# host's python3 and node, the way tests/runtime/run.sh runs its tests.
here=$(cd "$(dirname "$0")" && pwd)
exec sh "$here/../../runtime/run.sh" "$here"
