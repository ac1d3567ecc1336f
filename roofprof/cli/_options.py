"""Option parsing shared by every command: comma lists, choices, attention counting, dtype.

Choices are ``Literal`` types, so typer checks them while parsing (``--format xml`` is a
one-line usage error naming the valid values) and ``--help`` lists them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from roofprof.errors import ConfigError

__all__ = [
    "MAX_BATCH",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "PLOT_SUFFIXES",
    "TableJson",
    "TableJsonCsv",
    "check_int",
    "check_output",
    "check_seconds",
    "counting",
    "parse_int_list",
    "resolve_dtype",
    "split_list",
]

#: Extensions a chart can be written with (``--plot``).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
#: Largest ``--batch`` accepted (sequences per batch).
MAX_BATCH = 2**16
#: Largest ``--prompt``/``--context`` accepted (tokens per sequence; 16 Mi).
MAX_TOKENS = 2**24
#: Largest time budget accepted (``--budget``, ``--timeout``), in seconds: one day.
MAX_SECONDS = 86400.0

#: ``--format`` of the commands that print a table or JSON.
TableJson = Literal["table", "json"]
#: ``--format`` of the commands that can also print CSV.
TableJsonCsv = Literal["table", "json", "csv"]


def split_list(text: str | None) -> list[str] | None:
    """``"a, b,,c"`` → ``["a", "b", "c"]``; None or an empty text → None.

    >>> split_list("numba, torch"), split_list(""), split_list(None)
    (['numba', 'torch'], None, None)
    """
    if not text:
        return None
    items = [s.strip() for s in text.split(",") if s.strip()]
    return items or None


def parse_int_list(text: str, what: str, minimum: int, maximum: int = MAX_TOKENS) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]``.

    Raises:
        ConfigError: a part is not an integer or is outside ``minimum .. maximum`` (names
            ``what``).

    >>> parse_int_list("1, 8,64", "--batch", 1)
    [1, 8, 64]
    """
    values = []
    for part in text.split(","):
        stripped = part.strip()
        try:
            if len(stripped) > 20:
                raise ValueError(stripped)
            value = int(stripped)
        except ValueError:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise ConfigError(
                f"{what} must be an integer or a comma-separated list, got {shown!r}"
            ) from None
        values.append(check_int(value, what, minimum, maximum))
    return values


def check_int(value: int | None, what: str, minimum: int, maximum: int) -> int | None:
    """``value`` when it lies in ``minimum .. maximum`` (None passes: option not given).

    Raises:
        ConfigError: ``"--prompt must be at least 1, got 0"`` / ``"... at most ..."``.

    >>> check_int(8, "--steps", 1, 10_000)
    8
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{what} must be at least {minimum}, got {value}")
    if value > maximum:
        raise ConfigError(f"{what} must be at most {maximum}, got {value}")
    return value


def check_seconds(value: float | None, what: str, maximum: float = MAX_SECONDS) -> float | None:
    """``value`` when it is a positive finite number of seconds up to ``maximum`` (None passes).

    Raises:
        ConfigError: zero, negative, NaN, infinite or above ``maximum``.

    >>> check_seconds(0.2, "--budget")
    0.2
    """
    if value is None:
        return None
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise ConfigError(
            f"{what} must be a positive number of seconds up to {maximum:g}, got {value!r}"
        )
    return value


def check_output(
    path: Any,
    what: str,
    *,
    suffixes: tuple[str, ...] | None = None,
    folder: bool = False,
    inside: tuple[str, ...] = (),
) -> None:
    """Check an output path before any measurement (None passes: option not given).

    ``folder=True``: ``path`` is a folder, created now if needed and probed for writing
    (:func:`roofprof.results.check_writable_dir`), in which the files named in ``inside``
    will be written (none of them may be a folder). Otherwise
    ``path`` is a file (see :func:`roofprof.results.check_output_file`).

    Raises:
        ConfigError: one line naming ``what`` and what is wrong with the path.
    """
    if path is None:
        return
    from roofprof.results import check_output_file

    if not folder:
        check_output_file(path, suffixes=suffixes, what=what)
        return
    from roofprof.results import check_writable_dir

    folder_ = check_writable_dir(path)  # creates it: the command would at once anyway
    for name in inside:
        if (folder_ / name).is_dir():
            raise ConfigError(
                f"{what}: {str(folder_ / name)!r} is a folder; roofprof writes a "
                "file of that name there"
            )


def counting(attention: str) -> Any:
    """The :class:`~roofprof.workload.Counting` for ``--attention fused|unfused``.

    Raises:
        ConfigError: any other value.
    """
    from roofprof.workload import Counting

    if attention not in ("fused", "unfused"):
        raise ConfigError(f"unknown attention {attention!r}; valid choices: fused, unfused")
    return Counting(attention=attention)


def resolve_dtype(dtype: str, device: Any) -> tuple[Any, str]:
    """``(device, dtype)``: the selected device and ``auto`` → fp32 on a CPU, bf16 on a GPU."""
    from roofprof.devices import as_device

    dev = as_device(device)
    return dev, (dev.info.default_dtype if dtype == "auto" else dtype)


#: Most GPUs one replica may span (``--tp × --pp``).
MAX_GPUS = 4096


def parallel_layout(tp: int, pp: int, sequence_parallel: bool = False) -> Any:
    """The :class:`~roofprof.workload.Parallel` of ``--tp``, ``--pp``, ``--sequence-parallel``.

    Whether it splits the model is checked when the scenario is built (one line, exit 2).

    Raises:
        ConfigError: a size below 1 or above :data:`MAX_GPUS`.

    >>> parallel_layout(8, 1).devices
    8
    """
    from roofprof.workload import Parallel

    check_int(tp, "--tp", 1, MAX_GPUS)
    check_int(pp, "--pp", 1, MAX_GPUS)
    if sequence_parallel and tp == 1:
        raise ConfigError("--sequence-parallel needs --tp 2 or more")
    return Parallel(tp, pp, sequence_parallel)
