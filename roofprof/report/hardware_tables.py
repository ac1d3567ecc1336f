"""Tables of what the machine itself reports: the measured roofline's ceilings, each kernel's
hardware counters, and doctor's components.

Formatting only: every number shown was computed elsewhere (probes, counters, doctor).
Strings that come from input (kernel and device names, file names, details) are escaped
before they reach rich markup, so a ``[`` in a name prints as itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from roofprof.units import si

__all__ = [
    "counters_comparison_tables",
    "counters_table",
    "doctor_table",
    "print_counters",
    "print_counters_comparison",
    "print_doctor",
    "print_roofline_summary",
    "roofline_table",
]


# --------------------------------------------------------------------------- roofline


def _rate(value: float, unit: str) -> str:
    return si(value, "B/s" if unit == "bytes/s" else "FLOP/s")


def roofline_table(result) -> Table:
    """The ceilings of a measured roofline (``RooflineResult``): best, median, clock, % of spec."""
    spec_rows = {r["ceiling"]: r for r in result.spec_comparison.get("rows", [])}
    dev = result.device
    units = dev.compute_unit_name  # declared by the backend ("cores", "SMs")
    table = Table(
        title=f"Measured roofline: {escape(dev.name)} ({escape(dev.label)}, "
        f"{dev.compute_units} {units})"
    )
    for col, just in (
        ("ceiling", "left"),
        ("kind", "left"),
        ("level/dtype", "left"),
        ("best", "right"),
        ("median", "right"),
        ("clock MHz", "right"),
        ("spec %", "right"),
        ("", "left"),
    ):
        table.add_column(col, justify=just)
    for c in result.ceilings:
        spec = spec_rows.get(c["name"])
        table.add_row(
            escape(c["name"]),
            c["kind"],
            escape(c.get("level") or c.get("dtype") or ""),
            _rate(c["value"], c["unit"]),
            _rate(c["median_value"], c["unit"]) if c.get("median_value") else "",
            f"{c['clock_mhz']:.0f}" if c.get("clock_mhz") else "",
            f"{spec['percent_of_spec']:.0f}%" if spec else "—",
            "noisy" if c.get("noisy") else "",
        )
    return table


def print_roofline_summary(result, written: Sequence[Path], console: Console | None = None) -> None:
    """The ceilings table, the ridge per dtype, the spec note, warnings and the files written."""
    con = console or _wide_console()
    con.print(roofline_table(result))
    r = result.roofline
    for d in r.dtypes:
        if "dram" in r.levels:
            con.print(
                f"ridge {d}: {r.ridge(d):,.2f} FLOP/byte "
                f"(peak {r.compute_peak(d) / 1e9:,.1f} GFLOP/s, "
                f"DRAM {r.memory_bandwidth('dram') / 1e9:,.1f} GB/s)"
            )
    if not result.spec_comparison.get("available"):
        con.print(f"spec comparison: {escape(str(result.spec_comparison.get('note', 'none')))}")
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {escape(w)}")
    con.print(
        f"measured in {result.elapsed_s:.1f} s; wrote {escape(', '.join(str(p) for p in written))}"
    )


def _wide_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, 160 columns into a pipe."""
    import sys

    stream = sys.stderr if stderr else sys.stdout
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    return Console(file=stream, highlight=False, width=width)


# --------------------------------------------------------------------------- doctor


def doctor_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One row per component of :func:`roofprof.doctor.doctor_report`: ok or missing, and why."""
    table = Table(title="roofprof doctor")
    table.add_column("component")
    table.add_column("status")
    table.add_column("detail")
    for r in rows:
        table.add_row(
            escape(r["component"]),
            "[green]ok[/]" if r["ok"] else "[yellow]missing[/]",
            escape(r["detail"]),
        )
    return table


def print_doctor(rows: Sequence[dict[str, Any]], console: Console | None = None) -> None:
    """Print :func:`doctor_table`."""
    (console or _wide_console()).print(doctor_table(rows))


# --------------------------------------------------------------------------- counters


def _fmt(value: float | None, unit: str = "") -> str:
    return si(value, unit, missing="—")


def _intensity(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}"


def counters_table(
    records: Sequence[Any], placements: Sequence[Any] | None = None, title: str = ""
) -> Table:
    """One row per kernel: time, FLOPs by pipe, bytes and intensity per level (and the roofline)."""
    from roofprof.counters import LEVELS

    table = Table(title=escape(title) if title else None, show_lines=False)
    for col, justify in (
        ("kernel", "left"),
        ("range", "left"),
        ("time", "right"),
        ("FLOPs", "right"),
        ("pipe", "left"),
        ("DRAM", "right"),
        ("L2", "right"),
        ("L1", "right"),
        ("I L1", "right"),
        ("I L2", "right"),
        ("I DRAM", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    if placements:
        table.add_column("limit", justify="left")
        table.add_column("% of roof", justify="right")
    for i, r in enumerate(records):
        row = [
            escape(r.name if len(r.name) <= 48 else r.name[:45] + "..."),
            escape(r.range_name or ""),
            _fmt(r.time_s, "s"),
            _fmt(r.flops, "FLOP"),
            escape(r.dominant_pipe or ""),
            _fmt(r.dram_bytes, "B"),
            _fmt(r.l2_bytes, "B"),
            _fmt(r.l1_bytes, "B"),
            *[_intensity(r.intensity(lvl)) for lvl in LEVELS],
        ]
        if placements:
            p = placements[i]
            frac = p.fraction_of_attainable
            row += [escape(p.limiting_level or ""), "—" if frac is None else f"{100 * frac:.1f}"]
        table.add_row(*row)
    return table


def print_counters(
    records: Sequence[Any], placements: Sequence[Any] | None = None, title: str = ""
) -> None:
    """:func:`counters_table`, then the notes on lower bounds and missing FLOP counters."""
    console = Console(width=160)
    console.print(counters_table(records, placements, title))
    lsu = "l1tex__t_sectors_pipe_lsu_mem_global"
    notes = sorted(
        {
            f"L1 bytes of {r.name[:40]}...: global loads+stores only "
            "(sectors x 32 B), a lower bound"
            for r in records
            if (r.byte_source("l1") or ("",))[0].startswith(lsu)
        }
    )
    if any(r.flops is None for r in records):
        notes.append(
            "FLOPs —: no FLOP counters in this file (collect with --metrics-set hierarchical)"
        )
    for note in notes:
        console.print(f"[dim]{escape(note)}[/dim]")


def counters_comparison_tables(payloads: dict[str, dict[str, Any]]) -> list[Table]:
    """Per phase of ``profile --counters``: each op's counters against the workload model."""
    tables = []
    for phase, payload in payloads.items():
        table = Table(title=f"{escape(phase)}: counters vs the workload model (flagged beyond 10%)")
        for col in (
            "op@impl",
            "kernels",
            "time",
            "FLOPs counter/analytic",
            "DRAM bytes counter/minimum",
            "expected pipe",
            "flags",
        ):
            table.add_column(col)
        for c in payload.get("ops", []):
            pipe = c["expected_pipe_fraction"]
            table.add_row(
                escape(c["op"]),
                str(c["kernels"]),
                _fmt(c["time_s"], "s"),
                "—" if c["flop_ratio"] is None else f"{c['flop_ratio']:.2f}",
                "—" if c["excess_traffic"] is None else f"{c['excess_traffic']:.2f}",
                "—" if pipe is None else f"{100 * pipe:.0f}%",
                escape(", ".join(c["flags"]) or "ok"),
            )
        tables.append(table)
    return tables


def print_counters_comparison(
    payloads: dict[str, dict[str, Any]], out_dir: Path | None = None
) -> None:
    """Print :func:`counters_comparison_tables`; after each, where its files are (stderr)."""
    for phase, table in zip(payloads, counters_comparison_tables(payloads), strict=True):
        Console().print(table)
        if out_dir is not None:
            Console(stderr=True, highlight=False).print(
                "counters, hierarchical roofline and plot written to "
                f"{escape(str(out_dir / phase))}"
            )
