"""The device-code package imports nothing from roofprof (read from the source with ``ast``).

The kernels sit in ``kernels/`` at the repository root or in ``roofprof/kernels/``; both places
are checked, whichever exist. Imports at any depth count (function-level too), and so does a
relative import that climbs out of the package (``from .. import units``) or an
``importlib.import_module("roofprof...")`` call.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOCATIONS = (REPO / "kernels", REPO / "roofprof" / "kernels")


def _kernel_dirs() -> list[Path]:
    found: dict[Path, Path] = {}
    for d in LOCATIONS:
        if (d / "__init__.py").is_file():
            found.setdefault(d.resolve(), d)
    return list(found.values())


def _is_roofprof(name: str) -> bool:
    return name == "roofprof" or name.startswith("roofprof.")


def roofprof_imports(source: str) -> list[str]:
    """``line: statement`` for every import of roofprof in ``source`` (at any depth)."""
    hits: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if _is_roofprof(a.name)]
        elif isinstance(node, ast.ImportFrom):
            climbs = node.level > 1  # past the kernels package: into roofprof once moved
            names = [node.module or "."] if climbs or _is_roofprof(node.module or "") else []
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0] if node.args else None
            dynamic = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            names = (
                [arg.value]
                if called in ("import_module", "__import__") and dynamic and _is_roofprof(arg.value)
                else []
            )
        else:
            continue
        hits += [(node.lineno, name) for name in names]
    return [f"{line}: {name}" for line, name in sorted(hits)]


def test_the_kernel_package_is_found():
    dirs = _kernel_dirs()
    assert dirs, f"no kernels package in {', '.join(str(d) for d in LOCATIONS)}"
    assert all((d / "cuda_models.py").is_file() for d in dirs)


@pytest.mark.parametrize("directory", _kernel_dirs(), ids=lambda d: str(d.relative_to(REPO)))
def test_no_kernel_module_imports_roofprof(directory):
    files = sorted(directory.rglob("*.py"))
    assert len(files) > 3
    bad = {
        str(path.relative_to(REPO)): hits
        for path in files
        if (hits := roofprof_imports(path.read_text(encoding="utf-8")))
    }
    assert not bad, f"kernel modules import roofprof (device code must stand alone): {bad}"


def test_the_check_sees_every_kind_of_import():
    source = (
        "import numpy as np\n"
        "from . import cuda_launch\n"
        "from .cuda_launch import Launch\n"
        "def f():\n"
        "    from roofprof.units import si\n"
        "    import roofprof.errors\n"
        "    from .. import results\n"
        "    importlib.import_module('roofprof.specs')\n"
        "    importlib.import_module('numpy')\n"
    )
    assert roofprof_imports(source) == [
        "5: roofprof.units",
        "6: roofprof.errors",
        "7: .",
        "8: roofprof.specs",
    ]
