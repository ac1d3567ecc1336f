"""Terminal output shared by the commands: stderr console, progress bar, captured warnings."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = ["collected_warnings", "emit", "progress_bar", "show_warnings", "stderr_console"]


def stderr_console():
    """A rich console on stderr without highlighting."""
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False)


@contextlib.contextmanager
def progress_bar(enabled: bool = True):
    """A rich progress bar on stderr; yields ``(progress(label, done, total), step(name))``.

    Disabled: yields ``(None, None)``.
    """
    if not enabled:
        yield None, None
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = stderr_console()
    with Progress(
        TextColumn("[bold]{task.fields[step]}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("", total=1, step="")
        current = {"step": ""}

        def progress(label: str, done: int, total: int) -> None:
            bar.update(
                task,
                description=escape(label),
                completed=done,
                total=max(total, 1),
                step=current["step"],
            )

        def step(name: str) -> None:
            current["step"] = escape(name)
            bar.update(task, description="", completed=0, total=1, step=escape(name))
            console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] step: [bold]{escape(name)}[/]")

        yield progress, step


@contextlib.contextmanager
def collected_warnings():
    """Record the warnings raised inside instead of printing them; yields the list.

    Python's filters still apply (an ignored warning is not recorded, an ``error`` filter
    still raises). Print them afterwards with :func:`show_warnings`, which can leave out
    those a report already printed.
    """
    with warnings.catch_warnings(record=True) as caught:
        yield caught


def show_warnings(caught: Sequence[warnings.WarningMessage], shown: Collection[str] = ()) -> None:
    """Each distinct caught warning once, as ``roofprof: warning: ...`` on stderr.

    ``shown``: warning texts the command's own output already printed (a prediction table
    ends with its warnings); those are not repeated, so each warning appears once.
    """
    import typer

    seen = set(shown)
    for w in caught:
        text = str(w.message)
        if text not in seen:
            seen.add(text)
            typer.echo("roofprof: warning: " + " ".join(text.split()), err=True)


def emit(
    fmt: str,
    payload: Callable[[], Any],
    *,
    table: Callable[[], None],
    csv: Callable[[], str] | None = None,
) -> None:
    """Print a command's result on stdout as ``json`` (strict JSON of ``payload()``), ``csv``
    (the text ``csv()`` returns) or ``table`` (``table()`` prints it); the one place a
    command's ``--format`` is honoured, so every verb writes JSON the same way.
    """
    if fmt == "json":
        from roofprof.units import dumps_strict

        sys.stdout.write(dumps_strict(payload()) + "\n")
    elif fmt == "csv" and csv is not None:
        sys.stdout.write(csv())
    else:
        table()
