"""The ``roofprof`` command line: thin wiring over the library.

One module per verb under ``roofprof.cli`` (``predict``, ``specs``, ``roofline``, ``doctor``,
``profile``, ``validate``, ``run``, ``counters``, ``selftest``, ``collectives``, ...),
each registering itself on
:data:`app`: options → one library call → one report call. Shared option parsing lives in
:mod:`roofprof.cli._options`; no command module imports another.

User errors (:class:`~roofprof.errors.RoofprofError`) and usage errors (unknown verb or
option, missing or invalid value) become one line on stderr and exit code 2, never a
traceback; ``roofprof --version`` prints the version, bare ``roofprof`` prints the help.
typer is imported here; the library, rich and pandas only inside each command.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import typer

from roofprof.cli._usage import CommandGroup, describe_usage_error, show_help, version_option
from roofprof.errors import RoofprofError

__all__ = ["app", "console_main", "fail", "main"]

app = typer.Typer(
    name="roofprof",
    help="How fast can this machine run this LLM, and what limits it? "
    "Measured rooflines, Llama-shaped kernels, prefill/decode predictions.",
    cls=CommandGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context, version: bool = version_option()) -> None:
    if ctx.invoked_subcommand is None:
        show_help(ctx)


# Command modules, each registering its commands on `app` when imported (in help order).
_COMMAND_MODULES = (
    "predict",
    "specs",
    "roofline",
    "doctor",
    "profile",
    "validate",
    "run",
    "counters",
    "selftest",
    "trace",
    "calibrate",
    "collectives",
    "endpoint",
)


def _register_commands() -> None:
    for name in _COMMAND_MODULES:
        qualified = f"roofprof.cli.{name}"
        try:
            importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name != qualified:  # a real missing dependency inside the module: surface it
                raise


def fail(message: str) -> None:
    """Print ``roofprof: error: message`` on stderr and exit with code 2."""
    typer.echo(f"roofprof: error: {message}", err=True)
    raise typer.Exit(code=2)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``roofprof`` script; returns the exit code.

    0 on success (and for ``--help``, ``--version`` and bare ``roofprof``), 2 for a usage or
    input error (one line on stderr), 130 after Ctrl-C, or what the command chose.
    """
    _register_commands()
    args = sys.argv[1:] if argv is None else list(argv)
    with warnings.catch_warnings():
        # Python's printer shows file, line and source; through the public formatwarning hook
        # it prints one line instead, and a recorder installed by the caller (pytest.warns,
        # catch_warnings(record=True)) still records, since recording never formats.
        warnings.formatwarning = _one_line_warning
        return _run(args)


def console_main() -> None:
    """The ``roofprof`` script (and ``python -m roofprof``): :func:`main`, then a prompt exit.

    Everything a command writes is written (atomically) before :func:`main` returns, so the
    process then runs the ``atexit`` handlers, flushes stdout and stderr and ends with
    ``os._exit``: tearing down the interpreter module by module (torch, numba, the buffers
    a run held) costs 0.7–1.6 s on a 2-core CPU and does nothing for the user. A command that
    left a non-daemon thread running exits the ordinary way (Python waits for it).
    """
    import atexit
    import os
    import threading

    rc = main()
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(not t.daemon and t.is_alive() for t in others):
        sys.exit(rc)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is not None:
        run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`roofprof specs | head`): nowhere to flush
            pass
    os._exit(rc)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings that reach the terminal as ``roofprof: warning: ...``, one line each."""
    return "roofprof: warning: " + " ".join(str(message).split()) + "\n"


def _run(args: list[str]) -> int:
    try:
        # standalone_mode=False: typer returns the exit code of typer.Exit instead of exiting
        rc = app(args=args, prog_name="roofprof", standalone_mode=False)
    except RoofprofError as exc:
        typer.echo(f"roofprof: error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("roofprof: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        typer.echo("roofprof: interrupted; results already written were kept whole", err=True)
        return 130
    except Exception as exc:
        usage = describe_usage_error(exc, args)
        if usage is None:
            raise
        message, code = usage
        typer.echo(f"roofprof: error: {message}", err=True)
        return code
    if rc == 130:  # typer turns Ctrl-C into exit code 130
        typer.echo("roofprof: interrupted; results already written were kept whole", err=True)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
