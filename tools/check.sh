#!/bin/bash
# make check: unit tests (ASan/UBSan), the thread test (TSan), then
# integration and security tests against the built binary, as root and as
# uid 65534, the shims, the clients, the cluster, make install and the
# Kubernetes profile. Prints one summary line:
#   check: N passed, M failed, S skipped
#
# Every stage reports in TAP (tools/tap.sh, which sums it): "ok N - ...",
# "not ok N - ...", "ok N - ... # SKIP why". Check's C suites print it with
# CK_TAP_LOG_FILE_NAME=- (exported below; a test that cannot run calls
# harness_skip, tests/skip.h), node --test with --test-reporter=tap, python
# unittest through tests/tap_unittest.py, the shell checks themselves. A
# stage that prints only "check-NAME: N passed, M failed, S skipped" is
# counted too (tools/tap.sh's one adapter).
#
# Adding a stage is one line:   stage "what it checks" command args...
# (its output goes to the screen and the log; a non-zero exit fails make check).
set -u -o pipefail
BUILD=${1:-build}
# shellcheck source=tools/tap.sh
. "$(dirname "$0")/tap.sh"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
export CK_TAP_LOG_FILE_NAME=- CK_VERBOSITY=silent

# stage TITLE COMMAND...: run it, print and log its output, time it
stage() {
	local title=$1 t0=$SECONDS
	shift
	echo "== $title"
	"$@" 2>&1 | tee -a "$log" || status=1
	echo "-- $((SECONDS - t0)) s: $title"
}

# at_once LANE...: runs each lane (a function of stages) at once, each with
# its own output and log; then prints their outputs whole, one lane after
# the other, adds their logs to make check's and fails when one failed
at_once() {
	local dir i=0 n rc t0=$SECONDS lane
	dir=$(mktemp -d /tmp/moat-check-XXXXXX) || { status=1; return; }
	for lane in "$@"; do
		(
			# shellcheck disable=SC2030  # the lane's own log, in its subshell
			log=$dir/$i.log status=0
			: >"$log"
			"$lane" >"$dir/$i.out" 2>&1
			echo "$status" >"$dir/$i.rc"
		) &
		i=$((i + 1))
	done
	wait
	for ((n = 0; n < i; n++)); do
		cat "$dir/$n.out"
		# shellcheck disable=SC2031  # make check's log: the lanes changed only theirs
		cat "$dir/$n.log" >>"$log"
		read -r rc <"$dir/$n.rc" || rc=1
		[ "$rc" = 0 ] || status=1
	done
	rm -rf "$dir"
	echo "-- $((SECONDS - t0)) s: at once: $*"
}

stage "the layer table of docs/ARCHITECTURE.md held in the code (tools/layers.sh)" \
	bash tools/layers.sh "$BUILD"

# The Spin toolbox root (rootfs/build-rootfs.sh --profile spin; .ci/run builds
# it): every module imported inside a sandbox, as root and as uid 65534.
# shellcheck disable=SC2317  # called through stage
toolbox() {
	if [ -z "${MOAT_SPIN_ROOTFS:-}" ] || [ ! -d "$MOAT_SPIN_ROOTFS" ]; then
		echo "ok 1 - Spin toolbox # SKIP MOAT_SPIN_ROOTFS is not set" \
			"(build one: sudo rootfs/build-rootfs.sh --profile spin DIR)"
		return 0
	fi
	local rc=0 rl
	bash tests/spin/check-toolbox.sh "$MOAT_SPIN_ROOTFS" "$(pwd)/$BUILD/moat" || rc=1
	if [ "$(id -u)" -eq 0 ]; then
		rl=$(mktemp -d /tmp/moat-toolbox-XXXXXX)
		cp "$BUILD/moat" "$rl/moat" && chmod 755 "$rl" "$rl/moat"
		(cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \
			bash "$OLDPWD/tests/spin/check-toolbox.sh" "$MOAT_SPIN_ROOTFS" "$rl/moat") || rc=1
		rm -rf "$rl"
	fi
	return "$rc"
}

moat_bin="$(pwd)/$BUILD/moat"
# Check's per-test timeout (4 s unless a tcase sets its own) guards against a
# hang; under ASan on a loaded machine tests that pass in seconds alone
# took longer (14 of 329 at a load of 15-23), so this stage's timeouts are
# three times as long (CK_TIMEOUT_MULTIPLIER given wins)
stage "unit tests (AddressSanitizer + UBSan)" \
	env CK_TIMEOUT_MULTIPLIER="${CK_TIMEOUT_MULTIPLIER:-3}" "$BUILD/test-unit"
stage "libmoat from 8 threads at once (ThreadSanitizer; root mode and uid 65534)" \
	env TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$BUILD/test-threads"
stage "Landlock alone (a test-only build without the read-only mounts; root and uid 65534)" \
	"$BUILD/test-landlock"
# The integration stage as two shards at once (tools/shards.sh: its tests
# mostly wait, so two processes share the 2 CPUs well; every suite runs in
# exactly one shard; MOAT_SHARD= runs it in one process as before)
stage "integration and security tests ($(id -un): root mode $( [ "$(id -u)" -eq 0 ] && echo on || echo off ), rootless mode on; two shards at once)" \
	bash tools/shards.sh "$BUILD"
# real workloads (a make and a CMake build, perl, node --test, parts of CPython's
# regression suites) bare as uid 65534, then inside moat with the default policy
# as root and rootless, compared test by test (tests/workloads/README.md; the
# whole set: make seccomp-evidence)
stage "real workloads inside moat as bare (tests/workloads, fast set; root and uid 65534)" \
	python3 tests/workloads/run.py "$BUILD/moat" fast
stage "handler runtime shims (runtime/, on the host's python3 and node)" bash tests/runtime/run.sh
stage "Spin SDK conformance of the shims (tests/compat/spin, on the host's python3 and node)" \
	bash tests/compat/spin/run.sh
stage "Spin toolbox (tests/spin/check-toolbox.sh)" toolbox
# two moat serve nodes in network namespaces of their own, one Redis, HAProxy
# hashing X-Sandbox-Id; root only (else one check, counted skipped)
stage "a two-node cluster (tests/cluster/two-node.sh)" bash tests/cluster/two-node.sh "$BUILD/moat"
# live sandboxes and sessions on two nodes behind docs/scaling.md's HAProxy
# configuration, one node killed; root only (else one check, counted skipped)
stage "live sandboxes across two nodes (tests/cluster/live.sh)" bash tests/cluster/live.sh "$BUILD/moat"
stage "make install into a scratch DESTDIR, checked and run there (tests/install/check.sh)" \
	bash tests/install/check.sh "$BUILD"
# deploy/kubernetes (docs/kubernetes.md): the manifests offline, then the
# pod's seccomp profile with moat beneath it. The suites under the profile are
# the integration stage's again (same tests, same properties); what they add
# is that moat's calls pass the outer filter and that moat's own confinement
# still holds beneath it. So one test per suite, each taking a path whose
# system calls differ (make check-k8s runs every test of 11 suites):
#   isolation  root_and_binds_read_only: the sandbox's setup, the calls the
#              profile adds for moat (clone3, unshare, mount, mount_setattr,
#              pivot_root, umount2), and that its read-only root holds
#   runner     every_language_runs: python, node (libuv's io_uring, which the
#              profile refuses), bash and typescript (esbuild's Go runtime)
#   limits     memory_hog_is_oom_killed: the cgroup leaf, clone3 into it, the
#              kill and its events (the rlimit fallback rootless here)
#   escape     mount_family_refused: mount, umount2, pivot_root and unshare
#              pass the outer filter for moat's sake; this proves moat's own
#              filter still refuses them to the program beneath it
#   kv         kv_persists_for_one_id: the store's socket and SQLite file
#   serve      pool_single_use: moat serve, the HTTP path, warm sandboxes and
#              the zygote's fork (its four loop indices)
k8s_suites="isolation:root_and_binds_read_only runner:every_language_runs"
k8s_suites="$k8s_suites limits:memory_hog_is_oom_killed escape:mount_family_refused"
k8s_suites="$k8s_suites kv:kv_persists_for_one_id serve:pool_single_use"
stage "Kubernetes manifests, offline (tests/deploy/check-manifests.py)" \
	/usr/bin/python3 tests/deploy/check-manifests.py "$BUILD"
# shellcheck disable=SC2086  # a list of words
stage "the pod's seccomp profile with moat beneath it (tests/deploy/seccomp.sh)" \
	bash tests/deploy/seccomp.sh "$BUILD" ${MOAT_K8S_CHECK_SUITES-$k8s_suites}
# The clients' stages in two lanes at once (at_once): they mostly wait on a
# moat serve or a sandbox of their own (each its own port, socket and
# scratch directories), so two share the 2 CPUs well. E2B's, the longest,
# is one lane; the node, aistack, MCP and Python clients' the other.
# shellcheck disable=SC2317  # called through at_once
e2b_lane() {
	# the unmodified e2b SDK against a real moat serve's /e2b (root, then uid 65534)
	stage "E2B (tests/e2b, the unmodified e2b SDK from npm against moat serve)" \
		bash tests/e2b/run.sh "$BUILD"
}
# shellcheck disable=SC2317  # called through at_once
clients_lane() {
	stage "node client tests (clients/node, against the built binary)" \
		env MOAT_BIN="$moat_bin" node --test --test-reporter=tap clients/node/test/
	# node --test runs too (root, then uid 65534)
	stage "aistack conformance (tests/compat, the client and binary against aistack's contract)" \
		bash tests/compat/run.sh "$BUILD"
	# moat mcp through the MCP SDK's own client over stdio (root, then uid 65534)
	stage "moat mcp (tests/mcp, the SDK's client over stdio against the built binary)" \
		bash tests/mcp/run.sh "$BUILD"
	# the Python client against the binary and a real moat serve (root, then uid 65534)
	stage "python client tests (clients/python, against the built binary and a real moat serve)" \
		bash clients/python/tests/run.sh "$BUILD"
	# the Python client installed with nothing but pip, offline, into a fresh venv (its own
	# standard-library build backend): from the tree, as a wheel, as an sdist
	stage "python client install (clients/python/tests/install.sh: a venv with nothing but pip)" \
		bash clients/python/tests/install.sh "$BUILD"
}
at_once e2b_lane clients_lane

# shellcheck disable=SC2031  # make check's log (at_once's lanes changed only theirs)
read -r passed failed skipped < <(tap_sum "$log")
if [ $((passed + failed + skipped)) -eq 0 ]; then
	echo "check: no test ran" >&2
	status=1
fi
echo "check: $passed passed, $failed failed, $skipped skipped"
exit $status
