#!/bin/sh
# make check-systemd, inside the guest (tools/vm/run-vm.sh with
# MOAT_VM_SYSTEMD=1: systemd is PID 1, uid 65534 lingers), as root in the
# oneshot moat-vm-check.service. The tests run as uid 65534 through su, so
# pam_systemd gives them a logind session: session-cN.scope under
# user-65534.slice, owned by root and not delegated, as a terminal's
# session-N.scope on a laptop. moat gets no wrapper, no MOAT_CGROUP_PARENT and
# no bus address (it finds /run/user/65534/bus itself).
#   tests/systemd/check.sh BUILD_DIR SUITE...
set -u
BUILD=${1:?usage: check.sh BUILD_DIR SUITE...}
shift
REPO=$(pwd)
uid=65534
say() { echo "check-systemd: $*"; }

# logind starts user@65534.service for the lingering user at boot
i=0
while ! systemctl is-active -q "user@$uid.service"; do
	i=$((i + 1))
	if [ "$i" -gt 600 ]; then
		say "user@$uid.service is not active after 600 s"
		systemctl --no-pager status "user@$uid.service"
		exit 1
	fi
	sleep 1
done
read -r up _ < /proc/uptime
say "user@$uid.service active (uptime ${up}s)"

as_user() {	# runs "$1" as uid 65534 in a new logind session, environment cleared
	su -s /bin/sh nobody -c "cd '$REPO' && exec env -i PATH=/usr/bin:/bin HOME=/nonexistent \
LANG=C.UTF-8 MOAT_TEST_SYSTEMD=1 MOAT_TEST_SLOWDOWN=${MOAT_TEST_SLOWDOWN:-1} \
CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-1} MOAT_BIN='$REPO/$BUILD/moat' $1"
}

as_user 'sh -c "echo \"tests run in: \$(cat /proc/self/cgroup)\""'
# what moat doctor says there (before any run: delegation is available)
as_user "sh -c 'cp \"\$MOAT_BIN\" /tmp/moat-doctor && /tmp/moat-doctor doctor 2>&1 | grep -E \"^(cgroup2|systemd|limit|verdict limits)\"; rm -f /tmp/moat-doctor'"
# the cost of asking systemd, where a timeline build exists (make timeline):
# bench/timeline.sh's runs ask for limits, so each one asks systemd
# ("sup: systemd asked"); figures, not tests
if [ -x build-timeline/moat ]; then
	as_user "sh -c 'cp build-timeline/moat /tmp/moat-tl && sh bench/timeline.sh /tmp/moat-tl 5; rm -f /tmp/moat-tl'"
fi
rc=0
for s in "$@"; do
	as_user "sh -c 'CK_TAP_LOG_FILE_NAME=- CK_RUN_SUITE=$s $BUILD/test-integration'" || rc=1
done
# the per-user service: moat.socket enabled, a client's run() through it
# (uid 65534's services get no HOME: the service runs without the key-value
# store and says so; serve/kv_default_place in make check)
sh tests/systemd/usvc.sh "$BUILD" || rc=1
# no scope of moat's is left with the user manager
left=$(ls "/sys/fs/cgroup/user.slice/user-$uid.slice/user@$uid.service/app.slice" | grep -c '^moat-.*\.scope$')
say "moat scopes left under app.slice: $left"
[ "$left" -eq 0 ] || rc=1
exit $rc
