"""``selftest.md``: the results of ``roofprof selftest`` as a Markdown report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roofprof.units import fmt_rate as _fmt_rate

__all__ = ["markdown_report"]


def _fmt_value(t: Mapping[str, Any]) -> str:
    v = t.get("value")
    return "–" if v is None else (f"{v:.1%}" if v <= 10 else f"{v:.3g}")


def markdown_report(results: Mapping[str, Any]) -> str:
    """``selftest.md``: device, pass/fail per target, sections, ceilings, failed kernels, ratios.

    >>> target = {"id": "a", "description": "d", "threshold": 0.9, "value": 0.95,
    ...           "status": "pass", "detail": ""}
    >>> md = markdown_report({"device": {"name": "X", "label": "cuda:0"}, "targets": [target]})
    >>> print(md.splitlines()[0])
    # roofprof selftest: X (cuda:0)
    """
    dev = results.get("device") or {}
    lines = [f"# roofprof selftest: {dev.get('name', '?')} ({dev.get('label', '?')})", ""]
    prov = results.get("provenance") or {}
    extra = dev.get("extra") or {}
    lines.append(
        f"- driver {extra.get('driver', '?')}, CUDA runtime {extra.get('cuda_runtime', '?')}, "
        f"compute capability {extra.get('compute_capability', '?')}, "
        f"{dev.get('compute_units', '?')} SMs"
    )
    lines.append(
        f"- datasheet row: {dev.get('spec_id') or 'none'}; run {prov.get('time_utc', '?')}; "
        f"elapsed {results.get('elapsed_s', 0):.0f} s; complete: {results.get('complete', False)}"
    )
    lat = results.get("launch_latency") or {}
    if lat.get("gpu_s_per_launch"):
        lines.append(
            "- launch latency (probe_empty): "
            f"{lat['gpu_s_per_launch'] * 1e6:.2f} µs per launch on the GPU, "
            f"{lat['host_issue_s_per_launch'] * 1e6:.2f} µs host issue"
        )
    lines += [
        "",
        "## Targets",
        "",
        "| target | measured | threshold | result | how |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in results.get("targets") or []:
        thr = t.get("threshold")
        thr_s = f"≥ {thr:.0%}" if thr is not None and thr <= 10 else str(thr)
        lines.append(
            f"| {t.get('description', t.get('id'))} | {_fmt_value(t)} | {thr_s} | "
            f"**{t.get('status')}** | "
            f"{t.get('detail', '')} |"
        )
    sections = results.get("sections") or {}
    if sections:
        lines += [
            "",
            "## Sections",
            "",
            "| section | status | seconds | note |",
            "| --- | --- | --- | --- |",
        ]
        for name, s in sections.items():
            lines.append(
                f"| {name} | {s.get('status')} | {s.get('elapsed_s', 0):.1f} | "
                f"{s.get('note', '')} |"
            )
    scaled = results.get("clock_scaled") or []
    ceilings = (results.get("roofline") or {}).get("ceilings") or []
    if ceilings:
        lines += [
            "",
            "## Ceilings",
            "",
            "| ceiling | value | clock seen | at spec clock | % of datasheet |",
            "| --- | --- | --- | --- | --- |",
        ]
        by_name = {s["name"]: s for s in scaled}
        for c in ceilings:
            unit = "B/s" if c.get("kind") == "memory" else "FLOP/s"
            s = by_name.get(c.get("name"), {})
            pct = s.get("percent_of_spec")
            clock = f"{c['clock_mhz']:.0f} MHz" if c.get("clock_mhz") else "–"
            at_spec = _fmt_rate(s.get("value_at_spec_clock"), unit) if s else "–"
            pct_s = f"{pct:.1f}%" if pct else "–"
            lines.append(
                f"| {c.get('name')} | {_fmt_rate(c.get('value'), unit)} | {clock} | "
                f"{at_spec} | {pct_s} |"
            )
    corr = results.get("correctness") or {}
    failed = [k for k in corr.get("kernels") or [] if not k.get("ok")]
    if corr.get("kernels"):
        lines += [
            "",
            "## Correctness",
            "",
            f"{len(corr['kernels']) - len(failed)} of {len(corr['kernels'])} kernels "
            "passed (fresh random inputs, outputs poisoned, float64 references).",
        ]
        for k in failed:
            lines.append(f"- **FAILED** {k['kernel']}: {k.get('note', '')}")
        for k in corr["kernels"]:
            if k.get("skipped"):
                lines.append(f"- skipped {k['kernel']}: {k.get('note', '')}")
    ratios = (results.get("benchmarks") or {}).get("summary") or []
    if ratios:
        lines += [
            "",
            "## Llama shapes (time-weighted over each pass's GEMMs)",
            "",
            "| model | phase | batch | dtype | impl | GB/s | TFLOP/s | vs cuBLAS |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in ratios:
            vs = r.get("vs_cublas")
            vs_s = f"{vs:.2f}" if vs else "–"
            lines.append(
                f"| {r['model']} | {r['phase']} | {r['batch']} | {r['dtype']} | {r['impl']} | "
                f"{r['bytes_per_s'] / 1e9:.0f} | {r['flops_per_s'] / 1e12:.1f} | {vs_s} |"
            )
    warnings = results.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings[:30]]
    return "\n".join(lines) + "\n"
