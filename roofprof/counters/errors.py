"""Errors and warnings of the counters package, and the two hints they carry."""

from __future__ import annotations

from collections.abc import Sequence

from roofprof.errors import ConfigError, DeviceUnavailableError, RoofprofError

__all__ = [
    "CollectionError",
    "CounterPermissionError",
    "CounterWarning",
    "NCU_INSTALL_HINT",
    "NcuNotFoundError",
    "NotNcuOutputError",
    "PERMISSION_HINT",
    "UnknownLevelError",
    "check_permission",
]


class CounterWarning(UserWarning):
    """Something about the counters is missing or approximate (a dropped metric, n/a values)."""


class NcuNotFoundError(DeviceUnavailableError):
    """Nsight Compute's ``ncu`` is not installed or not on PATH."""


class CounterPermissionError(DeviceUnavailableError):
    """``ERR_NVGPUCTRPERM``: the driver does not let this user read the GPU's counters."""


class NotNcuOutputError(ConfigError):
    """A file that is not Nsight Compute CSV output; the message names the first bad line."""


class CollectionError(RoofprofError):
    """The command run under ncu failed, or ncu profiled no kernel."""


NCU_INSTALL_HINT = (
    "install Nsight Compute (it ships with the CUDA toolkit as /usr/local/cuda/bin/ncu; "
    "Debian/Ubuntu: `apt-get install nsight-compute` from NVIDIA's CUDA repository), then put "
    "`ncu` on PATH or set ROOFPROF_NCU=/path/to/ncu"
)
PERMISSION_HINT = (
    "ERR_NVGPUCTRPERM: this user may not read the GPU performance counters. Fix: run as root "
    "(e.g. `sudo -E env PATH=$PATH roofprof ...`), or allow all users through the driver's "
    "profiling permission: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | sudo "
    "tee /etc/modprobe.d/nvidia-profiling.conf`, then reload the nvidia module or reboot "
    "(in a container also add --cap-add=SYS_ADMIN); see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


class UnknownLevelError(ConfigError):
    """A memory level name that is not one of ``choices`` (:data:`roofprof.counters.LEVELS`)."""

    def __init__(self, level: str, choices: Sequence[str]):
        super().__init__(f"unknown memory level {level!r}; valid choices: {', '.join(choices)}")


def check_permission(text: str) -> None:
    """Raise :class:`CounterPermissionError` when ncu's output says counters are not permitted."""
    if "ERR_NVGPUCTRPERM" in text:
        raise CounterPermissionError(PERMISSION_HINT)
