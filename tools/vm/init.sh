#!/bin/sh
# /init of moat's test VM (busybox sh).  See tools/vm/README.md.
#
# Stage 1 (PID 1 in the initramfs): load virtio/9p/overlay modules, mount the
# host's / read-only over 9p (tag hostroot) under a tmpfs overlay, mount the
# repository read-write over 9p (tag repo) at its host path, move /dev /proc
# /sys into the new root and switch_root into it (not chroot: unshare(CLONE_NEWUSER)
# fails in a chroot).
# Stage 2 (PID 1 in the new root, run by a copy of busybox in /run/moat-vm):
# mount /tmp /dev/shm /dev/pts and a pure cgroup v2 hierarchy, set up the test
# cgroups, run the command the host wrote to $RUN/cmd, write its exit status
# to $RUN/status and power off.
#
# Kernel command line parameters (set by run-vm.sh):
#   moat.repo=PATH      repository path (same on host and guest)
#   moat.run=PATH       per-run directory on the repo share (cmd, status)
#   moat.slowdown=N     exported as MOAT_TEST_SLOWDOWN
#   moat.accel=tcg|kvm  exported as MOAT_VM_ACCEL
#   moat.systemd=1      stage 2 execs systemd as PID 1 instead (see stage2_systemd)

CONTROLLERS="+cpu +memory +pids"
ROOTLESS_UID=65534

log() { echo "moat-vm: $*"; }

param() {	# value of kernel parameter $1
	for w in $(cat /proc/cmdline); do
		case $w in "$1="*) echo "${w#*=}"; return 0 ;; esac
	done
	return 1
}

die() {
	log "FATAL: $*"
	log "exit status 125"
	[ -n "${RUN:-}" ] && [ -d "$RUN" ] && { echo 125 > "$RUN/status"; sync; } 2>/dev/null
	${BB:-/bin/busybox} poweroff -f
	sleep 10
	exit 1
}

# In $REPO: the command the host wrote to $RUN/cmd, its status to
# $RUN/status, power off. $1: what the log line says before it starts.
run_cmd() {
	cd "$REPO" || die "no $REPO"
	read -r up _ < /proc/uptime
	log "$1 (uptime ${up}s, accel $accel)"
	/bin/sh "$RUN/cmd"
	rc=$?
	read -r up _ < /proc/uptime
	echo "$rc" > "$RUN/status"
	$BB sync
	log "exit status $rc (uptime ${up}s)"
	$BB poweroff -f
	sleep 10
}

stage1() {
	/bin/busybox mkdir -p /proc /sys /dev /usr/bin /usr/sbin /sbin
	/bin/busybox --install -s
	export PATH=/bin:/sbin:/usr/bin:/usr/sbin
	mount -t devtmpfs devtmpfs /dev
	exec </dev/console >/dev/console 2>&1
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	stty -onlcr 2>/dev/null
	read -r up _ < /proc/uptime
	log "init (uptime ${up}s)"

	REPO=$(param moat.repo) || die "no moat.repo= on the kernel command line"
	RUN=$(param moat.run) || die "no moat.run= on the kernel command line"

	while read -r ko; do
		name=${ko%.ko}
		[ -d "/sys/module/$(echo "$name" | tr - _)" ] && continue
		insmod "/lib/modules/$ko" || die "insmod $ko failed"
	done < /lib/modules/modules.load
	grep -qw 9p /proc/filesystems || die "kernel has no 9p filesystem"
	grep -qw overlay /proc/filesystems || die "kernel has no overlay filesystem"

	mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 \
		hostroot /mnt/lower || die "cannot mount the host root (9p tag hostroot)"
	mount -t tmpfs -o mode=755 tmpfs /mnt/rw
	mkdir -p /mnt/rw/upper /mnt/rw/work
	mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work \
		overlay /newroot || die "cannot mount the overlay root"
	mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /newroot/run
	# the repository is bound at its own path only in stage 2, after /tmp is
	# mounted: a clone under /tmp or /run would otherwise be hidden
	mkdir -p /newroot/run/moat-vm /newroot/run/moat-repo
	mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap,msize=512000 \
		repo /newroot/run/moat-repo || die "cannot mount the repository (9p tag repo)"
	cp /bin/busybox /init /newroot/run/moat-vm/
	for m in dev proc sys; do
		mount --move "/$m" "/newroot/$m" || die "cannot move /$m"
	done
	exec switch_root /newroot /run/moat-vm/busybox sh /run/moat-vm/init stage2
	die "switch_root failed"
}

stage2() {
	BB=/run/moat-vm/busybox
	export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	export HOME=/root TERM=dumb LANG=C.UTF-8
	REPO=$(param moat.repo)
	RUN=$(param moat.run)
	slowdown=$(param moat.slowdown) || slowdown=1
	accel=$(param moat.accel) || accel=unknown

	$BB mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
	$BB mkdir -p /dev/pts /dev/shm /dev/mqueue
	$BB mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
	$BB mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
	$BB mount -t mqueue mqueue /dev/mqueue 2>/dev/null
	$BB ln -sf /proc/self/fd /dev/fd
	$BB ln -sf /proc/self/fd/0 /dev/stdin
	$BB ln -sf /proc/self/fd/1 /dev/stdout
	$BB ln -sf /proc/self/fd/2 /dev/stderr
	$BB hostname moat-vm
	$BB ip link set lo up 2>/dev/null
	$BB mkdir -p "$REPO" && $BB mount -o bind /run/moat-repo "$REPO" ||
		die "cannot bind the repository at $REPO"

	if [ "$(param moat.systemd)" = 1 ]; then
		stage2_systemd
		die "systemd did not start"
	fi

	# Pure cgroup v2: PID 1 goes to a leaf so the root only has kernel threads.
	# moat gets a parent of its own for root runs (moat-root, passed to moat
	# as MOAT_CGROUP_PARENT by the test harness), as a real deployment would,
	# and a subtree is delegated to uid 65534 for rootless runs.
	CG=/sys/fs/cgroup
	$BB mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $CG ||
		die "cannot mount cgroup2"
	$BB mkdir $CG/init && echo $$ > $CG/init/cgroup.procs || die "cannot move init to $CG/init"
	echo "$CONTROLLERS" > $CG/cgroup.subtree_control || die "cannot enable $CONTROLLERS"
	$BB mkdir $CG/moat-root
	echo "$CONTROLLERS" > $CG/moat-root/cgroup.subtree_control ||
		die "cannot enable $CONTROLLERS in moat-root"
	$BB mkdir $CG/moat-rootless
	echo "$CONTROLLERS" > $CG/moat-rootless/cgroup.subtree_control ||
		die "cannot enable $CONTROLLERS in moat-rootless"
	$BB chown $ROOTLESS_UID:$ROOTLESS_UID $CG/moat-rootless $CG/moat-rootless/cgroup.procs \
		$CG/moat-rootless/cgroup.subtree_control $CG/moat-rootless/cgroup.threads ||
		die "cannot delegate moat-rootless"

	export MOAT_VM=1 MOAT_VM_ACCEL="$accel" MOAT_TEST_SLOWDOWN="$slowdown"
	export MOAT_TEST_ROOT_CGROUP=$CG/moat-root
	export MOAT_TEST_ROOTLESS_CGROUP=$CG/moat-rootless
	export CK_TIMEOUT_MULTIPLIER="$slowdown"	# libcheck's per-test timeouts
	run_cmd "running command"
}

# moat.systemd=1: systemd (the host's /lib/systemd/systemd) becomes PID 1,
# mounts the cgroup2 hierarchy itself and starts one unit, moat-vm-check.service
# (systemd.unit= on the command line): a root oneshot that runs the command
# ("check" below) and powers off. Nothing else of the host's boot: no fstab
# (the overlay is the root), only what sysinit.target, dbus and logind need.
# uid 65534 lingers, so logind starts user@65534.service at boot.
stage2_systemd() {
	$BB mkdir -p /var/lib/systemd/linger /etc/systemd/system
	: > /var/lib/systemd/linger/nobody
	echo "# moat-vm: no mounts beyond the overlay root" > /etc/fstab
	# the host may be a container: systemd would take the guest for one too
	# (/.dockerenv) and then ignore the kernel command line
	$BB rm -f /.dockerenv /run/.containerenv
	{
		echo "[Unit]"
		echo "Description=moat VM check"
		echo "Wants=dbus.socket dbus.service systemd-logind.service"
		echo "After=dbus.socket dbus.service systemd-logind.service"
		echo "[Service]"
		echo "Type=oneshot"
		echo "ExecStart=$BB sh /run/moat-vm/init check"
		echo "StandardInput=null"
		echo "StandardOutput=tty"
		echo "StandardError=tty"
		echo "TTYPath=/dev/console"
		echo "TimeoutStartSec=infinity"
	} > /etc/systemd/system/moat-vm-check.service
	read -r up _ < /proc/uptime
	log "exec systemd (uptime ${up}s)"
	exec /lib/systemd/systemd --unit=moat-vm-check.service
}

# In the guest under systemd, as root in moat-vm-check.service: the same
# environment as stage 2 (without the test cgroups: systemd owns the tree),
# the command, its status, power off.
check() {
	BB=/run/moat-vm/busybox
	export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	export HOME=/root TERM=dumb LANG=C.UTF-8
	REPO=$(param moat.repo)
	RUN=$(param moat.run)
	slowdown=$(param moat.slowdown) || slowdown=1
	accel=$(param moat.accel) || accel=unknown
	export MOAT_VM=1 MOAT_VM_SYSTEMD=1 MOAT_VM_ACCEL="$accel" MOAT_TEST_SLOWDOWN="$slowdown"
	export CK_TIMEOUT_MULTIPLIER="$slowdown"
	run_cmd "running command under systemd"
}

case ${1:-} in
stage2) stage2 ;;
check) check ;;
*) stage1 ;;
esac
