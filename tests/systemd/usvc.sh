#!/bin/sh
# make check-systemd's case for the per-user service (docs/SERVE.md "Socket
# activation"), inside the guest as root (tools/vm, MOAT_VM_SYSTEMD=1: systemd is
# PID 1, uid 65534 lingers, user@65534.service runs): the units as make install
# writes them (deploy/systemd, with this build's moat), enabled for every user as
# the package would (systemctl --global enable), started by the lingering user's
# manager; the socket must be 65534's, mode 0600; then the Python client's run(),
# as uid 65534 with nothing but XDG_RUNTIME_DIR, must be answered by the service
# (which the first connection started), not by moat exec.
#   tests/systemd/usvc.sh BUILD_DIR
set -u
BUILD=${1:?usage: usvc.sh BUILD_DIR}
REPO=$(pwd)
uid=65534
run=/run/user/$uid
say() { echo "check-systemd: usvc: $*"; }
fail() {
	say "FAIL: $*"
	# what the user manager and the service said (the journal is root's to read)
	journalctl --no-pager -n 40 "_SYSTEMD_USER_UNIT=moat.service" 2>&1 | sed 's/^/  journal(moat.service): /'
	journalctl --no-pager -n 20 "_SYSTEMD_USER_UNIT=moat.socket" "USER_UNIT=moat.socket" 2>&1 | sed 's/^/  journal(moat.socket): /'
	journalctl --no-pager -n 20 "_UID=$uid" 2>&1 | sed 's/^/  journal(uid): /'
	exit 1
}
as_user() {
	su -s /bin/sh nobody -c "cd '$REPO' && exec env -i PATH=/usr/bin:/bin HOME=/nonexistent \
LANG=C.UTF-8 XDG_RUNTIME_DIR=$run DBUS_SESSION_BUS_ADDRESS=unix:path=$run/bus $1"
}

i=0
while ! systemctl is-active -q "user@$uid.service"; do
	i=$((i + 1))
	[ "$i" -le 600 ] || fail "user@$uid.service is not active after 600 s"
	sleep 1
done
ud=/etc/systemd/user	# the guest's / is an overlay with a tmpfs upper: ours to write
mkdir -p "$ud"
cp deploy/systemd/moat.socket "$ud/moat.socket"
sed "s|@BINDIR@/moat serve|$REPO/$BUILD/moat serve --runtime $REPO/runtime|" \
	deploy/systemd/moat.service.in >"$ud/moat.service"
systemctl --global enable moat.socket || fail "systemctl --global enable moat.socket"
as_user "systemctl --user daemon-reload" || fail "daemon-reload in user@$uid"
as_user "systemctl --user start moat.socket" || fail "start moat.socket in user@$uid"
st=$(stat -c '%a %u %F' "$run/moat.sock" 2>&1)
[ "$st" = "600 $uid socket" ] || fail "$run/moat.sock is '$st' (want: 600 $uid socket)"
as_user "systemctl --user is-active -q moat.service" && fail "moat.service runs before any connection"
cat >/tmp/moat-usvc-client.py <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from moat_sandbox import create_sandbox
with create_sandbox() as s:
    r = s.run("print(6*7)")
print(json.dumps(r.to_dict()))
PY
chmod 644 /tmp/moat-usvc-client.py
out=$(as_user "python3 /tmp/moat-usvc-client.py $REPO/clients/python") || fail "the client: $out"
say "result: $out"
case $out in *'"stdout": "42\n"'*) ;; *) fail "no 42 in the result" ;; esac
case $out in *'user service'*) fail "the client fell back to moat exec" ;; esac
as_user "systemctl --user is-active -q moat.service" || fail "moat.service did not start"
as_user "journalctl --user -u moat.service --no-pager -n 5" 2>/dev/null | tail -3
as_user "systemctl --user stop moat.service moat.socket"
systemctl --global disable moat.socket
say "ok: moat.socket started moat.service, which answered the client's run()"
