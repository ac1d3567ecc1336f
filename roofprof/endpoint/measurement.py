"""One ``roofprof endpoint`` run, end to end: the served model, the prompts, the sweep, the
roofline.

:func:`measure_and_place` asks the server which model it serves (``/v1/models``), finds the
roofprof model for it (:func:`~roofprof.endpoint.placement.roofprof_model_for`), caps the
prompt lengths by the context, picks the exact-length prompt source (the server's
``/tokenize``, else the model's tokenizer, else approximate words), runs the sweep
(:func:`~roofprof.endpoint.protocol.measure`) and places it on the roofline through an
injected predictor. :func:`roofprof.api.endpoint` is its loose-argument door: it turns a GPU,
a roofline file or ``--device cpu`` into that predictor.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roofprof.endpoint.client import HttpStatusError, Target, get_json, post_json
from roofprof.endpoint.placement import Predictor, place, roofprof_model_for
from roofprof.endpoint.prompts import ServerTokenizer, prompt_source
from roofprof.endpoint.protocol import (
    DEFAULT_PROMPTS,
    Connection,
    SweepPlan,
    capped_prompts,
    measure,
)
from roofprof.endpoint.records import EndpointResult
from roofprof.errors import ConfigError, RoofprofError

__all__ = ["PredictorFor", "measure_and_place", "served_model"]

#: ``predictor_for(roofprof_model)`` → the :data:`~roofprof.endpoint.placement.Predictor` of
#: that model on the user's GPU, roofline or CPU.
PredictorFor = Callable[[str], Predictor]

NOT_PLACED = "not placed on a roofline: give --gpu, --roofline or --device cpu"


def served_model(target: Target, wanted: str | None) -> tuple[str, int | None]:
    """The model id to send (``wanted``, else the first of ``/v1/models``) and its context
    length when the server lists one (``max_model_len``, vLLM), else None.

    Raises:
        HttpStatusError: ``/v1/models`` answers 401 or 403 (a missing or wrong key).
        ConfigError: no ``wanted`` and the server lists no model.
    """
    try:
        listed = get_json(target, "models").get("data") or []
    except HttpStatusError as exc:
        if exc.status in (401, 403):  # a key is missing or wrong: say so, not "no model"
            raise
        listed = []
    except AttributeError:
        listed = []
    ids = [m.get("id") for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
    model = wanted or (ids[0] if ids else None)
    if not model:
        raise ConfigError(f"{target.url}/v1/models names no model; give --served-model NAME")
    context = None
    for m in listed:
        if isinstance(m, dict) and m.get("id") == model and isinstance(m.get("max_model_len"), int):
            context = m["max_model_len"]
    return model, context


def measure_and_place(
    url: str,
    *,
    predictor_for: PredictorFor | None = None,
    api: str = "completions",
    served: str | None = None,
    roofprof_model: str | None = None,
    prompt_lengths: Sequence[int] | None = None,
    output_tokens: int = 128,
    concurrency: Sequence[int] = (1,),
    rates: Sequence[float] = (),
    requests: int | None = None,
    warmup: int = 1,
    floor_requests: int = 5,
    level_seconds: float = 120.0,
    timeout_s: float = 60.0,
    api_key: str | None = None,
    tokenizer: str | None = None,
    extra: Mapping[str, Any] | None = None,
    draw: int | None = None,
) -> EndpointResult:
    """Measure the endpoint at ``url`` and, with ``predictor_for``, place it on the roofline.

    Arguments are :func:`roofprof.api.endpoint`'s (times in seconds); ``served`` is the
    ``model`` field sent. Without ``predictor_for`` the result has no ``roofline`` block and
    says why in its notes; with it, the model is ``roofprof_model`` or the one the served id
    names (:func:`~roofprof.endpoint.placement.roofprof_model_for`), and a model that cannot
    be found is a note, not an error.

    Ctrl-C during the sweep or the prediction returns what was measured, ``interrupted``.

    Returns:
        An :class:`~roofprof.endpoint.records.EndpointResult`.

    Raises:
        RoofprofError: the server cannot be reached or refuses the first request (its message
            is kept), ``roofprof_model`` does not load, bad arguments.
    """
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
    target = Target.parse(url, api=api, timeout_s=timeout_s, api_key=key)
    notes: list[str] = []
    model, context = served_model(target, served)
    target = dataclasses.replace(target, model=model)
    spec_name, why = (
        roofprof_model_for(roofprof_model, model) if predictor_for is not None else (None, "")
    )
    if why:
        notes.append(why)
    if predictor_for is None:
        notes.append(NOT_PLACED)
    if context is None and spec_name is not None:
        from roofprof.specs import load_model

        context = load_model(spec_name).max_position_embeddings
    lengths, cap_note = capped_prompts(prompt_lengths or DEFAULT_PROMPTS, output_tokens, context)
    if cap_note:
        notes.append(cap_note)
    server = ServerTokenizer(lambda route, body: post_json(target, route, body), model)
    try:
        server.count("hello")
        counter = server.count
    except (HttpStatusError, ConfigError):
        counter = None
    source, how = prompt_source(tokenizer, model, counter)
    notes.append(how)
    count_tokens = None
    if hasattr(source, "encode"):
        encode = source.encode  # type: ignore[attr-defined]
        count_tokens = lambda text: len(encode(text))  # noqa: E731
    connection = Connection(target, source, count_tokens=count_tokens, extra=dict(extra or {}))
    plan = SweepPlan(
        prompt_lengths=tuple(lengths),
        output_tokens=output_tokens,
        concurrency=tuple(concurrency),
        rates=tuple(rates),
        requests=requests,
        warmup=warmup,
        floor_requests=floor_requests,
        level_seconds=level_seconds,
        draw=draw,
    )
    result = measure(connection, plan, url=target.url, model=model)
    result = dataclasses.replace(result, notes=(*notes, *result.notes))
    if predictor_for is None or spec_name is None or not result.levels or result.interrupted:
        return result
    try:
        block = place(result, predictor_for(spec_name))
    except KeyboardInterrupt:
        note = "not placed on the roofline: interrupted while predicting"
        return dataclasses.replace(result, notes=(*result.notes, note), interrupted=True)
    except RoofprofError as exc:
        return dataclasses.replace(
            result, notes=(*result.notes, f"not placed on the roofline: {exc}")
        )
    return dataclasses.replace(result, roofline=block)
