"""``roofprof trace``: any PyTorch script's ops costed, timed and placed on the roofline.

``roofprof trace script.py [-- args]`` runs the script under :func:`roofprof.tracing.trace`
(the whole script, or the ``--region NAME`` it marks with ``roofprof.trace.region``);
``roofprof trace --import trace.json`` reads a torch profiler trace recorded with shapes.
A script that raises: its own traceback is shown as the script's, nothing is written, and
the exit code is 1. ``--counters`` (a GPU and Nsight Compute) then runs the script once
more under ``ncu`` (:mod:`roofprof.tracing.counters`) and adds the measured FLOPs and DRAM
bytes to each op row.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
import traceback
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJsonCsv
from roofprof.errors import ConfigError

__all__ = ["trace"]


def _run_script(script: Path, args: list[str], tracer) -> None:
    """Run ``script`` as ``__main__`` with ``args`` inside ``tracer``, its standard output
    sent to stderr (roofprof's own output keeps stdout); on the script's own exception
    print its traceback (frames of roofprof removed) and exit 1."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    try:  # the script's prints go to stderr: stdout is roofprof's (--format json | jq)
        with tracer, contextlib.redirect_stdout(sys.stderr):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            typer.echo(
                f"roofprof: {script} exited with status {exc.code}; nothing was written", err=True
            )
            raise typer.Exit(code=1) from None
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's script failed: show its traceback as its own
        tb = exc.__traceback__
        while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve() != script.resolve():
            tb = tb.tb_next
        typer.echo(
            f"roofprof: {script} raised an exception (the traceback below is the "
            "script's own; nothing was written):",
            err=True,
        )
        lines = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
        typer.echo("".join(lines).rstrip(), err=True)
        raise typer.Exit(code=1) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _with_counters(
    result, script: Path, args: list[str], out: Path | None, ncu: str | None, **child
) -> object:
    """The counters child under ncu; its CSV kept in ``out`` (else a temporary folder)."""
    import tempfile

    from roofprof.tracing.counters import trace_counters

    with tempfile.TemporaryDirectory() as tmp:
        csv = (out if out is not None else Path(tmp)) / "counters.csv"
        return trace_counters(result, script, args, csv, ncu=ncu, **child)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    script: Path | None = typer.Argument(None, help="Python script to trace (args after --)."),
    import_: Path | None = typer.Option(
        None, "--import", help="Read a torch profiler Chrome trace (record_shapes=True)."
    ),
    region: str | None = typer.Option(
        None, "--region", help="Trace only `with roofprof.trace.region(NAME)`, each entry a step."
    ),
    steps: int | None = typer.Option(
        None, "--steps", min=1, help="Measured steps (after --warmup)."
    ),
    warmup: int = typer.Option(
        0, "--warmup", min=0, help="Steps skipped first (roofprof.trace.step())."
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    roofline: str = typer.Option("auto", "--roofline", help="auto | spec | none | roofline.json."),
    gpu: str | None = typer.Option(
        None, "--gpu", help="With --import: the data/gpus.json id the trace was recorded on."
    ),
    replay: bool = typer.Option(
        True, "--replay/--no-replay", help="Replay each unique op in isolation."
    ),
    cold: bool = typer.Option(False, "--cold", help="Flush the caches before every replayed call."),
    counters: bool = typer.Option(
        False, "--counters", help="Nsight Compute per unique op (needs a GPU and ncu)."
    ),
    nvtx_signatures: bool = typer.Option(
        False, "--nvtx-signatures", hidden=True, help="(--counters child) NVTX range per signature."
    ),
    module_depth: int | None = typer.Option(
        None, "--module-depth", min=0, help="Cut module names to depth K."
    ),
    top: int = typer.Option(25, "--top", min=1, help="Rows of the table."),
    fmt: TableJsonCsv = typer.Option("table", "--format", "-f", help="table | json | csv."),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Folder for trace.json, ops.csv, modules.csv, roofline.png, report.html.",
    ),
) -> None:
    """Trace any PyTorch script: every op's FLOPs, minimum bytes and time on the roofline."""
    from roofprof.tracing.report import csv_text

    if (script is None) == (import_ is None):
        raise ConfigError(
            "give a script to run (roofprof trace script.py [-- args]) or --import trace.json"
        )
    ncu = None
    if counters:
        from roofprof.devices import select
        from roofprof.tracing.counters import require_counters

        if import_ is not None:
            raise ConfigError("--counters runs a script under Nsight Compute; not with --import")
        ncu = require_counters(select(device))  # a GPU and ncu, before anything runs
    if gpu is not None and import_ is None:
        raise ConfigError("--gpu names the GPU of an imported trace; use it with --import")
    if nvtx_signatures:  # the --counters child: run the script with NVTX ranges, report nothing
        from roofprof.tracing import trace as make_trace

        tracer = make_trace(
            device,
            roofline="none",
            replay=False,
            warmup=warmup,
            steps=steps,
            region=region,
            nvtx_signatures=True,
        )
        _run_script(script, list(ctx.args), tracer)
        return
    if import_ is not None:
        from roofprof.tracing.chrome import import_trace

        result = import_trace(
            import_, device=device, roofline=roofline, module_depth=module_depth, gpu=gpu
        )
    else:
        if not script.is_file():
            raise ConfigError(f"no such script: {script}")
        from roofprof.tracing import trace as make_trace

        tracer = make_trace(
            device,
            roofline=roofline,
            replay=replay,
            warmup=warmup,
            steps=steps,
            cold=cold,
            region=region,
            module_depth=module_depth,
        )
        _run_script(script, list(ctx.args), tracer)
        result = tracer.result
        if counters:
            result = _with_counters(
                result,
                script,
                list(ctx.args),
                out,
                ncu,
                device=device,
                region=region,
                warmup=warmup,
                steps=steps,
            )
    if out is not None:
        written = result.save(out)
        typer.echo(f"wrote {', '.join(sorted(written))} to {out}", err=True)
    if fmt == "json":
        typer.echo(result.json())
    elif fmt == "csv":
        typer.echo(csv_text(result), nl=False)
    else:
        typer.echo(result.table(top=top))
