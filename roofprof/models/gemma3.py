"""The Gemma 3 family (its text model): :mod:`roofprof.models.gemma`'s pass with Gemma 3's settings.

Five local (sliding-window) layers to one global (``sliding_window_pattern`` 6, or
``layer_types``), q/k RMSNorms per head, no soft-caps in the published configs; the
``text_config`` of a ``Gemma3ForConditionalGeneration`` config is read (the vision tower
is not modelled).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("gemma-3-12b", "decode", context_tokens=0, dtype="bf16"))
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

_CONFIG = CONFIGS["gemma3"]


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Gemma 3 (``model_type`` "gemma3" or "gemma3_text", or
    ``Gemma3ForConditionalGeneration``/``Gemma3ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step (:func:`roofprof.models.gemma.build`)."""
    return gemma.build(scenario)
