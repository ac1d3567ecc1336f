"""Prediction records: one op, one pass, one model under one estimator, and a real run.

:class:`Prediction` is what :func:`roofprof.prediction.rollup.predict` returns; :class:`RealRun` is
a timed forward pass of a real model, against which :func:`compare` reports each estimator's
residual ``predicted / real - 1``. Records only: arithmetic, no devices, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from roofprof.prediction.estimators import OpEstimate
from roofprof.specs import ModelSpec
from roofprof.units import scoped
from roofprof.workload import Counting, Op, Parallel, Scenario, Workload

if TYPE_CHECKING:
    from roofprof.prediction.memory_fit import MemoryFit

__all__ = [
    "OpPrediction",
    "PhasePrediction",
    "Prediction",
    "RealRun",
    "compare",
    "decode_turning_point",
    "residual",
]


@dataclass(frozen=True)
class OpPrediction:
    """One op under one estimator. :meth:`to_dict` spells the scope in each name
    (``flops_per_call`` / ``flops_total``, ``bytes_*``, ``seconds_*``); the unscoped
    ``flops``, ``bytes`` and ``seconds`` are the totals over ``count`` calls."""

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
            **scoped(op.count, flops=op.flops, bytes=op.bytes, seconds=self.estimate.seconds),
            "flops": op.total_flops,  # unscoped names (all calls) kept for earlier readers
            "bytes": op.total_bytes,
            "intensity": op.intensity,
            "seconds": self.seconds,
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
        return max(shares, key=lambda bound: shares[bound]) if shares else "none"

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
    """Prefill and decode of one model on one machine under one estimator.

    Beside the times: ``counting_config`` (the family that read the model's config and the
    config fields it ignored), ``moe`` (total and active parameters, routing, experts
    touched, KV cache per sequence; mixture-of-experts, MLA and attention-pattern models),
    and, when the layout was checked, ``layout`` (the TP/PP layout), ``memory`` (per-GPU
    bytes against capacity) and ``pipeline`` (with pipeline stages: latency, bottleneck
    stage, steady-state throughput, bubble; by phase).
    """

    model: ModelSpec
    machine: str
    estimator: str
    estimator_inputs: Mapping[str, Any]
    prefill: PhasePrediction
    decode: PhasePrediction
    ridge_flops_per_byte: float
    warnings: tuple[str, ...] = field(default_factory=tuple)
    counting_config: Mapping[str, Any] = field(default_factory=dict)
    moe: Mapping[str, Any] | None = None
    layout: Parallel | None = None
    memory: MemoryFit | None = None
    pipeline: Mapping[str, Any] | None = None

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
            "weights": pf.workload.scenario.weight_precision,
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
            **self._blocks(),
        }

    def _blocks(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        stored, workload = self.model.stored, self.prefill.workload
        if stored is not None and workload.weights is None:
            out["checkpoint"] = {"location": self.model.source, **stored.describe()}
        elif self.model.weights_source and workload.weights is None:
            bits = 8.0 * workload.scenario.weight_bytes_per_element
            out["checkpoint"] = {  # unquantized, no file gave the bytes: the dtype's
                "location": self.model.source,
                "format": workload.dtype,
                "bits_per_weight": bits,
                "per_op_bits": {},
                "mean_bits_per_weight": bits,
                "stored_bytes": None,
                "source": self.model.weights_source,
                "quantization": "",
                "assumption": "",
            }
        if self.layout is not None:
            par = self.layout
            out["parallel"] = {
                "tp": par.tp,
                "pp": par.pp,
                "sequence_parallel": par.sequence_parallel,
                "gpus": par.devices,
            }
        if self.memory is not None:
            out["memory"] = self.memory.to_dict()
        if self.pipeline is not None:
            out["pipeline"] = dict(self.pipeline)
        if self.counting_config:
            out["counting_config"] = dict(self.counting_config)
        if self.moe is not None:
            out["moe"] = dict(self.moe)
        return out


# --------------------------------------------------------------------------- real runs


@dataclass(frozen=True)
class RealRun:
    """A real model forward pass timed on the machine (the ``real`` estimator).

    ``prefill_s`` is the time of one prefill of ``prompt_tokens`` per sequence (TTFT without
    network); ``decode_s`` the median time of one decode step at ``context_tokens`` cached
    tokens per sequence. ``num_layers`` is the layer count actually run (models too large
    for the device are scaled by layer count; ``scaled_from`` then holds the original).
    ``prefill_page_faults`` / ``decode_page_faults``: the process's minor page faults per
    timed prefill / decode step (median; pages the pass touched for the first time, 4 KiB
    each on Linux), on a CPU; None where not counted.
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
    prefill_page_faults: float | None = None
    decode_page_faults: float | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.decode_s

    def scenario(self, model: ModelSpec, dtype: str, counting: Counting, **fields: Any) -> Scenario:
        """The decode scenario this run timed (its batch, prompt and cached context) for
        ``model`` as it ran; ``fields``: other :class:`~roofprof.workload.Scenario` fields
        (``parallel=Parallel(tp=2)``).

        >>> from roofprof.specs import load_model
        >>> from roofprof.workload import Counting
        >>> run = RealRun("llama-3.2-1b", 1, 32, 35, 0.1, 0.05, 16)
        >>> s = run.scenario(load_model("llama-3.2-1b"), "fp32", Counting())
        >>> s.phase, s.prompt_tokens, s.context_tokens
        ('decode', 32, 35)
        """
        return Scenario(
            model,
            "decode",
            self.batch,
            self.prompt_tokens,
            self.context_tokens,
            dtype,
            counting,
            **fields,
        )

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

    >>> from roofprof import predict
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

    >>> from roofprof import sweep
    >>> ps = sweep("llama-3.1-8b", "h100-sxm", batches=(1, 64, 512), prompt_tokens=128)
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
