"""Kernels on the hierarchical (L1/L2/DRAM) roofline, and counters against analytic op counts.

:func:`place_hierarchical` places each kernel at every memory level (intensity = FLOPs /
bytes at that level, against the measured or datasheet roofline); :func:`compare_with_ops`
matches kernels to the ops of a workload by NVTX range and flags excess traffic, FLOPs off
the analytic count, and FLOPs on an unexpected pipe. CPU-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roofprof.counters.errors import UnknownLevelError
from roofprof.counters.metrics import LEVELS, KernelCounters
from roofprof.counters.nvtx import nvtx_name
from roofprof.errors import ConfigError, RoofprofError
from roofprof.roofline import Point, Roofline, place

__all__ = [
    "HierarchicalPlacement",
    "LevelPlacement",
    "OpComparison",
    "TENSOR_OP_DTYPES",
    "compare_with_ops",
    "expected_pipes",
    "group_by_range",
    "place_hierarchical",
    "records_to_json",
]

# --------------------------------------------------------------------------- roofline placement


@dataclass(frozen=True)
class LevelPlacement:
    """A kernel at one memory level of the hierarchical roofline."""

    level: str
    bytes: float | None
    intensity: float | None  # FLOP/byte
    bandwidth_bytes_per_s: float | None = None
    attainable_flops_per_s: float | None = None
    bound: str | None = None  # "memory" or "compute" at this level


@dataclass(frozen=True)
class HierarchicalPlacement:
    """A kernel placed at its L1, L2 and DRAM intensities (NERSC hierarchical roofline)."""

    kernel: str
    range_name: str | None
    dtype: str | None
    time_s: float | None
    flops: float | None
    flops_per_s: float | None
    levels: tuple[LevelPlacement, ...]
    compute_peak_flops_per_s: float | None = None

    def level(self, name: str) -> LevelPlacement:
        """The placement at ``name`` ("l1", "l2", "dram")."""
        for lp in self.levels:
            if lp.level == name:
                return lp
        raise UnknownLevelError(name, LEVELS)

    @property
    def limiting_level(self) -> str | None:
        """The level whose ceiling is lowest at this kernel's intensity (its bottleneck)."""
        known = [lp for lp in self.levels if lp.attainable_flops_per_s is not None]
        return min(known, key=lambda lp: lp.attainable_flops_per_s).level if known else None  # type: ignore[arg-type,return-value]

    @property
    def fraction_of_attainable(self) -> float | None:
        """Achieved FLOP/s over the lowest attainable ceiling."""
        known = [lp.attainable_flops_per_s for lp in self.levels if lp.attainable_flops_per_s]
        if not known or self.flops_per_s is None:
            return None
        return self.flops_per_s / min(known)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kernel": self.kernel,
            "range": self.range_name,
            "dtype": self.dtype,
            "time_s": self.time_s,
            "flops": self.flops,
            "flops_per_s": self.flops_per_s,
            "compute_peak_flops_per_s": self.compute_peak_flops_per_s,
            "limiting_level": self.limiting_level,
            "fraction_of_attainable": self.fraction_of_attainable,
            "levels": [lp.__dict__.copy() for lp in self.levels],
        }


def _level_placement(
    rec: KernelCounters, level: str, dtype: str | None, roofline: Roofline | None
) -> LevelPlacement:
    """``rec`` at one level: a :class:`~roofprof.roofline.Point` placed by
    :func:`roofprof.roofline.place`."""
    b, intensity = rec.bytes_at(level), rec.intensity(level)
    if roofline is None:
        return LevelPlacement(level, b, intensity)
    try:
        bw = roofline.memory_bandwidth(level)
    except RoofprofError:  # the roofline has no ceiling at this level
        return LevelPlacement(level, b, intensity)
    if intensity is None or not dtype:
        return LevelPlacement(level, b, intensity, bw)
    point = Point(
        rec.range_name or rec.name,
        rec.flops or 0.0,
        b or 0.0,
        rec.time_s or 0.0,
        dtype,
        level=level,
        source="counters",
    )
    try:
        placed = place(point, roofline)
    except RoofprofError:  # no compute ceiling for the kernel's dtype
        return LevelPlacement(level, b, intensity, bw)
    return LevelPlacement(level, b, intensity, bw, placed.attainable_flops_per_s, placed.bound)


def place_hierarchical(
    records: Iterable[KernelCounters], roofline: Roofline | None = None
) -> list[HierarchicalPlacement]:
    """Place each kernel at its L1, L2 and DRAM intensities, on ``roofline`` when given.

    Each level is a :class:`roofprof.roofline.Point` (``level=...``, ``source="counters"``)
    placed by :func:`roofprof.roofline.place`, the one placement. A level the roofline
    lacks keeps ``bandwidth_bytes_per_s`` and ``attainable_flops_per_s`` None; a dtype it
    lacks keeps ``attainable_flops_per_s`` and ``bound`` None. The compute ceiling is
    that of the kernel's dominant pipe's dtype.
    """
    out = []
    for rec in records:
        dtype = rec.roofline_dtype
        peak = None
        if roofline is not None and dtype:
            try:
                peak = roofline.compute_peak(dtype)
            except RoofprofError:
                peak = None
        levels = tuple(_level_placement(rec, level, dtype, roofline) for level in LEVELS)
        out.append(
            HierarchicalPlacement(
                rec.name,
                rec.range_name,
                dtype,
                rec.time_s,
                rec.flops,
                rec.flops_per_s,
                levels,
                peak,
            )
        )
    return out


# --------------------------------------------------------------------------- analytic comparison

TENSOR_OP_DTYPES = ("bf16", "fp16", "fp8", "int8", "tf32")


def expected_pipes(kind: str | None, dtype: str) -> tuple[str, ...]:
    """Pipes an op's FLOPs should run on: tensor cores for low-precision GEMM/attention.

    >>> expected_pipes("gemm", "bf16"), expected_pipes("norm", "bf16")
    (('tensor:bf16',), ('cuda:fp32', 'cuda:fp16'))
    >>> expected_pipes("gemm", "fp32")
    ('cuda:fp32',)
    """
    matmul = kind in (None, "gemm", "attention")
    if matmul and dtype in TENSOR_OP_DTYPES:
        return (f"tensor:{dtype}",)
    if matmul and dtype == "fp64":
        return ("tensor:fp64", "cuda:fp64")
    if dtype in ("fp64", "fp32"):
        return (f"cuda:{dtype}",)
    return ("cuda:fp32", "cuda:fp16")


def group_by_range(records: Iterable[KernelCounters]) -> dict[str, list[KernelCounters]]:
    """Kernels grouped by their innermost NVTX range (kernel name when there is none), in order."""
    groups: dict[str, list[KernelCounters]] = {}
    for rec in records:
        groups.setdefault(rec.range_name or rec.name, []).append(rec)
    return groups


def _total(values: Iterable[float | None]) -> float | None:
    vals = list(values)
    return None if not vals or any(v is None for v in vals) else float(sum(vals))  # type: ignore[arg-type]


@dataclass(frozen=True)
class OpComparison:
    """Counter totals of one op's kernels against the workload model's analytic counts."""

    op: str
    kernels: int
    analytic_flops: float
    counter_flops: float | None
    analytic_bytes: float
    counter_dram_bytes: float | None
    time_s: float | None
    expected_pipes: tuple[str, ...]
    flops_by_pipe: Mapping[str, float] = field(default_factory=dict, hash=False)
    flags: tuple[str, ...] = ()

    @property
    def flop_ratio(self) -> float | None:
        """Counter FLOPs / analytic FLOPs."""
        if self.counter_flops is None or not self.analytic_flops:
            return None
        return self.counter_flops / self.analytic_flops

    @property
    def excess_traffic(self) -> float | None:
        """Counter DRAM bytes / analytic minimum bytes (1.4 = 40% more traffic than needed)."""
        if self.counter_dram_bytes is None or not self.analytic_bytes:
            return None
        return self.counter_dram_bytes / self.analytic_bytes

    @property
    def expected_pipe_fraction(self) -> float | None:
        """Share of counted FLOPs that ran on the expected pipe(s)."""
        total = sum(self.flops_by_pipe.values())
        if not total:
            return None
        return sum(v for k, v in self.flops_by_pipe.items() if k in self.expected_pipes) / total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "op": self.op,
            "kernels": self.kernels,
            "time_s": self.time_s,
            "analytic_flops": self.analytic_flops,
            "counter_flops": self.counter_flops,
            "flop_ratio": self.flop_ratio,
            "analytic_bytes": self.analytic_bytes,
            "counter_dram_bytes": self.counter_dram_bytes,
            "excess_traffic": self.excess_traffic,
            "expected_pipes": list(self.expected_pipes),
            "expected_pipe_fraction": self.expected_pipe_fraction,
            "flops_by_pipe": dict(self.flops_by_pipe),
            "flags": list(self.flags),
        }


def compare_with_ops(
    records: Iterable[KernelCounters],
    ops: Iterable[Any],
    *,
    tolerance: float = 0.10,
    calls: int = 1,
) -> list[OpComparison]:
    """Compare counters with analytic op counts; flag differences beyond ``tolerance`` (10%).

    Each op (anything with ``.name``, ``.flops``, ``.bytes``, ``.dtype`` and optionally
    ``.kind``) is matched to the kernels inside its NVTX range ``nvtx_name(op.name)``, or
    to kernels named ``op.name`` when no range was recorded. Counter totals are divided
    by ``calls`` (how many times each range ran under ncu). Ops without kernels are
    skipped. Flags: ``flops_off`` (FLOPs differ by more than the tolerance),
    ``excess_traffic`` (DRAM bytes above the analytic minimum by more than it),
    ``below_min_bytes`` (DRAM bytes below the minimum: data left in or served from L2),
    ``off_expected_pipe`` (more than the tolerance of FLOPs on another pipe, e.g. CUDA
    cores instead of tensor cores), ``no_flop_counters``.

    Raises:
        ConfigError: ``calls`` < 1 or a negative tolerance.
    """
    if calls < 1:
        raise ConfigError(f"calls must be at least 1, got {calls}")
    if tolerance < 0:
        raise ConfigError(f"tolerance must be >= 0, got {tolerance}")
    groups = group_by_range(records)
    out = []
    for op in ops:
        kernels = groups.get(nvtx_name(op.name)) or groups.get(op.name)
        if not kernels:
            continue
        flops = _total(k.flops for k in kernels)
        dram = _total(k.dram_bytes for k in kernels)
        time_s = _total(k.time_s for k in kernels)
        by_pipe: dict[str, float] = {}
        for k in kernels:
            for pipe, v in k.flops_by_pipe.items():
                by_pipe[pipe] = by_pipe.get(pipe, 0.0) + v / calls
        cmp = OpComparison(
            op=op.name,
            kernels=len(kernels),
            analytic_flops=float(op.flops),
            counter_flops=None if flops is None else flops / calls,
            analytic_bytes=float(op.bytes),
            counter_dram_bytes=None if dram is None else dram / calls,
            time_s=None if time_s is None else time_s / calls,
            expected_pipes=expected_pipes(getattr(op, "kind", None), op.dtype),
            flops_by_pipe=by_pipe,
        )
        flags = []
        if cmp.counter_flops is None:
            flags.append("no_flop_counters")
        elif cmp.flop_ratio is not None and abs(cmp.flop_ratio - 1) > tolerance:
            flags.append("flops_off")
        if cmp.excess_traffic is not None:
            if cmp.excess_traffic > 1 + tolerance:
                flags.append("excess_traffic")
            elif cmp.excess_traffic < 1 - tolerance:
                flags.append("below_min_bytes")
        frac = cmp.expected_pipe_fraction
        if frac is not None and frac < 1 - tolerance:
            flags.append("off_expected_pipe")
        out.append(OpComparison(**{**cmp.__dict__, "flags": tuple(flags)}))
    return out


def records_to_json(
    records: Sequence[KernelCounters],
    placements: Sequence[HierarchicalPlacement] | None = None,
    comparisons: Sequence[OpComparison] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A JSON-ready payload: one entry per kernel (placements and comparisons when given)."""
    payload: dict[str, Any] = dict(extra)
    payload["kernels"] = [r.to_dict() for r in records]
    if placements is not None:
        payload["hierarchical"] = [p.to_dict() for p in placements]
    if comparisons is not None:
        payload["ops"] = [c.to_dict() for c in comparisons]
    return payload
