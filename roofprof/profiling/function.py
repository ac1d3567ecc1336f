"""Any function or kernel timed and placed on this machine's roofline: :func:`measure`.

The public ``roofprof.measure``. It sits above :mod:`roofprof.cache` (the roofline is
resolved from the cache, a quick measurement or the datasheet), which stores the records
of :mod:`roofprof.profiling.engine`; the op measurement engine itself stays below both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError
from roofprof.roofline import Point, Roofline, place
from roofprof.timing import Timing, benchmark

if TYPE_CHECKING:
    from roofprof.devices.base import Device

__all__ = ["MeasureResult", "measure"]


@dataclass(frozen=True)
class MeasureResult:
    """A user function placed on the roofline (see :func:`measure`)."""

    name: str
    timing: Timing
    flops: float
    bytes: float
    dtype: str
    roofline: Roofline | None
    roofline_source: str = ""

    @property
    def seconds(self) -> float:
        return self.timing.median_s

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds

    def point(self) -> Point:
        return Point(self.name, self.flops, self.bytes, self.seconds, self.dtype, source="measured")

    def placement(self) -> dict[str, Any]:
        """Attainable roof at the intensity, percent of roof and bound (None without a roofline)."""
        if self.roofline is None or not self.bytes:
            return {"attainable_flops_per_s": None, "percent_of_roof": None, "bound": None}
        pl = place(self.point(), self.roofline)
        pct = pl.percent_of_roof if self.flops else pl.percent_of_roof_time
        return {
            "attainable_flops_per_s": pl.attainable_flops_per_s,
            "percent_of_roof": pct,
            "bound": pl.bound,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "flops": self.flops,
            "bytes": self.bytes,
            "dtype": self.dtype,
            "intensity": self.intensity if math.isfinite(self.intensity) else None,
            "flops_per_s": self.flops_per_s,
            "bytes_per_s": self.bytes_per_s,
            **self.placement(),
            "timing": self.timing.to_dict(),
            "roofline_source": self.roofline_source,
        }


def measure(
    fn: Callable[[], Any],
    *,
    flops: float,
    bytes: float,
    dtype: str = "fp32",
    device: Device | str = "auto",
    roofline: Roofline | str | os.PathLike | None = "auto",
    name: str | None = None,
    budget_s: float = 0.2,
    warmup_s: float = 0.05,
    flush: bool = False,
) -> MeasureResult:
    """Time any function or kernel and place it on this machine's roofline.

    Args:
        fn: a callable with no arguments doing the work once (on a GPU it may return before
            the work ends: the device clock synchronises).
        flops, bytes: the work of one call (FLOPs, and the minimum bytes it must move).
        dtype: the dtype whose compute roof applies.
        device: where it runs (for the clock, flush and roofline).
        roofline: a Roofline, a roofline.json path, ``"auto"`` (cached/quick-measured, or
            the datasheet for a known GPU) or ``"none"``.
        flush: flush the caches before every timed call (cold data).

    Returns:
        A :class:`MeasureResult`: median time, achieved FLOP/s and bytes/s, intensity,
        attainable roof, percent of roof, bound.

    Raises:
        ConfigError: non-positive flops and bytes together, or an unusable roofline.

    >>> import numpy as np
    >>> a = np.ones((64, 64), dtype=np.float32)
    >>> r = measure(lambda: a @ a, flops=2 * 64**3, bytes=3 * 64 * 64 * 4, roofline="none",
    ...             budget_s=0.01)
    >>> r.seconds > 0 and round(r.intensity, 1)
    10.7
    """
    if flops < 0 or bytes < 0 or (flops == 0 and bytes == 0):
        raise ConfigError(
            "measure() needs flops >= 0 and bytes >= 0, not both zero; "
            f"got flops={flops}, bytes={bytes}"
        )
    from roofprof.cache import resolve_roofline
    from roofprof.devices import select

    dev = select(device) if isinstance(device, str) else device
    roof, source = resolve_roofline(roofline, dev)
    timing = benchmark(
        fn,
        clock=dev.clock(),
        budget_s=budget_s,
        warmup_s=warmup_s,
        flush=dev.flush if flush else None,
    )
    return MeasureResult(
        name or getattr(fn, "__name__", "fn"),
        timing,
        float(flops),
        float(bytes),
        dtype,
        roof,
        source,
    )
