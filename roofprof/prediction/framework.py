"""The framework overhead of a real model's forward pass: host time outside the counted ops.

A real forward pass (transformers' ``LlamaForCausalLM``, or roofprof's plain-torch form)
runs the counted ops and, around them, Python: module calls, the attention block's reshapes
and cache bookkeeping, the RoPE cos/sin table built once per pass, mask helpers, output
records. Timing each counted op alone includes that op's own dispatch, not this. A
:class:`FrameworkOverhead` holds what a probe measured of it on the real model class
(:func:`roofprof.validation.framework_overhead.measure_framework_overhead`): seconds per
decoder layer and per pass, for each phase. :func:`overhead_ops` turns it into two priced
entries of a pass (``framework_layer`` repeated per layer, ``framework_pass`` once), so a
prediction's per-op table shows it, and the sum includes it. Arithmetic only.

>>> fw = FrameworkOverhead({"prefill": 2e-4, "decode": 1e-4}, {"prefill": 1e-3, "decode": 5e-4},
...                        "transformers LlamaForCausalLM")
>>> round(fw.seconds("decode", layers=16) * 1e3, 2)
2.1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roofprof.prediction.estimators import OpEstimate
from roofprof.prediction.records import OpPrediction
from roofprof.workload import Op, Workload

__all__ = ["FRAMEWORK_GROUP", "FrameworkOverhead", "overhead_ops"]

#: the chart group of the framework-overhead entries
FRAMEWORK_GROUP = "framework overhead"


@dataclass(frozen=True)
class FrameworkOverhead:
    """Host seconds a real model's forward pass spends outside its counted ops.

    Attributes:
        layer_s: phase (``prefill``/``decode``) -> seconds per decoder layer.
        pass_s: phase -> seconds once per pass (embedding lookup wrapper, RoPE table, masks,
            cache set-up, output records).
        model: the model class measured (``transformers 5.24.0 LlamaForCausalLM``).
        method: how it was measured (one sentence, stated with every prediction using it).
        samples: phase -> the per-layer value each repetition alone gives (their spread is
            the probe's noise).

    Raises:
        ValueError: a negative or non-finite time (a probe clamps at 0 before building one).
    """

    layer_s: Mapping[str, float]
    pass_s: Mapping[str, float]
    model: str
    method: str = ""
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for v in (*self.layer_s.values(), *self.pass_s.values()):
            if not (v >= 0.0 and v < float("inf")):
                raise ValueError(f"framework overhead must be finite and >= 0 s, got {v!r}")

    def seconds(self, phase: str, layers: int) -> float:
        """The pass's total overhead: ``layers × layer_s + pass_s`` (0 for an unknown phase)."""
        return layers * self.layer_s.get(phase, 0.0) + self.pass_s.get(phase, 0.0)

    def describe(self) -> str:
        """One line of the figures, per phase, for the notes of a prediction counting them.

        >>> FrameworkOverhead({"decode": 1.2e-4}, {"decode": 2e-4}, "m").describe()[-62:]
        'counted by measured: decode 120 µs per layer + 200 µs per pass'
        """
        per_phase = "; ".join(
            f"{p} {self.layer_s[p] * 1e6:.0f} µs per layer + {self.pass_s.get(p, 0.0) * 1e6:.0f} µs"
            " per pass"
            for p in self.layer_s
        )
        method = f" ({self.method})" if self.method else ""
        return f"framework overhead of {self.model} counted by measured: {per_phase}{method}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FrameworkOverhead:
        """The inverse of :meth:`to_dict`.

        Raises:
            KeyError, TypeError, ValueError: not a record :meth:`to_dict` wrote.

        >>> fw = FrameworkOverhead({"decode": 1e-4}, {}, "m", "x", {"decode": (1e-4,)})
        >>> FrameworkOverhead.from_dict(fw.to_dict()) == fw
        True
        """
        samples = {k: tuple(v) for k, v in d.get("samples", {}).items()}
        return cls(d["layer_s"], d["pass_s"], d["model"], d.get("method", ""), samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer_s": dict(self.layer_s),
            "pass_s": dict(self.pass_s),
            "model": self.model,
            "method": self.method,
            "samples": {k: list(v) for k, v in self.samples.items()},
        }


def overhead_ops(workload: Workload, overhead: FrameworkOverhead) -> tuple[OpPrediction, ...]:
    """The two priced entries of ``workload``'s pass: ``framework_layer`` (count = the
    model's layers) and ``framework_pass`` (once); no FLOPs, no bytes.

    >>> from roofprof.models import ops
    >>> from roofprof.workload import Scenario
    >>> w = ops(Scenario.of("llama-3.2-1b", "decode", context_tokens=8, dtype="fp32"))
    >>> fw = FrameworkOverhead({"decode": 1e-4}, {"decode": 5e-4}, "m")
    >>> [(o.op.name, o.op.count, o.seconds) for o in overhead_ops(w, fw)]
    [('framework_layer', 16, 0.0016), ('framework_pass', 1, 0.0005)]
    """
    phase, layers = workload.phase, workload.model.num_layers
    note = f"{overhead.model}: host time outside the counted ops" + (
        f" ({overhead.method})" if overhead.method else ""
    )
    out = []
    for name, scope, count, seconds in (
        ("framework_layer", "layer", layers, overhead.layer_s.get(phase, 0.0)),
        ("framework_pass", "model", 1, overhead.pass_s.get(phase, 0.0)),
    ):
        op = Op(
            name,
            "framework",
            phase,
            0,
            0,
            0,
            workload.dtype,
            0.0,
            0.0,
            count=count,
            scope=scope,
            fn="framework",
            group=FRAMEWORK_GROUP,
            short="fw" if scope == "layer" else "fw-pass",
            note="Python, module calls and views around the counted ops",
        )
        out.append(OpPrediction(op, OpEstimate(seconds, "framework", note)))
    return tuple(out)
