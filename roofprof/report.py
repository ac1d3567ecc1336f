"""Tables and exports at the edge: rich tables for the terminal, pandas frames for CSV.

Formatting only: every number shown was computed elsewhere (rollup, probes, profile).
pandas is imported lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``1.234e12, "FLOP/s"`` → ``"1.23 TFLOP/s"`` (decimal prefixes).

    >>> si(3.35e12, "B/s")
    '3.35 TB/s'
    >>> si(0.0048, "s")
    '4.80 ms'
    """
    if value != value:  # NaN
        return "n/a"
    if value == 0:
        return f"0 {unit}".strip()
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"),
                (1e-6, "µ"), (1e-9, "n")]
    if unit in ("s",):
        prefixes = [p for p in prefixes if p[0] <= 1]
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.{digits - 1 if abs(value / scale) < 10 else max(digits - 2, 0) if abs(value / scale) < 100 else max(digits - 3, 0)}f} {prefix}{unit}".strip()
    scale, prefix = prefixes[-1]
    return f"{value / scale:.2f} {prefix}{unit}".strip()


def _console() -> Console:
    import shutil

    # Pipes default to 80 columns, which wraps every cell; tables here need ~110.
    return Console(width=max(shutil.get_terminal_size((120, 40)).columns, 110))


def print_predictions(predictions: Sequence, console: Console | None = None) -> None:
    """A summary (one prediction) or a sweep table (several), then the per-op breakdown."""
    console = console or _console()
    first = predictions[0]
    d0 = first.to_dict()
    console.print(f"[bold]{first.model.id}[/] on [bold]{first.machine}[/], {d0['dtype']}, "
                  f"estimator [bold]{first.estimator}[/]; ridge {d0['ridge_flops_per_byte']:.0f} FLOP/byte")
    console.print(f"[dim]counting: {d0['counting']}[/]")
    if len(predictions) == 1:
        pf, dc = d0["prefill"], d0["decode"]
        table = Table(title=f"batch {d0['batch']}, prompt {d0['prompt_tokens']} tokens, "
                            f"decode context {d0['context_tokens']} tokens")
        table.add_column("")
        table.add_column("prefill (TTFT, no network)", justify="right")
        table.add_column("decode (one step)", justify="right")
        table.add_row("time", si(pf["seconds"], "s"), si(dc["seconds_per_token"], "s"))
        table.add_row("tokens/s", f"{d0['batch'] * d0['prompt_tokens'] / pf['seconds']:,.0f} (prompt)",
                      f"{dc['tokens_per_second']:,.0f} (all sequences)")
        table.add_row("FLOPs", si(pf["flops"], "FLOP"), si(dc["flops"], "FLOP"))
        table.add_row("bytes", si(pf["bytes"], "B"), f"{si(dc['bytes'], 'B')} (weights {si(dc['weight_bytes'], 'B')}, "
                      f"KV {si(dc['kv_cache_bytes'], 'B')})")
        table.add_row("intensity", f"{pf['intensity']:,.1f} FLOP/B", f"{dc['intensity']:,.1f} FLOP/B")
        table.add_row("attention share of time", f"{100 * pf['attention_share']:.1f}%", f"{100 * dc['attention_share']:.1f}%")
        table.add_row("bound", pf["bound"], dc["bound"])
        console.print(table)
        console.print(op_table(first))
    else:
        table = Table(title="Sweep: prefill (TTFT, no network) and decode")
        for col in ("batch", "prompt", "context", "TTFT", "prefill bound", "attn share", "decode step",
                    "tokens/s", "decode bytes", "KV cache", "decode bound"):
            table.add_column(col, justify="right")
        for p in predictions:
            d = p.to_dict()
            pf, dc = d["prefill"], d["decode"]
            table.add_row(str(d["batch"]), str(d["prompt_tokens"]), str(d["context_tokens"]), si(pf["seconds"], "s"),
                          pf["bound"], f"{100 * pf['attention_share']:.0f}%", si(dc["seconds_per_token"], "s"),
                          f"{dc['tokens_per_second']:,.0f}", si(dc["bytes"], "B"), si(dc["kv_cache_bytes"], "B"),
                          dc["bound"])
        console.print(table)
    for w in d0.get("warnings", []):
        console.print(f"[yellow]warning:[/] {w}")


def op_table(prediction, title: str | None = None) -> Table:
    """Per-op breakdown of both phases: shape, FLOPs, bytes, intensity, time, bound."""
    table = Table(title=title or "Per-op breakdown (layer ops: all layers together)")
    for col in ("phase", "op", "M×N×K (batch)", "FLOPs", "bytes", "FLOP/B", "time", "share", "bound"):
        table.add_column(col, justify="left" if col in ("phase", "op", "bound") else "right")
    for phase in (prediction.prefill, prediction.decode):
        total = phase.seconds
        for o in phase.ops:
            op = o.op
            shape = f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else "")
            table.add_row(op.phase, op.name + (f" ×{op.count}" if op.count > 1 else ""), shape,
                          si(op.total_flops, "FLOP"), si(op.total_bytes, "B"),
                          f"{op.intensity:,.1f}" if op.bytes else "∞", si(o.seconds, "s"),
                          f"{100 * o.seconds / total:.1f}%", o.estimate.bound)
    return table


def ops_frame(predictions: Sequence):
    """All ops of all predictions as a pandas DataFrame (one row per op and prediction)."""
    import pandas as pd

    rows = []
    for p in predictions:
        d = p.to_dict()
        for op in d["ops"]:
            rows.append({"model": d["model"], "gpu": d["gpu"], "estimator": d["estimator"], "batch": d["batch"],
                         "prompt_tokens": d["prompt_tokens"], "context_tokens": d["context_tokens"], **op})
    return pd.DataFrame(rows)


def specs_payload() -> dict[str, Any]:
    """GPUs and models with their key figures (for ``roofprof specs --format json``)."""
    from roofprof.specs import gpu_sources, list_gpus, list_models, load_model

    gpus = [{"id": g.id, "name": g.name, "compute_capability": g.compute_capability, "sm_count": g.sm_count,
             "memory_bytes": g.memory_bytes, "memory_bytes_per_s": g.memory_bytes_per_s,
             "peak_flops_per_s": dict(g.peak_flops_per_s), "ridge_bf16_flops_per_byte":
             g.ridge_flops_per_byte("bf16") if "bf16" in g.peak_flops_per_s else None,
             "aliases": list(g.aliases), "sources": list(g.sources)} for g in list_gpus()]
    models = []
    for mid in list_models():
        m = load_model(mid)
        models.append({"id": m.id, "params": m.param_count(), "layers": m.num_layers, "hidden_size": m.hidden_size,
                       "heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                       "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"), "source": m.source})
    return {"gpus": gpus, "models": models, "sources": dict(gpu_sources())}


def print_specs(console: Console | None = None) -> None:
    """Rich tables of the GPU database and the shipped models."""
    console = console or _console()
    payload = specs_payload()
    gpus = Table(title="GPUs (datasheet, dense; see data/gpus.json for sources)")
    for col in ("id", "name", "SMs", "memory", "bandwidth", "fp32", "bf16", "fp8", "ridge bf16", "sources"):
        gpus.add_column(col, justify="left" if col in ("id", "name", "sources") else "right")
    for g in payload["gpus"]:
        peaks = g["peak_flops_per_s"]
        gpus.add_row(g["id"], g["name"], str(g["sm_count"]), si(g["memory_bytes"], "B"), si(g["memory_bytes_per_s"], "B/s"),
                     si(peaks.get("fp32", float("nan")), "FLOP/s"), si(peaks.get("bf16", float("nan")), "FLOP/s"),
                     si(peaks.get("fp8", float("nan")), "FLOP/s"),
                     f"{g['ridge_bf16_flops_per_byte']:.0f}" if g["ridge_bf16_flops_per_byte"] else "n/a",
                     ",".join(g["sources"]))
    console.print(gpus)
    models = Table(title="Models (data/models/*.json; any HF Llama config.json path works too)")
    for col in ("id", "params", "layers", "hidden", "heads/kv", "head_dim", "KV bytes/token (bf16)"):
        models.add_column(col, justify="left" if col == "id" else "right")
    for m in payload["models"]:
        models.add_row(m["id"], f"{m['params'] / 1e9:.2f} B", str(m["layers"]), str(m["hidden_size"]),
                       f"{m['heads']}/{m['kv_heads']}", str(m["head_dim"]), f"{m['kv_bytes_per_token_bf16']:,}")
    console.print(models)


# --------------------------------------------------------------------------- profile / validate / run


def clean(obj: Any) -> Any:
    """``obj`` with NaN/inf floats replaced by None, tuples by lists (strict JSON).

    >>> clean({"a": float("nan"), "b": (1, 2.0)})
    {'a': None, 'b': [1, 2.0]}
    """
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def _pct(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.0f}%"


def _resid(x: float | None) -> str:
    return "" if x is None or x != x else f"{x:+.1%}"


def profile_table(result, title: str | None = None) -> Table:
    """Per op of one :class:`~roofprof.profile.ProfileResult`: time, rates, roof, bound, every impl."""
    w = result.workload
    table = Table(title=title or f"{w.model.id} {w.phase}: batch {w.batch}, "
                  + (f"prompt {w.prompt_tokens}" if w.phase == "prefill" else f"context {w.context_tokens}")
                  + f", {w.dtype} (layer ops ×{w.model.num_layers})")
    for col in ("op", "M×N×K (batch)", "impl", "time/call", "all calls", "FLOP/s", "B/s", "FLOP/B", "roof",
                "% roof", "bound", "CV", "other impls"):
        table.add_column(col, justify="left" if col in ("op", "impl", "bound", "other impls") else "right",
                         no_wrap=col not in ("other impls",))
    for o in result.ops:
        op, p = o.op, o.placement()
        shape = f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else "")
        impls = " ".join(f"{m.impl} {si(m.seconds, 's')}" if m.ok else f"{m.impl} [red]{m.status}[/]"
                         for m in o.measurements
                         if m is not o.chosen and m.status != "unsupported")
        if o.chosen is None:
            table.add_row(op.name + (f" ×{op.count}" if op.count > 1 else ""), shape, "[red]none[/]", "", "", "", "",
                          f"{op.intensity:,.1f}" if op.bytes else "∞", "", "", "", "", impls)
            continue
        table.add_row(op.name + (f" ×{op.count}" if op.count > 1 else ""), shape, o.chosen.impl, si(o.seconds, "s"),
                      si(o.seconds * op.count, "s"), si(p["flops_per_s"] or 0.0, "FLOP/s"),
                      si(p["bytes_per_s"] or 0.0, "B/s"), f"{op.intensity:,.1f}" if op.bytes else "∞",
                      si(p["attainable_flops_per_s"], "FLOP/s") if p["attainable_flops_per_s"] else "n/a",
                      _pct(p["percent_of_roof"] if op.flops else p["percent_of_roof_time"]), p["bound"] or "n/a",
                      f"{o.chosen.timing.cv:.0%}" + (" [yellow]noisy[/]" if o.chosen.timing.noisy else ""), impls)
    return table


def print_profiles(results: Sequence, console: Console | None = None) -> None:
    """Tables of each profile, then (for several) a sweep summary with the decode bound."""
    import shutil

    console = console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 160))
    first = results[0]
    console.print(f"[bold]{first.workload.model.id}[/] on [bold]{first.device.get('name')}[/] "
                  f"({first.device.get('label')}), threads {first.threads}; roofline: {first.roofline_source or 'none'}; "
                  f"launch overhead {si(first.launch_s, 's')}/kernel")
    console.print(f"[dim]counting: {first.workload.counting.describe()}[/]")
    for r in results:
        console.print(profile_table(r))
        console.print(f"measured sum: [bold]{si(r.seconds, 's')}[/]"
                      + (f" ({r.workload.tokens / r.seconds:,.1f} tokens/s)" if r.seconds else ""))
        for wmsg in r.warnings:
            console.print(f"[yellow]warning:[/] {wmsg}")
    if len(results) > 1:
        table = Table(title="Sweep: measured sums and the bound that takes most of the time")
        for col in ("phase", "batch", "prompt", "context", "measured", "tokens/s", "memory-bound share", "bound"):
            table.add_column(col, justify="right")
        for r in results:
            w = r.workload
            shares = _bound_shares(r)
            table.add_row(w.phase, str(w.batch), str(w.prompt_tokens), str(w.context_tokens), si(r.seconds, "s"),
                          f"{w.tokens / r.seconds:,.1f}" if r.seconds else "n/a", _pct(100 * shares.get("memory", 0.0)),
                          max(shares, key=shares.get) if shares else "n/a")
        console.print(table)


def _bound_shares(result) -> dict[str, float]:
    """Share of the measured time in memory- and compute-bound ops (bound from the roofline placement)."""
    shares: dict[str, float] = {}
    total = result.seconds
    for o in result.ops:
        if o.chosen is None:
            continue
        b = o.placement()["bound"] or "unplaced"
        shares[b] = shares.get(b, 0.0) + o.seconds * o.op.count / total if total else 0.0
    return shares


def comparison_table(rows: Sequence[dict], title: str = "Estimators against the real run") -> Table:
    """TTFT, decode step, tokens/s and residuals, one row per estimator (from rollup.compare)."""
    table = Table(title=title)
    for col in ("estimator", "TTFT", "residual", "decode step", "residual", "tokens/s", "decode bound"):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    for r in rows:
        real = r["estimator"] == "real"
        table.add_row(f"[bold]{r['estimator']}[/]" if real else r["estimator"], si(r["ttft_s"], "s"),
                      "" if real else _resid(r["ttft_residual"]), si(r["decode_step_s"], "s"),
                      "" if real else _resid(r["decode_residual"]), f"{r['tokens_per_second']:,.2f}",
                      r.get("decode_bound", ""))
    return table


def print_validation(result, console: Console | None = None) -> None:
    """The real run (what ran, timings, scaling) and each estimator's residual."""
    console = console or _console()
    r = result.real
    console.print(f"[bold]real run[/]: {result.model.id} — {result.backend}, attention "
                  f"{'SDPA' if result.attention == 'fused' else 'eager'}, {result.dtype}, "
                  f"{result.device.get('label')}, threads {result.threads}, clock {result.clock}")
    console.print(f"prefill {r.batch}×{r.prompt_tokens} tokens: [bold]{si(r.prefill_s, 's')}[/] "
                  f"(samples {', '.join(si(s, 's') for s in result.prefill_samples_s)}); decode step at "
                  f"{r.context_tokens} cached tokens: [bold]{si(r.decode_s, 's')}[/] ({r.tokens_per_second:,.2f} tokens/s; "
                  f"IQR {si(r.decode_spread_s, 's')})")
    console.print(f"[dim]memory: {result.memory.describe()}[/]")
    if result.predictions:
        console.print(comparison_table(result.comparison()))
    for w in result.warnings:
        console.print(f"[yellow]note:[/] {w}")


# -- run: payload, CSV, HTML ------------------------------------------------------------


def run_payload(result) -> dict[str, Any]:
    """Everything behind the report as one JSON-ready dict."""
    from roofprof.rollup import compare

    comparison = result.validation.comparison() if result.validation is not None else compare(result.predictions, None)
    rr = result.roofline_result
    return clean({
        "model": result.model, "dtype": result.dtype, "device": result.device, "settings": result.settings,
        "elapsed_s": result.elapsed_s, "step_seconds": result.step_seconds, "doctor": result.doctor,
        "roofline": result.roofline.to_dict() if result.roofline is not None else None,
        "roofline_warnings": list(getattr(rr, "warnings", ()) or ()),
        "spec_roofline": result.spec_roofline.to_dict() if result.spec_roofline is not None else None,
        "profiles": {k: v.to_dict() for k, v in result.profiles.items()},
        "predictions": {k: v.to_dict() for k, v in result.predictions.items()},
        "unavailable_estimators": result.unavailable,
        "comparison": comparison,
        "validation": result.validation.to_dict() if result.validation is not None else None,
        "batch_sweep": {k: [_phase_row(p) for p in v] for k, v in result.batch_sweep.items()},
        "context_sweep": {k: [_phase_row(p) for p in v] for k, v in result.context_sweep.items()},
        "warnings": result.warnings, "files": result.files,
    })


def _phase_row(p) -> dict[str, Any]:
    w = p.workload
    return {"phase": w.phase, "batch": w.batch, "prompt_tokens": w.prompt_tokens, "context_tokens": w.context_tokens,
            "seconds": p.seconds, "tokens_per_second": w.tokens / p.seconds if p.seconds else None,
            "bound": p.bound, "attention_share": p.attention_seconds / p.seconds if p.seconds else None,
            "flops": p.flops, "bytes": p.bytes}


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
                measured_rows.append({"phase": phase, **{k: v for k, v in o.items() if k != "implementations"},
                                      "implementations": "; ".join(
                                          f"{m['impl']}:{m['status']}:{m.get('median_s', '')}" for m in o["implementations"])})
        _csv(clean(measured_rows), out / "measured_ops.csv")
        predicted = [{"estimator": label, **op} for label, d in payload["predictions"].items() for op in d["ops"]]
        _csv(predicted, out / "predicted_ops.csv")
        _csv(payload["comparison"], out / "comparison.csv")
        sweeps = [{"sweep": kind, "estimator": label, **row} for kind in ("batch_sweep", "context_sweep")
                  for label, rows in payload[kind].items() for row in rows]
        _csv(sweeps, out / "sweeps.csv")
        result.files.update({"report": "index.html", "json": "report.json", "measured ops": "measured_ops.csv",
                             "predicted ops": "predicted_ops.csv", "comparison": "comparison.csv",
                             "sweeps": "sweeps.csv"})
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
    title = f"{result.model} on {result.device.get('name')} ({result.device.get('label')}), {result.dtype}"
    if result.profiles:
        files["roofline"] = charts.roofline_chart(result.roofline, result.profiles, spec=result.spec_roofline,
                                                  dtype=result.dtype, title=f"Roofline: {title}",
                                                  path=out / "roofline.png")
    preds = result.validation.predictions if result.validation is not None else result.predictions
    if preds:
        files["breakdown"] = charts.breakdown_chart(preds, result.validation.real if result.validation else None,
                                                    path=out / "breakdown.png")
    if payload["comparison"]:
        files["estimators"] = charts.estimator_chart(payload["comparison"], path=out / "estimators.png")
    if result.batch_sweep:
        files["sweeps"] = charts.sweep_chart(result.batch_sweep, result.context_sweep, path=out / "sweeps.png")
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
                if m.ok and (t.get("clock_mhz") or t.get("cpu_clock_mhz_median") or t.get("sm_clock_mhz_median")):
                    med = t.get("sm_clock_mhz_median") or t.get("cpu_clock_mhz_median") or t.get("clock_mhz")
                    low = t.get("sm_clock_mhz_min") or t.get("cpu_clock_mhz_min")
                    out.append((f"{phase[0]}:{o.op.name}:{m.impl}", med, low))
    if result.validation is not None:
        t = result.validation.telemetry or {}
        med = t.get("sm_clock_mhz_median") or t.get("cpu_clock_mhz_median")
        if med:
            out.append(("real run", med, t.get("sm_clock_mhz_min") or t.get("cpu_clock_mhz_min")))
    return out


def _throttle_summary(result) -> list[str]:
    lines = []
    reasons: dict[str, int] = {}
    unavailable = set()
    for prof in result.profiles.values():
        for o in prof.ops:
            for m in o.measurements:
                t = m.telemetry or {}
                for r in t.get("clocks_event_reasons") or ():
                    reasons[r] = reasons.get(r, 0) + 1
                if t and not t.get("available", True):
                    unavailable.add(t.get("reason", "unavailable"))
                if t.get("reason") and t.get("available"):
                    unavailable.add(t["reason"])
    if reasons:
        lines.append("clock-event reasons seen: " + ", ".join(f"{k} ({v} measurements)" for k, v in reasons.items()))
    else:
        lines.append("no throttling reason reported during the measurements")
    lines.extend(sorted(unavailable))
    measured = [m.telemetry or {} for prof in result.profiles.values() for o in prof.ops for m in o.measurements if m.ok]
    retried = sum(1 for t in measured if (t.get("attempts") or 1) > 1)
    contended = sum(1 for t in measured if t.get("contended"))
    if retried or contended:
        lines.append(f"machine load: {retried} of {len(measured)} op measurements were repeated because other "
                     f"processes used the CPUs; {contended} stayed contended after the retries")
    elif any(t.get("other_cpu_share") is not None for t in measured):
        lines.append("machine load: no op measurement saw other processes take a noticeable share of the CPUs")
    if result.validation is not None:
        shares = (result.validation.telemetry or {}).get("other_cpu_share") or {}
        worst = max([*shares.get("prefill", []), *shares.get("decode", [])], default=None)
        if worst is not None:
            lines.append(f"real run: other processes used at most {worst:.0%} of the CPUs during its timed samples")
    return lines


def _esc(x: Any) -> str:
    import html

    return html.escape(str(x))


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = "".join(f"<td class='{'num' if i >= numeric_from and not isinstance(c, _Raw) else ''}'>"
                        f"{c if isinstance(c, _Raw) else _esc(c)}</td>" for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw(str):
    """HTML that must not be escaped."""


def _img(data: bytes | None, alt: str) -> str:
    import base64

    if not data:
        return f"<p class='muted'>({_esc(alt)}: not available)</p>"
    return f"<img alt='{_esc(alt)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'/>"


def _impl_cell(m) -> str:
    """One implementation in the ops table: its time (chosen one in bold), or its status with the reason on hover."""
    if m.ok:
        return f"{_esc(m.impl)}: {si(m.seconds, 's')}"
    mark = {"unsupported": "—", "failed": "<b style='color:#b00'>FAILED check</b>",
            "error": "<b style='color:#b00'>error</b>"}.get(m.status, _esc(m.status))
    return f"<span title='{_esc(m.note)}'>{_esc(m.impl)}: {mark}</span>"


def render_html(result, payload: dict[str, Any], charts: dict[str, bytes]) -> str:
    """The self-contained report page (charts inlined as base64 PNG, no external resources)."""
    dev = result.device
    val = result.validation
    comp = payload["comparison"]
    parts: list[str] = []
    add = parts.append
    add(f"<h1>roofprof report: {_esc(result.model)} on {_esc(dev.get('name'))}</h1>")
    add(f"<p class='muted'>device {_esc(dev.get('label'))}, {_esc(result.dtype)}, threads {_esc(result.settings.get('threads'))}; "
        f"batch {result.settings.get('batch')}, prompt {result.settings.get('prompt_tokens')} tokens; "
        f"{_esc(result.settings.get('counting'))}. Run took {result.elapsed_s:.0f} s "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in result.step_seconds.items())}).</p>")
    # headline
    by = {r["estimator"]: r for r in comp}
    cards = []
    for label in ("real", "measured", "empirical", "spec"):
        r = by.get(label)
        if r is None:
            continue
        resid = "" if label == "real" else (f"<div class='res'>TTFT {_resid(r['ttft_residual'])}, decode "
                                            f"{_resid(r['decode_residual'])} vs real</div>" if val else "")
        cards.append(f"<div class='card'><div class='lbl'>{_esc(label)}</div><div class='big'>{si(r['ttft_s'], 's')}"
                     f"</div><div>time to first token</div><div class='big'>{r['tokens_per_second']:,.2f}</div>"
                     f"<div>tokens/s ({si(r['decode_step_s'], 's')} per step)</div>{resid}</div>")
    add(f"<div class='cards'>{''.join(cards)}</div>")
    if val is not None:
        add(f"<p>Real run: {_esc(val.backend)}, attention {'SDPA (fused)' if val.attention == 'fused' else 'eager'}, "
            f"clock {_esc(val.clock)}; {_esc(val.memory.describe())}. Prefill samples "
            f"{', '.join(si(s, 's') for s in val.prefill_samples_s)}; decode step samples "
            f"{', '.join(si(s, 's') for s in val.decode_samples_s)} (context {val.real.context_tokens}).</p>")
    add("<h2>Estimators against the real run</h2>")
    add("<p>Residual = predicted / real − 1. <b>spec</b>: datasheet roofline; <b>empirical</b>: measured ceilings; "
        "<b>measured</b>: sum of measured per-op times, each op at least its kernels × the launch overhead "
        f"({si(result.profiles['decode'].launch_s if 'decode' in result.profiles else 0.0, 's')} per kernel); "
        "<b>measured-no-launch</b>: the plain sum; <b>real</b>: the model forward pass.</p>")
    add(_html_table(["estimator", "TTFT", "TTFT residual", "decode step", "decode residual", "tokens/s", "prefill bound",
                     "decode bound"],
                    [[r["estimator"], si(r["ttft_s"], "s"), _resid(r["ttft_residual"]) if r["estimator"] != "real" else "",
                      si(r["decode_step_s"], "s"), _resid(r["decode_residual"]) if r["estimator"] != "real" else "",
                      f"{r['tokens_per_second']:,.2f}", r.get("prefill_bound", ""), r.get("decode_bound", "")] for r in comp]))
    for label, why in result.unavailable.items():
        add(f"<p class='muted'>{_esc(label)}: not available ({_esc(why)})</p>")
    add(_img(charts.get("estimators"), "estimator comparison"))
    add(_img(charts.get("breakdown"), "time by op group"))
    add("<h2>Roofline with every op</h2>")
    add("<p>Solid: measured ceilings of this machine; dashed: datasheet (GPUs in data/gpus.json only). Each op sits at its "
        "analytic intensity (FLOPs / minimum DRAM bytes) and its achieved FLOP/s; ▲ prefill, ● decode.</p>")
    add(_img(charts.get("roofline"), "roofline"))
    if result.roofline is not None:
        add(_html_table(["ceiling", "kind", "dtype / level", "value", "source", "clock"],
                        [[c.name, c.kind, c.dtype or c.level, si(c.value, "FLOP/s" if c.kind == "compute" else "B/s"),
                          c.source, f"{c.clock_mhz:.0f} MHz" if c.clock_mhz else ""] for c in result.roofline.ceilings],
                        numeric_from=3))
    for phase, prof in result.profiles.items():
        w = prof.workload
        add(f"<h2>Measured ops: {phase}</h2>")
        add(f"<p class='muted'>batch {w.batch}, {'prompt ' + str(w.prompt_tokens) if phase == 'prefill' else 'context ' + str(w.context_tokens)} "
            f"tokens; layer ops run ×{w.model.num_layers}; measured sum {si(prof.seconds, 's')}. Percent of roof: achieved "
            "FLOP/s over the attainable roof at the op's intensity (for ops with no FLOPs: roof time over measured time).</p>")
        rows = []
        for o in prof.ops:
            op, p = o.op, o.placement()
            rows.append([op.name + (f" ×{op.count}" if op.count > 1 else ""),
                         f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else ""),
                         o.chosen.impl if o.chosen else "none", si(o.seconds, "s") if o.chosen else "",
                         si(o.seconds * op.count, "s") if o.chosen else "",
                         f"{100 * o.seconds * op.count / prof.seconds:.1f}%" if o.chosen and prof.seconds else "",
                         si(p["flops_per_s"] or 0.0, "FLOP/s"), si(p["bytes_per_s"] or 0.0, "B/s"),
                         f"{op.intensity:,.2f}" if op.bytes else "∞",
                         si(p["attainable_flops_per_s"], "FLOP/s") if p["attainable_flops_per_s"] else "n/a",
                         _pct(p["percent_of_roof"] if op.flops else p["percent_of_roof_time"]), p["bound"] or "n/a",
                         f"{o.chosen.timing.cv:.0%}" if o.chosen else "",
                         _Raw("<br>".join(_impl_cell(m) for m in o.measurements))])
        add(_html_table(["op", "M×N×K (batch)", "impl", "time/call", "all calls", "share", "FLOP/s", "B/s", "FLOP/B",
                         "roof", "% roof", "bound", "CV", "all implementations (correctness-checked first)"], rows,
                        numeric_from=3))
    if result.batch_sweep:
        add("<h2>Decode sweeps</h2>")
        add(_img(charts.get("sweeps"), "sweeps"))
        rows = []
        for kind, data in (("batch", payload["batch_sweep"]), ("context", payload["context_sweep"])):
            for label, items in data.items():
                for r in items:
                    rows.append([kind, label, r["batch"], r["context_tokens"], si(r["seconds"] or 0.0, "s"),
                                 f"{r['tokens_per_second'] or 0.0:,.1f}", r["bound"],
                                 _pct(100 * (r["attention_share"] or 0.0))])
        add(_html_table(["sweep", "estimator", "batch", "context", "decode step", "tokens/s", "bound", "attention"], rows,
                        numeric_from=2))
    add("<h2>Clocks and throttling</h2>")
    add("".join(f"<p>{_esc(line)}</p>" for line in _throttle_summary(result)))
    add(_img(charts.get("clocks"), "clocks"))
    if result.warnings or payload.get("roofline_warnings"):
        add("<h2>Warnings</h2><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in dict.fromkeys(result.warnings)) + "</ul>")
    add("<h2>Environment (doctor)</h2>")
    add(_html_table(["component", "status", "detail"],
                    [[r["component"], "ok" if r["ok"] else "missing", r["detail"]] for r in result.doctor], numeric_from=9))
    add("<h2>Provenance</h2>")
    prov = next(iter(result.profiles.values())).provenance if result.profiles else {}
    add(_html_table(["field", "value"], [[k, v if not isinstance(v, dict) else ", ".join(f"{a} {b}" for a, b in v.items())]
                                         for k, v in prov.items() if k not in ("device",)], numeric_from=9))
    add("<p>Files: " + ", ".join(f"<a href='{_esc(v)}'>{_esc(k)}</a>" for k, v in result.files.items()) + "</p>")
    style = ("body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1280px;margin:24px auto;padding:0 16px;"
             "color:#222;font-size:14px}h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
             "table{border-collapse:collapse;margin:8px 0 16px;font-size:12.5px}th,td{border:1px solid #ddd;padding:3px 7px;"
             "vertical-align:top}th{background:#f3f5f8;text-align:left}td.num{text-align:right;white-space:nowrap}"
             "img{max-width:100%;display:block;margin:8px 0}.muted{color:#666}.cards{display:flex;gap:12px;flex-wrap:wrap}"
             ".card{border:1px solid #ccd;border-radius:6px;padding:10px 14px;min-width:200px;background:#fafbfd}"
             ".big{font-size:22px;font-weight:600}.lbl{text-transform:uppercase;font-size:11px;color:#557}.res{color:#a40;margin-top:4px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>roofprof: {_esc(result.model)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def print_run_summary(result, console: Console | None = None) -> None:
    """Headline numbers of a run, the estimator comparison, where the report is."""
    from roofprof.rollup import compare

    console = console or _console()
    rows = result.validation.comparison() if result.validation is not None else compare(result.predictions, None)
    console.print(comparison_table(rows, title=f"{result.model} on {result.device.get('name')} ({result.dtype})"))
    for label, why in result.unavailable.items():
        console.print(f"[dim]{label}: not available ({why})[/]")
    for w in dict.fromkeys(result.warnings):
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"report: [bold]{result.out / 'index.html'}[/] ({result.elapsed_s:.0f} s: "
                  + ", ".join(f"{k} {v:.0f} s" for k, v in result.step_seconds.items()) + ")")
