"""Host model of ``gemm_mma.cu``: launch, FLOP/byte models and a numpy replay of its tiling.

:func:`gemm_launch` gives the grid and shared memory; :func:`gemm_mma_model` replays the kernel
(cp.async stages, XOR swizzle, ldmatrix addressing, the documented ``mma.sync`` m16n8k16
fragment layout, edge masking) in numpy, so a slip in the index arithmetic shows up against
``A @ B.T`` without a GPU. Errors are ``ValueError``.

>>> gemm_launch(4096, 4096, 4096, "bf16").grid
(32, 32, 1)
"""

from __future__ import annotations

import numpy as np

from .cuda_launch import DTYPE_BYTES, Launch, cdiv, check_dtype, check_positive
from .cuda_sources import GEMM_IN_DTYPES

__all__ = [
    "GEMM_BK",
    "GEMM_BM",
    "GEMM_BN",
    "GEMM_CHUNKS",
    "GEMM_MT",
    "GEMM_NT",
    "GEMM_STAGES",
    "GEMM_STATIC_SMEM_BYTES",
    "GEMM_THREADS",
    "GEMM_WARPS_M",
    "GEMM_WARPS_N",
    "GEMM_WM",
    "GEMM_WN",
    "MMA_M16N8K16_FLOPS",
    "bank_conflict_ways",
    "gemm_bytes",
    "gemm_entry",
    "gemm_flops",
    "gemm_l2_bytes",
    "gemm_launch",
    "gemm_mma_count",
    "gemm_mma_model",
    "gemm_supported",
    "gemm_swizzle",
    "ldmatrix_x4",
    "mma_a_coords",
    "mma_b_coords",
    "mma_c_coords",
    "mma_m16n8k16",
    "round_to",
]


GEMM_BM = 128
GEMM_BN = 128
GEMM_BK = 32
GEMM_STAGES = 3
GEMM_WARPS_M = 2
GEMM_WARPS_N = 4
GEMM_THREADS = GEMM_WARPS_M * GEMM_WARPS_N * 32
GEMM_WM = GEMM_BM // GEMM_WARPS_M
GEMM_WN = GEMM_BN // GEMM_WARPS_N
GEMM_MT = GEMM_WM // 16
GEMM_NT = GEMM_WN // 8
GEMM_CHUNKS = GEMM_BK // 8
GEMM_STATIC_SMEM_BYTES = GEMM_STAGES * (GEMM_BM + GEMM_BN) * GEMM_BK * 2
MMA_M16N8K16_FLOPS = 2 * 16 * 8 * 16


def gemm_entry(dtype: str, out_dtype: str | None = None) -> str:
    """Entry point for input dtype ``bf16``/``fp16`` and output ``None`` (same as input) or
    ``fp32``.

    >>> gemm_entry("bf16"), gemm_entry("fp16", "fp32")
    ('gemm_mma_bf16_bf16', 'gemm_mma_fp16_f32')
    """
    check_dtype(dtype, GEMM_IN_DTYPES)
    out = dtype if out_dtype in (None, dtype) else out_dtype
    if out not in (dtype, "fp32"):
        raise ValueError(f"out_dtype {out_dtype!r} not supported; valid: {dtype}, fp32")
    return f"gemm_mma_{dtype}_{'f32' if out == 'fp32' else out}"


def gemm_supported(M: int, N: int, K: int) -> bool:
    """Whether ``gemm_mma.cu`` handles the shape: M, N, K positive and K a multiple of 8."""
    return M > 0 and N > 0 and K > 0 and K % 8 == 0


def gemm_launch(M: int, N: int, K: int, dtype: str, out_dtype: str | None = None) -> Launch:
    """Launch of ``gemm_mma.cu`` for C[M,N] = A[M,K] . B[N,K]^T.

    Grid ``(ceil(N/128), ceil(M/128), 1)``, 256 threads, 48 KiB static shared memory, no dynamic.
    Raises ``ValueError`` unless :func:`gemm_supported`.

    >>> launch = gemm_launch(17, 136, 48, "bf16", "fp32")
    >>> launch.entry, launch.grid, launch.block
    ('gemm_mma_bf16_f32', (2, 1, 1), (256, 1, 1))
    >>> launch.dynamic_smem_bytes, launch.static_smem_bytes
    (0, 49152)
    """
    check_positive(M=M, N=N, K=K)
    if K % 8:
        raise ValueError(f"gemm_mma needs K % 8 == 0 (16-byte cp.async rows), got K={K}")
    return Launch(
        "gemm_mma.cu",
        gemm_entry(dtype, out_dtype),
        (cdiv(N, GEMM_BN), cdiv(M, GEMM_BM), 1),
        (GEMM_THREADS, 1, 1),
        0,
        GEMM_STATIC_SMEM_BYTES,
    )


def gemm_flops(M: int, N: int, K: int) -> int:
    """Algorithmic FLOPs ``2*M*N*K``."""
    check_positive(M=M, N=N, K=K)
    return 2 * M * N * K


def gemm_bytes(M: int, N: int, K: int, dtype: str, out_dtype: str | None = None) -> int:
    """Minimum DRAM bytes: A and B read once, C written once: ``(M*K + N*K)*es + M*N*out_es``.

    >>> gemm_bytes(128, 128, 64, "bf16", "fp32")
    98304
    """
    check_positive(M=M, N=N, K=K)
    check_dtype(dtype, GEMM_IN_DTYPES)
    out = dtype if out_dtype is None else out_dtype
    return (M * K + N * K) * DTYPE_BYTES[dtype] + M * N * DTYPE_BYTES[out]


def gemm_l2_bytes(M: int, N: int, K: int, dtype: str, out_dtype: str | None = None) -> int:
    """Bytes the blocks load from L2 (each block reads its 128-row panels of A and B over all of
    K; zero-filled edges read nothing) plus the C writes: ``ceil(N/128)*M*K*es + ceil(M/128)*N*K*es
    + M*N*out_es``."""
    check_positive(M=M, N=N, K=K)
    out = dtype if out_dtype is None else out_dtype
    es = DTYPE_BYTES[dtype]
    return (cdiv(N, GEMM_BN) * M * K + cdiv(M, GEMM_BM) * N * K) * es + M * N * DTYPE_BYTES[out]


def gemm_mma_count(M: int, N: int, K: int) -> int:
    """``mma.sync`` m16n8k16 instructions (per warp) issued, padding included: blocks x 8 warps x
    MT*NT x (k_tiles*BK/16). Times :data:`MMA_M16N8K16_FLOPS` gives the tensor work issued."""
    check_positive(M=M, N=N, K=K)
    blocks = cdiv(M, GEMM_BM) * cdiv(N, GEMM_BN)
    k_steps = cdiv(K, GEMM_BK) * (GEMM_BK // 16)
    return blocks * (GEMM_THREADS // 32) * GEMM_MT * GEMM_NT * k_steps


# ---- numpy model of the mma.sync m16n8k16 fragment layout (PTX ISA, "Matrix Fragments for
# mma.m16n8k16 with floating point type"): groupID g = lane >> 2, threadID_in_group t = lane & 3.
_LANES = np.arange(32)
_G = _LANES >> 2
_T = _LANES & 3


def mma_a_coords() -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the 16x16 A tile of element a[2*reg + half] of each lane; arrays [32, 4, 2].

    row = g for a0,a1,a4,a5 and g+8 for a2,a3,a6,a7; col = 2t + (i & 1), +8 for i >= 4.
    """
    reg = np.arange(4)[None, :, None]
    half = np.arange(2)[None, None, :]
    row = _G[:, None, None] + 8 * (reg % 2) + 0 * half
    col = 2 * _T[:, None, None] + half + 8 * (reg // 2)
    return row, col


def mma_b_coords() -> tuple[np.ndarray, np.ndarray]:
    """(k, n) in the 16x8 B tile of element b[2*reg + half] of each lane; arrays [32, 2, 2].

    k = 2t + (i & 1), +8 for i >= 2; n = g.
    """
    reg = np.arange(2)[None, :, None]
    half = np.arange(2)[None, None, :]
    k = 2 * _T[:, None, None] + half + 8 * reg
    n = _G[:, None, None] + 0 * reg + 0 * half
    return k, n


def mma_c_coords() -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the 16x8 C tile of accumulator c[i] of each lane; arrays [32, 4].

    row = g for c0,c1 and g+8 for c2,c3; col = 2t + (i & 1).
    """
    i = np.arange(4)[None, :]
    return _G[:, None] + 8 * (i // 2), 2 * _T[:, None] + (i % 2)


def mma_m16n8k16(d: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One warp's ``mma.sync.m16n8k16.row.col`` on register fragments: d[32,4] += A . B.

    ``a`` is [32, 4, 2] (lane, .b32 register, low/high half), ``b`` [32, 2, 2]; A and B are
    rebuilt from the documented layout, multiplied, and scattered back to C's layout.
    """
    ar, ac = mma_a_coords()
    bk, bn = mma_b_coords()
    cr, cc = mma_c_coords()
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    A[ar, ac] = a
    B[bk, bn] = b
    return d + (A @ B)[cr, cc]


def gemm_swizzle(row: np.ndarray | int, chunk: np.ndarray | int) -> np.ndarray | int:
    """Physical 16-byte chunk of logical chunk ``chunk`` in smem row ``row``:
    ``chunk ^ ((row >> 1) & 3)``."""
    return chunk ^ ((row >> 1) & 3)


def ldmatrix_x4(smem: np.ndarray, row: np.ndarray, chunk: np.ndarray) -> np.ndarray:
    """``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` from a [rows, BK] smem tile (physical layout).

    Lane L supplies the address of row (L % 8) of matrix (L // 8): smem row ``row[L]``, physical
    chunk ``chunk[L]`` (8 halves). Lane L receives in register j the two halves at positions
    2*(L%4), 2*(L%4)+1 of row L//4 of matrix j. Returns [32, 4, 2].
    """
    lines = smem[row[:, None], chunk[:, None] * 8 + np.arange(8)[None, :]]  # [32 addr, 8]
    lines = lines.reshape(4, 8, 8)  # [matrix, row in matrix, element]
    row_in = _LANES // 4
    col = 2 * (_LANES % 4)
    out = np.empty((32, 4, 2))
    for j in range(4):
        out[:, j, 0] = lines[j, row_in, col]
        out[:, j, 1] = lines[j, row_in, col + 1]
    return out


def bank_conflict_ways(byte_addr: np.ndarray) -> int:
    """Worst-case shared-memory bank conflict of one 8-address ldmatrix phase (16-byte rows):
    the maximum number of distinct 16-byte rows mapping to the same group of 4 banks."""
    groups = (np.asarray(byte_addr) // 16) % 8
    return int(np.bincount(groups, minlength=8).max())


def _round_bf16(a: np.ndarray) -> np.ndarray:
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def round_to(a: np.ndarray, dtype: str | None) -> np.ndarray:
    """Round values to a storage dtype (``bf16`` round-to-nearest-even, ``fp16``, ``fp32``) and
    return float32; ``None`` returns float64 unchanged (finite inputs assumed)."""
    if dtype is None:
        return np.asarray(a, dtype=np.float64)
    if dtype == "bf16":
        return _round_bf16(a)
    if dtype == "fp16":
        return np.asarray(a).astype(np.float16).astype(np.float32)
    if dtype == "fp32":
        return np.asarray(a, dtype=np.float32)
    raise ValueError(f"cannot round to {dtype!r}; valid: bf16, fp16, fp32, None")


def gemm_mma_model(
    A: np.ndarray, B: np.ndarray, out_dtype: str | None = None, check_banks: bool = False
) -> np.ndarray:
    """Numpy replay of ``gemm_mma.cu``: C[M,N] = A[M,K] . B[N,K]^T.

    Every block runs the kernel's loop: the prologue loads K tiles 0..STAGES-2, then per tile
    ``kt`` the prefetch of ``kt+STAGES-1`` into the stage that held ``kt-1`` and the compute on
    stage ``kt % STAGES`` (the model asserts that stage holds tile kt). Loads are the cp.async
    chunks (thread id -> row = id // 4, chunk = id % 4, XOR swizzle, zero fill past M/N/K);
    fragments come from :func:`ldmatrix_x4` with the kernel's lane addressing; products from
    :func:`mma_m16n8k16`; the epilogue stores each lane's c0..c3 with the row < M, col < N mask.
    Arithmetic is float64 (A, B as given: round them first to model bf16/fp16 inputs); the result
    is rounded with :func:`round_to` (``None``: float64). ``check_banks`` also asserts every
    ldmatrix phase is bank-conflict free. Raises ``ValueError`` for K % 8 != 0 or a C element
    stored other than once.
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    M, K = A.shape
    N = B.shape[0]
    if B.shape[1] != K:
        raise ValueError(f"A is {A.shape}, B is {B.shape}: K differs")
    if K % 8:
        raise ValueError(f"gemm_mma needs K % 8 == 0, got K={K}")
    C = np.full((M, N), np.nan)
    stores = np.zeros((M, N), dtype=np.int64)
    k_tiles = cdiv(K, GEMM_BK)
    tids = np.arange(GEMM_THREADS)

    def load(dst: np.ndarray, src: np.ndarray, rows_total: int, base: int, kt: int) -> None:
        for i in range(GEMM_BM * GEMM_CHUNKS // GEMM_THREADS):
            ids = tids + i * GEMM_THREADS
            row, c = ids // GEMM_CHUNKS, ids % GEMM_CHUNKS
            gr, gk = base + row, kt * GEMM_BK + c * 8
            valid = (gr < rows_total) & (gk < K)
            pc = gemm_swizzle(row, c)
            for r, p, g_r, g_k, v in zip(row, pc, gr, gk, valid, strict=True):
                dst[r, p * 8 : p * 8 + 8] = src[g_r, g_k : g_k + 8] if v else 0.0

    for bm in range(cdiv(M, GEMM_BM)):
        for bn in range(cdiv(N, GEMM_BN)):
            block_m, block_n = bm * GEMM_BM, bn * GEMM_BN
            s_a = np.full((GEMM_STAGES, GEMM_BM, GEMM_BK), np.nan)
            s_b = np.full((GEMM_STAGES, GEMM_BN, GEMM_BK), np.nan)
            resident = [-1] * GEMM_STAGES
            acc = np.zeros((GEMM_WARPS_M * GEMM_WARPS_N, GEMM_MT, GEMM_NT, 32, 4))

            def load_tile(
                stage: int,
                kt: int,
                s_a=s_a,
                s_b=s_b,
                resident=resident,
                block_m=block_m,
                block_n=block_n,
            ) -> None:
                load(s_a[stage], A, M, block_m, kt)
                load(s_b[stage], B, N, block_n, kt)
                resident[stage] = kt

            for s in range(GEMM_STAGES - 1):
                if s < k_tiles:
                    load_tile(s, s)
            for kt in range(k_tiles):
                nxt = kt + GEMM_STAGES - 1
                if nxt < k_tiles:
                    if nxt % GEMM_STAGES == kt % GEMM_STAGES:
                        raise AssertionError("prefetch would overwrite the stage being computed")
                    load_tile(nxt % GEMM_STAGES, nxt)
                stage = kt % GEMM_STAGES
                if resident[stage] != kt:
                    raise AssertionError(f"stage {stage} holds tile {resident[stage]}, not {kt}")
                a_s, b_s = s_a[stage], s_b[stage]
                for warp in range(GEMM_WARPS_M * GEMM_WARPS_N):
                    wm, wn = warp // GEMM_WARPS_N, warp % GEMM_WARPS_N
                    for kk in range(GEMM_BK // 16):
                        a_frag = []
                        for mt in range(GEMM_MT):
                            row = wm * GEMM_WM + mt * 16 + (_LANES & 15)
                            chunk = kk * 2 + (_LANES >> 4)
                            pc = gemm_swizzle(row, chunk)
                            if check_banks:
                                _assert_conflict_free(row, pc)
                            a_frag.append(ldmatrix_x4(a_s, row, pc))
                        b_frag = []
                        for np_ in range(GEMM_NT // 2):
                            row = wn * GEMM_WN + np_ * 16 + (_LANES & 7) + ((_LANES >> 4) << 3)
                            chunk = kk * 2 + ((_LANES >> 3) & 1)
                            pc = gemm_swizzle(row, chunk)
                            if check_banks:
                                _assert_conflict_free(row, pc)
                            r = ldmatrix_x4(b_s, row, pc)
                            b_frag.append(r[:, 0:2, :])
                            b_frag.append(r[:, 2:4, :])
                        for mt in range(GEMM_MT):
                            for nt in range(GEMM_NT):
                                acc[warp, mt, nt] = mma_m16n8k16(
                                    acc[warp, mt, nt], a_frag[mt], b_frag[nt]
                                )
            cr, cc = mma_c_coords()
            for warp in range(GEMM_WARPS_M * GEMM_WARPS_N):
                wm, wn = warp // GEMM_WARPS_N, warp % GEMM_WARPS_N
                for mt in range(GEMM_MT):
                    for nt in range(GEMM_NT):
                        rows = block_m + wm * GEMM_WM + mt * 16 + cr
                        cols = block_n + wn * GEMM_WN + nt * 8 + cc
                        ok = (rows < M) & (cols < N)
                        C[rows[ok], cols[ok]] = acc[warp, mt, nt][ok]
                        np.add.at(stores, (rows[ok], cols[ok]), 1)
    if np.any(stores != 1):
        raise ValueError("a C element was stored other than once")
    return round_to(C, out_dtype)


def _assert_conflict_free(row: np.ndarray, phys_chunk: np.ndarray) -> None:
    addr = row * (GEMM_BK * 2) + phys_chunk * 16
    for j in range(4):  # one phase per 8x8 matrix
        ways = bank_conflict_ways(addr[8 * j : 8 * j + 8])
        if ways != 1:
            raise AssertionError(f"ldmatrix phase {j} has a {ways}-way bank conflict")
