"""The GPU datasheet catalogue: compute dtypes and the cited figures of each GPU.

``GpuSpec`` rows come from ``data/gpus.json`` (datasheet values, dense, each row with its
sources); :func:`load_gpu` finds one by id or alias. :mod:`roofprof.specs` is the public
face of these names.

>>> load_gpu("A100").sm_count
108
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roofprof._resources import data_root
from roofprof.errors import ConfigError, UnknownNameError

__all__ = [
    "AMD_ARCHITECTURES",
    "BYTES_PER_ELEMENT",
    "DTYPES",
    "GpuSpec",
    "gpu_collective_figures",
    "gpu_interconnect_defaults",
    "gpu_sources",
    "list_gpus",
    "load_gpu",
    "match_gpu",
]

#: Architectures of AMD GPUs (CDNA). Their rows are analytic only: no device backend of
#: roofprof measures an AMD GPU, so they serve datasheet predictions and nothing else.
AMD_ARCHITECTURES = ("cdna3", "cdna4")

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
#: Bytes per element of each compute dtype (fp4: Blackwell's E2M1, half a byte; its block scales
#: belong to the weight format, see :mod:`roofprof.precision`).
BYTES_PER_ELEMENT = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "fp4": 0.5,
}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet figures (SI units; dense tensor rates).

    ``peak_flops_per_s`` maps a dtype (``fp64 fp64_tensor fp32 tf32 bf16 fp16 fp8 int8``)
    to FLOP/s (OP/s for int8); a dtype the GPU lacks is absent. ``alternatives`` holds
    disputed figures under the same field names. On an AMD GPU ``sm_count`` counts compute
    units and ``compute_capability`` is the GFX IP version (gfx942: ``9.4``).
    """

    id: str
    name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    sm_count: int
    vector_clock_mhz: float
    tensor_clock_mhz: float
    memory_type: str
    memory_bytes: float
    memory_bytes_per_s: float
    l2_bytes: float | None
    tdp_w: float | None
    peak_flops_per_s: Mapping[str, float]
    nvlink_bytes_per_s: float | None = None
    interconnect: Mapping[str, Any] = field(default_factory=dict)
    alternatives: Mapping[str, Any] = field(default_factory=dict)
    confidence: str = ""
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def vendor(self) -> str:
        """``nvidia`` or ``amd`` (from the architecture)."""
        return "amd" if self.architecture in AMD_ARCHITECTURES else "nvidia"

    @property
    def measurable(self) -> bool:
        """Whether a device backend of roofprof can measure this GPU (NVIDIA: CUDA; AMD: none,
        its row is analytic only)."""
        return self.vendor == "nvidia"

    def matmul_peak_flops_per_s(self, dtype: str) -> float:
        """Best dense matmul rate for ``dtype`` (FLOP/s): fp64 takes the FP64 tensor rate if any.

        Raises:
            ConfigError: the GPU has no unit for that dtype (e.g. fp8 on an A100).
        """
        rates = dict(self.peak_flops_per_s)
        if dtype == "fp64" and "fp64_tensor" in rates:
            return max(rates["fp64_tensor"], rates.get("fp64", 0.0))
        if dtype not in rates:
            have = sorted(k for k in rates if k in DTYPES)
            raise ConfigError(
                f"{self.id} has no {dtype} rate in its datasheet; dtypes it has: {', '.join(have)}"
            )
        return rates[dtype]

    def ridge_flops_per_byte(self, dtype: str) -> float:
        """Ridge point of the datasheet roofline (FLOP/byte): peak / DRAM bandwidth."""
        return self.matmul_peak_flops_per_s(dtype) / self.memory_bytes_per_s


@functools.lru_cache(maxsize=1)
def _gpu_catalogue() -> tuple[dict[str, Any], tuple[GpuSpec, ...]]:
    raw = json.loads((data_root() / "gpus.json").read_text(encoding="utf-8"))
    specs = []
    for row in raw["gpus"]:
        specs.append(
            GpuSpec(
                id=row["id"],
                name=row["name"],
                aliases=tuple(row.get("aliases", ())),
                architecture=row.get("architecture", ""),
                compute_capability=str(row.get("compute_capability", "")),
                sm_count=int(row["sm_count"]),
                vector_clock_mhz=float(row["vector_clock_mhz"]),
                tensor_clock_mhz=float(row.get("tensor_clock_mhz") or row["vector_clock_mhz"]),
                memory_type=row.get("memory_type", ""),
                memory_bytes=float(row["memory_bytes"]),
                memory_bytes_per_s=float(row["memory_bytes_per_s"]),
                l2_bytes=_opt_float(row.get("l2_bytes")),
                tdp_w=_opt_float(row.get("tdp_w")),
                peak_flops_per_s={
                    k: float(v) for k, v in row["peak_flops_per_s"].items() if v is not None
                },
                nvlink_bytes_per_s=_opt_float(row.get("nvlink_bytes_per_s")),
                interconnect=row.get("interconnect") or {},
                alternatives=row.get("alternatives") or {},
                confidence=row.get("confidence", ""),
                notes=tuple(row.get("notes", ())),
                sources=tuple(row.get("sources", ())),
            )
        )
    return raw.get("sources", {}), tuple(specs)


@functools.lru_cache(maxsize=1)
def _gpu_raw() -> dict[str, Any]:
    return json.loads((data_root() / "gpus.json").read_text(encoding="utf-8"))


def gpu_interconnect_defaults() -> Mapping[str, Any]:
    """``collective_defaults`` of ``gpus.json``: link efficiency, CUDA-graph α, PCIe lane rates."""
    return _gpu_raw()["collective_defaults"]


def gpu_collective_figures() -> tuple[Mapping[str, Any], ...]:
    """``collectives`` of ``gpus.json``: published busbw figures, each with its source key."""
    return tuple(_gpu_raw()["collectives"])


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def list_gpus() -> tuple[GpuSpec, ...]:
    """All GPUs in the database, in file order."""
    return _gpu_catalogue()[1]


def gpu_sources() -> Mapping[str, Any]:
    """The citation table of ``gpus.json`` (source key → title/url)."""
    return _gpu_catalogue()[0]


def match_gpu(name: str) -> GpuSpec | None:
    """The spec whose id, name or alias matches ``name`` (case/punctuation-insensitive), or None.

    Used to match a measured device (its NVML name) to its datasheet row.

    >>> match_gpu("NVIDIA H100 80GB HBM3").id
    'h100-sxm'
    >>> match_gpu("Some CPU") is None
    True
    """
    key = _norm(name)
    for spec in list_gpus():
        if key in {_norm(spec.id), _norm(spec.name), *(_norm(a) for a in spec.aliases)}:
            return spec
    return None


def load_gpu(name: str) -> GpuSpec:
    """The spec for a GPU id or alias.

    Raises:
        UnknownNameError: not in the database; the message lists the ids, closest first.
    """
    spec = match_gpu(name)
    if spec is None:
        raise UnknownNameError("GPU", name, [s.id for s in list_gpus()])
    return spec
