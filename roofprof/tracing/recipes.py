"""How a traced call is rebuilt for a replay in isolation: tensors as specs, rebuilt fresh.

Shared by the tracer (which records the specs) and the result (which replays them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KEEP_INDEX_ELEMENTS", "Recipe", "TensorSpec", "build", "map_nested", "spec_of"]

#: integer/bool tensors up to this many elements are kept for replay (indices, masks)
KEEP_INDEX_ELEMENTS = 1 << 22


@dataclass
class Recipe:
    """How to rebuild one call's arguments for a replay: tensors as (shape, stride, dtype,
    device, data) specs, ``data`` kept for integer and boolean tensors only."""

    func: Any
    args: Any
    kwargs: Any


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as recorded: shape, strides, dtype, device (and data for small int/bool ones)."""

    shape: tuple
    stride: tuple
    dtype: Any
    device: Any
    data: Any = None


def map_nested(x: Any, fn: Callable[[Any], Any], kind: type) -> Any:
    """``x`` with every ``kind`` inside lists, tuples and dicts replaced by ``fn(item)``."""
    if isinstance(x, kind):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(map_nested(v, fn, kind) for v in x)
    if isinstance(x, dict):
        return {k: map_nested(v, fn, kind) for k, v in x.items()}
    return x


def spec_of(t: Any, torch: Any) -> TensorSpec:
    """The replay spec of tensor ``t`` (its values kept only for small integer/bool tensors)."""
    data = None
    if not (t.is_floating_point() or t.is_complex()) and t.numel() <= KEEP_INDEX_ELEMENTS:
        data = t.detach().clone()
    return TensorSpec(tuple(t.shape), tuple(t.stride()), t.dtype, t.device, data)


def build(spec: TensorSpec, torch: Any) -> Any:
    """A fresh tensor for a replay: same shape, strides (broadcasts kept), dtype and device;
    random values for floating point, the recorded values for integers and booleans."""
    if spec.data is not None:
        return spec.data.clone()
    extent = 1 + sum((s - 1) * st for s, st in zip(spec.shape, spec.stride, strict=False) if s > 0)
    if 0 in spec.shape:
        extent = 0
    base = (
        torch.randn(extent, dtype=spec.dtype, device=spec.device)
        if spec.dtype.is_floating_point
        else torch.zeros(extent, dtype=spec.dtype, device=spec.device)
    )
    return base.as_strided(spec.shape, spec.stride)
