"""Predicted against published: log-log, y = x, a ±20 % band, one colour per engine."""

from __future__ import annotations

from pathlib import Path

from roofprof.plots import pyplot, save

__all__ = ["draw_published", "plot_published"]


def plot_published(result, path: str | Path, estimator: str = "calibrated") -> Path:
    """Scatter each case's ``estimator`` prediction against its published time (seconds).

    ``result`` is a :class:`~roofprof.published.PublishedValidation`. Points are coloured
    by engine profile and marked by phase.

    Raises:
        ConfigError: ``path`` cannot be written.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 6))
    draw_published(ax, result, estimator)
    save(fig, path)
    return Path(path)


def draw_published(ax, result, estimator: str = "calibrated") -> None:
    """Draw the predicted-vs-published scatter of ``result`` on the axes ``ax``."""
    plt = pyplot()
    rows = [r for r in result.rows if r.get(f"{estimator}_s")]
    engines = sorted({r["engine_profile"] for r in rows})
    markers = {"decode": "o", "prefill": "s", "offline": "^", "batched": "D"}
    colours = plt.get_cmap("tab10")
    for i, engine in enumerate(engines):
        for phase, marker in markers.items():
            pts = [r for r in rows if r["engine_profile"] == engine and r["phase"] == phase]
            if pts:
                ax.scatter(
                    [r["published_s"] for r in pts],
                    [r[f"{estimator}_s"] for r in pts],
                    marker=marker,
                    color=colours(i),
                    label=f"{engine} ({phase})",
                    alpha=0.85,
                )
    if rows:
        lo = min(min(r["published_s"], r[f"{estimator}_s"]) for r in rows) / 1.5
        hi = max(max(r["published_s"], r[f"{estimator}_s"]) for r in rows) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
        ax.fill_between(
            [lo, hi],
            [lo * 0.8, hi * 0.8],
            [lo * 1.2, hi * 1.2],
            color="grey",
            alpha=0.2,
            label="±20 %",
        )
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published time (s; batched rows: s per token)")
    ax.set_ylabel(
        f"{estimator} prediction (s)" + (" — leave-one-out" if estimator == "calibrated" else "")
    )
    ax.set_title(f"{estimator} vs published measurements")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
