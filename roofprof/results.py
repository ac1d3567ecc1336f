"""Result files: provenance and atomic writes.

Every result file roofprof writes is written whole or not at all (a temporary file in the
same folder, then ``os.replace``), and carries a ``provenance`` block: roofprof version,
command line, time, host, Python and library versions, plus whatever the caller adds
(device, driver, clocks seen).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = [
    "check_output_file",
    "check_writable_dir",
    "library_versions",
    "loads_json",
    "provenance",
    "read_json",
    "read_text",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]

_LIBRARIES = (
    "numpy",
    "numba",
    "numba-cuda",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "torch",
    "transformers",
    "nvidia-ml-py",
    "pandas",
    "matplotlib",
)


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a measurement may depend on (absent ones omitted)."""
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def provenance(**extra: Any) -> dict[str, Any]:
    """A provenance record for a result file.

    Args:
        **extra: device identity, driver, clocks seen, ... merged in verbatim.

    >>> p = provenance(device="cpu")
    >>> sorted(k for k in p if k in ("roofprof_version", "command", "time_utc", "device"))
    ['command', 'device', 'roofprof_version', 'time_utc']
    """
    from roofprof import __version__

    record = {
        "roofprof_version": __version__,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "libraries": library_versions(),
    }
    record.update(extra)
    return record


def check_writable_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and make sure files can be written there.

    Raises:
        ConfigError: the folder cannot be created or written (checked before any work).
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".roofprof-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"cannot write to output folder {str(folder)!r}: {exc.strerror or exc}"
        ) from exc
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"cannot write to output folder {str(folder)!r}: {exc}") from exc
    return folder


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all (temp file in the same folder + rename).

    The file gets the usual mode (``0o666`` less the umask), not ``mkstemp``'s 0600.

    Raises:
        ConfigError: the folder cannot be created or the file cannot be written.

    >>> import tempfile, pathlib
    >>> p = write_bytes_atomic(pathlib.Path(tempfile.mkdtemp()) / "a" / "x.bin", b"ok")
    >>> p.read_bytes()
    b'ok'
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except FileExistsError as exc:  # the folder to write in is a file
        raise ConfigError(
            f"cannot write {str(path)!r}: {str(exc.filename or path.parent)!r} is "
            "a file, not a folder"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"cannot write {str(path)!r}: {exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, path)
    except OSError as exc:  # full disk, target is a folder, ...: nothing partial is left
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"cannot write {str(path)!r}: {_os_reason(exc)}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_output_file(
    path: str | os.PathLike, *, suffixes: tuple[str, ...] | None = None, what: str = "output file"
) -> Path:
    """Check, before any work, that a result file can be written at ``path``.

    Refuses an existing folder at ``path``, a path under a file, a folder that exists but
    cannot be written, a name too long and (with ``suffixes``, e.g. ``(".png", ".svg")``)
    an extension not in the list. Creates nothing.

    Raises:
        ConfigError: one line naming ``what`` and the path.

    >>> import tempfile
    >>> check_output_file(tempfile.mkdtemp(), what="--out")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roofprof.errors.ConfigError: --out '...' is a folder; give a file name
    """
    p = Path(path)
    shown = repr(str(p))
    if "\0" in str(p):  # pathlib answers False (not an error) for such a name
        raise ConfigError(f"{what} {shown}: embedded null byte in the name")
    try:
        if p.is_dir():
            raise ConfigError(f"{what} {shown} is a folder; give a file name")
        if suffixes is not None and p.suffix.lower() not in suffixes:
            raise ConfigError(
                f"{what} {shown}: unsupported extension "
                f"{p.suffix or '(none)'!r}; use one of {', '.join(suffixes)}"
            )
        ancestor = p.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            if ancestor.is_symlink():  # a dangling or looping link
                break
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            raise ConfigError(f"{what} {shown}: {str(ancestor)!r} is a file, not a folder")
        if len(p.name.encode()) > 255:
            raise ConfigError(f"{what} {shown}: file name too long")
        if ancestor.is_dir() and not os.access(ancestor, os.W_OK | os.X_OK):
            raise ConfigError(f"{what} {shown}: folder {str(ancestor)!r} is not writable")
    except OSError as exc:
        raise ConfigError(f"{what} {shown}: {_os_reason(exc)}") from exc
    return p


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (see :func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as indented strict JSON (NaN/inf → null), whole or not at all.

    >>> import tempfile, json, pathlib
    >>> d = tempfile.mkdtemp()
    >>> p = write_json_atomic(pathlib.Path(d) / "r.json", {"a": 1})
    >>> json.loads(p.read_text())
    {'a': 1}
    """
    return write_text_atomic(path, dumps_strict(payload) + "\n")


def _os_reason(exc: OSError) -> str:
    """A short reason for an :class:`OSError` (``Is a directory``, ``Permission denied``, ...)."""
    return exc.strerror or type(exc).__name__


def read_text(
    path: str | os.PathLike,
    *,
    what: str = "file",
    encoding: str = "utf-8",
    max_bytes: int | None = None,
) -> str:
    """The text of ``path``, every failure a one-line :class:`ConfigError` naming the file.

    Guards a missing file, a directory, an unreadable file, a symlink loop, a path under a
    file, a name too long, a NUL in the name, binary or non-UTF-8 (e.g. UTF-16) content and,
    with ``max_bytes``, a file larger than that.

    Raises:
        ConfigError: ``"<what> not found: 'x'"``, ``"cannot read <what> 'x': Is a directory"``,
            ``"<what> 'x' is not UTF-8 text ..."``.

    >>> import tempfile
    >>> read_text(tempfile.mkdtemp(), what="config")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roofprof.errors.ConfigError: cannot read config '...': Is a directory
    """
    name = str(path)
    shown = repr(name if len(name) <= 200 else name[:200] + "...")
    try:
        p = Path(path)
        if max_bytes is not None and p.is_file() and p.stat().st_size > max_bytes:
            raise ConfigError(f"{what} {shown} is larger than {max_bytes} bytes")
        data = p.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} not found: {shown}") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"cannot read {what} {shown}: Is a directory") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {shown}: {_os_reason(exc)}") from exc
    except ValueError as exc:  # embedded NUL byte in the name
        raise ConfigError(f"cannot read {what} {shown}: {exc}") from exc
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:4096]:
        raise ConfigError(f"{what} {shown} is not UTF-8 text (binary or UTF-16 content)")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {shown} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from exc


#: Deepest JSON nesting :func:`loads_json` accepts (real configs and results nest < 10 deep).
MAX_JSON_DEPTH = 64
#: Longest integer literal :func:`loads_json` accepts (in digits).
MAX_JSON_INT_DIGITS = 40


def _depth_ok(text: str, limit: int) -> bool:
    """True when the ``[``/``{`` nesting of ``text`` (outside strings) stays within ``limit``."""
    depth, in_string, escaped = 0, False, False
    if text.count("[") + text.count("{") <= limit:
        return True
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"integer of {len(literal.lstrip('-'))} digits")
    return int(literal)


def loads_json(text: str, label: str) -> Any:
    """Parse JSON ``text`` (from ``label``); malformed, too deep or absurd input is a ConfigError.

    ``NaN``/``Infinity`` literals are read (as Python floats) so that the range checks of the
    caller can name the field; integers longer than :data:`MAX_JSON_INT_DIGITS` digits and
    nesting deeper than :data:`MAX_JSON_DEPTH` are refused.

    >>> loads_json('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    """
    if not _depth_ok(text, MAX_JSON_DEPTH):
        raise ConfigError(
            f"{label} is not usable JSON (nested deeper than {MAX_JSON_DEPTH} levels)"
        )
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{label} is not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{label} is not usable JSON ({str(exc).splitlines()[0][:80]})") from exc


def read_json(path: str | os.PathLike, *, what: str = "file") -> Any:
    """Read a JSON file; any failure (see :func:`read_text`, :func:`loads_json`) is one
    :class:`ConfigError` line naming the file."""
    text = read_text(path, what=what)
    return loads_json(text, repr(str(path)))
