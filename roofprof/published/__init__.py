"""Published real measurements: the cited corpus, rooflines from its ceilings, and every
prediction held against it.

* :mod:`roofprof.published.corpus`: ``data/published/`` as records
  (:func:`load_end_to_end`, :func:`load_microbenchmarks`, :func:`published_roofline`);
* :mod:`roofprof.published.compare`: the rows as prediction cases (:func:`cases`), each
  estimator's prediction and residual, the summary (:func:`validate_published`).

>>> published_roofline("a100").memory_ceiling().value
1700000000000.0
"""

from __future__ import annotations

from roofprof.published.compare import (
    ESTIMATORS,
    Case,
    PublishedValidation,
    Skipped,
    case_seconds,
    cases,
    summarize,
    validate_published,
)
from roofprof.published.corpus import (
    CeilingRecord,
    PublishedRow,
    ceiling_gpus,
    load_end_to_end,
    load_microbenchmarks,
    published_roofline,
    published_sources,
)

__all__ = [
    "ESTIMATORS",
    "Case",
    "CeilingRecord",
    "PublishedRow",
    "PublishedValidation",
    "Skipped",
    "case_seconds",
    "cases",
    "ceiling_gpus",
    "load_end_to_end",
    "load_microbenchmarks",
    "published_roofline",
    "published_sources",
    "summarize",
    "validate_published",
]
