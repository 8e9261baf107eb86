#!/bin/sh
# Installs the Debian packages moat needs to build, test and run, when missing.
# As root it runs apt-get; otherwise it uses sudo if it can, else prints the line.
set -eu
BUILD="gcc make pkg-config libseccomp-dev libcap-dev libcjson-dev libcurl4-openssl-dev check libsubunit-dev libnftnl-dev libmnl-dev libmicrohttpd-dev"
RUNTIME="python3 nodejs esbuild bash"
TEST="iproute2 curl debootstrap"
missing=""
for p in $BUILD $RUNTIME $TEST; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# npm builds the Spin toolbox root (rootfs/build-rootfs.sh --profile spin);
# NodeSource's nodejs ships its own and conflicts with Debian's npm package
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi
echo "deps: missing:$missing"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO="sudo"
else
	echo "deps: run as root: apt-get update && apt-get install -y$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
