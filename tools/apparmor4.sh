#!/bin/sh
# Prints the path of a command that runs AppArmor 4's apparmor_parser on this
# host, for syntax checks of apparmor/moat (its `userns,` rule needs AppArmor 4;
# Debian 12 ships 3.0.8). The host's own parser when it is 4.x; otherwise the
# one of Debian 13 (trixie): its apparmor and libc6 packages fetched once with
# apt-get download (apt's own lists kept apart from the host's, in CACHE) and
# unpacked there, run through their own dynamic loader. Nothing is installed.
#   usage: tools/apparmor4.sh [CACHE]    (default /var/tmp/moat-apparmor4)
# Exits 1, saying why on stderr, when neither is possible (no network).
set -eu
CACHE=${1:-/var/tmp/moat-apparmor4}
here=$(cd "$(dirname "$0")" && pwd)

if command -v apparmor_parser >/dev/null 2>&1 &&
	apparmor_parser --version 2>/dev/null | head -n 1 | grep -Eq 'version ([4-9]|[1-9][0-9])\.'; then
	command -v apparmor_parser
	exit 0
fi
if [ -x "$CACHE/apparmor_parser" ]; then
	echo "$CACHE/apparmor_parser"
	exit 0
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
	{ echo "apparmor4: needs apt-get and dpkg-deb" >&2; exit 1; }

mkdir -p "$(dirname "$CACHE")"
tmp=$(mktemp -d "$CACHE.partial.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mirror=$("$here/debian-mirror.sh" trixie)
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs" "$tmp/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
	>"$tmp/sources.list"
apt_opts="-q -o Dir::Etc::SourceList=$tmp/sources.list -o Dir::Etc::SourceParts=/dev/null
	-o Dir::State::Lists=$tmp/lists -o Dir::Cache=$tmp/cache -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
if ! apt-get $apt_opts update >"$tmp/log" 2>&1 ||
	! (cd "$tmp/debs" && apt-get $apt_opts download apparmor/trixie libc6/trixie) \
		>>"$tmp/log" 2>&1; then
	echo "apparmor4: could not fetch trixie's apparmor and libc6 from $mirror:" >&2
	tail -n 3 "$tmp/log" >&2
	exit 1
fi
for d in "$tmp"/debs/*.deb; do
	dpkg-deb -x "$d" "$tmp/root"
done
ld=$(find "$tmp/root" -name 'ld-linux*.so.*' -type f | head -n 1)
libc=$(find "$tmp/root" -name libc.so.6 -type f | head -n 1)
[ -n "$ld" ] && [ -n "$libc" ] || { echo "apparmor4: no loader in trixie's libc6" >&2; exit 1; }
rm -rf "$CACHE"
mv "$tmp/root" "$CACHE"
ld=$CACHE${ld#"$tmp/root"}
libdir=$(dirname "$CACHE${libc#"$tmp/root"}")
cat >"$CACHE/apparmor_parser" <<WRAP
#!/bin/sh
# AppArmor 4's parser from Debian trixie, with its own libc (tools/apparmor4.sh)
exec "$ld" --library-path "$libdir" "$CACHE/usr/sbin/apparmor_parser" \\
	--base "$CACHE/etc/apparmor.d" "\$@"
WRAP
chmod 0755 "$CACHE/apparmor_parser"
"$CACHE/apparmor_parser" --version >/dev/null 2>&1 ||
	{ echo "apparmor4: trixie's apparmor_parser does not run here" >&2; rm -rf "$CACHE"; exit 1; }
echo "$CACHE/apparmor_parser"
