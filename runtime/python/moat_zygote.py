"""moat's Python zygote (docs/design/pool-zygote.md).

    python3 moat_zygote.py SO TEMPLATE_JSON TMPFS_BYTES RUNTIME_DIR CONTROL_FD

An initialised interpreter with the warm bootstrap (moat_pool) imported,
that forks one sandbox per request without ever reading a byte of one.
It loads moat-zygote.so (SO), which prepares the template of every run
from TEMPLATE_JSON (a request without code), with TMPFS_BYTES for /tmp and
/sandbox (0: the default) and RUNTIME_DIR bound ("": none). Then, for each
record on the control socket (CONTROL_FD, SOCK_SEQPACKET) -- b"r", the
run's rlimits, and the five fds of a run the supervisor prepared
(zygote.h: stdin, stdout, stderr, report, sync), none of which it
interprets: moat_zygote_spawn does -- it clones that run's pid 1 and
answers with one record: b"p" and pid 1's pidfd, or b"e<errno>" and no fd. pid 1 and
pid 2 are moat's C code until pid 2 is locked down (namespaces, mounts,
uid 65534, no capabilities, no_new_privs, Landlock, seccomp); only then
does pid 2 come back here, with fds 0, 1 and 2 the run's and nothing else
open, and run moat_pool.main(): the request is read from fd 0 as a warm
sandbox reads it, and the program ends as `python3 /sandbox/main.py`
would (_become_program says what of the interpreter's exit is skipped).
The zygote reaps its pid 1s. EOF on the control socket ends it.
"""
import ctypes
import os
import signal
import socket
import sys

import moat_pool

NFDS = 5


def _load(so_path, template, tmpfs, runtime):
    lib = ctypes.PyDLL(so_path)  # PyDLL: the GIL stays held across the clone
    lib.moat_zygote_new.restype = ctypes.c_void_p
    lib.moat_zygote_new.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong,
                                    ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.moat_zygote_envp.restype = ctypes.POINTER(ctypes.c_char_p)
    lib.moat_zygote_envp.argtypes = [ctypes.c_void_p]
    lib.moat_zygote_spawn.restype = ctypes.c_int
    lib.moat_zygote_spawn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                      ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_int)]
    err = ctypes.create_string_buffer(1024)
    z = lib.moat_zygote_new(template, len(template), tmpfs, runtime, err, len(err))
    if not z:
        sys.stderr.write("moat zygote: %s\n" % err.value.decode(errors="replace"))
        sys.exit(2)
    envp = lib.moat_zygote_envp(z)
    env = []
    i = 0
    while envp[i] is not None:
        env.append(envp[i])
        i += 1
    return lib, z, env


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _exit_code(e):
    """What the interpreter makes of a SystemExit (printing a message)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _become_program(ctl, env):
    """pid 2, locked down: the run's environment, then the request; never
    returns.

    The end is what Py_FinalizeEx does first -- wait for the program's
    threads, run its atexit functions, flush stdout and stderr -- and then
    os._exit: the interpreter's teardown would write to every object of
    the zygote's heap, each page a copy-on-write fault, for nothing (the
    sandbox ends with this process). What is left undone is what CPython
    does not promise at exit either: __del__ of objects still alive."""
    # every fd but 0, 1 and 2 is closed already: forget the socket's
    ctl.detach()
    # the zygote's reaper is not the program's (pid 1 reset the kernel's
    # side of every signal; this is Python's)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    code = 0
    try:
        moat_pool.main()
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        import traceback
        traceback.print_exc()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            if code == 0:
                code = 120  # as the interpreter does when stdout cannot be flushed
    os._exit(code)


def main():
    so_path, template = sys.argv[1], sys.argv[2].encode()
    tmpfs, runtime, ctl_fd = int(sys.argv[3]), sys.argv[4].encode(), int(sys.argv[5])
    lib, z, env = _load(so_path, template, tmpfs, runtime)
    ctl = socket.socket(fileno=ctl_fd)
    api = ctypes.pythonapi
    # each pid 1 is reaped as it ends, not at the next request: a zombie
    # would hold its cgroup (the zygote's until the run adopted it)
    signal.signal(signal.SIGCHLD, lambda signum, frame: _reap())
    while True:
        _reap()
        msg, fds, _, _ = socket.recv_fds(ctl, 512, NFDS)
        if not msg:
            _reap()
            return
        if len(fds) != NFDS:
            for fd in fds:
                os.close(fd)
            ctl.sendmsg([b"e22"])
            continue
        arr = (ctypes.c_int * NFDS)(*fds)
        pidfd = ctypes.c_int(-1)
        sys.stdout.flush()
        sys.stderr.flush()
        api.PyOS_BeforeFork()
        pid = lib.moat_zygote_spawn(z, arr, msg, len(msg), ctypes.byref(pidfd))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            _become_program(ctl, env)  # never returns
        api.PyOS_AfterFork_Parent()
        for fd in fds:
            os.close(fd)
        if pid < 0:
            ctl.sendmsg([b"e%d" % -pid])
            continue
        try:
            socket.send_fds(ctl, [b"p"], [pidfd.value])
        finally:
            os.close(pidfd.value)


if __name__ == "__main__":
    main()
