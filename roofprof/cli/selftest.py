"""``roofprof selftest``: prove the GPU side on a real GPU in one command.

See :mod:`roofprof.selftest`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import split_list

__all__ = ["selftest"]


@app.command()
def selftest(
    out: Path = typer.Option(
        Path("roofprof-selftest"),
        "--out",
        "-o",
        help="Folder for selftest.json, selftest.md, selftest_roofline.json, counters files.",
    ),
    quick: bool = typer.Option(
        False, "--quick", help="Quick roofline plan and fewer Llama shapes."
    ),
    budget: float = typer.Option(
        450.0, "--budget", help="Total time budget in seconds (sections share it)."
    ),
    device: str = typer.Option("cuda:0", "--device", help="The GPU to test (cuda:N)."),
    skip: str = typer.Option(
        "",
        "--skip",
        help="Comma list of sections to skip: correctness, roofline, benchmarks, counters, pytest.",
    ),
) -> None:
    """Check every GPU kernel, measure the GPU roofline, benchmark Llama shapes against cuBLAS,
    run the counter and GPU tests; write selftest.json and selftest.md with pass/fail per target.

    Without a usable GPU: one line saying so and what to install, exit code 2.
    """
    from roofprof.cli._options import check_output, check_seconds
    from roofprof.errors import ConfigError
    from roofprof.selftest import SECTIONS, run_selftest

    check_seconds(budget, "--budget")
    for name in ("selftest.json", "selftest.md"):  # creates nothing: no GPU, no folder
        check_output(out / name, "--out")
    skipped = split_list(skip) or []
    unknown = [s for s in skipped if s not in SECTIONS]
    if unknown:
        raise ConfigError(
            f"unknown section(s) in --skip: {', '.join(unknown)}; valid: {', '.join(SECTIONS)}"
        )
    sections = [s for s in SECTIONS if s not in skipped]
    results = run_selftest(
        out,
        quick=quick,
        budget_s=budget,
        device=device,
        sections=sections,
        progress=lambda msg: typer.echo(msg, err=True),
    )
    for t in results.get("targets", []):
        typer.echo(
            f"{t['status']:>12}  {t['description']}"
            + (
                f"  ({t['value']:.3g} vs {t['threshold']:.3g})"
                if t.get("value") is not None
                else ""
            )
        )
    typer.echo(
        f"wrote {Path(out) / 'selftest.json'} and {Path(out) / 'selftest.md'} "
        f"({results.get('elapsed_s', 0):.0f} s)"
    )
    if any(t.get("passed") is False for t in results.get("targets", [])):
        raise typer.Exit(code=1)
