"""Profile the ops of a Llama pass on this machine and place them on its roofline.

For every op of :func:`roofprof.workload.llama_ops` (identical shapes measured once), each
available implementation is checked for correctness first, then timed
(:func:`roofprof.timing.benchmark`: warm-up, repeats sized by a time budget, median and
spread, telemetry sampled around it), and the result is placed on the measured roofline:
achieved FLOP/s and bytes/s, analytic intensity, the attainable roof at that intensity,
percent of roof and the bound.

Implementations: the device's own (``roofprof.devices``: numpy/BLAS and numba GEMMs on the
CPU; Numba, CuPy, cuBLAS, a torch GEMM on a GPU) plus :class:`roofprof.torch_ops.TorchOps`
when torch is installed (named ``torch``, or ``torch-eager`` where the device has its own
``torch``), which covers every op (norms, RoPE, SiLU·mul, residuals, attention through SDPA
or eager, the embedding gather) with the calls eager PyTorch makes. For the roll-up, one
measurement per op is chosen: the first of ``prefer`` that passed its check (default
``reference``: that torch implementation, what the validated model runs), else the fastest
that passed. An op whose kernel
fails its check is reported and excluded, with a warning; an op no implementation covers
is counted from the empirical roofline, with a warning.

Threads: the torch thread count is set once (``threads``) and recorded; ``roofprof
validate`` uses the same, so per-op times and the real pass share the machine alike.

Measurements are cached on disk (``$ROOFPROF_CACHE`` or ``~/.cache/roofprof``), keyed by
device, threads and library versions, so ``predict --estimator measured`` only profiles
what it has not seen.

Python API: :func:`profile`, :func:`measured_estimator`, :func:`measure`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import types
import warnings as _warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.rollup import MeasuredEstimator, OpTime, RooflineEstimator
from roofprof.roofline import Roofline
from roofprof.specs import ModelSpec, load_model
from roofprof.workload import Counting, Op, Workload, llama_ops

Progress = Callable[[str, int, int], None]
#: The roll-up prefers the implementation of :mod:`roofprof.torch_ops` (what the validated model runs),
#: whatever name it carries on the device ("torch", or "torch-eager" next to a device's own "torch" GEMM).
DEFAULT_PREFER = ("reference",)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Measurement:
    """One implementation of one op shape: its check, its timing, what it achieved.

    ``status``: ``ok`` (checked and timed), ``failed`` (wrong result: excluded),
    ``unsupported`` (the implementation does not cover the op), ``error`` (it raised).
    Times in seconds per call; ``timing`` holds the raw samples.
    """

    impl: str
    status: str
    note: str = ""
    timing: Any = None  # roofprof.timing.Timing
    check: Any = None  # roofprof.devices.base.CheckResult
    kernels: int = 1
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    host_s: float = 0.0  # back-to-back issue time per call (asynchronous devices), 0 if not measured

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.timing is not None

    @property
    def seconds(self) -> float:
        """Median time of one call (NaN when not timed)."""
        return self.timing.median_s if self.timing is not None else float("nan")

    def op_time(self) -> OpTime:
        """The roll-up record of this measurement."""
        t = self.timing
        note = (t.flush if t.flush != "none" else "") + ("; noisy (CV > 5%)" if t.noisy else "")
        return OpTime(self.seconds, self.impl, self.kernels, t.iqr_s, note.strip("; "), self.host_s)

    def to_dict(self, op: Op | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"impl": self.impl, "status": self.status, "note": self.note, "kernels": self.kernels,
                             "host_s": self.host_s}
        if self.timing is not None:
            t = self.timing
            d.update({"median_s": t.median_s, "min_s": t.min_s, "iqr_s": t.iqr_s, "cv": t.cv, "noisy": t.noisy,
                      "timing": t.to_dict()})
            if op is not None:
                d["flops_per_s"] = op.flops / t.median_s if t.median_s > 0 else None
                d["bytes_per_s"] = op.bytes / t.median_s if t.median_s > 0 else None
        if self.check is not None:
            d["check"] = self.check.to_dict() if hasattr(self.check, "to_dict") else dict(vars(self.check))
        d["telemetry"] = dict(self.telemetry)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        from roofprof.devices.base import CheckResult
        from roofprof.timing import Timing

        timing = Timing.from_dict(d["timing"]) if d.get("timing") else None
        check = CheckResult(**d["check"]) if d.get("check") else None
        return cls(d["impl"], d["status"], d.get("note", ""), timing, check, int(d.get("kernels", 1)),
                   d.get("telemetry", {}), float(d.get("host_s") or 0.0))


@dataclass(frozen=True)
class OpResult:
    """One op of the workload: every implementation's measurement and the one chosen."""

    op: Op
    measurements: tuple[Measurement, ...]
    chosen: Measurement | None
    roofline: Roofline | None = None

    @property
    def seconds(self) -> float:
        """Chosen time of one call (NaN when nothing passed)."""
        return self.chosen.seconds if self.chosen is not None else float("nan")

    def placement(self) -> dict[str, Any]:
        """Achieved rates, the attainable roof at the op's intensity, percent of roof, bound."""
        op, s = self.op, self.seconds
        d: dict[str, Any] = {"intensity": op.intensity if op.bytes else None,
                             "flops_per_s": op.flops / s if s > 0 else None,
                             "bytes_per_s": op.bytes / s if s > 0 else None,
                             "attainable_flops_per_s": None, "percent_of_roof": None, "bound": None,
                             "roof_time_s": None, "percent_of_roof_time": None}
        if self.roofline is None or not op.bytes:
            return d
        try:
            roof = self.roofline.attainable(op.intensity, op.dtype)
            d["bound"] = self.roofline.bound(op.intensity, op.dtype)
            d["roof_time_s"] = self.roofline.time_s(op.flops, op.bytes, op.dtype)
        except ConfigError:
            return d
        d["attainable_flops_per_s"] = roof
        if s > 0 and op.flops > 0:
            d["percent_of_roof"] = 100.0 * (op.flops / s) / roof
        if s > 0:
            d["percent_of_roof_time"] = 100.0 * d["roof_time_s"] / s
        return d

    def to_dict(self) -> dict[str, Any]:
        op = self.op
        return {"name": op.name, "kind": op.kind, "phase": op.phase, "scope": op.scope, "m": op.m, "n": op.n,
                "k": op.k, "batch": op.batch, "count": op.count, "dtype": op.dtype, "flops": op.flops,
                "bytes": op.bytes, "note": op.note,
                "impl": self.chosen.impl if self.chosen else None,
                "seconds_per_call": self.seconds if self.chosen else None,
                "seconds": self.seconds * op.count if self.chosen else None,
                "cv": self.chosen.timing.cv if self.chosen else None,
                "clock_mhz": (self.chosen.telemetry or {}).get("clock_mhz") if self.chosen else None,
                **self.placement(),
                "implementations": [m.to_dict(op) for m in self.measurements]}


@dataclass(frozen=True)
class ProfileResult:
    """The profile of one pass (a prefill or a decode step) on one device."""

    workload: Workload
    ops: tuple[OpResult, ...]
    device: Mapping[str, Any]
    roofline: Roofline | None
    launch_s: float
    threads: int | None
    warnings: tuple[str, ...] = ()
    provenance: Mapping[str, Any] = field(default_factory=dict)
    roofline_source: str = ""

    @property
    def seconds(self) -> float:
        """Sum of the chosen per-op times over the pass (ops with no passing measurement excluded)."""
        return sum(o.seconds * o.op.count for o in self.ops if o.chosen is not None)

    def op_times(self) -> dict[tuple, OpTime]:
        """Chosen measurements keyed by shape, for :class:`~roofprof.rollup.MeasuredEstimator`."""
        return {o.op.shape_key: o.chosen.op_time() for o in self.ops if o.chosen is not None}

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return {"model": w.model.id, "phase": w.phase, "batch": w.batch, "prompt_tokens": w.prompt_tokens,
                "context_tokens": w.context_tokens, "dtype": w.dtype, "counting": w.counting.describe(),
                "num_layers": w.model.num_layers, "device": dict(self.device), "threads": self.threads,
                "launch_overhead_s": self.launch_s, "roofline_source": self.roofline_source,
                "roofline": self.roofline.to_dict() if self.roofline else None,
                "measured_seconds": self.seconds, "ops": [o.to_dict() for o in self.ops],
                "warnings": list(self.warnings), "provenance": dict(self.provenance)}

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` as JSON (whole or not at all)."""
        from roofprof.results import write_json_atomic

        return write_json_atomic(path, self.to_dict())


# --------------------------------------------------------------------------- adapters


def select_device(device: Any = "auto"):
    """A :class:`~roofprof.devices.base.Device` from ``"auto" | "cpu" | "cuda:N"`` (or a Device).

    Adapter over ``roofprof.devices.select`` (measurement helper's module); when that is
    not available yet, the CPU device is built directly.

    Raises:
        DeviceUnavailableError: a GPU is asked for and none is usable.
    """
    if not isinstance(device, str):
        return device
    try:
        from roofprof.devices import select
    except ImportError:
        select = None
    if select is not None:
        return select(device)
    if device not in ("auto", "cpu"):
        raise DeviceUnavailableError(f"device {device!r} is not available here (device selection missing); use cpu")
    from roofprof.devices.cpu import CpuDevice

    return CpuDevice()


def set_threads(threads: int | None) -> int | None:
    """Set torch's (and numba's) intra-op thread count; return the count in effect (None: no torch).

    ``roofprof profile`` and ``roofprof validate`` call this with the same value so that
    the per-op times and the real pass use the machine alike.
    """
    try:
        import torch
    except ImportError:
        torch = None
    if threads is not None:
        if threads < 1:
            raise ConfigError(f"threads must be at least 1, got {threads}")
        if torch is not None:
            torch.set_num_threads(threads)
        try:
            import numba

            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        except (ImportError, ValueError):
            pass
    return torch.get_num_threads() if torch is not None else threads


#: Share of all CPUs used by other processes above which a CPU measurement counts as contended.
CONTENDED_SHARE = 0.05
#: Timing rounds of a whole-pass profile (every op visited once per round).
ROUNDS = 5


class Contention:
    """How much of the machine's CPUs other processes used while the ``with`` block ran.

    Linux only (``/proc/stat`` busy time of all CPUs minus this process's CPU time, over
    wall time × CPUs); ``share`` is 0 and ``available`` False elsewhere and for windows
    shorter than :attr:`min_wall_s`. On a small machine
    shared with other work this is what makes CPU timings swing: two OpenMP threads and a
    third runnable process on two cores turn every parallel region's barrier into a
    scheduler quantum. Resolution: one clock tick (10 ms) of CPU time.

    >>> with Contention() as c:
    ...     time.sleep(0.11)
    >>> 0.0 <= c.share <= 1.0
    True
    """

    #: Shorter windows are not judged (CPU time is counted in 10 ms ticks).
    min_wall_s = 0.1

    def __init__(self) -> None:
        self.share = 0.0
        self.wall_s = 0.0
        self.available = False

    @staticmethod
    def _busy_s() -> float | None:
        try:
            with open("/proc/stat") as fh:
                fields = [int(x) for x in fh.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + fields[4]
        return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> Contention:
        self._busy0 = self._busy_s()
        t = os.times()
        self._self0 = t.user + t.system
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        busy1 = self._busy_s()
        t = os.times()
        self.wall_s = time.perf_counter() - self._t0
        if self._busy0 is None or busy1 is None or self.wall_s < self.min_wall_s:
            return  # unknown, or too short to tell at clock-tick resolution
        other = (busy1 - self._busy0) - (t.user + t.system - self._self0)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.share = min(1.0, max(0.0, other / (self.wall_s * (os.cpu_count() or cpus))))
        self.available = True


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


def _measure_roofline(device, quick: bool = True, progress: Progress | None = None):
    """Measured roofline through ``roofprof.probes.measure_roofline`` → (Roofline | None, source, result)."""
    try:
        from roofprof.probes import measure_roofline
    except ImportError as exc:
        return None, f"roofprof.probes unavailable ({exc})", None
    hook = (lambda done, total, label: progress(f"roofline: {label}", done, total)) if progress else None
    result = measure_roofline(device, quick=quick, progress=hook)
    return getattr(result, "roofline", result), "measured (quick probes)" if quick else "measured (probes)", result


def spec_roofline(device) -> Roofline | None:
    """The datasheet roofline of a GPU matched in data/gpus.json (None for CPUs and unknown GPUs)."""
    spec_id = getattr(device.info, "spec_id", None)
    if not spec_id:
        return None
    from roofprof.specs import load_gpu

    return Roofline.from_spec(load_gpu(spec_id))


def resolve_roofline(roofline: Roofline | str | os.PathLike | None, device, *, quick: bool = True,
                     use_cache: bool = True, progress: Progress | None = None) -> tuple[Roofline | None, str]:
    """The measured roofline to place ops on, and where it came from.

    ``roofline``: a :class:`Roofline`, a ``roofline.json`` path, ``"none"`` (no placement),
    or ``None``/``"auto"``: the cached quick measurement of this device if there is one,
    else a quick measurement now (cached), else the datasheet for a known GPU.
    """
    from roofprof.roofline import load_roofline

    if isinstance(roofline, Roofline):
        return roofline, "given"
    if roofline is not None and str(roofline) not in ("auto", "none"):
        return load_roofline(roofline), str(roofline)
    if str(roofline) == "none":
        return None, "none"
    cache = _cache_dir() / f"roofline-{device_fingerprint(device)}.json"
    if use_cache and cache.exists():
        try:
            return load_roofline(cache), f"cached quick measurement ({cache})"
        except ConfigError:
            pass
    measured, source, result = _measure_roofline(device, quick=quick, progress=progress)
    if measured is not None:
        try:
            if hasattr(result, "write"):
                result.write(cache)
            else:
                from roofprof.results import write_json_atomic

                write_json_atomic(cache, {"roofline": measured.to_dict(), "source": source})
        except OSError:
            pass
        return measured, source
    spec = spec_roofline(device)
    if spec is not None:
        return spec, f"datasheet ({source})"
    return None, source


# --------------------------------------------------------------------------- cache


def _cache_dir() -> Path:
    return Path(os.environ.get("ROOFPROF_CACHE") or Path.home() / ".cache" / "roofprof")


def device_fingerprint(device, threads: int | None = None) -> str:
    """A short hash of what a measurement depends on: device identity, threads, library versions."""
    from roofprof.results import library_versions

    info = device.info
    libs = library_versions()
    key = json.dumps([info.kind, info.index, info.name, info.compute_units, threads,
                      {k: libs.get(k) for k in ("torch", "numpy", "numba", "cupy-cuda12x", "cupy-cuda13x")}],
                     sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:12]


class MeasurementCache:
    """Measurements on disk, one JSON file per device fingerprint, keyed by shape and impl."""

    def __init__(self, fingerprint: str, folder: Path | None = None, enabled: bool = True,
                 model_key: Sequence[int] = ()):
        self.path = (folder or _cache_dir()) / f"measurements-{fingerprint}.json"
        self.enabled = enabled
        self.model_key = list(model_key)
        self._data: dict[str, Any] | None = None

    def key(self, op: Op, impl: str) -> str:
        """Shape and implementation; for non-GEMM ops also the head layout (RoPE and attention
        depend on heads and head size, which their shapes do not spell out)."""
        return json.dumps([*op.shape_key, impl, *(self.model_key if op.kind != "gemm" else [])])

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            self._data = {}
            if self.enabled and self.path.exists():
                try:
                    self._data = json.loads(self.path.read_text())
                except (OSError, json.JSONDecodeError):
                    self._data = {}
        return self._data

    def get(self, op: Op, impl: str) -> Measurement | None:
        if not self.enabled:
            return None
        d = self._load().get(self.key(op, impl))
        return Measurement.from_dict(d) if d else None

    def put(self, op: Op, m: Measurement) -> None:
        data = self._load()
        data[self.key(op, m.impl)] = m.to_dict()
        try:
            from roofprof.results import write_json_atomic

            write_json_atomic(self.path, data)
        except OSError:
            pass


# --------------------------------------------------------------------------- the profiler


class Profiler:
    """Measures ops on one device with every implementation; remembers shapes already measured.

    Args:
        model: the model the ops come from (the torch implementations need its head counts).
        device: a Device or ``"auto" | "cpu" | "cuda:N"``.
        impls: implementation names to run (default: all available).
        prefer: implementations preferred for the roll-up, in order, then the fastest; ``reference``
            stands for the torch implementation of every op (:mod:`roofprof.torch_ops`).
        budget_s, warmup_s: timing budget per measurement (seconds).
        threads: torch/numba intra-op threads (None: leave as is).
        roofline: measured roofline for placement (see :func:`resolve_roofline`).
        use_cache: read cached measurements (they are always written).
        progress: ``progress(label, done, total)`` callback.
    """

    def __init__(self, model: ModelSpec, device: Any = "auto", *, impls: Sequence[str] | None = None,
                 prefer: Sequence[str] = DEFAULT_PREFER, budget_s: float = 0.2, warmup_s: float = 0.05,
                 threads: int | None = None, roofline: Any = "auto", use_cache: bool = False,
                 progress: Progress | None = None, seed: int = 0, max_repeats: int = 100):
        self.model = model
        self.openmp = single_openmp_runtime()
        self.device = select_device(device)
        self.threads = set_threads(threads)
        self._prefer_arg = tuple(prefer)
        self.budget_s, self.warmup_s, self.max_repeats = budget_s, warmup_s, max_repeats
        self.progress = progress
        self.rng = np.random.default_rng(seed)
        self.reference_impl: str | None = None
        self.impls = self._implementations(impls)
        self.prefer = tuple(n for name in self._prefer_arg
                            for n in ((self.reference_impl,) if name == "reference" else (name,)) if n)
        self.roofline, self.roofline_source = resolve_roofline(roofline, self.device, progress=progress)
        self.cache = MeasurementCache(device_fingerprint(self.device, self.threads), enabled=use_cache,
                                      model_key=(model.num_heads, model.num_kv_heads, model.head_dim))
        self._measured: dict[tuple, Measurement] = {}
        self._last_impl: str | None = None
        self.switch_idle_s = 0.3
        self._launch_s: float | None = None
        self.retries = 2
        self._retry_s_left = 60.0  # total seconds this profiler may spend re-measuring contended ops
        self.warnings: list[str] = []
        if self.openmp == "already omp" and any(i.name in ("torch", "torch-eager") for i in self.impls):
            self.warnings.append("numba's OpenMP threads were started before profiling (omp layer): two OpenMP "
                                 "runtimes share the cores and torch timings may be inflated; run profile in a "
                                 "fresh process (roofprof run does) or set NUMBA_THREADING_LAYER=workqueue")

    # -- setup ---------------------------------------------------------------------------
    def _implementations(self, names: Sequence[str] | None) -> list:
        impls = list(self.device.implementations())
        try:
            from roofprof.torch_ops import TorchOps

            info = self.device.info
            torch_impl = TorchOps(self.model, self.device.info.torch_device,
                                  cache_bytes=info.last_level_cache_bytes or (32 << 20))
            if any(i.name == "torch" for i in impls):
                torch_impl.name = "torch-eager"
            impls.append(torch_impl)
            self.reference_impl = torch_impl.name
        except ImportError:
            pass
        if names:
            known = {i.name for i in impls}
            unknown = [n for n in names if n not in known]
            if unknown:
                from roofprof.errors import UnknownNameError

                raise UnknownNameError("implementation", unknown[0], known)
            impls = [i for i in impls if i.name in names]
        return impls

    @property
    def launch_s(self) -> float:
        """Per-kernel launch overhead (measured once, lazily)."""
        if self._launch_s is None:
            self._launch_s = self.device.launch_overhead_s()
        return self._launch_s

    # -- measuring -----------------------------------------------------------------------
    def ordered_impls(self) -> list:
        """Implementations in measuring order: the preferred ones first, then the rest."""
        rank = {name: i for i, name in enumerate(self.prefer)}
        return sorted(self.impls, key=lambda impl: rank.get(impl.name, len(rank)))

    def measure_shape(self, op: Op, impls: Sequence | None = None) -> tuple[Measurement, ...]:
        """``op``'s shape with every implementation (or ``impls``), each measured once per shape."""
        return tuple(self._get(impl, op) for impl in (impls if impls is not None else self.ordered_impls()))

    def _get(self, impl, op: Op) -> Measurement:
        key = (op.shape_key, impl.name)
        if key not in self._measured:
            if self._last_impl not in (None, impl.name) and impl.supports(op) is None:
                # Another runtime's worker threads (numba/OpenMP, OpenBLAS) spin for a while after
                # their last parallel region and would steal the cores from this one: let them sleep.
                time.sleep(self.switch_idle_s)
                self._last_impl = None
            m = self._measure_impl(impl, op)
            if m.ok:
                self._last_impl = impl.name
            self._measured[key] = m
        return self._measured[key]

    def _measure_impl(self, impl, op: Op) -> Measurement:
        """One op alone (on demand): check, then time with retries on a busy machine."""
        prepared, check, result = self._prepare_checked(impl, op)
        if result is not None:
            return result
        try:
            timing, telemetry = self._time(prepared, op)
            host_s = self._host_issue_s(prepared, timing) if self.device.info.kind != "cpu" else 0.0
            m = Measurement(impl.name, "ok", getattr(prepared, "note", "") or check.note, timing, check,
                            int(getattr(prepared, "kernels", 1)), telemetry, host_s)
            self.cache.put(op, m)
            return m
        except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
            msg = f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__}: {exc}"
            self.warnings.append(msg)
            return Measurement(impl.name, "error", msg)
        finally:
            prepared.release()

    def _time(self, prepared, op: Op):
        """Time one prepared op; on a CPU, re-measure (up to ``retries`` times) when other
        processes took a share of the cores during the measurement (see :class:`Contention`)."""
        from roofprof.timing import benchmark

        calls, flush = self._calls_and_flush(prepared, op)
        best = None
        attempts = 1 + (self.retries if self.device.info.kind == "cpu" else 0)
        for attempt in range(attempts):
            sampler = self.device.sampler(interval_s=0.05)
            meter = Contention()
            with sampler, meter:
                timing = benchmark(list(calls), clock=self.device.clock(), budget_s=self.budget_s,
                                   warmup_s=self.warmup_s, flush=flush, max_repeats=self.max_repeats,
                                   estimate_runs=1)
            if best is None or meter.share < best[2].share:
                best = (timing, sampler, meter)
            if meter.share <= CONTENDED_SHARE or self._retry_s_left <= 0 or attempt == attempts - 1:
                break
            pause = min(1.0, self._retry_s_left)
            self._retry_s_left -= pause + meter.wall_s
            time.sleep(pause)  # let the other process's burst pass, then measure again
        timing, sampler, meter = best
        summary = sampler.summary()
        telemetry = summary.to_dict() if hasattr(summary, "to_dict") else {}
        if hasattr(summary, "clock_mhz"):
            telemetry["clock_mhz"] = summary.clock_mhz
        telemetry["other_cpu_share"] = meter.share if meter.available else None
        telemetry["attempts"] = attempt + 1
        if meter.available and meter.share > CONTENDED_SHARE:
            telemetry["contended"] = True
        return timing, telemetry

    def _calls_and_flush(self, prepared, op: Op):
        """The equivalent calls to rotate over, and what to run before each timed call."""
        calls = list(getattr(prepared, "calls", None) or [prepared.run])
        flush = None
        if len(calls) == 1 and self.roofline is not None and op.bytes:
            # no rotation: flush between calls when the op should stream its data from DRAM
            try:
                if self.roofline.bound(op.intensity, op.dtype) == "memory" and op.weight_bytes:
                    flush = self.device.flush
            except ConfigError:
                pass
        before = getattr(prepared, "before_call", None)
        if before is not None:
            flush = before if flush is None else (lambda f=flush, b=before: (b(), f()))
        return calls, flush

    def _prepare_checked(self, impl, op: Op):
        """``(prepared, check, None)`` for an op that passed its check, else ``(None, None, Measurement)``."""
        cached = self.cache.get(op, impl.name)
        if cached is not None:
            return None, None, cached
        reason = impl.supports(op)
        if reason:
            return None, None, Measurement(impl.name, "unsupported", reason)
        prepared = None
        try:
            prepared = impl.prepare(op, self.rng)
            check = prepared.check()
            if not check.ok:
                msg = (f"{op.phase} {op.name} ({op.m}×{op.n}×{op.k}) with {impl.name}: failed its correctness "
                       f"check (relative error {check.max_rel_error:.2e} > {check.tolerance:.2e}); excluded")
                self.warnings.append(msg)
                _warnings.warn(msg, stacklevel=3)
                prepared.release()
                return None, None, Measurement(impl.name, "failed", check.note, None, check,
                                               int(getattr(prepared, "kernels", 1)))
            return prepared, check, None
        except ConfigError as exc:
            result = Measurement(impl.name, "unsupported", str(exc))
        except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
            msg = f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__}: {exc}"
            self.warnings.append(msg)
            result = Measurement(impl.name, "error", msg)
        if prepared is not None:
            prepared.release()
        return None, None, result

    def _measure_group(self, impl, ops: Sequence[Op], phase: str, *, done: int = 0, total: int = 0) -> None:
        """Measure ``ops`` with one implementation in interleaved rounds.

        Every op is checked first; then each gets a warm-up and a one-call estimate that
        sizes its timed calls (``budget_s``), and the timed calls are spread over
        :data:`ROUNDS` rounds that visit every op in turn (reversed every other round). A
        slowdown of the machine lasting a second or two then touches one round of many ops
        instead of every sample of one, and the median shrugs it off. On a CPU, rounds
        during which other processes used the cores (:class:`Contention`) are dropped when
        enough samples remain.
        """
        import math

        from roofprof.timing import Timing, repeat_counts

        todo = [op for op in ops if (op.shape_key, impl.name) not in self._measured]
        if not todo:
            return
        if self._last_impl not in (None, impl.name):
            time.sleep(self.switch_idle_s)  # let the previous runtime's worker threads go to sleep
        staged = []
        for i, op in enumerate(todo):
            if self.progress:
                self.progress(f"{phase} {op.name} {op.m}×{op.n}×{op.k} [{impl.name}]: check", done + i, total)
            prepared, check, result = self._prepare_checked(impl, op)
            if result is not None:
                self._measured[(op.shape_key, impl.name)] = result
                continue
            calls, flush = self._calls_and_flush(prepared, op)
            staged.append({"op": op, "prepared": prepared, "check": check, "calls": calls, "flush": flush,
                           "turn": 0, "rounds": []})
        if not staged:
            return
        clock = self.device.clock()

        def timed(st) -> float:
            call = st["calls"][st["turn"] % len(st["calls"])]
            st["turn"] += 1
            if st["flush"] is not None:
                st["flush"]()
            clock.start()
            call()
            return clock.stop()

        try:
            for st in staged:  # warm up and estimate, one op at a time
                st["calls"][0]()
                est = timed(st)
                warm, n = repeat_counts(est, budget_s=self.budget_s, warmup_s=self.warmup_s,
                                        min_repeats=ROUNDS, max_repeats=self.max_repeats)
                for _ in range(warm):
                    st["calls"][st["turn"] % len(st["calls"])]()
                    st["turn"] += 1
                st.update(estimate=est, warmup=warm, per_round=max(1, math.ceil(n / ROUNDS)))
            sampler = self.device.sampler(interval_s=0.05)
            on_cpu = self.device.info.kind == "cpu"
            with sampler:
                r = 0
                while True:
                    order = staged if r % 2 == 0 else staged[::-1]
                    meter = Contention()  # over the whole round: long enough to judge at tick resolution
                    t_round = time.perf_counter()
                    with meter:
                        for j, st in enumerate(order):
                            if self.progress:
                                self.progress(f"{phase} timing round {r + 1}/{ROUNDS} [{impl.name}]",
                                              done + len(todo) + min(r, ROUNDS - 1) * len(todo) // ROUNDS
                                              + j * len(todo) // (ROUNDS * len(order)), total)
                            st["rounds"].append([[timed(st) for _ in range(st["per_round"])], None])
                    share = meter.share if (on_cpu and meter.available) else None
                    for st in staged:
                        st["rounds"][-1][1] = share
                    r += 1
                    clean = sum(1 for _, sh in staged[0]["rounds"] if sh is None or sh <= CONTENDED_SHARE)
                    if r >= ROUNDS and (clean >= 3 or r >= 2 * ROUNDS or self._retry_s_left <= 0):
                        break
                    if r >= ROUNDS:  # a busy machine: one more round, after a pause, from the retry budget
                        self._retry_s_left -= 0.5 + (time.perf_counter() - t_round)
                        time.sleep(0.5)
            summary = sampler.summary()
            base_telemetry = summary.to_dict() if hasattr(summary, "to_dict") else {}
            if hasattr(summary, "clock_mhz"):
                base_telemetry["clock_mhz"] = summary.clock_mhz
            for st in staged:
                op = st["op"]
                rounds = st["rounds"]
                clean = [s for s, share in rounds if share is None or share <= CONTENDED_SHARE]
                kept = clean if sum(len(s) for s in clean) >= 3 else [s for s, _ in rounds]
                samples = tuple(x for s in kept for x in s)
                shares = [share for _, share in rounds if share is not None]
                telemetry = dict(base_telemetry)
                telemetry.update(rounds=len(rounds), rounds_kept=len(kept),
                                 other_cpu_share=max(shares) if shares else None)
                if shares and len(kept) < len(rounds):
                    telemetry["rounds_dropped_busy"] = len(rounds) - len(kept)
                if shares and min(shares) > CONTENDED_SHARE:
                    telemetry["contended"] = True
                mode = "interleaved" + (f"+rotate:{len(st['calls'])}" if len(st["calls"]) > 1 else "") + \
                    ("+flush" if st["flush"] is not None else "")
                timing = Timing(samples_s=samples, flush=mode, warmup_runs=st["warmup"], estimate_s=st["estimate"],
                                clock=getattr(clock, "name", type(clock).__name__))
                prepared = st["prepared"]
                host_s = self._host_issue_s(prepared, timing) if not on_cpu else 0.0
                m = Measurement(impl.name, "ok", getattr(prepared, "note", "") or st["check"].note, timing,
                                st["check"], int(getattr(prepared, "kernels", 1)), telemetry, host_s)
                self.cache.put(op, m)
                self._measured[(op.shape_key, impl.name)] = m
            self._last_impl = impl.name
        except Exception as exc:  # noqa: BLE001 - a kernel that raises while timed is reported, never fatal
            for st in staged:
                op = st["op"]
                if (op.shape_key, impl.name) not in self._measured:
                    msg = f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__} while timed: {exc}"
                    self.warnings.append(msg)
                    self._measured[(op.shape_key, impl.name)] = Measurement(impl.name, "error", msg)
        finally:
            for st in staged:
                st["prepared"].release()

    def _host_issue_s(self, prepared, timing) -> float:
        """Per-call wall time of back-to-back calls with one synchronisation at the end.

        On an asynchronous device this is ``max(device time, host issue time)`` of the op
        in steady state: what an eager framework gets when the host, not the GPU, is the
        bottleneck (small decode kernels).
        """
        calls = getattr(prepared, "calls", None) or [prepared.run]
        n = max(3, min(200, int(self.budget_s / max(timing.median_s, 1e-6))))
        self.device.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            calls[i % len(calls)]()
        self.device.synchronize()
        return (time.perf_counter() - t0) / n

    def choose(self, measurements: Sequence[Measurement]) -> Measurement | None:
        """The measurement the roll-up uses: first of ``prefer`` that passed, else the fastest."""
        good = [m for m in measurements if m.ok]
        for name in self.prefer:
            if name == "fastest":
                break
            for m in good:
                if m.impl == name:
                    return m
        return min(good, key=lambda m: m.seconds, default=None)

    def op_time(self, op: Op) -> tuple[OpTime | None, str]:
        """The roll-up time of ``op``, measuring on demand only what the choice needs.

        The preferred implementations are tried first; the others only when none of those
        passed (then the fastest of them). Returns ``(None, reasons)`` when nothing passed.
        """
        ordered = self.ordered_impls()
        preferred = [i for i in ordered if i.name in self.prefer]
        ms = self.measure_shape(op, preferred) if preferred else ()
        chosen = self.choose(ms)
        if chosen is None:
            ms = self.measure_shape(op, ordered)
            chosen = self.choose(ms)
        if chosen is None:
            reasons = "; ".join(f"{m.impl}: {m.status}" + (f" ({m.note})" if m.status != "ok" and m.note else "")
                                for m in ms) or "no implementation"
            return None, reasons
        return chosen.op_time(), ""

    def profile(self, workload: Workload) -> ProfileResult:
        """Measure every op of ``workload`` and place it on the roofline."""
        from roofprof.results import provenance

        ops = workload.ops
        results = []
        before = len(self.warnings)
        # implementation by implementation (preferred first), each over every shape: one
        # runtime at a time owns the cores, with an idle gap between runtimes
        impls = self.ordered_impls()
        shapes = list({op.shape_key: op for op in ops}.values())
        total = len(impls) * len(shapes) * 2  # checks, then interleaved timing rounds
        for i, impl in enumerate(impls):
            self._measure_group(impl, shapes, workload.phase, done=i * len(shapes) * 2, total=total)
        for op in ops:
            ms = self.measure_shape(op)
            chosen = self.choose(ms)
            if chosen is None:
                msg = (f"{op.phase} {op.name}: no implementation measured it "
                       f"({'; '.join(f'{m.impl}: {m.status}' for m in ms) or 'none available'}); "
                       "the roll-up counts it from the empirical roofline")
                self.warnings.append(msg)
                _warnings.warn(msg, stacklevel=2)
            results.append(OpResult(op, ms, chosen, self.roofline))
        if self.progress:
            self.progress(f"{workload.phase} done", total, total)
        info = self.device.info
        return ProfileResult(workload, tuple(results), info.to_dict(), self.roofline, self.launch_s, self.threads,
                             tuple(self.warnings[before:]),
                             provenance(device=info.to_dict(), threads=self.threads,
                                        implementations=[i.name for i in self.impls],
                                        budget_s=self.budget_s, numba_threading_layer=self.openmp),
                             self.roofline_source)

    def estimator(self, *, include_launch: bool = True, inputs: Mapping[str, Any] | None = None) -> MeasuredEstimator:
        """A ``measured`` estimator over this profiler (measures unseen shapes on demand)."""
        fallback = RooflineEstimator(self.roofline, name="empirical", source=self.roofline_source) \
            if self.roofline is not None else None

        def classify(op: Op) -> str:
            if self.roofline is None or not op.bytes:
                return "measured"
            try:
                return self.roofline.bound(op.intensity, op.dtype)
            except ConfigError:
                return "measured"

        d = {"device": self.device.info.to_dict(), "threads": self.threads, "roofline_source": self.roofline_source,
             "implementations": [i.name for i in self.impls], "prefer": list(self.prefer),
             "cache": str(self.cache.path) if self.cache.enabled else None, **(inputs or {})}
        return MeasuredEstimator(launch_s=self.launch_s, include_launch=include_launch, fallback=fallback,
                                 measure=self.op_time, classify=classify, inputs=d)


# --------------------------------------------------------------------------- API


def _model(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def profile(
    model: str | ModelSpec,
    phase: str = "decode",
    *,
    batch: int = 1,
    prompt_tokens: int = 128,
    context_tokens: int | None = None,
    dtype: str = "fp32",
    device: Any = "auto",
    impls: Sequence[str] | None = None,
    convention: str | Counting = "engine",
    roofline: Any = "auto",
    threads: int | None = None,
    budget_s: float = 0.2,
    prefer: Sequence[str] = DEFAULT_PREFER,
    use_cache: bool = False,
    progress: Progress | None = None,
    profiler: Profiler | None = None,
) -> ProfileResult:
    """Measure every op of one pass of ``model`` on ``device`` and place it on the roofline.

    Args:
        model: id or config path (or a ModelSpec).
        phase: ``prefill`` (``prompt_tokens`` per sequence) or ``decode`` (one step at
            ``context_tokens`` cached tokens, default the prompt).
        dtype: weights/activations dtype (``fp32`` on a CPU; must match the real model's).
        device: ``auto | cpu | cuda:N`` or a Device.
        impls: implementation names (default: all available on the device).
        convention: op counting (``engine``: what eager PyTorch/transformers runs, with
            SDPA attention counted as fused; pass a Counting with ``attention="unfused"``
            for eager attention).
        roofline: measured roofline (see :func:`resolve_roofline`).
        threads: torch/numba threads (same value as for ``validate``).
        budget_s: timed seconds per op and implementation.
        profiler: reuse a :class:`Profiler` (and its measured shapes) across calls.

    Returns:
        A :class:`ProfileResult` (``.seconds`` is the measured sum, ``.to_dict()`` the JSON).

    Raises:
        RoofprofError: bad model/phase/sizes/dtype, unknown implementation, no such device.

    >>> from roofprof.specs import ModelSpec
    >>> tiny = ModelSpec("tiny", 64, 128, 2, 4, 2, 16, 100, True, 256)
    >>> r = profile(tiny, "decode", context_tokens=8, roofline="none", budget_s=0.002, impls=["torch"])
    >>> [o.chosen.impl for o in r.ops][:3], r.seconds > 0
    (['torch', 'torch', 'torch'], True)
    """
    spec = _model(model)
    workload = llama_ops(spec, phase, batch=batch, prompt_tokens=prompt_tokens, context_tokens=context_tokens,
                         dtype=dtype, convention=convention)
    prof = profiler or Profiler(spec, device, impls=impls, prefer=prefer, budget_s=budget_s, threads=threads,
                                roofline=roofline, use_cache=use_cache, progress=progress)
    return prof.profile(workload)


def measured_estimator(model: str | ModelSpec, device: Any = "auto", dtype: str = "fp32", roofline: Any = None, *,
                       include_launch: bool = True, threads: int | None = None, budget_s: float = 0.2,
                       use_cache: bool = True, impls: Sequence[str] | None = None,
                       prefer: Sequence[str] = DEFAULT_PREFER, progress: Progress | None = None) -> MeasuredEstimator:
    """The ``measured`` estimator for ``predict``: per-op times of this device, profiled on demand.

    Ops with a cached measurement (same device, threads, libraries) reuse it; the others
    are measured when the prediction asks for them. ``roofline`` (a path, a Roofline, or
    None for the cached/quick-measured one) classifies bounds and covers ops no
    implementation measures. ``dtype`` is only checked here (the ops carry their own).

    Raises:
        RoofprofError: unknown model, device unavailable, unreadable roofline.
    """
    from roofprof.specs import DTYPES

    if dtype not in DTYPES:
        from roofprof.errors import UnknownNameError

        raise UnknownNameError("dtype", dtype, DTYPES)
    spec = _model(model)
    prof = Profiler(spec, device, impls=impls, prefer=prefer, budget_s=budget_s, threads=threads,
                    roofline=roofline if roofline is not None else "auto", use_cache=use_cache, progress=progress)
    return prof.estimator(include_launch=include_launch,
                          inputs={"roofline_file": str(roofline) if roofline is not None and not isinstance(roofline, Roofline) else None})


@dataclass(frozen=True)
class MeasureResult:
    """A user function placed on the roofline (see :func:`measure`)."""

    name: str
    timing: Any
    flops: float
    bytes: float
    dtype: str
    roofline: Roofline | None
    roofline_source: str = ""

    @property
    def seconds(self) -> float:
        return self.timing.median_s

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds

    def placement(self) -> dict[str, Any]:
        """Attainable roof at the intensity, percent of roof and bound (None without a roofline)."""
        if self.roofline is None or not self.bytes:
            return {"attainable_flops_per_s": None, "percent_of_roof": None, "bound": None}
        roof = self.roofline.attainable(self.intensity, self.dtype)
        pct = 100.0 * self.flops_per_s / roof if self.flops else 100.0 * self.roofline.time_s(
            self.flops, self.bytes, self.dtype) / self.seconds
        return {"attainable_flops_per_s": roof, "percent_of_roof": pct,
                "bound": self.roofline.bound(self.intensity, self.dtype)}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds, "flops": self.flops, "bytes": self.bytes,
                "dtype": self.dtype, "intensity": self.intensity if math.isfinite(self.intensity) else None,
                "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s, **self.placement(),
                "timing": self.timing.to_dict(), "roofline_source": self.roofline_source}


def measure(fn: Callable[[], Any], *, flops: float, bytes: float, dtype: str = "fp32", device: Any = "auto",
            roofline: Any = "auto", name: str | None = None, budget_s: float = 0.2, warmup_s: float = 0.05,
            flush: bool = False) -> MeasureResult:
    """Time any function or kernel and place it on this machine's roofline.

    Args:
        fn: a callable with no arguments doing the work once (on a GPU it may return before
            the work ends: the device clock synchronises).
        flops, bytes: the work of one call (FLOPs, and the minimum bytes it must move).
        dtype: the dtype whose compute roof applies.
        device: where it runs (for the clock, flush and roofline).
        roofline: a Roofline, a roofline.json path, ``"auto"`` (cached/quick-measured, or
            the datasheet for a known GPU) or ``"none"``.
        flush: flush the caches before every timed call (cold data).

    Returns:
        A :class:`MeasureResult`: median time, achieved FLOP/s and bytes/s, intensity,
        attainable roof, percent of roof, bound.

    Raises:
        ConfigError: non-positive flops and bytes together, or an unusable roofline.

    >>> import numpy as np
    >>> a = np.ones((64, 64), dtype=np.float32)
    >>> r = measure(lambda: a @ a, flops=2 * 64**3, bytes=3 * 64 * 64 * 4, roofline="none", budget_s=0.01)
    >>> r.seconds > 0 and round(r.intensity, 1)
    10.7
    """
    from roofprof.timing import benchmark

    if flops < 0 or bytes < 0 or (flops == 0 and bytes == 0):
        raise ConfigError(f"measure() needs flops >= 0 and bytes >= 0, not both zero; got flops={flops}, bytes={bytes}")
    dev = select_device(device)
    roof, source = resolve_roofline(roofline, dev)
    timing = benchmark(fn, clock=dev.clock(), budget_s=budget_s, warmup_s=warmup_s,
                       flush=dev.flush if flush else None)
    return MeasureResult(name or getattr(fn, "__name__", "fn"), timing, float(flops), float(bytes), dtype, roof, source)


class _CallableModule(types.ModuleType):
    """``roofprof.profile(...)`` calls :func:`profile`: the module and the function share the name."""

    def __call__(self, *args: Any, **kwargs: Any):
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
