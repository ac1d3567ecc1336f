"""The measurement protocol: discovery, a warm-up, the network floor, the load levels.

The default sweep (:class:`SweepPlan`): prompts of 16, 2,000 and 16,000 tokens (capped by
the model's context less the output) at concurrency 1, then each further ``concurrency``
level (and each Poisson ``rates`` level) at the first prompt length. Every request gets a
distinct prompt; each level starts with ``warmup`` requests that are not counted; a level
sends at most ``requests`` requests and none after ``level_seconds``.

Each concurrent stream runs on its own daemon thread with its own kept-alive connection, so
a stalled server never holds the process (the main thread only waits, and Ctrl-C there
ends the run with what was measured).
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roofprof.endpoint.client import ConnectFailure, HttpStatusError, Target, stream_request
from roofprof.endpoint.prompts import PromptSource
from roofprof.endpoint.records import EndpointResult, LevelResult, NetworkFloor, RequestRecord
from roofprof.errors import ConfigError

__all__ = ["DEFAULT_PROMPTS", "Connection", "SweepPlan", "capped_prompts", "measure"]

#: The default prompt lengths (tokens): short, 2,000 and 16,000.
DEFAULT_PROMPTS = (16, 2000, 16000)
#: Most worker threads of a Poisson level.
_MAX_WORKERS = 256
#: Fields a server may refuse (HTTP 422 "unexpected field"); dropped and retried once.
_OPTIONAL_FIELDS = ("stream_options", "temperature")


@dataclass(frozen=True)
class SweepPlan:
    """What to measure.

    Attributes:
        prompt_lengths: prompt tokens swept at concurrency 1 (capped by the context).
        output_tokens: ``max_tokens`` of every measured request.
        concurrency: concurrent streams; levels above 1 run at the first prompt length.
        rates: Poisson request rates (requests/s) at the first prompt length, streams capped
            by ``max(concurrency)`` when that is above 1.
        requests: requests per level (None: 4, or 2 × concurrency).
        warmup: uncounted requests before each level.
        floor_requests: 1-token requests for the network floor (0: none).
        level_seconds: no request is sent after this long into a level.
        draw: random draw of prompts and arrivals (None: a fresh one per run, so a warm prefix cache
            cannot serve a second run's prompts).
    """

    prompt_lengths: tuple[int, ...] = DEFAULT_PROMPTS
    output_tokens: int = 128
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()
    requests: int | None = None
    warmup: int = 1
    floor_requests: int = 5
    level_seconds: float = 120.0
    draw: int | None = None

    def levels(self) -> list[tuple[int, int, float | None]]:
        """(prompt tokens, concurrency, rate) of every level, in the order measured."""
        first = self.prompt_lengths[0]
        out: list[tuple[int, int, float | None]] = [(p, 1, None) for p in self.prompt_lengths]
        out += [(first, c, None) for c in self.concurrency if c != 1]
        cap = max(self.concurrency)
        out += [(first, cap if cap > 1 else 0, r) for r in self.rates]
        return out

    def requests_at(self, concurrency: int) -> int:
        """Requests measured in a level of ``concurrency`` streams."""
        return self.requests if self.requests is not None else max(4, 2 * concurrency)


def capped_prompts(
    lengths: Sequence[int], output_tokens: int, context: int | None
) -> tuple[list[int], str]:
    """Prompt lengths that fit ``context`` with ``output_tokens`` after them; and a note.

    >>> capped_prompts([16, 2000, 16000], 128, 8192)
    ([16, 2000, 8063], 'prompt 16000 capped at 8063 (context 8192, 128 output tokens, 1 special)')
    """
    if context is None:
        return list(lengths), ""
    room = context - output_tokens - 1
    if room < 1:
        raise ConfigError(
            f"--output-tokens {output_tokens} leaves no room for a prompt in the context of "
            f"{context} tokens"
        )
    out, notes = [], []
    for n in lengths:
        m = min(n, room)
        if m != n:
            notes.append(f"prompt {n} capped at {m}")
        if m not in out:
            out.append(m)
    note = ""
    if notes:
        note = f"{', '.join(notes)} (context {context}, {output_tokens} output tokens, 1 special)"
    return out, note


@dataclass
class Connection:
    """The target, the prompt source and the request body fields; what the run learns.

    ``extra`` holds vendor fields sent with every request (``--extra``); ``dropped`` the
    optional fields the server refused.
    """

    target: Target
    prompts: PromptSource
    count_tokens: Callable[[str], int] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        """The JSON body of a streaming request."""
        out: dict[str, Any] = {"model": self.target.model, "max_tokens": max_tokens, "stream": True}
        if self.target.api == "chat":
            out["messages"] = [{"role": "user", "content": prompt}]
        else:
            out["prompt"] = prompt
        out["stream_options"] = {"include_usage": True}
        out["temperature"] = 0.0
        for name in self.dropped:
            out.pop(name, None)
        out.update(self.extra)
        return out

    def one(
        self, prompt: str, n_prompt: int, max_tokens: int, **kw: Any
    ) -> tuple[RequestRecord, Any]:
        """One request; ConnectFailure and HttpStatusError propagate."""
        return stream_request(
            self.target,
            self.body(prompt, max_tokens),
            prompt_tokens=n_prompt,
            count_tokens=self.count_tokens,
            stop=self.stop.is_set,
            **kw,
        )


class _Interrupted(Exception):
    """Ctrl-C during a level; carries the records measured so far."""

    def __init__(self, level: LevelResult):
        self.level = level


def _preflight(connection: Connection, draw: int) -> None:
    """One short request: refused optional fields are dropped (once), a hard error raised."""
    prompt = connection.prompts.prompt(8, draw)
    try:
        record, _ = connection.one(prompt, 8, 2)
    except HttpStatusError as exc:
        if exc.status not in (400, 422):
            raise
        connection.dropped = list(_OPTIONAL_FIELDS)
        try:
            record, _ = connection.one(prompt, 8, 2)
        except HttpStatusError as again:
            raise HttpStatusError(again.status, again.message) from None
        connection.notes.append(
            f"the server refused the request with {', '.join(_OPTIONAL_FIELDS)} (HTTP "
            f"{exc.status}: {exc.message}); they were left out"
        )
    if record.error:
        raise ConnectFailure(f"the first request to {connection.target.url} failed: {record.error}")
    if record.tokens_from != "usage":
        connection.notes.append(
            "the server sent no usage: output tokens counted by "
            + (
                "the tokenizer on the generated text"
                if record.tokens_from == "tokenizer"
                else "one per text chunk (TPOT is per chunk)"
            )
        )


def _floor(connection: Connection, n: int, draw: int) -> NetworkFloor | None:
    if n <= 0:
        return None
    times, errors = [], []
    for i in range(n):
        if connection.stop.is_set():
            break
        try:
            record, _ = connection.one(connection.prompts.prompt(1, draw + i), 1, 1)
        except (ConnectFailure, HttpStatusError) as exc:
            errors.append(str(exc))
            continue
        if record.ttft_s is not None:
            times.append(record.ttft_s)
        else:
            errors.append(record.error)
    return NetworkFloor(tuple(times), tuple(errors))


def _run_level(
    connection: Connection,
    prompt_tokens: int,
    max_tokens: int,
    concurrency: int,
    rate: float | None,
    count: int,
    warmup: int,
    seconds: float,
    draw: int,
    clock: Callable[[], float] = time.perf_counter,
) -> LevelResult:
    prompts = [connection.prompts.prompt(prompt_tokens, draw + i) for i in range(count + warmup)]
    for i in range(warmup):  # one after the other, not counted
        if connection.stop.is_set():
            break
        try:
            connection.one(prompts[count + i], prompt_tokens, max_tokens)
        except (ConnectFailure, HttpStatusError):
            pass
    rng = random.Random(draw)
    at, offsets = 0.0, []
    for _ in range(count):
        offsets.append(at if rate else 0.0)
        if rate:
            at += rng.expovariate(rate)
    workers = concurrency if not rate else min(count, concurrency or count, _MAX_WORKERS)
    jobs: queue.Queue[int] = queue.Queue()
    for i in range(count):
        jobs.put(i)
    records: list[RequestRecord] = []
    ends: list[float] = []
    lock = threading.Lock()
    start = clock()
    deadline = start + seconds
    stopped = {"by": ""}

    def work() -> None:
        conn = None
        while not connection.stop.is_set():
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            wait = start + offsets[i] - clock()
            if wait > 0 and connection.stop.wait(wait):
                return
            sent = clock()
            if sent > deadline:
                stopped["by"] = f"time bound ({seconds:g} s)"
                return
            try:
                record, conn = connection.one(
                    prompts[i], prompt_tokens, max_tokens, index=i, sent_s=sent - start, conn=conn
                )
            except (ConnectFailure, HttpStatusError) as exc:
                record, conn = (
                    RequestRecord(i, prompt_tokens, max_tokens, sent - start, error=str(exc)),
                    None,
                )
            with lock:
                records.append(record)
                ends.append(clock())

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, workers))]
    for t in threads:
        t.start()

    def result() -> LevelResult:
        with lock:
            got = sorted(records, key=lambda r: r.index)
            duration = (max(ends) - start - min(r.sent_s for r in got)) if got else 0.0
        return LevelResult(
            prompt_tokens,
            max_tokens,
            concurrency,
            rate,
            tuple(got),
            duration,
            warmup,
            stopped["by"],
        )

    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.05)
    except KeyboardInterrupt:
        connection.stop.set()
        raise _Interrupted(result()) from None
    return result()


def measure(connection: Connection, plan: SweepPlan, *, url: str, model: str) -> EndpointResult:
    """Run ``plan`` against the connection's server: warm-up, floor, levels.

    Ctrl-C ends the run: the result then holds every level measured so far (the current
    one with its finished requests) and ``interrupted=True``.

    Raises:
        ConnectFailure: the server cannot be reached at the first request.
        HttpStatusError: the first request is refused (the server's message is kept).
        ConfigError: no exact-length prompt could be built for the first level (for a later
            one the sweep stops there, with a note, and what was measured is returned).
    """
    draw = plan.draw if plan.draw is not None else int.from_bytes(os.urandom(4), "little")
    levels: list[LevelResult] = []
    floor = None
    interrupted = False
    try:
        _preflight(connection, draw)
        floor = _floor(connection, plan.floor_requests, draw + 1_000)
        for k, (p, c, rate) in enumerate(plan.levels()):
            levels.append(
                _run_level(
                    connection,
                    p,
                    plan.output_tokens,
                    c,
                    rate,
                    plan.requests_at(max(c, 1)),
                    plan.warmup,
                    plan.level_seconds,
                    draw + 100_000 * (k + 1),
                )
            )
    except _Interrupted as exc:
        levels.append(exc.level)
        interrupted = True
    except KeyboardInterrupt:
        connection.stop.set()
        interrupted = True
    except ConfigError as exc:  # a prompt of a later level could not be made: keep the rest
        if not levels:
            raise
        connection.notes.append(f"the sweep stopped before its end: {exc}")
    settings = {
        "draw": draw,
        "prompt_lengths": list(plan.prompt_lengths),
        "output_tokens": plan.output_tokens,
        "concurrency": list(plan.concurrency),
        "rates": list(plan.rates),
        "requests": plan.requests,
        "warmup": plan.warmup,
        "floor_requests": plan.floor_requests,
        "level_seconds": plan.level_seconds,
        "timeout_s": connection.target.timeout_s,
        "prompt_source": connection.prompts.name,
        "fields_dropped": list(connection.dropped),
        "extra_fields": sorted(connection.extra),
    }
    return EndpointResult(
        url=url,
        api=connection.target.api,
        model=model,
        floor=floor,
        levels=tuple(levels),
        settings=settings,
        notes=tuple(connection.notes),
        interrupted=interrupted,
    )
