"""The calibrated estimator: the published-ceiling roofline plus a small model of what real
engines lose, fitted on the published corpus and judged leave-one-out.

Per engine profile (``--engine``), four physical parameters:

* ``memory_fraction``: the share of the memory ceiling a memory-bound kernel reaches;
* ``compute_fraction``: the share of the compute ceiling a compute-bound kernel reaches;
* ``decode_step_s`` / ``prefill_step_s``: a fixed cost per pass (scheduling, sampling,
  host work and what CUDA graphs cannot hide) for engines that replay CUDA graphs;
* ``launch_s``: a cost per kernel launch (kernels per pass = the op calls of the pass),
  which replaces ``decode_step_s`` for engines that run without CUDA graphs: a model with
  more layers launches more kernels and pays more;
* ``offline_run_s``: for offline batch runs only (``vllm bench throughput``), a fixed cost
  per run (the scheduling of its chunked prefill and decode steps, detokenisation); it is
  not part of a single pass and the per-op estimator does not apply it.

An op then takes ``max(FLOPs / (compute_fraction · peak), bytes / (memory_fraction · BW))
+ launch_s`` per call, and each pass adds its step cost once (charged to its embedding op,
which runs once per pass). ``ideal`` is the roofline itself (fractions 1, no overheads).

Where an engine does not run the counted work at the counted peak, its
:class:`~roofprof.prediction.kernel_paths.KernelPath` (facts of the engine build, not fitted) says
how: llama.cpp's May 2024 build runs fp16 prefill GEMMs at the fp16-accumulate tensor rate (twice
the datasheet's fp32-accumulate peak on GeForce Ada), dequantizes Q4_K_M/Q8_0 weights into an
fp16 buffer before each prefill GEMM (a memory-bound pass per matrix and per 512-token
physical batch, at ``memory_fraction``), and runs attention unfused (no flash attention).

**Fitting** (:func:`fit`, run by ``roofprof calibrate``): per engine, decode rows fix
``memory_fraction`` and the decode overhead; prefill and offline rows then fix
``compute_fraction`` and ``prefill_step_s`` (one more round re-fits decode with the
compute fraction found). Each pair is found by a grid over the fraction (0.05-1.00, step
0.0025) with the overhead solved in closed form (least squares on relative error,
clipped at 0), minimising the squared relative residuals. An overhead is fitted only
from two or more rows that identify it (an offline run, one prefill among many decode
steps, fixes the compute fraction only); otherwise the pooled value is kept. An engine
with no rows of a phase borrows the pooled fit of the engines that share its CUDA-graph
behaviour (stated in the profile's ``fitted_from``). Rows the corpus flags as anomalous
(``anomalous_pp``) are predicted but never fitted; so are the tensor-parallel rows, whose
collectives are priced on the interconnect (:mod:`roofprof.prediction.collectives`, CUDA-graph α)
and added unscaled: their residual is out of sample whatever the fit.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from roofprof._resources import data_root
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.prediction.kernel_paths import (
    dequantize_bytes,
    fp16_accumulate_ratio,
    path_of,
    peak_scale,
)
from roofprof.prediction.rollup import OpEstimate
from roofprof.roofline import Roofline
from roofprof.workload import COLLECTIVE_FNS, Op

__all__ = [
    "CUDA_GRAPHS",
    "ENGINES",
    "CalibratedEstimator",
    "EngineProfile",
    "calibrated_estimator",
    "fit_profiles",
    "leave_one_out",
    "load_calibration",
    "write_calibration",
]

#: Engine profile -> whether it replays CUDA graphs at decode (what the fixed cost is per).
CUDA_GRAPHS = {
    "ideal": True,
    "trt-llm": True,  # TensorRT-LLM engines (S7/S8 in-engine timing)
    "vllm": True,  # vLLM V1 captures CUDA graphs for decode by default
    "sglang": True,
    "gpt-fast": True,  # S5 caveats: "torch.compile (CUDA graphs)"
    "llama.cpp": False,  # S13 is a May 2024 llama-bench build (assumed to launch each kernel)
    "hf-eager": False,  # transformers eager mode: one launch per kernel
}
ENGINES = tuple(CUDA_GRAPHS)
_FITTED_PHASES = ("decode", "prefill", "offline")  # batched rows are predicted, never fitted
_GRID = np.round(np.arange(0.05, 1.0 + 1e-9, 0.0025), 4)
_CALIBRATION = "calibration.json"


@dataclass(frozen=True)
class EngineProfile:
    """The fitted losses of one engine (see the module docstring for the model)."""

    engine: str
    memory_fraction: float = 1.0
    compute_fraction: float = 1.0
    decode_step_s: float = 0.0
    prefill_step_s: float = 0.0
    launch_s: float = 0.0
    offline_run_s: float = 0.0
    cuda_graphs: bool = True
    fitted_from: Mapping[str, str] = field(default_factory=dict)
    rows: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fitted_from"], d["rows"] = (
            dict(self.fitted_from),
            {k: list(v) for k, v in self.rows.items()},
        )
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EngineProfile:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


IDEAL = EngineProfile(
    "ideal", fitted_from={"decode": "none: the roofline itself", "prefill": "none"}
)


class CalibratedEstimator:
    """A rollup :class:`~roofprof.prediction.rollup.Estimator`: a roofline plus an engine
    profile."""

    def __init__(
        self,
        roofline: Roofline,
        profile: EngineProfile,
        *,
        source: str = "",
        level: str = "dram",
        provenance: Mapping[str, Any] | None = None,
        warnings: Sequence[str] = (),
        fp16_ratio: float = 1.0,
    ):
        self.roofline = roofline
        self.profile = profile
        self.source = source
        self.level = level
        self.name = "calibrated"
        self.provenance = dict(provenance or {})
        self.warnings = list(warnings)
        self.machine = roofline.device or None
        self.collectives = (
            None  # a CollectiveModel: rollup.estimate_phase prices collectives with it
        )
        self.kernel_path = path_of(profile.engine)
        self.fp16_ratio = fp16_ratio

    def prefetch(self, ops: Sequence[Op]) -> None:
        """Nothing to measure ahead: the calibrated model is arithmetic."""

    def estimate(self, op: Op) -> OpEstimate:
        p = self.profile
        bw = self.roofline.memory_bandwidth(self.level) * p.memory_fraction
        peak = self.roofline.compute_peak(op.dtype) * peak_scale(
            op, self.kernel_path, self.fp16_ratio
        )
        compute_s = op.flops / (peak * p.compute_fraction)
        memory_s = op.bytes / bw
        seconds = max(compute_s, memory_s) + p.launch_s
        note = ""
        if (
            dequant := dequantize_bytes(op, self.kernel_path)
        ) > 0:  # the engine's dequantization kernel
            seconds += dequant / bw + p.launch_s
            note = f"includes dequantizing the weights to fp16 ({dequant / 1e6:.1f} MB moved); "
        if op.fn in ("gather", "onehot_matmul"):  # the embedding, once per pass: the per-step cost
            step = p.prefill_step_s if op.phase == "prefill" else p.decode_step_s
            seconds += step
            note += f"includes the {op.phase} step cost {step * 1e3:.3f} ms" if step else ""
        return OpEstimate(seconds, "compute" if compute_s >= memory_s else "memory", note)

    def ridge(self, dtype: str) -> float:
        p = self.profile
        return (
            self.roofline.compute_peak(dtype)
            * p.compute_fraction
            / (self.roofline.memory_bandwidth(self.level) * p.memory_fraction)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "roofline_device": self.roofline.device,
            "roofline_source": self.source,
            "ceilings": self.roofline.to_dict()["ceilings"],
            "engine_profile": self.profile.to_dict(),
            "kernel_path": {**asdict(self.kernel_path), "fp16_accumulate_ratio": self.fp16_ratio},
            "calibration": self.provenance,
        }


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


def _prepare(case) -> _Prepared:
    from roofprof.published.cases import base_roofline, collectives, workload

    roof, _ = base_roofline(case.gpu)
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
    )


@functools.lru_cache(maxsize=1)
def _prepared_corpus() -> tuple[_Prepared, ...]:
    from roofprof.published.cases import cases

    return tuple(_prepare(c) for c in cases()[0])


def _predict(p: _Prepared, prof: EngineProfile) -> float:
    total = prof.offline_run_s if p.run_cost else 0.0
    for ps in p.passes:
        step = prof.prefill_step_s if ps.phase == "prefill" else prof.decode_step_s
        total += ps.times * (
            float(ps.roof(prof.memory_fraction, prof.compute_fraction)[0])
            + step
            + prof.launch_s * ps.kernels
            + ps.comm_s
        )
    return total / p.tokens


def _fit_pair(
    preps: Sequence[_Prepared], prof: EngineProfile, which: str, *, fit_fraction: bool = True
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
    current = {
        "decode": prof.launch_s if not prof.cuda_graphs else prof.decode_step_s,
        "prefill": prof.prefill_step_s,
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
                x = 1.0
            else:
                fixed += prof.prefill_step_s
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
    return replace(prof, compute_fraction=f, prefill_step_s=overhead)


def fit_profiles(
    preps: Sequence[_Prepared] | None = None, *, exclude_row: str | None = None
) -> dict[str, EngineProfile]:
    """Fit every engine profile on the corpus (optionally without the row ``exclude_row``).

    Returns engine -> :class:`EngineProfile` (``ideal`` included, unfitted).
    """
    preps = [
        p
        for p in (preps if preps is not None else _prepared_corpus())
        if p.row != exclude_row and not p.anomalous and not p.multi_gpu
    ]

    def rows_of(engines: Sequence[str], phases: Sequence[str]) -> list[_Prepared]:
        return [p for p in preps if p.engine in engines and p.phase in phases]

    def run(prof: EngineProfile, dec, pre, off) -> EngineProfile:
        for _ in range(2):
            if dec:
                prof = _fit_pair(dec, prof, "decode")
            if pre:
                prof = _fit_pair(pre, prof, "prefill")
            if off:
                prof = _fit_pair(off, prof, "offline", fit_fraction=not pre)
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
        profiles[engine] = replace(
            prof,
            fitted_from=source,
            rows={"decode": labels(dec), "prefill": labels(pre), "offline": labels(off)},
        )
    return profiles


def leave_one_out(case_list=None) -> dict[str, float]:
    """Case label -> predicted seconds from profiles fitted without that case's row.

    Batched rows (``phase="batched"``) are never fitted, so the fit on the whole corpus is
    already out of sample for them: they are predicted with it (one fit, not one per row).
    """
    preps = _prepared_corpus() if case_list is None else tuple(_prepare(c) for c in case_list)
    out: dict[str, float] = {}
    by_row: dict[str, list[_Prepared]] = {}
    for p in preps:
        by_row.setdefault(p.row, []).append(p)
    full: dict[str, EngineProfile] | None = None
    for row, members in by_row.items():
        if all(p.phase not in _FITTED_PHASES for p in members):
            full = full or fit_profiles(preps)
            out.update((p.label, _predict(p, full[p.engine])) for p in members)
            continue
        profiles = fit_profiles(preps, exclude_row=row)
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
        roof, profile, source=source, provenance=provenance, warnings=warnings, fp16_ratio=ratio
    )
