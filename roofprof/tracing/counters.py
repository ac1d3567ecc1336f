"""Nsight Compute per traced op: ``roofprof trace script.py --counters`` (a GPU and ``ncu``).

The traced run itself times the ops (CUPTI's tracer and ncu's replay exclude each other);
then a *child* runs the same script again under Nsight Compute with the tracer in NVTX
mode: the first call of each unique signature runs inside the NVTX range
``roofprof.sig_<id>`` (:func:`~roofprof.tracing.tracer.signature_id`, equal in both
processes), the device synchronised around it, so ncu's ``--nvtx --nvtx-include``
profiles exactly that call's kernels. The existing machinery collects and parses the
counters (:func:`roofprof.counters.run_under_ncu`, :func:`~roofprof.counters.parse_ncu_csv`);
:func:`merge_counters` sums each range's kernels into its op row's ``measured_flops``,
``measured_dram_bytes``, ``measured_time_s`` and ``measured_kernels``, beside the formula's
``flops`` and ``bytes``.

>>> SIG_RANGE_PREFIX
'roofprof.sig_'
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from roofprof.counters.hierarchical import group_by_range
from roofprof.counters.metrics import KernelCounters
from roofprof.errors import DeviceUnavailableError

__all__ = [
    "SIG_RANGE_PREFIX",
    "child_command",
    "counters_by_signature",
    "merge_counters",
    "require_counters",
    "trace_counters",
]

#: NVTX range of a signature's first call in the ``--counters`` child
SIG_RANGE_PREFIX = "roofprof.sig_"


def require_counters(device: Any, ncu: str | None = None) -> str:
    """The ``ncu`` path, after checking ``--counters`` can run here: an asynchronous device
    (a GPU) and Nsight Compute. Checked before the script runs.

    Raises:
        DeviceUnavailableError: one line naming everything missing (a GPU, ``ncu``).
    """
    from roofprof.counters.collection import find_ncu
    from roofprof.counters.errors import NcuNotFoundError

    missing = []
    if not device.info.asynchronous:
        missing.append(f"a GPU (device {device.info.label} is not one)")
    try:
        path = find_ncu(ncu)
    except NcuNotFoundError as exc:
        missing.append(str(exc))
        path = ""
    if missing:
        raise DeviceUnavailableError(
            "--counters (Nsight Compute per traced op) needs " + "; and ".join(missing)
        )
    return path


def child_command(
    script: str | Path,
    args: Sequence[str],
    *,
    device: str,
    region: str | None = None,
    warmup: int = 0,
    steps: int | None = None,
) -> list[str]:
    """The argument list (never a shell string) of the NVTX child run under ncu.

    >>> child_command("m.py", ["--n", "2"], device="cuda:0", warmup=1)[3:9]
    ['trace', 'm.py', '--device', 'cuda:0', '--nvtx-signatures', '--warmup']
    """
    cmd = [
        sys.executable,
        "-m",
        "roofprof",
        "trace",
        str(script),
        "--device",
        device,
        "--nvtx-signatures",
        "--warmup",
        str(warmup),
    ]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    if region is not None:
        cmd += ["--region", region]
    return [*cmd, "--", *args]


def _total(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(sum(vals)) if vals else None


def counters_by_signature(records: Iterable[KernelCounters]) -> dict[str, dict[str, Any]]:
    """Signature id -> ``flops``, ``dram_bytes``, ``time_s`` (sums over the range's
    kernels; None when ncu collected no such metric) and ``kernels``; ranges that are not
    ``roofprof.sig_*`` are ignored."""
    out: dict[str, dict[str, Any]] = {}
    for name, kernels in group_by_range(records).items():
        if not name.startswith(SIG_RANGE_PREFIX):
            continue
        out[name[len(SIG_RANGE_PREFIX) :]] = {
            "flops": _total(k.flops for k in kernels),
            "dram_bytes": _total(k.dram_bytes for k in kernels),
            "time_s": _total(k.time_s for k in kernels),
            "kernels": len(kernels),
        }
    return out


def merge_counters(result: Any, records: Iterable[KernelCounters]) -> Any:
    """``result`` (a :class:`~roofprof.tracing.result.TraceResult`) with each op row's
    ``measured_*`` fields filled from the ncu records of its signature's range (one call).

    >>> from roofprof.tracing.result import TraceResult
    >>> merge_counters(TraceResult((), (), None), []).ops
    ()
    """
    by_sig = counters_by_signature(records)
    rows = []
    for r in result.ops:
        m = by_sig.get(r.signature) if r.signature else None
        rows.append(
            r
            if m is None
            else dataclasses.replace(
                r,
                measured_flops=m["flops"],
                measured_dram_bytes=m["dram_bytes"],
                measured_time_s=m["time_s"],
                measured_kernels=m["kernels"],
            )
        )
    return dataclasses.replace(result, ops=tuple(rows))


def trace_counters(
    result: Any,
    script: str | Path,
    args: Sequence[str],
    out_csv: str | Path,
    *,
    device: str,
    region: str | None = None,
    warmup: int = 0,
    steps: int | None = None,
    ncu: str | None = None,
    **ncu_options: Any,
) -> Any:
    """Run the NVTX child under Nsight Compute and merge its counters into ``result``.

    Raises:
        NcuNotFoundError, CounterPermissionError, CollectionError: as
            :func:`roofprof.counters.run_under_ncu` (each a RoofprofError).
    """
    from roofprof.counters.collection import run_under_ncu

    child = child_command(script, args, device=device, region=region, warmup=warmup, steps=steps)
    records = run_under_ncu(child, out_csv, ncu=ncu, **ncu_options)
    return merge_counters(result, records)
