"""``roofprof collectives``: the interconnect measured between ranks, fitted, plotted, written.

:func:`measure_interconnect` runs :func:`~roofprof.distributed.bench.measure_collectives` on
every rank, under torchrun (one node or many: the environment's rendezvous) or on ``ranks``
local processes it starts itself, and returns rank 0's :class:`InterconnectResult` (None on
the other torchrun ranks). :func:`write_interconnect` writes ``collectives.json`` (rows in the
format ``predict --collectives FILE`` reads), ``collectives.png`` (busbw vs size with the
datasheet line where the GPU has one) and ``topology.txt`` (``nvidia-smi topo -m`` where the
binary exists), each atomically.

Default sizes: 1 KiB to 1 GiB on GPUs, 1 KiB to 4 MiB on CPUs (:data:`DEFAULT_SIZES`).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.distributed.bench import (
    OPS,
    CollectiveSample,
    fits,
    log_sizes,
    measure_collectives,
    timers_for,
)
from roofprof.distributed.ranks import device_type, torchrun_rendezvous

__all__ = [
    "DEFAULT_SIZES",
    "InterconnectResult",
    "interconnect_result",
    "measure_interconnect",
    "nvidia_topology",
    "plot_busbw",
    "write_interconnect",
]

#: torch device type -> (smallest, largest) default size in bytes.
DEFAULT_SIZES = {"cpu": (1 << 10, 4 << 20), "cuda": (1 << 10, 1 << 30)}
_WHAT = "roofprof collectives"
_MAX_BYTES = 1 << 36  # 64 GiB: a buffer per rank (two for all-gather / reduce-scatter / send)
#: torch device type -> default local rank count from its device count (2 gloo ranks on a CPU).
_DEFAULT_RANKS = {"cpu": lambda n: 2, "cuda": lambda n: n}


@dataclass(frozen=True)
class InterconnectResult:
    """Measured collectives of one group: samples, α-β fits, the datasheet's busbw per op
    (bytes/s; empty without a datasheet row), the topology text, and notes."""

    samples: tuple[CollectiveSample, ...]
    ranks: int
    backend: str
    device: str
    spec_id: str | None = None
    datasheet_busbw: dict[str, float] = field(default_factory=dict)
    topology: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> list[dict[str, Any]]:
        """One α-β fit per (op, ranks, path)."""
        return fits(self.samples)

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``results`` rows (what ``load_collectives`` reads), ``fits``, identity,
        provenance."""
        from roofprof.results import provenance

        return {
            "results": [s.to_row() for s in self.samples],
            "fits": self.fits,
            "ranks": self.ranks,
            "backend": self.backend,
            "device": self.device,
            "spec_id": self.spec_id,
            "datasheet_busbw_bytes_per_s": dict(self.datasheet_busbw),
            "topology": self.topology,
            "notes": list(self.notes),
            "provenance": provenance(device=self.device),
        }


def _identity(torch_device: str) -> tuple[str, str | None]:
    """The device's name and datasheet row id (through its backend; the torch name, or the
    device string, where the backend cannot open it)."""
    import torch

    from roofprof.devices import select

    try:
        info = select(torch_device).info
        return info.name, info.spec_id
    except Exception:  # noqa: BLE001 - identity is decoration; the measurement stands
        pass
    names = {
        "cpu": lambda d: platform.processor() or platform.machine() or "CPU",
        "cuda": lambda d: torch.cuda.get_device_name(torch.device(d)),
    }
    try:
        return str(names[torch_device.split(":", 1)[0]](torch_device)), None
    except Exception:  # noqa: BLE001
        return torch_device, None


def _worker(
    ctx: Any,
    ops: Sequence[str],
    sizes: Sequence[int],
    warmup: int,
    calls: int,
    paths: Sequence[str] | None,
) -> dict[str, Any] | None:
    samples = measure_collectives(
        ctx,
        ops=ops,
        sizes=sizes,
        warmup=warmup,
        calls=calls,
        timers=timers_for(ctx.torch_device, paths),
    )
    if not ctx.is_root:
        return None
    name, spec_id = _identity(ctx.torch_device)
    return {
        "samples": samples,
        "ranks": ctx.world_size,
        "backend": ctx.backend,
        "device": name,
        "spec_id": spec_id,
    }


def measure_interconnect(
    *,
    ranks: int | None = None,
    device: str = "auto",
    ops: Sequence[str] = OPS,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
    warmup: int = 5,
    calls: int = 20,
    paths: Sequence[str] | None = None,
    timeout_s: float = 300.0,
) -> InterconnectResult | None:
    """Measure ``ops`` over log-spaced sizes between the ranks; rank 0's result (None elsewhere).

    Under torchrun (``RANK``/``WORLD_SIZE`` set) the group is torchrun's and ``ranks`` must be
    None or equal to ``WORLD_SIZE``; otherwise ``ranks`` local processes are started
    (default: the local GPUs on a GPU, 2 on a CPU).

    Raises:
        RankError: one rank (nothing to measure), more ranks than devices, a rank that died
            or a rendezvous that failed, a collective past ``timeout_s``.
        ConfigError: bad sizes, op or path.

    Example (two gloo ranks on this machine)::

        result = measure_interconnect(ranks=2, device="cpu", max_bytes=1 << 16)
    """
    from roofprof.distributed.ranks import RankError, launch, local_device_count, run_in_group

    kind = device_type(device)
    lo, hi = DEFAULT_SIZES[kind]
    sizes = log_sizes(min_bytes or lo, max_bytes or hi)
    if sizes[-1] > _MAX_BYTES:
        from roofprof.errors import ConfigError

        raise ConfigError(
            f"largest size {sizes[-1]} B is above the {_MAX_BYTES >> 30} GiB a buffer may have here"
        )
    for op in ops:
        if op not in OPS:
            from roofprof.errors import UnknownNameError

            raise UnknownNameError("collective", op, OPS)
    args = (tuple(ops), sizes, warmup, calls, tuple(paths) if paths else None)
    rdv = torchrun_rendezvous()
    if rdv is not None:
        if ranks is not None and ranks != rdv.world_size:
            raise RankError(
                f"--ranks {ranks} under torchrun, whose WORLD_SIZE is {rdv.world_size}: "
                "leave --ranks out (torchrun starts the ranks)"
            )
        raw = run_in_group(_worker, args, rdv, device, timeout_s, what=_WHAT)
    else:
        n = ranks if ranks is not None else _DEFAULT_RANKS[kind](local_device_count(kind))
        raw = launch(_worker, args, ranks=n, device=device, timeout_s=timeout_s, what=_WHAT)
    if raw is None:
        return None
    return interconnect_result(**raw)


def interconnect_result(
    samples: Sequence[CollectiveSample],
    ranks: int,
    backend: str,
    device: str,
    spec_id: str | None = None,
) -> InterconnectResult:
    """The result of measured ``samples``: the datasheet busbw per op of ``spec_id`` (or of the
    GPU whose name matches ``device``), the topology of this host, notes."""
    from roofprof.prediction.collectives import CollectiveModel
    from roofprof.specs import load_gpu, match_gpu

    notes: list[str] = []
    spec = load_gpu(spec_id) if spec_id else match_gpu(device)
    datasheet: dict[str, float] = {}
    if spec is not None and spec.interconnect:
        model = CollectiveModel.for_gpu(spec)
        datasheet = {op: model.bus_bytes_per_s(op, ranks) for op in sorted({s.op for s in samples})}
        notes.extend(model.notes)
    else:
        notes.append(f"{device}: no datasheet interconnect row; no datasheet line")
    if backend == "gloo":
        notes.append(
            "gloo on a CPU: the ranks share the host's cores and memory; times are structure, "
            "not an interconnect figure"
        )
    return InterconnectResult(
        tuple(samples),
        ranks,
        backend,
        device,
        spec.id if spec else None,
        datasheet,
        nvidia_topology(),
        tuple(notes),
    )


def nvidia_topology(timeout_s: float = 20.0) -> str | None:
    """``nvidia-smi topo -m`` output, or None where the binary is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def plot_busbw(result: InterconnectResult, path: str | Path) -> Path:
    """Bus bandwidth (GB/s) vs size (bytes), one line per op and path, the datasheet busbw
    dashed where known; written atomically to ``path``."""
    from roofprof.plots import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    groups: dict[tuple[str, str], list[CollectiveSample]] = {}
    for s in result.samples:
        groups.setdefault((s.op, s.path), []).append(s)
    colors: dict[str, Any] = {}
    for (op, path_kind), rows in sorted(groups.items()):
        rows.sort(key=lambda s: s.bytes)
        (line,) = ax.plot(
            [s.bytes for s in rows],
            [s.busbw / 1e9 for s in rows],
            marker="o",
            ms=3,
            linestyle="-" if path_kind == "eager" else ":",
            label=f"{op} ({path_kind})",
            color=colors.get(op),
        )
        colors.setdefault(op, line.get_color())
    for op, bw in sorted(result.datasheet_busbw.items()):
        ax.axhline(
            bw / 1e9,
            linestyle="--",
            linewidth=1,
            color=colors.get(op, "grey"),
            label=f"{op} datasheet ({result.spec_id})",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size S (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"Collectives: {result.ranks} ranks, {result.backend}, {result.device}")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, path)
    return Path(path)


def write_interconnect(
    result: InterconnectResult, folder: str | Path, *, plots: bool = True
) -> list[Path]:
    """``collectives.json`` (+ ``collectives.png``, ``topology.txt``) in ``folder``, atomically.

    Raises:
        ConfigError: the folder cannot be created or written.
    """
    from roofprof.results import check_writable_dir, write_json_atomic, write_text_atomic
    from roofprof.units import clean

    out = check_writable_dir(folder)
    written = [write_json_atomic(out / "collectives.json", clean(result.to_dict()))]
    if plots and result.samples:
        written.append(plot_busbw(result, out / "collectives.png"))
    if result.topology:
        written.append(write_text_atomic(out / "topology.txt", result.topology))
    return written
