#!/bin/sh
# Host-side tests of the shims in runtime/: the handler bootstraps and the
# key-value store (no sandbox and no broker needed: the tests fake it).
# Uses Debian's python3, the interpreter the sandbox runs, when present.
# run.sh DIR runs another directory of such tests (tests/compat/spin).
# Both report in TAP (tools/tap.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=$(cd "${1:-$here}" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
status=0
echo "== ${dir#"$root"/}: python ($py)"
PYTHONDONTWRITEBYTECODE=1 "$py" "$root/tests/tap_unittest.py" "$dir" 'test_*.py' || status=1
echo "== ${dir#"$root"/}: js (node $(node --version))"
node --test --test-reporter=tap "$dir/" || status=1
exit $status
