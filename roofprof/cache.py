"""What roofprof keeps between runs: measurements and rooflines, per device fingerprint.

Files live in ``$ROOFPROF_CACHE`` (default ``~/.cache/roofprof``):

* ``measurements-<fingerprint>.json``: op measurements (:class:`MeasurementCache`), keyed
  by op shape, implementation and, for non-GEMM ops, the head layout. A measurement taken
  while other processes used the CPUs is stored with ``"suspect"`` saying so; it is not
  reused silently (the profiler measures it again on next use).
* ``roofline-<fingerprint>.json``: the quick roofline of a device
  (:func:`resolve_roofline`).
* ``roofline-minimal-<fingerprint>.json``: the minimal roofline ``predict --estimator
  measured`` measures when no quick one is cached (:func:`minimal_roofline`).

The fingerprint (:func:`device_fingerprint`) hashes what a measurement depends on: device
identity, threads and library versions. Writing is best effort (an unwritable cache only
costs time), and every file is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofprof._resources import cache_root
from roofprof.errors import RoofprofError
from roofprof.profiling.engine import Measurement
from roofprof.roofline import Roofline

if TYPE_CHECKING:
    from roofprof.devices.base import Device, Probe
    from roofprof.roofline.plan import RooflinePlan
    from roofprof.roofline.probes import RooflineResult
    from roofprof.workload import Op

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "MEASUREMENT_METHOD",
    "ChosenRoofline",
    "MeasurementCache",
    "RooflineChoice",
    "cache_dir",
    "cached_roofline",
    "choose_roofline",
    "device_fingerprint",
    "minimal_roofline",
    "minimal_roofline_cache_path",
    "resolve_roofline",
    "roofline_cache_path",
    "spec_roofline",
]

Progress = Callable[[str, int, int], None]
#: A cached roofline younger than this (seconds) is reused by every job (``--fresh-roofline``
#: measures anew).
DEFAULT_MAX_AGE_S = 3600.0


def cache_dir() -> Path:
    """``$ROOFPROF_CACHE`` or ``~/.cache/roofprof``."""
    return cache_root()


#: Bumped when the way an op is built or timed changes, so older cached times are not reused
#: (3: decode attention appends into reused buffers; CPU times touched by contention re-timed on
#: one thread).
MEASUREMENT_METHOD = 3


def device_fingerprint(device: Device, threads: int | None = None) -> str:
    """A short hash of what a measurement depends on: device identity, threads, library versions."""
    from roofprof.results import library_versions

    info = device.info
    libs = library_versions()
    key = json.dumps(
        [
            info.kind,
            info.index,
            info.name,
            info.compute_units,
            threads,
            {k: libs.get(k) for k in ("torch", "numpy", "numba", "cupy-cuda12x", "cupy-cuda13x")},
            MEASUREMENT_METHOD,
        ],
        sort_keys=True,
    )
    return hashlib.sha1(key.encode()).hexdigest()[:12]


class MeasurementCache:
    """Measurements on disk, one JSON file per device fingerprint, keyed by shape and impl.

    Args:
        fingerprint: :func:`device_fingerprint` of the device and threads.
        folder: where the file lives (default :func:`cache_dir`).
        enabled: read cached entries (``enabled=False`` measures afresh and replaces the
            entries it measures, keeping the others).
        store: write entries to the file (``False``: kept in memory only, for measurements
            that must not be reused, e.g. taken under a tensor-parallel run's own contention).
        model_key: what non-GEMM ops depend on beyond their shape (head counts, head size).
    """

    def __init__(
        self,
        fingerprint: str,
        folder: Path | None = None,
        enabled: bool = True,
        model_key: Sequence[int | str] = (),
        store: bool = True,
    ):
        self.path = (folder or cache_dir()) / f"measurements-{fingerprint}.json"
        self.enabled, self.store = enabled, store
        self.model_key = list(model_key)
        self._data: dict[str, Any] | None = None

    @staticmethod
    def now() -> str:
        """The UTC time a measurement is stored at (ISO 8601, seconds)."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def key(self, op: Op, impl: str) -> str:
        """Shape, implementation and what the op computes (``fn``); for non-GEMM ops also the
        model family and head layout (a Gemma norm is not a Llama norm of the same shape; RoPE
        and attention depend on heads and head size, which their shapes do not spell out)."""
        return json.dumps(
            [*op.shape_key, impl, op.fn, *(self.model_key if op.kind != "gemm" else [])]
        )

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            data: dict[str, Any] = {}
            if self.path.exists():
                try:
                    data = json.loads(self.path.read_text())
                except (OSError, json.JSONDecodeError):
                    data = {}
            self._data = data
        return self._data

    def get(self, op: Op, impl: str) -> Measurement | None:
        """The cached measurement (None when reading is off or there is none).

        A contended one is returned too: :attr:`Measurement.contended` tells the caller
        to measure it again.
        """
        if not self.enabled:
            return None
        d = self._load().get(self.key(op, impl))
        if not d:
            return None
        return Measurement.from_dict({**d, "telemetry": {**d.get("telemetry", {}), "cached": True}})

    def put(self, op: Op, m: Measurement, *, write: bool = True) -> None:
        """Store ``m`` (its ``suspect`` reason recorded with it); best effort.

        ``write=False`` keeps it in memory until :meth:`save` (a group of measurements
        rewrites the file once, not once each).
        """
        data = self._load()
        record = m.to_dict()
        if m.suspect:
            record["suspect"] = m.suspect
        # when and under what load it was measured: a prediction reusing it states both
        record["telemetry"].setdefault("measured_at", self.now())
        record["telemetry"].setdefault("load_avg", _load_avg())
        data[self.key(op, m.impl)] = record
        if write:
            self.save()

    def save(self) -> None:
        """Write the entries to the cache file (whole or not at all); best effort."""
        if self._data is None or not self.store:
            return
        try:
            from roofprof.results import write_json_atomic

            write_json_atomic(self.path, self._data)
        except OSError:
            pass


def _load_avg() -> float | None:
    """The host's 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# --------------------------------------------------------------------------- rooflines


def _measure_now(
    device: Device, quick: bool = True, progress: Progress | None = None
) -> tuple[Roofline | None, str, RooflineResult | None]:
    """A roofline of ``device`` measured now with the quick (or full) probe plan."""
    from roofprof.roofline.probes import measure_roofline as probe

    hook = (
        (lambda done, total, label: progress(f"roofline: {label}", done, total))
        if progress
        else None
    )
    result = probe(device, quick=quick, progress=hook)
    return result.roofline, "measured (quick probes)" if quick else "measured (probes)", result


def roofline_cache_path(device: Device) -> Path:
    """Where the quick roofline of ``device`` is cached (``roofline-<fingerprint>.json``)."""
    return cache_dir() / f"roofline-{device_fingerprint(device)}.json"


def cached_roofline(device: Device, max_age_s: float) -> tuple[RooflineResult, float] | None:
    """The cached quick roofline of ``device`` and its age (seconds), if younger than ``max_age_s``.

    The fingerprint covers the device, its threads and the libraries, so a cached roofline
    is one this very setup measured; an incomplete or unreadable one is never returned, nor
    one measured with another quick plan than this roofprof's (an upgrade that changes how
    the probes are timed measures afresh).

    >>> from roofprof.devices.cpu import CpuDevice
    >>> cached_roofline(CpuDevice(), max_age_s=0) is None
    True
    """
    return _fresh(roofline_cache_path(device), max_age_s, device.roofline_plan("quick"))


def _complete_result(path: Path) -> RooflineResult | None:
    """The roofline result cached at ``path``; None when unreadable or interrupted."""
    from roofprof.roofline.probes import RooflineResult

    try:
        result = RooflineResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, RoofprofError):
        return None
    return result if result.complete else None


def spec_roofline(device: Device) -> Roofline | None:
    """The datasheet roofline of a GPU matched in data/gpus.json (None for CPUs and unknown
    GPUs)."""
    if device.info.spec_id is None:
        return None
    from roofprof.specs import load_gpu

    return Roofline.from_spec(load_gpu(device.info.spec_id))


def minimal_roofline_cache_path(device: Device) -> Path:
    """Where the minimal roofline of ``device`` is cached
    (``roofline-minimal-<fingerprint>.json``)."""
    return cache_dir() / f"roofline-minimal-{device_fingerprint(device)}.json"


def minimal_roofline(
    device: Device, dtypes: Sequence[str], progress: Progress | None = None
) -> tuple[Roofline | None, str, RooflineResult | None]:
    """The least of a roofline a measured prediction needs: the memory roof and ``dtypes``' peaks.

    One working set where the DRAM plateau starts (the quick plan's first size of at least
    8 × the last-level cache) for the device's ``read`` probe, and the GEMM probes of each of
    ``dtypes`` at the quick plan's smallest GEMM size (the FMA probes where a dtype has no
    GEMM probe; a dtype with neither gets no ceiling). Enough to classify each op's bound, give the
    ridge and decide which ops
    stream their weights; ``roofprof roofline`` measures the whole roofline. About 1 s on a
    2-core CPU instead of the quick plan's ~9 s.

    Returns ``(roofline, source, result)``.

    Raises:
        ConfigError: the plan would not fit in free memory.

    Example::

        roof, source, _ = minimal_roofline(select("cpu"), ("fp32",))
        roof.ridge("fp32")   # FLOP/byte
    """
    from roofprof.roofline.probes import measure_roofline as probe

    names = ["read", *(p.name for p in _peak_probes(device, dtypes))]
    plan = _minimal_plan(device)
    hook = (
        (lambda done, total, label: progress(f"roofline: {label}", done, total))
        if progress
        else None
    )
    result = probe(device, plan=plan, probes=names, progress=hook)
    source = (
        f"measured (minimal probes: {', '.join(names)}; "
        "`roofprof roofline` measures the whole roofline)"
    )
    return result.roofline, source, result


def _minimal_plan(device: Device) -> RooflinePlan:
    """The quick plan cut to :func:`minimal_roofline`'s one DRAM size and smallest GEMM."""
    from roofprof.devices.base import dram_resident
    from roofprof.roofline.probes import replace_plan

    quick = device.roofline_plan("quick")
    llc = device.info.last_level_cache_bytes or max(quick.working_set_sizes) // 16
    dram = min(
        (s for s in quick.working_set_sizes if dram_resident(s, llc)),
        default=max(quick.working_set_sizes),
    )
    return replace_plan(
        quick,
        name="minimal",
        working_set_sizes=(dram,),
        gemm_sizes=(min(quick.gemm_sizes),) if quick.gemm_sizes else (),
    )


def _peak_probes(device: Device, dtypes: Sequence[str]) -> list[Probe]:
    """The probes giving ``dtypes``' peaks: each one's GEMM probes, else its FMA probes."""
    catalogue = tuple(device.probes())
    found: list[Probe] = []
    for dtype in dict.fromkeys(dtypes):
        gemms = [p for p in catalogue if p.kind == "gemm" and p.dtype == dtype]
        found += gemms or [p for p in catalogue if p.kind == "compute" and p.dtype == dtype]
    return found


def _load_cached(path: Path, dtypes: Sequence[str] = ()) -> Roofline | None:
    """The roofline cached at ``path`` when it is readable, complete and has every ``dtypes``
    ceiling."""
    result = _complete_result(path)
    roof = result.roofline if result is not None else None
    return roof if roof is not None and set(dtypes) <= set(roof.dtypes) else None


@dataclass(frozen=True)
class RooflineChoice:
    """Which roofline a job places ops on, and how fresh a cached measurement must be.

    Attributes:
        roofline: ``"auto"`` (this setup's cached quick measurement when younger than
            ``max_age_s``; else one measured now and cached; else the datasheet of a known
            GPU), ``"none"`` (no placement), a ``roofline.json`` path, or a
            :class:`~roofprof.roofline.Roofline`.
        quick: measure with the quick probe plan (else the full one) when measuring now.
        max_age_s: the freshness rule, the same for every job: a cached roofline older
            than this (seconds) is measured anew; ``0`` never reuses one.
        minimal_dtypes: with ``"auto"`` and no fresh quick roofline, measure (or reuse) only
            the minimal roofline of these dtypes (:func:`minimal_roofline`): enough to
            classify bounds for a prediction that places nothing on a chart.

    >>> RooflineChoice().max_age_s
    3600.0
    """

    roofline: Roofline | str | os.PathLike | None = "auto"
    quick: bool = True
    max_age_s: float = DEFAULT_MAX_AGE_S
    minimal_dtypes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ChosenRoofline:
    """The roofline :func:`choose_roofline` settled on.

    Attributes:
        roofline: the roofline (None: no placement, or nothing could be measured).
        source: where it came from, said in reports (a cached one with its age).
        result: the probes' record when measured now or read from the cache (it writes
            itself as ``roofline.json``); None for a given roofline, a file or a datasheet.
    """

    roofline: Roofline | None
    source: str
    result: RooflineResult | None = None


def _fresh(path: Path, max_age_s: float, plan: RooflinePlan) -> tuple[RooflineResult, float] | None:
    """The complete roofline result cached at ``path`` and its age, if younger than
    ``max_age_s`` and measured with ``plan`` (an upgrade that changes how the probes are
    timed measures afresh)."""
    if max_age_s <= 0:
        return None
    try:
        age_s = time.time() - path.stat().st_mtime
    except OSError:
        return None
    result = _complete_result(path) if 0 <= age_s <= max_age_s else None
    if result is None or dict(result.plan) != json.loads(json.dumps(plan.to_dict())):
        return None  # the plan as the result file spells it (tuples become lists)
    return result, age_s


def choose_roofline(
    choice: RooflineChoice, device: Device, *, progress: Progress | None = None
) -> ChosenRoofline:
    """The roofline ``choice`` names on ``device``: the one freshness rule of every job.

    A measured quick roofline is cached (the next job reuses it while it is fresh); an
    interrupted measurement is never cached nor reused.

    Raises:
        ConfigError: an unreadable roofline file; a plan that would not fit in memory.

    >>> from roofprof.devices.cpu import CpuDevice
    >>> choose_roofline(RooflineChoice("none"), CpuDevice()).source
    'none'
    """
    from roofprof.roofline import load_roofline

    given = choice.roofline
    if isinstance(given, Roofline):
        return ChosenRoofline(given, "given")
    if given is not None and str(given) not in ("auto", "none"):
        return ChosenRoofline(load_roofline(given), str(given))
    if str(given) == "none":
        return ChosenRoofline(None, "none")
    cache = roofline_cache_path(device)
    fresh = cached_roofline(device, choice.max_age_s)
    if fresh is not None:
        result, age_s = fresh
        return ChosenRoofline(
            result.roofline,
            f"cached quick measurement, {age_s / 60:.0f} min old "
            f"({cache}; --fresh-roofline measures anew)",
            result,
        )
    if choice.minimal_dtypes is not None:
        cache = minimal_roofline_cache_path(device)
        fresh = _fresh(cache, choice.max_age_s, _minimal_plan(device))
        measurable = {p.dtype for p in _peak_probes(device, choice.minimal_dtypes)}
        if fresh is not None and measurable <= set(fresh[0].roofline.dtypes):
            return ChosenRoofline(
                fresh[0].roofline, f"cached minimal measurement ({cache})", fresh[0]
            )
        measured, source, result = minimal_roofline(
            device, choice.minimal_dtypes, progress=progress
        )
    else:
        measured, source, result = _measure_now(device, quick=choice.quick, progress=progress)
    if measured is not None and result is not None:
        if result.complete and choice.quick:
            with contextlib.suppress(OSError):
                result.write(cache)
        return ChosenRoofline(measured, source, result)
    spec = spec_roofline(device)
    if spec is not None:
        return ChosenRoofline(spec, f"datasheet ({source})", result)
    return ChosenRoofline(None, source, result)


def resolve_roofline(
    roofline: Roofline | str | os.PathLike | None,
    device: Device,
    *,
    progress: Progress | None = None,
    minimal_dtypes: Sequence[str] | None = None,
) -> tuple[Roofline | None, str]:
    """``(roofline, source)`` of :func:`choose_roofline` for a :class:`RooflineChoice` of
    ``roofline`` (``auto``, ``none``, a path or a Roofline) with the default freshness rule.

    Raises:
        ConfigError: an unreadable roofline file.
    """
    chosen = choose_roofline(
        RooflineChoice(
            roofline,
            minimal_dtypes=tuple(minimal_dtypes) if minimal_dtypes is not None else None,
        ),
        device,
        progress=progress,
    )
    return chosen.roofline, chosen.source
