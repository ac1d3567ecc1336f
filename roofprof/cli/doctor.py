"""``roofprof doctor``: what is available here, and why anything is missing."""

from __future__ import annotations

import sys

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJson
from roofprof.units import dumps_strict

__all__ = ["doctor"]


@app.command()
def doctor(
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """Report what is available here (devices, NVML, nvcc, ncu, torch, cupy, numba-cuda) and
    why anything is missing."""
    from roofprof.doctor import doctor_report
    from roofprof.report import print_doctor

    rows = doctor_report()
    if fmt == "json":
        sys.stdout.write(dumps_strict({"components": rows}) + "\n")
    else:
        print_doctor(rows)
