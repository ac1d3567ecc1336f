"""How much a roofline measurement does: :class:`RooflinePlan`, sized by the device.

A device builds its plan (``device.roofline_plan(name)``) through :meth:`RooflinePlan.sized`
from its caches and compute units; :func:`roofprof.roofline.probes.measure_roofline` runs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from roofprof.devices.base import DeviceInfo, Probe
from roofprof.errors import ConfigError
from roofprof.roofline.plateaus import DRAM_FACTOR, level_windows
from roofprof.specs import BYTES_PER_ELEMENT

__all__ = ["KiB", "MiB", "PLANS", "SWEEP_MAX_FACTOR", "RooflinePlan", "replace_plan"]

#: The working-set sweep runs up to this many times the last-level cache.
SWEEP_MAX_FACTOR = 16
PLANS = ("full", "quick", "test")
KiB, MiB = 1024, 1024**2


@dataclass(frozen=True)
class RooflinePlan:
    """How much to measure. A device builds it (``device.roofline_plan(name)``, through
    :meth:`sized`); every size in bytes, time in s.

    ``intensities`` are target FLOP/byte values; an intensity probe of dtype *d* gets
    ``k = intensity · itemsize(d)`` FMAs per element (one element read and written:
    ``2·itemsize`` bytes, ``2k`` FLOPs), skipped when that is not a power of two ≥ 1.
    """

    name: str
    working_set_sizes: tuple[int, ...]
    point_budget_s: float
    target_call_s: float
    compute_budget_s: float
    compute_call_s: float
    gemm_sizes: tuple[int, ...]
    gemm_budget_s: float
    intensity_working_set_bytes: int
    intensities: tuple[float, ...]
    intensity_budget_s: float
    intensity_dtypes: tuple[str, ...] = ("fp64",)
    min_repeats: int = 5
    warmup_s: float = 0.01
    flush_intensity: bool = True
    intensity_max_call_flops: float = 0.0
    #: Timing budget of a sweep point on the DRAM plateau (≥ DRAM_FACTOR × the last-level
    #: cache): a shared host's bandwidth moves within a second, and a best-of over a few
    #: tens of milliseconds misses its fast moments (BabelStream's best is over 50 calls of
    #: each kernel, ~1 s of it, spread over its 5-second run).
    dram_point_budget_s: float = 0.0
    #: Shortest call (s) at a sweep point on the DRAM plateau: more passes per call until a
    #: call lasts this long (0: ``target_call_s``). A call's fixed cost (waking the worker
    #: threads, which a busy host can delay by milliseconds) counts against a few-ms call
    #: and reads as lost bandwidth; BabelStream's calls at its default size last 10-20 ms.
    dram_call_s: float = 0.0

    @classmethod
    def for_device(cls, info: DeviceInfo, name: str = "full") -> RooflinePlan:
        """The plan ``name`` that the backend of ``info.kind`` declares for this device.

        The sizing numbers belong to the backends (``roofprof.devices.cpu.cpu_roofline_plan``,
        ``roofprof.devices.cuda.cuda_roofline_plan``); a device also offers its plan as
        ``device.roofline_plan(name)``.

        Raises:
            ConfigError: unknown plan name.
            UnknownNameError: no backend of that kind.
        """
        from roofprof.devices import backend

        return backend(info.kind).roofline_plan(info, name)

    @classmethod
    def sized(
        cls, info: DeviceInfo, name: str, *, min_intensity_working_set_bytes: int = 0, **knobs: Any
    ) -> RooflinePlan:
        """The ``full``, ``quick`` or ``test`` plan sized from the device's caches.

        Working sets run from ``2 KiB × compute units`` (at least 4 KiB) to
        ``16 × LLC`` (``full``: step √2; ``quick``: step 2; ``test``: one size per level),
        so that the DRAM plateau (from ``8 × LLC``, see :func:`level_windows`) has points.
        The intensity sweep works on ``8 ×`` all caches together (at least
        ``min_intensity_working_set_bytes``), shrunk for the points whose call would exceed
        ``intensity_max_call_flops`` (far right of the ridge, where the working set no longer
        matters). ``knobs`` are the device's budgets and sizes for ``full``/``quick`` (the
        other fields of this record); ``test`` is the same tiny plan on every device.

        Raises:
            ConfigError: unknown plan name.
        """
        if name not in PLANS:
            raise ConfigError(f"unknown plan {name!r}; valid: {', '.join(PLANS)}")
        llc = info.last_level_cache_bytes or 32 * MiB
        total_cache = sum(info.cache_bytes.values()) or llc
        lo = max(4 * KiB, 2 * KiB * max(1, info.compute_units))
        ws_int = max(DRAM_FACTOR * total_cache, 4 * MiB, int(min_intensity_working_set_bytes))
        if name == "test":
            windows = level_windows(info.cache_bytes)
            sizes = tuple(hi for _, _, hi in windows if math.isfinite(hi)) + (DRAM_FACTOR * llc,)
            if len(sizes) < 2:
                sizes = (lo, 16 * lo, max(2 * MiB, llc // 2), DRAM_FACTOR * llc)
            return cls(
                name=name,
                working_set_sizes=tuple(sorted(set(_round_kib(s) for s in sizes))),
                point_budget_s=0.004,
                target_call_s=0.001,
                compute_budget_s=0.01,
                compute_call_s=0.002,
                gemm_sizes=(128,),
                gemm_budget_s=0.01,
                intensity_working_set_bytes=1 * MiB,
                intensities=(0.125, 1.0, 8.0),
                intensity_budget_s=0.005,
                min_repeats=2,
                warmup_s=0.0,
            )
        step = 2.0 if name == "quick" else math.sqrt(2.0)
        sizes = _geometric(lo, SWEEP_MAX_FACTOR * llc, step)
        return cls(name=name, working_set_sizes=sizes, intensity_working_set_bytes=ws_int, **knobs)

    def intensity_working_set(self, intensity: float) -> int:
        """Working set (bytes) for the sweep point at ``intensity`` FLOP/byte.

        The full ``intensity_working_set_bytes`` unless a call would then exceed
        ``intensity_max_call_flops`` (``intensity × 2 × working set``); never below 1 MiB.
        """
        ws = self.intensity_working_set_bytes
        if self.intensity_max_call_flops and intensity * 2 * ws > self.intensity_max_call_flops:
            ws = max(1 * MiB, int(self.intensity_max_call_flops / (2 * intensity)))
        return min(ws, self.intensity_working_set_bytes)

    def fmas_per_element(self, dtype: str) -> list[tuple[float, int]]:
        """``(target intensity, k)`` pairs this plan runs for an intensity probe of ``dtype``."""
        item = BYTES_PER_ELEMENT.get(dtype, 4)
        out = []
        for intensity in self.intensities:
            k = intensity * item
            if k >= 1 and float(k).is_integer() and int(k) & (int(k) - 1) == 0:
                out.append((intensity, int(k)))
        return out

    def memory_needed_bytes(self, info: DeviceInfo, probes: Sequence[Probe]) -> dict[str, int]:
        """Upper bound of what the plan allocates at once, by use (bytes)."""
        kinds = {p.kind for p in probes}
        need: dict[str, int] = {}
        n_bw = sum(1 for p in probes if p.kind == "bandwidth" and p.level is None)
        if n_bw:
            need["bandwidth sweep"] = n_bw * (max(self.working_set_sizes) + 64 * KiB)
        if "intensity" in kinds and self.intensity_dtypes:
            need["intensity sweep"] = len(self.intensity_dtypes) * self.intensity_working_set_bytes
            if self.flush_intensity:
                need["flush buffer"] = max(2 * sum(info.cache_bytes.values()), 8 * MiB)
        if "gemm" in kinds and self.gemm_sizes:
            need["gemm"] = 3 * max(self.gemm_sizes) ** 2 * 8
        return need

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _round_kib(n: float) -> int:
    return max(KiB, int(round(n / KiB)) * KiB)


def _geometric(lo: int, hi: int, step: float) -> tuple[int, ...]:
    sizes, s = [], float(lo)
    while s <= hi * 1.0001:
        sizes.append(_round_kib(s))
        s *= step
    return tuple(sorted(set(sizes)))


def replace_plan(plan: RooflinePlan, **changes: Any) -> RooflinePlan:
    """A copy of ``plan`` with fields changed (e.g. ``intensities``)."""
    return replace(plan, **changes)
