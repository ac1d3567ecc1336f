"""A checkpoint's ``quantization_config`` as a stored weight format, and the stored bytes.

:func:`scheme_of` reads the ``quantization_config`` of a ``config.json`` (the methods
transformers loads: AWQ, GPTQ, compressed-tensors, fp8, bitsandbytes, MXFP4, HQQ) into a
:class:`Scheme`: bits per weight of the quantized linear layers **including** their scales
and zero points, and the ops left in 16 bits. :func:`stored_weights` then makes the
:class:`~roofprof.precision.StoredWeights` a prediction reads: per-op bits from the tensor
table when one is known (safetensors headers, a GGUF file: exact bytes), else from the
scheme, with ``total_size`` of ``model.safetensors.index.json`` as the stored total.

Each method's layout and its citation are in ``docs/models.md`` ("Quantized checkpoints").

>>> s = scheme_of({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True})
>>> s.format, s.bits
('awq-int4-g128', 4.15625)
>>> scheme_of({"quant_method": "bitsandbytes", "load_in_4bit": True}).bits
4.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.checkpoints.tensors import Tensor
    from roofprof.model_specs import ModelSpec
    from roofprof.precision import StoredWeights

__all__ = ["METHODS", "Scheme", "scheme_of", "stored_weights"]

#: ``quant_method`` values read (any other is named in the refusal).
METHODS = ("awq", "gptq", "compressed-tensors", "fp8", "bitsandbytes", "mxfp4", "hqq")


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's quantization: ``bits`` per weight of the quantized linear layers
    (scales and zero points included); ``unquantized`` ops stay at the checkpoint's 16 bits.
    ``bits`` is NaN for a method roofprof does not model (``describe`` names it)."""

    method: str
    format: str
    bits: float
    unquantized: tuple[str, ...]
    describe: str
    assumption: str = ""


def scheme_of(qc: Mapping[str, Any] | None, label: str = "config") -> Scheme | None:
    """The scheme of a ``quantization_config`` (None: no quantization).

    Raises:
        ConfigError: a field of a known method has the wrong type or range (``bits`` not
            2..8, a ``group_size`` that is not -1 or a positive integer); the message names
            the config and the field.
    """
    from roofprof.models.checkpoint_ops import UNQUANTIZED_OPS, ops_of_pattern

    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise ConfigError(f"{label}: field 'quantization_config' must be an object")
    method = str(qc.get("quant_method", "")).lower()
    skip = [
        p
        for key in ("modules_to_not_convert", "ignore", "llm_int8_skip_modules")
        for p in qc.get(key) or ()
    ]
    unquantized = tuple(
        dict.fromkeys([*UNQUANTIZED_OPS, *(o for p in skip for o in ops_of_pattern(str(p)))])
    )
    read = _READERS.get(method)
    if read is None:
        return Scheme(
            method or "unnamed",
            f"unknown-{method or 'unnamed'}",
            math.nan,
            unquantized,
            f"{label} is quantized with {method or 'an unnamed method'!r}, which roofprof does "
            f"not model (it reads {', '.join(METHODS)}); name the stored format with --weights "
            "(e.g. --weights int4)",
        )
    fmt, bits, words, assumption = read(qc, label)
    return Scheme(method, fmt, bits, unquantized, words, assumption)


def _int(qc: Mapping[str, Any], key: str, default: int, label: str, lo: int, hi: int) -> int:
    value = qc.get(key, default)
    if value is None:
        value = default
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (lo <= value <= hi or value == -1)
    ):
        raise ConfigError(
            f"{label}: quantization_config field {key!r} must be an integer in {lo}..{hi}, "
            f"got {value!r}"
        )
    return value


def _awq_gptq(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """AWQ / GPTQ: ``bits``-bit integers packed in int32, an fp16 scale and a packed
    ``bits``-bit zero point per group of ``group_size`` inputs (GPTQ stores the zero points
    even when symmetric; its ``g_idx``, 32 bits per input row, is < 0.01 bit per weight)."""
    method = str(qc["quant_method"]).lower()
    w = _int(qc, "bits", 4, label, 2, 8)
    g = _int(qc, "group_size", 128, label, 1, 2**20 if method == "gptq" else 2**20)
    zero = method == "gptq" or bool(qc.get("zero_point", True))
    if g == -1:  # one scale per output channel: < 0.01 bit per weight
        return f"{method}-int{w}-channel", float(w), f"{method}, {w}-bit, per-channel scales", ""
    bits = w + 16 / g + (w / g if zero else 0.0)
    return (
        f"{method}-int{w}-g{g}",
        bits,
        f"{method}, {w}-bit, group {g}" + (", zero points" if zero else ""),
        "",
    )


def _compressed(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """compressed-tensors (llm-compressor): the first config group's ``weights``:
    ``num_bits`` of ``type`` int/float, a scale per group (16-bit; FP8 for 4-bit floats,
    NVFP4) or per channel/tensor (not counted), a zero point per group when asymmetric."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError(f"{label}: compressed-tensors quantization_config has no config_groups")
    first = next(iter(groups.values()))
    w = first.get("weights") if isinstance(first, Mapping) else None
    if not isinstance(w, Mapping):
        raise ConfigError(f"{label}: compressed-tensors config group has no 'weights'")
    n = _int(w, "num_bits", 8, label, 2, 16)
    kind = str(w.get("type", "int"))
    strategy = str(w.get("strategy", "tensor"))
    acts = first.get("input_activations")
    a = f"a{acts.get('num_bits')}" if isinstance(acts, Mapping) else "a16"
    name = f"ct-{'fp' if kind == 'float' else 'int'}{n}-{a}"
    if strategy in ("group", "tensor_group"):
        g = _int(w, "group_size", 128, label, 1, 2**20)
        scale = 8 if kind == "float" and n == 4 else 16
        bits = n + scale / g + (0.0 if w.get("symmetric", True) else n / g)
        return f"{name}-g{g}", bits, f"compressed-tensors, {kind}{n} weights, group {g}, {a}", ""
    if strategy == "block":
        b = w.get("block_structure") or [128, 128]
        bits = n + 32 / (int(b[0]) * int(b[1]))
        return f"{name}-block", bits, f"compressed-tensors, {kind}{n} weights, block {b}, {a}", ""
    return name, float(n), f"compressed-tensors, {kind}{n} weights, per-{strategy} scales, {a}", ""


def _fp8(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """fp8 (DeepSeek-V3, Qwen3-FP8): E4M3 weights, one fp32 scale per
    ``weight_block_size`` block (else per tensor)."""
    block = qc.get("weight_block_size")
    if block:
        if not (
            isinstance(block, Sequence)
            and len(block) == 2
            and all(isinstance(b, int) and b > 0 for b in block)
        ):
            raise ConfigError(
                f"{label}: quantization_config field 'weight_block_size' must be two "
                "positive integers"
            )
        return (
            f"fp8-block{block[0]}",
            8 + 32 / (block[0] * block[1]),
            f"fp8 e4m3, {block[0]}×{block[1]} blocks",
            "",
        )
    return "fp8", 8.0, "fp8 e4m3, per-tensor scales", ""


def _bnb(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """bitsandbytes: 4-bit NF4/FP4 with an fp32 absmax per 64 weights (double quantization:
    an 8-bit absmax per 64 and an fp32 one per 256 of those), or LLM.int8 (int8, one fp32
    scale per row: < 0.01 bit per weight)."""
    if qc.get("load_in_4bit"):
        kind = str(qc.get("bnb_4bit_quant_type", "fp4"))
        if qc.get("bnb_4bit_use_double_quant"):
            return (
                f"bnb-{kind}-dq",
                4 + 8 / 64 + 32 / (64 * 256),
                f"bitsandbytes {kind}, double quantization",
                "",
            )
        return f"bnb-{kind}", 4 + 32 / 64, f"bitsandbytes {kind}, blocks of 64", ""
    if qc.get("load_in_8bit"):
        return "bnb-int8", 8.0, "bitsandbytes LLM.int8", ""
    raise ConfigError(
        f"{label}: bitsandbytes quantization_config sets neither load_in_4bit nor load_in_8bit"
    )


def _mxfp4(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """MXFP4 as gpt-oss publishes it: E2M1 values with an E8M0 scale per 32 (4.25 bits)."""
    return "mxfp4", 4.25, "mxfp4 (E2M1, E8M0 scale per 32)", ""


def _hqq(qc: Mapping[str, Any], label: str) -> tuple[str, float, str, str]:
    """HQQ: ``nbits`` weights with a 16-bit scale and a 16-bit zero point per group."""
    params = (
        (qc.get("quant_config") or {}).get("weight_quant_params")
        or qc.get("weight_quant_params")
        or qc
    )
    n = _int(params, "nbits", 4, label, 1, 8)
    g = _int(params, "group_size", 64, label, 1, 2**20)
    return (
        f"hqq-int{n}-g{g}",
        n + 32 / g,
        f"hqq, {n}-bit, group {g}",
        "scale and zero point taken as 16-bit each",
    )


_READERS = {
    "awq": _awq_gptq,
    "gptq": _awq_gptq,
    "compressed-tensors": _compressed,
    "fp8": _fp8,
    "bitsandbytes": _bnb,
    "mxfp4": _mxfp4,
    "hqq": _hqq,
}


def stored_weights(
    spec: ModelSpec,
    scheme: Scheme | None,
    tensors: Sequence[Tensor] | None = None,
    index_total: int | None = None,
    *,
    source: str = "",
    unquantized_bits: float = 16.0,
) -> StoredWeights | None:
    """The stored weights of a checkpoint (None: unquantized and no tensor table).

    With ``tensors``: each dense op's bits = its tensors' bytes × 8 / its weights
    (:func:`~roofprof.models.checkpoint_ops.op_elements`); every other op (experts, MLA)
    at the rest's bits. Without: the scheme's bits for quantized ops and
    ``unquantized_bits`` for the others; ``index_total`` (bytes) is then the stored total.
    """
    from roofprof.models.checkpoint_ops import op_elements
    from roofprof.precision import StoredWeights

    params = spec.param_count()
    elements = op_elements(spec)
    if tensors:
        from roofprof.checkpoints.tensors import bytes_by_op

        by = bytes_by_op(tensors)
        total = sum(by.values())
        if spec.tie_word_embeddings:  # a tied head stored anyway is the same table
            total -= by.pop("lm_head", 0)
        per = {op: 8.0 * b / elements[op] for op, b in by.items() if op in elements and b}
        rest_bytes = total - sum(b for op, b in by.items() if op in per)
        rest_elems = params - sum(elements[op] for op in per)
        default = (
            8.0 * rest_bytes / rest_elems
            if rest_elems > 0 and rest_bytes > 0
            else (
                scheme.bits
                if scheme is not None and not math.isnan(scheme.bits)
                else unquantized_bits
            )
        )
        if spec.tie_word_embeddings and "embedding" in per:
            per["lm_head"] = per["embedding"]
        return StoredWeights(
            scheme.format if scheme is not None else "checkpoint",
            default,
            tuple(sorted(per.items())),
            8.0 * total / params,
            total,
            source,
            scheme.describe if scheme is not None else "",
            scheme.assumption if scheme is not None else "",
        )
    if scheme is None:
        return None
    if math.isnan(scheme.bits):
        if index_total is None:
            return StoredWeights(
                scheme.format, math.nan, (), math.nan, None, source, scheme.method, scheme.describe
            )
        mean = 8.0 * index_total / params
        return StoredWeights(
            scheme.format,
            mean,
            (),
            mean,
            index_total,
            source,
            scheme.method,
            f"method {scheme.method!r} not modelled: every op at the checkpoint's mean "
            f"{mean:.2f} bits per weight (total_size / parameters); --weights overrides",
        )
    per = {op: unquantized_bits for op in scheme.unquantized if op in elements}
    if spec.tie_word_embeddings and "embedding" in per:
        per["lm_head"] = per["embedding"]
    counted = sum(elements[op] for op in per if op != "lm_head" or not spec.tie_word_embeddings)
    bits_total = sum(
        elements[op] * b for op, b in per.items() if op != "lm_head" or not spec.tie_word_embeddings
    )
    estimate = (bits_total + (params - counted) * scheme.bits) / params
    mean = 8.0 * index_total / params if index_total else estimate
    return StoredWeights(
        scheme.format,
        scheme.bits,
        tuple(sorted(per.items())),
        mean,
        index_total,
        source,
        scheme.describe,
        scheme.assumption,
    )
