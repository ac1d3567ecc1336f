"""``roofprof run``: the main job, from doctor to HTML report (see :func:`roofprof.job.run`)."""

from __future__ import annotations

from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._console import progress_bar
from roofprof.cli._options import (
    MAX_BATCH,
    MAX_TOKENS,
    check_int,
    check_output,
    check_seconds,
    counting,
    parse_int_list,
    split_list,
)

__all__ = ["run_command"]


@app.command("run")
def run_command(
    model: str = typer.Option(
        "auto",
        "--model",
        "-m",
        help="auto (Llama 3.2 1B fp32 on a CPU, 3.1 8B bf16 on a GPU), an id, a Hub id, "
        "a folder, a .gguf or a config path.",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | fp32 | bf16 | fp16."),
    out: Path = typer.Option(
        Path("roofprof-report"),
        "--out",
        "-o",
        help="Output folder (index.html, report.json, CSVs).",
    ),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence."),
    batch: int = typer.Option(1, "--batch", "-b", help="Batch of the validated run."),
    batches: str = typer.Option("1,8,64,256", "--batch-sweep", help="Decode batch sweep."),
    contexts: str | None = typer.Option(
        None, "--context-sweep", help="Decode context sweep (default: 1×, 4×, 32× the prompt)."
    ),
    full: bool = typer.Option(
        False, "--full", help="Full roofline probes instead of the quick plan."
    ),
    roofline: Path | None = typer.Option(
        None, "--roofline", help="Use this roofline.json instead of measuring."
    ),
    fresh_roofline: bool = typer.Option(
        False,
        "--fresh-roofline",
        help="Measure the roofline even when this setup's cached one is under an hour old.",
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="torch/numba threads for profile and validation."
    ),
    budget: float = typer.Option(0.15, "--budget", help="Timed seconds per op and implementation."),
    steps: int = typer.Option(8, "--steps", help="Timed decode steps of the real run."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Skip the real model run."),
    backend: str = typer.Option("auto", "--backend", help="Real model: auto | hf | torch."),
    attention: str = typer.Option("fused", "--attention", help="fused (SDPA) | unfused (eager)."),
    impl: str | None = typer.Option(
        None, "--impl", help="Comma list of implementations (default: all)."
    ),
) -> None:
    """The main job: doctor → roofline → profile → predictions → validation → HTML
    report."""
    from roofprof.job import RunPlan, run

    check_int(prompt, "--prompt", 1, MAX_TOKENS)
    check_int(batch, "--batch", 1, MAX_BATCH)
    check_int(steps, "--steps", 1, 100_000)
    check_int(threads, "--threads", 1, 4096)
    check_seconds(budget, "--budget")
    check_output(out, "--out", folder=True, inside=("index.html", "report.json"))
    counting(attention)
    batch_list = parse_int_list(batches, "--batch-sweep", 1, MAX_BATCH)
    context_list = parse_int_list(contexts, "--context-sweep", 0) if contexts else None
    impls = split_list(impl)
    # the plan first: a bad model, device or dtype is refused before any progress is drawn
    plan = RunPlan.of(
        model,
        device=device,
        dtype=None if dtype == "auto" else dtype,
        out=out,
        batch=batch,
        prompt_tokens=prompt,
        batches=batch_list,
        contexts=context_list,
        quick=not full,
        roofline=roofline,
        reuse_roofline_s=0.0 if fresh_roofline else 3600.0,
        threads=threads,
        budget_s=budget,
        decode_steps=steps,
        validate=not no_validate,
        backend=backend,
        attention=attention,
        impls=impls,
    )
    with progress_bar(True) as (progress, step):
        result = run(plan, progress=progress, step=step)
    from roofprof.report import print_run_summary

    print_run_summary(result)
