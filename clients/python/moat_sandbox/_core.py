"""What the sync and the asyncio clients share: the config and its defaults, the checks
made before a run, the request, the result, the service's errors and the NDJSON stream.
Mirrors clients/node/index.js (same defaults, same messages)."""
from __future__ import annotations

import base64
import binascii
import email.utils
import ipaddress
import json
import os
import re
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Type, Union

from ._errors import (
    ERROR_CLASSES,
    SandboxConfigError,
    SandboxError,
    SandboxPolicyError,
    SandboxUnavailableError,
    SessionBusyError,
    SessionGoneError,
    SessionNotFoundError,
)

PROVIDERS = ("native", "docker", "e2b", "daytona", "none")
# keys only this client understands: never written to moat's config file
CLIENT_KEYS = frozenset(["moatPath", "deadlineGraceMs", "configPath", "url", "socketPath", "token",
                         "service"])
# API keys travel to moat through its environment, never through a file
KEY_ENV = {"e2bApiKey": "E2B_API_KEY", "daytonaApiKey": "DAYTONA_API_KEY"}
DEFAULT_TIMEOUT = 30000
# aistack's DEFAULT_SANDBOX_CONFIG, except provider ('native' here, 'none' in aistack)
DEFAULT_SANDBOX_CONFIG: Mapping[str, Any] = {
    "provider": "native", "timeout": DEFAULT_TIMEOUT, "memoryMb": 512, "cpus": 1,
    "pidsLimit": 100, "network": False,
}
LIMIT_KEYS = ("memoryMb", "cpus", "pidsLimit")
LIMITED_PROVIDERS = frozenset(["native", "docker"])
LANGUAGES = ("python", "javascript", "typescript", "bash", "sh")
LANGUAGE_ALIASES = ("py", "python3", "js", "node", "ts", "shell")
# how long past the sandbox timeout the client waits for moat itself (ms)
DEFAULT_GRACE = {"native": 5000, "docker": 20000, "e2b": 180000, "daytona": 300000, "none": 5000}
KILL_WAIT_MS = 2000
# the config keys moat exec reads as request defaults; a service gets them in every request
DEFAULT_KEYS = ("timeout", "memoryMb", "cpus", "pidsLimit", "network", "strictLimits",
                "maxOutputBytes")
# an idle keep-alive connection is not reused after this long (the service closes idle
# connections after --client-timeout, default 15 s)
FREE_SOCKET_MS = 1000
# bounds on what the client reads: a whole answer (a result with output files), one NDJSON
# line (a chunk is at most 64 KiB of the program's bytes, a few times that as JSON; the
# result line may carry output files), moat's own stderr kept for an error message
MAX_ANSWER_BYTES = 256 << 20
MAX_LINE_BYTES = MAX_ANSWER_BYTES
MAX_ERR_BYTES = 64 << 10
NDJSON = "application/x-ndjson"

Callback = Callable[[str], Any]


def camel(key: str) -> str:
    """memory_mb -> memoryMb; a camelCase key stays as it is."""
    if "_" not in key.strip("_"):
        return key
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def snake(key: str) -> str:
    """exitCode -> exit_code."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def normalize_config(config: Optional[Mapping[str, Any]], extra: Mapping[str, Any]) -> Dict[str, Any]:
    """The config as the node client and moat know it (aistack's camelCase keys), from a
    dict with either spelling plus keyword arguments; ``binary`` is ``moatPath``."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise SandboxConfigError("create_sandbox(config): config must be a dict")
    out: Dict[str, Any] = {}
    for source in (config, extra):
        for k, v in source.items():
            if not isinstance(k, str):
                raise SandboxConfigError("create_sandbox(config): config keys must be strings")
            key = "moatPath" if k == "binary" else camel(k)
            if key in out and source is config:
                raise SandboxConfigError("config key %s given twice (%s)" % (json.dumps(key), k))
            out[key] = v
    return {k: v for k, v in out.items() if v is not None}


def with_defaults(cfg: Mapping[str, Any], provider: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k in ("timeout", "network") + LIMIT_KEYS:
        if k in LIMIT_KEYS and provider not in LIMITED_PROVIDERS:
            continue
        out[k] = DEFAULT_SANDBOX_CONFIG[k]
    out.update(cfg)
    return out


_REFUSED_NETS = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.168.0.0/16", "100.64.0.0/10", "::/128", "::1/128", "fe80::/10", "fc00::/7")]


def address_refused(host: str) -> Optional[bool]:
    """True/False for an IP literal (refused: private, loopback, link-local, CGNAT,
    unspecified, also inside an IPv4-mapped IPv6 address); None for a name."""
    try:
        a: Union[ipaddress.IPv4Address, ipaddress.IPv6Address] = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return any(a in n for n in _REFUSED_NETS if n.version == a.version)


def check_daytona_url(raw: Any) -> None:
    """aistack's construction-time checks of daytonaApiUrl; never repeats the URL."""
    def bad(why: str) -> SandboxConfigError:
        return SandboxConfigError("daytonaApiUrl " + why, provider="daytona")
    if not isinstance(raw, str):
        raise bad("must be a string")
    try:
        u = urllib.parse.urlsplit(raw)
        host = u.hostname or ""
        u.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise bad("is not a valid URL") from None
    if not u.scheme or not u.netloc:
        raise bad("is not a valid URL")
    if u.scheme.lower() != "https":
        raise bad('must use https:// (got "%s")' % (u.scheme.lower() + ":")[:20])
    if not host:
        raise bad("has no host")
    if address_refused(host):
        raise bad("host %s is in a private, loopback or link-local range: refused (SSRF guard)" % host)
    name = host.lower()
    if name == "localhost" or name.endswith(".localhost"):
        raise bad('host "%s" is a loopback name: refused (SSRF guard)' % name[:100])


def language_refused(language: Any, provider: str) -> Optional[SandboxPolicyError]:
    if language is None or language in LANGUAGES or language in LANGUAGE_ALIASES:
        return None
    shown = language[:40] if isinstance(language, str) else type(language).__name__
    return SandboxPolicyError("unsupported language: %s (%s)" % (shown, ", ".join(LANGUAGES)),
                              provider=provider)


# run()'s keyword arguments and their names in the request
REQUEST_KEYS = {
    "language": "language", "timeout": "timeout", "env": "env", "files": "files", "stdin": "stdin",
    "network": "network", "memory_mb": "memoryMb", "cpus": "cpus", "pids_limit": "pidsLimit",
    "strict_limits": "strictLimits", "max_output_bytes": "maxOutputBytes",
    "allowed_hosts": "allowedHosts", "outputs": "outputs",
}


# the request's keys whose values are text (str), alone or in a dict or a list
_TEXT_KEYS = ("code", "stdin", "env", "files", "outputs", "allowedHosts", "allowedCidrs", "language",
              "sandboxId")
_PY_NAMES = {"allowedHosts": "allowed_hosts", "allowedCidrs": "allowed_cidrs", "sandboxId": "sandbox_id"}


def check_text(request: Mapping[str, Any], provider: str) -> Mapping[str, Any]:
    """request, or SandboxConfigError where bytes (or anything else not text) stand where
    text is expected: named by its Python spelling, before json.dumps would raise a bare
    TypeError."""
    def refuse(where: str, v: Any) -> SandboxConfigError:
        if isinstance(v, (bytes, bytearray, memoryview)):
            return SandboxConfigError("%s must be text (str), not %s: decode it first "
                                      "(data.decode('utf-8'))" % (where, type(v).__name__),
                                      provider=provider)
        return SandboxConfigError("%s must be a string, not %s" % (where, type(v).__name__),
                                  provider=provider)
    for key in _TEXT_KEYS:
        if key not in request:
            continue
        v, name = request[key], _PY_NAMES.get(key, key)
        if isinstance(v, Mapping):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise refuse("%s's names (%r)" % (name, k), k)
                if not isinstance(item, str):
                    raise refuse("%s[%r]" % (name, k), item)
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                if not isinstance(item, str):
                    raise refuse("%s[%d]" % (name, i), item)
        elif not isinstance(v, str):
            if key in ("env", "files") and not isinstance(v, (bytes, bytearray, memoryview)):
                continue  # not a dict: moat's own refusal names it
            raise refuse(name, v)
    return request


def build_request(code: Any, opts: Mapping[str, Any], defaults: Mapping[str, Any],
                  provider: str) -> Dict[str, Any]:
    """The JSON request of one run; the client-side refusals first (as the node client)."""
    if not isinstance(code, str):
        raise SandboxConfigError("code must be a string", provider=provider)
    refused = language_refused(opts.get("language"), provider)
    if refused:
        raise refused
    request: Dict[str, Any] = {"code": code}
    for k in DEFAULT_KEYS:
        if defaults.get(k) is not None:
            request[k] = defaults[k]
    for k, wire in REQUEST_KEYS.items():
        if opts.get(k) is not None:
            v = opts[k]
            request[wire] = list(v) if wire in ("allowedHosts", "outputs") and isinstance(v, tuple) else v
    check_text(request, provider)
    return request


def request_timeout(request: Mapping[str, Any], cfg: Mapping[str, Any]) -> int:
    t = request.get("timeout")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return int(t)
    t = cfg.get("timeout")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return int(t)
    return DEFAULT_TIMEOUT


def grace_of(cfg: Mapping[str, Any], provider: str) -> float:
    grace = cfg.get("deadlineGraceMs", DEFAULT_GRACE[provider])
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace >= 0:
        raise SandboxConfigError("deadlineGraceMs must be a number >= 0", provider=provider)
    return grace


# the config keys a request to the user's service carries (the rest of a config, a policy
# or a configPath, only `moat exec` reads: such a sandbox does not use the service)
SERVICE_KEYS = frozenset(DEFAULT_KEYS) | {"provider", "moatPath", "deadlineGraceMs", "service"}


def user_service(cfg: Mapping[str, Any], provider: str) -> Tuple[Optional[str], Optional[str]]:
    """Whether a `moat exec` sandbox tries the user's service first (docs/SERVE.md, "Socket
    activation"): (its socket path, None); or (None, why), why being the warning each
    run then carries (None: opted out, nothing to say)."""
    opt = cfg.get("service", True)
    if not isinstance(opt, bool):
        raise SandboxConfigError("service must be true or false", provider=provider)
    env = os.environ.get("MOAT_SERVICE", "").strip().lower()
    if not opt or env in ("off", "0", "false", "no") or provider != "native":
        return None, None
    path = os.environ.get("MOAT_SOCKET")
    if not path:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        if not xdg or not xdg.startswith("/"):
            return None, ("no user service (XDG_RUNTIME_DIR is not set): ran with moat exec, "
                          "cold; MOAT_SERVICE=off says nothing")
        path = os.path.join(xdg, "moat.sock")
    extra = sorted(k for k in cfg if k not in SERVICE_KEYS)
    if extra:
        return None, ("the user service was not used: the config sets %s, which only moat exec "
                      "reads (service=False says nothing)" % ", ".join(extra))
    return path, None


def socket_not_ours(path: str) -> Optional[str]:
    """Why the socket at path is not taken for the user's service (the code and the
    result would go through another user's process), or None: this user's or root's,
    or nothing there yet (connecting then fails, and says so)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid not in (os.getuid(), 0):
        return ("the user service was not used: its socket %s belongs to uid %d, not to this "
                "user (uid %d): ran with moat exec" % (path, st.st_uid, os.getuid()))
    return None


def fallback_reason(e: BaseException, path: str) -> Optional[str]:
    """Why a run the user's service did not run goes to `moat exec`, or None when the
    service may have run it (the error is the run's)."""
    if getattr(e, "not_run", False):
        return ("the user service at %s did not answer (%s): ran with moat exec, cold "
                "(systemctl --user enable --now moat.socket starts it on demand; "
                "MOAT_SERVICE=off says nothing)" % (path, e))
    status = getattr(e, "status", None)
    if status == 403 and getattr(e, "error_type", None) == "SandboxPolicyError":
        return ("the user service at %s refused the request (%s): ran with moat exec, "
                "under this client's limits" % (path, e))
    if status in (429, 503):
        return "the user service at %s was busy (%s): ran with moat exec" % (path, e)
    return None


def with_warning(result: "RunResult", text: str) -> "RunResult":
    data = dict(object.__getattribute__(result, "_data"))
    w = data.get("warnings")
    data["warnings"] = (list(w) if isinstance(w, list) else []) + [text]
    return RunResult(data)


def check_callbacks(on_stdout: Any, on_stderr: Any, provider: str) -> None:
    for name, cb in (("on_stdout", on_stdout), ("on_stderr", on_stderr)):
        if cb is not None and not callable(cb):
            raise SandboxConfigError("%s must be callable" % name, provider=provider)


# ---- the result ------------------------------------------------------------------------

class Result:
    """One rich result of a session's step (docs/SESSIONS.md, "Results"): a MIME bundle,
    read under E2B's names: ``text`` (text/plain), ``html``, ``markdown``, ``svg``,
    ``png`` and ``jpeg`` (base64 text, as sent), ``latex``, ``json`` (the JSON value),
    ``javascript``; ``None`` when absent. ``is_main_result``: the step's last expression.
    ``data``: the bundle itself, under its MIME types; ``formats()``: what it has."""

    __slots__ = ("data", "is_main_result")
    _MIME = {"text": "text/plain", "html": "text/html", "markdown": "text/markdown",
             "svg": "image/svg+xml", "png": "image/png", "jpeg": "image/jpeg",
             "latex": "text/latex", "json": "application/json",
             "javascript": "application/javascript"}

    def __init__(self, wire: Mapping[str, Any]) -> None:
        data = wire.get("data") if isinstance(wire, Mapping) else None
        object.__setattr__(self, "data", dict(data) if isinstance(data, Mapping) else {})
        object.__setattr__(self, "is_main_result", bool(wire.get("isMain"))
                           if isinstance(wire, Mapping) else False)

    def __getattr__(self, name: str) -> Any:
        mime = Result._MIME.get(name)
        if mime is None:
            raise AttributeError("Result has no field %r" % name)
        return self.data.get(mime)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Result is read-only")

    def formats(self) -> List[str]:
        return [k for k, m in Result._MIME.items() if m in self.data]

    def __repr__(self) -> str:
        return "Result(%s%s)" % (", ".join(self.formats()), ", main" if self.is_main_result else "")


class RunResult:
    """A run's result. Every field of moat's JSON result is an attribute under its
    snake_case name (``exit_code``, ``timed_out``, ``duration_ms``, ``memory_peak_bytes``,
    ...); nested values (``limits``, ``files``, ``network``) stay as the dicts moat sent,
    with its camelCase keys. ``to_dict()`` gives the result under its wire names, as the
    node client returns it; ``result["exitCode"]`` reads one wire name."""

    __slots__ = ("_data",)

    stdout: str
    stderr: str
    exit_code: Optional[int]
    timed_out: bool
    duration_ms: int
    provider: str
    signal: Optional[str]
    oom_killed: Optional[bool]
    killed_by: Optional[str]
    memory_peak_bytes: Optional[int]
    cpu_time_ms: Optional[int]
    stdout_truncated: Optional[bool]
    stderr_truncated: Optional[bool]
    limits: Optional[Dict[str, str]]
    warnings: Optional[List[str]]
    pool: Optional[bool]  # True: a warm sandbox of a moat serve (the user service) answered
    files: Optional[Dict[str, Dict[str, Any]]]
    network: Optional[Dict[str, Any]]
    # a session's step (docs/SESSIONS.md): the exception it raised, the last expression's
    # repr, the figures it left open, the session after it
    error: Optional[Dict[str, str]]
    value: Optional[str]
    value_truncated: Optional[bool]
    display: Optional[List[Dict[str, str]]]
    session: Optional[Dict[str, Any]]
    # and as Jupyter's (issue 46): rich results (``results``: Result objects), the
    # step's count, whether it was interrupted; ``error`` has ``name``, ``value`` and
    # ``traceback`` (a list of lines) besides ``type`` and ``message``
    results_truncated: Optional[bool]
    execution_count: Optional[int]
    interrupted: Optional[bool]

    _DEFAULTS = {"stdout": "", "stderr": "", "exitCode": None, "timedOut": False}

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str) -> Any:
        data = object.__getattribute__(self, "_data")
        key = camel(name)
        if key in data:
            return data[key]
        if key in RunResult._DEFAULTS or name in RunResult.__annotations__ or \
                name in type(self).__dict__.get("__annotations__", {}):
            return RunResult._DEFAULTS.get(key)
        raise AttributeError("RunResult has no field %r" % name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RunResult is read-only")

    @property
    def results(self) -> List["Result"]:
        """A session step's rich results, in order ([] for a run)."""
        got = object.__getattribute__(self, "_data").get("results")
        return [Result(r) for r in got] if isinstance(got, list) else []

    @property
    def main_result(self) -> Optional["Result"]:
        """The result of the step's last expression, or None."""
        return next((r for r in self.results if r.is_main_result), None)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunResult):
            return self._data == other._data
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __dir__(self) -> List[str]:
        return sorted(set(object.__dir__(self)) | {snake(k) for k in self._data})

    def __repr__(self) -> str:
        shown = ", ".join("%s=%r" % (snake(k), self._data[k]) for k in
                          ("exitCode", "timedOut", "durationMs", "provider", "stdout", "stderr", "value")
                          if k in self._data)
        return "RunResult(%s)" % shown


class SessionInfo(RunResult):
    """``GET /v1/sessions/{id}``: ``id``, ``state`` ("idle", "running", "killed", "ended",
    "expired"), ``runs``, ``cpu_time_ms``, ``memory_bytes``, ``created_at``, ``expires_at``,
    ``idle_expires_at``, ``limits``, ``reason``; ``to_dict()`` under the wire names.
    ``cpu_time_ms`` and ``memory_bytes`` are None where nothing measures them (no cgroup:
    rootless without a delegated one), with a ``warnings`` entry saying so."""

    __slots__ = ()

    memory_bytes: Optional[int]

    def __repr__(self) -> str:
        shown = ", ".join("%s=%r" % (snake(k), self._data[k]) for k in ("state", "runs", "reason")
                          if k in self._data)
        return "SessionInfo(%s)" % shown


def result_of(json_value: Any, provider: str, started: float) -> RunResult:
    data = dict(json_value)
    if not isinstance(data.get("durationMs"), (int, float)) or isinstance(data.get("durationMs"), bool):
        data["durationMs"] = int((time.monotonic() - started) * 1000)
    if data.get("provider") is None:
        data["provider"] = provider
    return RunResult(data)


def exec_error(answer: Mapping[str, Any], provider: str) -> SandboxError:
    """A `moat exec` {"error": {...}} answer as its class."""
    info = answer.get("error")
    info = info if isinstance(info, Mapping) else {}
    cls = ERROR_CLASSES.get(str(info.get("type")), SandboxError)
    p = info.get("provider") if isinstance(info.get("provider"), str) and info.get("provider") else provider
    return cls(_str(info.get("message")), provider=p)


def _str(v: Any) -> str:
    return "" if v is None else str(v)


# ---- moat serve ------------------------------------------------------------------------

class Target:
    """Where the service is: a unix socket or a host and port, http or https."""

    def __init__(self, scheme: str, host: Optional[str], port: Optional[int],
                 socket_path: Optional[str], base: str, where: str) -> None:
        self.scheme = scheme
        self.base = base  # the service's path prefix ("" or the url's path)
        self.path = base + "/v1/run"
        self.host = host
        self.port = port
        self.socket_path = socket_path
        self.where = where

    def host_header(self) -> str:
        if self.socket_path is not None:
            return "localhost"
        host = "[%s]" % self.host if self.host and ":" in self.host else str(self.host)
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else "%s:%d" % (host, self.port or default)


_TOKEN_RE = re.compile(r"^[\x21-\x7e]+$")


def service_target(cfg: Mapping[str, Any], provider: str) -> Target:
    """Checks url/socketPath/token; every problem is a SandboxConfigError whose message
    names at most the scheme, host and port, never the token nor a rejected url."""
    def bad(msg: str) -> SandboxConfigError:
        return SandboxConfigError(msg, provider=provider)
    if provider != "native":
        raise bad("url/socketPath: moat serve runs the native provider only, not %s" % json.dumps(provider))
    if "url" in cfg and "socketPath" in cfg:
        raise bad("url and socketPath are exclusive: give one")
    token = cfg.get("token")
    if token is not None and (not isinstance(token, str) or not _TOKEN_RE.match(token)):
        raise bad("token must be a non-empty string of printable ASCII without spaces")
    if "socketPath" in cfg:
        sp = cfg["socketPath"]
        if isinstance(sp, os.PathLike):
            sp = os.fspath(sp)
        if not isinstance(sp, str) or sp == "" or "\0" in sp:
            raise bad("socketPath must be a non-empty string (the path of the service's unix socket)")
        return Target("http", None, None, sp, "", "unix:" + sp)
    url = cfg.get("url")
    if not isinstance(url, str):
        raise bad('url must be a string such as "http://127.0.0.1:3000"')
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname
        port = u.port
    except ValueError:
        raise bad('url is not a valid URL (e.g. "http://127.0.0.1:3000")') from None
    scheme = u.scheme.lower()
    if scheme not in ("http", "https"):
        raise bad("url must be http:// or https://, not %s//" % (scheme + ":")[:20])
    if u.username is not None or u.password is not None:
        raise bad("url must not carry credentials: use the token option")
    if u.query or u.fragment or "?" in url or "#" in url:
        raise bad("url must not have a query or a fragment")
    if not host or any(c.isspace() for c in url):
        raise bad('url is not a valid URL (e.g. "http://127.0.0.1:3000")')
    port = port or (443 if scheme == "https" else 80)
    base = u.path.rstrip("/")
    shown = "[%s]" % host if ":" in host else host
    return Target(scheme, host, port, None, base, "%s://%s:%d" % (scheme, shown, port))


def retry_after_ms(value: Optional[str]) -> Optional[int]:
    if value is None or not value.strip():
        return None
    if re.match(r"^\s*\d+\s*$", value):
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0, int((when.timestamp() - time.time()) * 1000))


_TYPED: Dict[str, Type[SandboxError]] = {
    "SandboxConfigError": SandboxConfigError,
    "SandboxPolicyError": SandboxPolicyError,
    "SandboxUnavailableError": SandboxUnavailableError,
    "SessionBusy": SessionBusyError,
    "SessionGone": SessionGoneError,
    "SessionNotFound": SessionNotFoundError,
}


class Call:
    """One exchange with the service: METHOD base+route, a JSON body or none. ``session_id``
    for a session's own routes; ``session`` for every session route (a 200 answer's
    ``error`` is then the step's exception, part of the result); ``ok`` the success status."""

    def __init__(self, method: str, route: str, payload: Optional[Mapping[str, Any]], timeout: int,
                 session: bool = False, session_id: Optional[str] = None, ok: int = 200) -> None:
        self.method = method
        self.route = route
        self.body = None if payload is None else json.dumps(payload).encode("utf-8")
        self.timeout = timeout
        self.session = session
        self.session_id = session_id
        self.ok = ok

    def path(self, target: Target) -> str:
        return target.base + self.route

    def shown(self, target: Target) -> str:
        """The path as an error message names it: never a session's id."""
        return target.base + ("/v1/sessions" if self.session else self.route)


def service_error(status: int, body: Any, headers: Mapping[str, str], provider: str,
                  target: Target, has_token: bool, call: Optional[Call] = None) -> SandboxError:
    """An HTTP answer that is not a result, as the contract's classes (see the node
    client: a known error type wins, else the status decides; on a session's route 409,
    410 and an untyped 404 are the session's)."""
    info = body.get("error") if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping) else None
    etype = info.get("type") if info is not None and isinstance(info.get("type"), str) else None
    if info is not None and info.get("message") is not None:
        message = str(info["message"])
    else:
        message = "moat serve answered HTTP %d without an error object" % status
    sid = call.session_id if call is not None else None
    cls: Type[SandboxError]
    if etype in _TYPED:
        cls = _TYPED[str(etype)]
    elif sid and status == 409:
        cls = SessionBusyError
    elif sid and status == 410:
        cls = SessionGoneError
    elif sid and status == 404 and etype is None:
        cls = SessionNotFoundError
    elif status in (400, 401, 404, 405):
        cls = SandboxConfigError
    elif status in (403, 413):
        cls = SandboxPolicyError
    elif status == 429 or status >= 500:
        cls = SandboxUnavailableError
    else:
        cls = SandboxError
    if status == 401:
        message += " (the token was refused)" if has_token else " (no token configured: set token)"
    if status in (404, 405) and cls is SandboxConfigError:
        method, shown = (call.method, call.shown(target)) if call is not None else ("POST", target.path)
        message += " (%s %s at %s: is this a moat serve%s?)" % (
            method, shown, target.where,
            " with sessions on (--max-sessions 0 turns them off)" if call is not None and call.session else "")
    p = info.get("provider") if info is not None and isinstance(info.get("provider"), str) else provider
    if cls is SessionGoneError:
        reason = info.get("reason") if info is not None and isinstance(info.get("reason"), str) else None
        err: SandboxError = SessionGoneError(message, provider=p, reason=reason)
    else:
        err = cls(message, provider=p)
    if isinstance(err, (SessionBusyError, SessionGoneError, SessionNotFoundError)):
        err.session_id = sid
    err.status = status
    err.error_type = etype
    after = retry_after_ms(headers.get("retry-after"))
    if after is not None:
        err.retry_after_ms = after
    return err


def request_headers(body: Optional[bytes], token: Optional[str], stream: bool,
                    target: Target) -> List[Tuple[str, str]]:
    h = [("Host", target.host_header())]
    if body is not None:
        h += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    h.append(("Accept", NDJSON if stream else "application/json"))
    if token is not None:
        h.append(("Authorization", "Bearer " + token))
    return h


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def is_ndjson(content_type: Optional[str]) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == NDJSON


# ---- the NDJSON stream -----------------------------------------------------------------

class StreamAssembler:
    """Fed one NDJSON line at a time (service or ``moat exec --stream``): decodes the
    stdout/stderr chunks, hands each to its callback (text; a base64 chunk is decoded as
    UTF-8 with replacement), keeps the bytes to rebuild the result's ``stdout``/``stderr``,
    and takes the one final result line. Returns callback results to await (async)."""

    def __init__(self, on_stdout: Optional[Callback], on_stderr: Optional[Callback],
                 provider: str, where: str) -> None:
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.parts: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
        self.result: Optional[Dict[str, Any]] = None
        self.provider = provider
        self.where = where

    def _bad(self, why: str) -> SandboxUnavailableError:
        return SandboxUnavailableError("%s sent a stream line that %s" % (self.where, why),
                                       provider=self.provider)

    def feed(self, line: bytes) -> Iterator[Any]:
        """Yields what each callback returned (an awaitable for an async callback)."""
        line = line.strip()
        if not line:
            return
        if self.result is not None:
            raise self._bad("follows the result")
        msg = parse_json(line)
        if not isinstance(msg, dict):
            raise self._bad("is not a JSON object")
        kind = msg.get("type")
        if kind == "result" or (kind is None and isinstance(msg.get("error"), Mapping)):
            self.result = msg  # the result, or moat exec's error answer
            return
        if kind not in ("stdout", "stderr"):
            return  # a kind this client does not know yet: ignored
        data = msg.get("data")
        if not isinstance(data, str):
            raise self._bad("has no text in data")
        if msg.get("encoding") == "base64":
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise self._bad("is not valid base64") from None
            text = raw.decode("utf-8", "replace")
        else:
            raw = data.encode("utf-8", "surrogatepass")
            text = data
        self.parts[kind].append(raw)
        cb = self.callbacks[kind]
        if cb is not None and text:
            yield cb(text)

    def finish(self) -> Dict[str, Any]:
        """The result, its stdout/stderr rebuilt from the chunks (moat sends them empty)."""
        if self.result is None:
            raise SandboxUnavailableError(
                "%s ended the stream without a result line" % self.where, provider=self.provider)
        data = dict(self.result)
        is_result = data.pop("type", None) == "result"
        data.pop("streamed", None)
        if is_result or "error" not in data:
            for k in ("stdout", "stderr"):
                if not data.get(k):
                    data[k] = b"".join(self.parts[k]).decode("utf-8", "replace")
        return data


def deliver_whole(answer: Mapping[str, Any], on_stdout: Optional[Callback],
                  on_stderr: Optional[Callback]) -> Iterator[Any]:
    """A service or moat that did not stream: the callbacks get the whole text at once."""
    for key, cb in (("stdout", on_stdout), ("stderr", on_stderr)):
        text = answer.get(key)
        if cb is not None and isinstance(text, str) and text:
            yield cb(text)


def split_lines(buf: bytearray) -> Iterator[bytes]:
    """Takes every complete line (without its newline) off the front of ``buf``."""
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            return
        line = bytes(buf[:nl])
        del buf[: nl + 1]
        yield line


def too_late(what: str, deadline_ms: float, timeout: int, grace: float, done: str,
             provider: str) -> SandboxUnavailableError:
    return SandboxUnavailableError("%s did not answer within %d ms (sandbox timeout %d ms + %d ms); %s"
                                   % (what, deadline_ms, timeout, grace, done), provider=provider)


def remaining_s(deadline: float) -> float:
    return deadline - time.monotonic()


# ---- sessions (docs/SESSIONS.md) -------------------------------------------------------

# session()'s keyword arguments and their names in POST /v1/sessions
SESSION_KEYS = {
    "language": "language", "sandbox_id": "sandboxId", "kv_enabled": "kvEnabled",
    "memory_mb": "memoryMb", "cpus": "cpus", "pids_limit": "pidsLimit",
    "strict_limits": "strictLimits", "max_output_bytes": "maxOutputBytes", "env": "env",
    "network": "network", "allowed_hosts": "allowedHosts", "idle_timeout_ms": "idleTimeoutMs",
    "max_lifetime_ms": "maxLifetimeMs",
}
SESSION_LANGUAGES = ("python", "javascript", "py", "python3", "js", "node")
# what the client puts in a URL path: the service's ids are `ses_<node>_` + 32 hex digits
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def no_service(provider: str) -> SandboxConfigError:
    return SandboxConfigError("sessions need a moat serve: give url or socket_path (docs/SESSIONS.md)",
                              provider=provider)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def session_request(opts: Mapping[str, Any], cfg: Mapping[str, Any], provider: str) -> Dict[str, Any]:
    """POST /v1/sessions's body; the client-side refusals first (SandboxConfigError; a
    language moat does not run at all: SandboxPolicyError, as for run)."""
    language = opts.get("language")
    if language is not None and language not in SESSION_LANGUAGES:
        refused = language_refused(language, provider)
        if refused:
            raise refused
        raise SandboxConfigError("sessions take python or javascript, not %s" % language, provider=provider)
    for k in ("idle_timeout_ms", "max_lifetime_ms"):
        if opts.get(k) is not None and not _positive_int(opts[k]):
            raise SandboxConfigError("%s must be a whole number of ms > 0" % k, provider=provider)
    request: Dict[str, Any] = {}
    for k in DEFAULT_KEYS:
        if k != "timeout" and cfg.get(k) is not None:
            request[k] = cfg[k]
    for k, wire in SESSION_KEYS.items():
        if opts.get(k) is not None:
            v = opts[k]
            request[wire] = list(v) if wire == "allowedHosts" and isinstance(v, tuple) else v
    check_text(request, provider)
    return request


def session_id_of(answer: Mapping[str, Any], provider: str) -> str:
    sid = answer.get("id")
    if not isinstance(sid, str) or not _SESSION_ID.match(sid):
        raise SandboxUnavailableError("moat serve answered POST /v1/sessions without a session id",
                                      provider=provider)
    return sid


def session_run_request(code: Any, stdin: Any, files: Any, timeout: Any, on_stdout: Any,
                        on_stderr: Any, cfg: Mapping[str, Any], provider: str) -> Dict[str, Any]:
    """A session step's body; its refusals before any request."""
    def bad(msg: str) -> SandboxConfigError:
        return SandboxConfigError(msg, provider=provider)
    if not isinstance(code, str):
        raise bad("code must be a string")
    if stdin is not None and not isinstance(stdin, str):
        raise bad("stdin must be a string")
    if files is not None and not isinstance(files, Mapping):
        raise bad("files must be a dict of path -> content")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise bad("timeout must be a number of ms > 0")
    check_callbacks(on_stdout, on_stderr, provider)
    request: Dict[str, Any] = {"code": code}
    if cfg.get("timeout") is not None:
        request["timeout"] = cfg["timeout"]
    for k, v in (("stdin", stdin), ("files", None if files is None else dict(files)), ("timeout", timeout)):
        if v is not None:
            request[k] = v
    check_text(request, provider)
    return request


def closed_here(sid: str, provider: str) -> SessionGoneError:
    e = SessionGoneError("the session was closed by this client", provider=provider,
                         reason="closed by this client")
    e.session_id = sid
    return e
