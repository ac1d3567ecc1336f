"""GPUs side by side: the same scenario predicted on several datasheet GPUs, with the ratios
to the first.

:func:`compare` takes one prediction list per GPU (the same scenarios on each, as
:func:`roofprof.api.compare_gpus` makes them) and returns a :class:`GpuComparison`: one
:class:`GpuRow` per GPU and scenario with its TTFT, decode tokens/s, bound of each phase,
memory fit and ridge point, and the ratios to the first GPU at the same scenario
(``ttft_speedup`` = first TTFT / this TTFT, ``decode_speedup`` = this tokens/s / first
tokens/s: above 1 means faster than the first). The datasheet ratios beside them
(``peak_flops_ratio``, ``bandwidth_ratio``) say which of the two a phase follows: a
memory-bound decode gains about the bandwidth ratio, a compute-bound prefill about the
peak ratio.

>>> from roofprof.api import compare_gpus
>>> c = compare_gpus("llama-3.1-8b", ["a100-sxm-80gb", "h100-sxm"], prompt_tokens=2000)
>>> [round(r.decode_speedup, 2) for r in c.rows], round(c.rows[1].bandwidth_ratio, 2)
([1.0, 1.64], 1.64)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError
from roofprof.prediction.memory_fit import MemoryFit, fit_memory
from roofprof.specs import GpuSpec

if TYPE_CHECKING:
    from roofprof.prediction.records import Prediction

__all__ = ["GpuComparison", "GpuRow", "compare"]


@dataclass(frozen=True)
class GpuRow:
    """One GPU at one scenario, and its ratios to the first GPU at that scenario.

    Attributes:
        gpu: the datasheet row (``data/gpus.json``).
        prediction: the full prediction (its ops, breakdown and inputs).
        memory: the memory fit of the decode scenario (weights, KV cache, allowance).
        ridge_flops_per_byte: the roofline's ridge point at the prediction's dtype (FLOP/B).
        peak_flops_per_s: the datasheet matmul peak at that dtype (FLOP/s), or None.
        ttft_speedup, decode_speedup: first GPU's TTFT / this TTFT; this decode tokens/s /
            the first's (1.0 on the first GPU).
        peak_flops_ratio, bandwidth_ratio: this GPU's datasheet peak and DRAM bandwidth over
            the first's.
    """

    gpu: GpuSpec
    prediction: Prediction
    memory: MemoryFit
    ridge_flops_per_byte: float
    peak_flops_per_s: float | None
    ttft_speedup: float
    decode_speedup: float
    peak_flops_ratio: float | None
    bandwidth_ratio: float

    @property
    def ttft_seconds(self) -> float:
        return self.prediction.prefill.seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.prediction.tokens_per_second

    def to_dict(self, first: str) -> dict[str, Any]:
        """The row as JSON (SI units); ``first`` names the GPU the ratios are to."""
        p = self.prediction
        w = p.decode.workload
        return {
            "gpu": self.gpu.id,
            "name": self.gpu.name,
            "vendor": self.gpu.vendor,
            "model": p.model.id,
            "estimator": p.estimator,
            "dtype": w.dtype,
            "weights": w.weights or w.dtype,
            "batch": w.batch,
            "prompt_tokens": w.prompt_tokens,
            "context_tokens": w.context_tokens,
            "ttft_seconds": self.ttft_seconds,
            "prefill_bound": p.prefill.bound,
            "decode_seconds_per_token": p.decode.seconds,
            "decode_tokens_per_second": self.decode_tokens_per_second,
            "decode_bound": p.decode.bound,
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "peak_flops_per_s": self.peak_flops_per_s,
            "memory_bytes_per_s": self.gpu.memory_bytes_per_s,
            "memory": self.memory.to_dict(),
            "vs_first": {
                "gpu": first,
                "ttft_speedup": self.ttft_speedup,
                "decode_speedup": self.decode_speedup,
                "peak_flops_ratio": self.peak_flops_ratio,
                "bandwidth_ratio": self.bandwidth_ratio,
            },
            "warnings": list(p.warnings),
        }


@dataclass(frozen=True)
class GpuComparison:
    """Rows GPU-major: every scenario of the first GPU, then of the second, ..."""

    gpus: tuple[GpuSpec, ...]
    rows: tuple[GpuRow, ...]

    def to_list(self) -> list[dict[str, Any]]:
        """The JSON of ``roofprof predict --gpu a,b -f json``: one object per row."""
        return [r.to_dict(self.gpus[0].id) for r in self.rows]


def _peak(gpu: GpuSpec, dtype: str) -> float | None:
    try:
        return gpu.matmul_peak_flops_per_s(dtype)
    except ConfigError:
        return None


def _roofline_kind(source: object) -> str:
    """``published ceilings`` or ``datasheet`` (or the source as given): what a roofline is."""
    text = str(source or "")
    if text.startswith(("datasheet", "data/gpus.json")):
        return "datasheet"
    if "published" in text:
        return "published ceilings"
    return text


def compare(gpus: Sequence[GpuSpec], predictions: Sequence[Sequence[Prediction]]) -> GpuComparison:
    """Rows and ratios from ``predictions[i]``, the scenarios predicted on ``gpus[i]``.

    Raises:
        ConfigError: no GPU, or prediction lists of different lengths (not the same
            scenarios on every GPU).

    Warns when the GPUs' predictions start from different kinds of roofline (published
    ceilings on one, datasheet peaks on another, as the calibrated estimator does for a GPU
    without published ceilings): such ratios mix the two.
    """
    if not gpus or len(gpus) != len(predictions):
        raise ConfigError("a comparison needs one prediction list per GPU (at least one GPU)")
    if len({len(p) for p in predictions}) != 1:
        raise ConfigError("every GPU of a comparison must be predicted on the same scenarios")
    base_gpu, base = gpus[0], predictions[0]
    base_peaks = [_peak(base_gpu, p.decode.workload.dtype) for p in base]
    rows = []
    for gpu, preds in zip(gpus, predictions, strict=True):
        for i, p in enumerate(preds):
            peak = _peak(gpu, p.decode.workload.dtype)
            first_peak = base_peaks[i]
            rows.append(
                GpuRow(
                    gpu=gpu,
                    prediction=p,
                    memory=p.memory or fit_memory(p.decode.workload.scenario, gpu),
                    ridge_flops_per_byte=p.ridge_flops_per_byte,
                    peak_flops_per_s=peak,
                    ttft_speedup=base[i].prefill.seconds / p.prefill.seconds,
                    decode_speedup=p.tokens_per_second / base[i].tokens_per_second,
                    peak_flops_ratio=peak / first_peak if peak and first_peak else None,
                    bandwidth_ratio=gpu.memory_bytes_per_s / base_gpu.memory_bytes_per_s,
                )
            )
    sources = {
        g.id: _roofline_kind(p[0].estimator_inputs.get("roofline_source"))
        for g, p in zip(gpus, predictions, strict=True)
    }
    if len(set(sources.values())) > 1:
        mixed = "; ".join(f"{gid}: {src}" for gid, src in sources.items())
        warnings.warn(
            f"the GPUs compared start from different rooflines ({mixed}): their ratios mix "
            "published ceilings and datasheet peaks; --estimator spec compares datasheets only",
            stacklevel=2,
        )
    return GpuComparison(tuple(gpus), tuple(rows))
