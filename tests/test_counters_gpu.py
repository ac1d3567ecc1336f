"""Real collection under Nsight Compute on a GPU (skipped without one; run by `roofprof selftest`).

Checks, on whatever GPU is present (Hopper on the project's H200): which metric names of
the table ncu knows there, and that a bf16 GEMM of known shape counts 2*M*N*K tensor
FLOPs within 10% on the tensor pipe with at least 90% of its minimum DRAM bytes. What was
seen goes to ``$ROOFPROF_SELFTEST_OUT/counters_selftest.json`` (default: pytest's tmp dir)
for BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roofprof import counters as c
from roofprof.selftest.counters import selftest_check


@pytest.mark.gpu
def test_counters_selftest_on_this_gpu(tmp_path):
    try:
        c.find_ncu()
    except c.NcuNotFoundError as exc:
        pytest.skip(str(exc))
    pytest.importorskip("torch")
    out = Path(os.environ.get("ROOFPROF_SELFTEST_OUT", tmp_path))
    result = selftest_check(out)
    print(
        json.dumps(
            {k: result[k] for k in ("family", "cc", "metrics_dropped", "checks", "ops")}, indent=1
        )
    )
    seen = result["table_names_seen"]
    if result["family"] == "hopper" and result["metric_names_verified"]:
        for name in (
            "gpu__time_duration.sum",
            "dram__bytes_read.sum",
            "lts__t_bytes.sum",
            "l1tex__t_bytes.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ):
            assert seen[name], f"{name} missing on Hopper"
    assert result["checks"]["gemm_on_tensor_pipe"], result["ops"]
    assert result["checks"]["gemm_tensor_flops_within_10pct"], result["ops"]
    assert result["checks"]["gemm_dram_at_least_90pct_of_min"], result["ops"]
