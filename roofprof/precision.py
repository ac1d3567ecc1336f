"""Weight, compute and KV-cache precisions: how many bytes each moves, which peak applies.

A prediction has three precisions (all in :class:`~roofprof.workload.Scenario`):

* ``dtype``: the compute precision: which tensor-core peak the GEMMs run at, and the
  bytes of every activation;
* ``weights``: the stored weight format (:data:`WEIGHT_FORMATS`), whose bits per weight
  **include the scales and zero points** of the format, as its own documentation gives
  them. Weight-only formats (``int8``, ``int4``, ``q8_0``, ``q4_k_m``...) are dequantized
  on the fly and compute in bf16/fp16: they read fewer bytes but run at the 16-bit peak.
  ``fp8`` with ``--dtype fp8`` is W8A8 and runs at the fp8 peak;
* ``kv_dtype``: the KV cache's element type (:data:`KV_DTYPES`).

``None`` for ``weights`` or ``kv_dtype`` means "the same as ``dtype``" (what roofprof did
before these fields existed).

>>> WEIGHT_FORMATS["int4"].bits_per_weight, WEIGHT_FORMATS["nvfp4"].bits_per_weight
(4.25, 4.5)
>>> weight_bits("q4_k_m", "lm_head"), weight_bits("q4_k_m", "q_proj")
(6.5625, 4.5)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from roofprof.errors import ConfigError, UnknownNameError

__all__ = [
    "KV_DTYPES",
    "KV_BYTES",
    "WEIGHT_FORMATS",
    "StoredWeights",
    "WeightFormat",
    "check_compute",
    "kv_bytes",
    "weight_bits",
    "weight_format",
]

#: KV-cache element types and their bytes per element.
KV_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
KV_DTYPES = tuple(KV_BYTES)


@dataclass(frozen=True)
class WeightFormat:
    """A stored weight format.

    Attributes:
        name: the ``--weights`` value.
        bits_per_weight: bits per weight element **including** block scales and zero points.
        compute_dtypes: compute dtypes it runs with (the first is the usual one).
        weight_only: dequantized to the compute dtype on the fly (no low-precision GEMM).
        citation: the format's own documentation.
        derivation: how ``bits_per_weight`` follows from the documented layout.
        per_op_bits: ops stored in another sub-format (mixed formats such as Q4_K_M),
            as (op name, bits per weight); a fraction of layers is averaged in.
    """

    name: str
    bits_per_weight: float
    compute_dtypes: tuple[str, ...]
    weight_only: bool
    citation: str
    derivation: str
    per_op_bits: Mapping[str, float] = field(default_factory=dict)


_Q4K = 4.5  # 144-byte super-block of 256 weights
_Q6K = 6.5625  # 210-byte super-block of 256 weights
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", 32.0, ("fp32",), False, "IEEE 754 binary32", "32 bits, no scale"),
        WeightFormat(
            "bf16",
            16.0,
            ("bf16",),
            False,
            "https://pytorch.org/docs/stable/tensor_attributes.html "
            "(torch.bfloat16: 1 sign, 8 exponent, 7 mantissa bits)",
            "16 bits, no scale",
        ),
        WeightFormat(
            "fp16", 16.0, ("fp16", "bf16"), False, "IEEE 754 binary16", "16 bits, no scale"
        ),
        WeightFormat(
            "fp8",
            8.0,
            ("fp8", "bf16", "fp16"),
            False,
            "https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html"
            " (E4M3 values with a per-tensor scaling factor)",
            "8 bits per weight; one fp32 scale per tensor (or per row): < 0.01 bit per weight, "
            "not counted",
        ),
        WeightFormat(
            "int8",
            8.0,
            ("bf16", "fp16", "int8"),
            True,
            "https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py "
            "(WeightOnlyInt8QuantHandler: int8 weights, one scale per output channel)",
            "8 bits per weight; one 16-bit scale per output channel of k inputs "
            "(16/k bits, < 0.01 for k >= 2048), not counted",
        ),
        WeightFormat(
            "int4",
            4.25,
            ("bf16", "fp16"),
            True,
            "https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py "
            "(WeightOnlyInt4QuantHandler: groupsize 128, bf16 scales_and_zeros)",
            "4 bits + (16-bit scale + 16-bit zero point) per group of 128 = 4 + 32/128 = 4.25",
        ),
        WeightFormat(
            "nvfp4",
            4.5,
            ("fp4", "bf16"),
            False,
            "https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-"
            "inference/ (E2M1 values, one FP8 E4M3 scale per 16-value block, "
            "plus an FP32 tensor scale)",
            "4 bits + 8-bit scale per 16 values = 4 + 8/16 = 4.5",
        ),
        WeightFormat(
            "mxfp4",
            4.25,
            ("fp4", "bf16"),
            False,
            "https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf "
            "(OCP MX v1.0: E2M1 elements, one E8M0 scale per block of 32)",
            "4 bits + 8-bit scale per 32 values = 4 + 8/32 = 4.25",
        ),
        WeightFormat(
            "q8_0",
            8.5,
            ("fp16", "bf16"),
            True,
            "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-common.h "
            "(block_q8_0: one ggml_half scale d and 32 int8 qs)",
            "(2 + 32) bytes per 32 weights = 8.5 bits",
        ),
        WeightFormat(
            "q4_k_m",
            _Q4K,
            ("fp16", "bf16"),
            True,
            "https://github.com/ggml-org/llama.cpp/pull/1684 "
            '(k-quants: Q4_K "ends up effectively using '
            '4.5 bpw", Q6_K "6.5625 bpw"); Q4_K_M mix from llama.cpp\'s quantize rules '
            "(src/llama-quant.cpp: Q6_K for output.weight and for attn_v / ffn_down "
            "on about half the layers)",
            "Q4_K 4.5 bpw; lm_head in Q6_K (6.5625); v_proj and down_proj half Q6_K, half Q4_K: "
            "(4.5 + 6.5625) / 2 = 5.53 bpw (derived)",
            per_op_bits={
                "lm_head": _Q6K,
                "v_proj": (_Q4K + _Q6K) / 2,
                "down_proj": (_Q4K + _Q6K) / 2,
            },
        ),
    )
}


@dataclass(frozen=True)
class StoredWeights:
    """The weights as a checkpoint stores them (a quantized ``config.json``, safetensors
    headers, a GGUF tensor table): what a prediction reads when ``--weights`` is not given.

    Attributes:
        format: a name for the outputs (``awq-int4-g128``, ``gguf-Q4_K_M``, ...).
        bits_per_weight: bits per stored weight (scales and zero points included) of every
            op not in ``per_op_bits``.
        per_op_bits: (op name, bits per weight) of the ops stored otherwise (an unquantized
            ``lm_head``; a GGUF file's per-tensor types), sorted.
        mean_bits: all stored weight bytes × 8 / all parameters (the memory fit's figure).
        total_bytes: stored weight bytes, when a file gave them (None: from the format).
        source: where the figures come from, in words (``safetensors headers (2 files)``,
            ``model.safetensors.index.json total_size``, ``quantization_config``, ...).
        quantization: the checkpoint's quantization in words (``awq, 4-bit, group 128``).
        assumption: an assumption the figures rest on (empty when none); ``--weights``
            overrides it.

    >>> w = StoredWeights("awq-int4-g128", 4.15625, (("lm_head", 16.0),), 5.0)
    >>> w.bits("q_proj"), w.bits("lm_head")
    (4.15625, 16.0)
    """

    format: str
    bits_per_weight: float
    per_op_bits: tuple[tuple[str, float], ...] = ()
    mean_bits: float = 0.0
    total_bytes: int | None = None
    source: str = ""
    quantization: str = ""
    assumption: str = ""

    def bits(self, op_name: str) -> float:
        """Bits per stored weight of op ``op_name`` (scales and zero points included)."""
        return dict(self.per_op_bits).get(op_name, self.bits_per_weight)

    def describe(self) -> dict[str, object]:
        """The record as JSON-ready fields (for ``predict -f json``)."""
        return {
            "format": self.format,
            "bits_per_weight": self.bits_per_weight,
            "per_op_bits": dict(self.per_op_bits),
            "mean_bits_per_weight": self.mean_bits,
            "stored_bytes": self.total_bytes,
            "source": self.source,
            "quantization": self.quantization,
            "assumption": self.assumption,
        }


def weight_format(name: str) -> WeightFormat:
    """The weight format named ``name``.

    Raises:
        UnknownNameError: not a known format (the message lists them).
    """
    if name not in WEIGHT_FORMATS:
        raise UnknownNameError("weight format", name, list(WEIGHT_FORMATS))
    return WEIGHT_FORMATS[name]


def weight_bits(name: str, op_name: str = "") -> float:
    """Bits per stored weight of ``op_name`` (scales and zero points included).

    >>> weight_bits("bf16"), weight_bits("q8_0")
    (16.0, 8.5)
    """
    fmt = weight_format(name)
    return fmt.per_op_bits.get(op_name, fmt.bits_per_weight)


def kv_bytes(dtype: str) -> float:
    """Bytes per KV-cache element.

    Raises:
        UnknownNameError: not a KV dtype (the message lists them).
    """
    if dtype not in KV_BYTES:
        raise UnknownNameError("KV-cache dtype", dtype, KV_DTYPES)
    return KV_BYTES[dtype]


def check_compute(
    dtype: str, available: Iterable[str], machine: str, weights: str | None = None
) -> None:
    """Raise when the machine has no ``dtype`` compute peak, naming what it has.

    The message suggests the weight-only form (``--dtype bf16 --weights fp8``) when the
    missing dtype is a low precision the weights could still be stored in.

    Raises:
        ConfigError: ``dtype`` is not among ``available``.

    >>> check_compute("bf16", ["bf16", "fp16"], "A100")
    >>> check_compute("fp8", ["bf16", "fp16"], "A100")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    roofprof.errors.ConfigError: A100 has no fp8 compute (it has bf16, fp16); for fp8 weights
    on it use the weight-only form: --dtype bf16 --weights fp8
    """
    have = list(dict.fromkeys(available))
    if dtype in have:
        return
    hint = ""
    stored = weights or dtype
    if stored in WEIGHT_FORMATS and dtype in ("fp8", "fp4", "int8"):
        base = next((d for d in ("bf16", "fp16") if d in have), None)
        if base and base in WEIGHT_FORMATS[stored].compute_dtypes + ("bf16", "fp16"):
            hint = (
                f"; for {stored} weights on it use the weight-only form: "
                f"--dtype {base} --weights {stored}"
            )
    raise ConfigError(f"{machine} has no {dtype} compute (it has {', '.join(have)}){hint}")
