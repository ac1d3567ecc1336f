"""The rich tables of predictions and profiles: predictions, specs, profiles, validation and
the run summary (the measured roofline, hardware counters and doctor are in
:mod:`roofprof.report.hardware_tables`).

Formatting only: every number shown was computed elsewhere (rollup, profile, validate).
Strings that come from input (model and kernel names, device names, file names, details) are
escaped before they reach rich markup, so a ``[`` in a name prints as itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from roofprof.report._text import pct as _pct
from roofprof.report._text import resid as _resid
from roofprof.report.files import specs_payload
from roofprof.units import si

__all__ = [
    "comparison_table",
    "print_gpu_comparison",
    "op_table",
    "print_predictions",
    "print_profiles",
    "print_run_summary",
    "print_specs",
    "print_validation",
    "profile_table",
]


def _console() -> Console:
    import shutil

    # Pipes default to 80 columns, which wraps every cell; tables here need ~110.
    return Console(width=max(shutil.get_terminal_size((120, 40)).columns, 110))


def _parallel_rows(table: Table, d: dict) -> None:
    """Communication share, memory fit and pipeline rows of a multi-GPU prediction."""
    if "parallel" not in d:
        return
    pf, dc = d["prefill"]["breakdown"], d["decode"]["breakdown"]
    par = d["parallel"]
    table.add_row(
        f"communication (TP {par['tp']}, PP {par['pp']})",
        f"{100 * pf.get('communication_share', 0.0):.1f}%",
        f"{100 * dc.get('communication_share', 0.0):.1f}%",
    )
    if "memory" in d:
        m = d["memory"]
        table.add_row(
            "fits (GB/GPU)",
            "",
            f"{si(m['per_gpu_bytes'], 'B')} of "
            f"{si(m['capacity_bytes'], 'B')} ({'fits' if m['fits'] else 'does not fit'}; "
            f"max batch {m['max_batch']})",
        )
    if "pipeline" in d:
        pp = d["pipeline"]
        table.add_row(
            "pipeline steady state",
            f"{pp['prefill']['steady_state_tokens_per_second']:,.0f} tok/s",
            f"{pp['decode']['steady_state_tokens_per_second']:,.0f} tok/s "
            f"(bubble {100 * pp['decode']['bubble_fraction_batch1']:.0f}% at 1 batch)",
        )


def print_predictions(predictions: Sequence, console: Console | None = None) -> None:
    """A summary (one prediction) or a sweep table (several), then the per-op breakdown."""
    console = console or _console()
    first = predictions[0]
    d0 = first.to_dict()
    ridge = d0["ridge_flops_per_byte"]
    ridge_text = (
        f"ridge {ridge:.0f} FLOP/byte"
        if ridge is not None and math.isfinite(ridge)
        else f"ridge n/a (no {d0['dtype']} compute ceiling)"
    )
    console.print(
        f"[bold]{escape(first.model.id)}[/] on [bold]{escape(first.machine)}[/], {d0['dtype']}, "
        f"estimator [bold]{escape(first.estimator)}[/]; {ridge_text}"
    )
    console.print(f"[dim]counting: {escape(d0['counting'])}[/]")
    if len(predictions) == 1:
        pf, dc = d0["prefill"], d0["decode"]
        table = Table(
            title=f"batch {d0['batch']}, prompt {d0['prompt_tokens']} tokens, "
            f"decode context {d0['context_tokens']} tokens"
        )
        table.add_column("")
        table.add_column("prefill (TTFT, no network)", justify="right")
        table.add_column("decode (one step)", justify="right")
        table.add_row("time", si(pf["seconds"], "s"), si(dc["seconds_per_token"], "s"))
        table.add_row(
            "tokens/s",
            f"{d0['batch'] * d0['prompt_tokens'] / pf['seconds']:,.0f} (prompt)",
            f"{dc['tokens_per_second']:,.0f} (all sequences)",
        )
        table.add_row("FLOPs", si(pf["flops"], "FLOP"), si(dc["flops"], "FLOP"))
        table.add_row(
            "bytes",
            si(pf["bytes"], "B"),
            f"{si(dc['bytes'], 'B')} (weights {si(dc['weight_bytes'], 'B')}, "
            f"KV {si(dc['kv_cache_bytes'], 'B')})",
        )
        table.add_row(
            "intensity", f"{pf['intensity']:,.1f} FLOP/B", f"{dc['intensity']:,.1f} FLOP/B"
        )
        table.add_row(
            "attention share of time",
            f"{100 * pf['attention_share']:.1f}%",
            f"{100 * dc['attention_share']:.1f}%",
        )
        table.add_row("bound", pf["bound"], dc["bound"])
        _parallel_rows(table, d0)
        console.print(table)
        console.print(op_table(first))
    else:
        table = Table(title="Sweep: prefill (TTFT, no network) and decode")
        for col in (
            "batch",
            "prompt",
            "context",
            "TTFT",
            "prefill bound",
            "attn share",
            "decode step",
            "tokens/s",
            "decode bytes",
            "KV cache",
            "decode bound",
        ):
            table.add_column(col, justify="right")
        for p in predictions:
            d = p.to_dict()
            pf, dc = d["prefill"], d["decode"]
            table.add_row(
                str(d["batch"]),
                str(d["prompt_tokens"]),
                str(d["context_tokens"]),
                si(pf["seconds"], "s"),
                pf["bound"],
                f"{100 * pf['attention_share']:.0f}%",
                si(dc["seconds_per_token"], "s"),
                f"{dc['tokens_per_second']:,.0f}",
                si(dc["bytes"], "B"),
                si(dc["kv_cache_bytes"], "B"),
                dc["bound"],
            )
        console.print(table)
    for w in d0.get("warnings", []):
        console.print(f"[yellow]warning:[/] {escape(w)}")


def op_table(prediction, title: str | None = None) -> Table:
    """Per-op breakdown of both phases: shape, FLOPs, bytes, intensity, time, bound."""
    table = Table(title=title or "Per-op breakdown (layer ops: all layers together)")
    for col in (
        "phase",
        "op",
        "M×N×K (batch)",
        "FLOPs",
        "bytes",
        "FLOP/B",
        "time",
        "share",
        "bound",
    ):
        table.add_column(col, justify="left" if col in ("phase", "op", "bound") else "right")
    for phase in (prediction.prefill, prediction.decode):
        total = phase.seconds
        for o in phase.ops:
            op = o.op
            shape = f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else "")
            table.add_row(
                op.phase,
                escape(op.name) + (f" ×{op.count}" if op.count > 1 else ""),
                shape,
                si(op.total_flops, "FLOP"),
                si(op.total_bytes, "B"),
                f"{op.intensity:,.1f}" if op.bytes else "∞",
                si(o.seconds, "s"),
                f"{100 * o.seconds / total:.1f}%",
                o.estimate.bound,
            )
    return table


def print_specs(console: Console | None = None) -> None:
    """Rich tables of the GPU database and the shipped models."""
    console = console or _console()
    payload = specs_payload()
    gpus = Table(title="GPUs (datasheet, dense; see data/gpus.json for sources)")
    for col in (
        "id",
        "name",
        "SMs (AMD: CUs)",
        "memory",
        "bandwidth",
        "fp32",
        "bf16",
        "fp8",
        "ridge bf16",
        "sources",
    ):
        gpus.add_column(col, justify="left" if col in ("id", "name", "sources") else "right")
    for g in payload["gpus"]:
        peaks = g["peak_flops_per_s"]
        gpus.add_row(
            escape(g["id"]),
            escape(g["name"]),
            str(g["sm_count"]),
            si(g["memory_bytes"], "B"),
            si(g["memory_bytes_per_s"], "B/s"),
            si(peaks.get("fp32", float("nan")), "FLOP/s"),
            si(peaks.get("bf16", float("nan")), "FLOP/s"),
            si(peaks.get("fp8", float("nan")), "FLOP/s"),
            f"{g['ridge_bf16_flops_per_byte']:.0f}" if g["ridge_bf16_flops_per_byte"] else "n/a",
            escape(",".join(g["sources"])),
        )
    console.print(gpus)
    models = Table(title="Models (data/models/*.json; any HF Llama config.json path works too)")
    for col in (
        "id",
        "params",
        "active",
        "layers",
        "hidden",
        "heads/kv",
        "head_dim",
        "KV bytes/token (bf16)",
    ):
        models.add_column(col, justify="left" if col == "id" else "right")
    for m in payload["models"]:
        models.add_row(
            escape(m["id"]),
            f"{m['params'] / 1e9:.2f} B",
            f"{m['active_params'] / 1e9:.2f} B",
            str(m["layers"]),
            str(m["hidden_size"]),
            f"{m['heads']}/{m['kv_heads']}",
            str(m["head_dim"]),
            f"{m['kv_bytes_per_token_bf16']:,}",
        )
    console.print(models)


def profile_table(result, title: str | None = None) -> Table:
    """Per op of one :class:`~roofprof.profiling.records.ProfileResult`: time, rates, roof, bound,
    impls."""
    w = result.workload
    table = Table(
        title=title
        or escape(
            f"{w.model.id} {w.phase}: batch {w.batch}, "
            + (
                f"prompt {w.prompt_tokens}"
                if w.phase == "prefill"
                else f"context {w.context_tokens}"
            )
            + f", {w.dtype} (layer ops ×{w.model.num_layers})"
        )
    )
    for col in (
        "op",
        "M×N×K (batch)",
        "impl",
        "time/call",
        "all calls",
        "FLOP/s",
        "B/s",
        "FLOP/B",
        "roof",
        "% roof",
        "bound",
        "CV",
        "other impls",
    ):
        table.add_column(
            col,
            justify="left" if col in ("op", "impl", "bound", "other impls") else "right",
            no_wrap=col not in ("other impls",),
        )
    for o in result.ops:
        op, p = o.op, o.placement()
        shape = f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else "")
        impls = " ".join(
            f"{escape(m.impl)} {si(m.seconds, 's')}"
            if m.ok
            else f"{escape(m.impl)} [red]{escape(m.status)}[/]"
            for m in o.measurements
            if m is not o.chosen and m.status != "unsupported"
        )
        if o.chosen is None:
            table.add_row(
                escape(op.name) + (f" ×{op.count}" if op.count > 1 else ""),
                shape,
                "[red]none[/]",
                "",
                "",
                "",
                "",
                f"{op.intensity:,.1f}" if op.bytes else "∞",
                "",
                "",
                "",
                "",
                impls,
            )
            continue
        table.add_row(
            escape(op.name) + (f" ×{op.count}" if op.count > 1 else ""),
            shape,
            escape(o.chosen.impl),
            si(o.seconds, "s"),
            si(o.seconds * op.count, "s"),
            si(p["flops_per_s"] or 0.0, "FLOP/s"),
            si(p["bytes_per_s"] or 0.0, "B/s"),
            f"{op.intensity:,.1f}" if op.bytes else "∞",
            si(p["attainable_flops_per_s"], "FLOP/s") if p["attainable_flops_per_s"] else "n/a",
            _pct(p["percent_of_roof"] if op.flops else p["percent_of_roof_time"]),
            p["bound"] or "n/a",
            f"{o.chosen.timing.cv:.0%}" + (" [yellow]noisy[/]" if o.chosen.timing.noisy else ""),
            impls,
        )
    return table


def print_profiles(results: Sequence, console: Console | None = None) -> None:
    """Tables of each profile, then (for several) a sweep summary with the decode bound."""
    import shutil

    console = console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 160))
    first = results[0]
    console.print(
        f"[bold]{escape(first.workload.model.id)}[/] on "
        f"[bold]{escape(str(first.device.get('name')))}[/] "
        f"({first.device.get('label')}), threads {first.threads}; roofline: "
        f"{first.roofline_source or 'none'}; "
        f"launch overhead {si(first.launch_s, 's')}/kernel"
    )
    console.print(f"[dim]counting: {escape(first.workload.counting.describe())}[/]")
    for r in results:
        console.print(profile_table(r))
        console.print(
            f"measured sum: [bold]{si(r.seconds, 's')}[/]"
            + (f" ({r.workload.tokens / r.seconds:,.1f} tokens/s)" if r.seconds else "")
        )
        for wmsg in r.warnings:
            console.print(f"[yellow]warning:[/] {escape(wmsg)}")
    if len(results) > 1:
        table = Table(title="Sweep: measured sums and the bound that takes most of the time")
        for col in (
            "phase",
            "batch",
            "prompt",
            "context",
            "measured",
            "tokens/s",
            "memory-bound share",
            "bound",
        ):
            table.add_column(col, justify="right")
        for r in results:
            w = r.workload
            shares = _bound_shares(r)
            table.add_row(
                w.phase,
                str(w.batch),
                str(w.prompt_tokens),
                str(w.context_tokens),
                si(r.seconds, "s"),
                f"{w.tokens / r.seconds:,.1f}" if r.seconds else "n/a",
                _pct(100 * shares.get("memory", 0.0)),
                max(shares, key=shares.get) if shares else "n/a",
            )
        console.print(table)


def _bound_shares(result) -> dict[str, float]:
    """Share of the measured time in memory- and compute-bound ops (bound from the placement)."""
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
    for col in (
        "estimator",
        "TTFT",
        "residual",
        "decode step",
        "residual",
        "tokens/s",
        "decode bound",
    ):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    for r in rows:
        real = r["estimator"] == "real"
        table.add_row(
            f"[bold]{escape(r['estimator'])}[/]" if real else escape(r["estimator"]),
            si(r["ttft_s"], "s"),
            "" if real else _resid(r["ttft_residual"]),
            si(r["decode_step_s"], "s"),
            "" if real else _resid(r["decode_residual"]),
            f"{r['tokens_per_second']:,.2f}",
            r.get("decode_bound", ""),
        )
    return table


def print_validation(result, console: Console | None = None) -> None:
    """The real run (what ran, timings, scaling) and each estimator's residual."""
    console = console or _console()
    r = result.real
    what = (
        f"{result.model.id} — {result.backend}, attention "
        f"{'SDPA' if result.attention == 'fused' else 'eager'}, {result.dtype}, "
        f"{result.device.get('label')}, threads {result.threads}, clock {result.clock}"
    )
    console.print(f"[bold]real run[/]: {escape(what)}")
    if result.real_model is not None:
        console.print(f"real model: {escape(result.real_model.describe())}")
        for d in result.real_model.differs:
            console.print(f"[dim]  differs from the counted ops: {escape(d)}[/]")
    console.print(
        f"prefill {r.batch}×{r.prompt_tokens} tokens: [bold]{si(r.prefill_s, 's')}[/] "
        f"(samples {', '.join(si(s, 's') for s in result.prefill_samples_s)}); decode step at "
        f"{r.context_tokens} cached tokens: [bold]{si(r.decode_s, 's')}[/] "
        f"({r.tokens_per_second:,.2f} tokens/s; "
        f"IQR {si(r.decode_spread_s, 's')})"
    )
    console.print(f"[dim]memory: {escape(result.memory.describe())}[/]")
    if result.predictions:
        console.print(comparison_table(result.comparison()))
    for w in result.warnings:
        console.print(f"[yellow]note:[/] {escape(w)}")


def print_run_summary(result, console: Console | None = None) -> None:
    """Headline numbers of a run, the estimator comparison, where the report is."""
    from roofprof.prediction.rollup import compare

    console = console or _console()
    rows = (
        result.validation.comparison()
        if result.validation is not None
        else compare(result.predictions, None)
    )
    console.print(
        comparison_table(
            rows, title=escape(f"{result.model} on {result.device.get('name')} ({result.dtype})")
        )
    )
    for label, why in result.unavailable.items():
        console.print(f"[dim]{escape(label)}: not available ({escape(str(why))})[/]")
    for w in dict.fromkeys(result.warnings):
        console.print(f"[yellow]warning:[/] {escape(w)}")
    console.print(
        f"report: [bold]{escape(str(result.out / 'index.html'))}[/] ({result.elapsed_s:.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in result.step_seconds.items())
        + ")"
    )


def print_gpu_comparison(comparison, console: Console | None = None) -> None:
    """GPUs side by side (:class:`~roofprof.prediction.comparison.GpuComparison`): TTFT,
    decode tokens/s, the bound of each phase, memory fit and ridge point, with the ratios to
    the first GPU and the datasheet peak and bandwidth ratios that explain them."""
    console = console or _console()
    rows = comparison.rows
    first = comparison.gpus[0]
    p0 = rows[0].prediction
    w = p0.decode.workload
    console.print(
        f"[bold]{escape(p0.model.id)}[/bold], {w.dtype}, estimator {escape(p0.estimator)}; "
        f"prompt {w.prompt_tokens} tokens; ratios to {escape(first.id)} "
        "(above 1: faster)"
    )
    several = (
        len(
            {
                (r.prediction.decode.workload.batch, r.prediction.decode.workload.context_tokens)
                for r in rows
            }
        )
        > 1
    )
    from rich import box

    table = Table(
        title="GPUs side by side: TTFT (prefill), decode tok/s, ratios (×) to the first, "
        "ridge (FLOP/byte), memory fit",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    columns = (
        "GPU",
        *(("batch", "context") if several else ()),
        "TTFT",
        "bound",
        "TTFT×",
        "tok/s",
        "bound",
        "tok/s×",
        # the datasheet ratios are the same at every point: shown once per GPU (no sweep)
        *(() if several else ("peak×", "BW×")),
        "ridge",
        "fits (GB/GPU)",
    )
    width = max(len(g.id) for g in comparison.gpus)
    for col in columns:
        left = col in ("GPU", "fits (GB/GPU)", "bound")
        table.add_column(
            col,
            justify="left" if left else "right",
            no_wrap=col != "fits (GB/GPU)",
            min_width=width if col == "GPU" else None,
        )
    for r in rows:
        p, m = r.prediction, r.memory
        dw = p.decode.workload
        used = f"{m.per_gpu_bytes / 1e9:,.1f}/{m.capacity_bytes / 1e9:,.1f}"
        table.add_row(
            escape(r.gpu.id),
            *((str(dw.batch), str(dw.context_tokens)) if several else ()),
            si(r.ttft_seconds, "s"),
            p.prefill.bound,
            f"{r.ttft_speedup:.2f}",
            f"{r.decode_tokens_per_second:,.1f}",
            p.decode.bound,
            f"{r.decode_speedup:.2f}",
            *(
                ()
                if several
                else (
                    "n/a" if r.peak_flops_ratio is None else f"{r.peak_flops_ratio:.2f}",
                    f"{r.bandwidth_ratio:.2f}",
                )
            ),
            f"{r.ridge_flops_per_byte:.0f}",
            f"yes {used}" if m.fits else f"[red]no {used}[/red]",
        )
    console.print(table)
    amd = sorted({r.gpu.id for r in rows if not r.gpu.measurable})
    if amd:
        console.print(
            f"{', '.join(amd)}: datasheet figures only (no device backend of roofprof measures "
            "AMD GPUs)"
        )
