"""The BabelStream comparison's bookkeeping: ratios, level matching, and the builds it runs.

The comparison itself is a benchmark (``benchmarks/bench_babelstream.py``, BENCHMARKS.md);
these tests hold its summaries (doctests) and its compiler lines, not its timings.
"""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_babelstream.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_babelstream", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(BENCH.parent))


def test_doctests_hold(bench):
    failed, attempted = doctest.testmod(bench)
    assert attempted >= 3 and failed == 0


def test_reference_build_is_64_byte_aligned_and_stock_build_is_not(bench, monkeypatch, tmp_path):
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: commands.append(cmd))
    bench.build_babelstream(tmp_path)
    bench.build_babelstream(tmp_path, fast_math=True, alignment=bench.ALIGNMENT)
    stock, reference = commands
    assert not any(flag.startswith("-DALIGNMENT") for flag in stock)
    assert "-ffast-math" not in stock
    assert {"-ffast-math", "-DALIGNMENT=64"} <= set(reference)


def test_a_pair_straddling_a_change_of_level_is_left_out(bench):
    pair = {"Copy": 40e9, "Triad": 42e9, "Dot": 40e9}
    slow = {"Copy": 30e9, "Triad": 31e9, "Dot": 30e9}
    runs = [
        {"bytes_per_s": {bench.DEFAULT_ALIGNMENT: slow, bench.ALIGNED: pair}},
        {"bytes_per_s": {bench.DEFAULT_ALIGNMENT: pair, bench.ALIGNED: pair}},
    ]
    out = bench.same_level_pairs(runs)
    assert out["mixed_pairs"] == 1
    assert out["fast"]["pairs"] == 1 and out["fast"]["Copy"]["median"] == 1.0
    assert out["slow"] == {"pairs": 0}
