"""Mixture-of-experts arithmetic shared by the MoE families: routing, expert ops, summaries.

A MoE layer replaces the dense MLP by a router GEMM (``router``: hidden → one logit per
expert), a top-k selection (``route``), the routed experts as grouped GEMMs
(``expert_gate_up_proj``, gate and up fused as transformers and engines store them, and
``expert_down_proj``; ``fn`` "moe_linear": one GEMM per touched expert over the tokens routed
to it, ``batch`` = experts touched, ``m`` = tokens per touched expert), their activation
(``expert_act``), the weighted sum of each token's k expert outputs (``expert_combine``;
both per touched expert, ``batch`` and ``m`` as the GEMMs') and, where the
model has them, always-on shared experts (``shared_*``).

Weight bytes follow the experts a pass touches, not all of them: with ``T`` tokens in the
pass (``batch`` in decode, ``batch × prompt`` in prefill), the expected number of distinct
experts per layer under the stated routing assumption
(:class:`~roofprof.models.moe_config.Routing`, uniform by default:
``E·(1 − (1 − k/E)^T)``) times one expert's weights. So decode weight traffic grows with
the batch until every expert is read; FLOPs are exact (``2·T·k·n·k_dim`` per expert GEMM).
Prefill's grouped GEMMs run ``T·k / touched`` tokens per expert on average (stated in
each op's note with the busiest expert's share).

:func:`parse_routing` reads ``--routing uniform | zipf:S | FILE``; :func:`summary` is the
``moe`` block of ``predict --format json``.

>>> from roofprof.workload import Scenario
>>> from roofprof.models import ops
>>> w = ops(Scenario.of("mixtral-8x7b", "decode", context_tokens=0, batch=1))
>>> [(op.name, op.batch) for op in w.ops if op.fn == "moe_linear"]
[('expert_gate_up_proj', 2), ('expert_down_proj', 2)]
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.models.moe_config import (
    UNIFORM,
    MoeSpec,
    Routing,
    kv_elements_per_token,
    param_counts,
)
from roofprof.workload import OP_GROUPS, Op

__all__ = ["DENSE_MLP", "MOE_ROLES", "MoeOps", "parse_routing", "summary", "with_routing"]

_MLP, _ELEM = OP_GROUPS[2], OP_GROUPS[4]
#: MoE op name -> (fn, chart group, short label), merged into each MoE family's ROLES.
MOE_ROLES = {
    "router": ("linear", _MLP, "router"),
    "route": ("topk_route", _ELEM, "topk"),
    "expert_gate_up_proj": ("moe_linear", _MLP, "egateup"),
    "expert_down_proj": ("moe_linear", _MLP, "edown"),
    "expert_act": ("moe_silu_mul", _ELEM, "eact"),
    "expert_combine": ("moe_combine", _ELEM, "ecomb"),
    "shared_gate_proj": ("linear", _MLP, "sgate"),
    "shared_up_proj": ("linear", _MLP, "sup"),
    "shared_down_proj": ("linear", _MLP, "sdown"),
    "shared_act": ("silu_mul", _ELEM, "sact"),
    "shared_add": ("add", _ELEM, "sadd"),
}
#: Op names of a dense MLP (replaced by the MoE ops; kept in a family's dense layers).
DENSE_MLP = ("gate_proj", "up_proj", "silu_mul", "down_proj")
_MAX_ROUTING_BYTES = 4 * 2**20


def parse_routing(text: str) -> Routing:
    """A routing assumption from ``uniform``, ``zipf:S`` (S > 0) or a JSON file.

    The file holds the experts' loads: a list of E non-negative numbers (token counts or
    shares; normalised), or ``{"experts": [...]}``, e.g. counted from a router trace.

    Raises:
        ConfigError: an unknown form, a bad exponent, an unreadable file, or loads that are
            not E non-negative finite numbers with a positive sum (one line).

    >>> parse_routing("zipf:1.2").exponent, parse_routing("uniform").kind
    (1.2, 'uniform')
    """
    if text == "uniform":
        return UNIFORM
    if text.startswith("zipf:"):
        try:
            exponent = float(text[5:])
        except ValueError:
            exponent = float("nan")
        if not (math.isfinite(exponent) and 0 < exponent <= 100):
            raise ConfigError(f"--routing {text!r}: zipf:S needs an exponent S in (0, 100]")
        return Routing("zipf", exponent=exponent)
    path = Path(text)
    try:
        if not path.is_file():
            raise ConfigError(f"--routing {text!r}: not uniform, zipf:S or an existing JSON file")
        if path.stat().st_size > _MAX_ROUTING_BYTES:
            raise ConfigError(f"--routing {text!r}: file too large for a routing table")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"--routing {text!r}: cannot read it as JSON ({type(exc).__name__})"
        ) from None
    loads = raw.get("experts") if isinstance(raw, dict) else raw
    if not (
        isinstance(loads, list)
        and loads
        and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
            for x in loads
        )
        and sum(loads) > 0
    ):
        raise ConfigError(
            f"--routing {text!r}: expected a list of non-negative expert loads "
            '(or {"experts": [...]}) with a positive sum'
        )
    total = float(sum(loads))
    return Routing("measured", shares=tuple(x / total for x in loads), source=path.name)


def with_routing(spec: Any, routing: str) -> Any:
    """``spec`` (a ModelSpec) with the routing assumption ``routing`` applied to its experts.

    Raises:
        ConfigError: a dense model (it has no experts), or a routing that does not parse or
            does not give one load per expert.

    >>> from roofprof.specs import load_model
    >>> with_routing(load_model("mixtral-8x7b"), "zipf:1.2").moe.routing.describe()[:4]
    'Zipf'
    """
    if spec.moe is None:
        raise ConfigError(
            f"--routing applies to mixture-of-experts models; {spec.id} has no experts"
        )
    chosen = parse_routing(routing)
    chosen.inclusion(spec.moe.experts, spec.moe.experts_per_token)  # measured loads: one each
    return replace(spec, moe=replace(spec.moe, routing=chosen))


def _touched(moe: MoeSpec, tokens: int) -> float:
    return moe.routing.expected_experts(moe.experts, moe.experts_per_token, tokens)


class MoeOps:
    """Mixin for a :class:`roofprof.models.llama.Builder` subclass: MoE MLP ops.

    ``moe_mlp(ops)`` swaps the dense MLP ops of a built op list for the MoE ops (counted
    over the MoE layers; the dense ones keep the first ``dense_layers``).
    """

    def moe_mlp(self: Any, ops: list[Op]) -> list[Op]:
        moe: MoeSpec = self.model.moe
        moe_layers = self.layers - moe.dense_layers
        at = next(i for i, op in enumerate(ops) if op.name == DENSE_MLP[0])
        end = next(i for i, op in enumerate(ops) if op.name == DENSE_MLP[-1]) + 1
        dense = (
            [replace(op, count=moe.dense_layers) for op in ops[at:end]] if moe.dense_layers else []
        )
        routed = [replace(op, count=moe_layers) for op in self.moe_ops(moe)]
        return ops[:at] + dense + routed + ops[end:]

    def moe_ops(self: Any, moe: MoeSpec) -> list[Op]:
        e, rows, h = self.e, self.rows, self.model.hidden_size
        E, k = moe.experts, moe.experts_per_token
        inter = -(-moe.expert_intermediate_size // self.tp)
        slots = rows * k  # (token, expert) pairs
        touched = _touched(moe, rows)
        per_expert = slots / touched if touched else 0.0
        busiest = moe.routing.busiest_tokens(E, k, rows)
        note = (
            f"{touched:.2f} of {E} experts touched per layer "
            f"({moe.routing.kind} routing, T = {rows} tokens); "
            f"{per_expert:.1f} tokens per touched expert, busiest ~{busiest:.1f}"
        )
        router = self.gemm("router", rows, E, h)
        if moe.router_bias:
            router = replace(
                router,
                flops=router.flops + rows * E,
                bytes=router.bytes + E * e,
                weight_bytes=router.weight_bytes + E * e,
            )
        route = self.elementwise(
            "route", "elementwise", rows, E, 5.0, rows * E, rows * k, extra_bytes=rows * k * 4
        )
        ops = [
            router,
            replace(route, note=route.note or f"softmax/sigmoid over {E} logits, top-{k}"),
        ]
        act_flops = 8.0 if moe.activation == "clamped_swiglu" else 5.0
        gate_up = self.expert_gemm("expert_gate_up_proj", slots, touched, 2 * inter, h, note)
        groups, per_group = gate_up.batch, gate_up.m
        act = self.elementwise(
            "expert_act", "elementwise", slots, inter, act_flops, 2 * slots * inter, slots * inter
        )
        combine = self.elementwise(
            "expert_combine",
            "elementwise",
            rows,
            h,
            2.0 * k,
            slots * h,
            rows * h,
            extra_bytes=slots * e,
        )
        ops += [
            gate_up,
            replace(act, m=per_group, batch=groups),
            self.expert_gemm("expert_down_proj", slots, touched, h, inter, note),
            replace(
                combine,
                m=per_group,
                batch=groups,
                note=combine.note or f"each of {groups} touched experts' outputs, weighted, added",
            ),
        ]
        if moe.shared_experts:
            si = -(-moe.shared_experts * moe.shared_intermediate_size // self.tp)
            ops += [
                self.gemm("shared_gate_proj", rows, si, h),
                self.gemm("shared_up_proj", rows, si, h),
                self.elementwise(
                    "shared_act", "elementwise", rows, si, 5.0, 2 * rows * si, rows * si
                ),
                self.gemm("shared_down_proj", rows, h, si),
                self.elementwise("shared_add", "elementwise", rows, h, 1.0, 2 * rows * h, rows * h),
            ]
        return ops

    def expert_gemm(
        self: Any, name: str, slots: int, touched: float, n: int, k_dim: int, note: str
    ) -> Op:
        """``touched`` expert GEMMs over ``slots`` routed (token, expert) rows in all."""
        e, moe = self.e, self.model.moe
        weights = touched * n * k_dim * self.ew(name)
        flops = 2.0 * slots * n * k_dim
        if moe.expert_bias:  # gate/up/down biases of each touched expert, one add per output
            weights += touched * n * e
            flops += slots * n
        groups = max(int(round(touched)), 1)
        rows = max(round(slots / touched), 1) if touched else 1
        return Op(
            name,
            "gemm",
            self.phase,
            rows,
            n,
            k_dim,
            self.dtype,
            flops,
            weights + slots * k_dim * e + slots * n * e,
            batch=groups,
            count=self.layers,
            weight_bytes=weights,
            note=note,
        )


def summary(
    model: Any, prefill_tokens: int, decode_tokens: int, kv_dtype_bytes: float, context_tokens: int
) -> dict[str, Any]:
    """The ``moe`` block of ``predict --format json`` (parameters, routing, experts touched).

    >>> from roofprof.specs import load_model
    >>> s = summary(load_model("mixtral-8x7b"), 2000, 1, 2.0, 2000)
    >>> s["decode"]["experts_touched_per_layer"], round(s["active_params"] / 1e9, 1)
    (2.0, 12.9)
    """
    counts = param_counts(model)
    out: dict[str, Any] = {
        "total_params": counts.total,
        "active_params": counts.active,
        "active_params_excluding_embedding": counts.active_excluding_embedding,
    }
    moe = model.moe
    if moe is not None:
        E, k = moe.experts, moe.experts_per_token
        expert_bytes = moe.expert_params(model.hidden_size)

        def phase(tokens: int) -> dict[str, Any]:
            touched = _touched(moe, tokens)
            return {
                "tokens": tokens,
                "experts_touched_per_layer": round(touched, 4),
                "tokens_per_touched_expert": tokens * k / touched if touched else 0.0,
                "busiest_expert_tokens": moe.routing.busiest_tokens(E, k, tokens),
                "expert_params_read": touched
                * expert_bytes
                * (model.num_layers - moe.dense_layers),
            }

        out.update(
            {
                "experts": E,
                "experts_per_token": k,
                "shared_experts": moe.shared_experts,
                "dense_layers": moe.dense_layers,
                "routing": moe.routing.describe(),
                "prefill": phase(prefill_tokens),
                "decode": phase(decode_tokens),
            }
        )
    elements, holds = kv_elements_per_token(model, context_tokens + 1)
    out["kv_cache"] = {"holds": holds, "bytes_per_sequence": elements * kv_dtype_bytes}
    return out
