"""A plain-torch DeepSeek-V3 that runs MLA as roofprof counts it, and its op preparers.

The torch side of :mod:`roofprof.models.deepseek_v3`: the same ops, in the same form. The MLA
functions, cache and preparers live in :mod:`roofprof.models.mla_torch`; this module adds
the router, the model, its transformers config and re-exports them.

* **MLA cache** (:class:`MlaCache`): per layer one ``[b, t, kv_lora_rank + qk_rope_head_dim]``
  tensor, the normed latent and the RoPE'd shared key of every token (nothing else), grown
  by concatenation like transformers' ``DynamicCache``.
* **Prefill** (several tokens): ``kv_b_proj`` decompresses the latent to every head's
  no-RoPE key and value, and :func:`mla_prefill_attention` runs causal SDPA with head dims
  ``qk_nope + qk_rope`` (scores) and ``v_head_dim`` (values).
* **Decode** (one token per sequence): weight absorption as engines run it. ``q_absorb``
  maps each head's no-RoPE query into the latent space (:func:`head_matmul` with ``kv_b``'s
  key half), :func:`mla_decode` attends over the cache directly (one shared KV head: the
  heads are query rows of one SDPA, as FlashMLA does), ``v_absorb`` maps the result to each
  head's value (:func:`head_matmul` with ``kv_b``'s value half), then ``o_proj``.
* **RoPE** (:func:`mla_rope`): on the ``qk_rope_head_dim`` part of each query head and the
  one shared key, interleaved pairs (transformers' ``rope_interleave`` default, DeepSeek's
  layout). YaRN's frequency interpolation is not applied (the same kernels run; with
  random weights the values do not matter); its attention-scale factor is.
* **MoE** (:func:`deepseek_route`): sigmoid scores, ``e_score_correction_bias`` for the
  choice, group-limited top-k (``n_group`` groups ranked by their two best experts,
  ``topk_group`` kept), the chosen sigmoid scores renormalised and scaled by
  ``routed_scaling_factor`` (the router GEMM in the activation dtype, scores in float32;
  transformers keeps the router weight in float32: the same in fp32 runs); then
  transformers' eager experts loop
  (:mod:`roofprof.models.moe_torch`) and the always-on shared experts. The first
  ``first_k_dense_replace`` layers keep a dense MLP.

:data:`PREPARERS` time these very functions on each op's shapes (``rope``, ``sdpa`` for the
prefill attention, ``head_matmul``, ``mla_decode``, ``topk_route``), each checked first
against a float64 reference.

transformers' own ``DeepseekV3ForCausalLM`` (5.x) caches the latent too, but decompresses
the whole cache with ``kv_b_proj`` at every decode step and attends per head: not the form
counted here. Hence ``validate --backend auto`` runs this model (:data:`AUTO_BACKEND`) and
says so; ``--backend hf`` runs transformers' class and states the difference
(:data:`BACKEND_NOTES`).

>>> import torch
>>> spec = tiny_spec()
>>> cache = new_cache(spec)
>>> model = build(spec, torch.float32, "cpu", "fused")
>>> tuple(model(torch.tensor([[1, 2, 3]]), cache).shape), cache.length
((1, 1, 100), 3)
>>> tuple(model(torch.tensor([[4]]), cache).shape), tuple(cache.entries[0].shape)
((1, 1, 100), (1, 4, 24))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from roofprof.errors import ConfigError
from roofprof.models.llama_torch import (
    fill_weights_,
    rms_norm,
    rope_cos_sin,
    rope_inv_freq,
    silu_mul,
)
from roofprof.models.mla_torch import (
    MLA_PREPARERS,
    MlaCache,
    head_matmul,
    mla_attention_scale,
    mla_decode,
    mla_prefill_attention,
    mla_rope,
)
from roofprof.models.moe_torch import PREPARERS as MOE_PREPARERS
from roofprof.models.moe_torch import dispatch, expert_combine_, expert_linear, expert_silu_mul
from roofprof.specs import ModelSpec

__all__ = [
    "AUTO_BACKEND",
    "BACKEND_NOTES",
    "PREPARERS",
    "ROUTED_SCALING_FACTOR",
    "MlaCache",
    "TorchDeepseekV3",
    "build",
    "deepseek_route",
    "head_matmul",
    "hf_config",
    "mla_decode",
    "mla_prefill_attention",
    "mla_rope",
    "new_cache",
    "tiny_spec",
]

#: DeepSeek-V3's published ``routed_scaling_factor`` (the spec does not carry it; its value
#: changes no kernel).
ROUTED_SCALING_FACTOR = 2.5
#: The backend ``validate --backend auto`` runs for this family: the plain-torch model, the
#: only one of the two that runs the counted (weight-absorbed) decode.
AUTO_BACKEND = "torch"
#: Per backend, the note ``validate`` adds to its result (text and JSON).
BACKEND_NOTES = {
    "torch": "deepseek_v3 runs roofprof's plain-torch model, the counted MLA form: the cache holds "
    "only the latent + RoPE key; prefill decompresses it (kv_b_proj), decode is "
    "weight-absorbed (q_absorb, latent attention, v_absorb); transformers' "
    "DeepseekV3ForCausalLM decompresses the whole cache every decode step instead",
    "hf": "transformers' DeepseekV3ForCausalLM caches the latent but decompresses the whole cache "
    "with kv_b_proj and attends per head at every decode step; roofprof counts the "
    "weight-absorbed engine form, so decode residuals here include that difference",
}


# --------------------------------------------------------------------------- the router


def deepseek_route(
    logits: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    groups: tuple[int, int],
    scale: float = ROUTED_SCALING_FACTOR,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router: weights ``[T,k]`` (activation dtype) and expert indices ``[T,k]``.

    Sigmoid of ``logits [T,E]`` (float32); the choice adds ``bias`` (``e_score_correction_bias``);
    the ``n_group`` groups are ranked by the sum of their two best choice scores and the
    best ``topk_group`` kept (``groups``); top-k among their experts; the chosen experts'
    sigmoid scores renormalised to sum 1 and multiplied by ``scale`` (transformers'
    ``DeepseekV3TopkRouter``).
    """
    n_group, topk_group = groups
    t, e = logits.shape
    scores = logits.float().sigmoid()
    choice = scores + bias
    group_scores = choice.view(t, n_group, e // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    keep = group_mask.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e)
    choice = choice.masked_fill(~keep.bool(), float("-inf"))
    index = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, index)
    weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * scale
    return weights.to(logits.dtype), index


# --------------------------------------------------------------------------- the model


def _groups(spec: ModelSpec) -> tuple[int, int]:
    groups = spec.moe.groups or (1, 1)
    if spec.moe.experts % groups[0] or spec.moe.experts // groups[0] < 2:
        raise ConfigError(
            f"{spec.id}: {spec.moe.experts} routed experts do not split into n_group "
            f"{groups[0]} groups of at least 2"
        )
    return groups


class MlaLayer(nn.Module):
    """One DeepSeek-V3 layer: MLA attention, then a dense MLP or the MoE (routed + shared)."""

    def __init__(self, m: ModelSpec, dtype, device, moe: bool):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        h, a, heads = m.hidden_size, m.mla, m.num_heads
        self.m, self.is_moe, self.scale = m, moe, mla_attention_scale(m)
        self.attn_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.mlp_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        if a.q_lora_rank:
            self.q_a_proj = nn.Linear(h, a.q_lora_rank, **kw)
            self.q_a_norm = nn.Parameter(torch.ones(a.q_lora_rank, dtype=dtype, device=device))
            self.q_b_proj = nn.Linear(a.q_lora_rank, heads * a.qk_head_dim, **kw)
        else:
            self.q_proj = nn.Linear(h, heads * a.qk_head_dim, **kw)
        self.kv_a_proj = nn.Linear(h, a.kv_lora_rank + a.qk_rope_head_dim, **kw)
        self.kv_a_norm = nn.Parameter(torch.ones(a.kv_lora_rank, dtype=dtype, device=device))
        self.kv_b_proj = nn.Linear(
            a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim), **kw
        )
        self.o_proj = nn.Linear(heads * a.v_head_dim, h, **kw)
        if moe:
            e, inter = m.moe.experts, m.moe.expert_intermediate_size
            self.router = nn.Parameter(torch.empty(e, h, dtype=dtype, device=device))
            self.register_buffer("router_bias", torch.zeros(e, dtype=torch.float32, device=device))
            self.gate_up = nn.Parameter(torch.empty(e, 2 * inter, h, dtype=dtype, device=device))
            self.down = nn.Parameter(torch.empty(e, h, inter, dtype=dtype, device=device))
            inter = m.moe.shared_experts * m.moe.shared_intermediate_size
            self.groups = _groups(m)
        else:
            inter = m.intermediate_size
        if inter:
            self.gate_proj, self.up_proj = nn.Linear(h, inter, **kw), nn.Linear(h, inter, **kw)
            self.down_proj = nn.Linear(inter, h, **kw)
        self.w_uk: torch.Tensor | None = None
        self.w_uv: torch.Tensor | None = None

    def absorb_(self) -> None:
        """Split ``kv_b_proj``'s weight into the absorbed per-head matrices (call after
        changing it): ``w_uk [h, nope, c]`` (q_absorb) and ``w_uv [h, c, v]`` (v_absorb)."""
        a, heads = self.m.mla, self.m.num_heads
        w = self.kv_b_proj.weight.detach().view(
            heads, a.qk_nope_head_dim + a.v_head_dim, a.kv_lora_rank
        )
        self.w_uk = w[:, : a.qk_nope_head_dim].contiguous()
        self.w_uv = w[:, a.qk_nope_head_dim :].transpose(1, 2).contiguous()

    def attention(self, x, cos, sin, cache: MlaCache | None, index: int, eps: float):
        a, heads = self.m.mla, self.m.num_heads
        b, s, _ = x.shape
        c, nope = a.kv_lora_rank, a.qk_nope_head_dim
        if a.q_lora_rank:
            q = self.q_b_proj(rms_norm(self.q_a_proj(x), self.q_a_norm, eps))
        else:
            q = self.q_proj(x)
        q = q.view(b, s, heads, a.qk_head_dim)
        compressed = self.kv_a_proj(x)
        latent = rms_norm(compressed[..., :c], self.kv_a_norm, eps)
        q_rope, k_rope = mla_rope(q[..., nope:], compressed[..., c:], cos, sin)
        entry = torch.cat([latent, k_rope], dim=-1)
        full = cache.update(index, entry) if cache is not None else entry
        if s > 1:  # prefill: decompress the latents, attend with per-head keys and values
            kv = self.kv_b_proj(full[..., :c]).view(b, full.shape[1], heads, -1)
            out = mla_prefill_attention(q[..., :nope], q_rope, kv, full[..., c:], self.scale)
        else:  # decode: weight absorption over the latent cache
            if self.w_uk is None:
                self.absorb_()
            q_latent = head_matmul(q[..., :nope].reshape(b * s, heads, nope), self.w_uk)
            lat = mla_decode(q_latent.view(b, s, heads, c), q_rope, full, self.scale)
            out = head_matmul(lat.view(b * s, heads, c), self.w_uv).reshape(b, s, -1)
        return self.o_proj(out)

    def mlp(self, hs):
        if not self.is_moe:
            return self.down_proj(silu_mul(self.gate_proj(hs), self.up_proj(hs)))
        b, s, h = hs.shape
        x = hs.reshape(-1, h)
        weights, index = deepseek_route(
            F.linear(x, self.router), self.router_bias, self.m.moe.experts_per_token, self.groups
        )
        out = torch.zeros_like(x)
        for e, pos, tok in dispatch(index, self.router.shape[0]):
            y = expert_linear(expert_silu_mul(expert_linear(x[tok], self.gate_up[e])), self.down[e])
            expert_combine_(out, y, tok, pos, weights)
        if self.m.moe.shared_experts:
            out = out + self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))
        return out.view(b, s, h)

    def forward(self, x, cos, sin, cache, index: int, eps: float):
        x = x + self.attention(rms_norm(x, self.attn_norm, eps), cos, sin, cache, index, eps)
        return x + self.mlp(rms_norm(x, self.mlp_norm, eps))


class TorchDeepseekV3(nn.Module):
    """DeepSeek-V3 in plain torch: ``forward(input_ids, cache)`` → last-token logits
    ``[b,1,vocab]``.

    Attention is always SDPA (the counted ops are fused whatever the counting says:
    :mod:`roofprof.models.deepseek_v3`). Weights random
    (:func:`~roofprof.models.llama_torch.fill_weights_`; the router bias zero, as transformers
    initialises it). After loading other weights call :meth:`absorb_`.
    """

    def __init__(self, spec: ModelSpec, *, dtype=torch.float32, device="cpu", init: bool = True):
        super().__init__()
        self.spec, self.attention, self.eps = spec, "fused", spec.rms_norm_eps
        meta = "meta"
        self.embed = nn.Embedding(
            spec.vocab_size,
            spec.hidden_size,
            _weight=torch.empty(spec.vocab_size, spec.hidden_size, dtype=dtype, device=meta),
        )
        dense = spec.moe.dense_layers
        self.layers = nn.ModuleList(
            MlaLayer(spec, dtype, meta, i >= dense) for i in range(spec.num_layers)
        )
        self.norm = nn.Parameter(torch.ones(spec.hidden_size, dtype=dtype, device=meta))
        self.lm_head = (
            None
            if spec.tie_word_embeddings
            else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, dtype=dtype, device=meta)
        )
        self.to_empty(device=device)
        rope = spec.mla.qk_rope_head_dim
        self.register_buffer(
            "inv_freq", rope_inv_freq(rope, spec.rope_theta).to(device), persistent=False
        )
        fill_weights_(self, init)
        with torch.no_grad():
            for layer in self.layers:
                if layer.is_moe:
                    layer.router_bias.zero_()
        self.absorb_()

    def absorb_(self) -> None:
        """Recompute every layer's absorbed ``kv_b`` halves from ``kv_b_proj``."""
        for layer in self.layers:
            layer.absorb_()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: MlaCache | None = None) -> torch.Tensor:
        b, s = input_ids.shape
        past = cache.length if cache is not None else 0
        x = self.embed(input_ids)
        positions = (torch.arange(s, device=input_ids.device) + past)[None].expand(b, s)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, self.eps)
        x = rms_norm(x, self.norm, self.eps)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x[:, -1:, :], weight)


# ---------------------------------------------------------------------- the family's torch side


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of transformers' ``DeepseekV3Config`` for ``spec`` (eager experts path).

    Group-limited routing as the spec's ``n_group``/``topk_group`` (1/1: none), the published
    ``routed_scaling_factor`` and ``norm_topk_prob``, interleaved RoPE.
    """
    moe, a = spec.moe, spec.mla
    n_group, topk_group = moe.groups or (1, 1)
    kw: dict[str, Any] = dict(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        moe_intermediate_size=moe.expert_intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        n_shared_experts=moe.shared_experts,
        n_routed_experts=moe.experts,
        num_experts_per_tok=moe.experts_per_token,
        first_k_dense_replace=moe.dense_layers,
        n_group=n_group,
        topk_group=topk_group,
        norm_topk_prob=True,
        routed_scaling_factor=ROUTED_SCALING_FACTOR,
        kv_lora_rank=a.kv_lora_rank,
        q_lora_rank=a.q_lora_rank,
        qk_rope_head_dim=a.qk_rope_head_dim,
        qk_nope_head_dim=a.qk_nope_head_dim,
        v_head_dim=a.v_head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        rope_interleave=True,
        experts_implementation="eager",
    )
    if spec.rope_scaling is not None:
        kw["rope_scaling"] = spec.rope_scaling_dict
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


def build(spec: ModelSpec, dtype, device, attention: str) -> TorchDeepseekV3:
    """roofprof's plain-torch DeepSeek-V3 of ``spec`` (random weights; attention always fused).

    Raises:
        ConfigError: the routed experts do not split into ``n_group`` groups of two or more.
    """
    _groups(spec)
    return TorchDeepseekV3(spec, dtype=dtype, device=device).eval()


def new_cache(spec: ModelSpec) -> MlaCache:
    """An empty MLA cache (latent + RoPE key per token and layer)."""
    return MlaCache()


def tiny_spec(**changes: Any) -> ModelSpec:
    """A tiny DeepSeek-V3 spec (3 layers, the first dense; 8 experts in 4 groups, top-2 of 2
    groups, one shared expert) for examples and tests."""
    import dataclasses

    from roofprof.models.moe_config import MlaSpec, MoeSpec

    spec = ModelSpec(
        "tiny-deepseek-v3",
        64,
        96,
        3,
        4,
        4,
        24,
        100,
        False,
        256,
        family="deepseek_v3",
        rope_theta=1e4,
        rms_norm_eps=1e-6,
        moe=MoeSpec(
            8,
            2,
            32,
            shared_experts=1,
            shared_intermediate_size=32,
            dense_layers=1,
            router_bias=True,
            groups=(4, 2),
        ),
        mla=MlaSpec(32, 16, 16, 8, 16),
    )
    return dataclasses.replace(spec, **changes)


# --------------------------------------------------------------------------- TorchOps preparers


def _prep_route(ops: Any, op: Any):
    moe = ops.model.moe
    k, groups = moe.experts_per_token, _groups(ops.model)
    logits = ops.randn((op.m, op.n), op)
    bias = 0.01 * ops.randn((op.n,), op).float()
    rows = ops.sample_rows(op.m)

    def reference():
        weights, _ = deepseek_route(logits, bias, k, groups)
        n_group, topk_group = groups
        scores = 1.0 / (1.0 + np.exp(-ops.to_numpy(logits[rows])))
        choice = scores + ops.to_numpy(bias)
        per = choice.reshape(len(rows), n_group, -1)
        group_scores = np.sort(per, axis=-1)[..., -2:].sum(-1)
        keep = np.argsort(-group_scores, axis=-1)[:, :topk_group]
        masked = np.full_like(per, -np.inf)
        for i, g in enumerate(keep):
            masked[i, g] = per[i, g]
        top = np.argsort(-masked.reshape(len(rows), -1), axis=-1)[:, :k]
        w = np.take_along_axis(scores, top, axis=-1)
        w = w / (w.sum(-1, keepdims=True) + 1e-20) * ROUTED_SCALING_FACTOR
        return np.sort(ops.to_numpy(weights[rows]), axis=-1), np.sort(w, axis=-1)

    return ops.prepared(
        op,
        [lambda: dispatch(deepseek_route(logits, bias, k, groups)[1], moe.experts)],
        reference,
        op.n,
        24,
        f"deepseek_route: sigmoid + bias, {groups[1]} of {groups[0]} groups, top-{k}, "
        "renormalised, scaled; one-hot dispatch (transformers' eager)",
        [logits, bias],
    )


#: ``Op.fn`` -> TorchOps preparer: the MoE ones (:mod:`roofprof.models.moe_torch`) with
#: DeepSeek's router, and the MLA ops (:mod:`roofprof.models.mla_torch`).
PREPARERS = {**MOE_PREPARERS, "topk_route": _prep_route, **MLA_PREPARERS}
