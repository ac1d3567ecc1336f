"""The events of a torch profiler Chrome trace, read one at a time into compact records.

Formats read (``cat`` names differ between torch versions; all map to one record kind):

========================  ===========================================================
torch 1.8 – 1.9           ``Operator`` ops, ``Runtime`` launches, ``Kernel`` /
                          ``Memcpy`` / ``Memset`` device intervals, lower-case
                          ``external id`` on device events (the op's ``External id``)
torch 1.10 – 2.0          ``cpu_op``, ``cuda_runtime``, ``kernel`` / ``gpu_memcpy`` /
                          ``gpu_memset``; in 1.12 – 2.0 a device event's ``External
                          id`` is its own ``correlation`` (the op is found through the
                          runtime launch with that correlation)
torch 2.1 and later       as above, plus ``cuda_driver`` launches (``cuLaunchKernel``);
                          a device event's ``External id`` is the launching op's
========================  ===========================================================

Memory stays proportionate to the file: the JSON text is decoded one event at a time
(:meth:`json.JSONDecoder.raw_decode`) and only ops, launches and device intervals are
kept, as :class:`Event` records with ``__slots__`` (Python stacks, flow arrows and
instant events are dropped as they are read). An op's recorded inputs are kept as one
interned JSON text: the calls of one signature share it, and it is decoded once per
signature.

>>> e = Event("op", "aten::mm", 1, 1, 0.0, 5.0, 7, None, '[[[2, 3], [3, 4]], ["float"], []]')
>>> e.end
5.0
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError

__all__ = ["OP", "KERNEL", "RUNTIME", "Event", "TraceFile", "read_trace"]

#: record kinds
OP, KERNEL, RUNTIME = "op", "kernel", "runtime"

_KINDS = {
    "cpu_op": OP,
    "Operator": OP,
    "kernel": KERNEL,
    "gpu_memcpy": KERNEL,
    "gpu_memset": KERNEL,
    "Kernel": KERNEL,
    "Memcpy": KERNEL,
    "Memset": KERNEL,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "Runtime": RUNTIME,
}


class Event:
    """One kept trace event: ``kind`` (:data:`OP`, :data:`KERNEL`, :data:`RUNTIME`),
    ``name``, ``pid``/``tid``, ``ts``/``dur`` (µs), ``ext`` (its ``External id``), ``corr``
    (its ``correlation``) and, for ops, ``inputs``: ``[Input Dims, Input type, Concrete
    Inputs]`` as JSON text, interned (None: no shapes recorded)."""

    __slots__ = ("corr", "dur", "ext", "inputs", "kind", "name", "pid", "tid", "ts")

    def __init__(
        self,
        kind: str,
        name: str,
        pid: Any,
        tid: Any,
        ts: float,
        dur: float,
        ext: Any,
        corr: Any,
        inputs: str | None = None,
    ):
        self.kind, self.name, self.pid, self.tid = kind, name, pid, tid
        self.ts, self.dur, self.ext, self.corr, self.inputs = ts, dur, ext, corr, inputs

    @property
    def end(self) -> float:
        """End time (µs)."""
        return self.ts + self.dur


class TraceFile:
    """A read trace: ``events`` (kept records), ``devices`` (its ``deviceProperties``),
    ``torch_format`` (``"1.8-1.9"`` or ``"1.10+"``) and ``path``."""

    __slots__ = ("devices", "events", "path", "torch_format")

    def __init__(self, path: Path, events: list[Event], devices: list[dict], torch_format: str):
        self.path, self.events, self.devices, self.torch_format = (
            path,
            events,
            devices,
            torch_format,
        )


_WS = re.compile(r"[ \t\n\r]*")


def _items(text: str) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` of the top-level object, ``traceEvents`` yielded event by event as
    ``("event", e)`` (a top-level list: its items)."""
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()  # type: ignore[union-attr]

    def array(i: int) -> Iterator[tuple[str, Any] | int]:
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        if text.startswith("]", i):
            yield i + 1
            return
        while True:
            value, i = dec.raw_decode(text, i)
            yield "event", value
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text.startswith(",", i):
                i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
                continue
            if text.startswith("]", i):
                yield i + 1
                return
            raise ValueError("bad array")

    if text.startswith("[", i):
        for item in array(i):
            if not isinstance(item, int):
                yield item
        return
    if not text.startswith("{", i):
        raise ValueError("not an object")
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    while not text.startswith("}", i):
        key, i = dec.raw_decode(text, i)
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if not text.startswith(":", i):
            raise ValueError("bad object")
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        if key == "traceEvents" and text.startswith("[", i):
            for item in array(i):
                if isinstance(item, int):
                    i = item
                else:
                    yield item
        else:
            value, i = dec.raw_decode(text, i)
            yield key, value
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]


def _record(e: Any) -> Event | None:
    if not isinstance(e, dict) or e.get("ph") != "X":
        return None
    kind = _KINDS.get(e.get("cat"))  # type: ignore[arg-type]
    if kind is None or "ts" not in e:
        return None
    a = e.get("args") or {}
    ext = a.get("External id", a.get("external id"))
    inputs = None
    if kind == OP and "Input Dims" in a:
        inputs = sys.intern(
            json.dumps([a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs")])
        )
    return Event(
        kind,
        sys.intern(str(e.get("name", "?"))),
        e.get("pid"),
        e.get("tid"),
        float(e["ts"]),
        float(e.get("dur", 0) or 0),
        ext,
        a.get("correlation"),
        inputs,
    )


def read_trace(path: str | Path) -> TraceFile:
    """Read a torch profiler Chrome trace (``.json`` or ``.json.gz``, torch 1.8 or later).

    Raises:
        ConfigError: unreadable, not JSON, not a torch profiler trace (no op events), or
            a trace without shapes (not recorded with ``record_shapes=True``).

    >>> read_trace("missing.json")  # doctest: +SKIP
    ConfigError: cannot read trace missing.json: No such file or directory
    """
    p = Path(path)
    try:
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        text = raw.decode("utf-8")
        del raw
        events: list[Event] = []
        devices: list[dict] = []
        old_cats = False
        for key, value in _items(text):
            if key == "event":
                rec = _record(value)
                if rec is not None:
                    events.append(rec)
                    old_cats = old_cats or value.get("cat") == "Operator"
            elif key == "deviceProperties" and isinstance(value, list):
                devices = [d for d in value if isinstance(d, dict)]
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    except (ValueError, gzip.BadGzipFile, UnicodeDecodeError):
        raise ConfigError(
            f"{p} is not a JSON trace (torch.profiler's export_chrome_trace writes one)"
        ) from None
    ops = [e for e in events if e.kind == OP]
    if not ops:
        raise ConfigError(
            f"{p} is not a torch profiler trace (no cpu_op or Operator events; traces of "
            "torch 1.8 and later are read)"
        )
    if not any(e.inputs is not None for e in ops):
        raise ConfigError(
            f"{p} has no shapes: record it with torch.profiler.profile(record_shapes=True)"
        )
    return TraceFile(p, events, devices, "1.8-1.9" if old_cats else "1.10+")
