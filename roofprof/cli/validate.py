"""``roofprof validate``: a real model forward pass against each estimator's prediction."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._console import progress_bar
from roofprof.cli._options import (
    MAX_BATCH,
    MAX_TOKENS,
    TableJsonCsv,
    check_int,
    check_output,
    check_seconds,
    resolve_dtype,
    split_list,
)
from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = ["validate"]


@app.command()
def validate(
    model: str = typer.Option(
        "llama-3.2-1b",
        "--model",
        "-m",
        help="Model: shipped id, Hub id (org/name[@rev]), folder, .gguf or config.json.",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (fp32 on a CPU, bf16 on a GPU) | fp32 | bf16 | fp16."
    ),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per batch."),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence."),
    steps: int = typer.Option(8, "--steps", help="Timed decode steps (after 2 warm-up steps)."),
    repeats: int = typer.Option(3, "--repeats", help="Timed prefills (after one warm-up)."),
    backend: str = typer.Option(
        "auto",
        "--backend",
        help="auto (transformers if installed; deepseek_v3: plain "
        "torch, the counted MLA form) | hf | torch.",
    ),
    attention: str = typer.Option("fused", "--attention", help="fused (SDPA) | unfused (eager)."),
    threads: int | None = typer.Option(
        None, "--threads", help="torch threads (same as for profile)."
    ),
    max_layers: int | None = typer.Option(
        None, "--max-layers", help="Run at most this many layers (scaled, stated)."
    ),
    roofline: str = typer.Option(
        "auto", "--roofline", help="roofline.json | auto | none (for empirical/measured)."
    ),
    estimators: str | None = typer.Option(
        None,
        "--estimators",
        "--estimator",
        help="Comma list to compare: spec, empirical, measured (default: all three); with "
        "--published: spec, empirical, calibrated (default: all three).",
    ),
    budget: float = typer.Option(
        0.2, "--budget", help="Timed seconds per op for the measured estimator."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the validation JSON here."),
    fmt: TableJsonCsv = typer.Option(
        "table", "--format", "-f", help="table | json (| csv with --published)."
    ),
    published: bool = typer.Option(
        False,
        "--published",
        help="No device: hold every prediction against the published measurements "
        "(data/published/), with residuals and MBU/MFU.",
    ),
    gpu: str | None = typer.Option(None, "--gpu", help="With --published: only this GPU's rows."),
    engine: str | None = typer.Option(
        None, "--engine", help="With --published: only this engine's rows."
    ),
    phase: str | None = typer.Option(
        None, "--phase", help="With --published: decode | prefill | offline | batched."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="With --published: write predicted vs published (log-log) here."
    ),
    tp: int | None = typer.Option(
        None,
        "--tp",
        help="Run a real tensor-parallel Llama on this many local ranks (gloo on --device cpu) "
        "against the measured estimator plus measured collectives.",
    ),
    rank_profile: str = typer.Option(
        "together",
        "--rank-profile",
        help="With --tp: profile the per-rank ops on every rank at once, sharing the host as "
        "the real run does (together), or in one process alone (alone).",
    ),
) -> None:
    """Run a real model forward pass (prefill + decode) on the device and report each
    estimator's residual; or, with --published, hold the predictions against published
    real measurements."""
    if published:
        _published(estimators, gpu, engine, phase, fmt, out, plot)
        return
    if fmt == "csv":
        raise ConfigError("--format csv needs --published")
    if tp is not None:
        check_int(tp, "--tp", 2, 4096)
    check_int(batch, "--batch", 1, MAX_BATCH)
    check_int(prompt, "--prompt", 1, MAX_TOKENS)
    check_int(steps, "--steps", 1, 100_000)
    check_int(repeats, "--repeats", 1, 10_000)
    check_int(threads, "--threads", 1, 4096)
    check_int(max_layers, "--max-layers", 1, 100_000)
    check_seconds(budget, "--budget")
    check_output(out, "--out")
    if tp is not None:
        _tensor_parallel(
            model,
            device,
            dtype,
            batch,
            prompt,
            steps,
            repeats,
            max_layers,
            threads,
            roofline,
            estimators,
            budget,
            out,
            fmt,
            tp,
            attention,
            backend,
            rank_profile,
        )
        return
    from roofprof.api import validate as run_validation

    wanted = split_list(estimators or "spec,empirical,measured") or []
    bad = [w for w in wanted if w not in ("spec", "empirical", "measured")]
    if bad:
        raise ConfigError(f"unknown estimator {bad[0]!r}; valid choices: spec, empirical, measured")
    dev, dtype = resolve_dtype(dtype, device)
    with progress_bar(sys.stderr.isatty()) as (progress, step):
        if step:
            step("real model")
        result = run_validation(
            model,
            device=dev,
            dtype=dtype,
            batch=batch,
            prompt_tokens=prompt,
            decode_steps=steps,
            prefill_repeats=repeats,
            attention=attention,
            backend=backend,
            threads=threads,
            max_layers=max_layers,
            progress=progress,
        )
        if wanted:
            if step:
                step("estimators")
            result = _predictions(result, dev, wanted, roofline, budget, threads, progress)
    from roofprof.units import clean

    payload = clean(result.to_dict())
    if out is not None:
        from roofprof.results import write_json_atomic

        write_json_atomic(out, payload)
    if fmt == "json":
        sys.stdout.write(dumps_strict(payload) + "\n")
    else:
        from roofprof.report import print_validation

        print_validation(result)
        skipped = [w for w in wanted if w not in result.predictions]
        for w in skipped:
            typer.echo(f"{w}: not available on this device", err=True)
    if out is not None:
        typer.echo(f"validation written to {out}", err=True)


def _published(estimators, gpu, engine, phase, fmt, out, plot) -> None:
    from roofprof.prediction.calibration import ENGINES
    from roofprof.published import validate_published
    from roofprof.report.published import (
        print_published_validation,
        published_validation_csv,
    )
    from roofprof.units import clean

    wanted = split_list(estimators or "spec,empirical,calibrated") or []
    if engine is not None and engine not in ENGINES:
        from roofprof.errors import UnknownNameError

        raise UnknownNameError("engine", engine, ENGINES)
    result = validate_published(wanted, gpu=gpu, engine=engine, phase=phase)
    payload = clean(result.to_dict())
    if out is not None:
        from roofprof.results import write_json_atomic

        write_json_atomic(out, payload)
    if fmt == "json":
        sys.stdout.write(dumps_strict(payload) + "\n")
    elif fmt == "csv":
        sys.stdout.write(published_validation_csv(result))
    else:
        print_published_validation(result)
    if plot is not None:
        from roofprof.plots.published import plot_published

        est = "calibrated" if "calibrated" in wanted else wanted[-1]
        plot_published(result, plot, estimator=est)
        typer.echo(f"plot written to {plot}", err=True)
    if out is not None:
        typer.echo(f"validation written to {out}", err=True)


def _predictions(result, dev, wanted, roofline, budget, threads, progress):
    from roofprof.cache import RooflineChoice
    from roofprof.profiling.measured import estimators_for
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.validation.model_run import predict_validated

    prof = None
    if "empirical" in wanted or "measured" in wanted:
        prof = Profiler(
            dev,
            ProfileSettings(budget_s=budget, threads=threads, roofline=RooflineChoice(roofline)),
            model=result.model,
            progress=progress,
        )
    ests, _ = estimators_for(dev, prof, wanted=wanted)
    return predict_validated(result, ests)


def _tensor_parallel(
    model,
    device,
    dtype,
    batch,
    prompt,
    steps,
    repeats,
    max_layers,
    threads,
    roofline,
    estimators,
    budget,
    out,
    fmt,
    tp,
    attention,
    backend,
    rank_profile="together",
) -> None:
    from roofprof.distributed.tp_validate import validate_tp
    from roofprof.units import clean

    wanted = split_list(estimators or "measured") or []
    if any(w != "measured" for w in wanted):
        raise ConfigError("--tp compares the measured estimator only (--estimators measured)")
    if attention != "fused" or backend not in ("auto", "torch"):
        raise ConfigError(
            "--tp runs the plain-torch Llama with SDPA attention "
            "(--backend torch, --attention fused)"
        )
    _, dtype = resolve_dtype(dtype, device)
    result = validate_tp(
        model,
        tp=tp,
        device=device,
        dtype=dtype,
        batch=batch,
        prompt_tokens=prompt,
        decode_steps=steps,
        prefill_repeats=repeats,
        max_layers=max_layers,
        threads=threads,
        roofline=roofline if roofline != "auto" else "none",
        budget_s=budget,
        estimators=bool(wanted),
        profile_ranks=rank_profile,
    )
    payload = clean(result.to_dict())
    if out is not None:
        from roofprof.results import write_json_atomic

        write_json_atomic(out, payload)
    if fmt == "json":
        sys.stdout.write(dumps_strict(payload) + "\n")
    else:
        from rich.console import Console

        from roofprof.report.tables import comparison_table

        console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        r = result.real
        console.print(
            f"tensor parallel {result.tp} ranks, {result.model.id} "
            f"({result.model.num_layers} layers), {result.dtype}, "
            f"{result.threads_per_rank} thread(s) per rank; logits match the single-rank "
            f"model (max |diff| {result.max_abs_logit_diff:.2e})"
        )
        console.print(
            f"prefill {r.batch}×{r.prompt_tokens}: {r.prefill_s * 1e3:.2f} ms; "
            "decode step "
            f"at {r.context_tokens} cached: {r.decode_s * 1e3:.2f} ms"
        )
        if result.predictions:
            console.print(comparison_table(result.comparison()))
        for note in result.notes:
            console.print(f"note: {note}")
    if out is not None:
        typer.echo(f"validation written to {out}", err=True)
