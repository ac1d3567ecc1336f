"""``roofprof profile``, ``roofprof validate`` and ``roofprof run``: thin wiring with progress."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.errors import ConfigError

FORMATS = ("table", "json", "csv")


def _ints(text: str, what: str, minimum: int) -> list[int]:
    from roofprof.cli.predict import parse_int_list

    return parse_int_list(text, what, minimum)


def _counting(attention: str):
    from roofprof.workload import Counting

    if attention not in ("fused", "unfused"):
        raise ConfigError(f"unknown attention {attention!r}; valid choices: fused, unfused")
    return Counting(attention=attention)


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False)


@contextlib.contextmanager
def _progress(enabled: bool = True):
    """A rich progress bar on stderr; yields ``(progress(label, done, total), step(name))``."""
    if not enabled:
        yield None, None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _stderr_console()
    with Progress(TextColumn("[bold]{task.fields[step]}[/]"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("", total=1, step="")
        current = {"step": ""}

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=max(total, 1), step=current["step"])

        def step(name: str) -> None:
            current["step"] = name
            bar.update(task, description="", completed=0, total=1, step=name)
            console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] step: [bold]{name}[/]")

        yield progress, step


def _dtype(dtype: str, device):
    from roofprof.profiling import select_device

    dev = select_device(device)
    return dev, (dev.info.default_dtype if dtype == "auto" else dtype)


@app.command()
def profile(
    model: str = typer.Option("llama-3.2-1b", "--model", "-m", help="Model id or HF config.json path."),
    phase: str = typer.Option("decode", "--phase", help="prefill | decode | both."),
    batch: str = typer.Option("1", "--batch", "-b", help="Sequences per batch; a comma list sweeps (1,8,64,256)."),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence (prefill)."),
    context: str | None = typer.Option(None, "--context", "-c", help="Cached tokens at decode (default: the prompt); a comma list sweeps."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (fp32 on a CPU, bf16 on a GPU) | fp32 | bf16 | fp16."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    impl: str | None = typer.Option(None, "--impl", help="Comma list of implementations (default: all available)."),
    roofline: str = typer.Option("auto", "--roofline", help="roofline.json | auto (cached or quick-measured) | none."),
    attention: str = typer.Option("fused", "--attention", help="fused (SDPA) | unfused (eager: scores, softmax, PV)."),
    threads: int | None = typer.Option(None, "--threads", help="torch/numba threads (use the same for validate)."),
    budget: float = typer.Option(0.2, "--budget", help="Timed seconds per op and implementation."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the profile JSON here (a list for sweeps)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json | csv."),
    counters: bool = typer.Option(False, "--counters", help="Run each op once under Nsight Compute (ncu): hierarchical roofline, counters vs analytic counts (--out is then a folder)."),
    clock_control: str = typer.Option("none", "--clock-control", help="ncu clock control with --counters: none (as run) | base."),
    remeasure: bool = typer.Option(False, "--remeasure", help="Ignore cached measurements (profile always measures afresh and replaces them; accepted as for predict)."),
) -> None:
    """Measure every op of a Llama pass on this device (correctness first) and place it on the roofline."""
    from roofprof.profiling import Profiler
    from roofprof.specs import load_model
    from roofprof.workload import Scenario

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    phases = {"both": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"]}.get(phase)
    if phases is None:
        raise ConfigError(f"unknown phase {phase!r}; valid choices: prefill, decode, both")
    if prompt < 1:
        raise ConfigError(f"--prompt must be at least 1, got {prompt}")
    batches = _ints(batch, "--batch", 1)
    contexts = _ints(context, "--context", 0) if context else [None]
    counting = _counting(attention)
    spec = load_model(model)
    dev, dtype = _dtype(dtype, device)
    impls = [s.strip() for s in impl.split(",")] if impl else None
    if counters:
        from roofprof.cli.counters import profile_with_counters
        from roofprof.counters import find_ncu

        find_ncu()  # no ncu: exit 2 with how to install it, before anything runs
        if len(batches) > 1 or len(contexts) > 1:
            raise ConfigError("--counters profiles one batch and context at a time")
        profile_with_counters(model=model, phases=phases, batch=batches[0], prompt=prompt, context=contexts[0],
                              dtype=dtype, device=device, attention=attention, impls=impls, out=out,
                              clock_control=clock_control, fmt="json" if fmt == "json" else "table")
        return
    results = []
    with _progress(sys.stderr.isatty()) as (progress, step):
        # profile measures afresh whether or not --remeasure is given (use_cache=False): its
        # measurements replace the cached ones that `predict --estimator measured` reuses
        prof = Profiler(spec, dev, impls=impls, budget_s=budget, threads=threads, roofline=roofline,
                        use_cache=False, progress=progress)
        for ph in phases:
            for b in batches:
                for c in (contexts if ph == "decode" else [None]):
                    if step:
                        step(f"{ph} batch {b}" + (f" context {c}" if c is not None else ""))
                    results.append(prof.profile(Scenario(spec, ph, b, prompt, c, dtype, counting)))
    if out is not None:
        from roofprof.report import clean
        from roofprof.results import write_json_atomic

        payload = clean(results[0].to_dict() if len(results) == 1 else {"profiles": [r.to_dict() for r in results]})
        write_json_atomic(out, payload)
    if fmt == "json":
        from roofprof.report import clean

        payload = results[0].to_dict() if len(results) == 1 else {"profiles": [r.to_dict() for r in results]}
        sys.stdout.write(json.dumps(clean(payload), indent=2) + "\n")
    elif fmt == "csv":
        import csv

        rows = [{"phase": r.workload.phase, "batch": r.workload.batch, "context_tokens": r.workload.context_tokens,
                 **{k: v for k, v in o.to_dict().items() if k != "implementations"}} for r in results for o in r.ops]
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    else:
        from roofprof.report import print_profiles

        print_profiles(results)
    if out is not None:
        typer.echo(f"profile written to {out}", err=True)


@app.command()
def validate(
    model: str = typer.Option("llama-3.2-1b", "--model", "-m", help="Model id or HF config.json path."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (fp32 on a CPU, bf16 on a GPU) | fp32 | bf16 | fp16."),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences per batch."),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence."),
    steps: int = typer.Option(8, "--steps", help="Timed decode steps (after 2 warm-up steps)."),
    repeats: int = typer.Option(3, "--repeats", help="Timed prefills (after one warm-up)."),
    backend: str = typer.Option("auto", "--backend", help="auto (transformers if installed) | hf | torch."),
    attention: str = typer.Option("fused", "--attention", help="fused (SDPA) | unfused (eager)."),
    threads: int | None = typer.Option(None, "--threads", help="torch threads (same as for profile)."),
    max_layers: int | None = typer.Option(None, "--max-layers", help="Run at most this many layers (scaled, stated)."),
    roofline: str = typer.Option("auto", "--roofline", help="roofline.json | auto | none (for empirical/measured)."),
    estimators: str = typer.Option("spec,empirical,measured", "--estimators", help="Comma list to compare: spec, empirical, measured."),
    budget: float = typer.Option(0.2, "--budget", help="Timed seconds per op for the measured estimator."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the validation JSON here."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """Run a real Llama forward pass (prefill + decode) on the device and report each estimator's residual."""
    from roofprof.validation import validate as run_validation

    if fmt not in ("table", "json"):
        raise ConfigError(f"unknown format {fmt!r}; valid choices: table, json")
    wanted = [s.strip() for s in estimators.split(",") if s.strip()]
    bad = [w for w in wanted if w not in ("spec", "empirical", "measured")]
    if bad:
        raise ConfigError(f"unknown estimator {bad[0]!r}; valid choices: spec, empirical, measured")
    dev, dtype = _dtype(dtype, device)
    with _progress(sys.stderr.isatty()) as (progress, step):
        if step:
            step("real model")
        result = run_validation(model, device=dev, dtype=dtype, batch=batch, prompt_tokens=prompt, decode_steps=steps,
                                prefill_repeats=repeats, attention=attention, backend=backend, threads=threads,
                                max_layers=max_layers, progress=progress)
        if wanted:
            if step:
                step("estimators")
            result = result.with_predictions(_predictions(result, dev, wanted, roofline, budget, threads, progress))
    from roofprof.report import clean

    payload = clean(result.to_dict())
    if out is not None:
        from roofprof.results import write_json_atomic

        write_json_atomic(out, payload)
    if fmt == "json":
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        from roofprof.report import print_validation

        print_validation(result)
        skipped = [w for w in wanted if w not in result.predictions]
        for w in skipped:
            typer.echo(f"{w}: not available on this device", err=True)
    if out is not None:
        typer.echo(f"validation written to {out}", err=True)


def _predictions(result, dev, wanted, roofline, budget, threads, progress):
    from roofprof.profiling import Profiler, estimators_for
    from roofprof.validation import predict_for

    prof = None
    if "empirical" in wanted or "measured" in wanted:
        prof = Profiler(result.model, dev, budget_s=budget, threads=threads, roofline=roofline, progress=progress)
    ests, _ = estimators_for(dev, prof, wanted=wanted)
    return predict_for(result, ests)


@app.command("run")
def run_command(
    model: str = typer.Option("auto", "--model", "-m", help="auto (Llama 3.2 1B fp32 on a CPU, 3.1 8B bf16 on a GPU), an id or a config path."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | fp32 | bf16 | fp16."),
    out: Path = typer.Option(Path("roofprof-report"), "--out", "-o", help="Output folder (index.html, report.json, CSVs)."),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence."),
    batch: int = typer.Option(1, "--batch", "-b", help="Batch of the validated run."),
    batches: str = typer.Option("1,8,64,256", "--batch-sweep", help="Decode batch sweep."),
    contexts: str | None = typer.Option(None, "--context-sweep", help="Decode context sweep (default: 1×, 4×, 32× the prompt)."),
    full: bool = typer.Option(False, "--full", help="Full roofline probes instead of the quick plan."),
    roofline: Path | None = typer.Option(None, "--roofline", help="Use this roofline.json instead of measuring."),
    threads: int | None = typer.Option(None, "--threads", help="torch/numba threads for profile and validation."),
    budget: float = typer.Option(0.15, "--budget", help="Timed seconds per op and implementation."),
    steps: int = typer.Option(8, "--steps", help="Timed decode steps of the real run."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Skip the real model run."),
    backend: str = typer.Option("auto", "--backend", help="Real model: auto | hf | torch."),
    attention: str = typer.Option("fused", "--attention", help="fused (SDPA) | unfused (eager)."),
    impl: str | None = typer.Option(None, "--impl", help="Comma list of implementations (default: all)."),
) -> None:
    """The main job: doctor → roofline → profile → predictions → validation → HTML report."""
    from roofprof.run import run

    if prompt < 1:
        raise ConfigError(f"--prompt must be at least 1, got {prompt}")
    _counting(attention)
    batch_list = _ints(batches, "--batch-sweep", 1)
    context_list = _ints(contexts, "--context-sweep", 0) if contexts else None
    impls = [s.strip() for s in impl.split(",")] if impl else None
    with _progress(True) as (progress, step):
        result = run(model, device=device, dtype=None if dtype == "auto" else dtype, out=out, batch=batch,
                     prompt_tokens=prompt, batches=batch_list, contexts=context_list, quick=not full, roofline=roofline,
                     threads=threads, budget_s=budget, decode_steps=steps, validate=not no_validate, backend=backend,
                     attention=attention, impls=impls, progress=progress, step=step)
    from roofprof.report import print_run_summary

    print_run_summary(result)
