"""Tables and payloads for the published-measurement commands (``validate --published``,
``roofline --published``, ``calibrate``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from roofprof.units import si

__all__ = [
    "calibration_table",
    "group_table",
    "print_calibration",
    "print_published_roofline",
    "print_published_validation",
    "published_roofline_payload",
    "published_summary_table",
    "published_validation_csv",
    "published_validation_table",
]


def _console() -> Console:
    return Console(highlight=False, width=200)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.2f}"


def _res(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.0f}%"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def published_roofline_payload(spec, roof) -> dict[str, Any]:
    """The ``roofline.json`` of ``roofprof roofline --published`` (the measured file's keys)."""
    return {
        "schema": "roofprof.roofline/1",
        "complete": True,
        "interrupted_during": None,
        "source": "published",
        "device": {
            "name": spec.name,
            "label": "published ceilings",
            "spec_id": spec.id,
            "backend": "published",
        },
        "roofline": roof.to_dict(),
        "ceilings": [
            {
                "name": c.name,
                "kind": c.kind,
                "value": c.value,
                "dtype": c.dtype,
                "level": c.level,
                "source": c.source,
                "note": c.note,
            }
            for c in roof.ceilings
        ],
        "spec_comparison": {},
        "plateaus": {},
        "sweeps": {},
        "probes": [],
    }


def print_published_roofline(roof, written: Sequence[Path], console: Console | None = None) -> None:
    console = console or _console()
    t = Table(title=escape(roof.device))
    for col in ("ceiling", "value", "source"):
        t.add_column(col)
    for c in roof.ceilings:
        unit = "B/s" if c.kind == "memory" else "FLOP/s"
        t.add_row(escape(c.name), f"{si(c.value)}{unit}", escape(c.note or c.source))
    console.print(t)
    for p in written:
        console.print(f"written: {escape(str(p))}")


def published_validation_table(
    result, title: str = "Published measurements against the predictions"
) -> Table:
    """One line per case: published figure, each estimator's prediction and residual, MBU/MFU."""
    t = Table(title=title)
    for col in ("row", "model", "gpu", "engine", "precision w/a/kv", "phase", "published ms"):
        t.add_column(col)
    for name in result.estimators:
        t.add_column(f"{name} ms")
        t.add_column(f"{name} resid")
    t.add_column("MBU/MFU datasheet")
    t.add_column("MBU/MFU published")
    for r in result.rows:
        ach_d = r.get("mbu_datasheet", r.get("mfu_datasheet"))
        ach_p = r.get("mbu_published", r.get("mfu_published"))
        cells = [
            r["case"],
            r["model"],
            r["gpu"],
            r["engine_profile"],
            f"{r['weights']}/{r['dtype']}/{r['kv_dtype']}",
            r["phase"],
            _ms(r["published_s"]) + (" (d)" if r["published_derived"] else ""),
        ]
        for name in result.estimators:
            cells += [_ms(r.get(f"{name}_s")), _res(r.get(f"{name}_residual"))]
        cells += [_pct(ach_d), _pct(ach_p)]
        t.add_row(*(escape(str(c)) for c in cells))
    return t


def published_summary_table(result) -> Table:
    """Median and worst |residual| by estimator over all rows, per phase, GPU and engine."""
    t = Table(title="Summary: |residual| (calibrated = leave-one-out)")
    for col in ("estimator", "group", "n", "median |res|", "worst |res|", "worst case"):
        t.add_column(col)
    for s in result.summary:
        t.add_row(
            s["estimator"],
            escape(f"{s['group']}={s['value']}" if s["group"] != "all" else "all"),
            str(s["n"]),
            _pct(s["median_abs_residual"]),
            _pct(s["worst_abs_residual"]),
            escape(s["worst_case"]),
        )
    return t


def print_published_validation(result, console: Console | None = None) -> None:
    console = console or _console()
    console.print(published_validation_table(result))
    console.print(published_summary_table(result))
    if result.skipped:
        t = Table(title="Rows not modelled")
        for col in ("row", "model", "gpu", "reason"):
            t.add_column(col)
        for s in result.skipped:
            t.add_row(escape(s.row_id), escape(s.model), escape(s.gpu or ""), escape(s.reason))
        console.print(t)
    console.print(
        "residual = predicted / published − 1 (negative: the prediction is faster than reality); "
        "(d) = derived from the printed figure; rows cited in --format json"
    )
    if any(r["phase"] == "batched" for r in result.rows):
        console.print(
            "batched rows: ms per token of the whole system (static batches, loaded or saturated "
            "servers; roofprof.prediction.serving); never fitted, summarised apart from the "
            "single-request groups"
        )


def published_validation_csv(result) -> str:
    """The per-case rows as CSV (flags joined with ``;``)."""
    buf = io.StringIO()
    rows = [dict(r, flags=";".join(r["flags"])) for r in result.rows]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def calibration_table(payload: Mapping[str, Any]) -> Table:
    t = Table(title="Engine profiles (roofprof calibrate)")
    for col in (
        "engine",
        "mem frac",
        "compute frac",
        "decode step ms",
        "prefill step ms",
        "prefill µs/kernel",
        "launch µs",
        "offline run s",
        "fitted from",
    ):
        t.add_column(col)
    for name, p in payload["profiles"].items():
        src = "; ".join(f"{k}: {v}" for k, v in p.get("fitted_from", {}).items())
        t.add_row(
            name,
            f"{p['memory_fraction']:.3f}",
            f"{p['compute_fraction']:.3f}",
            f"{p['decode_step_s'] * 1e3:.2f}",
            f"{p['prefill_step_s'] * 1e3:.2f}",
            f"{p.get('prefill_launch_s', 0) * 1e6:.1f}",
            f"{p['launch_s'] * 1e6:.1f}",
            f"{p.get('offline_run_s', 0):.3f}",
            escape(src),
        )
    return t


def group_table(payload: Mapping[str, Any]) -> Table:
    """The fitted fractions per GPU generation (memory) and generation/tensor path (compute)."""
    t = Table(title="Fractions per group (shrunk towards the engine's own fraction)")
    for col in ("engine", "fraction", "group", "value", "engine-wide", "rows"):
        t.add_column(col)
    for name, p in payload["profiles"].items():
        rows = p.get("group_rows", {})
        for kind, key in (("memory", "memory_fractions"), ("compute", "compute_fractions")):
            for group, value in p.get(key, {}).items():
                t.add_row(
                    name,
                    kind,
                    group,
                    f"{value:.3f}",
                    f"{p[f'{kind}_fraction']:.3f}",
                    escape(", ".join(rows.get(f"{kind}:{group}", []))),
                )
    return t


def print_calibration(
    payload: Mapping[str, Any], path: Path, console: Console | None = None
) -> None:
    console = console or _console()
    console.print(calibration_table(payload))
    console.print(group_table(payload))
    t = Table(title="Leave-one-out |residual| of the calibrated estimator")
    for col in ("phase", "n", "median", "worst", "worst case"):
        t.add_column(col)
    for s in payload["leave_one_out_summary"]:
        t.add_row(
            s["phase"] + (" (never fitted)" if s.get("note") else ""),
            str(s["n"]),
            _pct(s["median_abs_residual"]),
            _pct(s["worst_abs_residual"]),
            escape(s["worst_case"]),
        )
    console.print(t)
    console.print(f"written: {escape(str(path))}")


_HTML_LABELS = {
    "all": "all single-request",
    "batched": "batched (loaded; s per token; never fitted)",
}


def published_html_summary() -> tuple[list[str], list[list[str]], bytes | None]:
    """Headers, rows and the predicted-vs-published chart for the ``roofprof run`` report:
    median / worst |residual| per estimator and phase over the published corpus
    (calibrated: leave-one-out). Needs no device (about a second)."""
    from roofprof.plots import pyplot, save
    from roofprof.published import validate_published

    result = validate_published()
    rows = [
        [
            s["estimator"],
            _HTML_LABELS.get(s["value"], s["value"]),
            str(s["n"]),
            _pct(s["median_abs_residual"]),
            _pct(s["worst_abs_residual"]),
            s["worst_case"],
        ]
        for s in result.summary
        if s["group"] in ("all", "phase")
    ]
    chart = None
    try:
        from roofprof.plots.published import draw_published

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 6))
        draw_published(ax, result, "calibrated")
        chart = save(fig)
    except (ImportError, ValueError):
        chart = None
    headers = ["estimator", "phase", "n", "median |res|", "worst |res|", "worst case"]
    return headers, rows, chart
