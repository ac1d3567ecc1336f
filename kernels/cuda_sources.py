"""Where the CUDA C sources are, how NVRTC compiles them, and their entry points.

:func:`kernel_dir` and :func:`source_path` find the ``.cu`` files (installed package or
checkout); :func:`cuda_include_dirs` and :func:`nvrtc_options` give the NVRTC options;
:data:`ENTRY_SIGNATURES` lists every entry point with its argument order and C types (as CuPy
``RawModule.get_function`` sees them). Errors are ``FileNotFoundError`` (a missing source) and
``ValueError`` (an unknown name). Nothing here imports roofprof.

>>> entries("gemm_mma.cu")[0]
'gemm_mma_bf16_bf16'
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = [
    "ENTRY_SIGNATURES",
    "FMA_PROBE_DTYPES",
    "GEMM_IN_DTYPES",
    "GEMV_DTYPES",
    "GEMV_M_TILES",
    "MMA_PROBE_DTYPES",
    "SOURCES",
    "c_type_size",
    "cuda_include_dirs",
    "entries",
    "kernel_dir",
    "nvrtc_options",
    "source_path",
]


SOURCES = ("gemv.cu", "gemm_mma.cu", "probes.cu")
"""The CUDA C files under ``kernels/cuda/`` (one concept each)."""


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
