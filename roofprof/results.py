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
from roofprof.units import json_default

__all__ = [
    "check_writable_dir", "library_versions", "provenance", "read_json", "write_bytes_atomic",
    "write_json_atomic", "write_text_atomic",
]

_LIBRARIES = ("numpy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x", "torch",
              "transformers", "nvidia-ml-py", "pandas", "matplotlib")


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
    except OSError as exc:
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (see :func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, whole or not at all.

    >>> import tempfile, json, pathlib
    >>> d = tempfile.mkdtemp()
    >>> p = write_json_atomic(pathlib.Path(d) / "r.json", {"a": 1})
    >>> json.loads(p.read_text())
    {'a': 1}
    """
    return write_text_atomic(
        path, json.dumps(payload, indent=2, sort_keys=False, default=json_default) + "\n"
    )


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; a missing or malformed file is a :class:`ConfigError` naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {str(path)!r}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{str(path)!r} is not valid JSON (line {exc.lineno}: {exc.msg})"
        ) from exc
