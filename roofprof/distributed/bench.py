"""Collective microbenchmarks through torch.distributed, as nccl-tests measures them.

For each op (:data:`OPS`) and size: buffers allocated once, ``warmup`` calls, a barrier,
then ``calls`` queued calls timed as one block (``seconds`` per call), on every rank; the
per-rank times are then reduced over the group (mean and max). ``S`` is what nccl-tests
calls the size: the buffer for all-reduce, the *total* (gathered / scattered) buffer for
all-gather and reduce-scatter, the message for send/recv (each rank sends ``S`` to the next
rank and receives ``S`` from the previous one). Bandwidths follow
:mod:`roofprof.prediction.collectives` (``algbw = S / t``, ``busbw = algbw × factor``).

The device seam is :class:`Timer`: :class:`WallTimer` (``perf_counter`` around blocking
calls: gloo on a CPU) or the CUDA timers (events after a synchronise; ``graph`` captures
the ``calls`` into one CUDA graph and replays it). Which timers a device type offers is
:data:`PATHS`; the measuring loop never looks at the device itself, so tests drive it with
fakes.

>>> log_sizes(1024, 8192)
(1024, 2048, 4096, 8192)
>>> fit_alpha_beta([(1e3, 1.1e-5), (1e6, 1.1e-4), (1e7, 1.01e-3)])["alpha_s"] > 0
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from roofprof.errors import ConfigError
from roofprof.prediction.collectives import algbw, busbw, busbw_factor

__all__ = [
    "OPS",
    "PATHS",
    "CollectiveSample",
    "CudaEventTimer",
    "CudaGraphTimer",
    "Timer",
    "WallTimer",
    "fit_alpha_beta",
    "fits",
    "log_sizes",
    "measure_collectives",
    "op_call",
    "timers_for",
]

#: The ops measured (nccl-tests names, as :func:`roofprof.prediction.collectives.load_collectives`
#: reads).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "send")
_ELEMENT_BYTES = 4  # float32 buffers, as nccl-tests' default


def log_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> tuple[int, ...]:
    """Sizes from ``min_bytes`` to ``max_bytes`` (inclusive), each ``factor`` × the last.

    Raises:
        ConfigError: a non-positive size, min above max, or a factor below 2.
    """
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ConfigError(f"sizes need 1 <= min ({min_bytes}) <= max ({max_bytes}) and factor >= 2")
    out, size = [], int(min_bytes)
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return tuple(out)


class Timer(Protocol):
    """Times ``calls`` calls of ``fn`` on this rank; returns seconds per call."""

    path: str

    def time(self, fn: Callable[[], Any], calls: int) -> float: ...


@dataclass(frozen=True)
class WallTimer:
    """``perf_counter`` around ``calls`` blocking calls (gloo: a call returns when done)."""

    path: str = "eager"

    def time(self, fn: Callable[[], Any], calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls


def _torch(module: Any) -> Any:
    if module is not None:
        return module
    import torch

    return torch


@dataclass(frozen=True)
class CudaEventTimer:
    """CUDA events around ``calls`` queued calls on the current stream, after a synchronise
    (``torch_module``: None for torch itself; tests pass a fake)."""

    path: str = "eager"
    torch_module: Any = None

    def time(self, fn: Callable[[], Any], calls: int) -> float:
        torch = _torch(self.torch_module)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls


@dataclass(frozen=True)
class CudaGraphTimer:
    """The ``calls`` captured into one CUDA graph (on a side stream), replayed between events
    (``torch_module``: None for torch itself; tests pass a fake)."""

    path: str = "graph"
    torch_module: Any = None

    def time(self, fn: Callable[[], Any], calls: int) -> float:
        torch = _torch(self.torch_module)
        torch.cuda.synchronize()
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(stream):
            fn()  # a warm call on the capture stream (NCCL registers its buffers)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
        graph.replay()  # warm replay
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls


#: torch device type -> the execution paths measured there, each with its timer.
PATHS: dict[str, tuple[Timer, ...]] = {
    "cpu": (WallTimer(),),
    "cuda": (CudaEventTimer(), CudaGraphTimer()),
}


def timers_for(torch_device: str, paths: Iterable[str] | None = None) -> tuple[Timer, ...]:
    """The timers for ``torch_device`` (``"cpu"``, ``"cuda:0"``), optionally only ``paths``.

    Raises:
        ConfigError: a path this device type does not offer.
    """
    offered = PATHS[torch_device.split(":", 1)[0]]
    if paths is None:
        return offered
    wanted = list(paths)
    names = [t.path for t in offered]
    bad = [p for p in wanted if p not in names]
    if bad:
        raise ConfigError(
            f"path {bad[0]!r} is not measured on {torch_device}; valid choices: {', '.join(names)}"
        )
    return tuple(t for t in offered if t.path in wanted)


@dataclass(frozen=True)
class CollectiveSample:
    """One op at one size over ``ranks`` ranks: seconds per call, mean and max over the ranks."""

    op: str
    bytes: int
    ranks: int
    seconds: float
    seconds_max: float
    backend: str
    path: str
    calls: int

    @property
    def algbw(self) -> float:
        """bytes/s, ``S / t`` with the mean time."""
        return algbw(self.bytes, self.seconds)

    @property
    def busbw(self) -> float:
        """bytes/s, nccl-tests' bus bandwidth with the mean time."""
        return busbw(self.op, self.bytes, self.seconds, self.ranks)

    def to_row(self) -> dict[str, Any]:
        """The JSON row ``load_collectives`` reads (op, bytes, ranks, seconds, ...)."""
        return {**asdict(self), "algbw": self.algbw, "busbw": self.busbw}


def op_call(
    dist: Any, torch: Any, op: str, size_bytes: int, rank: int, ranks: int, device: str
) -> tuple[Callable[[], Any], int]:
    """A zero-argument call doing ``op`` once on preallocated buffers, and its actual ``S``.

    ``S`` is rounded down to whole float32 elements (a multiple of ``ranks`` of them for
    all-gather and reduce-scatter), at least one element per rank.

    Raises:
        ConfigError: an op not in :data:`OPS`.
    """
    per = max(size_bytes // (_ELEMENT_BYTES * ranks), 1)
    if op == "all_reduce":
        n = max(size_bytes // _ELEMENT_BYTES, 1)
        buf = torch.ones(n, dtype=torch.float32, device=device)
        return (lambda: dist.all_reduce(buf)), n * _ELEMENT_BYTES
    if op == "all_gather":
        inp = torch.ones(per, dtype=torch.float32, device=device)
        out = torch.empty(per * ranks, dtype=torch.float32, device=device)
        return (lambda: dist.all_gather_into_tensor(out, inp)), per * ranks * _ELEMENT_BYTES
    if op == "reduce_scatter":
        inp = torch.ones(per * ranks, dtype=torch.float32, device=device)
        out = torch.empty(per, dtype=torch.float32, device=device)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), per * ranks * _ELEMENT_BYTES
    if op == "send":
        n = max(size_bytes // _ELEMENT_BYTES, 1)
        src = torch.ones(n, dtype=torch.float32, device=device)
        dst = torch.empty(n, dtype=torch.float32, device=device)
        nxt, prv = (rank + 1) % ranks, (rank - 1) % ranks

        def ring() -> None:
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, src, nxt), dist.P2POp(dist.irecv, dst, prv)]
            )
            for r in reqs:
                r.wait()

        return ring, n * _ELEMENT_BYTES
    raise ConfigError(f"unknown collective {op!r}; valid choices: {', '.join(OPS)}")


def measure_collectives(
    ctx: Any,
    *,
    ops: Sequence[str] = OPS,
    sizes: Sequence[int],
    warmup: int = 5,
    calls: int = 20,
    timers: Sequence[Timer] | None = None,
    dist: Any = None,
    torch: Any = None,
    progress: Callable[[str], None] | None = None,
) -> list[CollectiveSample]:
    """Every op × size × timer on this rank's group; every rank returns the same samples.

    ``ctx`` is a :class:`~roofprof.distributed.ranks.RankContext` (or anything with
    ``rank``, ``world_size``, ``torch_device``, ``backend``). ``dist``/``torch`` default to
    ``torch.distributed``/``torch`` (tests pass fakes). Large sizes get fewer calls (at most
    ``calls``, at least 2, about 256 MiB moved per block).

    Raises:
        ConfigError: an unknown op or path, fewer than one warm-up or timed call.
        RuntimeError: a collective failed or timed out (the group's timeout).
    """
    if dist is None or torch is None:
        import torch as torch_module
        import torch.distributed as dist_module

        dist, torch = dist or dist_module, torch or torch_module
    if warmup < 0 or calls < 1:
        raise ConfigError(f"need warmup >= 0 and calls >= 1, got {warmup} and {calls}")
    timers = tuple(timers) if timers is not None else timers_for(ctx.torch_device)
    rows: list[tuple[str, int, str, int]] = []
    local: list[float] = []
    for timer in timers:
        for op in ops:
            busbw_factor(op, ctx.world_size)
            for size in sizes:
                fn, actual = op_call(
                    dist, torch, op, size, ctx.rank, ctx.world_size, ctx.torch_device
                )
                k = max(2, min(calls, (256 << 20) // max(actual, 1))) if calls >= 2 else calls
                for _ in range(warmup):
                    fn()
                dist.barrier()
                local.append(timer.time(fn, k))
                rows.append((op, actual, timer.path, k))
                if progress is not None:
                    progress(f"{timer.path} {op} {actual} B")
    mean, worst = _over_ranks(dist, torch, local, ctx)
    return [
        CollectiveSample(op, size, ctx.world_size, m, w, ctx.backend, path, k)
        for (op, size, path, k), m, w in zip(rows, mean, worst, strict=True)
    ]


def _over_ranks(
    dist: Any, torch: Any, local: list[float], ctx: Any
) -> tuple[list[float], list[float]]:
    """Mean and max of each rank's seconds over the group (two all-reduces of a small vector)."""
    t = torch.tensor(local, dtype=torch.float64, device=ctx.torch_device)
    worst = t.clone()
    dist.all_reduce(t)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return [float(x) / ctx.world_size for x in t.tolist()], [float(x) for x in worst.tolist()]


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> dict[str, float | None]:
    """``t = α + β·S`` fitted to ``(bytes, seconds)`` points, each weighted by ``1/t`` (the
    relative error counts, so the small sizes set α and the large ones β); α and β are kept
    non-negative. Returns ``alpha_s``, ``beta_s_per_byte`` and ``rms_relative_error``.

    Raises:
        ConfigError: fewer than two points.
    """
    if len(points) < 2:
        raise ConfigError("an α-β fit needs at least two sizes")
    w = [1.0 / t for _, t in points]
    sw = sum(wi * wi for wi in w)
    sx = sum(wi * wi * s for wi, (s, _) in zip(w, points, strict=True))
    sy = sum(wi * wi * t for wi, (_, t) in zip(w, points, strict=True))
    sxx = sum(wi * wi * s * s for wi, (s, _) in zip(w, points, strict=True))
    sxy = sum(wi * wi * s * t for wi, (s, t) in zip(w, points, strict=True))
    det = sw * sxx - sx * sx
    alpha, beta = (
        ((sxx * sy - sx * sxy) / det, (sw * sxy - sx * sy) / det) if det > 0 else (sy / sw, 0.0)
    )
    if alpha < 0:  # through the origin
        alpha, beta = 0.0, sxy / sxx
    if beta < 0:  # flat: latency only
        alpha, beta = sy / sw, 0.0
    rms = math.sqrt(sum(((alpha + beta * s) / t - 1.0) ** 2 for s, t in points) / len(points))
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "rms_relative_error": rms}


def fits(samples: Sequence[CollectiveSample]) -> list[dict[str, Any]]:
    """One α-β fit per (op, ranks, path): α, β and the asymptotic busbw ``factor / β`` (bytes/s;
    None when β fitted to 0)."""
    groups: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for s in samples:
        groups.setdefault((s.op, s.ranks, s.path), []).append((float(s.bytes), s.seconds))
    out = []
    for (op, ranks, path), pts in sorted(groups.items()):
        if len(pts) < 2:
            continue
        fit = fit_alpha_beta(sorted(pts))
        beta = fit["beta_s_per_byte"] or 0.0
        out.append(
            {
                "op": op,
                "ranks": ranks,
                "path": path,
                **fit,
                "busbw_bytes_per_s": busbw_factor(op, ranks) / beta if beta > 0 else None,
                "sizes": len(pts),
            }
        )
    return out
