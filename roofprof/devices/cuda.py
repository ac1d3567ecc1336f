"""The CUDA device: one NVIDIA GPU through CuPy (memory, streams, events) and NVML (identity, telemetry).

``CudaDevice(index)`` is what ``roofprof.devices.select("cuda:N")`` opens. Its constructor
raises :class:`~roofprof.errors.DeviceUnavailableError` with a one-line reason when CuPy is
not installed, the driver is missing or too old, or there is no such GPU; NVML is optional
(without it the identity comes from CUDA alone and telemetry is "unavailable").

* **Identity** (:func:`read_identity`): SMs, L2, memory, clocks, compute capability from CUDA
  device attributes; name, driver, power limit and maximum SM clock from NVML; the datasheet
  row from :func:`roofprof.specs.match_gpu`.
* **Clock** (:class:`CudaEventClock`): CUDA events on the current stream; elapsed time from
  ``cupy.cuda.get_elapsed_time`` (milliseconds → seconds). A CUDA error surfacing at the end
  event names the last kernel launched.
* **Flush**: ``cudaMemsetAsync`` over a buffer of at least twice the L2 (64 MiB minimum).
* **Memory**: :meth:`CudaDevice.free_memory_bytes` is ``cudaMemGetInfo`` free plus what CuPy's
  pool holds unused; :meth:`CudaDevice.require` refuses an allocation *before* making it
  (:class:`~roofprof.errors.ConfigError` with the numbers) when it would exceed 90 % of that.
* **Kernels** (:class:`KernelModules`): the CUDA C sources of ``kernels/cuda`` compiled by
  NVRTC through ``cupy.RawModule`` with ``cuda_models.nvrtc_options()``; :meth:`CudaDevice.launch`
  launches an entry point and turns CUDA errors into :class:`CudaKernelError` naming it.
* **Dtypes by architecture** (:func:`dtype_unsupported`): e.g. fp8 ``mma.sync`` before sm_89
  is skipped with a reason, never run.
* **Probes** (``roofprof.devices.cuda_probes``) and **op implementations**
  (``roofprof.devices.cuda_impls``) live in their own modules.

Nothing here touches a GPU at import time: ``import roofprof.devices.cuda`` works on any
machine, with or without CuPy.

Example (on a machine with a GPU)::

    from roofprof.devices import select
    dev = select("cuda:0")
    dev.info.name, dev.info.compute_units, dev.info.spec_id
    clock = dev.clock(); clock.start(); dev.flush(); seconds = clock.stop()
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from roofprof.devices.base import DeviceInfo
from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.units import fmt_bytes

#: At most this fraction of the free device memory is handed out (the rest is headroom for
#: cuBLAS workspaces, the CUDA context growing, torch's allocator).
USABLE_FRACTION = 0.9
#: The flush buffer is at least this large, and at least twice the L2.
MIN_FLUSH_BYTES = 64 * 1024**2
#: Length of the delay kernel queued before each timed interval (hides host launch overhead).
DELAY_TARGET_S = 40e-6
INSTALL_HINT = "pip install 'roofprof[cuda12]' (CUDA 12 driver) or 'roofprof[cuda13]' (CUDA 13)"

# Compute capability needed by each (path, dtype). Paths: "mma.sync" (probes.cu, gemm_mma.cu),
# "fma" (CUDA-core probes), "gemv" (gemv.cu), "cublas" (cuBLAS GEMM).
_MIN_CC: dict[tuple[str, str], tuple[int, int]] = {
    ("mma.sync", "bf16"): (8, 0), ("mma.sync", "fp16"): (8, 0), ("mma.sync", "tf32"): (8, 0),
    ("mma.sync", "int8"): (8, 0), ("mma.sync", "fp8"): (8, 9),
    ("fma", "fp64"): (5, 0), ("fma", "fp32"): (5, 0), ("fma", "fp16x2"): (5, 3), ("fma", "bf16x2"): (8, 0),
    ("gemv", "bf16"): (8, 0), ("gemv", "fp16"): (7, 0),
    ("cublas", "fp64"): (5, 0), ("cublas", "fp32"): (5, 0), ("cublas", "tf32"): (8, 0),
    ("cublas", "fp16"): (7, 0), ("cublas", "bf16"): (8, 0),
}


class CudaKernelError(RuntimeError):
    """A CUDA error at or after a kernel launch; the message names the kernel.

    Errors such as an illegal address are sticky: the CUDA context is unusable afterwards,
    and every later call fails too (``roofprof selftest`` records this and moves on).
    """


# --------------------------------------------------------------------------- helpers


def kernels_module(name: str):
    """``roofprof.kernels.<name>`` (installed package), or ``kernels.<name>`` from a checkout.

    Raises ModuleNotFoundError for a module missing in both places, and lets an import
    error inside the module (e.g. numba missing) propagate.
    """
    try:
        return importlib.import_module(f"roofprof.kernels.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in ("roofprof.kernels", f"roofprof.kernels.{name}"):
            raise
    return importlib.import_module(f"kernels.{name}")


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
        return (f"{dtype} {path} needs compute capability {need[0]}.{need[1]} or newer "
                f"(sm_{need[0]}{need[1]}+); this GPU is sm_{cc[0]}{cc[1]}")
    return None


def memory_refusal(need_bytes: float, free_bytes: float, what: str, label: str = "the GPU",
                   fraction: float = USABLE_FRACTION) -> str | None:
    """The refusal message when ``need_bytes`` exceed ``fraction`` of ``free_bytes`` (None: fits).

    >>> memory_refusal(10 * 2**30, 8 * 2**30, "op q_proj", "cuda:0")
    'op q_proj needs 10.00 GiB of device memory but only 8.00 GiB of cuda:0 is free (at most 90% of it is used); free memory or use smaller shapes'
    >>> memory_refusal(1 * 2**30, 8 * 2**30, "x") is None
    True
    """
    if need_bytes <= fraction * free_bytes:
        return None
    return (f"{what} needs {fmt_bytes(need_bytes)} of device memory but only {fmt_bytes(free_bytes)} of "
            f"{label} is free (at most {fraction:.0%} of it is used); free memory or use smaller shapes")


def flush_bytes_for(l2_bytes: int) -> int:
    """Size of the L2 flush buffer: at least twice the L2 and at least 64 MiB, in whole MiB.

    >>> flush_bytes_for(50 * 10**6) // 2**20, flush_bytes_for(4 * 2**20) // 2**20
    (96, 64)
    """
    return max(MIN_FLUSH_BYTES, int(math.ceil(2 * max(0, l2_bytes) / 2**20)) * 2**20)


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise DeviceUnavailableError(f"CuPy is not installed ({exc}); {INSTALL_HINT}") from exc
    return cupy


def _cuda_error_types(cp: Any) -> tuple[type[BaseException], ...]:
    """The CUDA error classes of this CuPy (runtime, driver, cuBLAS) for ``except`` clauses."""
    types: list[type[BaseException]] = []
    for path in ("cupy_backends.cuda.api.runtime", "cupy_backends.cuda.api.driver",
                 "cupy_backends.cuda.libs.cublas"):
        try:
            mod = importlib.import_module(path)
        except Exception:  # noqa: BLE001 - a missing library (e.g. no cuBLAS) just drops its class
            continue
        for name in ("CUDARuntimeError", "CUDADriverError", "CUBLASError"):
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                types.append(cls)
    for holder in (getattr(getattr(cp, "cuda", None), "runtime", None), getattr(getattr(cp, "cuda", None), "driver", None)):
        for name in ("CUDARuntimeError", "CUDADriverError"):
            cls = getattr(holder, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in types:
                types.append(cls)
    return tuple(types) or (RuntimeError,)


def _nvml_error_types(nv: Any) -> tuple[type[BaseException], ...]:
    cls = getattr(nv, "NVMLError", None)
    return (cls,) if isinstance(cls, type) and issubclass(cls, BaseException) else (RuntimeError,)


# --------------------------------------------------------------------------- identity


def _attr(cp: Any, name: str, index: int) -> int | None:
    runtime = cp.cuda.runtime
    code = getattr(runtime, f"cudaDevAttr{name}", None)
    if code is None:
        return None
    try:
        return int(runtime.deviceGetAttribute(code, index))
    except Exception:  # noqa: BLE001 - an attribute this runtime/driver lacks is simply unknown
        return None


def _nvml_identity(nv: Any, pci_bus_id: str | None, index: int) -> tuple[dict[str, Any], str]:
    """NVML facts about the GPU (name, driver, power limit, max SM clock, NVML index), or why not."""
    if nv is None:
        try:
            import pynvml as nv  # noqa: PLC0415
        except ImportError:
            return {}, "nvidia-ml-py (pynvml) is not installed"
    errors = _nvml_error_types(nv)
    try:
        nv.nvmlInit()
    except errors as exc:
        return {}, f"NVML unavailable: {exc}"
    out: dict[str, Any] = {}
    try:
        handle, nvml_index = None, index
        if pci_bus_id:
            try:
                for i in range(nv.nvmlDeviceGetCount()):
                    h = nv.nvmlDeviceGetHandleByIndex(i)
                    if same_pci_bus(nv.nvmlDeviceGetPciInfo(h).busId, pci_bus_id):
                        handle, nvml_index = h, i
                        break
            except (*errors, AttributeError):
                handle, nvml_index = None, index
        if handle is None:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        out["nvml_index"] = nvml_index

        def get(key: str, fn: Callable[[], Any]) -> None:
            try:
                value = fn()
            except (*errors, AttributeError):
                return
            out[key] = value.decode() if isinstance(value, bytes) else value

        get("name", lambda: nv.nvmlDeviceGetName(handle))
        get("driver", lambda: nv.nvmlSystemGetDriverVersion())
        get("power_limit_mw", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
        clock_sm = getattr(nv, "NVML_CLOCK_SM", 1)
        clock_mem = getattr(nv, "NVML_CLOCK_MEM", 2)
        get("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, clock_sm))
        get("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, clock_mem))
        return out, ""
    except errors as exc:
        return out, f"NVML could not describe GPU {index}: {exc}"
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def same_pci_bus(a: Any, b: Any) -> bool:
    """Whether two PCI bus ids name the same device (NVML pads the domain to 8 digits, CUDA to 4).

    >>> same_pci_bus(b"00000000:1B:00.0", "0000:1b:00.0")
    True
    """
    def norm(x: Any) -> str:
        text = x.decode() if isinstance(x, bytes) else str(x)
        return text.strip().lower().split(":", 1)[-1]

    return norm(a) == norm(b)


def read_identity(cp: Any, index: int, nvml: Any = None) -> tuple[DeviceInfo, dict[str, Any]]:
    """The :class:`DeviceInfo` of GPU ``index`` and the raw facts behind it.

    CUDA attributes give SMs, L2, memory, clocks (kHz attributes; absent in some CUDA 13
    runtimes, then NVML's maximum SM clock) and compute capability; NVML adds the marketing
    name, driver, enforced power limit. ``spec_id`` is the matching ``data/gpus.json`` row.
    ``cp``/``nvml`` are the modules (tests pass fakes).

    Raises:
        DeviceUnavailableError: no such GPU or CUDA unusable (the CUDA error in the message).
    """
    from roofprof.specs import match_gpu

    errors = _cuda_error_types(cp)
    try:
        count = int(cp.cuda.runtime.getDeviceCount())
    except errors as exc:
        raise DeviceUnavailableError(f"no usable CUDA GPU: {_cuda_message(exc)} "
                                     "(NVIDIA driver missing, too old for this CuPy, or no GPU)") from exc
    if count < 1:
        raise DeviceUnavailableError("CUDA reports no GPU")
    if not 0 <= index < count:
        raise DeviceUnavailableError(f"cuda:{index} does not exist: CUDA sees {count} GPU(s) "
                                     f"(cuda:0..cuda:{count - 1})")
    try:
        dev = cp.cuda.Device(index)
        cc = parse_cc(dev.compute_capability)
        with dev:
            free, total = cp.cuda.runtime.memGetInfo()
        try:
            pci = str(dev.pci_bus_id)
        except Exception:  # noqa: BLE001
            pci = None
        props: dict[str, Any] = {}
        try:
            props = dict(cp.cuda.runtime.getDeviceProperties(index))
        except Exception:  # noqa: BLE001 - properties are a fallback for the name only
            props = {}
    except errors as exc:
        raise DeviceUnavailableError(f"cuda:{index} is not usable: {_cuda_message(exc)}") from exc
    facts: dict[str, Any] = {
        "sm_count": _attr(cp, "MultiProcessorCount", index),
        "l2_bytes": _attr(cp, "L2CacheSize", index),
        "clock_khz": _attr(cp, "ClockRate", index),
        "memory_clock_khz": _attr(cp, "MemoryClockRate", index),
        "memory_bus_bits": _attr(cp, "GlobalMemoryBusWidth", index),
        "smem_per_sm_bytes": _attr(cp, "MaxSharedMemoryPerMultiprocessor", index),
        "compute_capability": cc, "memory_total_bytes": int(total), "memory_free_bytes": int(free),
        "pci_bus_id": pci,
    }
    nv_facts, nvml_reason = _nvml_identity(nvml, pci, index)
    facts["nvml"] = nv_facts
    facts["nvml_reason"] = nvml_reason
    name = nv_facts.get("name") or props.get("name") or f"CUDA GPU {index}"
    name = name.decode() if isinstance(name, bytes) else str(name)
    sm = facts["sm_count"] or int(props.get("multiProcessorCount") or 0)
    l2 = facts["l2_bytes"] or int(props.get("l2CacheSize") or 0)
    clock_mhz = nv_facts.get("max_sm_clock_mhz") or (facts["clock_khz"] / 1000.0 if facts["clock_khz"] else None)
    spec = match_gpu(name)
    try:
        runtime_version = str(cp.cuda.runtime.runtimeGetVersion())
        driver_cuda = str(cp.cuda.runtime.driverGetVersion())
    except Exception:  # noqa: BLE001
        runtime_version = driver_cuda = "?"
    extra = {
        "compute_capability": f"{cc[0]}.{cc[1]}",
        "arch": f"sm_{cc[0]}{cc[1]}",
        "driver": str(nv_facts.get("driver", "?")),
        "cuda_runtime": runtime_version,
        "cuda_driver_api": driver_cuda,
        "cupy": str(getattr(cp, "__version__", "?")),
        "pci_bus_id": str(pci or "?"),
        "nvml_index": str(nv_facts.get("nvml_index", index)),
        "nvml": "ok" if not nvml_reason else nvml_reason,
    }
    if nv_facts.get("power_limit_mw"):
        extra["power_limit_w"] = f"{nv_facts['power_limit_mw'] / 1000:.0f}"
    if facts["memory_clock_khz"]:
        extra["memory_clock_mhz"] = f"{facts['memory_clock_khz'] / 1000:.0f}"
    if facts["memory_bus_bits"]:
        extra["memory_bus_bits"] = str(facts["memory_bus_bits"])
    if facts["smem_per_sm_bytes"]:
        extra["smem_per_sm_bytes"] = str(facts["smem_per_sm_bytes"])
    info = DeviceInfo(kind="cuda", index=index, name=name, compute_units=int(sm), memory_bytes=int(total),
                      cache_bytes={"l2": int(l2)} if l2 else {}, clock_mhz=float(clock_mhz) if clock_mhz else None,
                      spec_id=spec.id if spec else None, extra=extra, asynchronous=True,
                      shared_host=False, default_dtype="bf16", default_model="llama-3.1-8b",
                      torch_device=f"cuda:{index}", compute_unit_name="SMs")
    return info, facts


def _cuda_message(exc: BaseException) -> str:
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
    queues a short delay kernel there (about 40 µs, one block), so that the host has queued
    the timed work before the GPU reaches the start event. The interval then holds GPU time
    only, not the host's launch overhead (large for Numba and torch launches of
    microsecond kernels); the host issue rate is a separate figure.

    Example (on a GPU)::

        clock = CudaEventClock(cupy)
        clock.start(); kernel(...); seconds = clock.stop()
    """

    name = "cuda_event"

    def __init__(self, cupy_module: Any, context: Callable[[], str] | None = None,
                 pre_start: Callable[[], Any] | None = None):
        self._cp = cupy_module
        self._context = context or (lambda: "the timed work")
        self._pre_start = pre_start
        self._errors = _cuda_error_types(cupy_module)
        self._start = cupy_module.cuda.Event()
        self._end = cupy_module.cuda.Event()
        self._running = False

    def start(self) -> None:
        if self._pre_start is not None:
            self._pre_start()
        try:
            self._start.record()
        except self._errors as exc:
            raise CudaKernelError(f"CUDA error before {self._context()}: {_cuda_message(exc)}") from exc
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
            raise CudaKernelError(f"CUDA error in {self._context()}: {_cuda_message(exc)}") from exc
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
        """The compiled ``RawModule`` of one source file (``probes.cu``, ``gemv.cu``, ``gemm_mma.cu``)."""
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
                reason = (f"kernels/cuda/{source} did not compile under NVRTC with {' '.join(self.options)}: "
                          + " | ".join(log[:6]))
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


# --------------------------------------------------------------------------- device


class CudaDevice:
    """One NVIDIA GPU as a roofprof :class:`~roofprof.devices.base.Device`.

    Args:
        index: CUDA device ordinal (``cuda:N``).
        cupy: the CuPy module (default: ``import cupy``; tests pass a fake).
        nvml: the NVML module (default: ``import pynvml``; tests pass a fake).

    Raises:
        DeviceUnavailableError: CuPy missing, CUDA unusable (no driver, driver too old, no
            GPU), or no GPU ``index``; the message says which and what to install.
    """

    def __init__(self, index: int = 0, *, cupy: Any = None, nvml: Any = None):
        self._cp = cupy if cupy is not None else _import_cupy()
        self._nvml = nvml
        self.errors = _cuda_error_types(self._cp)
        self._info, self.facts = read_identity(self._cp, int(index), nvml)
        self.cc: tuple[int, int] = tuple(self.facts["compute_capability"])  # type: ignore[assignment]
        self._device = self._cp.cuda.Device(int(index))
        self._device.use()
        self._flush_buf = None
        self._flush_value = 0
        self._kernels: KernelModules | None = None
        self.last_kernel = "no kernel yet"
        self._delay: tuple[int, Any] | None = None
        self.delay_note = "not calibrated yet"

    # -- identity ------------------------------------------------------------------
    @property
    def info(self) -> DeviceInfo:
        return self._info

    @property
    def cupy(self) -> Any:
        """The CuPy module this device uses."""
        return self._cp

    @property
    def sm_count(self) -> int:
        return self._info.compute_units

    @property
    def l2_bytes(self) -> int:
        return int(self._info.cache_bytes.get("l2", 0))

    @property
    def spec(self):
        """The datasheet row (:class:`~roofprof.specs.GpuSpec`) or None."""
        from roofprof.specs import load_gpu

        return load_gpu(self._info.spec_id) if self._info.spec_id else None

    def unsupported(self, dtype: str, path: str) -> str | None:
        """Why ``dtype`` cannot run on ``path`` here (see :func:`dtype_unsupported`), or None."""
        return dtype_unsupported(self.cc, dtype, path)

    # -- protocol --------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all queued work; a CUDA error names the last kernel launched."""
        try:
            self._cp.cuda.runtime.deviceSynchronize()
        except self.errors as exc:
            raise CudaKernelError(f"CUDA error after {self.last_kernel}: {_cuda_message(exc)}") from exc

    def clock(self, hide_launch: bool = True) -> CudaEventClock:
        """A CUDA-event clock; ``hide_launch`` queues a ~40 µs delay kernel before each start
        event so the interval excludes the host's launch overhead (see :class:`CudaEventClock`)."""
        return CudaEventClock(self._cp, context=lambda: f"work ending with {self.last_kernel}",
                              pre_start=self._queue_delay if hide_launch else None)

    def _delay_args(self, iters: int, out: Any) -> tuple:
        return (np.int32(iters), np.uint32(0x2545F490), np.uint32(0xFFFFFFFF), out)

    def _queue_delay(self) -> None:
        if self._delay is None:
            self._delay = self._calibrate_delay()
        iters, out = self._delay
        if iters:
            self.launch("probe_fma_fp32", (1, 1, 1), (256, 1, 1), self._delay_args(iters, out))

    def _calibrate_delay(self, target_s: float = DELAY_TARGET_S) -> tuple[int, Any]:
        """Iterations of a one-block ``probe_fma_fp32`` lasting about ``target_s`` (0: disabled)."""
        try:
            out = self._cp.full(256, 0xA5A5A5A5, dtype=self._cp.uint32)
            base = 64
            for _ in range(3):
                self.launch("probe_fma_fp32", (1, 1, 1), (256, 1, 1), self._delay_args(base, out))
            self.synchronize()
            clock = CudaEventClock(self._cp)
            best = math.inf
            for _ in range(3):
                clock.start()
                self.launch("probe_fma_fp32", (1, 1, 1), (256, 1, 1), self._delay_args(base, out))
                best = min(best, clock.stop())
            iters = int(min(1 << 20, max(8, math.ceil(base * target_s / max(best, 1e-7)))))
            self.delay_note = f"launch latency hidden by a {iters}-iteration one-block probe_fma_fp32 (~{target_s * 1e6:.0f} µs)"
            return iters, out
        except (DeviceUnavailableError, CudaKernelError, *self.errors) as exc:
            self.delay_note = f"launch latency not hidden (delay kernel unavailable: {exc})"
            return 0, None

    @property
    def flush_bytes(self) -> int:
        """Bytes the flush writes: ≥ 2× L2 and ≥ 64 MiB (:func:`flush_bytes_for`)."""
        return flush_bytes_for(self.l2_bytes)

    def flush(self) -> None:
        """Evict the L2: ``cudaMemsetAsync`` over :attr:`flush_bytes` on the current stream."""
        cp = self._cp
        if self._flush_buf is None:
            self.require(self.flush_bytes, "the L2 flush buffer")
            self._flush_buf = cp.empty(self.flush_bytes, dtype=cp.uint8)
        self._flush_value ^= 1
        self.memset_async(self._flush_buf, self._flush_value, "L2 flush (cudaMemsetAsync)")

    def memset_async(self, array: Any, value: int, what: str = "cudaMemsetAsync") -> None:
        """``cudaMemsetAsync`` over all bytes of a device array on the current stream."""
        cp = self._cp
        self.last_kernel = what
        try:
            cp.cuda.runtime.memsetAsync(array.data.ptr, int(value), int(array.nbytes), cp.cuda.get_current_stream().ptr)
        except self.errors as exc:
            raise CudaKernelError(f"CUDA error in {what}: {_cuda_message(exc)}") from exc

    def memcpy_d2d(self, dst: Any, src: Any, nbytes: int) -> None:
        """``cudaMemcpyAsync`` device to device of ``nbytes`` on the current stream (CuPy's copy)."""
        cp = self._cp
        self.last_kernel = "cudaMemcpyAsync D2D"
        try:
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, int(nbytes), 3,  # 3: device to device
                                        cp.cuda.get_current_stream().ptr)
        except self.errors as exc:
            raise CudaKernelError(f"CUDA error in cudaMemcpyAsync D2D: {_cuda_message(exc)}") from exc

    def sampler(self, interval_s: float = 0.01):
        from roofprof.telemetry import NullSampler, NvmlSampler

        if self.facts.get("nvml_reason"):
            return NullSampler(self.facts["nvml_reason"])
        index = int(self.facts.get("nvml", {}).get("nvml_index", self._info.index))
        return NvmlSampler(handle_index=index, interval_s=interval_s, nvml=self._nvml)

    def free_memory_bytes(self) -> int:
        """``cudaMemGetInfo`` free bytes plus what CuPy's memory pool holds unused."""
        free, _ = self._cp.cuda.runtime.memGetInfo()
        pooled = 0
        try:
            pool = self._cp.get_default_memory_pool()
            pooled = int(pool.total_bytes() - pool.used_bytes())
        except Exception:  # noqa: BLE001
            pooled = 0
        return int(free) + max(0, pooled)

    def require(self, nbytes: float, what: str) -> None:
        """Refuse, before allocating, ``nbytes`` that would not fit.

        Raises:
            ConfigError: ``nbytes`` > 90 % of :meth:`free_memory_bytes` (the message gives both).
        """
        reason = memory_refusal(nbytes, self.free_memory_bytes(), what, self._info.label)
        if reason:
            raise ConfigError(reason)

    def release_memory(self) -> None:
        """Return CuPy's (and torch's, if loaded) cached blocks to the driver."""
        try:
            self._cp.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001
            pass
        import sys

        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                if torch.cuda.is_initialized():
                    torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass

    def launch_latency(self, launches: int = 200) -> dict[str, float]:
        """``probe_empty`` launch cost: GPU seconds per launch of a back-to-back stream and host
        issue seconds per launch (see ``cuda_probes.launch_latency``)."""
        from roofprof.devices.cuda_probes import launch_latency

        return launch_latency(self, launches)

    def launch_overhead_s(self) -> float:
        """Per-kernel launch cost of an eager pass: torch's issue rate when torch is installed
        (what the validated model pays), else ``max`` of the GPU's per-launch time and the
        host's issue time for ``probe_empty`` (seconds)."""
        from roofprof.devices.base import torch_issue_overhead_s

        issued = torch_issue_overhead_s(self)
        if issued is not None:
            return issued
        lat = self.launch_latency()
        return float(max(lat["gpu_s_per_launch"], lat["host_issue_s_per_launch"]))

    def probes(self) -> tuple:
        from roofprof.devices.cuda_probes import cuda_probes

        return cuda_probes(self)

    def implementations(self) -> tuple:
        from roofprof.devices.cuda_impls import cuda_implementations

        return cuda_implementations(self)

    # -- kernels ---------------------------------------------------------------------
    @property
    def kernels(self) -> KernelModules:
        """The CUDA C modules (compiled on first use)."""
        if self._kernels is None:
            self._kernels = KernelModules(self._cp)
        return self._kernels

    def launch(self, entry: str, grid: tuple[int, ...], block: tuple[int, ...], args: tuple,
               shared_mem: int = 0) -> None:
        """Launch CUDA C entry point ``entry`` on the current stream.

        Raises:
            CudaKernelError: the launch failed (bad configuration, a sticky earlier error);
                the message names ``entry`` with its grid and block.
            DeviceUnavailableError: its source does not compile here.
        """
        fn = self.kernels.function(entry)
        self.last_kernel = entry
        try:
            fn(tuple(grid), tuple(block), args, shared_mem=shared_mem)
        except self.errors as exc:
            raise CudaKernelError(f"CUDA error launching {entry} grid={tuple(grid)} block={tuple(block)}: "
                                  f"{_cuda_message(exc)}") from exc

    def checked(self, what: str) -> None:
        """Synchronise and raise :class:`CudaKernelError` naming ``what`` on a CUDA error."""
        self.last_kernel = what
        self.synchronize()

    def describe(self) -> dict[str, Any]:
        """Identity and raw facts for result files."""
        return {**self._info.to_dict(), "facts": {k: v for k, v in self.facts.items() if k != "nvml"},
                "nvml": dict(self.facts.get("nvml", {})), "clock_delay": self.delay_note,
                "compile_s": dict(self._kernels.compile_s) if self._kernels else {}}


def scale_to_clock(value: float, clock_seen_mhz: float | None, spec_clock_mhz: float | None) -> float | None:
    """A compute rate measured at ``clock_seen_mhz`` restated at ``spec_clock_mhz`` (linear in clock).

    >>> scale_to_clock(60e12, 1800.0, 1980.0) / 1e12
    66.0
    >>> scale_to_clock(60e12, None, 1980.0) is None
    True
    """
    if not clock_seen_mhz or not spec_clock_mhz or clock_seen_mhz <= 0:
        return None
    return value * spec_clock_mhz / clock_seen_mhz


def spec_clocks(spec: Any) -> Mapping[str, float]:
    """``{"vector": MHz, "tensor": MHz}`` of a :class:`~roofprof.specs.GpuSpec` (empty for None)."""
    if spec is None:
        return {}
    return {"vector": float(spec.vector_clock_mhz), "tensor": float(spec.tensor_clock_mhz)}
