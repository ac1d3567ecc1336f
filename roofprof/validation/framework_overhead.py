"""Measure the framework overhead of a real model class (host time outside the counted ops).

:func:`measure_framework_overhead` builds the family's real model (transformers' class, or
roofprof's plain-torch form) at a tiny width (hidden 64, 4 heads, vocabulary 256: each
kernel takes microseconds) with 1 and with 5 decoder layers, and times a prefill and a
decode step of each on the calling thread's CPU clock (``time.thread_time``: time other
processes take from this thread does not count, so a shared machine does not inflate it).
It times the op list of the same tiny models op by op as the profiler does
(:class:`~roofprof.profiling.torch_ops.TorchOps`, each op alone, its dispatch included).
What the real model takes beyond its op list is the framework overhead:

* per layer: ``(real(5) - real(1) - (ops(5) - ops(1))) / 4``;
* per pass: ``real(1) - ops(1) -`` the per-layer value.

Each time is the fastest over all repetitions (the noise of a shared machine only ever
adds time); the values are clamped at 0 and returned as a
:class:`~roofprof.prediction.framework.FrameworkOverhead`; the ``measured`` estimator adds
them to each pass (:meth:`~roofprof.prediction.estimators.MeasuredEstimator.with_framework`).
On a device that runs kernels asynchronously (a GPU) the host overlaps the kernels and the
overhead is not added (``validate`` does not measure it there).

:func:`cached_framework_overhead` keeps each measurement in ``$ROOFPROF_CACHE``
(``framework-<key>.json``), keyed by what it depends on: the tiny model's structure, the
class and attention path, the CPU and its threads, and the torch/transformers versions; so
``predict --estimator measured``, ``run`` and ``validate`` measure a class once, not on
every run. :func:`count_framework_overhead` is what each of them calls: an estimator with the
overhead counted, its reuse or its absence stated in the estimator's warnings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError, RoofprofError
from roofprof.prediction.framework import FrameworkOverhead
from roofprof.specs import ModelSpec
from roofprof.validation.real_model import (
    Runner,
    auto_backend,
    build_hf_model,
    build_torch_model,
)

__all__ = [
    "PROBE_LAYERS",
    "cached_framework_overhead",
    "count_framework_overhead",
    "framework_cache_path",
    "measure_framework_overhead",
    "overhead_from_times",
    "tiny_model",
]

#: the two depths the probe builds (their difference is four decoder layers)
PROBE_LAYERS = (1, 5)
METHOD = (
    "measured on this model class at hidden 64 with 1 and 5 layers, CPU time of the calling "
    "thread, minus its op list timed op by op"
)


def tiny_model(spec: ModelSpec, layers: int) -> ModelSpec:
    """``spec``'s family and features at a width where every kernel takes microseconds (its
    query/KV head ratio kept).

    Raises:
        ConfigError: a routed-experts or latent-attention model (its tiny form would change
            what its layers run).

    >>> from roofprof.specs import load_model
    >>> t = tiny_model(load_model("llama-3.2-1b"), 3)
    >>> t.hidden_size, t.num_heads, t.num_kv_heads, t.num_layers, t.family
    (64, 4, 1, 3, 'llama')
    """
    if spec.moe is not None or spec.mla is not None:
        raise ConfigError(
            f"{spec.id}: the framework-overhead probe covers dense models only (this one routes "
            "experts or uses latent attention)"
        )
    rep = max(1, spec.num_heads // max(spec.num_kv_heads, 1))
    heads = rep * max(1, 4 // rep) if rep < 4 else rep
    return dataclasses.replace(
        spec,
        id=f"{spec.id} (framework probe, {layers} layers)",
        hidden_size=64,
        intermediate_size=128,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads // rep,
        head_dim=16,
        vocab_size=256,
        stored=None,
    )


def overhead_from_times(
    real: dict[int, float], ops: dict[int, float], layers: tuple[int, int] = PROBE_LAYERS
) -> tuple[float, float]:
    """``(per layer, per pass)`` seconds from the real passes' and op lists' times at the two
    depths (``layers``), each clamped at 0.

    >>> overhead_from_times({1: 5e-4, 3: 1.1e-3}, {1: 2e-4, 3: 4e-4}, (1, 3))
    (0.0002, 0.0001)
    """
    lo, hi = layers
    per_layer = ((real[hi] - real[lo]) - (ops[hi] - ops[lo])) / (hi - lo)
    per_layer = max(0.0, per_layer)
    per_pass = max(0.0, real[lo] - ops[lo] - lo * per_layer)
    return round(per_layer, 12), round(per_pass, 12)


def measure_framework_overhead(
    spec: ModelSpec,
    backend: str,
    *,
    attention: str = "fused",
    repeats: int = 5,
    calls: int = 7,
    prompt_tokens: int = 8,
    clock: Callable[[], float] = time.thread_time,
    timer: Callable[[str, int], dict[str, dict[int, float]]] | None = None,
) -> FrameworkOverhead:
    """The framework overhead of ``spec``'s real model class (``backend`` ``hf`` or ``torch``)
    in fp32 on the CPU: see the module docstring. Each repetition times every real pass and
    every op (``calls`` calls each, their fastest kept: the noise of a shared machine only
    ever adds time). ``timer(phase, repetition)`` replaces the timing (tests); it returns
    ``{"real"|"ops": {layers: seconds}}``.

    Raises:
        ConfigError: a model the probe does not cover (:func:`tiny_model`).
    """
    import torch

    name = "plain torch" if backend == "torch" else "transformers"
    if timer is None:
        probe = _Probe(spec, backend, attention, prompt_tokens, calls, clock)
        timer, name = probe.time, probe.name
    phases = ("prefill", "decode")
    layer: dict[str, list[float]] = {p: [] for p in phases}
    best: dict[tuple[str, str], dict[int, float]] = {}
    with torch.inference_mode():
        for r in range(repeats):
            for phase in phases:
                t = timer(phase, r)
                layer[phase].append(overhead_from_times(t["real"], t["ops"])[0])
                for what in ("real", "ops"):
                    seen = best.setdefault((phase, what), {})
                    for n, sec in t[what].items():
                        seen[n] = min(seen.get(n, float("inf")), sec)
    overhead = {p: overhead_from_times(best[(p, "real")], best[(p, "ops")]) for p in phases}
    return FrameworkOverhead(
        {p: v[0] for p, v in overhead.items()},
        {p: v[1] for p, v in overhead.items()},
        name,
        METHOD,
        {p: tuple(v) for p, v in layer.items()},
    )


#: Bumped when the probe's method changes, so older cached overheads are not reused.
CACHE_METHOD = 1


def framework_cache_path(
    spec: ModelSpec, backend: str, attention: str = "fused", folder: Path | None = None
) -> Path:
    """The cache file of ``spec``'s framework overhead: one per tiny-model structure, class,
    attention path, CPU, thread count and torch/transformers versions.

    >>> from roofprof.specs import load_model
    >>> framework_cache_path(load_model("llama-3.2-1b"), "hf", folder=Path("c")).parent
    PosixPath('c')
    """
    import torch

    from roofprof._resources import cache_root
    from roofprof.devices.cpu import cpu_info
    from roofprof.results import library_versions

    tiny = dataclasses.asdict(tiny_model(spec, 1))
    tiny.pop("id", None)
    libs = library_versions()
    key = json.dumps(
        [
            tiny,
            backend,
            attention,
            cpu_info().name,
            torch.get_num_threads(),
            {k: libs.get(k) for k in ("torch", "transformers", "numpy")},
            CACHE_METHOD,
        ],
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return (folder or cache_root()) / f"framework-{digest}.json"


def cached_framework_overhead(
    spec: ModelSpec,
    backend: str,
    *,
    attention: str = "fused",
    use_cache: bool = True,
    folder: Path | None = None,
    measure: Callable[..., FrameworkOverhead] | None = None,
) -> tuple[FrameworkOverhead, str | None]:
    """``spec``'s framework overhead (:func:`measure_framework_overhead`), from the cache when
    it holds one for the same key (:func:`framework_cache_path`), else measured now and
    stored (best effort: an unwritable cache only costs time). Returns the overhead and,
    when it came from the cache, the UTC time it was measured (else ``None``).
    ``use_cache=False`` measures afresh and replaces the entry; ``measure`` replaces the
    measurement (tests).

    Raises:
        ConfigError: a model the probe does not cover (:func:`tiny_model`).
    """
    path = framework_cache_path(spec, backend, attention, folder)
    if use_cache:
        try:
            d = json.loads(path.read_text())
            fw = FrameworkOverhead.from_dict(d)
            return fw, str(d.get("measured_at") or "an earlier run")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # none, or unreadable: measured below
    fw = (measure or measure_framework_overhead)(spec, backend, attention=attention)
    try:
        from roofprof.results import write_json_atomic

        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json_atomic(path, {**fw.to_dict(), "measured_at": stamp})
    except OSError:
        pass
    return fw, None


def count_framework_overhead(
    estimator: Any,
    spec: ModelSpec,
    backend: str,
    *,
    attention: str = "fused",
    use_cache: bool = True,
) -> Any:
    """``estimator`` (a measured estimator counting launch overhead) with the framework
    overhead of ``spec``'s real model class counted (:func:`cached_framework_overhead`:
    reused from the cache when measured before, stated in its warnings with the time it was
    measured; ``use_cache=False`` measures it again). ``backend``: ``hf``, ``torch`` or
    ``auto`` (the class ``validate`` would run: transformers' when installed). A model the
    probe does not cover, a class whose library is missing or that torch cannot build here
    keeps ``estimator`` as it is, with a warning saying why: never an error.

    Example::

        est = count_framework_overhead(est, load_model("llama-3.2-1b"), "hf")
        est.framework.layer_s["decode"]  # seconds per decoder layer
    """
    try:
        if backend == "auto":
            backend = auto_backend(spec)
        fw, cached_at = cached_framework_overhead(
            spec, backend, attention=attention, use_cache=use_cache
        )
    # RoofprofError: a model the probe does not cover; ImportError: the class's library is
    # missing; RuntimeError: torch could not build or run the tiny class here
    except (RoofprofError, ImportError, RuntimeError) as exc:
        note = f"framework overhead not counted: {exc}"
        if note not in estimator.warnings:
            estimator.warnings.append(note)
        return estimator
    counted = estimator.with_framework(fw)
    if cached_at is not None:
        note = (
            f"framework overhead of {fw.model} reused from the cache (measured {cached_at}; "
            "--remeasure measures it again)"
        )
        if note not in counted.warnings:
            counted.warnings.append(note)
    return counted


class _Probe:
    """The tiny real models and their op lists, prepared once, timed per repetition."""

    def __init__(self, spec, backend, attention, prompt_tokens, calls, clock):
        import numpy as np
        import torch

        from roofprof.models import ops as model_ops
        from roofprof.profiling.torch_ops import TorchOps
        from roofprof.workload import Scenario

        build = build_hf_model if backend == "hf" else build_torch_model
        self.calls, self.clock = calls, clock
        self.ids = torch.randint(
            0, 256, (1, prompt_tokens), generator=torch.Generator().manual_seed(0)
        )
        self.nxt = torch.tensor([[1]])
        self.runners, self.ops = {}, {}
        for n in PROBE_LAYERS:
            tiny = tiny_model(spec, n)
            self.runners[n] = Runner(build(tiny, "fp32", "cpu", attention), backend)
            impl = TorchOps(tiny, "cpu")
            for phase in ("prefill", "decode"):
                scenario = Scenario.of(
                    tiny,
                    phase,
                    prompt_tokens=prompt_tokens,
                    context_tokens=prompt_tokens,
                    dtype="fp32",
                )
                self.ops[(n, phase)] = [
                    (impl.prepare(op, np.random.default_rng(0)), op.count)
                    for op in model_ops(scenario).ops
                ]
        model = self.runners[PROBE_LAYERS[0]].model
        self.name = f"transformers {type(model).__name__}" if backend == "hf" else "plain torch"

    def _fastest(self, fn, setup=None) -> float:
        best = float("inf")
        for _ in range(self.calls):
            arg = setup() if setup else None
            t0 = self.clock()
            fn(arg)
            best = min(best, self.clock() - t0)
        return best

    def time(self, phase: str, repetition: int) -> dict[str, dict[int, float]]:
        real, ops = {}, {}
        for n, runner in self.runners.items():
            if phase == "prefill":
                real[n] = self._fastest(lambda _, r=runner: r.prefill(self.ids))
            else:
                real[n] = self._fastest(
                    lambda cache, r=runner: r.step(self.nxt, cache),
                    lambda r=runner: r.prefill(self.ids)[1],
                )
            ops[n] = sum(
                self._fastest(lambda _, p=p: p.run()) * count for p, count in self.ops[(n, phase)]
            )
        return {"real": real, "ops": ops}
