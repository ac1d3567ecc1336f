"""Read a torch profiler Chrome trace (``record_shapes=True``) into a trace result.

``roofprof trace --import trace.json``: a run made elsewhere, analysed here. Leaf
``cpu_op`` events are the ops (an op that contains other ops is not counted twice); their
``Input Dims`` / ``Input type`` / ``Concrete Inputs`` become an :class:`OpCall`, the
outputs are inferred by running the op on the meta device (traces record inputs only).
Time: the kernels joined to the op by ``External id`` when the trace has GPU kernels
(kernels with no op are reported as ``unattributed`` rows, time only, never dropped),
else the op's own CPU duration.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.tracing.chrome_events import KERNEL, OP, RUNTIME, Event, TraceFile, read_trace
from roofprof.tracing.costs import C10_DTYPE_NAMES, OpCall, TensorMeta, cost_of, dtype_name
from roofprof.tracing.kernels import union_s
from roofprof.units import si

__all__ = ["import_trace", "read_events", "trace_device"]


def _nest(ops: list[Event]) -> dict[Any, tuple[list[float], list[Event], list[int]]]:
    """Per thread: op start times, the ops (by start, outer first) and each op's parent
    index (-1: a root)."""
    by_thread: dict[Any, list[Event]] = {}
    for e in ops:
        by_thread.setdefault((e.pid, e.tid), []).append(e)
    nests = {}
    for key, evs in by_thread.items():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        parents: list[int] = []
        stack: list[int] = []
        for i, e in enumerate(evs):
            while stack and evs[stack[-1]].end <= e.ts:
                stack.pop()
            parents.append(stack[-1] if stack else -1)
            stack.append(i)
        nests[key] = ([e.ts for e in evs], evs, parents)
    return nests


def _innermost(nest: tuple[list[float], list[Event], list[int]] | None, t: float) -> Event | None:
    """The innermost op of a thread's nest whose span holds time ``t`` (None: no op)."""
    if nest is None:
        return None
    starts, evs, parents = nest
    i = bisect.bisect_right(starts, t) - 1
    while i >= 0 and not (evs[i].ts <= t <= evs[i].end):
        i = parents[i]
    return evs[i] if i >= 0 else None


def _select(
    nests: dict[Any, tuple[list[float], list[Event], list[int]]], costed: Any
) -> tuple[list[Event], list[Event], dict[Event, Event]]:
    """The ops to count: the outermost op of each nest that has a cost rule (what it calls
    inside is part of it), else the innermost ops (leaves) with their own time. Returns
    ``(chosen, launchers, owner)``: ``launchers`` are the ops passed through (children but
    no cost rule, e.g. a custom ``vllm::moe_forward``), counted only for the kernels they
    launch themselves; ``owner`` maps every op to the chosen op or launcher counting it."""
    chosen: list[Event] = []
    launchers: list[Event] = []
    owner: dict[Event, Event] = {}
    for _, evs, parents in nests.values():
        children: dict[int, list[int]] = {}
        for i, p in enumerate(parents):
            children.setdefault(p, []).append(i)
        todo = list(reversed(children.get(-1, [])))
        while todo:
            i = todo.pop()
            kids = children.get(i, [])
            if costed(evs[i]) or not kids:
                chosen.append(evs[i])
                inner = [i]
                while inner:
                    j = inner.pop()
                    owner[evs[j]] = evs[i]
                    inner.extend(children.get(j, []))
            else:
                launchers.append(evs[i])
                owner[evs[i]] = evs[i]
                todo.extend(reversed(kids))
    return chosen, launchers, owner


def _launcher(
    k: Event,
    runtime: dict[Any, Event],
    nests: dict[Any, tuple[list[float], list[Event], list[int]]],
    by_ext: dict[Any, Event],
) -> Event | None:
    """The op that launched device interval ``k``: the innermost op around the runtime
    launch with ``k``'s correlation (on the launching thread), else the op whose
    ``External id`` ``k`` names (when that id is not its own correlation)."""
    rt = runtime.get(k.corr) if k.corr is not None else None
    if rt is not None:
        return _innermost(nests.get((rt.pid, rt.tid)), rt.ts)
    if k.ext is not None and k.ext != k.corr:
        return by_ext.get(k.ext)
    return None


def _scalar(text: str) -> Any:
    if text in ("", None):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _call(name: str, inputs: list[Any]) -> OpCall:
    """The call an op event records. torch 1.8/1.9 traces record no ``Input type``: a
    non-empty ``Input Dims`` entry is then read as an fp32 tensor (FLOPs are exact, bytes
    assume 4-byte elements)."""
    dims, types, concrete = (x or [] for x in inputs)
    untyped = not types
    values: list[Any] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) else ""
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # TensorList
            values.append([TensorMeta(tuple(x), dtype_name(t or "float")) for x in d])
        elif (
            isinstance(d, list)
            and (t.lower() in C10_DTYPE_NAMES or dtype_name(t) != t.lower())
            and t != "Scalar"
        ) or (untyped and isinstance(d, list) and d):
            values.append(TensorMeta(tuple(d), dtype_name(t or "float")))
        else:
            values.append(_scalar(concrete[i]) if i < len(concrete) else None)
    outputs, tags, view, mutable = _infer(name, values)
    return OpCall(name, tuple(values), {}, outputs, tags, mutable, view)


_TORCH_DTYPES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "int64": "int64",
    "int32": "int32",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "int16": "int16",
}


def _infer(
    name: str, values: list[Any]
) -> tuple[tuple[TensorMeta, ...], frozenset[str], bool, bool]:
    """Outputs, tags, view and mutability of ``name`` from running it on the meta device."""
    try:
        import torch

        ns, op = name.split("::", 1)
        packet = getattr(getattr(torch.ops, ns), op)
        default = _overload(packet, values)
        schema = default._schema
        tags = frozenset(str(t).split(".")[-1] for t in default.tags)
        view = not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)
    except Exception:  # noqa: BLE001 - not a registered op: no tags, no outputs
        return (), frozenset(), False, False

    def to_meta(v: Any) -> Any:
        if isinstance(v, TensorMeta):
            return torch.empty(
                v.shape, dtype=getattr(torch, _TORCH_DTYPES.get(v.dtype, "float32")), device="meta"
            )
        if isinstance(v, list):
            return [to_meta(x) for x in v]
        return v

    try:
        metas_in = [to_meta(v) for v in values]
        params = schema.arguments
        pos = [v for v, a in zip(metas_in, params, strict=False) if not a.kwarg_only]
        kw = {
            a.name: v
            for v, a in zip(metas_in, params, strict=False)
            if a.kwarg_only and v is not None
        }
        out = default(*pos, **kw)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        metas = tuple(
            TensorMeta(tuple(o.shape), dtype_name(o.dtype))
            for o in outs
            if isinstance(o, torch.Tensor)
        )
    except Exception:  # noqa: BLE001 - arguments the trace did not record: outputs unknown
        metas = ()
    return metas, tags, view, schema.is_mutable


def _overload(packet: Any, values: list[Any]) -> Any:
    """The overload of ``packet`` whose parameters take the recorded values: a tensor where
    the trace recorded a tensor, a scalar where it recorded a scalar (``aten::add`` of two
    tensors is ``add.Tensor``, not ``add.default``, which adds two numbers and has no
    ``pointwise`` tag). Out= and in-place variants are not considered; the first overload
    when none fits."""
    names = [n for n in packet.overloads() if "out" not in n.lower()]
    for n in names:
        params = getattr(packet, n)._schema.arguments
        if len(values) > len(params):
            continue
        if all(
            _takes_tensor(a) == isinstance(v, (TensorMeta, list)) or v is None
            for v, a in zip(values, params, strict=False)
        ):
            return getattr(packet, n)
    return getattr(packet, "default", None) or getattr(packet, packet.overloads()[0])


def _unrecorded_ints(call: OpCall) -> bool:
    """True when an ``int[]`` argument of ``call`` (stride, padding, kernel size...) is
    unrecorded (torch 1.8/1.9 traces keep no ``Concrete Inputs``): its cost is unknown."""
    try:
        import torch

        ns, op = call.op.split("::", 1)
        schema = _overload(getattr(getattr(torch.ops, ns), op), list(call.args))._schema
    except Exception:  # noqa: BLE001 - not a registered op
        return False
    return any(
        v is None and ("int[" in str(a.type).lower() or "list[int]" in str(a.type).lower())
        for v, a in zip(call.args, schema.arguments, strict=False)
    )


def _takes_tensor(arg: Any) -> bool:
    return "Tensor" in str(arg.type)


def read_events(path: str | Path) -> TraceFile:
    """The trace at ``path`` as compact records (:func:`~roofprof.tracing.chrome_events.
    read_trace`; kept for callers of the earlier name).

    Raises:
        ConfigError: unreadable, not JSON, not a torch profiler trace, or without shapes.
    """
    return read_trace(path)


_FAMILY = re.compile(r"[A-Z]{1,3}\d{2,4}[A-Z]?")


def trace_device(trace: TraceFile, gpu: str | None = None) -> Any:
    """The device a GPU trace was recorded on, as a roofprof Device stand-in (``.info``):
    ``gpu`` (a ``data/gpus.json`` id) when given, else the trace's ``deviceProperties``
    (its first device) matched by name, or by family, SM count and memory (within 15 %).
    None for a trace without device properties.

    Raises:
        ConfigError: ``gpu`` is not a known id, or the trace's GPU matches no row
            (the message names the GPU and the ids that exist).

    >>> trace_device(read_trace("a100.json.gz")).info.spec_id  # doctest: +SKIP
    'a100-sxm-40gb'
    """
    from roofprof.gpu_specs import list_gpus, load_gpu, match_gpu

    props = trace.devices[0] if trace.devices else {}
    name = str(props.get("name") or "")
    if gpu is not None:
        spec = load_gpu(gpu)
        how = f"--gpu {spec.id}"
    elif not props:
        return None
    else:
        spec, how = match_gpu(name), "matched by name"
        if spec is None:
            family = _FAMILY.findall(name.upper())
            sms, mem = props.get("numSms"), float(props.get("totalGlobalMem") or 0)
            near = [
                s
                for s in list_gpus()
                if any(f in s.name.upper() for f in family)
                and s.sm_count == sms
                and mem
                and abs(s.memory_bytes - mem) <= 0.15 * s.memory_bytes
            ]
            near.sort(key=lambda s: abs(s.memory_bytes - mem))
            spec, how = (near[0] if near else None), "matched by family, SM count and memory"
        if spec is None:
            ids = ", ".join(s.id for s in list_gpus())
            raise ConfigError(
                f"{trace.path} was recorded on {name or 'an unnamed GPU'} "
                f"({props.get('numSms')} SMs), which matches no GPU in data/gpus.json; "
                f"give --gpu ID (one of: {ids}) or --roofline none|roofline.json"
            )
    return _TraceDevice(
        name or spec.name,
        int(props.get("numSms") or spec.sm_count),
        int(props.get("totalGlobalMem") or spec.memory_bytes),
        spec.id,
        f"trace deviceProperties, {how} as {spec.id}",
        int(props.get("id", 0) or 0),
    )


def _unnamed_gpu(trace: TraceFile, roofline: Any) -> Any:
    """The device of a GPU trace without ``deviceProperties``: refused against a datasheet
    (which GPU's?), else a GPU known only by that."""
    from roofprof.gpu_specs import list_gpus

    if roofline in ("auto", "spec"):
        ids = ", ".join(s.id for s in list_gpus())
        raise ConfigError(
            f"{trace.path} has device kernels but no deviceProperties naming its GPU; give "
            f"--gpu ID (one of: {ids}) or --roofline none|roofline.json"
        )
    return _TraceDevice(
        "a GPU the trace does not name", 0, 0, None, "the trace records no deviceProperties"
    )


class _TraceDevice:
    """The GPU a trace was recorded on (identity only: nothing runs on it)."""

    def __init__(
        self, name: str, sms: int, memory: int, spec_id: str | None, source: str, index: int = 0
    ):
        from roofprof.devices.base import DeviceInfo

        self.info = DeviceInfo(
            kind="cuda",
            index=index,
            name=name,
            compute_units=sms,
            memory_bytes=memory,
            spec_id=spec_id,
            extra={"from": source},
            asynchronous=True,
            shared_host=False,
            default_dtype="bf16",
            torch_device="cuda:0",
            compute_unit_name="SMs",
        )


class _Imported:
    """Stands in for a Tracer for :func:`roofprof.tracing.result.build_result`."""

    def __init__(self, device: Any, roofline: Any, module_depth: int | None):
        self._device, self.roofline_spec, self.module_depth = device, roofline, module_depth
        self.replay, self.cold, self.replay_budget_s = False, False, 0.0
        self.sigs: dict[tuple, Any] = {}
        self.calls, self.wall_s = 0, 0.0


def import_trace(
    path: str | Path,
    *,
    device: Any = "cpu",
    roofline: Any = "auto",
    module_depth: int | None = None,
    gpu: str | None = None,
):
    """A :class:`~roofprof.tracing.result.TraceResult` from a torch profiler Chrome trace.

    A GPU trace (device intervals and ``deviceProperties``) is placed on the GPU it was
    recorded on (:func:`trace_device`; ``gpu`` overrides), against that GPU's datasheet
    roofline (``roofline`` ``"auto"`` or ``"spec"``; or a ``roofline.json`` / ``"none"``).
    A CPU trace is placed on ``device``'s roofline. No replays (the inputs are not in the
    trace). The result's ``summary.notes`` say when no device time could be joined to an
    op (MFU/MBU are then not given).

    Raises:
        ConfigError: not a torch profiler trace, a trace without shapes, or a GPU that
            matches no ``data/gpus.json`` row.
    """
    import dataclasses

    from roofprof.devices import select
    from roofprof.tracing.result import build_result
    from roofprof.tracing.tracer import SignatureStats

    trace = read_trace(path)
    ops = [e for e in trace.events if e.kind == OP]
    kernels = [e for e in trace.events if e.kind == KERNEL]
    runtime = {e.corr: e for e in trace.events if e.kind == RUNTIME and e.corr is not None}
    dev = trace_device(trace, gpu) if (kernels or gpu) else None
    if dev is None and kernels:  # a GPU trace that does not name its GPU
        dev = _unnamed_gpu(trace, roofline)
    if dev is not None:
        roofline = "spec" if roofline == "auto" else roofline
    elif isinstance(device, str):
        dev = select(device)
    else:
        dev = device
    imp = _Imported(dev, roofline, module_depth)
    span = [*ops, *kernels]  # one window for op and device time
    start = min(e.ts for e in span)
    imp.wall_s = (max(e.end for e in span) - start) * 1e-6

    untyped = trace.torch_format == "1.8-1.9"

    def signature(e: Event) -> Any:
        key = (e.name, e.inputs)
        stats = imp.sigs.get(key)
        if stats is None:
            call = (
                _call(e.name, json.loads(e.inputs))
                if "::" in e.name and e.inputs
                else OpCall(e.name)
            )
            tensors = call.tensors
            stats = SignatureStats(
                e.name,
                "default",
                tuple(t.shape for t in tensors),
                tuple(t.dtype for t in tensors),
                call,
                None if untyped and _unrecorded_ints(call) else cost_of(call),
                None,
            )
            imp.sigs[key] = stats
        return stats

    nests = _nest(ops)
    chosen, launchers, owner = _select(nests, lambda e: signature(e).cost is not None)
    by_ext = {e.ext: e for e in ops if e.ext is not None}
    intervals: dict[Event, list[tuple[float, float]]] = {}  # counted op -> its kernels (µs)
    unattributed: dict[str, list[tuple[float, float]]] = {}
    for k in kernels:
        op = _launcher(k, runtime, nests, by_ext)
        top = owner.get(op) if op is not None else None
        if top is not None:
            intervals.setdefault(top, []).append((k.ts, k.end))
        else:  # a kernel of no op (fused, raw Triton, NCCL): its own row, time only
            unattributed.setdefault(k.name, []).append((k.ts, k.end))
    counted = [*chosen, *(e for e in launchers if e in intervals)] if kernels else chosen
    for e in counted:
        stats = signature(e)
        us = union_s(intervals.get(e, [])) * 1e9 if kernels else e.dur
        stats.count += 1
        stats.time_s += us * 1e-6
        m = stats.modules.setdefault(("-", "forward"), [0, 0.0])
        m[0] += 1
        m[1] += us * 1e-6
        imp.calls += 1
    imp.sigs = {k: v for k, v in imp.sigs.items() if v.count}
    for name, spans in unattributed.items():
        stats = SignatureStats(
            f"kernel::{name}",
            "-",
            (),
            (),
            OpCall(f"kernel::{name}"),
            None,
            None,
            len(spans),
            union_s(spans) * 1e3,
            kernel_only=True,
        )
        imp.sigs[("kernel", name)] = stats
    result = build_result(imp)
    result = dataclasses.replace(result, summary=dataclasses.replace(result.summary, imported=True))
    if not kernels:
        return result
    joined = sum(len(v) for v in intervals.values())
    notes = [f"{joined} of {len(kernels)} device intervals joined to a recorded op"]
    s = result.summary
    busy = union_s([(k.ts, k.end) for k in kernels]) * 1e3  # device busy time (s)
    if s.op_time_s > busy * (1 + 1e-9) and busy > 0:  # concurrent streams overlap
        costed = [
            sp for e in counted if signature(e).cost is not None for sp in intervals.get(e, ())
        ]
        scale = s.op_time_s / busy
        notes.append(
            f"ops overlap on concurrent streams: their times add up to "
            f"{si(s.op_time_s, 's')} in {si(busy, 's')} of device busy time; op time, "
            "coverage, MFU and MBU are over the busy time"
        )
        s = dataclasses.replace(
            s,
            op_time_s=busy,
            unattributed_s=max(0.0, s.wall_s - busy),
            coverage=union_s(costed) * 1e3 / busy,
            **{
                k: None if getattr(s, k) is None else getattr(s, k) * scale
                for k in ("mfu_measured", "mbu_measured", "mfu_datasheet", "mbu_datasheet")
            },
        )
    if not joined:
        notes.append(
            "no device time is joined to an op: MFU, MBU and coverage rest on nothing "
            "and are not given"
        )
        s = dataclasses.replace(
            s,
            coverage=None,
            mfu_measured=None,
            mbu_measured=None,
            mfu_datasheet=None,
            mbu_datasheet=None,
        )
    return dataclasses.replace(result, summary=dataclasses.replace(s, notes=tuple(notes)))
