"""Request, Response and send, shaped like Spin's `spin_sdk.http`.

Plain classes rather than dataclasses: every handler run imports this module,
and dataclasses + typing cost it several milliseconds of start-up. `send`
imports urllib only when it is called.

`send(request)` makes an outbound request and returns its Response. Spin's
SDK 3 has it synchronous (and `send_async` as a coroutine); SDK 4 makes
`send` itself `async`. Both spellings work: the request is made when `send`
is called, and the Response it returns may also be awaited (`await send(r)`
gives the same Response). The request goes through moat's egress: when the
run has `allowedHosts`, HTTP_PROXY/HTTPS_PROXY point at moat's relay, which
urllib honours. A host the relay refuses, or any request when the sandbox has
no egress at all, raises `componentize_py_types.Err(ErrorCode_HttpRequestDenied())`,
as Spin does for a host outside `allowed_outbound_hosts`. Redirects are not
followed (Spin's outbound HTTP does not follow them either): a 3xx is returned.
"""

from componentize_py_types import Err
from spin_sdk import _Variant

__all__ = ["Request", "Response", "send", "send_async", "strip_forbidden_headers",
           "ErrorCode_HttpRequestDenied", "ErrorCode_HttpRequestUriInvalid",
           "ErrorCode_DnsError", "ErrorCode_ConnectionRefused", "ErrorCode_ConnectionTimeout",
           "ErrorCode_DestinationUnavailable", "ErrorCode_TlsProtocolError",
           "ErrorCode_InternalError"]


class Request:
    """An incoming HTTP request.

    `uri` is the path with its query string (as in Spin), `headers` maps
    lower-case names to values, `body` is the raw body (b"" when empty).
    """

    __slots__ = ("method", "uri", "headers", "body")

    def __init__(self, method, uri, headers, body):
        self.method = method
        self.uri = uri
        self.headers = headers
        self.body = body

    def __repr__(self):
        return (f"Request(method={self.method!r}, uri={self.uri!r}, "
                f"headers={self.headers!r}, body={self.body!r})")

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.method, self.uri, self.headers, self.body) == (
            other.method, other.uri, other.headers, other.body)


class Response:
    """An HTTP response. `body` may be bytes, str (sent as UTF-8) or None."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers=None, body=None):
        self.status = status
        self.headers = headers
        self.body = body

    def __await__(self):
        # `await send(request)` (SDK 4): the request is already done
        return self
        yield   # a generator: __await__ must return an iterator

    def __repr__(self):
        return f"Response(status={self.status!r}, headers={self.headers!r}, body={self.body!r})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.status, self.headers, self.body) == (other.status, other.headers, other.body)


# The cases of wasi-http's `error-code` that send raises (as the `value` of an Err).
class ErrorCode_HttpRequestDenied(_Variant):
    """The host is not allowed (not in allowedHosts, or no egress at all)."""


class ErrorCode_HttpRequestUriInvalid(_Variant):
    """The URI is not an absolute http:// or https:// URL."""


class ErrorCode_DnsError(_Variant):
    """The host's name could not be resolved."""


class ErrorCode_ConnectionRefused(_Variant):
    """The host refused the connection."""


class ErrorCode_ConnectionTimeout(_Variant):
    """Connecting timed out."""


class ErrorCode_DestinationUnavailable(_Variant):
    """The host could not be reached (moat's relay says: connection failed)."""


class ErrorCode_TlsProtocolError(_Variant):
    """The TLS handshake failed."""


class ErrorCode_InternalError(_Variant):
    """Anything else; `value` is the message."""


_FORBIDDEN = ("connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
              "proxy-connection", "transfer-encoding", "upgrade", "host", "http2-settings")


def strip_forbidden_headers(headers):
    """Removes the headers Spin forbids a guest to set (hop-by-hop ones and
    `host`) from the mapping, in place, and returns it (SDK 4)."""
    for name in _FORBIDDEN:
        headers.pop(name, None)
    return headers


def _has_egress():
    """Whether the sandbox has a route out (any route not on `lo`): without
    allowedHosts moat's sandbox has only loopback."""
    for path, field in (("/proc/net/route", 0), ("/proc/net/ipv6_route", -1)):
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if parts and parts[field] not in ("lo", "Iface"):
                        return True
        except OSError:
            continue
    return False


def _denied(why):
    return Err(ErrorCode_HttpRequestDenied(), f"outbound request denied: {why}")


def _failure(exc, proxied, host):
    """The Err for an exception raised before any response arrived."""
    import socket
    import ssl
    text = str(exc)
    if text.startswith("Tunnel connection failed: 403"):   # the relay refused a CONNECT
        return _denied(f"{host} is not in allowedHosts")
    if text.startswith("Tunnel connection failed: 502"):
        return Err(ErrorCode_DestinationUnavailable(), f"connection to {host} failed")
    if not proxied and not _has_egress():
        return _denied(f"this sandbox has no egress (no allowedHosts), so {host} is not reachable")
    if isinstance(exc, socket.gaierror):
        return Err(ErrorCode_DnsError(), f"cannot resolve {host}")
    if isinstance(exc, ConnectionRefusedError):
        return Err(ErrorCode_ConnectionRefused(), f"{host} refused the connection")
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return Err(ErrorCode_ConnectionTimeout(), f"connecting to {host} timed out")
    if isinstance(exc, ssl.SSLError):
        return Err(ErrorCode_TlsProtocolError(), f"TLS with {host} failed: {text}")
    return Err(ErrorCode_InternalError(text), f"request to {host} failed: {text}")


def send(request):
    """Sends `request` (its `uri` an absolute http:// or https:// URL) and
    returns the Response: status, headers (a dict, lower-case names) and body
    (bytes). Any status is a Response; failures raise Err (see the module).
    The Response may be awaited, for SDK 4's `await send(request)`."""
    import urllib.error
    import urllib.parse
    import urllib.request

    parsed = urllib.parse.urlsplit(request.uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise Err(ErrorCode_HttpRequestUriInvalid(),
                  f"not an absolute http or https URL: {request.uri!r}")
    host = parsed.hostname
    headers = dict(request.headers or {})
    body = request.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    if not any(k.lower() == "content-length" for k in headers):
        headers["content-length"] = str(len(body) if body is not None else 0)
    proxies = urllib.request.getproxies()
    proxied = parsed.scheme in proxies and not urllib.request.proxy_bypass(parsed.netloc)
    req = urllib.request.Request(request.uri, data=body, headers=headers, method=request.method)
    opener = urllib.request.build_opener(_no_redirect_handler())
    try:
        answer = opener.open(req)
    except urllib.error.HTTPError as e:   # a 4xx/5xx, or a 3xx not followed
        if proxied and e.code == 403 and e.headers.get("x-moat-refused") is not None:
            e.close()
            raise _denied(f"{host} is not in allowedHosts") from None
        answer = e
    except urllib.error.URLError as e:
        reason = e.reason if isinstance(e.reason, BaseException) else e
        raise _failure(reason, proxied, host) from None
    except OSError as e:
        raise _failure(e, proxied, host) from None
    try:
        with answer:
            data = answer.read()
            status = answer.status if answer.status is not None else answer.code
            fields = {name.lower(): value for name, value in answer.headers.items()}
    except OSError as e:
        raise _failure(e, proxied, host) from None
    return Response(status, fields, data)


async def send_async(request):
    """SDK 3's coroutine spelling of `send`."""
    return send(request)


_no_redirect = None


def _no_redirect_handler():
    global _no_redirect
    if _no_redirect is not None:
        return _no_redirect
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None     # urllib then raises HTTPError with the 3xx

    _no_redirect = NoRedirect
    return NoRedirect

