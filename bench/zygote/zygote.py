"""bench/zygote/zygote.py -- the zygote of the prototype (issue 15): one
python3 with moat's pool runtime pre-imported that forks a child per request.
The child calls zyg_child() (libzyg.so, through ctypes) which enters fresh
namespaces and the full lockdown before a single byte of the request is read;
then moat_pool.main() reads the request from fd 0 and runs it as __main__.

    python3 zygote.py [--gc-freeze] REQ:RESP:FLAGS[:CTL] ...   (one per client slot)
FLAGS (libzyg): 2 = no network namespace, 4 = /proc with subset=pid,
8 = clone variant (one process fewer, see spawn_clone), 16 (with 8) = cgroup
hand-off: A waits for "go" until the client has put it into a cgroup leaf;
the zygote sends, on the unix socket CTL, one byte with two fds (SCM_RIGHTS):
A's pidfd and the write end of A's go pipe. 32 (with 8|16) = pre-attached: the
zygote clones A when the client asks for one (a byte on CTL) instead of when a
request arrives, so the client can put A into its leaf before the request; A
reads the request once it has go.

The zygote never reads a request fd: it polls it, and forks when it becomes
readable. After the child (C) is reaped it writes, on RESP, one line
    END <status> <child_cpu_ns> <zygote_cpu_cum_ns> <stamp,...> <errstep,errno> <child_minflt>
Benchmark code only."""
import ctypes
import socket
import json, base64, os, sys, types, runpy, select, struct, time, mmap  # noqa: F401 (pre-import)

sys.path.insert(0, "/zyg")
import moat_pool  # noqa: E402  (what the pool bootstrap imports)

S_ARRIVE, S_REQ, S_RUN, S_REAPED, S_PARENT_FORK = 0, 11, 12, 15, 16
GO_FD = 29  # libzyg: flags & 16, the go pipe's write end
NSTAMPS = 17

lib = ctypes.PyDLL("/zyg/libzyg.so")  # PyDLL: the GIL stays held across fork, as in os.fork
lib.zyg_child.argtypes = (ctypes.c_void_p, ctypes.c_uint)
lib.zyg_child.restype = ctypes.c_int
lib.zyg_clone.argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_int)
lib.zyg_clone.restype = ctypes.c_int
lib.zyg_init.argtypes = (ctypes.c_char_p,)
capi = ctypes.pythonapi  # a PyDLL: called with the GIL held
n = lib.zyg_init(b"/zyg/moat-default.bpf")
if n <= 0:
    sys.exit("zygote: cannot load the filter: %d" % n)


def _stamp(mm, i):
    struct.pack_into("q", mm, i * 8, time.monotonic_ns())


args = sys.argv[1:]
if args and args[0] == "--gc-freeze":
    # variant: move every object the zygote holds to the permanent generation
    # so a collection in a child does not touch (copy) the inherited pages
    import gc
    args = args[1:]
    FREEZE = True
else:
    FREEZE = False

slots = []
for arg in args:
    v = [int(x) for x in arg.split(":")]
    req, resp, flags = v[:3]
    ctl = socket.socket(fileno=v[3]) if len(v) > 3 else None
    mm = mmap.mmap(-1, 4096)  # MAP_SHARED|MAP_ANONYMOUS: survives fork and unshare
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    slots.append({"req": req, "resp": resp, "flags": flags, "mm": mm, "addr": addr, "ctl": ctl})

# time the request-read step (instrumentation only: the runtime is unchanged)
_orig_read_exact = moat_pool._read_exact
_cur = {"mm": None}


def _read_exact_stamped(n):
    data = _orig_read_exact(n)
    _stamp(_cur["mm"], S_REQ)
    return data


moat_pool._read_exact = _read_exact_stamped


def child(slot):
    code = 100
    try:
        os.dup2(slot["req"], 0)
        os.dup2(slot["resp"], 1)
        rc = lib.zyg_child(slot["addr"], slot["flags"])
        if rc != 0:
            os._exit(100 + min(-rc, 50))
        _cur["mm"] = slot["mm"]
        try:
            moat_pool.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        _stamp(slot["mm"], S_RUN)
    finally:
        os._exit(code)


def clone_child(slot):
    """B of the clone variant (fds 0 and 1 already set by pid 1)"""
    code = 100
    try:
        _cur["mm"] = slot["mm"]
        try:
            moat_pool.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        _stamp(slot["mm"], S_RUN)
    finally:
        os._exit(code)


def spawn_clone(s):
    """FLAGS & 8: one process fewer -- the zygote clone3s straight into the
    namespaces (libzyg zyg_clone), bracketed by Python's own fork hooks as
    os.fork brackets fork(): PyOS_AfterFork_Child runs in B (reseeds random,
    resets locks and thread state), never in pid 1, which runs no Python."""
    capi.PyOS_BeforeFork()
    pid = lib.zyg_clone(s["addr"], s["flags"], s["req"], s["resp"])
    if pid == 0:
        capi.PyOS_AfterFork_Child()
        clone_child(s)
    if pid <= -1000:
        os._exit(100 + min(-pid - 1000, 50))  # B with a lockdown error: never back to the loop
    capi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(-pid, "zyg_clone")
    return pid


def cpu_ns(ru):
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


poller = select.poll()
byfd = {}
for s in slots:
    if s["flags"] & 32:  # A is cloned on the client's demand, not on the request
        poller.register(s["ctl"].fileno(), select.POLLIN)
        byfd[s["ctl"].fileno()] = ("ctl", s)
    else:
        poller.register(s["req"], select.POLLIN)
        byfd[s["req"]] = ("req", s)
if FREEZE:
    gc.collect()
    gc.freeze()
print("READY", n, flush=True)

while True:
    for fd, ev in poller.poll():
        kind, s = byfd[fd]
        if kind in ("req", "ctl"):
            if ev & (select.POLLHUP | select.POLLERR) and not ev & select.POLLIN:
                sys.exit(0)  # the client went away
            if kind == "ctl" and not s["ctl"].recv(16):
                sys.exit(0)
            mm = s["mm"]
            mm[:NSTAMPS * 8 + 256] = bytes(NSTAMPS * 8 + 256)
            _stamp(mm, S_ARRIVE)
            if s["flags"] & 8:
                pid = spawn_clone(s)
            else:
                pid = os.fork()
                if pid == 0:
                    child(s)
            _stamp(mm, S_PARENT_FORK)
            if kind == "req":
                poller.unregister(fd)
            pfd = os.pidfd_open(pid)
            if s["flags"] & 16:  # A waits for go: hand its pidfd and the go pipe to the client
                go_w = struct.unpack_from("q", mm, GO_FD * 8)[0]
                if go_w < 0:  # the maps failed: A sees EOF and exits; the client sees one fd
                    socket.send_fds(s["ctl"], [b"F"], [pfd])
                else:
                    try:
                        socket.send_fds(s["ctl"], [b"P %d" % time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)],
                                        [pfd, go_w])
                    finally:
                        os.close(go_w)
            s["pid"], s["pidfd"] = pid, pfd
            poller.register(pfd, select.POLLIN)
            byfd[pfd] = ("child", s)
        else:
            _, status, ru = os.wait4(s["pid"], 0)
            _stamp(s["mm"], S_REAPED)
            poller.unregister(fd)
            del byfd[fd]
            os.close(fd)
            stamps = struct.unpack_from("%dq" % NSTAMPS, s["mm"], 0)
            err = struct.unpack_from("2q", s["mm"], 30 * 8)
            self_ns = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)
            line = "END %d %d %d %s %d,%d %d\n" % (os.waitstatus_to_exitcode(status), cpu_ns(ru), self_ns,
                                                 ",".join(map(str, stamps)), err[0], err[1], ru.ru_minflt)
            try:
                os.write(s["resp"], line.encode())
            except BrokenPipeError:
                sys.exit(0)  # the client went away
            if not s["flags"] & 32:
                poller.register(s["req"], select.POLLIN)
                byfd[s["req"]] = ("req", s)
