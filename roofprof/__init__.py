"""roofprof: how fast can this machine run this LLM, and what limits it?

The public facade is small: specs and workloads in, predictions and measurements out.

>>> import roofprof
>>> p = roofprof.predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
>>> round(p.tokens_per_second)
219
"""

from __future__ import annotations

__version__ = "0.1.0"

from roofprof.errors import RoofprofError  # noqa: E402

__all__ = ["RoofprofError", "__version__", "predict"]


def __getattr__(name: str):
    # Lazy facade: keep `import roofprof` cheap (no numba, no pandas) so `predict` stays fast.
    if name == "predict":
        from roofprof.rollup import predict

        return predict
    raise AttributeError(f"module 'roofprof' has no attribute {name!r}")
