"""Every rich table roofprof prints: predictions, specs, profiles, validation, run summary,
measured roofline, hardware counters and doctor.

Formatting only: every number shown was computed elsewhere (rollup, probes, profile,
counters, doctor). Strings that come from input (model and kernel names, device names,
file names, details) are escaped before they reach rich markup, so a ``[`` in a name
prints as itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from roofprof.report._text import pct as _pct
from roofprof.report._text import resid as _resid
from roofprof.report.files import specs_payload
from roofprof.units import si

__all__ = [
    "comparison_table",
    "counters_comparison_tables",
    "counters_table",
    "doctor_table",
    "op_table",
    "print_counters",
    "print_counters_comparison",
    "print_doctor",
    "print_predictions",
    "print_profiles",
    "print_roofline_summary",
    "print_run_summary",
    "print_specs",
    "print_validation",
    "profile_table",
    "roofline_table",
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
            "memory per GPU",
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
        "SMs",
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
    """Per op of one :class:`~roofprof.profiling.ProfileResult`: time, rates, roof, bound, impls."""
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
    from roofprof.rollup import compare

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


# --------------------------------------------------------------------------- roofline


def _rate(value: float, unit: str) -> str:
    return si(value, "B/s" if unit == "bytes/s" else "FLOP/s")


def roofline_table(result) -> Table:
    """The ceilings of a measured roofline (``RooflineResult``): best, median, clock, % of spec."""
    spec_rows = {r["ceiling"]: r for r in result.spec_comparison.get("rows", [])}
    dev = result.device
    units = dev.compute_unit_name  # declared by the backend ("cores", "SMs")
    table = Table(
        title=f"Measured roofline: {escape(dev.name)} ({escape(dev.label)}, "
        f"{dev.compute_units} {units})"
    )
    for col, just in (
        ("ceiling", "left"),
        ("kind", "left"),
        ("level/dtype", "left"),
        ("best", "right"),
        ("median", "right"),
        ("clock MHz", "right"),
        ("spec %", "right"),
        ("", "left"),
    ):
        table.add_column(col, justify=just)
    for c in result.ceilings:
        spec = spec_rows.get(c["name"])
        table.add_row(
            escape(c["name"]),
            c["kind"],
            escape(c.get("level") or c.get("dtype") or ""),
            _rate(c["value"], c["unit"]),
            _rate(c["median_value"], c["unit"]) if c.get("median_value") else "",
            f"{c['clock_mhz']:.0f}" if c.get("clock_mhz") else "",
            f"{spec['percent_of_spec']:.0f}%" if spec else "—",
            "noisy" if c.get("noisy") else "",
        )
    return table


def print_roofline_summary(result, written: Sequence[Path], console: Console | None = None) -> None:
    """The ceilings table, the ridge per dtype, the spec note, warnings and the files written."""
    con = console or _wide_console()
    con.print(roofline_table(result))
    r = result.roofline
    for d in r.dtypes:
        if "dram" in r.levels:
            con.print(
                f"ridge {d}: {r.ridge(d):,.2f} FLOP/byte "
                f"(peak {r.compute_peak(d) / 1e9:,.1f} GFLOP/s, "
                f"DRAM {r.memory_bandwidth('dram') / 1e9:,.1f} GB/s)"
            )
    if not result.spec_comparison.get("available"):
        con.print(f"spec comparison: {escape(str(result.spec_comparison.get('note', 'none')))}")
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {escape(w)}")
    con.print(
        f"measured in {result.elapsed_s:.1f} s; wrote {escape(', '.join(str(p) for p in written))}"
    )


def _wide_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, 160 columns into a pipe."""
    import sys

    stream = sys.stderr if stderr else sys.stdout
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    return Console(file=stream, highlight=False, width=width)


# --------------------------------------------------------------------------- doctor


def doctor_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One row per component of :func:`roofprof.doctor.doctor_report`: ok or missing, and why."""
    table = Table(title="roofprof doctor")
    table.add_column("component")
    table.add_column("status")
    table.add_column("detail")
    for r in rows:
        table.add_row(
            escape(r["component"]),
            "[green]ok[/]" if r["ok"] else "[yellow]missing[/]",
            escape(r["detail"]),
        )
    return table


def print_doctor(rows: Sequence[dict[str, Any]], console: Console | None = None) -> None:
    """Print :func:`doctor_table`."""
    (console or _wide_console()).print(doctor_table(rows))


# --------------------------------------------------------------------------- counters


def _fmt(value: float | None, unit: str = "") -> str:
    return si(value, unit, missing="—")


def _intensity(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}"


def counters_table(
    records: Sequence[Any], placements: Sequence[Any] | None = None, title: str = ""
) -> Table:
    """One row per kernel: time, FLOPs by pipe, bytes and intensity per level (and the roofline)."""
    from roofprof.counters import LEVELS

    table = Table(title=escape(title) if title else None, show_lines=False)
    for col, justify in (
        ("kernel", "left"),
        ("range", "left"),
        ("time", "right"),
        ("FLOPs", "right"),
        ("pipe", "left"),
        ("DRAM", "right"),
        ("L2", "right"),
        ("L1", "right"),
        ("I L1", "right"),
        ("I L2", "right"),
        ("I DRAM", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    if placements:
        table.add_column("limit", justify="left")
        table.add_column("% of roof", justify="right")
    for i, r in enumerate(records):
        row = [
            escape(r.name if len(r.name) <= 48 else r.name[:45] + "..."),
            escape(r.range_name or ""),
            _fmt(r.time_s, "s"),
            _fmt(r.flops, "FLOP"),
            escape(r.dominant_pipe or ""),
            _fmt(r.dram_bytes, "B"),
            _fmt(r.l2_bytes, "B"),
            _fmt(r.l1_bytes, "B"),
            *[_intensity(r.intensity(lvl)) for lvl in LEVELS],
        ]
        if placements:
            p = placements[i]
            frac = p.fraction_of_attainable
            row += [escape(p.limiting_level or ""), "—" if frac is None else f"{100 * frac:.1f}"]
        table.add_row(*row)
    return table


def print_counters(
    records: Sequence[Any], placements: Sequence[Any] | None = None, title: str = ""
) -> None:
    """:func:`counters_table`, then the notes on lower bounds and missing FLOP counters."""
    console = Console(width=160)
    console.print(counters_table(records, placements, title))
    lsu = "l1tex__t_sectors_pipe_lsu_mem_global"
    notes = sorted(
        {
            f"L1 bytes of {r.name[:40]}...: global loads+stores only "
            "(sectors x 32 B), a lower bound"
            for r in records
            if (r.byte_source("l1") or ("",))[0].startswith(lsu)
        }
    )
    if any(r.flops is None for r in records):
        notes.append(
            "FLOPs —: no FLOP counters in this file (collect with --metrics-set hierarchical)"
        )
    for note in notes:
        console.print(f"[dim]{escape(note)}[/dim]")


def counters_comparison_tables(payloads: dict[str, dict[str, Any]]) -> list[Table]:
    """Per phase of ``profile --counters``: each op's counters against the workload model."""
    tables = []
    for phase, payload in payloads.items():
        table = Table(title=f"{escape(phase)}: counters vs the workload model (flagged beyond 10%)")
        for col in (
            "op@impl",
            "kernels",
            "time",
            "FLOPs counter/analytic",
            "DRAM bytes counter/minimum",
            "expected pipe",
            "flags",
        ):
            table.add_column(col)
        for c in payload.get("ops", []):
            pipe = c["expected_pipe_fraction"]
            table.add_row(
                escape(c["op"]),
                str(c["kernels"]),
                _fmt(c["time_s"], "s"),
                "—" if c["flop_ratio"] is None else f"{c['flop_ratio']:.2f}",
                "—" if c["excess_traffic"] is None else f"{c['excess_traffic']:.2f}",
                "—" if pipe is None else f"{100 * pipe:.0f}%",
                escape(", ".join(c["flags"]) or "ok"),
            )
        tables.append(table)
    return tables


def print_counters_comparison(
    payloads: dict[str, dict[str, Any]], out_dir: Path | None = None
) -> None:
    """Print :func:`counters_comparison_tables`; after each, where its files are (stderr)."""
    for phase, table in zip(payloads, counters_comparison_tables(payloads), strict=True):
        Console().print(table)
        if out_dir is not None:
            Console(stderr=True, highlight=False).print(
                "counters, hierarchical roofline and plot written to "
                f"{escape(str(out_dir / phase))}"
            )
