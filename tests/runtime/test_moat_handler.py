"""Host-side tests of runtime/python (the Python handler bootstrap).

Each test writes a handler to a temp dir, runs the bootstrap the way the
service does (`from moat_handler import main; main()`, request JSON on stdin)
and parses the protocol stream strictly (docs/SERVE.md, "The handler protocol").

Run: /usr/bin/python3 -m unittest discover -s tests/runtime -p 'test_*.py'
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIME_PY = os.path.join(ROOT, "runtime", "python")
BOOTSTRAP = "from moat_handler import main; main()"
TIMEOUT = 30


def request(method="GET", path="/", headers=None, body=""):
    return {"method": method, "url": "http://localhost" + path,
            "headers": headers or [], "body": body}


class Frames:
    """A parsed protocol stream: head (dict or None), chunks, end or error."""

    def __init__(self, head, chunks, ended, error):
        self.head, self.chunks, self.ended, self.error = head, chunks, ended, error

    @property
    def body(self):
        return b"".join(self.chunks)


def parse(stream):
    """Parse the whole stream; any deviation from the protocol fails."""
    pos = 0
    head = None
    chunks = []

    def line():
        nonlocal pos
        nl = stream.find(b"\n", pos)
        if nl < 0:
            raise AssertionError(f"unterminated line at {pos}: {stream[pos:pos + 80]!r}")
        text = stream[pos:nl]
        pos = nl + 1
        return text

    first = True
    while True:
        text = line()
        if first and text.startswith(b"MOAT/1 "):
            head = json.loads(text[len(b"MOAT/1 "):])
            if set(head) != {"status", "headers"}:
                raise AssertionError(f"head keys: {sorted(head)}")
            if not isinstance(head["status"], int):
                raise AssertionError("head status not an int")
            for pair in head["headers"]:
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                    raise AssertionError(f"bad header pair {pair!r}")
            first = False
            continue
        first = False
        if text == b"end" or text.startswith(b"error "):
            if pos != len(stream):
                raise AssertionError(f"bytes after the terminator: {stream[pos:pos + 80]!r}")
            if text == b"end" and head is None:
                raise AssertionError("end without a head")
            error = text[len(b"error "):].decode("utf-8") if text != b"end" else None
            return Frames(head, chunks, text == b"end", error)
        if head is None:
            raise AssertionError(f"expected a head, end or error, got {text[:80]!r}")
        if not re.fullmatch(rb"[1-9][0-9]*", text):
            raise AssertionError(f"bad frame length {text[:80]!r}")
        n = int(text)
        if pos + n > len(stream):
            raise AssertionError("frame runs past the end of the stream")
        chunks.append(stream[pos:pos + n])
        pos += n


class HandlerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.handler = os.path.join(self.tmp.name, "handler.py")

    def env(self):
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": RUNTIME_PY, "PYTHONDONTWRITEBYTECODE": "1",
                "MOAT_HANDLER_PATH": self.handler}

    def write(self, code):
        with open(self.handler, "w") as f:
            f.write(textwrap.dedent(code))

    def run_handler(self, code, req=None):
        self.write(code)
        proc = subprocess.run([sys.executable, "-c", BOOTSTRAP], input=json.dumps(req or request()).encode(),
                              capture_output=True, env=self.env(), cwd=self.tmp.name, timeout=TIMEOUT)
        return proc, parse(proc.stdout)

    def assert_ok(self, proc, frames, status=200):
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertTrue(frames.ended)
        self.assertEqual(frames.head["status"], status)

    def assert_failed(self, proc, frames, error_prefix, head=False):
        self.assertEqual(proc.returncode, 1)
        self.assertFalse(frames.ended)
        self.assertIsNotNone(frames.error)
        self.assertTrue(frames.error.startswith(error_prefix), frames.error)
        self.assertEqual(frames.head is not None, head)
        self.assertIn(b"Traceback", proc.stderr)

    def test_response_bytes_body(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Request, Response
            def handle_request(request: Request) -> Response:
                return Response(201, {"content-type": "text/plain"}, b"hello")
        """)
        self.assert_ok(proc, f, 201)
        self.assertEqual(f.head["headers"], [["content-type", "text/plain"]])
        self.assertEqual(f.chunks, [b"hello"])

    def test_sync_handler_loads_no_event_loop(self):
        # a Response is awaitable (for `await send(...)`); a plain handler's is
        # still sent without asyncio
        proc, f = self.run_handler("""
            import sys
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(200, {}, b"x")
            import atexit
            atexit.register(lambda: print("asyncio" in sys.modules, file=sys.stderr))
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.chunks, [b"x"])
        self.assertTrue(proc.stderr.endswith(b"False\n"), proc.stderr)

    def test_response_str_body_is_utf8(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(200, {}, "h\\u00e9llo \\u2713")
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.body, "héllo ✓".encode())

    def test_response_without_body_or_headers(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(204)
        """)
        self.assert_ok(proc, f, 204)
        self.assertEqual(f.head["headers"], [])
        self.assertEqual(f.chunks, [])

    def test_request_and_headers(self):
        proc, f = self.run_handler("""
            import json
            from spin_sdk.http import Response
            def handle_request(r):
                echo = {"method": r.method, "uri": r.uri, "headers": r.headers, "body": r.body.decode()}
                return Response(200, {"content-type": "application/json", "x-one": "1", "x-two": "2"},
                                json.dumps(echo))
        """, request("POST", "/py/echo?a=1", [["X-Test", "yes"], ["Content-Type", "text/plain"]], "ping"))
        self.assert_ok(proc, f)
        self.assertEqual(f.head["headers"], [["content-type", "application/json"], ["x-one", "1"], ["x-two", "2"]])
        self.assertEqual(json.loads(f.body), {"method": "POST", "uri": "/py/echo?a=1", "body": "ping",
                                              "headers": {"x-test": "yes", "content-type": "text/plain"}})

    def test_async_handler(self):
        proc, f = self.run_handler("""
            import asyncio
            from spin_sdk.http import Response
            async def handle_request(request):
                await asyncio.sleep(0.01)
                return Response(200, {"x-async": "yes"}, b"async")
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.head["headers"], [["x-async", "yes"]])
        self.assertEqual(f.body, b"async")

    def test_tuple_generator_streams_each_chunk(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                def chunks():
                    yield "one"
                    yield b"two"
                    yield ""
                    yield "three"
                return 200, [("content-type", "text/plain"), ("x-list", "pairs")], chunks()
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.head["headers"], [["content-type", "text/plain"], ["x-list", "pairs"]])
        self.assertEqual(f.chunks, [b"one", b"two", b"three"])

    def test_async_generator_chunks(self):
        proc, f = self.run_handler("""
            import asyncio
            async def handle_request(request):
                async def chunks():
                    for part in ("a", "b"):
                        await asyncio.sleep(0)
                        yield part
                return 200, {}, chunks()
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.chunks, [b"a", b"b"])

    def test_chunk_is_sent_before_the_generator_finishes(self):
        signal = os.path.join(self.tmp.name, "go")
        self.write(f"""
import os, time
def handle_request(request):
    def chunks():
        yield "first"
        deadline = time.time() + 10
        while not os.path.exists({signal!r}) and time.time() < deadline:
            time.sleep(0.01)
        yield "second"
    return 200, {{}}, chunks()
""")
        proc = subprocess.Popen([sys.executable, "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env())
        try:
            proc.stdin.write(json.dumps(request()).encode())
            proc.stdin.close()
            start = time.time()
            got = proc.stdout.readline() + proc.stdout.readline() + proc.stdout.read(5)
            self.assertLess(time.time() - start, 8, "the first chunk waited for the generator")
            with open(signal, "w"):
                pass
            got += proc.stdout.read()
            proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        f = parse(got)
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(f.chunks, [b"first", b"second"])
        self.assertTrue(f.ended)

    def test_generator_raising_after_two_chunks(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                def chunks():
                    yield "a"
                    yield "b"
                    raise RuntimeError("generator broke")
                return 200, {}, chunks()
        """)
        self.assert_failed(proc, f, "RuntimeError: generator broke", head=True)
        self.assertEqual(f.chunks, [b"a", b"b"])

    def test_missing_handle_request(self):
        proc, f = self.run_handler("""
            def handle(request):
                return None
        """)
        self.assert_failed(proc, f, "AttributeError:")
        self.assertIn("handle_request", f.error)

    def test_handle_request_not_callable(self):
        proc, f = self.run_handler("handle_request = 42\n")
        self.assert_failed(proc, f, "TypeError: handle_request is not callable")

    def test_handler_raising_before_head(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                raise ValueError("no good")
        """)
        self.assert_failed(proc, f, "ValueError: no good")
        self.assertEqual(f.error, "ValueError: no good")
        self.assertIn(b"no good", proc.stderr)

    def test_import_error_in_handler(self):
        proc, f = self.run_handler("import does_not_exist_anywhere\n")
        self.assert_failed(proc, f, "ModuleNotFoundError: No module named 'does_not_exist_anywhere'")

    def test_syntax_error_in_handler(self):
        proc, f = self.run_handler("def handle_request(request):\n    return (\n")
        self.assert_failed(proc, f, "SyntaxError:")

    def test_prints_go_to_stderr(self):
        proc, f = self.run_handler("""
            import os, subprocess, sys
            from spin_sdk.http import Response
            print("top-level print")
            sys.stdout.write("top-level write\\n")
            def handle_request(request):
                print("handler print")
                os.system("echo child process")
                subprocess.run(["echo", "subprocess"])
                return Response(200, {}, "body")
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.body, b"body")
        for text in (b"top-level print", b"top-level write", b"handler print", b"child process", b"subprocess"):
            self.assertIn(text, proc.stderr)
            self.assertNotIn(text, proc.stdout)

    def test_bad_status_type(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response("200", {}, "x")
        """)
        self.assert_failed(proc, f, "TypeError: status must be an int, not str")

    def test_bool_status_is_refused(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                return True, {}, []
        """)
        self.assert_failed(proc, f, "TypeError: status must be an int")

    def test_bad_header_value_type(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(200, {"x-n": 1}, "x")
        """)
        self.assert_failed(proc, f, "TypeError: header names and values must be str")

    def test_bad_headers_type(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                return 200, "content-type: text/plain", []
        """)
        self.assert_failed(proc, f, "TypeError: headers must be")

    def test_bad_body_type(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(200, {}, 12)
        """)
        self.assert_failed(proc, f, "TypeError: a body chunk must be bytes or str, not int")

    def test_bad_chunk_type_after_head(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                return 200, {}, iter(["ok", 3])
        """)
        self.assert_failed(proc, f, "TypeError: a body chunk must be bytes or str, not int", head=True)
        self.assertEqual(f.chunks, [b"ok"])

    def test_wrong_return_type(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                return None
        """)
        self.assert_failed(proc, f, "TypeError: handle_request returned NoneType")

    def test_error_line_is_one_bounded_line(self):
        proc, f = self.run_handler("""
            def handle_request(request):
                raise RuntimeError("line one\\nline two\\r\\x00" + "\\u00e9" * 1000)
        """)
        self.assert_failed(proc, f, "RuntimeError: line one line two")
        self.assertLessEqual(len(f.error.encode()), 500)
        self.assertTrue(f.error.endswith("..."))

    def test_sys_exit_in_handler(self):
        proc, f = self.run_handler("""
            import sys
            def handle_request(request):
                sys.exit(3)
        """)
        self.assert_failed(proc, f, "SystemExit: 3")

    def test_large_body_is_split_into_frames(self):
        proc, f = self.run_handler("""
            from spin_sdk.http import Response
            def handle_request(request):
                return Response(200, {}, bytes(range(256)) * 1000)
        """)
        self.assert_ok(proc, f)
        self.assertEqual(f.body, bytes(range(256)) * 1000)
        self.assertGreater(len(f.chunks), 1)
        self.assertTrue(all(len(c) <= 64 * 1024 for c in f.chunks))

    def test_bad_request_json(self):
        self.write("def handle_request(request):\n    return 200, {}, []\n")
        proc = subprocess.run([sys.executable, "-c", BOOTSTRAP], input=b"not json", capture_output=True,
                              env=self.env(), timeout=TIMEOUT)
        f = parse(proc.stdout)
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(f.error.startswith("JSONDecodeError:"), f.error)


class ParserTest(unittest.TestCase):
    """The strict parser itself refuses malformed streams."""

    def test_refuses(self):
        for bad in (b"", b"MOAT/1 {\"status\":200,\"headers\":[]}\n", b"end\n",
                    b"MOAT/1 {\"status\":200,\"headers\":[]}\n0\n\nend\n",
                    b"MOAT/1 {\"status\":200,\"headers\":[]}\n5\nabend\n",
                    b"MOAT/1 {\"status\":200,\"headers\":[]}\nend\nextra",
                    b"3\nabcend\n", b"hello\n"):
            with self.assertRaises((AssertionError, ValueError), msg=bad):
                parse(bad)

    def test_accepts(self):
        f = parse(b"MOAT/1 {\"status\":200,\"headers\":[[\"a\",\"b\"]]}\n2\nhi3\n\n\n\nend\n")
        self.assertEqual(f.chunks, [b"hi", b"\n\n\n"])
        self.assertTrue(f.ended)
        self.assertEqual(parse(b"error X: y\n").error, "X: y")


if __name__ == "__main__":
    unittest.main()
