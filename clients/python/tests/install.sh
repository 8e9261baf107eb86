#!/bin/bash
# The Python client installs with nothing but pip (issue 48): into a fresh venv, offline
# (--no-index --no-build-isolation), through its own build backend (clients/python/_build,
# standard library only), then imports and runs print(1) through the built moat. Prints TAP.
#   1 pip and ensurepip's setuptools, no wheel (the pyenv/venv case where setuptools'
#     backend stopped with "invalid command 'bdist_wheel'")
#   2 nothing but pip (setuptools and wheel uninstalled)
#   3 pip wheel, then the wheel installed (its RECORD checked: every file's sha256 and size)
#   4 the sdist (the backend's build_sdist) installed
# Usage: clients/python/tests/install.sh [BUILD_DIR]   (default build)
set -u
cd "$(dirname "$0")/../../.."
build=${1:-build}
moat="$(pwd)/$build/moat"
src="$(pwd)/clients/python"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$2" | tail -15; }

work=$(mktemp -d /tmp/moat-pyinstall-XXXXXX)
trap 'rm -rf "$work"' EXIT
log=$work/log

# a fresh venv (its pip from ensurepip) of a Python that can make one (Debian's needs
# python3-venv; pyenv's can)
v=$work/venv
venv_py=
for py in python3 /usr/bin/python3; do
	if command -v "$py" >/dev/null 2>&1 && "$py" -m venv "$v" >"$log" 2>&1; then
		venv_py=$py
		break
	fi
	rm -rf "$v"
done
if [ -z "$venv_py" ]; then
	echo "1..1"
	echo "ok 1 - python client install # SKIP no python3 here can make a venv with pip" \
		"(apt-get install python3-venv)"
	exit 0
fi
echo "1..4"
echo "# $($venv_py --version 2>&1) ($(command -v "$venv_py"))"

# the installed client runs print(1) through the built binary (from a directory that is not
# the source tree, so that the import is the installed one's)
runs() {
	(cd "$work" && MOAT_BIN="$moat" PYTHONDONTWRITEBYTECODE=1 "$1/bin/python" -c '
import moat_sandbox, sys
assert "site-packages" in moat_sandbox.__file__, moat_sandbox.__file__
r = moat_sandbox.create_sandbox().run("print(1)")
assert r["exitCode"] == 0 and r["stdout"] == "1\n", r
print("# ran:", r["stdout"].strip(), "from", moat_sandbox.__file__)
')
}
pipq() { "$1/bin/python" -m pip --disable-pip-version-check --no-input -q "${@:2}"; }

pipq "$v" uninstall -y wheel >>"$log" 2>&1
if pipq "$v" install --no-index --no-build-isolation "$src" >>"$log" 2>&1 && runs "$v" >>"$log" 2>&1; then
	ok "pip install --no-index --no-build-isolation into a venv with pip and setuptools, no wheel"
else
	notok "pip install --no-index --no-build-isolation into a venv with pip and setuptools, no wheel" "$log"
fi

: >"$log"
pipq "$v" uninstall -y moat-sandbox setuptools wheel >>"$log" 2>&1
if "$v/bin/python" -c 'import setuptools' 2>/dev/null; then
	notok "nothing but pip: setuptools is still importable in the venv" "$log"
elif pipq "$v" install --no-index --no-build-isolation "$src" >>"$log" 2>&1 && runs "$v" >>"$log" 2>&1; then
	ok "pip install --no-index --no-build-isolation with nothing but pip"
else
	notok "pip install --no-index --no-build-isolation with nothing but pip" "$log"
fi

: >"$log"
pipq "$v" uninstall -y moat-sandbox >>"$log" 2>&1
mkdir -p "$work/wheels"
if pipq "$v" wheel --no-index --no-build-isolation -w "$work/wheels" "$src" >>"$log" 2>&1 &&
	"$v/bin/python" - "$work"/wheels/moat_sandbox-*-py3-none-any.whl >>"$log" 2>&1 <<'EOF' &&
import base64, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
record = [n for n in names if n.endswith(".dist-info/RECORD")]
assert len(record) == 1, names
rows = [l.split(",") for l in z.read(record[0]).decode().splitlines() if l]
listed = {r[0] for r in rows}
assert listed == names, ("RECORD and the archive differ", listed ^ names)
for path, h, size in rows:
    if path == record[0]:
        assert h == "" and size == "", (path, h, size)
        continue
    data = z.read(path)
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert h == want and int(size) == len(data), (path, h, want, size, len(data))
meta = z.read(record[0].replace("RECORD", "METADATA")).decode()
assert "Name: moat-sandbox" in meta and "Metadata-Version: 2.1" in meta, meta[:300]
assert "Root-Is-Purelib: true" in z.read(record[0].replace("RECORD", "WHEEL")).decode()
assert "moat_sandbox/py.typed" in names
print("# RECORD: %d files, each sha256 and size right" % (len(rows) - 1))
EOF
	pipq "$v" install --no-index "$work"/wheels/moat_sandbox-*.whl >>"$log" 2>&1 && runs "$v" >>"$log" 2>&1; then
	ok "pip wheel, its RECORD checked, the wheel installed"
else
	notok "pip wheel, its RECORD checked, the wheel installed" "$log"
fi

: >"$log"
pipq "$v" uninstall -y moat-sandbox >>"$log" 2>&1
mkdir -p "$work/sdist"
if (cd "$src" && "$v/bin/python" -c 'import sys; sys.path.insert(0, "_build"); import moat_build
print("# sdist:", moat_build.build_sdist(sys.argv[1]))' "$work/sdist") >>"$log" 2>&1 &&
	pipq "$v" install --no-index --no-build-isolation "$work"/sdist/moat_sandbox-*.tar.gz >>"$log" 2>&1 &&
	runs "$v" >>"$log" 2>&1; then
	ok "the sdist built and installed offline with nothing but pip"
else
	notok "the sdist built and installed offline with nothing but pip" "$log"
fi
[ "$fails" -eq 0 ]
