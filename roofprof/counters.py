"""Hardware counters through Nsight Compute (``ncu``): the hierarchical roofline.

Analytic FLOP and byte counts say what a kernel must do; hardware counters say what it
did. This module runs a command under ``ncu`` (as an argument list, never a shell string),
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
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError, DeviceUnavailableError, RoofprofError

__all__ = [
    "CUDA_CORE_FLOPS",
    "CounterPermissionError",
    "CounterWarning",
    "DEFAULT_NVTX_INCLUDE",
    "HierarchicalPlacement",
    "KernelCounters",
    "LEVELS",
    "LevelPlacement",
    "METRIC_SETS",
    "NVTX_PREFIX",
    "NcuNotFoundError",
    "NotNcuOutputError",
    "OpComparison",
    "TENSOR_METRICS",
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
    "selftest_check",
]

# --------------------------------------------------------------------------- errors


class CounterWarning(UserWarning):
    """Something about the counters is missing or approximate (a dropped metric, n/a values)."""


class NcuNotFoundError(DeviceUnavailableError):
    """Nsight Compute's ``ncu`` is not installed or not on PATH."""


class CounterPermissionError(DeviceUnavailableError):
    """``ERR_NVGPUCTRPERM``: the driver does not let this user read the GPU's counters."""


class NotNcuOutputError(ConfigError):
    """A file that is not Nsight Compute CSV output; the message names the first bad line."""


class CollectionError(RoofprofError):
    """The command run under ncu failed, or ncu profiled no kernel."""


NCU_INSTALL_HINT = (
    "install Nsight Compute (it ships with the CUDA toolkit as /usr/local/cuda/bin/ncu; "
    "Debian/Ubuntu: `apt-get install nsight-compute` from NVIDIA's CUDA repository), then put "
    "`ncu` on PATH or set ROOFPROF_NCU=/path/to/ncu"
)
PERMISSION_HINT = (
    "ERR_NVGPUCTRPERM: this user may not read the GPU performance counters. Fix: run as root "
    "(e.g. `sudo -E env PATH=$PATH roofprof ...`), or allow all users through the driver's "
    "profiling permission: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | sudo "
    "tee /etc/modprobe.d/nvidia-profiling.conf`, then reload the nvidia module or reboot "
    "(in a container also add --cap-add=SYS_ADMIN); see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)

# --------------------------------------------------------------------------- metric tables

LEVELS: tuple[str, ...] = ("l1", "l2", "dram")
"""Memory levels of the hierarchical roofline, innermost first."""

SECTOR_BYTES = 32
"""Bytes per L1/L2 sector on every NVIDIA GPU since Maxwell (the unit ncu calls ``sector``)."""

TIME_METRIC = "gpu__time_duration.sum"
TENSOR_INST_METRIC = "sm__inst_executed_pipe_tensor.sum"

# Each byte source: alternatives tried in order, each a tuple of metrics that are summed.
BYTE_METRICS: dict[str, tuple[tuple[str, ...], ...]] = {
    "dram": (
        ("dram__bytes_read.sum", "dram__bytes_write.sum"),
        ("dram__bytes_op_read.sum", "dram__bytes_op_write.sum"),
        ("dram__bytes.sum",),
    ),
    "l2": (("lts__t_bytes.sum",), ("lts__t_sectors.sum",)),
    "l1": (
        ("l1tex__t_bytes.sum",),
        ("l1tex__t_sectors.sum",),
        (
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
        ),
    ),
}
BYTE_SOURCE_NOTES = {
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global loads+stores only (sectors x 32 B): a lower bound",
}

_SASS = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
CUDA_CORE_FLOPS: dict[str, tuple[tuple[str, float], ...]] = {
    "fp64": ((_SASS.format("dadd"), 1.0), (_SASS.format("dmul"), 1.0), (_SASS.format("dfma"), 2.0)),
    "fp32": ((_SASS.format("fadd"), 1.0), (_SASS.format("fmul"), 1.0), (_SASS.format("ffma"), 2.0)),
    "fp16": ((_SASS.format("hadd"), 1.0), (_SASS.format("hmul"), 1.0), (_SASS.format("hfma"), 2.0)),
}
"""CUDA-core FLOPs per precision: (metric, FLOPs per thread instruction). Same on Volta and later."""

# Packed fp32 instructions (FADD2/FMUL2/FFMA2) on Blackwell; names from public code
# (two FLOPs per packed add/mul, four per packed FMA); unverified, dropped if absent.
CUDA_CORE_FLOPS_EXTRA: dict[str, dict[str, tuple[tuple[str, float], ...]]] = {
    "blackwell": {
        "fp32": ((_SASS.format("fadd2"), 2.0), (_SASS.format("fmul2"), 2.0), (_SASS.format("ffma2"), 4.0)),
    },
}

_OPS = "sm__ops_path_tensor_{}.sum"


def _ops(*names: str) -> tuple[tuple[str, float], ...]:
    return tuple((_OPS.format(n), 1.0) for n in names)


_FP16 = (_ops("src_fp16_dst_fp16", "src_fp16_dst_fp32"), _ops("src_fp16"))
_BF16 = (_ops("src_bf16_dst_fp32"),)
_TF32 = (_ops("src_tf32_dst_fp32"),)
_INT8 = (_ops("src_int8"),)
_FP64 = (_ops("src_fp64"),)
_FP8 = (_ops("src_fp8"), _ops("src_fp8_dst_fp16", "src_fp8_dst_fp32"), _ops("src_fp8_sparsity_off"))
# Hopper splits the tensor path by instruction (HGMMA for wgmma, HMMA for mma.sync); the
# per-instruction dense counters are a fallback where the path totals are absent.
_H_BF16 = _ops("op_hgmma_src_bf16_dst_fp32_sparsity_off", "op_hmma_src_bf16_dst_fp32_sparsity_off")
_H_FP16 = _ops(
    "op_hgmma_src_fp16_sparsity_off",
    "op_hmma_src_fp16_dst_fp16_sparsity_off",
    "op_hmma_src_fp16_dst_fp32_sparsity_off",
)
_H_TF32 = _ops("op_hgmma_src_tf32_dst_fp32_sparsity_off", "op_hmma_src_tf32_dst_fp32_sparsity_off")
_H_INT8 = _ops("op_igmma_src_int8_sparsity_off", "op_imma_src_int8_sparsity_off")

TensorAlternatives = tuple[tuple[tuple[str, float], ...], ...]

TENSOR_METRICS: dict[str, dict[str, TensorAlternatives]] = {
    # Volta: only the instruction count exists; 512 FLOPs per HMMA instruction (see docstring).
    "volta": {"fp16": (((TENSOR_INST_METRIC, 512.0),),)},
    "turing": {"fp16": _FP16, "int8": _INT8},
    "ampere": {"fp16": _FP16, "bf16": _BF16, "tf32": _TF32, "int8": _INT8, "fp64": _FP64},
    "ada": {"fp16": _FP16, "bf16": _BF16, "tf32": _TF32, "int8": _INT8, "fp8": _FP8},
    "hopper": {
        "fp16": (*_FP16, _H_FP16),
        "bf16": (*_BF16, _H_BF16),
        "tf32": (*_TF32, _H_TF32),
        "int8": (*_INT8, _H_INT8),
        "fp8": _FP8,
        "fp64": _FP64,
    },
    "blackwell": {"fp16": _FP16, "bf16": _BF16, "tf32": _TF32, "int8": _INT8, "fp8": _FP8, "fp64": _FP64},
}
"""Tensor-core operation counters per architecture family and source dtype.

Each dtype maps to alternatives tried in order; an alternative is a tuple of
``(metric, flops_per_count)`` pairs that are summed, and is used only when all its
metrics are present (so a total and its parts are never counted twice)."""

CC_MAJOR_FAMILY = {7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell", 11: "blackwell", 12: "blackwell"}
CC_EXCEPTIONS = {(7, 5): "turing", (8, 9): "ada"}

METRIC_SETS = ("hierarchical", "memory", "flops", "time")
"""``hierarchical``: time, bytes at L1/L2/DRAM, CUDA-core and tensor FLOPs (default);
``memory``: time and bytes; ``flops``: time, DRAM bytes and FLOPs; ``time``: time only."""

# Every metric name the derivations know, for telling a bad value from an unknown metric.
_KNOWN_METRICS: frozenset[str] = frozenset(
    [TIME_METRIC, TENSOR_INST_METRIC]
    + [m for alts in BYTE_METRICS.values() for alt in alts for m in alt]
    + [m for pairs in CUDA_CORE_FLOPS.values() for m, _ in pairs]
    + [m for fam in CUDA_CORE_FLOPS_EXTRA.values() for pairs in fam.values() for m, _ in pairs]
    + [m for fam in TENSOR_METRICS.values() for alts in fam.values() for alt in alts for m, _ in alt]
)


def family_for_cc(cc: str | float | tuple[int, int] | None) -> str | None:
    """Architecture family of a compute capability, or ``None`` when unknown or pre-Volta.

    Accepts ``"9.0"``, ``9.0``, ``(9, 0)``, ``"sm_90"`` or ``"90"``.

    >>> family_for_cc("9.0"), family_for_cc((8, 9)), family_for_cc("sm_120"), family_for_cc("6.1")
    ('hopper', 'ada', 'blackwell', None)
    """
    if cc is None:
        return None
    try:
        if isinstance(cc, tuple):
            major, minor = int(cc[0]), int(cc[1])
        else:
            text = str(cc).strip().lower().removeprefix("sm_").removeprefix("compute_")
            if "." in text:
                major_s, minor_s = text.split(".", 1)
                major, minor = int(major_s), int(minor_s[:1] or 0)
            else:
                major, minor = int(text[:-1]), int(text[-1])
    except (ValueError, IndexError):
        return None
    return CC_EXCEPTIONS.get((major, minor)) or CC_MAJOR_FAMILY.get(major)


def _generic_tensor_table() -> dict[str, TensorAlternatives]:
    """Union of the tables without instruction-count entries (used when the arch is unknown)."""
    table: dict[str, list] = {}
    for fam in TENSOR_METRICS.values():
        for dtype, alts in fam.items():
            for alt in alts:
                if any(m == TENSOR_INST_METRIC for m, _ in alt):
                    continue
                if alt not in table.setdefault(dtype, []):
                    table[dtype].append(alt)
    return {d: tuple(a) for d, a in table.items()}


_GENERIC_TENSOR = _generic_tensor_table()

# --------------------------------------------------------------------------- units

_TIME_UNITS = {
    "ns": 1e-9, "nsecond": 1e-9, "nsec": 1e-9,
    "us": 1e-6, "usecond": 1e-6, "usec": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
    "ms": 1e-3, "msecond": 1e-3, "msec": 1e-3,
    "s": 1.0, "second": 1.0, "sec": 1.0,
}  # fmt: skip
# ncu prints decimal prefixes for bytes (1 KiB of shared memory shows as "1.02 Kbyte").
_BYTE_UNIT = re.compile(r"^(K|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?(byte|B)$")
_PREFIX = {None: 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}  # fmt: skip


def unit_scale(unit: str) -> tuple[float, str]:
    """Factor to SI base units and the base unit's name for an ncu unit string.

    Time goes to seconds (``"s"``), bytes to bytes (``"byte"``, decimal prefixes as ncu
    prints them), ``sector`` stays sectors; other units (``""``, ``%``, ``inst``, rates) are
    returned unchanged with factor 1.

    >>> unit_scale("usecond"), unit_scale("Kbyte"), unit_scale("KiB"), unit_scale("")
    ((1e-06, 's'), (1000.0, 'byte'), (1024.0, 'byte'), (1.0, ''))
    """
    u = (unit or "").strip()
    if u in _TIME_UNITS:
        return _TIME_UNITS[u], "s"
    m = _BYTE_UNIT.match(u)
    if m:
        return _PREFIX[m.group(1)], "byte"
    if u in ("sector", "sectors"):
        return 1.0, "sector"
    return 1.0, u


_NA_VALUES = {"n/a", "na", "nan", "(!) n/a", "-", "--", "not available", "no data"}


def parse_number(text: str) -> float | None:
    """Parse an ncu number (thousands separators allowed); ``None`` for n/a or empty.

    Raises ValueError for text that is not a number.

    >>> parse_number("53,261,312"), parse_number("87.50"), parse_number("4.0e-05"), parse_number("n/a")
    (53261312.0, 87.5, 4e-05, None)
    """
    s = text.strip().replace("\u202f", "").replace("\xa0", "")
    if not s or s.lower() in _NA_VALUES:
        return None
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?", s):
        s = s.replace(",", "")
    value = float(s)  # ValueError for anything else
    return value


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class KernelCounters:
    """One profiled kernel launch: the raw metrics as read, and everything derived from them.

    ``metrics`` maps each metric name to ``(value, unit)`` exactly as ncu printed it
    (value a float, or a string for non-numeric metrics). Derived quantities are in SI
    units and are ``None`` when the metrics they need were not collected.

    >>> k = KernelCounters(0, "gemm", {"lts__t_bytes.sum": (2.0, "Mbyte")})
    >>> k.l2_bytes, k.dram_bytes, k.flops
    (2000000.0, None, None)
    """

    id: int
    name: str
    metrics: Mapping[str, tuple[float | str, str]] = field(default_factory=dict, hash=False)
    nvtx_ranges: tuple[str, ...] = ()
    cc: str | None = None
    device: str | None = None
    grid_size: str | None = None
    block_size: str | None = None
    process: str | None = None
    source: str = ""

    # -- raw access
    @property
    def family(self) -> str | None:
        """Architecture family from the ``CC`` column (``None`` when unknown)."""
        return family_for_cc(self.cc)

    @property
    def range_name(self) -> str | None:
        """Innermost NVTX push/pop range around the kernel (a ``roofprof.`` one if any)."""
        ours = [r for r in self.nvtx_ranges if r.startswith(NVTX_PREFIX)]
        if ours:
            return ours[-1]
        return self.nvtx_ranges[-1] if self.nvtx_ranges else None

    @property
    def units(self) -> dict[str, str]:
        """Unit strings as read, per metric."""
        return {name: unit for name, (_, unit) in self.metrics.items()}

    def value(self, metric: str) -> float | None:
        """A metric converted to SI base units (seconds, bytes, sectors, counts), or ``None``."""
        entry = self.metrics.get(metric)
        if entry is None or not isinstance(entry[0], (int, float)) or math.isnan(entry[0]):
            return None
        scale, _ = unit_scale(entry[1])
        return float(entry[0]) * scale

    def _bytes_of(self, metric: str) -> float | None:
        entry = self.metrics.get(metric)
        v = self.value(metric)
        if v is None or entry is None:
            return None
        _, base = unit_scale(entry[1])
        if base == "sector" or (base == "" and "sectors" in metric):
            return v * SECTOR_BYTES
        return v

    def _first_alternative(self, alternatives: Sequence[Sequence[str]]) -> tuple[str, ...] | None:
        for alt in alternatives:
            if all(self.value(m) is not None for m in alt):
                return tuple(alt)
        return None

    # -- time and bytes
    @property
    def time_s(self) -> float | None:
        """Kernel duration in seconds (``gpu__time_duration.sum``)."""
        return self.value(TIME_METRIC)

    def byte_source(self, level: str) -> tuple[str, ...] | None:
        """The metrics that give the bytes at ``level`` ("l1", "l2", "dram"), or ``None``."""
        if level not in BYTE_METRICS:
            raise UnknownLevelError(level)
        return self._first_alternative(BYTE_METRICS[level])

    def bytes_at(self, level: str) -> float | None:
        """Bytes moved at a memory level ("l1", "l2" or "dram"), or ``None`` if not collected."""
        source = self.byte_source(level)
        if source is None:
            return None
        return sum(self._bytes_of(m) or 0.0 for m in source)

    @property
    def dram_bytes(self) -> float | None:
        """DRAM bytes read + written."""
        return self.bytes_at("dram")

    @property
    def dram_read_bytes(self) -> float | None:
        """DRAM bytes read (``None`` when only the total was collected)."""
        source = self.byte_source("dram")
        return self._bytes_of(source[0]) if source and len(source) == 2 else None

    @property
    def dram_write_bytes(self) -> float | None:
        """DRAM bytes written (``None`` when only the total was collected)."""
        source = self.byte_source("dram")
        return self._bytes_of(source[1]) if source and len(source) == 2 else None

    @property
    def l2_bytes(self) -> float | None:
        """Bytes through the L2 tag stage (``lts__t_bytes``)."""
        return self.bytes_at("l2")

    @property
    def l1_bytes(self) -> float | None:
        """Bytes through the L1/TEX tag stage (``l1tex__t_bytes``, or a lower bound from sectors)."""
        return self.bytes_at("l1")

    # -- FLOPs
    @property
    def cuda_core_flops(self) -> dict[str, float]:
        """CUDA-core FLOPs per precision (add + mul + 2*fma); only precisions collected."""
        out: dict[str, float] = {}
        extra = CUDA_CORE_FLOPS_EXTRA.get(self.family or "", {})
        for dtype, pairs in CUDA_CORE_FLOPS.items():
            present = [(m, f) for m, f in (*pairs, *extra.get(dtype, ())) if self.value(m) is not None]
            if present:
                out[dtype] = sum(self.value(m) * f for m, f in present)  # type: ignore[operator]
        return out

    def tensor_source(self, dtype: str) -> tuple[tuple[str, float], ...] | None:
        """The tensor-core counters used for ``dtype`` on this kernel's architecture."""
        table = TENSOR_METRICS.get(self.family or "", _GENERIC_TENSOR) if self.family else _GENERIC_TENSOR
        for alt in table.get(dtype, ()):
            if all(self.value(m) is not None for m, _ in alt):
                return alt
        return None

    @property
    def tensor_flops(self) -> dict[str, float]:
        """Tensor-core FLOPs (operations) per source dtype; only dtypes collected."""
        out: dict[str, float] = {}
        table = TENSOR_METRICS.get(self.family or "", _GENERIC_TENSOR) if self.family else _GENERIC_TENSOR
        for dtype in table:
            alt = self.tensor_source(dtype)
            if alt is not None:
                out[dtype] = sum(self.value(m) * f for m, f in alt)  # type: ignore[operator]
        return out

    @property
    def tensor_instructions(self) -> float | None:
        """Warp-level tensor instructions (``sm__inst_executed_pipe_tensor.sum``), a diagnostic."""
        return self.value(TENSOR_INST_METRIC)

    @property
    def flops_by_pipe(self) -> dict[str, float]:
        """FLOPs keyed ``"cuda:fp32"``, ``"tensor:bf16"``, ... (only what was collected)."""
        out = {f"cuda:{d}": v for d, v in self.cuda_core_flops.items()}
        out.update({f"tensor:{d}": v for d, v in self.tensor_flops.items()})
        return out

    @property
    def flops(self) -> float | None:
        """Total FLOPs on all pipes, or ``None`` when no FLOP counter was collected."""
        by_pipe = self.flops_by_pipe
        return sum(by_pipe.values()) if by_pipe else None

    @property
    def dominant_pipe(self) -> str | None:
        """The pipe with the most FLOPs (``"tensor:bf16"``, ``"cuda:fp32"``), or ``None``."""
        by_pipe = {k: v for k, v in self.flops_by_pipe.items() if v > 0}
        return max(by_pipe, key=by_pipe.__getitem__) if by_pipe else None

    @property
    def roofline_dtype(self) -> str | None:
        """The dtype whose compute ceiling applies: the dominant pipe's dtype."""
        pipe = self.dominant_pipe
        return pipe.split(":", 1)[1] if pipe else None

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s (all pipes)."""
        f, t = self.flops, self.time_s
        return f / t if f is not None and t else None

    def intensity(self, level: str) -> float | None:
        """Arithmetic intensity at ``level`` in FLOP/byte, or ``None``."""
        f, b = self.flops, self.bytes_at(level)
        return f / b if f is not None and b else None

    def points(self) -> list[Any]:
        """:class:`roofprof.roofline.Point` s at each level with bytes (``source="counters"``).

        Empty when FLOPs, time or bytes were not collected.
        """
        from roofprof.roofline import Point

        f, t, dtype = self.flops, self.time_s, self.roofline_dtype
        if f is None or not t or dtype is None:
            return []
        label = self.range_name or self.name
        return [
            Point(f"{label} [{lvl}]", f, b, t, dtype, level=lvl, source="counters")
            for lvl in LEVELS
            if (b := self.bytes_at(lvl))
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record: derived values in SI units plus the metrics and units as read."""
        return {
            "id": self.id,
            "name": self.name,
            "range": self.range_name,
            "nvtx_ranges": list(self.nvtx_ranges),
            "cc": self.cc,
            "family": self.family,
            "device": self.device,
            "grid_size": self.grid_size,
            "block_size": self.block_size,
            "time_s": self.time_s,
            "flops": {
                **{d: self.cuda_core_flops.get(d) for d in CUDA_CORE_FLOPS},
                "tensor": self.tensor_flops,
                "total": self.flops,
            },
            "tensor_instructions": self.tensor_instructions,
            "dram_bytes": self.dram_bytes,
            "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "l2_bytes": self.l2_bytes,
            "l1_bytes": self.l1_bytes,
            "byte_sources": {lvl: list(self.byte_source(lvl) or ()) for lvl in LEVELS},
            "intensity_flop_per_byte": {lvl: self.intensity(lvl) for lvl in LEVELS},
            "flops_per_s": self.flops_per_s,
            "metrics": {k: v for k, (v, _) in self.metrics.items()},
            "units": self.units,
            "source": self.source,
        }


class UnknownLevelError(ConfigError):
    """A memory level name that is not one of :data:`LEVELS`."""

    def __init__(self, level: str):
        super().__init__(f"unknown memory level {level!r}; valid choices: {', '.join(LEVELS)}")


# --------------------------------------------------------------------------- CSV parsing

_METRIC_NAME = re.compile(r"^[a-z0-9]+__[A-Za-z0-9_.]+$")
_CHATTER = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")
_DETAILS_REQUIRED = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
_LABEL_ALIASES = {"Duration": TIME_METRIC}  # details pages printed with --section SpeedOfLight


def _is_chatter(line: str) -> bool:
    return line.startswith(_CHATTER)


def _check_permission(line: str) -> None:
    if "ERR_NVGPUCTRPERM" in line:
        raise CounterPermissionError(PERMISSION_HINT)


def _nvtx_stack(cell: str) -> tuple[str, ...]:
    """Range names from ncu's ``thread Domain:Push/Pop_Range:...`` cell, outermost first.

    The cell holds the thread id then one quoted ``domain:range:payload...`` entry per
    range on the stack, e.g. ``1 "<default domain>:roofprof.gemm:none:none:..."``.
    """
    cell = (cell or "").strip()
    if not cell:
        return ()
    entries = re.findall(r'"([^"]*)"', cell) or [cell]
    names = []
    for entry in entries:
        parts = entry.split(":")
        if len(parts) >= 2 and parts[1].strip() and parts[1].strip().lower() != "none":
            names.append(parts[1].strip())
    return tuple(names)


def _split_row(line: str) -> list[str]:
    return next(csv.reader([line]))


def parse_ncu_csv(text: str, *, source: str = "<text>") -> list[KernelCounters]:
    """Parse Nsight Compute CSV output (details page or ``--page raw``) into records.

    Lines before the header (``==PROF==`` lines, the program's own output, a BOM) are
    skipped, and so are ncu's ``==...==`` lines after it. Numbers may carry thousands
    separators; ``n/a`` values are dropped with a :class:`CounterWarning`.

    Raises:
        NotNcuOutputError: no ``"ID","Process ID",...`` header, or a row that does not fit
            it; the message names the first bad line (1-based).
        CounterPermissionError: the output holds ncu's ``ERR_NVGPUCTRPERM`` error.
        CollectionError: ncu's output says it profiled no kernel.

    >>> csv_text = '''==PROF== Connected to process 1
    ... "ID","Process ID","Kernel Name","CC","gpu__time_duration.sum","dram__bytes.sum"
    ... "","","","","nsecond","Mbyte"
    ... "0","1","k","9.0","1,500","2.5"'''
    >>> [(k.name, k.time_s, k.dram_bytes) for k in parse_ncu_csv(csv_text)]
    [('k', 1.5e-06, 2500000.0)]
    """
    lines = text.splitlines()
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    header_at = None
    first_bad: tuple[int, str] | None = None
    no_kernels = None
    for i, raw in enumerate(lines):
        line = raw.strip()
        _check_permission(line)
        if line.startswith('"ID",'):
            header_at = i
            break
        if "No kernels were profiled" in line:
            no_kernels = line
        if line and not _is_chatter(line) and first_bad is None:
            first_bad = (i + 1, raw)
    if header_at is None:
        if no_kernels:
            raise CollectionError(f"{source}: ncu profiled no kernel ({no_kernels.strip()})")
        if first_bad is None:
            raise NotNcuOutputError(
                f"{source} is not Nsight Compute CSV output: line {len(lines) or 1}: no CSV "
                "header (expected a line starting with \"ID\",\"Process ID\" from `ncu --csv`)"
            )
        n, bad = first_bad
        raise NotNcuOutputError(
            f"{source} is not Nsight Compute CSV output: line {n}: {bad[:120]!r}; expected a "
            "header starting with \"ID\",\"Process ID\" (from `ncu --csv`)"
        )
    header = _split_row(lines[header_at].strip())
    rows: list[tuple[int, list[str]]] = []
    for i in range(header_at + 1, len(lines)):
        line = lines[i].strip()
        _check_permission(line)
        if not line or _is_chatter(line):
            continue
        try:
            cells = _split_row(line)
        except csv.Error as exc:
            raise NotNcuOutputError(f"{source}: line {i + 1}: not a CSV row ({exc}): {line[:120]!r}") from exc
        short = len(header) - len(cells)
        if 0 < short <= 3 and all(h.startswith("Rule ") for h in header[len(cells):]):
            cells += [""] * short  # older ncu ends metric rows before the Rule columns
        if len(cells) != len(header):
            raise NotNcuOutputError(
                f"{source}: line {i + 1}: {len(cells)} fields where the header has {len(header)}: "
                f"{line[:120]!r}"
            )
        rows.append((i + 1, cells))
    if "Metric Name" in header:
        missing = [c for c in _DETAILS_REQUIRED if c not in header]
        if missing:
            raise NotNcuOutputError(
                f"{source}: line {header_at + 1}: details-page header lacks {', '.join(missing)}"
            )
        return _parse_details(header, rows, source)
    if "Kernel Name" not in header:
        raise NotNcuOutputError(f"{source}: line {header_at + 1}: header has no \"Kernel Name\" column")
    return _parse_raw(header, rows, source)


def _kernel_info(header: list[str], cells: list[str]) -> dict[str, Any]:
    col = {h: i for i, h in enumerate(header)}

    def get(name: str) -> str | None:
        if name not in col:
            return None
        return cells[col[name]].strip() or None

    nvtx_cols = [i for i, h in enumerate(header) if "Push/Pop_Range" in h]
    stack: tuple[str, ...] = ()
    for i in nvtx_cols:
        stack += _nvtx_stack(cells[i])
    return {
        "name": get("Kernel Name") or "?",
        "cc": get("CC"),
        "device": get("Device"),
        "grid_size": get("Grid Size"),
        "block_size": get("Block Size"),
        "process": get("Process Name") or get("Process ID"),
        "nvtx_ranges": stack,
    }


def _metric_value(text: str, metric: str, line_no: int, source: str, na: list[str]) -> float | str | None:
    try:
        value = parse_number(text)
    except ValueError:
        if metric in _KNOWN_METRICS:
            raise NotNcuOutputError(
                f"{source}: line {line_no}: metric {metric} has the non-numeric value {text!r}"
            ) from None
        return text.strip()
    if value is None:
        na.append(metric)
    return value


def _warn_na(na: list[str], source: str) -> None:
    if na:
        names = sorted(set(na))
        warnings.warn(
            f"{source}: {len(names)} metric(s) reported n/a (not supported on this GPU or ncu): "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}; dropped",
            CounterWarning,
            stacklevel=3,
        )


def _parse_details(header: list[str], rows: list[tuple[int, list[str]]], source: str) -> list[KernelCounters]:
    col = {h: i for i, h in enumerate(header)}
    kernels: dict[str, dict[str, Any]] = {}
    na: list[str] = []
    for line_no, cells in rows:
        kid = cells[col["ID"]].strip()
        if not kid.lstrip("-").isdigit():
            raise NotNcuOutputError(f"{source}: line {line_no}: kernel ID {kid!r} is not an integer")
        entry = kernels.get(kid)
        if entry is None:
            entry = kernels[kid] = {"info": _kernel_info(header, cells), "metrics": {}}
        name = cells[col["Metric Name"]].strip()
        if not name:
            continue  # rule rows and section headers carry no metric
        unit = cells[col["Metric Unit"]].strip()
        value = _metric_value(cells[col["Metric Value"]], name, line_no, source, na)
        if value is None:
            continue
        entry["metrics"].setdefault(name, (value, unit))
        alias = _LABEL_ALIASES.get(name)
        if alias and isinstance(value, float):
            entry["metrics"].setdefault(alias, (value, unit))
    _warn_na(na, source)
    return [
        KernelCounters(int(kid), metrics=e["metrics"], source=f"{source} (details page)", **e["info"])
        for kid, e in kernels.items()
    ]


def _parse_raw(header: list[str], rows: list[tuple[int, list[str]]], source: str) -> list[KernelCounters]:
    col = {h: i for i, h in enumerate(header)}
    metric_cols = [(i, h) for i, h in enumerate(header) if _METRIC_NAME.match(h)]
    units = [""] * len(header)
    if "ID" not in col:
        raise NotNcuOutputError(f"{source}: raw-page header has no \"ID\" column")
    if rows and not rows[0][1][col["ID"]].strip():  # the units row under the header
        units = [u.strip() for u in rows[0][1]]
        rows = rows[1:]
    records = []
    na: list[str] = []
    for line_no, cells in rows:
        kid = cells[col["ID"]].strip()
        if not kid.lstrip("-").isdigit():
            raise NotNcuOutputError(f"{source}: line {line_no}: kernel ID {kid!r} is not an integer")
        metrics: dict[str, tuple[float | str, str]] = {}
        for i, name in metric_cols:
            value = _metric_value(cells[i], name, line_no, source, na)
            if value is not None:
                metrics[name] = (value, units[i])
        records.append(
            KernelCounters(int(kid), metrics=metrics, source=f"{source} (raw page)", **_kernel_info(header, cells))
        )
    _warn_na(na, source)
    return records


def read_ncu_csv(path: str | os.PathLike) -> list[KernelCounters]:
    """Read an Nsight Compute CSV file (details or raw page); see :func:`parse_ncu_csv`.

    Raises:
        ConfigError: the file is missing or not text; NotNcuOutputError as in parse_ncu_csv.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {str(p)!r}") from exc
    except UnicodeDecodeError as exc:
        raise NotNcuOutputError(f"{str(p)!r} is not Nsight Compute CSV output: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    return parse_ncu_csv(text, source=str(p))


def read_ncu_report(path: str | os.PathLike) -> list[KernelCounters]:
    """Read a ``.ncu-rep`` report through NVIDIA's ``ncu_report`` module (package ``ncu-report``).

    Raises:
        DeviceUnavailableError: ``ncu_report`` is not installed (the message gives the
            install line and the CSV-export alternative).
        ConfigError: the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"file not found: {str(p)!r}")
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"reading {p.name} needs NVIDIA's ncu_report module: `pip install ncu-report` (matching "
            "your Nsight Compute version), or export it to CSV first: "
            f"`ncu --import {p} --csv --page raw --print-units base > {p.stem}.csv`"
        ) from exc
    try:
        context = ncu_report.load_report(str(p))
    except Exception as exc:  # the module raises its own types
        raise ConfigError(f"cannot load Nsight Compute report {str(p)!r}: {exc}") from exc
    records = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            metrics: dict[str, tuple[float | str, str]] = {}
            for name in action.metric_names():
                value, unit = _report_metric(action.metric_by_name(name))
                if value is not None:
                    metrics[name] = (value, unit)
            cc = None
            major = metrics.get("device__attribute_compute_capability_major")
            minor = metrics.get("device__attribute_compute_capability_minor")
            if major and minor and isinstance(major[0], float) and isinstance(minor[0], float):
                cc = f"{int(major[0])}.{int(minor[0])}"
            records.append(
                KernelCounters(
                    len(records),
                    str(action.name()),
                    metrics,
                    nvtx_ranges=_report_nvtx(action),
                    cc=cc,
                    source=f"{p} (ncu-rep)",
                )
            )
    return records


def _report_metric(metric: Any) -> tuple[float | str | None, str]:
    unit_fn = getattr(metric, "unit", None)
    unit = str(unit_fn()) if callable(unit_fn) else ""
    kind = str(getattr(metric, "kind", lambda: "")()).upper()
    try:
        if "STRING" in kind:
            return str(metric.as_string()), unit
        value = metric.as_double()
    except Exception:
        return None, unit
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, unit
    return float(value), unit


def _report_nvtx(action: Any) -> tuple[str, ...]:
    try:
        state = action.nvtx_state()
        names: list[str] = []
        for domain_id in state.domains():
            names.extend(str(n) for n in state.domain_by_id(domain_id).push_pop_ranges())
        return tuple(names)
    except Exception:
        return ()


def load_counters(path: str | os.PathLike) -> list[KernelCounters]:
    """Read counters from an ncu CSV (any suffix) or a ``.ncu-rep`` report."""
    p = Path(path)
    if p.suffix == ".ncu-rep":
        return read_ncu_report(p)
    return read_ncu_csv(p)


# --------------------------------------------------------------------------- NVTX helpers

NVTX_PREFIX = "roofprof."
"""Prefix of the NVTX ranges roofprof pushes around each op."""

DEFAULT_NVTX_INCLUDE: tuple[str, ...] = (r"regex:roofprof\..*/",)
"""ncu ``--nvtx-include`` filters: push/pop ranges (trailing ``/``) whose name starts
with ``roofprof.`` in the default NVTX domain."""

_NVTX_BACKEND: tuple[Any, Any] | None = None


def nvtx_name(op_name: str) -> str:
    """The NVTX range name for an op: ``roofprof.`` + the name with ``: / @ "`` and spaces replaced.

    >>> nvtx_name("decode/layer0:attn qkv")
    'roofprof.decode_layer0_attn_qkv'
    """
    return NVTX_PREFIX + re.sub(r'[:/@"\s]', "_", op_name)


def _nvtx_backend() -> tuple[Any, Any]:
    """(push, pop) from the first NVTX binding that works: nvtx, cupy, torch; else no-ops."""
    global _NVTX_BACKEND
    if _NVTX_BACKEND is not None:
        return _NVTX_BACKEND

    def from_nvtx():
        import nvtx  # type: ignore[import-not-found]

        return (lambda n: nvtx.push_range(message=n)), (lambda: nvtx.pop_range())

    def from_cupy():
        from cupy.cuda import nvtx as cnvtx  # type: ignore[import-not-found]

        return cnvtx.RangePush, cnvtx.RangePop

    def from_torch():
        import torch.cuda.nvtx as tnvtx

        return tnvtx.range_push, tnvtx.range_pop

    for factory in (from_nvtx, from_cupy, from_torch):
        try:
            push, pop = factory()
            push("nvtx-probe")  # no roofprof. prefix: never matches the include filter
            pop()
        except Exception:
            continue
        _NVTX_BACKEND = (push, pop)
        return _NVTX_BACKEND
    _NVTX_BACKEND = (None, None)
    return _NVTX_BACKEND


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """Push an NVTX range named ``name`` (default domain) for the ``with`` block.

    Uses the ``nvtx`` package, else ``cupy.cuda.nvtx``, else ``torch.cuda.nvtx``; does
    nothing when none of them works (no CUDA, CPU-only torch). Ranges must be pushed on
    the thread that launches the kernels.

    >>> with nvtx_range("roofprof.example"):
    ...     pass
    """
    push, pop = _nvtx_backend()
    if push is None:
        yield
        return
    push(name)
    try:
        yield
    finally:
        pop()


def op_range(op_name: str) -> contextlib.AbstractContextManager[None]:
    """``nvtx_range(nvtx_name(op_name))``: the range that ties a kernel's counters to an op."""
    return nvtx_range(nvtx_name(op_name))


# --------------------------------------------------------------------------- collection


def _install_candidates() -> list[Path]:
    """Where CUDA toolkits and standalone Nsight Compute installs put ncu, newest first."""
    return sorted(Path("/usr/local").glob("cuda*/bin/ncu"), reverse=True) + sorted(
        Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True
    )


def find_ncu(ncu: str | os.PathLike | None = None) -> str:
    """Path of the ``ncu`` executable: ``ncu`` argument, ``$ROOFPROF_NCU``, PATH, CUDA dirs.

    Raises:
        NcuNotFoundError: none found (the message says how to install it).
    """
    candidates = [str(ncu)] if ncu else []
    if os.environ.get("ROOFPROF_NCU"):
        candidates.append(os.environ["ROOFPROF_NCU"])
    candidates.append("ncu")
    for cand in candidates:
        found = shutil.which(cand)
        if found:
            return found
    if not ncu:
        for cand in _install_candidates():
            if os.access(cand, os.X_OK):
                return str(cand)
    where = f" ({ncu})" if ncu else ""
    raise NcuNotFoundError(f"Nsight Compute `ncu` not found{where}: {NCU_INSTALL_HINT}")


def detect_compute_capability() -> str | None:
    """Compute capability of GPU 0 (``"9.0"``) through NVML, then nvidia-smi; ``None`` if neither."""
    from roofprof.devices import _nvml

    try:
        with _nvml.session() as nv:
            handle = _nvml.query("nvmlDeviceGetHandleByIndex", 0, default=None, nvml=nv)
            cc = _nvml.query("nvmlDeviceGetCudaComputeCapability", handle, default=None, nvml=nv)
            if handle is not None and cc:
                return f"{cc[0]}.{cc[1]}"
    except _nvml.NvmlUnavailable:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            first = out.stdout.strip().splitlines()
            if out.returncode == 0 and first and re.fullmatch(r"\d+\.\d+", first[0].strip()):
                return first[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def ncu_version(ncu: str) -> str | None:
    """``ncu --version``'s version number (``"2025.3.1.0"``), or ``None``."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Version\s+([\d.]+)", out.stdout + out.stderr)
    return m.group(1) if m else None


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names (no rollup suffix) listed by ``ncu --query-metrics``.

    >>> sorted(parse_query_metrics("Device GH100\\ndram__bytes_read   Counter  byte  # of bytes read"))
    ['dram__bytes_read']
    """
    names = set()
    for line in text.splitlines():
        token = line.strip().split(" ", 1)[0].split("\t", 1)[0]
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", token):
            names.add(token)
    return names


def query_available_metrics(ncu: str, *, chip: str | None = None, timeout_s: float = 300) -> set[str] | None:
    """Metric base names this GPU (or ``chip``, e.g. ``"gh100"``) supports, from ncu itself.

    Returns ``None`` (with a :class:`CounterWarning`) when the query fails for a reason
    other than permissions.

    Raises:
        CounterPermissionError: ncu answered ``ERR_NVGPUCTRPERM``.
    """
    cmd = [ncu, "--query-metrics"] + (["--chip", chip] if chip else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        warnings.warn(f"`{' '.join(cmd)}` failed ({exc}); metric names not verified", CounterWarning, stacklevel=2)
        return None
    _check_permission(out.stdout + out.stderr)
    names = parse_query_metrics(out.stdout)
    if out.returncode != 0 or not names:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
        warnings.warn(
            f"`{' '.join(cmd)}` exited {out.returncode} ({tail[0][:160]}); metric names not verified",
            CounterWarning,
            stacklevel=2,
        )
        return None
    return names


@dataclass(frozen=True)
class MetricPlan:
    """The metrics to request from ncu, and the table entries dropped as unavailable."""

    metrics: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    family: str | None = None
    metrics_set: str = "hierarchical"


def _base(name: str) -> str:
    return name.split(".", 1)[0]


def plan_metrics(
    family: str | None, metrics_set: str = "hierarchical", available: set[str] | None = None
) -> MetricPlan:
    """Choose the metric names to collect on ``family`` (e.g. ``"hopper"``).

    For each quantity the first alternative whose names are all ``available`` (base names
    as from :func:`query_available_metrics`) is taken; with ``available=None`` the first
    alternative is taken unverified. Names of a first choice that is unavailable are
    returned in ``dropped``.

    Raises:
        ConfigError: unknown ``metrics_set``.

    >>> plan = plan_metrics("hopper", "memory")
    >>> plan.metrics[:3]
    ('gpu__time_duration.sum', 'dram__bytes_read.sum', 'dram__bytes_write.sum')
    """
    if metrics_set not in METRIC_SETS:
        raise ConfigError(f"unknown metrics set {metrics_set!r}; valid choices: {', '.join(METRIC_SETS)}")

    def ok(name: str) -> bool:
        return available is None or _base(name) in available

    chosen: list[str] = []
    dropped: list[str] = []

    def take_alternatives(alternatives: Sequence[Sequence[str]]) -> None:
        for alt in alternatives:
            if all(ok(m) for m in alt):
                chosen.extend(alt)
                return
        dropped.extend(m for m in alternatives[0] if not ok(m))

    def take_each(names: Iterable[str], optional: bool = False) -> None:
        for name in names:
            if ok(name):
                chosen.append(name)
            elif not optional:
                dropped.append(name)

    take_each([TIME_METRIC])
    if metrics_set in ("hierarchical", "memory", "flops"):
        take_alternatives(BYTE_METRICS["dram"])
    if metrics_set in ("hierarchical", "memory"):
        take_alternatives(BYTE_METRICS["l2"])
        take_alternatives(BYTE_METRICS["l1"])
    if metrics_set in ("hierarchical", "flops"):
        for pairs in CUDA_CORE_FLOPS.values():
            take_each(m for m, _ in pairs)
        extra = CUDA_CORE_FLOPS_EXTRA.get(family or "", {})
        for pairs in extra.values():
            # unverified names: only when ncu confirms them
            take_each((m for m, _ in pairs if available is not None), optional=True)
        table = TENSOR_METRICS.get(family or "", _GENERIC_TENSOR) if family else _GENERIC_TENSOR
        for alts in table.values():
            take_alternatives([tuple(m for m, _ in alt) for alt in alts])
        take_each([TENSOR_INST_METRIC], optional=True)
    unique = tuple(dict.fromkeys(chosen))
    return MetricPlan(unique, tuple(dict.fromkeys(d for d in dropped if d not in unique)), family, metrics_set)


CLOCK_CONTROLS = ("none", "base")
CACHE_CONTROLS = ("all", "none")


def build_ncu_command(
    command: Sequence[str],
    out_csv: str | os.PathLike,
    metrics: Sequence[str],
    *,
    ncu: str = "ncu",
    clock_control: str = "none",
    cache_control: str = "all",
    nvtx_include: Sequence[str] | None = DEFAULT_NVTX_INCLUDE,
    launch_count: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ncu argument list (never a shell string) that profiles ``command``.

    Raw CSV page with base units goes to ``out_csv`` (``--log-file``); clocks are left as
    the GPU runs them (``--clock-control none``) unless ``clock_control="base"``; caches
    are flushed before each kernel (``--cache-control all``); with ``nvtx_include``, only
    kernels inside matching NVTX push/pop ranges are profiled.

    Raises:
        ConfigError: empty command or metric list, or an invalid clock/cache control.

    >>> cmd = build_ncu_command(["python", "run.py"], "o.csv", ["gpu__time_duration.sum"])
    >>> cmd[cmd.index("--clock-control") + 1], cmd[-2:]
    ('none', ['python', 'run.py'])
    """
    if not command or not all(isinstance(c, str) and c for c in command):
        raise ConfigError("no command to profile: give it after `--`, e.g. `-- python run.py`")
    if not metrics:
        raise ConfigError("no metrics to collect")
    if clock_control not in CLOCK_CONTROLS:
        raise ConfigError(f"invalid clock control {clock_control!r}; valid choices: {', '.join(CLOCK_CONTROLS)}")
    if cache_control not in CACHE_CONTROLS:
        raise ConfigError(f"invalid cache control {cache_control!r}; valid choices: {', '.join(CACHE_CONTROLS)}")
    if launch_count is not None and launch_count < 1:
        raise ConfigError(f"launch count must be at least 1, got {launch_count}")
    cmd = [
        ncu,
        "--csv",
        "--page", "raw",
        "--print-units", "base",
        "--clock-control", clock_control,
        "--cache-control", cache_control,
        "--replay-mode", "kernel",
        "--target-processes", "all",
        "--metrics", ",".join(metrics),
        "--log-file", str(out_csv),
    ]  # fmt: skip
    if nvtx_include:
        cmd.append("--nvtx")
        for pattern in nvtx_include:
            cmd += ["--nvtx-include", pattern]
    if launch_count is not None:
        cmd += ["--launch-count", str(launch_count)]
    cmd += list(extra_args)
    cmd += list(command)
    return cmd


@dataclass(frozen=True)
class Collection:
    """The result of :func:`collect`: records plus what was asked of ncu."""

    records: tuple[KernelCounters, ...]
    ncu_command: tuple[str, ...]
    csv_path: str
    plan: MetricPlan
    cc: str | None
    ncu_version: str | None
    verified: bool
    returncode: int


def collect(
    command: Sequence[str],
    out_csv: str | os.PathLike,
    *,
    metrics_set: str = "hierarchical",
    clock_control: str = "none",
    cache_control: str = "all",
    nvtx_include: Sequence[str] | None = DEFAULT_NVTX_INCLUDE,
    launch_count: int | None = None,
    ncu: str | None = None,
    compute_capability: str | None = None,
    verify_metrics: bool = True,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> Collection:
    """Run ``command`` under ncu and parse what it measured (see :func:`run_under_ncu`)."""
    ncu_path = find_ncu(ncu)
    cc = compute_capability or detect_compute_capability()
    family = family_for_cc(cc)
    available = query_available_metrics(ncu_path) if verify_metrics else None
    plan = plan_metrics(family, metrics_set, available)
    if plan.dropped:
        warnings.warn(
            f"{len(plan.dropped)} metric(s) not supported by this GPU/ncu ({family or 'unknown arch'}), "
            f"dropped: {', '.join(plan.dropped)}",
            CounterWarning,
            stacklevel=2,
        )
    out = Path(out_csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = build_ncu_command(
        command, out, plan.metrics, ncu=ncu_path, clock_control=clock_control,
        cache_control=cache_control, nvtx_include=nvtx_include, launch_count=launch_count,
        extra_args=extra_args,
    )  # fmt: skip
    run_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=run_env, check=False)
    except FileNotFoundError as exc:
        raise NcuNotFoundError(f"cannot run {ncu_path}: {exc.strerror}: {NCU_INSTALL_HINT}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CollectionError(f"ncu did not finish within {timeout_s} s: {' '.join(cmd[-len(command):])}") from exc
    log = out.read_text(encoding="utf-8-sig", errors="replace") if out.exists() else ""
    combined = "\n".join((proc.stdout, proc.stderr, log))
    _check_permission(combined)
    errors = [ln.strip() for ln in combined.splitlines() if ln.strip().startswith("==ERROR==")]
    if '"ID",' not in log:
        if errors:
            raise CollectionError(f"ncu failed (exit {proc.returncode}): {' | '.join(errors[-3:])}")
        if proc.returncode != 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise CollectionError(f"the command exited {proc.returncode} under ncu, no kernel profiled: {tail}")
        hint = (
            f"no kernel ran inside an NVTX range matching {', '.join(nvtx_include)}: wrap each op in "
            "roofprof.counters.op_range(name), or profile every kernel (no NVTX filter)"
            if nvtx_include
            else "the command launched no CUDA kernel"
        )
        raise CollectionError(f"ncu profiled no kernel: {hint}")
    records = parse_ncu_csv(log, source=str(out))
    if proc.returncode != 0:
        warnings.warn(
            f"the profiled command exited {proc.returncode}; {len(records)} kernel(s) were profiled before "
            f"that ({' | '.join(errors[-2:]) or proc.stderr.strip()[-200:]})",
            CounterWarning,
            stacklevel=2,
        )
    return Collection(
        tuple(records), tuple(cmd), str(out), plan, cc, ncu_version(ncu_path), available is not None, proc.returncode
    )


def run_under_ncu(command: list[str], out_csv: str | os.PathLike, **options: Any) -> list[KernelCounters]:
    """Run ``command`` (argument list) under Nsight Compute and return one record per kernel.

    Options (all keyword): ``metrics_set`` (one of :data:`METRIC_SETS`, default
    ``"hierarchical"``), ``clock_control`` (``"none"`` default, or ``"base"``),
    ``cache_control`` (``"all"``: flush caches per kernel), ``nvtx_include`` (default
    :data:`DEFAULT_NVTX_INCLUDE`; ``None`` profiles every kernel), ``launch_count``,
    ``ncu`` (path), ``compute_capability`` (default: detected), ``verify_metrics``
    (check names with ``ncu --query-metrics``, default True), ``timeout_s``, ``env``,
    ``extra_args``. Unsupported metrics are dropped with a :class:`CounterWarning`.

    Raises:
        NcuNotFoundError: no ncu (the message says how to install it).
        CounterPermissionError: ``ERR_NVGPUCTRPERM`` (the message gives the fix).
        CollectionError: ncu failed, or profiled no kernel (e.g. no matching NVTX range).

    Example (on a GPU machine)::

        records = run_under_ncu(["python", "bench.py"], "out/ncu.csv")
    """
    return list(collect(command, out_csv, **options).records)


# --------------------------------------------------------------------------- roofline placement


@dataclass(frozen=True)
class LevelPlacement:
    """A kernel at one memory level of the hierarchical roofline."""

    level: str
    bytes: float | None
    intensity: float | None  # FLOP/byte
    bandwidth_bytes_per_s: float | None = None
    attainable_flops_per_s: float | None = None
    bound: str | None = None  # "memory" or "compute" at this level


@dataclass(frozen=True)
class HierarchicalPlacement:
    """A kernel placed at its L1, L2 and DRAM intensities (NERSC hierarchical roofline)."""

    kernel: str
    range_name: str | None
    dtype: str | None
    time_s: float | None
    flops: float | None
    flops_per_s: float | None
    levels: tuple[LevelPlacement, ...]
    compute_peak_flops_per_s: float | None = None

    def level(self, name: str) -> LevelPlacement:
        """The placement at ``name`` ("l1", "l2", "dram")."""
        for lp in self.levels:
            if lp.level == name:
                return lp
        raise UnknownLevelError(name)

    @property
    def limiting_level(self) -> str | None:
        """The level whose ceiling is lowest at this kernel's intensity (its bottleneck)."""
        known = [lp for lp in self.levels if lp.attainable_flops_per_s is not None]
        return min(known, key=lambda lp: lp.attainable_flops_per_s).level if known else None  # type: ignore[arg-type,return-value]

    @property
    def fraction_of_attainable(self) -> float | None:
        """Achieved FLOP/s over the lowest attainable ceiling."""
        known = [lp.attainable_flops_per_s for lp in self.levels if lp.attainable_flops_per_s]
        if not known or self.flops_per_s is None:
            return None
        return self.flops_per_s / min(known)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kernel": self.kernel,
            "range": self.range_name,
            "dtype": self.dtype,
            "time_s": self.time_s,
            "flops": self.flops,
            "flops_per_s": self.flops_per_s,
            "compute_peak_flops_per_s": self.compute_peak_flops_per_s,
            "limiting_level": self.limiting_level,
            "fraction_of_attainable": self.fraction_of_attainable,
            "levels": [lp.__dict__.copy() for lp in self.levels],
        }


def _safe(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        value = fn(*args, **kwargs)
    except (RoofprofError, KeyError, ValueError, LookupError, TypeError, AttributeError):
        return None
    return float(value) if value is not None else None


def place_hierarchical(records: Iterable[KernelCounters], roofline: Any = None) -> list[HierarchicalPlacement]:
    """Place each kernel at its L1, L2 and DRAM intensities, on ``roofline`` when given.

    ``roofline`` is a :class:`roofprof.roofline.Roofline` (or anything with
    ``compute_peak(dtype)``, ``memory_bandwidth(level)`` and ``attainable(intensity,
    dtype, level)``); a level the roofline lacks keeps ``attainable_flops_per_s=None``.
    The compute ceiling is that of the kernel's dominant pipe's dtype.
    """
    out = []
    for rec in records:
        dtype = rec.roofline_dtype
        peak = _safe(roofline.compute_peak, dtype) if roofline is not None and dtype else None
        levels = []
        for level in LEVELS:
            b, intensity = rec.bytes_at(level), rec.intensity(level)
            bw = attainable = bound = None
            if roofline is not None:
                bw = _safe(roofline.memory_bandwidth, level)
                if bw is not None and intensity is not None and dtype:
                    attainable = _safe(roofline.attainable, intensity, dtype, level=level)
                    if attainable is None and peak is not None:
                        attainable = min(peak, intensity * bw)
                    if peak is not None:
                        bound = "memory" if intensity * bw < peak else "compute"
            levels.append(LevelPlacement(level, b, intensity, bw, attainable, bound))
        out.append(
            HierarchicalPlacement(
                rec.name, rec.range_name, dtype, rec.time_s, rec.flops, rec.flops_per_s, tuple(levels), peak
            )
        )
    return out


# --------------------------------------------------------------------------- analytic comparison

TENSOR_OP_DTYPES = ("bf16", "fp16", "fp8", "int8", "tf32")


def expected_pipes(kind: str | None, dtype: str) -> tuple[str, ...]:
    """Pipes an op's FLOPs should run on: tensor cores for low-precision GEMM/attention.

    >>> expected_pipes("gemm", "bf16"), expected_pipes("norm", "bf16"), expected_pipes("gemm", "fp32")
    (('tensor:bf16',), ('cuda:fp32', 'cuda:fp16'), ('cuda:fp32',))
    """
    matmul = kind in (None, "gemm", "attention")
    if matmul and dtype in TENSOR_OP_DTYPES:
        return (f"tensor:{dtype}",)
    if matmul and dtype == "fp64":
        return ("tensor:fp64", "cuda:fp64")
    if dtype in ("fp64", "fp32"):
        return (f"cuda:{dtype}",)
    return ("cuda:fp32", "cuda:fp16")


def group_by_range(records: Iterable[KernelCounters]) -> dict[str, list[KernelCounters]]:
    """Kernels grouped by their innermost NVTX range (kernel name when there is none), in order."""
    groups: dict[str, list[KernelCounters]] = {}
    for rec in records:
        groups.setdefault(rec.range_name or rec.name, []).append(rec)
    return groups


def _total(values: Iterable[float | None]) -> float | None:
    vals = list(values)
    return None if not vals or any(v is None for v in vals) else float(sum(vals))  # type: ignore[arg-type]


@dataclass(frozen=True)
class OpComparison:
    """Counter totals of one op's kernels against the workload model's analytic counts."""

    op: str
    kernels: int
    analytic_flops: float
    counter_flops: float | None
    analytic_bytes: float
    counter_dram_bytes: float | None
    time_s: float | None
    expected_pipes: tuple[str, ...]
    flops_by_pipe: Mapping[str, float] = field(default_factory=dict, hash=False)
    flags: tuple[str, ...] = ()

    @property
    def flop_ratio(self) -> float | None:
        """Counter FLOPs / analytic FLOPs."""
        if self.counter_flops is None or not self.analytic_flops:
            return None
        return self.counter_flops / self.analytic_flops

    @property
    def excess_traffic(self) -> float | None:
        """Counter DRAM bytes / analytic minimum bytes (1.4 = 40% more traffic than needed)."""
        if self.counter_dram_bytes is None or not self.analytic_bytes:
            return None
        return self.counter_dram_bytes / self.analytic_bytes

    @property
    def expected_pipe_fraction(self) -> float | None:
        """Share of counted FLOPs that ran on the expected pipe(s)."""
        total = sum(self.flops_by_pipe.values())
        if not total:
            return None
        return sum(v for k, v in self.flops_by_pipe.items() if k in self.expected_pipes) / total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "op": self.op,
            "kernels": self.kernels,
            "time_s": self.time_s,
            "analytic_flops": self.analytic_flops,
            "counter_flops": self.counter_flops,
            "flop_ratio": self.flop_ratio,
            "analytic_bytes": self.analytic_bytes,
            "counter_dram_bytes": self.counter_dram_bytes,
            "excess_traffic": self.excess_traffic,
            "expected_pipes": list(self.expected_pipes),
            "expected_pipe_fraction": self.expected_pipe_fraction,
            "flops_by_pipe": dict(self.flops_by_pipe),
            "flags": list(self.flags),
        }


def compare_with_ops(
    records: Iterable[KernelCounters], ops: Iterable[Any], *, tolerance: float = 0.10, calls: int = 1
) -> list[OpComparison]:
    """Compare counters with analytic op counts; flag differences beyond ``tolerance`` (10%).

    Each op (anything with ``.name``, ``.flops``, ``.bytes``, ``.dtype`` and optionally
    ``.kind``) is matched to the kernels inside its NVTX range ``nvtx_name(op.name)``, or
    to kernels named ``op.name`` when no range was recorded. Counter totals are divided
    by ``calls`` (how many times each range ran under ncu). Ops without kernels are
    skipped. Flags: ``flops_off`` (FLOPs differ by more than the tolerance),
    ``excess_traffic`` (DRAM bytes above the analytic minimum by more than it),
    ``below_min_bytes`` (DRAM bytes below the minimum: data left in or served from L2),
    ``off_expected_pipe`` (more than the tolerance of FLOPs on another pipe, e.g. CUDA
    cores instead of tensor cores), ``no_flop_counters``.

    Raises:
        ConfigError: ``calls`` < 1 or a negative tolerance.
    """
    if calls < 1:
        raise ConfigError(f"calls must be at least 1, got {calls}")
    if tolerance < 0:
        raise ConfigError(f"tolerance must be >= 0, got {tolerance}")
    groups = group_by_range(records)
    out = []
    for op in ops:
        kernels = groups.get(nvtx_name(op.name)) or groups.get(op.name)
        if not kernels:
            continue
        flops = _total(k.flops for k in kernels)
        dram = _total(k.dram_bytes for k in kernels)
        time_s = _total(k.time_s for k in kernels)
        by_pipe: dict[str, float] = {}
        for k in kernels:
            for pipe, v in k.flops_by_pipe.items():
                by_pipe[pipe] = by_pipe.get(pipe, 0.0) + v / calls
        cmp = OpComparison(
            op=op.name,
            kernels=len(kernels),
            analytic_flops=float(op.flops),
            counter_flops=None if flops is None else flops / calls,
            analytic_bytes=float(op.bytes),
            counter_dram_bytes=None if dram is None else dram / calls,
            time_s=None if time_s is None else time_s / calls,
            expected_pipes=expected_pipes(getattr(op, "kind", None), op.dtype),
            flops_by_pipe=by_pipe,
        )
        flags = []
        if cmp.counter_flops is None:
            flags.append("no_flop_counters")
        elif cmp.flop_ratio is not None and abs(cmp.flop_ratio - 1) > tolerance:
            flags.append("flops_off")
        if cmp.excess_traffic is not None:
            if cmp.excess_traffic > 1 + tolerance:
                flags.append("excess_traffic")
            elif cmp.excess_traffic < 1 - tolerance:
                flags.append("below_min_bytes")
        frac = cmp.expected_pipe_fraction
        if frac is not None and frac < 1 - tolerance:
            flags.append("off_expected_pipe")
        out.append(OpComparison(**{**cmp.__dict__, "flags": tuple(flags)}))
    return out


def records_to_json(
    records: Sequence[KernelCounters],
    placements: Sequence[HierarchicalPlacement] | None = None,
    comparisons: Sequence[OpComparison] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A JSON-ready payload: one entry per kernel (placements and comparisons when given)."""
    payload: dict[str, Any] = dict(extra)
    payload["kernels"] = [r.to_dict() for r in records]
    if placements is not None:
        payload["hierarchical"] = [p.to_dict() for p in placements]
    if comparisons is not None:
        payload["ops"] = [c.to_dict() for c in comparisons]
    return payload


# --------------------------------------------------------------------------- GPU self-test

_SELFTEST_M = _SELFTEST_N = _SELFTEST_K = 4096
_SELFTEST_VECTOR = 1 << 24
_SELFTEST_WORKLOAD = f"""
import torch
from roofprof.counters import nvtx_range
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
    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def selftest_check(out_dir: str | os.PathLike, *, ncu: str | None = None, timeout_s: float = 480) -> dict[str, Any]:
    """Collect counters for a bf16 GEMM and an fp32 axpy on this GPU and check the arithmetic.

    Records which metric names of the table exist here (``ncu --query-metrics``), which
    were dropped, and how counter FLOPs and DRAM bytes compare with the analytic counts
    (the bf16 GEMM must count 2*M*N*K tensor FLOPs within 10%, which checks the
    ops-are-FLOPs reading of ``sm__ops_path_tensor_*``). Writes
    ``out_dir/counters_selftest.json`` and ``out_dir/counters_selftest.csv``; for
    ``roofprof selftest`` and the ``gpu`` tests.

    Raises:
        NcuNotFoundError, CounterPermissionError, CollectionError: as :func:`collect`.
    """
    from types import SimpleNamespace

    from roofprof.results import provenance, write_json_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ncu_path = find_ncu(ncu)
    cc = detect_compute_capability()
    family = family_for_cc(cc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CounterWarning)
        available = query_available_metrics(ncu_path)
        table_names = sorted(
            {m for alts in TENSOR_METRICS.get(family or "", _GENERIC_TENSOR).values() for alt in alts for m, _ in alt}
            | {m for alts in BYTE_METRICS.values() for alt in alts for m in alt}
            | {m for pairs in CUDA_CORE_FLOPS.values() for m, _ in pairs}
            | {m for pairs in CUDA_CORE_FLOPS_EXTRA.get(family or "", {}).values() for m, _ in pairs}
            | {TIME_METRIC, TENSOR_INST_METRIC}
        )
        coll = collect(
            [sys.executable, "-c", _SELFTEST_WORKLOAD],
            out / "counters_selftest.csv",
            ncu=ncu_path,
            compute_capability=cc,
            timeout_s=timeout_s,
            env={"PYTHONPATH": _pythonpath_with_repo()},
        )
    m, n, k, v = _SELFTEST_M, _SELFTEST_N, _SELFTEST_K, _SELFTEST_VECTOR
    ops = [
        SimpleNamespace(name="selftest.gemm_bf16", kind="gemm", dtype="bf16",
                        flops=2.0 * m * n * k, bytes=2.0 * (m * k + k * n + m * n)),
        SimpleNamespace(name="selftest.axpy_fp32", kind="elementwise", dtype="fp32",
                        flops=2.0 * v, bytes=4.0 * 3 * v),
    ]  # fmt: skip
    comparisons = compare_with_ops(coll.records, ops)
    by_op = {c.op: c for c in comparisons}
    gemm = by_op.get("selftest.gemm_bf16")
    checks = {
        "gemm_tensor_flops_within_10pct": bool(gemm and gemm.flop_ratio and abs(gemm.flop_ratio - 1) <= 0.10),
        "gemm_on_tensor_pipe": bool(gemm and (gemm.expected_pipe_fraction or 0) >= 0.9),
        "gemm_dram_at_least_90pct_of_min": bool(gemm and (gemm.excess_traffic or 0) >= 0.9),
    }
    # Seen, not checked: on Hopper, TMA loads bypass L1, so L1 bytes can be below DRAM bytes.
    observations = {
        r.range_name or r.name: {lvl: r.bytes_at(lvl) for lvl in LEVELS} for r in coll.records
    }
    result = {
        "provenance": provenance(device_cc=cc, family=family, ncu=ncu_path, ncu_version=coll.ncu_version),
        "family": family,
        "cc": cc,
        "metric_names_verified": available is not None,
        "table_names_seen": {name: (_base(name) in available) if available else None for name in table_names},
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
