"""Is a memory ceiling believable? The rule every measured roofline passes before it is used.

A bandwidth probe can read faster than the memory delivers: pages never written map to the
kernel's zero page, a deduplicating host merges identical pages, timing misses part of the
work. Two checks catch it in the same run:

* **DRAM/HBM against a reference**: the device's own reference kernel measured in the same
  run (:class:`MemoryReference`: on a CPU a BabelStream-style dot over freshly written,
  page-distinct arrays), else the datasheet's memory bandwidth. A DRAM ceiling more than
  :data:`TOLERANCE` above it is re-measured; one that stays above is replaced by the
  reference, and the result says so.
* **Each level against the faster one**: a level's ceiling more than :data:`TOLERANCE` above
  the ceiling of the level nearer the cores (L3 above L2, DRAM above L3) is flagged.

>>> judge(60e9, Reference(45e9, "dot", "same run")).ok
False
>>> judge(47e9, Reference(45e9, "dot", "same run")).ok
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from roofprof.units import fmt_rate

__all__ = [
    "LEVEL_ORDER",
    "RETRIES",
    "TOLERANCE",
    "MemoryReference",
    "Reference",
    "Verdict",
    "judge",
    "level_order_flags",
    "replacement_note",
]

#: A ceiling may read this much above its reference before it is implausible (measured
#: reference kernels on a shared host agree within a few percent; 10 % leaves room).
TOLERANCE = 0.10
#: Re-measurements of an implausible DRAM ceiling before the reference replaces it.
RETRIES = 2
#: Memory levels from the cores outwards.
LEVEL_ORDER = ("l1", "smem", "l2", "l3", "dram")


@dataclass(frozen=True)
class Reference:
    """What a DRAM ceiling is held against: bytes/s, the kernel (or datasheet) and its origin."""

    bytes_per_s: float
    name: str
    source: str


@runtime_checkable
class MemoryReference(Protocol):
    """A device that measures its own reference memory bandwidth, independent of its probes."""

    def memory_reference(self) -> Reference | None:
        """The reference bandwidth (bytes/s) measured now, or None when it cannot be."""
        ...


@dataclass(frozen=True)
class Verdict:
    """``ok`` when ``value`` is at most (1 + tolerance) × the reference; ``ratio`` = value/ref."""

    ok: bool
    ratio: float


def judge(value: float, reference: Reference, tolerance: float = TOLERANCE) -> Verdict:
    """Whether a DRAM ceiling of ``value`` bytes/s is believable against ``reference``.

    >>> judge(50e9, Reference(45e9, "dot", "same run")).ratio
    1.1111111111111112
    """
    ratio = value / reference.bytes_per_s if reference.bytes_per_s > 0 else float("nan")
    return Verdict(not ratio > 1.0 + tolerance, ratio)


def level_order_flags(
    values: Mapping[str, float], probe: str, tolerance: float = TOLERANCE
) -> list[str]:
    """Warnings for levels of one probe's sweep that read above the level nearer the cores.

    ``values``: level → bytes/s.

    >>> level_order_flags({"l2": 150e9, "l3": 170e9, "dram": 30e9}, "read")  # doctest: +ELLIPSIS
    ['L3 read 170 GB/s is 13% above L2 read 150 GB/s: implausible (a farther level ...']
    """
    levels = [lvl for lvl in LEVEL_ORDER if lvl in values]
    out = []
    for near, far in zip(levels, levels[1:], strict=False):
        if values[far] > (1.0 + tolerance) * values[near]:
            out.append(
                f"{_label(far)} {probe} {fmt_rate(values[far], 'B/s')} is "
                f"{values[far] / values[near] - 1:.0%} above {_label(near)} {probe} "
                f"{fmt_rate(values[near], 'B/s')}: implausible (a farther level cannot be "
                "faster); check the cache sizes the plan used"
            )
    return out


def replacement_note(name: str, value: float, reference: Reference, tries: Sequence[float]) -> str:
    """The warning of the DRAM ceiling ``name`` replaced by its reference after ``tries``
    re-measurements (``value``: its first reading, bytes/s)."""
    seen = ", ".join(fmt_rate(v, "B/s") for v in (value, *tries))
    ref = fmt_rate(reference.bytes_per_s, "B/s")
    return (
        f"{name} read {seen} against {reference.name} {ref} "
        f"({reference.source}): more than {TOLERANCE:.0%} above it in every try, so the "
        "reference is used as the ceiling"
    )


def _label(level: str) -> str:
    return {"smem": "shared memory"}.get(level, level.upper())
