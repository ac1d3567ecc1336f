"""Every published row as a prediction case, and each estimator's residual against it.

A row becomes one or more :class:`Case` objects:

* ``decode``: one decode step (batch, context as the row gives them) against the
  published time per output token (``tpot_s``);
* ``prefill``: one prefill of ``prompt_tokens`` against the published TTFT (``ttft_s``);
* ``offline``: a whole offline run (one prefill of ``batch × prompt`` tokens, then
  ``output_tokens`` decode steps at that batch) against its derived duration
  (``offline_run_s``: tokens counted / published tokens/s);
* ``batched``: a static batch, or a loaded or saturated continuous-batching server
  (:mod:`roofprof.prediction.serving`: prefill of the batch, then the decode steps at batch ``B``
  with their growing KV reads; a saturated server's ``B`` from its KV capacity) against the
  published seconds per token (``s_per_token`` = 1 / tokens/s of the whole system). These
  rows are never fitted and are summarised apart (:func:`summarize`).

Rows roofprof cannot model (other model families, MLPerf's variable lengths) become
:class:`Skipped` with the reason; tensor-parallel rows are modelled, their
collectives priced by :mod:`roofprof.prediction.collectives`.

Estimators: ``spec`` (datasheet roofline), ``empirical`` (the roofline of the GPU's
published ceilings, :func:`~roofprof.published.corpus.published_roofline`) and
``calibrated`` (:mod:`roofprof.prediction.calibration`; in :func:`validate_published` its prediction
for a row always comes from a fit that **left that row out**).

The residual is ``predicted / published − 1`` (positive: the prediction is slower).
MBU (decode) is the bytes of the step over the published time, as a fraction of the
datasheet bandwidth and of the published ceiling; MFU (prefill, offline) the FLOPs over
the time, as a fraction of the datasheet and published compute peaks.

>>> cs, skipped = cases()
>>> next(c for c in cs if c.row.id == "D01").phase, sorted({s.row_id[:3] for s in skipped})[:2]
('decode', ['B14', 'B15'])
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roofprof.errors import ConfigError
from roofprof.prediction.rollup import RooflineEstimator
from roofprof.published.cases import (
    PHASES,
    SINGLE_PHASES,
    Case,
    Skipped,
    case_flops_bytes,
    case_seconds,
    cases,
    empirical_roofline,
    spec_roofline,
)
from roofprof.roofline import Roofline
from roofprof.specs import load_gpu

__all__ = [
    "ESTIMATORS",
    "Case",
    "PublishedValidation",
    "Skipped",
    "case_seconds",
    "cases",
    "summarize",
    "validate_published",
]

ESTIMATORS = ("spec", "empirical", "calibrated")


def _achieved(case: Case, seconds: float) -> dict[str, float | None]:
    flops, moved = case_flops_bytes(case)
    dtype = case.passes[0][0].dtype
    spec = spec_roofline(case.gpu)
    emp = empirical_roofline(case.gpu)
    out: dict[str, float | None] = {}
    if case.phase == "decode":
        rate = moved / seconds
        out["mbu_datasheet"] = rate / spec.memory_bandwidth()
        out["mbu_published"] = rate / emp.memory_bandwidth() if isinstance(emp, Roofline) else None
    else:
        rate = flops / seconds
        out["mfu_datasheet"] = rate / spec.compute_peak(dtype) if dtype in spec.dtypes else None
        out["mfu_published"] = (
            rate / emp.compute_peak(dtype)
            if isinstance(emp, Roofline) and dtype in emp.dtypes
            else None
        )
    return out


@dataclass(frozen=True)
class PublishedValidation:
    """Per-case results, the summary and the skipped rows of ``validate_published``."""

    rows: tuple[Mapping[str, Any], ...]
    summary: tuple[Mapping[str, Any], ...]
    skipped: tuple[Skipped, ...]
    estimators: tuple[str, ...]
    calibration: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimators": list(self.estimators),
            "rows": [dict(r) for r in self.rows],
            "summary": [dict(s) for s in self.summary],
            "skipped": [s.to_dict() for s in self.skipped],
            "calibration": dict(self.calibration),
            "seconds": self.seconds,
            "residual": "predicted / published - 1 "
            "(positive: the prediction is slower than the measurement)",
            "calibrated_is": "leave-one-out: each row predicted from a fit without that row",
        }


def validate_published(
    estimators: Sequence[str] = ESTIMATORS,
    *,
    gpu: str | None = None,
    engine: str | None = None,
    phase: str | None = None,
) -> PublishedValidation:
    """Every modelled published figure against each estimator, with residuals and MBU/MFU.

    ``gpu``, ``engine`` (profile name or engine text) and ``phase`` filter the rows shown
    (the calibration's leave-one-out fits always use the whole corpus minus the row).

    Raises:
        ConfigError: an unknown estimator or phase (the message lists the choices).
    """
    started = time.perf_counter()
    bad = [e for e in estimators if e not in ESTIMATORS]
    if bad:
        raise ConfigError(f"unknown estimator {bad[0]!r}; valid choices: {', '.join(ESTIMATORS)}")
    if phase is not None and phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r}; valid choices: {', '.join(PHASES)}")
    gpu_id = load_gpu(gpu).id if gpu else None
    all_cases, skipped = cases()
    loo: dict[str, float] = {}
    calibration: dict[str, Any] = {}
    if "calibrated" in estimators:
        from roofprof.prediction.calibration import leave_one_out

        loo = leave_one_out(all_cases)
        calibration = {
            "procedure": "leave-one-out: for each row, every profile is refitted on the corpus "
            "without that row (roofprof.prediction.calibration.fit_profiles), then the row is "
            "predicted"
        }

    def keep(c: Case) -> bool:
        return (
            (gpu_id is None or c.gpu == gpu_id)
            and (phase is None or c.phase == phase)
            and (engine is None or engine in (c.engine, c.row.engine))
        )

    rows = []
    for c in (c for c in all_cases if keep(c)):
        rec: dict[str, Any] = {
            "row": c.row.id,
            "case": c.label,
            "cite": c.row.cite(),
            "model": c.row.model_id,
            "gpu": c.gpu,
            "engine": c.row.engine,
            "engine_profile": c.engine,
            "phase": c.phase,
            "metric": c.metric,
            "published_s": c.published_s,
            "published_derived": c.derived,
            "flags": list(c.row.flags),
            **c.passes[0][0].precisions(),
            "batch": c.passes[0][0].batch,
            "prompt_tokens": c.passes[0][0].prompt_tokens,
            **_achieved(c, c.published_s),
        }
        if c.batching:
            rec.update(
                batching=c.batching,
                output_tokens=c.row.output_tokens,
                tokens_counted=c.row.tokens_counted,
                concurrency="stated" if c.row.batch else "kv-capacity",
            )
        for name in estimators:
            seconds, reason = None, ""
            if name == "spec":
                seconds = case_seconds(c, RooflineEstimator(spec_roofline(c.gpu)))
            elif name == "empirical":
                roof = empirical_roofline(c.gpu)
                if isinstance(roof, Roofline):
                    seconds = case_seconds(c, RooflineEstimator(roof, name="empirical"))
                else:
                    reason = roof
            else:
                seconds = loo.get(c.label)
                reason = "" if seconds is not None else "no fit"
            rec[f"{name}_s"] = seconds
            rec[f"{name}_residual"] = seconds / c.published_s - 1.0 if seconds else None
            if reason:
                rec[f"{name}_note"] = reason
        rows.append(rec)
    shown_skipped = [s for s in skipped if gpu_id is None or s.gpu == gpu_id]
    return PublishedValidation(
        tuple(rows),
        tuple(summarize(rows, estimators)),
        tuple(shown_skipped),
        tuple(estimators),
        calibration,
        time.perf_counter() - started,
    )


def summarize(
    rows: Sequence[Mapping[str, Any]],
    estimators: Sequence[str],
    by: Sequence[str] = ("phase", "gpu", "engine_profile"),
) -> list[dict[str, Any]]:
    """Median and worst |residual| per estimator: over all single-request rows (``all``), per
    phase, and per GPU and engine over the single-request rows; batched rows (static batches,
    loaded or saturated servers) form their own ``phase=batched`` group and, by how they batch,
    ``batching`` groups: they never join ``all`` or the GPU and engine groups.

    >>> summarize([{"phase": "decode", "gpu": "a", "engine_profile": "x", "row": "D1", "case": "D1",
    ...             "spec_residual": -0.2},
    ...            {"phase": "decode", "gpu": "a", "engine_profile": "x", "row": "D2", "case": "D2",
    ...             "spec_residual": 0.1}],
    ...           ["spec"])[0]["median_abs_residual"]
    0.15000000000000002
    """
    out = []
    single = [r for r in rows if r["phase"] in SINGLE_PHASES]
    batched = [r for r in rows if r["phase"] not in SINGLE_PHASES]
    groups: list[tuple[str, str, list[Mapping[str, Any]]]] = [("all", "all", single)]
    for key in by:
        members_of = rows if key == "phase" else single
        for value in sorted({r[key] for r in members_of}):
            groups.append((key, value, [r for r in members_of if r[key] == value]))
    for value in sorted({r.get("batching") or "static" for r in batched}):
        groups.append(
            ("batching", value, [r for r in batched if (r.get("batching") or "static") == value])
        )
    for name in estimators:
        for key, value, members in groups:
            res = [
                (abs(r[f"{name}_residual"]), r)
                for r in members
                if r.get(f"{name}_residual") is not None
            ]
            if not res:
                continue
            worst = max(res, key=lambda t: t[0])
            out.append(
                {
                    "estimator": name,
                    "group": key,
                    "value": value,
                    "n": len(res),
                    "median_abs_residual": statistics.median(v for v, _ in res),
                    "worst_abs_residual": worst[0],
                    "worst_case": worst[1]["case"],
                    "worst_residual": worst[1][f"{name}_residual"],
                }
            )
    return out
