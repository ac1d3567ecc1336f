"""The loose-argument entry points behind the facade (``roofprof.predict``, ``roofprof.sweep``).

These are the only places, with the CLI, where loose arguments (a model id, sizes, a
convention name, a GPU id) become a :class:`~roofprof.workload.Scenario` and an
:class:`~roofprof.estimator_choice.EstimatorChoice`; everything below takes those. The CLI's
``roofprof predict`` calls :func:`sweep`, so ``roofprof.predict(...).to_dict()`` and
``roofprof predict -f json`` give the same JSON.

>>> import roofprof
>>> p = roofprof.predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
>>> round(p.tokens_per_second)
219
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.estimators import Estimator
    from roofprof.predictions import Prediction
    from roofprof.roofline import Roofline
    from roofprof.specs import GpuSpec, ModelSpec
    from roofprof.workload import Counting, Parallel

__all__ = ["predict", "sweep"]


def sweep(
    model: str | ModelSpec,
    gpu: str | GpuSpec | None = None,
    *,
    batches: Sequence[int] = (1,),
    contexts: Sequence[int | None] = (None,),
    roofline: Roofline | str | os.PathLike | None = None,
    estimator: Estimator | str | None = None,
    engine: str = "ideal",
    device: str = "auto",
    remeasure: bool = False,
    prompt_tokens: int = 2000,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
    attention: str | None = None,
    weights: str | None = None,
    kv_dtype: str | None = None,
    parallel: Parallel | None = None,
    collectives: Any = None,
    ignore_memory: bool = False,
    routing: str | None = None,
) -> list[Prediction]:
    """Predictions over a grid of decode batches × contexts (one per point, batch-major).

    Args:
        model: a model id (``roofprof specs``), a ``config.json`` path, or a ModelSpec.
        gpu: a datasheet GPU id or alias (the ``spec`` estimator; memory and interconnect).
        batches, contexts: sequences per batch and cached tokens per sequence at decode
            (``None``: the prompt length).
        roofline: a measured roofline or ``roofline.json`` (the ``empirical`` estimator).
        estimator: an estimator object, or a name of
            :data:`~roofprof.estimator_choice.ESTIMATORS` (default: ``spec`` with ``gpu``,
            ``empirical`` with ``roofline``).
        engine, device, remeasure: for the ``calibrated`` and ``measured`` estimators.
        prompt_tokens, dtype, convention, attention, weights, kv_dtype: the scenario
            (:meth:`Scenario.of <roofprof.workload.Scenario.of>`; ``attention`` overrides
            the convention's attention counting, ``fused`` or ``unfused``).
        parallel: a TP/PP layout (needs ``gpu``); its memory fit is checked (refused when it
            does not fit, unless ``ignore_memory``) and stated with the pipeline figures.
        collectives: a measured collectives table or its JSON path (needs ``gpu``), replacing
            the α-β priors.
        routing: a mixture-of-experts routing assumption (``uniform``, ``zipf:S`` or a JSON
            file of per-expert loads).

    Raises:
        RoofprofError: an unknown model, GPU, estimator, dtype, format or convention; bad
            sizes; a layout that does not fit; an estimator that lacks its inputs.
    """
    from roofprof import rollup
    from roofprof.estimator_choice import EstimatorChoice, choose_estimator, collective_model
    from roofprof.specs import load_model
    from roofprof.workload import Scenario, counting_of

    counting = counting_of(convention)
    if attention is not None:
        if attention not in ("fused", "unfused"):
            raise ConfigError(
                f"unknown attention counting {attention!r}; valid choices: fused, unfused"
            )
        counting = dataclasses.replace(counting, attention=attention)
    spec = load_model(model) if isinstance(model, str) else model
    if routing is not None:
        from roofprof.models.moe import with_routing

        spec = with_routing(spec, routing)
    base = Scenario.of(
        spec,
        "decode",
        prompt_tokens=prompt_tokens,
        dtype=dtype,
        convention=counting,
        weights=weights,
        kv_dtype=kv_dtype,
        parallel=parallel,
    )
    scenarios = [
        base.replace(batch=b, context_tokens=base.prompt_tokens if c is None else c)
        for b in batches
        for c in contexts
    ]
    choice = EstimatorChoice(
        name=estimator if isinstance(estimator, str) else None,
        gpu=gpu,
        roofline=roofline,
        engine=engine,
        device=device,
        remeasure=remeasure,
    )
    gpu_spec = choice.gpu_spec()
    if (parallel is not None or collectives is not None) and gpu_spec is None:
        raise ConfigError("--tp/--pp/--collectives need --gpu (its interconnect and memory)")
    # a layout asked for is checked against memory (and stated); none: as rollup decides
    memory = "auto" if parallel is None else ("report" if ignore_memory else "check")
    if gpu_spec is not None and memory == "check":
        rollup.check_memory(scenarios, gpu_spec)  # before a measured estimator measures
        memory = "report"  # checked: the roll-up states the fit without checking again
    if estimator is None or isinstance(estimator, str):
        chosen = choose_estimator(choice, base)
    else:
        chosen = estimator
    model_of_collectives = None
    if gpu_spec is not None and (parallel is not None or collectives is not None):
        table = collectives
        if isinstance(collectives, (str, os.PathLike)):
            from roofprof.collectives import load_collectives

            table = load_collectives(collectives)
        model_of_collectives = collective_model(
            gpu_spec, table=table, estimator=choice.resolved_name, engine=engine
        )
    # the prediction is for the datasheet GPU when the estimator models its datasheet or
    # published ceilings, an estimator object given with it, or a layout on it; a calibrated
    # or measured estimator names the machine it models itself
    datasheet = choice.resolved_name == "spec" or (
        choice.resolved_name == "empirical" and roofline is None
    )
    for_gpu = datasheet or not isinstance(estimator, (str, type(None))) or memory != "auto"
    return rollup.sweep(
        scenarios,
        chosen,
        gpu=gpu_spec if for_gpu else None,
        collectives=model_of_collectives,
        memory=memory,
    )


def predict(
    model: str | ModelSpec,
    gpu: str | GpuSpec | None = None,
    *,
    batch: int = 1,
    context_tokens: int | None = None,
    **kwargs: Any,
) -> Prediction:
    """Predict prefill (TTFT, seconds) and decode (seconds per step, tokens/s).

    The arguments are :func:`sweep`'s, with one ``batch`` and one decode ``context_tokens``
    (default: the prompt length).

    Raises:
        RoofprofError: as :func:`sweep`.

    >>> p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    >>> p.estimator, p.decode.bound
    ('spec', 'memory')
    """
    return sweep(model, gpu, batches=(batch,), contexts=(context_tokens,), **kwargs)[0]
