"""An in-process OpenAI-compatible streaming server with scripted delays and real-server quirks.

Stdlib ``http.server`` on 127.0.0.1 (a free port) in a daemon thread, HTTP/1.1 with chunked
transfer encoding and keep-alive, as uvicorn serves ``transformers serve`` and vLLM. Each
request follows a :class:`Script`; the server stamps every write with ``time.perf_counter``
(the same clock the client uses, in the same process), so tests compare what the client
measured with when the bytes were actually sent.

Quirks (from ``transformers serve`` 5.24 and vLLM CPU 0.32, as observed against them):
``role_first`` (a chat role-only chunk before the first token), ``usage_on_last`` (usage on
the last chunk that also carries ``choices``; else a separate ``choices: []`` chunk),
``done`` (``data: [DONE]`` at the end or not), ``allowed_fields`` (HTTP 422 "Unexpected fields"
otherwise), ``status``/``message`` (an HTTP error), ``malformed``, ``stall_s``, ``usage``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Script", "ScriptedServer"]

TRANSFORMERS_FIELDS = frozenset(
    {
        "model",
        "prompt",
        "messages",
        "max_tokens",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "n",
        "user",
        "logprobs",
        "echo",
        "best_of",
        "presence_penalty",
    }
)


@dataclass
class Script:
    """How the server answers one request (delays in seconds)."""

    first_s: float = 0.03
    gap_s: float = 0.02
    tokens: int | None = None  # None: the request's max_tokens
    role_first: bool = True
    usage_on_last: bool = True
    done: bool = False
    usage: bool = True
    allowed_fields: frozenset[str] | None = TRANSFORMERS_FIELDS
    status: int = 200
    message: str = ""
    malformed_at: int | None = None
    stall_s: float = 0.0
    stall_after: int = 1


@dataclass
class Served:
    """What the server saw and did for one request (perf_counter times)."""

    body: dict[str, Any]
    headers: dict[str, str]
    received: float
    writes: list[tuple[str, float]] = field(default_factory=list)


class ScriptedServer:
    """``with ScriptedServer(script_for) as srv:`` → ``srv.url``; ``srv.served`` the log.

    ``script_for(body) -> Script`` chooses the script of each request (or a Script for all).
    """

    def __init__(
        self,
        script: Script | Callable[[dict[str, Any]], Script] | None = None,
        on_request: Callable[[int], None] | None = None,
        tokenize: bool = False,
    ):
        fixed = script if isinstance(script, Script) else Script()
        self.script_for = script if callable(script) else (lambda body: fixed)
        self.on_request = on_request
        self.tokenize = tokenize  # serve /tokenize (as vLLM and SGLang do)
        self.served: list[Served] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # as uvicorn: each SSE event leaves at once (no Nagle wait behind a delayed ACK)
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    sc = outer.script_for({})
                except (KeyError, TypeError):  # a script that reads the request body
                    sc = Script()
                if sc.status == 401:
                    self._json(401, {"error": {"message": sc.message}})
                elif self.path == "/v1/models":
                    self._json(
                        200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                    )
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                received = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/tokenize" and outer.tokenize:
                    # as a subword tokenizer would: a word of more than 6 letters is 2 tokens
                    words = str(body.get("prompt", "")).split()
                    self._json(200, {"count": sum(1 + (len(w) > 6) for w in words)})
                    return
                if self.path not in ("/v1/completions", "/v1/chat/completions"):
                    self._json(404, {"detail": "Not Found"})
                    return
                served = Served(body, dict(self.headers), received)
                with outer.lock:
                    outer.served.append(served)
                    count = len(outer.served)
                if outer.on_request is not None:
                    outer.on_request(count)
                sc = outer.script_for(body)
                if sc.allowed_fields is not None and set(body) - sc.allowed_fields:
                    extra = sorted(set(body) - sc.allowed_fields)
                    self._json(422, {"detail": f"Unexpected fields in the request: {extra}"})
                    return
                if sc.status != 200:
                    self._json(sc.status, {"error": {"message": sc.message or "scripted failure"}})
                    return
                self._stream(served, body, sc)

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, served: Served, kind: str, text: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(text), text))
                self.wfile.flush()
                served.writes.append((kind, time.perf_counter()))

            def _event(self, served: Served, kind: str, obj: Any) -> None:
                self._chunk(served, kind, b"data: " + json.dumps(obj).encode() + b"\n\n")

            def _stream(self, served: Served, body: dict[str, Any], sc: Script) -> None:
                chat = "messages" in body
                n = sc.tokens if sc.tokens is not None else int(body.get("max_tokens") or 16)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()

                def choice(text: str, finish: str | None = None) -> dict[str, Any]:
                    if chat:
                        return {
                            "index": 0,
                            "delta": {"content": text} if text else {},
                            "finish_reason": finish,
                        }
                    return {"index": 0, "text": text, "finish_reason": finish}

                # one token a word (the word prompts), 9 for a chat message
                prompt_n = 9 if chat else len(str(body.get("prompt", "")).split())
                usage = {
                    "prompt_tokens": prompt_n,
                    "completion_tokens": n,
                    "total_tokens": prompt_n + n,
                }
                try:
                    if chat and sc.role_first:
                        self._event(
                            served,
                            "role",
                            {
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"role": "assistant"},
                                        "finish_reason": None,
                                    }
                                ]
                            },
                        )
                    for i in range(n):
                        time.sleep(sc.first_s if i == 0 else sc.gap_s)
                        if sc.stall_s and i == sc.stall_after:
                            time.sleep(sc.stall_s)
                        if sc.malformed_at == i:
                            self._chunk(served, "bad", b"data: {not json\n\n")
                            continue
                        self._chunk(served, "ping", b": ping\n\n") if i == 1 else None
                        self._event(served, "text", {"choices": [choice(f"t{i} ")]})
                    last: dict[str, Any] = {"choices": [choice("", "length")]}
                    if sc.usage and sc.usage_on_last:
                        last["usage"] = usage
                    self._event(served, "last", last)
                    if sc.usage and not sc.usage_on_last:
                        self._event(served, "usage", {"choices": [], "usage": usage})
                    if sc.done:
                        self._chunk(served, "done", b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away (a timeout, Ctrl-C)
                    pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-request is what the fault tests do

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
