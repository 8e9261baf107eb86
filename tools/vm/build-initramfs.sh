#!/bin/sh
# Build the initramfs for moat's test VM (tools/vm/run-vm.sh).
#
#   build-initramfs.sh KERNEL_ROOT KVER OUTPUT
#
# KERNEL_ROOT is an unpacked linux-image-*.deb (dpkg-deb -x), KVER its kernel
# version (lib/modules/KVER).  OUTPUT is a gzip'd newc cpio holding a static
# busybox, tools/vm/init.sh as /init, and the virtio/9p/overlay modules plus
# their dependencies (resolved from modules.dep, which is generated with depmod
# into KERNEL_ROOT if the package does not ship one), in load order.
# BUSYBOX=path overrides the busybox binary (it must be statically linked).
set -eu

[ $# -eq 3 ] || { echo "usage: $0 KERNEL_ROOT KVER OUTPUT" >&2; exit 2; }
KROOT=$1 KVER=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
MODDIR=$KROOT/lib/modules/$KVER
# Load order matters only for the first ones; dependencies are pulled in anyway.
MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
netfs fscache 9pnet 9pnet_virtio 9p overlay"

die() { echo "build-initramfs: $*" >&2; exit 1; }

[ -d "$MODDIR" ] || die "no $MODDIR (is $KROOT an unpacked kernel package?)"

BUSYBOX=${BUSYBOX:-$(command -v busybox || true)}
[ -n "$BUSYBOX" ] && [ -x "$BUSYBOX" ] || die "busybox not found (apt-get install busybox-static)"
if LC_ALL=C ldd "$BUSYBOX" >/dev/null 2>&1; then
	die "$BUSYBOX is dynamically linked; install busybox-static"
fi

# modules.dep: the .deb does not ship it (postinst runs depmod), so make it.
if [ ! -s "$MODDIR/modules.dep" ]; then
	if command -v depmod >/dev/null 2>&1; then
		depmod -b "$KROOT" "$KVER"
	else
		"$BUSYBOX" depmod -b "$KROOT" "$KVER"
	fi
	[ -s "$MODDIR/modules.dep" ] || die "depmod did not produce $MODDIR/modules.dep"
fi

STAGE=$(mktemp -d "${OUT%/*}/initramfs.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
for d in bin sbin usr/bin usr/sbin dev proc sys mnt/lower mnt/rw newroot lib/modules; do
	mkdir -p "$STAGE/$d"
done
cp "$BUSYBOX" "$STAGE/bin/busybox"
ln -s busybox "$STAGE/bin/sh"
cp "$HERE/init.sh" "$STAGE/init"
chmod 755 "$STAGE/init" "$STAGE/bin/busybox"

# Resolve dependencies depth-first so every module comes after what it needs.
LOAD=$STAGE/lib/modules/modules.load
: > "$LOAD"
dep_line() {	# print the modules.dep line of module $1 (name, '-' and '_' equal)
	local n
	n=$(printf '%s' "$1" | sed 's/[-_]/[-_]/g')
	grep -E "(^|/)$n\.ko(\.(xz|zst|gz))?:" "$MODDIR/modules.dep" | head -n 1
}
add_module() {	# $1: path relative to MODDIR, e.g. kernel/fs/9p/9p.ko
	local path base line dep
	path=$1
	base=${path##*/}; base=${base%.xz}; base=${base%.zst}; base=${base%.gz}
	grep -qx "$base" "$LOAD" && return 0
	line=$(grep -E "^$(printf '%s' "$path" | sed 's/[.]/[.]/g'):" "$MODDIR/modules.dep" | head -n 1)
	for dep in ${line#*:}; do
		add_module "$dep"
	done
	grep -qx "$base" "$LOAD" && return 0
	case $path in
	*.xz)  xz -dc "$MODDIR/$path" > "$STAGE/lib/modules/$base" ;;
	*.zst) zstd -qdc "$MODDIR/$path" > "$STAGE/lib/modules/$base" ;;
	*.gz)  gzip -dc "$MODDIR/$path" > "$STAGE/lib/modules/$base" ;;
	*)     cp "$MODDIR/$path" "$STAGE/lib/modules/$base" ;;
	esac
	echo "$base" >> "$LOAD"
}
for m in $MODULES; do
	line=$(dep_line "$m")
	if [ -z "$line" ]; then
		n=$(printf '%s' "$m" | sed 's/[-_]/[-_]/g')
		if grep -qE "(^|/)$n\.ko$" "$MODDIR/modules.builtin" 2>/dev/null; then
			continue	# built into the kernel
		fi
		die "module $m is neither in modules.dep nor in modules.builtin"
	fi
	add_module "${line%%:*}"
done

# Archive, owned by root, in a stable order.
if cpio --version 2>/dev/null | grep -q GNU; then
	CPIO="cpio --quiet -o -H newc --owner=0:0"
else
	CPIO="$BUSYBOX cpio -o -H newc"
fi
(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | $CPIO) | gzip -6 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "build-initramfs: $OUT ($(wc -l < "$LOAD") modules: $(tr '\n' ' ' < "$LOAD"))" >&2
