"""`roofprof doctor`'s CUDA stack versions (driver, runtime, NVRTC, CuPy, numba-cuda, torch, ncu),
and the fp8 mma.sync probe skipped under an NVRTC older than 12.4 (desk-check item 2), on the
fake CuPy."""

from __future__ import annotations

import types

import pytest
from fakegpu import fake_cupy, fake_device, fake_nvml

from roofprof.devices.cuda import nvrtc_version, skipped_probes
from roofprof.doctor import cuda_stack_versions, doctor_report

KEYS = ["driver", "cuda runtime", "nvrtc", "cupy", "numba-cuda", "torch", "ncu"]


def fake_torch(cuda="13.0"):
    return types.SimpleNamespace(
        __version__="2.11.0+cu130", version=types.SimpleNamespace(cuda=cuda)
    )


@pytest.mark.parametrize("nvrtc, fp8", [((12, 1), "skipped"), ((12, 9), "compiles")])
def test_versions_name_the_nvrtc_cupy_uses(nvrtc, fp8):
    v = cuda_stack_versions(
        cupy=fake_cupy(nvrtc=nvrtc),
        numba_cuda=types.SimpleNamespace(__version__="0.30.4"),
        torch=fake_torch(),
        nvml=fake_nvml(),
        ncu=(True, "/usr/bin/ncu: Version 2025.3.1"),
    )
    assert list(v) == KEYS
    assert v["nvrtc"].startswith(f"{nvrtc[0]}.{nvrtc[1]} (the one CuPy uses") and fp8 in v["nvrtc"]
    assert v["driver"] == "580.00; supports CUDA 12.9" and v["cuda runtime"] == "12.9"
    assert v["cupy"] == "fake" and v["numba-cuda"] == "0.30.4"
    assert v["torch"] == "2.11.0+cu130 (CUDA 13.0)" and "2025.3.1" in v["ncu"]


def test_missing_pieces_read_not_installed_or_unavailable_never_raise():
    v = cuda_stack_versions(
        cupy=None, numba_cuda=None, torch=None, nvml=None, ncu=(False, "ncu not on PATH")
    )
    assert list(v) == KEYS and all(
        x.startswith(("not installed", "unavailable")) for x in v.values()
    )
    broken = fake_cupy(nvrtc=None)
    broken.cuda.runtime.runtimeGetVersion = lambda: (_ for _ in ()).throw(
        RuntimeError("driver too old")
    )
    v = cuda_stack_versions(
        cupy=broken,
        numba_cuda=None,
        torch=fake_torch(None),
        nvml=fake_nvml(fail_init=True),
        ncu=(False, "/x/ncu failed to run: boom"),
    )
    assert v["nvrtc"].startswith("unavailable") and v["cuda runtime"].startswith("unavailable")
    assert v["driver"].startswith("unavailable") and v["torch"].endswith("(CPU-only build)")
    assert v["ncu"].startswith("unavailable")


def test_doctor_has_a_cuda_stack_row():
    rows = {r["component"]: r for r in doctor_report()}
    row = rows["cuda stack"]
    # the row is the stack's versions, each "name version", in order; ok iff CuPy is usable
    stack = cuda_stack_versions(ncu=(rows["ncu"]["ok"], rows["ncu"]["detail"]))
    assert row["detail"] == "; ".join(f"{k} {stack[k]}" for k in KEYS)
    assert row["ok"] == (not stack["cupy"].startswith(("not installed", "unavailable")))


def test_nvrtc_version_never_raises():
    assert nvrtc_version(fake_cupy(nvrtc=(12, 4))) == (12, 4)
    assert nvrtc_version(fake_cupy(nvrtc=None)) is None
    assert nvrtc_version(types.SimpleNamespace()) is None


@pytest.mark.parametrize("nvrtc", [(12, 1), (12, 3), None])
def test_fp8_mma_probe_is_skipped_with_the_reason_under_old_nvrtc(nvrtc):
    dev = fake_device(nvrtc=nvrtc)
    names = {p.name for p in dev.probes()}
    assert "mma.sync-fp8" not in names and {"mma.sync-bf16", "read", "fma-fp32"} <= names
    reason = {s["probe"]: s["reason"] for s in skipped_probes(dev)}["mma.sync-fp8"]
    assert "NVRTC 12.4" in reason
    if nvrtc:
        assert f"{nvrtc[0]}.{nvrtc[1]}" in reason


def test_fp8_mma_probe_is_kept_under_nvrtc_12_9():
    dev = fake_device(nvrtc=(12, 9))
    assert "mma.sync-fp8" in {p.name for p in dev.probes()}
    assert "mma.sync-fp8" not in {s["probe"] for s in skipped_probes(dev)}
