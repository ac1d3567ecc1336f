"""``roofprof counters``: hardware counters through Nsight Compute (import a report, or collect).

Thin wiring over :mod:`roofprof.counters`; numbers there, tables in :mod:`roofprof.report`.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TextIO

import typer

from roofprof.cli import app
from roofprof.cli._console import progress_bar, show_warnings
from roofprof.cli._options import TableJson, split_list
from roofprof.cli._usage import CommandGroup, show_help
from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = [
    "BIG_CSV_BYTES",
    "collect_cmd",
    "counters_app",
    "import_cmd",
    "ops_pass_cmd",
    "write_json_streamed",
]

#: Files above this size get a progress bar (a terminal) or a note (a pipe) on stderr.
BIG_CSV_BYTES = 10 * 2**20

counters_app = typer.Typer(
    name="counters",
    help="Hardware counters through Nsight Compute: FLOPs per precision, bytes at L1/L2/DRAM, "
    "the hierarchical roofline.",
    cls=CommandGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(counters_app, name="counters")


@counters_app.callback(invoke_without_command=True)
def _counters(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        show_help(ctx)


@counters_app.command("import")
def import_cmd(
    file: Path = typer.Argument(
        ..., help="Nsight Compute CSV (details or --page raw) or .ncu-rep report."
    ),
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
    roofline: Path | None = typer.Option(
        None, "--roofline", help="roofline.json to place each kernel on."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write the hierarchical roofline chart (PNG)."
    ),
) -> None:
    """Turn an existing ncu CSV or report into per-kernel records: time, FLOPs, bytes,
    intensities."""
    from roofprof import counters
    from roofprof.cli._options import PLOT_SUFFIXES, check_output
    from roofprof.report import print_counters

    check_output(plot, "--plot", suffixes=PLOT_SUFFIXES)
    size = _size(file)
    big = size > BIG_CSV_BYTES  # streamed either way; large exports say so on stderr
    if big and not sys.stderr.isatty():
        typer.echo(f"roofprof: reading {size / 1e6:,.0f} MB of Nsight Compute output ...", err=True)
    with (
        warnings.catch_warnings(record=True) as caught,
        progress_bar(big and sys.stderr.isatty()) as (bar, _),
    ):
        warnings.simplefilter("always", counters.CounterWarning)
        records = counters.load_counters(
            file,
            progress=(lambda done, total: bar("MB read", done // 10**6, total // 10**6))
            if bar
            else None,
        )
    show_warnings(caught)
    roof = None
    if roofline is not None:
        from roofprof.roofline import load_roofline

        roof = load_roofline(roofline)
    placements = counters.place_hierarchical(records, roof)
    if fmt == "json":
        write_json_streamed(
            {"source": str(file), "kernels": records, "hierarchical": placements}, sys.stdout
        )
    else:
        print_counters(
            records,
            placements if roof is not None else None,
            title=f"Nsight Compute counters: {file.name}",
        )
    if plot is not None:
        from roofprof.plots.hierarchical import plot_hierarchical

        plot_hierarchical(
            placements, plot, roofline=roof, title=f"Hierarchical roofline: {file.name}"
        )
        typer.echo(f"hierarchical roofline written to {plot}", err=True)


@counters_app.command("collect")
def collect_cmd(
    command: list[str] | None = typer.Argument(None, help="The command to profile, after `--`."),
    out: Path = typer.Option(
        Path("roofprof-counters"), "--out", "-o", help="Folder for ncu.csv and counters.json."
    ),
    clock_control: str = typer.Option(
        "none",
        "--clock-control",
        help="none (clocks as the GPU runs them) | base (ncu locks base clocks).",
    ),
    metrics_set: str = typer.Option(
        "hierarchical", "--metrics-set", help="hierarchical | memory | flops | time."
    ),
    nvtx_include: list[str] | None = typer.Option(
        None,
        "--nvtx-include",
        help="ncu NVTX filter (repeatable); default: ranges named roofprof.*",
    ),
    all_kernels: bool = typer.Option(
        False,
        "--all-kernels",
        help="Profile every kernel, not only those in roofprof.* NVTX ranges.",
    ),
    launch_count: int | None = typer.Option(
        None, "--launch-count", help="Stop after profiling this many kernels."
    ),
    ncu: str | None = typer.Option(
        None, "--ncu", help="Path to ncu (default: $ROOFPROF_NCU, PATH, /usr/local/cuda/bin)."
    ),
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before ncu is stopped."),
) -> None:
    """Run a command under Nsight Compute and record each profiled kernel's counters."""
    from roofprof import counters
    from roofprof.report import print_counters
    from roofprof.results import check_writable_dir, provenance, write_json_atomic

    if not command:
        raise ConfigError(
            "no command to profile: give it after `--`, "
            "e.g. `roofprof counters collect -- python run.py`"
        )
    if all_kernels and nvtx_include:
        raise ConfigError("--all-kernels and --nvtx-include exclude each other")
    include = (
        None
        if all_kernels
        else (tuple(nvtx_include) if nvtx_include else counters.DEFAULT_NVTX_INCLUDE)
    )
    from roofprof.cli._options import check_int, check_output, check_seconds

    check_int(launch_count, "--launch-count", 1, 10**9)
    check_seconds(timeout, "--timeout")
    check_output(out, "--out", folder=True, inside=("ncu.csv", "counters.json"))
    folder = check_writable_dir(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", counters.CounterWarning)
        coll = counters.collect(
            list(command), folder / "ncu.csv", metrics_set=metrics_set, clock_control=clock_control,
            nvtx_include=include, launch_count=launch_count, ncu=ncu, timeout_s=timeout,
        )  # fmt: skip
    show_warnings(caught)
    placements = counters.place_hierarchical(coll.records)
    payload = counters.records_to_json(
        coll.records,
        placements,
        provenance=provenance(
            device_cc=coll.cc,
            ncu=coll.ncu_command[0],
            ncu_version=coll.ncu_version,
            clock_control=clock_control,
            cache_control="all",
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
        typer.echo(dumps_strict(payload))
    else:
        print_counters(coll.records, title=f"Nsight Compute counters ({len(coll.records)} kernels)")
    typer.echo(
        f"counters written to {folder / 'counters.json'} (raw CSV: {coll.csv_path})", err=True
    )


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
    """Child of `profile --counters` (runs under ncu): each op checked, then run once in its NVTX
    range."""
    from roofprof import models
    from roofprof.counters.ops_pass import run_ops_once
    from roofprof.devices import select
    from roofprof.results import write_json_atomic
    from roofprof.workload import Counting, Scenario

    workload = models.ops(
        Scenario.of(
            model,
            phase,
            batch=batch,
            prompt_tokens=prompt,
            context_tokens=context,
            dtype=dtype,
            convention=Counting(attention=attention),
        )
    )
    impls = split_list(impl)
    records = run_ops_once(workload, select(device), impls=impls)  # type: ignore[arg-type]
    write_json_atomic(manifest, records)


def write_json_streamed(payload: dict, out: TextIO) -> None:
    """Write ``dumps_strict(payload) + "\\n"`` to ``out``, one list element at a time.

    The same text as the one-shot form, without building it: a list's elements are
    converted (``to_dict()``) and written one by one, so a 100 MB import does not hold its
    whole JSON text, or every kernel's dict, at once.

    >>> import io
    >>> buf = io.StringIO()
    >>> write_json_streamed({"a": [1, {"b": float("nan")}], "c": []}, buf)
    >>> buf.getvalue() == dumps_strict({"a": [1, {"b": None}], "c": []}) + "\\n"
    True
    """
    if not payload:
        out.write("{}\n")
        return
    sep = "{"
    for key, value in payload.items():
        out.write(f"{sep}\n  {dumps_strict(key)}: ")
        sep = ","
        if isinstance(value, (list, tuple)) and value:
            inner = "["
            for item in value:
                item = item.to_dict() if hasattr(item, "to_dict") else item
                out.write(inner + "\n    " + dumps_strict(item).replace("\n", "\n    "))
                inner = ","
            out.write("\n  ]")
        else:
            out.write(dumps_strict(value).replace("\n", "\n  "))
    out.write("\n}\n")


def _size(path: Path) -> int:
    """Bytes in ``path``; 0 when it cannot be read (the reader then says why)."""
    try:
        return path.stat().st_size
    except (OSError, ValueError):
        return 0
