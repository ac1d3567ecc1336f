"""Estimators: what turns one :class:`~roofprof.workload.Op` into seconds per call.

* :class:`RooflineEstimator`: the roofline model (``max(FLOPs / peak, bytes / bandwidth)``)
  over a datasheet (``spec``) or measured (``empirical``) roofline;
* :class:`MeasuredEstimator`: measured per-op times (``measured``, fed by ``roofprof profile``
  with :class:`OpTime` records), with or without the per-kernel launch overhead.

Any object meeting :class:`Estimator` plugs into :func:`roofprof.prediction.rollup.predict`.
Arithmetic only: no devices, no timing, no I/O.
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from roofprof.errors import ConfigError
from roofprof.roofline import Roofline
from roofprof.workload import Op

if TYPE_CHECKING:
    from roofprof.specs import GpuSpec

__all__ = [
    "Estimator",
    "MeasuredEstimator",
    "OpEstimate",
    "OpTime",
    "RooflineEstimator",
    "describe_reuse",
]


def describe_reuse(reused: Sequence[tuple[str, float | None, float | None]]) -> str:
    """One sentence on measurements reused from the cache: how many, when (the UTC range) and
    under what load (the most of the CPUs other processes used, the highest load average).

    >>> print(describe_reuse([("2026-12-03T05:10:00Z", 0.02, 1.5), ("2026-12-03T05:12:30Z", 0.3,
    ...                       2.25)]))  # doctest: +NORMALIZE_WHITESPACE
    2 op shapes reused from the measurement cache, measured 2026-12-03 05:10:00 to 05:12:30 UTC,
    other processes using up to 30% of the CPUs, load average up to 2.25 (--remeasure measures
    them afresh)
    """
    times = sorted(t.replace("T", " ").rstrip("Z") for t, _, _ in reused if t)
    shares = [s for _, s, _ in reused if s is not None]
    loads = [x for _, _, x in reused if x is not None]
    when = "at a time not recorded"
    if times:
        first, last = times[0], times[-1]
        if first == last:
            when = f"measured {first} UTC"
        else:
            when = f"measured {first} to {last[11:] if last[:10] == first[:10] else last} UTC"
    load = (f", other processes using up to {max(shares):.0%} of the CPUs" if shares else "") + (
        f", load average up to {max(loads):.2f}" if loads else ""
    )
    n = len(reused)
    return (
        f"{n} op shape{'s' if n != 1 else ''} reused from the measurement cache, {when}{load} "
        "(--remeasure measures them afresh)"
    )


@dataclass(frozen=True)
class OpEstimate:
    """Seconds for one call of an op, and what bounds it (``memory``, ``compute``,
    ``measured``...)."""

    seconds: float
    bound: str
    note: str = ""


class Estimator(Protocol):
    """Turns an op into seconds per call. ``name`` appears in every prediction.

    ``warnings`` collects what a prediction should say (ops not measured...), ``machine``
    names what it models (None: the caller's GPU name is used), ``ridge(dtype)`` is the
    roofline's ridge point in FLOP/byte (NaN when the estimator has no roofline).
    ``roofline`` is the roofline it models (None: none; a prediction then skips the check
    that the machine computes in the scenario's dtype), ``collectives`` the model that
    prices communication ops (a :class:`~roofprof.prediction.collectives.CollectiveModel`, or None),
    and ``prefetch(ops)`` lets an estimator that measures on demand measure a whole
    prediction's ops at once (a no-op for arithmetic estimators).
    """

    # read-only in the protocol: a frozen record's field or a property both satisfy it
    @property
    def name(self) -> str: ...

    @property
    def machine(self) -> str | None: ...

    @property
    def warnings(self) -> Sequence[str]: ...

    @property
    def roofline(self) -> Roofline | None: ...

    @property
    def collectives(self) -> Any: ...

    def estimate(self, op: Op) -> OpEstimate: ...

    def prefetch(self, ops: Sequence[Op]) -> None: ...

    def ridge(self, dtype: str) -> float: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RooflineEstimator:
    """The roofline model over a datasheet (``spec``) or measured (``empirical``) roofline."""

    roofline: Roofline
    name: str = "spec"
    level: str = "dram"
    source: str = ""
    warnings: tuple[str, ...] = ()
    collectives: Any = (
        None  # a roofprof.prediction.collectives.CollectiveModel: prices communication ops
    )

    @classmethod
    def for_gpu(cls, gpu: GpuSpec, *, collectives: Any = None) -> RooflineEstimator:
        """The ``spec`` estimator: the roofline model over ``gpu``'s datasheet.

        >>> from roofprof.specs import load_gpu
        >>> RooflineEstimator.for_gpu(load_gpu("h100-sxm")).describe()["roofline_source"]
        'data/gpus.json:h100-sxm'
        """
        return cls(
            Roofline.from_spec(gpu),
            name="spec",
            source=f"data/gpus.json:{gpu.id}",
            collectives=collectives,
        )

    @property
    def machine(self) -> str | None:
        return self.roofline.device or None

    def prefetch(self, ops: Sequence[Op]) -> None:
        """Nothing to measure ahead: the roofline model is arithmetic."""

    def estimate(self, op: Op) -> OpEstimate:
        compute_s = op.flops / self.roofline.compute_peak(op.dtype)
        memory_s = op.bytes / self.roofline.memory_bandwidth(self.level)
        return OpEstimate(
            max(compute_s, memory_s), "compute" if compute_s >= memory_s else "memory"
        )

    def ridge(self, dtype: str) -> float:
        return self.roofline.ridge(dtype, self.level)

    def describe(self) -> dict[str, Any]:
        return {
            "roofline_device": self.roofline.device,
            "roofline_source": self.source or self.name,
            "ceilings": self.roofline.to_dict()["ceilings"],
        }


@dataclass(frozen=True)
class OpTime:
    """A measured op, as the ``measured`` estimator uses it.

    Attributes:
        seconds: time of one call (median of the timed calls), in seconds.
        impl: the implementation that was timed (``torch``, ``numba``, ...).
        kernels: device kernels one call launches (for the launch-overhead model).
        spread_s: interquartile range of the timed calls, in seconds.
        note: anything a reader should know (rotation, flush, noisy, ...).
        host_s: per-call time of back-to-back calls without synchronising (asynchronous
            devices: the rate the host can issue this op, kernels and framework overhead
            included); 0 when not measured (CPU: the timed call already includes it).
        contended: other processes used the CPUs during the measurement (its time is
            likely inflated); a prediction using it says so.
        cached: reused from the measurement cache; ``measured_at`` (UTC, ISO 8601),
            ``other_cpu_share`` (0..1, None: unknown) and ``load_avg`` (the host's 1-minute
            load average) say when and under what load it was measured, and a prediction
            using it states them.
    """

    seconds: float
    impl: str
    kernels: int = 1
    spread_s: float = 0.0
    note: str = ""
    host_s: float = 0.0
    contended: bool = False
    cached: bool = False
    measured_at: str = ""
    other_cpu_share: float | None = None
    load_avg: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.contended:
            del d["contended"]
        if not self.cached:
            for k in ("cached", "measured_at", "other_cpu_share", "load_avg"):
                del d[k]
        return d


class MeasuredEstimator:
    """Per-op times from measurements (``measured``), with the launch-overhead model.

        Args:
            times: measured ops, keyed by :attr:`Op.shape_key` (identical shapes share one).
            launch_s: per-kernel launch overhead (seconds), from the launch-latency probe.
            include_launch: when true, an op takes ``max(measured, kernels × launch_s, host_s)``.
            fallback: estimator for ops with no measurement (the empirical roofline); each
                such op is noted and listed in :attr:`warnings`.
            measure: called for an op with no entry in ``times`` (profiles it on demand);
                returns an :class:`OpTime`, or ``None`` with the reason in the second item.
            measure_many: measures several ops at once ahead of their lookups (:meth:`prefetch`).
            classify: gives the bound (``memory``/``compute``) of an op at its intensity.
            name: ``measured`` or ``measured-no-launch``.
            inputs: what the measurements came from (device, roofline file, result files).
            framework: the real model's host time outside the counted ops (a
                :class:`~roofprof.prediction.framework.FrameworkOverhead`), added to each
                pass by the roll-up; None: not counted.

        >>> from roofprof.workload import Op

    if TYPE_CHECKING:
        from roofprof.specs import GpuSpec
        >>> op = Op("q_proj", "gemm", "decode", 1, 64, 64, "fp32", 8192.0, 16896.0, count=2)
        >>> est = MeasuredEstimator({op.shape_key: OpTime(2e-6, "torch", kernels=1)}, launch_s=5e-6)
        >>> est.estimate(op).seconds, est.estimate(op).bound
        (5e-06, 'launch')
        >>> MeasuredEstimator(
        ...     {op.shape_key: OpTime(2e-6, "torch")}, launch_s=5e-6, include_launch=False
        ... ).estimate(op).seconds
        2e-06
    """

    def __init__(
        self,
        times: Mapping[tuple, OpTime] | None = None,
        *,
        launch_s: float = 0.0,
        include_launch: bool = True,
        fallback: Estimator | None = None,
        measure: Callable[[Op], tuple[OpTime | None, str]] | None = None,
        classify: Callable[[Op], str] | None = None,
        name: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        measure_many: Callable[[Sequence[Op]], None] | None = None,
        framework: Any = None,
    ):
        self.measure_many = measure_many
        self.framework = framework
        self.times: dict[tuple, OpTime] = dict(times or {})
        self.launch_s = float(launch_s)
        self.include_launch = include_launch
        self.fallback = fallback
        self.measure = measure
        self.classify = classify
        self.name = name or ("measured" if include_launch else "measured-no-launch")
        self.inputs = dict(inputs or {})
        self.missing: dict[tuple, str] = {}
        self.contended: set[tuple] = set()
        # the contended shapes' labels, and where their one (updated) warning sits in `warnings`
        self._contended_labels: list[str] = []
        self._contended_at: list[int] = []
        # the cached measurements used: shape -> (measured at, others' CPU share, load), and
        # where their one (updated) statement sits in `warnings`
        self.reused: dict[tuple, tuple[str, float | None, float | None]] = {}
        self._reused_at: list[int] = []
        self.warnings: list[str] = []
        # measured times model no roofline (no compute-dtype check) and no interconnect
        self.roofline: Roofline | None = None
        self.collectives: Any = None
        device = self.inputs.get("device") or {}
        self.machine = (
            f"{device.get('name')} ({device.get('label')})"
            if isinstance(device, Mapping) and device
            else None
        )

    def with_launch(self, include_launch: bool, name: str | None = None) -> MeasuredEstimator:
        """The same measurements with the launch overhead counted or not (shares the table);
        without it the framework overhead is left out too (``measured-no-launch`` is the bare
        per-op sum)."""
        other = MeasuredEstimator(
            self.times,
            launch_s=self.launch_s,
            include_launch=include_launch,
            fallback=self.fallback,
            measure=self.measure,
            classify=self.classify,
            name=name,
            inputs=self.inputs,
            measure_many=self.measure_many,
            framework=self.framework if include_launch else None,
        )
        other.times, other.missing, other.warnings = self.times, self.missing, self.warnings
        other.contended = self.contended
        other._contended_labels, other._contended_at = self._contended_labels, self._contended_at
        other.reused, other._reused_at = self.reused, self._reused_at
        return other

    def with_framework(self, framework: Any) -> MeasuredEstimator:
        """This estimator with the real model's framework overhead counted (``None``: not);
        the measurements are shared.

        >>> from roofprof.prediction.framework import FrameworkOverhead
        >>> est = MeasuredEstimator().with_framework(FrameworkOverhead({}, {}, "m"))
        >>> est.framework.model, est.name
        ('m', 'measured')
        """
        other = self.with_launch(self.include_launch, self.name)
        other.framework = framework
        return other

    def prefetch(self, ops: Sequence[Op]) -> None:
        """Measure every shape of ``ops`` not in the table yet, together (``measure_many``).

        :func:`predict` and :func:`phase_sweep` call it before the per-op lookups, so a
        device measures the new shapes as one interleaved group instead of one at a time.
        Without ``measure_many`` nothing happens (the lookups measure on demand).
        """
        if self.measure_many is None:
            return
        todo = [
            op for op in ops if op.shape_key not in self.times and op.shape_key not in self.missing
        ]
        if todo:
            self.measure_many(todo)

    def lookup(self, op: Op) -> OpTime | None:
        """The measurement of ``op``'s shape, measuring it on demand if a ``measure`` is set.

        A contended measurement is used, and a warning says so (once per shape).
        """
        key = op.shape_key
        if key in self.times:
            return self._flag(op, self.times[key])
        if key in self.missing:
            return None
        if self.measure is not None:
            found, reason = self.measure(op)
            if found is not None:
                self.times[key] = found
                return self._flag(op, found)
        else:
            reason = "no measurement of this shape"
        self.missing[key] = reason
        self.warnings.append(
            f"{op.phase} {op.name} ({op.m}×{op.n}×{op.k}): not measured ({reason}); "
            f"counted from {self.fallback.name if self.fallback else 'nothing (0 s)'}"
        )
        _warnings.warn(self.warnings[-1], stacklevel=3)
        return None

    def _provenance(self, op: Op, found: OpTime) -> None:
        """Note a measurement reused from the cache: one statement of when and under what
        load all of them were measured, kept up to date."""
        if not found.cached or op.shape_key in self.reused:
            return
        self.reused[op.shape_key] = (found.measured_at, found.other_cpu_share, found.load_avg)
        text = describe_reuse(list(self.reused.values()))
        if self._reused_at:
            self.warnings[self._reused_at[0]] = text
        else:
            self._reused_at.append(len(self.warnings))
            self.warnings.append(text)

    def _flag(self, op: Op, found: OpTime) -> OpTime:
        """Note a contended measurement: one warning for all such shapes, kept up to date (and
        a cached one: when and under what load it was measured)."""
        self._provenance(op, found)
        if not found.contended or op.shape_key in self.contended:
            return found
        self.contended.add(op.shape_key)
        self._contended_labels.append(f"{op.phase} {op.name} ({op.m}×{op.n}×{op.k})")
        labels = self._contended_labels
        shown = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        text = (
            f"{len(labels)} op shape{'s' if len(labels) > 1 else ''} "
            "measured while other processes "
            f"used the CPUs (contended even after retries): {shown}; their times are likely "
            "inflated; re-measure on a quiet machine with `roofprof predict --estimator measured "
            "--remeasure`"
        )
        if self._contended_at:
            self.warnings[self._contended_at[0]] = text
        else:
            self._contended_at.append(len(self.warnings))
            self.warnings.append(text)
            _warnings.warn(text, stacklevel=4)
        return found

    def estimate(self, op: Op) -> OpEstimate:
        found = self.lookup(op)
        if found is None:
            if self.fallback is None:
                return OpEstimate(0.0, "unmeasured", f"not measured: {self.missing[op.shape_key]}")
            est = self.fallback.estimate(op)
            return OpEstimate(
                est.seconds,
                est.bound,
                f"not measured ({self.missing[op.shape_key]}): {self.fallback.name} roofline",
            )
        launch = max(found.kernels * self.launch_s, found.host_s)
        bound = self.classify(op) if self.classify else "measured"
        seconds = found.seconds
        if self.include_launch and launch > seconds:
            seconds, bound = launch, "launch"
        return OpEstimate(
            seconds, bound, f"{found.impl}" + (f"; {found.note}" if found.note else "")
        )

    def ridge(self, dtype: str) -> float:
        """The fallback roofline's ridge for ``dtype`` (FLOP/byte); NaN without one, or when
        that roofline has no ``dtype`` ceiling (a CPU measured in fp32/fp64 predicting bf16):
        the measured times never needed it."""
        if self.fallback is None:
            return float("nan")
        try:
            return self.fallback.ridge(dtype)
        except ConfigError:
            return float("nan")

    def describe(self) -> dict[str, Any]:
        d = {
            "launch_overhead_s": self.launch_s,
            "launch_overhead_counted": self.include_launch,
            "launch_model": (
                "each op takes max(measured time, kernels x launch overhead, host issue time)"
            ),
            "framework_overhead": self.framework.to_dict() if self.framework else None,
            "measured_ops": [{"shape_key": list(k), **t.to_dict()} for k, t in self.times.items()],
            "unmeasured_ops": [
                {"shape_key": list(k), "reason": r} for k, r in self.missing.items()
            ],
            "fallback": self.fallback.name if self.fallback else None,
            **self.inputs,
        }
        if self.fallback is not None:
            d["ceilings"] = self.fallback.describe().get("ceilings", [])
        return d
