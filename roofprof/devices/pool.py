"""Random inputs drawn once and shared: by implementations, batch sizes and sweep points.

An op's timing does not depend on the values in its operands, only on their sizes and on
where they live, so the weight matrix of a GEMM shape (the 1 GB ``lm_head`` of Llama 3.2 1B)
need not be drawn again for numpy, then numba, then for every batch size of a sweep: an
:class:`InputPool` hands out the same buffer for the same key while it holds it. Values are
filled fast and without periodic rows (:func:`tiled_normal`), and the pool keeps at most
``max_bytes`` (least recently used first out): a prepared op holds its own reference, so
an evicted buffer lives on for as long as an op uses it.

>>> pool = InputPool(max_bytes=1 << 20)
>>> a = pool.get(("w", 4, 8), lambda: tiled_normal((4, 8), np.float32, seed=1))
>>> b = pool.get(("w", 4, 8), lambda: tiled_normal((4, 8), np.float32, seed=2))
>>> a is b, pool.bytes
(True, 128)
>>> pool.clear(); pool.bytes
0
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = [
    "BLOCK",
    "InputPool",
    "cold_copies",
    "first_touch_seconds_per_page",
    "malloc_trimmer",
    "small_pages",
    "stays_warm",
    "tiled_normal",
    "weight_key",
]

#: Length of the random block tiled over big arrays: a prime, so a row of any length (a
#: power of two, a model dimension) never starts at the same place in the block twice in a row.
BLOCK = 1_000_003


def weight_key(lead: tuple[int, ...], n: int, k: int, dtype: str, copy: int) -> tuple:
    """The pool key of copy ``copy`` of a GEMM weight ``[*lead, n, k]`` in ``dtype`` (roofprof's
    name).

    Every implementation sharing a pool uses it, so numpy, numba and torch on the CPU time
    one buffer per weight (each views it as its own array type without copying:
    ``np.asarray`` of a CPU tensor, ``torch.from_numpy`` of an array).

    >>> weight_key((), 2048, 8192, "fp32", 0)
    ('gemm-w', (), 2048, 8192, 'fp32', 0)
    """
    return ("gemm-w", tuple(lead), int(n), int(k), dtype, int(copy))


def stays_warm(weight_bytes: float, cache_bytes: int) -> bool:
    """True for a weight under 1/32 of the last-level cache (1 MiB of 32 MiB).

    A real pass finds such a weight (a norm's γ, a few KB) in cache, and flushing twice
    the caches around a 20 µs op would time the flush's aftermath instead.

    >>> stays_warm(8192, 32 << 20), stays_warm(4 << 20, 32 << 20)
    (True, False)
    """
    return weight_bytes < cache_bytes / 32


def cold_copies(weight_bytes: float, cache_bytes: int, max_copies: int = 16) -> int:
    """How many copies of a GEMM weight to rotate over so each call finds its weight out of cache.

    The other copies together must exceed twice the last-level cache (``1 + ⌈2·LLC / w⌉``).
    That is capped at ``max_copies`` or at what ``4·LLC`` of memory holds, whichever allows
    more: a small weight (a 512 KB per-head projection, a 0.5B model's k/v projections)
    rotates over 64 MB of copies, as the real pass streams the other layers' weights between
    two uses of it, instead of over ``max_copies`` copies that fit in the cache together and
    would time it warm. A weight of four caches or more gets one copy (it evicts itself; a
    flush before the call costs under 5 % of it), one under 1/512 of the cache (64 KB of
    32 MB: a few microseconds' read) one copy too.

    >>> llc = 32 << 20
    >>> (cold_copies(64 << 20, llc), cold_copies(8 << 20, llc),
    ...  cold_copies(1 << 30, llc), cold_copies(8192, llc))
    (2, 9, 1, 1)
    >>> cold_copies(512 << 10, llc)
    129
    """
    if weight_bytes < cache_bytes / 512 or weight_bytes >= 4 * cache_bytes:
        return 1
    need = 1 + int(np.ceil(2 * cache_bytes / weight_bytes))
    return max(1, min(need, max(max_copies, int(4 * cache_bytes // weight_bytes))))


@contextmanager
def small_pages() -> Iterator[None]:
    """Inside this block numpy does not advise the kernel to back new arrays with huge pages.

    numpy asks for transparent huge pages on arrays of 4 MiB and more (``madvise``); where
    the kernel then compacts memory synchronously (``defrag=madvise``, as on this project's
    KVM guests) the first 1 GB array stalls for seconds (3.8 s measured, against 0.8 s with
    ordinary pages). Op inputs need no huge pages: torch's tensors (the real model's and the
    torch implementation's) use ordinary pages too, so numpy and numba operands now live as
    the others do. The roofline probes keep numpy's default. A numpy without the switch: a no-op.
    """
    switch = getattr(
        getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None
    )
    if switch is None:
        yield
        return
    before = switch(False)
    try:
        yield
    finally:
        switch(before)


def tiled_normal(
    shape: tuple[int, ...], dtype: Any, *, seed: int = 0, std: float = 1.0
) -> np.ndarray:
    """A new array of N(0, std²) values: a random block of :data:`BLOCK` values, tiled.

    Drawing float64 normals runs at ~50 M values/s on a CPU core; a 1 GB weight would take
    seconds per draw. Tiling one prime-length block fills at memory-copy speed, and its
    values stay ordinary (non-zero, non-denormal), which is all a timing needs.

    >>> x = tiled_normal((3, 5), np.float32, seed=0)
    >>> x.dtype, x.shape, bool(np.isfinite(x).all())
    (dtype('float32'), (3, 5), True)
    """
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    block = rng.standard_normal(min(n, BLOCK), dtype=np.float32)
    if std != 1.0:
        block *= np.float32(std)
    block = block.astype(dtype, copy=False)
    with small_pages():
        out = np.empty(n, dtype=dtype)
    if n:
        # copy in chunks of ~16 blocks (small copies run far below memory speed)
        chunk = np.tile(block, max(1, min(16, -(-n // block.size))))
        for start in range(0, n, chunk.size):
            stop = min(n, start + chunk.size)
            out[start:stop] = chunk[: stop - start]
    return out.reshape(shape)


class InputPool:
    """Buffers by key, made on first use, kept while under ``max_bytes`` (LRU eviction).

    Only buffers no op holds any more are evicted: one still in use stays shared (evicting
    it would free nothing and double it), so the pool can exceed ``max_bytes`` by what the
    live ops hold.

    Args:
        max_bytes: the most the pool keeps beyond what live ops hold (bytes); a buffer
            larger than that is made and returned but not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self.bytes = 0

    @staticmethod
    def _size(value: Any) -> int:
        nbytes = getattr(value, "nbytes", None)
        if nbytes is None and hasattr(value, "element_size"):  # a torch tensor
            nbytes = value.element_size() * value.nelement()
        return int(nbytes or 0)

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The buffer for ``key``: the held one, else ``make()`` (kept if it fits)."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = make()
        size = self._size(value)
        if size > self.max_bytes:
            return value
        if self.bytes + size > self.max_bytes:
            self._evict(self.bytes + size - self.max_bytes)
        self._items[key] = value
        self.bytes += size
        return value

    def _evict(self, excess: int) -> None:
        """Drop least recently used buffers that no op holds any more, ``excess`` bytes' worth.

        A buffer an op still holds is kept: dropping it would free nothing and the next op
        of its shape would draw (and hold) a second copy.
        """
        for key in list(self._items):
            if excess <= 0:
                break
            value = self._items[key]
            if sys.getrefcount(value) > 3:  # the pool's entry, ``value`` and the call's argument
                continue
            del self._items[key]
            size = self._size(value)
            self.bytes -= size
            excess -= size

    def clear(self) -> None:
        """Drop every buffer the pool holds (ops that hold one keep theirs)."""
        self._items.clear()
        self.bytes = 0


def malloc_trimmer() -> Callable[[], Any] | None:
    """``malloc_trim(0)`` of glibc, or None where there is no such call.

    In a real forward pass the large temporaries (MB-sized activations) are freed in bulk,
    glibc returns that memory to the OS, and the next allocations fault their pages back
    in: on a VM that costs ~1-3 µs per 4 KiB page, a few ms per activation. Timing an op
    in a loop instead reuses the same warm allocation. Calling this before each timed
    call (outside the interval) makes the op's output land in fresh pages, as in the pass.

    Applied to the non-GEMM ops only: profiling transformers' Llama 3.2 1B prefill on the
    2-core EPYC VM, its elementwise ops, norms, RoPE and SDPA ran at their fresh-page times
    (SiLU 3.6 ms where a warm loop takes 0.3 ms), while its GEMMs ran within ~5 % of their
    warm-loop times (34.5 ms vs 32-35 ms for 128×8192×2048) and 4-15 % slower with fresh
    pages.
    """
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


def first_touch_seconds_per_page(megabytes: int = 64, repeats: int = 3) -> float | None:
    """Wall seconds a torch fill spends per 4 KiB page it touches for the first time, with
    the current torch threads: a fill of fresh anonymous memory minus a second fill of the
    same memory, over its pages, the fastest of ``repeats``. This is what an op whose output
    lands in fresh pages pays on top of its warm time (about 1 µs per page on a 2-core KVM
    guest). None without torch or ``mmap``.

    >>> t = first_touch_seconds_per_page(8, 1)
    >>> t is None or 0.0 <= t < 1e-3
    True
    """
    import mmap
    import time

    try:
        import torch
    except ImportError:
        return None
    size = megabytes << 20
    best = None
    for _ in range(repeats):
        buf = mmap.mmap(-1, size)  # anonymous: no page is backed until written
        x = torch.frombuffer(buf, dtype=torch.float32)
        t0 = time.perf_counter()
        x.fill_(1.0)
        t1 = time.perf_counter()
        x.fill_(2.0)
        t2 = time.perf_counter()
        del x
        buf.close()
        cost = max(0.0, (t1 - t0) - (t2 - t1)) / (size / mmap.PAGESIZE)
        best = cost if best is None else min(best, cost)
    return best
