"""Gemma 2 and Gemma 3 (text) in plain torch, their transformers configs, and their op preparers.

:class:`TorchGemma` is the architecture of transformers' ``Gemma2ForCausalLM`` and
``Gemma3ForCausalLM``: embeddings scaled by ``sqrt(hidden)``, four RMSNorms ``x·(1 + w)``
per layer (:func:`gemma_rms_norm`), GeGLU (:func:`gelu_tanh_mul`), local (sliding-window,
capped cache) and global layers, scores scaled by ``query_pre_attn_scalar ** -0.5``,
Gemma 2's soft-caps (:func:`softcap`; its attention is eager, as transformers runs it),
Gemma 3's per-head q/k norms and local RoPE base. The functions below are what the model
calls and what :data:`PREPARERS` hands to :class:`roofprof.profiling.torch_ops.TorchOps`.

>>> import torch
>>> from roofprof.specs import load_model
>>> import dataclasses
>>> m = load_model("gemma-2-9b")
>>> small = dataclasses.replace(m, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
...                             num_kv_heads=2, head_dim=16, vocab_size=100)
>>> model = build(small, torch.float32, "cpu", "fused")
>>> cache = new_cache(small)
>>> tuple(model(torch.tensor([[1, 2, 3]]), cache).shape), cache.length
((1, 1, 100), 3)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from roofprof.models.llama_torch import (
    KVCache,
    LlamaLayer,
    TorchLlama,
    apply_rope,
    attention_pv,
    attention_scores,
    attention_sdpa,
    attention_softmax,
    causal_mask,
    rope_cos_sin,
    rope_inv_freq,
)
from roofprof.specs import ModelSpec

__all__ = [
    "PREPARERS",
    "GemmaLayer",
    "TorchGemma",
    "attention_gemma_eager",
    "build",
    "embed_scale",
    "gelu_tanh_mul",
    "gemma_head_rms_norm",
    "gemma_rms_norm",
    "hf_config",
    "new_cache",
    "softcap",
]


# --------------------------------------------------------------------------- the ops


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Gemma's RMSNorm as transformers' ``Gemma2RMSNorm``: float32 inside, scaled by ``1 + w``."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).type_as(x)


def gemma_head_rms_norm(
    x: torch.Tensor, weight: torch.Tensor, head_dim: int, eps: float = 1e-6
) -> torch.Tensor:
    """Gemma 3's q/k norm: :func:`gemma_rms_norm` over each head of ``x [..., heads·head_dim]``."""
    return gemma_rms_norm(x.view(*x.shape[:-1], -1, head_dim), weight, eps)


def gelu_tanh_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """GeGLU's ``gelu_tanh(gate) · up`` (transformers' ``gelu_pytorch_tanh``)."""
    return F.gelu(gate, approximate="tanh") * up


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap · tanh(x / cap)`` in transformers' three steps."""
    return torch.tanh(x / cap) * cap


def embed_scale(x: torch.Tensor, hidden_size: int) -> torch.Tensor:
    """The embedding output times ``sqrt(hidden_size)`` (rounded to the activation dtype first)."""
    return x * torch.tensor(hidden_size**0.5, dtype=x.dtype)


def attention_gemma_eager(q, k, v, mask, scale: float, cap: float | None):
    """Eager attention with soft-capped scores: ``QKᵀ·scale``, soft-cap, mask, softmax, ``P·V``."""
    w = attention_scores(q, k, None, scale)
    if cap is not None:
        w = softcap(w, cap)
    if mask is not None:
        w = w + mask
    return attention_pv(attention_softmax(w), v)


# --------------------------------------------------------------------------- the model


class GemmaLayer(LlamaLayer):
    """A Gemma decoder layer (pre- and post-norms, GeGLU, local or global attention)."""

    def __init__(self, m: ModelSpec, dtype, device):
        super().__init__(m, dtype, device)
        self.post_attn_norm = nn.Parameter(torch.zeros(m.hidden_size, dtype=dtype, device=device))
        self.post_mlp_norm = nn.Parameter(torch.zeros(m.hidden_size, dtype=dtype, device=device))

    def qkv(self, hs, eps: float):
        b, s, _ = hs.shape
        d = self.m.head_dim
        if self.m.qk_norm:
            q = gemma_head_rms_norm(self.q_proj(hs), self.q_norm, d, eps).transpose(1, 2)
            k = gemma_head_rms_norm(self.k_proj(hs), self.k_norm, d, eps).transpose(1, 2)
        else:
            q = self.q_proj(hs).view(b, s, -1, d).transpose(1, 2)
            k = self.k_proj(hs).view(b, s, -1, d).transpose(1, 2)
        return q, k, self.v_proj(hs).view(b, s, -1, d).transpose(1, 2)

    def forward(
        self, x, cos, sin, cache: KVCache | None, index: int, attention: str, eps: float, mask
    ):
        g = self.m.gemma
        window = self.m.sliding_window if g.local_layers[index] else None
        q, k, v = self.qkv(gemma_rms_norm(x, self.attn_norm, eps), eps)
        q, k = apply_rope(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(index, k, v, window)
        scale = g.query_pre_attn_scalar**-0.5
        if attention == "fused" and g.attn_logit_softcapping is None:
            a = attention_sdpa(q, k, v, scale=scale, window=window)
        else:
            if mask is not None:
                mask = causal_mask(mask.shape[-2], k.shape[2], mask.dtype, mask.device, window)
            a = attention_gemma_eager(q, k, v, mask, scale, g.attn_logit_softcapping)
        x = x + gemma_rms_norm(self.o_proj(a), self.post_attn_norm, eps)
        hs = gemma_rms_norm(x, self.mlp_norm, eps)
        hs = self.down_proj(gelu_tanh_mul(self.gate_proj(hs), self.up_proj(hs)))
        return x + gemma_rms_norm(hs, self.post_mlp_norm, eps)


class TorchGemma(TorchLlama):
    """Gemma 2 / Gemma 3 (text) in plain torch: ``forward(input_ids, cache)`` → last-token logits.

    Gemma 2's soft-capped attention runs eager whatever ``attention`` says (as transformers).
    """

    layer_class = GemmaLayer
    final_norm = staticmethod(gemma_rms_norm)

    def __init__(self, spec: ModelSpec, **kwargs: Any):
        super().__init__(spec, **kwargs)
        g = spec.gemma
        local = rope_inv_freq(
            spec.head_dim,
            g.rope_local_theta or spec.rope_theta,
            None if g.rope_local_theta else spec.rope_scaling_dict,
        )
        self.register_buffer("inv_freq_local", local.to(self.inv_freq.device), persistent=False)
        if g.attn_logit_softcapping is not None:
            self.attention = "unfused"

    def start(self, input_ids, cache):
        x, positions, mask = super().start(input_ids, cache)
        return embed_scale(x, self.spec.hidden_size), positions, mask

    def head(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().head(x)
        cap = self.spec.gemma.final_logit_softcapping
        return logits if cap is None else softcap(logits, cap)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x, positions, mask = self.start(input_ids, cache)
        tables = {
            False: rope_cos_sin(positions, self.inv_freq, x.dtype),
            True: rope_cos_sin(positions, self.inv_freq_local, x.dtype),
        }
        for i, layer in enumerate(self.layers):
            cos, sin = tables[self.spec.gemma.local_layers[i]]
            x = layer(x, cos, sin, cache, i, self.attention, self.eps, mask)
        return self.head(x)


# -------------------------------------------------------------------------- the family's torch side


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache (local layers keep their last ``sliding_window - 1`` tokens)."""
    return KVCache()


def build(spec: ModelSpec, dtype: torch.dtype, device: str, attention: str) -> nn.Module:
    """The plain-torch Gemma 2 or Gemma 3 model of ``spec``, random weights."""
    return TorchGemma(
        spec,
        dtype=dtype,
        device=device,
        attention=attention,
        rope_theta=spec.rope_theta,
        rope_scaling=spec.rope_scaling_dict,
        eps=spec.rms_norm_eps,
    ).eval()


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of ``Gemma2Config`` / ``Gemma3TextConfig`` for ``spec``.

    >>> from roofprof.specs import load_model
    >>> hf_config(load_model("gemma-3-12b"))["layer_types"][:6]  # doctest: +NORMALIZE_WHITESPACE
    ['sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention',
     'sliding_attention', 'full_attention']
    """
    g = spec.gemma
    kw: dict[str, Any] = dict(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        query_pre_attn_scalar=round(g.query_pre_attn_scalar),
        sliding_window=spec.sliding_window,
        hidden_activation="gelu_pytorch_tanh",
        layer_types=[
            "sliding_attention" if local else "full_attention"
            for local in g.local_layers[: spec.num_layers]
        ],
        attn_logit_softcapping=g.attn_logit_softcapping,
        final_logit_softcapping=g.final_logit_softcapping,
    )
    if spec.rope_scaling_dict:
        kw["rope_scaling"] = spec.rope_scaling_dict
    if g.rope_local_theta is not None:
        kw["rope_local_base_freq"] = g.rope_local_theta
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


# --------------------------------------------------------------------------- preparers


def _elementwise(ops, op, inputs, call, reference, kernels: int, note: str, reduction: int = 1):
    """A prepared elementwise op over ``op.m`` rows: ``call()`` timed, ``reference(rows)`` its
    float64 twin."""
    rows = ops.sample_rows(op.m)

    def check():
        return ops.to_numpy(call()[rows]).reshape(len(rows), -1), reference(rows).reshape(
            len(rows), -1
        )

    return ops.prepared(op, [call], check, reduction, kernels, note, inputs)


def _prepare_norm(ops, op, per_head: bool):
    import numpy as np

    d = ops.model.head_dim if per_head else op.n
    x = ops.randn((op.m, op.n), op)
    w = 0.1 * ops.randn((d,), op)
    eps = 1e-6

    def call():
        return gemma_head_rms_norm(x, w, d, eps) if per_head else gemma_rms_norm(x, w, eps)

    def reference(rows):
        xr = ops.to_numpy(x[rows]).reshape(len(rows), -1, d)
        return (1.0 + ops.to_numpy(w)) * xr / np.sqrt((xr**2).mean(-1, keepdims=True) + eps)

    return _elementwise(
        ops,
        op,
        [x, w],
        call,
        reference,
        7 + (2 if op.dtype != "fp32" else 0),
        "Gemma RMSNorm x·(1+w), float32 inside" + (f", per {d}-wide head" if per_head else ""),
        d,
    )


def _prepare_gelu(ops, op):
    import numpy as np

    g, u = ops.randn((op.m, op.n), op), ops.randn((op.m, op.n), op)

    def reference(rows):
        x, y = ops.to_numpy(g[rows]), ops.to_numpy(u[rows])
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))) * y

    return _elementwise(
        ops, op, [g, u], lambda: gelu_tanh_mul(g, u), reference, 2, "F.gelu(gate, tanh) * up"
    )


def _prepare_softcap(ops, op):
    import numpy as np

    g = ops.model.gemma
    cap = (g.final_logit_softcapping if op.scope == "model" else g.attn_logit_softcapping) or 1.0
    x = ops.randn((op.m, op.n), op, std=cap)

    def reference(rows):
        return cap * np.tanh(ops.to_numpy(x[rows]) / cap)

    return _elementwise(
        ops, op, [x], lambda: softcap(x, cap), reference, 3, f"soft-cap {cap:g}·tanh(x/{cap:g})"
    )


def _prepare_scale(ops, op):
    x = ops.randn((op.m, op.n), op)
    h = ops.model.hidden_size

    def reference(rows):
        return ops.to_numpy(x[rows]) * float(torch.tensor(h**0.5, dtype=x.dtype))

    return _elementwise(
        ops, op, [x], lambda: embed_scale(x, h), reference, 1, "embedding × sqrt(hidden)"
    )


#: ``Op.fn`` -> preparer for :class:`roofprof.profiling.torch_ops.TorchOps`: Gemma's norms, GeGLU,
#: soft-caps.
PREPARERS = {
    "gemma_rmsnorm": lambda ops, op: _prepare_norm(ops, op, per_head=False),
    "gemma_head_rmsnorm": lambda ops, op: _prepare_norm(ops, op, per_head=True),
    "gelu_tanh_mul": _prepare_gelu,
    "softcap": _prepare_softcap,
    "scale": _prepare_scale,
}
