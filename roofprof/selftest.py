"""``roofprof selftest``: everything a GPU has to prove, in one command of under 8 minutes.

Sections, in order, each time-boxed (a section that runs out of time stops between steps
and keeps what it finished; the results file is rewritten whole after every section):

1. ``correctness`` — every CUDA C entry point (``gemv.cu`` on ragged M, N, K with and
   without split-K and padded rows; ``gemm_mma.cu`` on M ∈ {1, 17, 130}, N ∈ {8, 136},
   K ∈ {8, 48, 264}, both output types), every probe of the catalogue (its own check),
   every Numba registry kernel, and every op implementation (``cupy``, ``numba``,
   ``cublas``, ``torch``, ``cupy-ref``) on fresh random data against float64 numpy,
   outputs poisoned first. A kernel that fails is reported and never timed.
2. ``roofline`` — :func:`roofprof.probes.measure_roofline` over the probes that passed;
   compute ceilings restated at the datasheet clock (rate × spec clock / clock seen).
3. ``benchmarks`` — Llama shapes from :func:`roofprof.workload.llama_ops` (3.1 8B and 70B,
   3.2 1B and 3B; decode M = batch, prefill M = batch × prompt), each implementation
   checked then timed (CUDA events, L2 flushed before each call for memory-bound shapes),
   each as a ratio against cuBLAS in the same run.
4. ``counters`` — :func:`roofprof.counters.selftest_check` (Nsight Compute).
5. ``pytest`` — ``python -m pytest -m gpu`` with ``ROOFPROF_GPU_TESTS=1`` and
   ``NUMBA_ENABLE_CUDASIM=0``.

Then the issue's targets are evaluated (:func:`evaluate_targets`, a pure function of the
results) and written to ``selftest.json`` (with provenance) and ``selftest.md``.

Without a usable GPU :func:`run_selftest` raises
:class:`~roofprof.errors.DeviceUnavailableError` (the CLI: one line, exit 2).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.units import fmt_rate as _fmt_rate

SCHEMA = "roofprof.selftest/1"
DEFAULT_BUDGET_S = 450.0
SECTIONS = ("correctness", "roofline", "benchmarks", "counters", "pytest")
#: Share of the budget each section may use (cumulative deadlines; leftovers carry over).
SHARES = {"correctness": 0.20, "roofline": 0.22, "benchmarks": 0.30, "counters": 0.12, "pytest": 0.14}
MIN_SECTION_S = 10.0
GEMV_MAX_M = 16  # rows up to which an op runs as a GEMV (cuda_impls.GEMV_MAX_M)
MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b")
PROMPT_TOKENS = 512
INSTALL_HINT = ("roofprof selftest needs an NVIDIA GPU with its driver; install CuPy for it: "
                "pip install 'roofprof[cuda12]' (or 'roofprof[cuda13]' with a CUDA 13 driver)")

Progress = Callable[[str], Any]


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """One pass/fail target of the issue: ``value`` compared with ``threshold`` (value ≥ threshold)."""

    id: str
    description: str
    threshold: float
    value: float | None
    passed: bool | None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "threshold": self.threshold, "value": self.value,
                "passed": self.passed, "status": status_word(self.passed), "detail": self.detail}


def status_word(passed: bool | None) -> str:
    """``pass`` / ``FAIL`` / ``not measured``."""
    return "not measured" if passed is None else ("pass" if passed else "FAIL")


def _ceiling(ceilings: Sequence[Mapping[str, Any]], *, probe: str | Sequence[str], level: str | None = None,
             dtype: str | None = None) -> Mapping[str, Any] | None:
    names = (probe,) if isinstance(probe, str) else tuple(probe)
    found = [c for c in ceilings if c.get("probe") in names and (level is None or c.get("level") == level)
             and (dtype is None or c.get("dtype") == dtype) and c.get("value")]
    return max(found, key=lambda c: c["value"], default=None)


def hbm_probe(ceilings: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The best DRAM ceiling of the own HBM probes (``read``, ``copy``)."""
    return _ceiling(ceilings, probe=("read", "copy"), level="dram")


def aggregate(records: Iterable[Mapping[str, Any]], *, impl: str, model: str, phase: str, dtype: str,
              batch: int | None = None, ops: Iterable[str] | None = None, min_m: int = 0) -> dict[str, Any] | None:
    """Time-weighted totals of one implementation over the GEMMs of one pass.

    Sums ``count × median_s``, ``count × bytes`` and ``count × flops`` over the ok records
    (restricted to ``ops`` when given, and to ``m > min_m``). Returns ``None`` when there are none.

    >>> recs = [{"impl": "x", "model": "m", "phase": "decode", "dtype": "bf16", "batch": 1, "op": "q",
    ...          "status": "ok", "median_s": 1e-3, "bytes": 4e9, "flops": 1e9, "count": 2}]
    >>> aggregate(recs, impl="x", model="m", phase="decode", dtype="bf16")["bytes_per_s"]
    4000000000000.0
    """
    wanted = set(ops) if ops is not None else None
    rs = [r for r in records if r.get("impl") == impl and r.get("model") == model and r.get("phase") == phase
          and r.get("dtype") == dtype and (batch is None or r.get("batch") == batch) and r.get("status") == "ok"
          and r.get("median_s") and (wanted is None or r.get("op") in wanted) and r.get("m", min_m + 1) > min_m]
    if not rs:
        return None
    t = sum(r["median_s"] * r.get("count", 1) for r in rs)
    b = sum(r["bytes"] * r.get("count", 1) for r in rs)
    f = sum(r["flops"] * r.get("count", 1) for r in rs)
    return {"time_s": t, "bytes": b, "flops": f, "bytes_per_s": b / t, "flops_per_s": f / t,
            "ops": sorted({r["op"] for r in rs})}


def common_ops(records: Iterable[Mapping[str, Any]], impls: Sequence[str], **where: Any) -> list[str]:
    """Op names measured ok by every implementation in ``impls`` under the same filters."""
    sets = []
    recs = list(records)
    for impl in impls:
        sets.append({r["op"] for r in recs if r.get("impl") == impl and r.get("status") == "ok"
                     and all(r.get(k) == v for k, v in where.items())})
    return sorted(set.intersection(*sets)) if sets else []


def _ratio_target(tid: str, description: str, threshold: float, num: float | None, den: float | None,
                  detail: str) -> Target:
    if not num or not den:
        return Target(tid, description, threshold, None, None, detail or "not measured")
    value = num / den
    return Target(tid, description, threshold, value, value >= threshold, detail)


def fp32_lanes_per_sm(spec: Mapping[str, Any] | None) -> float:
    """FP32 lanes per SM from the datasheet row (``fp32 peak / (2 · SMs · vector clock)``), else 128.

    >>> fp32_lanes_per_sm({"peak_flops_per_s": {"fp32": 66.9e12}, "sm_count": 132, "vector_clock_mhz": 1980})
    128.0
    >>> fp32_lanes_per_sm(None)
    128.0
    """
    try:
        lanes = spec["peak_flops_per_s"]["fp32"] / (2 * spec["sm_count"] * spec["vector_clock_mhz"] * 1e6)
        return float(round(lanes))
    except (TypeError, KeyError, ZeroDivisionError):
        return 128.0


def evaluate_targets(results: Mapping[str, Any]) -> list[Target]:
    """The issue's targets from a results dict (what ``selftest.json`` holds); pure arithmetic.

    Uses ``results["roofline"]["ceilings"]`` (``measure_roofline`` detail records),
    ``results["benchmarks"]["records"]``, ``results["spec"]``, ``results["device"]``,
    ``results["correctness"]``, ``results["counters"]`` and ``results["pytest"]``.
    A target whose inputs are missing is ``passed=None`` ("not measured").
    """
    spec = results.get("spec") or None
    device = results.get("device") or {}
    ceilings = list((results.get("roofline") or {}).get("ceilings") or ())
    records = list((results.get("benchmarks") or {}).get("records") or ())
    out: list[Target] = []

    hbm = hbm_probe(ceilings)
    hbm_v = hbm["value"] if hbm else None
    hbm_name = hbm["name"] if hbm else "HBM probe"
    out.append(_ratio_target("hbm_vs_datasheet", "HBM probe (best of read/copy, DRAM plateau) ≥ 90% of datasheet",
                             0.90, hbm_v, spec.get("memory_bytes_per_s") if spec else None,
                             f"{hbm_name} / datasheet memory bandwidth"))
    d2d = _ceiling(ceilings, probe="d2d-copy", level="dram")
    out.append(_ratio_target("hbm_vs_d2d", "HBM probe ≥ device-to-device copy (cudaMemcpy) in the same run", 1.0,
                             hbm_v, d2d["value"] if d2d else None, f"{hbm_name} / d2d-copy"))

    fma = _ceiling(ceilings, probe="fma-fp32", dtype="fp32")
    ideal = None
    if fma and fma.get("clock_mhz") and device.get("compute_units"):
        ideal = device["compute_units"] * fp32_lanes_per_sm(spec) * 2 * fma["clock_mhz"] * 1e6
    out.append(_ratio_target("fp32_fma", "FP32 FMA probe ≥ 95% of SMs × FP32 lanes × 2 × SM clock seen", 0.95,
                             fma["value"] if fma else None, ideal,
                             f"lanes/SM {fp32_lanes_per_sm(spec):.0f}" + (f", clock seen {fma['clock_mhz']:.0f} MHz"
                                                                           if fma and fma.get("clock_mhz") else "")))

    bf16_all = [c for c in ceilings if c.get("dtype") == "bf16" and c.get("kind") == "compute" and c.get("value")]
    attainable = max((c["value"] for c in bf16_all), default=None)
    cublas_rates = [c["value"] for c in bf16_all if c.get("probe_kind") == "gemm"]
    cublas_rates += [r["flops"] / r["median_s"] for r in records if r.get("impl") in ("cublas", "torch")
                     and r.get("dtype") == "bf16" and r.get("status") == "ok" and r.get("median_s")]
    out.append(_ratio_target("bf16_attainable", "attainable bf16 ceiling ≥ 95% of the best cuBLAS bf16 GEMM seen",
                             0.95, attainable, max(cublas_rates, default=None),
                             "roofline bf16 compute ceiling / best cuBLAS or torch bf16 rate (probes and Llama shapes)"))

    where = {"model": "llama-3.1-8b", "phase": "decode", "batch": 1}
    cupy = aggregate(records, impl="cupy", dtype="bf16", **where)
    out.append(_ratio_target("cupy_gemv_hbm", "CuPy GEMV, Llama 3.1 8B decode batch 1 (bf16) ≥ 85% of the HBM probe",
                             0.85, cupy["bytes_per_s"] if cupy else None, hbm_v,
                             "time-weighted bytes/s over the pass's GEMMs (L2 flushed before each call)"))
    ops = common_ops(records, ("cupy", "torch"), dtype="bf16", **where)
    a = aggregate(records, impl="cupy", dtype="bf16", ops=ops, **where) if ops else None
    b = aggregate(records, impl="torch", dtype="bf16", ops=ops, **where) if ops else None
    out.append(_ratio_target("cupy_gemv_vs_torch", "CuPy GEMV ≥ torch.matmul at the same 8B decode shapes (time ratio)",
                             1.0, b["time_s"] if b else None, a["time_s"] if a else None,
                             f"torch time / cupy time over {', '.join(ops) or 'no common ops'}"))
    nb = aggregate(records, impl="numba", dtype="fp16", **where)
    out.append(_ratio_target("numba_gemv_hbm", "Numba GEMV, Llama 3.1 8B decode batch 1 (fp16) ≥ 70% of the HBM probe",
                             0.70, nb["bytes_per_s"] if nb else None, hbm_v, "time-weighted bytes/s"))

    pre = {"model": "llama-3.1-8b", "phase": "prefill"}
    gemms = {r["op"] for r in records if r.get("m", GEMV_MAX_M + 1) > GEMV_MAX_M}  # not lm_head's M = batch GEMV
    ops = [o for o in common_ops(records, ("cupy", "cublas"), dtype="bf16", **pre) if o in gemms]
    a = aggregate(records, impl="cupy", dtype="bf16", ops=ops, min_m=GEMV_MAX_M, **pre) if ops else None
    b = aggregate(records, impl="cublas", dtype="bf16", ops=ops, min_m=GEMV_MAX_M, **pre) if ops else None
    out.append(_ratio_target("mma_gemm_vs_cublas", "mma.sync GEMM at 8B prefill shapes ≥ 50% of cuBLAS (time ratio)",
                             0.50, b["time_s"] if b else None, a["time_s"] if a else None,
                             f"cuBLAS time / gemm_mma time over {', '.join(ops) or 'no common ops'}"))
    ng = aggregate(records, impl="numba", dtype="fp32", min_m=GEMV_MAX_M, **pre)
    out.append(_ratio_target("numba_gemm_fp32", "Numba tiled GEMM at 8B prefill shapes (fp32) ≥ 50% of the FP32 FMA ceiling",
                             0.50, ng["flops_per_s"] if ng else None, fma["value"] if fma else None,
                             "time-weighted FLOP/s / fma-fp32 ceiling"))

    corr = results.get("correctness") or {}
    kernels = corr.get("kernels") or []
    if kernels:
        failed = [k["kernel"] for k in kernels if not k.get("ok")]
        out.append(Target("correctness", "every kernel matches its reference before timing", 1.0,
                          (len(kernels) - len(failed)) / len(kernels), not failed,
                          f"{len(kernels) - len(failed)}/{len(kernels)} passed"
                          + (f"; failed: {', '.join(failed[:12])}" if failed else "")))
    else:
        out.append(Target("correctness", "every kernel matches its reference before timing", 1.0, None, None,
                          corr.get("note", "not run")))
    counters = results.get("counters") or {}
    passed = counters.get("passed")
    out.append(Target("counters", "counters.selftest_check: ncu FLOP/byte counts match the analytic counts", 1.0,
                      None if passed is None else float(bool(passed)), passed,
                      counters.get("note", "") or ", ".join(f"{k}={v}" for k, v in (counters.get("checks") or {}).items())))
    py = results.get("pytest") or {}
    rc = py.get("returncode")
    ok = None if rc is None else rc in (0, 5)  # 5: no gpu-marked test was collected
    out.append(Target("pytest_gpu", "python -m pytest -m gpu passes", 1.0, None if ok is None else float(ok), ok,
                      py.get("summary", py.get("note", ""))))
    return out


def clock_scaled(ceilings: Sequence[Mapping[str, Any]], spec: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Compute ceilings restated at the datasheet clock: ``value × spec clock / clock seen``.

    The tensor clock for ``mma.sync`` and GEMM ceilings, the vector clock for FMA probes;
    ``percent_of_spec`` compares the restated value with the datasheet rate of the dtype.

    >>> rows = clock_scaled([{"name": "fp32 FMA", "kind": "compute", "probe": "fma-fp32", "probe_kind": "compute",
    ...                       "dtype": "fp32", "value": 60e12, "clock_mhz": 1800}],
    ...                     {"vector_clock_mhz": 1980, "tensor_clock_mhz": 1830, "peak_flops_per_s": {"fp32": 67e12}})
    >>> round(rows[0]["value_at_spec_clock"] / 1e12, 1), round(rows[0]["percent_of_spec"], 1)
    (66.0, 98.5)
    """
    from roofprof.devices.cuda import scale_to_clock

    out = []
    for c in ceilings:
        if c.get("kind") != "compute":
            continue
        tensor = c.get("probe_kind") == "gemm" or str(c.get("probe", "")).startswith("mma")
        spec_clock = None
        peak = None
        if spec:
            spec_clock = spec.get("tensor_clock_mhz" if tensor else "vector_clock_mhz")
            rates = spec.get("peak_flops_per_s") or {}
            peak = rates.get(c.get("dtype")) if tensor or c.get("dtype") in ("fp32", "fp64") else None
        scaled = scale_to_clock(c["value"], c.get("clock_mhz"), spec_clock)
        out.append({"name": c.get("name"), "probe": c.get("probe"), "dtype": c.get("dtype"), "value": c["value"],
                    "clock_mhz": c.get("clock_mhz"), "spec_clock_mhz": spec_clock, "value_at_spec_clock": scaled,
                    "spec_flops_per_s": peak,
                    "percent_of_spec": 100.0 * scaled / peak if scaled and peak else None})
    return out


# --------------------------------------------------------------------------- markdown


def _fmt_value(t: Mapping[str, Any]) -> str:
    v = t.get("value")
    return "–" if v is None else (f"{v:.1%}" if v <= 10 else f"{v:.3g}")


def markdown_report(results: Mapping[str, Any]) -> str:
    """``selftest.md``: device, pass/fail per target, sections, ceilings, failed kernels, ratios.

    >>> print(markdown_report({"device": {"name": "X", "label": "cuda:0"}, "targets": [
    ...     {"id": "a", "description": "d", "threshold": 0.9, "value": 0.95, "status": "pass", "detail": ""}]}).splitlines()[0])
    # roofprof selftest: X (cuda:0)
    """
    dev = results.get("device") or {}
    lines = [f"# roofprof selftest: {dev.get('name', '?')} ({dev.get('label', '?')})", ""]
    prov = results.get("provenance") or {}
    extra = dev.get("extra") or {}
    lines.append(f"- driver {extra.get('driver', '?')}, CUDA runtime {extra.get('cuda_runtime', '?')}, "
                 f"compute capability {extra.get('compute_capability', '?')}, {dev.get('compute_units', '?')} SMs")
    lines.append(f"- datasheet row: {dev.get('spec_id') or 'none'}; run {prov.get('time_utc', '?')}; "
                 f"elapsed {results.get('elapsed_s', 0):.0f} s; complete: {results.get('complete', False)}")
    lat = results.get("launch_latency") or {}
    if lat.get("gpu_s_per_launch"):
        lines.append(f"- launch latency (probe_empty): {lat['gpu_s_per_launch'] * 1e6:.2f} µs per launch on the GPU, "
                     f"{lat['host_issue_s_per_launch'] * 1e6:.2f} µs host issue")
    lines += ["", "## Targets", "", "| target | measured | threshold | result | how |", "| --- | --- | --- | --- | --- |"]
    for t in results.get("targets") or []:
        thr = t.get("threshold")
        thr_s = f"≥ {thr:.0%}" if thr is not None and thr <= 10 else str(thr)
        lines.append(f"| {t.get('description', t.get('id'))} | {_fmt_value(t)} | {thr_s} | **{t.get('status')}** | "
                     f"{t.get('detail', '')} |")
    sections = results.get("sections") or {}
    if sections:
        lines += ["", "## Sections", "", "| section | status | seconds | note |", "| --- | --- | --- | --- |"]
        for name, s in sections.items():
            lines.append(f"| {name} | {s.get('status')} | {s.get('elapsed_s', 0):.1f} | {s.get('note', '')} |")
    scaled = results.get("clock_scaled") or []
    ceilings = (results.get("roofline") or {}).get("ceilings") or []
    if ceilings:
        lines += ["", "## Ceilings", "", "| ceiling | value | clock seen | at spec clock | % of datasheet |",
                  "| --- | --- | --- | --- | --- |"]
        by_name = {s["name"]: s for s in scaled}
        for c in ceilings:
            unit = "B/s" if c.get("kind") == "memory" else "FLOP/s"
            s = by_name.get(c.get("name"), {})
            pct = s.get("percent_of_spec")
            clock = f"{c['clock_mhz']:.0f} MHz" if c.get("clock_mhz") else "–"
            at_spec = _fmt_rate(s.get("value_at_spec_clock"), unit) if s else "–"
            pct_s = f"{pct:.1f}%" if pct else "–"
            lines.append(f"| {c.get('name')} | {_fmt_rate(c.get('value'), unit)} | {clock} | {at_spec} | {pct_s} |")
    corr = results.get("correctness") or {}
    failed = [k for k in corr.get("kernels") or [] if not k.get("ok")]
    if corr.get("kernels"):
        lines += ["", "## Correctness", "", f"{len(corr['kernels']) - len(failed)} of {len(corr['kernels'])} kernels "
                  "passed (fresh random inputs, outputs poisoned, float64 references)."]
        for k in failed:
            lines.append(f"- **FAILED** {k['kernel']}: {k.get('note', '')}")
        for k in corr["kernels"]:
            if k.get("skipped"):
                lines.append(f"- skipped {k['kernel']}: {k.get('note', '')}")
    ratios = (results.get("benchmarks") or {}).get("summary") or []
    if ratios:
        lines += ["", "## Llama shapes (time-weighted over each pass's GEMMs)", "",
                  "| model | phase | batch | dtype | impl | GB/s | TFLOP/s | vs cuBLAS |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in ratios:
            vs = r.get("vs_cublas")
            vs_s = f"{vs:.2f}" if vs else "–"
            lines.append(f"| {r['model']} | {r['phase']} | {r['batch']} | {r['dtype']} | {r['impl']} | "
                         f"{r['bytes_per_s'] / 1e9:.0f} | {r['flops_per_s'] / 1e12:.1f} | {vs_s} |")
    warnings = results.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings[:30]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class BenchCase:
    """One pass whose GEMMs are benchmarked: model, phase, batch, dtype and the implementations."""

    model: str
    phase: str
    batch: int
    dtype: str
    impls: tuple[str, ...]
    prompt_tokens: int = PROMPT_TOKENS

    @property
    def key(self) -> str:
        return f"{self.model} {self.phase} b{self.batch} {self.dtype}"


def benchmark_plan(quick: bool = False) -> list[BenchCase]:
    """The passes to benchmark, the targets' passes first (so a time-out keeps them).

    >>> [c.key for c in benchmark_plan(quick=True)][:3]
    ['llama-3.1-8b decode b1 bf16', 'llama-3.1-8b decode b1 fp16', 'llama-3.1-8b prefill b1 bf16']
    """
    own = ("cupy", "cublas", "torch")
    cases = [
        BenchCase("llama-3.1-8b", "decode", 1, "bf16", own),
        BenchCase("llama-3.1-8b", "decode", 1, "fp16", ("numba", "cupy", "cublas", "torch")),
        BenchCase("llama-3.1-8b", "prefill", 1, "bf16", own),
        BenchCase("llama-3.1-8b", "prefill", 1, "fp32", ("numba", "cublas")),
    ]
    if quick:
        return cases + [BenchCase("llama-3.1-8b", "decode", 16, "bf16", own)]
    for model in MODELS:
        for batch in (1, 16, 64, 256):
            case = BenchCase(model, "decode", batch, "bf16", own)
            if case not in cases:
                cases.append(case)
        for batch in (1, 4):
            case = BenchCase(model, "prefill", batch, "bf16", own)
            if case not in cases:
                cases.append(case)
    return cases


def gemm_ops(case: BenchCase) -> list[Any]:
    """Distinct GEMM shapes of ``case``'s pass (``llama_ops``), each with the summed count."""
    from roofprof.specs import load_model
    from roofprof.workload import Op, llama_ops

    w = llama_ops(load_model(case.model), case.phase, batch=case.batch, prompt_tokens=case.prompt_tokens,
                  context_tokens=case.prompt_tokens, dtype=case.dtype)
    merged: dict[tuple, Op] = {}
    names: dict[tuple, list[str]] = {}
    for op in w.ops:
        if op.kind != "gemm":
            continue
        key = op.shape_key
        if key in merged:
            prev = merged[key]
            merged[key] = Op(**{**prev.__dict__, "count": prev.count + op.count})
            names[key].append(op.name)
        else:
            merged[key] = op
            names[key] = [op.name]
    return [Op(**{**op.__dict__, "name": "+".join(names[key])}) for key, op in merged.items()]


# --------------------------------------------------------------------------- runner


class SectionTimeout(KeyboardInterrupt):
    """Raised from a progress callback to stop a section at its deadline (caught, never escapes)."""


@dataclass
class _State:
    out: Path
    budget_s: float
    quick: bool
    progress: Progress
    roofline_plan: Any = None
    bench_cases: Sequence[BenchCase] | None = None
    t0: float = field(default_factory=time.perf_counter)
    results: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def _deadlines(budget_s: float, t0: float) -> dict[str, float]:
    acc, out = 0.0, {}
    for name in SECTIONS:
        acc += SHARES[name]
        out[name] = t0 + acc * budget_s
    return out


def run_selftest(out_dir: str | os.PathLike, *, quick: bool = False, budget_s: float = DEFAULT_BUDGET_S,
                 device: Any = "cuda:0", sections: Sequence[str] = SECTIONS,
                 progress: Progress | None = None, roofline_plan: Any = None,
                 bench_cases: Sequence[BenchCase] | None = None) -> dict[str, Any]:
    """Run the GPU self-test and write ``selftest.json`` and ``selftest.md`` in ``out_dir``.

    Args:
        out_dir: folder for the results (checked writable before anything runs).
        quick: smaller roofline plan and benchmark set.
        budget_s: total time budget (seconds); each section gets a share (:data:`SHARES`).
        device: ``"cuda:N"`` or an open :class:`~roofprof.devices.cuda.CudaDevice`.
        sections: the sections to run (default all, in :data:`SECTIONS` order).
        progress: called with one-line status messages.
        roofline_plan: a ``RooflinePlan`` or plan name (default ``quick``/``full`` by ``quick``).
        bench_cases: the passes to benchmark (default :func:`benchmark_plan`).

    Returns:
        The results dict written to ``selftest.json``.

    Raises:
        DeviceUnavailableError: no usable GPU (the message says what to install).
        ConfigError: ``out_dir`` cannot be written, or an unknown section.
    """
    from roofprof.results import check_writable_dir

    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ConfigError(f"unknown selftest section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    dev = open_gpu(device)
    out = check_writable_dir(out_dir)
    st = _State(out=out, budget_s=float(budget_s), quick=quick, progress=progress or (lambda msg: None),
                roofline_plan=roofline_plan, bench_cases=bench_cases)
    res = st.results
    res.update({"schema": SCHEMA, "complete": False, "quick": quick, "budget_s": budget_s,
                "device": dev.info.to_dict(), "gpu": dev.describe(), "spec": _spec_dict(dev), "sections": {},
                "warnings": []})
    try:
        from roofprof.devices.cuda_probes import skipped_probes

        res["skipped_probes"] = skipped_probes(dev)
    except Exception as exc:  # noqa: BLE001
        res["skipped_probes"] = [{"probe": "*", "reason": f"catalogue failed: {exc}"}]
    deadlines = _deadlines(st.budget_s, st.t0)
    runners = {"correctness": _section_correctness, "roofline": _section_roofline, "benchmarks": _section_benchmarks,
               "counters": _section_counters, "pytest": _section_pytest}
    try:
        for name in SECTIONS:
            if name not in sections:
                res["sections"][name] = {"status": "skipped", "elapsed_s": 0.0, "note": "not requested"}
                continue
            deadline = max(deadlines[name], time.perf_counter() + MIN_SECTION_S)
            if time.perf_counter() > st.t0 + st.budget_s + 30:
                res["sections"][name] = {"status": "skipped", "elapsed_s": 0.0, "note": "no time left in the budget"}
                continue
            st.progress(f"selftest: {name} (until +{deadline - st.t0:.0f} s)")
            t = time.perf_counter()
            try:
                status, note = runners[name](dev, st, deadline)
            except KeyboardInterrupt:
                res["sections"][name] = {"status": "interrupted", "elapsed_s": time.perf_counter() - t,
                                         "note": "Ctrl-C"}
                raise
            except Exception as exc:  # noqa: BLE001 - a section failing never loses the others
                status, note = "error", f"{type(exc).__name__}: {exc}"
            res["sections"][name] = {"status": status, "elapsed_s": time.perf_counter() - t, "note": note}
            _release(dev)
            _write(st, complete=False)
        res["complete"] = all(s.get("status") in ("ok", "skipped") for s in res["sections"].values())
    finally:
        _write(st, complete=res.get("complete", False))
    return res


def _release(dev: Any) -> None:
    """Hand cached device memory back between sections (the pytest and ncu subprocesses need it)."""
    try:
        dev.release_memory()
    except Exception:  # noqa: BLE001
        pass


def open_gpu(device: Any):
    """An open CUDA device from ``"cuda:N"`` (or the device itself).

    Raises:
        DeviceUnavailableError: no usable GPU; the message ends with what to install.
    """
    if not isinstance(device, str):
        return device
    from roofprof.devices import select

    spec = device.strip().lower()
    if spec in ("auto", "gpu", "cuda"):
        spec = "cuda:0"
    if not spec.startswith(("cuda", "gpu")):
        raise ConfigError(f"roofprof selftest measures a GPU; got device {device!r} (use cuda:N)")
    try:
        return select(spec)
    except DeviceUnavailableError as exc:
        raise DeviceUnavailableError(f"no usable GPU: {exc}. {INSTALL_HINT}") from exc


def _spec_dict(dev: Any) -> dict[str, Any] | None:
    spec = getattr(dev, "spec", None)
    if spec is None:
        return None
    return {"id": spec.id, "name": spec.name, "memory_bytes_per_s": spec.memory_bytes_per_s,
            "vector_clock_mhz": spec.vector_clock_mhz, "tensor_clock_mhz": spec.tensor_clock_mhz,
            "sm_count": spec.sm_count, "peak_flops_per_s": dict(spec.peak_flops_per_s)}


def _write(st: _State, complete: bool) -> None:
    from roofprof.results import provenance, write_json_atomic, write_text_atomic

    res = st.results
    res["complete"] = complete
    res["elapsed_s"] = st.elapsed()
    res["targets"] = [t.to_dict() for t in evaluate_targets(res)]
    res["clock_scaled"] = clock_scaled((res.get("roofline") or {}).get("ceilings") or [], res.get("spec"))
    res["provenance"] = provenance(device=res.get("device"), gpu=res.get("gpu", {}).get("facts"),
                                   budget_s=st.budget_s, quick=st.quick)
    write_json_atomic(st.out / "selftest.json", res)
    write_text_atomic(st.out / "selftest.md", markdown_report(res))


# --------------------------------------------------------------------------- section: correctness


def _record(st: _State, kernel: str, ok: bool, note: str, **extra: Any) -> None:
    corr = st.results.setdefault("correctness", {"kernels": []})
    corr["kernels"].append({"kernel": kernel, "ok": bool(ok), "note": note, **extra})
    if not ok:
        st.progress(f"  FAILED {kernel}: {note}")


def _section_correctness(dev: Any, st: _State, deadline: float) -> tuple[str, str]:
    st.results["correctness"] = {"kernels": []}
    steps: list[tuple[str, Callable[[], None]]] = [
        ("CUDA C GEMV", lambda: _check_gemv_entries(dev, st)),
        ("CUDA C GEMM", lambda: _check_gemm_entries(dev, st)),
        ("probes", lambda: _check_probes(dev, st)),
        ("Numba registry", lambda: _check_numba_registry(dev, st)),
        ("implementations", lambda: _check_impls(dev, st)),
    ]
    skipped = []
    for label, step in steps:
        if time.perf_counter() > deadline:
            skipped.append(label)
            continue
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - e.g. a module that does not compile: every kernel of it fails
            _record(st, f"{label} (all)", False, f"{type(exc).__name__}: {exc}")
    kernels = st.results["correctness"]["kernels"]
    failed = sum(not k["ok"] for k in kernels)
    note = f"{len(kernels) - failed}/{len(kernels)} passed" + (f"; not reached: {', '.join(skipped)}" if skipped else "")
    return ("ok" if not skipped else "timeout"), note


def _op(name: str, m: int, n: int, k: int, dtype: str, phase: str = "decode"):
    from roofprof.workload import Op

    item = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}[dtype]
    return Op(name, "gemm", phase, m, n, k, dtype, 2.0 * m * n * k, float(item * (m * k + n * k + m * n)))


def _run_check(prep_factory: Callable[[], Any]) -> tuple[bool, float, str]:
    prep = prep_factory()
    try:
        res = prep.check()
        return res.ok, res.max_rel_error, res.note
    finally:
        prep.release()


def _check_gemv_entries(dev: Any, st: _State) -> None:
    from roofprof.devices.cuda_impls import gemv_prepared

    cm = dev.kernels.models
    rng = np.random.default_rng(101)
    n, k, k_pad = 37, 1003, 1008
    for dt in cm.GEMV_DTYPES:
        reason = dev.unsupported(dt, "gemv")
        by_entry: dict[str, list[tuple[bool, float, str]]] = {}
        for m in (1, 2, 3, 4, 5, 8, 9, 16, 17):
            for splits in (1, 3):
                for padded in (False, True):
                    plan = cm.gemv_plan(m, n, k, dt, dev.sm_count, splits=splits,
                                        ldx=k_pad if padded else None, ldw=k_pad if padded else None)
                    op = _op(f"gemv m={m} splits={splits} {'padded' if padded else 'unpadded'}", m, n, k, dt)
                    entries = [plan.main.entry] + ([plan.reduce.entry] if plan.reduce else [])
                    if reason:
                        result = (False, math.inf, reason)
                    else:
                        try:
                            result = _run_check(lambda plan=plan, op=op, padded=padded: gemv_prepared(
                                dev, op, rng, plan, ldx=k_pad if padded else None, ldw=k_pad if padded else None))
                        except Exception as exc:  # noqa: BLE001
                            result = (False, math.inf, f"{type(exc).__name__}: {exc}")
                    for e in entries:
                        by_entry.setdefault(e, []).append((*result[:2], f"{op.name}: {result[2]}"))
        for entry, results in by_entry.items():
            bad = [r for r in results if not r[0]]
            worst = max((r[1] for r in results), default=0.0)
            note = (f"{len(results)} cases (M 1..17, N={n}, K={k} with a tail, split-K 1/3, padded/unpadded rows); "
                    f"worst rel. error {worst:.2e}") if not bad else bad[0][2]
            _record(st, entry, not bad, note, cases=len(results), worst_rel_error=worst)


def _check_gemm_entries(dev: Any, st: _State) -> None:
    from roofprof.devices.cuda_impls import CupyBuffers, PreparedGemm

    cm = dev.kernels.models
    rng = np.random.default_rng(202)
    for dt in cm.GEMM_IN_DTYPES:
        for out_dt in (dt, "fp32"):
            entry = cm.gemm_entry(dt, out_dt)
            reason = dev.unsupported(dt, "mma.sync")
            results = []
            for m in (1, 17, 130):
                for n in (8, 136):
                    for k in (8, 48, 264):
                        op = _op(f"{entry} {m}×{n}×{k}", m, n, k, out_dt if out_dt == "fp32" else dt, "prefill")
                        if reason:
                            results.append((False, math.inf, reason))
                            continue

                        def make(m=m, n=n, k=k, op=op, dt=dt, out_dt=out_dt, entry=entry):
                            bufs = CupyBuffers(dev, {"x": (m, k), "w": (n, k), "y": (m, n)}, dt, op.name,
                                               dtypes={"y": out_dt})
                            launch = cm.gemm_launch(m, n, k, dt, out_dt)
                            args = (bufs["x"], bufs["w"], bufs["y"], np.int32(m), np.int32(n), np.int32(k))
                            return PreparedGemm(dev, op, rng, bufs,
                                                lambda: dev.launch(launch.entry, launch.grid, launch.block, args), entry)

                        try:
                            ok, err, note = _run_check(make)
                        except Exception as exc:  # noqa: BLE001
                            ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
                        results.append((ok, err, f"{op.name}: {note}"))
            bad = [r for r in results if not r[0]]
            worst = max((r[1] for r in results), default=0.0)
            _record(st, entry, not bad, bad[0][2] if bad else f"{len(results)} shapes (M 1/17/130, N 8/136, "
                    f"K 8/48/264); worst rel. error {worst:.2e}", cases=len(results), worst_rel_error=worst)


def _check_probes(dev: Any, st: _State) -> None:
    st.results["probe_checks"] = {}
    for probe in dev.probes():
        kwargs: dict[str, Any] = {}
        if probe.kind == "bandwidth":
            kwargs = {"working_set_bytes": 8 << 20}
        elif probe.kind == "gemm":
            kwargs = {"size": 256}
        elif probe.kind == "intensity":
            kwargs = {"working_set_bytes": 4 << 20, "fmas_per_element": 8}
        try:
            run = probe.setup(**kwargs)
            try:
                res = run.check()
            finally:
                run.release()
            ok, note = res.ok, res.note
        except Exception as exc:  # noqa: BLE001
            ok, note = False, f"{type(exc).__name__}: {exc}"
        st.results["probe_checks"][probe.name] = ok
        _record(st, f"probe {probe.name}", ok, note)
    for skipped in st.results.get("skipped_probes") or []:
        _record(st, f"probe {skipped['probe']}", True, f"skipped on this GPU: {skipped['reason']}", skipped=True)
    try:
        from roofprof.devices.cuda_probes import launch_latency

        st.results["launch_latency"] = launch_latency(dev)
        _record(st, "probe_empty", True, "launched 1000 times without a CUDA error")
    except Exception as exc:  # noqa: BLE001
        _record(st, "probe_empty", False, f"{type(exc).__name__}: {exc}")


def _check_numba_registry(dev: Any, st: _State) -> None:
    from roofprof.devices.cuda import kernels_module
    from roofprof.devices.cuda_impls import numba_cuda_reason

    reason = numba_cuda_reason()
    nk = kernels_module("numba_cuda")
    shapes = {"gemv": {"M": 3, "N": 37, "K": 1003}, "gemm": {"M": 130, "N": 136, "K": 72},
              "read": {"n": 100_003}, "copy": {"n": 100_003}, "fma": {"threads": 1000, "iters": 3},
              "sweep": {"n": 10_007, "k": 5}}
    rng = np.random.default_rng(303)
    for name, spec in nk.KERNELS.items():
        if reason:
            _record(st, f"numba {name}", False, reason)
            continue
        shape = shapes.get(spec.probe or spec.op)
        try:
            from numba import cuda

            inputs = spec.make_inputs(shape, rng)
            dev_in = {k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            init = (np.zeros if spec.accumulates else lambda s, dtype: np.full(s, np.nan, dtype))(
                spec.out_shape(shape), dtype=spec.out_np_dtype)
            out = cuda.to_device(init)
            grid, block = spec.launch(shape, dev.sm_count)
            dev.last_kernel = f"numba {name}"
            spec.kernel_for(shape, dev.sm_count)[grid, block](*spec.call_args(dev_in, out))
            cuda.synchronize()
            got = out.copy_to_host().astype(np.float64)
            ref = spec.reference(inputs, shape) + (init.astype(np.float64) if spec.accumulates else 0.0)
            rtol, atol = spec.tolerance(shape)
            finite = bool(np.all(np.isfinite(got)))
            ok = finite and bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)))
            err = float(np.max(np.abs(got - ref))) if finite else math.inf
            _record(st, f"numba {name}", ok, f"{shape}: max abs error {err:.3g} (rtol {rtol:.2g}, atol {atol:.2g})"
                    + ("" if finite else "; non-finite output (poison left?)"))
        except Exception as exc:  # noqa: BLE001
            _record(st, f"numba {name}", False, f"{type(exc).__name__}: {exc}")


def _check_impls(dev: Any, st: _State) -> None:
    from roofprof.specs import load_model
    from roofprof.workload import llama_ops

    rng = np.random.default_rng(404)
    gemm_shapes = [(1, 4096, 4096), (5, 1024, 4096), (256, 4096, 1024), (200, 1000, 1032)]
    impls = {i.name: i for i in dev.implementations()}
    for impl in impls.values():
        for dt in ("bf16", "fp16", "fp32"):
            for m, n, k in gemm_shapes:
                op = _op(f"{m}×{n}×{k}", m, n, k, dt, "decode" if m <= 16 else "prefill")
                if impl.supports(op) is not None:
                    continue
                try:
                    ok, err, note = _run_check(lambda impl=impl, op=op: impl.prepare(op, rng))
                except Exception as exc:  # noqa: BLE001
                    ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
                _record(st, f"impl {impl.name} {dt} {op.name}", ok, note, rel_error=err)
    ref = impls.get("cupy-ref")
    if ref is None:
        return
    model = load_model("llama-3.2-1b")
    for phase, kw in (("decode", {"batch": 2, "context_tokens": 64}), ("prefill", {"batch": 1, "prompt_tokens": 64})):
        for op in llama_ops(model, phase, dtype="bf16", **kw).ops:
            if ref.supports(op) is not None:
                continue
            try:
                ok, err, note = _run_check(lambda op=op: ref.prepare(op, rng))
            except Exception as exc:  # noqa: BLE001
                ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
            _record(st, f"impl cupy-ref {phase} {op.name}", ok, note, rel_error=err)


# --------------------------------------------------------------------------- section: roofline


def _section_roofline(dev: Any, st: _State, deadline: float) -> tuple[str, str]:
    from roofprof.probes import RooflineInterrupted, measure_roofline

    checks = st.results.get("probe_checks")
    catalogue = [p.name for p in dev.probes()]
    names = [n for n in catalogue if checks is None or checks.get(n)]
    excluded = [n for n in catalogue if n not in names]
    if not names:
        return "error", "no probe passed its check"

    def progress(done: int, total: int, label: str) -> None:
        st.progress(f"  roofline {done}/{total} {label}")
        if time.perf_counter() > deadline:
            raise SectionTimeout(label)

    def keep(result) -> None:
        st.results["roofline"] = _roofline_summary(result)
        _write(st, complete=False)

    status = "ok"
    try:
        plan = st.roofline_plan or ("quick" if st.quick else "full")
        result = measure_roofline(dev, plan=plan, progress=progress, checkpoint=keep, probes=names)
    except RooflineInterrupted as exc:
        if not isinstance(exc.__cause__, SectionTimeout):
            raise
        result, status = exc.result, "timeout"
    result.write(st.out / "selftest_roofline.json")
    st.results["roofline"] = _roofline_summary(result)
    st.results["warnings"].extend(result.warnings)
    note = f"{len(result.ceilings)} ceilings in {result.elapsed_s:.0f} s" + (
        f"; excluded (failed check): {', '.join(excluded)}" if excluded else "") + (
        f"; stopped at its deadline during {result.interrupted_during}" if status == "timeout" else "")
    return status, note


def _roofline_summary(result: Any) -> dict[str, Any]:
    keep = ("name", "probe", "probe_kind", "kind", "level", "dtype", "value", "unit", "clock_mhz", "source",
            "median_value", "cv", "noisy", "points", "spread", "note")
    return {"ceilings": [{k: c.get(k) for k in keep if k in c} for c in result.ceilings],
            "spec_comparison": dict(result.spec_comparison), "complete": result.complete,
            "elapsed_s": result.elapsed_s, "file": "selftest_roofline.json", "plan": result.plan.get("name")}


# --------------------------------------------------------------------------- section: benchmarks


def _failed_paths(st: _State) -> set[tuple[str, str]]:
    """(impl, dtype) pairs whose kernels failed correctness (never timed)."""
    bad: set[tuple[str, str]] = set()
    for k in (st.results.get("correctness") or {}).get("kernels") or []:
        if k["ok"]:
            continue
        name = k["kernel"]
        for dt in ("bf16", "fp16", "fp32"):
            if name.startswith(("gemv_", "gemm_mma_")) and f"_{dt}" in name:
                bad.add(("cupy", dt))
            if name.startswith(("numba gemv_", "numba gemm_tiled_")) and name.endswith(dt):
                bad.add(("numba", dt))
            if name.startswith("impl ") and f" {dt} " in name:
                bad.add((name.split()[1], dt))
    return bad


def _memory_bound(dev: Any, op: Any) -> bool:
    spec = getattr(dev, "spec", None)
    try:
        ridge = spec.ridge_flops_per_byte(op.dtype) if spec is not None else None
    except Exception:  # noqa: BLE001
        ridge = None
    return op.intensity < ridge if ridge else op.m <= 64


def _section_benchmarks(dev: Any, st: _State, deadline: float) -> tuple[str, str]:
    from roofprof.timing import benchmark

    bench = st.results.setdefault("benchmarks", {"records": [], "summary": []})
    bench.update({"records": [], "summary": [], "method": (
        "each (shape, implementation): prepare, check (fresh random inputs, output poisoned), then timed with CUDA "
        "events (launch latency hidden behind a short delay kernel), L2 flushed before each call when the shape is "
        "memory-bound on the datasheet roofline; median of the timed calls")})
    impls = {i.name: i for i in dev.implementations()}
    failed = _failed_paths(st)
    rng = np.random.default_rng(505)
    timed_out = None
    clock = dev.clock()
    sampler = dev.sampler(interval_s=0.05)
    with sampler:
        for case in (st.bench_cases if st.bench_cases is not None else benchmark_plan(st.quick)):
            if timed_out:
                break
            st.progress(f"  benchmarks: {case.key}")
            for op in gemm_ops(case):
                if time.perf_counter() > deadline:
                    timed_out = case.key
                    break
                for name in case.impls:
                    base = {"model": case.model, "phase": case.phase, "batch": case.batch, "prompt": case.prompt_tokens,
                            "op": op.name, "m": op.m, "n": op.n, "k": op.k, "dtype": op.dtype, "count": op.count,
                            "flops": op.flops, "bytes": op.bytes, "impl": name}
                    impl = impls.get(name)
                    reason = "not available" if impl is None else impl.supports(op)
                    if reason:
                        bench["records"].append({**base, "status": "unsupported", "note": reason})
                        continue
                    if (name, op.dtype) in failed:
                        bench["records"].append({**base, "status": "failed",
                                                 "note": "its kernels failed the correctness section: not timed"})
                        continue
                    bench["records"].append({**base, **_measure(dev, impl, op, rng, clock, benchmark)})
    st.results["telemetry_benchmarks"] = sampler.summary().to_dict()
    _add_ratios(bench)
    ok = sum(r["status"] == "ok" for r in bench["records"])
    return ("timeout" if timed_out else "ok"), f"{ok} measurements" + (
        f"; stopped at its deadline at {timed_out}" if timed_out else "")


def _measure(dev: Any, impl: Any, op: Any, rng: np.random.Generator, clock: Any, benchmark: Callable[..., Any]) -> dict:
    prep = None
    try:
        prep = impl.prepare(op, rng)
        chk = prep.check()
        if not chk.ok:
            return {"status": "failed", "note": chk.note, "check": chk.to_dict()}
        flush = dev.flush if _memory_bound(dev, op) else None
        timing = benchmark(prep.run, clock=clock, budget_s=0.05, warmup_s=0.01, flush=flush, min_repeats=5,
                           max_repeats=200, estimate_runs=1)
        return {"status": "ok", "median_s": timing.median_s, "min_s": timing.min_s, "cv": timing.cv,
                "noisy": timing.noisy, "repeats": timing.n, "flush": timing.flush, "kernels": getattr(prep, "kernels", 1),
                "note": getattr(prep, "note", ""), "check": chk.to_dict(),
                "bytes_per_s": op.bytes / timing.median_s, "flops_per_s": op.flops / timing.median_s}
    except ConfigError as exc:
        return {"status": "unsupported", "note": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
        return {"status": "error", "note": f"{type(exc).__name__}: {exc}"}
    finally:
        if prep is not None:
            try:
                prep.release()
            except Exception:  # noqa: BLE001
                pass


def _add_ratios(bench: dict[str, Any]) -> None:
    """Per record ``vs_cublas`` (cuBLAS time / this time, same shape) and a per-pass summary."""
    recs = bench["records"]
    cublas = {(r["model"], r["phase"], r["batch"], r["dtype"], r["op"]): r["median_s"] for r in recs
              if r["impl"] == "cublas" and r["status"] == "ok"}
    for r in recs:
        c = cublas.get((r["model"], r["phase"], r["batch"], r["dtype"], r["op"]))
        if r["status"] == "ok" and c:
            r["vs_cublas"] = c / r["median_s"]
    passes = sorted({(r["model"], r["phase"], r["batch"], r["dtype"], r["impl"]) for r in recs if r["status"] == "ok"})
    summary = []
    for model, phase, batch, dtype, impl in passes:
        agg = aggregate(recs, impl=impl, model=model, phase=phase, batch=batch, dtype=dtype)
        ops = common_ops(recs, (impl, "cublas"), model=model, phase=phase, batch=batch, dtype=dtype)
        mine = aggregate(recs, impl=impl, model=model, phase=phase, batch=batch, dtype=dtype, ops=ops) if ops else None
        ref = aggregate(recs, impl="cublas", model=model, phase=phase, batch=batch, dtype=dtype, ops=ops) if ops else None
        summary.append({"model": model, "phase": phase, "batch": batch, "dtype": dtype, "impl": impl,
                        "time_s": agg["time_s"], "bytes_per_s": agg["bytes_per_s"], "flops_per_s": agg["flops_per_s"],
                        "ops": agg["ops"], "vs_cublas": ref["time_s"] / mine["time_s"] if mine and ref else None})
    bench["summary"] = summary


# --------------------------------------------------------------------------- sections: counters, pytest


def _section_counters(dev: Any, st: _State, deadline: float) -> tuple[str, str]:
    from roofprof import counters

    remaining = max(20.0, deadline - time.perf_counter())
    try:
        res = counters.selftest_check(st.out, timeout_s=remaining)
    except DeviceUnavailableError as exc:  # ncu missing, counters not permitted
        st.results["counters"] = {"passed": None, "note": str(exc)}
        return "unavailable", str(exc)
    st.results["counters"] = {"passed": bool(res.get("passed")), "checks": res.get("checks", {}),
                              "file": "counters_selftest.json", "metrics_dropped": res.get("metrics_dropped", [])}
    return "ok", "passed" if res.get("passed") else f"checks: {res.get('checks')}"


def find_tests_dir() -> Path | None:
    """The repository's ``tests`` folder when roofprof runs from a checkout (None when installed)."""
    here = Path(__file__).resolve().parents[1] / "tests"
    return here if (here / "conftest.py").is_file() else None


def _section_pytest(dev: Any, st: _State, deadline: float) -> tuple[str, str]:
    folder = find_tests_dir()
    if folder is None:
        st.results["pytest"] = {"returncode": None, "note": "no tests folder (roofprof installed without its tests)"}
        return "unavailable", st.results["pytest"]["note"]
    env = {**os.environ, "ROOFPROF_GPU_TESTS": "1", "NUMBA_ENABLE_CUDASIM": "0", "PYTHONUNBUFFERED": "1"}
    timeout = max(20.0, deadline - time.perf_counter())
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", str(folder)]
    try:
        proc = subprocess.run(cmd, cwd=folder.parent, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        st.results["pytest"] = {"returncode": None, "note": f"timed out after {timeout:.0f} s", "tail": tail[-3000:]}
        return "timeout", st.results["pytest"]["note"]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    summary = next((ln for ln in reversed(lines) if " passed" in ln or " failed" in ln or "no tests ran" in ln
                    or " deselected" in ln or " error" in ln), lines[-1] if lines else "")
    st.results["pytest"] = {"returncode": proc.returncode, "summary": summary.strip("= "), "command": " ".join(cmd),
                            "tail": "\n".join(lines[-40:])}
    # 5: no test selected (no gpu-marked tests collected) is not a failure of the GPU
    return ("ok" if proc.returncode in (0, 5) else "failed"), summary.strip("= ")
