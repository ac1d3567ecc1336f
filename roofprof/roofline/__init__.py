"""Rooflines: ceilings, attainable performance, ridge points, and points placed on them.

A :class:`Roofline` is a set of :class:`Ceiling` s: compute roofs per dtype (FLOP/s) and
memory slopes per level (bytes/s). It does not know how its ceilings were obtained: from a
datasheet (``Roofline.from_spec``) or measured by probes (``roofprof.roofline.probes``); each
ceiling says which (``source``) and at what clock.

>>> from roofprof.specs import load_gpu
>>> r = Roofline.from_spec(load_gpu("h100-sxm"))
>>> round(r.ridge("bf16"), 1)
295.3
>>> r.bound(1.0, "bf16")
'memory'
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.specs import GpuSpec

__all__ = [
    "KINDS",
    "MEMORY_LEVELS",
    "SOURCES",
    "Ceiling",
    "Placement",
    "Point",
    "Roofline",
    "load_roofline",
    "merge",
    "place",
]

MEMORY_LEVELS = ("dram", "l3", "l2", "l1", "smem")
KINDS = ("compute", "memory")
SOURCES = ("spec", "measured")
#: Range (low, high) of a ceiling value :func:`load_roofline` accepts without a warning:
#: FLOP/s from a slow CPU core to beyond any accelerator, bytes/s from 10 MB/s to 1 PB/s.
PLAUSIBLE = {"compute": (1e6, 1e17), "memory": (1e7, 1e15)}


class RooflineWarning(UserWarning):
    """A roofline file that loads but should not be trusted as is (interrupted, implausible)."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Ceiling:
    """One roof: ``value`` in FLOP/s (``kind="compute"``, with ``dtype``) or bytes/s
    (``kind="memory"``, with ``level``). ``source`` is ``spec`` or ``measured``;
    ``clock_mhz`` the clock it holds at (datasheet clock, or median clock seen)."""

    name: str
    kind: str
    value: float
    dtype: str | None = None
    level: str | None = None
    source: str = "spec"
    clock_mhz: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(
                f"ceiling {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if self.kind == "compute" and not self.dtype:
            raise ConfigError(f"compute ceiling {self.name!r} needs a dtype")
        if self.kind == "memory" and self.level not in MEMORY_LEVELS:
            raise ConfigError(
                f"memory ceiling {self.name!r}: level must be one of {', '.join(MEMORY_LEVELS)}"
            )
        if not (self.value > 0 and math.isfinite(self.value)):
            raise ConfigError(
                f"ceiling {self.name!r}: value must be a positive finite number, got {self.value!r}"
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceiling:
        """A ceiling from its JSON object, every field type-checked.

        Raises:
            ConfigError: not an object, a missing ``name``/``kind``/``value``, a field of the
                wrong type (``value: true``, a numeric ``dtype``) or a value out of range.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"a ceiling must be a JSON object, got {_short(d)}")
        for key in ("name", "kind", "value"):
            if d.get(key) is None:
                raise ConfigError(f"ceiling {_short(d.get('name', '?'))}: missing field {key!r}")
        name = d["name"]
        for key in ("name", "kind", "dtype", "level", "source", "note"):
            v = d.get(key)
            if v is not None and not isinstance(v, str):
                raise ConfigError(
                    f"ceiling {_short(name)}: field {key!r} must be a string, got {_short(v)}"
                )
        for key in ("value", "clock_mhz"):
            v = d.get(key)
            if v is None and key == "clock_mhz":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(
                    f"ceiling {_short(name)}: field {key!r} must be a number, got {_short(v)}"
                )
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(
                    f"ceiling {_short(name)}: field {key!r} must be a positive "
                    f"finite number, got {_short(v)}"
                )
        if d.get("source") is not None and d["source"] not in SOURCES:
            raise ConfigError(
                f"ceiling {_short(name)}: source must be one of "
                f"{', '.join(SOURCES)}, got {_short(d['source'])}"
            )
        fields = {
            k: d[k]
            for k in ("name", "kind", "value", "dtype", "level", "source", "clock_mhz", "note")
            if k in d and d[k] is not None
        }
        fields["value"] = float(fields["value"])
        return cls(**fields)


@dataclass(frozen=True)
class Point:
    """A kernel or op placed on a roofline: what it did (FLOPs, bytes) in ``seconds``."""

    name: str
    flops: float
    bytes: float
    seconds: float
    dtype: str
    level: str = "dram"
    source: str = "analytic"  # analytic | measured | counters

    @property
    def intensity(self) -> float:
        """FLOP per byte at ``level``."""
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else float("nan")

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else float("nan")


@dataclass(frozen=True)
class Roofline:
    """A machine's roofline; ``device`` names the machine."""

    device: str
    ceilings: tuple[Ceiling, ...]

    # -- lookup --------------------------------------------------------------------
    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.dtype for c in self.ceilings if c.dtype is not None))

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.level for c in self.ceilings if c.level is not None))

    def compute_ceiling(self, dtype: str) -> Ceiling:
        """The highest compute ceiling for ``dtype``.

        Raises:
            ConfigError: no ceiling for that dtype (the message lists those there are).
        """
        found = [c for c in self.ceilings if c.kind == "compute" and c.dtype == dtype]
        if not found:
            raise ConfigError(
                f"{self.device} has no {dtype} compute ceiling; "
                f"dtypes: {', '.join(self.dtypes) or 'none'}"
            )
        return max(found, key=lambda c: c.value)

    def memory_ceiling(self, level: str = "dram") -> Ceiling:
        """The highest bandwidth ceiling at ``level``; raises ConfigError if there is none."""
        found = [c for c in self.ceilings if c.kind == "memory" and c.level == level]
        if not found:
            raise ConfigError(
                f"{self.device} has no {level} bandwidth ceiling; "
                f"levels: {', '.join(self.levels) or 'none'}"
            )
        return max(found, key=lambda c: c.value)

    def compute_peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``."""
        return self.compute_ceiling(dtype).value

    def memory_bandwidth(self, level: str = "dram") -> float:
        """Bandwidth at ``level`` in bytes/s."""
        return self.memory_ceiling(level).value

    # -- the model -------------------------------------------------------------------
    def attainable(self, intensity: float, dtype: str, level: str = "dram") -> float:
        """Attainable FLOP/s at ``intensity`` (FLOP/byte): min(peak, bandwidth × intensity)."""
        return min(self.compute_peak(dtype), self.memory_bandwidth(level) * intensity)

    def ridge(self, dtype: str, level: str = "dram") -> float:
        """Intensity (FLOP/byte) where the memory slope meets the compute roof."""
        return self.compute_peak(dtype) / self.memory_bandwidth(level)

    def bound(self, intensity: float, dtype: str, level: str = "dram") -> str:
        """``"memory"`` left of the ridge, ``"compute"`` at or right of it."""
        return "memory" if intensity < self.ridge(dtype, level) else "compute"

    def time_s(self, flops: float, bytes_: float, dtype: str, level: str = "dram") -> float:
        """Lower-bound time: max(flops / peak, bytes / bandwidth), in seconds."""
        return max(flops / self.compute_peak(dtype), bytes_ / self.memory_bandwidth(level))

    def scaled(self, factors: Mapping[str, float]) -> Roofline:
        """A copy with compute ceilings of the named dtypes multiplied (e.g. by clock seen / spec
        clock)."""
        out = []
        for c in self.ceilings:
            f = factors.get(c.dtype, 1.0) if c.kind == "compute" and c.dtype else 1.0
            out.append(Ceiling(**{**asdict(c), "value": c.value * f}))
        return Roofline(self.device, tuple(out))

    # -- construction / IO -------------------------------------------------------------
    @classmethod
    def from_spec(cls, gpu: GpuSpec) -> Roofline:
        """The datasheet roofline of ``gpu``: one compute roof per dtype, DRAM/HBM bandwidth."""
        ceilings = []
        for key, value in gpu.peak_flops_per_s.items():
            tensor = key not in ("fp64", "fp32")
            dtype = "fp64" if key == "fp64_tensor" else key
            ceilings.append(
                Ceiling(
                    name=(
                        f"{key.replace('_tensor', '')} "
                        f"{'tensor' if tensor else 'CUDA cores'} (datasheet)"
                    ),
                    kind="compute",
                    value=value,
                    dtype=dtype,
                    source="spec",
                    clock_mhz=gpu.tensor_clock_mhz if tensor else gpu.vector_clock_mhz,
                )
            )
        ceilings.append(
            Ceiling(
                name=f"{gpu.memory_type} (datasheet)",
                kind="memory",
                value=gpu.memory_bytes_per_s,
                level="dram",
                source="spec",
            )
        )
        return cls(device=gpu.name, ceilings=tuple(ceilings))

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "ceilings": [asdict(c) for c in self.ceilings]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Roofline:
        """A roofline from ``to_dict()``'s JSON; every ceiling type-checked (ConfigError)."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"not a roofline: expected a JSON object, got {_short(d)}")
        for key in ("device", "ceilings"):
            if key not in d:
                raise ConfigError(f"not a roofline: missing {key!r}")
        if not isinstance(d["device"], str):
            raise ConfigError(
                f"not a roofline: 'device' must be a string, got {_short(d['device'])}"
            )
        if not isinstance(d["ceilings"], list):
            raise ConfigError("not a roofline: 'ceilings' must be a list")
        return cls(device=d["device"], ceilings=tuple(Ceiling.from_dict(c) for c in d["ceilings"]))


def load_roofline(path) -> Roofline:
    """Read a ``roofline.json`` written by ``roofprof roofline`` (or a bare ``Roofline.to_dict()``).

    Raises:
        ConfigError: the file is missing or unreadable, not JSON, holds no ceilings, or a
            ceiling has a field of the wrong type or out of range (see :meth:`Ceiling.from_dict`).

    Warns:
        RooflineWarning: the file is an interrupted run (``complete: false``), or a ceiling
            is outside :data:`PLAUSIBLE` (e.g. 1 B/s or 1e20 FLOP/s).
    """
    from roofprof.results import read_json

    data = read_json(path, what="roofline")
    complete = data.get("complete", True) if isinstance(data, Mapping) else True
    if isinstance(data, Mapping) and "roofline" in data:
        data = data["roofline"]
    if not isinstance(data, Mapping) or not data.get("ceilings"):
        raise ConfigError(f"{str(path)!r} holds no roofline ceilings")
    try:
        roofline = Roofline.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{str(path)!r}: {exc}") from exc
    if complete is not True:
        warnings.warn(
            f"{str(path)!r} is an interrupted roofline (complete: {complete!r}); "
            "its ceilings may be missing or low: re-run `roofprof roofline`",
            RooflineWarning,
            stacklevel=2,
        )
    for c in roofline.ceilings:
        low, high = PLAUSIBLE[c.kind]
        if not low <= c.value <= high:
            unit = "FLOP/s" if c.kind == "compute" else "B/s"
            warnings.warn(
                f"{str(path)!r}: ceiling {c.name!r} = {c.value:.3g} {unit} is outside "
                f"the plausible range {low:.0e}..{high:.0e} {unit}; predictions "
                "from it will be off",
                RooflineWarning,
                stacklevel=2,
            )
    return roofline


def merge(*rooflines: Roofline, device: str | None = None) -> Roofline:
    """One roofline holding all ceilings of ``rooflines`` (e.g. measured plus spec)."""
    ceilings: list[Ceiling] = []
    for r in rooflines:
        ceilings.extend(r.ceilings)
    return Roofline(device or rooflines[0].device, tuple(ceilings))


@dataclass(frozen=True)
class Placement:
    """A :class:`Point` on a roofline: the roof above it, its share of that roof, its bound.

    ``percent_of_roof`` is achieved FLOP/s over the attainable FLOP/s at the point's
    intensity (None for a point without FLOPs or time); ``percent_of_roof_time`` is the
    roofline's lower-bound time over the time taken (None without a time).
    """

    point: Point
    attainable_flops_per_s: float
    bound: str
    roof_time_s: float

    @property
    def percent_of_roof(self) -> float | None:
        p = self.point
        return (
            100.0 * p.flops_per_s / self.attainable_flops_per_s
            if p.flops > 0 and p.seconds > 0
            else None
        )

    @property
    def percent_of_roof_time(self) -> float | None:
        return 100.0 * self.roof_time_s / self.point.seconds if self.point.seconds > 0 else None

    def to_dict(self) -> dict[str, Any]:
        p = self.point
        return {
            "name": p.name,
            "intensity": p.intensity,
            "flops_per_s": p.flops_per_s,
            "attainable_flops_per_s": self.attainable_flops_per_s,
            "percent_of_roof": self.percent_of_roof,
            "bound": self.bound,
            "roof_time_s": self.roof_time_s,
            "percent_of_roof_time": self.percent_of_roof_time,
            "dtype": p.dtype,
            "level": p.level,
            "source": p.source,
        }


def place(point: Point, roofline: Roofline) -> Placement:
    """THE placement of a point on a roofline: attainable roof, bound, roof time.

    Raises:
        ConfigError: the roofline lacks the point's dtype or memory level.

    >>> from roofprof.specs import load_gpu
    >>> r = Roofline.from_spec(load_gpu("h100-sxm"))
    >>> pl = place(Point("gemv", flops=2e9, bytes=2e9, seconds=1e-3, dtype="bf16"), r)
    >>> round(pl.percent_of_roof, 1), pl.bound
    (59.7, 'memory')
    """
    p = point
    return Placement(
        p,
        roofline.attainable(p.intensity, p.dtype, p.level),
        roofline.bound(p.intensity, p.dtype, p.level),
        roofline.time_s(p.flops, p.bytes, p.dtype, p.level),
    )
