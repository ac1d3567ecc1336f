"""What a validation records: the real run, what it ran on, the memory plan, the residuals.

:class:`ValidationResult` (with ``to_dict()`` for the JSON) and :func:`memory_plan`, which
scales a model by layer count when it does not fit the device's free memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roofprof.errors import ConfigError
from roofprof.prediction.rollup import Prediction, RealRun, compare
from roofprof.specs import BYTES_PER_ELEMENT, ModelSpec
from roofprof.validation.host_noise import HostNoise, mark_within_noise, noise_band, noise_lines
from roofprof.validation.real_model import RealModel
from roofprof.workload import Counting, Scenario

__all__ = ["MemoryPlan", "ValidationResult", "memory_plan"]


@dataclass(frozen=True)
class MemoryPlan:
    """How much memory the real run needs, how much there is, and the layers that fit."""

    needed_bytes: float
    available_bytes: float
    num_layers: int
    original_layers: int
    per_layer_bytes: float
    fixed_bytes: float

    @property
    def scaled(self) -> bool:
        return self.num_layers < self.original_layers

    def describe(self) -> str:
        """One line for the output."""
        if not self.scaled:
            return (
                f"all {self.original_layers} layers fit ({self.needed_bytes / 1e9:.2f} GB needed, "
                f"{self.available_bytes / 1e9:.2f} GB usable)"
            )
        return (
            f"scaled from {self.original_layers} to {self.num_layers} layers to fit: the full "
            f"model needs {self.needed_bytes / 1e9:.2f} GB, "
            f"{self.available_bytes / 1e9:.2f} GB usable; predictions are "
            f"made for the same {self.num_layers}-layer model"
        )


@dataclass(frozen=True)
class ValidationResult:
    """A real run, what it ran on, and each estimator's residual against it."""

    real: RealRun
    model: ModelSpec
    dtype: str
    backend: str
    attention: str
    device: Mapping[str, Any]
    threads: int | None
    clock: str
    prefill_samples_s: tuple[float, ...]
    decode_samples_s: tuple[float, ...]
    memory: MemoryPlan
    counting: Counting
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    predictions: Mapping[str, Prediction] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    build_s: float = 0.0
    #: the scenario asked for (its model unscaled; ``model`` is what ran)
    scenario: Scenario | None = None
    #: which real model ran, why, and what it differs in from the counted op list
    real_model: RealModel | None = None
    #: the host's drift through the validation (a reference kernel timed before and after the
    #: real run and after the profile); None: not measured
    host_noise: HostNoise | None = None
    #: the real model class's host time outside the counted ops that ``measured`` counted
    #: (:class:`~roofprof.prediction.framework.FrameworkOverhead`); None: not counted
    framework_overhead: Any = None

    def noise_bands(self) -> dict[str, float]:
        """Phase -> the band a residual within which is the host's own noise:
        ``max(real-run spread, host drift)`` (:func:`~roofprof.validation.host_noise.noise_band`).
        """
        drift = self.host_noise.drift if self.host_noise is not None else 0.0
        r = self.real
        return {
            "prefill": noise_band(r.prefill_spread_s / r.prefill_s if r.prefill_s else 0.0, drift),
            "decode": noise_band(r.decode_spread_s / r.decode_s if r.decode_s else 0.0, drift),
        }

    def comparison(self) -> list[dict[str, Any]]:
        """Rows of :func:`roofprof.prediction.rollup.compare` (one per estimator, then ``real``),
        each estimator's with the noise band of each phase and whether its residual lies within
        it (``ttft_within_noise``, ``decode_within_noise``)."""
        return mark_within_noise(compare(self.predictions, self.real), self.noise_bands())

    def noise_notes(self) -> list[str]:
        """One line per residual within the host's noise (it says nothing about the estimator)."""
        return noise_lines(
            self.comparison(), "the larger of the real run's spread and the host's drift"
        )

    def with_predictions(self, predictions: Mapping[str, Prediction]) -> ValidationResult:
        return dataclasses.replace(self, predictions=dict(predictions))

    def to_dict(self) -> dict[str, Any]:
        from roofprof.results import provenance

        return {
            "real": self.real.to_dict(),
            "model": self.model.id,
            "num_layers": self.model.num_layers,
            "dtype": self.dtype,
            "backend": self.backend,
            "real_model": self.real_model.to_dict() if self.real_model else None,
            "host_noise": self.host_noise.to_dict() if self.host_noise else None,
            "framework_overhead": (
                self.framework_overhead.to_dict() if self.framework_overhead else None
            ),
            "attention": self.attention,
            "counting": self.counting.describe(),
            "device": dict(self.device),
            "threads": self.threads,
            "clock": self.clock,
            "prefill_samples_s": list(self.prefill_samples_s),
            "decode_samples_s": list(self.decode_samples_s),
            "memory": {
                **dataclasses.asdict(self.memory),
                "scaled": self.memory.scaled,
                "note": self.memory.describe(),
            },
            "telemetry": dict(self.telemetry),
            "build_s": self.build_s,
            "comparison": [
                {k: (v if not isinstance(v, float) or v == v else None) for k, v in row.items()}
                for row in self.comparison()
            ],
            # each estimator's prediction of what ran, op by op (as `predict` prints it)
            "predictions": {label: p.to_dict() for label, p in self.predictions.items()},
            "warnings": list(self.warnings),
            "provenance": provenance(device=dict(self.device)),
        }


# --------------------------------------------------------------------------- memory


def memory_plan(
    spec: ModelSpec,
    dtype: str,
    *,
    batch: int,
    prompt_tokens: int,
    total_tokens: int,
    available_bytes: float,
    attention: str = "fused",
    max_layers: int | None = None,
) -> MemoryPlan:
    """Layers that fit in ``available_bytes`` for a run of ``total_tokens`` per sequence.

    Needs: weights (tied embeddings once), the KV cache of ``total_tokens``, and prefill
    activations (a few hidden-size and intermediate-size rows per token, the eager score
    matrix, last-token logits), plus 10 % slack.

    Raises:
        ConfigError: not even one layer fits (the message gives both figures).

    >>> from roofprof.specs import load_model
    >>> m = load_model("llama-3.1-8b")
    >>> p = memory_plan(
    ...     m, "bf16", batch=1, prompt_tokens=128, total_tokens=160, available_bytes=8e9
    ... )
    >>> p.scaled, p.num_layers < 32
    (True, True)
    """
    e = BYTES_PER_ELEMENT[dtype]
    rows = batch * prompt_tokens
    embed = spec.vocab_size * spec.hidden_size * e
    head = 0 if spec.tie_word_embeddings else embed
    acts = (
        rows
        * (6 * spec.hidden_size + 3 * spec.intermediate_size + spec.q_size + 2 * spec.kv_size)
        * e
    )
    if attention != "fused":
        acts += 2 * batch * spec.num_heads * prompt_tokens * prompt_tokens * max(e, 4)
    acts += batch * spec.vocab_size * 4
    per_layer = (
        spec.layer_param_count() * e + batch * total_tokens * 2 * spec.kv_size * e * 2
    ) * 1.1
    fixed = (embed + head + spec.hidden_size * e + acts) * 1.1
    needed = fixed + per_layer * spec.num_layers
    fit = int((available_bytes - fixed) // per_layer) if available_bytes > fixed else 0
    layers = min(spec.num_layers, fit, max_layers or spec.num_layers)
    if layers < 1:
        one = fixed + per_layer
        raise ConfigError(
            f"{spec.id} in {dtype} cannot fit on this device even scaled to one layer: it needs "
            f"{one / 1e9:.2f} GB with 1 of {spec.num_layers} layers ({needed / 1e9:.2f} GB whole) "
            f"and {available_bytes / 1e9:.2f} GB is available"
        )
    return MemoryPlan(needed, available_bytes, layers, spec.num_layers, per_layer, fixed)
