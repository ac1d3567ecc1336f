"""roofprof: how fast can this machine run this LLM, and what limits it?

The public facade is small: specs and workloads in, predictions and measurements out.

* :func:`run`: the main job, doctor to HTML report (a :class:`RunPlan`, :mod:`roofprof.job`);
* :func:`predict`, :func:`sweep`: prefill and decode times from a roofline (:mod:`roofprof.api`);
* :func:`compare_gpus`: the same scenario on several datasheet GPUs, with ratios to the first;
* :func:`profile`: every op of a pass measured on this machine (a :class:`Profiler`);
* :func:`measure`: any function timed and placed on the roofline;
* :func:`measure_roofline`: a device's empirical roofline from its probes;
* :func:`validate`: a real model forward pass against the estimators;
* :func:`trace`: any PyTorch code's ops costed, timed and placed (:mod:`roofprof.tracing`);
* :func:`endpoint`: a live OpenAI-compatible server measured and placed (:mod:`roofprof.endpoint`);
* the vocabulary: :class:`Scenario`, :func:`load_model`, :func:`load_gpu`, :class:`Roofline`.

Loose arguments (a model id, sizes) are accepted here; the functions below take a
:class:`Scenario` (``roofprof.prediction.rollup.predict``, ``Profiler.profile``,
``roofprof.validation.model_run.validate``, ``roofprof.job.run``).

>>> import roofprof
>>> p = roofprof.predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
>>> round(p.tokens_per_second)
219
"""

from __future__ import annotations

__version__ = "0.1.0"

from roofprof.errors import RoofprofError  # noqa: E402

__all__ = [
    "Profiler",
    "ProfileSettings",
    "Roofline",
    "RoofprofError",
    "RunPlan",
    "Scenario",
    "ValidationSettings",
    "__version__",
    "compare_gpus",
    "endpoint",
    "load_gpu",
    "load_model",
    "measure",
    "measure_roofline",
    "predict",
    "profile",
    "run",
    "sweep",
    "trace",
    "validate",
]

#: Facade name -> the module that defines it (imported on first use: `import roofprof` stays
#: cheap, no numba or pandas, so `predict` stays fast).
_LAZY = {
    "predict": "roofprof.api",
    "sweep": "roofprof.api",
    "compare_gpus": "roofprof.api",
    "profile": "roofprof.api",
    "run": "roofprof.api",
    "RunPlan": "roofprof.job",
    "Profiler": "roofprof.profiling.profiler",
    "ProfileSettings": "roofprof.profiling.profiler",
    "ValidationSettings": "roofprof.validation.model_run",
    "Scenario": "roofprof.workload",
    "load_model": "roofprof.specs",
    "load_gpu": "roofprof.specs",
    "Roofline": "roofprof.roofline",
    "measure_roofline": "roofprof.roofline.probes",
    "measure": "roofprof.profiling.function",
    "validate": "roofprof.api",
    "endpoint": "roofprof.api",
    "trace": "roofprof.tracing",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roofprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
