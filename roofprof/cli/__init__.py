"""The ``roofprof`` command line: thin wiring over the library.

Each command group lives in its own module under ``roofprof.cli`` and registers itself on
:data:`app`. User errors (:class:`~roofprof.errors.RoofprofError`) become one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from roofprof.errors import RoofprofError

app = typer.Typer(
    name="roofprof",
    help="How fast can this machine run this LLM, and what limits it? "
    "Measured rooflines, Llama-shaped kernels, prefill/decode predictions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, each registering its commands on `app` when imported.
_COMMAND_MODULES = ("predict", "roofline", "profile", "counters", "selftest")


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
    """Entry point of the ``roofprof`` script; returns the exit code."""
    _register_commands()
    try:
        # standalone_mode=False: click returns the exit code of typer.Exit instead of exiting
        rc = app(args=argv, prog_name="roofprof", standalone_mode=False)
    except RoofprofError as exc:
        typer.echo(f"roofprof: error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        typer.echo("roofprof: interrupted; results already written were kept whole", err=True)
        return 130
    except Exception as exc:  # click's usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            typer.echo("roofprof: aborted", err=True)
            return 130
        raise
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
