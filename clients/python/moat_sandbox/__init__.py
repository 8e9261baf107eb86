"""moat-sandbox: the aistack sandbox contract on top of the `moat` binary, for Python.

``create_sandbox(config).run(code, language=..., timeout=...)`` runs ``code`` in a fresh
moat sandbox, through ``moat exec`` (the default) or a ``moat serve`` (``url`` or
``socket_path``), and returns a :class:`RunResult`. Through a service,
``sandbox.session(language="python")`` is a :class:`Session`: one interpreter that keeps its
state between runs (docs/SESSIONS.md). ``LiveSandbox.create(socket_path=...)`` is a live
sandbox of a service: processes (``sbx.commands``) and files (``sbx.files``) that outlive a
request (docs/SANDBOXES.md). Standard library only."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ._async import AsyncSandbox, AsyncSession
from ._core import DEFAULT_SANDBOX_CONFIG, LANGUAGES, PROVIDERS, Result, RunResult
from ._errors import (
    NotFoundError, SandboxConfigError, SandboxError, SandboxGoneError, SandboxNotFoundError, SandboxPolicyError,
    SandboxUnavailableError, SessionBusyError, SessionGoneError, SessionNotFoundError,
)
from ._live import CommandHandle, CommandResult, Execution, ExecutionError, LiveSandbox
from ._sync import Sandbox, Session

__version__ = "0.1.0"

__all__ = [
    "AsyncSandbox", "AsyncSession", "CommandHandle", "CommandResult", "Execution", "ExecutionError",
    "LiveSandbox", "NotFoundError",
    "SandboxGoneError", "SandboxNotFoundError", "DEFAULT_SANDBOX_CONFIG", "LANGUAGES", "PROVIDERS", "Result", "RunResult",
    "Sandbox", "SandboxConfigError", "SandboxError", "SandboxPolicyError", "SandboxUnavailableError",
    "Session", "SessionBusyError", "SessionGoneError", "SessionNotFoundError",
    "create_sandbox", "create_async_sandbox",
]


def create_sandbox(config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Sandbox:
    """A :class:`Sandbox` for ``config`` (aistack's ``sandbox`` object: camelCase or
    snake_case keys, or keyword arguments)."""
    return Sandbox(config, **kwargs)


def create_async_sandbox(config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> AsyncSandbox:
    """An :class:`AsyncSandbox` for ``config``."""
    return AsyncSandbox(config, **kwargs)
