"""A tensor-parallel plain-torch Llama (Megatron-style), one rank's shard of a :class:`TorchLlama`.

Per rank ``r`` of ``tp``: q/k/v, gate and up are **column-parallel** (the rank's heads and
intermediate slice), o and down **row-parallel** (the matching input slice) followed by an
all-reduce of the hidden state; KV heads are split when there are at least ``tp`` of them,
else replicated (rank ``r`` keeps the head its query heads use). The embedding is
vocabulary-parallel (rows outside the shard looked up as zeros, then an all-reduce) and the
lm_head produces the rank's ``vocab / tp`` logits, all-gathered. The norms, RoPE and the
residuals run unsplit on every rank. The functions are those of
:mod:`roofprof.models.llama_torch` (the ones ``roofprof profile`` times).

The collectives are passed in (``comm``: ``all_reduce(t)``, ``all_gather(t) -> list``), so
the shard runs under torch.distributed or, in tests, with a fake that sums the shards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from roofprof.errors import ConfigError
from roofprof.models.llama_torch import (
    KVCache,
    TorchLlama,
    apply_rope,
    attention_sdpa,
    rms_norm,
    rope_cos_sin,
    silu_mul,
)
from roofprof.specs import ModelSpec

__all__ = ["Comm", "TPLlama", "check_tp", "shard_spec", "torch_comm"]


@dataclass(frozen=True)
class Comm:
    """The two collectives the shard uses: in-place sum over ranks, and gather to a list."""

    all_reduce: Callable[[torch.Tensor], Any]
    all_gather: Callable[[torch.Tensor], list[torch.Tensor]]


def torch_comm() -> Comm:
    """:class:`Comm` over the default torch.distributed group."""
    import torch.distributed as dist

    def gather(t: torch.Tensor) -> list[torch.Tensor]:
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t.contiguous())
        return parts

    return Comm(dist.all_reduce, gather)


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Refuse a layout this shard cannot run.

    Raises:
        ConfigError: ``tp`` does not divide the heads, the intermediate size or the vocabulary,
            or KV heads neither divide nor are divided by ``tp``.
    """
    bad = [
        (what, n)
        for what, n in (
            ("attention heads", spec.num_heads),
            ("intermediate size", spec.intermediate_size),
            ("vocabulary", spec.vocab_size),
        )
        if n % tp
    ]
    if bad:
        what, n = bad[0]
        raise ConfigError(f"--tp {tp} does not divide the {what} of {spec.id} ({n})")
    kv = spec.num_kv_heads
    if kv % tp and tp % kv:
        raise ConfigError(
            f"--tp {tp}: the {kv} KV heads of {spec.id} can be neither split nor replicated evenly"
        )


def shard_spec(spec: ModelSpec, tp: int) -> ModelSpec:
    """The per-rank shapes as a model of their own (heads, KV heads, intermediate, vocab / tp):
    what the per-op profiler measures for one rank."""
    check_tp(spec, tp)
    return replace(
        spec,
        num_heads=spec.num_heads // tp,
        num_kv_heads=max(spec.num_kv_heads // tp, 1),
        intermediate_size=spec.intermediate_size // tp,
        vocab_size=spec.vocab_size // tp,
    )


class TPLlama(torch.nn.Module):
    """Rank ``rank``'s shard of ``full`` (its weights copied, sliced): ``forward(ids, cache)``
    gives the same last-token logits ``[b, 1, vocab]`` as ``full`` on every rank.

    Raises:
        ConfigError: see :func:`check_tp`.
    """

    def __init__(self, full: TorchLlama, rank: int, tp: int, comm: Comm):
        super().__init__()
        m = full.spec
        check_tp(m, tp)
        self.spec, self.rank, self.tp, self.comm = m, rank, tp, comm
        self.eps, self.attention = full.eps, full.attention
        d, h = m.head_dim, m.hidden_size
        hq = m.num_heads // tp
        q = slice(rank * hq * d, (rank + 1) * hq * d)
        if m.num_kv_heads >= tp:
            hk = m.num_kv_heads // tp
            kv = slice(rank * hk * d, (rank + 1) * hk * d)
        else:  # replicated: the KV head of this rank's query heads
            head = rank * m.num_kv_heads // tp
            kv = slice(head * d, (head + 1) * d)
        i = m.intermediate_size // tp
        mlp = slice(rank * i, (rank + 1) * i)
        v = m.vocab_size // tp
        self.vocab = slice(rank * v, (rank + 1) * v)
        with torch.no_grad():
            self.embed = full.embed.weight[self.vocab].clone()
            head_w = full.embed.weight if full.lm_head is None else full.lm_head.weight
            self.lm_head = self.embed if full.lm_head is None else head_w[self.vocab].clone()
            self.norm = full.norm.detach().clone()
            self.layers = []
            for layer in full.layers:
                self.layers.append(
                    {
                        "attn_norm": layer.attn_norm.detach().clone(),
                        "mlp_norm": layer.mlp_norm.detach().clone(),
                        "q": layer.q_proj.weight[q].clone(),
                        "k": layer.k_proj.weight[kv].clone(),
                        "v": layer.v_proj.weight[kv].clone(),
                        "o": layer.o_proj.weight[:, q].clone(),
                        "gate": layer.gate_proj.weight[mlp].clone(),
                        "up": layer.up_proj.weight[mlp].clone(),
                        "down": layer.down_proj.weight[:, mlp].clone(),
                    }
                )
        self.inv_freq = full.inv_freq
        self.hidden = h

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        b, s = input_ids.shape
        d = self.spec.head_dim
        past = cache.length if cache is not None else 0
        local = input_ids - self.vocab.start
        inside = (local >= 0) & (local < self.embed.shape[0])
        x = F.embedding(local.clamp(0, self.embed.shape[0] - 1), self.embed) * inside[..., None].to(
            self.embed.dtype
        )
        self.comm.all_reduce(x)
        positions = (torch.arange(s, device=input_ids.device) + past)[None].expand(b, s)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)
        for index, w in enumerate(self.layers):
            hs = rms_norm(x, w["attn_norm"], self.eps)
            q = F.linear(hs, w["q"]).view(b, s, -1, d).transpose(1, 2)
            k = F.linear(hs, w["k"]).view(b, s, -1, d).transpose(1, 2)
            v = F.linear(hs, w["v"]).view(b, s, -1, d).transpose(1, 2)
            q, k = apply_rope(q, k, cos, sin)
            if cache is not None:
                k, v = cache.update(index, k, v)
            o = F.linear(attention_sdpa(q, k, v), w["o"])  # [b, s, local heads · d] in
            self.comm.all_reduce(o)
            x = x + o
            hs = rms_norm(x, w["mlp_norm"], self.eps)
            down = F.linear(silu_mul(F.linear(hs, w["gate"]), F.linear(hs, w["up"])), w["down"])
            self.comm.all_reduce(down)
            x = x + down
        x = rms_norm(x, self.norm, self.eps)
        logits = F.linear(x[:, -1:, :], self.lm_head)
        return torch.cat(self.comm.all_gather(logits), dim=-1)
