"""A checkpoint's tensor table: names, dtypes, shapes and stored bytes, never the values.

Read from safetensors headers (the format: an 8-byte little-endian header length, then a
JSON header mapping each tensor name to ``dtype``, ``shape`` and ``data_offsets``;
https://huggingface.co/docs/safetensors/index#format), from the Hub's parsed headers
(``huggingface_hub.get_safetensors_metadata``) or from a GGUF file's tensor table
(:mod:`roofprof.checkpoints.gguf_file`). The bytes of a tensor are its ``data_offsets``
span: exact, whatever the dtype (packed int4, fp8, scales).

>>> t = Tensor("lm_head.weight", "BF16", (10, 4), 80)
>>> bytes_by_op([t, Tensor("model.norm.weight", "BF16", (4,), 8)])
{'lm_head': 80, None: 8}
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from roofprof.errors import ConfigError

__all__ = [
    "Tensor",
    "bytes_by_op",
    "read_safetensors_header",
    "read_safetensors_headers",
    "tensors_of_header",
]

#: A safetensors header larger than this is not one (real ones are a few MiB at most).
_MAX_HEADER = 100 * 2**20


@dataclass(frozen=True)
class Tensor:
    """One stored tensor: ``nbytes`` is what it occupies in the file (bytes)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_safetensors_header(path: str | Path) -> tuple[Tensor, ...]:
    """The tensors of one ``.safetensors`` file, read from its header only (its first
    8 + N bytes; the tensor data is never read).

    Raises:
        ConfigError: not a safetensors file (short, a header length past the file, a header
            that is not a JSON object of tensors); the message names the file.

    Example: ``read_safetensors_header("model.safetensors")[0].nbytes``.
    """
    p = Path(path)
    try:
        with p.open("rb") as f:
            head = f.read(8)
            size = p.stat().st_size
            if len(head) < 8:
                raise ConfigError(f"{p}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_HEADER, size - 8):
                raise ConfigError(f"{p}: not a safetensors file (header length {n} bytes)")
            raw = f.read(n)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{p}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{p}: not a safetensors file (header is not an object)")
    return tensors_of_header(header, str(p))


def tensors_of_header(header: dict, label: str) -> tuple[Tensor, ...]:
    """The tensors of one parsed safetensors header (``__metadata__`` left out).

    Raises:
        ConfigError: an entry without ``dtype``, ``shape`` and ``data_offsets``.
    """
    return tuple(_tensor(n, info, label) for n, info in header.items() if n != "__metadata__")


def read_safetensors_headers(paths: Iterable[str | Path]) -> tuple[Tensor, ...]:
    """The tensors of several shards, in order (see :func:`read_safetensors_header`)."""
    return tuple(t for p in paths for t in read_safetensors_header(p))


def _tensor(name: str, info: object, path: str) -> Tensor:
    if not isinstance(info, dict):
        raise ConfigError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets")
    try:
        start, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        dtype = str(info["dtype"])
        start, end = int(start), int(end)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets") from None
    if end < start:
        raise ConfigError(f"{path}: tensor {name!r} ends before it starts")
    return Tensor(name, dtype, shape, end - start)


def bytes_by_op(tensors: Iterable[Tensor]) -> dict[str | None, int]:
    """Stored bytes per op (:func:`roofprof.models.checkpoint_ops.op_of_tensor`); None
    gathers the tensors of no GEMM (norms, biases of no op, rotary tables)."""
    from roofprof.models.checkpoint_ops import op_of_tensor

    out: dict[str | None, int] = {}
    for t in tensors:
        op = op_of_tensor(t.name)
        out[op] = out.get(op, 0) + t.nbytes
    return out
