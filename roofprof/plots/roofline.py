"""Roofline charts: log-log, memory slopes and compute roofs, ridge marked, points labelled."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from roofprof.plots import pyplot, save
from roofprof.roofline import Point, Roofline

__all__ = ["plot_prediction", "plot_roofline"]

_LEVEL_STYLE = {
    "dram": "tab:blue",
    "l3": "tab:cyan",
    "l2": "tab:green",
    "l1": "tab:olive",
    "smem": "tab:purple",
}
_PHASE_COLOR = {"prefill": "tab:red", "decode": "tab:blue"}


def plot_roofline(
    roofline: Roofline,
    points: Sequence[Point] = (),
    path: str | Path = "roofline.png",
    *,
    dtypes: Sequence[str] | None = None,
    spec: Roofline | None = None,
    title: str | None = None,
    point_colors: Sequence[str] | None = None,
) -> Path:
    """Draw ``roofline`` (solid) and optionally a ``spec`` roofline (dashed), with ``points``.

    Args:
        roofline: ceilings to draw; every memory level and the compute roofs of ``dtypes``
            (default: the dtypes of the points, else all).
        points: placed at (intensity, achieved FLOP/s) and labelled with their names.
        path: PNG to write (written whole: a temp file, then renamed).
        spec: datasheet ceilings drawn dashed for comparison.

    Returns:
        The path written.
    """
    plt = pyplot()
    dtypes = list(dtypes or dict.fromkeys(p.dtype for p in points) or roofline.dtypes)
    dtypes = [d for d in dtypes if d in roofline.dtypes] or list(roofline.dtypes)
    intensities = [p.intensity for p in points if math.isfinite(p.intensity) and p.intensity > 0]
    ridges = [roofline.ridge(d, lvl) for d in dtypes for lvl in roofline.levels]
    lo = min([*intensities, *ridges, 1.0]) / 4
    hi = max([*intensities, *ridges, 1.0]) * 4
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for r, style, tag in ((roofline, "-", ""), (spec, "--", " (spec)")):
        if r is None:
            continue
        for d in dtypes:
            if d not in r.dtypes:
                continue
            peak = r.compute_peak(d)
            for lvl in r.levels:
                bw = r.memory_bandwidth(lvl)
                ax.plot(
                    xs,
                    [min(peak, bw * x) for x in xs],
                    style,
                    color=_LEVEL_STYLE.get(lvl, "gray"),
                    lw=1.8 if lvl == "dram" else 1.0,
                    alpha=0.9 if style == "-" else 0.6,
                    label=f"{lvl.upper()} {bw / 1e9:,.0f} GB/s → "
                    f"{d} {peak / 1e12:,.3g} TFLOP/s{tag}",
                )
            if r is roofline:
                ridge = r.ridge(d)
                ax.axvline(ridge, color="gray", ls=":", lw=1)
                ax.annotate(
                    f"ridge {ridge:,.1f} FLOP/B ({d})",
                    (ridge, peak),
                    textcoords="offset points",
                    xytext=(4, -14),
                    fontsize=8,
                    color="dimgray",
                )
    colors = list(point_colors) if point_colors else [None] * len(points)
    for p, color in zip(points, colors, strict=False):
        if not (math.isfinite(p.intensity) and p.flops_per_s > 0):
            continue
        ax.scatter(
            [p.intensity],
            [p.flops_per_s],
            s=28,
            color=color or "black",
            zorder=5,
            marker="o" if p.source != "measured" else "D",
        )
        ax.annotate(
            p.name,
            (p.intensity, p.flops_per_s),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=7,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (FLOP/s)")
    ax.set_title(title or f"Roofline: {roofline.device}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, path)
    return Path(path)


def plot_prediction(prediction, path: str | Path) -> Path:
    """The roofline of a prediction's estimator with every op of both phases placed on it."""
    roof = getattr(prediction, "_roofline", None) or _estimator_roofline(prediction)
    points, colors = [], []
    for phase in (prediction.prefill, prediction.decode):
        for o in phase.ops:
            op = o.op
            if op.flops <= 0 or op.bytes <= 0 or o.estimate.seconds <= 0:
                continue
            points.append(
                Point(f"{op.phase[0]}:{op.name}", op.flops, op.bytes, o.estimate.seconds, op.dtype)
            )
            colors.append(_PHASE_COLOR[op.phase])
    title = (
        f"{prediction.model.id} on {prediction.machine} ({prediction.estimator}): "
        f"prefill ops red, decode ops blue"
    )
    return plot_roofline(
        roof,
        points,
        path,
        dtypes=[prediction.prefill.workload.dtype],
        title=title,
        point_colors=colors,
    )


def _estimator_roofline(prediction) -> Roofline:
    from roofprof.roofline import Ceiling

    ceilings = prediction.estimator_inputs.get("ceilings")
    if not ceilings:
        raise ValueError(f"estimator {prediction.estimator!r} has no roofline to draw")
    return Roofline(prediction.machine, tuple(Ceiling.from_dict(c) for c in ceilings))
