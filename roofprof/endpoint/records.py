"""What an endpoint measurement keeps: one record per request, one per load level, the run.

Records hold the raw samples (every content chunk's arrival time, the server's ``usage``),
so every statistic can be recomputed from a saved file. Times are seconds since the request
was sent (``perf_counter``), except ``RequestRecord.sent_s``: seconds since the level began.

>>> r = RequestRecord(index=0, prompt_tokens=16, max_tokens=4, sent_s=0.0, headers_s=0.01,
...                   first_event_s=0.02, chunk_s=(0.03, 0.05, 0.07, 0.09), output_tokens=4,
...                   tokens_from="usage")
>>> round(r.ttft_s, 3), round(r.e2e_s, 3), round(r.tpot_s, 3), [round(g, 3) for g in r.itls_s]
(0.03, 0.09, 0.02, [0.02, 0.02, 0.02])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EndpointResult", "LevelResult", "NetworkFloor", "RequestRecord"]


@dataclass(frozen=True)
class RequestRecord:
    """One streamed request as measured by the client.

    Attributes:
        index: the request's number within its level.
        prompt_tokens: the prompt length asked for (tokens of the text alone).
        max_tokens: the output length asked for.
        sent_s: when it was sent, seconds since the level began.
        headers_s: response headers received, seconds after sending (None: none came).
        first_event_s: the first SSE ``data:`` event (any, a role-only chunk included).
        chunk_s: arrival of every chunk carrying text, seconds after sending.
        output_tokens: n, the output tokens counted (``tokens_from`` says how).
        tokens_from: ``usage`` (the server's ``completion_tokens``), ``tokenizer`` (the
            generated text re-tokenized) or ``chunks`` (one token per text chunk).
        server_prompt_tokens: the server's ``usage.prompt_tokens`` (None: no usage).
        done_sentinel: the stream ended with ``data: [DONE]``.
        error: empty, or one line saying why the request failed.
    """

    index: int
    prompt_tokens: int
    max_tokens: int
    sent_s: float
    headers_s: float | None = None
    first_event_s: float | None = None
    chunk_s: tuple[float, ...] = ()
    output_tokens: int = 0
    tokens_from: str = "usage"
    server_prompt_tokens: int | None = None
    done_sentinel: bool = False
    error: str = ""

    @property
    def ok(self) -> bool:
        """Completed with at least one text chunk and no error."""
        return not self.error and bool(self.chunk_s)

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: the first chunk carrying text − send (seconds)."""
        return self.chunk_s[0] if self.chunk_s else None

    @property
    def e2e_s(self) -> float | None:
        """End to end: the last chunk carrying text − send (seconds)."""
        return self.chunk_s[-1] if self.chunk_s else None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (E2E − TTFT)/(n − 1); None when n < 2."""
        if not self.chunk_s or self.output_tokens < 2:
            return None
        return (self.chunk_s[-1] - self.chunk_s[0]) / (self.output_tokens - 1)

    @property
    def itls_s(self) -> list[float]:
        """Gaps between consecutive text chunks (seconds)."""
        return [b - a for a, b in zip(self.chunk_s, self.chunk_s[1:], strict=False)]

    @property
    def input_len(self) -> int:
        """Prompt tokens as the server counted them (else as asked for)."""
        return self.server_prompt_tokens if self.server_prompt_tokens else self.prompt_tokens


@dataclass(frozen=True)
class NetworkFloor:
    """The part of TTFT that is not prefill: 1-token prompts with ``max_tokens=1``, repeated.

    ``ttft_s`` holds every sample; the floor is their median.
    """

    ttft_s: tuple[float, ...]
    errors: tuple[str, ...] = ()

    @property
    def seconds(self) -> float | None:
        """The median TTFT of the 1-token requests (None: none succeeded)."""
        if not self.ttft_s:
            return None
        ordered = sorted(self.ttft_s)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class LevelResult:
    """One load level: a prompt length at a concurrency (or a Poisson request rate).

    ``duration_s`` runs from the first send to the last response (warm-up excluded).
    """

    prompt_tokens: int
    max_tokens: int
    concurrency: int
    request_rate: float | None
    requests: tuple[RequestRecord, ...]
    duration_s: float
    warmups: int = 0
    stopped_by: str = ""


@dataclass(frozen=True)
class EndpointResult:
    """A whole endpoint run: what was asked, the floor, the levels, the roofline placement.

    ``roofline`` is the placement block (:func:`roofprof.endpoint.placement.place`), or
    None with the reason in ``notes``; ``interrupted`` is true when Ctrl-C ended the run
    (the levels then hold what was measured until then).
    """

    url: str
    api: str
    model: str
    floor: NetworkFloor | None
    levels: tuple[LevelResult, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    roofline: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    interrupted: bool = False
