"""Which kernels an engine runs for a pass: physical facts of an engine build, never fitted.

The calibrated estimator (:mod:`roofprof.prediction.calibration`) scales the roofline by an engine's
fitted fractions. Some engines, though, do not run the work the op list counts at the peak
the op list names; :class:`KernelPath` states how, so the fit sees the real work:

* ``fp16_accumulate``: fp16 GEMMs run through cuBLAS with ``CUBLAS_COMPUTE_16F`` (fp16
  accumulation). On GeForce Ada cards that tensor rate is twice the fp32-accumulate rate
  the datasheet peak gives (``data/gpus.json`` holds it in ``alternatives``); on data-centre
  parts both are the same. :func:`fp16_accumulate_ratio` reads the ratio from the GPU's data.
* ``dequantize_to_fp16``: a prefill GEMM with weight-only quantized weights (Q4_K_M, Q8_0...)
  first dequantizes the whole weight matrix into an fp16 buffer (read the quantized bytes,
  write 2 bytes per weight), then runs the fp16 GEMM: a memory-bound pass per matrix.
* ``ubatch_tokens``: a prompt is processed in physical batches of this many tokens; each
  repeats the dequantization (a 1024-token prompt at 512 dequantizes every matrix twice).
* ``flash_attention``: ``False`` materialises the attention score matrix (the op list's
  ``attention="unfused"`` counting: ``K·Q``, softmax and ``V·softmax`` as separate kernels).

Only ``llama.cpp`` has a path today: the May 2024 ``llama-bench`` build of the corpus (S13,
``LLAMA_CUBLAS=1``, default settings). In that build, GPUs with tensor cores ran prefill
GEMMs of F16 *and* quantized weights through ``ggml_cuda_op_mul_mat_cublas`` (quantized
weights converted to fp16 first, ``cublasGemmEx`` with ``CUBLAS_COMPUTE_16F``; the MMQ
kernels became the default for quantized prefill only with ggml-org/llama.cpp#8075, June 2024;
before it the startup log reads ``CUDA_USE_TENSOR_CORES: yes``, as in #4766), ``n_ubatch``
defaulted to 512, and flash attention was off (S13 caveats).

>>> KERNEL_PATHS["llama.cpp"].ubatch_tokens, path_of("vllm") == KernelPath()
(512, True)
>>> round(fp16_accumulate_ratio("rtx-4090"), 2), fp16_accumulate_ratio("a100")
(2.0, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from roofprof.workload import Op

__all__ = [
    "KERNEL_PATHS",
    "KernelPath",
    "dequantize_bytes",
    "fp16_accumulate_ratio",
    "path_of",
    "peak_scale",
]


@dataclass(frozen=True)
class KernelPath:
    """How an engine runs its prefill GEMMs (see the module docstring); the default is the
    op list as counted (fused attention, the datasheet peak, no dequantization pass)."""

    fp16_accumulate: bool = False
    dequantize_to_fp16: bool = False
    ubatch_tokens: int | None = None
    flash_attention: bool = True
    citation: str = ""

    @property
    def attention_counting(self) -> str:
        """The op list's attention counting that matches the engine (``fused``/``unfused``)."""
        return "fused" if self.flash_attention else "unfused"


KERNEL_PATHS: dict[str, KernelPath] = {
    "llama.cpp": KernelPath(
        fp16_accumulate=True,
        dequantize_to_fp16=True,
        ubatch_tokens=512,
        flash_attention=False,
        citation="llama.cpp of May 2024 (S13 llama-bench, LLAMA_CUBLAS=1): ggml-cuda.cu "
        "ggml_cuda_op_mul_mat_cublas converts src0 to fp16 and calls cublasGemmEx with "
        "CUBLAS_COMPUTE_16F on Volta+; MMQ default only from ggml-org/llama.cpp#8075 (June 2024); "
        "llama-bench defaults n_ubatch=512, flash_attn=0",
    ),
}


def path_of(engine: str) -> KernelPath:
    """The kernel path of an engine profile (the default path when it has none)."""
    return KERNEL_PATHS.get(engine, KernelPath())


def fp16_accumulate_ratio(gpu: str) -> float:
    """fp16-accumulate over fp32-accumulate tensor rate of ``gpu`` (from ``data/gpus.json``:
    the ``alternatives`` fp16 peak where it exceeds the datasheet's; 1 otherwise).

    Raises:
        UnknownNameError: unknown GPU.
    """
    from roofprof.specs import load_gpu

    spec = load_gpu(gpu)
    base = spec.peak_flops_per_s.get("fp16")
    alt = (spec.alternatives.get("peak_flops_per_s") or {}).get("fp16")
    return max(1.0, alt / base) if base and alt else 1.0


def dequantize_bytes(op: Op, path: KernelPath) -> float:
    """Bytes the dequantization pass of one call of ``op`` moves under ``path``: for a prefill
    ``linear`` op whose weights are stored in fewer than 2 bytes each, the quantized weights
    read plus the fp16 copy written, once per physical batch (``ubatch_tokens``); else 0."""
    if not path.dequantize_to_fp16 or op.phase != "prefill" or op.fn != "linear":
        return 0.0
    fp16_bytes = 2.0 * op.n * op.k * op.batch
    if not op.weight_bytes or op.weight_bytes >= fp16_bytes:
        return 0.0
    ubatches = math.ceil(op.m / path.ubatch_tokens) if path.ubatch_tokens else 1
    return ubatches * (op.weight_bytes + fp16_bytes)


def peak_scale(op: Op, path: KernelPath, fp16_ratio: float) -> float:
    """Factor on the compute peak ``op`` runs at under ``path``: ``fp16_ratio``
    (:func:`fp16_accumulate_ratio`) for an fp16 prefill GEMM or attention matmul of an engine
    that accumulates in fp16; 1 otherwise."""
    if (
        path.fp16_accumulate
        and op.phase == "prefill"
        and op.dtype == "fp16"
        and op.kind in ("gemm", "attention")
    ):
        return fp16_ratio
    return 1.0
