"""An endpoint run as JSON (``vllm bench serve`` field names + a ``roofline`` block), CSV,
a terminal table and an HTML page with its charts.

The JSON holds one entry per level under ``levels`` with vLLM's keys
(``{mean,median,std,p99}_{ttft,tpot,itl,e2el}_ms``, ``output_throughput``, per-request
``ttfts``/``itls``/``input_lens``/``output_lens``/``errors``), plus ``p90_*``, the headers
and first-event times, the network floor, ``formulas`` and ``roofline``. No API key is ever
in it: the payload is built from the result, which never holds one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roofprof.endpoint.metrics import FORMULAS, level_summary
from roofprof.endpoint.records import EndpointResult

__all__ = ["csv_text", "html_report", "payload", "print_table", "story_rows", "write_files"]

#: The per-level columns of the CSV and the table (vLLM names).
_COLUMNS = (
    "prompt_tokens",
    "max_concurrency",
    "request_rate",
    "completed",
    "failed",
    "median_ttft_ms",
    "median_ttft_minus_network_ms",
    "median_tpot_ms",
    "decode_tokens_per_s",
    "median_itl_ms",
    "median_e2el_ms",
    "output_throughput",
    "request_throughput",
    "request_goodput",
)


#: Short column labels of the terminal table (the JSON and CSV keep vLLM's names).
_SHORT = {
    "prompt_tokens": "prompt",
    "max_concurrency": "conc.",
    "request_rate": "rate",
    "completed": "ok",
    "failed": "err",
    "median_ttft_ms": "TTFT ms",
    "median_ttft_minus_network_ms": "−net ms",
    "median_tpot_ms": "TPOT ms",
    "decode_tokens_per_s": "tok/s",
    "median_itl_ms": "ITL ms",
    "median_e2el_ms": "E2E ms",
    "output_throughput": "out tok/s",
    "request_throughput": "req/s",
    "request_goodput": "good/s",
}


def payload(result: EndpointResult, slo: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The JSON payload of a run (strict JSON once cleaned by ``roofprof.units``)."""
    from roofprof.results import provenance

    floor = result.floor
    return {
        "endpoint_type": "openai-chat" if result.api == "chat" else "openai",
        "backend": "roofprof",
        "url": result.url,
        "model_id": result.model,
        "interrupted": result.interrupted,
        "settings": dict(result.settings),
        "network_floor": None
        if floor is None
        else {
            "median_ttft_ms": floor.seconds * 1e3 if floor.seconds is not None else None,
            "ttfts": list(floor.ttft_s),
            "errors": list(floor.errors),
        },
        "levels": [level_summary(lv, slo, floor) for lv in result.levels],
        "roofline": dict(result.roofline) if result.roofline is not None else None,
        "formulas": dict(FORMULAS),
        "notes": list(result.notes),
        "provenance": provenance(),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def csv_text(data: Mapping[str, Any]) -> str:
    """One CSV row per level (the summary columns and the roofline's % when placed)."""
    buf = io.StringIO()
    extra = ("decode_percent_of_roofline", "prefill_percent_of_roofline")
    writer = csv.writer(buf)
    writer.writerow([*_COLUMNS, *extra])
    placed = (data.get("roofline") or {}).get("levels") or []
    for i, level in enumerate(data["levels"]):
        row = placed[i] if i < len(placed) else {}
        writer.writerow([level.get(c) for c in _COLUMNS] + [row.get(c) for c in extra])
    return buf.getvalue()


def story_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """The endpoint story, one row per prompt length at concurrency 1: prompt, TTFT,
    network, decode tok/s, % of roofline, KV slowdown measured vs predicted."""
    floor = (data.get("network_floor") or {}).get("median_ttft_ms")
    roof = data.get("roofline") or {}
    placed = roof.get("levels") or []
    kv = roof.get("kv_slowdown") or {}
    rows = []
    for i, level in enumerate(data["levels"]):
        if level["max_concurrency"] != 1 or level["request_rate"] != "inf":
            continue
        r = placed[i] if i < len(placed) else {}
        slow = "—"
        if (
            kv
            and r.get("prompt_tokens") == kv.get("long_prompt_tokens")
            and kv.get("measured_percent") is not None
        ):
            slow = f"{kv['measured_percent']:+.0f} % vs {kv['predicted_percent']:+.0f} %"
        pct = r.get("decode_percent_of_roofline")
        rows.append(
            [
                str(level["prompt_tokens"]),
                _fmt(level["median_ttft_ms"]) + " ms",
                _fmt(floor) + " ms",
                _fmt(level["decode_tokens_per_s"]),
                f"{pct:.0f} % of {r['predicted_decode_tokens_per_s']:.4g}"
                if pct is not None
                else "—",
                slow,
            ]
        )
    return rows


_STORY_HEADERS = (
    "prompt",
    "TTFT (median)",
    "network",
    "decode tok/s",
    "% of roofline",
    "KV slowdown measured vs predicted",
)


def print_table(data: Mapping[str, Any]) -> None:
    """The levels, the story and the formulas on stdout (rich)."""
    import shutil

    from rich.console import Console
    from rich.table import Table

    # a pipe or a file gets a wide table rather than rich's 80 columns
    console = Console(highlight=False, width=max(shutil.get_terminal_size((150, 24)).columns, 100))
    table = Table(title=f"{data['url']} · {data['model_id']} · {data['endpoint_type']}")
    for c in _COLUMNS:
        table.add_column(_SHORT.get(c, c), justify="right")
    for level in data["levels"]:
        table.add_row(*(_fmt(level.get(c)) for c in _COLUMNS))
    console.print(table)
    console.print("[dim]medians; tok/s = 1 / median TPOT of one stream; −net = TTFT − network[/]")
    if data.get("roofline"):
        story = Table(
            title=f"on the roofline: {data['roofline']['machine']} "
            f"({data['roofline']['estimator']} estimator)"
        )
        for h in _STORY_HEADERS:
            story.add_column(h, justify="right")
        for row in story_rows(data):
            story.add_row(*row)
        console.print(story)
    for key in ("ttft", "tpot", "itl", "e2el", "network", "decode_rate", "output_throughput"):
        console.print(f"[dim]{FORMULAS[key]}[/]")
    for note in data.get("notes") or ():
        console.print(f"note: {note}")


def html_report(data: Mapping[str, Any], charts: Mapping[str, bytes | None]) -> str:
    """A self-contained HTML page: the levels, the story, the charts, the formulas."""
    from roofprof.report.html import html_image, html_page, html_table

    parts = [
        f"<h1>Endpoint {_esc(data['url'])}</h1>",
        f"<p>model {_esc(data['model_id'])} · {_esc(data['endpoint_type'])} · "
        f"{_esc(data['provenance']['time_utc'])}</p>",
        html_table(_COLUMNS, [[_fmt(lv.get(c)) for c in _COLUMNS] for lv in data["levels"]]),
    ]
    if data.get("roofline"):
        parts.append(f"<h2>On the roofline ({_esc(data['roofline']['machine'])})</h2>")
        parts.append(html_table(_STORY_HEADERS, story_rows(data)))
    for name, image in charts.items():
        parts.append(html_image(image, name))
    parts.append("<h2>Formulas</h2><ul>")
    parts += [f"<li>{_esc(v)}</li>" for v in FORMULAS.values()]
    parts.append("</ul>")
    parts += [f"<p>note: {_esc(n)}</p>" for n in data.get("notes") or ()]
    return html_page(f"roofprof endpoint {data['url']}", parts)


def _esc(x: Any) -> str:
    import html

    return html.escape(str(x))


def write_files(data: Mapping[str, Any], out: Path, *, html: bool = True) -> list[Path]:
    """``endpoint.json``, ``endpoint.csv`` (and ``endpoint.html`` with charts) in ``out``,
    each written whole or not at all.

    Raises:
        ConfigError: the folder cannot be written.
    """
    from roofprof.results import write_text_atomic
    from roofprof.units import dumps_strict

    written = [
        write_text_atomic(out / "endpoint.json", dumps_strict(data) + "\n"),
        write_text_atomic(out / "endpoint.csv", csv_text(data)),
    ]
    if html:
        from roofprof.endpoint.charts import endpoint_charts

        written.append(
            write_text_atomic(out / "endpoint.html", html_report(data, endpoint_charts(data)))
        )
    return written
