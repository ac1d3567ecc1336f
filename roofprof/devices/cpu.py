"""The CPU device: identity from the OS, numba probe kernels, numpy/numba GEMM implementations.

Everything here runs on any machine: it is what makes roofprof useful (and testable)
without a GPU, as ERT and Intel Advisor do for CPUs.

* Identity: model name (``/proc/cpuinfo``), usable cores (affinity), caches summed over the
  device (``/sys/devices/system/cpu/cpu*/cache``), RAM (``/proc/meminfo``).
* Clock: ``perf_counter`` (numba kernels return when done, so synchronising is a no-op).
* Flush: a parallel read of a buffer of twice all cache levels together (clean lines, so
  the timed run after it pays no write-back).
* Probes: ``read``, ``copy`` and ``triad`` bandwidth (working-set sweep), ``fma-fp32``/``fma-fp64``
  peak compute, ``gemm-fp32``/``gemm-fp64`` (numpy BLAS), ``intensity-fp64`` and
  ``intensity-fp32`` (FMAs per element swept); in :mod:`roofprof.devices.cpu_probes`.
* Op implementations: ``numpy`` (BLAS ``matmul``) and ``numba`` (kernels/cpu.py ``gemm_nt``)
  for GEMM/GEMV ops in fp32 and fp64.

>>> dev = CpuDevice()
>>> dev.info.kind, dev.info.compute_units >= 1
('cpu', True)
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof._resources import kernels_module
from roofprof.devices.base import (
    CheckResult,
    DeviceInfo,
    DeviceStatus,
    Probe,
    compare,
    torch_issue_overhead_s,
)
from roofprof.devices.cpu_probes import (  # the probes live there; re-exported here
    DRAM_CALL_S,
    NP_DTYPES,
    PROBE_SEED,
    ProbeArena,
    aligned_empty,
    cpu_probes,
    dot_reference,
    gemm_tolerance,
    reference_passes,
    setup_copy,
    setup_fma,
    setup_gemm,
    setup_intensity,
    setup_read,
    setup_triad,
)
from roofprof.devices.pool import InputPool, cold_copies, small_pages, tiled_normal, weight_key
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.roofline.plausibility import Reference
from roofprof.telemetry import CpuFreqSampler, NullSampler
from roofprof.timing import PerfCounterClock

if TYPE_CHECKING:
    from roofprof.roofline.plan import RooflinePlan

__all__ = [
    "AUTO_FALLBACK",
    "DRAM_CALL_S",
    "KIND",
    "NAMES",
    "NP_DTYPES",
    "PROBE_SEED",
    "WHAT",
    "CpuDevice",
    "NumbaGemm",
    "NumpyGemm",
    "ProbeArena",
    "aligned_empty",
    "allowed_cpus",
    "cache_sizes",
    "cpu_info",
    "cpu_probes",
    "cpu_roofline_plan",
    "enumerate",
    "gemm_tolerance",
    "meminfo_bytes",
    "open",
    "reference_passes",
    "roofline_plan",
    "setup_fma",
    "setup_gemm",
    "setup_intensity",
    "setup_read",
    "setup_copy",
    "setup_triad",
]

#: The device kind (and device string) of this backend.
KIND = "cpu"
NAMES = ("cpu",)
#: What ``auto`` calls this device in its one-line reason.
WHAT = "CPU"
#: ``auto`` falls back on the CPU when no other backend has a usable device.
AUTO_FALLBACK = True
# --------------------------------------------------------------------------- identity


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text) if text.isdigit() else 0


def meminfo_bytes(key: str) -> int | None:
    """One ``/proc/meminfo`` field in bytes (``MemAvailable``, ``MemTotal``...); ``None``
    where the file or the field is missing.

    >>> (meminfo_bytes("MemTotal") or 0) >= 0
    True
    """
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else None
    return None


def allowed_cpus() -> list[int]:
    """CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cache_sizes(cpus: list[int], sysfs: str | Path = "/sys/devices/system/cpu") -> dict[str, int]:
    """Data/unified cache bytes per level, summed over the distinct caches of ``cpus``.

    A cache shared by several CPUs counts once (keyed by its ``shared_cpu_list``).
    Returns ``{}`` where sysfs has no cache information.
    """
    seen: dict[tuple[int, str], int] = {}
    for cpu in cpus:
        base = Path(sysfs) / f"cpu{cpu}" / "cache"
        if not base.is_dir():
            continue
        for index in sorted(base.glob("index*")):
            ctype = _read(index / "type").strip()
            if ctype not in ("Data", "Unified"):
                continue
            level = _read(index / "level").strip()
            size = _size_bytes(_read(index / "size"))
            shared = _read(index / "shared_cpu_list").strip() or str(cpu)
            if level.isdigit() and size:
                seen[(int(level), shared)] = size
    totals: dict[str, int] = {}
    for (level, _), size in seen.items():
        totals[f"l{level}"] = totals.get(f"l{level}", 0) + size
    return dict(sorted(totals.items()))


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
            value = line.split(":", 1)[1].strip()
            if value and not value.isdigit():
                return value
    return platform.processor() or platform.machine() or "CPU"


def _cpu_flags() -> set[str]:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith(("flags", "Features")) and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def _max_clock_mhz(cpus: list[int]) -> float | None:
    values = []
    for cpu in cpus:
        text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq").strip()
        if text.isdigit():
            values.append(int(text) / 1000.0)
    if values:
        return max(values)
    mhz = [
        float(line.split(":", 1)[1])
        for line in _read("/proc/cpuinfo").splitlines()
        if line.lower().startswith("cpu mhz") and ":" in line
    ]
    return max(mhz) if mhz else None


def _blas_name() -> str:
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - informational only
        return "unknown"


@functools.lru_cache(maxsize=1)
def cpu_info() -> DeviceInfo:
    """The :class:`DeviceInfo` of this machine's CPU (cached)."""
    import numba

    cpus = allowed_cpus()
    flags = _cpu_flags()
    isa = [
        f
        for f in (
            "avx512f",
            "avx512_bf16",
            "avx512_fp16",
            "amx_tile",
            "avx2",
            "fma",
            "neon",
            "asimd",
            "sve",
        )
        if f in flags
    ]
    return DeviceInfo(
        kind="cpu",
        index=0,
        name=_cpu_model(),
        compute_units=len(cpus),
        memory_bytes=meminfo_bytes("MemTotal") or 0,
        cache_bytes=cache_sizes(cpus),
        clock_mhz=_max_clock_mhz(cpus),
        spec_id=None,
        extra={
            "isa": " ".join(isa) or "unknown",
            "numba_threads": str(numba.get_num_threads()),
            "numba": numba.__version__,
            "blas": _blas_name(),
            "cpus": ",".join(map(str, cpus)),
            "machine": platform.machine(),
        },
        spec_note="CPUs have no datasheet rows in data/gpus.json: these ceilings are measured only",
    )


# --------------------------------------------------------------------------- device


class CpuDevice:
    """This machine's CPU as a roofprof :class:`~roofprof.devices.base.Device`."""

    def __init__(self) -> None:
        self._info = cpu_info()
        self._flush_buf: np.ndarray | None = None
        self._flush_out = np.zeros(1)
        #: random GEMM inputs shared by every implementation on the CPU: numpy, numba and torch
        #: (a quarter of the memory available now at most)
        self.inputs = InputPool(min(4 << 30, self.free_memory_bytes() // 4))

    def release_buffers(self) -> None:
        """Drop the shared inputs and the flush buffer (before a memory-hungry step)."""
        self.inputs.clear()
        self._flush_buf = None

    @property
    def info(self) -> DeviceInfo:
        return self._info

    @property
    def nthreads(self) -> int:
        """Threads the numba kernels use (numba's current setting)."""
        import numba

        return numba.get_num_threads()

    def synchronize(self) -> None:
        """No-op: numba and numpy calls return when their work is done."""

    def launch_overhead_s(self) -> float:
        """Per-op dispatch cost of an eager torch pass on this CPU (seconds; 0.0 without torch)."""
        return torch_issue_overhead_s(self) or 0.0

    def clock(self) -> PerfCounterClock:
        return PerfCounterClock(synchronize=self.synchronize)

    @property
    def flush_bytes(self) -> int:
        """Size of the flush buffer: twice all cache levels together (at least 8 MiB)."""
        return max(2 * sum(self._info.cache_bytes.values()), 8 * 1024**2)

    def memory_reference(self) -> Reference | None:
        """The same-run reference Dot the DRAM ceilings are held against
        (:func:`~roofprof.devices.cpu_probes.dot_reference`); None when memory is short."""
        return dot_reference(self)

    def flush(self) -> None:
        """Evict the caches: every thread reads its share of the flush buffer (2× all caches)."""
        k = _kernels()
        if self._flush_buf is None:
            self._flush_buf = aligned_empty(self.flush_bytes // 8, np.float64)
            k.fill_distinct(self._flush_buf)
            self._flush_out = np.zeros(max(1, self.nthreads))
        k.flush_read(self._flush_buf, self._flush_out, self.nthreads)

    def sampler(self, interval_s: float = 0.01):
        sampler = CpuFreqSampler(interval_s=interval_s)
        try:
            sampler._open()  # probe once: report "unavailable" up front rather than per run
        except Exception as exc:  # noqa: BLE001
            return NullSampler(str(exc))
        return sampler

    def free_memory_bytes(self) -> int:
        """``MemAvailable`` from /proc/meminfo (or free physical pages)."""
        avail = meminfo_bytes("MemAvailable")
        if avail is not None:
            return avail
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return self._info.memory_bytes

    def probes(self) -> tuple[Probe, ...]:
        return cpu_probes(self)

    def implementations(self) -> tuple:
        return (NumpyGemm(self), NumbaGemm(self))

    def roofline_plan(self, name: str = "full") -> RooflinePlan:
        """The CPU's ``full``, ``quick`` or ``test`` roofline plan (:func:`cpu_roofline_plan`)."""
        return cpu_roofline_plan(self._info, name)


_gemm_tolerance = gemm_tolerance  # its former name (tests import it)


def _kernels() -> Any:
    return kernels_module("cpu")


# --------------------------------------------------------------------------- op implementations


def _gemm_unsupported(op: Any, impl: str) -> str | None:
    if op.kind != "gemm":
        return f"{impl} on the CPU implements GEMM/GEMV ops only, not {op.kind!r}"
    if op.dtype not in NP_DTYPES:
        return (
            f"{impl} on the CPU runs fp32 and fp64 GEMMs only (no {op.dtype} BLAS/SIMD path here)"
        )
    if min(op.m, op.n, op.k, op.batch) < 1:
        return f"empty GEMM shape m={op.m} n={op.n} k={op.k} batch={op.batch}"
    return None


class _PreparedGemm:
    """Buffers for one GEMM op: a [b?,m,k], w [b?,n,k] (nn.Linear layout), out [b?,m,n].

    ``a`` and the weight copies come from the device's :class:`~roofprof.devices.pool.InputPool`
    (shared by numpy, numba and torch and across batch sizes); the weight is rotated over
    :func:`~roofprof.devices.pool.cold_copies` copies so each call finds it out of cache.
    """

    def __init__(
        self,
        op: Any,
        rng: np.random.Generator,
        device: CpuDevice,
        kernel: Callable[[np.ndarray, np.ndarray, np.ndarray], Any],
        name: str,
    ):
        np_t = NP_DTYPES[op.dtype]
        item = np.dtype(np_t).itemsize
        lead = (op.batch,) if op.batch > 1 else ()
        copies = cold_copies(
            item * op.batch * op.n * op.k, device.info.last_level_cache_bytes or (32 << 20)
        )
        need = item * op.batch * (op.m * op.k + copies * op.n * op.k + op.m * op.n)
        free = device.free_memory_bytes() + device.inputs.bytes
        if need > 0.85 * free:
            raise ConfigError(
                f"op {op.name!r} needs {need / 2**30:.2f} GiB for its buffers but only "
                f"{free / 2**30:.2f} GiB is free"
            )
        self.op, self.rng, self.kernel, self.name = op, rng, kernel, name
        dt = np.dtype(np_t).str
        self.a = device.inputs.get(
            ("gemm-a", lead, op.m, op.k, dt),
            lambda: tiled_normal((*lead, op.m, op.k), np_t, seed=1),
        )
        # the weights may be torch's (the same pool): a view, not a copy
        self.ws = [
            np.asarray(
                device.inputs.get(
                    weight_key(lead, op.n, op.k, op.dtype, i),
                    lambda i=i: tiled_normal((*lead, op.n, op.k), np_t, seed=2 + i, std=op.k**-0.5),
                )
            )
            for i in range(copies)
        ]
        self.w = self.ws[0]
        with small_pages():
            self.out = np.empty((*lead, op.m, op.n), dtype=np_t)
        self.calls = [(lambda w=w: kernel(self.a, w, self.out)) for w in self.ws]
        self.note = f"{name}; weights rotated over {copies} copies (cold)" if copies > 1 else name

    def run(self) -> None:
        self.kernel(self.a, self.w, self.out)

    def check(self) -> CheckResult:
        """One call with the output poisoned, compared on sampled rows × columns in float64."""
        op, rng = self.op, self.rng
        self.out[...] = np.nan
        self.run()
        tol = gemm_tolerance(op.dtype, op.k)
        rows = np.sort(rng.choice(op.m, size=min(op.m, 16), replace=False))
        cols = np.sort(rng.choice(op.n, size=min(op.n, 256), replace=False))
        if op.batch > 1:
            batches = np.sort(rng.choice(op.batch, size=min(op.batch, 4), replace=False))
            a, w = self.a[batches][:, rows], self.w[batches][:, cols]
            out = self.out[batches][:, rows][:, :, cols]
        else:
            a, w, out = self.a[rows], self.w[cols], self.out[rows][:, cols]
        return compare(
            out,
            _kernels().gemm_nt_reference(a, w),
            tol,
            f"{self.name} vs float64 numpy on {len(rows)} sampled rows × {len(cols)} columns; "
            "output poisoned with NaN",
        )

    def release(self) -> None:
        self.a = self.w = self.out = None  # type: ignore[assignment]
        self.ws, self.calls = [], []


def _numpy_gemm(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    np.matmul(a, np.swapaxes(w, -1, -2), out=out)


def _numba_gemm(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    k = _kernels()
    if a.ndim == 3:
        k.gemm_nt_batched(a, w, out)
    else:
        k.gemm_nt(a, w, out)


class NumpyGemm:
    """GEMM/GEMV through numpy ``matmul`` (the BLAS numpy was built with)."""

    name = "numpy"

    def __init__(self, device: CpuDevice):
        self.device = device

    def supports(self, op: Any) -> str | None:
        return _gemm_unsupported(op, "numpy")

    def prepare(self, op: Any, rng: np.random.Generator) -> _PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        return _PreparedGemm(op, rng, self.device, _numpy_gemm, "numpy matmul")


class NumbaGemm:
    """GEMM/GEMV through the numba kernel ``kernels.cpu.gemm_nt`` (parallel, vectorised dots)."""

    name = "numba"

    def __init__(self, device: CpuDevice):
        self.device = device

    def supports(self, op: Any) -> str | None:
        return _gemm_unsupported(op, "numba")

    def prepare(self, op: Any, rng: np.random.Generator) -> _PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        return _PreparedGemm(op, rng, self.device, _numba_gemm, "numba gemm_nt")


# --------------------------------------------------------------------------- backend


def cpu_roofline_plan(info: DeviceInfo, name: str = "full") -> RooflinePlan:
    """The CPU's roofline plan: sweeps sized from ``info``'s caches by
    :meth:`~roofprof.roofline.plan.RooflinePlan.sized`, with the CPU's budgets and GEMM sizes.

    Raises:
        ConfigError: unknown plan name.
    """
    from roofprof.roofline.plan import RooflinePlan

    if name == "quick":
        knobs: dict[str, Any] = dict(
            point_budget_s=0.03,
            target_call_s=0.003,
            compute_budget_s=0.25,
            compute_call_s=0.02,
            gemm_sizes=(1024, 2048),
            gemm_budget_s=0.2,
            intensities=tuple(2.0**e for e in (-3, -1, 1, 3, 5, 7, 9)),
            intensity_budget_s=0.02,
            min_repeats=5,
            intensity_max_call_flops=5e9,
            dram_point_budget_s=1.0,
            dram_call_s=DRAM_CALL_S,
        )
    else:
        knobs = dict(
            point_budget_s=0.1,
            dram_point_budget_s=1.0,
            target_call_s=0.005,
            compute_budget_s=1.0,
            compute_call_s=0.03,
            gemm_sizes=(1024, 2048, 3072),
            gemm_budget_s=0.6,
            intensities=tuple(2.0**e for e in range(-3, 11)),
            intensity_budget_s=0.05,
            intensity_dtypes=("fp64", "fp32"),
            min_repeats=7,
            intensity_max_call_flops=1.5e10,
            dram_call_s=DRAM_CALL_S,
        )
    return RooflinePlan.sized(info, name, **knobs)


def enumerate() -> list[DeviceStatus]:  # noqa: A001 - the backend protocol's name
    """The one CPU device (``cpu``): always usable.

    >>> [s.label for s in enumerate()]
    ['cpu']
    """
    return [DeviceStatus(KIND, cpu_info().name, True)]


def open(index: int = 0) -> CpuDevice:  # noqa: A001 - the backend protocol's name
    """The CPU device (``index`` must be 0).

    Raises:
        UnknownNameError: ``index`` is not 0.
    """
    if int(index) != 0:
        raise UnknownNameError("device", f"cpu:{index}", ["cpu"])
    return CpuDevice()


def roofline_plan(info: DeviceInfo, name: str = "full") -> RooflinePlan:
    """The roofline plan of a CPU described by ``info`` (:func:`cpu_roofline_plan`)."""
    return cpu_roofline_plan(info, name)


# --------------------------------------------------------------------------- host threads


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[int | None]:
    """Set torch's (and numba's) intra-op thread count for the block; restore it after.

    Like ``torch.utils.benchmark``'s ``set_torch_threads``. Yields the torch thread count
    in effect (``n`` when torch is missing; None when neither is given nor known).
    ``roofprof profile`` and ``roofprof validate`` use the same value, so per-op times and
    the real pass share the machine alike.

    Raises:
        ConfigError: ``n`` below 1.

    >>> with threads(None) as count:
    ...     count is None or count >= 1
    True
    """
    if n is not None and n < 1:
        raise ConfigError(f"threads must be at least 1, got {n}")
    try:
        import torch
    except ImportError:
        torch = None
    numba = None
    old_torch = torch.get_num_threads() if torch is not None else None
    old_numba = None
    if n is not None:
        if torch is not None:
            torch.set_num_threads(n)
        try:
            import numba

            old_numba = numba.get_num_threads()
            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        except (ImportError, ValueError):
            numba = None
    try:
        yield torch.get_num_threads() if torch is not None else n
    finally:
        if n is not None and torch is not None and old_torch is not None:
            torch.set_num_threads(old_torch)
        if numba is not None and old_numba is not None:
            with contextlib.suppress(ValueError):
                numba.set_num_threads(old_numba)


def single_openmp_runtime() -> str:
    """Keep numba's parallel kernels off a second OpenMP runtime while torch is measured.

    torch wheels bundle their own libgomp and numba's default ``omp`` threading layer loads
    the system one: two OpenMP thread pools then compete for the same cores, and on a small
    machine torch ops measured after a numba kernel ran can slow down many-fold (seen here:
    RMSNorm 0.07 ms → 30 ms). Before numba starts its threads, this selects numba's
    ``workqueue`` layer (its own simple pool; the numba kernels run the same loops).

    Returns what happened, for provenance: ``"workqueue selected"``, ``"already <layer>"``
    (numba's threads were started earlier, e.g. by the roofline probes in this process),
    or ``"numba not installed"``.
    """
    try:
        import numba
        from numba.np.ufunc import parallel
    except ImportError:
        return "numba not installed"
    if getattr(parallel, "_is_initialized", False):
        try:
            return f"already {numba.threading_layer()}"
        except ValueError:
            return "already initialised"
    if os.environ.get("NUMBA_THREADING_LAYER"):
        return f"kept NUMBA_THREADING_LAYER={os.environ['NUMBA_THREADING_LAYER']}"
    numba.config.THREADING_LAYER = "workqueue"
    return "workqueue selected"
