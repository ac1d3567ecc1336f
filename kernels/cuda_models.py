"""Host-facing models of the CUDA C kernels in ``kernels/cuda/`` (no GPU, no I/O).

For every kernel this module holds what a host needs and what a CPU test can check:

* where the source is (:func:`source_path`) and the exact entry-point signatures
  (:data:`ENTRY_SIGNATURES`, argument order and C types, as CuPy ``RawModule.get_function`` sees
  them);
* the launch geometry (block, grid formula as a function of shapes and SM count, shared memory);
* the FLOP and byte models (SI units: FLOP, bytes);
* pure-numpy models of the index arithmetic of the two kernels that compute something:
  :func:`gemm_mma_model` replays the tiling of ``gemm_mma.cu`` (cp.async stages, XOR swizzle,
  ldmatrix addressing, the documented ``mma.sync`` m16n8k16 fragment layout, edge masking) and
  :func:`gemv_model` the split-K partition of ``gemv.cu`` (vector body, scalar tail, lane striding,
  warp butterfly). Tests check both against ``A @ B.T`` on ragged shapes, so a slip in the index
  arithmetic shows up without a GPU. Only a GPU run proves the kernels themselves;
* for the probes: :func:`read_probe_vectors` (the read probes' thread -> vector mapping) and the
  per-SM footprint it implies (:func:`read_probe_sm_footprint_bytes`), why ``probe_read_u4``
  bypasses L1 and how to size the L1 probe ``probe_read_l1_u4``; which compiler and GPU give a
  real fp8 probe (:func:`fp8_mma_probe_unavailable`); the ``%globaltimer`` delay kernel's
  argument (:func:`delay_probe_ns`).

Dtypes are the project's strings (``fp64 fp32 tf32 bf16 fp16 fp8 int8``). Nothing here imports
roofprof host logic; errors are ``ValueError`` (bad shapes or names) and ``FileNotFoundError``.

>>> gemm_launch(4096, 4096, 4096, "bf16").grid
(32, 32, 1)
>>> gemv_plan(1, 4096, 4096, "bf16", sm_count=132).main.entry
'gemv_bf16_m1'
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from pathlib import Path

import numpy as np

SOURCES = ("gemv.cu", "gemm_mma.cu", "probes.cu")
"""The CUDA C files under ``kernels/cuda/`` (one concept each)."""

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
"""Storage bytes per element of each dtype string (tf32 is stored as fp32)."""


# --------------------------------------------------------------------------------- sources
def kernel_dir() -> Path:
    """Folder holding the ``.cu`` files.

    Uses ``importlib.resources`` on the installed package ``roofprof.kernels`` (the repository's
    top-level ``kernels/`` folder mapped by setuptools) and falls back to the folder beside this
    file when that package is not importable (running from a checkout).

    >>> kernel_dir().name
    'cuda'
    """
    try:
        candidate = resources.files("roofprof.kernels") / "cuda"
        if isinstance(candidate, Path) and candidate.is_dir():
            return candidate
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent / "cuda"


def source_path(name: str) -> Path:
    """Path of one CUDA C source, e.g. ``source_path("gemm_mma.cu")``.

    ``name`` may omit the ``.cu`` suffix. Raises ``FileNotFoundError`` naming the valid choices
    when the file is unknown or missing.

    >>> source_path("probes").name
    'probes.cu'
    """
    file = name if name.endswith(".cu") else f"{name}.cu"
    path = kernel_dir() / file
    if file not in SOURCES or not path.is_file():
        raise FileNotFoundError(
            f"no CUDA source {name!r} in {kernel_dir()}; valid: {', '.join(SOURCES)}"
        )
    return path


def cuda_include_dirs() -> tuple[Path, ...]:
    """Folders that hold ``cuda_bf16.h`` and ``cuda_fp16.h``, which every source includes.

    NVRTC (what CuPy ``RawModule(code=...)`` uses) has no built-in copy of them: pass one of these
    as ``-I<dir>`` (see :func:`nvrtc_options`), preferably the one of the same CUDA version as the
    NVRTC in use. Looks at ``$CUDA_PATH/include``, ``$CUDA_HOME/include``,
    ``/usr/local/cuda/include`` and the ``include`` folders of installed ``nvidia-*`` pip wheels;
    returns those that exist, in that order (possibly none). Loading a cubin built by nvcc
    (``RawModule(path=...)``) needs none of this.
    """
    candidates = [
        Path(os.environ[v]) / "include" for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)
    ]
    candidates.append(Path("/usr/local/cuda/include"))
    try:
        import nvidia  # namespace package of the NVIDIA pip wheels

        for root in getattr(nvidia, "__path__", []):
            candidates.extend(sorted(Path(root).glob("*/include")))
    except ImportError:
        pass
    seen: list[Path] = []
    for d in candidates:
        if (d / "cuda_bf16.h").is_file() and (d / "cuda_fp16.h").is_file() and d not in seen:
            seen.append(d)
    return tuple(seen)


def nvrtc_options(
    arch: str | None = None, include_dir: Path | str | None = None
) -> tuple[str, ...]:
    """Compile options for these sources under NVRTC, e.g. for
    ``cupy.RawModule(code=src, options=nvrtc_options())``.

    ``-std=c++17`` (the sources need C++11 or later; C++17 is NVRTC's default anyway),
    ``--gpu-architecture=<arch>`` when given (``sm_80``, ``sm_90``...; CuPy adds
    its own), and ``-I`` of ``include_dir`` or of the first :func:`cuda_include_dirs`.

    >>> nvrtc_options("sm_90", "/opt/cuda/include")
    ('-std=c++17', '--gpu-architecture=sm_90', '-I/opt/cuda/include')
    """
    opts = ["-std=c++17"]
    if arch:
        opts.append(f"--gpu-architecture={arch}")
    if include_dir is None:
        found = cuda_include_dirs()
        include_dir = found[0] if found else None
    if include_dir is not None:
        opts.append(f"-I{include_dir}")
    return tuple(opts)


# --------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Launch:
    """One kernel launch: source file, entry point, grid and block (x, y, z), shared memory.

    ``dynamic_smem_bytes`` is what the host passes at launch (all kernels here use static shared
    memory only, so it is 0); ``static_smem_bytes`` is what the kernel declares (ptxas reports it).
    """

    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int = 0
    static_smem_bytes: int = 0

    @property
    def threads(self) -> int:
        """Total threads launched."""
        return math.prod(self.grid) * math.prod(self.block)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_positive(**dims: int) -> None:
    for name, value in dims.items():
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_dtype(dtype: str, allowed: tuple[str, ...]) -> None:
    if dtype not in allowed:
        raise ValueError(f"dtype {dtype!r} not supported here; valid: {', '.join(allowed)}")


# --------------------------------------------------------------------------------- signatures
_P = "const void*"  # any device pointer: 8 bytes
_GEMV_SIG = (
    ("const T*", "x"),
    ("const T*", "W"),
    ("T*", "y"),
    ("int", "M"),
    ("int", "N"),
    ("int", "K"),
    ("int", "ldx"),
    ("int", "ldw"),
)
_GEMV_SPLIT_SIG = (
    ("const T*", "x"),
    ("const T*", "W"),
    ("float*", "ws"),
    ("int", "M"),
    ("int", "N"),
    ("int", "K"),
    ("int", "ldx"),
    ("int", "ldw"),
    ("int", "k_chunk"),
)
_GEMV_REDUCE_SIG = (
    ("const float*", "ws"),
    ("T*", "y"),
    ("int", "M"),
    ("int", "N"),
    ("int", "splits"),
)
_GEMM_SIG = (
    ("const T*", "A"),
    ("const T*", "B"),
    ("TO*", "C"),
    ("int", "M"),
    ("int", "N"),
    ("int", "K"),
)
_COMPUTE_PROBE_SIG = (
    ("int", "iters"),
    ("unsigned int", "seed"),
    ("unsigned int", "flag"),
    ("unsigned int*", "out"),
)

GEMV_M_TILES = (1, 2, 4, 8, 16)
GEMV_DTYPES = ("bf16", "fp16")
GEMM_IN_DTYPES = ("bf16", "fp16")
FMA_PROBE_DTYPES = ("fp64", "fp32", "fp16x2", "bf16x2")
MMA_PROBE_DTYPES = ("bf16", "fp16", "tf32", "fp8", "int8")


def _build_signatures() -> dict[str, tuple[str, tuple[tuple[str, str], ...]]]:
    sigs: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
    for dt in GEMV_DTYPES:
        for mt in GEMV_M_TILES:
            sigs[f"gemv_{dt}_m{mt}"] = ("gemv.cu", _GEMV_SIG)
            sigs[f"gemv_splitk_{dt}_m{mt}"] = ("gemv.cu", _GEMV_SPLIT_SIG)
        sigs[f"gemv_splitk_reduce_{dt}"] = ("gemv.cu", _GEMV_REDUCE_SIG)
    for dt in GEMM_IN_DTYPES:
        for out in (dt, "f32"):
            sigs[f"gemm_mma_{dt}_{out}"] = ("gemm_mma.cu", _GEMM_SIG)
    read_sig = (
        ("const uint4*", "src"),
        ("long long", "n_vec"),
        ("int", "passes"),
        ("unsigned int", "flag"),
        ("unsigned int*", "out"),
    )
    sigs["probe_read_u4"] = ("probes.cu", read_sig)
    sigs["probe_read_l1_u4"] = ("probes.cu", read_sig)
    sigs["probe_copy_u4"] = (
        "probes.cu",
        (
            ("const uint4*", "src"),
            ("uint4*", "dst"),
            ("long long", "n_vec"),
        ),
    )
    sigs["probe_smem_u4"] = ("probes.cu", _COMPUTE_PROBE_SIG)
    for dt in FMA_PROBE_DTYPES:
        sigs[f"probe_fma_{dt}"] = ("probes.cu", _COMPUTE_PROBE_SIG)
    for dt in MMA_PROBE_DTYPES:
        sigs[f"probe_mma_{dt}"] = ("probes.cu", _COMPUTE_PROBE_SIG)
    sigs["probe_empty"] = ("probes.cu", ())
    sigs["probe_delay_ns"] = (
        "probes.cu",
        (
            ("unsigned long long", "ns"),
            ("unsigned long long*", "out"),
        ),
    )
    sigs["probe_intensity_fp32"] = (
        "probes.cu",
        (
            ("const float4*", "src"),
            ("long long", "n_vec"),
            ("int", "nfma"),
            ("unsigned int", "flag"),
            ("unsigned int*", "out"),
        ),
    )
    return sigs


ENTRY_SIGNATURES = _build_signatures()
"""entry name -> (source file, ((C type, argument name), ...)) in argument order.

``T`` is ``__nv_bfloat16`` or ``__half`` (per the ``bf16``/``fp16`` in the name), ``TO`` the
GEMM's output type (``T`` or ``float`` for ``_f32``). With CuPy pass device arrays for pointers,
``numpy.int32`` for ``int``, ``numpy.uint32`` for ``unsigned int``, ``numpy.int64`` for
``long long`` and ``numpy.uint64`` for ``unsigned long long``.

Probe entries of ``probes.cu`` beyond the compute/bandwidth families:

* ``probe_read_u4`` reads with L1-bypassing ``ld.global.cg`` loads (HBM, L2 and the read sweep);
  ``probe_read_l1_u4`` (same arguments) with L1-allocating ``__ldg`` loads, for an L1 ceiling
  (size its buffer with :func:`read_probe_n_vec_for_sm_footprint`); see :data:`READ_PROBE_ENTRIES`.
* ``probe_delay_ns(ns, out)``: a launch-hiding delay of ``ns`` nanoseconds measured on the GPU's
  ``%globaltimer`` (independent of the SM clock); launch :func:`probe_launch` geometry, ``out`` one
  ``unsigned long long`` that receives the elapsed timer nanoseconds.
* ``probe_mma_fp8`` is an empty kernel unless :func:`fp8_mma_probe_unavailable` returns None.
"""


def c_type_size(c_type: str) -> int:
    """Bytes a kernel parameter of this C type occupies (8 for pointers and ``long long``).

    >>> c_type_size("const T*"), c_type_size("int"), c_type_size("long long")
    (8, 4, 8)
    """
    if c_type.endswith("*") or c_type in ("long long", "unsigned long long"):
        return 8
    if c_type in ("int", "unsigned int", "float"):
        return 4
    raise ValueError(f"unknown parameter type {c_type!r}")


def entries(source: str) -> tuple[str, ...]:
    """All entry points of one source file, e.g. ``entries("gemm_mma.cu")``."""
    file = source if source.endswith(".cu") else f"{source}.cu"
    if file not in SOURCES:
        raise ValueError(f"unknown source {source!r}; valid: {', '.join(SOURCES)}")
    return tuple(name for name, (src, _) in ENTRY_SIGNATURES.items() if src == file)


# --------------------------------------------------------------------------------- GEMV
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
    _check_positive(M=M)
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
    _check_positive(N=N, K=K, sm_count=sm_count)
    blocks = _cdiv(N, GEMV_WARPS_PER_BLOCK)
    target = target_blocks_per_sm * sm_count
    if blocks >= target:
        return 1, K
    wanted = min(_cdiv(target, blocks), max(1, K // min_k_per_split))
    return gemv_chunking(K, wanted)


def gemv_chunking(K: int, splits: int) -> tuple[int, int]:
    """``(splits, k_chunk)`` for a requested split count: k_chunk = ceil(K/splits) rounded up to
    a multiple of 8, and splits recomputed as ceil(K/k_chunk) so no split is empty.

    >>> gemv_chunking(100, 3)
    (3, 40)
    """
    _check_positive(K=K, splits=splits)
    if splits == 1:
        return 1, K
    k_chunk = _cdiv(_cdiv(K, splits), GEMV_VEC) * GEMV_VEC
    return _cdiv(K, k_chunk), k_chunk


def gemv_flops(M: int, N: int, K: int) -> int:
    """Algorithmic FLOPs of y = x . W^T: ``2*M*N*K`` (the split-K reduce adds ``splits*M*N``
    more FADDs, see :func:`gemv_reduce_flops`, not counted here)."""
    _check_positive(M=M, N=N, K=K)
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
    _check_dtype(dtype, GEMV_DTYPES)
    _check_positive(M=M, N=N, K=K, splits=splits)
    es = DTYPE_BYTES[dtype]
    w_passes = _cdiv(M, gemv_m_tile(M))
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
    _check_dtype(dtype, GEMV_DTYPES)
    _check_positive(M=M, N=N, K=K, sm_count=sm_count)
    ldx = K if ldx is None else ldx
    ldw = K if ldw is None else ldw
    if ldx < K or ldw < K:
        raise ValueError(f"row strides must be >= K={K}, got ldx={ldx}, ldw={ldw}")
    if splits is None:
        splits, k_chunk = gemv_splits(N, K, sm_count)
    else:
        splits, k_chunk = gemv_chunking(K, splits)
    mt = gemv_m_tile(M)
    grid_x = _cdiv(N, GEMV_WARPS_PER_BLOCK)
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
            (_cdiv(M * N, GEMV_REDUCE_THREADS), 1, 1),
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
    test can check that every k is used exactly once per row tile. Raises ``ValueError`` if a (row, column) would be stored twice.
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


# --------------------------------------------------------------------------------- GEMM
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
STATIC_SMEM_LIMIT_BYTES = 48 * 1024
"""Static shared memory a block may declare without an opt-in (all kernels here stay within it)."""
MMA_M16N8K16_FLOPS = 2 * 16 * 8 * 16


def gemm_entry(dtype: str, out_dtype: str | None = None) -> str:
    """Entry point for input dtype ``bf16``/``fp16`` and output ``None`` (same as input) or
    ``fp32``.

    >>> gemm_entry("bf16"), gemm_entry("fp16", "fp32")
    ('gemm_mma_bf16_bf16', 'gemm_mma_fp16_f32')
    """
    _check_dtype(dtype, GEMM_IN_DTYPES)
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

    >>> gemm_launch(17, 136, 48, "bf16", "fp32")
    Launch(source='gemm_mma.cu', entry='gemm_mma_bf16_f32', grid=(2, 1, 1), block=(256, 1, 1), dynamic_smem_bytes=0, static_smem_bytes=49152)
    """
    _check_positive(M=M, N=N, K=K)
    if K % 8:
        raise ValueError(f"gemm_mma needs K % 8 == 0 (16-byte cp.async rows), got K={K}")
    return Launch(
        "gemm_mma.cu",
        gemm_entry(dtype, out_dtype),
        (_cdiv(N, GEMM_BN), _cdiv(M, GEMM_BM), 1),
        (GEMM_THREADS, 1, 1),
        0,
        GEMM_STATIC_SMEM_BYTES,
    )


def gemm_flops(M: int, N: int, K: int) -> int:
    """Algorithmic FLOPs ``2*M*N*K``."""
    _check_positive(M=M, N=N, K=K)
    return 2 * M * N * K


def gemm_bytes(M: int, N: int, K: int, dtype: str, out_dtype: str | None = None) -> int:
    """Minimum DRAM bytes: A and B read once, C written once: ``(M*K + N*K)*es + M*N*out_es``.

    >>> gemm_bytes(128, 128, 64, "bf16", "fp32")
    98304
    """
    _check_positive(M=M, N=N, K=K)
    _check_dtype(dtype, GEMM_IN_DTYPES)
    out = dtype if out_dtype is None else out_dtype
    return (M * K + N * K) * DTYPE_BYTES[dtype] + M * N * DTYPE_BYTES[out]


def gemm_l2_bytes(M: int, N: int, K: int, dtype: str, out_dtype: str | None = None) -> int:
    """Bytes the blocks load from L2 (each block reads its 128-row panels of A and B over all of
    K; zero-filled edges read nothing) plus the C writes: ``ceil(N/128)*M*K*es + ceil(M/128)*N*K*es
    + M*N*out_es``."""
    _check_positive(M=M, N=N, K=K)
    out = dtype if out_dtype is None else out_dtype
    es = DTYPE_BYTES[dtype]
    return (_cdiv(N, GEMM_BN) * M * K + _cdiv(M, GEMM_BM) * N * K) * es + M * N * DTYPE_BYTES[out]


def gemm_mma_count(M: int, N: int, K: int) -> int:
    """``mma.sync`` m16n8k16 instructions (per warp) issued, padding included: blocks x 8 warps x
    MT*NT x (k_tiles*BK/16). Times :data:`MMA_M16N8K16_FLOPS` gives the tensor work issued."""
    _check_positive(M=M, N=N, K=K)
    blocks = _cdiv(M, GEMM_BM) * _cdiv(N, GEMM_BN)
    k_steps = _cdiv(K, GEMM_BK) * (GEMM_BK // 16)
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
    """Physical 16-byte chunk of logical chunk ``chunk`` in smem row ``row``: chunk ^ ((row>>1)&3)."""
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
    k_tiles = _cdiv(K, GEMM_BK)
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

    for bm in range(_cdiv(M, GEMM_BM)):
        for bn in range(_cdiv(N, GEMM_BN)):
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


# --------------------------------------------------------------------------------- probes
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
    >>> fp8_mma_probe_unavailable((12, 1), (9, 0))
    'fp8 mma.sync needs PTX ISA 8.4 (NVRTC 12.4 or newer); this NVRTC is 12.1, so probes.cu compiles probe_mma_fp8 to an empty kernel'
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
    _check_positive(sm_count=sm_count, blocks_per_sm=blocks_per_sm)
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

    >>> read_probe_vectors(10, Launch("probes.cu", "probe_read_u4", (2, 1, 1), (2, 1, 1)), 1).tolist()
    [2, 6, 3, 7]
    """
    _check_positive(n_vec=n_vec)
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

    >>> read_probe_sm_footprint_bytes((50 << 20) // 4 // 16, probe_launch("probe_read_u4", 132), 132)
    114688
    """
    _check_positive(n_vec=n_vec, sm_count=sm_count)
    stride = launch.threads
    threads = math.prod(launch.block)
    per_thread = [max(0, _cdiv(n_vec - t, stride)) for t in range(threads)]  # block 0 is largest
    blocks_per_sm = _cdiv(math.prod(launch.grid), sm_count)
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
    _check_positive(sm_footprint_bytes=sm_footprint_bytes, sm_count=sm_count)
    stride = launch.threads
    blocks_per_sm = _cdiv(math.prod(launch.grid), sm_count)
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
    _check_dtype(dtype, FMA_PROBE_DTYPES)
    return 2 * FMA_LANES[dtype] * PROBE_FMA_NACC * PROBE_FMA_UNROLL * iters * launch.threads


def mma_probe_flops(dtype: str, iters: int, launch: Launch) -> int:
    """FLOPs (integer ops for int8) of ``probe_mma_<dtype>``: per warp ``MMA_NACC * iters``
    mma of ``2*m*n*k`` each.

    >>> mma_probe_flops("bf16", 1, probe_launch("probe_mma_bf16", 1, 1))
    262144
    """
    _check_dtype(dtype, MMA_PROBE_DTYPES)
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


# ================================================================================= host replays of probes.cu
# Exact numpy/Python replays of the probe kernels' per-thread results, used by the host's
# checks (``roofprof.devices.cuda.probes``) and by the fake GPU of the tests. Moved here from
# the device package so the replays sit beside the gemv/gemm replays; like the rest of this
# module they import nothing from roofprof.

MASK32 = 0xFFFFFFFF
"""uint32 arithmetic mask of the replays."""


def hash32(x: int | np.ndarray) -> int | np.ndarray:
    """``hash32`` of probes.cu on Python ints or numpy integer arrays (uint32 arithmetic).

    >>> hex(hash32(0)), hash32(np.array([0, 1])).dtype
    ('0x0', dtype('uint32'))
    """
    if isinstance(x, np.ndarray):
        v = x.astype(np.uint64) & MASK32
        v ^= v >> np.uint64(16)
        v = (v * np.uint64(0x7FEB352D)) & np.uint64(MASK32)
        v ^= v >> np.uint64(15)
        v = (v * np.uint64(0x846CA68B)) & np.uint64(MASK32)
        v ^= v >> np.uint64(16)
        return v.astype(np.uint32)
    v = int(x) & MASK32
    v ^= v >> 16
    v = (v * 0x7FEB352D) & MASK32
    v ^= v >> 15
    v = (v * 0x846CA68B) & MASK32
    v ^= v >> 16
    return v


def _pad_rows(a: np.ndarray, stride: int) -> np.ndarray:
    """[n, ...] → [ceil(n/stride), stride, ...], zero padded (0 is neutral for + and ^)."""
    n = a.shape[0]
    rows = -(-n // stride)
    out = np.zeros((rows * stride, *a.shape[1:]), dtype=a.dtype)
    out[:n] = a
    return out.reshape(rows, stride, *a.shape[1:])


def read_probe_folds(words: np.ndarray, threads: int, passes: int = 1) -> np.ndarray:
    """Per-thread result of ``probe_read_u4``: thread t adds (u32, per component) every
    16-byte vector ``i ≡ t (mod threads)`` ``passes`` times, then folds ``x^y^z^w``.

    ``words`` is the buffer as uint32 ``[n_vec, 4]``. Returns uint32 ``[threads]``.

    >>> read_probe_folds(np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.uint32), 1).tolist()
    [8]
    """
    w = np.asarray(words, dtype=np.uint64).reshape(-1, 4)
    sums = _pad_rows(w, threads).sum(axis=0) * np.uint64(passes)  # [threads, 4]
    sums &= np.uint64(MASK32)
    return (sums[:, 0] ^ sums[:, 1] ^ sums[:, 2] ^ sums[:, 3]).astype(np.uint32)


def smem_probe_fold(thread_in_block: np.ndarray | int, seed: int, iters: int) -> np.ndarray:
    """Result of ``probe_smem_u4`` for threads with these ``threadIdx.x`` (every block alike).

    The block fills ``buf[i] = (hash32(seed^i), hash32(seed+i), i, seed)`` for i < 2048; each
    iteration ``it`` thread ``x`` adds ``buf[((x & 255) + 256 r) ^ ((it & 7) << 5)]`` for r < 8.
    """
    idx = np.arange(2048, dtype=np.uint64)
    buf = np.stack(
        [
            hash32(idx ^ np.uint64(seed)),
            hash32((idx + np.uint64(seed)) & np.uint64(MASK32)),
            idx.astype(np.uint32),
            np.full(2048, seed & MASK32, np.uint32),
        ],
        axis=1,
    ).astype(np.uint64)
    x = np.atleast_1d(np.asarray(thread_in_block, dtype=np.int64)) & 255
    acc = np.zeros((x.size, 4), dtype=np.uint64)
    # iterations repeat with period 8: count how often each window offset occurs
    for w in range(8):
        times = len(range(w, iters, 8))
        if not times:
            continue
        for r in range(8):
            acc += buf[((x + r * 256) ^ (w << 5))] * np.uint64(times)
    acc &= np.uint64(MASK32)
    return (acc[:, 0] ^ acc[:, 1] ^ acc[:, 2] ^ acc[:, 3]).astype(np.uint32)


def round_to_precision(v: float, bits: int) -> float:
    """Round a finite float64 to ``bits`` significant bits, ties to even (normal range).

    >>> round_to_precision(1.0 + 2**-9, 8), round_to_precision(1.0 + 3 * 2**-8, 8)
    (1.0, 1.015625)
    """
    if v == 0 or not math.isfinite(v):
        return v
    m, e = math.frexp(v)  # v = m * 2**e, 0.5 <= |m| < 1
    scaled = m * 2.0**bits
    return math.ldexp(float(np.rint(scaled)), e - bits)


def _f32(v: float) -> float:
    return float(np.float32(v))


def _fma_f32(x: float, y: float, z: float) -> float:
    # |x|, |y| ~ 1 and z ~ 1e-3: x*y + z is exact in float64 (<= 50 significant bits).
    return _f32(x * y + z)


def _fma_f64(x: float, y: float, z: float) -> float:
    return float(Fraction(x) * Fraction(y) + Fraction(z))


def _fma_f16(x: float, y: float, z: float) -> float:
    return float(np.float16(x * y + z))


def _fma_bf16(x: float, y: float, z: float) -> float:
    return round_to_precision(x * y + z, 8)


def _bits32(v: float) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def _bits64_folded(v: float) -> int:
    u = int(np.array(v, dtype=np.float64).view(np.uint64))
    return (u ^ (u >> 32)) & MASK32


def _bits16(v: float) -> int:
    return int(np.array(v, dtype=np.float16).view(np.uint16))


def _bits_bf16(v: float) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32)) >> 16


def fma_probe_fold(
    dtype: str, seed: int, tid: int, iters: int, contracted_init: bool = True
) -> int:
    """Exact result word of thread ``tid`` of ``probe_fma_<dtype>`` (fp64, fp32, fp16x2, bf16x2).

    Replays ``fma_body``: 16 chains ``x = fma(x, y, z)`` for ``8·iters`` steps from
    ``init(h + j·0x9e3779b9)``, ``h = hash32(seed ^ tid)``, folded by XOR of their bits.
    ``seed`` must have its low 4 bits zero, so that ``y(seed)`` is exactly the literal.
    ``contracted_init`` chooses whether the compiler fused the init expression
    ``1 + k·1e-3`` into one FMA (fp32/fp64; the check tries both). fp16/bf16 FMAs are fused
    (one rounding), as ``__hfma2`` is documented.

    >>> 0 <= fma_probe_fold("bf16x2", 0x2545F490, 0, 1) < 2**32
    True
    """
    if seed & 0xF:
        raise ValueError("seed must have its low 4 bits zero (y(seed) is then exact)")
    h = hash32(seed ^ tid)
    steps = 8 * iters
    v = 0
    for j in range(16):
        hj = (h + j * 0x9E3779B9) & MASK32
        if dtype == "fp32":
            k = hj & 0xFF
            x = _f32(k * _f32(1e-3) + 1.0) if contracted_init else _f32(_f32(k * _f32(1e-3)) + 1.0)
            y, z = _f32(0.999), _f32(0.001)
            for _ in range(steps):
                x = _fma_f32(x, y, z)
            v ^= _bits32(x)
        elif dtype == "fp64":
            k = hj & 0xFF
            x = float(Fraction(k) * Fraction(1e-3) + 1) if contracted_init else (k * 1e-3) + 1.0
            y, z = 0.999, 0.001
            for _ in range(steps):
                x = _fma_f64(x, y, z)
            v ^= _bits64_folded(x)
        elif dtype in ("fp16x2", "bf16x2"):
            lo = 1.0 + (hj & 0xF) * 0.0625
            hi = 1.0 + ((hj >> 4) & 0xF) * 0.0625
            if dtype == "fp16x2":
                y, z, fma, bits = (
                    float(np.float16(_f32(0.99))),
                    float(np.float16(_f32(0.01))),
                    _fma_f16,
                    _bits16,
                )
            else:
                y, z = round_to_precision(_f32(0.99), 8), round_to_precision(_f32(0.01), 8)
                fma, bits = _fma_bf16, _bits_bf16
            for _ in range(steps):
                lo, hi = fma(lo, y, z), fma(hi, y, z)
            v ^= bits(lo) | (bits(hi) << 16)
        else:
            raise ValueError(
                f"unknown FMA probe dtype {dtype!r}; valid: fp64, fp32, fp16x2, bf16x2"
            )
    return v & MASK32


def intensity_probe_folds(values: np.ndarray, threads: int, nfma: int) -> np.ndarray:
    """Per-thread result of ``probe_intensity_fp32``: every fp32 element gets ``nfma`` steps of
    ``x = fma(x, 0.999f, 0.001f)``; thread t XORs the bits of the elements of its vectors
    ``i ≡ t (mod threads)``. ``values`` is float32 ``[n_vec, 4]`` (magnitudes near 1).
    """
    x = np.asarray(values, dtype=np.float32).reshape(-1, 4).astype(np.float64)
    y, z = float(np.float32(0.999)), float(np.float32(0.001))
    for _ in range(nfma):
        x = (x * y + z).astype(np.float32).astype(np.float64)  # exact in float64, one rounding
    bits = x.astype(np.float32).view(np.uint32)
    per_vec = bits[:, 0] ^ bits[:, 1] ^ bits[:, 2] ^ bits[:, 3]
    return np.bitwise_xor.reduce(_pad_rows(per_vec, threads), axis=0).astype(np.uint32)
