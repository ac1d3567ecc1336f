"""``roofprof predict``: analytical predictions from a roofline, no hardware needed."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._console import collected_warnings, show_warnings
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
from roofprof.errors import ConfigError
from roofprof.units import dumps_strict

__all__ = ["predict"]


@app.command()
def predict(
    model: str = typer.Option(
        "llama-3.1-8b",
        "--model",
        "-m",
        help="Model id (see `roofprof specs`) or path to a HF config.json.",
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", "-g", help="GPU id or alias from the spec database (spec estimator)."
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
        "| seed (2·P·T counting).",
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
        help="With --estimator measured: measure every op afresh, ignoring cached measurements "
        "(e.g. ones taken on a busy machine).",
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
    import dataclasses

    from roofprof import rollup
    from roofprof.workload import CONVENTIONS

    check_int(prompt, "--prompt", 1, MAX_TOKENS)
    check_output(plot, "--plot", suffixes=PLOT_SUFFIXES)
    batches = parse_int_list(batch, "--batch", 1, MAX_BATCH)
    contexts = parse_int_list(context, "--context", 0) if context else [None]
    if convention not in CONVENTIONS:
        raise ConfigError(
            f"unknown convention {convention!r}; valid choices: {', '.join(CONVENTIONS)}"
        )
    counting = CONVENTIONS[convention]
    if attention is not None:
        if attention not in ("fused", "unfused"):
            raise ConfigError(
                f"unknown attention counting {attention!r}; valid choices: fused, unfused"
            )
        counting = dataclasses.replace(counting, attention=attention)
    from roofprof.precision import kv_bytes, weight_format

    if weights is not None:
        weight_format(weights)
    if kv_dtype is not None:
        kv_bytes(kv_dtype)
    model_arg = _model_with_routing(model, routing)
    explicit = tp is not None or pp is not None
    layout = parallel_layout(1 if tp is None else tp, 1 if pp is None else pp, sequence_parallel)
    kwargs = dict(
        prompt_tokens=prompt, dtype=dtype, convention=counting, weights=weights, kv_dtype=kv_dtype
    )
    with collected_warnings() as caught:
        if explicit or collectives is not None:
            kwargs.update(
                _layout_args(
                    model_arg,
                    gpu,
                    layout,
                    collectives,
                    ignore_memory,
                    batches,
                    contexts,
                    kwargs,
                    estimator,
                    engine,
                )
            )
        kwargs.update(
            _estimator_args(estimator, gpu, roofline, device, model, dtype, remeasure, engine)
        )
        predictions = rollup.sweep(model_arg, batches=batches, contexts=contexts, **kwargs)
        if explicit:
            from roofprof.parallel_report import extras

            predictions = [dataclasses.replace(p, extras=extras(p, gpu)) for p in predictions]
        from roofprof.models import config_fields

        predictions = [
            dataclasses.replace(p, extras={**p.extras, **config_fields(p.model)})
            for p in predictions
        ]
        predictions = _with_moe(predictions, model_arg, fmt)
        if plot is not None:
            from roofprof.plots.roofline import plot_prediction

            plot_prediction(predictions[0], plot)
    _emit(predictions, fmt)
    # the table ends with the first prediction's warnings: those are not printed twice
    show_warnings(caught, shown=predictions[0].warnings if fmt == "table" else ())
    if plot is not None:
        typer.echo(f"roofline plot written to {plot}", err=True)


def _model_with_routing(model: str, routing: str | None):
    """The model as loaded, with ``--routing`` applied to its experts (exit 2 on a dense one)."""
    import dataclasses

    from roofprof.specs import load_model

    spec = load_model(model)
    if routing is None:
        return spec
    if spec.moe is None:
        raise ConfigError(
            f"--routing applies to mixture-of-experts models; {spec.id} has no experts"
        )
    from roofprof.models.moe import parse_routing

    chosen = parse_routing(routing)
    chosen.inclusion(spec.moe.experts, spec.moe.experts_per_token)  # measured loads: one per expert
    return dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, routing=chosen))


def _with_moe(predictions, spec, fmt: str) -> list:
    """Each prediction with the ``moe`` block (total/active parameters, experts touched)."""
    if spec.moe is None and spec.mla is None and spec.pattern is None:
        return predictions
    import dataclasses

    from roofprof.models.moe import summary

    out = []
    for p in predictions:
        pf, dc = p.prefill.workload, p.decode.workload
        block = summary(
            spec, pf.tokens, dc.tokens, dc.scenario.kv_bytes_per_element, dc.context_tokens
        )
        out.append(dataclasses.replace(p, extras={**p.extras, "moe": block}))
        if fmt == "table" and spec.moe is not None:
            typer.echo(
                f"mixture of experts: {block['routing']}; decode batch {dc.batch} reads "
                f"{block['decode']['experts_touched_per_layer']:.2f} of {block['experts']} "
                f"experts per layer; {block['active_params'] / 1e9:.2f} B of "
                f"{block['total_params'] / 1e9:.2f} B parameters active per token",
                err=True,
            )
    return out


def _layout_args(
    model, gpu, layout, collectives, ignore_memory, batches, contexts, kwargs, estimator, engine
) -> dict:
    """``parallel`` and ``collectives`` for the sweep; a layout that does not fit: exit 2."""
    from roofprof.collectives import CollectiveModel, load_collectives
    from roofprof.memory_fit import fit, smallest_tp
    from roofprof.units import fmt_bytes
    from roofprof.workload import Scenario

    if gpu is None:
        raise ConfigError("--tp/--pp/--collectives need --gpu (its interconnect and memory)")
    for b in batches:
        for c in contexts:
            s = Scenario.of(
                model,
                "decode",
                batch=b,
                context_tokens=c,
                parallel=layout,
                **{k: kwargs[k] for k in ("prompt_tokens", "dtype", "weights", "kv_dtype")},
            )
            f = fit(s, gpu)
            if not f.fits and not ignore_memory:
                best = smallest_tp(s, gpu)
                hint = f"the smallest TP that fits is {best}" if best else "no TP up to 64 fits"
                raise ConfigError(
                    f"{s.model.id} at TP {layout.tp} PP {layout.pp}, batch {b}, context "
                    f"{s.context_tokens} needs {fmt_bytes(f.per_gpu_bytes)} per GPU; {gpu} has "
                    f"{fmt_bytes(f.capacity_bytes)}: {hint} (largest batch at this layout: "
                    f"{f.max_batch}); --ignore-memory predicts anyway"
                )
    from roofprof.calibration import CUDA_GRAPHS

    graphs = estimator == "calibrated" and CUDA_GRAPHS.get(engine, False) and engine != "ideal"
    table = load_collectives(collectives) if collectives is not None else None
    return {
        "parallel": layout,
        "collectives": CollectiveModel.for_gpu(gpu, table=table, graphs=graphs),
    }


def _estimator_args(
    estimator, gpu, roofline, device, model, dtype, remeasure=False, engine="ideal"
) -> dict:
    from roofprof.roofline import load_roofline

    name = estimator or ("empirical" if roofline is not None and gpu is None else "spec")
    if engine != "ideal" and name != "calibrated":
        raise ConfigError("--engine applies to --estimator calibrated only")
    if name == "calibrated":
        from roofprof.calibration import calibrated_estimator

        if gpu is None and roofline is None:
            raise ConfigError("the calibrated estimator needs --gpu (or --roofline roofline.json)")
        measured = load_roofline(roofline) if roofline else None
        return {"estimator": calibrated_estimator(gpu, engine=engine, roofline=measured)}
    if name == "empirical" and roofline is None and gpu is not None:
        from roofprof.published import published_roofline
        from roofprof.rollup import RooflineEstimator

        roof = published_roofline(gpu)
        note = (
            f"empirical: no --roofline given; using the published ceilings of {gpu} "
            f"(`roofprof roofline --published {gpu}`)"
        )
        warnings.warn(note, stacklevel=2)  # printed once: in the table, else on stderr
        return {
            "estimator": RooflineEstimator(
                roof, name="empirical", source="published ceilings", warnings=(note,)
            ),
            "gpu": gpu,
        }
    if name == "spec":
        if gpu is None:
            raise ConfigError("the spec estimator needs --gpu (see `roofprof specs` for the ids)")
        return {"gpu": gpu}
    if name == "empirical":
        if roofline is None:
            raise ConfigError(
                "the empirical estimator needs --roofline roofline.json "
                "(from `roofprof roofline`), or --gpu ID of a GPU with published "
                "ceilings"
            )
        return {"roofline": load_roofline(roofline)}
    if name == "measured":
        from roofprof.profiling import measured_estimator

        return {
            "estimator": measured_estimator(
                model=model, device=device, dtype=dtype, roofline=roofline, use_cache=not remeasure
            )
        }
    raise ConfigError(
        f"unknown estimator {name!r}; valid choices: spec, empirical, measured, calibrated"
    )


def _emit(predictions, fmt: str) -> None:
    if fmt == "json":
        payload = (
            predictions[0].to_dict()
            if len(predictions) == 1
            else {"sweep": [p.to_dict() for p in predictions]}
        )
        sys.stdout.write(dumps_strict(payload) + "\n")
    elif fmt == "csv":
        from roofprof.report import ops_frame

        ops_frame(predictions).to_csv(sys.stdout, index=False)
    else:
        from roofprof.report import print_predictions

        print_predictions(predictions)
