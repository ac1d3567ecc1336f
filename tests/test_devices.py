"""Device selection, CPU identity and the CPU op implementations (correct first)."""

from __future__ import annotations

import numpy as np
import pytest

import roofprof.devices as devices
import roofprof.devices.cuda as cuda_backend
from roofprof.devices import (
    Device,
    DeviceInfo,
    DeviceStatus,
    OpImpl,
    PreparedOp,
    compare,
    select,
    select_device,
    tolerance,
)
from roofprof.devices.cpu import CpuDevice, NumbaGemm, NumpyGemm, cache_sizes
from roofprof.errors import ConfigError, DeviceUnavailableError, RoofprofError, UnknownNameError
from roofprof.workload import Op


def gemm_op(m=1, n=48, k=64, dtype="fp32", batch=1, kind="gemm"):
    return Op(
        name="test",
        kind=kind,
        phase="decode",
        m=m,
        n=n,
        k=k,
        dtype=dtype,
        flops=2.0 * m * n * k * batch,
        bytes=4.0 * (m * k + n * k + m * n) * batch,
        batch=batch,
    )


def gpus(monkeypatch, *names, reason="no NVIDIA driver (NVML library not found)"):
    """Make the CUDA backend list ``names`` (none: one unusable row saying ``reason``)."""
    rows = [DeviceStatus(f"cuda:{i}", n, True) for i, n in enumerate(names)] or [
        DeviceStatus("cuda", "-", False, reason)
    ]
    monkeypatch.setattr(cuda_backend, "enumerate", lambda: rows)


@pytest.fixture
def no_gpu(monkeypatch):
    gpus(monkeypatch)


@pytest.fixture
def one_gpu(monkeypatch):
    class FakeCuda:
        def __init__(self, index):
            self.info = DeviceInfo(
                kind="cuda",
                index=index,
                name="NVIDIA H100 80GB HBM3",
                compute_units=132,
                memory_bytes=80 * 2**30,
            )

    gpus(monkeypatch, "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(cuda_backend, "open", lambda index: FakeCuda(index))
    return FakeCuda


def test_select_cpu():
    dev = select("cpu")
    assert isinstance(dev, Device)
    info = dev.info
    assert info.kind == "cpu" and info.label == "cpu" and info.index == 0
    assert info.compute_units >= 1 and info.memory_bytes > 0
    assert info.spec_id is None
    assert dev.free_memory_bytes() > 0
    assert set(info.to_dict()) >= {"kind", "name", "cache_bytes", "label", "extra"}


def test_auto_without_gpu_picks_cpu_and_says_why(no_gpu):
    sel = select_device("auto")
    assert sel.device.info.kind == "cpu"
    assert "no usable GPU" in sel.reason and "NVML library not found" in sel.reason


def test_cuda_without_gpu_is_unavailable_and_lists_devices(no_gpu):
    with pytest.raises(DeviceUnavailableError) as err:
        select("cuda:0")
    msg = str(err.value)
    assert "auto" in msg and "cpu" in msg and "NVML library not found" in msg
    assert isinstance(err.value, RoofprofError)


@pytest.mark.parametrize("spec", ["tpu", "cuda:x", "npu:0", ""])
def test_unknown_device_lists_choices(no_gpu, spec):
    if spec == "":
        assert select_device(spec).device.info.kind == "cpu"  # empty means auto
        return
    with pytest.raises(UnknownNameError) as err:
        select(spec)
    assert "valid choices" in str(err.value) and "cpu" in str(err.value)


def test_gpu_index_beyond_count(one_gpu):
    with pytest.raises(UnknownNameError) as err:
        select("cuda:7")
    msg = str(err.value)
    assert "'cuda:7'" in msg and "cuda:0" in msg and "cpu" in msg


def test_auto_with_gpu_picks_it(one_gpu):
    sel = select_device("auto")
    assert sel.device.info.kind == "cuda" and "cuda:0" in sel.reason
    assert select("cuda").info.index == 0
    assert select("cuda:0").info.name.startswith("NVIDIA")


def test_auto_falls_back_when_gpu_unusable(monkeypatch):
    def broken(index):
        raise DeviceUnavailableError("CUDA driver too old")

    gpus(monkeypatch, "NVIDIA A100")
    monkeypatch.setattr(cuda_backend, "open", broken)
    sel = select_device("auto")
    assert sel.device.info.kind == "cpu" and "CUDA driver too old" in sel.reason


def test_missing_backend_module_is_unavailable(monkeypatch):
    monkeypatch.setattr(
        devices, "BACKENDS", ("roofprof.devices.cpu", "roofprof.devices.nosuchbackend")
    )
    rows = devices.available_devices()
    assert rows[-1].label == "nosuchbackend" and not rows[-1].usable
    assert "roofprof.devices.nosuchbackend is not part of this roofprof build" in rows[-1].reason
    with pytest.raises(
        DeviceUnavailableError, match="not available: roofprof.devices.nosuchbackend"
    ):
        select("nosuchbackend")
    assert select_device("auto").device.info.kind == "cpu"


def test_available_devices_lists_cpu_and_why_no_gpu(no_gpu):
    rows = devices.available_devices()
    assert rows[0].label == "cpu" and rows[0].usable
    assert not rows[-1].usable and "NVML" in rows[-1].reason


def test_cuda_devices_never_raises():
    names, reason = devices.cuda_devices()
    assert isinstance(names, list) and (names or reason)


def test_cache_sizes_count_shared_caches_once(tmp_path):
    def cache(cpu, index, level, ctype, size, shared):
        d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, value in (
            ("level", level),
            ("type", ctype),
            ("size", size),
            ("shared_cpu_list", shared),
        ):
            (d / name).write_text(f"{value}\n")

    for cpu in (0, 1):
        cache(cpu, 0, 1, "Data", "32K", str(cpu))
        cache(cpu, 1, 1, "Instruction", "32K", str(cpu))
        cache(cpu, 2, 2, "Unified", "1024K", str(cpu))
        cache(cpu, 3, 3, "Unified", "32768K", "0-1")
    assert cache_sizes([0, 1], tmp_path) == {"l1": 64 * 1024, "l2": 2 * 1024**2, "l3": 32 * 1024**2}
    assert cache_sizes([0, 1], tmp_path / "nothing") == {}


def test_device_info_helpers():
    info = DeviceInfo(
        kind="cuda",
        index=2,
        name="x",
        compute_units=1,
        memory_bytes=1,
        cache_bytes={"l1": 10, "l2": 100},
    )
    assert info.label == "cuda:2" and info.last_level_cache_bytes == 100


def test_cpu_clock_flush_sampler():
    dev = CpuDevice()
    c = dev.clock()
    c.start()
    assert c.stop() >= 0
    assert dev.flush_bytes >= 2 * dev.info.last_level_cache_bytes
    dev.flush()
    with dev.sampler(interval_s=0.005) as s:
        pass
    assert s.summary() is not None


def test_compare():
    assert compare(np.ones(3), np.ones(3), 0.0).ok
    bad = compare(np.array([1.0, np.nan]), np.ones(2), 1.0)
    assert not bad.ok and "non-finite" in bad.note
    assert not compare(np.ones(3), np.ones(4), 1.0).ok
    r = compare(np.array([1.0, 2.1]), np.array([1.0, 2.0]), 0.01)
    assert (
        not r.ok
        and r.max_abs_error == pytest.approx(0.1)
        and r.max_rel_error == pytest.approx(0.05)
    )


@pytest.mark.parametrize("impl_cls", [NumpyGemm, NumbaGemm])
@pytest.mark.parametrize(
    "shape", [dict(m=1, n=48, k=64), dict(m=7, n=33, k=100), dict(m=3, n=5, k=16, batch=4)]
)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_cpu_implementations_check_and_run(impl_cls, shape, dtype):
    impl = impl_cls(CpuDevice())
    assert isinstance(impl, OpImpl)
    op = gemm_op(dtype=dtype, **shape)
    assert impl.supports(op) is None
    prepared = impl.prepare(op, np.random.default_rng(1))
    assert isinstance(prepared, PreparedOp)
    result = prepared.check()
    assert result.ok, result
    assert result.max_rel_error <= result.tolerance
    prepared.run()
    prepared.release()


def test_check_catches_a_wrong_kernel():
    impl = NumbaGemm(CpuDevice())
    prepared = impl.prepare(gemm_op(m=4, n=8, k=32), np.random.default_rng(2))
    prepared.kernel = lambda a, w, out: None  # leaves the NaN poison in place
    assert not prepared.check().ok
    prepared.kernel = lambda a, w, out: np.matmul(a, np.swapaxes(w, -1, -2) * 1.01, out=out)
    res = prepared.check()
    assert not res.ok and res.max_rel_error > res.tolerance


def test_unsupported_ops_say_why():
    dev = CpuDevice()
    for impl in dev.implementations():
        assert "bf16" in impl.supports(gemm_op(dtype="bf16"))
        assert "attention" in impl.supports(gemm_op(kind="attention"))
        with pytest.raises(ConfigError):
            impl.prepare(gemm_op(dtype="fp16"), np.random.default_rng(0))
    assert {i.name for i in dev.implementations()} == {"numpy", "numba"}


def test_prepare_refuses_ops_larger_than_free_memory(monkeypatch):
    dev = CpuDevice()
    monkeypatch.setattr(dev, "free_memory_bytes", lambda: 1000)
    with pytest.raises(ConfigError, match="GiB"):
        NumpyGemm(dev).prepare(gemm_op(m=16, n=64, k=64), np.random.default_rng(0))


# --------------------------------------------------------------------------- the backend registry


def test_registry_with_a_third_backend(monkeypatch, no_gpu):
    import types

    from roofprof.roofline.probes import RooflinePlan

    opened = []

    class FakeNpu:
        def __init__(self, index):
            opened.append(index)
            self.info = DeviceInfo(
                kind="npu",
                index=index,
                name=f"Fake NPU {index}",
                compute_units=8,
                memory_bytes=2**30,
            )

    npu = types.SimpleNamespace(
        KIND="npu",
        NAMES=("npu",),
        WHAT="NPU",
        AUTO_FALLBACK=False,
        open=FakeNpu,
        enumerate=lambda: [
            DeviceStatus("npu:0", "Fake NPU 0", True),
            DeviceStatus("npu:1", "Fake NPU 1", True),
        ],
        roofline_plan=lambda info, name: f"npu {name} plan",
    )
    monkeypatch.setattr(devices, "BACKENDS", (*devices.BACKENDS, npu))
    assert [r.label for r in devices.available_devices()] == ["cpu", "cuda", "npu:0", "npu:1"]
    sel = select_device("npu:1")
    assert (
        sel.device.info.kind == "npu"
        and opened == [1]
        and sel.reason == "npu:1 requested (Fake NPU 1)"
    )
    auto = select_device("auto")
    assert auto.device.info.index == 0 and auto.reason == "auto: NPU 'Fake NPU 0' works (npu:0)"
    with pytest.raises(UnknownNameError) as err:
        select("npu:5")
    assert "npu:1" in str(err.value) and "cpu" in str(err.value)
    assert devices.backend("npu") is npu
    assert RooflinePlan.for_device(sel.device.info, "quick") == "npu quick plan"


def test_auto_without_any_fallback_backend_says_why(monkeypatch, no_gpu):
    monkeypatch.setattr(devices, "BACKENDS", ("roofprof.devices.cuda",))
    with pytest.raises(DeviceUnavailableError, match="no usable GPU"):
        select("auto")


def test_unknown_backend_kind_lists_the_kinds():
    with pytest.raises(UnknownNameError, match="cpu"):
        devices.backend("tpu")


# ----------------------------------------------------------------- CPU probe set-ups, one at a time


@pytest.mark.parametrize(
    "name",
    [
        "read",
        "triad",
        "fma-fp32",
        "fma-fp64",
        "gemm-fp32",
        "gemm-fp64",
        "intensity-fp32",
        "intensity-fp64",
    ],
)
def test_each_cpu_probe_setup_checks_and_runs_alone(name):
    from roofprof.devices import cpu

    dev, arena = CpuDevice(), cpu.ProbeArena()
    kind, _, dtype = name.partition("-")
    if kind == "read":
        run = cpu.setup_read(dev, arena, working_set_bytes=1 << 16)
    elif kind == "triad":
        run = cpu.setup_triad(dev, arena, working_set_bytes=1 << 16)
    elif kind == "fma":
        run = cpu.setup_fma(dev, dtype)
    elif kind == "gemm":
        run = cpu.setup_gemm(dev, dtype, size=64)
    else:
        run = cpu.setup_intensity(dev, arena, dtype, working_set_bytes=1 << 16, fmas_per_element=8)
    res = run.check()
    assert res.ok, res.note
    run.run(1)
    assert run.bytes_per_rep > 0 and run.flops_per_rep > 0


def test_cpu_catalogue_is_the_setups_bound_to_the_device():
    names = [p.name for p in CpuDevice().probes()]
    assert names == [
        "read",
        "copy",
        "triad",
        "fma-fp64",
        "fma-fp32",
        "gemm-fp64",
        "gemm-fp32",
        "intensity-fp64",
        "intensity-fp32",
    ]


# --------------------------------------------------------------------------- one tolerance policy


def test_tolerance_grows_with_the_reduction_and_the_dtype():
    assert tolerance("fp32", 4096) > tolerance("fp32", 64) > tolerance("fp64", 64)
    assert tolerance("bf16", 1) > tolerance("fp16", 1) > tolerance("fp32", 1)
    assert tolerance("fp32", 1, ulps=0, growth=0) == 0.0
    assert tolerance("int8", 16) == tolerance("fp32", 16)  # unknown dtypes count as fp32
    # the CPU GEMM checks stay at least as loose as their former 16·eps·√k
    from roofprof.devices.cpu import _gemm_tolerance

    for dt, eps in (("fp32", 2.0**-23), ("fp64", 2.0**-52)):
        assert _gemm_tolerance(dt, 4096) >= 16 * eps * 64


def test_the_reference_dot_times_calls_as_long_as_babelstreams(monkeypatch):
    """The same-run Dot the DRAM ceilings are held against: each timed call runs as many
    passes as last DRAM_CALL_S (a 5 ms pass: 4 per call), and its bandwidth counts 16 bytes
    per element per pass."""
    import roofprof.devices.cpu as cpu_mod
    import roofprof.devices.cpu_probes as probes_mod

    calls: list[int] = []
    now = {"t": 0.0}

    class Clock:
        def start(self):
            self.t0 = now["t"]

        def stop(self):
            return now["t"] - self.t0

    class Kernels:
        @staticmethod
        def fill_distinct(x):
            pass

        @staticmethod
        def dot2(a, b, out, nthreads, reps):
            calls.append(reps)
            now["t"] += 0.005 * reps
            return 0.0

    monkeypatch.setattr(probes_mod, "kernels_module", lambda name: Kernels)
    dev = CpuDevice()
    monkeypatch.setattr(dev, "clock", Clock)
    ref = dev.memory_reference()
    assert ref is not None
    assert calls[:2] == [1, 1] and set(calls[2:]) == {4} and len(calls) == 10
    n = 4 * (dev.info.last_level_cache_bytes or 32 << 20) // 8
    assert ref.bytes_per_s == pytest.approx(16.0 * n / 0.005)
    assert 4 * 0.005 >= cpu_mod.DRAM_CALL_S
