"""The one pynvml shim: start-up, queries that never raise, error kinds, PCI matching.

Every NVML user in roofprof (device enumeration, the CUDA device's identity, the telemetry
sampler, the counters' compute-capability probe) goes through here, modelled on nvitop's
``libnvml`` (``nvmlQuery`` returns a sentinel instead of raising):

* :func:`init` / :func:`shutdown` keep **one NVML session per process and module**, counted:
  ``nvmlInit`` runs on the first :func:`init`, ``nvmlShutdown`` when the count returns to 0.
  A holder (the CUDA device holds one for its lifetime) makes every later start-up free,
  so a telemetry block no longer pays NVML's enumeration (tens of ms).
* :func:`session` is the ``with`` form; it raises :class:`NvmlUnavailable` (kind + reason).
* :func:`query` calls an NVML function (by name or callable) and returns :data:`NA`, or the
  ``default`` given, on any NVML error or a function this nvidia-ml-py lacks; bytes decode.
* :func:`error_kind` classifies an exception by pynvml's exception classes
  (``NVMLError_LibraryNotFound`` → ``"library_not_found"``, ...), never by message text.
* :func:`gpus` lists the GPUs NVML sees; :func:`pci_bus_key` / :func:`same_pci_bus` compare
  PCI bus ids in full, domain included; :func:`index_for_pci` finds the NVML index of a GPU.

Every function takes ``nvml=`` (the module; default ``import pynvml``) so tests pass fakes.

>>> bool(NA), repr(NA)
(False, 'N/A')
>>> pci_bus_key(b"00000001:1B:00.0"), same_pci_bus("0000:1b:00.0", "00000001:1B:00.0")
((1, 27, 0, 0), False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ERROR_KINDS",
    "NA",
    "NvmlGpu",
    "NvmlUnavailable",
    "error_kind",
    "gpus",
    "index_for_pci",
    "init",
    "load",
    "pci_bus_key",
    "query",
    "same_pci_bus",
    "session",
    "shutdown",
]

#: What :func:`error_kind` returns: the pynvml class suffix in snake case, ``"missing"`` for a
#: function this nvidia-ml-py lacks, ``"not_installed"`` without pynvml, ``"other"`` otherwise.
ERROR_KINDS = (
    "not_installed",
    "library_not_found",
    "driver_not_loaded",
    "no_permission",
    "not_supported",
    "function_not_found",
    "gpu_is_lost",
    "uninitialized",
    "missing",
    "timeout",
    "other",
)
_CLASS_KINDS = {
    "LibraryNotFound": "library_not_found",
    "DriverNotLoaded": "driver_not_loaded",
    "NoPermission": "no_permission",
    "NotSupported": "not_supported",
    "FunctionNotFound": "function_not_found",
    "GpuIsLost": "gpu_is_lost",
    "Uninitialized": "uninitialized",
}
_START_MESSAGES = {
    "library_not_found": "no NVIDIA driver (NVML library not found)",
    "driver_not_loaded": "NVIDIA driver not loaded",
}


class _NotAvailable:
    """The value of a query that failed (falsy, prints ``N/A``), like nvitop's ``NA``."""

    _instance: _NotAvailable | None = None

    def __new__(cls) -> _NotAvailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "N/A"


NA = _NotAvailable()
"""Sentinel returned by :func:`query` when NVML cannot answer."""


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used; ``kind`` is one of :data:`ERROR_KINDS`, the message says why."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class _FunctionMissing(AttributeError):
    """The NVML module has no such function (an older nvidia-ml-py)."""


# Re-entrant: a device's finalizer calls shutdown() whenever the garbage collector runs it,
# which can be inside a start or shutdown of this same thread (a plain Lock deadlocked there).
_lock = threading.RLock()
_counts: dict[int, int] = {}

#: Longest wait (s) for ``nvmlInit``: a wedged driver can block it for good, and a profiler
#: that hangs without a word is worse than one that says NVML did not answer.
INIT_TIMEOUT_S = 30.0


# The init thread of a start that timed out, per NVML module: while it has not returned, a new
# start would only queue behind it, so it is answered at once with the same reason.
_hung_starts: dict[int, tuple[threading.Thread, float]] = {}


def _init_within(nv: Any, timeout_s: float) -> None:
    """``nv.nvmlInit()`` on a helper thread, waited for at most ``timeout_s``.

    Raises what ``nvmlInit`` raised, or :class:`NvmlUnavailable` (``timeout``) when it has not
    returned in time (the thread is left behind; it is a daemon and does not hold up exit).
    While that thread is still blocked, later calls raise the same at once rather than wait
    again; once it returns, the next call tries afresh.
    """
    hung = _hung_starts.get(id(nv))
    if hung is not None:
        if hung[0].is_alive():
            raise NvmlUnavailable(
                "timeout", f"NVML did not start within {hung[1]:g} s (a hung NVIDIA driver?)"
            )
        del _hung_starts[id(nv)]
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            nv.nvmlInit()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(exc)

    worker = threading.Thread(target=start, name="roofprof-nvml-init", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        _hung_starts[id(nv)] = (worker, timeout_s)
        raise NvmlUnavailable(
            "timeout", f"NVML did not start within {timeout_s:g} s (a hung NVIDIA driver?)"
        )
    if outcome[0] is not None:
        raise outcome[0]


def load(nvml: Any = None) -> Any:
    """The NVML module: ``nvml`` when given, else ``pynvml``.

    Raises:
        NvmlUnavailable: ``not_installed`` when nvidia-ml-py is missing.
    """
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("not_installed", "nvidia-ml-py (pynvml) is not installed") from exc
    return pynvml


def error_kind(exc: BaseException, nvml: Any = None) -> str:
    """The kind of an NVML failure (see :data:`ERROR_KINDS`), from pynvml's exception classes.

    >>> error_kind(AttributeError("nvmlDeviceGetTemperatureV"))
    'missing'
    """
    if isinstance(exc, NvmlUnavailable):
        return exc.kind
    if isinstance(exc, AttributeError):
        return "missing"
    try:
        nv = load(nvml)
    except NvmlUnavailable:
        return "other"
    for suffix, kind in _CLASS_KINDS.items():
        cls = getattr(nv, f"NVMLError_{suffix}", None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return kind
    return "other"


def _error_types(nv: Any) -> tuple[type[BaseException], ...]:
    cls = getattr(nv, "NVMLError", None)
    return (
        (cls, AttributeError)
        if isinstance(cls, type) and issubclass(cls, BaseException)
        else (RuntimeError, AttributeError)
    )


def _start(nvml: Any) -> tuple[str, str]:
    """``("", "")`` when the session is up (count incremented), else ``(kind, reason)``."""
    try:
        nv = load(nvml)
    except NvmlUnavailable as exc:
        return exc.kind, exc.reason
    with _lock:
        if _counts.get(id(nv), 0) == 0:
            try:
                _init_within(nv, INIT_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - classified here, never raised
                kind = error_kind(exc, nv)
                said = (
                    exc.reason if isinstance(exc, NvmlUnavailable) else f"NVML unavailable: {exc}"
                )
                return kind, _START_MESSAGES.get(kind, said)
        _counts[id(nv)] = _counts.get(id(nv), 0) + 1
    return "", ""


def init(nvml: Any = None) -> str:
    """Start (or join) the process's NVML session: ``""`` when NVML is up, else why not.

    Never raises. Each successful call must be paired with :func:`shutdown`.
    """
    return _start(nvml)[1]


def shutdown(nvml: Any = None) -> None:
    """Leave the NVML session; the last holder shuts NVML down. Never raises."""
    try:
        nv = load(nvml)
    except NvmlUnavailable:
        return
    with _lock:
        count = _counts.get(id(nv), 0)
        if count <= 0:
            return
        _counts[id(nv)] = count - 1
        if count == 1:
            del _counts[id(nv)]
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a broken NVML is not an error
                pass


@contextmanager
def session(nvml: Any = None) -> Iterator[Any]:
    """``with session() as nv:`` NVML is up inside the block (the module is yielded).

    Raises:
        NvmlUnavailable: NVML is missing or does not start (the reason in the message).
    """
    nv = load(nvml)
    kind, reason = _start(nv)
    if reason:
        raise NvmlUnavailable(kind, reason)
    try:
        yield nv
    finally:
        shutdown(nv)


def _decode(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def query(fn: str | Callable[..., Any], *args: Any, default: Any = NA, nvml: Any = None) -> Any:
    """``fn(*args)`` through NVML: its value (bytes decoded), or ``default`` on any NVML error,
    a function this nvidia-ml-py lacks, or no NVML at all. Never raises for those.

    ``fn`` is an NVML function or its name (``"nvmlDeviceGetName"``). The session must be up
    (:func:`init` / :func:`session`) for calls that need it.

    >>> query("nvmlNoSuchFunction", default=None, nvml=object()) is None
    True
    """
    try:
        nv = load(nvml)
    except NvmlUnavailable:
        return default
    try:
        if isinstance(fn, str):
            func = getattr(nv, fn, None)
            if func is None:
                raise _FunctionMissing(fn)
        else:
            func = fn
        return _decode(func(*args))
    except _error_types(nv):
        return default


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML lists it (NVML index order: PCI bus order, all GPUs of the host)."""

    index: int
    name: str
    pci_bus_id: str


def gpus(nvml: Any = None) -> tuple[list[NvmlGpu], str]:
    """The GPUs NVML sees and, when there are none, why (one line). Never raises."""
    reason = init(nvml)
    if reason:
        return [], reason
    nv = load(nvml)
    try:
        count = query("nvmlDeviceGetCount", default=None, nvml=nv)
        if count is None:
            return [], "NVML could not list GPUs"
        out = []
        for i in range(int(count)):
            handle = query("nvmlDeviceGetHandleByIndex", i, default=None, nvml=nv)
            if handle is None:
                return [], f"NVML could not open GPU {i}"
            name = query("nvmlDeviceGetName", handle, default=f"GPU {i}", nvml=nv)
            pci = query(lambda h: nv.nvmlDeviceGetPciInfo(h).busId, handle, default="", nvml=nv)
            out.append(NvmlGpu(i, str(name), str(_decode(pci))))
        return out, "" if out else "NVML reports no GPU"
    finally:
        shutdown(nv)


def pci_bus_key(bus_id: Any) -> tuple[int, int, int, int] | None:
    """``(domain, bus, device, function)`` of a PCI bus id (NVML pads the domain to 8 hex
    digits, CUDA to 4; a missing domain reads as 0), or None when it does not parse.

    >>> pci_bus_key("0000:1b:00.0"), pci_bus_key("1B:00.0"), pci_bus_key("?")
    ((0, 27, 0, 0), (0, 27, 0, 0), None)
    """
    text = str(_decode(bus_id)).strip().lower()
    parts = text.split(":")
    try:
        if len(parts) == 2:
            parts = ["0", *parts]
        if len(parts) != 3:
            return None
        dev, fn = parts[2].split(".", 1)
        return int(parts[0], 16), int(parts[1], 16), int(dev, 16), int(fn, 16)
    except ValueError:
        return None


def same_pci_bus(a: Any, b: Any) -> bool:
    """Whether two PCI bus ids name the same device, domain included.

    >>> same_pci_bus(b"00000000:1B:00.0", "0000:1b:00.0")
    True
    """
    ka, kb = pci_bus_key(a), pci_bus_key(b)
    return ka is not None and ka == kb


def index_for_pci(pci_bus_id: Any, nvml: Any = None) -> int | None:
    """The NVML index of the GPU at ``pci_bus_id`` (full id), or None when NVML lists no such GPU.

    The session must be up. Never guesses an index: None means telemetry cannot be matched.
    """
    nv = load(nvml)
    count = query("nvmlDeviceGetCount", default=0, nvml=nv)
    for i in range(int(count or 0)):
        handle = query("nvmlDeviceGetHandleByIndex", i, default=None, nvml=nv)
        if handle is None:
            continue
        bus = query(lambda h: nv.nvmlDeviceGetPciInfo(h).busId, handle, default=None, nvml=nv)
        if bus is not None and same_pci_bus(bus, pci_bus_id):
            return i
    return None
