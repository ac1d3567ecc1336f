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

__all__ = ["CONFIGS", "FamilyConfig", "family_of"]


@dataclass(frozen=True)
class FamilyConfig:
    """The ``model_type`` values and ``architectures`` entries of one family's configs."""

    model_types: tuple[str, ...]
    architectures: tuple[str, ...]

    def accepts(self, config: Mapping[str, Any]) -> bool:
        """True when ``config`` is this family's (by ``model_type``, else ``architectures``)."""
        if config.get("model_type") is not None:
            return config["model_type"] in self.model_types
        return any(a in self.architectures for a in config.get("architectures") or ())


#: Family name -> the configs it reads (one row per module of :data:`roofprof.models.FAMILIES`).
CONFIGS: Mapping[str, FamilyConfig] = {
    "llama": FamilyConfig(("llama",), ("LlamaForCausalLM",)),
    "qwen2": FamilyConfig(("qwen2",), ("Qwen2ForCausalLM",)),
    "mistral": FamilyConfig(("mistral",), ("MistralForCausalLM",)),
    "qwen3": FamilyConfig(("qwen3",), ("Qwen3ForCausalLM",)),
    "mixtral": FamilyConfig(("mixtral",), ("MixtralForCausalLM",)),
    "qwen3_moe": FamilyConfig(("qwen3_moe",), ("Qwen3MoeForCausalLM",)),
    "deepseek_v3": FamilyConfig(("deepseek_v3",), ("DeepseekV3ForCausalLM",)),
    "gpt_oss": FamilyConfig(("gpt_oss",), ("GptOssForCausalLM",)),
}


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
