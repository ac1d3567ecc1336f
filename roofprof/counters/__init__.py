"""Hardware counters through Nsight Compute (``ncu``): the hierarchical roofline.

Analytic FLOP and byte counts say what a kernel must do; hardware counters say what it
did. This package runs a command under ``ncu`` (as an argument list, never a shell string),
parses ncu's CSV (the default *details* page and ``--page raw``) or ``.ncu-rep`` reports
(through the optional ``ncu-report`` package), and turns the raw metrics into FLOPs per
precision and bytes per memory level, following the NERSC hierarchical-roofline method
(C. Yang, T. Kurth, S. Williams, "Hierarchical Roofline Analysis for GPUs", CUG 2019 /
Concurrency Computat. Pract. Exper. 2020, arXiv:2009.02449):

* time: ``gpu__time_duration.sum``
* DRAM bytes: ``dram__bytes_read.sum + dram__bytes_write.sum`` (falls back to
  ``dram__bytes_op_read/op_write`` as printed by ncu 2026.2 on an RTX 5070, then
  ``dram__bytes.sum``)
* L2 bytes: ``lts__t_bytes.sum`` (or ``lts__t_sectors.sum`` x 32 B)
* L1 bytes: ``l1tex__t_bytes.sum`` (or ``l1tex__t_sectors.sum`` x 32 B, or, as a
  lower bound covering global loads and stores only, the
  ``l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum`` pair x 32 B)
* CUDA-core FLOPs per precision p in (d, f, h) = fp64, fp32, fp16:
  ``add + mul + 2 * fma`` of ``sm__sass_thread_inst_executed_op_{p}{add,mul,fma}_pred_on.sum``.
  These count *thread instructions*; a packed ``HADD2``/``HFMA2`` counts once although
  it does two half-precision operations, so fp16 CUDA-core FLOPs can be undercounted by
  up to 2x (the NERSC and LIKWID formulas count the same way).
* Tensor-core operations per source type, from :data:`TENSOR_METRICS` (one table per
  architecture family). Semantics, per entry (``flops_per_count``):

  - ``sm__ops_path_tensor_src_<type>[_dst_<type>]...`` (Ampere and later; NVIDIA's
    answer on the developer forum, "How many FLOPs does one tensor_op_hmma instruction
    do?", points to these for FLOPs): "# of math ops executed in Tensor path", taken as
    FLOPs with an FMA counted as two operations (factor 1.0). ``roofprof selftest``
    checks this on a GPU: a bf16 GEMM of known shape must count 2*M*N*K within 10%.
  - ``sm__inst_executed_pipe_tensor.sum`` counts warp-level tensor *instructions*; only
    on Volta is the FLOP count per instruction fixed: 512 (the ``x512`` derived metric of
    Nsight Compute's ``SpeedOfLight_HierarchicalTensorRooflineChart`` section and the
    NERSC paper above). On later architectures it is kept as a diagnostic only.

Metric names differ between architectures and ncu versions, so at collection time each
name is checked against ``ncu --query-metrics``; names that do not exist are dropped with
a :class:`CounterWarning`, never a failure.

>>> k = KernelCounters(0, "saxpy", {"gpu__time_duration.sum": (2000.0, "nsecond"),
...     "dram__bytes_read.sum": (8.0, "Kbyte"), "dram__bytes_write.sum": (4000.0, "byte"),
...     "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": (1000.0, "inst")})
>>> f"{k.time_s:.3g} s", k.dram_bytes, k.flops, round(k.intensity("dram"), 4)
('2e-06 s', 12000.0, 2000.0, 0.1667)

Modules, each importable on its own (none imports numba, CuPy or torch at import time):
:mod:`~roofprof.counters.errors` (errors, warnings, hints),
:mod:`~roofprof.counters.metrics` (metric tables, units, :class:`KernelCounters`),
:mod:`~roofprof.counters.parse` (ncu CSV and ``.ncu-rep``), :mod:`~roofprof.counters.nvtx`
(NVTX ranges), :mod:`~roofprof.counters.collection` (running ncu),
:mod:`~roofprof.counters.hierarchical` (placement and comparison with analytic ops) and
:mod:`~roofprof.counters.ops_pass` (``roofprof profile --counters``). The GPU self-check
lives in :mod:`roofprof.selftest.counters` (above this package: it is not re-exported here).
"""

from __future__ import annotations

from roofprof.counters.collection import (
    Collection,
    MetricPlan,
    build_ncu_command,
    collect,
    detect_compute_capability,
    find_ncu,
    plan_metrics,
    query_available_metrics,
    run_under_ncu,
)
from roofprof.counters.errors import (
    CollectionError,
    CounterPermissionError,
    CounterWarning,
    NcuNotFoundError,
    NotNcuOutputError,
    UnknownLevelError,
)
from roofprof.counters.hierarchical import (
    HierarchicalPlacement,
    LevelPlacement,
    OpComparison,
    compare_with_ops,
    group_by_range,
    place_hierarchical,
    records_to_json,
)
from roofprof.counters.metrics import (
    CUDA_CORE_FLOPS,
    LEVELS,
    METRIC_SETS,
    TENSOR_METRICS,
    KernelCounters,
    family_for_cc,
    unit_scale,
)
from roofprof.counters.nvtx import (
    DEFAULT_NVTX_INCLUDE,
    NVTX_PREFIX,
    nvtx_name,
    nvtx_range,
    op_range,
)
from roofprof.counters.parse import load_counters, parse_ncu_csv, read_ncu_csv, read_ncu_report

__all__ = [
    "CUDA_CORE_FLOPS",
    "Collection",
    "CollectionError",
    "CounterPermissionError",
    "CounterWarning",
    "DEFAULT_NVTX_INCLUDE",
    "HierarchicalPlacement",
    "KernelCounters",
    "LEVELS",
    "LevelPlacement",
    "METRIC_SETS",
    "MetricPlan",
    "NVTX_PREFIX",
    "NcuNotFoundError",
    "NotNcuOutputError",
    "OpComparison",
    "TENSOR_METRICS",
    "UnknownLevelError",
    "build_ncu_command",
    "collect",
    "compare_with_ops",
    "detect_compute_capability",
    "family_for_cc",
    "find_ncu",
    "group_by_range",
    "load_counters",
    "nvtx_name",
    "nvtx_range",
    "op_range",
    "parse_ncu_csv",
    "place_hierarchical",
    "plan_metrics",
    "query_available_metrics",
    "read_ncu_csv",
    "read_ncu_report",
    "records_to_json",
    "run_under_ncu",
    "unit_scale",
]
