"""``roofprof endpoint``: measure a live OpenAI-compatible server and place it on the roofline."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from roofprof.cli import app
from roofprof.cli._options import (
    MAX_BATCH,
    MAX_TOKENS,
    TableJson,
    check_int,
    check_seconds,
    parse_int_list,
)
from roofprof.errors import ConfigError

__all__ = ["endpoint"]


def _rates(text: str | None) -> list[float]:
    out = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise ConfigError(f"--rate must be positive requests/s (a comma list), got {part!r}")
        out.append(value)
    return out


def _extra(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"--extra must be a JSON object, e.g. '{{\"ignore_eos\": true}}': {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError("--extra must be a JSON object, e.g. '{\"ignore_eos\": true}'")
    return value


@app.command()
def endpoint(
    url: str = typer.Option(..., "--url", help="http(s)://HOST:PORT of the server (/v1 optional)."),
    api: str = typer.Option(
        "completions", "--api", help="completions (/v1/completions) | chat (/v1/chat/completions)."
    ),
    served_model: str | None = typer.Option(
        None, "--served-model", help="The model field sent (default: the first of /v1/models)."
    ),
    roofprof_model: str | None = typer.Option(
        None,
        "--roofprof-model",
        help="roofprof model id or config.json of the served model (default: the served id "
        "when it is one, or a local folder with a config.json).",
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", "-g", help="GPU id of the server (spec estimator)."
    ),
    roofline: Path | None = typer.Option(
        None, "--roofline", help="roofline.json of the server's machine (empirical estimator)."
    ),
    device: str | None = typer.Option(
        None, "--device", help="cpu: a server on this CPU (measured estimator, fp32)."
    ),
    estimator: str | None = typer.Option(
        None, "--estimator", help="spec | empirical | measured | calibrated (as in predict)."
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help="Precision served (default bf16; fp32 with --device cpu)."
    ),
    prompt: str = typer.Option(
        "16,2000,16000", "--prompt", "-p", help="Prompt tokens swept at concurrency 1 (comma list)."
    ),
    output_tokens: int = typer.Option(128, "--output-tokens", "-n", help="max_tokens per request."),
    concurrency: str = typer.Option(
        "1", "--concurrency", "-c", help="Concurrent streams (comma list, at the first prompt)."
    ),
    rate: str | None = typer.Option(
        None, "--rate", help="Poisson request rates, requests/s (comma list, at the first prompt)."
    ),
    requests: int | None = typer.Option(
        None, "--requests", help="Requests per level (default 4, or 2 × concurrency)."
    ),
    warmup: int = typer.Option(1, "--warmup", help="Uncounted requests before each level."),
    floor_requests: int = typer.Option(
        5, "--floor-requests", help="1-token requests for the network floor (0: none)."
    ),
    level_seconds: float = typer.Option(
        120.0, "--level-seconds", help="No request is sent after this long into a level."
    ),
    timeout: float = typer.Option(
        60.0, "--timeout", help="Longest wait for any byte of a response, seconds."
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", help="Bearer key (default: OPENAI_API_KEY); never printed or saved."
    ),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Tokenizer for exact prompt lengths (folder or hub id)."
    ),
    extra: str | None = typer.Option(
        None, "--extra", help="JSON fields added to every request, e.g. '{\"ignore_eos\": true}'."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Goodput SLOs in ms: ttft=500,tpot=50 (also e2el)."
    ),
    draw: int | None = typer.Option(
        None,
        "--draw",
        help="Random draw of the prompts and arrivals (default: a new one each run).",
    ),
    out: Path = typer.Option(
        Path("roofprof-endpoint"), "--out", "-o", help="Folder for endpoint.json/.csv/.html."
    ),
    no_html: bool = typer.Option(False, "--no-html", help="Skip the HTML report and charts."),
    fmt: TableJson = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """Measure TTFT, TPOT, ITL and throughput of a live OpenAI-compatible endpoint, and place
    them on the roofline of the same model and machine."""
    from roofprof.api import endpoint as measure_endpoint
    from roofprof.endpoint.metrics import parse_slo
    from roofprof.endpoint.report import payload, print_table, write_files
    from roofprof.results import check_writable_dir

    lengths = parse_int_list(prompt, "--prompt", 1, MAX_TOKENS)
    levels = parse_int_list(concurrency, "--concurrency", 1, MAX_BATCH)
    check_int(output_tokens, "--output-tokens", 1, MAX_TOKENS)
    check_int(requests, "--requests", 1, 1_000_000)
    check_int(warmup, "--warmup", 0, 1000)
    check_int(floor_requests, "--floor-requests", 0, 1000)
    check_seconds(level_seconds, "--level-seconds")
    check_seconds(timeout, "--timeout")
    slos = parse_slo(slo)
    folder = check_writable_dir(out)
    result = measure_endpoint(
        url,
        api=api,
        served_model=served_model,
        roofprof_model=roofprof_model,
        gpu=gpu,
        roofline=roofline,
        device=device,
        estimator=estimator,
        dtype=dtype,
        prompt_lengths=lengths,
        output_tokens=output_tokens,
        concurrency=levels,
        rates=_rates(rate),
        requests=requests,
        warmup=warmup,
        floor_requests=floor_requests,
        level_seconds=level_seconds,
        timeout_s=timeout,
        api_key=api_key,
        tokenizer=tokenizer,
        extra=_extra(extra),
        draw=draw,
    )
    data = payload(result, slos)
    written = write_files(data, folder, html=not no_html)
    if fmt == "json":
        from roofprof.units import dumps_strict

        typer.echo(dumps_strict(data))
    else:
        print_table(data)
    typer.echo(f"written: {', '.join(str(p) for p in written)}", err=True)
    if result.interrupted:
        typer.echo(
            f"the {sum(len(lv.requests) for lv in result.levels)} requests measured before "
            "Ctrl-C are in the files above",
            err=True,
        )
        raise typer.Exit(code=130)
