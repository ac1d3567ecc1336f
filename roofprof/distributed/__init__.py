"""Several ranks at once through torch.distributed: collectives, every GPU's roofline, TP runs.

- :mod:`~roofprof.distributed.ranks`: torchrun's rendezvous or N local processes, timeouts,
  one-line failures (:class:`RankError`).
- :mod:`~roofprof.distributed.bench`: collective microbenchmarks (nccl-tests conventions),
  the timer seam, α-β fits.
- :mod:`~roofprof.distributed.interconnect`: ``roofprof collectives`` (measure, write, plot).
- :mod:`~roofprof.distributed.fleet`: ``roofprof roofline --all-ranks`` (the slow-GPU finder).
- :mod:`~roofprof.distributed.tp_model` and :mod:`~roofprof.distributed.tp_validate`:
  ``roofprof validate --tp N``, a real tensor-parallel Llama on N ranks.

torch is imported only by the functions that need it.
"""

from __future__ import annotations

from roofprof.distributed.bench import (
    OPS,
    CollectiveSample,
    fit_alpha_beta,
    log_sizes,
    measure_collectives,
)
from roofprof.distributed.interconnect import (
    InterconnectResult,
    measure_interconnect,
    write_interconnect,
)
from roofprof.distributed.ranks import RankContext, RankError, launch, torchrun_rendezvous

__all__ = [
    "OPS",
    "CollectiveSample",
    "InterconnectResult",
    "RankContext",
    "RankError",
    "fit_alpha_beta",
    "launch",
    "log_sizes",
    "measure_collectives",
    "measure_interconnect",
    "torchrun_rendezvous",
    "write_interconnect",
]
