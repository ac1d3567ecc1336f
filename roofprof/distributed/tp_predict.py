"""The prediction of a tensor-parallel validation (``roofprof validate --tp N``).

:func:`predict_tp` predicts one rank's workload with the ``measured`` estimator over the ops'
times (profiled on every rank at once, when they were) and prices its collectives from those
measured in the TP group: back to back, or as each pass meets them where the passes were
replayed in their rhythm (:mod:`roofprof.distributed.rhythm`). With a replay, ``measured``
also prices each segment's ops at the replay (:func:`~roofprof.distributed.rhythm.at_replay`),
and ``measured-per-op`` and ``measured-back-to-back`` stand beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roofprof.prediction.rollup import Prediction

if TYPE_CHECKING:
    from roofprof.distributed.tp_validate import TPValidation

__all__ = ["predict_tp"]

_SAMPLE_FIELDS = ("op", "bytes", "ranks", "seconds", "seconds_max", "backend", "path", "calls")


def predict_tp(
    result: TPValidation, kind: str, roofline: str | None, budget_s: float
) -> tuple[dict[str, Prediction], tuple[str, ...]]:
    """Each estimator row's prediction of ``result``'s real run (label -> Prediction, TTFT and
    decode step in seconds) and the notes that go with them.

    The ``measured`` estimator times one rank's shapes with the rank's threads (``result``'s
    profiled-together times where there are any, the others profiled now within
    ``budget_s`` seconds per shape; ``roofline``: the roofline choice for ops without a
    checked implementation) and the collectives are priced as the module doc says. Raises
    what :class:`~roofprof.profiling.profiler.Profiler` raises for an unknown device.

    Example::

        predictions, notes = predict_tp(validate_tp("llama-3.2-1b", estimators=False),
                                        "cpu", None, 0.2)
    """
    import warnings

    from roofprof import models
    from roofprof.cache import RooflineChoice
    from roofprof.distributed.bench import CollectiveSample, fits
    from roofprof.distributed.tp_model import shard_spec
    from roofprof.prediction.collectives import CollectiveModel, CollectiveTable
    from roofprof.prediction.rollup import estimate_phase
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.workload import Counting, Parallel

    points: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for row in result.collectives:
        points.setdefault((row["op"], row["ranks"]), []).append(
            (float(row["bytes"]), float(row["seconds"]))
        )
    table = CollectiveTable(
        {k: tuple(sorted(v)) for k, v in points.items()}, "measured in the TP group"
    )
    # the table holds every size the pass issues; the fitted all-reduce α-β only prices others
    fitted = [
        f
        for f in fits(
            [CollectiveSample(**{k: row[k] for k in _SAMPLE_FIELDS}) for row in result.collectives]
        )
        if f["op"] == "all_reduce"
    ]
    alpha = fitted[0]["alpha_s"] if fitted else 0.0
    bus = (fitted[0]["busbw_bytes_per_s"] if fitted else None) or 1e9
    comm = CollectiveModel(bus, alpha, bus, table=table, source="measured in the TP group")
    prof = Profiler(
        kind,
        ProfileSettings(
            budget_s=budget_s,
            threads=result.threads_per_rank,
            roofline=RooflineChoice(roofline or "none"),
        ),
        model=shard_spec(result.model, result.tp),
    )
    scenario = result.real.scenario(
        result.model, result.dtype, Counting(), parallel=Parallel(tp=result.tp)
    )
    out = {}
    est = prof.estimator()
    est.times.update(result.rank_times)  # shapes profiled on every rank at once, when they were
    if not prof.device.info.asynchronous:  # a CPU rank runs its Python between the kernels
        from roofprof.validation.framework_overhead import count_framework_overhead

        est = count_framework_overhead(est, result.model, "torch", use_cache=False)
    # (label, estimator, collective pricer, segments priced at their replay)
    runs: list[tuple[str, Any, Any, bool]] = [
        ("measured", est, comm, False),
        ("measured-no-launch", est.with_launch(False), comm, False),
    ]
    if result.rhythm:  # the passes as replayed in their rhythm; per-op and back to back beside
        from roofprof.distributed.rhythm import RhythmCollectives

        in_rhythm = RhythmCollectives(result.rhythm, comm)
        # (no launch-free row: a replay on a blocking CPU backend holds each op's issue time)
        runs = [
            ("measured", est, in_rhythm, True),
            ("measured-per-op", est, in_rhythm, False),
            ("measured-back-to-back", est, comm, False),
        ]
    for label, e, collectives, replayed in runs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pf = estimate_phase(models.ops(scenario.replace(phase="prefill")), e, collectives)
            dc = estimate_phase(models.ops(scenario), e, collectives)
        if replayed:
            from roofprof.distributed.rhythm import at_replay

            pf, dc = at_replay(pf, result.rhythm), at_replay(dc, result.rhythm)
        out[label] = Prediction(
            result.model, kind, label, e.describe(), pf, dc, e.ridge(result.dtype)
        )
    notes = [w for w in est.warnings if w.startswith("framework overhead")]
    if est.framework is not None:  # the ranks run its tensor-parallel form
        notes.append(est.framework.describe())
    if result.rhythm:
        from roofprof.distributed.rhythm import replay_disagreements

        notes.append(_rhythm_note(result.rhythm, comm, result.tp))
        m = out["measured-per-op"]
        notes += replay_disagreements(result.rhythm, {"prefill": m.prefill, "decode": m.decode})
    if result.rank_times:
        notes.append(
            f"each op profiled on all {result.tp} ranks at once with "
            f"{result.threads_per_rank} thread(s) each (sharing the host's cores and memory "
            "bandwidth as in the real run), the slowest rank's time"
        )
    elif prof.device.info.shared_host:
        notes.append(
            f"the {result.tp} ranks share this host's cores and memory bandwidth: each op is "
            f"profiled alone with {result.threads_per_rank} thread(s), the real run has every "
            "rank busy at once"
        )
    return out, tuple(notes)


def _rhythm_note(prices: Sequence[Any], back_to_back: Any, ranks: int) -> str:
    """One line: each phase's collectives in the pass's rhythm against back to back."""
    parts = []
    for phase in ("prefill", "decode"):
        rows = [p for p in prices if p.phase == phase]
        if rows:
            parts.append(
                f"{phase} "
                + ", ".join(
                    f"{p.name} {p.seconds * 1e3:.2f} ms "
                    f"(back to back {back_to_back.seconds(p.op, p.bytes, ranks) * 1e3:.2f})"
                    for p in rows
                )
            )
    return (
        "collectives timed in each pass's rhythm (on every rank right after the ops before "
        "them, from a barrier as each timed pass starts; a rank's waits for the others "
        "included), per call: " + "; ".join(parts) + "; 'measured' also prices each "
        "segment's ops at their replay (their profiled shares kept), 'measured-per-op' at "
        "their profiled times, and 'measured-back-to-back' prices the collectives back to back"
    )
