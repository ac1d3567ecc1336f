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
    if name in ("profile", "validate"):
        # The modules roofprof.profile / roofprof.validate are callable: roofprof.profile(...)
        # runs roofprof.profile.profile(...), whichever of the two Python resolves.
        import importlib

        return importlib.import_module(f"roofprof.{name}")
    if name == "measure":
        from roofprof.profile import measure

        return measure
    raise AttributeError(f"module 'roofprof' has no attribute {name!r}")
