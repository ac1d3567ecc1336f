"""Collectives priced as a pass meets them: each one right after the ops that come before it.

A collective timed back to back (:func:`~roofprof.distributed.bench.measure_collectives`)
finds every rank already at the call. Inside a pass a rank reaches it after the segment of
ops before it, and the ranks arrive apart: the first one waits for the last, and on a shared
host the waiting rank's idle core must be woken when the data comes. Those waits are part of
the pass's time but of no op's.

:func:`measure_in_rhythm` replays each phase's per-rank op list on every rank: from a barrier
(as each timed pass starts), every segment's ops run through the implementations the profile
chose (each checked first), then the segment's collective; the segment and the call are
timed apart on each rank. Each collective's price is what the pass spends beyond its ops'
slowest-rank times (:func:`price`): the ranks' waits for each other and the call itself.
:class:`RhythmCollectives` prices a workload's collectives by phase and op name from those
times, and any other through a :class:`~roofprof.prediction.collectives.CollectiveModel`.
:func:`at_replay` prices each segment's ops at their replay too, so a pass costs what its
replay took (segment plus collective) whatever moment of the host the per-op profile met.

Only blocking backends (gloo on a CPU) are replayed: a call there returns when the data has
arrived, so the host clock times it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from roofprof.prediction.collectives import collective_name
from roofprof.workload import COLLECTIVE_FNS, Op

__all__ = [
    "RhythmCollectives",
    "RhythmPrice",
    "at_replay",
    "measure_in_rhythm",
    "price",
    "replay_disagreements",
    "segments",
]


@dataclass(frozen=True)
class RhythmPrice:
    """One collective of one phase timed in the pass's rhythm (seconds per call).

    ``seconds``: the price in the pass (:func:`price`); ``per_rank_median_s``: each rank's
    median time in the call; ``segment_ops``: the ops replayed before it
    (``skipped``: those without a checked implementation, not run).
    """

    phase: str
    name: str
    op: str
    bytes: int
    seconds: float
    per_rank_median_s: tuple[float, ...]
    passes: int
    segment_ops: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    #: each rank's median time in the segment's ops, and the median wall of segment plus call
    segment_median_s: tuple[float, ...] = ()
    wall_median_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            **asdict(self),
            "per_rank_median_s": list(self.per_rank_median_s),
            "segment_median_s": list(self.segment_median_s),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RhythmPrice:
        """The inverse of :meth:`to_dict`."""
        return cls(
            **{
                **d,
                "per_rank_median_s": tuple(d["per_rank_median_s"]),
                "segment_ops": tuple(d["segment_ops"]),
                "skipped": tuple(d.get("skipped", ())),
                "segment_median_s": tuple(d.get("segment_median_s", ())),
            }
        )


def segments(ops: Sequence[Op]) -> list[tuple[list[Op], Op]]:
    """``ops`` cut at its collectives: ``(ops since the previous collective, the collective)``
    for each one (ops after the last collective are not part of any).

    >>> from roofprof.workload import Parallel, Scenario
    >>> from roofprof import models
    >>> s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, context_tokens=8,
    ...                 dtype="fp32", parallel=Parallel(tp=2))
    >>> [(len(seg), c.name) for seg, c in segments(models.ops(s).ops)]
    [(1, 'embedding_allreduce'), (7, 'attn_allreduce'), (6, 'mlp_allreduce'), (3, 'logits_gather')]
    """
    out, current = [], []
    for op in ops:
        if op.fn in COLLECTIVE_FNS:
            out.append((current, op))
            current = []
        else:
            current.append(op)
    return out


def measure_in_rhythm(
    ctx: Any,
    phases: Mapping[str, Sequence[Op]],
    prepare: Callable[[Op], Any],
    *,
    passes: int = 16,
    warmup: int = 2,
    dist: Any = None,
    torch: Any = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[RhythmPrice]:
    """Every collective of each phase's op list, timed right after its segment (see the module
    doc); runs on every rank, and every rank returns the same prices.

    ``phases``: phase name -> the per-rank op list in pass order; ``prepare(op)``: a checked
    prepared op (``run()``, optional ``calls`` to rotate over, ``release()``) or None for one
    that is not replayed. Prepared ops are shared by shape and released at the end.

    Raises:
        ConfigError: fewer than one replayed pass.
        RuntimeError: a collective failed or timed out (the group's timeout).
    """
    from roofprof.distributed.bench import op_call
    from roofprof.errors import ConfigError

    if passes < 1 or warmup < 0:
        raise ConfigError(f"need passes >= 1 and warmup >= 0, got {passes} and {warmup}")
    if dist is None or torch is None:
        import torch as torch_module
        import torch.distributed as dist_module

        dist, torch = dist or dist_module, torch or torch_module
    prepared: dict[tuple, Any] = {}

    def calls_of(op: Op) -> list[Callable[[], Any]] | None:
        if op.shape_key not in prepared:
            prepared[op.shape_key] = prepare(op)
        p = prepared[op.shape_key]
        return None if p is None else list(getattr(p, "calls", None) or [p.run])

    local: list[list[tuple[float, float]]] = []  # per collective: (segment s, call s) per pass
    rows: list[tuple[str, Op, int, tuple[str, ...], tuple[str, ...]]] = []
    try:
        for phase, ops in phases.items():
            plan = []
            for seg, coll in segments(ops):
                runs = [(op.name, calls_of(op)) for op in seg]
                fn, actual = op_call(
                    dist,
                    torch,
                    collective_name(coll.fn),
                    int(coll.bytes),
                    ctx.rank,
                    ctx.world_size,
                    ctx.torch_device,
                )
                plan.append(([c for _, c in runs if c], fn))
                ran = tuple(n for n, c in runs if c)
                rows.append((phase, coll, actual, ran, tuple(n for n, c in runs if not c)))
            spent: list[list[tuple[float, float]]] = [[] for _ in plan]
            for p in range(warmup + passes):
                dist.barrier()  # as each timed pass of the real run starts
                for i, (seg_calls, fn) in enumerate(plan):
                    t0 = clock()
                    for calls in seg_calls:
                        calls[p % len(calls)]()
                    t1 = clock()
                    fn()
                    if p >= warmup:
                        spent[i].append((t1 - t0, clock() - t1))
            local.extend(spent)
    finally:
        for p in prepared.values():
            if p is not None:
                p.release()
    everyone: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(everyone, local)
    out = []
    for i, (phase, coll, actual, ran, skipped) in enumerate(rows):
        per_rank = [r[i] for r in everyone]  # rank -> [(segment s, call s) per pass]
        out.append(
            RhythmPrice(
                phase,
                coll.name,
                collective_name(coll.fn),
                actual,
                price(per_rank),
                tuple(statistics.median(c for _, c in r) for r in per_rank),
                passes,
                ran,
                skipped,
                _segment_medians(per_rank),
                _wall_median(per_rank),
            )
        )
    return out


def _segment_medians(per_rank: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, ...]:
    """Each rank's median time in the segment's ops."""
    return tuple(statistics.median(s for s, _ in r) for r in per_rank)


def _wall_median(per_rank: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The median over the passes of the ranks' mean segment plus call."""
    return statistics.median(
        statistics.fmean(s + c for s, c in per_pass) for per_pass in zip(*per_rank, strict=True)
    )


def price(per_rank: Sequence[Sequence[tuple[float, float]]]) -> float:
    """A collective's seconds per call in the pass, from each rank's ``(segment, call)`` times
    per replayed pass.

    The ranks leave a collective together, so a segment plus its call takes each rank the
    same wall time; the pass's op times take each op's slowest rank (as the profile does).
    The collective's price is what the pass spends beyond that: the median wall of segment
    plus call (the ranks' mean) minus the slowest rank's median segment, and at least the
    median of the last-arriving rank's time in the call (the transfer and the wake-up of the
    ranks that waited), which no lateness makes shorter.

    >>> price([[(4e-3, 1e-3)] * 3, [(3e-3, 2e-3)] * 3])  # rank 0 arrives last each time
    0.001
    >>> round(price([[(4e-3, 1e-3), (2e-3, 3e-3)], [(2e-3, 3e-3), (4e-3, 1e-3)]]), 6)
    0.002
    """
    last_in = statistics.median(
        min(c for _, c in per_pass) for per_pass in zip(*per_rank, strict=True)
    )
    return max(_wall_median(per_rank) - max(_segment_medians(per_rank)), last_in)


@dataclass(frozen=True)
class RhythmCollectives:
    """Prices collectives by phase and op name from :class:`RhythmPrice` rows; any other
    through ``fallback`` (a :class:`~roofprof.prediction.collectives.CollectiveModel`).

    >>> from roofprof.prediction.collectives import CollectiveModel
    >>> fallback = CollectiveModel(1e9, 1e-5, 1e9, source="α-β")
    >>> row = RhythmPrice("decode", "attn_allreduce", "all_reduce", 8192, 2e-3, (2e-3,), 8, ())
    >>> rc = RhythmCollectives((row,), fallback)
    >>> from roofprof.workload import Op
    >>> op = Op("attn_allreduce", "communication", "decode", 1, 2048, 0, "fp32", 0.0, 8192,
    ...         batch=2, fn="allreduce")
    >>> rc.op_seconds(op), rc.op_seconds(Op("x", "communication", "prefill", 1, 1, 0, "fp32",
    ...                                      0.0, 8192, batch=2, fn="allreduce"))
    (0.002, None)
    """

    prices: tuple[RhythmPrice, ...]
    fallback: Any
    source: str = "timed in the pass's rhythm in the TP group"

    def op_seconds(self, op: Op) -> float | None:
        """Seconds per call of ``op`` as its phase's pass meets it; None when not replayed."""
        for p in self.prices:
            if p.phase == op.phase and p.name == op.name:
                return p.seconds
        return None

    def seconds(self, op: str, size_bytes: float, ranks: int) -> float:
        """A collective by name and size alone: the fallback model's price."""
        return self.fallback.seconds(op, size_bytes, ranks)


def at_replay(phase: Any, prices: Sequence[RhythmPrice]) -> Any:
    """``phase`` (a :class:`~roofprof.prediction.records.PhasePrediction`) with each replayed
    segment's ops priced at the replay: every op the replay ran keeps its share of the
    segment's profiled time, scaled so the segment costs the slowest rank's median replay.

    With the collectives priced by :func:`price` (wall minus that same segment time), a
    segment plus its collective then costs the replay's median wall. Ops the replay skipped,
    segments never replayed and entries outside the op list (the framework overhead) keep
    their times. Each scaled op's note says by how much.

    >>> from roofprof import models
    >>> from roofprof.prediction.estimators import OpEstimate
    >>> from roofprof.prediction.records import OpPrediction, PhasePrediction
    >>> from roofprof.workload import Parallel, Scenario
    >>> w = models.ops(Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, context_tokens=8,
    ...                           dtype="fp32", parallel=Parallel(tp=2)))
    >>> phase = PhasePrediction(w, tuple(OpPrediction(op, OpEstimate(1e-3, "measured"))
    ...                                  for op in w.ops))
    >>> row = RhythmPrice("decode", "mlp_allreduce", "all_reduce", 8192, 1e-3, (1e-3,) * 2,
    ...                   16, ("gate_proj", "up_proj", "down_proj"), (), (1.5e-3, 1.2e-3), 2.6e-3)
    >>> [(o.op.name, o.estimate.seconds) for o in at_replay(phase, [row]).ops
    ...  if o.op.name in ("o_proj", "gate_proj", "up_proj", "down_proj")]  # the MLP's at 1.5 ms
    [('o_proj', 0.001), ('gate_proj', 0.0005), ('up_proj', 0.0005), ('down_proj', 0.0005)]
    """
    from dataclasses import replace

    scale: dict[str, float] = {}
    for p in prices:
        if p.phase != phase.workload.phase or not p.segment_median_s:
            continue
        ran = [o for o in phase.ops if o.op.name in p.segment_ops]
        profiled = sum(o.estimate.seconds for o in ran)
        if profiled > 0:
            scale |= {o.op.name: max(p.segment_median_s) / profiled for o in ran}
    if not scale:
        return phase
    ops = tuple(
        o
        if o.op.name not in scale
        else replace(
            o,
            estimate=replace(
                o.estimate,
                seconds=o.estimate.seconds * scale[o.op.name],
                note="; ".join(
                    n
                    for n in (
                        o.estimate.note,
                        f"x{scale[o.op.name]:.2f} to its segment's replay in pass order",
                    )
                    if n
                ),
            ),
        )
        for o in phase.ops
    )
    return replace(phase, ops=ops)


def replay_disagreements(
    prices: Sequence[RhythmPrice],
    phases: Mapping[str, Any],
    *,
    tolerance: float = 0.25,
    floor_s: float = 0.5e-3,
) -> list[str]:
    """Notes on the segments whose profiled op times disagree with their replay.

    ``phases``: phase name -> its :class:`~roofprof.prediction.records.PhasePrediction`. For
    each replayed segment, its ops' predicted seconds per call are summed and set beside the
    slowest rank's median replay of the same ops in pass order. A sum more than ``tolerance``
    away, and by more than ``floor_s``, means the host's speed moved between the profile and
    the replay, or an op runs at another speed after its neighbours than alone: a note names
    the segment and both times.

    >>> from roofprof.prediction.estimators import OpEstimate
    >>> from roofprof.prediction.records import OpPrediction
    >>> from roofprof.workload import Op
    >>> head = Op("lm_head", "gemm", "decode", 1, 64128, 2048, "fp32", 0.0, 5e8)
    >>> class Phase:
    ...     ops = (OpPrediction(head, OpEstimate(0.113, "memory")),)
    >>> row = RhythmPrice("decode", "logits_gather", "all_gather", 513024, 2e-3, (2e-3,) * 2,
    ...                   16, ("lm_head",), (), (0.035, 0.036), 0.039)
    >>> replay_disagreements([row], {"decode": Phase()})[0][:74]
    'decode ops before logits_gather: profiled 113.00 ms a call, replayed 36.00'
    """
    notes = []
    for p in prices:
        phase = phases.get(p.phase)
        if phase is None or not p.segment_median_s:
            continue
        profiled = sum(o.estimate.seconds for o in phase.ops if o.op.name in p.segment_ops)
        replayed = max(p.segment_median_s)
        if replayed > 0 and (
            abs(profiled / replayed - 1) > tolerance and abs(profiled - replayed) > floor_s
        ):
            notes.append(
                f"{p.phase} ops before {p.name}: profiled {profiled * 1e3:.2f} ms a call, "
                f"replayed {replayed * 1e3:.2f} ms in pass order on every rank (slowest rank): "
                "the host's speed moved between the two, or an op runs at another speed after "
                "its neighbours; 'measured' takes the replay, 'measured-per-op' the profile"
            )
    return notes
