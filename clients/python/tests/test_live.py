"""Live sandboxes (docs/SANDBOXES.md): LiveSandbox.create/connect/list, sbx.commands and
sbx.files against a real `moat serve` on a unix socket (skipped when this binary has no
`serve`); the client's own refusals need no service."""
from __future__ import annotations

import datetime
import hashlib
import io
import os
import threading
import time
import unittest
from typing import Any, List

import helpers

from moat_sandbox import (
    CommandHandle, LiveSandbox, NotFoundError, SandboxConfigError, SandboxError, SandboxGoneError,
    SandboxNotFoundError,
)

SERVE_SKIP = helpers.serve_skip()


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Refused(unittest.TestCase):
    def test_refused_before_any_request(self) -> None:
        tmp = helpers.TempDir()
        try:
            sock = os.path.join(tmp.path, "nobody.sock")
            cases = [
                (lambda: LiveSandbox.create(memory_mb=64), "need a moat serve"),
                (lambda: LiveSandbox.create(socket_path=sock, metadata={"a": 1}), "metadata"),  # type: ignore[dict-item]
                (lambda: LiveSandbox.create(socket_path=sock, url="http://127.0.0.1:1"), "exclusive"),
                (lambda: LiveSandbox.connect("../x", socket_path=sock), "sandbox id"),
                (lambda: LiveSandbox.list(socket_path=sock, limit=0), "limit"),
            ]
            for fn, text in cases:
                with self.assertRaises(SandboxConfigError) as cm:
                    fn()
                self.assertIn(text, str(cm.exception))
            with self.assertRaises(TypeError):
                LiveSandbox.create(socket_path=sock, memory=64)  # type: ignore[call-arg]
        finally:
            tmp.cleanup()


@unittest.skipIf(SERVE_SKIP, SERVE_SKIP or "")
class RealServe(helpers.ServeCase):
    def setUp(self) -> None:
        self.made: List[LiveSandbox] = []

    def tearDown(self) -> None:
        for s in self.made:
            s.kill()

    def create(self, **kw: Any) -> LiveSandbox:
        s = LiveSandbox.create(socket_path=self.sock, **kw)
        self.made.append(s)
        return s

    def test_create_run_streaming_list_connect_kill(self) -> None:
        tag = os.urandom(4).hex()
        with LiveSandbox.create(socket_path=self.sock, memory_mb=128, env={"GREETING": "hello"},
                                metadata={"test": tag}, lifetime_ms=120000) as sbx:
            self.assertRegex(sbx.sandbox_id, r"^sbx_[a-z0-9-]+_[0-9a-f]{32}$")
            self.assertEqual((sbx.info["state"], sbx.info["memoryMb"], sbx.info["metadata"]),
                             ("running", 128, {"test": tag}))
            # streaming: the first chunk comes before the command ends
            t0 = time.monotonic()
            first: List[float] = []
            out: List[str] = []
            err: List[str] = []

            def on_out(t: str) -> None:
                if not first:
                    first.append(time.monotonic() - t0)
                out.append(t)
            r = sbx.commands.run('echo "$GREETING $WHO"; sleep 1.5; printf "\\377-bin\\n"; echo oops >&2; exit 3',
                                 env={"WHO": "world"}, on_stdout=on_out, on_stderr=err.append)
            end = time.monotonic() - t0
            self.assertEqual("".join(out), "hello world\n\ufffd-bin\n")
            self.assertEqual("".join(err), "oops\n")
            self.assertEqual((r.stdout, r.stderr, r.exit_code, r.signal, r.timed_out),
                             ("hello world\n\ufffd-bin\n", "oops\n", 3, None, False))
            self.assertIsInstance(r.pid, int)
            self.assertTrue(first and end - first[0] >= 1.0, "first chunk at %s s, the end at %s s" % (first, end))

            # argv, cwd, stdin
            a = sbx.commands.run(["/bin/sh", "-c", "pwd; cat"], cwd="/tmp", stdin=b"from stdin")
            self.assertEqual((a.stdout, a.exit_code), ("/tmp\nfrom stdin", 0))

            page, nxt = LiveSandbox.list(socket_path=self.sock, metadata={"test": tag})
            self.assertEqual(([s["id"] for s in page], nxt), ([sbx.sandbox_id], None))
            self.assertEqual(LiveSandbox.list(socket_path=self.sock, metadata={"test": tag + "-not"}), ([], None))
            # pages: two more with the tag, newest first, two a page
            more = [self.create(metadata={"test": tag}), self.create(metadata={"test": tag})]
            p1, nxt = LiveSandbox.list(socket_path=self.sock, metadata={"test": tag}, limit=2)
            self.assertEqual([s["id"] for s in p1], [more[1].sandbox_id, more[0].sandbox_id])
            self.assertIsInstance(nxt, str)
            p2, nxt2 = LiveSandbox.list(socket_path=self.sock, metadata={"test": tag}, limit=2, next=nxt)
            self.assertEqual(([s["id"] for s in p2], nxt2), ([sbx.sandbox_id], None))
            for m in more:
                m.kill()

            again = LiveSandbox.connect(sbx.sandbox_id, socket_path=self.sock)
            self.assertEqual(again.commands.run("echo $GREETING").stdout, "hello\n")
            info = again.set_timeout(30000)
            self.assertIs(again.info, info)
            left = _epoch(info["expiresAt"]) - time.time()
            self.assertTrue(20 < left <= 31, "expires in %s s" % left)
            self.assertTrue(again.is_running())
            sid = sbx.sandbox_id
        # the with block killed it; again is idempotent
        sbx.kill()
        with self.assertRaises(SandboxNotFoundError) as cm:
            LiveSandbox.connect(sid, socket_path=self.sock)
        self.assertEqual((cm.exception.status, cm.exception.sandbox_id), (404, sid))  # type: ignore[attr-defined]

    def test_background_handle_stdin_list_kill_timeout(self) -> None:
        sbx = self.create()
        seen: List[str] = []
        h = sbx.commands.run('while read l; do echo "got $l"; done; echo done', background=True, stdin=True,
                             on_stdout=seen.append)
        self.assertIsInstance(h, CommandHandle)
        self.assertIsInstance(h.pid, int)
        running = [p for p in sbx.commands.list() if p["pid"] == h.pid]
        self.assertEqual(running[0]["state"], "running")
        h.send_stdin("one\n")
        h.send_stdin(b"two\n")
        h.close_stdin()
        r = h.wait(30)
        self.assertEqual((r.stdout, r.exit_code), ("got one\ngot two\ndone\n", 0))
        self.assertEqual("".join(seen), r.stdout)

        sleeper = sbx.commands.run(["sleep", "600"], background=True)
        with self.assertRaises(TimeoutError):
            sleeper.wait(0.2)
        # info waits up to wait_ms for the end: still running after 200 ms
        t0 = time.monotonic()
        self.assertEqual(sbx.commands.info(sleeper.pid, wait_ms=200)["state"], "running")
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        sleeper.kill()
        k = sleeper.wait(30)
        self.assertEqual((k.exit_code, k.signal), (None, 9))
        listed = [p for p in sbx.commands.list() if p["pid"] == sleeper.pid]
        self.assertEqual(listed[0]["state"], "exited")
        ended = sbx.commands.info(sleeper.pid, wait_ms=5000)
        self.assertEqual((ended["state"], ended["signal"]), ("exited", 9))

        t = sbx.commands.run("sleep 30", timeout_ms=300)
        self.assertEqual((t.timed_out, t.signal), (True, 9))

        # a hung-up reader: the process goes on, and connect re-attaches to its output
        bg = sbx.commands.run('echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second',
                              background=True)
        bg.disconnect()
        with self.assertRaises(SandboxError):
            bg.wait(30)
        sbx.files.write("/tmp/go", "")
        again = sbx.commands.connect(bg.pid)
        r2 = again.wait(30)
        self.assertEqual(r2.exit_code, 0)
        self.assertTrue(r2.stdout.endswith("second\n"), r2.stdout)
        with self.assertRaises(NotFoundError) as cm:
            sbx.commands.kill(999999)
        self.assertEqual((cm.exception.status, cm.exception.error_type), (404, "ProcessNotFound"))

    def test_files_binary_round_trip_and_errors(self) -> None:
        sbx = self.create()
        blob = b"\x00\xff" + os.urandom(300 * 1024 + 5)
        w = sbx.files.write("/sandbox/data/deep/blob.bin", blob)
        self.assertEqual(w["size"], len(blob))
        back = sbx.files.read("/sandbox/data/deep/blob.bin", format="bytes")
        self.assertIsInstance(back, bytes)
        self.assertEqual(back, blob, "the bytes read back are the bytes written")
        s = sbx.commands.run("sha256sum /sandbox/data/deep/blob.bin")
        self.assertEqual(s.stdout.split(" ")[0], hashlib.sha256(blob).hexdigest())

        # a file object and an iterable in (chunked), a stream out, a range
        sbx.files.write("/tmp/streamed.bin", io.BytesIO(blob))
        sbx.files.write("/tmp/iter.bin", iter([blob[:1000], blob[1000:]]))
        with sbx.files.read("/tmp/streamed.bin", format="stream") as body:
            self.assertEqual(b"".join(body), blob)
        self.assertEqual(sbx.files.read("/tmp/iter.bin", format="bytes"), blob)
        self.assertEqual(sbx.files.read("/tmp/streamed.bin", format="bytes", range=(10, 19)), blob[10:20])

        sbx.files.write("/sandbox/hello.txt", "h\u00e9llo\n")
        self.assertEqual(sbx.files.read("/sandbox/hello.txt"), "h\u00e9llo\n")
        self.assertEqual(sbx.commands.run("cat /sandbox/hello.txt").stdout, "h\u00e9llo\n")
        st = sbx.files.stat("/sandbox/hello.txt")
        self.assertEqual((st["type"], st["size"]), ("file", len("h\u00e9llo\n".encode())))
        self.assertTrue(sbx.files.make_dir("/sandbox/a/b"))
        self.assertFalse(sbx.files.make_dir("/sandbox/a/b"))
        sbx.files.rename("/sandbox/hello.txt", "/sandbox/a/b/moved.txt")
        self.assertFalse(sbx.files.exists("/sandbox/hello.txt"))
        entries = sbx.files.list("/sandbox", depth=3)
        self.assertEqual(sorted("%s %s" % (e["type"], e["path"]) for e in entries), [
            "dir /sandbox/a", "dir /sandbox/a/b", "dir /sandbox/data", "dir /sandbox/data/deep",
            "file /sandbox/a/b/moved.txt", "file /sandbox/data/deep/blob.bin"])
        self.assertFalse(sbx.files.truncated)
        with self.assertRaises(SandboxError) as cm:
            sbx.files.remove("/sandbox/a")
        self.assertEqual(cm.exception.status, 409)
        sbx.files.remove("/sandbox/a", recursive=True)
        with self.assertRaises(NotFoundError) as cm2:
            sbx.files.read("/sandbox/a/b/moved.txt")
        self.assertEqual((cm2.exception.status, cm2.exception.error_type), (404, "FileNotFound"))
        # outside the writable tree: refused by the service
        for p in ("/etc/passwd", "/sandbox/../etc/passwd"):
            with self.assertRaises(SandboxConfigError) as cm3:
                sbx.files.read(p)
            self.assertEqual(cm3.exception.status, 400)

    def test_ended_sandbox_is_gone_with_its_reason(self) -> None:
        sbx = self.create()
        err = helpers.agent_killed(sbx, lambda: sbx.commands.run("true"))
        self.assertIsInstance(err, SandboxGoneError, repr(err))
        assert isinstance(err, SandboxGoneError)
        self.assertEqual((err.status, err.sandbox_id), (410, sbx.sandbox_id))  # type: ignore[attr-defined]
        self.assertIn("agent was killed", err.reason)
        with self.assertRaises(SandboxGoneError):
            sbx.files.read("/sandbox/x")
        with self.assertRaises(SandboxGoneError) as cm:
            LiveSandbox.connect(sbx.sandbox_id, socket_path=self.sock)
        self.assertIn("agent was killed", cm.exception.reason)
        self.assertFalse(sbx.is_running())

    def test_unknown_id_is_not_found(self) -> None:
        # (another caller's id is the service's 404 alike: serve_sandboxes' tests; one
        # client here is one caller)
        with self.assertRaises(SandboxNotFoundError) as cm:
            LiveSandbox.connect("sbx_" + "0" * 32, socket_path=self.sock)
        self.assertEqual(cm.exception.status, 404)
        # a deleted sandbox's handle: 404 on its routes too
        gone = self.create()
        again = LiveSandbox.connect(gone.sandbox_id, socket_path=self.sock)
        gone.kill()
        with self.assertRaises(SandboxNotFoundError):
            again.files.stat("/sandbox")

    def test_callback_on_another_thread_sees_chunks_in_order(self) -> None:
        sbx = self.create()
        got: List[str] = []
        lock = threading.Lock()

        def cb(t: str) -> None:
            with lock:
                got.append(t)
        r = sbx.commands.run("for i in 1 2 3 4 5; do echo $i; sleep 0.1; done", on_stdout=cb)
        self.assertEqual("".join(got), "1\n2\n3\n4\n5\n")
        self.assertEqual(r.stdout, "1\n2\n3\n4\n5\n")


if __name__ == "__main__":
    unittest.main()
