#!/bin/bash
# The Debian package in a clean Debian 12 chroot (make check-deb, after make deb):
# apt-get install ./moat_*.deb resolves its Depends and Recommends from the
# mirror, then, as root in the chroot, moat version (libseccomp, libcap, libnl-3
# shared), moat doctor, one moat run and one rootless run, the files the
# package put in place, and the AppArmor profile's handling by the maintainer
# scripts: not put into /etc/apparmor.d by AppArmor 3 (Debian 12's), put there
# when AppArmor 4's abi appears (the file trigger), removed on purge.
#
# The chroot is a debootstrap minbase of bookworm, made once and kept as a
# tarball (MOAT_DEB_CHROOT_BASE, default /var/tmp/moat-deb-chroot-base.tar;
# about a minute to make); each run unpacks a fresh copy. Downloaded packages
# are kept in MOAT_DEB_APT_CACHE (default /var/tmp/moat-deb-chroot-apt), so a
# warm run fetches only the package lists. The mirror is this host's apt
# mirror for bookworm (tools/debian-mirror.sh). Needs root and debootstrap.
# Prints ok/FAIL/note lines and "check-deb: N passed, N failed, N skipped".
#   usage: tests/install/deb.sh [BUILD]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
SUITE=bookworm
BASE=${MOAT_DEB_CHROOT_BASE:-/var/tmp/moat-deb-chroot-base.tar}
APTCACHE=${MOAT_DEB_APT_CACHE:-/var/tmp/moat-deb-chroot-apt}
pass=0 fail=0 skip=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() {
	echo "check-deb: $(($(date +%s) - start)) s in all"
	echo "check-deb: $pass passed, $fail failed, $skip skipped"
	[ "$fail" -eq 0 ]
	exit
}
start=$(date +%s)
phase=$start
took() { local now; now=$(date +%s); echo "check-deb: $1 took $((now - phase)) s"; phase=$now; }

[ "$(id -u)" -eq 0 ] || { echo "check-deb: needs root (debootstrap, chroot)" >&2; exit 1; }
for c in debootstrap unshare chroot dpkg-parsechangelog dpkg-architecture; do
	command -v "$c" >/dev/null 2>&1 || { echo "check-deb: $c is missing" >&2; exit 1; }
done
ver=$(dpkg-parsechangelog -S Version)
deb="$BUILD/moat_${ver}_$(dpkg-architecture -qDEB_HOST_ARCH).deb"
[ -f "$deb" ] || { echo "check-deb: no $deb: run make deb first" >&2; exit 1; }

mirror=$(tools/debian-mirror.sh $SUITE)
security=$(tools/debian-mirror.sh $SUITE-security none)

# ---- the base chroot, made once
if [ ! -f "$BASE" ]; then
	echo "check-deb: making the $SUITE minbase chroot from $mirror (once; kept as $BASE)"
	mkdir -p "$(dirname "$BASE")"
	tmp=$(mktemp -d "$BASE.partial.XXXXXX")
	if ! debootstrap --variant=minbase "$SUITE" "$tmp/root" "$mirror" >"$tmp/log" 2>&1; then
		tail -n 20 "$tmp/log"
		rm -rf "$tmp"
		bad "debootstrap --variant=minbase $SUITE"
		finish
	fi
	{
		echo "deb $mirror $SUITE main"
		echo "deb $mirror $SUITE-updates main"
		[ "$security" = none ] || echo "deb $security $SUITE-security main"
	} >"$tmp/root/etc/apt/sources.list"
	# no package's maintainer scripts may start a service in the chroot
	printf '#!/bin/sh\nexit 101\n' >"$tmp/root/usr/sbin/policy-rc.d"
	chmod 0755 "$tmp/root/usr/sbin/policy-rc.d"
	rm -f "$tmp/root/var/cache/apt/archives/"*.deb
	tar -C "$tmp/root" -cf "$tmp/base.tar" . && mv "$tmp/base.tar" "$BASE"
	rm -rf "$tmp"
	took "debootstrap (cold cache)"
fi

root=$(mktemp -d /var/tmp/moat-deb-chroot.XXXXXX)
trap 'rm -rf "$root"' EXIT
tar -C "$root" -xf "$BASE"
mkdir -p "$APTCACHE/partial"
cp "$deb" "$root/tmp/"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
took "unpacking the chroot"

# runs a script as root inside the chroot, in a mount and pid namespace of its
# own: /proc, /dev, /sys and the apt cache are mounted there and go with it.
# The chroot is entered with pivot_root, not chroot(2): the kernel refuses a
# user namespace to a chrooted process (EPERM), and moat needs one.
in_chroot() {
	unshare --mount --pid --fork --propagation private /bin/sh -c '
		set -e
		r=$1 cache=$2 script=$3
		mount --bind "$r" "$r"
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		mount --rbind /sys "$r/sys"
		mount --bind "$cache" "$r/var/cache/apt/archives"
		mkdir -p "$r/.oldroot"
		cd "$r"
		pivot_root . .oldroot
		umount -l /.oldroot
		exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
			DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 /bin/sh -c "cd / && $script"' \
		_ "$root" "$APTCACHE" "$1"
}

# ---- install with apt: Depends and Recommends from the mirror
log=$root/tmp/apt.log
if in_chroot "apt-get -q update && apt-get -q -y install /tmp/$(basename "$deb")" >"$log" 2>&1; then
	ok "apt-get install ./$(basename "$deb") in a clean $SUITE chroot"
else
	tail -n 30 "$log"
	bad "apt-get install ./$(basename "$deb") in a clean $SUITE chroot"
	finish
fi
took "apt-get update and install"
st=$(in_chroot "dpkg-query -W -f='\${Status} \${Version}' moat")
[ "$st" = "install ok installed $ver" ] && ok "dpkg: moat $ver installed" || bad "dpkg: $st"
for p in python3 nodejs esbuild libsqlite3-0 libmicrohttpd12; do # nodejs: a Depends now
	in_chroot "dpkg-query -W -f='\${Status}' $p" 2>/dev/null | grep -q "install ok installed" ||
		missing="${missing:-} $p"
done
[ -z "${missing:-}" ] && ok "Recommends installed (python3 nodejs esbuild libsqlite3-0 libmicrohttpd12)" ||
	bad "Recommends not installed:$missing"

# ---- what the package put in place
files=$(in_chroot 'for f in /usr/bin/moat /usr/lib/moat/moat-zygote.so /usr/share/man/man1/moat.1.gz \
	/usr/share/bash-completion/completions/moat /usr/share/moat/apparmor/moat \
	/usr/share/moat/policies/default.json /usr/share/moat/runtime/python/spin_sdk/key_value.py \
	/usr/share/moat/runtime/js/spin-kv.mjs /usr/share/doc/moat/copyright /usr/lib/moat/mcp/mcp.js \
	/usr/lib/moat/mcp/node_modules/@modelcontextprotocol/sdk/package.json \
	/usr/lib/python3/dist-packages/moat_sandbox/__init__.py /usr/lib/python3/dist-packages/moat_sandbox/py.typed; do
	[ -f "$f" ] || echo "$f"; done')
[ -z "$files" ] && ok "the binary, the zygote's library, man page (gzipped), completion, profile, policy, runtime, MCP server and Python client are there" ||
	bad "missing from the package: $files"
[ ! -e "$root/etc/apparmor.d/moat" ] && ok "no /etc/apparmor.d/moat without AppArmor 4" ||
	bad "/etc/apparmor.d/moat exists without AppArmor 4"

# ---- run it
v=$(in_chroot 'moat version' 2>&1)
echo "$v" | sed 's/^/  /'
if echo "$v" | grep -q '^libseccomp .*(shared)$' && echo "$v" | grep -q '^libcap (shared)$' &&
	echo "$v" | grep -q '^libnl-3 .*(shared)$'; then
	ok "moat version: libseccomp, libcap and libnl-3 linked shared (Debian policy)"
else
	bad "moat version: libseccomp/libcap/libnl-3 not shared"
fi
in_chroot 'moat doctor' >"$root/tmp/doctor.log" 2>&1
rc=$?
sed 's/^/  /' "$root/tmp/doctor.log"
[ $rc -eq 0 ] && ok "moat doctor exits 0 in the chroot" || bad "moat doctor exits $rc"
grep -qxF 'runtime shims:      /usr/share/moat/runtime' "$root/tmp/doctor.log" &&
	ok "moat doctor finds /usr/share/moat/runtime" || bad "moat doctor: runtime shims not found"
v=$(in_chroot "cd /tmp && moat run -c 'print(6*7)'" 2>&1)
[ "$v" = 42 ] && ok "moat run -c 'print(6*7)' → 42 (as root in the chroot)" || bad "moat run: $v"
v=$(in_chroot "mkdir -p /tmp/u && chown 65534:65534 /tmp/u && cd /tmp/u &&
	setpriv --reuid 65534 --regid 65534 --clear-groups env HOME=/tmp/u \
	moat run -l javascript -c 'console.log(6*7)'" 2>&1)
[ "$v" = 42 ] && ok "moat run -l javascript as uid 65534 in the chroot → 42" || bad "rootless moat run: $v"
# moat mcp: Debian's node (Depends: nodejs) and the vendored node_modules, one call over stdio
mkdir -p "$root/tmp/m" && cp tests/install/mcp-call.jsonl "$root/tmp/m/in.jsonl"
v=$(in_chroot "cd /tmp/m && { cat in.jsonl; for i in \$(seq 300); do grep -q '\"id\":2' out 2>/dev/null && break; sleep 0.1; done; } |
	timeout 30 moat mcp --timeout 10s >out 2>/dev/null; cat out" 2>&1)
case $v in *'"structuredContent":{"stdout":"42\n"'*) ok "moat mcp answers run_code over stdio (Debian's nodejs, /usr/lib/moat/mcp)" ;;
*) bad "moat mcp in the chroot: $v" ;;
esac
v=$(in_chroot "cd /tmp && python3 -c 'from moat_sandbox import create_sandbox
print(create_sandbox(timeout=20000).run(\"print(6*7)\").stdout.strip())'" 2>&1)
[ "$v" = 42 ] && ok "the Python client (import moat_sandbox, moat exec on PATH) → 42" || bad "python3 moat_sandbox: $v"
took "the runs"

# ---- the AppArmor profile and the maintainer scripts
if in_chroot 'apt-get -q -y install --no-install-recommends apparmor' >"$log" 2>&1; then
	aav=$(in_chroot "dpkg-query -W -f='\${Version}' apparmor")
	[ ! -e "$root/etc/apparmor.d/moat" ] &&
		ok "AppArmor $aav (no userns rule) installed: the profile stays out of /etc/apparmor.d" ||
		bad "AppArmor $aav installed: /etc/apparmor.d/moat appeared, apparmor.service would fail"
	# AppArmor 4 arrives: a package of the test's own ships /etc/apparmor.d/abi/4.0
	# (a copy of 3.0's), and dpkg runs moat's file trigger as an upgrade would
	fake=$root/tmp/abi4
	mkdir -p "$fake/DEBIAN" "$fake/etc/apparmor.d/abi"
	cp "$root/etc/apparmor.d/abi/3.0" "$fake/etc/apparmor.d/abi/4.0"
	printf 'Package: moat-test-abi4\nVersion: 1\nArchitecture: all\nMaintainer: moat tests <none@invalid>\nDescription: AppArmor 4 abi stand-in for tests/install/deb.sh\n' \
		>"$fake/DEBIAN/control"
	if dpkg-deb --root-owner-group -b "$fake" "$root/tmp/abi4.deb" >"$log" 2>&1 &&
		in_chroot 'dpkg -i /tmp/abi4.deb' >>"$log" 2>&1 &&
		cmp -s "$root/usr/share/moat/apparmor/moat" "$root/etc/apparmor.d/moat"; then
		ok "a package bringing AppArmor 4's abi: the trigger puts the profile into /etc/apparmor.d"
	else
		tail -n 10 "$log"
		bad "with AppArmor 4's abi, no /etc/apparmor.d/moat"
	fi
	[ "$(stat -c %a "$root/etc/apparmor.d/moat" 2>/dev/null)" = 644 ] &&
		ok "/etc/apparmor.d/moat is 0644" || bad "/etc/apparmor.d/moat mode"
	if in_chroot 'apt-get -q -y purge moat' >"$log" 2>&1 && [ ! -e "$root/etc/apparmor.d/moat" ] &&
		[ ! -e "$root/usr/bin/moat" ]; then
		ok "apt-get purge moat removes the binary and /etc/apparmor.d/moat"
	else
		tail -n 10 "$log"
		bad "apt-get purge moat"
	fi
else
	tail -n 10 "$log"
	bad "apt-get install apparmor in the chroot"
fi
took "AppArmor and purge"
finish
