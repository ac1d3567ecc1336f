"""Telemetry samplers with a fake NVML module and fake sysfs/cpuinfo trees."""

from __future__ import annotations

import sys
import time
import types

import pytest

from roofprof.telemetry import (
    CpuFreqSampler,
    NullSampler,
    NvmlSampler,
    Sampler,
    TelemetrySummary,
    reason_names,
)


def fake_nvml():
    """A module-like fake of pynvml: scripted values, the error classes pynvml has."""

    class NVMLError(Exception):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    state = {"init": 0, "shutdown": 0, "sm": iter([1980, 1755, 1980, 1980] + [1980] * 10_000)}
    nv = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_FunctionNotFound=NVMLError_FunctionNotFound,
        NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_LibraryNotFound=NVMLError_LibraryNotFound,
        NVMLError_GpuIsLost=NVMLError_GpuIsLost,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        state=state,
    )

    def init():
        state["init"] += 1

    def shutdown():
        state["shutdown"] += 1

    def clock(handle, which):
        assert handle == "h0"
        return next(state["sm"]) if which == 1 else 2619

    nv.nvmlInit = init
    nv.nvmlShutdown = shutdown
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    nv.nvmlDeviceGetClockInfo = clock
    nv.nvmlDeviceGetPowerUsage = lambda h: 612_000  # mW
    nv.nvmlDeviceGetTemperatureV = lambda h, sensor: 71
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 70
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=99, memory=40)
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1 | 0x4
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x20
    return nv


def raiser(cls_name):
    def make(nv):
        def f(*args):
            raise getattr(nv, cls_name)("not here")

        return f

    return make


def sample(sampler, seconds=0.03):
    with sampler:
        time.sleep(seconds)
    return sampler.summary()


def test_nvml_sampler_summarises_clocks_power_reasons():
    nv = fake_nvml()
    s = NvmlSampler(0, interval_s=0.002, nvml=nv)
    assert isinstance(s, Sampler)
    summary = sample(s)
    assert summary.available and summary.source == "nvml"
    assert summary.samples >= 3
    assert summary.sm_clock_mhz_median == 1980
    assert summary.sm_clock_mhz_min == 1755
    assert summary.mem_clock_mhz_median == 2619
    assert summary.power_w_median == pytest.approx(612.0)
    assert summary.temperature_c_max == 71
    assert summary.utilisation == 99
    assert summary.clocks_event_reasons == ("GpuIdle", "SwPowerCap")
    assert summary.throttled
    assert summary.clock_mhz == 1980
    assert summary.missing == ()
    assert nv.state["init"] == 1 and nv.state["shutdown"] == 1


def test_old_driver_falls_back_on_throttle_reasons_and_old_temperature():
    nv = fake_nvml()
    nv.nvmlDeviceGetCurrentClocksEventReasons = raiser("NVMLError_FunctionNotFound")(nv)
    nv.nvmlDeviceGetTemperatureV = raiser("NVMLError_FunctionNotFound")(nv)
    summary = sample(NvmlSampler(0, interval_s=0.002, nvml=nv))
    assert summary.clocks_event_reasons == ("SwThermalSlowdown",)
    assert summary.temperature_c_max == 70
    assert summary.missing == ()


def test_old_nvidia_ml_py_without_the_new_functions_falls_back():
    nv = fake_nvml()
    del nv.nvmlDeviceGetCurrentClocksEventReasons
    del nv.nvmlDeviceGetTemperatureV
    summary = sample(NvmlSampler(0, interval_s=0.002, nvml=nv))
    assert summary.clocks_event_reasons == ("SwThermalSlowdown",)
    assert summary.temperature_c_max == 70


def test_unsupported_fields_become_none_not_a_crash():
    nv = fake_nvml()
    nv.nvmlDeviceGetPowerUsage = raiser("NVMLError_NotSupported")(nv)
    nv.nvmlDeviceGetCurrentClocksEventReasons = raiser("NVMLError_FunctionNotFound")(nv)
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = raiser("NVMLError_FunctionNotFound")(nv)
    summary = sample(NvmlSampler(0, interval_s=0.002, nvml=nv))
    assert summary.available
    assert summary.power_w_median is None
    assert summary.clocks_event_reasons == ()
    assert set(summary.missing) == {"power_mw", "reasons"}
    assert summary.sm_clock_mhz_median == 1980


def test_transient_errors_drop_a_value_only():
    nv = fake_nvml()
    calls = {"n": 0}

    def flaky(h):
        calls["n"] += 1
        if calls["n"] % 2:
            raise nv.NVMLError_GpuIsLost("busy")
        return 500_000

    nv.nvmlDeviceGetPowerUsage = flaky
    summary = sample(NvmlSampler(0, interval_s=0.002, nvml=nv))
    assert summary.power_w_median == pytest.approx(500.0)
    assert "power_mw" not in summary.missing


def test_no_driver_means_unavailable():
    nv = fake_nvml()
    nv.nvmlInit = raiser("NVMLError_LibraryNotFound")(nv)
    s = NvmlSampler(0, interval_s=0.002, nvml=nv)
    summary = sample(s, 0.005)
    assert not summary.available
    assert summary.reason.startswith("unavailable: NVML")
    assert s._thread is None
    assert summary.to_dict()["available"] is False


def test_missing_handle_shuts_nvml_down_again():
    nv = fake_nvml()

    def no_handle(i):
        raise nv.NVMLError("Invalid Argument")

    nv.nvmlDeviceGetHandleByIndex = no_handle
    summary = sample(NvmlSampler(3, interval_s=0.002, nvml=nv), 0.0)
    assert not summary.available
    assert nv.state["shutdown"] == 1


def test_real_pynvml_without_driver_is_unavailable_not_a_crash():
    pytest.importorskip("pynvml")
    summary = sample(NvmlSampler(0, interval_s=0.002), 0.005)
    assert isinstance(
        summary, TelemetrySummary
    )  # available on a GPU box, "unavailable: ..." elsewhere
    if not summary.available:
        assert summary.reason.startswith("unavailable")


def test_sampler_is_reusable_per_measurement():
    s = NvmlSampler(0, interval_s=0.002, nvml=fake_nvml())
    first = sample(s, 0.01)
    second = sample(s, 0.01)
    assert first.available and second.available
    assert second.samples < first.samples + 50  # records reset at each entry


def test_reason_names():
    assert reason_names(0) == ()
    assert reason_names(0x8 | 0x40) == ("HwSlowdown", "HwThermalSlowdown")
    assert reason_names(0x1000) == ("0x1000",)


def test_cpu_sampler_reads_sysfs(tmp_path):
    for cpu, khz in ((0, "3000000"), (1, "2000000")):
        d = tmp_path / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_cur_freq").write_text(khz + "\n")
    s = CpuFreqSampler(interval_s=0.002, cpus=[0, 1], sysfs=tmp_path, cpuinfo=tmp_path / "none")
    summary = sample(s, 0.01)
    assert summary.available and summary.source == "cpufreq" and summary.reason == ""
    assert summary.cpu_clock_mhz_min == 2000.0
    assert summary.cpu_clock_mhz_median == 2500.0
    assert summary.clock_mhz == 2500.0


def test_cpu_sampler_falls_back_on_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\ncpu MHz\t\t: 2596.142\nprocessor\t: 1\ncpu MHz\t\t: 2596.142\n"
    )
    summary = sample(
        CpuFreqSampler(interval_s=0.002, cpus=[0, 1], sysfs=tmp_path, cpuinfo=info), 0.01
    )
    assert summary.available and summary.source == "cpuinfo"
    assert summary.cpu_clock_mhz_median == pytest.approx(2596.142)
    assert "hypervisor" in summary.reason


def test_cpu_sampler_without_any_source(tmp_path):
    summary = sample(
        CpuFreqSampler(interval_s=0.002, cpus=[0], sysfs=tmp_path, cpuinfo=tmp_path / "none"), 0.0
    )
    assert not summary.available and summary.reason.startswith("unavailable")


def test_null_sampler():
    s = NullSampler("no GPU")
    with s:
        pass
    assert s.summary() == TelemetrySummary.unavailable("no GPU")
    assert s.summary().reason == "unavailable: no GPU"


def test_bad_interval():
    with pytest.raises(ValueError):
        CpuFreqSampler(interval_s=0)


def test_contention_share_from_proc_stat(monkeypatch):
    import os

    from roofprof import telemetry

    busy = iter(
        [100.0, 100.0 + 0.9 * 4]
    )  # other processes: 0.9 s busy over 1 s on 4 CPUs (plus ours)
    monkeypatch.setattr(telemetry.Contention, "_busy_s", staticmethod(lambda: next(busy)))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(telemetry.time, "perf_counter", lambda: next(clock))
    with telemetry.Contention() as c:
        pass
    assert c.available and c.wall_s == 1.0
    assert (
        0.85 <= c.share <= 0.9 and c.contended and c.percent == 100 * c.share
    )  # minus our own CPU time


def test_contention_too_short_or_unknown_is_not_judged(monkeypatch):
    from roofprof import telemetry

    with telemetry.Contention() as c:  # far below the 10 ms tick resolution
        pass
    assert not c.available and c.share == 0.0 and not c.contended
    monkeypatch.setattr(telemetry.Contention, "_busy_s", staticmethod(lambda: None))
    meter = telemetry.Contention().start()
    assert meter.read(min_wall_s=0.0) is None and not meter.available
    assert telemetry.loadavg() is None or len(telemetry.loadavg()) == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="minor faults: Linux getrusage")
def test_contention_counts_the_pages_a_window_touches_first():
    import mmap

    from roofprof import telemetry

    size = 16 << 20
    with telemetry.Contention() as idle:
        pass
    buf = mmap.mmap(-1, size)  # anonymous: no page is backed until written
    with telemetry.Contention() as c:
        for i in range(0, size, mmap.PAGESIZE):
            buf[i] = 1
    buf.close()
    # one fault per 4 KiB page, or per 2 MiB where the kernel backs it with a huge page
    assert c.minor_faults is not None and c.minor_faults >= size // (2 << 20)
    assert idle.minor_faults is not None and idle.minor_faults < c.minor_faults
