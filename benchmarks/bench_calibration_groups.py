"""Leave-one-out accuracy of the calibrated estimator on the published corpus, per group
(engine × GPU generation × phase), before and after the fit's physical groups.

No GPU: every figure is a prediction of a published measurement (``data/published/``).
Each fitted row is predicted by profiles refitted without it; batched rows, never fitted,
by the fit on the whole corpus. "before" is the single-fraction model (one memory and one
compute fraction per engine, a prefill cost per pass, each dtype its own ceiling); "after"
is the shipped model (fractions per GPU generation and tensor path shrunk towards the
engine's own, prefill cost per kernel for CUDA-graph engines, fp16 and bf16 on one measured
16-bit ceiling). Each change alone, and the width of the groups' prior, are reported too
(unless ``--no-ablation``).

Usage::

    python benchmarks/bench_calibration_groups.py [--out results.json] [--no-ablation]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from roofprof.prediction.calibration import SINGLE_FRACTION, FitOptions, leave_one_out
from roofprof.prediction.loo_groups import compare_groups, group_summary
from roofprof.published.cases import cases

__all__ = ["FITS", "PRIOR_WIDTHS", "main", "phase_summary"]

PRIOR_WIDTHS = (0.03, 0.05, 0.10, 0.20, 0.50, 1e6)

FITS = {
    "before (single fraction)": SINGLE_FRACTION,
    "groups only": FitOptions(groups=True, prefill_per_kernel=False, shared_path=False),
    "prefill per kernel only": FitOptions(groups=False, prefill_per_kernel=True, shared_path=False),
    "shared 16-bit ceiling only": FitOptions(
        groups=False, prefill_per_kernel=False, shared_path=True
    ),
    "after (all three)": FitOptions(),
}


def phase_summary(predicted: dict[str, float], case_list) -> dict[str, dict]:
    """Per phase: n, median and max |residual| (fractions) and the worst case."""
    out = {}
    for phase in ("decode", "prefill", "offline", "batched"):
        res = {
            c.label: abs(predicted[c.label] / c.published_s - 1)
            for c in case_list
            if c.phase == phase
        }
        worst = max(res, key=lambda k: res[k])
        out[phase] = {
            "n": len(res),
            "median_abs": statistics.median(res.values()),
            "max_abs": res[worst],
            "worst_case": worst,
        }
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    ap.add_argument("--no-ablation", action="store_true", help="only before and after")
    args = ap.parse_args(argv)
    cs, _ = cases()
    fits = {
        k: v for k, v in FITS.items() if not args.no_ablation or k.startswith(("before", "after"))
    }
    preds, walls = {}, {}
    for name, options in fits.items():
        t0 = time.perf_counter()
        preds[name] = leave_one_out(options=options)
        walls[name] = time.perf_counter() - t0
    before, after = preds["before (single fraction)"], preds["after (all three)"]
    groups = compare_groups(group_summary(before, cs), group_summary(after, cs))
    phases = {name: phase_summary(p, cs) for name, p in preds.items()}
    rows = {
        c.label: {
            "engine": c.engine,
            "gpu": c.gpu,
            "phase": c.phase,
            "published_s": c.published_s,
            **{name: p[c.label] / c.published_s - 1 for name, p in preds.items()},
        }
        for c in cs
    }

    print("| rows | n | " + " | ".join(fits) + " |")
    print("| --- | ---: |" + " --- |" * len(fits))
    for phase in ("decode", "prefill", "offline", "batched"):
        n = phases["after (all three)"][phase]["n"]
        cells = [
            f"{_pct(phases[f][phase]['median_abs'])} / {_pct(phases[f][phase]['max_abs'])}"
            for f in fits
        ]
        print(f"| {phase} | {n} | " + " | ".join(cells) + " |")
    print()
    print(
        "| engine | GPU generation | phase | n | median before | max before | median after |"
        " max after | worst after |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for g in groups:
        print(
            f"| {g['engine']} | {g['generation']} | {g['phase']} | {g['n']} | "
            f"{_pct(g['median_before'])} | {_pct(g['max_before'])} | "
            f"{_pct(g['median_after'])} | {_pct(g['max_after'])} | {g['worst_after']} |"
        )
    prior = {}
    if not args.no_ablation:  # how much the prior's width matters (the shipped width: 0.10)
        print("\n| prior width (ln f) | decode | prefill | offline | batched |")
        print("| --- | --- | --- | --- | --- |")
        for width in PRIOR_WIDTHS:
            ph = phase_summary(leave_one_out(options=FitOptions(prior_scale=width)), cs)
            prior[str(width)] = ph
            cells = [f"{_pct(ph[k]['median_abs'])} / {_pct(ph[k]['max_abs'])}" for k in ph]
            label = "none (each group alone)" if width >= 1e3 else f"{width:g}"
            print(f"| {label} | " + " | ".join(cells) + " |")
    if args.out:
        payload = {
            "benchmark": "bench_calibration_groups",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.platform(),
            "python": sys.version.split()[0],
            "fits": {k: vars(v) if hasattr(v, "__dict__") else str(v) for k, v in fits.items()},
            "wall_s": walls,
            "phases": phases,
            "groups": groups,
            "prior_width": prior,
            "rows": rows,
        }
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
