"""The CUDA device without a GPU: fallbacks, identity, clock, memory refusals, probe replays
and checks, op implementations — on a numpy-backed fake GPU (tests/fakegpu.py). The
``gpu``-marked tests at the end run only on a real GPU (``roofprof selftest`` runs them)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from fakegpu import FakeCudaError, fake_cupy, fake_device, fake_nvml

from roofprof import devices
from roofprof.devices import cuda as cuda_mod
from roofprof.devices.base import CheckResult
from roofprof.devices.cuda import (
    DELAY_TARGET_S,
    CublasGemm,
    CudaDevice,
    CudaEventClock,
    CudaKernelError,
    CupyBuffers,
    CupyKernels,
    CupyReference,
    NumbaKernels,
    TorchGemm,
    attention_group,
    bf16_bits,
    bf16_to_f32,
    dtype_unsupported,
    flush_bytes_for,
    kernels_module,
    memory_refusal,
)
from roofprof.devices.cuda import device as cuda_device_mod
from roofprof.devices.cuda import probes as cpb
from roofprof.errors import ConfigError, DeviceUnavailableError, RoofprofError, UnknownNameError
from roofprof.models import llama_ops
from roofprof.specs import load_model
from roofprof.workload import Op

cm = kernels_module("cuda_models")


def gemm_op(m, n, k, dtype="bf16", name="op"):
    return Op(
        name, "gemm", "decode" if m <= 16 else "prefill", m, n, k, dtype, 2.0 * m * n * k, 1.0
    )


# --------------------------------------------------------------------------- fallbacks


def test_no_cupy_is_unavailable_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(
        DeviceUnavailableError, match=r"CuPy is not installed.*pip install 'roofprof\[cuda12\]'"
    ):
        CudaDevice(0)


def test_cuda_runtime_error_is_unavailable():
    cp = fake_cupy()

    def broken():
        raise FakeCudaError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    cp.cuda.runtime.getDeviceCount = broken
    with pytest.raises(
        DeviceUnavailableError, match="no usable CUDA GPU: cudaErrorInsufficientDriver"
    ):
        CudaDevice(0, cupy=cp, nvml=fake_nvml())


def test_missing_index_lists_the_gpus():
    with pytest.raises(
        DeviceUnavailableError, match=r"cuda:3 does not exist: CUDA sees 2 GPU\(s\)"
    ):
        CudaDevice(3, cupy=fake_cupy(device_count=2), nvml=fake_nvml())


def test_real_cupy_without_a_gpu_is_unavailable():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:  # noqa: BLE001 - the expected state here
        pass
    with pytest.raises(DeviceUnavailableError, match="no usable CUDA GPU"):
        CudaDevice(0)


def test_select_cuda_without_gpu_is_an_exit_2_error(monkeypatch):
    monkeypatch.setattr(
        cuda_mod,
        "enumerate",
        lambda: [
            devices.DeviceStatus("cuda", "-", False, "no NVIDIA driver (NVML library not found)")
        ],
    )
    with pytest.raises(DeviceUnavailableError) as info:
        devices.select("cuda:0")
    assert isinstance(info.value, RoofprofError) and info.value.exit_code == 2
    assert "no NVIDIA driver" in str(info.value)


def test_select_auto_falls_back_to_cpu_when_cuda_is_unusable(monkeypatch):
    monkeypatch.setattr(
        cuda_mod,
        "enumerate",
        lambda: [devices.DeviceStatus("cuda:0", "NVIDIA H100 80GB HBM3", True)],
    )
    monkeypatch.setitem(sys.modules, "cupy", None)
    sel = devices.select_device("auto")
    assert sel.device.info.kind == "cpu"
    assert "not usable" in sel.reason and "CuPy is not installed" in sel.reason


def test_select_cuda_opens_the_cuda_device(monkeypatch):
    monkeypatch.setattr(
        cuda_mod,
        "enumerate",
        lambda: [devices.DeviceStatus("cuda:0", "NVIDIA H100 80GB HBM3", True)],
    )
    monkeypatch.setattr(cuda_device_mod, "import_cupy", lambda: fake_cupy())
    monkeypatch.setattr(
        cuda_device_mod,
        "_nvml_identity",
        lambda nv, pci, index: (
            {"name": "NVIDIA H100 80GB HBM3", "nvml_index": 0, "max_sm_clock_mhz": 1980},
            "",
        ),
    )
    dev = devices.select("cuda:0")
    assert dev.info.kind == "cuda" and dev.info.spec_id == "h100-sxm"


# -------------------------------------------------------------------------- identity, clock, memory


def test_identity_from_cuda_attributes_and_nvml():
    dev = CudaDevice(0, cupy=fake_cupy(sm=132, l2=50 * 2**20), nvml=fake_nvml())
    info = dev.info
    assert (info.kind, info.label, info.name, info.spec_id) == (
        "cuda",
        "cuda:0",
        "NVIDIA H100 80GB HBM3",
        "h100-sxm",
    )
    assert info.compute_units == 132 and info.cache_bytes == {"l2": 50 * 2**20}
    assert info.clock_mhz == 1980.0 and info.memory_bytes == 16 << 30
    assert info.extra["compute_capability"] == "9.0" and info.extra["power_limit_w"] == "700"
    assert info.extra["driver"] == "580.00" and dev.cc == (9, 0)
    assert dev.spec.id == "h100-sxm"


def test_identity_without_nvml_uses_cuda_and_marks_telemetry_unavailable():
    dev = CudaDevice(0, cupy=fake_cupy(clock_khz=None), nvml=fake_nvml(fail_init=True))
    assert dev.info.name == "Fake GPU" and dev.info.spec_id is None and dev.info.clock_mhz is None
    with dev.sampler() as s:
        pass
    summary = s.summary()
    assert not summary.available and "Driver Not Loaded" in summary.reason


def test_nvml_sampler_reads_the_matched_gpu():
    dev = CudaDevice(0, cupy=fake_cupy(), nvml=fake_nvml())
    with dev.sampler(interval_s=0.005) as s:
        time.sleep(0.03)
    summary = s.summary()
    assert (
        summary.available and summary.sm_clock_mhz_median == 1755 and summary.power_w_median == 300
    )


def test_event_clock_converts_milliseconds_to_seconds():
    cp = fake_cupy()
    clock = CudaEventClock(cp)
    clock.start()
    time.sleep(0.02)
    elapsed = clock.stop()
    assert 0.015 < elapsed < 0.5
    with pytest.raises(RuntimeError, match="before start"):
        clock.stop()


def test_event_clock_names_the_kernel_on_a_cuda_error():
    dev = fake_device()
    clock = dev.clock()
    clock.start()
    dev.last_kernel = "gemv_bf16_m1"
    dev.cupy.state["sync_error"] = "cudaErrorIllegalAddress: an illegal memory access"
    with pytest.raises(CudaKernelError, match="gemv_bf16_m1.*cudaErrorIllegalAddress"):
        clock.stop()
    with pytest.raises(CudaKernelError, match="after my_kernel.*IllegalAddress"):
        dev.checked("my_kernel")


def test_clock_hides_launch_latency_behind_a_globaltimer_delay():
    dev = fake_device()
    clock = dev.clock()
    clock.start()
    clock.stop()
    clock.start()
    clock.stop()
    # no calibration: one checked launch, then one probe_delay_ns of 60-100 µs per start event
    assert dev.fake_kernels.launches.count("probe_delay_ns") == 3
    assert "probe_fma_fp32" not in dev.fake_kernels.launches
    assert (
        set(dev.fake_kernels.delays) == {int(DELAY_TARGET_S * 1e9)}
        and 60e-6 <= DELAY_TARGET_S <= 100e-6
    )
    assert (
        "launch latency hidden by probe_delay_ns" in dev.delay_note
        and "%globaltimer" in dev.delay_note
    )
    before = len(dev.fake_kernels.launches)
    plain = dev.clock(hide_launch=False)
    plain.start()
    plain.stop()
    assert len(dev.fake_kernels.launches) == before


def test_a_delay_that_reports_less_than_asked_is_disabled():
    dev = fake_device(bug="delay_short")
    clock = dev.clock()
    for _ in range(3):
        clock.start()
        clock.stop()
    assert dev.fake_kernels.launches.count("probe_delay_ns") == 1  # the check only
    assert "not hidden" in dev.delay_note and "less than asked" in dev.delay_note


def test_a_delay_kernel_that_does_not_compile_is_disabled():
    dev = fake_device()
    real = dev.launch

    def launch(entry, *a, **k):
        if entry == "probe_delay_ns":
            raise DeviceUnavailableError("kernels/cuda/probes.cu did not compile")
        return real(entry, *a, **k)

    dev.launch = launch
    clock = dev.clock()
    clock.start()
    clock.stop()
    assert "not hidden" in dev.delay_note and "did not compile" in dev.delay_note


def test_memory_refusal_arithmetic():
    assert memory_refusal(9 * 2**30, 10 * 2**30, "x") is None
    msg = memory_refusal(9.5 * 2**30, 10 * 2**30, "op 'q_proj'", "cuda:0")
    assert (
        "op 'q_proj' needs 9.50 GiB" in msg
        and "only 10.00 GiB of cuda:0 is free" in msg
        and "90%" in msg
    )
    assert flush_bytes_for(60 * 2**20) == 120 * 2**20 and flush_bytes_for(0) == 64 * 2**20


def test_allocations_are_refused_before_allocating():
    dev = fake_device(free=1 << 30)
    calls = []
    real_empty = dev.cupy.empty
    dev.cupy.empty = lambda *a, **k: calls.append(a) or real_empty(*a, **k)
    with pytest.raises(
        ConfigError, match=r"needs 2.00 GiB of device memory but only 1.00 GiB of cuda:0 is free"
    ):
        dev.require(2 << 30, "test buffer")
    with pytest.raises(ConfigError, match="op 'big'"):
        CupyKernels(dev).prepare(gemm_op(1, 32768, 32768, name="big"), np.random.default_rng(0))
    assert calls == []


def test_flush_memsets_at_least_twice_the_l2_then_reads_all_of_it():
    dev = fake_device(l2=48 * 2**20)
    dev.flush()
    dev.flush()
    assert dev.flush_bytes == 96 * 2**20 and dev._flush_buf.nbytes == 96 * 2**20
    assert dev.cupy.state["memsets"] == 2
    # each flush: the memset, then an L1-bypassing read of the whole buffer as its last step,
    # so the memset's dirty lines are written back before the start event
    assert dev.fake_kernels.launches == [f"memset {96 * 2**20}", "probe_read_u4"] * 2
    assert dev.fake_kernels.reads == [("probe_read_u4", 96 * 2**20, 1)] * 2
    assert cm.READ_PROBE_ENTRIES["l2"] == "probe_read_u4"
    assert "clean lines" in dev.flush_note and dev.describe()["flush"] == dev.flush_note


def test_flush_without_the_read_kernel_is_a_memset_and_says_so():
    dev = fake_device()
    real = dev.launch

    def launch(entry, *a, **k):
        if entry == "probe_read_u4":
            raise DeviceUnavailableError("kernels/cuda/probes.cu did not compile")
        return real(entry, *a, **k)

    dev.launch = launch
    dev.flush()
    dev.flush()
    assert dev.cupy.state["memsets"] == 2 and "memset only" in dev.flush_note


def test_dtype_support_by_architecture():
    assert dtype_unsupported((8, 0), "fp8", "mma.sync").startswith(
        "fp8 mma.sync needs compute capability 8.9"
    )
    assert dtype_unsupported((8, 9), "fp8", "mma.sync") is None
    assert "8.0" in dtype_unsupported((7, 5), "bf16", "cublas")
    dev = fake_device(cc="80")
    names = {p.name for p in dev.probes()}
    skipped = {s["probe"]: s["reason"] for s in cpb.skipped_probes(dev)}
    assert "mma.sync-fp8" not in names and "mma.sync-bf16" in names
    assert "8.9" in skipped["mma.sync-fp8"] and "sm_80" in skipped["mma.sync-fp8"]
    old = fake_device(cc="75")
    assert "mma.sync-bf16" not in {p.name for p in old.probes()}
    assert "bf16 gemv needs compute capability 8.0" in CupyKernels(old).supports(gemm_op(1, 64, 64))


# --------------------------------------------------------------------------- probe replays


SHIM = r"""
#pragma once
#include <cmath>
#include <cstring>
#include <cstdint>
struct dim3_ { unsigned x, y, z; };
static dim3_ blockIdx, threadIdx, blockDim, gridDim;
static unsigned g_last;
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return uint4{a, b, c, d};
}
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline long long __double_as_longlong(double d) {
  long long u; std::memcpy(&u, &d, 8); return u;
}
static inline void __syncthreads() {}
template <typename T> static inline T __ldg(const T* p) { return *p; }
struct __half2 { _Float16 x, y; };
static inline __half2 __floats2half2_rn(float a, float b) {
  return __half2{(_Float16)a, (_Float16)b};
}
static inline __half2 __float2half2_rn(float a) { return __half2{(_Float16)a, (_Float16)a}; }
static inline _Float16 fma16(_Float16 a, _Float16 b, _Float16 c) {
  return (_Float16)((double)a * (double)b + (double)c);
}
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __half2{fma16(a.x, b.x, c.x), fma16(a.y, b.y, c.y)};
}
static inline uint16_t bf16_from_double(double v) {
  int e; double m = std::frexp(v, &e);
  double r = std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
  float f = (float)r; unsigned u; std::memcpy(&u, &f, 4); return (uint16_t)(u >> 16);
}
static inline double bf16_to_double(uint16_t b) {
  unsigned u = (unsigned)b << 16; float f; std::memcpy(&f, &u, 4); return f;
}
struct __nv_bfloat162 { uint16_t x, y; };
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{bf16_from_double(a), bf16_from_double(b)};
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline uint16_t fmab(uint16_t a, uint16_t b, uint16_t c) {
  return bf16_from_double(bf16_to_double(a) * bf16_to_double(b) + bf16_to_double(c));
}
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
  return __nv_bfloat162{fmab(a.x, b.x, c.x), fmab(a.y, b.y, c.y)};
}
"""

MAIN = r"""
#include "probes_host.cpp"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace roofprof_probes;
static void set_tid(unsigned tid, unsigned threads) {
  blockDim.x = 256; gridDim.x = threads / 256; blockIdx.x = tid / 256; threadIdx.x = tid % 256;
}
int main(int argc, char** argv) {
  std::vector<unsigned> out(1 << 20, 0);
  const char* cmd = argv[1];
  if (!strcmp(cmd, "fma")) {
    const char* dt = argv[2];
    unsigned seed = strtoul(argv[3], 0, 0), tid = strtoul(argv[4], 0, 0);
    int iters = atoi(argv[5]);
    set_tid(tid, 1 << 16);
    if (!strcmp(dt, "fp32")) fma_body<float>(iters, seed, 0, out.data());
    else if (!strcmp(dt, "fp64")) fma_body<double>(iters, seed, 0, out.data());
    else if (!strcmp(dt, "fp16x2")) fma_body<__half2>(iters, seed, 0, out.data());
    else fma_body<__nv_bfloat162>(iters, seed, 0, out.data());
    printf("%u\n", g_last);
  } else if (!strcmp(cmd, "read") || !strcmp(cmd, "intensity")) {
    unsigned threads = strtoul(argv[2], 0, 0); int p = atoi(argv[3]);
    FILE* f = fopen(argv[4], "rb");
    fseek(f, 0, SEEK_END); long n = ftell(f) / 16; fseek(f, 0, SEEK_SET);
    std::vector<uint4> data(n); if (fread(data.data(), 16, n, f) != (size_t)n) return 1; fclose(f);
    for (unsigned t = 0; t < threads; ++t) {
      set_tid(t, threads);
      if (cmd[0] == 'r') read_body(data.data(), n, p, 0, out.data());
      else intensity_body(reinterpret_cast<const float4*>(data.data()), n, p, 0, out.data());
      printf("%u\n", g_last);
    }
  } else if (!strcmp(cmd, "smem")) {
    unsigned seed = strtoul(argv[2], 0, 0); int iters = atoi(argv[3]);
    // pass 0 fills the whole shared buffer (threads run one by one)
    for (int pass = 0; pass < 2; ++pass)
      for (unsigned t = 0; t < 256; ++t) {
        set_tid(t, 256); smem_body(iters, seed, 0, out.data());
        if (pass) printf("%u\n", g_last);
      }
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def probes_on_host(tmp_path_factory):
    """probes.cu compiled for the host with g++ (device intrinsics shimmed; the stored word
    recorded in ``keep``), so the numpy replays can be compared with the kernel source itself."""
    import re
    from pathlib import Path

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    d = tmp_path_factory.mktemp("probes_host")
    src = (Path(__file__).resolve().parents[1] / "kernels" / "cuda" / "probes.cu").read_text()
    src = src.replace("#include <cuda_bf16.h>", '#include "shim.h"').replace(
        "#include <cuda_fp16.h>", ""
    )
    src = src.replace(
        "if (v == flag) out[global_tid()] = v;", "g_last = v; if (v == flag) out[global_tid()] = v;"
    )
    src = re.sub(
        r'extern "C" __global__ void __launch_bounds__\(THREADS\)', "static inline void", src
    )
    src = src.replace('extern "C" __global__ void probe_empty', "static inline void probe_empty")
    src = src.replace("__device__ __forceinline__", "inline").replace("__shared__", "static")
    (d / "probes_host.cpp").write_text(src)
    (d / "shim.h").write_text(SHIM)
    (d / "main.cpp").write_text(MAIN)
    exe = d / "harness"
    proc = subprocess.run(
        [gxx, "-O1", "-std=c++17", "-ffp-contract=off", "main.cpp", "-o", str(exe)],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode:
        pytest.skip(f"g++ could not build the host harness: {proc.stderr[:300]}")

    def run(*args) -> list[int]:
        return [
            int(v)
            for v in subprocess.check_output([str(exe), *map(str, args)], cwd=d, timeout=60).split()
        ]

    run.dir = d
    return run


@pytest.mark.parametrize("dtype", ["fp32", "fp64", "fp16x2", "bf16x2"])
def test_fma_replay_matches_probes_cu(probes_on_host, dtype):
    for tid in (0, 7, 40001, 65535):
        (c,) = probes_on_host("fma", dtype, cpb.FMA_SEED, tid, 3)
        assert c == cpb.fma_probe_fold(dtype, cpb.FMA_SEED, tid, 3, contracted_init=False)


def test_read_smem_intensity_replays_match_probes_cu(probes_on_host):
    rng = np.random.default_rng(1)
    threads = 512
    n = threads * 5 + 13
    words = rng.integers(0, 2**32, size=(n, 4), dtype=np.uint64).astype(np.uint32)
    words.tofile(probes_on_host.dir / "r.bin")
    assert (
        probes_on_host("read", threads, 3, "r.bin")
        == cpb.read_probe_folds(words, threads, 3).tolist()
    )
    x = (rng.random((n, 4)) + 0.5).astype(np.float32)
    x.tofile(probes_on_host.dir / "i.bin")
    for nfma in (1, 6):
        assert (
            probes_on_host("intensity", threads, nfma, "i.bin")
            == cpb.intensity_probe_folds(x, threads, nfma).tolist()
        )
    for seed, iters in ((12345, 11), (3, 1)):
        assert (
            probes_on_host("smem", seed, iters)
            == cpb.smem_probe_fold(np.arange(256), seed, iters).tolist()
        )


def test_replay_helpers():
    assert cpb.round_to_precision(1.0 + 2**-9, 8) == 1.0  # tie to even
    assert cpb.round_to_precision(1.0 + 3 * 2**-9, 8) == 1.0 + 2**-7
    with pytest.raises(ValueError, match="low 4 bits"):
        cpb.fma_probe_fold("fp32", 1, 0, 1)
    assert cpb.fma_probe_fold("fp32", cpb.FMA_SEED, 5, 2, True) != cpb.fma_probe_fold(
        "fp32", cpb.FMA_SEED, 6, 2, True
    )
    res = cpb.flag_check(
        np.array([cpb.POISON, 7, cpb.POISON], np.uint32), np.array([1, 7, 7], np.uint32), 7, "x"
    )
    assert not res.ok and res.max_abs_error == 1  # thread 2 should have written 7
    assert bf16_to_f32(bf16_bits(np.array([1.5, -0.25], np.float32))).tolist() == [1.5, -0.25]


# --------------------------------------------------------------------------- probes on the fake GPU


def _setup(p):
    kw = {
        "bandwidth": {"working_set_bytes": 4 << 20},
        "gemm": {"size": 64},
        "intensity": {"working_set_bytes": 1 << 20, "fmas_per_element": 8},
    }.get(p.kind, {})
    return p.setup(**kw)


def test_every_probe_passes_its_check_on_a_correct_fake_gpu():
    dev = fake_device()
    probes = dev.probes()
    names = [p.name for p in probes]
    for expected in (
        "read",
        "copy",
        "read-l2",
        "read-l1",
        "smem",
        "d2d-copy",
        "fma-fp32",
        "fma-fp64",
        "fma-bf16x2",
        "mma.sync-bf16",
        "mma.sync-fp8",
        "mma.sync-int8",
        "gemm-fp16",
        "intensity-fp32",
    ):
        assert expected in names
    for p in probes:
        res = _setup(p).check()
        assert res.ok, (p.name, res.note)


def test_l2_probes_bypass_l1_and_the_l1_probe_fits_l1_per_sm():
    dev = fake_device(sm=132, l2=50 << 20)
    by = {p.name: p for p in dev.probes()}
    assert by["read-l2"].level == "l2" and by["read-l1"].level == "l1"
    for name in ("read", "read-l2"):
        assert "ld.global.cg" in by[name].accounting and "L1 bypassed" in by[name].accounting
    # the sweep and the L2 probe launch the non-L1 entry; the L1 probe the L1-allocating one
    l2 = by["read-l2"].setup(working_set_bytes=0)
    sweep = by["read"].setup(working_set_bytes=4 << 20)
    l1 = by["read-l1"].setup(working_set_bytes=1 << 30)  # the sweep's size is ignored
    assert (
        l2.params["entry"]
        == sweep.params["entry"]
        == cm.READ_PROBE_ENTRIES["l2"]
        == "probe_read_u4"
    )
    assert l1.params["entry"] == cm.READ_PROBE_ENTRIES["l1"] == "probe_read_l1_u4"
    launch = cm.probe_launch("probe_read_l1_u4", 132)
    n_vec = l1.params["n_vec"]
    assert n_vec == cm.read_probe_n_vec_for_sm_footprint(
        cpb.L1_PROBE_SM_FOOTPRINT_BYTES, launch, 132
    )
    assert l1.params["sm_footprint_bytes"] <= cpb.L1_PROBE_SM_FOOTPRINT_BYTES <= 128 * 1024
    # the L2 probe's per-SM footprint would fit L1: only the bypass keeps it an L2 measurement
    assert l2.params["sm_footprint_bytes"] < 256 * 1024
    l1.run(2)
    assert dev.fake_kernels.reads[-1] == ("probe_read_l1_u4", 16 * n_vec, 2)
    assert l1.check().ok and l2.check().ok


@pytest.mark.parametrize("bug, probe", [("read_wrong", "read"), ("fma_never", "fma-fp32")])
def test_a_wrong_probe_kernel_fails_its_check(bug, probe):
    dev = fake_device(bug=bug)
    p = next(p for p in dev.probes() if p.name == probe)
    res = _setup(p).check()
    assert not res.ok


def test_probe_accounting_and_launch_geometry():
    from roofprof.kernels import cuda_models as cm

    dev = fake_device(sm=6)
    by = {p.name: p for p in dev.probes()}
    calls = []
    dev.launch = lambda entry, grid, block, args, shared_mem=0: calls.append(
        (entry, grid, block, args)
    )
    read = by["read"].setup(working_set_bytes=4 << 20)
    assert read.bytes_per_rep == 16 * (4 << 20) // 16 and read.flops_per_rep == 0
    read.run(3)
    entry, grid, block, args = calls[-1]
    assert (
        entry == "probe_read_u4" and grid[0] % 6 == 0 and block == (256, 1, 1) and int(args[2]) == 3
    )
    copy = by["copy"].setup(working_set_bytes=4 << 20)
    assert (
        copy.bytes_per_rep == cm.copy_probe_bytes((4 << 20) // 32)
        and copy.working_set_bytes == 4 << 20
    )
    launch = cm.probe_launch("probe_fma_fp32", 6)
    fma = by["fma-fp32"].setup()
    assert (
        fma.flops_per_rep
        == cm.fma_probe_flops("fp32", cpb.ITERS_PER_REP, launch)
        == 2 * 16 * 8 * 256 * launch.threads
    )
    fma.run(2)
    assert int(calls[-1][3][0]) == 2 * cpb.ITERS_PER_REP
    mma = by["mma.sync-bf16"].setup()
    assert mma.flops_per_rep == cm.mma_probe_flops(
        "bf16", cpb.ITERS_PER_REP, cm.probe_launch("probe_mma_bf16", 6)
    )
    smem = by["smem"].setup(working_set_bytes=1)
    assert smem.bytes_per_rep == cpb.SMEM_ITERS_PER_REP * 8 * 16 * launch.threads
    sweep = by["intensity-fp32"].setup(working_set_bytes=8 << 20, fmas_per_element=16)
    n_vec = (8 << 20) // 16
    assert sweep.params["nfma"] == 8 and sweep.bytes_per_rep == 16 * n_vec
    assert sweep.flops_per_rep / sweep.bytes_per_rep == cm.intensity_of(8) == 4.0
    assert cpb.split_iters(2 * cpb.MAX_ITERS_PER_LAUNCH + 5) == [cpb.MAX_ITERS_PER_LAUNCH] * 2 + [5]


# --------------------------------------------------------------- op implementations on the fake GPU


@pytest.mark.parametrize(
    "m, n, k, entry",
    [
        (1, 300, 1000, "gemv_bf16_m1"),
        (3, 37, 1003, "gemv_bf16_m4"),
        (200, 136, 264, "gemm_mma_bf16_bf16"),
    ],
)
def test_cupy_kernels_check_passes_on_a_correct_fake(m, n, k, entry):
    dev = fake_device(sm=132)
    prep = CupyKernels(dev).prepare(gemm_op(m, n, k), np.random.default_rng(0))
    res = prep.check()
    assert res.ok, res.note
    assert any(e.startswith(entry) for e in dev.fake_kernels.launches)
    prep.release()


def test_split_k_gemv_plan_and_wrong_kernels_fail():
    dev = fake_device(sm=132)
    prep = CupyKernels(dev).prepare(gemm_op(4, 1024, 4096, "fp16"), np.random.default_rng(1))
    assert prep.kernels == 2 and "split-K" in prep.note
    assert prep.check().ok
    for bug, shape in (
        ("splitk_reduce", (4, 1024, 4096)),
        ("gemv_tail", (1, 64, 1003)),
        ("gemm_edge", (64, 130, 64)),
    ):
        bad = fake_device(sm=132, bug=bug)
        res = CupyKernels(bad).prepare(gemm_op(*shape, "fp16"), np.random.default_rng(2)).check()
        assert not res.ok, bug


def test_cublas_impl_on_the_fake_and_support_reasons():
    dev = fake_device()
    prep = CublasGemm(dev).prepare(gemm_op(5, 70, 40, "fp32"), np.random.default_rng(3))
    assert prep.check().ok
    assert "fp8" in CublasGemm(dev).supports(gemm_op(1, 8, 8, "fp8"))
    assert "bf16/fp16 only" in CupyKernels(dev).supports(gemm_op(1, 8, 8, "fp32"))
    assert "K % 8" in CupyKernels(dev).supports(gemm_op(64, 8, 12))
    assert "fp32/fp16 only" in NumbaKernels(dev).supports(gemm_op(1, 8, 8, "bf16"))
    assert "simulator" in NumbaKernels(dev).supports(gemm_op(1, 8, 8, "fp16"))
    assert "GEMM/GEMV ops only" in CublasGemm(dev).supports(
        Op("attn_norm", "norm", "decode", 1, 8, 0, "bf16", 1, 1)
    )
    assert (
        TorchGemm(dev).supports(gemm_op(1, 8, 8)) is not None
        or sys.modules["torch"].cuda.is_available()
    )


def test_cupy_buffers_poison_and_nonfinite_count():
    dev = fake_device()
    bufs = CupyBuffers(dev, {"a": (4, 8)}, "bf16", "t")
    bufs.poison("a")
    assert bufs.nonfinite("a") == 32
    bufs.fill_random("a", 5)
    vals = bufs.host("a")
    assert bufs.nonfinite("a") == 0 and np.all(np.abs(vals) <= 1) and np.any(vals != 0)


def test_reference_ops_cover_the_non_gemm_ops_of_a_pass():
    dev = fake_device()
    spec = load_model("llama-3.2-1b")
    ref = CupyReference(dev)
    rng = np.random.default_rng(4)
    covered = set()
    for phase, kw in (
        ("decode", {"batch": 2, "context_tokens": 40}),
        ("prefill", {"batch": 1, "prompt_tokens": 24}),
    ):
        for op in llama_ops(spec, phase, dtype="bf16", **kw).ops:
            if op.kind == "gemm":
                assert ref.supports(op) is not None
                continue
            assert ref.supports(op) is None, op.name
            prep = ref.prepare(op, rng)
            res = prep.check()
            assert res.ok, (phase, op.name, res.note)
            covered.add(op.name)
            prep.release()
    assert {"attention", "attn_norm", "rope", "silu_mul", "attn_residual", "embedding"} <= covered


@pytest.mark.parametrize(
    "model, group",
    [("llama-3.1-8b", 4), ("llama-3.1-70b", 8), ("llama-3.2-1b", 4), ("llama-3.2-3b", 3)],
)
def test_attention_group_is_inferred_from_the_op_bytes(model, group):
    spec = load_model(model)
    assert spec.num_heads // spec.num_kv_heads == group
    for phase, kw in (
        ("decode", {"batch": 3, "context_tokens": 100}),
        ("prefill", {"batch": 2, "prompt_tokens": 64}),
    ):
        op = next(o for o in llama_ops(spec, phase, **kw).ops if o.name == "attention")
        assert attention_group(op) == group


# --------------------------------------------------------------------------- real GPU


@pytest.mark.gpu
def test_gpu_identity_clock_flush():
    dev = CudaDevice(0)
    assert dev.info.compute_units > 0 and dev.l2_bytes > 0
    clock = dev.clock()
    clock.start()
    dev.flush()
    assert clock.stop() > 0


@pytest.mark.gpu
def test_gpu_every_probe_passes_its_check():
    dev = CudaDevice(0)
    for p in dev.probes():
        run = _setup(p)
        try:
            res = run.check()
        finally:
            run.release()
        assert res.ok, (p.name, res.note)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (16, 1024, 4096), (256, 4096, 4096)])
def test_gpu_gemm_implementations_pass_their_checks(m, n, k):
    dev = CudaDevice(0)
    rng = np.random.default_rng(0)
    for impl in dev.implementations():
        for dt in ("bf16", "fp16", "fp32"):
            op = gemm_op(m, n, k, dt)
            if impl.supports(op) is not None:
                continue
            prep = impl.prepare(op, rng)
            try:
                res = prep.check()
            finally:
                prep.release()
            assert res.ok, (impl.name, dt, res.note)


def test_launch_latency_on_the_fake():
    dev = fake_device()
    lat = dev.launch_latency(launches=20)
    assert lat["gpu_s_per_launch"] > 0 and lat["host_issue_s_per_launch"] > 0
    assert dev.fake_kernels.launches.count("probe_empty") >= 20 * 5


# ------------------------------------------------------------- selection without NVML, PCI matching


def test_selection_without_nvml_counts_gpus_through_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(device_count=2))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    rows = devices.available_devices()
    assert [r.label for r in rows if r.usable] == ["cpu", "cuda:0", "cuda:1"]
    assert devices.cuda_devices() == (["Fake GPU", "Fake GPU"], "")
    sel = devices.select_device("cuda:1")
    dev = sel.device
    assert (
        dev.info.kind == "cuda"
        and dev.info.index == 1
        and sel.reason == "cuda:1 requested (Fake GPU)"
    )
    assert "not installed" in dev.info.extra["nvml"]
    with dev.sampler() as s:
        pass
    assert not s.summary().available and "pynvml" in s.summary().reason
    auto = devices.select_device("auto")
    assert auto.device.info.kind == "cuda" and auto.reason == "auto: GPU 'Fake GPU' works (cuda:0)"
    with pytest.raises(UnknownNameError, match="cuda:1"):
        devices.select("cuda:2")


def test_without_nvml_and_cupy_the_reason_names_both(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    (row,) = cuda_mod.enumerate()
    assert not row.usable and "pynvml" in row.reason and "CuPy is not installed" in row.reason


def test_nvml_gpu_is_matched_by_the_full_pci_bus_id():
    nv = fake_nvml(
        gpus=(
            ("NVIDIA A100-SXM4-80GB", "00000000:1B:00.0"),
            ("NVIDIA H100 80GB HBM3", "00000001:1B:00.0"),
        )
    )
    dev = CudaDevice(0, cupy=fake_cupy(pci_bus_ids=("0001:1B:00.0",)), nvml=nv)
    assert dev.info.name == "NVIDIA H100 80GB HBM3" and dev.facts["nvml"]["nvml_index"] == 1
    assert dev.sampler().handle_index == 1
    first = CudaDevice(0, cupy=fake_cupy(pci_bus_ids=("0000:1b:00.0",)), nvml=nv)
    assert first.info.name == "NVIDIA A100-SXM4-80GB" and first.sampler().handle_index == 0


def test_no_pci_match_means_telemetry_unavailable_not_a_guessed_index():
    nv = fake_nvml(gpus=(("NVIDIA H100 80GB HBM3", "00000000:1B:00.0"),))
    dev = CudaDevice(0, cupy=fake_cupy(pci_bus_ids=("0002:1B:00.0",)), nvml=nv)
    assert "telemetry unavailable" in dev.facts["nvml_reason"] and dev.info.name == "Fake GPU"
    with dev.sampler() as s:
        pass
    assert not s.summary().available and "0002:1B:00.0" in s.summary().reason


def test_the_device_holds_one_nvml_session_for_its_samplers():
    import gc

    nv = fake_nvml()
    dev = CudaDevice(0, cupy=fake_cupy(), nvml=nv)
    before = dict(nv.calls)
    for _ in range(3):
        with dev.sampler(interval_s=0.001):
            pass
    assert nv.calls == before  # no NVML start-up per telemetry block
    del dev
    gc.collect()
    assert nv.calls["shutdown"] == nv.calls["init"]


# --------------------------------------------------------------------- probe set-ups, one at a time


@pytest.mark.parametrize(
    "name", ["read", "read-l2", "copy", "smem", "d2d", "fma", "mma", "intensity"]
)
def test_each_probe_setup_checks_and_runs_alone(name):
    dev = fake_device()
    arena = cpb.ProbeArena(dev, "a test buffer", 1)
    setups = {
        "read": lambda: cpb.setup_read(dev, arena, working_set_bytes=1 << 16),
        "read-l2": lambda: cpb.setup_read(dev, arena, working_set_bytes=0, fixed_bytes=1 << 15),
        "copy": lambda: cpb.setup_copy(dev, arena, working_set_bytes=1 << 16),
        "smem": lambda: cpb.setup_smem(dev),
        "d2d": lambda: cpb.setup_d2d(dev, arena, working_set_bytes=4 << 20),
        "fma": lambda: cpb.setup_fma(dev, "fp32"),
        "mma": lambda: cpb.setup_mma(dev, "bf16"),
        "intensity": lambda: cpb.setup_intensity(
            dev, arena, working_set_bytes=1 << 16, fmas_per_element=8
        ),
    }
    run = setups[name]()
    res = run.check()
    assert res.ok, res.note
    run.run(1)
    assert run.bytes_per_rep > 0 or run.flops_per_rep > 0


# ------------------------------------------------------------ item 5: Hopper fp8/tf32/int8 ceilings


def _numpy_cublas(dev, a, w, out, dtype):
    out[...] = (np.asarray(a, np.float64) @ np.asarray(w, np.float64).T).astype(out.dtype)


@pytest.fixture
def hopper_with_libraries(monkeypatch):
    """A fake H100 whose torch has _scaled_mm and whose cuBLAS binding is a numpy product."""
    from fakegpu import fake_torch

    from roofprof.devices.cuda import impls

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    monkeypatch.setattr(impls, "_cublas_consts", lambda: (None, {}))
    monkeypatch.setattr(impls, "cublas_gemm_nt", _numpy_cublas)
    return fake_device(cc="90")


def test_hopper_mma_sync_fp8_tf32_int8_are_labelled_diagnostics(hopper_with_libraries):
    dev = hopper_with_libraries
    by = {p.name: p for p in dev.probes()}
    for dt in ("fp8", "tf32", "int8"):
        assert by[f"mma.sync-{dt}"].diagnostic and "diagnostic" in by[f"mma.sync-{dt}"].note
    assert not by["mma.sync-bf16"].diagnostic and not by["mma.sync-fp16"].diagnostic
    assert "emulated" in by["mma.sync-fp8"].note
    assert by["gemm-fp8-torch"].dtype == "fp8" and "_scaled_mm" in by["gemm-fp8-torch"].note
    assert by["gemm-tf32"].dtype == "tf32" and "FAST_TF32" in by["gemm-tf32"].note
    assert "gemm-int8" in {s["probe"] for s in cpb.skipped_probes(dev)}
    # on Ampere mma.sync is the native tensor path: a ceiling as before
    ampere = {p.name: p for p in fake_device(cc="80").probes()}
    assert not ampere["mma.sync-tf32"].diagnostic and not ampere["mma.sync-int8"].diagnostic


def test_fp8_gemm_probe_checks_against_float64(hopper_with_libraries):
    torch = sys.modules["torch"]
    p = {p.name: p for p in hopper_with_libraries.probes()}["gemm-fp8-torch"]
    run = p.setup(size=64)
    assert run.check().ok
    run.run(2)
    assert torch.scaled_mm_calls[-1] == ("float8_e4m3fn", "float8_e4m3fn", 1.0, 1.0, "bfloat16")
    assert run.flops_per_rep == 2.0 * 64**3


def test_the_ceiling_is_the_library_gemm_never_mma_sync(hopper_with_libraries):
    from roofprof.roofline.probes import measure_roofline

    dev = hopper_with_libraries
    names = [
        "mma.sync-fp8",
        "mma.sync-tf32",
        "mma.sync-int8",
        "gemm-fp8-torch",
        "gemm-tf32",
        "read-l2",
    ]
    r = measure_roofline(dev, plan="test", probes=names)
    assert not r.failed_probes, r.failed_probes
    diag = {c["probe"]: c for c in r.ceilings if c["kind"] == "diagnostic"}
    assert set(diag) == {"mma.sync-fp8", "mma.sync-tf32", "mma.sync-int8"}
    assert all("diagnostic, not the" in c["name"] and c["value"] > 0 for c in diag.values())
    roof = r.roofline
    assert "int8" not in roof.dtypes
    assert {c.dtype for c in roof.ceilings if c.kind == "compute"} == {"fp8", "tf32"}
    assert "gemm-fp8-torch" in roof.compute_ceiling("fp8").name
    assert "gemm-tf32" in roof.compute_ceiling("tf32").name
    assert not any("mma.sync" in c.name for c in roof.ceilings)


def test_fp8_gemm_probe_is_skipped_with_a_reason_where_torch_lacks_it(monkeypatch):
    from fakegpu import fake_torch

    monkeypatch.setitem(sys.modules, "torch", fake_torch(scaled_mm=False))
    reasons = {s["probe"]: s["reason"] for s in cpb.skipped_probes(fake_device(cc="90"))}
    assert "_scaled_mm" in reasons["gemm-fp8-torch"]
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    reasons = {s["probe"]: s["reason"] for s in cpb.skipped_probes(fake_device(cc="80"))}
    assert "8.9" in reasons["gemm-fp8-torch"]
    monkeypatch.setitem(sys.modules, "torch", None)
    reasons = {s["probe"]: s["reason"] for s in cpb.skipped_probes(fake_device(cc="90"))}
    assert "not installed" in reasons["gemm-fp8-torch"]


# -------------------------------------------------------- item 7: small ops, N calls per event pair


class QuantisedEventClock:
    """CUDA events with ~0.5 µs resolution: each timestamp is the simulated GPU time after a
    random idle gap, late by up to 0.5 µs and floored to a 0.5 µs tick (what
    cudaEventElapsedTime's resolution does to µs ops)."""

    name = "fake_cuda_event"
    STEP = 0.5e-6

    def __init__(self, state, seed=3):
        self.state, self.rng = state, np.random.default_rng(seed)

    def _stamp(self):
        late = self.state["t"] + self.rng.uniform(0, self.STEP)
        return math.floor(late / self.STEP) * self.STEP

    def start(self):
        self.state["t"] += self.rng.uniform(0, 3e-6)  # the GPU idles a little before each interval
        self.t0 = self._stamp()

    def stop(self):
        return self._stamp() - self.t0


class TwoMicrosecondGemv:
    """An OpImpl whose every call costs 2 µs of simulated GPU time."""

    name = "sim"

    def __init__(self, state):
        self.state, self.prepared = state, 0

    def supports(self, op):
        return None

    def prepare(self, op, rng):
        self.prepared += 1
        state = self.state

        class P:
            name, kernels, note = "sim gemv", 1, ""

            def run(self):
                state["t"] += 2e-6

            def check(self):
                return CheckResult(True, 0.0, 0.0, 1e-3, "sim")

            def release(self):
                pass

        return P()


@pytest.mark.parametrize("batched", [True, False])
def test_a_2us_op_is_timed_right_within_10_percent_at_half_us_event_resolution(batched):
    from roofprof.devices.cuda.batching import SmallOpBatching
    from roofprof.profiling.engine import check_then_time

    dev = fake_device(l2=50 << 20)
    state = {"t": 0.0}
    inner = TwoMicrosecondGemv(state)
    op = gemm_op(1, 1024, 4096, "bf16")  # 8 MiB of weights: ~2.5 µs on an H100 datasheet
    impl = SmallOpBatching(inner, dev) if batched else inner
    m = check_then_time(
        impl,
        op,
        np.random.default_rng(0),
        clock=QuantisedEventClock(state),
        budget_s=2e-3,
        warmup_s=0.0,
        max_repeats=50,
    )
    assert m.status == "ok", m.note
    errors = [abs(t / 2e-6 - 1) for t in (m.timing.min_s, m.timing.median_s)]
    if batched:
        assert max(errors) < 0.10, m.timing.samples_s[:5]
        assert inner.prepared >= 2  # rotating operand copies
    else:  # one call per event pair: the resolution alone puts the fastest call 25 % off
        assert max(errors) >= 0.10


def test_small_ops_of_the_gpu_implementations_are_batched():
    from roofprof.devices.cuda.batching import SmallOpBatching, calls_per_sample, estimate_s

    dev = fake_device(l2=50 << 20)
    impls = {i.name: i for i in dev.implementations()}
    assert all(isinstance(impls[n], SmallOpBatching) for n in ("cupy", "numba", "cublas", "torch"))
    small, big = gemm_op(1, 1024, 4096), gemm_op(4096, 4096, 4096, name="big")
    assert estimate_s(dev, small) < 20e-6 <= estimate_s(dev, big)
    assert (
        calls_per_sample(estimate_s(dev, small)) >= 8
        and calls_per_sample(estimate_s(dev, big)) == 1
    )
    prepared = impls["cupy"].prepare(small, np.random.default_rng(0))
    assert prepared.calls_per_sample >= 8 and len(prepared.copies) >= 2 and prepared.check().ok
    before = dev.fake_kernels.launches.count("gemv_bf16_m1")
    prepared.batched_calls[0]()
    assert dev.fake_kernels.launches.count("gemv_bf16_m1") - before == prepared.calls_per_sample
    assert len(prepared.calls) == len(prepared.copies)  # single calls, for per-call measurements
    prepared.release()


# ------------------------------------------------------------------------- item 11: numba on cuda:N


@pytest.mark.parametrize("index", [0, 1])
def test_numba_kernels_of_cuda_n_run_on_device_n(monkeypatch, index):
    from fakegpu import fake_numba_cuda, fake_numba_kernels

    from roofprof.devices.cuda import impls

    cuda = fake_numba_cuda(gpus=2)
    real_kernels_module = impls.kernels_module
    monkeypatch.setattr(impls, "_numba_cuda", lambda: cuda)
    monkeypatch.setattr(impls, "numba_cuda_reason", lambda: None)
    monkeypatch.setattr(
        impls,
        "kernels_module",
        lambda name: (
            fake_numba_kernels(cuda) if name == "numba_cuda" else real_kernels_module(name)
        ),
    )
    cp = fake_cupy(device_count=2, pci_bus_ids=("0000:1B:00.0", "0000:2C:00.0"))
    nv = fake_nvml(
        gpus=(
            ("NVIDIA H100 80GB HBM3", "00000000:1B:00.0"),
            ("NVIDIA H100 80GB HBM3", "00000000:2C:00.0"),
        )
    )
    dev = CudaDevice(index, cupy=cp, nvml=nv)
    for m in (1, 64):  # the GEMV and the tiled GEMM
        prepared = NumbaKernels(dev).prepare(gemm_op(m, 64, 64, "fp32"), np.random.default_rng(0))
        prepared.run()
        prepared.run()
        prepared.release()
    assert cuda.log and all(d == index for _, d in cuda.log), cuda.log
    assert [k for k, _ in cuda.log].count("launch") == 4
    assert cuda.current == [0]  # every context pushed was popped


def test_grouped_timing_of_batched_small_ops_is_per_call_too():
    from roofprof.devices.cuda.batching import SmallOpBatching
    from roofprof.profiling.engine import check_then_time_group

    dev = fake_device(l2=50 << 20)
    state = {"t": 0.0}
    impl = SmallOpBatching(TwoMicrosecondGemv(state), dev)
    ops = [gemm_op(1, 1024, 4096, name="a"), gemm_op(2, 1024, 4096, name="b")]
    ms = check_then_time_group(
        impl,
        ops,
        np.random.default_rng(0),
        clock=QuantisedEventClock(state),
        budget_s=2e-3,
        warmup_s=0.0,
        max_repeats=20,
        rounds=3,
    )
    for m in ms:
        assert m.status == "ok", m.note
        assert abs(m.timing.min_s / 2e-6 - 1) < 0.10 and abs(m.timing.median_s / 2e-6 - 1) < 0.10
