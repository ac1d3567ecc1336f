"""``roofprof trace``: any PyTorch script's ops costed, timed and placed on the roofline.

``roofprof trace script.py [-- args]`` runs the script under :func:`roofprof.tracing.trace`
(the whole script, or the ``--region NAME`` it marks with ``roofprof.trace.region``);
``roofprof trace --import trace.json`` reads a torch profiler trace recorded with shapes.
A script that raises: its own traceback is shown as the script's, nothing is written, and
the exit code is 1.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import TableJsonCsv
from roofprof.errors import ConfigError, DeviceUnavailableError

__all__ = ["trace"]


def _run_script(script: Path, args: list[str], tracer) -> None:
    """Run ``script`` as ``__main__`` with ``args`` inside ``tracer``; on the script's own
    exception print its traceback (frames of roofprof removed) and exit 1."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        with tracer:
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            typer.echo(f"roofprof: {script} exited with status {exc.code}; nothing was written",
                       err=True)
            raise typer.Exit(code=1) from None
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's script failed: show its traceback as its own
        tb = exc.__traceback__
        while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve() != script.resolve():
            tb = tb.tb_next
        typer.echo(f"roofprof: {script} raised an exception (the traceback below is the "
                   "script's own; nothing was written):", err=True)
        lines = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
        typer.echo("".join(lines).rstrip(), err=True)
        raise typer.Exit(code=1) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    script: Path | None = typer.Argument(None, help="Python script to trace (args after --)."),
    import_: Path | None = typer.Option(
        None, "--import", help="Read a torch profiler Chrome trace (record_shapes=True)."),
    region: str | None = typer.Option(
        None, "--region", help="Trace only `with roofprof.trace.region(NAME)`, each entry a step."),
    steps: int | None = typer.Option(None, "--steps", min=1,
                                     help="Measured steps (after --warmup)."),
    warmup: int = typer.Option(0, "--warmup", min=0,
                               help="Steps skipped first (roofprof.trace.step())."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    roofline: str = typer.Option("auto", "--roofline", help="auto | spec | none | roofline.json."),
    replay: bool = typer.Option(True, "--replay/--no-replay",
                                help="Replay each unique op in isolation."),
    cold: bool = typer.Option(False, "--cold", help="Flush the caches before every replayed call."),
    counters: bool = typer.Option(False, "--counters", help="Nsight Compute per op (needs a GPU)."),
    module_depth: int | None = typer.Option(None, "--module-depth", min=0,
                                            help="Cut module names to depth K."),
    top: int = typer.Option(25, "--top", min=1, help="Rows of the table."),
    fmt: TableJsonCsv = typer.Option("table", "--format", "-f", help="table | json | csv."),
    out: Path | None = typer.Option(
        None, "--out", "-o",
        help="Folder for trace.json, ops.csv, modules.csv, roofline.png, report.html."),
) -> None:
    """Trace any PyTorch script: every op's FLOPs, minimum bytes and time on the roofline."""
    from roofprof.tracing.report import csv_text

    if (script is None) == (import_ is None):
        raise ConfigError("give a script to run (roofprof trace script.py [-- args]) "
                          "or --import trace.json")
    if counters:
        from roofprof.devices import select

        dev = select(device)
        if not dev.info.asynchronous:
            raise DeviceUnavailableError("--counters needs a GPU (Nsight Compute per op); "
                                         "this device is a CPU")
        raise DeviceUnavailableError("--counters per traced op is not available in this version; "
                                     "use `roofprof profile --counters` for the Llama ops")
    if import_ is not None:
        from roofprof.tracing.chrome import import_trace

        result = import_trace(import_, device=device, roofline=roofline, module_depth=module_depth)
    else:
        if not script.is_file():
            raise ConfigError(f"no such script: {script}")
        from roofprof.tracing import trace as make_trace

        tracer = make_trace(device, roofline=roofline, replay=replay, warmup=warmup, steps=steps,
                            cold=cold, region=region, module_depth=module_depth)
        _run_script(script, list(ctx.args), tracer)
        result = tracer.result
    if out is not None:
        written = result.save(out)
        typer.echo(f"wrote {', '.join(sorted(written))} to {out}", err=True)
    if fmt == "json":
        typer.echo(result.json())
    elif fmt == "csv":
        typer.echo(csv_text(result), nl=False)
    else:
        typer.echo(result.table(top=top))
