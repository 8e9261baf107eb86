"""moat's session driver for Python (docs/SESSIONS.md, "The driver protocol").

moat starts this in a session's sandbox (locked down as any run: namespaces,
mounts, cgroup, no capabilities, Landlock, seccomp, uid 65534) with the
control channel, a unix stream socket, on fd 3. It writes a `ready` frame,
then runs one step per `run` frame in ONE persistent `__main__` namespace, as
the cells of a notebook, and answers each with a `done` frame. A frame is
"MOATSESS1 <len>\\n" and <len> bytes of UTF-8 JSON.

Nothing here is trusted by the host: the step's code shares this process and
can write to fd 3 itself; it only lies about its own step. The driver never
writes anything of the code or the files anywhere but the step's own output.

The step sees `__name__ == "__main__"`, `sys.argv == [""]` (as the
interactive interpreter), `sys.path[0] == "/sandbox"`, and none of the
driver's names in its globals (they live in this module's own dict, which is
not `sys.modules["__main__"]` once the session starts).
"""
import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import sys
import traceback

MAGIC = b"MOATSESS1 "
CTL = 3
VALUE_MAX = 64 * 1024
# an error's type and message in `done` (the whole message is in the traceback)
NAME_MAX = 256
MESSAGE_MAX = 8 * 1024
DISPLAY_MAX = 8 * 1024 * 1024  # of PNG in one step's display, and at most
DISPLAY_ITEMS_MAX = 64          # figures (the host takes no more)
# results (docs/SESSIONS.md, "Results"): a MIME bundle's entry, one result's
# bundle and one step's results in all; the error's traceback
RESULT_MAX = 4 * 1024 * 1024
RESULTS_MAX = 6 * 1024 * 1024  # with display's 8 MiB within the host's 16 MiB frame
RESULTS_ITEMS_MAX = 64
TRACEBACK_LINES_MAX = 500
TRACEBACK_MAX = 64 * 1024
# what a _repr_*_ method gives, by MIME type (IPython's formatters)
REPR_METHODS = (
    ("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"), ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"), ("application/javascript", "_repr_javascript_"),
)
MIME_TYPES = frozenset(m for m, _ in REPR_METHODS) | {"text/plain"}
PIP_REFUSED = ("packages cannot be installed in a session (the sandbox's root file system is "
               "read-only and it has no network by default): add them to the root file system "
               "instead (docs/rootfs.md: rootfs/build-rootfs.sh, or moat serve --rootfs DIR)")
MPLRC_USR = "/usr/share/matplotlib/mpl-data/matplotlibrc"
# a step may `await` at its top level (as in a notebook)
TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
CO_COROUTINE = 0x80  # inspect.CO_COROUTINE
_loop = None
# where the step's files go; MOAT_SESSION_ROOT is for the host-side tests only
ROOT = os.environ.pop("MOAT_SESSION_ROOT", "/sandbox")
# the session's memoryMb (the host's): the interpreter's data is kept below it
MEMORY_MB = os.environ.pop("MOAT_SESSION_MEMORY_MB", "")
_FILE = __file__
# a code context's driver (docs/CONTEXTS.md) sends each result as it is made
# (a `result` frame, the step's output flushed first), for the host to stream
_EVENTS = os.environ.pop("MOAT_SESSION_EVENTS", "") == "1"
_ch = None  # the control channel (main's)
_seq = 0  # the running step's
# a SIGINT (the host's interrupt: the step's timeout, POST .../interrupt) is a
# KeyboardInterrupt only while a step's code runs; in the driver's own code
# (reading and writing frames) it is dropped
_live = False
# one that lands while a step is being set up (its frame read, files written) is
# kept for the step's code; one between steps is dropped
_stepping = False
_pending = False
_results = None  # the running step's results (display() appends)
_count = 0  # executionCount: the steps run
FONTS_CONF = os.path.join(os.path.dirname(os.path.abspath(_FILE)), "fonts.conf")


class ProtocolError(Exception):
    pass


class _Channel:
    """The control channel: frames in and out on one fd."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def _fill(self):
        b = os.read(self.fd, 1 << 16)
        self.buf += b
        return bool(b)

    def read(self):
        """The next frame's object, or None at EOF between frames."""
        while b"\n" not in self.buf:
            if len(self.buf) > len(MAGIC) + 11:
                raise ProtocolError("bad frame header")
            if not self._fill():
                if self.buf:
                    raise ProtocolError("the channel ended inside a frame")
                return None
        head, _, rest = self.buf.partition(b"\n")
        digits = head[len(MAGIC):]
        if (not head.startswith(MAGIC) or not digits.isdigit() or len(digits) > 10
                or not digits.isascii()):
            raise ProtocolError("bad frame header")
        n = int(digits)
        self.buf = rest
        while len(self.buf) < n:
            if not self._fill():
                raise ProtocolError("the channel ended inside a frame")
        body, self.buf = self.buf[:n], self.buf[n:]
        try:
            obj = json.loads(body.decode("utf-8"))
        except ValueError:
            raise ProtocolError("a frame is not UTF-8 JSON") from None
        if not isinstance(obj, dict):
            raise ProtocolError("a frame is not a JSON object")
        return obj

    def write(self, obj):
        body = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        data = memoryview(MAGIC + str(len(body)).encode() + b"\n" + body)
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


def _cut(s, limit):
    """(s cut to at most limit bytes of UTF-8 at a character's edge, was it cut);
    a lone surrogate is escaped, so the text always encodes."""
    b = s.encode("utf-8", "backslashreplace")
    if len(b) <= limit:
        return b.decode("utf-8"), False
    return b[:limit].decode("utf-8", "ignore"), True


def parse_run(obj):
    """A `run` frame's (seq, code, stdin bytes, [(path, bytes)]); ProtocolError if malformed."""
    if obj.get("type") != "run":
        raise ProtocolError("not a run frame")
    seq, code = obj.get("seq"), obj.get("code")
    stdin, files = obj.get("stdin", ""), obj.get("files", [])
    if (not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(code, str)
            or not isinstance(stdin, (str, type(None))) or not isinstance(files, (list, type(None)))):
        raise ProtocolError("a run frame's fields have the wrong types")
    try:
        data = base64.b64decode(stdin or "", validate=True)
        out = []
        for f in files or ():
            if (not isinstance(f, list) or len(f) != 2 or not isinstance(f[0], str)
                    or not isinstance(f[1], str)):
                raise ProtocolError("a run frame's file is not [path, base64]")
            out.append((f[0], base64.b64decode(f[1], validate=True)))
    except ValueError:
        raise ProtocolError("a run frame holds bad base64") from None
    return seq, code, data, out


def path_ok(rel):
    """Whether rel is a file path a step may write: relative, no `..`, no NUL."""
    if not rel or rel.startswith("/") or "\0" in rel:
        return False
    parts = rel.split("/")
    return ".." not in parts and parts[-1] not in ("", ".")


def write_files(files):
    """Write every file under ROOT; an error's (type, message), or None."""
    if not all(path_ok(p) for p, _ in files):
        return ("ValueError", "a file's path is absolute or has a '..' component: nothing written")
    for rel, content in files:
        path = os.path.join(ROOT, rel)
        try:
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, mode=0o755, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            with open(fd, "wb") as f:
                f.write(content)
        except OSError as e:
            return ("OSError", "a file could not be written: %s" % (e.strerror or "error"))
    return None


def set_stdin(data):
    """fd 0 becomes the step's stdin, sys.stdin a fresh reader on it."""
    if data:
        try:
            fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except (OSError, AttributeError):
            import tempfile
            fd, name = tempfile.mkstemp(prefix=".moat-stdin-", dir="/tmp")
            os.unlink(name)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    else:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(fd, 0)
    os.close(fd)
    old = sys.__stdin__
    enc = getattr(old, "encoding", None) or "utf-8"
    errors = getattr(old, "errors", None) or "strict"
    sys.stdin = open(0, "r", encoding=enc, errors=errors, closefd=False)


def _on_sigint(signum, frame):
    global _pending
    if _live:
        raise KeyboardInterrupt
    if _stepping:
        _pending = True


def _cell_tb(e):
    """e's traceback from the step's first frame (without the driver's, or
    asyncio's for a step with a top-level await)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _FILE:
        tb = tb.tb_next
    cell = tb
    while cell is not None and not cell.tb_frame.f_code.co_filename.startswith("<cell "):
        cell = cell.tb_next
    if cell is not None:
        tb = cell
    return tb


def _error_of(e):
    """The step's `error`: Jupyter's name, value and traceback (as lines),
    and the type and message of before; the traceback printed on stderr."""
    try:
        te = traceback.TracebackException(type(e), e, _cell_tb(e))
        # the driver's own frames (its SIGINT handler) are not the step's
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if f.filename != _FILE])
        lines = list(te.format())
    except Exception:
        lines = ["%s\n" % type(e).__name__]
    try:
        sys.stderr.write("".join(lines))
    except Exception:
        pass
    tb, total = [], 0
    flat = "".join(lines).splitlines()
    for i, line in enumerate(flat):
        line = _cut(line, MESSAGE_MAX)[0]
        if len(tb) >= TRACEBACK_LINES_MAX - 1 or total + len(line) > TRACEBACK_MAX:
            tb.append("... (%d more lines)" % (len(flat) - i))
            break
        tb.append(line)
        total += len(line)
    try:
        msg = str(e)
    except Exception:
        msg = "<the exception's str() failed>"
    name = _cut(type(e).__name__, NAME_MAX)[0]
    msg = _cut(msg, MESSAGE_MAX)[0]
    return {"type": name, "message": msg, "name": name, "value": msg, "traceback": tb}


def _b64(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    return v if isinstance(v, str) else None


def _note(what, e):
    try:
        print("moat: %s failed: %s: %s" % (what, type(e).__name__, e), file=sys.stderr)
    except Exception:
        pass


def _figure_formats():
    fmts = os.environ.get("MOAT_FIGURE_FORMATS", "png")
    return [f for f in ("png", "svg") if f in fmts.replace(" ", "").split(",")] or ["png"]


def _figure_bundle(fig):
    """A matplotlib figure's bundle (png, and svg when MOAT_FIGURE_FORMATS asks)."""
    data = {}
    for fmt in _figure_formats():
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        v = buf.getvalue()
        data["image/png" if fmt == "png" else "image/svg+xml"] = (
            base64.b64encode(v).decode("ascii") if fmt == "png" else v.decode("utf-8", "replace"))
    return data


def _is_figure(obj):
    fig = sys.modules.get("matplotlib.figure")
    return fig is not None and isinstance(obj, fig.Figure)


def mime_bundle(obj):
    """obj's MIME bundle, as IPython's display formatters make it: its
    _repr_*_ methods (or _repr_mimebundle_), text/plain always. Each entry
    at most RESULT_MAX (cut: text/plain; dropped: the others); (data, cut)."""
    data, cut = {}, False
    if _is_figure(obj):
        try:
            data.update(_figure_bundle(obj))
        except Exception as e:
            _note("drawing a figure", e)
    elif not isinstance(obj, type):
        mb = getattr(obj, "_repr_mimebundle_", None)
        if callable(mb):
            try:
                got = mb(include=None, exclude=None)
                if isinstance(got, tuple):
                    got = got[0]
                if isinstance(got, dict):
                    for k, v in got.items():
                        if k in MIME_TYPES and k != "application/json":
                            v = _b64(v) if k in ("image/png", "image/jpeg") else v
                            if isinstance(v, str):
                                data[k] = v
                        elif k == "application/json":
                            data[k] = v
            except Exception as e:
                _note("%s._repr_mimebundle_" % type(obj).__name__, e)
        for mime, meth in REPR_METHODS:
            if mime in data:
                continue
            f = getattr(obj, meth, None)
            if not callable(f):
                continue
            try:
                v = f()
            except Exception as e:
                _note("%s.%s" % (type(obj).__name__, meth), e)
                continue
            if isinstance(v, tuple):
                v = v[0]
            if v is None:
                continue
            if mime in ("image/png", "image/jpeg"):
                v = _b64(v)
            if mime == "application/json" or isinstance(v, str):
                data[mime] = v
    for k in list(data):
        try:
            n = len(json.dumps(data[k]))
        except (TypeError, ValueError) as e:
            _note("%s as %s" % (type(obj).__name__, k), e)
            del data[k]
            continue
        if n > RESULT_MAX:
            del data[k]
            cut = True
    try:
        text = repr(obj)
    except Exception as e:
        text = "<%s object: its repr() failed: %s>" % (type(obj).__name__, type(e).__name__)
    text, c = _cut(text, VALUE_MAX)
    data["text/plain"] = text
    return data, cut or c


class _Results:
    """One step's results, in order, within RESULTS_ITEMS_MAX and RESULTS_MAX."""

    def __init__(self):
        self.items, self.size, self.truncated = [], 0, False

    def add(self, obj, main=False):
        data, cut = mime_bundle(obj)
        self.add_bundle(data, main, cut)

    def add_bundle(self, data, main=False, cut=False):
        n = len(json.dumps(data))
        if len(self.items) >= RESULTS_ITEMS_MAX or self.size + n > RESULTS_MAX:
            self.truncated = True
            return False
        item = {"isMain": bool(main), "data": data}
        self.items.append(item)
        self.size += n
        self.truncated = self.truncated or cut
        if _EVENTS and _ch is not None:
            _emit({"type": "result", "seq": _seq, "result": item})
        return True


def _emit(obj):
    """An event frame mid-step: the output before it flushed first, the
    host's ack awaited; a SIGINT meanwhile is kept for the step's code,
    never breaks it."""
    global _live, _pending
    was = _live
    _live = False
    try:
        _flush()
        _ch.write(obj)
        # the host's ack: it has read the output before the result, and
        # what the step writes next comes after it (docs/CONTEXTS.md)
        ack = _ch.read()
        if not ack or ack.get("type") != "ack":
            raise ProtocolError("not an ack frame")
    finally:
        _live = was
    if was and _pending:
        _pending = False
        raise KeyboardInterrupt


def display(*objs, **kwargs):
    """Adds each object to the step's results as its MIME bundle (IPython's
    display(); raw=True takes each as a bundle already)."""
    res = _results
    if res is None:
        return
    for obj in objs:
        if kwargs.get("raw") and isinstance(obj, dict):
            data = {k: v for k, v in obj.items()
                    if k in MIME_TYPES and (k == "application/json" or isinstance(v, str))}
            data.setdefault("text/plain", "")
            res.add_bundle(data)
        else:
            res.add(obj)


def _run(compiled, ns):
    """Evaluate compiled in ns; a step with a top-level await runs to its end
    on the session's event loop (made by the first such step)."""
    r = eval(compiled, ns)
    if not compiled.co_flags & CO_COROUTINE:
        return r
    global _loop
    if _loop is None:
        import asyncio
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(r)


def _shell_line(m):
    """The Python of an IPython shell escape or magic line (m: its indent,
    its mark and the rest), or None to leave it as it is."""
    indent, mark, rest = m.group(1), m.group(2), m.group(3).strip()
    words = rest.split()
    if mark == "%" and words and words[0] in ("pip", "conda", "mamba"):
        return "%sraise RuntimeError(%r)" % (indent, "%%%s: %s" % (words[0], PIP_REFUSED))
    if mark == "!" and len(words) >= 2 and words[0] in ("pip", "pip3", "conda") \
            and words[1] in ("install", "download"):
        return "%sraise RuntimeError(%r)" % (indent, "!%s %s: %s" % (words[0], words[1], PIP_REFUSED))
    if mark == "!" and rest:
        return ("%s__import__('sys').stdout.flush(); __import__('sys').stderr.flush(); "
                "__import__('subprocess').run(%r, shell=True)" % (indent, rest))
    return None


SHELL_LINES_MAX = 1000  # !cmd lines a cell may have


def _parse(code, filename):
    """code's tree; a line the parser stops at that is an IPython shell
    escape (`!cmd`: run by /bin/sh, its output the step's) or `%pip` (refused)
    is made Python and the parse tried again. Only the line the parser
    rejects is looked at, so a `!` line inside a string is never touched."""
    import re
    pat = re.compile(r"^([ \t]*)([!%])(.*)$")
    lines = None
    for _ in range(SHELL_LINES_MAX + 1):
        try:
            return ast.parse(code if lines is None else "\n".join(lines), filename)
        except SyntaxError as e:
            if lines is None:
                lines = code.split("\n")
            n = (e.lineno or 0) - 1
            m = pat.match(lines[n]) if 0 <= n < len(lines) else None
            py = _shell_line(m) if m else None
            if py is None:
                raise
            lines[n] = py
    raise SyntaxError("too many shell escape lines in one cell", (filename, 1, 1, ""))


def run_code(ns, seq, code, results=None):
    """Run code in ns: (exitCode, error, value or None); the last
    expression's value also into results (isMain)."""
    global _live
    filename = "<cell %d>" % seq
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        _live = True
        if _pending:
            raise KeyboardInterrupt
        tree = _parse(code, filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        _run(compile(tree, filename, "exec", flags=TOP_LEVEL_AWAIT, dont_inherit=True), ns)
        value = None
        if last is not None:
            v = _run(compile(last, filename, "eval", flags=TOP_LEVEL_AWAIT, dont_inherit=True), ns)
            _live = False
            if v is not None:
                value = repr(v)
                if results is not None:
                    results.add(v, main=True)
        _live = False
        return 0, None, value
    except SystemExit as e:
        _live = False
        c = e.code
        if c is None:
            return 0, None, None
        if isinstance(c, int):
            return c & 0xFF, None, None
        try:
            print(c, file=sys.stderr)
        except Exception:
            pass
        return 1, None, None
    except BaseException as e:
        _live = False
        return 1, _error_of(e), None
    finally:
        _live = False


def take_figures(results=None):
    """Every open matplotlib figure as PNG, then closed: (display, dropped);
    each also a result (PNG, SVG when asked)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return [], 0
    display, dropped, total = [], 0, 0
    try:
        nums = list(plt.get_fignums())
    except Exception:
        return [], 0
    for num in nums:
        try:
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            png = buf.getvalue()
            if results is not None:
                data = {"image/png": base64.b64encode(png).decode("ascii")}
                if "svg" in _figure_formats():
                    data = _figure_bundle(fig)
                try:
                    data["text/plain"] = _cut(repr(fig), VALUE_MAX)[0]
                except Exception:
                    data["text/plain"] = "<Figure>"
                results.add_bundle(data)
        except Exception as e:
            dropped += 1
            try:
                print("moat: a figure could not be drawn: %s: %s" % (type(e).__name__, e),
                      file=sys.stderr)
            except Exception:
                pass
            continue
        if total + len(png) > DISPLAY_MAX or len(display) >= DISPLAY_ITEMS_MAX:
            dropped += 1
            continue
        total += len(png)
        display.append({"type": "image/png", "data": base64.b64encode(png).decode("ascii")})
    try:
        plt.close("all")
    except Exception:
        pass
    return display, dropped


def _flush():
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except Exception:
            pass


def step(ns, seq, code, stdin, files):
    """One step: its `done` frame."""
    global _results, _count, _stepping, _pending, _seq
    _stepping = True
    _seq = seq
    _count += 1
    display, dropped = [], 0
    value, cut = None, False
    results = _results = _Results()
    err = write_files(files)
    if err is not None:
        exit_code, error = 1, {"type": err[0], "message": err[1], "name": err[0],
                               "value": err[1], "traceback": []}
        try:
            print("moat: %s" % err[1], file=sys.stderr)
        except Exception:
            pass
    else:
        set_stdin(stdin)
        exit_code, error, value = run_code(ns, seq, code, results)
        if value is not None:
            value, cut = _cut(value, VALUE_MAX)
        display, dropped = take_figures(results)
    _results = None
    _stepping = _pending = False
    _flush()
    return {"type": "done", "seq": seq, "exitCode": exit_code, "error": error,
            "value": value, "valueTruncated": cut, "display": display,
            "displayDropped": dropped, "results": results.items,
            "resultsTruncated": results.truncated, "executionCount": _count}


def _session_main():
    """The step's __main__ module: a fresh one, the driver's names not in it."""
    mod = type(sys)("__main__")
    mod.__builtins__ = builtins
    mod.__loader__ = None
    mod.__spec__ = None
    mod.__package__ = None
    sys.modules["__main__"] = mod
    return mod


def limit_data(mb):
    """RLIMIT_DATA's soft limit below the session's memory (mb MiB), so that
    an allocation past it fails in the interpreter (MemoryError in the step)
    before the cgroup's OOM killer ends the session; room is left for what
    else the cgroup counts (the interpreter's code, page cache, children)."""
    try:
        import resource
        n = int(mb) * 1024 * 1024
        if n <= 0:
            return
        want = n - max(16 * 1024 * 1024, n // 8)
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if want > 0 and (soft == resource.RLIM_INFINITY or want < soft):
            if hard != resource.RLIM_INFINITY and want > hard:
                want = hard
            resource.setrlimit(resource.RLIMIT_DATA, (want, hard))
    except (ValueError, OSError, ImportError):
        pass


def main():
    os.set_inheritable(CTL, False)
    if MEMORY_MB:
        limit_data(MEMORY_MB)
    signal.signal(signal.SIGINT, _on_sigint)
    builtins.display = display
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("MPLCONFIGDIR", "/tmp/.moat-mpl")
    # Debian's matplotlib reads /etc/matplotlibrc, and fontconfig /etc/fonts:
    # the default root binds both (rootfs/default.plan), a --rootfs root may
    # lack them; then the files under /usr and the runtime stand in
    if ("MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc")
            and os.path.exists(MPLRC_USR)):
        os.environ["MATPLOTLIBRC"] = MPLRC_USR
    if ("FONTCONFIG_FILE" not in os.environ and not os.path.exists("/etc/fonts/fonts.conf")
            and os.path.exists(FONTS_CONF)):
        os.environ["FONTCONFIG_FILE"] = FONTS_CONF
    for f in (sys.stdout, sys.stderr):
        try:
            f.reconfigure(line_buffering=True)
        except Exception:
            pass
    global _ch
    ch = _ch = _Channel(CTL)
    me = sys.modules.get("__main__")  # kept alive: the driver's own globals
    ns = _session_main().__dict__
    sys.argv[:] = [""]
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(_FILE)):
        sys.path[0] = ROOT
    try:
        os.chdir(ROOT)
    except OSError:
        pass
    ch.write({"type": "ready", "language": "python",
              "version": "%d.%d.%d" % sys.version_info[:3]})
    while True:
        try:
            obj = ch.read()
            if obj is None:
                break
            seq, code, stdin, files = parse_run(obj)
        except (ProtocolError, OSError) as e:
            os.write(2, ("moat session driver: %s\n" % e).encode())
            os._exit(2)
        ch.write(step(ns, seq, code, stdin, files))
    del me
    _flush()
    os._exit(0)


if __name__ == "__main__":
    main()
