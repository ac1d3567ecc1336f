"""Profile the ops of a model pass on this machine and place them on its roofline.

Every op of a :class:`~roofprof.workload.Scenario` (identical shapes measured once) is
checked, then timed, by each available implementation (:mod:`roofprof.profiling.engine`;
a whole pass in interleaved rounds, busy rounds dropped on a shared host), and placed on
the measured roofline (:func:`roofprof.roofline.place`): achieved FLOP/s and bytes/s,
intensity, attainable roof, percent of roof, bound. Implementations: the device's own
GEMMs plus :class:`roofprof.profiling.torch_ops.TorchOps` (``torch``, or ``torch-eager`` next to a
device's own ``torch``), which covers every op with the calls eager PyTorch makes. The
roll-up uses the first of ``prefer`` that passed its check (default ``reference``: that
torch implementation, what the validated model runs), else the fastest. An op whose
kernel fails its check is excluded with a warning; one no implementation covers is
counted from the empirical roofline, with a warning.

The torch/numba thread count (``threads``) is set while measuring and recorded
(``validate`` uses the same). Measurements are cached (:mod:`roofprof.cache`): a cached
one that was contended is measured again, and one that stays contended is named in the
warnings with how to refresh it.

Python API: :class:`Profiler` with :class:`ProfileSettings` (the estimators over it:
:mod:`roofprof.profiling.measured`); ``roofprof.profile`` and ``roofprof.measure`` take loose
arguments.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings as _warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof import models
from roofprof.cache import (
    MeasurementCache,
    RooflineChoice,
    choose_roofline,
    device_fingerprint,
)
from roofprof.devices.cpu import single_openmp_runtime
from roofprof.devices.cpu import threads as cpu_threads
from roofprof.devices.pool import malloc_trimmer, stays_warm
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.prediction.rollup import MeasuredEstimator, OpTime, RooflineEstimator
from roofprof.profiling.engine import (
    Measurement,
    MeasureSettings,
    RetryBudget,
    check_then_time,
    check_then_time_group,
    single_thread_kept,
    touched_by_contention,
)
from roofprof.profiling.records import OpResult, ProfileResult
from roofprof.specs import ModelSpec
from roofprof.timing import ThreadCpuClock, Timing
from roofprof.workload import Op, Scenario, Workload

if TYPE_CHECKING:
    from roofprof.devices.base import Device, OpImpl, PreparedOp

__all__ = [
    "DEFAULT_PREFER",
    "MeasureSettings",
    "OpResult",
    "ProfileResult",
    "ProfileSettings",
    "Profiler",
]

Progress = Callable[[str, int, int], None]
#: The roll-up prefers the implementation of :mod:`roofprof.profiling.torch_ops` (what the validated
#: model runs), whatever name it carries on the device ("torch", or "torch-eager" next to a device's
#: own "torch" GEMM).
DEFAULT_PREFER = ("reference",)
#: How to refresh measurements taken on a busy machine (said in every such warning).
REMEASURE_HINT = (
    "rerun on a quiet machine with `roofprof profile --remeasure` (or `predict --remeasure`)"
)


# --------------------------------------------------------------------------- the profiler


@dataclass(frozen=True)
class ProfileSettings:
    """How a :class:`Profiler` measures: implementations, timing budget, threads, roofline.

    Attributes:
        impls: implementation names to run (None: every one the device has).
        prefer: implementations preferred for the roll-up, in order, then the fastest;
            ``reference`` stands for the torch implementation of every op
            (:mod:`roofprof.profiling.torch_ops`).
        budget_s, warmup_s, max_repeats: timing budget per measurement (seconds, calls).
        threads: torch/numba intra-op threads while measuring (None: leave as is).
        roofline: the roofline ops are placed on, with the freshness rule of a cached one
            (:class:`~roofprof.cache.RooflineChoice`).
        use_cache: read cached measurements (a contended one is measured again);
            ``store``: write them (False: never reused, e.g. a TP run's contended times).
        seed: seed of the random inputs.
        measure: the other tuning knobs (:class:`~roofprof.profiling.engine.MeasureSettings`).

    >>> ProfileSettings(budget_s=0.05).roofline.roofline
    'auto'
    """

    impls: tuple[str, ...] | None = None
    prefer: tuple[str, ...] = DEFAULT_PREFER
    budget_s: float = 0.2
    warmup_s: float = 0.05
    max_repeats: int = 100
    threads: int | None = None
    roofline: RooflineChoice = field(default_factory=RooflineChoice)
    use_cache: bool = False
    store: bool = True
    seed: int = 0
    measure: MeasureSettings = field(default_factory=MeasureSettings)


class Profiler:
    """Measures ops on one device with every implementation; remembers shapes already measured.

    Args:
        device: the :class:`~roofprof.devices.base.Device` (or ``"auto" | "cpu" | "cuda:N"``).
        settings: implementations, budget, threads, roofline (:class:`ProfileSettings`).
        model: the model whose ops are measured (the torch implementations need its head
            counts); :meth:`profile` takes it from the scenario when not given here.
        progress: ``progress(label, done, total)`` callback.

    Raises:
        RoofprofError: no such device, unknown implementation, unreadable roofline, bad threads.

    Example::

        prof = Profiler(select("cpu"), ProfileSettings(budget_s=0.05))
        result = prof.profile(Scenario.of("llama-3.2-1b", "decode", dtype="fp32"))
    """

    def __init__(
        self,
        device: Device | str = "auto",
        settings: ProfileSettings | None = None,
        *,
        model: ModelSpec | None = None,
        progress: Progress | None = None,
    ):
        from roofprof.devices import as_device

        settings = settings or ProfileSettings()
        self.profile_settings = settings
        self.settings = settings.measure
        self.openmp = single_openmp_runtime()
        self.device = as_device(device)
        self._judge_contention = self.device.info.shared_host and self.settings.judge_contention
        self._threads_arg = settings.threads
        with cpu_threads(settings.threads) as count:
            self.threads = count
        self.budget_s, self.warmup_s = settings.budget_s, settings.warmup_s
        self.max_repeats = settings.max_repeats
        self.progress = progress
        self.rng = np.random.default_rng(settings.seed)
        chosen = choose_roofline(settings.roofline, self.device, progress=progress)
        self.roofline, self.roofline_source = chosen.roofline, chosen.source
        self.model: ModelSpec | None = None
        self._model_key: tuple = ()
        self.impls: list[OpImpl] = []
        self.prefer: tuple[str, ...] = ()
        self.reference_impl: str | None = None
        self.cache = self._new_cache()
        self._measured: dict[tuple, Measurement] = {}
        self._last_impl: str | None = None
        self._launch_s: float | None = None
        self._retry = RetryBudget(self.settings.retry_budget_s)
        self.warnings: list[str] = []
        if model is not None:
            self._bind(model)

    def _new_cache(self, key: tuple = ()) -> MeasurementCache:
        s, fingerprint = self.profile_settings, device_fingerprint(self.device, self.threads)
        return MeasurementCache(fingerprint, enabled=s.use_cache, model_key=key, store=s.store)

    def _bind(self, model: ModelSpec) -> None:
        """Measure ``model``'s ops from now on: its torch implementation, its cache key."""
        key = (model.family, model.num_heads, model.num_kv_heads, model.head_dim)
        if self.model is not None and key == self._model_key:
            self.model = model
            return
        from roofprof.models import require_measurable

        require_measurable(model, "profile")
        first = self.model is None
        self.model, self._model_key = model, key
        self._measured.clear()  # other head layouts: another model's shapes are not reused
        self.impls = self._implementations(self.profile_settings.impls)
        self.prefer = tuple(
            n
            for name in self.profile_settings.prefer
            for n in ((self.reference_impl,) if name == "reference" else (name,))
            if n
        )
        self.cache = self._new_cache(key)
        if (
            first
            and self.openmp == "already omp"
            and any(i.name in ("torch", "torch-eager") for i in self.impls)
        ):
            self.warnings.append(
                "numba's OpenMP threads were started before profiling (omp layer): two OpenMP "
                "runtimes share the cores and torch timings may be inflated; run profile in a "
                "fresh process (roofprof run does) or set NUMBA_THREADING_LAYER=workqueue"
            )

    # -- setup ---------------------------------------------------------------------------
    def _implementations(self, names: Sequence[str] | None) -> list[OpImpl]:
        impls = list(self.device.implementations())
        try:
            from roofprof.profiling.torch_ops import TorchOps

            torch_ops = TorchOps.for_device(self.model, self.device)
            # a GPU times µs ops as N calls per event pair (the timer's 0.5 µs resolution)
            batching = getattr(self.device, "small_op_batching", None)
            torch_impl: Any = batching(torch_ops) if batching is not None else torch_ops
            if any(i.name == "torch" for i in impls):
                torch_impl.name = "torch-eager"
            impls.append(torch_impl)
            self.reference_impl = torch_impl.name
        except ImportError:
            pass
        if names:
            known = {i.name for i in impls}
            unknown = [n for n in names if n not in known]
            if unknown:
                raise UnknownNameError("implementation", unknown[0], known)
            impls = [i for i in impls if i.name in names]
        return impls

    @property
    def launch_s(self) -> float:
        """Per-kernel launch overhead (measured once, lazily)."""
        if self._launch_s is None:
            self._launch_s = self.device.launch_overhead_s()
        return self._launch_s

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        with cpu_threads(self._threads_arg):
            yield

    # -- measuring -----------------------------------------------------------------------
    def ordered_impls(self) -> list[OpImpl]:
        """Implementations in measuring order: the preferred ones first, then the rest."""
        rank = {name: i for i, name in enumerate(self.prefer)}
        return sorted(self.impls, key=lambda impl: rank.get(impl.name, len(rank)))

    def measure_shape(
        self, op: Op, impls: Sequence[OpImpl] | None = None
    ) -> tuple[Measurement, ...]:
        """``op``'s shape with every implementation (or ``impls``), each measured once per shape."""
        with self._threads():
            return tuple(
                self._get(impl, op)
                for impl in (impls if impls is not None else self.ordered_impls())
            )

    def _get(self, impl: OpImpl, op: Op) -> Measurement:
        key = (op.shape_key, impl.name)
        if key not in self._measured:
            if self._last_impl not in (None, impl.name) and impl.supports(op) is None:
                # Another runtime's worker threads (numba/OpenMP, OpenBLAS) spin for a while after
                # their last parallel region and would steal the cores from this one: let them
                # sleep.
                time.sleep(self.settings.switch_idle_s)
                self._last_impl = None
            m = self._measure_impl(impl, op)
            if m.ok:
                self._last_impl = impl.name
            self._measured[key] = m
        return self._measured[key]

    def _cached(self, impl: OpImpl, op: Op) -> Measurement | None:
        """A cached measurement to reuse: none when reading is off or it was contended."""
        cached = self.cache.get(op, impl.name)
        return cached if cached is not None and not cached.contended else None

    def _flush_for(self, op: Op) -> Callable[[], Any] | None:
        """The device flush when ``op`` should stream its weights from DRAM (memory-bound).

        Weights that :func:`~roofprof.devices.pool.stays_warm` (a norm's γ) stay warm, as
        in a real pass; GEMM weights rotate over copies instead (the flush then only
        applies to a single copy larger than the caches).
        """
        if (
            self.roofline is None
            or not op.bytes
            or not op.weight_bytes
            or stays_warm(op.weight_bytes, self.device.info.last_level_cache_bytes or (32 << 20))
        ):
            return None
        try:
            return (
                self.device.flush
                if self.roofline.bound(op.intensity, op.dtype) == "memory"
                else None
            )
        except ConfigError:
            return None

    def _measure_impl(self, impl: OpImpl, op: Op) -> Measurement:
        """One op alone (on demand): check, then time with retries on a busy machine."""
        cached = self._cached(impl, op)
        if cached is not None:
            return cached
        info = self.device.info
        m = check_then_time(
            impl,
            op,
            self.rng,
            clock=self.device.clock(),
            flush=self._flush_for(op),
            budget_s=self.budget_s,
            warmup_s=self.warmup_s,
            max_repeats=self.max_repeats,
            sampler=lambda: self.device.sampler(interval_s=self.settings.sampler_interval_s),
            retries=self.settings.retries if self._judge_contention else 0,
            retry=self._retry,
            host_issue=self._host_issue_s if info.asynchronous else None,
            warn=self.warnings.append,
        )
        if m.ok:
            self.cache.put(op, m)
        return m

    def _measure_group(
        self,
        impl: OpImpl,
        ops: Sequence[Op],
        phase: str,
        *,
        done: int = 0,
        total: int = 0,
        budget_s: float | None = None,
        long_samples: int = 3,
    ) -> None:
        """Measure ``ops`` with one implementation in interleaved rounds.

        Every op is checked first; then all are timed together
        (:func:`roofprof.profiling.engine.check_then_time_group`: ``settings.rounds`` rounds
        visiting every op in turn). A slowdown of the machine lasting a second or two then
        touches one round of many ops instead of every sample of one, and the median shrugs
        it off. On a device sharing the host's cores, rounds during which other processes used
        the CPUs are dropped when enough samples remain, and replaced from the retry budget.
        """
        todo = [op for op in ops if (op.shape_key, impl.name) not in self._measured]
        if not todo:
            return
        switching = self._last_impl not in (None, impl.name)  # its threads sleep during the checks
        quiet_from = time.perf_counter() + self.settings.switch_idle_s if switching else None
        fresh = []
        for op in todo:
            cached = self._cached(impl, op)
            if cached is not None:
                self._measured[(op.shape_key, impl.name)] = cached
            else:
                fresh.append(op)
        info, rounds, n = self.device.info, self.settings.rounds, len(todo)

        def on_check(i: int, op: Op) -> None:
            if self.progress:
                self.progress(
                    f"{phase} {op.name} {op.m}×{op.n}×{op.k} [{impl.name}]: check", done + i, total
                )

        def on_case(r: int, j: int) -> None:
            if self.progress:
                self.progress(
                    f"{phase} timing round {r + 1}/{rounds} [{impl.name}]",
                    done + n + min(r, rounds - 1) * n // rounds + j * n // (rounds * len(fresh)),
                    total,
                )

        ms = check_then_time_group(
            impl,
            fresh,
            self.rng,
            clock=self.device.clock(),
            flush_for=self._flush_for,
            budget_s=self.budget_s if budget_s is None else budget_s,
            warmup_s=self.warmup_s if budget_s is None else min(self.warmup_s, budget_s / 3),
            max_repeats=self.max_repeats,
            rounds=rounds,
            sampler=lambda: self.device.sampler(interval_s=self.settings.sampler_interval_s),
            judge_rounds=self._judge_contention,
            more_rounds=lambda round_s: self._retry.spend(
                round_s, pause_s=self.settings.busy_pause_s
            ),
            host_issue=self._host_issue_s if info.asynchronous else None,
            warn=self.warnings.append,
            on_check=on_check,
            on_case=on_case,
            quiet_from=quiet_from,
            long_samples=long_samples,
        )
        ms = self._one_thread_where_contended(impl, fresh, ms, long_samples)
        for op, m in zip(fresh, ms, strict=True):
            if m.ok:
                self.cache.put(op, m, write=False)
                self._last_impl = impl.name
            self._measured[(op.shape_key, impl.name)] = m
        self.cache.save()

    def _one_thread_where_contended(
        self, impl: OpImpl, ops: Sequence[Op], ms: Sequence[Measurement], long_samples: int
    ) -> list[Measurement]:
        """On a CPU shared with other processes, the ops whose multi-thread timing was
        touched by contention timed again on one thread (torch: by that thread's CPU time,
        :class:`~roofprof.timing.ThreadCpuClock`); the faster kept (:func:`single_thread_kept`)."""
        again = [i for i, m in enumerate(ms) if m.ok and touched_by_contention(m)]
        cpu = self.device.info.torch_device == "cpu"
        if not (self._judge_contention and again and cpu) or (self.threads or 1) <= 1:
            return list(ms)
        inline = impl.name.startswith("torch")  # one torch thread computes on this one
        with cpu_threads(1):
            single = check_then_time_group(
                impl,
                [ops[i] for i in again],
                self.rng,
                clock=ThreadCpuClock() if inline else self.device.clock(),
                flush_for=self._flush_for,
                budget_s=self.budget_s / 2,
                warmup_s=self.warmup_s / 2,
                max_repeats=self.max_repeats,
                rounds=self.settings.rounds,
                warn=self.warnings.append,
                long_samples=long_samples,
            )
        out = list(ms)
        for i, m in zip(again, single, strict=True):
            out[i] = single_thread_kept(out[i], m, self.threads or 1)
        return out

    def prefetch(
        self,
        ops: Sequence[Op],
        label: str = "sweep",
        *,
        budget_s: float | None = None,
        long_samples: int = 3,
    ) -> None:
        """Measure every shape of ``ops`` not measured yet, as :meth:`op_time` will ask for them.

        One interleaved group per preferred implementation (as :meth:`profile` does)
        instead of one op at a time: the inputs of the shapes are drawn once and shared
        (the weights across batch sizes), each gets its samples spread over the rounds, and
        a busy machine costs dropped rounds rather than per-op retry pauses. ``budget_s``
        (default the profiler's) is the timed seconds per shape; ``long_samples`` the clean
        samples enough for a call of 100 ms or more.
        """
        shapes = list({op.shape_key: op for op in ops}.values())
        preferred = [
            i for i in self.ordered_impls() if i.name in self.prefer
        ] or self.ordered_impls()
        kw = dict(
            total=2 * len(shapes) * len(preferred), budget_s=budget_s, long_samples=long_samples
        )
        with self._threads():
            for i, impl in enumerate(preferred):
                self._measure_group(impl, shapes, label, done=2 * i * len(shapes), **kw)

    def release_buffers(self) -> None:
        """Drop the inputs shared between measurements (before a memory-hungry step)."""
        for owner in (self.device, *self.impls):
            release = getattr(owner, "release_buffers", None)
            if release is not None:
                release()
        gc.collect()
        trim = malloc_trimmer()
        if trim is not None:
            trim()  # hand the freed pages back to the OS before the next step first-touches its own

    def _host_issue_s(self, prepared: PreparedOp, timing: Timing) -> float:
        """Per-call wall time of back-to-back calls with one synchronisation at the end.

        On an asynchronous device this is ``max(device time, host issue time)`` of the op
        in steady state: what an eager framework gets when the host, not the GPU, is the
        bottleneck (small decode kernels).
        """
        calls = getattr(prepared, "calls", None) or [prepared.run]
        n = max(3, min(200, int(self.budget_s / max(timing.median_s, 1e-6))))
        self.device.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            calls[i % len(calls)]()
        self.device.synchronize()
        return (time.perf_counter() - t0) / n

    def choose(self, measurements: Sequence[Measurement]) -> Measurement | None:
        """The measurement the roll-up uses: first of ``prefer`` that passed, else the fastest."""
        good = [m for m in measurements if m.ok]
        for name in self.prefer:
            if name == "fastest":
                break
            for m in good:
                if m.impl == name:
                    return m
        return min(good, key=lambda m: m.seconds, default=None)

    def op_time(self, op: Op) -> tuple[OpTime | None, str]:
        """The roll-up time of ``op``, measuring on demand only what the choice needs.

        The preferred implementations are tried first; the others only when none of those
        passed (then the fastest of them). Returns ``(None, reasons)`` when nothing passed.
        """
        ordered = self.ordered_impls()
        preferred = [i for i in ordered if i.name in self.prefer]
        ms = self.measure_shape(op, preferred) if preferred else ()
        chosen = self.choose(ms)
        if chosen is None:
            ms = self.measure_shape(op, ordered)
            chosen = self.choose(ms)
        if chosen is None:
            reasons = (
                "; ".join(
                    f"{m.impl}: {m.status}"
                    + (f" ({m.note})" if m.status != "ok" and m.note else "")
                    for m in ms
                )
                or "no implementation"
            )
            return None, reasons
        return chosen.op_time(), ""

    def profile(self, workload: Workload | Scenario) -> ProfileResult:
        """Measure every op of ``workload`` (or of a scenario's pass) and place it on the
        roofline."""
        from roofprof.results import provenance

        if isinstance(workload, Scenario):
            workload = models.ops(workload)
        self._bind(workload.model)
        ops = workload.ops
        results = []
        before = len(self.warnings)
        # implementation by implementation (preferred first), each over every shape: one
        # runtime at a time owns the cores, with an idle gap between runtimes
        impls = self.ordered_impls()
        shapes = list({op.shape_key: op for op in ops}.values())
        total = len(impls) * len(shapes) * 2  # checks, then interleaved timing rounds
        with self._threads():
            for i, impl in enumerate(impls):
                self._measure_group(
                    impl, shapes, workload.phase, done=i * len(shapes) * 2, total=total
                )
        contended = []
        for op in ops:
            ms = self.measure_shape(op)
            chosen = self.choose(ms)
            if chosen is None:
                msg = (
                    f"{op.phase} {op.name}: no implementation measured it "
                    f"({'; '.join(f'{m.impl}: {m.status}' for m in ms) or 'none available'}); "
                    "the roll-up counts it from the empirical roofline"
                )
                self.warnings.append(msg)
                _warnings.warn(msg, stacklevel=2)
            elif chosen.contended:
                contended.append(op.name)
            results.append(OpResult(op, ms, chosen, self.roofline))
        if contended:
            self.warnings.append(
                f"{workload.phase}: {len(contended)} op(s) measured while other processes used the "
                f"CPUs in every round ({', '.join(contended)}): their times are likely inflated; "
                + REMEASURE_HINT
            )
        if self.progress:
            self.progress(f"{workload.phase} done", total, total)
        info = self.device.info
        return ProfileResult(
            workload,
            tuple(results),
            info.to_dict(),
            self.roofline,
            self.launch_s,
            self.threads,
            tuple(self.warnings[before:]),
            provenance(
                device=info.to_dict(),
                threads=self.threads,
                implementations=[i.name for i in self.impls],
                budget_s=self.budget_s,
                numba_threading_layer=self.openmp,
            ),
            self.roofline_source,
        )

    def estimator(
        self,
        model: ModelSpec | None = None,
        *,
        include_launch: bool = True,
        inputs: Mapping[str, Any] | None = None,
    ) -> MeasuredEstimator:
        """A ``measured`` estimator over this profiler (measures unseen shapes on demand).

        ``model``: the model whose ops it times (default: the one last profiled).

        Raises:
            ConfigError: no model given and none profiled yet.
        """
        if model is not None:
            self._bind(model)
        if self.model is None:
            raise ConfigError("a measured estimator needs a model: pass one or profile first")
        fallback = (
            RooflineEstimator(self.roofline, name="empirical", source=self.roofline_source)
            if self.roofline is not None
            else None
        )

        def classify(op: Op) -> str:
            if self.roofline is None or not op.bytes:
                return "measured"
            try:
                return self.roofline.bound(op.intensity, op.dtype)
            except ConfigError:
                return "measured"

        d = {
            "device": self.device.info.to_dict(),
            "threads": self.threads,
            "roofline_source": self.roofline_source,
            "implementations": [i.name for i in self.impls],
            "prefer": list(self.prefer),
            "cache": str(self.cache.path) if self.cache.enabled else None,
            **(inputs or {}),
        }
        return MeasuredEstimator(
            launch_s=self.launch_s,
            include_launch=include_launch,
            fallback=fallback,
            measure=self.op_time,
            classify=classify,
            inputs=d,
            measure_many=lambda ops: self.prefetch(ops, "on-demand shapes"),
        )
