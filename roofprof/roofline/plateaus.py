"""Plateaus of a working-set sweep: which bandwidth points belong to which memory level.

Points are grouped by the device's cache sizes when known (level *i* spans
``[max(2·size[i-1], size[i]/8), size[i]/2]``, DRAM from ``DRAM_FACTOR·LLC``), otherwise by
segmentation. A cache level's ceiling is the median of its plateau (its edges mix in the
neighbouring levels); DRAM's is the plateau's best point, the fastest rate reached as STREAM and
BabelStream report it (:mod:`roofprof.roofline.probes`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# where the DRAM plateau starts is the devices' to say (their probes place arrays by it)
from roofprof.devices.base import DRAM_FACTOR, LEVEL_EDGE, dram_resident

__all__ = ["DRAM_FACTOR", "Plateau", "dram_resident", "find_plateaus", "level_windows"]


@dataclass(frozen=True)
class Plateau:
    """A run of working-set sizes served by one memory level, and its bandwidth.

    ``value`` is the median of the points' best bandwidths (bytes/s), ``best`` their maximum;
    ``spread`` is (max − min) / value over those points.
    """

    level: str
    value: float
    min_bytes: int
    max_bytes: int
    points: int
    spread: float
    method: str
    best: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def level_windows(cache_bytes: Mapping[str, int]) -> list[tuple[str, float, float]]:
    """``(level, lo, hi)``: the working-set sizes (bytes, ``lo <= size <= hi``) on each level's
    plateau.

    Level *i* of size ``s[i]`` spans ``[max(2·s[i-1], s[i]/8), s[i]/2]`` (clear of the level
    below, and of the tiny sizes where a kernel's per-pass overhead shows); DRAM starts at
    ``DRAM_FACTOR·s[-1]`` (8×).

    >>> level_windows({"l1": 64 * 1024, "l2": 2 * 1024**2})
    [('l1', 8192.0, 32768.0), ('l2', 262144.0, 1048576.0), ('dram', 16777216.0, inf)]
    """
    levels = sorted(
        (
            (lvl, int(size))
            for lvl, size in cache_bytes.items()
            if lvl in ("l1", "l2", "l3") and size and size > 0
        ),
        key=lambda t: t[1],
    )
    out: list[tuple[str, float, float]] = []
    prev = 0
    for lvl, size in levels:
        lo, hi = max(2.0 * prev, size / 8.0), size / 2.0
        if lo >= hi:
            lo, hi = 1.25 * prev, 0.8 * size
        if lo < hi:
            out.append((lvl, lo, hi))
        prev = size
    out.append(("dram", float(DRAM_FACTOR * prev), math.inf))
    return out


def find_plateaus(
    sizes: Sequence[float],
    values: Sequence[float],
    cache_bytes: Mapping[str, int] | None = None,
    *,
    rel_step: float = 0.15,
    min_points: int = 2,
) -> list[Plateau]:
    """Plateaus of a bandwidth-vs-working-set staircase.

    With ``cache_bytes``, each level takes the points inside its :func:`level_windows`
    window (at least one point). Without, the staircase is segmented: a point joins the
    current segment while it stays within ``rel_step`` of the segment's median; segments
    of fewer than ``min_points`` points are transitions and dropped; the remaining ones
    are labelled l1, l2, l3 from the smallest, and the largest-size one DRAM.

    >>> s = [4e3, 8e3, 16e3, 1e6, 2e6, 1e8, 2e8]
    >>> v = [300e9, 310e9, 305e9, 200e9, 205e9, 30e9, 31e9]
    >>> [(p.level, round(p.value / 1e9)) for p in find_plateaus(s, v)]
    [('l1', 305), ('l2', 202), ('dram', 30)]
    """
    pts = sorted(
        (float(s), float(v))
        for s, v in zip(sizes, values, strict=True)
        if v > 0 and math.isfinite(v)
    )
    if not pts:
        return []
    if cache_bytes:
        out = []
        for level, lo, hi in level_windows(cache_bytes):
            inside = [(s, v) for s, v in pts if lo * (1 - LEVEL_EDGE) <= s <= hi * (1 + LEVEL_EDGE)]
            if inside:
                out.append(_plateau(level, inside, "cache-sizes"))
        return out
    segments: list[list[tuple[float, float]]] = [[pts[0]]]
    for s, v in pts[1:]:
        med = statistics.median(x for _, x in segments[-1])
        if abs(v - med) <= rel_step * med:
            segments[-1].append((s, v))
        else:
            segments.append([(s, v)])
    kept = [seg for seg in segments if len(seg) >= min_points]
    if not kept:
        return []
    labels = ["l1", "l2", "l3"]
    out = []
    for i, seg in enumerate(kept):
        if i == len(kept) - 1 and len(kept) > 1:
            level = "dram"
        elif i < len(labels):
            level = labels[i]
        else:
            continue
        out.append(_plateau(level, seg, "segmentation"))
    return out


def _plateau(level: str, pts: list[tuple[float, float]], method: str) -> Plateau:
    vals = [v for _, v in pts]
    med = float(statistics.median(vals))
    return Plateau(
        level=level,
        value=med,
        min_bytes=int(pts[0][0]),
        max_bytes=int(pts[-1][0]),
        points=len(pts),
        spread=(max(vals) - min(vals)) / med if med > 0 else 0.0,
        method=method,
        best=float(max(vals)),
    )
