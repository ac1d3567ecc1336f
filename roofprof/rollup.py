"""Roll per-op estimates up into prefill (time to first token) and decode (tokens/s).

An *estimator* turns one :class:`~roofprof.workload.Op` into seconds. ``spec`` and
``empirical`` are the same roofline model (``max(FLOPs / peak, bytes / bandwidth)``) over a
datasheet or a measured :class:`~roofprof.roofline.Roofline`; ``measured`` (per-op times
from ``roofprof profile``) plugs in behind the same :class:`Estimator` protocol.

>>> p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000, convention="seed")
>>> round(p.decode.seconds * 1e3, 1), round(p.prefill.seconds * 1e3)
(4.9, 34)
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from roofprof.roofline import Roofline
from roofprof.specs import GpuSpec, ModelSpec, load_gpu, load_model
from roofprof.workload import Counting, Op, Workload, llama_ops


@dataclass(frozen=True)
class OpEstimate:
    """Seconds for one call of an op, and what bounds it (``memory``, ``compute``, ``measured``...)."""

    seconds: float
    bound: str
    note: str = ""


class Estimator(Protocol):
    """Turns an op into seconds per call. ``name`` appears in every prediction."""

    name: str

    def estimate(self, op: Op) -> OpEstimate: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RooflineEstimator:
    """The roofline model over a datasheet (``spec``) or measured (``empirical``) roofline."""

    roofline: Roofline
    name: str = "spec"
    level: str = "dram"
    source: str = ""

    def estimate(self, op: Op) -> OpEstimate:
        compute_s = op.flops / self.roofline.compute_peak(op.dtype)
        memory_s = op.bytes / self.roofline.memory_bandwidth(self.level)
        return OpEstimate(max(compute_s, memory_s), "compute" if compute_s >= memory_s else "memory")

    def ridge(self, dtype: str) -> float:
        return self.roofline.ridge(dtype, self.level)

    def describe(self) -> dict[str, Any]:
        return {"roofline_device": self.roofline.device, "roofline_source": self.source or self.name,
                "ceilings": self.roofline.to_dict()["ceilings"]}


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
        return {"name": op.name, "kind": op.kind, "phase": op.phase, "scope": op.scope, "m": op.m, "n": op.n,
                "k": op.k, "batch": op.batch, "count": op.count, "dtype": op.dtype,
                "flops": op.total_flops, "bytes": op.total_bytes, "intensity": op.intensity,
                "seconds": self.seconds, "seconds_per_call": self.estimate.seconds,
                "bound": self.estimate.bound, "note": "; ".join(n for n in (op.note, self.estimate.note) if n)}


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
        return {"num_layers": self.workload.model.num_layers, "per_layer_seconds": layer,
                "layers_seconds": layer * self.workload.model.num_layers,
                "model_ops_seconds": sum(o.seconds for o in self.ops if o.op.scope == "model"),
                "by_kind_seconds": self.by_kind()}


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

    @property
    def tokens_per_second(self) -> float:
        """Aggregate decode throughput over the batch."""
        return self.decode.workload.batch / self.decode.seconds

    def to_dict(self) -> dict[str, Any]:
        """The JSON schema documented in the README (SI units)."""
        pf, dc = self.prefill, self.decode
        return {
            "model": self.model.id, "gpu": self.machine, "dtype": pf.workload.dtype,
            "batch": pf.workload.batch, "prompt_tokens": pf.workload.prompt_tokens,
            "context_tokens": dc.workload.context_tokens, "estimator": self.estimator,
            "counting": pf.workload.counting.describe(),
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "prefill": {"seconds": pf.seconds, "flops": pf.flops, "bytes": pf.bytes,
                        "attention_flops": pf.workload.attention_flops,
                        "attention_seconds": pf.attention_seconds,
                        "attention_share": pf.attention_seconds / pf.seconds if pf.seconds else 0.0,
                        "intensity": pf.flops / pf.bytes, "bound": pf.bound, "breakdown": pf.breakdown()},
            "decode": {"seconds_per_token": dc.seconds, "tokens_per_second": self.tokens_per_second,
                       "tokens_per_second_per_sequence": 1.0 / dc.seconds,
                       "flops": dc.flops, "bytes": dc.bytes, "weight_bytes": dc.workload.weight_bytes,
                       "kv_cache_bytes": dc.workload.kv_bytes, "intensity": dc.flops / dc.bytes,
                       "attention_share": dc.attention_seconds / dc.seconds if dc.seconds else 0.0,
                       "bound": dc.bound, "breakdown": dc.breakdown()},
            "ops": [o.to_dict() for o in (*pf.ops, *dc.ops)],
            "estimator_inputs": dict(self.estimator_inputs),
            "warnings": list(self.warnings),
        }


def estimate_phase(workload: Workload, estimator: Estimator) -> PhasePrediction:
    """Every op of ``workload`` through ``estimator``."""
    return PhasePrediction(workload, tuple(OpPrediction(op, estimator.estimate(op)) for op in workload.ops))


def predict(
    model: str | ModelSpec,
    gpu: str | GpuSpec | None = None,
    *,
    roofline: Roofline | None = None,
    estimator: Estimator | None = None,
    prompt_tokens: int = 2000,
    batch: int = 1,
    context_tokens: int | None = None,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
) -> Prediction:
    """Predict prefill (TTFT, seconds) and decode (seconds per step, tokens/s).

    Give a datasheet ``gpu`` (``spec`` estimator), a measured ``roofline`` (``empirical``),
    or any ``estimator``. Decode attends to ``context_tokens`` cached tokens per sequence
    (default: the prompt).

    Raises:
        RoofprofError: unknown model/GPU, bad sizes, a dtype the machine lacks.

    >>> p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    >>> p.estimator, p.decode.bound
    ('spec', 'memory')
    """
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    if estimator is None:
        if roofline is not None:
            estimator = RooflineEstimator(roofline, name="empirical", source="measured roofline")
        else:
            spec = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
            estimator = RooflineEstimator(Roofline.from_spec(spec), name="spec", source=f"data/gpus.json:{spec.id}")
    context = prompt_tokens if context_tokens is None else context_tokens
    notes = []
    longest = max(prompt_tokens, context + 1)
    if longest > model.max_position_embeddings:
        notes.append(f"{longest} tokens exceed {model.id}'s max_position_embeddings "
                     f"({model.max_position_embeddings}); the prediction extrapolates")
        _warnings.warn(notes[-1], stacklevel=2)
    prefill = estimate_phase(llama_ops(model, "prefill", batch=batch, prompt_tokens=prompt_tokens,
                                       dtype=dtype, convention=convention), estimator)
    decode = estimate_phase(llama_ops(model, "decode", batch=batch, prompt_tokens=prompt_tokens,
                                      context_tokens=context, dtype=dtype, convention=convention), estimator)
    ridge = estimator.ridge(dtype) if hasattr(estimator, "ridge") else float("nan")
    machine = getattr(getattr(estimator, "roofline", None), "device", None) or str(gpu)
    if isinstance(gpu, str) or isinstance(gpu, GpuSpec):
        machine = (gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)).id
    return Prediction(model, machine, estimator.name, estimator.describe(), prefill, decode, ridge, tuple(notes))


def sweep(model: str | ModelSpec, *, batches: Sequence[int] = (1,), contexts: Sequence[int | None] = (None,),
          **kwargs: Any) -> list[Prediction]:
    """Predictions over a grid of batch sizes and decode contexts (same other arguments)."""
    return [predict(model, batch=b, context_tokens=c, **kwargs) for b in batches for c in contexts]
