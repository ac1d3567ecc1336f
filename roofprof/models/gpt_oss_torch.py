"""gpt-oss in plain torch, its transformers config and the preparers of the ops it runs its own way.

:class:`TorchGptOss` is the architecture of transformers' ``GptOssForCausalLM`` (5.x): RMSNorm
with the weight applied in float32 (:func:`gpt_oss_rms_norm`), GQA attention with q/k/v/o
biases, RoPE on half-width tables (:func:`apply_rope_halves`, YaRN inverse frequencies and
attention factor: :func:`rope_parameters`), sliding-window (cache capped at ``sliding_window``)
and full layers per ``layer_types`` (:func:`layer_types`), one learned sink logit per head in
each softmax (:func:`sink_softmax`; transformers runs gpt-oss eager, ``_supports_sdpa`` is
false, and so does this model whatever ``attention`` says), and the MoE MLP of
:func:`moe_forward`: a biased router, top-k on the logits then a softmax over those k
(:func:`route_topk_softmax`), per touched expert ``x @ W + b`` on the ``[E, H, 2I]``
interleaved gate/up and ``[E, I, H]`` down layouts (:func:`expert_proj`), the clamped SwiGLU
``(clamp(up) + 1) · g·σ(1.702·g)`` with ``g = min(gate, 7)`` (:func:`clamped_swiglu`), and the
weighted ``index_add_`` combine of :mod:`roofprof.models.moe_torch`.

:data:`PREPARERS` time these same functions for the ops whose torch code is gpt-oss's own
(``rmsnorm``, ``rope``, ``sdpa``, ``softmax``, ``pv_matmul``, ``topk_route``, ``moe_linear``,
``moe_clamped_swiglu``); ``linear``, ``qk_matmul``, ``moe_combine`` and the rest are the
shared ones. A fused ``attention`` op (``--attention fused``) is timed as the eager
attention with sinks the model runs (neither torch's SDPA nor transformers takes sinks).

The published experts are MXFP4; on the machine at hand the weights are random fp32/bf16
(``--dtype``), so a measurement here is of that precision, not of MXFP4 kernels.

>>> import dataclasses
>>> import torch
>>> from roofprof.specs import load_model
>>> m = load_model("gpt-oss-20b")
>>> small = dataclasses.replace(m, num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
...     head_dim=16, vocab_size=100, sliding_window=4,
...     moe=dataclasses.replace(m.moe, experts=4, experts_per_token=2, expert_intermediate_size=32),
...     pattern=dataclasses.replace(m.pattern, sliding_layers=1))
>>> cache = new_cache(small)
>>> model = build(small, torch.float32, "cpu", "fused")
>>> tuple(model(torch.tensor([[1, 2, 3, 4, 5, 6]]), cache).shape)
(1, 1, 100)
>>> layer_types(small), cache.length
(['sliding_attention', 'full_attention'], 6)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from roofprof.models.llama_torch import (
    KVCache,
    LlamaLayer,
    TorchLlama,
    attention_pv,
    attention_scores,
    causal_mask,
    rope_inv_freq,
)
from roofprof.models.moe_torch import PREPARERS as MOE_PREPARERS
from roofprof.models.moe_torch import batched_weight_copies, dispatch, expert_combine_
from roofprof.specs import ModelSpec

__all__ = [
    "PREPARERS",
    "SWIGLU_ALPHA",
    "SWIGLU_LIMIT",
    "GptOssLayer",
    "TorchGptOss",
    "apply_rope_halves",
    "attention_sinks",
    "build",
    "clamped_swiglu",
    "expert_proj",
    "gpt_oss_rms_norm",
    "hf_config",
    "layer_types",
    "moe_forward",
    "new_cache",
    "rope_parameters",
    "rope_tables",
    "route_topk_softmax",
    "sink_softmax",
]

#: transformers' ``GptOssConfig`` defaults (the published configs do not change them; the
#: ``swiglu_limit`` field is not read into the spec).
SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0


# --------------------------------------------------------------------------- the ops


def gpt_oss_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``GptOssRMSNorm``: normalised in float32, times the weight in float32, then cast back."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h).to(x.dtype)


def rope_parameters(spec: ModelSpec) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[head_dim/2]`` and the cos/sin factor of ``spec``'s RoPE.

    ``rope_type: yarn`` as transformers' ``_compute_yarn_parameters`` (gpt-oss: factor 32,
    beta 32/1, ``truncate`` false; factor ``0.1·ln(factor) + 1``); any other scaling as
    :func:`roofprof.models.llama_torch.rope_inv_freq`, factor 1.
    """
    d, base = spec.head_dim, spec.rope_theta
    scaling = spec.rope_scaling_dict or {}
    if scaling.get("rope_type", scaling.get("type")) != "yarn":
        return rope_inv_freq(d, base, scaling or None), 1.0
    factor = float(scaling["factor"])
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    old = float(scaling["original_max_position_embeddings"])

    def corr(rotations: float) -> float:
        return d * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = (
        corr(float(scaling.get("beta_fast") or 32)),
        corr(float(scaling.get("beta_slow") or 1)),
    )
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    pos = base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    extra = 1 - torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    return (1.0 / (factor * pos)) * (1 - extra) + (1.0 / pos) * extra, float(attention_factor)


def rope_tables(positions: torch.Tensor, inv_freq: torch.Tensor, factor: float, dtype: torch.dtype):
    """``cos, sin [b,s,head_dim/2]`` (times the YaRN factor) for ``positions [b,s]``."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device, torch.float32)
    return (freqs.cos() * factor).to(dtype), (freqs.sin() * factor).to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = torch.chunk(x, 2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def apply_rope_halves(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """gpt-oss RoPE on ``q [b,h,s,d]``, ``k [b,kvh,s,d]`` with half-width ``cos, sin [b,s,d/2]``."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def sink_softmax(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Softmax of masked ``scores [b,h,s,t]`` with one sink logit per head joining each row
    (in the scores' dtype, max subtracted first, as transformers): ``[b,h,s,t]``, the sink
    column dropped (a view)."""
    b, _, s, _ = scores.shape
    logits = torch.cat([scores, sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    return F.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]


def attention_sinks(q, k, v, mask, sinks: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Eager attention with sinks: ``QKᵀ·scale + mask``, :func:`sink_softmax`, ``P·V`` →
    ``[b,s,h·d]``."""
    return attention_pv(sink_softmax(attention_scores(q, k, mask, scale), sinks), v)


def route_topk_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """gpt-oss's router: top-k of ``logits [T, E]``, softmax over those k (their dtype)."""
    top, index = torch.topk(logits, k, dim=-1)
    return F.softmax(top, dim=1, dtype=top.dtype), index


def expert_proj(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One expert's projection ``x @ weight + bias`` (weight ``[in, out]``, as transformers
    stores it)."""
    return x @ weight + bias


def clamped_swiglu(
    gate_up: torch.Tensor, limit: float = SWIGLU_LIMIT, alpha: float = SWIGLU_ALPHA
) -> torch.Tensor:
    """``(clamp(up, ±limit) + 1) · g·σ(alpha·g)``, ``g = min(gate, limit)``; gate/up interleaved."""
    gate, up = gate_up[..., ::2], gate_up[..., 1::2]
    gate = gate.clamp(min=None, max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


def moe_forward(
    x: torch.Tensor,
    router: torch.Tensor,
    router_bias: torch.Tensor,
    gate_up: torch.Tensor,
    gate_up_bias: torch.Tensor,
    down: torch.Tensor,
    down_bias: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """gpt-oss's MoE MLP of ``x [T, H]``: router ``[E, H]`` (+ bias), gate_up ``[E, H, 2I]``,
    down ``[E, I, H]``."""
    weights, index = route_topk_softmax(F.linear(x, router, router_bias), k)
    out = torch.zeros_like(x)
    for e, pos, tok in dispatch(index, router.shape[0]):
        y = expert_proj(
            clamped_swiglu(expert_proj(x[tok], gate_up[e], gate_up_bias[e])), down[e], down_bias[e]
        )
        expert_combine_(out, y, tok, pos, weights)
    return out


# --------------------------------------------------------------------------- the model


def layer_types(spec: ModelSpec) -> list[str]:
    """Each layer's ``sliding_attention`` / ``full_attention``.

    The spec keeps how many layers slide (``pattern.sliding_layers``), not which: the
    published alternation (sliding first) when the count is that of the alternation, else
    the sliding layers spread evenly. Timings do not depend on the order.
    """
    n = spec.num_layers
    sliding = spec.pattern.sliding_layers if spec.pattern is not None else 0
    if sliding == (n + 1) // 2:
        flags = [i % 2 == 0 for i in range(n)]
    else:
        flags = [(i + 1) * sliding // n > i * sliding // n for i in range(n)]
    return ["sliding_attention" if f else "full_attention" for f in flags]


class GptOssLayer(LlamaLayer):
    """A gpt-oss decoder layer: biased GQA attention with sinks, then the MoE MLP."""

    def __init__(self, m: ModelSpec, dtype, device):
        super().__init__(m, dtype, device)
        del self.gate_proj, self.up_proj, self.down_proj  # still on meta: never allocated
        h, moe = m.hidden_size, m.moe
        inter, experts = moe.expert_intermediate_size, moe.experts
        kw = dict(dtype=dtype, device=device)
        self.o_proj = nn.Linear(m.q_size, h, bias=m.pattern is not None and m.pattern.o_bias, **kw)
        self.sinks = nn.Parameter(torch.empty(m.num_heads, **kw))
        self.router = nn.Parameter(torch.empty(experts, h, **kw))
        self.router_bias = nn.Parameter(torch.empty(experts, **kw))
        self.gate_up = nn.Parameter(torch.empty(experts, h, 2 * inter, **kw))
        self.gate_up_bias = nn.Parameter(torch.empty(experts, 2 * inter, **kw))
        self.down = nn.Parameter(torch.empty(experts, inter, h, **kw))
        self.down_bias = nn.Parameter(torch.empty(experts, h, **kw))
        self.window: int | None = None  # set by TorchGptOss for the sliding layers

    def mlp(self, hs):
        b, s, h = hs.shape
        y = moe_forward(
            hs.reshape(-1, h),
            self.router,
            self.router_bias,
            self.gate_up,
            self.gate_up_bias,
            self.down,
            self.down_bias,
            self.m.moe.experts_per_token,
        )
        return y.view(b, s, h)

    def forward(
        self, x, cos, sin, cache: KVCache | None, index: int, attention: str, eps: float, mask
    ):
        q, k, v = self.qkv(gpt_oss_rms_norm(x, self.attn_norm, eps), eps)
        q, k = apply_rope_halves(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(index, k, v, self.window)
        if mask is not None and (self.window is not None or mask.shape[-1] != k.shape[2]):
            mask = causal_mask(mask.shape[-2], k.shape[2], mask.dtype, mask.device, self.window)
        x = x + self.o_proj(attention_sinks(q, k, v, mask, self.sinks))
        return x + self.mlp(gpt_oss_rms_norm(x, self.mlp_norm, eps))


class TorchGptOss(TorchLlama):
    """gpt-oss in plain torch: ``forward(input_ids, cache)`` → last-token logits ``[b,1,vocab]``.

    Attention is always eager with sinks (as transformers runs it); ``attention`` is ignored.
    """

    layer_class = GptOssLayer
    final_norm = staticmethod(gpt_oss_rms_norm)

    def __init__(self, spec: ModelSpec, **kwargs: Any):
        super().__init__(spec, **kwargs)
        self.attention = "unfused"
        inv_freq, self.rope_factor = rope_parameters(spec)
        self.register_buffer("inv_freq", inv_freq.to(self.inv_freq.device), persistent=False)
        for layer, kind in zip(self.layers, layer_types(spec), strict=True):
            layer.window = spec.sliding_window if kind == "sliding_attention" else None

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x, positions, mask = self.start(input_ids, cache)
        cos, sin = rope_tables(positions, self.inv_freq, self.rope_factor, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, self.attention, self.eps, mask)
        return self.head(x)


# -------------------------------------------------------------------------- the family's torch side


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache (sliding layers keep their last ``sliding_window - 1`` tokens)."""
    return KVCache()


def build(spec: ModelSpec, dtype: torch.dtype, device: str, attention: str) -> TorchGptOss:
    """roofprof's plain-torch gpt-oss of ``spec`` (random weights; attention always eager)."""
    return TorchGptOss(
        spec,
        dtype=dtype,
        device=device,
        attention=attention,
        rope_theta=spec.rope_theta,
        rope_scaling=spec.rope_scaling_dict,
        eps=spec.rms_norm_eps,
    ).eval()


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of transformers' ``GptOssConfig`` for ``spec`` (eager experts path).

    >>> from roofprof.specs import load_model
    >>> kw = hf_config(load_model("gpt-oss-20b"))
    >>> kw["rope_parameters"]["rope_type"], kw["layer_types"][:2], kw["experts_implementation"]
    ('yarn', ['sliding_attention', 'full_attention'], 'eager')
    """
    moe = spec.moe
    rope = {**(spec.rope_scaling_dict or {"rope_type": "default"}), "rope_theta": spec.rope_theta}
    kw: dict[str, Any] = dict(
        hidden_size=spec.hidden_size,
        intermediate_size=moe.expert_intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=spec.tie_word_embeddings,
        rms_norm_eps=spec.rms_norm_eps,
        num_local_experts=moe.experts,
        num_experts_per_tok=moe.experts_per_token,
        sliding_window=spec.sliding_window or 128,
        layer_types=layer_types(spec),
        attention_bias=spec.attention_bias,
        rope_parameters=rope,
        swiglu_limit=SWIGLU_LIMIT,
        experts_implementation="eager",
    )
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


# --------------------------------------------------------------------------- preparers


def _rows_split(op) -> tuple[int, int]:
    """(batch, tokens per sequence) of an op's activation rows."""
    return (op.m, 1) if op.phase == "decode" else (1, op.m)


def _prepare_norm(ops, op):
    x = ops.randn((op.m, op.n), op)
    w = 1.0 + 0.1 * ops.randn((op.n,), op)
    rows = ops.sample_rows(op.m)
    eps = ops.model.rms_norm_eps

    def reference():
        xr = ops.to_numpy(x[rows])
        ref = ops.to_numpy(w) * xr / np.sqrt((xr**2).mean(-1, keepdims=True) + eps)
        return ops.to_numpy(gpt_oss_rms_norm(x, w, eps)[rows]), ref

    return ops.prepared(
        op,
        [lambda: gpt_oss_rms_norm(x, w, eps)],
        reference,
        op.n,
        6 + (2 if op.dtype != "fp32" else 0),
        "GptOssRMSNorm (float32 inside, weight too)",
        [x, w],
    )


def _prepare_rope(ops, op):
    m = ops.model
    d = m.head_dim
    b, s = _rows_split(op)
    ql, kl = ops.randn((b, s, m.q_size), op), ops.randn((b, s, m.kv_size), op)
    inv_freq, factor = rope_parameters(m)
    pos = (torch.arange(s) + 7)[None].expand(b, s).to(ql.device)
    cos, sin = rope_tables(pos, inv_freq, factor, ops.dtype_of(op))

    def call():
        return apply_rope_halves(
            ql.view(b, s, -1, d).transpose(1, 2), kl.view(b, s, -1, d).transpose(1, 2), cos, sin
        )

    def reference():
        q, _ = call()
        qn = ops.to_numpy(ql).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
        c, sn = ops.to_numpy(cos)[:, None], ops.to_numpy(sin)[:, None]
        x1, x2 = qn[..., : d // 2], qn[..., d // 2 :]
        return ops.to_numpy(q), np.concatenate([x1 * c - x2 * sn, x2 * c + x1 * sn], axis=-1)

    return ops.prepared(
        op,
        [call],
        reference,
        1,
        12,
        "gpt-oss RoPE on half-width tables (chunk, 4 mul, sub, add, cat on q and k)",
        [ql, kl, cos, sin],
    )


def _window(ops, op) -> int | None:
    return ops.model.sliding_window if op.name.endswith("_local") else None


def _sinks(ops, op):
    return ops.randn((ops.model.num_heads,), op)


def _np_sink_attention(q, k, v, sinks, mask) -> np.ndarray:
    """float64 attention with sinks: q ``[b,h,s,d]``, k/v ``[b,kvh,t,d]`` (GQA), mask ``[s,t]``
    or None."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    sink = np.broadcast_to(sinks.reshape(1, -1, 1, 1), (*scores.shape[:-1], 1))
    top = np.maximum(scores.max(-1, keepdims=True), sink)
    e, es = np.exp(scores - top), np.exp(sink - top)
    return (e / (e.sum(-1, keepdims=True) + es)) @ v


def _allowed(s: int, t: int, window: int | None) -> np.ndarray:
    rows, cols = np.arange(s)[:, None] + (t - s), np.arange(t)[None, :]
    ok = cols <= rows
    return ok & (cols > rows - window) if window is not None else ok


def _prepare_attention(ops, op):
    """A fused-counted ``attention`` op, timed as what gpt-oss runs: the cache append, then
    :func:`attention_sinks` (eager, with the sinks)."""
    m = ops.model
    heads, kvh, d = m.num_heads, m.num_kv_heads, m.head_dim
    b, s, keys = max(1, op.batch // heads), op.m, op.n
    q = ops.randn((b, s, heads, d), op).transpose(1, 2)
    k_new, v_new = (ops.randn((b, s, kvh, d), op).transpose(1, 2) for _ in range(2))
    ctx = keys - s if op.phase == "decode" else 0
    k_cache, v_cache = (ops.randn((b, kvh, ctx, d), op) for _ in range(2)) if ctx else (None, None)
    sinks = _sinks(ops, op)
    window = _window(ops, op)
    mask = causal_mask(s, keys, ops.dtype_of(op), q.device, window) if s > 1 else None

    def kv():
        if k_cache is None:
            return k_new.contiguous(), v_new.contiguous()
        return torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)

    def call():
        k, v = kv()
        return attention_sinks(q, k, v, mask, sinks)

    hs = ops.sample_rows(heads, 4)

    def reference():
        out = ops.to_numpy(call()).reshape(b, s, heads, d)[:, :, hs]
        k, v = kv()
        rep = heads // kvh
        kvs = [h // rep for h in hs]
        allowed = _allowed(s, keys, window) if s > 1 else None
        ref = _np_sink_attention(
            ops.to_numpy(q[:, hs]),
            ops.to_numpy(k[:, kvs]),
            ops.to_numpy(v[:, kvs]),
            ops.to_numpy(sinks)[hs],
            allowed,
        )
        return out, ref.transpose(0, 2, 1, 3)

    note = (
        "eager attention with sinks "
        "(transformers runs gpt-oss eager: no fused kernel takes sinks), "
        + ("causal over the prompt" if s > 1 else f"over a KV cache of {keys} tokens")
        + (f", window {window}" if window else "")
        + ", cache append by concatenation"
    )
    return ops.prepared(
        op, [call], reference, keys, 9, note, [q, k_new, v_new, k_cache, v_cache, sinks]
    )


def _prepare_softmax(ops, op):
    heads = ops.model.num_heads
    b = max(1, op.m // heads) if op.phase == "decode" else 1
    s, keys = op.m // (b * heads), op.n
    scores = ops.randn((b, heads, s, keys), op)
    if s > 1:
        scores = scores + causal_mask(s, keys, ops.dtype_of(op), scores.device, _window(ops, op))
    sinks = _sinks(ops, op)

    def reference():
        x = ops.to_numpy(scores[:, :2])
        sk = np.broadcast_to(ops.to_numpy(sinks)[:2].reshape(1, -1, 1, 1), (*x.shape[:-1], 1))
        top = np.maximum(x.max(-1, keepdims=True), sk)
        e = np.exp(x - top)
        return ops.to_numpy(sink_softmax(scores, sinks)[:, :2]), e / (
            e.sum(-1, keepdims=True) + np.exp(sk - top)
        )

    return ops.prepared(
        op,
        [lambda: sink_softmax(scores, sinks)],
        reference,
        keys,
        4,
        "softmax with one sink logit per head (cat, max, subtract, softmax; eager)",
        [scores, sinks],
    )


def _prepare_pv(ops, op):
    m = ops.model
    heads, kvh, d = m.num_heads, m.num_kv_heads, m.head_dim
    b, s, keys = max(1, op.batch // heads), op.m, op.k
    full = torch.softmax(ops.randn((b, heads, s, keys + 1), op).float(), dim=-1).to(
        ops.dtype_of(op)
    )
    p = full[..., :-1]  # the sink column dropped: a view, as sink_softmax returns it
    v = ops.randn((b, kvh, keys, d), op)

    def reference():
        out = ops.to_numpy(attention_pv(p, v)).reshape(b, s, heads, d).transpose(0, 2, 1, 3)
        return out, ops.to_numpy(p) @ np.repeat(ops.to_numpy(v), heads // kvh, axis=1)

    return ops.prepared(
        op,
        [lambda: attention_pv(p, v)],
        reference,
        keys,
        3,
        "P·V on the sink softmax's view, V repeated for GQA (eager)",
        [full, v],
    )


def _prepare_route(ops, op):
    moe = ops.model.moe
    experts, k = moe.experts, moe.experts_per_token
    logits = ops.randn((op.m, op.n), op)
    rows = ops.sample_rows(op.m)

    def reference():
        weights, _ = route_topk_softmax(logits, k)
        top = -np.sort(-ops.to_numpy(logits[rows]), axis=-1)[:, :k]
        e = np.exp(top - top.max(-1, keepdims=True))
        return ops.to_numpy(weights[rows]), e / e.sum(-1, keepdims=True)

    return ops.prepared(
        op,
        [lambda: dispatch(route_topk_softmax(logits, k)[1], experts)],
        reference,
        k,
        7,
        "top-k on the logits, softmax over the k, one-hot dispatch (transformers' eager)",
        [logits],
    )


def _prepare_expert_proj(ops, op):
    copies = batched_weight_copies(ops, op)
    gathered = op.name == "expert_gate_up_proj"  # the first expert GEMM gathers its tokens' rows
    x = ops.randn((op.m * op.batch, op.k), op)
    groups = [torch.arange(g * op.m, (g + 1) * op.m, device=x.device) for g in range(op.batch)]
    xs = [x[tok] for tok in groups]
    sets = [
        (
            ops.randn((op.batch, op.k, op.n), op, std=op.k**-0.5),
            ops.randn((op.batch, op.n), op, std=0.1),
        )
        for _ in range(copies)
    ]

    def run(w, bias):
        if gathered:
            return [expert_proj(x[tok], w[g], bias[g]) for g, tok in enumerate(groups)]
        return [expert_proj(xg, w[g], bias[g]) for g, xg in enumerate(xs)]

    def reference():
        rows = ops.sample_rows(op.m)
        w, bias = sets[0]
        out = ops.to_numpy(run(w, bias)[-1][rows])
        return out, ops.to_numpy(xs[-1][rows]) @ ops.to_numpy(w[-1]) + ops.to_numpy(bias[-1])

    return ops.prepared(
        op,
        [(lambda ws=ws: run(*ws)) for ws in sets],
        reference,
        op.k,
        2 * op.batch,
        f"x @ W + b per touched expert ({op.batch} × {op.m} rows"
        f"{', rows gathered' if gathered else ''}), weights rotated over {copies} copies",
        [x, xs, sets],
    )


def _prepare_swiglu(ops, op):
    parts = [ops.randn((op.m, 2 * op.n), op, std=4.0) for _ in range(op.batch)]

    def reference():
        rows = ops.sample_rows(op.m)
        x = ops.to_numpy(parts[-1][rows])
        g, u = np.minimum(x[:, ::2], SWIGLU_LIMIT), np.clip(x[:, 1::2], -SWIGLU_LIMIT, SWIGLU_LIMIT)
        return ops.to_numpy(clamped_swiglu(parts[-1])[rows]), (u + 1) * g / (
            1 + np.exp(-SWIGLU_ALPHA * g)
        )

    return ops.prepared(
        op,
        [lambda: [clamped_swiglu(p) for p in parts]],
        reference,
        1,
        7 * op.batch,
        "clamp gate and up, gate·σ(1.702·gate)·(up + 1) per touched expert",
        [parts],
    )


#: ``Op.fn`` -> preparer for :class:`roofprof.profiling.torch_ops.TorchOps` (these win over the
#: shared ones): the MoE ones of :mod:`roofprof.models.moe_torch` (``moe_combine``), then gpt-oss's
#: own.
PREPARERS = {
    **MOE_PREPARERS,
    "rmsnorm": _prepare_norm,
    "rope": _prepare_rope,
    "sdpa": _prepare_attention,
    "softmax": _prepare_softmax,
    "pv_matmul": _prepare_pv,
    "topk_route": _prepare_route,
    "moe_linear": _prepare_expert_proj,
    "moe_clamped_swiglu": _prepare_swiglu,
}
