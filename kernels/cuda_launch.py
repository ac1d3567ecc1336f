"""The launch record and the input checks that every host model of ``kernels/cuda/`` shares.

:class:`Launch` (source, entry, grid, block, shared memory), the dtype sizes
(:data:`DTYPE_BYTES`), the static shared-memory limit, and the small checks that raise
``ValueError`` for a bad shape or dtype. No GPU, no I/O, nothing from roofprof.

>>> Launch("probes.cu", "probe_empty", (2, 1, 1), (32, 1, 1)).threads
64
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DTYPE_BYTES",
    "Launch",
    "STATIC_SMEM_LIMIT_BYTES",
    "cdiv",
    "check_dtype",
    "check_positive",
]


DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
"""Storage bytes per element of each dtype string (tf32 is stored as fp32)."""

STATIC_SMEM_LIMIT_BYTES = 48 * 1024
"""Static shared memory a block may declare without an opt-in (all kernels here stay within it)."""


@dataclass(frozen=True)
class Launch:
    """One kernel launch: source file, entry point, grid and block (x, y, z), shared memory.

    ``dynamic_smem_bytes`` is what the host passes at launch (all kernels here use static shared
    memory only, so it is 0); ``static_smem_bytes`` is what the kernel declares (ptxas reports it).
    """

    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int = 0
    static_smem_bytes: int = 0

    @property
    def threads(self) -> int:
        """Total threads launched."""
        return math.prod(self.grid) * math.prod(self.block)


def cdiv(a: int, b: int) -> int:
    """Ceiling division ``ceil(a / b)`` of integers (``b > 0``).

    >>> cdiv(129, 128)
    2
    """
    return -(-a // b)


def check_positive(**dims: int) -> None:
    """Raise ``ValueError`` naming the first of ``dims`` that is not a positive integer.

    >>> check_positive(M=1, K=0)
    Traceback (most recent call last):
    ValueError: K must be a positive integer, got 0
    """
    for name, value in dims.items():
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_dtype(dtype: str, allowed: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming ``dtype`` and the valid choices unless it is in ``allowed``.

    >>> check_dtype("fp8", ("bf16", "fp16"))
    Traceback (most recent call last):
    ValueError: dtype 'fp8' not supported here; valid: bf16, fp16
    """
    if dtype not in allowed:
        raise ValueError(f"dtype {dtype!r} not supported here; valid: {', '.join(allowed)}")
