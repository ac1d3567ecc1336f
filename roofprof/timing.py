"""Timing: clocks, raw samples and their statistics, repeat counts sized by a time budget.

A :class:`Clock` times one call: ``start()`` then ``stop()`` returns the elapsed seconds,
both synchronising the device first (so queued work is inside the interval).
:class:`PerfCounterClock` is the host implementation (``time.perf_counter``); the CUDA
device brings a CUDA-event clock with the same two methods.

:func:`benchmark` runs a callable the way ``triton.testing.do_bench`` does: a few calls to
estimate its duration, warm-up calls filling ``warmup_s``, then as many timed calls as fit
``budget_s`` (bounded by ``min_repeats``/``max_repeats``), with an optional cache flush
(outside the timed interval) or a rotation among several input sets before each timed
call. The result is a :class:`Timing` that keeps every raw sample and derives min, median,
IQR and CV; a CV above 5 % marks it ``noisy``. :func:`interleave` times several calls
together in rounds that visit each in turn, so a slow spell of the machine touches one
round of many calls instead of every sample of one.

>>> t = Timing(samples_s=(1.0, 1.1, 0.9, 1.0))
>>> t.min_s, t.median_s, round(t.cv, 3), t.noisy
(0.9, 1.0, 0.082, True)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "LONG_CALL_AGREE",
    "LONG_CALL_S",
    "NOISY_CV",
    "Case",
    "Clock",
    "PerfCounterClock",
    "ThreadCpuClock",
    "Timing",
    "benchmark",
    "interleave",
    "repeat_counts",
]

#: A coefficient of variation above this marks a timing as noisy.
NOISY_CV = 0.05
#: A call at least this long (seconds) gets three interleaved samples instead of one per round:
#: its spread is already low (CV 1–6 % measured for 0.17–0.93 s GEMMs) and each sample is costly.
LONG_CALL_S = 0.1
#: Two clean samples of a long call that agree within this fraction are enough (a third
#: would move the median by at most half of it).
LONG_CALL_AGREE = 0.02


def _agree(samples: Sequence[float]) -> bool:
    """Two or more samples within :data:`LONG_CALL_AGREE` of each other (relative to the
    fastest)."""
    return len(samples) >= 2 and max(samples) - min(samples) <= LONG_CALL_AGREE * min(samples)


@runtime_checkable
class Clock(Protocol):
    """Times one interval on a device.

    ``start()`` synchronises the device, then marks the start; ``stop()`` synchronises,
    marks the end and returns the elapsed time in seconds (a float; ``<= 0`` means "no
    timing available", e.g. CUDA events under the simulator). ``name`` says which clock.
    """

    name: str

    def start(self) -> None: ...

    def stop(self) -> float: ...


class PerfCounterClock:
    """Host wall clock (``time.perf_counter``), synchronising the device first.

    Args:
        synchronize: called before reading the clock at start and stop (the device's
            ``synchronize``; ``None`` for synchronous CPU code).

    >>> c = PerfCounterClock()
    >>> c.start(); elapsed = c.stop()
    >>> elapsed >= 0.0
    True
    """

    name = "perf_counter"
    resolution_s = time.get_clock_info("perf_counter").resolution

    def __init__(self, synchronize: Callable[[], Any] | None = None):
        self._sync = synchronize
        self._t0: float | None = None

    def start(self) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._sync is not None:
            self._sync()
        t1 = time.perf_counter()
        if self._t0 is None:
            raise RuntimeError("PerfCounterClock.stop() called before start()")
        elapsed, self._t0 = t1 - self._t0, None
        return elapsed


class ThreadCpuClock:
    """CPU time of the calling thread (``time.thread_time``), for work that runs on it alone.

    For a call that computes on the calling thread only (torch with one intra-op thread runs
    its kernels inline), this is the time the call needed the core, without the time other
    processes held it: on the 2-core VM under a load average of 7.4, decode attention over a
    16,014-token fp32 cache took 15.8 ms wall and 2.0 ms of its thread's CPU time (medians of
    40 calls; 0.97 and 0.82 ms at best). It cannot see work on other threads (a
    multi-threaded call reads too short): use it with one thread only.

    >>> c = ThreadCpuClock()
    >>> c.start(); elapsed = c.stop()
    >>> elapsed >= 0.0
    True
    """

    name = "thread_time"

    def __init__(self) -> None:
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = time.thread_time()

    def stop(self) -> float:
        t1 = time.thread_time()
        if self._t0 is None:
            raise RuntimeError("ThreadCpuClock.stop() called before start()")
        elapsed, self._t0 = t1 - self._t0, None
        return elapsed


@dataclass(frozen=True)
class Timing:
    """Raw per-call times of one benchmark and the statistics derived from them.

    Attributes:
        samples_s: every timed call, in seconds, in the order run.
        flush: how caches were treated between timed calls: ``"none"`` (warm), ``"flush"``
            (a flush callable ran before each call), ``"rotate:N"`` (N input sets used in
            turn) or ``"flush+rotate:N"``.
        warmup_runs: untimed calls after the estimate.
        estimate_s: the per-call estimate that sized the repeats.
        clock: name of the clock used.
        rounds, rounds_kept: for :func:`interleave`, the rounds run and the rounds whose
            samples were kept (0 and 0 otherwise).
    """

    samples_s: tuple[float, ...]
    flush: str = "none"
    warmup_runs: int = 0
    estimate_s: float = 0.0
    clock: str = "perf_counter"
    rounds: int = 0
    rounds_kept: int = 0

    def __post_init__(self) -> None:
        if not self.samples_s:
            raise ValueError("a Timing needs at least one sample")

    @property
    def n(self) -> int:
        """Number of timed calls."""
        return len(self.samples_s)

    @property
    def min_s(self) -> float:
        """Fastest call (seconds): the least disturbed run, used for peak ceilings."""
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def median_s(self) -> float:
        """Median call time (seconds)."""
        return float(statistics.median(self.samples_s))

    @property
    def mean_s(self) -> float:
        return float(statistics.fmean(self.samples_s))

    @property
    def quartiles_s(self) -> tuple[float, float]:
        """First and third quartiles (linear interpolation, as numpy's default)."""
        if self.n < 2:
            return (self.samples_s[0], self.samples_s[0])
        q = statistics.quantiles(self.samples_s, n=4, method="inclusive")
        return (float(q[0]), float(q[2]))

    @property
    def iqr_s(self) -> float:
        """Interquartile range (seconds)."""
        q1, q3 = self.quartiles_s
        return q3 - q1

    @property
    def stdev_s(self) -> float:
        """Sample standard deviation (seconds); 0 for a single sample."""
        return float(statistics.stdev(self.samples_s)) if self.n > 1 else 0.0

    @property
    def cv(self) -> float:
        """Coefficient of variation, stdev / mean (0 for a single sample)."""
        mean = self.mean_s
        return self.stdev_s / mean if mean > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """True when the CV exceeds :data:`NOISY_CV` (5 %)."""
        return self.cv > NOISY_CV

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        """Statistics (and, by default, the raw samples) as a JSON-ready dict."""
        d: dict[str, Any] = {
            "n": self.n,
            "min_s": self.min_s,
            "median_s": self.median_s,
            "mean_s": self.mean_s,
            "iqr_s": self.iqr_s,
            "cv": self.cv,
            "noisy": self.noisy,
            "flush": self.flush,
            "warmup_runs": self.warmup_runs,
            "estimate_s": self.estimate_s,
            "clock": self.clock,
        }
        if self.rounds:
            d.update(rounds=self.rounds, rounds_kept=self.rounds_kept)
        if samples:
            d["samples_s"] = list(self.samples_s)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        return cls(
            samples_s=tuple(d["samples_s"]),
            flush=d.get("flush", "none"),
            warmup_runs=int(d.get("warmup_runs", 0)),
            estimate_s=float(d.get("estimate_s", 0.0)),
            clock=d.get("clock", "perf_counter"),
            rounds=int(d.get("rounds", 0)),
            rounds_kept=int(d.get("rounds_kept", 0)),
        )


def repeat_counts(
    estimate_s: float, *, budget_s: float, warmup_s: float, min_repeats: int, max_repeats: int
) -> tuple[int, int]:
    """``(warm-up calls, timed calls)`` for a call estimated at ``estimate_s`` seconds.

    Like ``do_bench``: warm-up fills ``warmup_s`` (0 when one call already exceeds it: the
    estimate calls warmed up), timed calls fill ``budget_s``, clamped to
    ``[min_repeats, max_repeats]``. A non-positive estimate (no timing available) gives
    ``max_repeats``.

    >>> repeat_counts(0.01, budget_s=0.1, warmup_s=0.02, min_repeats=3, max_repeats=100)
    (2, 10)
    >>> repeat_counts(1.0, budget_s=0.1, warmup_s=0.02, min_repeats=3, max_repeats=100)
    (0, 3)
    """
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {min_repeats}, {max_repeats}")
    if not (estimate_s > 0 and math.isfinite(estimate_s)):
        return 0, max_repeats
    warmup = int(warmup_s / estimate_s * (1 + 1e-9))  # (1 + 1e-9): 0.15 / 0.05 is 3, not 2.999...
    repeats = int(budget_s / estimate_s * (1 + 1e-9))
    return max(0, min(warmup, max_repeats)), max(min_repeats, min(repeats, max_repeats))


def benchmark(
    fn: Callable[[], Any] | Sequence[Callable[[], Any]],
    *,
    clock: Clock | None = None,
    budget_s: float = 0.1,
    warmup_s: float = 0.025,
    flush: Callable[[], Any] | None = None,
    min_repeats: int = 3,
    max_repeats: int = 1000,
    estimate_runs: int = 2,
    few_for_long: bool = False,
) -> Timing:
    """Time ``fn`` with repeats sized by a time budget; return every sample.

    Args:
        fn: the call to time, or a sequence of equivalent calls on different input sets,
            used in turn (rotation: each timed call finds its inputs out of cache).
        clock: a :class:`Clock` (default: :class:`PerfCounterClock` without sync).
        budget_s: target total time of the timed calls (seconds).
        warmup_s: target time of untimed warm-up calls after the estimate.
        flush: called before every estimate and timed call, outside the timed interval
            (e.g. a device's cache flush).
        min_repeats, max_repeats: bounds on the number of timed calls.
        estimate_runs: timed calls used to estimate the duration (not kept as samples).
        few_for_long: a call estimated at :data:`LONG_CALL_S` or more gets at most three
            timed samples, two when they agree within :data:`LONG_CALL_AGREE` (its spread
            is already small next to its length; the profile's interleaved rounds follow
            the same rule).

    Returns:
        A :class:`Timing` recording the flush mode, warm-up count and estimate.

    >>> t = benchmark(lambda: sum(range(100)), budget_s=0.01, warmup_s=0.0)
    >>> t.n >= 3 and t.flush == "none"
    True
    """
    calls = list(fn) if isinstance(fn, Sequence) else [fn]
    if not calls or not all(callable(c) for c in calls):
        raise TypeError("benchmark() needs a callable or a non-empty sequence of callables")
    clock = clock or PerfCounterClock()
    mode = "none"
    if len(calls) > 1:
        mode = f"rotate:{len(calls)}"
    if flush is not None:
        mode = "flush" if mode == "none" else f"flush+{mode}"

    turn = 0

    def timed_call() -> float:
        nonlocal turn
        call = calls[turn % len(calls)]
        turn += 1
        if flush is not None:
            flush()
        clock.start()
        call()
        return clock.stop()

    estimates = [timed_call() for _ in range(max(1, estimate_runs))]
    estimate = float(statistics.median(estimates))
    if few_for_long and estimate >= LONG_CALL_S:
        min_repeats = min(min_repeats, 3)
    n_warmup, n_repeat = repeat_counts(
        estimate,
        budget_s=budget_s,
        warmup_s=warmup_s,
        min_repeats=min_repeats,
        max_repeats=max_repeats,
    )
    for _ in range(n_warmup):
        calls[turn % len(calls)]()
        turn += 1
    long = few_for_long and estimate >= LONG_CALL_S
    taken: list[float] = []
    for _ in range(n_repeat):
        taken.append(timed_call())
        if long and len(taken) == 2 and _agree(taken):
            break  # two samples of a long call that agree are enough
    samples = tuple(taken)
    return Timing(
        samples_s=samples,
        flush=mode,
        warmup_runs=n_warmup,
        estimate_s=estimate,
        clock=getattr(clock, "name", type(clock).__name__),
    )


@dataclass
class Case:
    """One call to time in :func:`interleave`.

    Attributes:
        calls: equivalent calls on different input sets, used in turn (one is fine).
        flush: called before every timed call, outside the timed interval (or None).
    """

    calls: Sequence[Callable[[], Any]]
    flush: Callable[[], Any] | None = None
    warm: bool = False  # already called once (by its correctness check): no untimed first call


@dataclass
class _CaseState:
    """What :func:`interleave` tracks per case while it runs."""

    case: Case
    turn: int = 0
    estimate_s: float = 0.0
    warmup: int = 0
    per_round: int = 1
    enough: int = 0  # stop timing once this many samples of clean rounds are in (0: never)
    rounds: list[list[float]] = field(default_factory=list)

    def satisfied(self, clean: list[float]) -> bool:
        """True once ``clean`` (this case's samples from clean rounds) is enough: ``enough``
        of them, or two that agree within :data:`LONG_CALL_AGREE` (never, when ``enough`` is 0)."""
        return bool(self.enough) and (len(clean) >= self.enough or _agree(clean))

    def call(self) -> None:
        calls = self.case.calls
        calls[self.turn % len(calls)]()
        self.turn += 1

    def timed(self, clock: Clock) -> float:
        calls = self.case.calls
        call = calls[self.turn % len(calls)]
        self.turn += 1
        if self.case.flush is not None:
            self.case.flush()
        clock.start()
        call()
        return clock.stop()


def interleave(
    cases: Sequence[Case],
    *,
    clock: Clock | None = None,
    rounds: int = 5,
    budget_s: float = 0.1,
    warmup_s: float = 0.025,
    judge_round: Callable[[Callable[[], None]], float | None] | None = None,
    busy_above: float = 0.05,
    min_clean_rounds: int = 3,
    max_rounds: int | None = None,
    more_rounds: Callable[[float], bool] | None = None,
    max_repeats: int = 1000,
    on_case: Callable[[int, int], None] | None = None,
    long_samples: int = 3,
) -> list[Timing]:
    """Time several cases in interleaved rounds; one :class:`Timing` per case, in order.

    Each case is called once untimed, timed once (the estimate), warmed up for
    ``warmup_s`` and given ``budget_s`` of timed calls (at least ``rounds``, at most
    ``max_repeats``), spread evenly over ``rounds`` rounds that visit every case in turn
    (reversed every other round). A case whose estimate (always a warm call) took
    :data:`LONG_CALL_S` or more keeps it as its first sample and stops at ``long_samples``
    clean samples (default three), or at two that agree within :data:`LONG_CALL_AGREE`.

    Args:
        judge_round: runs one round (the callable it is given) and returns how disturbed
            the machine was meanwhile (e.g. the share of the CPUs other processes used),
            or None when it cannot tell. Rounds judged above ``busy_above`` are busy:
            while fewer than ``min_clean_rounds`` are clean after ``rounds`` rounds, more
            rounds run (up to ``max_rounds``, default ``2 × rounds``) as long as
            ``more_rounds(seconds the last round took)`` agrees (default: always). Busy
            rounds are dropped from a case's samples when at least 3 samples remain.
        on_case: ``on_case(round, position)`` before each case is timed (progress).

    Returns:
        Timings with ``flush`` ``"interleaved[+rotate:N][+flush]"``, ``rounds`` and
        ``rounds_kept``.

    >>> class Tick:  # a fake clock: every call takes 10 ms, except in the second round
    ...     name, n = "fake", 0
    ...     def start(self): pass
    ...     def stop(self):  # call 1 is the estimate, then one call per round
    ...         self.n += 1
    ...         return 0.03 if self.n == 3 else 0.01
    >>> shares = iter([0.0, 0.9, 0.0, 0.0, 0.0])
    >>> [t] = interleave([Case([lambda: None])], clock=Tick(), rounds=5, budget_s=0.05, warmup_s=0,
    ...                  judge_round=lambda run: (run(), next(shares))[1])
    >>> t.samples_s, t.rounds, t.rounds_kept
    ((0.01, 0.01, 0.01, 0.01), 5, 4)
    """
    if not cases or rounds < 1:
        raise ValueError("interleave() needs at least one case and one round")
    clock = clock or PerfCounterClock()
    states = [_CaseState(c) for c in cases]
    for st in states:  # warm up and estimate, one case at a time
        if not st.case.warm:
            st.case.calls[0]()
        st.estimate_s = st.timed(clock)
        st.warmup, n = repeat_counts(
            st.estimate_s,
            budget_s=budget_s,
            warmup_s=warmup_s,
            min_repeats=rounds,
            max_repeats=max_repeats,
        )
        for _ in range(st.warmup):
            st.call()
        st.per_round = max(1, math.ceil(n / rounds))
        if st.estimate_s >= LONG_CALL_S and rounds > 3:
            st.enough = max(
                2, long_samples
            )  # a call of 100 ms or more: few samples, or two that agree
    limit = max_rounds if max_rounds is not None else 2 * rounds
    shares: list[float | None] = []
    r = 0
    while True:
        order = states if r % 2 == 0 else states[::-1]

        def one_round(order: list[_CaseState] = order, r: int = r) -> None:
            for j, st in enumerate(order):
                if on_case is not None:
                    on_case(r, j)
                done = bool(st.enough) and st.satisfied(
                    [
                        x
                        for s, sh in zip(st.rounds, shares, strict=False)
                        if sh is None or sh <= busy_above
                        for x in s
                    ]
                )
                samples = [] if done else [st.timed(clock) for _ in range(st.per_round)]
                if st.enough and r == 0:
                    # a long call's estimate ran warm (after its check): it counts as a sample,
                    # kept or dropped with the first round
                    samples.insert(0, st.estimate_s)
                st.rounds.append(samples)

        t_round = time.perf_counter()
        share = judge_round(one_round) if judge_round is not None else one_round()
        shares.append(share)
        r += 1
        clean = sum(1 for sh in shares if sh is None or sh <= busy_above)
        if r >= rounds and (clean >= min_clean_rounds or r >= limit):
            break
        if (
            r >= rounds
            and more_rounds is not None
            and not more_rounds(time.perf_counter() - t_round)
        ):
            break
    out = []
    for st in states:
        clean_rounds = [
            s for s, sh in zip(st.rounds, shares, strict=True) if sh is None or sh <= busy_above
        ]
        clean = [x for s in clean_rounds for x in s]
        kept = clean_rounds if len(clean) >= 3 or st.satisfied(clean) else st.rounds
        calls = st.case.calls
        mode = (
            "interleaved"
            + (f"+rotate:{len(calls)}" if len(calls) > 1 else "")
            + ("+flush" if st.case.flush is not None else "")
        )
        out.append(
            Timing(
                samples_s=tuple(x for s in kept for x in s),
                flush=mode,
                warmup_runs=st.warmup,
                estimate_s=st.estimate_s,
                clock=getattr(clock, "name", type(clock).__name__),
                rounds=len(st.rounds),
                rounds_kept=len(kept),
            )
        )
    return out
