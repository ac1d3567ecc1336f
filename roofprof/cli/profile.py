"""``roofprof profile``: measure every op of a Llama pass on this device (correctness first).

With ``--counters``, each op runs once under Nsight Compute instead (child process
``roofprof counters ops-pass``), for the hierarchical roofline and counters vs analytic counts.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from roofprof.cli import app
from roofprof.cli._console import progress_bar, show_warnings
from roofprof.cli._options import (
    MAX_BATCH,
    MAX_TOKENS,
    TableJsonCsv,
    check_int,
    check_output,
    check_seconds,
    counting,
    parse_int_list,
    resolve_dtype,
    split_list,
)
from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = ["profile", "profile_with_counters"]


@app.command()
def profile(
    model: str = typer.Option(
        "llama-3.2-1b",
        "--model",
        "-m",
        help="Model: shipped id, Hub id (org/name[@rev]), folder, .gguf or config.json.",
    ),
    phase: str = typer.Option("decode", "--phase", help="prefill | decode | both."),
    batch: str = typer.Option(
        "1", "--batch", "-b", help="Sequences per batch; a comma list sweeps (1,8,64,256)."
    ),
    prompt: int = typer.Option(128, "--prompt", "-p", help="Prompt tokens per sequence (prefill)."),
    context: str | None = typer.Option(
        None,
        "--context",
        "-c",
        help="Cached tokens at decode (default: the prompt); a comma list sweeps.",
    ),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (fp32 on a CPU, bf16 on a GPU) | fp32 | bf16 | fp16."
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda:N."),
    impl: str | None = typer.Option(
        None, "--impl", help="Comma list of implementations (default: all available)."
    ),
    roofline: str = typer.Option(
        "auto", "--roofline", help="roofline.json | auto (cached or quick-measured) | none."
    ),
    attention: str = typer.Option(
        "fused", "--attention", help="fused (SDPA) | unfused (eager: scores, softmax, PV)."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="torch/numba threads (use the same for validate)."
    ),
    budget: float = typer.Option(0.2, "--budget", help="Timed seconds per op and implementation."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the profile JSON here (a list for sweeps)."
    ),
    fmt: TableJsonCsv = typer.Option("table", "--format", "-f", help="table | json | csv."),
    counters: bool = typer.Option(
        False,
        "--counters",
        help="Run each op once under Nsight Compute (ncu): hierarchical roofline, counters vs "
        "analytic counts (--out is then a folder).",
    ),
    clock_control: str = typer.Option(
        "none", "--clock-control", help="ncu clock control with --counters: none (as run) | base."
    ),
    remeasure: bool = typer.Option(
        False,
        "--remeasure",
        help="Ignore cached measurements (profile always measures afresh and replaces them; "
        "accepted as for predict).",
    ),
) -> None:
    """Measure every op of a Llama pass on this device (correctness first) and place it on the
    roofline."""
    from roofprof.cache import RooflineChoice
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.specs import load_model
    from roofprof.workload import Scenario

    phases = {"both": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"]}.get(
        phase
    )
    if phases is None:
        raise ConfigError(f"unknown phase {phase!r}; valid choices: prefill, decode, both")
    check_int(prompt, "--prompt", 1, MAX_TOKENS)
    check_seconds(budget, "--budget")
    check_int(threads, "--threads", 1, 4096)
    batches = parse_int_list(batch, "--batch", 1, MAX_BATCH)
    contexts = parse_int_list(context, "--context", 0) if context else [None]
    counting_ = counting(attention)
    if counters:  # --out is the folder of the ncu files (a name with a suffix is not used)
        check_output(
            out if out is not None and Path(out).suffix == "" else None, "--out", folder=True
        )
    else:
        check_output(out, "--out")
    # the profiled kernels read dense weights at the dtype, not a checkpoint's stored format
    spec = dataclasses.replace(load_model(model), stored=None)
    dev, dtype = resolve_dtype(dtype, device)
    impls = split_list(impl)
    if counters:
        from roofprof.counters import find_ncu

        find_ncu()  # no ncu: exit 2 with how to install it, before anything runs
        if len(batches) > 1 or len(contexts) > 1:
            raise ConfigError("--counters profiles one batch and context at a time")
        profile_with_counters(
            model=model,
            phases=phases,
            batch=batches[0],
            prompt=prompt,
            context=contexts[0],
            dtype=dtype,
            device=device,
            attention=attention,
            impls=impls,
            out=out,
            clock_control=clock_control,
            fmt="json" if fmt == "json" else "table",
        )
        return
    results = []
    with progress_bar(sys.stderr.isatty()) as (progress, step):
        # profile measures afresh whether or not --remeasure is given (use_cache=False): its
        # measurements replace the cached ones that `predict --estimator measured` reuses
        prof = Profiler(
            dev,
            ProfileSettings(
                impls=tuple(impls) if impls else None,
                budget_s=budget,
                threads=threads,
                roofline=RooflineChoice(roofline),
                use_cache=False,
            ),
            model=spec,
            progress=progress,
        )
        for ph in phases:
            for b in batches:
                for c in contexts if ph == "decode" else [None]:
                    if step:
                        step(f"{ph} batch {b}" + (f" context {c}" if c is not None else ""))
                    results.append(prof.profile(Scenario(spec, ph, b, prompt, c, dtype, counting_)))
    if out is not None:
        from roofprof.results import write_json_atomic

        payload = (
            results[0].to_dict()
            if len(results) == 1
            else {"profiles": [r.to_dict() for r in results]}
        )
        write_json_atomic(out, payload)
    if fmt == "json":
        payload = (
            results[0].to_dict()
            if len(results) == 1
            else {"profiles": [r.to_dict() for r in results]}
        )
        sys.stdout.write(dumps_strict(payload) + "\n")
    elif fmt == "csv":
        import csv

        rows = [
            {
                "phase": r.workload.phase,
                "batch": r.workload.batch,
                "context_tokens": r.workload.context_tokens,
                **{k: v for k, v in o.to_dict().items() if k != "implementations"},
            }
            for r in results
            for o in r.ops
        ]
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    else:
        from roofprof.report import print_profiles

        print_profiles(results)
    if out is not None:
        typer.echo(f"profile written to {out}", err=True)


def profile_with_counters(
    *,
    model: str,
    phases: Sequence[str],
    batch: int,
    prompt: int,
    context: int | None,
    dtype: str,
    device: str,
    attention: str,
    impls: Sequence[str] | None,
    out: Path | None,
    clock_control: str,
    roofline: Any = None,
    fmt: str = "table",
) -> None:
    """`roofprof profile --counters`: every op of the pass once under ncu, hierarchical roofline,
    comparison."""
    from roofprof.counters.ops_pass import child_command, profile_counters
    from roofprof.report import print_counters_comparison

    out_dir = Path(out) if out is not None and Path(out).suffix == "" else Path("roofprof-counters")
    payloads = {}
    for phase in phases:
        folder = out_dir / phase
        manifest = folder / "manifest.json"
        child = child_command(
            model=model,
            phase=phase,
            batch=batch,
            prompt=prompt,
            context=context,
            dtype=dtype,
            device=device,
            attention=attention,
            impls=impls,
            manifest=manifest,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            payloads[phase] = profile_counters(
                child, manifest, folder, roofline=roofline, clock_control=clock_control
            )
        show_warnings(caught)
    if fmt == "json":
        typer.echo(dumps_strict(payloads))
        return
    print_counters_comparison(payloads, out_dir)
