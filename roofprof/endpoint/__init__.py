"""``roofprof endpoint``: a live OpenAI-compatible server measured and placed on the roofline.

One module per concept: :mod:`~roofprof.endpoint.client` (streaming HTTP and SSE timing),
:mod:`~roofprof.endpoint.prompts` (exact-length distinct prompts),
:mod:`~roofprof.endpoint.protocol` (warm-up, network floor, load levels),
:mod:`~roofprof.endpoint.metrics` (vLLM-named statistics and their formulas),
:mod:`~roofprof.endpoint.placement` (the same model predicted at the same prompt, context
and batch), :mod:`~roofprof.endpoint.report` and :mod:`~roofprof.endpoint.charts` (JSON,
CSV, table, HTML), :mod:`~roofprof.endpoint.records` (what is kept).

The loose-argument door is ``roofprof.endpoint(url, ...)`` (:func:`roofprof.api.endpoint`).
Once this package is imported, ``roofprof.endpoint`` names it; calling the package calls
that same function, so ``roofprof.endpoint(...)`` works before and after.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__: list[str] = []


class _CallablePackage(types.ModuleType):
    """This package, callable as :func:`roofprof.api.endpoint`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from roofprof.api import endpoint

        return endpoint(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
