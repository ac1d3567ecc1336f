"""Numba-CUDA device code: GEMV, tiled GEMM and roofline probe kernels.

Device code only: ``numba.cuda.jit`` kernels, their numpy references, exact FLOP/byte models
and launch geometry. Nothing here allocates device memory, times anything or imports roofprof
host modules; ``roofprof.devices`` drives these kernels through :data:`KERNELS`.

Conventions (all kernels)
-------------------------
* Matrices are C-contiguous. ``W``/``B`` is an ``nn.Linear`` weight, row-major ``[N, K]``, so
  every product here is ``out[M, N] = in[M, K] . W[N, K]^T`` with both operands K-contiguous.
* fp16 kernels read fp16, convert each element to fp32 once and accumulate in fp32
  (``cuda.fma``); the result is rounded once, on the store, to the output array's dtype. The
  registry entries use fp16 outputs (what an fp16 ``nn.Linear`` returns); the same kernels accept
  an fp32 output array unchanged.
* Shapes are dicts: ``{"M", "N", "K"}`` for GEMV/GEMM, ``{"n"}`` for read/copy,
  ``{"n", "k"}`` for the intensity sweep, ``{"threads", "iters"}`` for the FMA chains.
* Bytes are the compulsory traffic: every input element read once, every output element
  written once (re-reads served by caches are not counted).
* FLOPs count one FMA as 2 and include only the work the op defines (2MNK for a product,
  2k per element for the sweep, the chains' FMAs); reduction bookkeeping (cross-warp adds,
  combining a thread's accumulators) is left out and named in each model.
* Launch geometry depends only on the shape and the SM count. Every probe and the GEMM are
  correct for any grid (grid-stride or bounds-checked); the GEMV needs exactly the block size
  it was compiled for, so launch ``spec.kernel_for(shape, sm)`` with ``spec.launch(shape, sm)``.

Warp shuffles in the simulator
------------------------------
numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) has no ``cuda.shfl_down_sync``. When the
simulator is active, importing this module adds one to the simulator's fake ``cuda`` module
(only if it is missing), built on a per-warp barrier. It needs every lane of a warp to reach
each shuffle, which all kernels here guarantee: no thread returns before a shuffle.

Example
-------
>>> import numpy as np
>>> from roofprof.kernels import numba_cuda as nk
>>> spec = nk.KERNELS["gemv_fp32"]
>>> shape = {"M": 1, "N": 4096, "K": 4096}
>>> spec.flops(shape), spec.bytes(shape)
(33554432, 67141632)
>>> spec.launch(shape, 132)
((4096, 1, 1), (128, 1, 1))
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda import config as _cuda_config

try:  # numba-cuda >= 0.21 vendors its own type system ("Vendor in types and datamodel", #533)
    from numba.cuda.types import float16, float32, float64, int64, uint64
except ImportError:  # numba-cuda 0.20.x types its kernels with numba.core.types
    from numba.core.types import float16, float32, float64, int64, uint64

Shape = Mapping[str, int]
Launch = tuple[tuple[int, int, int], tuple[int, int, int]]

FULL_MASK = 0xFFFFFFFF
WARP_SIZE = 32

# GEMV: one block per output column n (a row of W); its warps split K.
GEMV_MAX_ROWS = 4  # rows of x (batch rows m) per block; larger M uses grid.y
GEMV_MAX_WARPS = 8  # warps per column (block = 32 * warps threads)
GEMV_UNROLL = 8  # W loads in flight per lane in the main K loop

# Tiled GEMM (production configuration): 16x16 threads, 8x8 outputs per thread.
GEMM_TILE = 16
GEMM_REG = 8
GEMM_BK = 8
GEMM_PAD = 4  # shared-row padding (floats): conflict-free transposed tile stores

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


# --------------------------------------------------------------------------------------------
# Simulator support
# --------------------------------------------------------------------------------------------


_SIM_SHUFFLE_TIMEOUT_S = 120.0


def _sim_shfl_down_sync(self, mask, value, delta):
    """Simulator ``shfl_down_sync``: lane l gets lane l+delta's value (its own past the warp).

    Each warp meets at its own ``threading.Barrier``, so every live lane of the warp must make
    the same sequence of calls (true for every kernel in this module: no lane returns or
    branches around a shuffle). Values are posted under a per-thread call counter, so a fast
    lane's next shuffle cannot overwrite a value a slow lane has yet to read. ``mask`` is
    ignored. A lane missing from a shuffle breaks the barrier after a timeout (an error, not a
    hang).
    """
    thread = threading.current_thread()
    manager = thread._manager
    state = manager.__dict__.setdefault("_roofprof_shfl", {})
    tid = thread.thread_id
    warp = tid // WARP_SIZE
    barrier = state.get(("barrier", warp))
    if barrier is None:
        block = math.prod(manager._block_dim)
        parties = min(WARP_SIZE, block - warp * WARP_SIZE)
        barrier = state.setdefault(("barrier", warp), threading.Barrier(parties))
    call = getattr(thread, "_roofprof_shfl_calls", 0)
    thread._roofprof_shfl_calls = call + 1
    state[call, tid] = value
    barrier.wait(_SIM_SHUFFLE_TIMEOUT_S)
    # Every lane of the warp has posted this call, so all have read the previous one.
    state.pop((call - 1, tid), None)
    src = tid + delta if (tid % WARP_SIZE) + delta < WARP_SIZE else tid
    return state.get((call, src), value)


def simulator_active() -> bool:
    """True when numba-cuda runs kernels on the CPU simulator (``NUMBA_ENABLE_CUDASIM=1``).

    Example: ``if simulator_active(): shapes = small_shapes``.
    """
    return bool(_cuda_config.ENABLE_CUDASIM)


def _install_simulator_shuffle() -> None:
    if not simulator_active():
        return
    from numba.cuda.simulator import kernelapi

    if not hasattr(kernelapi.FakeCUDAModule, "shfl_down_sync"):
        kernelapi.FakeCUDAModule.shfl_down_sync = _sim_shfl_down_sync


_install_simulator_shuffle()


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
# Warp reductions are written inline in each kernel (``offset = 16, 8, 4, 2, 1`` with
# ``cuda.shfl_down_sync``) rather than as a ``cuda.jit(device=True)`` function: compiling a
# kernel that calls a device dispatcher asks the driver for the current device, which makes
# ``cuda.compile_ptx`` fail on machines without a GPU.


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _positive(shape: Shape, *keys: str, zero_ok: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The integer sizes ``shape[key]`` for ``keys``: >= 1 (>= 0 for keys in ``zero_ok``)."""
    vals = []
    for key in keys:
        if key not in shape:
            raise ValueError(f"shape {dict(shape)} lacks {key!r}; needs {', '.join(keys)}")
        val = int(shape[key])
        low = 0 if key in zero_ok else 1
        if val < low:
            raise ValueError(f"shape[{key!r}] = {val}; must be >= {low}")
        vals.append(val)
    return tuple(vals)


# --------------------------------------------------------------------------------------------
# GEMV: y[M, N] = x[M, K] . W[N, K]^T, M small
# --------------------------------------------------------------------------------------------


def make_gemv(rows: int = GEMV_MAX_ROWS, warps: int = 2):
    """Build a GEMV kernel ``kernel(x, w, y)`` for ``rows`` rows of x per block and ``warps``
    warps per output column.

    ``x`` [M, K], ``w`` [N, K] (fp32 or fp16), ``y`` [M, N] (fp32 or fp16), all C-contiguous;
    ``y[m, n] = sum_k x[m, k] * w[n, k]`` accumulated in fp32, rounded once on the store.
    Block ``n`` (grid.x = N) computes column n for rows ``m0 .. m0+rows-1`` (grid.y = ceil(M /
    rows); the last chunk re-reads clamped rows and skips their stores). Its ``warps`` warps
    split K in interleaved 32-element chunks: warp w, lane l reads ``k = 32*w + l + j*32*warps``,
    so each load instruction of the block covers ``32*warps`` consecutive elements of the W row,
    with ``GEMV_UNROLL`` W loads in flight per lane before their FMAs. Each warp reduces its
    partial sums with ``shfl_down_sync``, lane 0 posts them to shared memory, and thread 0 adds
    the ``warps`` partials in a fixed order (deterministic) and stores. No thread returns early.
    ``rows`` and ``warps`` are compile-time constants (no predicated dead rows, immediate load
    offsets); the block must be launched with exactly ``32 * warps`` threads (see
    :func:`gemv_launch`). Kernels are cached: use :func:`gemv_kernel`.

    Raises ValueError for rows outside 1..GEMV_MAX_ROWS or warps outside 1..GEMV_MAX_WARPS.
    Example: ``k = make_gemv(1, 2); k[(n, 1, 1), (64, 1, 1)](x, w, y)``.
    """
    if not 1 <= rows <= GEMV_MAX_ROWS:
        raise ValueError(f"rows={rows}; must be in 1..{GEMV_MAX_ROWS}")
    if not 1 <= warps <= GEMV_MAX_WARPS:
        raise ValueError(f"warps={warps}; must be in 1..{GEMV_MAX_WARPS}")
    step = WARP_SIZE * warps
    unroll = GEMV_UNROLL

    @cuda.jit
    def gemv(x, w, y):
        m_rows = x.shape[0]
        k_len = x.shape[1]
        n = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        m0 = cuda.blockIdx.y * rows
        part = cuda.shared.array((GEMV_MAX_WARPS, rows), float32)
        ridx = cuda.local.array(rows, uint64)
        acc = cuda.local.array(rows, float32)
        wv = cuda.local.array(unroll, float32)
        for r in range(rows):
            ridx[r] = uint64(min(m0 + r, m_rows - 1))
            acc[r] = float32(0.0)
        nr = uint64(n)
        k = warp * 32 + lane
        while k + (unroll - 1) * step < k_len:
            for u in range(unroll):
                wv[u] = float32(w[nr, uint64(k + u * step)])
            for r in range(rows):
                a = acc[r]
                for u in range(unroll):
                    a = cuda.fma(float32(x[ridx[r], uint64(k + u * step)]), wv[u], a)
                acc[r] = a
            k += unroll * step
        while k < k_len:
            wk = float32(w[nr, uint64(k)])
            for r in range(rows):
                acc[r] = cuda.fma(float32(x[ridx[r], uint64(k)]), wk, acc[r])
            k += step
        for r in range(rows):
            v = acc[r]
            offset = 16
            while offset > 0:
                v += cuda.shfl_down_sync(FULL_MASK, v, offset)
                offset //= 2
            if lane == 0:
                part[warp, r] = v
        cuda.syncthreads()
        if tid == 0:
            for r in range(rows):
                if m0 + r < m_rows:
                    total = part[0, r]
                    for j in range(1, warps):
                        total += part[j, r]
                    y[m0 + r, n] = total

    return gemv


@functools.cache
def gemv_kernel(rows: int, warps: int):
    """The cached GEMV kernel for (rows, warps); see :func:`make_gemv` (same errors).

    Example: ``gemv_kernel(*gemv_plan(1, 4096, 4096, 132))``.
    """
    return make_gemv(rows, warps)


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (int(v) - 1).bit_length())


def gemv_plan(m: int, n: int, k: int, sm_count: int, warps_per_sm: int = 64) -> tuple[int, int]:
    """Compile-time shape of the GEMV for ``x[m, k] . W[n, k]^T``: ``(rows, warps)``.

    rows = min(m, GEMV_MAX_ROWS). warps per column = the power of two that gives at least
    ``sm_count * warps_per_sm`` resident warps over the n blocks (enough loads in flight to
    cover DRAM latency on a big GPU), clamped to 2..GEMV_MAX_WARPS (2: a 32-blocks-per-SM
    limit would otherwise cap occupancy at 32 warps) and to what K can feed (about
    ``32 * GEMV_UNROLL`` elements per warp). Raises ValueError for sizes < 1.
    Example: ``gemv_plan(1, 4096, 4096, 132) == (1, 4)``.
    """
    m, n, k, sm = _positive({"M": m, "N": n, "K": k, "sm": sm_count}, "M", "N", "K", "sm")
    warps = _pow2_at_least(_cdiv(sm * warps_per_sm, n))
    warps = min(warps, _pow2_at_least(_cdiv(k, WARP_SIZE * GEMV_UNROLL)), GEMV_MAX_WARPS)
    return min(m, GEMV_MAX_ROWS), max(2, warps)


def gemv_launch(m: int, n: int, k: int, sm_count: int, warps_per_sm: int = 64) -> Launch:
    """Launch geometry ``(grid, block)`` for :func:`gemv_kernel` ``(*gemv_plan(...))``.

    grid = (n, ceil(m / rows), 1), block = (32 * warps, 1, 1) with (rows, warps) from
    :func:`gemv_plan`. Raises ValueError for sizes < 1 or more than 65535 row chunks.
    Example: ``gemv_launch(1, 4096, 4096, 132) == ((4096, 1, 1), (128, 1, 1))``.
    """
    rows, warps = gemv_plan(m, n, k, sm_count, warps_per_sm)
    grid_y = _cdiv(m, rows)
    if grid_y > 65535:
        raise ValueError(f"M={m} too large for the GEMV (max {65535 * rows}); use the GEMM")
    return (n, grid_y, 1), (WARP_SIZE * warps, 1, 1)


# --------------------------------------------------------------------------------------------
# Tiled GEMM: C[M, N] = A[M, K] . B[N, K]^T
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """Tiling of the shared-memory GEMM.

    ``tile`` x ``tile`` threads per block, each computing ``reg`` x ``reg`` outputs (rows
    ``ty + tile*i``, columns ``tx + tile*j``), so a block covers ``block_m = tile * reg`` square;
    ``bk`` is the K depth of one shared-memory stage; ``pad`` floats pad each shared row.
    """

    tile: int = GEMM_TILE
    reg: int = GEMM_REG
    bk: int = GEMM_BK
    pad: int = GEMM_PAD

    @property
    def block_m(self) -> int:
        """Rows (= columns) of C covered by one block."""
        return self.tile * self.reg

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.tile * self.tile

    @property
    def shared_bytes(self) -> int:
        """Static shared memory per block in bytes (two fp32 tiles of bk x (block_m + pad))."""
        return 2 * self.bk * (self.block_m + self.pad) * 4


GEMM_CONFIG = GemmConfig()


def make_gemm_tiled(config: GemmConfig = GEMM_CONFIG):
    """Build the shared-memory, register-blocked GEMM kernel ``kernel(a, b, c)``.

    ``a`` [M, K], ``b`` [N, K] (fp32 or fp16), ``c`` [M, N] (fp32 or fp16), all C-contiguous;
    ``c = a . b^T`` accumulated in fp32. Each K stage stages a ``block_m x bk`` tile of A and of
    B, transposed (k-major) and converted to fp32, in shared memory (zero-filled past the
    edges), then every thread runs ``reg*reg`` FMAs per k out of ``2*reg`` shared loads held
    in registers. Launch with :func:`gemm_launch`.

    Raises ValueError when ``tile*tile`` threads exceed 1024 or do not divide the tile loads.
    Example: ``k = make_gemm_tiled(GemmConfig(8, 2, 16)); k[gemm_launch(m, n, k_, cfg)](a, b, c)``.
    """
    cfg = config
    if cfg.threads > 1024 or min(cfg.tile, cfg.reg, cfg.bk) < 1 or cfg.pad < 0:
        raise ValueError(f"{cfg}: need 1 <= tile*tile <= 1024 and positive reg, bk")
    if (cfg.block_m * cfg.bk) % cfg.threads:
        raise ValueError(f"{cfg}: threads ({cfg.threads}) must divide block_m*bk")
    tile, reg, bk = cfg.tile, cfg.reg, cfg.bk
    bm = cfg.block_m
    bmp = bm + cfg.pad
    nthreads = cfg.threads
    loads = bm * bk // nthreads

    @cuda.jit
    def gemm(a, b, c):
        m_rows = a.shape[0]
        k_len = a.shape[1]
        n_cols = b.shape[0]
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * tile + tx
        m_base = cuda.blockIdx.y * bm
        n_base = cuda.blockIdx.x * bm
        sa = cuda.shared.array((bk, bmp), float32)
        sb = cuda.shared.array((bk, bmp), float32)
        acc = cuda.local.array((reg, reg), float32)
        ra = cuda.local.array(reg, float32)
        rb = cuda.local.array(reg, float32)
        for i in range(reg):
            for j in range(reg):
                acc[i, j] = float32(0.0)
        full_mn = m_base + bm <= m_rows and n_base + bm <= n_cols
        for kt in range((k_len + bk - 1) // bk):
            k0 = kt * bk
            if full_mn and k0 + bk <= k_len:
                # interior tile (block-uniform branch): no bounds checks
                for u in range(loads):
                    e = tid + u * nthreads
                    row = e // bk
                    kk = e % bk
                    gk = uint64(k0 + kk)
                    sa[kk, row] = float32(a[uint64(m_base + row), gk])
                    sb[kk, row] = float32(b[uint64(n_base + row), gk])
            else:
                for u in range(loads):
                    e = tid + u * nthreads
                    row = e // bk
                    kk = e % bk
                    gk = k0 + kk
                    gm = m_base + row
                    gn = n_base + row
                    if gm < m_rows and gk < k_len:
                        sa[kk, row] = float32(a[uint64(gm), uint64(gk)])
                    else:
                        sa[kk, row] = float32(0.0)
                    if gn < n_cols and gk < k_len:
                        sb[kk, row] = float32(b[uint64(gn), uint64(gk)])
                    else:
                        sb[kk, row] = float32(0.0)
            cuda.syncthreads()
            for kk in range(bk):
                for i in range(reg):
                    ra[i] = sa[kk, ty + tile * i]
                for j in range(reg):
                    rb[j] = sb[kk, tx + tile * j]
                for i in range(reg):
                    for j in range(reg):
                        acc[i, j] = cuda.fma(ra[i], rb[j], acc[i, j])
            cuda.syncthreads()
        for i in range(reg):
            gm = m_base + ty + tile * i
            if gm < m_rows:
                for j in range(reg):
                    gn = n_base + tx + tile * j
                    if gn < n_cols:
                        c[gm, gn] = acc[i, j]

    return gemm


def gemm_launch(m: int, n: int, k: int, config: GemmConfig = GEMM_CONFIG) -> Launch:
    """Launch geometry ``(grid, block)`` of the tiled GEMM for ``A[m, k] . B[n, k]^T``.

    grid = (ceil(n / block_m), ceil(m / block_m), 1), block = (tile, tile, 1); ``k`` does not
    change the geometry. Raises ValueError for sizes < 1 or grid.y > 65535.
    Example: ``gemm_launch(4096, 4096, 4096) == ((32, 32, 1), (16, 16, 1))``.
    """
    m, n, k = _positive({"M": m, "N": n, "K": k}, "M", "N", "K")
    grid_y = _cdiv(m, config.block_m)
    if grid_y > 65535:
        raise ValueError(f"M={m} too large for one launch (max {65535 * config.block_m})")
    return (_cdiv(n, config.block_m), grid_y, 1), (config.tile, config.tile, 1)


gemm_tiled_fp32 = make_gemm_tiled()
gemm_tiled_fp16 = make_gemm_tiled()


# --------------------------------------------------------------------------------------------
# Probes
# --------------------------------------------------------------------------------------------


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
    n, sm = _positive({"n": n, "sm_count": sm_count}, "n", "sm_count")
    grid = max(1, min(_cdiv(n, STREAM_BLOCK * STREAM_ILP), sm * STREAM_BLOCKS_PER_SM))
    return (grid, 1, 1), (STREAM_BLOCK, 1, 1)


def threads_launch(threads: int) -> Launch:
    """Launch geometry of the FMA chains: ceil(threads / FMA_BLOCK) blocks of FMA_BLOCK.

    Raises ValueError for threads < 1. Example: ``threads_launch(1000) == ((4, 1, 1), (256, 1, 1))``.
    """
    (threads,) = _positive({"threads": threads}, "threads")
    return (_cdiv(threads, FMA_BLOCK), 1, 1), (FMA_BLOCK, 1, 1)


def fma_threads(sm_count: int, threads_per_sm: int = 2048) -> int:
    """A thread count that fills every SM: ``sm_count * threads_per_sm`` (host's choice).

    Example: ``fma_threads(132) == 270336``.
    """
    (sm,) = _positive({"sm_count": sm_count}, "sm_count")
    return sm * threads_per_sm


# --------------------------------------------------------------------------------------------
# References (numpy, float64 accumulation)
# --------------------------------------------------------------------------------------------


def matmul_nt_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[M, K] . b[N, K]^T`` in float64 (the GEMV and GEMM reference).

    Example: ``matmul_nt_reference(np.ones((1, 3)), np.ones((2, 3))) -> [[3., 3.]]``.
    """
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64).T


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


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

_NP = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}
_SIZE = {"fp16": 2, "fp32": 4, "fp64": 8}
_EPS = {"fp16": 2.0**-11, "fp32": 2.0**-24, "fp64": 2.0**-53}


@dataclass(frozen=True)
class KernelSpec:
    """What the host needs to run, check and account one kernel.

    Fields:
      name, kernel (the ``cuda.jit`` dispatcher; for the GEMV the decode variant, the one
      the PTX tests compile: launch :meth:`kernel_for` instead), op ("gemv" | "gemm" | "probe"),
      probe ("" | "read" | "copy" | "fma" | "sweep"), in_dtype / out_dtype / acc_dtype
      (roofprof dtype strings), args (kernel argument names in call order; "out" is the output
      array), shape_keys, make_inputs(shape, rng) -> {arg: array or scalar} for every arg but
      "out" (fresh random, never zeros), out_shape(shape), reference(inputs, shape) -> float64
      expected output, accumulates (True: the kernel adds into "out", so expected =
      initial out + reference; False: it overwrites every element, so poison it with NaN),
      tolerance(shape) -> (rtol, atol) for ``|out - ref| <= atol + rtol * |ref|``,
      flops(shape), bytes(shape) (ints, FLOP and bytes), launch(shape, sm_count) ->
      (grid, block) 3-tuples, signature (numba argument types of ``kernel`` for
      ``cuda.compile_ptx``), select(shape, sm_count) -> kernel (None: always ``kernel``).

    Example::

        spec = KERNELS["gemm_tiled_fp16"]; shape = {"M": 64, "N": 64, "K": 64}
        inputs = spec.make_inputs(shape, np.random.default_rng(0))
        out = np.full(spec.out_shape(shape), np.nan, spec.out_np_dtype)
        grid, block = spec.launch(shape, sm_count)
        spec.kernel_for(shape, sm_count)[grid, block](*spec.call_args(inputs, out))
    """

    name: str
    kernel: Any
    op: str
    probe: str
    in_dtype: str
    out_dtype: str
    acc_dtype: str
    args: tuple[str, ...]
    shape_keys: tuple[str, ...]
    make_inputs: Callable[[Shape, np.random.Generator], dict[str, Any]]
    out_shape: Callable[[Shape], tuple[int, ...]]
    reference: Callable[[Mapping[str, Any], Shape], np.ndarray]
    accumulates: bool
    tolerance: Callable[[Shape], tuple[float, float]]
    flops: Callable[[Shape], int]
    bytes: Callable[[Shape], int]
    launch: Callable[[Shape, int], Launch]
    signature: tuple[Any, ...]
    select: Callable[[Shape, int], Any] | None = None

    def kernel_for(self, shape: Shape, sm_count: int) -> Any:
        """The kernel to launch for ``shape`` on a GPU with ``sm_count`` SMs.

        Always pair it with ``launch(shape, sm_count)``: the GEMV's block size is compiled in.
        Raises ValueError for an invalid shape. Example: ``spec.kernel_for(shape, 132)[g, b](...)``.
        """
        return self.kernel if self.select is None else self.select(shape, sm_count)

    @property
    def out_np_dtype(self) -> np.dtype:
        """numpy dtype of the output array."""
        return np.dtype(_NP[self.out_dtype])

    def call_args(self, inputs: Mapping[str, Any], out: Any) -> tuple[Any, ...]:
        """Kernel arguments in order: ``inputs`` by name plus ``out`` for the output array.

        Raises KeyError naming a missing argument. Example: ``kernel[g, b](*spec.call_args(i, o))``.
        """
        vals = {**inputs, "out": out}
        missing = [a for a in self.args if a not in vals]
        if missing:
            raise KeyError(f"{self.name}: missing kernel arguments {missing}")
        return tuple(vals[a] for a in self.args)


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Uniform magnitudes in [0.25, 1] with random signs, cast to ``dtype``: never zero."""
    mag = rng.uniform(0.25, 1.0, size=shape)
    sign = rng.choice(np.array([-1.0, 1.0]), size=shape)
    return (mag * sign).astype(_NP[dtype])


def _matmul_spec(name, op, dt, kernel, launch, select=None):
    def make_inputs(shape, rng):
        m, n, k = _positive(shape, "M", "N", "K")
        return {"x": _rand(rng, (m, k), dt), "w": _rand(rng, (n, k), dt)}

    def tolerance(shape):
        (k,) = _positive(shape, "K")
        # fp32 accumulation over K terms of magnitude <= 1, plus one rounding to the output.
        return 2.0 * _EPS[dt], k * 4.0 * _EPS["fp32"] + (2.0**-14 if dt == "fp16" else 0.0)

    def bytes_(shape):
        m, n, k = _positive(shape, "M", "N", "K")
        return (m * k + n * k) * _SIZE[dt] + m * n * _SIZE[dt]

    def flops(shape):
        # 2MNK; the GEMV's (warps - 1) cross-warp adds per output are not counted
        m, n, k = _positive(shape, "M", "N", "K")
        return 2 * m * n * k

    arr_t = float16 if dt == "fp16" else float32
    return KernelSpec(
        name=name,
        kernel=kernel,
        op=op,
        probe="",
        in_dtype=dt,
        out_dtype=dt,
        acc_dtype="fp32",
        args=("x", "w", "out"),
        shape_keys=("M", "N", "K"),
        make_inputs=make_inputs,
        out_shape=lambda s: _positive(s, "M", "N"),
        reference=lambda inp, s: matmul_nt_reference(inp["x"], inp["w"]),
        accumulates=False,
        tolerance=tolerance,
        flops=flops,
        bytes=bytes_,
        launch=lambda s, sm: launch(*_positive(s, "M", "N", "K"), sm),
        signature=(arr_t[:, ::1], arr_t[:, ::1], arr_t[:, ::1]),
        select=select,
    )


_GEMV_DECODE = gemv_kernel(1, 4)


def _gemv_select(shape: Shape, sm_count: int):
    return gemv_kernel(*gemv_plan(*_positive(shape, "M", "N", "K"), sm_count))


def _gemm_launch_sm(m: int, n: int, k: int, sm_count: int) -> Launch:
    return gemm_launch(m, n, k)


def _read_spec():
    def make_inputs(shape, rng):
        (n,) = _positive(shape, "n")
        # Small integers: every partial sum is exact in fp32 while n * 8 < 2**24.
        return {"src": rng.integers(1, 9, size=n).astype(np.float32)}

    return KernelSpec(
        name="read_fp32",
        kernel=read_fp32,
        op="probe",
        probe="read",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("src", "out"),
        shape_keys=("n",),
        make_inputs=make_inputs,
        out_shape=lambda s: (1,),
        reference=lambda inp, s: np.array([np.sum(inp["src"], dtype=np.float64)]),
        accumulates=True,
        # exact while every partial sum is an integer below 2**24; beyond, fp32 rounding of
        # the per-warp atomic adds
        tolerance=lambda s: (0.0, 0.0) if _positive(s, "n")[0] * 8 < 2**24 else (2.0**-10, 0.0),
        # one add per element; the ~13 adds per thread that combine the partial sums are not
        # counted (grid-dependent, < 0.1% at probe sizes)
        flops=lambda s: _positive(s, "n")[0],
        bytes=lambda s: _positive(s, "n")[0] * 4 + 4,
        launch=lambda s, sm: stream_launch(_positive(s, "n")[0], sm),
        signature=(float32[::1], float32[::1]),
    )


def _copy_spec():
    def make_inputs(shape, rng):
        (n,) = _positive(shape, "n")
        return {"src": _rand(rng, (n,), "fp32")}

    return KernelSpec(
        name="copy_fp32",
        kernel=copy_fp32,
        op="probe",
        probe="copy",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("src", "out"),
        shape_keys=("n",),
        make_inputs=make_inputs,
        out_shape=lambda s: _positive(s, "n"),
        reference=lambda inp, s: inp["src"].astype(np.float64),
        accumulates=False,
        tolerance=lambda s: (0.0, 0.0),
        flops=lambda s: 0,
        bytes=lambda s: 2 * 4 * _positive(s, "n")[0],
        launch=lambda s, sm: stream_launch(_positive(s, "n")[0], sm),
        signature=(float32[::1], float32[::1]),
    )


def _fma_spec(dt, kernel):
    np_t = _NP[dt]

    def _sizes(shape):
        return _positive(shape, "threads", "iters", zero_ok=("iters",))

    def make_inputs(shape, rng):
        threads, iters = _sizes(shape)
        # a == 1 and b a multiple of 1/8: every chain value is exact (a closed form).
        return {
            "iters": np.int64(iters),
            "a": np_t(1.0),
            "b": np_t(rng.integers(1, 8) / 8.0),
            "store": np.int64(1),
        }

    def reference(inp, shape):
        threads, iters = _sizes(shape)
        return fma_chain_reference(threads, int(inp["iters"]), float(inp["a"]), float(inp["b"]))

    def tolerance(shape):
        threads, iters = _sizes(shape)
        # Multiples of 1/8 are exact below 2**(mantissa bits - 3); the stored sum of the 8
        # chains is at most 8 * (63 + 7 + steps * 7/8).
        exact_limit = 2.0 ** (21 if dt == "fp32" else 50)
        exact = 8 * (70 + iters * FMA_INNER) < exact_limit
        return (0.0, 0.0) if exact else (_EPS[dt] * 8, 0.0)

    arr_t = float32 if dt == "fp32" else float64
    return KernelSpec(
        name=f"fma_chain_{dt}",
        kernel=kernel,
        op="probe",
        probe="fma",
        in_dtype=dt,
        out_dtype=dt,
        acc_dtype=dt,
        args=("out", "iters", "a", "b", "store"),
        shape_keys=("threads", "iters"),
        make_inputs=make_inputs,
        out_shape=lambda s: _positive(s, "threads"),
        reference=reference,
        accumulates=False,
        tolerance=tolerance,
        # the chains' FMAs; the 7 adds per thread that combine them are not counted
        flops=lambda s: 2 * FMA_PER_ITER * math.prod(_sizes(s)),
        # the per-thread result store (store != 0); 0 bytes when launched with store == 0
        bytes=lambda s: _positive(s, "threads")[0] * _SIZE[dt],
        launch=lambda s, sm: threads_launch(_positive(s, "threads")[0]),
        signature=(arr_t[::1], int64, arr_t, arr_t, int64),
    )


def _sweep_spec():
    def _nk(shape):
        return _positive(shape, "n", "k", zero_ok=("k",))

    def make_inputs(shape, rng):
        n, k = _nk(shape)
        # x: small multiples of 1/8, a == 1, b a multiple of 1/8: y = x + k*b exactly.
        return {
            "x": (rng.integers(1, 64, size=n) / 8.0).astype(np.float32),
            "k": np.int64(k),
            "a": np.float32(1.0),
            "b": np.float32(rng.integers(1, 8) / 8.0),
        }

    def reference(inp, shape):
        return fma_chain_closed_form(inp["x"], float(inp["a"]), float(inp["b"]), int(inp["k"]))

    return KernelSpec(
        name="intensity_sweep_fp32",
        kernel=intensity_sweep_fp32,
        op="probe",
        probe="sweep",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("x", "out", "k", "a", "b"),
        shape_keys=("n", "k"),
        make_inputs=make_inputs,
        out_shape=lambda s: (_nk(s)[0],),
        reference=reference,
        accumulates=False,
        tolerance=lambda s: (0.0, 0.0) if _nk(s)[1] < 2**16 else (1e-6, 0.0),
        flops=lambda s: 2 * math.prod(_nk(s)),
        bytes=lambda s: 8 * _nk(s)[0],
        launch=lambda s, sm: stream_launch(_nk(s)[0], sm),
        signature=(float32[::1], float32[::1], int64, float32, float32),
    )


KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        _matmul_spec("gemv_fp32", "gemv", "fp32", _GEMV_DECODE, gemv_launch, _gemv_select),
        _matmul_spec("gemv_fp16", "gemv", "fp16", _GEMV_DECODE, gemv_launch, _gemv_select),
        _matmul_spec("gemm_tiled_fp32", "gemm", "fp32", gemm_tiled_fp32, _gemm_launch_sm),
        _matmul_spec("gemm_tiled_fp16", "gemm", "fp16", gemm_tiled_fp16, _gemm_launch_sm),
        _read_spec(),
        _copy_spec(),
        _fma_spec("fp32", fma_chain_fp32),
        _fma_spec("fp64", fma_chain_fp64),
        _sweep_spec(),
    )
}
"""Every kernel of this module by name; see :class:`KernelSpec` for the fields."""
