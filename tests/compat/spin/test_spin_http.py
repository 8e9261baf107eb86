"""Conformance of moat's `spin_sdk.http` (runtime/python/spin_sdk/http.py)
with Spin's Python SDK: `send` in the spellings of SDK 4 and SDK 3.

Upstream (spinframework/spin-python-sdk):
- src/spin_sdk/http/__init__.py at v4.0.0: `async def send(request: Request) -> Response`,
  `strip_forbidden_headers`, Request/Response dataclasses, `content-length` added when absent
- the same file before 4.0.0 (commit e9887a3^): sync `send(request)` and
  `async def send_async(request)`; poll_loop.py raises the error code as `Err`
- examples/outgoing-request/app.py: `resp = await send(Request("GET", url, {}, None))`

moat's egress is played by a local HTTP proxy: the sandbox has HTTP_PROXY and
HTTPS_PROXY pointing at moat's relay when allowedHosts is given, and the relay
refuses another host with 403 and an X-Moat-Refused header (src/net/proxy.c).
"""

import asyncio
import http.server as httpd
import json
import os
import socket
import sys
import threading
import unittest
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RUNTIME_PY = os.path.join(ROOT, "runtime", "python")
if RUNTIME_PY not in sys.path:
    sys.path.insert(0, RUNTIME_PY)

from componentize_py_types import Err  # noqa: E402
from spin_sdk import http  # noqa: E402
from spin_sdk.http import Request, Response, send  # noqa: E402

ALLOWED = "allowed.test"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
             "NO_PROXY", "no_proxy")


class Relay(httpd.BaseHTTPRequestHandler):
    """moat's egress relay, as a program sees it: absolute-form requests for
    allowed.test are answered here (as if by the host), anything else gets
    the relay's refusal."""

    protocol_version = "HTTP/1.1"
    seen = []

    def log_message(self, *args):
        pass

    def refuse(self):
        self.send_response(403, "Forbidden")
        self.send_header("X-Moat-Refused", "host not in allowedHosts")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_CONNECT(self):
        self.seen.append(("CONNECT", self.path, {}, b""))
        self.refuse()

    def answer(self):
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if url.hostname != ALLOWED:
            return self.refuse()
        if url.path == "/redirect":
            status, headers, out = 302, {"Location": f"http://{ALLOWED}/echo"}, b""
        elif url.path.startswith("/status/"):
            status, headers, out = int(url.path[8:]), {"Content-Type": "text/plain"}, b"nope"
        else:
            out = json.dumps({"method": self.command, "path": url.path, "query": url.query,
                              "body": body.decode("latin1")}).encode()
            status, headers = 200, {"Content-Type": "application/json", "X-Reply": "Yes"}
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = answer


class SendTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = httpd.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()
        cls.proxy = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        self.saved = {k: os.environ.pop(k) for k in PROXY_ENV if k in os.environ}
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            os.environ[k] = self.proxy
        Relay.seen = []

    def tearDown(self):
        for k in PROXY_ENV:
            os.environ.pop(k, None)
        os.environ.update(self.saved)

    def assertDenied(self, call):
        with self.assertRaises(Err) as cm:
            call()
        self.assertIsInstance(cm.exception.value, http.ErrorCode_HttpRequestDenied)
        self.assertIn("denied", str(cm.exception))
        return cm.exception


class TestSend(SendTestCase):
    def test_sdk3_sync_send(self):
        # spin-python-sdk before 4.0.0, src/spin_sdk/http/__init__.py: `def send(request) -> Response`
        headers = {"x-a": "1"}
        resp = send(Request("GET", f"http://{ALLOWED}/echo?x=1", headers, None))
        self.assertIsInstance(resp, Response)
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.headers["content-type"], "application/json")
        self.assertEqual(resp.headers["x-reply"], "Yes")     # names lower case, as Spin's fields
        self.assertEqual(json.loads(resp.body), {"method": "GET", "path": "/echo", "query": "x=1", "body": ""})
        method, target, seen, _ = Relay.seen[0]
        self.assertEqual((method, target), ("GET", f"http://{ALLOWED}/echo?x=1"))
        self.assertEqual(seen["x-a"], "1")
        self.assertEqual(seen["content-length"], "0")        # added when absent, as upstream
        self.assertEqual(headers, {"x-a": "1"}, "the caller's headers were changed")

    def test_sdk4_await_send(self):
        # spin-python-sdk v4.0.0, src/spin_sdk/http/__init__.py: `async def send(request)`;
        # examples/outgoing-request/app.py awaits it inside `async def handle_request`
        async def handler():
            return await send(Request("POST", f"http://{ALLOWED}/echo", {"content-type": "text/plain"},
                                      b"hello"))
        resp = asyncio.run(handler())
        self.assertIsInstance(resp, Response)
        self.assertEqual(json.loads(resp.body)["body"], "hello")
        self.assertEqual(Relay.seen[0][2]["content-length"], "5")

    def test_sdk3_send_async(self):
        # spin-python-sdk before 4.0.0: `async def send_async(request) -> Response`
        resp = asyncio.run(http.send_async(Request("PUT", f"http://{ALLOWED}/echo", {}, b"x")))
        self.assertEqual((resp.status, json.loads(resp.body)["method"]), (200, "PUT"))

    def test_every_status_is_a_response(self):
        # upstream returns whatever status the host answered, and wasi-http does not follow redirects
        resp = send(Request("GET", f"http://{ALLOWED}/status/404", {}, None))
        self.assertEqual((resp.status, resp.body), (404, b"nope"))
        resp = send(Request("DELETE", f"http://{ALLOWED}/status/503", {}, None))
        self.assertEqual(resp.status, 503)
        resp = send(Request("GET", f"http://{ALLOWED}/redirect", {}, None))
        self.assertEqual((resp.status, resp.headers["location"]), (302, f"http://{ALLOWED}/echo"))
        self.assertEqual(len(Relay.seen), 3, "a redirect was followed")
        resp = send(Request("HEAD", f"http://{ALLOWED}/echo", {}, None))
        self.assertEqual((resp.status, resp.body), (200, b""))

    def test_host_not_allowed(self):
        # poll_loop.py (SDK 3) raises the outgoing handler's error as `Err`;
        # a host outside allowed_outbound_hosts is error-code HTTP-request-denied
        self.assertDenied(lambda: send(Request("GET", "http://evil.test/", {}, None)))
        self.assertDenied(lambda: send(Request("GET", "https://evil.test/x", {}, None)))   # CONNECT refused
        self.assertEqual([m for m, *_ in Relay.seen], ["GET", "CONNECT"])

        async def handler():
            await send(Request("GET", "http://evil.test/", {}, None))
        self.assertDenied(lambda: asyncio.run(handler()))

    def test_no_egress_at_all(self):
        # without allowedHosts moat sets no proxy and the sandbox has only loopback
        for k in PROXY_ENV:
            os.environ.pop(k, None)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        url = f"http://127.0.0.1:{closed}/"
        real = http._has_egress
        http._has_egress = lambda: False
        try:
            self.assertDenied(lambda: send(Request("GET", url, {}, None)))
        finally:
            http._has_egress = real
        with self.assertRaises(Err) as cm:     # a host with a network: the failure itself
            send(Request("GET", url, {}, None))
        self.assertIsInstance(cm.exception.value, http.ErrorCode_ConnectionRefused)

    def test_uri_must_be_absolute_http(self):
        for uri in ("/relative", "ftp://allowed.test/", "allowed.test/x"):
            with self.assertRaises(Err) as cm:
                send(Request("GET", uri, {}, None))
            self.assertIsInstance(cm.exception.value, http.ErrorCode_HttpRequestUriInvalid)
        self.assertEqual(Relay.seen, [])

    def test_strip_forbidden_headers(self):
        # spin-python-sdk v4.0.0, src/spin_sdk/http/__init__.py: strip_forbidden_headers
        h = {"host": "x", "connection": "close", "transfer-encoding": "chunked", "x-keep": "1"}
        self.assertIs(http.strip_forbidden_headers(h), h)
        self.assertEqual(h, {"x-keep": "1"})


if __name__ == "__main__":
    unittest.main()
