"""The ``correctness`` section of ``roofprof selftest``: every kernel checked before timing.

Every CUDA C entry point (``gemv.cu`` on ragged shapes with and without split-K and padded
rows, ``gemm_mma.cu`` on small and ragged shapes, both output types), every probe of the
catalogue (its own check), every Numba registry kernel and every op implementation, on fresh
random data against float64 numpy with outputs poisoned first. Each result is one record in
``results["correctness"]["kernels"]``; a kernel that fails is never timed (the benchmarks
section reads these records). GPU libraries are imported inside the checks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from roofprof.selftest.state import RunState
from roofprof.specs import BYTES_PER_ELEMENT

__all__ = ["section_correctness"]


def _record(st: RunState, kernel: str, ok: bool, note: str, **extra: Any) -> None:
    corr = st.results.setdefault("correctness", {"kernels": []})
    corr["kernels"].append({"kernel": kernel, "ok": bool(ok), "note": note, **extra})
    if not ok:
        st.progress(f"  FAILED {kernel}: {note}")


def section_correctness(dev: Any, st: RunState, deadline: float) -> tuple[str, str]:
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
    note = f"{len(kernels) - failed}/{len(kernels)} passed" + (
        f"; not reached: {', '.join(skipped)}" if skipped else ""
    )
    return ("ok" if not skipped else "timeout"), note


def _op(name: str, m: int, n: int, k: int, dtype: str, phase: str = "decode"):
    from roofprof.workload import Op

    item = BYTES_PER_ELEMENT[dtype]
    return Op(
        name, "gemm", phase, m, n, k, dtype, 2.0 * m * n * k, float(item * (m * k + n * k + m * n))
    )


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
                    plan = cm.gemv_plan(
                        m,
                        n,
                        k,
                        dt,
                        dev.sm_count,
                        splits=splits,
                        ldx=k_pad if padded else None,
                        ldw=k_pad if padded else None,
                    )
                    op = _op(
                        f"gemv m={m} splits={splits} {'padded' if padded else 'unpadded'}",
                        m,
                        n,
                        k,
                        dt,
                    )
                    entries = [plan.main.entry] + ([plan.reduce.entry] if plan.reduce else [])
                    if reason:
                        result = (False, math.inf, reason)
                    else:
                        try:
                            result = _run_check(
                                lambda plan=plan, op=op, padded=padded: gemv_prepared(
                                    dev,
                                    op,
                                    rng,
                                    plan,
                                    ldx=k_pad if padded else None,
                                    ldw=k_pad if padded else None,
                                )
                            )
                        except Exception as exc:  # noqa: BLE001
                            result = (False, math.inf, f"{type(exc).__name__}: {exc}")
                    for e in entries:
                        by_entry.setdefault(e, []).append((*result[:2], f"{op.name}: {result[2]}"))
        for entry, results in by_entry.items():
            bad = [r for r in results if not r[0]]
            worst = max((r[1] for r in results), default=0.0)
            note = (
                (
                    f"{len(results)} cases (M 1..17, N={n}, K={k} with a tail, split-K 1/3, "
                    "padded/unpadded rows); "
                    f"worst rel. error {worst:.2e}"
                )
                if not bad
                else bad[0][2]
            )
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
                        op = _op(
                            f"{entry} {m}×{n}×{k}",
                            m,
                            n,
                            k,
                            out_dt if out_dt == "fp32" else dt,
                            "prefill",
                        )
                        if reason:
                            results.append((False, math.inf, reason))
                            continue

                        def make(m=m, n=n, k=k, op=op, dt=dt, out_dt=out_dt, entry=entry):
                            bufs = CupyBuffers(
                                dev,
                                {"x": (m, k), "w": (n, k), "y": (m, n)},
                                dt,
                                op.name,
                                dtypes={"y": out_dt},
                            )
                            launch = cm.gemm_launch(m, n, k, dt, out_dt)
                            args = (
                                bufs["x"],
                                bufs["w"],
                                bufs["y"],
                                np.int32(m),
                                np.int32(n),
                                np.int32(k),
                            )
                            return PreparedGemm(
                                dev,
                                op,
                                rng,
                                bufs,
                                lambda: dev.launch(launch.entry, launch.grid, launch.block, args),
                                entry,
                            )

                        try:
                            ok, err, note = _run_check(make)
                        except Exception as exc:  # noqa: BLE001
                            ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
                        results.append((ok, err, f"{op.name}: {note}"))
            bad = [r for r in results if not r[0]]
            worst = max((r[1] for r in results), default=0.0)
            _record(
                st,
                entry,
                not bad,
                bad[0][2]
                if bad
                else f"{len(results)} shapes (M 1/17/130, N 8/136, "
                f"K 8/48/264); worst rel. error {worst:.2e}",
                cases=len(results),
                worst_rel_error=worst,
            )


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
        _record(
            st,
            f"probe {skipped['probe']}",
            True,
            f"skipped on this GPU: {skipped['reason']}",
            skipped=True,
        )
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
    shapes = {
        "gemv": {"M": 3, "N": 37, "K": 1003},
        "gemm": {"M": 130, "N": 136, "K": 72},
        "read": {"n": 100_003},
        "copy": {"n": 100_003},
        "fma": {"threads": 1000, "iters": 3},
        "sweep": {"n": 10_007, "k": 5},
    }
    rng = np.random.default_rng(303)
    for name, spec in nk.KERNELS.items():
        if reason:
            _record(st, f"numba {name}", False, reason)
            continue
        shape = shapes.get(spec.probe or spec.op)
        try:
            from numba import cuda

            inputs = spec.make_inputs(shape, rng)
            dev_in = {
                k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()
            }
            init = (np.zeros if spec.accumulates else lambda s, dtype: np.full(s, np.nan, dtype))(
                spec.out_shape(shape), dtype=spec.out_np_dtype
            )
            out = cuda.to_device(init)
            grid, block = spec.launch(shape, dev.sm_count)
            dev.last_kernel = f"numba {name}"
            spec.kernel_for(shape, dev.sm_count)[grid, block](*spec.call_args(dev_in, out))
            cuda.synchronize()
            got = out.copy_to_host().astype(np.float64)
            ref = spec.reference(inputs, shape) + (
                init.astype(np.float64) if spec.accumulates else 0.0
            )
            rtol, atol = spec.tolerance(shape)
            finite = bool(np.all(np.isfinite(got)))
            ok = finite and bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)))
            err = float(np.max(np.abs(got - ref))) if finite else math.inf
            _record(
                st,
                f"numba {name}",
                ok,
                f"{shape}: max abs error {err:.3g} (rtol {rtol:.2g}, atol {atol:.2g})"
                + ("" if finite else "; non-finite output (poison left?)"),
            )
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
    for phase, kw in (
        ("decode", {"batch": 2, "context_tokens": 64}),
        ("prefill", {"batch": 1, "prompt_tokens": 64}),
    ):
        for op in models.ops(Scenario.of("llama-3.2-1b", phase, dtype="bf16", **kw)).ops:
            if ref.supports(op) is not None:
                continue
            try:
                ok, err, note = _run_check(lambda op=op: ref.prepare(op, rng))
            except Exception as exc:  # noqa: BLE001
                ok, err, note = False, math.inf, f"{type(exc).__name__}: {exc}"
            _record(st, f"impl cupy-ref {phase} {op.name}", ok, note, rel_error=err)
