"""Where roofprof's shipped files are: the ``kernels/`` modules and sources, the ``data/`` folder.

The repository's top-level ``kernels/`` and ``data/`` folders are installed as the packages
``roofprof.kernels`` and ``roofprof.data`` (``pyproject.toml`` maps them; an editable
install maps them too), and are found only there: one lookup, the installed one. They stay
at the top level because ``kernels/`` is a package of its own (it imports nothing from
``roofprof``, and its tests load it alone) and ``data/gpus.json`` is the cited spec
database the documentation points to. Host code locates them only through this module.

>>> kernels_module("cuda_models").__name__.endswith("cuda_models")
True
>>> (data_root() / "gpus.json").is_file()
True
>>> kernel_source_dir().name
'cuda'
"""

from __future__ import annotations

import importlib
import os
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["cache_root", "data_root", "kernel_source_dir", "kernels_module"]


def kernels_module(name: str) -> ModuleType:
    """The module ``roofprof.kernels.<name>`` (the repository's ``kernels/<name>.py``).

    Raises:
        ModuleNotFoundError: no such module, or roofprof is not installed (``pip install
            -e .``). An import error inside the module (e.g. numba missing) propagates.
    """
    return importlib.import_module(f"roofprof.kernels.{name}")


def kernel_source_dir() -> Path:
    """The folder of the CUDA C sources (``kernels/cuda``)."""
    return Path(kernels_module("cuda_models").kernel_dir())


def data_root() -> Any:
    """The shipped data folder (``roofprof.data``, i.e. the repository's ``data/``).

    Returns an ``importlib.resources`` traversable (a :class:`~pathlib.Path` in practice):
    ``data_root() / "gpus.json"``.
    """
    return resources.files("roofprof.data")


def cache_root() -> Path:
    """Where roofprof keeps files between runs: ``$ROOFPROF_CACHE`` or ``~/.cache/roofprof``."""
    return Path(os.environ.get("ROOFPROF_CACHE") or Path.home() / ".cache" / "roofprof")
