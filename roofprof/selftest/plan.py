"""What ``roofprof selftest`` benchmarks: the Llama passes and their distinct GEMM shapes.

>>> benchmark_plan(quick=True)[0].key
'llama-3.1-8b decode b1 bf16'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BenchCase", "MODELS", "PROMPT_TOKENS", "benchmark_plan", "gemm_ops"]

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b")
"""The models whose Llama passes are benchmarked (full plan)."""
PROMPT_TOKENS = 512
"""Prompt length (tokens) of the prefill passes."""


@dataclass(frozen=True)
class BenchCase:
    """One pass whose GEMMs are benchmarked: model, phase, batch, dtype and the implementations."""

    model: str
    phase: str
    batch: int
    dtype: str
    impls: tuple[str, ...]
    prompt_tokens: int = PROMPT_TOKENS

    @property
    def key(self) -> str:
        return f"{self.model} {self.phase} b{self.batch} {self.dtype}"


def benchmark_plan(quick: bool = False) -> list[BenchCase]:
    """The passes to benchmark, the targets' passes first (so a time-out keeps them).

    >>> [c.key for c in benchmark_plan(quick=True)][:3]
    ['llama-3.1-8b decode b1 bf16', 'llama-3.1-8b decode b1 fp16', 'llama-3.1-8b prefill b1 bf16']
    """
    own = ("cupy", "cublas", "torch")
    cases = [
        BenchCase("llama-3.1-8b", "decode", 1, "bf16", own),
        BenchCase("llama-3.1-8b", "decode", 1, "fp16", ("numba", "cupy", "cublas", "torch")),
        BenchCase("llama-3.1-8b", "prefill", 1, "bf16", own),
        BenchCase("llama-3.1-8b", "prefill", 1, "fp32", ("numba", "cublas")),
    ]
    if quick:
        return cases + [BenchCase("llama-3.1-8b", "decode", 16, "bf16", own)]
    for model in MODELS:
        for batch in (1, 16, 64, 256):
            case = BenchCase(model, "decode", batch, "bf16", own)
            if case not in cases:
                cases.append(case)
        for batch in (1, 4):
            case = BenchCase(model, "prefill", batch, "bf16", own)
            if case not in cases:
                cases.append(case)
    return cases


def gemm_ops(case: BenchCase) -> list[Any]:
    """Distinct GEMM shapes of ``case``'s pass (:func:`roofprof.models.ops`), each with the
    summed count."""
    from roofprof import models
    from roofprof.workload import Op, Scenario

    w = models.ops(
        Scenario.of(
            case.model,
            case.phase,
            batch=case.batch,
            prompt_tokens=case.prompt_tokens,
            context_tokens=case.prompt_tokens,
            dtype=case.dtype,
        )
    )
    merged: dict[tuple, Op] = {}
    names: dict[tuple, list[str]] = {}
    for op in w.ops:
        if op.kind != "gemm":
            continue
        key = op.shape_key
        if key in merged:
            prev = merged[key]
            merged[key] = Op(**{**prev.__dict__, "count": prev.count + op.count})
            names[key].append(op.name)
        else:
            merged[key] = op
            names[key] = [op.name]
    return [Op(**{**op.__dict__, "name": "+".join(names[key])}) for key, op in merged.items()]
