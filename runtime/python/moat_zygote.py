"""moat's Python zygote (docs/design/pool-zygote.md).

    python3 moat_zygote.py SO TEMPLATE_JSON TMPFS_BYTES RUNTIME_DIR CONTROL_FD [own-tree]

An initialised interpreter with the warm bootstrap (moat_pool) imported,
that forks one sandbox per request without ever reading a byte of one.
It loads moat-zygote.so (SO), which prepares the template of every run
from TEMPLATE_JSON (a request without code), with TMPFS_BYTES for /tmp and
/sandbox (0: the default) and RUNTIME_DIR bound ("": none); with
"own-tree" (moat serve's zygote, in moat's sandbox) each child keeps the
zygote's read-only tree and mounts only /dev/pts, /dev/shm, /proc, /tmp and
/sandbox anew, where the library finds that tree fit for it (else it
refuses to start), instead of building the tree a cold run builds. Then the
library's loop (moat_zygote_serve, in C) takes the control socket
(CONTROL_FD, SOCK_SEQPACKET): for each record -- b"r", the run's rlimits,
and the five fds of a run the supervisor prepared (zygote.h: stdin,
stdout, stderr, report, sync) -- it clones that run's pid 1 between the
interpreter's fork hooks and answers with one record: b"p" and pid 1's
pidfd, or b"e<errno>" and no fd; it reaps the pid 1s. No Python runs in
the zygote between two clones, so the zygote writes (and copies) next to
nothing of the memory its children share. pid 1 and pid 2 are moat's C
code until pid 2 is locked down (namespaces, mounts, uid 65534, no
capabilities, no_new_privs, Landlock, seccomp); only then does the loop
return, in pid 2, with fds 0, 1 and 2 the run's and nothing else open, and
pid 2 runs moat_pool.main(): the request is read from fd 0 as a warm
sandbox reads it, and the program ends as `python3 /sandbox/main.py`
would (_become_program says what of the interpreter's exit is skipped).
EOF on the control socket ends the loop, and the zygote.
"""
import atexit  # here, not imported in each child at its exit
import ctypes
import os
import sys

import moat_pool


_OWN_TREE = 1  # MOAT_ZYGOTE_OWN_TREE (zygote.h)


def _load(so_path, template, tmpfs, runtime, flags):
    lib = ctypes.PyDLL(so_path)  # PyDLL: the GIL stays held across the clone
    lib.moat_zygote_new.restype = ctypes.c_void_p
    lib.moat_zygote_new.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong,
                                    ctypes.c_char_p, ctypes.c_uint, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.moat_zygote_envp.restype = ctypes.POINTER(ctypes.c_char_p)
    lib.moat_zygote_envp.argtypes = [ctypes.c_void_p]
    lib.moat_zygote_serve.restype = ctypes.c_int
    lib.moat_zygote_serve.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_void_p]
    err = ctypes.create_string_buffer(1024)
    z = lib.moat_zygote_new(template, len(template), tmpfs, runtime, flags, err, len(err))
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


def _become_program():
    """pid 2, locked down, its environment the run's (the zygote set it
    before its loop): the request; never returns.

    The end is what Py_FinalizeEx does first -- wait for the program's
    threads, run its atexit functions, flush stdout and stderr -- and then
    os._exit: the interpreter's teardown would write to every object of
    the zygote's heap, each page a copy-on-write fault, for nothing (the
    sandbox ends with this process). What is left undone is what CPython
    does not promise at exit either: __del__ of objects still alive."""
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
    if sys.argv[6:] not in ([], ["own-tree"]):
        sys.stderr.write("moat zygote: unknown arguments %r\n" % (sys.argv[6:],))
        sys.exit(2)
    flags = _OWN_TREE if sys.argv[6:] else 0
    lib, z, env = _load(so_path, template, tmpfs, runtime, flags)
    api = ctypes.pythonapi
    hook = lambda f: ctypes.cast(f, ctypes.c_void_p)
    # What each child did alike is done here, once: a page of the zygote
    # that a child writes is a copy-on-write fault in that child (with a
    # TLB flush; dear in a VM), and these three -- looking up
    # PyOS_AfterFork_Child (dlsym, a new ctypes function object), setting
    # the template's environment through os.environ's Python code, and
    # importing atexit at the exit -- cost each run about 100 of its ~360
    # faults (docs/benchmarks-latest.md, "CPU of a warm Python request").
    after_child = api.PyOS_AfterFork_Child
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    sys.stdout.flush()
    sys.stderr.flush()
    rc = lib.moat_zygote_serve(z, ctl_fd, hook(api.PyOS_BeforeFork),
                               hook(api.PyOS_AfterFork_Parent))
    if rc == 0:
        after_child()
        _become_program()  # never returns
    if rc < 0:
        sys.stderr.write("moat zygote: %s\n" % os.strerror(-rc))
        sys.exit(2)


if __name__ == "__main__":
    main()
