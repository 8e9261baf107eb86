#!/bin/sh
# make deb: the Debian package of debian/, built with dpkg-buildpackage -us -uc -b
# in a copy of the tree under BUILD/deb, so that the package's own build
# (STATIC_DEPS=no, Debian's compiler flags) and its `make clean` leave BUILD's
# other files alone. The .deb is copied to BUILD/. The package's unit tests are
# skipped (DEB_BUILD_OPTIONS=nocheck: make check-unit runs them); DEB_CHECK=yes
# runs them in the package build too.
#   usage: tools/build-deb.sh [BUILD]
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
for c in dpkg-buildpackage dpkg-parsechangelog dh scdoc; do
	command -v "$c" >/dev/null 2>&1 ||
		{ echo "make deb: $c is missing (apt-get install dpkg-dev debhelper scdoc;" \
			"tools/deps.sh installs them)" >&2; exit 1; }
done
ver=$(dpkg-parsechangelog -S Version)
src=$(sed -n 's/^#define MOAT_VERSION "\(.*\)"/\1/p' include/moat.h)
if [ "${ver%%-*}" != "$src" ]; then
	echo "make deb: debian/changelog is at $ver but include/moat.h says $src:" \
		"add a changelog entry first" >&2
	exit 1
fi
out=$BUILD/deb
rm -rf "$out"
mkdir -p "$out/moat-$ver"
# what git tracks or would track (uncommitted work included), else the tree
# without build directories
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z -co --exclude-standard |
		tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$out/moat-$ver" -xf -
else
	tar --exclude=./.git --exclude=./build --exclude='./build-*' -cf - . |
		tar -C "$out/moat-$ver" -xf -
fi
opts="${DEB_BUILD_OPTIONS:-}"
profiles="${DEB_BUILD_PROFILES:-}"
if [ "${DEB_CHECK:-no}" != yes ]; then
	opts="nocheck $opts"
	profiles="nocheck $profiles"
fi
jobs=$(nproc 2>/dev/null || echo 1)
echo "make deb: dpkg-buildpackage -us -uc -b in $out/moat-$ver" \
	"(DEB_BUILD_OPTIONS='$opts', log: $out/build.log)"
if ! (cd "$out/moat-$ver" &&
	DEB_BUILD_OPTIONS="$opts" DEB_BUILD_PROFILES="$profiles" \
		dpkg-buildpackage -us -uc -b -j"$jobs") >"$out/build.log" 2>&1; then
	tail -n 40 "$out/build.log" >&2
	echo "make deb: dpkg-buildpackage failed (whole log: $out/build.log)" >&2
	exit 1
fi
rm -rf "$out/moat-$ver"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
cp "$out/moat_${ver}_$arch.deb" "$BUILD/"
echo "make deb: $BUILD/moat_${ver}_$arch.deb"
dpkg-deb -f "$BUILD/moat_${ver}_$arch.deb" Depends Recommends | sed 's/^/  /'
