"""The self-contained ``index.html`` of ``roofprof run``: charts inlined as base64 PNG.

Every string from input goes through :func:`html.escape`; only markup built here is raw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roofprof.report._text import pct as _pct
from roofprof.report._text import resid as _resid
from roofprof.units import si

__all__ = ["html_image", "html_page", "html_table", "render_html"]


def render_html(result, payload: dict[str, Any], charts: dict[str, bytes]) -> str:
    """The self-contained report page (charts inlined as base64 PNG, no external resources)."""
    dev = result.device
    val = result.validation
    comp = payload["comparison"]
    parts: list[str] = []
    add = parts.append
    add(f"<h1>roofprof report: {_esc(result.model)} on {_esc(dev.get('name'))}</h1>")
    add(
        f"<p class='muted'>device {_esc(dev.get('label'))}, {_esc(result.dtype)}, threads "
        f"{_esc(result.settings.get('threads'))}; "
        f"batch {result.settings.get('batch')}, prompt {result.settings.get('prompt_tokens')} "
        "tokens; "
        f"{_esc(result.settings.get('counting'))}. Run took {result.elapsed_s:.0f} s "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in result.step_seconds.items())}).</p>"
    )
    # headline
    by = {r["estimator"]: r for r in comp}
    cards = []
    for label in ("real", "measured", "empirical", "spec"):
        r = by.get(label)
        if r is None:
            continue
        resid = (
            ""
            if label == "real"
            else (
                f"<div class='res'>TTFT {_resid(r['ttft_residual'])}, decode "
                f"{_resid(r['decode_residual'])} vs real</div>"
                if val
                else ""
            )
        )
        cards.append(
            f"<div class='card'><div class='lbl'>{_esc(label)}</div><div "
            f"class='big'>{si(r['ttft_s'], 's')}"
            "</div><div>time to first token</div><div "
            f"class='big'>{r['tokens_per_second']:,.2f}</div>"
            f"<div>tokens/s ({si(r['decode_step_s'], 's')} per step)</div>{resid}</div>"
        )
    add(f"<div class='cards'>{''.join(cards)}</div>")
    if val is not None:
        add(
            f"<p>Real run: {_esc(val.backend)}, attention "
            f"{'SDPA (fused)' if val.attention == 'fused' else 'eager'}, "
            f"clock {_esc(val.clock)}; {_esc(val.memory.describe())}. Prefill samples "
            f"{', '.join(si(s, 's') for s in val.prefill_samples_s)}; decode step samples "
            f"{', '.join(si(s, 's') for s in val.decode_samples_s)} (context "
            f"{val.real.context_tokens}).</p>"
        )
        if val.real_model is not None:
            add(f"<p>Real model: {_esc(val.real_model.describe())}.</p>")
            add(
                "<ul>"
                + "".join(f"<li>differs: {_esc(d)}</li>" for d in val.real_model.differs)
                + "</ul>"
            )
    add("<h2>Estimators against the real run</h2>")
    launch_s = result.profiles["decode"].launch_s if "decode" in result.profiles else 0.0
    add(
        "<p>Residual = predicted / real − 1. <b>spec</b>: datasheet roofline; <b>empirical</b>: "
        "measured ceilings; "
        "<b>measured</b>: sum of measured per-op times, each op at least its kernels × the "
        "launch overhead "
        f"({si(launch_s, 's')} per kernel); "
        "<b>measured-no-launch</b>: the plain sum; <b>real</b>: the model forward pass.</p>"
    )
    add(
        _html_table(
            [
                "estimator",
                "TTFT",
                "TTFT residual",
                "decode step",
                "decode residual",
                "tokens/s",
                "prefill bound",
                "decode bound",
            ],
            [
                [
                    r["estimator"],
                    si(r["ttft_s"], "s"),
                    _resid(r["ttft_residual"]) if r["estimator"] != "real" else "",
                    si(r["decode_step_s"], "s"),
                    _resid(r["decode_residual"]) if r["estimator"] != "real" else "",
                    f"{r['tokens_per_second']:,.2f}",
                    r.get("prefill_bound", ""),
                    r.get("decode_bound", ""),
                ]
                for r in comp
            ],
        )
    )
    for label, why in result.unavailable.items():
        add(f"<p class='muted'>{_esc(label)}: not available ({_esc(why)})</p>")
    add(_img(charts.get("estimators"), "estimator comparison"))
    add(_img(charts.get("breakdown"), "time by op group"))
    add("<h2>Roofline with every op</h2>")
    add(
        "<p>Solid: measured ceilings of this machine; dashed: datasheet (GPUs in data/gpus.json "
        "only). Each op sits at its "
        "analytic intensity (FLOPs / minimum DRAM bytes) and its achieved FLOP/s; ▲ prefill, ● "
        "decode.</p>"
    )
    add(_img(charts.get("roofline"), "roofline"))
    if result.roofline is not None:
        add(
            _html_table(
                ["ceiling", "kind", "dtype / level", "value", "source", "clock"],
                [
                    [
                        c.name,
                        c.kind,
                        c.dtype or c.level,
                        si(c.value, "FLOP/s" if c.kind == "compute" else "B/s"),
                        c.source,
                        f"{c.clock_mhz:.0f} MHz" if c.clock_mhz else "",
                    ]
                    for c in result.roofline.ceilings
                ],
                numeric_from=3,
            )
        )
    for phase, prof in result.profiles.items():
        w = prof.workload
        tokens = (
            f"prompt {w.prompt_tokens}" if phase == "prefill" else f"context {w.context_tokens}"
        )
        add(f"<h2>Measured ops: {phase}</h2>")
        add(
            f"<p class='muted'>batch {w.batch}, "
            f"{tokens} "
            f"tokens; layer ops run ×{w.model.num_layers}; measured sum "
            f"{si(prof.seconds, 's')}. Percent of roof: achieved "
            "FLOP/s over the attainable roof at the op's intensity (for ops with no FLOPs: roof "
            "time over measured time).</p>"
        )
        rows = []
        for o in prof.ops:
            op, p = o.op, o.placement()
            rows.append(
                [
                    op.name + (f" ×{op.count}" if op.count > 1 else ""),
                    f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else ""),
                    o.chosen.impl if o.chosen else "none",
                    si(o.seconds, "s") if o.chosen else "",
                    si(o.seconds * op.count, "s") if o.chosen else "",
                    f"{100 * o.seconds * op.count / prof.seconds:.1f}%"
                    if o.chosen and prof.seconds
                    else "",
                    si(p["flops_per_s"] or 0.0, "FLOP/s"),
                    si(p["bytes_per_s"] or 0.0, "B/s"),
                    f"{op.intensity:,.2f}" if op.bytes else "∞",
                    si(p["attainable_flops_per_s"], "FLOP/s")
                    if p["attainable_flops_per_s"]
                    else "n/a",
                    _pct(p["percent_of_roof"] if op.flops else p["percent_of_roof_time"]),
                    p["bound"] or "n/a",
                    f"{o.chosen.timing.cv:.0%}" if o.chosen else "",
                    _Raw("<br>".join(_impl_cell(m) for m in o.measurements)),
                ]
            )
        add(
            _html_table(
                [
                    "op",
                    "M×N×K (batch)",
                    "impl",
                    "time/call",
                    "all calls",
                    "share",
                    "FLOP/s",
                    "B/s",
                    "FLOP/B",
                    "roof",
                    "% roof",
                    "bound",
                    "CV",
                    "all implementations (correctness-checked first)",
                ],
                rows,
                numeric_from=3,
            )
        )
    if result.batch_sweep:
        add("<h2>Decode sweeps</h2>")
        add(_img(charts.get("sweeps"), "sweeps"))
        rows = []
        for kind, data in (
            ("batch", payload["batch_sweep"]),
            ("context", payload["context_sweep"]),
        ):
            for label, items in data.items():
                for r in items:
                    rows.append(
                        [
                            kind,
                            label,
                            r["batch"],
                            r["context_tokens"],
                            si(r["seconds"] or 0.0, "s"),
                            f"{r['tokens_per_second'] or 0.0:,.1f}",
                            r["bound"],
                            _pct(100 * (r["attention_share"] or 0.0)),
                        ]
                    )
        add(
            _html_table(
                [
                    "sweep",
                    "estimator",
                    "batch",
                    "context",
                    "decode step",
                    "tokens/s",
                    "bound",
                    "attention",
                ],
                rows,
                numeric_from=2,
            )
        )
    add(_published_section())
    add("<h2>Clocks and throttling</h2>")
    add("".join(f"<p>{_esc(line)}</p>" for line in _throttle_summary(result)))
    add(_img(charts.get("clocks"), "clocks"))
    if result.warnings or payload.get("roofline_warnings"):
        add(
            "<h2>Warnings</h2><ul>"
            + "".join(f"<li>{_esc(w)}</li>" for w in dict.fromkeys(result.warnings))
            + "</ul>"
        )
    add("<h2>Environment (doctor)</h2>")
    add(
        _html_table(
            ["component", "status", "detail"],
            [[r["component"], "ok" if r["ok"] else "missing", r["detail"]] for r in result.doctor],
            numeric_from=9,
        )
    )
    add("<h2>Provenance</h2>")
    prov = next(iter(result.profiles.values())).provenance if result.profiles else {}
    add(
        _html_table(
            ["field", "value"],
            [
                [k, v if not isinstance(v, dict) else ", ".join(f"{a} {b}" for a, b in v.items())]
                for k, v in prov.items()
                if k not in ("device",)
            ],
            numeric_from=9,
        )
    )
    add(
        "<p>Files: "
        + ", ".join(f"<a href='{_esc(v)}'>{_esc(k)}</a>" for k, v in result.files.items())
        + "</p>"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>roofprof: "
        f"{_esc(result.model)}</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


_STYLE = (
    "body{font-family:system-ui,-apple-system,Segoe "
    "UI,sans-serif;max-width:1280px;margin:24px auto;padding:0 16px;"
    "color:#222;font-size:14px}h1{font-size:22px}"
    "h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;margin:8px 0 16px;font-size:12.5px}th,td{border:1px "
    "solid #ddd;padding:3px 7px;"
    "vertical-align:top}th{background:#f3f5f8;text-align:left}"
    "td.num{text-align:right;white-space:nowrap}"
    "img{max-width:100%;display:block;margin:8px "
    "0}.muted{color:#666}.cards{display:flex;gap:12px;flex-wrap:wrap}"
    ".card{border:1px solid #ccd;border-radius:6px;padding:10px "
    "14px;min-width:200px;background:#fafbfd}"
    ".big{font-size:22px;font-weight:600}.lbl{text-transform:uppercase;font-size:11px;color:#557}"
    ".res{color:#a40;margin-top:4px}"
)


def html_page(title: str, parts: Sequence[str]) -> str:
    """A self-contained page in the style of ``roofprof run``'s report: ``parts`` are HTML
    fragments built here (:func:`html_table`, :func:`html_image`) or escaped by the caller.

    >>> html_page("t<1>", ["<p>x</p>"]).count("t&lt;1&gt;")
    1
    """
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1) -> str:
    """A table in the report's style; every cell is escaped, columns from ``numeric_from`` on
    are right-aligned."""
    return _html_table(headers, rows, numeric_from)


def html_image(data: bytes | None, alt: str) -> str:
    """A PNG inlined as base64 (a muted note when ``data`` is None)."""
    return _img(data, alt)


def _throttle_summary(result) -> list[str]:
    lines = []
    reasons: dict[str, int] = {}
    unavailable = set()
    for prof in result.profiles.values():
        for o in prof.ops:
            for m in o.measurements:
                t = m.telemetry or {}
                for r in t.get("clocks_event_reasons") or ():
                    reasons[r] = reasons.get(r, 0) + 1
                if t and not t.get("available", True):
                    unavailable.add(t.get("reason", "unavailable"))
                if t.get("reason") and t.get("available"):
                    unavailable.add(t["reason"])
    if reasons:
        lines.append(
            "clock-event reasons seen: "
            + ", ".join(f"{k} ({v} measurements)" for k, v in reasons.items())
        )
    else:
        lines.append("no throttling reason reported during the measurements")
    lines.extend(sorted(unavailable))
    measured = [
        m.telemetry or {}
        for prof in result.profiles.values()
        for o in prof.ops
        for m in o.measurements
        if m.ok
    ]
    retried = sum(1 for t in measured if (t.get("attempts") or 1) > 1)
    contended = sum(1 for t in measured if t.get("contended"))
    if retried or contended:
        lines.append(
            f"machine load: {retried} of {len(measured)} op measurements were repeated because "
            "other "
            f"processes used the CPUs; {contended} stayed contended after the retries"
        )
    elif any(t.get("other_cpu_share") is not None for t in measured):
        lines.append(
            "machine load: no op measurement saw other processes take a noticeable share of the "
            "CPUs"
        )
    if result.validation is not None:
        shares = (result.validation.telemetry or {}).get("other_cpu_share") or {}
        worst = max([*shares.get("prefill", []), *shares.get("decode", [])], default=None)
        if worst is not None:
            lines.append(
                f"real run: other processes used at most {worst:.0%} of the CPUs during its "
                "timed samples"
            )
    return lines


def _published_section() -> str:
    """GPU predictions against published measurements (no device needed; never fails the report)."""
    from roofprof.errors import RoofprofError

    try:
        from roofprof.report.published import published_html_summary

        headers, rows, chart = published_html_summary()
    except (RoofprofError, ImportError) as exc:
        return f"<h2>Against published GPU measurements</h2><p class='muted'>{_esc(exc)}</p>"
    return (
        "<h2>Against published GPU measurements</h2>"
        "<p>roofprof validate --published: median and worst |residual| over data/published/ "
        "(calibrated: leave-one-out)</p>"
        + _html_table(headers, rows, numeric_from=2)
        + _img(chart, "predicted vs published")
    )


def _esc(x: Any) -> str:
    import html

    return html.escape(str(x))


def _html_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1
) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = "".join(
            f"<td class='{'num' if i >= numeric_from and not isinstance(c, _Raw) else ''}'>"
            f"{c if isinstance(c, _Raw) else _esc(c)}</td>"
            for i, c in enumerate(r)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw(str):
    """HTML that must not be escaped."""


def _img(data: bytes | None, alt: str) -> str:
    import base64

    if not data:
        return f"<p class='muted'>({_esc(alt)}: not available)</p>"
    return f"<img alt='{_esc(alt)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'/>"


def _impl_cell(m) -> str:
    """One implementation in the ops table: its time, or its status with the reason on hover."""
    if m.ok:
        return f"{_esc(m.impl)}: {si(m.seconds, 's')}"
    mark = {
        "unsupported": "—",
        "failed": "<b style='color:#b00'>FAILED check</b>",
        "error": "<b style='color:#b00'>error</b>",
    }.get(m.status, _esc(m.status))
    return f"<span title='{_esc(m.note)}'>{_esc(m.impl)}: {mark}</span>"
