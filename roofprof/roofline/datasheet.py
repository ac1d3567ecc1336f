"""Measured ceilings beside the datasheet: :func:`spec_comparison` (percent of spec, clocks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roofprof.devices.base import DeviceInfo
from roofprof.errors import RoofprofError

__all__ = ["spec_comparison"]


def spec_comparison(info: DeviceInfo, ceilings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each measured ceiling beside its datasheet value (percent), where the device has a spec.

    ``compute`` probes compare with the vector rate of the dtype (``peak_flops_per_s``),
    ``gemm`` probes with the best matmul rate (tensor cores where the GPU has them), DRAM
    bandwidth with ``memory_bytes_per_s``. Devices without a spec (every CPU) get
    ``{"available": False, "note": ...}``.
    """
    if info.spec_id is None:
        why = info.spec_note or f"{info.name!r} matches no row of data/gpus.json"
        return {"available": False, "note": why, "rows": []}
    from roofprof.specs import load_gpu

    spec = load_gpu(info.spec_id)
    rows = []
    for c in ceilings:
        ref: float | None = None
        what = ""
        if c["kind"] == "memory" and c.get("level") == "dram":
            ref, what = spec.memory_bytes_per_s, "memory_bytes_per_s"
        elif c["kind"] == "compute" and c.get("probe_kind") == "gemm":
            try:
                ref, what = spec.matmul_peak_flops_per_s(c["dtype"]), f"matmul peak {c['dtype']}"
            except RoofprofError:
                ref = None
        elif c["kind"] == "compute" and "mma" in str(c.get("probe", "")):
            try:  # tensor-core throughput probes compare with the dense tensor rate
                ref, what = spec.matmul_peak_flops_per_s(c["dtype"]), f"matmul peak {c['dtype']}"
            except RoofprofError:
                ref = None
        elif c["kind"] == "compute" and c["dtype"] in ("fp32", "fp64"):
            ref, what = spec.peak_flops_per_s.get(c["dtype"]), f"peak_flops_per_s[{c['dtype']}]"
        elif c["kind"] == "compute":
            continue  # e.g. bf16x2 FMA on CUDA cores: datasheets print no vector rate for it
        if not ref:
            continue
        clock_ratio = None
        if c.get("clock_mhz") and c["kind"] == "compute":
            tensor = c.get("probe_kind") == "gemm" or "mma" in str(c.get("probe", ""))
            spec_clock = spec.tensor_clock_mhz if tensor else spec.vector_clock_mhz
            clock_ratio = c["clock_mhz"] / spec_clock if spec_clock else None
        rows.append(
            {
                "ceiling": c["name"],
                "measured": c["value"],
                "spec": ref,
                "spec_field": what,
                "percent_of_spec": 100.0 * c["value"] / ref,
                "clock_mhz": c.get("clock_mhz"),
                "clock_ratio_to_spec": clock_ratio,
            }
        )
    return {
        "available": True,
        "spec_id": spec.id,
        "spec_name": spec.name,
        "rows": rows,
        "note": "datasheet values from data/gpus.json; percent = measured / datasheet",
    }
