"""``roofprof run``: the main job, end to end, on the machine at hand.

doctor → roofline (quick probes) → profile (prefill and decode, every op, every
implementation) → predictions (``spec``, ``empirical``, ``measured`` with and without
launch overhead; a decode batch sweep and a context sweep) → validation (a real model
forward pass on the same device, each estimator's residual) → a self-contained HTML
report (``<out>/index.html``) with the JSON and CSV behind it.

The model defaults to what the device can hold and finish in minutes, as the device
declares it (``DeviceInfo.default_model``/``default_dtype``): Llama 3.2 1B in fp32 on a
CPU, Llama 3.1 8B in bf16 on a GPU (scaled by layer count if it does not fit).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings as _warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.devices.base import Device, DeviceInfo
    from roofprof.probes import RooflineResult
    from roofprof.profiling import ProfileResult
    from roofprof.rollup import PhasePrediction, Prediction
    from roofprof.roofline import Roofline
    from roofprof.validation import ValidationResult

__all__ = ["STEPS", "RunResult", "default_model", "run"]

Progress = Callable[[str, int, int], None]
Step = Callable[[str], None]

STEPS = ("doctor", "roofline", "profile", "predictions", "validation", "report")


@dataclass
class RunResult:
    """Everything ``run`` produced (also written to ``out``)."""

    out: Path
    model: str
    dtype: str
    device: dict[str, Any]
    doctor: list[dict[str, Any]] = field(default_factory=list)
    roofline: Roofline | None = None  # measured
    roofline_result: RooflineResult | None = None
    spec_roofline: Roofline | None = None
    profiles: dict[str, ProfileResult] = field(default_factory=dict)  # by phase
    predictions: dict[str, Prediction] = field(default_factory=dict)  # by estimator label
    unavailable: dict[str, str] = field(default_factory=dict)  # estimator label -> why not
    batch_sweep: dict[str, list[PhasePrediction]] = field(
        default_factory=dict
    )  # by estimator label
    context_sweep: dict[str, list[PhasePrediction]] = field(default_factory=dict)
    validation: ValidationResult | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def elapsed_s(self) -> float:
        return sum(self.step_seconds.values())


def default_model(info: DeviceInfo) -> tuple[str, str]:
    """(model id, dtype) that the device can hold and run in minutes (as it declares).

    >>> from roofprof.devices.cpu import cpu_info
    >>> default_model(cpu_info())
    ('llama-3.2-1b', 'fp32')
    """
    return info.default_model, info.default_dtype


def _doctor_rows() -> list[dict[str, Any]]:
    """:func:`roofprof.doctor.doctor_report` with ``run``'s own rows (``for_run=True``);
    a doctor that fails is one row, never the end of the run."""
    try:
        from roofprof.doctor import doctor_report

        return doctor_report(for_run=True)
    except Exception as exc:  # noqa: BLE001 - the doctor must never stop the run
        return [{"component": "doctor", "ok": False, "detail": f"doctor unavailable: {exc}"}]


def run(
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
    progress: Progress | None = None,
    step: Step | None = None,
) -> RunResult:
    """Run the whole pipeline and write the report; see the module docstring.

    Args:
        model: id or config path, or ``auto`` (:func:`default_model` for the device).
        device: ``auto | cpu | cuda:N``.
        dtype: default ``fp32`` on a CPU, ``bf16`` on a GPU (the real model runs in it too).
        out: output folder (``index.html``, ``report.json``, CSVs, per-step JSON).
        batch, prompt_tokens: the validated prefill/decode shape.
        batches, contexts: decode sweeps (contexts default to a few multiples of the prompt).
        quick: quick roofline probes; ``roofline`` uses a roofline.json instead.
        reuse_roofline_s: reuse this setup's cached quick roofline when it is younger than
            this (seconds; its age is stated in the report); 0 always measures afresh.
        threads: torch/numba threads for profile and validation alike.
        budget_s: timed seconds per op and implementation.
        validate: run the real model (needs torch).
        progress: ``progress(label, done, total)`` within a step; ``step(name)`` at each step.

    Raises:
        RoofprofError: unwritable ``out``, unknown model/device, a model that cannot fit.
    """
    from roofprof import models
    from roofprof.cache import (
        cached_roofline,
        measure_roofline,
        resolve_roofline,
        roofline_cache_path,
        spec_roofline,
    )
    from roofprof.devices.cpu import single_openmp_runtime
    from roofprof.devices.cpu import threads as cpu_threads
    from roofprof.profiling import Profiler, estimators_for, select_device
    from roofprof.results import check_writable_dir
    from roofprof.rollup import phase_sweep, predict
    from roofprof.validation import validation_context
    from roofprof.workload import Counting, Scenario

    openmp = single_openmp_runtime()  # before the roofline probes start numba's threads
    folder = check_writable_dir(out)
    dev = select_device(device)
    info = dev.info
    if model == "auto":
        model, auto_dtype = default_model(info)
        dtype = dtype or auto_dtype
    dtype = dtype or info.default_dtype
    counting = Counting(attention=attention)
    # the validated decode context; the real run's protocol (below) is a 16-token warm-up
    # prefill and one warm-up decode step, then every decode step after a prefill is timed:
    # measured, the first full prefill after a short warm-up and the first decode step after
    # a prefill are no slower (BENCHMARKS.md)
    context = validation_context(prompt_tokens, 0, decode_steps, 3)
    # the validated scenario: prefill of the prompt, then decode at the validated context
    scenario = Scenario.of(
        model,
        "decode",
        batch=batch,
        prompt_tokens=prompt_tokens,
        context_tokens=context,
        dtype=dtype,
        convention=counting,
    )
    spec = scenario.model
    with cpu_threads(threads) as threads:  # the same threads for profile and validation
        result = RunResult(folder, spec.id, dtype, info.to_dict())
        result.settings = {
            "batch": batch,
            "prompt_tokens": prompt_tokens,
            "batches": list(batches),
            "contexts": list(contexts or []),
            "quick": quick,
            "threads": threads,
            "budget_s": budget_s,
            "decode_steps": decode_steps,
            "attention": attention,
            "counting": counting.describe(),
            "backend": backend,
            "device": info.label,
            "numba_threading_layer": openmp,
        }
        t_step = [time.perf_counter()]

        def begin(name: str) -> None:
            t_step[0] = time.perf_counter()
            if step:
                step(name)

        def end(name: str) -> None:
            result.step_seconds[name] = time.perf_counter() - t_step[0]

        # 1. doctor
        begin("doctor")
        result.doctor = _doctor_rows()
        end("doctor")

        # 2. roofline
        begin("roofline")
        cached = cached_roofline(dev, reuse_roofline_s) if roofline is None and quick else None
        if roofline is not None:
            measured, source = resolve_roofline(roofline, dev)
        elif cached is not None:
            rr, age_s = cached
            measured = rr.roofline
            source = (
                f"cached quick measurement, {age_s / 60:.0f} min old "
                f"({roofline_cache_path(dev)}; --fresh-roofline measures anew)"
            )
            result.roofline_result = rr
            rr.write(folder / "roofline.json")
            result.files["roofline"] = "roofline.json"
        else:
            measured, source, rr = measure_roofline(dev, quick=quick, progress=progress)
            result.roofline_result = rr
            if rr is not None and rr.complete and quick:
                with contextlib.suppress(OSError):
                    rr.write(roofline_cache_path(dev))  # the next run (or predict) reuses it
            if rr is not None:
                rr.write(folder / "roofline.json")
                result.files["roofline"] = "roofline.json"
                result.warnings.extend(f"roofline: {w}" for w in rr.warnings)
            if measured is None:
                result.warnings.append(f"no measured roofline: {source}")
        result.roofline = measured
        result.spec_roofline = spec_roofline(dev)
        result.settings["roofline_source"] = source
        end("roofline")

        # 3. profile
        begin("profile")
        profiler = Profiler(
            spec,
            dev,
            impls=impls,
            budget_s=budget_s,
            threads=threads,
            roofline=measured if measured is not None else "none",
            progress=progress,
        )
        for phase in ("prefill", "decode"):
            prof = profiler.profile(
                scenario.replace(
                    phase=phase, context_tokens=context if phase == "decode" else prompt_tokens
                )
            )
            result.profiles[phase] = prof
            prof.write(folder / f"profile-{phase}.json")
            result.files[f"profile-{phase}"] = f"profile-{phase}.json"
        result.warnings.extend(dict.fromkeys(profiler.warnings))
        end("profile")

        # 4. predictions
        begin("predictions")
        estimators, result.unavailable = estimators_for(dev, profiler, roofline_source=source)
        measured_est = estimators["measured"]
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            for label, est in estimators.items():
                result.predictions[label] = predict(scenario, est)
            contexts = list(
                contexts or sorted({prompt_tokens, 4 * prompt_tokens, 32 * prompt_tokens})
            )
            result.settings["contexts"] = contexts
            sweep_estimators = {
                k: v for k, v in estimators.items() if k in ("spec", "empirical", "measured")
            }
            # the sweeps' new decode shapes, measured together before the roll-ups ask; beyond
            # the validated point they are predictions, so a third of the budget each (still
            # one sample per interleaved round at least) and two samples of a call of 100 ms or
            # more (the batch-256 lm_head takes a second a call)
            sweep_points = [(b, context) for b in batches] + [(batch, c) for c in contexts]
            profiler.prefetch(
                [
                    op
                    for b, c in sweep_points
                    for op in models.ops(
                        scenario.replace(phase="decode", batch=b, context_tokens=c)
                    ).ops
                ],
                "decode sweeps",
                budget_s=budget_s / 3,
                long_samples=2,
            )
            n = len(sweep_estimators) * (len(batches) + len(contexts))
            i = 0
            for label, est in sweep_estimators.items():
                if progress:
                    progress(f"decode sweeps ({label})", i, n)
                result.batch_sweep[label] = phase_sweep(
                    scenario, est, batches=batches, contexts=(context,)
                )
                result.context_sweep[label] = phase_sweep(
                    scenario, est, batches=(batch,), contexts=contexts
                )
                i += len(batches) + len(contexts)
        result.warnings.extend(w for w in measured_est.warnings if w not in result.warnings)
        end("predictions")

        # 5. validation
        begin("validation")
        profiler.release_buffers()  # the real model first-touches its own weights
        if validate:
            from roofprof.validation import predict_for
            from roofprof.validation import validate as run_validation

            try:
                val = run_validation(
                    scenario,
                    device=dev,
                    decode_steps=decode_steps,
                    warmup_steps=0,
                    prefill_repeats=3,
                    warmup_tokens=16,
                    backend=backend,
                    threads=threads,
                    progress=progress,
                )
                result.warnings.extend(
                    f"validation: {w}" for w in val.warnings
                )  # scaling, a busy machine
                # each estimator predicts exactly what the real run did
                # (the scaled model, if scaled)
                with _warnings.catch_warnings():
                    _warnings.simplefilter("ignore")
                    result.validation = val.with_predictions(predict_for(val, estimators))
            except ConfigError as exc:
                result.warnings.append(f"validation skipped: {exc}")
            except Exception as exc:  # noqa: BLE001 - DeviceUnavailableError (no torch) and the like
                result.warnings.append(f"validation skipped: {exc}")
        end("validation")

        # 6. report
        begin("report")
        from roofprof.report import write_run_report

        result.step_seconds["report"] = 0.0
        write_run_report(result)
        end("report")
        write_run_report(result, html=False)  # final JSON with the report step's time
        return result
