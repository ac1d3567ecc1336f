"""Option parsing shared by every command: comma lists, choices, attention counting, dtype.

Choices are ``Literal`` types, so typer checks them while parsing (``--format xml`` is a
one-line usage error naming the valid values) and ``--help`` lists them.
"""

from __future__ import annotations

from typing import Any, Literal

from roofprof.errors import ConfigError

__all__ = ["TableJson", "TableJsonCsv", "counting", "parse_int_list", "resolve_dtype",
           "split_list"]

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


def parse_int_list(text: str, what: str, minimum: int) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]``.

    Raises:
        ConfigError: a part is not an integer or is below ``minimum`` (names ``what``).

    >>> parse_int_list("1, 8,64", "--batch", 1)
    [1, 8, 64]
    """
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise ConfigError(f"{what} must be an integer or a comma-separated list, "
                              f"got {text!r}") from None
        if value < minimum:
            raise ConfigError(f"{what} must be at least {minimum}, got {value}")
        values.append(value)
    return values


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
    from roofprof.profiling import select_device

    dev = select_device(device)
    return dev, (dev.info.default_dtype if dtype == "auto" else dtype)
