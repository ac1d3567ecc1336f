"""Validate: time a real model forward pass on the device and hold the estimators against it.

:func:`validate` builds the model from the config with random weights, on the device
being measured: its family's Hugging Face transformers class (``LlamaForCausalLM``,
``Qwen2ForCausalLM``, ``Gemma2ForCausalLM``, ...: :data:`roofprof.models.families.TORCH_SIDES`)
when transformers is installed (``backend="hf"``), else roofprof's plain-torch model of the
family (:mod:`roofprof.models.llama_torch` and its kin, the same architecture,
``backend="torch"``), from the model's spec (sizes, RoPE and norm fields:
:class:`~roofprof.specs.ModelSpec`). It times

* **prefill**: one forward pass over ``prompt_tokens`` per sequence into an empty KV cache
  (logits of the last token only, as generation does): the time to first token without
  network; one untimed warm-up pass first (of ``warmup_tokens``, default the whole prompt),
  then ``prefill_repeats`` timed ones;
* **decode**: after the prefill, ``warmup_steps`` untimed decode steps, then
  ``decode_steps`` timed ones, one token per sequence each, with the KV cache growing.

Times come from the device clock: CUDA events on a GPU, ``perf_counter`` on a CPU (both
synchronise before reading). The medians form a :class:`~roofprof.prediction.rollup.RealRun`.

Attention runs as the counting convention says: ``fused`` → SDPA (a fused
FlashAttention-style kernel on CPU and GPU), ``unfused`` → eager attention (scores through
memory). Whatever the backend, lm_head runs on the last token, the embedding is a gather
and the elementwise ops are separate kernels: the ``engine`` counting.

A model too large for the device's free memory is scaled by layer count (the embedding,
head and KV cache stay whole) and the scaling is stated; the predictions it is compared
with are made for the same scaled model. A model that does not fit even with one layer is
a :class:`~roofprof.errors.ConfigError` (exit 2) giving the memory needed and available.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
import warnings as _warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roofprof.errors import ConfigError, DeviceUnavailableError, UnknownNameError
from roofprof.prediction.rollup import (
    Estimator,
    MeasuredEstimator,
    Prediction,
    RealRun,
    predict,
)
from roofprof.specs import ModelSpec
from roofprof.telemetry import CONTENDED_SHARE, Contention
from roofprof.validation.framework_overhead import count_framework_overhead
from roofprof.validation.host_noise import HostNoise, HostProbe
from roofprof.validation.real_model import (
    BACKENDS,
    Runner,
    auto_backend,
    build_hf_model,
    build_torch_model,
    describe_real_model,
    has_transformers,
    scaled_model,
    torch_module,
)
from roofprof.validation.records import ValidationResult, memory_plan
from roofprof.workload import Counting, Scenario

if TYPE_CHECKING:
    from roofprof.devices.base import Device

__all__ = [
    "TORCH_MISSING",
    "ValidationSettings",
    "predict_for",
    "predict_validated",
    "validate",
    "validation_context",
    "with_framework_overhead",
]

Progress = Callable[[str, int, int], None]
TORCH_MISSING = (
    "roofprof validate runs a real model and needs torch: pip install 'roofprof[torch]' "
    "(CPU only: pip install torch==2.13.0 first; the extra brings transformers too)"
)


# --------------------------------------------------------------------------- validate


@dataclass(frozen=True)
class ValidationSettings:
    """How :func:`validate` runs the real model.

    Attributes:
        decode_steps, warmup_steps, prefill_repeats: timed decode steps in all, untimed
            decode steps after each timed prefill, and timed prefills (each followed by its
            share of the decode steps). The untimed warm-up (a prefill and at least one
            decode step) comes first in any case.
        warmup_tokens: tokens of the untimed warm-up prefill (default the prompt; a short
            one loads the runtime as well: ``run`` uses 16, see BENCHMARKS.md).
        backend: ``hf`` (transformers), ``torch`` (plain torch) or ``auto`` (hf if installed).
        threads: torch threads (use the same as for profiling).
        max_layers: run at most this many layers (the model is scaled, and says so).
        memory_fraction: share of the device's free memory the run may use.

    >>> ValidationSettings(decode_steps=4).prefill_repeats
    3
    """

    decode_steps: int = 8
    warmup_steps: int = 2
    prefill_repeats: int = 3
    warmup_tokens: int | None = None
    backend: str = "auto"
    threads: int | None = None
    max_layers: int | None = None
    memory_fraction: float = 0.8


def validate(
    scenario: Scenario,
    device: Device | str = "auto",
    settings: ValidationSettings | None = None,
    *,
    estimators: Mapping[str, Estimator] | None = None,
    progress: Progress | None = None,
) -> ValidationResult:
    """Run a real forward pass of ``scenario``'s model (prefill, then decode steps) and time it.

    The scenario gives the model, dtype, batch, prompt and attention counting (``fused``:
    SDPA, ``unfused``: eager); ``settings`` how the real run goes; ``estimators`` (label →
    estimator) each predict the same (possibly scaled) model, batch, prompt and decode
    context, and their residuals are reported. ``roofprof.validate`` takes loose arguments.

    Returns:
        A :class:`ValidationResult` (``.real`` the timings, ``.comparison()`` the residuals).

    Raises:
        DeviceUnavailableError: torch (or transformers for ``backend="hf"``) is missing.
        ConfigError: the model does not fit even with one layer; bad sizes or choices.

    Example::

        s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=128, dtype="fp32")
        r = validate(s, select("cpu"), ValidationSettings(decode_steps=8))
        r.real.decode_s
    """
    settings = settings or ValidationSettings()
    batch, prompt_tokens = scenario.batch, scenario.prompt_tokens
    attention, backend = scenario.counting.attention, settings.backend
    if importlib.util.find_spec("torch") is None:
        raise DeviceUnavailableError(TORCH_MISSING)
    if backend not in BACKENDS:
        raise UnknownNameError("backend", backend, BACKENDS)
    if backend == "hf" and not has_transformers():
        raise DeviceUnavailableError(
            "backend 'hf' needs transformers: pip install 'roofprof[torch]' "
            "(or use --backend torch)"
        )
    if attention not in ("fused", "unfused"):
        raise ConfigError(f"unknown attention {attention!r}; valid choices: fused, unfused")
    warmup_tokens = settings.warmup_tokens
    for name, value, low in (
        ("batch", batch, 1),
        ("prompt tokens", prompt_tokens, 1),
        ("decode steps", settings.decode_steps, 1),
        ("warm-up steps", settings.warmup_steps, 0),
        ("prefill repeats", settings.prefill_repeats, 1),
        ("warm-up tokens", prompt_tokens if warmup_tokens is None else warmup_tokens, 1),
    ):
        if value < low:
            raise ConfigError(f"{name} must be at least {low}, got {value}")
    import torch  # noqa: F401 - torch (and its OpenMP runtime) loads before numba, as before

    from roofprof.devices import as_device
    from roofprof.devices.cpu import single_openmp_runtime
    from roofprof.devices.cpu import threads as cpu_threads

    single_openmp_runtime()
    dev = as_device(device)
    info = dev.info
    dtype = scenario.dtype
    if info.torch_device == "cpu" and dtype in ("fp16",):
        raise ConfigError("fp16 matmuls on the CPU have no fast path in torch; use fp32 (or bf16)")
    spec_full = scenario.model
    from roofprof.models import require_measurable

    require_measurable(spec_full, "validate")
    chosen = auto_backend(spec_full) if backend == "auto" else backend
    with cpu_threads(settings.threads) as count:
        result = _validate(
            dev,
            spec_full,
            dtype,
            chosen,
            count,
            asked=backend,
            batch=batch,
            prompt_tokens=prompt_tokens,
            decode_steps=settings.decode_steps,
            warmup_steps=settings.warmup_steps,
            prefill_repeats=settings.prefill_repeats,
            warmup_tokens=min(prompt_tokens, warmup_tokens or prompt_tokens),
            attention=attention,
            max_layers=settings.max_layers,
            memory_fraction=settings.memory_fraction,
            estimators=estimators,
            progress=progress,
        )
    return dataclasses.replace(result, scenario=scenario)


def _validate(
    dev: Device,
    spec_full: ModelSpec,
    dtype: str,
    chosen: str,
    threads: int | None,
    *,
    asked: str = "auto",
    batch: int,
    prompt_tokens: int,
    decode_steps: int,
    warmup_steps: int,
    prefill_repeats: int,
    warmup_tokens: int,
    attention: str,
    max_layers: int | None,
    memory_fraction: float,
    estimators: Mapping[str, Estimator] | None,
    progress: Progress | None,
) -> ValidationResult:
    """:func:`validate` once the device, model, dtype, backend and threads are settled."""
    import torch

    info = dev.info
    total = prompt_tokens + warmup_steps + decode_steps + 1
    plan = memory_plan(
        spec_full,
        dtype,
        batch=batch,
        prompt_tokens=prompt_tokens,
        total_tokens=total,
        available_bytes=dev.free_memory_bytes() * memory_fraction,
        attention=attention,
        max_layers=max_layers,
    )
    spec = scaled_model(spec_full, plan.num_layers)
    notes = [plan.describe()] if plan.scaled else []
    tdev = dev.info.torch_device
    steps_total = 2 + prefill_repeats * (1 + warmup_steps + -(-decode_steps // prefill_repeats))
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        if progress:
            progress(label, done, steps_total)
        done += 1

    tick(f"building {spec.id} ({chosen}, {dtype}, random weights)")
    t0 = time.perf_counter()
    build = build_hf_model if chosen == "hf" else build_torch_model
    net = build(spec, dtype, tdev, attention)
    dev.synchronize()
    build_s = time.perf_counter() - t0
    side, module = torch_module(spec)
    notes.extend(n for n in [getattr(module, "BACKEND_NOTES", {}).get(chosen)] if n)
    backend_label = (
        f"transformers {_version('transformers')} {side.hf_class}"
        if chosen == "hf"
        else f"plain torch ({side.module}.{type(net).__name__})"
    )
    runner = Runner(net, chosen)
    attention_ran = _attention_run(net, attention)
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, spec.vocab_size, (batch, prompt_tokens), generator=gen).to(tdev)
    clock = dev.clock()
    prefill_s: list[float] = []
    decode_s: list[float] = []
    sampler = dev.sampler(interval_s=0.05)
    prefill_share: list[float] = []
    decode_share: list[float] = []
    shared_host = info.shared_host

    prefill_faults: list[int] = []  # minor page faults of each timed pass
    decode_faults: list[int] = []

    def timed(fn, shares, faults=None):
        meter = Contention()
        with meter:
            clock.start()
            out = fn()
            elapsed = clock.stop()
        shares.append(meter.share)
        touched = getattr(meter, "minor_faults", None)  # a meter that counts them
        if touched is not None and faults is not None:
            faults.append(touched)
        return out, elapsed

    steps_per_rep = -(-decode_steps // prefill_repeats)
    # the host's drift: a reference kernel before and after the real run and after the profile
    host = HostProbe(share=Contention) if shared_host else None
    if host is not None:
        host.check("before the real run")
    with torch.inference_mode(), sampler:
        tick("warm-up (prefill and decode)")
        logits, cache = runner.prefill(ids[:, :warmup_tokens])
        for _ in range(max(1, warmup_steps)):  # the decode path runs once before any timed step
            logits = runner.step(logits[:, -1:].argmax(-1), cache)
        # Repetitions interleave a timed prefill and timed decode steps, so that a slow spell
        # of the machine touches one repetition, not every sample of one phase. On a CPU, a
        # repetition whose samples other processes disturbed is followed by another (two at most).
        rep = 0
        while True:
            cache = None  # free the previous repetition's KV cache first
            tick(
                f"repetition {rep + 1}/{prefill_repeats}: prefill ({batch}×{prompt_tokens} tokens)"
                + (" (again: machine busy)" if rep >= prefill_repeats else "")
            )
            (logits, cache), elapsed = timed(
                lambda: runner.prefill(ids), prefill_share, prefill_faults
            )
            prefill_s.append(elapsed)
            nxt = logits[:, -1:].argmax(-1)
            for i in range(warmup_steps + steps_per_rep):
                tick(
                    f"repetition {rep + 1}/{prefill_repeats}: "
                    f"decode step {i + 1}/{warmup_steps + steps_per_rep}"
                    + (" (warm-up)" if i < warmup_steps else "")
                )
                logits, elapsed = timed(
                    lambda nxt=nxt, cache=cache: runner.step(nxt, cache),
                    decode_share if i >= warmup_steps else [],
                    decode_faults if i >= warmup_steps else None,
                )
                if i >= warmup_steps:
                    decode_s.append(elapsed)
                nxt = logits[:, -1:].argmax(-1)
            rep += 1
            if rep >= prefill_repeats and (
                not shared_host
                or rep >= prefill_repeats + 2
                or (
                    _clean_count(prefill_share) >= min(2, prefill_repeats)
                    and _clean_count(decode_share)
                    >= min(decode_steps, len(decode_s)) - steps_per_rep
                )
            ):
                break
        finite = bool(torch.isfinite(logits).all())
    if host is not None:
        host.check("after the real run")
    summary = sampler.summary()
    prefill_used, prefill_note = _uncontended(prefill_s, prefill_share, 1)
    decode_used, decode_note = _uncontended(decode_s, decode_share, min(3, decode_steps))
    telemetry = summary.to_dict()
    del net, cache, logits
    if tdev.startswith("cuda"):
        torch.cuda.empty_cache()
    if not finite:
        notes.append(
            "the real model produced non-finite logits (random weights); timings are still valid"
        )
    notes.extend(n for n in (prefill_note, decode_note) if n)
    telemetry["other_cpu_share"] = {"prefill": prefill_share, "decode": decode_share}
    context = validation_context(prompt_tokens, warmup_steps, decode_steps, prefill_repeats)
    real = RealRun(
        spec_full.id,
        batch,
        prompt_tokens,
        context,
        statistics.median(prefill_used),
        statistics.median(decode_used),
        spec.num_layers,
        spec_full.num_layers if plan.scaled else None,
        f"{backend_label}, attention {attention_ran}, {dtype}, {getattr(clock, 'name', 'clock')}",
        _iqr(prefill_used),
        _iqr(decode_used),
        *(
            statistics.median(f) if f and not info.asynchronous else None
            for f in (prefill_faults, decode_faults)
        ),
    )
    counting = Counting(attention=attention)
    if real.prefill_page_faults is not None:
        notes.append(fresh_pages_note(real, spec, dtype, counting))
    result = ValidationResult(
        real,
        spec,
        dtype,
        backend_label,
        attention,
        info.to_dict(),
        threads,
        getattr(clock, "name", type(clock).__name__),
        tuple(prefill_s),
        tuple(decode_s),
        plan,
        counting,
        telemetry,
        {},
        tuple(notes),
        build_s,
        real_model=describe_real_model(
            spec, asked, chosen, backend_label, attention_ran, attention
        ),
    )
    tick("done")
    if host is not None:
        result = dataclasses.replace(result, host_noise=host.noise())
    if estimators:
        return predict_validated(result, estimators)
    return _with_noise_notes(result)


def predict_validated(
    result: ValidationResult, estimators: Mapping[str, Estimator]
) -> ValidationResult:
    """``result`` with each estimator's prediction of exactly what ran (:func:`predict_for`).

    On a device that runs kernels on the calling thread (a CPU) each ``measured`` estimator
    first gets the framework overhead of the model class that ran
    (:func:`with_framework_overhead`, stated in the warnings and under
    ``framework_overhead``). When the host's drift is being followed (``host_noise``), the
    reference kernel is timed once more after the predictions (the profile), and each
    residual within the host's own noise is named in the warnings.
    """
    if not result.device.get("asynchronous", False):
        backend = result.real_model.backend if result.real_model else "torch"
        estimators = with_framework_overhead(estimators, result.model, backend, result.attention)
        counted = [e.framework for e in estimators.values() if getattr(e, "framework", None)]
        if counted:
            result = dataclasses.replace(
                result,
                framework_overhead=counted[0],
                warnings=(*result.warnings, counted[0].describe()),
            )
    result = result.with_predictions(predict_for(result, estimators))
    if result.host_noise is not None:
        check = HostProbe(share=Contention).check("after the profile")
        result = dataclasses.replace(
            result, host_noise=HostNoise((*result.host_noise.checks, check))
        )
    return _with_noise_notes(result)


def _with_noise_notes(result: ValidationResult) -> ValidationResult:
    """``result`` stating the host's drift and each residual within its noise (replacing what
    an earlier call stated)."""
    if result.host_noise is None:
        return result
    kept = [w for w in result.warnings if not _is_noise_note(w)]
    notes = (result.host_noise.describe(), *result.noise_notes())
    return dataclasses.replace(result, warnings=(*kept, *notes))


def _is_noise_note(text: str) -> bool:
    return text.startswith("host drift ") or "is within the host's own noise" in text


def with_framework_overhead(
    estimators: Mapping[str, Estimator],
    spec: ModelSpec,
    backend: str,
    attention: str,
) -> dict[str, Estimator]:
    """``estimators`` with the real model class's framework overhead counted by each
    ``measured`` estimator that counts launch overhead
    (:func:`~roofprof.validation.framework_overhead.count_framework_overhead`: measured now,
    beside the real run, and kept in the cache for ``predict``); a model the probe does not
    cover keeps them as they are, and their warnings say so. An estimator that counts one
    already (``run`` counts the class it validates in its predictions step) keeps it."""
    out = dict(estimators)
    for k, est in estimators.items():
        if isinstance(est, MeasuredEstimator) and est.include_launch and est.framework is None:
            out[k] = count_framework_overhead(
                est, spec, backend, attention=attention, use_cache=False
            )
    return out


def fresh_pages_note(real: RealRun, spec: ModelSpec, dtype: str, counting: Counting) -> str:
    """What the real prefill first-touched per pass (its minor page faults) beside what the
    CPU profile assumes (every non-GEMM output of 1 MiB or more in fresh pages): how much of
    the pass's memory the allocator handed back to the OS, which decides whether the
    elementwise ops ran at their fresh-page or their warm time; with the cost of a fresh
    page measured now (:func:`~roofprof.devices.pool.first_touch_seconds_per_page`), what
    each is worth in milliseconds."""
    import resource

    from roofprof.devices.pool import first_touch_seconds_per_page
    from roofprof.models import ops
    from roofprof.models.llama_torch import torch_dtype
    from roofprof.profiling.torch_ops import fresh_page_bytes

    scenario = Scenario.of(
        spec,
        "prefill",
        batch=real.batch,
        prompt_tokens=real.prompt_tokens,
        dtype=dtype,
        convention=counting,
        stored_weights=False,
    )
    assumed = fresh_page_bytes(ops(scenario).ops, torch_dtype(dtype).itemsize)
    page = resource.getpagesize()
    touched = (real.prefill_page_faults or 0.0) * page
    per_page = first_touch_seconds_per_page()
    cost = (
        f" (at {per_page * 1e6:.1f} µs per fresh page, measured now: about "
        f"{assumed / page * per_page * 1e3:.0f} ms of the predicted prefill against "
        f"{touched / page * per_page * 1e3:.0f} ms in the real one)"
        if per_page
        else ""
    )
    return (
        f"the real prefill first-touched {touched / 2**20:.1f} MiB per pass "
        f"({real.prefill_page_faults:,.0f} minor page faults, median); the profile times "
        f"{assumed / 2**20:.1f} MiB of non-GEMM outputs per pass in fresh pages{cost}"
    )


def _attention_run(net, attention: str) -> str:
    """The attention the real model ran: ``sdpa`` or ``eager`` (Gemma 2 runs eager whatever was
    asked)."""
    ran = getattr(getattr(net, "config", None), "_attn_implementation", None)
    if ran is None:
        ran = "sdpa" if getattr(net, "attention", attention) == "fused" else "eager"
    return str(ran)


def validation_context(
    prompt_tokens: int, warmup_steps: int = 2, decode_steps: int = 8, prefill_repeats: int = 3
) -> int:
    """Cached tokens at the median timed decode step of :func:`validate` (what predictions use).

    Each repetition prefills ``prompt_tokens``, takes ``warmup_steps`` untimed steps, then
    ``ceil(decode_steps / prefill_repeats)`` timed ones.

    >>> validation_context(128, 2, 8, 3)
    131
    """
    per_rep = -(-decode_steps // prefill_repeats)
    return prompt_tokens + warmup_steps + per_rep // 2


def predict_for(
    result: ValidationResult, estimators: Mapping[str, Estimator]
) -> dict[str, Prediction]:
    """Each estimator's prediction for exactly what ``result`` ran (model as scaled, shapes,
    context)."""
    scenario = result.real.scenario(result.model, result.dtype, result.counting)
    out = {}
    for label, est in estimators.items():
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            out[label] = predict(scenario, estimator=est)
    return out


def _clean_count(shares: list[float]) -> int:
    return sum(1 for x in shares if x <= CONTENDED_SHARE)


def _uncontended(samples: list[float], shares: list[float], keep: int) -> tuple[list[float], str]:
    """The samples taken while no other process used the CPUs (if at least ``keep``), and a note.

    >>> _uncontended([1.0, 5.0, 1.1], [0.0, 0.6, 0.05], 1)
    ([1.0, 1.1], '1 of 3 samples dropped: other processes used the CPUs meanwhile (up to 60%)')
    """
    clean = [x for x, sh in zip(samples, shares, strict=False) if sh <= CONTENDED_SHARE]
    if len(clean) == len(samples):
        return samples, ""
    worst = max(shares, default=0.0)
    if len(clean) >= keep:
        return clean, (
            f"{len(samples) - len(clean)} of {len(samples)} samples dropped: other processes used "
            f"the CPUs meanwhile (up to {worst:.0%})"
        )
    return samples, (
        f"machine busy: other processes used up to {worst:.0%} of the CPUs during the real run; "
        "its timings are inflated"
    )


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return float(q[2] - q[0])


def _version(pkg: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "?"
