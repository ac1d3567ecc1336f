"""Hardware counters for the ops of a Llama pass: ``roofprof profile --counters``.

Two processes. The *parent* runs the *child* (``roofprof counters ops-pass``) under Nsight
Compute (:func:`roofprof.counters.run_under_ncu`). The child checks each distinct op of
the workload with each implementation (correct first, outside any range), then runs it
exactly once inside an NVTX range named after the op and implementation, so ncu profiles
that one call and nothing else; it writes a manifest of what ran. The parent parses the
counters, places every kernel on the hierarchical (L1/L2/DRAM) roofline, and compares each
op's counter FLOPs and DRAM bytes with the workload model's analytic counts
(:func:`roofprof.counters.compare_with_ops`: excess traffic, FLOPs on the expected pipe,
flagged beyond 10%).

>>> counter_op_name(type("Op", (), {"phase": "decode", "name": "q_proj"})(), "cupy")
'decode/q_proj@cupy'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofprof.counters.collection import run_under_ncu
from roofprof.counters.hierarchical import compare_with_ops, place_hierarchical, records_to_json
from roofprof.counters.nvtx import op_range
from roofprof.profiling.engine import Measurement, prepare_checked
from roofprof.results import check_writable_dir, provenance, read_json, write_json_atomic
from roofprof.workload import Workload

__all__ = ["CounterOp", "child_command", "counter_op_name", "profile_counters", "run_ops_once"]


@dataclass(frozen=True)
class CounterOp:
    """An op as one implementation ran it under ncu (what ``compare_with_ops`` matches)."""

    name: str
    op: str
    impl: str
    phase: str
    kind: str
    dtype: str
    flops: float
    bytes: float


def counter_op_name(op: Any, impl_name: str) -> str:
    """The name an op × implementation runs under (NVTX range ``roofprof.<phase>_<op>_<impl>``)."""
    return f"{op.phase}/{op.name}@{impl_name}"


def run_ops_once(
    workload: Workload, device: Any, *, impls: Sequence[str] | None = None, seed: int = 0
) -> list[dict[str, Any]]:
    """Child side: check each distinct op with each implementation, then run it once in its range.

    The check is :func:`roofprof.profiling.engine.prepare_checked` (the engine's first half).
    Returns one manifest entry per op × implementation: ``CounterOp`` fields plus
    ``status`` (``ran``, ``failed``, ``unsupported``, ``error``) and the check (or the
    ``reason`` it did not run).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    manifest: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for op in workload.ops:
        if op.shape_key in seen:
            continue
        seen.add(op.shape_key)
        for impl in device.implementations():
            if impls and impl.name not in impls:
                continue
            entry = CounterOp(
                counter_op_name(op, impl.name),
                op.name,
                impl.name,
                op.phase,
                op.kind,
                op.dtype,
                op.flops,
                op.bytes,
            ).__dict__.copy()
            prepared, checked = prepare_checked(impl, op, rng)
            if prepared is None:  # a wrong kernel is reported, never profiled
                manifest.append({**entry, **_not_ran(checked)})
                continue
            try:
                device.synchronize()
                with op_range(entry["name"]):
                    prepared.run()
                    device.synchronize()
                manifest.append({**entry, "status": "ran", "check": checked.check.to_dict()})
            finally:
                prepared.release()
    return manifest


def _not_ran(m: Measurement) -> dict[str, Any]:
    """Manifest fields of an op × implementation that did not run (failed, unsupported, error)."""
    if m.status == "failed":
        return {"status": "failed", "check": m.check.to_dict() if m.check is not None else None}
    return {"status": m.status, "reason": m.note}


def child_command(
    *,
    model: str,
    phase: str,
    batch: int,
    prompt: int,
    context: int | None,
    dtype: str,
    device: str,
    attention: str,
    impls: Sequence[str] | None,
    manifest: Path,
) -> list[str]:
    """The argument list of the child process (no shell)."""
    cmd = [
        sys.executable,
        "-m",
        "roofprof",
        "counters",
        "ops-pass",
        "--model",
        model,
        "--phase",
        phase,
        "--batch",
        str(batch),
        "--prompt",
        str(prompt),
        "--dtype",
        dtype,
        "--device",
        device,
        "--attention",
        attention,
        "--manifest",
        str(manifest),
    ]
    if context is not None:
        cmd += ["--context", str(context)]
    if impls:
        cmd += ["--impl", ",".join(impls)]
    return cmd


def profile_counters(
    child: list[str],
    manifest: Path,
    out_dir: str | os.PathLike,
    *,
    roofline: Any = None,
    clock_control: str = "none",
    **ncu_options: Any,
) -> dict[str, Any]:
    """Parent side: run ``child`` under ncu; place and compare; write ``counters.json`` whole.

    Raises:
        NcuNotFoundError, CounterPermissionError, CollectionError: as ``run_under_ncu``.
        ConfigError: ``out_dir`` is not writable (checked before anything runs).
    """
    out = check_writable_dir(out_dir)
    records = run_under_ncu(child, out / "counters.csv", clock_control=clock_control, **ncu_options)
    ran = [
        CounterOp(**{k: e[k] for k in CounterOp.__dataclass_fields__})
        for e in read_json(manifest)
        if e["status"] == "ran"
    ]
    comparisons = compare_with_ops(records, ran)
    placements = place_hierarchical(records, roofline)
    payload = records_to_json(
        records,
        placements,
        comparisons,
        manifest=read_json(manifest),
        clock_control=clock_control,
        provenance=provenance(roofline=getattr(roofline, "device", None)),
    )
    write_json_atomic(out / "counters.json", payload)
    if placements:
        from roofprof.plots.hierarchical import plot_hierarchical

        plot_hierarchical(placements, out / "hierarchical_roofline.png", roofline=roofline)
    return payload
