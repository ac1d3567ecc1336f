"""The CUDA backend: one NVIDIA GPU through CuPy (memory, kernels, events) and NVML (identity,
telemetry).

The face of the package. ``roofprof.devices.select("cuda:N")`` opens :class:`CudaDevice`
through this module's backend functions, :func:`enumerate` and :func:`open`. Nothing here
touches a GPU at import time: ``import roofprof.devices.cuda`` works on any machine, with
or without CuPy.

Inside the package: ``_runtime`` (CUDA errors, clock, NVRTC modules, memory policy),
``device`` (:class:`CudaDevice`, identity, the GPU roofline plan), ``buffers`` and
``impls``/``reference`` (op implementations), ``probes`` (the probe catalogue). Import the
names below from ``roofprof.devices.cuda``, not from the modules.

>>> KIND, NAMES, all(s.label.startswith("cuda") for s in enumerate())
('cuda', ('cuda', 'gpu'), True)
"""

from __future__ import annotations

import builtins
from typing import Any

from roofprof.devices import _nvml
from roofprof.devices.base import DeviceStatus
from roofprof.devices.cuda._runtime import (
    INSTALL_HINT,
    CudaEventClock,
    CudaKernelError,
    KernelModules,
    cuda_message,
    dtype_unsupported,
    flush_bytes_for,
    fmt_bytes,
    kernels_module,
    memory_refusal,
    nvrtc_version,
    parse_cc,
)
from roofprof.devices.cuda.buffers import (
    ITEMSIZE,
    CupyBuffers,
    TorchBuffers,
    bf16_bits,
    bf16_to_f32,
    check_tolerance,
    gemm_buffer_bytes,
    host_f64,
    numba_cuda_reason,
    sample_indices,
    storage_dtype,
    torch_cuda_reason,
)
from roofprof.devices.cuda.device import (
    DELAY_TARGET_S,
    CudaDevice,
    cuda_roofline_plan,
    read_identity,
    scale_to_clock,
    spec_clocks,
)
from roofprof.devices.cuda.impls import (
    CUBLAS_DTYPES,
    GEMV_MAX_M,
    CublasGemm,
    CupyKernels,
    NumbaKernels,
    PreparedGemm,
    TorchGemm,
    cublas_gemm_nt,
    cuda_implementations,
    gemm_probe_setup,
    gemv_prepared,
    torch_gemm_nt,
)
from roofprof.devices.cuda.probes import cuda_probes, launch_latency, skipped_probes
from roofprof.devices.cuda.reference import CupyReference, PreparedRef, attention_group

__all__ = [
    "AUTO_FALLBACK",
    "CUBLAS_DTYPES",
    "DELAY_TARGET_S",
    "GEMV_MAX_M",
    "INSTALL_HINT",
    "ITEMSIZE",
    "KIND",
    "NAMES",
    "CublasGemm",
    "CudaDevice",
    "CudaEventClock",
    "CudaKernelError",
    "CupyBuffers",
    "CupyKernels",
    "CupyReference",
    "KernelModules",
    "NumbaKernels",
    "PreparedGemm",
    "PreparedRef",
    "TorchBuffers",
    "TorchGemm",
    "WHAT",
    "attention_group",
    "bf16_bits",
    "bf16_to_f32",
    "check_tolerance",
    "cublas_gemm_nt",
    "cuda_implementations",
    "cuda_probes",
    "cuda_roofline_plan",
    "dtype_unsupported",
    "enumerate",
    "flush_bytes_for",
    "fmt_bytes",
    "gemm_buffer_bytes",
    "gemm_probe_setup",
    "gemv_prepared",
    "host_f64",
    "kernels_module",
    "launch_latency",
    "memory_refusal",
    "numba_cuda_reason",
    "nvrtc_version",
    "open",
    "parse_cc",
    "read_identity",
    "roofline_plan",
    "sample_indices",
    "scale_to_clock",
    "skipped_probes",
    "spec_clocks",
    "storage_dtype",
    "torch_cuda_reason",
    "torch_gemm_nt",
]

#: The device kind of this backend; device strings are ``cuda``, ``cuda:N`` (or ``gpu[:N]``).
KIND = "cuda"
NAMES = ("cuda", "gpu")
#: What ``auto`` calls one of these devices in its one-line reason.
WHAT = "GPU"
#: ``auto`` prefers a usable GPU over the fallback backend (the CPU).
AUTO_FALLBACK = False


def _cuda_names(cupy: Any = None) -> tuple[list[str], str]:
    """GPU names in CUDA order through CuPy (no NVML), and why none. Never raises."""
    try:
        cp = cupy
        if cp is None:
            import cupy as cp
        count = int(cp.cuda.runtime.getDeviceCount())
    except ImportError as exc:
        return [], f"CuPy is not installed ({exc})"
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: no driver, driver too old, no GPU
        return [], f"CUDA sees no usable GPU: {cuda_message(exc)}"
    names = []
    for i in range(count):
        try:
            name = cp.cuda.runtime.getDeviceProperties(i).get("name") or f"CUDA GPU {i}"
        except Exception:  # noqa: BLE001 - the name is cosmetic
            name = f"CUDA GPU {i}"
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names, "" if names else "CUDA reports no GPU"


def enumerate(*, nvml: Any = None, cupy: Any = None) -> list[DeviceStatus]:  # noqa: A001 - backend protocol
    """Every NVIDIA GPU as a :class:`~roofprof.devices.base.DeviceStatus` (``cuda:N``).

    NVML lists the GPUs without creating a CUDA context. Without NVML (no nvidia-ml-py, or a
    container without ``libnvidia-ml.so``) CuPy counts them instead, and those devices then
    report telemetry as unavailable. With neither, one unusable ``cuda`` row says why.
    When ``CUDA_VISIBLE_DEVICES`` is set, the rows are CUDA's (CuPy's count and names, what
    :func:`open` opens), since NVML ignores the variable; without CuPy, NVML's rows at the
    variable's integer indices. Never raises. ``nvml``/``cupy`` are the modules (tests pass fakes).
    """
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:  # NVML lists every GPU of the host; cuda:N is the Nth visible one
        names, cuda_reason = _cuda_names(cupy)
        if names:
            return [DeviceStatus(f"{KIND}:{i}", n, True) for i, n in builtins.enumerate(names)]
    gpus, nvml_reason = _nvml.gpus(nvml)
    if gpus and visible is None:
        return [DeviceStatus(f"{KIND}:{i}", g.name, True) for i, g in builtins.enumerate(gpus)]
    if gpus and visible is not None:  # no CuPy: NVML's rows of the visible integer indices
        picked = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        rows = [gpus[v].name for v in picked if v < len(gpus)]
        return [DeviceStatus(f"{KIND}:{i}", n, True) for i, n in builtins.enumerate(rows)] or [
            DeviceStatus(KIND, "-", False, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU")
        ]
    names, cuda_reason = _cuda_names(cupy)
    if names:
        return [DeviceStatus(f"{KIND}:{i}", name, True) for i, name in builtins.enumerate(names)]
    return [
        DeviceStatus(
            KIND, "-", False, f"{nvml_reason}; {cuda_reason}" if nvml_reason else cuda_reason
        )
    ]


def open(index: int = 0) -> CudaDevice:  # noqa: A001 - backend protocol
    """:class:`CudaDevice` ``index``.

    Raises:
        DeviceUnavailableError: CuPy missing, CUDA unusable, or no such GPU (says why).
    """
    return CudaDevice(int(index))


def roofline_plan(info: Any, name: str = "full") -> Any:
    """The roofline plan of a GPU described by ``info`` (:func:`cuda_roofline_plan`)."""
    return cuda_roofline_plan(info, name)
