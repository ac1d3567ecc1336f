"""The hierarchical roofline chart (NERSC style): each kernel at its L1, L2 and DRAM intensities.

One colour per kernel, one marker per memory level (L1 circle, L2 square, DRAM triangle),
the three joined by a thin line at the kernel's achieved FLOP/s. With a roofline, each
memory level's slope is drawn up to the compute roofs of the kernels' dtypes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.plots import save

__all__ = ["plot_hierarchical"]

LEVEL_MARKERS = {"l1": "o", "l2": "s", "dram": "^"}
LEVEL_COLORS = {
    "l1": "tab:olive",
    "l2": "tab:green",
    "dram": "tab:blue",
    "l3": "tab:cyan",
    "smem": "tab:purple",
}


def plot_hierarchical(
    placements: Sequence[Any],
    path: str | os.PathLike = "hierarchical_roofline.png",
    *,
    roofline: Any = None,
    title: str | None = None,
) -> Path:
    """Draw the hierarchical roofline of ``placements`` to a PNG (written whole); return its path.

    Args:
        placements: :class:`roofprof.counters.HierarchicalPlacement` records (from
            ``place_hierarchical``); kernels without FLOP counters cannot be placed and
            are left out.
        path: output file; its suffix picks the format (``.png``, ``.svg``, ``.pdf``).
        roofline: a :class:`roofprof.roofline.Roofline` whose memory slopes and compute
            roofs are drawn (optional).
        title: chart title.

    Raises:
        ConfigError: no kernel has both FLOPs and bytes (e.g. CSVs collected without the
            FLOP metrics), or the output folder cannot be written.

    Example::

        placements = place_hierarchical(load_counters("ncu.csv"), load_roofline("roofline.json"))
        plot_hierarchical(placements, "hier.png", roofline=roofline)
    """
    drawable = [
        p for p in placements
        if p.flops_per_s and p.flops_per_s > 0
        and any(lp.intensity and math.isfinite(lp.intensity) and lp.intensity > 0
                for lp in p.levels)
    ]  # fmt: skip
    if not drawable:
        raise ConfigError(
            "nothing to plot: no kernel has FLOP counters and bytes (collect with "
            "`--metrics-set hierarchical`, which adds the sm__sass_* and sm__ops_path_tensor_* "
            "metrics)"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    intensities = [
        lp.intensity for p in drawable for lp in p.levels if lp.intensity and lp.intensity > 0
    ]
    perfs = [p.flops_per_s for p in drawable]
    lo, hi = min(intensities) / 8, max(intensities) * 8
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]

    if roofline is not None:
        dtypes = list(dict.fromkeys(p.dtype for p in drawable if p.dtype))
        peaks = {}
        for d in dtypes:
            try:
                peaks[d] = roofline.compute_peak(d)
            except Exception:  # no roof for that dtype in this roofline
                continue
        top = max(peaks.values()) if peaks else max(perfs) * 10
        for level in ("l1", "l2", "dram"):
            try:
                bw = roofline.memory_bandwidth(level)
            except Exception:
                continue
            ax.plot(xs, [min(top, bw * x) for x in xs], "-", color=LEVEL_COLORS[level], lw=1.4,
                    label=f"{level.upper()} {bw / 1e9:,.0f} GB/s")  # fmt: skip
        for d, peak in peaks.items():
            ax.axhline(peak, color="gray", ls="--", lw=1)
            ax.annotate(f"{d} {peak / 1e12:,.3g} TFLOP/s", (hi, peak), textcoords="offset points",
                        xytext=(-4, 3), ha="right", fontsize=8, color="dimgray")  # fmt: skip
        perfs.extend(peaks.values())

    cmap = plt.get_cmap("tab10")
    for i, p in enumerate(drawable):
        color = cmap(i % 10)
        pts = [(lp.level, lp.intensity) for lp in p.levels if lp.intensity and lp.intensity > 0]
        ax.plot(
            [x for _, x in pts], [p.flops_per_s] * len(pts), "-", color=color, lw=0.8, alpha=0.6
        )
        for level, x in pts:
            ax.scatter([x], [p.flops_per_s], marker=LEVEL_MARKERS.get(level, "x"), s=40,
                       color=color, edgecolor="black", linewidth=0.4, zorder=5)  # fmt: skip
        label = p.range_name or p.kernel
        ax.annotate(label[:40], (pts[0][1], p.flops_per_s), textcoords="offset points",
                    xytext=(5, 4), fontsize=7, color=color)  # fmt: skip

    handles = [Line2D([], [], ls="", marker=m, color="gray", markeredgecolor="black",
                      label=lvl.upper())
               for lvl, m in LEVEL_MARKERS.items()]  # fmt: skip
    existing, labels = ax.get_legend_handles_labels()
    ax.legend(handles=[*existing, *handles], labels=[*labels, *[h.get_label() for h in handles]],
              fontsize=7, loc="lower right")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(perfs) / 10, max(perfs) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP/byte) at L1, L2, DRAM")
    ax.set_ylabel("performance (FLOP/s)")
    ax.set_title(title or "Hierarchical roofline (Nsight Compute counters)")
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    save(fig, path)
    return Path(path)
