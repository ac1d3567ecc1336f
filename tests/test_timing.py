"""Timing statistics and repeat sizing, with a fake clock (fake the clock, not the kernel)."""

from __future__ import annotations

import itertools
import math

import pytest

from roofprof.timing import (
    NOISY_CV,
    Case,
    Clock,
    PerfCounterClock,
    Timing,
    benchmark,
    interleave,
    repeat_counts,
)


class FakeClock:
    """Each stop() returns the next scripted duration; records start/stop events."""

    name = "fake"

    def __init__(self, durations, log=None):
        self._it = itertools.cycle(durations) if isinstance(durations, list) else durations
        self.log = log if log is not None else []
        self.starts = 0

    def start(self):
        self.starts += 1
        self.log.append("start")

    def stop(self):
        self.log.append("stop")
        return next(self._it)


def constant(value):
    return itertools.repeat(value)


def test_fake_clock_satisfies_protocol():
    assert isinstance(FakeClock(constant(1.0)), Clock)
    assert isinstance(PerfCounterClock(), Clock)


def test_statistics_of_known_samples():
    t = Timing(samples_s=(1.0, 2.0, 3.0, 4.0, 5.0))
    assert t.n == 5
    assert t.min_s == 1.0 and t.max_s == 5.0
    assert t.median_s == 3.0
    assert t.quartiles_s == (2.0, 4.0)
    assert t.iqr_s == 2.0
    assert t.cv == pytest.approx(math.sqrt(2.5) / 3.0)
    assert t.noisy


def test_constant_samples_are_not_noisy():
    t = Timing(samples_s=(0.5,) * 7)
    assert t.cv == 0.0 and t.iqr_s == 0.0 and not t.noisy


def test_noise_threshold_is_five_percent():
    assert NOISY_CV == 0.05
    quiet = Timing(samples_s=(1.0, 1.04, 0.96, 1.0))
    loud = Timing(samples_s=(1.0, 1.2, 0.8, 1.0))
    assert not quiet.noisy and loud.noisy


def test_single_sample_and_empty():
    t = Timing(samples_s=(2.0,))
    assert t.median_s == 2.0 and t.iqr_s == 0.0 and t.cv == 0.0
    with pytest.raises(ValueError):
        Timing(samples_s=())


def test_to_dict_round_trip():
    t = Timing(
        samples_s=(1.0, 2.0, 3.0), flush="flush", warmup_runs=2, estimate_s=1.5, clock="fake"
    )
    d = t.to_dict()
    assert d["median_s"] == 2.0 and d["flush"] == "flush" and d["samples_s"] == [1.0, 2.0, 3.0]
    assert Timing.from_dict(d) == t
    assert "samples_s" not in t.to_dict(samples=False)


def test_repeat_counts_follow_budget():
    assert repeat_counts(0.01, budget_s=0.1, warmup_s=0.02, min_repeats=3, max_repeats=100) == (
        2,
        10,
    )
    assert repeat_counts(1.0, budget_s=0.1, warmup_s=0.02, min_repeats=3, max_repeats=100) == (0, 3)
    assert repeat_counts(1e-6, budget_s=0.1, warmup_s=0.0, min_repeats=3, max_repeats=50) == (0, 50)
    # no timing available (simulator events) -> the maximum
    assert repeat_counts(0.0, budget_s=0.1, warmup_s=0.02, min_repeats=3, max_repeats=40) == (0, 40)
    with pytest.raises(ValueError):
        repeat_counts(0.1, budget_s=1, warmup_s=0, min_repeats=5, max_repeats=2)


def test_benchmark_sizes_repeats_by_budget():
    calls = []
    clock = FakeClock(constant(0.01))
    t = benchmark(
        lambda: calls.append(1),
        clock=clock,
        budget_s=0.1,
        warmup_s=0.02,
        min_repeats=3,
        max_repeats=1000,
        estimate_runs=2,
    )
    assert t.n == 10
    assert t.warmup_runs == 2
    assert t.estimate_s == pytest.approx(0.01)
    assert len(calls) == 2 + 2 + 10  # estimate + warm-up + timed
    assert clock.starts == 2 + 10  # warm-up calls are not timed
    assert t.clock == "fake" and t.flush == "none"
    assert all(s == 0.01 for s in t.samples_s)


def test_benchmark_respects_min_and_max_repeats():
    slow = benchmark(
        lambda: None, clock=FakeClock(constant(2.0)), budget_s=0.1, min_repeats=4, max_repeats=9
    )
    assert slow.n == 4 and slow.warmup_runs == 0
    fast = benchmark(
        lambda: None, clock=FakeClock(constant(1e-7)), budget_s=0.1, min_repeats=4, max_repeats=9
    )
    assert fast.n == 9


def test_benchmark_keeps_raw_samples_in_order():
    durations = iter([0.5, 0.5] + [0.1, 0.2, 0.3, 0.4, 0.5])
    t = benchmark(
        lambda: None,
        clock=FakeClock(durations),
        budget_s=2.5,
        warmup_s=0.0,
        min_repeats=1,
        max_repeats=5,
        estimate_runs=2,
    )
    assert t.samples_s == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert t.median_s == 0.3


def test_flush_runs_before_every_timed_call_outside_the_interval():
    log = []
    clock = FakeClock(constant(0.05), log)
    t = benchmark(
        lambda: log.append("call"),
        clock=clock,
        flush=lambda: log.append("flush"),
        budget_s=0.15,
        warmup_s=0.0,
        min_repeats=1,
        estimate_runs=1,
    )
    assert t.flush == "flush"
    assert t.n == 3
    # every timed call: flush, start, call, stop
    assert log == ["flush", "start", "call", "stop"] * 4


def test_rotation_uses_input_sets_in_turn():
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    t = benchmark(
        fns,
        clock=FakeClock(constant(0.01)),
        budget_s=0.06,
        warmup_s=0.0,
        min_repeats=1,
        estimate_runs=1,
    )
    assert t.flush == "rotate:3"
    assert seen == [0, 1, 2, 0, 1, 2, 0][: len(seen)] and len(seen) == 7
    t2 = benchmark(
        fns, clock=FakeClock(constant(0.01)), flush=lambda: None, budget_s=0.03, estimate_runs=1
    )
    assert t2.flush == "flush+rotate:3"


def test_benchmark_rejects_non_callables():
    with pytest.raises(TypeError):
        benchmark([], clock=FakeClock(constant(1.0)))
    with pytest.raises(TypeError):
        benchmark([1, 2], clock=FakeClock(constant(1.0)))


def test_perf_counter_clock_synchronises_at_start_and_stop():
    syncs = []
    c = PerfCounterClock(synchronize=lambda: syncs.append(1))
    c.start()
    assert len(syncs) == 1
    elapsed = c.stop()
    assert len(syncs) == 2 and elapsed >= 0.0
    with pytest.raises(RuntimeError):
        c.stop()


def test_interleave_visits_cases_in_alternating_rounds():
    order = []
    cases = [
        Case([lambda: order.append("a")]),
        Case([lambda: order.append("b")], flush=lambda: order.append("f")),
    ]
    clock = FakeClock(constant(0.01))
    ts = interleave(cases, clock=clock, rounds=4, budget_s=0.04, warmup_s=0.0)
    assert [t.n for t in ts] == [4, 4] and all(t.rounds == 4 == t.rounds_kept for t in ts)
    assert ts[0].flush == "interleaved" and ts[1].flush == "interleaved+flush"
    timed = [x for x in order if x != "f"][4:]  # after two untimed calls and two estimates
    assert timed == ["a", "b", "b", "a", "a", "b", "b", "a"]  # reversed every other round
    assert ts[0].clock == "fake" and ts[0].estimate_s == 0.01


def test_interleave_drops_busy_rounds_and_adds_clean_ones():
    shares = iter([0.6, 0.0] * 10)
    extra = []
    [t] = interleave(
        [Case([lambda: None, lambda: None])],
        clock=FakeClock(constant(1.0)),
        rounds=5,
        budget_s=5,
        warmup_s=0,
        judge_round=lambda run: (run(), next(shares))[1],
        more_rounds=lambda s: extra.append(s) or True,
    )
    # busy, clean, busy, clean, busy: 2 clean of 5, so a sixth (clean) round runs; the two clean
    # samples of this 1 s call agree, so the sixth round needs no call of it
    assert (t.rounds, t.rounds_kept, t.n, len(extra)) == (6, 3, 2, 1)
    assert t.flush == "interleaved+rotate:2"


def test_interleave_keeps_everything_when_too_few_clean_samples_and_stops_when_refused():
    [t] = interleave(
        [Case([lambda: None])],
        clock=FakeClock(constant(1.0)),
        rounds=3,
        budget_s=3,
        warmup_s=0,
        judge_round=lambda run: (run(), 0.9)[1],
        more_rounds=lambda s: False,
    )
    assert (t.rounds, t.rounds_kept, t.n) == (3, 3, 3)
    assert Timing.from_dict(t.to_dict()) == t
