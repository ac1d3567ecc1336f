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

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Cost",
    "OpCall",
    "TensorMeta",
    "causal_pairs",
    "cost_of",
    "dtype_name",
    "register_cost",
    "registered_costs",
    "NORM_FLOPS_PER_ELEMENT",
    "POINTWISE_FLOPS",
    "SOFTMAX_FLOPS_PER_ELEMENT",
]

#: torch dtype name -> (roofprof dtype name, bytes per element)
_DTYPES: dict[str, tuple[str, float]] = {
    "float32": ("fp32", 4),
    "float": ("fp32", 4),
    "float64": ("fp64", 8),
    "double": ("fp64", 8),
    "float16": ("fp16", 2),
    "half": ("fp16", 2),
    "bfloat16": ("bf16", 2),
    "float8_e4m3fn": ("fp8", 1),
    "float8_e5m2": ("fp8", 1),
    "tf32": ("tf32", 4),
    "int64": ("int64", 8),
    "long": ("int64", 8),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "int16": ("int16", 2),
    "short": ("int16", 2),
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "bool": ("bool", 1),
    "complex64": ("c64", 8),
    "complex128": ("c128", 16),
}
_ITEMSIZE = {name: size for name, size in _DTYPES.values()}
#: profiler ``Input type`` strings (c10 scalar type names) -> torch dtype names
C10_DTYPE_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::half": "float16",
    "c10::bfloat16": "bfloat16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::float8_e4m3fn": "float8_e4m3fn",
    "c10::float8_e5m2": "float8_e5m2",
    "c10::complex<float>": "complex64",
}


def dtype_name(dtype: Any) -> str:
    """roofprof's name of a torch dtype or dtype string: ``torch.float32`` -> ``"fp32"``.

    >>> dtype_name("torch.bfloat16"), dtype_name("c10::Half"), dtype_name("fp32")
    ('bf16', 'fp16', 'fp32')
    """
    text = str(dtype).lower().removeprefix("torch.")
    text = C10_DTYPE_NAMES.get(text, text)
    if text in _ITEMSIZE:
        return text
    return _DTYPES.get(text, (text, 4))[0]


@dataclass(frozen=True)
class TensorMeta:
    """A tensor as the cost model sees it: ``shape``, ``dtype`` (roofprof name, e.g.
    ``"fp32"``), ``stride`` (None: contiguous), ``storage`` (identity of the memory it views,
    for de-duplicating aliased inputs; None: distinct) and ``offset`` (elements)."""

    shape: tuple[int, ...]
    dtype: str = "fp32"
    stride: tuple[int, ...] | None = None
    storage: Any = None
    offset: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float:
        return _ITEMSIZE.get(self.dtype, 4)

    @property
    def distinct_numel(self) -> int:
        """Elements addressed once each: a stride-0 (broadcast) dimension counts once."""
        if self.stride is None:
            return self.numel
        return (
            math.prod(s for s, st in zip(self.shape, self.stride, strict=False) if st != 0)
            if all(self.shape)
            else 0
        )

    @property
    def nbytes(self) -> float:
        """Minimum bytes to read or write this tensor once (broadcasts once)."""
        return self.distinct_numel * self.itemsize

    def key(self) -> tuple:
        return (
            (self.storage, self.offset, self.shape, self.stride)
            if self.storage is not None
            else (id(self),)
        )


@dataclass(frozen=True)
class OpCall:
    """One op call: ``op`` (``"aten::mm"``; ``overload`` separate), positional ``args`` and
    ``kwargs`` with :class:`TensorMeta` in place of tensors, the ``outputs`` (may be empty
    when unknown, e.g. from a trace), ``tags`` (torch's op tags: ``pointwise``,
    ``reduction``, ...), ``mutable`` and ``view`` from the schema, and ``index_rows``: the
    number of distinct indices of a gather when known."""

    op: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[TensorMeta, ...] = ()
    tags: frozenset[str] = frozenset()
    mutable: bool = False
    view: bool = False
    overload: str = "default"
    index_rows: int | None = None
    results: tuple = ()  # the op's returns in position (None where undefined), when known

    @property
    def tensors(self) -> list[TensorMeta]:
        """Tensor arguments in order (lists of tensors flattened)."""
        return [
            t for t in _flatten([*self.args, *self.kwargs.values()]) if isinstance(t, TensorMeta)
        ]

    def arg(self, i: int, name: str | None = None, default: Any = None) -> Any:
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return self.args[i] if i < len(self.args) else default


@dataclass(frozen=True)
class Cost:
    """FLOPs and minimum bytes of one call; ``kind`` classifies the op (``matmul``, ``conv``,
    ``attention``, ``norm``, ``softmax``, ``elementwise``, ``reduction``, ``gather``,
    ``copy``, ``view``, ``create``, ``pool``, ``custom``) and ``note`` says which rule applied."""

    flops: float
    read_bytes: float
    write_bytes: float
    kind: str
    note: str = ""

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf") if self.flops else 0.0


def _flatten(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if isinstance(x, (list, tuple)):
            out.extend(_flatten(x))
        else:
            out.append(x)
    return out


def _distinct(tensors: Iterable[TensorMeta]) -> list[TensorMeta]:
    seen, out = set(), []
    for t in tensors:
        k = t.key()
        if k not in seen:
            seen.add(k)
            out.append(t)
    return out


def _read(tensors: Iterable[TensorMeta]) -> float:
    return sum(t.nbytes for t in _distinct(tensors))


def _out_numel(call: OpCall) -> int:
    if call.outputs:
        return call.outputs[0].numel
    shapes = [t.shape for t in call.tensors]  # no outputs known (a trace): broadcast the inputs
    if not shapes:
        return 0
    rank = max(len(s) for s in shapes)
    dims = [
        max((s[len(s) - rank + i] if len(s) - rank + i >= 0 else 1) for s in shapes)
        for i in range(rank)
    ]
    return math.prod(dims)


def _write(call: OpCall, default_dtype: str | None = None) -> float:
    if call.outputs:
        return sum(t.numel * t.itemsize for t in _distinct(call.outputs))
    ts = call.tensors
    itemsize = _ITEMSIZE.get(default_dtype or (ts[0].dtype if ts else "fp32"), 4)
    return _out_numel(call) * itemsize


def _generic(call: OpCall, flops: float, kind: str, note: str = "") -> Cost:
    """Reads: distinct inputs; writes: outputs not aliasing... (in place: the slice again)."""
    return Cost(flops, _read(call.tensors), _write(call), kind, note)


# -- registry ------------------------------------------------------------------------------
CostFn = Callable[[OpCall], "Cost | None"]
_REGISTRY: dict[str, CostFn] = {}


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


def _rule(*names: str):
    def deco(fn: CostFn) -> CostFn:
        for n in names:
            _REGISTRY[f"aten::{n}"] = fn
        return fn

    return deco


# -- matmul and convolution ---------------------------------------------------------------
def _matmul(call: OpCall, a: Any, b: Any) -> Cost:
    m, k = a.shape
    n = b.shape[-1]
    return Cost(2 * m * n * k, _read(call.tensors), _write(call, a.dtype), "matmul")


@_rule("mm", "_scaled_mm")
def _mm(call: OpCall) -> Cost:
    return _matmul(call, call.args[0], call.args[1])


@_rule("addmm")
def _addmm(call: OpCall) -> Cost:  # bias, a, b
    return _matmul(call, call.args[1], call.args[2])


@_rule("bmm")
def _bmm(call: OpCall) -> Cost:
    a, b = call.args[0], call.args[1]
    bs, m, k = a.shape
    n = b.shape[-1]
    return Cost(2 * bs * m * n * k, _read(call.tensors), _write(call, a.dtype), "matmul")


@_rule("baddbmm")
def _baddbmm(call: OpCall) -> Cost:
    a, b = call.args[1], call.args[2]
    bs, m, k = a.shape
    n = b.shape[-1]
    return Cost(2 * bs * m * n * k, _read(call.tensors), _write(call, a.dtype), "matmul")


@_rule(
    "convolution",
    "_convolution",
    "_slow_conv2d_forward",
    "mkldnn_convolution",
    "cudnn_convolution",
    "convolution_overrideable",
    "conv2d",
    "conv1d",
    "conv3d",
)
def _conv(call: OpCall) -> Cost:
    x, w = call.args[0], call.args[1]
    transposed = (
        bool(call.arg(6, "transposed", False)) if call.op.endswith("convolution") else False
    )
    if call.outputs:
        out_shape = call.outputs[0].shape
    else:  # a trace: stride 1, no padding assumed is wrong; use the given args when present
        stride = call.arg(3, "stride", [1]) or [1]
        padding = call.arg(4, "padding", [0]) or [0]
        spatial = [
            (x.shape[2 + i] + 2 * padding[min(i, len(padding) - 1)] - w.shape[2 + i])
            // stride[min(i, len(stride) - 1)]
            + 1
            for i in range(len(w.shape) - 2)
        ]
        out_shape = (x.shape[0], w.shape[0], *spatial)
    from torch.utils.flop_counter import conv_flop_count  # torch's own convention

    flops = conv_flop_count(list(x.shape), list(w.shape), list(out_shape), transposed)
    return Cost(flops, _read(call.tensors), _write(call, x.dtype), "conv")


# -- attention ------------------------------------------------------------------------------
def causal_pairs(q_len: int, k_len: int) -> int:
    """(query, key) pairs a top-left causal mask keeps: query ``i`` sees keys ``0..i``.

    >>> causal_pairs(4, 4), causal_pairs(2, 8), causal_pairs(8, 2)
    (10, 3, 15)
    """
    full = min(q_len, k_len)
    return full * (full + 1) // 2 + max(0, q_len - k_len) * k_len


def _sdpa(call: OpCall, causal_index: int) -> Cost:
    q, k, v = call.args[0], call.args[1], call.args[2]
    causal = bool(call.arg(causal_index, "is_causal", False))
    *batch_dims, hq, lq, dqk = q.shape
    lk, dv = k.shape[-2], v.shape[-1]
    batch = math.prod(batch_dims)
    pairs = causal_pairs(lq, lk) if causal else lq * lk
    flops = 2 * batch * hq * pairs * (dqk + dv)
    read = _read([q, k, v] + [t for t in call.tensors[3:]])
    out = (
        call.outputs[0].numel * call.outputs[0].itemsize
        if call.outputs
        else batch * hq * lq * dv * q.itemsize
    )
    lse = call.outputs[1].nbytes if len(call.outputs) > 1 and call.outputs[1].numel else 0
    note = ("causal (top-left)" if causal else "full") + (" GQA" if k.shape[-3] != hq else "")
    return Cost(flops, read, out + lse, "attention", note)


_rule(
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_flash_attention_forward",
)(lambda c: _sdpa(c, 4))
_rule("_scaled_dot_product_efficient_attention")(lambda c: _sdpa(c, 6))
_rule("_scaled_dot_product_cudnn_attention")(lambda c: _sdpa(c, 6))
_rule("scaled_dot_product_attention")(lambda c: _sdpa(c, 5))


# -- norms, softmax -------------------------------------------------------------------------
#: FLOPs per normalised element: mean (1), variance (2), normalise (2: sub, mul by rstd),
#: affine (2) for layer/group/batch norm; RMS norm: square+sum (2), scale (1), weight (1).
NORM_FLOPS_PER_ELEMENT = {"layer_norm": 7, "rms_norm": 4, "batch_norm": 4, "group_norm": 7}
#: softmax: max (1), subtract (1), exp (1), sum (1), divide (1)
SOFTMAX_FLOPS_PER_ELEMENT = 5


def _norm(kind: str):
    def fn(call: OpCall) -> Cost:
        x = call.args[0]
        writes = call.outputs[0].nbytes if call.outputs else x.numel * x.itemsize
        stats = sum(o.nbytes for o in call.outputs[1:] if o.numel)
        return Cost(
            NORM_FLOPS_PER_ELEMENT[kind] * x.numel,
            _read(call.tensors),
            writes + stats,
            "norm",
            kind,
        )

    return fn


_rule("native_layer_norm", "layer_norm")(_norm("layer_norm"))
_rule("_fused_rms_norm", "rms_norm")(_norm("rms_norm"))
_rule(
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "batch_norm",
    "_batch_norm_impl_index",
)(_norm("batch_norm"))
_rule("native_group_norm", "group_norm")(_norm("group_norm"))


@_rule("_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax")
def _softmax(call: OpCall) -> Cost:
    x = call.args[0]
    return Cost(SOFTMAX_FLOPS_PER_ELEMENT * x.numel, _read([x]), _write(call, x.dtype), "softmax")


# -- gathers, copies, casts, creation -------------------------------------------------------
@_rule("embedding")
def _embedding(call: OpCall) -> Cost:
    weight, idx = call.args[0], call.args[1]
    row = math.prod(weight.shape[1:]) * weight.itemsize
    rows = call.index_rows if call.index_rows is not None else idx.numel
    return Cost(0, rows * row + idx.nbytes, _write(call, weight.dtype), "gather", "rows touched")


@_rule("index_select", "gather", "index", "take")
def _gather(call: OpCall) -> Cost:
    src = call.args[0]
    indices = [t for t in call.tensors[1:]]
    out_numel = _out_numel(call) if call.outputs else (indices[0].numel if indices else src.numel)
    read = out_numel * src.itemsize + _read(indices)
    return Cost(0, read, out_numel * src.itemsize, "gather", "elements touched")


@_rule("copy_")
def _copy(call: OpCall) -> Cost:
    dst, src = call.args[0], call.args[1]
    return Cost(0, src.nbytes, dst.numel * dst.itemsize, "copy")


@_rule("_to_copy", "clone", "contiguous", "_to_dense", "to")
def _cast(call: OpCall) -> Cost:
    return Cost(0, _read(call.tensors[:1]), _write(call), "copy")


@_rule(
    "index_copy_",
    "index_put_",
    "index_add_",
    "scatter_",
    "scatter_add_",
    "index_copy",
    "index_put",
    "slice_scatter",
    "select_scatter",
)
def _scatter(call: OpCall) -> Cost:
    values = call.tensors[1:]  # in place: the written slice (values) read and written
    moved = _read(values)
    return Cost(
        0,
        moved,
        max((t.nbytes for t in values if t.dtype not in ("int64", "int32")), default=0),
        "copy",
        "slice written",
    )


@_rule(
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "lift_fresh",
    "detach",
    "alias",
    "set_",
    "_local_scalar_dense",
    "item",
    "sym_size",
    "sym_stride",
    "sym_numel",
)
def _free(call: OpCall) -> Cost:
    return Cost(0, 0, 0, "view")


@_rule(
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "fill_",
    "zero_",
    "arange",
    "new_zeros",
    "new_ones",
    "new_full",
    "scalar_tensor",
    "rand",
    "randn",
    "rand_like",
    "randn_like",
    "normal_",
    "uniform_",
    "bernoulli_",
    "randint",
    "tril",
    "triu",
    "eye",
)
def _create(call: OpCall) -> Cost:
    written = (
        call.outputs[0].numel * call.outputs[0].itemsize
        if call.outputs
        else (call.tensors[0].nbytes if call.mutable and call.tensors else 0)
    )
    read = call.tensors[0].nbytes if call.op.endswith(("tril", "triu")) and call.tensors else 0
    return Cost(0, read, written, "create")


# -- pooling, concatenation, padding ------------------------------------------------------
@_rule(
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "max_pool2d",
    "max_pool1d",
    "avg_pool2d",
    "avg_pool1d",
    "avg_pool3d",
    "_adaptive_avg_pool2d",
    "adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "adaptive_max_pool2d",
    "mkldnn_max_pool2d",
)
def _pool(call: OpCall) -> Cost:
    """One comparison or add per input element in each window: ``out · prod(kernel)``
    (adaptive pools: one per input element)."""
    x = call.args[0]
    kernel = call.arg(1, "kernel_size", None)
    out = _out_numel(call) if call.outputs else x.numel
    if (
        isinstance(kernel, (list, tuple))
        and kernel
        and not call.op.split("::")[-1].lstrip("_").startswith("adaptive")
    ):
        k = kernel if len(kernel) > 1 else list(kernel) * (len(x.shape) - 2)
        flops = out * math.prod(k)
    else:
        flops = x.numel
    return Cost(flops, _read([x]), _write(call, x.dtype), "pool")


@_rule(
    "cat",
    "stack",
    "constant_pad_nd",
    "reflection_pad2d",
    "replicate_pad2d",
    "repeat",
    "roll",
    "flip",
    "tile",
    "_unsafe_index",
    "upsample_nearest2d",
    "upsample_bilinear2d",
)
def _move(call: OpCall) -> Cost:
    return Cost(0, _read(call.tensors), _write(call), "copy")


# -- backward ops ------------------------------------------------------------------------------
def _norm_backward(kind: str, factor: int = 2):
    def fn(call: OpCall) -> Cost:
        grad = call.tensors[0]
        return Cost(
            factor * NORM_FLOPS_PER_ELEMENT[kind] * grad.numel,
            _read(call.tensors),
            _write(call),
            "norm",
            f"{kind} backward ({factor}x forward)",
        )

    return fn


_rule("native_layer_norm_backward")(_norm_backward("layer_norm"))
_rule("_fused_rms_norm_backward")(_norm_backward("rms_norm"))
_rule("native_batch_norm_backward", "_native_batch_norm_legit_backward")(
    _norm_backward("batch_norm")
)
_rule("native_group_norm_backward")(_norm_backward("group_norm"))


@_rule("_softmax_backward_data", "_log_softmax_backward_data")
def _softmax_backward(call: OpCall) -> Cost:
    g = call.tensors[0]  # sum(g·y) (2), subtract (1), multiply (1)
    return Cost(4 * g.numel, _read(call.tensors), _write(call), "softmax", "backward")


@_rule("embedding_dense_backward")
def _embedding_backward(call: OpCall) -> Cost:
    g, idx = call.tensors[0], call.tensors[1]  # scatter-add of the touched rows into the table
    return Cost(
        g.numel, g.nbytes + idx.nbytes + g.numel * g.itemsize, _write(call), "gather", "backward"
    )


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
    return Cost(flops, _read(call.tensors), _write(call), kind, "torch flop_registry")


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
    return _generic(call, POINTWISE_FLOPS.get(base, 1) * _out_numel(call), "elementwise")


def _reduction(call: OpCall) -> Cost:
    x = call.tensors[0] if call.tensors else None
    flops = x.numel if x is not None else 0
    return _generic(call, flops, "reduction")


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


def tensor_args(values: Sequence[Any]) -> list[TensorMeta]:
    """The :class:`TensorMeta` among ``values`` (nested lists flattened)."""
    return [t for t in _flatten(values) if isinstance(t, TensorMeta)]
