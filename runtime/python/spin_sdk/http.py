"""Request and Response, shaped like Spin's `spin_sdk.http`."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["Request", "Response"]


@dataclass
class Request:
    """An incoming HTTP request.

    `uri` is the path with its query string (as in Spin), `headers` maps
    lower-case names to values, `body` is the raw body (b"" when empty).
    """

    method: str
    uri: str
    headers: Mapping[str, str]
    body: Optional[bytes]


@dataclass
class Response:
    """An HTTP response. `body` may be bytes, str (sent as UTF-8) or None."""

    status: int
    headers: Optional[Mapping[str, str]] = None
    body: Optional[Union[bytes, str]] = None
