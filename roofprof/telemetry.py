"""Telemetry: clocks, power, temperature and throttle reasons sampled during a measurement.

A sampler is a context manager around a measurement. A background thread samples every
``interval_s`` (default 10 ms) from entry to exit, and :meth:`Sampler.summary` condenses
the samples into a :class:`TelemetrySummary` (median and minimum clock, reasons seen).

* :class:`NvmlSampler`: a GPU through NVML (``pynvml`` from nvidia-ml-py): SM and memory
  clocks, power, temperature, utilisation, clocks-event (throttle) reasons. Each field
  falls back on older calls where the driver lacks the newer one
  (``NVMLError_FunctionNotFound``) and becomes ``None`` when unsupported.
* :class:`CpuFreqSampler`: per-core CPU frequency from sysfs ``cpufreq`` or
  ``/proc/cpuinfo`` where the OS exposes it.
* :class:`NullSampler`: telemetry "unavailable: <reason>".

No NVML, no driver, no permission: the summary says ``available=False`` with the reason;
a sampler never raises into the measurement it watches.

>>> with NullSampler("no GPU") as s:
...     pass
>>> s.summary().available, s.summary().reason
(False, 'unavailable: no GPU')
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CLOCKS_EVENT_REASONS",
    "CONTENDED_SHARE",
    "DEFAULT_INTERVAL_S",
    "THROTTLE_REASONS",
    "Contention",
    "CpuFreqSampler",
    "NullSampler",
    "NvmlSampler",
    "Sampler",
    "TelemetrySummary",
    "loadavg",
    "reason_names",
]

DEFAULT_INTERVAL_S = 0.01
#: Share of all CPUs used by other processes above which a CPU measurement counts as contended.
CONTENDED_SHARE = 0.05

#: NVML clocks-event reason bits (nvmlClocksEventReason*), name without prefix.
CLOCKS_EVENT_REASONS: Mapping[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
#: Reasons that mean the clock was held below what the workload asked for.
THROTTLE_REASONS = frozenset(
    {"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"}
)


@dataclass(frozen=True)
class TelemetrySummary:
    """What the device did during one measurement.

    Every numeric field is ``None`` when the source could not provide it (never a crash).
    Clocks in MHz, power in W, temperature in °C, utilisation in percent.
    """

    available: bool
    reason: str = ""
    source: str = ""
    samples: int = 0
    interval_s: float | None = None
    sm_clock_mhz_median: float | None = None
    sm_clock_mhz_min: float | None = None
    mem_clock_mhz_median: float | None = None
    power_w_median: float | None = None
    temperature_c_max: float | None = None
    utilisation: float | None = None
    clocks_event_reasons: tuple[str, ...] = ()
    cpu_clock_mhz_median: float | None = None
    cpu_clock_mhz_min: float | None = None
    missing: tuple[str, ...] = ()

    @property
    def throttled(self) -> bool:
        """True when a power/thermal/slowdown reason was seen (not idle or app clocks)."""
        return any(r in THROTTLE_REASONS for r in self.clocks_event_reasons)

    @property
    def clock_mhz(self) -> float | None:
        """Median compute clock seen: SM clock on a GPU, core clock on a CPU."""
        return (
            self.sm_clock_mhz_median
            if self.sm_clock_mhz_median is not None
            else self.cpu_clock_mhz_median
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clocks_event_reasons"] = list(self.clocks_event_reasons)
        d["missing"] = list(self.missing)
        d["throttled"] = self.throttled
        return d

    @classmethod
    def unavailable(cls, reason: str) -> TelemetrySummary:
        """A summary for a sampler that could not run (``reason`` says why)."""
        text = reason if reason.startswith("unavailable") else f"unavailable: {reason}"
        return cls(available=False, reason=text, source="none")


@runtime_checkable
class Sampler(Protocol):
    """Samples device telemetry while used as a context manager."""

    def __enter__(self) -> Sampler: ...

    def __exit__(self, *exc: Any) -> None: ...

    def summary(self) -> TelemetrySummary: ...


class NullSampler:
    """A sampler that records nothing: telemetry ``unavailable: <reason>``."""

    def __init__(self, reason: str = "no telemetry source"):
        self.reason = reason

    def __enter__(self) -> NullSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def summary(self) -> TelemetrySummary:
        return TelemetrySummary.unavailable(self.reason)


class _ThreadSampler:
    """Base: a daemon thread calling ``_sample()`` every ``interval_s`` inside ``with``."""

    source = ""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unavailable: str | None = None

    # subclasses ---------------------------------------------------------------------
    def _open(self) -> None:
        """Prepare the source; raise to mark telemetry unavailable (message = reason)."""

    def _close(self) -> None:
        """Release the source."""

    def _sample(self) -> dict[str, Any]:
        raise NotImplementedError

    def _summarise(self, records: list[dict[str, Any]]) -> TelemetrySummary:
        raise NotImplementedError

    # context manager ----------------------------------------------------------------
    def __enter__(self):
        self.records = []
        self._stop.clear()
        self._unavailable = None
        try:
            self._open()
        except Exception as exc:  # noqa: BLE001 - any failure means "unavailable", never a crash
            self._unavailable = _describe(exc)
            try:
                self._close()
            except Exception:  # noqa: BLE001
                pass
            return self
        self._safe_sample()
        self._thread = threading.Thread(
            target=self._run, name=f"roofprof-{self.source}-sampler", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._unavailable is not None:
            return None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 10 * self.interval_s))
            self._thread = None
        self._safe_sample()
        try:
            self._close()
        except Exception:  # noqa: BLE001
            pass
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._safe_sample()

    def _safe_sample(self) -> None:
        try:
            record = self._sample()
        except Exception:  # noqa: BLE001 - a failed sample is dropped, the measurement goes on
            return
        record["t"] = time.perf_counter()
        self.records.append(record)

    def summary(self) -> TelemetrySummary:
        """Condense the samples of the last ``with`` block."""
        if self._unavailable is not None:
            return TelemetrySummary.unavailable(self._unavailable)
        if not self.records:
            return TelemetrySummary.unavailable(f"{self.source}: no samples taken")
        return self._summarise(list(self.records))


# --------------------------------------------------------------------------- NVML


class NvmlSampler(_ThreadSampler):
    """Samples one GPU through NVML.

    Args:
        handle_index: NVML device index.
        interval_s: sampling period (seconds).
        nvml: the NVML module (default: ``import pynvml``); tests pass a fake.

    Missing calls degrade one field at a time: ``nvmlDeviceGetCurrentClocksEventReasons``
    falls back on ``...ClocksThrottleReasons``, ``nvmlDeviceGetTemperatureV`` on
    ``nvmlDeviceGetTemperature``; a field NVML does not support is listed in
    ``summary().missing`` and left ``None``.
    """

    source = "nvml"

    def __init__(
        self, handle_index: int = 0, interval_s: float = DEFAULT_INTERVAL_S, nvml: Any = None
    ):
        super().__init__(interval_s)
        self.handle_index = handle_index
        self._nvml = nvml
        self._handle = None
        self._initialised = False
        self._fields: dict[str, list[Callable[[], Any]]] = {}
        self._missing: dict[str, str] = {}

    def _open(self) -> None:
        from roofprof.devices import (
            _nvml,  # the one NVML shim (imported here: devices sit above telemetry)
        )

        self._shim = _nvml
        nv = _nvml.load(self._nvml)  # NvmlUnavailable (a RuntimeError) without nvidia-ml-py
        self._nvml = nv
        reason = _nvml.init(nv)  # joins the process's NVML session: free while a device holds one
        if reason:
            raise RuntimeError(f"NVML: {reason}")
        self._initialised = True
        self._handle = nv.nvmlDeviceGetHandleByIndex(self.handle_index)
        h = self._handle
        clock_sm = getattr(nv, "NVML_CLOCK_SM", 1)
        clock_mem = getattr(nv, "NVML_CLOCK_MEM", 2)
        temp_gpu = getattr(nv, "NVML_TEMPERATURE_GPU", 0)

        def call(name: str, *args: Any) -> Callable[[], Any]:
            def f() -> Any:
                fn = getattr(nv, name, None)
                if fn is None:
                    raise _FunctionMissing(name)
                return fn(h, *args)

            f.__name__ = name
            return f

        self._fields = {
            "sm_clock_mhz": [call("nvmlDeviceGetClockInfo", clock_sm)],
            "mem_clock_mhz": [call("nvmlDeviceGetClockInfo", clock_mem)],
            "power_mw": [call("nvmlDeviceGetPowerUsage")],
            "temperature_c": [
                call("nvmlDeviceGetTemperatureV", temp_gpu),
                call("nvmlDeviceGetTemperature", temp_gpu),
            ],
            "utilisation": [call("nvmlDeviceGetUtilizationRates")],
            "reasons": [
                call("nvmlDeviceGetCurrentClocksEventReasons"),
                call("nvmlDeviceGetCurrentClocksThrottleReasons"),
            ],
        }
        self._missing = {}

    def _close(self) -> None:
        if self._initialised:
            self._initialised = False
            self._shim.shutdown(self._nvml)

    def _read(self, field: str) -> Any:
        """One field: try its calls in order; drop calls the driver lacks; None on failure."""
        calls = self._fields.get(field, [])
        while calls:
            try:
                return calls[0]()
            except Exception as exc:  # noqa: BLE001
                kind = self._shim.error_kind(exc, self._nvml)
                if kind in ("function_not_found", "not_supported", "missing"):
                    calls.pop(0)  # permanently: fall back on the next call, if any
                    if not calls:
                        self._missing[field] = kind
                    continue
                return None  # transient (e.g. GPU busy): no value in this sample
        return None

    def _sample(self) -> dict[str, Any]:
        util = self._read("utilisation")
        return {
            "sm_clock_mhz": self._read("sm_clock_mhz"),
            "mem_clock_mhz": self._read("mem_clock_mhz"),
            "power_mw": self._read("power_mw"),
            "temperature_c": self._read("temperature_c"),
            "utilisation": getattr(util, "gpu", util if isinstance(util, (int, float)) else None),
            "reasons": self._read("reasons"),
        }

    def _summarise(self, records: list[dict[str, Any]]) -> TelemetrySummary:
        def values(key: str) -> list[float]:
            return [float(r[key]) for r in records if isinstance(r.get(key), (int, float))]

        sm, mem, power = values("sm_clock_mhz"), values("mem_clock_mhz"), values("power_mw")
        temp, util = values("temperature_c"), values("utilisation")
        mask = 0
        for r in records:
            if isinstance(r.get("reasons"), int):
                mask |= r["reasons"]
        return TelemetrySummary(
            available=True,
            reason="",
            source="nvml",
            samples=len(records),
            interval_s=self.interval_s,
            sm_clock_mhz_median=_median(sm),
            sm_clock_mhz_min=min(sm) if sm else None,
            mem_clock_mhz_median=_median(mem),
            power_w_median=_median(power) / 1000.0 if power else None,
            temperature_c_max=max(temp) if temp else None,
            utilisation=_median(util),
            clocks_event_reasons=reason_names(mask),
            missing=tuple(sorted(self._missing)),
        )


def reason_names(mask: int) -> tuple[str, ...]:
    """Names of the clocks-event reason bits set in ``mask``.

    >>> reason_names(0x1 | 0x4)
    ('GpuIdle', 'SwPowerCap')
    """
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCKS_EVENT_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return tuple(names)


class _FunctionMissing(AttributeError):
    """The NVML module has no such function (an older nvidia-ml-py)."""


# --------------------------------------------------------------------------- CPU


class CpuFreqSampler(_ThreadSampler):
    """Samples per-core CPU frequency where the OS exposes it.

    Reads ``<sysfs>/cpuN/cpufreq/scaling_cur_freq`` (kHz) for each CPU in ``cpus``, or,
    without cpufreq (common in VMs), the ``cpu MHz`` lines of ``/proc/cpuinfo`` (which a
    hypervisor may hold at a fixed nominal value: the summary says so).

    Args:
        interval_s: sampling period (seconds).
        cpus: CPU ids to read (default: those this process may run on).
        sysfs: root of the cpu tree (tests point it at a fake tree).
        cpuinfo: path of cpuinfo.
    """

    source = "cpufreq"

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        cpus: list[int] | None = None,
        sysfs: str | Path = "/sys/devices/system/cpu",
        cpuinfo: str | Path = "/proc/cpuinfo",
    ):
        super().__init__(interval_s)
        self.cpus = cpus
        self.sysfs = Path(sysfs)
        self.cpuinfo = Path(cpuinfo)
        self._paths: list[Path] = []
        self._mode = ""

    def _open(self) -> None:
        cpus = self.cpus if self.cpus is not None else _allowed_cpus()
        paths = [self.sysfs / f"cpu{c}" / "cpufreq" / "scaling_cur_freq" for c in cpus]
        if paths and all(p.exists() for p in paths):
            self._paths, self._mode = paths, "sysfs"
            self.source = "cpufreq"
            return
        if self.cpuinfo.exists() and _cpuinfo_mhz(self.cpuinfo.read_text()):
            self._mode = "cpuinfo"
            self.source = "cpuinfo"
            return
        raise RuntimeError(
            "the OS exposes no CPU frequency (no cpufreq in sysfs, no 'cpu MHz' in cpuinfo)"
        )

    def _sample(self) -> dict[str, Any]:
        if self._mode == "sysfs":
            return {"mhz": [int(p.read_text().strip()) / 1000.0 for p in self._paths]}
        return {"mhz": _cpuinfo_mhz(self.cpuinfo.read_text())}

    def _summarise(self, records: list[dict[str, Any]]) -> TelemetrySummary:
        mhz = [v for r in records for v in r.get("mhz", [])]
        reason = (
            ""
            if self._mode == "sysfs"
            else ("frequency from /proc/cpuinfo; a hypervisor may report a fixed nominal value")
        )
        return TelemetrySummary(
            available=bool(mhz),
            reason=reason,
            source=self.source,
            samples=len(records),
            interval_s=self.interval_s,
            cpu_clock_mhz_median=_median(mhz),
            cpu_clock_mhz_min=min(mhz) if mhz else None,
        )


def _cpuinfo_mhz(text: str) -> list[float]:
    out = []
    for line in text.splitlines():
        if line.lower().startswith("cpu mhz"):
            try:
                out.append(float(line.split(":", 1)[1]))
            except (IndexError, ValueError):
                continue
    return out


def _allowed_cpus() -> list[int]:
    import os

    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).strip()
    if name.startswith("NVMLError"):
        return f"NVML: {text or name}"
    return text or name


# --------------------------------------------------------------------------- contention


def loadavg() -> tuple[float, float, float] | None:
    """The 1, 5 and 15-minute load averages (None where the OS has none)."""
    try:
        return os.getloadavg()
    except (OSError, AttributeError):
        return None


class Contention:
    """How much of the machine's CPUs other processes used while it watched: THE meter.

    Linux only: the busy time of all CPUs in ``/proc/stat`` minus this process's CPU
    time, over wall time × CPUs. :attr:`share` runs from 0 to 1 (``percent`` is the same
    ×100); it is 0 and :attr:`available` False elsewhere, and for windows shorter than
    :attr:`min_wall_s` (CPU time is counted in 10 ms clock ticks). On a small machine
    shared with other work this is what makes CPU timings swing: two OpenMP threads and a
    third runnable process on two cores turn every parallel region's barrier into a
    scheduler quantum. A share above :data:`CONTENDED_SHARE` marks a measurement contended.

    Use it around a measurement (``with Contention() as c``) or, for a long run read at
    several points, ``c = Contention().start()`` then ``c.read()`` (share so far).
    :attr:`minor_faults` counts this process's minor page faults over the same window
    (pages touched for the first time: memory the allocator had handed back to the OS;
    None where ``getrusage`` is missing).

    >>> with Contention() as c:
    ...     time.sleep(0.11)
    >>> 0.0 <= c.share <= 1.0 and c.contended == (c.share > CONTENDED_SHARE)
    True
    """

    #: Shorter windows are not judged (CPU time is counted in 10 ms ticks).
    min_wall_s = 0.1

    def __init__(self) -> None:
        self.share = 0.0
        self.wall_s = 0.0
        self.available = False
        self._busy0: float | None = None
        self._self0 = 0.0
        self._t0 = 0.0
        self.minor_faults: int | None = None
        self._faults0: int | None = None

    @staticmethod
    def _busy_s() -> float | None:
        try:
            with open("/proc/stat") as fh:
                fields = [int(x) for x in fh.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + fields[4]  # idle and iowait
        return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _faults() -> int | None:
        try:
            import resource

            return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        except (ImportError, OSError, AttributeError):
            return None

    def start(self) -> Contention:
        """Begin watching (returns self)."""
        self._faults0 = self._faults()
        self._busy0 = self._busy_s()
        t = os.times()
        self._self0 = t.user + t.system
        self._t0 = time.perf_counter()
        return self

    def read(self, min_wall_s: float | None = None) -> float | None:
        """The share so far (also stored in :attr:`share`); None when it cannot be told.

        ``min_wall_s`` overrides :attr:`min_wall_s` for this reading.
        """
        busy1 = self._busy_s()
        t = os.times()
        self.wall_s = time.perf_counter() - self._t0
        faults1 = self._faults()
        if self._faults0 is not None and faults1 is not None:
            self.minor_faults = faults1 - self._faults0
        shortest = self.min_wall_s if min_wall_s is None else min_wall_s
        if self._busy0 is None or busy1 is None or self.wall_s <= 0 or self.wall_s < shortest:
            return None  # unknown, or too short to tell at clock-tick resolution
        other = (busy1 - self._busy0) - (t.user + t.system - self._self0)
        # /proc/stat's first line sums every CPU of the machine, so divide by all of them
        self.share = min(1.0, max(0.0, other / (self.wall_s * (os.cpu_count() or 1))))
        self.available = True
        return self.share

    @property
    def percent(self) -> float:
        """:attr:`share` in percent."""
        return 100.0 * self.share

    @property
    def contended(self) -> bool:
        """True when judged and above :data:`CONTENDED_SHARE`."""
        return self.available and self.share > CONTENDED_SHARE

    def __enter__(self) -> Contention:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.read()
