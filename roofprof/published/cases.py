"""Every published row as prediction cases (:class:`Case`) or a reason it is skipped.

The lower half of :mod:`roofprof.published.compare`, kept apart so the calibration
(:mod:`roofprof.prediction.calibration`) can use the cases without importing the comparison.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from roofprof import models
from roofprof.errors import ConfigError, RoofprofError
from roofprof.prediction.collectives import CollectiveModel
from roofprof.prediction.fraction_groups import shared_tensor_path
from roofprof.prediction.kernel_paths import path_of
from roofprof.prediction.rollup import Estimator, estimate_phase
from roofprof.prediction.serving import batched_run
from roofprof.published.corpus import PublishedRow, load_end_to_end, published_roofline
from roofprof.roofline import Roofline
from roofprof.specs import list_models, load_gpu
from roofprof.workload import Counting, Parallel, Scenario, Workload

__all__ = [
    "PHASES",
    "SINGLE_PHASES",
    "Case",
    "Skipped",
    "base_roofline",
    "case_flops_bytes",
    "case_seconds",
    "cases",
    "collectives",
    "empirical_roofline",
    "spec_roofline",
    "workload",
]

PHASES = ("decode", "prefill", "offline", "batched")
#: Phases of one request at a time (batch 1, or an offline batch of 32 the calibration fits);
#: ``batched`` rows (static batches, loaded or saturated servers) are reported apart.
SINGLE_PHASES = ("decode", "prefill", "offline")


@dataclass(frozen=True)
class Case:
    """One published figure to predict: ``passes`` are (scenario, times it runs)."""

    row: PublishedRow
    phase: str
    metric: str
    published_s: float
    derived: bool
    passes: tuple[tuple[Scenario, int], ...]
    tokens: int = 1  # the passes' seconds are divided by this (batched: seconds per token)
    batching: str = ""  # batched rows: "static" or "continuous" (roofprof.prediction.serving)

    @property
    def label(self) -> str:
        return f"{self.row.id}:{self.phase}"

    @property
    def gpu(self) -> str:
        return self.row.gpu_id or ""

    @property
    def engine(self) -> str:
        return self.row.engine_profile


@dataclass(frozen=True)
class Skipped:
    """A row (or one phase of it) roofprof does not model, and why."""

    row_id: str
    model: str
    gpu: str
    engine: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "row": self.row_id,
            "model": self.model,
            "gpu": self.gpu,
            "engine": self.engine,
            "reason": self.reason,
        }


def cases(rows: Iterable[PublishedRow] | None = None) -> tuple[list[Case], list[Skipped]]:
    """The modelled cases and the skipped rows of the corpus (or of ``rows``)."""
    out: list[Case] = []
    skipped: list[Skipped] = []
    for r in rows if rows is not None else load_end_to_end():

        def skip(reason: str, r: PublishedRow = r) -> None:
            skipped.append(Skipped(r.id, r.model, r.gpu_id or r.gpu, r.engine, reason))

        if r.skip:
            skip(r.skip)
            continue
        if r.model_id not in list_models():
            skip(f"no shipped config {r.model_id!r}")
            continue
        try:
            base = Scenario.of(
                r.model_id,
                "decode",
                batch=r.batch or 1,
                prompt_tokens=r.prompt_tokens or 1,
                dtype=r.dtype or "bf16",
                weights=r.weights,
                kv_dtype=r.kv_dtype,
                parallel=Parallel(tp=r.tp),
                convention=_counting(r.engine_profile),
            )
        except RoofprofError as exc:
            skip(str(exc))
            continue
        ctx = (
            r.decode_context_tokens
            if r.decode_context_tokens is not None
            else (r.prompt_tokens or 0)
        )
        if r.phase in ("decode", "decode+prefill") and r.figure("tpot_s"):
            out.append(
                Case(
                    r,
                    "decode",
                    "tpot_s",
                    r.figure("tpot_s"),
                    r.is_derived("tpot_s"),
                    ((base.replace(context_tokens=ctx), 1),),
                )
            )
        if r.phase in ("prefill", "decode+prefill") and r.figure("ttft_s"):
            out.append(
                Case(
                    r,
                    "prefill",
                    "ttft_s",
                    r.figure("ttft_s"),
                    r.is_derived("ttft_s"),
                    ((base.replace(phase="prefill", context_tokens=r.prompt_tokens), 1),),
                )
            )
        if r.phase == "offline" and r.figure("offline_run_s"):
            out.append(
                Case(
                    r,
                    "offline",
                    "offline_run_s",
                    r.figure("offline_run_s"),
                    True,
                    (
                        (base.replace(phase="prefill", context_tokens=r.prompt_tokens), 1),
                        (base.replace(context_tokens=ctx), int(r.output_tokens or 0)),
                    ),
                )
            )
        if r.phase == "batched" and r.figure("s_per_token"):
            try:
                run = batched_run(
                    base,
                    batch=r.batch,
                    prompt_tokens=r.prompt_tokens or 0,
                    output_tokens=r.output_tokens or 0,
                    batching=r.batching or "static",
                    gpu=r.gpu_id,
                )
            except RoofprofError as exc:
                skip(str(exc))
                continue
            out.append(
                Case(
                    r,
                    "batched",
                    "s_per_token",
                    r.figure("s_per_token"),
                    True,
                    run.passes(),
                    run.tokens(r.tokens_counted or "output"),
                    run.batching,
                )
            )
    return out, skipped


def _counting(engine: str) -> Counting:
    """The op counting of an engine: unfused attention where it runs without flash attention
    (:mod:`roofprof.prediction.kernel_paths`)."""
    return Counting(attention=path_of(engine).attention_counting)


@functools.lru_cache(maxsize=4096)
def workload(scenario: Scenario) -> Workload:
    """``models.ops(scenario)``, cached (the corpus asks for the same passes many times)."""
    return models.ops(scenario)


def case_seconds(case: Case, estimator: Estimator) -> float:
    """Predicted seconds of ``case`` (every pass through ``estimator``, times its count);
    a tensor-parallel case's collectives are priced by :func:`collectives`."""
    comm = collectives(case.gpu) if case.row.tp > 1 else None
    total = sum(
        n * estimate_phase(workload(s), estimator, comm).seconds for s, n in case.passes if n
    )
    return total / case.tokens


@functools.lru_cache(maxsize=64)
def collectives(gpu: str) -> CollectiveModel:
    """The interconnect model of the corpus's tensor-parallel rows on ``gpu``: the α-β priors
    with the CUDA-graph latency (the TP rows' engines, gpt-fast under torch.compile and
    TensorRT-LLM / NIM with their custom all-reduce, do not pay eager NCCL launches)."""
    return CollectiveModel.for_gpu(gpu, graphs=True)


def case_flops_bytes(case: Case) -> tuple[float, float]:
    """FLOPs and bytes of the whole case (all passes; per token for a batched case)."""
    flops = sum(n * workload(s).flops for s, n in case.passes)
    moved = sum(n * workload(s).bytes for s, n in case.passes)
    return flops / case.tokens, moved / case.tokens


@functools.lru_cache(maxsize=64)
def spec_roofline(gpu: str) -> Roofline:
    return Roofline.from_spec(load_gpu(gpu))


@functools.lru_cache(maxsize=64)
def empirical_roofline(gpu: str) -> Roofline | str:
    """The published-ceiling roofline of ``gpu``, or the reason there is none."""
    try:
        return published_roofline(gpu)
    except ConfigError as exc:
        return str(exc)


def base_roofline(gpu: str, *, shared_path: bool = True) -> tuple[Roofline, str]:
    """The roofline the calibrated estimator starts from: published ceilings, else the datasheet.

    With ``shared_path``, a 16-bit dtype with only a datasheet ceiling takes the measured
    figure of the other 16-bit dtype (fp16 and bf16 run the same tensor path;
    :func:`roofprof.prediction.fraction_groups.shared_tensor_path`)."""
    roof = empirical_roofline(gpu)
    if isinstance(roof, Roofline):
        return (shared_tensor_path(roof) if shared_path else roof), "published ceilings"
    return spec_roofline(gpu), "datasheet (no published ceilings)"
