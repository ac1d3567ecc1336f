"""Metric tables per architecture family, unit scaling, and the :class:`KernelCounters` record."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roofprof.counters.errors import UnknownLevelError
from roofprof.counters.nvtx import NVTX_PREFIX

__all__ = [
    "KNOWN_METRICS",
    "BYTE_METRICS",
    "BYTE_SOURCE_NOTES",
    "CC_EXCEPTIONS",
    "CC_MAJOR_FAMILY",
    "CUDA_CORE_FLOPS",
    "CUDA_CORE_FLOPS_EXTRA",
    "CYCLE_TIME_METRICS",
    "KernelCounters",
    "LEVELS",
    "METRIC_SETS",
    "SECTOR_BYTES",
    "TENSOR_INST_METRIC",
    "TENSOR_METRICS",
    "TIME_METRIC",
    "TensorAlternatives",
    "family_for_cc",
    "parse_number",
    "tensor_table",
    "unit_problem",
    "unit_scale",
]

# --------------------------------------------------------------------------- metric tables

LEVELS: tuple[str, ...] = ("l1", "l2", "dram")
"""Memory levels of the hierarchical roofline, innermost first."""

SECTOR_BYTES = 32
"""Bytes per L1/L2 sector on every NVIDIA GPU since Maxwell (the unit ncu calls ``sector``)."""

TIME_METRIC = "gpu__time_duration.sum"
TENSOR_INST_METRIC = "sm__inst_executed_pipe_tensor.sum"
CYCLE_TIME_METRICS: tuple[tuple[str, str], ...] = (
    ("sm__cycles_elapsed.avg", "sm__cycles_elapsed.avg.per_second"),
    ("smsp__cycles_elapsed.avg", "smsp__cycles_elapsed.avg.per_second"),
)
"""(cycles, cycles per second) pairs that give a kernel's time where ncu printed no
``gpu__time_duration.sum`` (the NERSC roofline recipe collects only these), tried in order."""

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
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": (
        "global loads+stores only (sectors x 32 B): a lower bound"
    ),
}

_SASS = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
CUDA_CORE_FLOPS: dict[str, tuple[tuple[str, float], ...]] = {
    "fp64": ((_SASS.format("dadd"), 1.0), (_SASS.format("dmul"), 1.0), (_SASS.format("dfma"), 2.0)),
    "fp32": ((_SASS.format("fadd"), 1.0), (_SASS.format("fmul"), 1.0), (_SASS.format("ffma"), 2.0)),
    "fp16": ((_SASS.format("hadd"), 1.0), (_SASS.format("hmul"), 1.0), (_SASS.format("hfma"), 2.0)),
}
"""CUDA-core FLOPs per precision: (metric, FLOPs per thread instruction). Same on Volta and
later."""

# Packed fp32 instructions (FADD2/FMUL2/FFMA2) on Blackwell; names from public code
# (two FLOPs per packed add/mul, four per packed FMA); unverified, dropped if absent.
CUDA_CORE_FLOPS_EXTRA: dict[str, dict[str, tuple[tuple[str, float], ...]]] = {
    "blackwell": {
        "fp32": (
            (_SASS.format("fadd2"), 2.0),
            (_SASS.format("fmul2"), 2.0),
            (_SASS.format("ffma2"), 4.0),
        ),
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
    "blackwell": {
        "fp16": _FP16,
        "bf16": _BF16,
        "tf32": _TF32,
        "int8": _INT8,
        "fp8": _FP8,
        "fp64": _FP64,
    },
}
"""Tensor-core operation counters per architecture family and source dtype.

Each dtype maps to alternatives tried in order; an alternative is a tuple of
``(metric, flops_per_count)`` pairs that are summed, and is used only when all its
metrics are present (so a total and its parts are never counted twice)."""

CC_MAJOR_FAMILY = {
    7: "volta",
    8: "ampere",
    9: "hopper",
    10: "blackwell",
    11: "blackwell",
    12: "blackwell",
}
CC_EXCEPTIONS = {(7, 5): "turing", (8, 9): "ada"}

METRIC_SETS = ("hierarchical", "memory", "flops", "time")
"""``hierarchical``: time, bytes at L1/L2/DRAM, CUDA-core and tensor FLOPs (default);
``memory``: time and bytes; ``flops``: time, DRAM bytes and FLOPs; ``time``: time only."""

# Every metric name the derivations know, for telling a bad value from an unknown metric.
KNOWN_METRICS: frozenset[str] = frozenset(
    [TIME_METRIC, TENSOR_INST_METRIC, *(m for pair in CYCLE_TIME_METRICS for m in pair)]
    + [m for alts in BYTE_METRICS.values() for alt in alts for m in alt]
    + [m for pairs in CUDA_CORE_FLOPS.values() for m, _ in pairs]
    + [m for fam in CUDA_CORE_FLOPS_EXTRA.values() for pairs in fam.values() for m, _ in pairs]
    + [
        m
        for fam in TENSOR_METRICS.values()
        for alts in fam.values()
        for alt in alts
        for m, _ in alt
    ]
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
        return _family_for_cc(cc)
    except TypeError:  # an unhashable spelling (a list): not cached
        return _family_for_cc.__wrapped__(cc)


@functools.lru_cache(
    maxsize=256, typed=True
)  # a kernel's family is asked for on every derived value
def _family_for_cc(cc: str | float | tuple[int, int]) -> str | None:
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


def tensor_table(family: str | None) -> dict[str, TensorAlternatives]:
    """The tensor-core metric table of an architecture family; unknown or ``None``: every name.

    >>> sorted(tensor_table("volta")) == sorted(TENSOR_METRICS["volta"])
    True
    """
    return TENSOR_METRICS.get(family or "", _GENERIC_TENSOR) if family else _GENERIC_TENSOR


# --------------------------------------------------------------------------- units

_TIME_UNITS = {
    "ns": 1e-9, "nsecond": 1e-9, "nsec": 1e-9,
    "us": 1e-6, "usecond": 1e-6, "usec": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
    "ms": 1e-3, "msecond": 1e-3, "msec": 1e-3,
    "s": 1.0, "second": 1.0, "sec": 1.0,
}  # fmt: skip
# Clock rates as ncu prints them: "cycle/second" (2020-2021), "cycle/usecond" and
# "cycle/nsecond" (2021-2022), "Ghz"/"Mhz" (2023 on), "hz"; all go to Hz.
_CLOCK_UNIT = re.compile(r"^(?:cycles?/(second|msecond|usecond|nsecond)|([kmg]?)hz)$", re.I)
_HZ_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
_CYCLE_UNIT = re.compile(r"^(K|M|G)?cycles?$")
# ncu prints decimal prefixes for bytes (1 KiB of shared memory shows as "1.02 Kbyte").
_BYTE_UNIT = re.compile(r"^(K|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?(byte|B)$")
_PREFIX = {None: 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}  # fmt: skip


@functools.lru_cache(maxsize=1024)  # called for every metric value a derivation reads
def unit_scale(unit: str) -> tuple[float, str]:
    """Factor to SI base units and the base unit's name for an ncu unit string.

    Time goes to seconds (``"s"``), bytes to bytes (``"byte"``, decimal prefixes as ncu
    prints them), clock rates to Hz (``"hz"``: ``cycle/usecond``, ``Ghz``, ...), cycle
    counts to cycles; ``sector`` stays sectors; other units (``""``, ``%``, ``inst``, other
    rates) are returned unchanged with factor 1.

    >>> unit_scale("usecond"), unit_scale("Kbyte"), unit_scale("KiB"), unit_scale("")
    ((1e-06, 's'), (1000.0, 'byte'), (1024.0, 'byte'), (1.0, ''))
    >>> unit_scale("cycle/usecond"), unit_scale("Ghz"), unit_scale("cycle")
    ((1000000.0, 'hz'), (1000000000.0, 'hz'), (1.0, 'cycle'))
    """
    u = (unit or "").strip()
    if u in _TIME_UNITS:
        return _TIME_UNITS[u], "s"
    m = _CLOCK_UNIT.match(u)
    if m:
        per = m.group(1)
        return (1.0 / _TIME_UNITS[per.lower()] if per else _HZ_PREFIX[m.group(2).lower()]), "hz"
    m = _CYCLE_UNIT.match(u)
    if m:
        return _PREFIX[m.group(1)], "cycle"
    m = _BYTE_UNIT.match(u)
    if m:
        return _PREFIX[m.group(1)], "byte"
    if u in ("sector", "sectors"):
        return 1.0, "sector"
    return 1.0, u


def metric_kind(metric: str) -> str | None:
    """What a metric counts, for checking its unit: ``"time"``, ``"bytes"``, ``"sectors"``,
    ``"count"`` (a metric the derivations use that counts instructions or operations), or
    None (a metric roofprof does not use; its unit is not checked).

    >>> metric_kind("gpu__time_duration.sum"), metric_kind("dram__bytes.sum")
    ('time', 'bytes')
    """
    if metric == TIME_METRIC or "time_duration" in metric:
        return "time"
    if "cycles_elapsed" in metric:
        return "clock" if metric.endswith(".per_second") else "cycles"
    if "sectors" in metric:
        return "sectors"
    if "bytes" in metric:
        return "bytes"
    if metric in KNOWN_METRICS:
        return "count"
    return None


#: The unit assumed, with a warning, when a used metric has none (``--print-units base``).
BASE_UNITS = {
    "time": "nsecond",
    "bytes": "byte",
    "sectors": "sector",
    "count": "",
    "cycles": "cycle",
    "clock": "cycle/second",
}


def unit_problem(metric: str, unit: str) -> str | None:
    """Why ``unit`` cannot be the unit of ``metric`` (e.g. a time in ``byte``), or None.

    An empty unit is not a problem here (the caller warns and assumes :data:`BASE_UNITS`).

    >>> unit_problem("gpu__time_duration.sum", "byte")
    "a time metric in 'byte' (expected a time unit such as nsecond, usecond, msecond)"
    >>> unit_problem("dram__bytes.sum", "Mbyte") is None
    True
    """
    kind = metric_kind(metric)
    u = (unit or "").strip()
    if kind is None or not u:
        return None
    base = unit_scale(u)[1]
    if kind == "time" and base != "s":
        return f"a time metric in {u!r} (expected a time unit such as nsecond, usecond, msecond)"
    if kind == "bytes" and base != "byte":
        return f"a byte metric in {u!r} (expected byte, Kbyte, Mbyte, ...)"
    if kind == "cycles" and base != "cycle":
        return f"a cycle count in {u!r} (expected cycle)"
    if kind == "clock" and base != "hz":
        return f"a clock rate in {u!r} (expected cycle/second, cycle/usecond, Ghz, ...)"
    if kind == "sectors" and base not in ("sector", "byte"):
        return f"a sector metric in {u!r} (expected sector)"
    if kind == "count" and (base in ("s", "byte", "sector") or "%" in u or "/" in u):
        return f"a count metric in {u!r} (expected a plain count such as inst)"
    return None


_NA_VALUES = {"n/a", "na", "nan", "(!) n/a", "-", "--", "not available", "no data"}


def parse_number(text: str) -> float | None:
    """Parse an ncu number (thousands separators allowed); ``None`` for n/a or empty.

    Raises ValueError for text that is not a number.

    >>> (parse_number("53,261,312"), parse_number("87.50"),
    ...  parse_number("4.0e-05"), parse_number("n/a"))
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
    def time_source(self) -> tuple[str, ...] | None:
        """The metrics the time comes from: ``gpu__time_duration.sum``, else a pair of
        :data:`CYCLE_TIME_METRICS` (cycles, cycles per second); ``None`` when neither."""
        if self.value(TIME_METRIC) is not None:
            return (TIME_METRIC,)
        for pair in CYCLE_TIME_METRICS:
            if self.value(pair[0]) is not None and self.value(pair[1]):
                return pair
        return None

    @property
    def time_s(self) -> float | None:
        """Kernel duration in seconds: ``gpu__time_duration.sum``, or elapsed SM cycles
        divided by the SM clock (``sm__cycles_elapsed.avg / .avg.per_second``)."""
        source = self.time_source
        if source is None:
            return None
        values = [self.value(m) or 0.0 for m in source]
        return values[0] if len(values) == 1 else values[0] / values[1]

    def byte_source(self, level: str) -> tuple[str, ...] | None:
        """The metrics that give the bytes at ``level`` ("l1", "l2", "dram"), or ``None``."""
        if level not in BYTE_METRICS:
            raise UnknownLevelError(level, LEVELS)
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
        """Bytes through the L1/TEX tag stage (``l1tex__t_bytes``, or a lower bound from
        sectors)."""
        return self.bytes_at("l1")

    # -- FLOPs
    @property
    def cuda_core_flops(self) -> dict[str, float]:
        """CUDA-core FLOPs per precision (add + mul + 2*fma); only precisions collected."""
        out: dict[str, float] = {}
        extra = CUDA_CORE_FLOPS_EXTRA.get(self.family or "", {})
        for dtype, pairs in CUDA_CORE_FLOPS.items():
            present = [
                (m, f) for m, f in (*pairs, *extra.get(dtype, ())) if self.value(m) is not None
            ]
            if present:
                out[dtype] = sum(self.value(m) * f for m, f in present)  # type: ignore[operator]
        return out

    def tensor_source(self, dtype: str) -> tuple[tuple[str, float], ...] | None:
        """The tensor-core counters used for ``dtype`` on this kernel's architecture."""
        table = tensor_table(self.family)
        for alt in table.get(dtype, ()):
            if all(self.value(m) is not None for m, _ in alt):
                return alt
        return None

    @property
    def tensor_flops(self) -> dict[str, float]:
        """Tensor-core FLOPs (operations) per source dtype; only dtypes collected."""
        out: dict[str, float] = {}
        table = tensor_table(self.family)
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
        return dict(self._pipe_flops)

    @functools.cached_property
    def _pipe_flops(self) -> tuple[tuple[str, float], ...]:
        """flops_by_pipe, worked out once per record (every derived FLOP figure asks for it)."""
        out = {f"cuda:{d}": v for d, v in self.cuda_core_flops.items()}
        out.update({f"tensor:{d}": v for d, v in self.tensor_flops.items()})
        return tuple(out.items())

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
            "time_source": list(self.time_source or ()),
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
