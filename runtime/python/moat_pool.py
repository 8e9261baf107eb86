"""moat's warm-sandbox bootstrap for Python (docs/SERVE.md, "The pool").

moat starts this in a sandbox that is already locked down (namespaces,
mounts, cgroup, no capabilities, no_new_privs, Landlock, seccomp, uid
65534) and keeps it waiting here, with the interpreter initialised. It then
reads exactly one request from fd 0 -- "MOATPOOL1 <n>\\n", n bytes of JSON
whose strings are base64 (code, files, env), then the program's own stdin --
writes the files, sets the environment and runs /sandbox/main.py as
__main__, as `python3 /sandbox/main.py` would. The sandbox is used once and
destroyed: nothing here is meant to be reset.

Only os.read on fd 0 is used for the request, byte by byte for the header:
sys.stdin's buffer never sees it, so the program reads its stdin from the
first byte, through sys.stdin or fd 0 or a child process alike.
"""
import json
import os
import sys
import types
from base64 import b64decode

MAGIC = b"MOATPOOL1 "


def _read_exact(n):
    parts = []
    while n > 0:
        b = os.read(0, min(n, 1 << 20))
        if not b:
            raise EOFError("the request ended early")
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _read_header():
    line = bytearray()
    while not line.endswith(b"\n"):
        b = os.read(0, 1)
        if not b:
            raise EOFError("no request")
        line += b
        if len(line) > 32:
            raise ValueError("bad request header")
    if not line.startswith(MAGIC):
        raise ValueError("bad request header")
    return int(line[len(MAGIC):-1])


def _write_files(files):
    for p64, c64 in files:
        rel = b64decode(p64)
        path = os.path.join(b"/sandbox", rel)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "wb") as f:
            f.write(b64decode(c64))


def main():
    req = json.loads(_read_exact(_read_header()))
    code = b64decode(req["code"])
    with open("/sandbox/main.py", "wb") as f:
        f.write(code)
    _write_files(req["files"])
    for k64, v64 in req["env"]:
        k, v = b64decode(k64), b64decode(v64)
        os.environb[k] = v
        if k == b"PYTHONPATH":  # read at start-up in a cold run
            for p in reversed(os.fsdecode(v).split(os.pathsep)):
                if p:
                    sys.path.insert(1, p)
    os.chdir("/sandbox")
    # what `python3 /sandbox/main.py` sets up
    sys.argv[:] = ["/sandbox/main.py"]
    sys.path[0] = "/sandbox"
    mod = types.ModuleType("__main__")
    mod.__file__ = "/sandbox/main.py"
    mod.__loader__ = None
    mod.__spec__ = None
    sys.modules["__main__"] = mod
    sys.modules.pop("moat_pool", None)
    try:
        compiled = compile(code, "/sandbox/main.py", "exec", dont_inherit=True)
        exec(compiled, mod.__dict__)
    except SystemExit:
        raise
    except BaseException as e:  # the trace starts at the program, as a cold run's does
        import traceback
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        sys.stderr.flush()
        sys.exit(1)
