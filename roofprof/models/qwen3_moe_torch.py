"""The torch side of Qwen3-MoE: transformers' ``Qwen3MoeForCausalLM`` config and the plain-torch
model (:class:`roofprof.models.mixtral_torch.TorchMixtral` with Qwen3's q/k head norms).

The experts are Mixtral's layout and loop (fused ``gate_up``, per-expert eager path,
top-k weights renormalised: ``norm_topk_prob`` true, as every published Qwen3-MoE config
sets it); :data:`PREPARERS` are the MoE op preparers of :mod:`roofprof.models.moe_torch`.
"""

from __future__ import annotations

from typing import Any

import roofprof.models.mixtral_torch as mixtral_torch
from roofprof.errors import ConfigError
from roofprof.models.llama_torch import KVCache
from roofprof.models.moe_torch import PREPARERS as MOE_PREPARERS
from roofprof.specs import ModelSpec

__all__ = ["PREPARERS", "build", "hf_config", "new_cache"]

#: TorchOps preparers of the MoE op fns.
PREPARERS = MOE_PREPARERS


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of transformers' ``Qwen3MoeConfig`` for ``spec`` (eager experts path)."""
    moe = spec.moe
    kw: dict[str, Any] = dict(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        moe_intermediate_size=moe.expert_intermediate_size,
        num_experts=moe.experts,
        num_experts_per_tok=moe.experts_per_token,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        attention_bias=spec.attention_bias,
        experts_implementation="eager",
    )
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


def build(spec: ModelSpec, dtype, device, attention: str) -> mixtral_torch.TorchMixtral:
    """roofprof's plain-torch Qwen3-MoE of ``spec`` (random weights).

    Raises:
        ConfigError: ``attention_bias`` true (the plain-torch model has no q/k/v biases).
    """
    if spec.attention_bias:
        raise ConfigError(
            f"{spec.id}: attention_bias true has no plain-torch Qwen3-MoE model; "
            "use the transformers backend"
        )
    return mixtral_torch.build(spec, dtype, device, attention)


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache."""
    return KVCache()
