"""The endpoint report's charts: measured points over the roofline's predicted curves.

* TTFT against prompt length: measured TTFT and TTFT − network floor over the predicted
  prefill time;
* decode tokens/s of one stream against prompt length, measured over predicted;
* output throughput against concurrency over the predicted batch curve.

Each takes the report payload (:func:`roofprof.endpoint.report.payload`) and returns PNG
bytes (None when the run holds nothing to draw).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["endpoint_charts"]


def _single(data: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    placed = (data.get("roofline") or {}).get("levels") or []
    out = []
    for i, lv in enumerate(data["levels"]):
        if lv["max_concurrency"] == 1 and lv["request_rate"] == "inf":
            out.append((lv, placed[i] if i < len(placed) else {}))
    return sorted(out, key=lambda x: x[0]["prompt_tokens"])


def _ttft(data: Mapping[str, Any]) -> bytes | None:
    from roofprof.plots import pyplot, save

    rows = [r for r in _single(data) if r[0]["median_ttft_ms"] is not None]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [lv["prompt_tokens"] for lv, _ in rows]
    ax.plot(xs, [lv["median_ttft_ms"] for lv, _ in rows], "o", label="measured TTFT (median)")
    net = [lv["median_ttft_minus_network_ms"] for lv, _ in rows]
    if all(v is not None for v in net):
        ax.plot(xs, net, "s", label="measured TTFT − network")
    pred = [p["predicted_prefill_s"] * 1e3 for _, p in rows if p.get("predicted_prefill_s")]
    if len(pred) == len(rows):
        ax.plot(xs, pred, "-", label="roofline prefill")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("ms")
    ax.set_title("time to first token")
    ax.legend()
    return save(fig)


def _decode(data: Mapping[str, Any]) -> bytes | None:
    from roofprof.plots import pyplot, save

    rows = [r for r in _single(data) if r[0]["decode_tokens_per_s"] is not None]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [lv["prompt_tokens"] for lv, _ in rows]
    ax.plot(xs, [lv["decode_tokens_per_s"] for lv, _ in rows], "o", label="measured 1 / TPOT")
    pred = [
        float(p["predicted_decode_tokens_per_s"])
        for _, p in rows
        if p.get("predicted_decode_tokens_per_s")
    ]
    if len(pred) == len(rows):
        ax.plot(xs, pred, "-", label="roofline decode")
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("tokens/s per stream")
    ax.set_ylim(bottom=0)
    ax.set_title("decode rate of one stream")
    ax.legend()
    return save(fig)


def _throughput(data: Mapping[str, Any]) -> bytes | None:
    from roofprof.plots import pyplot, save

    curve = (data.get("roofline") or {}).get("batch_curve")
    first = data["levels"][0]["prompt_tokens"] if data["levels"] else None
    measured = [
        (lv["max_concurrency"], lv["output_throughput"])
        for lv in data["levels"]
        if lv["prompt_tokens"] == first and lv["request_rate"] == "inf" and lv["output_throughput"]
    ]
    if len(measured) < 2:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*sorted(measured), strict=False), "o", label="measured output tokens/s")
    if curve:
        ax.plot(
            curve["batches"],
            curve["predicted_output_throughput"],
            "-",
            label="roofline decode (batch × per-sequence rate)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"throughput at a {first}-token prompt")
    ax.legend()
    return save(fig)


def endpoint_charts(data: Mapping[str, Any]) -> dict[str, bytes | None]:
    """The report's charts by title (PNG bytes; None: nothing to draw)."""
    return {
        "TTFT against prompt length": _ttft(data),
        "decode rate": _decode(data),
        "throughput against concurrency": _throughput(data),
    }
