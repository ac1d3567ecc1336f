"""Shared pieces of the property tests (``tests/test_fuzz_*.py``).

The outcome every input surface must have: exit 0 with strict, finite, non-negative JSON
(for ``--format json``), or exit 2 with exactly one ``roofprof: error:`` line and no
traceback. Library parsers: a value, or a :class:`~roofprof.errors.RoofprofError`.

Time budget: in CI each property runs ``examples(n)`` examples (n small, about 60 s for all
of ``tests/test_fuzz_*.py`` on 2 cores). For a long run outside CI::

    ROOFPROF_FUZZ=long pytest -q -p no:cacheprovider tests/test_fuzz_*.py
    ROOFPROF_FUZZ=long ROOFPROF_FUZZ_SCALE=200 pytest ...   # 200× the CI examples

``ROOFPROF_FUZZ=long`` multiplies every example count by ``ROOFPROF_FUZZ_SCALE`` (default
50), lifts the deadline and the per-test time bound (:func:`time_bound`), and draws fresh
random inputs (CI runs derandomized, so a red CI is reproducible).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, settings

LONG = os.environ.get("ROOFPROF_FUZZ", "") == "long"
SCALE = int(os.environ.get("ROOFPROF_FUZZ_SCALE", "50")) if LONG else 1


#: Wall-clock bound of one property test in CI (pytest-timeout, a test extra): a runaway
#: example fails the run instead of stalling it. Typical: 1-8 s each on 2 idle cores.
CI_TIMEOUT_S = 300


def time_bound() -> Any:
    """``pytest.mark.timeout`` for a module of property tests: :data:`CI_TIMEOUT_S` per test
    in CI, none under ``ROOFPROF_FUZZ=long``. Use as ``pytestmark = time_bound()``."""
    import pytest

    return pytest.mark.timeout(0 if LONG else CI_TIMEOUT_S)


def examples(n: int) -> settings:
    """Hypothesis settings for ``n`` examples in CI (``n × SCALE`` under ``ROOFPROF_FUZZ=long``)."""
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        derandomize=not LONG,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much,
        ],
        database=None,
    )


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json(text: str) -> Any:
    """Parse ``text`` as strict JSON: ``NaN``/``Infinity`` are errors (a strict parser's view)."""
    return json.loads(text, parse_constant=_no_constants)


def numbers(obj: Any, path: str = "$"):
    """Every ``(path, number)`` in a parsed JSON tree (bools excluded)."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from numbers(v, f"{path}[{i}]")


#: JSON keys whose values may be negative (signed quantities, not sizes or times).
SIGNED_KEYS = ("residual", "delta", "offset", "error", "diff")


def assert_finite_non_negative(payload: Any) -> None:
    """Every number in ``payload`` is finite, and non-negative unless its key is signed."""
    for where, value in numbers(payload):
        assert math.isfinite(value), f"{where} = {value!r}"
        leaf = where.rsplit(".", 1)[-1].split("[")[0]
        if not any(s in leaf for s in SIGNED_KEYS):
            assert value >= 0, f"{where} = {value!r}"


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """``roofprof *argv`` in this process: ``(exit code, stdout, stderr)``."""
    from roofprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # must not happen: main returns its code
            raise AssertionError(f"main() raised SystemExit({exc.code}) for {argv!r}") from exc
    return rc, out.getvalue(), err.getvalue()


def assert_outcome(argv: Sequence[str], rc: int, out: str, err: str) -> None:
    """The CLI contract: exit 0 (strict finite JSON for ``--format json``) or exit 2, one line."""
    assert "Traceback" not in err, f"{argv!r}: traceback\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    if rc == 2:
        errors = [line for line in lines if line.startswith("roofprof: error: ")]
        assert len(errors) == 1, f"{argv!r}: expected one error line, got {lines!r}"
        others = [line for line in lines if not line.startswith("roofprof: ")]
        assert not others, f"{argv!r}: extra stderr lines {others!r}"
        return
    assert rc == 0, f"{argv!r}: exit code {rc}; stderr {err[-500:]!r}"
    if _wants_json(argv) and out.strip():
        assert_finite_non_negative(strict_json(out))


def _wants_json(argv: Sequence[str]) -> bool:
    fmt = None
    for i, token in enumerate(argv):
        if token in ("--format", "-f") and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif token.startswith("--format="):
            fmt = token.split("=", 1)[1]
    return fmt == "json" and "--help" not in argv
