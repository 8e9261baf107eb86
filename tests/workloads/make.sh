#!/bin/sh
# The C project (cproj/) copied to $HOME, built with make -j2 and tested with
# make check; each step and each check prints a result line (README.md).
set -u
rm -rf "$HOME/cproj" && cp -R "$(dirname "$0")/cproj" "$HOME/cproj" && cd "$HOME/cproj" || exit 1
if make -j2 >make.log 2>&1; then
	echo "@@wl ok make.build"
else
	echo "@@wl fail make.build: $(tail -n 3 make.log | tr '\n' ' ')"
	cat make.log >&2
	exit 1
fi
if make check; then
	echo "@@wl ok make.check"
else
	echo "@@wl fail make.check: exit $?"
fi
