"""The gpt-oss family: MoE with alternating sliding-window and full attention, and sinks.

Attention is GQA with biases on q/k/v/o (``attention_bias``); the layers listed as
``sliding_attention`` in ``layer_types`` attend (and cache) at most ``sliding_window``
tokens (ops ``attention_local``, counted over those layers), the others all of them; each
head adds one learned sink logit to its softmax (a few FLOPs, ``num_heads`` weights).

The MLP is a top-``num_experts_per_tok`` mixture of ``num_local_experts`` experts of
``intermediate_size`` (:mod:`roofprof.models.moe`); the router and every expert
projection carry biases, and the activation is the clamped SwiGLU (gate clamped at
``swiglu_limit``, ``gate·σ(1.702·gate)·(up + 1)``: ~8 FLOP per element, ``fn``
"moe_clamped_swiglu"). The published weights store the experts in MXFP4
(``quantization_config``): pass ``--weights mxfp4`` to count them so; roofprof counts
weights at ``--weights`` (default: the compute dtype).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("gpt-oss-20b", "decode", context_tokens=999, dtype="bf16"))
>>> [(op.name, op.n, op.count) for op in w.ops if op.kind == "attention"]
[('attention', 1000, 12), ('attention_local', 128, 12)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.models.moe import MOE_ROLES, MoeOps
from roofprof.workload import OP_GROUPS, Op, Scenario, Workload

__all__ = ["ROLES", "accepts", "ops"]

_CONFIG = CONFIGS["gpt_oss"]
_LOCAL = ("attention", "attn_scores", "attn_softmax", "attn_pv")
#: gpt-oss op name -> (fn, chart group, short label): Llama's, the MoE ops, local attention.
ROLES = {
    **llama.ROLES,
    **MOE_ROLES,
    "expert_act": ("moe_clamped_swiglu", OP_GROUPS[4], "eact"),
    **{
        f"{name}_local": (llama.ROLES[name][0], llama.ROLES[name][1], llama.ROLES[name][2] + "L")
        for name in _LOCAL
    },
}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a gpt-oss (``gpt_oss`` or ``GptOssForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: windowed/full attention with sinks, MoE MLP."""
    return llama.build(scenario, Builder)


class Builder(MoeOps, llama.Builder):
    roles = ROLES

    def build_ops(self) -> list[Op]:
        return self.moe_mlp(super().build_ops())

    def gemm(self, name: str, rows: int, n: int, k: int, scope: str = "layer") -> Op:
        op = super().gemm(name, rows, n, k, scope)
        pattern = self.model.pattern
        if name == "o_proj" and pattern is not None and pattern.o_bias:
            op = replace(
                op,
                flops=op.flops + rows * n,
                bytes=op.bytes + n * self.e,
                weight_bytes=op.weight_bytes + n * self.e,
            )
        return op

    def attention(self) -> list[Op]:
        m = self.model
        pattern = m.pattern
        sliding = pattern.sliding_layers if pattern is not None else 0
        full = self.layers - sliding
        out = []
        if full:
            self.model = replace(m, sliding_window=None)
            try:
                out += [replace(op, count=full) for op in super().attention()]
            finally:
                self.model = m
        if sliding:
            out += [
                replace(op, name=f"{op.name}_local", count=sliding) for op in super().attention()
            ]
        if pattern is not None and pattern.sinks:  # one sink logit per head and query row
            sink = self.heads * self.e
            out = [
                replace(
                    op,
                    flops=op.flops + 2.0 * self.batch * self.heads * self.q_tokens,
                    bytes=op.bytes + sink,
                    weight_bytes=op.weight_bytes + sink,
                    note=op.note + "; attention sinks (one logit per head)",
                )
                if op.name in ("attention", "attention_local", "attn_softmax", "attn_softmax_local")
                else op
                for op in out
            ]
        return out
