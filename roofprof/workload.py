"""The operations of one forward pass, with their shapes, FLOPs and minimum bytes.

A :class:`Scenario` (model, phase, batch, token counts, dtype, counting, parallel layout)
is the key of everything that follows; the model's family (:mod:`roofprof.models`) turns
it into a :class:`Workload`, every kernel-level operation of one forward pass
(``roofprof.models.ops(scenario)``). Identical decoder layers are listed once with
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
  ``all`` tokens (the final norm before it runs over all tokens either way, as the
  engines run it); the embedding is a ``gather`` (one row per token) or, as the ``2·P·T``
  rule of thumb assumes, counted as a ``matmul`` over the whole table.

The ``engine`` convention is the default; ``rule-of-thumb`` (all tokens through lm_head,
embedding as a matmul, elementwise ops fused) reproduces the back-of-envelope ``2·P·T``
numbers (``seed`` is an older name for it, still accepted).

>>> from roofprof.models import ops
>>> w = ops(
...     Scenario.of(
...         "llama-3.1-8b", "decode", context_tokens=0, dtype="bf16", convention="rule-of-thumb"
...     )
... )
>>> round(w.weight_bytes / 1e9, 2)
16.06
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from roofprof.errors import ConfigError, UnknownNameError
from roofprof.specs import BYTES_PER_ELEMENT, DTYPES, ModelSpec

__all__ = [
    "COLLECTIVE_FNS",
    "dense_run",
    "CONVENTIONS",
    "CONVENTION_ALIASES",
    "OP_FNS",
    "OP_GROUPS",
    "OP_KINDS",
    "PHASES",
    "Counting",
    "Op",
    "Parallel",
    "Scenario",
    "Workload",
    "counting_of",
]

PHASES = ("prefill", "decode")
OP_KINDS = ("gemm", "attention", "elementwise", "norm", "embedding", "communication")
#: What an op computes (implementations dispatch on this):
#: ``linear`` x·Wᵀ with a weight matrix; ``onehot_matmul`` the embedding counted as a matmul
#: over the table (rule-of-thumb convention); ``gather`` embedding rows; ``rmsnorm``; ``rope``;
#: ``add`` residual add; ``silu_mul`` SiLU(gate)·up; ``sdpa`` fused attention;
#: ``qk_matmul``/``softmax``/``pv_matmul`` the eager attention steps; ``allreduce``,
#: ``reduce_scatter``, ``all_gather``, ``send`` collectives between ranks (``COLLECTIVE_FNS``).
OP_FNS = (
    "linear",
    "onehot_matmul",
    "gather",
    "rmsnorm",
    "rope",
    "add",
    "silu_mul",
    "sdpa",
    "qk_matmul",
    "softmax",
    "pv_matmul",
    "allreduce",
    "reduce_scatter",
    "all_gather",
    "send",
)
#: The fns that move data between ranks (priced on the interconnect,
#: :mod:`roofprof.prediction.collectives`).
COLLECTIVE_FNS = ("allreduce", "reduce_scatter", "all_gather", "send")
#: Chart groups, in display order.
OP_GROUPS = (
    "attention",
    "q/k/v/o projections",
    "MLP GEMMs",
    "lm_head + embedding",
    "norms + elementwise",
    "communication",
)


@dataclass(frozen=True)
class Counting:
    """How the ops are counted (see the module docstring)."""

    lm_head: Literal["last", "all"] = "last"
    embedding: Literal["gather", "matmul"] = "gather"
    elementwise: Literal["separate", "fused"] = "separate"
    attention: Literal["fused", "unfused"] = "fused"

    def with_attention(self, attention: str) -> Counting:
        """A copy counting attention as ``fused`` (SDPA) or ``unfused`` (eager, scores through
        memory).

        Raises:
            ConfigError: any other value (the message names the valid choices).

        >>> Counting().with_attention("unfused").attention
        'unfused'
        """
        if attention == "fused":
            return replace(self, attention="fused")
        if attention == "unfused":
            return replace(self, attention="unfused")
        raise ConfigError(f"unknown attention {attention!r}; valid choices: fused, unfused")

    def describe(self) -> str:
        """One line stating the choices, for the output of every prediction."""
        return (
            f"lm_head on {self.lm_head} tokens; embedding as {self.embedding}; "
            f"elementwise ops {self.elementwise}; attention {self.attention}"
            + (
                " (causal pairs only in prefill)"
                if self.attention == "fused"
                else " (full masked square)"
            )
        )


CONVENTIONS = {
    "engine": Counting(),
    "rule-of-thumb": Counting(
        lm_head="all", embedding="matmul", elementwise="fused", attention="fused"
    ),
}
#: Older names still accepted (not listed among the choices).
CONVENTION_ALIASES = {"seed": "rule-of-thumb"}


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
        return (
            self.kind,
            self.name if self.kind != "gemm" else "gemm",
            self.m,
            self.n,
            self.k,
            self.batch,
            self.dtype,
        )

    @property
    def total_flops(self) -> float:
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.count

    def to_dict(self) -> dict[str, Any]:
        """The op's identity and per-call counts, as every result record spells them."""
        return {
            "name": self.name,
            "kind": self.kind,
            "phase": self.phase,
            "scope": self.scope,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "batch": self.batch,
            "count": self.count,
            "dtype": self.dtype,
        }


@dataclass(frozen=True)
class Parallel:
    """How one model replica is laid out over devices: ``tp``-way tensor parallelism and
    ``pp`` pipeline stages (1 and 1: a single device); ``sequence_parallel`` replaces each
    tensor-parallel all-reduce by a reduce-scatter and an all-gather (Korthikanti et al.).

    >>> Parallel(tp=8).devices
    8
    """

    tp: int = 1
    pp: int = 1
    sequence_parallel: bool = False

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
    weights: str | None = None
    kv_dtype: str | None = None

    def __post_init__(self) -> None:
        from roofprof.precision import kv_bytes, weight_format

        if self.phase not in PHASES:
            raise UnknownNameError("phase", self.phase, PHASES)
        if self.dtype not in DTYPES:
            raise UnknownNameError("dtype", self.dtype, DTYPES)
        if self.weights is not None:
            weight_format(self.weights)
        stored = self.model.stored
        if (
            self.weights is None
            and stored is not None
            and stored.bits_per_weight != stored.bits_per_weight
        ):
            raise ConfigError(stored.assumption)  # an unmodelled quantization: NaN bits
        if self.kv_dtype is not None:
            kv_bytes(self.kv_dtype)
        if self.batch < 1:
            raise ConfigError(f"batch must be at least 1, got {self.batch}")
        context = self.prompt_tokens if self.context_tokens is None else self.context_tokens
        object.__setattr__(self, "context_tokens", context)
        if self.phase == "prefill" and self.prompt_tokens < 1:
            raise ConfigError(
                f"prompt tokens must be at least 1 for prefill, got {self.prompt_tokens}"
            )
        if context < 0:
            raise ConfigError(f"context tokens must be 0 or more, got {context}")
        _check_layout(self.model, self.parallel)

    @property
    def weight_precision(self) -> str:
        """The stored weight format (``weights``, else the checkpoint's, else ``dtype``)."""
        if self.weights is None and self.model.stored is not None:
            return self.model.stored.format
        return self.weights or self.dtype

    @property
    def kv_precision(self) -> str:
        """The KV cache's element type (``kv_dtype``, else the compute ``dtype``)."""
        return self.kv_dtype or self.dtype

    @property
    def weight_bytes_per_element(self) -> float:
        """Bytes per stored weight, scales and zero points included (:mod:`roofprof.precision`)."""
        from roofprof.precision import weight_bits

        if self.weights is None and self.model.stored is not None:
            return self.model.stored.mean_bits / 8.0  # the checkpoint's bytes per parameter
        if self.weights is None:
            return float(BYTES_PER_ELEMENT[self.dtype])
        return weight_bits(self.weights) / 8.0

    @property
    def kv_bytes_per_element(self) -> float:
        """Bytes per KV-cache element."""
        from roofprof.precision import kv_bytes

        return (
            float(BYTES_PER_ELEMENT[self.dtype])
            if self.kv_dtype is None
            else kv_bytes(self.kv_dtype)
        )

    def precisions(self) -> dict[str, str]:
        """``{"dtype", "weights", "kv_dtype"}`` as used (defaults resolved), for every output."""
        return {
            "dtype": self.dtype,
            "weights": self.weight_precision,
            "kv_dtype": self.kv_precision,
        }

    @classmethod
    def of(
        cls,
        model: str | ModelSpec,
        phase: str,
        *,
        batch: int = 1,
        prompt_tokens: int = 0,
        context_tokens: int | None = None,
        dtype: str = "bf16",
        convention: str | Counting = "engine",
        parallel: Parallel | None = None,
        weights: str | None = None,
        kv_dtype: str | None = None,
        stored_weights: bool = True,
    ) -> Scenario:
        """A scenario from loose arguments (a model id/path or spec, a convention name).

        ``weights`` and ``kv_dtype`` default to ``None``: the checkpoint's stored weights
        when the model has them (a quantized checkpoint, a GGUF file), else ``dtype``.
        ``stored_weights=False`` drops the checkpoint's (what a real run with random
        ``dtype`` weights runs: ``profile``, ``validate``, ``run``).

        Raises:
            ConfigError, UnknownNameError: unknown model, phase, dtype, weight format, KV
                dtype or convention; bad sizes.
        """
        from roofprof.specs import load_model

        spec = model if isinstance(model, ModelSpec) else load_model(model)
        if not stored_weights and spec.stored is not None:
            spec = replace(spec, stored=None)
        return cls(
            spec,
            phase,
            batch,
            prompt_tokens,
            context_tokens,
            dtype,
            counting_of(convention),
            parallel or Parallel(),
            weights,
            kv_dtype,
        )

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
    weights: str | None = None
    kv_dtype: str | None = None
    parallel: Parallel = field(default_factory=Parallel)

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

    @property
    def scenario(self) -> Scenario:
        """The scenario these ops were built for."""
        return Scenario(
            self.model,
            self.phase,
            self.batch,
            self.prompt_tokens,
            self.context_tokens,
            self.dtype,
            self.counting,
            self.parallel,
            weights=self.weights,
            kv_dtype=self.kv_dtype,
        )


def dense_run(model: str | ModelSpec | Scenario, dtype: str) -> tuple[Any, str]:
    """``model`` loaded (a Scenario stays one), and the note a run of dense ``dtype``
    kernels (``profile``, ``validate``, ``run``) states when it is a quantized checkpoint
    (:meth:`~roofprof.precision.StoredWeights.dense_run_note`; ``""``: none to state).

    >>> dense_run("llama-3.2-1b", "bf16")[1], bool(dense_run("openai/gpt-oss-20b", "bf16")[1])
    ('', True)
    """
    from roofprof.specs import load_model

    loaded = load_model(model) if isinstance(model, str) else model
    spec = loaded.model if isinstance(loaded, Scenario) else loaded
    stored = spec.stored
    note = stored.dense_run_note(spec.id, dtype) if stored and stored.quantized else ""
    return loaded, note


def counting_of(convention: str | Counting) -> Counting:
    """A :class:`Counting` as given, or the named one of :data:`CONVENTIONS`.

    Raises:
        UnknownNameError: an unknown convention name.
    """
    if isinstance(convention, Counting):
        return convention
    convention = CONVENTION_ALIASES.get(convention, convention)
    if convention not in CONVENTIONS:
        raise UnknownNameError("counting convention", convention, CONVENTIONS)
    return CONVENTIONS[convention]


def _check_layout(model: ModelSpec, parallel: Parallel) -> None:
    """Raise ConfigError (one line) when ``parallel`` cannot split ``model``."""
    tp, pp = parallel.tp, parallel.pp
    if tp > 1:
        for what, value in (
            ("attention heads", model.num_heads),
            ("hidden size", model.hidden_size),
            ("intermediate size", model.intermediate_size),
        ):
            if value % tp:
                raise ConfigError(f"--tp {tp} does not divide {model.id}'s {what} ({value})")
        kv = model.num_kv_heads
        if (kv % tp) if tp <= kv else (tp % kv):
            raise ConfigError(
                f"--tp {tp} does not split {model.id}'s {kv} KV heads (nor replicate them evenly)"
            )
    if pp > model.num_layers:
        raise ConfigError(f"--pp {pp} is more than {model.id}'s {model.num_layers} layers")
