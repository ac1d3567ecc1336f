"""Devices: pick the machine to measure (``auto``, ``cpu``, ``cuda:N``).

``select("auto")`` picks a GPU when one works and the CPU otherwise; :func:`select_device`
also says which and why. A CUDA device comes from ``roofprof.devices.cuda`` (written with
the CUDA support): that module provides ``CudaDevice(index)``, whose constructor raises
:class:`~roofprof.errors.DeviceUnavailableError` when the GPU cannot be used. GPUs are
counted through NVML, which needs no CUDA context.

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
from dataclasses import dataclass

from roofprof.devices.base import (
    CheckResult,
    Device,
    DeviceInfo,
    OpImpl,
    PreparedOp,
    Probe,
    ProbeRun,
    compare,
)
from roofprof.errors import DeviceUnavailableError, UnknownNameError

__all__ = ["CheckResult", "Device", "DeviceInfo", "DeviceStatus", "OpImpl", "PreparedOp", "Probe", "ProbeRun",
           "Selection", "available_devices", "compare", "cuda_devices", "select", "select_device"]

_CUDA_RE = re.compile(r"^(?:cuda|gpu)(?::(\d+))?$")


@dataclass(frozen=True)
class Selection:
    """The device chosen for a device string, and why (one line for the user)."""

    device: Device
    reason: str


@dataclass(frozen=True)
class DeviceStatus:
    """One device roofprof knows of: its label, name, whether it is usable, and why not."""

    label: str
    name: str
    usable: bool
    reason: str = ""


def cuda_devices() -> tuple[list[str], str]:
    """Names of the NVIDIA GPUs NVML sees, and a reason when there are none.

    Never raises: no nvidia-ml-py, no driver or no GPU give ``([], "why")``.
    """
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        name = type(exc).__name__
        if "LibraryNotFound" in name:
            return [], "no NVIDIA driver (NVML library not found)"
        if "DriverNotLoaded" in name:
            return [], "NVIDIA driver not loaded"
        return [], f"NVML failed to start: {exc}"
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return names, "" if names else "NVML reports no GPU"
    except Exception as exc:  # noqa: BLE001
        return [], f"NVML could not list GPUs: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _open_cuda(index: int) -> Device:
    try:
        module = importlib.import_module("roofprof.devices.cuda")
    except ModuleNotFoundError as exc:
        if exc.name in ("roofprof.devices.cuda",):
            raise DeviceUnavailableError("CUDA device support is not part of this roofprof build "
                                         "(roofprof.devices.cuda is missing)") from exc
        raise DeviceUnavailableError(f"CUDA device support needs {exc.name!r}, which is not installed "
                                     "(pip install 'roofprof[cuda12]' or '[cuda13]')") from exc
    return module.CudaDevice(index)


def available_devices() -> list[DeviceStatus]:
    """Every device roofprof can see: the CPU, then each GPU NVML lists (usable or not)."""
    from roofprof.devices.cpu import cpu_info

    out = [DeviceStatus("cpu", cpu_info().name, True)]
    names, reason = cuda_devices()
    for i, name in enumerate(names):
        out.append(DeviceStatus(f"cuda:{i}", name, True))
    if not names:
        out.append(DeviceStatus("cuda", "-", False, reason))
    return out


def _choices(names: list[str]) -> list[str]:
    return ["auto", "cpu", *(f"cuda:{i}" for i in range(len(names)))]


def select_device(spec: str = "auto") -> Selection:
    """The device for ``spec`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and why it was chosen.

    Raises:
        UnknownNameError: not a device string, or ``cuda:N`` beyond the GPUs present (the
            message lists the devices there are).
        DeviceUnavailableError: ``cuda:N`` exists but cannot be used (says why).
    """
    text = (spec or "auto").strip().lower()
    if text == "cpu":
        from roofprof.devices.cpu import CpuDevice

        return Selection(CpuDevice(), "cpu requested")
    if text == "auto":
        from roofprof.devices.cpu import CpuDevice

        names, reason = cuda_devices()
        if names:
            try:
                dev = _open_cuda(0)
            except DeviceUnavailableError as exc:
                return Selection(CpuDevice(), f"auto: GPU {names[0]!r} present but not usable ({exc}); using the CPU")
            return Selection(dev, f"auto: GPU {names[0]!r} works (cuda:0)")
        return Selection(CpuDevice(), f"auto: no usable GPU ({reason}); using the CPU")
    m = _CUDA_RE.match(text)
    names, reason = cuda_devices()
    if not m:
        raise UnknownNameError("device", spec, _choices(names))
    index = int(m.group(1) or 0)
    if not names:
        raise DeviceUnavailableError(f"device {spec!r} is not available: {reason}; "
                                     f"devices here: {', '.join(_choices(names))}")
    if index >= len(names):
        raise UnknownNameError("device", spec, _choices(names))
    return Selection(_open_cuda(index), f"{spec} requested ({names[index]})")


def select(spec: str = "auto") -> Device:
    """The :class:`Device` for ``spec``; see :func:`select_device` for errors."""
    return select_device(spec).device
