"""Op calls as the cost model of ``trace`` sees them, and the compulsory bytes of one.

An :class:`OpCall` names the op and holds its arguments with :class:`TensorMeta` in place of
tensors (shape, dtype name, strides, storage identity); its :class:`Cost` is FLOPs and
minimum bytes. :func:`read_bytes` and :func:`written_bytes` are the byte conventions every
cost rule shares (:mod:`roofprof.tracing.cost_rules`); :mod:`roofprof.tracing.costs` is the
public face of these names.

>>> x = TensorMeta((4, 8), "bf16", stride=(0, 1))  # a broadcast row
>>> x.distinct_numel, read_bytes([x, x])
(8, 16)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "C10_DTYPE_NAMES",
    "Cost",
    "CostFn",
    "OpCall",
    "TensorMeta",
    "dtype_name",
    "generic_cost",
    "output_numel",
    "read_bytes",
    "tensor_args",
    "written_bytes",
]

#: torch dtype name -> (roofprof dtype name, bytes per element)
_DTYPES: dict[str, tuple[str, float]] = {
    "float32": ("fp32", 4),
    "float": ("fp32", 4),
    "float64": ("fp64", 8),
    "double": ("fp64", 8),
    "float16": ("fp16", 2),
    "half": ("fp16", 2),
    "bfloat16": ("bf16", 2),
    "float8_e4m3fn": ("fp8", 1),
    "float8_e5m2": ("fp8", 1),
    "tf32": ("tf32", 4),
    "int64": ("int64", 8),
    "long": ("int64", 8),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "int16": ("int16", 2),
    "short": ("int16", 2),
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "bool": ("bool", 1),
    "complex64": ("c64", 8),
    "complex128": ("c128", 16),
}
_ITEMSIZE = {name: size for name, size in _DTYPES.values()}
#: profiler ``Input type`` strings (c10 scalar type names) -> torch dtype names
C10_DTYPE_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::half": "float16",
    "c10::bfloat16": "bfloat16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::float8_e4m3fn": "float8_e4m3fn",
    "c10::float8_e5m2": "float8_e5m2",
    "c10::complex<float>": "complex64",
}


def dtype_name(dtype: Any) -> str:
    """roofprof's name of a torch dtype or dtype string: ``torch.float32`` -> ``"fp32"``.

    >>> dtype_name("torch.bfloat16"), dtype_name("c10::Half"), dtype_name("fp32")
    ('bf16', 'fp16', 'fp32')
    """
    text = str(dtype).lower().removeprefix("torch.")
    text = C10_DTYPE_NAMES.get(text, text)
    if text in _ITEMSIZE:
        return text
    return _DTYPES.get(text, (text, 4))[0]


@dataclass(frozen=True)
class TensorMeta:
    """A tensor as the cost model sees it: ``shape``, ``dtype`` (roofprof name, e.g.
    ``"fp32"``), ``stride`` (None: contiguous), ``storage`` (identity of the memory it views,
    for de-duplicating aliased inputs; None: distinct) and ``offset`` (elements)."""

    shape: tuple[int, ...]
    dtype: str = "fp32"
    stride: tuple[int, ...] | None = None
    storage: Any = None
    offset: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float:
        return _ITEMSIZE.get(self.dtype, 4)

    @property
    def distinct_numel(self) -> int:
        """Elements addressed once each: a stride-0 (broadcast) dimension counts once."""
        if self.stride is None:
            return self.numel
        return (
            math.prod(s for s, st in zip(self.shape, self.stride, strict=False) if st != 0)
            if all(self.shape)
            else 0
        )

    @property
    def nbytes(self) -> float:
        """Minimum bytes to read or write this tensor once (broadcasts once)."""
        return self.distinct_numel * self.itemsize

    def key(self) -> tuple:
        return (
            (self.storage, self.offset, self.shape, self.stride)
            if self.storage is not None
            else (id(self),)
        )


@dataclass(frozen=True)
class OpCall:
    """One op call: ``op`` (``"aten::mm"``; ``overload`` separate), positional ``args`` and
    ``kwargs`` with :class:`TensorMeta` in place of tensors, the ``outputs`` (may be empty
    when unknown, e.g. from a trace), ``tags`` (torch's op tags: ``pointwise``,
    ``reduction``, ...), ``mutable`` and ``view`` from the schema, and ``index_rows``: the
    number of distinct indices of a gather when known."""

    op: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[TensorMeta, ...] = ()
    tags: frozenset[str] = frozenset()
    mutable: bool = False
    view: bool = False
    overload: str = "default"
    index_rows: int | None = None
    results: tuple = ()  # the op's returns in position (None where undefined), when known

    @property
    def tensors(self) -> list[TensorMeta]:
        """Tensor arguments in order (lists of tensors flattened)."""
        return [
            t for t in _flatten([*self.args, *self.kwargs.values()]) if isinstance(t, TensorMeta)
        ]

    def arg(self, i: int, name: str | None = None, default: Any = None) -> Any:
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return self.args[i] if i < len(self.args) else default


@dataclass(frozen=True)
class Cost:
    """FLOPs and minimum bytes of one call; ``kind`` classifies the op (``matmul``, ``conv``,
    ``attention``, ``norm``, ``softmax``, ``elementwise``, ``reduction``, ``gather``,
    ``copy``, ``view``, ``create``, ``pool``, ``custom``) and ``note`` says which rule applied."""

    flops: float
    read_bytes: float
    write_bytes: float
    kind: str
    note: str = ""

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf") if self.flops else 0.0


def _flatten(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if isinstance(x, (list, tuple)):
            out.extend(_flatten(x))
        else:
            out.append(x)
    return out


def _distinct(tensors: Iterable[TensorMeta]) -> list[TensorMeta]:
    seen, out = set(), []
    for t in tensors:
        k = t.key()
        if k not in seen:
            seen.add(k)
            out.append(t)
    return out


def read_bytes(tensors: Iterable[TensorMeta]) -> float:
    return sum(t.nbytes for t in _distinct(tensors))


def output_numel(call: OpCall) -> int:
    if call.outputs:
        return call.outputs[0].numel
    shapes = [t.shape for t in call.tensors]  # no outputs known (a trace): broadcast the inputs
    if not shapes:
        return 0
    rank = max(len(s) for s in shapes)
    dims = [
        max((s[len(s) - rank + i] if len(s) - rank + i >= 0 else 1) for s in shapes)
        for i in range(rank)
    ]
    return math.prod(dims)


def written_bytes(call: OpCall, default_dtype: str | None = None) -> float:
    if call.outputs:
        return sum(t.numel * t.itemsize for t in _distinct(call.outputs))
    ts = call.tensors
    itemsize = _ITEMSIZE.get(default_dtype or (ts[0].dtype if ts else "fp32"), 4)
    return output_numel(call) * itemsize


def generic_cost(call: OpCall, flops: float, kind: str, note: str = "") -> Cost:
    """Reads: distinct inputs; writes: outputs not aliasing... (in place: the slice again)."""
    return Cost(flops, read_bytes(call.tensors), written_bytes(call), kind, note)


#: A cost rule: ``fn(call) -> Cost | None``.
CostFn = Callable[[OpCall], "Cost | None"]


def tensor_args(values: Sequence[Any]) -> list[TensorMeta]:
    """The :class:`TensorMeta` among ``values`` (nested lists flattened)."""
    return [t for t in _flatten(values) if isinstance(t, TensorMeta)]
