"""The Qwen3 family (dense): a Llama pass with an RMSNorm on each q and k head before RoPE.

Qwen3 configs give ``head_dim`` explicitly (128 for every size, not hidden/heads), which
:func:`roofprof.specs.load_model` reads; the q/k norms are ops ``q_norm``/``k_norm``
(``fn`` "rmsnorm" over ``heads·head_dim`` elements per row, each head's ``head_dim`` slice
normalised on its own, weight ``head_dim`` elements each) between the projections and RoPE.
``attention_bias`` true adds q/k/v biases as in :mod:`roofprof.models.qwen2`.

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("qwen3-8b", "decode", context_tokens=0, dtype="bf16"))
>>> [op.name for op in w.ops][2:8]
['q_proj', 'k_proj', 'v_proj', 'q_norm', 'k_norm', 'rope']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import roofprof.models.llama as llama
from roofprof.models.families import CONFIGS
from roofprof.workload import OP_GROUPS, Op, Scenario, Workload

__all__ = ["ROLES", "Builder", "accepts", "ops"]

_CONFIG = CONFIGS["qwen3"]
#: Qwen3 op name -> (fn, chart group, short label): Llama's plus the q/k norms.
ROLES = {
    **llama.ROLES,
    "q_norm": ("rmsnorm", OP_GROUPS[4], "qnorm"),
    "k_norm": ("rmsnorm", OP_GROUPS[4], "knorm"),
}


def accepts(config: Mapping[str, Any]) -> bool:
    """True when an HF config is a dense Qwen3 (``model_type`` "qwen3" or ``Qwen3ForCausalLM``)."""
    return _CONFIG.accepts(config)


def ops(scenario: Scenario) -> Workload:
    """The ops of one prefill pass or decode step: Llama's plus ``q_norm`` and ``k_norm``."""
    return llama.build(scenario, Builder)


class Builder(llama.Builder):
    roles = ROLES

    def head_norm(self, name: str, rows: int, size: int) -> Op:
        """RMSNorm over each head_dim slice of ``size`` elements (~4 FLOP each, weight head_dim)."""
        d = self.model.head_dim
        return self.elementwise(
            name,
            "norm",
            rows,
            size,
            4.0,
            rows * size,
            rows * size,
            d * self.e,
            weight_bytes=d * self.e,
        )

    def build_ops(self) -> list[Op]:
        ops = super().build_ops()
        at = next(i for i, op in enumerate(ops) if op.name == "rope")
        if self.model.qk_norm:
            ops[at:at] = [
                self.head_norm("q_norm", self.rows, self.q_size),
                self.head_norm("k_norm", self.rows, self.kv_size),
            ]
        return ops
