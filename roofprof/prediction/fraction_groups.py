"""Where the calibrated estimator's ceiling fractions may differ, and how far a group is
trusted: GPU generation, tensor dtype path, and a prior towards the engine's pooled fraction.

An engine reaches a different share of the memory ceiling on each GPU generation (its kernels
are tuned per architecture) and a different share of the compute ceiling on each generation
and tensor path: fp16 and bf16 run the same 16-bit tensor path, fp8, fp4 and int8 each their
own. The calibration therefore fits

* a **memory fraction per GPU generation** (``ampere``, ``ada``, ``hopper``, ...; the
  ``architecture`` of ``data/gpus.json``), from the engine's decode rows;
* a **compute fraction per generation and tensor path** (``hopper/tensor-fp8``,
  ``ampere/tensor-16``, ...), from its prefill and offline rows.

A group has few rows (often one), so its fraction is the maximum a posteriori value of

    sum over its rows of (predicted / published - 1)^2 / RESIDUAL_SCALE^2
    + (ln f - ln f_pool)^2 / PRIOR_SCALE^2

over the grid of fractions in (0, 1]: relative residuals with a scatter of
``RESIDUAL_SCALE`` (the spread published figures of one setup show), and a log-normal prior
of width ``PRIOR_SCALE`` around ``f_pool``, the engine's fraction fitted on all its rows.
With the two scales equal, one row moves its group at most half-way (in ln f) to where it
alone would put it (half-way when its time is all compute- or all memory-bound); a group with
no rows keeps ``f_pool``. Both scales are fixed constants, not fitted.

>>> compute_path("bf16"), compute_path("fp16"), compute_path("fp8")
('tensor-16', 'tensor-16', 'tensor-fp8')
>>> compute_group("a100-sxm-80gb", "fp16")
'ampere/tensor-16'
>>> import numpy as np
>>> grid = np.array([0.5, 0.6, 0.7, 0.8])
>>> float(shrunk_fraction(grid, np.zeros(4), pool=0.6))  # no data: the pool
0.6
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict

import numpy as np

from roofprof.roofline import Ceiling, Roofline

__all__ = [
    "PRIOR_SCALE",
    "RESIDUAL_SCALE",
    "TENSOR_PATHS",
    "compute_group",
    "compute_path",
    "generation_of",
    "penalized",
    "shared_tensor_path",
    "shrunk_fraction",
]

#: Scatter of one published figure around the model (relative residual, 1 sigma).
RESIDUAL_SCALE = 0.10
#: Width of the prior of a group's fraction around the engine's pooled fraction (in ln f).
PRIOR_SCALE = 0.10
#: Compute dtype -> the tensor path it runs on (fp16 and bf16 share the 16-bit path).
TENSOR_PATHS: Mapping[str, str] = {
    "fp16": "tensor-16",
    "bf16": "tensor-16",
    "fp8": "tensor-fp8",
    "fp4": "tensor-fp4",
    "int8": "tensor-int8",
    "tf32": "tensor-tf32",
    "fp32": "fp32",
    "fp64": "fp64",
}


def compute_path(dtype: str) -> str:
    """The tensor path of a compute dtype (an unknown dtype is its own path)."""
    return TENSOR_PATHS.get(dtype, dtype)


@functools.lru_cache(maxsize=64)
def generation_of(gpu: str) -> str:
    """The GPU generation (``architecture`` in ``data/gpus.json``) of ``gpu``; ``unknown``
    when the GPU or the field is missing (the engine's pooled fractions then apply)."""
    from roofprof.errors import RoofprofError
    from roofprof.specs import load_gpu

    try:
        return load_gpu(gpu).architecture or "unknown"
    except RoofprofError:
        return "unknown"


def compute_group(gpu: str, dtype: str) -> str:
    """The compute-fraction group ``generation/path`` of ``dtype`` on ``gpu``."""
    return f"{generation_of(gpu)}/{compute_path(dtype)}"


def penalized(
    sq_rel_residuals: np.ndarray, grid: np.ndarray, pool: float, prior_scale: float | None = None
) -> np.ndarray:
    """The objective of a group at each fraction of ``grid``: its rows' summed squared
    relative residuals (one value per grid point) over ``RESIDUAL_SCALE``², plus the prior
    term ``(ln f - ln pool)² / prior_scale²`` (default :data:`PRIOR_SCALE`)."""
    scale = PRIOR_SCALE if prior_scale is None else prior_scale
    prior = (np.log(grid) - np.log(pool)) ** 2 / scale**2
    return np.asarray(sq_rel_residuals) / RESIDUAL_SCALE**2 + prior


def shrunk_fraction(
    grid: np.ndarray,
    sq_rel_residuals: np.ndarray,
    *,
    pool: float,
    prior_scale: float | None = None,
) -> float:
    """The grid fraction minimising :func:`penalized` (bounded by the grid, within (0, 1])."""
    return float(grid[int(np.argmin(penalized(sq_rel_residuals, grid, pool, prior_scale)))])


def shared_tensor_path(roof: Roofline) -> Roofline:
    """A copy of ``roof`` where a compute ceiling that is only a datasheet value takes the
    measured figure of another dtype on the same tensor path (fp16 from a measured bf16 GEMM
    and back); the ceiling's ``name`` and ``note`` say so. Ceilings with their own
    measurement, and paths with no measured dtype, are kept.

    >>> from roofprof.roofline import Ceiling, Roofline
    >>> r = Roofline("g", (Ceiling("bf16 GEMM", "compute", 250e12, dtype="bf16", source="measured"),
    ...                    Ceiling("fp16 tensor", "compute", 312e12, dtype="fp16")))
    >>> shared_tensor_path(r).compute_peak("fp16")
    250000000000000.0
    """
    measured: dict[str, Ceiling] = {}
    for c in roof.ceilings:
        if c.kind == "compute" and c.dtype and c.source == "measured":
            best = measured.get(compute_path(c.dtype))
            if best is None or c.value > best.value:
                measured[compute_path(c.dtype)] = c
    out = []
    for c in roof.ceilings:
        sib = measured.get(compute_path(c.dtype)) if c.kind == "compute" and c.dtype else None
        if sib is not None and c.source != "measured" and sib.dtype != c.dtype:
            c = Ceiling(
                **{
                    **asdict(c),
                    "value": sib.value,
                    "source": "measured",
                    "name": f"{c.dtype} as {sib.name} (same tensor path)",
                    "note": f"the {sib.dtype} figure, same tensor path: {sib.note}",
                }
            )
        out.append(c)
    return Roofline(roof.device, tuple(out))
