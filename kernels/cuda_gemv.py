"""Host model of ``gemv.cu``: launch plan, split-K heuristic, FLOP/byte models, numpy replay.

:func:`gemv_plan` gives the entry names, grids and workspace of one shape; :func:`gemv_model`
replays the kernel's split-K partition (vector body, scalar tail, lane striding, warp butterfly)
in numpy, so tests check the index arithmetic without a GPU. Errors are ``ValueError``.

>>> gemv_plan(1, 4096, 4096, "bf16", sm_count=132).main.entry
'gemv_bf16_m1'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cuda_launch import DTYPE_BYTES, Launch, cdiv, check_dtype, check_positive
from .cuda_sources import GEMV_DTYPES, GEMV_M_TILES

__all__ = [
    "GEMV_REDUCE_THREADS",
    "GEMV_THREADS",
    "GEMV_UNROLL",
    "GEMV_VEC",
    "GEMV_WARPS_PER_BLOCK",
    "GemvPlan",
    "GemvSplit",
    "gemv_bytes",
    "gemv_chunking",
    "gemv_flops",
    "gemv_lane_elements",
    "gemv_m_tile",
    "gemv_model",
    "gemv_partition",
    "gemv_plan",
    "gemv_reduce_flops",
    "gemv_splits",
    "gemv_vec_ok",
]


GEMV_WARPS_PER_BLOCK = 8
GEMV_THREADS = GEMV_WARPS_PER_BLOCK * 32
GEMV_VEC = 8  # halves per 16-byte vector
GEMV_UNROLL = 4  # 16-byte W vectors in flight per lane
GEMV_REDUCE_THREADS = 256


@dataclass(frozen=True)
class GemvPlan:
    """Everything a host needs to run ``gemv.cu`` for one shape.

    ``main`` is the plain kernel (``splits == 1``) or the split-K kernel; ``reduce`` is the
    split-K reduce launch or None; ``workspace_bytes`` the fp32 workspace ``ws[splits][M][N]``
    to allocate (0 without split-K). ``flops`` and ``bytes`` follow :func:`gemv_flops` and
    :func:`gemv_bytes`.
    """

    M: int
    N: int
    K: int
    dtype: str
    m_tile: int
    splits: int
    k_chunk: int
    ldx: int
    ldw: int
    main: Launch
    reduce: Launch | None
    workspace_bytes: int
    flops: int
    bytes: int


def gemv_m_tile(M: int) -> int:
    """Compile-time row tile MT for M rows: the smallest of 1, 2, 4, 8, 16 that is >= M (16 above).

    M > 16 still runs correctly (the kernel loops over row tiles, re-reading W each time); a GEMM is
    the better kernel there.

    >>> [gemv_m_tile(m) for m in (1, 3, 16, 40)]
    [1, 4, 16, 16]
    """
    check_positive(M=M)
    return next((t for t in GEMV_M_TILES if t >= M), GEMV_M_TILES[-1])


def gemv_vec_ok(ldx: int, ldw: int, x_addr: int = 0, w_addr: int = 0) -> bool:
    """Whether ``gemv.cu`` takes its 16-byte vector path (else every element is scalar).

    True when both row strides are multiples of 8 elements and both base addresses are 16-byte
    aligned (CuPy/torch allocations are 256-byte aligned; views with an offset may not be).
    """
    return (
        (ldx % GEMV_VEC == 0)
        and (ldw % GEMV_VEC == 0)
        and (x_addr % 16 == 0)
        and (w_addr % 16 == 0)
    )


def gemv_splits(
    N: int, K: int, sm_count: int, *, target_blocks_per_sm: int = 2, min_k_per_split: int = 512
) -> tuple[int, int]:
    """Heuristic split-K factor: returns ``(splits, k_chunk)``.

    With ``ceil(N/8)`` blocks at or above ``target_blocks_per_sm * sm_count`` no split is used.
    Otherwise K is split so the grid reaches that target, with at least ``min_k_per_split``
    elements per split. ``k_chunk`` is a multiple of 8 and ``splits = ceil(K / k_chunk)`` (no
    empty split). A heuristic, not a measurement: the host may pass its own ``splits``.

    >>> gemv_splits(4096, 4096, 132)
    (1, 4096)
    >>> gemv_splits(1024, 4096, 132)
    (3, 1368)
    """
    check_positive(N=N, K=K, sm_count=sm_count)
    blocks = cdiv(N, GEMV_WARPS_PER_BLOCK)
    target = target_blocks_per_sm * sm_count
    if blocks >= target:
        return 1, K
    wanted = min(cdiv(target, blocks), max(1, K // min_k_per_split))
    return gemv_chunking(K, wanted)


def gemv_chunking(K: int, splits: int) -> tuple[int, int]:
    """``(splits, k_chunk)`` for a requested split count: k_chunk = ceil(K/splits) rounded up to
    a multiple of 8, and splits recomputed as ceil(K/k_chunk) so no split is empty.

    >>> gemv_chunking(100, 3)
    (3, 40)
    """
    check_positive(K=K, splits=splits)
    if splits == 1:
        return 1, K
    k_chunk = cdiv(cdiv(K, splits), GEMV_VEC) * GEMV_VEC
    return cdiv(K, k_chunk), k_chunk


def gemv_flops(M: int, N: int, K: int) -> int:
    """Algorithmic FLOPs of y = x . W^T: ``2*M*N*K`` (the split-K reduce adds ``splits*M*N``
    more FADDs, see :func:`gemv_reduce_flops`, not counted here)."""
    check_positive(M=M, N=N, K=K)
    return 2 * M * N * K


def gemv_reduce_flops(M: int, N: int, splits: int) -> int:
    """FADDs of the split-K reduce kernel: ``splits * M * N`` (0 without split-K)."""
    return 0 if splits <= 1 else splits * M * N


def gemv_bytes(M: int, N: int, K: int, dtype: str, splits: int = 1) -> int:
    """DRAM bytes moved by the GEMV kernels (the roofline's byte count).

    W is read once per row tile of MT rows (``ceil(M / gemv_m_tile(M))`` times, once for M <= 16),
    x once (its re-reads by other warps hit L1/L2), y written once. With split-K add the fp32
    workspace written by the main kernel and read back by the reduce: ``2 * splits * M * N * 4``.

    >>> gemv_bytes(1, 4096, 4096, "bf16")
    33570816
    """
    check_dtype(dtype, GEMV_DTYPES)
    check_positive(M=M, N=N, K=K, splits=splits)
    es = DTYPE_BYTES[dtype]
    w_passes = cdiv(M, gemv_m_tile(M))
    total = w_passes * N * K * es + M * K * es + M * N * es
    if splits > 1:
        total += 2 * splits * M * N * 4
    return total


def gemv_plan(
    M: int,
    N: int,
    K: int,
    dtype: str,
    sm_count: int,
    *,
    splits: int | None = None,
    ldx: int | None = None,
    ldw: int | None = None,
) -> GemvPlan:
    """Launch plan for ``gemv.cu``: entry names, grids, workspace, FLOPs and bytes.

    ``splits=None`` uses :func:`gemv_splits`; ``ldx``/``ldw`` default to K (contiguous rows).
    Raises ``ValueError`` for non-positive shapes, strides below K or an unsupported dtype.

    >>> p = gemv_plan(4, 1024, 4096, "fp16", sm_count=132)
    >>> p.main.entry, p.main.grid, p.reduce.entry, p.workspace_bytes
    ('gemv_splitk_fp16_m4', (128, 3, 1), 'gemv_splitk_reduce_fp16', 49152)
    """
    check_dtype(dtype, GEMV_DTYPES)
    check_positive(M=M, N=N, K=K, sm_count=sm_count)
    ldx = K if ldx is None else ldx
    ldw = K if ldw is None else ldw
    if ldx < K or ldw < K:
        raise ValueError(f"row strides must be >= K={K}, got ldx={ldx}, ldw={ldw}")
    if splits is None:
        splits, k_chunk = gemv_splits(N, K, sm_count)
    else:
        splits, k_chunk = gemv_chunking(K, splits)
    mt = gemv_m_tile(M)
    grid_x = cdiv(N, GEMV_WARPS_PER_BLOCK)
    block = (GEMV_THREADS, 1, 1)
    if splits == 1:
        main = Launch("gemv.cu", f"gemv_{dtype}_m{mt}", (grid_x, 1, 1), block)
        reduce = None
        ws = 0
    else:
        main = Launch("gemv.cu", f"gemv_splitk_{dtype}_m{mt}", (grid_x, splits, 1), block)
        reduce = Launch(
            "gemv.cu",
            f"gemv_splitk_reduce_{dtype}",
            (cdiv(M * N, GEMV_REDUCE_THREADS), 1, 1),
            (GEMV_REDUCE_THREADS, 1, 1),
        )
        ws = splits * M * N * 4
    return GemvPlan(
        M,
        N,
        K,
        dtype,
        mt,
        splits,
        k_chunk,
        ldx,
        ldw,
        main,
        reduce,
        ws,
        gemv_flops(M, N, K),
        gemv_bytes(M, N, K, dtype, splits),
    )


@dataclass(frozen=True)
class GemvSplit:
    """The K range of one split as ``gemv.cu`` computes it: ``[k_begin, k_end)``, of which
    ``n_vec`` whole 16-byte vectors from ``k_begin`` and a scalar tail ``[k_tail, k_end)``."""

    split: int
    k_begin: int
    k_end: int
    n_vec: int
    k_tail: int


def gemv_partition(K: int, splits: int, k_chunk: int, vec_ok: bool = True) -> list[GemvSplit]:
    """The per-split K ranges of ``gemv.cu`` (same integer arithmetic as ``gemv_body``).

    >>> [(s.k_begin, s.k_end, s.n_vec, s.k_tail) for s in gemv_partition(20, 2, 16)]
    [(0, 16, 2, 16), (16, 20, 0, 16)]
    """
    out = []
    for s in range(splits):
        k_begin = min(s * k_chunk, K)
        k_end = K if K - k_begin < k_chunk else k_begin + k_chunk
        aligned = vec_ok and k_begin % GEMV_VEC == 0  # gemv.cu also checks the split's start
        n_vec = (k_end - k_begin) // GEMV_VEC if aligned else 0
        out.append(GemvSplit(s, k_begin, k_end, n_vec, k_begin + n_vec * GEMV_VEC))
    return out


def gemv_lane_elements(split: GemvSplit, lane: int) -> np.ndarray:
    """K indices that one lane of a warp consumes in one split, in the kernel's order: vectors
    ``v = lane, lane+32, ...`` (UNROLL-grouped trips, then single ones; the order of vectors is
    the same either way), each 8 consecutive elements, then tail elements ``k_tail+lane, +32...``.
    """
    vecs = np.arange(lane, split.n_vec, 32)
    body = (split.k_begin + vecs[:, None] * GEMV_VEC + np.arange(GEMV_VEC)[None, :]).ravel()
    tail = np.arange(split.k_tail + lane, split.k_end, 32)
    return np.concatenate([body, tail]).astype(np.int64)


def gemv_model(
    x: np.ndarray,
    W: np.ndarray,
    *,
    splits: int = 1,
    k_chunk: int | None = None,
    vec_ok: bool = True,
    m_tile: int | None = None,
    coverage: np.ndarray | None = None,
) -> np.ndarray:
    """Numpy replay of ``gemv.cu``: y[M,N] = x[M,K] . W[N,K]^T in float64, returned unrounded.

    Follows the kernel's index arithmetic: per split the K range of :func:`gemv_partition`, per
    lane the elements of :func:`gemv_lane_elements`, the 5-step ``__shfl_xor_sync`` butterfly,
    lane m storing row ``m0 + m`` for row tiles of ``m_tile`` (default :func:`gemv_m_tile`), the
    fp32 workspace ``ws[split][M][N]`` and the reduce in split order. ``coverage`` (int array of
    shape [K], optional) is incremented once per element of W consumed (once per row tile), so a
    test can check that every k is used exactly once per row tile. Raises ``ValueError`` if a
    (row, column) would be stored twice.
    """
    x = np.asarray(x, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    M, K = x.shape
    N = W.shape[0]
    if W.shape[1] != K:
        raise ValueError(f"x is {x.shape}, W is {W.shape}: K differs")
    if k_chunk is None:
        splits, k_chunk = gemv_chunking(K, splits)
    mt = gemv_m_tile(M) if m_tile is None else m_tile
    parts = gemv_partition(K, splits, k_chunk, vec_ok)
    ws = np.full((splits, M, N), np.nan)
    stored = np.zeros((splits, M, N), dtype=np.int64)
    for part in parts:
        lane_ks = [gemv_lane_elements(part, lane) for lane in range(32)]
        for m0 in range(0, M, mt):
            if coverage is not None:  # each row tile re-reads its K range of W
                for ks in lane_ks:
                    np.add.at(coverage, ks, 1)
            rows = np.arange(m0, min(m0 + mt, M))
            # per-lane partial sums, shape [32, rows, N]
            lane_acc = np.stack([x[rows][:, ks] @ W[:, ks].T for ks in lane_ks])
            for off in (16, 8, 4, 2, 1):  # butterfly: lane L adds lane L ^ off
                lane_acc = lane_acc + lane_acc[np.arange(32) ^ off]
            for m in range(len(rows)):  # lane m stores row m0 + m
                ws[part.split, m0 + m] = lane_acc[m, m]
                stored[part.split, m0 + m] += 1
    if np.any(stored != 1):
        raise ValueError("a (row, column) was stored other than once")
    y = np.zeros((M, N))
    for s in range(splits):  # reduce kernel: fixed split order
        y = y + ws[s]
    return y
