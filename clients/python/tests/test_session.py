"""Sessions (docs/SESSIONS.md, "Clients"): Sandbox.session / AsyncSandbox.session, first
against a fake service made here (which checks each request and answers canned session
answers and errors), then against the real `moat serve`."""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import unittest
from typing import Any, Dict, List

import helpers
from helpers import TOKEN, FakeService

from moat_sandbox import (
    AsyncSandbox, AsyncSession, SandboxConfigError, SandboxError, SandboxPolicyError,
    SandboxUnavailableError, Session, SessionBusyError, SessionGoneError, SessionNotFoundError,
    create_sandbox,
)

SID = "ses_" + "0123456789abcdef" * 2
STATUS = {"id": SID, "state": "idle", "runs": 1, "cpuTimeMs": 3, "memoryBytes": 1 << 20,
          "expiresAt": "2026-12-05T05:00:00Z", "idleExpiresAt": "2026-12-05T04:10:00Z"}
STEP = {"stdout": "", "stderr": "", "exitCode": 0, "timedOut": False, "killedBy": None, "durationMs": 4,
        "cpuTimeMs": 2, "stdoutTruncated": False, "stderrTruncated": False, "warnings": [],
        "provider": "native", "error": None, "value": "42", "display": [], "session": STATUS}
CREATED = {"id": SID, "language": "python", "expiresAt": STATUS["expiresAt"],
           "idleExpiresAt": STATUS["idleExpiresAt"], "limits": {}, "warnings": []}


def err_body(etype: str, message: str) -> Any:
    return {"error": {"type": etype, "message": message}}


def service(h, r) -> None:
    """The fake's usual answers: create, run (value echoes the code), info, delete."""
    if r.method == "POST" and r.path == "/v1/sessions":
        return h.json(201, CREATED)
    if r.method == "POST" and r.path == "/v1/sessions/%s/run" % SID:
        return h.json(200, dict(STEP, value=json.dumps(r.body["code"])))
    if r.method == "GET" and r.path == "/v1/sessions/" + SID:
        return h.json(200, dict(STATUS, language="python", createdAt="x", reason=None))
    if r.method == "DELETE" and r.path == "/v1/sessions/" + SID:
        return h.json(200, {"id": SID, "state": "ended"})
    return h.json(404, err_body("NotFound", "no such route"))


class Fake(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = helpers.TempDir()
        cls.sock = os.path.join(cls.tmp.path, "fake.sock")
        cls.fake = FakeService(cls.sock)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.fake.close()
        cls.tmp.cleanup()

    def both(self, fn, **cfg: Any) -> None:
        """fn(session-maker, run, info, close) through Sandbox and AsyncSandbox: each gets a
        blocking face over the same calls."""
        cfg.setdefault("socket_path", self.sock)
        with create_sandbox(**cfg) as sb:
            fn(lambda **o: sb.session(**o), lambda s, *a, **k: s.run(*a, **k),
               lambda s: s.info(), lambda s: s.close())

        async def main() -> None:
            async with AsyncSandbox(**cfg) as a:
                loop = asyncio.get_running_loop()

                def sync(coro_fn):
                    def call(*args: Any, **kw: Any) -> Any:
                        return asyncio.run_coroutine_threadsafe(coro_fn(*args, **kw), loop).result(30)
                    return call

                async def opened(**o: Any) -> AsyncSession:
                    return await a.session(**o)

                async def run(s, *args: Any, **kw: Any):
                    return await s.run(*args, **kw)

                async def info(s):
                    return await s.info()

                async def close(s):
                    return await s.close()
                await loop.run_in_executor(None, fn, sync(opened), sync(run), sync(info), sync(close))
        asyncio.run(main())

    def test_create_run_info_close(self) -> None:
        self.fake.reply = service

        def check(session, run, info, close) -> None:
            n = len(self.fake.seen)
            s = session(language="python", idle_timeout_ms=60000, kv_enabled=True, sandbox_id="a")
            self.assertEqual((s.id, s.language, s.expires_at), (SID, "python", CREATED["expiresAt"]))
            q = self.fake.seen[n]
            self.assertEqual((q.method, q.path), ("POST", "/v1/sessions"))
            self.assertEqual(q.headers["authorization"], "Bearer " + TOKEN)
            # the config's limits folded in; its timeout is a step's, not the session's
            self.assertEqual(q.body, {"language": "python", "idleTimeoutMs": 60000, "kvEnabled": True,
                                      "sandboxId": "a", "memoryMb": 256})
            r = run(s, "x = 41\nx + 1", stdin="in", files={"a.txt": "b"})
            q = self.fake.seen[n + 1]
            self.assertEqual((q.method, q.path), ("POST", "/v1/sessions/%s/run" % SID))
            self.assertEqual(q.headers["accept"], "application/json")
            self.assertEqual(q.body, {"code": "x = 41\nx + 1", "stdin": "in", "files": {"a.txt": "b"},
                                      "timeout": 7000})
            self.assertEqual(r.to_dict(), dict(STEP, value=json.dumps("x = 41\nx + 1")))
            self.assertEqual((r.value, r.error, r.exit_code, r.session["runs"]),
                             (json.dumps("x = 41\nx + 1"), None, 0, 1))
            run(s, "1", timeout=500)
            self.assertEqual(self.fake.seen[n + 2].body["timeout"], 500)
            i = info(s)
            q = self.fake.seen[n + 3]
            self.assertEqual((q.method, q.path, q.body), ("GET", "/v1/sessions/" + SID, b""))
            self.assertEqual((i.state, i.runs, i.memory_bytes, i.reason), ("idle", 1, 1 << 20, None))
            self.assertEqual(i.to_dict()["memoryBytes"], 1 << 20)
            close(s)
            q = self.fake.seen[n + 4]
            self.assertEqual((q.method, q.path), ("DELETE", "/v1/sessions/" + SID))
            self.assertEqual(q.headers["authorization"], "Bearer " + TOKEN)
            close(s)  # idempotent: no second DELETE
            self.assertEqual(len(self.fake.seen), n + 5)
            with self.assertRaises(SessionGoneError) as cm:  # no request either
                run(s, "1")
            self.assertEqual(cm.exception.session_id, SID)
            self.assertIn("closed by this client", cm.exception.reason)
            self.assertEqual(len(self.fake.seen), n + 5)
            self.assertNotIn(SID, repr(s))
        self.both(check, token=TOKEN, memory_mb=256, timeout=7000)

    def test_context_managers_close(self) -> None:
        self.fake.reply = service
        n = len(self.fake.seen)
        with create_sandbox(socket_path=self.sock) as sb:
            with sb.session(language="python") as s:
                self.assertIsInstance(s, Session)
                s.run("1")
        self.assertEqual([q.method for q in self.fake.seen[n:]], ["POST", "POST", "DELETE"])

        async def main() -> None:
            async with AsyncSandbox(socket_path=self.sock) as a:
                async with a.session(language="python") as s:
                    self.assertIsInstance(s, AsyncSession)
                    await s.run("1")
                s2 = await a.session()
                async with s2:
                    pass
                await asyncio.gather(s2.close(), s2.close())
        n = len(self.fake.seen)
        asyncio.run(main())
        self.assertEqual([q.method for q in self.fake.seen[n:]], ["POST", "POST", "DELETE", "POST", "DELETE"])

    def test_a_step_that_raised_is_a_result(self) -> None:
        raised = dict(STEP, exitCode=1, stderr="Traceback...\nZeroDivisionError: division by zero\n",
                      error={"type": "ZeroDivisionError", "message": "division by zero"}, value=None,
                      display=[{"type": "image/png", "data": "iVBORw0KGgo="}])
        self.fake.reply = lambda h, r: h.json(200, raised) if r.path.endswith("/run") else service(h, r)

        def check(session, run, info, close) -> None:
            s = session()
            r = run(s, "1/0")
            self.assertEqual(r.error, raised["error"])
            self.assertEqual((r.exit_code, r.value), (1, None))
            self.assertEqual(r.display, raised["display"])
            self.assertEqual(r.session, STATUS)
        self.both(check)

    def test_statuses(self) -> None:
        why = "the session was killed: memory limit exceeded (256 MiB)"
        for status, etype, cls in ((409, "SessionBusy", SessionBusyError), (410, "SessionGone", SessionGoneError),
                                   (404, "SessionNotFound", SessionNotFoundError),
                                   (409, None, SessionBusyError), (410, None, SessionGoneError),
                                   (404, None, SessionNotFoundError)):
            def reply(h, r, status=status, etype=etype) -> None:
                if r.path == "/v1/sessions" or r.method == "DELETE":
                    return service(h, r)
                if etype is None:
                    h.send_response(status)
                    h.send_header("Content-Length", "0")
                    h.end_headers()
                    return None
                return h.json(status, err_body(etype, why))
            self.fake.reply = reply

            def check(session, run, info, close, status=status, etype=etype, cls=cls) -> None:
                s = session()
                for call in (lambda: run(s, "1"), lambda: info(s)):
                    with self.assertRaises(cls) as cm:
                        call()
                    e = cm.exception
                    self.assertIsInstance(e, SandboxError)
                    self.assertEqual((e.status, e.error_type, e.session_id), (status, etype, SID))
                    self.assertNotIn(SID, str(e))
                    if etype:
                        self.assertEqual(str(e), why)
                        if cls is SessionGoneError:
                            self.assertEqual(e.reason, why)
            self.both(check)

    def test_no_sessions_on_this_service(self) -> None:
        self.fake.reply = lambda h, r: h.json(404, err_body("NotFound", "no such route"))

        def check(session, run, info, close) -> None:
            with self.assertRaises(SandboxConfigError) as cm:
                session(language="python")
            self.assertNotIsInstance(cm.exception, SessionNotFoundError)
            self.assertRegex(str(cm.exception), r"POST /v1/sessions .*sessions on")
        self.both(check)

    def test_create_refused_busy_or_malformed(self) -> None:
        def check(session, run, info, close) -> None:
            self.fake.reply = lambda h, r: h.json(503, err_body("ServerBusy", "max sessions"), {"Retry-After": "2"})
            with self.assertRaises(SandboxUnavailableError) as cm:
                session()
            self.assertEqual(cm.exception.retry_after_ms, 2000)
            self.fake.reply = lambda h, r: h.json(400, err_body("SandboxConfigError", "Python or JavaScript"))
            with self.assertRaises(SandboxConfigError):
                session()
            for sid in (None, 42, "../../v1/run", "a/b", ""):
                self.fake.reply = lambda h, r, sid=sid: h.json(201, dict(CREATED, id=sid))
                with self.assertRaisesRegex(SandboxUnavailableError, "session id"):
                    session()
        self.both(check)

    def test_close_of_a_session_already_gone_and_retry(self) -> None:
        def check(session, run, info, close) -> None:
            for status, etype in ((410, "SessionGone"), (404, "SessionNotFound")):
                self.fake.reply = lambda h, r, status=status, etype=etype: (
                    h.json(status, err_body(etype, "gone")) if r.method == "DELETE" else service(h, r))
                s = session()
                close(s)
                close(s)
            self.fake.reply = lambda h, r: (h.json(500, err_body("Internal", "boom")) if r.method == "DELETE"
                                            else service(h, r))
            s = session()
            with self.assertRaises(SandboxUnavailableError):
                close(s)
            self.fake.reply = service
            n = len(self.fake.seen)
            close(s)
            self.assertEqual([q.method for q in self.fake.seen[n:]], ["DELETE"])
        self.both(check)

    def test_dispose_closes_the_sessions(self) -> None:
        self.fake.reply = service
        sb = create_sandbox(socket_path=self.sock)
        s = sb.session()
        n = len(self.fake.seen)
        sb.dispose()
        self.assertEqual([q.method for q in self.fake.seen[n:]], ["DELETE"])
        with self.assertRaises(SessionGoneError):
            s.run("1")
        with self.assertRaisesRegex(SandboxError, "disposed"):
            sb.session()

        async def main() -> None:
            a = AsyncSandbox(socket_path=self.sock)
            s2 = await a.session()
            n2 = len(self.fake.seen)
            await a.dispose()
            self.assertEqual([q.method for q in self.fake.seen[n2:]], ["DELETE"])
            with self.assertRaises(SessionGoneError):
                await s2.run("1")
        asyncio.run(main())

    def test_stream(self) -> None:
        def reply(h, r) -> None:
            if not r.path.endswith("/run"):
                return service(h, r)
            self.assertEqual(r.headers["accept"], "application/x-ndjson")
            h.start_chunked(200, "application/x-ndjson")
            for line in ({"type": "stdout", "data": "hel"}, {"type": "stderr", "data": "warn\n"},
                         {"type": "stdout", "data": "lo\n"},
                         dict(STEP, type="result", streamed=True, value="'v'",
                              error={"type": "ValueError", "message": "x"})):
                h.chunk(json.dumps(line).encode() + b"\n")
            h.end_chunked()
            return None
        self.fake.reply = reply

        def check(session, run, info, close) -> None:
            s = session()
            out: List[str] = []
            err: List[str] = []
            r = run(s, "print('hello')", on_stdout=out.append, on_stderr=err.append)
            self.assertEqual((out, err), (["hel", "lo\n"], ["warn\n"]))
            self.assertEqual((r.stdout, r.stderr, r.value), ("hello\n", "warn\n", "'v'"))
            self.assertEqual(r.error, {"type": "ValueError", "message": "x"})
            self.assertEqual(r.session, STATUS)
            d = r.to_dict()
            self.assertNotIn("type", d)
            self.assertNotIn("streamed", d)
        self.both(check)

    def test_bad_arguments_refused_before_any_request(self) -> None:
        self.fake.reply = service

        def check(session, run, info, close) -> None:
            n = len(self.fake.seen)
            for opts, cls, pattern in (({"language": "typescript"}, SandboxConfigError, "python or javascript"),
                                       ({"language": "shell"}, SandboxConfigError, "python or javascript"),
                                       ({"language": "cobol"}, SandboxPolicyError, "unsupported language"),
                                       ({"idle_timeout_ms": -1}, SandboxConfigError, "idle_timeout_ms"),
                                       ({"max_lifetime_ms": "long"}, SandboxConfigError, "max_lifetime_ms"),
                                       ({"idle_timeout_ms": True}, SandboxConfigError, "idle_timeout_ms")):
                with self.assertRaisesRegex(cls, pattern):
                    session(**opts)
            with self.assertRaises(TypeError):
                session(idle_timeout=5)
            self.assertEqual(len(self.fake.seen), n)
            s = session()
            m = len(self.fake.seen)
            for code, opts, pattern in ((42, {}, "code must be a string"),
                                        ("1", {"timeout": 0}, "timeout"),
                                        ("1", {"timeout": "soon"}, "timeout"),
                                        ("1", {"stdin": 5}, "stdin"),
                                        ("1", {"files": ["a"]}, "files"),
                                        ("1", {"on_stdout": "no"}, "on_stdout must be callable")):
                with self.assertRaisesRegex(SandboxConfigError, pattern):
                    run(s, code, **opts)
            with self.assertRaises(TypeError):
                run(s, "1", memory_mb=64)
            self.assertEqual(len(self.fake.seen), m)
        self.both(check)


class NeedsService(unittest.TestCase):
    def test_no_url_no_socket(self) -> None:
        for cfg in ({}, {"provider": "native", "binary": "/nonexistent"}, {"provider": "docker"}):
            with create_sandbox(cfg) as sb:
                with self.assertRaisesRegex(SandboxConfigError, "sessions need a moat serve.*url or socket_path"):
                    sb.session(language="python")

            async def main(cfg: Dict[str, Any] = cfg) -> None:
                async with AsyncSandbox(cfg) as a:
                    with self.assertRaisesRegex(SandboxConfigError, "sessions need a moat serve"):
                        await a.session(language="python")
                    with self.assertRaisesRegex(SandboxConfigError, "sessions need a moat serve"):
                        async with a.session(language="python"):
                            pass
            asyncio.run(main())


SERVE_SKIP = helpers.serve_skip()


@unittest.skipIf(SERVE_SKIP, SERVE_SKIP or "")
class RealServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = helpers.TempDir()
        cls.sock = os.path.join(cls.tmp.path, "moat.sock")
        cls.srv = helpers.Serve(["--socket", cls.sock, "--pool", "0"], {"socket_path": cls.sock})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.close()
        cls.tmp.cleanup()

    def setUp(self) -> None:
        self.sb = create_sandbox(socket_path=self.sock, timeout=20000)

    def tearDown(self) -> None:
        self.sb.dispose()

    def test_state_across_steps_then_close(self) -> None:
        with self.sb.session(language="python") as s:
            self.assertRegex(s.id, r"^ses_[a-z0-9-]{1,32}_[0-9a-f]{32}$")
            r = s.run('x = 41\nopen("/sandbox/f.txt", "w").write("kept")\nprint("set")')
            self.assertEqual((r.stdout, r.exit_code, r.error), ("set\n", 0, None))
            r = s.run("x += 1\nx")
            self.assertEqual((r.value, r.session["state"], r.session["runs"]), ("42", "idle", 2))
            self.assertEqual(s.run('print(open("/sandbox/f.txt").read(), x)').stdout, "kept 42\n")
            r = s.run("1/0")
            self.assertEqual((r.error["type"], r.exit_code), ("ZeroDivisionError", 1))
            self.assertIn("ZeroDivisionError", r.stderr)
            self.assertEqual(s.run("x").value, "42", "an exception does not lose the state")
            i = s.info()
            self.assertEqual((i.id, i.state, i.runs), (s.id, "idle", 5))
        s.close()  # again: nothing
        with self.assertRaises(SessionGoneError):  # refused here, no request
            s.run("x")
        # the service still describes it: ended (until its idle timeout, then 404)
        i = s.info()
        self.assertEqual((i.state, i.runs), ("ended", 5))

    def test_busy(self) -> None:
        with self.sb.session(language="python") as s:
            out: List[Any] = []
            t = threading.Thread(target=lambda: out.append(s.run("import time\ntime.sleep(3)\nprint('slept')")))
            t.start()
            time.sleep(0.8)
            with self.assertRaises(SessionBusyError) as cm:
                s.run("print(1)")
            self.assertEqual(cm.exception.status, 409)
            t.join(30)
            self.assertEqual(out[0].stdout, "slept\n")

    def test_exit_ends_the_session(self) -> None:
        with self.sb.session(language="python") as s:
            r = s.run("import os\nos._exit(3)")
            self.assertEqual(r.session["state"], "ended")
            with self.assertRaises(SessionGoneError) as cm:
                s.run("print(1)")
            self.assertEqual(cm.exception.status, 410)
            self.assertTrue(cm.exception.reason)

    def test_timeout_interrupts_then_kills_the_session(self) -> None:
        with self.sb.session(language="python") as s:
            s.run("x = 1")
            # interrupted (issue 46): KeyboardInterrupt, the state kept
            r = s.run("while True: pass", timeout=500)
            self.assertEqual((r.timed_out, r.killed_by, r.session["state"], r.interrupted),
                             (True, None, "idle", True))
            self.assertEqual(r.error["name"], "KeyboardInterrupt")
            self.assertEqual(s.run("x + 1").main_result.text, "2")
            # one that ignores the interrupt is killed after the grace
            r = s.run("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                      "while True: pass", timeout=500)
            self.assertEqual((r.timed_out, r.killed_by, r.session["state"]), (True, "timeout", "killed"))
            with self.assertRaises(SessionGoneError) as cm:
                s.run("x")
            self.assertRegex(cm.exception.reason, "time")
            self.assertEqual(s.info().state, "killed")

    def test_async_stream(self) -> None:
        async def main() -> None:
            async with AsyncSandbox(socket_path=self.sock, timeout=20000) as a:
                async with a.session(language="python") as s:
                    got: List[str] = []
                    t0 = time.monotonic()
                    first: List[float] = []

                    def cb(text: str) -> None:
                        if not first:
                            first.append(time.monotonic() - t0)
                        got.append(text)
                    r = await s.run("import time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')\n6*7",
                                    on_stdout=cb)
                    self.assertEqual(("".join(got), r.stdout, r.value), ("one\ntwo\n", "one\ntwo\n", "42"))
                    self.assertLess(first[0], time.monotonic() - t0 - 1.0, "the first chunk came before the end")
        asyncio.run(main())

    def test_async_javascript(self) -> None:
        async def main() -> None:
            async with AsyncSandbox(socket_path=self.sock, timeout=20000) as a:
                async with a.session(language="javascript") as js:
                    await js.run("var n = 40; function inc() { return ++n; }")
                    self.assertEqual((await js.run("inc(); inc()")).value, "42")
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()


class RichResults(unittest.TestCase):
    """A step's rich results and Jupyter's error (issue 46), read as E2B's names."""

    def test_results_read_by_name(self) -> None:
        from moat_sandbox import Result
        from moat_sandbox._core import RunResult
        r = RunResult(dict(STEP, results=[
            {"isMain": False, "data": {"text/plain": "<Figure>", "image/png": "iVBOR"}},
            {"isMain": True, "data": {"text/plain": "42", "text/html": "<b>42</b>",
                                      "application/json": {"a": 1}}}],
            resultsTruncated=False, executionCount=3, interrupted=False,
            error={"type": "ValueError", "message": "m", "name": "ValueError", "value": "m",
                   "traceback": ["Traceback (most recent call last):", "ValueError: m"]}))
        self.assertEqual([type(x) for x in r.results], [Result, Result])
        fig, main = r.results
        self.assertEqual((fig.png, fig.text, fig.html, fig.is_main_result),
                         ("iVBOR", "<Figure>", None, False))
        self.assertEqual(fig.formats(), ["text", "png"])
        self.assertIs(r.main_result.is_main_result, True)
        self.assertEqual((main.text, main.html, main.json), ("42", "<b>42</b>", {"a": 1}))
        self.assertEqual((r.execution_count, r.results_truncated, r.interrupted), (3, False, False))
        self.assertEqual(r.error["traceback"][-1], "ValueError: m")
        with self.assertRaises(AttributeError):
            main.nope
        with self.assertRaises(AttributeError):
            main.text = "x"
        # a run's result (no results on the wire): an empty list, no main result
        plain = RunResult({"stdout": "", "exitCode": 0})
        self.assertEqual((plain.results, plain.main_result), ([], None))
        self.assertEqual(r.to_dict()["results"][1]["data"]["text/plain"], "42")
