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
synchronise before reading). The medians form a :class:`~roofprof.rollup.RealRun`.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError, DeviceUnavailableError, UnknownNameError
from roofprof.rollup import Estimator, Prediction, RealRun, compare, predict
from roofprof.specs import BYTES_PER_ELEMENT, ModelSpec
from roofprof.telemetry import CONTENDED_SHARE, Contention
from roofprof.workload import Counting, Scenario

if TYPE_CHECKING:
    from roofprof.devices.base import Device

__all__ = [
    "BACKENDS",
    "MemoryPlan",
    "ValidationResult",
    "build_hf_model",
    "build_torch_model",
    "memory_plan",
    "predict_for",
    "validate",
    "validation_context",
]

Progress = Callable[[str, int, int], None]
BACKENDS = ("auto", "hf", "torch")
TORCH_MISSING = (
    "roofprof validate runs a real model and needs torch: pip install 'roofprof[torch]' "
    "(CPU only: pip install torch==2.13.0 first); transformers is optional: 'roofprof[hf]'"
)


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
            f"scaled from {self.original_layers} to {self.num_layers} layers to fit: the full model needs "
            f"{self.needed_bytes / 1e9:.2f} GB, {self.available_bytes / 1e9:.2f} GB usable; predictions are "
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

    def comparison(self) -> list[dict[str, Any]]:
        """Rows of :func:`roofprof.rollup.compare` (one per estimator, then ``real``)."""
        return compare(self.predictions, self.real)

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
    >>> p = memory_plan(m, "bf16", batch=1, prompt_tokens=128, total_tokens=160, available_bytes=8e9)
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


# --------------------------------------------------------------------------- models


def _scaled(spec: ModelSpec, layers: int) -> ModelSpec:
    if layers == spec.num_layers:
        return spec
    return dataclasses.replace(
        spec, num_layers=layers, id=f"{spec.id} ({layers} of {spec.num_layers} layers)"
    )


def has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _torch_module(spec: ModelSpec):
    """The torch module of ``spec``'s family (:class:`roofprof.models.families.TorchSide`).

    Raises:
        ConfigError: the family has no torch side (predicted only).
    """
    import importlib

    from roofprof.models import require_measurable
    from roofprof.models.families import torch_side

    require_measurable(spec, "validate")
    side = torch_side(spec.family)
    assert side is not None  # require_measurable refused the others
    return side, importlib.import_module(side.module)


def _auto_backend(spec: ModelSpec) -> str:
    """``--backend auto``: transformers when installed, unless the family's torch module sets
    ``AUTO_BACKEND = "torch"`` (its HF class runs another form than the one counted)."""
    _, module = _torch_module(spec)
    return "hf" if getattr(module, "AUTO_BACKEND", "hf") == "hf" and has_transformers() else "torch"


def build_hf_model(spec: ModelSpec, dtype: str, device: str, attention: str):
    """The family's transformers model (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ...) with random
    weights (built on meta, then allocated). A model class without SDPA support (Gemma 2, for
    its soft-capped scores) runs eager attention whatever ``attention`` says."""
    import torch
    import transformers

    from roofprof.models.llama_torch import fill_weights_, torch_dtype

    side, module = _torch_module(spec)
    config_class, model_class = (
        getattr(transformers, side.hf_config_class),
        getattr(transformers, side.hf_class),
    )
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        config = config_class(**module.hf_config(spec))
        fused = attention == "fused" and getattr(model_class, "_supports_sdpa", True)
        config._attn_implementation = "sdpa" if fused else "eager"
        with torch.device("meta"):
            model = model_class(config)
    model = model.to(torch_dtype(dtype))
    model.to_empty(device=device)
    fill_weights_(model)
    with torch.no_grad():
        for (
            name,
            buf,
        ) in model.named_buffers():  # bias buffers (DeepSeek's score correction) start at 0
            if name.endswith("_bias") and buf.is_floating_point():
                buf.zero_()
    if spec.tie_word_embeddings:
        model.tie_weights()
    _restore_buffers(model, config, device)
    return model.eval()


def _restore_buffers(model, config, device: str) -> None:
    """Rebuild what ``to_empty`` emptied besides the weights: RoPE tables (any module with an
    ``*inv_freq`` buffer is built again from the config) and Gemma's embedding scale."""
    import torch

    for parent in model.modules():
        for child_name, child in list(parent.named_children()):
            if any(name.endswith("inv_freq") for name, _ in child.named_buffers(recurse=False)):
                setattr(
                    parent,
                    child_name,
                    type(child)(config=getattr(child, "config", config)).to(device),
                )
            elif hasattr(child, "scalar_embed_scale") and isinstance(
                getattr(child, "embed_scale", None), torch.Tensor
            ):
                with torch.no_grad():
                    child.embed_scale.fill_(child.scalar_embed_scale)


def build_torch_model(spec: ModelSpec, dtype: str, device: str, attention: str):
    """The family's plain-torch model (:mod:`roofprof.models.llama_torch` and its kin), random weights."""
    from roofprof.models.llama_torch import torch_dtype

    _, module = _torch_module(spec)
    return module.build(spec, torch_dtype(dtype), device, attention).eval()


class _Runner:
    """Calls a model the same way whatever the backend: prefill → cache, decode step(cache)."""

    def __init__(self, model, backend: str):
        import inspect

        self.model, self.backend = model, backend
        if backend == "hf":
            params = inspect.signature(model.forward).parameters
            self.cache_kw = "cache" if "cache" in params else "past_key_values"
            self.keep_kw = (
                "logits_to_keep"
                if "logits_to_keep" in params
                else "num_logits_to_keep"
                if "num_logits_to_keep" in params
                else None
            )

    def prefill(self, ids):
        if self.backend == "torch":
            _, module = _torch_module(self.model.spec)
            cache = module.new_cache(self.model.spec)
            return self.model(ids, cache), cache
        kw = {"use_cache": True}
        if self.keep_kw:
            kw[self.keep_kw] = 1
        out = self.model(input_ids=ids, **kw)
        cache = out.get("cache") if "cache" in out else out.get("past_key_values")
        return out.logits, cache

    def step(self, ids, cache):
        if self.backend == "torch":
            return self.model(ids, cache)
        kw = {"use_cache": True, self.cache_kw: cache}
        if self.keep_kw:
            kw[self.keep_kw] = 1
        return self.model(input_ids=ids, **kw).logits


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
            "backend 'hf' needs transformers: pip install 'roofprof[hf]' (or use --backend torch)"
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
    chosen = _auto_backend(spec_full) if backend == "auto" else backend
    with cpu_threads(settings.threads) as count:
        result = _validate(
            dev,
            spec_full,
            dtype,
            chosen,
            count,
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
    spec = _scaled(spec_full, plan.num_layers)
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
    side, module = _torch_module(spec)
    notes.extend(n for n in [getattr(module, "BACKEND_NOTES", {}).get(chosen)] if n)
    backend_label = (
        f"transformers {_version('transformers')} {side.hf_class}"
        if chosen == "hf"
        else f"plain torch ({side.module}.{type(net).__name__})"
    )
    runner = _Runner(net, chosen)
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

    def timed(fn, shares):
        meter = Contention()
        with meter:
            clock.start()
            out = fn()
            elapsed = clock.stop()
        shares.append(meter.share)
        return out, elapsed

    steps_per_rep = -(-decode_steps // prefill_repeats)
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
            (logits, cache), elapsed = timed(lambda: runner.prefill(ids), prefill_share)
            prefill_s.append(elapsed)
            nxt = logits[:, -1:].argmax(-1)
            for i in range(warmup_steps + steps_per_rep):
                tick(
                    f"repetition {rep + 1}/{prefill_repeats}: decode step {i + 1}/{warmup_steps + steps_per_rep}"
                    + (" (warm-up)" if i < warmup_steps else "")
                )
                logits, elapsed = timed(
                    lambda nxt=nxt, cache=cache: runner.step(nxt, cache),
                    decode_share if i >= warmup_steps else [],
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
    )
    counting = Counting(attention=attention)
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
    )
    tick("done")
    if estimators:
        result = result.with_predictions(predict_for(result, estimators))
    return result


def _attention_run(net, attention: str) -> str:
    """The attention the real model ran: ``sdpa`` or ``eager`` (Gemma 2 runs eager whatever was asked)."""
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
    """Each estimator's prediction for exactly what ``result`` ran (model as scaled, shapes, context)."""
    r = result.real
    scenario = Scenario(
        result.model,
        "decode",
        r.batch,
        r.prompt_tokens,
        r.context_tokens,
        result.dtype,
        result.counting,
    )
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
