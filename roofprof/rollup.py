"""Roll per-op estimates up into prefill (time to first token) and decode (tokens/s).

An *estimator* turns one :class:`~roofprof.workload.Op` into seconds. Four sit side by side:

* ``spec``: the roofline model (``max(FLOPs / peak, bytes / bandwidth)``) over the
  datasheet (:class:`RooflineEstimator` on ``Roofline.from_spec``);
* ``empirical``: the same model over the measured ceilings of this machine;
* ``measured``: the sum of measured per-op times (:class:`MeasuredEstimator`, fed by
  ``roofprof profile`` with :class:`OpTime` records), with or without the per-kernel
  launch overhead (each op takes at least ``kernels × launch_s``: the host cannot issue
  kernels faster than that);
* ``real``: a real model forward pass timed on the same machine (:class:`RealRun`, from
  ``roofprof validate``), against which :func:`compare` reports each estimator's residual
  ``predicted / real − 1``.

This module is arithmetic only: no devices, no timing, no I/O.

>>> p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000, convention="seed")
>>> round(p.decode.seconds * 1e3, 1), round(p.prefill.seconds * 1e3)
(4.9, 34)
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from roofprof import models
from roofprof.errors import ConfigError
from roofprof.precision import check_compute
from roofprof.roofline import Roofline
from roofprof.specs import GpuSpec, ModelSpec, load_gpu
from roofprof.units import finite_or_none
from roofprof.workload import COLLECTIVE_FNS, Counting, Op, Parallel, Scenario, Workload

__all__ = [
    "Estimator",
    "MeasuredEstimator",
    "OpEstimate",
    "OpPrediction",
    "OpTime",
    "PhasePrediction",
    "Prediction",
    "RealRun",
    "RooflineEstimator",
    "compare",
    "decode_turning_point",
    "estimate_phase",
    "finite_or_none",
    "phase_sweep",
    "predict",
    "residual",
    "sweep",
]


@dataclass(frozen=True)
class OpEstimate:
    """Seconds for one call of an op, and what bounds it (``memory``, ``compute``, ``measured``...)."""

    seconds: float
    bound: str
    note: str = ""


class Estimator(Protocol):
    """Turns an op into seconds per call. ``name`` appears in every prediction.

    ``warnings`` collects what a prediction should say (ops not measured...), ``machine``
    names what it models (None: the caller's GPU name is used), ``ridge(dtype)`` is the
    roofline's ridge point in FLOP/byte (NaN when the estimator has no roofline).
    """

    name: str
    warnings: Sequence[str]
    machine: str | None

    def estimate(self, op: Op) -> OpEstimate: ...

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
    collectives: Any = None  # a roofprof.collectives.CollectiveModel: prices communication ops

    @property
    def machine(self) -> str | None:
        return self.roofline.device or None

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
class OpPrediction:
    op: Op
    estimate: OpEstimate

    @property
    def seconds(self) -> float:
        """All calls of this op in the pass."""
        return self.estimate.seconds * self.op.count

    def to_dict(self) -> dict[str, Any]:
        op = self.op
        return {
            **op.to_dict(),
            "flops": op.total_flops,
            "bytes": op.total_bytes,
            "intensity": op.intensity,
            "seconds": self.seconds,
            "seconds_per_call": self.estimate.seconds,
            "bound": self.estimate.bound,
            "note": "; ".join(n for n in (op.note, self.estimate.note) if n),
        }


@dataclass(frozen=True)
class PhasePrediction:
    """One pass (a prefill, or one decode step) under one estimator."""

    workload: Workload
    ops: tuple[OpPrediction, ...]

    @property
    def seconds(self) -> float:
        return sum(o.seconds for o in self.ops)

    @property
    def flops(self) -> float:
        return self.workload.flops

    @property
    def bytes(self) -> float:
        return self.workload.bytes

    @property
    def attention_seconds(self) -> float:
        return sum(o.seconds for o in self.ops if o.op.kind == "attention")

    @property
    def layer_seconds(self) -> float:
        """One decoder layer."""
        return sum(o.estimate.seconds for o in self.ops if o.op.scope == "layer")

    @property
    def bound(self) -> str:
        """The bound that accounts for most of the time."""
        shares: dict[str, float] = {}
        for o in self.ops:
            shares[o.estimate.bound] = shares.get(o.estimate.bound, 0.0) + o.seconds
        return max(shares, key=shares.get) if shares else "none"

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for o in self.ops:
            out[o.op.kind] = out.get(o.op.kind, 0.0) + o.seconds
        return out

    def breakdown(self) -> dict[str, Any]:
        layer = self.layer_seconds
        out = {
            "num_layers": self.workload.model.num_layers,
            "per_layer_seconds": layer,
            "layers_seconds": layer * self.workload.model.num_layers,
            "model_ops_seconds": sum(o.seconds for o in self.ops if o.op.scope == "model"),
            "by_kind_seconds": self.by_kind(),
        }
        if "communication" in out["by_kind_seconds"]:
            out["communication_share"] = out["by_kind_seconds"]["communication"] / self.seconds
        return out


@dataclass(frozen=True)
class Prediction:
    """Prefill and decode of one model on one machine under one estimator."""

    model: ModelSpec
    machine: str
    estimator: str
    estimator_inputs: Mapping[str, Any]
    prefill: PhasePrediction
    decode: PhasePrediction
    ridge_flops_per_byte: float
    warnings: tuple[str, ...] = field(default_factory=tuple)
    extras: Mapping[str, Any] = field(default_factory=dict)  # parallel layout, memory fit, pipeline

    @property
    def tokens_per_second(self) -> float:
        """Aggregate decode throughput over the batch."""
        return self.decode.workload.batch / self.decode.seconds

    def to_dict(self) -> dict[str, Any]:
        """The JSON schema documented in the README (SI units)."""
        pf, dc = self.prefill, self.decode
        return {
            "model": self.model.id,
            "gpu": self.machine,
            "dtype": pf.workload.dtype,
            "weights": pf.workload.weights or pf.workload.dtype,
            "kv_dtype": pf.workload.kv_dtype or pf.workload.dtype,
            "batch": pf.workload.batch,
            "prompt_tokens": pf.workload.prompt_tokens,
            "context_tokens": dc.workload.context_tokens,
            "estimator": self.estimator,
            "counting": pf.workload.counting.describe(),
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "prefill": {
                "seconds": pf.seconds,
                "flops": pf.flops,
                "bytes": pf.bytes,
                "attention_flops": pf.workload.attention_flops,
                "attention_seconds": pf.attention_seconds,
                "attention_share": pf.attention_seconds / pf.seconds if pf.seconds else 0.0,
                "intensity": pf.flops / pf.bytes,
                "bound": pf.bound,
                "breakdown": pf.breakdown(),
            },
            "decode": {
                "seconds_per_token": dc.seconds,
                "tokens_per_second": self.tokens_per_second,
                "tokens_per_second_per_sequence": 1.0 / dc.seconds,
                "flops": dc.flops,
                "bytes": dc.bytes,
                "weight_bytes": dc.workload.weight_bytes,
                "kv_cache_bytes": dc.workload.kv_bytes,
                "intensity": dc.flops / dc.bytes,
                "attention_share": dc.attention_seconds / dc.seconds if dc.seconds else 0.0,
                "bound": dc.bound,
                "breakdown": dc.breakdown(),
            },
            "ops": [o.to_dict() for o in (*pf.ops, *dc.ops)],
            "estimator_inputs": dict(self.estimator_inputs),
            "warnings": list(self.warnings),
            **self.extras,
        }


def estimate_phase(
    workload: Workload, estimator: Estimator, collectives: Any = None
) -> PhasePrediction:
    """Every op of ``workload`` through ``estimator``; collectives (``op.fn`` in
    ``COLLECTIVE_FNS``) through ``collectives`` or the estimator's own ``collectives`` model
    (a :class:`~roofprof.collectives.CollectiveModel`; none: 0 s, noted)."""
    comm = collectives or getattr(estimator, "collectives", None)
    return PhasePrediction(
        workload,
        tuple(
            OpPrediction(
                op, _collective(comm, op) if op.fn in COLLECTIVE_FNS else estimator.estimate(op)
            )
            for op in workload.ops
        ),
    )


def _collective(model: Any, op: Op) -> OpEstimate:
    if model is None:
        return OpEstimate(0.0, "communication", "no interconnect model: not priced")
    return OpEstimate(model.seconds(op.fn, op.bytes, op.batch), "communication", model.source)


def predict(
    model: str | ModelSpec | Scenario,
    gpu: str | GpuSpec | None = None,
    *,
    roofline: Roofline | None = None,
    estimator: Estimator | None = None,
    prompt_tokens: int = 2000,
    batch: int = 1,
    context_tokens: int | None = None,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
    weights: str | None = None,
    kv_dtype: str | None = None,
    parallel: Parallel | None = None,
    collectives: Any = None,
) -> Prediction:
    """Predict prefill (TTFT, seconds) and decode (seconds per step, tokens/s).

    ``model`` is a model id/path/spec with the loose keyword arguments, or a
    :class:`~roofprof.workload.Scenario` (its batch, prompt, context, dtype and counting
    are used; the keyword sizes are then ignored; both phases are predicted whatever its
    ``phase``). Give a datasheet ``gpu`` (``spec`` estimator), a measured ``roofline``
    (``empirical``), or any ``estimator``. Decode attends to ``context_tokens`` cached
    tokens per sequence (default: the prompt). ``weights`` and ``kv_dtype`` are the stored
    weight format and KV-cache type (:mod:`roofprof.precision`; ``None``: as ``dtype``).
    ``parallel`` is the TP/PP layout (per-rank ops plus collectives, priced by
    ``collectives``, default the GPU's α-β priors; :mod:`roofprof.parallel_report` adds
    the memory fit and the pipeline figures).

    Raises:
        RoofprofError: unknown model/GPU, weight format or KV dtype, bad sizes, a compute
            dtype the machine lacks (the message names what it has and the weight-only form).

    >>> p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    >>> p.estimator, p.decode.bound
    ('spec', 'memory')
    >>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=2000)
    >>> predict(s, gpu="h100-sxm").decode.seconds == p.decode.seconds
    True
    """
    scenario = _scenario(
        model,
        batch=batch,
        prompt_tokens=prompt_tokens,
        context_tokens=context_tokens,
        dtype=dtype,
        convention=convention,
        weights=weights,
        kv_dtype=kv_dtype,
    )
    if parallel is not None:
        scenario = scenario.replace(parallel=parallel)
    if collectives is None and scenario.parallel.devices > 1 and gpu is not None:
        from roofprof.collectives import CollectiveModel

        collectives = CollectiveModel.for_gpu(gpu)
    if estimator is None:
        if roofline is not None:
            estimator = RooflineEstimator(roofline, name="empirical", source="measured roofline")
        else:
            spec = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
            estimator = RooflineEstimator(
                Roofline.from_spec(spec), name="spec", source=f"data/gpus.json:{spec.id}"
            )
    roof = getattr(estimator, "roofline", None)
    if isinstance(roof, Roofline):
        check_compute(scenario.dtype, roof.dtypes, roof.device or str(gpu), scenario.weights)
    spec_model, prompt, context = scenario.model, scenario.prompt_tokens, scenario.context_tokens
    notes = []
    longest = max(prompt, context + 1)
    if longest > spec_model.max_position_embeddings:
        notes.append(
            f"{longest} tokens exceed {spec_model.id}'s max_position_embeddings "
            f"({spec_model.max_position_embeddings}); the prediction extrapolates"
        )
        _warnings.warn(notes[-1], stacklevel=2)
    passes = (
        models.ops(scenario.replace(phase="prefill", context_tokens=prompt)),
        models.ops(scenario.replace(phase="decode")),
    )
    _prefetch(estimator, [op for w in passes for op in w.ops])
    prefill, decode = (estimate_phase(w, estimator, collectives) for w in passes)
    notes.extend(w for w in estimator.warnings if w not in notes)
    notes.extend(getattr(collectives or getattr(estimator, "collectives", None), "notes", ()))
    ridge = estimator.ridge(scenario.dtype)
    machine = estimator.machine or str(gpu)
    if isinstance(gpu, str) or isinstance(gpu, GpuSpec):
        machine = (gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)).id
    return Prediction(
        spec_model,
        machine,
        estimator.name,
        estimator.describe(),
        prefill,
        decode,
        ridge,
        tuple(notes),
    )


def _prefetch(estimator: Estimator, ops: Sequence[Op]) -> None:
    """Let an estimator that measures on demand measure all of ``ops`` at once (one group)."""
    prefetch = getattr(estimator, "prefetch", None)
    if prefetch is not None:
        prefetch(ops)


def _scenario(
    model: str | ModelSpec | Scenario,
    *,
    phase: str = "decode",
    batch: int = 1,
    prompt_tokens: int = 0,
    context_tokens: int | None = None,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
    weights: str | None = None,
    kv_dtype: str | None = None,
) -> Scenario:
    if isinstance(model, Scenario):
        return model
    return Scenario.of(
        model,
        phase,
        batch=batch,
        prompt_tokens=prompt_tokens,
        context_tokens=context_tokens,
        dtype=dtype,
        convention=convention,
        weights=weights,
        kv_dtype=kv_dtype,
    )


def sweep(
    model: str | ModelSpec | Scenario | Sequence[Scenario],
    *,
    batches: Sequence[int] = (1,),
    contexts: Sequence[int | None] = (None,),
    **kwargs: Any,
) -> list[Prediction]:
    """Predictions over a grid of batch sizes and decode contexts (same other arguments).

    ``model`` may also be a sequence of scenarios: one prediction each (``batches`` and
    ``contexts`` are then not used); a single Scenario is swept over ``batches`` and
    ``contexts`` (``None``: the prompt length).

    >>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)
    >>> [p.decode.bound for p in sweep([s, s.replace(batch=512)], gpu="h100-sxm")]
    ['memory', 'compute']
    """
    if isinstance(model, Sequence) and not isinstance(model, str):
        return [predict(s, **kwargs) for s in model]
    if isinstance(model, Scenario):
        return [
            predict(
                model.replace(batch=b, context_tokens=model.prompt_tokens if c is None else c),
                **kwargs,
            )
            for b in batches
            for c in contexts
        ]
    return [predict(model, batch=b, context_tokens=c, **kwargs) for b in batches for c in contexts]


# --------------------------------------------------------------------------- measured


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
    """

    seconds: float
    impl: str
    kernels: int = 1
    spread_s: float = 0.0
    note: str = ""
    host_s: float = 0.0
    contended: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.contended:
            del d["contended"]
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

    >>> from roofprof.workload import Op
    >>> op = Op("q_proj", "gemm", "decode", 1, 64, 64, "fp32", 8192.0, 16896.0, count=2)
    >>> est = MeasuredEstimator({op.shape_key: OpTime(2e-6, "torch", kernels=1)}, launch_s=5e-6)
    >>> est.estimate(op).seconds, est.estimate(op).bound
    (5e-06, 'launch')
    >>> MeasuredEstimator({op.shape_key: OpTime(2e-6, "torch")}, launch_s=5e-6, include_launch=False).estimate(op).seconds
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
    ):
        self.measure_many = measure_many
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
        self.warnings: list[str] = []
        device = self.inputs.get("device") or {}
        self.machine = (
            f"{device.get('name')} ({device.get('label')})"
            if isinstance(device, Mapping) and device
            else None
        )

    def with_launch(self, include_launch: bool, name: str | None = None) -> MeasuredEstimator:
        """The same measurements with the launch overhead counted or not (shares the table)."""
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
        )
        other.times, other.missing, other.warnings = self.times, self.missing, self.warnings
        other.contended = self.contended
        other._contended_labels, other._contended_at = self._contended_labels, self._contended_at
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

    def _flag(self, op: Op, found: OpTime) -> OpTime:
        """Note a contended measurement: one warning for all such shapes, kept up to date."""
        if not found.contended or op.shape_key in self.contended:
            return found
        self.contended.add(op.shape_key)
        self._contended_labels.append(f"{op.phase} {op.name} ({op.m}×{op.n}×{op.k})")
        labels = self._contended_labels
        shown = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        text = (
            f"{len(labels)} op shape{'s' if len(labels) > 1 else ''} measured while other processes "
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
            "launch_model": "each op takes max(measured time, kernels x launch overhead, host issue time)",
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


# --------------------------------------------------------------------------- real runs


@dataclass(frozen=True)
class RealRun:
    """A real model forward pass timed on the machine (the ``real`` estimator).

    ``prefill_s`` is the time of one prefill of ``prompt_tokens`` per sequence (TTFT without
    network); ``decode_s`` the median time of one decode step at ``context_tokens`` cached
    tokens per sequence. ``num_layers`` is the layer count actually run (models too large
    for the device are scaled by layer count; ``scaled_from`` then holds the original).
    """

    model: str
    batch: int
    prompt_tokens: int
    context_tokens: int
    prefill_s: float
    decode_s: float
    num_layers: int
    scaled_from: int | None = None
    source: str = ""
    prefill_spread_s: float = 0.0
    decode_spread_s: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.decode_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens_per_second"] = self.tokens_per_second
        return d


def residual(predicted: float, real: float) -> float:
    """``predicted / real − 1`` (signed: positive means the estimator is slower than reality).

    >>> residual(1.1, 1.0)
    0.10000000000000009
    """
    return predicted / real - 1.0 if real > 0 else float("nan")


def compare(predictions: Mapping[str, Prediction], real: RealRun | None) -> list[dict[str, Any]]:
    """One row per estimator (and one for ``real``): TTFT, s/step, tokens/s and residuals.

    Residuals are ``predicted / real − 1`` for prefill (TTFT) and for the decode step
    (NaN without a real run). ``predictions`` maps a label to a prediction made for the same
    model, batch, prompt and context as ``real``.

    >>> p = predict("llama-3.2-1b", gpu="h100-sxm", prompt_tokens=128, dtype="bf16")
    >>> real = RealRun("llama-3.2-1b", 1, 128, 128, p.prefill.seconds * 2, p.decode.seconds * 2, 16)
    >>> [round(r["decode_residual"], 3) for r in compare({"spec": p}, real)]
    [-0.5, 0.0]
    """
    rows = []
    for label, p in predictions.items():
        rows.append(
            {
                "estimator": label,
                "ttft_s": p.prefill.seconds,
                "decode_step_s": p.decode.seconds,
                "tokens_per_second": p.tokens_per_second,
                "prefill_bound": p.prefill.bound,
                "decode_bound": p.decode.bound,
                "ttft_residual": residual(p.prefill.seconds, real.prefill_s)
                if real
                else float("nan"),
                "decode_residual": residual(p.decode.seconds, real.decode_s)
                if real
                else float("nan"),
            }
        )
    if real is not None:
        rows.append(
            {
                "estimator": "real",
                "ttft_s": real.prefill_s,
                "decode_step_s": real.decode_s,
                "tokens_per_second": real.tokens_per_second,
                "prefill_bound": "",
                "decode_bound": "",
                "ttft_residual": 0.0,
                "decode_residual": 0.0,
            }
        )
    return rows


def decode_turning_point(predictions: Sequence[Prediction]) -> dict[str, Any] | None:
    """In a batch sweep (same context), the first batch whose decode step is compute-bound.

    Returns ``{"batch": B, "previous_batch": b}`` (the bound changes between them), or
    ``None`` when every batch has the same bound.

    >>> ps = sweep("llama-3.1-8b", batches=(1, 64, 512), gpu="h100-sxm", prompt_tokens=128)
    >>> decode_turning_point(ps)["batch"]
    512
    """
    ordered = sorted(predictions, key=lambda p: p.decode.workload.batch)
    for prev, cur in zip(ordered, ordered[1:], strict=False):
        if prev.decode.bound != "compute" and cur.decode.bound == "compute":
            return {
                "batch": cur.decode.workload.batch,
                "previous_batch": prev.decode.workload.batch,
            }
    return None


def phase_sweep(
    model: str | ModelSpec | Scenario,
    estimator: Estimator,
    *,
    phase: str = "decode",
    batches: Sequence[int] = (1,),
    contexts: Sequence[int | None] = (None,),
    prompt_tokens: int = 128,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
) -> list[PhasePrediction]:
    """One phase only (default: the decode step) over a grid of batches and contexts.

    Cheaper than :func:`sweep` when only decode matters (a measured estimator would
    otherwise profile every prefill shape too). ``model`` may be a Scenario (its prompt,
    dtype and counting are used; ``phase``, batch and context come from the grid).

    >>> est = RooflineEstimator(Roofline.from_spec(load_gpu("h100-sxm")))
    >>> [p.bound for p in phase_sweep("llama-3.1-8b", est, batches=(1, 512), contexts=(128,))]
    ['memory', 'compute']
    """
    base = _scenario(
        model, phase=phase, prompt_tokens=prompt_tokens, dtype=dtype, convention=convention
    )
    passes = [
        models.ops(
            base.replace(
                phase=phase, batch=b, context_tokens=base.prompt_tokens if c is None else c
            )
        )
        for b in batches
        for c in contexts
    ]
    _prefetch(estimator, [op for w in passes for op in w.ops])
    return [estimate_phase(w, estimator) for w in passes]
