"""A plain-torch Mixtral (the architecture of transformers' ``MixtralForCausalLM``).

Llama's attention (GQA, RoPE, SDPA or eager, a KV cache grown by concatenation: the layer of
:mod:`roofprof.models.llama_torch`), and a mixture-of-experts MLP through
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
>>> logits = build(spec, torch.float32, "cpu", "fused")(torch.tensor([[1, 2, 3]]), cache)
>>> tuple(logits.shape), cache.length
((1, 1, 100), 3)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from roofprof.models.llama_torch import KVCache, LlamaLayer, TorchLlama
from roofprof.models.moe_torch import PREPARERS as MOE_PREPARERS
from roofprof.models.moe_torch import moe_forward
from roofprof.specs import ModelSpec

__all__ = ["PREPARERS", "MoeLayer", "TorchMixtral", "build", "hf_config", "new_cache"]

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
        hidden_size=spec.hidden_size,
        intermediate_size=moe.expert_intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        num_local_experts=moe.experts,
        num_experts_per_tok=moe.experts_per_token,
        sliding_window=spec.sliding_window,
        experts_implementation="eager",
    )
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


def build(spec: ModelSpec, dtype, device, attention: str) -> TorchMixtral:
    """roofprof's plain-torch Mixtral of ``spec`` (random weights)."""
    return TorchMixtral(
        spec,
        dtype=dtype,
        device=device,
        attention=attention,
        rope_theta=spec.rope_theta,
        rope_scaling=spec.rope_scaling_dict,
        eps=spec.rms_norm_eps,
    ).eval()


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache for :class:`TorchMixtral`."""
    return KVCache()


class MoeLayer(LlamaLayer):
    """A Llama layer (with Qwen3's q/k norms, Qwen2's biases, Mistral's window when the spec
    sets them) whose MLP is the mixture of experts of
    :func:`~roofprof.models.moe_torch.moe_forward`."""

    def __init__(self, m: ModelSpec, dtype, device):
        super().__init__(m, dtype, device)
        del self.gate_proj, self.up_proj, self.down_proj  # still on meta: never allocated
        h, moe = m.hidden_size, m.moe
        inter = moe.expert_intermediate_size
        self.router = nn.Parameter(torch.empty(moe.experts, h, dtype=dtype, device=device))
        self.gate_up = nn.Parameter(
            torch.empty(moe.experts, 2 * inter, h, dtype=dtype, device=device)
        )
        self.down = nn.Parameter(torch.empty(moe.experts, h, inter, dtype=dtype, device=device))

    def mlp(self, hs):
        b, s, h = hs.shape
        y = moe_forward(
            hs.reshape(-1, h), self.router, self.gate_up, self.down, self.m.moe.experts_per_token
        )
        return y.view(b, s, h)


class TorchMixtral(TorchLlama):
    """Mixtral in plain torch: ``forward(input_ids, cache)`` → logits of the last token
    ``[b,1,vocab]``.

    :class:`roofprof.models.llama_torch.TorchLlama` with :class:`MoeLayer` layers (``spec.moe``
    gives the experts).
    """

    layer_class = MoeLayer
