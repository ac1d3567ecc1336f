"""Streaming HTTP to an OpenAI-compatible server: one request, timed per SSE event.

Standard library only (``http.client`` on a kept-alive connection per worker, ``ssl`` for
https). Traffic goes only to the URL given: :class:`Target` builds every path from it.

Parsing rules (what real servers send): ``data:`` lines, ``:`` comments and blank lines
skipped, several events per read tolerated, ``[DONE]`` optional, ``usage`` read from any
chunk (also one that carries ``choices``), a chat role-only chunk counted as the first
*event* but not as the first token; a chunk is a *text chunk* when a choice carries
non-empty ``text`` (completions) or ``delta.content`` / ``delta.reasoning_content`` (chat).

Failures: a connection that cannot be made (:class:`ConnectFailure`: refused, unknown
host, TLS) and an HTTP status other than 200 (:class:`HttpStatusError`, with the server's
message) are raised; a stalled or malformed stream, an error event or a stream without text
is returned as a record with ``error`` set.

>>> t = Target.parse("http://127.0.0.1:8000/v1", api="chat", model="m")
>>> t.path("chat/completions"), t.host, t.port
('/v1/chat/completions', '127.0.0.1', 8000)
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from roofprof.endpoint.records import RequestRecord
from roofprof.errors import ConfigError, RoofprofError

__all__ = [
    "ConnectFailure",
    "HttpStatusError",
    "Target",
    "get_json",
    "post_json",
    "stream_request",
]

#: Bytes of an error body kept for the message.
_ERROR_BODY_BYTES = 4096


class ConnectFailure(RoofprofError):
    """The server cannot be reached (refused, unknown host, TLS failure, connect timeout)."""


class HttpStatusError(RoofprofError):
    """The server answered with an HTTP status other than 200; ``message`` is its text."""

    def __init__(self, status: int, message: str):
        self.status, self.message = status, message
        super().__init__(f"HTTP {status}: {message}")


@dataclass(frozen=True)
class Target:
    """Where and how requests go.

    Attributes:
        scheme, host, port: from the URL; ``prefix`` is its path without a final ``/v1``.
        api: ``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``).
        model: the ``model`` field sent.
        timeout_s: the longest wait for any byte (connect, headers, the next SSE line).
        api_key: sent as ``Authorization: Bearer``; never printed (not in ``repr``).
    """

    scheme: str
    host: str
    port: int
    prefix: str = ""
    api: str = "completions"
    model: str = ""
    timeout_s: float = 60.0
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, **kwargs: Any) -> Target:
        """A target from ``http(s)://host[:port][/prefix][/v1]``.

        Raises:
            ConfigError: not an http or https URL, no host, a bad port, credentials or a
                query in the URL.
        """
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"--url {url!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--url {url!r}: give http://HOST[:PORT] or https://HOST[:PORT]")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ConfigError(
                f"--url {parts.scheme}://{parts.hostname}...: no credentials, query or fragment "
                "in the URL (the key goes in --api-key or OPENAI_API_KEY)"
            )
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[: -len("/v1")]
        if kwargs.get("api", "completions") not in ("completions", "chat"):
            raise ConfigError(f"unknown --api {kwargs['api']!r}; valid choices: completions, chat")
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, prefix, **kwargs)

    @property
    def url(self) -> str:
        """The base URL (no credentials), as reported."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def path(self, route: str) -> str:
        """The request path of a ``/v1`` route (``completions``, ``models``) or ``/route``."""
        return (
            f"{self.prefix}/{route.lstrip('/')}"
            if route.startswith("/")
            else (f"{self.prefix}/v1/{route}")
        )

    def connect(self) -> http.client.HTTPConnection:
        """A new (not yet opened) connection to the target."""
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout_s, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def headers(self) -> dict[str, str]:
        """The request headers (the key, when given, as a bearer token)."""
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def with_timeout(self, seconds: float) -> Target:
        """The same target with another timeout."""
        return replace(self, timeout_s=seconds)


def _describe_os_error(target: Target, exc: BaseException) -> str:
    where = f"{target.host}:{target.port}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {where} failed: {getattr(exc, 'reason', None) or exc}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection to {where} refused (is the server running on that port?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {target.host!r}: {exc.strerror or exc}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer from {where} within --timeout {target.timeout_s:g} s"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"cannot reach {where}: {text}"


def _server_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300] or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message", obj)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return " ".join(str(err).split())[:300]
    return " ".join(str(obj).split())[:300]


def _open(
    target: Target,
    conn: http.client.HTTPConnection | None,
    method: str,
    path: str,
    body: bytes | None,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send one request (reusing ``conn`` if it still works); raises ConnectFailure."""
    for attempt in (0, 1):
        fresh = conn is None
        c = conn or target.connect()
        try:
            c.request(method, path, body=body, headers=target.headers())
            return c, c.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            c.close()
            conn = None
            if fresh or attempt:  # a new connection failed: the server is gone
                raise ConnectFailure(_describe_os_error(target, exc)) from None
        except (OSError, http.client.HTTPException) as exc:
            c.close()
            raise ConnectFailure(_describe_os_error(target, exc)) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _check_status(resp: http.client.HTTPResponse) -> None:
    if resp.status != 200:
        body = resp.read(_ERROR_BODY_BYTES)
        raise HttpStatusError(resp.status, _server_message(body))


def _request_json(target: Target, method: str, route: str, body: bytes | None) -> Any:
    conn, resp = _open(target, None, method, target.path(route), body)
    try:
        _check_status(resp)
        return json.loads(resp.read(16 << 20))
    except ValueError as exc:
        raise HttpStatusError(200, f"{route} did not answer JSON: {exc}") from None
    except OSError as exc:
        raise ConnectFailure(_describe_os_error(target, exc)) from None
    finally:
        conn.close()


def get_json(target: Target, route: str) -> Any:
    """GET a route and parse its JSON; raises ConnectFailure or HttpStatusError."""
    return _request_json(target, "GET", route, None)


def post_json(target: Target, route: str, payload: Mapping[str, Any]) -> Any:
    """POST JSON to a route and parse the JSON answer; raises ConnectFailure or HttpStatusError."""
    return _request_json(target, "POST", route, json.dumps(payload).encode())


def _chunk_text(obj: Mapping[str, Any], chat: bool) -> str:
    pieces = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if chat:
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                pieces.append(delta.get("content") or delta.get("reasoning_content") or "")
        else:
            pieces.append(choice.get("text") or "")
    return "".join(p for p in pieces if isinstance(p, str))


@dataclass
class _Stream:
    """The parse state of one SSE stream."""

    chat: bool
    first_event: float | None = None
    chunks: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False
    error: str = ""

    def feed(self, line: bytes, now: float) -> None:
        line = line.strip()
        if not line or line.startswith(b":") or not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            shown = data[:60].decode("utf-8", errors="replace")
            self.error = f"malformed SSE event (not JSON): {shown!r}"
            return
        if not isinstance(obj, dict):
            self.error = f"malformed SSE event (not an object): {str(obj)[:60]!r}"
            return
        if self.first_event is None:
            self.first_event = now
        if obj.get("error"):
            self.error = f"server error in stream: {_server_message(json.dumps(obj).encode())}"
            return
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        piece = _chunk_text(obj, self.chat)
        if piece:
            self.chunks.append(now)
            self.text.append(piece)


def stream_request(
    target: Target,
    payload: Mapping[str, Any],
    *,
    index: int = 0,
    prompt_tokens: int = 0,
    sent_s: float = 0.0,
    conn: http.client.HTTPConnection | None = None,
    count_tokens: Callable[[str], int] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[RequestRecord, http.client.HTTPConnection | None]:
    """Send one streaming request and time every SSE event (seconds after sending).

    Args:
        payload: the JSON body (``stream: true`` is set by the caller).
        conn: a kept-alive connection to reuse (a new one when None or closed).
        count_tokens: counts the generated text's tokens when the server sends no ``usage``
            (else one token per text chunk is assumed; the record says which).
        stop: polled between lines; true ends the stream (the record says "stopped").

    Returns:
        The record and the connection to reuse (None when it must not be reused).

    Raises:
        ConnectFailure: the connection cannot be made.
        HttpStatusError: the server answered a status other than 200.
    """
    chat = target.api == "chat"
    body = json.dumps(payload).encode()
    max_tokens = int(payload.get("max_tokens") or 0)
    t0 = clock()
    c, resp = _open(
        target, conn, "POST", target.path("chat/completions" if chat else "completions"), body
    )
    headers = clock() - t0
    try:
        _check_status(resp)
    except HttpStatusError:
        c.close()
        raise
    st = _Stream(chat)
    reusable = True
    try:
        while not st.error:
            line = resp.readline(1 << 20)
            if not line:
                break
            st.feed(line, clock() - t0)
            if stop():
                st.error = st.error or "stopped before the stream ended (interrupted)"
                break
    except TimeoutError:
        st.error = f"stream stalled: no data for --timeout {target.timeout_s:g} s"
    except (OSError, http.client.HTTPException) as exc:
        st.error = f"stream broken: {_describe_os_error(target, exc)}"
    if st.error or not resp.isclosed() and not _drained(resp):
        reusable = False
    if not st.error and not st.chunks:
        st.error = "the stream carried no text (no choices with text or delta.content)"
    usage = st.usage or {}
    n, source = usage.get("completion_tokens"), "usage"
    if not isinstance(n, int) or n <= 0:
        text = "".join(st.text)
        if count_tokens is not None:
            n, source = count_tokens(text), "tokenizer"
        else:
            n, source = len(st.chunks), "chunks"
    prompt_usage = usage.get("prompt_tokens")
    record = RequestRecord(
        index=index,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        sent_s=sent_s,
        headers_s=headers,
        first_event_s=st.first_event,
        chunk_s=tuple(st.chunks),
        output_tokens=n,
        tokens_from=source,
        server_prompt_tokens=prompt_usage if isinstance(prompt_usage, int) else None,
        done_sentinel=st.done,
        error=st.error,
    )
    if not reusable:
        c.close()
    return record, (c if reusable else None)


def _drained(resp: http.client.HTTPResponse) -> bool:
    try:
        resp.read()
    except (OSError, http.client.HTTPException):
        return False
    return True
