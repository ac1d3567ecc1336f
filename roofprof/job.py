"""``roofprof run``: the main job, end to end, on the machine at hand.

doctor → roofline (quick probes) → profile (prefill and decode, every op, every
implementation) → predictions (``spec``, ``empirical``, ``measured`` with and without
launch overhead; a decode batch sweep and a context sweep) → validation (a real model
forward pass on the same device, each estimator's residual) → a self-contained HTML
report (``<out>/index.html``) with the JSON and CSV behind it.

A frozen :class:`RunPlan` says what to run (the scenario, the device, the measurement and
validation settings, the sweeps, the steps); :func:`run` carries it out, setting the device
up once and building each workload once, and returns a :class:`RunResult` of typed step
records. ``roofprof.run(...)`` and ``roofprof run`` build the plan from loose arguments
(:meth:`RunPlan.of`): the model defaults to what the device can hold and finish in
minutes, as the device declares it (``DeviceInfo.default_model``/``default_dtype``):
Llama 3.2 1B in fp32 on a CPU, Llama 3.1 8B in bf16 on a GPU (scaled by layer count if
it does not fit).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings as _warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofprof.cache import RooflineChoice
from roofprof.errors import ConfigError
from roofprof.profiling.profiler import ProfileSettings
from roofprof.validation.model_run import ValidationSettings

if TYPE_CHECKING:
    from roofprof.devices.base import Device
    from roofprof.prediction.rollup import PhasePrediction, Prediction
    from roofprof.profiling.records import ProfileResult
    from roofprof.roofline import Roofline
    from roofprof.roofline.probes import RooflineResult
    from roofprof.validation.records import ValidationResult
    from roofprof.workload import Scenario

__all__ = [
    "STEPS",
    "PredictionStep",
    "RooflineStep",
    "RunPlan",
    "RunResult",
    "run",
]

Progress = Callable[[str, int, int], None]
Step = Callable[[str], None]

STEPS = ("doctor", "roofline", "profile", "predictions", "validation", "report")
#: Steps a plan may leave out; the others are what the report is made of.
OPTIONAL_STEPS = ("doctor", "validation")
#: The real run's protocol: a 16-token warm-up prefill and no untimed decode steps after it,
#: then every decode step after a prefill is timed (measured, the first full prefill after a
#: short warm-up and the first decode step after a prefill are no slower: BENCHMARKS.md).
RUN_VALIDATION = ValidationSettings(warmup_steps=0, prefill_repeats=3, warmup_tokens=16)


@dataclass(frozen=True)
class RunPlan:
    """What ``run`` does: the validated scenario, where, how it measures, which steps.

    Attributes:
        scenario: the validated point (decode at the validated context; its prompt is the
            prefill); :meth:`of` builds it from loose arguments.
        device: a Device, or ``"auto" | "cpu" | "cuda:N"`` (set up once by :func:`run`).
        out: the output folder (``index.html``, ``report.json``, CSVs, per-step JSON).
        profile: how ops are measured; its ``roofline`` is the roofline step's choice.
        validation: how the real model runs (its ``threads`` are the profile's).
        batches, contexts: the decode sweeps (``contexts`` empty: 1×, 4× and 32× the
            prompt).
        steps: the steps to run, in :data:`STEPS` order (only :data:`OPTIONAL_STEPS` may
            be left out).
        notes: said among the run's warnings (a quantized checkpoint run with dense
            kernels: :func:`~roofprof.workload.dense_run`).

    Raises:
        ConfigError: an unknown step, or a required one left out.

    >>> from roofprof.workload import Scenario
    >>> s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=128, dtype="fp32")
    >>> RunPlan(s, steps=("roofline", "profile", "predictions", "report")).steps[0]
    'roofline'
    """

    scenario: Scenario
    device: Device | str = "auto"
    out: Path = Path("roofprof-report")
    profile: ProfileSettings = field(default_factory=lambda: ProfileSettings(budget_s=0.15))
    validation: ValidationSettings = RUN_VALIDATION
    batches: tuple[int, ...] = (1, 8, 64, 256)
    contexts: tuple[int, ...] = ()
    steps: tuple[str, ...] = STEPS
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in STEPS]
        if unknown:
            raise ConfigError(f"unknown step {unknown[0]!r}; valid choices: {', '.join(STEPS)}")
        missing = [s for s in STEPS if s not in self.steps and s not in OPTIONAL_STEPS]
        if missing:
            raise ConfigError(
                f"a run needs the {missing[0]} step; only {', '.join(OPTIONAL_STEPS)} "
                "may be left out"
            )
        object.__setattr__(self, "steps", tuple(s for s in STEPS if s in self.steps))
        object.__setattr__(self, "out", Path(self.out))

    @property
    def sweep_contexts(self) -> tuple[int, ...]:
        """The decode context sweep: ``contexts``, or 1×, 4× and 32× the prompt."""
        p = self.scenario.prompt_tokens
        return self.contexts or tuple(sorted({p, 4 * p, 32 * p}))

    def settings(self) -> dict[str, Any]:
        """The plan as the report's ``settings`` (JSON)."""
        s, prof, val = self.scenario, self.profile, self.validation
        return {
            "batch": s.batch,
            "prompt_tokens": s.prompt_tokens,
            "batches": list(self.batches),
            "contexts": list(self.sweep_contexts),
            "quick": prof.roofline.quick,
            "budget_s": prof.budget_s,
            "decode_steps": val.decode_steps,
            "attention": s.counting.attention,
            "counting": s.counting.describe(),
            "backend": val.backend,
            "steps": list(self.steps),
        }

    @classmethod
    def of(
        cls,
        model: str = "auto",
        *,
        device: Device | str = "auto",
        dtype: str | None = None,
        out: str | os.PathLike = "roofprof-report",
        batch: int = 1,
        prompt_tokens: int = 128,
        batches: Sequence[int] = (1, 8, 64, 256),
        contexts: Sequence[int] | None = None,
        quick: bool = True,
        roofline: Any = None,
        reuse_roofline_s: float = 3600.0,
        threads: int | None = None,
        budget_s: float = 0.15,
        decode_steps: int = 8,
        validate: bool = True,
        backend: str = "auto",
        attention: str = "fused",
        impls: Sequence[str] | None = None,
    ) -> RunPlan:
        """A plan from loose arguments (what ``roofprof run`` takes); sets the device up.

        Args:
            model: id or config path, or ``auto`` (the device's declared default model).
            device: ``auto | cpu | cuda:N`` or a Device.
            dtype: default ``fp32`` on a CPU, ``bf16`` on a GPU (the real model runs in it).
            batch, prompt_tokens: the validated prefill/decode shape.
            batches, contexts: decode sweeps (contexts default to 1×, 4×, 32× the prompt).
            quick: quick roofline probes; ``roofline`` uses a roofline.json instead.
            reuse_roofline_s: reuse this setup's cached quick roofline when younger than
                this (seconds; its age is stated in the report); 0 always measures afresh.
            threads: torch/numba threads for profile and validation alike.
            budget_s: timed seconds per op and implementation.
            decode_steps: timed decode steps of the real run.
            validate: run the real model (needs torch).

        Raises:
            RoofprofError: unknown model/device/dtype/step, bad sizes.
        """
        from roofprof.devices import as_device
        from roofprof.devices.cpu import single_openmp_runtime
        from roofprof.validation.model_run import validation_context
        from roofprof.workload import Counting, Scenario, dense_run

        single_openmp_runtime()  # before reading the device starts numba's threads
        dev = as_device(device)
        info = dev.info
        if model == "auto":
            model, dtype = info.default_model, dtype or info.default_dtype
        validation = dataclasses.replace(
            RUN_VALIDATION, decode_steps=decode_steps, backend=backend, threads=threads
        )
        # the validated decode context: the prompt and the timed steps after it
        context = validation_context(
            prompt_tokens, validation.warmup_steps, decode_steps, validation.prefill_repeats
        )
        dtype = dtype or info.default_dtype
        model, note = dense_run(model, dtype)
        scenario = Scenario.of(
            model,
            "decode",
            batch=batch,
            prompt_tokens=prompt_tokens,
            context_tokens=context,
            dtype=dtype,
            convention=Counting().with_attention(attention),
            stored_weights=False,  # the real run has random weights at the dtype
        )
        choice = RooflineChoice(
            roofline if roofline is not None else "auto",
            quick=quick,
            max_age_s=reuse_roofline_s if quick else 0.0,
        )
        return cls(
            scenario,
            dev,
            Path(out),
            ProfileSettings(
                impls=tuple(impls) if impls else None,
                budget_s=budget_s,
                threads=threads,
                roofline=choice,
            ),
            validation,
            tuple(batches),
            tuple(contexts or ()),
            STEPS if validate else tuple(s for s in STEPS if s != "validation"),
            (note,) if note else (),
        )


@dataclass(frozen=True)
class RooflineStep:
    """The roofline step: the measured (or given) roofline, its source and the datasheet's."""

    measured: Roofline | None
    source: str
    result: RooflineResult | None = None
    datasheet: Roofline | None = None


@dataclass(frozen=True)
class PredictionStep:
    """The predictions step: each estimator at the validated point, and the decode sweeps."""

    predictions: dict[str, Prediction]  # by estimator label
    unavailable: dict[str, str]  # estimator label -> why not
    batch_sweep: dict[str, list[PhasePrediction]]  # by estimator label
    context_sweep: dict[str, list[PhasePrediction]]


@dataclass(frozen=True)
class RunResult:
    """Everything :func:`run` produced (also written to ``plan.out``), step by step."""

    plan: RunPlan
    device: dict[str, Any]
    threads: int | None
    numba_threading_layer: str
    doctor: tuple[dict[str, Any], ...] = ()
    roofline_step: RooflineStep = RooflineStep(None, "not run")
    profiles: dict[str, ProfileResult] = field(default_factory=dict)  # by phase
    prediction_step: PredictionStep = PredictionStep({}, {}, {}, {})
    validation: ValidationResult | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.plan.out

    @property
    def model(self) -> str:
        return self.plan.scenario.model.id

    @property
    def dtype(self) -> str:
        return self.plan.scenario.dtype

    @property
    def roofline(self) -> Roofline | None:
        """The measured (or given) roofline."""
        return self.roofline_step.measured

    @property
    def roofline_result(self) -> RooflineResult | None:
        return self.roofline_step.result

    @property
    def spec_roofline(self) -> Roofline | None:
        return self.roofline_step.datasheet

    @property
    def predictions(self) -> dict[str, Prediction]:
        return self.prediction_step.predictions

    @property
    def unavailable(self) -> dict[str, str]:
        return self.prediction_step.unavailable

    @property
    def batch_sweep(self) -> dict[str, list[PhasePrediction]]:
        return self.prediction_step.batch_sweep

    @property
    def context_sweep(self) -> dict[str, list[PhasePrediction]]:
        return self.prediction_step.context_sweep

    @property
    def settings(self) -> dict[str, Any]:
        """The plan and what the run settled (threads, roofline source) as JSON."""
        return {
            **self.plan.settings(),
            "threads": self.threads,
            "device": self.device.get("label"),
            "numba_threading_layer": self.numba_threading_layer,
            "roofline_source": self.roofline_step.source,
        }

    @property
    def elapsed_s(self) -> float:
        return sum(self.step_seconds.values())


def _doctor_rows() -> tuple[dict[str, Any], ...]:
    """:func:`roofprof.doctor.doctor_report` with ``run``'s own rows (``for_run=True``);
    a doctor that fails is one row, never the end of the run."""
    try:
        from roofprof.doctor import doctor_report

        return tuple(doctor_report(for_run=True))
    except Exception as exc:  # noqa: BLE001 - the doctor must never stop the run
        return ({"component": "doctor", "ok": False, "detail": f"doctor unavailable: {exc}"},)


class _Clock:
    """Seconds per step, and the ``step(name)`` callback at each step's start."""

    def __init__(self, step: Step | None):
        self.step, self.seconds, self._t0 = step, {}, 0.0

    def begin(self, name: str) -> None:
        self._t0 = time.perf_counter()
        if self.step:
            self.step(name)

    def end(self, name: str) -> None:
        self.seconds[name] = time.perf_counter() - self._t0


def run(plan: RunPlan, *, progress: Progress | None = None, step: Step | None = None) -> RunResult:
    """Carry out ``plan`` and write the report; see the module docstring.

    ``progress(label, done, total)`` reports within a step, ``step(name)`` at each step.
    ``roofprof.run(...)`` takes loose arguments (:meth:`RunPlan.of`).

    Raises:
        RoofprofError: unwritable ``out``, no such device, a model that cannot fit.

    Example::

        result = run(RunPlan.of("llama-3.2-1b", device="cpu", prompt_tokens=64))
        result.validation.comparison()
    """
    from roofprof import models
    from roofprof.cache import choose_roofline, spec_roofline
    from roofprof.devices import as_device
    from roofprof.devices.cpu import single_openmp_runtime
    from roofprof.devices.cpu import threads as cpu_threads
    from roofprof.prediction.rollup import phase_sweep, predict
    from roofprof.profiling.measured import estimators_for
    from roofprof.profiling.profiler import Profiler
    from roofprof.results import check_writable_dir

    openmp = single_openmp_runtime()  # before the roofline probes start numba's threads
    folder = check_writable_dir(plan.out)
    dev = as_device(plan.device)  # the device is set up once, here
    scenario = plan.scenario
    context = scenario.context_tokens
    clock = _Clock(step)
    warnings: list[str] = list(plan.notes)
    for note in plan.notes:
        _warnings.warn(note, stacklevel=2)
    files: dict[str, str] = {}
    with cpu_threads(plan.profile.threads) as threads:  # the same for profile and validation
        base = RunResult(plan, dev.info.to_dict(), threads, openmp)

        # 1. doctor
        doctor: tuple[dict[str, Any], ...] = ()
        if "doctor" in plan.steps:
            clock.begin("doctor")
            doctor = _doctor_rows()
            clock.end("doctor")

        # 2. roofline: the plan's choice, under the one freshness rule of every job
        clock.begin("roofline")
        chosen = choose_roofline(plan.profile.roofline, dev, progress=progress)
        if chosen.result is not None:
            chosen.result.write(folder / "roofline.json")
            files["roofline"] = "roofline.json"
            if not chosen.source.startswith("cached"):
                warnings.extend(f"roofline: {w}" for w in chosen.result.warnings)
        if chosen.roofline is None:
            warnings.append(f"no measured roofline: {chosen.source}")
        roof = RooflineStep(chosen.roofline, chosen.source, chosen.result, spec_roofline(dev))
        clock.end("roofline")

        # 3. profile: each workload built once, here, and reused by the predictions
        clock.begin("profile")
        given = roof.measured if roof.measured is not None else "none"
        profiler = Profiler(
            dev,
            dataclasses.replace(plan.profile, roofline=RooflineChoice(given), threads=threads),
            model=scenario.model,
            progress=progress,
        )
        passes = {
            "prefill": scenario.replace(phase="prefill", context_tokens=scenario.prompt_tokens),
            "decode": scenario,
        }
        profiles: dict[str, ProfileResult] = {}
        for phase, pass_scenario in passes.items():
            profiles[phase] = prof = profiler.profile(models.ops(pass_scenario))
            prof.write(folder / f"profile-{phase}.json")
            files[f"profile-{phase}"] = f"profile-{phase}.json"
        warnings.extend(w for w in dict.fromkeys(profiler.warnings) if w not in warnings)
        clock.end("profile")

        # 4. predictions
        clock.begin("predictions")
        estimators, unavailable = estimators_for(dev, profiler, roofline_source=roof.source)
        if "measured" in estimators and not dev.info.asynchronous:
            # a CPU runs the kernels on the calling thread: the real model's Python between
            # them is time too, counted as in the validation (one class, one measurement)
            estimators["measured"] = _with_framework(plan, estimators["measured"])
        contexts = plan.sweep_contexts
        batch_sweep: dict[str, list[PhasePrediction]] = {}
        context_sweep: dict[str, list[PhasePrediction]] = {}
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            predictions = {label: predict(scenario, est) for label, est in estimators.items()}
            sweep_estimators = {
                k: v for k, v in estimators.items() if k in ("spec", "empirical", "measured")
            }
            # the sweeps' new decode shapes, measured together before the roll-ups ask; beyond
            # the validated point they are predictions, so a third of the budget each (still
            # one sample per interleaved round at least) and two samples of a call of 100 ms
            # or more (the batch-256 lm_head takes a second a call)
            points = [(b, context) for b in plan.batches] + [(scenario.batch, c) for c in contexts]
            profiler.prefetch(
                [
                    op
                    for b, c in points
                    for op in models.ops(scenario.replace(batch=b, context_tokens=c)).ops
                ],
                "decode sweeps",
                budget_s=plan.profile.budget_s / 3,
                long_samples=2,
            )
            n = len(sweep_estimators) * len(points)
            for i, (label, est) in enumerate(sweep_estimators.items()):
                if progress:
                    progress(f"decode sweeps ({label})", i * len(points), n)
                batch_sweep[label] = phase_sweep(
                    scenario, est, batches=plan.batches, contexts=(context,)
                )
                context_sweep[label] = phase_sweep(
                    scenario, est, batches=(scenario.batch,), contexts=contexts
                )
        measured = estimators.get("measured")
        if measured is not None:
            warnings.extend(w for w in measured.warnings if w not in warnings)
        predicted = PredictionStep(predictions, unavailable, batch_sweep, context_sweep)
        clock.end("predictions")

        # 5. validation
        validation = None
        if "validation" in plan.steps:
            clock.begin("validation")
            profiler.release_buffers()  # the real model first-touches its own weights
            validation = _validation(plan, dev, threads, estimators, warnings, progress)
            clock.end("validation")

        # 6. report
        clock.begin("report")
        from roofprof.report import write_run_report

        result = dataclasses.replace(
            base,
            doctor=doctor,
            roofline_step=roof,
            profiles=profiles,
            prediction_step=predicted,
            validation=validation,
            step_seconds={**clock.seconds, "report": 0.0},
            warnings=tuple(warnings),
            files=files,
        )
        write_run_report(result)
        clock.end("report")
        result = dataclasses.replace(result, step_seconds=dict(clock.seconds))
        write_run_report(result, html=False)  # final JSON with the report step's time
        return result


def _with_framework(plan: RunPlan, measured: Any) -> Any:
    """``measured`` counting the framework overhead of the class the validation step runs
    (``--backend``; ``auto``: transformers' when installed), measured afresh when the
    profile is (``run``'s default) and kept for the validation."""
    from roofprof.validation.framework_overhead import count_framework_overhead

    return count_framework_overhead(
        measured,
        plan.scenario.model,
        plan.validation.backend,
        attention=plan.scenario.counting.attention,
        use_cache=plan.profile.use_cache,
    )


def _validation(
    plan: RunPlan,
    dev: Device,
    threads: int | None,
    estimators: dict[str, Any],
    warnings: list[str],
    progress: Progress | None,
) -> ValidationResult | None:
    """The real run of ``plan``'s scenario with each estimator's prediction of exactly what
    ran (the scaled model, if scaled); a run that cannot happen is a warning, not the end."""
    from roofprof.validation.model_run import predict_validated, validate

    try:
        val = validate(
            plan.scenario,
            dev,
            dataclasses.replace(plan.validation, threads=threads),
            progress=progress,
        )
    except Exception as exc:  # noqa: BLE001 - ConfigError, DeviceUnavailableError (no torch)...
        warnings.append(f"validation skipped: {exc}")
        return None
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        val = predict_validated(val, estimators)
    # scaling, a busy machine, the framework overhead, the host's drift
    warnings.extend(f"validation: {w}" for w in val.warnings)
    return val
