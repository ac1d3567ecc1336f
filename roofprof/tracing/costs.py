"""FLOPs and minimum (compulsory) bytes of one aten op call: the cost model of ``trace``.

Every op call is described by an :class:`OpCall` whose tensors are :class:`TensorMeta`
(shape, dtype name, strides, storage identity): the same call can come from a live run
(:mod:`roofprof.tracing.tracer`) or from a profiler trace that recorded shapes only
(:mod:`roofprof.tracing.chrome`). :func:`cost_of` returns a :class:`Cost`, or None when no
rule applies (the op is then reported with its time only, never dropped).

Conventions (stated, so two tools can be compared):

* FMA = 2 FLOPs (``mm`` is ``2·m·n·k``, as torch's ``FlopCounterMode``).
* Attention: the two matmuls, ``2·b·h_q·pairs·(d_qk + d_v)`` with ``pairs`` the (query,
  key) pairs the mask keeps: ``L·S`` without a mask, the top-left triangle with
  ``is_causal`` (torch's convention: query ``i`` sees keys ``0..i``). GQA: FLOPs use the
  query heads, bytes the key/value heads. Bytes: Q + K + V + O (+ logsumexp), never L×S.
* Norms :data:`NORM_FLOPS_PER_ELEMENT`, softmax :data:`SOFTMAX_FLOPS_PER_ELEMENT`,
  elementwise :data:`POINTWISE_FLOPS` (default 1 per output element), reductions 1 per
  input element; copies, casts, gathers and views 0 FLOPs.
* Minimum bytes = distinct input elements read (aliased inputs once; a broadcast, i.e. a
  stride-0 dimension, once) + output elements written. Views: 0. In-place ops: the slice
  read and written. Gathers (embedding, index_select, gather, index): the rows touched
  (distinct rows when the indices are known), never the whole table. Casts: source in its
  dtype + destination in its dtype. Creation ops: the output written (``empty``: 0).

Custom ops: :func:`register_cost` (or the ``@register_cost("mylib::op")`` decorator).

>>> mm = OpCall("aten::mm", (TensorMeta((64, 128), "fp32"), TensorMeta((128, 32), "fp32")),
...             outputs=(TensorMeta((64, 32), "fp32"),))
>>> c = cost_of(mm); c.flops, c.bytes
(524288, 57344)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roofprof.tracing.cost_rules import (
    BUILTIN_RULES,
    NORM_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_ELEMENT,
    causal_pairs,
)
from roofprof.tracing.op_calls import (
    C10_DTYPE_NAMES,
    Cost,
    CostFn,
    OpCall,
    TensorMeta,
    dtype_name,
    generic_cost,
    output_numel,
    read_bytes,
    tensor_args,
    written_bytes,
)

__all__ = [
    "C10_DTYPE_NAMES",
    "Cost",
    "OpCall",
    "TensorMeta",
    "causal_pairs",
    "cost_of",
    "dtype_name",
    "register_cost",
    "registered_costs",
    "tensor_args",
    "NORM_FLOPS_PER_ELEMENT",
    "POINTWISE_FLOPS",
    "SOFTMAX_FLOPS_PER_ELEMENT",
]

# -- registry ------------------------------------------------------------------------------
#: op name -> cost function: the built-in rules (:mod:`roofprof.tracing.cost_rules`), then
#: what :func:`register_cost` adds or overrides
_REGISTRY: dict[str, CostFn] = dict(BUILTIN_RULES)


def _key(op: Any) -> str:
    """``"aten::mm"`` for ``torch.ops.aten.mm``, ``torch.ops.aten.mm.default``, ``"aten.mm"``,
    ``"mm"`` (aten assumed) or ``"aten::mm"``."""
    schema = getattr(op, "_schema", None)
    if schema is not None:
        return schema.name
    qualified = getattr(op, "_qualified_op_name", None)
    if qualified is not None:
        return str(qualified)
    text = str(op)
    if "::" not in text:
        text = text.replace(".", "::", 1) if "." in text else f"aten::{text}"
    return text


def register_cost(op: Any, fn: CostFn | None = None):
    """Register the cost of an op (a custom op or an override): ``fn(call) -> Cost | None``.

    ``op`` is an op (``torch.ops.mylib.scale``, an overload) or its name (``"mylib::scale"``).
    Used as ``register_cost(op, fn)`` or as a decorator ``@register_cost(op)``; returns
    ``fn``. The last registration wins.

    >>> @register_cost("mylib::twice")
    ... def _twice(call):
    ...     x = call.tensors[0]
    ...     return Cost(flops=x.numel, read_bytes=x.nbytes, write_bytes=x.nbytes, kind="custom")
    >>> cost_of(OpCall("mylib::twice", (TensorMeta((10,), "fp32"),))).flops
    10
    """
    if fn is None:
        return lambda f: register_cost(op, f)
    _REGISTRY[_key(op)] = fn
    return fn


def registered_costs() -> dict[str, CostFn]:
    """A copy of the registry: op name -> cost function."""
    return dict(_REGISTRY)


def _torch_registry(call: OpCall) -> Cost | None:
    """FLOPs from torch's own ``flop_registry`` for ops it knows and roofprof has no rule for
    (convolution_backward, the attention backward ops, ...), on meta tensors; bytes: distinct
    inputs + outputs."""
    import torch
    from torch.utils.flop_counter import flop_registry

    ns, name = call.op.split("::", 1)
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    fn = flop_registry.get(packet) if packet is not None else None
    if fn is None:
        return None

    def meta(v: Any) -> Any:
        if isinstance(v, TensorMeta):
            return torch.empty_strided(
                v.shape,
                v.stride or _contiguous(v.shape),
                device="meta",
                dtype=getattr(torch, _TORCH_NAMES.get(v.dtype, "float32")),
            )
        if isinstance(v, (list, tuple)):
            return type(v)(meta(x) for x in v)
        return v

    outs = meta(tuple(call.results or call.outputs))
    flops = fn(
        *meta(call.args),
        **{k: meta(v) for k, v in call.kwargs.items()},
        out_val=outs if len(outs) != 1 else outs[0],
    )
    kind = next((k for part, k in _REGISTRY_KINDS if part in name), "matmul")
    return Cost(flops, read_bytes(call.tensors), written_bytes(call), kind, "torch flop_registry")


#: (substring of the aten op name, cost kind) for ops costed by torch's flop registry
_REGISTRY_KINDS = (("conv", "conv"), ("attention", "attention"))

_TORCH_NAMES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "int64": "int64",
    "int32": "int32",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "fp8": "float8_e4m3fn",
}


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


# -- elementwise and reductions (by torch's op tags) ----------------------------------------
#: FLOPs per output element for elementwise ops (default 1: one arithmetic op per element).
#: Transcendentals count 1 (one instruction sequence per element, as exp); composite
#: activations count their arithmetic around it.
POINTWISE_FLOPS: dict[str, int] = {
    "gelu": 8,
    "silu": 4,
    "sigmoid": 4,
    "tanh": 1,
    "exp": 1,
    "log": 1,
    "relu": 1,
    "threshold": 1,
    "addcmul": 2,
    "addcdiv": 2,
    "lerp": 3,
    "hardswish": 4,
    "softplus": 3,
    "elu": 3,
    "leaky_relu": 2,
    "erf": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "pow": 1,
    "where": 0,
    "masked_fill": 0,
    "clamp": 1,
    "abs": 1,
    "neg": 1,
    "mul": 1,
    "add": 1,
    "sub": 1,
    "div": 1,
    "native_dropout": 2,
    "mish": 5,
    "gelu_backward": 12,
    "silu_backward": 6,
    "sigmoid_backward": 2,
    "threshold_backward": 1,
    "tanh_backward": 2,
}
_REDUCTIONS = {
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "norm",
    "linalg_vector_norm",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "argmax",
    "argmin",
    "logsumexp",
    "cumsum",
    "all",
    "any",
}


def _base(op: str) -> str:
    return op.split("::", 1)[-1].rstrip("_")


def _pointwise(call: OpCall) -> Cost:
    base = _base(call.op)
    return generic_cost(call, POINTWISE_FLOPS.get(base, 1) * output_numel(call), "elementwise")


def _reduction(call: OpCall) -> Cost:
    x = call.tensors[0] if call.tensors else None
    flops = x.numel if x is not None else 0
    return generic_cost(call, flops, "reduction")


def cost_of(call: OpCall) -> Cost | None:
    """The :class:`Cost` of one call, or None when no rule applies (time only).

    Order: a registered rule for the op (custom ops, overrides and the built-in table),
    views (0), then torch's tags (``pointwise``, ``reduction``) or the op's name.
    A rule that fails on unexpected arguments yields None rather than a wrong count.
    """
    fn = _REGISTRY.get(call.op)
    try:
        if fn is not None:
            return fn(call)
        if call.op.startswith("aten::") and call.outputs:
            from_torch = _torch_registry(call)
            if from_torch is not None:
                return from_torch
        if call.view:
            return Cost(0, 0, 0, "view")
        base = _base(call.op)
        if "pointwise" in call.tags or (not call.tags and base in POINTWISE_FLOPS):
            return _pointwise(call)
        if "reduction" in call.tags or base in _REDUCTIONS:
            return _reduction(call)
        if not call.tags and call.op.startswith("aten::") and base in _VIEW_NAMES:
            return Cost(0, 0, 0, "view")
    except (IndexError, TypeError, ValueError, AttributeError, RuntimeError):
        return None
    return None


#: views by name, for calls from a trace (no schema at hand)
_VIEW_NAMES = {
    "view",
    "reshape",
    "_reshape_alias",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "expand",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "narrow",
    "unflatten",
    "flatten",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "view_as",
    "expand_as",
    "alias",
    "detach",
    "unfold",
    "diagonal",
    "numpy_T",
    "movedim",
}
