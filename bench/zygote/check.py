#!/usr/bin/python3
"""bench/zygote/check.py -- what a request's program sees inside a zygote
child: uid, pid, capability sets, no_new_privs, seccomp mode, the /proc it
sees, whether /tmp and /sandbox are fresh, and whether the root is read-only.
A look, not a test (the prototype is not product code).
    python3 bench/zygote/check.py build/zygote [keep|nocaps] [FLAGS]   (8: the clone variant)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Zygote  # noqa: E402

PROBE = r'''
import os
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
for k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
    print("%-16s %s" % (k, st.get(k, "?").strip()))
print("%-16s %s" % ("getpid()", os.getpid()))
import random
print("%-16s %s" % ("random.random()", random.random()))
print("%-16s %s" % ("/proc pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit())))
print("%-16s %s" % ("/tmp entries", os.listdir("/tmp")))
print("%-16s %s" % ("/sandbox", os.listdir("/sandbox")))
open("/tmp/mark-%d" % os.getpid(), "w").write("x")
try:
    open("/usr/zyg-write-test", "w")
    print("root writable!")
except OSError as e:
    print("%-16s %s" % ("write /usr", e.strerror))
try:
    os.unshare(0) if hasattr(os, "unshare") else None
    import ctypes
    r = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)
    print("%-16s %s" % ("unshare(USER)", "allowed!" if r == 0 else os.strerror(ctypes.get_errno())))
except Exception as e:
    print("unshare probe:", e)
'''.encode()


def main():
    zdir = os.path.abspath(sys.argv[1])
    caps = sys.argv[2] if len(sys.argv) > 2 else "keep"
    flags = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    z = Zygote(zdir, caps, [flags])
    z.REQ = Zygote.frame(PROBE)
    for i in range(2):
        r = z.request(0)
        print("--- request %d (status %d)" % (i + 1, r["status"]))
        sys.stdout.write(r["out"].decode())
    z.close()


if __name__ == "__main__":
    main()
