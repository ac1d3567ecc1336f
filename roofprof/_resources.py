"""Where roofprof's shipped files are: the ``kernels/`` modules and sources, the ``data/`` folder.

The repository's top-level ``kernels/`` and ``data/`` folders are installed as the packages
``roofprof.kernels`` and ``roofprof.data`` (``pyproject.toml`` maps them). From a checkout
that is not installed they are found beside the ``roofprof`` folder instead. Host code
locates them only through this module; ``kernels/`` itself imports nothing from
``roofprof`` (its ``cuda_models.kernel_dir`` keeps its own fallback).

>>> kernels_module("cuda_models").__name__.endswith("cuda_models")
True
>>> (data_root() / "gpus.json").is_file()
True
>>> kernel_source_dir().name
'cuda'
"""

from __future__ import annotations

import importlib
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["data_root", "kernel_source_dir", "kernels_module"]

_CHECKOUT = Path(__file__).resolve().parents[1]


def kernels_module(name: str) -> ModuleType:
    """``roofprof.kernels.<name>`` (installed package), or ``kernels.<name>`` from a checkout.

    Raises:
        ModuleNotFoundError: the module is missing in both places. An import error inside
            the module (e.g. numba missing) propagates unchanged.
    """
    try:
        return importlib.import_module(f"roofprof.kernels.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in ("roofprof.kernels", f"roofprof.kernels.{name}"):
            raise
    return importlib.import_module(f"kernels.{name}")


def kernel_source_dir() -> Path:
    """The folder of the CUDA C sources (``kernels/cuda``), installed or in a checkout."""
    return Path(kernels_module("cuda_models").kernel_dir())


def data_root() -> Any:
    """The shipped data folder (``roofprof.data``, i.e. the repository's ``data/``).

    Returns an ``importlib.resources`` traversable (a :class:`~pathlib.Path` in practice):
    ``data_root() / "gpus.json"``.
    """
    try:
        return resources.files("roofprof.data")
    except ModuleNotFoundError:  # running from a source tree without installing
        return _CHECKOUT / "data"
