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
import gzip
import json
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.tracing.costs import C10_DTYPE_NAMES, OpCall, TensorMeta, cost_of, dtype_name
from roofprof.tracing.kernels import union_s

__all__ = ["import_trace", "read_events"]


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace (``.json`` or ``.json.gz``).

    Raises:
        ConfigError: unreadable, not JSON, or not a torch profiler trace.
    """
    p = Path(path)
    try:
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        data = json.loads(raw)
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    except (ValueError, gzip.BadGzipFile):
        raise ConfigError(
            f"{p} is not a JSON trace (torch.profiler's export_chrome_trace writes one)"
        ) from None
    events = (
        data.get("traceEvents")
        if isinstance(data, dict)
        else data
        if isinstance(data, list)
        else None
    )
    if not isinstance(events, list) or not any(
        isinstance(e, dict) and e.get("cat") == "cpu_op" for e in events
    ):
        raise ConfigError(f"{p} is not a torch profiler trace (no cpu_op events in traceEvents)")
    ops = [e for e in events if isinstance(e, dict) and e.get("cat") == "cpu_op"]
    if not any("Input Dims" in (e.get("args") or {}) for e in ops):
        raise ConfigError(
            f"{p} has no shapes: record it with torch.profiler.profile(record_shapes=True)"
        )
    return events


def _select(
    ops: list[dict[str, Any]], costed: Any, owner: dict[Any, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The ops to count: the outermost op of each nest that has a cost rule (what it calls
    inside is part of it), else the innermost ops (leaves) with their own time. ``owner``
    (filled when given) maps the ``External id`` of every op inside a chosen one to it, so
    a kernel launched by an inner op joins the op counted."""
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    chosen: list[dict[str, Any]] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        children: dict[int, list[dict]] = {}
        roots: list[dict] = []
        stack: list[dict] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) <= e["ts"]:
                stack.pop()
            (children.setdefault(id(stack[-1]), []) if stack else roots).append(e)
            stack.append(e)

        def own(e: dict, top: dict, children: dict[int, list[dict]] = children) -> None:
            if owner is not None:
                owner[(e.get("args") or {}).get("External id")] = top
            for k in children.get(id(e), []):
                own(k, top)

        def visit(e: dict, children: dict[int, list[dict]] = children) -> None:
            kids = children.get(id(e), [])
            if costed(e) or not kids:
                chosen.append(e)
                own(e, e)
            else:
                for k in kids:
                    visit(k)

        for r in roots:
            visit(r)
    return chosen


def _scalar(text: str) -> Any:
    if text in ("", None):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _call(name: str, args: dict[str, Any]) -> OpCall:
    dims, types = args.get("Input Dims", []), args.get("Input type", [])
    concrete = args.get("Concrete Inputs", [])
    values: list[Any] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) else ""
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # TensorList
            values.append([TensorMeta(tuple(x), dtype_name(t)) for x in d])
        elif (
            isinstance(d, list)
            and (t.lower() in C10_DTYPE_NAMES or dtype_name(t) != t.lower())
            and t != "Scalar"
        ):
            values.append(TensorMeta(tuple(d), dtype_name(t)))
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


def _takes_tensor(arg: Any) -> bool:
    return "Tensor" in str(arg.type)


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
):
    """A :class:`~roofprof.tracing.result.TraceResult` from a torch profiler Chrome trace.

    ``device`` and ``roofline`` choose the roofline the ops are placed on (give the
    ``roofline.json`` of the machine the trace was made on). No replays (the inputs are
    not in the trace).

    Raises:
        ConfigError: not a torch profiler trace, or a trace without shapes.
    """
    from roofprof.devices import select
    from roofprof.tracing.result import build_result
    from roofprof.tracing.tracer import SignatureStats

    events = read_events(path)
    ops = [e for e in events if isinstance(e, dict) and e.get("cat") == "cpu_op" and "ts" in e]
    kernels = [
        e
        for e in events
        if isinstance(e, dict) and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    imp = _Imported(select(device) if isinstance(device, str) else device, roofline, module_depth)
    start = min(e["ts"] for e in ops)
    imp.wall_s = (max(e["ts"] + e.get("dur", 0) for e in [*ops, *kernels]) - start) * 1e-6

    def signature(e: dict) -> Any:
        a = e.get("args") or {}
        name = e.get("name", "?")
        key = (
            name,
            json.dumps(a.get("Input Dims")),
            json.dumps(a.get("Input type")),
            json.dumps(a.get("Concrete Inputs")),
        )
        stats = imp.sigs.get(key)
        if stats is None:
            call = _call(name, a) if "::" in name else OpCall(name)
            tensors = call.tensors
            stats = SignatureStats(
                name,
                "default",
                tuple(t.shape for t in tensors),
                tuple(t.dtype for t in tensors),
                call,
                cost_of(call),
                None,
            )
            imp.sigs[key] = stats
        return stats

    owner: dict[Any, dict[str, Any]] = {}
    chosen = _select(ops, lambda e: signature(e).cost is not None, owner)
    intervals: dict[int, list[tuple[float, float]]] = {}  # chosen op -> its kernels (µs)
    unattributed: dict[str, list[tuple[float, float]]] = {}
    for k in kernels:
        a = k.get("args") or {}
        top = owner.get(a.get("External id", a.get("external id")))
        span = (float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0)))
        if top is not None and a.get("External id", a.get("external id")) is not None:
            intervals.setdefault(id(top), []).append(span)
        else:  # a kernel of no op (fused, raw Triton, NCCL): its own row, time only
            unattributed.setdefault(str(k.get("name", "kernel")), []).append(span)
    for e in chosen:
        stats = signature(e)
        us = union_s(intervals.get(id(e), [])) * 1e9 if kernels else e.get("dur", 0)
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
    return build_result(imp)
