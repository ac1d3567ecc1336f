"""Does a layout fit? Per-GPU bytes (weights, KV cache, activations) against capacity.

Per GPU: the weights of one rank (layer weights / TP / PP, the embedding and lm_head
split over TP; a mixture-of-experts model holds ALL its experts, not only the active
ones), the KV cache of ``batch × (context + new tokens)`` at the KV dtype (per rank: its
KV heads, its stage's layers; MLA's latent + RoPE key, replicated on every TP rank;
gpt-oss's sliding layers capped at the window), and a stated allowance for activations and
workspace (:data:`ACTIVATION_ALLOWANCE`: a share of capacity, as engines reserve it).

>>> from roofprof.workload import Parallel, Scenario
>>> s = Scenario.of("llama-3.1-70b", "decode", prompt_tokens=2048)
>>> fit_memory(s, "h100-sxm").fits, fit_memory(s.replace(parallel=Parallel(tp=2)), "h100-sxm").fits
(False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofprof.errors import ConfigError
from roofprof.specs import GpuSpec, load_gpu
from roofprof.workload import Parallel, Scenario

__all__ = ["ACTIVATION_ALLOWANCE", "MemoryFit", "fit_memory", "smallest_tp"]

#: Share of the GPU's memory kept for activations, workspace and the runtime (vLLM's
#: default ``gpu_memory_utilization`` is 0.9: 10 % is left to everything else).
ACTIVATION_ALLOWANCE = 0.10


@dataclass(frozen=True)
class MemoryFit:
    """Bytes one GPU needs against what it has (SI bytes)."""

    weights_bytes: float
    kv_cache_bytes: float
    allowance_bytes: float
    capacity_bytes: float
    kv_bytes_per_sequence: float

    @property
    def per_gpu_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.allowance_bytes

    @property
    def fits(self) -> bool:
        return self.per_gpu_bytes <= self.capacity_bytes

    @property
    def max_batch(self) -> int:
        """The most sequences whose KV cache fits beside the weights (0: not even one)."""
        room = self.capacity_bytes - self.weights_bytes - self.allowance_bytes
        return max(int(room // self.kv_bytes_per_sequence), 0) if self.kv_bytes_per_sequence else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_gpu_bytes": self.per_gpu_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "max_batch": self.max_batch,
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "allowance_bytes": self.allowance_bytes,
            "allowance": f"{ACTIVATION_ALLOWANCE:.0%} of capacity for activations and workspace",
        }


def fit_memory(scenario: Scenario, gpu: str | GpuSpec) -> MemoryFit:
    """The memory fit of ``scenario`` (its batch, context and layout) on ``gpu``.

    The KV cache holds ``context_tokens + 1`` tokens per sequence (decode) or the prompt
    (prefill). Raises UnknownNameError for an unknown GPU.
    """
    spec = gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)
    m, par = scenario.model, scenario.parallel
    stage_layers = -(-m.num_layers // par.pp)
    table = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    kv_heads = max(m.num_kv_heads // par.tp, 1)
    seq_tokens = (
        scenario.prompt_tokens
        if scenario.phase == "prefill"
        else (scenario.context_tokens or 0) + 1
    )
    if m.moe is None and m.mla is None and m.pattern is None:
        per_layer_w = m.layer_param_count()  # attention, MLP, norms
        weights = (per_layer_w * stage_layers + table) / par.tp * scenario.weight_bytes_per_element
        tokens = m.kv_tokens(seq_tokens)
        kv_seq = 2 * kv_heads * m.head_dim * stage_layers * tokens * scenario.kv_bytes_per_element
    else:  # every expert's weights; the family's own KV cache
        from roofprof.models.moe_config import kv_elements_per_token

        layer_w = (m.param_count() - table - m.hidden_size) * stage_layers / m.num_layers
        weights = (layer_w + table) / par.tp * scenario.weight_bytes_per_element
        elements, _ = kv_elements_per_token(m, seq_tokens)
        share = (
            1.0 if m.mla is not None else kv_heads / m.num_kv_heads
        )  # MLA's latent: on every rank
        kv_seq = elements * share * stage_layers / m.num_layers * scenario.kv_bytes_per_element
    return MemoryFit(
        weights,
        kv_seq * scenario.batch,
        ACTIVATION_ALLOWANCE * spec.memory_bytes,
        spec.memory_bytes,
        kv_seq,
    )


def smallest_tp(scenario: Scenario, gpu: str | GpuSpec, limit: int = 64) -> int | None:
    """The smallest TP (at the scenario's PP) that fits and splits the model, or None."""
    for tp in range(1, limit + 1):
        try:
            s = scenario.replace(
                parallel=Parallel(tp, scenario.parallel.pp, scenario.parallel.sequence_parallel)
            )
        except ConfigError:
            continue
        if fit_memory(s, gpu).fits:
            return tp
    return None
