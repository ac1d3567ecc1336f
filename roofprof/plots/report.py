"""Charts of the ``roofprof run`` HTML report (PNG bytes, embedded as base64).

Each function takes plain records (profiles, predictions, comparison rows) and returns the
PNG as bytes (and writes it when ``path`` is given). matplotlib runs with the Agg backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roofprof.plots import pyplot, save
from roofprof.units import si as _si
from roofprof.workload import OP_GROUPS

__all__ = ["breakdown_chart", "clock_chart", "estimator_chart", "roofline_chart", "sweep_chart"]

PHASE_STYLE = {"prefill": ("tab:red", "^"), "decode": ("tab:blue", "o")}
LEVEL_COLOR = {
    "dram": "tab:blue",
    "l3": "tab:cyan",
    "l2": "tab:green",
    "l1": "tab:olive",
    "smem": "tab:purple",
}
GROUP_COLOR = dict(
    zip(
        OP_GROUPS,
        ("tab:purple", "tab:blue", "tab:orange", "tab:gray", "tab:green", "tab:red"),
        strict=True,
    )
)
ESTIMATOR_COLOR = {
    "spec": "tab:gray",
    "empirical": "tab:cyan",
    "measured": "tab:blue",
    "measured-no-launch": "lightsteelblue",
    "real": "black",
}


def _group(op: Any) -> str:
    """The chart group the model family gave ``op`` (:data:`~roofprof.workload.OP_GROUPS`);
    an op built without one is drawn with the norms and elementwise ops."""
    return op.group if op.group in GROUP_COLOR else OP_GROUPS[4]


# --------------------------------------------------------------------------- roofline


def roofline_chart(
    roofline,
    profiles: Mapping[str, Any],
    *,
    spec=None,
    dtype: str = "fp32",
    title: str = "",
    path: str | Path | None = None,
) -> bytes:
    """Measured ceilings (solid), datasheet ceilings (dashed), and every measured op placed on them.

    ``profiles`` maps phase → :class:`~roofprof.profiling.records.ProfileResult`; each op with a
    chosen measurement is a point at (analytic intensity, achieved FLOP/s), prefill ▲ red, decode
    ● blue, labelled with a short name. Ops with no FLOPs (the embedding gather) are left
    out (they have no place on a FLOP/s axis) and listed under the chart.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 6.8), dpi=100)
    points = []
    for phase, prof in profiles.items():
        for o in prof.ops:
            if o.chosen is None or o.op.flops <= 0 or o.op.bytes <= 0 or not (o.seconds > 0):
                continue
            points.append((phase, o.op.short or o.op.name, o.op.intensity, o.op.flops / o.seconds))
    xs = [p[2] for p in points] or [1.0]
    ridges = []
    for r in (roofline, spec):
        if r is None:
            continue
        try:
            ridges.append(r.ridge(dtype))
        except Exception:  # noqa: BLE001 - a roofline without this dtype still draws its slopes
            pass
    lo = 10 ** math.floor(math.log10(max(min([*xs, *ridges, 1.0]) / 3, 1e-3)))
    hi = 10 ** math.ceil(math.log10(max([*xs, *ridges, 1.0]) * 3))
    grid = [lo * (hi / lo) ** (i / 300) for i in range(301)]
    ys_all = [p[3] for p in points]
    for r, style, tag in ((roofline, "-", "measured"), (spec, "--", "datasheet")):
        if r is None:
            continue
        peaks = sorted(
            (c for c in r.ceilings if c.kind == "compute" and c.dtype == dtype),
            key=lambda c: -c.value,
        )
        if not peaks:
            continue
        peak = peaks[0].value
        for lvl in r.levels:
            bw = r.memory_bandwidth(lvl)
            ys = [min(peak, bw * x) for x in grid]
            ys_all.extend(ys)
            ax.plot(
                grid,
                ys,
                style,
                color=LEVEL_COLOR.get(lvl, "gray"),
                lw=2.2 if lvl == "dram" else 1.1,
                alpha=0.95 if style == "-" else 0.6,
                label=f"{lvl.upper()} {bw / 1e9:,.0f} GB/s ({tag})",
            )
        for c in peaks[1:3]:
            ax.axhline(c.value, color="gray", ls=":" if style == "-" else "-.", lw=1)
            ax.annotate(
                f"{c.name}: {_si(c.value, 'FLOP/s')}",
                (grid[5], c.value),
                fontsize=8,
                color="dimgray",
                xytext=(0, -11),
                textcoords="offset points",
            )
        ax.annotate(
            f"{peaks[0].name}: {_si(peak, 'FLOP/s')} ({tag})",
            (grid[5], peak),
            fontsize=8,
            xytext=(0, 3),
            textcoords="offset points",
        )
        ridge = peak / r.memory_bandwidth("dram") if "dram" in r.levels else None
        if ridge and style == "-":
            ax.axvline(ridge, color="gray", ls=":", lw=1)
            ax.annotate(
                f"DRAM ridge {ridge:,.1f} FLOP/B",
                (ridge, peak),
                textcoords="offset points",
                xytext=(4, -14),
                fontsize=8,
                color="dimgray",
            )
    for phase, _name, x, y in points:
        color, marker = PHASE_STYLE.get(phase, ("black", "s"))
        ax.scatter(
            [x], [y], s=46, color=color, marker=marker, zorder=5, edgecolor="white", linewidth=0.6
        )
    for phase, (color, marker) in PHASE_STYLE.items():
        if phase in profiles:
            ax.scatter([], [], color=color, marker=marker, label=f"{phase} ops (measured)")
    positive = [y for y in ys_all if y > 0]
    if positive:
        ax.set_ylim(min(positive) / 2, max(positive) * 3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    merged: dict[
        tuple, list[str]
    ] = {}  # ops measured as one shape sit on one spot: one label "q/o"
    for phase, name, x, y in points:
        merged.setdefault((phase, x, y), []).append(name)
    _label_points(
        ax,
        [
            ("/".join(names), x, y, PHASE_STYLE.get(phase, ("black", ""))[0])
            for (phase, x, y), names in merged.items()
        ],
    )
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum DRAM traffic)")
    ax.set_ylabel(f"performance ({dtype} FLOP/s)")
    ax.set_title(title or "Roofline with every measured op")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right", ncol=2)
    fig.tight_layout()
    return save(fig, path)


def _label_points(ax, labels: Sequence[tuple[str, float, float, str]], fontsize: int = 8) -> None:
    """Label points without overlaps: each label goes right of its point, moved down (or up)
    in steps of one text line until it clears the labels already placed; a thin leader line
    joins a moved label to its point."""
    fig = ax.figure
    ax.get_xlim(), ax.get_ylim()  # settle the view limits (no full draw needed for the transforms)
    to_px = ax.transData.transform
    to_data = ax.transData.inverted().transform
    line_h = fontsize * fig.dpi / 72 * 1.15
    char_w = fontsize * fig.dpi / 72 * 0.62
    placed: list[tuple[float, float, float, float]] = []
    order = sorted(labels, key=lambda t: (-to_px((t[1], t[2]))[1], to_px((t[1], t[2]))[0]))
    for text, x, y, color in order:
        px, py = to_px((x, y))
        w = char_w * len(text)
        for k in range(0, 40):
            dy = (k + 1) // 2 * line_h * (1 if k % 2 else -1) if k else 0.0
            box = (px + 6, py + dy - line_h / 2, px + 6 + w, py + dy + line_h / 2)
            if not any(
                box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed
            ):
                break
        placed.append(box)
        tx, ty = to_data((box[0], (box[1] + box[3]) / 2))
        ax.annotate(
            text,
            (x, y),
            xytext=(tx, ty),
            textcoords="data",
            fontsize=fontsize,
            color=color,
            va="center",
            arrowprops=dict(arrowstyle="-", color=color, lw=0.5, alpha=0.6)
            if abs(dy) > 1
            else None,
        )


# --------------------------------------------------------------------------- breakdown


def breakdown_chart(
    predictions: Mapping[str, Any], real: Any = None, *, path: str | Path | None = None
) -> bytes:
    """Stacked horizontal bars: each estimator's prefill and decode time split by op group.

    ``predictions`` maps an estimator label to a :class:`~roofprof.prediction.rollup.Prediction`;
    ``real`` (a :class:`~roofprof.prediction.rollup.RealRun`) is drawn as a black line per phase.
    """
    plt = pyplot()
    labels = list(predictions)
    comm = any(
        o.op.kind == "communication"
        for p in predictions.values()
        for o in getattr(getattr(p, "decode", None), "ops", ())
    )
    shown = OP_GROUPS if comm else OP_GROUPS[:5]
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.62 * max(len(labels), 1)), dpi=100)
    for ax, phase in zip(axes, ("prefill", "decode"), strict=True):
        for i, label in enumerate(labels):
            ph = getattr(predictions[label], phase)
            # communication only where the layout has it (single-GPU charts keep their 5 groups)
            groups = dict.fromkeys(shown, 0.0)
            for o in ph.ops:
                groups[_group(o.op)] += o.seconds
            left = 0.0
            for g, v in groups.items():
                ax.barh(
                    i,
                    v,
                    left=left,
                    color=GROUP_COLOR[g],
                    edgecolor="white",
                    label=g if (i == 0 and phase == "prefill") else None,
                )
                left += v
            ax.annotate(
                _si(left, "s"), (left, i), xytext=(4, -3), textcoords="offset points", fontsize=8
            )
        if real is not None:
            value = real.prefill_s if phase == "prefill" else real.decode_s
            ax.axvline(value, color="black", lw=1.6)
            ax.annotate(
                f"real {_si(value, 's')}",
                (value, len(labels) - 0.5),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=8,
            )
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels)
        ax.invert_yaxis()
        ax.set_xlabel("seconds" + (" (TTFT)" if phase == "prefill" else " per decode step"))
        ax.set_title(f"{phase}: time by op group")
        xmax = max(
            [getattr(predictions[k], phase).seconds for k in labels]
            + (
                [real.prefill_s if phase == "prefill" else real.decode_s]
                if real is not None
                else []
            )
            + [1e-9]
        )
        ax.set_xlim(0, xmax * 1.25)
        ax.grid(True, axis="x", alpha=0.25)
    fig.legend(loc="lower center", ncol=len(shown), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return save(fig, path)


def estimator_chart(rows: Sequence[Mapping[str, Any]], *, path: str | Path | None = None) -> bytes:
    """Grouped bars: TTFT and decode step per estimator, each with its residual vs real."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), dpi=100)
    for ax, (key, res, title) in zip(
        axes,
        (
            ("ttft_s", "ttft_residual", "prefill (TTFT)"),
            ("decode_step_s", "decode_residual", "decode step"),
        ),
        strict=True,
    ):
        names = [r["estimator"] for r in rows]
        values = [r[key] for r in rows]
        colors = [ESTIMATOR_COLOR.get(n, "tab:olive") for n in names]
        ax.bar(range(len(rows)), values, color=colors)
        for i, r in enumerate(rows):
            resid = r.get(res)
            text = _si(values[i], "s")
            if r["estimator"] != "real" and resid is not None and resid == resid:
                text += f"\n{resid:+.1%}"
            ax.annotate(
                text,
                (i, values[i]),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
        real = [r[key] for r in rows if r["estimator"] == "real"]
        if real:
            ax.axhline(real[0], color="black", lw=1, ls="--")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(names, rotation=15, fontsize=9)
        ax.set_ylabel("seconds")
        ax.set_ylim(0, max(values + [1e-12]) * 1.3)
        ax.set_title(f"{title}: estimate and residual vs real")
        ax.grid(True, axis="y", alpha=0.25)
    fig.tight_layout()
    return save(fig, path)


# --------------------------------------------------------------------------- sweeps


def sweep_chart(
    batch_sweep: Mapping[str, Sequence[Any]],
    context_sweep: Mapping[str, Sequence[Any]],
    *,
    path: str | Path | None = None,
) -> bytes:
    """Decode sweeps: tokens/s vs batch (bound marked per point) and step time vs context.

    Both map an estimator label to a list of decode
    :class:`~roofprof.prediction.rollup.PhasePrediction`.
    Filled markers: memory-bound; hollow: compute-bound.
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), dpi=100)
    ax = axes[0]
    for label, phases in batch_sweep.items():
        xs = [p.workload.batch for p in phases]
        ys = [p.workload.batch / p.seconds for p in phases]
        color = ESTIMATOR_COLOR.get(label, "tab:olive")
        ax.plot(xs, ys, "-", color=color, label=label)
        for p, x, y in zip(phases, xs, ys, strict=True):
            compute = p.bound == "compute"
            ax.scatter(
                [x], [y], color="white" if compute else color, edgecolor=color, s=42, zorder=5
            )
            ax.annotate(
                p.bound,
                (x, y),
                xytext=(4, -10),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _exact_ticks(ax, sorted({p.workload.batch for v in batch_sweep.values() for p in v}))
    ax.set_xlabel("batch (sequences decoding together)")
    ax.set_ylabel("decode tokens/s (all sequences)")
    ax.set_title("Batch sweep: where decode turns compute-bound (hollow)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    ax = axes[1]
    for label, phases in context_sweep.items():
        xs = [p.workload.context_tokens for p in phases]
        ys = [p.seconds for p in phases]
        color = ESTIMATOR_COLOR.get(label, "tab:olive")
        ax.plot(xs, ys, "-o", color=color, label=label, ms=5)
        for p, x, y in zip(phases, xs, ys, strict=True):
            share = p.attention_seconds / p.seconds if p.seconds else 0.0
            ax.annotate(
                f"attn {share:.0%}",
                (x, y),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
    ax.set_xscale("log")
    _exact_ticks(ax, sorted({p.workload.context_tokens for v in context_sweep.values() for p in v}))
    ax.set_xlabel("context tokens in the KV cache")
    ax.set_ylabel("seconds per decode step")
    ax.set_title("Context sweep: decode step time (attention share)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def _exact_ticks(ax, values: Sequence[float]) -> None:
    """Ticks at exactly the swept values, labelled as plain numbers (no log-scale minor labels)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    if not values:
        return
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(values))
    ax.set_xticklabels([f"{v:,.0f}" for v in values])
    if len(values) > 1:
        ax.set_xlim(values[0] / 1.5, values[-1] * 1.5)


def clock_chart(
    samples: Sequence[tuple[str, float | None, float | None]], *, path: str | Path | None = None
) -> bytes:
    """Median (dot) and minimum (cross) clock seen during each measurement, in order.

    ``samples`` are ``(label, median_mhz, min_mhz)``.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 3.4), dpi=100)
    xs = list(range(len(samples)))
    med = [s[1] if s[1] is not None else float("nan") for s in samples]
    low = [s[2] if s[2] is not None else float("nan") for s in samples]
    ax.plot(xs, med, "o-", ms=3, lw=1, label="median clock")
    ax.plot(xs, low, "x", ms=4, color="tab:red", label="minimum clock")
    step = max(1, len(samples) // 30)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels([s[0] for s in samples][::step], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("MHz")
    finite = [v for v in med + low if v == v]
    if finite:
        ax.set_ylim(min(finite) * 0.9, max(finite) * 1.05)
    ax.set_title("Clocks seen during each measurement")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)
