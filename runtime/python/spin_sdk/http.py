"""Request and Response, shaped like Spin's `spin_sdk.http`.

Plain classes rather than dataclasses: every handler run imports this module,
and dataclasses + typing cost it several milliseconds of start-up.
"""

__all__ = ["Request", "Response"]


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

    def __repr__(self):
        return f"Response(status={self.status!r}, headers={self.headers!r}, body={self.body!r})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.status, self.headers, self.body) == (other.status, other.headers, other.body)
