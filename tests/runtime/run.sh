#!/bin/sh
# Host-side tests of the shims in runtime/: the handler bootstraps and the
# key-value store (no sandbox and no broker needed: the tests fake it).
# Uses Debian's python3, the interpreter the sandbox runs, when present.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
status=0
echo "== runtime/python ($py)"
PYTHONDONTWRITEBYTECODE=1 "$py" -m unittest discover -s "$root/tests/runtime" -p 'test_*.py' || status=1
echo "== runtime/js (node $(node --version))"
node --test "$root/tests/runtime/" || status=1
exit $status
