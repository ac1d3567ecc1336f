"""The calibrated estimator: the published-ceiling roofline plus a small model of what real
engines lose, fitted on the published corpus and judged leave-one-out.

Per engine profile (``--engine``), a few physical parameters:

* ``memory_fraction``: the share of the memory ceiling a memory-bound kernel reaches, per
  GPU generation (``memory_fractions``, e.g. ``ampere``; the engine-wide value where the
  engine has no rows on that generation);
* ``compute_fraction``: the share of the compute ceiling a compute-bound kernel reaches,
  per generation and tensor path (``compute_fractions``, e.g. ``hopper/tensor-fp8``,
  ``ampere/tensor-16``; fp16 and bf16 share the 16-bit path), the engine-wide value as
  fallback (:mod:`roofprof.prediction.fraction_groups`);
* ``decode_step_s``: a fixed cost per decode pass (scheduling, sampling, host work and
  what CUDA graphs cannot hide) for engines that replay CUDA graphs at decode;
* ``prefill_launch_s``: for those engines, a cost per kernel of a prefill pass: prefill runs
  without CUDA graphs, so a model with more layers (70B: 80, 8B: 32) pays more;
* ``launch_s`` and ``prefill_step_s``: for engines that run without CUDA graphs, a cost per
  kernel launch (kernels per pass = the op calls of the pass), which replaces
  ``decode_step_s``, and a fixed cost per prefill pass;
* ``offline_run_s``: for offline batch runs only (``vllm bench throughput``), a fixed cost
  per run (the scheduling of its chunked prefill and decode steps, detokenisation); it is
  not part of a single pass and the per-op estimator does not apply it.

An op then takes ``max(FLOPs / (compute_fraction · peak), bytes / (memory_fraction · BW))
+ launch_s`` per call (``+ prefill_launch_s`` in prefill), and each pass adds its step cost
once (charged to its embedding op, which runs once per pass). ``ideal`` is the roofline
itself (fractions 1, no overheads). The base roofline is the GPU's published ceilings; a
16-bit dtype with only a datasheet ceiling takes the measured figure of the other 16-bit
dtype (same tensor path: an fp16 row on an A100 PCIe uses its measured bf16 GEMM, 253
TFLOP/s, not the 312 of the datasheet).

Where an engine does not run the counted work at the counted peak, its
:class:`~roofprof.prediction.kernel_paths.KernelPath` (facts of the engine build, not fitted) says
how: llama.cpp's May 2024 build runs fp16 prefill GEMMs at the fp16-accumulate tensor rate (twice
the datasheet's fp32-accumulate peak on GeForce Ada), dequantizes Q4_K_M/Q8_0 weights into an
fp16 buffer before each prefill GEMM (a memory-bound pass per matrix and per 512-token
physical batch, at ``memory_fraction``), and runs attention unfused (no flash attention).

**Fitting** (:func:`fit`, run by ``roofprof calibrate``): per engine, decode rows fix
``memory_fraction`` and the decode overhead; prefill and offline rows then fix
``compute_fraction`` and the prefill overhead (one more round re-fits decode with the
compute fraction found). Each pair is found by a grid over the fraction (0.05-1.00, step
0.0025) with the overhead solved in closed form (least squares on relative error,
clipped at 0), minimising the squared relative residuals. An overhead is fitted only
from two or more rows that identify it (an offline run, one prefill among many decode
steps, fixes the compute fraction only); otherwise the pooled value is kept. An engine
with no rows of a phase borrows the pooled fit of the engines that share its CUDA-graph
behaviour (stated in the profile's ``fitted_from``). Rows the corpus flags as anomalous
(``anomalous_pp``) are predicted but never fitted; so are the tensor-parallel rows, whose
collectives are priced on the interconnect (:mod:`roofprof.prediction.collectives`, CUDA-graph α)
and added unscaled: their residual is out of sample whatever the fit. Then, with the
engine's overheads kept, each group's fraction (memory: the engine's decode rows on one
GPU generation; compute: its prefill and offline rows on one generation and tensor path)
is the maximum a posteriori grid value of its rows' squared relative residuals (scatter
``RESIDUAL_SCALE`` = 0.10) plus a log-normal prior (width ``PRIOR_SCALE`` = 0.10 in ln f)
around the engine-wide fraction: one row moves its group at most half-way (in ln f), a group
with no rows keeps the engine's value (two rounds, memory then compute).

**Accuracy** is stated leave-one-out (:func:`leave_one_out`): each row is predicted by
profiles refitted without it. In-sample residuals are written beside the fit, marked so.

>>> est = calibrated_estimator("h100-sxm", engine="ideal")
>>> est.profile.memory_fraction, est.name
(1.0, 'calibrated')
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from roofprof._resources import data_root
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.prediction.engine_profile import (
    CUDA_GRAPHS,
    ENGINES,
    IDEAL,
    CalibratedEstimator,
    EngineProfile,
)
from roofprof.prediction.fraction_groups import compute_group, generation_of, shrunk_fraction
from roofprof.prediction.kernel_paths import (
    dequantize_bytes,
    fp16_accumulate_ratio,
    path_of,
    peak_scale,
)
from roofprof.roofline import Roofline
from roofprof.workload import COLLECTIVE_FNS

__all__ = [
    "CUDA_GRAPHS",
    "ENGINES",
    "CalibratedEstimator",
    "EngineProfile",
    "FitOptions",
    "SINGLE_FRACTION",
    "calibrated_estimator",
    "fit_profiles",
    "leave_one_out",
    "load_calibration",
    "write_calibration",
]

_FITTED_PHASES = ("decode", "prefill", "offline")  # batched rows are predicted, never fitted
_GRID = np.round(np.arange(0.05, 1.0 + 1e-9, 0.0025), 4)
_CALIBRATION = "calibration.json"


# --------------------------------------------------------------------------- fitting


@dataclass
class _Pass:
    compute_s: np.ndarray  # per call, at the full ceiling
    memory_s: np.ndarray
    count: np.ndarray
    phase: str
    times: int
    comm_s: float = 0.0  # collectives of the pass on the interconnect (not scaled by the fractions)

    @property
    def kernels(self) -> float:
        return float(self.count.sum())

    def roof_compute_grid(self, fm: float, fc: np.ndarray) -> np.ndarray:
        """Pass time at each compute fraction of ``fc`` (memory fraction ``fm``)."""
        t = np.maximum(self.compute_s[None, :] / fc[:, None], self.memory_s[None, :] / fm)
        return (t * self.count[None, :]).sum(axis=1)

    def roof(self, fm: np.ndarray | float, fc: float) -> np.ndarray:
        fm = np.atleast_1d(np.asarray(fm, dtype=float))
        t = np.maximum(self.compute_s[None, :] / fc, self.memory_s[None, :] / fm[:, None])
        return (t * self.count[None, :]).sum(axis=1)


@dataclass
class _Prepared:
    label: str
    row: str
    engine: str
    phase: str
    published_s: float
    passes: list[_Pass]
    anomalous: bool = (
        False  # flagged by the corpus (e.g. ``anomalous_pp``): predicted, never fitted
    )
    multi_gpu: bool = False  # tensor-parallel rows: predicted (leave-one-out), never fitted
    tokens: int = 1  # batched rows: the run's seconds per token (roofprof.prediction.serving)
    run_cost: bool = (
        False  # the run pays the profile's ``offline_run_s`` (offline ``vllm bench throughput``)
    )
    generation: str = "unknown"  # the memory-fraction group (roofprof.prediction.fraction_groups)
    group: str = "unknown"  # the compute-fraction group, ``generation/tensor path``


def _prepare(case, shared_path: bool = True) -> _Prepared:
    from roofprof.published.cases import base_roofline, collectives, workload

    roof, _ = base_roofline(case.gpu, shared_path=shared_path)
    bw = roof.memory_bandwidth()
    path = path_of(case.engine)
    ratio = fp16_accumulate_ratio(case.gpu) if path.fp16_accumulate else 1.0
    passes = []
    for scenario, times in case.passes:
        if not times:
            continue
        every = workload(scenario).ops
        ops = [op for op in every if op.fn not in COLLECTIVE_FNS]
        comm = [op for op in every if op.fn in COLLECTIVE_FNS]
        comm_s = sum(
            op.count * collectives(case.gpu).seconds(op.fn, op.bytes, op.batch) for op in comm
        )
        compute = [
            op.flops / (roof.compute_peak(op.dtype) * peak_scale(op, path, ratio)) for op in ops
        ]
        memory = [op.bytes / bw for op in ops]
        count = [float(op.count) for op in ops]
        for op in ops:  # the engine's dequantization passes: memory-bound kernels of their own
            if (moved := dequantize_bytes(op, path)) > 0:
                compute, memory, count = (
                    [*compute, 0.0],
                    [*memory, moved / bw],
                    [*count, float(op.count)],
                )
        passes.append(
            _Pass(
                np.array(compute), np.array(memory), np.array(count), scenario.phase, times, comm_s
            )
        )
    anomalous = any(
        f == f"anomalous_{'pp' if case.phase == 'prefill' else 'tg'}" for f in case.row.flags
    )
    run_cost = case.phase == "offline" or (
        case.phase == "batched" and "offline_batched" in case.row.flags
    )
    return _Prepared(
        case.label,
        case.row.id,
        case.engine,
        case.phase,
        case.published_s,
        passes,
        anomalous,
        case.row.tp > 1,
        case.tokens,
        run_cost,
        generation_of(case.gpu),
        compute_group(case.gpu, case.row.dtype or "bf16"),
    )


@functools.lru_cache(maxsize=2)
def _prepared_corpus(shared_path: bool = True) -> tuple[_Prepared, ...]:
    from roofprof.published.cases import cases

    return tuple(_prepare(c, shared_path) for c in cases()[0])


def _predict(p: _Prepared, prof: EngineProfile) -> float:
    return float(_predict_grid(p, prof, None, np.ones(1))[0])


def _predict_grid(p: _Prepared, prof: EngineProfile, vary: str | None, grid) -> np.ndarray:
    """Predicted seconds of ``p`` at each fraction of ``grid`` for the fraction ``vary``
    (``memory`` or ``compute``; ``None``: the profile's own fractions, one value)."""
    fm, fc = prof.fractions(p.generation, p.group)
    total = np.full(len(grid), prof.offline_run_s if p.run_cost else 0.0)
    for ps in p.passes:
        step = (
            prof.prefill_step_s + prof.prefill_launch_s * ps.kernels
            if ps.phase == "prefill"
            else prof.decode_step_s
        )
        if vary == "memory":
            t = ps.roof(grid, fc)
        elif vary == "compute":
            t = ps.roof_compute_grid(fm, grid)
        else:
            t = ps.roof(fm, fc)
        total += ps.times * (t + step + prof.launch_s * ps.kernels + ps.comm_s)
    return total / p.tokens


def _fit_groups(
    prof: EngineProfile, dec, pre_off, prior_scale: float | None = None
) -> EngineProfile:
    """The engine's fractions per GPU generation (memory, from ``dec``) and per generation
    and tensor path (compute, from ``pre_off``), each shrunk towards the engine's own
    fraction (:func:`roofprof.prediction.fraction_groups.shrunk_fraction`)."""
    groups: dict[str, list[str]] = {}
    for _ in range(2):
        fitted = {}
        for vary, rows, key, pool in (
            ("memory", dec, "generation", prof.memory_fraction),
            ("compute", pre_off, "group", prof.compute_fraction),
        ):
            by: dict[str, list[_Prepared]] = {}
            for p in rows:
                by.setdefault(getattr(p, key), []).append(p)
            sq = {
                g: np.sum(
                    [(_predict_grid(p, prof, vary, _GRID) / p.published_s - 1) ** 2 for p in ms],
                    axis=0,
                )
                for g, ms in by.items()
            }
            fitted[vary] = {
                g: shrunk_fraction(_GRID, s, pool=pool, prior_scale=prior_scale)
                for g, s in sq.items()
            }
            groups.update({f"{vary}:{g}": [p.label for p in ms] for g, ms in by.items()})
        prof = replace(prof, memory_fractions=fitted["memory"], compute_fractions=fitted["compute"])
    return replace(prof, group_rows=groups)


def _fit_pair(
    preps: Sequence[_Prepared],
    prof: EngineProfile,
    which: str,
    *,
    fit_fraction: bool = True,
    per_kernel_prefill: bool = True,
) -> EngineProfile:
    """Grid over one fraction, closed-form overhead; ``which`` is ``decode``, ``prefill`` or
    ``offline`` (compute fraction and the per-run cost of offline batch runs).

    The overhead is fitted only when at least two rows identify it; otherwise the
    profile's current (pooled) overhead is kept and only the fraction is fitted.
    """
    grid = _GRID if fit_fraction else np.array([prof.compute_fraction])
    y = np.array([p.published_s for p in preps])
    base = np.zeros((len(grid), len(preps)))  # time without the fitted overhead
    reg = np.zeros(len(preps))  # regressor of the fitted overhead
    per_kernel = prof.cuda_graphs and per_kernel_prefill
    current = {
        "decode": prof.launch_s if not prof.cuda_graphs else prof.decode_step_s,
        "prefill": prof.prefill_launch_s if per_kernel else prof.prefill_step_s,
        "offline": prof.offline_run_s,
    }[which]
    fitted = "decode" if which == "decode" else "prefill"
    for j, p in enumerate(preps):
        if which == "offline":
            reg[j] = 1.0
        for ps in p.passes:
            if ps.phase == fitted and which == "decode":
                t = ps.roof(grid, prof.compute_fraction)
            elif ps.phase == fitted:
                t = ps.roof_compute_grid(prof.memory_fraction, grid)
            else:
                t = np.full(len(grid), ps.roof(prof.memory_fraction, prof.compute_fraction)[0])
            fixed, x = prof.launch_s * ps.kernels, 0.0
            if ps.phase == "decode":
                if which == "decode":
                    fixed, x = 0.0, (ps.kernels if not prof.cuda_graphs else 1.0)
                else:
                    fixed += prof.decode_step_s
            elif which == "prefill":
                x = ps.kernels if per_kernel else 1.0
            else:
                fixed += prof.prefill_step_s + prof.prefill_launch_s * ps.kernels
            base[:, j] += ps.times * (t + fixed)
            reg[j] += ps.times * x
    w = 1.0 / y**2
    if (reg > 0).sum() >= 2:
        c = ((reg * (y - base)) * w).sum(axis=1) / max((reg**2 * w).sum(), 1e-30)
        c = np.clip(c, 0.0, None)
    else:
        c = np.full(len(grid), current)
    err = (((base + c[:, None] * reg[None, :]) - y) ** 2 * w).sum(axis=1)
    best = int(np.argmin(err))
    f, overhead = float(grid[best]), float(c[best])
    if which == "decode":
        if prof.cuda_graphs:
            return replace(prof, memory_fraction=f, decode_step_s=overhead)
        return replace(prof, memory_fraction=f, launch_s=overhead)
    if which == "offline":
        return replace(prof, compute_fraction=f, offline_run_s=overhead)
    if per_kernel:
        return replace(prof, compute_fraction=f, prefill_launch_s=overhead)
    return replace(prof, compute_fraction=f, prefill_step_s=overhead)


@dataclass(frozen=True)
class FitOptions:
    """Which parts of the model the fit uses: ``groups``, fractions per GPU generation and
    tensor path (:mod:`roofprof.prediction.fraction_groups`); ``prefill_per_kernel``, the
    prefill fixed cost of CUDA-graph engines per kernel rather than per pass; ``shared_path``,
    fp16 and bf16 on one measured 16-bit ceiling (``base_roofline`` of
    :mod:`roofprof.published.cases`). :data:`SINGLE_FRACTION` (all off) is the earlier
    model: one fraction per engine, a prefill cost per pass, each dtype its own ceiling."""

    groups: bool = True
    prefill_per_kernel: bool = True
    shared_path: bool = True
    #: width of the groups' prior in ln f (None: ``fraction_groups.PRIOR_SCALE``)
    prior_scale: float | None = None


SINGLE_FRACTION = FitOptions(groups=False, prefill_per_kernel=False, shared_path=False)


def fit_profiles(
    preps: Sequence[_Prepared] | None = None,
    *,
    exclude_row: str | None = None,
    options: FitOptions = FitOptions(),
) -> dict[str, EngineProfile]:
    """Fit every engine profile on the corpus (optionally without the row ``exclude_row``),
    with the model parts of ``options``.

    Returns engine -> :class:`EngineProfile` (``ideal`` included, unfitted).
    """
    preps = [
        p
        for p in (preps if preps is not None else _prepared_corpus(options.shared_path))
        if p.row != exclude_row and not p.anomalous and not p.multi_gpu
    ]

    def rows_of(engines: Sequence[str], phases: Sequence[str]) -> list[_Prepared]:
        return [p for p in preps if p.engine in engines and p.phase in phases]

    pk = options.prefill_per_kernel

    def run(prof: EngineProfile, dec, pre, off) -> EngineProfile:
        for _ in range(2):
            if dec:
                prof = _fit_pair(dec, prof, "decode", per_kernel_prefill=pk)
            if pre:
                prof = _fit_pair(pre, prof, "prefill", per_kernel_prefill=pk)
            if off:
                prof = _fit_pair(off, prof, "offline", fit_fraction=not pre, per_kernel_prefill=pk)
        return prof

    def labels(rows: Sequence[_Prepared]) -> list[str]:
        return [p.label for p in rows]

    profiles: dict[str, EngineProfile] = {"ideal": IDEAL}
    pooled: dict[bool, EngineProfile] = {}
    for graphs in (True, False):
        engines = [e for e, g in CUDA_GRAPHS.items() if g == graphs and e != "ideal"]
        dec, pre, off = (rows_of(engines, (ph,)) for ph in ("decode", "prefill", "offline"))
        prof = run(
            EngineProfile(f"pooled-{'graphs' if graphs else 'no-graphs'}", cuda_graphs=graphs),
            dec,
            pre,
            off,
        )
        pooled[graphs] = replace(
            prof, rows={"decode": labels(dec), "prefill": labels(pre), "offline": labels(off)}
        )
    for engine in ENGINES:
        if engine == "ideal":
            continue
        pool = pooled[CUDA_GRAPHS[engine]]
        dec, pre, off = (rows_of([engine], (ph,)) for ph in ("decode", "prefill", "offline"))
        source = {}
        for phase, own in (("decode", dec), ("prefill", pre), ("offline", off)):
            source[phase] = (
                f"own rows ({len(own)})" if own else f"{pool.engine} ({len(pool.rows[phase])} rows)"
            )
        prof = run(replace(pool, engine=engine), dec, pre, off)
        if options.groups:
            prof = _fit_groups(prof, dec, [*pre, *off], options.prior_scale)
        profiles[engine] = replace(
            prof,
            fitted_from=source,
            rows={"decode": labels(dec), "prefill": labels(pre), "offline": labels(off)},
        )
    return profiles


def leave_one_out(case_list=None, *, options: FitOptions = FitOptions()) -> dict[str, float]:
    """Case label -> predicted seconds from profiles fitted without that case's row.

    Batched rows (``phase="batched"``) are never fitted, so the fit on the whole corpus is
    already out of sample for them: they are predicted with it (one fit, not one per row).
    """
    sp = options.shared_path
    preps = _prepared_corpus(sp) if case_list is None else tuple(_prepare(c, sp) for c in case_list)
    out: dict[str, float] = {}
    by_row: dict[str, list[_Prepared]] = {}
    for p in preps:
        by_row.setdefault(p.row, []).append(p)
    full: dict[str, EngineProfile] | None = None
    for row, members in by_row.items():
        if all(p.phase not in _FITTED_PHASES for p in members):
            full = full or fit_profiles(preps, options=options)
            out.update((p.label, _predict(p, full[p.engine])) for p in members)
            continue
        profiles = fit_profiles(preps, exclude_row=row, options=options)
        for p in members:
            out[p.label] = _predict(p, profiles[p.engine])
    return out


# --------------------------------------------------------------------------- the file


def write_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """Fit on the whole corpus and write the profiles, in-sample fit residuals and the
    leave-one-out summary to ``path`` (default ``data/calibration.json``); returns the payload."""
    from roofprof.published.corpus import load_end_to_end
    from roofprof.results import write_json_atomic

    preps = _prepared_corpus()
    profiles = fit_profiles(preps)
    loo = leave_one_out()
    residuals = []
    for p in preps:
        pred = _predict(p, profiles[p.engine])
        residuals.append(
            {
                "case": p.label,
                "engine": p.engine,
                "phase": p.phase,
                "published_s": p.published_s,
                "fit_s": pred,
                "fit_residual_in_sample": pred / p.published_s - 1,
                "leave_one_out_s": loo[p.label],
                "leave_one_out_residual": loo[p.label] / p.published_s - 1,
            }
        )
    summary = []
    for phase in (*_FITTED_PHASES, "batched"):
        vals = [abs(r["leave_one_out_residual"]) for r in residuals if r["phase"] == phase]
        if vals:
            worst = max(
                (r for r in residuals if r["phase"] == phase),
                key=lambda r: abs(r["leave_one_out_residual"]),
            )
            summary.append(
                {
                    "phase": phase,
                    "n": len(vals),
                    "median_abs_residual": statistics.median(vals),
                    "worst_abs_residual": max(vals),
                    "worst_case": worst["case"],
                }
            )
            if phase not in _FITTED_PHASES:
                summary[-1]["note"] = (
                    "never fitted: predicted by the fit on the whole corpus (out of sample)"
                )
    payload = {
        "schema_version": 1,
        "generated_by": "roofprof calibrate",
        "corpus": {
            "rows": len(load_end_to_end()),
            "cases": len(preps),
            "files": ["data/published/end_to_end.json", "data/published/microbenchmarks.json"],
        },
        "model": (__doc__ or "").split("**Fitting**")[0].strip(),
        "procedure": "**Fitting**"
        + (__doc__ or "**Fitting**").split("**Fitting**")[1].split(">>>")[0].rstrip(),
        "base_roofline": "published ceilings of the row's GPU (roofprof roofline --published), "
        "datasheet where a ceiling is missing",
        "profiles": {e: p.to_dict() for e, p in profiles.items()},
        "fit_residuals": residuals,
        "leave_one_out_summary": summary,
    }
    target = Path(path) if path else data_root() / _CALIBRATION
    write_json_atomic(target, payload)
    load_calibration.cache_clear()
    return payload


@functools.lru_cache(maxsize=4)
def load_calibration(path: str | None = None) -> Mapping[str, Any]:
    """The calibration file (default the shipped ``data/calibration.json``).

    Raises:
        ConfigError: missing or unreadable (run ``roofprof calibrate``).
    """
    target = Path(path) if path else data_root() / _CALIBRATION
    try:
        return json.loads(target.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{target}: no calibration ({exc}); run `roofprof calibrate`") from exc


def calibrated_estimator(
    gpu: str | None,
    *,
    engine: str = "ideal",
    roofline: Roofline | None = None,
    calibration: str | None = None,
) -> CalibratedEstimator:
    """The calibrated estimator for ``gpu`` and an engine profile.

    The base roofline is ``roofline`` (a measured one) if given, else the GPU's published
    ceilings (datasheet values fill what is missing), else its datasheet (said in
    ``warnings``).

    Raises:
        UnknownNameError: unknown engine (lists the profiles) or GPU.
        ConfigError: no calibration file.
    """
    from roofprof.published.cases import base_roofline
    from roofprof.specs import load_gpu

    if engine not in ENGINES:
        raise UnknownNameError("engine", engine, ENGINES)
    warnings: list[str] = []
    if engine == "ideal":
        profile, provenance = IDEAL, {"file": None, "note": "ideal: no losses"}
    else:
        data = load_calibration(calibration)
        profile = EngineProfile.from_dict(data["profiles"][engine])
        provenance = {
            "file": str(calibration or "data/calibration.json"),
            "generated_by": data.get("generated_by"),
            "corpus": data.get("corpus"),
            "leave_one_out_summary": data.get("leave_one_out_summary"),
        }
        for phase, src in profile.fitted_from.items():
            if src.startswith("pooled") and phase in ("decode", "prefill"):
                warnings.append(
                    f"calibrated {engine}: no published {phase} rows for this engine; "
                    f"{phase} parameters borrowed from the fit of {src}"
                )
    if roofline is not None:
        roof, source = roofline, "measured roofline"
    elif gpu is None:
        raise ConfigError("the calibrated estimator needs a GPU or a roofline")
    else:
        roof, source = base_roofline(load_gpu(gpu).id)
        if source.startswith("datasheet"):
            warnings.append(
                f"calibrated: {gpu} has no published ceilings; starting from its datasheet"
            )
    ratio = (
        fp16_accumulate_ratio(gpu) if gpu is not None and path_of(engine).fp16_accumulate else 1.0
    )
    return CalibratedEstimator(
        roof,
        profile,
        source=source,
        provenance=provenance,
        warnings=warnings,
        fp16_ratio=ratio,
        gpu=gpu,
    )
