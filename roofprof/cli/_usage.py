"""Usage errors in one line, ``--version`` and bare ``roofprof`` → help.

typer (0.26 and later) ships its own copy of click and raises that copy's exceptions;
the click distribution need not be installed, so nothing here imports ``click``. Usage
errors are recognised by the attributes every click-style usage error carries
(``format_message()`` and an integer ``exit_code``, plus ``ctx``, ``param`` or
``option_name`` when known) and rewritten as one line:

    roofprof: error: no such command 'predcit' (did you mean 'predict'?)

An unknown verb is caught earlier by :class:`CommandGroup`, which raises
:class:`UsageError` (a :class:`~roofprof.errors.RoofprofError`) naming the closest verb.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from roofprof.errors import RoofprofError, ordered_choices

__all__ = ["CommandGroup", "UsageError", "describe_usage_error", "show_help", "version_option"]


class UsageError(RoofprofError):
    """A command line roofprof cannot parse: unknown verb, option or value (exit code 2)."""


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f"; valid choices: {', '.join(sorted(choices))}"


class CommandGroup(TyperGroup):
    """typer's command group; an unknown verb is a one-line :class:`UsageError`."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else ""
        if (
            args
            and not name.startswith("-")
            and self.get_command(ctx, name) is None
            and not ctx.resilient_parsing
        ):
            where = "" if ctx.parent is None else f" for '{ctx.command_path}'"
            visible = [
                n
                for n in self.list_commands(ctx)
                if not getattr(self.get_command(ctx, n), "hidden", False)
            ]
            raise UsageError(f"no such command {name!r}{where}{_did_you_mean(name, visible)}")
        return super().resolve_command(ctx, args)


def show_help(ctx: Any) -> None:
    """Print the help of ``ctx``'s command on stdout and exit 0 (bare ``roofprof``)."""
    text = ctx.get_help()  # typer with rich prints the help itself and returns ""
    if text:
        typer.echo(text)
    raise typer.Exit(0)


def _print_version(value: bool) -> None:
    if value:
        from roofprof import __version__

        typer.echo(f"roofprof {__version__}")
        raise typer.Exit(0)


def version_option() -> Any:
    """The eager ``--version`` flag: print ``roofprof <version>`` and exit 0."""
    return typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the roofprof version and exit.",
    )


def _option_label(param: Any) -> str:
    opts = list(getattr(param, "opts", None) or ())
    longest = max(opts, key=len) if opts else getattr(param, "name", None) or "argument"
    return longest if longest.startswith("-") else longest.upper()


def _choices(exc: Any) -> tuple[str, ...]:
    """The valid values of the parameter ``exc`` is about, when it is a ``Literal`` choice."""
    param, ctx = getattr(exc, "param", None), getattr(exc, "ctx", None)
    callback = getattr(getattr(ctx, "command", None), "callback", None)
    name = getattr(param, "name", None)
    if callback is None or name is None:
        return ()
    try:
        annotation = typing.get_type_hints(callback).get(name)
    except Exception:  # noqa: BLE001 - unresolvable hints: no choices to offer
        return ()
    if typing.get_origin(annotation) is not typing.Literal:  # Literal[...] | None
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = inner[0] if len(inner) == 1 else None
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    return ()


def _given_value(argv: Sequence[str], param: Any) -> str | None:
    """The value the user gave for ``param``'s option (last occurrence), when it can be found."""
    opts = [o for o in (getattr(param, "opts", None) or ()) if o.startswith("-")]
    found = None
    for i, token in enumerate(argv):
        for opt in opts:
            if token == opt and i + 1 < len(argv):
                found = argv[i + 1]
            elif opt.startswith("--") and token.startswith(opt + "="):
                found = token[len(opt) + 1 :]
            elif not opt.startswith("--") and token.startswith(opt) and len(token) > len(opt):
                found = token[len(opt) :]
    return found


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "invalid command line"


def describe_usage_error(exc: BaseException, argv: Sequence[str]) -> tuple[str, int] | None:
    """``(one-line message, exit code)`` for a typer/click usage error; None for anything else.

    The message names the option or verb and, where one exists, the closest valid choice.
    """
    fmt = getattr(exc, "format_message", None)
    code = getattr(exc, "exit_code", None)
    if not callable(fmt) or not isinstance(code, int):
        return None
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "roofprof"
    of = f" of '{path}'" if ctx is not None else ""
    option = getattr(exc, "option_name", None)
    param = getattr(exc, "param", None)
    message = _first_line(str(fmt()))
    if option is not None and hasattr(exc, "possibilities"):  # an unknown option
        close = list(getattr(exc, "possibilities", None) or ())
        hint = (
            f" (did you mean {close[0]!r}?)"
            if len(close) == 1
            else f" (did you mean one of {', '.join(close)}?)"
            if close
            else f"; see '{path} --help'"
        )
        return f"no such option {option!r} for '{path}'{hint}", code
    if option is not None:  # an option without its value, or used wrongly
        if "requires" in message:
            return f"option {option!r}{of} needs a value", code
        return f"{option}: {message}", code
    if param is not None:
        label = _option_label(param)
        if type(exc).__name__ == "MissingParameter":
            return f"missing {label} for '{path}'; see '{path} --help'", code
        choices = _choices(exc)
        value = _given_value(argv, param)
        if choices and value is not None:
            listed = ", ".join(ordered_choices(value, choices))
            return f"invalid value {value!r} for {label}; valid choices: {listed}", code
        detail = message.split(": ", 1)[1] if message.startswith("Invalid value for") else message
        detail = detail.removeprefix("Value error, ")
        return f"invalid value for {label}: {detail}", code
    return f"{message[:1].lower()}{message[1:]}", code
