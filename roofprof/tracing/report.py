"""Text table, CSV/JSON files and the HTML page of a trace result (``roofprof trace``)."""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from roofprof.units import clean, si

__all__ = ["csv_text", "short_name", "summary_lines", "text_table", "write_report"]


def _strip(text: str, open_: str, close: str) -> tuple[str, list[str]]:
    """``text`` with each outermost ``open_ ... close`` group removed, and the groups."""
    out, groups, depth, cur = [], [], 0, []
    for ch in text:
        if ch == open_:
            depth += 1
            if depth == 1:
                cur = []
                continue
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                groups.append("".join(cur))
                continue
        (cur if depth else out).append(ch)
    return "".join(out), groups


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def short_name(op: str) -> str:
    """A readable short name for a table: an aten op without its namespace, a demangled
    kernel name as its function name (return type, namespaces, template arguments and
    parameters dropped; a generic ``Kernel`` keeps its first template argument).

    >>> short_name("aten::addmm")
    'addmm'
    >>> short_name("kernel::void at::native::vectorized_elementwise_kernel<4, "
    ...            "at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
    ...            "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
    'vectorized_elementwise_kernel'
    >>> short_name("kernel::void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_nn>"
    ...            "(cutlass_80_tensorop_s1688gemm_64x64_nn::Params)")
    'Kernel<cutlass_80_tensorop_s1688gemm_64x64_nn>'
    """
    if not op.startswith("kernel::"):
        return op.split("::")[-1]
    name = op[len("kernel::") :]
    bare, _ = _strip(name, "(", ")")
    bare, targs = _strip(bare, "<", ">")
    words = bare.replace("void ", " ").split()
    func = (words[-1] if words else name).split("::")[-1] or name
    if func.lower().startswith("kernel") and len(func) <= 8 and targs:
        func = f"{func}<{targs[0].split(',')[0].split('::')[-1].strip()}>"
    return func


_COLUMNS = (
    "op",
    "shapes",
    "dtypes",
    "count",
    "kind",
    "flops_per_call",
    "flops_total",
    "bytes_per_call",
    "bytes_total",
    "intensity",
    "seconds_total",
    "seconds_per_call",
    "replay_s",
    "roof",
    "percent_of_roof",
    "bound",
    "flags",
    "modules",
    "signature",
    "measured_flops_per_call",
    "measured_dram_bytes_per_call",
    "measured_seconds_per_call",
    "measured_kernels",
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def summary_lines(result: Any) -> list[str]:
    """The summary in a few lines (wall, op time, coverage, MFU/MBU)."""
    s = result.summary
    imported = getattr(s, "imported", False)
    rates = (
        f"over the op time ({s.dtype}): MFU {_pct(s.mfu_datasheet)} / MBU "
        f"{_pct(s.mbu_datasheet)} of the datasheet roofline"
        if s.roofline_source == "datasheet"  # an imported GPU trace: one roofline, not two
        else f"over the op time ({s.dtype}): MFU {_pct(s.mfu_measured)} / MBU "
        f"{_pct(s.mbu_measured)} of the measured roofline; "
        f"{_pct(s.mfu_datasheet)} / {_pct(s.mbu_datasheet)} of the datasheet"
    )
    return [
        f"device {s.device}; roofline: {s.roofline_source}",
        *(f"note: {n}" for n in getattr(s, "notes", ())),
        f"window: wall {si(s.wall_s, 's')} ({'recorded span' if imported else 'instrumented'}), "
        f"op time {si(s.op_time_s, 's')}, unattributed {si(s.unattributed_s, 's')} "
        f"({'in no op or kernel' if imported else 'Python, tracer, idle'}); "
        f"{s.calls} op calls, {s.unique_ops} unique",
        f"coverage {_pct(s.coverage)} of op time has a FLOP formula and a byte model; "
        f"{si(s.flops, 'FLOP')}, {si(s.bytes, 'B')} minimum",
        rates,
    ]


def _shape(r: Any) -> str:
    return " ".join("x".join(map(str, s)) or "()" for s in r.shapes[:3]) + (
        " …" if len(r.shapes) > 3 else ""
    )


def text_table(result: Any, top: int | None = 20) -> str:
    """Plain-text table: the ``top`` slowest signatures, then the modules, then the summary."""
    head = (
        f"{'op':<34} {'shapes':<30} {'n':>5} {'time':>9} {'ctx/call':>9} {'replay':>9} "
        f"{'GFLOP':>8} {'MB':>8} {'F/B':>7} {'%roof':>6} {'bound':<8} flags"
    )
    lines = [head, "-" * len(head)]
    for r in result.ops[:top]:
        lines.append(
            f"{_fit(short_name(r.op), 34):<34} {_shape(r)[:30]:<30} {r.count:>5} "
            f"{si(r.time_s, 's'):>9} "
            f"{si(r.time_per_call_s, 's'):>9} {si(r.replay_s, 's', missing='-'):>9} "
            f"{'-' if r.flops is None else f'{r.flops / 1e9:.3f}':>8} "
            f"{'-' if r.bytes is None else f'{r.bytes / 1e6:.2f}':>8} "
            f"{'-' if r.intensity is None else f'{r.intensity:.1f}':>7} "
            f"{'-' if r.percent_of_roof is None else f'{r.percent_of_roof:.0f}':>6} {r.bound:<8} "
            f"{','.join(r.flags)}"
        )
    if top is not None and len(result.ops) > top:
        lines.append(f"... {len(result.ops) - top} more signatures")
    if result.modules:
        lines += ["", f"{'module':<48} {'phase':<9} {'calls':>6} {'time':>9} {'GFLOP':>9}"]
        for m in result.modules[:top]:
            lines.append(
                f"{m.module[:48]:<48} {m.phase:<9} {m.calls:>6} {si(m.time_s, 's'):>9} "
                f"{m.flops / 1e9:>9.3f}"
            )
    measured = [r for r in result.ops if r.measured_kernels]
    if measured:
        lines += [
            "",
            f"{'Nsight Compute (one call)':<34} {'GFLOP':>9} {'ncu GFLOP':>10} {'MB':>9} "
            f"{'ncu DRAM MB':>12} {'ncu time':>9} {'kernels':>7}",
        ]
        for r in measured[:top]:
            lines.append(
                f"{_fit(short_name(r.op), 34):<34} {_num(r.flops, 1e9):>9} "
                f"{_num(r.measured_flops, 1e9):>10} "
                f"{_num(r.bytes, 1e6):>9} {_num(r.measured_dram_bytes, 1e6):>12} "
                f"{si(r.measured_time_s, 's', missing='-'):>9} {r.measured_kernels:>7}"
            )
    return "\n".join([*lines, "", *summary_lines(result)])


def _row(r: Any) -> dict[str, Any]:
    d = r.to_dict()
    return {k: (json.dumps(d[k]) if isinstance(d[k], list) else d[k]) for k in _COLUMNS}


def csv_text(result: Any) -> str:
    """One CSV row per unique signature."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_COLUMNS)
    w.writeheader()
    for r in result.ops:
        w.writerow(_row(r))
    return buf.getvalue()


def _modules_csv(result: Any) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["module", "phase", "calls", "seconds_total", "flops_total", "bytes_total"])
    for m in result.modules:
        w.writerow([m.module, m.phase, m.calls, m.time_s, m.flops, m.bytes])
    return buf.getvalue()


_FLAG_TEXT = {
    "replay-disagrees": "in-context and replayed times differ by more than 20 %",
    "cache-resident": (
        "faster than the DRAM roof allows: its data stayed in cache (check with --cold)"
    ),
    "no-cost": "no FLOP formula or byte model: time only (register_cost adds one)",
    "in-context-only": "not replayable (data-dependent or stateful): timed in context only",
    "kernel-only": "a device kernel no recorded op launched (fused, compiled, NCCL): time only",
}


def _num(x: float | None, scale: float = 1.0, fmt: str = "{:.3g}") -> str:
    return "-" if x is None else fmt.format(x / scale)


def _cards(result: Any) -> str:
    s = result.summary
    cards = [
        (
            "window (recorded span)" if getattr(s, "imported", False) else "window (instrumented)",
            si(s.wall_s, "s"),
            f"op time {si(s.op_time_s, 's')}, unattributed {si(s.unattributed_s, 's')}",
        ),
        ("coverage", _pct(s.coverage), "of op time has a FLOP formula and a byte model"),
        ("ops", f"{s.calls:,}", f"calls, {s.unique_ops} unique signatures"),
        *(
            ()
            if s.roofline_source == "datasheet"  # an imported GPU trace: one roofline
            else [
                (
                    f"MFU / MBU ({s.dtype})",
                    f"{_pct(s.mfu_measured)} / {_pct(s.mbu_measured)}",
                    "of the measured roofline",
                )
            ]
        ),
        (
            f"MFU / MBU ({s.dtype}), datasheet",
            f"{_pct(s.mfu_datasheet)} / {_pct(s.mbu_datasheet)}",
            "of the datasheet peaks" if result.datasheet else "no datasheet row for this device",
        ),
    ]
    return (
        "<div class='cards'>"
        + "".join(
            f"<div class='card'><div class='lbl'>{html.escape(a)}</div>"
            f"<div class='big'>{html.escape(b)}</div>"
            f"<div>{html.escape(c)}</div></div>"
            for a, b, c in cards
        )
        + "</div>"
    )


def _ceilings(result: Any, table: Any) -> str:
    rows = []
    sheet = (
        {(c.kind, c.dtype, c.level): c.value for c in result.datasheet.ceilings}
        if result.datasheet
        else {}
    )
    for c in result.roofline.ceilings if result.roofline else ():
        unit = "FLOP/s" if c.kind == "compute" else "B/s"
        spec = sheet.get((c.kind, c.dtype, c.level))
        rows.append(
            [
                c.name,
                c.dtype or c.level,
                c.source,
                si(c.value, unit),
                si(spec, unit, missing="-"),
                _pct(c.value / spec) if spec else "-",
            ]
        )
    return (
        table(
            ["ceiling", "dtype / level", "source", "value", "datasheet", "of datasheet"],
            rows,
            numeric_from=3,
        )
        if rows
        else "<p class='muted'>no roofline (roofline='none')</p>"
    )


def _html(result: Any, png: bytes | None) -> str:
    from roofprof.report.html import html_image, html_page, html_table

    s = result.summary
    counters = any(r.measured_kernels for r in result.ops)
    parts = [
        f"<h1>roofprof trace on {html.escape(s.device)}</h1>",
        f"<p class='muted'>roofline: {html.escape(s.roofline_source)}; FMA = 2 FLOPs; "
        "minimum bytes (views 0, broadcasts once, gathers the rows touched); "
        "times in context, replays in isolation.</p>",
        *(f"<p><b>note:</b> {html.escape(n)}</p>" for n in getattr(s, "notes", ())),
        _cards(result),
        "<h2>Roofline</h2>",
        html_image(png, "roofline with the slowest ops placed"),
        _ceilings(result, html_table),
    ]
    flagged: dict[str, list[str]] = {}
    for r in result.ops:
        for f in r.flags:
            flagged.setdefault(f, []).append(short_name(r.op))
    if flagged:
        parts.append(
            "<h2>Flags</h2><ul>"
            + "".join(
                f"<li><b>{html.escape(f)}</b> ({len(ops)} signatures: "
                f"{html.escape(', '.join(dict.fromkeys(ops)))}): "
                f"{html.escape(_FLAG_TEXT.get(f, ''))}</li>"
                for f, ops in flagged.items()
            )
            + "</ul>"
        )
    head = [
        "op",
        "shapes",
        "dtypes",
        "kind",
        "n",
        "time",
        "ctx/call",
        "replay",
        "GFLOP",
        "MB",
        "F/B",
        "roof",
        "% roof",
        "bound",
        "flags",
        "modules",
    ]
    rows = []
    for r in result.ops:
        row = [
            r.op,
            _shape(r),
            " ".join(r.dtypes[:3]),
            r.kind,
            r.count,
            si(r.time_s, "s"),
            si(r.time_per_call_s, "s"),
            si(r.replay_s, "s", missing="-"),
            _num(r.flops, 1e9),
            _num(r.bytes, 1e6),
            _num(r.intensity, 1, "{:.1f}"),
            r.roof,
            _num(r.percent_of_roof, 1, "{:.0f}"),
            r.bound,
            ", ".join(r.flags),
            ", ".join(r.modules[:3]),
        ]
        if counters:
            row[15:15] = [
                _num(r.measured_flops, 1e9),
                _num(r.measured_dram_bytes, 1e6),
                si(r.measured_time_s, "s", missing="-"),
            ]
        rows.append(row)
    if counters:
        head[15:15] = ["ncu GFLOP", "ncu DRAM MB", "ncu time"]
    parts += [
        "<h2>Ops (one row per unique signature, slowest first)</h2>",
        html_table(head, rows, numeric_from=4),
    ]
    parts += [
        "<h2>Modules</h2>",
        html_table(
            ["module", "phase", "calls", "time", "GFLOP", "MB"],
            [
                [
                    m.module,
                    m.phase,
                    m.calls,
                    si(m.time_s, "s"),
                    _num(m.flops, 1e9),
                    _num(m.bytes, 1e6),
                ]
                for m in result.modules
            ],
            numeric_from=2,
        ),
    ]
    parts.append(
        "<p class='muted'>"
        + "<br>".join(html.escape(line) for line in summary_lines(result))
        + "</p>"
    )
    parts.append(
        "<p>Files: "
        + ", ".join(
            f"<a href='{n}'>{n}</a>"
            for n in ("trace.json", "ops.csv", "modules.csv", "roofline.png")
        )
        + "</p>"
    )
    return html_page(f"roofprof trace: {s.device}", parts)


def write_report(result: Any, folder: Path, html: bool = True) -> dict[str, str]:
    """Write trace.json, ops.csv, modules.csv, roofline.png (with a roofline) and report.html.

    Everything is rendered in memory first, then each file is written atomically, so a
    failure leaves no half-written file. Returns name -> path.
    """
    from roofprof.results import check_writable_dir, write_bytes_atomic

    png = None
    if result.roofline is not None and any(r.flops and r.bytes for r in result.ops):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            png = result.plot(Path(tmp) / "roofline.png").read_bytes()
    files: dict[str, bytes] = {
        "trace.json": json.dumps(clean(result.to_dict()), indent=1, default=str).encode(),
        "ops.csv": csv_text(result).encode(),
        "modules.csv": _modules_csv(result).encode(),
    }
    if png:
        files["roofline.png"] = png
    if html:
        files["report.html"] = _html(result, png).encode()
    folder = check_writable_dir(folder)
    return {name: str(write_bytes_atomic(folder / name, data)) for name, data in files.items()}
