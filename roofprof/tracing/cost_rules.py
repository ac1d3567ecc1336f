"""The cost rules of the aten op families: FLOPs and minimum bytes of each family's calls.

Matmuls and convolutions, attention, norms and softmax, gathers, copies, casts and creation,
pooling and concatenation, and their backward ops; each rule is registered under its aten
names in :data:`BUILTIN_RULES`, which :func:`roofprof.tracing.costs.cost_of` consults first
(the conventions are stated in :mod:`roofprof.tracing.costs`).

>>> from roofprof.tracing.op_calls import OpCall, TensorMeta
>>> q = TensorMeta((1, 2, 4, 8), "fp32")
>>> call = OpCall("aten::scaled_dot_product_attention", (q, q, q), {"is_causal": True})
>>> BUILTIN_RULES[call.op](call).flops  # 2·b·h·pairs·(d_qk + d_v), pairs = 10
640
"""

from __future__ import annotations

import math
from typing import Any

from roofprof.tracing.op_calls import (
    Cost,
    CostFn,
    OpCall,
    TensorMeta,
    output_numel,
    read_bytes,
    written_bytes,
)

__all__ = [
    "BUILTIN_RULES",
    "NORM_FLOPS_PER_ELEMENT",
    "SOFTMAX_FLOPS_PER_ELEMENT",
    "causal_pairs",
]

#: aten op name -> its cost rule (the table below fills it)
BUILTIN_RULES: dict[str, CostFn] = {}


def _rule(*names: str):
    def deco(fn: CostFn) -> CostFn:
        for n in names:
            BUILTIN_RULES[f"aten::{n}"] = fn
        return fn

    return deco


# -- matmul and convolution ---------------------------------------------------------------
def _matmul(call: OpCall, a: Any, b: Any) -> Cost:
    m, k = a.shape
    n = b.shape[-1]
    return Cost(2 * m * n * k, read_bytes(call.tensors), written_bytes(call, a.dtype), "matmul")


@_rule("mm", "_scaled_mm")
def _mm(call: OpCall) -> Cost:
    return _matmul(call, call.args[0], call.args[1])


@_rule("addmm")
def _addmm(call: OpCall) -> Cost:  # bias, a, b
    return _matmul(call, call.args[1], call.args[2])


def _written(call: OpCall, numel: int, like: TensorMeta) -> float:
    """Bytes written: the recorded outputs, else ``numel`` elements of ``like``'s dtype."""
    return written_bytes(call) if call.outputs else numel * like.itemsize


@_rule("linear")
def _linear(call: OpCall) -> Cost:  # input [..., k], weight [n, k], bias [n] or None
    """``aten::linear`` as inference mode records it (no decomposition into ``addmm``)."""
    x, w = call.args[0], call.args[1]
    k, n = x.shape[-1], w.shape[0]
    m = math.prod(x.shape[:-1])
    flops = 2 * m * n * k
    return Cost(flops, read_bytes(call.tensors), _written(call, m * n, x), "matmul")


@_rule("mv")
def _mv(call: OpCall) -> Cost:  # matrix [m, k] · vector [k]
    a = call.args[0]
    m, k = a.shape
    return Cost(2 * m * k, read_bytes(call.tensors), _written(call, m, a), "matmul")


@_rule("dot", "vdot")
def _dot(call: OpCall) -> Cost:
    a = call.args[0]
    return Cost(2 * a.numel, read_bytes(call.tensors), _written(call, 1, a), "matmul")


@_rule("matmul")
def _matmul_any(call: OpCall) -> Cost:
    """``aten::matmul`` with torch's rules: 1-D operands promoted, batch dims broadcast."""
    a, b = call.args[0], call.args[1]
    sa = list(a.shape) if len(a.shape) > 1 else [1, *a.shape]
    sb = list(b.shape) if len(b.shape) > 1 else [*b.shape, 1]
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch_a, batch_b = sa[:-2], sb[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = [1] * (rank - len(batch_a)) + batch_a
    batch_b = [1] * (rank - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    out = batch * m * n
    return Cost(2 * out * k, read_bytes(call.tensors), _written(call, out, a), "matmul")


@_rule("bmm")
def _bmm(call: OpCall) -> Cost:
    a, b = call.args[0], call.args[1]
    bs, m, k = a.shape
    n = b.shape[-1]
    return Cost(
        2 * bs * m * n * k, read_bytes(call.tensors), written_bytes(call, a.dtype), "matmul"
    )


@_rule("baddbmm")
def _baddbmm(call: OpCall) -> Cost:
    a, b = call.args[1], call.args[2]
    bs, m, k = a.shape
    n = b.shape[-1]
    return Cost(
        2 * bs * m * n * k, read_bytes(call.tensors), written_bytes(call, a.dtype), "matmul"
    )


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
    return Cost(flops, read_bytes(call.tensors), written_bytes(call, x.dtype), "conv")


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
    read = read_bytes([q, k, v] + [t for t in call.tensors[3:]])
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
            read_bytes(call.tensors),
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
    return Cost(
        SOFTMAX_FLOPS_PER_ELEMENT * x.numel,
        read_bytes([x]),
        written_bytes(call, x.dtype),
        "softmax",
    )


# -- gathers, copies, casts, creation -------------------------------------------------------
@_rule("embedding")
def _embedding(call: OpCall) -> Cost:
    weight, idx = call.args[0], call.args[1]
    row = math.prod(weight.shape[1:]) * weight.itemsize
    rows = call.index_rows if call.index_rows is not None else idx.numel
    return Cost(
        0, rows * row + idx.nbytes, written_bytes(call, weight.dtype), "gather", "rows touched"
    )


@_rule("detach_", "_unsafe_view")
def _no_data_moved(call: OpCall) -> Cost:  # an in-place detach, a view with its own tags
    return Cost(0, 0, 0, "view")


@_rule("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only")
def _embedding_bag(call: OpCall) -> Cost:  # weight, indices, offsets, ..., mode
    """Rows gathered and reduced per bag (sum/mean: one add per looked-up element)."""
    weight, idx = call.args[0], call.args[1]
    width = math.prod(weight.shape[1:])
    rows = idx.numel
    bags = idx.shape[0] if len(idx.shape) == 2 else max(call.args[2].numel, 1)
    read = rows * width * weight.itemsize + read_bytes(call.tensors[1:])
    written = bags * width * weight.itemsize
    return Cost(rows * width, read, written, "gather", "rows touched, reduced per bag")


@_rule("index_select", "gather", "index", "take")
def _gather(call: OpCall) -> Cost:
    src = call.args[0]
    indices = [t for t in call.tensors[1:]]
    out_numel = output_numel(call) if call.outputs else (indices[0].numel if indices else src.numel)
    read = out_numel * src.itemsize + read_bytes(indices)
    return Cost(0, read, out_numel * src.itemsize, "gather", "elements touched")


@_rule("copy_")
def _copy(call: OpCall) -> Cost:
    dst, src = call.args[0], call.args[1]
    return Cost(0, src.nbytes, dst.numel * dst.itemsize, "copy")


@_rule("_to_copy", "clone", "contiguous", "_to_dense", "to")
def _cast(call: OpCall) -> Cost:
    return Cost(0, read_bytes(call.tensors[:1]), written_bytes(call), "copy")


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
    moved = read_bytes(values)
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
    out = output_numel(call) if call.outputs else x.numel
    if (
        isinstance(kernel, (list, tuple))
        and kernel
        and not call.op.split("::")[-1].lstrip("_").startswith("adaptive")
    ):
        k = kernel if len(kernel) > 1 else list(kernel) * (len(x.shape) - 2)
        flops = out * math.prod(k)
    else:
        flops = x.numel
    return Cost(flops, read_bytes([x]), written_bytes(call, x.dtype), "pool")


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
    return Cost(0, read_bytes(call.tensors), written_bytes(call), "copy")


# -- backward ops ------------------------------------------------------------------------------
def _norm_backward(kind: str, factor: int = 2):
    def fn(call: OpCall) -> Cost:
        grad = call.tensors[0]
        return Cost(
            factor * NORM_FLOPS_PER_ELEMENT[kind] * grad.numel,
            read_bytes(call.tensors),
            written_bytes(call),
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
    return Cost(4 * g.numel, read_bytes(call.tensors), written_bytes(call), "softmax", "backward")


@_rule("embedding_dense_backward")
def _embedding_backward(call: OpCall) -> Cost:
    g, idx = call.tensors[0], call.tensors[1]  # scatter-add of the touched rows into the table
    return Cost(
        g.numel,
        g.nbytes + idx.nbytes + g.numel * g.itemsize,
        written_bytes(call),
        "gather",
        "backward",
    )
