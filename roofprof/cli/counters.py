"""``roofprof counters``: hardware counters through Nsight Compute (import a CSV/report, or collect).

Thin wiring over :mod:`roofprof.counters`; tables here, numbers there.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from roofprof.cli import app
from roofprof.errors import ConfigError

FORMATS = ("table", "json")

counters_app = typer.Typer(
    name="counters",
    help="Hardware counters through Nsight Compute: FLOPs per precision, bytes at L1/L2/DRAM, "
    "the hierarchical roofline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(counters_app, name="counters")


def _show_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    seen = set()
    for w in caught:
        text = str(w.message)
        if text not in seen:
            seen.add(text)
            typer.echo(f"roofprof: warning: {text}", err=True)


def _fmt(value: float | None, unit: str = "") -> str:
    from roofprof.report import si

    return "—" if value is None else si(value, unit)


def _intensity(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}"


def print_counters(records: Sequence[Any], placements: Sequence[Any] | None = None, title: str = "") -> None:
    """One row per kernel: time, FLOPs by pipe, bytes and intensity per level (and the roofline)."""
    from rich.console import Console
    from rich.table import Table

    from roofprof.counters import LEVELS

    table = Table(title=title or None, show_lines=False)
    for col, justify in (("kernel", "left"), ("range", "left"), ("time", "right"), ("FLOPs", "right"),
                         ("pipe", "left"), ("DRAM", "right"), ("L2", "right"), ("L1", "right"),
                         ("I L1", "right"), ("I L2", "right"), ("I DRAM", "right")):  # fmt: skip
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    if placements:
        table.add_column("limit", justify="left")
        table.add_column("% of roof", justify="right")
    for i, r in enumerate(records):
        row = [
            r.name if len(r.name) <= 48 else r.name[:45] + "...",
            r.range_name or "",
            _fmt(r.time_s, "s"),
            _fmt(r.flops, "FLOP"),
            r.dominant_pipe or "",
            _fmt(r.dram_bytes, "B"),
            _fmt(r.l2_bytes, "B"),
            _fmt(r.l1_bytes, "B"),
            *[_intensity(r.intensity(lvl)) for lvl in LEVELS],
        ]
        if placements:
            p = placements[i]
            frac = p.fraction_of_attainable
            row += [p.limiting_level or "", "—" if frac is None else f"{100 * frac:.1f}"]
        table.add_row(*row)
    console = Console(width=160)
    console.print(table)
    notes = sorted({f"L1 bytes of {r.name[:40]}...: global loads+stores only (sectors x 32 B), a lower bound"
                    for r in records
                    if (r.byte_source("l1") or ("",))[0].startswith("l1tex__t_sectors_pipe_lsu_mem_global")})  # fmt: skip
    if any(r.flops is None for r in records):
        notes.append("FLOPs —: no FLOP counters in this file (collect with --metrics-set hierarchical)")
    for note in notes:
        console.print(f"[dim]{note}[/dim]")


@counters_app.command("import")
def import_cmd(
    file: Path = typer.Argument(..., help="Nsight Compute CSV (details or --page raw) or .ncu-rep report."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json."),
    roofline: Path | None = typer.Option(None, "--roofline", help="roofline.json to place each kernel on."),
    plot: Path | None = typer.Option(None, "--plot", help="Write the hierarchical roofline chart (PNG)."),
) -> None:
    """Turn an existing ncu CSV or report into per-kernel records: time, FLOPs, bytes, intensities."""
    from roofprof import counters

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", counters.CounterWarning)
        records = counters.load_counters(file)
    _show_warnings(caught)
    roof = None
    if roofline is not None:
        from roofprof.roofline import load_roofline

        roof = load_roofline(roofline)
    placements = counters.place_hierarchical(records, roof)
    if fmt == "json":
        payload = counters.records_to_json(records, placements, source=str(file))
        typer.echo(json.dumps(payload, indent=2))
    else:
        print_counters(records, placements if roof is not None else None, title=f"Nsight Compute counters: {file.name}")
    if plot is not None:
        from roofprof.plots.hierarchical import plot_hierarchical

        plot_hierarchical(placements, plot, roofline=roof, title=f"Hierarchical roofline: {file.name}")
        typer.echo(f"hierarchical roofline written to {plot}", err=True)


@counters_app.command("collect")
def collect_cmd(
    command: list[str] | None = typer.Argument(None, help="The command to profile, after `--`."),
    out: Path = typer.Option(Path("roofprof-counters"), "--out", "-o", help="Folder for ncu.csv and counters.json."),
    clock_control: str = typer.Option("none", "--clock-control", help="none (clocks as the GPU runs them) | base (ncu locks base clocks)."),
    metrics_set: str = typer.Option("hierarchical", "--metrics-set", help="hierarchical | memory | flops | time."),
    nvtx_include: list[str] | None = typer.Option(None, "--nvtx-include", help="ncu NVTX filter (repeatable); default: ranges named roofprof.*"),
    all_kernels: bool = typer.Option(False, "--all-kernels", help="Profile every kernel, not only those in roofprof.* NVTX ranges."),
    launch_count: int | None = typer.Option(None, "--launch-count", help="Stop after profiling this many kernels."),
    ncu: str | None = typer.Option(None, "--ncu", help="Path to ncu (default: $ROOFPROF_NCU, PATH, /usr/local/cuda/bin)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before ncu is stopped."),
) -> None:
    """Run a command under Nsight Compute and record each profiled kernel's counters."""
    from roofprof import counters
    from roofprof.results import check_writable_dir, provenance, write_json_atomic

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    if not command:
        raise ConfigError("no command to profile: give it after `--`, e.g. `roofprof counters collect -- python run.py`")
    if all_kernels and nvtx_include:
        raise ConfigError("--all-kernels and --nvtx-include exclude each other")
    include = None if all_kernels else (tuple(nvtx_include) if nvtx_include else counters.DEFAULT_NVTX_INCLUDE)
    folder = check_writable_dir(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", counters.CounterWarning)
        coll = counters.collect(
            list(command), folder / "ncu.csv", metrics_set=metrics_set, clock_control=clock_control,
            nvtx_include=include, launch_count=launch_count, ncu=ncu, timeout_s=timeout,
        )  # fmt: skip
    _show_warnings(caught)
    placements = counters.place_hierarchical(coll.records)
    payload = counters.records_to_json(
        coll.records,
        placements,
        provenance=provenance(
            device_cc=coll.cc, ncu=coll.ncu_command[0], ncu_version=coll.ncu_version,
            clock_control=clock_control, cache_control="all",
        ),  # fmt: skip
        ncu_command=list(coll.ncu_command),
        metrics_set=metrics_set,
        metrics_requested=list(coll.plan.metrics),
        metrics_dropped=list(coll.plan.dropped),
        metric_names_verified=coll.verified,
        command_exit_code=coll.returncode,
        warnings=[str(w.message) for w in caught],
    )
    write_json_atomic(folder / "counters.json", payload)
    if fmt == "json":
        typer.echo(json.dumps(payload, indent=2))
    else:
        print_counters(coll.records, title=f"Nsight Compute counters ({len(coll.records)} kernels)")
    typer.echo(f"counters written to {folder / 'counters.json'} (raw CSV: {coll.csv_path})", err=True)


@counters_app.command("ops-pass", hidden=True)
def ops_pass_cmd(
    model: str = typer.Option(..., "--model"),
    phase: str = typer.Option(..., "--phase"),
    batch: int = typer.Option(1, "--batch"),
    prompt: int = typer.Option(128, "--prompt"),
    context: int | None = typer.Option(None, "--context"),
    dtype: str = typer.Option("bf16", "--dtype"),
    device: str = typer.Option("auto", "--device"),
    attention: str = typer.Option("fused", "--attention"),
    impl: str | None = typer.Option(None, "--impl"),
    manifest: Path = typer.Option(..., "--manifest"),
) -> None:
    """Child of `profile --counters` (runs under ncu): each op checked, then run once in its NVTX range."""
    from roofprof.counters.ops_pass import run_ops_once
    from roofprof.devices import select
    from roofprof.results import write_json_atomic
    from roofprof.specs import load_model
    from roofprof.workload import Counting, llama_ops

    workload = llama_ops(load_model(model), phase, batch=batch, prompt_tokens=prompt, context_tokens=context,
                         dtype=dtype, convention=Counting(attention=attention))
    impls = [s.strip() for s in impl.split(",")] if impl else None
    write_json_atomic(manifest, run_ops_once(workload, select(device), impls=impls))  # type: ignore[arg-type]


def profile_with_counters(*, model: str, phases: Sequence[str], batch: int, prompt: int, context: int | None,
                          dtype: str, device: str, attention: str, impls: Sequence[str] | None,
                          out: Path | None, clock_control: str, roofline: Any = None, fmt: str = "table") -> None:
    """`roofprof profile --counters`: every op of the pass once under ncu, hierarchical roofline, comparison."""
    from roofprof.counters.ops_pass import child_command, profile_counters

    out_dir = Path(out) if out is not None and Path(out).suffix == "" else Path("roofprof-counters")
    payloads = {}
    for phase in phases:
        folder = out_dir / phase
        manifest = folder / "manifest.json"
        child = child_command(model=model, phase=phase, batch=batch, prompt=prompt, context=context, dtype=dtype,
                              device=device, attention=attention, impls=impls, manifest=manifest)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            payloads[phase] = profile_counters(child, manifest, folder, roofline=roofline, clock_control=clock_control)
        _show_warnings(caught)
    if fmt == "json":
        typer.echo(json.dumps(payloads, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    for phase, payload in payloads.items():
        table = Table(title=f"{phase}: counters vs the workload model (flagged beyond 10%)")
        for col in ("op@impl", "kernels", "time", "FLOPs counter/analytic", "DRAM bytes counter/minimum",
                    "expected pipe", "flags"):
            table.add_column(col)
        for c in payload.get("ops", []):
            table.add_row(c["op"], str(c["kernels"]), _fmt(c["time_s"], "s"),
                          "—" if c["flop_ratio"] is None else f"{c['flop_ratio']:.2f}",
                          "—" if c["excess_traffic"] is None else f"{c['excess_traffic']:.2f}",
                          "—" if c["expected_pipe_fraction"] is None else f"{100 * c['expected_pipe_fraction']:.0f}%",
                          ", ".join(c["flags"]) or "ok")
        Console().print(table)
        typer.echo(f"counters, hierarchical roofline and plot written to {out_dir / phase}", err=True)
