"""The cost of collectives between GPUs: nccl-tests' bandwidths, an α-β model, measured tables.

Bandwidths are defined exactly as nccl-tests does (``doc/PERFORMANCE.md``): ``algbw = S / t``
with ``S`` the buffer (the *total* buffer for all-gather and reduce-scatter) and
``busbw = algbw × factor``, the factor being ``2(n−1)/n`` for all-reduce, ``(n−1)/n`` for
all-gather and reduce-scatter, and 1 for send/recv, broadcast and reduce.

:class:`CollectiveModel` prices one collective op (``fn`` in
:data:`~roofprof.workload.COLLECTIVE_FNS`): from a measured :class:`CollectiveTable` when it
has the op and rank count (log-log interpolation in size), else ``t = α + factor · S / busbw``
with the GPU's cited priors (``data/gpus.json``: ring busbw; NVLS all-reduce busbw from the
GPU count where NVLink SHARP applies; where nothing is published, the link rate times the
stated ``link_efficiency``).

>>> busbw_factor("all_reduce", 8), busbw_factor("all_gather", 4)
(1.75, 0.75)
>>> model = CollectiveModel.for_gpu("h100-sxm")
>>> round(model.seconds("all_reduce", 16384, 8) * 1e6, 1)
20.1
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError
from roofprof.specs import GpuSpec, load_gpu

__all__ = [
    "COLLECTIVES",
    "CollectiveModel",
    "CollectiveTable",
    "algbw",
    "busbw",
    "busbw_factor",
    "collective_name",
    "load_collectives",
    "published_collectives",
]

#: nccl-tests collective names; op ``fn`` values map onto them.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send", "broadcast", "reduce")
_FN = {
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "send": "send",
}


def collective_name(fn: str) -> str:
    """The nccl-tests name of an op's collective ``fn`` (a name already in that form is kept).

    >>> collective_name("allreduce"), collective_name("all_gather")
    ('all_reduce', 'all_gather')
    """
    return _FN.get(fn, fn)


def busbw_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` over ``ranks`` ranks.

    Raises:
        ConfigError: an unknown collective or fewer than 1 rank.
    """
    if ranks < 1:
        raise ConfigError(f"a collective needs at least 1 rank, got {ranks}")
    n = ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if op in ("send", "broadcast", "reduce"):
        return 1.0
    raise ConfigError(f"unknown collective {op!r}; valid choices: {', '.join(COLLECTIVES)}")


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``S / t`` (``S`` as nccl-tests defines it)."""
    return size_bytes / seconds


def busbw(op: str, size_bytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth in bytes/s: ``algbw × busbw_factor(op, ranks)``.

    >>> busbw("all_reduce", 8e9, 0.0292, 8) / 1e9  # doctest: +ELLIPSIS
    479.45...
    """
    return algbw(size_bytes, seconds) * busbw_factor(op, ranks)


@dataclass(frozen=True)
class CollectiveTable:
    """Measured collective times: ``(op, ranks) -> [(bytes, seconds), ...]`` sorted by size.

    Between measured sizes the time is interpolated log-log; below the smallest it is the
    smallest size's time (the latency floor); above the largest it grows with ``S`` at the
    largest size's bandwidth.
    """

    points: Mapping[tuple[str, int], tuple[tuple[float, float], ...]]
    source: str = ""

    def seconds(self, op: str, size_bytes: float, ranks: int) -> float | None:
        """Interpolated seconds, or None when ``(op, ranks)`` was not measured."""
        pts = self.points.get((op, ranks))
        if not pts:
            return None
        if size_bytes <= pts[0][0]:
            return pts[0][1]
        if size_bytes >= pts[-1][0]:
            return pts[-1][1] * size_bytes / pts[-1][0]
        for (s0, t0), (s1, t1) in zip(pts, pts[1:], strict=False):
            if s0 <= size_bytes <= s1:
                w = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
                return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))
        return None  # pragma: no cover


def load_collectives(path: str | os.PathLike, *, execution: str = "eager") -> CollectiveTable:
    """A measured table from JSON: a list (or ``{"results": [...]}``) of records with
    ``op``, ``bytes``, ``ranks`` and ``seconds`` (the output of ``roofprof collectives``).

    Records with a ``path`` field (``"eager"`` or ``"graph"``: CUDA graphs) are kept only when
    it equals ``execution``; records without one are always kept (older files). Repeated
    sizes of one op and rank count are averaged.

    Raises:
        ConfigError: unreadable file, bad JSON, a record missing a field or with a
            non-positive size or time, an unknown op, no record of ``execution``.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--collectives {path}: cannot read it ({exc})") from exc
    rows = raw.get("results") if isinstance(raw, Mapping) else raw
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"--collectives {path}: expected a non-empty list of measurements")
    points: dict[tuple[str, int], dict[float, list[float]]] = {}
    seen_paths: set[str] = set()
    for i, row in enumerate(rows):
        try:
            op, size, ranks, t = (
                str(row["op"]),
                float(row["bytes"]),
                int(row["ranks"]),
                float(row["seconds"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"--collectives {path}: record {i} needs op, bytes, ranks, seconds ({exc})"
            ) from exc
        busbw_factor(op, max(ranks, 1))
        if not (size > 0 and t > 0 and math.isfinite(size) and math.isfinite(t)):
            raise ConfigError(f"--collectives {path}: record {i} has a non-positive size or time")
        kind = row.get("path")
        if kind is not None:
            seen_paths.add(str(kind))
            if str(kind) != execution:
                continue
        points.setdefault((op, ranks), {}).setdefault(size, []).append(t)
    if not points:
        raise ConfigError(
            f"--collectives {path}: no {execution!r} measurements; paths there: "
            f"{', '.join(sorted(seen_paths))}"
        )
    return CollectiveTable(
        {
            k: tuple(sorted((s, sum(ts) / len(ts)) for s, ts in v.items()))
            for k, v in points.items()
        },
        str(path),
    )


@dataclass(frozen=True)
class CollectiveModel:
    """Prices collectives on one GPU type's interconnect (seconds per call).

    ``ring_busbw_bytes_per_s``: busbw of ring all-reduce, all-gather and reduce-scatter;
    ``nvls_busbw_bytes_per_s`` and ``nvls_min_gpus``: all-reduce with NVLink SHARP (None:
    not available); ``p2p_bytes_per_s``: send/recv; ``alpha_s``: the per-call latency.
    """

    ring_busbw_bytes_per_s: float
    alpha_s: float
    p2p_bytes_per_s: float
    nvls_busbw_bytes_per_s: float | None = None
    nvls_min_gpus: int | None = None
    table: CollectiveTable | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def for_gpu(
        cls, gpu: str | GpuSpec, *, table: CollectiveTable | None = None, graphs: bool = False
    ) -> CollectiveModel:
        """The α-β priors of ``gpu`` from ``data/gpus.json`` (``graphs``: CUDA-graph α).

        Raises:
            UnknownNameError: an unknown GPU.
        """
        from roofprof.specs import gpu_interconnect_defaults

        spec = gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)
        ic, defaults = dict(spec.interconnect), gpu_interconnect_defaults()
        eff = float(defaults["link_efficiency"])
        lanes = defaults["pcie_bytes_per_s_per_lane"]
        pcie = float(lanes.get(str(ic.get("pcie_generation") or 4), lanes["4"])) * int(
            ic.get("pcie_lanes") or 16
        )
        # the GPU-to-GPU fabric: NVLink, else AMD Infinity Fabric (xGMI), else the PCIe link
        fabric = (
            ("NVLink", ic.get("nvlink_bytes_per_s_per_direction"))
            if ic.get("nvlink_bytes_per_s_per_direction")
            else ("Infinity Fabric", ic.get("xgmi_bytes_per_s_per_direction"))
        )
        link = fabric[1] or pcie
        ring = ic.get("ring_busbw_bytes_per_s")
        notes = (
            []
            if ring
            else [
                f"{spec.id}: no published collective bandwidth; busbw = {eff:g} × the "
                f"{fabric[0] if fabric[1] else 'PCIe'} rate"
            ]
        )
        alpha = (
            float(defaults["alpha_graph_s"]) if graphs else float(ic.get("alpha_eager_s") or 20e-6)
        )
        return cls(
            float(ring or eff * link),
            alpha,
            eff * float(link),
            ic.get("nvls_allreduce_busbw_bytes_per_s"),
            ic.get("nvls_min_gpus"),
            table,
            f"data/gpus.json:{spec.id}" + (f" + {table.source}" if table else ""),
            tuple(notes),
        )

    def bus_bytes_per_s(self, op: str, ranks: int) -> float:
        """The bus bandwidth the model uses for ``op`` at ``ranks`` GPUs (bytes/s)."""
        if op == "send":
            return self.p2p_bytes_per_s
        if (
            op == "all_reduce"
            and self.nvls_busbw_bytes_per_s
            and self.nvls_min_gpus
            and ranks >= self.nvls_min_gpus
        ):
            return float(self.nvls_busbw_bytes_per_s)
        return self.ring_busbw_bytes_per_s

    def seconds(self, op: str, size_bytes: float, ranks: int) -> float:
        """Seconds for one ``op`` (nccl-tests name or op ``fn``) of ``size_bytes`` over
        ``ranks``."""
        op = collective_name(op)
        if ranks <= 1 or size_bytes <= 0:
            return 0.0
        if self.table is not None:
            measured = self.table.seconds(op, size_bytes, ranks)
            if measured is not None:
                return measured
        return self.alpha_s + busbw_factor(op, ranks) * size_bytes / self.bus_bytes_per_s(op, ranks)

    def describe(self) -> dict[str, Any]:
        """The inputs, for ``estimator_inputs``."""
        return {
            "ring_busbw_bytes_per_s": self.ring_busbw_bytes_per_s,
            "alpha_s": self.alpha_s,
            "nvls_busbw_bytes_per_s": self.nvls_busbw_bytes_per_s,
            "nvls_min_gpus": self.nvls_min_gpus,
            "p2p_bytes_per_s": self.p2p_bytes_per_s,
            "source": self.source,
            "notes": list(self.notes),
        }


def published_collectives(gpu: str | None = None) -> Sequence[Mapping[str, Any]]:
    """The cited collective figures of ``data/gpus.json`` (all, or one GPU id's)."""
    from roofprof.specs import gpu_collective_figures

    return [r for r in gpu_collective_figures() if gpu is None or r["gpu"] == gpu]
