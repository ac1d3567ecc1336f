"""The Phi-3 family: a Llama pass whose q/k/v and gate/up projections are each one GEMM.

``qkv_proj`` ([rows, hidden] × [hidden, q + 2·kv]) replaces ``q_proj``/``k_proj``/``v_proj``,
``gate_up_proj`` ([rows, hidden] × [hidden, 2·intermediate]) replaces ``gate_proj``/``up_proj``,
and SiLU·mul reads the two halves of its output (fn ``chunk_silu_mul``). A config's
``sliding_window`` caps the keys as in :mod:`roofprof.models.mistral` (Phi-3-mini: 2047).

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("phi-3-mini", "decode", context_tokens=0, dtype="bf16"))
>>> [(op.name, op.n, op.k) for op in w.ops if op.kind == "gemm"][:3]
[('qkv_proj', 9216, 3072), ('o_proj', 3072, 3072), ('gate_up_proj', 16384, 3072)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.workload import OP_GROUPS, Op, Scenario, Workload

__all__ = ["ROLES", "accepts", "ops"]

_CONFIG = CONFIGS["phi3"]
#: Phi-3 op name -> (fn, chart group, short label): Llama's with the fused projections.
ROLES = {
    **llama.ROLES,
    "qkv_proj": ("linear", OP_GROUPS[1], "qkv"),
    "gate_up_proj": ("linear", OP_GROUPS[2], "gateup"),
    "silu_mul": ("chunk_silu_mul", OP_GROUPS[4], "silu"),
}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a Phi-3 (``model_type`` "phi3" or ``Phi3ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step, projections fused as Phi-3 stores them.

    Tensor parallelism splits the fused GEMMs by columns as Llama's separate ones.
    """
    return llama.build(scenario, Builder)


class Builder(llama.Builder):
    roles = ROLES

    def build_ops(self) -> list[Op]:
        ops = super().build_ops()
        names = [op.name for op in ops]
        rows, h = self.rows, self.model.hidden_size
        q = names.index("q_proj")
        ops[q : q + 3] = [self.gemm("qkv_proj", rows, self.q_size + 2 * self.kv_size, h)]
        g = [op.name for op in ops].index("gate_proj")
        ops[g : g + 2] = [self.gemm("gate_up_proj", rows, 2 * self.inter, h)]
        return ops
