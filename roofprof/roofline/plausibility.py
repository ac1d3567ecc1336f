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
    "LOCAL_ENOUGH",
    "LEVEL_ORDER",
    "RETRIES",
    "TOLERANCE",
    "MemoryReference",
    "Reference",
    "Verdict",
    "fragmentation_flags",
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
    #: Share of the reference kernel's pages followed by one in the same 2 MiB physical
    #: block (:mod:`roofprof.devices.pagemap`; None: unknown).
    physical_locality: float | None = None


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


#: Below this share of pages whose successor lies in the same 2 MiB physical block a DRAM
#: probe's buffer is called fragmented. Measured on a 2-core Zen 4 KVM guest, a triad over
#: three 256 MiB arrays alternating call by call with arrays of locality ≥ 0.99 in the same
#: process: arrays of locality 0.78/0.96/0.98 read 8-10 % slower at best while the host's
#: memory ran fast, 3-4 % while it ran slow.
LOCAL_ENOUGH = 0.90


def fragmentation_flags(points: Sequence[Mapping]) -> list[str]:
    """A warning when the DRAM points of a bandwidth sweep timed a buffer on scattered physical
    frames (``params["physical_locality"]`` below :data:`LOCAL_ENOUGH`, see
    :mod:`roofprof.devices.pagemap`): such a buffer streams slower than memory laid out in
    large blocks, so the ceiling may read low. Points without the figure say nothing.

    >>> fragmentation_flags([{"level": "dram", "params": {"physical_locality": 0.4}}])
    ... # doctest: +ELLIPSIS
    ['DRAM probe buffer on fragmented physical memory (only 40% of its pages followed by ...']
    >>> fragmentation_flags([{"level": "dram", "params": {"physical_locality": 0.99}}])
    []
    """
    seen = [
        c
        for p in points
        if p.get("level") == "dram"
        and (c := (p.get("params") or {}).get("physical_locality")) is not None
    ]
    if not seen or min(seen) >= LOCAL_ENOUGH:
        return []
    return [
        f"DRAM probe buffer on fragmented physical memory (only {min(seen):.0%} of its pages "
        "followed by one in the same 2 MiB block): it streams slower than memory laid out in "
        "large blocks, so the DRAM ceilings may read low; compacting free memory first avoids "
        "it (as root: echo 1 > /proc/sys/vm/compact_memory)"
    ]


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
