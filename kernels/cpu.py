"""CPU kernels (numba ``@njit``), each with its numpy reference and its FLOP/byte model.

Device code only: no roofprof imports, no I/O. The host logic that sizes, checks and times
these kernels lives in ``roofprof.devices.cpu`` and ``roofprof.roofline.probes``.

Every parallel kernel splits its arrays into one contiguous chunk per thread
(``prange(nthreads)``), so a working set that fits a thread's private caches stays there
across the in-kernel repetitions (``reps``): this is what lets one kernel measure L1, L2,
L3 and DRAM bandwidth by working-set size alone. ``read_sum`` and ``triad`` work each chunk
as its two halves in lockstep: two streams per array per thread, as BabelStream's Dot reads
``a`` and ``b`` (numba's single-stream sum and triad read DRAM slower than GCC's loops; see
:func:`read_sum`); ``copy`` works each chunk as one stream, as BabelStream's Copy does (see
:func:`copy`). All kernels are ``nogil`` so that a telemetry thread keeps sampling while
they run.

Accounting conventions (exact, per call):

* ``read_sum``: ``bytes = 8·n·reps`` (each float64 read once per rep), ``flops = n·reps``.
* ``copy`` (STREAM): ``c = a``; ``bytes = 16·n·reps`` (write-allocate not counted).
* ``dot2`` (BabelStream's Dot): ``bytes = 16·n·reps`` (two arrays read), ``flops = 2·n·reps``.
* ``triad`` (STREAM): ``a = b + s·c``; ``bytes = 24·n·reps`` (a, b, c; the write-allocate
  read of ``a`` is not counted, as in STREAM), ``flops = 2·n·reps``.
* ``fma_chain``: every element ``x[i]`` gets ``k = u·reps`` dependent FMAs
  ``v = v·a + c``; ``flops = 2·k·n``; main-memory bytes ``= 2·itemsize·n`` (read once,
  written once: the in-kernel repetitions run on a block that stays in L1).
* ``gemm_nt``: ``out[m,n] = a[m,k] · w[n,k]ᵀ``; ``flops = 2·m·n·k`` per batch.

>>> import numpy as np
>>> x = np.ones(4096)
>>> out = np.zeros(2)
>>> float(read_sum(x, out, 2, 3))
12288.0
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = [
    "FMA_BLOCK",
    "FMA_UNROLLS",
    "copy",
    "dot2",
    "fill",
    "fill_distinct",
    "flush_read",
    "fma_chain",
    "fma_chain_reference",
    "fma_split",
    "gemm_flops",
    "gemm_nt",
    "gemm_nt_batched",
    "gemm_nt_reference",
    "read_sum",
    "read_sum_reference",
    "triad",
    "triad_reference",
]

# Elements per block of fma_chain: each thread works block by block, a block (4-8 KiB)
# stays in L1 while its FMAs repeat.
FMA_BLOCK = 1024
# Supported chain lengths per element per pass (the unrolled bodies below).
FMA_UNROLLS = (1, 2, 4, 8, 16)

_OPTS = dict(fastmath=True, nogil=True, cache=True)
# Kernels whose FLOP count must hold exactly: allow FMA contraction but not reassociation
# (with reassociation LLVM may fold a chain of v·a + c into fewer operations).
_EXACT = dict(fastmath={"contract"}, nogil=True, cache=True)


# --------------------------------------------------------------------------- bandwidth


@njit(**_OPTS)
def _sum_reps(x, reps):
    s = 0.0
    for _ in range(reps):
        for i in range(x.shape[0]):
            s += x[i]
    return s


@njit(**_OPTS)
def _sum2_reps(x, y, reps):
    # two streams in lockstep, as a dot product reads its two arrays
    s = 0.0
    u = 0.0
    for _ in range(reps):
        for i in range(x.shape[0]):
            s += x[i]
            u += y[i]
    return s + u


@njit(inline="always", **_OPTS)
def _chunk(n, t, nthreads):
    """Thread ``t``'s chunk ``[lo, hi)`` of ``n`` elements (starts on 8-element boundaries)
    and the length ``h`` of its two equal halves (a multiple of 8; ``hi - lo - 2h < 16``
    elements are left for a tail)."""
    lo = (n * t // nthreads) // 8 * 8
    hi = n if t == nthreads - 1 else (n * (t + 1) // nthreads) // 8 * 8
    return lo, hi, (hi - lo) // 16 * 8


@njit(parallel=True, **_OPTS)
def read_sum(x, out, nthreads, reps):
    """Sum ``x`` ``reps`` times, each thread over its own chunk; ``out[t]`` its partial sum.

    Each thread reads its chunk as two halves in lockstep (two streams per thread, as
    BabelStream's Dot reads ``a`` and ``b``): one stream per thread read DRAM 10-20 %
    slower on a 2-core VM (BENCHMARKS.md). Every element is read once per rep. Returns the
    total (so the work cannot be optimised away). ``x`` float64 1-D.
    """
    n = x.shape[0]
    for t in prange(nthreads):
        lo, hi, h = _chunk(n, t, nthreads)
        m = lo + h
        out[t] = _sum2_reps(x[lo:m], x[m : m + h], reps) + _sum_reps(x[m + h : hi], reps)
    return out[:nthreads].sum()


def read_sum_reference(x: np.ndarray, reps: int) -> float:
    """What :func:`read_sum` returns, computed by numpy in float64."""
    return float(np.sum(x, dtype=np.float64)) * reps


@njit(**_EXACT)
def _triad_reps(a, b, c, s, reps):
    for r in range(reps):
        sr = s + r  # a different scalar per pass: no pass can be skipped
        for i in range(a.shape[0]):
            a[i] = b[i] + sr * c[i]


@njit(**_EXACT)
def _triad2_reps(a, b, c, a2, b2, c2, s, reps):
    # the two halves of a thread's chunk in lockstep: two streams per array
    for r in range(reps):
        sr = s + r
        for i in range(a.shape[0]):
            a[i] = b[i] + sr * c[i]
            a2[i] = b2[i] + sr * c2[i]


@njit(parallel=True, **_EXACT)
def triad(a, b, c, s, nthreads, reps):
    """STREAM triad ``a = b + (s + r)·c`` for passes ``r = 0..reps-1``, per-thread chunks,
    each worked as two halves in lockstep (see :func:`read_sum`)."""
    n = a.shape[0]
    for t in prange(nthreads):
        lo, hi, h = _chunk(n, t, nthreads)
        m, e = lo + h, lo + 2 * h
        _triad2_reps(a[lo:m], b[lo:m], c[lo:m], a[m:e], b[m:e], c[m:e], s, reps)
        _triad_reps(a[e:hi], b[e:hi], c[e:hi], s, reps)


def triad_reference(b: np.ndarray, c: np.ndarray, s: float, reps: int) -> np.ndarray:
    """What :func:`triad` leaves in ``a`` (the last pass wins)."""
    return b + (s + reps - 1) * c


@njit(**_EXACT)
def _copy_reps(a, c, reps):
    for r in range(reps):
        d = float(r)  # a different value per pass: no pass can be skipped
        for i in range(a.shape[0]):
            c[i] = a[i] + d


@njit(parallel=True, **_EXACT)
def copy(a, c, nthreads, reps):
    """STREAM copy ``c = a`` (plus the pass index ``r``, so each pass is done) for passes
    ``r = 0..reps-1``, one contiguous chunk per thread worked as one stream, as
    BabelStream's Copy: one load and one store per element.

    Two halves in lockstep (as :func:`read_sum` and :func:`triad` work) read 11 % less than
    one stream at the 90th percentile while the 2-core guest's memory ran fast, on the
    probe's own staggered arena; the one-stream copy read within 4 % of a GCC loop there
    (call by call in one process; ``benchmarks/results/physical_layout_2026-12-07_oneoff.log``).
    """
    n = a.shape[0]
    for t in prange(nthreads):
        lo = (n * t // nthreads) // 8 * 8
        hi = n if t == nthreads - 1 else (n * (t + 1) // nthreads) // 8 * 8
        _copy_reps(a[lo:hi], c[lo:hi], reps)


@njit(parallel=True, **_OPTS)
def flush_read(buf, out, nthreads):
    """Read every cache line of ``buf`` (per-thread chunks); returns the sum.

    Used to evict the caches between timed runs: with ``buf`` at least twice the caches,
    every core streams more than its private caches hold and the shared cache ends up full
    of clean lines, so the timed run that follows pays no write-back for the flush.
    """
    n = buf.shape[0]
    for t in prange(nthreads):
        lo = (n * t // nthreads) // 8 * 8
        hi = n if t == nthreads - 1 else (n * (t + 1) // nthreads) // 8 * 8
        out[t] = _sum_reps(buf[lo:hi], 1)
    return out[:nthreads].sum()


@njit(parallel=True, **_EXACT)
def fill(x, value):
    """``x[:] = value`` in parallel (first touch spreads pages over the threads)."""
    for i in prange(x.shape[0]):
        x[i] = value


@njit(parallel=True, **_EXACT)
def fill_distinct(x):
    """``x[i] = 1 + page(i)·2⁻²¹`` in parallel: every 4 KiB page of ``x`` written, and no two
    pages alike (up to 4 GiB), so no page can stay the kernel's zero page or be merged with
    another by a deduplicating host; a read of ``x`` then streams distinct memory."""
    for i in prange(x.shape[0]):
        x[i] = 1.0 + float((i >> 9) & 0xFFFFF) * 4.76837158203125e-07


@njit(**_OPTS)
def _dot_reps(a, b, reps):
    s = 0.0
    for _ in range(reps):
        for i in range(a.shape[0]):
            s += a[i] * b[i]
    return s


@njit(parallel=True, **_OPTS)
def dot2(a, b, out, nthreads, reps):
    """``reps`` passes of ``sum(a[i]·b[i])``, each thread over its own chunk (BabelStream's
    Dot: 16 bytes read per element); returns the total."""
    n = a.shape[0]
    for t in prange(nthreads):
        lo = (n * t // nthreads) // 8 * 8
        hi = n if t == nthreads - 1 else (n * (t + 1) // nthreads) // 8 * 8
        out[t] = _dot_reps(a[lo:hi], b[lo:hi], reps)
    return out[:nthreads].sum()


# --------------------------------------------------------------------------- compute


@njit(inline="always", **_EXACT)
def _f1(v, a, c):
    return v * a + c


@njit(inline="always", **_EXACT)
def _f2(v, a, c):
    return _f1(_f1(v, a, c), a, c)


@njit(inline="always", **_EXACT)
def _f4(v, a, c):
    return _f2(_f2(v, a, c), a, c)


@njit(inline="always", **_EXACT)
def _f8(v, a, c):
    return _f4(_f4(v, a, c), a, c)


@njit(inline="always", **_EXACT)
def _f16(v, a, c):
    return _f8(_f8(v, a, c), a, c)


@njit(**_EXACT)
def _chain_block(xb, a, c, u, reps):
    # One loop per unroll so that each inner loop vectorises over i (SIMD lanes are the
    # independent accumulators; consecutive i give the out-of-order core more of them).
    if u == 16:
        for _ in range(reps):
            for i in range(xb.shape[0]):
                xb[i] = _f16(xb[i], a, c)
    elif u == 8:
        for _ in range(reps):
            for i in range(xb.shape[0]):
                xb[i] = _f8(xb[i], a, c)
    elif u == 4:
        for _ in range(reps):
            for i in range(xb.shape[0]):
                xb[i] = _f4(xb[i], a, c)
    elif u == 2:
        for _ in range(reps):
            for i in range(xb.shape[0]):
                xb[i] = _f2(xb[i], a, c)
    else:
        for _ in range(reps):
            for i in range(xb.shape[0]):
                xb[i] = _f1(xb[i], a, c)


@njit(parallel=True, **_EXACT)
def fma_chain(x, a, c, u, reps, block):
    """``k = u·reps`` FMAs ``v = v·a + c`` on every element of ``x``, in place.

    ``x`` is processed in blocks of ``block`` elements (one block stays in L1 while its
    ``reps`` passes run); ``u`` must be one of :data:`FMA_UNROLLS`. ``len(x)`` must be a
    multiple of ``block``. Works for float32 and float64 (``a``, ``c`` of the same type).
    """
    nb = x.shape[0] // block
    for b in prange(nb):
        _chain_block(x[b * block : (b + 1) * block], a, c, u, reps)


def fma_chain_reference(x: np.ndarray, a: float, c: float, k: int) -> np.ndarray:
    """What :func:`fma_chain` leaves in ``x`` after ``k`` FMAs, computed in float64.

    Uses the closed form of the affine recurrence: ``x·aᵏ + c·(1 - aᵏ)/(1 - a)``.
    """
    a64, c64 = float(a), float(c)
    ak = a64**k
    tail = c64 * k if a64 == 1.0 else c64 * (1.0 - ak) / (1.0 - a64)
    return x.astype(np.float64) * ak + tail


def fma_split(k: int) -> tuple[int, int]:
    """``(u, reps)`` with ``u·reps == k`` for :func:`fma_chain`; ``k`` a power of two ≥ 1.

    >>> fma_split(4), fma_split(64)
    ((4, 1), (16, 4))
    """
    if k < 1 or k & (k - 1):
        raise ValueError(f"FMAs per element must be a power of two >= 1, got {k}")
    return (k, 1) if k <= 16 else (16, k // 16)


# --------------------------------------------------------------------------- GEMM / GEMV

_TILE_I = 32  # rows of a kept hot while a tile of w rows sweeps over them
_TILE_J = 16


@njit(**_OPTS)
def _dot(x, y):
    acc = x.dtype.type(0)
    for p in range(x.shape[0]):
        acc += x[p] * y[p]
    return acc


@njit(parallel=True, **_OPTS)
def gemm_nt(a, w, out):
    """``out[i, j] = Σ_p a[i, p]·w[j, p]``: ``[m,k]·[n,k]ᵀ`` (nn.Linear weight layout).

    GEMV when ``m == 1``. Parallel over tiles of ``w`` rows; each inner product is a
    vectorised reduction in the input dtype.
    """
    m = a.shape[0]
    n = w.shape[0]
    nt = (n + _TILE_J - 1) // _TILE_J
    for jt in prange(nt):
        j0 = jt * _TILE_J
        j1 = min(n, j0 + _TILE_J)
        for i0 in range(0, m, _TILE_I):
            i1 = min(m, i0 + _TILE_I)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    out[i, j] = _dot(a[i], w[j])


@njit(parallel=True, **_OPTS)
def gemm_nt_batched(a, w, out):
    """Batched :func:`gemm_nt`: ``a[b,m,k]``, ``w[b,n,k]`` → ``out[b,m,n]``."""
    nb = a.shape[0]
    m = a.shape[1]
    n = w.shape[1]
    for q in prange(nb * n):
        b = q // n
        j = q - b * n
        for i in range(m):
            out[b, i, j] = _dot(a[b, i], w[b, j])


def gemm_nt_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a · wᵀ`` in float64 (batched when 3-D)."""
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    return a64 @ np.swapaxes(w64, -1, -2)


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> float:
    """FLOPs of ``batch`` GEMMs ``[m,k]·[k,n]``: ``2·m·n·k·batch``."""
    return 2.0 * m * n * k * batch
