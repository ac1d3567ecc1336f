"""Payloads and files: JSON-ready dicts, CSVs, pandas frames, the ``roofprof run`` folder.

Everything written here is strict JSON (:func:`roofprof.units.clean`) and written whole or
not at all (:mod:`roofprof.results`). pandas and matplotlib are imported lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roofprof.report.html import render_html
from roofprof.units import clean

__all__ = [
    "ops_frame",
    "roofline_summary_payload",
    "run_payload",
    "specs_payload",
    "write_run_report",
]


def ops_frame(predictions: Sequence):
    """All ops of all predictions as a pandas DataFrame (one row per op and prediction)."""
    import pandas as pd

    rows = []
    for p in predictions:
        d = p.to_dict()
        for op in d["ops"]:
            rows.append(
                {
                    "model": d["model"],
                    "gpu": d["gpu"],
                    "estimator": d["estimator"],
                    "batch": d["batch"],
                    "prompt_tokens": d["prompt_tokens"],
                    "context_tokens": d["context_tokens"],
                    **op,
                }
            )
    return pd.DataFrame(rows)


def specs_payload() -> dict[str, Any]:
    """GPUs and models with their key figures (for ``roofprof specs --format json``)."""
    from roofprof.specs import gpu_sources, list_gpus, list_models, load_model

    gpus = [
        {
            "id": g.id,
            "name": g.name,
            "compute_capability": g.compute_capability,
            "sm_count": g.sm_count,
            "memory_bytes": g.memory_bytes,
            "memory_bytes_per_s": g.memory_bytes_per_s,
            "peak_flops_per_s": dict(g.peak_flops_per_s),
            "ridge_bf16_flops_per_byte": g.ridge_flops_per_byte("bf16")
            if "bf16" in g.peak_flops_per_s
            else None,
            "aliases": list(g.aliases),
            "sources": list(g.sources),
        }
        for g in list_gpus()
    ]
    models = []
    for mid in list_models():
        m = load_model(mid)
        models.append(
            {
                "id": m.id,
                "params": m.param_count(),
                "active_params": m.active_param_count(),
                "layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "heads": m.num_heads,
                "kv_heads": m.num_kv_heads,
                "head_dim": m.head_dim,
                "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"),
                "source": m.source,
            }
        )
    return {"gpus": gpus, "models": models, "sources": dict(gpu_sources())}


def run_payload(result) -> dict[str, Any]:
    """Everything behind the report as one JSON-ready dict."""
    from roofprof.prediction.rollup import compare

    comparison = (
        result.validation.comparison()
        if result.validation is not None
        else compare(result.predictions, None)
    )
    rr = result.roofline_result
    return clean(
        {
            "model": result.model,
            "dtype": result.dtype,
            "device": result.device,
            "settings": result.settings,
            "elapsed_s": result.elapsed_s,
            "step_seconds": result.step_seconds,
            "doctor": result.doctor,
            "roofline": result.roofline.to_dict() if result.roofline is not None else None,
            "roofline_warnings": list(getattr(rr, "warnings", ()) or ()),
            "spec_roofline": result.spec_roofline.to_dict()
            if result.spec_roofline is not None
            else None,
            "profiles": {k: v.to_dict() for k, v in result.profiles.items()},
            "predictions": {k: v.to_dict() for k, v in result.predictions.items()},
            "unavailable_estimators": result.unavailable,
            "comparison": comparison,
            "validation": result.validation.to_dict() if result.validation is not None else None,
            "batch_sweep": {k: [_phase_row(p) for p in v] for k, v in result.batch_sweep.items()},
            "context_sweep": {
                k: [_phase_row(p) for p in v] for k, v in result.context_sweep.items()
            },
            "warnings": result.warnings,
            "files": result.files,
        }
    )


def _phase_row(p) -> dict[str, Any]:
    w = p.workload
    return {
        "phase": w.phase,
        "batch": w.batch,
        "prompt_tokens": w.prompt_tokens,
        "context_tokens": w.context_tokens,
        "seconds": p.seconds,
        "tokens_per_second": w.tokens / p.seconds if p.seconds else None,
        "bound": p.bound,
        "attention_share": p.attention_seconds / p.seconds if p.seconds else None,
        "flops": p.flops,
        "bytes": p.bytes,
    }


def _csv(rows: Sequence[dict], path) -> None:
    import csv
    import io

    from roofprof.results import write_text_atomic

    buf = io.StringIO()
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    write_text_atomic(path, buf.getvalue())


def write_run_report(result, html: bool = True) -> dict[str, str]:
    """Write ``report.json``, ``measured_ops.csv``, ``predicted_ops.csv``, ``comparison.csv``,
    ``sweeps.csv``, the chart PNGs and ``index.html`` (self-contained) into ``result.out``."""
    from roofprof.results import write_json_atomic

    out = result.out
    payload = run_payload(result)
    if html:
        measured_rows = []
        for phase, prof in result.profiles.items():
            for o in prof.to_dict()["ops"]:
                measured_rows.append(
                    {
                        "phase": phase,
                        **{k: v for k, v in o.items() if k != "implementations"},
                        "implementations": "; ".join(
                            f"{m['impl']}:{m['status']}:{m.get('median_s', '')}"
                            for m in o["implementations"]
                        ),
                    }
                )
        _csv(clean(measured_rows), out / "measured_ops.csv")
        predicted = [
            {"estimator": label, **op}
            for label, d in payload["predictions"].items()
            for op in d["ops"]
        ]
        _csv(predicted, out / "predicted_ops.csv")
        _csv(payload["comparison"], out / "comparison.csv")
        sweeps = [
            {"sweep": kind, "estimator": label, **row}
            for kind in ("batch_sweep", "context_sweep")
            for label, rows in payload[kind].items()
            for row in rows
        ]
        _csv(sweeps, out / "sweeps.csv")
        result.files.update(
            {
                "report": "index.html",
                "json": "report.json",
                "measured ops": "measured_ops.csv",
                "predicted ops": "predicted_ops.csv",
                "comparison": "comparison.csv",
                "sweeps": "sweeps.csv",
            }
        )
        charts = _charts(result, payload)
        from roofprof.results import write_text_atomic

        write_text_atomic(out / "index.html", render_html(result, payload, charts))
        payload["files"] = result.files
    payload["elapsed_s"] = result.elapsed_s
    payload["step_seconds"] = result.step_seconds
    write_json_atomic(out / "report.json", payload)
    return result.files


def _charts(result, payload) -> dict[str, bytes]:
    from roofprof.plots import report as charts

    out = result.out
    files: dict[str, bytes] = {}
    dev = result.device
    title = f"{result.model} on {dev.get('name')} ({dev.get('label')}), {result.dtype}"
    if result.profiles:
        files["roofline"] = charts.roofline_chart(
            result.roofline,
            result.profiles,
            spec=result.spec_roofline,
            dtype=result.dtype,
            title=f"Roofline: {title}",
            path=out / "roofline.png",
        )
    preds = result.validation.predictions if result.validation is not None else result.predictions
    if preds:
        files["breakdown"] = charts.breakdown_chart(
            preds, result.validation.real if result.validation else None, path=out / "breakdown.png"
        )
    if payload["comparison"]:
        files["estimators"] = charts.estimator_chart(
            payload["comparison"], path=out / "estimators.png"
        )
    if result.batch_sweep:
        files["sweeps"] = charts.sweep_chart(
            result.batch_sweep, result.context_sweep, path=out / "sweeps.png"
        )
    clocks = _clock_samples(result)
    if any(c[1] is not None for c in clocks):
        files["clocks"] = charts.clock_chart(clocks, path=out / "clocks.png")
    for name in files:
        result.files[f"{name} chart"] = f"{name}.png"
    return files


def _clock_samples(result) -> list[tuple[str, float | None, float | None]]:
    out = []
    for phase, prof in result.profiles.items():
        for o in prof.ops:
            for m in o.measurements:
                t = m.telemetry or {}
                if m.ok and (
                    t.get("clock_mhz")
                    or t.get("cpu_clock_mhz_median")
                    or t.get("sm_clock_mhz_median")
                ):
                    med = (
                        t.get("sm_clock_mhz_median")
                        or t.get("cpu_clock_mhz_median")
                        or t.get("clock_mhz")
                    )
                    low = t.get("sm_clock_mhz_min") or t.get("cpu_clock_mhz_min")
                    out.append((f"{phase[0]}:{o.op.name}:{m.impl}", med, low))
    if result.validation is not None:
        t = result.validation.telemetry or {}
        med = t.get("sm_clock_mhz_median") or t.get("cpu_clock_mhz_median")
        if med:
            out.append(("real run", med, t.get("sm_clock_mhz_min") or t.get("cpu_clock_mhz_min")))
    return out


def roofline_summary_payload(result, written: Sequence[Path]) -> dict[str, Any]:
    """``roofprof roofline --format json``: device, ceilings, spec comparison, files written."""
    keys = (
        "name",
        "kind",
        "level",
        "dtype",
        "value",
        "unit",
        "clock_mhz",
        "median_value",
        "noisy",
        "source",
    )
    return {
        "device": result.device.to_dict(),
        "complete": result.complete,
        "ceilings": [{k: c.get(k) for k in keys} for c in result.ceilings],
        "spec_comparison": dict(result.spec_comparison),
        "warnings": list(result.warnings),
        "elapsed_s": result.elapsed_s,
        "files": [str(p) for p in written],
    }
