"""``roofprof collectives``: all-reduce, all-gather, reduce-scatter and send/recv between ranks.

Under ``torchrun --nproc-per-node N -m roofprof collectives`` (one node or many) or with
``--ranks N`` (local processes started here).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJson, check_int, check_output, check_seconds, split_list
from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = ["collectives", "parse_bytes"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
}


def parse_bytes(text: str, what: str) -> int:
    """``"4096"``, ``"64KiB"``, ``"1GiB"``, ``"16M"`` (binary) → bytes.

    >>> parse_bytes("64KiB", "--min-bytes"), parse_bytes("1G", "--max-bytes")
    (65536, 1073741824)

    Raises:
        ConfigError: not a size.
    """
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS or int(m.group(1)) < 1:
        raise ConfigError(f"{what} {text!r} is not a size (e.g. 4096, 64KiB, 1GiB)")
    return int(m.group(1)) * _UNITS[unit]


@app.command()
def collectives(
    ranks: int | None = typer.Option(
        None,
        "--ranks",
        "-n",
        help="Start this many local ranks (default: the GPUs here; 2 on a CPU). "
        "Leave out under torchrun.",
    ),
    device: str = typer.Option(
        "auto", "--device", "-d", help="auto | cpu (gloo) | cuda (NCCL, one GPU per rank)."
    ),
    ops: str | None = typer.Option(
        None,
        "--ops",
        help="Comma list: all_reduce, all_gather, reduce_scatter, send (default: all).",
    ),
    min_bytes: str | None = typer.Option(None, "--min-bytes", help="Smallest size (default 1KiB)."),
    max_bytes: str | None = typer.Option(
        None, "--max-bytes", help="Largest size (default 1GiB on GPUs, 4MiB on CPUs)."
    ),
    warmup: int = typer.Option(5, "--warmup", help="Untimed calls per size."),
    calls: int = typer.Option(20, "--calls", help="Queued calls timed as one block per size."),
    paths: str | None = typer.Option(
        None,
        "--paths",
        help="eager | graph (CUDA graphs; GPUs only) | both (default: all offered).",
    ),
    timeout: float = typer.Option(
        300.0, "--timeout", help="Seconds before a stuck collective or rank fails the run (exit 2)."
    ),
    out: Path = typer.Option(
        Path("roofprof-collectives"),
        "--out",
        "-o",
        help="Folder for collectives.json, collectives.png, topology.txt.",
    ),
    fmt: TableJson = typer.Option(
        "table", "--format", "-f", help="table | json (the result on stdout)."
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw busbw vs size."),
) -> None:
    """Measure collective bandwidth between ranks (nccl-tests' algbw/busbw): JSON for
    ``predict --collectives``, a fitted α-β per op, a busbw plot, the GPU topology."""
    from roofprof.distributed import OPS, measure_interconnect, write_interconnect

    check_int(ranks, "--ranks", 1, 4096)
    check_int(warmup, "--warmup", 0, 100_000)
    check_int(calls, "--calls", 1, 100_000)
    check_seconds(timeout, "--timeout")
    wanted = split_list(ops) or list(OPS)
    path_list = None if paths in (None, "both") else split_list(paths)
    lo = parse_bytes(min_bytes, "--min-bytes") if min_bytes else None
    hi = parse_bytes(max_bytes, "--max-bytes") if max_bytes else None
    check_output(
        out, "--out", folder=True, inside=("collectives.json", "collectives.png", "topology.txt")
    )
    result = measure_interconnect(
        ranks=ranks,
        device=device,
        ops=wanted,
        min_bytes=lo,
        max_bytes=hi,
        warmup=warmup,
        calls=calls,
        paths=path_list,
        timeout_s=timeout,
    )
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return
    written = write_interconnect(result, out, plots=plots)
    if fmt == "json":
        from roofprof.units import clean

        payload = {**clean(result.to_dict()), "written": [str(p) for p in written]}
        sys.stdout.write(dumps_strict(payload) + "\n")
        return
    _print(result, written)


def _print(result, written) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    console.print(f"{result.ranks} ranks, {result.backend}, {result.device}")
    table = Table(
        "op", "path", "bytes", "seconds (mean)", "seconds (max)", "algbw GB/s", "busbw GB/s"
    )
    for s in result.samples:
        table.add_row(
            s.op,
            s.path,
            f"{s.bytes}",
            f"{s.seconds:.3e}",
            f"{s.seconds_max:.3e}",
            f"{s.algbw / 1e9:.3f}",
            f"{s.busbw / 1e9:.3f}",
        )
    console.print(table)
    fit_table = Table(
        "op", "path", "α (µs)", "asymptotic busbw GB/s", "rms rel. error", "datasheet GB/s"
    )
    for f in result.fits:
        sheet = result.datasheet_busbw.get(f["op"])
        bw = f["busbw_bytes_per_s"]
        fit_table.add_row(
            f["op"],
            f["path"],
            f"{f['alpha_s'] * 1e6:.1f}",
            "-" if bw is None else f"{bw / 1e9:.2f}",
            f"{f['rms_relative_error']:.2f}",
            "-" if sheet is None else f"{sheet / 1e9:.0f}",
        )
    console.print(fit_table)
    for note in result.notes:
        console.print(f"note: {note}")
    for p in written:
        console.print(f"written: {p}")
