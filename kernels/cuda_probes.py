"""Host model of the probe kernels of ``probes.cu``: launches, FLOP/byte models, fp8 support.

:func:`probe_launch` gives each probe's geometry and :func:`probe_out_words` its result buffer;
the ``*_probe_bytes``/``*_probe_flops`` functions are the roofline's counts (SI units);
:func:`read_probe_vectors` replays the read probes' thread -> vector mapping and
:func:`read_probe_sm_footprint_bytes` the per-SM footprint it implies (why ``probe_read_u4``
bypasses L1 and how to size the L1 probe ``probe_read_l1_u4``); :func:`fp8_mma_probe_unavailable`
says which compiler and GPU give a real fp8 probe; :func:`delay_probe_ns` is the
``%globaltimer`` delay kernel's argument. Errors are ``ValueError``.

>>> probe_launch("probe_fma_fp32", 132).grid
(528, 1, 1)
"""

from __future__ import annotations

import math

import numpy as np

from .cuda_launch import Launch, cdiv, check_dtype, check_positive
from .cuda_sources import ENTRY_SIGNATURES, FMA_PROBE_DTYPES, MMA_PROBE_DTYPES, entries

__all__ = [
    "DELAY_MAX_NS",
    "FMA_LANES",
    "FMA_PROBE_ROOFLINE_DTYPE",
    "FP8_MMA_MIN_CC",
    "FP8_MMA_MIN_NVRTC",
    "FP8_MMA_SYNC_SASS",
    "MMA_SHAPES",
    "PROBE_FMA_NACC",
    "PROBE_FMA_UNROLL",
    "PROBE_MMA_NACC",
    "PROBE_SMEM_READS",
    "PROBE_SMEM_STATIC_BYTES",
    "PROBE_SMEM_VECS",
    "PROBE_THREADS",
    "READ_PROBE_ENTRIES",
    "copy_probe_bytes",
    "delay_probe_ns",
    "fma_probe_flops",
    "fp8_mma_probe_supported",
    "fp8_mma_probe_unavailable",
    "fp8_mma_sync_native",
    "intensity_of",
    "intensity_probe_bytes",
    "intensity_probe_flops",
    "mma_probe_flops",
    "probe_launch",
    "probe_out_words",
    "read_probe_bytes",
    "read_probe_n_vec_for_sm_footprint",
    "read_probe_sm_footprint_bytes",
    "read_probe_vectors",
    "smem_probe_bytes",
]


PROBE_THREADS = 256
PROBE_FMA_NACC = 16
PROBE_FMA_UNROLL = 8
PROBE_MMA_NACC = 8
PROBE_SMEM_VECS = 2048
PROBE_SMEM_READS = 8
PROBE_SMEM_STATIC_BYTES = PROBE_SMEM_VECS * 16

MMA_SHAPES = {
    "bf16": (16, 8, 16),
    "fp16": (16, 8, 16),
    "tf32": (16, 8, 8),
    "fp8": (16, 8, 32),
    "int8": (16, 8, 32),
}
"""(m, n, k) of the mma.sync each tensor probe issues."""

FMA_LANES = {"fp64": 1, "fp32": 1, "fp16x2": 2, "bf16x2": 2}
"""Scalar lanes per FMA instruction of each CUDA-core probe."""

FMA_PROBE_ROOFLINE_DTYPE = {"fp64": "fp64", "fp32": "fp32", "fp16x2": "fp16", "bf16x2": "bf16"}

FP8_MMA_SYNC_SASS = {
    (8, 9): "native: QMMA.16832.F32.E4M3.E4M3",
    (9, 0): "emulated: F2FP.F16.E4M3.UNPACK_B + 2x HMMA.16816.F32 + 4x FADD per mma",
    (10, 0): "emulated: F2FP.F16.E4M3.UNPACK_B + HMMA.16816.F32 + FADD",
    (12, 0): "native: QMMA.16832.F32.E4M3.E4M3",
}
"""What ptxas (CUDA 13.0) makes of ``mma.sync ... e4m3`` per compute capability, read from SASS
here. On Hopper the native fp8 tensor path is wgmma (QGMMA), which these probes do not use."""


FP8_MMA_MIN_CC = (8, 9)
"""Oldest compute capability with an fp8 (e4m3) ``mma.sync``."""

FP8_MMA_MIN_NVRTC = (12, 4)
"""Oldest NVRTC/nvcc (major, minor) whose PTX (ISA 8.4) has fp8 ``mma.sync``; ``probes.cu``
compiles ``probe_mma_fp8`` to an empty kernel under an older one (``__CUDACC_VER_*`` guard)."""


def fp8_mma_probe_supported(cc: tuple[int, int]) -> bool:
    """Whether ``probe_mma_fp8`` does work on a device of compute capability ``cc`` (>= 8.9; on
    older targets its body is compiled out). The compiler matters too: see
    :func:`fp8_mma_probe_unavailable`."""
    return tuple(cc) >= FP8_MMA_MIN_CC


def _version_pair(value: object, what: str) -> tuple[int, int]:
    try:
        major, minor = (int(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what} must be a (major, minor) pair of integers, got {value!r}"
        ) from exc
    return major, minor


def fp8_mma_probe_unavailable(
    nvrtc_version: tuple[int, int] | None, cc: tuple[int, int]
) -> str | None:
    """Why ``probe_mma_fp8`` does no work when ``probes.cu`` is compiled by NVRTC
    ``nvrtc_version`` (e.g. CuPy's ``cupy.cuda.nvrtc.getVersion()``, ``(12, 1)``) for a GPU of
    compute capability ``cc`` (e.g. ``(9, 0)``); None when it is a real probe.

    Two conditions, both compiled into the kernel: the GPU needs sm_89+ and the compiler PTX ISA
    8.4 (NVRTC >= 12.4); otherwise the kernel is empty and must be skipped, never timed (it would
    report an absurd rate). ``nvrtc_version=None`` (unknown) counts as unavailable. The other
    ``probes.cu`` entries compile and work either way. Raises ``ValueError`` for a malformed pair.

    >>> fp8_mma_probe_unavailable((12, 9), (9, 0)) is None
    True
    >>> print(fp8_mma_probe_unavailable((12, 1), (9, 0)))  # doctest: +NORMALIZE_WHITESPACE
    fp8 mma.sync needs PTX ISA 8.4 (NVRTC 12.4 or newer); this NVRTC is 12.1,
    so probes.cu compiles probe_mma_fp8 to an empty kernel
    >>> fp8_mma_probe_unavailable((13, 0), (8, 0))
    'fp8 mma.sync needs compute capability 8.9 or newer (sm_89+); this GPU is sm_80'
    """
    major, minor = _version_pair(cc, "cc")
    if (major, minor) < FP8_MMA_MIN_CC:
        return (
            "fp8 mma.sync needs compute capability 8.9 or newer (sm_89+); "
            f"this GPU is sm_{major}{minor}"
        )
    if nvrtc_version is None:
        return (
            "fp8 mma.sync needs NVRTC 12.4 or newer and the NVRTC version is unknown, so "
            "probe_mma_fp8 may be an empty kernel"
        )
    nv = _version_pair(nvrtc_version, "nvrtc_version")
    if nv < FP8_MMA_MIN_NVRTC:
        return (
            "fp8 mma.sync needs PTX ISA 8.4 (NVRTC 12.4 or newer); "
            f"this NVRTC is {nv[0]}.{nv[1]}, so probes.cu compiles probe_mma_fp8 to an "
            "empty kernel"
        )
    return None


def fp8_mma_sync_native(cc: tuple[int, int]) -> bool | None:
    """True/False where the SASS was checked (:data:`FP8_MMA_SYNC_SASS`), None where unknown."""
    note = FP8_MMA_SYNC_SASS.get(tuple(cc))
    return None if note is None else note.startswith("native")


_ONE_WARP_PROBES = ("probe_empty", "probe_delay_ns")


def probe_launch(entry: str, sm_count: int, blocks_per_sm: int = 4) -> Launch:
    """Launch of a throughput probe: grid ``sm_count * blocks_per_sm`` blocks (a multiple of the
    SM count) of 256 threads; ``probe_empty`` and ``probe_delay_ns`` are 1 block of 32 threads.

    >>> probe_launch("probe_fma_fp32", 132).grid
    (528, 1, 1)
    >>> probe_launch("probe_delay_ns", 132).block
    (32, 1, 1)
    """
    if entry not in ENTRY_SIGNATURES or ENTRY_SIGNATURES[entry][0] != "probes.cu":
        raise ValueError(f"unknown probe {entry!r}; valid: {', '.join(entries('probes.cu'))}")
    if entry in _ONE_WARP_PROBES:
        return Launch("probes.cu", entry, (1, 1, 1), (32, 1, 1))
    check_positive(sm_count=sm_count, blocks_per_sm=blocks_per_sm)
    smem = PROBE_SMEM_STATIC_BYTES if entry == "probe_smem_u4" else 0
    return Launch(
        "probes.cu", entry, (sm_count * blocks_per_sm, 1, 1), (PROBE_THREADS, 1, 1), 0, smem
    )


def probe_out_words(launch: Launch) -> int:
    """32-bit words the ``out`` buffer of a probe needs: one per launched thread
    (``probe_delay_ns``: 2, i.e. one ``unsigned long long``; ``probe_empty``: none needed)."""
    if launch.entry == "probe_delay_ns":
        return 2
    return launch.threads


DELAY_MAX_NS = 1_000_000_000
"""Longest delay ``probe_delay_ns`` spins for (its ``ns`` argument is capped here)."""


def delay_probe_ns(delay_s: float) -> int:
    """The ``ns`` argument of ``probe_delay_ns`` for a delay of ``delay_s`` seconds, rounded up
    and capped at :data:`DELAY_MAX_NS`. Raises ``ValueError`` for a negative or non-finite value.

    >>> delay_probe_ns(60e-6)
    60000
    """
    if not isinstance(delay_s, (int, float)) or not math.isfinite(delay_s) or delay_s < 0:
        raise ValueError(f"delay_s must be a finite number >= 0, got {delay_s!r}")
    return min(DELAY_MAX_NS, math.ceil(round(delay_s * 1e9, 3)))


READ_PROBE_ENTRIES = {"l2": "probe_read_u4", "l1": "probe_read_l1_u4"}
"""Read-probe entry per cache level its loads may be served from: ``probe_read_u4``
(``ld.global.cg``, never L1) for HBM, L2 and the read sweep; ``probe_read_l1_u4`` (``__ldg``,
L1-allocating) for an L1 ceiling. Same arguments, same per-thread result."""


def read_probe_bytes(n_vec: int, passes: int = 1) -> int:
    """Bytes read by ``probe_read_u4`` / ``probe_read_l1_u4``: ``16 * n_vec * passes``."""
    return 16 * n_vec * passes


def read_probe_vectors(n_vec: int, launch: Launch, block: int) -> np.ndarray:
    """Numpy replay of the read probes' index arithmetic for one block and one pass: the vector
    indices its threads load, in the kernel's order (thread-major: per thread the 4-way unrolled
    body ``i, i+s, i+2s, i+3s`` then the tail ``i += s``, with ``i`` starting at the global thread
    id and ``s`` the grid's thread count). Every pass loads the same vectors. A Python loop over
    the block's threads: meant for test-sized ``n_vec``.

    >>> launch = Launch("probes.cu", "probe_read_u4", (2, 1, 1), (2, 1, 1))
    >>> read_probe_vectors(10, launch, 1).tolist()
    [2, 6, 3, 7]
    """
    check_positive(n_vec=n_vec)
    stride = launch.threads
    threads = math.prod(launch.block)
    if not 0 <= block < math.prod(launch.grid):
        raise ValueError(f"block {block} outside the grid {launch.grid}")
    out: list[int] = []
    for t in range(block * threads, (block + 1) * threads):
        i = t
        while i + 3 * stride < n_vec:
            out.extend((i, i + stride, i + 2 * stride, i + 3 * stride))
            i += 4 * stride
        while i < n_vec:
            out.append(i)
            i += stride
    return np.asarray(out, dtype=np.int64)


def read_probe_sm_footprint_bytes(n_vec: int, launch: Launch, sm_count: int) -> int:
    """Bytes one SM's resident blocks read per pass of a read probe (upper bound over SMs):
    ``ceil(grid / sm_count)`` blocks times the largest block footprint (block 0). With every
    block resident for the whole launch (grid = ``sm_count * 4``), a pass re-reads exactly these
    bytes on that SM, so they stay in its L1 when they fit and the loads allocate in L1 — why the
    L2 probe uses L1-bypassing loads. Example: the L2/4 buffer of an H100 (50 MiB L2, 132 SMs)
    is 112 KiB per SM at most (99 KB on average):

    >>> launch = probe_launch("probe_read_u4", 132)
    >>> read_probe_sm_footprint_bytes((50 << 20) // 4 // 16, launch, 132)
    114688
    """
    check_positive(n_vec=n_vec, sm_count=sm_count)
    stride = launch.threads
    threads = math.prod(launch.block)
    per_thread = [max(0, cdiv(n_vec - t, stride)) for t in range(threads)]  # block 0 is largest
    blocks_per_sm = cdiv(math.prod(launch.grid), sm_count)
    return blocks_per_sm * sum(per_thread) * 16


def read_probe_n_vec_for_sm_footprint(
    sm_footprint_bytes: int, launch: Launch, sm_count: int
) -> int:
    """Largest ``n_vec`` (a multiple of the grid's thread count, so every thread reads the same
    number of vectors) whose :func:`read_probe_sm_footprint_bytes` is at most
    ``sm_footprint_bytes``, e.g. 64 KiB per SM for an L1 probe with ``probe_read_l1_u4``.
    Raises ``ValueError`` when not even one vector per thread fits.

    >>> read_probe_n_vec_for_sm_footprint(64 * 1024, probe_launch("probe_read_l1_u4", 132), 132)
    540672
    """
    check_positive(sm_footprint_bytes=sm_footprint_bytes, sm_count=sm_count)
    stride = launch.threads
    blocks_per_sm = cdiv(math.prod(launch.grid), sm_count)
    per_thread = sm_footprint_bytes // (16 * math.prod(launch.block) * blocks_per_sm)
    if per_thread < 1:
        raise ValueError(f"{sm_footprint_bytes} bytes per SM is less than one vector per thread")
    return per_thread * stride


def copy_probe_bytes(n_vec: int) -> int:
    """Bytes moved by ``probe_copy_u4``: ``32 * n_vec`` (16 read + 16 written per vector)."""
    return 32 * n_vec


def smem_probe_bytes(iters: int, launch: Launch) -> int:
    """Shared-memory bytes read by ``probe_smem_u4``: ``iters * 8 * 16`` per thread."""
    return iters * PROBE_SMEM_READS * 16 * launch.threads


def fma_probe_flops(dtype: str, iters: int, launch: Launch) -> int:
    """FLOPs of ``probe_fma_<dtype>`` (dtype in fp64, fp32, fp16x2, bf16x2):
    ``2 * lanes * NACC * UNROLL * iters`` per thread (the final XOR fold is not counted).

    >>> fma_probe_flops("fp16x2", 10, probe_launch("probe_fma_fp16x2", 1, 1))
    1310720
    """
    check_dtype(dtype, FMA_PROBE_DTYPES)
    return 2 * FMA_LANES[dtype] * PROBE_FMA_NACC * PROBE_FMA_UNROLL * iters * launch.threads


def mma_probe_flops(dtype: str, iters: int, launch: Launch) -> int:
    """FLOPs (integer ops for int8) of ``probe_mma_<dtype>``: per warp ``MMA_NACC * iters``
    mma of ``2*m*n*k`` each.

    >>> mma_probe_flops("bf16", 1, probe_launch("probe_mma_bf16", 1, 1))
    262144
    """
    check_dtype(dtype, MMA_PROBE_DTYPES)
    m, n, k = MMA_SHAPES[dtype]
    warps = launch.threads // 32
    return warps * PROBE_MMA_NACC * iters * 2 * m * n * k


def intensity_probe_flops(n_vec: int, nfma: int) -> int:
    """FLOPs of ``probe_intensity_fp32``: ``2 * nfma`` per fp32 element, 4 elements per vector."""
    return 2 * nfma * 4 * n_vec


def intensity_probe_bytes(n_vec: int) -> int:
    """Bytes read by ``probe_intensity_fp32``: ``16 * n_vec`` (no writes are counted)."""
    return 16 * n_vec


def intensity_of(nfma: int) -> float:
    """Arithmetic intensity of the sweep kernel in FLOP/byte: ``nfma / 2``."""
    return nfma / 2.0
