"""Device time of each traced op call from the profiler's kernel intervals (the GPU path).

On an asynchronous device (a GPU) every recorded op call runs inside a host range named
``roofprof#<n>`` (:data:`CALL_PREFIX`), the measured window inside ``roofprof.window``
ranges and the tracer's own bookkeeping inside ``roofprof.tracer``. torch's profiler
(Kineto/CUPTI) links each kernel to the host op that launched it (the kernel's
``linked_correlation_id`` is that op's correlation id, the ``External id`` of a Chrome
trace); the op lies inside exactly one ``roofprof#<n>`` range on its thread. So:

* call ``n``'s device time is the **union** of its kernels' intervals (several kernels of
  one op, e.g. split-K GEMMs or SDPA's auxiliaries, may overlap on different streams);
* a kernel launched in the window by no recorded op (a fused kernel of ``torch.compile``,
  a raw Triton launch, NCCL, a memcpy) is **kept** as a kernel-level row, time only;
* kernels launched outside the window or by the tracer itself are not counted.

The profiler is behind a small protocol, :class:`KernelProfiler` (``range(name)``,
``__enter__/__exit__``, ``events()``): :class:`TorchKernelProfiler` is torch's; tests use
a fake one that emits :class:`HostEvent`/:class:`KernelEvent` records (fake events and
clock, never fake kernels).

>>> host = [HostEvent(1, "roofprof.window", 0, 100), HostEvent(2, "roofprof#0", 10, 20),
...         HostEvent(3, "aten::mm", 11, 19)]
>>> kernels = [KernelEvent("gemm", 30, 40, 3), KernelEvent("gemm_tail", 35, 45, 3),
...            KernelEvent("triton_fused", 50, 60, 0, launched_ns=60)]
>>> j = join_kernels(host, kernels)
>>> j.call_s, [(k.name, k.count, k.time_s) for k in j.unattributed]
({0: 1.5e-08}, [('triton_fused', 1, 1e-08)])
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "CALL_PREFIX",
    "TRACER_RANGE",
    "WINDOW_RANGE",
    "HostEvent",
    "KernelEvent",
    "KernelJoin",
    "KernelProfiler",
    "KernelRow",
    "TorchKernelProfiler",
    "join_kernels",
    "split_kineto",
    "union_s",
]

#: host range around each recorded op call: ``roofprof#<n>``
CALL_PREFIX = "roofprof#"
#: host range around each stretch of the measured window
WINDOW_RANGE = "roofprof.window"
#: host range around the tracer's own work (its kernels are not the traced code's)
TRACER_RANGE = "roofprof.tracer"


@dataclass(frozen=True)
class HostEvent:
    """A host (CPU) range or op: ``id`` (its correlation id, the Chrome trace's
    ``External id``), ``name``, ``start_ns``/``end_ns`` and ``thread``."""

    id: int
    name: str
    start_ns: int
    end_ns: int
    thread: int = 0


@dataclass(frozen=True)
class KernelEvent:
    """A device interval (kernel, memcpy, memset): ``name``, ``start_ns``/``end_ns`` on the
    device, ``op_id`` (the correlation id of the host op that launched it; 0: none) and
    ``launched_ns`` (host time of the launch when known, for kernels of no op)."""

    name: str
    start_ns: int
    end_ns: int
    op_id: int = 0
    launched_ns: int | None = None


@dataclass(frozen=True)
class KernelRow:
    """Kernels of one name that no recorded op launched: ``count`` and device ``time_s``."""

    name: str
    count: int
    time_s: float


@dataclass(frozen=True)
class KernelJoin:
    """The join: ``call_s`` (device seconds per call ``n``), ``unattributed`` (kernel-level
    rows, slowest first) and ``kernels`` (how many kernels were joined to a call)."""

    call_s: dict[int, float]
    unattributed: tuple[KernelRow, ...]
    kernels: int


def union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start_ns, end_ns)`` intervals.

    >>> union_s([(0, 10), (5, 20), (30, 40)])
    3e-08
    """
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e9


class _Ranges:
    """Non-overlapping host ranges per thread, looked up by time."""

    def __init__(self, events: Iterable[HostEvent]):
        self.by_thread: dict[int, tuple[list[int], list[HostEvent]]] = {}
        for e in sorted(events, key=lambda e: e.start_ns):
            starts, evs = self.by_thread.setdefault(e.thread, ([], []))
            starts.append(e.start_ns)
            evs.append(e)

    def find(self, t_ns: int, thread: int | None = None) -> HostEvent | None:
        threads = [thread] if thread is not None else list(self.by_thread)
        for th in threads:
            starts, evs = self.by_thread.get(th, ([], []))
            i = bisect.bisect_right(starts, t_ns) - 1
            if i >= 0 and evs[i].start_ns <= t_ns <= evs[i].end_ns:
                return evs[i]
        return None


def _call_number(name: str) -> int | None:
    if not name.startswith(CALL_PREFIX):
        return None
    try:
        return int(name[len(CALL_PREFIX) :])
    except ValueError:
        return None


def join_kernels(host: Sequence[HostEvent], kernels: Sequence[KernelEvent]) -> KernelJoin:
    """Join device intervals to the recorded calls (see the module doc).

    A kernel belongs to call ``n`` when the host op that launched it (``op_id``) lies in
    the range ``roofprof#<n>`` (or is that range). Other kernels count as unattributed
    when their launch (the launching op's start, else ``launched_ns``, else the kernel's
    own start) lies in a ``roofprof.window`` range (on any thread: autograd's device
    threads, data loaders) and not in a ``roofprof.tracer`` range of the launching thread.
    """
    by_id = {e.id: e for e in host}
    calls = _Ranges(e for e in host if _call_number(e.name) is not None)
    windows = _Ranges(e for e in host if e.name == WINDOW_RANGE)
    tracer = _Ranges(e for e in host if e.name == TRACER_RANGE)
    per_call: dict[int, list[tuple[int, int]]] = {}
    loose: dict[str, list[tuple[int, int]]] = {}
    joined = 0
    for k in kernels:
        op = by_id.get(k.op_id) if k.op_id else None
        rng = None
        if op is not None:
            rng = op if _call_number(op.name) is not None else calls.find(op.start_ns, op.thread)
        if rng is not None:
            per_call.setdefault(_call_number(rng.name), []).append((k.start_ns, k.end_ns))  # type: ignore[arg-type]
            joined += 1
            continue
        at, thread = (
            (op.start_ns, op.thread)
            if op is not None
            else (k.launched_ns if k.launched_ns is not None else k.start_ns, None)
        )
        if windows.find(at) is None or tracer.find(at, thread) is not None:  # window: any thread
            continue
        loose.setdefault(k.name, []).append((k.start_ns, k.end_ns))
    rows = sorted(
        (KernelRow(name, len(iv), union_s(iv)) for name, iv in loose.items()),
        key=lambda r: -r.time_s,
    )
    return KernelJoin({n: union_s(iv) for n, iv in per_call.items()}, tuple(rows), joined)


class KernelProfiler(Protocol):
    """What the tracer needs of a device profiler (torch's, or a fake in tests)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...

    def range(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A host range named ``name`` around the ``with`` block."""
        ...

    def events(self) -> tuple[list[HostEvent], list[KernelEvent]]:
        """The host events and device intervals recorded (after ``__exit__``)."""
        ...


class TorchKernelProfiler:
    """torch's profiler (CPU + CUDA activities) as a :class:`KernelProfiler`: host ranges
    are ``torch.profiler.record_function``; events come from the Kineto results (kernel →
    launching op through ``linked_correlation_id``, exactly as torch's own
    ``FunctionEvent.kernels``). GPU-side copies of user annotations are not kernels."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        )

    def __enter__(self) -> TorchKernelProfiler:
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._prof.__exit__(*exc)

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        with self._torch.profiler.record_function(name):
            yield

    def events(self) -> tuple[list[HostEvent], list[KernelEvent]]:
        return split_kineto(
            self._prof.profiler.kineto_results.events(), self._torch.autograd.DeviceType.CPU
        )


def split_kineto(events: Iterable[Any], cpu: Any) -> tuple[list[HostEvent], list[KernelEvent]]:
    """Host ops and device intervals of torch's ``_KinetoEvent`` records, by torch's own
    rule (``torch.autograd.profiler``'s ``_parse_kineto_results``): a CPU event is a host
    op or range only when its ``linked_correlation_id()`` is 0 (a runtime launch such as
    ``cudaLaunchKernel`` links to its op and lives in another id space); a device event
    that is not a user annotation is an interval, linked to its op by
    ``linked_correlation_id()``. Works whether or not the torch version has
    ``activity_type()`` (2.11 has none); where it has, device activities other than
    kernels, copies and sets are left out.

    >>> split_kineto([], cpu="CPU")
    ([], [])
    """
    host: list[HostEvent] = []
    kernels: list[KernelEvent] = []
    for e in events:
        if e.device_type() == cpu:
            if e.linked_correlation_id() == 0:
                host.append(
                    HostEvent(
                        e.correlation_id(), e.name(), e.start_ns(), e.end_ns(), e.start_thread_id()
                    )
                )
            continue
        activity = str(e.activity_type()) if hasattr(e, "activity_type") else ""
        activity = activity.split(".")[-1].lower()
        if (not activity or activity in _DEVICE_ACTIVITIES) and not e.is_user_annotation():
            kernels.append(
                KernelEvent(e.name(), e.start_ns(), e.end_ns(), e.linked_correlation_id())
            )
    return host, kernels


#: Kineto activity types of device intervals that take time
_DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel")
