"""The rich tables at the edge: input strings print as themselves, never as rich markup."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from roofprof.report import counters_table, doctor_table, print_counters
from roofprof.units import clean, fmt_bytes, fmt_rate, si


def _render(table) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(table)
    return buf.getvalue()


def test_doctor_details_are_escaped():
    rows = [{"component": "ncu[bold]", "ok": False, "detail": "not on PATH [red]x[/red]"}]
    text = _render(doctor_table(rows))
    assert "ncu[bold]" in text and "[red]x[/red]" in text


def _record(name: str):
    return SimpleNamespace(
        name=name,
        range_name="roofprof.[q_proj]",
        time_s=1e-3,
        flops=None,
        dominant_pipe=None,
        dram_bytes=1e6,
        l2_bytes=None,
        l1_bytes=None,
        intensity=lambda level: None,
        byte_source=lambda level: None,
    )


def test_counters_kernel_names_are_escaped(capsys):
    text = _render(counters_table([_record("gemm<[bold]float>")]))
    assert "gemm<[bold]float>" in text and "roofprof.[q_proj]" in text
    print_counters([_record("k[/]")])
    assert "k[/]" in capsys.readouterr().out


def test_units_formats():
    assert si(3.35e12, "B/s") == "3.35 TB/s" and si(None, "s", missing="—") == "—"
    assert fmt_rate(None, "B/s") == "–" and fmt_rate(2.5e9, "B/s") == "2.5 GB/s"
    assert fmt_bytes(9.5 * 2**30) == "9.50 GiB" and fmt_bytes(48 * 2**10, compact=True) == "48 KiB"
    assert clean({"x": [float("inf"), (1, float("nan"))]}) == {"x": [None, [1, None]]}
