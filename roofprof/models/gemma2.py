"""The Gemma 2 family: :mod:`roofprof.models.gemma`'s pass with Gemma 2's settings.

Layers alternate local (sliding window, even layers) and global attention; attention
scores and final logits are soft-capped (``attn_logit_softcapping``,
``final_logit_softcapping``).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("gemma-2-9b", "decode", context_tokens=0, dtype="bf16"))
>>> [op.name for op in w.ops][:4]
['embedding', 'embed_scale', 'attn_norm', 'q_proj']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.gemma as gemma
from roofprof.models.families import CONFIGS
from roofprof.workload import Scenario, Workload

__all__ = ["accepts", "ops"]

_CONFIG = CONFIGS["gemma2"]


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Gemma 2 (``model_type`` "gemma2" or ``Gemma2ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step (:func:`roofprof.models.gemma.build`)."""
    return gemma.build(scenario)
