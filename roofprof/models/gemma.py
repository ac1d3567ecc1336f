"""The Gemma 2 and Gemma 3 pass (text model): Llama's ops reshaped by Gemma's features.

Per layer: RMSNorm ``x·(1 + w)`` before *and after* attention and the MLP (four norms,
``attn_norm``, ``post_attn_norm``, ``mlp_norm``, ``post_mlp_norm``), a GeGLU MLP
(``gelu_tanh(gate)·up``, fn ``gelu_tanh_mul``), and attention that alternates between
sliding-window ("local", ``attention_local``: at most ``sliding_window`` keys, and as many
cached) and global layers (``attention``), scaled by ``query_pre_attn_scalar ** -0.5``.
Gemma 3 adds q/k RMSNorms per head (``q_norm``, ``k_norm``). The embedding output is
scaled by ``sqrt(hidden_size)`` (``embed_scale``). Gemma 2 soft-caps the attention scores
(``attn_softcap``, ``c·tanh(x/c)``: transformers runs Gemma 2 with eager attention for it,
so its attention is always the three eager steps) and the final logits (``logit_softcap``).

The family modules :mod:`roofprof.models.gemma2` and :mod:`roofprof.models.gemma3` build
with :class:`Builder`.

>>> from roofprof.workload import Scenario
>>> w = build(Scenario.of("gemma-2-9b", "decode", context_tokens=8191, dtype="bf16"))
>>> scores = ("attn_scores", "attn_scores_local")
>>> sorted({(op.name, op.n, op.count) for op in w.ops if op.name in scores})
[('attn_scores', 8192, 21), ('attn_scores_local', 4096, 21)]
"""

from __future__ import annotations

import dataclasses

import roofprof.models.llama as llama
from roofprof.workload import OP_GROUPS, Op, Scenario, Workload

__all__ = ["ROLES", "Builder", "build"]

_ATTN, _ELEM, _HEAD = OP_GROUPS[0], OP_GROUPS[4], OP_GROUPS[3]
#: Gemma op name -> (fn, chart group, short label): Llama's, plus Gemma's norms, GeGLU,
#: local attention and soft-caps.
ROLES = {
    **{k: v for k, v in llama.ROLES.items() if k not in ("silu_mul",)},
    "attn_norm": ("gemma_rmsnorm", _ELEM, "anorm"),
    "mlp_norm": ("gemma_rmsnorm", _ELEM, "mnorm"),
    "final_norm": ("gemma_rmsnorm", _ELEM, "fnorm"),
    "post_attn_norm": ("gemma_rmsnorm", _ELEM, "panorm"),
    "post_mlp_norm": ("gemma_rmsnorm", _ELEM, "pmnorm"),
    "q_norm": ("gemma_head_rmsnorm", _ELEM, "qnorm"),
    "k_norm": ("gemma_head_rmsnorm", _ELEM, "knorm"),
    "embed_scale": ("scale", _HEAD, "escale"),
    "gelu_mul": ("gelu_tanh_mul", _ELEM, "gelu"),
    "logit_softcap": ("softcap", _HEAD, "lcap"),
    "attention_local": ("sdpa", _ATTN, "attnL"),
    "attn_scores_local": ("qk_matmul", _ATTN, "QKL"),
    "attn_softmax_local": ("softmax", _ATTN, "softmaxL"),
    "attn_pv_local": ("pv_matmul", _ATTN, "PVL"),
    "attn_softcap": ("softcap", _ATTN, "acap"),
    "attn_softcap_local": ("softcap", _ATTN, "acapL"),
}


def build(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step of a Gemma 2 or Gemma 3 model."""
    return llama.build(scenario, Builder)


class Builder(llama.Builder):
    """The Gemma pass (see the module docstring); tensor parallelism as for Llama."""

    roles = ROLES

    def head_norm(self, name: str, rows: int, size: int) -> Op:
        """RMSNorm over each head_dim slice of ``size`` elements (weight head_dim)."""
        d = self.model.head_dim
        return self.elementwise(
            name,
            "norm",
            rows,
            size,
            4.0,
            rows * size,
            rows * size,
            d * self.e,
            weight_bytes=d * self.e,
        )

    def add(self, name: str, rows: int, h: int) -> Op:
        return self.elementwise(name, "elementwise", rows, h, 1.0, 2 * rows * h, rows * h)

    def build_ops(self) -> list[Op]:
        m, e, rows = self.model, self.e, self.rows
        h, qs, kvs, inter = m.hidden_size, self.q_size, self.kv_size, self.inter
        ops = [self.embedding()]
        if self.tp > 1:
            ops.append(self.collective("embedding_allreduce", rows, h, self.tp, "model"))
        ops.append(
            self.elementwise(
                "embed_scale", "elementwise", rows, h, 1.0, rows * h, rows * h, scope="model"
            )
        )
        ops.append(self.norm("attn_norm", rows))
        ops += [
            self.gemm("q_proj", rows, qs, h),
            self.gemm("k_proj", rows, kvs, h),
            self.gemm("v_proj", rows, kvs, h),
        ]
        if m.qk_norm:
            ops += [self.head_norm("q_norm", rows, qs), self.head_norm("k_norm", rows, kvs)]
        ops.append(
            self.elementwise(
                "rope",
                "elementwise",
                rows,
                qs + kvs,
                3.0,
                rows * (qs + kvs),
                rows * (qs + kvs),
                extra_bytes=2 * rows * m.head_dim * e,
            )
        )
        ops.extend(self.attention())
        ops.append(self.gemm("o_proj", rows, h, qs))
        ops.extend(self.communication("attn", rows))
        ops += [
            self.norm("post_attn_norm", rows),
            self.add("attn_residual", rows, h),
            self.norm("mlp_norm", rows),
            self.gemm("gate_proj", rows, inter, h),
            self.gemm("up_proj", rows, inter, h),
            # gelu_tanh(gate)·up: tanh-approximated GELU (~8 FLOP) then a multiply
            self.elementwise(
                "gelu_mul", "elementwise", rows, inter, 9.0, 2 * rows * inter, rows * inter
            ),
            self.gemm("down_proj", rows, h, inter),
        ]
        ops.extend(self.communication("mlp", rows))
        ops += [self.norm("post_mlp_norm", rows), self.add("mlp_residual", rows, h)]
        head_rows = (
            self.batch if (self.phase == "decode" or self.counting.lm_head == "last") else rows
        )
        # the final norm runs over every row, as transformers, vLLM and TensorRT-LLM run it;
        # only lm_head takes the last
        ops.append(self.norm("final_norm", rows, scope="model"))
        ops.append(self.gemm("lm_head", head_rows, self.vocab, h, scope="model"))
        if m.gemma.final_logit_softcapping is not None:  # divide, tanh, multiply over the logits
            ops.append(
                self.elementwise(
                    "logit_softcap",
                    "elementwise",
                    head_rows,
                    self.vocab,
                    3.0,
                    head_rows * self.vocab,
                    head_rows * self.vocab,
                    scope="model",
                )
            )
        if self.tp > 1:
            ops.append(
                self.collective("logits_gather", head_rows, self.vocab * self.tp, self.tp, "model")
            )
        if self.parallel.pp > 1:
            ops.append(
                self.collective("pp_send", rows, 2 * h, 2, "model", count=self.parallel.pp - 1)
            )
        return ops

    def attention(self) -> list[Op]:
        """Global layers (all keys), then local layers (at most ``sliding_window`` keys)."""
        m, layers = self.model, self.layers
        local = m.num_local_layers
        softcap = m.gemma.attn_logit_softcapping
        if (
            softcap is not None and self.counting.attention == "fused"
        ):  # eager, as transformers runs it
            self.counting = dataclasses.replace(self.counting, attention="unfused")
        out = []
        for suffix, count, window in (
            ("", layers - local, None),
            ("_local", local, m.sliding_window),
        ):
            if not count:
                continue
            self.model, self.layers = (
                dataclasses.replace(m, gemma=None, sliding_window=window),
                count,
            )
            try:
                part = super().attention()
            finally:
                self.model, self.layers = m, layers
            for op in part:
                out.append(dataclasses.replace(op, name=op.name + suffix))
                if softcap is not None and op.name == "attn_scores":
                    scores = op.batch * op.m * op.n
                    out.append(
                        Op(
                            "attn_softcap" + suffix,
                            "attention",
                            self.phase,
                            op.batch * op.m,
                            op.n,
                            0,
                            self.dtype,
                            3.0 * scores,
                            2.0 * scores * self.e,
                            count=count,
                            note=f"soft-cap c·tanh(x/c), c = {softcap:g}: divide, tanh, multiply",
                        )
                    )
        return out
