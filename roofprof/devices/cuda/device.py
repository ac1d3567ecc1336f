"""The CUDA device: one NVIDIA GPU through CuPy (memory, streams, events) and NVML (identity,
telemetry).

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
* **Flush**: ``cudaMemsetAsync`` over a buffer of at least twice the L2 (64 MiB minimum),
  then one L1-bypassing read pass over it, so no dirty line is left for the timed op to write back.
* **Launch-hiding delay**: ``probe_delay_ns`` (80 µs on ``%globaltimer``) before each start event.
* **Memory**: :meth:`CudaDevice.free_memory_bytes` is ``cudaMemGetInfo`` free plus what CuPy's
  pool holds unused; :meth:`CudaDevice.require` refuses an allocation *before* making it
  (:class:`~roofprof.errors.ConfigError` with the numbers) when it would exceed 90 % of that.
* **Kernels** (:class:`KernelModules`): the CUDA C sources of ``kernels/cuda`` compiled by
  NVRTC through ``cupy.RawModule`` with ``cuda_models.nvrtc_options()``; :meth:`CudaDevice.launch`
  launches an entry point and turns CUDA errors into :class:`CudaKernelError` naming it.
* **Dtypes by architecture** (:func:`dtype_unsupported`): e.g. fp8 ``mma.sync`` before sm_89
  is skipped with a reason, never run.
* **Probes** (:mod:`roofprof.devices.cuda.probes`) and **op implementations**
  (:mod:`roofprof.devices.cuda.impls`) live in their own modules; the runtime helpers
  (clock, kernel modules, memory policy) in :mod:`roofprof.devices.cuda._runtime`.
* **NVML** goes through :mod:`roofprof.devices._nvml`: the device holds one NVML session
  for its lifetime, finds its NVML index by the full PCI bus id (domain included) and,
  when no NVML GPU matches, says telemetry is unavailable instead of guessing an index.

Nothing here touches a GPU at import time: ``import roofprof.devices.cuda`` works on any
machine, with or without CuPy.

Example (on a machine with a GPU)::

    from roofprof.devices import select
    dev = select("cuda:0")
    dev.info.name, dev.info.compute_units, dev.info.spec_id
    clock = dev.clock(); clock.start(); dev.flush(); seconds = clock.stop()
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices import _nvml
from roofprof.devices.base import DeviceInfo, OpImpl, Probe, torch_issue_overhead_s
from roofprof.devices.cuda._runtime import (
    CudaEventClock,
    CudaKernelError,
    KernelModules,
    cuda_error_types,
    cuda_message,
    dtype_unsupported,
    flush_bytes_for,
    import_cupy,
    memory_refusal,
    parse_cc,
)
from roofprof.devices.cuda.impls import cuda_implementations
from roofprof.devices.cuda.probes import cuda_probes, launch_latency
from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.specs import load_gpu, match_gpu
from roofprof.telemetry import NullSampler, NvmlSampler, Sampler

if TYPE_CHECKING:
    from roofprof.roofline.plan import RooflinePlan

__all__ = [
    "DELAY_TARGET_S",
    "CudaDevice",
    "cuda_roofline_plan",
    "read_identity",
    "scale_to_clock",
    "spec_clocks",
]

#: Length of the delay kernel queued before each timed interval (hides host launch overhead):
#: ``probe_delay_ns`` spins this long on ``%globaltimer``, whatever the SM clock.
DELAY_TARGET_S = 80e-6

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
    """NVML facts about the GPU (name, driver, power limit, max SM clock, NVML index), or why not.

    The GPU is found by its full PCI bus id (domain included); without a match the facts are
    empty and the reason says telemetry is unavailable (NVML's index order differs from
    CUDA's under ``CUDA_VISIBLE_DEVICES`` or ``CUDA_DEVICE_ORDER``, so no index is guessed).
    """
    try:
        with _nvml.session(nv) as nvm:
            nvml_index = _nvml.index_for_pci(pci_bus_id, nvm) if pci_bus_id else None
            if nvml_index is None:
                return {}, (
                    f"NVML lists no GPU at PCI bus id {pci_bus_id} (cuda:{index}); "
                    "telemetry unavailable"
                    if pci_bus_id
                    else f"cuda:{index} has no PCI bus id to match in NVML; telemetry unavailable"
                )
            handle = _nvml.query("nvmlDeviceGetHandleByIndex", nvml_index, default=None, nvml=nvm)
            if handle is None:
                return {}, f"NVML could not describe GPU {index}"
            out: dict[str, Any] = {"nvml_index": nvml_index}
            clock_sm = getattr(nvm, "NVML_CLOCK_SM", 1)
            clock_mem = getattr(nvm, "NVML_CLOCK_MEM", 2)
            for key, fn, args in (
                ("name", "nvmlDeviceGetName", (handle,)),
                ("driver", "nvmlSystemGetDriverVersion", ()),
                ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", (handle,)),
                ("max_sm_clock_mhz", "nvmlDeviceGetMaxClockInfo", (handle, clock_sm)),
                ("max_mem_clock_mhz", "nvmlDeviceGetMaxClockInfo", (handle, clock_mem)),
            ):
                value = _nvml.query(fn, *args, nvml=nvm)
                if value is not _nvml.NA:
                    out[key] = value
            return out, ""
    except _nvml.NvmlUnavailable as exc:
        return {}, exc.reason


def read_identity(cp: Any, index: int, nvml: Any = None) -> tuple[DeviceInfo, dict[str, Any]]:
    """The :class:`DeviceInfo` of GPU ``index`` and the raw facts behind it.

    CUDA attributes give SMs, L2, memory, clocks (kHz attributes; absent in some CUDA 13
    runtimes, then NVML's maximum SM clock) and compute capability; NVML adds the marketing
    name, driver, enforced power limit. ``spec_id`` is the matching ``data/gpus.json`` row.
    ``cp``/``nvml`` are the modules (tests pass fakes).

    Raises:
        DeviceUnavailableError: no such GPU or CUDA unusable (the CUDA error in the message).
    """
    errors = cuda_error_types(cp)
    try:
        count = int(cp.cuda.runtime.getDeviceCount())
    except errors as exc:
        raise DeviceUnavailableError(
            f"no usable CUDA GPU: {cuda_message(exc)} "
            "(NVIDIA driver missing, too old for this CuPy, or no GPU)"
        ) from exc
    if count < 1:
        raise DeviceUnavailableError("CUDA reports no GPU")
    if not 0 <= index < count:
        raise DeviceUnavailableError(
            f"cuda:{index} does not exist: CUDA sees {count} GPU(s) (cuda:0..cuda:{count - 1})"
        )
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
        raise DeviceUnavailableError(f"cuda:{index} is not usable: {cuda_message(exc)}") from exc
    facts: dict[str, Any] = {
        "sm_count": _attr(cp, "MultiProcessorCount", index),
        "l2_bytes": _attr(cp, "L2CacheSize", index),
        "clock_khz": _attr(cp, "ClockRate", index),
        "memory_clock_khz": _attr(cp, "MemoryClockRate", index),
        "memory_bus_bits": _attr(cp, "GlobalMemoryBusWidth", index),
        "smem_per_sm_bytes": _attr(cp, "MaxSharedMemoryPerMultiprocessor", index),
        "compute_capability": cc,
        "memory_total_bytes": int(total),
        "memory_free_bytes": int(free),
        "pci_bus_id": pci,
    }
    nv_facts, nvml_reason = _nvml_identity(nvml, pci, index)
    facts["nvml"] = nv_facts
    facts["nvml_reason"] = nvml_reason
    name = nv_facts.get("name") or props.get("name") or f"CUDA GPU {index}"
    name = name.decode() if isinstance(name, bytes) else str(name)
    sm = facts["sm_count"] or int(props.get("multiProcessorCount") or 0)
    l2 = facts["l2_bytes"] or int(props.get("l2CacheSize") or 0)
    clock_mhz = nv_facts.get("max_sm_clock_mhz") or (
        facts["clock_khz"] / 1000.0 if facts["clock_khz"] else None
    )
    spec = match_gpu(name)
    if spec is not None and not spec.measurable:
        raise DeviceUnavailableError(
            f"{name} is an {spec.vendor.upper()} GPU: no device backend of roofprof measures it "
            f"(its datasheet row is analytic only: roofprof predict --gpu {spec.id})"
        )
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
    info = DeviceInfo(
        kind="cuda",
        index=index,
        name=name,
        compute_units=int(sm),
        memory_bytes=int(total),
        cache_bytes={"l2": int(l2)} if l2 else {},
        clock_mhz=float(clock_mhz) if clock_mhz else None,
        spec_id=spec.id if spec else None,
        extra=extra,
        asynchronous=True,
        spec_note="" if spec else f"{name!r} matches no row of data/gpus.json",
        shared_host=False,
        default_dtype="bf16",
        default_model="llama-3.1-8b",
        torch_device=f"cuda:{index}",
        compute_unit_name="SMs",
    )
    return info, facts


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
        self._cp = cupy if cupy is not None else import_cupy()
        self._nvml = nvml
        self.errors = cuda_error_types(self._cp)
        self._info, self.facts = read_identity(self._cp, int(index), nvml)
        if not self.facts.get("nvml_reason") and not _nvml.init(nvml):
            # hold the process's NVML session while the device lives: telemetry blocks then
            # start NVML for free instead of enumerating every GPU each time
            weakref.finalize(self, _nvml.shutdown, nvml)
        self.cc: tuple[int, int] = tuple(self.facts["compute_capability"])  # type: ignore[assignment]
        self._device = self._cp.cuda.Device(int(index))
        self._device.use()
        self._flush_buf = None
        self._flush_value = 0
        self._kernels: KernelModules | None = None
        self.last_kernel = "no kernel yet"
        self._delay: tuple[int, Any] | None = None
        self.delay_note = "not checked yet"
        self._flush_reader: Any = None
        self.flush_note = "no flush yet"

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
            raise CudaKernelError(
                f"CUDA error after {self.last_kernel}: {cuda_message(exc)}"
            ) from exc

    def clock(self, hide_launch: bool = True) -> CudaEventClock:
        """A CUDA-event clock; ``hide_launch`` queues an 80 µs ``probe_delay_ns`` kernel
        (:data:`DELAY_TARGET_S`) before each start event so the interval excludes the host's
        launch overhead (see :class:`CudaEventClock`)."""
        return CudaEventClock(
            self._cp,
            context=lambda: f"work ending with {self.last_kernel}",
            pre_start=self._queue_delay if hide_launch else None,
        )

    def _queue_delay(self) -> None:
        if self._delay is None:
            self._delay = self._check_delay()
        ns, out = self._delay
        if ns:
            self.launch("probe_delay_ns", (1, 1, 1), (32, 1, 1), (np.uint64(ns), out))

    def _check_delay(self, target_s: float = DELAY_TARGET_S) -> tuple[int, Any]:
        """``(ns, out)`` of the launch-hiding delay, ``probe_delay_ns`` spinning ``target_s`` on
        the GPU's ``%globaltimer`` (no calibration: independent of the SM clock and of the
        launch overhead). Checked once: the kernel must report ``out[0] >= ns`` elapsed timer
        nanoseconds; on a failure (no such kernel, a CUDA error, a short spin) the delay is
        disabled (``(0, None)``) and :attr:`delay_note` says why."""
        cm = self.kernels.models
        ns = int(cm.delay_probe_ns(target_s))
        try:
            out = self._cp.zeros(1, dtype=self._cp.uint64)
            self.launch("probe_delay_ns", (1, 1, 1), (32, 1, 1), (np.uint64(ns), out))
            self.checked("probe_delay_ns")
            elapsed = int(self._cp.asnumpy(out)[0])
        except (DeviceUnavailableError, CudaKernelError, *self.errors) as exc:
            self.delay_note = f"launch latency not hidden (delay kernel unavailable: {exc})"
            return 0, None
        if elapsed < ns:
            self.delay_note = (
                f"launch latency not hidden (probe_delay_ns({ns}) reported {elapsed} ns of "
                "%globaltimer, less than asked)"
            )
            return 0, None
        self.delay_note = (
            f"launch latency hidden by probe_delay_ns: a one-warp kernel spinning "
            f"{ns / 1000:.0f} µs on %globaltimer before each start event"
        )
        return ns, out

    @property
    def flush_bytes(self) -> int:
        """Bytes the flush writes then reads: ≥ 2× L2 and ≥ 64 MiB (:func:`flush_bytes_for`)."""
        return flush_bytes_for(self.l2_bytes)

    def flush(self) -> None:
        """Evict the L2 and leave it clean: ``cudaMemsetAsync`` over :attr:`flush_bytes`, then one
        ``probe_read_u4`` pass (``ld.global.cg``) over the whole buffer, on the current stream.

        The read evicts the memset's dirty lines (their write-back happens here, before the
        start event, not inside the timed interval) and leaves the L2 full of clean lines of
        the flush buffer. Without the probe kernel (``probes.cu`` does not compile) only the
        memset runs and :attr:`flush_note` says so.
        """
        cp = self._cp
        if self._flush_buf is None:
            self.require(self.flush_bytes, "the L2 flush buffer")
            self._flush_buf = cp.empty(self.flush_bytes, dtype=cp.uint8)
        self._flush_value ^= 1
        self.memset_async(self._flush_buf, self._flush_value, "L2 flush (cudaMemsetAsync)")
        self._flush_read()

    def _flush_read(self) -> None:
        if self._flush_reader is False:
            return
        cm = self.kernels.models
        first = self._flush_reader is None
        if first:
            launch = cm.probe_launch("probe_read_u4", max(1, self.sm_count))
            out = self._cp.zeros(cm.probe_out_words(launch), dtype=self._cp.uint32)
            self._flush_reader = (launch, out)
        launch, out = self._flush_reader
        words = self._flush_buf.view(self._cp.uint32)
        try:
            self.launch(
                launch.entry,
                launch.grid,
                launch.block,
                (words, np.int64(self.flush_bytes // 16), np.int32(1), np.uint32(0xFFFFFFFF), out),
            )
        except DeviceUnavailableError as exc:
            self._flush_reader = False
            self.flush_note = f"L2 flush is a memset only (its read pass is unavailable: {exc})"
            return
        if first:
            self.flush_note = (
                "L2 flush: cudaMemsetAsync then one probe_read_u4 (ld.global.cg) pass over "
                f"{self.flush_bytes >> 20} MiB, so the L2 holds clean lines"
            )

    def memset_async(self, array: Any, value: int, what: str = "cudaMemsetAsync") -> None:
        """``cudaMemsetAsync`` over all bytes of a device array on the current stream."""
        cp = self._cp
        self.last_kernel = what
        try:
            cp.cuda.runtime.memsetAsync(
                array.data.ptr, int(value), int(array.nbytes), cp.cuda.get_current_stream().ptr
            )
        except self.errors as exc:
            raise CudaKernelError(f"CUDA error in {what}: {cuda_message(exc)}") from exc

    def memcpy_d2d(self, dst: Any, src: Any, nbytes: int) -> None:
        """``cudaMemcpyAsync`` device to device of ``nbytes`` on the current stream (CuPy's
        copy)."""
        cp = self._cp
        self.last_kernel = "cudaMemcpyAsync D2D"
        try:
            cp.cuda.runtime.memcpyAsync(
                dst.data.ptr,
                src.data.ptr,
                int(nbytes),
                3,  # 3: device to device
                cp.cuda.get_current_stream().ptr,
            )
        except self.errors as exc:
            raise CudaKernelError(
                f"CUDA error in cudaMemcpyAsync D2D: {cuda_message(exc)}"
            ) from exc

    def sampler(self, interval_s: float = 0.01) -> Sampler:
        """NVML telemetry of this GPU (its NVML index matched by PCI bus id), or a
        :class:`~roofprof.telemetry.NullSampler` saying why not."""
        if self.facts.get("nvml_reason"):
            return NullSampler(self.facts["nvml_reason"])
        index = int(self.facts["nvml"]["nvml_index"])
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
        issue seconds per launch (see :func:`roofprof.devices.cuda.probes.launch_latency`)."""
        return launch_latency(self, launches)

    def launch_overhead_s(self) -> float:
        """Per-kernel launch cost of an eager pass: torch's issue rate when torch is installed
        (what the validated model pays), else ``max`` of the GPU's per-launch time and the
        host's issue time for ``probe_empty`` (seconds)."""
        issued = torch_issue_overhead_s(self)
        if issued is not None:
            return issued
        lat = self.launch_latency()
        return float(max(lat["gpu_s_per_launch"], lat["host_issue_s_per_launch"]))

    def probes(self) -> tuple[Probe, ...]:
        """The probe catalogue (:func:`roofprof.devices.cuda.probes.cuda_probes`)."""
        return cuda_probes(self)

    def implementations(self) -> tuple[OpImpl, ...]:
        """The op implementations (:func:`roofprof.devices.cuda.impls.cuda_implementations`)."""
        return cuda_implementations(self)

    def small_op_batching(self, impl: OpImpl) -> OpImpl:
        """``impl`` timing ops estimated under 20 µs as N calls per CUDA-event pair
        (:class:`~roofprof.devices.cuda.batching.SmallOpBatching`): how the profiler wraps
        ``torch-eager``, as :meth:`implementations` wraps its own."""
        from roofprof.devices.cuda.batching import SmallOpBatching

        return SmallOpBatching(impl, self)

    def roofline_plan(self, name: str = "full") -> RooflinePlan:
        """The GPU's ``full``, ``quick`` or ``test`` roofline plan (:func:`cuda_roofline_plan`)."""
        return cuda_roofline_plan(self._info, name)

    # -- kernels ---------------------------------------------------------------------
    @property
    def kernels(self) -> KernelModules:
        """The CUDA C modules (compiled on first use)."""
        if self._kernels is None:
            self._kernels = KernelModules(self._cp)
        return self._kernels

    def launch(
        self,
        entry: str,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        args: tuple,
        shared_mem: int = 0,
    ) -> None:
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
            raise CudaKernelError(
                f"CUDA error launching {entry} grid={tuple(grid)} block={tuple(block)}: "
                f"{cuda_message(exc)}"
            ) from exc

    def checked(self, what: str) -> None:
        """Synchronise and raise :class:`CudaKernelError` naming ``what`` on a CUDA error."""
        self.last_kernel = what
        self.synchronize()

    def describe(self) -> dict[str, Any]:
        """Identity and raw facts for result files."""
        return {
            **self._info.to_dict(),
            "facts": {k: v for k, v in self.facts.items() if k != "nvml"},
            "nvml": dict(self.facts.get("nvml", {})),
            "clock_delay": self.delay_note,
            "flush": self.flush_note,
            "compile_s": dict(self._kernels.compile_s) if self._kernels else {},
        }


def cuda_roofline_plan(info: DeviceInfo, name: str = "full") -> RooflinePlan:
    """The GPU roofline plan: the sweep sized from ``info``'s L2 by
    :meth:`~roofprof.roofline.plan.RooflinePlan.sized`, larger GEMMs and a DRAM-sized
    intensity sweep (at least 256 MiB) than on a CPU, and GPU-scale budgets.

    Raises:
        ConfigError: unknown plan name.
    """
    from roofprof.roofline.plan import RooflinePlan

    quick = name == "quick"
    return RooflinePlan.sized(
        info,
        name,
        min_intensity_working_set_bytes=256 * 1024**2,
        point_budget_s=0.03 if quick else 0.1,
        target_call_s=0.002,
        compute_budget_s=0.2 if quick else 0.5,
        compute_call_s=0.01,
        gemm_sizes=(4096,) if quick else (4096, 8192),
        gemm_budget_s=0.2,
        intensities=tuple(2.0**e for e in range(-3, 11, 2 if quick else 1)),
        intensity_budget_s=0.02,
        intensity_dtypes=("fp32", "fp64"),
        min_repeats=5,
        intensity_max_call_flops=1e12,
    )


def scale_to_clock(
    value: float, clock_seen_mhz: float | None, spec_clock_mhz: float | None
) -> float | None:
    """A compute rate measured at ``clock_seen_mhz`` restated at ``spec_clock_mhz`` (linear in
    clock).

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
