"""Where a DRAM probe's buffer lies in physical memory, and the warning when it is scattered.

The frame numbers are real where this runs as root (``/proc/self/pagemap``); the rest of the
tests plant the pagemap's bytes or the probe's figure, so they hold anywhere.
"""

from __future__ import annotations

import ctypes
import io
import mmap
import os
import struct

import numpy as np
import pytest

from roofprof.devices import pagemap
from roofprof.devices.cpu import CpuDevice
from roofprof.devices.cpu_probes import ProbeArena, setup_read, setup_triad
from roofprof.roofline.plausibility import LOCAL_ENOUGH, fragmentation_flags

PRESENT = 1 << 63
FRAMES_PER_BLOCK = pagemap.BLOCK_BYTES // os.sysconf("SC_PAGE_SIZE")


def _readable() -> bool:
    x = np.ones(1 << 12)
    return pagemap.physical_locality(x.ctypes.data, x.nbytes) is not None


def _plant(monkeypatch, entries):
    """``/proc/<pid>/pagemap`` reads as ``entries`` (one uint64 per page from address 0)."""
    raw = struct.pack(f"<{len(entries)}Q", *entries)
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("/pagemap"):
            return io.BytesIO(raw)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(pagemap, "open", fake_open, raising=False)


def test_locality_counts_steps_that_stay_in_one_2_mib_block():
    base = 7 * FRAMES_PER_BLOCK
    contiguous = list(range(base, base + 64))
    every_third = list(range(base, base + 192, 3))  # a, b, c written in one interleaved loop
    scattered = [base + i * FRAMES_PER_BLOCK for i in range(64)]
    assert pagemap.locality_of_frames(contiguous) == 1.0
    assert pagemap.locality_of_frames(every_third) == 1.0
    assert pagemap.locality_of_frames(scattered) == 0.0
    assert pagemap.locality_of_frames([base]) is None


def test_planted_frames_are_read_and_judged(monkeypatch):
    page = os.sysconf("SC_PAGE_SIZE")
    base = 3 * FRAMES_PER_BLOCK
    half = [PRESENT | (base + i) for i in range(4)] + [
        PRESENT | (base + (i + 5) * FRAMES_PER_BLOCK) for i in range(4)
    ]
    _plant(monkeypatch, half)
    assert pagemap.physical_locality(0, 8 * page) == pytest.approx(3 / 7)
    _plant(monkeypatch, [PRESENT] * 8)  # present, frame numbers hidden (not root)
    assert pagemap.physical_locality(0, 8 * page) is None
    _plant(monkeypatch, [PRESENT | (base + i) for i in range(7)] + [0])  # one page not present
    assert pagemap.physical_locality(0, 8 * page) is None
    assert pagemap.present_frames(0, 8 * page).tolist() == list(range(base, base + 7))


def test_an_unreadable_pagemap_says_none():
    assert pagemap.physical_locality(4096, 4096, pid=2**22 + 12345) is None
    assert pagemap.present_frames(4096, 4096, pid=2**22 + 12345) is None


@pytest.mark.skipif(not _readable(), reason="frame numbers need root")
def test_a_real_written_buffer_has_a_locality_and_an_untouched_one_none():
    x = np.ones(1 << 22)  # 32 MiB, every page written
    got = pagemap.physical_locality(x.ctypes.data, x.nbytes)
    assert got is not None and 0.0 <= got <= 1.0
    fresh = mmap.mmap(-1, 32 << 20)  # a new mapping, never touched: no page present
    view = (ctypes.c_char * len(fresh)).from_buffer(fresh)
    assert pagemap.physical_locality(ctypes.addressof(view), len(fresh)) is None
    del view
    fresh.close()


def test_cpu_bandwidth_probes_record_their_buffers_locality():
    arena = ProbeArena()
    read = setup_read(CpuDevice(), arena, working_set_bytes=1 << 20)
    triad = setup_triad(CpuDevice(), arena, working_set_bytes=1 << 20)
    for run in (read, triad):
        assert "physical_locality" in run.params
        assert run.params["physical_locality"] == arena.locality
    if _readable():
        assert arena.locality is not None and 0.0 <= arena.locality <= 1.0


def test_a_fragmented_dram_buffer_is_flagged_once_with_what_to_do():
    low = [{"level": "dram", "params": {"physical_locality": LOCAL_ENOUGH - 0.2}}]
    [flag] = fragmentation_flags(low + [{"level": "l2", "params": {}}])
    assert "70%" in flag and "compact_memory" in flag
    assert fragmentation_flags([{"level": "dram", "params": {"physical_locality": 0.99}}]) == []
    # a cache level's buffer, or no figure (not root), says nothing
    assert fragmentation_flags([{"level": "l3", "params": {"physical_locality": 0.1}}]) == []
    assert fragmentation_flags([{"level": "dram", "params": {"physical_locality": None}}]) == []
