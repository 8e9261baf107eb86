#!/bin/sh
# The CMake project (cmakeproj/, the sources of cproj/) copied to $HOME:
# configure, build, ctest; each step and each ctest test prints a result line
# (README.md). The test programs' own lines are not repeated here: make.sh
# reports them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$HOME/cm" && mkdir -p "$HOME/cm" && cp -R "$here/cproj" "$here/cmakeproj" "$HOME/cm/" || exit 1
cd "$HOME/cm" || exit 1
step() {
	name=$1
	shift
	if "$@" >"$name.log" 2>&1; then
		echo "@@wl ok cmake.$name"
	else
		echo "@@wl fail cmake.$name: $(tail -n 3 "$name.log" | tr '\n' ' ')"
		cat "$name.log" >&2
		exit 1
	fi
}
step configure cmake -S cmakeproj -B build -G "Unix Makefiles"
step build cmake --build build -j 2
ctest --test-dir build >ctest.log 2>&1
rc=$?
# "1/5 Test #1: lib ..............   Passed    0.00 sec"
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\(Passed\).*/@@wl ok cmake.ctest.\1/p
s/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\*\*\*\(.*\)/@@wl fail cmake.ctest.\1: \2/p
s/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\(Failed\|Exception\|Timeout\).*/@@wl fail cmake.ctest.\1: \2/p' ctest.log
[ "$rc" -eq 0 ] || cat ctest.log >&2
if [ "$rc" -eq 0 ]; then echo "@@wl ok cmake.ctest"; else echo "@@wl fail cmake.ctest: exit $rc"; fi
