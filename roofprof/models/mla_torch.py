"""Multi-head latent attention (MLA, DeepSeek-V3) in plain torch, as roofprof counts it.

* **Cache** (:class:`MlaCache`): per layer one ``[b, t, kv_lora_rank + qk_rope_head_dim]``
  tensor, the normed latent and the RoPE'd shared key of every token (nothing else), grown
  by concatenation like transformers' ``DynamicCache``.
* **Prefill** (several tokens): :func:`mla_prefill_attention`, causal SDPA over the keys and
  values ``kv_b_proj`` decompresses from the latents.
* **Decode** (one token per sequence): weight absorption, :func:`head_matmul` (one GEMM per
  head, ``q_absorb``/``v_absorb``) around :func:`mla_decode` (the heads as query rows of one
  SDPA over the latent cache, as FlashMLA does).
* **RoPE** (:func:`mla_rope`): interleaved pairs on each query head's rope part and the one
  shared key; :func:`mla_attention_scale` the scores' scale (with YaRN's ``mscale``).

:data:`MLA_PREPARERS` time these very functions on each op's shapes (``rope``, ``sdpa``,
``head_matmul``, ``mla_decode``), each checked first against a float64 reference. The
DeepSeek-V3 model built from them is :mod:`roofprof.models.deepseek_v3_torch`.

>>> import torch
>>> cache = MlaCache()
>>> tuple(cache.update(0, torch.zeros(1, 3, 24)).shape), cache.length
((1, 3, 24), 3)
>>> tuple(head_matmul(torch.ones(5, 2, 3), torch.ones(2, 3, 4)).shape)
(5, 2, 4)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from roofprof.models.llama_torch import causal_mask, rope_cos_sin, rope_inv_freq
from roofprof.models.moe_torch import batched_weight_copies
from roofprof.specs import ModelSpec

__all__ = [
    "MLA_PREPARERS",
    "MlaCache",
    "head_matmul",
    "mla_attention_scale",
    "mla_decode",
    "mla_prefill_attention",
    "mla_rope",
]


# --------------------------------------------------------------------------- the ops


def mla_rope(q_rope: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Interleaved RoPE on ``q_rope [b,s,h,r]`` and the shared ``k_rope [b,s,r]``.

    ``cos, sin [b,s,r]`` as :func:`~roofprof.models.llama_torch.rope_cos_sin` gives them
    (frequencies repeated); pairs ``(x0, x1), (x2, x3), ...`` rotate by one frequency each and
    come out de-interleaved (transformers' ``apply_rotary_pos_emb_interleave``).
    """
    half = cos.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]

    def rotate(x, c, s):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    return rotate(q_rope, c.unsqueeze(2), s.unsqueeze(2)), rotate(k_rope, c, s)


def mla_prefill_attention(
    q_nope: torch.Tensor, q_rope: torch.Tensor, kv: torch.Tensor, k_rope: torch.Tensor, scale: float
) -> torch.Tensor:
    """Causal attention over decompressed keys and values.

    ``q_nope [b,s,h,n]``, ``q_rope [b,s,h,r]`` (RoPE'd), ``kv [b,t,h,n+v]`` (``kv_b_proj`` of
    the latents), ``k_rope [b,t,r]`` (RoPE'd, shared by the heads) → ``[b,s,h·v]``. Keys are
    ``[k_nope, k_rope]`` per head, values ``kv``'s last ``v`` columns; SDPA, causal (query
    ``i`` at position ``t - s + i``).
    """
    b, s, h, n = q_nope.shape
    t = kv.shape[1]
    q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2)
    k = torch.cat(
        [kv[..., :n], k_rope[:, :, None].expand(b, t, h, k_rope.shape[-1])], dim=-1
    ).transpose(1, 2)
    v = kv[..., n:].transpose(1, 2)
    if t == s:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, scale=scale)
    else:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_mask(s, t, q.dtype, q.device), scale=scale
        )
    return out.transpose(1, 2).reshape(b, s, -1)


def head_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One GEMM per head: ``x [T,h,k] · w [h,k,n] → [T,h,n]`` (``torch.bmm`` over the heads)."""
    return torch.bmm(x.transpose(0, 1), w).transpose(0, 1)


def mla_decode(
    q_latent: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, scale: float
) -> torch.Tensor:
    """Weight-absorbed MLA attention over the latent cache.

    ``q_latent [b,s,h,c]`` (``q_absorb``'s output), ``q_rope [b,s,h,r]``, ``cache [b,t,c+r]``
    (latent + RoPE key) → ``[b,s,h,c]``. All heads share the one cached "head", so they run as
    ``s·h`` query rows of a single-head SDPA (keys: the whole cache rows, values: their
    latent part), causal over the last ``s`` positions when ``s > 1``.
    """
    b, s, h, c = q_latent.shape
    t = cache.shape[1]
    q = torch.cat([q_latent, q_rope], dim=-1).view(b, 1, s * h, -1)
    k, v = cache[:, None], cache[:, None, :, :c]
    mask = None
    if s > 1:
        mask = causal_mask(s, t, q.dtype, q.device).repeat_interleave(h, dim=2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.view(b, s, h, c)


class MlaCache:
    """The MLA KV cache: per layer ``[b, t, kv_lora_rank + qk_rope_head_dim]`` (latent + RoPE key).

    ``nbytes`` per token and layer is ``(kv_lora_rank + qk_rope_head_dim) × element size``.
    """

    def __init__(self) -> None:
        self.entries: list[torch.Tensor | None] = []
        self.seen = 0

    @property
    def length(self) -> int:
        return self.seen

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds (all layers)."""
        return sum(t.numel() * t.element_size() for t in self.entries if t is not None)

    def update(self, layer: int, entry: torch.Tensor) -> torch.Tensor:
        """Append ``entry [b, s, c + r]`` to ``layer``'s cache; return the whole cache of it."""
        while len(self.entries) <= layer:
            self.entries.append(None)
        old = self.entries[layer]
        full = entry.contiguous() if old is None else torch.cat([old, entry], dim=1)
        self.entries[layer] = full
        if layer == 0:
            self.seen += entry.shape[1]
        return full


def mla_attention_scale(spec: ModelSpec) -> float:
    """``qk_head_dim ** -0.5``, times YaRN's ``mscale²`` when the config's RoPE scaling sets
    ``mscale_all_dim`` (transformers' ``yarn_apply_mscale``)."""
    scale = spec.mla.qk_head_dim**-0.5
    rs = spec.rope_scaling_dict or {}
    if rs.get("rope_type", rs.get("type", "default")) != "default" and rs.get("mscale_all_dim"):
        factor = float(rs.get("factor", 1.0))
        if factor > 1:
            m = 0.1 * float(rs["mscale_all_dim"]) * math.log(factor) + 1.0
            scale *= m * m
    return scale


# --------------------------------------------------------------------------- TorchOps preparers


def _rows_of(op: Any) -> tuple[int, int]:
    """(sequences, tokens per sequence) of an op's ``m`` activation rows."""
    return (op.m, 1) if op.phase == "decode" else (1, op.m)


def _prep_rope(ops: Any, op: Any):
    a, heads = ops.model.mla, ops.model.num_heads
    b, s = _rows_of(op)
    q = ops.randn((b, s, heads, a.qk_head_dim), op)  # q_b_proj's output: RoPE on its last r columns
    compressed = ops.randn((b, s, a.kv_lora_rank + a.qk_rope_head_dim), op)  # kv_a_proj's output
    pos = (torch.arange(s, device=q.device) + 7)[None].expand(b, s)
    cos, sin = rope_cos_sin(pos, rope_inv_freq(a.qk_rope_head_dim, ops.model.rope_theta), q.dtype)
    nope, c = a.qk_nope_head_dim, a.kv_lora_rank

    def call():
        return mla_rope(q[..., nope:], compressed[..., c:], cos, sin)

    def reference():
        qr, kr = call()
        half = a.qk_rope_head_dim // 2
        cs, sn = ops.to_numpy(cos)[..., :half], ops.to_numpy(sin)[..., :half]

        def rot(x, cs, sn):
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return np.concatenate([x1 * cs - x2 * sn, x2 * cs + x1 * sn], axis=-1)

        ref_q = rot(ops.to_numpy(q)[..., nope:], cs[:, :, None], sn[:, :, None])
        ref_k = rot(ops.to_numpy(compressed)[..., c:], cs, sn)
        out = np.concatenate(
            [ops.to_numpy(qr).reshape(b * s, -1), ops.to_numpy(kr).reshape(b * s, -1)], axis=1
        )
        return out, np.concatenate([ref_q.reshape(b * s, -1), ref_k.reshape(b * s, -1)], axis=1)

    return ops.prepared(
        op,
        [call],
        reference,
        1,
        12,
        "mla_rope: interleaved RoPE on every head's rope part and the shared key (views)",
        [q, compressed, cos, sin],
    )


def _attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """float64 causal attention ``q [s,d], k [t,d], v [t,e] → [s,e]`` (query i at t - s + i)."""
    scores = q @ k.T * scale
    s, t = scores.shape
    scores = np.where(np.arange(t)[None] <= np.arange(s)[:, None] + (t - s), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _prep_prefill_attention(ops: Any, op: Any):
    a, heads = ops.model.mla, ops.model.num_heads
    b, s = max(1, op.batch // heads), op.m
    nope, r, c, v = a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank, a.v_head_dim
    scale = mla_attention_scale(ops.model)
    q = ops.randn((b, s, heads, nope + r), op)
    kv = ops.randn((b, s, heads * (nope + v)), op).view(b, s, heads, nope + v)  # kv_b_proj's output
    entry = ops.randn((b, s, c + r), op)  # the cache rows: latent + RoPE key

    def call():
        return mla_prefill_attention(q[..., :nope], q[..., nope:], kv, entry[..., c:], scale)

    hs = ops.sample_rows(heads, 4)

    def reference():
        out = ops.to_numpy(call()).reshape(b, s, heads, v)[0][:, hs]
        qn, kvn, kr = ops.to_numpy(q[0]), ops.to_numpy(kv[0]), ops.to_numpy(entry[0, :, c:])
        ref = [
            _attention_ref(
                qn[:, h], np.concatenate([kvn[:, h, :nope], kr], axis=-1), kvn[:, h, nope:], scale
            )
            for h in hs
        ]
        return out.transpose(1, 0, 2), np.stack(ref)

    return ops.prepared(
        op,
        [call],
        reference,
        s,
        6,
        "mla_prefill_attention: keys [k_nope, shared k_rope] per head, causal SDPA "
        f"(head dims {nope + r}/{v})",
        [q, kv, entry],
    )


def _prep_head_matmul(ops: Any, op: Any):
    heads = op.batch
    copies = batched_weight_copies(ops, op)
    if op.name == "q_absorb":  # the no-RoPE part of q_b_proj's output, a strided view
        x = ops.randn((op.m, heads, op.k + ops.model.mla.qk_rope_head_dim), op)[..., : op.k]
    else:
        x = ops.randn((op.m, heads, op.k), op)
    ws = [ops.randn((heads, op.k, op.n), op, std=op.k**-0.5) for _ in range(copies)]
    rows = ops.sample_rows(op.m)

    def reference():
        out = ops.to_numpy(head_matmul(x, ws[0])[rows])
        return out, np.einsum("thk,hkn->thn", ops.to_numpy(x[rows]), ops.to_numpy(ws[0]))

    return ops.prepared(
        op,
        [(lambda w=w: head_matmul(x, w)) for w in ws],
        reference,
        op.k,
        1,
        f"head_matmul: torch.bmm over {heads} heads (absorbed kv_b half), "
        f"weights rotated over {copies} copies",
        [x, ws],
    )


def _prep_mla_decode(ops: Any, op: Any):
    a, heads = ops.model.mla, ops.model.num_heads
    b, s, keys = max(1, op.batch // heads), op.m, op.n
    c, r = a.kv_lora_rank, a.qk_rope_head_dim
    scale = mla_attention_scale(ops.model)
    q_latent = ops.randn((b * s, heads, c), op).view(b, s, heads, c)
    q_rope = ops.randn((b, s, heads, a.qk_head_dim), op)[..., a.qk_nope_head_dim :]
    old = ops.randn((b, keys - s, c + r), op) if keys > s else None
    entry = ops.randn((b, s, c + r), op)

    def cache():
        return entry.contiguous() if old is None else torch.cat([old, entry], dim=1)

    def call():
        return mla_decode(q_latent, q_rope, cache(), scale)

    hs = ops.sample_rows(heads, 4)

    def reference():
        out = ops.to_numpy(call())[0][:, hs]
        full = ops.to_numpy(cache()[0])
        ql, qr = ops.to_numpy(q_latent[0]), ops.to_numpy(q_rope[0])
        ref = [
            _attention_ref(np.concatenate([ql[:, h], qr[:, h]], axis=-1), full, full[:, :c], scale)
            for h in hs
        ]
        return out.transpose(1, 0, 2), np.stack(ref)

    return ops.prepared(
        op,
        [call],
        reference,
        keys,
        6,
        f"cache append by concatenation, then mla_decode: {heads} heads as query rows "
        f"of one SDPA over the latent cache of {keys} tokens",
        [q_latent, q_rope, old, entry],
    )


#: ``Op.fn`` -> TorchOps preparer of the MLA ops.
MLA_PREPARERS = {
    "rope": _prep_rope,
    "sdpa": _prep_prefill_attention,
    "head_matmul": _prep_head_matmul,
    "mla_decode": _prep_mla_decode,
}
