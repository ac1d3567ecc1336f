"""The Qwen2 family (Qwen2, Qwen2.5): a Llama pass whose q/k/v projections carry a bias.

The bias is folded into its projection op (``n`` more weight elements read, ``rows·n``
more FLOPs); everything else, tied embeddings on the small models included, is Llama's
(:mod:`roofprof.models.llama`).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("qwen2.5-0.5b", "decode", context_tokens=0, dtype="bf16"))
>>> [op for op in w.ops if op.name == "k_proj"][0].weight_bytes  # 128×896 weights + 128 biases
229632
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.workload import Scenario, Workload

__all__ = ["accepts", "ops"]

_CONFIG = CONFIGS["qwen2"]


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Qwen2 (``model_type`` "qwen2" or ``Qwen2ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: Llama's, with the q/k/v biases counted.

    The biases come from ``ModelSpec.attention_bias`` (set for every Qwen2 config by
    :func:`roofprof.specs.load_model`); parallel layouts are handled as for Llama.
    """
    return llama.build(scenario, llama.Builder)
