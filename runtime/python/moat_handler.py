"""Bootstrap for Spin-style Python handlers run by `moat serve`.

The service runs `from moat_handler import main; main()` with the user's code
at /sandbox/handler.py and the request as JSON on stdin. The response goes out
on the original stdout, framed as docs/SERVE.md ("The handler protocol")
describes; everything the program prints goes to stderr.
"""

import json
import os
import sys

from spin_sdk.http import Request, Response

# The override exists for the host-side tests only; the service never sets it.
HANDLER_PATH = os.environ.get("MOAT_HANDLER_PATH", "/sandbox/handler.py")

MAX_FRAME = 64 * 1024   # bigger chunks are sent as several frames
MAX_ERROR = 500         # bytes of an error line's text


class _Stream:
    """The protocol stream (the saved original stdout)."""

    def __init__(self, fd):
        self.fd = fd
        self.broken = False   # a write failed: nothing more can be sent
        self.done = False     # `end` or `error` was sent

    def _write(self, data):
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            self.broken = True
            raise

    def head(self, status, headers):
        head = json.dumps({"status": status, "headers": headers}, separators=(",", ":"))
        self._write(b"MOAT/1 " + head.encode("ascii") + b"\n")

    def chunk(self, data):
        data = _chunk_bytes(data)
        for i in range(0, len(data), MAX_FRAME):
            part = data[i:i + MAX_FRAME]
            self._write(b"%d\n" % len(part) + part)

    def end(self):
        self._write(b"end\n")
        self._close()

    def error(self, exc):
        if self.broken or self.done:
            return
        try:
            self._write(b"error " + _error_text(exc) + b"\n")
        except OSError:
            pass
        self._close()

    def _close(self):
        self.done = True
        try:
            os.close(self.fd)
        except OSError:
            pass


def _error_text(exc):
    """`Type: message` on one line, at most MAX_ERROR bytes of UTF-8."""
    try:
        msg = str(exc)
    except Exception:
        msg = ""
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    text = "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    data = " ".join(text.split()).encode("utf-8", "backslashreplace")
    if len(data) > MAX_ERROR:
        data = data[:MAX_ERROR - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."
    return data


def _chunk_bytes(data):
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"a body chunk must be bytes or str, not {type(data).__name__}")


def _read_request(raw):
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the request is not a JSON object")
    # "http://localhost/path?query#frag" → "/path?query" (urllib.parse costs
    # milliseconds of import on every run)
    url = data.get("url") or "http://localhost/"
    rest = url.split("://", 1)[1] if "://" in url else url
    slash = rest.find("/")
    uri = rest[slash:] if slash >= 0 else "/"
    uri = uri.split("#", 1)[0] or "/"
    if uri.startswith("?"):
        uri = "/" + uri
    headers = {}
    for name, value in data.get("headers") or []:
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    body = data.get("body")
    body = body.encode("utf-8", "surrogatepass") if body else b""
    return Request(data.get("method") or "GET", uri, headers, body)


def _load_handler(path):
    sys.dont_write_bytecode = True
    # compile + exec into a fresh module: what importlib would do, without
    # importing importlib.util (and inspect, contextlib...) on every run
    with open(path, "rb") as f:
        source = f.read()
    module = type(sys)("handler")
    module.__file__ = path
    sys.modules["handler"] = module
    exec(compile(source, path, "exec"), module.__dict__)
    fn = getattr(module, "handle_request", None)
    if fn is None:
        raise AttributeError("handler.py defines no handle_request(request)")
    if not callable(fn):
        raise TypeError("handle_request is not callable")
    return fn


def _check_status(status):
    if not isinstance(status, int) or isinstance(status, bool):
        raise TypeError(f"status must be an int, not {type(status).__name__}")
    return int(status)


def _check_headers(headers):
    if headers is None:
        return []
    if hasattr(headers, "items"):
        items = headers.items()
    elif isinstance(headers, (str, bytes)) or not hasattr(headers, "__iter__"):
        raise TypeError(f"headers must be a mapping or a list of pairs, not {type(headers).__name__}")
    else:
        items = headers
    pairs = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError("headers must be a mapping or a list of (name, value) pairs")
        name, value = item
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str (header {name!r})")
        pairs.append([name, value])
    return pairs


def _unpack(result):
    """(status, headers, body) from what handle_request returned; `body` is an
    iterable or async iterable of chunks. Everything is checked before the
    head is written."""
    if isinstance(result, tuple):
        if len(result) != 3:
            raise TypeError("a tuple response must be (status, headers, chunks)")
        status, headers, body = result
        if body is None:
            body = ()
        elif isinstance(body, (str, bytes, bytearray, memoryview)):
            body = (body,)
        elif not hasattr(body, "__iter__") and not hasattr(body, "__aiter__"):
            raise TypeError(f"chunks must be iterable, not {type(body).__name__}")
    elif isinstance(result, Response) or all(hasattr(result, a) for a in ("status", "headers", "body")):
        status, headers, body = result.status, result.headers, result.body
        body = () if body is None else (_chunk_bytes(body),)
    else:
        raise TypeError(f"handle_request returned {type(result).__name__}, "
                        "expected a Response or (status, headers, chunks)")
    return _check_status(status), _check_headers(headers), body


def _send(body, out):
    if hasattr(body, "__aiter__"):
        import asyncio
        asyncio.run(_send_async(body, out))
        return
    for chunk in body:
        out.chunk(chunk)


async def _send_async(body, out):
    if hasattr(body, "__aiter__"):
        async for chunk in body:
            out.chunk(chunk)
    else:
        for chunk in body:
            out.chunk(chunk)


async def _respond_async(awaitable, out):
    # The awaited handler and an async body share one event loop.
    status, headers, body = _unpack(await awaitable)
    out.head(status, headers)
    await _send_async(body, out)


def _respond(result, out):
    # (a Response is awaitable too, for `await send(...)`: it is no coroutine)
    if hasattr(result, "__await__") and not isinstance(result, Response):
        import asyncio
        asyncio.run(_respond_async(result, out))
    else:
        status, headers, body = _unpack(result)
        out.head(status, headers)
        _send(body, out)
    out.end()


def main():
    sys.stdout.flush()
    out = _Stream(os.dup(1))   # os.dup's copy is not inherited by children
    os.dup2(2, 1)              # fd 1 (and children's stdout) is now stderr
    sys.stdout = sys.stderr
    try:
        request = _read_request(sys.stdin.buffer.read())
        handler = _load_handler(HANDLER_PATH)
        _respond(handler(request), out)
    except BaseException as exc:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        out.error(exc)
        sys.exit(1)
