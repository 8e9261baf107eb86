"""The blocking client: `moat exec` through subprocess, `moat serve` through http.client."""
from __future__ import annotations

import http.client
import json
import os
import selectors
import shutil
import socket
import ssl
import subprocess
import threading
import time
import weakref
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from . import _core, _proc
from ._core import Callback, RunResult
from ._errors import (
    SandboxConfigError, SandboxError, SandboxPolicyError, SandboxUnavailableError, SessionGoneError,
    SessionNotFoundError,
)


class Sandbox:
    """One sandbox configuration; ``run`` may be called any number of times, from several
    threads at once. Use it as a context manager, or call ``dispose()`` when done."""

    provider: str

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        cfg = _core.normalize_config(config, kwargs)
        provider = cfg.get("provider", "native")
        if provider not in _core.PROVIDERS:
            raise SandboxConfigError("unknown provider %s (%s)" % (json.dumps(provider, default=str),
                                                                 ", ".join(_core.PROVIDERS)),
                                     provider=provider if isinstance(provider, str) else None)
        if provider == "daytona" and "daytonaApiUrl" in cfg:
            _core.check_daytona_url(cfg["daytonaApiUrl"])
        self.provider = provider
        self._grace = _core.grace_of(cfg, provider)
        self._lock = threading.Lock()
        self._disposed = False
        self._service = "url" in cfg or "socketPath" in cfg
        self._dir: Optional[str] = None
        self._usvc: Optional[Sandbox] = None  # the user's service (below)
        self._usvc_path: Optional[str] = None
        self._usvc_why: Optional[str] = None
        if self._service:
            # a moat serve applies its operator's defaults (serve.defaults) to what a
            # request leaves out: only a `moat exec` gets aistack's filled in
            self._cfg = cfg
            self._target = _core.service_target(cfg, provider)
            self._token: Optional[str] = cfg.get("token")
            self._idle: List[Tuple[http.client.HTTPConnection, float]] = []
            self._inflight: Set[http.client.HTTPConnection] = set()
            self._sessions: Dict[str, Session] = {}  # open sessions, closed by dispose()
            return
        if "token" in cfg:
            raise SandboxConfigError("token needs url or socketPath (a moat serve to send it to)",
                                     provider=provider)
        self._cfg = _core.with_defaults(cfg, provider)
        self._moat = os.fspath(cfg.get("moatPath") or os.environ.get("MOAT_BIN") or "moat")
        self._dir, self._config_file, self._key_env = _proc.write_config(self._cfg, provider)
        # the temporary config goes with dispose(), else when the sandbox is collected or
        # the interpreter exits
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True) if self._dir else None
        self._children: Set[subprocess.Popen] = set()  # type: ignore[type-arg]
        self._exec_stream = True  # until a moat says it has no --stream
        # the user's service (moat.socket), tried first by every run: its warm pool
        # answers where moat exec starts a cold sandbox
        self._usvc_path, self._usvc_why = _core.user_service(cfg, provider)
        if self._usvc_path is not None:
            self._usvc = Sandbox({"socketPath": self._usvc_path, "deadlineGraceMs": self._grace})

    # -- the contract --------------------------------------------------------------------

    def run(self, code: str, *, language: Optional[str] = None, timeout: Optional[int] = None,
            env: Optional[Mapping[str, str]] = None, files: Optional[Mapping[str, str]] = None,
            stdin: Optional[str] = None, network: Optional[bool] = None,
            allowed_hosts: Optional[List[str]] = None, outputs: Optional[List[str]] = None,
            memory_mb: Optional[int] = None, cpus: Optional[float] = None,
            pids_limit: Optional[int] = None, strict_limits: Optional[bool] = None,
            max_output_bytes: Optional[int] = None, on_stdout: Optional[Callback] = None,
            on_stderr: Optional[Callback] = None) -> RunResult:
        """Runs ``code`` in a fresh sandbox and returns its result; ``timeout`` in ms.
        ``on_stdout``/``on_stderr`` get the output as it is written (text chunks)."""
        request = self._prepare(code, locals(), on_stdout, on_stderr)
        if self._service:
            return self._run_service(request, on_stdout, on_stderr)
        why = self._usvc_why
        if self._usvc is not None:
            why = _core.socket_not_ours(str(self._usvc_path))
        if self._usvc is not None and why is None:
            # the request with this client's defaults, as moat exec would apply them
            svc_request = _core.build_request(code, locals(), self._cfg, self.provider)
            try:
                return self._usvc._run_service(svc_request, on_stdout, on_stderr)
            except SandboxError as e:
                why = _core.fallback_reason(e, str(self._usvc_path))
                if why is None:
                    raise
        result = self._run_exec(request, on_stdout, on_stderr)
        return _core.with_warning(result, why) if why else result

    def _prepare(self, code: Any, opts: Mapping[str, Any], on_stdout: Any, on_stderr: Any) -> Dict[str, Any]:
        """The checks made before any run and its request; ``opts`` holds run()'s keyword
        arguments by name (its locals)."""
        provider = self.provider
        if self._disposed:
            raise SandboxError("sandbox disposed", provider=provider)
        if not isinstance(code, str):
            raise SandboxConfigError("code must be a string", provider=provider)
        _core.check_callbacks(on_stdout, on_stderr, provider)
        if self._service:
            return _core.build_request(code, opts, self._cfg, provider)
        if provider == "none":
            raise SandboxPolicyError('sandboxing is disabled (provider "none"): refusing to run code',
                                     provider=provider)
        return _core.build_request(code, opts, {}, provider)

    def session(self, *, language: Optional[str] = None, sandbox_id: Optional[str] = None,
                kv_enabled: Optional[bool] = None, memory_mb: Optional[int] = None,
                cpus: Optional[float] = None, pids_limit: Optional[int] = None,
                strict_limits: Optional[bool] = None, max_output_bytes: Optional[int] = None,
                env: Optional[Mapping[str, str]] = None, network: Optional[bool] = None,
                allowed_hosts: Optional[List[str]] = None, idle_timeout_ms: Optional[int] = None,
                max_lifetime_ms: Optional[int] = None) -> "Session":
        """A live interpreter that keeps its state between runs (``POST /v1/sessions``,
        docs/SESSIONS.md); a context manager that closes it. Needs a moat serve (``url`` or
        ``socket_path``). The config's limits are sent unless given here."""
        answer = self._call(self._create_call(locals()))
        s = Session(self, _core.session_id_of(answer, self.provider), answer)
        with self._lock:
            if not self._disposed:
                self._sessions[s.id] = s
                return s
        s.close()
        raise SandboxError("sandbox disposed", provider=self.provider)

    def _create_call(self, opts: Mapping[str, Any]) -> _core.Call:
        """The checks of session() (sync and asyncio) and its POST /v1/sessions."""
        if self._disposed:
            raise SandboxError("sandbox disposed", provider=self.provider)
        if not self._service:
            raise _core.no_service(self.provider)
        request = _core.session_request(opts, self._cfg, self.provider)
        return _core.Call("POST", "/v1/sessions", request, self._control_timeout(), session=True, ok=201)

    def _control_timeout(self) -> int:
        """How long a session's create, info or close may take, before the grace."""
        return _core.request_timeout({}, self._cfg)

    def dispose(self) -> None:
        """Stops running moat processes and removes the temporary config; through a
        service, aborts the requests in flight (their run raises SandboxError) and closes
        the sessions opened through this sandbox."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
        if self._service:
            with self._lock:
                idle, self._idle = self._idle, []
                busy = list(self._inflight)
                sessions = list(self._sessions.values())
            for c, _ in idle:
                c.close()
            for c in busy:
                _shutdown(c)
            # their sandboxes are the service's memory: ended with this one
            for s in sessions:
                try:
                    s._close(closing=True)
                except SandboxError:
                    pass
            return
        if self._usvc is not None:
            self._usvc.dispose()
        with self._lock:
            children = list(self._children)
        for child in children:
            if child.poll() is None:
                _proc.signal_group(child.pid, 15)
        if self._cleanup is not None:
            self._cleanup()

    close = dispose

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.dispose()

    # -- moat exec -----------------------------------------------------------------------

    def _run_exec(self, request: Dict[str, Any], on_stdout: Optional[Callback],
                  on_stderr: Optional[Callback]) -> RunResult:
        stream = (on_stdout is not None or on_stderr is not None) and self._exec_stream
        answer = self._exec_once(request, stream, on_stdout, on_stderr)
        if answer is None:  # this moat has no --stream: the whole text at the end
            self._exec_stream = False
            answer = self._exec_once(request, False, on_stdout, on_stderr)
            assert answer is not None
            if "error" not in answer:
                for _ in _core.deliver_whole(answer, on_stdout, on_stderr):
                    pass
        return self._exec_answer(answer)

    def _exec_answer(self, answer: Dict[str, Any]) -> RunResult:
        if isinstance(answer.get("error"), Mapping):
            raise _core.exec_error(answer, self.provider)
        return RunResult(answer)

    def _exec_once(self, request: Dict[str, Any], stream: bool, on_stdout: Optional[Callback],
                   on_stderr: Optional[Callback]) -> Optional[Dict[str, Any]]:
        provider = self.provider
        timeout = _core.request_timeout(request, self._cfg)
        deadline_ms = timeout + self._grace
        started = time.monotonic()
        deadline = started + deadline_ms / 1000.0
        body = json.dumps(request).encode("utf-8")
        argv = _proc.argv_of(self._moat, provider, self._config_file, stream)
        try:
            child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=_proc.env_of(self._key_env),
                                     close_fds=True, start_new_session=True,
                                     preexec_fn=_proc.child_setup(os.getpid()))
        except OSError as e:
            raise _proc.spawn_failed(e, self._moat, provider) from None
        with self._lock:
            self._children.add(child)
        assembler = _core.StreamAssembler(on_stdout, on_stderr, provider, "moat") if stream else None
        out = bytearray()
        err = bytearray()
        done = False
        try:
            self._pump(child, body, deadline, deadline_ms, timeout, out, err, assembler)
            status = child.wait()
            done = True
        finally:
            if not done:
                _stop(child)
            else:
                for f in (child.stdout, child.stderr):
                    if f:
                        f.close()
            with self._lock:
                self._children.discard(child)
        if stream and _proc.stream_unsupported(status, bytes(out), bytes(err)):
            return None
        if assembler is not None and out.strip():
            for _ in assembler.feed(bytes(out)):
                pass
        return _proc.exec_answer(status, bytes(out), bytes(err), assembler, provider, started)

    def _pump(self, child: "subprocess.Popen[bytes]", body: bytes, deadline: float,
              deadline_ms: float, timeout: int, out: bytearray, err: bytearray,
              assembler: Optional[_core.StreamAssembler]) -> None:
        """Writes the request, reads moat's stdout (whole, or line by line into the
        assembler, whose callbacks run here) and the start of its stderr, until both end
        or the deadline passes."""
        assert child.stdin and child.stdout and child.stderr
        sel = selectors.DefaultSelector()
        try:
            os.set_blocking(child.stdin.fileno(), False)
            sel.register(child.stdin, selectors.EVENT_WRITE)
            sel.register(child.stdout, selectors.EVENT_READ)
            sel.register(child.stderr, selectors.EVENT_READ)
            view = memoryview(body)
            while len(sel.get_map()) > 0:
                left = _core.remaining_s(deadline)
                if left <= 0:
                    raise _core.too_late("moat", deadline_ms, timeout, self._grace, "killed it",
                                         self.provider)
                for key, _ in sel.select(left):
                    f = key.fileobj
                    if f is child.stdin:
                        try:
                            n = os.write(child.stdin.fileno(), view[:65536])
                            view = view[n:]
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, ConnectionResetError):
                            view = view[len(view):]  # moat may exit before reading it all
                        if not view:
                            sel.unregister(child.stdin)
                            child.stdin.close()
                        continue
                    chunk = os.read(f.fileno(), 65536)  # type: ignore[union-attr]
                    if not chunk:
                        sel.unregister(f)
                        continue
                    if f is child.stderr:
                        if len(err) < _core.MAX_ERR_BYTES:
                            err += chunk[: _core.MAX_ERR_BYTES - len(err)]
                        continue
                    out += chunk
                    if assembler is not None:
                        for line in _core.split_lines(out):
                            for _ in assembler.feed(line):
                                pass
                    if len(out) > _core.MAX_ANSWER_BYTES:
                        raise SandboxUnavailableError(
                            "moat's answer passed %d bytes; killed it" % _core.MAX_ANSWER_BYTES,
                            provider=self.provider)
        finally:
            sel.close()
            if child.stdin and not child.stdin.closed:
                try:
                    child.stdin.close()
                except OSError:
                    pass

    # -- moat serve ----------------------------------------------------------------------

    def _connection(self, deadline: float) -> Tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if now - since < _core.FREE_SOCKET_MS / 1000.0 and conn.sock is not None:
                    self._inflight.add(conn)
                    return conn, True
                conn.close()
        t = self._target
        left = max(0.001, _core.remaining_s(deadline))
        conn: http.client.HTTPConnection
        if t.socket_path is not None:
            conn = _UnixConnection(t.socket_path, left)
        elif t.scheme == "https":
            conn = http.client.HTTPSConnection(str(t.host), t.port, timeout=left,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(str(t.host), t.port, timeout=left)
        with self._lock:
            self._inflight.add(conn)
        return conn, False

    def _release(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        with self._lock:
            self._inflight.discard(conn)
            if keep and not self._disposed:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def _run_service(self, request: Dict[str, Any], on_stdout: Optional[Callback],
                     on_stderr: Optional[Callback]) -> RunResult:
        started = time.monotonic()
        call = _core.Call("POST", "/v1/run", request, _core.request_timeout(request, {}))
        return _core.result_of(self._call(call, on_stdout, on_stderr), self.provider, started)

    def _call(self, call: _core.Call, on_stdout: Optional[Callback] = None,
              on_stderr: Optional[Callback] = None, closing: bool = False) -> Dict[str, Any]:
        """One exchange with the service; the answer's JSON object. ``closing``: a session's
        DELETE made by dispose() itself."""
        provider = self.provider
        t = self._target
        stream = on_stdout is not None or on_stderr is not None
        timeout = call.timeout
        deadline_ms = timeout + self._grace
        started = time.monotonic()
        deadline = started + deadline_ms / 1000.0
        body = call.body
        headers = {k: v for k, v in _core.request_headers(body, self._token, stream, t) if k != "Host"}

        def late() -> SandboxUnavailableError:
            return _core.too_late("moat serve", deadline_ms, timeout, self._grace, "aborted the request",
                                  provider)

        def gone() -> SandboxError:
            return SandboxError("sandbox disposed while the run was in flight; the request was aborted",
                                provider=provider)

        for attempt in (0, 1):
            conn, reused = self._connection(deadline)
            keep = False
            connected = conn.sock is not None
            try:
                try:
                    if conn.sock is None:
                        conn.connect()
                        connected = True
                    conn.sock.settimeout(max(0.001, _core.remaining_s(deadline)))
                    conn.request(call.method, call.path(t), body=body, headers=headers)
                    resp = conn.getresponse()
                except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                    if self._disposed:
                        raise gone() from None
                    if reused and attempt == 0:
                        continue  # the service closed an idle connection: a fresh one
                    raise SandboxUnavailableError("cannot reach moat serve at %s: the connection was closed"
                                                  % t.where, provider=provider) from None
                except socket.timeout:
                    raise late() from None
                except (OSError, http.client.HTTPException) as e:
                    if self._disposed and not closing:
                        raise gone() from None
                    err = SandboxUnavailableError("cannot reach moat serve at %s: %s"
                                                  % (t.where, _oserror_text(e)), provider=provider)
                    err.not_run = not connected  # type: ignore[attr-defined]
                    raise err from None
                try:
                    answer, keep = self._read_answer(conn, resp, deadline, stream, on_stdout, on_stderr,
                                                     call)
                except socket.timeout:
                    raise late() from None
                except (OSError, http.client.HTTPException):
                    if self._disposed and not closing:
                        raise gone() from None
                    raise SandboxUnavailableError(
                        "moat serve at %s closed the connection before the whole answer" % t.where,
                        provider=provider) from None
                if self._disposed and not closing:
                    raise gone()
                return answer
            finally:
                self._release(conn, keep)
        raise AssertionError("unreachable")

    def _read_answer(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                     deadline: float, stream: bool, on_stdout: Optional[Callback],
                     on_stderr: Optional[Callback], call: _core.Call) -> Tuple[Dict[str, Any], bool]:
        provider = self.provider
        t = self._target
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status == 200 and stream and _core.is_ndjson(hdrs.get("content-type")):
            assembler = _core.StreamAssembler(on_stdout, on_stderr, provider, "moat serve at " + t.where)
            while True:
                if conn.sock is not None:
                    conn.sock.settimeout(max(0.001, _core.remaining_s(deadline)))
                line = resp.readline(_core.MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > _core.MAX_LINE_BYTES:
                    raise SandboxUnavailableError("moat serve at %s sent a stream line over %d bytes"
                                                  % (t.where, _core.MAX_LINE_BYTES), provider=provider)
                if not line.endswith(b"\n"):
                    self._check_complete(resp, line)
                for _ in assembler.feed(line):
                    pass
            self._check_complete(resp, b"")
            data = assembler.finish()
            if not call.session and isinstance(data.get("error"), Mapping):
                raise _core.service_error(resp.status, data, hdrs, provider, t, self._token is not None, call)
            return data, not resp.will_close
        raw = bytearray()
        while True:
            if conn.sock is not None:
                conn.sock.settimeout(max(0.001, _core.remaining_s(deadline)))
            chunk = resp.read(65536)
            if not chunk:
                break
            raw += chunk
            if len(raw) > _core.MAX_ANSWER_BYTES:
                raise SandboxUnavailableError("moat serve at %s sent an answer over %d bytes"
                                              % (t.where, _core.MAX_ANSWER_BYTES), provider=provider)
        self._check_complete(resp, b"")
        answer = _core.parse_json(bytes(raw))
        if resp.status != call.ok or (not call.session and isinstance(answer, dict) and answer.get("error")):
            raise _core.service_error(resp.status, answer, hdrs, provider, t, self._token is not None, call)
        if not isinstance(answer, dict):
            raise SandboxUnavailableError("moat serve answered with something that is not a result",
                                          provider=provider)
        for _ in _core.deliver_whole(answer, on_stdout, on_stderr):
            pass
        return answer, not resp.will_close

    def _check_complete(self, resp: http.client.HTTPResponse, tail: bytes) -> None:
        """A body cut short: a Content-Length not reached, a chunked body without its last
        chunk, or an NDJSON line without its newline at the end."""
        if tail or (resp.length is not None and resp.length > 0) or \
                (resp.chunked and resp.chunk_left is not None and not resp.isclosed()):
            raise http.client.IncompleteRead(tail)


class Session:
    """One session (docs/SESSIONS.md): ``id``, ``language``, ``expires_at``, ``created``
    (``POST /v1/sessions``'s answer); ``run`` a step, ``info()``, ``close()`` (idempotent).
    A context manager: ``with sandbox.session(language="python") as s: ...``."""

    def __init__(self, sandbox: Sandbox, sid: str, created: Mapping[str, Any]) -> None:
        self._s = sandbox
        self.id = sid
        self.created: Dict[str, Any] = dict(created)
        self.language: Optional[str] = created.get("language")
        self.expires_at: Optional[str] = created.get("expiresAt")
        self._route = "/v1/sessions/" + sid
        self._lock = threading.Lock()
        self._closed = False

    def run(self, code: str, *, stdin: Optional[str] = None, files: Optional[Mapping[str, str]] = None,
            timeout: Optional[int] = None, on_stdout: Optional[Callback] = None,
            on_stderr: Optional[Callback] = None) -> RunResult:
        """Runs ``code`` in the session's interpreter: the run's result plus ``error`` (the
        step's exception or None), ``value``, ``display`` and ``session``. A run while
        another runs raises SessionBusyError; after close(), SessionGoneError."""
        s = self._s
        if self._closed or s._disposed:
            raise _core.closed_here(self.id, s.provider)
        request = _core.session_run_request(code, stdin, files, timeout, on_stdout, on_stderr, s._cfg,
                                            s.provider)
        started = time.monotonic()
        call = _core.Call("POST", self._route + "/run", request, _core.request_timeout(request, {}),
                          session=True, session_id=self.id)
        return _core.result_of(s._call(call, on_stdout, on_stderr), s.provider, started)

    def info(self) -> _core.SessionInfo:
        """``GET /v1/sessions/{id}``: state, runs, cpu time, memory, expiry, reason."""
        s = self._s
        if s._disposed:
            raise SandboxError("sandbox disposed", provider=s.provider)
        return _core.SessionInfo(s._call(_core.Call("GET", self._route, None, s._control_timeout(),
                                                    session=True, session_id=self.id)))

    def close(self) -> None:
        """Ends the session (``DELETE``); a second call does nothing, and a session the
        service already ended (410, 404) is closed."""
        self._close(closing=False)

    def _close(self, closing: bool) -> None:
        s = self._s
        with self._lock:  # one DELETE, whoever calls
            if self._closed:
                return
            try:
                s._call(_core.Call("DELETE", self._route, None, s._control_timeout(), session=True,
                                   session_id=self.id), closing=closing)
            except (SessionGoneError, SessionNotFoundError):
                pass
            self._closed = True
        with s._lock:
            s._sessions.pop(self.id, None)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Session(language=%r, closed=%r)" % (self.language, self._closed)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over the service's unix socket (Host: localhost)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # CLOEXEC: Python's default
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _oserror_text(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _shutdown(conn: http.client.HTTPConnection) -> None:
    s = conn.sock
    if s is not None:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _stop(child: "subprocess.Popen[bytes]") -> None:
    """SIGTERM to moat's group now, SIGKILL after KILL_WAIT_MS if it is still there, then
    reaped; in a daemon thread, so that the caller's error is not held up."""
    if child.poll() is not None:
        return
    _proc.signal_group(child.pid, 15)

    def reap() -> None:
        try:
            child.wait(_core.KILL_WAIT_MS / 1000.0)
        except subprocess.TimeoutExpired:
            if child.poll() is None:
                _proc.signal_group(child.pid, 9)
            child.wait()
        for f in (child.stdout, child.stderr):
            if f:
                f.close()
    threading.Thread(target=reap, name="moat-reap", daemon=True).start()
