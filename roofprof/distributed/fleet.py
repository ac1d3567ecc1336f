"""``roofprof roofline --all-ranks``: every rank's roofline at once, the slow device flagged.

Each rank measures its own device's roofline in parallel
(:func:`~roofprof.roofline.probes.measure_roofline`
with the plan asked for), reads its clocks and clock-event (throttle) reasons from NVML
where there is a GPU behind it (``None`` fields and a reason otherwise), and rank 0 gathers
the rows: :func:`flag_slow` marks any device more than :data:`SLOW_FRACTION` below the median
on memory bandwidth or on compute (the check people run before a long job). Across nodes it
runs the same under torchrun's rendezvous.

>>> rows = [{"rank": r, "dram_bytes_per_s": bw, "compute_flops_per_s": 1e12} for r, bw in
...         enumerate((3.0e12, 3.1e12, 2.7e12, 3.05e12))]
>>> [r["rank"] for r in flag_slow(rows) if r["slow"]]
[2]
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from roofprof.errors import ConfigError

__all__ = ["SLOW_FRACTION", "flag_slow", "measure_all_ranks", "nvml_state"]

#: A device this far below the median (a fraction) on either ceiling is flagged.
SLOW_FRACTION = 0.05
_METRICS = ("dram_bytes_per_s", "compute_flops_per_s")


def flag_slow(
    rows: Sequence[dict[str, Any]], fraction: float = SLOW_FRACTION
) -> list[dict[str, Any]]:
    """``rows`` with ``slow`` (bool), ``below_median`` (metric -> fraction below) and the medians.

    A metric missing on a row (None) is not judged for that row.
    """
    medians = {}
    for m in _METRICS:
        values = [r[m] for r in rows if r.get(m)]
        medians[m] = statistics.median(values) if values else None
    out = []
    for r in rows:
        below = {m: 1.0 - r[m] / medians[m] for m in _METRICS if r.get(m) and medians[m]}
        slow = [m for m, b in below.items() if b > fraction]
        out.append(
            {**r, "below_median": below, "slow": bool(slow), "slow_on": slow, "medians": medians}
        )
    return out


def nvml_state(device: Any, nvml: Any = None) -> dict[str, Any]:
    """SM and memory clocks (MHz) and clock-event reasons of ``device`` from NVML; every field
    None, with ``nvml`` saying why, where there is no NVML GPU behind it. Never raises."""
    from roofprof.devices import _nvml
    from roofprof.telemetry import reason_names

    empty = {"sm_clock_mhz": None, "mem_clock_mhz": None, "clock_event_reasons": None}
    pci = dict(getattr(device.info, "extra", {}) or {}).get("pci_bus_id")
    if not pci:
        return {**empty, "nvml": "no NVML device (no PCI bus id)"}
    try:
        with _nvml.session(nvml) as nv:
            index = _nvml.index_for_pci(pci, nv)
            if index is None:
                return {**empty, "nvml": f"NVML lists no GPU at {pci}"}
            h = _nvml.query("nvmlDeviceGetHandleByIndex", index, default=None, nvml=nv)
            sm = _nvml.query(
                "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1), default=None, nvml=nv
            )
            mem = _nvml.query(
                "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2), default=None, nvml=nv
            )
            mask = _nvml.query("nvmlDeviceGetCurrentClocksEventReasons", h, default=None, nvml=nv)
            if mask is None:
                mask = _nvml.query(
                    "nvmlDeviceGetCurrentClocksThrottleReasons", h, default=None, nvml=nv
                )
            return {
                "sm_clock_mhz": sm,
                "mem_clock_mhz": mem,
                "clock_event_reasons": None if mask is None else list(reason_names(int(mask))),
                "nvml": "ok",
                "nvml_index": index,
            }
    except Exception as exc:  # noqa: BLE001 - NvmlUnavailable and friends: a sentinel row
        return {**empty, "nvml": f"unavailable ({exc})"}


def _summary(result: Any, ctx: Any) -> dict[str, Any]:
    roof = result.roofline
    info = result.device
    try:
        dram = roof.memory_ceiling("dram").value
    except ConfigError:
        dram = None
    dtype = (
        info.default_dtype
        if info.default_dtype in roof.dtypes
        else (roof.dtypes[0] if roof.dtypes else None)
    )
    compute = roof.compute_ceiling(dtype).value if dtype else None
    return {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "torch_device": ctx.torch_device,
        "name": info.name,
        "label": info.label,
        "dram_bytes_per_s": dram,
        "compute_flops_per_s": compute,
        "compute_dtype": dtype,
        "complete": result.complete,
        "warnings": list(result.warnings),
    }


def _rank(ctx: Any, plan: str) -> list[dict[str, Any]] | None:  # runs on every rank
    import platform

    import torch.distributed as dist

    from roofprof.devices import select
    from roofprof.roofline.probes import measure_roofline

    dev = select(ctx.torch_device)
    dist.barrier()  # start together: the ranks measure at the same time, as a job would run
    result = measure_roofline(dev, plan=plan)
    row = {**_summary(result, ctx), **nvml_state(dev), "host": platform.node()}
    rows: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(rows, row)
    return rows if ctx.is_root else None


def measure_all_ranks(
    *,
    ranks: int | None = None,
    device: str = "auto",
    plan: str = "quick",
    timeout_s: float = 3600.0,
) -> list[dict[str, Any]] | None:
    """Every rank's roofline summary, flagged (rank 0; None on the other torchrun ranks).

    Under torchrun the group is torchrun's (one node or many); otherwise ``ranks`` local
    processes (default: the GPUs here; 2 on a CPU, a structure test: they share the cores).

    Raises:
        RankError: one rank, more ranks than devices, a rank that died, a rendezvous or
            collective past ``timeout_s``.
    """
    from roofprof.distributed.ranks import (
        RankError,
        device_type,
        launch,
        local_device_count,
        run_in_group,
        torchrun_rendezvous,
    )

    what = "roofline --all-ranks"
    rdv = torchrun_rendezvous()
    if rdv is not None:
        if ranks is not None and ranks != rdv.world_size:
            raise RankError(f"--ranks {ranks} under torchrun, whose WORLD_SIZE is {rdv.world_size}")
        rows = run_in_group(_rank, (plan,), rdv, device, timeout_s, what=what)
    else:
        kind = device_type(device)
        n = ranks if ranks is not None else {"cpu": 2}.get(kind, local_device_count(kind))
        rows = launch(_rank, (plan,), ranks=n, device=kind, timeout_s=timeout_s, what=what)
    return None if rows is None else flag_slow(rows)
