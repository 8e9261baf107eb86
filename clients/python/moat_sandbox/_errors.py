"""The error classes of the aistack sandbox contract (the node client's, by name)."""
from __future__ import annotations

from typing import Any, Optional


def _text(message: Any) -> str:
    return "" if message is None else str(message)


class SandboxError(Exception):
    """Base class. ``SandboxError(message, provider=None, cause=None)``; aistack's form
    ``SandboxError(message, provider[, cause])`` is the same call.

    Through ``moat serve`` the refusal's HTTP ``status`` and the service's ``error_type``
    (e.g. ``AuthenticationError``, ``ServerBusy``) are set; ``retry_after_ms`` on a
    :class:`SandboxUnavailableError` when the service sent ``Retry-After``."""

    _prefix = ""

    def __init__(self, *args: Any, provider: Optional[str] = None, cause: Any = None) -> None:
        message: Any = args[0] if args else ""
        if len(args) >= 2:
            if type(self) is SandboxError or not isinstance(args[1], str):
                # SandboxError(message, provider[, cause])
                provider = args[1] if isinstance(args[1], str) else provider
            else:
                # aistack's subclasses: (provider, reason[, cause])
                provider, message = args[0], args[1]
            if len(args) >= 3:
                cause = args[2]
        text = self._format(_text(message), provider)
        super().__init__(text)
        self.message = text
        self.provider: Optional[str] = provider
        self.cause = cause
        if cause is not None and isinstance(cause, BaseException):
            self.__cause__ = cause
        self.status: Optional[int] = None
        self.error_type: Optional[str] = None
        self.retry_after_ms: Optional[int] = None

    def _format(self, message: str, provider: Optional[str]) -> str:
        prefix = self._prefix
        return message if not prefix or message.startswith(prefix) else prefix + message

    def __str__(self) -> str:
        return self.message


class SandboxUnavailableError(SandboxError):
    """The host or provider cannot run it: no moat, no docker, no key, the service is busy
    or unreachable, moat did not answer in time."""

    def _format(self, message: str, provider: Optional[str]) -> str:
        prefix = 'Sandbox provider "%s" unavailable: ' % ("unknown" if provider is None else provider)
        return message if message.startswith(prefix) else prefix + message


class SandboxPolicyError(SandboxError):
    """Refused: provider ``none``, an unsupported language, a bad env name, a path outside
    /sandbox, a limit above the service's maximum."""

    _prefix = "Sandbox policy violation: "


class SandboxConfigError(SandboxError):
    """A malformed request or config (a refused ``daytona_api_url`` already at
    :func:`create_sandbox`)."""

    _prefix = "Sandbox configuration error: "


class _SessionError(SandboxError):
    """A session's refusal (docs/SESSIONS.md, "Statuses"); ``session_id`` names it (the
    caller's own id, which moat never logs)."""

    def __init__(self, *args: Any, provider: Optional[str] = None, cause: Any = None) -> None:
        super().__init__(*args, provider=provider, cause=cause)
        self.session_id: Optional[str] = None


class SessionBusyError(_SessionError):
    """409: a step is running in this session (runs in one session are serialised)."""


class SessionGoneError(_SessionError):
    """410: the session was killed, expired or ended; ``reason`` says which and why (the
    service's message, e.g. "the session was killed: memory limit exceeded (256 MiB)")."""

    def __init__(self, *args: Any, provider: Optional[str] = None, cause: Any = None,
                 reason: Optional[str] = None) -> None:
        super().__init__(*args, provider=provider, cause=cause)
        self.reason: str = self.message if reason is None else str(reason)


class SessionNotFoundError(_SessionError):
    """404: no such session for this caller (never existed, another caller's, or gone
    long ago)."""


class _LiveError(SandboxError):
    """A live sandbox's refusal (docs/SANDBOXES.md); ``sandbox_id`` names it."""

    def __init__(self, *args: Any, provider: Optional[str] = None, cause: Any = None) -> None:
        super().__init__(*args, provider=provider, cause=cause)
        self.sandbox_id: Optional[str] = None


class SandboxNotFoundError(_LiveError):
    """404 ``SandboxNotFound``: no such live sandbox for this caller (never existed,
    another caller's, or ended long ago)."""


class SandboxGoneError(_LiveError):
    """410 ``SandboxGone``: the live sandbox ended (deleted, expired, its agent killed);
    ``reason`` says why ("the sandbox ended: its agent was killed (signal 9)")."""

    def __init__(self, *args: Any, provider: Optional[str] = None, cause: Any = None,
                 reason: Optional[str] = None) -> None:
        super().__init__(*args, provider=provider, cause=cause)
        self.reason: str = self.message if reason is None else str(reason)


class NotFoundError(_LiveError):
    """404 ``FileNotFound`` or ``ProcessNotFound`` inside a live sandbox that is there
    (``error_type`` says which)."""


ERROR_CLASSES = {
    "SandboxError": SandboxError,
    "SandboxUnavailableError": SandboxUnavailableError,
    "SandboxPolicyError": SandboxPolicyError,
    "SandboxConfigError": SandboxConfigError,
}
