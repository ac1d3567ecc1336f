"""Give every benchmarked process physically contiguous memory, and record what it got.

On 4 KiB pages a stream's DRAM rate depends on which physical frames its pages landed on.
Linux's buddy allocator serves a page fault from the smallest free block first, so while
free memory is fragmented (``/proc/buddyinfo``: many free blocks of a few pages, left by
page cache and by processes that exited) the first few hundred MiB a process touches lie on
scattered frames, and what it touches after that on long runs of consecutive ones. A fresh
BabelStream allocates its arrays first thing; roofprof allocates its DRAM buffer after
Python, numba and the cache-level sweep. Measured on a 2-core Zen 4 KVM guest (three
256 MiB triad arrays, two sets, alternating call by call in one process): the first set
touched lay 10-84 % on consecutive frames and streamed 42 GB/s at best, the second 95-98 %
and 55 GB/s; allocated in the opposite order, the other set was the slow one.

:class:`Ballast` levels the field: before each measured run a helper process touches as
much memory as free memory holds in blocks smaller than 2 MiB, and holds it until the run
ends, so the run's pages come from large blocks whichever tool it is. Where frame numbers
are readable (root), :func:`mapped_locality` records what a running process got.

>>> info = "Node 0, zone   Normal   10   2   1   0   0   0   0   0   0   4   7"
>>> fragmented_free_bytes(info) == (10 + 2 * 2 + 1 * 4) * 4096
True
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from roofprof.devices.cpu import meminfo_bytes  # noqa: E402
from roofprof.devices.pagemap import locality_of_frames, present_frames  # noqa: E402

#: Free blocks below this order (2^9 pages: 2 MiB) count as fragments the ballast takes up.
BELOW_ORDER = 9
#: The ballast never takes more than this share of ``MemAvailable``.
MAX_SHARE = 0.25
_HOLDER = r"""
import mmap, sys
n = int(sys.argv[1])
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if hasattr(mmap, "MADV_NOHUGEPAGE"):
    m.madvise(mmap.MADV_NOHUGEPAGE)  # 4 KiB faults: the smallest free blocks first
for off in range(0, n, mmap.PAGESIZE):
    m[off] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def fragmented_free_bytes(buddyinfo: str, below_order: int = BELOW_ORDER) -> int:
    """Bytes of free memory in blocks of fewer than ``2**below_order`` pages, over the
    ``Normal`` zones of ``/proc/buddyinfo``'s text (``Node N, zone Z  c0 c1 ...``: free
    blocks of 2^0, 2^1, ... pages); 0 when it names no such zone."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for line in buddyinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[3] == "Normal":
            counts = [int(c) for c in fields[4 : 4 + below_order]]
            total += sum(c << order for order, c in enumerate(counts)) * page
    return total


class Ballast:
    """A helper process holding the fragments of free memory while a run is measured.

    Sized on entry from ``/proc/buddyinfo`` (:func:`fragmented_free_bytes`, at most
    :data:`MAX_SHARE` of ``MemAvailable`` and of ``max_bytes``); ``bytes`` is what it holds
    (0 where the kernel does not say, or ``enabled`` is False: then it does nothing).
    Released on exit.
    """

    def __init__(self, enabled: bool = True, max_bytes: int | None = None) -> None:
        self.enabled, self.max_bytes = enabled, max_bytes
        self.bytes = 0
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Ballast:
        if not self.enabled:
            return self
        try:
            info = Path("/proc/buddyinfo").read_text()
        except OSError:
            return self
        page = os.sysconf("SC_PAGE_SIZE")
        want = min(
            fragmented_free_bytes(info), int(MAX_SHARE * (meminfo_bytes("MemAvailable") or 0))
        )
        if self.max_bytes is not None:
            want = min(want, self.max_bytes)
        want = want // page * page
        if want <= 0:
            return self
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(want)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() == "ready":
            self.bytes = want
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None:
            self._proc.communicate(input="")  # stdin closed: the holder exits
            self._proc = None


def mapped_locality(pid: int, min_bytes: int) -> tuple[int, float | None] | None:
    """Bytes present and :func:`~roofprof.devices.pagemap.locality_of_frames` over the
    anonymous mappings of process ``pid`` of at least ``min_bytes`` (its large arrays;
    adjacent ones merge into one mapping), their present pages in address order; ``None``
    where it cannot be read (not root, process gone)."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return None
    frames = []
    for line in lines:
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        anonymous = len(fields) < 6 or fields[5] == "[heap]"
        if anonymous and hi - lo >= min_bytes:
            found = present_frames(lo, hi - lo, pid)
            if found is None:
                return None
            frames.append(found)
    if not frames:
        return 0, None
    joined = np.concatenate(frames)
    return int(joined.size) * os.sysconf("SC_PAGE_SIZE"), locality_of_frames(joined)
