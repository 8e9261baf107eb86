"""The user's service (moat.socket, docs/SERVE.md "Socket activation"): a sandbox without
url/socketPath tries $MOAT_SOCKET (else $XDG_RUNTIME_DIR/moat.sock) first, and falls back
to `moat exec` with a warning when it does not answer, refuses the request, or is busy;
MOAT_SERVICE=off and service=False opt out. A real `moat serve --socket` made here."""
from __future__ import annotations

import asyncio
import os
import socket
import time
import unittest
from typing import Any, Dict, Iterator, List
from contextlib import contextmanager

import helpers

from moat_sandbox import AsyncSandbox, create_sandbox

SKIP = helpers.serve_skip()


@contextmanager
def env(**values: Any) -> Iterator[None]:
    """os.environ with values set (None: removed), restored after."""
    old: Dict[str, Any] = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def both(cfg: Dict[str, Any], code: str = "print(1)", **opts: Any) -> List[Any]:
    """The run through Sandbox and AsyncSandbox: [result, result]."""
    out: List[Any] = []
    with create_sandbox(cfg) as s:
        out.append(s.run(code, **opts))

    async def main() -> Any:
        async with AsyncSandbox(cfg) as a:
            return await a.run(code, **opts)
    out.append(asyncio.run(main()))
    return out


def service_warnings(r: Any) -> List[str]:
    return [w for w in (r.warnings or []) if "user service" in w]


@unittest.skipIf(SKIP, SKIP or "")
class UserService(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = helpers.TempDir()
        cls.sock = os.path.join(cls.tmp.path, "moat.sock")
        cls.serve = helpers.Serve(["--socket", cls.sock, "--pool", "1"], {"socket_path": cls.sock})
        # until the pool is warm (a request before it is ready runs cold in the service)
        with create_sandbox(socket_path=cls.sock) as s:
            end = time.monotonic() + 60
            while s.run("print(1)").get("pool") is not True and time.monotonic() < end:
                time.sleep(0.2)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.serve.close()
        cls.tmp.cleanup()

    def test_answers_from_the_service(self) -> None:
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE=None):
            for r in both({}):
                self.assertEqual(r.stdout, "1\n")
                self.assertIs(r.get("pool"), True, r.to_dict())
                self.assertEqual(service_warnings(r), [], r.to_dict())

    def test_xdg_runtime_dir_socket(self) -> None:
        with env(MOAT_SOCKET=None, XDG_RUNTIME_DIR=self.tmp.path, MOAT_SERVICE=None):
            for r in both({}):
                self.assertIs(r.get("pool"), True, r.to_dict())

    def test_over_the_service_limit_falls_back(self) -> None:
        # the service's max memoryMb is 1024 (docs/SERVE.md): 403, then moat exec runs it
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE=None):
            for r in both({}, memory_mb=1536):
                self.assertEqual(r.stdout, "1\n")
                self.assertIsNone(r.get("pool"), r.to_dict())
                w = service_warnings(r)
                self.assertEqual(len(w), 1, r.to_dict())
                self.assertIn("refused the request", w[0])
                self.assertIn("memoryMb", w[0])

    def test_error_of_the_run_is_not_retried(self) -> None:
        # the program's own failure is the service's answer, not a reason to run it twice
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE=None):
            for r in both({}, code="import sys; print('once'); sys.exit(3)"):
                self.assertEqual((r.exit_code, r.stdout), (3, "once\n"))
                self.assertIs(r.get("pool"), True, r.to_dict())

    def test_opt_out(self) -> None:
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE="off"):
            for r in both({}):
                self.assertEqual(r.stdout, "1\n")
                self.assertIsNone(r.get("pool"), r.to_dict())
                self.assertEqual(service_warnings(r), [], r.to_dict())
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE=None):
            for r in both({"service": False}):
                self.assertIsNone(r.get("pool"), r.to_dict())
                self.assertEqual(service_warnings(r), [], r.to_dict())

    @unittest.skipIf(os.geteuid() != 0, "only root gives a socket to another user")
    def test_another_users_socket(self) -> None:
        # a socket of uid 65534's: the code does not go to it
        path = os.path.join(self.tmp.path, "other.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.listen(4)
        os.chown(path, 65534, 65534)
        try:
            with env(MOAT_SOCKET=path, MOAT_SERVICE=None):
                for r in both({}):
                    self.assertEqual(r.stdout, "1\n")
                    self.assertIsNone(r.get("pool"), r.to_dict())
                    w = service_warnings(r)
                    self.assertEqual(len(w), 1, r.to_dict())
                    self.assertIn("belongs to uid 65534", w[0])
            s.setblocking(False)
            with self.assertRaises(BlockingIOError, msg="the client connected to it"):
                s.accept()
        finally:
            s.close()

    def test_config_only_exec_reads(self) -> None:
        # a config key a request cannot carry: moat exec, saying so
        with env(MOAT_SOCKET=self.sock, MOAT_SERVICE=None):
            for r in both({"allowedHosts": ["example.com"]}):
                self.assertIsNone(r.get("pool"), r.to_dict())
                w = service_warnings(r)
                self.assertEqual(len(w), 1, r.to_dict())
                self.assertIn("allowedHosts", w[0])


@unittest.skipIf(helpers.need_moat(), helpers.need_moat() or "")
class NoService(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = helpers.TempDir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_no_socket(self) -> None:
        path = os.path.join(self.tmp.path, "none.sock")
        with env(MOAT_SOCKET=path, MOAT_SERVICE=None):
            for r in both({}):
                self.assertEqual(r.stdout, "1\n")
                self.assertIsNone(r.get("pool"), r.to_dict())
                w = service_warnings(r)
                self.assertEqual(len(w), 1, r.to_dict())
                self.assertIn("did not answer", w[0])
                self.assertIn(path, w[0])

    def test_socket_refusing(self) -> None:
        # a socket file nobody listens on: connect is refused
        path = os.path.join(self.tmp.path, "dead.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        try:
            with env(MOAT_SOCKET=path, MOAT_SERVICE=None):
                for r in both({}):
                    self.assertEqual(r.stdout, "1\n")
                    self.assertIsNone(r.get("pool"), r.to_dict())
                    w = service_warnings(r)
                    self.assertEqual(len(w), 1, r.to_dict())
                    self.assertIn("did not answer", w[0])
        finally:
            s.close()

    def test_no_runtime_dir(self) -> None:
        with env(MOAT_SOCKET=None, XDG_RUNTIME_DIR=None, MOAT_SERVICE=None):
            for r in both({}):
                self.assertEqual(r.stdout, "1\n")
                self.assertTrue(any("XDG_RUNTIME_DIR" in w for w in r.warnings or []), r.to_dict())


if __name__ == "__main__":
    unittest.main()
