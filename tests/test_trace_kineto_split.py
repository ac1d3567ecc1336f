"""The live tracer's host/device split of torch's ``_KinetoEvent`` records follows torch's
own rule (a CPU event is an op only when ``linked_correlation_id() == 0``), checked with
event objects shaped like torch 2.11's (no ``activity_type()``) and with the real CPU
profiler."""

from __future__ import annotations

import pytest

from roofprof.tracing.kernels import HostEvent, join_kernels, split_kineto

torch = pytest.importorskip("torch")


class _Event:
    """The ``_KinetoEvent`` methods the split reads, as torch 2.11 has them (no
    ``activity_type``)."""

    def __init__(self, name, device, corr, linked, start, end, thread=1):
        self._v = (name, device, corr, linked, start, end, thread)

    def name(self):
        return self._v[0]

    def device_type(self):
        return self._v[1]

    def correlation_id(self):
        return self._v[2]

    def linked_correlation_id(self):
        return self._v[3]

    def start_ns(self):
        return self._v[4]

    def end_ns(self):
        return self._v[5]

    def start_thread_id(self):
        return self._v[6]

    def is_user_annotation(self):
        return False


def test_runtime_launches_are_not_host_ops_without_activity_type():
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [
        _Event("roofprof#0", cpu, 1, 0, 0, 100),
        _Event("aten::mm", cpu, 2, 0, 10, 90),
        _Event("roofprof#1", cpu, 3, 0, 200, 300),
        _Event("aten::add", cpu, 4, 0, 210, 290),
        # CUPTI's correlation id 2 collides with aten::mm's id; it links to aten::mm
        _Event("cudaLaunchKernel", cpu, 2, 2, 220, 230),
        _Event("gemm", cuda, 2, 2, 400, 450),
    ]
    assert not hasattr(events[0], "activity_type")
    host, kernels = split_kineto(events, cpu)
    assert [h.name for h in host] == ["roofprof#0", "aten::mm", "roofprof#1", "aten::add"]
    assert [k.name for k in kernels] == ["gemm"]
    joined = join_kernels(host, kernels)
    assert joined.call_s == {0: pytest.approx(50e-9)}


def test_real_cpu_profiler_events_split():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("roofprof#0"):
            _ = torch.randn(16, 16) @ torch.randn(16, 16)
    host, kernels = split_kineto(
        prof.profiler.kineto_results.events(), torch.autograd.DeviceType.CPU
    )
    names = {h.name for h in host}
    assert {"roofprof#0", "aten::mm"} <= names and not kernels
    assert all(isinstance(h, HostEvent) and h.end_ns >= h.start_ns for h in host)
