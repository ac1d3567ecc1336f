"""``roofprof validate --tp N``: a real tensor-parallel Llama on N ranks against the estimator.

On each rank (:func:`~roofprof.distributed.ranks.launch`, gloo on a CPU): the full
:class:`~roofprof.models.llama_torch.TorchLlama` is built with the usual deterministic
weights, its logits for the prompt are kept, and the rank's
:class:`~roofprof.distributed.tp_model.TPLlama` shard must give the same logits (correctness
first: a mismatch is exit 2). Then prefill (``repeats`` times) and decode steps are timed
between barriers (the slowest rank's time of each), and the collectives the pass issues are
measured at its exact sizes in the same group. With the ranks profiling together, the same
passes are timed again after the profile: the real run is the median of both timings, and
their drift across the profile (:meth:`TPValidation.host_drift`) widens each residual's noise
band.

The prediction (:func:`~roofprof.distributed.tp_predict.predict_tp`) is the ``measured``
estimator's for the per-rank workload
(``Scenario(parallel=Parallel(tp=N))``: split heads, intermediate and vocabulary), plus the
measured collective times (:class:`~roofprof.prediction.collectives.CollectiveModel` over a
table of them). Its ops are profiled for one rank's shapes with the rank's thread count, by
default on **every rank at once** (``profile_ranks="together"``): the ranks time each shape
at the same time (a barrier before each), so an op is timed sharing the cores' memory
system with the other ranks' same op, as it does in the real run, and each op takes the
slowest rank's time (a pass waits for the slowest rank at every all-reduce). The contention
is the point there, so it is not re-measured away, and those times never enter the
measurement cache.
``profile_ranks="alone"`` profiles them in the calling process with nothing else running.
Residuals as in single-rank validate: ``predicted / real − 1``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from roofprof.errors import ConfigError
from roofprof.prediction.rollup import Prediction, RealRun, compare
from roofprof.specs import ModelSpec

__all__ = [
    "PROFILE_RANKS",
    "TPValidation",
    "rank_profiled_ops",
    "slowest_rank_times",
    "validate_tp",
]

#: How the per-rank ops are profiled: on every rank at once, or in one process alone.
PROFILE_RANKS = ("together", "alone")

_TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 2e-2}  # max |diff| / max |logit|


@dataclass(frozen=True)
class TPValidation:
    """A tensor-parallel real run, its correctness check, measured collectives, predictions."""

    real: RealRun
    model: ModelSpec
    tp: int
    dtype: str
    threads_per_rank: int
    max_abs_logit_diff: float
    collectives: tuple[dict[str, Any], ...]
    prefill_samples_s: tuple[float, ...]
    decode_samples_s: tuple[float, ...]
    predictions: dict[str, Prediction] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    load_average: tuple[float, float] | None = None  # 1-minute load before and after the real run
    profile_ranks: str = "alone"
    # the ops' times profiled on every rank at once (shape key -> OpTime), when together
    rank_times: dict[tuple, Any] = field(default_factory=dict)
    # the collectives timed in each pass's rhythm (RhythmPrice rows), when profiled together
    rhythm: tuple[Any, ...] = ()
    # the real passes timed again after the profile (when profiled together); ``real`` is the
    # median of both timings
    prefill_after_samples_s: tuple[float, ...] = ()
    decode_after_samples_s: tuple[float, ...] = ()

    def host_drift(self) -> dict[str, float]:
        """Phase -> the real pass's drift across the profile: the slower over the faster of
        its medians before and after, minus 1 (0 where it was timed once).

        >>> from roofprof.specs import load_model
        >>> v = TPValidation(RealRun("m", 1, 8, 9, 0.1, 0.05, 2), load_model("llama-3.2-1b"),
        ...                  2, "fp32", 1, 0.0, (), (0.10, 0.10), (0.05,),
        ...                  prefill_after_samples_s=(0.12,), decode_after_samples_s=(0.05,))
        >>> {k: round(x, 3) for k, x in v.host_drift().items()}
        {'prefill': 0.2, 'decode': 0.0}
        """
        out = {}
        for phase, before, after in (
            ("prefill", self.prefill_samples_s, self.prefill_after_samples_s),
            ("decode", self.decode_samples_s, self.decode_after_samples_s),
        ):
            medians = [statistics.median(x) for x in (before, after) if x]
            out[phase] = max(medians) / min(medians) - 1 if len(medians) == 2 else 0.0
        return out

    def noise_bands(self) -> dict[str, float]:
        """Phase -> the band a residual within which is the host's own noise: the larger of
        the real pass's spread (IQR over median, both timings) and its drift across the
        profile."""
        from roofprof.validation.host_noise import noise_band

        drift, r = self.host_drift(), self.real
        return {
            "prefill": noise_band(
                r.prefill_spread_s / r.prefill_s if r.prefill_s else 0.0, drift["prefill"]
            ),
            "decode": noise_band(
                r.decode_spread_s / r.decode_s if r.decode_s else 0.0, drift["decode"]
            ),
        }

    def comparison(self) -> list[dict[str, Any]]:
        """Rows of :func:`roofprof.prediction.rollup.compare` (one per estimator, then ``real``),
        each estimator's with each phase's noise band and whether its residual lies within it
        (:func:`~roofprof.validation.host_noise.mark_within_noise`)."""
        from roofprof.validation.host_noise import mark_within_noise

        return mark_within_noise(compare(self.predictions, self.real), self.noise_bands())

    def to_dict(self) -> dict[str, Any]:
        from roofprof.results import provenance

        comm = {
            label: {
                "prefill_s": p.prefill.by_kind().get("communication", 0.0),
                "decode_s": p.decode.by_kind().get("communication", 0.0),
            }
            for label, p in self.predictions.items()
        }
        return {
            "real": self.real.to_dict(),
            "model": self.model.id,
            "num_layers": self.model.num_layers,
            "tp": self.tp,
            "dtype": self.dtype,
            "backend": "torch",
            "attention": "fused",
            "threads_per_rank": self.threads_per_rank,
            "max_abs_logit_diff": self.max_abs_logit_diff,
            "collectives": list(self.collectives),
            "predicted_communication": comm,
            "prefill_samples_s": list(self.prefill_samples_s),
            "decode_samples_s": list(self.decode_samples_s),
            "prefill_after_samples_s": list(self.prefill_after_samples_s),
            "decode_after_samples_s": list(self.decode_after_samples_s),
            "host_drift": self.host_drift(),
            "comparison": [
                {k: (v if not isinstance(v, float) or v == v else None) for k, v in row.items()}
                for row in self.comparison()
            ],
            "predictions": {label: p.to_dict() for label, p in self.predictions.items()},
            "notes": list(self.notes),
            "profile_ranks": self.profile_ranks,
            "collectives_in_rhythm": [p.to_dict() for p in self.rhythm],
            "load_average_start_end": self.load_average,
            "provenance": provenance(tp=self.tp),
        }


def _max_over_ranks(seconds: float, device: str) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _timed(fn: Any, *args: Any) -> float:
    """Seconds of ``fn(*args)`` to its result on the host (reading one logit waits for an
    asynchronous device: the same code on a CPU and a GPU)."""
    t0 = time.perf_counter()
    out = fn(*args)
    float(out.reshape(-1)[0])
    return time.perf_counter() - t0


def _rank(
    ctx: Any,
    spec: ModelSpec,
    dtype: str,
    batch: int,
    prompt: int,
    steps: int,
    warmup_steps: int,
    repeats: int,
    threads: int,
    together: bool = False,
    budget_s: float = 0.2,
) -> dict[str, Any] | None:  # runs on every rank
    import torch
    import torch.distributed as dist

    from roofprof.distributed.bench import measure_collectives
    from roofprof.distributed.tp_model import TPLlama, torch_comm
    from roofprof.models.llama_torch import KVCache, TorchLlama, torch_dtype

    torch.set_num_threads(threads)
    tdt = torch_dtype(dtype)
    full = TorchLlama(spec, dtype=tdt, device=ctx.torch_device)
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, spec.vocab_size, (batch, prompt), generator=gen).to(ctx.torch_device)
    expected = full(ids, KVCache())
    shard = TPLlama(full, ctx.rank, ctx.world_size, torch_comm())
    del full
    got = shard(ids, KVCache())
    diff = float((got.float() - expected.float()).abs().max().item())
    scale = float(expected.float().abs().max().item()) or 1.0
    if not diff <= _TOLERANCE.get(dtype, 1e-3) * scale:
        raise ConfigError(
            f"rank {ctx.rank}: the tensor-parallel logits differ from the single-rank model's "
            f"by {diff:.3g} (max |logit| {scale:.3g}): not timing a wrong model"
        )
    per_rep = -(-steps // repeats)
    next_ids = torch.zeros((batch, 1), dtype=ids.dtype, device=ctx.torch_device)
    shard(ids, KVCache())  # warm-up prefill

    def timed_passes(model: Any) -> tuple[list[float], list[float]]:
        prefill, decode = [], []
        for _ in range(repeats):
            cache = KVCache()
            dist.barrier()
            prefill.append(_max_over_ranks(_timed(model, ids, cache), ctx.torch_device))
            for _ in range(warmup_steps):
                model(next_ids, cache)
            for _ in range(per_rep):
                dist.barrier()
                decode.append(_max_over_ranks(_timed(model, next_ids, cache), ctx.torch_device))
        return prefill, decode

    prefill, decode = timed_passes(shard)
    e = torch.tensor([], dtype=tdt).element_size()
    sizes = sorted({batch * prompt * spec.hidden_size * e, batch * spec.hidden_size * e})
    samples = measure_collectives(ctx, ops=("all_reduce",), sizes=sizes, warmup=2, calls=5)
    samples += measure_collectives(
        ctx, ops=("all_gather",), sizes=[batch * spec.vocab_size * e], warmup=2, calls=5
    )
    context = _context(prompt, warmup_steps, steps, repeats)
    times, rhythm, after = {}, [], ([], [])
    if together:  # the real passes again after the profile: the host's drift across it
        times, rhythm = _profile_together(
            ctx, spec, dtype, batch, prompt, context, threads, budget_s
        )
        after = timed_passes(shard)
    del shard
    if not ctx.is_root:
        return None
    return {
        "prefill": prefill,
        "decode": decode,
        "prefill_after": after[0],
        "decode_after": after[1],
        "diff": diff,
        "collectives": [s.to_row() for s in samples],
        "rank_times": times,
        "rhythm": [p.to_dict() for p in rhythm],
    }


def _profile_together(
    ctx: Any,
    spec: ModelSpec,
    dtype: str,
    batch: int,
    prompt: int,
    context: int,
    threads: int,
    budget_s: float,
) -> tuple[dict[tuple, Any], list[Any]]:  # runs on every rank
    """Every rank profiles the per-rank op list of both passes, each shape at the same time
    (from a barrier); each shape's slowest-rank time (:func:`slowest_rank_times`), and the
    collectives timed in the passes' rhythm with those ops (:func:`_in_rhythm`). The
    measurements are not stored in the cache: times taken under the ranks' own contention
    must not be reused by a single-process prediction."""
    import torch.distributed as dist

    from roofprof.cache import RooflineChoice
    from roofprof.distributed.tp_model import shard_spec
    from roofprof.profiling.engine import MeasureSettings
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.workload import Counting, Parallel, Scenario

    tp = ctx.world_size
    scenario = Scenario(spec, "decode", batch, prompt, context, dtype, Counting(), Parallel(tp=tp))
    settings = ProfileSettings(
        budget_s=budget_s,
        threads=threads,
        roofline=RooflineChoice("none"),
        store=False,
        measure=MeasureSettings(judge_contention=False),
    )
    prof = Profiler(ctx.torch_device, settings, model=shard_spec(spec, tp))
    est = prof.estimator()
    # shape by shape from a barrier: each op is timed while the other ranks time the same op,
    # as in the real pass (a whole-list prefetch lets the ranks drift apart)
    for op in rank_profiled_ops(scenario):
        dist.barrier()
        est.prefetch([op])
        est.lookup(op)
    mine = dict(est.times)
    everyone: list[Any] = [None] * tp
    dist.all_gather_object(everyone, mine)
    merged = slowest_rank_times(everyone)
    return merged, _in_rhythm(ctx, prof, merged, scenario, threads)


def _in_rhythm(
    ctx: Any, prof: Any, times: dict[tuple, Any], scenario: Any, threads: int
) -> list[Any]:  # runs on every rank
    """The collectives of both passes timed in their rhythm
    (:func:`~roofprof.distributed.rhythm.measure_in_rhythm`), each segment's ops run by the
    implementation whose time the profile took, checked first. Only on a blocking backend
    (gloo, a CPU): elsewhere none, and the back-to-back times price the collectives."""
    import numpy as np

    from roofprof import models
    from roofprof.devices.cpu import threads as cpu_threads
    from roofprof.distributed.rhythm import measure_in_rhythm
    from roofprof.profiling.engine import prepare_checked

    if ctx.backend != "gloo":  # an NCCL call returns before its data has moved
        return []
    impls = {impl.name: impl for impl in prof.ordered_impls()}
    rng = np.random.default_rng(7)

    def prepare(op: Any) -> Any:
        chosen = times.get(op.shape_key)
        impl = impls.get(chosen.impl) if chosen is not None else None
        return None if impl is None else prepare_checked(impl, op, rng)[0]

    phases = {
        "prefill": models.ops(scenario.replace(phase="prefill")).ops,
        "decode": models.ops(scenario).ops,
    }
    with cpu_threads(threads):
        return measure_in_rhythm(ctx, phases, prepare)


def rank_profiled_ops(scenario: Any) -> list[Any]:
    """The distinct shapes of ``scenario``'s per-rank prefill and decode op lists that the ranks
    profile: every op but the collectives, which are priced from the ones measured in the
    group at their exact sizes.

    >>> from roofprof.workload import Parallel, Scenario
    >>> s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, context_tokens=8,
    ...                 dtype="fp32", parallel=Parallel(tp=2))
    >>> ops = rank_profiled_ops(s)
    >>> len(ops) > 10, any(op.kind == "communication" for op in ops)
    (True, False)
    """
    from roofprof import models

    ops = [*models.ops(scenario.replace(phase="prefill")).ops, *models.ops(scenario).ops]
    return list({op.shape_key: op for op in ops if op.kind != "communication"}.values())


def slowest_rank_times(per_rank: list[dict[tuple, Any]]) -> dict[tuple, Any]:
    """Each shape's slowest time over the ranks' tables (shape key -> OpTime), noted as
    profiled together and not flagged as contended (that contention is the real run's).

    >>> from roofprof.prediction.estimators import OpTime
    >>> t = slowest_rank_times([{("a",): OpTime(1e-3, "torch")}, {("a",): OpTime(2e-3, "torch")}])
    >>> t[("a",)].seconds, t[("a",)].note
    (0.002, "profiled on all 2 ranks at once, the slowest rank's time")
    """
    import dataclasses

    note = f"profiled on all {len(per_rank)} ranks at once, the slowest rank's time"
    merged = {}
    for key in {k for table in per_rank for k in table}:
        slowest = max((t[key] for t in per_rank if key in t), key=lambda t: t.seconds)
        merged[key] = dataclasses.replace(
            slowest, contended=False, note="; ".join(x for x in (slowest.note, note) if x)
        )
    return merged


def validate_tp(
    model: str | ModelSpec,
    *,
    tp: int = 2,
    device: str = "cpu",
    dtype: str = "fp32",
    batch: int = 1,
    prompt_tokens: int = 128,
    decode_steps: int = 8,
    warmup_steps: int = 2,
    prefill_repeats: int = 3,
    max_layers: int | None = None,
    threads: int | None = None,
    roofline: str | None = "none",
    budget_s: float = 0.2,
    estimators: bool = True,
    timeout_s: float = 600.0,
    profile_ranks: str = "together",
) -> TPValidation:
    """Run the ``tp``-rank Llama, check it, time it, and predict it (see the module doc).

    ``threads``: torch threads per rank (default: the cores shared out, at least 1);
    ``max_layers``: run at most that many layers (the prediction uses the same count);
    ``profile_ranks``: ``together`` (every rank profiles its ops at once, as they run) or
    ``alone`` (one process, nothing else running).

    Raises:
        ConfigError: ``tp`` below 2 or not dividing heads/intermediate/vocabulary, a model
            that is not a Llama the plain-torch model runs, logits that differ, an unknown
            ``profile_ranks``.
        RankError: a rank died or timed out, more ranks than cores/GPUs.

    Example::

        result = validate_tp("llama-3.2-1b", tp=2, max_layers=2, prompt_tokens=64)
    """
    import dataclasses

    from roofprof.distributed.ranks import device_type, launch, local_device_count
    from roofprof.distributed.rhythm import RhythmPrice
    from roofprof.distributed.tp_model import check_tp
    from roofprof.specs import load_model

    if tp < 2:
        raise ConfigError(f"--tp {tp}: tensor parallelism needs at least 2 ranks")
    if profile_ranks not in PROFILE_RANKS:
        raise ConfigError(
            f"unknown rank profile {profile_ranks!r}; valid choices: {', '.join(PROFILE_RANKS)}"
        )
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    if spec.family != "llama":
        raise ConfigError(f"--tp runs the plain-torch Llama; {spec.id} is a {spec.family} model")
    check_tp(spec, tp)
    if max_layers is not None and max_layers < spec.num_layers:
        spec = dataclasses.replace(spec, num_layers=max_layers)
    kind = device_type(device)
    per_rank = threads or max(1, local_device_count("cpu") // tp)
    args = (
        spec,
        dtype,
        batch,
        prompt_tokens,
        decode_steps,
        warmup_steps,
        prefill_repeats,
        per_rank,
        estimators and profile_ranks == "together",
        budget_s,
    )
    load_start = _load()
    raw = launch(_rank, args, ranks=tp, device=kind, timeout_s=timeout_s, what="validate --tp")
    load = None if load_start is None else (load_start, _load() or 0.0)
    prefill = [*raw["prefill"], *raw.get("prefill_after", ())]
    decode = [*raw["decode"], *raw.get("decode_after", ())]
    real = RealRun(
        spec.id,
        batch,
        prompt_tokens,
        _context(prompt_tokens, warmup_steps, decode_steps, prefill_repeats),
        statistics.median(prefill),
        statistics.median(decode),
        spec.num_layers,
        source=f"torch TP {tp} ranks ({kind}), slowest rank per pass",
        prefill_spread_s=_iqr(prefill),
        decode_spread_s=_iqr(decode),
    )
    result = TPValidation(
        real,
        spec,
        tp,
        dtype,
        per_rank,
        raw["diff"],
        tuple(raw["collectives"]),
        tuple(raw["prefill"]),
        tuple(raw["decode"]),
        load_average=load,
        profile_ranks=profile_ranks,
        rank_times=dict(raw.get("rank_times") or {}),
        rhythm=tuple(RhythmPrice.from_dict(d) for d in raw.get("rhythm") or ()),
        prefill_after_samples_s=tuple(raw.get("prefill_after") or ()),
        decode_after_samples_s=tuple(raw.get("decode_after") or ()),
    )
    if estimators:
        from roofprof.distributed.tp_predict import predict_tp

        predictions, notes = predict_tp(result, kind, roofline, budget_s)
        result = replace(result, predictions=predictions)
        result = replace(result, notes=(*notes, *_noise_notes(result)))
    return result


def _noise_notes(result: TPValidation) -> list[str]:
    """The real passes' drift across the profile, and each residual within the host's noise."""
    from roofprof.validation.host_noise import noise_lines

    if not result.prefill_after_samples_s:
        return []
    drift = result.host_drift()
    before_after = "; ".join(
        f"{phase} {statistics.median(b) * 1e3:.1f} ms before, {statistics.median(a) * 1e3:.1f} "
        f"ms after (drift {drift[phase]:.1%})"
        for phase, b, a in (
            ("prefill", result.prefill_samples_s, result.prefill_after_samples_s),
            ("decode", result.decode_samples_s, result.decode_after_samples_s),
        )
    )
    return [
        "the real passes timed before the profile and again after it, the real run the "
        f"median of both: {before_after}",
        *noise_lines(
            result.comparison(),
            "the larger of the real passes' spread and their drift across the profile",
        ),
    ]


def _load() -> float | None:
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _context(prompt: int, warmup_steps: int, steps: int, repeats: int) -> int:
    per_rep = -(-steps // repeats)
    return prompt + warmup_steps + per_rep // 2


def _iqr(values: list[float]) -> float:
    if len(values) < 4:
        return max(values) - min(values) if values else 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]
