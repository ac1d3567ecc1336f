"""Any PyTorch code on the roofline: ``with roofprof.trace() as t:`` and ``roofprof trace``.

Every aten op of a window is recorded with its shapes, dtypes and module, costed (FLOPs and
minimum bytes, :mod:`roofprof.tracing.costs`), timed in context and replayed in isolation,
and placed on the machine's measured roofline (:mod:`roofprof.tracing.result`).

>>> import torch, roofprof
>>> with roofprof.trace(device="cpu", roofline="none", replay=False) as t:  # doctest: +SKIP
...     torch.randn(64, 64) @ torch.randn(64, 64)
>>> t.result.summary.flops  # doctest: +SKIP
524288.0

``roofprof.trace`` is the function :func:`trace`; what a traced script or a custom op's
author needs hangs off it (``roofprof.trace.region``, ``roofprof.trace.step``,
``roofprof.trace.register_cost``, ``roofprof.trace.Cost``), so the facade stays a plain
function (this package is ``roofprof.tracing``).
"""

from __future__ import annotations

from typing import Any

from roofprof.tracing.costs import Cost, OpCall, TensorMeta, cost_of, register_cost
from roofprof.tracing.tracer import Tracer, region, step

__all__ = [
    "Cost",
    "OpCall",
    "TensorMeta",
    "Tracer",
    "cost_of",
    "import_trace",
    "region",
    "register_cost",
    "step",
    "trace",
]


def trace(
    device: Any = "auto",
    *,
    roofline: Any = "auto",
    replay: bool = True,
    warmup: int = 0,
    steps: int | None = None,
    cold: bool = False,
    region: str | None = None,
    module_depth: int | None = None,
    replay_budget_s: float = 0.02,
    kernel_profiler: Any = None,
    nvtx_signatures: bool = False,
) -> Tracer:
    """Trace the code in a ``with`` block: every aten op, costed, timed and placed.

    Args:
        device: ``"auto"``, ``"cpu"``, ``"cuda:N"`` or a roofprof Device.
        roofline: ``"auto"`` (cached or quick-measured roofline of the device), ``"spec"``
            (datasheet), ``"none"``, a ``roofline.json`` path or a Roofline.
        replay: replay each unique signature in isolation (``roofprof.timing.benchmark``).
        warmup, steps: steps (marked by ``t.step()``) skipped, then measured (None: all).
        cold: flush the device's caches before every replayed call.
        region: only code inside ``roofprof.trace.region(region)`` counts; each entry a step.
        module_depth: cut module names to this depth in the module table.
        replay_budget_s: timed seconds per replayed signature.
        kernel_profiler: on an asynchronous device (a GPU), the profiler whose kernel
            intervals time each op (default: torch's,
            :class:`~roofprof.tracing.kernels.TorchKernelProfiler`; see
            :class:`~roofprof.tracing.kernels.KernelProfiler`).
        nvtx_signatures: run the first call of each unique signature inside the NVTX range
            ``roofprof.sig_<id>`` and time nothing (the ``--counters`` child under ncu;
            :mod:`roofprof.tracing.counters`).

    Returns:
        The :class:`Tracer`; after the block, ``t.result`` is the
        :class:`~roofprof.tracing.result.TraceResult` (ops, modules, summary, to_dataframe,
        save, plot).

    Raises:
        ConfigError: bad arguments, an unreadable roofline, a region that never occurred.
        DeviceUnavailableError: the device asked for is not usable.
    """
    return Tracer(
        device=device,
        roofline=roofline,
        replay=replay,
        warmup=warmup,
        steps=steps,
        cold=cold,
        region=region,
        module_depth=module_depth,
        replay_budget_s=replay_budget_s,
        kernel_profiler=kernel_profiler,
        nvtx_signatures=nvtx_signatures,
    )


def import_trace(path: Any, **kwargs: Any):
    """A TraceResult from a torch profiler Chrome trace
    (:func:`roofprof.tracing.chrome.import_trace`)."""
    from roofprof.tracing.chrome import import_trace as _import

    return _import(path, **kwargs)


# The facade name is this function: hang the names a traced script needs off it.
trace.region = region  # type: ignore[attr-defined]
trace.step = step  # type: ignore[attr-defined]
trace.register_cost = register_cost  # type: ignore[attr-defined]
trace.Cost = Cost  # type: ignore[attr-defined]
trace.OpCall = OpCall  # type: ignore[attr-defined]
trace.import_trace = import_trace  # type: ignore[attr-defined]
