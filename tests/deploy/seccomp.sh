#!/bin/bash
# The pod's seccomp profile (deploy/kubernetes/seccomp/moat.json), proven
# here without a cluster: build/oci-seccomp applies it as an outer filter
# (no_new_privs, then exec), as a runtime applies `seccompProfile: Localhost`
# to a container's first process, and moat runs beneath it.
#   1. the tool refuses what it does not understand (each refusal a check);
#   2. moat runs under the shipped profile, as root and as uid 65534;
#   3. negative: without each of the profile's additions for moat (every rule
#      whose comment starts with "moat:"), and with the containerd default
#      alone, a moat run fails: the tool filters for real and every addition
#      is needed;
#   4. moat's runtime suites with every moat they start under the profile:
#      CK_RUN_SUITE=S build/test-integration for each S given (root and
#      rootless modes; their Check lines are counted by tools/check.sh like
#      any other's).
# TAP (tools/tap.sh) for parts 1-3, then "# check-k8s: N passed, M failed, S skipped".
#   usage: tests/deploy/seccomp.sh BUILD [SUITE[:TEST,TEST...]]...
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 2
BUILD=${1:-build}
shift || true
SUITES=("$@")
PROFILE=deploy/kubernetes/seccomp/moat.json
TOOL=$BUILD/oci-seccomp
MOAT=$(pwd)/$BUILD/moat
PY=/usr/bin/python3
pass=0; failed=0; skipped=0
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; pass=$((pass + 1)); }
bad() { n=$((n + 1)); echo "not ok $n - $*"; failed=$((failed + 1)); }
skip() { n=$((n + 1)); echo "ok $n - $* # SKIP"; skipped=$((skipped + 1)); }

for f in "$TOOL" "$MOAT" "$BUILD/test-integration"; do
	[ -x "$f" ] || { echo "seccomp.sh: $f is not built" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/moat-k8s-seccomp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"

# --- 1. the tool refuses what it does not understand ----------------------
# each case: a name, a python expression that changes the profile p, and a
# word the refusal must contain (the JSON path or the field)
refuse() {
	local name=$1 expr=$2 want=$3
	$PY - "$PROFILE" "$tmp/bad.json" "$expr" <<-'EOF'
		import json, sys
		p = json.load(open(sys.argv[1]))
		exec(sys.argv[3])
		json.dump(p, open(sys.argv[2], "w"))
	EOF
	local out rc
	out=$("$TOOL" "$tmp/bad.json" true 2>&1); rc=$?
	if [ $rc -eq 125 ] && grep -qF -- "$want" <<<"$out"; then
		ok "oci-seccomp refuses $name"
	else
		bad "oci-seccomp did not refuse $name (exit $rc, wanted 125 and '$want'): $out"
	fi
}
refuse "an unknown top-level key (flags)" 'p["flags"] = ["SECCOMP_FILTER_FLAG_LOG"]' 'unknown key "flags"'
refuse "Docker's includes" 'p["syscalls"][1]["includes"] = {"minKernel": "4.8"}' '$.syscalls[1]: unknown key "includes"'
refuse "Docker's archMap" 'p["archMap"] = []' 'unknown key "archMap"'
refuse "SCMP_ACT_NOTIFY" 'p["syscalls"][0]["action"] = "SCMP_ACT_NOTIFY"' 'SCMP_ACT_NOTIFY is not one'
refuse "SCMP_ACT_TRACE" 'p["syscalls"][2]["action"] = "SCMP_ACT_TRACE"' '$.syscalls[2]: action SCMP_ACT_TRACE'
refuse "an unknown operator" 'p["syscalls"][3]["args"][0]["op"] = "SCMP_CMP_XX"' '$.syscalls[3].args[0].op'
refuse "two conditions on one argument" \
	'p["syscalls"][3]["args"].append({"index": 0, "value": 1, "op": "SCMP_CMP_NE"})' 'a second condition'
refuse "valueTwo without MASKED_EQ" 'p["syscalls"][3]["args"][0]["valueTwo"] = 5' 'valueTwo'
refuse "errnoRet on an allow" 'p["syscalls"][0]["errnoRet"] = 1' 'errnoRet given with SCMP_ACT_ALLOW'
refuse "a value JSON cannot carry exactly" 'p["syscalls"][3]["args"][0]["value"] = 2**60' 'exactly'
refuse "an unknown architecture" 'p["architectures"] = ["SCMP_ARCH_PDP11"]' 'unknown architecture'
refuse "an unknown name in an errno rule" \
	'p["syscalls"].append({"names": ["no_such_call"], "action": "SCMP_ACT_ERRNO"})' 'no_such_call is unknown'
refuse "a deny-list profile (defaultAction allow)" 'p["defaultAction"] = "SCMP_ACT_ALLOW"' 'SCMP_ACT_ALLOW'
refuse "an arg index past 5" 'p["syscalls"][3]["args"][0]["index"] = 6' 'index'

# --- 2. moat under the shipped profile ------------------------------------
# copies uid 65534 can reach: the tool, moat and the profile
cp "$MOAT" "$tmp/moat" && cp "$TOOL" "$tmp/oci-seccomp" && cp "$PROFILE" "$tmp/moat.json" &&
	chmod 755 "$tmp/moat" "$tmp/oci-seccomp" && chmod 644 "$tmp/moat.json" || exit 2
as_root=no
[ "$(id -u)" -eq 0 ] && as_root=yes
# run_moat PROFILE MODE: a python run, prints "<exit> <stdout>"
run_moat() {
	local prof=$1 mode=$2 out rc
	if [ "$mode" = root ]; then
		out=$(cd /tmp && "$tmp/oci-seccomp" "$prof" "$tmp/moat" run -l python -c 'print(6*7)' 2>"$tmp/err"); rc=$?
	else
		out=$(cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \
			"$tmp/oci-seccomp" "$prof" "$tmp/moat" run -l python -c 'print(6*7)' 2>"$tmp/err"); rc=$?
	fi
	echo "$rc $out"
}
modes=(rootless)
[ $as_root = yes ] && modes=(root rootless)
[ $as_root = yes ] || skip "moat as root under the profile: not root"
for m in "${modes[@]}"; do
	r=$(run_moat "$tmp/moat.json" "$m")
	if [ "$r" = "0 42" ]; then ok "moat run ($m) under $PROFILE"
	else bad "moat run ($m) under $PROFILE: got '$r': $(grep -v '^oci-seccomp: note' "$tmp/err" | head -3)"; fi
done

# --- 3. negative: each addition is needed --------------------------------
# variants: the profile without rule i (for each "moat:" rule), the
# containerd default alone, and clone3 answered ENOSYS as the default does
$PY - "$PROFILE" "$tmp" <<-'EOF' >"$tmp/variants"
	import json, sys
	p = json.load(open(sys.argv[1]))
	moat = [i for i, r in enumerate(p["syscalls"]) if r.get("comment", "").startswith("moat:")]
	if not moat:
	    sys.exit("no rule of the profile is marked moat:")
	def out(name, q):
	    f = "%s/v%d.json" % (sys.argv[2], out.n); out.n += 1
	    json.dump(q, open(f, "w"))
	    print("%s\t%s" % (f, name))
	out.n = 0
	for i in moat:
	    q = dict(p, syscalls=[r for j, r in enumerate(p["syscalls"]) if j != i])
	    out("without " + ",".join(p["syscalls"][i]["names"]), q)
	q = dict(p, syscalls=[r for j, r in enumerate(p["syscalls"]) if j not in moat])
	out("the containerd default alone", q)
	q = dict(p, syscalls=[r for j, r in enumerate(p["syscalls"]) if j not in moat or p["syscalls"][j]["names"] != ["clone3"]])
	q["syscalls"].append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38})
	out("clone3 answered ENOSYS (the default's rule)", q)
EOF
[ -s "$tmp/variants" ] || bad "no variant profiles were made"
while IFS=$'\t' read -r f name; do
	for m in "${modes[@]}"; do
		r=$(run_moat "$f" "$m")
		if [ "${r%% *}" != 0 ] && [ "$r" != "0 42" ]; then
			ok "moat run ($m) fails under the profile $name: $(grep -v '^oci-seccomp: note' "$tmp/err" | head -1 | cut -c1-160)"
		else
			bad "moat run ($m) still works under the profile $name: that addition is not needed, or the tool filters nothing"
		fi
	done
done <"$tmp/variants"

# moat doctor names the cause: an outer filter without moat's additions (its
# trial run fails), and (as root, in a mount namespace of this test's own) a
# /proc with masked paths as runtimes leave it without procMount: Unmasked
f=$(sed -n 's/\t.*the containerd default alone$//p' "$tmp/variants")
out=$(cd /tmp && "$tmp/oci-seccomp" -q "$f" "$tmp/moat" doctor 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q '^outer seccomp: .*clone3, unshare, mount' <<<"$out" &&
	grep -q '^verdict isolation:  UNAVAILABLE' <<<"$out"; then
	ok "moat doctor under the containerd default names the outer filter and says UNAVAILABLE (exit $rc)"
else
	bad "moat doctor under the containerd default (exit $rc): $(grep -E '^(outer|user|trial|verdict)' <<<"$out")"
fi
f=$(sed -n 's/\twithout pivot_root$//p' "$tmp/variants")
out=$(cd /tmp && "$tmp/oci-seccomp" -q "$f" "$tmp/moat" doctor 2>&1); rc=$?
if [ $rc -eq 3 ] && grep -q '^user namespaces:    ok' <<<"$out" &&
	grep -q '^trial run:          FAILED: .*pivot_root' <<<"$out"; then
	ok "moat doctor under a profile without pivot_root: its probes pass, the trial run fails (exit 3)"
else
	bad "moat doctor under a profile without pivot_root (exit $rc): $(grep -E '^(outer|user|trial|verdict)' <<<"$out")"
fi
out=$(cd /tmp && "$tmp/oci-seccomp" -q "$tmp/moat.json" "$tmp/moat" doctor 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^trial run:          ok' <<<"$out"; then
	ok "moat doctor under the shipped profile: trial run ok"
else
	bad "moat doctor under the shipped profile (exit $rc): $(grep -E '^(outer|user|trial|verdict)' <<<"$out")"
fi
if [ $as_root = yes ]; then
	# shellcheck disable=SC2016  # $1 is the inner shell's
	out=$(cd /tmp && unshare -m --propagation private sh -c \
		'mount --bind /dev/null /proc/keys && mount --bind /dev/null /proc/timer_list &&
		 "$1" run -l python -c "print(1)"; "$1" doctor; echo "doctor exit $?"' sh "$tmp/moat" 2>&1)
	if grep -q 'SandboxUnavailableError: sandbox setup failed while mount proc on /proc.*procMount: Unmasked' <<<"$out" &&
		grep -q '^/proc:              MASKED: .*procMount: Unmasked' <<<"$out" &&
		grep -q '^doctor exit 3$' <<<"$out"; then
		ok "a masked /proc (no procMount: Unmasked): the run fails closed naming the fix, moat doctor exits 3"
	else
		bad "a masked /proc: $out"
	fi
else
	skip "a masked /proc" "needs root for a mount namespace"
fi

echo "# check-k8s: $pass passed, $failed failed, $skipped skipped"
status=0
[ $failed -eq 0 ] || status=1

# --- 4. moat's runtime suites under the profile ----------------------------
# As in a pod, the filter is applied to moat (every moat the suites start,
# and so everything moat starts), not to the test harness, whose own setup
# (ip netns, setns back to the host's namespace) is the outside world: MOAT_BIN
# is a script that execs moat under the tool. The runtime shims are found next
# to the binary (../runtime), as in the build tree.
mkdir -p "$tmp/real" "$tmp/bin"
cp "$MOAT" "$tmp/real/moat" && chmod 755 "$tmp/real" "$tmp/real/moat" "$tmp/bin" &&
	ln -s "$(pwd)/runtime" "$tmp/runtime" || exit 2
# moat-zygote.so beside both: moat serve looks beside its binary, the tests
# beside MOAT_BIN
zso=$(dirname "$MOAT")/moat-zygote.so
if [ -f "$zso" ]; then
	cp "$zso" "$tmp/real/" && cp "$zso" "$tmp/bin/" &&
		chmod 644 "$tmp/real/moat-zygote.so" "$tmp/bin/moat-zygote.so" || exit 2
fi
printf '#!/bin/sh\nexec %s -q %s %s "$@"\n' "$tmp/oci-seccomp" "$tmp/moat.json" "$tmp/real/moat" \
	>"$tmp/bin/moat" && chmod 755 "$tmp/bin/moat" || exit 2
[ ${#SUITES[@]} -eq 0 ] || "$TOOL" -v "$PROFILE" true
# SUITE runs the whole suite, SUITE:test,test only those tests of it
# (MOAT_TESTS, tests/harness.h); a suite of which no test ran fails (a name
# given that the suite no longer has)
for arg in "${SUITES[@]}"; do
	s=${arg%%:*} only=
	[ "$s" = "$arg" ] || only=${arg#*:}
	echo "== suite $s${only:+ (only $only)}, every moat under $PROFILE (root and rootless modes)"
	start=$(date +%s)
	CK_RUN_SUITE=$s MOAT_TESTS=$only MOAT_BIN="$tmp/bin/moat" "$BUILD/test-integration" 2>&1 |
		grep -v '^oci-seccomp: note' | tee "$tmp/suite.log" || status=1
	if ! grep -qE '^(not )?ok ' "$tmp/suite.log"; then
		echo "not ok - suite $s${only:+ (only $only)}: no test ran under the profile"
		status=1
	fi
	echo "suite $s: $(($(date +%s) - start)) s"
done
exit $status
