"""``roofprof selftest``: everything a GPU has to prove, in one command of under 8 minutes.

Sections, in order, each time-boxed (a section that runs out of time stops between steps
and keeps what it finished; the results file is rewritten whole after every section):

1. ``correctness`` — every CUDA C entry point (``gemv.cu`` on ragged M, N, K with and
   without split-K and padded rows; ``gemm_mma.cu`` on M ∈ {1, 17, 130}, N ∈ {8, 136},
   K ∈ {8, 48, 264}, both output types), every probe of the catalogue (its own check),
   every Numba registry kernel, and every op implementation (``cupy``, ``numba``,
   ``cublas``, ``torch``, ``cupy-ref``) on fresh random data against float64 numpy,
   outputs poisoned first. A kernel that fails is reported and never timed.
2. ``roofline`` — :func:`roofprof.roofline.probes.measure_roofline` over the probes that passed;
   compute ceilings restated at the datasheet clock (rate × spec clock / clock seen).
3. ``benchmarks`` — Llama shapes from :func:`roofprof.models.ops` (3.1 8B and 70B,
   3.2 1B and 3B; decode M = batch, prefill M = batch × prompt), each implementation
   checked then timed (CUDA events, L2 flushed before each call for memory-bound shapes),
   each as a ratio against cuBLAS in the same run.
4. ``counters`` — :func:`roofprof.selftest.counters.selftest_check` (Nsight Compute).
5. ``pytest`` — ``python -m pytest -m gpu`` with ``ROOFPROF_GPU_TESTS=1`` and
   ``NUMBA_ENABLE_CUDASIM=0``.

Then the acceptance targets are evaluated (:func:`evaluate_targets`, a pure function of
the results) and written to ``selftest.json`` (with provenance) and ``selftest.md``.

Modules: :mod:`~roofprof.selftest.targets` (the targets; pure arithmetic),
:mod:`~roofprof.selftest.markdown` (``selftest.md``), :mod:`~roofprof.selftest.plan` (the
Llama passes benchmarked), :mod:`~roofprof.selftest.state` (the results being built),
:mod:`~roofprof.selftest.sections` (the GPU section runners),
:mod:`~roofprof.selftest.correctness` (the correctness section) and
:mod:`~roofprof.selftest.counters` (the Nsight Compute self-check). Importing the package
imports no GPU library; the sections import theirs when they run.

Without a usable GPU :func:`run_selftest` raises
:class:`~roofprof.errors.DeviceUnavailableError` (the CLI: one line, exit 2).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.selftest.markdown import markdown_report
from roofprof.selftest.plan import MODELS, PROMPT_TOKENS, BenchCase, benchmark_plan, gemm_ops
from roofprof.selftest.sections import RUNNERS, find_tests_dir
from roofprof.selftest.state import Progress, RunState, SectionResult, SectionTimeout, write_results
from roofprof.selftest.targets import (
    Aggregate,
    Target,
    aggregate,
    clock_scaled,
    common_ops,
    evaluate_targets,
    fp32_lanes_per_sm,
    hbm_probe,
    status_word,
)

__all__ = [
    "DEFAULT_BUDGET_S",
    "INSTALL_HINT",
    "MIN_SECTION_S",
    "MODELS",
    "PROMPT_TOKENS",
    "SCHEMA",
    "SECTIONS",
    "SHARES",
    "Aggregate",
    "BenchCase",
    "Progress",
    "SectionResult",
    "SectionTimeout",
    "Target",
    "aggregate",
    "benchmark_plan",
    "clock_scaled",
    "common_ops",
    "evaluate_targets",
    "find_tests_dir",
    "fp32_lanes_per_sm",
    "gemm_ops",
    "hbm_probe",
    "markdown_report",
    "open_gpu",
    "run_selftest",
    "status_word",
]

SCHEMA = "roofprof.selftest/1"
DEFAULT_BUDGET_S = 450.0
SECTIONS = ("correctness", "roofline", "benchmarks", "counters", "pytest")
#: Share of the budget each section may use (cumulative deadlines; leftovers carry over).
SHARES = {
    "correctness": 0.20,
    "roofline": 0.22,
    "benchmarks": 0.30,
    "counters": 0.12,
    "pytest": 0.14,
}
MIN_SECTION_S = 10.0
INSTALL_HINT = (
    "roofprof selftest needs an NVIDIA GPU with its driver; install CuPy for it: "
    "pip install 'roofprof[cuda12]' (or 'roofprof[cuda13]' with a CUDA 13 driver)"
)


def _deadlines(budget_s: float, t0: float) -> dict[str, float]:
    acc, out = 0.0, {}
    for name in SECTIONS:
        acc += SHARES[name]
        out[name] = t0 + acc * budget_s
    return out


def run_selftest(
    out_dir: str | os.PathLike,
    *,
    quick: bool = False,
    budget_s: float = DEFAULT_BUDGET_S,
    device: Any = "cuda:0",
    sections: Sequence[str] = SECTIONS,
    progress: Progress | None = None,
    roofline_plan: Any = None,
    bench_cases: Sequence[BenchCase] | None = None,
) -> dict[str, Any]:
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
        raise ConfigError(
            f"unknown selftest section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}"
        )
    dev = open_gpu(device)
    out = check_writable_dir(out_dir)
    st = RunState(
        out=out,
        budget_s=float(budget_s),
        quick=quick,
        progress=progress or (lambda msg: None),
        roofline_plan=roofline_plan,
        bench_cases=bench_cases,
    )
    res = st.results
    res.update(
        {
            "schema": SCHEMA,
            "complete": False,
            "quick": quick,
            "budget_s": budget_s,
            "device": dev.info.to_dict(),
            "gpu": dev.describe(),
            "spec": _spec_dict(dev),
            "sections": {},
            "warnings": [],
        }
    )
    try:
        from roofprof.devices.cuda import skipped_probes

        res["skipped_probes"] = skipped_probes(dev)
    except Exception as exc:  # noqa: BLE001
        res["skipped_probes"] = [{"probe": "*", "reason": f"catalogue failed: {exc}"}]
    deadlines = _deadlines(st.budget_s, st.t0)
    try:
        for name in SECTIONS:
            if name not in sections:
                res["sections"][name] = SectionResult("skipped", 0.0, "not requested").to_dict()
                continue
            deadline = max(deadlines[name], time.perf_counter() + MIN_SECTION_S)
            if time.perf_counter() > st.t0 + st.budget_s + 30:
                note = "no time left in the budget"
                res["sections"][name] = SectionResult("skipped", 0.0, note).to_dict()
                continue
            st.progress(f"selftest: {name} (until +{deadline - st.t0:.0f} s)")
            t = time.perf_counter()
            try:
                status, note = RUNNERS[name](dev, st, deadline)
            except KeyboardInterrupt:
                elapsed = time.perf_counter() - t
                res["sections"][name] = SectionResult("interrupted", elapsed, "Ctrl-C").to_dict()
                raise
            except Exception as exc:  # noqa: BLE001 - a section failing never loses the others
                status, note = "error", f"{type(exc).__name__}: {exc}"
            res["sections"][name] = SectionResult(status, time.perf_counter() - t, note).to_dict()
            _release(dev)
            write_results(st, complete=False)
        res["complete"] = all(
            s.get("status") in ("ok", "skipped") for s in res["sections"].values()
        )
    finally:
        write_results(st, complete=res.get("complete", False))
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
    return {
        "id": spec.id,
        "name": spec.name,
        "memory_bytes_per_s": spec.memory_bytes_per_s,
        "vector_clock_mhz": spec.vector_clock_mhz,
        "tensor_clock_mhz": spec.tensor_clock_mhz,
        "sm_count": spec.sm_count,
        "peak_flops_per_s": dict(spec.peak_flops_per_s),
    }
