"""What this machine offers roofprof: devices, drivers, tools and libraries, and why not.

:func:`doctor_report` returns one row ``{component, ok, detail}`` per component: the CPU
(cores, caches, RAM, ISA), numba, NVML and the GPUs it lists, the device ``auto`` picks,
CUDA device support, ``nvcc``, ``ncu``, the CUDA stack's versions (:func:`cuda_stack_versions`:
driver, CUDA runtime, the NVRTC CuPy uses, CuPy, numba-cuda, torch + its CUDA, ncu), torch,
CuPy and numba-cuda; with ``for_run=True``
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

__all__ = ["cuda_stack_versions", "doctor_report"]

_MISSING = object()


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


def _import(name: str, given: Any) -> Any:
    """``given`` when a test passes a module (None: "not installed"), else ``import name``."""
    if given is not _MISSING:
        return given
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - ImportError, or a broken install raising anything
        return None


def _cuda_int(value: Any) -> str:
    """``12090`` → ``"12.9"`` (CUDA's ``1000·major + 10·minor`` encoding)."""
    v = int(value)
    return f"{v // 1000}.{(v % 1000) // 10}"


def cuda_stack_versions(
    *,
    cupy: Any = _MISSING,
    numba_cuda: Any = _MISSING,
    torch: Any = _MISSING,
    nvml: Any = _MISSING,
    ncu: tuple[bool, str] | None = None,
) -> dict[str, str]:
    """The CUDA stack roofprof runs on, one string per component, in this order: ``driver``
    (NVML's driver version and the CUDA version it supports), ``cuda runtime`` (CuPy's),
    ``nvrtc`` (the NVRTC CuPy compiles ``kernels/cuda`` with — a ``libnvrtc`` torch loaded
    first wins — and whether fp8 ``mma.sync`` compiles under it), ``cupy``, ``numba-cuda``,
    ``torch`` (+ the CUDA it was built for), ``ncu``.

    A component that is missing reads ``"not installed"``; one that is installed but cannot
    answer reads ``"unavailable (why)"``. Never raises. The keyword arguments are the modules
    (tests pass fakes; None means not installed) and ``ncu`` the ``(ok, detail)`` of
    ``ncu --version``.

    Example::

        >>> v = cuda_stack_versions(cupy=None, numba_cuda=None, torch=None, nvml=None,
        ...                         ncu=(False, "ncu not on PATH"))
        >>> v["nvrtc"], v["ncu"]
        ('not installed (no CuPy)', 'not installed (ncu not on PATH)')
    """
    out: dict[str, str] = {}
    cp = _import("cupy", cupy)
    nv = _import("pynvml", nvml)

    def ask(fn: Any) -> str:
        try:
            return str(fn())
        except Exception as exc:  # noqa: BLE001 - no driver, no GPU, an old library
            return f"unavailable ({type(exc).__name__}: {str(exc).strip() or 'no message'})"

    driver = "not installed (no nvidia-ml-py)" if nv is None else None
    if nv is not None:
        from roofprof.devices import _nvml

        try:
            with _nvml.session(nv) as n:
                raw = n.nvmlSystemGetDriverVersion()
                driver = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception as exc:  # noqa: BLE001
            driver = f"unavailable ({getattr(exc, 'reason', None) or exc})"
    if cp is not None:
        api = ask(lambda: _cuda_int(cp.cuda.runtime.driverGetVersion()))
        driver = (
            f"{driver}; supports CUDA {api}"
            if not api.startswith("unavailable")
            else (f"{driver}; CUDA driver API {api}")
        )
    out["driver"] = driver or "unavailable"
    if cp is None:
        out["cuda runtime"] = out["nvrtc"] = "not installed (no CuPy)"
        out["cupy"] = "not installed"
    else:
        out["cuda runtime"] = ask(lambda: _cuda_int(cp.cuda.runtime.runtimeGetVersion()))
        from roofprof.devices.cuda._runtime import nvrtc_version

        nvrtc = nvrtc_version(cp)
        if nvrtc is None:
            out["nvrtc"] = "unavailable (cupy.cuda.nvrtc.getVersion() failed)"
        else:
            from roofprof._resources import kernels_module

            cm = kernels_module("cuda_models")
            fp8 = (
                "fp8 mma.sync compiles"
                if tuple(nvrtc) >= cm.FP8_MMA_MIN_NVRTC
                else f"fp8 mma.sync needs {cm.FP8_MMA_MIN_NVRTC[0]}.{cm.FP8_MMA_MIN_NVRTC[1]}+: "
                "that probe is skipped"
            )
            out["nvrtc"] = f"{nvrtc[0]}.{nvrtc[1]} (the one CuPy uses; {fp8})"
        out["cupy"] = str(getattr(cp, "__version__", "?"))
    if numba_cuda is _MISSING:
        found = importlib.util.find_spec("numba") is not None and _version("numba-cuda")
        out["numba-cuda"] = str(found) if found else "not installed"
    else:
        out["numba-cuda"] = (
            "not installed" if numba_cuda is None else str(getattr(numba_cuda, "__version__", "?"))
        )
    th = _import("torch", torch)
    if th is None:
        out["torch"] = "not installed"
    else:
        built = getattr(getattr(th, "version", None), "cuda", None)
        out["torch"] = (
            f"{getattr(th, '__version__', '?')} (CUDA {built})"
            if built
            else (f"{getattr(th, '__version__', '?')} (CPU-only build)")
        )
    ok, detail = ncu if ncu is not None else _tool("ncu", ["--version"])
    out["ncu"] = (
        detail
        if ok
        else (f"not installed ({detail})" if "not on PATH" in detail else f"unavailable ({detail})")
    )
    return out


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
    caches = (
        ", ".join(f"{k.upper()} {v // 1024} KiB" for k, v in info.cache_bytes.items())
        or "cache sizes unknown"
    )
    add(
        "cpu",
        True,
        f"{info.name}: {info.compute_units} cores, {caches}, "
        f"{info.memory_bytes / 2**30:.1f} GiB RAM, ISA {info.extra.get('isa', '?')}",
    )
    try:
        import numba

        add("numba", True, f"{numba.__version__}, {numba.get_num_threads()} threads")
    except ImportError as exc:
        add("numba", False, f"not importable: {exc}")
    names, reason = cuda_devices()
    nvml_version = _version("nvidia-ml-py")
    if names:
        add(
            "nvml",
            True,
            f"nvidia-ml-py {nvml_version}; GPUs: "
            + "; ".join(f"cuda:{i} {n}" for i, n in enumerate(names)),
        )
    else:
        add("nvml", False, f"nvidia-ml-py {nvml_version or 'not installed'}: {reason}")
    try:
        sel = select_device("auto")
        add("auto device", True, f"{sel.device.info.label}: {sel.reason}")
    except Exception as exc:  # noqa: BLE001
        add("auto device", False, str(exc))
    has_cuda = importlib.util.find_spec("roofprof.devices.cuda") is not None
    add(
        "cuda device support",
        has_cuda,
        "roofprof.devices.cuda present"
        if has_cuda
        else "roofprof.devices.cuda missing: only the CPU device can be measured",
    )
    ok, detail = _tool("nvcc", ["--version"])
    add("nvcc", ok, detail)
    ncu = _tool("ncu", ["--version"])
    add("ncu", *ncu)
    stack = cuda_stack_versions(ncu=ncu)
    add(
        "cuda stack",
        not stack["cupy"].startswith(("not installed", "unavailable")),
        "; ".join(f"{k} {v}" for k, v in stack.items()),
    )
    try:
        import torch

        cuda = torch.cuda.is_available()
        add(
            "torch",
            True,
            f"{torch.__version__}; CUDA {'available' if cuda else 'not available'}"
            + (f" ({torch.cuda.get_device_name(0)})" if cuda else ""),
        )
    except Exception as exc:  # noqa: BLE001
        add("torch", False, f"not importable: {exc}")
    try:
        import cupy

        avail = cupy.is_available()
        add(
            "cupy",
            bool(avail),
            f"{cupy.__version__}; " + ("GPU available" if avail else "no usable GPU/driver"),
        )
    except Exception as exc:  # noqa: BLE001
        add("cupy", False, f"not importable: {type(exc).__name__}: {exc}")
    try:
        from numba import cuda as ncuda

        sim = (
            bool(getattr(ncuda, "simulator_enabled", False))
            or "simulator" in type(ncuda).__module__
        )
        avail = ncuda.is_available()
        version = _version("numba-cuda")
        state = (
            "simulator (NUMBA_ENABLE_CUDASIM=1)"
            if sim
            else ("GPU available" if avail else "no usable GPU/driver")
        )
        add(
            "numba-cuda",
            bool(avail) and not sim,
            f"numba-cuda {version or '(built-in numba.cuda)'}; {state}",
        )
    except Exception as exc:  # noqa: BLE001
        add("numba-cuda", False, f"not importable: {exc}")
    if for_run:
        rows.extend(_run_rows())
    return rows


def _run_rows() -> list[dict[str, Any]]:
    """What ``roofprof run`` needs beyond the doctor: transformers, torch threads, load."""
    rows: list[dict[str, Any]] = []
    has_tf = importlib.util.find_spec("transformers") is not None
    rows.append(
        {
            "component": "transformers",
            "ok": has_tf,
            "detail": "installed: validate runs LlamaForCausalLM"
            if has_tf
            else "not installed: validate runs the plain-torch Llama "
            "(pip install 'roofprof[torch]' brings it)",
        }
    )
    try:
        import torch

        rows.append(
            {
                "component": "torch threads",
                "ok": True,
                "detail": f"{torch.get_num_threads()} intra-op threads",
            }
        )
    except ImportError:  # the doctor's own "torch" row already says so
        pass
    from roofprof.telemetry import loadavg

    load = loadavg()
    if load is not None:
        cpus = os.cpu_count() or 1
        busy = load[0] > 0.5 * cpus
        rows.append(
            {
                "component": "load average",
                "ok": not busy,
                "detail": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cpus} CPUs"
                + (
                    ": other processes compete for the cores; measurements will be noisy"
                    if busy
                    else ""
                ),
            }
        )
    return rows
