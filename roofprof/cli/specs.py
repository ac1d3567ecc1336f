"""``roofprof specs``: the GPUs and models roofprof knows, with their key figures and sources."""

from __future__ import annotations

import sys

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJson
from roofprof.units import dumps_strict

__all__ = ["specs"]


@app.command()
def specs(
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """List the GPUs and models roofprof knows, with their key figures and sources."""
    from roofprof.report import print_specs, specs_payload

    if fmt == "json":
        sys.stdout.write(dumps_strict(specs_payload()) + "\n")
    else:
        print_specs()
