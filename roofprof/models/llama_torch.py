"""A plain-torch Llama (the architecture of Hugging Face ``LlamaForCausalLM``) and its ops.

``roofprof validate`` runs a real model forward pass: ``LlamaForCausalLM`` from
transformers when it is installed, else :class:`TorchLlama` here, the same architecture in
plain torch (RMSNorm, RoPE with llama3 scaling, GQA attention through SDPA or eager,
SwiGLU MLP, tied or separate lm_head, a KV cache grown by concatenation as transformers'
``DynamicCache`` does). The op functions below (:func:`rms_norm`, :func:`apply_rope`,
:func:`attention_sdpa`, ...) are what the model calls, and what ``roofprof profile`` times
for the non-GEMM ops (``roofprof.profiling.torch_ops``), so the per-op measurements and the real
pass run the same torch calls.

Weights are random (:func:`fill_random_`): timing does not depend on the values, only on
their being ordinary finite floats (no denormals).

torch is imported lazily by the functions that need it; importing this module needs
torch (it is only imported by code that checked for it).

>>> import torch
>>> from roofprof.specs import ModelSpec
>>> spec = ModelSpec("tiny", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
...                  num_kv_heads=2, head_dim=16, vocab_size=100, tie_word_embeddings=True,
...                  max_position_embeddings=256)
>>> model = TorchLlama(spec, dtype=torch.float32)
>>> cache = KVCache()
>>> logits = model(torch.tensor([[1, 2, 3]]), cache)
>>> tuple(logits.shape), cache.length
((1, 1, 100), 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from roofprof.specs import ModelSpec

__all__ = [
    "PREPARERS",
    "SDPA_GQA",
    "TORCH_DTYPES",
    "KVCache",
    "LlamaLayer",
    "TorchLlama",
    "apply_rope",
    "attention_eager",
    "attention_pv",
    "attention_scores",
    "attention_sdpa",
    "attention_softmax",
    "build",
    "causal_mask",
    "fill_random_",
    "fill_weights_",
    "head_rms_norm",
    "hf_config",
    "new_cache",
    "repeat_kv",
    "rms_norm",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotate_half",
    "silu_mul",
    "torch_dtype",
]

TORCH_DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
    "tf32": torch.float32,
}


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype for a roofprof dtype string (``tf32`` runs as float32 storage).

    Raises:
        ConfigError: fp8/int8, which have no plain-torch eager matmul path here.
    """
    from roofprof.errors import ConfigError

    if dtype not in TORCH_DTYPES:
        raise ConfigError(
            f"dtype {dtype!r} has no torch eager implementation here; use one of "
            f"{', '.join(TORCH_DTYPES)}"
        )
    return TORCH_DTYPES[dtype]


# --------------------------------------------------------------------------- the ops


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm exactly as transformers' ``LlamaRMSNorm.forward`` (in float32, then cast back)."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def head_rms_norm(
    x: torch.Tensor, weight: torch.Tensor, head_dim: int, eps: float = 1e-6
) -> torch.Tensor:
    """Qwen3's q/k norm: :func:`rms_norm` over each ``head_dim`` slice of
    ``x [..., heads·head_dim]``, returned as ``[..., heads, head_dim]`` (a view of the
    projection, as transformers' ``view``)."""
    return rms_norm(x.view(*x.shape[:-1], -1, head_dim), weight, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] → [-x2, x1]`` on the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """RoPE on ``q [b,h,s,d]`` and ``k [b,kvh,s,d]`` with ``cos, sin [b,s,d]`` (transformers'
    formula)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's ``silu(gate) · up`` (two kernels in eager torch)."""
    return F.silu(gate) * up


def _sdpa_has_gqa() -> bool:
    import inspect

    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # builtins without a signature: torch >= 2.5 has it
        return tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


SDPA_GQA = _sdpa_has_gqa()


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[b,kvh,s,d] → [b,kvh·n_rep,s,d]`` (a copy, as transformers does for eager attention)."""
    if n_rep == 1:
        return x
    b, kvh, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)


def attention_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Fused attention (``F.scaled_dot_product_attention``), causal when there are several queries.

    ``q [b,h,s,d]``, ``k, v [b,kvh,t,d]`` → ``[b,s,h·d]`` (contiguous, ready for ``o_proj``).
    GQA runs through ``enable_gqa`` where torch has it (≥ 2.5), else K/V are repeated.
    ``scale``: of the scores (None: ``d ** -0.5``); ``window``: each query sees at most that
    many keys (a sliding-window mask when the keys exceed it).
    """
    kwargs_scale: dict[str, Any] = {} if scale is None else {"scale": scale}
    s, t = q.shape[2], k.shape[2]
    if window is not None and s > 1 and t > window:
        n_rep = q.shape[1] // k.shape[1]
        mask = causal_mask(s, t, q.dtype, q.device, window)
        out = F.scaled_dot_product_attention(
            q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), attn_mask=mask, **kwargs_scale
        )
        return out.transpose(1, 2).contiguous().reshape(q.shape[0], s, -1)
    n_rep = q.shape[1] // k.shape[1]
    kwargs: dict[str, Any] = {}
    if n_rep > 1:
        if SDPA_GQA:
            kwargs["enable_gqa"] = True
        else:
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    if (
        s > 1 and k.shape[2] > s
    ):  # prefill into an empty cache: keys beyond the queries are masked anyway
        k, v = k[:, :, :s], v[:, :, :s]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, **kwargs, **kwargs_scale)
    b = q.shape[0]
    return out.transpose(1, 2).contiguous().reshape(b, s, -1)


def causal_mask(
    s: int, t: int, dtype: torch.dtype, device, window: int | None = None
) -> torch.Tensor:
    """Additive mask ``[1,1,s,t]``: query ``i`` (at position ``t-s+i``) sees keys ``≤`` its position
    (and, with ``window``, only the last ``window`` of them)."""
    rows = torch.arange(s, device=device)[:, None] + (t - s)
    cols = torch.arange(t, device=device)[None, :]
    mask = torch.zeros(s, t, dtype=dtype, device=device)
    hidden = cols > rows
    if window is not None:
        hidden = hidden | (cols <= rows - window)
    mask.masked_fill_(hidden, torch.finfo(dtype).min)
    return mask[None, None]


def attention_scores(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float | None = None
) -> torch.Tensor:
    """Eager attention, step 1: ``QKᵀ·scale (+ mask)`` over the full square (transformers' eager
    path)."""
    n_rep = q.shape[1] // k.shape[1]
    w = torch.matmul(q, repeat_kv(k, n_rep).transpose(2, 3)) * (
        q.shape[-1] ** -0.5 if scale is None else scale
    )
    if mask is not None:
        w = w + mask
    return w


def attention_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Eager attention, step 2: softmax in float32, cast back to the activation dtype."""
    return F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)


def attention_pv(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Eager attention, step 3: ``P·V`` → ``[b,s,h·d]`` contiguous."""
    n_rep = p.shape[1] // v.shape[1]
    out = torch.matmul(p, repeat_kv(v, n_rep))
    b, _, s, _ = out.shape
    return out.transpose(1, 2).contiguous().reshape(b, s, -1)


def attention_eager(q, k, v, mask, scale: float | None = None):
    """The three eager steps in a row."""
    return attention_pv(attention_softmax(attention_scores(q, k, mask, scale)), v)


# --------------------------------------------------------------------------- RoPE tables


def rope_inv_freq(
    head_dim: int, theta: float = 500000.0, scaling: Mapping[str, Any] | None = None
) -> torch.Tensor:
    """Inverse frequencies, with Llama 3's ``rope_type: llama3`` scaling (or ``linear``: all
    divided by ``factor``) when given."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind != "llama3":
        return inv
    factor = float(scaling["factor"])
    low, high = (
        float(scaling.get("low_freq_factor", 1.0)),
        float(scaling.get("high_freq_factor", 4.0)),
    )
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    low_wl, high_wl = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wl) & (wavelen <= low_wl)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    """``cos, sin [b,s,d]`` for integer ``positions [b,s]``."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


# --------------------------------------------------------------------------- weights


_FILL_CHUNK: dict[
    tuple, torch.Tensor
] = {}  # the one random chunk fill_random_ tiles (per dtype, device)


def _fill_chunk(dtype, device, block: int) -> torch.Tensor:
    """17 blocks of N(0, 1) values in ``dtype`` on ``device``, drawn once and kept (one entry:
    every standard deviation scales the same chunk)."""
    key = (dtype, str(device), block)
    chunk = _FILL_CHUNK.get(key)
    if chunk is None:
        _FILL_CHUNK.clear()  # keep one chunk (~68 MB in fp32), not one per dtype ever used
        gen = torch.Generator(device="cpu").manual_seed(0)
        chunk = torch.randn(17 * block, generator=gen).to(dtype).to(device)
        _FILL_CHUNK[key] = chunk
    return chunk


def fill_weights_(model: nn.Module, init: bool = True) -> nn.Module:
    """A model's parameters in place: every norm's γ at 1, the others :func:`fill_random_`
    (seed: the parameter's index, so they differ), or zeros with ``init=False`` (tests of
    shapes only). Returns ``model``.
    """
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            if "norm" in name:
                p.fill_(1.0)
            elif init:
                fill_random_(p, seed=i + 1)
            else:
                p.zero_()
    return model


def fill_random_(
    t: torch.Tensor, std: float = 0.02, seed: int = 0, block: int = 1 << 20
) -> torch.Tensor:
    """Fill ``t`` in place with normal values (``std``), fast: one random chunk, tiled.

    torch's CPU generator runs at a few hundred MB/s, so a 5 GB model would take half a
    minute to draw; a chunk of N(0, 1) values drawn once per process, scaled by ``std`` as it
    is tiled over the tensor (from an offset that depends on ``seed``, so tensors differ),
    gives ordinary, non-zero, non-denormal values at memory-copy speed.

    >>> a, b = fill_random_(torch.empty(3, 5), seed=1), fill_random_(torch.empty(3, 5), seed=2)
    >>> bool(torch.isfinite(a).all()) and not torch.equal(a, b)
    True
    """
    chunk = _fill_chunk(t.dtype, t.device, block)
    flat = t.view(-1)
    n = flat.numel()
    offset = (seed * 104_729) % block  # a prime stride: each seed starts elsewhere in the chunk
    step = 16 * block  # large copies (small copy_ calls run far below memory speed on the CPU)
    for start in range(0, n, step):
        stop = min(n, start + step)
        torch.mul(chunk[offset : offset + stop - start], std, out=flat[start:stop])
    return t


# --------------------------------------------------------------------------- the model


class KVCache:
    """Per-layer K/V ``[b,kvh,t,d]``, grown by concatenation (as transformers' ``DynamicCache``)."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        self.seen = 0  # tokens seen (a windowed layer keeps fewer)

    @property
    def length(self) -> int:
        return self.seen

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, window: int | None = None):
        """Append ``k, v`` to ``layer``; return the keys/values attended now. With ``window``,
        the layer keeps its last ``window - 1`` tokens (transformers' sliding-window cache)."""
        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer] is None:
            keys, values = k.contiguous(), v.contiguous()
        else:
            keys = torch.cat([self.keys[layer], k], dim=-2)
            values = torch.cat([self.values[layer], v], dim=-2)
        if window is not None and keys.shape[-2] >= window:
            self.keys[layer], self.values[layer] = (
                keys[:, :, 1 - window :],
                values[:, :, 1 - window :],
            )
        else:
            self.keys[layer], self.values[layer] = keys, values
        if layer == 0:
            self.seen += k.shape[-2]
        return keys, values


class LlamaLayer(nn.Module):
    """One decoder layer: Llama's, with Qwen2's q/k/v biases, Qwen3's q/k norms and Mistral's
    sliding window when the spec sets them."""

    def __init__(self, m: ModelSpec, dtype, device):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        h = m.hidden_size
        self.m = m
        self.attn_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.mlp_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.q_proj = nn.Linear(h, m.q_size, **{**kw, "bias": m.attention_bias})
        self.k_proj = nn.Linear(h, m.kv_size, **{**kw, "bias": m.attention_bias})
        self.v_proj = nn.Linear(h, m.kv_size, **{**kw, "bias": m.attention_bias})
        self.o_proj = nn.Linear(m.q_size, h, **kw)
        if m.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(m.head_dim, dtype=dtype, device=device))
            self.k_norm = nn.Parameter(torch.ones(m.head_dim, dtype=dtype, device=device))
        self.gate_proj = nn.Linear(h, m.intermediate_size, **kw)
        self.up_proj = nn.Linear(h, m.intermediate_size, **kw)
        self.down_proj = nn.Linear(m.intermediate_size, h, **kw)

    def qkv(self, hs, eps: float):
        """q ``[b,h,s,d]``, k, v ``[b,kvh,s,d]`` (before RoPE)."""
        b, s, _ = hs.shape
        d = self.m.head_dim
        if self.m.qk_norm:
            q = head_rms_norm(self.q_proj(hs), self.q_norm, d, eps).transpose(1, 2)
            k = head_rms_norm(self.k_proj(hs), self.k_norm, d, eps).transpose(1, 2)
        else:
            q = self.q_proj(hs).view(b, s, -1, d).transpose(1, 2)
            k = self.k_proj(hs).view(b, s, -1, d).transpose(1, 2)
        return q, k, self.v_proj(hs).view(b, s, -1, d).transpose(1, 2)

    def mlp(self, hs):
        return self.down_proj(silu_mul(self.gate_proj(hs), self.up_proj(hs)))

    def forward(
        self, x, cos, sin, cache: KVCache | None, index: int, attention: str, eps: float, mask
    ):
        window = self.m.sliding_window
        residual = x
        q, k, v = self.qkv(rms_norm(x, self.attn_norm, eps), eps)
        q, k = apply_rope(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(index, k, v, window)
        if attention == "fused":
            a = attention_sdpa(q, k, v, window=window)
        else:
            a = attention_eager(q, k, v, _fit_mask(mask, k.shape[2], window))
        x = residual + self.o_proj(a)
        return x + self.mlp(rms_norm(x, self.mlp_norm, eps))


def _fit_mask(mask, keys: int, window: int | None):
    """The causal mask over ``keys`` keys, windowed (None when there is none: decode)."""
    if mask is None or (window is None and mask.shape[-1] == keys):
        return mask
    return causal_mask(mask.shape[-2], keys, mask.dtype, mask.device, window)


class TorchLlama(nn.Module):
    """Llama in plain torch: ``forward(input_ids, cache)`` → logits of the last token
    ``[b,1,vocab]``.

    Also the Qwen2 (q/k/v biases), Qwen3 (q/k norms) and Mistral (sliding window) models,
    from the spec's fields; other families subclass it (``layer_class``, ``forward``).

    Args:
        spec: the model config (layers, sizes, GQA, vocab, tied embeddings).
        dtype: torch dtype of weights, activations and cache.
        device: where to build it ("cpu", "cuda:0").
        attention: ``"fused"`` (SDPA) or ``"unfused"`` (eager: scores through memory).
        rope_theta, rope_scaling, eps: from the HF config (Llama 3 defaults).
        init: fill weights with :func:`fill_random_` (``False``: zeros, for tests of shapes only).
    """

    layer_class: type[nn.Module] = LlamaLayer
    #: the final norm, ``norm(x, weight, eps)`` (a family with its own RMSNorm sets it)
    final_norm: Callable[..., torch.Tensor] = staticmethod(rms_norm)

    def __init__(
        self,
        spec: ModelSpec,
        *,
        dtype=torch.float32,
        device="cpu",
        attention: str = "fused",
        rope_theta: float = 500000.0,
        rope_scaling: Mapping[str, Any] | None = None,
        eps: float = 1e-5,
        init: bool = True,
    ):
        super().__init__()
        self.spec, self.attention, self.eps = spec, attention, eps
        meta = "meta"  # build without torch's (slow) default init, then allocate for real
        # _weight given: no default init, whose first meta-device normal_ imports torch's meta
        # registrations (~1-2 s on a small CPU)
        self.embed = nn.Embedding(
            spec.vocab_size,
            spec.hidden_size,
            _weight=torch.empty(spec.vocab_size, spec.hidden_size, dtype=dtype, device=meta),
        )
        self.layers = nn.ModuleList(
            self.layer_class(spec, dtype, meta) for _ in range(spec.num_layers)
        )
        self.norm = nn.Parameter(torch.ones(spec.hidden_size, dtype=dtype, device=meta))
        self.lm_head = (
            None
            if spec.tie_word_embeddings
            else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, dtype=dtype, device=meta)
        )
        self.to_empty(device=device)
        self.register_buffer(
            "inv_freq",
            rope_inv_freq(spec.head_dim, rope_theta, rope_scaling).to(device),
            persistent=False,
        )
        fill_weights_(self, init)

    def start(self, input_ids: torch.Tensor, cache: KVCache | None):
        """Embeddings, positions of the new tokens, and the eager causal mask (None when fused)."""
        b, s = input_ids.shape
        past = cache.length if cache is not None else 0
        x = self.embed(input_ids)
        positions = (torch.arange(s, device=input_ids.device) + past)[None].expand(b, s)
        mask = None
        if self.attention != "fused" and s > 1:
            mask = causal_mask(s, past + s, x.dtype, x.device)
        return x, positions, mask

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and lm_head on the last token."""
        x = self.final_norm(x, self.norm, self.eps)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x[:, -1:, :], weight)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x, positions, mask = self.start(input_ids, cache)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, self.attention, self.eps, mask)
        return self.head(x)


# -------------------------------------------------------------------------- the family's torch side


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache for the plain-torch model of ``spec``."""
    return KVCache()


def build(spec: ModelSpec, dtype: torch.dtype, device: str, attention: str) -> nn.Module:
    """The plain-torch model of a Llama, Qwen2, Qwen3 or Mistral spec, random weights."""
    return TorchLlama(
        spec,
        dtype=dtype,
        device=device,
        attention=attention,
        rope_theta=spec.rope_theta,
        rope_scaling=spec.rope_scaling_dict,
        eps=spec.rms_norm_eps,
    ).eval()


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of the transformers config (``LlamaConfig``, ``Qwen2Config``, ...) of
    ``spec``.

    >>> from roofprof.specs import load_model
    >>> hf_config(load_model("qwen2.5-0.5b"))["num_key_value_heads"]
    2
    """
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
        rope_scaling=spec.rope_scaling_dict,
        attention_bias=spec.attention_bias,
        sliding_window=spec.sliding_window,
        use_sliding_window=False,
    )
    if spec.max_position_embeddings < 2**31 - 1:
        kw["max_position_embeddings"] = spec.max_position_embeddings
    return kw


def _prepare_norm(ops, op):
    """``rmsnorm``: :func:`rms_norm` over rows of ``hidden_size``, or, for an op of another width
    (Qwen3's q/k norms over ``heads·head_dim``), :func:`head_rms_norm` over each head's slice."""
    import numpy as np

    d = op.n if op.n == ops.model.hidden_size else ops.model.head_dim
    x = ops.randn((op.m, op.n), op)
    w = 1.0 + 0.1 * ops.randn((d,), op)
    rows = ops.sample_rows(op.m)
    eps = 1e-5

    def call():
        return rms_norm(x, w, eps) if d == op.n else head_rms_norm(x, w, d, eps)

    def reference():
        xr = ops.to_numpy(x[rows]).reshape(len(rows), -1, d)
        ref = ops.to_numpy(w) * xr / np.sqrt((xr**2).mean(-1, keepdims=True) + eps)
        return ops.to_numpy(call()[rows]).reshape(len(rows), -1), ref.reshape(len(rows), -1)

    kernels = 6 + (2 if op.dtype != "fp32" else 0)  # to, pow, mean, add, rsqrt, mul, to, mul
    note = "RMSNorm as transformers (float32 inside)" + (
        "" if d == op.n else f", per {d}-wide head"
    )
    return ops.prepared(op, [call], reference, d, kernels, note, [x, w])


#: ``Op.fn`` -> preparer for :class:`roofprof.profiling.torch_ops.TorchOps` (these win over its
#: own): ``rmsnorm`` also covers Qwen3's per-head q/k norms.
PREPARERS = {"rmsnorm": _prepare_norm}
