"""The Mixtral family: a Mistral pass whose MLP is a top-k mixture of experts.

Each layer's SwiGLU MLP becomes ``num_local_experts`` experts of ``intermediate_size``, of
which each token runs ``num_experts_per_tok`` after a router GEMM (:mod:`roofprof.models.moe`
for the ops and the routing assumption); attention is Mistral's (GQA, RoPE, an optional
``sliding_window``).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("mixtral-8x7b", "decode", context_tokens=0, dtype="bf16"))
>>> [op.name for op in w.ops][10:14]
['router', 'route', 'expert_gate_up_proj', 'expert_act']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.models.moe import MOE_ROLES, MoeOps
from roofprof.workload import Op, Scenario, Workload

__all__ = ["ROLES", "accepts", "ops"]

_CONFIG = CONFIGS["mixtral"]
#: Mixtral op name -> (fn, chart group, short label): Llama's plus the MoE ops.
ROLES = {**llama.ROLES, **MOE_ROLES}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Mixtral (``model_type`` "mixtral" or ``MixtralForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: Mistral's attention, MoE MLP."""
    return llama.build(scenario, Builder)


class Builder(MoeOps, llama.Builder):
    roles = ROLES

    def build_ops(self) -> list[Op]:
        return self.moe_mlp(super().build_ops())
