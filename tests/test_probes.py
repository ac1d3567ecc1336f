"""Probe accounting, plateau detection, the roofline assembly (on a simulated device) and
refusals."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from roofprof.devices.base import CheckResult, DeviceInfo, Probe, ProbeRun
from roofprof.devices.cpu import CpuDevice
from roofprof.devices.cuda import CudaKernelError
from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.roofline import load_roofline
from roofprof.roofline.probes import (
    Plateau,
    RooflineFailed,
    RooflineInterrupted,
    RooflinePlan,
    RooflineResult,
    find_plateaus,
    level_windows,
    load_result,
    measure_roofline,
    spec_comparison,
)
from roofprof.telemetry import NullSampler

KiB, MiB = 1024, 1024**2
CACHES = {"l1": 64 * KiB, "l2": 2 * MiB, "l3": 32 * MiB}
LEVEL_BW = {"l1": 600e9, "l2": 220e9, "l3": 180e9, "dram": 36e9}
PEAK = {"fp32": 230e9, "fp64": 115e9}
GEMM = {"fp32": 205e9, "fp64": 105e9}


def true_level(ws: float) -> str:
    if ws <= CACHES["l1"]:
        return "l1"
    if ws <= CACHES["l2"]:
        return "l2"
    if ws <= CACHES["l3"]:
        return "l3"
    return "dram"


class SimClock:
    """A fake clock reading the simulated time that the fake kernels advance."""

    name = "sim"

    def __init__(self, state):
        self.state = state

    def start(self):
        self.t0 = self.state["t"]

    def stop(self):
        return self.state["t"] - self.t0


class SimDevice:
    """A device whose kernels cost modelled time: a staircase, FMA peaks, GEMM rates."""

    def __init__(
        self, free=64 * 2**30, fail_check=None, interrupt_at=None, spec_id=None, kind="cpu"
    ):
        self.state = {"t": 0.0, "setups": [], "flushes": 0}
        self.free, self.fail_check, self.interrupt_at = free, fail_check, interrupt_at
        self._info = DeviceInfo(
            kind=kind,
            index=0,
            name="Sim CPU",
            compute_units=2,
            memory_bytes=64 * 2**30,
            cache_bytes=CACHES,
            spec_id=spec_id,
        )

    @property
    def info(self):
        return self._info

    def clock(self):
        return SimClock(self.state)

    def flush(self):
        self.state["flushes"] += 1

    def sampler(self, interval_s=0.01):
        return NullSampler("simulated device")

    def free_memory_bytes(self):
        return self.free

    def synchronize(self):
        pass

    def implementations(self):
        return ()

    def roofline_plan(self, name="full"):
        return RooflinePlan.for_device(self._info, name)

    def _run(self, name, seconds_per_rep, flops, nbytes, ws, params=None):
        self.state["setups"].append(name)
        if self.interrupt_at == name:
            raise KeyboardInterrupt

        def run(reps):
            self.state["t"] += seconds_per_rep * reps + 2e-6  # + a launch overhead

        ok = self.fail_check != name
        return ProbeRun(
            run=run,
            flops_per_rep=flops,
            bytes_per_rep=nbytes,
            check=lambda: CheckResult(ok, 0.0 if ok else 1.0, 0.0 if ok else 1.0, 1e-6, "sim"),
            working_set_bytes=ws,
            params=params or {},
        )

    def probes(self):
        def bw(name, per_elem):
            def setup(*, working_set_bytes):
                n = working_set_bytes // per_elem
                nbytes = per_elem * n
                return self._run(name, nbytes / LEVEL_BW[true_level(nbytes)], n, nbytes, nbytes)

            return setup

        def fma(dtype):
            def setup():
                flops = 2.0 * 16 * 8192
                return self._run(f"fma-{dtype}", flops / PEAK[dtype], flops, 1.0, 65536)

            return setup

        def gemm(dtype):
            def setup(*, size):
                flops = 2.0 * size**3
                return self._run(
                    f"gemm-{dtype}",
                    flops / GEMM[dtype],
                    flops,
                    3.0 * size * size * 8,
                    3 * size * size * 8,
                )

            return setup

        def intensity(dtype):
            item = 8 if dtype == "fp64" else 4

            def setup(*, working_set_bytes, fmas_per_element):
                n = working_set_bytes // item
                flops, nbytes = 2.0 * fmas_per_element * n, 2.0 * item * n
                t = max(flops / PEAK[dtype], nbytes / LEVEL_BW["dram"])
                return self._run(
                    f"intensity-{dtype}",
                    t,
                    flops,
                    nbytes,
                    working_set_bytes,
                    {"fmas_per_element": fmas_per_element},
                )

            return setup

        return (
            Probe("read", "bandwidth", bw("read", 8), accounting="8 B/element"),
            Probe("triad", "bandwidth", bw("triad", 24), accounting="24 B/element"),
            Probe("fma-fp32", "compute", fma("fp32"), dtype="fp32"),
            Probe("fma-fp64", "compute", fma("fp64"), dtype="fp64"),
            Probe("gemm-fp32", "gemm", gemm("fp32"), dtype="fp32"),
            Probe("gemm-fp64", "gemm", gemm("fp64"), dtype="fp64"),
            Probe("intensity-fp64", "intensity", intensity("fp64"), dtype="fp64"),
        )


def sim_plan(device, name="quick"):
    return RooflinePlan.for_device(device.info, name)


# --------------------------------------------------------------------------- plan and accounting


def test_plans_sized_from_caches():
    info = SimDevice().info
    quick, full, test = (RooflinePlan.for_device(info, n) for n in ("quick", "full", "test"))
    assert quick.working_set_sizes[0] == 4 * KiB
    assert quick.working_set_sizes[-1] == 16 * CACHES["l3"]
    assert len(full.working_set_sizes) > len(quick.working_set_sizes) > len(test.working_set_sizes)
    ratios = {
        b / a for a, b in zip(quick.working_set_sizes, quick.working_set_sizes[1:], strict=False)
    }
    assert ratios == {2.0}
    assert full.intensities[0] == 0.125 and full.intensities[-1] == 1024
    assert quick.intensity_working_set_bytes >= 8 * CACHES["l3"]
    # far right of the ridge the working set shrinks to bound the call
    assert full.intensity_working_set(0.125) == full.intensity_working_set_bytes
    assert full.intensity_working_set(1024) * 2 * 1024 <= full.intensity_max_call_flops
    assert full.intensity_working_set(1024) >= MiB
    with pytest.raises(ConfigError):
        RooflinePlan.for_device(info, "huge")


def test_each_backend_declares_its_plan():
    from roofprof.devices.cpu import cpu_roofline_plan
    from roofprof.devices.cuda import cuda_roofline_plan
    from roofprof.errors import UnknownNameError

    gpu = DeviceInfo(
        kind="cuda",
        index=0,
        name="g",
        compute_units=132,
        memory_bytes=1,
        cache_bytes={"l2": 50 * MiB},
    )
    cpu = SimDevice().info
    assert RooflinePlan.for_device(gpu, "full") == cuda_roofline_plan(gpu, "full")
    assert (
        RooflinePlan.for_device(cpu, "quick")
        == cpu_roofline_plan(cpu, "quick")
        == SimDevice().roofline_plan("quick")
    )
    full = cuda_roofline_plan(gpu, "full")
    assert full.gemm_sizes == (4096, 8192) and full.intensity_working_set_bytes >= 256 * MiB
    assert full.intensity_dtypes == ("fp32", "fp64") and cuda_roofline_plan(
        gpu, "quick"
    ).gemm_sizes == (4096,)
    assert cpu_roofline_plan(cpu, "full").gemm_sizes == (1024, 2048, 3072)
    # the tiny test plan is the same on every device; an unknown kind has no plan
    assert (
        cuda_roofline_plan(gpu, "test").gemm_sizes
        == cpu_roofline_plan(cpu, "test").gemm_sizes
        == (128,)
    )
    with pytest.raises(UnknownNameError):
        RooflinePlan.for_device(
            DeviceInfo(kind="tpu", index=0, name="t", compute_units=1, memory_bytes=1), "full"
        )
    with pytest.raises(ConfigError):
        cuda_roofline_plan(gpu, "huge")


def test_intensity_to_fmas_per_element():
    plan = RooflinePlan.for_device(SimDevice().info, "full")
    fp64 = dict(plan.fmas_per_element("fp64"))
    assert fp64[0.125] == 1 and fp64[1.0] == 8 and fp64[1024.0] == 8192
    fp32 = dict(plan.fmas_per_element("fp32"))
    assert 0.125 not in fp32 and fp32[0.25] == 1  # half an FMA per element is not a kernel


def test_cpu_probe_accounting_is_exact():
    probes = {p.name: p for p in CpuDevice().probes()}
    r = probes["read"].setup(working_set_bytes=64 * KiB)
    n = r.params["elements"]
    assert n * 8 == r.working_set_bytes == 64 * KiB
    assert (r.bytes_per_rep, r.flops_per_rep) == (8.0 * n, float(n))
    t = probes["triad"].setup(working_set_bytes=48 * KiB)
    n = t.params["elements_per_array"]
    assert (t.bytes_per_rep, t.flops_per_rep, t.working_set_bytes) == (24.0 * n, 2.0 * n, 24 * n)
    f = probes["fma-fp32"].setup()
    assert f.flops_per_rep == 2 * 16 * f.params["elements"]
    g = probes["gemm-fp64"].setup(size=64)
    assert g.flops_per_rep == 2 * 64**3 and g.bytes_per_rep == 3 * 64 * 64 * 8
    for dtype, item in (("fp64", 8), ("fp32", 4)):
        s = probes[f"intensity-{dtype}"].setup(working_set_bytes=1 * MiB, fmas_per_element=32)
        n = s.params["elements"]
        assert s.flops_per_rep == 2 * 32 * n and s.bytes_per_rep == 2 * item * n
        assert s.flops_per_rep / s.bytes_per_rep == 32 / item
        assert s.params["unroll"] * s.params["inner_passes"] == 32


def test_cpu_probes_pass_their_checks():
    for p in CpuDevice().probes():
        kw = {
            "bandwidth": {"working_set_bytes": 256 * KiB},
            "compute": {},
            "gemm": {"size": 96},
            "intensity": {"working_set_bytes": 512 * KiB, "fmas_per_element": 4},
        }[p.kind]
        run = p.setup(**kw)
        res = run.check()
        assert res.ok, (p.name, res)
        run.run(1)


# --------------------------------------------------------------------------- plateaus


def test_level_windows():
    w = dict((lvl, (lo, hi)) for lvl, lo, hi in level_windows(CACHES))
    assert w["l1"] == (8 * KiB, 32 * KiB)
    assert w["l2"] == (256 * KiB, 1 * MiB)
    assert w["l3"] == (4 * MiB, 16 * MiB)
    assert w["dram"] == (256 * MiB, math.inf)
    assert level_windows({}) == [("dram", 0.0, math.inf)]


def synthetic_staircase(noise=0.03, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [4 * KiB * 2 ** (i / 2) for i in range(37)]  # 4 KiB .. 1 GiB
    true = []
    for s in sizes:
        lvl = true_level(s)
        true.append(LEVEL_BW[lvl])
    values = [v * (1 + noise * rng.standard_normal()) for v in true]
    # transitions: between levels the bandwidth is in between
    for i, s in enumerate(sizes):
        for _lvl, size in CACHES.items():
            if size < s < 2 * size:
                values[i] = (values[i] + values[i - 1]) / 2
    return sizes, values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plateaus_from_cache_sizes(seed):
    sizes, values = synthetic_staircase(seed=seed)
    plats = {p.level: p for p in find_plateaus(sizes, values, CACHES)}
    assert set(plats) == {"l1", "l2", "l3", "dram"}
    for lvl, p in plats.items():
        assert p.value == pytest.approx(LEVEL_BW[lvl], rel=0.06)
        assert p.method == "cache-sizes" and p.points >= 2
    assert plats["dram"].min_bytes >= 8 * CACHES["l3"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plateaus_by_segmentation(seed):
    sizes, values = synthetic_staircase(noise=0.02, seed=seed)
    plats = find_plateaus(sizes, values)
    levels = [p.level for p in plats]
    assert levels[0] == "l1" and levels[-1] == "dram"
    by = {p.level: p for p in plats}
    assert by["l1"].value == pytest.approx(LEVEL_BW["l1"], rel=0.06)
    assert by["dram"].value == pytest.approx(LEVEL_BW["dram"], rel=0.06)
    assert all(p.method == "segmentation" for p in plats)


def test_plateau_edge_cases():
    assert find_plateaus([], []) == []
    assert find_plateaus([1, 2], [0.0, -1.0]) == []
    one = find_plateaus([1e3, 2e3], [5.0, 5.1])
    assert [p.level for p in one] == ["l1"]
    assert isinstance(one[0], Plateau) and one[0].to_dict()["points"] == 2


# ------------------------------------------------------------- measured roofline (simulated device)


def test_measure_roofline_on_simulated_device():
    dev = SimDevice()
    calls, checkpoints = [], []
    result = measure_roofline(
        dev,
        plan=sim_plan(dev),
        progress=lambda d, t, label: calls.append((d, t)),
        checkpoint=checkpoints.append,
    )
    assert result.complete and result.interrupted_during is None
    roof = result.roofline
    for lvl, bw in LEVEL_BW.items():
        assert roof.memory_bandwidth(lvl) == pytest.approx(bw, rel=0.01), lvl
    for dtype in ("fp32", "fp64"):
        assert roof.compute_peak(dtype) == pytest.approx(PEAK[dtype], rel=0.01)
        gemm = [c for c in result.ceilings if c["probe"] == f"gemm-{dtype}"][0]
        assert gemm["value"] == pytest.approx(GEMM[dtype], rel=0.01)
    assert all(c.source == "measured" for c in roof.ceilings)
    # the intensity sweep follows min(peak, bandwidth x intensity)
    sweep = result.sweeps["intensity"]["intensity-fp64"]
    assert sweep["flush"] == "flush" and dev.state["flushes"] > 0
    for p in sweep["points"]:
        model = min(PEAK["fp64"], LEVEL_BW["dram"] * p["intensity"])
        assert p["best_flops_per_s"] == pytest.approx(model, rel=0.02)
    assert [p["intensity"] for p in sweep["points"]] == list(
        RooflinePlan.for_device(dev.info, "quick").intensities
    )
    # progress and checkpoints
    assert calls[-1][0] == calls[-1][1] > 0
    assert len(checkpoints) == len(dev.probes()) and not checkpoints[-1].complete
    # every probe was checked, raw samples kept
    assert {p["name"] for p in result.probes} == {p.name for p in dev.probes()}
    points = result.sweeps["bandwidth"]["read"]
    assert all(p["timing"]["samples_s"] for p in points)
    assert [
        p.get("level")
        for p in points
        if p["working_set_bytes"] in (16 * KiB, 512 * KiB, 8 * MiB, 256 * MiB)
    ] == ["l1", "l2", "l3", "dram"]
    assert result.spec_comparison["available"] is False
    assert any("telemetry unavailable" in w for w in result.warnings)


def test_result_is_json_and_round_trips(tmp_path):
    dev = SimDevice()
    result = measure_roofline(dev, plan=sim_plan(dev, "test"))
    text = json.dumps(result.to_dict(), allow_nan=False)
    assert json.loads(text)["schema"] == "roofprof.roofline/1"
    path = result.write(tmp_path / "roofline.json")
    assert load_roofline(path) == result.roofline
    again = load_result(path)
    assert again.roofline == result.roofline and again.device == result.device
    assert again.sweeps == json.loads(json.dumps(result.to_dict()))["sweeps"]
    assert RooflineResult.from_dict(result.to_dict()).complete
    with pytest.raises(ConfigError):
        RooflineResult.from_dict({"nothing": 1})


def test_memory_refusal_happens_before_allocating():
    dev = SimDevice(free=100 * MiB)
    with pytest.raises(ConfigError) as err:
        measure_roofline(dev, quick=True)
    msg = str(err.value)
    assert "MiB" in msg and "free" in msg and "bandwidth sweep" in msg
    assert dev.state["setups"] == []


def test_failed_check_is_skipped_never_timed():
    dev = SimDevice(fail_check="fma-fp64")
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    assert r.complete and "fma-fp64" not in {c["probe"] for c in r.ceilings}
    assert [f["probe"] for f in r.failed_probes] == ["fma-fp64"]
    assert r.failed_probes[0]["type"] == "ProbeCheckError"
    assert any("fma-fp64" in w and "skipped" in w for w in r.warnings)
    rec = [p for p in r.probes if p["name"] == "fma-fp64"][0]
    assert "failed" in rec and not rec["check"]["ok"]
    assert dev.state["setups"].count("fma-fp64") == 1  # set up and checked once, never timed
    assert (
        RooflineResult.from_dict(json.loads(json.dumps(r.to_dict()))).failed_probes
        == r.failed_probes
    )


class FailingDevice(SimDevice):
    """A SimDevice whose named probes fail in the named way: ``check`` (wrong result),
    ``compile`` (its source does not compile: DeviceUnavailableError at setup), ``cuda`` (a
    CUDA error while timing: a RuntimeError such as CudaKernelError)."""

    def __init__(self, failures, **kw):
        super().__init__(**kw)
        self.failures = dict(failures)

    def _run(self, name, seconds_per_rep, flops, nbytes, ws, params=None):
        how = self.failures.get(name)
        if how == "compile":
            raise DeviceUnavailableError(f"kernels/cuda/probes.cu did not compile ({name})")
        run = super()._run(name, seconds_per_rep, flops, nbytes, ws, params)
        if how == "check":
            return ProbeRun(
                run=run.run,
                flops_per_rep=flops,
                bytes_per_rep=nbytes,
                check=lambda: CheckResult(False, 1.0, 1.0, 1e-6, "wrong"),
                working_set_bytes=ws,
            )
        if how == "cuda":

            def bad(reps):
                raise CudaKernelError(f"CUDA error launching {name}: cudaErrorIllegalAddress")

            return ProbeRun(
                run=bad,
                flops_per_rep=flops,
                bytes_per_rep=nbytes,
                check=run.check,
                working_set_bytes=ws,
            )
        return run


def test_each_kind_of_probe_failure_is_skipped_and_the_run_continues():
    dev = FailingDevice({"fma-fp64": "check", "gemm-fp32": "compile", "triad": "cuda"})
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    assert r.complete
    failed = {f["probe"]: f["type"] for f in r.failed_probes}
    assert failed == {
        "fma-fp64": "ProbeCheckError",
        "gemm-fp32": "DeviceUnavailableError",
        "triad": "CudaKernelError",
    }
    names = {c["probe"] for c in r.ceilings}
    assert {"fma-fp32", "gemm-fp64", "read"} <= names and not names & set(failed)
    assert "triad" not in r.sweeps["bandwidth"] and "triad" not in r.plateaus
    assert (
        r.roofline.memory_ceiling("dram").value > 0 and r.roofline.compute_ceiling("fp32").value > 0
    )


@pytest.mark.parametrize("how", ["check", "compile", "cuda"])
def test_no_compute_ceiling_left_fails_naming_the_probes(how):
    dev = FailingDevice({n: how for n in ("fma-fp32", "fma-fp64", "gemm-fp32", "gemm-fp64")})
    with pytest.raises(RooflineFailed, match="no compute ceiling") as err:
        measure_roofline(dev, plan=sim_plan(dev, "test"))
    assert err.value.exit_code == 2
    assert all(n in str(err.value) for n in ("fma-fp32", "fma-fp64", "gemm-fp32", "gemm-fp64"))
    assert {f["probe"] for f in err.value.result.failed_probes} == {
        "fma-fp32",
        "fma-fp64",
        "gemm-fp32",
        "gemm-fp64",
    }


def test_no_memory_ceiling_left_fails():
    dev = FailingDevice({"read": "cuda", "triad": "check"})
    with pytest.raises(RooflineFailed, match="no memory ceiling"):
        measure_roofline(dev, plan=sim_plan(dev, "test"))
    # a selection without bandwidth probes needs no memory ceiling
    r = measure_roofline(dev, plan=sim_plan(dev, "test"), probes=["fma-fp32"])
    assert {c["probe"] for c in r.ceilings} == {"fma-fp32"}


def test_should_stop_and_deadline_return_the_partial_result_without_an_exception():
    dev = SimDevice()
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 3

    r = measure_roofline(dev, plan=sim_plan(dev, "test"), should_stop=stop)
    assert not r.complete and r.interrupted_during and r.ceilings
    r0 = measure_roofline(dev, plan=sim_plan(dev, "test"), deadline_s=-1.0)
    assert not r0.complete and r0.ceilings == () and r0.interrupted_during == "fma-fp32"
    full = measure_roofline(dev, plan=sim_plan(dev, "test"), deadline_s=3600.0)
    assert full.complete


def test_interrupt_keeps_what_finished():
    dev = SimDevice(interrupt_at="triad")
    with pytest.raises(RooflineInterrupted) as err:
        measure_roofline(dev, plan=sim_plan(dev, "test"))
    partial = err.value.result
    assert isinstance(err.value, KeyboardInterrupt)
    assert not partial.complete and partial.interrupted_during == "triad" == err.value.during
    names = {c["probe"] for c in partial.ceilings}
    assert {
        "fma-fp32",
        "fma-fp64",
        "gemm-fp32",
        "gemm-fp64",
        "read",
    } <= names and "triad" not in names
    json.dumps(partial.to_dict(), allow_nan=False)


def test_probe_selection():
    dev = SimDevice()
    r = measure_roofline(dev, plan=sim_plan(dev, "test"), probes=["read"])
    assert {c["probe"] for c in r.ceilings} == {"read"}
    with pytest.raises(ConfigError, match="unknown probe"):
        measure_roofline(dev, plan="test", probes=["nope"])


def test_spec_comparison_for_a_gpu():
    info = DeviceInfo(
        kind="cuda",
        index=0,
        name="NVIDIA H100 80GB HBM3",
        compute_units=132,
        memory_bytes=80 * 2**30,
        spec_id="h100-sxm",
    )
    from roofprof.specs import load_gpu

    spec = load_gpu("h100-sxm")
    details = [
        {
            "name": "DRAM read",
            "kind": "memory",
            "level": "dram",
            "value": 0.9 * spec.memory_bytes_per_s,
        },
        {"name": "L2 read", "kind": "memory", "level": "l2", "value": 1e13},
        {
            "name": "bf16 GEMM",
            "kind": "compute",
            "probe_kind": "gemm",
            "dtype": "bf16",
            "value": 0.8 * spec.matmul_peak_flops_per_s("bf16"),
            "clock_mhz": spec.tensor_clock_mhz,
        },
        {
            "name": "fp32 FMA",
            "kind": "compute",
            "probe_kind": "compute",
            "dtype": "fp32",
            "value": 0.5 * spec.peak_flops_per_s["fp32"],
        },
    ]
    cmp = spec_comparison(info, details)
    rows = {r["ceiling"]: r for r in cmp["rows"]}
    assert cmp["available"] and cmp["spec_id"] == "h100-sxm"
    assert rows["DRAM read"]["percent_of_spec"] == pytest.approx(90.0)
    assert rows["bf16 GEMM"]["percent_of_spec"] == pytest.approx(80.0)
    assert rows["bf16 GEMM"]["clock_ratio_to_spec"] == pytest.approx(1.0)
    assert rows["fp32 FMA"]["percent_of_spec"] == pytest.approx(50.0)
    assert "L2 read" not in rows


def test_real_cpu_test_plan(tmp_path):
    """The CPU device end to end with the tiny test plan (values are not asserted: no speed in
    tests)."""
    result = measure_roofline(CpuDevice(), plan="test")
    roof = result.roofline
    assert set(roof.dtypes) == {"fp32", "fp64"}
    assert "dram" in roof.levels and "l1" in roof.levels
    assert all(c["value"] > 0 for c in result.ceilings)
    assert all(p["check"]["ok"] for p in result.probes)
    assert result.sweeps["intensity"]["intensity-fp64"]["points"]
    json.dumps(result.to_dict(), allow_nan=False)
    assert result.provenance["libraries"]["numba"]


def test_the_cpu_sweeps_first_touch_one_shared_buffer_once(monkeypatch):
    from roofprof.devices import cpu_probes

    touched = []
    real = cpu_probes.aligned_empty
    monkeypatch.setattr(
        cpu_probes, "aligned_empty", lambda n, dtype: (touched.append(n), real(n, dtype))[1]
    )
    result = measure_roofline(CpuDevice(), plan="test", probes=["read", "triad", "intensity-fp64"])
    assert all(p["check"]["ok"] for p in result.probes)
    largest = max(p["working_set_bytes"] for p in result.sweeps["bandwidth"]["read"])
    llc = CpuDevice().info.last_level_cache_bytes or 32 << 20
    # the sweeps' arena (the others are a few KB; the reference Dot's two fresh arrays of
    # 4 x LLC each are its own, by design)
    big = [n for n in touched if 8 * n >= 1 << 20 and n != 4 * llc // 8]
    assert (
        big == [touched[0]] and 8 * big[0] >= largest
    )  # allocated once, at the largest size, first


def test_spec_comparison_pairs_each_probe_with_the_right_datasheet_rate():
    from roofprof.devices.base import DeviceInfo
    from roofprof.roofline.probes import spec_comparison

    info = DeviceInfo(
        kind="cuda",
        index=0,
        name="NVIDIA H100 80GB HBM3",
        compute_units=132,
        memory_bytes=80 * 10**9,
        spec_id="h100-sxm",
    )
    ceilings = [
        {
            "name": "bf16 tensor mma.sync (mma-bf16)",
            "probe": "mma-bf16",
            "probe_kind": "compute",
            "kind": "compute",
            "dtype": "bf16",
            "value": 600e12,
            "clock_mhz": 1830.0,
        },
        {
            "name": "bf16 FMA (fma-bf16x2)",
            "probe": "fma-bf16x2",
            "probe_kind": "compute",
            "kind": "compute",
            "dtype": "bf16",
            "value": 130e12,
        },
        {
            "name": "fp32 FMA (fma-fp32)",
            "probe": "fma-fp32",
            "probe_kind": "compute",
            "kind": "compute",
            "dtype": "fp32",
            "value": 60e12,
            "clock_mhz": 1980.0,
        },
        {"name": "DRAM read", "probe": "read", "kind": "memory", "level": "dram", "value": 3.0e12},
    ]
    rows = {r["ceiling"]: r for r in spec_comparison(info, ceilings)["rows"]}
    assert rows["bf16 tensor mma.sync (mma-bf16)"]["spec"] == 989.4e12
    assert rows["bf16 tensor mma.sync (mma-bf16)"]["clock_ratio_to_spec"] == 1.0
    assert "bf16 FMA (fma-bf16x2)" not in rows  # no datasheet vector bf16 rate to compare with
    assert rows["fp32 FMA (fma-fp32)"]["percent_of_spec"] == 100.0 * 60e12 / 66.9e12
    assert rows["DRAM read"]["spec"] == 3.35e12


# --------------------------------------------------------------------------- plausibility


class InflatedDram(SimDevice):
    """A planted fault: the read probe reads ``factor`` × the true DRAM bandwidth for its first
    ``inflated_setups`` DRAM set-ups (a zero-page or merged-page buffer), and the device's
    reference kernel reads the true one."""

    def __init__(self, factor=1.7, inflated_setups=10**9, reference=LEVEL_BW["dram"]):
        super().__init__()
        self.factor, self.left, self.reference = factor, inflated_setups, reference

    def memory_reference(self):
        from roofprof.roofline.plausibility import Reference

        return Reference(self.reference, "a planted reference", "test")

    def probes(self):
        return _scaled_runs(super().probes(), self._scale, self.state)

    def _scale(self, probe, working_set_bytes):
        if probe.name != "read" or true_level(working_set_bytes) != "dram" or self.left <= 0:
            return None
        self.left -= 1
        return 1 / self.factor


def _scaled_runs(probes, scale_of, state):
    """``probes`` with each bandwidth set-up's run taking ``scale_of(probe,
    working_set_bytes)`` × its time on the fake clock ``state`` (``None``: unchanged): a
    planted fault."""
    out = []
    for p in probes:
        if p.kind != "bandwidth":
            out.append(p)
            continue
        real = p.setup

        def setup(*, working_set_bytes, real=real, p=p):
            run = real(working_set_bytes=working_set_bytes)
            scale = scale_of(p, working_set_bytes)
            if scale is None:
                return run
            inner = run.run

            def scaled(reps, inner=inner):
                t0 = state["t"]
                inner(reps)
                state["t"] = t0 + (state["t"] - t0) * scale

            return dataclasses.replace(run, run=scaled)

        out.append(dataclasses.replace(p, setup=setup))
    return tuple(out)


def _dram(result, probe):
    return next(c for c in result.ceilings if c["name"] == f"DRAM {probe}")


def test_a_dram_ceiling_above_the_same_run_reference_is_never_reported_silently():
    dev = InflatedDram()
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    read = _dram(r, "read")
    # the probe kept reading 1.7x the memory: re-measured twice, then the reference is used
    assert read["source"] == "reference" and read["value"] == LEVEL_BW["dram"]
    assert read["measured_value"] == pytest.approx(1.7 * LEVEL_BW["dram"], rel=0.02)
    assert read["reference"]["remeasured"] == 2 and read["reference"]["ratio"] > 1.6
    assert r.roofline.memory_bandwidth("dram") <= LEVEL_BW["dram"] * 1.0001
    assert any("DRAM read" in w and "the reference is used as the ceiling" in w for w in r.warnings)
    triad = _dram(r, "triad")  # the honest probe passes untouched
    assert triad["source"] == "measured" and triad["reference"]["remeasured"] == 0


def test_a_transiently_inflated_dram_ceiling_is_re_measured_and_kept():
    dev = InflatedDram(inflated_setups=2)  # the first pass over the DRAM sizes only
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    read = _dram(r, "read")
    assert read["source"] == "measured" and read["reference"]["remeasured"] == 1
    assert read["value"] == pytest.approx(LEVEL_BW["dram"], rel=0.02)
    assert any("DRAM read first read 1.7" in w and "re-measured: 1.00" in w for w in r.warnings)


class UnevenDram(SimDevice):
    """DRAM sweep points that reach different rates (as on a shared host: one point's best
    call 25 % under another's): only the largest working set runs at the true DRAM rate."""

    def __init__(self, largest, slowdown=1.25):
        super().__init__()
        self.largest, self.slowdown = largest, slowdown

    def probes(self):
        return _scaled_runs(super().probes(), self._scale, self.state)

    def _scale(self, probe, working_set_bytes):
        slow = true_level(working_set_bytes) == "dram" and working_set_bytes < self.largest
        return self.slowdown if slow else None


def test_the_dram_ceiling_is_its_plateaus_fastest_point_and_a_cache_levels_its_median():
    plan = sim_plan(SimDevice())
    dev = UnevenDram(largest=max(plan.working_set_sizes))
    r = measure_roofline(dev, plan=plan)
    read = _dram(r, "read")
    points = [p for p in r.sweeps["bandwidth"]["read"] if p.get("level") == "dram"]
    assert len(points) >= 2, "the test plan must put several points on the DRAM plateau"
    fastest = max(p["best_bytes_per_s"] for p in points)
    assert read["value"] == pytest.approx(fastest) == pytest.approx(LEVEL_BW["dram"], rel=0.01)
    assert read["plateau_median"] < read["value"] and read["note"].startswith("best of")
    l3 = next(c for c in r.ceilings if c["level"] == "l3" and c["probe"] == "read")
    assert l3["note"].startswith("median of") and l3["value"] == l3["plateau_median"]


def test_a_farther_memory_level_faster_than_a_nearer_one_is_flagged():
    from roofprof.roofline.plausibility import level_order_flags

    flags = level_order_flags({"l1": 600e9, "l2": 220e9, "l3": 250e9, "dram": 36e9}, "read")
    assert len(flags) == 1 and flags[0].startswith("L3 read 250 GB/s is 14% above L2 read")
    assert level_order_flags({"l2": 220e9, "l3": 240e9}, "read") == []  # within 10 %


def test_dram_sweep_points_time_calls_as_long_as_babelstreams():
    """A few-ms call pays its fixed cost (waking the worker threads) in bandwidth; on the
    DRAM plateau every timed call lasts at least the plan's ``dram_call_s`` (more passes per
    call), the cache levels keep their short calls."""
    dev = SimDevice()
    plan = sim_plan(dev, "quick")
    assert plan.dram_call_s >= 0.01 > plan.target_call_s
    r = measure_roofline(dev, plan=plan, probes=["read", "triad"])
    for probe in ("read", "triad"):
        points = r.sweeps["bandwidth"][probe]
        # the triad's arrays hold 24·n bytes, a few under the 8 x LLC asked for: still DRAM
        dram = [p for p in points if p["working_set_bytes"] >= 0.999 * 8 * CACHES["l3"]]
        assert len(dram) >= 2 and all(p.get("level") == "dram" for p in dram)
        assert all(p["reps"] >= 2 for p in dram)
        assert all(min(p["timing"]["samples_s"]) >= 0.9 * plan.dram_call_s for p in dram)
        l2 = [p for p in points if p["working_set_bytes"] <= CACHES["l2"]]
        assert all(min(p["timing"]["samples_s"]) < 0.5 * plan.dram_call_s for p in l2)


def test_bandwidth_probe_bytes_are_counted_as_babelstream_counts_them():
    """Read: 8 B per element read once (half a Dot's 16 B: one array, not two); copy: 16 B
    (a read, a write, no write-allocate); triad: 24 B (two reads, a write); the reference Dot
    16 B per element per pass."""
    dev = CpuDevice()
    probes = {p.name: p for p in dev.probes()}
    per_element = {"read": 8.0, "copy": 16.0, "triad": 24.0}
    for name, nbytes in per_element.items():
        run = probes[name].setup(working_set_bytes=1 * MiB)
        n = run.params.get("elements", run.params.get("elements_per_array"))
        assert run.bytes_per_rep == nbytes * n == run.working_set_bytes
        assert run.check().ok
        run.release()


class ScatteredDram(SimDevice):
    """A planted layout: every bandwidth buffer reports ``locality`` (pages followed by one in
    the same 2 MiB physical block), as the CPU probes do where frame numbers are readable."""

    def __init__(self, locality):
        super().__init__()
        self.locality = locality

    def _run(self, name, seconds_per_rep, flops, nbytes, ws, params=None):
        if name in ("read", "triad"):
            params = {**(params or {}), "physical_locality": self.locality}
        return super()._run(name, seconds_per_rep, flops, nbytes, ws, params)


def test_a_dram_ceiling_timed_on_scattered_physical_memory_is_flagged_once():
    dev = ScatteredDram(0.4)
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    flags = [w for w in r.warnings if "fragmented physical memory" in w]
    assert len(flags) == 1 and "40%" in flags[0]  # read and triad share the one warning
    dram = next(p for p in r.sweeps["bandwidth"]["read"] if p.get("level") == "dram")
    assert dram["params"]["physical_locality"] == 0.4
    dev = ScatteredDram(0.99)
    r = measure_roofline(dev, plan=sim_plan(dev, "test"))
    assert not any("fragmented physical memory" in w for w in r.warnings)


def test_the_triad_starts_its_arrays_past_a_cache_line_only_from_dram(monkeypatch):
    """Measured on a Zen 4 guest: from DRAM, triad arrays 16 B past a line stream ~9 % more;
    in L1 the same offset costs 29 %. The offset is recorded; the check still holds."""
    import dataclasses
    import types

    from roofprof.devices import cpu_probes

    real = cpu_probes._kernels()
    starts = []

    def triad(a, b, c, *args):
        starts.append({x.ctypes.data % 64 for x in (a, b, c)})
        return real.triad(a, b, c, *args)

    kernels = types.SimpleNamespace(**{n: getattr(real, n) for n in real.__all__})
    kernels.triad = triad
    monkeypatch.setattr(cpu_probes, "_kernels", lambda: kernels)
    dev = CpuDevice()
    dev._info = dataclasses.replace(dev.info, cache_bytes={"l1": 32 * KiB, "l2": 1 * MiB})
    arena = cpu_probes.ProbeArena()
    for ws, offset in ((8 * MiB, cpu_probes.TRIAD_DRAM_OFFSET_BYTES), (64 * KiB, 0)):
        run = cpu_probes.setup_triad(dev, arena, working_set_bytes=ws)
        assert run.params["array_offset_bytes"] == offset
        assert run.check().ok and run.bytes_per_rep == run.working_set_bytes
        run.run(1)
        assert starts[-1] == {offset} and arena.buf.ctypes.data % 64 == 0
