"""The acceptance targets of ``roofprof selftest``: pure arithmetic on the results dict.

Nothing here touches a GPU: every function reads the results dict that ``selftest.json``
holds (or literal records in the CPU tests). A target whose inputs are missing is "not
measured", never a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roofprof.devices.cuda import GEMV_MAX_M

__all__ = [
    "Aggregate",
    "Target",
    "aggregate",
    "clock_scaled",
    "common_ops",
    "evaluate_targets",
    "fp32_lanes_per_sm",
    "hbm_probe",
    "status_word",
]


@dataclass(frozen=True)
class Target:
    """One pass/fail acceptance target: ``value`` compared with ``threshold`` (pass: ≥)."""

    id: str
    description: str
    threshold: float
    value: float | None
    passed: bool | None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "description": self.description,
            "threshold": self.threshold,
            "value": self.value,
            "passed": self.passed,
            "status": status_word(self.passed),
            "detail": self.detail,
        }


def status_word(passed: bool | None) -> str:
    """``pass`` / ``FAIL`` / ``not measured``."""
    return "not measured" if passed is None else ("pass" if passed else "FAIL")


def _ceiling(
    ceilings: Sequence[Mapping[str, Any]],
    *,
    probe: str | Sequence[str],
    level: str | None = None,
    dtype: str | None = None,
) -> Mapping[str, Any] | None:
    names = (probe,) if isinstance(probe, str) else tuple(probe)
    found = [
        c
        for c in ceilings
        if c.get("probe") in names
        and (level is None or c.get("level") == level)
        and (dtype is None or c.get("dtype") == dtype)
        and c.get("value")
    ]
    return max(found, key=lambda c: c["value"], default=None)


def hbm_probe(ceilings: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The best DRAM ceiling of the own HBM probes (``read``, ``copy``)."""
    return _ceiling(ceilings, probe=("read", "copy"), level="dram")


@dataclass(frozen=True)
class Aggregate:
    """Time-weighted totals of one implementation over GEMMs of one pass (:func:`aggregate`)."""

    time_s: float
    bytes: float
    flops: float
    bytes_per_s: float
    flops_per_s: float
    ops: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"time_s", "bytes", "flops", "bytes_per_s", "flops_per_s", "ops"}`` (ops as a list)."""
        return {
            "time_s": self.time_s,
            "bytes": self.bytes,
            "flops": self.flops,
            "bytes_per_s": self.bytes_per_s,
            "flops_per_s": self.flops_per_s,
            "ops": list(self.ops),
        }


def aggregate(
    records: Iterable[Mapping[str, Any]],
    *,
    impl: str,
    model: str,
    phase: str,
    dtype: str,
    batch: int | None = None,
    ops: Iterable[str] | None = None,
    min_m: int = 0,
) -> Aggregate | None:
    """Time-weighted totals of one implementation over the GEMMs of one pass.

    Sums ``count × median_s``, ``count × bytes`` and ``count × flops`` over the ok records
    (restricted to ``ops`` when given, and to ``m > min_m``). Returns ``None`` when there are none.
    Rates are bytes/s and FLOP/s over the summed time (seconds).

    >>> recs = [{"impl": "x", "model": "m", "phase": "decode", "dtype": "bf16", "batch": 1,
    ...          "op": "q", "status": "ok", "median_s": 1e-3, "bytes": 4e9, "flops": 1e9,
    ...          "count": 2}]
    >>> aggregate(recs, impl="x", model="m", phase="decode", dtype="bf16").bytes_per_s
    4000000000000.0
    """
    wanted = set(ops) if ops is not None else None
    rs = [
        r
        for r in records
        if r.get("impl") == impl
        and r.get("model") == model
        and r.get("phase") == phase
        and r.get("dtype") == dtype
        and (batch is None or r.get("batch") == batch)
        and r.get("status") == "ok"
        and r.get("median_s")
        and (wanted is None or r.get("op") in wanted)
        and r.get("m", min_m + 1) > min_m
    ]
    if not rs:
        return None
    t = sum(r["median_s"] * r.get("count", 1) for r in rs)
    b = sum(r["bytes"] * r.get("count", 1) for r in rs)
    f = sum(r["flops"] * r.get("count", 1) for r in rs)
    return Aggregate(
        time_s=t,
        bytes=b,
        flops=f,
        bytes_per_s=b / t,
        flops_per_s=f / t,
        ops=tuple(sorted({r["op"] for r in rs})),
    )


def common_ops(
    records: Iterable[Mapping[str, Any]], impls: Sequence[str], **where: Any
) -> list[str]:
    """Op names measured ok by every implementation in ``impls`` under the same filters."""
    sets = []
    recs = list(records)
    for impl in impls:
        sets.append(
            {
                r["op"]
                for r in recs
                if r.get("impl") == impl
                and r.get("status") == "ok"
                and all(r.get(k) == v for k, v in where.items())
            }
        )
    return sorted(set.intersection(*sets)) if sets else []


def _ratio_target(
    tid: str, description: str, threshold: float, num: float | None, den: float | None, detail: str
) -> Target:
    if not num or not den:
        return Target(tid, description, threshold, None, None, detail or "not measured")
    value = num / den
    return Target(tid, description, threshold, value, value >= threshold, detail)


def fp32_lanes_per_sm(spec: Mapping[str, Any] | None) -> float | None:
    """FP32 lanes per SM from the datasheet row (``fp32 peak / (2 · SMs · vector clock)``).

    ``None`` when the row is missing or lacks one of the three fields (the FMA target is
    then "not measured"; code holds no hardware numbers).

    >>> h100 = {"peak_flops_per_s": {"fp32": 66.9e12}, "sm_count": 132, "vector_clock_mhz": 1980}
    >>> fp32_lanes_per_sm(h100)
    128.0
    >>> fp32_lanes_per_sm(None) is None
    True
    """
    try:
        lanes = spec["peak_flops_per_s"]["fp32"] / (
            2 * spec["sm_count"] * spec["vector_clock_mhz"] * 1e6
        )
        return float(round(lanes)) or None
    except (TypeError, KeyError, ZeroDivisionError):
        return None


def evaluate_targets(results: Mapping[str, Any]) -> list[Target]:
    """The acceptance targets from a results dict (what ``selftest.json`` holds); pure arithmetic.

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
    out.append(
        _ratio_target(
            "hbm_vs_datasheet",
            "HBM probe (best of read/copy, DRAM plateau) ≥ 90% of datasheet",
            0.90,
            hbm_v,
            spec.get("memory_bytes_per_s") if spec else None,
            f"{hbm_name} / datasheet memory bandwidth",
        )
    )
    d2d = _ceiling(ceilings, probe="d2d-copy", level="dram")
    out.append(
        _ratio_target(
            "hbm_vs_d2d",
            "HBM probe ≥ device-to-device copy (cudaMemcpy) in the same run",
            1.0,
            hbm_v,
            d2d["value"] if d2d else None,
            f"{hbm_name} / d2d-copy",
        )
    )

    fma = _ceiling(ceilings, probe="fma-fp32", dtype="fp32")
    ideal = None
    lanes = fp32_lanes_per_sm(spec)
    if fma and fma.get("clock_mhz") and device.get("compute_units") and lanes:
        ideal = device["compute_units"] * lanes * 2 * fma["clock_mhz"] * 1e6
    seen = f", clock seen {fma['clock_mhz']:.0f} MHz" if fma and fma.get("clock_mhz") else ""
    lanes_s = f"lanes/SM {lanes:.0f}" if lanes else "lanes/SM not in the datasheet row"
    out.append(
        _ratio_target(
            "fp32_fma",
            "FP32 FMA probe ≥ 95% of SMs × FP32 lanes × 2 × SM clock seen",
            0.95,
            fma["value"] if fma else None,
            ideal,
            lanes_s + seen,
        )
    )

    bf16_all = [
        c
        for c in ceilings
        if c.get("dtype") == "bf16" and c.get("kind") == "compute" and c.get("value")
    ]
    attainable = max((c["value"] for c in bf16_all), default=None)
    cublas_rates = [c["value"] for c in bf16_all if c.get("probe_kind") == "gemm"]
    cublas_rates += [
        r["flops"] / r["median_s"]
        for r in records
        if r.get("impl") in ("cublas", "torch")
        and r.get("dtype") == "bf16"
        and r.get("status") == "ok"
        and r.get("median_s")
    ]
    out.append(
        _ratio_target(
            "bf16_attainable",
            "attainable bf16 ceiling ≥ 95% of the best cuBLAS bf16 GEMM seen",
            0.95,
            attainable,
            max(cublas_rates, default=None),
            "roofline bf16 compute ceiling / best cuBLAS or torch bf16 rate "
            "(probes and Llama shapes)",
        )
    )

    where = {"model": "llama-3.1-8b", "phase": "decode", "batch": 1}
    cupy = aggregate(records, impl="cupy", dtype="bf16", **where)
    out.append(
        _ratio_target(
            "cupy_gemv_hbm",
            "CuPy GEMV, Llama 3.1 8B decode batch 1 (bf16) ≥ 85% of the HBM probe",
            0.85,
            cupy.bytes_per_s if cupy else None,
            hbm_v,
            "time-weighted bytes/s over the pass's GEMMs (L2 flushed before each call)",
        )
    )
    ops = common_ops(records, ("cupy", "torch"), dtype="bf16", **where)
    a = aggregate(records, impl="cupy", dtype="bf16", ops=ops, **where) if ops else None
    b = aggregate(records, impl="torch", dtype="bf16", ops=ops, **where) if ops else None
    out.append(
        _ratio_target(
            "cupy_gemv_vs_torch",
            "CuPy GEMV ≥ torch.matmul at the same 8B decode shapes (time ratio)",
            1.0,
            b.time_s if b else None,
            a.time_s if a else None,
            f"torch time / cupy time over {', '.join(ops) or 'no common ops'}",
        )
    )
    nb = aggregate(records, impl="numba", dtype="fp16", **where)
    out.append(
        _ratio_target(
            "numba_gemv_hbm",
            "Numba GEMV, Llama 3.1 8B decode batch 1 (fp16) ≥ 70% of the HBM probe",
            0.70,
            nb.bytes_per_s if nb else None,
            hbm_v,
            "time-weighted bytes/s",
        )
    )

    pre = {"model": "llama-3.1-8b", "phase": "prefill"}
    gemms = {
        r["op"] for r in records if r.get("m", GEMV_MAX_M + 1) > GEMV_MAX_M
    }  # not lm_head's M = batch GEMV
    ops = [o for o in common_ops(records, ("cupy", "cublas"), dtype="bf16", **pre) if o in gemms]
    a = (
        aggregate(records, impl="cupy", dtype="bf16", ops=ops, min_m=GEMV_MAX_M, **pre)
        if ops
        else None
    )
    b = (
        aggregate(records, impl="cublas", dtype="bf16", ops=ops, min_m=GEMV_MAX_M, **pre)
        if ops
        else None
    )
    out.append(
        _ratio_target(
            "mma_gemm_vs_cublas",
            "mma.sync GEMM at 8B prefill shapes ≥ 50% of cuBLAS (time ratio)",
            0.50,
            b.time_s if b else None,
            a.time_s if a else None,
            f"cuBLAS time / gemm_mma time over {', '.join(ops) or 'no common ops'}",
        )
    )
    ng = aggregate(records, impl="numba", dtype="fp32", min_m=GEMV_MAX_M, **pre)
    out.append(
        _ratio_target(
            "numba_gemm_fp32",
            "Numba tiled GEMM at 8B prefill shapes (fp32) ≥ 50% of the FP32 FMA ceiling",
            0.50,
            ng.flops_per_s if ng else None,
            fma["value"] if fma else None,
            "time-weighted FLOP/s / fma-fp32 ceiling",
        )
    )

    corr = results.get("correctness") or {}
    kernels = corr.get("kernels") or []
    if kernels:
        failed = [k["kernel"] for k in kernels if not k.get("ok")]
        out.append(
            Target(
                "correctness",
                "every kernel matches its reference before timing",
                1.0,
                (len(kernels) - len(failed)) / len(kernels),
                not failed,
                f"{len(kernels) - len(failed)}/{len(kernels)} passed"
                + (f"; failed: {', '.join(failed[:12])}" if failed else ""),
            )
        )
    else:
        out.append(
            Target(
                "correctness",
                "every kernel matches its reference before timing",
                1.0,
                None,
                None,
                corr.get("note", "not run"),
            )
        )
    counters = results.get("counters") or {}
    passed = counters.get("passed")
    out.append(
        Target(
            "counters",
            "counters.selftest_check: ncu FLOP/byte counts match the analytic counts",
            1.0,
            None if passed is None else float(bool(passed)),
            passed,
            counters.get("note", "")
            or ", ".join(f"{k}={v}" for k, v in (counters.get("checks") or {}).items()),
        )
    )
    py = results.get("pytest") or {}
    rc = py.get("returncode")
    ok = None if rc is None else rc in (0, 5)  # 5: no gpu-marked test was collected
    out.append(
        Target(
            "pytest_gpu",
            "python -m pytest -m gpu passes",
            1.0,
            None if ok is None else float(ok),
            ok,
            py.get("summary", py.get("note", "")),
        )
    )
    return out


def clock_scaled(
    ceilings: Sequence[Mapping[str, Any]], spec: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """Compute ceilings restated at the datasheet clock: ``value × spec clock / clock seen``.

    The tensor clock for ``mma.sync`` and GEMM ceilings, the vector clock for FMA probes;
    ``percent_of_spec`` compares the restated value with the datasheet rate of the dtype.

    >>> fma = {"name": "fp32 FMA", "kind": "compute", "probe": "fma-fp32", "probe_kind": "compute",
    ...        "dtype": "fp32", "value": 60e12, "clock_mhz": 1800}
    >>> spec = {"vector_clock_mhz": 1980, "tensor_clock_mhz": 1830,
    ...         "peak_flops_per_s": {"fp32": 67e12}}
    >>> rows = clock_scaled([fma], spec)
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
            peak = (
                rates.get(c.get("dtype")) if tensor or c.get("dtype") in ("fp32", "fp64") else None
            )
        scaled = scale_to_clock(c["value"], c.get("clock_mhz"), spec_clock)
        out.append(
            {
                "name": c.get("name"),
                "probe": c.get("probe"),
                "dtype": c.get("dtype"),
                "value": c["value"],
                "clock_mhz": c.get("clock_mhz"),
                "spec_clock_mhz": spec_clock,
                "value_at_spec_clock": scaled,
                "spec_flops_per_s": peak,
                "percent_of_spec": 100.0 * scaled / peak if scaled and peak else None,
            }
        )
    return out
