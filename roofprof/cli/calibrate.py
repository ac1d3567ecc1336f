"""``roofprof calibrate``: fit the calibrated estimator's engine profiles on the corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJson

__all__ = ["calibrate"]


@app.command()
def calibrate(
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Where to write the calibration (default: data/calibration.json)."
    ),
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """Fit the engine profiles of --estimator calibrated on data/published/ and write them,
    with in-sample fit residuals and leave-one-out residuals (no GPU needed)."""
    from roofprof._resources import data_root
    from roofprof.prediction.calibration import write_calibration
    from roofprof.report.published import print_calibration

    target = out or data_root() / "calibration.json"
    payload = write_calibration(target)
    if fmt == "json":
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        print_calibration(payload, target)
