"""Shared by the tests: where moat is, fake services and fake moat binaries, a real
`moat serve` started and stopped, and the process-tree checks of "no moat left behind"."""
from __future__ import annotations

import http.server
import json
import os
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG))
MOAT = os.environ.get("MOAT_BIN") or os.path.join(REPO, "build", "moat")
RUNTIME = os.environ.get("MOAT_RUNTIME_DIR") or os.path.join(REPO, "runtime")
MODE = os.environ.get("MOAT_CLIENT_MODE") or ("root" if os.geteuid() == 0 else "rootless")
TOKEN = "tok-0123456789abcdef-secret"

if PKG not in sys.path:
    sys.path.insert(0, PKG)


def need_moat() -> Optional[str]:
    """Why the real binary cannot be used here (None: it can)."""
    if not os.access(MOAT, os.X_OK):
        return "no moat binary at %s (build it or set MOAT_BIN)" % MOAT
    return None


_stream_support: Dict[str, Optional[str]] = {}


def exec_stream_skip() -> Optional[str]:
    """None when this moat has `moat exec --stream`, else why not (feature-detected: an old
    moat refuses the option before it reads the request)."""
    if "exec" not in _stream_support:
        why = need_moat()
        if why is None:
            r = subprocess.run([MOAT, "exec", "--stream"], input=b'{"code":"print(1)"}',
                               capture_output=True, timeout=60)
            if r.returncode == 2 and b"unrecognized option" in r.stderr:
                why = "this moat has no `exec --stream` yet (%s)" % r.stderr.decode(errors="replace").strip()
        _stream_support["exec"] = why
    return _stream_support["exec"]


def serve_skip() -> Optional[str]:
    why = need_moat()
    if why:
        return why
    r = subprocess.run([MOAT, "serve", "--help"], capture_output=True, timeout=10)
    if r.returncode != 0:
        return "`%s serve --help` fails (no moat serve in this build)" % MOAT
    return None


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- a fake moat serve -------------------------------------------------------------------

RESULT = {
    "stdout": "42\n", "stderr": "", "exitCode": 0, "timedOut": False, "durationMs": 31,
    "provider": "native", "signal": None, "oomKilled": False, "killedBy": None,
    "memoryPeakBytes": None, "cpuTimeMs": None, "stdoutTruncated": False, "stderrTruncated": False,
    "limits": {"memory": "cgroup-v2", "pids": "cgroup-v2", "cpu": "cgroup-v2"}, "warnings": [],
}


class Rec:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: Any) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.closed = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def address_string(self) -> str:
        return "fake"

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        rec = Rec(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.server.fake.seen.append(rec)
        self.server.fake.reply(self, rec)

    do_GET = do_POST
    do_DELETE = do_POST

    # helpers for the replies
    def json(self, status: int, obj: Any, headers: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self, status: int, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def wait_closed(self, rec: Rec, timeout: float = 10.0) -> None:
        """Never answers; sets rec.closed when the client goes away."""
        sock = self.connection
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r, _, _ = select.select([sock], [], [], 0.05)
            if r:
                try:
                    if not sock.recv(1, socket.MSG_PEEK):
                        rec.closed.set()
                        break
                except OSError:
                    rec.closed.set()
                    break
        self.close_connection = True


class _Quiet:
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hung up on purpose (deadline, dispose, cancel) is what the tests
        # check; anything else is printed
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # type: ignore[misc]


class _Unix(_Quiet, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Tcp(_Quiet, socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class FakeService:
    """Records every request and answers through ``reply(handler, rec)``; counts
    connections. ``where`` is a socket path or ``None`` for 127.0.0.1 on a free port."""

    def __init__(self, socket_path: Optional[str] = None) -> None:
        self.seen: List[Rec] = []
        self.connections = 0
        self.reply: Callable[[_Handler, Rec], None] = lambda h, r: h.json(200, RESULT)
        fake = self

        class Counting(_Handler):
            def setup(self) -> None:
                fake.connections += 1
                super().setup()

        if socket_path:
            self.srv: socketserver.BaseServer = _Unix(socket_path, Counting)
            self.url = None
        else:
            self.srv = _Tcp(("127.0.0.1", 0), Counting)
            self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        self.srv.fake = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


# ---- fake moat binaries ------------------------------------------------------------------

def fake_moat(directory: str, body: str) -> str:
    """A script standing in for moat: ``body`` is Python run with ``argv``, ``request``
    (the parsed stdin) and ``emit(obj)`` (one NDJSON line, flushed) defined; it records
    its argv in argv.json beside itself."""
    path = os.path.join(directory, "moat")
    with open(path, "w") as f:
        f.write("#!%s\n" % (sys.executable,))
        f.write("import base64, json, os, sys, time\n")
        f.write("argv = sys.argv[1:]\n")
        f.write("json.dump(argv, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'argv.json'), 'w'))\n")
        f.write("def emit(o):\n    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n")
        f.write("raw = sys.stdin.read()\nrequest = json.loads(raw) if raw else None\n")
        f.write(body)
    os.chmod(path, 0o755)
    return path


def fake_argv(directory: str) -> List[str]:
    with open(os.path.join(directory, "argv.json")) as f:
        return json.load(f)


# ---- the real moat serve -----------------------------------------------------------------

def _get(where: Dict[str, Any], path: str) -> int:
    if "socket_path" in where:
        s = socket.socket(socket.AF_UNIX)
    else:
        s = socket.socket(socket.AF_INET)
    try:
        s.settimeout(2)
        s.connect(where["socket_path"] if "socket_path" in where else ("127.0.0.1", where["port"]))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % path.encode())
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
        return int(data.split(b" ", 2)[1])
    finally:
        s.close()


class Serve:
    """`moat serve ARGS`, up when GET /healthz answers 200; its stderr kept in ``log``."""

    def __init__(self, args: List[str], where: Dict[str, Any]) -> None:
        self.logf = tempfile.TemporaryFile()
        self.child = subprocess.Popen([MOAT, "serve"] + args + ["--runtime", RUNTIME],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=self.logf)
        end = time.monotonic() + 30
        while True:
            if self.child.poll() is not None:
                raise RuntimeError("moat serve exited (%s): %s" % (self.child.returncode, self.log[-2000:]))
            try:
                if _get(where, "/healthz") == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > end:
                self.child.kill()
                raise RuntimeError("moat serve did not answer /healthz within 30 s: " + self.log[-2000:])
            time.sleep(0.05)

    @property
    def log(self) -> str:
        # pread, never seek: the child's stderr is this same open file, so a
        # seek(0) here moved its write offset too, and a line the service's log
        # writer wrote between the seek and the read overwrote the file's start
        # and was skipped with everything before it (an empty log read once)
        fd = self.logf.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait_log(self, pred: Callable[[str], bool], seconds: float = 10) -> str:
        """The log once pred holds of it (the service writes its lines from a
        thread of its own, batched: a request answered is not yet logged)."""
        end = time.monotonic() + seconds
        log = self.log
        while not pred(log) and time.monotonic() < end:
            time.sleep(0.05)
            log = self.log
        return log

    def stop(self) -> Optional[int]:
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(30)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        return self.child.returncode

    def close(self) -> None:
        self.stop()
        self.logf.close()


class FakeCase(unittest.TestCase):
    """A FakeService on a unix socket for the whole class (``cls.sock``, ``cls.fake``)."""

    sock: str
    fake: FakeService

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        cls.sock = os.path.join(cls.tmp.path, "fake.sock")
        cls.fake = FakeService(cls.sock)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.fake.close()
        cls.tmp.cleanup()


def agent_killed(sbx: Any, call: Callable[[], Any]) -> BaseException:
    """Kills a live sandbox's agent from inside (it is every process's parent: that ends
    the sandbox), then ``call()`` until it raises something other than a dropped
    connection: what it raised (the caller checks it is SandboxGoneError with the
    reason). The killing process's own start or wait must raise SandboxGoneError: the
    start a 410, the wait its stream's last line."""
    from moat_sandbox import SandboxError, SandboxGoneError, SandboxUnavailableError
    try:
        sbx.commands.run("kill -9 $PPID", background=True).wait(30)
    except SandboxGoneError:
        pass
    else:
        raise AssertionError("the process that killed the agent ended without SandboxGoneError")
    for _ in range(50):
        try:
            call()
        except SandboxUnavailableError:
            pass  # a connection the service drops as the sandbox ends: again
        except SandboxError as e:
            return e
        time.sleep(0.1)
    raise AssertionError("the sandbox still answered 5 s after its agent was killed")


class ServeCase(unittest.TestCase):
    """A real `moat serve` on a unix socket for the whole class (``cls.sock``,
    ``cls.srv``); at the end it must exit 0 on SIGTERM."""

    sock: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        cls.sock = os.path.join(cls.tmp.path, "moat.sock")
        cls.srv = Serve(["--socket", cls.sock, "--pool", "0"], {"socket_path": cls.sock})

    @classmethod
    def tearDownClass(cls) -> None:
        code = cls.srv.stop()
        log = cls.srv.log
        cls.srv.close()
        cls.tmp.cleanup()
        assert code == 0, "moat serve exited %s: %s" % (code, log[-2000:])


# ---- process trees -----------------------------------------------------------------------

def _ppid(pid: int) -> Optional[int]:
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> List[int]:
    """Every live process under ``root`` (not root itself)."""
    parents: Dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            p = _ppid(int(d))
            if p is not None:
                parents[int(d)] = p
    out: List[int] = []
    frontier = [root]
    while frontier:
        nxt = [c for c, p in parents.items() if p in frontier]
        out += nxt
        frontier = nxt
    return out


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def wait_gone(pids: List[int], timeout: float = 15.0) -> List[int]:
    """The pids still alive (not zombies) after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def comm(pid: int) -> str:
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


class TempDir:
    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="moat-py-test-")
        os.chmod(self.path, 0o755)

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def urlport(url: str) -> int:
    return urllib.parse.urlsplit(url).port or 80
