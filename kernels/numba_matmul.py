"""Numba-CUDA GEMV and tiled GEMM kernels: ``out[M, N] = in[M, K] . W[N, K]^T``.

:func:`make_gemv` / :func:`gemv_kernel` with :func:`gemv_plan` and :func:`gemv_launch` (small M,
one block per output column, warps splitting K); :func:`make_gemm_tiled` with
:func:`gemm_launch` (shared-memory, register-blocked); :func:`matmul_nt_reference`, their
float64 reference. Sizes below 1 raise ``ValueError``.

>>> gemv_launch(1, 4096, 4096, 132)
((4096, 1, 1), (128, 1, 1))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numba import cuda

from .numba_support import FULL_MASK, WARP_SIZE, Launch, cdiv, float32, positive_sizes, uint64

__all__ = [
    "GEMM_BK",
    "GEMM_CONFIG",
    "GEMM_PAD",
    "GEMM_REG",
    "GEMM_TILE",
    "GEMV_MAX_ROWS",
    "GEMV_MAX_WARPS",
    "GEMV_UNROLL",
    "GemmConfig",
    "gemm_launch",
    "gemm_tiled_fp16",
    "gemm_tiled_fp32",
    "gemv_kernel",
    "gemv_launch",
    "gemv_plan",
    "make_gemm_tiled",
    "make_gemv",
    "matmul_nt_reference",
]


# GEMV: one block per output column n (a row of W); its warps split K.
GEMV_MAX_ROWS = 4  # rows of x (batch rows m) per block; larger M uses grid.y
GEMV_MAX_WARPS = 8  # warps per column (block = 32 * warps threads)
GEMV_UNROLL = 8  # W loads in flight per lane in the main K loop

# Tiled GEMM (production configuration): 16x16 threads, 8x8 outputs per thread.
GEMM_TILE = 16
GEMM_REG = 8
GEMM_BK = 8
GEMM_PAD = 4  # shared-row padding (floats): conflict-free transposed tile stores


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
    m, n, k, sm = positive_sizes({"M": m, "N": n, "K": k, "sm": sm_count}, "M", "N", "K", "sm")
    warps = _pow2_at_least(cdiv(sm * warps_per_sm, n))
    warps = min(warps, _pow2_at_least(cdiv(k, WARP_SIZE * GEMV_UNROLL)), GEMV_MAX_WARPS)
    return min(m, GEMV_MAX_ROWS), max(2, warps)


def gemv_launch(m: int, n: int, k: int, sm_count: int, warps_per_sm: int = 64) -> Launch:
    """Launch geometry ``(grid, block)`` for :func:`gemv_kernel` ``(*gemv_plan(...))``.

    grid = (n, ceil(m / rows), 1), block = (32 * warps, 1, 1) with (rows, warps) from
    :func:`gemv_plan`. Raises ValueError for sizes < 1 or more than 65535 row chunks.
    Example: ``gemv_launch(1, 4096, 4096, 132) == ((4096, 1, 1), (128, 1, 1))``.
    """
    rows, warps = gemv_plan(m, n, k, sm_count, warps_per_sm)
    grid_y = cdiv(m, rows)
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
    m, n, k = positive_sizes({"M": m, "N": n, "K": k}, "M", "N", "K")
    grid_y = cdiv(m, config.block_m)
    if grid_y > 65535:
        raise ValueError(f"M={m} too large for one launch (max {65535 * config.block_m})")
    return (cdiv(n, config.block_m), grid_y, 1), (config.tile, config.tile, 1)


gemm_tiled_fp32 = make_gemm_tiled()
gemm_tiled_fp16 = make_gemm_tiled()


def matmul_nt_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[M, K] . b[N, K]^T`` in float64 (the GEMV and GEMM reference).

    Example: ``matmul_nt_reference(np.ones((1, 3)), np.ones((2, 3))) -> [[3., 3.]]``.
    """
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64).T
