"""``roofprof predict``: analytical predictions from a roofline, no hardware needed."""

from __future__ import annotations

import io
from pathlib import Path

import typer

from roofprof.cli import app, fail
from roofprof.cli._console import collected_warnings, emit, show_warnings
from roofprof.cli._options import (
    MAX_BATCH,
    MAX_TOKENS,
    PLOT_SUFFIXES,
    TableJsonCsv,
    check_int,
    check_output,
    parallel_layout,
    parse_int_list,
)

__all__ = ["predict"]


@app.command()
def predict(
    model: str = typer.Option(
        "llama-3.1-8b",
        "--model",
        "-m",
        help="Model: a shipped id (see `roofprof specs`), a Hugging Face Hub id (org/name[@rev]), "
        "a model folder, a .gguf file or a config.json path.",
    ),
    gpu: str | None = typer.Option(
        None,
        "--gpu",
        "-g",
        help="GPU id or alias from the spec database (spec estimator); a comma list "
        "(h100-sxm,a100-sxm-80gb) prints the GPUs side by side with the ratios to the first.",
    ),
    roofline: Path | None = typer.Option(
        None, "--roofline", help="roofline.json from `roofprof roofline` (empirical estimator)."
    ),
    estimator: str | None = typer.Option(
        None,
        "--estimator",
        help="spec | empirical | measured | calibrated (default: spec with --gpu, empirical "
        "with --roofline). empirical with --gpu and no --roofline uses the GPU's "
        "published ceilings; calibrated adds the fitted engine losses "
        "(data/calibration.json).",
    ),
    engine: str = typer.Option(
        "ideal",
        "--engine",
        help="Engine profile for --estimator calibrated: ideal | trt-llm | vllm | sglang | "
        "gpt-fast | llama.cpp | hf-eager.",
    ),
    device: str = typer.Option(
        "auto", "--device", help="Device for the measured estimator: auto | cpu | cuda:N."
    ),
    prompt: int = typer.Option(
        2000, "--prompt", "-p", help="Prompt tokens per sequence (prefill)."
    ),
    batch: str = typer.Option(
        "1", "--batch", "-b", help="Sequences per batch; a comma list sweeps (1,8,64,256)."
    ),
    context: str | None = typer.Option(
        None,
        "--context",
        "-c",
        help="Cached tokens per sequence at decode (default: the prompt); a comma list sweeps.",
    ),
    dtype: str = typer.Option(
        "bf16",
        "--dtype",
        help="Compute precision (which tensor-core peak applies): fp32 | "
        "bf16 | fp16 | fp8 | int8 | fp4 | fp64 | tf32.",
    ),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="Stored weight format (default: --dtype): bf16 | fp16 | fp8 | int8 | int4 | nvfp4 | "
        "mxfp4 | q8_0 | q4_k_m. Weight-only formats read fewer bytes and compute at --dtype.",
    ),
    kv_dtype: str | None = typer.Option(
        None, "--kv-dtype", help="KV-cache precision (default: --dtype): bf16 | fp16 | fp8."
    ),
    convention: str = typer.Option(
        "engine",
        "--convention",
        help="engine (lm_head on the last token, embedding gather, separate elementwise kernels) "
        "| rule-of-thumb (2·P·T counting).",
    ),
    attention: str | None = typer.Option(
        None,
        "--attention",
        help="fused (FlashAttention-style, default) | unfused (eager: scores through memory).",
    ),
    fmt: TableJsonCsv = typer.Option("table", "--format", "-f", help="table | json | csv."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write a roofline PNG with every op placed on it."
    ),
    remeasure: bool = typer.Option(
        False,
        "--remeasure",
        help="With --estimator measured: measure every op (and on a CPU the framework "
        "overhead) afresh, ignoring cached measurements (e.g. ones taken on a busy machine).",
    ),
    tp: int | None = typer.Option(
        None, "--tp", help="Tensor-parallel GPUs (per-rank shapes, all-reduces; default 1)."
    ),
    pp: int | None = typer.Option(
        None, "--pp", help="Pipeline stages (stage sends; latency and throughput)."
    ),
    sequence_parallel: bool = typer.Option(
        False,
        "--sequence-parallel",
        help="With --tp: reduce-scatter + all-gather instead of each all-reduce.",
    ),
    ignore_memory: bool = typer.Option(
        False, "--ignore-memory", help="Predict even when the layout does not fit the GPU's memory."
    ),
    collectives: Path | None = typer.Option(
        None,
        "--collectives",
        help="Measured collective times (JSON: op, bytes, ranks, seconds) instead of the "
        "α-β priors.",
    ),
    routing: str | None = typer.Option(
        None,
        "--routing",
        help="Mixture-of-experts routing assumption: uniform (default) | zipf:S (expert i's "
        "share ∝ i^-S) | FILE (JSON list of per-expert loads, e.g. counted from a router "
        "trace). Sets how many distinct experts a batch reads per layer.",
    ),
) -> None:
    """Predict time to first token and decode tokens/s from a roofline (datasheet or measured)."""
    from roofprof.api import sweep

    check_int(prompt, "--prompt", 1, MAX_TOKENS)
    check_output(plot, "--plot", suffixes=PLOT_SUFFIXES)
    batches = parse_int_list(batch, "--batch", 1, MAX_BATCH)
    contexts = parse_int_list(context, "--context", 0) if context else [None]
    explicit = tp is not None or pp is not None
    layout = parallel_layout(1 if tp is None else tp, 1 if pp is None else pp, sequence_parallel)
    # the scenario and estimator, the same for one GPU and for several side by side
    common = dict(
        batches=batches,
        contexts=contexts,
        estimator=estimator,
        engine=engine,
        prompt_tokens=prompt,
        dtype=dtype,
        convention=convention,
        attention=attention,
        weights=weights,
        kv_dtype=kv_dtype,
        parallel=layout if explicit else None,
        collectives=collectives,
        routing=routing,
    )
    if gpu is not None and "," in gpu:
        if plot is not None or roofline is not None:
            fail("--plot and --roofline take one GPU; give a single --gpu id")
        from roofprof.api import compare_gpus

        with collected_warnings() as caught:
            comparison = compare_gpus(model, gpu, **common)
        _emit_comparison(comparison, fmt)
        show_warnings(caught, shown=())
        return
    with collected_warnings() as caught:
        predictions = sweep(
            model,
            gpu,
            roofline=roofline,
            device=device,
            remeasure=remeasure,
            ignore_memory=ignore_memory,
            **common,
        )
        if plot is not None:
            from roofprof.plots.roofline import plot_prediction

            plot_prediction(predictions[0], plot)
    _emit(predictions, fmt)
    if fmt == "table":
        _say_moe(predictions)
        _say_checkpoint(predictions[0])
    # the table ends with the first prediction's warnings: those are not printed twice
    show_warnings(caught, shown=predictions[0].warnings if fmt == "table" else ())
    if plot is not None:
        typer.echo(f"roofline plot written to {plot}", err=True)


def _say_moe(predictions: list) -> None:
    """One stderr line per mixture-of-experts prediction: routing, experts read, parameters."""
    for p in predictions:
        block = p.moe
        if block is None or "experts" not in block:
            continue
        typer.echo(
            f"mixture of experts: {block['routing']}; decode batch {p.decode.workload.batch} "
            f"reads {block['decode']['experts_touched_per_layer']:.2f} of {block['experts']} "
            f"experts per layer; {block['active_params'] / 1e9:.2f} B of "
            f"{block['total_params'] / 1e9:.2f} B parameters active per token",
            err=True,
        )


def _say_checkpoint(p) -> None:
    """One stderr line naming the checkpoint's stored weights and where they come from."""
    block = p.to_dict().get("checkpoint")
    if block is None:
        return
    stored = block["stored_bytes"]
    if not stored and not block["quantization"] and not block["per_op_bits"]:
        typer.echo(
            f"weights: unquantized, {block['format']} ({block['bits_per_weight']:.0f} bits per "
            f"parameter); bytes from {block['source']} of {p.model.source}",
            err=True,
        )
        return
    size = f"{stored / 1e9:.2f} GB stored" if stored else "size from the format"
    typer.echo(
        f"weights: {block['format']} ({block['quantization'] or 'as stored'}), "
        f"{block['mean_bits_per_weight']:.2f} bits per parameter, {size}; from "
        f"{block['source'] or 'the config'} of {p.model.source}"
        + (f"; assumed: {block['assumption']}" if block["assumption"] else "")
        + " (--weights overrides)",
        err=True,
    )


def _emit(predictions: list, fmt: str) -> None:
    # the report modules (pandas, rich tables) load only for the formats that need them
    def csv() -> str:
        from roofprof.report import ops_frame

        buf = io.StringIO()
        ops_frame(predictions).to_csv(buf, index=False)
        return buf.getvalue()

    def table() -> None:
        from roofprof.report import print_predictions

        print_predictions(predictions)

    emit(
        fmt,
        lambda: (
            predictions[0].to_dict()
            if len(predictions) == 1
            else {"sweep": [p.to_dict() for p in predictions]}
        ),
        table=table,
        csv=csv,
    )


def _emit_comparison(comparison, fmt: str) -> None:
    """The GPUs side by side: a table, a JSON list (one object per GPU and point) or CSV."""

    def csv() -> str:
        import csv as csv_mod

        rows = comparison.to_list()
        flat = []
        for r in rows:
            row = {k: v for k, v in r.items() if k not in ("memory", "vs_first", "warnings")}
            row["memory_fits"] = r["memory"]["fits"]
            row["memory_per_gpu_bytes"] = r["memory"]["per_gpu_bytes"]
            row["memory_capacity_bytes"] = r["memory"]["capacity_bytes"]
            row["max_batch"] = r["memory"]["max_batch"]
            row.update({f"vs_first_{k}": v for k, v in r["vs_first"].items()})
            flat.append(row)
        buf = io.StringIO()
        writer = csv_mod.DictWriter(buf, fieldnames=list(flat[0]))
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue()

    def table() -> None:
        from roofprof.report import print_gpu_comparison

        print_gpu_comparison(comparison)

    emit(fmt, comparison.to_list, table=table, csv=csv)
