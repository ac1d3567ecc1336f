"""What this machine offers roofprof: devices, drivers, tools and libraries, and why not.

:func:`doctor_report` returns one row ``{component, ok, detail}`` per component: the CPU
(cores, caches, RAM, ISA), numba, NVML and the GPUs it lists, the device ``auto`` picks,
CUDA device support, ``nvcc``, ``ncu``, torch, CuPy and numba-cuda; with ``for_run=True``
also what ``roofprof run`` needs (transformers, torch threads, the load average). A missing
piece is a row with ``ok=False`` and the reason in ``detail``, never an exception.
``roofprof doctor`` prints the rows (:func:`roofprof.report.print_doctor`); ``roofprof run``
stores them in its report.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from typing import Any

__all__ = ["doctor_report"]


def _version(module: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(module)
    except Exception:  # noqa: BLE001
        return None


def _tool(name: str, args: list[str]) -> tuple[bool, str]:
    path = shutil.which(name)
    if path is None:
        return False, f"{name} not on PATH"
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=20)
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        return True, f"{path}: {lines[-1].strip() if lines else 'no version output'}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{path} failed to run: {exc}"


def doctor_report(*, for_run: bool = False) -> list[dict[str, Any]]:
    """Rows ``{component, ok, detail}``: devices, NVML, nvcc, ncu, torch, cupy, numba(-cuda).

    Args:
        for_run: also the rows ``roofprof run`` adds (transformers, torch threads, load).

    Runs ``nvcc --version`` and ``ncu --version`` when they are on PATH (20 s timeout each);
    never raises for a missing component.
    """
    rows: list[dict[str, Any]] = []

    def add(component: str, ok: bool, detail: str) -> None:
        rows.append({"component": component, "ok": bool(ok), "detail": detail})

    from roofprof.devices import cuda_devices, select_device
    from roofprof.devices.cpu import cpu_info

    info = cpu_info()
    caches = (", ".join(f"{k.upper()} {v // 1024} KiB" for k, v in info.cache_bytes.items())
              or "cache sizes unknown")
    add("cpu", True, f"{info.name}: {info.compute_units} cores, {caches}, "
                     f"{info.memory_bytes / 2**30:.1f} GiB RAM, ISA {info.extra.get('isa', '?')}")
    try:
        import numba

        add("numba", True, f"{numba.__version__}, {numba.get_num_threads()} threads")
    except ImportError as exc:
        add("numba", False, f"not importable: {exc}")
    names, reason = cuda_devices()
    nvml_version = _version("nvidia-ml-py")
    if names:
        add("nvml", True, f"nvidia-ml-py {nvml_version}; GPUs: "
                          + "; ".join(f"cuda:{i} {n}" for i, n in enumerate(names)))
    else:
        add("nvml", False, f"nvidia-ml-py {nvml_version or 'not installed'}: {reason}")
    try:
        sel = select_device("auto")
        add("auto device", True, f"{sel.device.info.label}: {sel.reason}")
    except Exception as exc:  # noqa: BLE001
        add("auto device", False, str(exc))
    has_cuda = importlib.util.find_spec("roofprof.devices.cuda") is not None
    add("cuda device support", has_cuda,
        "roofprof.devices.cuda present" if has_cuda
        else "roofprof.devices.cuda missing: only the CPU device can be measured")
    ok, detail = _tool("nvcc", ["--version"])
    add("nvcc", ok, detail)
    ok, detail = _tool("ncu", ["--version"])
    add("ncu", ok, detail)
    try:
        import torch

        cuda = torch.cuda.is_available()
        add("torch", True, f"{torch.__version__}; CUDA {'available' if cuda else 'not available'}"
                           + (f" ({torch.cuda.get_device_name(0)})" if cuda else ""))
    except Exception as exc:  # noqa: BLE001
        add("torch", False, f"not importable: {exc}")
    try:
        import cupy

        avail = cupy.is_available()
        add("cupy", bool(avail), f"{cupy.__version__}; "
                                 + ("GPU available" if avail else "no usable GPU/driver"))
    except Exception as exc:  # noqa: BLE001
        add("cupy", False, f"not importable: {type(exc).__name__}: {exc}")
    try:
        from numba import cuda as ncuda

        sim = (bool(getattr(ncuda, "simulator_enabled", False))
               or "simulator" in type(ncuda).__module__)
        avail = ncuda.is_available()
        version = _version("numba-cuda")
        state = ("simulator (NUMBA_ENABLE_CUDASIM=1)" if sim
                 else ("GPU available" if avail else "no usable GPU/driver"))
        add("numba-cuda", bool(avail) and not sim,
            f"numba-cuda {version or '(built-in numba.cuda)'}; {state}")
    except Exception as exc:  # noqa: BLE001
        add("numba-cuda", False, f"not importable: {exc}")
    if for_run:
        rows.extend(_run_rows())
    return rows


def _run_rows() -> list[dict[str, Any]]:
    """What ``roofprof run`` needs beyond the doctor: transformers, torch threads, load."""
    rows: list[dict[str, Any]] = []
    has_tf = importlib.util.find_spec("transformers") is not None
    rows.append({"component": "transformers", "ok": has_tf,
                 "detail": "installed: validate runs LlamaForCausalLM" if has_tf
                 else "not installed: validate runs the plain-torch Llama "
                      "(pip install 'roofprof[hf]' for HF)"})
    try:
        import torch

        rows.append({"component": "torch threads", "ok": True,
                     "detail": f"{torch.get_num_threads()} intra-op threads"})
    except ImportError:  # the doctor's own "torch" row already says so
        pass
    from roofprof.telemetry import loadavg

    load = loadavg()
    if load is not None:
        cpus = os.cpu_count() or 1
        busy = load[0] > 0.5 * cpus
        rows.append({"component": "load average", "ok": not busy,
                     "detail": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cpus} CPUs"
                     + (": other processes compete for the cores; measurements will be noisy"
                        if busy else "")})
    return rows
