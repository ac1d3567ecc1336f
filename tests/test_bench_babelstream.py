"""The BabelStream comparison's bookkeeping: ratios, level matching, and the builds it runs.

The comparison itself is a benchmark (``benchmarks/bench_babelstream.py``, BENCHMARKS.md);
these tests hold its summaries (doctests) and its compiler lines, not its timings.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
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


@pytest.fixture(scope="module")
def physmem(bench):
    import physmem as module  # bench_babelstream's own helper, beside it

    return module


def test_physmem_doctests_hold(physmem):
    failed, attempted = doctest.testmod(physmem)
    assert attempted >= 1 and failed == 0


def test_the_fragments_are_free_blocks_below_2_mib_in_normal_zones(physmem):
    page = os.sysconf("SC_PAGE_SIZE")
    info = (
        "Node 0, zone      DMA      9      9      9      9      9      9      9      9      9\n"
        "Node 0, zone   Normal      3      1      0      0      0      0      0      0      1"
        "      5\n"
        "Node 1, zone   Normal      0      0      2\n"
    )
    # DMA left out; order 8 (1 MiB) in, order 9 (2 MiB) out; both nodes' Normal zones summed
    assert physmem.fragmented_free_bytes(info) == (3 + 2 * 1 + 256 * 1 + 4 * 2) * page
    assert physmem.fragmented_free_bytes("no zones here") == 0


def test_a_ballast_holds_memory_in_another_process_and_lets_it_go(physmem):
    with physmem.Ballast(max_bytes=8 << 20) as held:
        proc = held._proc
        if Path("/proc/buddyinfo").exists() and physmem.fragmented_free_bytes(
            Path("/proc/buddyinfo").read_text()
        ):
            assert 0 < held.bytes <= 8 << 20 and proc is not None and proc.poll() is None
    assert held._proc is None and (proc is None or proc.poll() is not None)
    with physmem.Ballast(enabled=False) as off:
        assert off.bytes == 0 and off._proc is None


def test_a_running_process_large_mappings_are_read_or_none(physmem):
    import numpy as np

    x = np.ones(1 << 23)  # 64 MiB, written
    got = physmem.mapped_locality(os.getpid(), 32 << 20)
    if got is not None:  # root: frame numbers readable
        present, locality = got
        assert present >= x.nbytes and (locality is None or 0.0 <= locality <= 1.0)
    assert physmem.mapped_locality(2**22 + 12345, 1) is None  # no such process
