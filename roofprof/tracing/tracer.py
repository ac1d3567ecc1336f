"""Record every aten op of a run: ``with roofprof.trace() as t:`` (the capture half of trace).

A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees each aten op after
decomposition; torch's :class:`~torch.utils.module_tracker.ModuleTracker` says which module
(fully qualified name, forward or backward) called it. Each call is folded into its unique
signature (op, overload, shapes, strides, dtypes, scalar arguments) with a count, the time
in context, the module split and one replayable recipe; the cost model
(:mod:`roofprof.tracing.costs`) runs once per signature.

Time in context: on a synchronous device (a CPU) the op's own duration, read around the
call (the mode's Python overhead is outside the interval); on an asynchronous device
(a GPU) each call runs inside a ``roofprof#<n>`` host range under the device profiler
(torch's, :class:`~roofprof.tracing.kernels.TorchKernelProfiler`) and its kernels'
intervals are joined to it exactly (:func:`~roofprof.tracing.kernels.join_kernels`:
kernel → launching op → range); kernels of no recorded op become kernel-level rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from roofprof.errors import ConfigError
from roofprof.tracing.costs import Cost, OpCall, TensorMeta, cost_of, dtype_name
from roofprof.tracing.kernels import (
    CALL_PREFIX,
    TRACER_RANGE,
    WINDOW_RANGE,
    HostEvent,
    KernelEvent,
    TorchKernelProfiler,
    join_kernels,
)
from roofprof.tracing.recipes import Recipe, map_nested, spec_of

__all__ = ["Recipe", "SignatureStats", "Tracer", "region", "signature_id", "step"]


@dataclass
class SignatureStats:
    """Everything recorded for one unique signature."""

    op: str
    overload: str
    shapes: tuple
    dtypes: tuple
    call: OpCall
    cost: Cost | None
    recipe: Recipe | None
    count: int = 0
    time_s: float = 0.0
    modules: dict[tuple[str, str], list[float]] = field(
        default_factory=dict
    )  # (fqn, phase) -> [n, s]
    kernel_only: bool = False  # a device kernel no recorded op launched (time only)
    key: str = ""  # :func:`signature_id`: the same in every process that runs the same call


def signature_id(func_name: str, args_desc: Any, kwargs_desc: Any) -> str:
    """A short stable id of a call signature (op, shapes, strides, dtypes, scalars): the
    same in two processes running the same code, so a ``--counters`` child's NVTX ranges
    (``roofprof.sig_<id>``) join to the parent's rows.

    >>> signature_id("aten::mm", (((2, 2), (2, 1), "torch.float32"),), ())
    '944931d10558'
    """
    import hashlib

    return hashlib.sha1(repr((func_name, args_desc, kwargs_desc)).encode()).hexdigest()[:12]


def _meta(t: Any) -> TensorMeta:
    try:
        storage = t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - meta, sparse, nested tensors: treated as distinct
        storage = None
    try:
        stride, offset = tuple(t.stride()), int(t.storage_offset())
    except Exception:  # noqa: BLE001
        stride, offset = None, 0
    return TensorMeta(tuple(t.shape), dtype_name(t.dtype), stride, storage, offset)


def _describe(x: Any, torch: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (
            tuple(x.shape),
            tuple(x.stride()) if x.layout == torch.strided else (),
            str(x.dtype),
        )
    if isinstance(x, (list, tuple)):
        return tuple(_describe(v, torch) for v in x)
    if isinstance(x, (int, float, bool, str, type(None))):
        return x
    return (
        type(x).__name__
        if not isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format))
        else str(x)
    )


# -- regions marked inside a script -------------------------------------------------------
_ACTIVE: list[Tracer] = []


class region:  # noqa: N801 - used as a context manager, like torch.profiler.record_function
    """Mark a region ``name`` inside a script run by ``roofprof trace --region NAME``: each
    entry is one step (warm-up steps first, then the measured ones). Outside a trace it does
    nothing, so the script runs unchanged without roofprof.

    >>> with region("step"):
    ...     pass
    """

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> region:
        for t in _ACTIVE:
            t._region_enter(self.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        for t in _ACTIVE:
            t._region_exit(self.name)


def step() -> None:
    """Mark a step boundary from inside a script traced by ``roofprof trace --steps/--warmup``
    (``t.step()`` of every active trace); does nothing outside a trace."""
    for t in list(_ACTIVE):
        t.step()


class Tracer:
    """The context manager behind :func:`roofprof.tracing.trace` (see there for the arguments).

    Steps: the code before the first :meth:`step` is step 0; steps ``warmup`` to
    ``warmup + steps - 1`` are the measured window (all steps from ``warmup`` on when
    ``steps`` is None). With ``region``, only code inside ``roofprof.trace.region(region)``
    counts and each entry is a step.
    """

    def __init__(
        self,
        *,
        device: Any = "auto",
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
    ):
        if warmup < 0 or (steps is not None and steps < 1):
            raise ConfigError(
                f"need warmup >= 0 and steps >= 1, got warmup={warmup}, steps={steps}"
            )
        self.device_spec, self.roofline_spec = device, roofline
        self.replay, self.cold, self.region = replay, cold, region
        self.warmup, self.steps, self.module_depth = warmup, steps, module_depth
        self.replay_budget_s = replay_budget_s
        self.sigs: dict[tuple, SignatureStats] = {}
        self.calls = 0
        self.wall_s = 0.0
        self.region_seen = 0
        self._step = 0
        self._in_region = 0
        self._window_t0: float | None = None
        self._result = None
        self._roofline = None
        self._device = None
        self._async = False
        self._profiler = None
        self._pending: list[tuple[int, SignatureStats, tuple[str, str]]] = []
        self._kernel_profiler = kernel_profiler
        self._window_range: Any = None
        self.nvtx_signatures = nvtx_signatures
        self._nvtx_done: set[str] = set()
        self.kernels_joined = 0

    # -- window --------------------------------------------------------------------------
    def _in_window(self) -> bool:
        if self.region is not None and not self._in_region:
            return False
        return self._step >= self.warmup and (
            self.steps is None or self._step < self.warmup + self.steps
        )

    def _sync_window(self) -> None:
        active = self._in_window()
        if active and self._window_t0 is None:
            self._sync_device()
            if self._profiler is not None:
                self._window_range = self._profiler.range(WINDOW_RANGE)
                self._window_range.__enter__()
            self._window_t0 = time.perf_counter()
        elif not active and self._window_t0 is not None:
            self._close_window()

    def _close_window(self) -> None:
        self._sync_device()
        self.wall_s += time.perf_counter() - self._window_t0
        self._window_t0 = None
        if self._window_range is not None:
            self._window_range.__exit__(None, None, None)
            self._window_range = None

    def _sync_device(self) -> None:
        if self._async and self._device is not None:
            self._device.synchronize()

    def step(self) -> None:
        """Mark the end of a step (like ``torch.profiler.profile.step``)."""
        self._step += 1
        self._sync_window()

    def _region_enter(self, name: str) -> None:
        if name == self.region:
            self._in_region += 1
            self.region_seen += 1
            self._sync_window()

    def _region_exit(self, name: str) -> None:
        if name == self.region:
            self._in_region -= 1
            self._sync_window()
            self._step += 1

    # -- context -------------------------------------------------------------------------
    def __enter__(self) -> Tracer:
        import torch
        from torch.utils.module_tracker import ModuleTracker

        from roofprof.devices import select
        from roofprof.tracing.result import resolve_for

        self._device = (
            select(self.device_spec) if isinstance(self.device_spec, str) else self.device_spec
        )
        self._roofline = resolve_for(
            self._device, self.roofline_spec
        )  # bad input fails before the run
        self._async = bool(self._device.info.asynchronous)
        self._torch_device = self._device.info.torch_device
        if self._async and not self.nvtx_signatures:  # ncu and CUPTI's tracer exclude each other
            self._profiler = self._kernel_profiler or TorchKernelProfiler()
            self._profiler.__enter__()
        try:  # the dispatch machinery imports dynamo on first use: not inside the window
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001 - optional
            pass
        self._tracker = ModuleTracker()
        self._tracker.__enter__()
        self._mode = _Mode(self, torch)
        self._mode.__enter__()
        _ACTIVE.append(self)
        self._sync_window()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._window_t0 is not None:
            self._close_window()
        _ACTIVE.remove(self)
        self._mode.__exit__(exc_type, exc, tb)
        self._tracker.__exit__(exc_type, exc, tb)
        if self._profiler is not None:
            self._profiler.__exit__(exc_type, exc, tb)
            if exc_type is None:
                self._join(*self._profiler.events())
        if exc_type is None and self.region is not None and not self.region_seen:
            raise ConfigError(
                f"region {self.region!r} never occurred in the traced code; mark it with "
                f"`with roofprof.trace.region({self.region!r}):`"
            )

    def _join(self, host: Iterable[HostEvent], kernels: Iterable[KernelEvent]) -> None:
        """Device time of each pending call from the profiler's events; kernels of no
        recorded op in the window become kernel-level signatures (time only)."""
        joined = join_kernels(list(host), list(kernels))
        for n, stats, key in self._pending:
            s = joined.call_s.get(n, 0.0)
            stats.time_s += s
            stats.modules.setdefault(key, [0, 0.0])[1] += s
        self._pending.clear()
        self.kernels_joined += joined.kernels
        for row in joined.unattributed:
            name = f"kernel::{row.name}"
            stats = self.sigs.get(("kernel", row.name))
            if stats is None:
                stats = SignatureStats(
                    name, "-", (), (), OpCall(name), None, None, kernel_only=True
                )
                self.sigs[("kernel", row.name)] = stats
            stats.count += row.count
            stats.time_s += row.time_s
            m = stats.modules.setdefault(("(no op)", "-"), [0, 0.0])
            m[0] += row.count
            m[1] += row.time_s

    @property
    def result(self):
        """The :class:`~roofprof.tracing.result.TraceResult` (built on first access: replays,
        roofline placement)."""
        if self._result is None:
            from roofprof.tracing.result import build_result

            self._result = build_result(self)
        return self._result

    # -- recording -----------------------------------------------------------------------
    def _module(self) -> tuple[str, str]:
        parents = self._tracker.parents
        name = max(parents, key=lambda p: (p != "Global", p.count(".")), default="Global")
        return name, ("backward" if self._tracker.is_bw else "forward")

    def record(self, func: Any, args: tuple, kwargs: dict, torch: Any) -> Any:
        if not self._in_window() or getattr(func, "namespace", "") == "profiler":
            return func(*args, **kwargs)  # profiler ranges (the tracer's own) are not ops
        key = (func, _describe(args, torch), _describe(kwargs, torch))
        stats = self.sigs.get(key)
        module = self._module()
        if self.nvtx_signatures:
            out, elapsed = self._run_in_nvtx(func, args, kwargs, key), 0.0
        elif self._profiler is not None:
            n = self.calls
            with self._profiler.range(f"{CALL_PREFIX}{n}"):
                out = func(*args, **kwargs)
            elapsed = 0.0
        else:
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            elapsed = time.perf_counter() - t0
        self.calls += 1
        if stats is None:
            if self._profiler is not None:
                with self._profiler.range(TRACER_RANGE):
                    stats = self._new_signature(func, args, kwargs, out, torch)
            else:
                stats = self._new_signature(func, args, kwargs, out, torch)
            stats.key = signature_id(str(func), key[1], key[2])
            self.sigs[key] = stats
        stats.count += 1
        stats.time_s += elapsed
        m = stats.modules.setdefault(module, [0, 0.0])
        m[0] += 1
        m[1] += elapsed
        if self._profiler is not None:
            self._pending.append((self.calls - 1, stats, module))
        return out

    def _run_in_nvtx(self, func: Any, args: tuple, kwargs: dict, key: tuple) -> Any:
        """``--counters`` child: the first call of each signature inside the NVTX range
        ``roofprof.sig_<id>`` (device synchronised around it), so Nsight Compute profiles
        exactly that call's kernels; every other call runs plainly."""
        from roofprof.counters.nvtx import nvtx_range

        sid = signature_id(str(func), key[1], key[2])
        if sid in self._nvtx_done:
            return func(*args, **kwargs)
        self._nvtx_done.add(sid)
        self._sync_device()
        with nvtx_range(f"roofprof.sig_{sid}"):
            out = func(*args, **kwargs)
            self._sync_device()
        return out

    def _new_signature(
        self, func: Any, args: tuple, kwargs: dict, out: Any, torch: Any
    ) -> SignatureStats:
        schema = func._schema
        tensors = torch.Tensor
        margs = map_nested(args, _meta, tensors)
        mkwargs = map_nested(kwargs, _meta, tensors)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        mouts = tuple(_meta(o) for o in outs if isinstance(o, tensors))
        view = not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)
        index_rows = None
        name = schema.name
        if name == "aten::embedding" and len(args) > 1 and isinstance(args[1], tensors):
            index_rows = int(torch.unique(args[1]).numel())
        results = tuple(_meta(o) if isinstance(o, tensors) else None for o in outs)
        call = OpCall(
            name,
            tuple(margs),
            mkwargs,
            mouts,
            frozenset(str(t).split(".")[-1] for t in func.tags),
            schema.is_mutable,
            view,
            schema.overload_name or "default",
            index_rows,
            results,
        )
        try:
            recipe = Recipe(
                func,
                map_nested(args, lambda t: spec_of(t, torch), tensors),
                map_nested(kwargs, lambda t: spec_of(t, torch), tensors),
            )
        except Exception:  # noqa: BLE001 - exotic tensors (sparse, nested): in-context only
            recipe = None
        tmetas = [t for t in _flat(margs) if isinstance(t, TensorMeta)]
        return SignatureStats(
            name,
            call.overload,
            tuple(t.shape for t in tmetas),
            tuple(t.dtype for t in tmetas),
            call,
            cost_of(call),
            recipe,
        )


def _flat(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flat(v)]
    return [x]


def _mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __init__(self, tracer: Tracer, torch: Any):
            super().__init__()
            self.tracer, self.torch = tracer, torch

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return self.tracer.record(func, args, kwargs or {}, self.torch)

    return Mode


def _Mode(tracer: Tracer, torch: Any):  # noqa: N802 - builds the mode class lazily (torch optional)
    return _mode_class()(tracer, torch)
