"""Numbers for people and for strict JSON: SI and binary prefixes, rates, NaN-free payloads.

The ground floor of the edge: every table, chart, note and report formats its numbers
here (the role of torch's ``select_unit`` and nvitop's ``bytes2human``), and every JSON
payload is made strict here. It imports nothing of roofprof, so any module may use it.

- :func:`si`: decimal prefixes with about three significant digits (``3.35 TB/s``).
- :func:`fmt_rate`: three significant digits from M to P, an en dash when missing.
- :func:`fmt_bytes`: binary prefixes (``1.50 GiB``; ``compact=True``: ``1.5 GiB``).
- :func:`clean`: NaN/inf become None, tuples lists, keys strings (JSON has no NaN).
- :func:`dumps_strict`: ``json.dumps`` of ``clean(obj)`` that can never write ``NaN``/``Infinity``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

__all__ = [
    "clean",
    "dumps_strict",
    "finite_or_none",
    "fmt_bytes",
    "fmt_rate",
    "json_default",
    "scoped",
    "si",
]

_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
            (1e-6, "µ"), (1e-9, "n"))  # fmt: skip
_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _decimals(scaled: float, digits: int) -> int:
    """Decimals that leave about ``digits`` significant digits for ``scaled`` in [1, 1000)."""
    if abs(scaled) < 10:
        return digits - 1
    if abs(scaled) < 100:
        return max(digits - 2, 0)
    return max(digits - 3, 0)


def si(value: float | None, unit: str = "", digits: int = 3, *, missing: str = "n/a") -> str:
    """``value`` with a decimal prefix: ``1.234e12, "FLOP/s"`` → ``"1.23 TFLOP/s"``.

    Seconds never get a prefix above one (``"120 s"``, not ``"0.12 ks"``). None and NaN
    give ``missing``; zero gives ``"0 unit"``.

    >>> si(3.35e12, "B/s")
    '3.35 TB/s'
    >>> si(0.0048, "s")
    '4.80 ms'
    >>> si(None, "s", missing="—"), si(float("nan"), "B")
    ('—', 'n/a')
    """
    if value is None or value != value:  # None or NaN
        return missing
    if value == 0:
        return f"0 {unit}".strip()
    prefixes = [p for p in _DECIMAL if p[0] <= 1] if unit == "s" else list(_DECIMAL)
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.{_decimals(scaled, digits)}f} {prefix}{unit}".strip()
    scale, prefix = prefixes[-1]
    return f"{value / scale:.2f} {prefix}{unit}".strip()


def fmt_rate(value: float | None, unit: str) -> str:
    """A rate with three significant digits and a prefix from M to P (``–`` when missing).

    >>> fmt_rate(3.35e12, "B/s"), fmt_rate(989.4e12, "FLOP/s"), fmt_rate(None, "B/s")
    ('3.35 TB/s', '989 TFLOP/s', '–')
    """
    if value is None:
        return "–"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_bytes(n: float, *, compact: bool = False) -> str:
    """A byte count with a binary prefix.

    Default: two decimals in GiB, one in MiB and KiB (``1.50 GiB``, ``12.0 MiB``, ``512 B``).
    ``compact=True``: no decimals from 10 up or for whole numbers, else one (``1.5 GiB``,
    ``64 KiB``), as in working-set labels.

    >>> fmt_bytes(3 * 2**30 // 2), fmt_bytes(12 * 2**20), fmt_bytes(512)
    ('1.50 GiB', '12.0 MiB', '512 B')
    >>> fmt_bytes(3 * 2**30 // 2, compact=True), fmt_bytes(64 * 2**10, compact=True)
    ('1.5 GiB', '64 KiB')
    """
    for unit, scale in _BINARY:
        if n >= scale:
            v = n / scale
            if compact:
                return f"{v:.0f} {unit}" if v >= 10 or float(v).is_integer() else f"{v:.1f} {unit}"
            return f"{v:.2f} {unit}" if unit == "GiB" else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def clean(obj: Any) -> Any:
    """``obj`` with NaN/inf floats replaced by None, tuples by lists, keys by strings.

    The one strict-JSON cleaner: ``json.dumps(clean(x))`` never writes ``NaN``.

    >>> clean({"a": float("nan"), "b": (1, 2.0), 3: float("inf")})
    {'a': None, 'b': [1, 2.0], '3': None}
    >>> clean(2.5)
    2.5
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def json_default(obj: Any) -> Any:
    """``default=`` for :func:`json.dumps`: dataclasses, arrays (``tolist``) and paths.

    Raises:
        TypeError: anything else (as :func:`json.dumps` expects).

    >>> import json
    >>> json.dumps({"p": Path("a/b")}, default=json_default)
    '{"p": "a/b"}'
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def finite_or_none(x: float) -> float | None:
    """``x`` or None when NaN/inf or not a number (a single value; :func:`clean` for trees).

    >>> finite_or_none(float("inf")), finite_or_none(2)
    (None, 2)
    """
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def dumps_strict(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj``: dataclasses/arrays/paths converted (other objects as
    text), NaN/inf → ``null``.

    Every JSON roofprof prints or writes goes through here, so any strict parser reads it.

    >>> dumps_strict({"x": float("inf"), "p": Path("a")}, indent=None)
    '{"x": null, "p": "a"}'
    """
    import json

    def default(o: Any) -> Any:
        try:
            return clean(json_default(o))
        except TypeError:  # anything else is shown by its text, never a crash
            return str(o)

    return json.dumps(clean(obj), indent=indent, allow_nan=False, default=default)


def scoped(count: int, **per_call: float | None) -> dict[str, float | None]:
    """Per-call quantities of an op record and their totals over ``count`` calls, the scope
    in the name (``<name>_per_call``, ``<name>_total``; None stays None). Every command's
    op records spell FLOPs, bytes and times this way.

    >>> scoped(3, flops=2.0, bytes=None)
    {'flops_per_call': 2.0, 'flops_total': 6.0, 'bytes_per_call': None, 'bytes_total': None}
    """
    out: dict[str, float | None] = {}
    for name, v in per_call.items():
        out[f"{name}_per_call"] = v
        out[f"{name}_total"] = None if v is None else v * count
    return out
