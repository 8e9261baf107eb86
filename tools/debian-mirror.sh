#!/bin/sh
# Prints the Debian archive to fetch SUITE from: this host's own apt mirror for
# SUITE (/etc/apt/sources.list and sources.list.d, one-line and deb822 forms),
# else DEFAULT (http://deb.debian.org/debian; may be given empty). https mirrors are
# passed over unless --https: a fresh minbase chroot has no CA certificates to check
# them (debootstrap, which downloads with the host's tools, can use them).
#   usage: tools/debian-mirror.sh [--https] SUITE [DEFAULT]
set -eu
skip='^https://'
if [ "${1:-}" = --https ]; then
	skip='^$'
	shift
fi
SUITE=${1:?usage: debian-mirror.sh [--https] SUITE [DEFAULT]}
DEFAULT=${2-http://deb.debian.org/debian}
m=$({
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v s="$SUITE" '
		$1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
			if ($(i + 1) == s) print $i }'
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$SUITE" '
			function flush() { if (deb && suite) for (j = 1; j <= nu; j++) print u[j]; deb = suite = nu = 0 }
			/^[[:space:]]*$/ { flush(); next }
			/^#/ { next }
			tolower($1) == "types:" { for (j = 2; j <= NF; j++) if ($j == "deb") deb = 1 }
			tolower($1) == "uris:" { for (j = 2; j <= NF; j++) u[++nu] = $j }
			tolower($1) == "suites:" { for (j = 2; j <= NF; j++) if ($j == s) suite = 1 }
			tolower($1) == "enabled:" && tolower($2) == "no" { deb = 0 }
			END { flush() }' "$f"
	done
} | sed 's,/*$,,' | grep -v "$skip" | head -n 1 || true)
echo "${m:-$DEFAULT}"
