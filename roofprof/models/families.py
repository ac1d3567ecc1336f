"""Which model family a Hugging Face ``config.json`` describes: the config side of the families.

Kept apart from the op builders (:mod:`roofprof.models.llama`) so that the config loader
(:func:`roofprof.specs.load_model`) can refuse an unsupported model without importing
them: this module imports nothing but :mod:`roofprof.errors`.

>>> family_of({"model_type": "llama"}), family_of({"hidden_size": 64})
('llama', 'llama')
>>> family_of({"model_type": "qwen3"}), family_of({"architectures": ["MistralForCausalLM"]})
('qwen3', 'mistral')
>>> family_of({"model_type": "falcon"})
Traceback (most recent call last):
...
roofprof.errors.UnknownNameError: unknown model family 'falcon'; valid choices: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roofprof.errors import UnknownNameError

__all__ = [
    "CONFIGS",
    "TORCH_SIDES",
    "FamilyConfig",
    "TorchSide",
    "family_of",
    "fields_read",
    "torch_side",
]


@dataclass(frozen=True)
class FamilyConfig:
    """The ``model_type`` values and ``architectures`` entries of one family's configs."""

    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    fields: tuple[str, ...] = ()  # config fields read beyond ``COMMON_FIELDS``

    def accepts(self, config: Mapping[str, Any]) -> bool:
        """True when ``config`` is this family's (by ``model_type``, else ``architectures``)."""
        if config.get("model_type") is not None:
            return config["model_type"] in self.model_types
        return any(a in self.architectures for a in config.get("architectures") or ())


#: Config fields every family reads (sizes, RoPE, norm epsilon; ``hidden_act`` is checked).
COMMON_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rms_norm_eps",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
)
_QWEN = ("use_sliding_window", "sliding_window", "max_window_layers")
_GEMMA = (
    "hidden_activation",
    "query_pre_attn_scalar",
    "sliding_window",
    "layer_types",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "use_bidirectional_attention",
)
_MIXTRAL = ("num_local_experts", "num_experts_per_tok", "sliding_window")
_QWEN3_MOE = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "shared_expert_intermediate_size",
)
_DEEPSEEK_V3 = (
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "n_group",
    "topk_group",
    "topk_method",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
_GPT_OSS = (
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "layer_types",
    "sliding_window",
)

#: Family name -> the configs it reads (one row per module of :data:`roofprof.models.FAMILIES`).
CONFIGS: Mapping[str, FamilyConfig] = {
    "llama": FamilyConfig(("llama",), ("LlamaForCausalLM",)),
    "qwen2": FamilyConfig(("qwen2",), ("Qwen2ForCausalLM",), _QWEN),
    "mistral": FamilyConfig(("mistral",), ("MistralForCausalLM",), ("sliding_window",)),
    "qwen3": FamilyConfig(("qwen3",), ("Qwen3ForCausalLM",), _QWEN),
    "gemma2": FamilyConfig(("gemma2",), ("Gemma2ForCausalLM",), _GEMMA),
    "gemma3": FamilyConfig(
        ("gemma3", "gemma3_text"),
        ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"),
        (*_GEMMA, "rope_local_base_freq", "sliding_window_pattern"),
    ),
    "phi3": FamilyConfig(
        ("phi3",), ("Phi3ForCausalLM",), ("sliding_window", "partial_rotary_factor")
    ),
    "mixtral": FamilyConfig(("mixtral",), ("MixtralForCausalLM",), _MIXTRAL),
    "qwen3_moe": FamilyConfig(("qwen3_moe",), ("Qwen3MoeForCausalLM",), (*_QWEN, *_QWEN3_MOE)),
    "deepseek_v3": FamilyConfig(("deepseek_v3",), ("DeepseekV3ForCausalLM",), _DEEPSEEK_V3),
    "gpt_oss": FamilyConfig(("gpt_oss",), ("GptOssForCausalLM",), _GPT_OSS),
}


def fields_read(family: str) -> tuple[str, ...]:
    """The config fields ``family`` reads (the others are listed as ignored in the output).

    >>> "sliding_window" in fields_read("mistral"), "sliding_window" in fields_read("llama")
    (True, False)
    """
    return COMMON_FIELDS + CONFIGS[family].fields


@dataclass(frozen=True)
class TorchSide:
    """How a family is measured: the real model it runs and the torch module its ops share.

    ``module`` (imported only where torch is installed) provides ``hf_config(spec)`` (the
    keyword arguments of the transformers config class ``hf_config_class``),
    ``build(spec, dtype, device, attention)`` (roofprof's plain-torch model of the family:
    ``forward(input_ids, cache) -> last-token logits``, cache from ``new_cache(spec)``) and
    ``PREPARERS`` (``Op.fn`` -> ``preparer(torch_ops, op) -> PreparedTorchOp`` for the fns
    the family adds to :mod:`roofprof.profiling.torch_ops`; empty when it adds none). Optional:
    ``AUTO_BACKEND`` (``"torch"``: ``validate --backend auto`` runs the plain-torch model,
    when the transformers class runs another form than the one counted) and
    ``BACKEND_NOTES`` (backend -> the note ``validate`` adds to its result).
    """

    hf_class: str
    hf_config_class: str
    module: str


#: Family name -> its torch side; the families listed here can be profiled and validated.
TORCH_SIDES: Mapping[str, TorchSide] = {
    "llama": TorchSide("LlamaForCausalLM", "LlamaConfig", "roofprof.models.llama_torch"),
    "qwen2": TorchSide("Qwen2ForCausalLM", "Qwen2Config", "roofprof.models.llama_torch"),
    "mistral": TorchSide("MistralForCausalLM", "MistralConfig", "roofprof.models.llama_torch"),
    "qwen3": TorchSide("Qwen3ForCausalLM", "Qwen3Config", "roofprof.models.llama_torch"),
    "gemma2": TorchSide("Gemma2ForCausalLM", "Gemma2Config", "roofprof.models.gemma_torch"),
    "gemma3": TorchSide("Gemma3ForCausalLM", "Gemma3TextConfig", "roofprof.models.gemma_torch"),
    "phi3": TorchSide("Phi3ForCausalLM", "Phi3Config", "roofprof.models.phi3_torch"),
    "mixtral": TorchSide("MixtralForCausalLM", "MixtralConfig", "roofprof.models.mixtral_torch"),
    "qwen3_moe": TorchSide(
        "Qwen3MoeForCausalLM", "Qwen3MoeConfig", "roofprof.models.qwen3_moe_torch"
    ),
    "deepseek_v3": TorchSide(
        "DeepseekV3ForCausalLM", "DeepseekV3Config", "roofprof.models.deepseek_v3_torch"
    ),
    "gpt_oss": TorchSide("GptOssForCausalLM", "GptOssConfig", "roofprof.models.gpt_oss_torch"),
}


def torch_side(family: str) -> TorchSide | None:
    """The torch side of ``family`` (None: predicted only, no torch model)."""
    return TORCH_SIDES.get(family)


def family_of(config: Mapping[str, Any]) -> str:
    """The family name of an HF config, by its ``model_type`` (else ``architectures``).

    A config that names neither (a hand-written one with only the sizes) is read as a
    Llama, as before.

    Raises:
        UnknownNameError: the config names a model type no family reads (the message
            names it and lists the supported families).
    """
    model_type = config.get("model_type")
    architectures = [str(a) for a in config.get("architectures") or ()]
    if model_type is None and not architectures:
        return "llama"
    for name, family in CONFIGS.items():
        if family.accepts(config):
            return name
    label = str(model_type or architectures[0])
    if model_type is not None and architectures:
        label += f" ({', '.join(architectures)})"
    raise UnknownNameError("model family", label, CONFIGS)
