"""Host-side tests of runtime/python/spin_sdk/key_value.py (the key-value shim).

A fake broker (docs/KV.md, "The broker protocol") answers on one end of a
socketpair from a thread, with an in-memory dict and the quotas; the shim
talks to the other end, in this process or in a child that inherits the fd.

Run: /usr/bin/python3 -m unittest discover -s tests/runtime -p 'test_*.py'
"""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIME_PY = os.path.join(ROOT, "runtime", "python")
if RUNTIME_PY not in sys.path:
    sys.path.insert(0, RUNTIME_PY)

from spin_sdk import key_value as kv  # noqa: E402

TIMEOUT = 30
DISABLED = "kvEnabled is false for this request: the key-value store is not available"
EOF = "the key-value broker closed the connection"
MiB = 1024 * 1024


class FakeBroker:
    """The supervisor's side of the protocol: one request at a time, in order.

    `close_after`: hang up (EOF) once that many requests were answered.
    `recv_size`: read the socket in pieces this small (forces the shim's
    non-blocking writes to be short)."""

    def __init__(self, max_keys=1024, max_bytes=64 * MiB, max_value=1 * MiB,
                 close_after=None, recv_size=65536, answer=None):
        self.max_keys, self.max_bytes, self.max_value = max_keys, max_bytes, max_value
        self.close_after = close_after
        self.recv_size = recv_size
        self.answer = answer          # answer(op, key, value) -> raw frame or None
        self.data = {}
        self.requests = []            # (op, key, value length)
        self.ours, self.theirs = socket.socketpair()
        self.buf = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def fd(self):
        return self.theirs.fileno()

    def stop(self):
        try:
            self.ours.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.thread.join(TIMEOUT)
        self.ours.close()
        self.theirs.close()

    def _read(self, n):
        while len(self.buf) < n:
            part = self.ours.recv(self.recv_size)
            if not part:
                raise EOFError
            self.buf += part
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _drop(self, n):
        while n:
            if self.buf:
                k = min(n, len(self.buf))
                self.buf = self.buf[k:]
                n -= k
                continue
            part = self.ours.recv(min(n, self.recv_size))
            if not part:
                raise EOFError
            n -= len(part)

    @staticmethod
    def frame(status, payload=b""):
        return (1 + len(payload)).to_bytes(4, "little") + bytes((status,)) + payload

    def error(self, kind, message):
        return self.frame(2, f"{kind} {message}".encode())

    def _serve(self):
        try:
            while self.close_after is None or len(self.requests) < self.close_after:
                size = int.from_bytes(self._read(4), "little")
                if size < 5:
                    return                                    # malformed: EOF
                if size > 5 + 255 + self.max_value:
                    self._drop(size)
                    self.requests.append((None, b"", size))
                    self.ours.sendall(self.error("invalid", f"value too large ({size} bytes of request)"))
                    continue
                op = self._read(1)[0]
                klen = int.from_bytes(self._read(4), "little")
                if klen > size - 5:
                    return                                    # malformed: EOF
                key = self._read(klen)
                value = self._read(size - 5 - klen)
                self.requests.append((op, key, len(value)))
                reply = self.answer(op, key, value) if self.answer else None
                self.ours.sendall(reply if reply is not None else self._handle(op, key, value))
        except (EOFError, OSError):
            pass
        finally:
            try:
                self.ours.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _key_ok(self, key):
        if not 1 <= len(key) <= 255 or b"\0" in key:
            return False
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _handle(self, op, key, value):
        if op == 6:
            if key == b"default":
                return self.frame(0)
            return self.error("no_such_store", f"no store named {key.decode('utf-8', 'replace')!r}")
        if op == 5:
            out = b"".join(len(k).to_bytes(4, "little") + k for k in sorted(self.data))
            return self.frame(0, out)
        if op not in (1, 2, 3, 4):
            return self.error("invalid", f"unknown op {op}")
        if not self._key_ok(key):
            return self.error("invalid", "bad key")
        if op == 1:
            return self.frame(0, self.data[key]) if key in self.data else self.frame(1)
        if op == 3:
            self.data.pop(key, None)
            return self.frame(0)
        if op == 4:
            return self.frame(0, b"\x01" if key in self.data else b"\x00")
        # SET: quotas first; a refused write stores nothing
        if len(value) > self.max_value:
            return self.error("store_table_full", f"value of {len(value)} bytes is over max_value {self.max_value}")
        if key not in self.data and len(self.data) >= self.max_keys:
            return self.error("store_table_full", f"max_keys {self.max_keys} reached")
        total = sum(len(k) + len(v) for k, v in self.data.items() if k != key) + len(key) + len(value)
        if total > self.max_bytes:
            return self.error("store_table_full", f"max_bytes {self.max_bytes} would be exceeded")
        self.data[key] = value
        return self.frame(0)


class KvTestCase(unittest.TestCase):
    """Each test gets a broker and a fresh shim connection to it."""

    broker_args = {}

    def setUp(self):
        self.saved_env = os.environ.get("MOAT_KV_FD")
        self.broker = self.start_broker(**self.broker_args)

    def start_broker(self, **args):
        broker = FakeBroker(**args)
        self.addCleanup(broker.stop)
        os.environ["MOAT_KV_FD"] = str(broker.fd)
        kv._conn = None       # the shim connects once per process; a new broker per test
        return broker

    def tearDown(self):
        kv._conn = None
        if self.saved_env is None:
            os.environ.pop("MOAT_KV_FD", None)
        else:
            os.environ["MOAT_KV_FD"] = self.saved_env

    def assertKvError(self, kind, fn, *args, message=None):
        with self.assertRaises(kv.Error) as cm:
            fn(*args)
        self.assertEqual(cm.exception.kind, kind, cm.exception)
        if message is not None:
            self.assertEqual(cm.exception.message, message)
            self.assertEqual(str(cm.exception), message)
        return cm.exception


class TestStore(KvTestCase):
    broker_args = {"max_value": 4 * MiB}

    def test_every_method(self):
        store = kv.open_default()
        self.assertIsNone(store.get("visits"))
        self.assertFalse(store.exists("visits"))
        self.assertEqual(store.get_keys(), [])
        self.assertIsNone(store.set("visits", b"1"))
        self.assertEqual(store.get("visits"), b"1")
        self.assertIs(store.exists("visits"), True)
        store.set("visits", b"22")                      # overwrite
        self.assertEqual(store.get("visits"), b"22")
        store.set("b", b"x")
        store.set("a", b"y")
        self.assertEqual(store.get_keys(), ["a", "b", "visits"])
        self.assertIsNone(store.delete("visits"))
        self.assertIsNone(store.get("visits"))
        self.assertIs(store.exists("visits"), False)
        store.delete("visits")                          # absent is not an error
        self.assertEqual(store.get_keys(), ["a", "b"])
        self.assertEqual(self.broker.data, {b"a": b"y", b"b": b"x"})

    def test_wire_requests(self):
        store = kv.open("default")
        store.set("k", b"vv")
        store.get("k")
        store.exists("k")
        store.get_keys()
        store.delete("k")
        self.assertEqual(self.broker.requests, [
            (6, b"default", 0), (2, b"k", 2), (1, b"k", 0), (4, b"k", 0), (5, b"", 0), (3, b"k", 0)])

    def test_stores_share_the_connection(self):
        one, two = kv.open_default(), kv.open("default")
        one.set("k", b"1")
        self.assertEqual(two.get("k"), b"1")
        with kv.open_default() as three:
            self.assertEqual(three.get_keys(), ["k"])
        self.assertIn("default", repr(one))

    def test_binary_values(self):
        store = kv.open_default()
        every = bytes(range(256))
        store.set("all", every)
        self.assertEqual(store.get("all"), every)
        store.set("empty", b"")
        self.assertEqual(store.get("empty"), b"")     # empty, not None
        self.assertTrue(store.exists("empty"))
        store.set("ba", bytearray(b"\x00\xff"))
        self.assertEqual(store.get("ba"), b"\x00\xff")
        store.set("mv", memoryview(b"abcdef")[1:4])
        self.assertEqual(store.get("mv"), b"bcd")
        self.assertIsInstance(store.get("ba"), bytes)

    def test_value_types(self):
        store = kv.open_default()
        before = len(self.broker.requests)
        for bad in ("text", 1, None, ["a"]):
            with self.assertRaises(TypeError):
                store.set("k", bad)
        for bad in (b"k", 1, None):
            with self.assertRaises(TypeError):
                store.get(bad)
        self.assertEqual(len(self.broker.requests), before)

    def test_unicode_keys(self):
        store = kv.open_default()
        keys = ["ключ", "😀", "é" * 127 + "a", "a" * 255, "日本" * 42 + "abc", "z", "Z"]
        for k in keys:
            self.assertLessEqual(len(k.encode()), 255)
            store.set(k, k.encode())
        for k in keys:
            self.assertEqual(store.get(k), k.encode())
        # byte order of the UTF-8 encodings
        self.assertEqual(store.get_keys(), sorted(keys, key=lambda k: k.encode()))

    def test_invalid_keys(self):
        store = kv.open_default()
        before = len(self.broker.requests)
        for bad in ("", "a" * 256, "é" * 128, "a\0b", "\ud800", "x\udfffy"):
            for call in (store.get, store.delete, store.exists):
                self.assertKvError("invalid", call, bad)
            self.assertKvError("invalid", store.set, bad, b"v")
        self.assertEqual(len(self.broker.requests), before, "an invalid key reached the broker")
        store.set("still-works", b"1")

    def test_big_values(self):
        store = kv.open_default()
        big = os.urandom(2 * MiB)
        store.set("big", big)
        self.assertEqual(store.get("big"), big)
        self.assertEqual(self.broker.requests[-2], (2, b"big", 2 * MiB))


class TestBigNonBlocking(KvTestCase):
    """2 MiB through a non-blocking fd read in small pieces: the shim's
    writes and reads are short and hit EAGAIN."""

    broker_args = {"max_value": 4 * MiB, "recv_size": 4096}

    def test_short_reads_and_writes(self):
        os.set_blocking(self.broker.fd, False)
        store = kv.open_default()
        big = bytes(range(256)) * (8 * 1024) + b"tail"     # 2 MiB + 4
        store.set("big", big)
        store.set("big2", big[::-1])
        self.assertEqual(store.get("big"), big)
        self.assertEqual(store.get("big2"), big[::-1])
        self.assertEqual(store.get_keys(), ["big", "big2"])


class TestQuotas(KvTestCase):
    broker_args = {"max_keys": 2, "max_bytes": 100, "max_value": 40}

    def test_errors_from_the_broker(self):
        store = kv.open_default()
        store.set("a", b"1")
        store.set("b", b"2")
        e = self.assertKvError("store_table_full", store.set, "c", b"3")
        self.assertIn("max_keys", e.message)
        store.set("a", b"x" * 40)                       # replacing is not a new key
        self.assertKvError("store_table_full", store.set, "a", b"x" * 41)    # max_value
        self.assertEqual(store.get("a"), b"x" * 40)     # the refused write stored nothing
        store.set("b", b"y" * 40)
        self.assertKvError("store_table_full", store.set, "bbbbbbbbbbbbbbbbbbbbbb", b"")  # keys
        store.delete("b")
        self.assertKvError("store_table_full", store.set, "b" * 60, b"y" * 40)  # max_bytes
        self.assertEqual(store.get_keys(), ["a"])

    def test_request_too_large(self):
        store = kv.open_default()
        e = self.assertKvError("invalid", store.set, "k", b"v" * 400)
        self.assertTrue(e.message.startswith("value too large"), e.message)
        # the broker dropped the request's bytes: the stream is still in step
        store.set("k", b"ok")
        self.assertEqual(store.get("k"), b"ok")


class TestOpen(KvTestCase):
    def test_no_such_store(self):
        e = self.assertKvError("no_such_store", kv.open, "other")
        self.assertIn("other", e.message)
        self.assertEqual(self.broker.requests, [(6, b"other", 0)])   # the broker decided
        self.assertKvError("no_such_store", kv.open, "")
        self.assertKvError("no_such_store", kv.open, "x" * 300)
        with self.assertRaises(TypeError):
            kv.open(None)
        self.assertEqual(len(self.broker.requests), 1)
        kv.open("default").set("k", b"v")               # still usable

    def test_error_is_an_exception(self):
        e = kv.Error("other", "boom")
        self.assertIsInstance(e, Exception)
        self.assertEqual((e.kind, e.message, str(e)), ("other", "boom", "boom"))
        self.assertEqual(repr(e), "Error('other', 'boom')")
        import pickle
        back = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(back), back.kind, back.message), (kv.Error, "other", "boom"))


class TestNoFd(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.pop("MOAT_KV_FD", None)
        kv._conn = None

    def tearDown(self):
        kv._conn = None
        if self.saved is not None:
            os.environ["MOAT_KV_FD"] = self.saved

    def test_access_denied(self):
        for call, args in ((kv.open_default, ()), (kv.open, ("default",)), (kv.open, ("other",))):
            with self.assertRaises(kv.Error) as cm:
                call(*args)
            self.assertEqual(cm.exception.kind, "access_denied")
            self.assertEqual(str(cm.exception), DISABLED)

    def test_bad_fd_variable(self):
        os.environ["MOAT_KV_FD"] = "three"
        try:
            with self.assertRaises(kv.Error) as cm:
                kv.open_default()
            self.assertEqual(cm.exception.kind, "other")
        finally:
            del os.environ["MOAT_KV_FD"]

    def test_import_in_a_fresh_interpreter(self):
        code = textwrap.dedent("""
            from spin_sdk import key_value
            try:
                key_value.open_default()
            except key_value.Error as e:
                print(e.kind, e, sep="|")
        """)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": RUNTIME_PY,
               "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, f"access_denied|{DISABLED}\n")


class TestEof(KvTestCase):
    def test_broker_hangs_up(self):
        self.broker.stop()
        self.start_broker(close_after=2)
        store = kv.open_default()
        store.set("k", b"v")
        self.assertKvError("other", store.get, "k", message=EOF)
        # the connection stays dead: the same error, no attempt to read on
        self.assertKvError("other", store.get_keys, message=EOF)
        self.assertKvError("other", kv.open_default, message=EOF)

    def test_eof_in_the_middle_of_an_answer(self):
        self.broker.stop()

        def cut(op, key, value):
            if op == 1:
                return (100).to_bytes(4, "little") + b"\x00partial"
            return None

        broker = self.start_broker(answer=cut, close_after=2)
        store = kv.open_default()
        self.assertKvError("other", store.get, "k", message=EOF)
        self.assertEqual(len(broker.requests), 2)

    def test_eof_while_writing_a_big_value(self):
        self.broker.stop()
        self.start_broker(close_after=1, max_value=8 * MiB)
        store = kv.open_default()
        self.assertKvError("other", store.set, "big", b"x" * (4 * MiB), message=EOF)

    def test_malformed_answers(self):
        self.broker.stop()
        answers = {1: FakeBroker.frame(7), 4: FakeBroker.frame(0, b"\x05")}
        self.start_broker(answer=lambda op, key, value: answers.get(op))
        store = kv.open_default()
        e = self.assertKvError("other", store.get, "k")
        self.assertIn("malformed", e.message)
        self.assertKvError("other", store.get_keys)       # dead after a bad answer
        self.start_broker(answer=lambda op, key, value: answers.get(op))
        self.assertIn("malformed", self.assertKvError("other", kv.open_default().exists, "k").message)


class TestThreads(KvTestCase):
    def test_concurrent_calls_keep_frames_whole(self):
        store = kv.open_default()
        errors = []

        def work(n):
            try:
                key = f"thread-{n}"
                for i in range(60):
                    value = f"{n}:{i}:".encode() * (1 + (i * 37 + n) % 500)
                    store.set(key, value)
                    got = store.get(key)
                    if got != value:
                        errors.append((n, i, len(got or b"")))
                    if not store.exists(key):
                        errors.append((n, i, "exists"))
                    store.get_keys()
            except Exception as e:     # noqa: BLE001
                errors.append((n, repr(e)))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        self.assertEqual(errors, [])
        self.assertEqual(store.get_keys(), sorted(f"thread-{n}" for n in range(6)))


class TestInheritedFd(KvTestCase):
    """The way the sandbox runs it: a program that inherited the fd."""

    def test_child_process(self):
        code = textwrap.dedent("""
            from spin_sdk import key_value
            store = key_value.open_default()
            n = int((store.get("visits") or b"0").decode()) + 1
            store.set("visits", str(n).encode())
            store.set("bin", bytes(range(256)))
            try:
                key_value.open("other")
            except key_value.Error as e:
                print(e.kind)
            print(n, store.get_keys(), store.get("bin") == bytes(range(256)))
        """)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": RUNTIME_PY,
               "PYTHONDONTWRITEBYTECODE": "1", "MOAT_KV_FD": str(self.broker.fd)}
        for expect in (1, 2):
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT, pass_fds=(self.broker.fd,))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(proc.stdout, f"no_such_store\n{expect} ['bin', 'visits'] True\n")
        self.assertEqual(self.broker.data[b"visits"], b"2")


if __name__ == "__main__":
    unittest.main()
