"""The DeepSeek-V3 family: multi-head latent attention (MLA) and a DeepSeekMoE MLP.

Attention (:class:`~roofprof.models.moe_config.MlaSpec`): Q through a low-rank pair
(``q_a_proj`` → ``q_a_norm`` → ``q_b_proj``, or one ``q_proj`` without ``q_lora_rank``); the
hidden state down to the ``kv_lora_rank`` latent plus one shared decoupled RoPE key
(``kv_a_proj``, the latent normed by ``kv_a_norm``). The KV cache holds only the latent and
the RoPE key: ``(kv_lora_rank + qk_rope_head_dim)`` elements per token per layer.

Prefill decompresses the latent (``kv_b_proj`` to every head's no-RoPE key and value) and
runs causal attention with head dims ``qk_nope + qk_rope`` (scores) and ``v_head_dim``
(values). Decode runs as inference engines do (weight absorption): the query's no-RoPE part
is mapped into the latent space (``q_absorb``, one GEMM per head with ``kv_b``'s key half),
attention reads the latent cache directly (all heads share it, like MQA), and the
result is mapped to each head's value (``v_absorb``, ``kv_b``'s value half) before
``o_proj``. (transformers' DeepSeek-V3 caches the latent but decompresses the whole cache
at every decode step and attends per head; roofprof counts the engine form, which its
plain-torch model runs: :mod:`roofprof.models.deepseek_v3_torch`.)

MLP: the first ``first_k_dense_replace`` layers are dense (``intermediate_size``); the rest
are MoE with ``n_routed_experts`` experts of ``moe_intermediate_size``, top
``num_experts_per_tok``, plus ``n_shared_experts`` always-on experts
(:mod:`roofprof.models.moe`). Group-limited routing (``n_group``, ``topk_group``) changes
which experts are picked, not how many: the stated routing assumption applies. The
multi-token-prediction module (``num_nextn_predict_layers``) is not part of the pass.

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("deepseek-v3", "decode", context_tokens=1023, dtype="bf16"))
>>> w.kv_bytes == 1024 * (512 + 64) * 61 * 2
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.models.moe import MOE_ROLES, MoeOps
from roofprof.models.moe_config import MlaSpec
from roofprof.workload import OP_GROUPS, Op, Scenario, Workload

__all__ = ["ROLES", "accepts", "ops"]

_CONFIG = CONFIGS["deepseek_v3"]
_ATTN, _PROJ, _ELEM = OP_GROUPS[0], OP_GROUPS[1], OP_GROUPS[4]
#: DeepSeek-V3 op name -> (fn, chart group, short label): Llama's, MLA's and the MoE ops.
ROLES = {
    **llama.ROLES,
    **MOE_ROLES,
    "q_a_proj": ("linear", _PROJ, "qa"),
    "q_b_proj": ("linear", _PROJ, "qb"),
    "kv_a_proj": ("linear", _PROJ, "kva"),
    "kv_b_proj": ("linear", _PROJ, "kvb"),
    "q_a_norm": ("rmsnorm", _ELEM, "qanorm"),
    "kv_a_norm": ("rmsnorm", _ELEM, "kvanorm"),
    "q_absorb": ("head_matmul", _PROJ, "qabs"),
    "v_absorb": ("head_matmul", _PROJ, "vabs"),
    "latent_attention": ("mla_decode", _ATTN, "mla"),
}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a DeepSeek-V3 (``deepseek_v3`` or ``DeepseekV3ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: MLA attention, dense-then-MoE MLP."""
    return llama.build(scenario, Builder)


class Builder(MoeOps, llama.Builder):
    roles = ROLES

    def build_ops(self) -> list[Op]:
        ops = super().build_ops()
        at = next(i for i, op in enumerate(ops) if op.name == "q_proj")
        end = next(i for i, op in enumerate(ops) if op.name == "o_proj") + 1
        return self.moe_mlp(ops[:at] + self.mla_ops(self.model.mla) + ops[end:])

    def low_rank_norm(self, name: str, rows: int, size: int) -> Op:
        return self.elementwise(
            name,
            "norm",
            rows,
            size,
            4.0,
            rows * size,
            rows * size,
            size * self.e,
            weight_bytes=size * self.e,
        )

    def mla_ops(self, mla: MlaSpec) -> list[Op]:
        m, e, rows, b = self.model, self.e, self.rows, self.batch
        h, heads = m.hidden_size, self.heads
        nope, rope, v, kvl = (
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim,
            mla.kv_lora_rank,
        )
        qk = nope + rope
        ops = []
        if mla.q_lora_rank:
            ops += [
                self.gemm("q_a_proj", rows, mla.q_lora_rank, h),
                self.low_rank_norm("q_a_norm", rows, mla.q_lora_rank),
                self.gemm("q_b_proj", rows, heads * qk, mla.q_lora_rank),
            ]
        else:
            ops.append(self.gemm("q_proj", rows, heads * qk, h))
        ops += [
            self.gemm("kv_a_proj", rows, kvl + rope, h),
            self.low_rank_norm("kv_a_norm", rows, kvl),
        ]
        roped = heads * rope + rope  # every head's RoPE query part and the one shared RoPE key
        ops.append(
            self.elementwise(
                "rope",
                "elementwise",
                rows,
                roped,
                3.0,
                rows * roped,
                rows * roped,
                extra_bytes=2 * rows * rope * e,
            )
        )
        cache_row = (kvl + rope) * self.ekv  # one token, one layer
        tq = self.q_tokens
        if self.phase == "prefill":
            ops.append(self.gemm("kv_b_proj", rows, heads * (nope + v), kvl))
            pairs = b * heads * llama.causal_pairs(tq, None)
            flops = 2.0 * pairs * qk + 2.0 * pairs * v
            moved = rows * heads * (qk + qk + v + v) * e + rows * cache_row
            ops.append(
                Op(
                    "attention",
                    "attention",
                    self.phase,
                    tq,
                    tq,
                    qk,
                    self.dtype,
                    flops,
                    moved,
                    batch=b * heads,
                    count=self.layers,
                    note="causal, fused, decompressed MLA (keys/values from kv_b_proj); "
                    "writes the latent + RoPE key to the cache",
                )
            )
        else:
            keys = self.context_tokens + 1
            ops.append(self.head_gemm("q_absorb", rows, kvl, nope, heads))
            pairs = b * heads * tq * keys
            cache_read = b * keys * cache_row
            flops = 2.0 * pairs * (kvl + rope) + 2.0 * pairs * kvl
            moved = (
                rows * heads * (kvl + rope) * e
                + cache_read
                + rows * heads * kvl * e
                + rows * cache_row
            )
            ops.append(
                Op(
                    "latent_attention",
                    "attention",
                    self.phase,
                    tq,
                    keys,
                    kvl + rope,
                    self.dtype,
                    flops,
                    moved,
                    batch=b * heads,
                    count=self.layers,
                    kv_bytes=cache_read,
                    note="fused MLA decode over the latent cache (shared by all heads, like MQA), "
                    "weight-absorbed as engines run it",
                )
            )
            ops.append(self.head_gemm("v_absorb", rows, v, kvl, heads))
        ops.append(self.gemm("o_proj", rows, h, heads * v))
        return ops

    def head_gemm(self, name: str, rows: int, n: int, k: int, heads: int) -> Op:
        """One ``rows × k → n`` GEMM per head (``kv_b``'s absorbed halves in decode)."""
        op = self.gemm(name, rows, n, k)
        return replace(
            op,
            batch=heads,
            flops=op.flops * heads,
            weight_bytes=op.weight_bytes * heads,
            bytes=op.bytes * heads,
            note="one GEMM per head (weight absorption)",
        )
