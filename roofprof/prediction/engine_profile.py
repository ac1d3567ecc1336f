"""An engine profile (the fitted losses of one engine) and the calibrated estimator that
applies it to a roofline; the model and its fit: :mod:`roofprof.prediction.calibration`.

>>> p = EngineProfile("x", memory_fraction=0.8, memory_fractions={"ampere": 0.7})
>>> p.fractions("ampere", "ampere/tensor-16"), p.fractions("hopper", "hopper/tensor-fp8")
((0.7, 1.0), (0.8, 1.0))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from roofprof.prediction.fraction_groups import compute_path, generation_of
from roofprof.prediction.kernel_paths import dequantize_bytes, path_of, peak_scale
from roofprof.prediction.rollup import OpEstimate
from roofprof.roofline import Roofline
from roofprof.workload import Op

__all__ = ["CUDA_GRAPHS", "ENGINES", "IDEAL", "CalibratedEstimator", "EngineProfile"]

#: Engine profile -> whether it replays CUDA graphs at decode (what the fixed cost is per).
CUDA_GRAPHS = {
    "ideal": True,
    "trt-llm": True,  # TensorRT-LLM engines (S7/S8 in-engine timing)
    "vllm": True,  # vLLM V1 captures CUDA graphs for decode by default
    "sglang": True,
    "gpt-fast": True,  # S5 caveats: "torch.compile (CUDA graphs)"
    "llama.cpp": False,  # S13 is a May 2024 llama-bench build (assumed to launch each kernel)
    "hf-eager": False,  # transformers eager mode: one launch per kernel
}
ENGINES = tuple(CUDA_GRAPHS)


@dataclass(frozen=True)
class EngineProfile:
    """The fitted losses of one engine (see the module docstring for the model)."""

    engine: str
    memory_fraction: float = 1.0
    compute_fraction: float = 1.0
    decode_step_s: float = 0.0
    prefill_step_s: float = 0.0
    launch_s: float = 0.0
    offline_run_s: float = 0.0
    #: a cost per kernel of a prefill pass, for engines that replay CUDA graphs at decode
    #: only (their prefill runs without graphs): replaces ``prefill_step_s`` for them.
    prefill_launch_s: float = 0.0
    cuda_graphs: bool = True
    fitted_from: Mapping[str, str] = field(default_factory=dict)
    rows: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: GPU generation -> memory fraction, and ``generation/tensor path`` -> compute fraction
    #: (:mod:`roofprof.prediction.fraction_groups`); a group not listed takes the engine's
    #: ``memory_fraction`` / ``compute_fraction``.
    memory_fractions: Mapping[str, float] = field(default_factory=dict)
    compute_fractions: Mapping[str, float] = field(default_factory=dict)
    group_rows: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def fractions(self, generation: str, group: str) -> tuple[float, float]:
        """(memory, compute) fraction of a GPU generation and a compute group."""
        return (
            self.memory_fractions.get(generation, self.memory_fraction),
            self.compute_fractions.get(group, self.compute_fraction),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fitted_from"], d["rows"] = (
            dict(self.fitted_from),
            {k: list(v) for k, v in self.rows.items()},
        )
        d["memory_fractions"], d["compute_fractions"] = (
            dict(self.memory_fractions),
            dict(self.compute_fractions),
        )
        d["group_rows"] = {k: list(v) for k, v in self.group_rows.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EngineProfile:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


IDEAL = EngineProfile(
    "ideal", fitted_from={"decode": "none: the roofline itself", "prefill": "none"}
)


class CalibratedEstimator:
    """A rollup :class:`~roofprof.prediction.rollup.Estimator`: a roofline plus an engine
    profile."""

    def __init__(
        self,
        roofline: Roofline,
        profile: EngineProfile,
        *,
        source: str = "",
        level: str = "dram",
        provenance: Mapping[str, Any] | None = None,
        warnings: Sequence[str] = (),
        fp16_ratio: float = 1.0,
        gpu: str | None = None,
    ):
        self.roofline = roofline
        self.profile = profile
        self.source = source
        self.level = level
        self.name = "calibrated"
        self.provenance = dict(provenance or {})
        self.warnings = list(warnings)
        self.machine = roofline.device or None
        self.collectives = (
            None  # a CollectiveModel: rollup.estimate_phase prices collectives with it
        )
        self.kernel_path = path_of(profile.engine)
        self.fp16_ratio = fp16_ratio
        self.generation = generation_of(gpu) if gpu else "unknown"

    def fractions(self, dtype: str) -> tuple[float, float]:
        """(memory, compute) fraction on this GPU's generation for compute dtype ``dtype``."""
        return self.profile.fractions(self.generation, f"{self.generation}/{compute_path(dtype)}")

    def prefetch(self, ops: Sequence[Op]) -> None:
        """Nothing to measure ahead: the calibrated model is arithmetic."""

    def estimate(self, op: Op) -> OpEstimate:
        p = self.profile
        fm, fc = self.fractions(op.dtype)
        bw = self.roofline.memory_bandwidth(self.level) * fm
        peak = self.roofline.compute_peak(op.dtype) * peak_scale(
            op, self.kernel_path, self.fp16_ratio
        )
        compute_s = op.flops / (peak * fc)
        memory_s = op.bytes / bw
        seconds = max(compute_s, memory_s) + p.launch_s
        note = ""
        if (
            dequant := dequantize_bytes(op, self.kernel_path)
        ) > 0:  # the engine's dequantization kernel
            seconds += dequant / bw + p.launch_s
            note = f"includes dequantizing the weights to fp16 ({dequant / 1e6:.1f} MB moved); "
        if op.phase == "prefill" and p.prefill_launch_s:  # prefill kernels, without CUDA graphs
            seconds += p.prefill_launch_s
        if op.fn in ("gather", "onehot_matmul"):  # the embedding, once per pass: the per-step cost
            step = p.prefill_step_s if op.phase == "prefill" else p.decode_step_s
            seconds += step
            note += f"includes the {op.phase} step cost {step * 1e3:.3f} ms" if step else ""
        return OpEstimate(seconds, "compute" if compute_s >= memory_s else "memory", note)

    def ridge(self, dtype: str) -> float:
        fm, fc = self.fractions(dtype)
        return (
            self.roofline.compute_peak(dtype)
            * fc
            / (self.roofline.memory_bandwidth(self.level) * fm)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "roofline_device": self.roofline.device,
            "roofline_source": self.source,
            "ceilings": self.roofline.to_dict()["ceilings"],
            "engine_profile": self.profile.to_dict(),
            "gpu_generation": self.generation,
            "kernel_path": {**asdict(self.kernel_path), "fp16_accumulate_ratio": self.fp16_ratio},
            "calibration": self.provenance,
        }
