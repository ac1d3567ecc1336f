"""The pipeline figures a multi-GPU prediction states beside its times (batch-1 latency,
steady-state throughput and the bubble); :func:`roofprof.prediction.rollup.predict` puts them, with
the layout and the memory fit, in the prediction's typed fields.

Pipeline parallelism does not shorten one token: batch-1 latency runs every stage in turn,
``Σ t_stage + (p − 1) · t_send`` (the ops of a PP workload keep every layer and list the
``p − 1`` sends, so the pass time *is* that latency). Throughput needs ``p`` batches in
flight; in steady state it is one batch per bottleneck stage, ``ceil(L / p)`` layers plus
the model-scope ops (embedding and head, counted on the bottleneck stage as an upper bound)
plus one send. With ``m`` batches in flight the idle share (bubble) is ``(p − 1)/(m + p − 1)``.

>>> from roofprof import predict
>>> from roofprof.workload import Parallel
>>> p = predict("llama-3.1-70b", "h100-sxm", prompt_tokens=128, parallel=Parallel(tp=4, pp=2))
>>> summary = pipeline(p.decode, Parallel(tp=4, pp=2))
>>> summary["stages"], summary["bubble_fraction_batch1"]
(2, 0.5)
"""

from __future__ import annotations

from typing import Any

from roofprof.workload import Parallel

__all__ = ["pipeline"]


def pipeline(phase: Any, parallel: Parallel) -> dict[str, Any]:
    """Latency, bottleneck stage and steady-state throughput of one phase prediction.

    ``phase`` is a :class:`~roofprof.prediction.rollup.PhasePrediction`; seconds are per pass.
    """
    p = parallel.pp
    layers = phase.workload.model.num_layers
    stage_layers = -(-layers // p)
    send = sum(o.estimate.seconds for o in phase.ops if o.op.fn == "send")
    model_ops = sum(o.seconds for o in phase.ops if o.op.scope == "model" and o.op.fn != "send")
    bottleneck = stage_layers * phase.layer_seconds + model_ops + (send if p > 1 else 0.0)
    tokens = phase.workload.tokens
    return {
        "stages": p,
        "layers_per_stage": stage_layers,
        "latency_seconds": phase.seconds,
        "bottleneck_stage_seconds": bottleneck,
        "steady_state_tokens_per_second": tokens / bottleneck if bottleneck else 0.0,
        "batches_in_flight": p,
        "bubble_fraction_batch1": (p - 1) / p,
        "bubble": "(p-1)/(m+p-1) for m batches in flight; batch-1 latency is every stage in turn",
    }
