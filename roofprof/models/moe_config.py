"""The config side of the mixture-of-experts and MLA families: records, parsing, parameter counts.

:class:`MoeSpec` (routed experts, top-k, shared experts, dense first layers),
:class:`MlaSpec` (DeepSeek's multi-head latent attention) and :class:`AttentionPattern`
(gpt-oss: sliding-window layers, attention sinks, output bias) are the optional frozen
sub-records of :class:`roofprof.specs.ModelSpec` (``moe``, ``mla``, ``pattern``);
:func:`family_fields` reads them from a Hugging Face ``config.json`` for the families
``mixtral``, ``qwen3_moe``, ``deepseek_v3`` and ``gpt_oss``. Like
:mod:`roofprof.models.families` this module imports nothing from roofprof but the errors,
so the config loader can use it without importing the op builders.

Parameter counts (:func:`param_counts`) follow each published convention: ``total``
counts every expert; ``active`` the parameters one token runs through (the ``k`` routed
experts it picks, every shared expert, attention, router, the embedding table and the
head, as Mistral and Qwen publish), ``active_excluding_embedding`` the same without the
input embedding table (as DeepSeek and OpenAI publish).

>>> MoeSpec(8, 2, 14336).expert_params(4096)
176160768
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roofprof.errors import ConfigError

__all__ = [
    "UNIFORM",
    "AttentionPattern",
    "MlaSpec",
    "MoeSpec",
    "ParamCounts",
    "Routing",
    "family_fields",
    "kv_elements_per_token",
    "param_counts",
]


@dataclass(frozen=True)
class Routing:
    """Which experts tokens pick: ``uniform`` (every expert equally likely, the default
    assumption), ``zipf`` (expert i's share of routed slots ∝ i^-``exponent``) or
    ``measured`` (``shares``: each expert's share of routed slots, summing to 1; ``source``
    says where from).

    A token picks ``k`` distinct experts; expert i is among them with probability
    ``π_i = min(1, c·share_i)``, ``c`` such that ``Σ π_i = k`` (``c = k`` unless some expert
    would exceed 1; exactly ``k/E`` under uniform routing), and tokens route
    independently, so ``T`` tokens touch ``Σ_i 1 − (1 − π_i)^T`` distinct experts on
    average: ``E·(1 − (1 − k/E)^T)`` when uniform.

    >>> round(UNIFORM.expected_experts(8, 2, 1), 3), round(UNIFORM.expected_experts(8, 2, 64), 3)
    (2.0, 8.0)
    >>> zipf = round(Routing("zipf", exponent=1.0).expected_experts(128, 8, 16), 1)
    >>> zipf < 128 * (1 - (1 - 8 / 128) ** 16)
    True
    """

    kind: str = "uniform"
    exponent: float = 0.0
    shares: tuple[float, ...] = ()
    source: str = ""

    def inclusion(self, experts: int, k: int) -> tuple[float, ...]:
        """Per expert, the probability that one token routes to it (``min(1, k·share)``).

        Raises:
            ConfigError: measured shares given for a different number of experts.
        """
        if self.kind == "uniform":
            return (k / experts,) * experts
        if self.kind == "zipf":
            weights = [(i + 1) ** -self.exponent for i in range(experts)]
        else:
            if len(self.shares) != experts:
                raise ConfigError(
                    f"routing {self.source or 'shares'} gives {len(self.shares)} experts; "
                    f"the model has {experts}"
                )
            weights = list(self.shares)
        if sum(1 for w in weights if w > 0) < k:
            raise ConfigError(f"routing {self.source or 'shares'} loads fewer than k = {k} experts")
        return _capped(weights, k)

    def expected_experts(self, experts: int, k: int, tokens: float) -> float:
        """Distinct experts ``tokens`` tokens touch in one layer, on average."""
        return sum(1.0 - (1.0 - p) ** tokens for p in self.inclusion(experts, k))

    def busiest_tokens(self, experts: int, k: int, tokens: float) -> float:
        """Tokens routed to the busiest expert, on average (``T·max π_i``)."""
        return tokens * max(self.inclusion(experts, k))

    def describe(self) -> str:
        """The assumption in one line, for every output."""
        if self.kind == "uniform":
            return (
                "uniform routing (each token picks k of E experts at random): "
                "E·(1 − (1 − k/E)^T) experts touched"
            )
        if self.kind == "zipf":
            return (
                f"Zipf routing (expert i's share ∝ i^-{self.exponent:g}); expert i touched with "
                "probability 1 − (1 − min(1, k·share_i))^T"
            )
        return (
            f"measured routing ({self.source}); expert i touched with probability "
            "1 − (1 − min(1, k·share_i))^T"
        )


def _capped(weights: list[float], k: int) -> tuple[float, ...]:
    """``min(1, c·w_i)`` with ``c`` such that the values sum to ``k`` (at most ``len(weights)``)."""
    fixed: set[int] = set()
    while True:
        free = sum(w for i, w in enumerate(weights) if i not in fixed)
        scale = (k - len(fixed)) / free if free > 0 else 0.0
        over = {i for i, w in enumerate(weights) if i not in fixed and scale * w > 1.0}
        if not over:
            return tuple(1.0 if i in fixed else scale * w for i, w in enumerate(weights))
        fixed |= over


#: The default routing assumption.
UNIFORM = Routing()


@dataclass(frozen=True)
class MoeSpec:
    """Routed experts of a mixture-of-experts MLP (sizes in elements).

    ``experts`` routed experts of intermediate size ``expert_intermediate_size``, of which
    each token runs ``experts_per_token`` (top-k); ``shared_experts`` always-on experts of
    ``shared_intermediate_size`` each; the first ``dense_layers`` layers have a dense MLP
    (``ModelSpec.intermediate_size``) instead. ``router_bias``: the router carries one bias
    per expert (gpt-oss; DeepSeek's score-correction bias); ``expert_bias``: each expert's
    gate/up and down projections carry biases (gpt-oss); ``activation``: ``silu`` (SiLU·up)
    or ``clamped_swiglu`` (gpt-oss: clamp, x·σ(αx), (up + 1)·glu); ``groups``: DeepSeek's
    group-limited routing ``(n_group, topk_group)`` (None: the config sets none).
    """

    experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_experts: int = 0
    shared_intermediate_size: int = 0
    dense_layers: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    activation: str = "silu"
    routing: Routing = UNIFORM
    groups: tuple[int, int] | None = None

    def expert_params(self, hidden: int) -> int:
        """Parameters of one routed expert (gate, up, down; their biases with ``expert_bias``)."""
        inter = self.expert_intermediate_size
        return 3 * hidden * inter + ((2 * inter + hidden) if self.expert_bias else 0)

    def router_params(self, hidden: int) -> int:
        """Parameters of the router (``experts × hidden``, plus a bias per expert if any)."""
        return self.experts * hidden + (self.experts if self.router_bias else 0)

    def shared_params(self, hidden: int) -> int:
        """Parameters of all shared experts of one layer."""
        return self.shared_experts * 3 * hidden * self.shared_intermediate_size


@dataclass(frozen=True)
class MlaSpec:
    """DeepSeek's multi-head latent attention (sizes in elements).

    Q is projected down to ``q_lora_rank`` (None: a plain ``q_proj``), normed and up to
    ``heads × (qk_nope_head_dim + qk_rope_head_dim)``; ``kv_a`` projects the hidden state to
    the ``kv_lora_rank`` latent plus one shared ``qk_rope_head_dim`` RoPE key, and ``kv_b``
    up-projects the normed latent to ``heads × (qk_nope_head_dim + v_head_dim)``. The KV
    cache holds the latent and the RoPE key only.
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_elements(self) -> int:
        """Elements one token adds to one layer's cache: latent + RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def params(self, hidden: int, heads: int) -> int:
        """Parameters of one MLA block (projections and the two low-rank norms)."""
        ql, kvl = self.q_lora_rank, self.kv_lora_rank
        q = (
            (hidden * ql + ql + ql * heads * self.qk_head_dim)
            if ql
            else hidden * heads * self.qk_head_dim
        )
        kv = (
            hidden * (kvl + self.qk_rope_head_dim)
            + kvl
            + kvl * heads * (self.qk_nope_head_dim + self.v_head_dim)
        )
        return q + kv + heads * self.v_head_dim * hidden


@dataclass(frozen=True)
class AttentionPattern:
    """Per-layer attention features of gpt-oss: ``sliding_layers`` of the layers attend
    (and cache) at most ``ModelSpec.sliding_window`` tokens, the rest all; ``sinks``: one
    learned logit per head joins each softmax; ``o_bias``: ``o_proj`` carries a bias."""

    sliding_layers: int = 0
    sinks: bool = False
    o_bias: bool = False


@dataclass(frozen=True)
class ParamCounts:
    """Total and active parameter counts (see the module docstring for the conventions)."""

    total: int
    active: int
    active_excluding_embedding: int


def param_counts(m: Any) -> ParamCounts:
    """Total and active parameters of a :class:`~roofprof.specs.ModelSpec` with ``moe``/``mla``.

    >>> from roofprof.specs import load_model
    >>> c = param_counts(load_model("mixtral-8x7b"))
    >>> round(c.total / 1e9, 1), round(c.active / 1e9, 1)
    (46.7, 12.9)
    """
    h, layers = m.hidden_size, m.num_layers
    embed = m.vocab_size * h
    head = 0 if m.tie_word_embeddings else embed
    if m.mla is not None:
        attn = m.mla.params(h, m.num_heads)
    else:
        attn = h * m.q_size + 2 * h * m.kv_size + m.q_size * h
        attn += (m.q_size + 2 * m.kv_size) if m.attention_bias else 0
        attn += 2 * m.head_dim if m.qk_norm else 0
    if m.pattern is not None:
        attn += (m.num_heads if m.pattern.sinks else 0) + (h if m.pattern.o_bias else 0)
    moe = m.moe
    dense_layers = moe.dense_layers if moe else layers
    dense_mlp = 3 * h * m.intermediate_size
    per_layer = attn + 2 * h
    total = per_layer * layers + dense_layers * dense_mlp + embed + head + h
    active = total
    if moe is not None:
        common = moe.router_params(h) + moe.shared_params(h)
        moe_layers = layers - dense_layers
        total += moe_layers * (common + moe.experts * moe.expert_params(h))
        active += moe_layers * (common + moe.experts_per_token * moe.expert_params(h))
    return ParamCounts(total, active, active - embed)


def kv_elements_per_token(m: Any, tokens: int) -> tuple[float, str]:
    """KV-cache elements per sequence of ``tokens`` tokens, all layers, and what they hold.

    MLA: ``(kv_lora_rank + qk_rope_head_dim) × layers`` per token (latent + RoPE key);
    gpt-oss: sliding layers hold at most the window; otherwise K and V of every KV head.
    """
    if m.mla is not None:
        return float(m.mla.cache_elements * m.num_layers * tokens), "latent + RoPE key (MLA)"
    row = 2 * m.kv_size
    sliding = m.pattern.sliding_layers if m.pattern is not None else 0
    window = m.sliding_window
    if sliding and window is not None:
        full = m.num_layers - sliding
        return float(
            row * (full * tokens + sliding * min(tokens, window))
        ), f"K and V; {sliding} layers capped at {window} tokens"
    return float(row * m.num_layers * m.kv_tokens(tokens)), "K and V"


# --------------------------------------------------------------------------- parsing


def family_fields(family: str, cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """The ModelSpec fields of an MoE/MLA family's config (``{}`` for any other family).

    Raises:
        ConfigError: a field the family reads is missing or not a positive integer (named),
            fields contradict each other (top-k more than the experts, gpt-oss's two top-k
            fields differ, ``layer_types`` of the wrong length, more dense layers than
            layers), or a feature roofprof does not model is switched on (named).
    """
    reader = _READERS.get(family)
    return reader(cfg, label) if reader else {}


def _int(cfg: Mapping[str, Any], key: str, label: str, minimum: int = 1) -> int:
    value = cfg.get(key)
    if value is None:
        raise ConfigError(f"{label}: missing field {key!r}")
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not value.is_integer())
        or not minimum <= value <= 2**31 - 1
    ):
        kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ConfigError(f"{label}: field {key!r} must be {kind}, got {value!r}")
    return int(value)


def _flag(cfg: Mapping[str, Any], key: str, default: bool, label: str) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{label}: field {key!r} must be true or false, got {value!r}")
    return value


def _moe(
    cfg: Mapping[str, Any], label: str, experts_key: str, inter_key: str, **extra: Any
) -> MoeSpec:
    experts = _int(cfg, experts_key, label)
    k = _int(cfg, "num_experts_per_tok", label)
    if k > experts:
        raise ConfigError(
            f"{label}: num_experts_per_tok {k} is more than the {experts} experts ({experts_key})"
        )
    return MoeSpec(experts, k, _int(cfg, inter_key, label), **extra)


def _unmodelled(label: str, what: str) -> ConfigError:
    return ConfigError(f"{label}: {what} is not modelled by roofprof")


def _mixtral(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    window = None if cfg.get("sliding_window") is None else _int(cfg, "sliding_window", label)
    return {
        "moe": _moe(cfg, label, "num_local_experts", "intermediate_size"),
        "sliding_window": window,
    }


def _qwen3_moe(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    if _flag(cfg, "use_sliding_window", False, label):
        raise _unmodelled(label, "field 'use_sliding_window' true (per-layer windows)")
    if cfg.get("decoder_sparse_step", 1) != 1:
        raise _unmodelled(
            label,
            f"field 'decoder_sparse_step' {cfg.get('decoder_sparse_step')!r} "
            "(MoE on every n-th layer; only 1 is)",
        )
    if cfg.get("mlp_only_layers"):
        raise _unmodelled(label, "field 'mlp_only_layers' (dense layers between MoE layers)")
    if cfg.get("shared_expert_intermediate_size"):
        raise _unmodelled(
            label, "field 'shared_expert_intermediate_size' (Qwen2-MoE's gated shared expert)"
        )
    return {
        "moe": _moe(cfg, label, "num_experts", "moe_intermediate_size"),
        "qk_norm": True,
        "attention_bias": _flag(cfg, "attention_bias", False, label),
    }


def _deepseek_v3(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    layers = _int(cfg, "num_hidden_layers", label)
    dense = (
        _int(cfg, "first_k_dense_replace", label, minimum=0)
        if "first_k_dense_replace" in cfg
        else 0
    )
    if dense > layers:
        raise ConfigError(
            f"{label}: first_k_dense_replace {dense} is more than num_hidden_layers {layers}"
        )
    if cfg.get("moe_layer_freq", 1) != 1:
        raise _unmodelled(
            label, f"field 'moe_layer_freq' {cfg.get('moe_layer_freq')!r} (only 1 is)"
        )
    if _flag(cfg, "attention_bias", False, label):
        raise _unmodelled(label, "field 'attention_bias' true for MLA")
    shared = (
        _int(cfg, "n_shared_experts", label, minimum=0)
        if cfg.get("n_shared_experts") is not None
        else 0
    )
    groups = cfg.get("n_group")
    if groups is not None:
        n_group, topk_group = _int(cfg, "n_group", label), _int(cfg, "topk_group", label)
        if topk_group > n_group:
            raise ConfigError(f"{label}: topk_group {topk_group} is more than n_group {n_group}")
        groups = (n_group, topk_group)
    inter = _int(cfg, "moe_intermediate_size", label)
    moe = _moe(
        cfg,
        label,
        "n_routed_experts",
        "moe_intermediate_size",
        shared_experts=shared,
        shared_intermediate_size=inter if shared else 0,
        dense_layers=dense,
        router_bias=cfg.get("topk_method", "noaux_tc") == "noaux_tc",
        groups=groups,
    )
    q_lora = None if cfg.get("q_lora_rank") is None else _int(cfg, "q_lora_rank", label)
    mla = MlaSpec(
        q_lora,
        _int(cfg, "kv_lora_rank", label),
        _int(cfg, "qk_nope_head_dim", label),
        _int(cfg, "qk_rope_head_dim", label),
        _int(cfg, "v_head_dim", label),
    )
    return {"moe": moe, "mla": mla, "head_dim": mla.qk_head_dim}


def _gpt_oss(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    moe = _moe(
        cfg,
        label,
        "num_local_experts",
        "intermediate_size",
        router_bias=True,
        expert_bias=True,
        activation="clamped_swiglu",
    )
    if (
        cfg.get("experts_per_token") is not None
        and cfg["experts_per_token"] != moe.experts_per_token
    ):
        raise ConfigError(
            f"{label}: experts_per_token {cfg['experts_per_token']!r} contradicts "
            f"num_experts_per_tok {moe.experts_per_token}"
        )
    layers = _int(cfg, "num_hidden_layers", label)
    types = cfg.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError(f"{label}: field 'layer_types' must list one type per layer ({layers})")
    unknown = sorted(
        {t for t in types if t not in ("sliding_attention", "full_attention")}, key=str
    )
    if unknown:
        raise _unmodelled(label, f"layer type {unknown[0]!r} in 'layer_types'")
    sliding = sum(t == "sliding_attention" for t in types)
    window = _int(cfg, "sliding_window", label) if sliding else None
    return {
        "moe": moe,
        "sliding_window": window,
        "attention_bias": _flag(cfg, "attention_bias", True, label),
        "pattern": AttentionPattern(
            sliding, sinks=True, o_bias=_flag(cfg, "attention_bias", True, label)
        ),
    }


_READERS = {
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}
