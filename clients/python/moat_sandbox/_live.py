"""Live sandboxes (docs/SANDBOXES.md, ``/v1/sandboxes``): one sandbox of a ``moat serve``
that outlives a request, with processes (``sbx.commands``) and files (``sbx.files``).
Blocking, standard library only; mirrors clients/node/live.js (same routes, same errors)."""
from __future__ import annotations

import base64
import binascii
import http.client
import json
import re
import socket
import ssl
import threading
import urllib.parse
from typing import Any, BinaryIO, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from . import _core
from ._errors import (
    NotFoundError, SandboxConfigError, SandboxError, SandboxGoneError, SandboxNotFoundError,
    SandboxUnavailableError,
)

PROVIDER = "native"
SANDBOX_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
# how long a control request (create, get, stat, a signal) may take, in ms; a file or a
# process stream has no client deadline
CONTROL_TIMEOUT_MS = 60000
# what the client holds: a JSON answer (a listing is at most 8 MiB of JSON), one NDJSON
# line (a 64 KiB chunk as base64 JSON), a command's output kept for its result (each
# stream; the callbacks get everything)
MAX_JSON_BYTES = 16 << 20
MAX_LINE_BYTES = 1 << 20
DEFAULT_MAX_OUTPUT_BYTES = 16 << 20
# the service takes at most 6 MiB of stdin a request
STDIN_PART = 4 << 20

Data = Union[str, bytes, bytearray, memoryview]


def _bad(msg: str) -> SandboxConfigError:
    return SandboxConfigError(msg, provider=PROVIDER)


def _check_path(p: Any, name: str = "path") -> str:
    if not isinstance(p, str) or not p or "\0" in p:
        raise _bad("%s must be a non-empty string (an absolute path under /sandbox or /tmp)" % name)
    return p


def _bytes(data: Any, what: str) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise _bad("%s must be str or bytes" % what)


def _q(p: str) -> str:
    return urllib.parse.quote(p, safe="")


class _Conn:
    """Where the service is (url or socket_path, token); ``send`` is one exchange on a
    connection of its own."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.target = _core.service_target(cfg, PROVIDER)
        self.token: Optional[str] = cfg.get("token")
        t = cfg.get("requestTimeoutMs", CONTROL_TIMEOUT_MS)
        if not _core._positive_int(t):
            raise _bad("request_timeout_ms must be a whole number of ms > 0")
        self.control_s = t / 1000.0

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        t = self.target
        if t.socket_path is not None:
            from ._sync import _UnixConnection
            return _UnixConnection(t.socket_path, timeout)  # type: ignore[arg-type]
        if t.scheme == "https":
            return http.client.HTTPSConnection(str(t.host), t.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(str(t.host), t.port, timeout=timeout)

    def send(self, method: str, route: str, *, payload: Any = None, body: Any = None,
             headers: Optional[Mapping[str, str]] = None, ok: Tuple[int, ...] = (200,), mode: str = "json",
             stream: bool = False, sandbox_id: Optional[str] = None, shown: Optional[str] = None,
             timeout_s: float = 0.0) -> Any:
        """METHOD base+route. ``payload`` (JSON) or ``body`` (bytes, or a binary file or an
        iterable of bytes, sent chunked). ``mode``: 'json' (the answer's dict), 'bytes', or
        'raw' (a _Body to read: a file, an NDJSON stream). ``stream``: no deadline once the
        answer started (its reading is the caller's). ``timeout_s``: added to the control
        deadline (a step's time, an interpreter's start)."""
        t = self.target
        h = {"Host": t.host_header(),
             "Accept": {"json": "application/json", "ndjson": _core.NDJSON}.get(mode, "*/*")}
        data: Any = None
        chunked = False
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            h["Content-Type"] = "application/json"
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            h["Content-Type"] = "application/octet-stream"
        elif body is not None:
            data = body
            chunked = True
            h["Content-Type"] = "application/octet-stream"
            h["Transfer-Encoding"] = "chunked"
        if data is not None and not chunked:
            h["Content-Length"] = str(len(data))
        elif data is None and method in ("POST", "PUT"):
            h["Content-Length"] = "0"
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token
        if headers:
            h.update(headers)
        if mode == "ndjson":
            mode = "raw"
        conn = self._connection(self.control_s + timeout_s)
        keep = False
        try:
            try:
                conn.request(method, t.base + route, body=data, headers=h, encode_chunked=chunked)
                # the socket itself: getresponse() drops conn.sock when the answer closes the
                # connection, and a stream's reader still needs it (no deadline; shutdown)
                sock = conn.sock
                resp = conn.getresponse()
            except socket.timeout:
                raise SandboxUnavailableError("moat serve did not answer %s %s within %d ms; aborted the request"
                                              % (method, t.base + (shown or route),
                                                 (self.control_s + timeout_s) * 1000),
                                              provider=PROVIDER) from None
            except (OSError, http.client.HTTPException) as e:
                raise SandboxUnavailableError("cannot reach moat serve at %s: %s"
                                              % (t.where, getattr(e, "strerror", None) or e or type(e).__name__),
                                              provider=PROVIDER) from None
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status not in ok:
                raw = self._read(resp, MAX_JSON_BYTES)
                raise _live_error(resp.status, _core.parse_json(raw), hdrs, self, method, shown or route,
                                  sandbox_id)
            if mode == "raw":
                if stream and sock is not None:
                    sock.settimeout(None)
                keep = True
                return _Body(conn, sock, resp, t.where)
            raw = self._read(resp, MAX_JSON_BYTES if mode == "json" else None)
            if mode == "bytes":
                return raw
            j = _core.parse_json(raw)
            if not isinstance(j, dict):
                raise SandboxUnavailableError("moat serve answered with something that is not a JSON object",
                                              provider=PROVIDER)
            return j
        finally:
            if not keep:
                conn.close()

    def _read(self, resp: http.client.HTTPResponse, limit: Optional[int]) -> bytes:
        out = bytearray()
        try:
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    break
                out += chunk
                if limit is not None and len(out) > limit:
                    raise SandboxUnavailableError("moat serve at %s sent an answer over %d bytes"
                                                  % (self.target.where, limit), provider=PROVIDER)
        except (OSError, http.client.HTTPException):
            raise SandboxUnavailableError("moat serve at %s closed the connection before the whole answer"
                                          % self.target.where, provider=PROVIDER) from None
        return bytes(out)


class _Body:
    """An answer read as it comes: ``read(n)``, iteration by chunks, ``lines()`` (NDJSON);
    a context manager that closes its connection."""

    def __init__(self, conn: http.client.HTTPConnection, sock: Optional[socket.socket],
                 resp: http.client.HTTPResponse, where: str) -> None:
        self._conn = conn
        self._sock = sock
        self._resp = resp
        self._where = where
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def read(self, n: int = -1) -> bytes:
        try:
            return self._resp.read(n if n >= 0 else None)
        except (OSError, http.client.HTTPException):
            raise SandboxUnavailableError("moat serve at %s closed the connection before the whole answer"
                                          % self._where, provider=PROVIDER) from None

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read(65536)
            if not chunk:
                return
            yield chunk

    def lines(self, max_line: int = MAX_LINE_BYTES) -> Iterator[Dict[str, Any]]:
        while True:
            try:
                line = self._resp.readline(max_line + 1)
            except (OSError, http.client.HTTPException, ValueError):
                raise SandboxUnavailableError("moat serve at %s closed the stream before its end"
                                              % self._where, provider=PROVIDER) from None
            if not line:
                return
            if len(line) > max_line:
                raise SandboxUnavailableError("moat serve at %s sent a stream line over %d bytes"
                                              % (self._where, max_line), provider=PROVIDER)
            line = line.strip()
            if not line:
                continue
            obj = _core.parse_json(line)
            if not isinstance(obj, dict):
                raise SandboxUnavailableError("moat serve at %s sent a stream line that is not a JSON object"
                                              % self._where, provider=PROVIDER)
            yield obj

    def abort(self) -> None:
        """Ends the exchange from any thread: a read blocked on it returns (its reader
        closes it)."""
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """By the thread that reads it."""
        self.abort()
        try:
            self._resp.close()
        except (OSError, ValueError):
            pass
        self._conn.close()

    def __enter__(self) -> "_Body":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_TYPED = {"SandboxNotFound": SandboxNotFoundError, "FileNotFound": NotFoundError,
          "ProcessNotFound": NotFoundError, "ContextNotFound": NotFoundError, "Conflict": SandboxError,
          "ContextBusy": SandboxError, "ContextNotLive": SandboxError, "InsufficientStorage": SandboxError}
_CONTEXTS_ROUTE = re.compile(r"/contexts(/|$)")


def _live_error(status: int, body: Any, headers: Mapping[str, str], conn: _Conn, method: str, shown: str,
                sandbox_id: Optional[str]) -> SandboxError:
    info = body.get("error") if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping) else None
    etype = info.get("type") if info is not None and isinstance(info.get("type"), str) else None
    message = str(info["message"]) if info is not None and info.get("message") is not None \
        else "moat serve answered HTTP %d without an error object" % status
    err: SandboxError
    if status == 410 or etype == "SandboxGone":
        err = SandboxGoneError(message, provider=PROVIDER, reason=message)
    elif etype in _TYPED:
        err = _TYPED[str(etype)](message, provider=PROVIDER)
    elif status == 404 and etype in (None, "NotFound") and _CONTEXTS_ROUTE.search(shown):
        # a service without the contexts routes answers its own "no such route"
        err = SandboxConfigError("%s (%s %s at %s: is this a moat serve with code contexts "
                                 "(docs/CONTEXTS.md)?)" % (message, method, conn.target.base + shown,
                                                           conn.target.where), provider=PROVIDER)
    elif status == 404 and etype is None:
        err = SandboxConfigError("%s (%s %s at %s: is this a moat serve with live sandboxes on "
                                 "(--max-sandboxes 0 turns them off)?)"
                                 % (message, method, conn.target.base + shown, conn.target.where),
                                 provider=PROVIDER)
    else:
        call = _core.Call(method, shown, None, 0)
        err = _core.service_error(status, body, headers, PROVIDER, conn.target, conn.token is not None, call)
    err.status = status
    err.error_type = etype
    err.sandbox_id = sandbox_id  # type: ignore[attr-defined]
    after = _core.retry_after_ms(headers.get("retry-after"))
    if after is not None:
        err.retry_after_ms = after
    return err


def _connection_of(url: Any, socket_path: Any, token: Any, request_timeout_ms: Any, what: str) -> _Conn:
    cfg: Dict[str, Any] = {}
    for k, v in (("url", url), ("socketPath", socket_path), ("token", token),
                 ("requestTimeoutMs", request_timeout_ms)):
        if v is not None:
            cfg[k] = v
    if "url" not in cfg and "socketPath" not in cfg:
        raise _bad("%s: live sandboxes need a moat serve: give url or socket_path (docs/SANDBOXES.md)" % what)
    return _Conn(cfg)


# ---- processes ---------------------------------------------------------------------------

class CommandResult:
    """A process's end: ``pid``, ``exit_code`` (None when a signal ended it), ``signal``
    (its number or None), ``stdout``, ``stderr`` (text; what is not UTF-8 replaced),
    ``stdout_truncated``/``stderr_truncated`` (past ``max_output_bytes``), ``timed_out``."""

    __slots__ = ("pid", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
                 "timed_out")

    def __init__(self, **kw: Any) -> None:
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self) -> str:
        return "CommandResult(pid=%r, exit_code=%r, signal=%r, timed_out=%r)" % (
            self.pid, self.exit_code, self.signal, self.timed_out)


class _Output:
    """One process's NDJSON stream (start, stdout/stderr, exit, error) read into callbacks
    and a bounded copy for its result."""

    def __init__(self, on_stdout: Optional[Callable[[str], Any]], on_stderr: Optional[Callable[[str], Any]],
                 max_output: int) -> None:
        self.cb = {"stdout": on_stdout, "stderr": on_stderr}
        self.kept: Dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.cut = {"stdout": False, "stderr": False}
        self.max = max_output
        self.pid: Optional[int] = None
        self.exit: Optional[Dict[str, Any]] = None
        self.error: Optional[Dict[str, Any]] = None

    def feed(self, body: _Body, on_start: Optional[Callable[[int], None]] = None) -> None:
        for obj in body.lines():
            kind = obj.get("type")
            if kind == "start":
                self.pid = obj.get("pid")
                if on_start is not None and isinstance(self.pid, int):
                    on_start(self.pid)
            elif kind == "exit":
                self.exit = obj
            elif kind == "error":
                e = obj.get("error")
                self.error = dict(e) if isinstance(e, Mapping) else {}
            elif kind in ("stdout", "stderr") and isinstance(obj.get("data"), str):
                data = obj["data"]
                if obj.get("encoding") == "base64":
                    try:
                        raw = base64.b64decode(data, validate=True)
                    except (binascii.Error, ValueError):
                        raise SandboxUnavailableError("moat serve sent a stream line that is not valid base64",
                                                      provider=PROVIDER) from None
                    text = raw.decode("utf-8", "replace")
                else:
                    raw = data.encode("utf-8", "surrogatepass")
                    text = data
                keep = self.kept[kind]
                room = self.max - len(keep)
                if len(raw) <= room:
                    keep += raw
                else:
                    keep += raw[:max(room, 0)]
                    self.cut[kind] = True
                cb = self.cb[kind]
                if cb is not None and text:
                    cb(text)

    def result(self, timed_out: bool, sandbox_id: Optional[str]) -> CommandResult:
        if self.error is not None:
            m = self.error.get("message")
            m = m if isinstance(m, str) else "the sandbox ended before the process did"
            t = self.error.get("type")
            err: SandboxError = SandboxGoneError(m, provider=PROVIDER, reason=m) \
                if t in (None, "SandboxGone") else SandboxError(m, provider=PROVIDER)
            err.sandbox_id = sandbox_id  # type: ignore[attr-defined]
            raise err
        if self.exit is None:
            raise SandboxUnavailableError("the process's output stream ended without its exit", provider=PROVIDER)
        return CommandResult(pid=self.exit.get("pid"), exit_code=self.exit.get("exitCode"),
                             signal=self.exit.get("signal"),
                             stdout=bytes(self.kept["stdout"]).decode("utf-8", "replace"),
                             stderr=bytes(self.kept["stderr"]).decode("utf-8", "replace"),
                             stdout_truncated=self.cut["stdout"], stderr_truncated=self.cut["stderr"],
                             timed_out=timed_out)


def _check_pid(pid: Any) -> int:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise _bad("pid must be a whole number > 0")
    return pid


class CommandHandle:
    """A background process (``commands.run(..., background=True)``) or one re-attached
    (``commands.connect(pid)``): its output is read on a thread of its own as it comes (the
    callbacks run there). ``wait()`` gives its :class:`CommandResult`."""

    def __init__(self, sbx: "LiveSandbox", pid: int, on_stdout: Any, on_stderr: Any, max_output: int,
                 timeout_ms: Optional[int]) -> None:
        self.pid = pid
        self._sbx = sbx
        self._out = _Output(on_stdout, on_stderr, max_output)
        self._timed_out = False
        self._error: Optional[BaseException] = None
        self._result: Optional[CommandResult] = None
        self._body = sbx._send("GET", "/processes/%d/output" % pid, mode="ndjson", stream=True,
                               shown="/processes/{pid}/output")
        self._timer: Optional[threading.Timer] = None
        if timeout_ms:
            self._timer = threading.Timer(timeout_ms / 1000.0, self._expire)
            self._timer.daemon = True
            self._timer.start()
        self._thread = threading.Thread(target=self._pump, name="moat-live-output", daemon=True)
        self._thread.start()

    def _expire(self) -> None:
        self._timed_out = True
        try:
            self.kill()
        except SandboxError:
            pass

    def _pump(self) -> None:
        try:
            with self._body:
                self._out.feed(self._body)
            self._result = self._out.result(self._timed_out, self._sbx.sandbox_id)
        except BaseException as e:  # handed to wait()
            self._error = e
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Its result once it exits (``timeout`` in seconds: TimeoutError when it has not
        by then); SandboxGoneError when the sandbox ends first."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("process %d is still running" % self.pid)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def kill(self, signal: Union[str, int] = "KILL") -> None:
        self._sbx.commands.kill(self.pid, signal)

    def send_stdin(self, data: Data) -> Dict[str, Any]:
        return self._sbx.commands.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        self._sbx.commands.close_stdin(self.pid)

    def disconnect(self) -> None:
        """Stops reading its output (the process goes on; ``commands.connect`` re-attaches)."""
        self._body.abort()
        self._thread.join(10)


class Commands:
    """``sbx.commands``: processes in the live sandbox."""

    def __init__(self, sbx: "LiveSandbox") -> None:
        self._sbx = sbx

    def run(self, cmd: Union[str, List[str]], *, background: bool = False,
            on_stdout: Optional[Callable[[str], Any]] = None, on_stderr: Optional[Callable[[str], Any]] = None,
            cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            stdin: Union[None, bool, Data] = None, timeout_ms: Optional[int] = None,
            max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> Any:
        """Runs ``cmd`` (a shell line, or an argv list) and returns its
        :class:`CommandResult` when it exits; ``background=True`` returns a
        :class:`CommandHandle` at once. ``on_stdout``/``on_stderr`` get the output as it
        comes. ``stdin``: True (a pipe: ``send_stdin``/``close_stdin``), str or bytes
        (written, then closed), default /dev/null. ``timeout_ms``: killed (SIGKILL) after
        it, ``timed_out`` in the result."""
        _core.check_callbacks(on_stdout, on_stderr, PROVIDER)
        request: Dict[str, Any] = {}
        if isinstance(cmd, str):
            request["cmd"] = cmd
        elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
            request["argv"] = list(cmd)
        else:
            raise _bad("cmd must be a shell line (a str) or an argv (a non-empty list of str)")
        if env is not None:
            if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in env.items()):
                raise _bad("env must be a mapping of str to str")
            request["env"] = dict(env)
        if cwd is not None:
            request["cwd"] = _check_path(cwd, "cwd")
        if timeout_ms is not None and not _core._positive_int(timeout_ms):
            raise _bad("timeout_ms must be a whole number of ms > 0")
        if not isinstance(max_output_bytes, int) or max_output_bytes < 0:
            raise _bad("max_output_bytes must be a whole number >= 0")
        feed: Optional[bytes] = None
        if stdin is not None and stdin is not False and stdin is not True:
            feed = _bytes(stdin, "stdin")
        request["stdin"] = stdin is True or feed is not None
        sbx = self._sbx
        if background:
            started = sbx._send("POST", "/processes", payload=request, ok=(201,))
            pid = started.get("pid")
            if not isinstance(pid, int):
                raise SandboxUnavailableError("moat serve started a process without a pid", provider=PROVIDER)
            handle = CommandHandle(sbx, pid, on_stdout, on_stderr, max_output_bytes, timeout_ms)
            if feed is not None:
                self._feed(pid, feed)
            return handle
        out = _Output(on_stdout, on_stderr, max_output_bytes)
        side: List[threading.Thread] = []
        errors: List[BaseException] = []
        state = {"timed_out": False}
        timers: List[threading.Timer] = []

        def on_start(pid: int) -> None:
            if feed is not None:
                def write() -> None:
                    try:
                        self._feed(pid, feed)
                    except BaseException as e:
                        errors.append(e)
                th = threading.Thread(target=write, name="moat-live-stdin", daemon=True)
                th.start()
                side.append(th)
            if timeout_ms:
                def expire() -> None:
                    state["timed_out"] = True
                    try:
                        self.kill(pid, "KILL")
                    except SandboxError:
                        pass
                tm = threading.Timer(timeout_ms / 1000.0, expire)
                tm.daemon = True
                tm.start()
                timers.append(tm)

        try:
            with sbx._send("POST", "/processes?stream=1", payload=request, mode="ndjson", stream=True,
                           shown="/processes") as body:
                out.feed(body, on_start)
        finally:
            for tm in timers:
                tm.cancel()
        for th in side:
            th.join(15)
        result = out.result(state["timed_out"], sbx.sandbox_id)
        if errors and result.exit_code is None and not state["timed_out"]:
            raise errors[0]
        return result

    def _feed(self, pid: int, data: bytes) -> None:
        for off in range(0, len(data), STDIN_PART):
            part = data[off:off + STDIN_PART]
            r = self.send_stdin(pid, part)
            if r.get("complete") is False:
                raise SandboxError("the process took %d of %d bytes of stdin within the service's 10 s"
                                   % (off + int(r.get("written") or 0), len(data)), provider=PROVIDER)
        self.close_stdin(pid)

    def connect(self, pid: int, *, on_stdout: Optional[Callable[[str], Any]] = None,
                on_stderr: Optional[Callable[[str], Any]] = None, timeout_ms: Optional[int] = None,
                max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> CommandHandle:
        """Re-attaches to a running process's output (after a client hung up); one reader at
        a time (409 while another is attached)."""
        _check_pid(pid)
        _core.check_callbacks(on_stdout, on_stderr, PROVIDER)
        return CommandHandle(self._sbx, pid, on_stdout, on_stderr, max_output_bytes, timeout_ms)

    def list(self) -> List[Dict[str, Any]]:
        """Every process kept (at most 128): pid, state, exitCode, signal, attached, stdin."""
        j = self._sbx._send("GET", "/processes")
        return list(j.get("processes") or [])

    def info(self, pid: int, *, wait_ms: int = 0) -> Dict[str, Any]:
        """Its state after waiting up to ``wait_ms`` (0-60000) for it to end."""
        _check_pid(pid)
        if not isinstance(wait_ms, int) or not 0 <= wait_ms <= 60000:
            raise _bad("wait_ms must be 0-60000")
        return self._sbx._send("GET", "/processes/%d?wait=%d" % (pid, wait_ms), shown="/processes/{pid}")

    def kill(self, pid: int, signal: Union[str, int] = "KILL") -> None:
        """A signal (a name such as "TERM", or 1-64) to the process's group."""
        _check_pid(pid)
        if not isinstance(signal, (str, int)) or isinstance(signal, bool):
            raise _bad('signal must be a name ("TERM") or a number')
        self._sbx._send("POST", "/processes/%d/signal" % pid, payload={"signal": signal},
                        shown="/processes/{pid}/signal")

    def send_stdin(self, pid: int, data: Data) -> Dict[str, Any]:
        """Writes ``data`` to its stdin (the service waits up to 10 s for room):
        ``{"written": n, "complete": bool}``."""
        _check_pid(pid)
        return self._sbx._send("POST", "/processes/%d/stdin" % pid, body=_bytes(data, "stdin data"),
                               shown="/processes/{pid}/stdin")

    def close_stdin(self, pid: int) -> None:
        _check_pid(pid)
        self._sbx._send("POST", "/processes/%d/stdin/close" % pid, shown="/processes/{pid}/stdin/close")


# ---- files -------------------------------------------------------------------------------

class Files:
    """``sbx.files``: paths are absolute, under /sandbox or /tmp; symlinks are never
    followed."""

    def __init__(self, sbx: "LiveSandbox") -> None:
        self._sbx = sbx
        self.truncated = False

    def write(self, path: str, data: Union[Data, BinaryIO, Iterable[bytes]], *, mkdirs: bool = True) -> Dict[str, Any]:
        """Writes ``data`` (str, bytes, a binary file object or an iterable of bytes,
        streamed as it is read) to ``path``, creating missing parents unless
        ``mkdirs=False``: ``{"path", "size"}``."""
        _check_path(path)
        body: Any
        if isinstance(data, (str, bytes, bytearray, memoryview)):
            body = _bytes(data, "data")
        elif hasattr(data, "read") or isinstance(data, Iterable):
            body = data
        else:
            raise _bad("data must be str, bytes, a binary file or an iterable of bytes")
        return self._sbx._send("PUT", "/files?path=%s%s" % (_q(path), "&mkdirs=1" if mkdirs else ""),
                               body=body, ok=(200, 201), shown="/files")

    def read(self, path: str, *, format: str = "text", range: Optional[Tuple[int, Optional[int]]] = None) -> Any:
        """The file as ``format``: "text" (str, UTF-8), "bytes", or "stream" (a file-like
        object to ``read()`` or iterate, a context manager). ``range=(start, end)``
        (inclusive; end None: to the end) reads a part."""
        _check_path(path)
        if format not in ("text", "bytes", "stream"):
            raise _bad('format must be "text", "bytes" or "stream"')
        headers = {}
        if range is not None:
            ok = isinstance(range, tuple) and len(range) == 2 and isinstance(range[0], int) and range[0] >= 0 \
                and (range[1] is None or (isinstance(range[1], int) and range[1] >= range[0]))
            if not ok:
                raise _bad("range must be (start, end or None): whole numbers, end >= start")
            headers["Range"] = "bytes=%d-%s" % (range[0], "" if range[1] is None else range[1])
        if format == "stream":
            return self._sbx._send("GET", "/files?path=" + _q(path), headers=headers, ok=(200, 206), mode="raw",
                                   stream=True, shown="/files")
        with self._sbx._send("GET", "/files?path=" + _q(path), headers=headers, ok=(200, 206), mode="raw",
                             stream=True, shown="/files") as body:
            raw = body.read()
        return raw.decode("utf-8", "replace") if format == "text" else raw

    def list(self, path: str, *, depth: int = 1) -> List[Dict[str, Any]]:
        """Entries under ``path``, ``depth`` levels down (1-32): dicts with path, type,
        size, mode, mtimeMs; at most 10000 (``files.truncated`` says whether the last
        listing reached that bound)."""
        _check_path(path)
        if not isinstance(depth, int) or not 1 <= depth <= 32:
            raise _bad("depth must be 1-32")
        j = self._sbx._send("GET", "/files/list?path=%s&depth=%d" % (_q(path), depth), shown="/files/list")
        self.truncated = bool(j.get("truncated"))
        return list(j.get("entries") or [])

    def stat(self, path: str) -> Dict[str, Any]:
        """path, type (file, dir, symlink, fifo, socket, char, block), size, mode, mtimeMs;
        a symlink is described, not followed."""
        _check_path(path)
        return self._sbx._send("GET", "/files/stat?path=" + _q(path), shown="/files/stat")

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def make_dir(self, path: str, *, parents: bool = True) -> bool:
        """Makes the directory (and its parents unless ``parents=False``): True, or False
        when a directory was there already."""
        _check_path(path)
        try:
            if self.stat(path).get("type") == "dir":
                return False
        except NotFoundError:
            pass
        self._sbx._send("POST", "/files/mkdir", payload={"path": path, "parents": bool(parents)}, ok=(200, 201))
        return True

    def rename(self, src: str, dst: str) -> None:
        """Within /sandbox or within /tmp (two filesystems)."""
        _check_path(src, "src")
        _check_path(dst, "dst")
        self._sbx._send("POST", "/files/rename", payload={"from": src, "to": dst}, ok=(200, 201))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """A file or an empty directory; ``recursive=True`` a whole tree."""
        _check_path(path)
        self._sbx._send("DELETE", "/files?path=%s%s" % (_q(path), "&recursive=1" if recursive else ""),
                        shown="/files")



# ---- code contexts (docs/CONTEXTS.md) ----------------------------------------------------

LANGUAGES = {"python": "python", "py": "python", "python3": "python", "javascript": "javascript",
             "js": "javascript", "node": "javascript", "typescript": "typescript", "ts": "typescript"}
# the service sends at most 4 MiB a MIME entry, 6 MiB of results a step; one line carries a
# result (or the final answer, with them all) as JSON
MAX_CONTEXT_LINE_BYTES = 16 << 20
MAX_RESULTS_BYTES = 16 << 20
DEFAULT_STEP_TIMEOUT_MS = 30000
# the service's grace after a step's timeout before it kills the interpreter
INTERRUPT_GRACE_MS = 2000
CONTEXT_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class ExecutionError:
    """The step's error: ``name`` ("ZeroDivisionError", "KeyboardInterrupt"), ``value``,
    ``traceback`` (a list of lines); ``raw`` is the service's object."""

    __slots__ = ("name", "value", "traceback", "raw")

    def __init__(self, e: Mapping[str, Any]) -> None:
        name = e.get("name") if isinstance(e.get("name"), str) else e.get("type")
        value = e.get("value") if isinstance(e.get("value"), str) else e.get("message")
        tb = e.get("traceback")
        self.name: str = name if isinstance(name, str) else "Error"
        self.value: str = value if isinstance(value, str) else ""
        self.traceback: List[str] = [l for l in tb if isinstance(l, str)] if isinstance(tb, list) else []
        self.raw: Dict[str, Any] = dict(e)

    @classmethod
    def of(cls, e: Any) -> Optional["ExecutionError"]:
        return cls(e) if isinstance(e, Mapping) else None

    def __repr__(self) -> str:
        return "ExecutionError(%r, %r)" % (self.name, self.value)


class Execution:
    """What ``run_code`` returns: ``results`` (``Result``, as a session step's: E2B's
    names), ``logs`` ({"stdout": [...],
    "stderr": [...]} as the chunks came), ``stdout``/``stderr`` (joined), ``error``
    (:class:`ExecutionError` or None), ``execution_count``, ``exit_code``, ``timed_out``, ``interrupted``,
    ``killed`` (the interpreter did not stop within the grace after the interrupt),
    ``context``, ``duration_ms``, ``warnings``, the ``*_truncated`` flags; ``text`` is the
    main result's text, ``main_result`` the result itself."""

    def __init__(self) -> None:
        self.results: List[_core.Result] = []
        self.logs: Dict[str, List[str]] = {"stdout": [], "stderr": []}
        self.error: Optional[ExecutionError] = None
        self.execution_count: Optional[int] = None
        # the step's exit as a session's (sys.exit included); None when the interpreter
        # ended without answering
        self.exit_code: Optional[int] = None
        self.timed_out = False
        self.interrupted = False
        self.killed = False
        self.context: Optional[Dict[str, Any]] = None
        self.duration_ms: Optional[float] = None
        self.warnings: List[str] = []
        self.stdout_truncated = False
        self.stderr_truncated = False
        self.results_truncated = False

    @property
    def main_result(self) -> Optional[_core.Result]:
        """The last expression's value, or None."""
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> Optional[str]:
        m = self.main_result
        return m.text if m is not None else None

    @property
    def stdout(self) -> str:
        return "".join(self.logs["stdout"])

    @property
    def stderr(self) -> str:
        return "".join(self.logs["stderr"])

    def __repr__(self) -> str:
        return "Execution(results=%r, error=%r, execution_count=%r, timed_out=%r)" % (
            self.results, self.error, self.execution_count, self.timed_out)


class _ExecutionReader:
    """One step's NDJSON stream (stdout/stderr, result, error, done) into an Execution; the
    callbacks get each event as it comes."""

    def __init__(self, cb: Mapping[str, Optional[Callable[[Any], Any]]], max_output: int) -> None:
        self.cb = cb
        self.max = max_output
        self.ex = Execution()
        self.size = {"stdout": 0, "stderr": 0}
        self.result_bytes = 0
        self.answer: Optional[Dict[str, Any]] = None
        self.streamed_error: Optional[ExecutionError] = None

    def _keep(self, obj: Any) -> Optional[_core.Result]:
        n = len(json.dumps(obj))
        if self.result_bytes + n > MAX_RESULTS_BYTES:
            self.ex.results_truncated = True
            return None
        self.result_bytes += n
        # read under E2B's names, as a session step's results are
        return _core.Result(obj if isinstance(obj, Mapping) else {})

    def feed(self, body: _Body) -> None:
        ex = self.ex
        for obj in body.lines(MAX_CONTEXT_LINE_BYTES):
            kind = obj.get("type")
            if kind in ("stdout", "stderr") and isinstance(obj.get("data"), str):
                if obj.get("encoding") == "base64":
                    try:
                        text = base64.b64decode(obj["data"], validate=True).decode("utf-8", "replace")
                    except (binascii.Error, ValueError):
                        raise SandboxUnavailableError("moat serve sent a stream line that is not valid base64",
                                                      provider=PROVIDER) from None
                else:
                    text = obj["data"]
                n = len(text.encode("utf-8", "surrogatepass"))
                if self.size[kind] + n <= self.max:
                    ex.logs[kind].append(text)
                    self.size[kind] += n
                else:
                    setattr(ex, kind + "_truncated", True)
                f = self.cb.get("on_" + kind)
                if f is not None:
                    f(text)
            elif kind == "result":
                r = self._keep(obj.get("result"))
                if r is not None:
                    ex.results.append(r)
                    f = self.cb.get("on_result")
                    if f is not None:
                        f(r)
            elif kind == "error":
                self.streamed_error = ExecutionError.of(obj.get("error"))
                f = self.cb.get("on_error")
                if f is not None and self.streamed_error is not None:
                    f(self.streamed_error)
            elif kind == "done":
                a = obj.get("answer")
                self.answer = dict(a) if isinstance(a, Mapping) else {}

    def finish(self) -> Execution:
        a = self.answer
        ex = self.ex
        if a is None:
            raise SandboxUnavailableError("the step's stream ended without its answer", provider=PROVIDER)
        # the answer's list is the step's whole list (the events were its parts, as they came)
        if isinstance(a.get("results"), list):
            ex.results = []
            self.result_bytes = 0
            for r in a["results"]:
                kept = self._keep(r)
                if kept is not None:
                    ex.results.append(kept)
        # its stdout/stderr are empty when streamed; a service that sends them there is heard
        for k in ("stdout", "stderr"):
            if isinstance(a.get(k), str) and a[k] and not ex.logs[k]:
                ex.logs[k].append(a[k])
            if a.get(k + "Truncated") is True:
                setattr(ex, k + "_truncated", True)
        ex.error = ExecutionError.of(a.get("error")) or self.streamed_error
        count = a.get("executionCount")
        ex.execution_count = count if isinstance(count, int) and not isinstance(count, bool) else None
        code = a.get("exitCode")
        ex.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        ex.timed_out = a.get("timedOut") is True
        ex.interrupted = a.get("interrupted") is True
        ex.killed = a.get("killed") is True
        ex.context = dict(a["context"]) if isinstance(a.get("context"), Mapping) else None
        d = a.get("durationMs")
        ex.duration_ms = d if isinstance(d, (int, float)) and not isinstance(d, bool) else None
        ex.warnings = list(a["warnings"]) if isinstance(a.get("warnings"), list) else []
        if a.get("resultsTruncated") is True:
            ex.results_truncated = True
        return ex


def _context_id(ctx: Any) -> str:
    cid = ctx if isinstance(ctx, str) else ctx.get("id") if isinstance(ctx, Mapping) else None
    if not isinstance(cid, str) or not CONTEXT_ID.match(cid):
        raise _bad("context must be a context (or its id, ctx_...)")
    return cid


def _language(language: Any) -> str:
    if not isinstance(language, str) or language not in LANGUAGES:
        raise _bad("language must be one of %s" % ", ".join(LANGUAGES))
    return LANGUAGES[language]


# ---- the sandbox -------------------------------------------------------------------------

class LiveSandbox:
    """A live sandbox of a moat serve (docs/SANDBOXES.md): ``sandbox_id``, ``info`` (the
    last object the service answered), ``commands``, ``files``. A context manager that
    kills it at the end: ``with LiveSandbox.create(socket_path=...) as sbx: ...``."""

    def __init__(self, conn: _Conn, info: Mapping[str, Any]) -> None:
        self._conn = conn
        self.sandbox_id: str = str(info["id"])
        self.info: Dict[str, Any] = dict(info)
        self._route = "/v1/sandboxes/" + self.sandbox_id
        self.commands = Commands(self)
        self.files = Files(self)
        # run_code's default context of each language (its info)
        self._defaults: Dict[str, Dict[str, Any]] = {}
        self._defaults_lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.sandbox_id

    def _send(self, method: str, sub: str, shown: Optional[str] = None, **kw: Any) -> Any:
        return self._conn.send(method, self._route + sub, sandbox_id=self.sandbox_id,
                               shown="/v1/sandboxes/{id}" + (shown if shown is not None else sub.split("?")[0]),
                               **kw)

    @classmethod
    def create(cls, *, url: Optional[str] = None, socket_path: Optional[str] = None, token: Optional[str] = None,
               request_timeout_ms: Optional[int] = None, memory_mb: Optional[int] = None,
               cpus: Optional[float] = None, pids_limit: Optional[int] = None,
               strict_limits: Optional[bool] = None, env: Optional[Mapping[str, str]] = None,
               network: Optional[bool] = None, allowed_hosts: Optional[List[str]] = None,
               allowed_cidrs: Optional[List[str]] = None, kv_enabled: Optional[bool] = None,
               kv_sandbox_id: Optional[str] = None, lifetime_ms: Optional[int] = None,
               idle_timeout_ms: Optional[int] = None,
               metadata: Optional[Mapping[str, str]] = None) -> "LiveSandbox":
        """``POST /v1/sandboxes``: the connection (``url`` or ``socket_path``, ``token``)
        and the sandbox's limits, env, network, lifetime, idle timeout and ``metadata``
        labels. ``kv_sandbox_id`` is the key-value store's scope (the request's
        ``sandboxId``, with ``kv_enabled``)."""
        conn = _connection_of(url, socket_path, token, request_timeout_ms, "LiveSandbox.create()")
        if metadata is not None and (not isinstance(metadata, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise _bad("metadata must be a mapping of str to str")
        request: Dict[str, Any] = {}
        for k, v in (("memoryMb", memory_mb), ("cpus", cpus), ("pidsLimit", pids_limit),
                     ("strictLimits", strict_limits), ("env", env), ("network", network),
                     ("allowedHosts", allowed_hosts), ("allowedCidrs", allowed_cidrs),
                     ("kvEnabled", kv_enabled), ("sandboxId", kv_sandbox_id), ("lifetimeMs", lifetime_ms),
                     ("idleTimeoutMs", idle_timeout_ms), ("metadata", metadata)):
            if v is not None:
                request[k] = dict(v) if isinstance(v, Mapping) else v
        _core.check_text(request, PROVIDER)
        info = conn.send("POST", "/v1/sandboxes", payload=request, ok=(201,))
        if not isinstance(info.get("id"), str) or not SANDBOX_ID.match(info["id"]):
            raise SandboxUnavailableError("moat serve answered POST /v1/sandboxes without a sandbox id",
                                          provider=PROVIDER)
        return cls(conn, info)

    @classmethod
    def connect(cls, sandbox_id: str, *, url: Optional[str] = None, socket_path: Optional[str] = None,
                token: Optional[str] = None, request_timeout_ms: Optional[int] = None) -> "LiveSandbox":
        """A sandbox this caller made before; an ended one raises SandboxGoneError."""
        if not isinstance(sandbox_id, str) or not SANDBOX_ID.match(sandbox_id):
            raise _bad("sandbox_id must be a sandbox id (sbx_...)")
        conn = _connection_of(url, socket_path, token, request_timeout_ms, "LiveSandbox.connect()")
        info = conn.send("GET", "/v1/sandboxes/" + sandbox_id, sandbox_id=sandbox_id, shown="/v1/sandboxes/{id}")
        if info.get("state") == "ended":
            why = info.get("reason") if isinstance(info.get("reason"), str) else "the sandbox ended"
            err = SandboxGoneError(why, provider=PROVIDER, reason=why)
            err.sandbox_id = sandbox_id
            raise err
        return cls(conn, info)

    @staticmethod
    def list(*, url: Optional[str] = None, socket_path: Optional[str] = None, token: Optional[str] = None,
             request_timeout_ms: Optional[int] = None, metadata: Optional[Mapping[str, str]] = None,
             limit: Optional[int] = None, next: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Optional[str]]:
        """The caller's own live sandboxes, newest first, and the id to pass as ``next``
        for the next page (None at the end); ``metadata``: each pair must match."""
        conn = _connection_of(url, socket_path, token, request_timeout_ms, "LiveSandbox.list()")
        params = []
        if limit is not None:
            if not isinstance(limit, int) or not 1 <= limit <= 1000:
                raise _bad("limit must be 1-1000")
            params.append("limit=%d" % limit)
        if next is not None:
            if not isinstance(next, str) or not SANDBOX_ID.match(next):
                raise _bad("next must be a sandbox id")
            params.append("next=" + _q(next))
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise _bad("metadata must be a mapping of str to str")
            for k, v in metadata.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise _bad("metadata must be a mapping of str to str")
                params.append("metadata.%s=%s" % (_q(k), _q(v)))
        j = conn.send("GET", "/v1/sandboxes" + ("?" + "&".join(params) if params else ""), shown="/v1/sandboxes")
        nxt = j.get("next")
        return list(j.get("sandboxes") or []), nxt if isinstance(nxt, str) else None

    def get_info(self) -> Dict[str, Any]:
        """``GET /v1/sandboxes/{id}``: state, limits, usage, expiresAt, metadata, reason."""
        self.info = self._send("GET", "", shown="")
        return self.info

    def is_running(self) -> bool:
        try:
            return self.get_info().get("state") == "running"
        except (SandboxGoneError, SandboxNotFoundError):
            return False

    def set_timeout(self, ms: int) -> Dict[str, Any]:
        """Its lifetime ends ``ms`` from now (never past the service's maximum after its
        making)."""
        if not _core._positive_int(ms):
            raise _bad("set_timeout(ms): ms must be a whole number > 0")
        self.info = self._send("POST", "/timeout", payload={"lifetimeMs": ms})
        return self.info

    def kill(self) -> None:
        """Ends it (``DELETE``): nothing of it is left when this returns; an ended one is
        fine (idempotent)."""
        try:
            self._send("DELETE", "", shown="")
        except (SandboxGoneError, SandboxNotFoundError):
            pass

    # ---- code contexts (docs/CONTEXTS.md): interpreters with their own state ----

    def create_code_context(self, language: str = "python", *, cwd: Optional[str] = None) -> Dict[str, Any]:
        """A new interpreter ("python", "javascript", "typescript") with its own globals and
        working directory: its info, {id, language, cwd, pid, state, executionCount}, once
        it is ready."""
        request: Dict[str, Any] = {"language": language}
        _language(language)
        if cwd is not None:
            request["cwd"] = _check_path(cwd, "cwd")
        # the service answers once the interpreter is ready (at most 30 s)
        return self._send("POST", "/contexts", payload=request, ok=(201,), timeout_s=30.0)

    def list_code_contexts(self) -> List[Dict[str, Any]]:
        """Every context of the sandbox, oldest first."""
        return list(self._send("GET", "/contexts").get("contexts") or [])

    def get_code_context(self, context: Any) -> Dict[str, Any]:
        return self._send("GET", "/contexts/" + _context_id(context), shown="/contexts/{cid}")

    def restart_code_context(self, context: Any) -> Dict[str, Any]:
        """Kills its interpreter and starts a fresh one (same id, language, cwd; its state
        gone)."""
        return self._send("POST", "/contexts/%s/restart" % _context_id(context), shown="/contexts/{cid}/restart",
                          timeout_s=30.0)

    def remove_code_context(self, context: Any) -> None:
        cid = _context_id(context)
        self._send("DELETE", "/contexts/" + cid, shown="/contexts/{cid}")
        with self._defaults_lock:
            for lang in [k for k, v in self._defaults.items() if v.get("id") == cid]:
                del self._defaults[lang]

    def interrupt_code_context(self, context: Any) -> bool:
        """A KeyboardInterrupt (Python) / an interrupt (node) in its running step: True
        when a step was running."""
        j = self._send("POST", "/contexts/%s/interrupt" % _context_id(context), shown="/contexts/{cid}/interrupt")
        return j.get("interrupted") is True

    def run_code(self, code: str, *, language: Optional[str] = None, context: Any = None,
                 timeout_ms: Optional[int] = None, on_stdout: Optional[Callable[[str], Any]] = None,
                 on_stderr: Optional[Callable[[str], Any]] = None,
                 on_result: Optional[Callable[[_core.Result], Any]] = None,
                 on_error: Optional[Callable[[ExecutionError], Any]] = None,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> Execution:
        """Runs ``code`` in ``context`` (or this client's default context of ``language``,
        python unless said, made at first use): an :class:`Execution` with ``results``
        (MIME bundles under E2B's names: ``.text``, ``.html``, ``.png``...; the last
        expression's value ``is_main_result``), ``logs``, ``error`` (name, value, traceback),
        ``execution_count``, ``timed_out``. The callbacks get stdout/stderr, each result
        and the error as they happen. ``timeout_ms``: the step is interrupted (not
        killed) after it; the state before it survives."""
        if not isinstance(code, str):
            raise _bad("code must be a str")
        if language is not None and context is not None:
            raise _bad("give language or context, not both (a context has its language)")
        for name, f in (("on_stdout", on_stdout), ("on_stderr", on_stderr), ("on_result", on_result),
                        ("on_error", on_error)):
            if f is not None and not callable(f):
                raise _bad("%s must be callable" % name)
        if timeout_ms is not None and not _core._positive_int(timeout_ms):
            raise _bad("timeout_ms must be a whole number of ms > 0")
        if not isinstance(max_output_bytes, int) or max_output_bytes < 0:
            raise _bad("max_output_bytes must be a whole number >= 0")
        if context is not None:
            cid = _context_id(context)
        else:
            lang = _language(language or "python")
            with self._defaults_lock:
                if lang not in self._defaults:
                    self._defaults[lang] = self.create_code_context(lang)
                cid = self._defaults[lang]["id"]
        request: Dict[str, Any] = {"code": code}
        if timeout_ms is not None:
            request["timeout"] = timeout_ms
        reader = _ExecutionReader({"on_stdout": on_stdout, "on_stderr": on_stderr, "on_result": on_result,
                                   "on_error": on_error}, max_output_bytes)
        # the service ends the step by its timeout and grace; the client's deadline is past both
        step = (timeout_ms if timeout_ms is not None else DEFAULT_STEP_TIMEOUT_MS) + INTERRUPT_GRACE_MS
        with self._send("POST", "/contexts/%s/execute?stream=1" % cid, payload=request, mode="ndjson",
                        shown="/contexts/{cid}/execute", timeout_s=step / 1000.0) as body:
            reader.feed(body)
        return reader.finish()

    def __enter__(self) -> "LiveSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def __repr__(self) -> str:
        return "LiveSandbox(%s)" % self.sandbox_id
