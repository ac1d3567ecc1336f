"""User-facing errors.

Every error a user can cause (unknown model or GPU, malformed config, impossible sizes,
missing GPU/NVML/ncu) is a :class:`RoofprofError`. The CLI prints its one-line message and
exits with code 2; the library lets it propagate.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "DeviceUnavailableError",
    "RoofprofError",
    "UnknownNameError",
    "ordered_choices",
]


class RoofprofError(Exception):
    """A problem with the user's input or environment, reported in one line (exit code 2)."""

    exit_code = 2


class UnknownNameError(RoofprofError, KeyError):
    """An id that is not in a catalogue; the message lists the valid ids, closest first."""

    def __init__(self, what: str, name: str, choices: Iterable[str]):
        self.what, self.name = what, name
        self.choices = ordered_choices(name, choices)
        super().__init__(f"unknown {what} {name!r}; valid choices: {', '.join(self.choices)}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.args[0]


class ConfigError(RoofprofError, ValueError):
    """A config file or argument value that cannot be used (names the file/field)."""


class DeviceUnavailableError(RoofprofError, RuntimeError):
    """A device, driver, library or tool that is asked for but not usable here."""


def ordered_choices(name: str, choices: Iterable[str]) -> list[str]:
    """Return ``choices`` with the closest matches to ``name`` first, the rest sorted.

    >>> ordered_choices("h10", ["a100-sxm-80gb", "h100-sxm", "h200"])[0]
    'h100-sxm'
    """
    choices = sorted(set(choices))
    key = name.lower()

    def closeness(choice: str) -> tuple[int, float]:
        prefix = len(os.path.commonprefix([key, choice.lower()]))
        return (-prefix, -difflib.SequenceMatcher(None, key, choice.lower()).ratio())

    return sorted(choices, key=closeness)
