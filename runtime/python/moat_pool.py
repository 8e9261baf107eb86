"""moat's warm-sandbox bootstrap for Python (docs/SERVE.md, "The pool").

moat starts this in a sandbox that is already locked down (namespaces,
mounts, cgroup, no capabilities, no_new_privs, Landlock, seccomp, uid
65534) and keeps it waiting here, with the interpreter initialised. It then
reads exactly one request from fd 0 -- "MOATPOOL2 <n>\\n", n bytes of
netstrings ("<length>:<bytes>,": the code, the number of files and each
path and content, the number of variables and each name and value), then the
program's own stdin --
writes the files, sets the environment and runs /sandbox/main.py as
__main__, as `python3 /sandbox/main.py` would. The sandbox is used once and
destroyed: nothing here is meant to be reset.

Only os.read on fd 0 is used for the request, never past the header's newline:
sys.stdin's buffer never sees it, so the program reads its stdin from the
first byte, through sys.stdin or fd 0 or a child process alike.
"""
import os
import sys

# Nothing else is imported: json and base64 (with re, enum and struct) cost a
# warm interpreter more CPU than its whole start here, and the program would
# find them in sys.modules. The frame needs bytes methods only.
MAGIC = b"MOATPOOL2 "


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
    # the magic in one read where it can (a header is never shorter), the
    # length byte by byte: nothing past the header's newline is taken
    line = bytearray()
    while len(line) < len(MAGIC):
        b = os.read(0, len(MAGIC) - len(line))
        if not b:
            raise EOFError("no request")
        line += b
    if line != MAGIC:
        raise ValueError("bad request header")
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


def _fields(body):
    """The netstrings of body, as bytes."""
    out = []
    i, n = 0, len(body)
    while i < n:
        j = body.find(b":", i, i + 21)
        if j < 0 or not body[i:j].isdigit():
            raise ValueError("bad request")
        end = j + 1 + int(body[i:j])
        if end >= n or body[end] != 44:  # ","
            raise ValueError("bad request")
        out.append(body[j + 1:end])
        i = end + 1
    return out


def _pairs(fields, at):
    """The count at fields[at], then that many pairs: (pairs, next index)."""
    count = int(fields[at])
    end = at + 1 + 2 * count
    if count < 0 or end > len(fields):
        raise ValueError("bad request")
    return [(fields[k], fields[k + 1]) for k in range(at + 1, end, 2)], end


def _write_files(files):
    for rel, content in files:
        path = os.path.join(b"/sandbox", rel)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)


def parse_request(body):
    """A frame's body: (code, files, env), each a bytes or (bytes, bytes) pairs."""
    fields = _fields(body)
    if not fields:
        raise ValueError("bad request")
    files, at = _pairs(fields, 1)
    env, at = _pairs(fields, at)
    if at != len(fields):
        raise ValueError("bad request")
    return fields[0], files, env


def main():
    code, files, env = parse_request(_read_exact(_read_header()))
    # os.open and os.write, not open(): no io objects built for one write
    # (in a zygote's child each object touched is a copy-on-write fault)
    fd = os.open("/sandbox/main.py", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    if files:
        _write_files(files)
    for k, v in env:
        os.environb[k] = v
        if k == b"PYTHONPATH":  # read at start-up in a cold run
            for p in reversed(os.fsdecode(v).split(os.pathsep)):
                if p:
                    sys.path.insert(1, p)
    os.chdir("/sandbox")
    # what `python3 /sandbox/main.py` sets up
    sys.argv[:] = ["/sandbox/main.py"]
    sys.path[0] = "/sandbox"
    mod = type(sys)("__main__")
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
