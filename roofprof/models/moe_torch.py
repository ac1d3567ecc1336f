"""The torch functions of a mixture-of-experts MLP: what the plain-torch MoE model runs and
what ``roofprof profile`` times for the MoE ops (router, top-k, expert GEMMs, combine).

The layout and the loop are transformers' eager experts path (``MixtralExperts``,
``Qwen3MoeExperts``): gate and up fused in one ``[E, 2·I, H]`` tensor, down ``[E, H, I]``; the
router's softmax (float32) and top-k with the top-k weights renormalised; then, per touched
expert, the tokens routed to it gathered, ``gate_up`` GEMM, ``silu(gate)·up``, ``down`` GEMM,
scaled by the routing weight and added into the output (``index_add_``).

:func:`moe_forward` chains them; :data:`PREPARERS` are the TorchOps preparers of the MoE
``Op.fn`` values (``topk_route``, ``moe_linear``, ``moe_silu_mul``, ``moe_combine``), each
timing these same functions on the op's shapes.

>>> import torch
>>> x = torch.randn(5, 16)
>>> router, gate_up, down = torch.randn(4, 16), torch.randn(4, 2 * 8, 16), torch.randn(4, 16, 8)
>>> tuple(moe_forward(x, router, gate_up, down, 2).shape)
(5, 16)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from roofprof.models.llama_torch import silu_mul

__all__ = [
    "PREPARERS",
    "dispatch",
    "expert_combine_",
    "expert_linear",
    "batched_weight_copies",
    "expert_silu_mul",
    "moe_forward",
    "topk_route",
]


def topk_route(
    logits: torch.Tensor, k: int, normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Routing weights ``[T, k]`` (activation dtype) and expert indices ``[T, k]`` of
    ``logits [T, E]``.

    Softmax in float32, top-k, the k weights renormalised to sum 1 (``normalize``), as
    transformers' Mixtral and Qwen3-MoE routers.
    """
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    weights, index = torch.topk(probs, k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype), index


def dispatch(index: torch.Tensor, experts: int) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """Per touched expert: ``(expert, top-k slot, token)`` index pairs (transformers' one-hot
    mask)."""
    mask = F.one_hot(index, num_classes=experts).permute(2, 1, 0)  # [E, k, T]
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    out = []
    for e in hit[:, 0].tolist():
        pos, tok = torch.where(mask[e])
        out.append((e, pos, tok))
    return out


def expert_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One expert's GEMM over the rows routed to it (``F.linear``)."""
    return F.linear(x, weight)


def expert_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate)·up`` of one expert's fused ``[rows, 2·I]`` gate/up output."""
    gate, up = gate_up.chunk(2, dim=-1)
    return silu_mul(gate, up)


def expert_combine_(
    out: torch.Tensor, y: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Add one expert's output ``y``, scaled by each token's routing weight, into ``out`` (in
    place)."""
    return out.index_add_(0, tok, y * weights[tok, pos, None])


def moe_forward(
    x: torch.Tensor,
    router: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    k: int,
    normalize: bool = True,
) -> torch.Tensor:
    """The MoE MLP of ``x [T, H]``: router ``[E, H]``, gate_up ``[E, 2I, H]``, down
    ``[E, H, I]``."""
    weights, index = topk_route(F.linear(x, router), k, normalize)
    out = torch.zeros_like(x)
    for e, pos, tok in dispatch(index, router.shape[0]):
        y = expert_linear(expert_silu_mul(expert_linear(x[tok], gate_up[e])), down[e])
        expert_combine_(out, y, tok, pos, weights)
    return out


# --------------------------------------------------------------------------- TorchOps preparers


def _k(ops: Any) -> tuple[int, int]:
    moe = ops.model.moe
    return moe.experts, moe.experts_per_token


def _route(ops: Any, op: Any):
    experts, k = _k(ops)
    logits = ops.randn((op.m, op.n), op)
    rows = ops.sample_rows(op.m)

    def reference():
        out, _ = topk_route(logits, k)
        p = ops.to_numpy(logits[rows])
        p = np.exp(p - p.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        top = -np.sort(-p, axis=-1)[:, :k]
        return ops.to_numpy(out[rows]), top / top.sum(-1, keepdims=True)

    return ops.prepared(
        op,
        [lambda: dispatch(topk_route(logits, k)[1], experts)],
        reference,
        op.n,
        8,
        "softmax (float32), top-k, renormalise, one-hot dispatch (transformers' eager)",
        [logits],
    )


def _groups(op: Any, device: Any) -> list[torch.Tensor]:
    """Each touched expert's ``op.m`` token rows (disjoint slices of ``m × batch`` rows)."""
    return [torch.arange(g * op.m, (g + 1) * op.m, device=device) for g in range(op.batch)]


def batched_weight_copies(ops: Any, op: Any) -> int:
    """Copies of an op's ``batch × n × k`` weights (a ``moe_linear``'s touched experts, a
    per-head GEMM's heads) to rotate over so each call finds them cold:
    :func:`~roofprof.devices.pool.cold_copies` of their bytes, as for every GEMM.

    Raises:
        ConfigError: the copies would not fit in the memory ``ops`` may use.
    """
    from roofprof.devices.pool import cold_copies

    weight_bytes = op.batch * op.n * op.k * ops.dtype_of(op).itemsize
    copies = cold_copies(weight_bytes, ops.cache_bytes, ops.max_rotation)
    if ops.memory_bytes is not None and copies * weight_bytes > ops.memory_bytes:
        from roofprof.errors import ConfigError

        raise ConfigError(
            f"op {op.name}: weights need {copies * weight_bytes / 1e9:.2f} GB, "
            f"{ops.memory_bytes / 1e9:.2f} GB free"
        )
    return copies


def _moe_linear(ops: Any, op: Any):
    copies = batched_weight_copies(ops, op)
    gathered = op.name == "expert_gate_up_proj"  # the first expert GEMM gathers its tokens' rows
    x = ops.randn((op.m * op.batch, op.k), op)
    groups = _groups(op, x.device)
    xs = [x[tok] for tok in groups]
    sets = [ops.randn((op.batch, op.n, op.k), op, std=op.k**-0.5) for _ in range(copies)]

    def run(w):
        if gathered:
            return [expert_linear(x[tok], w[g]) for g, tok in enumerate(groups)]
        return [expert_linear(xg, w[g]) for g, xg in enumerate(xs)]

    def reference():
        rows = ops.sample_rows(op.m)
        out = ops.to_numpy(run(sets[0])[-1][rows])
        return out, ops.to_numpy(xs[-1][rows]) @ ops.to_numpy(sets[0][-1]).T

    return ops.prepared(
        op,
        [(lambda w=w: run(w)) for w in sets],
        reference,
        op.k,
        op.batch,
        f"F.linear per touched expert ({op.batch} × {op.m} rows"
        f"{', rows gathered' if gathered else ''}), weights rotated over {copies} copies",
        [x, xs, sets],
    )


def _moe_silu_mul(ops: Any, op: Any):
    parts = [ops.randn((op.m, 2 * op.n), op) for _ in range(op.batch)]

    def reference():
        rows = ops.sample_rows(op.m)
        g, u = ops.to_numpy(parts[-1][rows, : op.n]), ops.to_numpy(parts[-1][rows, op.n :])
        return ops.to_numpy(expert_silu_mul(parts[-1])[rows]), g / (1 + np.exp(-g)) * u

    return ops.prepared(
        op,
        [lambda: [expert_silu_mul(p) for p in parts]],
        reference,
        1,
        3 * op.batch,
        "chunk, F.silu(gate) * up per touched expert",
        [parts],
    )


def _moe_combine(ops: Any, op: Any):
    _, k = _k(ops)
    tokens = max(int(round(op.flops / (2.0 * k * op.n))), 1)
    gen = torch.Generator().manual_seed(op.m * 7919 + op.batch)
    ys = [ops.randn((op.m, op.n), op) for _ in range(op.batch)]
    where = ys[0].device
    toks = [torch.randint(0, tokens, (op.m,), generator=gen).to(where) for _ in range(op.batch)]
    pos = [torch.randint(0, k, (op.m,), generator=gen).to(where) for _ in range(op.batch)]
    weights = ops.randn((tokens, k), op)
    out = torch.zeros(tokens, op.n, dtype=ops.dtype_of(op), device=where)

    def call():
        acc = torch.zeros_like(out)
        for y, t, p in zip(ys, toks, pos, strict=True):
            expert_combine_(acc, y, t, p, weights)
        return acc

    def reference():
        acc = np.zeros((tokens, op.n))
        for y, t, p in zip(ys, toks, pos, strict=True):
            np.add.at(
                acc,
                ops.to_numpy(t).astype(int),
                ops.to_numpy(y)
                * ops.to_numpy(weights)[
                    ops.to_numpy(t).astype(int), ops.to_numpy(p).astype(int), None
                ],
            )
        return ops.to_numpy(call()), acc

    return ops.prepared(
        op,
        [call],
        reference,
        k,
        1 + 2 * op.batch,
        "zeros, then per touched expert: scale by routing weight, index_add_",
        [ys, weights],
    )


#: ``Op.fn`` -> preparer ``(torch_ops, op) -> PreparedTorchOp`` for the MoE ops.
PREPARERS = {
    "topk_route": _route,
    "moe_linear": _moe_linear,
    "moe_silu_mul": _moe_silu_mul,
    "moe_combine": _moe_combine,
}
