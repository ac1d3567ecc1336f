"""The Nsight Compute self-check of ``roofprof selftest``: counters of two known kernels.

Runs a bf16 GEMM and an fp32 axpy of known shape under ``ncu`` (torch in a child process,
each inside an NVTX range) and checks the counter arithmetic of :mod:`roofprof.counters`
against the analytic counts of two :class:`~roofprof.workload.Op` records: the GEMM must
count ``2*M*N*K`` tensor FLOPs within 10%, on the tensor pipe, and at least 90% of its
minimum DRAM traffic.

>>> [op.name for op in selftest_ops()]
['selftest.gemm_bf16', 'selftest.axpy_fp32']
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from roofprof.counters import collection
from roofprof.counters.errors import CounterWarning
from roofprof.counters.hierarchical import compare_with_ops
from roofprof.counters.metrics import (
    BYTE_METRICS,
    CUDA_CORE_FLOPS,
    CUDA_CORE_FLOPS_EXTRA,
    LEVELS,
    TENSOR_INST_METRIC,
    TIME_METRIC,
    family_for_cc,
    tensor_table,
)
from roofprof.specs import BYTES_PER_ELEMENT
from roofprof.workload import Op

__all__ = ["selftest_check", "selftest_ops"]

_SELFTEST_M = _SELFTEST_N = _SELFTEST_K = 4096
_SELFTEST_VECTOR = 1 << 24
_SELFTEST_WORKLOAD = f"""
import torch
from roofprof.counters.nvtx import nvtx_range
assert torch.cuda.is_available(), "selftest workload needs torch with CUDA"
M, N, K, V = {_SELFTEST_M}, {_SELFTEST_N}, {_SELFTEST_K}, {_SELFTEST_VECTOR}
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
x = torch.randn(V, device="cuda", dtype=torch.float32)
y = torch.randn(V, device="cuda", dtype=torch.float32)
for _ in range(2):  # warm-up outside any range: cuBLAS heuristics, lazy module loading
    c = a @ b
    y.add_(x, alpha=2.0)
torch.cuda.synchronize()
with nvtx_range("roofprof.selftest.gemm_bf16"):
    c = a @ b
    torch.cuda.synchronize()
with nvtx_range("roofprof.selftest.axpy_fp32"):
    y.add_(x, alpha=2.0)
    torch.cuda.synchronize()
"""


def _pythonpath_with_repo() -> str:
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def selftest_ops() -> list[Op]:
    """The two ops the workload runs, with their analytic FLOPs and minimum bytes (one call each).

    The GEMM ``[M,K]·[K,N]`` in bf16 (``2*M*N*K`` FLOPs, each operand read or written once);
    the axpy ``y += 2x`` on V fp32 elements (an FMA each: ``2V`` FLOPs; x, y read, y written).
    """
    m, n, k, v = _SELFTEST_M, _SELFTEST_N, _SELFTEST_K, _SELFTEST_VECTOR
    bf16, fp32 = BYTES_PER_ELEMENT["bf16"], BYTES_PER_ELEMENT["fp32"]
    return [
        Op(name="selftest.gemm_bf16", kind="gemm", phase="selftest", m=m, n=n, k=k, dtype="bf16",
           flops=2.0 * m * n * k, bytes=float(bf16 * (m * k + k * n + m * n)), scope="model"),
        Op(name="selftest.axpy_fp32", kind="elementwise", phase="selftest", m=1, n=v, k=0,
           dtype="fp32",
           flops=2.0 * v, bytes=float(fp32 * 3 * v), scope="model"),
    ]  # fmt: skip


def selftest_check(
    out_dir: str | os.PathLike, *, ncu: str | None = None, timeout_s: float = 480
) -> dict[str, Any]:
    """Collect counters for a bf16 GEMM and an fp32 axpy on this GPU and check the arithmetic.

    Records which metric names of the table exist here (``ncu --query-metrics``), which
    were dropped, and how counter FLOPs and DRAM bytes compare with the analytic counts
    (the bf16 GEMM must count 2*M*N*K tensor FLOPs within 10%, which checks the
    ops-are-FLOPs reading of ``sm__ops_path_tensor_*``). Writes
    ``out_dir/counters_selftest.json`` and ``out_dir/counters_selftest.csv``; for
    ``roofprof selftest`` and the ``gpu`` tests. Returns the record written (a JSON dict).

    Raises:
        NcuNotFoundError, CounterPermissionError, CollectionError: as
            :func:`roofprof.counters.collect`.
    """
    from roofprof.results import provenance, write_json_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ncu_path = collection.find_ncu(ncu)
    cc = collection.detect_compute_capability()
    family = family_for_cc(cc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CounterWarning)
        available = collection.query_available_metrics(ncu_path)
        table_names = sorted(
            {m for alts in tensor_table(family).values() for alt in alts for m, _ in alt}
            | {m for alts in BYTE_METRICS.values() for alt in alts for m in alt}
            | {m for pairs in CUDA_CORE_FLOPS.values() for m, _ in pairs}
            | {
                m
                for pairs in CUDA_CORE_FLOPS_EXTRA.get(family or "", {}).values()
                for m, _ in pairs
            }
            | {TIME_METRIC, TENSOR_INST_METRIC}
        )
        coll = collection.collect(
            [sys.executable, "-c", _SELFTEST_WORKLOAD],
            out / "counters_selftest.csv",
            ncu=ncu_path,
            compute_capability=cc,
            timeout_s=timeout_s,
            env={"PYTHONPATH": _pythonpath_with_repo()},
        )
    comparisons = compare_with_ops(coll.records, selftest_ops())
    by_op = {c.op: c for c in comparisons}
    gemm = by_op.get("selftest.gemm_bf16")
    checks = {
        "gemm_tensor_flops_within_10pct": bool(
            gemm and gemm.flop_ratio and abs(gemm.flop_ratio - 1) <= 0.10
        ),
        "gemm_on_tensor_pipe": bool(gemm and (gemm.expected_pipe_fraction or 0) >= 0.9),
        "gemm_dram_at_least_90pct_of_min": bool(gemm and (gemm.excess_traffic or 0) >= 0.9),
    }
    # Seen, not checked: on Hopper, TMA loads bypass L1, so L1 bytes can be below DRAM bytes.
    observations = {
        r.range_name or r.name: {lvl: r.bytes_at(lvl) for lvl in LEVELS} for r in coll.records
    }
    result = {
        "provenance": provenance(
            device_cc=cc, family=family, ncu=ncu_path, ncu_version=coll.ncu_version
        ),
        "family": family,
        "cc": cc,
        "metric_names_verified": available is not None,
        "table_names_seen": {
            name: (collection.base_metric_name(name) in available) if available else None
            for name in table_names
        },
        "metrics_requested": list(coll.plan.metrics),
        "metrics_dropped": list(coll.plan.dropped),
        "warnings": [str(w.message) for w in caught],
        "ncu_command": list(coll.ncu_command[: coll.ncu_command.index(sys.executable)]),
        "kernels": [r.to_dict() for r in coll.records],
        "ops": [c.to_dict() for c in comparisons],
        "bytes_by_level": observations,
        "checks": checks,
        "passed": all(checks.values()) and len(comparisons) == 2,
    }
    write_json_atomic(out / "counters_selftest.json", result)
    return result
