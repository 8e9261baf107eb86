"""The asyncio client: `moat exec` through asyncio.create_subprocess_exec, `moat serve`
through a minimal HTTP/1.1 client on asyncio streams (one connection per run). Nothing
blocks the loop; a cancelled run kills its moat (SIGTERM to its process group, SIGKILL
after 2 s) or closes its connection (the service then stops the run)."""
from __future__ import annotations

import asyncio
import inspect
import json
import os
import ssl
import time
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Set, Tuple

from . import _core, _proc
from ._core import Callback, RunResult
from ._errors import SandboxError, SandboxUnavailableError, SessionGoneError, SessionNotFoundError
from ._sync import Sandbox

MAX_HEAD_BYTES = 64 << 10


async def _call(results: Any) -> None:
    for r in results:
        if inspect.isawaitable(r):
            await r


class _Cut(Exception):
    """The service closed the connection before the whole answer."""


class AsyncSandbox:
    """The same contract as :class:`Sandbox`, with ``await run(...)`` and
    ``await dispose()``; ``on_stdout``/``on_stderr`` may be plain functions or coroutine
    functions (awaited in order, before the next chunk is read). Use ``async with``."""

    provider: str

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self._s = Sandbox(config, **kwargs)  # the config, its checks, the moat config file
        self.provider = self._s.provider
        self._disposed = False
        self._procs: Set[asyncio.subprocess.Process] = set()
        self._writers: Set[asyncio.StreamWriter] = set()
        self._reapers: Set["asyncio.Task[None]"] = set()
        self._sessions: Dict[str, "AsyncSession"] = {}  # open sessions, closed by dispose()
        # the user's service (Sandbox's _usvc): an AsyncSandbox of its own
        self._usvc: Optional[AsyncSandbox] = None
        if self._s._usvc is not None:
            self._usvc = AsyncSandbox({"socketPath": self._s._usvc_path,
                                       "deadlineGraceMs": self._s._grace})

    async def run(self, code: str, *, language: Optional[str] = None, timeout: Optional[int] = None,
                  env: Optional[Mapping[str, str]] = None, files: Optional[Mapping[str, str]] = None,
                  stdin: Optional[str] = None, network: Optional[bool] = None,
                  allowed_hosts: Optional[List[str]] = None, outputs: Optional[List[str]] = None,
                  memory_mb: Optional[int] = None, cpus: Optional[float] = None,
                  pids_limit: Optional[int] = None, strict_limits: Optional[bool] = None,
                  max_output_bytes: Optional[int] = None, on_stdout: Optional[Callback] = None,
                  on_stderr: Optional[Callback] = None) -> RunResult:
        s = self._s
        if self._disposed:
            raise SandboxError("sandbox disposed", provider=self.provider)
        request = s._prepare(code, locals(), on_stdout, on_stderr)
        if s._service:
            return await self._run_service(request, on_stdout, on_stderr)
        why = s._usvc_why
        if self._usvc is not None:
            why = _core.socket_not_ours(str(s._usvc_path))
        if self._usvc is not None and why is None:
            svc_request = _core.build_request(code, locals(), s._cfg, self.provider)
            try:
                return await self._usvc._run_service(svc_request, on_stdout, on_stderr)
            except SandboxError as e:
                why = _core.fallback_reason(e, str(s._usvc_path))
                if why is None:
                    raise
        result = await self._run_exec(request, on_stdout, on_stderr)
        return _core.with_warning(result, why) if why else result

    async def _run_exec(self, request: Dict[str, Any], on_stdout: Optional[Callback],
                        on_stderr: Optional[Callback]) -> RunResult:
        s = self._s
        stream = (on_stdout is not None or on_stderr is not None) and s._exec_stream
        answer = await self._exec_once(request, stream, on_stdout, on_stderr)
        if answer is None:  # this moat has no --stream: the whole text at the end
            s._exec_stream = False
            answer = await self._exec_once(request, False, on_stdout, on_stderr)
            assert answer is not None
            if "error" not in answer:
                await _call(_core.deliver_whole(answer, on_stdout, on_stderr))
        return s._exec_answer(answer)

    def session(self, *, language: Optional[str] = None, sandbox_id: Optional[str] = None,
                kv_enabled: Optional[bool] = None, memory_mb: Optional[int] = None,
                cpus: Optional[float] = None, pids_limit: Optional[int] = None,
                strict_limits: Optional[bool] = None, max_output_bytes: Optional[int] = None,
                env: Optional[Mapping[str, str]] = None, network: Optional[bool] = None,
                allowed_hosts: Optional[List[str]] = None, idle_timeout_ms: Optional[int] = None,
                max_lifetime_ms: Optional[int] = None) -> "_Opening":
        """``await a.session(...)`` → :class:`AsyncSession`, or ``async with a.session(...)
        as s`` (closed at the end). The same arguments and checks as Sandbox.session."""
        opts = dict(locals())
        return _Opening(self._open(opts))

    async def _open(self, opts: Mapping[str, Any]) -> "AsyncSession":
        if self._disposed:
            raise SandboxError("sandbox disposed", provider=self.provider)
        answer = await self._call(self._s._create_call(opts))
        ses = AsyncSession(self, _core.session_id_of(answer, self.provider), answer)
        if self._disposed:
            await ses.close()
            raise SandboxError("sandbox disposed", provider=self.provider)
        self._sessions[ses.id] = ses
        return ses

    async def dispose(self) -> None:
        """Stops running moat processes, closes the connections in flight (their runs
        raise SandboxError) and the sessions opened here, removes the temporary config."""
        if self._disposed:
            return
        self._disposed = True
        if self._usvc is not None:
            await self._usvc.dispose()
        for p in list(self._procs):
            self._stop(p)
        for w in list(self._writers):
            w.close()
        for ses in list(self._sessions.values()):
            try:
                await ses._close(closing=True)
            except SandboxError:
                pass
        self._s.dispose()
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)

    close = dispose

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.dispose()

    # -- moat exec -----------------------------------------------------------------------

    def _stop(self, p: asyncio.subprocess.Process) -> None:
        if p.returncode is not None:
            return
        _proc.signal_group(p.pid, 15)

        async def reap() -> None:
            try:
                await asyncio.wait_for(p.wait(), _core.KILL_WAIT_MS / 1000.0)
            except asyncio.TimeoutError:
                if p.returncode is None:
                    _proc.signal_group(p.pid, 9)
                await p.wait()
        task = asyncio.get_running_loop().create_task(reap())
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    async def _exec_once(self, request: Dict[str, Any], stream: bool, on_stdout: Optional[Callback],
                         on_stderr: Optional[Callback]) -> Optional[Dict[str, Any]]:
        s = self._s
        provider = self.provider
        timeout = _core.request_timeout(request, s._cfg)
        deadline_ms = timeout + s._grace
        started = time.monotonic()
        body = json.dumps(request).encode("utf-8")
        argv = _proc.argv_of(s._moat, provider, s._config_file, stream)
        try:
            p = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=_proc.env_of(s._key_env), close_fds=True,
                start_new_session=True, preexec_fn=_proc.child_setup(os.getpid()))
        except OSError as e:
            raise _proc.spawn_failed(e, s._moat, provider) from None
        self._procs.add(p)
        assembler = _core.StreamAssembler(on_stdout, on_stderr, provider, "moat") if stream else None
        out = bytearray()
        err = bytearray()

        async def feed() -> None:
            assert p.stdin
            try:
                p.stdin.write(body)
                await p.stdin.drain()
                p.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # moat may exit before reading it all

        async def read_err() -> None:
            assert p.stderr
            while True:
                chunk = await p.stderr.read(65536)
                if not chunk:
                    return
                if len(err) < _core.MAX_ERR_BYTES:
                    err.extend(chunk[: _core.MAX_ERR_BYTES - len(err)])

        async def read_out() -> None:
            assert p.stdout
            while True:
                chunk = await p.stdout.read(65536)
                if not chunk:
                    return
                out.extend(chunk)
                if assembler is not None:
                    for line in _core.split_lines(out):
                        await _call(assembler.feed(line))
                if len(out) > _core.MAX_ANSWER_BYTES:
                    raise SandboxUnavailableError("moat's answer passed %d bytes; killed it"
                                                  % _core.MAX_ANSWER_BYTES, provider=provider)

        async def everything() -> int:
            await asyncio.gather(feed(), read_err(), read_out())
            return await p.wait()

        done = False
        try:
            try:
                status = await asyncio.wait_for(everything(), deadline_ms / 1000.0)
            except asyncio.TimeoutError:
                raise _core.too_late("moat", deadline_ms, timeout, s._grace, "killed it", provider) from None
            done = True
        finally:
            if not done:
                self._stop(p)
            self._procs.discard(p)
        if stream and _proc.stream_unsupported(status, bytes(out), bytes(err)):
            return None
        if assembler is not None and out.strip():
            await _call(assembler.feed(bytes(out)))
        return _proc.exec_answer(status, bytes(out), bytes(err), assembler, provider, started)

    # -- moat serve ----------------------------------------------------------------------

    async def _run_service(self, request: Dict[str, Any], on_stdout: Optional[Callback],
                           on_stderr: Optional[Callback]) -> RunResult:
        started = time.monotonic()
        call = _core.Call("POST", "/v1/run", request, _core.request_timeout(request, {}))
        return _core.result_of(await self._call(call, on_stdout, on_stderr), self.provider, started)

    async def _call(self, call: _core.Call, on_stdout: Optional[Callback] = None,
                    on_stderr: Optional[Callback] = None, closing: bool = False) -> Dict[str, Any]:
        """One exchange with the service (its own connection); the answer's JSON object.
        ``closing``: a session's DELETE made by dispose() itself."""
        s = self._s
        provider = self.provider
        t = s._target
        stream = on_stdout is not None or on_stderr is not None
        timeout = call.timeout
        deadline_ms = timeout + s._grace
        body = call.body
        head = "%s %s HTTP/1.1\r\n" % (call.method, call.path(t))
        for k, v in _core.request_headers(body, s._token, stream, t):
            head += "%s: %s\r\n" % (k, v)
        head += "Connection: close\r\n\r\n"
        writer: Optional[asyncio.StreamWriter] = None

        async def exchange() -> Dict[str, Any]:
            nonlocal writer
            try:
                if t.socket_path is not None:
                    reader, writer = await asyncio.open_unix_connection(t.socket_path)
                elif t.scheme == "https":
                    reader, writer = await asyncio.open_connection(
                        t.host, t.port, ssl=ssl.create_default_context(), server_hostname=t.host)
                else:
                    reader, writer = await asyncio.open_connection(t.host, t.port)
            except OSError as e:
                err = SandboxUnavailableError("cannot reach moat serve at %s: %s"
                                              % (t.where, e.strerror or e), provider=provider)
                err.not_run = True  # type: ignore[attr-defined]
                raise err from None
            self._writers.add(writer)
            try:
                writer.write(head.encode("latin-1") + (body or b""))
                await writer.drain()
                status, hdrs = await _read_head(reader)
                if status == 200 and stream and _core.is_ndjson(hdrs.get("content-type")):
                    assembler = _core.StreamAssembler(on_stdout, on_stderr, provider,
                                                      "moat serve at " + t.where)
                    pending = bytearray()
                    async for chunk in _body(reader, hdrs):
                        pending.extend(chunk)
                        for line in _core.split_lines(pending):
                            await _call(assembler.feed(line))
                        if len(pending) > _core.MAX_LINE_BYTES:
                            raise SandboxUnavailableError(
                                "moat serve at %s sent a stream line over %d bytes"
                                % (t.where, _core.MAX_LINE_BYTES), provider=provider)
                    if pending.strip():
                        raise _Cut()
                    data = assembler.finish()
                    if not call.session and isinstance(data.get("error"), Mapping):
                        raise _core.service_error(status, data, hdrs, provider, t, s._token is not None, call)
                    return data
                raw = bytearray()
                async for chunk in _body(reader, hdrs):
                    raw.extend(chunk)
                    if len(raw) > _core.MAX_ANSWER_BYTES:
                        raise SandboxUnavailableError("moat serve at %s sent an answer over %d bytes"
                                                      % (t.where, _core.MAX_ANSWER_BYTES), provider=provider)
                answer = _core.parse_json(bytes(raw))
                if status != call.ok or (not call.session and isinstance(answer, dict) and answer.get("error")):
                    raise _core.service_error(status, answer, hdrs, provider, t, s._token is not None, call)
                if not isinstance(answer, dict):
                    raise SandboxUnavailableError("moat serve answered with something that is not a result",
                                                  provider=provider)
                await _call(_core.deliver_whole(answer, on_stdout, on_stderr))
                return answer
            except (_Cut, asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                    ValueError):
                if self._disposed and not closing:
                    raise SandboxError("sandbox disposed while the run was in flight; the request was aborted",
                                       provider=provider) from None
                raise SandboxUnavailableError(
                    "moat serve at %s closed the connection before the whole answer" % t.where,
                    provider=provider) from None

        try:
            return await asyncio.wait_for(exchange(), deadline_ms / 1000.0)
        except asyncio.TimeoutError:
            raise _core.too_late("moat serve", deadline_ms, timeout, s._grace, "aborted the request",
                                 provider) from None
        finally:
            if writer is not None:
                self._writers.discard(writer)
                writer.close()


class _Opening:
    """What AsyncSandbox.session returns: awaitable (the session) and an async context
    manager (the session, closed at the end)."""

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._session: Optional[AsyncSession] = None

    def __await__(self) -> Any:
        return self._coro.__await__()

    async def __aenter__(self) -> "AsyncSession":
        self._session = await self._coro
        return self._session

    async def __aexit__(self, *exc: Any) -> None:
        if self._session is not None:
            await self._session.close()


class AsyncSession:
    """The asyncio face of :class:`moat_sandbox.Session`: ``await run(...)``, ``await
    info()``, ``await close()``; ``async with``."""

    def __init__(self, sandbox: AsyncSandbox, sid: str, created: Mapping[str, Any]) -> None:
        self._a = sandbox
        self.id = sid
        self.created: Dict[str, Any] = dict(created)
        self.language: Optional[str] = created.get("language")
        self.expires_at: Optional[str] = created.get("expiresAt")
        self._route = "/v1/sessions/" + sid
        self._closing: Optional["asyncio.Future[None]"] = None

    async def run(self, code: str, *, stdin: Optional[str] = None, files: Optional[Mapping[str, str]] = None,
                  timeout: Optional[int] = None, on_stdout: Optional[Callback] = None,
                  on_stderr: Optional[Callback] = None) -> RunResult:
        a = self._a
        if self._closing is not None or a._disposed:
            raise _core.closed_here(self.id, a.provider)
        request = _core.session_run_request(code, stdin, files, timeout, on_stdout, on_stderr, a._s._cfg,
                                            a.provider)
        started = time.monotonic()
        call = _core.Call("POST", self._route + "/run", request, _core.request_timeout(request, {}),
                          session=True, session_id=self.id)
        return _core.result_of(await a._call(call, on_stdout, on_stderr), a.provider, started)

    async def info(self) -> _core.SessionInfo:
        a = self._a
        if a._disposed:
            raise SandboxError("sandbox disposed", provider=a.provider)
        return _core.SessionInfo(await a._call(_core.Call("GET", self._route, None, a._s._control_timeout(),
                                                          session=True, session_id=self.id)))

    async def close(self) -> None:
        """Idempotent (concurrent calls share one DELETE); a session the service already
        ended (410, 404) is closed; after a failure a later close() tries again."""
        await self._close(closing=False)

    async def _close(self, closing: bool) -> None:
        a = self._a
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
            try:
                await a._call(_core.Call("DELETE", self._route, None, a._s._control_timeout(), session=True,
                                         session_id=self.id), closing=closing)
            except (SessionGoneError, SessionNotFoundError):
                pass
            except BaseException as e:
                fut, self._closing = self._closing, None
                fut.set_result(None)
                raise e
            a._sessions.pop(self.id, None)
            self._closing.set_result(None)
            return
        await asyncio.shield(self._closing)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "AsyncSession(language=%r)" % (self.language,)


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Cut() from None
    if len(head) > MAX_HEAD_BYTES:
        raise _Cut()
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise _Cut()
    hdrs: Dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    return int(parts[1]), hdrs


async def _body(reader: asyncio.StreamReader, hdrs: Mapping[str, str]) -> AsyncIterator[bytes]:
    """The body: chunked, by Content-Length, or up to the end of the connection."""
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return
            while size > 0:
                chunk = await reader.read(min(size, 65536))
                if not chunk:
                    raise _Cut()
                size -= len(chunk)
                yield chunk
            if await reader.readexactly(2) != b"\r\n":
                raise _Cut()
    elif "content-length" in hdrs:
        left = int(hdrs["content-length"])
        while left > 0:
            chunk = await reader.read(min(left, 65536))
            if not chunk:
                raise _Cut()
            left -= len(chunk)
            yield chunk
    else:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            yield chunk
