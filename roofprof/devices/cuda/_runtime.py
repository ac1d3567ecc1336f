"""CUDA runtime helpers shared by the CUDA device, its op implementations and its probes.

No GPU is touched at import time, and CuPy is imported only by :func:`import_cupy`:

* :class:`CudaKernelError`: a CUDA error at or after a kernel launch, naming the kernel.
* :func:`parse_cc`, :func:`dtype_unsupported`: compute capability and what it allows.
* :func:`memory_refusal`, :func:`flush_bytes_for`: memory policy (90 % of free memory;
  L2 flush of at least twice the L2).
* :class:`CudaEventClock`: a :class:`roofprof.timing.Clock` from two CUDA events.
* :class:`KernelModules`: the CUDA C sources of ``kernels/cuda`` compiled by NVRTC.
* :func:`kernels_module`: ``roofprof.kernels.<name>`` (see :mod:`roofprof._resources`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

from roofprof._resources import kernels_module
from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.units import fmt_bytes

__all__ = [
    "INSTALL_HINT",
    "MIN_FLUSH_BYTES",
    "USABLE_FRACTION",
    "CudaEventClock",
    "CudaKernelError",
    "KernelModules",
    "cuda_error_types",
    "cuda_message",
    "dtype_unsupported",
    "flush_bytes_for",
    "fmt_bytes",
    "import_cupy",
    "kernels_module",
    "memory_refusal",
    "nvrtc_version",
    "parse_cc",
]


#: At most this fraction of the free device memory is handed out (the rest is headroom for
#: cuBLAS workspaces, the CUDA context growing, torch's allocator).
USABLE_FRACTION = 0.9
#: The flush buffer is at least this large, and at least twice the L2.
MIN_FLUSH_BYTES = 64 * 1024**2
INSTALL_HINT = "pip install 'roofprof[cuda12]' (CUDA 12 driver) or 'roofprof[cuda13]' (CUDA 13)"

# Compute capability needed by each (path, dtype). Paths: "mma.sync" (probes.cu, gemm_mma.cu),
# "fma" (CUDA-core probes), "gemv" (gemv.cu), "cublas" (cuBLAS GEMM).
_MIN_CC: dict[tuple[str, str], tuple[int, int]] = {
    ("mma.sync", "bf16"): (8, 0),
    ("mma.sync", "fp16"): (8, 0),
    ("mma.sync", "tf32"): (8, 0),
    ("mma.sync", "int8"): (8, 0),
    ("mma.sync", "fp8"): (8, 9),
    ("fma", "fp64"): (5, 0),
    ("fma", "fp32"): (5, 0),
    ("fma", "fp16x2"): (5, 3),
    ("fma", "bf16x2"): (8, 0),
    ("gemv", "bf16"): (8, 0),
    ("gemv", "fp16"): (7, 0),
    ("cublas", "fp64"): (5, 0),
    ("cublas", "fp32"): (5, 0),
    ("cublas", "tf32"): (8, 0),
    ("cublas", "fp16"): (7, 0),
    ("cublas", "bf16"): (8, 0),
}


class CudaKernelError(RuntimeError):
    """A CUDA error at or after a kernel launch; the message names the kernel.

    Errors such as an illegal address are sticky: the CUDA context is unusable afterwards,
    and every later call fails too (``roofprof selftest`` records this and moves on).
    """


# --------------------------------------------------------------------------- helpers


def parse_cc(value: Any) -> tuple[int, int]:
    """Compute capability from CuPy's ``"90"``, ``"8.9"``, ``(9, 0)`` or ``90``.

    >>> parse_cc("90"), parse_cc("8.9"), parse_cc((12, 0)), parse_cc(75)
    ((9, 0), (8, 9), (12, 0), (7, 5))
    """
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    text = str(value).strip()
    if "." in text:
        major, minor = text.split(".", 1)
        return int(major), int(minor)
    number = int(text)
    return number // 10, number % 10


def dtype_unsupported(cc: tuple[int, int], dtype: str, path: str) -> str | None:
    """Why ``dtype`` cannot run on ``path`` on a GPU of compute capability ``cc`` (None: it can).

    ``path`` is ``mma.sync``, ``fma``, ``gemv`` or ``cublas``.

    >>> dtype_unsupported((8, 0), "fp8", "mma.sync")
    'fp8 mma.sync needs compute capability 8.9 or newer (sm_89+); this GPU is sm_80'
    >>> dtype_unsupported((9, 0), "fp8", "mma.sync") is None
    True
    >>> dtype_unsupported((9, 0), "fp8", "cublas")
    'no cublas path for fp8 here'
    """
    need = _MIN_CC.get((path, dtype))
    if need is None:
        return f"no {path} path for {dtype} here"
    if tuple(cc) < need:
        return (
            f"{dtype} {path} needs compute capability {need[0]}.{need[1]} or newer "
            f"(sm_{need[0]}{need[1]}+); this GPU is sm_{cc[0]}{cc[1]}"
        )
    return None


def memory_refusal(
    need_bytes: float,
    free_bytes: float,
    what: str,
    label: str = "the GPU",
    fraction: float = USABLE_FRACTION,
) -> str | None:
    """The refusal message when ``need_bytes`` exceed ``fraction`` of ``free_bytes`` (None: fits).

    >>> msg = memory_refusal(10 * 2**30, 8 * 2**30, "op q_proj", "cuda:0")
    >>> print(msg)  # doctest: +NORMALIZE_WHITESPACE
    op q_proj needs 10.00 GiB of device memory but only 8.00 GiB of cuda:0 is free
    (at most 90% of it is used); free memory or use smaller shapes
    >>> memory_refusal(1 * 2**30, 8 * 2**30, "x") is None
    True
    """
    if need_bytes <= fraction * free_bytes:
        return None
    return (
        f"{what} needs {fmt_bytes(need_bytes)} of device memory "
        f"but only {fmt_bytes(free_bytes)} of "
        f"{label} is free (at most {fraction:.0%} of it is used); free memory or use smaller shapes"
    )


def flush_bytes_for(l2_bytes: int) -> int:
    """Size of the L2 flush buffer: at least twice the L2 and at least 64 MiB, in whole MiB.

    >>> flush_bytes_for(50 * 10**6) // 2**20, flush_bytes_for(4 * 2**20) // 2**20
    (96, 64)
    """
    return max(MIN_FLUSH_BYTES, int(math.ceil(2 * max(0, l2_bytes) / 2**20)) * 2**20)


def nvrtc_version(cp: Any) -> tuple[int, int] | None:
    """``(major, minor)`` of the NVRTC this CuPy compiles with (``cupy.cuda.nvrtc.getVersion()``),
    or None when it cannot be asked (no NVRTC, a CuPy without the call). Never raises.

    Which NVRTC CuPy uses depends on the process: a ``libnvrtc`` that torch loaded first wins,
    so this is the version that compiles ``kernels/cuda``, not the toolkit's.
    """
    try:
        major, minor = cp.cuda.nvrtc.getVersion()
        return int(major), int(minor)
    except Exception:  # noqa: BLE001 - any failure means "unknown"
        return None


def import_cupy():
    """``import cupy``, or :class:`DeviceUnavailableError` with the install hint."""
    try:
        import cupy
    except ImportError as exc:
        raise DeviceUnavailableError(f"CuPy is not installed ({exc}); {INSTALL_HINT}") from exc
    return cupy


def cuda_error_types(cp: Any) -> tuple[type[BaseException], ...]:
    """The CUDA error classes of this CuPy (runtime, driver, cuBLAS) for ``except`` clauses."""
    types: list[type[BaseException]] = []
    for path in (
        "cupy_backends.cuda.api.runtime",
        "cupy_backends.cuda.api.driver",
        "cupy_backends.cuda.libs.cublas",
    ):
        try:
            mod = importlib.import_module(path)
        except Exception:  # noqa: BLE001 - a missing library (e.g. no cuBLAS) just drops its class
            continue
        for name in ("CUDARuntimeError", "CUDADriverError", "CUBLASError"):
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                types.append(cls)
    for holder in (
        getattr(getattr(cp, "cuda", None), "runtime", None),
        getattr(getattr(cp, "cuda", None), "driver", None),
    ):
        for name in ("CUDARuntimeError", "CUDADriverError"):
            cls = getattr(holder, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in types:
                types.append(cls)
    return tuple(types) or (RuntimeError,)


def cuda_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


# --------------------------------------------------------------------------- clock


class CudaEventClock:
    """A :class:`roofprof.timing.Clock` from two CUDA events on the current stream.

    ``start()`` records the start event (no host synchronisation: work queued earlier on the
    stream, e.g. a cache flush, completes before the event fires, so it stays outside the
    interval, and the timed work queues right behind it); ``stop()`` records the end event,
    waits for it and returns ``cupy.cuda.get_elapsed_time(start, end) / 1000`` seconds. A CUDA
    error raised while waiting becomes :class:`CudaKernelError` naming ``context()`` (the
    last kernel launched).

    ``pre_start`` (optional) is called before the start event is recorded: the CUDA device
    queues a short delay kernel there (``probe_delay_ns``, 80 µs of ``%globaltimer``), so that
    the host has queued the timed work before the GPU reaches the start event. The interval
    then holds GPU time only, not the host's launch overhead (large for Numba and torch
    launches of microsecond kernels); the host issue rate is a separate figure.

    Example (on a GPU)::

        clock = CudaEventClock(cupy)
        clock.start(); kernel(...); seconds = clock.stop()
    """

    name = "cuda_event"

    def __init__(
        self,
        cupy_module: Any,
        context: Callable[[], str] | None = None,
        pre_start: Callable[[], Any] | None = None,
    ):
        self._cp = cupy_module
        self._context = context or (lambda: "the timed work")
        self._pre_start = pre_start
        self._errors = cuda_error_types(cupy_module)
        self._start = cupy_module.cuda.Event()
        self._end = cupy_module.cuda.Event()
        self._running = False

    def start(self) -> None:
        if self._pre_start is not None:
            self._pre_start()
        try:
            self._start.record()
        except self._errors as exc:
            raise CudaKernelError(
                f"CUDA error before {self._context()}: {cuda_message(exc)}"
            ) from exc
        self._running = True

    def stop(self) -> float:
        if not self._running:
            raise RuntimeError("CudaEventClock.stop() called before start()")
        self._running = False
        try:
            self._end.record()
            self._end.synchronize()
            ms = self._cp.cuda.get_elapsed_time(self._start, self._end)
        except self._errors as exc:
            raise CudaKernelError(f"CUDA error in {self._context()}: {cuda_message(exc)}") from exc
        return float(ms) / 1000.0


# --------------------------------------------------------------------------- kernels


class KernelModules:
    """The CUDA C sources of ``kernels/cuda``, compiled on first use by NVRTC (``cupy.RawModule``).

    ``function(entry)`` finds the source of ``entry`` in ``cuda_models.ENTRY_SIGNATURES``,
    compiles that file once (timing the compile) and returns the ``RawKernel``. A compile
    failure raises :class:`DeviceUnavailableError` with the NVRTC log's first lines and is
    remembered, so later calls fail fast with the same reason.
    """

    def __init__(self, cupy_module: Any, options: tuple[str, ...] | None = None):
        self._cp = cupy_module
        self._cm = kernels_module("cuda_models")
        self.options = tuple(options) if options is not None else tuple(self._cm.nvrtc_options())
        self._modules: dict[str, Any] = {}
        self._failed: dict[str, str] = {}
        self._functions: dict[str, Any] = {}
        self.compile_s: dict[str, float] = {}

    @property
    def models(self):
        """The ``cuda_models`` module (launch plans, FLOP/byte models)."""
        return self._cm

    def module(self, source: str) -> Any:
        """The compiled ``RawModule`` of one source file (``probes.cu``, ``gemv.cu``,
        ``gemm_mma.cu``)."""
        if source in self._failed:
            raise DeviceUnavailableError(self._failed[source])
        if source not in self._modules:
            import time

            code = self._cm.source_path(source).read_text(encoding="utf-8")
            t0 = time.perf_counter()
            try:
                mod = self._cp.RawModule(code=code, options=self.options)
                mod.compile()
            except Exception as exc:  # noqa: BLE001 - CompileException, missing headers, NVRTC errors
                log = str(exc).strip().splitlines()
                reason = (
                    f"kernels/cuda/{source} did not compile under NVRTC with "
                    f"{' '.join(self.options)}: " + " | ".join(log[:6])
                )
                self._failed[source] = reason
                raise DeviceUnavailableError(reason) from exc
            self.compile_s[source] = time.perf_counter() - t0
            self._modules[source] = mod
        return self._modules[source]

    def function(self, entry: str) -> Any:
        """The ``RawKernel`` of one entry point (``gemv_bf16_m1``, ``probe_fma_fp32``...)."""
        if entry not in self._functions:
            sig = self._cm.ENTRY_SIGNATURES.get(entry)
            if sig is None:
                raise ConfigError(f"unknown CUDA C entry point {entry!r}")
            self._functions[entry] = self.module(sig[0]).get_function(entry)
        return self._functions[entry]
