"""Ranks: torchrun's rendezvous, or N local processes started here, with a timeout on everything.

Two ways to get ranks, one worker signature (``worker(ctx: RankContext, *args) -> result``):

* **under torchrun** (one node or many): :func:`torchrun_rendezvous` reads the environment
  torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``) and :func:`run_in_group` joins the group (``env://``);
* **locally** (``--ranks N``): :func:`launch` starts N processes (``spawn``, a free TCP port
  on 127.0.0.1) and watches them: a rank that dies, reports an error or outlives the
  watchdog ends the others, and the caller gets one :class:`RankError` naming it.

Every group is created with ``init_process_group(timeout=...)`` so a collective whose peer is
gone fails instead of hanging. The communication backend follows the device
(:data:`BACKENDS`: gloo on a CPU, NCCL on a GPU); more ranks on a node than it has devices
is refused before anything starts.

>>> torchrun_rendezvous({}) is None
True
>>> torchrun_rendezvous({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n0",
...                      "MASTER_PORT": "29500"}).world_size
4
"""

from __future__ import annotations

import os
import queue as queue_module
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from roofprof.errors import ConfigError, RoofprofError

__all__ = [
    "BACKENDS",
    "RankContext",
    "RankError",
    "Rendezvous",
    "device_type",
    "free_port",
    "launch",
    "local_device_count",
    "one_rank_message",
    "run_in_group",
    "torchrun_rendezvous",
]

#: torch device type -> torch.distributed backend.
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


class RankError(RoofprofError):
    """A rank died, failed, or timed out, or the rendezvous failed (exit code 2)."""


def one_rank_message(what: str) -> str:
    """The one-line refusal for a single rank (nothing to measure between ranks)."""
    return (
        f"{what} needs at least 2 ranks and there is 1: nothing to measure between ranks; "
        "run with --ranks 2 (local processes) or under torchrun --nproc-per-node 2 or more"
    )


@dataclass(frozen=True)
class Rendezvous:
    """Where this process sits in the group: global rank, world size, local rank and size on
    its node, and how to join (``init_method``: ``env://`` under torchrun, ``tcp://...``)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    init_method: str = "env://"


@dataclass(frozen=True)
class RankContext:
    """What a worker is given: its place in the group, its torch device and the backend."""

    rank: int
    world_size: int
    local_rank: int
    torch_device: str
    backend: str
    timeout_s: float

    @property
    def is_root(self) -> bool:
        """Rank 0: the rank that gathers and writes."""
        return self.rank == 0


def torchrun_rendezvous(environ: Mapping[str, str] | None = None) -> Rendezvous | None:
    """The rendezvous torchrun set in ``environ`` (default ``os.environ``), or None outside it.

    Raises:
        RankError: ``RANK``/``WORLD_SIZE`` present but malformed, or ``MASTER_ADDR`` /
            ``MASTER_PORT`` missing (not a complete torchrun environment).
    """
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    except ValueError as exc:
        raise RankError(f"torchrun environment is malformed ({exc})") from None
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise RankError(
            f"RANK and WORLD_SIZE are set but {', '.join(missing)} is not: "
            "start the ranks with torchrun (it sets the whole rendezvous)"
        )
    if not (0 <= rank < world):
        raise RankError(
            f"torchrun environment is malformed: RANK {rank} outside WORLD_SIZE {world}"
        )
    return Rendezvous(rank, world, local, local_world)


def device_type(device: str) -> str:
    """The torch device type for ``--device`` (``auto``: ``cuda`` when torch sees a GPU).

    Raises:
        ConfigError: a device type with no distributed backend here.
    """
    import torch

    text = (device or "auto").strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    kind = text.split(":", 1)[0]
    if kind not in BACKENDS:
        raise ConfigError(
            f"--device {device}: no torch.distributed backend for it; "
            f"valid choices: auto, {', '.join(BACKENDS)}"
        )
    return kind


def _cpu_count() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def _cuda_count() -> int:
    import torch

    return int(torch.cuda.device_count())


_DEVICE_COUNT: dict[str, Callable[[], int]] = {"cpu": _cpu_count, "cuda": _cuda_count}


def local_device_count(kind: str) -> int:
    """Devices of ``kind`` on this node (cores usable by this process for ``cpu``)."""
    return _DEVICE_COUNT[kind]()


#: torch device type -> (the torch device of a local rank, what its devices are called).
_PER_RANK: dict[str, tuple[Callable[[int], str], str]] = {
    "cpu": (lambda i: "cpu", "cores"),
    "cuda": (lambda i: f"cuda:{i}", "GPUs"),
}


def _torch_device(kind: str, local_rank: int) -> str:
    return _PER_RANK[kind][0](local_rank)


def _check_fits(kind: str, local_ranks: int) -> None:
    have = local_device_count(kind)
    if local_ranks > have:
        unit = _PER_RANK[kind][1]
        raise RankError(
            f"{local_ranks} ranks on this node but it has {have} {unit}: "
            f"use at most {have} ranks per node"
        )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _join(rdv: Rendezvous, kind: str, timeout_s: float) -> RankContext:
    import torch
    import torch.distributed as dist

    backend = BACKENDS[kind]
    dev = _torch_device(kind, rdv.local_rank)
    if backend == "nccl":
        torch.cuda.set_device(rdv.local_rank)
    try:
        dist.init_process_group(
            backend,
            init_method=rdv.init_method,
            rank=rdv.rank,
            world_size=rdv.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    except Exception as exc:  # DistNetworkError, RuntimeError, TimeoutError: all one line
        raise RankError(f"rank {rdv.rank}: rendezvous failed ({_one_line(exc)})") from None
    return RankContext(rdv.rank, rdv.world_size, rdv.local_rank, dev, backend, timeout_s)


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def run_in_group(
    worker: Callable[..., Any],
    args: tuple,
    rdv: Rendezvous,
    device: str,
    timeout_s: float,
    what: str = "this measurement",
) -> Any:
    """Join the group of ``rdv`` (torchrun), run ``worker(ctx, *args)`` here, leave the group.

    Every rank returns its worker's value (usually only rank 0's matters).

    Raises:
        RankError: one rank only, more local ranks than devices, a failed rendezvous, a
            collective that timed out or a peer that is gone.
    """
    if rdv.world_size < 2:
        raise RankError(one_rank_message(what))
    kind = device_type(device)
    _check_fits(kind, rdv.local_world_size)
    ctx = _join(rdv, kind, timeout_s)
    try:
        return worker(ctx, *args)
    except RoofprofError:
        raise
    except Exception as exc:  # a collective timed out or a peer died: one line, exit 2
        raise RankError(f"rank {ctx.rank}: {_one_line(exc)}") from None
    finally:
        _leave()


def _child(
    rank: int,
    world: int,
    port: int,
    kind: str,
    timeout_s: float,
    worker: Callable[..., Any],
    args: tuple,
    results: Any,
) -> None:  # pragma: no cover - runs in a spawned process
    rdv = Rendezvous(rank, world, rank, world, f"tcp://127.0.0.1:{port}")
    try:
        ctx = _join(rdv, kind, timeout_s)
        try:
            value = worker(ctx, *args)
        finally:
            _leave()
        results.put((rank, "ok", value if rank == 0 else None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        text = str(exc) if isinstance(exc, RoofprofError) else f"rank {rank}: {_one_line(exc)}"
        results.put((rank, "error", text))
        raise SystemExit(2) from None


def launch(
    worker: Callable[..., Any],
    args: tuple = (),
    *,
    ranks: int,
    device: str = "auto",
    timeout_s: float = 300.0,
    what: str = "this measurement",
) -> Any:
    """Run ``worker(ctx, *args)`` on ``ranks`` local processes; return rank 0's value.

    ``worker`` must be a module-level function (the processes are spawned, not forked).
    ``timeout_s`` bounds the group's collectives and, with a start-up allowance, the whole
    run (the watchdog): past it every rank still running is ended.

    Raises:
        RankError: fewer than 2 ranks, more ranks than devices, a rank that died or raised
            (its message), or the watchdog firing; no process is left running.
    """
    if ranks < 2:
        raise RankError(one_rank_message(what))
    kind = device_type(device)
    _check_fits(kind, ranks)
    import torch.multiprocessing as mp

    mp_ctx = mp.get_context("spawn")
    results = mp_ctx.Queue()
    port = free_port()
    procs = [
        mp_ctx.Process(
            target=_child,
            args=(r, ranks, port, kind, timeout_s, worker, args, results),
            daemon=True,
        )
        for r in range(ranks)
    ]
    for p in procs:
        p.start()
    ok = False
    try:
        value = _watch(
            procs, results, deadline=time.monotonic() + timeout_s + 60.0, timeout_s=timeout_s
        )
        ok = True
        return value
    finally:
        _end(procs, graceful=ok)


def _watch(procs: list[Any], results: Any, *, deadline: float, timeout_s: float) -> Any:
    done: dict[int, Any] = {}
    while len(done) < len(procs):
        try:
            rank, status, value = results.get(timeout=0.1)
        except queue_module.Empty:
            pass
        else:
            if status == "error":
                raise RankError(_dead_rank(procs, done) or str(value))
            done[rank] = value
            continue
        for rank, p in enumerate(procs):
            if rank not in done and p.exitcode is not None:
                try:  # its last message may still be in flight
                    rank_, status, value = results.get(timeout=1.0)
                except queue_module.Empty:
                    raise RankError(
                        f"rank {rank} died (exit code {p.exitcode}) before reporting"
                    ) from None
                if status == "error":
                    raise RankError(_dead_rank(procs, done) or str(value))
                done[rank_] = value
        if time.monotonic() > deadline:
            late = [str(r) for r in range(len(procs)) if r not in done]
            raise RankError(
                f"rank {', '.join(late)} did not finish within {timeout_s:g} s "
                "(the watchdog ended every rank)"
            )
    return done.get(0)


def _dead_rank(procs: list[Any], done: Mapping[int, Any], wait_s: float = 5.0) -> str | None:
    """The rank that died (an exit code other than 0 and 2, no report), when a peer's error
    is only the echo of its death (a connection reset); None when none did within ``wait_s``
    (a dying process on a busy host can take seconds to be reaped)."""
    deadline = time.monotonic() + wait_s
    while True:
        for rank, p in enumerate(procs):
            if rank not in done and p.exitcode not in (None, 0, 2):
                return f"rank {rank} died (exit code {p.exitcode})"
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _end(procs: list[Any], graceful: bool) -> None:
    """Join the ranks (after success) or end them at once (after a failure); none is left."""
    for p in procs:
        if graceful:
            p.join(timeout=5.0)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=5.0)
