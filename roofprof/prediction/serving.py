"""Batched serving: a static batch, or a loaded continuous-batching server, as roll-up passes.

A single-request prediction (:mod:`roofprof.prediction.rollup`) times one pass. Serving many
requests at once is a sequence of passes whose costs the roll-up already knows; this module states
which passes, and divides their time by the tokens they produce.

**Static batch** (``batching="static"``, TensorRT-LLM's ``gptSessionBenchmark``): ``B``
requests of ``p`` prompt and ``o`` output tokens run one prefill of ``B × p`` tokens, then
``o`` decode steps at batch ``B``; step ``k`` reads the weights once and the KV cache of
``p + k`` tokens per sequence, so the later steps read more. The steps are summed in
``segments`` groups, each priced at its midpoint context (exact for a cost linear in the
context, which the KV reads are).

**Continuous batching** (``batching="continuous"``: vLLM, TensorRT-LLM's in-flight batching,
a closed-loop client at concurrency ``B``, or a server fed at an infinite rate): in the steady
state ``B`` requests are in flight; each still needs one prefill of ``p`` tokens and ``o``
decode steps that it shares with the others. ``B·o`` output tokens therefore take the time
of the static batch above. Stated assumption: the prefill chunks that ride along with decode
steps (chunked prefill, interleaving) are priced as separate prefill passes, so the weights
a chunk could share with its decode step are counted again (an overestimate of at most one
weight read per chunk, small where prefill is compute-bound).

**Saturation with no stated concurrency** (:func:`saturation_batch`): the scheduler admits
requests until the KV cache is full, so ``B`` is the most sequences of ``p + o`` tokens whose
KV cache fits beside the weights (:func:`roofprof.prediction.memory_fit.fit_memory`, its
stated allowance for activations), capped at :data:`MAX_BATCH`.

Throughput is ``B·o / T`` output tokens per second (``B·(p+o) / T`` when the source counts
input tokens too); what the published corpus compares is its inverse, the seconds per token.

>>> from roofprof.workload import Scenario
>>> decode = Scenario.of("llama-3.1-8b", "decode")
>>> run = batched_run(decode, batch=8, prompt_tokens=128, output_tokens=64)
>>> [(s.phase, s.batch, s.context_tokens, n) for s, n in run.passes(segments=2)]
[('prefill', 8, 128, 1), ('decode', 8, 143, 32), ('decode', 8, 175, 32)]
>>> run.tokens("output"), run.tokens("total")
(512, 1536)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roofprof.errors import ConfigError
from roofprof.workload import Scenario

__all__ = [
    "BATCHING",
    "MAX_BATCH",
    "BatchedRun",
    "BatchedPrediction",
    "batched_run",
    "predict_batched",
    "saturation_batch",
]

#: How the requests share the GPU (see the module docstring).
BATCHING = ("static", "continuous")
#: Largest batch a saturated server runs: TensorRT-LLM's CUDA-graph batch list goes up to
#: 8192 (published_measurements.md, S10 caveats).
MAX_BATCH = 8192
_COUNTS = ("output", "total")


@dataclass(frozen=True)
class BatchedRun:
    """``batch`` requests of ``prompt_tokens`` in and ``output_tokens`` out, served together.

    ``base`` carries the model, precisions and layout (its phase, batch and lengths are
    replaced); ``concurrency`` says where ``batch`` came from (``stated`` or ``kv-capacity``).
    """

    base: Scenario
    batch: int
    prompt_tokens: int
    output_tokens: int
    batching: str = "static"
    concurrency: str = "stated"

    def passes(self, segments: int = 4) -> tuple[tuple[Scenario, int], ...]:
        """(scenario, times it runs): one prefill of the batch, then the decode steps in
        ``segments`` groups at their midpoint context."""
        out: list[tuple[Scenario, int]] = [
            (
                self.base.replace(
                    phase="prefill",
                    batch=self.batch,
                    prompt_tokens=self.prompt_tokens,
                    context_tokens=self.prompt_tokens,
                ),
                1,
            )
        ]
        n = max(1, min(segments, self.output_tokens))
        edges = [round(i * self.output_tokens / n) for i in range(n + 1)]
        for a, b in zip(edges, edges[1:], strict=False):
            if b > a:
                ctx = self.prompt_tokens + (a + b - 1) // 2
                out.append(
                    (
                        self.base.replace(
                            phase="decode",
                            batch=self.batch,
                            prompt_tokens=self.prompt_tokens,
                            context_tokens=ctx,
                        ),
                        b - a,
                    )
                )
        return tuple(out)

    def tokens(self, counts: str = "output") -> int:
        """Tokens the run produces (``output``) or processes (``total``: input + output)."""
        if counts not in _COUNTS:
            raise ConfigError(
                f"unknown token count {counts!r}; valid choices: {', '.join(_COUNTS)}"
            )
        return self.batch * (self.output_tokens + (self.prompt_tokens if counts == "total" else 0))

    def describe(self) -> str:
        """One line stating the model of the run."""
        how = {
            "static": "a static batch",
            "continuous": (
                "continuous batching at steady state (prefill chunks priced as separate passes)"
            ),
        }
        return (
            f"{self.batch} requests x ({self.prompt_tokens} in, {self.output_tokens} out), "
            f"{how[self.batching]}; "
            f"concurrency {self.concurrency}"
        )


def saturation_batch(
    base: Scenario, gpu: str, prompt_tokens: int, output_tokens: int, cap: int = MAX_BATCH
) -> int:
    """The concurrency of a server fed at an infinite rate: the most sequences of
    ``prompt_tokens + output_tokens`` whose KV cache fits beside the weights on ``gpu``
    (per GPU of ``base``'s layout), at most ``cap``.

    Raises:
        ConfigError: not even one sequence fits.
    """
    from roofprof.prediction.memory_fit import fit_memory

    probe = base.replace(
        phase="decode",
        batch=1,
        prompt_tokens=prompt_tokens,
        context_tokens=prompt_tokens + output_tokens - 1,
    )
    most = fit_memory(probe, gpu).max_batch
    if most < 1:
        raise ConfigError(
            f"{base.model.id}: not one sequence of {prompt_tokens + output_tokens} tokens fits "
            f"beside the weights on {gpu} (tp={base.parallel.tp})"
        )
    return min(most, cap)


def batched_run(
    base: Scenario,
    *,
    batch: int | None = None,
    prompt_tokens: int,
    output_tokens: int,
    batching: str = "static",
    gpu: str | None = None,
) -> BatchedRun:
    """A :class:`BatchedRun`; with ``batch=None`` the KV-capacity batch on ``gpu``.

    Raises:
        ConfigError: unknown batching, lengths below 1, or no batch and no GPU.
    """
    if batching not in BATCHING:
        raise ConfigError(f"unknown batching {batching!r}; valid choices: {', '.join(BATCHING)}")
    if prompt_tokens < 1 or output_tokens < 1:
        raise ConfigError(
            f"a batched run needs at least one prompt and one output token, got "
            f"{prompt_tokens} and {output_tokens}"
        )
    concurrency = "stated"
    if batch is None:
        if gpu is None:
            raise ConfigError(
                "a batched run with no stated batch needs a GPU (its KV capacity sets the batch)"
            )
        batch, concurrency = (
            saturation_batch(base, gpu, prompt_tokens, output_tokens),
            "kv-capacity",
        )
    if batch < 1:
        raise ConfigError(f"batch must be at least 1, got {batch}")
    return BatchedRun(base, batch, prompt_tokens, output_tokens, batching, concurrency)


@dataclass(frozen=True)
class BatchedPrediction:
    """The predicted run: its seconds and what they mean per token."""

    run: BatchedRun
    seconds: float
    counts: str = "output"

    @property
    def tokens_per_s(self) -> float:
        return self.run.tokens(self.counts) / self.seconds

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / self.run.tokens(self.counts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.run.batch,
            "prompt_tokens": self.run.prompt_tokens,
            "output_tokens": self.run.output_tokens,
            "batching": self.run.batching,
            "concurrency": self.run.concurrency,
            "seconds": self.seconds,
            "counts": self.counts,
            "tokens_per_s": self.tokens_per_s,
            "seconds_per_token": self.seconds_per_token,
            "model": self.run.describe(),
        }


def predict_batched(
    run: BatchedRun,
    pass_seconds: Callable[[Scenario], float],
    counts: str = "output",
    segments: int = 4,
) -> BatchedPrediction:
    """Time ``run`` with ``pass_seconds`` (scenario → seconds of one pass, e.g. a roll-up
    estimator's phase estimate) and state its throughput.

    >>> from roofprof.workload import Scenario
    >>> decode = Scenario.of("llama-3.1-8b", "decode")
    >>> run = batched_run(decode, batch=4, prompt_tokens=16, output_tokens=4)
    >>> predict_batched(run, lambda s: 1.0, segments=2).tokens_per_s  # 1 prefill + 4 steps of 1 s
    3.2
    """
    seconds = sum(n * pass_seconds(s) for s, n in run.passes(segments))
    return BatchedPrediction(run, seconds, counts)
