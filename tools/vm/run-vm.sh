#!/bin/bash
# Run a command as root inside a qemu VM booting a stock Debian kernel with a
# pure cgroup v2 hierarchy; the guest sees the host's / read-only (with a tmpfs
# overlay) and this repository read-write at the same path.  See README.md.
#
#   tools/vm/run-vm.sh [--] COMMAND [ARG...]
#
# COMMAND runs in the repository directory; its exit status is this script's.
# 124: the VM timed out; 125: the VM failed before reporting a status.
# Environment: MOAT_VM_CACHE (download/kernel/initramfs cache, default
# build/vm/cache), MOAT_VM_LOG (console log, default build/vm/console.log),
# MOAT_VM_TIMEOUT (seconds, default 1200), MOAT_VM_ACCEL (auto|kvm|tcg),
# MOAT_VM_MEM (MiB, default 2048), MOAT_VM_KERNEL_PKG (e.g. linux-image-6.1.0-57-amd64),
# MOAT_VM_VERBOSE=1 (kernel messages on the console), MOAT_TEST_SLOWDOWN
# (default 40 under TCG, 2 under KVM).  Host MOAT_* and CK_* variables are
# passed to COMMAND.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd -P)
VMDIR=$REPO/build/vm
CACHE=${MOAT_VM_CACHE:-$VMDIR/cache}
LOG=${MOAT_VM_LOG:-$VMDIR/console.log}
TIMEOUT=${MOAT_VM_TIMEOUT:-1200}
KVM_BOOT_TIMEOUT=${MOAT_VM_KVM_BOOT_TIMEOUT:-60}
MEM=${MOAT_VM_MEM:-2048}

say() { echo "run-vm: $*" >&2; }
die() { say "$*"; exit 125; }

[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [--] COMMAND [ARG...]" >&2; exit 2; }
case $REPO in *[[:space:]]*) die "repository path '$REPO' contains whitespace";; esac

t_start=$(date +%s.%N)

# ---- host tools --------------------------------------------------------------
need_pkgs=()
command -v qemu-system-x86_64 >/dev/null || need_pkgs+=(qemu-system-x86)
bb=$(command -v busybox || true)
if [ -z "$bb" ] || LC_ALL=C ldd "$bb" >/dev/null 2>&1; then need_pkgs+=(busybox-static); fi
command -v cpio >/dev/null || need_pkgs+=(cpio)
command -v dpkg-deb >/dev/null || need_pkgs+=(dpkg)
command -v apt-get >/dev/null || die "apt-get not found: this script needs a Debian-like host"
if [ ${#need_pkgs[@]} -gt 0 ]; then
	# -o DPkg::Lock::Timeout: another apt-get (a second VM starting beside this one)
	# is waited for, not taken for a failure
	line="apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends ${need_pkgs[*]}"
	if [ "$(id -u)" -eq 0 ]; then
		say "installing: ${need_pkgs[*]}"
		DEBIAN_FRONTEND=noninteractive $line >&2 ||
			{ apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 && DEBIAN_FRONTEND=noninteractive $line >&2; } ||
			die "could not install ${need_pkgs[*]}"
	else
		die "missing host packages; run as root: $line"
	fi
fi

# ---- kernel: apt-get download + dpkg-deb -x, cached ---------------------------
mkdir -p "$CACHE" "$VMDIR"
# two VMs at once (.ci/run runs make check-vm beside make check-systemd): one
# prepares the cache (kernel, vmlinux, initramfs) while the other waits
exec 9>"$CACHE/.lock"
flock 9
# The name linux-image-amd64 resolves to is remembered for a day (apt-cache takes ~2 s).
pkg=${MOAT_VM_KERNEL_PKG:-}
if [ -z "$pkg" ] && [ -n "$(find "$CACHE/kernel-pkg" -mmin -1440 2>/dev/null)" ]; then
	pkg=$(cat "$CACHE/kernel-pkg")
fi
if [ -z "$pkg" ]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[^ ]*-amd64\)$/\1/p' | head -n 1)
	[ -z "$pkg" ] || echo "$pkg" > "$CACHE/kernel-pkg"
fi
if [ -z "$pkg" ]; then	# no apt metadata: fall back on any kernel already cached
	pkg=$(ls -d "$CACHE"/linux-image-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
	pkg=${pkg##*/}
	[ -n "$pkg" ] || die "cannot find the kernel package (apt-get update?); set MOAT_VM_KERNEL_PKG"
fi
case $pkg in *-cloud-*) say "warning: $pkg is a -cloud- kernel; it may lack 9p";; esac
KROOT=$CACHE/$pkg
if [ ! -e "$KROOT/.complete" ]; then
	deb=$(ls "$CACHE/${pkg}_"*.deb 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -z "$deb" ]; then
		say "downloading $pkg"
		(cd "$CACHE" && apt-get download "$pkg" >&2) || die "apt-get download $pkg failed (apt-get update?)"
		deb=$(ls "$CACHE/${pkg}_"*.deb | sort -V | tail -n 1)
	fi
	say "unpacking $deb"
	rm -rf "$KROOT" && mkdir -p "$KROOT"
	dpkg-deb -x "$deb" "$KROOT"
	touch "$KROOT/.complete"
fi
KVER=${pkg#linux-image-}
VMLINUZ=$KROOT/boot/vmlinuz-$KVER
[ -r "$VMLINUZ" ] || die "no $VMLINUZ"
# Under TCG, decompressing the bzImage takes ~3 s of every boot; qemu boots an
# uncompressed ELF vmlinux directly through its PVH entry point, so keep one.
KERNEL=$VMLINUZ
if grep -qx 'CONFIG_PVH=y' "$KROOT/boot/config-$KVER" 2>/dev/null && command -v xz >/dev/null; then
	if [ ! -s "$KROOT/vmlinux" ]; then
		off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -n 1 | cut -d: -f1 || true)
		if [ -n "$off" ] && xz -dc --single-stream < <(tail -c +$((off + 1)) "$VMLINUZ") > "$KROOT/vmlinux.tmp" 2>/dev/null &&
		   [ "$(head -c 4 "$KROOT/vmlinux.tmp")" = $'\x7fELF' ]; then
			mv "$KROOT/vmlinux.tmp" "$KROOT/vmlinux"
		else
			rm -f "$KROOT/vmlinux.tmp"
			touch "$KROOT/vmlinux"	# empty: not extractable, use the bzImage
		fi
	fi
	[ -s "$KROOT/vmlinux" ] && KERNEL=$KROOT/vmlinux
fi

# ---- initramfs, rebuilt when its inputs change -------------------------------
bb=$(command -v busybox)
key=$( { echo "$KVER"; cat "$HERE/init.sh" "$HERE/build-initramfs.sh" "$bb"; } | sha256sum | cut -c1-12)
INITRD=$CACHE/initramfs-$KVER-$key.cpio.gz
if [ ! -s "$INITRD" ]; then
	rm -f "$CACHE"/initramfs-"$KVER"-*.cpio.gz
	BUSYBOX=$bb sh "$HERE/build-initramfs.sh" "$KROOT" "$KVER" "$INITRD" || die "initramfs build failed"
fi

flock -u 9
exec 9>&-

# ---- accelerator ---------------------------------------------------------------
kvm_usable() {
	grep -qwE 'vmx|svm' /proc/cpuinfo 2>/dev/null || return 1
	[ -c /dev/kvm ] || return 1
	timeout 5 sh -c 'exec 3<>/dev/kvm' 2>/dev/null
}
accel=${MOAT_VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
	if kvm_usable; then accel=kvm; else accel=tcg; fi
fi

# ---- per-run directory on the read-write share --------------------------------
RUN=$(mktemp -d "$VMDIR/run.XXXXXX")
qpid=
cleanup() {
	[ -n "$qpid" ] && kill "$qpid" 2>/dev/null
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
{
	echo "# written by tools/vm/run-vm.sh"
	while IFS='=' read -r name _; do
		case $name in MOAT_VM_*) continue;; esac
		echo "export $name=$(q "${!name}")"
	done < <(env | grep -E '^(MOAT|CK)_[A-Za-z0-9_]*=' || true)
	echo "cd $(q "$REPO") || exit 125"
	printf 'exec'
	for a in "$@"; do printf ' %s' "$(q "$a")"; done
	echo
} > "$RUN/cmd"

# ---- boot -------------------------------------------------------------------------
boot() {	# $1: kvm|tcg; sets vm_rc
	local acc=$1 slowdown cpu append t0 now firmware
	if [ "$acc" = kvm ]; then slowdown=${MOAT_TEST_SLOWDOWN:-2}; cpu=host
	else slowdown=${MOAT_TEST_SLOWDOWN:-40}; cpu=max; fi
	append="console=ttyS0 panic=-1 cgroup_no_v1=all mitigations=off"
	# MOAT_VM_SYSTEMD=1: systemd as PID 1 (init.sh, stage2_systemd), pure cgroup v2
	[ "${MOAT_VM_SYSTEMD:-0}" = 1 ] && append+=" moat.systemd=1 systemd.unified_cgroup_hierarchy=1 systemd.unit=moat-vm-check.service systemd.show_status=0"
	[ "${MOAT_VM_VERBOSE:-0}" = 1 ] || append+=" quiet loglevel=1"
	append+=" moat.repo=$REPO moat.run=$RUN moat.slowdown=$slowdown moat.accel=$acc"
	# qboot is quicker than SeaBIOS and prints nothing; SeaBIOS's serial output
	# begins with a terminal reset (ESC c), so silence it when qboot is missing.
	# shellcheck disable=SC2054  # the comma is qemu syntax
	if [ -e /usr/share/qemu/qboot.rom ]; then firmware=(-bios qboot.rom)
	else firmware=(-fw_cfg name=etc/sercon-port,string=0); fi
	rm -f "$RUN/status"
	: > "$LOG"
	say "booting $pkg ($acc, 1 cpu, ${MEM} MiB); console log: $LOG"
	# shellcheck disable=SC2086  # MOAT_VM_QEMU_ARGS is split on purpose
	qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot \
		-accel "$acc" -cpu "$cpu" -smp 1 -m "$MEM" \
		-kernel "$KERNEL" -initrd "$INITRD" -append "$append" \
		-serial stdio "${firmware[@]}" ${MOAT_VM_QEMU_ARGS:-} \
		-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
		-fsdev local,id=repo,path="$REPO",security_model=none,multidevs=remap \
		-device virtio-9p-pci,fsdev=repo,mount_tag=repo \
		</dev/null > >(tee "$LOG") 2>&1 &
	qpid=$!
	t0=$SECONDS
	while kill -0 "$qpid" 2>/dev/null; do
		sleep 0.5
		now=$((SECONDS - t0))
		if [ "$now" -ge "$TIMEOUT" ]; then
			say "timeout after ${TIMEOUT}s; killing qemu"
			kill "$qpid"; wait "$qpid" 2>/dev/null || true; qpid=
			vm_rc=124; return
		fi
		if [ "$acc" = kvm ] && [ "$now" -ge "$KVM_BOOT_TIMEOUT" ] &&
		   ! grep -q 'moat-vm: init' "$LOG"; then
			say "no sign of life from the KVM guest after ${now}s; retrying with TCG"
			kill "$qpid"; wait "$qpid" 2>/dev/null || true; qpid=
			vm_rc=-1; return
		fi
	done
	wait "$qpid" 2>/dev/null || say "qemu exited with status $?"
	qpid=
	sleep 0.2	# let tee drain
	if [ "$acc" = kvm ] && ! grep -q 'moat-vm: init' "$LOG"; then
		say "the KVM guest never reached /init; retrying with TCG"
		vm_rc=-1; return
	fi
	if [ -s "$RUN/status" ]; then
		vm_rc=$(cat "$RUN/status")
	else
		vm_rc=$(sed -n 's/^moat-vm: exit status \([0-9]*\).*/\1/p' "$LOG" | tail -n 1)
		[ -n "$vm_rc" ] || { say "the guest reported no exit status; see $LOG"; vm_rc=125; }
	fi
}

boot "$accel"
if [ "$vm_rc" = -1 ]; then boot tcg; fi
t_end=$(date +%s.%N)
say "exit status $vm_rc; total $(echo "$t_start $t_end" | awk '{printf "%.1f", $2-$1}')s"
exit "$vm_rc"
