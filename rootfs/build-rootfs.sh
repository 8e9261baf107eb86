#!/bin/sh
# Builds a dedicated, minimal root for `moat run --rootfs DIR`: a Debian
# minbase with the interpreters moat runs, and nothing of this host in it.
#   usage: rootfs/build-rootfs.sh [--profile default|spin] DIR [SUITE] [MIRROR]
#   e.g.   sudo rootfs/build-rootfs.sh /var/lib/moat/rootfs bookworm
#          sudo rootfs/build-rootfs.sh --profile spin /var/lib/moat/spin-rootfs
# Profiles:
#   default  python3, nodejs, esbuild, bash, ca-certificates
#   spin     the "Spin toolbox": the packages of rootfs/spin/debian-packages.txt
#            (the default set plus numpy, tabulate, markdown, jinja2, regex, bs4,
#            sqlalchemy, pydantic, yaml), each checked against its pinned version,
#            and the npm packages of rootfs/spin/package-lock.json in /node_modules
#            (`npm ci` on this host: needs npm). Debian bookworm only.
# MIRROR defaults to deb.debian.org, or, when that is not reachable, to the
# Debian mirror this host's apt uses (/etc/apt/sources.list*).
# Needs root and debootstrap (apt-get install debootstrap). The result is
# owned by root and must not be writable by the users who run moat.
set -eu
usage='usage: build-rootfs.sh [--profile default|spin] DIR [SUITE] [MIRROR]'
PROFILE=default
case "${1:-}" in
--profile) PROFILE=${2:?$usage}; shift 2 ;;
--profile=*) PROFILE=${1#--profile=}; shift ;;
esac
DIR=${1:?$usage}
SUITE=${2:-bookworm}
MIRROR=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
SPIN="$HERE/spin"

case "$PROFILE" in
default)
	PACKAGES=python3,nodejs,esbuild,bash,ca-certificates
	;;
spin)
	[ "$SUITE" = bookworm ] || { echo "build-rootfs: the spin profile is pinned to bookworm (not $SUITE)" >&2; exit 1; }
	for f in debian-packages.txt package.json package-lock.json; do
		[ -f "$SPIN/$f" ] || { echo "build-rootfs: $SPIN/$f is missing" >&2; exit 1; }
	done
	# debian-packages.txt: "PACKAGE VERSION" per line, '#' comments
	PINS=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$SPIN/debian-packages.txt")
	PACKAGES=$(printf '%s\n' "$PINS" | awk '{ printf "%s%s", s, $1; s = "," }')
	[ -n "$PACKAGES" ] || { echo "build-rootfs: no package in $SPIN/debian-packages.txt" >&2; exit 1; }
	if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
		echo "build-rootfs: the spin profile needs npm and node on this host (apt-get install npm)" >&2
		exit 1
	fi
	# exact versions only: no ^, ~, ranges or tags in package.json
	node -e '
		const deps = require(process.argv[1]).dependencies || {};
		const loose = Object.entries(deps).filter(([, v]) => !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(v));
		for (const [n, v] of loose) console.error(`build-rootfs: package.json: ${n} "${v}" is not an exact version`);
		process.exit(loose.length ? 1 : 0);' "$SPIN/package.json"
	;;
*)
	echo "build-rootfs: unknown profile $PROFILE (default or spin)" >&2
	exit 1
	;;
esac

[ "$(id -u)" -eq 0 ] || { echo "build-rootfs: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-rootfs: apt-get install debootstrap" >&2; exit 1; }
case "$DIR" in /*) ;; *) echo "build-rootfs: DIR must be absolute" >&2; exit 1 ;; esac
if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
	echo "build-rootfs: $DIR exists and is not empty" >&2
	exit 1
fi

# is MIRROR/dists/SUITE/Release there? (wget is what debootstrap uses)
reachable() {
	if command -v wget >/dev/null; then
		wget -q -T 15 -t 1 -O /dev/null "$1/dists/$SUITE/Release"
	elif command -v curl >/dev/null; then
		curl -fsS -m 15 -o /dev/null "$1/dists/$SUITE/Release"
	else
		return 0
	fi
}
# this host's own apt mirror for SUITE, https ones included, or nothing
host_mirror() {
	"$HERE/../tools/debian-mirror.sh" --https "$SUITE" ""
}
if [ -z "$MIRROR" ]; then
	MIRROR=http://deb.debian.org/debian
	if ! reachable "$MIRROR"; then
		m=$(host_mirror)
		if [ -n "$m" ] && [ "$m" != "$MIRROR" ]; then
			echo "build-rootfs: $MIRROR is not reachable; using this host's apt mirror $m" >&2
			MIRROR=$m
		fi
	fi
fi

tmp="$DIR.partial.$$"
npmwork=
cleanup() {
	rm -rf "$tmp"
	[ -z "$npmwork" ] || rm -rf "$npmwork"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR"

if [ "$PROFILE" = spin ]; then
	# debootstrap --include cannot pin: check what it installed against the pins
	bad=0
	installed=$(dpkg-query --admindir="$tmp/var/lib/dpkg" -W -f '${Package} ${Version} ${db:Status-Abbrev}\n')
	printf '%s\n' "$PINS" | while read -r pkg want rest; do
		got=$(printf '%s\n' "$installed" | awk -v p="$pkg" '$1 == p && $3 == "ii" { print $2 }')
		if [ -z "$want" ]; then
			echo "build-rootfs: debian-packages.txt: no version for $pkg" >&2
			exit 1
		elif [ "$got" != "$want" ]; then
			echo "build-rootfs: $pkg is ${got:-not installed}, pinned to $want" >&2
			exit 1
		fi
	done || bad=1
	if [ "$bad" -ne 0 ]; then
		echo "build-rootfs: the mirror's $SUITE differs from rootfs/spin/debian-packages.txt" \
			"(a point release? update the pins on purpose, or use a snapshot mirror)" >&2
		exit 1
	fi
	echo "build-rootfs: Debian packages match rootfs/spin/debian-packages.txt"

	# the npm packages, exactly as package-lock.json says, in /node_modules:
	# node resolves a bare import from /sandbox by walking up to /node_modules.
	# Installed on this host (no package.json left in the root), no install scripts.
	npmwork=$(mktemp -d)
	cp "$SPIN/package.json" "$SPIN/package-lock.json" "$npmwork/"
	(cd "$npmwork" && npm ci --ignore-scripts --omit=dev --no-audit --no-fund --loglevel=warn)
	mv "$npmwork/node_modules" "$tmp/node_modules"
	rm -rf "$npmwork"
	npmwork=
	# every package.json dependency is installed at its version (npm runs on node)
	node -e '
		const fs = require("fs"), [spin, root] = process.argv.slice(1);
		const deps = JSON.parse(fs.readFileSync(spin + "/package.json", "utf8")).dependencies || {};
		let bad = 0;
		for (const [name, want] of Object.entries(deps)) {
			let got = "missing";
			try { got = JSON.parse(fs.readFileSync(`${root}/node_modules/${name}/package.json`, "utf8")).version; } catch {}
			if (got !== want) { console.error(`build-rootfs: npm ${name} is ${got}, pinned to ${want}`); bad = 1; }
		}
		process.exit(bad);' "$SPIN" "$tmp"
	echo "build-rootfs: npm packages match rootfs/spin/package-lock.json"
fi

# what a sandbox must not find in its root: package caches, logs, a shell
# history, keys generated at install time
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* "$tmp/var/log/"* \
	"$tmp/root/".* "$tmp/etc/ssh/ssh_host_"* 2>/dev/null || true

# mount points moat needs (it mounts fresh /proc, /dev, /tmp and /sandbox; moat
# serve binds its read-only runtime shims on /opt/moat/runtime)
mkdir -p "$tmp/proc" "$tmp/dev" "$tmp/tmp" "$tmp/sandbox" "$tmp/opt/moat/runtime"
grep -q '^nobody:' "$tmp/etc/passwd" || echo 'nobody:x:65534:65534:nobody:/sandbox:/usr/sbin/nologin' >>"$tmp/etc/passwd"
grep -q '^nogroup:' "$tmp/etc/group" || echo 'nogroup:x:65534:' >>"$tmp/etc/group"
chown -R root:root "$tmp"
chmod -R go-w "$tmp"

mv "$tmp" "$DIR"
trap - EXIT
if [ "$PROFILE" = spin ]; then
	echo "build-rootfs: $DIR is ready: tests/spin/check-toolbox.sh $DIR build/moat"
else
	echo "build-rootfs: $DIR is ready: moat run --rootfs $DIR -l python -c 'print(42)'"
fi
