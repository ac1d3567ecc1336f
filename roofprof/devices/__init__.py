"""Devices: pick the machine to measure (``auto``, ``cpu``, ``cuda:N``) from a backend registry.

:data:`BACKENDS` names the backend modules (``roofprof.devices.cpu``, ``roofprof.devices.cuda``).
Each one declares ``KIND``, the device-string ``NAMES`` it answers to, ``WHAT`` its devices
are called, ``AUTO_FALLBACK`` (the CPU: used by ``auto`` when nothing else works), and offers
``enumerate() -> list[DeviceStatus]``, ``open(index) -> Device`` and
``roofline_plan(info, name)``. :func:`select`, :func:`select_device` and
:func:`available_devices` only iterate over the registry, so a new backend is one module and
one :data:`BACKENDS` entry.

``select("auto")`` picks the first usable device of a non-fallback backend (a GPU) and the
CPU otherwise; :func:`select_device` also says which and why. Opening a device raises
:class:`~roofprof.errors.DeviceUnavailableError` with the reason when it cannot be used.

>>> select("cpu").info.kind
'cpu'
>>> select("tpu")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
roofprof.errors.UnknownNameError: unknown device 'tpu'; valid choices: ...
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from roofprof.devices.base import (
    CheckResult,
    Device,
    DeviceInfo,
    DeviceStatus,
    OpImpl,
    PreparedOp,
    Probe,
    ProbeRun,
    Selection,
    compare,
    tolerance,
)
from roofprof.errors import DeviceUnavailableError, UnknownNameError

__all__ = [
    "BACKENDS",
    "CheckResult",
    "Device",
    "DeviceInfo",
    "DeviceStatus",
    "OpImpl",
    "PreparedOp",
    "Probe",
    "ProbeRun",
    "Selection",
    "as_device",
    "available_devices",
    "backend",
    "backends",
    "compare",
    "cuda_devices",
    "select",
    "select_device",
    "tolerance",
]

#: The backend modules, in the order ``available_devices`` lists them. An entry is a module
#: name (imported on first use, so a missing optional backend only makes its devices
#: unusable) or a module-like object.
BACKENDS: tuple[str | Any, ...] = ("roofprof.devices.cpu", "roofprof.devices.cuda")

_SPEC_RE = re.compile(r"^([a-z][a-z0-9_]*)(?::(\d+))?$")


class _MissingBackend:
    """Stands for a backend module that cannot be imported: no devices, and why."""

    AUTO_FALLBACK = False

    def __init__(self, name: str, reason: str):
        self.KIND = name.rsplit(".", 1)[-1]
        self.NAMES = (self.KIND,)
        self.WHAT = self.KIND.upper()
        self.reason = reason

    def enumerate(self) -> list[DeviceStatus]:
        return [DeviceStatus(self.KIND, "-", False, self.reason)]

    def open(self, index: int = 0) -> Device:
        raise DeviceUnavailableError(self.reason)

    def roofline_plan(self, info: DeviceInfo, name: str = "full") -> Any:
        raise DeviceUnavailableError(self.reason)


def _load(entry: str | Any) -> ModuleType | Any:
    if not isinstance(entry, str):
        return entry
    try:
        return importlib.import_module(entry)
    except ModuleNotFoundError as exc:
        if exc.name == entry:
            return _MissingBackend(entry, f"{entry} is not part of this roofprof build")
        return _MissingBackend(
            entry,
            f"{entry} needs {exc.name!r}, which is not installed "
            "(pip install 'roofprof[cuda12]' or '[cuda13]')",
        )


def backends() -> list[Any]:
    """The backend modules of :data:`BACKENDS`, imported (a missing one stands in as a backend
    without devices that says why)."""
    return [_load(entry) for entry in BACKENDS]


def backend(kind_or_name: str) -> Any:
    """The backend whose ``KIND`` or one of whose ``NAMES`` is ``kind_or_name``.

    Raises:
        UnknownNameError: no such backend (lists the kinds there are).
    """
    loaded = backends()
    for b in loaded:
        if kind_or_name == b.KIND or kind_or_name in b.NAMES:
            return b
    raise UnknownNameError("device kind", kind_or_name, [b.KIND for b in loaded])


def available_devices() -> list[DeviceStatus]:
    """Every device roofprof can see, backend by backend (usable or not, with the reason)."""
    return [status for b in backends() for status in b.enumerate()]


def cuda_devices() -> tuple[list[str], str]:
    """Names of the NVIDIA GPUs (``cuda:0``, ``cuda:1``...), and a reason when there are none.

    Never raises. NVML lists them; without NVML, CUDA (CuPy) does.
    """
    try:
        rows = backend("cuda").enumerate()
    except UnknownNameError:
        return [], "no CUDA backend in roofprof.devices.BACKENDS"
    names = [r.name for r in rows if r.usable]
    return names, "" if names else "; ".join(r.reason for r in rows if r.reason) or "no GPU"


def _choices(listed: list[tuple[Any, list[DeviceStatus]]]) -> list[str]:
    return ["auto", *(s.label for _, rows in listed for s in rows if s.usable)]


def _unusable_reason(rows: list[DeviceStatus]) -> str:
    return "; ".join(r.reason for r in rows if not r.usable and r.reason) or "none found"


def _auto(loaded: list[Any]) -> Selection:
    fallback = next((b for b in loaded if b.AUTO_FALLBACK), None)
    why: list[str] = []
    for b in loaded:
        if b.AUTO_FALLBACK:
            continue
        rows = b.enumerate()
        usable = [(i, s) for i, s in enumerate(rows) if s.usable]
        if not usable:
            why.append(f"no usable {b.WHAT} ({_unusable_reason(rows)})")
            continue
        index, status = usable[0]
        try:
            dev = b.open(index)
        except DeviceUnavailableError as exc:
            why.append(f"{b.WHAT} {status.name!r} present but not usable ({exc})")
            continue
        return Selection(dev, f"auto: {b.WHAT} {status.name!r} works ({status.label})")
    if fallback is None:
        raise DeviceUnavailableError("auto: no usable device: " + "; ".join(why))
    return Selection(
        fallback.open(0), f"auto: {'; '.join(why) or 'no other device'}; using the {fallback.WHAT}"
    )


def select_device(spec: str = "auto") -> Selection:
    """The device for ``spec`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and why it was chosen.

    Raises:
        UnknownNameError: not a device string, or ``cuda:N`` beyond the GPUs present (the
            message lists the devices there are).
        DeviceUnavailableError: the device exists but cannot be used, or its backend has no
            usable device (says why).
    """
    text = (spec or "auto").strip().lower()
    loaded = backends()
    if text == "auto":
        return _auto(loaded)
    m = _SPEC_RE.match(text)
    chosen = next((b for b in loaded if m and m.group(1) in b.NAMES), None)
    if chosen is None:
        raise UnknownNameError("device", spec, _choices([(b, b.enumerate()) for b in loaded]))
    rows = chosen.enumerate()
    usable = [s for s in rows if s.usable]
    index = int(m.group(2) or 0)
    if not usable:
        listed = [(b, rows if b is chosen else b.enumerate()) for b in loaded]
        raise DeviceUnavailableError(
            f"device {spec!r} is not available: {_unusable_reason(rows)}; "
            f"devices here: {', '.join(_choices(listed))}"
        )
    if index >= len(usable):
        raise UnknownNameError(
            "device", spec, _choices([(b, rows if b is chosen else b.enumerate()) for b in loaded])
        )
    status = usable[index]
    return Selection(chosen.open(index), f"{spec} requested ({status.name})")


def select(spec: str = "auto") -> Device:
    """The :class:`Device` for ``spec``; see :func:`select_device` for errors."""
    return select_device(spec).device


def as_device(device: Device | str = "auto") -> Device:
    """``device`` itself, or the :class:`Device` a ``"auto" | "cpu" | "cuda:N"`` string names.

    Raises:
        UnknownNameError, DeviceUnavailableError: as :func:`select_device`.

    >>> as_device("cpu").info.kind
    'cpu'
    """
    return select(device) if isinstance(device, str) else device
