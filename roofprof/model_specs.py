"""Model configs: :class:`ModelSpec` and its loading from a Hugging Face ``config.json``.

A ``ModelSpec`` is read from either a shipped config (``data/models/<id>.json``) or any path
the user gives; every field is checked (type, range) and the message names the file and the
field. :mod:`roofprof.specs` is the public face of these names.

>>> load_model("qwen2.5-0.5b").attention_bias
True
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofprof._resources import data_root
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.gpu_specs import BYTES_PER_ELEMENT

if TYPE_CHECKING:
    from roofprof.models.moe_config import AttentionPattern, MlaSpec, MoeSpec
    from roofprof.precision import StoredWeights

__all__ = [
    "GemmaFeatures",
    "ModelSpec",
    "ignored_fields",
    "list_models",
    "load_model",
    "shipped_id",
]


def _data_root():
    """The shipped data folder (``roofprof.data`` package, i.e. the repo's ``data/``)."""
    return data_root()


@dataclass(frozen=True)
class GemmaFeatures:
    """What Gemma 2 and 3 add to a dense decoder (:attr:`ModelSpec.gemma`).

    ``local_layers`` flags, per layer, sliding-window ("local") attention over
    ``ModelSpec.sliding_window`` keys; the others attend to the whole sequence. Scores are
    scaled by ``query_pre_attn_scalar ** -0.5``; a soft-cap ``c`` maps ``x -> c·tanh(x/c)``
    (attention scores, final logits; None: off). ``rope_local_theta``: RoPE base of the
    local layers (Gemma 3), None: ``ModelSpec.rope_theta``. Each layer has four RMSNorms
    (``x·(1 + w)``), the MLP is GeGLU (``gelu_tanh(gate)·up``), embeddings are scaled by
    ``sqrt(hidden_size)``.
    """

    query_pre_attn_scalar: float
    local_layers: tuple[bool, ...]
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    rope_local_theta: float | None = None


@dataclass(frozen=True)
class ModelSpec:
    """A Llama-style decoder (dense, GQA, SwiGLU MLP, RMSNorm, RoPE).

    ``family`` names the op list it is built with (:mod:`roofprof.models`). The RoPE and
    norm fields are what a real model of it needs beyond the sizes: ``rope_theta`` (base),
    ``rope_scaling`` (the config's ``rope_scaling`` as sorted ``(key, value)`` pairs, so
    the record stays hashable; :attr:`rope_scaling_dict` gives the mapping) and
    ``rms_norm_eps`` (transformers' defaults when the config omits them).

    >>> m = load_model("llama-3.1-8b")
    >>> m.kv_bytes_per_token("bf16")
    131072
    >>> m.family, m.rope_theta, m.rope_scaling_dict["rope_type"]
    ('llama', 500000.0, 'llama3')
    """

    id: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    source: str = ""
    family: str = "llama"
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    sliding_window: int | None = None  # keys attended and cached per sequence (Mistral); None: all
    qk_norm: bool = False  # RMSNorm of each q and k head before RoPE (Qwen3, Gemma 3)
    gemma: GemmaFeatures | None = None  # Gemma 2/3 features (local/global layers, soft-caps, ...)
    ignored_fields: tuple[str, ...] = ()  # config fields present that this family does not read
    moe: MoeSpec | None = None  # routed experts (Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss)
    mla: MlaSpec | None = None  # multi-head latent attention (DeepSeek-V3)
    pattern: AttentionPattern | None = None  # sliding layers, sinks, o bias (gpt-oss)
    stored: StoredWeights | None = None  # the checkpoint's weights (quantized, GGUF); None: dtype

    def kv_tokens(self, tokens: int) -> int | float:
        """Tokens of a ``tokens``-long sequence the KV cache holds per layer (``sliding_window``
        caps it; with Gemma's local/global layers, the mean over layers).

        >>> ModelSpec("m", 64, 128, 1, 4, 4, 16, 100, False, 4096, sliding_window=32).kv_tokens(100)
        32
        """
        if self.sliding_window is None:
            return tokens
        if self.gemma is None:
            return min(tokens, self.sliding_window)
        local = self.num_local_layers
        total = local * min(tokens, self.sliding_window) + (self.num_layers - local) * tokens
        return total // self.num_layers if total % self.num_layers == 0 else total / self.num_layers

    @property
    def num_local_layers(self) -> int:
        """Layers with sliding-window attention (Gemma's local layers; all of them elsewhere
        when ``sliding_window`` is set, none when it is not)."""
        if self.sliding_window is None:
            return 0
        if self.gemma is None:
            return self.num_layers
        return sum(self.gemma.local_layers[: self.num_layers])

    @property
    def rope_scaling_dict(self) -> dict[str, Any] | None:
        """``rope_scaling`` as a dict (None when the model has no RoPE scaling)."""
        return dict(self.rope_scaling) if self.rope_scaling is not None else None

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_param_count(self) -> int:
        """Parameters of one decoder layer (attention with its biases and q/k norms, MLP, two
        RMSNorms; a mixture-of-experts or MLA model: the average layer, every expert counted)."""
        if self.moe is not None or self.mla is not None or self.pattern is not None:
            table = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
            return (self.param_count() - table - self.hidden_size) // self.num_layers
        h = self.hidden_size
        attn = h * self.q_size + 2 * h * self.kv_size + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.qk_norm:
            attn += 2 * self.head_dim
        mlp = 3 * h * self.intermediate_size
        return attn + mlp + (4 if self.gemma is not None else 2) * h

    def param_count(self) -> int:
        """All parameters (every expert of an MoE model), counting tied embeddings once."""
        if self.moe is not None or self.mla is not None or self.pattern is not None:
            from roofprof.models.moe_config import param_counts

            return param_counts(self).total
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return embed + self.num_layers * self.layer_param_count() + self.hidden_size + head

    def active_param_count(self) -> int:
        """Parameters one token runs through (MoE: its top-k experts; else all of them)."""
        if self.moe is not None or self.mla is not None or self.pattern is not None:
            from roofprof.models.moe_config import param_counts

            return param_counts(self).active
        return self.param_count()

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV-cache bytes one token adds across all layers (K and V; MLA: latent + RoPE key)."""
        if self.mla is not None:
            return self.mla.cache_elements * self.num_layers * BYTES_PER_ELEMENT[dtype]
        return 2 * self.num_layers * self.kv_size * BYTES_PER_ELEMENT[dtype]


_REQUIRED_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


def list_models() -> tuple[str, ...]:
    """Ids of the shipped model configs (``data/models/*.json``)."""
    folder = _data_root() / "models"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))


def load_model(id_or_path: str | Path) -> ModelSpec:
    """A model from a shipped id (``llama-3.1-8b``), the path of an HF ``config.json``, a
    Hugging Face Hub id (``org/name[@revision]``), a local model folder or a ``.gguf`` file
    (:func:`roofprof.checkpoints.locate`; docs/concepts/naming-models.md).

    Anything but a bare shipped id also reads the checkpoint's stored weights into
    :attr:`ModelSpec.stored` (its ``quantization_config``, the safetensors headers or index,
    a GGUF tensor table); a Hub id that is a shipped config's ``_name_or_path`` is read from
    the shipped file, without network.

    Dense families read: ``llama``, ``qwen2`` (q/k/v biases), ``mistral``
    (``sliding_window``), ``qwen3`` (explicit ``head_dim``, q/k norms); mixture-of-experts
    families ``mixtral``, ``qwen3_moe``, ``deepseek_v3`` (with MLA), ``gpt_oss`` fill the
    ``moe``/``mla``/``pattern`` sub-records (:func:`roofprof.models.moe_config.family_fields`).

    ``head_dim`` defaults to hidden/heads and ``num_key_value_heads`` to the head count, as
    in transformers. The config's ``model_type`` (else ``architectures``) must name a
    family roofprof has op lists for (:func:`roofprof.models.family_of`).

    Raises:
        UnknownNameError: neither a known id, an existing file or folder, nor a Hub id; a
            GGUF architecture roofprof does not read; or a config of a model
            family roofprof does not model (e.g. ``mixtral``), naming it and the families.
        ConfigError: the file cannot be read or is not JSON, misses a field, has a field of
            the wrong type (``"false"`` for a boolean), a size that is not a whole number in
            ``1 .. 2**31-1``, a non-finite float, or implausible sizes overall (more than
            1e14 parameters), or a family field out of range (``sliding_window`` not a
            positive integer or null, ``attention_bias`` not a boolean, Qwen's
            ``use_sliding_window`` true); the message names the file and the field.
    """
    text = str(id_or_path)
    located = None
    checkpoint = True  # the config's quantization_config applies (not for a bare shipped id)
    if text in list_models():
        path, label, checkpoint = _data_root() / "models" / f"{text}.json", text, False
    elif (shipped := shipped_id(text)) is not None:  # a Hub id roofprof ships: no network
        path, label = _data_root() / "models" / f"{shipped}.json", text.split("@")[0]
    elif _is_file(text) and not text.lower().endswith(".gguf"):
        path, label = (
            Path(text),
            Path(text).stem
            if Path(text).name != "config.json"
            else Path(text).parent.name or "config",
        )
    else:
        from roofprof.checkpoints import locate

        located = locate(text)
        if located is None and _exists(text):  # a socket, ...: say what is wrong with the path
            raise ConfigError(f"model config {text!r} is not a file")
        if located is None:
            raise UnknownNameError(
                "model", text if len(text) <= 200 else text[:200] + "...", list_models()
            )
        path, label = Path(located.source), located.label
    if located is not None:
        cfg: Any = dict(located.config)
    else:
        from roofprof.results import loads_json, read_text

        cfg = loads_json(read_text(path, what="model config", max_bytes=_MAX_CONFIG_BYTES), text)
    spec = _spec_of_config(cfg, text, label, path)
    if not checkpoint:
        return spec
    return _with_stored(spec, cfg, located, text)


def shipped_id(hub_id: str) -> str | None:
    """The shipped config whose ``_name_or_path`` is ``hub_id`` (case-insensitive; an
    ``@main`` revision allowed), else None.

    >>> shipped_id("meta-llama/Llama-3.1-8B"), shipped_id("meta-llama/Llama-3.1-8B@v2")
    ('llama-3.1-8b', None)
    """
    repo, _, revision = hub_id.partition("@")
    if revision not in ("", "main"):
        return None
    return _shipped_hub_ids().get(repo.lower())


@functools.lru_cache(maxsize=1)
def _shipped_hub_ids() -> dict[str, str]:
    out = {}
    for mid in list_models():
        cfg = json.loads((_data_root() / "models" / f"{mid}.json").read_text())
        if isinstance(cfg.get("_name_or_path"), str):
            out[cfg["_name_or_path"].lower()] = mid
    return out


def _with_stored(spec: ModelSpec, cfg: Mapping[str, Any], located: Any, text: str) -> ModelSpec:
    """``spec`` with the checkpoint's stored weights (quantization, tensor bytes) and source."""
    from roofprof.checkpoints.quantization import scheme_of, stored_weights

    scheme = scheme_of(cfg.get("quantization_config"), text)
    if located is None:
        stored = stored_weights(spec, scheme, source="quantization_config")
        return spec if stored is None else replace(spec, stored=stored)
    if located.gguf_mix is not None and scheme is None:
        from roofprof.checkpoints.quantization import Scheme

        scheme = Scheme(
            "gguf", f"gguf-{located.gguf_mix}", math.nan, (), f"GGUF {located.gguf_mix}"
        )
    where = located.tensors_source or ("quantization_config" if scheme is not None else "")
    stored = stored_weights(spec, scheme, located.tensors, located.index_total, source=where)
    return replace(spec, stored=stored, source=located.source)


def _spec_of_config(cfg: Any, text: str, label: str, path: Path) -> ModelSpec:
    """A checked ModelSpec of a parsed config (``text``: what the user named)."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{text}: a config must be a JSON object")
    for key in ("model_type", "_roofprof_id", "_name_or_path"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            raise ConfigError(f"{text}: field {key!r} must be a string, got {cfg[key]!r}")
    archs = cfg.get("architectures")
    if archs is not None and not (
        isinstance(archs, list) and all(isinstance(a, str) for a in archs)
    ):
        raise ConfigError(f"{text}: field 'architectures' must be a list of strings")
    from roofprof.models.families import family_of

    family = family_of(cfg)
    if isinstance(
        cfg.get("text_config"), dict
    ):  # a multimodal wrapper (Gemma 3): its language model
        outer = {k: cfg[k] for k in ("_roofprof_id", "_name_or_path") if k in cfg}
        cfg = {**cfg["text_config"], **outer}
    if family.startswith("gemma"):  # transformers' Gemma configs tie the embeddings by default
        cfg = {"tie_word_embeddings": True, **cfg}
    for key in _REQUIRED_FIELDS:
        if key not in cfg:
            raise ConfigError(f"{text}: missing field {key!r}")
    heads = _positive_int(cfg, "num_attention_heads", text)
    hidden = _positive_int(cfg, "hidden_size", text)
    if cfg.get("head_dim") is None and hidden % heads:
        raise ConfigError(
            f"{text}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
            "and head_dim is absent"
        )
    cfg.setdefault("num_key_value_heads", heads)
    if cfg.get("num_key_value_heads") is None:
        cfg["num_key_value_heads"] = heads
    if cfg.get("head_dim") is None:
        cfg["head_dim"] = hidden // heads
    kv_heads = _positive_int(cfg, "num_key_value_heads", text)
    if heads % kv_heads:
        raise ConfigError(
            f"{text}: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    fields: dict[str, Any] = dict(
        id=cfg.get("_roofprof_id") or label,
        hidden_size=hidden,
        intermediate_size=_positive_int(cfg, "intermediate_size", text),
        num_layers=_positive_int(cfg, "num_hidden_layers", text),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_positive_int(cfg, "head_dim", text),
        vocab_size=_positive_int(cfg, "vocab_size", text),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", False, text),
        max_position_embeddings=(
            _positive_int(cfg, "max_position_embeddings", text)
            if cfg.get("max_position_embeddings") not in (None, 0)
            else 2**31 - 1
        ),
        source=str(cfg.get("_name_or_path") or path),
        family=family,
        rope_theta=_positive_float(cfg, "rope_theta", 10000.0, text),
        rope_scaling=_frozen_items(
            _mapping_or_none(cfg, "rope_scaling", text)
            or _mapping_or_none(cfg, "rope_parameters", text)
        ),
        rms_norm_eps=_positive_float(cfg, "rms_norm_eps", 1e-6, text, maximum=1.0),
        ignored_fields=ignored_fields(family, cfg),
    )
    from roofprof.models.moe_config import family_fields

    spec = ModelSpec(
        **{**fields, **_family_fields(family, cfg, text), **family_fields(family, cfg, text)}
    )
    if spec.param_count() > _MAX_PARAMS:
        raise ConfigError(
            f"{text}: the sizes give {spec.param_count():.3g} parameters, more than "
            f"{_MAX_PARAMS:.0e}; not a plausible model config"
        )
    return spec


def ignored_fields(family: str, cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields of ``cfg`` that family ``family`` does not read, sorted (bookkeeping keys
    such as ``architectures``, ``model_type`` and ``_name_or_path`` left out).

    >>> ignored_fields("llama", {"hidden_size": 64, "bos_token_id": 1, "model_type": "llama"})
    ('bos_token_id',)
    """
    from roofprof.models.families import fields_read

    read = set(fields_read(family)) | set(_BOOKKEEPING)
    return tuple(sorted(k for k in cfg if k not in read and not k.startswith("_")))


#: Config keys that say what a config is rather than what the model computes.
_BOOKKEEPING = (
    "architectures",
    "model_type",
    "text_config",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "quantization_config",
)


def _family_fields(family: str, cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """The ModelSpec fields only some families read (Llama: none, so it stays as before).

    ``qwen2``: q/k/v biases always (transformers' Qwen2 has no switch); ``qwen3``: q/k
    norms always, biases when ``attention_bias``; ``mistral``: ``sliding_window`` (null or
    absent: full attention). Qwen's ``sliding_window`` only applies with
    ``use_sliding_window`` true, which no shipped Qwen config sets: refused rather than
    modelled wrong (its ``max_window_layers`` split is not modelled).
    """
    for key, want in (
        ("hidden_act", ("silu",) if not family.startswith("gemma") else None),
        ("hidden_activation", ("gelu_pytorch_tanh", "gelu_tanh")),
    ):
        if want and cfg.get(key) is not None and cfg[key] not in want:
            raise ConfigError(
                f"{label}: field {key!r} {cfg[key]!r} is not modelled for {family} "
                f"(it models {want[0]})"
            )
    for key in (
        "mlp_bias",
        *(("attention_bias",) if family not in ("qwen3", "qwen3_moe", "gpt_oss") else ()),
        "use_bidirectional_attention",
    ):
        if _bool(cfg, key, False, label):
            raise ConfigError(f"{label}: field {key!r} true is not modelled for {family}")
    if (
        family in ("qwen2", "phi3")
        and cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"]
    ):
        raise ConfigError(
            f"{label}: head_dim {cfg['head_dim']} × "
            f"num_attention_heads {cfg['num_attention_heads']} "
            f"contradicts hidden_size {cfg['hidden_size']} ({family} requires them equal)"
        )
    if family in ("qwen2", "qwen3") and _bool(cfg, "use_sliding_window", False, label):
        raise ConfigError(
            f"{label}: field 'use_sliding_window' true is not modelled for {family} "
            "(per-layer windows); set it false"
        )
    if family == "qwen2":
        return {"attention_bias": True}
    if family == "qwen3":
        return {"attention_bias": _bool(cfg, "attention_bias", False, label), "qk_norm": True}
    if family in ("mistral", "phi3"):
        if family == "phi3" and cfg.get("partial_rotary_factor") not in (None, 1, 1.0):
            raise ConfigError(
                f"{label}: field 'partial_rotary_factor' {cfg['partial_rotary_factor']!r} "
                "(partial RoPE) is not modelled for phi3"
            )
        window = (
            None
            if cfg.get("sliding_window") is None
            else _positive_int(cfg, "sliding_window", label)
        )
        return {"sliding_window": window}
    if family.startswith("gemma"):
        return _gemma_fields(family, cfg, label)
    return {}


def _gemma_fields(family: str, cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Gemma 2/3: local/global layers (``layer_types``, else Gemma 2's alternation or Gemma 3's
    ``sliding_window_pattern``), the attention scale, soft-caps, the local RoPE base."""
    layers = _positive_int(cfg, "num_hidden_layers", label)
    types = cfg.get("layer_types")
    if types is not None:
        if (
            not isinstance(types, list)
            or len(types) != layers
            or any(t not in ("sliding_attention", "full_attention") for t in types)
        ):
            raise ConfigError(
                f"{label}: field 'layer_types' must list 'sliding_attention' or "
                f"'full_attention' for each of the {layers} layers"
            )
        local = tuple(t == "sliding_attention" for t in types)
    else:
        pattern = 2 if family == "gemma2" else 6  # transformers' defaults
        if family == "gemma3" and cfg.get("sliding_window_pattern") is not None:
            pattern = _positive_int(cfg, "sliding_window_pattern", label)
        local = tuple(bool((i + 1) % pattern) for i in range(layers))
    caps = {}
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        caps[key] = None if cfg.get(key) is None else _positive_float(cfg, key, 0.0, label)
    if "query_pre_attn_scalar" not in cfg:
        raise ConfigError(f"{label}: missing field 'query_pre_attn_scalar'")
    features = GemmaFeatures(
        query_pre_attn_scalar=float(_positive_int(cfg, "query_pre_attn_scalar", label)),
        local_layers=local,
        rope_local_theta=(
            _positive_float(cfg, "rope_local_base_freq", 10000.0, label)
            if family == "gemma3"
            else None
        ),
        **caps,
    )
    if "sliding_window" not in cfg:
        raise ConfigError(f"{label}: missing field 'sliding_window'")
    return {
        "gemma": features,
        "sliding_window": _positive_int(cfg, "sliding_window", label),
        "qk_norm": family == "gemma3",
    }


#: A config file larger than this is not a config (real ones are a few KiB).
_MAX_CONFIG_BYTES = 16 * 2**20
#: Largest size field accepted (hidden size, vocabulary, context length, ...): 2**31 - 1.
_MAX_SIZE = 2**31 - 1
#: Largest plausible parameter count (the biggest published dense models have ~2e12).
_MAX_PARAMS = 1e14


def _is_file(text: str) -> bool:
    """``Path(text).is_file()`` that is False (not an exception) for any unusable path."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def _exists(text: str) -> bool:
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _bool(cfg: Mapping[str, Any], key: str, default: bool, label: str) -> bool:
    """A JSON boolean field (``"false"`` as a string is an error, not True)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{label}: field {key!r} must be true or false, got {value!r}")
    return value


def _positive_float(
    cfg: Mapping[str, Any], key: str, default: float, label: str, maximum: float = 1e300
) -> float:
    """A positive finite number field (``default`` when absent, null or 0)."""
    value = cfg.get(key)
    if value is None or (not isinstance(value, bool) and value == 0):
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and 0 < value <= maximum)
    ):
        raise ConfigError(
            f"{label}: field {key!r} must be a positive finite number"
            f"{'' if maximum >= 1e300 else f' up to {maximum:g}'}, got {value!r}"
        )
    return float(value)


def _mapping_or_none(cfg: Mapping[str, Any], key: str, label: str) -> Mapping[str, Any] | None:
    value = cfg.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{label}: field {key!r} must be an object, got {value!r}")
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _frozen_items(value: Any) -> tuple[tuple[str, Any], ...] | None:
    """A config mapping as sorted, hashable ``(key, value)`` pairs (None when absent)."""
    return _frozen(value) if isinstance(value, Mapping) and value else None


def _positive_int(cfg: Mapping[str, Any], key: str, label: str) -> int:
    """A whole number in ``1 .. 2**31-1`` (``4096`` or ``4096.0``; not true, NaN, inf, 1e308)."""
    value = cfg.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
        or not 0 < value <= _MAX_SIZE
    ):
        raise ConfigError(
            f"{label}: field {key!r} must be a positive integer up to {_MAX_SIZE}, got {value!r}"
        )
    return int(value)
