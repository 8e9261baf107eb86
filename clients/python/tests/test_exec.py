"""The client against the real `moat exec` ($MOAT_BIN, else build/moat), then against fake
moat scripts for the deadline, the process cleanup and the NDJSON stream."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import unittest

import helpers
from helpers import MOAT

from moat_sandbox import (
    AsyncSandbox, SandboxConfigError, SandboxError, SandboxPolicyError, SandboxUnavailableError,
    create_sandbox,
)

SKIP = helpers.need_moat()


@unittest.skipIf(SKIP, SKIP or "")
class RealExec(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.s = create_sandbox({"provider": "native", "moatPath": MOAT, "timeout": 20000})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.s.dispose()

    def test_python(self) -> None:
        r = self.s.run("print(6*7)", language="python")
        self.assertEqual(r.stdout, "42\n")
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.exit_code, 0)
        self.assertIs(r.timed_out, False)
        self.assertEqual(r.provider, "native")
        self.assertIsInstance(r.duration_ms, int)
        d = r.to_dict()
        self.assertEqual(d["exitCode"], 0)
        self.assertEqual(d["timedOut"], False)
        self.assertEqual(r["exitCode"], 0)

    def test_python_is_the_default_language(self) -> None:
        self.assertEqual(self.s.run("import sys; print(sys.version_info[0])").stdout, "3\n")

    def test_javascript(self) -> None:
        r = self.s.run('console.log([1, 2, 3].map((x) => x * 2).join(","))', language="javascript")
        self.assertEqual((r.stdout, r.exit_code), ("2,4,6\n", 0))

    def test_typescript(self) -> None:
        r = self.s.run("const n: number = 41; console.log(n + 1);", language="typescript")
        self.assertEqual((r.stdout, r.exit_code), ("42\n", 0))

    def test_bash_sh_exit_code_and_stderr(self) -> None:
        for language in ("bash", "sh"):
            r = self.s.run("echo out; echo err >&2; exit 7", language=language)
            self.assertEqual((r.stdout, r.stderr, r.exit_code), ("out\n", "err\n", 7), language)

    def test_aliases(self) -> None:
        for language in ("py", "python3"):
            self.assertEqual(self.s.run("print(1)", language=language).stdout, "1\n")
        self.assertEqual(self.s.run("console.log(2)", language="js").stdout, "2\n")

    def test_timeout(self) -> None:
        t0 = time.monotonic()
        r = self.s.run("while True: pass", timeout=500)
        self.assertIs(r.timed_out, True)
        self.assertIsNone(r.exit_code)
        self.assertLess(time.monotonic() - t0, 10)

    def test_timeout_from_the_config(self) -> None:
        with create_sandbox(moat_path=MOAT, timeout=400) as s:
            self.assertIs(s.run("import time; time.sleep(30)").timed_out, True)

    def test_env_only_what_the_caller_passes(self) -> None:
        os.environ["MOAT_CLIENT_HOST_SECRET"] = "host-secret-xyz"
        try:
            r = self.s.run('import os; print(os.environ.get("GREETING")); '
                           'print(os.environ.get("MOAT_CLIENT_HOST_SECRET"))', env={"GREETING": "hello there"})
        finally:
            del os.environ["MOAT_CLIENT_HOST_SECRET"]
        self.assertEqual(r.stdout, "hello there\nNone\n")

    def test_files_and_stdin(self) -> None:
        r = self.s.run('print(open("data/in.txt").read().upper()); import sys; print(sys.stdin.read())',
                       files={"data/in.txt": "abc"}, stdin="from stdin")
        self.assertEqual(r.stdout, "ABC\nfrom stdin\n")

    def test_outputs(self) -> None:
        r = self.s.run("open('out.txt','w').write('made inside')\nopen('b.bin','wb').write(b'\\x00\\x01')",
                       outputs=["*.txt", "*.bin"])
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.files["out.txt"], {"size": 11, "truncated": False, "encoding": "utf8",
                                              "content": "made inside"})
        self.assertEqual(r.files["b.bin"]["encoding"], "base64")
        self.assertEqual(base64.b64decode(r.files["b.bin"]["content"]), b"\x00\x01")

    def test_network_off_by_default(self) -> None:
        r = self.s.run("import socket\ntry:\n socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
                       " print('connected')\nexcept OSError as e:\n print('refused')")
        self.assertEqual(r.stdout, "refused\n")
        self.assertEqual(r.network["mode"], "none")

    def test_bad_env_name_policy_error(self) -> None:
        with self.assertRaises(SandboxPolicyError) as cm:
            self.s.run("print(1)", env={"BAD;NAME": "x"})
        self.assertIsInstance(cm.exception, SandboxError)
        self.assertEqual(cm.exception.provider, "native")
        self.assertTrue(str(cm.exception).startswith("Sandbox policy violation: "))

    def test_file_path_escaping_sandbox(self) -> None:
        with self.assertRaises(SandboxPolicyError):
            self.s.run("print(1)", files={"../x": "y"})

    def test_bad_request_config_error(self) -> None:
        with self.assertRaises(SandboxConfigError):
            self.s.run(42)  # type: ignore[arg-type]
        with self.assertRaises(SandboxConfigError):
            self.s.run("print(1)", timeout="soon")  # type: ignore[arg-type]

    def test_unsupported_language(self) -> None:
        with self.assertRaises(SandboxPolicyError) as cm:
            self.s.run("print(1)", language="cobol")
        self.assertRegex(str(cm.exception), r"^Sandbox policy violation: unsupported language: cobol")

    def test_e2b_without_a_key(self) -> None:
        saved = os.environ.pop("E2B_API_KEY", None)
        try:
            with create_sandbox(provider="e2b", moat_path=MOAT) as s:
                with self.assertRaises(SandboxUnavailableError) as cm:
                    s.run("print(1)")
                self.assertEqual(cm.exception.provider, "e2b")
                self.assertIn("E2B_API_KEY", str(cm.exception))
        finally:
            if saved is not None:
                os.environ["E2B_API_KEY"] = saved

    def test_api_keys_never_reach_the_config_file(self) -> None:
        with create_sandbox(provider="daytona", moat_path=MOAT, daytona_api_key="dk-secret-123",
                            daytona_api_url="https://localhost./api") as s:
            with self.assertRaises(SandboxConfigError) as cm:
                s.run("print(1)")
            self.assertIn("loopback", str(cm.exception))
            self.assertNotIn("dk-secret-123", str(cm.exception))
            with open(s._config_file) as f:
                self.assertNotIn("dk-secret-123", f.read())
            self.assertEqual(os.stat(s._config_file).st_mode & 0o777, 0o600)
            self.assertEqual(os.stat(os.path.dirname(s._config_file)).st_mode & 0o777, 0o700)

    def test_dispose_removes_the_config(self) -> None:
        s = create_sandbox(moat_path=MOAT)
        d = s._dir
        self.assertTrue(d and os.path.isdir(d))
        s.dispose()
        self.assertFalse(os.path.exists(d))
        with self.assertRaisesRegex(SandboxError, "disposed"):
            s.run("print(1)")
        s.dispose()  # twice is fine

    def test_async(self) -> None:
        async def main() -> None:
            async with AsyncSandbox(binary=MOAT, timeout=20000) as s:
                rs = await asyncio.gather(s.run("print(6*7)"), s.run("console.log(1+1)", language="js"),
                                          s.run("import sys; print(sys.stdin.read())", stdin="in"),
                                          s.run("while True: pass", timeout=500))
                self.assertEqual([r.stdout for r in rs[:3]], ["42\n", "2\n", "in\n"])
                self.assertIs(rs[3].timed_out, True)
                with self.assertRaises(SandboxPolicyError):
                    await s.run("print(1)", env={"BAD;NAME": "x"})
        asyncio.run(main())


class NoBinary(unittest.TestCase):
    def test_missing_moat_binary(self) -> None:
        with create_sandbox(binary="/nonexistent/moat") as s:
            with self.assertRaises(SandboxUnavailableError) as cm:
                s.run("print(1)")
            self.assertIn("not found", str(cm.exception))

        async def main() -> None:
            async with AsyncSandbox(binary="/nonexistent/moat") as a:
                with self.assertRaises(SandboxUnavailableError):
                    await a.run("print(1)")
        asyncio.run(main())

    def test_provider_none_refuses(self) -> None:
        with create_sandbox(provider="none", binary="/nonexistent/moat") as s:
            with self.assertRaises(SandboxPolicyError):
                s.run("print(1)")


# ---- a killed caller leaves no moat behind -------------------------------------------------

CALLER = r"""
import asyncio, os, sys
sys.path.insert(0, %(pkg)r)
from moat_sandbox import create_sandbox, AsyncSandbox
code = "import time\nprint('started', flush=True)\ntime.sleep(60)"
if %(use_async)r:
    async def main():
        s = AsyncSandbox(binary=%(moat)r, timeout=60000)
        await s.run(code)
    asyncio.run(main())
else:
    create_sandbox(binary=%(moat)r, timeout=60000).run(code)
"""


def _moat_children(caller: int, timeout: float = 30.0):
    """Waits until the caller's moat has started the run (a process under it that is not
    moat itself: the sandbox), then returns every process below the caller."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        tree = helpers.descendants(caller)
        if len(tree) >= 3:  # moat, and the sandbox's processes below it
            return tree
        time.sleep(0.05)
    return helpers.descendants(caller)


@unittest.skipIf(SKIP, SKIP or "")
class KilledCaller(unittest.TestCase):
    def _check(self, use_async: bool) -> None:
        caller = subprocess.Popen([sys.executable, "-c", CALLER % {
            "pkg": helpers.PKG, "moat": MOAT, "use_async": use_async}])
        try:
            tree = _moat_children(caller.pid)
            self.assertGreaterEqual(len(tree), 3, "the run did not start: %s" % tree)
            self.assertIn("moat", [helpers.comm(p) for p in tree])
            time.sleep(0.3)
            tree = helpers.descendants(caller.pid)
            caller.send_signal(signal.SIGKILL)
            caller.wait()
            left = helpers.wait_gone(tree, 15)
            self.assertEqual(left, [], "left behind: %s" % [(p, helpers.comm(p)) for p in left])
        finally:
            if caller.poll() is None:
                caller.kill()
                caller.wait()

    def test_sync_caller_killed(self) -> None:
        self._check(False)

    def test_async_caller_killed(self) -> None:
        self._check(True)

    def test_async_run_cancelled(self) -> None:
        async def main() -> None:
            async with AsyncSandbox(binary=MOAT, timeout=60000) as s:
                task = asyncio.ensure_future(s.run("import time\ntime.sleep(60)"))
                end = time.monotonic() + 30
                tree = []
                while time.monotonic() < end:
                    await asyncio.sleep(0.05)
                    tree = helpers.descendants(os.getpid())
                    if len(tree) >= 3:
                        break
                self.assertGreaterEqual(len(tree), 3)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0)
                left = helpers.wait_gone(tree, 15)
                self.assertEqual(left, [], [(p, helpers.comm(p)) for p in left])
        asyncio.run(main())


async def _once(moat: str, code: str, timeout=None, deadline_grace_ms=None, **opts):
    async with AsyncSandbox(binary=moat, timeout=timeout, deadline_grace_ms=deadline_grace_ms) as s:
        return await s.run(code, **opts)


# ---- fake moats: the deadline, the process group, the stream -------------------------------

class FakeMoat(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = helpers.TempDir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def fake(self, body: str) -> str:
        return helpers.fake_moat(self.tmp.path, body)

    def test_deadline_kills_the_process_group(self) -> None:
        pidfile = os.path.join(self.tmp.path, "pids")
        moat = self.fake("import subprocess\n"
                         "p = subprocess.Popen(['sleep', '30'])\n"
                         "open(%r, 'w').write('%%d %%d' %% (os.getpid(), p.pid))\n"
                         "time.sleep(30)\n" % pidfile)
        for use_async in (False, True):
            s = create_sandbox(binary=moat, timeout=1500, deadline_grace_ms=500)
            t0 = time.monotonic()
            try:
                with self.assertRaises(SandboxUnavailableError) as cm:
                    if use_async:
                        asyncio.run(_once(moat, "x", timeout=1500, deadline_grace_ms=500))
                    else:
                        s.run("x")
                self.assertRegex(str(cm.exception), "did not answer within 2000 ms")
                self.assertLess(time.monotonic() - t0, 8)
                with open(pidfile) as f:
                    pids = [int(x) for x in f.read().split()]
                self.assertEqual(helpers.wait_gone(pids, 10), [], "moat and its child are gone")
            finally:
                s.dispose()

    def test_exit_without_json(self) -> None:
        moat = self.fake("sys.stderr.write('boom\\n'); sys.exit(3)\n")
        with create_sandbox(binary=moat) as s:
            with self.assertRaisesRegex(SandboxUnavailableError, r"moat exited \(3\) without a JSON answer: boom"):
                s.run("x")

    def test_error_answer_classes(self) -> None:
        for etype, cls in (("SandboxPolicyError", SandboxPolicyError), ("SandboxConfigError", SandboxConfigError),
                           ("SandboxUnavailableError", SandboxUnavailableError), ("Weird", SandboxError)):
            moat = self.fake("emit({'error': {'type': %r, 'message': 'no', 'provider': 'native'}}); sys.exit(2)\n"
                             % etype)
            with create_sandbox(binary=moat) as s:
                with self.assertRaises(cls) as cm:
                    s.run("x")
                self.assertIs(type(cm.exception), cls)

    def test_request_and_argv(self) -> None:
        out = os.path.join(self.tmp.path, "req.json")
        moat = self.fake("json.dump(request, open(%r, 'w'))\n"
                         "emit({'stdout': '', 'stderr': '', 'exitCode': 0, 'timedOut': False})\n" % out)
        with create_sandbox(binary=moat, memory_mb=128, e2b_api_key="k-secret") as s:
            r = s.run("print(1)", language="python", env={"A": "b"}, files={"f": "x"}, stdin="in",
                      allowed_hosts=["https://example.com"], outputs=["*.txt"], timeout=4000,
                      network=True, max_output_bytes=1000)
            argv = helpers.fake_argv(self.tmp.path)
            self.assertEqual(argv[:3], ["exec", "--provider", "native"])
            self.assertNotIn("--stream", argv)
            with open(argv[argv.index("--config") + 1]) as f:
                cfg = json.load(f)
            self.assertEqual(cfg, {"timeout": 30000, "network": False, "memoryMb": 128, "cpus": 1,
                                   "pidsLimit": 100})
        with open(out) as f:
            req = json.load(f)
        self.assertEqual(req, {
            "code": "print(1)", "language": "python", "env": {"A": "b"}, "files": {"f": "x"}, "stdin": "in",
            "allowedHosts": ["https://example.com"], "outputs": ["*.txt"], "timeout": 4000,
            "network": True, "maxOutputBytes": 1000})
        self.assertEqual(r.provider, "native")
        self.assertIsInstance(r.duration_ms, int)

    STREAM = ("assert '--stream' in argv\n"
              "emit({'type': 'stdout', 'data': 'hel'})\n"
              "emit({'type': 'stderr', 'data': 'oops\\n'})\n"
              "emit({'type': 'stdout', 'data': 'lo \\u00e9\\n'})\n"
              "emit({'type': 'stdout', 'data': base64.b64encode(b'\\xff!').decode(), 'encoding': 'base64'})\n"
              "emit({'type': 'result', 'stdout': '', 'stderr': '', 'streamed': True, 'exitCode': 0,"
              " 'timedOut': False, 'durationMs': 5, 'provider': 'native', 'stdoutTruncated': False})\n")

    def test_stream_callbacks(self) -> None:
        moat = self.fake(self.STREAM)
        out, err = [], []
        with create_sandbox(binary=moat) as s:
            r = s.run("x", on_stdout=out.append, on_stderr=err.append)
        self.assertEqual(out, ["hel", "lo \u00e9\n", "\ufffd!"])
        self.assertEqual(err, ["oops\n"])
        self.assertEqual(r.stdout, "hello \u00e9\n\ufffd!")
        self.assertEqual(r.stderr, "oops\n")
        self.assertEqual(r.exit_code, 0)
        self.assertNotIn("type", r.to_dict())
        self.assertNotIn("streamed", r.to_dict())
        self.assertIn("--stream", helpers.fake_argv(self.tmp.path))

    def test_stream_callbacks_async(self) -> None:
        moat = self.fake(self.STREAM)
        out, err = [], []

        async def on_err(text: str) -> None:
            await asyncio.sleep(0)
            err.append(text)

        async def main():
            async with AsyncSandbox(binary=moat) as s:
                return await s.run("x", on_stdout=out.append, on_stderr=on_err)
        r = asyncio.run(main())
        self.assertEqual(out, ["hel", "lo \u00e9\n", "\ufffd!"])
        self.assertEqual(err, ["oops\n"])
        self.assertEqual((r.stdout, r.stderr), ("hello \u00e9\n\ufffd!", "oops\n"))

    def test_stream_arrives_as_written(self) -> None:
        # the second chunk is written only once the first one's callback has run
        flag = os.path.join(self.tmp.path, "seen")
        moat = self.fake("emit({'type': 'stdout', 'data': 'first\\n'})\n"
                         "end = time.time() + 10\n"
                         "while not os.path.exists(%r) and time.time() < end: time.sleep(0.02)\n"
                         "emit({'type': 'stdout', 'data': 'second\\n' if os.path.exists(%r) else 'late\\n'})\n"
                         "emit({'type': 'result', 'stdout': '', 'stderr': '', 'streamed': True, 'exitCode': 0,"
                         " 'timedOut': False})\n" % (flag, flag))
        got = []

        def cb(text: str) -> None:
            got.append(text)
            open(flag, "w").close()
        with create_sandbox(binary=moat) as s:
            r = s.run("x", on_stdout=cb)
        self.assertEqual(got, ["first\n", "second\n"])
        self.assertEqual(r.stdout, "first\nsecond\n")

    def test_stream_error_answer(self) -> None:
        moat = self.fake("emit({'error': {'type': 'SandboxPolicyError', 'message': 'bad env', 'provider': 'native'}})\n"
                         "sys.exit(2)\n")
        with create_sandbox(binary=moat) as s:
            with self.assertRaisesRegex(SandboxPolicyError, "bad env"):
                s.run("x", on_stdout=print)

    def test_stream_without_result(self) -> None:
        moat = self.fake("emit({'type': 'stdout', 'data': 'a'})\nsys.exit(1)\n")
        with create_sandbox(binary=moat) as s:
            with self.assertRaises(SandboxUnavailableError):
                s.run("x", on_stdout=lambda t: None)

    def test_stream_bad_line(self) -> None:
        moat = self.fake("sys.stdout.write('not json\\n')\n")
        with create_sandbox(binary=moat) as s:
            with self.assertRaisesRegex(SandboxUnavailableError, "not a JSON object"):
                s.run("x", on_stdout=lambda t: None)

    def test_callback_error_stops_moat(self) -> None:
        pidfile = os.path.join(self.tmp.path, "pid")
        moat = self.fake("open(%r, 'w').write(str(os.getpid()))\n"
                         "emit({'type': 'stdout', 'data': 'a'})\ntime.sleep(30)\n" % pidfile)

        def cb(text: str) -> None:
            raise KeyError("from the callback")
        with create_sandbox(binary=moat) as s:
            with self.assertRaisesRegex(KeyError, "from the callback"):
                s.run("x", on_stdout=cb)
        with open(pidfile) as f:
            self.assertEqual(helpers.wait_gone([int(f.read())], 10), [])

    def test_old_moat_without_stream(self) -> None:
        moat = self.fake("if '--stream' in argv:\n"
                         "    sys.stderr.write(\"exec: unrecognized option '--stream'\\n\"); sys.exit(2)\n"
                         "emit({'stdout': 'all\\n', 'stderr': 'e', 'exitCode': 0, 'timedOut': False})\n")
        for use_async in (False, True):
            out, err = [], []
            if use_async:
                r = asyncio.run(_once(moat, "x", on_stdout=out.append, on_stderr=err.append))
            else:
                with create_sandbox(binary=moat) as s:
                    r = s.run("x", on_stdout=out.append, on_stderr=err.append)
            self.assertEqual((out, err), (["all\n"], ["e"]))
            self.assertEqual(r.stdout, "all\n")


# ---- the real stream: runs once moat exec has --stream --------------------------------------

@unittest.skipIf(SKIP, SKIP or "")
class RealExecStream(unittest.TestCase):
    def setUp(self) -> None:
        why = helpers.exec_stream_skip()
        if why:
            self.skipTest(why)

    def test_chunks_as_written(self) -> None:
        got = []
        t_first = []

        def cb(text: str) -> None:
            got.append(text)
            if not t_first:
                t_first.append(time.monotonic())
        t0 = time.monotonic()
        with create_sandbox(binary=MOAT, timeout=20000) as s:
            r = s.run("import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')\n"
                      "sys.stderr.write('err\\n')", on_stdout=cb)
        t1 = time.monotonic()
        self.assertEqual("".join(got), "one\ntwo\n")
        self.assertEqual(r.stdout, "one\ntwo\n")
        self.assertEqual(r.stderr, "err\n")
        self.assertEqual(r.exit_code, 0)
        self.assertNotIn("streamed", r.to_dict())
        self.assertLess(t_first[0] - t0, t1 - t0 - 1.0, "the first chunk came before the run ended")

    def test_non_utf8_and_async(self) -> None:
        out, err = [], []

        async def main():
            async with AsyncSandbox(binary=MOAT, timeout=20000) as s:
                return await s.run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfeok\\n')\n"
                                   "sys.stderr.write('e\\n')", on_stdout=out.append, on_stderr=err.append)
        r = asyncio.run(main())
        self.assertTrue("".join(out).endswith("ok\n"))
        self.assertEqual("".join(err), "e\n")
        self.assertEqual(r.stderr, "e\n")

    def test_policy_error_before_the_run(self) -> None:
        with create_sandbox(binary=MOAT) as s:
            with self.assertRaises(SandboxPolicyError):
                s.run("print(1)", env={"BAD;NAME": "x"}, on_stdout=print)


if __name__ == "__main__":
    unittest.main()
