"""Sweep charts of a measured roofline: the working-set staircase and the intensity sweep.

Both take the ``roofline.json`` payload (``RooflineResult.to_dict()``, or the result
itself), so they can be redrawn from a file without measuring again.

* :func:`plot_staircase`: bandwidth (best of each point) against working-set size for each
  bandwidth probe, cache sizes marked, each plateau drawn at its ceiling.
* :func:`plot_intensity_sweep`: measured FLOP/s against intensity for each intensity
  probe, over the model roofline min(peak, bandwidth × intensity) built from the measured
  DRAM ceiling and compute peak of the same dtype. Points whose working set was shrunk
  (far right of the ridge, to bound the run time) are drawn hollow. The sweep's kernel
  updates in place (each line read and written, no write-allocate read), which can stream
  more than the read-only/STREAM-counted DRAM ceiling: its own bandwidth is drawn dotted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roofprof.plots import pyplot, save

__all__ = ["plot_intensity_sweep", "plot_staircase", "sweep_summary"]

_PROBE_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
_LEVEL_COLORS = {
    "l1": "tab:olive",
    "l2": "tab:green",
    "l3": "tab:cyan",
    "dram": "tab:blue",
    "smem": "tab:purple",
}


def _payload(result: Any) -> Mapping[str, Any]:
    return result.to_dict() if hasattr(result, "to_dict") else result


def _bytes_label(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def plot_staircase(result: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Bandwidth against working-set size (log-log) for every bandwidth probe.

    Args:
        result: a ``RooflineResult`` or its ``to_dict()`` payload.
        path: PNG to write (whole or not at all).

    Returns:
        The path written.

    Raises:
        ValueError: the result holds no bandwidth sweep.
    """
    data = _payload(result)
    sweeps = data.get("sweeps", {}).get("bandwidth", {})
    if not any(sweeps.values()):
        raise ValueError("no bandwidth sweep in this result")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    for i, (probe, points) in enumerate(sweeps.items()):
        if not points:
            continue
        color = _PROBE_COLORS[i % len(_PROBE_COLORS)]
        xs = [p["working_set_bytes"] for p in points]
        ax.plot(
            xs,
            [p["best_bytes_per_s"] / 1e9 for p in points],
            "o-",
            color=color,
            ms=4,
            lw=1.4,
            label=f"{probe} (best of each size)",
        )
        ax.plot(
            xs,
            [p["median_bytes_per_s"] / 1e9 for p in points],
            ".",
            color=color,
            alpha=0.45,
            ms=4,
            label=f"{probe} (median)",
        )
        for pl in data.get("plateaus", {}).get(probe, []):
            ax.hlines(
                pl["value"] / 1e9, pl["min_bytes"], pl["max_bytes"], colors=color, lw=3, alpha=0.5
            )
            ax.annotate(
                f"{pl['level'].upper()} {pl['value'] / 1e9:,.0f} GB/s",
                (pl["min_bytes"], pl["value"] / 1e9),
                textcoords="offset points",
                xytext=(0, 5),
                fontsize=7,
                color=color,
            )
    caches = data.get("device", {}).get("cache_bytes", {})
    for level, size in sorted(caches.items(), key=lambda kv: kv[1]):
        ax.axvline(size, color=_LEVEL_COLORS.get(level, "gray"), ls=":", lw=1)
        ax.annotate(
            f"{level.upper()} {_bytes_label(size)}",
            (size, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=7,
            color="dimgray",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("working set (bytes, all threads together)")
    ax.set_ylabel("bandwidth (GB/s)")
    dev = data.get("device", {})
    ax.set_title(
        title or f"Working-set staircase: {dev.get('name', '?')} ({dev.get('label', '?')})"
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    save(fig, path)
    return Path(path)


def plot_intensity_sweep(result: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Measured FLOP/s against arithmetic intensity over the measured model roofline.

    For each intensity probe (one dtype each), the model line is
    ``min(compute peak of that dtype, DRAM bandwidth × intensity)`` from the result's own
    ceilings; points are the best and median rate of each intensity.

    Raises:
        ValueError: the result holds no intensity sweep.
    """
    from roofprof.errors import RoofprofError
    from roofprof.roofline import Roofline

    data = _payload(result)
    sweeps = {
        k: v for k, v in data.get("sweeps", {}).get("intensity", {}).items() if v.get("points")
    }
    if not sweeps:
        raise ValueError("no intensity sweep in this result")
    roof = (
        Roofline.from_dict(data["roofline"]) if data.get("roofline", {}).get("ceilings") else None
    )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    all_x: list[float] = []
    for i, (probe, sweep) in enumerate(sweeps.items()):
        color = _PROBE_COLORS[i % len(_PROBE_COLORS)]
        dtype = sweep.get("dtype", "?")
        pts = sweep["points"]
        xs = [p["intensity"] for p in pts]
        all_x += xs
        ax.plot(xs, [p["best_flops_per_s"] / 1e9 for p in pts], "-", color=color, lw=1.2)
        dram = [p for p in pts if p.get("resident", "dram") == "dram"]
        cached = [p for p in pts if p.get("resident", "dram") != "dram"]
        ax.plot(
            [p["intensity"] for p in dram],
            [p["best_flops_per_s"] / 1e9 for p in dram],
            "D",
            color=color,
            ms=5,
            label=f"{probe}: measured (best), working set in DRAM",
        )
        if cached:
            ax.plot(
                [p["intensity"] for p in cached],
                [p["best_flops_per_s"] / 1e9 for p in cached],
                "D",
                ms=5,
                mfc="none",
                color=color,
                label=f"{probe}: measured (best), smaller working set (compute-bound)",
            )
        ax.plot(
            xs,
            [p["median_flops_per_s"] / 1e9 for p in pts],
            ".",
            color=color,
            alpha=0.45,
            label=f"{probe}: measured (median)",
        )
        if roof is None:
            continue
        try:
            peak, bw = roof.compute_peak(dtype), roof.memory_bandwidth("dram")
        except RoofprofError:
            continue
        lo, hi = min(xs) / 2, max(xs) * 2
        grid = [lo * (hi / lo) ** (j / 200) for j in range(201)]
        ax.plot(
            grid,
            [min(peak, bw * x) / 1e9 for x in grid],
            "--",
            color=color,
            lw=1.2,
            alpha=0.8,
            label=f"model: min({dtype} {peak / 1e9:,.0f} GFLOP/s, DRAM {bw / 1e9:,.1f} GB/s × I)",
        )
        own = sweep.get("memory_bound_bytes_per_s")
        if own and abs(own / bw - 1) > 0.05:
            ax.plot(
                grid,
                [min(peak, own * x) / 1e9 for x in grid],
                ":",
                color=color,
                lw=1.0,
                alpha=0.8,
                label=f"sweep's own stream: {own / 1e9:,.1f} GB/s "
                "(in-place read + write, no write-allocate)",
            )
        ridge = peak / bw
        ax.axvline(ridge, color=color, ls=":", lw=0.8)
        ax.annotate(
            f"ridge {ridge:,.2f} FLOP/B ({dtype})",
            (ridge, peak / 1e9),
            textcoords="offset points",
            xytext=(4, -12 - 10 * i),
            fontsize=7,
            color=color,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if all_x:
        ax.set_xlim(min(all_x) / 2, max(all_x) * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("performance (GFLOP/s)")
    dev = data.get("device", {})
    ax.set_title(title or f"Intensity sweep over the measured roofline: {dev.get('name', '?')}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, path)
    return Path(path)


def sweep_summary(result: Any) -> list[dict[str, Any]]:
    """Per intensity point: intensity, best FLOP/s, percent of the model roofline (for tables)."""
    from roofprof.errors import RoofprofError
    from roofprof.roofline import Roofline

    data = _payload(result)
    roof = (
        Roofline.from_dict(data["roofline"]) if data.get("roofline", {}).get("ceilings") else None
    )
    rows = []
    for probe, sweep in data.get("sweeps", {}).get("intensity", {}).items():
        for p in sweep.get("points", []):
            model = None
            if roof is not None:
                try:
                    model = roof.attainable(p["intensity"], sweep.get("dtype", "fp32"))
                except RoofprofError:
                    model = None
            rows.append(
                {
                    "probe": probe,
                    "intensity": p["intensity"],
                    "best_flops_per_s": p["best_flops_per_s"],
                    "model_flops_per_s": model,
                    "percent_of_model": 100.0 * p["best_flops_per_s"] / model
                    if model
                    else math.nan,
                }
            )
    return rows
