"""The PEP 517 build backend of moat-sandbox, standard library only.

pip builds the client with nothing but itself: no setuptools, no wheel (a venv's pip from
ensurepip, a pyenv Python whose setuptools has no bdist_wheel, an offline host). pyproject.toml
names it with ``backend-path = ["_build"]``. It reads the ``[project]`` table of pyproject.toml
(tomllib from Python 3.11; before that a reader of the small TOML subset that file uses, which
refuses anything else) and writes:

- a wheel (PEP 427) with ``zipfile``: the package's files, ``METADATA`` (core metadata 2.1),
  ``WHEEL``, ``entry_points.txt`` when ``[project.scripts]`` names any, and a ``RECORD`` with
  each file's sha256 and size;
- an sdist (PEP 517/625) with ``tarfile``: ``PKG-INFO`` and the sources;
- an editable wheel (PEP 660): a ``.pth`` file naming this directory.

Entries are sorted and dated ``SOURCE_DATE_EPOCH`` (default 2020-01-01), so a build is the same
bytes twice.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "moat_sandbox"
# what an sdist carries besides the package (paths relative to ROOT)
SDIST_EXTRA = ("pyproject.toml", "README.md", "_build/moat_build.py")
GENERATOR = "moat_build 1"


# ---- pyproject.toml -------------------------------------------------------------------------

class BuildError(Exception):
    """pyproject.toml says something this backend does not understand."""


def _toml_value(text: str, where: str) -> Any:
    """One value of the subset: a basic string, an array of them, a bool, an inline table of
    strings."""
    text = text.strip()
    m = re.fullmatch(r'"((?:[^"\\]|\\["\\])*)"', text)
    if m:
        return m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip().rstrip(",")
        return [_toml_value(v, where) for v in _split_top(inner)] if inner else []
    if text.startswith("{") and text.endswith("}"):
        out = {}
        for part in _split_top(text[1:-1]):
            k, sep, v = part.partition("=")
            if not sep:
                raise BuildError("pyproject.toml: cannot read %s: %s" % (where, text))
            out[k.strip()] = _toml_value(v, where)
        return out
    raise BuildError("pyproject.toml: cannot read %s (this backend reads strings, arrays of "
                     "strings, booleans and inline tables before Python 3.11): %s" % (where, text))


def _split_top(text: str) -> List[str]:
    """text split at the commas outside strings and brackets (empty pieces dropped)."""
    parts, depth, cur, quoted, i = [], 0, "", False, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\" and i + 1 < len(text):
                cur += text[i:i + 2]
                i += 2
                continue
            quoted = c != '"'
        elif c == '"':
            quoted = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            i += 1
            continue
        cur += c
        i += 1
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _strip_comment(line: str) -> str:
    quoted = False
    for i, c in enumerate(line):
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        elif c == "#" and not quoted:
            return line[:i]
    return line


def parse_toml_subset(text: str) -> Dict[str, Any]:
    """The TOML pyproject.toml is written in: [table] and [a.b] headers, key = value with the
    values _toml_value reads, arrays over several lines. Anything else is a BuildError, never a
    guess."""
    doc: Dict[str, Any] = {}
    table = doc
    pending: Optional[Tuple[str, str]] = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).strip()
        if pending:
            key, acc = pending
            acc += " " + line
            if acc.count("[") == acc.count("]"):
                table[key] = _toml_value(acc, key)
                pending = None
            else:
                pending = (key, acc)
            continue
        if not line:
            continue
        m = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", line)
        if m:
            table = doc
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+|"[^"]*")\s*=\s*(.*)', line)
        if not m:
            raise BuildError("pyproject.toml line %d: cannot read: %s" % (n, raw))
        key, value = m.group(1).strip('"'), m.group(2)
        if value.startswith("[") and value.count("[") != value.count("]"):
            pending = (key, value)
        else:
            table[key] = _toml_value(value, key)
    if pending:
        raise BuildError("pyproject.toml: unterminated array " + pending[0])
    return doc


def read_pyproject(root: str = ROOT) -> Dict[str, Any]:
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # Python < 3.11
        return parse_toml_subset(data.decode("utf-8"))
    return tomllib.loads(data.decode("utf-8"))


# ---- metadata --------------------------------------------------------------------------------

def _project(root: str = ROOT) -> Dict[str, Any]:
    project = read_pyproject(root).get("project")
    if not isinstance(project, dict) or "name" not in project or "version" not in project:
        raise BuildError("pyproject.toml has no [project] name and version")
    if project.get("dynamic"):
        raise BuildError("pyproject.toml: dynamic fields are not supported by this backend")
    return project


def _dist_name(project: Dict[str, Any]) -> str:
    """The name as file names spell it (PEP 427/625): runs of -_. become _."""
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def metadata_text(root: str = ROOT) -> str:
    p = _project(root)
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: " + lic["text"])
    elif isinstance(lic, str):
        lines.append("License-Expression: " + lic)
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    for c in p.get("classifiers", []):
        lines.append("Classifier: " + c)
    for d in p.get("dependencies", []):
        lines.append("Requires-Dist: " + d)
    for extra, deps in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        for d in deps:
            lines.append("Requires-Dist: %s; extra == %s" % (d, '"%s"' % extra))
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(root, readme), encoding="utf-8") as f:
            body = f.read()
        kind = "text/markdown" if readme.lower().endswith(".md") else "text/plain"
        lines.append("Description-Content-Type: " + kind)
    return "\n".join(lines) + "\n\n" + body


def _entry_points(project: Dict[str, Any]) -> str:
    out = []
    for group, key in (("console_scripts", "scripts"), ("gui_scripts", "gui-scripts")):
        items = project.get(key) or {}
        if items:
            out.append("[%s]" % group)
            out.extend("%s = %s" % (k, v) for k, v in sorted(items.items()))
            out.append("")
    for group, items in sorted((project.get("entry-points") or {}).items()):
        out.append("[%s]" % group)
        out.extend("%s = %s" % (k, v) for k, v in sorted(items.items()))
        out.append("")
    return "\n".join(out)


def _package_files(root: str = ROOT) -> List[str]:
    """The package's files (relative to root), sorted, without caches."""
    files = []
    for d, dirs, names in os.walk(os.path.join(root, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            files.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(files)


# ---- archives --------------------------------------------------------------------------------

def _epoch() -> int:
    try:
        return max(315532800, int(os.environ.get("SOURCE_DATE_EPOCH", "1577836800")))
    except ValueError:
        return 1577836800


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class _Wheel:
    def __init__(self, path: str, dist_info: str):
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.dist_info = dist_info
        self.records: List[str] = []
        self.date = time.gmtime(_epoch())[:6]

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        info = zipfile.ZipInfo(arcname, date_time=self.date)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        self.records.append("%s,%s,%d" % (arcname, _record_hash(data), len(data)))

    def close(self) -> None:
        record = self.dist_info + "/RECORD"
        lines = self.records + [record + ",,"]
        info = zipfile.ZipInfo(record, date_time=self.date)
        info.external_attr = (0o100000 | 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, "\n".join(lines) + "\n")
        self.zf.close()


def _dist_info_files(project: Dict[str, Any], root: str) -> List[Tuple[str, bytes]]:
    wheel = ("Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
             % GENERATOR)
    out = [("METADATA", metadata_text(root).encode("utf-8")), ("WHEEL", wheel.encode("ascii")),
           ("top_level.txt", (PACKAGE + "\n").encode("ascii"))]
    eps = _entry_points(project)
    if eps:
        out.append(("entry_points.txt", eps.encode("utf-8")))
    return out


def _write_wheel(wheel_directory: str, editable: bool) -> str:
    project = _project(ROOT)
    base = "%s-%s" % (_dist_name(project), project["version"])
    name = base + "-py3-none-any.whl"
    dist_info = base + ".dist-info"
    path = os.path.join(wheel_directory, name)
    w = _Wheel(path, dist_info)
    try:
        if editable:
            # PEP 660: the source tree on sys.path, through a .pth file
            w.add("__editable__.%s.pth" % base, (ROOT + "\n").encode("utf-8"))
        else:
            for rel in _package_files(ROOT):
                with open(os.path.join(ROOT, rel), "rb") as f:
                    w.add(rel.replace(os.sep, "/"), f.read())
        for fname, data in _dist_info_files(project, ROOT):
            w.add(dist_info + "/" + fname, data)
        w.close()
    except BaseException:
        w.zf.close()
        os.unlink(path)
        raise
    return name


# ---- PEP 517 / 660 hooks ---------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None
                                    ) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project(ROOT)
    dist_info = "%s-%s.dist-info" % (_dist_name(project), project["version"])
    d = os.path.join(metadata_directory, dist_info)
    os.makedirs(d, exist_ok=True)
    for fname, data in _dist_info_files(project, ROOT):
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, editable=False)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project(ROOT)
    base = "%s-%s" % (_dist_name(project), project["version"])
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    mtime = _epoch()
    files = [(rel, None) for rel in sorted(set(_package_files(ROOT)) | set(SDIST_EXTRA))]
    files.append(("PKG-INFO", metadata_text(ROOT).encode("utf-8")))
    try:
        # gzip's own header carries a date too: fixed through GzipFile's mtime
        import gzip
        with open(path, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for rel, data in sorted(files):
                if data is None:
                    with open(os.path.join(ROOT, rel), "rb") as f:
                        data = f.read()
                info = tarfile.TarInfo("%s/%s" % (base, rel.replace(os.sep, "/")))
                info.size = len(data)
                info.mtime = mtime
                info.mode = 0o644
                info.uname = info.gname = ""
                tf.addfile(info, io.BytesIO(data))
    except BaseException:
        if os.path.exists(path):
            os.unlink(path)
        raise
    return name
