"""Small GPU ops timed as N back-to-back calls per CUDA-event pair (desk-check item 7).

``cudaEventElapsedTime`` has a resolution of about 0.5 µs (CUDA Runtime API docs), so a
2 µs decode GEMV timed one call per event pair is off by up to 25 %. For an op whose
datasheet estimate (:func:`estimate_s`) is under :data:`SMALL_OP_S`, :class:`SmallOpBatching`
prepares several copies of the op (rotating operands: each call finds its inputs outside
the L2 when the copies together exceed twice the L2) and offers one *batched* call that runs
``calls_per_sample`` of them back to back (``batched_calls``);
:func:`roofprof.devices.base.per_call_timing` divides the samples by that count, so the
engine's timings stay per call.

Example (on a GPU)::

    impl = SmallOpBatching(CupyKernels(dev), dev)
    prepared = impl.prepare(op, rng)     # BatchedPrepared when op is small
    prepared.calls_per_sample            # e.g. 10
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import CheckResult, OpImpl
from roofprof.errors import RoofprofError
from roofprof.workload import Op

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

__all__ = [
    "BATCH_TARGET_S",
    "MAX_CALLS_PER_SAMPLE",
    "SMALL_OP_S",
    "BatchedPrepared",
    "SmallOpBatching",
    "calls_per_sample",
    "estimate_s",
]

#: Ops estimated below this are batched (seconds).
SMALL_OP_S = 20e-6
#: A batched interval lasts about this long (seconds): 40 resolution steps of 0.5 µs.
BATCH_TARGET_S = 20e-6
#: At most this many calls per event pair.
MAX_CALLS_PER_SAMPLE = 64


def estimate_s(device: CudaDevice, op: Op) -> float | None:
    """The op's datasheet time on ``device``: ``max(bytes / memory bandwidth, flops / matmul
    peak of its dtype)`` seconds, or None when the GPU matches no datasheet row."""
    spec = device.spec
    if spec is None:
        return None
    t_mem = float(op.bytes) / float(spec.memory_bytes_per_s) if op.bytes else 0.0
    try:
        peak = float(spec.matmul_peak_flops_per_s(op.dtype))
    except (RoofprofError, KeyError, TypeError):
        peak = 0.0
    t_flop = float(op.flops) / peak if peak and op.flops else 0.0
    return max(t_mem, t_flop)


def calls_per_sample(
    estimate: float | None,
    *,
    small_s: float = SMALL_OP_S,
    target_s: float = BATCH_TARGET_S,
    max_calls: int = MAX_CALLS_PER_SAMPLE,
) -> int:
    """Calls per event pair for an op estimated at ``estimate`` seconds: 1 from ``small_s`` on
    (or when unknown), else ``ceil(target_s / estimate)`` capped at ``max_calls``.

    >>> (calls_per_sample(2e-6), calls_per_sample(30e-6),
    ...  calls_per_sample(None), calls_per_sample(1e-9))
    (10, 1, 1, 64)
    """
    if estimate is None or not math.isfinite(estimate) or estimate >= small_s:
        return 1
    return int(min(max_calls, max(2, math.ceil(round(target_s / max(estimate, 1e-12), 9)))))


class BatchedPrepared:
    """``copies`` prepared instances of one op. ``batched_calls`` is one callable running
    ``calls_per_sample`` of them back to back, rotating through ``calls`` (what the engine
    times, dividing by ``calls_per_sample``); ``calls`` are the copies' single calls, or the
    equivalent calls the one copy already rotates over (a torch op's weight copies) when
    given: what a per-call measurement such as the host issue rate rotates over.

    ``check()`` checks the first copy (the copies run the same code on other buffers),
    ``run()`` is one call, ``release()`` frees every copy; any other attribute is the first
    copy's (a torch op's ``synchronize``, ``op``, ``reduction``)."""

    def __init__(self, copies: list[Any], n: int, calls: list[Callable[[], Any]] | None = None):
        if not copies or n < 1:
            raise ValueError("BatchedPrepared needs at least one copy and n >= 1")
        self.copies, self.calls_per_sample = list(copies), int(n)
        self._turn = 0
        first = self.copies[0]
        self.name = getattr(first, "name", "op")
        self.kernels = getattr(first, "kernels", 1)
        self.calls: list[Callable[[], Any]] = list(calls or [c.run for c in self.copies])
        over = f"{len(self.copies)} operand copies" if calls is None else f"{len(calls)} calls"
        self.note = (
            f"{getattr(first, 'note', '')}; "
            f"{self.calls_per_sample} back-to-back calls per CUDA-event "
            f"pair over {over}, time divided by {self.calls_per_sample}"
        ).lstrip("; ")
        self.batched_calls: list[Callable[[], Any]] = [self._batch]

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__") or item == "copies":
            raise AttributeError(item)
        return getattr(self.copies[0], item)

    def _batch(self) -> None:
        calls, k = self.calls, len(self.calls)
        for _ in range(self.calls_per_sample):
            calls[self._turn % k]()
            self._turn += 1

    def run(self) -> Any:
        return self.copies[0].run()

    def check(self) -> CheckResult:
        return self.copies[0].check()

    def release(self) -> None:
        for c in self.copies:
            c.release()
        self.copies = self.copies[:1]


class SmallOpBatching:
    """An :class:`~roofprof.devices.base.OpImpl` that batches the small ops of ``inner``.

    Ops estimated (:func:`estimate_s`, or ``estimate`` when given) under :data:`SMALL_OP_S`
    are prepared ``copies`` times (enough to cover twice the L2, at most ``calls_per_sample``)
    and returned as a :class:`BatchedPrepared`; an op whose prepared form already rotates over
    several equivalent ``calls`` (``torch-eager``'s weight copies) is prepared once and its
    calls are batched; one with a ``before_call`` (a step that must precede every call) and
    every op that is not small are ``inner.prepare`` unchanged. ``supports`` and every other
    attribute are ``inner``'s (``name`` may be set on the wrapper).
    """

    def __init__(
        self,
        inner: OpImpl,
        device: CudaDevice,
        estimate: Callable[[Op], float | None] | None = None,
    ):
        self.inner, self.device = inner, device
        self.name = inner.name
        self._estimate = estimate or (lambda op: estimate_s(device, op))

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    def supports(self, op: Op) -> str | None:
        return self.inner.supports(op)

    def prepare(self, op: Op, rng: np.random.Generator) -> Any:
        n = calls_per_sample(self._estimate(op))
        if n == 1:
            return self.inner.prepare(op, rng)
        first = self.inner.prepare(op, rng)
        if getattr(first, "before_call", None) is not None:
            return first
        own = list(getattr(first, "calls", None) or ())
        if len(own) > 1:
            return BatchedPrepared([first], n, calls=own)
        l2 = int(getattr(self.device, "l2_bytes", 0) or 0)
        copies = min(n, max(1, math.ceil(2 * l2 / max(float(op.bytes), 1.0)))) if op.bytes else 1
        prepared: list[Any] = []
        try:
            while len(prepared) < copies:
                p = self.inner.prepare(op, rng) if prepared else first
                prepared.append(p)
                bufs = getattr(p, "bufs", None)
                for name in ("x", "w") if hasattr(bufs, "fill_random") else ():
                    bufs.fill_random(
                        name, int(rng.integers(1, 2**31 - 1))
                    )  # finite data in every copy
        except Exception:
            for p in prepared or [first]:
                p.release()
            raise
        return BatchedPrepared(prepared, n)
