"""Endpoint statistics with ``vllm bench serve``'s names, and the formula of each.

Names collide across tools (guidellm's "TPOT" includes the first token; vLLM's and SGLang's
"ITL" is a gap between *chunks*), so :data:`FORMULAS` states what each number here is, and
the report prints it next to the number. Percentiles are numpy's linear interpolation
(as vLLM's), std the population one (``np.std``).

>>> s = stats([0.010, 0.020, 0.030, 0.040])
>>> round(s["mean"] * 1e3, 1), round(s["median"] * 1e3, 1), round(s["p99"] * 1e3, 2)
(25.0, 25.0, 39.7)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roofprof.endpoint.records import LevelResult, NetworkFloor, RequestRecord
from roofprof.errors import ConfigError

__all__ = ["FORMULAS", "STATS", "level_summary", "parse_slo", "stats"]

#: The statistics of each metric (vLLM writes mean, median, std, p99; p90 added).
STATS = ("mean", "median", "std", "p90", "p99")

#: What each reported metric is (t0 = the request sent, by the client's perf_counter).
FORMULAS = {
    "ttft": "TTFT = first SSE chunk carrying text − t0 (a role-only or empty chunk is not a token)",
    "first_event": "first event = first SSE data event of any kind − t0",
    "headers": "headers = HTTP response headers received − t0",
    "tpot": "TPOT = (E2E − TTFT) / (n − 1), n = output tokens (server usage.completion_tokens)",
    "itl": "ITL = gap between consecutive text chunks, pooled over requests (a chunk may hold "
    "several tokens)",
    "e2el": "E2E = last chunk carrying text − t0",
    "output_throughput": "output throughput = Σ n / duration (first send → last response)",
    "request_throughput": "request throughput = completed requests / duration",
    "request_goodput": "goodput = requests meeting every --slo / duration",
    "network": "network floor = median TTFT of 1-token prompts with max_tokens = 1",
    "ttft_minus_network": "TTFT − network = median TTFT − network floor (prefill and queueing)",
    "decode_rate": "decode rate = 1 / median TPOT (tokens/s of one stream)",
}


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, median, std, p90, p99 of ``values`` (all None when empty)."""
    if not values:
        return dict.fromkeys(STATS)
    import numpy as np

    arr = np.asarray(values, dtype=float)
    return {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "std": float(arr.std()),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
    }


def parse_slo(text: str | None) -> dict[str, float]:
    """``"ttft=500,tpot=50"`` (milliseconds) → ``{"ttft": 0.5, "tpot": 0.05}`` (seconds).

    Raises:
        ConfigError: an unknown metric (valid: ttft, tpot, e2el) or a value that is not a
            positive number.

    >>> parse_slo("ttft=500, tpot=50")
    {'ttft': 0.5, 'tpot': 0.05}
    """
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        key = key.strip().lower()
        if key not in ("ttft", "tpot", "e2el"):
            raise ConfigError(f"unknown --slo metric {key!r}; valid choices: ttft, tpot, e2el")
        try:
            ms = float(value)
        except ValueError:
            ms = float("nan")
        if not ms > 0 or ms == float("inf"):
            raise ConfigError(
                f"--slo {key} must be a positive number of milliseconds, got {value!r}"
            )
        out[key] = ms / 1e3
    return out


def _good(r: RequestRecord, slo: Mapping[str, float]) -> bool:
    got = {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2el": r.e2e_s}
    return all(got[k] is not None and got[k] <= v for k, v in slo.items())  # type: ignore[operator]


def level_summary(
    level: LevelResult, slo: Mapping[str, float] | None = None, floor: NetworkFloor | None = None
) -> dict[str, Any]:
    """The level's statistics under vLLM's result-file names (milliseconds for ``*_ms``).

    Also: ``p90_*``, ``{...}_headers_ms``/``_first_event_ms``, per-request ``ttfts`` and
    ``itls`` (seconds, as vLLM saves them), ``input_lens``, ``output_lens``, ``errors``,
    ``tokens_from``, and ``median_ttft_minus_network_ms`` / ``decode_tokens_per_s``.
    """
    done = [r for r in level.requests if r.ok]
    duration = level.duration_s if level.duration_s > 0 else None
    out_tokens = sum(r.output_tokens for r in done)
    in_tokens = sum(r.input_len for r in done)
    out: dict[str, Any] = {
        "prompt_tokens": level.prompt_tokens,
        "max_tokens": level.max_tokens,
        "max_concurrency": level.concurrency,
        "request_rate": level.request_rate if level.request_rate is not None else "inf",
        "num_prompts": len(level.requests),
        "num_warmups": level.warmups,
        "duration": level.duration_s,
        "completed": len(done),
        "failed": len(level.requests) - len(done),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / duration if duration else None,
        "output_throughput": out_tokens / duration if duration else None,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration else None,
    }
    if slo:
        good = sum(_good(r, slo) for r in done)
        out["request_goodput"] = good / duration if duration else None
        out["slo_ms"] = {k: v * 1e3 for k, v in slo.items()}
    series = {
        "ttft": [r.ttft_s for r in done],
        "tpot": [r.tpot_s for r in done if r.tpot_s is not None],
        "itl": [g for r in done for g in r.itls_s],
        "e2el": [r.e2e_s for r in done],
        "headers": [r.headers_s for r in done if r.headers_s is not None],
        "first_event": [r.first_event_s for r in done if r.first_event_s is not None],
    }
    for metric, values in series.items():
        for name, value in stats(values).items():  # type: ignore[arg-type]
            out[f"{name}_{metric}_ms"] = value * 1e3 if value is not None else None
    tpot = out["median_tpot_ms"]
    out["decode_tokens_per_s"] = 1e3 / tpot if tpot else None
    base = floor.seconds if floor is not None else None
    ttft = out["median_ttft_ms"]
    out["median_ttft_minus_network_ms"] = (
        max(ttft - base * 1e3, 0.0) if ttft is not None and base is not None else None
    )
    out["stopped_by"] = level.stopped_by
    out["tokens_from"] = sorted({r.tokens_from for r in done})
    out["ttfts"] = [r.ttft_s for r in level.requests]
    out["itls"] = [r.itls_s for r in level.requests]
    out["input_lens"] = [r.input_len for r in level.requests]
    out["output_lens"] = [r.output_tokens if r.ok else 0 for r in level.requests]
    out["errors"] = [r.error for r in level.requests]
    return out
