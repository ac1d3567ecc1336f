"""Text table, CSV/JSON files and the HTML page of a trace result (``roofprof trace``)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from roofprof.units import clean, si

__all__ = ["csv_text", "summary_lines", "text_table", "write_report"]

_COLUMNS = ("op", "shapes", "dtypes", "count", "kind", "flops", "bytes", "intensity", "time_s",
            "time_per_call_s", "replay_s", "roof", "percent_of_roof", "bound", "flags", "modules")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def summary_lines(result: Any) -> list[str]:
    """The summary in a few lines (wall, op time, coverage, MFU/MBU)."""
    s = result.summary
    return [
        f"device {s.device}; roofline: {s.roofline_source}",
        f"window: wall {si(s.wall_s, 's')} (instrumented), op time {si(s.op_time_s, 's')}, "
        f"unattributed {si(s.unattributed_s, 's')} (Python, tracer, idle); {s.calls} op calls, "
        f"{s.unique_ops} unique",
        f"coverage {_pct(s.coverage)} of op time has a FLOP formula and a byte model; "
        f"{si(s.flops, 'FLOP')}, {si(s.bytes, 'B')} minimum",
        f"over the op time ({s.dtype}): MFU {_pct(s.mfu_measured)} / MBU {_pct(s.mbu_measured)} of the measured "
        f"roofline; {_pct(s.mfu_datasheet)} / {_pct(s.mbu_datasheet)} of the datasheet",
    ]


def _shape(r: Any) -> str:
    return " ".join("x".join(map(str, s)) or "()" for s in r.shapes[:3]) + (" …" if len(r.shapes) > 3 else "")


def text_table(result: Any, top: int | None = 20) -> str:
    """Plain-text table: the ``top`` slowest signatures, then the modules, then the summary."""
    head = f"{'op':<34} {'shapes':<30} {'n':>5} {'time':>9} {'ctx/call':>9} {'replay':>9} " \
           f"{'GFLOP':>8} {'MB':>8} {'F/B':>7} {'%roof':>6} {'bound':<8} flags"
    lines = [head, "-" * len(head)]
    for r in result.ops[:top]:
        lines.append(
            f"{r.op.split('::')[-1][:34]:<34} {_shape(r)[:30]:<30} {r.count:>5} {si(r.time_s, 's'):>9} "
            f"{si(r.time_per_call_s, 's'):>9} {si(r.replay_s, 's', missing='-'):>9} "
            f"{'-' if r.flops is None else f'{r.flops / 1e9:.3f}':>8} "
            f"{'-' if r.bytes is None else f'{r.bytes / 1e6:.2f}':>8} "
            f"{'-' if r.intensity is None else f'{r.intensity:.1f}':>7} "
            f"{'-' if r.percent_of_roof is None else f'{r.percent_of_roof:.0f}':>6} {r.bound:<8} "
            f"{','.join(r.flags)}")
    if top is not None and len(result.ops) > top:
        lines.append(f"... {len(result.ops) - top} more signatures")
    if result.modules:
        lines += ["", f"{'module':<48} {'phase':<9} {'calls':>6} {'time':>9} {'GFLOP':>9}"]
        for m in result.modules[:top]:
            lines.append(f"{m.module[:48]:<48} {m.phase:<9} {m.calls:>6} {si(m.time_s, 's'):>9} "
                         f"{m.flops / 1e9:>9.3f}")
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
    w.writerow(["module", "phase", "calls", "time_s", "flops", "bytes"])
    for m in result.modules:
        w.writerow([m.module, m.phase, m.calls, m.time_s, m.flops, m.bytes])
    return buf.getvalue()


def _html(result: Any, png: bytes | None) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in _row(r).values()) + "</tr>"
                   for r in result.ops)
    chart = f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}">' if png else ""
    summary = "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(result))
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>roofprof trace</title>"
            f"<style>body{{font-family:sans-serif}}td,th{{font-size:12px;padding:2px 6px;border-bottom:1px solid #ddd}}"
            f"</style></head><body><h1>roofprof trace</h1><ul>{summary}</ul>{chart}"
            f"<table><tr>{head}</tr>{rows}</table></body></html>")


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
