"""A plain-torch Mixtral (the architecture of transformers' ``MixtralForCausalLM``).

Llama's attention (GQA, RoPE, SDPA or eager, a KV cache grown by concatenation) through
the functions of :mod:`roofprof.models.llama_torch`, and a mixture-of-experts MLP through
:func:`roofprof.models.moe_torch.moe_forward` (router, top-k, per-expert fused gate/up and
down GEMMs, weighted combine): the same functions ``roofprof profile`` times for each op.
With ``spec.qk_norm`` each q and k head is RMS-normed before RoPE (Qwen3-MoE's attention).

>>> import torch
>>> from roofprof.models.moe_config import MoeSpec
>>> from roofprof.specs import ModelSpec
>>> spec = ModelSpec("tiny-moe", hidden_size=64, intermediate_size=32, num_layers=2, num_heads=4,
...                  num_kv_heads=2, head_dim=16, vocab_size=100, tie_word_embeddings=False,
...                  max_position_embeddings=256, family="mixtral", moe=MoeSpec(4, 2, 32))
>>> from roofprof.models.llama_torch import KVCache
>>> cache = KVCache()
>>> logits = TorchMixtral(spec)(torch.tensor([[1, 2, 3]]), cache)
>>> tuple(logits.shape), cache.length
((1, 1, 100), 3)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from roofprof.models.llama_torch import (
    KVCache,
    apply_rope,
    attention_eager,
    attention_sdpa,
    causal_mask,
    fill_random_,
    rms_norm,
    rope_cos_sin,
    rope_inv_freq,
)
from roofprof.models.moe_torch import PREPARERS as MOE_PREPARERS
from roofprof.models.moe_torch import moe_forward
from roofprof.specs import ModelSpec

__all__ = ["PREPARERS", "TorchMixtral", "build", "hf_config", "new_cache"]

#: TorchOps preparers of the MoE op fns (:mod:`roofprof.models.moe_torch`).
PREPARERS = MOE_PREPARERS


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of transformers' ``MixtralConfig`` for ``spec``.

    The experts run transformers' ``eager`` experts path (the per-expert loop the plain-torch
    model and the op timings share), not its default ``grouped_mm``, which falls back to a
    loop on machines without grouped GEMM kernels anyway.
    """
    moe = spec.moe
    kw: dict[str, Any] = dict(
        hidden_size=spec.hidden_size, intermediate_size=moe.expert_intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, head_dim=spec.head_dim, vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings, rope_theta=spec.rope_theta, rms_norm_eps=spec.rms_norm_eps,
        num_local_experts=moe.experts, num_experts_per_tok=moe.experts_per_token,
        sliding_window=spec.sliding_window, experts_implementation="eager")
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


def build(spec: ModelSpec, dtype, device, attention: str) -> TorchMixtral:
    """roofprof's plain-torch Mixtral of ``spec`` (random weights)."""
    return TorchMixtral(spec, dtype=dtype, device=device, attention=attention,
                        rope_scaling=spec.rope_scaling_dict)


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache for :class:`TorchMixtral`."""
    return KVCache()


class _MoeLayer(nn.Module):
    def __init__(self, m: ModelSpec, dtype, device):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        h, moe = m.hidden_size, m.moe
        inter = moe.expert_intermediate_size
        self.m = m
        self.attn_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.mlp_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        if m.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(m.head_dim, dtype=dtype, device=device))
            self.k_norm = nn.Parameter(torch.ones(m.head_dim, dtype=dtype, device=device))
        self.q_proj = nn.Linear(h, m.q_size, **kw)
        self.k_proj = nn.Linear(h, m.kv_size, **kw)
        self.v_proj = nn.Linear(h, m.kv_size, **kw)
        self.o_proj = nn.Linear(m.q_size, h, **kw)
        self.router = nn.Parameter(torch.empty(moe.experts, h, dtype=dtype, device=device))
        self.gate_up = nn.Parameter(torch.empty(moe.experts, 2 * inter, h, dtype=dtype, device=device))
        self.down = nn.Parameter(torch.empty(moe.experts, h, inter, dtype=dtype, device=device))

    def forward(self, x, cos, sin, cache: KVCache | None, index: int, attention: str, eps: float, mask):
        b, s, h = x.shape
        d = self.m.head_dim
        residual = x
        hs = rms_norm(x, self.attn_norm, eps)
        q = self.q_proj(hs).view(b, s, -1, d)
        k = self.k_proj(hs).view(b, s, -1, d)
        if self.m.qk_norm:
            q, k = rms_norm(q, self.q_norm, eps), rms_norm(k, self.k_norm, eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(hs).view(b, s, -1, d).transpose(1, 2)
        q, k = apply_rope(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(index, k, v)
        a = attention_sdpa(q, k, v) if attention == "fused" else attention_eager(q, k, v, mask)
        x = residual + self.o_proj(a)
        hs = rms_norm(x, self.mlp_norm, eps).view(-1, h)
        y = moe_forward(hs, self.router, self.gate_up, self.down, self.m.moe.experts_per_token)
        return x + y.view(b, s, h)


class TorchMixtral(nn.Module):
    """Mixtral in plain torch: ``forward(input_ids, cache)`` → logits of the last token ``[b,1,vocab]``.

    Args as :class:`roofprof.models.llama_torch.TorchLlama` (``spec.moe`` gives the experts).
    """

    def __init__(self, spec: ModelSpec, *, dtype=torch.float32, device="cpu", attention: str = "fused",
                 rope_theta: float | None = None, rope_scaling: Mapping[str, Any] | None = None,
                 eps: float | None = None, init: bool = True):
        super().__init__()
        self.spec, self.attention = spec, attention
        self.eps = spec.rms_norm_eps if eps is None else eps
        meta = "meta"
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size, dtype=dtype, device=meta)
        self.layers = nn.ModuleList(_MoeLayer(spec, dtype, meta) for _ in range(spec.num_layers))
        self.norm = nn.Parameter(torch.ones(spec.hidden_size, dtype=dtype, device=meta))
        self.lm_head = (None if spec.tie_word_embeddings else
                        nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, dtype=dtype, device=meta))
        self.to_empty(device=device)
        theta = spec.rope_theta if rope_theta is None else rope_theta
        self.register_buffer("inv_freq", rope_inv_freq(spec.head_dim, theta, rope_scaling).to(device),
                             persistent=False)
        with torch.no_grad():
            for i, (name, p) in enumerate(self.named_parameters()):
                if "norm" in name:
                    p.fill_(1.0)
                elif init:
                    fill_random_(p, seed=i + 1)
                else:
                    p.zero_()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        b, s = input_ids.shape
        past = cache.length if cache is not None else 0
        x = self.embed(input_ids)
        positions = (torch.arange(s, device=input_ids.device) + past)[None].expand(b, s)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)
        mask = None
        if self.attention != "fused" and s > 1:
            mask = causal_mask(s, past + s, x.dtype, x.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, self.attention, self.eps, mask)
        x = rms_norm(x, self.norm, self.eps)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x[:, -1:, :], weight)
