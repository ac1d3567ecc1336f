"""GPU paths against the real libraries' behaviour: torch 2.1-2.4's ``_scaled_mm``, probes
that fail with an unexpected exception type, numba-cuda's NVVM lookup, CUDA_VISIBLE_DEVICES.

torch 2.1-2.4 declare ``_scaled_mm(...) -> (Tensor, Tensor)`` (out, amax; pytorch#106844,
native_functions.yaml); pytorch#128683 (June 2024, torch 2.5) made it return the output
alone. ``fake_torch(scaled_mm_amax=True)`` answers in the older shape. No GPU here: the
device is the fake of tests/fakegpu.py; the roofline runner and the probe code are real.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fakegpu import fake_device, fake_torch

from roofprof.devices.cuda import impls

PROBES = ["gemm-fp8-torch", "gemm-tf32", "read-l2"]


def _numpy_cublas(dev, a, w, out, dtype):
    out[...] = (np.asarray(a, np.float64) @ np.asarray(w, np.float64).T).astype(out.dtype)


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(impls, "_cublas_consts", lambda: (None, {}))
    monkeypatch.setattr(impls, "cublas_gemm_nt", _numpy_cublas)
    return fake_device(cc="90")


def test_fp8_probe_reads_the_out_amax_tuple_of_torch_2_4(hopper, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "torch", fake_torch(version="2.4.0+cu121", scaled_mm_amax=True)
    )
    p = {p.name: p for p in hopper.probes()}["gemm-fp8-torch"]
    run = p.setup(size=64)
    res = run.check()
    assert res.ok, res.note
    run.run(2)
    assert len(sys.modules["torch"].scaled_mm_calls) == 3


def test_the_roofline_on_torch_2_4_keeps_the_fp8_ceiling(hopper, monkeypatch):
    from roofprof.roofline.probes import measure_roofline

    monkeypatch.setitem(
        sys.modules, "torch", fake_torch(version="2.4.0+cu121", scaled_mm_amax=True)
    )
    r = measure_roofline(hopper, plan="test", probes=PROBES)
    assert not r.failed_probes, r.failed_probes
    assert "gemm-fp8-torch" in r.roofline.compute_ceiling("fp8").name


@pytest.mark.parametrize("error", [AttributeError, TypeError, ValueError, KeyError])
def test_a_probe_failing_with_any_exception_costs_that_probe_only(hopper, monkeypatch, error):
    from roofprof.roofline.probes import measure_roofline

    torch = fake_torch()

    def broken(*args, **kwargs):
        raise error("library answered in a shape the probe did not expect")

    torch._scaled_mm = broken
    monkeypatch.setitem(sys.modules, "torch", torch)
    r = measure_roofline(hopper, plan="test", probes=PROBES)
    (failed,) = r.failed_probes
    assert failed["probe"] == "gemm-fp8-torch" and failed["type"] == error.__name__
    assert "shape the probe did not expect" in failed["error"]
    assert any("gemm-fp8-torch" in w and error.__name__ in w for w in r.warnings)
    assert "fp8" not in r.roofline.dtypes
    assert "gemm-tf32" in r.roofline.compute_ceiling("tf32").name
    assert any(c.kind == "memory" for c in r.roofline.ceilings)


def test_keyboard_interrupt_still_ends_the_run(hopper, monkeypatch):
    from roofprof.roofline.probes import RooflineInterrupted, measure_roofline

    torch = fake_torch()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    torch._scaled_mm = interrupted
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(RooflineInterrupted):
        measure_roofline(hopper, plan="test", probes=PROBES)


# ------------------------------------------------ numba-cuda and a CUDA image without nvidia-nvvm


def test_nvvm_home_is_the_toolkit_with_an_nvvm_folder(tmp_path):
    from roofprof.devices.cuda.buffers import nvvm_cuda_home

    bare, toolkit = tmp_path / "bare", tmp_path / "cuda"
    bare.mkdir()
    (toolkit / "nvvm" / "lib64").mkdir(parents=True)
    roots = (str(bare), str(toolkit))
    assert nvvm_cuda_home({}, roots) == str(toolkit)
    assert nvvm_cuda_home({"CUDA_HOME": "/opt/x"}, roots) is None  # numba-cuda reads it
    assert nvvm_cuda_home({"CUDA_PATH": "/opt/x"}, roots) is None  # cuda-pathfinder too
    assert nvvm_cuda_home({}, (str(bare),)) is None


def test_numba_reason_sets_cuda_home_and_reports_a_missing_nvvm(tmp_path, monkeypatch):
    """numba.cuda and its nvvm module stand in with the two functions the code calls
    (numba-cuda 0.30.4: ``numba.cuda.is_available``, ``numba.cuda.cudadrv.nvvm.is_available``)."""
    import types

    from roofprof.devices.cuda import buffers

    (tmp_path / "nvvm").mkdir()
    monkeypatch.setattr(buffers.nvvm_cuda_home, "__defaults__", (None, (str(tmp_path),)))
    monkeypatch.setenv("CUDA_HOME", "restored after the test")
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    nvvm = types.SimpleNamespace(is_available=lambda: False)
    cuda = types.SimpleNamespace(is_available=lambda: True)
    numba = types.ModuleType("numba")
    numba.cuda = cuda  # type: ignore[attr-defined]
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    cudadrv.nvvm = nvvm  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numba", numba)
    monkeypatch.setitem(sys.modules, "numba.cuda", cuda)
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv", cudadrv)
    reason = buffers.numba_cuda_reason()
    assert reason is not None and "no NVVM" in reason
    import os

    assert os.environ["CUDA_HOME"] == str(tmp_path)
    nvvm.is_available = lambda: True
    assert buffers.numba_cuda_reason() is None


# ------------------------------------------------------- CUDA_VISIBLE_DEVICES and NVML's GPU list


def _eight_gpus():
    from fakegpu import fake_nvml

    return fake_nvml(
        gpus=tuple((f"NVIDIA H100 80GB HBM3 #{i}", f"00000000:{i + 16:02X}:00.0") for i in range(8))
    )


def test_visible_devices_give_cuda_ordinals_not_nvml_rows(monkeypatch):
    from fakegpu import fake_cupy

    from roofprof.devices import cuda as cuda_mod

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    rows = cuda_mod.enumerate(nvml=_eight_gpus(), cupy=fake_cupy(device_count=1))
    assert [r.label for r in rows] == ["cuda:0"] and rows[0].usable
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    rows = cuda_mod.enumerate(nvml=_eight_gpus(), cupy=fake_cupy(device_count=1))
    assert len(rows) == 8  # no variable: every GPU NVML lists


def test_visible_devices_without_cupy_pick_nvml_rows(monkeypatch):
    from roofprof.devices import cuda as cuda_mod

    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,2")
    rows = cuda_mod.enumerate(nvml=_eight_gpus())
    assert [(r.label, r.name) for r in rows] == [
        ("cuda:0", "NVIDIA H100 80GB HBM3 #5"),
        ("cuda:1", "NVIDIA H100 80GB HBM3 #2"),
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (row,) = cuda_mod.enumerate(nvml=_eight_gpus())
    assert not row.usable and "hides every GPU" in row.reason
