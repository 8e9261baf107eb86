#!/bin/bash
# make install into a scratch DESTDIR, then check what it put there and run it
# from there: the file list and modes, the man page and the completion against
# the binary's own help, moat version / run / doctor / a kvEnabled exec that
# needs the installed runtime shims (MOAT_RUNTIME_DIR unset), as root and as
# uid 65534 when run as root, the AppArmor profile through apparmor_parser
# (AppArmor 4, tools/apparmor4.sh), and make uninstall.
# TAP (tools/tap.sh): "ok N - ...", "not ok N - ...", "ok N - ... # SKIP" per check,
# and "# check-install: N passed, N failed, N skipped" last; exits 1 on a failure.
#   usage: tests/install/check.sh [BUILD]     (make check-install)
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
MAKE=${MAKE:-make}
PREFIX=/usr/local
pass=0 fail=0 skip=0
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; pass=$((pass + 1)); }
bad() { n=$((n + 1)); echo "not ok $n - $*"; fail=$((fail + 1)); }
skipped() { n=$((n + 1)); echo "ok $n - ${*%:} # SKIP not run here"; skip=$((skip + 1)); }
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}
start=$(date +%s)
umask 022
dest=$(mktemp -d /tmp/moat-install.XXXXXX)
work=$(mktemp -d /tmp/moat-install-work.XXXXXX)
trap 'rm -rf "$dest" "$work"' EXIT
chmod 0755 "$dest" "$work"

if ! $MAKE -s install BUILD="$BUILD" DESTDIR="$dest" PREFIX=$PREFIX APPARMOR=yes \
	>"$work/install.log" 2>&1; then
	cat "$work/install.log"
	bad "make install DESTDIR=$dest"
	echo "# check-install: $pass passed, $fail failed, $skip skipped"
	exit 1
fi
ok "make install DESTDIR=... PREFIX=$PREFIX APPARMOR=yes"

# ---- the file list, with modes: exactly these files and nothing else
root="$dest$PREFIX"
py3=/usr/bin/python3
[ -x "$py3" ] || py3=python3
pydir="$PREFIX/lib/python3$($py3 -c 'import sys; print(".%d" % sys.version_info[1])' 2>/dev/null)/dist-packages"
{
	echo "755 $PREFIX/bin/moat"
	echo "644 $PREFIX/lib/moat/moat-zygote.so"
	echo "644 $PREFIX/share/moat/policies/default.json"
	echo "644 $PREFIX/share/moat/apparmor/moat"
	echo "644 $PREFIX/share/man/man1/moat.1"
	echo "644 $PREFIX/share/bash-completion/completions/moat"
	# the per-user service's units (docs/SERVE.md, "Socket activation")
	echo "644 $PREFIX/lib/systemd/user/moat.socket"
	echo "644 $PREFIX/lib/systemd/user/moat.service"
	echo "644 /etc/apparmor.d/moat"
	echo "755 $PREFIX/lib/moat/mcp/mcp.js"
	for f in index.js live.js package.json package-lock.json; do echo "644 $PREFIX/lib/moat/mcp/$f"; done
	find runtime -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path 'runtime/bin/*' |
		sed "s,^,644 $PREFIX/share/moat/,"
	# the live sandboxes' agent (docs/SANDBOXES.md), built by make
	echo "755 $PREFIX/share/moat/runtime/bin/moat-agent"
	# the Python client, where the host's Debian python3 looks under $PREFIX
	ls clients/python/moat_sandbox/*.py clients/python/moat_sandbox/py.typed |
		sed "s,^clients/python/,644 $pydir/,"
} | sort -k2 >"$work/want"
(cd "$dest" && find . -type f ! -path "./${PREFIX#/}/lib/moat/mcp/node_modules/*" -printf '%m /%P\n') |
	sort -k2 >"$work/got"
if diff -u "$work/want" "$work/got" >"$work/diff"; then
	ok "installed files and modes ($(wc -l <"$work/got") files)"
else
	cat "$work/diff"
	bad "installed files and modes"
fi
odd_dirs=$(cd "$dest" && find . -mindepth 1 -type d ! -perm 0755 -printf '/%P %m\n')
check "installed directories are 0755${odd_dirs:+ (not: $odd_dirs)}" test -z "$odd_dirs"
check "runtime shims are byte-identical to runtime/" \
	diff -r -x __pycache__ -x '*.pyc' runtime "$root/share/moat/runtime"
check "AppArmor profile in /etc/apparmor.d and share/moat is apparmor/moat" \
	sh -c "cmp -s apparmor/moat '$dest/etc/apparmor.d/moat' && \
	       cmp -s apparmor/moat '$root/share/moat/apparmor/moat'"
check "installed binary is the build's" cmp -s "$BUILD/moat" "$root/bin/moat"
# moat mcp's node_modules: what the lock names, production only, readable by all
mods=$(cd "$root/lib/moat/mcp" && node -e '
const lock = require("./package-lock.json");
const fs = require("fs");
const bad = Object.entries(lock.packages).filter(([p, v]) => p && !v.dev && !fs.existsSync(p)).map(([p]) => p);
console.log(bad.length ? `missing: ${bad.join(" ")}` : "ok");' 2>&1)
check "lib/moat/mcp/node_modules holds every package of the lock${mods#ok}" test "$mods" = ok
odd=$(find "$root/lib/moat/mcp/node_modules" ! -type l ! -perm -0444 -printf '%P ' | head -c 300)
check "lib/moat/mcp/node_modules is readable by everyone${odd:+ (not: $odd)}" test -z "$odd"
check "the Python client's directory $pydir is one of $py3's site directories" \
	"$py3" -c 'import site, sys; sys.exit(sys.argv[1] not in site.getsitepackages())' "$pydir"
# the client's own packaging: pip without a package index or build isolation (Debian's
# setuptools), from a copy so that the tree gets no build directory
if "$py3" -c 'import setuptools, pip' 2>/dev/null; then
	cp -r clients/python "$work/pyclient" && rm -rf "$work/pyclient/build" "$work/pyclient"/*.egg-info
	if (cd "$work" && "$py3" -m pip install -q --no-build-isolation --no-index --no-deps \
		--target "$work/pip" "$work/pyclient" >"$work/pip.log" 2>&1) &&
		PYTHONPATH="$work/pip" "$py3" -c 'import moat_sandbox, os, sys
sys.exit(not os.path.exists(os.path.join(os.path.dirname(moat_sandbox.__file__), "py.typed")))'; then
		ok "pip install --no-build-isolation --no-index clients/python (offline): importable, typed"
	else
		cat "$work/pip.log"
		bad "pip install --no-build-isolation --no-index clients/python"
	fi
else
	skipped "pip install of clients/python (no pip or setuptools for $py3):"
fi

# ---- the man page: renders, and names every command and option of the help texts
moat_bin="$root/bin/moat"
man1="$root/share/man/man1/moat.1"
check "moat.1 is a man(7) page for moat(1)" grep -q '^\.TH "moat" "1"' "$man1"
if command -v man >/dev/null 2>&1; then
	MANWIDTH=80 man -l "$man1" >"$work/man.txt" 2>"$work/man.err"
	check "man -l renders moat.1 without warnings (sections NAME..SEE ALSO)" \
		sh -c "[ ! -s '$work/man.err' ] && grep -q '^EXIT STATUS' '$work/man.txt' && \
		       grep -q '^SEE ALSO' '$work/man.txt'"
else
	skipped "man -l (man-db is not installed):"
fi
{
	"$moat_bin" --help
	"$moat_bin" run --help
	"$moat_bin" serve --help
	"$moat_bin" kv --help
	"$moat_bin" mcp --help
} >"$work/help.txt" 2>&1
missing=""
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$work/help.txt" | sort -u); do
	grep -qF -- "*$opt*" docs/moat.1.scd || missing="$missing $opt"
done
for cmd in run exec serve kv mcp doctor policy version; do
	grep -qE "^\*$cmd(\*| )" docs/moat.1.scd || missing="$missing $cmd"
done
check "moat.1 documents every command and every option of the help texts${missing:+ (missing:$missing)}" \
	test -z "$missing"
# every option of the commands' option tables (src/cli/opts.h), as the
# parsers know them
missing=""
for cmd in run exec serve kv; do
	opts=$("$moat_bin" __options $cmd) || { missing="$missing (moat __options $cmd failed)"; continue; }
	[ -n "$opts" ] || missing="$missing (moat __options $cmd: none)"
	for opt in $opts; do
		grep -qF -- "*$opt*" docs/moat.1.scd || missing="$missing $cmd:$opt"
	done
done
check "moat.1 documents every option of the option tables${missing:+ (missing:$missing)}" test -z "$missing"

# ---- bash completion, sourced from where it was installed
comp="$root/share/bash-completion/completions/moat"
complete_words() { # the candidates for the words given, the last one being completed
	bash -c 'source "$1"; shift; COMP_WORDS=(moat "$@"); COMP_CWORD=$#
		_moat; printf "%s\n" "${COMPREPLY[@]}"' _ "$comp" "$@" 2>/dev/null
}
[ "$(complete_words '' | tr '\n' ' ')" = "run exec serve kv mcp doctor policy version help " ] &&
	ok "completion: the commands" || bad "completion: the commands ($(complete_words '' | tr '\n' ' '))"
[ "$(complete_words run --ti)" = "--timeout" ] && ok "completion: run --ti → --timeout" ||
	bad "completion: run --ti → $(complete_words run --ti)"
[ "$(complete_words run -l ty)" = "typescript" ] && ok "completion: run -l ty → typescript" ||
	bad "completion: run -l ty → $(complete_words run -l ty)"
[ "$(complete_words serve --no | tr "\n" " ")" = "--no-auth --no-kv --no-pool-zygote --node " ] &&
	ok "completion: serve --no → --no-auth --no-kv --no-pool-zygote --node" ||
	bad "completion: serve --no → $(complete_words serve --no)"
# every option of the tables is offered after its command, with its short name
missing=""
for cmd in run exec serve kv; do
	offered=" $(complete_words $cmd - | tr '\n' ' ') "
	for opt in $("$moat_bin" __options $cmd); do
		case $offered in *" $opt "*) ;; *) missing="$missing $cmd:$opt" ;; esac
	done
done
[ -z "$missing" ] && ok "completion: every option of the option tables" ||
	bad "completion: options not offered:$missing"
: >"$work/compfile.txt"
[ "$(complete_words run --file "d=$work/compf")" = "d=$work/compfile.txt" ] &&
	ok "completion: run --file DEST=SRC completes SRC" ||
	bad "completion: run --file d=$work/compf → $(complete_words run --file "d=$work/compf")"
[ "$(complete_words exec --provider da)" = "daytona" ] && ok "completion: exec --provider da → daytona" ||
	bad "completion: exec --provider da → $(complete_words exec --provider da)"
[ "$(complete_words policy c)" = "check" ] && ok "completion: policy c → check" ||
	bad "completion: policy c → $(complete_words policy c)"
missing=""
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$work/help.txt" | sort -u); do
	grep -qF -- "$opt" "$comp" || missing="$missing $opt"
done
check "completion knows every option of the help texts${missing:+ (missing:$missing)}" test -z "$missing"

# ---- the installed binary runs, and finds its runtime beside itself
run_installed() { # [as uid 65534] the checks that run the installed moat
	local who=$1 pre=()
	if [ "$who" = "uid 65534" ]; then
		pre=(setpriv --reuid 65534 --regid 65534 --clear-groups)
	fi
	local home="$work/home-${who// /}"
	mkdir -p "$home"
	[ "$who" = "uid 65534" ] && chown 65534:65534 "$home"
	local env=(env -u MOAT_RUNTIME_DIR -u MOAT_CONFIG HOME="$home" XDG_CACHE_HOME= XDG_STATE_HOME=
		PATH=/usr/bin:/bin)
	local v
	v=$("${pre[@]}" "${env[@]}" "$moat_bin" version 2>&1)
	case $v in "moat $(sed -n 's/^#define MOAT_VERSION "\(.*\)"/\1/p' include/moat.h)"*)
		ok "$who: installed moat version: ${v%%$'\n'*}" ;;
	*) bad "$who: installed moat version: $v" ;;
	esac
	v=$(cd "$home" && "${pre[@]}" "${env[@]}" "$moat_bin" run -c 'print(6*7)' 2>&1)
	[ "$v" = 42 ] && ok "$who: installed moat run -c 'print(6*7)' → 42" ||
		bad "$who: installed moat run: $v"
	# the Python client from where it was installed, on the installed binary, sync and asyncio
	v=$(cd "$home" && "${pre[@]}" "${env[@]}" PYTHONPATH="$dest$pydir" PYTHONDONTWRITEBYTECODE=1 "$py3" -c '
import asyncio, sys, moat_sandbox as m
assert m.__file__.startswith(sys.argv[2]), m.__file__
with m.create_sandbox(binary=sys.argv[1], timeout=20000) as s:
    print(s.run("print(6*7)").stdout.strip())
async def main():
    async with m.AsyncSandbox(binary=sys.argv[1]) as a:
        return (await a.run("console.log(6*7)", language="javascript")).stdout.strip()
print(asyncio.run(main()))' "$moat_bin" "$dest$pydir" 2>&1)
	[ "$v" = $'42\n42' ] && ok "$who: the installed Python client (moat_sandbox) runs print(6*7) → 42, sync and async" ||
		bad "$who: the installed Python client: $v"
	v=$(cd "$home" && "${pre[@]}" "${env[@]}" "$moat_bin" doctor 2>&1)
	echo "$v" | grep -qxF "runtime shims:      $root/share/moat/runtime" &&
		ok "$who: installed moat doctor finds the installed runtime shims" ||
		bad "$who: moat doctor: $(echo "$v" | grep 'runtime shims')"
	# the runtime's python shim, through a kvEnabled run of the installed moat
	local req='{"code":"from spin_sdk import key_value\ns = key_value.open_default()\ns.set(\"k\", b\"v1\")\nprint(s.get(\"k\").decode())","language":"python","sandboxId":"install-check","kvEnabled":true}'
	v=$(cd "$home" && printf '%s' "$req" |
		"${pre[@]}" "${env[@]}" "$moat_bin" exec --kv "$home/kv.sqlite3" 2>&1)
	case $v in *'"stdout":"v1\n"'*'"exitCode":0'*)
		ok "$who: kvEnabled exec through the installed runtime shims" ;;
	*) bad "$who: kvEnabled exec: $v" ;;
	esac
	# moat mcp: the installed server and its node_modules, one run_code call over stdio
	# (standard input stays open until the answer to the call is there)
	local out="$home/mcp.out"
	: >"$out"
	chmod 0666 "$out"
	local calls="$PWD/tests/install/mcp-call.jsonl"
	(cd "$home" && { cat "$calls"
		for _ in $(seq 300); do grep -q '"id":2' "$out" && break; sleep 0.1; done; } |
		timeout 30 "${pre[@]}" "${env[@]}" "$moat_bin" mcp --timeout 10s >"$out" 2>/dev/null)
	v=$(cat "$out")
	case $v in *'"structuredContent":{"stdout":"42\n"'*'"exitCode":0'*)
		ok "$who: installed moat mcp answers run_code over stdio" ;;
	*) bad "$who: installed moat mcp: $v" ;;
	esac
}
run_installed "$(id -un)"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
	run_installed "uid 65534"
else
	skipped "the installed binary as uid 65534 (not root):"
fi

# ---- docs/ci.md: its listings are docs/examples/*.yml, and their steps (all
# but checkout, install and the sudo lines) run with the installed moat against
# a small repository of a CI check's shape
ci_listings=$(python3 - <<'PY'
import re
doc = open("docs/ci.md").read()
blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
want = [open("docs/examples/github-actions.yml").read(), open("docs/examples/gitlab-ci.yml").read()]
print("same" if blocks == want else "differ")
PY
)
check "docs/ci.md shows docs/examples/github-actions.yml and gitlab-ci.yml verbatim" \
	test "$ci_listings" = same
if python3 -c 'import yaml' 2>/dev/null && command -v jq >/dev/null 2>&1; then
	repo=$work/ci-repo
	mkdir -p "$repo/ci" "$repo/data/sub" "$repo/bin" "$repo/tmp"
	ln -s "$moat_bin" "$repo/bin/moat"
	printf 'a,b\n1,2\n' >"$repo/data/input.csv"
	printf 'hello\n' >"$repo/data/sub/notes.txt"
	cat >"$repo/ci/check.py" <<'PY'
import csv, os
rows = list(csv.reader(open("data/input.csv")))
assert not os.path.exists("/home") and os.getuid() == 65534
# the checkout is read-only under --workdir: the report goes under $HOME
report = os.path.join(os.environ["HOME"], "report")
os.makedirs(report, exist_ok=True)
open(os.path.join(report, "summary.txt"), "w").write(f"{len(rows)} rows\n")
print("rows:", len(rows))
PY
	chmod -R a+rwX "$repo"
	while IFS= read -r line; do
		case $line in ok:*) ok "${line#ok: }" ;; FAIL:*) bad "${line#FAIL: }" ;; *) echo "  $line" ;; esac
	done < <(cd "$repo" && PATH="$repo/bin:$PATH" RUNNER_TEMP="$repo/tmp" python3 - "$OLDPWD" <<'PY'
import os, subprocess, sys, yaml
top = sys.argv[1]
steps = []
gh = yaml.safe_load(open(f"{top}/docs/examples/github-actions.yml"))
for st in gh["jobs"]["check"]["steps"]:
    if "run" in st and "sudo" not in st["run"]:
        steps.append(("github-actions.yml: " + st["name"], st["run"]))
gl = yaml.safe_load(open(f"{top}/docs/examples/gitlab-ci.yml"))
for job in ("untrusted-check", "untrusted-check-report"):
    steps.append((f"gitlab-ci.yml: {job}", "\n".join(gl[job]["script"])))
for name, script in steps:
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script],
                       capture_output=True, text=True)
    good = r.returncode == 0 and "rows: 2" in r.stdout
    print(("ok: " if good else "FAIL: ") + name + ("" if good else f" (exit {r.returncode})"))
    if not good:
        print(r.stdout[-2000:] + r.stderr[-2000:])
PY
	)
	[ -f "$repo/summary.txt" ] && [ "$(cat "$repo/summary.txt")" = "2 rows" ] &&
		ok "gitlab-ci.yml: the returned report/summary.txt" || bad "gitlab-ci.yml: no summary.txt"
else
	skipped "the docs/ci.md workflow steps (python3-yaml or jq missing):"
fi

# ---- the AppArmor profile, parsed by AppArmor 4 (the userns rule is 4.0's)
profile="$dest/etc/apparmor.d/moat"
if parser=$(tools/apparmor4.sh 2>"$work/aa4.err"); then
	if "$parser" -Q -K "$profile" >"$work/aa.out" 2>&1; then
		ok "apparmor_parser -Q -K accepts the profile ($("$parser" --version | head -n 1))"
	else
		cat "$work/aa.out"
		bad "apparmor_parser -Q -K rejects the profile"
	fi
	# the check is not vacuous: the same parser rejects a broken rule
	sed 's/^  userns,/  usernz,/' "$profile" >"$work/broken"
	check "apparmor_parser rejects a broken copy of the profile" \
		sh -c "! '$parser' -Q -K '$work/broken' >/dev/null 2>&1"
else
	sed 's/^/  /' "$work/aa4.err"
	skipped "apparmor_parser (AppArmor 4) on the profile: none available:"
	if command -v apparmor_parser >/dev/null 2>&1; then
		# an older parser checks the rest: the abi and userns rules are 4.0's
		sed -e 's,<abi/4.0>,<abi/3.0>,' -e '/^  userns,$/d' "$profile" >"$work/aa3"
		check "apparmor_parser $(apparmor_parser --version | sed -n '1s/.* //p') accepts the profile less its 4.0 rules" \
			apparmor_parser -Q -K "$work/aa3"
	fi
fi

# ---- make uninstall takes every file away again
if $MAKE -s uninstall BUILD="$BUILD" DESTDIR="$dest" PREFIX=$PREFIX >"$work/uninstall.log" 2>&1; then
	left=$(cd "$dest" && find . -type f)
	check "make uninstall removes every installed file${left:+ (left: $left)}" test -z "$left"
else
	cat "$work/uninstall.log"
	bad "make uninstall"
fi

echo "1..$n"
echo "# check-install: $(($(date +%s) - start)) s"
echo "# check-install: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
