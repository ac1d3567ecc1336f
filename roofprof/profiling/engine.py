"""One measurement of one op by one implementation: prepare → check → time → release.

:func:`check_then_time` is the one loop every caller uses (the profiler, and through it
``predict --estimator measured``): the implementation must support the op, its prepared
buffers must pass the correctness check (a wrong kernel is never timed), then it is timed
with :func:`roofprof.timing.benchmark` (rotating over the prepared input sets, flushing
before each call when asked), telemetry sampled around it, and its buffers are released
whatever happens. On a device that shares the host's cores, a timing during which other
processes used the CPUs (:class:`roofprof.telemetry.Contention`) is repeated up to
``retries`` times. The result is a :class:`Measurement`, never an exception: ``status``
says ``ok``, ``failed`` (wrong result), ``unsupported`` or ``error`` (it raised).

:func:`prepare_checked` and :func:`calls_and_flush` are its first half, for callers that
time several checked ops together (:func:`roofprof.timing.interleave`).

>>> import numpy as np
>>> from roofprof.devices.cpu import CpuDevice
>>> from roofprof.models import ops
>>> from roofprof.workload import Scenario
>>> dev = CpuDevice()
>>> w = ops(Scenario.of("llama-3.2-1b", "decode", dtype="fp32"))
>>> op = next(o for o in w.ops if o.fn == "linear")
>>> numpy_impl = next(i for i in dev.implementations() if i.name == "numpy")
>>> m = check_then_time(numpy_impl, op, np.random.default_rng(0), clock=dev.clock(), budget_s=0.01)
>>> m.status, m.check.ok, m.seconds > 0
('ok', True, True)
"""

from __future__ import annotations

import time
import warnings as _warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import per_call_timing
from roofprof.errors import ConfigError
from roofprof.telemetry import CONTENDED_SHARE, Contention, NullSampler
from roofprof.timing import Case, Timing, benchmark, interleave

if TYPE_CHECKING:
    from roofprof.devices.base import CheckResult, OpImpl, PreparedOp
    from roofprof.prediction.rollup import OpTime
    from roofprof.telemetry import Sampler, TelemetrySummary
    from roofprof.timing import Clock
    from roofprof.workload import Op

__all__ = [
    "STATUSES",
    "MeasureSettings",
    "Measurement",
    "RetryBudget",
    "calls_and_flush",
    "check_then_time",
    "check_then_time_group",
    "prepare_checked",
    "shares_telemetry",
    "single_thread_kept",
    "touched_by_contention",
    "telemetry_dict",
]

#: ``ok`` checked and timed; ``failed`` wrong result (excluded); ``unsupported`` not covered;
#: ``error`` raised.
STATUSES = ("ok", "failed", "unsupported", "error")


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


@dataclass(frozen=True)
class Measurement:
    """One implementation of one op shape: its check, its timing, what it achieved.

    Attributes:
        impl: implementation name.
        status: one of :data:`STATUSES`.
        note: what the implementation does, or why it failed.
        timing: raw samples and statistics of one call (seconds); None unless timed.
        check: the correctness check; None unless it ran.
        kernels: device kernels one call launches (launch-overhead model).
        telemetry: clocks, power..., ``other_cpu_share`` (0..1) and ``contended``.
        host_s: back-to-back issue time per call on an asynchronous device (seconds), 0
            when not measured.
    """

    impl: str
    status: str
    note: str = ""
    timing: Timing | None = None
    check: CheckResult | None = None
    kernels: int = 1
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    host_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.timing is not None

    @property
    def seconds(self) -> float:
        """Median time of one call (NaN when not timed)."""
        return self.timing.median_s if self.timing is not None else float("nan")

    @property
    def contended(self) -> bool:
        """True when other processes used the CPUs during every try (its time is inflated)."""
        return bool(self.telemetry.get("contended"))

    @property
    def suspect(self) -> str:
        """Why this time should not be trusted as is ("" when it can): contended or noisy."""
        if not self.ok:
            return ""
        reasons = []
        if self.contended:
            share = self.telemetry.get("other_cpu_share")
            reasons.append(
                "contended"
                + (
                    f" (other processes used {share:.0%} of the CPUs)"
                    if isinstance(share, (int, float))
                    else ""
                )
            )
        if self.timing.noisy:
            reasons.append(f"noisy (CV {self.timing.cv:.0%})")
        return "; ".join(reasons)

    def op_time(self) -> OpTime:
        """The roll-up record of this measurement."""
        from roofprof.prediction.rollup import OpTime

        t = self.timing
        note = (t.flush if t.flush != "none" else "") + ("; noisy (CV > 5%)" if t.noisy else "")
        return OpTime(
            self.seconds,
            self.impl,
            self.kernels,
            t.iqr_s,
            note.strip("; "),
            self.host_s,
            contended=self.contended,
            cached=bool(self.telemetry.get("cached")),
            measured_at=str(self.telemetry.get("measured_at") or ""),
            other_cpu_share=_number(self.telemetry.get("other_cpu_share")),
            load_avg=_number(self.telemetry.get("load_avg")),
        )

    def to_dict(self, op: Op | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "impl": self.impl,
            "status": self.status,
            "note": self.note,
            "kernels": self.kernels,
            "host_s": self.host_s,
        }
        if self.timing is not None:
            t = self.timing
            d.update(
                {
                    "median_s": t.median_s,
                    "min_s": t.min_s,
                    "iqr_s": t.iqr_s,
                    "cv": t.cv,
                    "noisy": t.noisy,
                    "timing": t.to_dict(),
                }
            )
            if op is not None:
                d["flops_per_s"] = op.flops / t.median_s if t.median_s > 0 else None
                d["bytes_per_s"] = op.bytes / t.median_s if t.median_s > 0 else None
        if self.check is not None:
            d["check"] = self.check.to_dict()
        d["telemetry"] = dict(self.telemetry)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        from roofprof.devices.base import CheckResult

        timing = Timing.from_dict(d["timing"]) if d.get("timing") else None
        check = CheckResult(**d["check"]) if d.get("check") else None
        return cls(
            d["impl"],
            d["status"],
            d.get("note", ""),
            timing,
            check,
            int(d.get("kernels", 1)),
            d.get("telemetry", {}),
            float(d.get("host_s") or 0.0),
        )


@dataclass(frozen=True)
class MeasureSettings:
    """The profiler's tuning knobs beyond the timing budget.

    Attributes:
        rounds: timing rounds of a whole-pass profile (every op visited once per round).
        switch_idle_s: pause before switching runtimes (another runtime's worker threads
            spin for a while after their last parallel region and would steal the cores).
        retries: extra tries of a single contended measurement (devices sharing the host).
        retry_budget_s: seconds all re-measuring of contended ops may take together.
        busy_pause_s: pause before an extra round when too few rounds were clean.
        sampler_interval_s: telemetry sampling interval.
        judge_contention: on a shared host, re-measure what other processes' CPU use touched
            (retries, dropped busy rounds, one-thread re-timing); False where that contention
            is the point, e.g. the ranks of a tensor-parallel run profiled together.
    """

    rounds: int = 5
    switch_idle_s: float = 0.3
    retries: int = 2
    retry_budget_s: float = 60.0
    busy_pause_s: float = 0.5
    sampler_interval_s: float = 0.05
    judge_contention: bool = True


@dataclass
class RetryBudget:
    """Seconds that repeated timings on a busy machine may take in all (shared by many ops)."""

    seconds_left: float = 60.0
    pause_s: float = 1.0

    def spend(self, seconds: float, pause_s: float | None = None) -> bool:
        """Charge ``seconds`` plus a pause (slept now) if any budget is left; False when spent."""
        if self.seconds_left <= 0:
            return False
        pause = min(self.pause_s if pause_s is None else pause_s, self.seconds_left)
        self.seconds_left -= pause + seconds
        time.sleep(pause)  # let the other process's burst pass, then measure again
        return True


def telemetry_dict(summary: TelemetrySummary) -> dict[str, Any]:
    """A sampler's summary as a measurement's telemetry (with ``clock_mhz``)."""
    d = summary.to_dict()
    d["clock_mhz"] = summary.clock_mhz
    return d


def prepare_checked(
    impl: OpImpl, op: Op, rng: np.random.Generator, *, warn: Callable[[str], None] | None = None
) -> tuple[PreparedOp | None, Measurement | None]:
    """``(prepared, checked)`` for an op that passed its check, else ``(None, Measurement)``.

    ``checked`` is the ``ok`` Measurement of the check, not timed yet (note, check,
    kernels). A failed check or an exception is reported through ``warn`` (and the
    Measurement); the caller releases a returned ``prepared``.
    """
    reason = impl.supports(op)
    if reason:
        return None, Measurement(impl.name, "unsupported", reason)
    prepared = None
    try:
        prepared = impl.prepare(op, rng)
        check = prepared.check()
        if not check.ok:
            msg = (
                f"{op.phase} {op.name} ({op.m}×{op.n}×{op.k}) with {impl.name}: "
                "failed its correctness check "
                f"(relative error {check.max_rel_error:.2e} > {check.tolerance:.2e}); excluded"
            )
            if warn is not None:
                warn(msg)
            _warnings.warn(msg, stacklevel=3)
            kernels = int(getattr(prepared, "kernels", 1))
            prepared.release()
            return None, Measurement(impl.name, "failed", check.note, None, check, kernels)
        return prepared, Measurement(
            impl.name,
            "ok",
            getattr(prepared, "note", "") or check.note,
            None,
            check,
            int(getattr(prepared, "kernels", 1)),
        )
    except ConfigError as exc:
        result = Measurement(impl.name, "unsupported", str(exc))
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
        msg = f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__}: {exc}"
        if warn is not None:
            warn(msg)
        result = Measurement(impl.name, "error", msg)
    if prepared is not None:
        prepared.release()
    return None, result


def calls_and_flush(
    prepared: PreparedOp, flush: Callable[[], Any] | None
) -> tuple[list[Callable[[], Any]], Callable[[], Any] | None]:
    """The equivalent calls to rotate over, and what to run before each timed call.

    ``flush`` (the device's cache flush) is used only when the prepared op does not
    rotate over input copies; the op's own ``before_call`` (if any) runs as well. An op with
    ``batched_calls`` (N calls per timed call, ``calls_per_sample`` = N) is timed through them;
    :func:`~roofprof.devices.base.per_call_timing` then divides its samples by N.
    """
    calls = list(
        getattr(prepared, "batched_calls", None)
        or getattr(prepared, "calls", None)
        or [prepared.run]
    )
    before = getattr(prepared, "before_call", None)
    chosen = flush if len(calls) == 1 else None
    if before is not None:
        chosen = before if chosen is None else (lambda f=chosen, b=before: (b(), f()))
    return calls, chosen


def check_then_time(
    impl: OpImpl,
    op: Op,
    rng: np.random.Generator,
    *,
    clock: Clock,
    flush: Callable[[], Any] | None = None,
    budget_s: float = 0.2,
    warmup_s: float = 0.05,
    max_repeats: int = 100,
    sampler: Callable[[], Sampler] | None = None,
    retries: int = 0,
    retry: RetryBudget | None = None,
    host_issue: Callable[[PreparedOp, Timing], float] | None = None,
    warn: Callable[[str], None] | None = None,
) -> Measurement:
    """Prepare ``op`` with ``impl``, check it, time it, release it: one :class:`Measurement`.

    Args:
        impl, op, rng: the implementation, the op, the generator its inputs are drawn from.
        clock: the device clock (synchronises around each call).
        flush: the device's cache flush, run before each timed call when the op does not
            rotate over input copies (None: warm caches).
        budget_s, warmup_s, max_repeats: the timing budget (seconds) per try.
        sampler: makes the telemetry sampler run around each try (None: no telemetry).
        retries: extra tries when other processes used the CPUs (0 for a device that does
            not share the host's cores); the least contended try is kept.
        retry: the seconds all retries may take together (shared across ops).
        host_issue: measures the back-to-back issue time per call (asynchronous devices).
        warn: receives a line for a failed check or an exception.

    Returns:
        A Measurement (``ok``, ``failed``, ``unsupported`` or ``error``); never raises
        for a kernel's fault.
    """
    prepared, result = prepare_checked(impl, op, rng, warn=warn)
    if prepared is None:
        return result
    try:
        calls, flush_fn = calls_and_flush(prepared, flush)
        best = None
        attempts = 1 + max(0, retries)
        for attempt in range(attempts):
            watch = sampler() if sampler is not None else NullSampler("not sampled")
            meter = Contention()
            with watch, meter:
                timing = benchmark(
                    calls,
                    clock=clock,
                    budget_s=budget_s,
                    warmup_s=warmup_s,
                    flush=flush_fn,
                    max_repeats=max_repeats,
                    estimate_runs=1,
                )
            timing = per_call_timing(timing, prepared)  # batched small ops: N calls per interval
            if best is None or meter.share < best[2].share:
                best = (timing, watch, meter)
            if (
                meter.share <= CONTENDED_SHARE
                or attempt == attempts - 1
                or (retry is not None and not retry.spend(meter.wall_s))
            ):
                break
        timing, watch, meter = best
        telemetry = telemetry_dict(watch.summary())
        telemetry["other_cpu_share"] = meter.share if meter.available else None
        telemetry["attempts"] = attempt + 1
        if meter.available and meter.share > CONTENDED_SHARE:
            telemetry["contended"] = True
        host_s = host_issue(prepared, timing) if host_issue is not None else 0.0
        return Measurement(
            impl.name, "ok", result.note, timing, result.check, result.kernels, telemetry, host_s
        )
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
        msg = f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__}: {exc}"
        if warn is not None:
            warn(msg)
        return Measurement(impl.name, "error", msg)
    finally:
        prepared.release()


def check_then_time_group(
    impl: OpImpl,
    ops: Sequence[Op],
    rng: np.random.Generator,
    *,
    clock: Clock,
    flush_for: Callable[[Op], Callable[[], Any] | None] = lambda op: None,
    budget_s: float = 0.2,
    warmup_s: float = 0.05,
    max_repeats: int = 100,
    rounds: int = 5,
    sampler: Callable[[], Sampler] | None = None,
    judge_rounds: bool = False,
    more_rounds: Callable[[float], bool] | None = None,
    host_issue: Callable[[PreparedOp, Timing], float] | None = None,
    warn: Callable[[str], None] | None = None,
    on_check: Callable[[int, Op], None] | None = None,
    on_case: Callable[[int, int], None] | None = None,
    quiet_from: float | None = None,
    long_samples: int = 3,
) -> list[Measurement]:
    """:func:`check_then_time` for several ops of one implementation, timed together.

    Every op is prepared and checked first (``on_check(i, op)`` before each); those that
    passed are timed in interleaved rounds (:func:`roofprof.timing.interleave`), not
    before ``time.perf_counter()`` reaches ``quiet_from`` (another runtime's worker threads
    go idle meanwhile: the checks take part of that pause), and all are released.
    ``long_samples`` clean samples are enough for a call of 100 ms or more (``interleave``).
    With ``judge_rounds`` (a device sharing the host's cores), each round is judged by
    :class:`~roofprof.telemetry.Contention`: busy rounds are dropped and, while
    ``more_rounds`` agrees, replaced. Returns one Measurement per op, in order.
    """
    results: list[Measurement | None] = []
    staged: list[tuple[int, PreparedOp, Measurement, Case]] = []
    for i, op in enumerate(ops):
        if on_check is not None:
            on_check(i, op)
        prepared, result = prepare_checked(impl, op, rng, warn=warn)
        results.append(result if prepared is None else None)
        if prepared is not None:
            calls, flush = calls_and_flush(prepared, flush_for(op))
            staged.append((i, prepared, result, Case(calls, flush, warm=True)))
    if not staged:
        return results
    if quiet_from is not None:
        time.sleep(max(0.0, quiet_from - time.perf_counter()))
    shares: list[float | None] = []

    def judge(run: Callable[[], None]) -> float | None:
        meter = Contention()  # over the whole round: long enough to judge at tick resolution
        with meter:
            run()
        shares.append(meter.share if meter.available else None)
        return shares[-1]

    try:
        watch = sampler() if sampler is not None else NullSampler("not sampled")
        with watch:
            timings = interleave(
                [case for *_, case in staged],
                clock=clock,
                rounds=rounds,
                budget_s=budget_s,
                warmup_s=warmup_s,
                judge_round=judge if judge_rounds else None,
                busy_above=CONTENDED_SHARE,
                more_rounds=more_rounds,
                max_repeats=max_repeats,
                on_case=on_case,
                long_samples=long_samples,
            )
        base = telemetry_dict(watch.summary())
        for (i, prepared, checked, _), timing in zip(staged, timings, strict=True):
            timing = per_call_timing(timing, prepared)
            telemetry = {
                **base,
                "rounds": timing.rounds,
                "rounds_kept": timing.rounds_kept,
                **shares_telemetry(shares),
            }
            if any(s is not None for s in shares) and timing.rounds_kept < timing.rounds:
                telemetry["rounds_dropped_busy"] = timing.rounds - timing.rounds_kept
            host_s = host_issue(prepared, timing) if host_issue is not None else 0.0
            results[i] = Measurement(
                impl.name,
                "ok",
                checked.note,
                timing,
                checked.check,
                checked.kernels,
                telemetry,
                host_s,
            )
    except Exception as exc:  # noqa: BLE001 - a kernel that raises while timed is reported, never fatal
        for i, *_ in staged:
            if results[i] is None:
                op = ops[i]
                msg = (
                    f"{op.phase} {op.name} with {impl.name} raised {type(exc).__name__} "
                    f"while timed: {exc}"
                )
                if warn is not None:
                    warn(msg)
                results[i] = Measurement(impl.name, "error", msg)
    finally:
        for _, prepared, _, _ in staged:
            prepared.release()
    return results


def shares_telemetry(shares: Sequence[float | None]) -> dict[str, Any]:
    """Telemetry of interleaved rounds judged by :class:`Contention` (max share, contended)."""
    judged = [s for s in shares if s is not None]
    d: dict[str, Any] = {"other_cpu_share": max(judged) if judged else None}
    if judged and min(judged) > CONTENDED_SHARE:
        d["contended"] = True
    return d


def touched_by_contention(m: Measurement) -> bool:
    """True when other processes used the CPUs during some of ``m``'s timing: in every try
    (:attr:`Measurement.contended`) or in rounds that could not all be dropped (its largest
    round share above :data:`~roofprof.telemetry.CONTENDED_SHARE`, no round dropped).

    >>> touched_by_contention(Measurement("torch", "ok", telemetry={"other_cpu_share": 0.54}))
    True
    """
    share = m.telemetry.get("other_cpu_share")
    busy = isinstance(share, (int, float)) and share > CONTENDED_SHARE
    return m.contended or (busy and not m.telemetry.get("rounds_dropped_busy"))


def single_thread_kept(multi: Measurement, single: Measurement, threads: int) -> Measurement:
    """The faster of a contended ``threads``-thread timing and the same op's one-thread timing.

    Two OpenMP threads on two cores shared with a third runnable process wait a scheduler
    quantum at every parallel region's barrier: measured on the 2-core EPYC VM with another
    process holding one core, decode attention over a 16,014-token fp32 cache (8.2 MB of K/V)
    took 36-48 ms per call on 2 threads and 1.1-1.3 ms on one (back-to-back, the same run).
    One thread cannot use more of the hardware than two, so when the multi-thread time was
    touched by contention (:func:`touched_by_contention`) and the one-thread time is lower,
    the one-thread time is what this machine can do: it is kept, with ``multi``'s telemetry plus
    ``telemetry["threads"] = 1`` and ``threads_tried``, and stays marked contended
    (measured again next time, never reused from the cache). Otherwise ``multi`` is
    returned unchanged.

    >>> from roofprof.timing import Timing
    >>> slow = Measurement("torch", "ok", timing=Timing((0.04, 0.05, 0.04)),
    ...                    telemetry={"contended": True})
    >>> fast = Measurement("torch", "ok", timing=Timing((0.001, 0.001, 0.001)))
    >>> kept = single_thread_kept(slow, fast, 2)
    >>> kept.seconds, kept.telemetry["threads"], kept.contended
    (0.001, 1, True)
    """
    if not (multi.ok and touched_by_contention(multi) and single.ok):
        return multi
    if single.seconds >= multi.seconds:
        return multi
    clock = single.timing.clock if single.timing is not None else "?"
    note = (
        multi.note
        + ("; " if multi.note else "")
        + (
            f"timed on 1 thread ({clock}): {threads} threads were slowed by other processes "
            f"({multi.seconds * 1e3:.3g} ms a call)"
        )
    )
    # the multi-thread telemetry (its rounds, the other processes' share) says why
    telemetry = {**multi.telemetry, "threads": 1, "threads_tried": threads, "contended": True}
    return replace(single, note=note, telemetry=telemetry)
