#!/bin/sh
# Builds a dedicated, minimal root for `moat run --rootfs DIR`: a Debian
# minbase with the interpreters moat runs, and nothing of this host in it.
#   usage: rootfs/build-rootfs.sh DIR [SUITE] [MIRROR]
#   e.g.   sudo rootfs/build-rootfs.sh /var/lib/moat/rootfs bookworm
# Needs root and debootstrap (apt-get install debootstrap). The result is
# owned by root and must not be writable by the users who run moat.
set -eu
DIR=${1:?usage: build-rootfs.sh DIR [SUITE] [MIRROR]}
SUITE=${2:-bookworm}
MIRROR=${3:-http://deb.debian.org/debian}
PACKAGES=python3,nodejs,esbuild,bash,ca-certificates

[ "$(id -u)" -eq 0 ] || { echo "build-rootfs: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-rootfs: apt-get install debootstrap" >&2; exit 1; }
case "$DIR" in /*) ;; *) echo "build-rootfs: DIR must be absolute" >&2; exit 1 ;; esac
if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
	echo "build-rootfs: $DIR exists and is not empty" >&2
	exit 1
fi

tmp="$DIR.partial.$$"
trap 'rm -rf "$tmp"' EXIT
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR"

# what a sandbox must not find in its root: package caches, logs, a shell
# history, keys generated at install time
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* "$tmp/var/log/"* \
	"$tmp/root/".* "$tmp/etc/ssh/ssh_host_"* 2>/dev/null || true

# mount points moat needs (it mounts fresh /proc, /dev, /tmp and /sandbox)
mkdir -p "$tmp/proc" "$tmp/dev" "$tmp/tmp" "$tmp/sandbox"
grep -q '^nobody:' "$tmp/etc/passwd" || echo 'nobody:x:65534:65534:nobody:/sandbox:/usr/sbin/nologin' >>"$tmp/etc/passwd"
grep -q '^nogroup:' "$tmp/etc/group" || echo 'nogroup:x:65534:' >>"$tmp/etc/group"
chown -R root:root "$tmp"
chmod -R go-w "$tmp"

mv "$tmp" "$DIR"
trap - EXIT
echo "build-rootfs: $DIR is ready: moat run --rootfs $DIR -l python -c 'print(42)'"
