"""An endpoint's measurements placed on the roofline of the same model and machine.

Each level is predicted at its own prompt, decode context (prompt + half the output) and
batch (= concurrency) by an injected ``predict`` (``roofprof.api.sweep`` with the user's
model, GPU or roofline and estimator), and compared:

* decode: measured 1 / median TPOT against the predicted tokens/s of one sequence at that
  batch (% of roofline);
* prefill: median TTFT − network floor against the predicted prefill time (% of roofline
  = predicted / measured);
* the long-prompt decode slowdown (median TPOT at the longest prompt over the shortest, at
  concurrency 1) against the predicted step-time ratio, which comes from the KV-cache bytes
  each step rereads;
* throughput against concurrency: measured output tokens/s over the predicted batch curve
  (batch × per-sequence decode rate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from roofprof.endpoint.metrics import level_summary
from roofprof.endpoint.records import EndpointResult

__all__ = ["Predictor", "batch_grid", "place", "roofprof_model_for"]

#: ``predict(prompt_tokens, batches, context_tokens)`` → one Prediction per batch, in order.
Predictor = Callable[[int, Sequence[int], int], Sequence[Any]]


def batch_grid(largest: int) -> list[int]:
    """Powers of two up to ``largest`` (included), for the predicted batch curve.

    >>> batch_grid(8), batch_grid(12)
    ([1, 2, 4, 8], [1, 2, 4, 8, 12])
    """
    out, b = [], 1
    while b < largest:
        out.append(b)
        b *= 2
    return [*out, max(1, largest)]


def _pct(a: float | None, b: float | None) -> float | None:
    return 100.0 * a / b if a is not None and b else None


def place(result: EndpointResult, predict: Predictor) -> dict[str, Any]:
    """The ``roofline`` block of the report: per level, the KV slowdown, the batch curve.

    Raises:
        RoofprofError: as ``predict`` (an unknown model, a GPU, an estimator's inputs).
    """
    floor = result.floor.seconds if result.floor is not None else None
    summaries = [level_summary(lv, floor=result.floor) for lv in result.levels]
    by_prompt: dict[tuple[int, int], list[int]] = {}
    level_keys = []
    for lv, s in zip(result.levels, summaries, strict=False):
        lens = [n for n, e in zip(s["input_lens"], s["errors"], strict=False) if not e] or [
            lv.prompt_tokens
        ]
        prompt = round(sum(lens) / len(lens))
        outs = [n for n in s["output_lens"] if n] or [lv.max_tokens]
        context = prompt + round(sum(outs) / len(outs) / 2)
        by_prompt.setdefault((prompt, context), []).append(max(1, lv.concurrency))
        level_keys.append((prompt, context, max(1, lv.concurrency)))
    first = next(iter(by_prompt), None)
    preds: dict[tuple[int, int, int], Any] = {}
    grid: list[int] = []
    for (prompt, context), batches in by_prompt.items():
        wanted = sorted(set(batches))
        if (prompt, context) == first and max(wanted) > 1:
            grid = batch_grid(max(wanted))
            wanted = sorted(set(wanted) | set(grid))
        for b, p in zip(wanted, predict(prompt, wanted, context), strict=False):
            preds[(prompt, context, b)] = p
    rows = []
    for lv, s, key in zip(result.levels, summaries, level_keys, strict=False):
        p = preds[key].to_dict()
        decode, prefill = p["decode"], p["prefill"]
        measured_prefill = s["median_ttft_minus_network_ms"]
        rows.append(
            {
                "prompt_tokens": key[0],
                "context_tokens": key[1],
                "concurrency": lv.concurrency,
                "request_rate": lv.request_rate,
                "predicted_prefill_s": prefill["seconds"],
                "predicted_prefill_bound": prefill["bound"],
                "measured_ttft_s": _ms(s["median_ttft_ms"]),
                "measured_ttft_minus_network_s": _ms(measured_prefill),
                "prefill_percent_of_roofline": _pct(prefill["seconds"], _ms(measured_prefill)),
                "predicted_decode_tokens_per_s": decode["tokens_per_second_per_sequence"],
                "predicted_decode_bound": decode["bound"],
                "measured_decode_tokens_per_s": s["decode_tokens_per_s"],
                "decode_percent_of_roofline": _pct(
                    s["decode_tokens_per_s"], decode["tokens_per_second_per_sequence"]
                ),
                "predicted_output_throughput": decode["tokens_per_second"],
                "measured_output_throughput": s["output_throughput"],
                "weight_bytes": decode["weight_bytes"],
                "kv_cache_bytes": decode["kv_cache_bytes"],
                "predicted_step_bytes": decode["bytes"],
            }
        )
    some = next(iter(preds.values()), None)
    head = some.to_dict() if some is not None else {}
    return {
        "model": head.get("model"),
        "machine": head.get("gpu"),
        "estimator": head.get("estimator"),
        "dtype": head.get("dtype"),
        "network_floor_s": floor,
        "levels": rows,
        "kv_slowdown": _kv_slowdown(rows),
        "batch_curve": _batch_curve(first, grid, preds, rows),
    }


def _ms(value: float | None) -> float | None:
    return value / 1e3 if value is not None else None


def _kv_slowdown(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    single = [r for r in rows if r["concurrency"] == 1 and r["request_rate"] is None]
    if len(single) < 2:
        return None
    short = min(single, key=lambda r: r["prompt_tokens"])
    long = max(single, key=lambda r: r["prompt_tokens"])
    if short is long:
        return None
    measured = None
    if short["measured_decode_tokens_per_s"] and long["measured_decode_tokens_per_s"]:
        measured = 100.0 * (
            short["measured_decode_tokens_per_s"] / long["measured_decode_tokens_per_s"] - 1
        )
    predicted = 100.0 * (
        short["predicted_decode_tokens_per_s"] / long["predicted_decode_tokens_per_s"] - 1
    )
    return {
        "short_prompt_tokens": short["prompt_tokens"],
        "long_prompt_tokens": long["prompt_tokens"],
        "measured_percent": measured,
        "predicted_percent": predicted,
        "long_kv_cache_bytes": long["kv_cache_bytes"],
        "weight_bytes": long["weight_bytes"],
        "formula": "slowdown = TPOT(long prompt) / TPOT(short prompt) − 1 (measured: median "
        "TPOT; predicted: decode step time at each context, whose difference is the KV-cache "
        "bytes reread)",
    }


def _batch_curve(
    first: tuple[int, int] | None,
    grid: list[int],
    preds: dict[tuple[int, int, int], Any],
    rows: list[dict[str, Any]],
) -> dict[str, Any] | None:
    if first is None or not grid:
        return None
    measured = [
        (r["concurrency"], r["measured_output_throughput"])
        for r in rows
        if (r["prompt_tokens"], r["context_tokens"]) == first and r["request_rate"] is None
    ]
    return {
        "prompt_tokens": first[0],
        "context_tokens": first[1],
        "batches": grid,
        "predicted_output_throughput": [
            preds[(*first, b)].to_dict()["decode"]["tokens_per_second"] for b in grid
        ],
        "measured": [{"concurrency": c, "output_throughput": t} for c, t in sorted(measured)],
    }


def roofprof_model_for(explicit: str | None, served: str) -> tuple[str | None, str]:
    """The roofprof model for a served model id, and why not when there is none.

    ``explicit`` (``--roofprof-model``) wins and must load; otherwise the served id is tried
    as a roofprof id, a folder with a ``config.json``, and its last path part without an
    ``-instruct``/``-chat``/``-hf``/``-it`` suffix.

    Returns:
        ``(model, "")``, or ``(None, reason)`` when nothing matches.

    Raises:
        RoofprofError: ``explicit`` does not load.

    >>> roofprof_model_for(None, "meta-llama/Llama-3.1-8B-Instruct")[0]
    'llama-3.1-8b'
    """
    from roofprof.errors import RoofprofError
    from roofprof.specs import list_models, load_model

    if explicit is not None:
        load_model(explicit)  # fails before anything is measured
        return explicit, ""
    candidates = [served]
    path = Path(served)
    if served and path.is_dir() and (path / "config.json").is_file():
        candidates.insert(0, str(path / "config.json"))
    tail = served.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in ("-instruct", "-chat", "-hf", "-it"):
        tail = tail.removesuffix(suffix)
    candidates.append(tail)
    for name in candidates:
        if name in list_models() or (name.endswith(".json") and Path(name).is_file()):
            try:
                load_model(name)
            except RoofprofError:
                continue
            return name, ""
    return None, (
        f"no roofprof model for the served id {served!r}: give --roofprof-model ID or "
        "config.json to place it on the roofline"
    )
