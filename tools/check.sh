#!/bin/bash
# make check: unit tests (ASan/UBSan), the thread test (TSan), then
# integration and security tests against the built binary, as root and as
# uid 65534, and make install checked in a scratch DESTDIR. Prints one
# summary line.
set -u -o pipefail
BUILD=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0

echo "== the layer table of docs/ARCHITECTURE.md held in the code (tools/layers.sh)"
bash tools/layers.sh "$BUILD" 2>&1 | tee -a "$log" || status=1

echo "== unit tests (AddressSanitizer + UBSan)"
"$BUILD/test-unit" 2>&1 | tee -a "$log" || status=1
echo "== libmoat from 8 threads at once (ThreadSanitizer; root mode and uid 65534)"
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$BUILD/test-threads" 2>&1 | tee -a "$log" || status=1

echo "== Landlock alone (a test-only build without the read-only mounts; root and uid 65534)"
"$BUILD/test-landlock" 2>&1 | tee -a "$log" || status=1

echo "== integration and security tests ($(id -un): root mode $( [ "$(id -u)" -eq 0 ] && echo on || echo off ), rootless mode on)"
MOAT_BIN="$(pwd)/$BUILD/moat" "$BUILD/test-integration" 2>&1 | tee -a "$log" || status=1

echo "== handler runtime shims (runtime/, on the host's python3 and node)"
bash tests/runtime/run.sh 2>&1 | tee -a "$log" || status=1

echo "== Spin SDK conformance of the shims (tests/compat/spin, on the host's python3 and node)"
bash tests/compat/spin/run.sh 2>&1 | tee -a "$log" || status=1

# The Spin toolbox root (rootfs/build-rootfs.sh --profile spin; .ci/run builds
# it): every module imported inside a sandbox, as root and as uid 65534.
# Without MOAT_SPIN_ROOTFS the check is skipped, and counted as such.
echo "== Spin toolbox (tests/spin/check-toolbox.sh)"
toolbox_skipped=0
if [ -n "${MOAT_SPIN_ROOTFS:-}" ] && [ -d "$MOAT_SPIN_ROOTFS" ]; then
	bash tests/spin/check-toolbox.sh "$MOAT_SPIN_ROOTFS" "$(pwd)/$BUILD/moat" 2>&1 | tee -a "$log" || status=1
	if [ "$(id -u)" -eq 0 ]; then
		rl=$(mktemp -d /tmp/moat-toolbox-XXXXXX)
		cp "$BUILD/moat" "$rl/moat" && chmod 755 "$rl" "$rl/moat"
		(cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \
			bash "$OLDPWD/tests/spin/check-toolbox.sh" "$MOAT_SPIN_ROOTFS" "$rl/moat") 2>&1 \
			| tee -a "$log" || status=1
		rm -rf "$rl"
	fi
else
	echo "skipped: MOAT_SPIN_ROOTFS is not set (build one: sudo rootfs/build-rootfs.sh --profile spin DIR)"
	toolbox_skipped=1
fi

# two moat serve nodes in network namespaces of their own, one Redis, HAProxy
# hashing X-Sandbox-Id; root only (else one check, counted skipped)
echo "== a two-node cluster (tests/cluster/two-node.sh)"
bash tests/cluster/two-node.sh "$BUILD/moat" 2>&1 | tee -a "$log" || status=1

echo "== make install into a scratch DESTDIR, checked and run there (tests/install/check.sh)"
bash tests/install/check.sh "$BUILD" 2>&1 | tee -a "$log" || status=1

# deploy/kubernetes (docs/kubernetes.md): the manifests offline, then the
# pod's seccomp profile with moat beneath it; the integration suites here are
# a CI-sized part of make check-k8s's (132-159 s here on a busy 2-core machine)
echo "== Kubernetes manifests, offline (tests/deploy/check-manifests.py)"
/usr/bin/python3 tests/deploy/check-manifests.py "$BUILD" 2>&1 | tee -a "$log" || status=1
echo "== the pod's seccomp profile with moat beneath it (tests/deploy/seccomp.sh)"
bash tests/deploy/seccomp.sh "$BUILD" ${MOAT_K8S_CHECK_SUITES-isolation runner limits escape kv serve} 2>&1 |
	tee -a "$log" || status=1

echo "== node client tests (clients/node, against the built binary)"
MOAT_BIN="$(pwd)/$BUILD/moat" node --test clients/node/test/ 2>&1 | tee -a "$log" || status=1

# node --test runs too (root, then uid 65534): counted with the "# pass N" lines below
echo "== aistack conformance (tests/compat, the client and binary against aistack's contract)"
bash tests/compat/run.sh "$BUILD" 2>&1 | tee -a "$log" || status=1

# Check prints "NN%: Checks: T, Failures: F, Errors: E" per runner
total=0; bad=0
for line in $(sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1:\2:\3/p' "$log"); do
	t=${line%%:*}; rest=${line#*:}; f=${rest%%:*}; e=${rest#*:}
	total=$((total + t)); bad=$((bad + f + e))
done
# node --test prints "# pass N", "# fail N", "# skipped N" per run
sum() { sed -n "s/^# $1 \([0-9]*\)\$/\1/p" "$log" | awk '{s+=$1} END {print s+0}'; }
np=$(sum pass); nf=$(sum fail); ns=$(sum skipped)
# python unittest: "Ran N tests", then "OK" or "FAILED (failures=F, errors=E, skipped=S)"
pr=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
pf=$(grep -E '^(OK|FAILED) \(' "$log" | grep -oE '(failures|errors)=[0-9]+' | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
ps=$(grep -E '^(OK|FAILED) \(' "$log" | grep -oE 'skipped=[0-9]+' | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
total=$((total + np + nf + pr - ps)); bad=$((bad + nf + pf)); skipped=$((ns + ps + toolbox_skipped))
# tests/spin/check-toolbox.sh: "check-toolbox: N passed, M failed" per run
tp=$(sed -n 's/^check-toolbox: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
tf=$(sed -n 's/^check-toolbox: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
total=$((total + tp + tf)); bad=$((bad + tf))
# tests/install/check.sh: "check-install: N passed, M failed, S skipped" (its
# skipped checks print "note: ... not run", counted below)
ip=$(sed -n 's/^check-install: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$log" |
	awk '{p+=$1; f+=$2; s+=$3} END {print p+0, f+0, s+0}')
set -- $ip
total=$((total + $1 + $2 + $3)); bad=$((bad + $2))
# tests/deploy: "check-manifests: N passed, M failed, S skipped" and
# "check-k8s: N passed, M failed, S skipped"; tools/layers.sh: "check-layers: ..."
kp=$(sed -n 's/^check-\(manifests\|k8s\|layers\): \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\2 \3 \4/p' "$log" |
	awk '{p+=$1; f+=$2; s+=$3} END {print p+0, f+0, s+0}')
set -- $kp
total=$((total + $1 + $2)); bad=$((bad + $2)); skipped=$((skipped + $3))
# Check has no "skipped": a C test that cannot run here returns early after
# saying "note: ... not run" (or "note: live ... test skipped"); Check counts
# it passed, this summary counts it skipped
cs=$(grep -cE '^note: .*(not run|test skipped: .*)$' "$log")
total=$((total - cs)); skipped=$((skipped + cs))
if [ "$total" -eq 0 ]; then
	echo "check: no test ran" >&2
	status=1
fi
echo "check: $((total - bad)) passed, $bad failed, $skipped skipped"
exit $status
