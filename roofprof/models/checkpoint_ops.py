"""Which op a checkpoint's tensor belongs to, and how many weights each op has.

A checkpoint names its tensors by module (``model.layers.3.self_attn.q_proj.qweight`` in a
Hugging Face safetensors file, ``blk.3.attn_q.weight`` in a GGUF file); the op builders name
their ops (``q_proj``). This module is the one place that maps the first onto the second,
so that stored bytes per op (:mod:`roofprof.checkpoints`) can become bits per weight.

>>> op_of_tensor("model.layers.0.self_attn.q_proj.qweight"), op_of_tensor("blk.0.ffn_down.weight")
('q_proj', 'down_proj')
>>> op_of_tensor("model.layers.0.mlp.experts.7.up_proj.weight"), op_of_tensor("lm_head.weight")
('expert_gate_up_proj', 'lm_head')
>>> op_of_tensor("model.layers.0.input_layernorm.weight") is None
True
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roofprof.model_specs import ModelSpec

__all__ = ["UNQUANTIZED_OPS", "ATTENTION_OPS", "op_elements", "op_of_tensor", "ops_of_pattern"]

#: Ops a quantized Hugging Face checkpoint keeps in 16 bits unless it says otherwise (AutoAWQ,
#: AutoGPTQ, llm-compressor and bitsandbytes quantize the decoder layers' linear layers only).
UNQUANTIZED_OPS = ("embedding", "lm_head", "router")
#: The attention projections (a ``self_attn`` entry of a "do not convert" list).
ATTENTION_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")

#: Hugging Face module names -> op names (dense layers).
_HF = {
    "q_proj": "q_proj",
    "k_proj": "k_proj",
    "v_proj": "v_proj",
    "o_proj": "o_proj",
    "qkv_proj": "qkv_proj",
    "gate_proj": "gate_proj",
    "up_proj": "up_proj",
    "down_proj": "down_proj",
    "gate_up_proj": "gate_up_proj",
    "lm_head": "lm_head",
    "embed_tokens": "embedding",
}
#: GGUF tensor names (llama.cpp's ``gguf-py/gguf/constants.py``) -> op names.
_GGUF = {
    "attn_q": "q_proj",
    "attn_k": "k_proj",
    "attn_v": "v_proj",
    "attn_output": "o_proj",
    "attn_qkv": "qkv_proj",
    "ffn_gate": "gate_proj",
    "ffn_up": "up_proj",
    "ffn_down": "down_proj",
    "output": "lm_head",
    "token_embd": "embedding",
    "ffn_gate_inp": "router",
    "ffn_gate_exps": "expert_gate_up_proj",
    "ffn_up_exps": "expert_gate_up_proj",
    "ffn_down_exps": "expert_down_proj",
    "ffn_gate_shexp": "shared_gate_proj",
    "ffn_up_shexp": "shared_up_proj",
    "ffn_down_shexp": "shared_down_proj",
}
_EXPERT = {
    "gate_proj": "expert_gate_up_proj",
    "up_proj": "expert_gate_up_proj",
    "gate_up_proj": "expert_gate_up_proj",
    "down_proj": "expert_down_proj",
    "w1": "expert_gate_up_proj",
    "w3": "expert_gate_up_proj",
    "w2": "expert_down_proj",
}
_SHARED = {
    "gate_proj": "shared_gate_proj",
    "up_proj": "shared_up_proj",
    "down_proj": "shared_down_proj",
}
_FUSED_SUFFIX = re.compile(r"_(blocks|scales|bias)$")
_GGUF_NAME = re.compile(r"^(?:blk\.\d+\.)?([a-z_]+)\.weight$")


def op_of_tensor(name: str) -> str | None:
    """The op whose weights tensor ``name`` holds (or scales, zero points: a quantized
    module's every tensor), None for a norm or anything that is no GEMM weight."""
    g = _GGUF_NAME.match(name)
    if g and g.group(1) in _GGUF:
        return _GGUF[g.group(1)]
    # gpt-oss stores fused expert tensors as gate_up_proj_blocks / _scales / _bias
    parts = [_FUSED_SUFFIX.sub("", p) for p in name.split(".")]
    if "experts" in parts:
        return next((_EXPERT[p] for p in parts if p in _EXPERT), None)
    if any(p.startswith("shared_expert") for p in parts):
        return next((_SHARED[p] for p in parts if p in _SHARED), None)
    if "router" in parts:
        return "router"
    for i, part in enumerate(parts):
        if part == "mlp" and i + 1 < len(parts) and parts[i + 1] == "gate":
            return "router"
        if part in _HF:
            return _HF[part]
    return None


def ops_of_pattern(pattern: str) -> tuple[str, ...]:
    """The ops a "not converted" entry of a ``quantization_config`` names
    (``lm_head``, ``model.layers.*.self_attn``, ``re:.*mlp.gate$``...).

    >>> ops_of_pattern("model.layers.*.self_attn")[:2], ops_of_pattern("re:.*lm_head")
    (('q_proj', 'k_proj'), ('lm_head',))
    """
    found: list[str] = []
    if "self_attn" in pattern or "attn" == pattern.rsplit(".", 1)[-1]:
        found += ATTENTION_OPS
    if "router" in pattern or re.search(r"mlp\.gate\b(?!_)", pattern):
        found.append("router")
    if "embed" in pattern:
        found.append("embedding")
    for key, op in _HF.items():
        if re.search(rf"\b{key}\b", pattern) and op not in found:
            found.append(op)
    return tuple(found)


def op_elements(spec: ModelSpec) -> dict[str, int]:
    """Weights per dense op over all layers (op name -> elements), the ones a checkpoint's
    per-op bytes are divided by; mixture-of-experts and MLA ops are left out (their bytes
    go to the rest of the model).

    >>> from roofprof.specs import load_model
    >>> op_elements(load_model("llama-3.2-1b"))["q_proj"]
    67108864
    """
    h, layers = spec.hidden_size, spec.num_layers
    table = spec.vocab_size * h
    out = {"embedding": table}
    if not spec.tie_word_embeddings:
        out["lm_head"] = table
    fused = spec.family == "phi3"  # one qkv_proj and one gate_up_proj GEMM
    if spec.mla is None:
        q, kv = h * spec.q_size * layers, h * spec.kv_size * layers
        out |= {"qkv_proj": q + 2 * kv} if fused else {"q_proj": q, "k_proj": kv, "v_proj": kv}
        out["o_proj"] = q
    if spec.moe is None:
        mlp = h * spec.intermediate_size * layers
        out |= {"gate_up_proj": 2 * mlp} if fused else {"gate_proj": mlp, "up_proj": mlp}
        out["down_proj"] = mlp
    return out
