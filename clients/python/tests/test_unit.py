"""The parts that need no moat: error classes, config checks and names, the result."""
from __future__ import annotations

import unittest

import helpers  # noqa: F401 (puts the package on sys.path)

import moat_sandbox
from moat_sandbox import (
    DEFAULT_SANDBOX_CONFIG, RunResult, SandboxConfigError, SandboxError, SandboxPolicyError,
    SandboxUnavailableError, create_sandbox,
)
from moat_sandbox._core import StreamAssembler, address_refused, camel, snake


class Errors(unittest.TestCase):
    def test_both_constructor_forms(self) -> None:
        e = SandboxPolicyError("native", "bad env")
        self.assertEqual((str(e), e.provider), ("Sandbox policy violation: bad env", "native"))
        e = SandboxPolicyError("bad env", provider="docker")
        self.assertEqual((str(e), e.provider), ("Sandbox policy violation: bad env", "docker"))
        e = SandboxUnavailableError("docker", "no daemon")
        self.assertEqual(str(e), 'Sandbox provider "docker" unavailable: no daemon')
        self.assertEqual(str(SandboxUnavailableError("x")), 'Sandbox provider "unknown" unavailable: x')
        e = SandboxConfigError("e2b", "bad key", ValueError("v"))
        self.assertEqual(str(e), "Sandbox configuration error: bad key")
        self.assertIsInstance(e.cause, ValueError)
        e = SandboxError("boom", "native")
        self.assertEqual((str(e), e.provider), ("boom", "native"))
        # a prefix is not doubled
        self.assertEqual(str(SandboxPolicyError("Sandbox policy violation: x")), "Sandbox policy violation: x")
        for cls in (SandboxPolicyError, SandboxConfigError, SandboxUnavailableError):
            self.assertTrue(issubclass(cls, SandboxError))
            self.assertTrue(issubclass(cls, Exception))


class Config(unittest.TestCase):
    def test_defaults(self) -> None:
        self.assertEqual(dict(DEFAULT_SANDBOX_CONFIG), {"provider": "native", "timeout": 30000, "memoryMb": 512,
                                                        "cpus": 1, "pidsLimit": 100, "network": False})
        with create_sandbox() as s:
            self.assertEqual(s.provider, "native")
            self.assertEqual(s._cfg, {"timeout": 30000, "network": False, "memoryMb": 512, "cpus": 1,
                                      "pidsLimit": 100})
        with create_sandbox(provider="e2b") as s:
            self.assertEqual(s._cfg, {"provider": "e2b", "timeout": 30000, "network": False})

    def test_names(self) -> None:
        self.assertEqual(camel("memory_mb"), "memoryMb")
        self.assertEqual(camel("e2b_api_key"), "e2bApiKey")
        self.assertEqual(camel("pidsLimit"), "pidsLimit")
        self.assertEqual(snake("memoryPeakBytes"), "memory_peak_bytes")
        with create_sandbox({"pids_limit": 7}, memory_mb=64) as s:
            self.assertEqual((s._cfg["pidsLimit"], s._cfg["memoryMb"]), (7, 64))
        with self.assertRaises(SandboxConfigError):
            create_sandbox({"memory_mb": 1, "memoryMb": 2})

    def test_refusals(self) -> None:
        with self.assertRaisesRegex(SandboxConfigError, "unknown provider"):
            create_sandbox(provider="host")
        with self.assertRaises(SandboxConfigError):
            create_sandbox("docker")  # type: ignore[arg-type]
        with self.assertRaisesRegex(SandboxConfigError, "deadlineGraceMs"):
            create_sandbox(deadline_grace_ms=-1)

    def test_daytona_url(self) -> None:
        for url, pattern in (("http://api.example.com", "https"), ("https://127.0.0.1/", "SSRF"),
                             ("https://[::ffff:10.0.0.1]/", "SSRF"), ("https://[fe80::1]/", "SSRF"),
                             ("https://100.64.0.1/", "SSRF"), ("https://localhost/", "loopback"),
                             ("https://a.localhost/", "loopback"), ("nope", "valid URL"), (3, "string")):
            with self.assertRaisesRegex(SandboxConfigError, pattern):
                create_sandbox(provider="daytona", daytona_api_url=url)
        with create_sandbox(provider="daytona", daytona_api_url="https://app.daytona.io/api"):
            pass
        self.assertIs(address_refused("8.8.8.8"), False)
        self.assertIsNone(address_refused("example.com"))


class Result(unittest.TestCase):
    def test_names(self) -> None:
        r = RunResult({"stdout": "a", "exitCode": 3, "timedOut": False, "memoryPeakBytes": 10,
                       "limits": {"memory": "cgroup-v1"}, "newField": 1})
        self.assertEqual((r.stdout, r.exit_code, r.memory_peak_bytes, r.new_field), ("a", 3, 10, 1))
        self.assertEqual(r.limits, {"memory": "cgroup-v1"})
        self.assertIsNone(r.oom_killed)  # a known field moat did not send
        self.assertEqual(r.stderr, "")
        self.assertEqual(r["exitCode"], 3)
        self.assertIn("memory_peak_bytes", dir(r))
        with self.assertRaises(AttributeError):
            r.no_such_thing  # noqa: B018
        with self.assertRaises(AttributeError):
            r.exit_code = 4  # type: ignore[misc]
        d = r.to_dict()
        d["stdout"] = "changed"
        self.assertEqual(r.stdout, "a")

    def test_all_exported(self) -> None:
        for name in moat_sandbox.__all__:
            self.assertTrue(hasattr(moat_sandbox, name), name)


class Stream(unittest.TestCase):
    def test_assembler(self) -> None:
        got = []
        a = StreamAssembler(got.append, None, "native", "moat")
        for line in (b'{"type":"stdout","data":"x"}', b"", b'{"type":"progress","n":1}',
                     b'{"type":"stderr","data":"e"}', b'{"type":"stdout","data":"/w==","encoding":"base64"}',
                     b'{"type":"result","stdout":"","stderr":"","streamed":true,"exitCode":0}'):
            list(a.feed(line))
        self.assertEqual(got, ["x", "\ufffd"])
        self.assertEqual(a.finish(), {"stdout": "x\ufffd", "stderr": "e", "exitCode": 0})
        with self.assertRaisesRegex(SandboxUnavailableError, "follows the result"):
            list(a.feed(b'{"type":"stdout","data":"late"}'))
        b = StreamAssembler(None, None, "native", "moat")
        with self.assertRaisesRegex(SandboxUnavailableError, "base64"):
            list(b.feed(b'{"type":"stdout","data":"!!","encoding":"base64"}'))
        with self.assertRaisesRegex(SandboxUnavailableError, "without a result"):
            b.finish()


class PythonSpelling(unittest.TestCase):
    """Issue 48: bytes where text is expected raise the client's own error, not json's bare
    TypeError; the hints name Python's spelling (binary=, MOAT_BIN), not the node client's."""

    def test_bytes_where_text_is_expected(self) -> None:
        sb = create_sandbox(binary="/nonexistent")
        for opts, where in (({"stdin": b"x"}, "stdin"), ({"files": {"a": b"x"}}, "files['a']"),
                            ({"env": {"A": bytearray(b"x")}}, "env['A']"),
                            ({"files": {b"a": "x"}}, "files's names"),
                            ({"outputs": [b"*.txt"]}, "outputs[0]"),
                            ({"allowed_hosts": [b"https://a.example"]}, "allowed_hosts[0]")):
            with self.assertRaises(SandboxConfigError, msg=repr(opts)) as cm:
                sb.run("print(1)", **opts)  # type: ignore[arg-type]
            self.assertIn(where, str(cm.exception))
            self.assertIn("must be text (str), not ", str(cm.exception))
        with self.assertRaisesRegex(SandboxConfigError, "code must be a string"):
            sb.run(b"print(1)")  # type: ignore[arg-type]
        sb.dispose()

    def test_missing_binary_hint_is_pythons(self) -> None:
        sb = create_sandbox(binary="/nonexistent/moat")
        with self.assertRaises(SandboxUnavailableError) as cm:
            sb.run("print(1)")
        msg = str(cm.exception)
        self.assertIn("binary=", msg)
        self.assertIn("MOAT_BIN", msg)
        self.assertNotIn("moatPath", msg)
        sb.dispose()


class AbsentFigures(unittest.TestCase):
    def test_session_figures_absent_are_none(self) -> None:
        from moat_sandbox._core import SessionInfo
        info = SessionInfo({"id": "ses_x", "state": "idle", "runs": 1,
                            "warnings": ["cpuTimeMs and memoryBytes are absent: ..."]})
        self.assertIsNone(info.cpu_time_ms)
        self.assertIsNone(info.memory_bytes)
        self.assertIn("absent", info.warnings[0])
        self.assertEqual(SessionInfo({"memoryBytes": 5, "cpuTimeMs": 2}).memory_bytes, 5)


if __name__ == "__main__":
    unittest.main()
