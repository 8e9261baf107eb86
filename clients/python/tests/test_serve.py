"""The client against `moat serve` (POST /v1/run): a fake service made here that checks
each request and answers canned results, errors and NDJSON streams; then the real
`moat serve` on a unix socket and on 127.0.0.1 with a token."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
import time
import unittest
from typing import Any, List

import helpers
from helpers import RESULT, TOKEN, FakeService

from moat_sandbox import (
    AsyncSandbox, SandboxConfigError, SandboxError, SandboxPolicyError, SandboxUnavailableError,
    create_sandbox,
)


def err_body(etype: str, message: str) -> Any:
    return {"error": {"type": etype, "message": message, "provider": "native"}}


def run_both(cfg: dict, code: str = "print(1)", **opts: Any):
    """The same run through Sandbox and AsyncSandbox: [result or exception, ...]."""
    out: List[Any] = []
    with create_sandbox(cfg) as s:
        try:
            out.append(s.run(code, **opts))
        except Exception as e:  # noqa: BLE001
            out.append(e)

    async def main():
        async with AsyncSandbox(cfg) as a:
            return await a.run(code, **opts)
    try:
        out.append(asyncio.run(main()))
    except Exception as e:  # noqa: BLE001
        out.append(e)
    return out


class Fake(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = helpers.TempDir()
        cls.sock = os.path.join(cls.tmp.path, "fake.sock")
        cls.unix = FakeService(cls.sock)
        cls.tcp = FakeService()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.unix.close()
        cls.tcp.close()
        cls.tmp.cleanup()

    def reply(self, fn) -> None:
        self.unix.reply = fn
        self.tcp.reply = fn

    def cfgs(self, **extra: Any):
        return [dict(socket_path=self.sock, **extra), dict(url=self.tcp.url, **extra)]

    def test_request(self) -> None:
        self.reply(lambda h, r: h.json(200, RESULT))
        n = len(self.unix.seen)
        s = create_sandbox({"provider": "native", "socketPath": self.sock, "token": TOKEN, "memoryMb": 128,
                            "timeout": 9000, "moatPath": "/nonexistent", "images": {"python": "x"}})
        with s:
            r = s.run("print(6*7)", language="python", env={"A": "b"}, files={"f.txt": "x"}, stdin="in",
                      allowed_hosts=["https://example.com"], outputs=["*.txt"], timeout=4000)
        self.assertEqual(r.to_dict(), RESULT)
        q = self.unix.seen[n]
        self.assertEqual((q.method, q.path), ("POST", "/v1/run"))
        self.assertEqual(q.headers["authorization"], "Bearer " + TOKEN)
        self.assertTrue(q.headers["content-type"].startswith("application/json"))
        self.assertEqual(q.headers["accept"], "application/json")
        self.assertEqual(q.body, {"code": "print(6*7)", "language": "python", "env": {"A": "b"},
                                  "files": {"f.txt": "x"}, "stdin": "in", "allowedHosts": ["https://example.com"],
                                  "outputs": ["*.txt"], "timeout": 4000, "memoryMb": 128})

    def test_url_base_path_no_token_fills_provider(self) -> None:
        self.reply(lambda h, r: h.json(200, {"stdout": "", "stderr": "", "exitCode": 0, "timedOut": False}))
        for r in run_both({"url": self.tcp.url + "/moat/"}, "pass"):
            self.assertNotIsInstance(r, Exception, r)
            q = self.tcp.seen[-1]
            self.assertEqual(q.path, "/moat/v1/run")
            self.assertNotIn("authorization", q.headers)
            self.assertEqual(q.body, {"code": "pass"})
            self.assertEqual(r.provider, "native")
            self.assertIsInstance(r.duration_ms, int)

    def test_timed_out_is_a_result(self) -> None:
        timed_out = dict(RESULT, stdout="", exitCode=None, timedOut=True, killedBy="timeout")
        self.reply(lambda h, r: h.json(200, timed_out))
        for r in run_both({"socket_path": self.sock}, "while True: pass", timeout=100):
            self.assertEqual(r.to_dict(), timed_out)
            self.assertIs(r.timed_out, True)
            self.assertEqual(r.killed_by, "timeout")

    def test_keep_alive(self) -> None:
        self.reply(lambda h, r: h.json(200, RESULT))
        with create_sandbox(url=self.tcp.url, token=TOKEN) as s:
            before = self.tcp.connections
            for _ in range(3):
                s.run("print(6*7)")
            self.assertEqual(self.tcp.connections - before, 1)

    def test_error_statuses(self) -> None:
        cases = [
            (400, "SandboxConfigError", SandboxConfigError, {}),
            (401, "AuthenticationError", SandboxConfigError, {"WWW-Authenticate": "Bearer"}),
            (403, "SandboxPolicyError", SandboxPolicyError, {}),
            (404, "NotFound", SandboxConfigError, {}),
            (405, "MethodNotAllowed", SandboxConfigError, {"Allow": "POST"}),
            (413, "PayloadTooLarge", SandboxPolicyError, {}),
            (501, "NotImplemented", SandboxUnavailableError, {}),
            (503, "SandboxUnavailableError", SandboxUnavailableError, {}),
            (503, "ServerBusy", SandboxUnavailableError, {"Retry-After": "1"}),
            (500, "Internal", SandboxUnavailableError, {}),
            (418, "Teapot", SandboxError, {}),
        ]
        for status, etype, cls, headers in cases:
            self.reply(lambda h, r, s=status, t=etype, hd=headers: h.json(s, err_body(t, "refused: " + t), hd))
            for cfg in self.cfgs(token=TOKEN):
                for stream in (False, True):
                    opts = {"on_stdout": lambda t: None} if stream else {}
                    for e in run_both(cfg, **opts):
                        self.assertIsInstance(e, cls, (status, e))
                        if cls is SandboxError:
                            self.assertIs(type(e), SandboxError)
                        self.assertEqual(e.provider, "native")
                        self.assertEqual(e.status, status)
                        self.assertEqual(e.error_type, etype)
                        self.assertIn("refused: " + etype, str(e))
                        self.assertNotIn(TOKEN, str(e))
                        self.assertNotIn(TOKEN, repr(e.__dict__))
                        self.assertEqual(e.retry_after_ms, 1000 if "Retry-After" in headers else None)

    def test_type_wins_and_retry_after_date(self) -> None:
        import email.utils
        self.reply(lambda h, r: h.json(400, err_body("SandboxPolicyError", "bad env name")))
        for e in run_both({"socket_path": self.sock}):
            self.assertIsInstance(e, SandboxPolicyError)
        when = email.utils.formatdate(time.time() + 5, usegmt=True)
        self.reply(lambda h, r: h.json(503, err_body("ServerBusy", "queue full"), {"Retry-After": when}))
        for e in run_both({"socket_path": self.sock}):
            self.assertIsInstance(e, SandboxUnavailableError)
            self.assertTrue(2000 < e.retry_after_ms <= 5000, e.retry_after_ms)

    def test_401_without_a_token(self) -> None:
        self.reply(lambda h, r: h.json(401, err_body("AuthenticationError", "missing token")))
        for e in run_both({"socket_path": self.sock}):
            self.assertIsInstance(e, SandboxConfigError)
            self.assertIn("no token configured", str(e))

    def test_answers_that_are_not_results(self) -> None:
        def raw(status: int, body: bytes):
            def fn(h, r):
                h.send_response(status)
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
            return fn
        for fn, cls, status in ((raw(200, b"<html>hello</html>"), SandboxUnavailableError, None),
                                (raw(200, b"[1,2]"), SandboxUnavailableError, None),
                                (raw(502, b"Bad Gateway"), SandboxUnavailableError, 502),
                                (raw(403, b""), SandboxPolicyError, 403)):
            self.reply(fn)
            for e in run_both({"socket_path": self.sock}):
                self.assertIsInstance(e, cls)
                if status:
                    self.assertEqual(e.status, status)
                    self.assertIn("HTTP %d" % status, str(e))

    def test_cut_answer(self) -> None:
        def fn(h, r):
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "1000")
            h.end_headers()
            h.wfile.write(b'{"stdout": "4')
            h.wfile.flush()
            h.close_connection = True
        self.reply(fn)
        for e in run_both({"socket_path": self.sock}):
            self.assertIsInstance(e, SandboxUnavailableError, e)
            self.assertIn("before the whole answer", str(e))

    def test_client_deadline(self) -> None:
        recs = []
        self.reply(lambda h, r: (recs.append(r), h.wait_closed(r)))
        for cfg in self.cfgs(timeout=200, deadline_grace_ms=300):
            t0 = time.monotonic()
            for e in run_both(cfg):
                self.assertIsInstance(e, SandboxUnavailableError)
                self.assertIn("did not answer within 500 ms", str(e))
            self.assertLess(time.monotonic() - t0, 6)
        for r in recs:
            self.assertTrue(r.closed.wait(5), "the service saw the request aborted")

    def test_dispose_aborts_in_flight_runs(self) -> None:
        recs = []
        self.reply(lambda h, r: (recs.append(r), h.wait_closed(r)))
        s = create_sandbox(socket_path=self.sock, token=TOKEN)
        errors: List[BaseException] = []

        def one() -> None:
            try:
                s.run("print(1)")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        end = time.monotonic() + 5
        while len(recs) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        self.assertEqual(len(recs), 2)
        s.dispose()
        for t in threads:
            t.join(5)
        self.assertEqual(len(errors), 2)
        for e in errors:
            self.assertIsInstance(e, SandboxError)
            self.assertNotIsInstance(e, SandboxUnavailableError)
            self.assertIn("disposed", str(e))
        for r in recs:
            self.assertTrue(r.closed.wait(5))
        with self.assertRaisesRegex(SandboxError, "disposed"):
            s.run("print(1)")
        s.dispose()

    def test_async_dispose_aborts(self) -> None:
        recs = []
        self.reply(lambda h, r: (recs.append(r), h.wait_closed(r)))

        async def main() -> None:
            a = AsyncSandbox(url=self.tcp.url)
            tasks = [asyncio.ensure_future(a.run("print(%d)" % i)) for i in range(2)]
            end = time.monotonic() + 5
            while len(recs) < 2 and time.monotonic() < end:
                await asyncio.sleep(0.01)
            await a.dispose()
            for t in tasks:
                with self.assertRaisesRegex(SandboxError, "disposed"):
                    await t
        asyncio.run(main())
        for r in recs:
            self.assertTrue(r.closed.wait(5))

    def test_async_cancel_closes_the_connection(self) -> None:
        recs = []
        self.reply(lambda h, r: (recs.append(r), h.wait_closed(r)))

        async def main() -> None:
            async with AsyncSandbox(socket_path=self.sock) as a:
                t = asyncio.ensure_future(a.run("print(1)"))
                end = time.monotonic() + 5
                while not recs and time.monotonic() < end:
                    await asyncio.sleep(0.01)
                t.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await t
        asyncio.run(main())
        self.assertTrue(recs and recs[0].closed.wait(5))

    def test_nobody_listening(self) -> None:
        for cfg in ({"socket_path": os.path.join(self.tmp.path, "nothing.sock")},
                    {"url": "http://127.0.0.1:%d" % helpers.free_port()}):
            for e in run_both(dict(cfg, token=TOKEN)):
                self.assertIsInstance(e, SandboxUnavailableError)
                self.assertIn("cannot reach moat serve", str(e))
                self.assertNotIn(TOKEN, str(e))

    def test_bad_code_refused_before_any_request(self) -> None:
        n = len(self.unix.seen)
        for e in run_both({"socket_path": self.sock}, 42):  # type: ignore[arg-type]
            self.assertIsInstance(e, SandboxConfigError)
        for e in run_both({"socket_path": self.sock}, "x", language="cobol"):
            self.assertIsInstance(e, SandboxPolicyError)
        for e in run_both({"socket_path": self.sock}, "x", on_stdout="print"):
            self.assertIsInstance(e, SandboxConfigError)
        self.assertEqual(len(self.unix.seen), n)

    # -- the NDJSON stream ---------------------------------------------------------------

    def stream_reply(self, lines, gate: "threading.Event | None" = None, cut: bool = False):
        def fn(h, r):
            h.start_chunked(200, "application/x-ndjson")
            for i, line in enumerate(lines):
                if gate is not None and i == 1:
                    gate.wait(10)
                h.chunk((json.dumps(line) + "\n").encode())
            if cut:
                h.close_connection = True
                return
            h.end_chunked()
        return fn

    LINES = [
        {"type": "stdout", "data": "hel"},
        {"type": "stderr", "data": "oops\n"},
        {"type": "stdout", "data": "lo \u00e9\n"},
        {"type": "stdout", "data": base64.b64encode(b"\xff!").decode(), "encoding": "base64"},
        dict(RESULT, type="result", stdout="", stderr="", streamed=True),
    ]

    def test_stream(self) -> None:
        self.reply(self.stream_reply(self.LINES))
        for cfg in self.cfgs(token=TOKEN):
            out: List[str] = []
            err: List[str] = []
            for r in run_both(cfg, on_stdout=out.append, on_stderr=err.append):
                self.assertNotIsInstance(r, Exception, r)
                self.assertEqual(r.stdout, "hello \u00e9\n\ufffd!")
                self.assertEqual(r.stderr, "oops\n")
                self.assertEqual(r.exit_code, 0)
                d = r.to_dict()
                self.assertNotIn("type", d)
                self.assertNotIn("streamed", d)
                self.assertEqual(d, dict(RESULT, stdout="hello \u00e9\n\ufffd!", stderr="oops\n"))
            self.assertEqual(out, ["hel", "lo \u00e9\n", "\ufffd!"] * 2)
            self.assertEqual(err, ["oops\n"] * 2)
            self.assertEqual(self.unix.seen[-1].headers["accept"] if "socket_path" in cfg
                             else self.tcp.seen[-1].headers["accept"], "application/x-ndjson")

    def test_stream_arrives_as_written(self) -> None:
        # the service sends the second line only after the first one's callback ran
        for use_async in (False, True):
            gate = threading.Event()
            self.reply(self.stream_reply([{"type": "stdout", "data": "first\n"},
                                          {"type": "stdout", "data": "second\n"},
                                          dict(RESULT, type="result", stdout="", streamed=True)], gate))
            got: List[str] = []

            def cb(text: str) -> None:
                got.append(text)
                gate.set()
            if use_async:
                async def main():
                    async with AsyncSandbox(socket_path=self.sock, timeout=20000) as a:
                        return await a.run("x", on_stdout=cb)
                r = asyncio.run(main())
            else:
                with create_sandbox(socket_path=self.sock, timeout=20000) as s:
                    r = s.run("x", on_stdout=cb)
            self.assertEqual(got, ["first\n", "second\n"])
            self.assertEqual(r.stdout, "first\nsecond\n")

    def test_stream_callback_error_hangs_up(self) -> None:
        # a callback that raises ends the run: the error propagates, the service sees the
        # client go (and would kill the run)
        recs = []

        def fn(h, r):
            recs.append(r)
            h.start_chunked(200, "application/x-ndjson")
            h.chunk(b'{"type":"stdout","data":"a"}\n')
            h.wait_closed(r)

        def cb(text: str) -> None:
            raise KeyError("from the callback")
        self.reply(fn)
        for e in run_both({"socket_path": self.sock}, on_stdout=cb):
            self.assertIsInstance(e, KeyError)
        self.assertEqual(len(recs), 2)
        for r in recs:
            self.assertTrue(r.closed.wait(5))

    def test_stream_cut_before_result(self) -> None:
        self.reply(self.stream_reply(self.LINES[:2], cut=True))
        for e in run_both({"socket_path": self.sock}, on_stdout=lambda t: None):
            self.assertIsInstance(e, SandboxUnavailableError, e)

    def test_stream_asked_only_with_a_callback_and_old_service(self) -> None:
        # a service that ignores Accept answers the whole result: the callbacks get it whole
        self.reply(lambda h, r: h.json(200, dict(RESULT, stderr="e")))
        out: List[str] = []
        for r in run_both({"socket_path": self.sock}, on_stdout=out.append):
            self.assertEqual(r.stdout, "42\n")
            self.assertEqual(self.unix.seen[-1].headers["accept"], "application/x-ndjson")
        self.assertEqual(out, ["42\n", "42\n"])
        run_both({"socket_path": self.sock})
        self.assertEqual(self.unix.seen[-1].headers["accept"], "application/json")

    def test_stream_error_line_of_a_result(self) -> None:
        # a bad line → SandboxUnavailableError, and the client hangs up
        self.reply(self.stream_reply(["not an object"]))
        for e in run_both({"socket_path": self.sock}, on_stdout=lambda t: None):
            self.assertIsInstance(e, SandboxUnavailableError, e)
            self.assertIn("not a JSON object", str(e))


class ConfigChecks(unittest.TestCase):
    def bad(self, cfg: dict, pattern: str = "") -> None:
        with self.assertRaises(SandboxConfigError) as cm:
            create_sandbox(cfg)
        if pattern:
            self.assertRegex(str(cm.exception), pattern)
        self.assertNotIn(TOKEN, str(cm.exception))
        self.assertNotIn("hunter2", str(cm.exception))
        with self.assertRaises(SandboxConfigError):
            AsyncSandbox(cfg)

    def test_exclusive(self) -> None:
        self.bad({"url": "http://127.0.0.1:1", "socketPath": "/x.sock"}, "exclusive")

    def test_url(self) -> None:
        self.bad({"url": "ftp://127.0.0.1/"}, "http")
        self.bad({"url": "unix:/run/moat.sock"}, "http")
        self.bad({"url": "not a url"})
        self.bad({"url": 42})
        self.bad({"url": "http://user:hunter2@127.0.0.1:3000"}, "credentials")
        self.bad({"url": "http://127.0.0.1:3000/?x=1"})
        self.bad({"url": "http://127.0.0.1:99999/"})

    def test_socket_path(self) -> None:
        self.bad({"socketPath": ""})
        self.bad({"socket_path": 3})

    def test_token(self) -> None:
        self.bad({"token": TOKEN}, "url or socketPath")
        self.bad({"socketPath": "/x.sock", "token": TOKEN + "\r\nX-Evil: 1"})
        self.bad({"socketPath": "/x.sock", "token": ""})

    def test_native_only(self) -> None:
        self.bad({"provider": "docker", "url": "http://127.0.0.1:1"}, "native")

    def test_https_accepted(self) -> None:
        for e in run_both({"url": "https://127.0.0.1:%d" % helpers.free_port(), "deadline_grace_ms": 1000}):
            self.assertIsInstance(e, SandboxUnavailableError)


# ---- the real moat serve -------------------------------------------------------------------

SERVE_SKIP = helpers.serve_skip()


@unittest.skipIf(SERVE_SKIP, SERVE_SKIP or "")
class RealServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = helpers.TempDir()
        cls.sock = os.path.join(cls.tmp.path, "moat.sock")
        cls.token_file = os.path.join(cls.tmp.path, "token")
        with open(os.open(cls.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(TOKEN + "\n")
        cls.port = helpers.free_port()
        cls.unix = helpers.Serve(["--socket", cls.sock], {"socket_path": cls.sock})
        try:
            cls.tcp = helpers.Serve(["--listen", "127.0.0.1:%d" % cls.port, "--token-file", cls.token_file],
                                    {"port": cls.port})
        except BaseException:
            cls.unix.close()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.unix.close()
        cls.tcp.close()
        cls.tmp.cleanup()

    def setUp(self) -> None:
        self.s = create_sandbox(provider="native", socket_path=self.sock, timeout=20000)

    def tearDown(self) -> None:
        self.s.dispose()

    def test_languages(self) -> None:
        for language, code, want in (("python", "print(6*7)", "42\n"),
                                     ("javascript", "console.log(6*7)", "42\n"),
                                     ("typescript", "const n: number = 42; console.log(n)", "42\n"),
                                     ("bash", "echo $((6*7))", "42\n"), ("sh", "echo 42", "42\n")):
            r = self.s.run(code, language=language)
            self.assertEqual((r.stdout, r.stderr, r.exit_code, r.timed_out, r.provider),
                             (want, "", 0, False, "native"), language)
            self.assertIsInstance(r.duration_ms, int)

    def test_timeout(self) -> None:
        t0 = time.monotonic()
        r = self.s.run("while True: pass", timeout=500)
        self.assertIs(r.timed_out, True)
        self.assertIsNone(r.exit_code)
        self.assertLess(time.monotonic() - t0, 10)

    def test_env_files_stdin_outputs_and_concurrency(self) -> None:
        results: List[Any] = [None] * 3

        def one(i: int) -> None:
            results[i] = self.s.run(
                'import os, sys; print(os.environ["N"], open("d/x.txt").read(), sys.stdin.read())\n'
                'open("o.txt", "w").write("out%d" % int(os.environ["N"]))',
                env={"N": str(i)}, files={"d/x.txt": "f%d" % i}, stdin="s%d" % i, outputs=["o.txt"])
        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for i, r in enumerate(results):
            self.assertEqual(r.stdout, "%d f%d s%d\n" % (i, i, i))
            self.assertEqual(r.files["o.txt"]["content"], "out%d" % i)

    def test_errors(self) -> None:
        with self.assertRaises(SandboxPolicyError) as cm:
            self.s.run("print(1)", memory_mb=1 << 20)
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(SandboxConfigError) as cm2:
            self.s.run("print(1)", timeout="soon")  # type: ignore[arg-type]
        self.assertEqual(cm2.exception.status, 400)
        with self.assertRaises(SandboxPolicyError):
            self.s.run("print(1)", env={"BAD;NAME": "x"})

    def test_async(self) -> None:
        async def main() -> None:
            async with AsyncSandbox(socket_path=self.sock, timeout=20000) as a:
                rs = await asyncio.gather(*[a.run("print(%d)" % i) for i in range(3)])
                self.assertEqual([r.stdout for r in rs], ["0\n", "1\n", "2\n"])
            async with AsyncSandbox(url="http://127.0.0.1:%d" % self.port, token=TOKEN) as a:
                self.assertEqual((await a.run("print(6*7)")).stdout, "42\n")
        asyncio.run(main())

    def test_tcp_token(self) -> None:
        with create_sandbox(url="http://127.0.0.1:%d" % self.port, token=TOKEN) as s:
            r = s.run("print(6*7)")
            self.assertEqual((r.stdout, r.exit_code, r.provider), ("42\n", 0, "native"))
        for token in ("wrong-token-0123456789", None):
            for e in run_both({"url": "http://127.0.0.1:%d" % self.port, "token": token}, "print(6*7)"):
                self.assertIsInstance(e, SandboxConfigError)
                self.assertEqual(e.status, 401)
                self.assertEqual(e.error_type, "AuthenticationError")
                self.assertNotIn("wrong-token", str(e))
                self.assertNotIn(TOKEN, str(e))
        # the four 401s' access lines (two tokens, sync and async each) are in
        # the log before it is searched for the tokens
        log = self.tcp.wait_log(lambda l: l.count('"status":401') >= 4)
        self.assertGreaterEqual(log.count('"status":401'), 4, "the 401s' access lines: " + log[-2000:])
        self.assertNotIn(TOKEN, log)
        self.assertNotIn("wrong-token", log)

    def test_stream(self) -> None:
        # runs for real once moat serve streams (Accept: application/x-ndjson)
        got: List[str] = []
        t_first: List[float] = []

        def cb(text: str) -> None:
            got.append(text)
            if not t_first:
                t_first.append(time.monotonic())
        t0 = time.monotonic()
        r = self.s.run("import time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')", on_stdout=cb)
        t1 = time.monotonic()
        self.assertEqual(r.stdout, "one\ntwo\n")
        self.assertEqual("".join(got), "one\ntwo\n")
        if got == ["one\ntwo\n"]:
            self.skipTest("this moat serve does not stream yet (one answer at the end); the result was right")
        self.assertLess(t_first[0] - t0, t1 - t0 - 1.0, "the first chunk came before the run ended")
        err: List[str] = []

        async def main():
            async with AsyncSandbox(url="http://127.0.0.1:%d" % self.port, token=TOKEN, timeout=20000) as a:
                return await a.run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfeok\\n')\nprint('e', file=sys.stderr)",
                                   on_stdout=lambda t: None, on_stderr=err.append)
        r2 = asyncio.run(main())
        self.assertTrue(r2.stdout.endswith("ok\n"))
        self.assertEqual(("".join(err), r2.stderr), ("e\n", "e\n"))


if __name__ == "__main__":
    unittest.main()
