"""Numba-CUDA roofline probe kernels: streaming read and copy, FMA chains, intensity sweep.

The kernels (:data:`read_fp32`, :data:`copy_fp32`, :data:`fma_chain_fp32`,
:data:`fma_chain_fp64`, :data:`intensity_sweep_fp32`), their launch geometry
(:func:`stream_launch`, :func:`threads_launch`, :func:`fma_threads`) and the closed forms that
check the chains (:func:`fma_chain_closed_form`, :func:`fma_chain_reference`). Sizes below 1
raise ``ValueError``.

>>> stream_launch(1 << 28, 132)
((528, 1, 1), (256, 1, 1))
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .numba_support import FULL_MASK, Launch, cdiv, float32, float64, positive_sizes, uint64

__all__ = [
    "FMA_ACC",
    "FMA_BLOCK",
    "FMA_INNER",
    "FMA_PER_ITER",
    "STREAM_BLOCK",
    "STREAM_BLOCKS_PER_SM",
    "STREAM_ILP",
    "SWEEP_UNROLL",
    "copy_fp32",
    "fma_chain_closed_form",
    "fma_chain_fp32",
    "fma_chain_fp64",
    "fma_chain_reference",
    "fma_threads",
    "intensity_sweep_fp32",
    "read_fp32",
    "stream_launch",
    "threads_launch",
]


# Streaming probes (read, copy, intensity sweep).
STREAM_BLOCK = 256
STREAM_ILP = 8  # independent loads in flight per thread
STREAM_BLOCKS_PER_SM = 4  # 1024 resident threads/SM: fits every arch from sm_70 to sm_120

# FMA chains.
FMA_BLOCK = 256
FMA_ACC = 8  # independent accumulators per thread
FMA_INNER = 32  # unrolled rounds per loop trip: FMA_ACC * FMA_INNER FMAs per trip
FMA_PER_ITER = FMA_ACC * FMA_INNER

SWEEP_UNROLL = 8  # unrolled chain steps per trip of the sweep's k loop


def _make_read(acc_type):
    ilp = STREAM_ILP

    @cuda.jit
    def read(src, out):
        n = src.shape[0]
        gid = cuda.grid(1)
        stride = cuda.gridsize(1)
        s = cuda.local.array(ilp, acc_type)
        for u in range(ilp):
            s[u] = acc_type(0.0)
        i = gid
        while i + (ilp - 1) * stride < n:
            for u in range(ilp):
                s[u] += src[uint64(i + u * stride)]
            i += ilp * stride
        while i < n:
            s[0] += src[uint64(i)]
            i += stride
        total = acc_type(0.0)
        for u in range(ilp):
            total += s[u]
        offset = 16
        while offset > 0:
            total += cuda.shfl_down_sync(FULL_MASK, total, offset)
            offset //= 2
        if cuda.threadIdx.x % 32 == 0:
            cuda.atomic.add(out, 0, total)

    return read


read_fp32 = _make_read(float32)
read_fp32.__doc__ = """Streaming read ``read_fp32(src, out)``: ``out[0] += sum(src)``.

``src`` fp32 [n], ``out`` fp32 [>= 1] (accumulated into, not overwritten: set it first).
Grid-stride, STREAM_ILP independent loads in flight per thread, per-thread sums reduced per warp
with shuffles and added with one ``atomic.add`` per warp, so the loads cannot be dropped.
"""


def _make_copy():
    ilp = STREAM_ILP

    @cuda.jit
    def copy(src, dst):
        n = src.shape[0]
        gid = cuda.grid(1)
        stride = cuda.gridsize(1)
        v = cuda.local.array(ilp, float32)
        i = gid
        while i + (ilp - 1) * stride < n:
            for u in range(ilp):
                v[u] = src[uint64(i + u * stride)]
            for u in range(ilp):
                dst[uint64(i + u * stride)] = v[u]
            i += ilp * stride
        while i < n:
            dst[uint64(i)] = src[uint64(i)]
            i += stride

    return copy


copy_fp32 = _make_copy()
copy_fp32.__doc__ = """Streaming copy ``copy_fp32(src, dst)``: ``dst[i] = src[i]``, fp32 [n] each.

Grid-stride, STREAM_ILP loads issued before the matching stores.
"""


def _make_fma_chain(acc_type):
    inner = FMA_INNER

    @cuda.jit
    def fma_chain(out, iters, a, b, store):
        threads = out.shape[0]
        gid = cuda.grid(1)
        if gid >= threads:
            return
        av = acc_type(a)
        bv = acc_type(b)
        g = acc_type(gid % 64)
        x0 = g
        x1 = g + acc_type(1.0)
        x2 = g + acc_type(2.0)
        x3 = g + acc_type(3.0)
        x4 = g + acc_type(4.0)
        x5 = g + acc_type(5.0)
        x6 = g + acc_type(6.0)
        x7 = g + acc_type(7.0)
        for _ in range(iters):
            for _u in range(inner):
                x0 = cuda.fma(x0, av, bv)
                x1 = cuda.fma(x1, av, bv)
                x2 = cuda.fma(x2, av, bv)
                x3 = cuda.fma(x3, av, bv)
                x4 = cuda.fma(x4, av, bv)
                x5 = cuda.fma(x5, av, bv)
                x6 = cuda.fma(x6, av, bv)
                x7 = cuda.fma(x7, av, bv)
        total = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
        if store != 0:
            out[gid] = total

    return fma_chain


fma_chain_fp32 = _make_fma_chain(float32)
fma_chain_fp64 = _make_fma_chain(float64)
_FMA_DOC = """FMA-chain peak probe ``{name}(out, iters, a, b, store)``.

``out`` {dt} [threads] (one thread per element; the launch may round the grid up, extra
threads return at once); ``iters`` int64 >= 0; ``a``, ``b`` scalars (cast to {dt}); ``store``
int (nonzero: thread t writes out[t]; zero: no store, the result stays live because the flag is
only known at run time). Each thread runs FMA_ACC = 8 independent chains
``x <- fma(x, a, b)`` of length ``iters * FMA_INNER`` from ``x_j = (t % 64) + j``, then stores
the sum of the 8 chains: ``2 * FMA_PER_ITER * iters`` FLOPs per thread.
"""
fma_chain_fp32.__doc__ = _FMA_DOC.format(name="fma_chain_fp32", dt="fp32")
fma_chain_fp64.__doc__ = _FMA_DOC.format(name="fma_chain_fp64", dt="fp64")


def _make_sweep():
    ilp = STREAM_ILP
    unroll = SWEEP_UNROLL

    @cuda.jit
    def sweep(x, y, k, a, b):
        n = x.shape[0]
        gid = cuda.grid(1)
        stride = cuda.gridsize(1)
        av = float32(a)
        bv = float32(b)
        v = cuda.local.array(ilp, float32)
        i = gid
        while i + (ilp - 1) * stride < n:
            for u in range(ilp):
                v[u] = x[uint64(i + u * stride)]
            for _ in range(k // unroll):
                for _r in range(unroll):
                    for u in range(ilp):
                        v[u] = cuda.fma(v[u], av, bv)
            for _ in range(k % unroll):
                for u in range(ilp):
                    v[u] = cuda.fma(v[u], av, bv)
            for u in range(ilp):
                y[uint64(i + u * stride)] = v[u]
            i += ilp * stride
        while i < n:
            t = float32(x[i])
            for _ in range(k):
                t = cuda.fma(t, av, bv)
            y[i] = t
            i += stride

    return sweep


intensity_sweep_fp32 = _make_sweep()
intensity_sweep_fp32.__doc__ = """Intensity sweep ``intensity_sweep_fp32(x, y, k, a, b)``.

``x``, ``y`` fp32 [n]; ``k`` int64 >= 0 FMAs per element; ``a``, ``b`` scalars (cast to fp32).
``y[i] = f^k(x[i])`` with ``f(v) = fma(v, a, b)``: 8 bytes and ``2k`` FLOPs per element, so the
arithmetic intensity is ``k / 4`` FLOP/byte. Grid-stride, STREAM_ILP elements in flight per
thread, the k loop unrolled by SWEEP_UNROLL.
"""


def stream_launch(n: int, sm_count: int) -> Launch:
    """Launch geometry of the grid-stride probes (read, copy, intensity sweep) over ``n`` items.

    block = STREAM_BLOCK threads; grid = min(ceil(n / (block * STREAM_ILP)),
    sm_count * STREAM_BLOCKS_PER_SM), at least 1: one resident wave of 1024 threads per SM at
    most, fewer blocks when n is too small to give every thread STREAM_ILP items.
    Raises ValueError for n < 1 or sm_count < 1.
    Example: ``stream_launch(1 << 28, 132) == ((528, 1, 1), (256, 1, 1))``.
    """
    n, sm = positive_sizes({"n": n, "sm_count": sm_count}, "n", "sm_count")
    grid = max(1, min(cdiv(n, STREAM_BLOCK * STREAM_ILP), sm * STREAM_BLOCKS_PER_SM))
    return (grid, 1, 1), (STREAM_BLOCK, 1, 1)


def threads_launch(threads: int) -> Launch:
    """Launch geometry of the FMA chains: ceil(threads / FMA_BLOCK) blocks of FMA_BLOCK.

    Raises ValueError for threads < 1.
    Example: ``threads_launch(1000) == ((4, 1, 1), (256, 1, 1))``.
    """
    (threads,) = positive_sizes({"threads": threads}, "threads")
    return (cdiv(threads, FMA_BLOCK), 1, 1), (FMA_BLOCK, 1, 1)


def fma_threads(sm_count: int, threads_per_sm: int = 2048) -> int:
    """A thread count that fills every SM: ``sm_count * threads_per_sm`` (host's choice).

    Example: ``fma_threads(132) == 270336``.
    """
    (sm,) = positive_sizes({"sm_count": sm_count}, "sm_count")
    return sm * threads_per_sm


def fma_chain_closed_form(x0: np.ndarray | float, a: float, b: float, steps: int) -> np.ndarray:
    """Value after ``steps`` applications of ``x <- a*x + b`` from ``x0``, in float64.

    ``a^s x0 + b (a^s - 1) / (a - 1)``, or ``x0 + s b`` when ``a == 1``. Exact in fp32 too when
    a == 1 and x0, b and the result are small multiples of a power of two (what the tests use).
    Example: ``fma_chain_closed_form(1.0, 1.0, 0.5, 4) == 3.0``.
    """
    x0 = np.asarray(x0, dtype=np.float64)
    a, b = float(a), float(b)
    if a == 1.0:
        return x0 + steps * b
    p = a**steps
    return p * x0 + b * (p - 1.0) / (a - 1.0)


def fma_chain_reference(threads: int, iters: int, a: float, b: float) -> np.ndarray:
    """Expected ``out`` of the FMA chains: per thread t, sum over j < 8 of the chain from t%64+j.

    Example: ``fma_chain_reference(2, 1, 1.0, 0.5)`` -> ``[156., 164.]`` (0..7 + 8*32*0.5).
    """
    g = (np.arange(threads) % 64).astype(np.float64)
    steps = iters * FMA_INNER
    return sum(fma_chain_closed_form(g + j, a, b, steps) for j in range(FMA_ACC))
