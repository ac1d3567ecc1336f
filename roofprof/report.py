"""Tables and exports at the edge: rich tables for the terminal, pandas frames for CSV.

Formatting only: every number shown was computed elsewhere (rollup, probes, profile).
pandas is imported lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``1.234e12, "FLOP/s"`` → ``"1.23 TFLOP/s"`` (decimal prefixes).

    >>> si(3.35e12, "B/s")
    '3.35 TB/s'
    >>> si(0.0048, "s")
    '4.80 ms'
    """
    if value != value:  # NaN
        return "n/a"
    if value == 0:
        return f"0 {unit}".strip()
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"),
                (1e-6, "µ"), (1e-9, "n")]
    if unit in ("s",):
        prefixes = [p for p in prefixes if p[0] <= 1]
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.{digits - 1 if abs(value / scale) < 10 else max(digits - 2, 0) if abs(value / scale) < 100 else max(digits - 3, 0)}f} {prefix}{unit}".strip()
    scale, prefix = prefixes[-1]
    return f"{value / scale:.2f} {prefix}{unit}".strip()


def _console() -> Console:
    import shutil

    # Pipes default to 80 columns, which wraps every cell; tables here need ~110.
    return Console(width=max(shutil.get_terminal_size((120, 40)).columns, 110))


def print_predictions(predictions: Sequence, console: Console | None = None) -> None:
    """A summary (one prediction) or a sweep table (several), then the per-op breakdown."""
    console = console or _console()
    first = predictions[0]
    d0 = first.to_dict()
    console.print(f"[bold]{first.model.id}[/] on [bold]{first.machine}[/], {d0['dtype']}, "
                  f"estimator [bold]{first.estimator}[/]; ridge {d0['ridge_flops_per_byte']:.0f} FLOP/byte")
    console.print(f"[dim]counting: {d0['counting']}[/]")
    if len(predictions) == 1:
        pf, dc = d0["prefill"], d0["decode"]
        table = Table(title=f"batch {d0['batch']}, prompt {d0['prompt_tokens']} tokens, "
                            f"decode context {d0['context_tokens']} tokens")
        table.add_column("")
        table.add_column("prefill (TTFT, no network)", justify="right")
        table.add_column("decode (one step)", justify="right")
        table.add_row("time", si(pf["seconds"], "s"), si(dc["seconds_per_token"], "s"))
        table.add_row("tokens/s", f"{d0['batch'] * d0['prompt_tokens'] / pf['seconds']:,.0f} (prompt)",
                      f"{dc['tokens_per_second']:,.0f} (all sequences)")
        table.add_row("FLOPs", si(pf["flops"], "FLOP"), si(dc["flops"], "FLOP"))
        table.add_row("bytes", si(pf["bytes"], "B"), f"{si(dc['bytes'], 'B')} (weights {si(dc['weight_bytes'], 'B')}, "
                      f"KV {si(dc['kv_cache_bytes'], 'B')})")
        table.add_row("intensity", f"{pf['intensity']:,.1f} FLOP/B", f"{dc['intensity']:,.1f} FLOP/B")
        table.add_row("attention share of time", f"{100 * pf['attention_share']:.1f}%", f"{100 * dc['attention_share']:.1f}%")
        table.add_row("bound", pf["bound"], dc["bound"])
        console.print(table)
        console.print(op_table(first))
    else:
        table = Table(title="Sweep: prefill (TTFT, no network) and decode")
        for col in ("batch", "prompt", "context", "TTFT", "prefill bound", "attn share", "decode step",
                    "tokens/s", "decode bytes", "KV cache", "decode bound"):
            table.add_column(col, justify="right")
        for p in predictions:
            d = p.to_dict()
            pf, dc = d["prefill"], d["decode"]
            table.add_row(str(d["batch"]), str(d["prompt_tokens"]), str(d["context_tokens"]), si(pf["seconds"], "s"),
                          pf["bound"], f"{100 * pf['attention_share']:.0f}%", si(dc["seconds_per_token"], "s"),
                          f"{dc['tokens_per_second']:,.0f}", si(dc["bytes"], "B"), si(dc["kv_cache_bytes"], "B"),
                          dc["bound"])
        console.print(table)
    for w in d0.get("warnings", []):
        console.print(f"[yellow]warning:[/] {w}")


def op_table(prediction, title: str | None = None) -> Table:
    """Per-op breakdown of both phases: shape, FLOPs, bytes, intensity, time, bound."""
    table = Table(title=title or "Per-op breakdown (layer ops: all layers together)")
    for col in ("phase", "op", "M×N×K (batch)", "FLOPs", "bytes", "FLOP/B", "time", "share", "bound"):
        table.add_column(col, justify="left" if col in ("phase", "op", "bound") else "right")
    for phase in (prediction.prefill, prediction.decode):
        total = phase.seconds
        for o in phase.ops:
            op = o.op
            shape = f"{op.m}×{op.n}×{op.k}" + (f" ({op.batch})" if op.batch > 1 else "")
            table.add_row(op.phase, op.name + (f" ×{op.count}" if op.count > 1 else ""), shape,
                          si(op.total_flops, "FLOP"), si(op.total_bytes, "B"),
                          f"{op.intensity:,.1f}" if op.bytes else "∞", si(o.seconds, "s"),
                          f"{100 * o.seconds / total:.1f}%", o.estimate.bound)
    return table


def ops_frame(predictions: Sequence):
    """All ops of all predictions as a pandas DataFrame (one row per op and prediction)."""
    import pandas as pd

    rows = []
    for p in predictions:
        d = p.to_dict()
        for op in d["ops"]:
            rows.append({"model": d["model"], "gpu": d["gpu"], "estimator": d["estimator"], "batch": d["batch"],
                         "prompt_tokens": d["prompt_tokens"], "context_tokens": d["context_tokens"], **op})
    return pd.DataFrame(rows)


def specs_payload() -> dict[str, Any]:
    """GPUs and models with their key figures (for ``roofprof specs --format json``)."""
    from roofprof.specs import gpu_sources, list_gpus, list_models, load_model

    gpus = [{"id": g.id, "name": g.name, "compute_capability": g.compute_capability, "sm_count": g.sm_count,
             "memory_bytes": g.memory_bytes, "memory_bytes_per_s": g.memory_bytes_per_s,
             "peak_flops_per_s": dict(g.peak_flops_per_s), "ridge_bf16_flops_per_byte":
             g.ridge_flops_per_byte("bf16") if "bf16" in g.peak_flops_per_s else None,
             "aliases": list(g.aliases), "sources": list(g.sources)} for g in list_gpus()]
    models = []
    for mid in list_models():
        m = load_model(mid)
        models.append({"id": m.id, "params": m.param_count(), "layers": m.num_layers, "hidden_size": m.hidden_size,
                       "heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                       "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"), "source": m.source})
    return {"gpus": gpus, "models": models, "sources": dict(gpu_sources())}


def print_specs(console: Console | None = None) -> None:
    """Rich tables of the GPU database and the shipped models."""
    console = console or _console()
    payload = specs_payload()
    gpus = Table(title="GPUs (datasheet, dense; see data/gpus.json for sources)")
    for col in ("id", "name", "SMs", "memory", "bandwidth", "fp32", "bf16", "fp8", "ridge bf16", "sources"):
        gpus.add_column(col, justify="left" if col in ("id", "name", "sources") else "right")
    for g in payload["gpus"]:
        peaks = g["peak_flops_per_s"]
        gpus.add_row(g["id"], g["name"], str(g["sm_count"]), si(g["memory_bytes"], "B"), si(g["memory_bytes_per_s"], "B/s"),
                     si(peaks.get("fp32", float("nan")), "FLOP/s"), si(peaks.get("bf16", float("nan")), "FLOP/s"),
                     si(peaks.get("fp8", float("nan")), "FLOP/s"),
                     f"{g['ridge_bf16_flops_per_byte']:.0f}" if g["ridge_bf16_flops_per_byte"] else "n/a",
                     ",".join(g["sources"]))
    console.print(gpus)
    models = Table(title="Models (data/models/*.json; any HF Llama config.json path works too)")
    for col in ("id", "params", "layers", "hidden", "heads/kv", "head_dim", "KV bytes/token (bf16)"):
        models.add_column(col, justify="left" if col == "id" else "right")
    for m in payload["models"]:
        models.add_row(m["id"], f"{m['params'] / 1e9:.2f} B", str(m["layers"]), str(m["hidden_size"]),
                       f"{m['heads']}/{m['kv_heads']}", str(m["head_dim"]), f"{m['kv_bytes_per_token_bf16']:,}")
    console.print(models)
