"""How a buffer lies in physical memory: the share of its pages that stay near each other.

A stream over virtual memory on 4 KiB pages reaches the DRAM as whatever physical frames
the kernel handed out at first touch. Where free memory is fragmented (the first few hundred
MiB a process touches come from the smallest free blocks), consecutive pages land on
scattered frames all over memory; on a 2-core Zen 4 KVM guest three such arrays streamed a
triad at 42 GB/s where three laid out in large blocks streamed 55 GB/s, alternating call by
call in one process. What tells them apart is whether a page's successor lies in the same
2 MiB physical block (the kernel's huge-page unit), not whether it is the very next frame:
arrays written in one interleaved loop (``a[i]``, ``b[i]``, ``c[i]`` together, as
BabelStream initialises them) get every third frame of the blocks they share and stream as
fast as arrays written one by one. So a DRAM bandwidth probe records the locality of the
memory it timed.

Reads ``/proc/<pid>/pagemap`` (Linux). Frame numbers are visible only with
``CAP_SYS_ADMIN`` (root); elsewhere every function here returns ``None``, never raises.

>>> locality_of_frames([1024, 1027, 1030, 9000, 9001])
0.75
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

__all__ = ["BLOCK_BYTES", "locality_of_frames", "physical_locality", "present_frames"]

#: The physical block a page's successor should share: 2 MiB, the huge-page unit.
BLOCK_BYTES = 2 << 20
_PRESENT = 1 << 63
_PFN_MASK = (1 << 55) - 1


def locality_of_frames(frames: Sequence[int] | np.ndarray) -> float | None:
    """The share of consecutive page pairs whose two frames lie in the same
    :data:`BLOCK_BYTES` physical block, 0..1 (1.0 - 1/512 for one contiguous run of 4 KiB
    pages; near 0 for frames scattered over memory); ``None`` for fewer than two pages.

    >>> locality_of_frames([7, 900, 90000]), locality_of_frames([5])
    (0.0, None)
    """
    f = np.asarray(frames, dtype=np.int64)
    if f.size < 2:
        return None
    block = f // (BLOCK_BYTES // os.sysconf("SC_PAGE_SIZE"))
    return float(np.count_nonzero(block[1:] == block[:-1])) / (f.size - 1)


def present_frames(address: int, nbytes: int, pid: int | str = "self") -> np.ndarray | None:
    """The physical frame numbers of the pages under ``[address, address + nbytes)`` of
    process ``pid`` that are present in memory, in address order (int64; pages never
    touched or swapped out are left out); ``None`` where they cannot be read: no
    ``/proc/<pid>/pagemap`` (not Linux, process gone) or frame numbers hidden (not root:
    they read as 0)."""
    page = os.sysconf("SC_PAGE_SIZE")
    first, last = address // page, (address + max(int(nbytes), 1) - 1) // page
    try:
        with open(f"/proc/{pid}/pagemap", "rb") as fh:
            fh.seek(first * 8)
            raw = fh.read((last - first + 1) * 8)
    except OSError:
        return None
    entries = np.frombuffer(raw, dtype=np.uint64)
    entries = entries[(entries & np.uint64(_PRESENT)) != 0]
    frames = (entries & np.uint64(_PFN_MASK)).astype(np.int64)
    if frames.size and not frames.any():
        return None  # frame numbers hidden from an unprivileged reader
    return frames


def physical_locality(address: int, nbytes: int, pid: int | str = "self") -> float | None:
    """:func:`locality_of_frames` of the pages under ``[address, address + nbytes)`` of
    process ``pid`` (``"self"``: this one).

    Returns ``None`` where it cannot tell: frames unreadable (:func:`present_frames`) or a
    page not present (never touched, or swapped out).

    >>> import numpy as np
    >>> x = np.ones(1 << 16)
    >>> c = physical_locality(x.ctypes.data, x.nbytes)
    >>> c is None or 0.0 <= c <= 1.0
    True
    """
    page = os.sysconf("SC_PAGE_SIZE")
    pages = (address + max(int(nbytes), 1) - 1) // page - address // page + 1
    frames = present_frames(address, nbytes, pid)
    if frames is None or frames.size != pages:
        return None
    return locality_of_frames(frames)
