"""The loose-argument entry points behind the facade (``roofprof.predict``, ``sweep``,
``profile``, ``validate``, ``run``, ``endpoint``).

These are the only places, with the CLI, where loose arguments (a model id, sizes, a
convention name, a GPU id) become a :class:`~roofprof.workload.Scenario` and an
:class:`~roofprof.prediction.choice.EstimatorChoice`; everything below takes those. The CLI's
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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.devices.base import Device
    from roofprof.job import RunResult
    from roofprof.prediction.comparison import GpuComparison
    from roofprof.prediction.estimators import Estimator
    from roofprof.prediction.records import Prediction
    from roofprof.profiling.profiler import Profiler
    from roofprof.profiling.records import ProfileResult
    from roofprof.roofline import Roofline
    from roofprof.specs import GpuSpec, ModelSpec
    from roofprof.validation.records import ValidationResult
    from roofprof.workload import Counting, Parallel, Scenario

__all__ = [
    "compare_gpus",
    "endpoint",
    "parse_gpu_list",
    "predict",
    "profile",
    "run",
    "sweep",
    "validate",
]

Progress = Callable[[str, int, int], None]


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
            :data:`~roofprof.prediction.choice.ESTIMATORS` (default: ``spec`` with ``gpu``,
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
    from roofprof.prediction import rollup
    from roofprof.prediction.choice import EstimatorChoice, choose_estimator, collective_model
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
            from roofprof.prediction.collectives import load_collectives

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


def parse_gpu_list(gpus: str | Sequence[str | GpuSpec]) -> list[GpuSpec]:
    """The datasheet GPUs of a comparison: a comma list (``"h100-sxm,a100-sxm-80gb"``) or a
    sequence of ids, aliases or specs, in order.

    Raises:
        UnknownNameError: an unknown id (the message lists the valid ids, closest first).
        ConfigError: an empty entry, or a GPU named twice.

    >>> [g.id for g in parse_gpu_list("H100, a100-sxm-80gb")]
    ['h100-sxm', 'a100-sxm-80gb']
    """
    from roofprof.specs import GpuSpec, load_gpu

    names = gpus.split(",") if isinstance(gpus, str) else list(gpus)
    specs: list[GpuSpec] = []
    for name in names:
        if isinstance(name, str) and not name.strip():
            raise ConfigError(f"empty GPU id in {gpus!r}; give ids separated by commas")
        spec = name if isinstance(name, GpuSpec) else load_gpu(name.strip())
        if any(s.id == spec.id for s in specs):
            raise ConfigError(f"GPU {spec.id} is named twice in the comparison")
        specs.append(spec)
    if not specs:
        raise ConfigError("a comparison needs at least one GPU id")
    return specs


def compare_gpus(
    model: str | ModelSpec,
    gpus: str | Sequence[str | GpuSpec],
    *,
    batches: Sequence[int] = (1,),
    contexts: Sequence[int | None] = (None,),
    estimator: str | None = None,
    **kwargs: Any,
) -> GpuComparison:
    """The same scenarios predicted on several datasheet GPUs, side by side, with the ratios
    to the first (:mod:`roofprof.prediction.comparison`).

    Args:
        model: as :func:`sweep`.
        gpus: ids or aliases (a comma list or a sequence), the first being the reference.
        batches, contexts: the decode grid, as :func:`sweep` (one row per GPU and point).
        estimator: ``spec`` (default), ``empirical`` (each GPU's published ceilings) or
            ``calibrated`` (each GPU's fitted engine losses); ``measured`` is refused, since
            it measures this machine and not the GPUs compared.
        kwargs: the rest of :func:`sweep`'s scenario arguments (``prompt_tokens``, ``dtype``,
            ``weights``, ``parallel``, ...). A layout is never refused here: each GPU's memory
            fit is stated in its row instead.

    Returns:
        A :class:`~roofprof.prediction.comparison.GpuComparison` (``.to_list()`` is the JSON
        of ``roofprof predict --gpu a,b -f json``).

    Raises:
        RoofprofError: an unknown GPU (the valid ids listed), a GPU named twice, a measured
            roofline or estimator, or anything :func:`sweep` refuses.

    >>> c = compare_gpus("llama-3.1-8b", "a100-sxm-80gb,h100-sxm", prompt_tokens=2000)
    >>> round(c.rows[1].ttft_speedup, 1), c.rows[1].prediction.decode.bound
    (3.0, 'memory')
    """
    from roofprof.prediction.comparison import compare

    if estimator == "measured" or kwargs.get("roofline") is not None:
        raise ConfigError(
            "a GPU comparison predicts from each GPU's datasheet: --estimator spec, empirical or "
            "calibrated (a measured roofline or estimator is this machine's, not the GPUs')"
        )
    if estimator is not None and not isinstance(estimator, str):
        raise ConfigError("a GPU comparison takes an estimator name (spec, empirical, calibrated)")
    specs = parse_gpu_list(gpus)
    kwargs.setdefault("ignore_memory", True)  # the fit is a column, not a refusal
    predictions = [
        sweep(model, g, batches=batches, contexts=contexts, estimator=estimator, **kwargs)
        for g in specs
    ]
    return compare(specs, predictions)


def profile(
    model: str | ModelSpec | Scenario,
    phase: str = "decode",
    *,
    batch: int = 1,
    prompt_tokens: int = 128,
    context_tokens: int | None = None,
    dtype: str = "fp32",
    device: Device | str = "auto",
    impls: Sequence[str] | None = None,
    convention: str | Counting = "engine",
    roofline: Roofline | str | os.PathLike | None = "auto",
    threads: int | None = None,
    budget_s: float = 0.2,
    prefer: Sequence[str] = ("reference",),
    use_cache: bool = False,
    progress: Progress | None = None,
    profiler: Profiler | None = None,
) -> ProfileResult:
    """Measure every op of one pass of ``model`` on ``device`` and place it on the roofline.

    Args:
        model: id or config path (or a ModelSpec), or a Scenario (then the phase, sizes,
            dtype and convention come from it).
        phase: ``prefill`` (``prompt_tokens`` per sequence) or ``decode`` (one step at
            ``context_tokens`` cached tokens, default the prompt).
        dtype: weights/activations dtype (``fp32`` on a CPU; must match the real model's).
        device: ``auto | cpu | cuda:N`` or a Device.
        impls: implementation names (default: all available on the device).
        convention: op counting (``engine``: what eager PyTorch/transformers runs, with
            SDPA attention counted as fused; pass a Counting with ``attention="unfused"``
            for eager attention).
        roofline: measured roofline (see :func:`roofprof.cache.resolve_roofline`).
        threads: torch/numba threads (same value as for ``validate``).
        budget_s: timed seconds per op and implementation.
        use_cache: reuse cached measurements (contended ones are measured again).
        profiler: reuse a :class:`Profiler` (and its measured shapes) across calls.

    Returns:
        A :class:`ProfileResult` (``.seconds`` is the measured sum, ``.to_dict()`` the JSON).

    Raises:
        RoofprofError: bad model/phase/sizes/dtype, unknown implementation, no such device.

    >>> from roofprof.specs import ModelSpec
    >>> tiny = ModelSpec("tiny", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
    ...                  num_kv_heads=2, head_dim=16, vocab_size=100, tie_word_embeddings=True,
    ...                  max_position_embeddings=256)
    >>> r = profile(
    ...     tiny, "decode", context_tokens=8, roofline="none", budget_s=0.002, impls=["torch"]
    ... )
    >>> [o.chosen.impl for o in r.ops][:3], r.seconds > 0
    (['torch', 'torch', 'torch'], True)
    """
    from roofprof.cache import RooflineChoice
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.workload import Scenario, dense_run

    model, note = dense_run(model, dtype if not isinstance(model, Scenario) else model.dtype)
    scenario = (
        model
        if isinstance(model, Scenario)
        else Scenario.of(
            model,
            phase,
            batch=batch,
            prompt_tokens=prompt_tokens,
            context_tokens=context_tokens,
            dtype=dtype,
            convention=convention,
            stored_weights=False,  # the profiled kernels read dense dtype weights
        )
    )
    prof = profiler or Profiler(
        device,
        ProfileSettings(
            impls=tuple(impls) if impls else None,
            prefer=tuple(prefer),
            budget_s=budget_s,
            threads=threads,
            roofline=RooflineChoice(roofline),
            use_cache=use_cache,
        ),
        progress=progress,
    )
    return _noted(prof.profile(scenario), note)


def _noted(result: Any, note: str) -> Any:
    """``result`` with ``note`` among its warnings (and warned: the CLI prints it)."""
    if not note:
        return result
    import warnings

    warnings.warn(note, stacklevel=3)
    return dataclasses.replace(result, warnings=(*result.warnings, note))


def validate(
    model: str | ModelSpec | Scenario,
    *,
    device: Device | str = "auto",
    dtype: str | None = None,
    batch: int = 1,
    prompt_tokens: int = 128,
    decode_steps: int = 8,
    warmup_steps: int = 2,
    prefill_repeats: int = 3,
    warmup_tokens: int | None = None,
    attention: str = "fused",
    backend: str = "auto",
    threads: int | None = None,
    max_layers: int | None = None,
    memory_fraction: float = 0.8,
    estimators: Mapping[str, Estimator] | None = None,
    progress: Progress | None = None,
) -> ValidationResult:
    """Run a real forward pass of the model (prefill, then decode steps) on ``device`` and time it.

    Loose arguments for :func:`roofprof.validation.model_run.validate` (whose
    :class:`~roofprof.validation.model_run.ValidationSettings` documents ``decode_steps`` to
    ``memory_fraction``).

    Args:
        model: id or HF config path (or a ModelSpec), or a Scenario (its model, dtype,
            batch, prompt and attention counting are used).
        device: ``auto | cpu | cuda:N`` or a Device.
        dtype: the device's default (``fp32`` on a CPU, ``bf16`` on a GPU), or ``fp16``...
        batch, prompt_tokens: prefill shape; decode continues these sequences.
        attention: ``fused`` (SDPA) or ``unfused`` (eager), matching the counting.
        estimators: label → estimator; each predicts what the real run did.

    Raises:
        DeviceUnavailableError: torch (or transformers for ``backend="hf"``) is missing.
        ConfigError: the model does not fit even with one layer; bad sizes or choices.
    """
    import importlib.util

    from roofprof.devices import as_device
    from roofprof.devices.cpu import single_openmp_runtime
    from roofprof.errors import DeviceUnavailableError
    from roofprof.validation.model_run import TORCH_MISSING, ValidationSettings
    from roofprof.validation.model_run import validate as validate_scenario
    from roofprof.workload import Counting, Scenario, dense_run

    if importlib.util.find_spec("torch") is None:
        raise DeviceUnavailableError(TORCH_MISSING)
    single_openmp_runtime()  # before reading the device starts numba's threads
    dev = as_device(device)
    dtype = dtype or dev.info.default_dtype
    model, note = dense_run(model, model.dtype if isinstance(model, Scenario) else dtype)
    scenario = (
        model
        if isinstance(model, Scenario)
        else Scenario.of(
            model,
            "decode",
            batch=batch,
            prompt_tokens=prompt_tokens,
            dtype=dtype,
            convention=Counting().with_attention(attention),
            stored_weights=False,  # the real run has random weights at the dtype
        )
    )
    settings = ValidationSettings(
        decode_steps=decode_steps,
        warmup_steps=warmup_steps,
        prefill_repeats=prefill_repeats,
        warmup_tokens=warmup_tokens,
        backend=backend,
        threads=threads,
        max_layers=max_layers,
        memory_fraction=memory_fraction,
    )
    result = validate_scenario(scenario, dev, settings, estimators=estimators, progress=progress)
    return _noted(result, note)


def run(
    model: str = "auto",
    *,
    progress: Progress | None = None,
    step: Callable[[str], None] | None = None,
    **plan: Any,
) -> RunResult:
    """The main job (``roofprof run``) from loose arguments: :meth:`RunPlan.of
    <roofprof.job.RunPlan.of>` takes ``model`` and ``plan``, :func:`roofprof.job.run` runs it.

    Raises:
        RoofprofError: as :meth:`RunPlan.of <roofprof.job.RunPlan.of>` and
            :func:`roofprof.job.run`.
    """
    from roofprof.job import RunPlan
    from roofprof.job import run as run_plan

    return run_plan(RunPlan.of(model, **plan), progress=progress, step=step)


def endpoint(
    url: str,
    *,
    api: str = "completions",
    served_model: str | None = None,
    roofprof_model: str | None = None,
    gpu: str | None = None,
    roofline: str | os.PathLike | None = None,
    device: str | None = None,
    estimator: str | None = None,
    dtype: str | None = None,
    prompt_lengths: Sequence[int] | None = None,
    output_tokens: int = 128,
    concurrency: Sequence[int] = (1,),
    rates: Sequence[float] = (),
    requests: int | None = None,
    warmup: int = 1,
    floor_requests: int = 5,
    level_seconds: float = 120.0,
    timeout_s: float = 60.0,
    api_key: str | None = None,
    tokenizer: str | None = None,
    extra: Mapping[str, Any] | None = None,
    draw: int | None = None,
) -> Any:
    """Measure a live OpenAI-compatible endpoint and place it on the roofline.

    Streams ``/v1/completions`` (``api="chat"``: ``/v1/chat/completions``) at each load
    level of :class:`~roofprof.endpoint.protocol.SweepPlan` and times every SSE event
    (TTFT, TPOT, ITL, E2E in seconds; throughputs in tokens/s). With ``gpu``, ``roofline``
    or ``device`` the same model (``roofprof_model``, else the served id when it is a
    roofprof id or a local folder with a ``config.json``) is predicted at each level's
    prompt, context and batch (``result.roofline``).

    Args:
        url: ``http(s)://host:port`` (a trailing ``/v1`` is accepted); no other host is
            contacted.
        served_model: the ``model`` field sent (default: the first id of ``/v1/models``).
        roofprof_model: the model for the roofline, anything :func:`~roofprof.specs.load_model`
            takes (shipped id, Hub id, folder, ``.gguf``, ``config.json``); default: the
            served id when it names one locally
            (:func:`~roofprof.endpoint.placement.roofprof_model_for`).
        device: ``cpu`` (a local CPU server): the ``measured`` estimator on this machine,
            fp32 unless ``dtype`` says otherwise.
        prompt_lengths: default 16, 2,000 and 16,000 tokens, capped by the context.
        timeout_s: the longest wait for any byte of a response (a stalled stream ends the
            request with an error).
        api_key: sent as a bearer token (default ``OPENAI_API_KEY``); never stored.
        extra: vendor fields added to every request (``{"ignore_eos": True}`` for vLLM).

    Returns:
        An :class:`~roofprof.endpoint.records.EndpointResult`.

    Raises:
        RoofprofError: the server cannot be reached (refused, unknown host, TLS), refuses the
            first request (its message is shown), bad arguments, an unknown model or GPU.

    The run itself is :func:`roofprof.endpoint.measurement.measure_and_place`; this door turns
    ``gpu``/``roofline``/``device`` into its predictor (:func:`sweep`).

    Example (against a running server)::

        r = roofprof.endpoint("http://127.0.0.1:8000", gpu="h100-sxm",
                              roofprof_model="llama-3.1-8b", concurrency=(1, 8))
    """
    from roofprof.endpoint.measurement import measure_and_place

    on_cpu = device is not None and device.startswith("cpu")
    chosen_dtype = dtype or ("fp32" if on_cpu else "bf16")
    chosen = estimator or ("measured" if gpu is None and roofline is None else None)

    def predictor_for(name: str) -> Callable[[int, Sequence[int], int], list[Prediction]]:
        return lambda prompt, batches, ctx: sweep(
            name,
            gpu,
            batches=batches,
            contexts=(ctx,),
            roofline=roofline,
            estimator=chosen,
            device=device or "auto",
            prompt_tokens=prompt,
            dtype=chosen_dtype,
        )

    placed = gpu is not None or roofline is not None or device is not None
    return measure_and_place(
        url,
        predictor_for=predictor_for if placed else None,
        api=api,
        served=served_model,
        roofprof_model=roofprof_model,
        prompt_lengths=prompt_lengths,
        output_tokens=output_tokens,
        concurrency=concurrency,
        rates=rates,
        requests=requests,
        warmup=warmup,
        floor_requests=floor_requests,
        level_seconds=level_seconds,
        timeout_s=timeout_s,
        api_key=api_key,
        tokenizer=tokenizer,
        extra=extra,
        draw=draw,
    )
