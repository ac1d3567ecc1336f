"""The operations of one Llama forward pass, with their shapes, FLOPs and minimum bytes.

``llama_ops`` lists, for a model, phase, batch, token counts and dtype, every kernel-level
operation of one forward pass. Identical decoder layers are listed once with
``count = num_layers``. Each :class:`Op` carries its GEMM shape (``m, n, k`` and a
``batch`` of independent GEMMs), its FLOPs and the minimum bytes it must move from memory
(weights, activations, KV-cache reads and writes), so its arithmetic intensity follows.

Counting rules (stated in every prediction):

* GEMMs: ``2·m·n·k`` FLOPs per GEMM; bytes = weights + input + output activations.
* Attention, ``fused`` (default; FlashAttention-style, what inference engines run): one
  kernel reads Q, K, V (or the KV cache) and writes O; the score matrix never reaches
  memory. Prefill is causal: only the ``T·(T+1)/2`` query-key pairs at or below the
  diagonal are computed (``2·T²·d_model`` FLOPs per layer for QKᵀ and PV together).
  ``unfused`` (eager PyTorch): QKᵀ over the full square (masked, not skipped), the scores
  written, softmaxed and read back, then PV. Softmax exp/max/sum are not counted as
  matmul FLOPs (they run on another pipe), only their bytes.
* Decode reads the KV cache of the current context: ``context_tokens`` cached tokens plus
  the new one, per sequence; new K/V rows are written.
* Elementwise ops (RMSNorm, RoPE, residual adds, SiLU·mul) are ``separate`` kernels (read
  and write their activations) or ``fused`` into neighbouring kernels (no bytes of their
  own; their few FLOPs are kept).
* ``lm_head`` runs on the ``last`` token of each sequence in prefill (engines) or on
  ``all`` tokens; the embedding is a ``gather`` (one row per token) or, as the ``2·P·T``
  rule of thumb assumes, counted as a ``matmul`` over the whole table.

The ``engine`` convention is the default; ``seed`` (all tokens through lm_head, embedding
as a matmul, elementwise ops fused) reproduces the back-of-envelope ``2·P·T`` numbers.

>>> from roofprof.specs import load_model
>>> w = llama_ops(load_model("llama-3.1-8b"), "decode", batch=1, context_tokens=0,
...               dtype="bf16", convention="seed")
>>> round(w.weight_bytes / 1e9, 2)
16.06
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from roofprof.errors import ConfigError, UnknownNameError
from roofprof.specs import BYTES_PER_ELEMENT, DTYPES, ModelSpec

PHASES = ("prefill", "decode")
OP_KINDS = ("gemm", "attention", "elementwise", "norm", "embedding")
#: What an op computes (implementations dispatch on this):
#: ``linear`` x·Wᵀ with a weight matrix; ``onehot_matmul`` the embedding counted as a matmul
#: over the table (seed convention); ``gather`` embedding rows; ``rmsnorm``; ``rope``;
#: ``add`` residual add; ``silu_mul`` SiLU(gate)·up; ``sdpa`` fused attention;
#: ``qk_matmul``/``softmax``/``pv_matmul`` the eager attention steps; ``allreduce`` a collective.
OP_FNS = ("linear", "onehot_matmul", "gather", "rmsnorm", "rope", "add", "silu_mul", "sdpa",
          "qk_matmul", "softmax", "pv_matmul", "allreduce")
#: Chart groups, in display order.
OP_GROUPS = ("attention", "q/k/v/o projections", "MLP GEMMs", "lm_head + embedding",
             "norms + elementwise")


@dataclass(frozen=True)
class Counting:
    """How the ops are counted (see the module docstring)."""

    lm_head: Literal["last", "all"] = "last"
    embedding: Literal["gather", "matmul"] = "gather"
    elementwise: Literal["separate", "fused"] = "separate"
    attention: Literal["fused", "unfused"] = "fused"

    def describe(self) -> str:
        """One line stating the choices, for the output of every prediction."""
        return (
            f"lm_head on {self.lm_head} tokens; embedding as {self.embedding}; "
            f"elementwise ops {self.elementwise}; attention {self.attention}"
            + (" (causal pairs only in prefill)" if self.attention == "fused" else " (full masked square)")
        )


CONVENTIONS = {
    "engine": Counting(),
    "seed": Counting(lm_head="all", embedding="matmul", elementwise="fused", attention="fused"),
}


@dataclass(frozen=True)
class Op:
    """One kernel-level operation of a forward pass.

    ``flops`` and ``bytes`` are for one call; the pass runs it ``count`` times (once per
    layer for layer ops). ``m, n, k`` is the GEMM shape (``[m,k]·[k,n]``; for elementwise
    ops ``m`` rows of ``n`` elements, ``k = 0``); ``batch`` independent GEMMs of that shape.
    """

    name: str
    kind: str
    phase: str
    m: int
    n: int
    k: int
    dtype: str
    flops: float
    bytes: float
    batch: int = 1
    count: int = 1
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    scope: str = "layer"  # "layer" (repeated per decoder layer) or "model" (embedding, head)
    note: str = ""
    fn: str = ""
    group: str = ""
    short: str = ""

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of minimum traffic (inf if no bytes)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def shape_key(self) -> tuple:
        """What makes two ops the same kernel call (measure once, reuse)."""
        return (self.kind, self.name if self.kind != "gemm" else "gemm", self.m, self.n, self.k, self.batch, self.dtype)

    @property
    def total_flops(self) -> float:
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.count


@dataclass(frozen=True)
class Parallel:
    """How one model replica is laid out over devices: ``tp``-way tensor parallelism and
    ``pp`` pipeline stages (1 and 1: a single device)."""

    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number of at least 1, got {value!r}")

    @property
    def devices(self) -> int:
        """Devices one replica occupies."""
        return self.tp * self.pp


@dataclass(frozen=True)
class Scenario:
    """What is run: the one key of workload building, roll-up, profiling and caching.

    Frozen and hashable. ``context_tokens`` are the tokens already in the KV cache per
    sequence for decode (``None``: the prompt length). Build one with :meth:`of`, which
    accepts a model id or path and a convention name.

    >>> s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=128)
    >>> s.context_tokens, s.dtype, s.parallel.tp
    (128, 'bf16', 1)
    """

    model: ModelSpec
    phase: str
    batch: int = 1
    prompt_tokens: int = 0
    context_tokens: int | None = None
    dtype: str = "bf16"
    counting: Counting = field(default_factory=Counting)
    parallel: Parallel = field(default_factory=Parallel)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise UnknownNameError("phase", self.phase, PHASES)
        if self.dtype not in DTYPES:
            raise UnknownNameError("dtype", self.dtype, DTYPES)
        if self.batch < 1:
            raise ConfigError(f"batch must be at least 1, got {self.batch}")
        if self.context_tokens is None:
            object.__setattr__(self, "context_tokens", self.prompt_tokens)
        if self.phase == "prefill" and self.prompt_tokens < 1:
            raise ConfigError(f"prompt tokens must be at least 1 for prefill, got {self.prompt_tokens}")
        if self.context_tokens < 0:
            raise ConfigError(f"context tokens must be 0 or more, got {self.context_tokens}")

    @classmethod
    def of(cls, model: str | ModelSpec, phase: str, *, batch: int = 1, prompt_tokens: int = 0,
           context_tokens: int | None = None, dtype: str = "bf16", convention: str | Counting = "engine",
           parallel: Parallel | None = None) -> Scenario:
        """A scenario from loose arguments (a model id/path or spec, a convention name).

        Raises:
            ConfigError, UnknownNameError: unknown model, phase, dtype or convention; bad sizes.
        """
        from roofprof.specs import load_model

        spec = model if isinstance(model, ModelSpec) else load_model(model)
        return cls(spec, phase, batch, prompt_tokens, context_tokens, dtype, _counting(convention),
                   parallel or Parallel())

    def replace(self, **changes) -> Scenario:
        """A copy with some fields changed (``phase``, ``batch``, ``context_tokens``...)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Workload:
    """The ops of one forward pass plus the parameters that produced them."""

    model: ModelSpec
    phase: str
    batch: int
    prompt_tokens: int
    context_tokens: int
    dtype: str
    counting: Counting
    ops: tuple[Op, ...] = field(default_factory=tuple)

    @property
    def tokens(self) -> int:
        """Tokens processed by this pass (all sequences)."""
        return self.batch * (self.prompt_tokens if self.phase == "prefill" else 1)

    @property
    def flops(self) -> float:
        return sum(op.total_flops for op in self.ops)

    @property
    def bytes(self) -> float:
        return sum(op.total_bytes for op in self.ops)

    @property
    def weight_bytes(self) -> float:
        return sum(op.weight_bytes * op.count for op in self.ops)

    @property
    def kv_bytes(self) -> float:
        return sum(op.kv_bytes * op.count for op in self.ops)

    @property
    def attention_flops(self) -> float:
        return sum(op.total_flops for op in self.ops if op.kind == "attention")


def llama_ops(
    model: ModelSpec,
    phase: str,
    *,
    batch: int = 1,
    prompt_tokens: int = 0,
    context_tokens: int | None = None,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
) -> Workload:
    """The ops of one prefill pass or one decode step of a Llama model.

    Args:
        model: the model config.
        phase: ``"prefill"`` (``prompt_tokens`` per sequence) or ``"decode"`` (one new
            token per sequence, attending to ``context_tokens`` cached tokens).
        batch: sequences processed together.
        prompt_tokens: prompt length per sequence (prefill).
        context_tokens: tokens already in the KV cache per sequence (decode; defaults to
            ``prompt_tokens``).
        dtype: weights, activations and KV cache dtype (``fp32 bf16 fp16 fp8 ...``).
        convention: ``"engine"``, ``"seed"`` or a :class:`Counting`.

    Raises:
        ConfigError: non-positive batch or tokens, unknown phase or dtype.

    >>> from roofprof.specs import load_model
    >>> w = llama_ops(load_model("llama-3.2-1b"), "prefill", prompt_tokens=128, dtype="fp32")
    >>> [op.name for op in w.ops][:3]
    ['embedding', 'attn_norm', 'q_proj']
    """
    if phase not in PHASES:
        raise UnknownNameError("phase", phase, PHASES)
    if dtype not in DTYPES:
        raise UnknownNameError("dtype", dtype, DTYPES)
    counting = _counting(convention)
    if batch < 1:
        raise ConfigError(f"batch must be at least 1, got {batch}")
    if context_tokens is None:
        context_tokens = prompt_tokens
    if phase == "prefill" and prompt_tokens < 1:
        raise ConfigError(f"prompt tokens must be at least 1 for prefill, got {prompt_tokens}")
    if context_tokens < 0:
        raise ConfigError(f"context tokens must be 0 or more, got {context_tokens}")
    builder = _Builder(model, phase, batch, prompt_tokens, context_tokens, dtype, counting)
    return Workload(model, phase, batch, prompt_tokens, context_tokens, dtype, counting, tuple(builder.ops()))


def _counting(convention: str | Counting) -> Counting:
    if isinstance(convention, Counting):
        return convention
    if convention not in CONVENTIONS:
        raise UnknownNameError("counting convention", convention, CONVENTIONS)
    return CONVENTIONS[convention]


_PROJ, _MLP, _ATTN, _HEAD, _ELEM = OP_GROUPS[1], OP_GROUPS[2], OP_GROUPS[0], OP_GROUPS[3], OP_GROUPS[4]
#: Llama op name -> (fn, chart group, short label).
_LLAMA_ROLES = {
    "embedding": ("gather", _HEAD, "emb"), "lm_head": ("linear", _HEAD, "head"),
    "q_proj": ("linear", _PROJ, "q"), "k_proj": ("linear", _PROJ, "k"), "v_proj": ("linear", _PROJ, "v"),
    "o_proj": ("linear", _PROJ, "o"), "gate_proj": ("linear", _MLP, "gate"), "up_proj": ("linear", _MLP, "up"),
    "down_proj": ("linear", _MLP, "down"), "attn_norm": ("rmsnorm", _ELEM, "anorm"),
    "mlp_norm": ("rmsnorm", _ELEM, "mnorm"), "final_norm": ("rmsnorm", _ELEM, "fnorm"),
    "rope": ("rope", _ELEM, "rope"), "attn_residual": ("add", _ELEM, "res1"),
    "mlp_residual": ("add", _ELEM, "res2"), "silu_mul": ("silu_mul", _ELEM, "silu"),
    "attention": ("sdpa", _ATTN, "attn"), "attn_scores": ("qk_matmul", _ATTN, "QK"),
    "attn_softmax": ("softmax", _ATTN, "softmax"), "attn_pv": ("pv_matmul", _ATTN, "PV"),
}


@dataclass
class _Builder:
    model: ModelSpec
    phase: str
    batch: int
    prompt_tokens: int
    context_tokens: int
    dtype: str
    counting: Counting

    def __post_init__(self) -> None:
        self.e = BYTES_PER_ELEMENT[self.dtype]
        self.q_tokens = self.prompt_tokens if self.phase == "prefill" else 1  # per sequence
        self.rows = self.batch * self.q_tokens  # activation rows through the linear layers
        self.layers = self.model.num_layers

    # -- helpers -----------------------------------------------------------------------
    def gemm(self, name: str, rows: int, n: int, k: int, scope: str = "layer") -> Op:
        e = self.e
        weights = n * k * e
        return Op(name, "gemm", self.phase, rows, n, k, self.dtype, 2.0 * rows * n * k,
                  weights + rows * k * e + rows * n * e, count=self.layers if scope == "layer" else 1,
                  weight_bytes=weights, scope=scope)

    def elementwise(self, name: str, kind: str, rows: int, n: int, flops_per_elem: float,
                    elems_read: float, elems_written: float, extra_bytes: float = 0.0, scope: str = "layer",
                    weight_bytes: float = 0.0) -> Op:
        fused = self.counting.elementwise == "fused"
        moved = 0.0 if fused else (elems_read + elems_written) * self.e + extra_bytes
        return Op(name, kind, self.phase, rows, n, 0, self.dtype, flops_per_elem * rows * n, moved,
                  count=self.layers if scope == "layer" else 1, scope=scope,
                  weight_bytes=0.0 if fused else weight_bytes,
                  note="fused into neighbouring kernels: no traffic of its own" if fused else "")

    def norm(self, name: str, rows: int, scope: str = "layer") -> Op:
        h = self.model.hidden_size
        # square, sum, scale by rsqrt, multiply by the weight: ~4 FLOP per element
        return self.elementwise(name, "norm", rows, h, 4.0, rows * h, rows * h, h * self.e, scope,
                                weight_bytes=h * self.e)

    # -- the pass ----------------------------------------------------------------------
    def ops(self) -> list[Op]:
        """The pass, each op tagged with what it computes (``fn``) and its chart group."""
        tagged = []
        for op in self._ops():
            fn, group, short = _LLAMA_ROLES[op.name]
            if op.name == "embedding" and op.k:
                fn = "onehot_matmul"
            tagged.append(replace(op, fn=fn, group=group, short=short))
        return tagged

    def _ops(self) -> list[Op]:
        m, e, rows = self.model, self.e, self.rows
        h = m.hidden_size
        ops = [self.embedding()]
        ops.append(self.norm("attn_norm", rows))
        ops.append(self.gemm("q_proj", rows, m.q_size, h))
        ops.append(self.gemm("k_proj", rows, m.kv_size, h))
        ops.append(self.gemm("v_proj", rows, m.kv_size, h))
        # RoPE on q and k: x·cos + rotate(x)·sin, 3 FLOP per element; reads the cos/sin rows
        ops.append(self.elementwise("rope", "elementwise", rows, m.q_size + m.kv_size, 3.0,
                                    rows * (m.q_size + m.kv_size), rows * (m.q_size + m.kv_size),
                                    extra_bytes=2 * rows * m.head_dim * e))
        ops.extend(self.attention())
        ops.append(self.gemm("o_proj", rows, h, m.q_size))
        ops.append(self.elementwise("attn_residual", "elementwise", rows, h, 1.0, 2 * rows * h, rows * h))
        ops.append(self.norm("mlp_norm", rows))
        ops.append(self.gemm("gate_proj", rows, m.intermediate_size, h))
        ops.append(self.gemm("up_proj", rows, m.intermediate_size, h))
        # SiLU(gate)·up: x/(1+exp(-x)) then a multiply, ~5 FLOP per element
        ops.append(self.elementwise("silu_mul", "elementwise", rows, m.intermediate_size, 5.0,
                                    2 * rows * m.intermediate_size, rows * m.intermediate_size))
        ops.append(self.gemm("down_proj", rows, h, m.intermediate_size))
        ops.append(self.elementwise("mlp_residual", "elementwise", rows, h, 1.0, 2 * rows * h, rows * h))
        head_rows = self.batch if (self.phase == "decode" or self.counting.lm_head == "last") else rows
        ops.append(self.norm("final_norm", head_rows, scope="model"))
        ops.append(self.gemm("lm_head", head_rows, m.vocab_size, h, scope="model"))
        return ops

    def embedding(self) -> Op:
        m, e, rows = self.model, self.e, self.rows
        if self.counting.embedding == "matmul":
            op = self.gemm("embedding", rows, m.hidden_size, m.vocab_size, scope="model")
            return Op(**{**op.__dict__, "kind": "embedding",
                         "note": "counted as a one-hot matmul over the whole table (2·P·T convention)"})
        table_rows = rows * m.hidden_size * e
        return Op("embedding", "embedding", self.phase, rows, m.hidden_size, 0, self.dtype, 0.0,
                  2.0 * table_rows + rows * 4, scope="model", weight_bytes=table_rows,
                  note="gather of one table row per token")

    def attention(self) -> list[Op]:
        m, e = self.model, self.e
        b, tq, d = self.batch, self.q_tokens, m.head_dim
        keys = self.prompt_tokens if self.phase == "prefill" else self.context_tokens + 1
        heads = m.num_heads
        kv_row = 2 * m.kv_size * e  # K and V of one token, one layer
        q_bytes = b * tq * m.q_size * e
        new_kv_bytes = b * tq * kv_row  # written to the cache
        if self.phase == "prefill":
            kv_read = b * tq * kv_row  # K, V of the prompt, read once (fused) from the projections
            kv_cache_read = 0.0
        else:
            kv_read = b * keys * kv_row
            kv_cache_read = kv_read
        if self.counting.attention == "fused":
            causal = self.phase == "prefill"
            pairs = b * heads * (tq * (tq + 1) / 2 if causal else tq * keys)
            flops = 2 * 2.0 * pairs * d  # QKᵀ and PV
            moved = q_bytes + kv_read + q_bytes + new_kv_bytes
            return [Op("attention", "attention", self.phase, tq, keys, d, self.dtype, flops, moved,
                       batch=b * heads, count=self.layers, kv_bytes=kv_cache_read,
                       note=("causal, " if causal else "") + "fused (FlashAttention-style): scores stay on chip")]
        scores = b * heads * tq * keys
        qk = Op("attn_scores", "attention", self.phase, tq, keys, d, self.dtype, 2.0 * scores * d,
                q_bytes + kv_read / 2 + scores * e + new_kv_bytes, batch=b * heads, count=self.layers,
                kv_bytes=kv_cache_read / 2, note="QKᵀ over the full square, masked (eager)")
        softmax = Op("attn_softmax", "attention", self.phase, b * heads * tq, keys, 0, self.dtype,
                     5.0 * scores, 2.0 * scores * e, count=self.layers,
                     note="scale, mask, max, exp, sum, divide: ~5 FLOP per score, not on tensor cores")
        pv = Op("attn_pv", "attention", self.phase, tq, d, keys, self.dtype, 2.0 * scores * d,
                scores * e + kv_read / 2 + q_bytes, batch=b * heads, count=self.layers,
                kv_bytes=kv_cache_read / 2, note="PV (eager)")
        return [qk, softmax, pv]
