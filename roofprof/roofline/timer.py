"""Timing one probe call: how many repetitions make a call long enough, and its benchmark.

A :class:`ProbeTimer` holds the device's clock and telemetry sampler for one roofline
measurement: :meth:`~ProbeTimer.calibrate` finds the repetitions per call from the marginal
cost of a repetition, :meth:`~ProbeTimer.time` benchmarks a call under the plan's warm-up and
repeat counts and notes (once) why telemetry is missing or partial.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from roofprof.devices.base import ProbeRun
from roofprof.roofline.plan import RooflinePlan
from roofprof.timing import Timing, benchmark

__all__ = ["ProbeTimer"]


class ProbeTimer:
    """Calibrates and times probe calls with ``clock`` and ``sampler`` (a device's), under
    ``plan``'s warm-up and minimum repeats; telemetry notes go to ``warnings`` (appended).
    """

    def __init__(self, clock: Any, sampler: Any, plan: RooflinePlan, warnings: list[str]):
        self.clock, self.sampler, self.plan, self.warnings = clock, sampler, plan, warnings
        self.telemetry_reason: str | None = None

    def time(
        self,
        fn: Callable[[], Any],
        *,
        budget_s: float,
        flush: Callable[[], Any] | None = None,
        min_repeats: int | None = None,
        estimate_runs: int = 2,
    ) -> tuple[Timing, dict[str, Any]]:
        """Benchmark ``fn`` within ``budget_s`` seconds (``flush`` before each timed call)
        while sampling telemetry; returns the timing and the telemetry summary (a dict)."""
        with self.sampler as s:
            timing = benchmark(
                fn,
                clock=self.clock,
                budget_s=budget_s,
                warmup_s=self.plan.warmup_s,
                flush=flush,
                min_repeats=min_repeats or self.plan.min_repeats,
                max_repeats=10_000,
                estimate_runs=estimate_runs,
                few_for_long=True,
            )
        summary = s.summary()
        if summary.reason and self.telemetry_reason is None:
            self.telemetry_reason = summary.reason
            self.warnings.append(
                f"telemetry {summary.reason}"
                if not summary.available
                else f"telemetry ({summary.source}): {summary.reason}"
            )
        return timing, summary.to_dict()

    def calibrate(self, run: ProbeRun, target_s: float) -> int:
        """Repetitions per call so that the work of one call lasts about ``target_s``.

        Uses the marginal cost of a repetition, ``(t(2r) - t(r)) / r`` (fastest of two tries
        each), so that a fixed per-call cost (thread wake-up, a preempted thread on a busy
        machine) is not mistaken for work.
        """
        reps, cap = 1, 10_000_000
        for _ in range(8):
            t1 = min(self.once(run, reps), self.once(run, reps))
            if t1 <= 0:
                return reps  # no timing available (e.g. simulator clocks)
            t2 = min(self.once(run, 2 * reps), self.once(run, 2 * reps))
            marginal = (t2 - t1) / reps
            if marginal <= 0 or marginal * reps < 0.05 * t1:
                reps = min(cap, reps * 8)  # dominated by fixed costs: grow and measure again
                continue
            need = max(1, int(math.ceil(target_s / marginal)))
            if need <= 2 * reps:
                return max(1, min(need, cap))
            reps = min(cap, need)
            if reps == cap:
                break
        return max(1, min(reps, cap))

    def recalibrate(self, run: ProbeRun, target_s: float, previous: tuple[int, int] | None) -> int:
        """:meth:`calibrate`, starting from the previous working set's repetitions.

        Repetitions scale as 1 / working set; one call at that guess, rescaled to
        ``target_s`` (rounded up: a call lasts at least the target), is enough when it lands
        within 4× of the target (a cache boundary changes the per-byte cost by less);
        otherwise the full calibration runs.
        """
        if previous is not None:
            reps, ws = previous
            guess = max(1, round(reps * ws / max(run.working_set_bytes, 1)))
            t = self.once(run, guess)
            if target_s / 4 <= t <= 4 * target_s:
                return max(1, math.ceil(guess * target_s / t))  # at least the target
        return self.calibrate(run, target_s)

    def once(self, run: ProbeRun, reps: int) -> float:
        """Seconds of one call of ``run`` at ``reps`` repetitions (the device's clock)."""
        self.clock.start()
        run.run(reps)
        return self.clock.stop()
