#!/bin/sh
# Installs the Debian packages moat needs to build, test and run, when missing.
# As root it runs apt-get; otherwise it uses sudo if it can, else prints the line.
# FUZZ (make fuzz only) is optional: a host that cannot install it (not root,
# or a release without clang-14) still gets everything make check needs.
set -eu
BUILD="gcc make pkg-config libseccomp-dev libcap-dev libnl-3-dev libcjson-dev zlib1g-dev libcurl4-openssl-dev check libsubunit-dev libnftnl-dev libmnl-dev libmicrohttpd-dev libhiredis-dev libsqlite3-dev"
# make install (the man page) and make deb
PKG="scdoc dpkg-dev debhelper fakeroot"
RUNTIME="python3 nodejs esbuild bash"
# apparmor: apparmor_parser for make check-install (Debian 12's is 3.0; tools/apparmor4.sh
# brings AppArmor 4's for the userns rule); debootstrap also for make check-deb
# python3-matplotlib: the session suite checks a plot comes back as a PNG
# (docs/SESSIONS.md); without it that test reports itself skipped
# python3-yaml, jq: make check-install runs the steps of docs/examples/*.yml
# systemd, dbus-user-session, libpam-systemd: make check-systemd boots the host's root
# with systemd as the VM's PID 1 (a user manager, su sessions registered with logind)
# haproxy: make check-cluster (tests/cluster/two-node.sh) and make bench-cluster
# libpython3.11-testsuite, cmake: tests/workloads (CPython's regression suites and
# a CMake build, bare and inside moat; make check); strace: make seccomp-evidence
# bubblewrap: make bench's comparison rows (bench/run.sh; without it they are left out)
# qemu-system-x86, busybox-static, cpio: make check-vm and make check-systemd's VMs
# (tools/vm/run-vm.sh installs them when missing, but CI starts both VMs at once and
# two apt-gets then race for dpkg's lock: installed here, before either starts)
TEST="qemu-system-x86 busybox-static cpio iproute2 curl debootstrap redis-server apparmor python3-yaml python3-matplotlib jq haproxy systemd dbus-user-session libpam-systemd libpython3.11-testsuite cmake strace bubblewrap"
FUZZ="clang-14 libfuzzer-14-dev"
installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=""
for p in $BUILD $PKG $RUNTIME $TEST; do
	installed "$p" || missing="$missing $p"
done
# npm builds the Spin toolbox root (rootfs/build-rootfs.sh --profile spin);
# NodeSource's nodejs ships its own and conflicts with Debian's npm package
command -v npm >/dev/null 2>&1 || missing="$missing npm"
optional=""
for p in $FUZZ; do
	installed "$p" || optional="$optional $p"
done
if [ -z "$missing$optional" ]; then
	echo "deps: all packages present"
	exit 0
fi
[ -z "$missing" ] || echo "deps: missing:$missing"
[ -z "$optional" ] || echo "deps: missing (make fuzz only):$optional"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO="sudo"
else
	echo "deps: run as root: apt-get update && apt-get install -y$missing$optional" >&2
	[ -z "$missing" ] || exit 1
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
[ -z "$missing" ] || $SUDO apt-get install -y -qq --no-install-recommends $missing
if [ -n "$optional" ] && ! $SUDO apt-get install -y -qq --no-install-recommends $optional; then
	echo "deps: could not install$optional: make fuzz needs them, make check does not" >&2
fi
