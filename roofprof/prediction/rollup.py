"""Roll per-op estimates up into prefill (time to first token) and decode (tokens/s).

An *estimator* (:mod:`roofprof.prediction.estimators`) turns one :class:`~roofprof.workload.Op` into
seconds. Four sit side by side:

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

:func:`predict` takes a :class:`~roofprof.workload.Scenario` and an estimator, nothing
looser: ``roofprof.predict`` (:mod:`roofprof.api`) and the CLI turn loose arguments into
those. This module is arithmetic only: no devices, no timing, no I/O.

>>> from roofprof.specs import load_gpu
>>> gpu = load_gpu("h100-sxm")
>>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=2000, convention="rule-of-thumb")
>>> p = predict(s, RooflineEstimator.for_gpu(gpu), gpu=gpu)
>>> round(p.decode.seconds * 1e3, 1), round(p.prefill.seconds * 1e3)
(4.9, 34)
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Sequence
from typing import Any

from roofprof import models
from roofprof.errors import ConfigError
from roofprof.precision import check_compute
from roofprof.prediction.estimators import (
    Estimator,
    MeasuredEstimator,
    OpEstimate,
    OpTime,
    RooflineEstimator,
)
from roofprof.prediction.framework import overhead_ops
from roofprof.prediction.records import (
    OpPrediction,
    PhasePrediction,
    Prediction,
    RealRun,
    compare,
    decode_turning_point,
    residual,
)
from roofprof.specs import GpuSpec
from roofprof.workload import COLLECTIVE_FNS, Op, Scenario, Workload

__all__ = [
    "MEMORY_CHECKS",
    "Estimator",
    "MeasuredEstimator",
    "OpEstimate",
    "OpPrediction",
    "OpTime",
    "PhasePrediction",
    "Prediction",
    "RealRun",
    "RooflineEstimator",
    "check_memory",
    "compare",
    "decode_turning_point",
    "estimate_phase",
    "phase_sweep",
    "predict",
    "residual",
    "sweep",
]

#: What :func:`predict` does about the layout's memory: ``auto`` checks (and refuses) a
#: layout of several devices on a known GPU; ``check`` any layout; ``report`` states the fit
#: and never refuses; ``skip`` leaves it out.
MEMORY_CHECKS = ("auto", "check", "report", "skip")


def estimate_phase(
    workload: Workload, estimator: Estimator, collectives: Any = None
) -> PhasePrediction:
    """Every op of ``workload`` through ``estimator``; collectives (``op.fn`` in
    ``COLLECTIVE_FNS``) through ``collectives`` or the estimator's own ``collectives`` model
    (a :class:`~roofprof.prediction.collectives.CollectiveModel`, or one with
    ``op_seconds(op)`` pricing ops by phase and name; none: 0 s, noted). An
    estimator carrying a ``framework`` overhead (:class:`~roofprof.prediction.framework.
    FrameworkOverhead`) adds its two entries, ``framework_layer`` and ``framework_pass``."""
    comm = collectives or estimator.collectives
    priced = tuple(
        OpPrediction(
            op,
            _collective(comm, op) if op.fn in COLLECTIVE_FNS else estimator.estimate(op),
        )
        for op in workload.ops
    )
    framework = getattr(estimator, "framework", None)
    if framework is not None:  # the real model's host time outside the counted ops
        priced += overhead_ops(workload, framework)
    return PhasePrediction(workload, priced)


def _collective(model: Any, op: Op) -> OpEstimate:
    if model is None:
        return OpEstimate(0.0, "communication", "no interconnect model: not priced")
    by_op = getattr(model, "op_seconds", None)  # priced per op (phase, name) where it was timed
    seconds = by_op(op) if by_op is not None else None
    if seconds is None:
        return OpEstimate(model.seconds(op.fn, op.bytes, op.batch), "communication", model.source)
    return OpEstimate(seconds, "communication", model.source)


def check_memory(scenarios: Sequence[Scenario], gpu: GpuSpec) -> None:
    """Refuse the first scenario whose layout does not fit ``gpu``'s memory.

    Raises:
        ConfigError: the per-GPU bytes, the capacity, the smallest TP that fits and the
            largest batch at this layout, and how to predict anyway.

    >>> from roofprof.specs import load_gpu
    >>> check_memory([Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)],
    ...              load_gpu("h100-sxm"))
    """
    from roofprof.prediction.memory_fit import fit_memory, smallest_tp
    from roofprof.units import fmt_bytes

    for s in scenarios:
        f = fit_memory(s, gpu)
        if f.fits:
            continue
        best = smallest_tp(s, gpu)
        hint = f"the smallest TP that fits is {best}" if best else "no TP up to 64 fits"
        raise ConfigError(
            f"{s.model.id} at TP {s.parallel.tp} PP {s.parallel.pp}, batch {s.batch}, "
            f"context {s.context_tokens} needs {fmt_bytes(f.per_gpu_bytes)} per GPU; {gpu.id} "
            f"has {fmt_bytes(f.capacity_bytes)}: {hint} (largest batch at this layout: "
            f"{f.max_batch}); --ignore-memory predicts anyway"
        )


def predict(
    scenario: Scenario,
    estimator: Estimator,
    *,
    gpu: GpuSpec | None = None,
    collectives: Any = None,
    memory: str = "auto",
) -> Prediction:
    """Predict prefill (TTFT, seconds) and decode (seconds per step, tokens/s) of ``scenario``.

    Both phases are predicted whatever the scenario's ``phase``: the prefill of its prompt,
    and one decode step at its ``context_tokens``. ``gpu`` is the datasheet GPU the
    prediction is for (its id names the machine; its memory and interconnect give the memory
    fit and the default collective model); ``collectives`` prices communication ops
    (default: the estimator's own, else the GPU's α-β priors for a layout of several
    devices). ``memory`` is one of :data:`MEMORY_CHECKS`; when checked, the prediction
    carries ``layout``, ``memory`` and (with pipeline stages) ``pipeline``.

    Raises:
        RoofprofError: a compute dtype the machine lacks (the message names what it has and
            the weight-only form); a layout that does not fit (``memory`` ``auto``/``check``).

    >>> from roofprof.specs import load_gpu
    >>> gpu = load_gpu("h100-sxm")
    >>> p = predict(Scenario.of("llama-3.1-8b", "decode", prompt_tokens=2000),
    ...             RooflineEstimator.for_gpu(gpu), gpu=gpu)
    >>> p.estimator, p.decode.bound, p.machine
    ('spec', 'memory', 'h100-sxm')
    """
    layout_asked = _check_layouts([scenario], gpu, memory)
    return _predict(scenario, _passes(scenario), estimator, gpu, collectives, layout_asked)


def _check_layouts(scenarios: Sequence[Scenario], gpu: GpuSpec | None, memory: str) -> bool:
    """Whether the layout is stated (``memory`` of :data:`MEMORY_CHECKS`), refusing a layout
    that does not fit when it is checked; the one place that decides both."""
    if memory not in MEMORY_CHECKS:
        raise ConfigError(f"unknown memory check {memory!r}; valid choices: {MEMORY_CHECKS}")
    if gpu is None or memory == "skip":
        return False
    if memory == "auto" and all(s.parallel.devices == 1 for s in scenarios):
        return False
    if memory != "report":
        check_memory(scenarios, gpu)
    return True


def _passes(scenario: Scenario) -> tuple[Workload, Workload]:
    """The prefill of the prompt and one decode step at the scenario's context."""
    return (
        models.ops(scenario.replace(phase="prefill", context_tokens=scenario.prompt_tokens)),
        models.ops(scenario.replace(phase="decode")),
    )


def _predict(
    scenario: Scenario,
    passes: tuple[Workload, Workload],
    estimator: Estimator,
    gpu: GpuSpec | None,
    collectives: Any,
    layout_asked: bool,
) -> Prediction:
    if collectives is None and scenario.parallel.devices > 1 and gpu is not None:
        from roofprof.prediction.collectives import CollectiveModel

        collectives = CollectiveModel.for_gpu(gpu)
    roof = estimator.roofline
    if roof is not None:
        check_compute(scenario.dtype, roof.dtypes, roof.device or _name(gpu), scenario.weights)
    spec_model, prompt = scenario.model, scenario.prompt_tokens
    context = scenario.context_tokens or 0  # (set from the prompt when not given)
    notes = []
    longest = max(prompt, context + 1)
    if longest > spec_model.max_position_embeddings:
        notes.append(
            f"{longest} tokens exceed {spec_model.id}'s max_position_embeddings "
            f"({spec_model.max_position_embeddings}); the prediction extrapolates"
        )
        _warnings.warn(notes[-1], stacklevel=3)
    estimator.prefetch([op for w in passes for op in w.ops])
    prefill, decode = (estimate_phase(w, estimator, collectives) for w in passes)
    notes.extend(w for w in estimator.warnings if w not in notes)
    notes.extend(getattr(collectives or estimator.collectives, "notes", ()))
    machine = gpu.id if gpu is not None else (estimator.machine or "")
    return Prediction(
        spec_model,
        machine,
        estimator.name,
        estimator.describe(),
        prefill,
        decode,
        estimator.ridge(scenario.dtype),
        tuple(notes),
        **_blocks(scenario, prefill, decode, gpu if layout_asked else None),
    )


def _name(gpu: GpuSpec | None) -> str:
    return gpu.id if gpu is not None else "this machine"


def _blocks(
    scenario: Scenario, prefill: PhasePrediction, decode: PhasePrediction, gpu: GpuSpec | None
) -> dict[str, Any]:
    """The typed fields beside the times: layout, memory fit and pipeline (when ``gpu``: the
    layout was asked for), the config's counting fields and the mixture-of-experts summary."""
    from roofprof.models.moe import summary

    spec = scenario.model
    out: dict[str, Any] = {
        "counting_config": models.config_fields(spec)["counting_config"],
    }
    if spec.moe is not None or spec.mla is not None or spec.pattern is not None:
        dc = decode.workload
        out["moe"] = summary(
            spec,
            prefill.workload.tokens,
            dc.tokens,
            scenario.kv_bytes_per_element,
            dc.context_tokens,
        )
    if gpu is not None:
        from roofprof.prediction.layout import pipeline
        from roofprof.prediction.memory_fit import fit_memory

        par = scenario.parallel
        out["layout"] = par
        out["memory"] = fit_memory(decode.workload.scenario, gpu)
        if par.pp > 1:
            out["pipeline"] = {
                "prefill": pipeline(prefill, par),
                "decode": pipeline(decode, par),
            }
    return out


def sweep(
    scenarios: Sequence[Scenario],
    estimator: Estimator,
    *,
    gpu: GpuSpec | None = None,
    collectives: Any = None,
    memory: str = "auto",
) -> list[Prediction]:
    """One :func:`predict` per scenario (same estimator and options); every layout is
    checked against memory before any prediction (a measured estimator measures once, for
    all of them).

    >>> from roofprof.specs import load_gpu
    >>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)
    >>> est = RooflineEstimator.for_gpu(load_gpu("h100-sxm"))
    >>> [p.decode.bound for p in sweep([s, s.replace(batch=512)], est)]
    ['memory', 'compute']
    """
    layout_asked = _check_layouts(scenarios, gpu, memory)
    passes = [_passes(s) for s in scenarios]
    estimator.prefetch([op for pair in passes for w in pair for op in w.ops])
    return [
        _predict(s, pair, estimator, gpu, collectives, layout_asked)
        for s, pair in zip(scenarios, passes, strict=True)
    ]


def phase_sweep(
    scenario: Scenario,
    estimator: Estimator,
    *,
    batches: Sequence[int] = (1,),
    contexts: Sequence[int | None] = (None,),
) -> list[PhasePrediction]:
    """The scenario's phase only (its decode step, usually) over a grid of batches and contexts.

    Cheaper than :func:`sweep` when only decode matters (a measured estimator would
    otherwise profile every prefill shape too). Context ``None`` is the prompt length.

    >>> from roofprof.specs import load_gpu
    >>> est = RooflineEstimator.for_gpu(load_gpu("h100-sxm"))
    >>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)
    >>> [p.bound for p in phase_sweep(s, est, batches=(1, 512), contexts=(128,))]
    ['memory', 'compute']
    """
    passes = [
        models.ops(
            scenario.replace(batch=b, context_tokens=scenario.prompt_tokens if c is None else c)
        )
        for b in batches
        for c in contexts
    ]
    estimator.prefetch([op for w in passes for op in w.ops])
    return [estimate_phase(w, estimator) for w in passes]
