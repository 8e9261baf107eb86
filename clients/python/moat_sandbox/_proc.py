"""Starting and stopping `moat exec`: its own process group (a timeout or a cancelled run
kills the group), and a parent-death signal so that a caller killed outright (SIGKILL,
OOM) leaves no moat behind."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import _core
from ._errors import SandboxConfigError

PR_SET_PDEATHSIG = 1
# SIGTERM, not SIGKILL: moat's docker provider turns it into `docker kill`; the native
# provider's sandbox dies with moat (its pid 1 has a parent-death signal of its own)
DEATH_SIGNAL = signal.SIGTERM

_prctl: Optional[Any] = None
try:  # loaded here in the parent, never in the forked child
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _prctl = _libc.prctl
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _prctl.restype = ctypes.c_int
except (OSError, AttributeError):  # not glibc/musl Linux: no parent-death signal
    _prctl = None


def child_setup(parent: int) -> Callable[[], None]:
    """The preexec_fn: the parent-death signal, then the check that the parent did not die
    before it was armed (the signal would never come). Only a prctl call and getppid
    between fork and exec. The parent-death signal follows the THREAD that started moat:
    a run started from a thread that ends while moat still runs loses moat with it, which
    a blocking run() never does."""
    def setup() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(127)
    return setup


def argv_of(moat: str, provider: str, config_file: str, stream: bool) -> List[str]:
    argv = [moat, "exec", "--provider", provider, "--config", config_file]
    if stream:
        argv.append("--stream")
    return argv


def env_of(key_env: Mapping[str, str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(key_env)
    return env


def signal_group(pid: int, sig: int) -> None:
    """The signal to moat's process group (moat and whatever it started there); the caller
    makes sure moat was not reaped yet, so that the group id is still moat's."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stream_unsupported(status: Optional[int], out: bytes, err: bytes) -> bool:
    """`moat exec --stream` refused by a moat that predates it (getopt, before it reads
    the request: nothing ran)."""
    return status == 2 and not out.strip() and b"--stream" in err and b"unrecognized option" in err


def write_config(cfg: Mapping[str, Any], provider: str):  # -> (dir, path, key_env)
    """The moat config file (0600, in a private temp dir) and the API keys for moat's
    environment; a configPath is used as is."""
    import json
    import tempfile
    key_env: Dict[str, str] = {}
    moat_cfg: Dict[str, Any] = {}
    for k, v in cfg.items():
        if v is None or k in _core.CLIENT_KEYS:
            continue
        if k in _core.KEY_ENV:
            key_env[_core.KEY_ENV[k]] = str(v)
        else:
            moat_cfg[k] = v
    if cfg.get("configPath"):
        return None, os.fspath(cfg["configPath"]), key_env
    try:
        text = json.dumps(moat_cfg)
    except (TypeError, ValueError) as e:
        raise SandboxConfigError("config is not JSON: %s" % e, provider=provider) from None
    d = tempfile.mkdtemp(prefix="moat-client-")
    path = os.path.join(d, "moat.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return d, path, key_env


def exec_answer(status: Optional[int], out: bytes, err: bytes,
                assembler: "Optional[_core.StreamAssembler]", provider: str,
                started: float) -> Dict[str, Any]:
    """moat's answer once it has exited (a stream's last line already fed): its error
    answer as it is, else the result under its wire names; no answer at all is a
    SandboxUnavailableError."""
    from ._errors import SandboxUnavailableError
    if assembler is not None:
        if assembler.result is None:
            raise SandboxUnavailableError(unavailable_exit(status, err), provider=provider)
        answer = assembler.finish()
    else:
        parsed = _core.parse_json(out)
        if not isinstance(parsed, dict):
            if parsed is None:
                raise SandboxUnavailableError(unavailable_exit(status, err), provider=provider)
            raise SandboxUnavailableError("moat answered with something that is not a result",
                                          provider=provider)
        answer = parsed
    if "error" in answer:
        return answer
    return _core.result_of(answer, provider, started).to_dict()


def spawn_failed(e: OSError, moat: str, provider: str) -> Exception:
    from ._errors import SandboxUnavailableError
    if isinstance(e, FileNotFoundError):
        return SandboxUnavailableError("moat binary not found (%s); install moat, or give its path: "
                                       "create_sandbox(binary=...) or MOAT_BIN" % moat,
                                       provider=provider)
    return SandboxUnavailableError("cannot run moat (%s): %s" % (moat, e.strerror or e), provider=provider)


def unavailable_exit(status: Optional[int], err: bytes) -> str:
    text = err[:2000].decode("utf-8", "replace")[:500].strip()
    if status is not None and status < 0:
        try:
            how = signal.Signals(-status).name
        except ValueError:
            how = "signal %d" % -status
    else:
        how = str(status)
    return "moat exited (%s) without a JSON answer%s" % (how, ": " + text if text else "")
