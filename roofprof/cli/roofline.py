"""``roofprof roofline``: measure this machine's roofline (ceilings, sweeps, plots)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJson
from roofprof.errors import RoofprofError
from roofprof.units import dumps_strict

__all__ = ["RunInterrupted", "roofline"]


class RunInterrupted(RoofprofError):
    """Ctrl-C during a measurement: what finished is written; exit code 130."""

    exit_code = 130


@app.command()
def roofline(
    device: str = typer.Option("auto", "--device", "-d", help="auto | cpu | cuda:N."),
    quick: bool = typer.Option(
        False, "--quick", help="Fewer sizes and shorter budgets (about 30 s on 2 cores)."
    ),
    out: Path = typer.Option(
        Path("roofprof-roofline"), "--out", "-o", help="Folder for roofline.json and the PNGs."
    ),
    fmt: TableJson = typer.Option(
        "table", "--format", "-f", help="table | json (the summary on stdout)."
    ),
    plots: bool = typer.Option(
        True, "--plots/--no-plots", help="Draw the roofline, staircase and sweep PNGs."
    ),
    plan: Literal["full", "quick", "test"] | None = typer.Option(
        None, "--plan", hidden=True, help="full | quick | test (test: tiny budgets, for CI)."
    ),
    published: str | None = typer.Option(
        None,
        "--published",
        metavar="GPU",
        help="Measure nothing: build GPU's roofline from published microbenchmarks "
        "(data/published/), each ceiling citing its row; same roofline.json format.",
    ),
    all_ranks: bool = typer.Option(
        False,
        "--all-ranks",
        help="Every rank measures its device at once (under torchrun, or --ranks N local "
        "processes); rank 0 writes ranks.json and flags any device >5% below the median.",
    ),
    ranks: int | None = typer.Option(
        None, "--ranks", help="With --all-ranks outside torchrun: local ranks to start."
    ),
) -> None:
    """Measure the roofline of this machine: bandwidth per memory level, peak compute per dtype,
    best GEMM, and an intensity sweep; write roofline.json and plots."""
    if published is not None:
        _published(published, out, fmt, plots)
        return
    if all_ranks or ranks is not None:
        _all_ranks(device, ranks, plan or ("quick" if quick else "full"), out, fmt)
        return
    from roofprof.cli._options import check_output
    from roofprof.devices import select_device
    from roofprof.report import print_roofline_summary, roofline_summary_payload
    from roofprof.results import check_writable_dir
    from roofprof.roofline.probes import RooflineInterrupted, measure_roofline

    check_output(
        out,
        "--out",
        folder=True,  # before any measurement
        inside=("roofline.json", *(_PLOT_NAMES if plots else ())),
    )
    folder = check_writable_dir(out)
    selection = select_device(device)
    dev = selection.device
    err = _console(stderr=True)
    err.print(
        f"device: [bold]{_escape(dev.info.name)}[/] ({_escape(dev.info.label)}) — "
        f"{_escape(selection.reason)}"
    )
    json_path = folder / "roofline.json"

    def checkpoint(partial) -> None:
        partial.write(json_path)

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    plan_name = plan or ("quick" if quick else "full")
    try:
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task("measuring", total=None)

            def progress(done: int, total: int, label: str) -> None:
                bar.update(task, completed=done, total=total, description=label)

            result = measure_roofline(
                dev, quick=quick, progress=progress, plan=plan_name, checkpoint=checkpoint
            )
    except RooflineInterrupted as exc:
        exc.result.write(json_path)
        raise RunInterrupted(
            f"interrupted during {exc.during}; kept {len(exc.result.ceilings)} "
            f"finished ceilings in {json_path} (marked incomplete)"
        ) from None
    result.write(json_path)
    written = [json_path]
    if plots:
        written += _plots(result, folder, err)
    if fmt == "json":
        payload = roofline_summary_payload(result, written)
        sys.stdout.write(dumps_strict(payload) + "\n")
    else:
        print_roofline_summary(result, written)


def _published(gpu: str, out: Path, fmt: str, plots: bool) -> None:
    from roofprof.published import published_roofline
    from roofprof.report.published import print_published_roofline, published_roofline_payload
    from roofprof.results import check_writable_dir, write_json_atomic
    from roofprof.roofline import Roofline
    from roofprof.specs import load_gpu

    spec = load_gpu(gpu)
    roof = published_roofline(spec.id)  # exit 2 naming the GPUs with ceilings
    folder = check_writable_dir(out)
    payload = published_roofline_payload(spec, roof)
    json_path = folder / "roofline.json"
    write_json_atomic(json_path, payload)
    written = [json_path]
    if plots:
        from roofprof.plots.roofline import plot_roofline

        written.append(
            plot_roofline(
                roof,
                (),
                folder / "roofline.png",
                dtypes=list(roof.dtypes),
                spec=Roofline.from_spec(spec),
                title=f"Published-ceiling roofline: {spec.name}",
            )
        )
    if fmt == "json":
        sys.stdout.write(dumps_strict({**payload, "written": [str(p) for p in written]}) + "\n")
    else:
        print_published_roofline(roof, written)


def _all_ranks(device: str, ranks: int | None, plan: str, out: Path, fmt: str) -> None:
    from roofprof.cli._options import check_int, check_output
    from roofprof.distributed.fleet import measure_all_ranks
    from roofprof.results import write_json_atomic
    from roofprof.units import clean

    check_int(ranks, "--ranks", 1, 4096)
    check_output(out, "--out", folder=True, inside=("ranks.json",))
    rows = measure_all_ranks(ranks=ranks, device=device, plan=plan)
    if rows is None:  # a torchrun rank other than 0
        return
    payload = clean(
        {
            "ranks": rows,
            "plan": plan,
            "slow_fraction": 0.05,
            "slow": [r["rank"] for r in rows if r["slow"]],
        }
    )
    path = write_json_atomic(Path(out) / "ranks.json", payload)
    if fmt == "json":
        sys.stdout.write(dumps_strict({**payload, "written": [str(path)]}) + "\n")
        return
    from rich.table import Table

    table = Table(
        "rank", "host", "device", "DRAM GB/s", "compute TFLOP/s", "SM MHz", "clock reasons", "flag"
    )
    for r in rows:
        bw, fl = r["dram_bytes_per_s"], r["compute_flops_per_s"]
        table.add_row(
            str(r["rank"]),
            r["host"],
            f"{r['name']} ({r['torch_device']})",
            "-" if bw is None else f"{bw / 1e9:.1f}",
            "-" if fl is None else f"{fl / 1e12:.2f}",
            "-" if r["sm_clock_mhz"] is None else str(r["sm_clock_mhz"]),
            "-"
            if r["clock_event_reasons"] is None
            else ", ".join(r["clock_event_reasons"]) or "none",
            ("SLOW: " + ", ".join(r["slow_on"])) if r["slow"] else "ok",
        )
    console = _console()
    console.print(table)
    console.print(f"written: {path}")


_PLOT_NAMES = ("roofline.png", "staircase.png", "intensity_sweep.png")


def _plots(result, folder: Path, err) -> list[Path]:
    from roofprof.plots.sweeps import plot_intensity_sweep, plot_staircase

    paths: list[Path] = []
    jobs: list[tuple[str, Any]] = [
        ("roofline.png", lambda p: _plot_roofline(result, p)),
        ("staircase.png", lambda p: plot_staircase(result, p)),
        ("intensity_sweep.png", lambda p: plot_intensity_sweep(result, p)),
    ]
    for name, draw in jobs:
        try:
            paths.append(draw(folder / name))
        except (ValueError, RoofprofError) as exc:  # a missing sweep or ceiling: skip that chart
            err.print(f"[yellow]skipped {name}: {_escape(str(exc))}[/]")
    return paths


def _plot_roofline(result, path: Path) -> Path:
    from roofprof.plots.roofline import plot_roofline

    spec = None
    if result.device.spec_id:
        from roofprof.roofline import Roofline
        from roofprof.specs import load_gpu

        spec = Roofline.from_spec(load_gpu(result.device.spec_id))
    if "dram" not in result.roofline.levels:
        raise ValueError("no DRAM ceiling measured")
    return plot_roofline(
        result.roofline,
        (),
        path,
        dtypes=list(result.roofline.dtypes),
        spec=spec,
        title=f"Measured roofline: {result.device.name} ({result.device.label})",
    )


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    return Console(file=stream, highlight=False, width=width)
