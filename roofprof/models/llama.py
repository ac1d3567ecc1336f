"""The Llama family: the ops of one Llama forward pass, with shapes, FLOPs and minimum bytes.

:func:`ops` lists, for a :class:`~roofprof.workload.Scenario`, every kernel-level operation
of one prefill pass or one decode step of a dense Llama decoder (GQA attention, SwiGLU
MLP, RMSNorm, RoPE). Identical decoder layers are listed once with ``count = num_layers``.
Each op is tagged with what it computes (``fn``: implementations dispatch on it), its
chart group and a short label (:data:`ROLES`, this family's table). The counting rules
are in :mod:`roofprof.workload`.

:func:`accepts` says whether a Hugging Face ``config.json`` describes this family
(``model_type == "llama"`` or a ``LlamaForCausalLM`` architecture).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("llama-3.2-1b", "prefill", prompt_tokens=128, dtype="fp32"))
>>> [op.name for op in w.ops][:3]
['embedding', 'attn_norm', 'q_proj']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from roofprof.models.families import CONFIGS
from roofprof.precision import kv_bytes, weight_bits
from roofprof.specs import BYTES_PER_ELEMENT, ModelSpec
from roofprof.workload import OP_GROUPS, Op, Parallel, Scenario, Workload

__all__ = [
    "ARCHITECTURES",
    "MODEL_TYPES",
    "ROLES",
    "Builder",
    "accepts",
    "build",
    "causal_pairs",
    "ops",
]

_CONFIG = CONFIGS["llama"]
#: ``model_type`` values of the configs this family reads.
MODEL_TYPES = _CONFIG.model_types
#: ``architectures`` entries of the configs this family reads.
ARCHITECTURES = _CONFIG.architectures


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a dense Llama (by ``model_type``, else ``architectures``).

    >>> accepts({"model_type": "llama"}), accepts({"model_type": "mixtral"})
    (True, False)
    """
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or one decode step of ``scenario``'s Llama model.

    Prefill runs ``prompt_tokens`` per sequence; decode one new token per sequence
    attending to ``context_tokens`` cached tokens. With ``scenario.parallel.tp > 1`` the
    shapes are one rank's (Megatron-style: heads, intermediate and vocabulary split, KV
    heads replicated when TP exceeds them) and the collectives are ops of kind
    ``communication``: two all-reduces per layer (a reduce-scatter and an all-gather each
    with sequence parallelism, where each rank then normalises ``rows / tp`` rows), the
    embedding all-reduce and the logits gather. With
    ``pp > 1`` the ``pp - 1`` stage sends (hidden state and residual) are added; layer ops
    keep ``count = num_layers`` (batch-1 latency runs every stage in turn).

    >>> from roofprof.workload import Parallel
    >>> w = ops(Scenario.of("llama-3.1-70b", "decode", prompt_tokens=128, parallel=Parallel(tp=8)))
    >>> [(op.name, op.n) for op in w.ops if op.name in ("q_proj", "k_proj", "attn_allreduce")]
    [('q_proj', 1024), ('k_proj', 128), ('attn_allreduce', 8192)]
    """
    return build(scenario, Builder)


def build(scenario: Scenario, builder_class: type[Builder]) -> Workload:
    """The workload of ``scenario`` built by ``builder_class`` (the Llama builder or a subclass)."""
    s = scenario
    builder = builder_class(s)
    return Workload(
        s.model,
        s.phase,
        s.batch,
        s.prompt_tokens,
        s.context_tokens,
        s.dtype,
        s.counting,
        tuple(builder.ops()),
        s.weights,
        s.kv_dtype,
        s.parallel,
    )


#: Projections that carry a bias when ``ModelSpec.attention_bias`` (Qwen2's q/k/v).
_BIASED = frozenset({"q_proj", "k_proj", "v_proj"})


def causal_pairs(tokens: int, window: int | None) -> float:
    """(query, key) pairs of causal attention over ``tokens``, each query seeing at most ``window``.

    >>> causal_pairs(4, None), causal_pairs(4, 2)
    (10.0, 7.0)
    """
    if window is None or window >= tokens:
        return tokens * (tokens + 1) / 2
    return window * (window + 1) / 2 + (tokens - window) * float(window)


_PROJ, _MLP, _ATTN, _HEAD, _ELEM = (
    OP_GROUPS[1],
    OP_GROUPS[2],
    OP_GROUPS[0],
    OP_GROUPS[3],
    OP_GROUPS[4],
)
_COMM = OP_GROUPS[5]
#: Llama op name -> (fn, chart group, short label).
ROLES = {
    "embedding": ("gather", _HEAD, "emb"),
    "lm_head": ("linear", _HEAD, "head"),
    "q_proj": ("linear", _PROJ, "q"),
    "k_proj": ("linear", _PROJ, "k"),
    "v_proj": ("linear", _PROJ, "v"),
    "o_proj": ("linear", _PROJ, "o"),
    "gate_proj": ("linear", _MLP, "gate"),
    "up_proj": ("linear", _MLP, "up"),
    "down_proj": ("linear", _MLP, "down"),
    "attn_norm": ("rmsnorm", _ELEM, "anorm"),
    "mlp_norm": ("rmsnorm", _ELEM, "mnorm"),
    "final_norm": ("rmsnorm", _ELEM, "fnorm"),
    "rope": ("rope", _ELEM, "rope"),
    "attn_residual": ("add", _ELEM, "res1"),
    "mlp_residual": ("add", _ELEM, "res2"),
    "silu_mul": ("silu_mul", _ELEM, "silu"),
    "attention": ("sdpa", _ATTN, "attn"),
    "attn_scores": ("qk_matmul", _ATTN, "QK"),
    "attn_softmax": ("softmax", _ATTN, "softmax"),
    "attn_pv": ("pv_matmul", _ATTN, "PV"),
    "embedding_allreduce": ("allreduce", _COMM, "embAR"),
    "attn_allreduce": ("allreduce", _COMM, "AR1"),
    "mlp_allreduce": ("allreduce", _COMM, "AR2"),
    "attn_reduce_scatter": ("reduce_scatter", _COMM, "RS1"),
    "attn_all_gather": ("all_gather", _COMM, "AG1"),
    "mlp_reduce_scatter": ("reduce_scatter", _COMM, "RS2"),
    "mlp_all_gather": ("all_gather", _COMM, "AG2"),
    "logits_gather": ("all_gather", _COMM, "logits"),
    "pp_send": ("send", _COMM, "send"),
}


@dataclass
class Builder:
    """The Llama pass; other dense families subclass it (``roles``, ``build_ops``) or set the
    ModelSpec fields it reads (``attention_bias``, ``sliding_window``), all off for Llama."""

    scenario: Scenario
    roles = ROLES  # op name -> (fn, chart group, short label)

    def __post_init__(self) -> None:
        s = self.scenario
        self.model: ModelSpec = s.model
        self.phase, self.batch, self.dtype, self.counting = s.phase, s.batch, s.dtype, s.counting
        self.prompt_tokens, self.context_tokens = s.prompt_tokens, s.context_tokens
        self.weights = s.weights  # stored weight format (None: dtype)
        self.kv_dtype = s.kv_dtype  # KV-cache element type (None: dtype)
        self.parallel: Parallel = s.parallel
        self.e = BYTES_PER_ELEMENT[self.dtype]  # activations
        self.ekv = self.e if self.kv_dtype is None else kv_bytes(self.kv_dtype)
        self.q_tokens = self.prompt_tokens if self.phase == "prefill" else 1  # per sequence
        self.rows = self.batch * self.q_tokens  # activation rows through the linear layers
        self.layers = self.model.num_layers
        m, tp = self.model, self.parallel.tp
        self.tp = tp  # per-rank sizes (all equal to the model's at tp 1)
        self.heads = m.num_heads // tp
        self.q_size = m.q_size // tp
        self.kv_size = (
            max(m.num_kv_heads // tp, 1) * m.head_dim
        )  # KV heads replicated past their count
        self.inter = m.intermediate_size // tp
        self.vocab = -(-m.vocab_size // tp)  # vocabulary padded to a multiple of tp

    def collective(
        self,
        name: str,
        rows: int,
        elements: int,
        ranks: int,
        scope: str = "layer",
        count: int | None = None,
    ) -> Op:
        """A collective over ``rows × elements`` activations (``S`` in bytes, no FLOPs)."""
        size = rows * elements * self.e
        return Op(
            name,
            "communication",
            self.phase,
            rows,
            elements,
            0,
            self.dtype,
            0.0,
            size,
            batch=ranks,
            count=count if count is not None else (self.layers if scope == "layer" else 1),
            scope=scope,
            note=f"{ranks} ranks, S = {size:.0f} B",
        )

    def communication(self, where: str, rows: int) -> list[Op]:
        """The tensor-parallel collectives after the row-parallel GEMM of ``where``."""
        if self.tp == 1:
            return []
        h = self.model.hidden_size
        if self.parallel.sequence_parallel:
            return [
                self.collective(f"{where}_reduce_scatter", rows, h, self.tp),
                self.collective(f"{where}_all_gather", rows, h, self.tp),
            ]
        return [self.collective(f"{where}_allreduce", rows, h, self.tp)]

    def ew(self, name: str) -> float:
        """Bytes per stored weight of op ``name`` (the weight format's, scales included; with
        no ``--weights``, the checkpoint's own when it has them, else the dtype's)."""
        if self.weights is None and self.model.stored is not None:
            return self.model.stored.bits(name) / 8.0
        return self.e if self.weights is None else weight_bits(self.weights, name) / 8.0

    # -- helpers -----------------------------------------------------------------------
    def gemm(self, name: str, rows: int, n: int, k: int, scope: str = "layer") -> Op:
        e = self.e
        weights = n * k * self.ew(name)
        flops = 2.0 * rows * n * k
        if (
            self.model.attention_bias and name in _BIASED
        ):  # bias folded in: n more weights, rows·n adds
            weights += n * e
            flops += rows * n
        return Op(
            name,
            "gemm",
            self.phase,
            rows,
            n,
            k,
            self.dtype,
            flops,
            weights + rows * k * e + rows * n * e,
            count=self.layers if scope == "layer" else 1,
            weight_bytes=weights,
            scope=scope,
        )

    def elementwise(
        self,
        name: str,
        kind: str,
        rows: int,
        n: int,
        flops_per_elem: float,
        elems_read: float,
        elems_written: float,
        extra_bytes: float = 0.0,
        scope: str = "layer",
        weight_bytes: float = 0.0,
    ) -> Op:
        fused = self.counting.elementwise == "fused"
        moved = 0.0 if fused else (elems_read + elems_written) * self.e + extra_bytes
        return Op(
            name,
            kind,
            self.phase,
            rows,
            n,
            0,
            self.dtype,
            flops_per_elem * rows * n,
            moved,
            count=self.layers if scope == "layer" else 1,
            scope=scope,
            weight_bytes=0.0 if fused else weight_bytes,
            note="fused into neighbouring kernels: no traffic of its own" if fused else "",
        )

    def norm(self, name: str, rows: int, scope: str = "layer") -> Op:
        h = self.model.hidden_size
        if scope == "layer" and self.tp > 1 and self.parallel.sequence_parallel:
            rows = -(-rows // self.tp)  # sequence parallel: each rank normalises its rows/tp
        # square, sum, scale by rsqrt, multiply by the weight: ~4 FLOP per element
        return self.elementwise(
            name,
            "norm",
            rows,
            h,
            4.0,
            rows * h,
            rows * h,
            h * self.e,
            scope,
            weight_bytes=h * self.e,
        )

    # -- the pass ----------------------------------------------------------------------
    def ops(self) -> list[Op]:
        """The pass, each op tagged with what it computes (``fn``) and its chart group."""
        tagged = []
        for op in self.build_ops():
            fn, group, short = self.roles[op.name]
            if op.name == "embedding" and op.k:
                fn = "onehot_matmul"
            tagged.append(replace(op, fn=fn, group=group, short=short))
        return tagged

    def build_ops(self) -> list[Op]:
        m, e, rows = self.model, self.e, self.rows
        h, qs, kvs, inter = m.hidden_size, self.q_size, self.kv_size, self.inter
        ops = [self.embedding()]
        if self.tp > 1:  # vocab-parallel embedding: each rank looks up its shard, then all-reduce
            ops.append(self.collective("embedding_allreduce", rows, h, self.tp, "model"))
        ops.append(self.norm("attn_norm", rows))
        ops.append(self.gemm("q_proj", rows, qs, h))
        ops.append(self.gemm("k_proj", rows, kvs, h))
        ops.append(self.gemm("v_proj", rows, kvs, h))
        # RoPE on q and k: x·cos + rotate(x)·sin, 3 FLOP per element; reads the cos/sin rows
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
        ops.append(
            self.elementwise("attn_residual", "elementwise", rows, h, 1.0, 2 * rows * h, rows * h)
        )
        ops.append(self.norm("mlp_norm", rows))
        ops.append(self.gemm("gate_proj", rows, inter, h))
        ops.append(self.gemm("up_proj", rows, inter, h))
        # SiLU(gate)·up: x/(1+exp(-x)) then a multiply, ~5 FLOP per element
        ops.append(
            self.elementwise(
                "silu_mul", "elementwise", rows, inter, 5.0, 2 * rows * inter, rows * inter
            )
        )
        ops.append(self.gemm("down_proj", rows, h, inter))
        ops.extend(self.communication("mlp", rows))
        ops.append(
            self.elementwise("mlp_residual", "elementwise", rows, h, 1.0, 2 * rows * h, rows * h)
        )
        head_rows = (
            self.batch if (self.phase == "decode" or self.counting.lm_head == "last") else rows
        )
        # the final norm runs over every row, as transformers, vLLM and TensorRT-LLM run it;
        # only lm_head takes the last
        ops.append(self.norm("final_norm", rows, scope="model"))
        ops.append(self.gemm("lm_head", head_rows, self.vocab, h, scope="model"))
        if self.tp > 1:  # each rank holds vocab/tp logits: gathered (S = the full logits)
            ops.append(
                self.collective("logits_gather", head_rows, self.vocab * self.tp, self.tp, "model")
            )
        if self.parallel.pp > 1:  # hidden state and residual to the next stage
            ops.append(
                self.collective("pp_send", rows, 2 * h, 2, "model", count=self.parallel.pp - 1)
            )
        return ops

    def embedding(self) -> Op:
        m, e, rows = self.model, self.e, self.rows
        if self.counting.embedding == "matmul":
            op = self.gemm("embedding", rows, m.hidden_size, m.vocab_size, scope="model")
            return Op(
                **{
                    **op.__dict__,
                    "kind": "embedding",
                    "note": "counted as a one-hot matmul over the whole table (2·P·T convention)",
                }
            )
        table_rows = rows * m.hidden_size * self.ew("embedding")
        if self.tp > 1:
            table_rows /= self.tp  # each rank reads its shard's rows (on average)
        return Op(
            "embedding",
            "embedding",
            self.phase,
            rows,
            m.hidden_size,
            0,
            self.dtype,
            0.0,
            table_rows + rows * m.hidden_size * e + rows * 4,
            scope="model",
            weight_bytes=table_rows,
            note="gather of one table row per token",
        )

    def attention(self) -> list[Op]:
        m, e = self.model, self.e
        b, tq, d = self.batch, self.q_tokens, m.head_dim
        keys = (
            self.prompt_tokens if self.phase == "prefill" else m.kv_tokens(self.context_tokens + 1)
        )
        window = m.sliding_window
        heads = self.heads
        kv_row = 2 * self.kv_size * self.ekv  # K and V of one token, one layer (KV-cache dtype)
        q_bytes = b * tq * self.q_size * e
        new_kv_bytes = b * tq * kv_row  # written to the cache
        if self.phase == "prefill":
            kv_read = b * tq * kv_row  # K, V of the prompt, read once (fused) from the projections
            kv_cache_read = 0.0
        else:
            kv_read = b * keys * kv_row
            kv_cache_read = kv_read
        if self.counting.attention == "fused":
            causal = self.phase == "prefill"
            pairs = b * heads * (causal_pairs(tq, window) if causal else tq * keys)
            flops = 2 * 2.0 * pairs * d  # QKᵀ and PV
            moved = q_bytes + kv_read + q_bytes + new_kv_bytes
            return [
                Op(
                    "attention",
                    "attention",
                    self.phase,
                    tq,
                    keys,
                    d,
                    self.dtype,
                    flops,
                    moved,
                    batch=b * heads,
                    count=self.layers,
                    kv_bytes=kv_cache_read,
                    note=("causal, " if causal else "")
                    + "fused (FlashAttention-style): scores stay on chip",
                )
            ]
        scores = b * heads * tq * keys
        qk = Op(
            "attn_scores",
            "attention",
            self.phase,
            tq,
            keys,
            d,
            self.dtype,
            2.0 * scores * d,
            q_bytes + kv_read / 2 + scores * e + new_kv_bytes,
            batch=b * heads,
            count=self.layers,
            kv_bytes=kv_cache_read / 2,
            note="QKᵀ over the full square, masked (eager)",
        )
        softmax = Op(
            "attn_softmax",
            "attention",
            self.phase,
            b * heads * tq,
            keys,
            0,
            self.dtype,
            5.0 * scores,
            2.0 * scores * e,
            count=self.layers,
            note="scale, mask, max, exp, sum, divide: ~5 FLOP per score, not on tensor cores",
        )
        pv = Op(
            "attn_pv",
            "attention",
            self.phase,
            tq,
            d,
            keys,
            self.dtype,
            2.0 * scores * d,
            scores * e + kv_read / 2 + q_bytes,
            batch=b * heads,
            count=self.layers,
            kv_bytes=kv_cache_read / 2,
            note="PV (eager)",
        )
        return [qk, softmax, pv]
