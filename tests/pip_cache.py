"""Test helper: exact versions of pip packages installed once into a cache folder.

Some tests need a package version other than the one installed (an old NVRTC, the oldest
numba-cuda ``pyproject.toml`` allows). pip keeps one version per environment, so
:func:`cached_install` runs ``pip install --no-deps --target`` into
``$ROOFPROF_TEST_CACHE`` (default ``~/.cache/roofprof-test``), one folder per requirement set,
and reuses it afterwards. The install goes to a temporary sibling first and is renamed into
place, so an interrupted or concurrent run never leaves a half-filled folder behind.

Offline (or with pip unable to resolve the pins) it returns None with pip's last lines, and the
calling test skips.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PIP_TIMEOUT_S = 240


def cache_root() -> Path:
    """Folder of the cached installs (created on demand)."""
    root = os.environ.get("ROOFPROF_TEST_CACHE") or str(Path.home() / ".cache" / "roofprof-test")
    return Path(root)


def cached_install(*requirements: str) -> tuple[Path | None, str]:
    """``(folder, "")`` holding exactly ``requirements`` (``name==version`` pins, no
    dependencies), installing them on first use; ``(None, why)`` when pip failed."""
    reqs = sorted(requirements)
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", "_".join(reqs))[:80]
    digest = hashlib.sha1(("|".join(reqs) + tag).encode()).hexdigest()[:8]
    target = cache_root() / f"{slug}-{tag}-{digest}"
    if (target / ".complete").is_file():
        return target, ""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        str(tmp),
        *reqs,
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        return None, f"pip install {' '.join(reqs)} timed out after {PIP_TIMEOUT_S} s"
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return None, f"pip install {' '.join(reqs)} failed (offline?): {tail}"
    (tmp / ".complete").write_text("\n".join(reqs) + "\n")
    try:
        tmp.rename(target)
    except OSError:  # a concurrent run finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return target, ""
