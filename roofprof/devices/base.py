"""The device protocol: what a machine offers to the measurement code.

A :class:`Device` knows its identity (:class:`DeviceInfo`), gives a timing clock, a cache
flush, a telemetry sampler, its peak probes (:class:`Probe` catalogue, measured by
``roofprof.roofline.probes``) and its op implementations (:class:`OpImpl`, used by ``profile``).

Op implementations follow "correct first": ``prepare`` allocates inputs and outputs for
one :class:`~roofprof.workload.Op`; ``check`` fills fresh random inputs, poisons the output,
runs once and compares against a reference (:class:`CheckResult`); only then is ``run``
timed.

Probes are device-agnostic records: a name, a kind, a dtype or level, an accounting
formula and a ``setup`` that returns a :class:`ProbeRun` (a runnable with exact FLOPs and
bytes per repetition and its own correctness check). The CUDA device adds its probes with
the same shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from roofprof.roofline.plan import RooflinePlan
    from roofprof.telemetry import Sampler
    from roofprof.timing import Clock
    from roofprof.workload import Op

__all__ = [
    "DEVICE_KINDS",
    "DRAM_FACTOR",
    "LEVEL_EDGE",
    "PROBE_KINDS",
    "CheckResult",
    "Device",
    "DeviceInfo",
    "DeviceStatus",
    "OpImpl",
    "PreparedOp",
    "Probe",
    "ProbeRun",
    "Selection",
    "compare",
    "dram_resident",
    "per_call_timing",
    "tolerance",
    "torch_issue_overhead_s",
]

DEVICE_KINDS = ("cpu", "cuda")
#: Kinds of probe: ``bandwidth`` (swept over working-set sizes → one ceiling per memory
#: level), ``compute`` (peak FLOP/s of a dtype), ``gemm`` (best library GEMM: the attainable
#: GEMM ceiling), ``intensity`` (FLOPs per element swept: the measured roofline curve).
PROBE_KINDS = ("bandwidth", "compute", "gemm", "intensity")
#: The DRAM plateau starts at this many times the last-level cache (a scan-resistant cache
#: keeps part of a smaller working set across passes and inflates "DRAM" bandwidth).
DRAM_FACTOR = 8
#: A probe's working set is its whole arrays (24·n for a triad of n-element arrays), a few
#: bytes under the size asked for: a size within this share of a level's edge is on it.
LEVEL_EDGE = 1e-3


def dram_resident(working_set_bytes: float, llc_bytes: float) -> bool:
    """Whether a working set (bytes) lies on the DRAM plateau: at least :data:`DRAM_FACTOR` ×
    the last-level cache, within :data:`LEVEL_EDGE` (False when the LLC is unknown).

    >>> llc = 32 << 20
    >>> dram_resident(24 * ((8 * llc) // 24), llc), dram_resident(4 * llc, llc)
    (True, False)
    """
    return llc_bytes > 0 and working_set_bytes >= DRAM_FACTOR * llc_bytes * (1 - LEVEL_EDGE)


@dataclass(frozen=True)
class DeviceInfo:
    """Identity of a device.

    Attributes:
        kind: ``"cpu"`` or ``"cuda"``.
        index: device index (0 for the CPU).
        name: marketing name (``"AMD EPYC 9R14"``, ``"NVIDIA H100 80GB HBM3"``).
        compute_units: cores usable by this process (CPU) or SMs (GPU).
        memory_bytes: main memory (CPU RAM, GPU global memory).
        cache_bytes: level (``"l1"``, ``"l2"``, ``"l3"``) → bytes summed over the whole
            device (all cores' L1d, all L2 slices, ...), for the levels known.
        clock_mhz: nominal or maximum clock, if known.
        spec_id: id of the matching ``data/gpus.json`` row, or None (always None for CPUs).
        extra: free-form strings (driver, compute capability, ISA, threading layer, ...).

    Capabilities, declared by the backend so host code never branches on ``kind``:

        asynchronous: kernel launches return before the work is done (a GPU); the host's
            issue time then matters and the clock must synchronise.
        shared_host: measurements compete with other processes for the same cores (a CPU),
            so contention is judged and contended measurements are retried.
        default_dtype: the compute dtype used when none is asked for (``fp32`` on a CPU,
            ``bf16`` on a GPU).
        default_model: the reference model sized for this kind of device (``run``'s default).
        torch_device: the torch device string (``"cpu"``, ``"cuda:0"``).
        compute_unit_name: what ``compute_units`` counts (``"cores"``, ``"SMs"``).
        spec_note: why ``spec_id`` is None, in words (empty: the name matched no row).
    """

    kind: str
    index: int
    name: str
    compute_units: int
    memory_bytes: int
    cache_bytes: Mapping[str, int] = field(default_factory=dict)
    clock_mhz: float | None = None
    spec_id: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    asynchronous: bool = False
    shared_host: bool = True
    default_dtype: str = "fp32"
    default_model: str = "llama-3.2-1b"
    torch_device: str = "cpu"
    compute_unit_name: str = "cores"
    spec_note: str = ""

    @property
    def label(self) -> str:
        """The device string that selects this device: ``cpu`` or ``cuda:N``."""
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    @property
    def last_level_cache_bytes(self) -> int:
        """Size of the largest cache level (0 if none is known)."""
        return max(self.cache_bytes.values(), default=0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cache_bytes"] = dict(self.cache_bytes)
        d["extra"] = dict(self.extra)
        d["label"] = self.label
        return d


@dataclass(frozen=True)
class CheckResult:
    """Outcome of comparing a kernel's output with a reference.

    ``max_abs_error`` is the largest absolute difference; ``max_rel_error`` is that
    difference relative to the largest reference magnitude (a norm-wise relative error);
    ``ok`` means every output is finite and ``max_rel_error <= tolerance``.
    """

    ok: bool
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(out: np.ndarray, ref: np.ndarray, tolerance: float, note: str = "") -> CheckResult:
    """Compare ``out`` with ``ref`` (float64 reference) → :class:`CheckResult`.

    A non-finite output (e.g. poison left in place) fails with ``inf`` errors.

    >>> import numpy as np
    >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), 1e-6).ok
    True
    """
    import numpy as np

    tolerance = float(tolerance)
    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    if out64.shape != ref64.shape:
        return CheckResult(
            False,
            float("inf"),
            float("inf"),
            tolerance,
            f"shape {out64.shape} != reference {ref64.shape}. {note}".strip(),
        )
    if not np.all(np.isfinite(out64)):
        bad = int(np.count_nonzero(~np.isfinite(out64)))
        return CheckResult(
            False,
            float("inf"),
            float("inf"),
            tolerance,
            f"{bad} non-finite outputs (poison not overwritten?). {note}".strip(),
        )
    abs_err = float(np.max(np.abs(out64 - ref64))) if out64.size else 0.0
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    rel_err = abs_err / scale if scale > 0 else abs_err
    return CheckResult(bool(rel_err <= tolerance), abs_err, float(rel_err), tolerance, note)


#: Machine epsilon (spacing of floats just above 1) of each dtype; tf32 keeps 10 mantissa bits.
_EPS = {"fp64": 2.0**-52, "fp32": 2.0**-23, "tf32": 2.0**-10, "bf16": 2.0**-7, "fp16": 2.0**-10}


def tolerance(dtype: str, reduction: int = 1, *, ulps: float = 8.0, growth: float = 8.0) -> float:
    """Norm-wise relative tolerance of an output stored in ``dtype`` that reduces over
    ``reduction`` terms (a GEMM's K, a norm's width, attention's keys).

    ``ulps`` units of the output dtype's rounding, plus ``growth · eps · √reduction`` for the
    accumulation (float32 accumulation for dtypes of 32 bits or fewer, fp64 for fp64), the
    policy the README promises. Unknown dtypes count as fp32. The same policy serves every
    device's checks (``compare(out, ref, tolerance(dtype, k))``); callers choose ``ulps`` and
    ``growth`` where their kernels round more or less than once.

    >>> tolerance("fp32", 2048) < 1e-4 < tolerance("bf16", 2048)
    True
    >>> round(tolerance("bf16", 1, ulps=2, growth=0), 4)
    0.0156
    """
    eps = _EPS.get(dtype, _EPS["fp32"])
    acc = _EPS["fp64"] if dtype == "fp64" else _EPS["fp32"]
    return float(ulps * eps + growth * acc * math.sqrt(max(int(reduction), 1)))


@runtime_checkable
class PreparedOp(Protocol):
    """One op with its buffers allocated on the device, ready to check and time."""

    def run(self) -> Any:
        """Run the op once (asynchronously on a GPU: the clock synchronises)."""
        ...

    def check(self) -> CheckResult:
        """Fresh random inputs, output poisoned, one run, compared with a reference."""
        ...

    def release(self) -> None:
        """Free the buffers."""
        ...


@runtime_checkable
class OpImpl(Protocol):
    """An implementation of ops on a device (``numpy``, ``numba``, ``cupy``, ``cublas``,
    ``torch``...)."""

    name: str

    def supports(self, op: Op) -> str | None:
        """None when ``op`` is supported, otherwise the reason it is not."""
        ...

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedOp:
        """Allocate and fill buffers for ``op``.

        Raises:
            ConfigError: the buffers would not fit in free memory (the message gives the numbers).
        """
        ...


@dataclass
class ProbeRun:
    """A probe set up at one size: run it, and its exact accounting.

    ``run(reps)`` executes ``reps`` repetitions inside one call (amortising the launch);
    one repetition does ``flops_per_rep`` FLOPs and moves ``bytes_per_rep`` bytes at the
    level under test (the probe's accounting states the convention). ``check()`` compares
    against a numpy reference and must pass before the probe is timed.
    """

    run: Callable[[int], Any]
    flops_per_rep: float
    bytes_per_rep: float
    check: Callable[[], CheckResult]
    working_set_bytes: int
    release: Callable[[], None] = lambda: None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Probe:
    """One entry of a device's probe catalogue.

    Attributes:
        name: short id (``"read"``, ``"triad"``, ``"fma-fp32"``, ``"gemm-fp64"``,
            ``"intensity-fp64"``).
        kind: one of :data:`PROBE_KINDS`.
        setup: builds a :class:`ProbeRun`. Keyword arguments by kind: ``bandwidth``:
            ``working_set_bytes``; ``compute``: none; ``gemm``: ``size`` (matrix order);
            ``intensity``: ``working_set_bytes`` and ``fmas_per_element``.
        dtype: dtype of a compute/gemm/intensity probe.
        level: fixed memory level of a bandwidth probe that does not sweep (e.g. GPU
            ``smem``); None when the level follows from the working-set size.
        accounting: the FLOP/byte formula, in words.
        note: anything a reader of the result should know.
        diagnostic: a compute probe whose rate is kept in the result, labelled, but is
            never a ceiling of its dtype (e.g. Hopper's emulated fp8 ``mma.sync``, below the
            native tensor path a library GEMM reaches).
    """

    name: str
    kind: str
    setup: Callable[..., ProbeRun]
    dtype: str | None = None
    level: str | None = None
    accounting: str = ""
    note: str = ""
    diagnostic: bool = False

    def describe(self) -> dict[str, Any]:
        """The catalogue entry without its runnable, for result files."""
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "level": self.level,
            "accounting": self.accounting,
            "note": self.note,
            "diagnostic": self.diagnostic,
        }


@runtime_checkable
class Device(Protocol):
    """A machine roofprof can measure. See the module docstring."""

    @property
    def info(self) -> DeviceInfo: ...

    def clock(self) -> Clock:
        """A timing clock that synchronises this device."""
        ...

    def flush(self) -> None:
        """Evict the last-level cache (touch a buffer of at least twice its size)."""
        ...

    def sampler(self, interval_s: float = 0.01) -> Sampler:
        """A telemetry sampler for this device (a NullSampler saying why, if none)."""
        ...

    def probes(self) -> tuple[Probe, ...]:
        """The probe catalogue."""
        ...

    def implementations(self) -> tuple[OpImpl, ...]:
        """Op implementations available on this device."""
        ...

    def free_memory_bytes(self) -> int:
        """Memory that can be allocated now (bytes)."""
        ...

    def synchronize(self) -> None:
        """Wait for queued work to finish (no-op on the CPU)."""
        ...

    def launch_overhead_s(self) -> float:
        """Per-kernel launch (issue) cost in seconds that a framework-driven pass pays on top
        of the kernels' own time (0.0 when it cannot be measured)."""
        ...

    def roofline_plan(self, name: str = "full") -> RooflinePlan:
        """How much of the roofline to measure on this device (``full``, ``quick``, ``test``):
        the sweep sizes, budgets and GEMM sizes are the backend's sizing choices.

        Raises:
            ConfigError: unknown plan name.
        """
        ...


@dataclass(frozen=True)
class DeviceStatus:
    """One device a backend knows of: its label, name, whether it is usable, and why not."""

    label: str
    name: str
    usable: bool
    reason: str = ""


@dataclass(frozen=True)
class Selection:
    """The device chosen for a device string, and why (one line for the user)."""

    device: Device
    reason: str


def torch_issue_overhead_s(device: Device, *, samples: int = 2000, rounds: int = 3) -> float | None:
    """Seconds per back-to-back tiny torch op on ``device`` (best of ``rounds``), or None
    without torch: the rate at which an eager framework issues kernels.

    Times ``samples`` ``torch.add`` calls with one synchronisation at the end, so on an
    asynchronous device it is the host's issue rate, not the kernels' duration.
    """
    try:
        import torch
    except ImportError:
        return None
    import time

    x = torch.zeros(8, device=device.info.torch_device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(rounds):
        device.synchronize()
        t0 = time.perf_counter()
        for _ in range(samples):
            torch.add(x, 1.0, out=y)
        device.synchronize()
        best = min(best, (time.perf_counter() - t0) / samples)
    return best


def per_call_timing(timing: Any, prepared: Any) -> Any:
    """``timing`` as seconds per call: unchanged, or — when ``prepared`` runs
    ``calls_per_sample`` > 1 calls per timed call (its ``batched_calls``, e.g. the CUDA
    device's batched small ops) — every sample and the estimate divided by that count.

    >>> from roofprof.timing import Timing
    >>> t = Timing(samples_s=(8e-6, 10e-6), estimate_s=9e-6)
    >>> per_call_timing(t, object()) is t
    True
    >>> per_call_timing(t, type("P", (), {"calls_per_sample": 4})()).samples_s
    (2e-06, 2.5e-06)
    """
    n = int(getattr(prepared, "calls_per_sample", 1) or 1)
    if n == 1:
        return timing
    from dataclasses import replace

    return replace(
        timing, samples_s=tuple(s / n for s in timing.samples_s), estimate_s=timing.estimate_s / n
    )
