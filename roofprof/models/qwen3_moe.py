"""The Qwen3-MoE family: Qwen3's attention (q/k head norms, explicit ``head_dim``) with a
top-k mixture-of-experts MLP on every layer (``num_experts`` experts of
``moe_intermediate_size``, ``num_experts_per_tok`` per token; :mod:`roofprof.models.moe`).

Configs with ``decoder_sparse_step`` other than 1, ``mlp_only_layers`` or a sliding
window are refused by name (:func:`roofprof.models.moe_config.family_fields`).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("qwen3-30b-a3b", "decode", context_tokens=0, batch=4))
>>> [round(op.batch) for op in w.ops if op.name == "expert_gate_up_proj"]
[29]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
import roofprof.models.qwen3 as qwen3
from roofprof.models.families import CONFIGS
from roofprof.models.moe import MOE_ROLES, MoeOps
from roofprof.workload import Op, Scenario, Workload

__all__ = ["ROLES", "accepts", "ops"]

_CONFIG = CONFIGS["qwen3_moe"]
#: Qwen3-MoE op name -> (fn, chart group, short label): Qwen3's plus the MoE ops.
ROLES = {**qwen3.ROLES, **MOE_ROLES}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Qwen3-MoE (``qwen3_moe`` or ``Qwen3MoeForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: Qwen3's attention, MoE MLP."""
    return llama.build(scenario, Builder)


class Builder(MoeOps, qwen3.Builder):
    roles = ROLES

    def build_ops(self) -> list[Op]:
        return self.moe_mlp(super().build_ops())
