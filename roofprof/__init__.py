"""roofprof: how fast can this machine run this LLM, and what limits it?

The public facade is small: specs and workloads in, predictions and measurements out.

* :func:`predict`, :func:`sweep`: prefill and decode times from a roofline (:mod:`roofprof.api`);
* :func:`profile`: every op of a pass measured on this machine (:mod:`roofprof.profiling`);
* :func:`measure`: any function timed and placed on the roofline (:mod:`roofprof.profiling`);
* :func:`validate`: a real model forward pass against the estimators (:mod:`roofprof.validation`);
* :func:`trace`: any PyTorch code's ops costed, timed and placed (:mod:`roofprof.tracing`).

>>> import roofprof
>>> p = roofprof.predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
>>> round(p.tokens_per_second)
219
"""

from __future__ import annotations

__version__ = "0.1.0"

from roofprof.errors import RoofprofError  # noqa: E402

__all__ = [
    "RoofprofError",
    "__version__",
    "measure",
    "predict",
    "profile",
    "sweep",
    "trace",
    "validate",
]

#: Facade name -> the module that defines it (imported on first use: `import roofprof` stays
#: cheap, no numba or pandas, so `predict` stays fast).
_LAZY = {
    "predict": "roofprof.api",
    "sweep": "roofprof.api",
    "profile": "roofprof.profiling",
    "measure": "roofprof.profiling",
    "validate": "roofprof.validation",
    "trace": "roofprof.tracing",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roofprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
