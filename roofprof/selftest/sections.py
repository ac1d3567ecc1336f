"""The GPU sections of ``roofprof selftest``: correctness, roofline, benchmarks, counters, pytest.

Each runner takes ``(device, state, deadline)``, stops between steps once
``time.perf_counter()`` passes ``deadline``, writes what it measured into the state's
results and returns ``(status, note)``. GPU libraries are imported inside the runners.
The correctness section is :mod:`roofprof.selftest.correctness`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from roofprof.devices.base import per_call_timing
from roofprof.errors import DeviceUnavailableError
from roofprof.profiling.engine import Measurement, prepare_checked
from roofprof.selftest.correctness import section_correctness
from roofprof.selftest.plan import benchmark_plan, gemm_ops
from roofprof.selftest.state import RunState, write_results
from roofprof.selftest.targets import aggregate, common_ops
from roofprof.timing import benchmark

__all__ = ["RUNNERS", "Runner", "find_tests_dir"]

# --------------------------------------------------------------------------- section: roofline


def _section_roofline(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
    from roofprof.roofline.probes import measure_roofline

    checks = st.results.get("probe_checks")
    catalogue = [p.name for p in dev.probes()]
    names = [n for n in catalogue if checks is None or checks.get(n)]
    excluded = [n for n in catalogue if n not in names]
    if not names:
        return "error", "no probe passed its check"

    def progress(done: int, total: int, label: str) -> None:
        st.progress(f"  roofline {done}/{total} {label}")

    def keep(result) -> None:
        st.results["roofline"] = _roofline_summary(result)
        write_results(st, complete=False)

    plan = st.roofline_plan or ("quick" if st.quick else "full")
    result = measure_roofline(
        dev,
        plan=plan,
        progress=progress,
        checkpoint=keep,
        probes=names,
        deadline_s=deadline - time.perf_counter(),
    )
    status = "ok" if result.complete else "timeout"
    result.write(st.out / "selftest_roofline.json")
    st.results["roofline"] = _roofline_summary(result)
    st.results["warnings"].extend(result.warnings)
    note = (
        f"{len(result.ceilings)} ceilings in {result.elapsed_s:.0f} s"
        + (f"; excluded (failed check): {', '.join(excluded)}" if excluded else "")
        + (
            f"; stopped at its deadline during {result.interrupted_during}"
            if status == "timeout"
            else ""
        )
    )
    return status, note


def _roofline_summary(result: Any) -> dict[str, Any]:
    keep = (
        "name",
        "probe",
        "probe_kind",
        "kind",
        "level",
        "dtype",
        "value",
        "unit",
        "clock_mhz",
        "source",
        "median_value",
        "cv",
        "noisy",
        "points",
        "spread",
        "note",
    )
    return {
        "ceilings": [{k: c.get(k) for k in keep if k in c} for c in result.ceilings],
        "spec_comparison": dict(result.spec_comparison),
        "complete": result.complete,
        "elapsed_s": result.elapsed_s,
        "file": "selftest_roofline.json",
        "plan": result.plan.get("name"),
    }


# --------------------------------------------------------------------------- section: benchmarks


def _failed_paths(st: RunState) -> set[tuple[str, str]]:
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


def _section_benchmarks(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
    bench = st.results.setdefault("benchmarks", {"records": [], "summary": []})
    bench.update(
        {
            "records": [],
            "summary": [],
            "method": (
                "each (shape, implementation): prepare, check (fresh random inputs, output "
                "poisoned), then timed with CUDA events (launch latency hidden behind a short "
                "delay kernel), L2 flushed before each call when the shape is "
                "memory-bound on the datasheet roofline; median of the timed calls"
            ),
        }
    )
    impls = {i.name: i for i in dev.implementations()}
    failed = _failed_paths(st)
    rng = np.random.default_rng(505)
    timed_out = None
    clock = dev.clock()
    sampler = dev.sampler(interval_s=0.05)
    with sampler:
        for case in st.bench_cases if st.bench_cases is not None else benchmark_plan(st.quick):
            if timed_out:
                break
            st.progress(f"  benchmarks: {case.key}")
            for op in gemm_ops(case):
                if time.perf_counter() > deadline:
                    timed_out = case.key
                    break
                for name in case.impls:
                    base = {
                        "model": case.model,
                        "phase": case.phase,
                        "batch": case.batch,
                        "prompt": case.prompt_tokens,
                        "op": op.name,
                        "m": op.m,
                        "n": op.n,
                        "k": op.k,
                        "dtype": op.dtype,
                        "count": op.count,
                        "flops": op.flops,
                        "bytes": op.bytes,
                        "impl": name,
                    }
                    impl = impls.get(name)
                    reason = "not available" if impl is None else impl.supports(op)
                    if reason:
                        bench["records"].append({**base, "status": "unsupported", "note": reason})
                        continue
                    if (name, op.dtype) in failed:
                        bench["records"].append(
                            {
                                **base,
                                "status": "failed",
                                "note": "its kernels failed the correctness section: not timed",
                            }
                        )
                        continue
                    measured = _measure(dev, impl, op, rng, clock)
                    bench["records"].append({**base, **_bench_fields(measured, op)})
    st.results["telemetry_benchmarks"] = sampler.summary().to_dict()
    _add_ratios(bench)
    ok = sum(r["status"] == "ok" for r in bench["records"])
    return ("timeout" if timed_out else "ok"), f"{ok} measurements" + (
        f"; stopped at its deadline at {timed_out}" if timed_out else ""
    )


def _bench_fields(m: Measurement, op: Any) -> dict[str, Any]:
    """A measurement's fields of a benchmark record in ``selftest.json`` (those its status carries).

    ``ok``: median/min time (s), CV, noisy, repeats, flush, kernels, note, check, and the
    rates at the median time (bytes/s, FLOP/s); otherwise ``note`` (and ``check`` when it ran).
    """
    check = m.check.to_dict() if m.check is not None else None
    if m.ok:
        t = m.timing
        return {
            "status": m.status,
            "median_s": t.median_s,
            "min_s": t.min_s,
            "cv": t.cv,
            "noisy": t.noisy,
            "repeats": t.n,
            "flush": t.flush,
            "kernels": m.kernels,
            "note": m.note,
            "check": check,
            "bytes_per_s": op.bytes / t.median_s,
            "flops_per_s": op.flops / t.median_s,
        }
    out: dict[str, Any] = {"status": m.status, "note": m.note}
    if check is not None:
        out["check"] = check
    return out


def _measure(dev: Any, impl: Any, op: Any, rng: np.random.Generator, clock: Any) -> Measurement:
    """Check then time one (shape, implementation):
    :func:`roofprof.profiling.engine.prepare_checked`, then :func:`roofprof.timing.benchmark`
    of one call (L2 flushed when memory-bound) or, for a batched small op, of its
    ``batched_calls`` (N calls per sample, divided by N:
    :func:`~roofprof.devices.base.per_call_timing`), so a µs op is not timed at the
    event timer's 0.5 µs resolution."""
    prepared, checked = prepare_checked(impl, op, rng)
    if prepared is None:
        return checked
    try:
        flush = dev.flush if _memory_bound(dev, op) else None
        timing = benchmark(
            getattr(prepared, "batched_calls", None) or prepared.run,
            clock=clock,
            budget_s=0.05,
            warmup_s=0.01,
            flush=flush,
            min_repeats=5,
            max_repeats=200,
            estimate_runs=1,
        )
        return replace(checked, timing=per_call_timing(timing, prepared))
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is reported, never fatal
        return Measurement(impl.name, "error", f"{type(exc).__name__}: {exc}")
    finally:
        try:
            prepared.release()
        except Exception:  # noqa: BLE001 - releasing after a fault must not hide the record
            pass


def _add_ratios(bench: dict[str, Any]) -> None:
    """Per record ``vs_cublas`` (cuBLAS time / this time, same shape) and a per-pass summary."""
    recs = bench["records"]
    cublas = {
        (r["model"], r["phase"], r["batch"], r["dtype"], r["op"]): r["median_s"]
        for r in recs
        if r["impl"] == "cublas" and r["status"] == "ok"
    }
    for r in recs:
        c = cublas.get((r["model"], r["phase"], r["batch"], r["dtype"], r["op"]))
        if r["status"] == "ok" and c:
            r["vs_cublas"] = c / r["median_s"]
    passes = sorted(
        {
            (r["model"], r["phase"], r["batch"], r["dtype"], r["impl"])
            for r in recs
            if r["status"] == "ok"
        }
    )
    summary = []
    for model, phase, batch, dtype, impl in passes:
        agg = aggregate(recs, impl=impl, model=model, phase=phase, batch=batch, dtype=dtype)
        ops = common_ops(recs, (impl, "cublas"), model=model, phase=phase, batch=batch, dtype=dtype)
        mine = (
            aggregate(recs, impl=impl, model=model, phase=phase, batch=batch, dtype=dtype, ops=ops)
            if ops
            else None
        )
        ref = (
            aggregate(
                recs, impl="cublas", model=model, phase=phase, batch=batch, dtype=dtype, ops=ops
            )
            if ops
            else None
        )
        summary.append(
            {
                "model": model,
                "phase": phase,
                "batch": batch,
                "dtype": dtype,
                "impl": impl,
                "time_s": agg.time_s,
                "bytes_per_s": agg.bytes_per_s,
                "flops_per_s": agg.flops_per_s,
                "ops": list(agg.ops),
                "vs_cublas": ref.time_s / mine.time_s if mine and ref else None,
            }
        )
    bench["summary"] = summary


# ----------------------------------------------------------------------- sections: counters, pytest


def _section_counters(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
    from roofprof.selftest.counters import selftest_check

    remaining = max(20.0, deadline - time.perf_counter())
    try:
        res = selftest_check(st.out, timeout_s=remaining)
    except DeviceUnavailableError as exc:  # ncu missing, counters not permitted
        st.results["counters"] = {"passed": None, "note": str(exc)}
        return "unavailable", str(exc)
    st.results["counters"] = {
        "passed": bool(res.get("passed")),
        "checks": res.get("checks", {}),
        "file": "counters_selftest.json",
        "metrics_dropped": res.get("metrics_dropped", []),
    }
    return "ok", "passed" if res.get("passed") else f"checks: {res.get('checks')}"


def find_tests_dir() -> Path | None:
    """The repository's ``tests`` folder when roofprof runs from a checkout (None when
    installed)."""
    here = Path(__file__).resolve().parents[2] / "tests"
    return here if (here / "conftest.py").is_file() else None


def _section_pytest(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
    folder = find_tests_dir()
    if folder is None:
        st.results["pytest"] = {
            "returncode": None,
            "note": "no tests folder (roofprof installed without its tests)",
        }
        return "unavailable", st.results["pytest"]["note"]
    env = {
        **os.environ,
        "ROOFPROF_GPU_TESTS": "1",
        "NUMBA_ENABLE_CUDASIM": "0",
        "PYTHONUNBUFFERED": "1",
    }
    timeout = max(20.0, deadline - time.perf_counter())
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", str(folder)]
    try:
        proc = subprocess.run(
            cmd, cwd=folder.parent, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        st.results["pytest"] = {
            "returncode": None,
            "note": f"timed out after {timeout:.0f} s",
            "tail": tail[-3000:],
        }
        return "timeout", st.results["pytest"]["note"]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    summary = next(
        (
            ln
            for ln in reversed(lines)
            if " passed" in ln
            or " failed" in ln
            or "no tests ran" in ln
            or " deselected" in ln
            or " error" in ln
        ),
        lines[-1] if lines else "",
    )
    st.results["pytest"] = {
        "returncode": proc.returncode,
        "summary": summary.strip("= "),
        "command": " ".join(cmd),
        "tail": "\n".join(lines[-40:]),
    }
    # 5: no test selected (no gpu-marked tests collected) is not a failure of the GPU
    return ("ok" if proc.returncode in (0, 5) else "failed"), summary.strip("= ")


Runner = Callable[[Any, RunState, float], tuple[str, str]]
"""A section runner: ``(device, state, deadline on time.perf_counter()) -> (status, note)``."""

RUNNERS: dict[str, Runner] = {
    "correctness": section_correctness,
    "roofline": _section_roofline,
    "benchmarks": _section_benchmarks,
    "counters": _section_counters,
    "pytest": _section_pytest,
}
"""The runner of each section, by name (the order of ``roofprof.selftest.SECTIONS``)."""
