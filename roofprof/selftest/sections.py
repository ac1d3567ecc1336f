"""The GPU sections of ``roofprof selftest``: correctness, roofline, benchmarks, counters, pytest.

Each runner takes ``(device, state, deadline)``, stops between steps once
``time.perf_counter()`` passes ``deadline``, writes what it measured into the state's
results and returns ``(status, note)``. GPU libraries are imported inside the runners.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from roofprof.errors import DeviceUnavailableError
from roofprof.measurement import Measurement, prepare_checked
from roofprof.selftest.plan import benchmark_plan, gemm_ops
from roofprof.selftest.state import RunState, SectionTimeout, write_results
from roofprof.selftest.targets import aggregate, common_ops
from roofprof.specs import BYTES_PER_ELEMENT
from roofprof.timing import benchmark

__all__ = ["RUNNERS", "Runner", "find_tests_dir"]

# --------------------------------------------------------------------------- section: correctness


def _record(st: RunState, kernel: str, ok: bool, note: str, **extra: Any) -> None:
    corr = st.results.setdefault("correctness", {"kernels": []})
    corr["kernels"].append({"kernel": kernel, "ok": bool(ok), "note": note, **extra})
    if not ok:
        st.progress(f"  FAILED {kernel}: {note}")


def _section_correctness(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
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

    item = BYTES_PER_ELEMENT[dtype]
    return Op(name, "gemm", phase, m, n, k, dtype, 2.0 * m * n * k, float(item * (m * k + n * k + m * n)))


def _run_check(prep_factory: Callable[[], Any]) -> tuple[bool, float, str]:
    prep = prep_factory()
    try:
        res = prep.check()
        return res.ok, res.max_rel_error, res.note
    finally:
        prep.release()


def _check_gemv_entries(dev: Any, st: RunState) -> None:
    from roofprof.devices.cuda import gemv_prepared

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


def _check_gemm_entries(dev: Any, st: RunState) -> None:
    from roofprof.devices.cuda import CupyBuffers, PreparedGemm

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


def _check_probes(dev: Any, st: RunState) -> None:
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
        from roofprof.devices.cuda import launch_latency

        st.results["launch_latency"] = launch_latency(dev)
        _record(st, "probe_empty", True, "launched 1000 times without a CUDA error")
    except Exception as exc:  # noqa: BLE001
        _record(st, "probe_empty", False, f"{type(exc).__name__}: {exc}")


def _check_numba_registry(dev: Any, st: RunState) -> None:
    from roofprof.devices.cuda import kernels_module, numba_cuda_reason

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


def _check_impls(dev: Any, st: RunState) -> None:
    from roofprof import models
    from roofprof.workload import Scenario

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
    for phase, kw in (("decode", {"batch": 2, "context_tokens": 64}),
                      ("prefill", {"batch": 1, "prompt_tokens": 64})):
        for op in models.ops(Scenario.of("llama-3.2-1b", phase, dtype="bf16", **kw)).ops:
            if ref.supports(op) is not None:
                continue
            try:
                ok, err, note = _run_check(lambda op=op: ref.prepare(op, rng))
            except Exception as exc:  # noqa: BLE001
                ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
            _record(st, f"impl cupy-ref {phase} {op.name}", ok, note, rel_error=err)


# --------------------------------------------------------------------------- section: roofline


def _section_roofline(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
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
        write_results(st, complete=False)

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
                    measured = _measure(dev, impl, op, rng, clock)
                    bench["records"].append({**base, **_bench_fields(measured, op)})
    st.results["telemetry_benchmarks"] = sampler.summary().to_dict()
    _add_ratios(bench)
    ok = sum(r["status"] == "ok" for r in bench["records"])
    return ("timeout" if timed_out else "ok"), f"{ok} measurements" + (
        f"; stopped at its deadline at {timed_out}" if timed_out else "")


def _bench_fields(m: Measurement, op: Any) -> dict[str, Any]:
    """A measurement's fields of a benchmark record in ``selftest.json`` (those its status carries).

    ``ok``: median/min time (s), CV, noisy, repeats, flush, kernels, note, check, and the
    rates at the median time (bytes/s, FLOP/s); otherwise ``note`` (and ``check`` when it ran).
    """
    check = m.check.to_dict() if m.check is not None else None
    if m.ok:
        t = m.timing
        return {"status": m.status, "median_s": t.median_s, "min_s": t.min_s, "cv": t.cv, "noisy": t.noisy,
                "repeats": t.n, "flush": t.flush, "kernels": m.kernels, "note": m.note, "check": check,
                "bytes_per_s": op.bytes / t.median_s, "flops_per_s": op.flops / t.median_s}
    out: dict[str, Any] = {"status": m.status, "note": m.note}
    if check is not None:
        out["check"] = check
    return out


def _measure(dev: Any, impl: Any, op: Any, rng: np.random.Generator, clock: Any) -> Measurement:
    """Check then time one (shape, implementation): :func:`roofprof.measurement.prepare_checked`,
    then :func:`roofprof.timing.benchmark` of one call (L2 flushed when memory-bound)."""
    prepared, checked = prepare_checked(impl, op, rng)
    if prepared is None:
        return checked
    try:
        flush = dev.flush if _memory_bound(dev, op) else None
        timing = benchmark(prepared.run, clock=clock, budget_s=0.05, warmup_s=0.01, flush=flush, min_repeats=5,
                           max_repeats=200, estimate_runs=1)
        return replace(checked, timing=timing)
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
                        "time_s": agg.time_s, "bytes_per_s": agg.bytes_per_s,
                        "flops_per_s": agg.flops_per_s, "ops": list(agg.ops),
                        "vs_cublas": ref.time_s / mine.time_s if mine and ref else None})
    bench["summary"] = summary


# --------------------------------------------------------------------------- sections: counters, pytest


def _section_counters(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
    from roofprof.selftest.counters import selftest_check

    remaining = max(20.0, deadline - time.perf_counter())
    try:
        res = selftest_check(st.out, timeout_s=remaining)
    except DeviceUnavailableError as exc:  # ncu missing, counters not permitted
        st.results["counters"] = {"passed": None, "note": str(exc)}
        return "unavailable", str(exc)
    st.results["counters"] = {"passed": bool(res.get("passed")), "checks": res.get("checks", {}),
                              "file": "counters_selftest.json", "metrics_dropped": res.get("metrics_dropped", [])}
    return "ok", "passed" if res.get("passed") else f"checks: {res.get('checks')}"


def find_tests_dir() -> Path | None:
    """The repository's ``tests`` folder when roofprof runs from a checkout (None when installed)."""
    here = Path(__file__).resolve().parents[2] / "tests"
    return here if (here / "conftest.py").is_file() else None


def _section_pytest(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
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


Runner = Callable[[Any, RunState, float], tuple[str, str]]
"""A section runner: ``(device, state, deadline on time.perf_counter()) -> (status, note)``."""

RUNNERS: dict[str, Runner] = {"correctness": _section_correctness, "roofline": _section_roofline,
                              "benchmarks": _section_benchmarks, "counters": _section_counters,
                              "pytest": _section_pytest}
"""The runner of each section, by name (the order of ``roofprof.selftest.SECTIONS``)."""
