"""Collectives timed in the pass's rhythm: the replay on a fake group with a fake clock."""

from __future__ import annotations

import pytest

from roofprof import models
from roofprof.distributed.rhythm import (
    RhythmCollectives,
    RhythmPrice,
    measure_in_rhythm,
    price,
    segments,
)
from roofprof.errors import ConfigError
from roofprof.prediction.collectives import CollectiveModel
from roofprof.prediction.rollup import estimate_phase
from roofprof.workload import Parallel, Scenario


class Clock:
    """A fake clock the fake kernels and collectives advance."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeTorch:
    float32 = "float32"

    @staticmethod
    def ones(n, dtype=None, device=None):
        return [1.0] * n

    @staticmethod
    def empty(n, dtype=None, device=None):
        return [0.0] * n


class FakeDist:
    """One rank's view of a two-rank group: the collectives cost ``call_s`` on the clock and
    the other rank's times are planted in ``all_gather_object``."""

    def __init__(self, clock: Clock, call_s: float, other: list) -> None:
        self.clock, self.call_s, self.other, self.barriers = clock, call_s, other, 0

    def barrier(self) -> None:
        self.barriers += 1

    def all_reduce(self, buf) -> None:
        self.clock.t += self.call_s

    def all_gather_into_tensor(self, out, inp) -> None:
        self.clock.t += self.call_s

    def all_gather_object(self, everyone, local) -> None:
        everyone[0], everyone[1] = local, self.other(local)


class Ctx:
    rank, world_size, torch_device = 0, 2, "cpu"


class Prepared:
    def __init__(self, clock: Clock, seconds: float, copies: int, log: list) -> None:
        self.log, self.released = log, False
        self.calls = [self._call(clock, seconds, i) for i in range(copies)]

    def _call(self, clock: Clock, seconds: float, i: int):
        def run() -> None:
            clock.t += seconds
            self.log.append(i)

        return run

    def release(self) -> None:
        self.released = True


def decode_workload():
    """One rank's decode pass of a two-rank Llama 3.2 1B."""
    s = Scenario.of(
        "llama-3.2-1b",
        "decode",
        prompt_tokens=8,
        context_tokens=8,
        dtype="fp32",
        parallel=Parallel(tp=2),
    )
    return models.ops(s)


def replay_decode(clock, dist, prepare, *, passes, warmup):
    """The replay of one rank's decode pass on the fake group, timed on the fake clock."""
    return measure_in_rhythm(
        Ctx(),
        {"decode": decode_workload().ops},
        prepare,
        passes=passes,
        warmup=warmup,
        dist=dist,
        torch=FakeTorch(),
        clock=clock,
    )


def test_each_collective_is_priced_after_its_segment_with_the_other_ranks_wait():
    clock, made, log = Clock(), {}, []

    def prepare(op):
        if op.kind == "embedding":  # one op without an implementation: named, not run
            return None
        made[op.shape_key] = Prepared(clock, 1e-3, 2, log)
        return made[op.shape_key]

    # the other rank spends 2 ms longer in its segments and 2 ms less in each call: it
    # arrives last, the pass's wall per segment is this rank's segment + call
    def other(local):
        return [[(s + 2e-3, c - 2e-3 if c > 2e-3 else c) for s, c in seg] for seg in local]

    dist = FakeDist(clock, 3e-3, other)
    ops = decode_workload().ops
    prices = replay_decode(clock, dist, prepare, passes=4, warmup=1)
    by_name = {p.name: p for p in prices}
    assert list(by_name) == [c.name for _, c in segments(ops)]
    assert dist.barriers == 5  # one per replayed pass, as each timed pass starts
    attn = by_name["attn_allreduce"]
    # segment 7 ms here, 9 ms on the other rank; call 3 ms here, 1 ms there: wall 10 ms,
    # slowest rank's segment 9 ms -> 1 ms, which is also the last arriver's call
    assert attn.seconds == pytest.approx(1e-3)
    assert attn.per_rank_median_s == pytest.approx((3e-3, 1e-3))
    assert attn.segment_median_s == pytest.approx((7e-3, 9e-3))
    assert attn.wall_median_s == pytest.approx(10e-3)
    assert RhythmPrice.from_dict(attn.to_dict()) == attn
    assert attn.passes == 4 and "o_proj" in attn.segment_ops and not attn.skipped
    assert by_name["embedding_allreduce"].skipped == ("embedding",)
    assert all(p.released for p in made.values())  # every prepared op released
    assert set(log) == {0, 1}  # the weight copies rotate pass by pass


def test_a_late_rank_that_alternates_is_priced_beyond_the_slowest_median():
    # each rank is 2 ms late every other pass: the pass pays the lateness every time, the
    # slowest rank's median segment does not hold it
    r0 = [(4e-3, 1e-3), (2e-3, 3e-3)] * 3
    r1 = [(2e-3, 3e-3), (4e-3, 1e-3)] * 3
    assert price([r0, r1]) == pytest.approx(2e-3)


def test_rhythm_prices_the_named_ops_and_the_fallback_the_rest():
    fallback = CollectiveModel(1e9, 5e-4, 1e9, source="back to back")
    rows = (RhythmPrice("decode", "attn_allreduce", "all_reduce", 8192, 7e-3, (7e-3,), 4, ()),)
    est = _zero_estimator()
    phase = estimate_phase(decode_workload(), est, RhythmCollectives(rows, fallback))
    priced = {p.op.name: p.estimate.seconds for p in phase.ops if p.op.kind == "communication"}
    assert priced["attn_allreduce"] == pytest.approx(7e-3)
    assert priced["mlp_allreduce"] == pytest.approx(fallback.seconds("all_reduce", 8192, 2))


def _zero_estimator():
    class Zero:
        collectives = None

        def estimate(self, op):
            from roofprof.prediction.estimators import OpEstimate

            return OpEstimate(0.0, "memory", "zero")

    return Zero()


def test_no_replayed_pass_is_refused():
    with pytest.raises(ConfigError, match="passes >= 1"):
        measure_in_rhythm(Ctx(), {}, lambda op: None, passes=0, dist=object(), torch=object())


def test_a_segment_whose_profile_disagrees_with_its_replay_is_named():
    from roofprof.distributed.rhythm import replay_disagreements

    ops = {o.op.name: o for o in _priced_decode()}
    phase = type("Phase", (), {"ops": tuple(ops.values())})()
    profiled = sum(ops[n].estimate.seconds for n in ("mlp_residual", "final_norm", "lm_head"))

    def row(replayed: float) -> RhythmPrice:
        return RhythmPrice(
            "decode",
            "logits_gather",
            "all_gather",
            513024,
            2e-3,
            (2e-3, 2e-3),
            16,
            ("mlp_residual", "final_norm", "lm_head"),
            (),
            (replayed * 0.98, replayed),
            replayed + 2e-3,
        )

    assert replay_disagreements([row(profiled * 1.1)], {"decode": phase}) == []
    (note,) = replay_disagreements([row(profiled / 3)], {"decode": phase})
    assert note.startswith("decode ops before logits_gather") and "replayed" in note
    assert replay_disagreements([row(profiled / 3)], {"prefill": phase}) == []  # other phase


def _priced_decode():
    from roofprof.prediction.estimators import OpEstimate
    from roofprof.prediction.records import OpPrediction

    return [OpPrediction(op, OpEstimate(op.bytes / 40e9, "memory")) for op in decode_workload().ops]


def test_at_replay_a_pass_costs_its_replayed_segments_and_collectives():
    from roofprof.distributed.rhythm import at_replay
    from roofprof.prediction.estimators import OpEstimate

    clock = Clock()

    def prepare(op):  # every op 1 ms in the replay; the embedding has no implementation
        return None if op.kind == "embedding" else Prepared(clock, 1e-3, 1, [])

    dist = FakeDist(clock, 3e-3, lambda local: local)  # the other rank keeps the same pace
    w = decode_workload()
    prices = replay_decode(clock, dist, prepare, passes=3, warmup=0)

    class Profiled:  # the profile met a slower host: 2 ms an op
        collectives = None

        def estimate(self, op):
            return OpEstimate(2e-3, "measured")

    per_op = estimate_phase(w, Profiled(), RhythmCollectives(tuple(prices), None))
    replayed = at_replay(per_op, prices)
    seconds = {o.op.name: o.estimate.seconds for o in replayed.ops}
    assert seconds["embedding"] == 2e-3  # not replayed: its profiled time kept
    assert seconds["q_proj"] == pytest.approx(1e-3) and "replay" in replayed.ops[3].estimate.note
    # every replayed segment plus its collective costs the replay's median wall, per call
    for p in prices:
        ops = [seconds[n] for n in p.segment_ops]
        assert sum(ops) + seconds[p.name] == pytest.approx(p.wall_median_s)
    assert per_op.seconds > replayed.seconds
    # another phase's replay leaves this one as profiled
    prefill_rows = [RhythmPrice(**{**p.to_dict(), "phase": "prefill"}) for p in prices]
    assert at_replay(per_op, prefill_rows) == per_op
