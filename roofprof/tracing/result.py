"""What a trace found: one row per unique op signature, per module, and a summary.

Built from a :class:`~roofprof.tracing.tracer.Tracer` by :func:`build_result`: each unique
signature is replayed in isolation with :func:`roofprof.timing.benchmark` (``cold``: the
device's cache flush before every call), then placed with :func:`roofprof.roofline.place`
on the measured roofline (:func:`roofprof.cache.resolve_roofline`), its in-context time
held against the roof.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from roofprof.roofline import Point, Roofline, place
from roofprof.units import scoped

__all__ = [
    "ModuleRow",
    "OpRow",
    "TraceResult",
    "TraceSummary",
    "build_result",
    "place_row",
    "resolve_for",
    "DISAGREE_FRACTION",
]

#: in-context vs replayed time disagreeing by more than this is flagged
DISAGREE_FRACTION = 0.20


@dataclass(frozen=True)
class OpRow:
    """One unique signature: ``count`` calls, costs per call, times (``time_s``: all calls in
    context; ``time_per_call_s``; ``replay_s``: one call in isolation, None if not replayed),
    the roof it is held against, its share (``percent_of_roof``: roofline time over time
    taken), ``bound``, and ``flags`` (``replay-disagrees``, ``cache-resident``, ``no-cost``,
    ``in-context-only``, ``kernel-only``: a device kernel no recorded op launched, e.g. a
    fused ``torch.compile`` kernel, time only). ``signature`` is the call's stable id
    (:func:`~roofprof.tracing.tracer.signature_id`); ``measured_*`` are Nsight Compute's
    counts for one call (``--counters``; None without), beside the formula's ``flops`` and
    ``bytes``.

    :meth:`to_dict` spells the scope in each name, as every command's op records do:
    ``flops_per_call`` / ``flops_total``, ``bytes_per_call`` / ``bytes_total``,
    ``seconds_per_call`` / ``seconds_total``, ``measured_*_per_call``; the unscoped
    ``flops``, ``bytes`` (per call), ``time_s`` (total) and ``time_per_call_s`` are kept
    for earlier readers."""

    op: str
    overload: str
    shapes: tuple
    dtypes: tuple
    count: int
    kind: str
    flops: float | None
    bytes: float | None
    intensity: float | None
    time_s: float
    time_per_call_s: float
    replay_s: float | None
    roof: str
    percent_of_roof: float | None
    bound: str
    flags: tuple[str, ...]
    modules: tuple[str, ...]
    note: str = ""
    signature: str = ""
    measured_flops: float | None = None
    measured_dram_bytes: float | None = None
    measured_time_s: float | None = None
    measured_kernels: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(scoped(self.count, flops=self.flops, bytes=self.bytes))
        d["seconds_per_call"], d["seconds_total"] = self.time_per_call_s, self.time_s
        d["measured_flops_per_call"] = self.measured_flops
        d["measured_dram_bytes_per_call"] = self.measured_dram_bytes
        d["measured_seconds_per_call"] = self.measured_time_s
        d["shapes"] = [list(s) for s in self.shapes]
        d["dtypes"], d["flags"], d["modules"] = (
            list(self.dtypes),
            list(self.flags),
            list(self.modules),
        )
        return d


@dataclass(frozen=True)
class ModuleRow:
    """A module (fully qualified name, cut at ``module_depth``) in one ``phase`` (forward or
    backward): its op calls, in-context time, FLOPs and minimum bytes (ops with a cost),
    all totals over its calls (:meth:`to_dict` adds ``seconds_total``, ``flops_total``,
    ``bytes_total``)."""

    module: str
    phase: str
    calls: int
    time_s: float
    flops: float
    bytes: float

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "seconds_total": self.time_s,
            "flops_total": self.flops,
            "bytes_total": self.bytes,
        }


@dataclass(frozen=True)
class TraceSummary:
    """The window: ``wall_s`` (instrumented: includes the tracer's per-op overhead),
    ``op_time_s`` (sum of in-context op times), ``unattributed_s`` (wall time in no op:
    Python, the tracer, idle), ``coverage`` (share of op time with a FLOP formula and a byte
    model; None when it would rest on nothing, see ``notes``), FLOPs and bytes of the
    window, and MFU/MBU over the op time against the datasheet (None without one, e.g. a
    CPU) and the measured roofline (``dtype``'s roof).
    ``notes``: what the figures rest on when that is in doubt (an imported trace whose
    device time joined no op); ``imported``: read from a profiler trace (the window is the
    recorded span, not an instrumented run)."""

    device: str
    roofline_source: str
    wall_s: float
    op_time_s: float
    unattributed_s: float
    calls: int
    unique_ops: int
    coverage: float | None
    flops: float
    bytes: float
    dtype: str
    mfu_measured: float | None
    mbu_measured: float | None
    mfu_datasheet: float | None
    mbu_datasheet: float | None
    notes: tuple[str, ...] = ()
    imported: bool = False


@dataclass(frozen=True)
class TraceResult:
    """A traced window: ``ops`` (slowest first), ``modules``, ``summary``, the ``roofline`` used
    and the device's ``datasheet`` roofline (None without one, e.g. a CPU)."""

    ops: tuple[OpRow, ...]
    modules: tuple[ModuleRow, ...]
    summary: TraceSummary
    roofline: Roofline | None = None
    datasheet: Roofline | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": asdict(self.summary),
            "ops": [r.to_dict() for r in self.ops],
            "modules": [m.to_dict() for m in self.modules],
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "datasheet": self.datasheet.to_dict() if self.datasheet else None,
        }

    def to_dataframe(self, what: str = "ops"):
        """``ops`` or ``modules`` as a pandas DataFrame (pandas imported here)."""
        import pandas as pd

        rows = [r.to_dict() for r in (self.ops if what == "ops" else self.modules)]
        return pd.DataFrame(rows)

    def table(self, top: int | None = 20) -> str:
        """A plain-text table of the ``top`` slowest signatures and the summary."""
        from roofprof.tracing.report import text_table

        return text_table(self, top=top)

    def save(self, folder: str | Path, html: bool = True) -> dict[str, str]:
        """Write ``trace.json``, ``ops.csv``, ``modules.csv``, ``roofline.png`` and
        ``report.html`` under ``folder`` (each file whole or not at all); returns name → path."""
        from roofprof.tracing.report import write_report

        return write_report(self, Path(folder), html=html)

    def plot(self, path: str | Path = "trace_roofline.png", top: int = 12) -> Path:
        """The roofline with the ``top`` ops by time placed on it (PNG); returns the path.

        Raises:
            ConfigError: no roofline to draw on (``roofline="none"``).
        """
        from roofprof.errors import ConfigError
        from roofprof.plots.roofline import plot_roofline

        if self.roofline is None:
            raise ConfigError("no roofline to plot on (traced with roofline='none')")
        points = [
            Point(
                _label(r), r.flops, r.bytes, r.time_per_call_s, _dtype_on(self.roofline, r.dtypes)
            )
            for r in self.ops
            if r.flops and r.bytes and r.time_per_call_s > 0
        ][:top]
        spec = None if self.summary.roofline_source == "datasheet" else self.datasheet
        return plot_roofline(
            self.roofline, points, path, spec=spec, title=f"roofprof trace on {self.summary.device}"
        )

    def json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=str)


def _label(r: OpRow) -> str:
    return f"{r.op.split('::')[-1]} {'x'.join(map(str, r.shapes[0])) if r.shapes else ''}".strip()


def _dtype_on(roofline: Roofline, dtypes: Sequence[str]) -> str:
    for d in dtypes:
        if d in roofline.dtypes:
            return d
    return roofline.dtypes[0] if roofline.dtypes else "fp32"


def place_row(
    flops: float,
    bytes_: float,
    seconds: float,
    dtypes: Sequence[str],
    roofline: Roofline | None,
    name: str = "op",
) -> tuple[str, float | None, str]:
    """(roof, percent of roof, bound) of one op on ``roofline``: the compute roof of its
    dtype (the first of ``dtypes`` the roofline has; memory-only ops use any) and DRAM."""
    if roofline is None or seconds <= 0 or not roofline.dtypes:
        return "-", None, "-"
    dtype = next((d for d in dtypes if d in roofline.dtypes), None)
    if dtype is None:
        if flops:
            return "-", None, "no roof for dtype"
        dtype = roofline.dtypes[0]
    pl = place(Point(name, flops, bytes_, seconds, dtype, source="measured"), roofline)
    roof = f"{dtype} compute" if pl.bound == "compute" else "dram"
    return roof, pl.percent_of_roof_time, pl.bound


def _replay(stats: Any, device: Any, cold: bool, budget_s: float) -> float | None:
    import torch

    from roofprof.timing import benchmark
    from roofprof.tracing.recipes import TensorSpec, build, map_nested

    recipe = stats.recipe
    if recipe is None:
        return None
    try:
        args = map_nested(recipe.args, lambda s: build(s, torch), TensorSpec)
        kwargs = map_nested(recipe.kwargs, lambda s: build(s, torch), TensorSpec)
        fn = recipe.func

        def call() -> None:
            fn(*args, **kwargs)

        with torch.no_grad():
            t = benchmark(
                call,
                clock=device.clock(),
                budget_s=budget_s,
                warmup_s=budget_s / 4,
                flush=device.flush if cold else None,
                min_repeats=3,
                max_repeats=200,
            )
        return t.median_s
    except Exception:  # noqa: BLE001 - data-dependent or stateful ops: reported in context only
        return None


def resolve_for(device: Any, spec: Any) -> tuple[Roofline | None, str]:
    """The roofline to place ops on: ``"spec"`` (the datasheet), else
    :func:`roofprof.cache.resolve_roofline` (``auto``, ``none``, a file, a Roofline).

    Raises:
        ConfigError: ``spec`` for a device without a datasheet row; an unreadable file.
    """
    from roofprof.cache import resolve_roofline, spec_roofline

    if isinstance(spec, str) and spec == "spec":
        roofline = spec_roofline(device)
        if roofline is None:
            from roofprof.errors import ConfigError

            raise ConfigError(
                f"{device.info.name} has no datasheet roofline "
                f"({device.info.spec_note or 'no match in data/gpus.json'}); "
                "use --roofline auto or a roofline.json"
            )
        return roofline, "datasheet"
    return resolve_roofline(spec, device)


def build_result(tracer: Any) -> TraceResult:
    """Replay, place and summarise what ``tracer`` recorded (see the module doc)."""
    from roofprof.cache import spec_roofline

    device = tracer._device
    resolved = getattr(tracer, "_roofline", None)
    roofline, source = (
        resolved if resolved is not None else resolve_for(device, tracer.roofline_spec)
    )
    datasheet = spec_roofline(device)

    rows: list[OpRow] = []
    modules: dict[tuple[str, str], list[float]] = {}
    depth = tracer.module_depth
    for stats in tracer.sigs.values():
        cost = stats.cost
        per_call = stats.time_s / stats.count if stats.count else 0.0
        kernel_only = bool(getattr(stats, "kernel_only", False))
        flags: list[str] = ["kernel-only"] if kernel_only else []
        replay_s = None
        if tracer.replay and not kernel_only and not (cost is not None and cost.kind == "view"):
            replay_s = _replay(stats, device, tracer.cold, tracer.replay_budget_s)
            if replay_s is None:
                flags.append("in-context-only")
        if cost is None:
            if not kernel_only:
                flags.append("no-cost")
            roof, pct, bound = "-", None, "-"
        else:
            roof, pct, bound = place_row(
                cost.flops, cost.bytes, per_call, stats.dtypes, roofline, stats.op
            )
        if (
            replay_s
            and per_call > 0
            and abs(replay_s - per_call) > DISAGREE_FRACTION * max(replay_s, per_call)
            and max(replay_s, per_call) > 20e-6
        ):
            flags.append("replay-disagrees")
        if cost is not None and cost.bytes and roofline is not None and "dram" in roofline.levels:
            bw = roofline.memory_bandwidth("dram")
            fastest = (
                min(t for t in (per_call, replay_s or math.inf) if t > 0) if per_call > 0 else None
            )
            if fastest and cost.bytes / fastest > bw:
                flags.append("cache-resident")
        names = []
        for (fqn, phase), (n, s) in stats.modules.items():
            name = _cut(fqn, depth)
            names.append(name)
            agg = modules.setdefault((name, phase), [0, 0.0, 0.0, 0.0])
            agg[0] += n
            agg[1] += s
            if cost is not None:
                agg[2] += cost.flops * n
                agg[3] += cost.bytes * n
        rows.append(
            OpRow(
                stats.op,
                stats.overload,
                stats.shapes,
                stats.dtypes,
                stats.count,
                cost.kind if cost else ("kernel" if kernel_only else "unknown"),
                cost.flops if cost else None,
                cost.bytes if cost else None,
                (cost.intensity if cost and cost.bytes else None),
                stats.time_s,
                per_call,
                replay_s,
                roof,
                pct,
                bound,
                tuple(flags),
                tuple(dict.fromkeys(names)),
                cost.note if cost else "",
                getattr(stats, "key", ""),
            )
        )
    rows.sort(key=lambda r: -r.time_s)
    mod_rows = tuple(
        sorted(
            (ModuleRow(n, p, int(a[0]), a[1], a[2], a[3]) for (n, p), a in modules.items()),
            key=lambda m: -m.time_s,
        )
    )
    return TraceResult(
        tuple(rows),
        mod_rows,
        _summary(tracer, rows, roofline, source, datasheet),
        roofline,
        datasheet,
    )


def _cut(fqn: str, depth: int | None) -> str:
    if depth is None:
        return fqn
    return ".".join(fqn.split(".")[: depth + 1])


def _summary(
    tracer: Any,
    rows: Sequence[OpRow],
    roofline: Roofline | None,
    source: str,
    datasheet: Roofline | None,
) -> TraceSummary:
    op_time = sum(r.time_s for r in rows)
    covered = sum(r.time_s for r in rows if r.flops is not None and r.bytes is not None)
    flops = sum((r.flops or 0) * r.count for r in rows)
    bytes_ = sum((r.bytes or 0) * r.count for r in rows)
    by_dtype: dict[str, float] = {}
    for r in rows:
        if r.flops and r.dtypes:
            by_dtype[r.dtypes[0]] = by_dtype.get(r.dtypes[0], 0.0) + r.flops * r.count
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "fp32"

    def util(r: Roofline | None) -> tuple[float | None, float | None]:
        if r is None or op_time <= 0:
            return None, None
        mfu = flops / op_time / r.compute_peak(dtype) if dtype in r.dtypes else None
        mbu = bytes_ / op_time / r.memory_bandwidth("dram") if "dram" in r.levels else None
        return mfu, mbu

    mfu_m, mbu_m = util(roofline)
    mfu_d, mbu_d = util(datasheet)
    return TraceSummary(
        tracer._device.info.label + f" ({tracer._device.info.name})",
        source,
        tracer.wall_s,
        op_time,
        max(0.0, tracer.wall_s - op_time),
        tracer.calls,
        len(rows),
        covered / op_time if op_time > 0 else 1.0,
        flops,
        bytes_,
        dtype,
        mfu_m,
        mbu_m,
        mfu_d,
        mbu_d,
    )
