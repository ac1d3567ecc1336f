"""What a profile records: each op's measurements, the chosen one, its place on the roofline.

:class:`ProfileResult` (one pass of a model: every op, the device, the roofline, the
provenance) and :class:`OpResult` (one op: every implementation's measurement, the one the
roll-up uses, its roofline placement), both with ``to_dict()`` for the JSON.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.prediction.estimators import OpTime
from roofprof.profiling.engine import Measurement
from roofprof.roofline import Point, Roofline, place
from roofprof.units import scoped
from roofprof.workload import Op, Workload

__all__ = ["OpResult", "ProfileResult"]


def _placement(point: Point, roofline: Roofline | None) -> dict[str, Any]:
    """Achieved rates, the attainable roof, percent of roof and bound of one point."""
    s = point.seconds
    d: dict[str, Any] = {
        "intensity": point.intensity if point.bytes else None,
        "flops_per_s": point.flops / s if s > 0 else None,
        "bytes_per_s": point.bytes / s if s > 0 else None,
        "attainable_flops_per_s": None,
        "percent_of_roof": None,
        "bound": None,
        "roof_time_s": None,
        "percent_of_roof_time": None,
    }
    if roofline is None or not point.bytes:
        return d
    try:
        pl = place(point, roofline)
    except ConfigError:
        return d
    d.update(
        attainable_flops_per_s=pl.attainable_flops_per_s,
        bound=pl.bound,
        roof_time_s=pl.roof_time_s,
        percent_of_roof=pl.percent_of_roof,
        percent_of_roof_time=pl.percent_of_roof_time,
    )
    return d


@dataclass(frozen=True)
class OpResult:
    """One op of the workload: every implementation's measurement and the one chosen.
    :meth:`to_dict` spells the scope in each name (``flops_per_call`` / ``flops_total``,
    ``bytes_*``, ``seconds_*``); the unscoped ``flops`` and ``bytes`` are per call and
    ``seconds`` is all calls."""

    op: Op
    measurements: tuple[Measurement, ...]
    chosen: Measurement | None
    roofline: Roofline | None = None

    @property
    def seconds(self) -> float:
        """Chosen time of one call (NaN when nothing passed)."""
        return self.chosen.seconds if self.chosen is not None else float("nan")

    def point(self) -> Point:
        """The op as a roofline point (analytic FLOPs and bytes, chosen time)."""
        op = self.op
        return Point(op.name, op.flops, op.bytes, self.seconds, op.dtype, source="measured")

    def placement(self) -> dict[str, Any]:
        """Achieved rates, the attainable roof at the op's intensity, percent of roof, bound."""
        return _placement(self.point(), self.roofline)

    def to_dict(self) -> dict[str, Any]:
        op, chosen = self.op, self.chosen
        seconds = self.seconds if chosen else None
        return {
            **op.to_dict(),
            **scoped(op.count, flops=op.flops, bytes=op.bytes, seconds=seconds),
            "flops": op.flops,  # unscoped names kept for earlier readers: per call
            "bytes": op.bytes,
            "note": op.note,
            "impl": chosen.impl if chosen else None,
            "seconds": self.seconds * op.count if chosen else None,  # all calls
            "cv": chosen.timing.cv if chosen else None,
            "clock_mhz": (chosen.telemetry or {}).get("clock_mhz") if chosen else None,
            **self.placement(),
            "implementations": [m.to_dict(op) for m in self.measurements],
        }


@dataclass(frozen=True)
class ProfileResult:
    """The profile of one pass (a prefill or a decode step) on one device."""

    workload: Workload
    ops: tuple[OpResult, ...]
    device: Mapping[str, Any]
    roofline: Roofline | None
    launch_s: float
    threads: int | None
    warnings: tuple[str, ...] = ()
    provenance: Mapping[str, Any] = field(default_factory=dict)
    roofline_source: str = ""

    @property
    def seconds(self) -> float:
        """Sum of the chosen per-op times over the pass (ops with no passing measurement
        excluded)."""
        return sum(o.seconds * o.op.count for o in self.ops if o.chosen is not None)

    def op_times(self) -> dict[tuple, OpTime]:
        """Chosen measurements keyed by shape, for
        :class:`~roofprof.prediction.rollup.MeasuredEstimator`."""
        return {o.op.shape_key: o.chosen.op_time() for o in self.ops if o.chosen is not None}

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "model": w.model.id,
            "phase": w.phase,
            "batch": w.batch,
            "prompt_tokens": w.prompt_tokens,
            "context_tokens": w.context_tokens,
            "dtype": w.dtype,
            "counting": w.counting.describe(),
            "num_layers": w.model.num_layers,
            "device": dict(self.device),
            "threads": self.threads,
            "launch_overhead_s": self.launch_s,
            "roofline_source": self.roofline_source,
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "measured_seconds": self.seconds,
            "ops": [o.to_dict() for o in self.ops],
            "warnings": list(self.warnings),
            "provenance": dict(self.provenance),
        }

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` as JSON (whole or not at all)."""
        from roofprof.results import write_json_atomic

        return write_json_atomic(path, self.to_dict())
