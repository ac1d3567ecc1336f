"""The Mistral family: Llama's ops, with a sliding attention window when the config sets one.

With ``sliding_window`` W, a decode step attends ``min(context + 1, W)`` cached tokens
and the KV cache holds at most W tokens per sequence; a prefill query attends at most W
keys (fused attention counts those pairs; eager attention still computes the full
masked square). ``sliding_window: null`` (Mistral 7B v0.2 and v0.3) is exactly a Llama.

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("mistral-7b-v0.3", "decode", context_tokens=99, dtype="bf16"))
>>> [op.n for op in w.ops if op.name == "attention"]
[100]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.workload import Scenario, Workload

__all__ = ["accepts", "ops"]

_CONFIG = CONFIGS["mistral"]


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Mistral (``model_type`` "mistral" or ``MistralForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step, keys capped by ``ModelSpec.sliding_window``."""
    return llama.build(scenario, llama.Builder)
