"""Small text formatters shared by the terminal tables and the HTML page."""

from __future__ import annotations

__all__ = ["pct", "resid"]


def pct(x: float | None) -> str:
    """A percentage without decimals; ``n/a`` for None or NaN.

    >>> pct(87.4), pct(None)
    ('87%', 'n/a')
    """
    return "n/a" if x is None or x != x else f"{x:.0f}%"


def resid(x: float | None) -> str:
    """A signed residual as a percentage; empty for None or NaN.

    >>> resid(0.123), resid(-0.05), resid(None)
    ('+12.3%', '-5.0%', '')
    """
    return "" if x is None or x != x else f"{x:+.1%}"
