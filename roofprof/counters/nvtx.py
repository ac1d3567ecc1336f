"""NVTX ranges roofprof pushes around each op, so ncu can profile exactly those kernels."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_NVTX_INCLUDE", "NVTX_PREFIX", "nvtx_name", "nvtx_range", "op_range"]

# --------------------------------------------------------------------------- NVTX helpers

NVTX_PREFIX = "roofprof."
"""Prefix of the NVTX ranges roofprof pushes around each op."""

DEFAULT_NVTX_INCLUDE: tuple[str, ...] = (r"regex:roofprof\..*/",)
"""ncu ``--nvtx-include`` filters: push/pop ranges (trailing ``/``) whose name starts
with ``roofprof.`` in the default NVTX domain."""

_NVTX_BACKEND: tuple[Any, Any] | None = None


def nvtx_name(op_name: str) -> str:
    """The NVTX range name for an op: ``roofprof.`` + the name with ``: / @ "`` and spaces replaced.

    >>> nvtx_name("decode/layer0:attn qkv")
    'roofprof.decode_layer0_attn_qkv'
    """
    return NVTX_PREFIX + re.sub(r'[:/@"\s]', "_", op_name)


def _nvtx_backend() -> tuple[Any, Any]:
    """(push, pop) from the first NVTX binding that works: nvtx, cupy, torch; else no-ops."""
    global _NVTX_BACKEND
    if _NVTX_BACKEND is not None:
        return _NVTX_BACKEND

    def from_nvtx():
        import nvtx  # type: ignore[import-not-found]

        return (lambda n: nvtx.push_range(message=n)), (lambda: nvtx.pop_range())

    def from_cupy():
        from cupy.cuda import nvtx as cnvtx  # type: ignore[import-not-found]

        return cnvtx.RangePush, cnvtx.RangePop

    def from_torch():
        import torch.cuda.nvtx as tnvtx

        return tnvtx.range_push, tnvtx.range_pop

    for factory in (from_nvtx, from_cupy, from_torch):
        try:
            push, pop = factory()
            push("nvtx-probe")  # no roofprof. prefix: never matches the include filter
            pop()
        except Exception:
            continue
        _NVTX_BACKEND = (push, pop)
        return _NVTX_BACKEND
    _NVTX_BACKEND = (None, None)
    return _NVTX_BACKEND


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """Push an NVTX range named ``name`` (default domain) for the ``with`` block.

    Uses the ``nvtx`` package, else ``cupy.cuda.nvtx``, else ``torch.cuda.nvtx``; does
    nothing when none of them works (no CUDA, CPU-only torch). Ranges must be pushed on
    the thread that launches the kernels.

    >>> with nvtx_range("roofprof.example"):
    ...     pass
    """
    push, pop = _nvtx_backend()
    if push is None:
        yield
        return
    push(name)
    try:
        yield
    finally:
        pop()


def op_range(op_name: str) -> contextlib.AbstractContextManager[None]:
    """``nvtx_range(nvtx_name(op_name))``: the range that ties a kernel's counters to an op."""
    return nvtx_range(nvtx_name(op_name))
